#include "fm_tiles.h"

#include <stdlib.h>
#include <string.h>

fm_status fm_tile_size_check(int64_t br, int64_t bc, fm_err *err) {
  if (br < 1 || br > 65536 || bc < 1 || bc > 65536)
    return fm_fail(err, FM_EINVAL, "tile sizes must be in 1..65536 (got Br=%lld, Bc=%lld)",
                   (long long)br, (long long)bc);
  return FM_OK;
}

void fm_tile_bounds_compute(const fm_colmask *m, int32_t set, int32_t bc, fm_tile_bounds *out) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), causal = fm_colmask_causal(m);
  const int32_t *lts = fm_colmask_cvec(m, set, FM_LTS), *lte = fm_colmask_cvec(m, set, FM_LTE);
  const int32_t *uts = fm_colmask_cvec(m, set, FM_UTS), *ute = fm_colmask_cvec(m, set, FM_UTE);
  int32_t tc = (sk + bc - 1) / bc;
  for (int32_t t = 0; t < tc; t++) {
    fm_tile_bounds *b = &out[t];
    fm_bounds_reset(b);
    int32_t j1 = (t + 1) * bc < sk ? (t + 1) * bc : sk;
    for (int32_t j = t * bc; j < j1; j++) {
      int32_t us, ue;
      fm_effective_upper(uts[j], ute[j], causal, j, sq, sk, &us, &ue);
      fm_bounds_add(b, lts[j], lte[j], us, ue);
    }
  }
}

/* Row-tile ranges of one masked run [a, b): tiles [*c0, *c1) lie inside it,
 * tiles [*t0, *t1) meet it. */
static inline void run_tiles(int32_t a, int32_t b, int32_t sq, int32_t br, int32_t tr, int32_t *c0,
                             int32_t *c1, int32_t *t0, int32_t *t1) {
  *c0 = (a + br - 1) / br;
  *c1 = b == sq ? tr : b / br;
  if (*c1 < *c0) *c1 = *c0;
  *t0 = a / br;
  *t1 = (b + br - 1) / br;
}

fm_status fm_classify(const fm_colmask *m, int32_t br, int32_t bc, fm_tile_counts *counts,
                      uint8_t *classes, uint8_t *exact, fm_err *err) {
  fm_status st = fm_tile_size_check(br, bc, err);
  if (st != FM_OK) return st;
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  int32_t tr = (sq + br - 1) / br, tc = (sk + bc - 1) / bc;
  memset(counts, 0, sizeof *counts);
  fm_tile_bounds *bounds = malloc(sizeof *bounds * (size_t)tc);
  /* difference arrays over row tiles: columns covering / touching each row tile */
  int32_t *cover = malloc(sizeof(int32_t) * (size_t)(tr + 1));
  int32_t *touch = malloc(sizeof(int32_t) * (size_t)(tr + 1));
  if (!bounds || !cover || !touch) {
    free(bounds);
    free(cover);
    free(touch);
    return fm_fail(err, FM_ENOMEM, "cannot allocate tile bounds for %d key tiles", tc);
  }
  int64_t per_set = (int64_t)tr * tc;
  for (int32_t s = 0; s < fm_colmask_nsets(m); s++) {
    fm_tile_bounds_compute(m, s, bc, bounds);
    for (int32_t ct = 0; ct < tc; ct++) {
      memset(cover, 0, sizeof(int32_t) * (size_t)(tr + 1));
      memset(touch, 0, sizeof(int32_t) * (size_t)(tr + 1));
      int32_t j0 = ct * bc, j1 = j0 + bc < sk ? j0 + bc : sk, ncols = j1 - j0;
      for (int32_t j = j0; j < j1; j++) {
        int32_t runs[3][2];
        int n = fm_colmask_column_runs(m, s, j, runs);
        for (int k = 0; k < n; k++) {
          int32_t c0, c1, t0, t1;
          run_tiles(runs[k][0], runs[k][1], sq, br, tr, &c0, &c1, &t0, &t1);
          cover[c0]++;
          cover[c1]--;
          touch[t0]++;
          touch[t1]--;
        }
      }
      int32_t cov = 0, tou = 0;
      const fm_tile_bounds *b = &bounds[ct];
      for (int32_t rt = 0; rt < tr; rt++) {
        cov += cover[rt];
        tou += touch[rt];
        int32_t r0 = rt * br, r1 = r0 + br < sq ? r0 + br : sq;
        int cm = fm_classify_minmax(b, r0, r1);
        int ce = cov == ncols ? FM_TILE_MASKED : tou == 0 ? FM_TILE_UNMASKED : FM_TILE_PARTIAL;
        counts->minmax[cm]++;
        counts->exact[ce]++;
        if (cm == FM_TILE_PARTIAL && ce == FM_TILE_MASKED) counts->partial_but_masked++;
        if (cm == FM_TILE_PARTIAL && ce == FM_TILE_UNMASKED) counts->partial_but_unmasked++;
        int64_t idx = (int64_t)s * per_set + (int64_t)rt * tc + ct;
        if (classes) classes[idx] = (uint8_t)cm;
        if (exact) exact[idx] = (uint8_t)ce;
      }
    }
  }
  free(bounds);
  free(cover);
  free(touch);
  counts->total = per_set * fm_colmask_nsets(m);
  counts->sparsity = (double)counts->minmax[FM_TILE_MASKED] / (double)counts->total;
  counts->sparsity_exact = (double)counts->exact[FM_TILE_MASKED] / (double)counts->total;
  return FM_OK;
}

int64_t fm_class_mismatches(const fm_colmask *m, const uint8_t *set_classes,
                            const uint8_t *pair_classes, int64_t batch, int64_t heads,
                            int64_t per_set) {
  int64_t mism = 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t h = 0; h < heads; h++) {
      const uint8_t *cpu =
          set_classes + (int64_t)fm_colmask_set_index(m, (int32_t)b, (int32_t)h) * per_set;
      const uint8_t *gpu = pair_classes + (b * heads + h) * per_set;
      for (int64_t i = 0; i < per_set; i++) mism += cpu[i] != gpu[i];
    }
  return mism;
}
