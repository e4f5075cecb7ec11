/* fm_sm80_fwd.cuh — the portable (mma.sync) FlashMask forward kernel (private to kernels/).
 *
 * FlashAttention-2 forward (Algorithm 1) extended with FlashMask tile
 * classification (FlashMask Algorithm 1). One CTA = 4 warps = 128 threads owns
 * one row tile of BR = 128 query rows of one (batch, head); warp w owns rows
 * 32w .. 32w+31 (two m16 MMA tiles). Per key tile of BC columns:
 *   S = Q K^T      mma.sync m16n8k16 bf16 -> fp32, operands by ldmatrix from
 *                  XOR-swizzled shared memory (16-byte chunks, chunk ^ (row & 7))
 *   mask           per the tile's class (below)
 *   online softmax fp32, exp2 with the scale folded in, running max per row
 *   O += P V       P rounded to bf16 in registers (no shared-memory round trip),
 *                  V by ldmatrix.trans
 * K, V (and the tile's 4 interval vectors when it needs them) are fetched with
 * cp.async into a 2-stage ring: tile n+1 loads while tile n computes. Q is
 * loaded once; O is staged through Q's shared memory for 16-byte stores.
 *
 * Variants (template parameter VAR):
 *   FM_VARIANT_SKIP    the CTA first classifies every key tile with the min/max
 *                      rule (fm_classify_minmax on the 8 bounds of the tile and
 *                      the CTA's real rows) and builds, in shared memory, the
 *                      ordered list of tiles that are not MASKED; only those are
 *                      loaded and computed. PARTIAL tiles apply the element mask
 *                      from the column vectors (effective upper interval, causal
 *                      folded, fm_tile_rule.h); UNMASKED tiles do no mask work
 *                      (the last key tile still masks columns >= Sk).
 *   FM_VARIANT_NOSKIP  the same, but every tile is in the list; a MASKED tile is
 *                      computed like a PARTIAL one, its scores all become -inf,
 *                      the row max does not move, the rescale factor is exactly
 *                      1 and P is exactly 0: the tile adds exactly nothing, so
 *                      O and LSE are bit-identical to SKIP.
 *   FM_VARIANT_DENSE   no bounds, no classes: every tile is visited and every
 *                      element reads its mask byte from an (Sq, Sk) uint8 array
 *                      in global memory (the paper's dense-mask baseline).
 *                      With the same mask its output is bit-identical to NOSKIP.
 * Instrumentation (template parameter INSTR): each CTA writes the class of every
 * tile of its row (as it classified it; DENSE writes PARTIAL) and, for every
 * visited tile, the clock64 cycles warp 0 spent on it (wait for its loads,
 * compute, barrier); skipped tiles get 0 cycles.
 *
 * Rows with no visible key: the running max stays -inf, p = exp2(-inf) = 0, the
 * row sum stays 0, and the epilogue writes O = 0 and LSE = -inf (never NaN).
 */
#ifndef FM_SM80_FWD_CUH
#define FM_SM80_FWD_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fm_attn.h"
#include "fm_device.cuh"
#include "fm_tile_rule.h"

namespace fmk {

constexpr int BR = 128;       /* query rows per CTA */
constexpr int NWARPS = 4;
constexpr int NTHREADS = 128;
constexpr int LISTCAP = 2048; /* key tiles classified per chunk (shared-memory list) */
constexpr int CTAS_PER_SM = 2; /* __launch_bounds__ minimum (FM_SM80_CTAS_PER_SM, fm_sm80.cu) */

/* Key columns per tile. Head dim 64 also takes 64: with 128 (FA2's choice) the
 * 128 fp32 scores per thread left ptxas packing the element-mask predicates
 * into bit fields (about 2000 LOP3 per tile), and partial tiles ran at 46% of
 * the full-mask rate (random eviction, 32K, H200). */
template <int HD> struct tile_cfg;
template <> struct tile_cfg<128> { static constexpr int BC = 64; };
template <> struct tile_cfg<64> { static constexpr int BC = 64; };

struct fwd_params : fmd::attn_base {
  const __nv_bfloat16 *q, *k, *v; /* (B, S, H, D) bf16 */
  __nv_bfloat16 *o;               /* (B, Sq, H, D) bf16 */
  float *lse;                     /* (B, H, Sq) fp32 */
};

/* Dynamic shared memory of one CTA (bytes). */
template <int HD> constexpr int smem_bytes() {
  return (BR * HD + 4 * tile_cfg<HD>::BC * HD) * 2 /* Q, K x2, V x2 (bf16) */
         + 2 * 4 * tile_cfg<HD>::BC * 4            /* interval vectors x2 (int32) */
         + LISTCAP * 4;                            /* tile list */
}

/* ---------------------------------------------------------------- PTX helpers */

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte async copy; src_bytes = 0 zero-fills the destination. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1,
                                            uint32_t &r2, uint32_t &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t &r0, uint32_t &r1,
                                                  uint32_t &r2, uint32_t &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

/* D += A B, m16n8k16, bf16 inputs, fp32 accumulators. */
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

using fmd::fast_exp2;
using fmd::pack_bf16;

/* An entry of the CTA's list of visited key tiles: the tile index in the low
 * bits, its class (FM_TILE_*) above LIST_CLASS_SHIFT. */
enum : int32_t { LIST_CLASS_SHIFT = 28, LIST_TILE_MASK = (1 << LIST_CLASS_SHIFT) - 1 };
__device__ __forceinline__ int32_t list_entry(int32_t tile, int cls) { return tile | (cls << LIST_CLASS_SHIFT); }
__device__ __forceinline__ int32_t list_tile(int32_t e) { return e & LIST_TILE_MASK; }
__device__ __forceinline__ int list_class(int32_t e) { return e >> LIST_CLASS_SHIFT; }

/* Element offset of 16-byte chunk `chunk` of row `row` in a swizzled (rows, HD) tile. */
template <int HD> __device__ __forceinline__ int swz(int row, int chunk) {
  return row * HD + ((chunk ^ (row & 7)) << 3);
}

/* Async copy of rows [0, rows) of a (rows, HD) bf16 tile; rows >= nvalid are zero-filled. */
template <int HD, int ROWS>
__device__ __forceinline__ void load_tile(__nv_bfloat16 *s, const __nv_bfloat16 *g,
                                          int64_t row_stride, int nvalid, int tid) {
  constexpr int CHUNKS = HD / 8;
  constexpr int TOTAL = ROWS * CHUNKS;
  static_assert(TOTAL % NTHREADS == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int it = 0; it < TOTAL / NTHREADS; it++) {
    int idx = it * NTHREADS + tid;
    int r = idx / CHUNKS, c = idx % CHUNKS;
    bool ok = r < nvalid;
    const __nv_bfloat16 *src = ok ? g + (int64_t)r * row_stride + c * 8 : g;
    cp_async16(smem_u32(s + swz<HD>(r, c)), src, ok ? 16 : 0);
  }
}

/* Element mask of a PARTIAL tile (or of a MASKED one in NOSKIP): column j of
 * the tile hides row i when i is in [LTS_j, LTE_j) or in the effective upper
 * interval (causal folded, fm_effective_upper); columns >= Sk hide every row.
 * vec is the tile's (4, BC) int32 LTS, LTE, UTS, UTE in shared memory; i0 is
 * the thread's first row (r0 + 32 * warp + lane / 4). Branch-free: selects. */
template <int BC, int NB_S, bool CAUSAL>
__device__ __forceinline__ void mask_intervals(float (&s)[2][NB_S][4], const int32_t *vec, int j0,
                                               int i0, int c4, int Sq, int Sk) {
#pragma unroll
  for (int n8 = 0; n8 < NB_S; n8++) {
    const int jj = n8 * 8 + 2 * c4;
    const int2 lts2 = *reinterpret_cast<const int2 *>(vec + jj);
    const int2 lte2 = *reinterpret_cast<const int2 *>(vec + BC + jj);
    const int2 uts2 = *reinterpret_cast<const int2 *>(vec + 2 * BC + jj);
    const int2 ute2 = *reinterpret_cast<const int2 *>(vec + 3 * BC + jj);
#pragma unroll
    for (int cc = 0; cc < 2; cc++) {
      const int j = j0 + jj + cc;
      int32_t lts = cc ? lts2.y : lts2.x, lte = cc ? lte2.y : lte2.x;
      int32_t us, ue;
      fm_effective_upper(cc ? uts2.y : uts2.x, cc ? ute2.y : ute2.x, CAUSAL, j, Sq, Sk, &us, &ue);
      const bool col_out = j >= Sk; /* no such key: hide it from every row */
      lts = col_out ? INT32_MIN : lts;
      lte = col_out ? INT32_MAX : lte;
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
          const int i = i0 + mi * 16 + hr * 8;
          float &x = s[mi][n8][hr * 2 + cc];
          x = fm_masked_effective(i, lts, lte, us, ue) ? -INFINITY : x;
        }
    }
  }
}

/* -------------------------------------------------------------- forward kernel */

enum { MASK_NONE = 0, MASK_COLS = 1, MASK_INTERVALS = 2, MASK_DENSE = 3 };

/* The kernel in phases (FlashAttention-2's forward with FlashMask's list of
 * visited tiles): classify_chunk builds the list of a chunk of key tiles,
 * issue_tile starts a tile's loads into the cp.async ring, and each visited
 * tile goes through scores, apply_mask, softmax_rescale and accumulate_pv;
 * epilogue writes O and LSE. The tiles of all classes run through one loop
 * (the list interleaves PARTIAL and UNMASKED tiles; apply_mask picks the work
 * per tile). The phases are inlined into one program whose SASS is that of the
 * kernel written as one function, which holds only while the kernel's frame
 * stays the same: the accumulators (acc, row_max, row_sum) and the fragment
 * arrays (s, a, pa) are declared in fwd_kernel and passed by reference, each
 * phase reads p's fields where the one function did, and the declaration
 * orders (keep and cls in classify_chunk, c0 and iter in fwd_kernel) are the
 * ones that keep ptxas's register assignment; kernels/PERF_NOTES.md, "Kernels
 * in phases", has the rules and the check. */

/* The CTA's row tile and its shared memory, fixed for the kernel. */
template <int HD> struct cta {
  __nv_bfloat16 *sQ, *sK, *sV; /* (BR, HD); 2 x (BC, HD); 2 x (BC, HD) */
  int32_t *sVec, *sList;       /* 2 x (4, BC) interval vectors; (LISTCAP,) visited tiles */
  int tid, warp, lane, g, c4;
  int rt, b, h, r0, r1, set;   /* row tile, batch, head, its rows [r0, r1), interval set */
  int64_t row_stride;          /* elements between consecutive tokens */
  const __nv_bfloat16 *gQ, *gK, *gV;
  const int32_t *gVec;
  int64_t instr_base;          /* INSTR: the row's first tile in tile_class, tile_cycles */
};

/* Classifies key tiles [c0, c1) with the min/max rule and writes the ordered
 * list of the visited ones (tile and class) to c.sList; returns their number.
 * INSTR: every tile's class, and 0 cycles for the skipped ones. */
template <int HD, int VAR, bool INSTR>
__device__ __forceinline__ int classify_chunk(const fwd_params &p, const cta<HD> &c, int32_t *sWarpCount, int c0,
                                              int c1) {
  int count = 0;
  for (int base = c0; base < c1; base += NTHREADS) {
    const int t = base + c.tid;
    int cls = FM_TILE_PARTIAL;
    bool keep = false;
    if (t < c1) {
      if (VAR == FM_VARIANT_DENSE) {
        keep = true;
      } else {
        const fm_tile_bounds tb = fmd::load_bounds(p.bounds + (int64_t)c.set * p.Tc + t);
        cls = fm_classify_minmax(&tb, c.r0, c.r1);
        keep = VAR == FM_VARIANT_NOSKIP || cls != FM_TILE_MASKED;
      }
      if (INSTR) {
        p.tile_class[c.instr_base + t] = (uint8_t)cls;
        if (!keep) p.tile_cycles[c.instr_base + t] = 0;
      }
    }
    const unsigned bal = __ballot_sync(0xffffffffu, keep);
    if (c.lane == 0) sWarpCount[c.warp] = __popc(bal);
    __syncthreads();
    int off = count, total = 0;
#pragma unroll
    for (int w = 0; w < NWARPS; w++) {
      int cw = sWarpCount[w];
      off += w < c.warp ? cw : 0;
      total += cw;
    }
    if (keep) c.sList[off + __popc(bal & ((1u << c.lane) - 1u))] = list_entry(t, cls);
    count += total;
    __syncthreads();
  }
  return count;
}

/* Issues the async loads of key tile `e` (list entry) into stage `st`: K, V and,
 * unless the tile is UNMASKED, its 4 interval vectors. */
template <int HD, int VAR>
__device__ __forceinline__ void issue_tile(const fwd_params &p, const cta<HD> &c, int32_t e, int st) {
  constexpr int BC = tile_cfg<HD>::BC;
  const int t = list_tile(e), cls = list_class(e);
  const int j0 = t * BC, nvalid = min(BC, p.Sk - j0);
  load_tile<HD, BC>(c.sK + st * BC * HD, c.gK + (int64_t)j0 * c.row_stride, c.row_stride, nvalid, c.tid);
  load_tile<HD, BC>(c.sV + st * BC * HD, c.gV + (int64_t)j0 * c.row_stride, c.row_stride, nvalid, c.tid);
  if (VAR != FM_VARIANT_DENSE && cls != FM_TILE_UNMASKED) {
#pragma unroll
    for (int it = 0; it < (4 * BC) / NTHREADS; it++) {
      int idx = it * NTHREADS + c.tid, v = idx / BC, jj = idx % BC;
      bool ok = jj < nvalid;
      const int32_t *src = ok ? c.gVec + (int64_t)v * p.Sk + j0 + jj : c.gVec;
      cp_async4(smem_u32(c.sVec + st * 4 * BC + idx), src, ok ? 4 : 0);
    }
  }
}

/* S = Q K^T (raw scores, fp32) of the warp's 32 rows and the tile's BC keys; a
 * holds the Q fragments of one k-step. */
template <int HD>
__device__ __forceinline__ void scores(float (&s)[2][tile_cfg<HD>::BC / 8][4], uint32_t (&a)[2][4],
                                       const cta<HD> &c, const __nv_bfloat16 *cK) {
  constexpr int BC = tile_cfg<HD>::BC;
  const int warp = c.warp, lane = c.lane;
  fmd::zero(s);
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
      const int row = warp * 32 + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const int chunk = kk * 2 + (lane >> 4);
      ldmatrix_x4(smem_u32(c.sQ + swz<HD>(row, chunk)), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
    }
#pragma unroll
    for (int nj = 0; nj < BC / 16; nj++) {
      const int row = nj * 16 + (lane & 7) + (lane >> 4) * 8;
      const int chunk = kk * 2 + ((lane >> 3) & 1);
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(smem_u32(cK + swz<HD>(row, chunk)), b0, b1, b2, b3);
#pragma unroll
      for (int mi = 0; mi < 2; mi++) {
        mma_bf16(s[mi][2 * nj], a[mi], b0, b1);
        mma_bf16(s[mi][2 * nj + 1], a[mi], b2, b3);
      }
    }
  }
}

/* The tile's mask, by its class: the element mask from the interval vectors in
 * stage st (PARTIAL, and every class in NOSKIP), the columns >= Sk only (an
 * UNMASKED last tile), nothing (other UNMASKED tiles) or the dense mask's bytes. */
template <int HD, int VAR>
__device__ __forceinline__ void apply_mask(float (&s)[2][tile_cfg<HD>::BC / 8][4], const fwd_params &p,
                                           const cta<HD> &c, int cls, int j0, int st) {
  constexpr int BC = tile_cfg<HD>::BC;
  constexpr int NB_S = BC / 8;
  const int warp = c.warp, g = c.g, c4 = c.c4, r0 = c.r0;
  int mode;
  if (VAR == FM_VARIANT_DENSE) mode = MASK_DENSE;
  else if (cls != FM_TILE_UNMASKED) mode = MASK_INTERVALS;
  else mode = (j0 + BC > p.Sk) ? MASK_COLS : MASK_NONE;
  if (mode == MASK_INTERVALS) {
    const int32_t *vec = c.sVec + st * 4 * BC;
    if (p.causal)
      mask_intervals<BC, NB_S, true>(s, vec, j0, r0 + warp * 32 + g, c4, p.Sq, p.Sk);
    else
      mask_intervals<BC, NB_S, false>(s, vec, j0, r0 + warp * 32 + g, c4, p.Sq, p.Sk);
  } else if (mode == MASK_COLS) {
#pragma unroll
    for (int n8 = 0; n8 < NB_S; n8++)
#pragma unroll
      for (int cc = 0; cc < 2; cc++) {
        const bool col_out = j0 + n8 * 8 + 2 * c4 + cc >= p.Sk;
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
          for (int hr = 0; hr < 2; hr++)
            s[mi][n8][hr * 2 + cc] = col_out ? -INFINITY : s[mi][n8][hr * 2 + cc];
      }
  } else if (mode == MASK_DENSE) {
    const uint8_t *dmask = p.dense + (int64_t)c.set * p.dense_set_stride;
#pragma unroll
    for (int n8 = 0; n8 < NB_S; n8++)
#pragma unroll
      for (int cc = 0; cc < 2; cc++) {
        const int j = j0 + n8 * 8 + 2 * c4 + cc;
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
          for (int hr = 0; hr < 2; hr++) {
            const int i = r0 + warp * 32 + mi * 16 + hr * 8 + g;
            bool masked = j >= p.Sk;
            if (!masked && i < p.Sq) masked = __ldg(dmask + (int64_t)i * p.Sk + j) != 0;
            s[mi][n8][hr * 2 + cc] = masked ? -INFINITY : s[mi][n8][hr * 2 + cc];
          }
      }
  }
}

/* Online softmax of the tile: running max per row, O and the row sum rescaled,
 * S becomes p = exp2(s * scale_log2 - m * scale_log2) in place. */
template <int HD>
__device__ __forceinline__ void softmax_rescale(float (&s)[2][tile_cfg<HD>::BC / 8][4], float (&acc)[2][HD / 8][4],
                                                float (&row_max)[2][2], float (&row_sum)[2][2], const fwd_params &p) {
  constexpr int NB_S = tile_cfg<HD>::BC / 8;
#pragma unroll
  for (int mi = 0; mi < 2; mi++) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      float mx = row_max[mi][hr];
#pragma unroll
      for (int n8 = 0; n8 < NB_S; n8++)
        mx = fmaxf(mx, fmaxf(s[mi][n8][hr * 2], s[mi][n8][hr * 2 + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float old = row_max[mi][hr];
      /* exactly 1 when the max does not move (a fully masked tile changes nothing) */
      const float alpha = (mx == old) ? 1.f : fast_exp2((old - mx) * p.scale_log2);
      const float ms = (mx == -INFINITY) ? 0.f : mx * p.scale_log2;
      row_max[mi][hr] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n8 = 0; n8 < NB_S; n8++) {
#pragma unroll
        for (int cc = 0; cc < 2; cc++) {
          float v = fast_exp2(fmaf(s[mi][n8][hr * 2 + cc], p.scale_log2, -ms));
          s[mi][n8][hr * 2 + cc] = v;
          sum += v;
        }
      }
      row_sum[mi][hr] = row_sum[mi][hr] * alpha + sum;
#pragma unroll
      for (int n = 0; n < HD / 8; n++) {
        acc[mi][n][hr * 2] *= alpha;
        acc[mi][n][hr * 2 + 1] *= alpha;
      }
    }
  }
}

/* O += P V: P rounded to bf16 A fragments pa (the fp32 scores die here), V by
 * ldmatrix.trans from stage cV. */
template <int HD>
__device__ __forceinline__ void accumulate_pv(float (&acc)[2][HD / 8][4],
                                              uint32_t (&pa)[2][tile_cfg<HD>::BC / 16][4],
                                              const float (&s)[2][tile_cfg<HD>::BC / 8][4], const cta<HD> &c,
                                              const __nv_bfloat16 *cV) {
  constexpr int BC = tile_cfg<HD>::BC;
  const int lane = c.lane;
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) {
      pa[mi][kk][0] = pack_bf16(s[mi][2 * kk][0], s[mi][2 * kk][1]);
      pa[mi][kk][1] = pack_bf16(s[mi][2 * kk][2], s[mi][2 * kk][3]);
      pa[mi][kk][2] = pack_bf16(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
      pa[mi][kk][3] = pack_bf16(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
    }
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) {
#pragma unroll
    for (int dj = 0; dj < HD / 16; dj++) {
      const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const int chunk = dj * 2 + (lane >> 4);
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(smem_u32(cV + swz<HD>(row, chunk)), b0, b1, b2, b3);
#pragma unroll
      for (int mi = 0; mi < 2; mi++) {
        mma_bf16(acc[mi][2 * dj], pa[mi][kk], b0, b1);
        mma_bf16(acc[mi][2 * dj + 1], pa[mi][kk], b2, b3);
      }
    }
  }
}

/* O = acc / l (0 for rows with no visible key), LSE = m * scale + log l; O
 * staged in bf16 through sQ for 16-byte stores. */
template <int HD>
__device__ __forceinline__ void epilogue(const fwd_params &p, const cta<HD> &c, float (&acc)[2][HD / 8][4],
                                         const float (&row_max)[2][2], const float (&row_sum)[2][2]) {
  constexpr int NB_O = HD / 8;
  const int warp = c.warp, g = c.g, c4 = c.c4, r0 = c.r0;
#pragma unroll
  for (int mi = 0; mi < 2; mi++) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      float l = row_sum[mi][hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
      for (int n = 0; n < NB_O; n++) {
        acc[mi][n][hr * 2] *= inv;
        acc[mi][n][hr * 2 + 1] *= inv;
      }
      const int row = warp * 32 + mi * 16 + hr * 8 + g;
      if (c4 == 0 && r0 + row < p.Sq) {
        const float lse = l > 0.f ? row_max[mi][hr] * p.scale + logf(l) : -INFINITY;
        p.lse[((int64_t)c.b * p.H + c.h) * p.Sq + r0 + row] = lse;
      }
    }
  }
  /* stage O (bf16) through sQ: each warp writes only its own 32 rows, which only
   * it has read, but a CTA that visited no tile never waited on cp.async: sync. */
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int n = 0; n < NB_O; n++)
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        const int row = warp * 32 + mi * 16 + hr * 8 + g;
        uint32_t v = pack_bf16(acc[mi][n][hr * 2], acc[mi][n][hr * 2 + 1]);
        *reinterpret_cast<uint32_t *>(c.sQ + swz<HD>(row, n) + 2 * c4) = v;
      }
  __syncthreads();
  constexpr int CHUNKS = HD / 8;
  __nv_bfloat16 *gO = p.o + ((int64_t)c.b * p.Sq + r0) * c.row_stride + (int64_t)c.h * HD;
#pragma unroll
  for (int it = 0; it < BR * CHUNKS / NTHREADS; it++) {
    const int idx = it * NTHREADS + c.tid, r = idx / CHUNKS, cc = idx % CHUNKS;
    if (r0 + r < p.Sq)
      *reinterpret_cast<int4 *>(gO + (int64_t)r * c.row_stride + cc * 8) =
          *reinterpret_cast<const int4 *>(c.sQ + swz<HD>(r, cc));
  }
}

template <int HD, int VAR, bool INSTR>
__global__ void __launch_bounds__(NTHREADS, CTAS_PER_SM) fwd_kernel(const fwd_params p) {
  constexpr int BC = tile_cfg<HD>::BC;
  constexpr int NB_S = BC / 8; /* n8 blocks of S per row tile */
  constexpr int NB_O = HD / 8; /* n8 blocks of O */

  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int32_t sWarpCount[NWARPS];
  cta<HD> c;
  c.sQ = reinterpret_cast<__nv_bfloat16 *>(smem_raw);
  c.sK = c.sQ + BR * HD;
  c.sV = c.sK + 2 * BC * HD;
  c.sVec = reinterpret_cast<int32_t *>(c.sV + 2 * BC * HD);
  c.sList = c.sVec + 2 * 4 * BC;
  c.tid = threadIdx.x, c.warp = c.tid >> 5, c.lane = c.tid & 31;
  c.g = c.lane >> 2, c.c4 = c.lane & 3;
  c.rt = p.Tr - 1 - (int)blockIdx.x; /* heaviest row tiles of causal masks first */
  const int bh = blockIdx.y;
  c.b = bh / p.H, c.h = bh % p.H;
  c.r0 = c.rt * BR, c.r1 = min(c.r0 + BR, p.Sq);
  c.set = fmd::set_of(p, c.b, c.h);
  c.row_stride = (int64_t)p.H * HD;
  c.gQ = p.q + ((int64_t)c.b * p.Sq + c.r0) * c.row_stride + (int64_t)c.h * HD;
  c.gK = p.k + (int64_t)c.b * p.Sk * c.row_stride + (int64_t)c.h * HD;
  c.gV = p.v + (int64_t)c.b * p.Sk * c.row_stride + (int64_t)c.h * HD;
  c.gVec = p.intervals ? p.intervals + (int64_t)c.set * 4 * p.Sk : nullptr;
  c.instr_base = (((int64_t)c.b * p.H + c.h) * p.Tr + c.rt) * (int64_t)p.Tc;

  float acc[2][NB_O][4];
  fmd::zero(acc);
  float row_max[2][2], row_sum[2][2];
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      row_max[mi][hr] = -INFINITY;
      row_sum[mi][hr] = 0.f;
    }

  bool q_loaded = false;
  for (int c0 = 0, iter = 0; c0 < p.Tc; c0 += LISTCAP) { /* iter: visited tiles so far (ring stage) */
    const int c1 = min(p.Tc, c0 + LISTCAP);
    const int count = classify_chunk<HD, VAR, INSTR>(p, c, sWarpCount, c0, c1);
    if (count == 0) continue;

    /* prologue: Q (first time) and the first tile into the current stage */
    if (!q_loaded) {
      load_tile<HD, BR>(c.sQ, c.gQ, c.row_stride, c.r1 - c.r0, c.tid);
      q_loaded = true;
    }
    issue_tile<HD, VAR>(p, c, c.sList[0], iter & 1);
    cp_async_commit();

    for (int n = 0; n < count; n++, iter++) {
      long long t_start = 0;
      if (INSTR) t_start = clock64();
      const int32_t e = c.sList[n];
      const int st = iter & 1;
      if (n + 1 < count) { /* the next tile loads into the other stage while this one computes */
        issue_tile<HD, VAR>(p, c, c.sList[n + 1], st ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();

      const int t = list_tile(e), cls = list_class(e);
      const int j0 = t * BC;
      const __nv_bfloat16 *cK = c.sK + st * BC * HD;
      const __nv_bfloat16 *cV = c.sV + st * BC * HD;
      float s[2][NB_S][4]; /* S, then P (fp32) */
      uint32_t a[2][4];    /* scores' Q fragments of one k-step */
      scores<HD>(s, a, c, cK);
      apply_mask<HD, VAR>(s, p, c, cls, j0, st);
      softmax_rescale<HD>(s, acc, row_max, row_sum, p);
      uint32_t pa[2][BC / 16][4]; /* P as bf16 A fragments */
      accumulate_pv<HD>(acc, pa, s, c, cV);
      __syncthreads(); /* the stage is free for the load two tiles ahead */
      if (INSTR && c.tid == 0) p.tile_cycles[c.instr_base + t] = (int64_t)(clock64() - t_start);
    }
  }
  epilogue<HD>(p, c, acc, row_max, row_sum);
}

}  // namespace fmk

#endif
