#include "fm_forms.h"

#include <string.h>

#include "fm_tile_rule.h"

static const char *const form_names[FM_FORM_COUNT] = {"causal-1", "causal-2", "bidir-2", "bidir-4"};

const char *fm_form_name(fm_form f) {
  return (f >= 0 && f < FM_FORM_COUNT) ? form_names[f] : "none";
}

fm_status fm_form_parse(const char *name, fm_form *out, fm_err *err) {
  for (int f = 0; f < FM_FORM_COUNT; f++)
    if (strcmp(name, form_names[f]) == 0) {
      *out = (fm_form)f;
      return FM_OK;
    }
  return fm_fail(err, FM_EINVAL,
                 "unknown form '%s' (expected causal-1, causal-2, bidir-2 or bidir-4)", name);
}

int fm_form_k(fm_form f) {
  static const int k[FM_FORM_COUNT] = {1, 2, 2, 4};
  return (f >= 0 && f < FM_FORM_COUNT) ? k[f] : 0;
}

int fm_form_causal(fm_form f) { return f == FM_FORM_CAUSAL1 || f == FM_FORM_CAUSAL2; }

fm_form fm_form_from_k(int k, int causal) {
  if (causal) return k == 1 ? FM_FORM_CAUSAL1 : k == 2 ? FM_FORM_CAUSAL2 : FM_FORM_NONE;
  return k == 2 ? FM_FORM_BIDIR2 : k == 4 ? FM_FORM_BIDIR4 : FM_FORM_NONE;
}

/* The runs below the causal triangle removed: rem[] gets the runs of [c, Sq).
 * Returns -1 when rows [0, c) are not all masked. */
static int runs_outside_triangle(const int32_t (*runs)[2], int n, int32_t c, int32_t rem[][2]) {
  int r = 0, k = 0;
  if (c > 0) {
    if (n == 0 || runs[0][0] != 0 || runs[0][1] < c) return -1;
    if (runs[0][1] > c) {
      rem[r][0] = c;
      rem[r][1] = runs[0][1];
      r++;
    }
    k = 1;
  }
  for (; k < n; k++) {
    rem[r][0] = runs[k][0];
    rem[r][1] = runs[k][1];
    r++;
  }
  return r;
}

unsigned fm_runs_fit(const int32_t (*runs)[2], int n, int32_t c, int32_t sq) {
  unsigned fit = 0;
  if (n <= 2) {
    fit |= fm_form_bit(FM_FORM_BIDIR4);
    int top = n >= 1 && runs[0][0] == 0, bottom = n >= 1 && runs[n - 1][1] == sq;
    if (n == 0 || (n == 1 && (top || bottom)) || (n == 2 && top && bottom))
      fit |= fm_form_bit(FM_FORM_BIDIR2);
  }
  if (n <= 3) {
    int32_t rem[3][2];
    int r = runs_outside_triangle(runs, n, c, rem);
    if (r >= 0 && r <= 1) {
      fit |= fm_form_bit(FM_FORM_CAUSAL2);
      if (r == 0 || rem[0][1] == sq) fit |= fm_form_bit(FM_FORM_CAUSAL1);
    }
  }
  return fit;
}

fm_form fm_form_smallest(unsigned fit) {
  for (int f = 0; f < FM_FORM_COUNT; f++)
    if (fit & fm_form_bit((fm_form)f)) return (fm_form)f;
  return FM_FORM_NONE;
}

void fm_runs_to_intervals(const int32_t (*runs)[2], int n, int32_t c, int32_t sq, fm_form f,
                          int causal, int32_t out[4]) {
  out[FM_LTS] = out[FM_LTE] = sq;
  out[FM_UTS] = out[FM_UTE] = 0;
  if (f == FM_FORM_CAUSAL1 || f == FM_FORM_CAUSAL2 || (f == FM_FORM_NONE && causal)) {
    int32_t rem[3][2];
    int r = runs_outside_triangle(runs, n, c, rem);
    if (r == 1) {
      out[FM_LTS] = rem[0][0];
      out[FM_LTE] = rem[0][1];
    } else if (r == 2) { /* canonical causal only: first run touches the triangle */
      out[FM_UTS] = 0;
      out[FM_UTE] = rem[0][1];
      out[FM_LTS] = rem[1][0];
      out[FM_LTE] = rem[1][1];
    }
    return;
  }
  if (n == 1) {
    int to_upper = runs[0][0] == 0 && runs[0][1] < sq;
    out[to_upper ? FM_UTS : FM_LTS] = runs[0][0];
    out[to_upper ? FM_UTE : FM_LTE] = runs[0][1];
  } else if (n == 2) {
    out[FM_UTS] = runs[0][0];
    out[FM_UTE] = runs[0][1];
    out[FM_LTS] = runs[1][0];
    out[FM_LTE] = runs[1][1];
  }
}

fm_form fm_colmask_smallest_form(const fm_colmask *m) {
  unsigned fit = FM_FORMS_ALL;
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  for (int32_t s = 0; s < fm_colmask_nsets(m) && fit; s++)
    for (int32_t j = 0; j < sk && fit; j++) {
      int32_t runs[3][2];
      int n = fm_colmask_column_runs(m, s, j, runs);
      fit &= fm_runs_fit((const int32_t(*)[2])runs, n, fm_causal_limit(j, sq, sk), sq);
    }
  return fm_form_smallest(fit);
}

/* When a column's stored intervals already are in form f, keep them as they
 * are (an empty interval keeps its position): the min/max rule reads the
 * stored values, so a re-expressed mask classifies its tiles as the original
 * does. iv receives the values with the form's implicit vectors filled in. */
static int stored_fits(const fm_colmask *m, int32_t s, int32_t j, int32_t c, fm_form f,
                       int32_t iv[4]) {
  int32_t sq = fm_colmask_sq(m);
  int32_t lts = fm_colmask_cvec(m, s, FM_LTS)[j], lte = fm_colmask_cvec(m, s, FM_LTE)[j];
  int32_t uts = fm_colmask_cvec(m, s, FM_UTS)[j], ute = fm_colmask_cvec(m, s, FM_UTE)[j];
  int causal = fm_colmask_causal(m);
  iv[FM_LTS] = lts;
  iv[FM_LTE] = lte;
  iv[FM_UTS] = uts;
  iv[FM_UTE] = ute;
  switch (f) {
  case FM_FORM_CAUSAL1:
  case FM_FORM_CAUSAL2:
    /* the upper interval adds nothing beyond the causal triangle */
    if (!causal || (uts < ute && ute > c) || (f == FM_FORM_CAUSAL1 && lte != sq)) return 0;
    iv[FM_UTS] = iv[FM_UTE] = 0;
    return 1;
  case FM_FORM_BIDIR2: return !causal && lte == sq && uts == 0;
  case FM_FORM_BIDIR4: return !causal;
  default: return 0;
  }
}

fm_status fm_colmask_to_form(const fm_colmask *m, fm_form f, fm_colmask **out, fm_err *err) {
  *out = NULL;
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  fm_colmask *r = NULL;
  fm_status st = fm_colmask_create(sq, sk, fm_colmask_nb(m), fm_colmask_nh(m), fm_form_causal(f),
                                   &r, err);
  if (st != FM_OK) return st;
  for (int32_t s = 0; s < fm_colmask_nsets(m); s++) {
    int32_t *v[4];
    for (int k = 0; k < 4; k++) v[k] = fm_colmask_vec(r, s, (fm_vec)k);
    for (int32_t j = 0; j < sk; j++) {
      int32_t runs[3][2], iv[4];
      int n = fm_colmask_column_runs(m, s, j, runs);
      int32_t c = fm_causal_limit(j, sq, sk);
      if (!(fm_runs_fit((const int32_t(*)[2])runs, n, c, sq) & fm_form_bit(f))) {
        fm_colmask_destroy(r);
        return fm_fail(err, FM_EUNSUPPORTED,
                       "set %d, column %d does not fit form %s (its masked rows form %d run%s, "
                       "first [%d, %d))",
                       s, j, fm_form_name(f), n, n == 1 ? "" : "s", n ? runs[0][0] : 0,
                       n ? runs[0][1] : 0);
      }
      if (!stored_fits(m, s, j, c, f, iv))
        fm_runs_to_intervals((const int32_t(*)[2])runs, n, c, sq, f, fm_form_causal(f), iv);
      for (int k = 0; k < 4; k++) v[k][j] = iv[k];
    }
  }
  *out = r;
  return FM_OK;
}
