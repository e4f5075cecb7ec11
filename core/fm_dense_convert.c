/* fm_dense_convert.c — conversion of a dense-mask result to column intervals
 * (fm_dense.h): fm_dense_result_to_colmask in a form, and the tightest fitting
 * subset (fm_dense_result_subset_colmask). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "fm_dense_impl.h"

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
