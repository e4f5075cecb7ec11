/* fm_dense_report.c — the report builder of the dense-mask module (fm_dense_impl.h):
 * per-column and per-row results -> fm_dense_report, with its advice and the
 * exact tiles; the result and its accessors (fm_dense.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "fm_dense_impl.h"
#include "fm_limits.h"
#include "fm_tile_rule.h"
#include "fm_tiles.h"

fm_status fm_dense_check_dims(int64_t batch, int64_t heads, int64_t sq, int64_t sk, fm_err *err) {
  if (sq < 1 || sk < 1)
    return fm_fail(err, FM_EINVAL, "Sq = %lld, Sk = %lld: a mask needs at least one query row and "
                   "one key column", (long long)sq, (long long)sk);
  if (sq > FM_MAX_SEQLEN || sk > FM_MAX_SEQLEN)
    return fm_fail(err, FM_EINVAL, "Sq = %lld, Sk = %lld: sequence lengths above %d do not fit "
                   "int32 row indices", (long long)sq, (long long)sk, FM_MAX_SEQLEN);
  if (batch < 1 || heads < 1 || batch > 65535 || heads > 65535)
    return fm_fail(err, FM_EINVAL, "B = %lld, H = %lld: batch and heads must be in 1..65535",
                   (long long)batch, (long long)heads);
  return FM_OK;
}

void fm_dense_builder_free(builder *bd) {
  void *owned[] = {bd->sets, bd->nruns, bd->runs, bd->best, bd->tile_acc, bd->tiles};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
  fm_mem_release(bd->reserved);
  memset(bd, 0, sizeof *bd);
}

/* Reserves `bytes` more for the builder's arrays (released by builder_free). */
static fm_status builder_reserve(builder *bd, int64_t bytes, const char *what, fm_err *err) {
  fm_status st = fm_mem_reserve(bytes, what, err);
  if (st == FM_OK) bd->reserved = fm_mem_add(bd->reserved, bytes);
  return st;
}

/* The tile grid of opts (br, bc > 0), its accumulator and kept classes. */
fm_status fm_dense_builder_tiles(builder *bd, const fm_dense_opts *o, fm_err *err) {
  fm_dense_tiles *t = &bd->rep.tiles;
  if (!o || o->br <= 0 || o->bc <= 0) return FM_OK;
  fm_status st = fm_tile_size_check(o->br, o->bc, err);
  if (st != FM_OK) return st;
  t->br = o->br;
  t->bc = o->bc;
  t->tr = (int32_t)((bd->rep.sq + o->br - 1) / o->br);
  t->tc = (int32_t)((bd->rep.sk + o->bc - 1) / o->bc);
  t->total = bd->rep.nsets * t->tr * t->tc;
  char what[160];
  snprintf(what, sizeof what, "the tile counters of %d x %d tiles (Sk = %lld)", t->br, t->bc,
           (long long)bd->rep.sk);
  st = builder_reserve(bd, fm_mem_mul(t->tc, (int64_t)sizeof *bd->tile_acc), what, err);
  if (st != FM_OK) return st;
  bd->tile_acc = calloc((size_t)t->tc, sizeof *bd->tile_acc);
  if (!bd->tile_acc) return fm_fail(err, FM_ENOMEM, "cannot allocate %d tile counters", t->tc);
  if (o->keep_tiles) {
    if (t->total > FM_MAX_ALLOC_BYTES)
      return fm_fail(err, FM_ENOMEM, "%lld tiles of %d x %d are too many to keep (limit %lld); "
                     "use larger tiles", (long long)t->total, t->br, t->bc,
                     (long long)FM_MAX_ALLOC_BYTES);
    snprintf(what, sizeof what, "the classes of %lld tiles of %d x %d", (long long)t->total,
             t->br, t->bc);
    if ((st = builder_reserve(bd, t->total, what, err)) != FM_OK) return st;
    bd->tiles = malloc((size_t)t->total);
    if (!bd->tiles) return fm_fail(err, FM_ENOMEM, "cannot allocate %lld tile classes",
                                   (long long)t->total);
  }
  return FM_OK;
}

fm_status fm_dense_builder_init(builder *bd, int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                              const fm_dense_opts *o, fm_err *err) {
  memset(bd, 0, sizeof *bd);
  fm_status st = fm_dense_check_dims(batch, heads, sq, sk, err);
  if (st != FM_OK) return st;
  fm_dense_report *r = &bd->rep;
  r->dtype = FM_DT_BOOL;
  r->ndim = 4;
  r->batch = batch;
  r->heads = heads;
  r->sq = sq;
  r->sk = sk;
  r->fit = r->row_fit = ALL_FORMS;
  r->rows_known = 1;
  r->shared_across_heads = 1;
  r->nsets = batch * heads;
  r->advice.prefix_rows = sq;
  r->nset_reports = (int)(r->nsets < FM_DENSE_MAX_SET_REPORTS ? r->nsets : FM_DENSE_MAX_SET_REPORTS);
  bd->sets = calloc((size_t)r->nset_reports, sizeof *bd->sets);
  if (!bd->sets) return fm_fail(err, FM_ENOMEM, "cannot allocate the per-set reports");
  if (o && o->keep_intervals) {
    const double cols = (double)r->nsets * (double)sk;
    if (cols * (1 + 2 * KR + 4) * 4 > (double)FM_MAX_ALLOC_BYTES) {
      fm_dense_builder_free(bd);
      return fm_fail(err, FM_ENOMEM, "keeping the runs of %.0f columns needs more than %lld GiB",
                     cols, (long long)(FM_MAX_ALLOC_BYTES >> 30));
    }
    char what[96];
    snprintf(what, sizeof what, "keeping the runs of %.0f columns", cols);
    if ((st = builder_reserve(bd, (int64_t)(cols * (1 + 2 * KR + 4) * 4), what, err)) != FM_OK) {
      fm_dense_builder_free(bd);
      return st;
    }
    bd->nruns = calloc((size_t)cols, sizeof *bd->nruns);
    bd->runs = calloc((size_t)cols * KR * 2, sizeof *bd->runs);
    bd->best = calloc((size_t)cols * 4, sizeof *bd->best);
    if (!bd->nruns || !bd->runs || !bd->best) {
      fm_dense_builder_free(bd);
      return fm_fail(err, FM_ENOMEM, "cannot keep the runs of %.0f columns", cols);
    }
  }
  st = fm_dense_builder_tiles(bd, o, err);
  if (st != FM_OK) fm_dense_builder_free(bd);
  return st;
}

void fm_dense_b_begin_set(builder *bd, int32_t b, int32_t h) {
  memset(&bd->cur, 0, sizeof bd->cur);
  bd->cur.batch = b;
  bd->cur.head = h;
  bd->cur.fit = bd->cur.row_fit = ALL_FORMS;
  bd->cur.same_as_head0 = 1;
  bd->set = (int64_t)b * bd->rep.heads + h;
}

/* Keeps the first few columns each form cannot hold, with their runs. */
static void b_misfit(builder *bd, unsigned fit, int32_t j, int32_t n, const int32_t (*runs)[2]) {
  fm_dense_report *r = &bd->rep;
  for (int f = 0; f < FM_FORM_COUNT; f++) {
    if (fit & (1u << f)) continue;
    bd->cur.misfits[f]++;
    r->misfits[f]++;
    if (r->nfirst[f] < FM_DENSE_FIRST_BAD) {
      fm_dense_column *c = &r->first[f][r->nfirst[f]++];
      memset(c, 0, sizeof *c);
      c->batch = bd->cur.batch;
      c->head = bd->cur.head;
      c->column = j;
      c->nruns = n;
      for (int k = 0; k < n && k < 3; k++) {
        c->runs[k][0] = runs[k][0];
        c->runs[k][1] = runs[k][1];
      }
    }
  }
}

/* Column j of the current set has n masked runs; runs holds the first
 * min(n, 3), best its two longest (row order; [0, 0) when fewer). */
void fm_dense_b_column(builder *bd, int32_t j, int32_t n, const int32_t (*runs)[2],
                     const int32_t (*best)[2]) {
  fm_dense_report *r = &bd->rep;
  int32_t sq = (int32_t)r->sq, sk = (int32_t)r->sk;
  unsigned fit = fm_runs_fit(runs, n > 3 ? 4 : (int)n, fm_causal_limit(j, sq, sk), sq);
  bd->cur.fit &= fit;
  if (n > bd->cur.max_runs) bd->cur.max_runs = n;
  if (fit != ALL_FORMS) b_misfit(bd, fit, j, n, runs);
  fm_dense_advice *a = &r->advice;
  a->runs_hist[n < FM_DENSE_RUNS_HIST - 1 ? n : FM_DENSE_RUNS_HIST - 1]++;
  if (n >= 3 && runs[2][0] < a->prefix_rows) a->prefix_rows = runs[2][0];
  a->subset_masked += (int64_t)(best[0][1] - best[0][0]) + (best[1][1] - best[1][0]);
  if (bd->nruns) {
    int64_t c = bd->set * sk + j;
    bd->nruns[c] = n;
    for (int k = 0; k < KR; k++) {
      bd->runs[(c * KR + k) * 2] = k < n ? runs[k][0] : 0;
      bd->runs[(c * KR + k) * 2 + 1] = k < n ? runs[k][1] : 0;
    }
    for (int k = 0; k < 4; k++) bd->best[c * 4 + k] = best[k / 2][k % 2];
  }
}

/* The two longest of n <= 3 runs, in row order, [0, 0) for missing ones. */
void fm_dense_best_of_runs(const int32_t (*runs)[2], int n, int32_t best[2][2]) {
  int a = -1, b = -1; /* indices of the longest and the second */
  for (int k = 0; k < n && k < 3; k++) {
    int32_t len = runs[k][1] - runs[k][0];
    if (a < 0 || len > runs[a][1] - runs[a][0]) {
      b = a;
      a = k;
    } else if (b < 0 || len > runs[b][1] - runs[b][0]) {
      b = k;
    }
  }
  if (b >= 0 && b < a) {
    int t = a;
    a = b;
    b = t;
  }
  for (int k = 0; k < 2; k++) {
    int src = k == 0 ? a : b;
    best[k][0] = src >= 0 ? runs[src][0] : 0;
    best[k][1] = src >= 0 ? runs[src][1] : 0;
  }
}

/* Row i of the current set has n masked runs along it (the transposed mask's
 * column i: Sq' = Sk rows, its own causal limit). */
void fm_dense_b_row(builder *bd, int32_t i, int32_t n, const int32_t (*runs)[2]) {
  int32_t sq = (int32_t)bd->rep.sq, sk = (int32_t)bd->rep.sk;
  bd->cur.row_fit &= fm_runs_fit(runs, n > 3 ? 4 : (int)n, fm_causal_limit(i, sk, sq), sk);
  if (n > bd->cur.max_row_runs) bd->cur.max_row_runs = n;
}

/* Masked flags (0/1 bytes) in p[0, n). */
static int64_t count01(const uint8_t *p, int64_t n) {
  int64_t c = 0, k = 0;
  for (; k + 8 <= n; k += 8) c += (int64_t)bytesum01(load64(p + k));
  for (; k < n; k++) c += p[k];
  return c;
}

/* Row i of the current set (flags m, (Sk,)) into the exact tile classes. */
void fm_dense_b_tile_row(builder *bd, int32_t i, const uint8_t *m) {
  fm_dense_tiles *t = &bd->rep.tiles;
  if (!bd->tile_acc) return;
  const int64_t sk = bd->rep.sk;
  for (int32_t c = 0; c < t->tc; c++) {
    int64_t j0 = (int64_t)c * t->bc, len = sk - j0 < t->bc ? sk - j0 : t->bc;
    bd->tile_acc[c] += count01(m + j0, len);
  }
  if ((i + 1) % t->br != 0 && i + 1 != bd->rep.sq) return;
  const int64_t rows = i - (int64_t)(i / t->br) * t->br + 1;
  uint8_t *keep = bd->tiles ? bd->tiles + (bd->set * t->tr + i / t->br) * t->tc : NULL;
  for (int32_t c = 0; c < t->tc; c++) {
    int64_t j0 = (int64_t)c * t->bc, len = sk - j0 < t->bc ? sk - j0 : t->bc;
    int64_t acc = bd->tile_acc[c];
    int cls = acc == 0 ? FM_TILE_UNMASKED : acc == rows * len ? FM_TILE_MASKED : FM_TILE_PARTIAL;
    t->count[cls]++;
    if (keep) keep[c] = (uint8_t)cls;
    bd->tile_acc[c] = 0;
  }
}

void fm_dense_b_end_set(builder *bd, int same_as_head0) {
  fm_dense_report *r = &bd->rep;
  fm_dense_set *c = &bd->cur;
  c->same_as_head0 = same_as_head0;
  r->fit &= c->fit;
  r->row_fit &= c->row_fit;
  r->advice.sets_fit += c->fit != 0;
  if (c->max_runs > r->max_runs) r->max_runs = c->max_runs;
  if (c->max_row_runs > r->max_row_runs) r->max_row_runs = c->max_row_runs;
  r->masked += c->masked;
  r->empty_rows += c->empty_rows;
  r->masked_diagonal += c->masked_diagonal;
  if (!same_as_head0) r->shared_across_heads = 0;
  int64_t idx = (int64_t)c->batch * r->heads + c->head;
  if (idx < r->nset_reports) bd->sets[idx] = *c;
}

void fm_dense_b_finish(builder *bd, int64_t element_size) {
  fm_dense_report *r = &bd->rep;
  r->form = fm_form_smallest(r->fit);
  if (r->form != FM_FORM_NONE) {
    r->closest = r->form;
  } else { /* fewest misfits; ties go to the more general form */
    r->closest = FM_FORM_BIDIR4;
    for (int f = FM_FORM_COUNT - 1; f >= 0; f--)
      if (r->misfits[f] < r->misfits[r->closest]) r->closest = (fm_form)f;
  }
  r->bad_columns = r->misfits[r->closest];
  r->transposed_form = r->rows_known ? fm_form_smallest(r->row_fit) : FM_FORM_NONE;
  r->h_mask = r->shared_across_heads ? 1 : r->heads;
  r->dense_bool_bytes = r->nsets * r->sq * r->sk;
  r->dense_bytes = r->dense_bool_bytes * element_size;
  r->interval_bytes =
      r->form == FM_FORM_NONE ? 0 : r->batch * r->h_mask * r->sk * fm_form_k(r->form) * 4;
  if (r->tiles.total > 0)
    r->tiles.sparsity = (double)r->tiles.count[FM_TILE_MASKED] / (double)r->tiles.total;
}

fm_status fm_dense_b_result(builder *bd, fm_dense_result **out, fm_err *err) {
  fm_dense_result *res = calloc(1, sizeof *res);
  if (!res) {
    fm_dense_builder_free(bd);
    return fm_fail(err, FM_ENOMEM, "out of memory");
  }
  /* the arrays change hands: the builder's pointers are cleared before it is freed */
  *res = (fm_dense_result){.rep = bd->rep, .sets = bd->sets, .nruns = bd->nruns, .runs = bd->runs,
                           .best = bd->best, .tiles = bd->tiles};
  /* the kept arrays stay reserved with the result; the tile counters go with the builder */
  const int64_t acc = bd->tile_acc ? fm_mem_mul(bd->rep.tiles.tc, (int64_t)sizeof *bd->tile_acc) : 0;
  res->reserved = bd->reserved - acc;
  bd->reserved = acc;
  res->rep.sets = res->sets;
  bd->sets = NULL;
  bd->nruns = bd->runs = bd->best = NULL;
  bd->tiles = NULL;
  fm_dense_builder_free(bd);
  *out = res;
  return FM_OK;
}

const fm_dense_report *fm_dense_result_report(const fm_dense_result *r) { return &r->rep; }
const int32_t *fm_dense_result_nruns(const fm_dense_result *r) { return r->nruns; }
const int32_t *fm_dense_result_runs(const fm_dense_result *r) { return r->runs; }
const uint8_t *fm_dense_result_tiles(const fm_dense_result *r) { return r->tiles; }
size_t fm_dense_report_size(void) { return sizeof(fm_dense_report); }

void fm_dense_result_destroy(fm_dense_result *r) {
  if (!r) return;
  fm_mem_release(r->reserved);
  void *owned[] = {r->sets, r->nruns, r->runs, r->best, r->tiles, r->all_start, r->all_runs, r};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
}

const int64_t *fm_dense_result_all_runs(const fm_dense_result *r, const int32_t **runs) {
  *runs = r->all_runs;
  return r->all_start;
}

fm_status fm_dense_result_column(const fm_dense_result *r, int64_t batch, int64_t head,
                                 int64_t column, fm_dense_column *out, unsigned *fit, fm_err *err) {
  const fm_dense_report *rep = &r->rep;
  if (!r->nruns)
    return fm_fail(err, FM_EINVAL, "the analysis kept no runs (keep_intervals was off)");
  if (batch < 0 || batch >= rep->batch || head < 0 || head >= rep->heads || column < 0 ||
      column >= rep->sk)
    return fm_fail(err, FM_EINVAL, "batch %lld, head %lld, column %lld is outside B = %lld, "
                   "H = %lld, Sk = %lld", (long long)batch, (long long)head, (long long)column,
                   (long long)rep->batch, (long long)rep->heads, (long long)rep->sk);
  int64_t c = (batch * rep->heads + head) * rep->sk + column;
  memset(out, 0, sizeof *out);
  out->batch = (int32_t)batch;
  out->head = (int32_t)head;
  out->column = (int32_t)column;
  out->nruns = r->nruns[c];
  for (int k = 0; k < KR && k < 3; k++) {
    out->runs[k][0] = r->runs[(c * KR + k) * 2];
    out->runs[k][1] = r->runs[(c * KR + k) * 2 + 1];
  }
  if (fit)
    *fit = fm_runs_fit((const int32_t(*)[2])out->runs, out->nruns > 3 ? 4 : out->nruns,
                       fm_causal_limit((int32_t)column, (int32_t)rep->sq, (int32_t)rep->sk),
                       (int32_t)rep->sq);
  return FM_OK;
}
