/* Tests of the interval mask type and the forms: validation, masked(i,j),
 * column runs, canonical form, semantic equality and re-expression in a form,
 * all against dense brute-force expansion of random small masks; and the one
 * interval-file loader read as Paddle reads files (values above Sq, starts
 * past their end), with --strict keeping the refusal, in every command. */
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

/* ---- interval files read as Paddle reads them (fm_intervals_io.h) ---- */

#include <sys/stat.h>

#include "fm_families.h"
#include "fm_intervals_io.h"
#include "fm_npy.h"

static const char *iv_path(const char *name) {
  static char buf[4][512];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 512, "%s/colmask_%s", FM_TEST_TMP_DIR, name);
  return p;
}

/* Paddle's benchmark generator for random eviction writes causal-1 int32
 * [B, H, S, 1] with LTS = S + 1 for the keys it never evicts. */
static fm_colmask *paddle_random_eviction(const char *path, int32_t S, int32_t H, int64_t *nplus) {
  const char *p[1] = {"r=40"};
  fm_family_request req = {.family = "random_eviction", .seqlen = S, .batch = 1, .heads = H,
                           .seed = 3, .sample = -1, .nparams = 1, .params = p};
  fm_colmask *m = NULL;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  int32_t *v = malloc(sizeof(int32_t) * (size_t)(S * H));
  *nplus = 0;
  for (int32_t h = 0; h < H; h++)
    for (int32_t j = 0; j < S; j++) {
      int32_t lts = fm_colmask_cvec(m, h, FM_LTS)[j];
      v[h * S + j] = lts == S ? S + 1 : lts;
      *nplus += lts == S;
    }
  int64_t shape[4] = {1, H, S, 1};
  cr_assert_eq(fm_npy_save(path, FM_DT_I32, 4, shape, v, NULL), FM_OK);
  free(v);
  return m;
}

Test(intervals_paddle, random_eviction_generator_output) {
  const char *path = iv_path("paddle_rev.npy");
  int64_t nplus;
  fm_colmask *want = paddle_random_eviction(path, 100, 3, &nplus);
  cr_assert_gt(nplus, 0);
  fm_intervals_opts o = {.causal = 1};
  fm_intervals_note note;
  fm_colmask *m = NULL;
  fm_err e;
  cr_assert_eq(fm_intervals_load(path, &o, &m, &note, &e), FM_OK, "%s", e.msg);
  cr_assert(fm_colmask_equal(m, want), "S + 1 reads as S: the same mask");
  cr_assert_eq(note.clamped, nplus);
  cr_assert_eq(note.emptied, 0);
  cr_assert(strstr(note.text, path) && strstr(note.text, "above Sq=100") && !strchr(note.text, '\n'),
            "%s", note.text);
  fm_colmask_destroy(m);
  /* strict: today's refusal, naming the first value */
  o.strict = 1;
  m = (fm_colmask *)1;
  cr_assert_eq(fm_intervals_load(path, &o, &m, &note, &e), FM_ERANGE);
  cr_assert_null(m);
  cr_assert(strstr(e.msg, "LTS = 101 is outside [0, Sq=100]"), "%s", e.msg);
  cr_assert_eq(note.clamped, 0);
  cr_assert_eq(fm_colmask_load_npy(path, 1, 0, &m, &e), FM_ERANGE, "the shorthand is strict");
  fm_colmask_destroy(want);
}

/* Writes v as an interval file and reads it back as Paddle would (causal flag
 * beside it); the read must succeed. */
static fm_colmask *save_and_load(const char *path, fm_dtype t, int64_t sk, int64_t k,
                                 const void *v, int causal, fm_intervals_note *note) {
  int64_t shape[4] = {1, 1, sk, k};
  cr_assert_eq(fm_npy_save(path, t, 4, shape, v, NULL), FM_OK);
  fm_intervals_opts o = {.causal = causal};
  fm_colmask *m = NULL;
  fm_err e;
  cr_assert_eq(fm_intervals_load(path, &o, &m, note, &e), FM_OK, "%s", e.msg);
  return m;
}

/* causal-2 [LTS, LTE] with LTE = S + 1 (documents), int64 as numpy writes by
 * default, and values far beyond int32. */
Test(intervals_paddle, lte_past_the_end_and_int64) {
  const char *path = iv_path("paddle_lte.npy");
  const int32_t S = 10;
  int64_t v[10][2];
  for (int j = 0; j < S; j++) {
    v[j][0] = j < 4 ? 4 : j < 7 ? 7 : S + 1; /* documents 4, 3, 3: end(doc) */
    v[j][1] = j == 9 ? (int64_t)1 << 40 : S + 1;
  }
  fm_intervals_note note;
  fm_colmask *m = save_and_load(path, FM_DT_I64, S, 2, v, 1, &note);
  cr_assert_eq(note.clamped, 13, "ten LTE and three LTS above Sq");
  const char *p[1] = {"docs=4,3,3"};
  fm_family_request req = {.family = "causal_document", .seqlen = S, .batch = 1, .heads = 1,
                           .sample = -1, .nparams = 1, .params = p};
  fm_colmask *want;
  cr_assert_eq(fm_family_build(&req, &want, NULL, NULL), FM_OK);
  cr_assert(fm_colmask_equal(m, want));
  fm_colmask_destroy(m);
  fm_colmask_destroy(want);
}

/* bidir-4 with starts past their ends: empty, counted; negatives: errors in
 * both readings. */
Test(intervals_paddle, reversed_intervals_are_empty_negatives_are_errors) {
  const char *path = iv_path("paddle_rev4.npy");
  const int32_t S = 8;
  int32_t v[8][4];
  for (int j = 0; j < S; j++) {
    v[j][0] = 6, v[j][1] = 3;         /* LT [6, 3): empty */
    v[j][2] = 0, v[j][3] = j < 4 ? 2 : 0; /* UT [0, 2) on the first four columns */
  }
  v[7][2] = 5, v[7][3] = 1; /* UT [5, 1): empty */
  fm_intervals_note note;
  fm_colmask *m = save_and_load(path, FM_DT_I32, S, 4, v, 0, &note);
  cr_assert_eq(note.emptied, 9);
  cr_assert_eq(note.clamped, 0);
  for (int32_t j = 0; j < S; j++)
    for (int32_t i = 0; i < S; i++)
      cr_assert_eq(fm_colmask_masked(m, 0, i, j), j < 4 && i < 2, "(%d, %d)", i, j);
  fm_colmask_destroy(m);
  fm_intervals_opts o = {.causal = 0, .strict = 1};
  fm_err e;
  cr_assert_eq(fm_intervals_load(path, &o, &m, &note, &e), FM_ERANGE);
  cr_assert(strstr(e.msg, "LTS = 6 > LTE = 3"), "%s", e.msg);
  v[2][1] = -1;
  int64_t shape[4] = {1, 1, S, 4};
  cr_assert_eq(fm_npy_save(path, FM_DT_I32, 4, shape, v, NULL), FM_OK);
  for (int strict = 0; strict < 2; strict++) {
    o.strict = strict;
    cr_assert_eq(fm_intervals_load(path, &o, &m, &note, &e), FM_ERANGE);
    cr_assert(strstr(e.msg, "column 2: LTE = -1 is outside [0, Sq=8]"), "%s", e.msg);
  }
}

Test(intervals_paddle, header_decides_the_form) {
  const fm_intervals_opts causal = {.causal = 1}, bidir = {.causal = 0},
                          from_k = {.causal_from_k = 1},
                          trace = {.causal = 1, .strict = 1, .four_vectors = 1};
  struct {
    fm_dtype t;
    int ndim;
    int64_t shape[4];
    const fm_intervals_opts *o;
    fm_status want;
    const char *needle; /* in the error; or "causal"/"bidir" for the flag read */
  } cases[] = {
      {FM_DT_I32, 4, {1, 1, 4, 4}, &causal, FM_EFORMAT, "bidir-4"},
      {FM_DT_I32, 4, {1, 1, 4, 4}, &from_k, FM_OK, "bidir"},
      {FM_DT_I32, 4, {1, 1, 16, 1}, &bidir, FM_EFORMAT, "causal-1"},
      {FM_DT_I32, 4, {1, 1, 16, 1}, &from_k, FM_OK, "causal"},
      {FM_DT_I32, 4, {1, 1, 4, 3}, &bidir, FM_EFORMAT, "not an interval file"},
      {FM_DT_BOOL, 2, {4, 4}, &bidir, FM_EFORMAT, "bool [4, 4] looks like a dense mask"},
      /* a trace's columns.npy: four vectors, the causal flag beside them */
      {FM_DT_I32, 4, {1, 1, 4, 4}, &trace, FM_OK, "causal"},
      {FM_DT_I32, 4, {1, 1, 16, 1}, &trace, FM_EFORMAT, "int32 [nb, nh, Sk, 4]"},
  };
  const char *path = iv_path("hdr.npy");
  int32_t v[16];
  for (int j = 0; j < 16; j++) v[j] = 4;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    cr_assert_eq(fm_npy_save(path, cases[c].t, cases[c].ndim, cases[c].shape, v, NULL), FM_OK);
    fm_colmask *m = NULL;
    fm_err e = {{0}};
    cr_assert_eq(fm_intervals_load(path, cases[c].o, &m, NULL, &e), cases[c].want, "case %zu: %s",
                 c, e.msg);
    if (cases[c].want == FM_OK)
      cr_assert_eq(fm_colmask_causal(m), !strcmp(cases[c].needle, "causal"), "case %zu", c);
    else
      cr_assert(strstr(e.msg, cases[c].needle), "case %zu: '%s' lacks '%s'", c, e.msg,
                cases[c].needle);
    fm_colmask_destroy(m);
  }
  fm_intervals_opts bad_sq = {.causal = 1, .sq = -3};
  fm_colmask *m;
  cr_assert_eq(fm_intervals_load(path, &bad_sq, &m, NULL, NULL), FM_EINVAL);
}

/* Every command that reads interval files: Paddle's reading with one note
 * line by default, today's refusal with --strict. */
static fmt_result run_res;

static void expect_note(const char *args, int want_status) {
  fmt_run(&run_res, args);
  cr_assert_eq(run_res.status, want_status, "fmsim %s: exit %d: %s", args, run_res.status,
               run_res.err);
  cr_assert_eq(run_res.err_lines, 1, "fmsim %s: one note line, got: %s", args, run_res.err);
  cr_assert(strstr(run_res.err, ": note: ") && strstr(run_res.err, "taken as Sq"), "%s",
            run_res.err);
}

static void expect_refusal(const char *args, int want_status, const char *out) {
  fmt_run(&run_res, args);
  cr_assert_eq(run_res.status, want_status, "fmsim %s: exit %d: %s", args, run_res.status,
               run_res.err);
  cr_assert_eq(run_res.err_lines, 1, "fmsim %s: %s", args, run_res.err);
  cr_assert(strstr(run_res.err, "is outside [0, Sq=100]"), "%s", run_res.err);
  struct stat sb;
  if (out) cr_assert_neq(stat(out, &sb), 0, "fmsim %s wrote %s", args, out);
}

Test(intervals_paddle, commands_read_paddle_files) {
  const char *path = iv_path("cli_rev.npy"), *out = iv_path("cli_rev_dense.npy");
  int64_t nplus;
  fm_colmask_destroy(paddle_random_eviction(path, 100, 2, &nplus));
  char args[2048];
  unlink(out);
  snprintf(args, sizeof args, "check --intervals %s --causal", path);
  expect_note(args, 0);
  cr_assert(strstr(run_res.out, "causal-1"), "%s", run_res.out);
  snprintf(args, sizeof args, "check --intervals %s --causal --strict", path);
  expect_refusal(args, 1, NULL);
  snprintf(args, sizeof args, "expand %s --causal --strict -o %s", path, out);
  expect_refusal(args, 2, out);
  snprintf(args, sizeof args, "expand %s --causal -o %s", path, out);
  expect_note(args, 0);
  fm_npy_header h;
  cr_assert_eq(fm_npy_read_header_path(out, &h, NULL), FM_OK);
  cr_assert(h.ndim == 4 && h.shape[1] == 2 && h.shape[2] == 100 && h.shape[3] == 100);
  unlink(out);
  snprintf(args, sizeof args, "check %s --strict", path);
  fmt_run(&run_res, args);
  cr_assert_eq(run_res.status, 2, "--strict goes with --intervals");
}

Test(intervals_paddle, render_and_scenarios_read_paddle_files) {
  const char *path = iv_path("scn_rev.npy"), *png = iv_path("scn_rev.png");
  const char *yaml = iv_path("scn_rev.yaml"), *dir = iv_path("scn_rev_out");
  int64_t nplus;
  fm_colmask_destroy(paddle_random_eviction(path, 100, 1, &nplus));
  char args[2048];
  fmt_run(&run_res, "render --family causal --seqlen 64 -o /dev/null/none.png");
  if (!strstr(run_res.err, "built without")) { /* built with the figures */
    unlink(png);
    snprintf(args, sizeof args, "render %s --strict -o %s", path, png);
    expect_refusal(args, 2, png);
    snprintf(args, sizeof args, "render %s -o %s --size 200x150", path, png);
    expect_note(args, 0);
    unlink(png);
  }
  for (int strict = 0; strict < 2; strict++) {
    FILE *f = fopen(yaml, "w");
    cr_assert_not_null(f);
    fprintf(f, "name: paddle\nrun: [analyze]\nmasks:\n  - intervals: %s\n    causal: true\n%s",
            path, strict ? "    strict: true\n" : "");
    fclose(f);
    snprintf(args, sizeof args, "run %s --out %s", yaml, dir);
    fmt_run(&run_res, args);
    if (strict) {
      cr_assert_eq(run_res.status, 2, "%s", run_res.err);
      cr_assert(strstr(run_res.err, "is outside [0, Sq=100]"), "%s", run_res.err);
    } else {
      cr_assert_eq(run_res.status, 0, "%s", run_res.err);
      cr_assert(strstr(run_res.err, "note: ") && strstr(run_res.err, "taken as Sq"), "%s",
                run_res.err);
    }
  }
  /* strict: belongs to an interval file */
  FILE *f = fopen(yaml, "w");
  cr_assert_not_null(f);
  fprintf(f, "name: paddle\nrun: [analyze]\nmasks:\n  - family: causal\n    strict: true\n");
  fclose(f);
  snprintf(args, sizeof args, "run %s --out %s", yaml, dir);
  fmt_run(&run_res, args);
  cr_assert_eq(run_res.status, 2, "%s", run_res.err);
  cr_assert_eq(run_res.err_lines, 1, "%s", run_res.err);
  cr_assert(strstr(run_res.err, "strict: goes with intervals:"), "%s", run_res.err);
  unlink(yaml);
}

Test(forms, bits_name_the_forms) {
  cr_assert_eq(fm_form_bit(FM_FORM_CAUSAL1), 1u);
  cr_assert_eq(fm_form_bit(FM_FORM_BIDIR4), 8u);
  cr_assert_eq(FM_FORMS_ALL, 15u);
  cr_assert_eq(fm_form_smallest(fm_form_bit(FM_FORM_BIDIR4) | fm_form_bit(FM_FORM_BIDIR2)),
               FM_FORM_BIDIR2);
  cr_assert_eq(fm_form_smallest(0), FM_FORM_NONE);
}
