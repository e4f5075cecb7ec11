/* Tests of tile bounds and classification: the min/max rule and the exact
 * class against brute force over random interval masks, random Br/Bc and
 * lengths that are not multiples of the tile; and memory accounting. */
#include <criterion/criterion.h>
#include <math.h>

#include "fm_families.h"
#include "fm_memory.h"
#include "fm_test_util.h"
#include "fm_tiles.h"

Test(tiles, bounds_match_brute_force) {
  fm_rng r;
  fm_rng_seed(&r, 3, 0);
  for (int iter = 0; iter < 100; iter++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 40), sk = 1 + (int32_t)fm_rng_below(&r, 40);
    int causal = (int)fm_rng_below(&r, 2);
    int32_t bc = 1 + (int32_t)fm_rng_below(&r, 12);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, 1, 1, causal);
    int32_t tc = (sk + bc - 1) / bc;
    fm_tile_bounds *b = malloc(sizeof *b * (size_t)tc);
    fm_tile_bounds_compute(m, 0, bc, b);
    for (int32_t t = 0; t < tc; t++) {
      int32_t mn[4] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
      int32_t mx[4] = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
      for (int32_t j = t * bc; j < sk && j < (t + 1) * bc; j++) {
        int32_t v[4] = {fm_colmask_cvec(m, 0, FM_LTS)[j], fm_colmask_cvec(m, 0, FM_LTE)[j],
                        fm_colmask_cvec(m, 0, FM_UTS)[j], fm_colmask_cvec(m, 0, FM_UTE)[j]};
        if (causal) { /* causal triangle folded into the upper interval */
          int32_t c = fm_causal_limit(j, sq, sk);
          v[3] = v[2] < v[3] && v[3] > c ? v[3] : c;
          v[2] = 0;
        }
        for (int k = 0; k < 4; k++) {
          if (v[k] < mn[k]) mn[k] = v[k];
          if (v[k] > mx[k]) mx[k] = v[k];
        }
      }
      cr_assert(b[t].lts_min == mn[0] && b[t].lts_max == mx[0] && b[t].lte_min == mn[1] &&
                b[t].lte_max == mx[1] && b[t].uts_min == mn[2] && b[t].uts_max == mx[2] &&
                b[t].ute_min == mn[3] && b[t].ute_max == mx[3]);
    }
    free(b);
    fm_colmask_destroy(m);
  }
}

/* Brute force on the dense mask: exact class of a tile, and the min/max rule
 * re-derived independently from the column vectors. */
static int exact_class(const uint8_t *d, int32_t sk, int32_t r0, int32_t r1, int32_t c0,
                       int32_t c1) {
  int64_t masked = 0, n = (int64_t)(r1 - r0) * (c1 - c0);
  for (int32_t i = r0; i < r1; i++)
    for (int32_t j = c0; j < c1; j++) masked += d[(size_t)i * sk + j];
  return masked == n ? FM_TILE_MASKED : masked == 0 ? FM_TILE_UNMASKED : FM_TILE_PARTIAL;
}

/* Rows [r[0], r[1]) and columns [c[0], c[1]) of tile (rt, ct), cut at Sq and Sk. */
static void tile_extent(const fm_colmask *m, int32_t br, int32_t bc, int32_t rt, int32_t ct,
                        int32_t r[2], int32_t c[2]) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  r[0] = rt * br;
  r[1] = r[0] + br < sq ? r[0] + br : sq;
  c[0] = ct * bc;
  c[1] = c[0] + bc < sk ? c[0] + bc : sk;
}

static int minmax_class(const fm_colmask *m, int32_t s, int32_t r0, int32_t r1, int32_t c0,
                        int32_t c1) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  int all_lt = 1, all_ut = 1, any = 0;
  int32_t lts_max = INT32_MIN, lte_min = INT32_MAX, uts_max = INT32_MIN, ute_min = INT32_MAX;
  int32_t lts_min = INT32_MAX, lte_max = INT32_MIN, uts_min = INT32_MAX, ute_max = INT32_MIN;
  for (int32_t j = c0; j < c1; j++) {
    int32_t a = fm_colmask_cvec(m, s, FM_LTS)[j], b = fm_colmask_cvec(m, s, FM_LTE)[j];
    int32_t u = fm_colmask_cvec(m, s, FM_UTS)[j], v = fm_colmask_cvec(m, s, FM_UTE)[j];
    if (fm_colmask_causal(m)) {
      int32_t c = fm_causal_limit(j, sq, sk);
      v = u < v && v > c ? v : c;
      u = 0;
    }
    lts_max = a > lts_max ? a : lts_max;
    lts_min = a < lts_min ? a : lts_min;
    lte_min = b < lte_min ? b : lte_min;
    lte_max = b > lte_max ? b : lte_max;
    uts_max = u > uts_max ? u : uts_max;
    uts_min = u < uts_min ? u : uts_min;
    ute_min = v < ute_min ? v : ute_min;
    ute_max = v > ute_max ? v : ute_max;
  }
  all_lt = r0 >= lts_max && r1 <= lte_min;
  all_ut = r0 >= uts_max && r1 <= ute_min;
  if (all_lt || all_ut) return FM_TILE_MASKED;
  any = (r1 > lts_min && r0 < lte_max) || (r1 > uts_min && r0 < ute_max);
  return any ? FM_TILE_PARTIAL : FM_TILE_UNMASKED;
}

Test(tiles, classification_matches_brute_force) {
  fm_rng r;
  fm_rng_seed(&r, 11, 0);
  int64_t seen_partial_but_masked = 0, seen_masked = 0, seen_unmasked = 0;
  for (int iter = 0; iter < 400; iter++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 48), sk = 1 + (int32_t)fm_rng_below(&r, 48);
    int32_t br = 1 + (int32_t)fm_rng_below(&r, 16), bc = 1 + (int32_t)fm_rng_below(&r, 16);
    int causal = (int)fm_rng_below(&r, 2);
    int32_t nh = 1 + (int32_t)fm_rng_below(&r, 2);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, 1, nh, causal);
    int32_t tr = (sq + br - 1) / br, tc = (sk + bc - 1) / bc;
    uint8_t *cls = malloc((size_t)(nh * tr * tc)), *ex = malloc((size_t)(nh * tr * tc));
    fm_tile_counts counts;
    cr_assert_eq(fm_classify(m, br, bc, &counts, cls, ex, NULL), FM_OK);
    cr_assert_eq(counts.total, (int64_t)nh * tr * tc);
    int64_t cnt[3] = {0}, cnt_exact[3] = {0};
    for (int32_t s = 0; s < nh; s++) {
      uint8_t *d = fmt_dense(m, s);
      for (int32_t rt = 0; rt < tr; rt++)
        for (int32_t ct = 0; ct < tc; ct++) {
          int32_t r[2], c[2];
          tile_extent(m, br, bc, rt, ct, r, c);
          int want_exact = exact_class(d, sk, r[0], r[1], c[0], c[1]);
          int want_rule = minmax_class(m, s, r[0], r[1], c[0], c[1]);
          size_t idx = ((size_t)s * tr + rt) * tc + ct;
          cr_assert_eq(ex[idx], want_exact, "iter %d tile (%d,%d): exact %d, want %d", iter, rt,
                       ct, ex[idx], want_exact);
          cr_assert_eq(cls[idx], want_rule, "iter %d tile (%d,%d): rule %d, want %d", iter, rt,
                       ct, cls[idx], want_rule);
          /* the rule is conservative: never skips a tile that has a visible element,
             never drops the mask from a tile that has a masked element */
          if (cls[idx] == FM_TILE_MASKED) cr_assert_eq(want_exact, FM_TILE_MASKED);
          if (cls[idx] == FM_TILE_UNMASKED) cr_assert_eq(want_exact, FM_TILE_UNMASKED);
          cnt[cls[idx]]++;
          cnt_exact[ex[idx]]++;
          seen_partial_but_masked += cls[idx] == FM_TILE_PARTIAL && want_exact == FM_TILE_MASKED;
          seen_masked += want_exact == FM_TILE_MASKED;
          seen_unmasked += want_exact == FM_TILE_UNMASKED;
        }
      free(d);
    }
    for (int c = 0; c < 3; c++) {
      cr_assert_eq(counts.minmax[c], cnt[c]);
      cr_assert_eq(counts.exact[c], cnt_exact[c]);
    }
    cr_assert_float_eq(counts.sparsity, (double)cnt[0] / (double)counts.total, 1e-12);
    /* counts without arrays are the same */
    fm_tile_counts again;
    fm_classify(m, br, bc, &again, NULL, NULL, NULL);
    cr_assert_eq(memcmp(&again, &counts, sizeof counts), 0);
    free(cls);
    free(ex);
    fm_colmask_destroy(m);
  }
  /* the random masks exercise every case, including the rule's conservatism */
  cr_assert_gt(seen_partial_but_masked, 0);
  cr_assert_gt(seen_masked, 0);
  cr_assert_gt(seen_unmasked, 0);
}

Test(tiles, rejects_bad_tile_sizes) {
  fm_colmask *m;
  fm_colmask_create(8, 8, 1, 1, 1, &m, NULL);
  fm_tile_counts c;
  fm_err e;
  cr_assert_eq(fm_classify(m, 0, 8, &c, NULL, NULL, &e), FM_EINVAL);
  cr_assert(strstr(e.msg, "Br=0"), "%s", e.msg);
  cr_assert_eq(fm_classify(m, 8, -1, &c, NULL, NULL, &e), FM_EINVAL);
  fm_colmask_destroy(m);
}

Test(tiles, causal_counts_have_a_closed_form) {
  /* causal S = 1024 at 128 x 128: 8 x 8 tiles, 28 above the diagonal masked,
     8 on the diagonal partial, 28 below unmasked */
  fm_colmask *m;
  fm_colmask_create(1024, 1024, 1, 1, 1, &m, NULL);
  fm_tile_counts c;
  cr_assert_eq(fm_classify(m, 128, 128, &c, NULL, NULL, NULL), FM_OK);
  cr_assert_eq(c.minmax[FM_TILE_MASKED], 28);
  cr_assert_eq(c.minmax[FM_TILE_PARTIAL], 8);
  cr_assert_eq(c.minmax[FM_TILE_UNMASKED], 28);
  fm_colmask_destroy(m);
}

Test(memory, formulas) {
  fm_mask_bytes b;
  /* S = 1024, one set, causal-1, Bc = 64: dense 1 MiB; block mask with 8 x 8
     blocks: 4 * (2*(8+8) + 4*64) bytes; intervals 1024*4 + 8 bounds * 16 tiles * 4 */
  fm_mask_bytes_compute(1024, 1024, 1, FM_FORM_CAUSAL1, 64, &b);
  cr_assert_eq(b.dense, 1 << 20);
  cr_assert_eq(b.block_mask, 4 * (2 * 16 + 4 * 64));
  cr_assert_eq(b.interval_vectors, 4096);
  cr_assert_eq(b.tile_bounds, 8 * 16 * 4);
  cr_assert_eq(b.intervals, 4096 + 512);
  fm_mask_bytes_compute(1024, 1024, 6, FM_FORM_BIDIR4, 64, &b);
  cr_assert_eq(b.dense, 6 << 20);
  cr_assert_eq(b.interval_vectors, 6 * 4 * 4096);
  /* intervals grow linearly, dense quadratically */
  fm_mask_bytes big;
  fm_mask_bytes_compute(1 << 20, 1 << 20, 1, FM_FORM_CAUSAL1, 128, &big);
  cr_assert_eq(big.dense, (int64_t)1 << 40);
  cr_assert_lt(big.intervals, (int64_t)5 << 20);
}

Test(tiles, large_family_counts_use_little_memory) {
  /* 1M tokens: counted without any O(S^2) array (this would need 1 TiB dense) */
  const char *p[1] = {"docs=300000,400000,348576"};
  fm_family_request req = {"causal_document", 1 << 20, 1, 1, 0, -1, NULL, 1, p};
  fm_colmask *m;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  fm_tile_counts c;
  cr_assert_eq(fm_classify(m, 128, 64, &c, NULL, NULL, NULL), FM_OK);
  cr_assert_eq(c.total, (int64_t)8192 * 16384);
  cr_assert_eq(c.minmax[FM_TILE_MASKED], c.exact[FM_TILE_MASKED]);
  cr_assert_gt(c.sparsity, 0.6);
  fm_colmask_destroy(m);
}

/* ---------------------------------------------------------------- O(S) counting */

/* The span rule: row tile rt is MASKED by the min/max rule iff it lies in
 * masked[0] or masked[1], MASKED or PARTIAL iff in touched[0] or touched[1]. */
static int in_span(const fm_tile_span *s, int32_t rt) { return rt >= s->begin && rt < s->end; }

static void check_spans(const fm_tile_bounds *b, int32_t br, int32_t sq) {
  fm_tile_span ms[2], ts[2], um[2], ut[2];
  fm_minmax_row_spans(b, br, sq, ms, ts);
  int nm = fm_span_union(ms[0], ms[1], um), nt = fm_span_union(ts[0], ts[1], ut);
  int32_t tr = (sq + br - 1) / br;
  for (int32_t rt = 0; rt < tr; rt++) {
    int32_t r0 = rt * br, r1 = r0 + br < sq ? r0 + br : sq;
    int want = fm_classify_minmax(b, r0, r1);
    int masked = in_span(&ms[0], rt) || in_span(&ms[1], rt);
    int touched = in_span(&ts[0], rt) || in_span(&ts[1], rt);
    int got = masked ? FM_TILE_MASKED : touched ? FM_TILE_PARTIAL : FM_TILE_UNMASKED;
    cr_assert_eq(got, want, "Sq=%d Br=%d rt=%d: spans say %d, rule says %d", sq, br, rt, got, want);
    if (masked) cr_assert(touched);
    /* the unions are the same sets, sorted and disjoint */
    int um_in = 0, ut_in = 0;
    for (int q = 0; q < nm; q++) um_in |= in_span(&um[q], rt);
    for (int q = 0; q < nt; q++) ut_in |= in_span(&ut[q], rt);
    cr_assert_eq(um_in, masked);
    cr_assert_eq(ut_in, touched);
  }
  for (int q = 1; q < nt; q++) cr_assert_gt(ut[q].begin, ut[q - 1].end);
}

Test(tiles, row_spans_equal_the_minmax_rule) {
  fm_rng r;
  fm_rng_seed(&r, 29, 0);
  for (int iter = 0; iter < 3000; iter++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 70), br = 1 + (int32_t)fm_rng_below(&r, 20);
    int32_t v[8];
    for (int k = 0; k < 8; k++) v[k] = (int32_t)fm_rng_below(&r, (uint64_t)sq + 1);
    /* arbitrary bounds (min <= max per vector), incl. empty and inverted intervals */
    fm_tile_bounds b = {v[0] < v[1] ? v[0] : v[1], v[0] < v[1] ? v[1] : v[0],
                        v[2] < v[3] ? v[2] : v[3], v[2] < v[3] ? v[3] : v[2],
                        v[4] < v[5] ? v[4] : v[5], v[4] < v[5] ? v[5] : v[4],
                        v[6] < v[7] ? v[6] : v[7], v[6] < v[7] ? v[7] : v[6]};
    check_spans(&b, br, sq);
  }
}

Test(tiles, bounds_of_columns_by_lanes_merge_to_the_tile) {
  fm_rng r;
  fm_rng_seed(&r, 31, 0);
  fm_colmask *m = fmt_random_mask(&r, 300, 257, 1, 1, 1);
  const int32_t *v[4];
  for (int k = 0; k < 4; k++) v[k] = fm_colmask_cvec(m, 0, (fm_vec)k);
  fm_tile_bounds whole = fm_tile_bounds_of_columns(v[0], v[1], v[2], v[3], 64, 257, 1, 1, 300, 257);
  fm_tile_bounds merged;
  fm_bounds_reset(&merged);
  for (int lane = 0; lane < 32; lane++) {
    fm_tile_bounds l = fm_tile_bounds_of_columns(v[0], v[1], v[2], v[3], 64 + lane, 257, 32, 1, 300, 257);
    fm_bounds_add(&merged, l.lts_min, l.lte_min, l.uts_min, l.ute_min);
    fm_bounds_add(&merged, l.lts_max, l.lte_max, l.uts_max, l.ute_max);
  }
  cr_assert_eq(memcmp(&whole, &merged, sizeof whole), 0);
  fm_colmask_destroy(m);
}

/* Brute force over the dense mask: counts and per-row/per-key-tile work. */
typedef struct brute {
  fm_tile_counts c;
  fm_work *rows, *cols; /* (nsets, Tr), (nsets, Tc) */
} brute;

static void brute_force(const fm_colmask *m, int32_t br, int32_t bc, brute *out) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), ns = fm_colmask_nsets(m);
  int32_t tr = (sq + br - 1) / br, tc = (sk + bc - 1) / bc;
  memset(&out->c, 0, sizeof out->c);
  out->rows = calloc((size_t)(ns * tr), sizeof(fm_work));
  out->cols = calloc((size_t)(ns * tc), sizeof(fm_work));
  for (int32_t s = 0; s < ns; s++) {
    uint8_t *d = fmt_dense(m, s);
    for (int32_t rt = 0; rt < tr; rt++)
      for (int32_t ct = 0; ct < tc; ct++) {
        int32_t r[2], c[2];
        tile_extent(m, br, bc, rt, ct, r, c);
        int e = exact_class(d, sk, r[0], r[1], c[0], c[1]), k = minmax_class(m, s, r[0], r[1], c[0], c[1]);
        out->c.minmax[k]++;
        out->c.exact[e]++;
        out->c.partial_but_masked += k == FM_TILE_PARTIAL && e == FM_TILE_MASKED;
        out->c.partial_but_unmasked += k == FM_TILE_PARTIAL && e == FM_TILE_UNMASKED;
        fm_work *w[2] = {&out->rows[s * tr + rt], &out->cols[s * tc + ct]};
        for (int q = 0; q < 2; q++) {
          w[q]->visited += k != FM_TILE_MASKED;
          w[q]->partial += k == FM_TILE_PARTIAL;
        }
      }
    free(d);
  }
  out->c.total = (int64_t)ns * tr * tc;
}

/* fm_tile_count (with and without exact classes) against brute force. */
static void check_fast_counts(const fm_colmask *m, int32_t br, int32_t bc, const char *what) {
  int32_t ns = fm_colmask_nsets(m);
  int32_t tr = (fm_colmask_sq(m) + br - 1) / br, tc = (fm_colmask_sk(m) + bc - 1) / bc;
  brute want;
  brute_force(m, br, bc, &want);
  fm_tile_counts got, lean;
  fm_work *rows = malloc(sizeof(fm_work) * (size_t)(ns * tr)), *cols = malloc(sizeof(fm_work) * (size_t)(ns * tc));
  cr_assert_eq(fm_tile_count(m, br, bc, 1, &got, rows, cols, NULL), FM_OK);
  for (int c = 0; c < 3; c++) {
    cr_assert_eq(got.minmax[c], want.c.minmax[c], "%s Br=%d Bc=%d class %d: min/max %lld, want %lld",
                 what, br, bc, c, (long long)got.minmax[c], (long long)want.c.minmax[c]);
    cr_assert_eq(got.exact[c], want.c.exact[c], "%s Br=%d Bc=%d class %d: exact %lld, want %lld",
                 what, br, bc, c, (long long)got.exact[c], (long long)want.c.exact[c]);
  }
  cr_assert_eq(got.total, want.c.total);
  cr_assert_eq(got.partial_but_masked, want.c.partial_but_masked, "%s", what);
  cr_assert_eq(got.partial_but_unmasked, want.c.partial_but_unmasked, "%s", what);
  cr_assert_eq(memcmp(rows, want.rows, sizeof(fm_work) * (size_t)(ns * tr)), 0, "%s: row work", what);
  cr_assert_eq(memcmp(cols, want.cols, sizeof(fm_work) * (size_t)(ns * tc)), 0, "%s: key-tile work", what);
  /* without exact classes: the same min/max counts, exact left out */
  cr_assert_eq(fm_tile_count(m, br, bc, 0, &lean, NULL, NULL, NULL), FM_OK);
  cr_assert_eq(memcmp(lean.minmax, got.minmax, sizeof got.minmax), 0);
  cr_assert_eq(lean.exact[0] + lean.exact[1] + lean.exact[2], 0);
  cr_assert(isnan(lean.sparsity_exact));
  free(rows);
  free(cols);
  free(want.rows);
  free(want.cols);
}

Test(tiles, fast_counts_equal_enumeration_on_random_masks) {
  fm_rng r;
  fm_rng_seed(&r, 37, 0);
  for (int iter = 0; iter < 300; iter++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 60), sk = 1 + (int32_t)fm_rng_below(&r, 60);
    int32_t br = 1 + (int32_t)fm_rng_below(&r, 17), bc = 1 + (int32_t)fm_rng_below(&r, 17);
    int32_t nb = 1 + (int32_t)fm_rng_below(&r, 2), nh = 1 + (int32_t)fm_rng_below(&r, 3);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, nb, nh, (int)fm_rng_below(&r, 2));
    char what[64];
    snprintf(what, sizeof what, "random iter %d (Sq=%d Sk=%d)", iter, sq, sk);
    check_fast_counts(m, br, bc, what);
    fm_colmask_destroy(m);
  }
}

Test(tiles, fast_counts_equal_enumeration_on_every_family) {
  /* odd lengths and tiles, per-head draws (Sq != Sk: the random masks above) */
  static const int32_t shapes[][3] = {{517, 16, 8}, {700, 33, 64}, {300, 128, 128}, {257, 7, 5}};
  for (int f = 0; f < fm_family_count(); f++)
    for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++) {
      fm_family_request req = {fm_family_at(f)->name, shapes[q][0], 2, 2, 5, -1, NULL, 0, NULL};
      fm_colmask *m;
      cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
      check_fast_counts(m, shapes[q][1], shapes[q][2], fm_family_at(f)->name);
      fm_colmask_destroy(m);
    }
}

Test(tiles, classify_maps_agree_with_counts) {
  /* the per-tile maps (analyze --out) are painted from the same spans: their
     histograms are the counts, and they match brute force tile by tile above */
  fm_family_request req = {"share_question", 3001, 1, 1, 3, -1, NULL, 0, NULL};
  fm_colmask *m;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  int32_t tr = (3001 + 63) / 64, tc = (3001 + 31) / 32;
  uint8_t *cls = malloc((size_t)(tr * tc)), *ex = malloc((size_t)(tr * tc));
  fm_tile_counts c, f;
  cr_assert_eq(fm_classify(m, 64, 32, &c, cls, ex, NULL), FM_OK);
  cr_assert_eq(fm_tile_count(m, 64, 32, 1, &f, NULL, NULL, NULL), FM_OK);
  cr_assert_eq(memcmp(&c, &f, sizeof c), 0);
  int64_t h[3] = {0}, he[3] = {0};
  for (int32_t i = 0; i < tr * tc; i++) {
    h[cls[i]]++;
    he[ex[i]]++;
  }
  for (int k = 0; k < 3; k++) {
    cr_assert_eq(h[k], c.minmax[k]);
    cr_assert_eq(he[k], c.exact[k]);
  }
  free(cls);
  free(ex);
  fm_colmask_destroy(m);
}
