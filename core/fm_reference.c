#include "fm_reference.h"

#include <math.h>
#include <stdlib.h>

#include "fm_bf16.h"

static double dot_f64(const double *a, const double *b, int32_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int32_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; d++) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

static float dot_f32(const float *a, const float *b, int32_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int32_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; d++) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

fm_status fm_reference_forward(const fm_ref_problem *p, fm_ref_mode mode, double *o, double *lse,
                               fm_err *err) {
  if (!p || !p->mask || !p->q || !p->k || !p->v || !o || !lse)
    return fm_fail(err, FM_EINVAL, "reference: a required pointer is NULL");
  if (p->batch < 1 || p->heads < 1 || p->head_dim < 1 || p->head_dim > 1024)
    return fm_fail(err, FM_EINVAL,
                   "reference: batch, heads >= 1 and head_dim in 1..1024 expected (got %d, %d, %d)",
                   p->batch, p->heads, p->head_dim);
  if (mode != FM_REF_FP64 && mode != FM_REF_BF16_FP32)
    return fm_fail(err, FM_EINVAL, "reference: unknown mode %d", (int)mode);
  const fm_colmask *m = p->mask;
  const int32_t B = p->batch, H = p->heads, D = p->head_dim;
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  if ((int64_t)sk * D * 2 * 8 > FM_MAX_ALLOC_BYTES)
    return fm_fail(err, FM_ENOMEM, "reference: Sk * D = %lld too large", (long long)sk * D);
  const size_t kvn = (size_t)sk * (size_t)D;
  /* one (batch, head) slice at a time, converted once: (Sk, D) K and V, (D,) q */
  double *kd = NULL, *vd = NULL, *qd = NULL, *od = NULL, *sd = NULL;
  float *kf = NULL, *vf = NULL, *qf = NULL, *of = NULL, *sf = NULL;
  uint8_t *vis = malloc((size_t)sk);
  int okalloc = vis != NULL;
  if (mode == FM_REF_FP64) {
    kd = malloc(kvn * sizeof *kd);
    vd = malloc(kvn * sizeof *vd);
    qd = malloc((size_t)D * sizeof *qd);
    od = malloc((size_t)D * sizeof *od);
    sd = malloc((size_t)sk * sizeof *sd);
    okalloc = okalloc && kd && vd && qd && od && sd;
  } else {
    kf = malloc(kvn * sizeof *kf);
    vf = malloc(kvn * sizeof *vf);
    qf = malloc((size_t)D * sizeof *qf);
    of = malloc((size_t)D * sizeof *of);
    sf = malloc((size_t)sk * sizeof *sf);
    okalloc = okalloc && kf && vf && qf && of && sf;
  }
  if (!okalloc) {
    free(vis);
    free(kd), free(vd), free(qd), free(od), free(sd);
    free(kf), free(vf), free(qf), free(of), free(sf);
    return fm_fail(err, FM_ENOMEM, "reference: cannot allocate the (Sk=%d, D=%d) slices", sk, D);
  }
  const double scale = p->softmax_scale;
  const float scale_log2 = (float)(p->softmax_scale * 1.4426950408889634);
  for (int32_t b = 0; b < B; b++) {
    for (int32_t h = 0; h < H; h++) {
      const int32_t set = fm_colmask_set_index(m, b, h);
      for (int32_t j = 0; j < sk; j++) {
        size_t src = (((size_t)b * sk + j) * H + h) * (size_t)D;
        for (int32_t d = 0; d < D; d++) {
          if (mode == FM_REF_FP64) {
            kd[(size_t)j * D + d] = fm_bf16_to_f32(p->k[src + d]);
            vd[(size_t)j * D + d] = fm_bf16_to_f32(p->v[src + d]);
          } else {
            kf[(size_t)j * D + d] = fm_bf16_to_f32(p->k[src + d]);
            vf[(size_t)j * D + d] = fm_bf16_to_f32(p->v[src + d]);
          }
        }
      }
      for (int32_t i = 0; i < sq; i++) {
        size_t qsrc = (((size_t)b * sq + i) * H + h) * (size_t)D;
        double *orow = o + qsrc;
        double *lrow = lse + ((size_t)b * H + h) * (size_t)sq + i;
        int any = 0;
        for (int32_t j = 0; j < sk; j++) {
          vis[j] = (uint8_t)!fm_colmask_masked(m, set, i, j);
          any |= vis[j];
        }
        if (!any) {
          for (int32_t d = 0; d < D; d++) orow[d] = 0.0;
          *lrow = -INFINITY;
          continue;
        }
        if (mode == FM_REF_FP64) {
          for (int32_t d = 0; d < D; d++) qd[d] = fm_bf16_to_f32(p->q[qsrc + d]);
          double mx = -INFINITY;
          for (int32_t j = 0; j < sk; j++) {
            if (!vis[j]) continue;
            sd[j] = scale * dot_f64(qd, kd + (size_t)j * D, D);
            if (sd[j] > mx) mx = sd[j];
          }
          double l = 0;
          for (int32_t d = 0; d < D; d++) od[d] = 0;
          for (int32_t j = 0; j < sk; j++) {
            if (!vis[j]) continue;
            double e = exp(sd[j] - mx);
            l += e;
            const double *vr = vd + (size_t)j * D;
            for (int32_t d = 0; d < D; d++) od[d] += e * vr[d];
          }
          for (int32_t d = 0; d < D; d++) orow[d] = od[d] / l;
          *lrow = mx + log(l);
        } else {
          for (int32_t d = 0; d < D; d++) qf[d] = fm_bf16_to_f32(p->q[qsrc + d]);
          float mx = -INFINITY;
          for (int32_t j = 0; j < sk; j++) {
            if (!vis[j]) continue;
            sf[j] = dot_f32(qf, kf + (size_t)j * D, D); /* raw score, as the kernel keeps it */
            if (sf[j] > mx) mx = sf[j];
          }
          const float ms = mx * scale_log2;
          float l = 0;
          for (int32_t d = 0; d < D; d++) of[d] = 0;
          for (int32_t j = 0; j < sk; j++) {
            if (!vis[j]) continue;
            float e = exp2f(fmaf(sf[j], scale_log2, -ms));
            l += e;
            float eb = fm_round_bf16(e);
            const float *vr = vf + (size_t)j * D;
            for (int32_t d = 0; d < D; d++) of[d] += eb * vr[d];
          }
          float inv = 1.0f / l;
          for (int32_t d = 0; d < D; d++) orow[d] = fm_round_bf16(of[d] * inv);
          *lrow = (double)(mx * (float)scale + logf(l));
        }
      }
    }
  }
  free(vis);
  free(kd), free(vd), free(qd), free(od), free(sd);
  free(kf), free(vf), free(qf), free(of), free(sf);
  return FM_OK;
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

static void cmp_begin(fm_compare_result *out, int64_t n) {
  out->n = n;
  out->bad = 0;
  out->first_bad = -1;
  out->worst = -1;
  out->max_abs_err = 0;
  out->rms_err = 0;
}

static void cmp_end(fm_compare_result *out, double sum2, int64_t nfin) {
  out->rms_err = nfin ? sqrt(sum2 / (double)nfin) : 0.0;
}

void fm_compare_f32(const float *got, const double *ref, int64_t n, double atol, double rtol,
                    fm_compare_result *out) {
  double sum2 = 0;
  int64_t nfin = 0;
  cmp_begin(out, n);
  for (int64_t i = 0; i < n; i++) cmp_one(got[i], ref[i], i, atol, rtol, out, &sum2, &nfin);
  cmp_end(out, sum2, nfin);
}

void fm_compare_f64(const double *got, const double *ref, int64_t n, double atol, double rtol,
                    fm_compare_result *out) {
  double sum2 = 0;
  int64_t nfin = 0;
  cmp_begin(out, n);
  for (int64_t i = 0; i < n; i++) cmp_one(got[i], ref[i], i, atol, rtol, out, &sum2, &nfin);
  cmp_end(out, sum2, nfin);
}

void fm_compare_bf16(const uint16_t *got, const double *ref, int64_t n, double atol, double rtol,
                     fm_compare_result *out) {
  double sum2 = 0;
  int64_t nfin = 0;
  cmp_begin(out, n);
  for (int64_t i = 0; i < n; i++)
    cmp_one(fm_bf16_to_f32(got[i]), ref[i], i, atol, rtol, out, &sum2, &nfin);
  cmp_end(out, sum2, nfin);
}
