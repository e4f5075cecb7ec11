/* fm_dense_expand.c — interval masks as dense rows (fm_dense.h): the check of an
 * interval mask through the report builder (fm_dense_check_colmask) and the
 * dense expansion to an .npy file (fm_dense_expand). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fm_dense_impl.h"
#include "fm_fileio.h"
#include "fm_limits.h"
#include "fm_tiles.h"

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
  fm_status st = fm_dense_builder_tiles(bd, &grid, err);
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
    fm_dense_row_runs(bd, buf + 8, sk, i);
  }
}

fm_status fm_dense_check_colmask(const fm_colmask *m, int64_t max_row_elements,
                                 const fm_dense_opts *o, fm_dense_result **out, fm_err *err) {
  *out = NULL;
  const int64_t nb = fm_colmask_nb(m), nh = fm_colmask_nh(m);
  const int64_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  builder bd;
  fm_dense_opts keep = {.keep_intervals = o ? o->keep_intervals : 0};
  fm_status st = fm_dense_builder_init(&bd, nb, nh, sq, sk, &keep, err);
  if (st == FM_OK) st = colmask_tiles(&bd, m, o, err);
  if (st != FM_OK) {
    fm_dense_builder_free(&bd);
    return st;
  }
  bd.rep.dtype = FM_DT_I32;
  /* rows only when small: every set is expanded, O(Sq*Sk) each */
  int rows = (double)nb * (double)nh * (double)sq * (double)sk <= (double)max_row_elements;
  uint8_t *buf = NULL;     /* (8 + Sk + 8): one expanded row at +8, 0 before it */
  int32_t *climit = NULL;  /* (Sk,) */
  if (rows && (st = fm_mem_check(fm_mem_mul(sk, 5), "a row of the expanded mask", err)) != FM_OK) {
    fm_dense_builder_free(&bd);
    return st;
  }
  if (rows) {
    buf = calloc((size_t)sk + 16, 1);
    climit = causal_limits(m);
    if (!buf || !climit) {
      free(buf);
      free(climit);
      fm_dense_builder_free(&bd);
      return fm_fail(err, FM_ENOMEM, "cannot allocate a row of Sk = %lld", (long long)sk);
    }
  }
  for (int32_t b = 0; b < nb; b++)
    for (int32_t h = 0; h < nh; h++) {
      int32_t set = b * (int32_t)nh + h;
      int64_t masked = 0;
      fm_dense_b_begin_set(&bd, b, h);
      for (int32_t j = 0; j < sk; j++) {
        int32_t runs[3][2], best[2][2];
        int n = fm_colmask_column_runs(m, set, j, runs);
        for (int k = 0; k < n; k++) masked += runs[k][1] - runs[k][0];
        fm_dense_best_of_runs((const int32_t(*)[2])runs, n, best);
        fm_dense_b_column(&bd, j, n, (const int32_t(*)[2])runs, (const int32_t(*)[2])best);
      }
      if (rows) {
        colmask_rows(&bd, m, set, climit, buf);
      } else { /* the diagonal from the columns; empty rows stay unknown */
        for (int64_t i = sq > sk ? sq - sk : 0; i < sq; i++)
          bd.cur.masked_diagonal += fm_colmask_masked(m, set, (int32_t)i, (int32_t)(i + sk - sq));
      }
      bd.cur.masked = masked;
      fm_dense_b_end_set(&bd, h == 0 || sets_equal(m, set, b * (int32_t)nh));
    }
  free(buf);
  free(climit);
  bd.rep.rows_known = rows;
  fm_dense_b_finish(&bd, 1);
  return fm_dense_b_result(&bd, out, err);
}

/* ------------------------------------------------------------------------- */
/* Expansion.                                                                  */

/* the dtypes written additively */
static int is_additive(fm_dtype t) { return fm_dense_dtype_is_float(t); }

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
  if (!fm_dense_dtype_ok(opt.dtype))
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
