/* fm_device.cuh — small device helpers shared by the kernels (private to
 * kernels/): the exp2 the softmax uses, bf16 packing, the interval set of a
 * (batch, head), the 8 bounds of a key tile, the shape every launch carries,
 * and the warp walk that compacts visited tiles into a stream. */
#ifndef FM_DEVICE_CUH
#define FM_DEVICE_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "fm_tile_rule.h"

namespace fmd {

/* 2^x by the special-function unit (flush to zero; -inf gives 0). */
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* Two floats as a bf16x2 register (round to nearest even); lo in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* Eight fp32 accumulators (two columns of four rows' pairs) as an A fragment of
 * bf16 pairs: a[i] = (x[2 i], x[2 i + 1]). */
__device__ __forceinline__ void pack_frag(const float *x, uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; i++) a[i] = pack_bf16(x[2 * i], x[2 * i + 1]);
}

/* Every element of a register array of accumulators to 0. */
template <int M, int N, int K> __device__ __forceinline__ void zero(float (&a)[M][N][K]) {
#pragma unroll
  for (int m = 0; m < M; m++)
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
      for (int k = 0; k < K; k++) a[m][n][k] = 0.f;
}

/* What every launch carries, whatever the kernel and pass (the base of each
 * kernel's parameter struct; fm_attn.cu fills it once, in prepare): the shape
 * (Tr x Tc tiles at the pass's own tile, interval sets nb x nh), the softmax
 * scale (and scale * log2 e), the mask in the variant's form and the
 * instrumentation buffers. Device pointers; NULL where the variant or build
 * has none. */
struct attn_base {
  int32_t B, H, Sq, Sk, Tr, Tc;
  int32_t nb, nh, causal;
  float scale, scale_log2;
  const int32_t *intervals;     /* (nsets, 4, Sk) LTS, LTE, UTS, UTE; NULL for DENSE */
  const fm_tile_bounds *bounds; /* (nsets, Tc) at the pass's key tile; NULL for DENSE */
  const uint8_t *dense;         /* (dense sets, Sq, Sk) 1 = masked; DENSE only */
  int64_t dense_set_stride;     /* elements between dense sets: 0 (one shared) or Sq * Sk */
  uint8_t *tile_class;          /* (B, H, Tr, Tc) FM_TILE_*, INSTR only */
  int64_t *tile_cycles;         /* (B, H, Tr, Tc) clock64 ticks, INSTR only */
};

/* The interval set of (b, h): sets broadcast over the batch and heads they cover. */
__device__ __forceinline__ int set_of(const attn_base &d, int b, int h) {
  return (d.nb == 1 ? 0 : b) * d.nh + (d.nh == 1 ? 0 : h);
}

/* The 8 bounds of a key tile, read as two 16-byte loads. */
__device__ __forceinline__ fm_tile_bounds load_bounds(const fm_tile_bounds *p) {
  const int4 *bp = reinterpret_cast<const int4 *>(p);
  const int4 lo = __ldg(bp), hi = __ldg(bp + 1);
  return fm_tile_bounds{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
}

/* A warp walks candidates 0 .. n-1, 32 a step: decide(i, &flags) says (per
 * lane) whether candidate i is kept and its flags; the kept ones are emitted in
 * order, emit(i, flags, last), each once the next kept one (or the end) is
 * known, so that the last carries last = true; none kept: emit(-1, 0, true).
 * Every lane calls emit with the same arguments. */
template <class Decide, class Emit>
__device__ __forceinline__ void warp_compact(int n, Decide decide, Emit emit) {
  const int lane = threadIdx.x & 31;
  int32_t pend = -1, pend_flags = 0;
  for (int base = 0; base < n; base += 32) {
    int32_t fl = 0;
    const bool keep = base + lane < n && decide(base + lane, &fl);
    unsigned bal = __ballot_sync(0xffffffffu, keep);
    while (bal) {
      const int src = __ffs(bal) - 1;
      bal &= bal - 1;
      const int32_t f = __shfl_sync(0xffffffffu, fl, src);
      if (pend >= 0) emit(pend, pend_flags, false);
      pend = base + src;
      pend_flags = f;
    }
  }
  emit(pend, pend_flags, true);
}

}  // namespace fmd

#endif
