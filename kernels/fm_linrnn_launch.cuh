/* fm_linrnn_launch.cuh — the launchers of the linear-RNN kernels (private to
 * kernels/): the preprocessing (fm_linrnn.cu) and the forward's instantiations,
 * one translation unit per head dim dk (fm_linrnn_hd64.cu, fm_linrnn_hd128.cu). */
#ifndef FM_LINRNN_LAUNCH_CUH
#define FM_LINRNN_LAUNCH_CUH

#include "fm_linrnn.cuh"
#include "fm_linrnn.h"

#ifdef FM_LINRNN_SIM
#define FMLR_LAUNCH(fn, grid, block, smem, stream, arg) \
  sim::launch(dim3(grid), dim3(block), (size_t)(smem), [&] { fn(arg); })
#else
#define FMLR_LAUNCH(fn, grid, block, smem, stream, arg) fn<<<(grid), (block), (smem), (stream)>>>(arg)
#endif

namespace fmlr {

/* The forward of one instantiation: a persistent grid, the CTAs that fit on
 * the sms multiprocessors at once, or max_ctas when positive (the check's
 * small grids, so that a CTA walks several units), never more than the
 * largest unit count. */
template <int DK, int C, int NW, bool INSTR, bool STATES = false>
cudaError_t launch_fwd(const params &p, int sms, int max_ctas, cudaStream_t s) {
  using K = cfg<DK, C, NW, STATES>;
  auto kernel = fwd_kernel<DK, C, NW, INSTR, STATES>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, K::SMEM);
  if (e != cudaSuccess) return e;
  const int64_t most = (int64_t)p.nchunks * p.H * p.ndvb, fit = max_ctas > 0 ? max_ctas : (int64_t)sms * K::MINB;
  const unsigned grid = (unsigned)(most < fit ? most : fit);
  FMLR_LAUNCH(kernel, grid, K::NT, K::SMEM, s, p);
  return cudaGetLastError();
}

/* The instantiations of head dim DK: C 64 with 4 warps, C 128 with 4 or 8. */
template <int DK>
cudaError_t launch_fwd_dk(const params &p, int nw, bool instr, int sms, int max_ctas, cudaStream_t s) {
  if (p.C == 64)
    return instr ? launch_fwd<DK, 64, 4, true>(p, sms, max_ctas, s) : launch_fwd<DK, 64, 4, false>(p, sms, max_ctas, s);
  if (nw == 8)
    return instr ? launch_fwd<DK, 128, 8, true>(p, sms, max_ctas, s) : launch_fwd<DK, 128, 8, false>(p, sms, max_ctas, s);
  return instr ? launch_fwd<DK, 128, 4, true>(p, sms, max_ctas, s) : launch_fwd<DK, 128, 4, false>(p, sms, max_ctas, s);
}

cudaError_t launch_fwd_dk64(const params &p, int nw, bool instr, int sms, int max_ctas, cudaStream_t s);
cudaError_t launch_fwd_dk128(const params &p, int nw, bool instr, int sms, int max_ctas, cudaStream_t s);
/* The two-pass path (dk 128, C 128; in fm_linrnn_hd128.cu): the
 * state pass (fwd_kernel built for MODE_STATES) and the output kernel (fm_linrnn_wg.cuh). */
cudaError_t launch_states_dk128(const params &p, int nw, int sms, int max_ctas, cudaStream_t s);
cudaError_t launch_out_wg(const params &p, bool instr, int sms, cudaStream_t s);

/* The preprocessing: grid (nchunks, H + 1), C threads; then the compact lists
 * of items and checkpoints (one block). */
inline cudaError_t launch_prep(const params &p, cudaStream_t s) {
  const dim3 grid((unsigned)p.nchunks, (unsigned)p.H + 1);
  auto k64 = prep_kernel<64>;
  auto k128 = prep_kernel<128>;
  if (p.C == 64) FMLR_LAUNCH(k64, grid, 64, prep_smem(64), s, p);
  else FMLR_LAUNCH(k128, grid, 128, prep_smem(128), s, p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  FMLR_LAUNCH(items_kernel, 1, 1024, 4 * 32 * 4, s, p);
  return cudaGetLastError();
}

/* The checkpoints' scan: one thread per (head, state element). */
inline cudaError_t launch_scan(const params &p, cudaStream_t s) {
  const int64_t n = (int64_t)p.H * p.dk * p.dv;
  FMLR_LAUNCH(ckpt_scan_kernel, (unsigned)((n + 255) / 256), 256, 0, s, p);
  return cudaGetLastError();
}

}  // namespace fmlr

/* Whether fm_linrnn_forward takes the two-pass path for p (fm_linrnn.h): for
 * the check, whose emulated record depends on the path. */
bool fm_linrnn_two_pass(const fm_linrnn_problem *p);

/* fm_linrnn_forward with the checkpoint spacing chosen by the caller (kseg
 * chunks, 0 none, -1 the library's choice: fm_linrnn.cu, auto_kseg) and the
 * forward's grid capped at max_ctas CTAs (0: the library's). For the check,
 * which runs every path. */
fm_status fm_linrnn_forward_tuned(const fm_linrnn_problem *p, fm_linrnn_variant variant, int instrumented, int kseg,
                                  int max_ctas, void *stream, fm_err *err);

#endif
