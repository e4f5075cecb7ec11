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

/* Element test on effective intervals (used by partial tiles). */
FM_HD int fm_masked_effective(int32_t i, int32_t lts, int32_t lte, int32_t uts_e, int32_t ute_e) {
  return (i >= lts && i < lte) || (i >= uts_e && i < ute_e);
}

#endif
