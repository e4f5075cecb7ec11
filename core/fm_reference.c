#include "fm_reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_bf16.h"

/* A dot product in four partial sums, summed pairwise at the end: one
 * definition for double (dot_f64) and float (dot_f32). */
#define FM_REF_DOT(NAME, T)                                                                    \
  static T NAME(const T *a, const T *b, int32_t n) {                                           \
    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                          \
    int32_t d = 0;                                                                             \
    for (; d + 4 <= n; d += 4) {                                                               \
      s0 += a[d] * b[d];                                                                       \
      s1 += a[d + 1] * b[d + 1];                                                               \
      s2 += a[d + 2] * b[d + 2];                                                               \
      s3 += a[d + 3] * b[d + 3];                                                               \
    }                                                                                          \
    for (; d < n; d++) s0 += a[d] * b[d];                                                      \
    return (s0 + s1) + (s2 + s3);                                                              \
  }
FM_REF_DOT(dot_f64, double)
FM_REF_DOT(dot_f32, float)

/* One input tensor: bf16 bit patterns (h) or doubles (d, the fp64 entry points). */
typedef struct ref_in {
  const uint16_t *h;
  const double *d;
} ref_in;

static inline double in_at(ref_in x, size_t i) { return x.d ? x.d[i] : fm_bf16_to_f32(x.h[i]); }

/* Work of one (batch, head) slice: K, V (Sk, D) and, for the backward, the dK,
 * dV accumulators (Sk, D); one row's q, dO, O, dQ (D) and scores, visibility
 * (Sk). The arrays of the mode's type (double for FP64, float otherwise) are
 * carved out of one block. */
typedef struct ref_work {
  fm_ref_mode mode;
  int32_t sk, D;
  double *kd, *vd, *dkd, *dvd, *qd, *dod, *od, *dqd, *sd;
  float *kf, *vf, *dkf, *dvf, *qf, *dof, *of, *dqf, *sf;
  uint8_t *vis;
  void *block;
} ref_work;

static fm_status work_alloc(ref_work *w, fm_ref_mode mode, int32_t sk, int32_t D, int backward,
                            fm_err *err) {
  memset(w, 0, sizeof *w);
  w->mode = mode;
  w->sk = sk;
  w->D = D;
  const size_t kvn = (size_t)sk * (size_t)D, esz = mode == FM_REF_FP64 ? 8 : 4;
  const size_t n = (backward ? 4 : 2) * kvn + 4 * (size_t)D + (size_t)sk;
  if ((int64_t)(n * esz + (size_t)sk) > FM_MAX_ALLOC_BYTES)
    return fm_fail(err, FM_ENOMEM, "reference: Sk * D = %lld too large", (long long)kvn);
  w->block = calloc(n * esz + (size_t)sk, 1);
  if (!w->block)
    return fm_fail(err, FM_ENOMEM, "reference: cannot allocate the (Sk=%d, D=%d) slices", sk, D);
  /* the block: K, V (dK, dV) slices (Sk, D); Q, dO, O, dQ rows (D,); scores (Sk,); in the
     precision's type (suffix d: double, f: float); then the visibility bytes (Sk,) */
#define FM_REF_CARVE(T, X)                                                                     \
  do {                                                                                         \
    T *p = w->block;                                                                           \
    w->k##X = p, p += kvn;                                                                     \
    w->v##X = p, p += kvn;                                                                     \
    if (backward) w->dk##X = p, p += kvn, w->dv##X = p, p += kvn;                              \
    w->q##X = p, p += D;                                                                       \
    w->do##X = p, p += D;                                                                      \
    w->o##X = p, p += D;                                                                       \
    w->dq##X = p, p += D;                                                                      \
    w->s##X = p, p += sk;                                                                      \
    w->vis = (uint8_t *)p;                                                                     \
  } while (0)
  if (mode == FM_REF_FP64) FM_REF_CARVE(double, d);
  else FM_REF_CARVE(float, f);
#undef FM_REF_CARVE
  return FM_OK;
}

/* Row `n` values of x at flat offset src into the work's double or float row. */
static void load_row(const ref_work *w, ref_in x, size_t src, double *d, float *f, int32_t n) {
  for (int32_t e = 0; e < n; e++) {
    if (w->mode == FM_REF_FP64) d[e] = in_at(x, src + (size_t)e);
    else f[e] = (float)in_at(x, src + (size_t)e);
  }
}

/* FP64: scores of the visible keys of row q (w->sd); returns their maximum. */
static double row_scores_f64(ref_work *w, double scale) {
  const int32_t D = w->D;
  double mx = -INFINITY;
  for (int32_t j = 0; j < w->sk; j++) {
    if (!w->vis[j]) continue;
    w->sd[j] = scale * dot_f64(w->qd, w->kd + (size_t)j * D, D);
    if (w->sd[j] > mx) mx = w->sd[j];
  }
  return mx;
}

/* FP64: scores of the visible keys of row q (w->sd), LSE and O (od). */
static void row_forward_f64(ref_work *w, double scale, double *lse) {
  const int32_t D = w->D;
  double mx = row_scores_f64(w, scale);
  double l = 0;
  for (int32_t d = 0; d < D; d++) w->od[d] = 0;
  for (int32_t j = 0; j < w->sk; j++) {
    if (!w->vis[j]) continue;
    double e = exp(w->sd[j] - mx);
    l += e;
    const double *vr = w->vd + (size_t)j * D;
    for (int32_t d = 0; d < D; d++) w->od[d] += e * vr[d];
  }
  for (int32_t d = 0; d < D; d++) w->od[d] /= l;
  *lse = mx + log(l);
}

/* The kernel's precision: raw scores in float (w->sf), p = exp2(s * scale *
 * log2 e - m * scale * log2 e), p rounded to bf16 before P V, the row sum of
 * the unrounded p, O rounded to bf16 (of), LSE in float. */
static void row_forward_f32(ref_work *w, float scale, float scale_log2, float *lse) {
  const int32_t D = w->D;
  float mx = -INFINITY;
  for (int32_t j = 0; j < w->sk; j++) {
    if (!w->vis[j]) continue;
    w->sf[j] = dot_f32(w->qf, w->kf + (size_t)j * D, D); /* raw score, as the kernel keeps it */
    if (w->sf[j] > mx) mx = w->sf[j];
  }
  const float ms = mx * scale_log2;
  float l = 0;
  for (int32_t d = 0; d < D; d++) w->of[d] = 0;
  for (int32_t j = 0; j < w->sk; j++) {
    if (!w->vis[j]) continue;
    float e = exp2f(fmaf(w->sf[j], scale_log2, -ms));
    l += e;
    float eb = fm_round_bf16(e);
    const float *vr = w->vf + (size_t)j * D;
    for (int32_t d = 0; d < D; d++) w->of[d] += eb * vr[d];
  }
  float inv = 1.0f / l;
  for (int32_t d = 0; d < D; d++) w->of[d] = fm_round_bf16(w->of[d] * inv);
  *lse = mx * scale + logf(l);
}

/* FP64 backward of one row (after row_forward_f64): P = exp(S - LSE),
 * dV += P dO, dP = dO V^T, D = dO . O, dS = P (dP - D), dQ = scale dS K,
 * dK += scale dS^T q. */
static void row_backward_f64(ref_work *w, double scale, double lse) {
  const int32_t D = w->D;
  const double di = dot_f64(w->dod, w->od, D);
  for (int32_t d = 0; d < D; d++) w->dqd[d] = 0;
  for (int32_t j = 0; j < w->sk; j++) {
    if (!w->vis[j]) continue;
    const double p = exp(w->sd[j] - lse);
    const double *kr = w->kd + (size_t)j * D, *vr = w->vd + (size_t)j * D;
    const double ds = p * (dot_f64(w->dod, vr, D) - di);
    double *dkr = w->dkd + (size_t)j * D, *dvr = w->dvd + (size_t)j * D;
    for (int32_t d = 0; d < D; d++) {
      dvr[d] += p * w->dod[d];
      w->dqd[d] += scale * ds * kr[d];
      dkr[d] += scale * ds * w->qd[d];
    }
  }
}

/* The kernel's precision (after row_forward_f32): P = exp2(S * scale * log2 e
 * - LSE * log2 e) in float from the float LSE; P rounded to bf16 for dV += P^T
 * dO; dP = dO V^T and D = dO . O (O the bf16 output) in float; dS = P (dP - D)
 * rounded to bf16 for dQ and dK; float accumulators, scaled at the end. */
static void row_backward_f32(ref_work *w, float scale_log2, float lse) {
  const int32_t D = w->D;
  const float lse_log2 = lse * 1.4426950408889634f;
  const float di = dot_f32(w->dof, w->of, D);
  for (int32_t d = 0; d < D; d++) w->dqf[d] = 0;
  for (int32_t j = 0; j < w->sk; j++) {
    if (!w->vis[j]) continue;
    const float p = exp2f(fmaf(w->sf[j], scale_log2, -lse_log2));
    const float pb = fm_round_bf16(p);
    const float *kr = w->kf + (size_t)j * D, *vr = w->vf + (size_t)j * D;
    const float dsb = fm_round_bf16(p * (dot_f32(w->dof, vr, D) - di));
    float *dkr = w->dkf + (size_t)j * D, *dvr = w->dvf + (size_t)j * D;
    for (int32_t d = 0; d < D; d++) {
      dvr[d] += pb * w->dof[d];
      w->dqf[d] += dsb * kr[d];
      dkr[d] += dsb * w->qf[d];
    }
  }
}

/* Inputs and outputs of one run; dout NULL: the forward. */
typedef struct ref_run {
  const fm_ref_problem *p;
  fm_ref_mode mode;
  ref_in q, k, v, dout;
  double *o, *lse, *dq, *dk, *dv;
  const double *o_in, *lse_in; /* backward: the forward's, given (else recomputed) */
} ref_run;

/* Row i of (b, h, set): forward (o, lse) or backward (dq; dK, dV accumulated). */
static void run_row(const ref_run *r, ref_work *w, int32_t b, int32_t h, int32_t set, int32_t i) {
  const fm_colmask *m = r->p->mask;
  const int32_t H = r->p->heads, D = r->p->head_dim, sq = fm_colmask_sq(m);
  const int backward = r->dq != NULL;
  const size_t src = (((size_t)b * sq + i) * H + h) * (size_t)D;
  int any = 0;
  for (int32_t j = 0; j < w->sk; j++) {
    w->vis[j] = (uint8_t)!fm_colmask_masked(m, set, i, j);
    any |= w->vis[j];
  }
  double *out = backward ? r->dq + src : r->o + src;
  if (!any) { /* no visible key: O = 0, LSE = -inf, and no gradient flows */
    for (int32_t d = 0; d < D; d++) out[d] = 0.0;
    if (!backward) r->lse[((size_t)b * H + h) * (size_t)sq + i] = -INFINITY;
    return;
  }
  load_row(w, r->q, src, w->qd, w->qf, D);
  double lse;
  if (r->o_in) { /* FP64 backward from the given O and LSE */
    row_scores_f64(w, r->p->softmax_scale);
    for (int32_t d = 0; d < D; d++) w->od[d] = r->o_in[src + d];
    load_row(w, r->dout, src, w->dod, w->dof, D);
    row_backward_f64(w, r->p->softmax_scale, r->lse_in[((size_t)b * H + h) * (size_t)sq + i]);
    for (int32_t d = 0; d < D; d++) out[d] = w->dqd[d];
    return;
  }
  if (r->mode == FM_REF_FP64) {
    row_forward_f64(w, r->p->softmax_scale, &lse);
    if (backward) {
      load_row(w, r->dout, src, w->dod, w->dof, D);
      row_backward_f64(w, r->p->softmax_scale, lse);
    }
    for (int32_t d = 0; d < D; d++) out[d] = backward ? w->dqd[d] : w->od[d];
  } else {
    const float scale_log2 = (float)(r->p->softmax_scale * 1.4426950408889634);
    float lf;
    row_forward_f32(w, (float)r->p->softmax_scale, scale_log2, &lf);
    lse = lf;
    if (backward) {
      load_row(w, r->dout, src, w->dod, w->dof, D);
      row_backward_f32(w, scale_log2, lf);
    }
    for (int32_t d = 0; d < D; d++)
      out[d] = backward ? fm_round_bf16(w->dqf[d] * (float)r->p->softmax_scale) : w->of[d];
  }
  if (!backward) r->lse[((size_t)b * H + h) * (size_t)sq + i] = lse;
}

static fm_status check_problem(const fm_ref_problem *p, fm_ref_mode mode, fm_err *err) {
  if (!p || !p->mask)
    return fm_fail(err, FM_EINVAL, "reference: a required pointer is NULL");
  if (p->batch < 1 || p->heads < 1 || p->head_dim < 1 || p->head_dim > 1024)
    return fm_fail(err, FM_EINVAL,
                   "reference: batch, heads >= 1 and head_dim in 1..1024 expected (got %d, %d, %d)",
                   p->batch, p->heads, p->head_dim);
  if (mode != FM_REF_FP64 && mode != FM_REF_BF16_FP32)
    return fm_fail(err, FM_EINVAL, "reference: unknown mode %d", (int)mode);
  return FM_OK;
}

static fm_status run_all(const ref_run *r, fm_err *err) {
  const fm_ref_problem *p = r->p;
  const fm_colmask *m = p->mask;
  const int32_t B = p->batch, H = p->heads, D = p->head_dim;
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  const int backward = r->dq != NULL;
  ref_work w;
  fm_status st = work_alloc(&w, r->mode, sk, D, backward, err);
  if (st != FM_OK) return st;
  const size_t kvn = (size_t)sk * (size_t)D;
  for (int32_t b = 0; b < B; b++) {
    for (int32_t h = 0; h < H; h++) {
      const int32_t set = fm_colmask_set_index(m, b, h);
      for (int32_t j = 0; j < sk; j++) { /* one (batch, head) slice, converted once */
        size_t src = (((size_t)b * sk + j) * H + h) * (size_t)D, at = (size_t)j * D;
        load_row(&w, r->k, src, w.kd ? w.kd + at : NULL, w.kf ? w.kf + at : NULL, D);
        load_row(&w, r->v, src, w.vd ? w.vd + at : NULL, w.vf ? w.vf + at : NULL, D);
      }
      if (backward) {
        if (w.dkd) memset(w.dkd, 0, 2 * kvn * sizeof *w.dkd); /* dK and dV are adjacent */
        else memset(w.dkf, 0, 2 * kvn * sizeof *w.dkf);
      }
      for (int32_t i = 0; i < sq; i++) run_row(r, &w, b, h, set, i);
      if (!backward) continue;
      const float scale = (float)p->softmax_scale;
      for (int32_t j = 0; j < sk; j++) {
        size_t dst = (((size_t)b * sk + j) * H + h) * (size_t)D, at = (size_t)j * D;
        for (int32_t d = 0; d < D; d++) {
          r->dk[dst + d] = w.dkd ? w.dkd[at + d] : fm_round_bf16(w.dkf[at + d] * scale);
          r->dv[dst + d] = w.dvd ? w.dvd[at + d] : fm_round_bf16(w.dvf[at + d]);
        }
      }
    }
  }
  free(w.block);
  return FM_OK;
}

fm_status fm_reference_forward(const fm_ref_problem *p, fm_ref_mode mode, double *o, double *lse,
                               fm_err *err) {
  fm_status st = check_problem(p, mode, err);
  if (st != FM_OK) return st;
  if (!p->q || !p->k || !p->v || !o || !lse)
    return fm_fail(err, FM_EINVAL, "reference: a required pointer is NULL");
  ref_run r = {.p = p, .mode = mode, .q = {p->q, NULL}, .k = {p->k, NULL}, .v = {p->v, NULL},
               .o = o, .lse = lse};
  return run_all(&r, err);
}

fm_status fm_reference_backward(const fm_ref_problem *p, const uint16_t *dout, fm_ref_mode mode,
                                double *dq, double *dk, double *dv, fm_err *err) {
  fm_status st = check_problem(p, mode, err);
  if (st != FM_OK) return st;
  if (!p->q || !p->k || !p->v || !dout || !dq || !dk || !dv)
    return fm_fail(err, FM_EINVAL, "reference: a required pointer is NULL");
  ref_run r = {.p = p, .mode = mode, .q = {p->q, NULL}, .k = {p->k, NULL}, .v = {p->v, NULL},
               .dout = {dout, NULL}, .dq = dq, .dk = dk, .dv = dv};
  return run_all(&r, err);
}

fm_status fm_reference_backward_given(const fm_ref_problem *p, const uint16_t *dout, const double *o,
                                      const double *lse, double *dq, double *dk, double *dv,
                                      fm_err *err) {
  fm_status st = check_problem(p, FM_REF_FP64, err);
  if (st != FM_OK) return st;
  if (!p->q || !p->k || !p->v || !dout || !o || !lse || !dq || !dk || !dv)
    return fm_fail(err, FM_EINVAL, "reference: a required pointer is NULL");
  ref_run r = {.p = p, .mode = FM_REF_FP64, .q = {p->q, NULL}, .k = {p->k, NULL}, .v = {p->v, NULL},
               .dout = {dout, NULL}, .dq = dq, .dk = dk, .dv = dv, .o_in = o, .lse_in = lse};
  return run_all(&r, err);
}

fm_status fm_reference_forward_f64(const fm_ref_problem *p, const double *q, const double *k,
                                   const double *v, double *o, double *lse, fm_err *err) {
  fm_status st = check_problem(p, FM_REF_FP64, err);
  if (st != FM_OK) return st;
  if (!q || !k || !v || !o || !lse)
    return fm_fail(err, FM_EINVAL, "reference: a required pointer is NULL");
  ref_run r = {.p = p, .mode = FM_REF_FP64, .q = {NULL, q}, .k = {NULL, k}, .v = {NULL, v},
               .o = o, .lse = lse};
  return run_all(&r, err);
}

fm_status fm_reference_backward_f64(const fm_ref_problem *p, const double *q, const double *k,
                                    const double *v, const double *dout, double *dq, double *dk,
                                    double *dv, fm_err *err) {
  fm_status st = check_problem(p, FM_REF_FP64, err);
  if (st != FM_OK) return st;
  if (!q || !k || !v || !dout || !dq || !dk || !dv)
    return fm_fail(err, FM_EINVAL, "reference: a required pointer is NULL");
  ref_run r = {.p = p, .mode = FM_REF_FP64, .q = {NULL, q}, .k = {NULL, k}, .v = {NULL, v},
               .dout = {NULL, dout}, .dq = dq, .dk = dk, .dv = dv};
  return run_all(&r, err);
}

static void cmp_one(double g, double r, int64_t idx, double atol, double rtol,
                    fm_compare_result *out, double *sum2, int64_t *nfin) {
  int pass;
  if (isnan(g) || isnan(r)) {
    pass = 0;
  } else if (isinf(g) || isinf(r)) {
    pass = g == r;
  } else {
    double e = fabs(g - r);
    pass = e <= atol + rtol * fabs(r);
    *sum2 += e * e;
    (*nfin)++;
    if (out->worst < 0 || e > out->max_abs_err) {
      out->max_abs_err = e;
      out->worst = idx;
    }
  }
  if (!pass) {
    if (out->first_bad < 0) out->first_bad = idx;
    out->bad++;
  }
}

/* Element i of a typed array as a double: one function per element type. */
typedef double (*cmp_get)(const void *a, int64_t i);
static double get_f32(const void *a, int64_t i) { return ((const float *)a)[i]; }
static double get_f64(const void *a, int64_t i) { return ((const double *)a)[i]; }
static double get_bf16(const void *a, int64_t i) { return fm_bf16_to_f32(((const uint16_t *)a)[i]); }

static void compare_any(const void *got, cmp_get get, const double *ref, int64_t n, double atol, double rtol,
                        fm_compare_result *out) {
  double sum2 = 0;
  int64_t nfin = 0;
  out->n = n;
  out->bad = 0;
  out->first_bad = -1;
  out->worst = -1;
  out->max_abs_err = 0;
  for (int64_t i = 0; i < n; i++) cmp_one(get(got, i), ref[i], i, atol, rtol, out, &sum2, &nfin);
  out->rms_err = nfin ? sqrt(sum2 / (double)nfin) : 0.0;
}

void fm_compare_f32(const float *got, const double *ref, int64_t n, double atol, double rtol,
                    fm_compare_result *out) {
  compare_any(got, get_f32, ref, n, atol, rtol, out);
}

void fm_compare_f64(const double *got, const double *ref, int64_t n, double atol, double rtol,
                    fm_compare_result *out) {
  compare_any(got, get_f64, ref, n, atol, rtol, out);
}

void fm_compare_bf16(const uint16_t *got, const double *ref, int64_t n, double atol, double rtol,
                     fm_compare_result *out) {
  compare_any(got, get_bf16, ref, n, atol, rtol, out);
}

/* Tolerances of rule 1 (fm_reference.h). The forward's O and LSE figures are
 * the ones the kernel checks have used since the first kernel; the gradients'
 * were set from the same-precision CPU run against fp64 over random masks,
 * lengths up to 2K and head dims 64 and 128, standard normal inputs: it
 * needed atol 0.015 beside rtol 0.02 at most, half of what is allowed
 * (tests/test_reference.c keeps such a run inside them). */
static const struct {
  const char *name;
  fm_ref_tol tol;
} quantities[FM_REF_NQUANTITIES] = {
    [FM_REF_Q_O] = {"O", {3e-3, 1.5e-2}},   [FM_REF_Q_LSE] = {"LSE", {1e-3, 1e-4}},
    [FM_REF_Q_DQ] = {"dQ", {3e-2, 2e-2}},   [FM_REF_Q_DK] = {"dK", {3e-2, 2e-2}},
    [FM_REF_Q_DV] = {"dV", {3e-2, 2e-2}},
};

fm_ref_tol fm_ref_tolerance(fm_ref_quantity q) {
  fm_ref_tol none = {0, 0};
  return (unsigned)q < FM_REF_NQUANTITIES ? quantities[q].tol : none;
}

const char *fm_ref_quantity_name(fm_ref_quantity q) {
  return (unsigned)q < FM_REF_NQUANTITIES ? quantities[q].name : "?";
}

int fm_ref_within_twice(const fm_compare_result *gpu, const fm_compare_result *cpu) {
  return gpu->max_abs_err <= 2.0 * cpu->max_abs_err + 1e-6;
}
