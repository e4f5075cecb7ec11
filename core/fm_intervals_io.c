#include "fm_intervals_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_limits.h"

/* Which fm_vec each stored slot (last dimension, k of them) holds, per form. */
static const fm_vec slots[FM_FORM_COUNT][4] = {
    {FM_LTS}, {FM_LTS, FM_LTE}, {FM_LTS, FM_UTE}, {FM_LTS, FM_LTE, FM_UTS, FM_UTE}};

int fm_intervals_header_fits(const fm_npy_header *h) {
  int64_t k = h->ndim == 4 ? h->shape[3] : 0;
  return (h->dtype == FM_DT_I32 || h->dtype == FM_DT_I64) && (k == 1 || k == 2 || k == 4);
}

/* "int32 [1, 2, 1024, 2]" */
static void array_text(char *buf, size_t cap, const fm_npy_header *h) {
  static const char *const names[FM_DT_COUNT] = {"bool",  "uint8",   "int8",   "uint16",
                                                 "float16", "int32", "float32", "int64"};
  size_t n = (size_t)snprintf(buf, cap, "%s [", (unsigned)h->dtype < FM_DT_COUNT ? names[h->dtype] : "?");
  for (int d = 0; d < h->ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)h->shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Decides the form the file holds (and the causal flag) from its header. */
static fm_status header_form(const char *path, const fm_npy_header *h, const fm_intervals_opts *o,
                             fm_form *form, int *causal, fm_err *err) {
  char arr[200];
  array_text(arr, sizeof arr, h);
  int64_t k = h->ndim == 4 ? h->shape[3] : 0;
  *causal = o->causal ? 1 : 0;
  if (o->four_vectors) {
    *form = FM_FORM_BIDIR4; /* slots LTS, LTE, UTS, UTE; the flag stays the trace's */
    if (h->dtype != FM_DT_I32 || k != 4)
      return fm_fail(err, FM_EFORMAT, "%s: expected int32 [nb, nh, Sk, 4] interval vectors, got %s",
                     path, arr);
    return FM_OK;
  }
  if (!fm_intervals_header_fits(h)) {
    if (h->ndim >= 2 && h->ndim <= 4 && h->dtype != FM_DT_I64)
      return fm_fail(err, FM_EFORMAT,
                     "%s: %s looks like a dense mask, not an interval file (int32 [B, H_mask, "
                     "Sk, k] with k = 1, 2 or 4): use fmsim check without --intervals",
                     path, arr);
    return fm_fail(err, FM_EFORMAT,
                   "%s: %s is not an interval file (expected int32 [B, H_mask, Sk, k] with "
                   "k = 1, 2 or 4)", path, arr);
  }
  if (o->causal_from_k && k != 2) *causal = k == 1;
  if (*causal && k == 4)
    return fm_fail(err, FM_EFORMAT,
                   "%s: k = 4 vectors is the bidirectional form bidir-4, but a causal mask was "
                   "asked for (causal forms have k = 1 or 2)", path);
  if (!*causal && k == 1)
    return fm_fail(err, FM_EFORMAT,
                   "%s: k = 1 vector is the causal form causal-1, but a bidirectional mask was "
                   "asked for (bidirectional forms have k = 2 or 4)", path);
  *form = fm_form_from_k((int)k, *causal);
  return FM_OK;
}

static const char *const vec_names[4] = {"LTS", "LTE", "UTS", "UTE"};

/* Copies the stored values into m's vectors: negatives refused, values above
 * Sq refused (strict) or read as Sq (counted). */
static fm_status copy_values(const char *path, const fm_npy_header *h, const void *data, fm_form f,
                             int strict, fm_colmask *m, fm_intervals_note *note, fm_err *err) {
  int64_t sq = fm_colmask_sq(m), sk = h->shape[2], k = h->shape[3], nh = h->shape[1];
  for (int64_t s = 0; s < (int64_t)fm_colmask_nsets(m); s++)
    for (int64_t q = 0; q < k; q++) {
      int32_t *vec = fm_colmask_vec(m, (int32_t)s, slots[f][q]);
      for (int64_t j = 0; j < sk; j++) {
        int64_t idx = (s * sk + j) * k + q;
        int64_t v = h->dtype == FM_DT_I32 ? ((const int32_t *)data)[idx] : ((const int64_t *)data)[idx];
        if (v < 0 || (v > sq && strict))
          return fm_fail(err, FM_ERANGE,
                         "%s: batch %lld, head %lld, column %lld: %s = %lld is outside [0, Sq=%lld]%s",
                         path, (long long)(s / nh), (long long)(s % nh), (long long)j,
                         vec_names[slots[f][q]], (long long)v, (long long)sq,
                         v < 0 ? "" : " (read as Sq, as Paddle does, unless strict)");
        if (v > sq) note->clamped++;
        vec[j] = (int32_t)(v > sq ? sq : v);
      }
    }
  return FM_OK;
}

/* Paddle's reading of an interval whose start lies past its end: empty. */
static void empty_reversed(fm_colmask *m, fm_intervals_note *note) {
  for (int32_t s = 0; s < fm_colmask_nsets(m); s++)
    for (int lower = 0; lower < 2; lower++) {
      int32_t *a = fm_colmask_vec(m, s, lower ? FM_LTS : FM_UTS);
      int32_t *b = fm_colmask_vec(m, s, lower ? FM_LTE : FM_UTE);
      int32_t empty = lower ? fm_colmask_sq(m) : 0; /* canonical empties */
      for (int32_t j = 0; j < fm_colmask_sk(m); j++)
        if (a[j] > b[j]) {
          a[j] = b[j] = empty;
          note->emptied++;
        }
    }
}

fm_status fm_intervals_load(const char *path, const fm_intervals_opts *o, fm_colmask **out,
                            fm_intervals_note *note, fm_err *err) {
  *out = NULL;
  fm_intervals_note local;
  if (!note) note = &local;
  memset(note, 0, sizeof *note);
  if (o->sq < 0 || o->sq > FM_MAX_SEQLEN)
    return fm_fail(err, FM_EINVAL, "%s: Sq = %lld is outside 1..%d", path, (long long)o->sq,
                   FM_MAX_SEQLEN);
  fm_npy_header h;
  fm_status st = fm_npy_read_header_path(path, &h, err);
  fm_form form = FM_FORM_NONE;
  int causal = 0;
  if (st == FM_OK) st = header_form(path, &h, o, &form, &causal, err);
  void *data = NULL;
  if (st == FM_OK) st = fm_npy_load(path, &h, &data, FM_MAX_ALLOC_BYTES, err);
  if (st == FM_OK) {
    int64_t sq = o->sq ? o->sq : h.shape[2];
    st = fm_colmask_create(sq, h.shape[2], h.shape[0], h.shape[1], causal, out, err);
    if (st != FM_OK && err) {
      char msg[sizeof err->msg];
      snprintf(msg, sizeof msg, "%s", err->msg);
      fm_fail(err, st, "%s: shape [%lld, %lld, %lld, %lld]: %s", path, (long long)h.shape[0],
              (long long)h.shape[1], (long long)h.shape[2], (long long)h.shape[3], msg);
    }
  }
  if (st == FM_OK) st = copy_values(path, &h, data, form, o->strict, *out, note, err);
  free(data);
  if (st == FM_OK && !o->strict) empty_reversed(*out, note);
  if (st == FM_OK && (st = fm_colmask_validate(*out, err)) != FM_OK && err) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    fm_fail(err, st, "%s: %s", path, msg);
  }
  if (st != FM_OK) {
    fm_colmask_destroy(*out);
    *out = NULL;
    return st;
  }
  if (note->clamped || note->emptied)
    snprintf(note->text, sizeof note->text,
             "%.200s: read as Paddle does: %lld row indices above Sq=%d taken as Sq, %lld intervals "
             "with start past end taken as empty (--strict, or strict: true in a scenario, "
             "refuses them)",
             path, (long long)note->clamped, fm_colmask_sq(*out), (long long)note->emptied);
  return FM_OK;
}

fm_status fm_colmask_load_npy(const char *path, int causal, int64_t sq, fm_colmask **out,
                              fm_err *err) {
  fm_intervals_opts o = {.causal = causal, .sq = sq, .strict = 1};
  return fm_intervals_load(path, &o, out, NULL, err);
}

fm_status fm_colmask_save_npy(const fm_colmask *m, const char *path, fm_form f, fm_form *used,
                              fm_err *err) {
  if (f == FM_FORM_NONE) f = fm_colmask_smallest_form(m);
  if (f == FM_FORM_NONE)
    return fm_fail(err, FM_EUNSUPPORTED, "%s: the mask fits none of the interval forms", path);
  fm_colmask *r = NULL;
  fm_status st = fm_colmask_to_form(m, f, &r, err);
  if (st != FM_OK) return st;
  int k = fm_form_k(f);
  int64_t sk = fm_colmask_sk(r), ns = fm_colmask_nsets(r);
  st = fm_mem_check(fm_mem_mul(ns * sk * k, (int64_t)sizeof(int32_t)), "the interval file's data", err);
  if (st != FM_OK) {
    fm_colmask_destroy(r);
    return st;
  }
  int32_t *buf = malloc(sizeof(int32_t) * (size_t)(ns * sk * k));
  if (!buf) {
    fm_colmask_destroy(r);
    return fm_fail(err, FM_ENOMEM, "%s: cannot allocate the output", path);
  }
  for (int64_t s = 0; s < ns; s++)
    for (int q = 0; q < k; q++) {
      const int32_t *v = fm_colmask_cvec(r, (int32_t)s, slots[f][q]);
      for (int64_t j = 0; j < sk; j++) buf[(s * sk + j) * k + q] = v[j];
    }
  int64_t shape[4] = {fm_colmask_nb(r), fm_colmask_nh(r), sk, k};
  st = fm_npy_save(path, FM_DT_I32, 4, shape, buf, err);
  free(buf);
  fm_colmask_destroy(r);
  if (st == FM_OK && used) *used = f;
  return st;
}
