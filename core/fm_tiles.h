/* fm_tiles.h — per-key-tile bounds and tile classification of a column mask.
 *
 * The tile grid has Tr = ceil(Sq / Br) row tiles and Tc = ceil(Sk / Bc) key
 * tiles; tiles cut by a sequence end hold only their real rows and columns.
 * Two classes per tile: the paper's min/max rule (fm_tile_rule.h, what a
 * kernel decides from the 8 bounds) and the exact class (what the mask really
 * is in that tile). Work is O(Sk + Tr * Tc) time and O(Tr + Tc) memory per set;
 * nothing here is O(Sq * Sk).
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

/* Validates a tile size: 1 <= Br, Bc <= 65536. */
fm_status fm_tile_size_check(int64_t br, int64_t bc, fm_err *err);

/* The 8 bounds of every key tile of one set: out is (Tc,) fm_tile_bounds. */
void fm_tile_bounds_compute(const fm_colmask *m, int32_t set, int32_t bc, fm_tile_bounds *out);

/* Classifies every tile of every set. classes and exact, when not NULL, are
 * (nsets, Tr, Tc) uint8 FM_TILE_* (caller-allocated). */
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
