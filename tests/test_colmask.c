/* Tests of the interval mask type and the forms: validation, masked(i,j),
 * column runs, canonical form, semantic equality and re-expression in a form,
 * all against dense brute-force expansion of random small masks. */
#include <criterion/criterion.h>

#include "fm_forms.h"
#include "fm_test_util.h"

Test(colmask, create_is_canonical_empty) {
  fm_colmask *m;
  cr_assert_eq(fm_colmask_create(7, 5, 1, 1, 0, &m, NULL), FM_OK);
  for (int32_t j = 0; j < 5; j++) {
    cr_assert_eq(fm_colmask_cvec(m, 0, FM_LTS)[j], 7);
    cr_assert_eq(fm_colmask_cvec(m, 0, FM_LTE)[j], 7);
    cr_assert_eq(fm_colmask_cvec(m, 0, FM_UTS)[j], 0);
    cr_assert_eq(fm_colmask_cvec(m, 0, FM_UTE)[j], 0);
    for (int32_t i = 0; i < 7; i++) cr_assert(!fm_colmask_masked(m, 0, i, j));
  }
  cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
  fm_colmask_destroy(m);
  fm_colmask_destroy(NULL); /* no-op */
}

Test(colmask, create_rejects_bad_sizes) {
  fm_colmask *m;
  fm_err e;
  cr_assert_eq(fm_colmask_create(0, 5, 1, 1, 0, &m, &e), FM_EINVAL);
  cr_assert_null(m);
  cr_assert_eq(fm_colmask_create(5, -1, 1, 1, 0, &m, &e), FM_EINVAL);
  cr_assert_eq(fm_colmask_create((int64_t)FM_MAX_SEQLEN + 1, 5, 1, 1, 0, &m, &e), FM_EINVAL);
  cr_assert(strstr(e.msg, "int32") != NULL, "%s", e.msg);
  cr_assert_eq(fm_colmask_create(5, 5, 0, 1, 0, &m, &e), FM_EINVAL);
  /* 65535 x 65535 sets of 1M columns: refused up front, not attempted */
  cr_assert_eq(fm_colmask_create(1 << 20, 1 << 20, 65535, 65535, 0, &m, &e), FM_ENOMEM);
  cr_assert(strstr(e.msg, "GiB") != NULL, "%s", e.msg);
}

Test(colmask, validate_names_the_problem) {
  fm_colmask *m;
  fm_err e;
  fm_colmask_create(10, 10, 1, 1, 0, &m, NULL);
  fm_colmask_vec(m, 0, FM_LTS)[3] = 11;
  cr_assert_eq(fm_colmask_validate(m, &e), FM_ERANGE);
  cr_assert(strstr(e.msg, "column 3") && strstr(e.msg, "LTS = 11"), "%s", e.msg);
  fm_colmask_vec(m, 0, FM_LTS)[3] = 6;
  fm_colmask_vec(m, 0, FM_LTE)[3] = 5;
  cr_assert_eq(fm_colmask_validate(m, &e), FM_ERANGE);
  cr_assert(strstr(e.msg, "LTS = 6 > LTE = 5"), "%s", e.msg);
  fm_colmask_vec(m, 0, FM_LTE)[3] = 10;
  fm_colmask_vec(m, 0, FM_UTE)[4] = -1;
  cr_assert_eq(fm_colmask_validate(m, &e), FM_ERANGE);
  fm_colmask_destroy(m);
  /* causal: an upper interval detached from the triangle needs three intervals */
  fm_colmask_create(10, 10, 1, 1, 1, &m, NULL);
  fm_colmask_vec(m, 0, FM_UTS)[2] = 5;
  fm_colmask_vec(m, 0, FM_UTE)[2] = 7;
  cr_assert_eq(fm_colmask_validate(m, &e), FM_ERANGE);
  cr_assert(strstr(e.msg, "detached"), "%s", e.msg);
  fm_colmask_vec(m, 0, FM_UTS)[2] = 2; /* touches rows < 2: fine */
  cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
  fm_colmask_destroy(m);
}

Test(colmask, causal_alignment_is_bottom_right) {
  fm_colmask *m;
  fm_colmask_create(4, 6, 1, 1, 1, &m, NULL); /* Sq < Sk: c_j = j - 2 */
  for (int32_t i = 0; i < 4; i++)
    for (int32_t j = 0; j < 6; j++) cr_assert_eq(fm_colmask_masked(m, 0, i, j), i < j - 2);
  fm_colmask_destroy(m);
  fm_colmask_create(6, 4, 1, 1, 1, &m, NULL); /* Sq > Sk: c_j = j + 2 */
  for (int32_t i = 0; i < 6; i++)
    for (int32_t j = 0; j < 4; j++) cr_assert_eq(fm_colmask_masked(m, 0, i, j), i < j + 2);
  fm_colmask_destroy(m);
}

/* The runs of a dense column, for comparisons. */
static int dense_runs(const uint8_t *d, int32_t sq, int32_t sk, int32_t j, int32_t runs[][2]) {
  int n = 0;
  for (int32_t i = 0; i < sq; i++) {
    if (!d[(size_t)i * sk + j]) continue;
    if (n > 0 && runs[n - 1][1] == i) runs[n - 1][1] = i + 1;
    else {
      runs[n][0] = i;
      runs[n][1] = i + 1;
      n++;
    }
  }
  return n;
}

Test(colmask, random_masks_match_dense_expansion) {
  fm_rng r;
  fm_rng_seed(&r, 1, 0);
  for (int iter = 0; iter < 300; iter++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 24), sk = 1 + (int32_t)fm_rng_below(&r, 24);
    int causal = (int)fm_rng_below(&r, 2);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, 1, 1, causal);
    cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
    uint8_t *d = fmt_dense(m, 0);
    for (int32_t j = 0; j < sk; j++) {
      int32_t rr[3][2], dr[64][2];
      int n = fm_colmask_column_runs(m, 0, j, rr), dn = dense_runs(d, sq, sk, j, dr);
      cr_assert_eq(n, dn, "iter %d column %d", iter, j);
      for (int k = 0; k < n; k++) cr_assert(rr[k][0] == dr[k][0] && rr[k][1] == dr[k][1]);
      for (int32_t i = 0; i < sq; i++)
        cr_assert_eq(fm_colmask_masked(m, 0, i, j), d[(size_t)i * sk + j]);
    }
    /* canonical form: same dense mask, canonical empties, idempotent */
    fm_colmask *c;
    fm_colmask_clone(m, &c, NULL);
    fm_colmask_canonicalize(c);
    cr_assert_eq(fm_colmask_validate(c, NULL), FM_OK);
    uint8_t *dc = fmt_dense(c, 0);
    cr_assert_eq(memcmp(d, dc, (size_t)sq * sk), 0, "canonicalize changed the mask");
    cr_assert(fm_colmask_equal(m, c));
    for (int32_t j = 0; j < sk; j++) {
      const int32_t lts = fm_colmask_cvec(c, 0, FM_LTS)[j], lte = fm_colmask_cvec(c, 0, FM_LTE)[j];
      const int32_t uts = fm_colmask_cvec(c, 0, FM_UTS)[j], ute = fm_colmask_cvec(c, 0, FM_UTE)[j];
      if (lts == lte) cr_assert(lts == sq, "empty LT not canonical");
      if (uts == ute) cr_assert(uts == 0, "empty UT not canonical");
    }
    fm_colmask *c2;
    fm_colmask_clone(c, &c2, NULL);
    fm_colmask_canonicalize(c2);
    for (int k = 0; k < 4; k++)
      cr_assert_eq(memcmp(fm_colmask_cvec(c, 0, (fm_vec)k), fm_colmask_cvec(c2, 0, (fm_vec)k),
                          sizeof(int32_t) * (size_t)sk), 0);
    /* every form that fits re-expresses the same mask; smallest form is the first that fits */
    fm_form smallest = fm_colmask_smallest_form(m);
    int seen_fit = 0;
    for (int f = 0; f < FM_FORM_COUNT; f++) {
      fm_colmask *t = NULL;
      fm_status st = fm_colmask_to_form(m, (fm_form)f, &t, NULL);
      if (st == FM_OK) {
        cr_assert_eq(fm_colmask_causal(t), fm_form_causal((fm_form)f));
        cr_assert_eq(fm_colmask_validate(t, NULL), FM_OK);
        uint8_t *dt = fmt_dense(t, 0);
        cr_assert_eq(memcmp(d, dt, (size_t)sq * sk), 0, "form %s changed the mask",
                     fm_form_name((fm_form)f));
        free(dt);
        if (!seen_fit) cr_assert_eq(smallest, f);
        seen_fit = 1;
        /* the form's implicit vectors really are implicit */
        if (f == FM_FORM_CAUSAL1 || f == FM_FORM_BIDIR2)
          for (int32_t j = 0; j < sk; j++) cr_assert_eq(fm_colmask_cvec(t, 0, FM_LTE)[j], sq);
        if (f != FM_FORM_BIDIR4)
          for (int32_t j = 0; j < sk; j++) cr_assert_eq(fm_colmask_cvec(t, 0, FM_UTS)[j], 0);
        if (f == FM_FORM_CAUSAL1 || f == FM_FORM_CAUSAL2)
          for (int32_t j = 0; j < sk; j++) cr_assert_eq(fm_colmask_cvec(t, 0, FM_UTE)[j], 0);
      } else {
        cr_assert_eq(st, FM_EUNSUPPORTED);
        cr_assert_null(t);
      }
      fm_colmask_destroy(t);
    }
    cr_assert(seen_fit, "bidir-4 always holds a valid mask");
    free(d);
    free(dc);
    fm_colmask_destroy(m);
    fm_colmask_destroy(c);
    fm_colmask_destroy(c2);
  }
}

Test(colmask, equality_is_semantic) {
  fm_colmask *a, *b;
  fm_colmask_create(10, 10, 1, 1, 0, &a, NULL);
  fm_colmask_create(10, 10, 1, 1, 1, &b, NULL);
  cr_assert(!fm_colmask_equal(a, b));
  /* the causal triangle written as upper intervals equals the causal flag */
  for (int32_t j = 0; j < 10; j++) fm_colmask_vec(a, 0, FM_UTE)[j] = j;
  cr_assert(fm_colmask_equal(a, b));
  /* empty intervals anywhere are equal */
  fm_colmask_vec(a, 0, FM_LTS)[4] = 5;
  fm_colmask_vec(a, 0, FM_LTE)[4] = 5;
  cr_assert(fm_colmask_equal(a, b));
  fm_colmask_vec(a, 0, FM_LTE)[4] = 6;
  cr_assert(!fm_colmask_equal(a, b));
  fm_colmask_destroy(a);
  fm_colmask_destroy(b);
  /* a shared mask equals per-head copies of itself, not a different head */
  fm_colmask_create(8, 8, 1, 1, 1, &a, NULL);
  fm_colmask_create(8, 8, 2, 3, 1, &b, NULL);
  cr_assert(fm_colmask_equal(a, b));
  fm_colmask_vec(b, fm_colmask_set_index(b, 1, 2), FM_LTS)[0] = 3;
  cr_assert(!fm_colmask_equal(a, b));
  cr_assert_eq(fm_colmask_set_index(a, 1, 2), 0);
  cr_assert_eq(fm_colmask_set_index(b, 1, 2), 5);
  fm_colmask_destroy(a);
  fm_colmask_destroy(b);
}

Test(forms, names_parse_and_sizes) {
  fm_form f;
  fm_err e;
  for (int k = 0; k < FM_FORM_COUNT; k++) {
    cr_assert_eq(fm_form_parse(fm_form_name((fm_form)k), &f, NULL), FM_OK);
    cr_assert_eq(f, k);
  }
  cr_assert_eq(fm_form_parse("causal-3", &f, &e), FM_EINVAL);
  cr_assert(strstr(e.msg, "causal-3"));
  cr_assert_eq(fm_form_from_k(1, 1), FM_FORM_CAUSAL1);
  cr_assert_eq(fm_form_from_k(2, 1), FM_FORM_CAUSAL2);
  cr_assert_eq(fm_form_from_k(2, 0), FM_FORM_BIDIR2);
  cr_assert_eq(fm_form_from_k(4, 0), FM_FORM_BIDIR4);
  cr_assert_eq(fm_form_from_k(1, 0), FM_FORM_NONE);
  cr_assert_eq(fm_form_from_k(4, 1), FM_FORM_NONE);
}

Test(forms, runs_fit_cases) {
  const int32_t sq = 10;
  int32_t none[1][2] = {{0, 0}};
  cr_assert_eq(fm_runs_fit((const int32_t(*)[2])none, 0, 0, sq), 0xFu);
  /* causal triangle only (c = 4): every form */
  int32_t tri[1][2] = {{0, 4}};
  cr_assert_eq(fm_runs_fit((const int32_t(*)[2])tri, 1, 4, sq), 0xFu);
  /* triangle + a run reaching the bottom: causal-1 */
  int32_t tri_low[2][2] = {{0, 4}, {7, 10}};
  cr_assert(fm_runs_fit((const int32_t(*)[2])tri_low, 2, 4, sq) & (1u << FM_FORM_CAUSAL1));
  /* triangle + a run in the middle: causal-2, bidir-4, not causal-1 or bidir-2 */
  int32_t tri_mid[2][2] = {{0, 4}, {6, 8}};
  unsigned fit = fm_runs_fit((const int32_t(*)[2])tri_mid, 2, 4, sq);
  cr_assert_eq(fit, (1u << FM_FORM_CAUSAL2) | (1u << FM_FORM_BIDIR4));
  /* rows [0, c) not all masked: no causal form */
  int32_t mid[1][2] = {{6, 8}};
  cr_assert_eq(fm_runs_fit((const int32_t(*)[2])mid, 1, 4, sq), 1u << FM_FORM_BIDIR4);
  /* three runs: nothing */
  int32_t three[3][2] = {{0, 1}, {3, 4}, {6, 7}};
  cr_assert_eq(fm_runs_fit((const int32_t(*)[2])three, 3, 0, sq), 0u);
}
