/* Tests of the CPU reference attention (core/fm_reference.h) and the bf16
 * helpers (core/fm_bf16.h): rounding to nearest even, the fp64 reference
 * against a naive dense-mask computation, rows with no visible key, and the
 * same-precision mode staying close to fp64. */
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
