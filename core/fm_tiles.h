/* fm_tiles.h — per-key-tile bounds and tile classification of a column mask.
 *
 * The tile grid has Tr = ceil(Sq / Br) row tiles and Tc = ceil(Sk / Bc) key
 * tiles; tiles cut by a sequence end hold only their real rows and columns.
 * Two classes per tile: the paper's min/max rule (fm_tile_rule.h, what a
 * kernel decides from the 8 bounds) and the exact class (what the mask really
 * is in that tile).
 *
 * Counting never visits tiles one by one. Per key tile, the min/max classes of
 * its row tiles are a few contiguous spans (fm_minmax_row_spans): O(1) per key
 * tile after the O(Bc) bounds reduction. The exact class can differ from the
 * min/max one only on the min/max PARTIAL row tiles; there it is found by
 * intersecting, column by column, the rows every column masks and the rows no
 * column touches, stopping as soon as both are empty: O(Bc) per key tile with
 * partial rows for the masks of every family (in the worst case, random
 * intervals, O(Bc * k) where k <= 2 Bc is the number of spans the exact classes
 * break into). Per-row-tile and per-key-tile work (what a scheduler needs)
 * comes from difference arrays. In all: O(Sk + Tr) time per vector set and
 * O(Tr + Bc) scratch memory; nothing here is O(Sq * Sk) or O(Tr * Tc), except
 * the per-tile maps of fm_classify, which are O(Tr * Tc) by nature.
 */
#ifndef FM_TILES_H
#define FM_TILES_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_tile_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_tile_counts {
  int64_t total;                     /* tiles over every vector set */
  int64_t minmax[FM_TILE_NCLASSES];  /* by the min/max rule, indexed by FM_TILE_* */
  int64_t exact[FM_TILE_NCLASSES];   /* by exact class */
  int64_t partial_but_masked;        /* min/max PARTIAL, exactly MASKED */
  int64_t partial_but_unmasked;      /* min/max PARTIAL, exactly UNMASKED */
  double sparsity;                   /* rho = minmax[MASKED] / total */
  double sparsity_exact;             /* exact[MASKED] / total */
} fm_tile_counts;

/* The work of one row tile (over its Tc key tiles) or of one key tile (over
 * its Tr row tiles) by the min/max rule, i.e. as the kernel decides it. */
typedef struct fm_work {
  int32_t visited; /* tiles not MASKED: K/V loaded and math done */
  int32_t partial; /* of those, PARTIAL (element mask); visited - partial are UNMASKED */
} fm_work;

/* "masked", "partial" or "unmasked" for FM_TILE_* (the names traces, JSON
 * and reports use); "?" for anything else. Static storage. */
const char *fm_tile_class_name(int cls);

/* Validates a tile size: 1 <= Br, Bc <= 65536. */
fm_status fm_tile_size_check(int64_t br, int64_t bc, fm_err *err);

/* The 8 bounds of every key tile of one set: out is (Tc,) fm_tile_bounds. */
void fm_tile_bounds_compute(const fm_colmask *m, int32_t set, int32_t bc, fm_tile_bounds *out);

/* Counts the tiles of every set without visiting them: O(Sk + Tr) per set.
 * exact: 1 also counts exact classes (counts->exact, partial_but_*,
 * sparsity_exact); 0 leaves those zero (sparsity_exact NaN), for callers that
 * need only what the kernel does. rows, when not NULL, receives the work of
 * every row tile, (nsets, Tr) fm_work; cols, when not NULL, that of every key
 * tile, (nsets, Tc) fm_work (caller-allocated). counts may be NULL.
 * FM_EINVAL for a bad tile size, FM_ENOMEM when the O(Tr + Bc) scratch cannot
 * be allocated. */
fm_status fm_tile_count(const fm_colmask *m, int32_t br, int32_t bc, int exact,
                        fm_tile_counts *counts, fm_work *rows, fm_work *cols, fm_err *err);

/* One key tile's row tiles by class, as fm_tile_walk hands them out: spans of
 * row tiles [begin, end), each list sorted, disjoint and non-empty. Every
 * row tile of the key tile is in exactly one of: masked (min/max MASKED);
 * touched minus masked (min/max PARTIAL); the rest (min/max UNMASKED).
 * xmasked and xclear (exact walks only, else empty) split the min/max
 * PARTIAL row tiles further: exactly MASKED, exactly UNMASKED; the PARTIAL
 * ones that are in neither are exactly PARTIAL. The pointers are valid only
 * during the call. */
typedef struct fm_key_tile_spans {
  int32_t set, ct, tr;              /* vector set, key tile, row tiles of the grid */
  const fm_tile_span *masked;       /* (nmasked <= 2,) */
  const fm_tile_span *touched;      /* (ntouched <= 2,), a superset of masked */
  const fm_tile_span *xmasked;      /* (nxmasked,) inside touched minus masked */
  const fm_tile_span *xclear;       /* (nxclear,) inside touched minus masked */
  int nmasked, ntouched, nxmasked, nxclear;
} fm_key_tile_spans;

typedef void (*fm_key_tile_fn)(const fm_key_tile_spans *k, void *ctx);

/* Walks every key tile of every set (sets in order, key tiles ascending) at
 * Br x Bc and calls fn with its row-tile spans: the per-tile classes of
 * fm_classify without a per-tile map, O(Sk + Tr) per set as fm_tile_count
 * (exact: 1 also finds the exact classes). Errors as fm_tile_count. */
fm_status fm_tile_walk(const fm_colmask *m, int32_t br, int32_t bc, int exact, fm_key_tile_fn fn,
                       void *ctx, fm_err *err);

/* Classifies every tile of every set: the counts of fm_tile_count (with exact
 * classes) and, when not NULL, the per-tile maps classes and exact, each
 * (nsets, Tr, Tc) uint8 FM_TILE_* (caller-allocated; O(Tr * Tc) to fill). */
fm_status fm_classify(const fm_colmask *m, int32_t br, int32_t bc, fm_tile_counts *counts,
                      uint8_t *classes, uint8_t *exact, fm_err *err);

/* Tiles where per-pair classes (batch, heads, per_set), e.g. a kernel's own
 * record, differ from fm_classify's per-set classes (nsets, per_set), over
 * every (b, h) pair; per_set = Tr * Tc. */
int64_t fm_class_mismatches(const fm_colmask *m, const uint8_t *set_classes,
                            const uint8_t *pair_classes, int64_t batch, int64_t heads,
                            int64_t per_set);

#ifdef __cplusplus
}
#endif
#endif
