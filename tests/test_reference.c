/* Tests of the CPU reference attention (core/fm_reference.h) and the bf16
 * helpers (core/fm_bf16.h): rounding to nearest even, the fp64 reference
 * against a naive dense-mask computation, rows with no visible key, and the
 * same-precision mode staying close to fp64; the backward against finite
 * differences of the fp64 forward, its symmetries, empty rows and keys,
 * per-head sets, and its same-precision mode within the tolerance rule. */
#include <criterion/criterion.h>
#include <math.h>

#include "fm_bf16.h"
#include "fm_reference.h"
#include "fm_test_util.h"

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

Test(bf16, round_to_nearest_even) {
  cr_expect_eq(fm_f32_to_bf16(1.0f), 0x3f80);
  cr_expect_eq(fm_f32_to_bf16(from_bits(0x3f808000u)), 0x3f80); /* tie, even below */
  cr_expect_eq(fm_f32_to_bf16(from_bits(0x3f818000u)), 0x3f82); /* tie, even above */
  cr_expect_eq(fm_f32_to_bf16(from_bits(0x3f808001u)), 0x3f81); /* just above the tie */
  cr_expect_eq(fm_f32_to_bf16(from_bits(0x3f807fffu)), 0x3f80);
  cr_expect_eq(fm_f32_to_bf16(-0.0f), 0x8000);
  cr_expect_eq(fm_f32_to_bf16(INFINITY), 0x7f80);
  cr_expect_eq(fm_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* max float rounds to inf */
  cr_expect(isnan(fm_bf16_to_f32(fm_f32_to_bf16(NAN))));
  cr_expect(isnan(fm_bf16_to_f32(fm_f32_to_bf16(from_bits(0x7f800001u))))); /* stays NaN */
  for (uint32_t h = 0; h < 0x10000; h += 7) /* bf16 -> f32 -> bf16 is exact */
    if ((h & 0x7f80) != 0x7f80) cr_expect_eq(fm_f32_to_bf16(fm_bf16_to_f32((uint16_t)h)), h);
  cr_expect_eq(bits(fm_bf16_to_f32(0x3f80)), 0x3f800000u);
}

static void fill(uint16_t *x, int64_t n, fm_rng *r) {
  for (int64_t i = 0; i < n; i++)
    x[i] = fm_f32_to_bf16((float)((double)fm_rng_below(r, 1u << 20) / (1 << 19) - 1.0) * 2.0f);
}

Test(reference, fp64_matches_naive_dense) {
  fm_rng r;
  fm_rng_seed(&r, 5, 0);
  for (int iter = 0; iter < 12; iter++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 40), sk = 1 + (int32_t)fm_rng_below(&r, 40);
    int32_t B = 2, H = 2, D = 1 + (int32_t)fm_rng_below(&r, 16);
    int causal = iter & 1;
    fm_colmask *m = fmt_random_mask(&r, sq, sk, iter % 3 == 0 ? 2 : 1, iter % 4 == 0 ? 2 : 1,
                                    causal);
    cr_assert_not_null(m);
    int64_t nq = (int64_t)B * sq * H * D, nk = (int64_t)B * sk * H * D;
    uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2);
    double *o = malloc(nq * 8), *lse = malloc((size_t)B * H * sq * 8);
    double *o2 = malloc(nq * 8), *lse2 = malloc((size_t)B * H * sq * 8);
    fill(q, nq, &r), fill(k, nk, &r), fill(v, nk, &r);
    fm_ref_problem p = {B, H, D, 0.37, m, q, k, v};
    cr_assert_eq(fm_reference_forward(&p, FM_REF_FP64, o, lse, NULL), FM_OK);
    cr_assert_eq(fm_reference_forward(&p, FM_REF_BF16_FP32, o2, lse2, NULL), FM_OK);
    for (int32_t b = 0; b < B; b++)
      for (int32_t h = 0; h < H; h++)
        for (int32_t i = 0; i < sq; i++) {
          int32_t set = fm_colmask_set_index(m, b, h);
          double s[40], mx = -INFINITY;
          for (int32_t j = 0; j < sk; j++) {
            s[j] = -INFINITY;
            if (fm_colmask_masked(m, set, i, j)) continue;
            double acc = 0;
            for (int32_t d = 0; d < D; d++)
              acc += (double)fm_bf16_to_f32(q[((b * sq + i) * H + h) * D + d]) *
                     fm_bf16_to_f32(k[((b * sk + j) * H + h) * D + d]);
            s[j] = 0.37 * acc;
            mx = fmax(mx, s[j]);
          }
          double l = 0;
          for (int32_t j = 0; j < sk; j++) l += isinf(s[j]) ? 0 : exp(s[j] - mx);
          double got_lse = lse[(b * H + h) * sq + i];
          double got_lse2 = lse2[(b * H + h) * sq + i];
          if (l == 0) {
            cr_expect(isinf(got_lse) && got_lse < 0, "empty row: LSE %g", got_lse);
            cr_expect(isinf(got_lse2) && got_lse2 < 0);
          } else {
            cr_expect(fabs(got_lse - (mx + log(l))) < 1e-9, "LSE %g vs %g", got_lse, mx + log(l));
            cr_expect(fabs(got_lse2 - got_lse) < 1e-4 * (1 + fabs(got_lse)));
          }
          for (int32_t d = 0; d < D; d++) {
            double want = 0;
            for (int32_t j = 0; j < sk; j++)
              if (!isinf(s[j]))
                want += exp(s[j] - mx) * fm_bf16_to_f32(v[((b * sk + j) * H + h) * D + d]);
            want = l == 0 ? 0 : want / l;
            double got = o[((b * sq + i) * H + h) * D + d];
            double got2 = o2[((b * sq + i) * H + h) * D + d];
            cr_expect(fabs(got - want) < 1e-9, "O %g vs %g", got, want);
            cr_expect(fabs(got2 - want) <= 1e-2 + 1e-2 * fabs(want), "same precision %g vs %g",
                      got2, want);
            cr_expect_eq(got2, (double)fm_round_bf16((float)got2), "same-precision O is bf16");
          }
        }
    free(q), free(k), free(v), free(o), free(lse), free(o2), free(lse2);
    fm_colmask_destroy(m);
  }
}

Test(reference, compare_counts) {
  double ref[4] = {1.0, -INFINITY, 2.0, 0.0};
  float got[4] = {1.001f, -INFINITY, 2.5f, NAN};
  fm_compare_result c;
  fm_compare_f32(got, ref, 4, 1e-2, 0, &c);
  cr_expect_eq(c.bad, 2);
  cr_expect_eq(c.first_bad, 2);
  cr_expect_eq(c.worst, 2);
  cr_expect(fabs(c.max_abs_err - 0.5) < 1e-6);
}

Test(reference, bad_arguments) {
  fm_err err;
  double o, l;
  fm_ref_problem p = {1, 1, 4, 1.0, NULL, NULL, NULL, NULL};
  cr_expect_eq(fm_reference_forward(&p, FM_REF_FP64, &o, &l, &err), FM_EINVAL);
}

/* ---- the backward ------------------------------------------------------------------------ */

/* A tiny problem with double inputs (uniform in [-2, 2]) and a random mask. */
typedef struct tiny {
  int32_t B, H, D, sq, sk;
  fm_colmask *m;
  fm_ref_problem p;
  int64_t nq, nk;
  double *q, *k, *v, *dout, *dq, *dk, *dv;
} tiny;

static double uni(fm_rng *r) { return (double)fm_rng_below(r, 1u << 30) / (1 << 29) - 1.0; }

static void tiny_make(tiny *t, fm_rng *r, int32_t sq, int32_t sk, int32_t nb, int32_t nh,
                      int causal) {
  memset(t, 0, sizeof *t);
  t->B = 2, t->H = 2, t->D = 1 + (int32_t)fm_rng_below(r, 4), t->sq = sq, t->sk = sk;
  t->m = fmt_random_mask(r, sq, sk, nb, nh, causal);
  cr_assert_not_null(t->m);
  t->nq = (int64_t)t->B * sq * t->H * t->D, t->nk = (int64_t)t->B * sk * t->H * t->D;
  double **in[7] = {&t->q, &t->dout, &t->dq, &t->k, &t->v, &t->dk, &t->dv};
  for (int a = 0; a < 7; a++) *in[a] = malloc(sizeof(double) * (size_t)(a < 3 ? t->nq : t->nk));
  for (int64_t i = 0; i < t->nq; i++) t->q[i] = uni(r), t->dout[i] = uni(r);
  for (int64_t i = 0; i < t->nk; i++) t->k[i] = uni(r), t->v[i] = uni(r);
  t->p = (fm_ref_problem){.batch = t->B, .heads = t->H, .head_dim = t->D, .softmax_scale = 0.8,
                          .mask = t->m};
}

static void tiny_free(tiny *t) {
  free(t->q), free(t->k), free(t->v), free(t->dout), free(t->dq), free(t->dk), free(t->dv);
  fm_colmask_destroy(t->m);
}

static void tiny_backward(tiny *t) {
  fm_err err;
  cr_assert_eq(fm_reference_backward_f64(&t->p, t->q, t->k, t->v, t->dout, t->dq, t->dk, t->dv,
                                         &err), FM_OK, "%s", err.msg);
}

/* L = sum O * dO, by the fp64 forward. */
static double tiny_loss(const tiny *t) {
  double *o = malloc(sizeof(double) * (size_t)t->nq), *lse = malloc(sizeof(double) * (size_t)t->B * t->H * t->sq);
  cr_assert_eq(fm_reference_forward_f64(&t->p, t->q, t->k, t->v, o, lse, NULL), FM_OK);
  double l = 0;
  for (int64_t i = 0; i < t->nq; i++) l += o[i] * t->dout[i];
  free(o), free(lse);
  return l;
}

Test(reference_backward, matches_finite_differences_of_the_forward) {
  fm_rng r;
  fm_rng_seed(&r, 77, 0);
  const double h = 1e-6;
  for (int iter = 0; iter < 16; iter++) {
    tiny t;
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 7), sk = iter % 4 == 0 ? sq : 1 + (int32_t)fm_rng_below(&r, 7);
    tiny_make(&t, &r, sq, sk, iter % 3 == 0 ? 2 : 1, iter % 5 == 0 ? 2 : 1, iter & 1);
    tiny_backward(&t);
    double *x[3] = {t.q, t.k, t.v}, *g[3] = {t.dq, t.dk, t.dv};
    int64_t n[3] = {t.nq, t.nk, t.nk};
    for (int a = 0; a < 3; a++)
      for (int64_t i = 0; i < n[a]; i++) {
        double keep = x[a][i];
        x[a][i] = keep + h;
        double up = tiny_loss(&t);
        x[a][i] = keep - h;
        double down = tiny_loss(&t);
        x[a][i] = keep;
        double fd = (up - down) / (2 * h);
        cr_assert(fabs(fd - g[a][i]) <= 1e-6 * (1 + fabs(fd)),
                  "iter %d (Sq %d, Sk %d, causal %d) %s[%lld]: analytic %.9g, finite differences %.9g",
                  iter, sq, sk, iter & 1, a == 0 ? "dQ" : a == 1 ? "dK" : "dV", (long long)i, g[a][i], fd);
      }
    tiny_free(&t);
  }
}

/* Index of element d of row `row` of (b, h) in a (B, S, H, D) tensor. */
static int64_t at(const tiny *t, int32_t S, int32_t b, int32_t row, int32_t h, int32_t d) {
  return (((int64_t)b * S + row) * t->H + h) * t->D + d;
}

Test(reference_backward, symmetries) {
  fm_rng r;
  fm_rng_seed(&r, 78, 0);
  for (int iter = 0; iter < 20; iter++) {
    tiny t;
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 12), sk = 1 + (int32_t)fm_rng_below(&r, 12);
    tiny_make(&t, &r, sq, sk, 1, iter % 2 ? 2 : 1, iter % 3 == 0);
    tiny_backward(&t);
    for (int32_t b = 0; b < t.B; b++)
      for (int32_t h = 0; h < t.H; h++) {
        int32_t set = fm_colmask_set_index(t.m, b, h);
        /* a shift of every key leaves the softmax alone: sum_j dK_j = 0; a shift of every value
           moves each row that sees a key by it: sum_j dV_j = sum of dO over those rows;
           sum_i q_i . dQ_i = sum_j k_j . dK_j (both are scale sum dS q.k) */
        double qdq = 0, kdk = 0;
        for (int32_t d = 0; d < t.D; d++) {
          double sk_ = 0, sv = 0, so = 0;
          for (int32_t j = 0; j < sk; j++) {
            sk_ += t.dk[at(&t, sk, b, j, h, d)];
            sv += t.dv[at(&t, sk, b, j, h, d)];
            kdk += t.k[at(&t, sk, b, j, h, d)] * t.dk[at(&t, sk, b, j, h, d)];
          }
          for (int32_t i = 0; i < sq; i++) {
            int seen = 0;
            for (int32_t j = 0; j < sk; j++) seen |= !fm_colmask_masked(t.m, set, i, j);
            if (seen) so += t.dout[at(&t, sq, b, i, h, d)];
            qdq += t.q[at(&t, sq, b, i, h, d)] * t.dq[at(&t, sq, b, i, h, d)];
          }
          cr_assert(fabs(sk_) < 1e-12, "sum of dK %g", sk_);
          cr_assert(fabs(sv - so) < 1e-12, "sum of dV %g, of dO %g", sv, so);
        }
        cr_assert(fabs(qdq - kdk) < 1e-12 * (1 + fabs(qdq)), "q.dQ %g, k.dK %g", qdq, kdk);
      }
    /* dV is linear in dO and does not depend on V; dQ and dK do not depend on a shift of V */
    double *dv1 = malloc(sizeof(double) * (size_t)t.nk), *dk1 = malloc(sizeof(double) * (size_t)t.nk);
    double *dq1 = malloc(sizeof(double) * (size_t)t.nq);
    memcpy(dv1, t.dv, sizeof(double) * (size_t)t.nk);
    memcpy(dk1, t.dk, sizeof(double) * (size_t)t.nk);
    memcpy(dq1, t.dq, sizeof(double) * (size_t)t.nq);
    for (int64_t i = 0; i < t.nq; i++) t.dout[i] *= 3.0;
    for (int64_t i = 0; i < t.nk; i++) t.v[i] += 0.5;
    tiny_backward(&t);
    for (int64_t i = 0; i < t.nk; i++) {
      cr_assert(fabs(t.dv[i] - 3.0 * dv1[i]) < 1e-12, "dV(3 dO) %g vs 3 dV(dO) %g", t.dv[i], 3 * dv1[i]);
      cr_assert(fabs(t.dk[i] - 3.0 * dk1[i]) < 1e-12, "dK %g vs %g", t.dk[i], 3 * dk1[i]);
    }
    for (int64_t i = 0; i < t.nq; i++)
      cr_assert(fabs(t.dq[i] - 3.0 * dq1[i]) < 1e-12, "dQ %g vs %g", t.dq[i], 3 * dq1[i]);
    /* all keys equal: the scores of a row are all the same, dQ = 0 */
    for (int32_t b = 0; b < t.B; b++)
      for (int32_t h = 0; h < t.H; h++)
        for (int32_t j = 0; j < sk; j++)
          for (int32_t d = 0; d < t.D; d++) t.k[at(&t, sk, b, j, h, d)] = t.k[at(&t, sk, b, 0, h, d)];
    tiny_backward(&t);
    for (int64_t i = 0; i < t.nq; i++) cr_assert(fabs(t.dq[i]) < 1e-12, "dQ %g with equal keys", t.dq[i]);
    free(dv1), free(dk1), free(dq1);
    tiny_free(&t);
  }
}

Test(reference_backward, empty_rows_and_keys_get_nothing) {
  /* Sq = 6, Sk = 5 bidirectional: rows 2 and 3 see no key (every column masks them), key 4 is
     seen by no row, keys 0..3 by rows 0, 1, 4, 5 */
  fm_colmask *m = NULL;
  cr_assert_eq(fm_colmask_create(6, 5, 1, 1, 0, &m, NULL), FM_OK);
  for (int32_t j = 0; j < 5; j++) {
    fm_colmask_vec(m, 0, FM_LTS)[j] = j == 4 ? 0 : 2;
    fm_colmask_vec(m, 0, FM_LTE)[j] = j == 4 ? 6 : 4;
  }
  fm_rng r;
  fm_rng_seed(&r, 79, 0);
  const int32_t B = 1, H = 1, D = 8, nq = 6 * D, nk = 5 * D;
  uint16_t q[6 * 8], k[5 * 8], v[5 * 8], dout[6 * 8];
  fill(q, nq, &r), fill(k, nk, &r), fill(v, nk, &r), fill(dout, nq, &r);
  fm_ref_problem p = {B, H, D, 0.35, m, q, k, v};
  for (int mode = 0; mode < 2; mode++) {
    double dq[6 * 8], dk[5 * 8], dv[5 * 8];
    cr_assert_eq(fm_reference_backward(&p, dout, (fm_ref_mode)mode, dq, dk, dv, NULL), FM_OK);
    for (int32_t d = 0; d < D; d++) {
      cr_assert_eq(dq[2 * D + d], 0.0, "mode %d: row 2 sees nothing", mode);
      cr_assert_eq(dq[3 * D + d], 0.0, "mode %d: row 3 sees nothing", mode);
      cr_assert_eq(dk[4 * D + d], 0.0, "mode %d: key 4 is seen by nobody", mode);
      cr_assert_eq(dv[4 * D + d], 0.0, "mode %d: key 4 is seen by nobody", mode);
    }
    double any = 0;
    for (int32_t i = 0; i < 4 * D; i++) any += fabs(dk[i]) + fabs(dv[i]);
    cr_assert(any > 0, "mode %d: the visible keys get gradients", mode);
  }
  /* rows that see nothing are as if their dO were zero */
  double dk1[5 * 8], dv1[5 * 8], dq1[6 * 8], dk2[5 * 8], dv2[5 * 8], dq2[6 * 8];
  cr_assert_eq(fm_reference_backward(&p, dout, FM_REF_FP64, dq1, dk1, dv1, NULL), FM_OK);
  for (int32_t d = 0; d < 2 * D; d++) dout[2 * D + d] = fm_f32_to_bf16(5.0f);
  cr_assert_eq(fm_reference_backward(&p, dout, FM_REF_FP64, dq2, dk2, dv2, NULL), FM_OK);
  cr_assert_eq(memcmp(dk1, dk2, sizeof dk1), 0);
  cr_assert_eq(memcmp(dv1, dv2, sizeof dv1), 0);
  cr_assert_eq(memcmp(dq1, dq2, sizeof dq1), 0);
  fm_colmask_destroy(m);
}

Test(reference_backward, per_head_sets_are_their_own_problems) {
  /* H = 3 heads with a set each: head h's gradients are those of a one-head problem with
     set h's vectors and head h's slices */
  fm_rng r;
  fm_rng_seed(&r, 80, 0);
  const int32_t B = 2, H = 3, D = 4, sq = 9, sk = 7;
  fm_colmask *m = fmt_random_mask(&r, sq, sk, B, H, 1);
  cr_assert_not_null(m);
  const int64_t nq = (int64_t)B * sq * H * D, nk = (int64_t)B * sk * H * D;
  uint16_t *q = malloc(2 * nq), *k = malloc(2 * nk), *v = malloc(2 * nk), *dout = malloc(2 * nq);
  fill(q, nq, &r), fill(k, nk, &r), fill(v, nk, &r), fill(dout, nq, &r);
  double *dq = malloc(8 * nq), *dk = malloc(8 * nk), *dv = malloc(8 * nk);
  fm_ref_problem p = {B, H, D, 0.5, m, q, k, v};
  cr_assert_eq(fm_reference_backward(&p, dout, FM_REF_FP64, dq, dk, dv, NULL), FM_OK);
  for (int32_t b = 0; b < B; b++)
    for (int32_t h = 0; h < H; h++) {
      fm_colmask *one = NULL;
      cr_assert_eq(fm_colmask_create(sq, sk, 1, 1, 1, &one, NULL), FM_OK);
      int32_t set = fm_colmask_set_index(m, b, h);
      for (int v4 = 0; v4 < 4; v4++)
        memcpy(fm_colmask_vec(one, 0, (fm_vec)v4), fm_colmask_cvec(m, set, (fm_vec)v4), 4 * sk);
      uint16_t q1[9 * 4], k1[7 * 4], v1[7 * 4], do1[9 * 4];
      for (int32_t i = 0; i < sq; i++)
        for (int32_t d = 0; d < D; d++) {
          q1[i * D + d] = q[(((int64_t)b * sq + i) * H + h) * D + d];
          do1[i * D + d] = dout[(((int64_t)b * sq + i) * H + h) * D + d];
        }
      for (int32_t j = 0; j < sk; j++)
        for (int32_t d = 0; d < D; d++) {
          k1[j * D + d] = k[(((int64_t)b * sk + j) * H + h) * D + d];
          v1[j * D + d] = v[(((int64_t)b * sk + j) * H + h) * D + d];
        }
      double dq1[9 * 4], dk1[7 * 4], dv1[7 * 4];
      fm_ref_problem p1 = {1, 1, D, 0.5, one, q1, k1, v1};
      cr_assert_eq(fm_reference_backward(&p1, do1, FM_REF_FP64, dq1, dk1, dv1, NULL), FM_OK);
      for (int32_t i = 0; i < sq; i++)
        for (int32_t d = 0; d < D; d++)
          cr_assert_eq(dq1[i * D + d], dq[(((int64_t)b * sq + i) * H + h) * D + d], "b %d h %d", b, h);
      for (int32_t j = 0; j < sk; j++)
        for (int32_t d = 0; d < D; d++) {
          cr_assert_eq(dk1[j * D + d], dk[(((int64_t)b * sk + j) * H + h) * D + d], "b %d h %d", b, h);
          cr_assert_eq(dv1[j * D + d], dv[(((int64_t)b * sk + j) * H + h) * D + d], "b %d h %d", b, h);
        }
      fm_colmask_destroy(one);
    }
  free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv);
  fm_colmask_destroy(m);
}

/* Standard normal bf16 values, as the kernel checks draw them. */
static void fill_normal(uint16_t *x, int64_t n, fm_rng *r) {
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = ((double)(fm_rng_next(r) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(fm_rng_next(r) >> 11) * 0x1.0p-53;
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    x[i] = fm_f32_to_bf16((float)(rad * cos(th)));
    if (i + 1 < n) x[i + 1] = fm_f32_to_bf16((float)(rad * sin(th)));
  }
}

Test(reference_backward, same_precision_within_the_tolerance_rule) {
  fm_rng r;
  fm_rng_seed(&r, 81, 0);
  double worst[3] = {0, 0, 0};
  for (int iter = 0; iter < 10; iter++) {
    int32_t sq = 16 + (int32_t)fm_rng_below(&r, 300), sk = iter % 3 ? sq : 16 + (int32_t)fm_rng_below(&r, 300);
    int32_t B = 1, H = 2, D = iter & 1 ? 128 : 64;
    fm_colmask *m = fmt_random_mask(&r, sq, sk, 1, iter % 4 == 0 ? 2 : 1, iter & 1);
    cr_assert_not_null(m);
    int64_t nq = (int64_t)B * sq * H * D, nk = (int64_t)B * sk * H * D;
    uint16_t *q = malloc(2 * nq), *k = malloc(2 * nk), *v = malloc(2 * nk), *dout = malloc(2 * nq);
    fill_normal(q, nq, &r), fill_normal(k, nk, &r), fill_normal(v, nk, &r), fill_normal(dout, nq, &r);
    double *g64[3] = {malloc(8 * nq), malloc(8 * nk), malloc(8 * nk)};
    double *g32[3] = {malloc(8 * nq), malloc(8 * nk), malloc(8 * nk)};
    fm_ref_problem p = {B, H, D, 1.0 / sqrt(D), m, q, k, v};
    cr_assert_eq(fm_reference_backward(&p, dout, FM_REF_FP64, g64[0], g64[1], g64[2], NULL), FM_OK);
    cr_assert_eq(fm_reference_backward(&p, dout, FM_REF_BF16_FP32, g32[0], g32[1], g32[2], NULL), FM_OK);
    int64_t n[3] = {nq, nk, nk};
    for (int g = 0; g < 3; g++) {
      fm_ref_quantity qn = (fm_ref_quantity)(FM_REF_Q_DQ + g);
      fm_ref_tol tol = fm_ref_tolerance(qn);
      fm_compare_result c;
      fm_compare_f64(g32[g], g64[g], n[g], tol.atol, tol.rtol, &c);
      cr_assert_eq(c.bad, 0, "iter %d %s: %lld of %lld outside the tolerance (first at %lld: %g vs %g)",
                   iter, fm_ref_quantity_name(qn), (long long)c.bad, (long long)n[g],
                   (long long)c.first_bad, c.first_bad >= 0 ? g32[g][c.first_bad] : 0,
                   c.first_bad >= 0 ? g64[g][c.first_bad] : 0);
      /* half the atol is enough beside the rtol: the rule is not at its edge */
      fm_compare_f64(g32[g], g64[g], n[g], tol.atol / 2, tol.rtol, &c);
      cr_assert_eq(c.bad, 0, "iter %d %s: within atol / 2 fails", iter, fm_ref_quantity_name(qn));
      if (c.max_abs_err > worst[g]) worst[g] = c.max_abs_err;
      for (int64_t i = 0; i < n[g]; i++)
        cr_assert_eq(g32[g][i], (double)fm_round_bf16((float)g32[g][i]), "same-precision output is bf16");
    }
    for (int g = 0; g < 3; g++) free(g64[g]), free(g32[g]);
    free(q), free(k), free(v), free(dout);
    fm_colmask_destroy(m);
  }
  for (int g = 0; g < 3; g++) cr_assert(worst[g] > 0, "the same-precision mode rounds (%d)", g);
}

Test(reference_backward, bf16_entry_is_the_f64_entry_on_widened_inputs) {
  fm_rng r;
  fm_rng_seed(&r, 82, 0);
  const int32_t B = 2, H = 2, D = 5, sq = 11, sk = 13;
  fm_colmask *m = fmt_random_mask(&r, sq, sk, 2, 1, 1);
  const int64_t nq = (int64_t)B * sq * H * D, nk = (int64_t)B * sk * H * D;
  uint16_t q[2 * 11 * 2 * 5], k[2 * 13 * 2 * 5], v[2 * 13 * 2 * 5], dout[2 * 11 * 2 * 5];
  double qd[2 * 11 * 2 * 5], kd[2 * 13 * 2 * 5], vd[2 * 13 * 2 * 5], dod[2 * 11 * 2 * 5];
  fill(q, nq, &r), fill(k, nk, &r), fill(v, nk, &r), fill(dout, nq, &r);
  for (int64_t i = 0; i < nq; i++) qd[i] = fm_bf16_to_f32(q[i]), dod[i] = fm_bf16_to_f32(dout[i]);
  for (int64_t i = 0; i < nk; i++) kd[i] = fm_bf16_to_f32(k[i]), vd[i] = fm_bf16_to_f32(v[i]);
  fm_ref_problem p = {B, H, D, 0.45, m, q, k, v};
  double a[3][2 * 13 * 2 * 5], b[3][2 * 13 * 2 * 5];
  cr_assert_eq(fm_reference_backward(&p, dout, FM_REF_FP64, a[0], a[1], a[2], NULL), FM_OK);
  cr_assert_eq(fm_reference_backward_f64(&p, qd, kd, vd, dod, b[0], b[1], b[2], NULL), FM_OK);
  cr_assert_eq(memcmp(a[0], b[0], 8 * nq), 0);
  cr_assert_eq(memcmp(a[1], b[1], 8 * nk), 0);
  cr_assert_eq(memcmp(a[2], b[2], 8 * nk), 0);
  double o1[2 * 11 * 2 * 5], o2[2 * 11 * 2 * 5], l1[2 * 2 * 11], l2[2 * 2 * 11];
  cr_assert_eq(fm_reference_forward(&p, FM_REF_FP64, o1, l1, NULL), FM_OK);
  cr_assert_eq(fm_reference_forward_f64(&p, qd, kd, vd, o2, l2, NULL), FM_OK);
  cr_assert_eq(memcmp(o1, o2, 8 * nq), 0);
  cr_assert_eq(memcmp(l1, l2, sizeof l1), 0);
  fm_colmask_destroy(m);
}

Test(reference_backward, bad_arguments) {
  fm_err err;
  double g;
  uint16_t x = 0;
  fm_colmask *m = NULL;
  cr_assert_eq(fm_colmask_create(1, 1, 1, 1, 0, &m, NULL), FM_OK);
  fm_ref_problem p = {1, 1, 1, 1.0, m, &x, &x, &x};
  cr_expect_eq(fm_reference_backward(&p, NULL, FM_REF_FP64, &g, &g, &g, &err), FM_EINVAL);
  cr_expect_eq(fm_reference_backward(&p, &x, (fm_ref_mode)7, &g, &g, &g, &err), FM_EINVAL);
  p.head_dim = 0;
  cr_expect_eq(fm_reference_backward(&p, &x, FM_REF_FP64, &g, &g, &g, &err), FM_EINVAL);
  fm_colmask_destroy(m);
}

Test(reference, tolerance_rule) {
  fm_ref_tol o = fm_ref_tolerance(FM_REF_Q_O), l = fm_ref_tolerance(FM_REF_Q_LSE);
  cr_expect(o.atol == 3e-3 && o.rtol == 1.5e-2, "the forward's O tolerance");
  cr_expect(l.atol == 1e-3 && l.rtol == 1e-4, "the forward's LSE tolerance");
  for (int q = FM_REF_Q_DQ; q <= FM_REF_Q_DV; q++) {
    fm_ref_tol t = fm_ref_tolerance((fm_ref_quantity)q);
    cr_expect(t.atol > 0 && t.rtol > 0 && t.atol < 0.1 && t.rtol < 0.05, "%s", fm_ref_quantity_name((fm_ref_quantity)q));
  }
  cr_expect_str_eq(fm_ref_quantity_name(FM_REF_Q_DK), "dK");
  cr_expect_eq(fm_ref_tolerance(FM_REF_NQUANTITIES).atol, 0);
  fm_compare_result gpu = {.max_abs_err = 0.02}, cpu = {.max_abs_err = 0.01};
  cr_expect(fm_ref_within_twice(&gpu, &cpu));
  gpu.max_abs_err = 0.0201;
  cr_expect(!fm_ref_within_twice(&gpu, &cpu));
  gpu.max_abs_err = cpu.max_abs_err = 0; /* two exact results */
  cr_expect(fm_ref_within_twice(&gpu, &cpu));
}
