/* fm_dense_file.c — dense .npy files for the dense-mask module (fm_dense_impl.h):
 * stored values to flags, fm_dense_check_file, dtype names and kinds. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fm_dense_impl.h"
#include "fm_input.h"
#include "fm_intervals_io.h"
#include "fm_limits.h"

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
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
  fm_status st = fm_dense_check_dims(dims[0], dims[1], dims[2], dims[3], err);
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
      fm_dense_scan_commit(s);
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
  return fm_dense_scan_finish_sized(s, esize, out, err);
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
    if (strcmp(name, dense_names[i].name) == 0 && fm_dense_dtype_ok(dense_names[i].t)) {
      *out = dense_names[i].t;
      return FM_OK;
    }
  return fm_fail(err, FM_EINVAL, "unknown dtype '%s' (expected bool, uint8, int8, int32, int64, "
                 "uint64, float32, float64, float16 or bfloat16)", name);
}
