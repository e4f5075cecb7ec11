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

#include "fm_intervals_io.h"
#include "fm_tile_rule.h"

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

typedef struct builder {
  fm_dense_report rep;
  fm_dense_set *sets;  /* (min(nsets, FM_DENSE_MAX_SET_REPORTS),) */
  fm_dense_set cur;    /* the set being scanned */
  fm_colmask *staging; /* keep_intervals: (B, H) non-causal, canonical runs; else NULL */
  int32_t *sv[4];      /* staging vectors of the current set */
} builder;

struct fm_dense_result {
  fm_dense_report rep;
  fm_dense_set *sets;
  fm_colmask *staging;
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

static fm_status builder_init(builder *bd, int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                              int keep, fm_err *err) {
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
  r->nset_reports = (int)(r->nsets < FM_DENSE_MAX_SET_REPORTS ? r->nsets : FM_DENSE_MAX_SET_REPORTS);
  bd->sets = calloc((size_t)r->nset_reports, sizeof *bd->sets);
  if (!bd->sets) return fm_fail(err, FM_ENOMEM, "cannot allocate the per-set reports");
  if (keep) {
    st = fm_colmask_create(sq, sk, batch, heads, 0, &bd->staging, err);
    if (st != FM_OK) {
      free(bd->sets);
      bd->sets = NULL;
      return st;
    }
  }
  return FM_OK;
}

static void builder_free(builder *bd) {
  free(bd->sets);
  fm_colmask_destroy(bd->staging);
  bd->sets = NULL;
  bd->staging = NULL;
}

static void b_begin_set(builder *bd, int32_t b, int32_t h) {
  memset(&bd->cur, 0, sizeof bd->cur);
  bd->cur.batch = b;
  bd->cur.head = h;
  bd->cur.fit = bd->cur.row_fit = ALL_FORMS;
  bd->cur.same_as_head0 = 1;
  if (bd->staging) {
    int32_t set = b * (int32_t)bd->rep.heads + h;
    for (int k = 0; k < 4; k++) bd->sv[k] = fm_colmask_vec(bd->staging, set, (fm_vec)k);
  }
}

/* Column j of the current set has n masked runs; runs holds the first min(n, 3). */
static void b_column(builder *bd, int32_t j, int32_t n, const int32_t (*runs)[2]) {
  fm_dense_report *r = &bd->rep;
  int32_t sq = (int32_t)r->sq, sk = (int32_t)r->sk;
  unsigned fit = fm_runs_fit(runs, n > 3 ? 4 : (int)n, fm_causal_limit(j, sq, sk), sq);
  bd->cur.fit &= fit;
  if (n > bd->cur.max_runs) bd->cur.max_runs = n;
  if (fit != ALL_FORMS)
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
  if (bd->staging && n <= 2) {
    int32_t iv[4];
    fm_runs_to_intervals(runs, (int)n, 0, sq, FM_FORM_NONE, 0, iv);
    for (int k = 0; k < 4; k++) bd->sv[k][j] = iv[k];
  }
}

/* Row i of the current set has n masked runs along it (the transposed mask's
 * column i: Sq' = Sk rows, its own causal limit). */
static void b_row(builder *bd, int32_t i, int32_t n, const int32_t (*runs)[2]) {
  int32_t sq = (int32_t)bd->rep.sq, sk = (int32_t)bd->rep.sk;
  bd->cur.row_fit &= fm_runs_fit(runs, n > 3 ? 4 : (int)n, fm_causal_limit(i, sk, sq), sk);
  if (n > bd->cur.max_row_runs) bd->cur.max_row_runs = n;
}

static void b_end_set(builder *bd, int same_as_head0) {
  fm_dense_report *r = &bd->rep;
  fm_dense_set *c = &bd->cur;
  c->same_as_head0 = same_as_head0;
  r->fit &= c->fit;
  r->row_fit &= c->row_fit;
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
}

static fm_status b_result(builder *bd, fm_dense_result **out, fm_err *err) {
  fm_dense_result *res = calloc(1, sizeof *res);
  if (!res) {
    builder_free(bd);
    return fm_fail(err, FM_ENOMEM, "out of memory");
  }
  res->rep = bd->rep;
  res->sets = bd->sets;
  res->staging = bd->staging;
  res->rep.sets = res->sets;
  bd->sets = NULL;
  bd->staging = NULL;
  *out = res;
  return FM_OK;
}

const fm_dense_report *fm_dense_result_report(const fm_dense_result *r) { return &r->rep; }

void fm_dense_result_destroy(fm_dense_result *r) {
  if (!r) return;
  free(r->sets);
  fm_colmask_destroy(r->staging);
  free(r);
}

/* ------------------------------------------------------------------------- */
/* The row pass (shared by the scanner and interval files).                  */

/* Runs of masked columns along one row m (Sk,) 0/1 flags, m[-1] readable and 0.
 * Feeds the builder (runs, empty row, diagonal) and returns the masked count. */
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
  bd->cur.empty_rows += masked == sk;
  int64_t d = i + sk - bd->rep.sq; /* the diagonal key, bottom-right aligned */
  if (d >= 0 && d < sk) bd->cur.masked_diagonal += m[d];
  return masked;
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
  uint64_t *hash;          /* (Sk,) hash of all transition rows; only when heads > 1 */
  int32_t *ref_nt;         /* (Sk,) head 0 of the current batch, when heads > 1 */
  int32_t *ref_tr;         /* (Sk, NTRANS) */
  uint64_t *ref_hash;      /* (Sk,) */
};

void fm_dense_scan_destroy(fm_dense_scan *s) {
  if (!s) return;
  builder_free(&s->bd);
  free(s->buf[0]);
  free(s->buf[1]);
  free(s->nt);
  free(s->tr);
  free(s->hash);
  free(s->ref_nt);
  free(s->ref_tr);
  free(s->ref_hash);
  free(s);
}

fm_status fm_dense_scan_create(int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                               const fm_dense_opts *o, fm_dense_scan **out, fm_err *err) {
  *out = NULL;
  fm_dense_scan *s = calloc(1, sizeof *s);
  if (!s) return fm_fail(err, FM_ENOMEM, "out of memory");
  fm_status st = builder_init(&s->bd, batch, heads, sq, sk, o && o->keep_intervals, err);
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
  size_t n = (size_t)sk;
  s->buf[0] = calloc(n + 16, 1);
  s->buf[1] = calloc(n + 16, 1);
  s->nt = malloc(n * sizeof *s->nt);
  s->tr = malloc(n * NTRANS * sizeof *s->tr);
  int ok = s->buf[0] && s->buf[1] && s->nt && s->tr;
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
  s->cur = s->buf[0] + 8;
  s->prev = s->buf[1] + 8;
  *out = s;
  return FM_OK;
}

static void scan_begin_set(fm_dense_scan *s, int64_t set) {
  memset(s->prev, 0, (size_t)s->sk);
  memset(s->nt, 0, (size_t)s->sk * sizeof *s->nt);
  if (s->hash) memset(s->hash, 0, (size_t)s->sk * sizeof *s->hash);
  b_begin_set(&s->bd, (int32_t)(set / s->heads), (int32_t)(set % s->heads));
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
    if (hash) {
      uint64_t *h = hash + j0;
      for (int64_t k = 0; k < len; k++) {
        uint64_t sel = (uint64_t)0 - (uint64_t)(c[k] ^ p[k]);
        h[k] = (h[k] & ~sel) | ((rotl64(h[k], 23) + key) & sel);
      }
    }
  }
}

static void scan_end_set(fm_dense_scan *s) {
  builder *bd = &s->bd;
  const int64_t sk = s->sk;
  const int32_t sq = (int32_t)s->sq;
  for (int64_t j = 0; j < sk; j++) {
    int32_t t = s->nt[j], n = (t + 1) / 2;
    int32_t runs[3][2] = {{0, 0}, {0, 0}, {0, 0}};
    const int32_t *r = s->tr + j * NTRANS;
    for (int k = 0; k < n && k < 3; k++) {
      runs[k][0] = r[2 * k];
      runs[k][1] = 2 * k + 1 < t ? r[2 * k + 1] : sq;
    }
    b_column(bd, (int32_t)j, n, (const int32_t(*)[2])runs);
  }
  int same = 1;
  if (s->heads > 1) {
    if (bd->cur.head == 0) {
      memcpy(s->ref_nt, s->nt, (size_t)sk * sizeof *s->nt);
      memcpy(s->ref_tr, s->tr, (size_t)sk * NTRANS * sizeof *s->tr);
      memcpy(s->ref_hash, s->hash, (size_t)sk * sizeof *s->hash);
    } else {
      /* exact for columns of up to three runs (every transition kept), by a
       * 64-bit hash of the transition rows beyond that */
      for (int64_t j = 0; j < sk && same; j++) {
        int32_t t = s->nt[j];
        if (t != s->ref_nt[j] || s->hash[j] != s->ref_hash[j]) same = 0;
        for (int k = 0; k < t && k < NTRANS && same; k++)
          if (s->tr[j * NTRANS + k] != s->ref_tr[j * NTRANS + k]) same = 0;
      }
    }
  }
  b_end_set(bd, same);
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
  for (int64_t j = 0; j < s->sk; j++) s->cur[j] = masked[j] != 0;
  scan_commit(s);
}

static fm_status scan_finish_sized(fm_dense_scan *s, int64_t element_size, fm_dense_result **out,
                                   fm_err *err) {
  *out = NULL;
  fm_status st = FM_OK;
  if (s->row != s->rows_total)
    st = fm_fail(err, FM_EINVAL, "the scan got %lld rows, expected B*H*Sq = %lld",
                 (long long)s->row, (long long)s->rows_total);
  if (st == FM_OK) {
    b_finish(&s->bd, element_size);
    st = b_result(&s->bd, out, err);
  }
  fm_dense_scan_destroy(s);
  return st;
}

fm_status fm_dense_scan_finish(fm_dense_scan *s, fm_dense_result **out, fm_err *err) {
  return scan_finish_sized(s, 1, out, err);
}

/* ------------------------------------------------------------------------- */
/* Dense files.                                                               */

/* Stored row -> flags (1 = masked). Each returns the values an additive mask
 * reads as attend although they are not 0 (soft biases, +inf, NaN). */
static int64_t flags_u8(const uint8_t *p, int64_t n, uint8_t flip, uint8_t *out) {
  for (int64_t j = 0; j < n; j++) out[j] = (uint8_t)((p[j] != 0) ^ flip);
  return 0;
}

static int64_t flags_i32(const int32_t *p, int64_t n, uint8_t flip, uint8_t *out,
                         uint32_t *nonbinary) {
  uint32_t nb = 0;
  for (int64_t j = 0; j < n; j++) {
    out[j] = (uint8_t)((p[j] != 0) ^ flip);
    nb |= (uint32_t)p[j] & ~1u;
  }
  *nonbinary |= nb;
  return 0;
}

static int64_t flags_f32(const float *p, int64_t n, uint8_t *out) {
  const float thr = (float)FM_DENSE_ADDITIVE_MASKED;
  int64_t soft = 0;
  for (int64_t j = 0; j < n; j++) {
    int m = p[j] <= thr; /* false for NaN */
    out[j] = (uint8_t)m;
    soft += (p[j] != 0.0f) & !m;
  }
  return soft;
}

/* float16 / bfloat16 by their bits: masked when the sign is set and
 * thr <= |v| <= inf (NaN magnitudes lie above inf). */
static int64_t flags_u16(const uint16_t *p, int64_t n, uint16_t thr, uint16_t inf, uint8_t *out) {
  int64_t soft = 0;
  for (int64_t j = 0; j < n; j++) {
    uint16_t b = p[j], mag = b & 0x7fff;
    int m = (b >> 15) & (mag >= thr) & (mag <= inf);
    out[j] = (uint8_t)m;
    soft += (mag != 0) & !m;
  }
  return soft;
}
/* -10000 as float16 is exact (0x70E2); as bfloat16 it rounds to -9984 (0x461C). */
#define F16_MASKED_MAG 0x70E2
#define F16_INF_MAG 0x7C00
#define BF16_MASKED_MAG 0x461C
#define BF16_INF_MAG 0x7F80

static int host_little_endian(void) {
  uint16_t x = 1;
  uint8_t b;
  memcpy(&b, &x, 1);
  return b == 1;
}

static int is_additive(fm_dtype t) { return t == FM_DT_F32 || t == FM_DT_F16 || t == FM_DT_U16; }

static int interval_shaped(const fm_npy_header *h) {
  return h->ndim == 4 && (h->shape[3] == 1 || h->shape[3] == 2 || h->shape[3] == 4) &&
         h->shape[2] > h->shape[3];
}

/* Checks a header as a dense mask; dims = B, H, Sq, Sk. */
static fm_status dense_header(const char *path, const fm_npy_header *h, int masked_true,
                              int64_t dims[4], fm_err *err) {
  char shp[200];
  shape_text(shp, sizeof shp, h->ndim, h->shape);
  if (h->dtype == FM_DT_I64) {
    if (interval_shaped(h))
      return fm_fail(err, FM_EFORMAT,
                     "%s: int64 %s looks like an interval file (Paddle [B, H_mask, Sk, k] row "
                     "indices), not a dense mask: use fmsim check --intervals",
                     path, shp);
    return fm_fail(err, FM_EUNSUPPORTED,
                   "%s: int64 is not a dense mask dtype (expected bool, uint8, int8, int32, "
                   "float32, float16, or bfloat16 stored as uint16)",
                   path);
  }
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
  if (masked_true && is_additive(h->dtype))
    return fm_fail(err, FM_EINVAL,
                   "%s: the masked-true convention is for bool and integer masks; a %s mask is "
                   "additive (0 = attend, -inf or <= -10000 = masked)",
                   path, fm_dense_dtype_name(h->dtype));
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

fm_status fm_dense_check_file(const char *path, const fm_dense_opts *o, fm_dense_result **out,
                              fm_err *err) {
  *out = NULL;
  fm_dense_opts opts = {.masked_true = 0, .keep_intervals = 0};
  if (o) opts = *o;
  FILE *f = fopen(path, "rb");
  if (!f) return fm_fail(err, FM_EIO, "%s: cannot open: %s", path, strerror(errno));
  fm_npy_header h;
  int64_t dims[4] = {0, 0, 0, 0};
  fm_status st = fm_npy_read_header(f, path, &h, err);
  if (st == FM_OK) st = dense_header(path, &h, opts.masked_true, dims, err);
  if (st != FM_OK) {
    fclose(f);
    return st;
  }
  const int64_t esize = fm_dtype_size(h.dtype), sk = dims[3];
  const int64_t row_bytes = sk * esize, rows = dims[0] * dims[1] * dims[2];
  int64_t per = READ_CHUNK / row_bytes; /* rows per read */
  if (per < 1) per = 1;
  if (per > rows) per = rows;
  uint8_t *chunk = malloc((size_t)(per * row_bytes)); /* (per, Sk) elements as stored */
  fm_dense_scan *s = NULL;
  if (!chunk) st = fm_fail(err, FM_ENOMEM, "%s: cannot allocate a read buffer", path);
  if (st == FM_OK) st = fm_dense_scan_create(dims[0], dims[1], dims[2], dims[3], &opts, &s, err);
  if (st != FM_OK) {
    free(chunk);
    fclose(f);
    return st;
  }
  fm_dense_report *rep = &s->bd.rep;
  rep->dtype = h.dtype;
  rep->ndim = h.ndim;
  rep->additive = is_additive(h.dtype);
  const int fd = fileno(f);
#ifdef POSIX_FADV_SEQUENTIAL
  posix_fadvise(fd, (off_t)h.data_offset, 0, POSIX_FADV_SEQUENTIAL);
#endif
  const uint8_t flip = opts.masked_true ? 0 : 1; /* default: non-zero = attend */
  uint32_t nonbinary = 0;
  int64_t soft = 0, off = h.data_offset;
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
      const uint8_t *row = chunk + q * row_bytes;
      switch (h.dtype) {
      case FM_DT_I32: flags_i32((const int32_t *)(const void *)row, sk, flip, s->cur, &nonbinary); break;
      case FM_DT_F32: soft += flags_f32((const float *)(const void *)row, sk, s->cur); break;
      case FM_DT_F16:
        soft += flags_u16((const uint16_t *)(const void *)row, sk, F16_MASKED_MAG, F16_INF_MAG, s->cur);
        break;
      case FM_DT_U16:
        soft += flags_u16((const uint16_t *)(const void *)row, sk, BF16_MASKED_MAG, BF16_INF_MAG, s->cur);
        break;
      default: flags_u8(row, sk, flip, s->cur); break;
      }
      scan_commit(s);
    }
    r += nr;
  }
  free(chunk);
  fclose(f);
  if (st == FM_OK && h.dtype == FM_DT_I32 && nonbinary && interval_shaped(&h)) {
    char shp[200];
    shape_text(shp, sizeof shp, h.ndim, h.shape);
    st = fm_fail(err, FM_EFORMAT,
                 "%s: int32 %s with values other than 0 and 1 looks like an interval file "
                 "(Paddle [B, H_mask, Sk, k] row indices), not a dense mask: use fmsim check "
                 "--intervals",
                 path, shp);
  }
  if (st != FM_OK) {
    fm_dense_scan_destroy(s);
    return st;
  }
  rep->soft_values = soft;
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

fm_status fm_dense_check_colmask(const fm_colmask *m, int64_t max_row_elements,
                                 fm_dense_result **out, fm_err *err) {
  *out = NULL;
  const int64_t nb = fm_colmask_nb(m), nh = fm_colmask_nh(m);
  const int64_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  builder bd;
  fm_status st = builder_init(&bd, nb, nh, sq, sk, 0, err);
  if (st != FM_OK) return st;
  bd.rep.dtype = FM_DT_I32;
  /* rows only when small: every set is expanded, O(Sq*Sk) each */
  int rows = (double)nb * (double)nh * (double)sq * (double)sk <= (double)max_row_elements;
  uint8_t *buf = NULL;     /* (8 + Sk + 8): one expanded row at +8, 0 before it */
  int32_t *climit = NULL;  /* (Sk,) */
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
        int32_t runs[3][2];
        int n = fm_colmask_column_runs(m, set, j, runs);
        for (int k = 0; k < n; k++) masked += runs[k][1] - runs[k][0];
        b_column(&bd, j, n, (const int32_t(*)[2])runs);
      }
      if (rows) {
        for (int32_t i = 0; i < sq; i++) {
          expand_row(m, set, climit, i, sk, buf + 8);
          row_runs(&bd, buf + 8, sk, i);
        }
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

fm_status fm_dense_result_to_colmask(const fm_dense_result *r, fm_form f, fm_colmask **out,
                                     fm_err *err) {
  *out = NULL;
  const fm_dense_report *rep = &r->rep;
  if (!r->staging)
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
  const int64_t nh_out = rep->shared_across_heads ? 1 : rep->heads;
  fm_colmask *m = NULL;
  fm_status st = fm_colmask_create(sq, sk, rep->batch, nh_out, fm_form_causal(f), &m, err);
  if (st != FM_OK) return st;
  for (int32_t b = 0; b < rep->batch; b++)
    for (int32_t h = 0; h < nh_out; h++) {
      int32_t src = b * (int32_t)rep->heads + h, dst = b * (int32_t)nh_out + h;
      int32_t *v[4];
      for (int k = 0; k < 4; k++) v[k] = fm_colmask_vec(m, dst, (fm_vec)k);
      for (int32_t j = 0; j < sk; j++) {
        int32_t runs[3][2], iv[4];
        int n = fm_colmask_column_runs(r->staging, src, j, runs);
        fm_runs_to_intervals((const int32_t(*)[2])runs, n, fm_causal_limit(j, sq, sk), sq, f,
                             fm_form_causal(f), iv);
        for (int k = 0; k < 4; k++) v[k][j] = iv[k];
      }
    }
  *out = m;
  return FM_OK;
}

/* ------------------------------------------------------------------------- */
/* Expansion.                                                                  */

static int expand_dtype_ok(fm_dtype t) {
  return t == FM_DT_BOOL || t == FM_DT_U8 || t == FM_DT_I8 || t == FM_DT_I32 || t == FM_DT_F32 ||
         t == FM_DT_F16 || t == FM_DT_U16;
}

/* flags (Sk,) -> stored values (Sk,) of dtype t. */
static void flags_to_values(const uint8_t *fl, int64_t n, fm_dtype t, uint8_t flip, void *out) {
  switch (t) {
  case FM_DT_I32:
    for (int64_t j = 0; j < n; j++) ((int32_t *)out)[j] = fl[j] ^ flip;
    break;
  case FM_DT_F32:
    for (int64_t j = 0; j < n; j++) ((float *)out)[j] = fl[j] ? -INFINITY : 0.0f;
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
                   "int8, int32, float32, float16 or bfloat16)", path, fm_dense_dtype_name(opt.dtype));
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
  uint8_t *fl = malloc((size_t)sk);                /* (Sk,) flags */
  void *vals = malloc((size_t)(sk * esize));       /* (Sk,) values as stored */
  int32_t *climit = causal_limits(m);              /* (Sk,) */
  fm_npy_writer *w = NULL;
  fm_status st = FM_OK;
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
                   {FM_DT_U16, "bfloat16"}, {FM_DT_I64, "int64"}};
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
  return fm_fail(err, FM_EINVAL, "unknown dtype '%s' (expected bool, uint8, int8, int32, float32, "
                 "float16 or bfloat16)", name);
}
