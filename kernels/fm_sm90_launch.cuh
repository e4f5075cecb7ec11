/* fm_sm90_launch.cuh — per-head-dim launchers of the sm90 forward kernel
 * (private). Each head dim is instantiated in its own translation unit
 * (fm_sm90_hd64.cu, fm_sm90_hd128.cu) so that they compile in parallel.
 *
 * Pipelining modes (template OVERLAP, PINGPONG; fm_sm90_fwd.cuh): the library
 * runs MODE_DEFAULT; the development harness (fm_kernel_bench --sm90-mode)
 * times the others for kernels/PERF_NOTES.md. Partial-tile mask methods
 * (template MASK, FM_SM90_MASK_* of fm_attn_dev.h): every variant runs
 * FM_SM90_MASK_DEFAULT (R2P unless the build defines it, e.g.
 * -DFM_SM90_MASK_DEFAULT=1 in CMAKE_CUDA_FLAGS and CMAKE_C_FLAGS); the other method is built for
 * SKIP in the default mode, plain and instrumented (fm_kernel_bench
 * --sm90-masks, fm_attn_check's method check), and so is WORDS, the
 * forward-only method words (FM_SM90_MASK_WORDS, with its preprocessing
 * words_kernel, launch_words; a launch that asks for it elsewhere runs R2P:
 * fm_sm90.cu, mask_fwd). */
#ifndef FM_SM90_LAUNCH_CUH
#define FM_SM90_LAUNCH_CUH

#include <cuda_runtime.h>

#include "fm_status.h"
#include "fm_sm90_fwd.cuh"

namespace fm90 {

enum mode { MODE_PLAIN = 0, MODE_OVERLAP = 1, MODE_PINGPONG = 2, MODE_BOTH = 3, MODE_DEFAULT = MODE_BOTH };

/* The tensor map of a (B, S, H, D) bf16 tensor read or written in boxes of
 * 64 head-dim elements x `rows` tokens of one (b, h), 128-byte swizzled
 * (fm_hopper.cuh's SW128 atoms); zeros outside the tensor. fm_sm90.cu. */
fm_status tensor_map_bshd(CUtensorMap *map, const void *base, int32_t B, int32_t S, int32_t H, int32_t D,
                          int32_t rows, fm_err *err);
/* The same for elements of elem_bytes (2: bf16, 4: fp32), boxes of 128 bytes x rows. */
fm_status tensor_map_bshd_typed(CUtensorMap *map, const void *base, int elem_bytes, int32_t B, int32_t S,
                                int32_t H, int32_t D, int32_t rows, fm_err *err);

template <int HD> cudaError_t launch(const params &p, int variant, bool instr, int mode, int mask, int grid,
                                     cudaStream_t s);
/* WORDS: enqueues words_kernel over the dense workspace `words` of d's grid
 * (nsets x d.Tr x d.Tc tiles at this head dim's row tile). */
template <int HD> cudaError_t launch_words(const fmd::attn_base &d, int32_t nsets, uint32_t *words, cudaStream_t s);

static_assert(FM_SM90_MASK_DEFAULT == FM_SM90_MASK_SLICES || FM_SM90_MASK_DEFAULT == FM_SM90_MASK_R2P,
              "FM_SM90_MASK_DEFAULT names a mask method (fm_attn_dev.h)");

/* The mask method the library does not use, built for SKIP beside it. */
constexpr int MASK_OTHER = FM_SM90_MASK_DEFAULT == FM_SM90_MASK_R2P ? FM_SM90_MASK_SLICES : FM_SM90_MASK_R2P;

/* Whether mask method `mask` (0: the default) is built for a launch of this
 * variant and mode (plain and instrumented alike; the backward has only the
 * default mode). */
constexpr bool mask_built(int variant, int mode, int mask) {
  return mask == 0 || mask == FM_SM90_MASK_DEFAULT ||
         ((mask == FM_SM90_MASK_SLICES || mask == FM_SM90_MASK_R2P) && variant == FM_VARIANT_SKIP &&
          mode == MODE_DEFAULT);
}
/* The forward's: mask_built, and WORDS for SKIP in the default mode. */
constexpr bool mask_built_fwd(int variant, int mode, int mask) {
  return mask_built(variant, mode, mask) ||
         (mask == FM_SM90_MASK_WORDS && variant == FM_VARIANT_SKIP && mode == MODE_DEFAULT);
}

template <int HD, int VAR, bool INSTR, bool OV, bool PP, int MASK = FM_SM90_MASK_DEFAULT>
cudaError_t launch_one(const params &p, int grid, cudaStream_t s) {
  constexpr int smem = MASK == FM_SM90_MASK_WORDS ? traits<HD>::SMEM_WORDS : traits<HD>::SMEM;
  cudaError_t e = cudaFuncSetAttribute(fwd_kernel<HD, VAR, INSTR, OV, PP, MASK>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  fwd_kernel<HD, VAR, INSTR, OV, PP, MASK><<<grid, traits<HD>::THREADS, smem, s>>>(p);
  return cudaGetLastError();
}

/* The library's kernels: every variant, plain and instrumented, default mode
 * and mask method; the other modes for SKIP only, the other mask method for
 * SKIP in the default mode (timing studies). */
template <int HD>
cudaError_t launch_dispatch(const params &p, int variant, bool instr, int mode, int mask, int grid,
                            cudaStream_t s) {
  constexpr bool OV = (MODE_DEFAULT & MODE_OVERLAP) != 0, PP = (MODE_DEFAULT & MODE_PINGPONG) != 0;
  if (!mask_built_fwd(variant, mode, mask)) return cudaErrorInvalidValue;
  if (mask == FM_SM90_MASK_WORDS)
    return instr ? launch_one<HD, FM_VARIANT_SKIP, true, OV, PP, FM_SM90_MASK_WORDS>(p, grid, s)
                 : launch_one<HD, FM_VARIANT_SKIP, false, OV, PP, FM_SM90_MASK_WORDS>(p, grid, s);
  if (mask == MASK_OTHER)
    return instr ? launch_one<HD, FM_VARIANT_SKIP, true, OV, PP, MASK_OTHER>(p, grid, s)
                 : launch_one<HD, FM_VARIANT_SKIP, false, OV, PP, MASK_OTHER>(p, grid, s);
  if (variant == FM_VARIANT_SKIP && !instr && mode != MODE_DEFAULT) {
    switch (mode) {
      case MODE_PLAIN: return launch_one<HD, FM_VARIANT_SKIP, false, false, false>(p, grid, s);
      case MODE_OVERLAP: return launch_one<HD, FM_VARIANT_SKIP, false, true, false>(p, grid, s);
      case MODE_PINGPONG: return launch_one<HD, FM_VARIANT_SKIP, false, false, true>(p, grid, s);
      case MODE_BOTH: return launch_one<HD, FM_VARIANT_SKIP, false, true, true>(p, grid, s);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (variant) {
    case FM_VARIANT_SKIP:
      return instr ? launch_one<HD, FM_VARIANT_SKIP, true, OV, PP>(p, grid, s)
                   : launch_one<HD, FM_VARIANT_SKIP, false, OV, PP>(p, grid, s);
    case FM_VARIANT_NOSKIP:
      return instr ? launch_one<HD, FM_VARIANT_NOSKIP, true, OV, PP>(p, grid, s)
                   : launch_one<HD, FM_VARIANT_NOSKIP, false, OV, PP>(p, grid, s);
    case FM_VARIANT_DENSE: /* head dim 64: without OVERLAP, whose extra live S tile spills
                              beside the dense mask's row pointers at 160 registers; the
                              same arithmetic per tile in either loop shape, so dense ==
                              noskip bit for bit still holds (fmsim verify checks it) */
      return instr ? launch_one<HD, FM_VARIANT_DENSE, true, OV && HD != 64, PP>(p, grid, s)
                   : launch_one<HD, FM_VARIANT_DENSE, false, OV && HD != 64, PP>(p, grid, s);
    default:
      return cudaErrorInvalidValue;
  }
}

template <int HD>
cudaError_t launch_words_dispatch(const fmd::attn_base &d, int32_t nsets, uint32_t *words, cudaStream_t s) {
  const int64_t tiles = (int64_t)nsets * d.Tr * d.Tc;
  if (tiles < 1 || tiles >= (1ll << 31)) return cudaErrorInvalidValue;
  /* the forward copies traits<HD>::WORDS_BYTES a tile: the workspace's block */
  if (fm90m_words_tile_bytes(consumer_threads<HD>()) != traits<HD>::WORDS_BYTES) return cudaErrorInvalidValue;
  words_kernel<HD><<<(unsigned)tiles, consumer_threads<HD>(), 0, s>>>(d, words);
  return cudaGetLastError();
}

}  // namespace fm90

#endif
