/* fm_dense.c — streaming dense-mask analysis, conversion and expansion.
 *
 * The scan works on rows of 0/1 "masked" flags (Sk,) uint8. A dtype-specific
 * pass turns each stored row into flags; two passes then follow:
 *   columns: consecutive rows are compared 64 columns at a time; a block with
 *            no change costs two word loads per 8 columns, so a structured mask
 *            (a few changes per column over the whole scan) is read at memory
 *            speed. A changed block updates the per-column transition count
 *            (and, with several heads, a hash of the transition rows) with
 *            branch-free loops the compiler vectorises, so a random mask does
 *            not pay a branch misprediction per change.
 *   rows:    the flags are compared with themselves shifted by one column
 *            (unaligned word loads) to count the runs along the row and keep
 *            its first three.
 * Transition counts alternate start, end, start, ... because every column
 * starts unmasked above row 0: runs = (transitions + 1) / 2, and the first six
 * transition rows give the first three runs.
 */
#define _POSIX_C_SOURCE 200809L
#include "fm_dense.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fm_input.h"
#include "fm_intervals_io.h"
#include "fm_limits.h"
#include "fm_tile_rule.h"
#include "fm_tiles.h"

#define BLOCK 64                   /* columns per change test in the column pass */
#define NTRANS 6                   /* transition rows kept per column: three runs */
#define READ_CHUNK ((int64_t)4 << 20) /* bytes per read() of whole rows */
#define ALL_FORMS ((1u << FM_FORM_COUNT) - 1)

static inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* Sum of the bytes of w when each byte is 0 or 1 (byte order does not matter). */
static inline uint64_t bytesum01(uint64_t w) { return (w * 0x0101010101010101ull) >> 56; }

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Per-row key mixed into a column's hash at each transition (the same for every
 * set, so equal masks hash equally). */
static inline uint64_t row_key(int32_t i) {
  uint64_t x = (uint64_t)i;
  x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 32);
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* ------------------------------------------------------------------------- */
/* The report builder: per-column and per-row results -> report.            */

#define KR FM_DENSE_KEEP_RUNS

typedef struct builder {
  fm_dense_report rep;
  fm_dense_set *sets;  /* (min(nsets, FM_DENSE_MAX_SET_REPORTS),) */
  fm_dense_set cur;    /* the set being scanned */
  int64_t set;         /* index of the current set */
  int32_t *nruns;      /* keep_intervals: (nsets, Sk) runs per column; else NULL */
  int32_t *runs;       /* keep_intervals: (nsets, Sk, KR, 2) first runs */
  int32_t *best;       /* keep_intervals: (nsets, Sk, 2, 2) two longest runs, row order */
  int64_t *tile_acc;   /* br > 0: (Tc,) masked elements of the current row tile */
  uint8_t *tiles;      /* keep_tiles: (nsets, Tr, Tc) exact classes */
  int64_t reserved;    /* bytes of the arrays above held in the memory budget (fm_limits.h) */
} builder;

struct fm_dense_result {
  fm_dense_report rep;
  fm_dense_set *sets;
  int32_t *nruns, *runs, *best;
  uint8_t *tiles;
  int64_t *all_start; /* keep_all_runs: (nsets*Sk + 1,) */
  int32_t *all_runs;  /* keep_all_runs: (all_start[nsets*Sk], 2) */
  int64_t reserved;   /* bytes of the arrays above held in the memory budget */
};

static fm_status check_dims(int64_t batch, int64_t heads, int64_t sq, int64_t sk, fm_err *err) {
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

static void builder_free(builder *bd) {
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
static fm_status builder_tiles(builder *bd, const fm_dense_opts *o, fm_err *err) {
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

static fm_status builder_init(builder *bd, int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                              const fm_dense_opts *o, fm_err *err) {
  memset(bd, 0, sizeof *bd);
  fm_status st = check_dims(batch, heads, sq, sk, err);
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
      builder_free(bd);
      return fm_fail(err, FM_ENOMEM, "keeping the runs of %.0f columns needs more than %lld GiB",
                     cols, (long long)(FM_MAX_ALLOC_BYTES >> 30));
    }
    char what[96];
    snprintf(what, sizeof what, "keeping the runs of %.0f columns", cols);
    if ((st = builder_reserve(bd, (int64_t)(cols * (1 + 2 * KR + 4) * 4), what, err)) != FM_OK) {
      builder_free(bd);
      return st;
    }
    bd->nruns = calloc((size_t)cols, sizeof *bd->nruns);
    bd->runs = calloc((size_t)cols * KR * 2, sizeof *bd->runs);
    bd->best = calloc((size_t)cols * 4, sizeof *bd->best);
    if (!bd->nruns || !bd->runs || !bd->best) {
      builder_free(bd);
      return fm_fail(err, FM_ENOMEM, "cannot keep the runs of %.0f columns", cols);
    }
  }
  st = builder_tiles(bd, o, err);
  if (st != FM_OK) builder_free(bd);
  return st;
}

static void b_begin_set(builder *bd, int32_t b, int32_t h) {
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
static void b_column(builder *bd, int32_t j, int32_t n, const int32_t (*runs)[2],
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
static void best_of_runs(const int32_t (*runs)[2], int n, int32_t best[2][2]) {
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
static void b_row(builder *bd, int32_t i, int32_t n, const int32_t (*runs)[2]) {
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
static void b_tile_row(builder *bd, int32_t i, const uint8_t *m) {
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

static void b_end_set(builder *bd, int same_as_head0) {
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

static void b_finish(builder *bd, int64_t element_size) {
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

static fm_status b_result(builder *bd, fm_dense_result **out, fm_err *err) {
  fm_dense_result *res = calloc(1, sizeof *res);
  if (!res) {
    builder_free(bd);
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
  builder_free(bd);
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

/* ------------------------------------------------------------------------- */
/* The row pass (shared by the scanner and interval files).                  */

/* Runs of masked columns along one row m (Sk,) 0/1 flags, m[-1] readable and 0.
 * Feeds the builder (runs, empty row, diagonal, tiles) and returns the masked count. */
static int64_t row_runs(builder *bd, const uint8_t *m, int64_t sk, int32_t i) {
  int64_t starts = 0, masked = 0, j = 0;
  int32_t tr[NTRANS];
  int ntr = 0;
  for (; j + 8 <= sk; j += 8) {
    uint64_t w = load64(m + j), wp = load64(m + j - 1); /* byte k of wp is m[j+k-1] */
    masked += (int64_t)bytesum01(w);
    if (w == wp) continue;
    starts += (int64_t)bytesum01(w & ~wp);
    for (int k = 0; k < 8 && ntr < NTRANS; k++)
      if (m[j + k] != m[j + k - 1]) tr[ntr++] = (int32_t)(j + k);
  }
  for (; j < sk; j++) {
    masked += m[j];
    if (m[j] != m[j - 1]) {
      starts += m[j];
      if (ntr < NTRANS) tr[ntr++] = (int32_t)j;
    }
  }
  int32_t runs[3][2] = {{0, 0}, {0, 0}, {0, 0}};
  for (int k = 0; k < 3 && k < starts; k++) {
    runs[k][0] = tr[2 * k];
    runs[k][1] = 2 * k + 1 < ntr ? tr[2 * k + 1] : (int32_t)sk;
  }
  b_row(bd, i, starts > INT32_MAX ? INT32_MAX : (int32_t)starts, (const int32_t(*)[2])runs);
  b_tile_row(bd, i, m);
  bd->cur.empty_rows += masked == sk;
  int64_t d = i + sk - bd->rep.sq; /* the diagonal key, bottom-right aligned */
  if (d >= 0 && d < sk) bd->cur.masked_diagonal += m[d];
  return masked;
}

/* ------------------------------------------------------------------------- */
/* Every run of every column (keep_all_runs).                                 */

/* Runs are recorded as they end (row order, columns mixed) and sorted into
 * their columns when a set ends: pend holds (column, start, end) of the
 * current set, items the sorted runs of the sets before. */
typedef struct run_store {
  int on;
  int64_t sk;
  int32_t *pend; /* (npend, 3) */
  int64_t npend, pend_cap;
  int64_t *start; /* (nsets*Sk + 1,) */
  int32_t *items; /* (count, 2) */
  int64_t count, cap;
  int64_t *cursor; /* (Sk,) */
  fm_status st;    /* FM_ENOMEM once the runs outgrew the machine: the scan fails */
  fm_err err;
  int64_t reserved; /* bytes of the arrays above held in the memory budget */
} run_store;

static void run_store_free(run_store *rs) {
  void *owned[] = {rs->pend, rs->start, rs->items, rs->cursor};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
  fm_mem_release(rs->reserved);
  memset(rs, 0, sizeof *rs);
}

static fm_status run_store_init(run_store *rs, int64_t nsets, int64_t sk, fm_err *err) {
  memset(rs, 0, sizeof *rs);
  rs->on = 1;
  rs->sk = sk;
  char what[96];
  snprintf(what, sizeof what, "the run index of %lld columns", (long long)(nsets * sk));
  const int64_t bytes = fm_mem_mul(fm_mem_add(nsets * sk, sk + 1), 8);
  fm_status st = fm_mem_reserve(bytes, what, err);
  if (st != FM_OK) return st;
  rs->reserved = bytes;
  rs->start = calloc((size_t)(nsets * sk + 1), sizeof *rs->start);
  rs->cursor = malloc((size_t)sk * sizeof *rs->cursor);
  if (!rs->start || !rs->cursor) {
    run_store_free(rs);
    return fm_fail(err, FM_ENOMEM, "cannot allocate the run index of %lld columns",
                   (long long)(nsets * sk));
  }
  return FM_OK;
}

/* Grows *buf of *cap elements of `size` bytes to hold `need`; on refusal the
 * store fails (the scan goes on without recording and finish reports it). */
static int run_grow(run_store *rs, void **buf, int64_t *cap, int64_t need, int64_t size) {
  if (need <= *cap) return 1;
  if (rs->st != FM_OK) return 0;
  int64_t ncap = *cap ? *cap * 2 : 4096;
  while (ncap < need) ncap *= 2;
  char what[160];
  snprintf(what, sizeof what, "keeping more than %lld masked runs (every run of every column, "
           "to draw a mask that fits no interval form)", (long long)(rs->count + rs->npend));
  const int64_t more = fm_mem_mul(ncap - *cap, size); /* what is held is in the budget */
  rs->st = fm_mem_reserve(more, what, &rs->err);
  void *n = rs->st == FM_OK ? realloc(*buf, (size_t)(ncap * size)) : NULL;
  if (rs->st == FM_OK) rs->reserved = fm_mem_add(rs->reserved, more);
  if (!n) {
    if (rs->st == FM_OK)
      rs->st = fm_fail(&rs->err, FM_ENOMEM, "cannot keep %lld masked runs", (long long)need);
    return 0;
  }
  *buf = n;
  *cap = ncap;
  return 1;
}

static inline void run_push(run_store *rs, int64_t j, int32_t a, int32_t b) {
  if (rs->npend == rs->pend_cap &&
      !run_grow(rs, (void **)&rs->pend, &rs->pend_cap, rs->npend + 1, 3 * sizeof(int32_t)))
    return;
  int32_t *p = rs->pend + 3 * rs->npend++;
  p[0] = (int32_t)j;
  p[1] = a;
  p[2] = b;
}

/* Sorts the pending runs of set `set` into their columns (stable: row order). */
static void run_commit_set(run_store *rs, int64_t set) {
  const int64_t sk = rs->sk, base = set * sk;
  if (!run_grow(rs, (void **)&rs->items, &rs->cap, rs->count + rs->npend, 2 * sizeof(int32_t)))
    rs->npend = 0;
  for (int64_t j = 0; j < sk; j++) rs->cursor[j] = 0;
  for (int64_t q = 0; q < rs->npend; q++) rs->cursor[rs->pend[3 * q]]++;
  int64_t at = rs->count;
  for (int64_t j = 0; j < sk; j++) {
    int64_t n = rs->cursor[j];
    rs->start[base + j] = at;
    rs->cursor[j] = at;
    at += n;
  }
  rs->start[base + sk] = at;
  for (int64_t q = 0; q < rs->npend; q++) {
    const int32_t *p = rs->pend + 3 * q;
    int64_t k = rs->cursor[p[0]]++;
    rs->items[2 * k] = p[1];
    rs->items[2 * k + 1] = p[2];
  }
  rs->count = at;
  rs->npend = 0;
}

/* ------------------------------------------------------------------------- */
/* The scanner.                                                               */

struct fm_dense_scan {
  builder bd;
  int64_t batch, heads, sq, sk;
  int64_t rows_total, row; /* rows expected and fed, every set */
  uint8_t *buf[2];         /* (8 + Sk + 8) bytes each; flags at +8, the 8 before are 0 */
  uint8_t *cur, *prev;     /* flags (Sk,) of this row and the row above (0s above row 0) */
  int32_t *nt;             /* (Sk,) transitions of each column in this set */
  int32_t *tr;             /* (Sk, NTRANS) first transition rows of each column */
  int32_t *start;          /* (Sk,) first row of each column's latest run */
  int32_t *best;           /* (4, Sk) start and length of the longest run, then the second */
  uint64_t *hash;          /* (Sk,) hash of all transition rows; only when heads > 1 */
  int32_t *ref_nt;         /* (Sk,) head 0 of the current batch, when heads > 1 */
  int32_t *ref_tr;         /* (Sk, NTRANS) */
  uint64_t *ref_hash;      /* (Sk,) */
  run_store all;           /* keep_all_runs */
  int64_t reserved;        /* bytes of the arrays above held in the memory budget */
};

void fm_dense_scan_destroy(fm_dense_scan *s) {
  if (!s) return;
  builder_free(&s->bd);
  free(s->buf[0]);
  free(s->buf[1]);
  free(s->nt);
  free(s->tr);
  free(s->start);
  free(s->best);
  free(s->hash);
  free(s->ref_nt);
  free(s->ref_tr);
  free(s->ref_hash);
  run_store_free(&s->all);
  fm_mem_release(s->reserved);
  free(s);
}

/* Bytes of the scan state for Sk columns (the arrays of fm_dense_scan). */
static int64_t scan_state_bytes(int64_t sk, int64_t heads) {
  int64_t per = 2 + 4 + NTRANS * 4 + 4 + 16;      /* buf x 2, nt, tr, start, best */
  if (heads > 1) per += 8 + 4 + NTRANS * 4 + 8;   /* hash, ref_nt, ref_tr, ref_hash */
  return fm_mem_add(fm_mem_mul(sk, per), 32);
}

static fm_status scan_reserve(fm_dense_scan *s, fm_err *err) {
  const int64_t bytes = scan_state_bytes(s->sk, s->heads);
  char what[160];
  snprintf(what, sizeof what, "the scan state of Sk = %lld key columns (%lld bytes each)",
           (long long)s->sk, (long long)(bytes / s->sk));
  fm_status st = fm_mem_reserve(bytes, what, err);
  if (st == FM_OK) s->reserved = bytes;
  return st;
}

fm_status fm_dense_scan_create(int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                               const fm_dense_opts *o, fm_dense_scan **out, fm_err *err) {
  *out = NULL;
  fm_dense_scan *s = calloc(1, sizeof *s);
  if (!s) return fm_fail(err, FM_ENOMEM, "out of memory");
  fm_status st = builder_init(&s->bd, batch, heads, sq, sk, o, err);
  if (st != FM_OK) {
    free(s);
    return st;
  }
  s->bd.rep.masked_true = o ? o->masked_true : 0;
  s->batch = batch;
  s->heads = heads;
  s->sq = sq;
  s->sk = sk;
  s->rows_total = batch * heads * sq;
  if ((st = scan_reserve(s, err)) != FM_OK) {
    fm_dense_scan_destroy(s);
    return st;
  }
  size_t n = (size_t)sk;
  s->buf[0] = calloc(n + 16, 1);
  s->buf[1] = calloc(n + 16, 1);
  s->nt = malloc(n * sizeof *s->nt);
  s->tr = malloc(n * NTRANS * sizeof *s->tr);
  s->start = malloc(n * sizeof *s->start);
  s->best = malloc(4 * n * sizeof *s->best);
  int ok = s->buf[0] && s->buf[1] && s->nt && s->tr && s->start && s->best;
  if (heads > 1) {
    s->hash = malloc(n * sizeof *s->hash);
    s->ref_nt = malloc(n * sizeof *s->ref_nt);
    s->ref_tr = malloc(n * NTRANS * sizeof *s->ref_tr);
    s->ref_hash = malloc(n * sizeof *s->ref_hash);
    ok = ok && s->hash && s->ref_nt && s->ref_tr && s->ref_hash;
  }
  if (!ok) {
    fm_dense_scan_destroy(s);
    return fm_fail(err, FM_ENOMEM, "cannot allocate the scan state for Sk = %lld", (long long)sk);
  }
  if (o && o->keep_all_runs && (st = run_store_init(&s->all, batch * heads, sk, err)) != FM_OK) {
    fm_dense_scan_destroy(s);
    return st;
  }
  s->cur = s->buf[0] + 8;
  s->prev = s->buf[1] + 8;
  *out = s;
  return FM_OK;
}

static void scan_begin_set(fm_dense_scan *s, int64_t set) {
  memset(s->prev, 0, (size_t)s->sk);
  memset(s->nt, 0, (size_t)s->sk * sizeof *s->nt);
  memset(s->best, 0, 4 * (size_t)s->sk * sizeof *s->best);
  if (s->hash) memset(s->hash, 0, (size_t)s->sk * sizeof *s->hash);
  b_begin_set(&s->bd, (int32_t)(set / s->heads), (int32_t)(set % s->heads));
}

/* The two longest runs of columns [j0, j0 + len) after row i's transitions
 * (c: this row, p: the row above): a run starting at i records its start, a
 * run ending at i competes for the two places. Branch-free on separate
 * arrays, so that the compiler vectorises both loops; the second runs only
 * when some run beats a second place (rare once the places hold long runs). */
static void best_update(int64_t len, const uint8_t *restrict c, const uint8_t *restrict p, int32_t i,
                        int32_t *restrict st, int32_t *restrict b1s, int32_t *restrict b1l,
                        int32_t *restrict b2s, int32_t *restrict b2l) {
  int32_t need = 0;
  for (int64_t k = 0; k < len; k++) {
    const int32_t ck = c[k], pk = p[k], d = ck ^ pk;
    const int32_t mst = -(d & ck), mend = -(d & pk); /* all ones when a run starts / ends at i */
    need |= ((i - st[k]) & mend) > b2l[k];
    st[k] = (st[k] & ~mst) | (i & mst);
  }
  if (!need) return;
  for (int64_t k = 0; k < len; k++) {
    const int32_t d = c[k] ^ p[k], mend = -(d & p[k]);
    const int32_t s = st[k], l = (i - s) & mend; /* a run that ends here did not start here */
    const int32_t s1 = b1s[k], l1 = b1l[k], s2 = b2s[k], l2 = b2l[k];
    const int32_t g1 = -(l > l1), g2 = -(l > l2) & ~g1, keep2 = ~(g1 | g2);
    b2s[k] = (s1 & g1) | (s & g2) | (s2 & keep2);
    b2l[k] = (l1 & g1) | (l & g2) | (l2 & keep2);
    b1s[k] = (s & g1) | (s1 & ~g1);
    b1l[k] = (l & g1) | (l1 & ~g1);
  }
}

static void scan_best(fm_dense_scan *s, int64_t j0, int64_t len, const uint8_t *c,
                      const uint8_t *p, int32_t i) {
  int32_t *b = s->best + j0;
  best_update(len, c, p, i, s->start + j0, b, b + s->sk, b + 2 * s->sk, b + 3 * s->sk);
}

/* Column pass for row i: cur against prev. */
static void scan_columns(fm_dense_scan *s, int32_t i) {
  const uint8_t *cur = s->cur, *prev = s->prev;
  int32_t *nt = s->nt, *tr = s->tr;
  uint64_t *hash = s->hash;
  const uint64_t key = row_key(i);
  const int64_t sk = s->sk;
  for (int64_t j0 = 0; j0 < sk; j0 += BLOCK) {
    const int64_t len = sk - j0 < BLOCK ? sk - j0 : BLOCK;
    const uint8_t *c = cur + j0, *p = prev + j0;
    uint64_t any = 0;
    if (len == BLOCK) {
      for (int k = 0; k < BLOCK; k += 8) any |= load64(c + k) ^ load64(p + k);
    } else {
      for (int64_t k = 0; k < len; k++) any |= (uint64_t)(c[k] ^ p[k]);
    }
    if (!any) continue;
    int32_t *n = nt + j0;
    int need = 0; /* some changed column still records its transition rows */
    for (int64_t k = 0; k < len; k++) need |= (c[k] ^ p[k]) & (n[k] < NTRANS);
    if (need)
      for (int64_t k = 0; k < len; k++)
        if (c[k] != p[k] && n[k] < NTRANS) tr[(j0 + k) * NTRANS + n[k]] = i;
    for (int64_t k = 0; k < len; k++) n[k] += c[k] ^ p[k];
    scan_best(s, j0, len, c, p, i);
    if (s->all.on) /* runs ending at i: their start is still in s->start */
      for (int64_t k = 0; k < len; k++)
        if (p[k] & ~c[k]) run_push(&s->all, j0 + k, s->start[j0 + k], i);
    if (hash) {
      uint64_t *h = hash + j0;
      for (int64_t k = 0; k < len; k++) {
        uint64_t sel = (uint64_t)0 - (uint64_t)(c[k] ^ p[k]);
        h[k] = (h[k] & ~sel) | ((rotl64(h[k], 23) + key) & sel);
      }
    }
  }
}

/* 1 when the current set equals head 0 of its batch (keeps head 0's state). */
static int scan_same_as_head0(fm_dense_scan *s) {
  const int64_t sk = s->sk;
  if (s->heads == 1) return 1;
  if (s->bd.cur.head == 0) {
    memcpy(s->ref_nt, s->nt, (size_t)sk * sizeof *s->nt);
    memcpy(s->ref_tr, s->tr, (size_t)sk * NTRANS * sizeof *s->tr);
    memcpy(s->ref_hash, s->hash, (size_t)sk * sizeof *s->hash);
    return 1;
  }
  /* exact for columns of up to three runs (every transition kept), by a
   * 64-bit hash of the transition rows beyond that */
  for (int64_t j = 0; j < sk; j++) {
    int32_t t = s->nt[j];
    if (t != s->ref_nt[j] || s->hash[j] != s->ref_hash[j]) return 0;
    for (int k = 0; k < t && k < NTRANS; k++)
      if (s->tr[j * NTRANS + k] != s->ref_tr[j * NTRANS + k]) return 0;
  }
  return 1;
}

static void scan_end_set(fm_dense_scan *s) {
  builder *bd = &s->bd;
  const int64_t sk = s->sk;
  const int32_t sq = (int32_t)s->sq;
  /* runs still open at the last row end at Sq: s->cur (free after the swap) as an unmasked row */
  memset(s->cur, 0, (size_t)sk);
  scan_best(s, 0, sk, s->cur, s->prev, sq);
  if (s->all.on)
    for (int64_t j = 0; j < sk; j++)
      if (s->prev[j]) run_push(&s->all, j, s->start[j], sq);
  for (int64_t j = 0; j < sk; j++) {
    int32_t t = s->nt[j], n = (t + 1) / 2;
    int32_t runs[3][2] = {{0, 0}, {0, 0}, {0, 0}}, best[2][2] = {{0, 0}, {0, 0}};
    const int32_t *r = s->tr + j * NTRANS;
    for (int k = 0; k < n && k < 3; k++) {
      runs[k][0] = r[2 * k];
      runs[k][1] = 2 * k + 1 < t ? r[2 * k + 1] : sq;
    }
    int32_t s1 = s->best[j], l1 = s->best[sk + j], s2 = s->best[2 * sk + j], l2 = s->best[3 * sk + j];
    int first = l2 > 0 && s2 < s1; /* row order */
    best[0][0] = first ? s2 : s1;
    best[0][1] = first ? s2 + l2 : s1 + l1;
    best[1][0] = first ? s1 : s2;
    best[1][1] = first ? s1 + l1 : s2 + l2;
    b_column(bd, (int32_t)j, n, (const int32_t(*)[2])runs, (const int32_t(*)[2])best);
  }
  b_end_set(bd, scan_same_as_head0(s));
  if (s->all.on) run_commit_set(&s->all, bd->set);
}

/* Processes s->cur as the next row. */
static void scan_commit(fm_dense_scan *s) {
  if (s->row >= s->rows_total) {
    s->row++; /* too many rows: reported by finish */
    return;
  }
  int64_t set = s->row / s->sq;
  int32_t i = (int32_t)(s->row % s->sq);
  if (i == 0) scan_begin_set(s, set);
  scan_columns(s, i);
  s->bd.cur.masked += row_runs(&s->bd, s->cur, s->sk, i);
  uint8_t *t = s->cur;
  s->cur = s->prev;
  s->prev = t;
  if (i == s->sq - 1) scan_end_set(s);
  s->row++;
}

void fm_dense_scan_row(fm_dense_scan *s, const uint8_t *masked) {
  fm_dense_scan_rows(s, masked, 1, 0);
}

void fm_dense_scan_rows(fm_dense_scan *s, const uint8_t *rows, int64_t nrows, int attend) {
  const int64_t sk = s->sk;
  const uint8_t flip = attend ? 1 : 0;
  for (int64_t r = 0; r < nrows; r++) {
    const uint8_t *row = rows + r * sk;
    for (int64_t j = 0; j < sk; j++) s->cur[j] = (uint8_t)((row[j] != 0) ^ flip);
    scan_commit(s);
  }
}

static fm_status scan_finish_sized(fm_dense_scan *s, int64_t element_size, fm_dense_result **out,
                                   fm_err *err) {
  *out = NULL;
  fm_status st = FM_OK;
  if (s->row != s->rows_total)
    st = fm_fail(err, FM_EINVAL, "the scan got %lld rows, expected B*H*Sq = %lld",
                 (long long)s->row, (long long)s->rows_total);
  if (st == FM_OK && s->all.st != FM_OK) {
    st = s->all.st;
    if (err) *err = s->all.err;
  }
  if (st == FM_OK) {
    b_finish(&s->bd, element_size);
    st = b_result(&s->bd, out, err);
  }
  if (st == FM_OK && s->all.on) {
    (*out)->all_start = s->all.start;
    (*out)->all_runs = s->all.items;
    /* their reservations go with them; the pending runs and cursor stay with the store */
    const int64_t moved = fm_mem_add(fm_mem_mul(s->all.sk * (s->rows_total / s->sq) + 1, 8),
                                     fm_mem_mul(s->all.cap, 8));
    (*out)->reserved = fm_mem_add((*out)->reserved, moved);
    s->all.reserved -= moved;
    s->all.start = NULL;
    s->all.items = NULL;
  }
  fm_dense_scan_destroy(s);
  return st;
}

fm_status fm_dense_scan_finish(fm_dense_scan *s, fm_dense_result **out, fm_err *err) {
  return scan_finish_sized(s, 1, out, err);
}

/* ------------------------------------------------------------------------- */
/* Dense files.                                                               */

/* How the stored values of one file become flags (1 = masked), and what the
 * values showed on the way. */
typedef struct value_reader {
  fm_dtype dtype;
  int additive;      /* float dtype read additively */
  uint8_t flip;      /* bool reading: 1 when non-zero = attend */
  uint64_t nonbinary; /* integer dtypes: OR of the bits above bit 0 (values other than 0, 1) */
  int64_t soft;      /* additive: values read as attend that are not 0 */
  int64_t ones;      /* float dtypes: values equal to 1 */
  int64_t others;    /* float dtypes: values other than 0 and 1 */
} value_reader;

/* -10000 as float16 is exact (0x70E2); as bfloat16 it rounds to -9984 (0x461C). */
#define F16_MASKED_MAG 0x70E2
#define F16_INF_MAG 0x7C00
#define F16_ONE 0x3C00
#define BF16_MASKED_MAG 0x461C
#define BF16_INF_MAG 0x7F80
#define BF16_ONE 0x3F80

/* Integer values of type T: non-zero ^ flip. */
#define FLAGS_INT(T)                                                                           \
  do {                                                                                         \
    const T *v = (const T *)(const void *)p;                                                   \
    uint64_t nb = 0;                                                                           \
    for (int64_t j = 0; j < n; j++) {                                                          \
      out[j] = (uint8_t)((v[j] != 0) ^ vr->flip);                                              \
      nb |= (uint64_t)v[j] & ~(uint64_t)1;                                                     \
    }                                                                                          \
    vr->nonbinary |= nb;                                                                       \
  } while (0)

/* Float values of type T: additive (masked at <= -10000, false for NaN) or
 * non-zero ^ flip; counts the ones and the other non-zero values. */
#define FLAGS_FLOAT(T)                                                                         \
  do {                                                                                         \
    const T *v = (const T *)(const void *)p;                                                   \
    const T thr = (T)FM_DENSE_ADDITIVE_MASKED;                                                 \
    int64_t soft = 0, ones = 0, others = 0;                                                    \
    for (int64_t j = 0; j < n; j++) {                                                          \
      int m = vr->additive ? v[j] <= thr : (v[j] != 0) ^ vr->flip;                             \
      out[j] = (uint8_t)m;                                                                     \
      ones += v[j] == 1;                                                                       \
      others += (v[j] != 0) & (v[j] != 1);                                                     \
      soft += (v[j] != 0) & !m;                                                                \
    }                                                                                          \
    vr->soft += soft;                                                             \
    vr->ones += ones;                                                                          \
    vr->others += others;                                                                      \
  } while (0)

/* float16 / bfloat16 by their bits: additive masked when the sign is set and
 * thr <= |v| <= inf (NaN magnitudes lie above inf). */
static void flags_half(value_reader *vr, const uint8_t *p, int64_t n, uint8_t *out) {
  const int bf = vr->dtype == FM_DT_U16;
  const uint16_t thr = bf ? BF16_MASKED_MAG : F16_MASKED_MAG, inf = bf ? BF16_INF_MAG : F16_INF_MAG;
  const uint16_t one = bf ? BF16_ONE : F16_ONE;
  const uint16_t *v = (const uint16_t *)(const void *)p;
  int64_t soft = 0, ones = 0, others = 0;
  for (int64_t j = 0; j < n; j++) {
    uint16_t b = v[j], mag = b & 0x7fff;
    int m = vr->additive ? (b >> 15) & (mag >= thr) & (mag <= inf) : (mag != 0) ^ vr->flip;
    out[j] = (uint8_t)m;
    ones += b == one;
    others += (mag != 0) & (b != one);
    soft += (mag != 0) & !m;
  }
  vr->soft += soft;
  vr->ones += ones;
  vr->others += others;
}

/* One stored row (Sk values) -> flags. */
static void read_row(value_reader *vr, const uint8_t *p, int64_t n, uint8_t *out) {
  switch (vr->dtype) {
  case FM_DT_I32: FLAGS_INT(int32_t); break;
  case FM_DT_I64: FLAGS_INT(int64_t); break;
  case FM_DT_U64: FLAGS_INT(uint64_t); break;
  case FM_DT_F32: FLAGS_FLOAT(float); break;
  case FM_DT_F64: FLAGS_FLOAT(double); break;
  case FM_DT_F16:
  case FM_DT_U16: flags_half(vr, p, n, out); break;
  default:
    for (int64_t j = 0; j < n; j++) out[j] = (uint8_t)((p[j] != 0) ^ vr->flip);
    break;
  }
}

static int host_little_endian(void) {
  uint16_t x = 1;
  uint8_t b;
  memcpy(&b, &x, 1);
  return b == 1;
}

static int is_float(fm_dtype t) {
  return t == FM_DT_F32 || t == FM_DT_F64 || t == FM_DT_F16 || t == FM_DT_U16;
}
int fm_dense_dtype_is_float(fm_dtype t) { return is_float(t); }
static int is_additive(fm_dtype t) { return is_float(t); } /* the dtypes written additively */
static int is_wide_int(fm_dtype t) { return t == FM_DT_I32 || t == FM_DT_I64 || t == FM_DT_U64; }

static int interval_shaped(const fm_npy_header *h) {
  return h->ndim == 4 && (h->shape[3] == 1 || h->shape[3] == 2 || h->shape[3] == 4) &&
         h->shape[2] > h->shape[3];
}

/* Checks a header and the options as a dense mask; dims = B, H, Sq, Sk. */
static fm_status dense_header(const char *path, const fm_npy_header *h, const fm_dense_opts *o,
                              int64_t dims[4], fm_err *err) {
  char shp[200];
  shape_text(shp, sizeof shp, h->ndim, h->shape);
  if (h->ndim < 2 || h->ndim > 4)
    return fm_fail(err, FM_EFORMAT,
                   "%s: shape %s has %d dimension%s; a dense mask is [Sq, Sk], [H, Sq, Sk] or "
                   "[B, H, Sq, Sk]",
                   path, shp, h->ndim, h->ndim == 1 ? "" : "s");
  dims[0] = h->ndim == 4 ? h->shape[0] : 1;
  dims[1] = h->ndim >= 3 ? h->shape[h->ndim - 3] : 1;
  dims[2] = h->shape[h->ndim - 2];
  dims[3] = h->shape[h->ndim - 1];
  if (dims[2] == 0 || dims[3] == 0)
    return fm_fail(err, FM_EFORMAT,
                   "%s: shape %s has Sq = %lld, Sk = %lld; a mask needs at least one query row "
                   "and one key column",
                   path, shp, (long long)dims[2], (long long)dims[3]);
  if (dims[0] == 0 || dims[1] == 0)
    return fm_fail(err, FM_EFORMAT, "%s: shape %s has B = %lld, H = %lld; expected at least one",
                   path, shp, (long long)dims[0], (long long)dims[1]);
  const int additive = is_float(h->dtype) && o->reading != FM_DENSE_READ_BOOL;
  if (o->masked_true && additive)
    return fm_fail(err, FM_EINVAL,
                   "%s: the masked-true convention is for bool and integer masks; a %s mask is "
                   "additive (0 = attend, -inf or <= -10000 = masked) unless read with --bool",
                   path, fm_dense_dtype_name(h->dtype));
  if (!is_float(h->dtype) && o->reading != FM_DENSE_READ_AUTO)
    return fm_fail(err, FM_EINVAL, "%s: --bool and --additive say how to read a float mask; "
                   "this one is %s (non-zero = %s)", path, fm_dense_dtype_name(h->dtype),
                   o->masked_true ? "masked" : "may attend");
  if (fm_dtype_size(h->dtype) > 1 && !host_little_endian())
    return fm_fail(err, FM_EUNSUPPORTED, "%s: multi-byte dtypes need a little-endian host", path);
  fm_status st = check_dims(dims[0], dims[1], dims[2], dims[3], err);
  if (st != FM_OK) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
    return fm_fail(err, st, "%s: shape %s: %s", path, shp, msg);
  }
  return FM_OK;
}

/* Reads rows [0, rows) of the open file through the scanner. */
static fm_status scan_file_rows(fm_dense_scan *s, value_reader *vr, int fd, const char *path,
                                int64_t off, int64_t rows, int64_t row_bytes, fm_err *err) {
  int64_t per = READ_CHUNK / row_bytes; /* rows per read */
  if (per < 1) per = 1;
  if (per > rows) per = rows;
  /* a few MiB of rows; only one row when the memory budget is tight */
  fm_status st = fm_mem_reserve(per * row_bytes, "the read buffer", err);
  if (st != FM_OK && per > 1) {
    char what[4300];
    snprintf(what, sizeof what, "%s: a read buffer of one row of %lld bytes", path,
             (long long)row_bytes);
    per = 1;
    st = fm_mem_reserve(row_bytes, what, err);
  }
  if (st != FM_OK) return st;
  const int64_t bytes = per * row_bytes;
  uint8_t *chunk = malloc((size_t)bytes); /* (per, Sk) elements as stored */
  if (!chunk) {
    fm_mem_release(bytes);
    return fm_fail(err, FM_ENOMEM, "%s: cannot allocate a read buffer", path);
  }
  for (int64_t r = 0; r < rows && st == FM_OK;) {
    int64_t nr = rows - r < per ? rows - r : per, want = nr * row_bytes, got = 0;
    while (got < want) {
      ssize_t k = pread(fd, chunk + got, (size_t)(want - got), (off_t)(off + got));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        st = k < 0 ? fm_fail(err, FM_EIO, "%s: read error at byte %lld: %s", path,
                             (long long)(off + got), strerror(errno))
                   : fm_fail(err, FM_EFORMAT, "%s: truncated .npy data (ends at byte %lld)",
                             path, (long long)(off + got));
        break;
      }
      got += k;
    }
    if (st != FM_OK) break;
    off += want;
    for (int64_t q = 0; q < nr; q++) {
      read_row(vr, chunk + q * row_bytes, s->sk, s->cur);
      scan_commit(s);
    }
    r += nr;
  }
  free(chunk);
  fm_mem_release(bytes);
  return st;
}

/* What the values showed that makes the mask unusable as read. */
static fm_status values_verdict(const char *path, const fm_npy_header *h, const value_reader *vr,
                                const fm_dense_opts *o, fm_err *err) {
  char shp[200];
  shape_text(shp, sizeof shp, h->ndim, h->shape);
  if (is_wide_int(h->dtype) && vr->nonbinary && interval_shaped(h))
    return fm_fail(err, FM_EFORMAT,
                   "%s: %s %s with values other than 0 and 1 looks like an interval file "
                   "(Paddle [B, H_mask, Sk, k] row indices), not a dense mask: use fmsim check "
                   "--intervals",
                   path, fm_dense_dtype_name(h->dtype), shp);
  if (is_float(h->dtype) && o->reading == FM_DENSE_READ_AUTO && vr->ones > 0 && vr->others == 0)
    return fm_fail(err, FM_EINVAL,
                   "%s: %s %s holds only 0 and 1: as an additive mask nothing would be masked; "
                   "say how to read it: --bool (1 = may attend, with --masked-true 1 = masked) "
                   "or --additive (0 = attend, the 1s are biases)",
                   path, fm_dense_dtype_name(h->dtype), shp);
  return FM_OK;
}

fm_status fm_dense_check_file(const char *path, const fm_dense_opts *o, fm_dense_result **out,
                              fm_err *err) {
  *out = NULL;
  fm_dense_opts opts = {0};
  if (o) opts = *o;
  FILE *f;
  fm_status ost = fm_input_open(path, &f, err);
  if (ost != FM_OK) return ost;
  fm_npy_header h;
  int64_t dims[4] = {0, 0, 0, 0};
  fm_status st = fm_npy_read_header(f, path, &h, err);
  if (st == FM_OK) st = dense_header(path, &h, &opts, dims, err);
  fm_dense_scan *s = NULL;
  if (st == FM_OK) {
    st = fm_dense_scan_create(dims[0], dims[1], dims[2], dims[3], &opts, &s, err);
    if (st == FM_ENOMEM && err) { /* name the file: the estimate came from its header */
      char msg[sizeof err->msg];
      snprintf(msg, sizeof msg, "%s", err->msg);
      fm_fail(err, st, "%s: %s", path, msg);
    }
  }
  if (st != FM_OK) {
    fclose(f);
    return st;
  }
  fm_dense_report *rep = &s->bd.rep;
  value_reader vr = {.dtype = h.dtype,
                     .additive = is_float(h.dtype) && opts.reading != FM_DENSE_READ_BOOL,
                     .flip = opts.masked_true ? 0 : 1}; /* default: non-zero = attend */
  rep->dtype = h.dtype;
  rep->ndim = h.ndim;
  rep->additive = vr.additive;
  const int fd = fileno(f);
#ifdef POSIX_FADV_SEQUENTIAL
  posix_fadvise(fd, (off_t)h.data_offset, 0, POSIX_FADV_SEQUENTIAL);
#endif
  const int64_t esize = fm_dtype_size(h.dtype);
  st = scan_file_rows(s, &vr, fd, path, h.data_offset, dims[0] * dims[1] * dims[2],
                      dims[3] * esize, err);
  fclose(f);
  if (st == FM_OK) st = values_verdict(path, &h, &vr, &opts, err);
  if (st != FM_OK) {
    fm_dense_scan_destroy(s);
    return st;
  }
  rep->soft_values = vr.additive ? vr.soft : 0;
  if (s->all.st != FM_OK) {
    st = fm_fail(err, s->all.st, "%s: %s", path, s->all.err.msg);
    fm_dense_scan_destroy(s);
    return st;
  }
  return scan_finish_sized(s, esize, out, err);
}

/* ------------------------------------------------------------------------- */
/* Interval masks.                                                            */

/* Row i of set `set` as 0/1 flags; climit (Sk,) is the causal limit per
 * column (0 for a bidirectional mask). */
static void expand_row(const fm_colmask *m, int32_t set, const int32_t *climit, int32_t i,
                       int64_t sk, uint8_t *out) {
  const int32_t *lts = fm_colmask_cvec(m, set, FM_LTS), *lte = fm_colmask_cvec(m, set, FM_LTE);
  const int32_t *uts = fm_colmask_cvec(m, set, FM_UTS), *ute = fm_colmask_cvec(m, set, FM_UTE);
  for (int64_t j = 0; j < sk; j++)
    out[j] = (uint8_t)(((i >= lts[j]) & (i < lte[j])) | ((i >= uts[j]) & (i < ute[j])) |
                       (i < climit[j]));
}

static int32_t *causal_limits(const fm_colmask *m) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  int32_t *c = malloc((size_t)sk * sizeof *c);
  if (c)
    for (int32_t j = 0; j < sk; j++) c[j] = fm_colmask_causal(m) ? fm_causal_limit(j, sq, sk) : 0;
  return c;
}

static int sets_equal(const fm_colmask *m, int32_t a, int32_t b) {
  for (int32_t j = 0; j < fm_colmask_sk(m); j++)
    if (!fm_colmask_column_equal(m, a, m, b, j)) return 0;
  return 1;
}

/* The exact tile classes of an interval mask (fm_classify), into the report.
 * They are the only count: the row pass (colmask_rows, through row_runs)
 * counts tiles only while tile_acc exists, so it is freed here, else every
 * tile would be counted twice when the rows are expanded. */
static fm_status colmask_tiles(builder *bd, const fm_colmask *m, const fm_dense_opts *o,
                               fm_err *err) {
  if (!o || o->br <= 0 || o->bc <= 0) return FM_OK;
  fm_dense_opts grid = {.br = o->br, .bc = o->bc, .keep_tiles = o->keep_tiles};
  fm_status st = builder_tiles(bd, &grid, err);
  fm_tile_counts counts;
  if (st == FM_OK) st = fm_classify(m, o->br, o->bc, &counts, NULL, bd->tiles, err);
  if (st != FM_OK) return st;
  free(bd->tile_acc);
  bd->tile_acc = NULL;
  for (int c = 0; c < FM_TILE_NCLASSES; c++) bd->rep.tiles.count[c] = counts.exact[c];
  return FM_OK;
}

/* Expands every row of set `set` through the row pass. */
static void colmask_rows(builder *bd, const fm_colmask *m, int32_t set, const int32_t *climit,
                         uint8_t *buf) {
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  for (int32_t i = 0; i < sq; i++) {
    expand_row(m, set, climit, i, sk, buf + 8);
    row_runs(bd, buf + 8, sk, i);
  }
}

fm_status fm_dense_check_colmask(const fm_colmask *m, int64_t max_row_elements,
                                 const fm_dense_opts *o, fm_dense_result **out, fm_err *err) {
  *out = NULL;
  const int64_t nb = fm_colmask_nb(m), nh = fm_colmask_nh(m);
  const int64_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  builder bd;
  fm_dense_opts keep = {.keep_intervals = o ? o->keep_intervals : 0};
  fm_status st = builder_init(&bd, nb, nh, sq, sk, &keep, err);
  if (st == FM_OK) st = colmask_tiles(&bd, m, o, err);
  if (st != FM_OK) {
    builder_free(&bd);
    return st;
  }
  bd.rep.dtype = FM_DT_I32;
  /* rows only when small: every set is expanded, O(Sq*Sk) each */
  int rows = (double)nb * (double)nh * (double)sq * (double)sk <= (double)max_row_elements;
  uint8_t *buf = NULL;     /* (8 + Sk + 8): one expanded row at +8, 0 before it */
  int32_t *climit = NULL;  /* (Sk,) */
  if (rows && (st = fm_mem_check(fm_mem_mul(sk, 5), "a row of the expanded mask", err)) != FM_OK) {
    builder_free(&bd);
    return st;
  }
  if (rows) {
    buf = calloc((size_t)sk + 16, 1);
    climit = causal_limits(m);
    if (!buf || !climit) {
      free(buf);
      free(climit);
      builder_free(&bd);
      return fm_fail(err, FM_ENOMEM, "cannot allocate a row of Sk = %lld", (long long)sk);
    }
  }
  for (int32_t b = 0; b < nb; b++)
    for (int32_t h = 0; h < nh; h++) {
      int32_t set = b * (int32_t)nh + h;
      int64_t masked = 0;
      b_begin_set(&bd, b, h);
      for (int32_t j = 0; j < sk; j++) {
        int32_t runs[3][2], best[2][2];
        int n = fm_colmask_column_runs(m, set, j, runs);
        for (int k = 0; k < n; k++) masked += runs[k][1] - runs[k][0];
        best_of_runs((const int32_t(*)[2])runs, n, best);
        b_column(&bd, j, n, (const int32_t(*)[2])runs, (const int32_t(*)[2])best);
      }
      if (rows) {
        colmask_rows(&bd, m, set, climit, buf);
      } else { /* the diagonal from the columns; empty rows stay unknown */
        for (int64_t i = sq > sk ? sq - sk : 0; i < sq; i++)
          bd.cur.masked_diagonal += fm_colmask_masked(m, set, (int32_t)i, (int32_t)(i + sk - sq));
      }
      bd.cur.masked = masked;
      b_end_set(&bd, h == 0 || sets_equal(m, set, b * (int32_t)nh));
    }
  free(buf);
  free(climit);
  bd.rep.rows_known = rows;
  b_finish(&bd, 1);
  return b_result(&bd, out, err);
}

/* The kept runs of column j of set `set` (n of them, the first three). */
static int kept_runs(const fm_dense_result *r, int64_t set, int32_t j, int32_t runs[3][2]) {
  int64_t c = set * r->rep.sk + j;
  for (int k = 0; k < 3; k++) {
    runs[k][0] = r->runs[(c * KR + k) * 2];
    runs[k][1] = r->runs[(c * KR + k) * 2 + 1];
  }
  return r->nruns[c];
}

/* A new mask of the result's shape, B x H_mask sets (H_mask = 1 when shared). */
static fm_status result_colmask(const fm_dense_result *r, int causal, fm_colmask **out,
                                fm_err *err) {
  const fm_dense_report *rep = &r->rep;
  if (!r->nruns)
    return fm_fail(err, FM_EINVAL, "the analysis kept no intervals (keep_intervals was off)");
  return fm_colmask_create(rep->sq, rep->sk, rep->batch, rep->shared_across_heads ? 1 : rep->heads,
                           causal, out, err);
}

fm_status fm_dense_result_to_colmask(const fm_dense_result *r, fm_form f, fm_colmask **out,
                                     fm_err *err) {
  *out = NULL;
  const fm_dense_report *rep = &r->rep;
  if (!r->nruns)
    return fm_fail(err, FM_EINVAL, "the analysis kept no intervals (keep_intervals was off)");
  if (f == FM_FORM_NONE) f = rep->form;
  if (f == FM_FORM_NONE || !(rep->fit & (1u << f))) {
    fm_form shown = f == FM_FORM_NONE ? rep->closest : f;
    const fm_dense_column *c = &rep->first[shown][0];
    char runs[160] = "";
    size_t n = 0;
    for (int k = 0; k < c->nruns && k < 3 && n < sizeof runs; k++)
      n += (size_t)snprintf(runs + n, sizeof runs - n, "%s[%d, %d)", k ? " " : "", c->runs[k][0],
                            c->runs[k][1]);
    if (c->nruns > 3 && n < sizeof runs) snprintf(runs + n, sizeof runs - n, " ...");
    return fm_fail(err, FM_EUNSUPPORTED,
                   "the mask does not fit %s%s: %lld column%s cannot be held, the first is batch "
                   "%d, head %d, column %d with %d masked run%s %s",
                   f == FM_FORM_NONE ? "any interval form, closest " : "form ",
                   fm_form_name(shown), (long long)rep->misfits[shown],
                   rep->misfits[shown] == 1 ? "" : "s", c->batch, c->head, c->column, c->nruns,
                   c->nruns == 1 ? "" : "s", runs);
  }
  const int32_t sq = (int32_t)rep->sq, sk = (int32_t)rep->sk;
  fm_colmask *m = NULL;
  fm_status st = result_colmask(r, fm_form_causal(f), &m, err);
  if (st != FM_OK) return st;
  const int32_t nh_out = fm_colmask_nh(m);
  for (int32_t b = 0; b < rep->batch; b++)
    for (int32_t h = 0; h < nh_out; h++) {
      int64_t src = (int64_t)b * rep->heads + h;
      int32_t *v[4];
      for (int k = 0; k < 4; k++) v[k] = fm_colmask_vec(m, b * nh_out + h, (fm_vec)k);
      for (int32_t j = 0; j < sk; j++) {
        int32_t runs[3][2], iv[4];
        int n = kept_runs(r, src, j, runs);
        fm_runs_to_intervals((const int32_t(*)[2])runs, n, fm_causal_limit(j, sq, sk), sq, f,
                             fm_form_causal(f), iv);
        for (int k = 0; k < 4; k++) v[k][j] = iv[k];
      }
    }
  *out = m;
  return FM_OK;
}

fm_status fm_dense_result_subset_colmask(const fm_dense_result *r, fm_colmask **out, fm_err *err) {
  *out = NULL;
  const fm_dense_report *rep = &r->rep;
  fm_colmask *m = NULL;
  fm_status st = result_colmask(r, 0, &m, err);
  if (st != FM_OK) return st;
  const int32_t sq = (int32_t)rep->sq, sk = (int32_t)rep->sk, nh_out = fm_colmask_nh(m);
  for (int32_t b = 0; b < rep->batch; b++)
    for (int32_t h = 0; h < nh_out; h++) {
      const int32_t *best = r->best + ((int64_t)b * rep->heads + h) * sk * 4;
      int32_t *v[4];
      for (int k = 0; k < 4; k++) v[k] = fm_colmask_vec(m, b * nh_out + h, (fm_vec)k);
      for (int32_t j = 0; j < sk; j++) {
        int32_t runs[2][2], iv[4];
        int n = 0;
        for (int k = 0; k < 2; k++)
          if (best[j * 4 + 2 * k + 1] > best[j * 4 + 2 * k]) {
            runs[n][0] = best[j * 4 + 2 * k];
            runs[n][1] = best[j * 4 + 2 * k + 1];
            n++;
          }
        fm_runs_to_intervals((const int32_t(*)[2])runs, n, 0, sq, FM_FORM_NONE, 0, iv);
        for (int k = 0; k < 4; k++) v[k][j] = iv[k];
      }
    }
  *out = m;
  return FM_OK;
}

/* ------------------------------------------------------------------------- */
/* Expansion.                                                                  */

static int expand_dtype_ok(fm_dtype t) { return (unsigned)t < FM_DT_COUNT; } /* every fm_npy dtype */

/* flags (Sk,) -> stored values (Sk,) of dtype t. */
static void flags_to_values(const uint8_t *fl, int64_t n, fm_dtype t, uint8_t flip, void *out) {
  switch (t) {
  case FM_DT_I32:
    for (int64_t j = 0; j < n; j++) ((int32_t *)out)[j] = fl[j] ^ flip;
    break;
  case FM_DT_I64:
    for (int64_t j = 0; j < n; j++) ((int64_t *)out)[j] = fl[j] ^ flip;
    break;
  case FM_DT_U64:
    for (int64_t j = 0; j < n; j++) ((uint64_t *)out)[j] = fl[j] ^ flip;
    break;
  case FM_DT_F32:
    for (int64_t j = 0; j < n; j++) ((float *)out)[j] = fl[j] ? -INFINITY : 0.0f;
    break;
  case FM_DT_F64:
    for (int64_t j = 0; j < n; j++) ((double *)out)[j] = fl[j] ? -INFINITY : 0.0;
    break;
  case FM_DT_F16:
    for (int64_t j = 0; j < n; j++) ((uint16_t *)out)[j] = fl[j] ? 0xFC00 : 0; /* -inf */
    break;
  case FM_DT_U16:
    for (int64_t j = 0; j < n; j++) ((uint16_t *)out)[j] = fl[j] ? 0xFF80 : 0; /* bf16 -inf */
    break;
  default:
    for (int64_t j = 0; j < n; j++) ((uint8_t *)out)[j] = fl[j] ^ flip;
    break;
  }
}

fm_status fm_dense_expand(const fm_colmask *m, const char *path, const fm_dense_expand_opts *o,
                          fm_err *err) {
  fm_dense_expand_opts opt;
  memset(&opt, 0, sizeof opt);
  if (o) opt = *o;
  if (!expand_dtype_ok(opt.dtype))
    return fm_fail(err, FM_EINVAL, "%s: cannot write a dense mask as %s (expected bool, uint8, "
                   "int8, int32, int64, uint64, float32, float64, float16 or bfloat16)", path,
                   fm_dense_dtype_name(opt.dtype));
  if (opt.masked_true && is_additive(opt.dtype))
    return fm_fail(err, FM_EINVAL, "%s: the masked-true convention is for bool and integer "
                   "masks; %s masks are additive (0 = attend, -inf = masked)",
                   path, fm_dense_dtype_name(opt.dtype));
  const int64_t nb = fm_colmask_nb(m), nh = fm_colmask_nh(m);
  const int64_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  const int64_t heads = opt.heads ? opt.heads : nh;
  if (heads < 1 || heads > 65535)
    return fm_fail(err, FM_EINVAL, "%s: heads = %lld is outside 1..65535", path, (long long)heads);
  if (nh != 1 && nh != heads)
    return fm_fail(err, FM_EINVAL, "%s: the mask has H_mask = %lld heads and cannot be written "
                   "as %lld heads (only a shared mask, H_mask = 1, is repeated)",
                   path, (long long)nh, (long long)heads);
  const int rank = opt.rank ? opt.rank : 4;
  if (rank < 2 || rank > 4)
    return fm_fail(err, FM_EINVAL, "%s: rank %d: a dense mask has 2, 3 or 4 dimensions", path, rank);
  if ((rank <= 3 && nb != 1) || (rank == 2 && heads != 1))
    return fm_fail(err, FM_EINVAL, "%s: B = %lld, H = %lld do not fit a rank-%d array (%s)", path,
                   (long long)nb, (long long)heads, rank,
                   rank == 3 ? "[H, Sq, Sk] needs B = 1" : "[Sq, Sk] needs B = H = 1");
  const int64_t esize = fm_dtype_size(opt.dtype);
  const double bytes = (double)nb * (double)heads * (double)sq * (double)sk * (double)esize;
  const int64_t limit = opt.max_bytes > 0 ? opt.max_bytes : FM_DENSE_EXPAND_MAX_BYTES;
  if (bytes > (double)limit)
    return fm_fail(err, FM_ENOMEM, "%s: the dense mask [%lld, %lld, %lld, %lld] %s would take "
                   "%.1f GiB, above the limit of %.1f GiB for dense output",
                   path, (long long)nb, (long long)heads, (long long)sq, (long long)sk,
                   fm_dense_dtype_name(opt.dtype), bytes / (1 << 30), (double)limit / (1 << 30));
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = 0;
  else *slash = 0;
  struct statvfs vfs;
  if (statvfs(dir, &vfs) == 0) {
    double avail = (double)vfs.f_bavail * (double)vfs.f_frsize;
    if (bytes + 4096.0 > avail)
      return fm_fail(err, FM_ENOMEM, "%s: the dense mask needs %.2f GiB but %s has %.2f GiB free",
                     path, bytes / (1 << 30), dir, avail / (1 << 30));
  }
  int64_t shape[4];
  int nd = 0;
  if (rank == 4) shape[nd++] = nb;
  if (rank >= 3) shape[nd++] = heads;
  shape[nd++] = sq;
  shape[nd++] = sk;
  fm_status st = fm_mem_check(fm_mem_mul(sk, 1 + esize + 4), "a row of the dense mask", err);
  if (st != FM_OK) return st;
  uint8_t *fl = malloc((size_t)sk);                /* (Sk,) flags */
  void *vals = malloc((size_t)(sk * esize));       /* (Sk,) values as stored */
  int32_t *climit = causal_limits(m);              /* (Sk,) */
  fm_npy_writer *w = NULL;
  if (!fl || !vals || !climit) st = fm_fail(err, FM_ENOMEM, "%s: out of memory", path);
  if (st == FM_OK) st = fm_npy_writer_open(path, opt.dtype, nd, shape, &w, err);
  const uint8_t flip = opt.masked_true ? 0 : 1;
  for (int32_t b = 0; b < nb && st == FM_OK; b++)
    for (int32_t h = 0; h < heads && st == FM_OK; h++) {
      int32_t set = fm_colmask_set_index(m, b, h);
      for (int32_t i = 0; i < sq && st == FM_OK; i++) {
        expand_row(m, set, climit, i, sk, fl);
        flags_to_values(fl, sk, opt.dtype, flip, vals);
        st = fm_npy_writer_write(w, vals, sk, err);
      }
    }
  if (w) {
    fm_status cs = fm_npy_writer_close(w, st == FM_OK, st == FM_OK ? err : NULL);
    if (st == FM_OK) st = cs;
  }
  free(fl);
  free(vals);
  free(climit);
  return st;
}

/* ------------------------------------------------------------------------- */
/* Names and file kinds.                                                      */

static const struct {
  fm_dtype t;
  const char *name;
} dense_names[] = {{FM_DT_BOOL, "bool"},   {FM_DT_U8, "uint8"},     {FM_DT_I8, "int8"},
                   {FM_DT_I32, "int32"},   {FM_DT_F32, "float32"},  {FM_DT_F16, "float16"},
                   {FM_DT_U16, "bfloat16"}, {FM_DT_I64, "int64"},   {FM_DT_U64, "uint64"},
                   {FM_DT_F64, "float64"}};
#define NDENSE_NAMES ((int)(sizeof dense_names / sizeof dense_names[0]))

const char *fm_dense_dtype_name(fm_dtype t) {
  for (int i = 0; i < NDENSE_NAMES; i++)
    if (dense_names[i].t == t) return dense_names[i].name;
  return "?";
}

fm_status fm_dense_dtype_parse(const char *name, fm_dtype *out, fm_err *err) {
  for (int i = 0; i < NDENSE_NAMES; i++)
    if (strcmp(name, dense_names[i].name) == 0 && expand_dtype_ok(dense_names[i].t)) {
      *out = dense_names[i].t;
      return FM_OK;
    }
  return fm_fail(err, FM_EINVAL, "unknown dtype '%s' (expected bool, uint8, int8, int32, int64, "
                 "uint64, float32, float64, float16 or bfloat16)", name);
}
