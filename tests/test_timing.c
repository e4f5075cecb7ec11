/* Tests of the timing model (core/fm_timing.h) and its JSON reader: schedules
 * worked out by hand, the critical-slot decomposition the fit relies on,
 * what-if tiles and the backward's column-side items, profiles (valid and
 * every kind of bad one), the fit recovering known coefficients, and the
 * predict / calibrate commands (bad input: one line, exit 2). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fm_families.h"
#include "fm_forms.h"
#include "fm_intervals_io.h"
#include "fm_jsonr.h"
#include "fm_scenario.h"
#include "fm_test_util.h"
#include "fm_timing.h"
#include "fm_words.h"

/* ---------------------------------------------------------------- JSON reader */

static fm_jdoc *parse(const char *text, fm_err *err) {
  fm_jdoc *d = NULL;
  fm_jdoc_parse(text, strlen(text), "t.json", &d, err);
  return d;
}

Test(jsonr, reads_values_and_escapes) {
  fm_err err;
  fm_jdoc *d = parse("{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\ud83d\\ude00\\n\"], \"b\": {\"c\": 7},"
                     " \"a2\": false, \"b\": {\"c\": 8}}", &err);
  cr_assert(d, "%s", err.msg);
  const fm_jv *root = fm_jdoc_root(d), *a = fm_jv_get(root, "a");
  cr_assert_eq(fm_jv_count(a), 5);
  const fm_jv *e = fm_jv_first(a);
  cr_assert_eq(fm_jv_number(e, 0), 1);
  e = fm_jv_next(e);
  cr_assert_eq(fm_jv_number(e, 0), -2500);
  e = fm_jv_next(e);
  cr_assert_eq(fm_jv_bool(e, 0), 1);
  e = fm_jv_next(e);
  cr_assert_eq(fm_jv_type_of(e), FM_JV_NULL);
  e = fm_jv_next(e);
  cr_assert_str_eq(fm_jv_string(e), "x\xc3\xa9\xf0\x9f\x98\x80\n");
  cr_assert_null(fm_jv_next(e));
  /* a repeated key reads as its last value; wrong types read as the default */
  cr_assert_eq(fm_jv_number(fm_jv_get(fm_jv_get(root, "b"), "c"), 0), 8);
  cr_assert_eq(fm_jv_number(fm_jv_get(root, "a2"), 42), 42);
  cr_assert_null(fm_jv_string(fm_jv_get(root, "missing")));
  fm_jdoc_free(d);
}

Test(jsonr, rejects_malformed_text_with_a_location) {
  static const struct {
    const char *text, *want;
  } bad[] = {{"{\"a\": 1,}", "t.json:1:9: expected a member name"},
             {"[1, 2", "t.json:1:6: expected ',' or ']'"},
             {"{\"a\": \"b}", "unterminated string"},
             {"[\"\\x\"]", "bad escape"},
             {"{\"a\": 1} x", "unexpected text after the document"},
             {"", "unexpected end of input"},
             {"[1e]", "t.json:1:2: malformed number"},
             {"{\n  \"a\": tru\n}", "t.json:2:8: expected a value"},
             {"[1 2]", "expected ',' or ']'"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fm_err err;
    fm_jdoc *d = parse(bad[i].text, &err);
    cr_assert_null(d, "accepted %s", bad[i].text);
    cr_assert(strstr(err.msg, bad[i].want), "'%s': got '%s', want '%s'", bad[i].text, err.msg, bad[i].want);
  }
  char deep[200];
  memset(deep, '[', 100);
  deep[100] = 0;
  fm_err err;
  cr_assert_null(parse(deep, &err));
  cr_assert(strstr(err.msg, "nesting deeper than 64"), "%s", err.msg);
}

/* ---------------------------------------------------------------- schedules */

/* A hand-made work: one set, Tc key tiles, row tiles with the given visited
 * and partial counts (Br = Bc = 1 so that every tile is 1 x 1). */
static fm_timing_work hand_work(int32_t tr, int32_t tc, const int32_t *visited,
                                const int32_t *partial, int causal) {
  fm_timing_work w;
  memset(&w, 0, sizeof w);
  w.sq = tr;
  w.sk = tc;
  w.br = w.bc = 1;
  w.tr = tr;
  w.tc = tc;
  w.nb = w.nh = 1;
  w.causal = causal;
  w.rows = calloc((size_t)tr, sizeof *w.rows);
  w.cols = calloc((size_t)tc, sizeof *w.cols);
  w.kv_cols = calloc(1, sizeof *w.kv_cols);
  for (int32_t i = 0; i < tr; i++) {
    w.rows[i] = (fm_work){visited[i], partial ? partial[i] : 0};
    w.counts.minmax[FM_TILE_MASKED] += tc - visited[i];
  }
  w.counts.total = (int64_t)tr * tc;
  w.counts.sparsity = (double)w.counts.minmax[FM_TILE_MASKED] / (double)w.counts.total;
  return w;
}

static const fm_timing_coef unit = {.head_dim = 128, .br = 1, .bc = 1, .ctas_per_sm = 1,
                                    .launch_us = 0.5, .unmasked_us = 1, .partial_us = 10,
                                    .partial_causal_us = 100, .solo = 1};
static const fm_timing_problem fwd1 = {.batch = 1, .heads = 1, .head_dim = 128,
                                       .pass = FM_PASS_FWD, .variant = FM_VARIANT_SKIP};

Test(timing, persistent_schedule_is_greedy_heaviest_first) {
  /* row tiles cost 1, 4, 2, 3 (visited tiles, 1 us each) on 2 CTAs: LPT hands
     4 and 3 out first, then 2 to the CTA free at 3 (ends 5), 1 to the one free
     at 4 (ends 5): 5 us; index order would give 1+2+... = 6 */
  int32_t visited[4] = {1, 4, 2, 3};
  fm_timing_work w = hand_work(4, 4, visited, NULL, 0);
  fm_timing_result r;
  cr_assert_eq(fm_timing_predict_coef(&unit, FM_KERNEL_SM90, 2, 0, &w, &fwd1, &r, NULL), FM_OK);
  cr_assert_float_eq(r.schedule_us, 5.0, 1e-12);
  cr_assert_float_eq(r.time_us, 5.5, 1e-12);
  cr_assert_eq(r.items, 4);
  cr_assert_eq(r.slots, 2);
  cr_assert_float_eq(r.busy, 1.0, 1e-12);
  cr_assert_eq(r.tiles_visited, 10);
  fm_timing_work_free(&w);
}

Test(timing, grid_schedule_dispatches_in_order_and_drains_faster) {
  /* one SM, two slots, solo 2: blockIdx.x reversed gives row tiles 3, 2, 1, 0
     = costs 6, 1, 1, 1. Slot 0 runs 6; slot 1 runs 1, 1, 1 and is done at 3;
     the lone CTA then runs twice as fast: 3 + (6 - 3) / 2 = 4.5 */
  int32_t visited[4] = {1, 1, 1, 6};
  fm_timing_work w = hand_work(4, 6, visited, NULL, 0);
  fm_timing_coef c = unit;
  c.ctas_per_sm = 2;
  c.solo = 2;
  fm_timing_result r;
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM80, 1, 0, &w, &fwd1, &r, NULL), FM_OK);
  cr_assert_float_eq(r.schedule_us, 4.5, 1e-12);
  /* the time is linear in the coefficients along the critical SM:
     d t / d slot1 = 1 - 1/2, d t / d slot0 = 1/2; 3 items on slot 1, 1 on slot 0 */
  cr_assert_float_eq(r.critical[1], 0.5 * 3 + 0.5 * 1, 1e-12);
  cr_assert_float_eq(r.critical[3], 0.5 * 3 + 0.5 * 6, 1e-12);
  cr_assert_float_eq(r.critical[2], 0.5 * 3 * 6 + 0.5 * 6, 1e-12);
  /* the first wave spreads over the SMs: blocks 0, 2 on SM 0 and 1, 3 on SM 1 */
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM80, 2, 0, &w, &fwd1, &r, NULL), FM_OK);
  cr_assert_float_eq(r.schedule_us, 1 + (6 - 1) / 2.0, 1e-12, "got %g", r.schedule_us); /* SM 0: 6 and 1 */
  fm_timing_work_free(&w);
}

Test(timing, partial_tiles_cost_by_the_masks_causality) {
  int32_t visited[2] = {3, 3}, partial[2] = {1, 2};
  for (int causal = 0; causal < 2; causal++) {
    fm_timing_work w = hand_work(2, 3, visited, partial, causal);
    fm_timing_result r;
    cr_assert_eq(fm_timing_predict_coef(&unit, FM_KERNEL_SM90, 1, 0, &w, &fwd1, &r, NULL), FM_OK);
    double p = causal ? 100 : 10; /* 3 partial, 3 unmasked tiles on one CTA */
    cr_assert_float_eq(r.schedule_us, 3 * p + 3, 1e-9);
    /* noskip visits every tile, the masked ones as partial; full mask: none partial */
    fm_timing_problem pb = fwd1;
    pb.variant = FM_VARIANT_NOSKIP;
    cr_assert_eq(fm_timing_predict_coef(&unit, FM_KERNEL_SM90, 1, 0, &w, &pb, &r, NULL), FM_OK);
    cr_assert_float_eq(r.schedule_us, 3 * p + 3, 1e-9);
    pb.variant = FM_VARIANT_SKIP;
    pb.full_mask = 1;
    cr_assert_eq(fm_timing_predict_coef(&unit, FM_KERNEL_SM90, 1, 0, &w, &pb, &r, NULL), FM_OK);
    cr_assert_float_eq(r.schedule_us, 6, 1e-9);
    cr_assert_float_eq(r.rho, 0, 0);
    fm_timing_work_free(&w);
  }
}

Test(timing, an_item_without_visited_tiles_costs_its_classification_only) {
  /* row tiles visiting 2, 0, 3, 0 of 4 key tiles on one CTA, item_us 7 and 0.25 a
     considered tile: the two empty items (the kernels' F_EMPTY path) pay 4 x 0.25 each,
     not 7 more; the critical work counts 2 items, not 4 */
  int32_t visited[4] = {2, 0, 3, 0};
  fm_timing_work w = hand_work(4, 4, visited, NULL, 0);
  fm_timing_coef c = unit;
  c.item_us = 7;
  c.key_tile_us = 0.25;
  fm_timing_result r;
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 1, 0, &w, &fwd1, &r, NULL), FM_OK);
  cr_assert_float_eq(r.schedule_us, 2 * 7 + 4 * 4 * 0.25 + 5 * 1, 1e-12, "got %g", r.schedule_us);
  cr_assert_float_eq(r.critical[1], 2, 0);
  cr_assert_eq(r.items, 4);
  /* noskip visits every tile: no item is empty */
  fm_timing_problem pb = fwd1;
  pb.variant = FM_VARIANT_NOSKIP;
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 1, 0, &w, &pb, &r, NULL), FM_OK);
  cr_assert_float_eq(r.critical[1], 4, 0);
  fm_timing_work_free(&w);
}

Test(timing, time_in_prices_one_result_in_either_clock_state) {
  /* one prediction, its time in the other state: what a fresh prediction in that state gives */
  int32_t visited[4] = {1, 4, 2, 3};
  fm_timing_work w = hand_work(4, 4, visited, NULL, 0);
  fm_timing_coef c = unit;
  c.boost_us = 2;
  c.throttle = 1.5;
  for (int s = 0; s < 2; s++) {
    fm_timing_problem pb = fwd1;
    pb.clock = (fm_clock)s;
    fm_timing_result r, other;
    cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 1, 0, &w, &pb, &r, NULL), FM_OK);
    cr_assert_float_eq(fm_timing_time_in(&c, pb.clock, &r), r.time_us, 0);
    pb.clock = (fm_clock)!s;
    cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 1, 0, &w, &pb, &other, NULL), FM_OK);
    cr_assert_float_eq(fm_timing_time_in(&c, pb.clock, &r), other.time_us, 1e-12);
  }
  /* 10 us of work: burst 0.5 + 2 + 1.5 x 8, sustained 0.5 + 1.5 x 10 */
  fm_timing_result r;
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 1, 0, &w, &fwd1, &r, NULL), FM_OK);
  cr_assert_float_eq(fm_timing_time_in(&c, FM_CLOCK_BURST, &r), 14.5, 1e-12);
  cr_assert_float_eq(fm_timing_time_in(&c, FM_CLOCK_SUSTAINED, &r), 15.5, 1e-12);
  fm_timing_work_free(&w);
}

/* fwd1 on one sm90 CTA with c, the floor at hbm_gbs (0: none). */
static fm_timing_result one_cta(const fm_timing_coef *c, double hbm_gbs, const fm_timing_work *w) {
  fm_timing_result r;
  cr_assert_eq(fm_timing_predict_coef(c, FM_KERNEL_SM90, 1, hbm_gbs, w, &fwd1, &r, NULL), FM_OK);
  return r;
}

Test(timing, boost_window_throttles_the_makespan_past_it) {
  /* row tiles of 4 and 6 unmasked tiles of 1 us on one CTA: a makespan of 10
     us. A window of 4 us, throttle 1.5: 4 + 1.5 * 6 = 13 us, + launch 0.5 */
  int32_t visited[2] = {4, 6};
  fm_timing_work w = hand_work(2, 6, visited, NULL, 0);
  fm_timing_coef c = unit;
  c.boost_us = 4;
  c.throttle = 1.5;
  fm_timing_result r = one_cta(&c, 0, &w);
  cr_assert_float_eq(r.schedule_us, 10, 1e-12);
  cr_assert_float_eq(r.throttle_us, 3, 1e-12);
  cr_assert_float_eq(r.time_us, 13.5, 1e-12);
  cr_assert_float_eq(fm_timing_clocked(&c, FM_CLOCK_BURST, 3), 3, 0); /* inside the window: as is */
  cr_assert_float_eq(fm_timing_clocked(&c, FM_CLOCK_BURST, 8), 10, 1e-12);
  /* a window as long as the launch or longer: the boost clock throughout */
  for (c.boost_us = 10; c.boost_us <= 20; c.boost_us += 10) {
    r = one_cta(&c, 0, &w);
    cr_assert_eq(r.throttle_us, 0);
    cr_assert_float_eq(r.time_us, 10.5, 1e-12);
  }
  /* throttle 1, or 0 as in a zeroed struct: no window at all */
  c.boost_us = 0;
  for (c.throttle = 0; c.throttle <= 1; c.throttle += 1)
    cr_assert_float_eq(one_cta(&c, 0, &w).time_us, 10.5, 1e-12, "throttle %g", c.throttle);
  /* the memory floor is HBM's, which keeps its clock: a floor above the
     throttled makespan sets the time as it is */
  c.throttle = 2;
  r = one_cta(&c, 1e-6, &w);
  cr_assert_gt(r.floor_us, 20);
  cr_assert_float_eq(r.time_us, 0.5 + r.floor_us, 1e-9 * r.floor_us);
  fm_timing_work_free(&w);
}

Test(timing, sustained_clock_throttles_the_whole_makespan) {
  /* the same 10 us makespan launched back to back: the power limit's clock from its
     start, 1.5 * 10 = 15 us + launch 0.5, whatever the window; burst as above */
  int32_t visited[2] = {4, 6};
  fm_timing_work w = hand_work(2, 6, visited, NULL, 0);
  fm_timing_coef c = unit;
  c.throttle = 1.5;
  fm_timing_problem pb = fwd1;
  pb.clock = FM_CLOCK_SUSTAINED;
  fm_timing_result r;
  for (c.boost_us = 0; c.boost_us <= 20; c.boost_us += 4) {
    cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 1, 0, &w, &pb, &r, NULL), FM_OK);
    cr_assert_float_eq(r.schedule_us, 10, 1e-12);
    cr_assert_float_eq(r.throttle_us, 5, 1e-12, "boost_us %g", c.boost_us);
    cr_assert_float_eq(r.time_us, 15.5, 1e-12);
    cr_assert_float_eq(fm_timing_clocked(&c, FM_CLOCK_SUSTAINED, 3), 4.5, 1e-12);
    /* the burst state of the same makespan: the window's map, whatever the length of the window */
    cr_assert_float_eq(fm_timing_clocked(&c, FM_CLOCK_BURST, 3), 3 <= c.boost_us ? 3 : c.boost_us + 1.5 * (3 - c.boost_us),
                       1e-12, "boost_us %g", c.boost_us);
  }
  /* no window in the profile: both states are the boost clock's time */
  c.throttle = 1;
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 1, 0, &w, &pb, &r, NULL), FM_OK);
  cr_assert_float_eq(r.time_us, 10.5, 1e-12);
  fm_timing_work_free(&w);
}

Test(timing, clock_names_round_trip_and_bad_ones_are_refused) {
  for (int k = FM_CLOCK_BURST; k <= FM_CLOCK_SUSTAINED; k++) {
    fm_clock c = (fm_clock)-1;
    cr_assert_eq(fm_clock_parse(fm_clock_name((fm_clock)k), &c, NULL), FM_OK);
    cr_assert_eq(c, (fm_clock)k);
  }
  fm_clock c;
  fm_err err;
  cr_assert_eq(fm_clock_parse("boost", &c, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "burst") && strstr(err.msg, "sustained"), "%s", err.msg);
  cr_assert_eq(fm_clock_parse(NULL, &c, &err), FM_EINVAL);
  /* the lookup behind it (fm_words.h): exact names only, a NULL word or table entry is none */
  static const char *const names[] = {"skip", NULL, "dense"};
  cr_assert_eq(fm_word_index("dense", names, 3), 2);
  cr_assert_eq(fm_word_index("Dense", names, 3), -1);
  cr_assert_eq(fm_word_index("dens", names, 3), -1);
  cr_assert_eq(fm_word_index(NULL, names, 3), -1);
  cr_assert_eq(fm_word_index("dense", names, 2), -1);
}

static fm_colmask *family(const char *name, int64_t S, int64_t B, int64_t H, uint64_t seed) {
  fm_family_request req = {name, S, B, H, seed, -1, NULL, 0, NULL};
  fm_colmask *m = NULL;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  return m;
}

static const fm_timing_coef sm80_128 = {.head_dim = 128, .br = 128, .bc = 64, .ctas_per_sm = 2,
                                        .launch_us = 5, .item_us = 4.5, .key_tile_us = 0.003,
                                        .unmasked_us = 3.44, .partial_us = 4.3,
                                        .partial_causal_us = 4.46, .solo = 1.5};

Test(timing, time_is_the_critical_work_times_the_coefficients) {
  /* what calibrate fits: time = sum_k critical[k] * coefficient k, for every
     family, shared and per-head masks, both schedules */
  const double c[FM_TIMING_NFEAT] = {5, 4.5, 0.003, 3.44, 4.3, 4.46};
  for (int f = 0; f < fm_family_count(); f++)
    for (int k = 0; k < 2; k++) {
      fm_colmask *m = family(fm_family_at(f)->name, 3000 + 777 * f, 2, 3, 1);
      fm_timing_work w;
      cr_assert_eq(fm_timing_work_init(&w, m, 128, 64, NULL), FM_OK);
      fm_timing_problem pb = {.batch = 2, .heads = 3, .head_dim = 128, .pass = FM_PASS_FWD};
      fm_timing_result r;
      cr_assert_eq(fm_timing_predict_coef(&sm80_128, k ? FM_KERNEL_SM90 : FM_KERNEL_SM80, 7, 0, &w,
                                          &pb, &r, NULL), FM_OK);
      double dot = 0;
      for (int q = 0; q < FM_TIMING_NFEAT; q++) dot += r.critical[q] * c[q];
      cr_assert_float_eq(dot, r.time_us, 1e-9 * r.time_us, "%s: %g vs %g", fm_family_at(f)->name, dot, r.time_us);
      cr_assert_eq(r.items, 2 * 3 * w.tr);
      cr_assert(r.busy > 0 && r.busy <= 1 + 1e-12);
      /* the visited tiles are the kernel's: everything but the min/max MASKED ones */
      fm_tile_counts counts;
      cr_assert_eq(fm_tile_count(m, 128, 64, 0, &counts, NULL, NULL, NULL), FM_OK);
      int64_t mult = 6 / fm_colmask_nsets(m);
      cr_assert_eq(r.tiles_visited, (counts.total - counts.minmax[FM_TILE_MASKED]) * mult);
      fm_timing_work_free(&w);
      fm_colmask_destroy(m);
    }
}

Test(timing, boost_window_on_both_sides_of_it) {
  /* full masks on the sm90 schedule, a short launch and a long one, the
     window between their makespans: the short one is predicted as without a
     window, the long one takes (throttle - 1) * (makespan - boost_us) more;
     both are launch + clocked(critical work . coefficients) */
  const double k[FM_TIMING_NFEAT] = {5, 4.5, 0.003, 3.44, 4.3, 4.46};
  fm_timing_coef c = sm80_128;
  c.ctas_per_sm = 1;
  c.solo = 1;
  c.bc = 128;
  fm_colmask *m[2] = {family("full", 4096, 1, 4, 0), family("full", 32768, 1, 16, 0)};
  fm_timing_work w[2];
  fm_timing_problem pb[2] = {{.batch = 1, .heads = 4, .head_dim = 128, .pass = FM_PASS_FWD},
                             {.batch = 1, .heads = 16, .head_dim = 128, .pass = FM_PASS_FWD}};
  fm_timing_result plain[2], r;
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(fm_timing_work_init(&w[i], m[i], 128, 128, NULL), FM_OK);
    cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 132, 4800, &w[i], &pb[i], &plain[i], NULL), FM_OK);
  }
  c.boost_us = sqrt(plain[0].schedule_us * plain[1].schedule_us);
  c.throttle = 1.2;
  cr_assert(plain[0].schedule_us < c.boost_us && c.boost_us < plain[1].schedule_us);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 132, 4800, &w[i], &pb[i], &r, NULL), FM_OK);
    double sched = 0, extra = i ? 0.2 * (plain[1].schedule_us - c.boost_us) : 0;
    for (int q = 1; q < FM_TIMING_NFEAT; q++) sched += r.critical[q] * k[q];
    cr_assert_float_eq(r.schedule_us, sched, 1e-9 * sched);
    cr_assert_float_eq(r.schedule_us, plain[i].schedule_us, 0);
    cr_assert_float_eq(r.throttle_us, extra, 1e-9 * r.time_us);
    cr_assert_float_eq(r.time_us, plain[i].time_us + extra, 1e-12 * r.time_us);
    cr_assert_float_eq(r.time_us, k[0] + fm_timing_clocked(&c, FM_CLOCK_BURST, sched), 1e-9 * r.time_us);
    fm_timing_work_free(&w[i]);
    fm_colmask_destroy(m[i]);
  }
}

Test(timing, full_mask_option_equals_the_full_family) {
  fm_colmask *doc = family("causal_document", 20000, 1, 4, 3), *full = family("full", 20000, 1, 4, 3);
  fm_timing_work wd, wf;
  cr_assert_eq(fm_timing_work_init(&wd, doc, 128, 64, NULL), FM_OK);
  cr_assert_eq(fm_timing_work_init(&wf, full, 128, 64, NULL), FM_OK);
  fm_timing_problem pb = {.batch = 1, .heads = 4, .head_dim = 128, .pass = FM_PASS_FWD};
  fm_timing_result a, b, s;
  cr_assert_eq(fm_timing_predict_coef(&sm80_128, FM_KERNEL_SM80, 132, 4800, &wf, &pb, &b, NULL), FM_OK);
  cr_assert_eq(fm_timing_predict_coef(&sm80_128, FM_KERNEL_SM80, 132, 4800, &wd, &pb, &s, NULL), FM_OK);
  pb.full_mask = 1;
  cr_assert_eq(fm_timing_predict_coef(&sm80_128, FM_KERNEL_SM80, 132, 4800, &wd, &pb, &a, NULL), FM_OK);
  cr_assert_float_eq(a.time_us, b.time_us, 1e-9 * b.time_us);
  cr_assert_lt(s.time_us, a.time_us / 3); /* many documents: most tiles skipped */
  fm_timing_work_free(&wd);
  fm_timing_work_free(&wf);
  fm_colmask_destroy(doc);
  fm_colmask_destroy(full);
}

Test(timing, what_if_tiles_scale_the_tile_costs_by_area) {
  /* a full mask at 128 x 128 has half the tiles of 128 x 64, each costing
     twice as much: the same tile work; what_if says it is an estimate */
  fm_colmask *m = family("full", 65536, 1, 8, 0);
  fm_timing_work w64, w128;
  cr_assert_eq(fm_timing_work_init(&w64, m, 128, 64, NULL), FM_OK);
  cr_assert_eq(fm_timing_work_init(&w128, m, 128, 128, NULL), FM_OK);
  fm_timing_coef c = sm80_128;
  c.key_tile_us = 0;
  fm_timing_problem pb = {.batch = 1, .heads = 8, .head_dim = 128, .pass = FM_PASS_FWD};
  fm_timing_result a, b;
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM80, 132, 0, &w64, &pb, &a, NULL), FM_OK);
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM80, 132, 0, &w128, &pb, &b, NULL), FM_OK);
  cr_assert_eq(a.what_if, 0);
  cr_assert_eq(b.what_if, 1);
  cr_assert_float_eq(a.time_us, b.time_us, 1e-9 * a.time_us);
  cr_assert_float_eq(a.flops_paper, b.flops_paper, 1);
  fm_timing_work_free(&w64);
  fm_timing_work_free(&w128);
  fm_colmask_destroy(m);
}

Test(timing, backward_items_are_key_tiles) {
  /* causal S = 512 at 128 x 128: key tile j is visited by row tiles j..3, so
     the column-side items cost 4, 3, 2, 1 tiles (1 partial each) */
  fm_colmask *m = family("causal", 512, 1, 1, 0);
  fm_timing_work w;
  cr_assert_eq(fm_timing_work_init(&w, m, 128, 128, NULL), FM_OK);
  for (int32_t j = 0; j < 4; j++) {
    cr_assert_eq(w.cols[j].visited, 4 - j);
    cr_assert_eq(w.cols[j].partial, 1);
  }
  fm_timing_coef c = unit;
  c.br = c.bc = 128;
  fm_timing_problem pb = fwd1;
  pb.pass = FM_PASS_BWD;
  fm_timing_result r;
  cr_assert_eq(fm_timing_predict_coef(&c, FM_KERNEL_SM90, 4, 0, &w, &pb, &r, NULL), FM_OK);
  cr_assert_eq(r.items, 4);
  cr_assert_float_eq(r.schedule_us, 100 + 3, 1e-9); /* key tile 0: 1 causal partial + 3 unmasked */
  cr_assert_float_eq(r.flops_paper, 2.5 * 4.0 * 512 * 512 * 128 * (1 - w.counts.sparsity), 1);
  /* a profile without backward coefficients says so */
  fm_gpu_profile p = {.name = "p", .kernel = FM_KERNEL_SM90, .sms = 4, .nfwd = 1, .fwd = {c}};
  fm_err err;
  cr_assert_eq(fm_timing_predict(&p, &w, &pb, &r, &err), FM_EUNSUPPORTED);
  cr_assert(strstr(err.msg, "no backward coefficients yet"), "%s", err.msg);
  p.nbwd = 1;
  p.bwd[0] = c;
  cr_assert_eq(fm_timing_predict(&p, &w, &pb, &r, NULL), FM_OK);
  fm_timing_work_free(&w);
  fm_colmask_destroy(m);
}

Test(timing, rejects_problems_that_do_not_fit_the_mask) {
  fm_colmask *m = family("random_eviction", 1000, 2, 3, 0); /* 6 per-head sets */
  fm_timing_work w;
  cr_assert_eq(fm_timing_work_init(&w, m, 128, 64, NULL), FM_OK);
  fm_timing_problem pb = {.batch = 2, .heads = 4, .head_dim = 128, .pass = FM_PASS_FWD};
  fm_timing_result r;
  fm_err err;
  cr_assert_eq(fm_timing_predict_coef(&sm80_128, FM_KERNEL_SM80, 132, 0, &w, &pb, &r, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "2 x 3 vector sets"), "%s", err.msg);
  pb.heads = 3;
  pb.variant = FM_VARIANT_DENSE;
  cr_assert_eq(fm_timing_predict_coef(&sm80_128, FM_KERNEL_SM80, 132, 0, &w, &pb, &r, &err), FM_EUNSUPPORTED);
  fm_timing_work_free(&w);
  fm_colmask_destroy(m);
}

/* ---------------------------------------------------------------- profiles */

/* A profile of one forward head dim; `window` goes after solo. */
#define PROFILE_TEXT(version, window)                                                              \
  "{\"format\": \"fmsim-gpu-profile\", \"version\": " version ", \"gpu\": \"NVIDIA H200\","          \
  " \"kernel\": \"sm80\", \"sms\": 132, \"hbm_gbs\": 4800, \"date\": \"2026-11-21\","                 \
  " \"fmsim_version\": \"0.1.0\", \"source\": \"test\", \"forward\": [{\"head_dim\": 128, \"br\": 128," \
  " \"bc\": 64, \"ctas_per_sm\": 2, \"launch_us\": 5, \"item_us\": 4.5, \"key_tile_us\": 0.003,"       \
  " \"unmasked_us\": 3.44, \"partial_us\": 4.3, \"partial_causal_us\": 4.46, \"solo\": 1.5," window      \
  " \"fit\": {\"cases\": 72, \"median_abs_error\": 0.004, \"worst_abs_error\": 0.026}}],"             \
  " \"backward\": []}"

static const char *good_profile = PROFILE_TEXT("1", "");
static const char *good_profile_v2 = PROFILE_TEXT("2", " \"boost_us\": 2000, \"throttle\": 1.25,");

/* base with the first occurrence of `from` replaced by `to`, parsed. */
static fm_status parse_edited_from(const char *base, const char *from, const char *to,
                                   fm_gpu_profile *p, fm_err *err) {
  char buf[4096];
  const char *at = strstr(base, from);
  cr_assert(at, "no '%s' in the profile", from);
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
  return fm_profile_parse(buf, strlen(buf), "p.json", p, err);
}

static fm_status parse_edited(const char *from, const char *to, fm_gpu_profile *p, fm_err *err) {
  return parse_edited_from(good_profile, from, to, p, err);
}

Test(profile, reads_writes_and_reads_back) {
  fm_gpu_profile p, q;
  fm_err err;
  cr_assert_eq(fm_profile_parse(good_profile, strlen(good_profile), "p.json", &p, &err), FM_OK, "%s", err.msg);
  cr_assert_str_eq(p.gpu, "NVIDIA H200");
  cr_assert_eq(p.kernel, FM_KERNEL_SM80);
  cr_assert_eq(p.nfwd, 1);
  cr_assert_eq(p.nbwd, 0);
  const fm_timing_coef *c = fm_profile_coef(&p, FM_PASS_FWD, 128);
  cr_assert(c && c->ctas_per_sm == 2 && c->solo == 1.5 && c->fit_cases == 72);
  cr_assert_null(fm_profile_coef(&p, FM_PASS_FWD, 64));
  cr_assert_null(fm_profile_coef(&p, FM_PASS_BWD, 128));
  char path[512];
  snprintf(path, sizeof path, "%s/profile_roundtrip.json", FM_TEST_TMP_DIR);
  cr_assert_eq(fm_profile_save(&p, path, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(fm_profile_load(path, &q, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(memcmp(q.fwd, p.fwd, sizeof p.fwd), 0);
  cr_assert_str_eq(q.source, p.source);
}

Test(profile, refuses_bad_profiles_naming_what_is_wrong) {
  static const struct {
    const char *from, *to, *want;
  } bad[] = {
      {"fmsim-gpu-profile", "something-else", "'format': expected \"fmsim-gpu-profile\""},
      {"\"version\": 1", "\"version\": 3", "profile version 3; this fmsim reads versions 1 to 2"},
      {"\"version\": 1", "\"version\": 2", "'boost_us' is missing"}, /* version 2 has a window */
      {"\"sm80\"", "\"sm70\"", "'kernel': expected a kernel of the registry"},
      {"\"unmasked_us\": 3.44", "\"unmasked_us\": -1", "'unmasked_us': expected a number in [0,"},
      {"\"solo\": 1.5", "\"solo\": \"fast\"", "'solo': expected a number in [1, 4]"},
      {"\"bc\": 64", "\"bc\": 128", "fitted at 128 x 128 tiles, but kernel sm80 uses 128 x 64"},
      {"\"head_dim\": 128", "\"head_dim\": 96", "kernel sm80 has no head dim 96"},
      {"\"sms\": 132, ", "", "'sms' is missing"},
      {"\"backward\": []", "\"backward\": {}", "'backward': expected an array"},
      {"\"ctas_per_sm\": 2", "\"ctas_per_sm\": 2.5", "'ctas_per_sm': expected an integer"},
      {"}], \"backward\"", "}, 7], \"backward\"", "expected an object"},
      {"\"gpu\": \"NVIDIA H200\",", "\"gpu\": \"NVIDIA H200\"", "p.json:1:"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fm_gpu_profile p;
    fm_err err;
    cr_assert_neq(parse_edited(bad[i].from, bad[i].to, &p, &err), FM_OK, "accepted edit %zu", i);
    cr_assert(strstr(err.msg, bad[i].want), "edit %zu: got '%s', want '%s'", i, err.msg, bad[i].want);
    cr_assert_null(strchr(err.msg, '\n'));
  }
}

Test(profile, version_2_carries_the_boost_window) {
  fm_gpu_profile p, q;
  fm_err err;
  cr_assert_eq(fm_profile_parse(good_profile_v2, strlen(good_profile_v2), "p.json", &p, &err), FM_OK,
               "%s", err.msg);
  cr_assert_eq(p.fwd[0].boost_us, 2000);
  cr_assert_eq(p.fwd[0].throttle, 1.25);
  char path[512];
  snprintf(path, sizeof path, "%s/profile_v2_roundtrip.json", FM_TEST_TMP_DIR);
  cr_assert_eq(fm_profile_save(&p, path, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(fm_profile_load(path, &q, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(q.fwd[0].boost_us, 2000);
  cr_assert_eq(q.fwd[0].throttle, 1.25);
  static const struct {
    const char *from, *to, *want;
  } bad[] = {
      {"\"throttle\": 1.25", "\"throttle\": 0.9", "'throttle': expected a number in [1, 4]"},
      {"\"throttle\": 1.25", "\"throttle\": \"high\"", "'throttle': expected a number in [1, 4]"},
      {" \"throttle\": 1.25,", "", "'throttle' is missing"},
      {"\"boost_us\": 2000", "\"boost_us\": -1", "'boost_us': expected a number in [0,"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_neq(parse_edited_from(good_profile_v2, bad[i].from, bad[i].to, &p, &err), FM_OK, "edit %zu", i);
    cr_assert(strstr(err.msg, bad[i].want), "edit %zu: got '%s', want '%s'", i, err.msg, bad[i].want);
  }
}

Test(profile, version_1_loads_and_predicts_as_before) {
  /* no window in a version-1 profile: even a launch of half a second is
     launch + max(makespan, floor), as before the window existed; written
     again it is version 2 with throttle 1 and predicts the same; the same
     coefficients with a window predict longer */
  fm_gpu_profile p, q, v2;
  fm_err err;
  cr_assert_eq(fm_profile_parse(good_profile, strlen(good_profile), "p.json", &p, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(p.fwd[0].throttle, 1);
  cr_assert_eq(p.fwd[0].boost_us, 0);
  fm_colmask *m = family("full", 131072, 1, 32, 0);
  fm_timing_work w;
  cr_assert_eq(fm_timing_work_init(&w, m, 128, 64, NULL), FM_OK);
  fm_timing_problem pb = {.batch = 1, .heads = 32, .head_dim = 128, .pass = FM_PASS_FWD};
  fm_timing_result r, old, again, windowed;
  cr_assert_eq(fm_timing_predict(&p, &w, &pb, &r, &err), FM_OK, "%s", err.msg);
  cr_assert_gt(r.time_us, 1e5);
  cr_assert_eq(r.throttle_us, 0);
  cr_assert_eq(r.time_us, r.launch_us + fmax(r.schedule_us, r.floor_us));
  fm_timing_coef before = sm80_128; /* the same numbers, no window fields at all */
  cr_assert_eq(fm_timing_predict_coef(&before, FM_KERNEL_SM80, 132, 4800, &w, &pb, &old, NULL), FM_OK);
  cr_assert_eq(r.time_us, old.time_us);
  char path[512], text[4096];
  snprintf(path, sizeof path, "%s/profile_v1_resaved.json", FM_TEST_TMP_DIR);
  cr_assert_eq(fm_profile_save(&p, path, &err), FM_OK, "%s", err.msg);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "\"version\": 2") && strstr(text, "\"throttle\": 1"), "%s", text);
  cr_assert_eq(fm_profile_load(path, &q, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(fm_timing_predict(&q, &w, &pb, &again, NULL), FM_OK);
  cr_assert_eq(again.time_us, r.time_us);
  cr_assert_eq(fm_profile_parse(good_profile_v2, strlen(good_profile_v2), "v2", &v2, NULL), FM_OK);
  cr_assert_eq(fm_timing_predict(&v2, &w, &pb, &windowed, NULL), FM_OK);
  cr_assert_float_eq(windowed.time_us, r.time_us + 0.25 * (r.schedule_us - 2000), 1e-9 * r.time_us);
  fm_timing_work_free(&w);
  fm_colmask_destroy(m);
}

/* ---------------------------------------------------------------- fit */

typedef struct synth {
  fm_colmask *m[16];
  fm_timing_work w[16];
  fm_fit_case c[16];
  int n;
} synth;

/* Cases of several families, lengths, batch and heads, "measured" by the
 * model itself with coefficients `truth`. */
static void synth_cases(synth *s, const fm_timing_coef *truth, fm_kernel_id k, int causal_partials) {
  static const struct {
    const char *family;
    int64_t S, B, H;
  } spec[] = {{"full", 4096, 1, 2},          {"full", 1000, 1, 1},
              {"causal", 8192, 2, 4},        {"document", 6000, 1, 8},
              {"global_sliding_window", 9000, 1, 3}, {"prefix_lm_causal", 7000, 3, 2},
              {"sliding_window", 16384, 1, 4}, {"random_eviction", 5000, 2, 2},
              {"causal_document", 12000, 1, 6}, {"share_question", 3000, 4, 1}};
  s->n = 0;
  for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
    fm_colmask *m = family(spec[i].family, spec[i].S, spec[i].B, spec[i].H, i);
    if (!causal_partials && fm_colmask_causal(m)) {
      fm_colmask_destroy(m);
      continue;
    }
    int n = s->n++;
    s->m[n] = m;
    cr_assert_eq(fm_timing_work_init(&s->w[n], m, truth->br, truth->bc, NULL), FM_OK);
    fm_fit_case *c = &s->c[n];
    c->work = &s->w[n];
    c->problem = (fm_timing_problem){.batch = spec[i].B, .heads = spec[i].H, .head_dim = 128,
                                     .pass = FM_PASS_FWD, .variant = FM_VARIANT_SKIP};
    fm_timing_result r;
    cr_assert_eq(fm_timing_predict_coef(truth, k, 8, 0, &s->w[n], &c->problem, &r, NULL), FM_OK);
    c->measured_us = r.time_us;
  }
}

static void synth_free(synth *s) {
  for (int i = 0; i < s->n; i++) {
    fm_timing_work_free(&s->w[i]);
    fm_colmask_destroy(s->m[i]);
  }
}

Test(fit, recovers_the_coefficients_that_made_the_data) {
  for (int k = 0; k < 2; k++) {
    fm_timing_coef truth = sm80_128;
    truth.ctas_per_sm = k ? 1 : 2;
    truth.solo = k ? 1 : 1.5;
    truth.br = 128;
    truth.bc = k ? 128 : 64;
    fm_kernel_id kernel = k ? FM_KERNEL_SM90 : FM_KERNEL_SM80;
    synth s;
    synth_cases(&s, &truth, kernel, 1);
    fm_timing_coef got;
    double pred[16];
    unsigned un = 0;
    fm_err err;
    cr_assert_eq(fm_timing_fit(kernel, 8, 0, 128, s.c, s.n, NULL, &got, pred, &un, &err), FM_OK, "%s", err.msg);
    /* the schedule makes the time piecewise linear in the coefficients: the fit
       lands within a small fraction of a percent, not exactly */
    for (int i = 0; i < s.n; i++)
      cr_assert_float_eq(pred[i], s.c[i].measured_us, 2e-3 * s.c[i].measured_us, "case %d", i);
    cr_assert_lt(got.fit_worst_err, 2e-3);
    cr_assert_lt(got.fit_median_err, 1e-3);
    cr_assert_float_eq(got.unmasked_us, truth.unmasked_us, 1e-2 * truth.unmasked_us);
    cr_assert_float_eq(got.partial_us, truth.partial_us, 3e-2 * truth.partial_us);
    cr_assert_float_eq(got.partial_causal_us, truth.partial_causal_us, 3e-2 * truth.partial_causal_us);
    cr_assert_float_eq(got.solo, truth.solo, 0.11, "solo %g", got.solo);
    synth_free(&s);
  }
}

Test(fit, says_which_coefficients_the_cases_leave_open) {
  /* no causal mask: nothing exercises partial_causal_us, which takes partial_us */
  fm_timing_coef truth = sm80_128;
  synth s;
  synth_cases(&s, &truth, FM_KERNEL_SM80, 0);
  fm_timing_coef got;
  unsigned un = 0;
  cr_assert_eq(fm_timing_fit(FM_KERNEL_SM80, 8, 0, 128, s.c, s.n, NULL, &got, NULL, &un, NULL), FM_OK);
  cr_assert(un & (1u << 5), "unidentified %#x", un);
  cr_assert_float_eq(got.partial_causal_us, got.partial_us, 0);
  /* pinning one: it keeps its value and is not reported */
  fm_fit_options fo = {.fixed = 1u << 0, .fixed_value = {7}};
  cr_assert_eq(fm_timing_fit(FM_KERNEL_SM80, 8, 0, 128, s.c, s.n, &fo, &got, NULL, &un, NULL), FM_OK);
  cr_assert_float_eq(got.launch_us, 7, 0);
  cr_assert_eq(un & 1u, 0u);
  /* bad measurements and too few cases */
  fm_err err;
  s.c[1].measured_us = 0;
  cr_assert_eq(fm_timing_fit(FM_KERNEL_SM80, 8, 0, 128, s.c, s.n, NULL, &got, NULL, &un, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "measured time must be positive"), "%s", err.msg);
  cr_assert_eq(fm_timing_fit(FM_KERNEL_SM80, 8, 0, 128, s.c, 1, NULL, &got, NULL, &un, &err), FM_EINVAL);
  synth_free(&s);
}

/* The synthetic sm90 forward of sm80_128's costs at 128 x 128 tiles. */
static fm_timing_coef sm90_truth(void) {
  fm_timing_coef t = sm80_128;
  t.ctas_per_sm = 1;
  t.solo = 1;
  t.bc = 128;
  return t;
}

/* The makespans of s's cases with c, sorted. */
static void sorted_makespans(const synth *s, const fm_timing_coef *c, double *ms) {
  for (int i = 0; i < s->n; i++) {
    fm_timing_result r;
    cr_assert_eq(fm_timing_predict_coef(c, FM_KERNEL_SM90, 8, 0, &s->w[i], &s->c[i].problem, &r, NULL), FM_OK);
    ms[i] = r.schedule_us;
  }
  for (int i = 1; i < s->n; i++) /* insertion sort */
    for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
      double t = ms[j];
      ms[j] = ms[j - 1];
      ms[j - 1] = t;
    }
}

Test(fit, recovers_a_boost_window_from_the_models_own_times) {
  /* cases "measured" by the model with a window between their 5th and 6th
     makespans: the fit finds boost_us and throttle, and its test keeps the
     window; without the option the same data fit worse and get none */
  fm_timing_coef truth = sm90_truth();
  synth s;
  synth_cases(&s, &truth, FM_KERNEL_SM90, 1);
  double ms[16];
  sorted_makespans(&s, &truth, ms);
  truth.boost_us = sqrt(ms[4] * ms[5]);
  truth.throttle = 1.2;
  for (int i = 0; i < s.n; i++) {
    fm_timing_result r;
    cr_assert_eq(fm_timing_predict_coef(&truth, FM_KERNEL_SM90, 8, 0, &s.w[i], &s.c[i].problem, &r, NULL), FM_OK);
    s.c[i].measured_us = r.time_us;
  }
  fm_fit_options fo = {.boost_window = 1};
  fm_timing_coef got, plain;
  double pred[16];
  fm_err err;
  cr_assert_eq(fm_timing_fit(FM_KERNEL_SM90, 8, 0, 128, s.c, s.n, &fo, &got, pred, NULL, &err), FM_OK, "%s", err.msg);
  cr_assert_float_eq(got.throttle, truth.throttle, 0.01, "throttle %g", got.throttle);
  cr_assert_float_eq(got.boost_us, truth.boost_us, 0.05 * truth.boost_us, "boost %g us, truth %g us",
                     got.boost_us, truth.boost_us);
  cr_assert(got.fit_boost_p >= 0 && got.fit_boost_p < FM_FIT_BOOST_P, "p %g", got.fit_boost_p);
  cr_assert_lt(got.fit_worst_err, 5e-3);
  for (int i = 0; i < s.n; i++)
    cr_assert_float_eq(pred[i], s.c[i].measured_us, 5e-3 * s.c[i].measured_us, "case %d", i);
  cr_assert_eq(fm_timing_fit(FM_KERNEL_SM90, 8, 0, 128, s.c, s.n, NULL, &plain, NULL, NULL, NULL), FM_OK);
  cr_assert_eq(plain.throttle, 1);
  cr_assert_eq(plain.fit_boost_p, -1);
  cr_assert_gt(plain.fit_worst_err, 5 * got.fit_worst_err);
  synth_free(&s);
}

Test(fit, keeps_no_window_the_data_does_not_ask_for) {
  /* the model's own times without a window, each off by a fixed +-1%: a
     window fitted to that noise lowers the residual too little, and the
     test leaves the profile without one */
  fm_timing_coef truth = sm90_truth();
  synth s;
  synth_cases(&s, &truth, FM_KERNEL_SM90, 1);
  for (int i = 0; i < s.n; i++) s.c[i].measured_us *= 1 + 0.01 * ((i * 7) % 3 - 1);
  fm_fit_options fo = {.boost_window = 1};
  fm_timing_coef got;
  cr_assert_eq(fm_timing_fit(FM_KERNEL_SM90, 8, 0, 128, s.c, s.n, &fo, &got, NULL, NULL, NULL), FM_OK);
  cr_assert_eq(got.throttle, 1);
  cr_assert_eq(got.boost_us, 0);
  cr_assert_geq(got.fit_boost_p, FM_FIT_BOOST_P);
  synth_free(&s);
}

/* ---------------------------------------------------------------- commands */

static const fm_jv *first_tile(const fm_jdoc *d) {
  return fm_jv_first(fm_jv_get(fm_jv_first(fm_jv_get(fm_jdoc_root(d), "passes")), "tiles"));
}

static double predict_ms(const char *args) {
  fmt_result r;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "predict --json --gpu h200-sm80 %s", args);
  fmt_run(&r, cmd);
  cr_assert_eq(r.status, 0, "%s: %s", cmd, r.err);
  fm_jdoc *d;
  cr_assert_eq(fm_jdoc_parse(r.out, strlen(r.out), "stdout", &d, NULL), FM_OK);
  double ms = fm_jv_number(fm_jv_get(first_tile(d), "time_ms"), -1);
  fm_jdoc_free(d);
  return ms;
}

Test(predict_cli, predicts_a_million_tokens) {
  fmt_result r;
  fmt_run(&r, "predict --family causal_document --seqlen 1048576 --gpu h200-sm80 --json");
  cr_assert_eq(r.status, 0, "%s", r.err);
  fm_jdoc *d;
  cr_assert_eq(fm_jdoc_parse(r.out, strlen(r.out), "stdout", &d, NULL), FM_OK);
  const fm_jv *t = first_tile(d), *root = fm_jdoc_root(d);
  cr_assert_str_eq(fm_jv_string(fm_jv_get(fm_jv_get(root, "profile"), "kernel")), "sm80");
  cr_assert_eq(fm_jv_number(fm_jv_get(t, "br"), 0), 128);
  cr_assert_eq(fm_jv_number(fm_jv_get(t, "bc"), 0), 64);
  double ms = fm_jv_number(fm_jv_get(t, "time_ms"), 0), rho = fm_jv_number(fm_jv_get(t, "rho"), 0);
  cr_assert_gt(ms, 0);
  /* a mostly-skipped mask: faster than the full mask by about 1/(1-rho), and
     than noskip by more (noskip also masks the tiles it should skip) */
  double full = fm_jv_number(fm_jv_get(t, "speedup_over_full_mask"), 0);
  cr_assert(full > 0.8 / (1 - rho) && full < 1.2 / (1 - rho), "speed-up %g, rho %g", full, rho);
  cr_assert_gt(fm_jv_number(fm_jv_get(t, "speedup_over_noskip"), 0), full);
  cr_assert_eq(fm_jv_bool(fm_jv_get(t, "what_if"), 1), 0);
  fm_jdoc_free(d);
}

Test(predict_cli, compares_tile_sizes_as_what_ifs) {
  fmt_result r;
  fmt_run(&r, "predict --family sliding_window --seqlen 32768 --heads 8 --gpu h200-sm80 "
              "--br 64,128 --bc 64,128");
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "what-if tiles"), "%s", r.out);
  cr_assert(strstr(r.out, "scaled by area from 128 x 64"), "%s", r.out);
  for (const char *t = "64 x 64\0" "64 x 128\0" "128 x 128\0"; *t; t += strlen(t) + 1)
    cr_assert(strstr(r.out, t), "no row %s in %s", t, r.out);
  fmt_run(&r, "predict --family sliding_window --seqlen 32768 --gpu h200-sm80 --bc 128 --json");
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "\"what_if\": true"), "%s", r.out);
}

Test(predict_cli, interval_files_predict_like_their_family) {
  const char *p[1] = {"w=700"};
  fm_family_request req = {"sliding_window", 9000, 1, 1, 0, -1, NULL, 1, p};
  fm_colmask *m;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  char path[512], args[1024];
  snprintf(path, sizeof path, "%s/predict_sw.npy", FM_TEST_TMP_DIR);
  cr_assert_eq(fm_colmask_save_npy(m, path, FM_FORM_NONE, NULL, NULL), FM_OK);
  fm_colmask_destroy(m);
  snprintf(args, sizeof args, "--mask %s --causal --heads 16 --batch 2", path);
  double a = predict_ms(args);
  double b = predict_ms("--family sliding_window --seqlen 9000 --param w=700 --heads 16 --batch 2");
  cr_assert_float_eq(a, b, 1e-12 * b);
}

/* One row of a bad-input table: "fmsim CMD ARGS", where the token KEY in
 * ARGS stands for value, exits 2 with one line on stderr holding want, and
 * writes nothing on stdout. */
static void expect_usage(const char *cmdname, const char *args, const char *key, const char *value,
                         const char *want) {
  char line[1400];
  const char *at = key ? strstr(args, key) : NULL;
  if (at)
    snprintf(line, sizeof line, "%s %.*s%s%s", cmdname, (int)(at - args), args, value, at + strlen(key));
  else
    snprintf(line, sizeof line, "%s %s", cmdname, args);
  fmt_result r;
  fmt_run(&r, line);
  cr_assert_eq(r.status, 2, "%s: exit %d", line, r.status);
  cr_assert_eq(r.err_lines, 1, "%s: stderr %s", line, r.err);
  cr_assert(strstr(r.err, want), "%s: got '%s', want '%s'", line, r.err, want);
  cr_assert_eq(r.out[0], 0, "%s wrote to stdout", line);
}

Test(predict_cli, bad_input_is_one_line_and_exit_2) {
  char bad_tile[512], garbled[512];
  snprintf(bad_tile, sizeof bad_tile, "%s/bad_tile_profile.json", FM_TEST_TMP_DIR);
  snprintf(garbled, sizeof garbled, "%s/garbled_profile.json", FM_TEST_TMP_DIR);
  FILE *f = fopen(garbled, "w");
  fputs("{\"format\": \"fmsim-gpu-profile\",\n \"version\": 1 \"gpu\": 3}", f);
  fclose(f);
  fm_gpu_profile p;
  cr_assert_eq(fm_profile_parse(good_profile, strlen(good_profile), "good", &p, NULL), FM_OK);
  p.fwd[0].bc = 128; /* what a profile of another build would say */
  cr_assert_eq(fm_profile_save(&p, bad_tile, NULL), FM_OK);
  static const struct {
    const char *args, *want;
  } rows[] = {
      {"--family causal --gpu no-such-gpu", "--gpu no-such-gpu: no such profile file"},
      {"--family causal --gpu h200-sm80 --kernel sm90", "is for kernel sm80, not sm90"},
      {"--family causal --gpu BAD_TILE", "fitted at 128 x 128 tiles, but kernel sm80 uses 128 x 64"},
      {"--family causal --gpu GARBLED", ":2:15: expected ',' or '}'"},
      {"--family causal --gpu h200-sm80 --head-dim 96", "has no coefficients for head dim 96"},
      {"--family causal --gpu h200-sm80 --pass bwd", "no backward profile yet"},
      {"--family causal --kernel sm80 --pass bwd", "no backward profile yet"}, /* the default one, no note */
      {"--family causal --gpu h200-sm80 --pass sideways", "unknown pass 'sideways'"},
      {"--family causal --gpu h200-sm80 --kernel sm70", "unknown kernel 'sm70'"},
      {"--family causal --gpu h200-sm80 --br 0", "--br: 0 is out of range"},
      {"--gpu h200-sm80", "give one mask: --family NAME, --mask FILE or --trace DIR"},
      {"--mask x.npy --gpu h200-sm80", "say whether the intervals are causal"},
      {"--family causal --causal --gpu h200-sm80", "go with --mask"},
      {"--family nope --gpu h200-sm80", "nope"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int tile = strstr(rows[i].args, "BAD_TILE") != NULL;
    expect_usage("predict", rows[i].args, tile ? "BAD_TILE" : "GARBLED", tile ? bad_tile : garbled,
                 rows[i].want);
  }
}

/* A made-up sm90 profile with both passes at the kernel's tiles, head dim
 * 128, the forward with a boost window of boost_us (throttle 1: none). */
static fm_gpu_profile sm90_profile(double boost_us, double throttle) {
  fm_gpu_profile p = {.kernel = FM_KERNEL_SM90, .sms = 132, .hbm_gbs = 4800, .nfwd = 1, .nbwd = 1};
  snprintf(p.gpu, sizeof p.gpu, "test GPU");
  fm_timing_coef c = {.head_dim = 128, .ctas_per_sm = 1, .launch_us = 5, .item_us = 3,
                      .key_tile_us = 0.01, .unmasked_us = 2, .partial_us = 3, .partial_causal_us = 3,
                      .solo = 1, .throttle = 1};
  p.fwd[0] = p.bwd[0] = c;
  p.fwd[0].boost_us = boost_us;
  p.fwd[0].throttle = throttle;
  cr_assert_eq(fm_kernel_tile_size(FM_KERNEL_SM90, FM_PASS_FWD, 128, &p.fwd[0].br, &p.fwd[0].bc, NULL), FM_OK);
  cr_assert_eq(fm_kernel_tile_size(FM_KERNEL_SM90, FM_PASS_BWD, 128, &p.bwd[0].br, &p.bwd[0].bc, NULL), FM_OK);
  return p;
}

/* Saves p as FM_TEST_TMP_DIR/file (its path in path) and runs "fmsim
 * predict ARGS --gpu PATH --json": the output, parsed. */
static fm_jdoc *predict_with(const fm_gpu_profile *p, const char *file, const char *args, char *path,
                             size_t cap) {
  char cmd[1400];
  snprintf(path, cap, "%s/%s", FM_TEST_TMP_DIR, file);
  cr_assert_eq(fm_profile_save(p, path, NULL), FM_OK);
  snprintf(cmd, sizeof cmd, "predict %s --gpu %s --json", args, path);
  fmt_result r;
  fmt_run(&r, cmd);
  cr_assert_eq(r.status, 0, "%s: %s", cmd, r.err);
  fm_jdoc *d;
  cr_assert_eq(fm_jdoc_parse(r.out, strlen(r.out), "stdout", &d, NULL), FM_OK);
  return d;
}

Test(predict_cli, prints_the_boost_window) {
  /* a 32K full mask of 16 heads lasts some ms on the made-up profile: past a
     window of 1 ms the rest takes 1.25 times longer, said in both forms */
  char path[512], args[700];
  fm_gpu_profile p = sm90_profile(1000, 1.25);
  fm_jdoc *d = predict_with(&p, "sm90_window.json", "--family full --seqlen 32768 --heads 16", path,
                            sizeof path);
  const fm_jv *pass = fm_jv_first(fm_jv_get(fm_jdoc_root(d), "passes")), *t = first_tile(d);
  cr_assert_eq(fm_jv_number(fm_jv_get(pass, "boost_window_ms"), 0), 1);
  cr_assert_eq(fm_jv_number(fm_jv_get(pass, "throttle"), 0), 1.25);
  double sched = fm_jv_number(fm_jv_get(t, "schedule_ms"), 0), thr = fm_jv_number(fm_jv_get(t, "throttle_ms"), 0);
  cr_assert_gt(sched, 2);
  cr_assert_float_eq(thr, 0.25 * (sched - 1), 1e-6 * sched);
  cr_assert_float_eq(fm_jv_number(fm_jv_get(t, "time_ms"), 0),
                     fm_jv_number(fm_jv_get(t, "launch_ms"), 0) + sched + thr, 1e-6 * sched);
  fm_jdoc_free(d);
  snprintf(args, sizeof args, "predict --family full --seqlen 32768 --heads 16 --gpu %s --pass both", path);
  fmt_result r;
  fmt_run(&r, args);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "boost window 1.00 ms, then 1.250x slower"), "%s", r.out);
  cr_assert(strstr(r.out, "no boost window in the profile"), "%s", r.out); /* the backward's */
}

Test(predict_cli, both_passes_with_a_backward_profile) {
  /* the backward's items are key tiles of its own 64 x 128 tile */
  char path[512];
  fm_gpu_profile p = sm90_profile(0, 1);
  fm_jdoc *d = predict_with(&p, "sm90_both.json", "--family causal --seqlen 4096 --heads 8 --pass both",
                            path, sizeof path);
  const fm_jv *fwd = fm_jv_first(fm_jv_get(fm_jdoc_root(d), "passes")), *bwd = fm_jv_next(fwd);
  cr_assert_str_eq(fm_jv_string(fm_jv_get(fwd, "pass")), "fwd");
  cr_assert_str_eq(fm_jv_string(fm_jv_get(bwd, "pass")), "bwd");
  const fm_jv *tb = fm_jv_first(fm_jv_get(bwd, "tiles"));
  cr_assert_eq(fm_jv_number(fm_jv_get(tb, "br"), 0), p.bwd[0].br);
  cr_assert_eq(fm_jv_number(fm_jv_get(tb, "items"), 0), 8 * 4096 / p.bwd[0].bc); /* key tiles */
  fm_jdoc_free(d);
  /* the same backward coefficients on sm80, which has no backward: refused */
  p.kernel = FM_KERNEL_SM80;
  fm_kernel_tile_size(FM_KERNEL_SM80, FM_PASS_FWD, 128, &p.fwd[0].br, &p.fwd[0].bc, NULL);
  cr_assert_eq(fm_profile_save(&p, path, NULL), FM_OK);
  expect_usage("predict --family causal --gpu", path, NULL, NULL, "kernel sm80 has no bwd pass");
}

Test(analyze_cli, shows_the_predicted_time_with_a_profile) {
  fmt_result r;
  fmt_run(&r, "analyze --family causal --seqlen 8192 --heads 32 --batch 16 --gpu h200-sm80");
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "predicted   "), "%s", r.out);
  cr_assert(strstr(r.out, "kernel sm80, head dim 128, 128 x 64 tiles"), "%s", r.out);
  fmt_run(&r, "analyze --family causal --json --gpu h200-sm80");
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"predicted\""), "%s", r.out);
  fmt_run(&r, "analyze --family causal --gpu no-such-gpu");
  cr_assert_eq(r.status, 2);
  cr_assert_eq(r.err_lines, 1, "%s", r.err);
}

/* A measurements file of small cases whose "measured" times the model made
 * with the committed profile: calibrate must fit them back. */
static void write_measurements(const char *path) {
  static const struct {
    const char *family, *param;
    int S, B, H;
  } cs[] = {{"full", "", 2048, 1, 4},        {"full", "", 9000, 2, 8},
            {"causal", "", 8192, 1, 16},      {"causal", "", 1500, 3, 2},
            {"document", "docs_max=20", 12000, 1, 8}, {"sliding_window", "w=256", 20000, 1, 4},
            {"random_eviction", "", 6000, 1, 4}, {"global_sliding_window", "wl=64", 7000, 2, 2},
            {"causal_document", "docs_min=30", 16384, 1, 8}, {"prefix_lm_causal", "", 3000, 1, 8}};
  FILE *f = fopen(path, "w");
  fprintf(f, "{\"format\": \"fmsim-measurements\", \"version\": 1, \"gpu\": \"NVIDIA H200\",\n"
             " \"kernel\": \"sm80\", \"date\": \"2026-01-02\", \"cases\": [\n");
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    char args[512];
    snprintf(args, sizeof args, "--family %s --seqlen %d --batch %d --heads %d %s%s", cs[i].family,
             cs[i].S, cs[i].B, cs[i].H, cs[i].param[0] ? "--param " : "", cs[i].param);
    fprintf(f, "%s {\"id\": \"c%zu\", \"family\": \"%s\", \"params\": [%s%s%s], \"seqlen\": %d,"
               " \"batch\": %d, \"heads\": %d, \"head_dim\": 128, \"seed\": 0, \"time_ms\": %.9g}\n",
            i ? "," : "", i, cs[i].family, cs[i].param[0] ? "\"" : "", cs[i].param,
            cs[i].param[0] ? "\"" : "", cs[i].S, cs[i].B, cs[i].H, predict_ms(args));
  }
  fprintf(f, "]}\n");
  fclose(f);
}

Test(calibrate_cli, fits_measurements_back_and_writes_a_loadable_profile) {
  char meas[512], out[512], cmd[1400];
  snprintf(meas, sizeof meas, "%s/cal_measurements.json", FM_TEST_TMP_DIR);
  snprintf(out, sizeof out, "%s/cal_profile.json", FM_TEST_TMP_DIR);
  write_measurements(meas);
  snprintf(cmd, sizeof cmd, "calibrate %s --out %s --json", meas, out);
  fmt_result r;
  fmt_run(&r, cmd);
  cr_assert_eq(r.status, 0, "%s", r.err);
  fm_gpu_profile p;
  fm_err err;
  cr_assert_eq(fm_profile_load(out, &p, &err), FM_OK, "%s", err.msg);
  cr_assert_str_eq(p.gpu, "NVIDIA H200");
  cr_assert_str_eq(p.date, "2026-01-02");
  cr_assert_eq(p.kernel, FM_KERNEL_SM80);
  const fm_timing_coef *c = fm_profile_coef(&p, FM_PASS_FWD, 128);
  cr_assert(c);
  cr_assert_eq(c->fit_cases, 10);
  /* ten small cases (a few waves, some below one): the makespan has kinks
     where the fit can stop a little short of the exact coefficients */
  cr_assert_lt(c->fit_median_err, 0.005, "median %g", c->fit_median_err);
  cr_assert_lt(c->fit_worst_err, 0.02, "worst %g", c->fit_worst_err);
  fm_jdoc *d;
  cr_assert_eq(fm_jdoc_parse(r.out, strlen(r.out), "stdout", &d, NULL), FM_OK);
  cr_assert_eq(fm_jv_count(fm_jv_get(fm_jv_first(fm_jv_get(fm_jdoc_root(d), "fits")), "cases")), 10);
  fm_jdoc_free(d);
}

Test(calibrate_cli, reads_a_scenario_run) {
  /* a CPU scenario run, with kernel times filled in as a GPU run records them:
     index.json rows with "kernels": [{kernel, br, bc, time_ms}] */
  char scn[512], dir[512], cmd[1400], path[700], out[600];
  snprintf(scn, sizeof scn, "%s/cal_scn.yaml", FM_TEST_TMP_DIR);
  snprintf(dir, sizeof dir, "%s/cal_scn_run", FM_TEST_TMP_DIR);
  snprintf(out, sizeof out, "%s/cal_scn_profile.json", FM_TEST_TMP_DIR);
  FILE *f = fopen(scn, "w");
  fputs("name: cal-test\nseqlen: [3000, 9000]\nbatch: 2\nheads: 4\nhead_dim: 128\nbr: 128\nbc: 64\n"
        "run: [analyze]\nmasks:\n  - family: causal\n  - family: document\n"
        "  - family: random_eviction\n  - family: full\n", f);
  fclose(f);
  fmt_result r;
  snprintf(cmd, sizeof cmd, "run %s --out %s", scn, dir);
  fmt_run(&r, cmd);
  cr_assert_eq(r.status, 0, "%s", r.err);
  snprintf(cmd, sizeof cmd, "calibrate %s --out %s --kernel sm80 --gpu-name 'NVIDIA H200'", dir, out);
  fmt_run(&r, cmd); /* no GPU step: nothing to fit, said in one line */
  cr_assert_eq(r.status, 2);
  cr_assert_eq(r.err_lines, 1, "%s", r.err);
  cr_assert(strstr(r.err, "no measured case in"), "%s", r.err);
  /* the model's own time of each case's trace, as if sm80 had measured it; one
     row also timed by sm90 */
  snprintf(path, sizeof path, "%s/index.json", dir);
  fm_jdoc *d;
  cr_assert_eq(fm_jdoc_load(path, &d, NULL), FM_OK);
  f = fopen(path, "w");
  fputs("[\n", f);
  int n = 0;
  for (const fm_jv *row = fm_jv_first(fm_jdoc_root(d)); row; row = fm_jv_next(row), n++) {
    const char *id = fm_jv_string(fm_jv_get(row, "id"));
    char args[1000];
    snprintf(args, sizeof args, "--trace %s/cases/%s", dir, id);
    fprintf(f, "%s{\"id\": \"%s\", \"columns\": \"%s\", \"causal\": %s, \"batch\": 2, "
               "\"heads\": 4, \"head_dim\": 128, \"kernels\": [{\"kernel\": \"sm80\", \"br\": 128, "
               "\"bc\": 64, \"time_ms\": %.9g}%s]}\n", n ? "," : "", id,
            fm_jv_string(fm_jv_get(row, "columns")), fm_jv_bool(fm_jv_get(row, "causal"), 0) ? "true" : "false",
            predict_ms(args), n ? "" : ", {\"kernel\": \"sm90\", \"br\": 128, \"bc\": 128, \"time_ms\": 1}");
  }
  fputs("]\n", f);
  fclose(f);
  fm_jdoc_free(d);
  snprintf(cmd, sizeof cmd, "calibrate %s --out %s --gpu-name 'NVIDIA H200'", dir, out);
  fmt_run(&r, cmd);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "the runs hold kernels sm80 and sm90: choose one with --kernel"), "%s", r.err);
  snprintf(cmd, sizeof cmd, "calibrate %s --out %s --kernel sm80 --gpu-name 'NVIDIA H200'", dir, out);
  fmt_run(&r, cmd);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "8 cases, kernel sm80 on NVIDIA H200"), "%s", r.out);
  /* the run's index.json named as a file: its columns read from its folder all the same */
  snprintf(cmd, sizeof cmd, "calibrate %s/index.json --out %s --kernel sm80 --gpu-name 'NVIDIA H200'",
           dir, out);
  fmt_run(&r, cmd);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "8 cases, kernel sm80 on NVIDIA H200"), "%s", r.out);
  fm_gpu_profile p;
  cr_assert_eq(fm_profile_load(out, &p, NULL), FM_OK);
  cr_assert_lt(p.fwd[0].fit_worst_err, 0.02);
}

Test(calibrate_cli, bad_input_is_one_line_and_exit_2) {
  char notrun[512];
  snprintf(notrun, sizeof notrun, "%s/not_a_run.json", FM_TEST_TMP_DIR);
  FILE *f = fopen(notrun, "w");
  fputs("{\"hello\": 1}", f);
  fclose(f);
  static const struct {
    const char *args, *want;
  } rows[] = {
      {"--out x.json", "give at least one RUN"},
      {"NOTRUN", "--out PROFILE.json is required"},
      {"NOTRUN --out x.json", "not a run output"},
      {"/no/such/run.json --out x.json", "cannot open /no/such/run.json"},
      {"NOTRUN --out x.json --fix speed=3", "--fix speed=3: expected NAME=VALUE"},
      {"NOTRUN --out x.json --sms 0", "--sms: 0 is out of range"},
      {"NOTRUN --out x.json --boost-window sideways", "--boost-window sideways: expected fwd, bwd, both or none"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    expect_usage("calibrate", rows[i].args, "NOTRUN", notrun, rows[i].want);
}

/* ---------------------------------------------------------------- calibration and held-out sets */

static fm_scn_case *load_cases(const char *name, fm_scenario *s, int *n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/../scenarios/%s", FM_TEST_SOURCE_DIR, name);
  fm_err err;
  cr_assert_eq(fm_scenario_load(path, s, &err), FM_OK, "%s", err.msg);
  fm_scn_case *cs;
  cr_assert_eq(fm_scenario_cases(s, &cs, n, &err), FM_OK, "%s", err.msg);
  return cs;
}

/* A mask's identity: family, parameters, length, and the seed where the family draws. */
static void mask_key(const fm_scenario *s, const fm_scn_case *c, char *key, size_t cap) {
  const fm_scn_mask *m = &s->masks[c->mask_index];
  int seeded = !strcmp(m->family, "random_eviction") || !strcmp(m->family, "share_question") ||
               fm_family_find(m->family)->uses_docs;
  int at = snprintf(key, cap, "%s S=%lld seed=%lld", m->family, (long long)c->seqlen,
                    seeded ? (long long)c->seed : -1LL);
  for (int p = 0; p < m->nparams; p++) at += snprintf(key + at, cap - (size_t)at, " %s", fm_scn_param(s, m, p));
}

Test(scenario_sets, heldout_is_large_varied_and_disjoint_from_calibration) {
  fm_scenario *cal = malloc(sizeof *cal), *ho = malloc(sizeof *ho);
  int ncal, nho;
  fm_scn_case *cc = load_cases("calibration.yaml", cal, &ncal), *hc = load_cases("heldout.yaml", ho, &nho);
  static char keys[1024][256];
  int nkeys = 0, fams[16] = {0}, odd = 1, per_head = 0;
  int64_t bmin = INT64_MAX, bmax = 0, hmin = INT64_MAX, hmax = 0;
  for (int i = 0; i < nho; i++) {
    if (hc[i].head_dim != 128) continue;
    char key[256];
    mask_key(ho, &hc[i], key, sizeof key);
    int dup = 0;
    for (int k = 0; k < nkeys; k++) dup |= !strcmp(keys[k], key);
    if (!dup && nkeys < 1024) snprintf(keys[nkeys++], sizeof keys[0], "%s", key);
    const char *f = ho->masks[hc[i].mask_index].family;
    for (int q = 0; q < fm_family_count(); q++) fams[q] |= !strcmp(fm_family_at(q)->name, f);
    per_head |= fm_family_find(f)->per_head;
    odd &= hc[i].seqlen % 2 == 1 && hc[i].seqlen > 1024 && hc[i].seqlen < 131072;
    bmin = hc[i].batch < bmin ? hc[i].batch : bmin;
    bmax = hc[i].batch > bmax ? hc[i].batch : bmax;
  }
  for (int i = 0; i < nho; i++) {
    hmin = hc[i].heads < hmin ? hc[i].heads : hmin;
    hmax = hc[i].heads > hmax ? hc[i].heads : hmax;
  }
  cr_assert_geq(nkeys, 100, "only %d distinct held-out masks", nkeys);
  for (int q = 0; q < fm_family_count(); q++) cr_assert(fams[q], "no %s in the held-out set", fm_family_at(q)->name);
  cr_assert(odd && per_head);
  cr_assert(bmax > bmin && hmax > hmin, "batch %lld..%lld heads %lld..%lld", (long long)bmin,
            (long long)bmax, (long long)hmin, (long long)hmax);
  for (int i = 0; i < ncal; i++) {
    char key[256];
    mask_key(cal, &cc[i], key, sizeof key);
    for (int k = 0; k < nkeys; k++) cr_assert_str_neq(keys[k], key, "%s is in both sets", key);
    cr_assert_eq(cc[i].seqlen & (cc[i].seqlen - 1), 0, "calibration lengths are powers of two");
  }
  free(cc);
  free(hc);
  free(cal);
  free(ho);
}

Test(scenario_sets, heldout_is_what_its_script_writes) {
  if (system("python3 -c pass >/dev/null 2>&1") != 0) cr_skip_test("no python3");
  char out[512], cmd[2048], a[65536], b[65536];
  snprintf(out, sizeof out, "%s/heldout.yaml", FM_TEST_TMP_DIR);
  snprintf(cmd, sizeof cmd, "python3 %s/../bench/make_heldout.py --out %s >/dev/null", FM_TEST_SOURCE_DIR, out);
  cr_assert_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s/../scenarios/heldout.yaml", FM_TEST_SOURCE_DIR);
  fmt_slurp(cmd, a, sizeof a);
  fmt_slurp(out, b, sizeof b);
  cr_assert_str_eq(a, b, "scenarios/heldout.yaml differs from bench/make_heldout.py's output");
}

/* issue 20: "t" (1 byte) made the reader compare "true" past the text (a
 * heap over-read under ASan); "true" cut to 3 bytes was read as true. */
Test(json, words_are_not_read_past_the_text) {
  static const char *words[] = {"true", "false", "null"};
  for (int w = 0; w < 3; w++)
    for (size_t n = 1; n < strlen(words[w]); n++) {
      char *exact = malloc(n); /* exactly n bytes, no NUL after them */
      memcpy(exact, words[w], n);
      fm_jdoc *d = NULL;
      fm_err err;
      fm_status st = fm_jdoc_parse(exact, n, "w.json", &d, &err);
      cr_assert_neq(st, FM_OK, "'%.*s' (%zu bytes) was read as a value", (int)n, words[w], n);
      cr_assert(strstr(err.msg, "w.json:1:1"), "%s", err.msg);
      fm_jdoc_free(d);
      free(exact);
    }
  fm_jdoc *d = NULL;
  cr_assert_neq(fm_jdoc_parse("true", 3, "w.json", &d, NULL), FM_OK, "'tru' read as true");
  cr_assert_neq(fm_jdoc_parse("[null]", 4, "w.json", &d, NULL), FM_OK, "'[nul' read as [null");
  cr_assert_eq(fm_jdoc_parse("[true,null]", 11, "w.json", &d, NULL), FM_OK);
  cr_assert_eq(fm_jv_bool(fm_jv_first(fm_jdoc_root(d)), 0), 1);
  fm_jdoc_free(d);
}

/* issue 20: "fit": {"cases": 1e300} was converted to int32 (undefined). */
Test(profile, fit_cases_out_of_range_is_refused) {
  static const char *bad_cases[] = {"1e300", "-1", "2.5", "2147483648", "-1e300"};
  for (int i = 0; i < 5; i++) {
    fm_gpu_profile p;
    fm_err err;
    char to[64];
    snprintf(to, sizeof to, "\"cases\": %s", bad_cases[i]);
    cr_assert_eq(parse_edited("\"cases\": 72", to, &p, &err), FM_EFORMAT, "cases %s", bad_cases[i]);
    cr_assert(strstr(err.msg, "'fit.cases': expected a count from 0 to 2147483647"), "%s", err.msg);
  }
  fm_gpu_profile p;
  fm_err err;
  cr_assert_eq(parse_edited("\"cases\": 72", "\"cases\": 2147483647", &p, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(p.fwd[0].fit_cases, INT32_MAX);
  cr_assert_eq(parse_edited("\"cases\": 72, ", "", &p, &err), FM_OK, "%s", err.msg); /* optional */
}

Test(json, integers_saturate_instead_of_overflowing) {
  fm_jdoc *d = NULL;
  const char *t = "[1e300, -1e300, 12.9, -3.5, 9223372036854775807, \"x\"]";
  cr_assert_eq(fm_jdoc_parse(t, strlen(t), "i.json", &d, NULL), FM_OK);
  const fm_jv *v = fm_jv_first(fm_jdoc_root(d));
  int64_t want[] = {INT64_MAX, INT64_MIN, 12, -3, INT64_MAX, 7};
  for (int i = 0; v; v = fm_jv_next(v), i++) cr_assert_eq(fm_jv_int64(v, 7), want[i], "element %d", i);
  int64_t out = 0;
  v = fm_jv_first(fm_jdoc_root(d));
  cr_assert_eq(fm_jv_int_in(v, 0, INT64_MAX, &out), -1);
  v = fm_jv_next(fm_jv_next(v));
  cr_assert_eq(fm_jv_int_in(v, 0, 100, &out), -1, "12.9 is no integer");
  fm_jdoc_free(d);
}

/* Integers as written: a trace summary's "br": 64.0 is a mistyped member. */
Test(json, integer_literals_are_told_from_other_numbers) {
  fm_jdoc *d = NULL;
  const char *t = "[64, -3, 0, 64.0, 6.4e1, 1E2, \"64\", true]";
  cr_assert_eq(fm_jdoc_parse(t, strlen(t), "i.json", &d, NULL), FM_OK);
  int want[] = {1, 1, 1, 0, 0, 0, 0, 0}, i = 0;
  for (const fm_jv *v = fm_jv_first(fm_jdoc_root(d)); v; v = fm_jv_next(v), i++)
    cr_assert_eq(fm_jv_is_integer(v), want[i], "element %d", i);
  cr_assert_eq(i, 8);
  cr_assert_eq(fm_jv_is_integer(NULL), 0);
  fm_jdoc_free(d);
}
