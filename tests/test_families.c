/* Tests of the twelve families: the ten-token vectors of docs/FAMILIES.md
 * ("Ten-token examples", compared semantically), each family's invariants
 * over many lengths and seeds, documents from the samples and from draws,
 * the registry rows themselves, and bad parameters (every number range-
 * checked: the crashes of issue 11 are regression cases here). */
#include <criterion/criterion.h>

#include "fm_families.h"
#include "fm_forms.h"
#include "fm_test_util.h"

static fm_colmask *build(const char *family, int64_t S, const char *p1, const char *p2,
                         fm_status want) {
  const char *params[2] = {p1, p2};
  fm_family_request req = {.family = family, .seqlen = S, .batch = 1, .heads = 1, .sample = -1,
                           .nparams = (p1 != NULL) + (p2 != NULL), .params = params};
  fm_colmask *m = NULL;
  fm_err e = {{0}};
  fm_status st = fm_family_build(&req, &m, NULL, &e);
  cr_assert_eq(st, want, "%s: status %d (%s)", family, st, e.msg);
  return m;
}

/* A reference mask of Sq = Sk = 10 given its four vectors (NULL: empty). */
static fm_colmask *ref(int causal, const int32_t *lts, const int32_t *lte, const int32_t *uts,
                       const int32_t *ute) {
  fm_colmask *m;
  fm_colmask_create(10, 10, 1, 1, causal, &m, NULL);
  const int32_t *src[4] = {lts, lte, uts, ute};
  for (int k = 0; k < 4; k++)
    if (src[k]) memcpy(fm_colmask_vec(m, 0, (fm_vec)k), src[k], sizeof(int32_t) * 10);
  cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
  return m;
}

static void expect_equal(fm_colmask *got, fm_colmask *want, const char *what) {
  cr_assert(fm_colmask_equal(got, want), "%s differs from docs/FAMILIES.md", what);
  fm_colmask_destroy(got);
  fm_colmask_destroy(want);
}

Test(families, ten_token_vectors) {
  const int32_t ten[10] = {10, 10, 10, 10, 10, 10, 10, 10, 10, 10};
  {
    int32_t lts[10] = {3, 4, 5, 6, 7, 8, 9, 10, 10, 10};
    expect_equal(build("sliding_window", 10, "w=3", NULL, FM_OK), ref(1, lts, NULL, NULL, NULL),
                 "sliding_window w=3");
  }
  {
    int32_t lts[10] = {4, 4, 4, 4, 7, 7, 7, 10, 10, 10};
    expect_equal(build("causal_document", 10, "docs=4,3,3", NULL, FM_OK),
                 ref(1, lts, NULL, NULL, NULL), "causal_document");
  }
  {
    int32_t lts[10] = {4, 4, 4, 4, 7, 7, 7, 10, 10, 10}, ute[10] = {0, 0, 0, 0, 4, 4, 4, 7, 7, 7};
    expect_equal(build("document", 10, "docs=4,3,3", NULL, FM_OK), ref(0, lts, ten, NULL, ute),
                 "document");
  }
  {
    int32_t lts[10] = {10, 10, 10, 10, 7, 7, 7, 10, 10, 10};
    expect_equal(build("share_question", 10, "docs=4+3+3", NULL, FM_OK),
                 ref(1, lts, NULL, NULL, NULL), "share_question");
  }
  {
    int32_t lts[10] = {10, 10, 4, 5, 6, 7, 8, 9, 10, 10}, uts[10] = {0, 0, 0, 0, 2, 2, 2, 2, 2, 2},
            ute[10] = {0, 0, 0, 0, 3, 4, 5, 6, 7, 8};
    const char *p[3] = {"g=2", "wl=1", "wr=1"};
    fm_family_request req = {.family = "global_sliding_window", .seqlen = 10, .batch = 1,
                             .heads = 1, .sample = -1, .nparams = 3, .params = p};
    fm_colmask *m;
    cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
    expect_equal(m, ref(0, lts, ten, uts, ute), "global_sliding_window");
  }
  {
    int32_t lts[10] = {4, 4, 4, 4, 7, 7, 7, 10, 10, 10}, lte[10] = {7, 7, 7, 7, 7, 7, 7, 10, 10, 10};
    expect_equal(build("causal_blockwise", 10, "docs=4,3,3", NULL, FM_OK),
                 ref(1, lts, lte, NULL, NULL), "causal_blockwise");
  }
  {
    int32_t lts[10] = {3, 3, 3, 5, 5, 10, 10, 10, 10, 10}, ute[10] = {0, 0, 2, 3, 3, 5, 5, 7, 8, 9};
    expect_equal(build("prefix_lm_document", 10, "docs=2:3,2:2,2:5", NULL, FM_OK),
                 ref(0, lts, ten, NULL, ute), "prefix_lm_document");
  }
  {
    int32_t ute[10] = {0, 0, 0, 0, 0, 5, 6, 7, 8, 9};
    expect_equal(build("prefix_lm_causal", 10, "p=5", NULL, FM_OK), ref(0, NULL, NULL, NULL, ute),
                 "prefix_lm_causal");
  }
  {
    int32_t lts[10] = {10, 10, 2, 3, 4, 10, 6, 7, 10, 10}, lte[10] = {10, 10, 5, 5, 5, 10, 8, 8, 10, 10};
    expect_equal(build("qk_sparse", 10, "spans=2:3,6:2", NULL, FM_OK), ref(1, lts, lte, NULL, NULL),
                 "qk_sparse");
  }
  expect_equal(build("full", 10, NULL, NULL, FM_OK), ref(0, NULL, NULL, NULL, NULL), "full");
  expect_equal(build("causal", 10, NULL, NULL, FM_OK), ref(1, NULL, NULL, NULL, NULL), "causal");
}

/* Per-family invariants on dense expansions, over lengths and seeds. */
static void check_invariants(const char *family, const fm_colmask *m, int64_t S) {
  const fm_family_info *info = fm_family_find(family);
  for (int32_t s = 0; s < fm_colmask_nsets(m); s++) {
    uint8_t *d = fmt_dense(m, s);
    for (int64_t i = 0; i < S; i++)
      for (int64_t j = 0; j < S; j++) {
        int masked = d[i * S + j];
        if (info->causal && i < j) cr_assert(masked, "%s: causal family sees the future", family);
        if (i == j && strcmp(family, "qk_sparse") != 0)
          cr_assert(!masked, "%s: a token must see itself (%lld)", family, (long long)i);
      }
    /* the smallest form is the one docs/FAMILIES.md gives (or smaller) */
    fm_form f = fm_colmask_smallest_form(m);
    if (strcmp(info->form, "-") != 0) {
      fm_form doc;
      cr_assert_eq(fm_form_parse(info->form, &doc, NULL), FM_OK);
      cr_assert(f != FM_FORM_NONE && f <= doc, "%s: needs form %s, the registry says %s", family,
                fm_form_name(f), info->form);
    }
    free(d);
  }
}

Test(families, invariants_over_lengths_and_seeds) {
  const int64_t lengths[] = {1, 2, 7, 16, 33, 64, 100};
  for (int f = 0; f < fm_family_count(); f++) {
    const char *name = fm_family_at(f)->name;
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
      for (uint64_t seed = 0; seed < 4; seed++) {
        int64_t S = lengths[l];
        const char *p[1] = {"docs_min=1"};
        int np = fm_family_at(f)->uses_docs && strcmp(name, "qk_sparse") ? 1 : 0;
        fm_family_request req = {.family = name, .seqlen = S, .batch = 2, .heads = 3, .seed = seed,
                                 .sample = -1, .nparams = np, .params = p};
        fm_colmask *m = NULL;
        fm_err e = {{0}};
        fm_status st = fm_family_build(&req, &m, NULL, &e);
        if (!strcmp(name, "qk_sparse") && st != FM_OK) continue; /* drawn spans need room */
        cr_assert_eq(st, FM_OK, "%s S=%lld: %s", name, (long long)S, e.msg);
        cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
        cr_assert_eq(fm_colmask_nsets(m), fm_family_at(f)->per_head ? 6 : 1);
        check_invariants(name, m, S);
        fm_colmask_destroy(m);
      }
  }
}

/* Document families: no token sees across a document boundary. */
Test(families, documents_never_see_across_boundaries) {
  const char *doc_families[] = {"causal_document", "document", "share_question",
                                "prefix_lm_document", "causal_blockwise"};
  for (size_t f = 0; f < 5; f++)
    for (uint64_t seed = 0; seed < 6; seed++) {
      int64_t S = 97;
      fm_family_request req = {.family = doc_families[f], .seqlen = S, .batch = 1, .heads = 1,
                               .seed = seed, .sample = -1};
      fm_colmask *m;
      fm_family_used used;
      cr_assert_eq(fm_family_build(&req, &m, &used, NULL), FM_OK);
      cr_assert(strstr(used.docs_source, "drawn") != NULL);
      /* recover the documents from causal_document's LTS = end(doc(j)) */
      fm_family_request dreq = {.family = "causal_document", .seqlen = S, .batch = 1, .heads = 1,
                                .seed = seed, .sample = -1};
      fm_colmask *docs;
      fm_family_build(&dreq, &docs, NULL, NULL);
      const int32_t *end = fm_colmask_cvec(docs, 0, FM_LTS);
      cr_assert_eq(end[S - 1], S, "documents partition [0, S)");
      uint8_t *d = fmt_dense(m, 0);
      int blockwise = !strcmp(doc_families[f], "causal_blockwise");
      int64_t last_start = S;
      while (last_start > 0 && end[last_start - 1] == S) last_start--;
      for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < S; j++) {
          int same_doc = end[i] == end[j];
          if (!same_doc && !(blockwise && i >= last_start))
            cr_assert(d[i * S + j], "%s: row %lld sees key %lld of another document",
                      doc_families[f], (long long)i, (long long)j);
          if (blockwise && i >= last_start && j <= i)
            cr_assert(!d[i * S + j], "causal_blockwise: the test block sees every earlier key");
        }
      free(d);
      fm_colmask_destroy(docs);
      fm_colmask_destroy(m);
    }
}

Test(families, sliding_window_definition) {
  fm_colmask *m = build("sliding_window", 50, "w=7", NULL, FM_OK);
  for (int32_t i = 0; i < 50; i++)
    for (int32_t j = 0; j < 50; j++)
      cr_assert_eq(fm_colmask_masked(m, 0, i, j), !(i >= j && i < j + 7));
  fm_colmask_destroy(m);
}

Test(families, share_question_answers_do_not_see_each_other) {
  fm_colmask *m = build("share_question", 20, "docs=4+3+3,5+5", NULL, FM_OK);
  /* document 0: question [0,4), answers [4,7) and [7,10); document 1: [10,15), [15,20) */
  cr_assert(!fm_colmask_masked(m, 0, 8, 2), "answer 2 sees the question");
  cr_assert(fm_colmask_masked(m, 0, 8, 5), "answer 2 does not see answer 1");
  cr_assert(!fm_colmask_masked(m, 0, 6, 5), "answer 1 sees itself causally");
  cr_assert(fm_colmask_masked(m, 0, 12, 3), "no crossing into document 1");
  cr_assert(!fm_colmask_masked(m, 0, 17, 12));
  fm_colmask_destroy(m);
}

Test(families, random_eviction_draws) {
  const char *p[1] = {"r=40"};
  fm_family_request req = {.family = "random_eviction", .seqlen = 100, .batch = 2, .heads = 2,
                           .seed = 5, .sample = -1, .nparams = 1, .params = p};
  fm_colmask *m;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  cr_assert_eq(fm_colmask_nsets(m), 4);
  int differs = 0;
  for (int32_t s = 0; s < 4; s++) {
    const int32_t *lts = fm_colmask_cvec(m, s, FM_LTS);
    int evicted = 0, next = 40;
    for (int32_t j = 0; j < 100; j++) {
      if (lts[j] == 100) continue;
      cr_assert(j < 99, "never the last column");
      cr_assert_gt(lts[j], j, "eviction row after the key");
      cr_assert_eq(lts[j], next++, "k-th evicted column gets row r+k");
      evicted++;
    }
    cr_assert_eq(evicted, 60, "S - r columns evicted");
    if (s > 0)
      differs |= memcmp(lts, fm_colmask_cvec(m, 0, FM_LTS), sizeof(int32_t) * 100) != 0;
  }
  cr_assert(differs, "one draw per (batch, head)");
  fm_colmask *again;
  cr_assert_eq(fm_family_build(&req, &again, NULL, NULL), FM_OK);
  cr_assert(fm_colmask_equal(m, again), "same seed, same draw");
  fm_colmask_destroy(again);
  fm_colmask_destroy(m);
}

Test(families, samples_from_the_paper) {
  fm_sample_set samples;
  cr_assert_eq(fm_samples_builtin(&samples, NULL), FM_OK);
  cr_assert_eq(samples.count, 15);
  cr_assert_eq(fm_samples_count(&samples, 8192), 5);
  const fm_sample *s = fm_samples_find(&samples, 32768, 0);
  cr_assert_not_null(s);
  cr_assert_eq(s->docs.n, 10);
  cr_assert_eq(s->docs.docs[0].prefix, 884);
  cr_assert_eq(s->docs.docs[0].len, 3482);
  cr_assert_eq(s->docs.docs[2].qk, 1);
  /* sample 2 of 8K: documents 1041, 2718, ... */
  fm_family_request req = {.family = "causal_document", .seqlen = 8192, .batch = 1, .heads = 1,
                           .sample = 2, .samples = &samples};
  fm_colmask *m;
  fm_family_used used;
  cr_assert_eq(fm_family_build(&req, &m, &used, NULL), FM_OK);
  cr_assert_eq(fm_colmask_cvec(m, 0, FM_LTS)[0], 1041);
  cr_assert_eq(fm_colmask_cvec(m, 0, FM_LTS)[1041], 1041 + 2718);
  cr_assert_eq(fm_colmask_cvec(m, 0, FM_LTS)[8191], 8192, "last document absorbs padding");
  cr_assert(strstr(used.docs_source, "sample 2 of 8192"));
  fm_colmask_destroy(m);
  /* qk_sparse spans are the flagged documents of the sample */
  fm_family_request qreq = {.family = "qk_sparse", .seqlen = 8192, .batch = 1, .heads = 1,
                            .sample = 0, .samples = &samples};
  cr_assert_eq(fm_family_build(&qreq, &m, &used, NULL), FM_OK);
  cr_assert(strstr(used.params, "spans=3145:2203"), "%s", used.params);
  fm_colmask_destroy(m);
  fm_err e;
  fm_family_request bad = {.family = "document", .seqlen = 8192, .batch = 1, .heads = 1,
                           .sample = 5, .samples = &samples};
  cr_assert_eq(fm_family_build(&bad, &m, NULL, &e), FM_ENOTFOUND);
  cr_assert(strstr(e.msg, "sample 5 does not exist"), "%s", e.msg);
  fm_family_request nos = {.family = "document", .seqlen = 4096, .batch = 1, .heads = 1,
                           .sample = 0, .samples = &samples};
  cr_assert_eq(fm_family_build(&nos, &m, NULL, &e), FM_ENOTFOUND);
  cr_assert(strstr(e.msg, "no document sample for S=4096"), "%s", e.msg);
  fm_samples_free(&samples);
}

Test(families, drawn_documents_for_any_length) {
  for (uint64_t seed = 0; seed < 20; seed++) {
    const char *p[2] = {"docs_min=3", "docs_max=9"};
    fm_family_request req = {.family = "document", .seqlen = 1000 + (int64_t)seed * 37, .batch = 1,
                             .heads = 1, .seed = seed, .sample = -1, .nparams = 2, .params = p};
    fm_colmask *m;
    fm_family_used used;
    cr_assert_eq(fm_family_build(&req, &m, &used, NULL), FM_OK);
    cr_assert(used.ndocs >= 3 && used.ndocs <= 9, "%d documents", used.ndocs);
    /* count distinct document ends */
    int n = 0;
    const int32_t *lts = fm_colmask_cvec(m, 0, FM_LTS);
    for (int64_t j = 0; j < req.seqlen; j++) n += j == 0 || lts[j] != lts[j - 1];
    cr_assert_eq(n, used.ndocs);
    fm_colmask_destroy(m);
  }
}

Test(families, bad_parameters) {
  fm_err e;
  fm_colmask *m;
  struct {
    const char *family;
    int64_t S;
    const char *param;
    fm_status want;
    const char *needle;
  } cases[] = {
      {"nosuch", 10, NULL, FM_ENOTFOUND, "unknown family 'nosuch'"},
      {"sliding_window", 10, "w=0", FM_EINVAL, "w=0 is out of range"},
      {"sliding_window", 10, "w=-3", FM_EINVAL, "out of range"},
      {"sliding_window", 10, "w=abc", FM_EINVAL, "not an integer"},
      {"sliding_window", 10, "width=3", FM_ENOTFOUND, "no parameter 'width'"},
      {"sliding_window", 10, "w3", FM_EINVAL, "key=value"},
      {"prefix_lm_causal", 10, "p=11", FM_EINVAL, "p=11 is out of range"},
      {"document", 10, "docs=4,3,9", FM_EINVAL, "sum to 16 tokens, more than S=10"},
      {"document", 10, "docs_min=11", FM_EINVAL, "more documents than tokens"},
      {"prefix_lm_document", 10, "docs=5:3,7", FM_EINVAL, "prefix 5 longer"},
      {"qk_sparse", 10, "spans=8:5", FM_EINVAL, "ends past S=10"},
      {"qk_sparse", 10, "spans=2:3,3:2", FM_EINVAL, "overlaps"},
      {"random_eviction", 10, "r=0", FM_EINVAL, "r=0 is out of range"},
      {"full", 10, "w=3", FM_ENOTFOUND, "takes none"},
      {"causal", 0, NULL, FM_EINVAL, "out of range"},
      {"causal", (int64_t)1 << 31, NULL, FM_EINVAL, "int32"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const char *p[1] = {cases[c].param};
    fm_family_request req = {.family = cases[c].family, .seqlen = cases[c].S, .batch = 1,
                             .heads = 1, .sample = -1, .nparams = cases[c].param != NULL,
                             .params = p};
    memset(&e, 0, sizeof e);
    m = NULL;
    cr_assert_eq(fm_family_build(&req, &m, NULL, &e), cases[c].want, "case %zu: %s", c, e.msg);
    cr_assert_null(m);
    cr_assert(strstr(e.msg, cases[c].needle) != NULL, "case %zu: '%s' lacks '%s'", c, e.msg,
              cases[c].needle);
  }
}

Test(families, sample_file_errors) {
  fm_sample_set s;
  fm_err e;
  cr_assert_eq(fm_samples_parse("Sample 1, num_docs 1: [(0, 5)]# [0]\n", "t.txt", &s, &e), FM_EFORMAT);
  cr_assert(strstr(e.msg, "t.txt:1:"), "%s", e.msg);
  cr_assert_eq(fm_samples_parse("Total length: 10\nSample 1, num_docs 2: [(0, 5)]# [0]\n", "t.txt",
                                &s, &e), FM_EFORMAT);
  cr_assert(strstr(e.msg, "t.txt:2:"), "%s", e.msg);
  cr_assert_eq(fm_samples_parse("Total length: 10\nSample 1, num_docs 2: [(0, 5), (0, 9)]# [0, 1]\n",
                                "t.txt", &s, &e), FM_EFORMAT);
  cr_assert(strstr(e.msg, "more than the total"), "%s", e.msg);
  cr_assert_eq(fm_samples_parse("Total length: 10\nSample 2, num_docs 1: [(0, 5)]# [0]\n", "t.txt",
                                &s, &e), FM_EFORMAT);
  cr_assert(strstr(e.msg, "expected 1"), "%s", e.msg);
  cr_assert_eq(fm_samples_parse("", "t.txt", &s, &e), FM_EFORMAT);
  cr_assert_eq(fm_samples_load("/nonexistent/samples.txt", &s, &e), FM_EIO);
  cr_assert_eq(fm_samples_parse("Total length: 10, x\n\nSample 1, num_docs 2: [(1, 5), (0, 3)]# [1, 0]\n",
                                "t.txt", &s, NULL), FM_OK);
  cr_assert_eq(s.count, 1);
  cr_assert_eq(s.items[0].docs.docs[0].prefix, 1);
  fm_samples_free(&s);
}

/* ---- the registry ---- */

static int has_param_kind(const fm_family_info *f, fm_param_kind k) {
  for (int p = 0; p < f->nparams; p++)
    if (f->params[p].kind == k) return 1;
  return 0;
}

Test(families, registry_rows_are_complete) {
  /* the paper's twelve first, in the order of its kernel table */
  const char *paper[FM_PAPER_NFAMILIES] = {
      "full", "causal", "sliding_window", "causal_document", "document", "share_question",
      "global_sliding_window", "causal_blockwise", "prefix_lm_document", "prefix_lm_causal",
      "qk_sparse", "random_eviction"};
  cr_assert_geq(fm_family_count(), FM_PAPER_NFAMILIES);
  for (int f = 0; f < FM_PAPER_NFAMILIES; f++)
    cr_assert_str_eq(fm_family_at(f)->name, paper[f], "row %d", f);
  cr_assert_null(fm_family_at(-1));
  cr_assert_null(fm_family_at(fm_family_count()));
  cr_assert_null(fm_family_find("nosuch"));
  for (int f = 0; f < fm_family_count(); f++) {
    const fm_family_info *fam = fm_family_at(f);
    cr_assert(fam->name && fam->short_name && fam->form && fam->meaning, "row %d", f);
    cr_assert_not_null(fam->build, "%s has no build function", fam->name);
    cr_assert_leq(fam->nparams, FM_FAMILY_MAX_PARAMS, "%s", fam->name);
    cr_assert_eq(fm_family_find(fam->name), fam, "%s: names are unique", fam->name);
    cr_assert_eq(fam->uses_docs, has_param_kind(fam, FM_PARAM_DOCS),
                 "%s: uses_docs says what its docs= parameter says", fam->name);
    for (int p = 0; p < fam->nparams; p++) {
      const fm_param_info *pi = &fam->params[p];
      cr_assert(pi->name && pi->default_text && pi->meaning, "%s param %d", fam->name, p);
      for (int q = 0; q < p; q++)
        cr_assert_str_neq(pi->name, fam->params[q].name, "%s: %s twice", fam->name, pi->name);
      if (pi->kind != FM_PARAM_INT) continue;
      /* the text users see is the rule the build applies */
      char want[32];
      if (pi->dflt_s_div > 0) snprintf(want, sizeof want, "S/%d", pi->dflt_s_div);
      else snprintf(want, sizeof want, "%lld", (long long)pi->dflt);
      cr_assert_str_eq(pi->default_text, want, "%s: %s", fam->name, pi->name);
    }
  }
}

/* Defaults are in range and reported: w = S/16 shows up as "w=S/16". */
Test(families, defaults_follow_the_rows) {
  const int64_t lengths[] = {1, 5, 16, 100, 8192};
  for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
    for (int f = 0; f < fm_family_count(); f++) {
      const fm_family_info *fam = fm_family_at(f);
      if (!strcmp(fam->name, "qk_sparse")) continue; /* its default spans need S > 4058 */
      fm_family_request req = {.family = fam->name, .seqlen = lengths[l], .batch = 1, .heads = 1,
                               .sample = -1};
      fm_colmask *m = NULL;
      fm_family_used used;
      fm_err e = {{0}};
      cr_assert_eq(fm_family_build(&req, &m, &used, &e), FM_OK, "%s S=%lld: %s", fam->name,
                   (long long)lengths[l], e.msg);
      for (int p = 0; p < fam->nparams; p++) {
        const fm_param_info *pi = &fam->params[p];
        if (pi->kind != FM_PARAM_INT || pi->steers_draw) continue;
        int64_t v = pi->dflt_s_div > 0 ? lengths[l] / pi->dflt_s_div : pi->dflt;
        int64_t hi = pi->hi == FM_PARAM_HI_S ? lengths[l] : pi->hi;
        v = v < pi->lo ? pi->lo : v > hi ? hi : v;
        char item[64];
        snprintf(item, sizeof item, "%s=%lld", pi->name, (long long)v);
        cr_assert(strstr(used.params, item), "%s S=%lld: '%s' lacks %s", fam->name,
                  (long long)lengths[l], used.params, item);
      }
      fm_colmask_destroy(m);
    }
}

Test(families, paper_table_reads_the_registry) {
  cr_assert_float_eq(fm_paper_sparsity("document", 8192), 0.74, 1e-12);
  cr_assert_float_eq(fm_paper_sparsity("prefix_lm_causal", 131072), 0.37, 1e-12);
  cr_assert_eq(fm_paper_sparsity("full", 8192), -1.0, "the paper gives no figure for full");
  cr_assert_eq(fm_paper_sparsity("causal", 4096), -1.0, "nor at other lengths");
  cr_assert_eq(fm_paper_sparsity("nosuch", 8192), -1.0);
  for (int f = 0; f < fm_family_count(); f++)
    for (int l = 0; l < FM_PAPER_NLENGTHS; l++)
      cr_assert_eq(fm_paper_sparsity(fm_family_at(f)->name, fm_paper_lengths[l]),
                   fm_family_at(f)->paper_rho[l]);
}

/* ---- parameter strings: every number checked before it is used (issue 11) ---- */

static fm_status build_err(const char *family, int64_t S, const char *param, fm_err *e) {
  const char *p[1] = {param};
  fm_family_request req = {.family = family, .seqlen = S, .batch = 1, .heads = 1, .sample = -1,
                           .nparams = 1, .params = p};
  fm_colmask *m = NULL;
  memset(e, 0, sizeof *e);
  fm_status st = fm_family_build(&req, &m, NULL, e);
  if (st == FM_OK) cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
  else cr_assert_null(m);
  fm_colmask_destroy(m);
  return st;
}

/* Was a stack overflow: nine parts in a document of eight slots. */
Test(families, nine_part_document_is_refused) {
  fm_err e;
  cr_assert_eq(build_err("share_question", 64, "docs=1+1+1+1+1+1+1+1+1", &e), FM_EINVAL);
  cr_assert(strstr(e.msg, "at most 8 parts"), "%s", e.msg);
  cr_assert_eq(build_err("share_question", 64, "docs=1+1+1+1+1+1+1+1", &e), FM_OK,
               "a question and seven answers fit: %s", e.msg);
  fm_docs d;
  cr_assert_eq(fm_docs_parse("3,1+1+1+1+1+1+1+1+1+1+1+1", &d, &e), FM_EINVAL);
  cr_assert_eq(d.n, 0);
  cr_assert_null(d.docs);
  cr_assert_eq(fm_docs_parse("2:3,1+2+3+4+5+6+7+8", &d, &e), FM_OK, "%s", e.msg);
  cr_assert_eq(d.n, 2);
  cr_assert_eq(d.docs[0].prefix, 2);
  cr_assert_eq(d.docs[1].nparts, 8);
  cr_assert_eq(d.docs[1].len, 36);
  cr_assert_eq(d.docs[1].parts[7], 8);
  fm_docs_free(&d);
}

/* Was an int64 overflow (start + len) and then a heap write out of bounds. */
Test(families, span_overflow_is_refused) {
  fm_err e;
  cr_assert_eq(build_err("qk_sparse", 1024, "spans=4611686018427388927:4611686018427487904", &e),
               FM_EINVAL);
  cr_assert(strstr(e.msg, "ends past S=1024"), "%s", e.msg);
  cr_assert_eq(build_err("qk_sparse", 1024, "spans=9223372036854775807:9223372036854775807", &e),
               FM_EINVAL);
  cr_assert(strstr(e.msg, "ends past S=1024"), "%s", e.msg);
  cr_assert_eq(build_err("qk_sparse", 1024, "spans=1000:9223372036854775807", &e), FM_EINVAL);
  cr_assert(strstr(e.msg, "ends past S=1024"), "%s", e.msg);
  cr_assert_eq(build_err("qk_sparse", 1024, "spans=1000:24", &e), FM_OK, "%s", e.msg);
  cr_assert_eq(build_err("qk_sparse", 1024, "spans=1000:25", &e), FM_EINVAL);
}

/* The same two inputs through the command line: one line, exit 2. */
Test(families, cli_refuses_the_crash_inputs) {
  static fmt_result r;
  const char *cmds[] = {
      "analyze --family share_question --seqlen 64 --param docs=1+1+1+1+1+1+1+1+1",
      "analyze --family qk_sparse --seqlen 1024 --param "
      "spans=4611686018427388927:4611686018427487904"};
  for (size_t c = 0; c < 2; c++) {
    fmt_run(&r, cmds[c]);
    cr_assert_eq(r.status, 2, "%s: exit %d", cmds[c], r.status);
    cr_assert_eq(r.err_lines, 1, "%s: stderr '%s'", cmds[c], r.err);
    cr_assert(strncmp(r.err, "fmsim analyze: ", 15) == 0, "%s", r.err);
    cr_assert_eq(r.out[0], 0, "nothing on stdout");
  }
}

Test(families, every_number_is_range_checked) {
  struct {
    const char *family, *param, *needle;
  } cases[] = {
      {"document", "docs=99999999999999999999999", "expected a length"},
      {"document", "docs=1073741825", "expected a length"},
      {"document", "docs=-5", "expected a length"},
      {"document", "docs=1:2:3", "unexpected text at ':3'"},
      {"document", "docs=4+", "expected a length"},
      {"document", "docs=4,,3", "expected a length"},
      {"document", "docs=4,3,", "trailing comma"},
      {"document", "docs= 4", "expected a length"},
      {"document", "docs=536870912+536870912", "sum to 1073741824 tokens, more than S=100"},
      {"share_question", "docs=536870912+536870913", "a document of 1073741825 tokens"},
      {"prefix_lm_document", "docs=9223372036854775807:3", "expected a length"},
      {"qk_sparse", "spans=-1:3", "start >= 0"},
      {"qk_sparse", "spans=3", "start:len"},
      {"qk_sparse", "spans=3:0", "len >= 1"},
      {"qk_sparse", "spans=3:4x", "start:len"},
      {"qk_sparse", "spans=99999999999999999999999:1", "ends past S=100"},
      {"sliding_window", "w=99999999999999999999999", "out of range"},
      {"sliding_window", "w=-99999999999999999999999", "out of range"},
      {"sliding_window", "w=", "not an integer"},
      {"sliding_window", "w=5 ", "not an integer"},
      {"global_sliding_window", "g=9223372036854775808", "out of range"},
      {"random_eviction", "r=101", "r=101 is out of range (1 <= r <= S=100)"},
      {"share_question", "answers_max=9", "out of range"},
      {"document", "docs_max=99999999999999999999", "out of range"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    fm_err e;
    cr_assert_eq(build_err(cases[c].family, 100, cases[c].param, &e), FM_EINVAL, "%s %s",
                 cases[c].family, cases[c].param);
    cr_assert(strstr(e.msg, cases[c].needle), "%s %s: '%s' lacks '%s'", cases[c].family,
              cases[c].param, e.msg, cases[c].needle);
    cr_assert(!strchr(e.msg, '\n'), "one line");
  }
}

/* Random parameter strings over the parsers' alphabet: a clean answer each
 * time (run under the sanitizer build, an overflow would stop it). */
Test(families, random_parameter_strings) {
  const char alphabet[] = "0123456789::++,,-9";
  const char *keys[][2] = {{"share_question", "docs="}, {"prefix_lm_document", "docs="},
                           {"qk_sparse", "spans="}, {"global_sliding_window", "wl="}};
  fm_rng rng;
  fm_rng_seed(&rng, 11, 0);
  for (int t = 0; t < 4000; t++) {
    char param[64];
    size_t k = (size_t)t % 4, n = strlen(keys[k][1]);
    memcpy(param, keys[k][1], n);
    int len = 1 + (int)fm_rng_below(&rng, 40);
    for (int i = 0; i < len; i++)
      param[n++] = alphabet[fm_rng_below(&rng, sizeof alphabet - 1)];
    param[n] = 0;
    fm_err e;
    fm_status st = build_err(keys[k][0], 1 + (int64_t)fm_rng_below(&rng, 300), param, &e);
    cr_assert(st == FM_OK || (st == FM_EINVAL && e.msg[0]), "%s: %d '%s'", param, st, e.msg);
  }
}
