#include "fm_intervals_io.h"

#include <stdlib.h>

#include "fm_npy.h"

/* Which fm_vec each stored slot (last dimension, k of them) holds, per form. */
static const fm_vec slots[FM_FORM_COUNT][4] = {
    {FM_LTS}, {FM_LTS, FM_LTE}, {FM_LTS, FM_UTE}, {FM_LTS, FM_LTE, FM_UTS, FM_UTE}};

fm_status fm_colmask_load_npy(const char *path, int causal, int64_t sq, fm_colmask **out,
                              fm_err *err) {
  *out = NULL;
  fm_npy_header h;
  void *data = NULL;
  fm_status st = fm_npy_load(path, &h, &data, FM_MAX_ALLOC_BYTES, err);
  if (st != FM_OK) return st;
  if (h.dtype != FM_DT_I32 && h.dtype != FM_DT_I64) {
    free(data);
    return fm_fail(err, FM_EFORMAT,
                   "%s: interval files hold int32 or int64 row indices, not %s%s", path,
                   fm_dtype_descr(h.dtype),
                   h.dtype == FM_DT_BOOL || h.dtype == FM_DT_U8 ? " (a dense mask? see fmsim check)" : "");
  }
  if (h.ndim != 4) {
    free(data);
    return fm_fail(err, FM_EFORMAT, "%s: interval files have shape [B, H_mask, Sk, k], got %d dimensions",
                   path, h.ndim);
  }
  int64_t nb = h.shape[0], nh = h.shape[1], sk = h.shape[2], k = h.shape[3];
  fm_form form = fm_form_from_k((int)(k > 8 ? 0 : k), causal);
  if (form == FM_FORM_NONE) {
    free(data);
    return fm_fail(err, FM_EFORMAT, "%s: last dimension k = %lld does not name a %s form (expected %s)",
                   path, (long long)k, causal ? "causal" : "bidirectional",
                   causal ? "1 or 2" : "2 or 4");
  }
  if (sq == 0) sq = sk;
  st = fm_colmask_create(sq, sk, nb, nh, causal, out, err);
  if (st != FM_OK) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
    free(data);
    return fm_fail(err, st, "%s: shape [%lld, %lld, %lld, %lld]: %s", path, (long long)nb,
                   (long long)nh, (long long)sk, (long long)k, msg);
  }
  for (int64_t s = 0; s < nb * nh; s++)
    for (int64_t j = 0; j < sk; j++)
      for (int64_t q = 0; q < k; q++) {
        int64_t idx = (s * sk + j) * k + q;
        int64_t v = h.dtype == FM_DT_I32 ? ((int32_t *)data)[idx] : ((int64_t *)data)[idx];
        if (v < 0 || v > sq) {
          static const char *names[4] = {"LTS", "LTE", "UTS", "UTE"};
          fm_colmask_destroy(*out);
          *out = NULL;
          free(data);
          return fm_fail(err, FM_ERANGE,
                         "%s: batch %lld, head %lld, column %lld: %s = %lld is outside [0, Sq=%lld]",
                         path, (long long)(s / nh), (long long)(s % nh), (long long)j,
                         names[slots[form][q]], (long long)v, (long long)sq);
        }
        fm_colmask_vec(*out, (int32_t)s, slots[form][q])[j] = (int32_t)v;
      }
  free(data);
  st = fm_colmask_validate(*out, err);
  if (st != FM_OK) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
    fm_colmask_destroy(*out);
    *out = NULL;
    return fm_fail(err, st, "%s: %s", path, msg);
  }
  return FM_OK;
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
