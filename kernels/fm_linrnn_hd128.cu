/* fm_linrnn_hd128.cu — the linear-RNN forward's instantiations at head dim dk = 128
 * (fm_linrnn_launch.cuh). */
#include "fm_linrnn_launch.cuh"
#include "fm_linrnn_wg.cuh"

cudaError_t fmlr::launch_fwd_dk128(const params &p, int nw, bool instr, int sms, int max_ctas, cudaStream_t s) {
  return launch_fwd_dk<128>(p, nw, instr, sms, max_ctas, s);
}

cudaError_t fmlr::launch_states_dk128(const params &p, int nw, int sms, int max_ctas, cudaStream_t s) {
  return nw == 8 ? launch_fwd<128, 128, 8, false, true>(p, sms, max_ctas, s)
                 : launch_fwd<128, 128, 4, false, true>(p, sms, max_ctas, s);
}

cudaError_t fmlr::launch_out_wg(const params &p, bool instr, cudaStream_t s) {
  return instr ? wg::launch_out<true>(p, s) : wg::launch_out<false>(p, s);
}
