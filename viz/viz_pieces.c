/* viz_pieces.c — tile classes as run-length pieces per key tile.
 *
 * fm_classify visits every tile (O(Tr * Tc)), which at S = 1M and 16 x 16
 * tiles is 4 G tiles. Along the row tiles of one key tile, both classes are
 * piecewise constant with few breakpoints: the min/max class flips only where
 * a row tile crosses one of the 8 bounds, and the exact class only where it
 * crosses an end of a masked run of one of the tile's columns. So each key
 * tile is swept over its distinct breakpoints only: O(Bc + breakpoints) per
 * key tile, O(Sk) in all. The result equals fm_classify tile for tile
 * (tests/test_viz_render.c checks every family).
 */
#include <stdlib.h>
#include <string.h>

#include "fm_cost.h"
#include "viz_internal.h"

void viz_pieces_free(viz_pieces *p) {
  free(p->items);
  free(p->start);
  memset(p, 0, sizeof *p);
}

void viz_piece_scratch_free(viz_piece_scratch *sc) {
  free(sc->acc_cov); /* the one block of all four */
  memset(sc, 0, sizeof *sc);
}

static fm_status pieces_reset(viz_pieces *p, int32_t tr, int32_t tc, fm_err *err) {
  p->tr = tr;
  p->tc = tc;
  p->count = 0;
  free(p->start);
  p->start = malloc(sizeof(int64_t) * ((size_t)tc + 1));
  if (!p->cap) {
    p->cap = (int64_t)tc * 4 + 16;
    free(p->items);
    p->items = malloc(sizeof(viz_piece) * (size_t)p->cap);
  }
  if (!p->start || !p->items) return fm_fail(err, FM_ENOMEM, "cannot allocate tile pieces for %d key tiles", tc);
  p->start[0] = 0;
  return FM_OK;
}

/* Appends a piece, merging it into the previous one of the same key tile when
 * the classes match. */
static fm_status piece_push(viz_pieces *p, int64_t tile_start, int32_t rt0, int32_t rt1, int cm,
                            int ce, fm_err *err) {
  if (p->count > tile_start) {
    viz_piece *last = &p->items[p->count - 1];
    if (last->minmax == cm && last->exact == ce && last->rt1 == rt0) {
      last->rt1 = rt1;
      return FM_OK;
    }
  }
  if (p->count == p->cap) {
    int64_t cap = p->cap * 2;
    viz_piece *n = realloc(p->items, sizeof(viz_piece) * (size_t)cap);
    if (!n) return fm_fail(err, FM_ENOMEM, "cannot grow tile pieces to %lld", (long long)cap);
    p->items = n;
    p->cap = cap;
  }
  p->items[p->count++] = (viz_piece){rt0, rt1, (uint8_t)cm, (uint8_t)ce};
  return FM_OK;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static void sort_i32(int32_t *v, int32_t n) {
  if (n > 24) {
    qsort(v, (size_t)n, sizeof *v, cmp_i32);
    return;
  }
  for (int32_t a = 1; a < n; a++) {
    int32_t x = v[a], b = a;
    for (; b > 0 && v[b - 1] > x; b--) v[b] = v[b - 1];
    v[b] = x;
  }
}

/* Room for Tr row tiles: the two accumulators, the stamps (cleared) and the
 * keys, which are the breakpoints of one key tile: distinct row tiles in [0, Tr]. */
static fm_status scratch_fit(viz_piece_scratch *sc, int32_t tr, fm_err *err) {
  size_t n = (size_t)tr + 1;
  if (sc->tr_cap >= tr + 1) {
    memset(sc->stamp, 0, sizeof(int32_t) * n);
    return FM_OK;
  }
  viz_piece_scratch_free(sc);
  int32_t *block = calloc(4 * n, sizeof(int32_t));
  if (!block) return fm_fail(err, FM_ENOMEM, "cannot allocate classification scratch for %d row tiles", tr);
  *sc = (viz_piece_scratch){.tr_cap = tr + 1, .acc_cov = block, .acc_touch = block + n,
                            .stamp = block + 2 * n, .keys = block + 3 * n};
  return FM_OK;
}

/* Where the columns' runs come from: an interval mask (runs NULL: its set
 * `set`, min/max classes from its bounds) or the runs of a mask that fits no
 * interval form (m NULL: no bounds, the min/max class is the exact one). */
typedef struct piece_src {
  const fm_colmask *m;
  int32_t set;
  const viz_colruns *runs;
} piece_src;

/* The runs of column j: a pointer into the source, or buf filled. */
static int src_runs(const piece_src *src, int32_t j, int32_t buf[3][2], const int32_t (**runs)[2]) {
  if (src->runs) {
    int64_t a = src->runs->start[j];
    *runs = src->runs->items + a;
    return (int)(src->runs->start[j + 1] - a);
  }
  *runs = (const int32_t(*)[2])buf;
  return fm_colmask_column_runs(src->m, src->set, j, buf);
}

static fm_status pieces_sweep(const piece_src *src, int32_t br, int32_t bc, viz_pieces *out,
                              fm_tile_bounds *bounds, fm_tile_counts *counts,
                              viz_piece_scratch *scratch, fm_err *err) {
  fm_status st = fm_tile_size_check(br, bc, err);
  if (st != FM_OK) return st;
  const fm_colmask *m = src->m;
  int32_t sq = m ? fm_colmask_sq(m) : src->runs->sq, sk = m ? fm_colmask_sk(m) : src->runs->sk;
  int32_t tr = (int32_t)(((int64_t)sq + br - 1) / br), tc = (int32_t)(((int64_t)sk + bc - 1) / bc);
  fm_tile_bounds *own = NULL;
  if (!bounds && m) {
    own = malloc(sizeof *own * (size_t)tc);
    if (!own) return fm_fail(err, FM_ENOMEM, "cannot allocate bounds for %d key tiles", tc);
    bounds = own;
  }
  st = pieces_reset(out, tr, tc, err);
  if (st == FM_OK) st = scratch_fit(scratch, tr, err);
  if (st != FM_OK) {
    free(own);
    return st;
  }
  if (m) fm_tile_bounds_compute(m, src->set, bc, bounds);
  int32_t *cov = scratch->acc_cov, *tou = scratch->acc_touch, *stamp = scratch->stamp;
  int32_t *keys = scratch->keys;
#define TOUCH_KEY(rt_)                                                                            \
  do {                                                                                            \
    int32_t r_ = (rt_);                                                                           \
    if (r_ >= 0 && r_ <= tr && stamp[r_] != ct + 1) {                                             \
      stamp[r_] = ct + 1;                                                                         \
      cov[r_] = tou[r_] = 0;                                                                      \
      keys[nkeys++] = r_;                                                                         \
    }                                                                                             \
  } while (0)
  for (int32_t ct = 0; ct < tc && st == FM_OK; ct++) {
    int32_t nkeys = 0;
    int32_t j0 = ct * bc, j1 = j0 + bc < sk ? j0 + bc : sk, ncols = j1 - j0;
    TOUCH_KEY(0);
    TOUCH_KEY(tr - 1);
    for (int32_t j = j0; j < j1; j++) {
      int32_t buf[3][2];
      const int32_t(*runs)[2];
      int n = src_runs(src, j, buf, &runs);
      for (int k = 0; k < n; k++) {
        int32_t a = runs[k][0], b = runs[k][1];
        /* row tiles [c0, c1) lie inside the run, [t0, t1) meet it (as fm_classify) */
        int32_t c0 = (int32_t)(((int64_t)a + br - 1) / br);
        int32_t c1 = b == sq ? tr : b / br;
        int32_t t0 = a / br, t1 = (int32_t)(((int64_t)b + br - 1) / br);
        if (c1 > c0) {
          TOUCH_KEY(c0);
          cov[c0]++;
          TOUCH_KEY(c1);
          cov[c1]--;
        }
        TOUCH_KEY(t0);
        tou[t0]++;
        TOUCH_KEY(t1);
        tou[t1]--;
      }
    }
    /* where the min/max class may flip: r0 >= v at ceil(v/Br), r1 <= v and
     * r1 > v at floor(v/Br), r0 < v at ceil(v/Br); the last tile is shorter */
    const fm_tile_bounds *b = m ? &bounds[ct] : NULL;
    if (b) {
      const int32_t bv[8] = {b->lts_min, b->lts_max, b->lte_min, b->lte_max,
                             b->uts_min, b->uts_max, b->ute_min, b->ute_max};
      for (int k = 0; k < 8; k++) {
        int64_t v = bv[k] < 0 ? 0 : (bv[k] > sq ? sq : bv[k]);
        TOUCH_KEY((int32_t)(v / br));
        TOUCH_KEY((int32_t)((v + br - 1) / br));
      }
    }
    sort_i32(keys, nkeys);
    int32_t c = 0, t = 0;
    int64_t tile_start = out->count;
    for (int32_t q = 0; q < nkeys && st == FM_OK; q++) {
      int32_t rt = keys[q];
      if (rt >= tr) break;
      c += cov[rt];
      t += tou[rt];
      int32_t next = q + 1 < nkeys ? keys[q + 1] : tr;
      if (next > tr) next = tr;
      int32_t r0 = rt * br, r1 = r0 + br < sq ? r0 + br : sq;
      int ce = c == ncols ? FM_TILE_MASKED : t == 0 ? FM_TILE_UNMASKED : FM_TILE_PARTIAL;
      int cm = b ? fm_classify_minmax(b, r0, r1) : ce;
      st = piece_push(out, tile_start, rt, next, cm, ce, err);
      if (counts && st == FM_OK) {
        int64_t len = next - rt;
        counts->minmax[cm] += len;
        counts->exact[ce] += len;
        if (cm == FM_TILE_PARTIAL && ce == FM_TILE_MASKED) counts->partial_but_masked += len;
        if (cm == FM_TILE_PARTIAL && ce == FM_TILE_UNMASKED) counts->partial_but_unmasked += len;
        counts->total += len;
      }
    }
    out->start[ct + 1] = out->count;
  }
#undef TOUCH_KEY
  free(own);
  return st;
}

fm_status viz_pieces_build(const fm_colmask *m, int32_t set, int32_t br, int32_t bc,
                           viz_pieces *out, fm_tile_bounds *bounds, fm_tile_counts *counts,
                           viz_piece_scratch *scratch, fm_err *err) {
  piece_src src = {.m = m, .set = set};
  return pieces_sweep(&src, br, bc, out, bounds, counts, scratch, err);
}

fm_status viz_pieces_build_runs(const viz_colruns *runs, int32_t br, int32_t bc, viz_pieces *out,
                                fm_tile_counts *counts, viz_piece_scratch *scratch, fm_err *err) {
  piece_src src = {.runs = runs};
  return pieces_sweep(&src, br, bc, out, NULL, counts, scratch, err);
}

fm_status viz_pieces_from_arrays(const uint8_t *classes, const uint8_t *exact, int32_t tr,
                                 int32_t tc, viz_pieces *out, fm_err *err) {
  fm_status st = pieces_reset(out, tr, tc, err);
  for (int32_t ct = 0; ct < tc && st == FM_OK; ct++) {
    int64_t tile_start = out->count;
    for (int32_t rt = 0; rt < tr && st == FM_OK; rt++) {
      int64_t i = (int64_t)rt * tc + ct;
      st = piece_push(out, tile_start, rt, rt + 1, classes[i], exact[i], err);
    }
    out->start[ct + 1] = out->count;
  }
  return st;
}

void viz_counts_finish(fm_tile_counts *c) {
  c->sparsity = c->total ? (double)c->minmax[FM_TILE_MASKED] / (double)c->total : 0;
  c->sparsity_exact = c->total ? (double)c->exact[FM_TILE_MASKED] / (double)c->total : 0;
}

int64_t viz_tile_model_bytes(int minmax_class, int32_t rows, int32_t cols, int32_t head_dim,
                             fm_pass pass) {
  fm_cost_shape shape = {.batch = 1, .heads = 1, .head_dim = head_dim, .br = rows, .bc = cols,
                        .elem_bytes = 2, .variant = FM_VARIANT_SKIP, .pass = pass};
  return fm_cost_tile_bytes(&shape, minmax_class, rows, cols);
}
