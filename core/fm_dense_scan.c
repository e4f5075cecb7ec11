/* fm_dense_scan.c — the row scan of the dense-mask module (fm_dense_impl.h): the row
 * pass, every run of every column (keep_all_runs) and the streaming scanner
 * (fm_dense_scan_*, fm_dense.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "fm_dense_impl.h"
#include "fm_limits.h"

/* ------------------------------------------------------------------------- */
/* The row pass (shared by the scanner and interval files).                  */

/* Runs of masked columns along one row m (Sk,) 0/1 flags, m[-1] readable and 0.
 * Feeds the builder (runs, empty row, diagonal, tiles) and returns the masked count. */
int64_t fm_dense_row_runs(builder *bd, const uint8_t *m, int64_t sk, int32_t i) {
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
  fm_dense_b_row(bd, i, starts > INT32_MAX ? INT32_MAX : (int32_t)starts, (const int32_t(*)[2])runs);
  fm_dense_b_tile_row(bd, i, m);
  bd->cur.empty_rows += masked == sk;
  int64_t d = i + sk - bd->rep.sq; /* the diagonal key, bottom-right aligned */
  if (d >= 0 && d < sk) bd->cur.masked_diagonal += m[d];
  return masked;
}

/* ------------------------------------------------------------------------- */
/* Every run of every column (keep_all_runs).                                 */


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

void fm_dense_scan_destroy(fm_dense_scan *s) {
  if (!s) return;
  fm_dense_builder_free(&s->bd);
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
  fm_status st = fm_dense_builder_init(&s->bd, batch, heads, sq, sk, o, err);
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
  fm_dense_b_begin_set(&s->bd, (int32_t)(set / s->heads), (int32_t)(set % s->heads));
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
    fm_dense_b_column(bd, (int32_t)j, n, (const int32_t(*)[2])runs, (const int32_t(*)[2])best);
  }
  fm_dense_b_end_set(bd, scan_same_as_head0(s));
  if (s->all.on) run_commit_set(&s->all, bd->set);
}

/* Processes s->cur as the next row. */
void fm_dense_scan_commit(fm_dense_scan *s) {
  if (s->row >= s->rows_total) {
    s->row++; /* too many rows: reported by finish */
    return;
  }
  int64_t set = s->row / s->sq;
  int32_t i = (int32_t)(s->row % s->sq);
  if (i == 0) scan_begin_set(s, set);
  scan_columns(s, i);
  s->bd.cur.masked += fm_dense_row_runs(&s->bd, s->cur, s->sk, i);
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
    fm_dense_scan_commit(s);
  }
}

fm_status fm_dense_scan_finish_sized(fm_dense_scan *s, int64_t element_size, fm_dense_result **out,
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
    fm_dense_b_finish(&s->bd, element_size);
    st = fm_dense_b_result(&s->bd, out, err);
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
  return fm_dense_scan_finish_sized(s, 1, out, err);
}
