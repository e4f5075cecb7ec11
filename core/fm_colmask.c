#include "fm_colmask.h"

#include <stdlib.h>
#include <string.h>

#include "fm_forms.h"
#include "fm_limits.h"
#include "fm_tile_rule.h"

struct fm_colmask {
  int32_t sq, sk, nb, nh;
  int causal;
  int32_t *data; /* (nb, nh, 4, Sk) int32 row indices */
  int64_t reserved; /* bytes of data held in the memory budget (fm_limits.h) */
};

fm_status fm_colmask_create(int64_t sq, int64_t sk, int64_t nb, int64_t nh, int causal,
                            fm_colmask **out, fm_err *err) {
  *out = NULL;
  if (sq <= 0 || sk <= 0)
    return fm_fail(err, FM_EINVAL, "sequence lengths must be positive (got Sq=%lld, Sk=%lld)",
                   (long long)sq, (long long)sk);
  if (sq > FM_MAX_SEQLEN || sk > FM_MAX_SEQLEN)
    return fm_fail(err, FM_EINVAL,
                   "sequence length %lld exceeds the maximum %d (row indices are int32)",
                   (long long)(sq > sk ? sq : sk), FM_MAX_SEQLEN);
  if (nb <= 0 || nh <= 0 || nb > 65535 || nh > 65535)
    return fm_fail(err, FM_EINVAL, "mask batch/head counts must be in 1..65535 (got %lld x %lld)",
                   (long long)nb, (long long)nh);
  int64_t bytes = nb * nh * 4 * sk * (int64_t)sizeof(int32_t);
  if (bytes > FM_MAX_ALLOC_BYTES)
    return fm_fail(err, FM_ENOMEM,
                   "interval vectors would take %.1f GiB (limit %.0f GiB): use fewer per-head sets "
                   "or a shorter sequence",
                   (double)bytes / (1 << 30), (double)FM_MAX_ALLOC_BYTES / (1 << 30));
  fm_status st = fm_mem_reserve(bytes, "the mask's interval vectors", err);
  if (st != FM_OK) return st;
  fm_colmask *m = calloc(1, sizeof *m);
  int32_t *data = malloc((size_t)bytes);
  if (!m || !data) {
    free(m);
    free(data);
    fm_mem_release(bytes);
    return fm_fail(err, FM_ENOMEM, "cannot allocate %lld bytes of interval vectors",
                   (long long)bytes);
  }
  m->sq = (int32_t)sq;
  m->sk = (int32_t)sk;
  m->nb = (int32_t)nb;
  m->nh = (int32_t)nh;
  m->causal = causal ? 1 : 0;
  m->data = data;
  m->reserved = bytes;
  for (int32_t s = 0; s < m->nb * m->nh; s++) {
    int32_t *lts = fm_colmask_vec(m, s, FM_LTS), *lte = fm_colmask_vec(m, s, FM_LTE);
    for (int32_t j = 0; j < m->sk; j++) lts[j] = lte[j] = m->sq;
    memset(fm_colmask_vec(m, s, FM_UTS), 0, sizeof(int32_t) * (size_t)m->sk);
    memset(fm_colmask_vec(m, s, FM_UTE), 0, sizeof(int32_t) * (size_t)m->sk);
  }
  *out = m;
  return FM_OK;
}

void fm_colmask_destroy(fm_colmask *m) {
  if (!m) return;
  fm_mem_release(m->reserved);
  free(m->data);
  free(m);
}

fm_status fm_colmask_clone(const fm_colmask *m, fm_colmask **out, fm_err *err) {
  fm_status st = fm_colmask_create(m->sq, m->sk, m->nb, m->nh, m->causal, out, err);
  if (st == FM_OK)
    memcpy((*out)->data, m->data, sizeof(int32_t) * 4 * (size_t)m->sk * (size_t)(m->nb * m->nh));
  return st;
}

int32_t fm_colmask_sq(const fm_colmask *m) { return m->sq; }
int32_t fm_colmask_sk(const fm_colmask *m) { return m->sk; }
int32_t fm_colmask_nb(const fm_colmask *m) { return m->nb; }
int32_t fm_colmask_nh(const fm_colmask *m) { return m->nh; }
int32_t fm_colmask_nsets(const fm_colmask *m) { return m->nb * m->nh; }
int fm_colmask_causal(const fm_colmask *m) { return m->causal; }

int32_t fm_colmask_set_index(const fm_colmask *m, int32_t b, int32_t h) {
  return (m->nb == 1 ? 0 : b) * m->nh + (m->nh == 1 ? 0 : h);
}

int32_t *fm_colmask_vec(fm_colmask *m, int32_t set, fm_vec v) {
  return m->data + ((size_t)set * 4 + (size_t)v) * (size_t)m->sk;
}

const int32_t *fm_colmask_cvec(const fm_colmask *m, int32_t set, fm_vec v) {
  return m->data + ((size_t)set * 4 + (size_t)v) * (size_t)m->sk;
}

fm_status fm_colmask_validate(const fm_colmask *m, fm_err *err) {
  static const char *names[4] = {"LTS", "LTE", "UTS", "UTE"};
  for (int32_t s = 0; s < fm_colmask_nsets(m); s++) {
    const int32_t *v[4];
    for (int k = 0; k < 4; k++) v[k] = fm_colmask_cvec(m, s, (fm_vec)k);
    for (int32_t j = 0; j < m->sk; j++) {
      for (int k = 0; k < 4; k++)
        if (v[k][j] < 0 || v[k][j] > m->sq)
          return fm_fail(err, FM_ERANGE, "set %d, column %d: %s = %d is outside [0, Sq=%d]", s, j,
                         names[k], v[k][j], m->sq);
      if (v[FM_LTS][j] > v[FM_LTE][j])
        return fm_fail(err, FM_ERANGE, "set %d, column %d: LTS = %d > LTE = %d (start after end)",
                       s, j, v[FM_LTS][j], v[FM_LTE][j]);
      if (v[FM_UTS][j] > v[FM_UTE][j])
        return fm_fail(err, FM_ERANGE, "set %d, column %d: UTS = %d > UTE = %d (start after end)",
                       s, j, v[FM_UTS][j], v[FM_UTE][j]);
      if (m->causal && v[FM_UTS][j] < v[FM_UTE][j] &&
          v[FM_UTS][j] > fm_causal_limit(j, m->sq, m->sk))
        return fm_fail(err, FM_ERANGE,
                       "set %d, column %d: causal mask with upper interval [%d, %d) detached from "
                       "the causal triangle (rows < %d); express it as a bidirectional mask",
                       s, j, v[FM_UTS][j], v[FM_UTE][j], fm_causal_limit(j, m->sq, m->sk));
    }
  }
  return FM_OK;
}

int fm_colmask_masked(const fm_colmask *m, int32_t set, int32_t i, int32_t j) {
  int32_t lts = fm_colmask_cvec(m, set, FM_LTS)[j], lte = fm_colmask_cvec(m, set, FM_LTE)[j];
  int32_t uts = fm_colmask_cvec(m, set, FM_UTS)[j], ute = fm_colmask_cvec(m, set, FM_UTE)[j];
  return (i >= lts && i < lte) || (i >= uts && i < ute) ||
         (m->causal && i < fm_causal_limit(j, m->sq, m->sk));
}

int fm_colmask_column_runs(const fm_colmask *m, int32_t set, int32_t j, int32_t runs[3][2]) {
  int32_t iv[3][2];
  int n = 0;
  iv[n][0] = fm_colmask_cvec(m, set, FM_LTS)[j];
  iv[n][1] = fm_colmask_cvec(m, set, FM_LTE)[j];
  if (iv[n][0] < iv[n][1]) n++;
  iv[n][0] = fm_colmask_cvec(m, set, FM_UTS)[j];
  iv[n][1] = fm_colmask_cvec(m, set, FM_UTE)[j];
  if (iv[n][0] < iv[n][1]) n++;
  if (m->causal) {
    iv[n][0] = 0;
    iv[n][1] = fm_causal_limit(j, m->sq, m->sk);
    if (iv[n][0] < iv[n][1]) n++;
  }
  /* sort by start (at most 3 elements), then merge overlapping or adjacent */
  for (int a = 1; a < n; a++)
    for (int b = a; b > 0 && iv[b][0] < iv[b - 1][0]; b--) {
      int32_t t0 = iv[b][0], t1 = iv[b][1];
      iv[b][0] = iv[b - 1][0];
      iv[b][1] = iv[b - 1][1];
      iv[b - 1][0] = t0;
      iv[b - 1][1] = t1;
    }
  int r = 0;
  for (int a = 0; a < n; a++) {
    if (r > 0 && iv[a][0] <= runs[r - 1][1]) {
      if (iv[a][1] > runs[r - 1][1]) runs[r - 1][1] = iv[a][1];
    } else {
      runs[r][0] = iv[a][0];
      runs[r][1] = iv[a][1];
      r++;
    }
  }
  return r;
}

int fm_colmask_column_equal(const fm_colmask *a, int32_t sa, const fm_colmask *b, int32_t sb,
                            int32_t j) {
  int32_t ra[3][2], rb[3][2];
  int na = fm_colmask_column_runs(a, sa, j, ra), nb = fm_colmask_column_runs(b, sb, j, rb);
  if (na != nb) return 0;
  for (int k = 0; k < na; k++)
    if (ra[k][0] != rb[k][0] || ra[k][1] != rb[k][1]) return 0;
  return 1;
}

int fm_colmask_equal(const fm_colmask *a, const fm_colmask *b) {
  if (a->sq != b->sq || a->sk != b->sk) return 0;
  int32_t nb = a->nb > b->nb ? a->nb : b->nb, nh = a->nh > b->nh ? a->nh : b->nh;
  if ((a->nb != 1 && a->nb != nb) || (b->nb != 1 && b->nb != nb) ||
      (a->nh != 1 && a->nh != nh) || (b->nh != 1 && b->nh != nh))
    return 0;
  for (int32_t bi = 0; bi < nb; bi++)
    for (int32_t hi = 0; hi < nh; hi++) {
      int32_t sa = fm_colmask_set_index(a, bi, hi), sb = fm_colmask_set_index(b, bi, hi);
      for (int32_t j = 0; j < a->sk; j++)
        if (!fm_colmask_column_equal(a, sa, b, sb, j)) return 0;
    }
  return 1;
}

void fm_colmask_canonicalize(fm_colmask *m) {
  for (int32_t s = 0; s < fm_colmask_nsets(m); s++) {
    int32_t *v[4];
    for (int k = 0; k < 4; k++) v[k] = fm_colmask_vec(m, s, (fm_vec)k);
    for (int32_t j = 0; j < m->sk; j++) {
      int32_t runs[3][2], out[4];
      int n = fm_colmask_column_runs(m, s, j, runs);
      fm_runs_to_intervals((const int32_t(*)[2])runs, n, m->causal ? fm_causal_limit(j, m->sq, m->sk) : 0,
                           m->sq, FM_FORM_NONE, m->causal, out);
      for (int k = 0; k < 4; k++) v[k][j] = out[k];
    }
  }
}
