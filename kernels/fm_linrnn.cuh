/* fm_linrnn.cuh — the chunkwise linear-attention forward (private to kernels/;
 * the contract: fm_linrnn.h; the design and its numbers: kernels/PERF_NOTES.md,
 * "Linear RNN").
 *
 * One fused pass. A unit is one (item, head h, block of DVB = 16 NW value
 * columns): a CTA of the persistent grid takes units in turn and walks a unit's
 * run of consecutive chunks (its "item") in order, carrying the state S (dk x
 * DVB, fp32) in registers from chunk to chunk; warp w owns value
 * columns [16 w, 16 w + 16) of the block and keeps S^T for them (16 x dk, the
 * accumulator layout of mma m16n8k16, dk/2 registers a thread). Per chunk
 * of C tokens (c0 .. c0 + C):
 *   score  P = scale (Q K^T) o D for the 16 x 16 blocks the variant visits,
 *          D_ts = exp(G_t - G_s) for s <= t of one document, 0 otherwise;
 *          blocks spread over the warps, P stored in shared memory as two bf16
 *          planes (hi + lo = P to ~2^-16; the lower triangle only)
 *   inter  O = scale exp(G_t) Q S_in for the rows whose document began before
 *          the chunk (S split the same way, straight from the accumulators)
 *   intra  O += P V over the visited blocks, then O is stored (bf16)
 *   state  for each document of the chunk whose state is needed (the last one
 *          when the next chunk of the item continues it; those that end here
 *          when final states are asked for): S = exp(G_e) S_in (first document,
 *          when it began before the chunk) or 0, then S^T += (w V)^T K over its
 *          16-token steps, w_s = exp(G_e - G_s) (w V split hi + lo).
 * Every product has one exact bf16 operand (q, k, v) and one split in two bf16
 * halves, so the arithmetic error is ~1e-5 of the output; a single bf16 operand
 * would give ~2e-3, above the check's bar (PERF_NOTES.md).
 *
 * Items. S_in of chunk c is live when token c C is not a document start (flag
 * LIVE). Chunk c starts an item unless it is live, not a checkpoint (below),
 * and its document began at or before chunk c-1's first token (then it must
 * follow chunk c-1 in the same CTA); an item that starts at a live chunk (its document began inside chunk
 * c-1) first runs a state-only step over chunk c-1 (the "prelude": that
 * document's rows there). Items depend only on cu_seqlens, so every variant
 * walks the same items. items_kernel lists them (one descriptor each); a
 * persistent grid takes the units (item x head x value block): CTA b unit b,
 * then the next free one from a counter (a greedy schedule: long walks do
 * not wait behind a fixed share; kernels/PERF_NOTES.md, eighteenth session).
 *
 * Checkpoints (kseg > 0, chosen by the host for long, few documents): a live
 * chunk c with c % kseg == 0 is a checkpoint: an item starts there with S_in
 * read from ck_s. A first launch of fwd_kernel in MODE_CKPT has the unit of
 * each checkpoint walk the state-only steps of the segment before it (from
 * c - kseg, or from its document's first chunk) and store the state at its end
 * and the segment's decay (ck_a, -1 when the document began inside the
 * segment); ckpt_scan_kernel then adds, in chunk order, each dependent
 * checkpoint's predecessor times that decay.
 *
 * Covered segments (the two-pass path with checkpoints, params.cover): when the
 * document at a segment's start c (c % kseg == 0) runs past c + kseg, chunks c
 * .. c + kseg - 1 are flagged COV and the checkpoint walk of c + kseg, which
 * goes over exactly them from a zero state, stores at each of their steps the
 * segment-local state S_loc (sin, in fp16 as every S_in: "S_in in fp16" below)
 * and the decay a since c's start (sa).
 * With a scalar decay the state entering chunk ch is S_loc(ch) + a(ch) S(c),
 * S(c) the scanned checkpoint state (ck_s), so the output kernel forms it
 * there and MODE_STATES does not walk those segments again (items_kernel
 * leaves the item starting at c out of its lists); the tail after a
 * document's last checkpoint is walked as before.
 *
 * Decays (log2 units, g clamped at G_FLOOR, the g of a document's first token
 * taken as 0): per chunk and head the preprocessing stores lp2[t], the
 * inclusive sum of g over t's 16-token block up to t, and pre2[b], the sum over
 * the blocks before b. Every exponent is a sum of non-positive terms (never a
 * difference of two long sums), so its rounding is relative to itself:
 *   same block:        lp2[t] - lp2[s]
 *   block bt > bs:     lp2[t] + sum_{bs<k<bt} tot[k] + (tot[bs] - lp2[s])
 *   from chunk start:  pre2[bt] + lp2[t]            (tot[k] = lp2 of block k's last token)
 *
 * Variants (runtime, uniform branches; the arithmetic of a visited block is
 * the same in all, and accumulation orders are fixed: inter term first, then
 * key blocks in order; state steps in order):
 *   SKIP    visits the c x c sub-tiles the tile rule (fm_classify_minmax on the
 *           causal_document intervals, computed by the preprocessing) does not
 *           call MASKED; runs the inter term only on 16-row blocks holding a
 *           row whose document began before the chunk; computes a state only
 *           where it is needed, over the 16-token steps of its document.
 *   CAUSAL  visits the sub-tiles on and below the diagonal; the inter term on
 *           every row block; the last document's state in every chunk, over
 *           every 16-token step (weights 0 outside the document).
 *   NOSKIP  as CAUSAL, and the sub-tiles above the diagonal too (their P is
 *           all zero: the score products are done, then zero fragments feed P V).
 * A skipped block adds exact zeros in the others (P and weights are selected to
 * +0, a dead inter row is selected to +0), so all three give the same bits; the
 * one exception would be an accumulator that is exactly -0.0 when another
 * variant adds a zero to it and nothing nonzero follows (every term -0 or an
 * underflowed negative): not seen with data drawn at random. Sub-tiles wider
 * than 16 are visited whole (every 16 x 16 block in them).
 *
 * Instrumented build (INSTR): per chunk and head, the class of every c x c
 * sub-tile and its cycles: the sum, over the sub-tile's 16 x 16 blocks, of the
 * clock64 cycles the warp that scored the block spent on it (Q K^T, decay,
 * mask, split, store), as the unit of value block 0 saw them; 0 for sub-tiles
 * not visited. The preprocessing writes the classes (the same for every head)
 * and zeroes the cycles; in the forward, lane 0 of the scoring warp adds each
 * block's cycles to its sub-tile with a reduction (RED: no result awaited),
 * so the record adds no shared memory, no barrier and no round trip to a step.
 * The P V products of a block are issued by every warp, interleaved, and are
 * not timed.
 *
 * MODE_STATES (the kernel built with STATES): the two-pass path's first pass
 * (fm_linrnn_wg.cuh): the same walks with no score, inter or intra phase and no
 * Q copies, storing S_in of every live chunk (params.sin) before its state
 * phase; under SKIP it walks only the items with state work (items_state),
 * otherwise every item (items_all), neither in covered segments. The
 * checkpoint walks of the two-pass path run in this instantiation too. It
 * has a shared-memory layout of its own (cfg's ST: K and the metadata in each
 * stage, one V buffer copied at each step's start, no P: 102 KiB at dk 128, C
 * 128, 8 warps), so that two CTAs share a multiprocessor (kernels/PERF_NOTES.md,
 * Linear RNN, seventeenth session).
 *
 * FM_LINRNN_SIM: compiled by a host C++ compiler against fm_linrnn_sim.h (a host
 * emulation of the primitives below), for development without a GPU. */
#ifndef FM_LINRNN_CUH
#define FM_LINRNN_CUH

#include <stddef.h>
#include <stdint.h>

#include "fm_tile_rule.h"

#ifdef FM_LINRNN_SIM
#include "fm_bf16.h"
#include "fm_linrnn_sim.h"
#define FMLR_DEV inline
#define FMLR_HDC constexpr
#define FMLR_KERNEL inline
#define FMLR_BOUNDS(nt, mb)
#define FMLR_SMEM(name) unsigned char *name = sim::smem()
#else
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "fm_device.cuh"
#include "fm_sm80_fwd.cuh"
#define FMLR_DEV __device__ __forceinline__
#define FMLR_HDC __host__ __device__ constexpr
#define FMLR_KERNEL __global__
#define FMLR_BOUNDS(nt, mb) __launch_bounds__(nt, mb)
#define FMLR_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

namespace fmlr {

/* Variant values: fm_linrnn_variant (fm_linrnn.h). */
enum : int32_t { VAR_SKIP = 0, VAR_CAUSAL = 1, VAR_NOSKIP = 2 };
/* Per-chunk flags of the preprocessing. */
enum : int32_t { FLAG_ITEM_START = 1, FLAG_PRELUDE = 2, FLAG_LIVE = 4, FLAG_CKPT = 8, FLAG_COV = 32 };
/* In a unit descriptor only (items_kernel): the checkpoint's document began before its segment. */
enum : int32_t { FLAG_DEP = 16 };
/* What a launch of fwd_kernel does (params.mode). MODE_STATES: the two-pass
 * path's first pass (fm_linrnn_wg.cuh): the items' walks with no outputs,
 * storing the state entering each live chunk in sin. */
enum : int32_t { MODE_MAIN = 0, MODE_CKPT = 1, MODE_STATES = 2 };
constexpr float G_FLOOR = -64.f; /* g below it counts as it: exp(-64) ~ 1.6e-28 */
constexpr float LOG2E = 1.4426950408889634f;
constexpr int CLS_STRIDE = 64; /* bytes of sub-tile classes per chunk: (C/c)^2 <= 64 */

/* What the kernels read (device pointers). Workspace arrays, O(T):
 *   docidx   (nchunks C) int32     document of each token (padding rows: -1)
 *   docstart (nchunks C) int32     first token of its document (padding rows: themselves)
 *   docend   (nchunks C) int32     end of its document (padding rows: themselves + 1)
 *   lp2      (H, nchunks C) fp32   in-block inclusive log2-decay sums
 *   pre2     (H, nchunks, C/16)    log2 decay from the chunk start to each block
 *   tclass   (nchunks, CLS_STRIDE) uint8 FM_TILE_* of the chunk's c x c sub-tiles
 *   flags    (nchunks) int32       FLAG_* */
struct params {
  int32_t T, H, dk, dv, C, c, ndocs, nchunks, variant, ndvb;
  int32_t kseg, mode; /* checkpoint spacing in chunks (0: none); MODE_* */
  /* the two-pass path with checkpoints: the checkpoint walks store S_in of the
     segments they cover (FLAG_COV, "Covered segments" above) */
  int32_t cover;
  float scale;
  const int32_t *cu;
  const uint16_t *q, *k, *v; /* bf16 bits */
  const float *g;
  uint16_t *o;
  float *final_state;
  uint8_t *tile_class;
  int64_t *tile_cycles;
  int32_t *docidx, *docstart, *docend, *flags;
  float *lp2, *pre2;
  uint8_t *tclass;
  float *ck_s; /* (nchunks / kseg + 1, H, dk * dv) fp32 checkpoint states in fragment order (frag_off),
                 kseg > 0 only */
  float *ck_a; /* (nchunks / kseg + 1, H) the decay across each checkpoint's segment, -1: none */
  uint16_t *sin; /* (nchunks, H, dk * dv) fp16 bits in fragment order (frag_off): the state entering each
                    live chunk times 2^e per 16 value columns (two-pass path only); in a covered chunk
                    its segment-local part ("S_in in fp16" below) */
  float *sinv;   /* (nchunks, H, dv / 16): 2^-e, what turns sin's values back into the state's */
  float *sa;  /* (nchunks, H): a covered chunk's decay since its segment's start (cover only) */
  /* (nchunks, 4) the descriptors of the chunks that start items / are checkpoints, in
   * chunk order: {ch0, first chunk walked, flags of ch0 | FLAG_DEP, flags of first + 1} */
  int32_t *items_main, *items_ckpt;
  /* (nchunks, 4) the items with state work not in a covered segment (MODE_STATES under SKIP: a
   * live chunk or final states); every item not in a covered segment (MODE_STATES otherwise) */
  int32_t *items_state, *items_all;
  int32_t *nitems; /* (8) the counts of the four lists (items_kernel); [4], [5]: the unit counters of
                      the walks (MODE_CKPT; the other modes), zeroed by items_kernel */
};

/* ------------------------------------------------------------ primitives */

#ifdef FM_LINRNN_SIM
using std::max;
using std::min;
FMLR_DEV uint32_t smem_addr(const unsigned char *) { return 0; }
FMLR_DEV void ldsm(uint32_t a, uint32_t (&r)[4]) { sim::ldmatrix(a, r, false); }
FMLR_DEV void ldsm_t(uint32_t a, uint32_t (&r)[4]) { sim::ldmatrix(a, r, true); }
FMLR_DEV void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { sim::mma(d, a, b0, b1); }
FMLR_DEV void cp16(uint32_t dst, const void *src, bool ok) { sim::cp_async(dst, src, 16, ok ? 16 : 0); }
FMLR_DEV void cp4(uint32_t dst, const void *src, bool ok) { sim::cp_async(dst, src, 4, ok ? 4 : 0); }
FMLR_DEV void cp_commit() { sim::cp_commit(); }
template <int N> FMLR_DEV void cp_wait() { sim::cp_wait(N); }
FMLR_DEV void bar() { sim::syncthreads(); }
FMLR_DEV void bar_wg() { sim::sync_warpgroup(); }
FMLR_DEV int warp_uniform(int v) { return v; }
FMLR_DEV void wsync() { sim::warp_exchange(nullptr, 0, [](auto) {}); }
FMLR_DEV float shfl_up16(float v, int d) { return sim::shfl_up(v, (unsigned)d, 16); }
FMLR_DEV uint32_t ballot(bool v) { return sim::ballot(v); }
FMLR_DEV int popc(uint32_t x) { return __builtin_popcount(x); }
FMLR_DEV int ctz64(uint64_t m) { return __builtin_ctzll(m); }
FMLR_DEV long long clk() { return sim::clock64(); }
FMLR_DEV void red_add(int64_t *a, long long v) { *a += v; }
FMLR_DEV float ex2(float x) { return exp2f(x); }
FMLR_DEV uint32_t pack2(float lo, float hi) {
  return (uint32_t)fm_f32_to_bf16(lo) | ((uint32_t)fm_f32_to_bf16(hi) << 16);
}
/* fp16 pairs (round to nearest even, as cvt.rn.f16x2.f32) and back */
FMLR_DEV uint32_t pack_h2(float lo, float hi) {
  const _Float16 a = (_Float16)lo, b = (_Float16)hi;
  uint16_t x, y;
  memcpy(&x, &a, 2);
  memcpy(&y, &b, 2);
  return (uint32_t)x | ((uint32_t)y << 16);
}
FMLR_DEV float h_at(uint32_t r, int hi) {
  const uint16_t x = (uint16_t)(hi ? r >> 16 : r);
  _Float16 a;
  memcpy(&a, &x, 2);
  return (float)a;
}
FMLR_DEV float wmax(float v) {
  for (int m = 16; m; m >>= 1) v = fmaxf(v, sim::shfl_xor(v, m));
  return v;
}
FMLR_DEV float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
FMLR_DEV uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
struct desc4 {
  int32_t x, y, z, w;
};
FMLR_DEV desc4 ld_desc(const int32_t *a) { return {a[0], a[1], a[2], a[3]}; }
FMLR_DEV int32_t atom_add(int32_t *a, int32_t v) {
  const int32_t o = *a;
  *a += v;
  return o;
}
#else
FMLR_DEV uint32_t smem_addr(const unsigned char *p) { return fmk::smem_u32(p); }
FMLR_DEV void ldsm(uint32_t a, uint32_t (&r)[4]) { fmk::ldmatrix_x4(a, r[0], r[1], r[2], r[3]); }
FMLR_DEV void ldsm_t(uint32_t a, uint32_t (&r)[4]) { fmk::ldmatrix_x4_trans(a, r[0], r[1], r[2], r[3]); }
FMLR_DEV void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { fmk::mma_bf16(d, a, b0, b1); }
FMLR_DEV void cp16(uint32_t dst, const void *src, bool ok) { fmk::cp_async16(dst, src, ok ? 16 : 0); }
FMLR_DEV void cp4(uint32_t dst, const void *src, bool ok) { fmk::cp_async4(dst, src, ok ? 4 : 0); }
FMLR_DEV void cp_commit() { fmk::cp_async_commit(); }
template <int N> FMLR_DEV void cp_wait() { fmk::cp_async_wait<N>(); }
FMLR_DEV void bar() { __syncthreads(); }
/* The calling warpgroup's 128 threads (named barrier 1 + warpgroup; 0 is bar()). */
FMLR_DEV void bar_wg() { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + (int)(threadIdx.x >> 7)) : "memory"); }
/* v, the same in every lane, as lane 0's: ptxas then knows the branches on it
 * are uniform (no warpgroup.arrive injected into them, the wgmma stay
 * asynchronous; FlashAttention-3's warp-group index does the same). */
FMLR_DEV int warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }
FMLR_DEV void wsync() { __syncwarp(); }
FMLR_DEV float shfl_up16(float v, int d) { return __shfl_up_sync(0xffffffffu, v, (unsigned)d, 16); }
FMLR_DEV uint32_t ballot(bool v) { return __ballot_sync(0xffffffffu, v); }
FMLR_DEV int popc(uint32_t x) { return __popc(x); }
FMLR_DEV int ctz64(uint64_t m) { return __ffsll((long long)m) - 1; }
FMLR_DEV long long clk() { return clock64(); }
/* a reduction with no result (RED.E.ADD.64): nothing awaits it, but the warp waits for the memory unit to accept it */
FMLR_DEV void red_add(int64_t *a, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long *>(a), (unsigned long long)v);
}
FMLR_DEV float ex2(float x) { return fmd::fast_exp2(x); }
FMLR_DEV uint32_t pack2(float lo, float hi) { return fmd::pack_bf16(lo, hi); }
FMLR_DEV float bits_f32(uint32_t u) { return __uint_as_float(u); }
FMLR_DEV uint32_t f32_bits(float f) { return __float_as_uint(f); }
FMLR_DEV uint32_t pack_h2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t *>(&v);
}
FMLR_DEV float h_at(uint32_t r, int hi) { return __half2float(__ushort_as_half((unsigned short)(hi ? r >> 16 : r))); }
FMLR_DEV float wmax(float v) {
#pragma unroll
  for (int m = 16; m; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
using desc4 = int4;
FMLR_DEV desc4 ld_desc(const int32_t *a) { return __ldg(reinterpret_cast<const int4 *>(a)); } /* one 16-byte load */
FMLR_DEV int32_t atom_add(int32_t *a, int32_t v) { return atomicAdd(a, v); }
#endif

/* The two bf16 halves of a packed pair, as floats. */
FMLR_DEV float bf_lo(uint32_t r) { return bits_f32(r << 16); }
FMLR_DEV float bf_hi(uint32_t r) { return bits_f32(r & 0xffff0000u); }

/* x0, x1 as bf16 pairs hi (rounded) and lo (the rounding's remainder, rounded). */
FMLR_DEV void split2(float x0, float x1, uint32_t &hi, uint32_t &lo) {
  hi = pack2(x0, x1);
  lo = pack2(x0 - bf_lo(hi), x1 - bf_hi(hi));
}

/* Element offset of 16-byte chunk `chunk` of row `row` in a shared-memory tile
 * of rows of `len` bf16 (len >= 64): chunk ^ (row & 7), as fm_sm80_fwd.cuh. */
FMLR_DEV int swz(int row, int chunk, int len) { return row * len + ((chunk ^ (row & 7)) << 3); }

/* The copy of a tile of R rows x CW 16-byte chunks from global rows `gstride`
 * elements apart (src: row 0, chunk 0) into shared memory at dst, chunk cc of
 * row r at (cc / 8) BLK + r PITCH + ((cc % 8) ^ (r % 8)) 16 (swz's layout: BLK
 * 128 and PITCH the row's bytes; a block of 64 columns a K-major or MN-major
 * wgmma operand: BLK a block's bytes, PITCH 128); rows r >= nvalid are
 * zero-filled. NT threads: thread tid takes chunk tid % CW of rows tid / CW +
 * i NT / CW, so its chunk and its row's swizzle stay fixed and only the two
 * addresses advance (the copy loops spent most of their instructions on
 * per-copy index arithmetic: kernels/PERF_NOTES.md, twentieth session). With
 * src2 (when two), the same chunks of a second tile of the same strides to
 * dst2. */
/* Byte offset of 16-byte chunk c of row r in that layout (copy_rows, store_rows). */
template <int BLK, int PITCH> FMLR_DEV uint32_t chunk_off(int r, int c) {
  return (uint32_t)((c >> 3) * BLK + r * PITCH + (((c & 7) ^ (r & 7)) << 4));
}

template <int NT, int CW, int R, int BLK, int PITCH>
FMLR_DEV void copy_rows(uint32_t dst, const uint16_t *src, int64_t gstride, int nvalid, bool two = false,
                        uint32_t dst2 = 0, const uint16_t *src2 = nullptr) {
  constexpr int RS = NT / CW;
  static_assert(NT % CW == 0 && RS % 8 == 0 && R % RS == 0, "a thread's rows keep their swizzle");
  const int tid = threadIdx.x, cc = tid % CW, r0 = tid / CW;
  uint32_t d = chunk_off<BLK, PITCH>(r0, cc);
  const int64_t step = (int64_t)RS * gstride;
  int64_t o = (int64_t)r0 * gstride + cc * 8;
#pragma unroll 4
  for (int r = r0; r < R; r += RS) {
    const bool ok = r < nvalid;
    const int64_t oo = ok ? o : 0; /* (a zero-filled copy reads nothing; its address stays in the tile) */
    if (two) cp16(dst2 + d, src2 + oo, ok);
    cp16(dst + d, src + oo, ok);
    d += RS * PITCH;
    o += step;
  }
}

/* Byte offset of (row, col) inside a 16 x 16 block of P (32-byte rows, the two
 * 16-byte chunks swapped on rows 4-7 and 12-15: ldmatrix and the fragment
 * stores are free of bank conflicts). */
FMLR_DEV int pblk(int row, int col) { return (row * 16 + (((col >> 3) ^ ((row >> 2) & 1)) << 3) + (col & 7)) * 2; }

/* -------------------------------------------------------- preprocessing */

/* The last document d with cu[d] <= t (cu[0] = 0 <= t < cu[ndocs]). */
FMLR_DEV int32_t doc_of(const int32_t *cu, int32_t ndocs, int32_t t) {
  int32_t lo = 0, hi = ndocs - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) >> 1;
    if (cu[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* Chunk ch's documents, sub-tile classes and flags (one thread per token). */
template <int C> FMLR_DEV void prep_docs(const params &p, int ch, unsigned char *sm) {
  const int tid = threadIdx.x, c0 = ch * C, t = c0 + tid;
  int32_t *ends = reinterpret_cast<int32_t *>(sm);
  fm_tile_bounds *bnd = reinterpret_cast<fm_tile_bounds *>(sm + 4 * C);
  int32_t ds = t, de = t + 1, d = -1;
  if (t < p.T) {
    d = doc_of(p.cu, p.ndocs, t);
    ds = p.cu[d];
    de = p.cu[d + 1];
  }
  p.docidx[t] = d;
  p.docstart[t] = ds;
  p.docend[t] = de;
  ends[tid] = de;
  bar();
  const int n = C / p.c;
  if (tid < n) { /* the bounds of key sub-tile tid: causal_document's columns,
                    LTS = the document's end, LTE = T, the causal triangle folded */
    fm_tile_bounds b;
    fm_bounds_reset(&b);
    for (int32_t j = c0 + tid * p.c; j < c0 + (tid + 1) * p.c && j < p.T; j++) {
      int32_t us, ue;
      fm_effective_upper(0, 0, 1, j, p.T, p.T, &us, &ue);
      fm_bounds_add(&b, ends[j - c0], p.T, us, ue);
    }
    bnd[tid] = b;
  }
  bar();
  for (int idx = tid; idx < n * n; idx += C) {
    const int i = idx / n, j = idx % n, r0 = c0 + i * p.c, r1 = min(r0 + p.c, p.T);
    const int cls = (r0 >= p.T || c0 + j * p.c >= p.T) ? FM_TILE_MASKED : fm_classify_minmax(&bnd[j], r0, r1);
    p.tclass[(int64_t)ch * CLS_STRIDE + idx] = (uint8_t)cls;
    if (p.tile_class) /* instrumented: the record's classes, the same for every head */
      for (int h = 0; h < p.H; h++) p.tile_class[((int64_t)h * p.nchunks + ch) * (n * n) + idx] = (uint8_t)cls;
  }
  if (tid == 0) {
    /* ds is the document start of token c0: S_in is live when it lies before */
    const bool live = ch > 0 && ds < c0;
    const bool ckpt = live && p.kseg > 0 && ch % p.kseg == 0; /* S_in from the checkpoint pass */
    const bool prelude = live && !ckpt && ds > c0 - C;      /* began inside chunk ch-1 */
    /* covered: the document at the start of the chunk's segment [c, c + kseg)
       runs past it, so the walk of checkpoint c + kseg goes over the whole
       segment (from zero, its state-only walk) and stores S_in there */
    bool cov = false;
    if (p.cover && p.kseg > 0) {
      const int cs = ch - ch % p.kseg, ce = cs + p.kseg;
      cov = cs > 0 && ce < p.nchunks && p.cu[doc_of(p.cu, p.ndocs, ce * C)] < cs * C;
    }
    p.flags[ch] = (!live || ckpt || prelude ? FLAG_ITEM_START : 0) | (prelude ? FLAG_PRELUDE : 0) |
                  (live ? FLAG_LIVE : 0) | (ckpt ? FLAG_CKPT : 0) | (cov ? FLAG_COV : 0);
  }
}

/* Chunk ch's in-block log2-decay sums of head h (one thread per token). */
template <int C> FMLR_DEV void prep_decay(const params &p, int ch, int h, unsigned char *sm) {
  const int tid = threadIdx.x, t = ch * C + tid;
  float *tot = reinterpret_cast<float *>(sm);
  bool first = true; /* a document's first token (or padding): its g multiplies a zero state */
  if (t < p.T) first = p.cu[doc_of(p.cu, p.ndocs, t)] == t;
  float x = first ? 0.f : fmaxf(p.g[(int64_t)t * p.H + h], G_FLOOR) * LOG2E;
#pragma unroll
  for (int off = 1; off < 16; off <<= 1) {
    const float y = shfl_up16(x, off);
    if ((tid & 15) >= off) x += y;
  }
  p.lp2[(int64_t)h * p.nchunks * C + t] = x;
  const int nn = (C / p.c) * (C / p.c); /* instrumented: head h's cycles of the chunk, summed into by fwd_kernel */
  if (p.tile_cycles && tid < nn) p.tile_cycles[((int64_t)h * p.nchunks + ch) * nn + tid] = 0;
  if ((tid & 15) == 15) tot[tid >> 4] = x;
  bar();
  if (tid == 0) {
    float pre = 0.f; /* a sum of non-positive terms, in order */
    for (int b = 0; b < C / 16; b++) {
      p.pre2[((int64_t)h * p.nchunks + ch) * (C / 16) + b] = pre;
      pre += tot[b];
    }
  }
}

/* Grid (nchunks, H + 1), C threads: y = 0 the documents, y = h + 1 head h's decays. */
template <int C> FMLR_KERNEL void FMLR_BOUNDS(C, 1) prep_kernel(const params p) {
  FMLR_SMEM(sm);
  if (blockIdx.y == 0) prep_docs<C>(p, (int)blockIdx.x, sm);
  else prep_decay<C>(p, (int)blockIdx.x, (int)blockIdx.y - 1, sm);
}

/* Dynamic shared memory of prep_kernel. */
constexpr int prep_smem(int C) { return 4 * C + 8 * (int)sizeof(fm_tile_bounds); }

/* ------------------------------------------------------------ the forward */

/* Shared-memory layout and shape constants of one instantiation. Two stages of
 * (Q, K, lp2, docstart, pre2, classes), VST of V, P (hi and lo planes of the
 * NTRI lower-triangle 16 x 16 blocks). */
template <int DK, int C, int NW, bool ST = false> struct cfg {
  static constexpr int NT = NW * 32, DVB = NW * 16, N16 = C / 16, NTRI = N16 * (N16 + 1) / 2;
  static constexpr int VST = C == 64 && !ST ? 2 : 1; /* V double-buffered where it fits */
  /* CTAs per SM (__launch_bounds__); ST (the state walk, MODE_STATES): two */
  static constexpr int MINB = C == 64 || ST ? 2 : 1;
  static constexpr int QB = C * DK * 2;
  /* K's offset in a stage: after Q, or first where no Q is copied (ST) */
  static constexpr int KO = ST ? 0 : QB;
  /* per chunk (row t): lp2, docstart, docend, docidx; pre2; sub-tile classes; flags of chunk + 2 */
  static constexpr int M_LP = KO + QB, M_DS = M_LP + 4 * C, M_DE = M_DS + 4 * C, M_DI = M_DE + 4 * C;
  static constexpr int M_PRE = M_DI + 4 * C, M_CLS = M_PRE + 64, M_FL = M_CLS + CLS_STRIDE;
  /* M_W (stage s): the unit index the walk takes at its (2 n + s)-th unit switch (fwd_kernel) */
  static constexpr int M_W = M_FL + 64, STAGE = M_FL + 128;
  static constexpr int V_OFF = 2 * STAGE, VB = C * DVB * 2;
  static constexpr int P_OFF = V_OFF + VST * VB, PB = ST ? 0 : NTRI * 512; /* ST: no P */
  static constexpr int SMEM = P_OFF + 2 * PB;
  static_assert(STAGE % 128 == 0 && VB % 128 == 0 && PB % 128 == 0, "128-byte aligned regions");
  static_assert(SMEM <= 227 * 1024 && (!ST || 2 * SMEM <= 227 * 1024), "shared memory of MINB CTAs");
  static_assert((C * DK / 8) % NT == 0 && (C * DVB / 8) % NT == 0, "16-byte copies divide among the threads");
  /* V single-buffered and as large as Q (dk 128 C 128 8 warps, dk 64 C 128 4 warps): Q and V
   * rotate through three slots, the two stages' Q and the V buffer (slot_off): Q of step n in
   * slot n % 3, V of step n in slot (n + 2) % 3, the one Q of step n - 1 left, so that V of
   * step n + 1 is copied during step n, once the inter term has read Q of step n. ST has no Q:
   * V's one buffer is copied at each step's start. */
  static constexpr bool VROT = !ST && VST == 1 && QB == VB;
};

/* Byte offset of Q / V slot k (0, 1: the stages' Q; 2: the V buffer) of cfg K. */
template <class K> FMLR_DEV int slot_off(int k) { return k == 2 ? K::V_OFF : k * K::STAGE; }

/* One step of a CTA's walk: chunk ch, full (outputs) or a prelude (state only). */
struct step {
  int ch, c0, c1, st, h, dvb;
  int qo, vo; /* byte offsets of the step's Q and V in shared memory */
  bool full, has_next, live_in;
  bool cov; /* a checkpoint walk over a covered segment: S_in stored, segment-local */
  uint64_t vis; /* the 16 x 16 blocks the variant visits: bit bi N16 + bj (full steps) */
};

/* Issues the copies of chunk ch's Q (when full; to shared address qdst), K and
 * metadata into stage st (the flags of chunk ch + 2: what the step after ch's
 * needs before it waits). */
template <int DK, int C, int NW, bool ST = false>
FMLR_DEV void issue_stage(const params &p, int ch, int h, bool full, int st, uint32_t qdst, uint32_t sb) {
  using K = cfg<DK, C, NW, ST>;
  constexpr int CH = DK / 8, N16 = C / 16;
  const int tid = threadIdx.x, c0 = ch * C;
  const uint32_t base = sb + st * K::STAGE;
  const int64_t o = ((int64_t)c0 * p.H + h) * DK;
  copy_rows<K::NT, CH, C, 128, DK * 2>(base + K::KO, p.k + o, (int64_t)p.H * DK, p.T - c0, full, qdst, p.q + o);
  const int64_t tpad = (int64_t)p.nchunks * C;
  constexpr int NM = C + N16 / 4 + CLS_STRIDE / 16; /* 16-byte copies; then the flags */
  for (int i = tid; i <= NM; i += K::NT) {
    const int q = i & (C / 4 - 1); /* 16-byte piece of a per-row array */
    if (i < C / 4) cp16(base + K::M_LP + q * 16, p.lp2 + h * tpad + c0 + q * 4, true);
    else if (i < C / 2) cp16(base + K::M_DS + q * 16, p.docstart + c0 + q * 4, true);
    else if (i < 3 * C / 4) cp16(base + K::M_DE + q * 16, p.docend + c0 + q * 4, true);
    else if (i < C) cp16(base + K::M_DI + q * 16, p.docidx + c0 + q * 4, true);
    else if (i < C + N16 / 4)
      cp16(base + K::M_PRE + (i - C) * 16, p.pre2 + ((int64_t)h * p.nchunks + ch) * N16 + (i - C) * 4, true);
    else if (i < NM)
      cp16(base + K::M_CLS + (i - C - N16 / 4) * 16, p.tclass + (int64_t)ch * CLS_STRIDE + (i - C - N16 / 4) * 16, true);
    else cp4(base + K::M_FL, ch + 2 < p.nchunks ? p.flags + ch + 2 : p.flags, ch + 2 < p.nchunks);
  }
}

/* Issues the copies of chunk ch's value block dvb to shared address vdst. */
template <int DK, int C, int NW, bool ST = false>
FMLR_DEV void issue_v(const params &p, int ch, int h, int dvb, uint32_t vdst) {
  using K = cfg<DK, C, NW, ST>;
  constexpr int CH = K::DVB / 8;
  const int c0 = ch * C;
  copy_rows<K::NT, CH, C, 128, K::DVB * 2>(vdst, p.v + ((int64_t)c0 * p.H + h) * p.dv + (int64_t)dvb * K::DVB,
                                          (int64_t)p.H * p.dv, p.T - c0);
}

/* The 16 x 16 blocks the variant visits in a chunk, bit bi N16 + bj (N16^2 <= 64):
 * the sub-tile holding a block (c/16 blocks a side) is visited whole; SKIP
 * visits the sub-tiles the rule does not call MASKED, CAUSAL those on and below
 * the diagonal, NOSKIP all. Each lane decides two blocks, two ballots. */
template <int C> FMLR_DEV uint64_t visit_mask(const params &p, const uint8_t *cls) {
  constexpr int N16 = C / 16;
  const int lane = threadIdx.x & 31, sl = p.c == 16 ? 0 : p.c == 32 ? 1 : 2, n = C / p.c;
  uint64_t m = 0;
#pragma unroll
  for (int half = 0; half < 2; half++) {
    const int e = lane + 32 * half, i = (e / N16) >> sl, j = (e % N16) >> sl;
    bool v = false;
    if (e < N16 * N16)
      v = p.variant == VAR_SKIP ? cls[i * n + j] != FM_TILE_MASKED : (p.variant == VAR_NOSKIP || j <= i);
    m |= (uint64_t)ballot(v) << (32 * half);
  }
  return m;
}

/* Scores one 16 x 16 block: P = scale (Q_bi K_bj^T) o D, stored split when on or
 * below the diagonal (above it P is all zero and is not stored). */
template <int DK, int C, int NW>
FMLR_DEV void score_block(const params &p, const step &s, int bi, int bj, bool masked_elems, unsigned char *sm,
                          uint32_t sb) {
  using K = cfg<DK, C, NW>;
  const int lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
  const uint32_t qa = sb + s.qo, ka = sb + s.st * K::STAGE + K::KO;
  const float *lp = reinterpret_cast<const float *>(sm + s.st * K::STAGE + K::M_LP);
  const int32_t *ds = reinterpret_cast<const int32_t *>(sm + s.st * K::STAGE + K::M_DS);
  /* two accumulators a key half, even and odd k-steps: four HMMA chains, not two */
  float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}}, odd[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) {
    uint32_t a[4], b[4];
    ldsm(qa + swz(bi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 2 + (lane >> 4), DK) * 2, a);
    ldsm(ka + swz(bj * 16 + (lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1), DK) * 2, b);
    mma(kk & 1 ? odd[0] : acc[0], a, b[0], b[1]);
    mma(kk & 1 ? odd[1] : acc[1], a, b[2], b[3]);
  }
  if (bj > bi) return;
#pragma unroll
  for (int n8 = 0; n8 < 2; n8++)
#pragma unroll
    for (int r = 0; r < 4; r++) acc[n8][r] += odd[n8][r];
  float mid = 0.f; /* the blocks strictly between bj and bi */
  for (int kb = bj + 1; kb < bi; kb++) mid += lp[kb * 16 + 15];
  const float tot_j = lp[bj * 16 + 15];
  unsigned char *phi = sm + K::P_OFF + (bi * (bi + 1) / 2 + bj) * 512;
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int t = bi * 16 + g + 8 * hr, dsl = ds[t] - s.c0;
    const float rowt = bi > bj ? lp[t] + mid : lp[t];
#pragma unroll
    for (int n8 = 0; n8 < 2; n8++) {
      float x[2];
#pragma unroll
      for (int cc = 0; cc < 2; cc++) {
        const int sl = bj * 16 + n8 * 8 + 2 * c4 + cc;
        const float colt = bi > bj ? tot_j - lp[sl] : -lp[sl];
        const float v = acc[n8][2 * hr + cc] * p.scale * ex2(rowt + colt);
        x[cc] = (!masked_elems || (sl <= t && sl >= dsl)) ? v : 0.f;
      }
      uint32_t hi, lo;
      split2(x[0], x[1], hi, lo);
      const int off = pblk(g + 8 * hr, n8 * 8 + 2 * c4);
      *reinterpret_cast<uint32_t *>(phi + off) = hi;
      *reinterpret_cast<uint32_t *>(phi + K::PB + off) = lo;
    }
  }
}

/* The score phase: the visited blocks, in row-major order, dealt round-robin
 * to the warps. Instrumented (INSTR, the unit of value block 0): lane 0 of the
 * scoring warp adds the block's clock64 cycles to its sub-tile's tile_cycles
 * (zeroed by the preprocessing) with a reduction right after the block: no
 * result is awaited, though the warp waits for the memory unit to accept the
 * REDG (kernels/PERF_NOTES.md, linear RNN, tenth session; deferring the
 * reductions to the next step measured dearer, 402722d). The sum over a
 * sub-tile's blocks is an integer sum, the same in any order. */
template <int DK, int C, int NW, bool INSTR>
FMLR_DEV void score_phase(const params &p, const step &s, unsigned char *sm, uint32_t sb) {
  using K = cfg<DK, C, NW>;
  const int warp = threadIdx.x >> 5;
  const uint8_t *cls = sm + s.st * K::STAGE + K::M_CLS;
  const int sl = p.c == 16 ? 0 : p.c == 32 ? 1 : 2, n = C / p.c;
  const bool rec = INSTR && s.dvb == 0 && (threadIdx.x & 31) == 0;
  int64_t *cyc = INSTR ? p.tile_cycles + ((int64_t)s.h * p.nchunks + s.ch) * (n * n) : nullptr;
  int k = 0;
  for (uint64_t m = s.vis; m; m &= m - 1, k++) {
    if (k % NW != warp) continue;
    const int e = ctz64(m), bi = e / K::N16, bj = e % K::N16, tile = (bi >> sl) * n + (bj >> sl);
    const long long t0 = INSTR ? clk() : 0;
    score_block<DK, C, NW>(p, s, bi, bj, cls[tile] != FM_TILE_UNMASKED, sm, sb);
    if (rec) {
      const long long t1 = clk();
      red_add(cyc + tile, t1 - t0);
    }
  }
}

/* O += Q S_in (S split hi + lo) on the first nlive row blocks; ALL: every row
 * block, with no branch between the blocks (so that ptxas interleaves them). */
template <int DK, int C, int NW, bool ALL>
FMLR_DEV void inter_mma(const float (&st)[DK / 8][4], float (&o)[C / 16][2][4], int nlive, uint32_t qa) {
  using K = cfg<DK, C, NW>;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) {
    /* B fragments of S (k = dk, n = the warp's 16 columns) from the S^T accumulators */
    uint32_t bh[2][2], bl[2][2];
#pragma unroll
    for (int nb = 0; nb < 2; nb++)
#pragma unroll
      for (int r = 0; r < 2; r++) split2(st[2 * kk + r][2 * nb], st[2 * kk + r][2 * nb + 1], bh[nb][r], bl[nb][r]);
#pragma unroll
    for (int i = 0; i < K::N16; i++) {
      if (!ALL && i >= nlive) continue;
      uint32_t a[4];
      ldsm(qa + swz(i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 2 + (lane >> 4), DK) * 2, a);
#pragma unroll
      for (int nb = 0; nb < 2; nb++) {
        mma(o[i][nb], a, bh[nb][0], bh[nb][1]);
        mma(o[i][nb], a, bl[nb][0], bl[nb][1]);
      }
    }
  }
}

/* The inter term: O = scale exp(G_t) Q S_in on the rows whose document began
 * before the chunk (+0 elsewhere); SKIP computes only the row blocks that hold
 * such a row (nlive of them). */
template <int DK, int C, int NW>
FMLR_DEV void inter_phase(const params &p, const step &s, const float (&st)[DK / 8][4],
                          float (&o)[C / 16][2][4], int nlive, unsigned char *sm, uint32_t sb) {
  using K = cfg<DK, C, NW>;
  const int lane = threadIdx.x & 31, g = lane >> 2;
  const uint32_t qa = sb + s.qo;
#pragma unroll
  for (int i = 0; i < K::N16; i++)
#pragma unroll
    for (int nb = 0; nb < 2; nb++)
#pragma unroll
      for (int r = 0; r < 4; r++) o[i][nb][r] = 0.f;
  if (nlive == K::N16) inter_mma<DK, C, NW, true>(st, o, nlive, qa);
  else if (nlive > 0) inter_mma<DK, C, NW, false>(st, o, nlive, qa);
  const float *lp = reinterpret_cast<const float *>(sm + s.st * K::STAGE + K::M_LP);
  const float *pre = reinterpret_cast<const float *>(sm + s.st * K::STAGE + K::M_PRE);
  const int32_t *ds = reinterpret_cast<const int32_t *>(sm + s.st * K::STAGE + K::M_DS);
#pragma unroll
  for (int i = 0; i < K::N16; i++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int t = i * 16 + g + 8 * hr;
      const bool live = ds[t] < s.c0;
      const float f = live ? p.scale * ex2(pre[i] + lp[t]) : 0.f;
#pragma unroll
      for (int nb = 0; nb < 2; nb++)
#pragma unroll
        for (int cc = 0; cc < 2; cc++) o[i][nb][2 * hr + cc] = live ? o[i][nb][2 * hr + cc] * f : 0.f;
    }
}

/* The 16 x 16 blocks on and below the diagonal, as a visit mask. */
template <int N16> FMLR_HDC uint64_t lower_mask() {
  uint64_t m = 0;
  for (int i = 0; i < N16; i++)
    for (int j = 0; j <= i; j++) m |= 1ull << (i * N16 + j);
  return m;
}

/* O += P V over the blocks of vis, key blocks j in order (P split hi + lo;
 * blocks above the diagonal take zero fragments). LOWER: vis is the lower
 * triangle, unrolled with no branch between the blocks. */
template <int DK, int C, int NW, bool LOWER>
FMLR_DEV void intra_mma(uint64_t vis, float (&o)[C / 16][2][4], uint32_t va, uint32_t pa) {
  using K = cfg<DK, C, NW>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint32_t poff = (uint32_t)pblk((lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8);
#pragma unroll
  for (int j = 0; j < K::N16; j++) {
    uint32_t b[4];
    ldsm_t(va + swz(j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, warp * 2 + (lane >> 4), K::DVB) * 2, b);
#pragma unroll
    for (int i = LOWER ? j : 0; i < K::N16; i++) {
      if (!LOWER && !((vis >> (i * K::N16 + j)) & 1u)) continue;
      uint32_t ah[4] = {0u, 0u, 0u, 0u}, al[4] = {0u, 0u, 0u, 0u};
      if (j <= i) {
        const uint32_t blk = pa + (uint32_t)(i * (i + 1) / 2 + j) * 512 + poff;
        ldsm(blk, ah);
        ldsm(blk + K::PB, al);
      }
#pragma unroll
      for (int nb = 0; nb < 2; nb++) {
        mma(o[i][nb], ah, b[2 * nb], b[2 * nb + 1]);
        mma(o[i][nb], al, b[2 * nb], b[2 * nb + 1]);
      }
    }
  }
}

/* The intra term O += P V over the visited blocks (key blocks in order), then
 * O stored as bf16. */
template <int DK, int C, int NW>
FMLR_DEV void intra_phase(const params &p, const step &s, float (&o)[C / 16][2][4], unsigned char *sm,
                          uint32_t sb) {
  using K = cfg<DK, C, NW>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
  const uint32_t va = sb + s.vo, pa = sb + K::P_OFF;
  if (s.vis == lower_mask<K::N16>()) intra_mma<DK, C, NW, true>(s.vis, o, va, pa);
  else intra_mma<DK, C, NW, false>(s.vis, o, va, pa);
#pragma unroll
  for (int i = 0; i < K::N16; i++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int t = s.c0 + i * 16 + g + 8 * hr;
      if (t >= p.T) continue;
      uint16_t *row = p.o + ((int64_t)t * p.H + s.h) * p.dv + s.dvb * K::DVB + warp * 16 + 2 * c4;
#pragma unroll
      for (int nb = 0; nb < 2; nb++)
        *reinterpret_cast<uint32_t *>(row + nb * 8) = pack2(o[i][nb][2 * hr], o[i][nb][2 * hr + 1]);
    }
}

/* One 16-token step of a state: S^T += (w V)^T K over tokens 16 kk .. 16 kk + 15,
 * w_s = exp(G_e - G_s) for s in [rlo, el] (chunk rows), 0 elsewhere. */
template <int DK, int C, int NW, bool ST = false>
FMLR_DEV void state_step(const step &s, int kk, int rlo, int el, float (&st)[DK / 8][4], unsigned char *sm,
                         uint32_t sb) {
  using K = cfg<DK, C, NW, ST>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, c4 = lane & 3;
  const float *lp = reinterpret_cast<const float *>(sm + s.st * K::STAGE + K::M_LP);
  const uint32_t va = sb + s.vo, ka = sb + s.st * K::STAGE + K::KO;
  const int q = lane >> 3, be = el >> 4;
  uint32_t a[4]; /* A = V^T (m = the warp's 16 columns, k = the 16 tokens) */
  ldsm_t(va + swz(kk * 16 + (q >> 1) * 8 + (lane & 7), warp * 2 + (q & 1), K::DVB) * 2, a);
  float mid = 0.f;
  for (int kb = kk + 1; kb < be; kb++) mid += lp[kb * 16 + 15];
  const float rowt = kk == be ? lp[el] : lp[el] + mid, tot = lp[kk * 16 + 15];
  float w[4]; /* tokens 2 c4, 2 c4 + 1, 2 c4 + 8, 2 c4 + 9 of the step */
#pragma unroll
  for (int e = 0; e < 4; e++) {
    const int sl = kk * 16 + 2 * c4 + (e & 1) + 8 * (e >> 1);
    const float colt = kk == be ? -lp[sl] : tot - lp[sl];
    w[e] = (sl >= rlo && sl <= el) ? ex2(rowt + colt) : 0.f;
  }
  uint32_t ah[4], al[4];
#pragma unroll
  for (int r = 0; r < 4; r++) {
    const float wl = w[(r >> 1) * 2], wh = w[(r >> 1) * 2 + 1];
    split2(bf_lo(a[r]) * wl, bf_hi(a[r]) * wh, ah[r], al[r]);
  }
#pragma unroll
  for (int np = 0; np < DK / 16; np++) {
    uint32_t b[4];
    ldsm_t(ka + swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, np * 2 + (lane >> 4), DK) * 2, b);
    mma(st[2 * np], ah, b[0], b[1]);
    mma(st[2 * np], al, b[0], b[1]);
    mma(st[2 * np + 1], ah, b[2], b[3]);
    mma(st[2 * np + 1], al, b[2], b[3]);
  }
}

/* The state of the warp's columns into a (dk, dv) fp32 matrix at base (a
 * final state: the caller's layout); st in the accumulators' layout (S^T: rows
 * the warp's 16 columns, dk across). */
template <int DK, int NW>
FMLR_DEV void final_store(const params &p, float *base, int dvb, const float (&st)[DK / 8][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
#pragma unroll
  for (int nt = 0; nt < DK / 8; nt++)
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const int row = nt * 8 + 2 * c4 + (r & 1), col = dvb * NW * 16 + warp * 16 + g + 8 * (r >> 1);
      base[(int64_t)row * p.dv + col] = st[nt][r];
    }
}

/* The fragment order of a state in the workspace (the checkpoint states, S_in):
 * value group grp (16 columns; the walk's warp w of value block dvb: dvb NW + w;
 * the output kernel's warp w of warpgroup u: 4 u + w), k-step kk (16 dk rows), lane l:
 * the eight values st[2 kk][0..3], st[2 kk + 1][0..3] at element offset
 * ((grp DK / 16 + kk) 32 + l) 8 from the state's base. They are lane l's A
 * fragment of a wgmma m64k16 on S^T (rows: the group's columns, k: the step's
 * dk rows), so the output kernel's inter term loads its operand straight into
 * registers, and a warp's store of one k-step is 32 contiguous pieces. */
template <int DK> FMLR_DEV int64_t frag_off(int grp, int kk) {
  return (((int64_t)grp * (DK / 16) + kk) * 32 + (threadIdx.x & 31)) * 8;
}


/* A checkpoint state of the warp's columns from (to) base, fp32 in fragment order. */
template <int DK, int NW> FMLR_DEV void ckpt_io(float *base, int dvb, float (&st)[DK / 8][4], bool load) {
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) {
    float4 *x = reinterpret_cast<float4 *>(base + frag_off<DK>(dvb * NW + (int)(threadIdx.x >> 5), kk));
    if (load) {
      const float4 a = x[0], b = x[1];
      st[2 * kk][0] = a.x, st[2 * kk][1] = a.y, st[2 * kk][2] = a.z, st[2 * kk][3] = a.w;
      st[2 * kk + 1][0] = b.x, st[2 * kk + 1][1] = b.y, st[2 * kk + 1][2] = b.z, st[2 * kk + 1][3] = b.w;
    } else {
      x[0] = make_float4(st[2 * kk][0], st[2 * kk][1], st[2 * kk][2], st[2 * kk][3]);
      x[1] = make_float4(st[2 * kk + 1][0], st[2 * kk + 1][1], st[2 * kk + 1][2], st[2 * kk + 1][3]);
    }
  }
}

/* S_in in fp16 (the two-pass path; kernels/PERF_NOTES.md, Linear RNN, nineteenth
 * session): the warp's 16 x dk values times 2^e, e such that their largest
 * magnitude m lands in [2^14, 2^15) (fp16's largest finite is 65504), stored
 * rounded to fp16 in fragment order, 2^-e in sinv. Relative error 2^-11 an
 * element, whatever the state's magnitude (an element below m 2^-28 rounds in
 * fp16's subnormals: an absolute error under m 2^-39). Half the bytes of fp32. */
template <int DK, int NW>
FMLR_DEV void sin_store(const params &p, int ch, int h, int dvb, const float (&st)[DK / 8][4]) {
  float m = 0.f;
#pragma unroll
  for (int nt = 0; nt < DK / 8; nt++)
#pragma unroll
    for (int r = 0; r < 4; r++) m = fmaxf(m, fabsf(st[nt][r]));
  m = wmax(m);
  /* m in [2^(E-127), 2^(E-126)): 2^(141-E) takes it to [2^14, 2^15); E >= 15 keeps both powers normal */
  const uint32_t E = max(f32_bits(m) >> 23, 15u);
  const float sc = bits_f32((268u - E) << 23), inv = bits_f32((E - 14u) << 23);
  uint16_t *base = p.sin + ((int64_t)ch * p.H + h) * DK * p.dv;
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) {
    uint4 v;
    v.x = pack_h2(st[2 * kk][0] * sc, st[2 * kk][1] * sc);
    v.y = pack_h2(st[2 * kk][2] * sc, st[2 * kk][3] * sc);
    v.z = pack_h2(st[2 * kk + 1][0] * sc, st[2 * kk + 1][1] * sc);
    v.w = pack_h2(st[2 * kk + 1][2] * sc, st[2 * kk + 1][3] * sc);
    *reinterpret_cast<uint4 *>(base + frag_off<DK>(dvb * NW + (int)(threadIdx.x >> 5), kk)) = v;
  }
  if ((threadIdx.x & 31) == 0) p.sinv[((int64_t)ch * p.H + h) * (p.dv / 16) + dvb * NW + (threadIdx.x >> 5)] = inv;
}

/* The state phase: the documents of the chunk whose state is needed, in order
 * (read from the stage: each row's document start, end and index). A step that
 * is not full (a prelude or a checkpoint segment) serves only the chunk's last
 * document. */
template <int DK, int C, int NW, bool ST = false>
FMLR_DEV void state_phase(const params &p, const step &s, float (&st)[DK / 8][4], unsigned char *sm,
                          uint32_t sb) {
  using K = cfg<DK, C, NW, ST>;
  const unsigned char *stage = sm + s.st * K::STAGE;
  const float *lp = reinterpret_cast<const float *>(stage + K::M_LP);
  const float *pre = reinterpret_cast<const float *>(stage + K::M_PRE);
  const int32_t *ds = reinterpret_cast<const int32_t *>(stage + K::M_DS);
  const int32_t *de = reinterpret_cast<const int32_t *>(stage + K::M_DE);
  const int32_t *di = reinterpret_cast<const int32_t *>(stage + K::M_DI);
  const int nrows = s.c1 - s.c0;
  for (int rlo = s.full ? 0 : max(ds[nrows - 1], s.c0) - s.c0, rend; rlo < nrows; rlo = rend) {
    const int32_t ed = de[rlo], d = di[rlo]; /* the document of rows [rlo, rend) */
    rend = min(ed, s.c1) - s.c0;
    const bool fin = s.full && p.final_state && ed <= s.c1;
    const bool carry = ed > s.c1 && s.has_next;
    if (!fin && !carry && !(p.variant != VAR_SKIP && rend == nrows)) continue;
    const int el = rend - 1;
    const bool uses_in = rlo == 0 && s.live_in;
    const float alpha = ex2(pre[el >> 4] + lp[el]);
#pragma unroll
    for (int nt = 0; nt < DK / 8; nt++)
#pragma unroll
      for (int r = 0; r < 4; r++) st[nt][r] = uses_in ? st[nt][r] * alpha : 0.f;
    const int k0 = p.variant == VAR_SKIP ? rlo >> 4 : 0, k1 = p.variant == VAR_SKIP ? el >> 4 : K::N16 - 1;
    for (int kk = k0; kk <= k1; kk++) state_step<DK, C, NW, ST>(s, kk, rlo, el, st, sm, sb);
    if (fin) final_store<DK, NW>(p, p.final_state + ((int64_t)d * p.H + s.h) * DK * p.dv, s.dvb, st);
  }
}

/* A unit of work: one item (MODE_MAIN) or one checkpoint's segment
 * (MODE_CKPT), of one head and value block; its chunks: first .. (the item's
 * end) with outputs from ch0 on, or first .. ch0 - 1 state-only. */
struct unit {
  int w, ch0, first, h, dvb;
  int32_t fl1;             /* the flags of chunk first + 1 */
  bool valid, loaded, dep; /* S from a checkpoint; MODE_CKPT: the document began before the segment */
};

/* Unit w of the compact list (items or checkpoints in chunk order; within one,
 * heads, then value blocks): one 16-byte load of the descriptor that
 * items_kernel wrote, no dependent load (it is issued a unit ahead, but for
 * single-chunk items it is consumed by the next step's copies right away). */
/* The unit list a launch walks (0 items, 1 checkpoints, 2 the items with state
 * work). STATES (the kernel built for MODE_STATES): under CAUSAL and NOSKIP
 * every item (their state phases run in every chunk), under SKIP only those
 * with state work; otherwise params.mode's list. */
template <bool STATES> FMLR_DEV int list_of(const params &p) {
  if (STATES && p.mode == MODE_STATES) return p.variant == VAR_SKIP ? 2 : 3;
  return p.mode;
}

template <bool STATES> FMLR_DEV unit fetch_unit(const params &p, int w, int nunits) {
  unit u = {};
  u.w = w;
  u.valid = w < nunits;
  if (!u.valid) return u;
  const int per = p.H * p.ndvb, r = w % per;
  u.h = r / p.ndvb;
  u.dvb = r % p.ndvb;
  const int m = list_of<STATES>(p);
  const int32_t *list = m == 3 ? p.items_all : m == 2 ? p.items_state : m == 1 ? p.items_ckpt : p.items_main;
  const desc4 d = ld_desc(list + 4 * (int64_t)(w / per));
  u.ch0 = d.x;
  u.first = d.y;
  u.fl1 = d.w;
  u.loaded = p.mode != MODE_CKPT && (d.z & FLAG_CKPT);
  u.dep = (d.z & FLAG_DEP) != 0;
  return u;
}

/* The checkpoint state of unit u's chunk ch0 (slot ch0 / kseg) in ck_s. */
template <int DK> FMLR_DEV float *ckpt_at(const params &p, const unit &u) {
  return p.ck_s + ((int64_t)(u.ch0 / p.kseg) * p.H + u.h) * DK * p.dv;
}

/* The state a unit starts from: a checkpoint's, or zero. */
template <int DK, int NW> FMLR_DEV void begin_unit(const params &p, const unit &u, float (&st)[DK / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < DK / 8; nt++)
#pragma unroll
    for (int r = 0; r < 4; r++) st[nt][r] = 0.f;
  if (u.loaded) ckpt_io<DK, NW>(ckpt_at<DK>(p, u), u.dvb, st, true);
}

/* The next step's V (chunk ch of head h, value block dvb; none when !any). */
struct vnext {
  bool any;
  int ch, h, dvb;
};

/* VROT: V of the next step into this step's Q slot (every warp is done with Q),
 * as a copy group of its own (waited for after the next step's score phase). */
template <int DK, int C, int NW, bool ST = false> FMLR_DEV void rot_v(const params &p, const step &s, const vnext &vn, uint32_t sb) {
  if (vn.any) issue_v<DK, C, NW, ST>(p, vn.ch, vn.h, vn.dvb, sb + s.qo);
  cp_commit();
}

/* One chunk step after its stage has arrived: score (with the instrumented
 * build's cycles), inter, intra (full steps), state; VROT: the next step's V copies as soon as Q
 * is dead (after the score phase's barrier when no inter term runs, else after
 * a barrier behind the intra term). */
template <int DK, int C, int NW, bool INSTR, bool STATES>
FMLR_DEV void chunk_step(const params &p, step &s, float (&st)[DK / 8][4], unsigned char *sm, uint32_t sb,
                         const vnext &vn) {
  using K = cfg<DK, C, NW, STATES>;
  const unsigned char *stage = sm + s.st * K::STAGE;
  const bool outs = s.full && !STATES; /* the step computes outputs */
  if (outs) {
    s.vis = visit_mask<C>(p, stage + K::M_CLS);
    score_phase<DK, C, NW, INSTR>(p, s, sm, sb);
  }
  if (K::VST == 1) cp_wait<1>();
  bar();
  int nlive = 0; /* row blocks of the inter term (uniform over the CTA) */
  if (outs) {
    nlive = K::N16;
    if (p.variant == VAR_SKIP) {
      const int ef = min(reinterpret_cast<const int32_t *>(stage + K::M_DE)[0], s.c1) - s.c0;
      nlive = s.live_in ? (ef + 15) >> 4 : 0;
    }
  }
  if (K::VROT && nlive == 0) rot_v<DK, C, NW, STATES>(p, s, vn, sb);
  if (outs) {
    float o[K::N16][2][4];
    inter_phase<DK, C, NW>(p, s, st, o, nlive, sm, sb);
    intra_phase<DK, C, NW>(p, s, o, sm, sb);
  }
  if (K::VROT && nlive > 0) {
    bar();
    rot_v<DK, C, NW, STATES>(p, s, vn, sb);
  }
  /* S_in of the chunk, for the output pass (fp16, scaled); in a covered
     segment its segment-local part (zero at the segment's first chunk) */
  if (STATES && ((s.full && s.live_in) || s.cov)) sin_store<DK, NW>(p, s.ch, s.h, s.dvb, st);
  state_phase<DK, C, NW, STATES>(p, s, st, sm, sb);
}

/* The forward: a persistent grid; CTA b takes unit b, then the next free unit
 * of the list (a counter), and walks each one's chunks in order, the state in
 * registers. The copies of the next step, in this unit or the next one, are
 * issued before this step waits for its own, so one unit's loads overlap the
 * last step of the one before.
 * MODE_MAIN: the units are the items (after a prelude step over chunk ch0 - 1,
 * or from a checkpoint's state). MODE_CKPT: the units are the checkpoints; each
 * walks the segment before its chunk and stores the state at its end and, when
 * the document began before the segment, the segment's decay. */
template <int DK, int C, int NW, bool INSTR, bool STATES>
FMLR_KERNEL void FMLR_BOUNDS((cfg<DK, C, NW, STATES>::NT), (cfg<DK, C, NW, STATES>::MINB)) fwd_kernel(const params p) {
  using K = cfg<DK, C, NW, STATES>;
  FMLR_SMEM(sm);
  const uint32_t sb = smem_addr(sm);
  const int nunits = p.nitems[list_of<STATES>(p)] * p.H * p.ndvb;
  constexpr bool outs = !STATES; /* Q is copied only for steps with outputs */
  /* units: CTA b's first is b; after it, the next free one from the launch's
     counter (a greedy schedule: a CTA that drew short units takes more, so a
     long document's walk no longer waits behind a fixed share). Thread 0 draws
     a unit ahead, through the stage's M_W slots (read after a barrier). */
  int32_t *ctr = p.nitems + (p.mode == MODE_CKPT ? 4 : 5);
  unit cur = fetch_unit<STATES>(p, (int)blockIdx.x, nunits);
  if (!cur.valid) return;
  if (threadIdx.x == 0) *reinterpret_cast<int32_t *>(sm + K::M_W) = (int)gridDim.x + atom_add(ctr, 1);
  bar();
  unit nxt = fetch_unit<STATES>(p, *reinterpret_cast<const int32_t *>(sm + K::M_W), nunits);
  int32_t pend = 0; /* thread 0: the unit after nxt */
  int sw = 1;       /* the stage whose M_W slot the next unit switch reads */
  if (threadIdx.x == 0) pend = (int)gridDim.x + atom_add(ctr, 1);
  float st[DK / 8][4]; /* S^T of the warp's 16 value columns (fp32) */
  begin_unit<DK, NW>(p, cur, st);
  issue_stage<DK, C, NW, STATES>(p, cur.first, cur.h, outs && cur.first >= cur.ch0, 0, sb, sb);
  if (K::VST == 2) issue_v<DK, C, NW, STATES>(p, cur.first, cur.h, cur.dvb, sb + K::V_OFF);
  cp_commit();
  if (K::VROT) { /* V of step 0 in slot 2, its own group */
    issue_v<DK, C, NW, STATES>(p, cur.first, cur.h, cur.dvb, sb + K::V_OFF);
    cp_commit();
  }
  int r3 = 0; /* n % 3 (VROT's slots) */
  float la2 = 0.f;
  int32_t fl1 = cur.fl1; /* the flags of chunk s.ch + 1 */
  step s;
  s.ch = cur.first;
  for (int n = 0;; n++) {
    s.h = cur.h;
    s.dvb = cur.dvb;
    s.st = n & 1;
    const int r3n = r3 == 2 ? 0 : r3 + 1;
    s.qo = K::VROT ? slot_off<K>(r3) : s.st * K::STAGE;
    s.vo = K::VROT ? slot_off<K>(r3n == 2 ? 0 : r3n + 1) : K::V_OFF + (K::VST == 2 ? s.st : 0) * K::VB;
    s.c0 = s.ch * C;
    s.c1 = min(s.c0 + C, p.T);
    s.full = s.ch >= cur.ch0;
    s.cov = STATES && p.cover && p.mode == MODE_CKPT && cur.dep;
    if (s.cov && cur.dvb == 0 && threadIdx.x == 0) p.sa[(int64_t)s.ch * p.H + cur.h] = ex2(la2);
    /* the next chunk continues this unit's state; `more`: the unit steps on to it */
    s.has_next = s.ch < cur.ch0 || (s.ch + 1 < p.nchunks && !(fl1 & FLAG_ITEM_START));
    const bool more = s.has_next && !(p.mode == MODE_CKPT && s.ch + 1 == cur.ch0);
    if (K::VST == 1 && !K::VROT) {
      issue_v<DK, C, NW, STATES>(p, s.ch, cur.h, cur.dvb, sb + K::V_OFF);
      cp_commit();
    }
    /* the next step's copies: this unit's next chunk or the next unit's first */
    const vnext vn = {more || nxt.valid, more ? s.ch + 1 : nxt.first, more ? cur.h : nxt.h, more ? cur.dvb : nxt.dvb};
    if (vn.any) {
      const uint32_t qdst = sb + (K::VROT ? slot_off<K>(r3n) : (s.st ^ 1) * K::STAGE);
      issue_stage<DK, C, NW, STATES>(p, vn.ch, vn.h, outs && vn.ch >= (more ? cur.ch0 : nxt.ch0), s.st ^ 1, qdst, sb);
      if (K::VST == 2) issue_v<DK, C, NW, STATES>(p, vn.ch, vn.h, vn.dvb, sb + K::V_OFF + (s.st ^ 1) * K::VB);
    }
    cp_commit();
    if (K::VST == 1) cp_wait<2>();
    else cp_wait<1>();
    bar();
    const unsigned char *stage = sm + s.st * K::STAGE;
    s.live_in = reinterpret_cast<const int32_t *>(stage + K::M_DS)[0] < s.c0 && (s.ch > cur.first || cur.loaded);
    fl1 = reinterpret_cast<const int32_t *>(stage + K::M_FL)[0]; /* chunk ch + 2: the next step's next */
    chunk_step<DK, C, NW, INSTR, STATES>(p, s, st, sm, sb, vn);
    la2 += reinterpret_cast<const float *>(stage + K::M_PRE)[K::N16 - 1] +
           reinterpret_cast<const float *>(stage + K::M_LP)[C - 1];
    if (!more && p.mode == MODE_CKPT) {
      ckpt_io<DK, NW>(ckpt_at<DK>(p, cur), cur.dvb, st, false);
      if (cur.dvb == 0 && threadIdx.x == 0)
        p.ck_a[(int64_t)(cur.ch0 / p.kseg) * p.H + cur.h] = cur.dep ? ex2(la2) : -1.f;
    }
    if (!more && threadIdx.x == 0) *reinterpret_cast<int32_t *>(sm + sw * K::STAGE + K::M_W) = pend;
    bar();
    r3 = r3n;
    if (more) {
      s.ch++;
      continue;
    }
    if (!nxt.valid) break;
    cur = nxt;
    nxt = fetch_unit<STATES>(p, *reinterpret_cast<const int32_t *>(sm + sw * K::STAGE + K::M_W), nunits);
    sw ^= 1;
    if (threadIdx.x == 0) pend = (int)gridDim.x + atom_add(ctr, 1);
    begin_unit<DK, NW>(p, cur, st);
    la2 = 0.f;
    fl1 = cur.fl1;
    s.ch = cur.first;
  }
  cp_wait<0>();
}

/* The descriptor of chunk c (flags f) in list m (0 items, 1 checkpoints), at d:
 * {c, the first chunk the unit walks, f | FLAG_DEP, the flags of that chunk + 1}. */
FMLR_DEV void write_desc(const params &p, int m, int c, int32_t f, int32_t *d) {
  int32_t first = c, fl1, f0 = f;
  if (m == 1) { /* the segment before checkpoint c, from its document's first chunk at most */
    const int32_t ds = p.docstart[(int64_t)c * p.C];
    first = max(c - p.kseg, ds / p.C);
    if (ds < first * p.C) f0 |= FLAG_DEP;
    fl1 = p.flags[first + 1];
  } else if (f & FLAG_PRELUDE) { /* a state-only step over chunk c - 1 first */
    first = c - 1;
    fl1 = f;
  } else fl1 = c + 1 < p.nchunks ? p.flags[c + 1] : 0;
  d[0] = c, d[1] = first, d[2] = f0, d[3] = fl1;
}

/* The compact lists of the items (MODE_MAIN), of the checkpoints (MODE_CKPT),
 * of the items with state work (MODE_STATES under SKIP: the item walks a live
 * chunk, i.e. it starts with a prelude or at a checkpoint or goes on to the
 * next chunk, or final states are asked for) and of all items (MODE_STATES
 * otherwise), the last two without the items of covered segments (their S_in
 * comes from the checkpoint walk), chunks in order, as unit descriptors
 * (write_desc), and their counts (nitems). One block of 1024 threads, 1024
 * chunks a round: ballots, then the warps' counts in shared memory. */
static FMLR_KERNEL void FMLR_BOUNDS(1024, 1) items_kernel(const params p) {
  FMLR_SMEM(sm);
  constexpr int NL = 4; /* the lists */
  int32_t *cnt = reinterpret_cast<int32_t *>(sm); /* (NL, 32) */
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int base[NL] = {0, 0, 0, 0};
  for (int c0 = 0; c0 < p.nchunks; c0 += 1024) {
    const int c = c0 + tid;
    const int32_t f = c < p.nchunks ? p.flags[c] : 0;
    const bool goes_on = c + 1 < p.nchunks && !(p.flags[c + 1] & FLAG_ITEM_START);
    const bool state_work = (f & (FLAG_PRELUDE | FLAG_CKPT)) || goes_on || p.final_state;
    const bool item = (f & FLAG_ITEM_START) != 0, walked = item && !(f & FLAG_COV);
    const bool want[NL] = {item, (f & FLAG_CKPT) != 0, walked && state_work, walked};
    uint32_t bal[NL];
#pragma unroll
    for (int m = 0; m < NL; m++) {
      bal[m] = ballot(want[m]);
      if (lane == 0) cnt[m * 32 + warp] = popc(bal[m]);
    }
    bar();
#pragma unroll /* want, bal, base in registers (a loop over m put them in local memory) */
    for (int m = 0; m < NL; m++) {
      int off = base[m], tot = 0;
      for (int w = 0; w < 32; w++) {
        off += w < warp ? cnt[m * 32 + w] : 0;
        tot += cnt[m * 32 + w];
      }
      const int at = off + popc(bal[m] & ((1u << lane) - 1u));
      int32_t *list = m == 0 ? p.items_main : m == 1 ? p.items_ckpt : m == 2 ? p.items_state : p.items_all;
      if (want[m]) write_desc(p, m == 1 ? 1 : 0, c, f, list + 4 * at);
      base[m] += tot;
    }
    bar();
  }
  if (tid == 0) {
    for (int m = 0; m < NL; m++) p.nitems[m] = base[m];
    p.nitems[4] = p.nitems[5] = 0;
  }
}

/* The checkpoints' scan (after MODE_CKPT, before MODE_MAIN): in chunk order,
 * a checkpoint whose document began before its segment adds its predecessor's
 * state times the segment's decay. One thread per (head, state element). */
static FMLR_KERNEL void FMLR_BOUNDS(256, 1) ckpt_scan_kernel(const params p) {
  const int64_t per = (int64_t)p.dk * p.dv, idx = (int64_t)blockIdx.x * 256 + threadIdx.x;
  if (idx >= per * p.H) return;
  const int h = (int)(idx / per);
  float prev = 0.f;
  for (int slot = 0; (int64_t)slot * p.kseg < p.nchunks; slot++) {
    if (!(p.flags[slot * p.kseg] & FLAG_CKPT)) continue;
    const float a = p.ck_a[(int64_t)slot * p.H + h];
    float *x = p.ck_s + ((int64_t)slot * p.H + h) * per + idx % per;
    const float v = a >= 0.f ? *x + a * prev : *x;
    *x = v;
    prev = v;
  }
}

}  // namespace fmlr

#endif
