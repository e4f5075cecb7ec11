/* fm_sm80_launch.cuh — per-head-dim launchers of the sm80 forward kernel (private).
 * Each head dim is instantiated in its own translation unit (fm_sm80_hd64.cu,
 * fm_sm80_hd128.cu) so that the six kernels of each compile in parallel. */
#ifndef FM_SM80_LAUNCH_CUH
#define FM_SM80_LAUNCH_CUH

#include <cuda_runtime.h>

#include "fm_sm80_fwd.cuh"

namespace fmk {

/* Launches fwd_kernel<HD, variant, instr> on grid (Tr, B * H); returns the launch error. */
template <int HD> cudaError_t launch_fwd(const fwd_params &p, int variant, bool instr, cudaStream_t s);
template <> cudaError_t launch_fwd<64>(const fwd_params &p, int variant, bool instr, cudaStream_t s);
template <> cudaError_t launch_fwd<128>(const fwd_params &p, int variant, bool instr, cudaStream_t s);

/* Shared by the launchers: raise the dynamic shared-memory limit, then launch. */
template <int HD, int VAR, bool INSTR>
cudaError_t launch_one(const fwd_params &p, cudaStream_t s) {
  constexpr int smem = smem_bytes<HD>();
  cudaError_t e = cudaFuncSetAttribute(fwd_kernel<HD, VAR, INSTR>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid((unsigned)p.Tr, (unsigned)(p.B * p.H));
  fwd_kernel<HD, VAR, INSTR><<<grid, NTHREADS, smem, s>>>(p);
  return cudaGetLastError();
}

template <int HD> cudaError_t launch_dispatch(const fwd_params &p, int variant, bool instr, cudaStream_t s) {
  switch (variant) {
    case FM_VARIANT_SKIP:
      return instr ? launch_one<HD, FM_VARIANT_SKIP, true>(p, s) : launch_one<HD, FM_VARIANT_SKIP, false>(p, s);
    case FM_VARIANT_NOSKIP:
      return instr ? launch_one<HD, FM_VARIANT_NOSKIP, true>(p, s) : launch_one<HD, FM_VARIANT_NOSKIP, false>(p, s);
    case FM_VARIANT_DENSE:
      return instr ? launch_one<HD, FM_VARIANT_DENSE, true>(p, s) : launch_one<HD, FM_VARIANT_DENSE, false>(p, s);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace fmk

#endif
