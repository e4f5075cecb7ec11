/* fm_tile_rule.h — the one definition of FlashMask tile bounds and the
 * min/max classification rule, shared by the C core and the CUDA kernels.
 *
 * Everything here is static inline, integer-exact and free of allocation, so
 * the CPU simulation and the GPU kernels cannot disagree (docs/DESIGN.md,
 * "The tile rule").
 *
 * Semantics (docs/DESIGN.md, "Semantics"): row i may not attend key column j when
 *   i in [LTS_j, LTE_j)  or  i in [UTS_j, UTE_j)  or  (causal and i < c_j),
 * with the causal limit c_j = clamp(j + Sq - Sk, 0, Sq) (bottom-right aligned).
 * A causal mask folds its triangle into the upper interval: the effective
 * upper interval is [0, max(UTE_j, c_j)). fm_colmask validation guarantees a
 * causal mask's upper interval is empty or starts at or above the triangle
 * (UTS_j <= c_j), so the fold is exact.
 */
#ifndef FM_TILE_RULE_H
#define FM_TILE_RULE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define FM_HD __host__ __device__ __forceinline__
#else
#define FM_HD static inline
#endif

/* Tile classes, as stored in tiles.npy (uint8). */
enum {
  FM_TILE_MASKED = 0,   /* every element masked: skipped, no K/V load, no math */
  FM_TILE_PARTIAL = 1,  /* some elements masked: element-wise mask */
  FM_TILE_UNMASKED = 2, /* no element masked: no mask work */
  FM_TILE_NCLASSES = 3
};

/* Rows [0, c) of key column j are masked by a causal mask (bottom-right aligned). */
FM_HD int32_t fm_causal_limit(int32_t j, int32_t sq, int32_t sk) {
  int64_t c = (int64_t)j + (int64_t)sq - (int64_t)sk;
  return c < 0 ? 0 : (c > sq ? sq : (int32_t)c);
}

/* The upper interval of column j with the causal triangle folded in. */
FM_HD void fm_effective_upper(int32_t uts, int32_t ute, int causal, int32_t j,
                              int32_t sq, int32_t sk, int32_t *s, int32_t *e) {
  if (!causal) {
    *s = uts;
    *e = ute;
    return;
  }
  int32_t c = fm_causal_limit(j, sq, sk);
  *s = 0;
  *e = (uts < ute && ute > c) ? ute : c;
}

/* The 8 min/max bounds of one key tile (over its real columns only). */
typedef struct fm_tile_bounds {
  int32_t lts_min, lts_max, lte_min, lte_max; /* lower interval [LTS, LTE), rows */
  int32_t uts_min, uts_max, ute_min, ute_max; /* upper interval, causal folded in */
} fm_tile_bounds;

/* A compile-time check written once for C11 and for C++ (CUDA). */
#if defined(__cplusplus)
#define FM_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define FM_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* The kernels read one tile's bounds as two int4 loads (kernels/fm_sm80_fwd.cuh,
 * kernels/fm_sm90_fwd.cuh):
 * x, y, z, w = lts_min, lts_max, lte_min, lte_max, then uts_min .. ute_max. */
#define FM_BOUNDS_AT(field, k) \
  FM_STATIC_ASSERT(offsetof(fm_tile_bounds, field) == 4 * (k), "fm_tile_bounds." #field " moved")
FM_STATIC_ASSERT(sizeof(fm_tile_bounds) == 32, "fm_tile_bounds is read as two int4 (32 bytes)");
FM_BOUNDS_AT(lts_min, 0); FM_BOUNDS_AT(lts_max, 1); FM_BOUNDS_AT(lte_min, 2); FM_BOUNDS_AT(lte_max, 3);
FM_BOUNDS_AT(uts_min, 4); FM_BOUNDS_AT(uts_max, 5); FM_BOUNDS_AT(ute_min, 6); FM_BOUNDS_AT(ute_max, 7);
#undef FM_BOUNDS_AT

FM_HD void fm_bounds_reset(fm_tile_bounds *b) {
  b->lts_min = b->lte_min = b->uts_min = b->ute_min = INT32_MAX;
  b->lts_max = b->lte_max = b->uts_max = b->ute_max = INT32_MIN;
}

/* Add one column: lts/lte as stored, uts/ute already effective (folded). */
FM_HD void fm_bounds_add(fm_tile_bounds *b, int32_t lts, int32_t lte, int32_t uts, int32_t ute) {
  if (lts < b->lts_min) b->lts_min = lts;
  if (lts > b->lts_max) b->lts_max = lts;
  if (lte < b->lte_min) b->lte_min = lte;
  if (lte > b->lte_max) b->lte_max = lte;
  if (uts < b->uts_min) b->uts_min = uts;
  if (uts > b->uts_max) b->uts_max = uts;
  if (ute < b->ute_min) b->ute_min = ute;
  if (ute > b->ute_max) b->ute_max = ute;
}

/* The 8 bounds of the key tile made of columns j0, j0 + step, ... < j1 of one
 * vector set (lts..ute: the set's (Sk,) int32 vectors as stored; the causal
 * triangle is folded into the upper interval here). step is 1 for a whole tile
 * on the CPU; a warp passes j0 + lane and step 32 and merges the lanes' bounds
 * (min of the mins, max of the maxes). No columns (j0 >= j1) gives the reset
 * bounds. The one reduction of the column vectors into tile bounds: fm_tiles.c
 * and the kernels' preprocessing use it. */
FM_HD fm_tile_bounds fm_tile_bounds_of_columns(const int32_t *lts, const int32_t *lte,
                                               const int32_t *uts, const int32_t *ute,
                                               int32_t j0, int32_t j1, int32_t step, int causal,
                                               int32_t sq, int32_t sk) {
  fm_tile_bounds b;
  fm_bounds_reset(&b);
  for (int32_t j = j0; j < j1; j += step) {
    int32_t us, ue;
    fm_effective_upper(uts[j], ute[j], causal, j, sq, sk, &us, &ue);
    fm_bounds_add(&b, lts[j], lte[j], us, ue);
  }
  return b;
}

/* The paper's min/max rule for rows [r0, r1) of a key tile (r0 < r1):
 * MASKED when one interval covers the rows in every column of the tile,
 * PARTIAL when some interval may reach into the rows, else UNMASKED.
 * Conservative: a tile covered only by the union of both intervals, or an
 * empty interval that is not in canonical position, reads as PARTIAL. */
FM_HD int fm_classify_minmax(const fm_tile_bounds *b, int32_t r0, int32_t r1) {
  if ((r0 >= b->lts_max && r1 <= b->lte_min) || (r0 >= b->uts_max && r1 <= b->ute_min))
    return FM_TILE_MASKED;
  if ((r1 > b->lts_min && r0 < b->lte_max) || (r1 > b->uts_min && r0 < b->ute_max))
    return FM_TILE_PARTIAL;
  return FM_TILE_UNMASKED;
}

/* Row tiles [begin, end) of one key tile. */
typedef struct fm_tile_span {
  int32_t begin, end;
} fm_tile_span;

/* ceil(v / br) and floor(v / br) of a row index v clamped to [0, sq]. */
FM_HD int32_t fm_rows_ceil(int32_t v, int32_t br, int32_t sq) {
  int64_t c = v < 0 ? 0 : (v > sq ? sq : v);
  return (int32_t)((c + br - 1) / br);
}
FM_HD int32_t fm_rows_floor(int32_t v, int32_t br, int32_t sq) {
  int64_t c = v < 0 ? 0 : (v > sq ? sq : v);
  return (int32_t)(c / br);
}

/* The min/max rule of a whole key tile at once: the row tiles (Br rows each,
 * the last one cut at Sq) that fm_classify_minmax calls MASKED are the union
 * of masked[0] (lower interval) and masked[1] (upper interval); the ones it
 * calls MASKED or PARTIAL ("touched") are the union of touched[0] and
 * touched[1], and masked[k] lies inside touched[k]. So PARTIAL = touched
 * minus masked and UNMASKED = the rest: O(1) per key tile instead of O(Tr),
 * equal to fm_classify_minmax row tile by row tile (tests/test_tiles.c).
 * Spans may be empty (begin >= end) and may overlap each other. */
FM_HD void fm_minmax_row_spans(const fm_tile_bounds *b, int32_t br, int32_t sq,
                               fm_tile_span masked[2], fm_tile_span touched[2]) {
  const int32_t tr = fm_rows_ceil(sq, br, sq);
  /* MASKED by [s, e) in every column: r0 >= max s and r1 <= min e, where
     r1 = min(r0 + Br, Sq) so that min e = Sq admits the last, short tile */
  const int32_t smax[2] = {b->lts_max, b->uts_max}, emin[2] = {b->lte_min, b->ute_min};
  const int32_t smin[2] = {b->lts_min, b->uts_min}, emax[2] = {b->lte_max, b->ute_max};
  for (int k = 0; k < 2; k++) {
    masked[k].begin = fm_rows_ceil(smax[k], br, sq);
    masked[k].end = emin[k] >= sq ? tr : fm_rows_floor(emin[k], br, sq);
    /* touched: r1 > min s (no tile when min s >= Sq) and r0 < max e */
    touched[k].begin = smin[k] >= sq ? tr : fm_rows_floor(smin[k], br, sq);
    touched[k].end = fm_rows_ceil(emax[k], br, sq);
    if (masked[k].end < masked[k].begin) masked[k].end = masked[k].begin;
    if (touched[k].end < touched[k].begin) touched[k].end = touched[k].begin;
  }
}

/* The union of two spans as at most two sorted, disjoint, non-adjacent,
 * non-empty spans; returns their count. */
FM_HD int fm_span_union(fm_tile_span a, fm_tile_span b, fm_tile_span out[2]) {
  int n = 0;
  if (a.begin >= a.end) {
    a = b;
    b.end = b.begin;
  }
  if (b.begin >= b.end) {
    if (a.begin < a.end) out[n++] = a;
    return n;
  }
  if (b.begin < a.begin) {
    fm_tile_span t = a;
    a = b;
    b = t;
  }
  if (b.begin <= a.end) {
    out[0].begin = a.begin;
    out[0].end = b.end > a.end ? b.end : a.end;
    return 1;
  }
  out[0] = a;
  out[1] = b;
  return 2;
}

/* Element test on effective intervals (used by partial tiles). */
FM_HD int fm_masked_effective(int32_t i, int32_t lts, int32_t lte, int32_t uts_e, int32_t ute_e) {
  return (i >= lts && i < lte) || (i >= uts_e && i < ute_e);
}

#endif
