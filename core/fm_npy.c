#define _POSIX_C_SOURCE 200809L
#include "fm_npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fm_fileio.h"
#include "fm_input.h"
#include "fm_limits.h"

static const struct {
  const char *descr;
  int size;
} dtypes[FM_DT_COUNT] = {
    [FM_DT_BOOL] = {"|b1", 1}, [FM_DT_U8] = {"|u1", 1},  [FM_DT_I8] = {"|i1", 1},
    [FM_DT_U16] = {"<u2", 2},  [FM_DT_F16] = {"<f2", 2}, [FM_DT_I32] = {"<i4", 4},
    [FM_DT_F32] = {"<f4", 4},  [FM_DT_I64] = {"<i8", 8},  [FM_DT_U64] = {"<u8", 8},
    [FM_DT_F64] = {"<f8", 8},
};

const char *fm_dtype_descr(fm_dtype t) { return dtypes[t].descr; }
int fm_dtype_size(fm_dtype t) { return dtypes[t].size; }

/* --- header dict parsing: {'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), } --- */

typedef struct {
  const char *p, *end, *path;
  fm_err *err;
} cursor;

static void skip_ws(cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static int expect(cursor *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

static int parse_string(cursor *c, char *buf, size_t cap) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
  char q = *c->p++;
  size_t n = 0;
  while (c->p < c->end && *c->p != q) {
    if (n + 1 >= cap) return 0;
    buf[n++] = *c->p++;
  }
  if (c->p >= c->end) return 0;
  c->p++;
  buf[n] = 0;
  return 1;
}

static fm_status parse_dict(cursor *c, fm_npy_header *h) {
  int have_descr = 0, have_order = 0, have_shape = 0;
  if (!expect(c, '{'))
    return fm_fail(c->err, FM_EFORMAT, "%s: .npy header is not a dict", c->path);
  for (;;) {
    skip_ws(c);
    if (expect(c, '}')) break;
    char key[32];
    if (!parse_string(c, key, sizeof key) || !expect(c, ':'))
      return fm_fail(c->err, FM_EFORMAT, "%s: malformed .npy header dict", c->path);
    if (strcmp(key, "descr") == 0 && !have_descr) {
      char d[32];
      if (!parse_string(c, d, sizeof d))
        return fm_fail(c->err, FM_EFORMAT, "%s: .npy 'descr' is not a string", c->path);
      int found = -1;
      for (int t = 0; t < FM_DT_COUNT; t++)
        if (strcmp(d, dtypes[t].descr) == 0) found = t;
      if (found < 0 && d[0] == '>')
        return fm_fail(c->err, FM_EUNSUPPORTED,
                       "%s: big-endian dtype '%s' is not supported (expected little-endian)",
                       c->path, d);
      if (found < 0)
        return fm_fail(c->err, FM_EUNSUPPORTED,
                       "%s: unsupported dtype '%s' (expected one of |b1 |u1 |i1 <u2 <f2 <i4 <f4 <i8)",
                       c->path, d);
      h->dtype = (fm_dtype)found;
      have_descr = 1;
    } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
      skip_ws(c);
      if (c->end - c->p >= 5 && strncmp(c->p, "False", 5) == 0) {
        c->p += 5;
      } else if (c->end - c->p >= 4 && strncmp(c->p, "True", 4) == 0) {
        return fm_fail(c->err, FM_EUNSUPPORTED,
                       "%s: Fortran-order arrays are not supported (save with C order)", c->path);
      } else {
        return fm_fail(c->err, FM_EFORMAT, "%s: .npy 'fortran_order' is not a bool", c->path);
      }
      have_order = 1;
    } else if (strcmp(key, "shape") == 0 && !have_shape) {
      if (!expect(c, '('))
        return fm_fail(c->err, FM_EFORMAT, "%s: .npy 'shape' is not a tuple", c->path);
      h->ndim = 0;
      for (;;) {
        skip_ws(c);
        if (expect(c, ')')) break;
        if (c->p >= c->end || !isdigit((unsigned char)*c->p))
          return fm_fail(c->err, FM_EFORMAT, "%s: malformed .npy shape", c->path);
        if (h->ndim == FM_NPY_MAX_DIMS)
          return fm_fail(c->err, FM_EUNSUPPORTED, "%s: more than %d dimensions", c->path,
                         FM_NPY_MAX_DIMS);
        int64_t v = 0;
        while (c->p < c->end && isdigit((unsigned char)*c->p)) {
          v = v * 10 + (*c->p++ - '0');
          if (v > ((int64_t)1 << 48))
            return fm_fail(c->err, FM_EFORMAT, "%s: .npy dimension too large", c->path);
        }
        h->shape[h->ndim++] = v;
        if (!expect(c, ',')) {
          if (!expect(c, ')'))
            return fm_fail(c->err, FM_EFORMAT, "%s: malformed .npy shape", c->path);
          break;
        }
      }
      have_shape = 1;
    } else {
      return fm_fail(c->err, FM_EFORMAT, "%s: unexpected or repeated key '%s' in .npy header",
                     c->path, key);
    }
    if (!expect(c, ',')) {
      if (!expect(c, '}'))
        return fm_fail(c->err, FM_EFORMAT, "%s: malformed .npy header dict", c->path);
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    return fm_fail(c->err, FM_EFORMAT, "%s: .npy header lacks '%s'", c->path,
                   !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
  skip_ws(c);
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\n')) c->p++;
  if (c->p != c->end)
    return fm_fail(c->err, FM_EFORMAT, "%s: trailing bytes after the .npy header dict", c->path);
  return FM_OK;
}

fm_status fm_npy_read_header(FILE *f, const char *path, fm_npy_header *h, fm_err *err) {
  unsigned char pre[12];
  memset(h, 0, sizeof *h);
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode))
    return fm_fail(err, FM_EFORMAT, "%s: is a directory, not a .npy file", path);
  if (fseeko(f, 0, SEEK_SET) != 0 || fread(pre, 1, 10, f) != 10)
    return fm_fail(err, FM_EFORMAT, "%s: too short to be a .npy file", path);
  if (memcmp(pre, "\x93NUMPY", 6) != 0)
    return fm_fail(err, FM_EFORMAT, "%s: not a .npy file (bad magic)", path);
  int major = pre[6];
  uint32_t hlen;
  int64_t prelen;
  if (major == 1) {
    hlen = pre[8] | (uint32_t)pre[9] << 8;
    prelen = 10;
  } else if (major == 2 || major == 3) {
    if (fread(pre + 10, 1, 2, f) != 2)
      return fm_fail(err, FM_EFORMAT, "%s: truncated .npy preamble", path);
    hlen = pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    prelen = 12;
  } else {
    return fm_fail(err, FM_EUNSUPPORTED, "%s: .npy format version %d.%d is not supported", path,
                   major, pre[7]);
  }
  if (hlen == 0 || hlen > (1u << 20))
    return fm_fail(err, FM_EFORMAT, "%s: implausible .npy header length %u", path, hlen);
  if (fstat(fileno(f), &sb) != 0) return fm_fail(err, FM_EIO, "%s: %s", path, strerror(errno));
  if (S_ISREG(sb.st_mode) && (int64_t)sb.st_size < prelen + (int64_t)hlen)
    return fm_fail(err, FM_EFORMAT, "%s: .npy header length %u exceeds the file (%lld bytes)", path,
                   hlen, (long long)sb.st_size);
  char *text = malloc(hlen);
  if (!text) return fm_fail(err, FM_ENOMEM, "%s: cannot allocate the .npy header", path);
  if (fread(text, 1, hlen, f) != hlen) {
    free(text);
    return fm_fail(err, FM_EFORMAT, "%s: truncated .npy header", path);
  }
  cursor c = {text, text + hlen, path, err};
  fm_status st = parse_dict(&c, h);
  free(text);
  if (st != FM_OK) return st;
  h->data_offset = prelen + hlen;
  h->count = 1;
  for (int d = 0; d < h->ndim; d++) {
    if (h->shape[d] != 0 && h->count > INT64_MAX / 16 / h->shape[d])
      return fm_fail(err, FM_EFORMAT, "%s: .npy shape is too large", path);
    h->count *= h->shape[d];
  }
  int64_t need = h->data_offset + h->count * dtypes[h->dtype].size;
  if ((int64_t)sb.st_size < need)
    return fm_fail(err, FM_EFORMAT, "%s: truncated .npy data (%lld bytes, header promises %lld)",
                   path, (long long)sb.st_size, (long long)need);
  if (fseeko(f, h->data_offset, SEEK_SET) != 0)
    return fm_fail(err, FM_EIO, "%s: cannot seek to the data", path);
  return FM_OK;
}

fm_status fm_npy_read_header_path(const char *path, fm_npy_header *h, fm_err *err) {
  FILE *f;
  fm_status ost = fm_input_open(path, &f, err);
  if (ost != FM_OK) return ost;
  fm_status st = fm_npy_read_header(f, path, h, err);
  fclose(f);
  return st;
}

fm_status fm_npy_load(const char *path, fm_npy_header *h, void **data, int64_t max_bytes,
                      fm_err *err) {
  *data = NULL;
  FILE *f;
  fm_status ost = fm_input_open(path, &f, err);
  if (ost != FM_OK) return ost;
  fm_status st = fm_npy_read_header(f, path, h, err);
  int64_t bytes = st == FM_OK ? h->count * dtypes[h->dtype].size : 0;
  char what[4200];
  snprintf(what, sizeof what, "%s: the array's data", path);
  if (st == FM_OK && bytes > max_bytes)
    st = fm_fail(err, FM_ENOMEM, "%s: %lld bytes of data exceed the limit of %lld bytes", path,
                 (long long)bytes, (long long)max_bytes);
  if (st == FM_OK) st = fm_mem_check(bytes, what, err);
  if (st == FM_OK && !(*data = malloc(bytes ? (size_t)bytes : 1)))
    st = fm_fail(err, FM_ENOMEM, "%s: cannot allocate %lld bytes", path, (long long)bytes);
  if (st == FM_OK && fread(*data, 1, (size_t)bytes, f) != (size_t)bytes) {
    free(*data);
    *data = NULL;
    st = fm_fail(err, FM_EIO, "%s: read error", path);
  }
  fclose(f);
  return st;
}

/* --- writing --- */

struct fm_npy_writer {
  fm_atomic_file file;
  fm_dtype dtype;
  int64_t remaining; /* elements still expected */
  int failed;
};

static int format_header(char *buf, size_t cap, fm_dtype t, int ndim, const int64_t *shape) {
  char shp[256];
  size_t n = 0;
  shp[0] = 0;
  for (int d = 0; d < ndim; d++)
    n += (size_t)snprintf(shp + n, sizeof shp - n, "%lld%s", (long long)shape[d],
                          (ndim == 1 || d + 1 < ndim) ? ", " : "");
  if (ndim == 1) shp[n - 1] = 0; /* "(5,)" */
  char dict[400];
  int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     dtypes[t].descr, shp);
  int total = 10 + len + 1;
  int pad = (64 - total % 64) % 64;
  int hlen = len + pad + 1;
  if ((size_t)(10 + hlen) > cap) return -1;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  memcpy(buf + 10, dict, (size_t)len);
  memset(buf + 10 + len, ' ', (size_t)pad);
  buf[10 + len + pad] = '\n';
  return 10 + hlen;
}

fm_status fm_npy_writer_open(const char *path, fm_dtype t, int ndim, const int64_t *shape,
                             fm_npy_writer **out, fm_err *err) {
  *out = NULL;
  if (ndim < 1 || ndim > FM_NPY_MAX_DIMS)
    return fm_fail(err, FM_EINVAL, "%s: cannot write a %d-dimensional array", path, ndim);
  fm_npy_writer *w = calloc(1, sizeof *w);
  if (!w) return fm_fail(err, FM_ENOMEM, "out of memory");
  char hdr[512];
  int n = format_header(hdr, sizeof hdr, t, ndim, shape);
  fm_status st = fm_atomic_open_ex(&w->file, path, FM_OUT_STDOUT, err);
  if (st == FM_OK && n < 0) st = fm_fail(err, FM_EINVAL, "%s: shape too long for a header", path);
  if (st == FM_OK) st = fm_atomic_write(&w->file, hdr, (size_t)n, err);
  if (st != FM_OK) {
    fm_atomic_close(&w->file, 0, NULL);
    free(w);
    return st;
  }
  w->dtype = t;
  w->remaining = 1;
  for (int d = 0; d < ndim; d++) w->remaining *= shape[d];
  *out = w;
  return FM_OK;
}

fm_status fm_npy_writer_write(fm_npy_writer *w, const void *data, int64_t count, fm_err *err) {
  if (w->failed) return fm_fail(err, FM_EIO, "%s: earlier write failed", w->file.path);
  if (count > w->remaining) {
    w->failed = 1;
    return fm_fail(err, FM_EINVAL, "%s: more elements than the shape holds", w->file.path);
  }
  fm_status st = fm_atomic_write(&w->file, data, (size_t)(count * dtypes[w->dtype].size), err);
  if (st != FM_OK) w->failed = 1;
  w->remaining -= count;
  return st;
}

fm_status fm_npy_writer_close(fm_npy_writer *w, int commit, fm_err *err) {
  if (!w) return FM_OK;
  fm_status st = FM_OK;
  if (commit && !w->failed && w->remaining != 0)
    st = fm_fail(err, FM_EINVAL, "%s: %lld elements missing", w->file.path,
                 (long long)w->remaining);
  fm_status cs = fm_atomic_close(&w->file, commit && !w->failed && st == FM_OK, err);
  if (st == FM_OK) st = cs;
  if (st == FM_OK && w->failed) st = FM_EIO;
  free(w);
  return st;
}

fm_status fm_npy_save(const char *path, fm_dtype t, int ndim, const int64_t *shape,
                      const void *data, fm_err *err) {
  fm_npy_writer *w;
  fm_status st = fm_npy_writer_open(path, t, ndim, shape, &w, err);
  if (st != FM_OK) return st;
  st = fm_npy_writer_write(w, data, w->remaining, err);
  fm_status cs = fm_npy_writer_close(w, st == FM_OK, st == FM_OK ? err : NULL);
  return st != FM_OK ? st : cs;
}
