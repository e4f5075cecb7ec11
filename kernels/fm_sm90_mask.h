/* fm_sm90_mask.h — how the sm90 kernels mask a partial tile, written once
 * for the kernels and their host test (tests/test_sm90_mask.c). The forward
 * (fm_sm90_fwd.cuh): the producer's 16-row bit slices, where each method puts
 * them in shared memory, which accumulator element a consumer thread owns,
 * and how each method turns the slices into that thread's predicates. The
 * backward (fm_sm90_bwd.cuh; its S^T tile, keys as rows: the second half of
 * this header): the per-element interval compare and the R2P words built
 * from the thread's two keys' intervals. Static inline, C11 and CUDA (FM_HD
 * from core/fm_tile_rule.h): the test runs the very index and bit functions
 * the kernels run. One method knob for both passes (FM_SM90_MASK_*,
 * fm_attn_dev.h). kernels/PERF_NOTES.md, "R2P (issue 25): design and SASS".
 *
 * The forward's tile is BR x 128 (BR = 64 x consumer warpgroups). Consumer warp cw4
 * (= 4 x warpgroup + warp, 0 .. BR / 16 - 1) owns query rows 16 cw4 .. 16 cw4
 * + 15 of the row tile. wgmma m64nNk16's fp32 accumulator (PTX ISA, "Matrix
 * fragments for wgmma .m64nNk16", the D fragment): lane = 4 g + c4 holds,
 * for each n8 block n = 0 .. 15, s[4 n + 2 hr + e] = row 16 cw4 + g + 8 hr,
 * column 8 n + 2 c4 + e (hr, e in {0, 1}): two rows and 32 columns per thread.
 *
 * Slices: for each consumer warp and tile column c the producer writes one
 * uint16, bit r set when row 16 cw4 + r is masked at column c
 * (fm90m_row_slice), column c at uint16 c of the warp's 128, for both
 * methods; a thread reads the 32-bit word 4 n + c4 of each n8 block n
 * (columns 8 n + 2 c4 and + 1; fm90m_slices_word). The methods differ only
 * in how the thread turns its 16 words into predicates:
 *
 *   FM_SM90_MASK_SLICES  shifts each word right by g and tests
 *       bits 0, 8, 16, 24 (one bit test and one select per element).
 *   FM_SM90_MASK_R2P     gathers its 64 bits into three words
 *       (fm90m_r2p_gather: two instructions per 32-bit slice word) laid out
 *       so that each byte holds up to 6 consecutive predicate bits in bits
 *       1..6, which ptxas applies with R2P (register to predicates: one
 *       instruction sets P1..P6 from one byte) and one select per element.
 *
 *   FM_SM90_MASK_WORDS   (forward only: the method words) R2P's three words,
 *       precomputed per tile by a preprocessing kernel, copied into the K
 *       stage with K by the copy engine and read from shared memory (below).
 *
 * (A first R2P build permuted the columns so that a thread's 16 words were 4
 * runs of 4, read by 128-bit shared loads; it made the unmasked tiles dearer
 * through the code ptxas made of the rest of the kernel: PERF_NOTES, "R2P:
 * the unmasked tiles".)
 *
 * The enum of methods is fm_attn_dev.h's (FM_SM90_MASK_*: the launch-time
 * knob of fm_attn_tuning); this header needs only the layouts.
 */
#ifndef FM_SM90_MASK_H
#define FM_SM90_MASK_H

#include <stdbool.h>
#include <stdint.h>

#include "fm_tile_rule.h" /* FM_HD, FM_STATIC_ASSERT */

#if defined(__CUDACC__)
#define FM90M_UNROLL _Pragma("unroll")
#else
#define FM90M_UNROLL
#endif

enum {
  FM90M_BC = 128,            /* key columns per tile */
  FM90M_NB = FM90M_BC / 8,   /* n8 blocks of the accumulator: 16 */
  FM90M_R2P_GROUPS = 3       /* R2P words per thread: n8 blocks 0..5, 6..11, 12..15 */
};

/* ------------------------------------------------------------ ownership */

/* Row (0..15, inside the warp's 16) and tile column (0..127) of element idx
 * (0..63) of lane's accumulator fragment. */
FM_HD int fm90m_elem_row(int lane, int idx) { return (lane >> 2) + 8 * ((idx >> 1) & 1); }
FM_HD int fm90m_elem_col(int lane, int idx) { return 8 * (idx >> 2) + 2 * (lane & 3) + (idx & 1); }

/* ------------------------------------------------------------- producer */

/* The 16-row bit slice of one column for the consumer warp whose rows start
 * at `base`: bit r set when row base + r is masked (lower interval [lts,
 * lte), effective upper interval [us, ue), causal folded; fm_tile_rule.h). */
FM_HD uint32_t fm90m_row_slice(int32_t base, int32_t lts, int32_t lte, int32_t us, int32_t ue) {
#if defined(__CUDA_ARCH__)
  const int32_t a0 = min(max(lts - base, 0), 16), b0 = min(max(lte - base, a0), 16);
  const int32_t a1 = min(max(us - base, 0), 16), b1 = min(max(ue - base, a1), 16);
#else
  int32_t a0 = lts - base, b0 = lte - base, a1 = us - base, b1 = ue - base;
  a0 = a0 < 0 ? 0 : (a0 > 16 ? 16 : a0);
  b0 = b0 < a0 ? a0 : (b0 > 16 ? 16 : b0);
  a1 = a1 < 0 ? 0 : (a1 > 16 ? 16 : a1);
  b1 = b1 < a1 ? a1 : (b1 > 16 ? 16 : b1);
#endif
  return ((1u << b0) - (1u << a0)) | ((1u << b1) - (1u << a1));
}

/* -------------------------------------------------- consumer: SLICES */

/* The thread's word of n8 block n (its warp's slices read as uint32; both
 * methods) and, for SLICES, the bit of element (e, hr) in that word after
 * the shift by g. */
FM_HD int fm90m_slices_word(int n, int c4) { return 4 * n + c4; }
FM_HD int fm90m_slices_bit(int e, int hr) { return 16 * e + 8 * hr; }

/* --------------------------------------------------------- consumer: R2P */

/* Group j of n8 blocks: blocks fm90m_r2p_first(j) .. + fm90m_r2p_len(j) - 1. */
FM_HD int fm90m_r2p_first(int j) { return 6 * j; }
FM_HD int fm90m_r2p_len(int j) { return j < 2 ? 6 : 4; }
FM_HD int fm90m_r2p_group(int n) { return n < 12 ? n / 6 : 2; }

/* The bit of element (n, e, hr) in its group's word: byte 2 e + hr, bit
 * len - (n - first), i.e. bits 1..6 of each byte (bit 0 stays clear: nvcc
 * rewrites a test of bit 0 as a truncation, which ptxas then does not fold
 * into R2P; PERF_NOTES). */
FM_HD int fm90m_r2p_bit(int n, int e, int hr) {
  const int j = fm90m_r2p_group(n);
  return 8 * (2 * e + hr) + fm90m_r2p_len(j) - (n - fm90m_r2p_first(j));
}

FM_HD uint32_t fm90m_rotl1(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(x, x, 1);
#else
  return (x << 1) | (x >> 31);
#endif
}
FM_HD uint32_t fm90m_rotr(uint32_t x, int s) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(x, x, s);
#else
  s &= 31;
  return s ? (x >> s) | (x << (32 - s)) : x;
#endif
}

/* The thread's per-thread constants: the mask of its rows g, g + 8 in both
 * halves of a slice word, and the final rotation (g - 1 mod 32). */
FM_HD uint32_t fm90m_r2p_rowmask(int g) { return 0x01010101u << g; }
FM_HD int fm90m_r2p_rot(int g) { return (g + 31) & 31; }

/* One group's word from its `len` slice words w[0 .. len - 1] (n8 blocks
 * first .. first + len - 1; word k holds element (e, hr) of block first + k
 * at bit g + 8 (2 e + hr)): Horner over the words, rotating the partial word
 * by one each step (acc = rotl(acc, 1) | (w[k] & rowmask), one funnel shift
 * and one LOP3), then one rotation right by g - 1, so that block first + k
 * lands on bit len - k of each byte (fm90m_r2p_bit). */
FM_HD uint32_t fm90m_r2p_gather(const uint32_t *w, int len, uint32_t rowmask, int rot) {
  uint32_t acc = w[0] & rowmask;
  FM90M_UNROLL
  for (int k = 1; k < len; k++) acc = fm90m_rotl1(acc) | (w[k] & rowmask);
  return fm90m_rotr(acc, rot);
}

/* The thread's three words from its 16 slice words (w[n]: n8 block n). */
FM_HD void fm90m_r2p_words(const uint32_t w[FM90M_NB], int g, uint32_t acc[FM90M_R2P_GROUPS]) {
  const uint32_t rm = fm90m_r2p_rowmask(g);
  const int rot = fm90m_r2p_rot(g);
  FM90M_UNROLL
  for (int j = 0; j < FM90M_R2P_GROUPS; j++)
    acc[j] = fm90m_r2p_gather(w + fm90m_r2p_first(j), fm90m_r2p_len(j), rm, rot);
}

FM_STATIC_ASSERT(FM90M_NB == 16, "the R2P groups cover 16 n8 blocks (6 + 6 + 4)");

/* ------------------------------------------- consumer: WORDS (forward only)
 *
 * FM_SM90_MASK_WORDS (fm_attn_dev.h; the method words, fm_mask_method;
 * PERF_NOTES "R2P: the precomputed words, built"): the three words
 * fm90m_r2p_words gives each consumer thread, computed before the forward by a preprocessing kernel
 * (fm_sm90_fwd.cuh, words_kernel: the producer's slices, then each thread's
 * read and gather exactly as mask_r2p does them) and stored in a global
 * workspace. Layout [tile][j][thread]: a tile's words are one contiguous
 * block of fm90m_words_tile_bytes (3 KiB with 256 consumer threads, 4.5 KiB
 * with 384; a multiple of 16 bytes at a multiple of 16 bytes), which the
 * forward's producer copies with one bulk copy into the K stage's words
 * buffer (completing on the stage's K-full barrier, as K does); consumer
 * thread ctid reads its word j there at fm90m_words_slot (a warp's 32 reads
 * of word j are 128 consecutive bytes: no bank conflict) and applies the
 * three as R2P does, so the output is R2P's bit for bit. Dense over every
 * (set, row tile, key tile) of the forward's grid; only the tiles the
 * forward masks are written (and copied). Used only when the workspace fits
 * FM90M_WORDS_BUDGET; the forward runs R2P otherwise (fm_sm90.cu). */

/* 256 MiB: every single-set mask at 8K and 32K at both head dims (at most
 * 192 MiB at 32K, head dim 128; 192.4 MiB at head dim 64), small beside the
 * backward's workspace at those lengths (2 GiB of fp32 dQ at 8K); per-head
 * sets (random eviction: 512 sets at 8K, 6 GiB) and 128K fall back. */
#define FM90M_WORDS_BUDGET ((uint64_t)256 << 20)

/* Bytes of the dense workspace: nsets x tr x tc tiles, `threads` consumer
 * threads a tile, FM90M_R2P_GROUPS words each. */
FM_HD uint64_t fm90m_words_bytes(int64_t nsets, int64_t tr, int64_t tc, int threads) {
  return (uint64_t)nsets * (uint64_t)tr * (uint64_t)tc * (uint64_t)threads * FM90M_R2P_GROUPS * 4u;
}

/* Whether the words are used (else R2P): a non-empty grid within the budget. */
FM_HD bool fm90m_words_fit(int64_t nsets, int64_t tr, int64_t tc, int threads) {
  if (nsets < 1 || tr < 1 || tc < 1 || threads < 1 || nsets > INT32_MAX || tr > INT32_MAX || tc > INT32_MAX)
    return false;
  /* two factors below 2^31 multiply without wrapping; past the budget stop */
  const uint64_t rows = (uint64_t)nsets * (uint64_t)tr;
  if (rows > FM90M_WORDS_BUDGET || rows * (uint64_t)tc > FM90M_WORDS_BUDGET) return false;
  return fm90m_words_bytes(nsets, tr, tc, threads) <= FM90M_WORDS_BUDGET;
}

/* Whether key tile t (class cls at its row tile, fm_classify_minmax) gets
 * words: the tiles the skip forward visits (not MASKED) with F_NEEDMASK (not
 * UNMASKED, or cut by Sk): the producer's `decide` for SKIP. */
FM_HD bool fm90m_words_needed(int cls, int32_t t, int32_t sk) {
  return cls != FM_TILE_MASKED && (cls != FM_TILE_UNMASKED || (int64_t)(t + 1) * FM90M_BC > sk);
}

/* The tile's number in the workspace: (set, row tile, key tile) row-major. */
FM_HD int64_t fm90m_words_tile(int32_t set, int32_t rt, int32_t t, int32_t tr, int32_t tc) {
  return ((int64_t)set * tr + rt) * tc + t;
}

/* A tile's words: FM90M_R2P_GROUPS per consumer thread, one bulk copy. */
FM_HD int fm90m_words_tile_words(int threads) { return FM90M_R2P_GROUPS * threads; }
FM_HD int fm90m_words_tile_bytes(int threads) { return 4 * fm90m_words_tile_words(threads); }

/* Word j of consumer thread ctid (0 .. threads - 1, the thread's index among
 * the consumer warpgroups: 128 cw + tid) within its tile's block: where the
 * consumer reads it in the stage's words buffer. */
FM_HD int fm90m_words_slot(int j, int ctid, int threads) { return j * threads + ctid; }

/* The word's index in the workspace: its tile's block, then its slot. */
FM_HD int64_t fm90m_words_index(int64_t tile, int j, int ctid, int threads) {
  return tile * fm90m_words_tile_words(threads) + fm90m_words_slot(j, ctid, threads);
}

FM_STATIC_ASSERT((FM90M_R2P_GROUPS * 4 * 128) % 16 == 0,
                 "a tile's words (128 threads a warpgroup) are a bulk copy's multiple of 16 bytes");

/* ================================================== the backward: S^T tiles
 *
 * The backward (fm_sm90_bwd.cuh) masks S^T: a consumer warpgroup's wgmma
 * m64n64 accumulator holds 64 KEYS as rows and the 64 QUERIES of the query
 * tile as columns. The D fragment is the forward's (fm90m_elem_row/_col with
 * idx 0 .. 31): lane = 4 g + c4 holds st[4 nb + 2 hr + e] = key g + 8 hr of
 * its warp's 16, query 8 nb + 2 c4 + e of the tile (nb 0 .. 7): two keys and
 * 16 queries per thread. There are no slices: the thread holds its two keys'
 * intervals, as (start, length) pairs (ls, ll) and (us, ul) with ll, ul >= 0
 * (key_iv), for the whole item.
 *
 *   SLICES  per element the interval compare fm90m_t_masked.
 *   R2P     per key one 32-bit word, element (nb, e) at bit 4 nb + e + 1
 *       (fm90m_t_bit: bits 1, 2, 5, 6 of byte nb / 2, so one R2P sets the
 *       predicates of 4 elements). Along a key's word the queries increase,
 *       so each interval is one run of bits: at the start of an item each
 *       interval end v becomes a bit position fm90m_t_pos(v, c4) for query
 *       tile 0; a query tile m is 64 queries = 32 positions further, so per
 *       tile the run is [pos_s - 32 m, pos_e - 32 m), clamped (fm90m_t_run):
 *       three instructions per end, two to join a key's runs.
 *
 * Both give the same set for every int32 start and length >= 0 (queries
 * 0 <= i < 2^31): tests/test_sm90_mask.c. */

enum {
  FM90M_T_ROWS = 64,      /* the backward's query tile (BR): the accumulator's columns */
  FM90M_T_NB = 8,         /* n8 blocks of the m64n64 accumulator */
  FM90M_T_SHIFT = 32      /* R2P: bit positions per query tile (4 per n8 block) */
};

/* SLICES: query i masked for a key with intervals (ls, ll), (us, ul). The
 * kernel's softmax_ds writes this expression out (through the call, ptxas
 * orders two compares differently from main's SASS). */
FM_HD bool fm90m_t_masked(uint32_t i, int32_t ls, int32_t ll, int32_t us, int32_t ul) {
  return (i - (uint32_t)ls < (uint32_t)ll) || (i - (uint32_t)us < (uint32_t)ul);
}

/* R2P: the key word (0: key g, 1: key g + 8) and the bit of element idx. */
FM_HD int fm90m_t_word(int idx) { return (idx >> 1) & 1; }
FM_HD int fm90m_t_bit(int idx) { return 4 * (idx >> 2) + (idx & 1) + 1; }

/* The bit position of interval end v (a query row) for lanes c4 at query
 * tile 0: the bit of the first of the thread's queries at or after v (or,
 * between two of them, a position between their bits). With y = max(v, 0) -
 * 2 c4 the offset from the thread's first query: 4 floor(y / 8) + min(y mod
 * 8, 2) + 1 (two queries per n8 block, 4 bits per block). Monotone in v and
 * fm90m_t_pos(v - 64 m) = fm90m_t_pos(v) - 32 m for v >= 64 m. */
FM_HD int32_t fm90m_t_pos(int32_t v, int c4) {
  const int32_t y = (v < 0 ? 0 : v) - 2 * c4;  /* -6 .. 2^31 - 1 */
  const uint32_t u = (uint32_t)y + 8u;          /* y + 8 >= 2: the shift floors */
  const int32_t r = (int32_t)(u & 7u);
  return 4 * (int32_t)(u >> 3) - 4 + (r < 2 ? r : 2) + 1;
}

/* The end of interval (s, len), len >= 0, saturated at 2^31 - 1 (no query
 * reaches it). */
FM_HD int32_t fm90m_t_end(int32_t s, int32_t len) {
  return s > 0 && len > INT32_MAX - s ? INT32_MAX : s + len;
}

/* Bits q .. 31 (q <= 0: all, q >= 32: none). */
FM_HD uint32_t fm90m_t_from(int32_t q) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_lc(0u, ~0u, (uint32_t)max(q, 0));
#else
  return q <= 0 ? ~0u : (q >= 32 ? 0u : ~0u << q);
#endif
}

/* The run of bits [ps - shift, pe - shift) of one interval at the query tile
 * whose shift is FM90M_T_SHIFT m. */
FM_HD uint32_t fm90m_t_run(int32_t ps, int32_t pe, int32_t shift) {
  return fm90m_t_from(ps - shift) & ~fm90m_t_from(pe - shift);
}

/* A key's word at query tile m from its four positions p[0 .. 3] = the lower
 * interval's start and end, the upper's. */
FM_HD uint32_t fm90m_t_key_word(const int32_t *p, int32_t m) {
  const int32_t sh = FM90M_T_SHIFT * m;
  return fm90m_t_run(p[0], p[1], sh) | fm90m_t_run(p[2], p[3], sh);
}

FM_STATIC_ASSERT(FM90M_T_SHIFT * 2 == FM90M_T_ROWS && FM90M_T_NB * 8 == FM90M_T_ROWS,
                 "R2P backward: 4 bit positions per n8 block of 8 queries");

#endif
