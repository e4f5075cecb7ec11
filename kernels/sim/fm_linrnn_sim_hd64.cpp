/* The emulated build of kernels/fm_linrnn_hd64.cu (FM_LINRNN_SIM, kernels/fm_linrnn_sim.h): the
 * real source compiled as host C++ for the CPU check (tests/CMakeLists.txt, linrnn_emulated). */
#include "fm_linrnn_hd64.cu"
