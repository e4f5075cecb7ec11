/* cuda_runtime_api.h for the emulated build (FM_LINRNN_SIM): the host emulation in its place. */
#include "fm_linrnn_sim.h"
