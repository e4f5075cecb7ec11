/* fm_linrnn_hd64.cu — the linear-RNN forward's instantiations at head dim dk = 64
 * (fm_linrnn_launch.cuh). */
#include "fm_linrnn_launch.cuh"

cudaError_t fmlr::launch_fwd_dk64(const params &p, int nw, bool instr, int sms, int max_ctas, cudaStream_t s) {
  return launch_fwd_dk<64>(p, nw, instr, sms, max_ctas, s);
}
