/* fm_tiles.c — tile bounds, counts, per-row/per-key-tile work and tile maps
 * (fm_tiles.h), key tile by key tile over spans of row tiles. */
#include "fm_tiles.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *fm_tile_class_name(int cls) {
  static const char *const names[FM_TILE_NCLASSES] = {"masked", "partial", "unmasked"};
  return cls >= 0 && cls < FM_TILE_NCLASSES ? names[cls] : "?";
}

fm_status fm_tile_size_check(int64_t br, int64_t bc, fm_err *err) {
  if (br < 1 || br > 65536 || bc < 1 || bc > 65536)
    return fm_fail(err, FM_EINVAL, "tile sizes must be in 1..65536 (got Br=%lld, Bc=%lld)",
                   (long long)br, (long long)bc);
  return FM_OK;
}

static int32_t ceil_div(int32_t a, int32_t b) { return (int32_t)(((int64_t)a + b - 1) / b); }

void fm_tile_bounds_compute(const fm_colmask *m, int32_t set, int32_t bc, fm_tile_bounds *out) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), causal = fm_colmask_causal(m);
  const int32_t *lts = fm_colmask_cvec(m, set, FM_LTS), *lte = fm_colmask_cvec(m, set, FM_LTE);
  const int32_t *uts = fm_colmask_cvec(m, set, FM_UTS), *ute = fm_colmask_cvec(m, set, FM_UTE);
  int32_t tc = ceil_div(sk, bc);
  for (int32_t t = 0; t < tc; t++) {
    int32_t j0 = t * bc, j1 = sk - j0 > bc ? j0 + bc : sk;
    out[t] = fm_tile_bounds_of_columns(lts, lte, uts, ute, j0, j1, 1, causal, sq, sk);
  }
}

/* ------------------------------------------------------------ span lists */
/* A span list: sorted, disjoint spans of row tiles (possibly adjacent). */

static int64_t spans_len(const fm_tile_span *s, int n) {
  int64_t len = 0;
  for (int i = 0; i < n; i++) len += s[i].end - s[i].begin;
  return len;
}

/* out = a intersected with b; out has room for na + nb spans. */
static int spans_intersect(const fm_tile_span *a, int na, const fm_tile_span *b, int nb,
                           fm_tile_span *out) {
  int n = 0, i = 0, k = 0;
  while (i < na && k < nb) {
    int32_t lo = a[i].begin > b[k].begin ? a[i].begin : b[k].begin;
    int32_t hi = a[i].end < b[k].end ? a[i].end : b[k].end;
    if (lo < hi) out[n++] = (fm_tile_span){lo, hi};
    if (a[i].end < b[k].end) i++;
    else k++;
  }
  return n;
}

/* out = [0, tr) minus s (n spans): at most n + 1 spans. */
static int spans_complement(const fm_tile_span *s, int n, int32_t tr, fm_tile_span *out) {
  int r = 0;
  int32_t at = 0;
  for (int i = 0; i < n; i++) {
    if (s[i].begin > at) out[r++] = (fm_tile_span){at, s[i].begin};
    if (s[i].end > at) at = s[i].end;
  }
  if (at < tr) out[r++] = (fm_tile_span){at, tr};
  return r;
}

/* ------------------------------------------------------------ one key tile */

typedef struct tile_pass {
  int32_t sq, sk, br, bc, tr, tc, causal;
  const int32_t *v[4];          /* the current set's LTS, LTE, UTS, UTE, (Sk,) each */
  fm_tile_span *buf[4];         /* exact scratch: two double-buffered lists */
  int32_t *dmask, *dtouch;      /* (Tr + 1) difference arrays, NULL when rows are not wanted */
} tile_pass;

/* The classes of the row tiles of one key tile, as spans. */
typedef struct key_tile {
  fm_tile_span masked[2], touched[2]; /* min/max rule: MASKED, MASKED or PARTIAL (disjoint) */
  int nmasked, ntouched;
  const fm_tile_span *xmasked, *xclear; /* min/max PARTIAL rows exactly MASKED / UNMASKED */
  int nxmasked, nxclear;
} key_tile;

/* Row tiles that a masked row run [a, b) covers entirely and that it meets. */
static void run_spans(const tile_pass *p, int32_t a, int32_t b, fm_tile_span *cover,
                      fm_tile_span *meet) {
  cover->begin = ceil_div(a, p->br);
  cover->end = b >= p->sq ? p->tr : b / p->br;
  if (cover->end < cover->begin) cover->end = cover->begin;
  meet->begin = a / p->br;
  meet->end = ceil_div(b, p->br);
}

/* Narrows the exact lists by column j: xm keeps the rows j covers, xc the
 * rows j does not touch. Lists live in p->buf; *sm / *sc select the buffer. */
static void exact_column(const tile_pass *p, int32_t j, key_tile *k, int *sm, int *sc) {
  int32_t r[2][2], n = 0, us, ue;
  int32_t lts = p->v[FM_LTS][j], lte = p->v[FM_LTE][j];
  fm_effective_upper(p->v[FM_UTS][j], p->v[FM_UTE][j], p->causal, j, p->sq, p->sk, &us, &ue);
  if (lts < lte) {
    r[n][0] = lts;
    r[n++][1] = lte;
  }
  if (us < ue) {
    r[n][0] = us;
    r[n++][1] = ue;
  }
  if (n == 2 && r[1][0] < r[0][0]) { /* sort the two runs by start */
    int32_t a = r[0][0], b = r[0][1];
    r[0][0] = r[1][0];
    r[0][1] = r[1][1];
    r[1][0] = a;
    r[1][1] = b;
  }
  if (n == 2 && r[1][0] <= r[0][1]) { /* overlapping or adjacent: one run */
    if (r[1][1] > r[0][1]) r[0][1] = r[1][1];
    n = 1;
  }
  fm_tile_span cover[2] = {{0, 0}, {0, 0}}, meet[2] = {{0, 0}, {0, 0}}, c[2], t[2], free_[3];
  for (int q = 0; q < n; q++) run_spans(p, r[q][0], r[q][1], &cover[q], &meet[q]);
  if (k->nxmasked) {
    int nc = fm_span_union(cover[0], cover[1], c);
    fm_tile_span *out = p->buf[*sm ^ 1];
    k->nxmasked = spans_intersect(k->xmasked, k->nxmasked, c, nc, out);
    k->xmasked = out;
    *sm ^= 1;
  }
  if (k->nxclear) {
    int nt = fm_span_union(meet[0], meet[1], t);
    int nf = spans_complement(t, nt, p->tr, free_);
    fm_tile_span *out = p->buf[2 + (*sc ^ 1)];
    k->nxclear = spans_intersect(k->xclear, k->nxclear, free_, nf, out);
    k->xclear = out;
    *sc ^= 1;
  }
}

/* Classifies the row tiles of key tile ct: min/max spans in O(1) from the
 * bounds, then, with exact, the exact class of the min/max PARTIAL rows. */
static void key_tile_classes(tile_pass *p, int32_t ct, int exact, key_tile *k) {
  int32_t j0 = ct * p->bc, j1 = p->sk - j0 > p->bc ? j0 + p->bc : p->sk;
  fm_tile_bounds b = fm_tile_bounds_of_columns(p->v[FM_LTS], p->v[FM_LTE], p->v[FM_UTS],
                                               p->v[FM_UTE], j0, j1, 1, p->causal, p->sq, p->sk);
  fm_tile_span ms[2], ts[2];
  fm_minmax_row_spans(&b, p->br, p->sq, ms, ts);
  k->nmasked = fm_span_union(ms[0], ms[1], k->masked);
  k->ntouched = fm_span_union(ts[0], ts[1], k->touched);
  k->nxmasked = k->nxclear = 0;
  k->xmasked = k->xclear = NULL;
  if (!exact || spans_len(k->touched, k->ntouched) == spans_len(k->masked, k->nmasked)) return;
  /* the min/max PARTIAL rows: touched minus masked (at most 4 spans) */
  fm_tile_span notm[3];
  int nn = spans_complement(k->masked, k->nmasked, p->tr, notm);
  k->nxmasked = spans_intersect(k->touched, k->ntouched, notm, nn, p->buf[0]);
  memcpy(p->buf[2], p->buf[0], sizeof(fm_tile_span) * (size_t)k->nxmasked);
  k->nxclear = k->nxmasked;
  k->xmasked = p->buf[0];
  k->xclear = p->buf[2];
  int sm = 0, sc = 0;
  for (int32_t j = j0; j < j1 && (k->nxmasked || k->nxclear); j++) exact_column(p, j, k, &sm, &sc);
}

/* Adds key tile k to the counts, the work arrays and the maps. */
static void key_tile_record(const tile_pass *p, const key_tile *k, int32_t ct, int exact,
                            fm_tile_counts *c, fm_work *col, uint8_t *cls, uint8_t *ex) {
  int64_t lm = spans_len(k->masked, k->nmasked), lt = spans_len(k->touched, k->ntouched);
  int64_t xm = spans_len(k->xmasked, k->nxmasked), xc = spans_len(k->xclear, k->nxclear);
  c->minmax[FM_TILE_MASKED] += lm;
  c->minmax[FM_TILE_PARTIAL] += lt - lm;
  c->minmax[FM_TILE_UNMASKED] += p->tr - lt;
  if (exact) {
    c->exact[FM_TILE_MASKED] += lm + xm;
    c->exact[FM_TILE_PARTIAL] += lt - lm - xm - xc;
    c->exact[FM_TILE_UNMASKED] += p->tr - lt + xc;
    c->partial_but_masked += xm;
    c->partial_but_unmasked += xc;
  }
  if (col) *col = (fm_work){(int32_t)(p->tr - lm), (int32_t)(lt - lm)};
  if (p->dmask) {
    for (int q = 0; q < k->nmasked; q++) {
      p->dmask[k->masked[q].begin]++;
      p->dmask[k->masked[q].end]--;
    }
    for (int q = 0; q < k->ntouched; q++) {
      p->dtouch[k->touched[q].begin]++;
      p->dtouch[k->touched[q].end]--;
    }
  }
  if (!cls && !ex) return;
  /* maps: (Tr, Tc) of this set, column ct */
  for (int pass = 0; pass < 2; pass++) {
    uint8_t *map = pass ? ex : cls;
    if (!map) continue;
    for (int32_t rt = 0; rt < p->tr; rt++) map[(int64_t)rt * p->tc + ct] = FM_TILE_UNMASKED;
    const fm_tile_span *lists[4] = {k->touched, k->masked, k->xmasked, k->xclear};
    const int counts[4] = {k->ntouched, k->nmasked, pass ? k->nxmasked : 0, pass ? k->nxclear : 0};
    const uint8_t paint[4] = {FM_TILE_PARTIAL, FM_TILE_MASKED, FM_TILE_MASKED, FM_TILE_UNMASKED};
    for (int l = 0; l < 4; l++)
      for (int q = 0; q < counts[l]; q++)
        for (int32_t rt = lists[l][q].begin; rt < lists[l][q].end; rt++)
          map[(int64_t)rt * p->tc + ct] = paint[l];
  }
}

/* Row-tile work of one set from the difference arrays. */
static void rows_finish(const tile_pass *p, fm_work *rows) {
  int32_t masked = 0, touched = 0;
  for (int32_t rt = 0; rt < p->tr; rt++) {
    masked += p->dmask[rt];
    touched += p->dtouch[rt];
    rows[rt] = (fm_work){p->tc - masked, touched - masked};
  }
}

/* Hands key tile k of set s to a walker (fm_tile_walk). */
static void key_tile_visit(const tile_pass *p, const key_tile *k, int32_t s, int32_t ct,
                           fm_key_tile_fn fn, void *ctx) {
  fm_key_tile_spans v = {.set = s, .ct = ct, .tr = p->tr, .masked = k->masked,
                         .touched = k->touched, .xmasked = k->xmasked, .xclear = k->xclear,
                         .nmasked = k->nmasked, .ntouched = k->ntouched,
                         .nxmasked = k->nxmasked, .nxclear = k->nxclear};
  fn(&v, ctx);
}

static fm_status tile_pass_run(const fm_colmask *m, int32_t br, int32_t bc, int exact,
                               fm_tile_counts *counts, fm_work *rows, fm_work *cols,
                               uint8_t *classes, uint8_t *exmap, fm_key_tile_fn fn, void *ctx,
                               fm_err *err) {
  fm_status st = fm_tile_size_check(br, bc, err);
  if (st != FM_OK) return st;
  tile_pass p = {.sq = fm_colmask_sq(m), .sk = fm_colmask_sk(m), .br = br, .bc = bc,
                 .causal = fm_colmask_causal(m)};
  p.tr = ceil_div(p.sq, br);
  p.tc = ceil_div(p.sk, bc);
  size_t cap = 2 * (size_t)(bc < p.sk ? bc : p.sk) + 8; /* spans one exact list can reach */
  fm_tile_span *spans = exact ? malloc(4 * cap * sizeof *spans) : NULL;
  int32_t *diff = rows ? calloc(2 * ((size_t)p.tr + 1), sizeof *diff) : NULL;
  if ((exact && !spans) || (rows && !diff)) {
    free(spans);
    free(diff);
    return fm_fail(err, FM_ENOMEM, "cannot allocate tile-count scratch for %d row tiles", p.tr);
  }
  for (int q = 0; q < 4 && spans; q++) p.buf[q] = spans + q * cap;
  fm_tile_counts c;
  memset(&c, 0, sizeof c);
  int64_t per_set = (int64_t)p.tr * p.tc;
  for (int32_t s = 0; s < fm_colmask_nsets(m); s++) {
    for (int q = 0; q < 4; q++) p.v[q] = fm_colmask_cvec(m, s, (fm_vec)q);
    if (diff) {
      memset(diff, 0, 2 * ((size_t)p.tr + 1) * sizeof *diff);
      p.dmask = diff;
      p.dtouch = diff + p.tr + 1;
    }
    for (int32_t ct = 0; ct < p.tc; ct++) {
      key_tile k;
      key_tile_classes(&p, ct, exact, &k);
      if (fn) key_tile_visit(&p, &k, s, ct, fn, ctx);
      key_tile_record(&p, &k, ct, exact, &c, cols ? &cols[(int64_t)s * p.tc + ct] : NULL,
                      classes ? classes + s * per_set : NULL, exmap ? exmap + s * per_set : NULL);
    }
    if (rows) rows_finish(&p, rows + (int64_t)s * p.tr);
  }
  free(spans);
  free(diff);
  c.total = per_set * fm_colmask_nsets(m);
  c.sparsity = (double)c.minmax[FM_TILE_MASKED] / (double)c.total;
  c.sparsity_exact = exact ? (double)c.exact[FM_TILE_MASKED] / (double)c.total : NAN;
  if (counts) *counts = c;
  return FM_OK;
}

fm_status fm_tile_count(const fm_colmask *m, int32_t br, int32_t bc, int exact,
                        fm_tile_counts *counts, fm_work *rows, fm_work *cols, fm_err *err) {
  return tile_pass_run(m, br, bc, exact, counts, rows, cols, NULL, NULL, NULL, NULL, err);
}

fm_status fm_classify(const fm_colmask *m, int32_t br, int32_t bc, fm_tile_counts *counts,
                      uint8_t *classes, uint8_t *exact, fm_err *err) {
  return tile_pass_run(m, br, bc, 1, counts, NULL, NULL, classes, exact, NULL, NULL, err);
}

fm_status fm_tile_walk(const fm_colmask *m, int32_t br, int32_t bc, int exact, fm_key_tile_fn fn,
                       void *ctx, fm_err *err) {
  return tile_pass_run(m, br, bc, exact, NULL, NULL, NULL, NULL, NULL, fn, ctx, err);
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
