/* fm_sm90_bwd_order.h — the sm90 backward's deterministic dQ summation order
 * (kernels/fm_sm90_bwd.cuh, deterministic = 1), in plain C so that the host
 * model of the schedule (tests/test_bwd_det_order.c) and the protocol model
 * (tests/test_bwd_dq_protocol.c) run the kernel's own rule.
 *
 * The rule, a function of the mask's tile bounds and the shapes only:
 *
 *   1. Every key tile n of a mask set gets the key fmbo_key: the number of
 *      query tiles before its last visited one that it does not visit
 *      (-1 when it visits none). For a key tile that visits one contiguous
 *      run [a, e) of query tiles that is a; in general, key tile n reaches a
 *      visited query tile m after (m - fmbo_key) tiles of its own when m is
 *      in its last run.
 *   2. The take order of the set: key tiles by key descending, ties by n
 *      ascending (fmbo_before). The persistent grid takes the (batch, head)s
 *      in groups of FMBO_HEAD_GROUP in index order, within a group take
 *      position 0 of each head, then position 1, ... (fmbo_item), so that
 *      consecutive items of one head start a group apart: visitors of a query
 *      tile that reach it at the same rank (ties: the global rows of
 *      global_sliding_window, a document's key tiles) then arrive spread out
 *      instead of at once, and the chain of their turns (a completed addition
 *      and a counter hand-off each) does not hold them up. The default mode
 *      keeps heads in order and key tiles ascending.
 *   3. The turns: query tile m's dQ additions happen in take order among the
 *      key tiles that visit m (fmbo_visits: not MASKED by the min/max rule,
 *      exactly the producer's decision), the i-th visitor on turn i. A key
 *      tile that skips m takes no turn: nobody passes anything for it, and
 *      the NOSKIP variant leaves those MASKED pairs out of the sum (their
 *      turn is FMBO_NONE), so deterministic SKIP == NOSKIP bit for bit
 *      without any signed-zero argument.
 *
 * Why this order: a key tile that starts at query tile a reaches m after m - a
 * of its own tiles; taking key tiles with a later start first makes, at every
 * m, the earlier-taken visitors the ones with fewer tiles before m, so that in
 * a schedule where items start in take order each visitor's predecessor
 * reaches m no later than it does (causal, sliding window, (causal) document,
 * prefix LM, QK-sparse, random eviction: no chain; full: ascending n, as
 * before). Every wait is for a key tile taken earlier (a lower take position of
 * the same head), so the waits end on any number of CTAs: the first-taken
 * item waits for nobody, and each item waits only for items already running
 * or done.
 *
 * Tables (deterministic mode only; built on the device by fm_sm90_bwd.cu's
 * order kernels, on the host by the tests), per mask set s:
 *   take[s][k]    int32, (nsets, Tc): the key tile at take position k;
 *   turn[s][m][n] int16, (nsets, Tr, Tc): key tile n's turn at query tile m,
 *                 FMBO_NONE where n does not visit m (Tc <= FMBO_MAX_TC). */
#ifndef FM_SM90_BWD_ORDER_H
#define FM_SM90_BWD_ORDER_H

#include <stdint.h>

#include "fm_tile_rule.h"


enum {
  FMBO_NONE = -1,        /* turn of a pair that takes none (MASKED by the min/max rule) */
  FMBO_MAX_TC = 32767,   /* turns are int16: at most this many key tiles (Sk <= 4M at BC = 128) */
  FMBO_HEAD_GROUP = 8    /* rule 2: (batch, head)s taken in groups of this many, interleaved */
};

/* Does key tile (bounds b) visit query tile m (rows m br .. min((m + 1) br, sq))?
 * The producer's decision in the SKIP variant, to the bit. */
FM_HD int fmbo_visits(const fm_tile_bounds *b, int32_t m, int32_t br, int32_t sq) {
  const int32_t r0 = m * br, r1 = (m + 1) * br < sq ? (m + 1) * br : sq;
  return fm_classify_minmax(b, r0, r1) != FM_TILE_MASKED;
}

/* The key of rule 1 in O(1): from the min/max rule's masked row-tile spans
 * (fm_minmax_row_spans, equal to fmbo_visits tile by tile), visited = the
 * query tiles outside their union. -1 when the key tile visits none. */
FM_HD int32_t fmbo_key(const fm_tile_bounds *b, int32_t br, int32_t sq) {
  const int32_t tr = fm_rows_ceil(sq, br, sq);
  fm_tile_span masked[2], touched[2], u[2];
  fm_minmax_row_spans(b, br, sq, masked, touched);
  const int nu = fm_span_union(masked[0], masked[1], u);
  int32_t nmasked = 0, last = tr - 1;
  for (int i = 0; i < nu; i++) {
    const int32_t e = u[i].end < tr ? u[i].end : tr;
    if (u[i].begin < e) nmasked += e - u[i].begin;
  }
  if (nmasked >= tr) return -1;
  /* the union's spans are sorted, disjoint and non-adjacent: the last one, if it
     reaches the end, ends the visited tiles one before its start */
  if (nu > 0 && u[nu - 1].end >= tr) last = u[nu - 1].begin - 1;
  return last + 1 - (tr - nmasked);
}

/* Rule 2: is key tile na (key ka) taken before key tile nb (key kb)? */
FM_HD int fmbo_before(int32_t ka, int32_t na, int32_t kb, int32_t nb) {
  return ka > kb || (ka == kb && na < nb);
}

/* Rule 2's item i (the atomic counter's value, 0 .. nbh tc - 1 < 2^31): its
 * (batch, head) and take position. Groups of FMBO_HEAD_GROUP heads, the last
 * one possibly smaller; within a group take position k of its heads in turn.
 * 32-bit arithmetic (the kernel checks nbh tc < 2^31): a 64-bit division is a
 * call of ~100 instructions. */
FM_HD void fmbo_item(int32_t i, int32_t nbh, int32_t tc, int32_t *bh, int32_t *k) {
  const int32_t grp = i / (FMBO_HEAD_GROUP * tc), in = i - grp * (FMBO_HEAD_GROUP * tc);
  const int32_t left = nbh - grp * FMBO_HEAD_GROUP, gs = left < FMBO_HEAD_GROUP ? left : FMBO_HEAD_GROUP;
  *bh = grp * FMBO_HEAD_GROUP + in % gs;
  *k = in / gs;
}

/* Table offsets (64-bit: nsets * Tr * Tc may pass 2^31). */
FM_HD int64_t fmbo_take_at(int32_t set, int32_t tc, int32_t k) { return (int64_t)set * tc + k; }
FM_HD int64_t fmbo_turn_at(int32_t set, int32_t tr, int32_t tc, int32_t m, int32_t n) {
  return ((int64_t)set * tr + m) * tc + n;
}

#endif
