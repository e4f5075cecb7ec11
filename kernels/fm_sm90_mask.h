/* fm_sm90_mask.h — how the sm90 forward (fm_sm90_fwd.cuh) masks a partial
 * tile, written once for the kernel and its host test
 * (tests/test_sm90_mask.c): the producer's 16-row bit slices, where each
 * method puts them in shared memory, which accumulator element a consumer
 * thread owns, and how each method turns the slices into that thread's
 * predicates. Static inline, C11 and CUDA (FM_HD from core/fm_tile_rule.h):
 * the test runs the very index and bit functions the kernel runs.
 * kernels/PERF_NOTES.md, "R2P (issue 25): design and SASS".
 *
 * The tile is BR x 128 (BR = 64 x consumer warpgroups). Consumer warp cw4
 * (= 4 x warpgroup + warp, 0 .. BR / 16 - 1) owns query rows 16 cw4 .. 16 cw4
 * + 15 of the row tile. wgmma m64nNk16's fp32 accumulator (PTX ISA, "Matrix
 * fragments for wgmma .m64nNk16", the D fragment): lane = 4 g + c4 holds,
 * for each n8 block n = 0 .. 15, s[4 n + 2 hr + e] = row 16 cw4 + g + 8 hr,
 * column 8 n + 2 c4 + e (hr, e in {0, 1}): two rows and 32 columns per thread.
 *
 * Slices: for each consumer warp and tile column c the producer writes one
 * uint16, bit r set when row 16 cw4 + r is masked at column c
 * (fm90m_row_slice). The methods differ only in where a column's uint16 sits
 * inside the warp's 128 (fm90m_slot) and in how the consumer reads them:
 *
 *   FM_SM90_MASK_SLICES  (the default) column c at uint16 c. The thread reads
 *       the 32-bit word 4 n + c4 of each n8 block (columns 8 n + 2 c4 and
 *       + 1), shifts it right by g and tests bits 0, 8, 16, 24 (one
 *       bit test and one select per element).
 *   FM_SM90_MASK_R2P     columns permuted so that the 16 words of thread c4
 *       are 4 runs of 4 (one 128-bit load each); the thread gathers its 64
 *       bits into three words (fm90m_r2p_gather: two instructions per 32-bit
 *       slice word) laid out so that each byte holds up to 6 consecutive
 *       predicate bits in bits 1..6, which ptxas applies with R2P (register
 *       to predicates: one instruction sets P1..P6 from one byte) and one
 *       select per element.
 *
 * The enum of methods is fm_attn_dev.h's (FM_SM90_MASK_*: the launch-time
 * knob of fm_attn_tuning); this header needs only the layouts.
 */
#ifndef FM_SM90_MASK_H
#define FM_SM90_MASK_H

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

/* The R2P layout's 32-bit word of n8 block n for threads c4: the four blocks
 * 4 q .. 4 q + 3 of one c4 are one 16-byte run (word 16 q + 4 c4), so that a
 * thread reads its 16 words in 4 loads of 128 bits and the 4 runs of one q
 * are 64 consecutive bytes (no bank conflict). */
FM_HD int fm90m_r2p_word(int n, int c4) { return (n >> 2) * 16 + c4 * 4 + (n & 3); }

/* Where column c's uint16 sits among its warp's 128 (slot c for SLICES). */
FM_HD int fm90m_slot(int r2p, int c) {
  return r2p ? 2 * fm90m_r2p_word(c >> 3, (c >> 1) & 3) + (c & 1) : c;
}

/* -------------------------------------------------- consumer: SLICES */

/* The SLICES thread's word of n8 block n (its warp's slices read as
 * uint32) and the bit of element (e, hr) in that word after the shift by g. */
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

#endif
