/* test_cp_plan.c — context-parallel plans (core/fm_cp_plan.h, fmsim cp-plan):
 *   - contiguous `full` is balanced, contiguous `causal` follows its closed
 *     form (rank P-1 about 2P-1 times rank 0), zigzag `causal` is balanced
 *     within one tile row;
 *   - every rank's tiles, by class, both passes, min/max and exact, add up to
 *     fm_classify's counts of the whole mask, and equal a brute force over
 *     fm_classify's tile maps restricted to the rank's rows;
 *   - a rank's local mask (fm_cp_rank_mask) is the global mask on its rows,
 *     element by element, and the timing model on it gives the rank's time;
 *   - K/V needs equal a brute force over the tile maps; ranks aligned to
 *     documents need no remote K/V;
 *   - mask-aware beats contiguous on causal_document at 1M; the exact
 *     solver is never worse than greedy and equals a brute force;
 *   - the exchange model (fm_cp_model_ring, fm_cp_model_allgather) replays
 *     cp-run's executor: a two-rank example worked by hand, the lockstep
 *     coupling of the ring and the sums and conversions outside the steps
 *     included; the ring's extra work (merges, dQ sums, further launches,
 *     conversions) equals its sizes over the profile's rates; the plan takes
 *     the exchange its costs give;
 *   - the command's JSON parses and says what its table says. */
#include "fm_test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <criterion/criterion.h>
#include <math.h>

#include "fm_cp_plan.h"
#include "fm_families.h"
#include "fm_samples.h"
#include "fm_tiles.h"
#include "fm_timing.h"

/* What the plan adds to every launch it prices as cp-run's event windows time
 * it (core/fm_cp_plan.h): 9 us a forward, 22 a backward. */
static double window_us(int pass) {
  cr_assert_float_eq(FM_CP_WINDOW_US_FWD, 9.0, 0);
  cr_assert_float_eq(FM_CP_WINDOW_US_BWD, 22.0, 0);
  return pass == FM_CP_FWD ? FM_CP_WINDOW_US_FWD : FM_CP_WINDOW_US_BWD;
}

static fm_colmask *family(const char *name, int64_t s, const char *param) {
  fm_colmask *m = fmt_family(name, s, param, 3);
  cr_assert_not_null(m, "%s", name);
  return m;
}

/* A frozen copy of the H200 sm90 profile (the fourth session's fit, 2026-11-23): the
 * hand-worked figures below are computed from its coefficients, which a refit of
 * data/gpu/h200-sm90.json would move. */
static fm_gpu_profile *profile(void) {
  static fm_gpu_profile p;
  fm_err err;
  cr_assert_eq(fm_profile_load(FM_TEST_SOURCE_DIR "/ref/h200-sm90-2026-11-23.json", &p, &err), FM_OK, "%s",
               err.msg);
  return &p;
}

static fm_cp_plan *plan_of(const fm_colmask *m, int32_t ranks, unsigned shardings, int with_times) {
  fm_cp_options o = {.ranks = ranks, .shardings = shardings, .kernel = FM_KERNEL_SM90,
                     .profile = with_times ? profile() : NULL};
  fm_cp_plan *p = NULL;
  fm_err err;
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_OK, "%s", err.msg);
  return p;
}

static const fm_cp_sharding_plan *sharding(const fm_cp_plan *p, fm_cp_sharding s) {
  const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(p, s);
  cr_assert_not_null(sp, "%s not planned", fm_cp_sharding_name(s));
  return sp;
}

static int64_t visited(const fm_cp_rank *rk) { return rk->tiles[FM_CP_FWD].total - rk->tiles[FM_CP_FWD].minmax[FM_TILE_MASKED]; }

/* ---- balance ------------------------------------------------------------------- */

Test(cp_plan, contiguous_full_is_balanced) {
  fm_colmask *m = family("full", 65536, NULL);
  fm_cp_plan *p = plan_of(m, 4, 1u << FM_CP_CONTIGUOUS, 1);
  const fm_cp_sharding_plan *sp = sharding(p, FM_CP_CONTIGUOUS);
  for (int r = 0; r < 4; r++) {
    cr_assert_eq(sp->ranks[r].rows, 16384);
    cr_assert_eq(visited(&sp->ranks[r]), 128 * 512, "rank %d: %lld", r, (long long)visited(&sp->ranks[r]));
    cr_assert_eq(sp->ranks[r].kv_recv_rows, 3 * 16384, "a full mask needs every other rank's K/V");
    cr_assert_eq(sp->ranks[r].kv_sources, 3);
  }
  cr_assert_float_eq(sp->imbalance_work, 1.0, 1e-12);
  cr_assert_float_eq(sp->imbalance_time, 1.0, 1e-3, "time imbalance %g", sp->imbalance_time);
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

/* Causal, contiguous: rank r's row tiles [rb, (r+1)b) visit rt + 1 key tiles each. */
Test(cp_plan, contiguous_causal_follows_its_closed_form) {
  const int32_t P = 4, b = 128; /* row tiles per rank, 128 rows each */
  fm_colmask *m = family("causal", (int64_t)P * b * 128, NULL);
  fm_cp_plan *p = plan_of(m, P, 1u << FM_CP_CONTIGUOUS, 1);
  const fm_cp_sharding_plan *sp = sharding(p, FM_CP_CONTIGUOUS);
  for (int32_t r = 0; r < P; r++) {
    int64_t want = (int64_t)b * r * b + (int64_t)b * (b + 1) / 2;
    cr_assert_eq(visited(&sp->ranks[r]), want, "rank %d: %lld visited, want %lld", r,
                 (long long)visited(&sp->ranks[r]), (long long)want);
    cr_assert_eq(sp->ranks[r].tiles[FM_CP_FWD].minmax[FM_TILE_PARTIAL], b, "the diagonal");
  }
  double ratio = (double)visited(&sp->ranks[P - 1]) / (double)visited(&sp->ranks[0]);
  cr_assert(ratio > 2 * P - 1 - 1.0 && ratio < 2 * P - 1, "rank P-1 / rank 0 = %g", ratio);
  cr_assert_gt(sp->ranks[P - 1].compute_ms, 3 * sp->ranks[0].compute_ms);
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

Test(cp_plan, zigzag_causal_is_balanced_within_a_tile_row) {
  /* 2P does not divide the granules: stripes differ by one granule */
  int64_t lengths[] = {8 * 2048, 8 * 2048 + 3 * 128, 131072 + 640, 1000000};
  for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; t++) {
    fm_colmask *m = family("causal", lengths[t], NULL);
    fm_cp_plan *p = plan_of(m, 4, 1u << FM_CP_ZIGZAG | 1u << FM_CP_CONTIGUOUS, 0);
    const fm_cp_sharding_plan *zz = sharding(p, FM_CP_ZIGZAG), *ct = sharding(p, FM_CP_CONTIGUOUS);
    int64_t lo = INT64_MAX, hi = 0, tc = (lengths[t] + 127) / 128;
    for (int r = 0; r < 4; r++) {
      lo = visited(&zz->ranks[r]) < lo ? visited(&zz->ranks[r]) : lo;
      hi = visited(&zz->ranks[r]) > hi ? visited(&zz->ranks[r]) : hi;
      cr_assert_eq(zz->ranks[r].segments, r == 3 ? 1 : 2, "rank 3 owns the two middle stripes");
    }
    cr_assert_leq(hi - lo, tc, "S = %lld: zigzag ranks differ by %lld tiles, one tile row has %lld",
                  (long long)lengths[t], (long long)(hi - lo), (long long)tc);
    cr_assert_lt(zz->imbalance_work, ct->imbalance_work);
    fm_cp_plan_destroy(p);
    fm_colmask_destroy(m);
  }
}

/* ---- tiles: against fm_classify's maps -------------------------------------------- */

/* Every rank's tiles against a brute force over fm_classify's per-tile maps
 * (its rows, every key), both passes; and their sums against the whole mask. */
static void check_tiles(const fm_colmask *m, const fm_cp_plan *p, const char *what) {
  const fm_cp_summary *s = fm_cp_plan_summary(p);
  for (int pass = 0; pass < FM_CP_NPASSES; pass++) {
    int32_t br = s->br[pass], bc = s->bc[pass], tr = (s->seqlen + br - 1) / br, tc = (s->seqlen + bc - 1) / bc;
    int64_t n = (int64_t)fm_colmask_nsets(m) * tr * tc;
    uint8_t *cls = malloc((size_t)n), *ex = malloc((size_t)n);
    fm_tile_counts whole;
    cr_assert_eq(fm_classify(m, br, bc, &whole, cls, ex, NULL), FM_OK);
    for (int k = 0; k < FM_TILE_NCLASSES; k++) {
      cr_assert_eq(s->tiles[pass].minmax[k], whole.minmax[k], "%s pass %d class %d", what, pass, k);
      cr_assert_eq(s->tiles[pass].exact[k], whole.exact[k], "%s pass %d exact class %d", what, pass, k);
    }
    for (int sh = 0; sh < FM_CP_NSHARDINGS; sh++) {
      const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(p, (fm_cp_sharding)sh);
      if (!sp) continue;
      int64_t sum[2][FM_TILE_NCLASSES] = {{0}}, mine[2][FM_TILE_NCLASSES];
      for (int32_t r = 0; r < s->ranks; r++) {
        memset(mine, 0, sizeof mine);
        for (int32_t set = 0; set < fm_colmask_nsets(m); set++)
          for (int32_t rt = 0; rt < tr; rt++) {
            if (fm_cp_owner(sp, rt * br) != r) continue;
            for (int32_t ct = 0; ct < tc; ct++) {
              int64_t i = ((int64_t)set * tr + rt) * tc + ct;
              mine[0][cls[i]]++;
              mine[1][ex[i]]++;
            }
          }
        for (int k = 0; k < FM_TILE_NCLASSES; k++) {
          const fm_tile_counts *got = &sp->ranks[r].tiles[pass];
          cr_assert_eq(got->minmax[k], mine[0][k], "%s %s rank %d pass %d class %d: %lld, brute force %lld",
                       what, fm_cp_sharding_name(sp->sharding), r, pass, k, (long long)got->minmax[k],
                       (long long)mine[0][k]);
          cr_assert_eq(got->exact[k], mine[1][k], "%s %s rank %d pass %d exact class %d", what,
                       fm_cp_sharding_name(sp->sharding), r, pass, k);
          sum[0][k] += got->minmax[k];
          sum[1][k] += got->exact[k];
        }
      }
      for (int k = 0; k < FM_TILE_NCLASSES; k++) {
        cr_assert_eq(sum[0][k], whole.minmax[k], "%s %s: ranks add up", what, fm_cp_sharding_name(sp->sharding));
        cr_assert_eq(sum[1][k], whole.exact[k], "%s %s: ranks add up (exact)", what,
                     fm_cp_sharding_name(sp->sharding));
      }
    }
    free(cls);
    free(ex);
  }
}

Test(cp_plan, rank_tiles_add_up_to_fm_classify) {
  const char *families[] = {"causal", "full", "causal_document", "document", "share_question",
                            "sliding_window", "global_sliding_window", "prefix_lm_causal",
                            "prefix_lm_document", "qk_sparse", "causal_blockwise", "random_eviction"};
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
    fm_colmask *m = family(families[f], 8192 + 384, NULL);
    fm_cp_plan *p = plan_of(m, 3, 0, 0);
    check_tiles(m, p, families[f]);
    fm_cp_plan_destroy(p);
    fm_colmask_destroy(m);
  }
  fm_rng rng;
  fm_rng_seed(&rng, 24, 0);
  for (int k = 0; k < 6; k++) { /* random intervals: exact classes that differ from the rule */
    fm_colmask *m = fmt_random_mask(&rng, 1280 + 128 * k, 1280 + 128 * k, 1, 2, k % 2);
    fm_cp_options o = {.ranks = 2 + k % 3, .chunk = 256, .kernel = FM_KERNEL_SM90, .heads = 2};
    fm_cp_plan *p = NULL;
    cr_assert_eq(fm_cp_plan_create(m, &o, &p, NULL), FM_OK);
    check_tiles(m, p, "random");
    fm_cp_plan_destroy(p);
    fm_colmask_destroy(m);
  }
}

/* ---- the rank's local mask and its time --------------------------------------------- */

Test(cp_plan, rank_mask_is_the_mask_on_its_rows_and_gives_its_time) {
  fm_rng rng;
  fm_rng_seed(&rng, 7, 0);
  fm_colmask *ms[3] = {family("causal_document", 4096, "docs=700,1500,1000,896"),
                       fmt_random_mask(&rng, 1024, 1024, 1, 1, 1), fmt_random_mask(&rng, 1024, 1024, 1, 1, 0)};
  for (int t = 0; t < 3; t++) {
    fm_colmask *m = ms[t];
    int32_t s = fm_colmask_sq(m);
    fm_clock clock = t == 1 ? FM_CLOCK_SUSTAINED : FM_CLOCK_BURST; /* each state on some mask */
    fm_cp_options o = {.ranks = 3, .chunk = 256, .kernel = FM_KERNEL_SM90, .profile = profile(), .clock = clock};
    fm_cp_plan *p = NULL;
    fm_err err;
    cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_OK, "%s", err.msg);
    uint8_t *dense = fmt_dense(m, 0);
    for (int sh = 0; sh < FM_CP_NSHARDINGS; sh++) {
      const fm_cp_sharding_plan *sp = sharding(p, (fm_cp_sharding)sh);
      for (int32_t r = 0; r < 3; r++) {
        fm_colmask *loc = NULL;
        cr_assert_eq(fm_cp_rank_mask(m, sp->segments, sp->nsegments, r, &loc, &err), FM_OK, "%s", err.msg);
        cr_assert_eq(fm_colmask_validate(loc, &err), FM_OK, "%s", err.msg);
        cr_assert_eq(fm_colmask_sq(loc), sp->ranks[r].rows);
        int32_t li = 0;
        for (int32_t i = 0; i < s; i++) {
          if (fm_cp_owner(sp, i) != r) continue;
          for (int32_t j = 0; j < s; j++)
            cr_assert_eq(fm_colmask_masked(loc, 0, li, j), dense[(size_t)i * s + j],
                         "mask %d %s rank %d: row %d (local %d), key %d", t, fm_cp_sharding_name(sp->sharding),
                         r, i, li, j);
          li++;
        }
        /* the timing model on the local mask: the rank's predicted time */
        for (int pass = 0; pass < FM_CP_NPASSES; pass++) {
          fm_timing_work w;
          fm_timing_result res;
          fm_timing_problem pb = {.batch = 1, .heads = 1, .head_dim = 128,
                                  .pass = pass ? FM_PASS_BWD : FM_PASS_FWD, .variant = FM_VARIANT_SKIP,
                                  .clock = clock};
          const fm_cp_summary *su = fm_cp_plan_summary(p);
          cr_assert_eq(fm_timing_work_init(&w, loc, su->br[pass], su->bc[pass], NULL), FM_OK);
          cr_assert_eq(fm_timing_predict(profile(), &w, &pb, &res, NULL), FM_OK);
          double want = (res.time_us + window_us(pass)) / 1e3;
          cr_assert_float_eq(sp->ranks[r].ms[pass], want, 1e-9,
                             "mask %d %s rank %d pass %d: plan %.6f ms, local mask %.6f ms", t,
                             fm_cp_sharding_name(sp->sharding), r, pass, sp->ranks[r].ms[pass], want);
          fm_timing_work_free(&w);
        }
        fm_colmask_destroy(loc);
      }
    }
    free(dense);
    fm_cp_plan_destroy(p);
    fm_colmask_destroy(m);
  }
}

Test(cp_plan, one_rank_is_one_gpu) {
  fm_colmask *m = family("causal_document", 65536, NULL);
  fm_cp_plan *p = plan_of(m, 1, 0, 1);
  const fm_cp_summary *s = fm_cp_plan_summary(p);
  cr_assert(s->one_gpu_total_ms > 0);
  for (int sh = 0; sh < FM_CP_NSHARDINGS; sh++) {
    const fm_cp_sharding_plan *sp = sharding(p, (fm_cp_sharding)sh);
    cr_assert_eq(sp->nsegments, 1);
    cr_assert_float_eq(sp->ranks[0].compute_ms, s->one_gpu_total_ms, 1e-9, "%s: %g vs %g",
                       fm_cp_sharding_name(sp->sharding), sp->ranks[0].compute_ms, s->one_gpu_total_ms);
    cr_assert_float_eq(sp->efficiency, 1.0, 1e-12);
    cr_assert_eq(sp->kv_recv_bytes, 0);
  }
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

/* ---- K/V ------------------------------------------------------------------------------ */

/* need[r][k] by brute force: some tile of r's row tiles on segment k's key
 * tiles is not MASKED by the rule, at the forward or the backward tile. */
static void check_need(const fm_colmask *m, const fm_cp_plan *p) {
  const fm_cp_summary *s = fm_cp_plan_summary(p);
  for (int sh = 0; sh < FM_CP_NSHARDINGS; sh++) {
    const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(p, (fm_cp_sharding)sh);
    if (!sp) continue;
    uint8_t *want = calloc((size_t)s->ranks * (size_t)sp->nsegments, 1);
    for (int pass = 0; pass < FM_CP_NPASSES; pass++) {
      int32_t br = s->br[pass], bc = s->bc[pass], tr = (s->seqlen + br - 1) / br, tc = (s->seqlen + bc - 1) / bc;
      uint8_t *cls = malloc((size_t)tr * tc * fm_colmask_nsets(m));
      cr_assert_eq(fm_classify(m, br, bc, NULL, cls, NULL, NULL), FM_OK);
      for (int32_t set = 0; set < fm_colmask_nsets(m); set++)
        for (int32_t rt = 0; rt < tr; rt++)
          for (int32_t ct = 0; ct < tc; ct++) {
            if (cls[((int64_t)set * tr + rt) * tc + ct] == FM_TILE_MASKED) continue;
            int32_t r = fm_cp_owner(sp, rt * br), k = 0;
            while (sp->segments[k].row1 <= ct * bc) k++;
            if (sp->segments[k].rank != r) want[(int64_t)r * sp->nsegments + k] = 1;
          }
      free(cls);
    }
    for (int32_t r = 0; r < s->ranks; r++) {
      int64_t rows = 0;
      for (int32_t k = 0; k < sp->nsegments; k++) {
        cr_assert_eq(sp->need[(int64_t)r * sp->nsegments + k], want[(int64_t)r * sp->nsegments + k],
                     "%s rank %d segment %d", fm_cp_sharding_name(sp->sharding), r, k);
        if (want[(int64_t)r * sp->nsegments + k]) rows += sp->segments[k].row1 - sp->segments[k].row0;
      }
      cr_assert_eq(sp->ranks[r].kv_recv_rows, rows);
      cr_assert_eq(sp->ranks[r].kv_recv_bytes, rows * s->kv_row_bytes);
    }
    free(want);
  }
}

Test(cp_plan, kv_needs_match_the_tile_maps) {
  const char *families[] = {"causal_document", "sliding_window", "document", "qk_sparse", "prefix_lm_document"};
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
    fm_colmask *m = family(families[f], 16384, NULL);
    fm_cp_options o = {.ranks = 4, .chunk = 1536, .kernel = FM_KERNEL_SM90, .heads = 8, .head_dim = 64};
    fm_cp_plan *p = NULL;
    fm_err err;
    cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_OK, "%s", err.msg);
    cr_assert_eq(fm_cp_plan_summary(p)->kv_row_bytes, 8 * 64 * 2 * 2);
    check_need(m, p);
    fm_cp_plan_destroy(p);
    fm_colmask_destroy(m);
  }
}

Test(cp_plan, ranks_aligned_to_documents_need_no_remote_kv) {
  /* four documents of 4096 tokens: contiguous and zigzag-free ranks hold whole documents */
  fm_colmask *m = family("document", 16384, "docs=4096,4096,4096,4096");
  fm_cp_plan *p = plan_of(m, 4, 1u << FM_CP_CONTIGUOUS | 1u << FM_CP_MASK_AWARE | 1u << FM_CP_ZIGZAG, 1);
  const fm_cp_sharding_plan *ct = sharding(p, FM_CP_CONTIGUOUS), *zz = sharding(p, FM_CP_ZIGZAG);
  cr_assert_eq(ct->kv_recv_bytes, 0, "contiguous: %lld bytes", (long long)ct->kv_recv_bytes);
  for (int r = 0; r < 4; r++) cr_assert_eq(ct->ranks[r].kv_sources, 0);
  /* zigzag's stripes of 2048 cut the documents: each rank needs its stripes' partners */
  cr_assert_gt(zz->kv_recv_bytes, 0);
  /* nothing to wait for: the ring's one step is the launch of the rank's
   * rows against its own keys (one whole document of 4096: the timing
   * model's prediction of that document alone, through fm_timing_work_init)
   * plus its own work (forward: the first merge, (3u + 2l) R, and O
   * converted, 3u R; backward: dQ copied, 3u R, the OWN sums, 10u R, dQ, dK,
   * dV converted, 9u R; u = 256, l = 4 bytes, R = 4096 rows, at the
   * profile's HBM rate). The all-gather's forward launch is dearer: against
   * all S keys, its items consider four times the key tiles. */
  const double h = profile()->hbm_gbs * 1e3, R = 4096, u = 256, l = 4;
  fm_colmask *doc = family("document", 4096, "docs=4096");
  double own[FM_CP_NPASSES];
  for (int k = 0; k < FM_CP_NPASSES; k++) {
    fm_pass fp = k == FM_CP_FWD ? FM_PASS_FWD : FM_PASS_BWD;
    const int32_t D = fm_cp_plan_summary(p)->head_dim;
    const fm_timing_coef *c = fm_profile_coef(profile(), fp, D);
    fm_timing_work w;
    fm_timing_result res;
    cr_assert_eq(fm_timing_work_init(&w, doc, c->br, c->bc, NULL), FM_OK);
    fm_timing_problem pb = {.batch = 1, .heads = 1, .head_dim = D, .pass = fp, .variant = FM_VARIANT_SKIP,
                            .clock = fm_cp_plan_summary(p)->clock};
    cr_assert_eq(fm_timing_predict(profile(), &w, &pb, &res, NULL), FM_OK);
    own[k] = (res.time_us + window_us(k)) / 1e3;
    fm_timing_work_free(&w);
    for (int r = 0; r < 4; r++) /* the backward's items are the key tiles: the others' are empty */
      cr_assert(k == FM_CP_FWD ? own[k] < ct->ranks[r].ms[k] : own[k] <= ct->ranks[r].ms[k] + 1e-12,
                "pass %d rank %d: %g %g", k, r, own[k], ct->ranks[r].ms[k]);
  }
  fm_colmask_destroy(doc);
  double fwd = own[FM_CP_FWD] + (6 * u + 2 * l) * R / h / 1e3, bwd = own[FM_CP_BWD] + 22 * u * R / h / 1e3;
  cr_assert_float_eq(ct->cost[FM_CP_RING].ms[FM_CP_FWD], fwd, 1e-9, "nothing to wait for");
  cr_assert_float_eq(ct->cost[FM_CP_RING].ms[FM_CP_BWD], bwd, 1e-9, "nothing to wait for");
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
  /* shifted by half a document, contiguous ranks need their neighbour's */
  m = family("document", 16384, "docs=2048,4096,4096,4096,2048");
  p = plan_of(m, 4, 1u << FM_CP_CONTIGUOUS, 1);
  ct = sharding(p, FM_CP_CONTIGUOUS);
  cr_assert_eq(ct->ranks[0].kv_recv_rows, 4096);
  cr_assert_eq(ct->ranks[1].kv_recv_rows, 8192);
  check_need(m, p);
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

/* ---- the exchange model ------------------------------------------------------------------ */

/* The exchange model's hand-worked example (exchange_model_by_hand says it in words): two
 * ranks, each with its own keys' step and the other's. */
static const int64_t HAND_START[3] = {0, 2, 4};
static const fm_cp_model_src HAND_SRC[4] = {
    {.s = 0, .us = {10, 10}},
    {.s = 1, .us = {5, 5}, .bytes = 20000, .msgs = {{6, 6}, {2, 2}}},
    {.s = 0, .us = {4, 4}},
    {.s = 1, .us = {3, 3}, .bytes = 2000, .msgs = {{2, 2}, {4, 2}}}};

Test(cp_plan, exchange_model_by_hand) {
  /* Two ranks, a link of 1 GB/s (1000 bytes per us) and 1 us per message.
   * Rank 0: own step 10 us, then rank 1's keys 5 us, receiving 20000 bytes
   * (20 us) in 2 K/V messages (ring) or 6 (all-gather), partials back in 2 / 6.
   * Rank 1: own step 4 us, rank 0's keys 3 us, 2000 bytes (2 us) in 4 / 2
   * messages, partials back in 2 / 2. The same compute in both passes. */
  fm_cp_model m = {.ranks = 2, .start = HAND_START, .src = HAND_SRC, .link_gbs = 1, .link_us = 1};
  double wall[2];
  /* Ring forward: one group, s = 1, posted at 0 by both (step 1 waits for no
   * step i - 2). 1 -> 0 takes 20 + 2 = 22 us, 0 -> 1 takes 2 + 4 = 6; the group
   * ends on both ranks when both transfers are done: 22. Rank 0: own 0-10,
   * then 22-27; rank 1: own 0-4, then 22-25 (independent ranks would give 7:
   * its own 2-us transfer hides under its 4-us step; the lockstep group holds
   * it until its send to rank 0 is done). */
  cr_assert_eq(fm_cp_model_ring(&m, FM_CP_FWD, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 27, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 25, 1e-9, "%g", wall[1]);
  /* Ring backward: KV(1) as above (ends at 22), OWN (after step 0: 10 and 4,
   * the comm stream already at 22), then DKV(1): each rank after its step 1
   * (rank 0: 22-27, rank 1: 22-25); 0 -> 1 sends 20000 bytes in 2 messages
   * from max(27, 25) = 27: 27 + 22 = 49; 1 -> 0 2000 bytes in 2: 27 + 4 = 31.
   * Both ranks' groups end at 49. */
  cr_assert_eq(fm_cp_model_ring(&m, FM_CP_BWD, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 49, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 49, 1e-9, "%g", wall[1]);
  /* All-gather forward, one launch of 15 and 7 us after the group. Each
   * transfer takes its bytes and messages over its pair's link (no bound
   * through a GPU here): 1 -> 0: 20000 bytes and 6 messages: 26 us; 0 -> 1:
   * 2000 and 2: 4 us. Both ranks take part in both: the group ends at 26;
   * walls 26 + 15 = 41 and 26 + 7 = 33. */
  const double comp[2] = {15, 7};
  cr_assert_eq(fm_cp_model_allgather(&m, FM_CP_FWD, comp, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 41, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 33, 1e-9, "%g", wall[1]);
  /* Backward: the launches first (15, 7), then the partials, each once both
   * ends are done (15): 0 -> 1 20000 bytes in 6 messages: 15 + 26 = 41; 1 -> 0
   * 2000 in 2: 15 + 4 = 19. Both walls 41. */
  cr_assert_eq(fm_cp_model_allgather(&m, FM_CP_BWD, comp, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 41, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 41, 1e-9, "%g", wall[1]);
  /* sources out of ring order are refused */
  const fm_cp_model_src bad[4] = {HAND_SRC[1], HAND_SRC[0], HAND_SRC[2], HAND_SRC[3]};
  m.src = bad;
  fm_err err;
  cr_assert_eq(fm_cp_model_ring(&m, FM_CP_FWD, wall, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "ring order"), "%s", err.msg);
}

Test(cp_plan, allgather_pairs_move_side_by_side_up_to_the_gpus_bound) {
  /* Three ranks, each receiving 3000 bytes in 1 message from each of the other two; a pair's
   * link 1 GB/s (1000 bytes per us), 1 us a message. The pairs move side by side: a transfer
   * takes 3 + 1 = 4 us, not the 6000 bytes of its receiver's whole group over one link. Through
   * one GPU at most 1.5 GB/s: 6000 bytes in and out take 4 us, so a transfer takes max(3, 4) + 1
   * = 5 us. Forward walls: the group, then launches of 10, 20, 30 us. */
  static const int64_t start[4] = {0, 3, 6, 9};
  fm_cp_model_src src[9];
  for (int k = 0; k < 9; k++)
    src[k] = (fm_cp_model_src){.s = k % 3, .bytes = k % 3 ? 3000 : 0, .msgs = {{k % 3 ? 1 : 0, 1}, {1, 1}}};
  fm_cp_model m = {.ranks = 3, .start = start, .src = src, .link_gbs = 1, .link_us = 1};
  const double comp[3] = {10, 20, 30};
  double wall[3];
  cr_assert_eq(fm_cp_model_allgather(&m, FM_CP_FWD, comp, wall, NULL), FM_OK);
  for (int r = 0; r < 3; r++) cr_assert_float_eq(wall[r], 4 + comp[r], 1e-9, "rank %d: %g", r, wall[r]);
  m.gpu_gbs = 1.5;
  cr_assert_eq(fm_cp_model_allgather(&m, FM_CP_FWD, comp, wall, NULL), FM_OK);
  for (int r = 0; r < 3; r++) cr_assert_float_eq(wall[r], 5 + comp[r], 1e-9, "rank %d: %g", r, wall[r]);
  /* backward: the launches first; each pair's partials once both ends are done (rank 2, the
   * slowest, holds its two pairs: 30 + 5), the others' pair at max(10, 20) + 5 = 25 */
  cr_assert_eq(fm_cp_model_allgather(&m, FM_CP_BWD, comp, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 35, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 35, 1e-9, "%g", wall[1]);
  cr_assert_float_eq(wall[2], 35, 1e-9, "%g", wall[2]);
}

Test(cp_plan, launch_ops_by_hand) {
  /* One more sm90 launch's small operations (fm_cp_launch_ops_us): OP_US =
   * 2.336 + 1.008 us a small kernel or memset, GAP_US = 1.008 a kernel priced
   * by its bytes. Backward: tile_bounds and the counter memset (2 OP_US), prep,
   * the dQ memset, the kernel, dq_convert and the dQ sum (5 GAP_US): 6.688 +
   * 5.04 = 11.728. Forward at 128K, P = 4, H = 4 (1024 items, at most CUB's
   * one tile of 256 x 19 = 4864): tile_bounds, row_work, item_keys, one sort
   * kernel, the memset (5 OP_US) and the kernel and merge (2 GAP_US): 16.72 +
   * 2.016 = 18.736. At 1M (8192 items), B x H = 4: the key's end bit is 35
   * (33, then 4 >> 1 and 4 >> 2 are not 0), 5 digits of 8 bits: histogram,
   * exclusive sum, 5 x (memset, onesweep) = 12 sort operations: 16 x 3.344 +
   * 2.016 = 55.52. 4864 items: one tile still. */
  cr_assert_float_eq(fm_cp_launch_ops_us(FM_CP_BWD, 1024, 4), 11.728, 1e-9);
  cr_assert_float_eq(fm_cp_launch_ops_us(FM_CP_FWD, 1024, 4), 18.736, 1e-9);
  cr_assert_float_eq(fm_cp_launch_ops_us(FM_CP_FWD, 8192, 4), 55.52, 1e-9);
  cr_assert_float_eq(fm_cp_launch_ops_us(FM_CP_FWD, 4864, 4), 18.736, 1e-9);
  /* B x H = 1: end bit 33, 5 digits still; 256: 41, 6 digits: 14 operations */
  cr_assert_float_eq(fm_cp_launch_ops_us(FM_CP_FWD, 8192, 256), 18 * 3.344 + 2.016, 1e-9);
}

Test(cp_plan, exchange_model_contention_by_hand) {
  /* A step beside an NCCL group progresses at 1 - f (fm_cp_stretch). f = 0.2,
   * a group resident over [10, 60): 100 us of work from 0 runs 10 us at full
   * rate, 50 us at 0.8 (40 us of work), the last 50 us after: ends at 110; 30
   * us of work: 10, then 20 / 0.8 = 25 inside: ends at 35; from 70 (after the
   * group): 70 + 100. */
  const double iv[4] = {10, 60, 200, 210};
  cr_assert_float_eq(fm_cp_stretch(0, 100, 0.2, iv, 1), 110, 1e-9);
  cr_assert_float_eq(fm_cp_stretch(0, 30, 0.2, iv, 1), 35, 1e-9);
  cr_assert_float_eq(fm_cp_stretch(70, 100, 0.2, iv, 1), 170, 1e-9);
  /* two groups: 10 + 40 inside the first (50), 140 free to 200 (190), 8
   * inside the second (its 10 us at 0.8), the last 2 after it: ends at 212 */
  cr_assert_float_eq(fm_cp_stretch(0, 200, 0.2, iv, 2), 212, 1e-9);
  cr_assert_float_eq(fm_cp_stretch(0, 200, 0, iv, 2), 200, 1e-9);
  /* exchange_model_by_hand's two ranks with comm_sm_frac 0.2. Forward: the one
   * group is resident on both ranks over [0, 22) (posted at 0, its last
   * transfer done at 22: rank 1 waits for its send of 22 us). Rank 0's own
   * step (10 us) runs inside it at 0.8: 12.5; its second (5 us) from 22, after
   * the group: 5. Rank 1: 4 / 0.8 = 5, then 3. The walls are the groups' (27,
   * 25), the windows grow: 12.5 + 5 and 5 + 3 where the steps alone are 10 +
   * 5 and 4 + 3. */
  fm_cp_model m = {.ranks = 2, .start = HAND_START, .src = HAND_SRC, .link_gbs = 1, .link_us = 1,
                   .comm_sm_frac = 0.2};
  double wall[2], step[4];
  cr_assert_eq(fm_cp_model_ring_steps(&m, FM_CP_FWD, wall, step, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 27, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 25, 1e-9, "%g", wall[1]);
  const double want[4] = {12.5, 5, 5, 3};
  for (int k = 0; k < 4; k++) cr_assert_float_eq(step[k], want[k], 1e-9, "step %d: %g", k, step[k]);
  /* Backward: KV(1) as above; DKV(1) is posted after each rank's step 1 (27,
   * 25) and ends at 49 on both: no step runs beside it. The steps as in the
   * forward; the walls stay 49. */
  cr_assert_eq(fm_cp_model_ring_steps(&m, FM_CP_BWD, wall, step, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 49, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 49, 1e-9, "%g", wall[1]);
  for (int k = 0; k < 4; k++) cr_assert_float_eq(step[k], want[k], 1e-9, "step %d: %g", k, step[k]);
  /* Rank 1's own step of 30 us instead: inside [0, 22) it does 17.6 us of
   * work, the other 12.4 after: ends at 34.4, its step 1 from 34.4 to 37.4.
   * The group does not move (posted at 0 by both): rank 0 as before. */
  fm_cp_model_src slow[4] = {HAND_SRC[0], HAND_SRC[1], HAND_SRC[2], HAND_SRC[3]};
  slow[2].us[FM_CP_FWD] = 30;
  m.src = slow;
  cr_assert_eq(fm_cp_model_ring_steps(&m, FM_CP_FWD, wall, step, NULL), FM_OK);
  cr_assert_float_eq(step[2], 34.4, 1e-9, "%g", step[2]);
  cr_assert_float_eq(wall[1], 37.4, 1e-9, "%g", wall[1]);
  cr_assert_float_eq(wall[0], 27, 1e-9, "%g", wall[0]);
  /* counted in waves (fm_cp_contended_rate): 128 items on 132 SMs fill one wave, on the 116
   * that f = 0.12 leaves two (rate 1/2); 100 fit on the rest (1); 1024 take 8 and 9 waves */
  cr_assert_float_eq(fm_cp_contended_rate(128, 132, 0.12), 0.5, 1e-12);
  cr_assert_float_eq(fm_cp_contended_rate(100, 132, 0.12), 1, 1e-12);
  cr_assert_float_eq(fm_cp_contended_rate(1024, 132, 0.12), 8.0 / 9.0, 1e-12);
  cr_assert_float_eq(fm_cp_contended_rate(1024, 132, 0), 1, 0);
  /* a step's own rate overrides 1 - f: rank 1's 30-us own step at rate 0.5 inside [0, 22)
   * does 11 us of work there, the other 19 after: ends at 41, its step 1 at 44 */
  slow[2].rate[FM_CP_FWD] = 0.5;
  cr_assert_eq(fm_cp_model_ring_steps(&m, FM_CP_FWD, wall, step, NULL), FM_OK);
  cr_assert_float_eq(step[2], 41, 1e-9, "%g", step[2]);
  cr_assert_float_eq(wall[1], 44, 1e-9, "%g", wall[1]);
  /* f outside [0, 1) is refused */
  m.comm_sm_frac = 1;
  fm_err err;
  cr_assert_eq(fm_cp_model_ring_steps(&m, FM_CP_FWD, wall, step, &err), FM_EINVAL);
}

Test(cp_plan, exchange_model_sums_by_hand) {
  /* The two ranks above, with the work outside the steps: rank 1 takes 3 us
   * to add the partials of its K/V that rank 0 sends back, rank 0 1 us for
   * rank 1's (back_us); OWN sums 2 and 1 us; all-gather copies 1 and 0.5 us;
   * conversions (tail_us) as set below. */
  const fm_cp_model_src src[4] = {
      {.s = 0, .us = {10, 10}},
      {.s = 1, .us = {5, 5}, .bytes = 20000, .msgs = {{6, 6}, {2, 2}}, .back_us = 3},
      {.s = 0, .us = {4, 4}},
      {.s = 1, .us = {3, 3}, .bytes = 2000, .msgs = {{2, 2}, {4, 2}}, .back_us = 1}};
  const fm_cp_model_rank rank[2] = {
      {.own_us = 2, .copy_us = 1, .tail_us = {{0.25, 1}, {0.5, 1.5}}},
      {.own_us = 1, .copy_us = 0.5, .tail_us = {{0, 0.5}, {0.25, 0.75}}}};
  fm_cp_model m = {.ranks = 2, .start = HAND_START, .src = src, .link_gbs = 1, .link_us = 1, .rank = rank};
  double wall[2];
  /* Ring forward: the walls above (27, 25) and the conversion of O. */
  cr_assert_eq(fm_cp_model_ring(&m, FM_CP_FWD, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 27.5, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 25.25, 1e-9, "%g", wall[1]);
  /* Ring backward: KV(1) ends at 22 on both. OWN after step 0 (10, 4), the
   * comm stream at 22: 22 + 2 = 24 and 22 + 1 = 23. Steps 1: 22-27, 22-25.
   * DKV(1) ready at max(24, 27) = 27 and max(23, 25) = 25; 0 -> 1 from 27
   * takes 22 (ends 49), 1 -> 0 from 27 takes 4: both groups end at 49. Then
   * the sums: rank 1 adds what rank 0 sent (3): 52; rank 0 what rank 1 sent
   * (1): 50. Walls: 50 + 1.5 = 51.5 and 52 + 0.75 = 52.75. */
  cr_assert_eq(fm_cp_model_ring(&m, FM_CP_BWD, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 51.5, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 52.75, 1e-9, "%g", wall[1]);
  /* All-gather forward: 41 and 33 above, then its tails 0.25 and 0. */
  const double comp[2] = {15, 7};
  cr_assert_eq(fm_cp_model_allgather(&m, FM_CP_FWD, comp, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 41.25, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 33, 1e-9, "%g", wall[1]);
  /* Backward: the group ends at 41 on both (above); rank 0 then copies (1),
   * adds rank 1's partials (1) and converts (1): 44; rank 1 copies (0.5),
   * adds rank 0's (3), converts (0.5): 45. */
  cr_assert_eq(fm_cp_model_allgather(&m, FM_CP_BWD, comp, wall, NULL), FM_OK);
  cr_assert_float_eq(wall[0], 44, 1e-9, "%g", wall[0]);
  cr_assert_float_eq(wall[1], 45, 1e-9, "%g", wall[1]);
}

Test(cp_plan, ring_extra_work_from_sizes_and_profile) {
  /* full, S = 4096, two contiguous ranks of R = 2048 rows, B = H = 1, D =
   * 128, on the H200 sm90 profile, a link so fast that no transfer counts.
   * Each rank has two ring steps (own keys, the other's), each the launch of
   * its 2048 rows against 2048 keys: the timing model's prediction of the
   * full 2048 x 2048 mask, T1 (forward) and T1' (backward), through
   * fm_timing_work_init, independent of the plan's spans. With u = H D 2 =
   * 256 bytes (a bf16 row), l = 4 (an LSE row) and h = 4800 GB/s:
   *   forward steps: T1 + (3u + 2l) R / h (first merge), T1 + (5u + 3l) R / h
   *     (second; the counted operations, 18.736 us, stay below launch_us);
   *   backward steps: T1' + 3u R / h (dQ copied), T1' + (7u + 3l) R / h (the
   *     second launch's row work) + 5u R / h (dQ added);
   *   ring forward = both steps + 3u R / h (O converted); ring backward = both
   *     steps + 10u R / h (the partials got back) + 9u R / h (dQ, dK, dV
   *     converted); the OWN sums (10u R / h) run under step 1;
   *   all-gather = the one launch T (forward), T + 6u R / h + 10u R / h + 6u
   *     R / h (backward: own partials copied, the other's added, dK, dV
   *     converted). */
  fm_colmask *m = family("full", 4096, NULL), *half = family("full", 2048, NULL);
  const fm_gpu_profile *prof = profile();
  fm_cp_options o = {.ranks = 2, .shardings = 1u << FM_CP_CONTIGUOUS, .kernel = FM_KERNEL_SM90,
                     .profile = prof, .link_gbs = 1e9, .link_us = 1e-9, .gpu_gbs = -1};
  fm_cp_plan *p = NULL;
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, NULL), FM_OK);
  const fm_cp_sharding_plan *ct = sharding(p, FM_CP_CONTIGUOUS);
  const double R = 2048, u = 256, l = 4, h = prof->hbm_gbs * 1e3; /* bytes per us */
  double t1[FM_CP_NPASSES];
  for (int k = 0; k < FM_CP_NPASSES; k++) {
    const fm_timing_coef *c = fm_profile_coef(prof, k == FM_CP_FWD ? FM_PASS_FWD : FM_PASS_BWD, 128);
    fm_timing_work w;
    fm_timing_result res;
    cr_assert_eq(fm_timing_work_init(&w, half, c->br, c->bc, NULL), FM_OK);
    fm_timing_problem pb = {.batch = 1, .heads = 1, .head_dim = 128,
                            .pass = k == FM_CP_FWD ? FM_PASS_FWD : FM_PASS_BWD, .variant = FM_VARIANT_SKIP,
                            .clock = fm_cp_plan_summary(p)->clock};
    cr_assert_eq(fm_timing_predict(prof, &w, &pb, &res, NULL), FM_OK);
    t1[k] = res.time_us + window_us(k);
    fm_timing_work_free(&w);
  }
  cr_assert_lt(fm_cp_launch_ops_us(FM_CP_FWD, 16, 1), fm_profile_coef(prof, FM_PASS_FWD, 128)->launch_us);
  cr_assert_lt(fm_cp_launch_ops_us(FM_CP_BWD, 16, 1), fm_profile_coef(prof, FM_PASS_BWD, 128)->launch_us);
  const double fwd_step[2] = {t1[FM_CP_FWD] + (3 * u + 2 * l) * R / h, t1[FM_CP_FWD] + (5 * u + 3 * l) * R / h};
  const double bwd_step[2] = {t1[FM_CP_BWD] + 3 * u * R / h, t1[FM_CP_BWD] + (7 * u + 3 * l + 5 * u) * R / h};
  for (int r = 0; r < 2; r++) {
    const fm_cp_rank *rk = &ct->ranks[r];
    cr_assert_eq(rk->rows, 2048);
    cr_assert_eq(rk->kv_sources, 1);
    const fm_cp_cost *ag = &rk->cost[FM_CP_ALLGATHER], *ring = &rk->cost[FM_CP_RING];
    cr_assert_float_eq(ag->ms[FM_CP_FWD] * 1e3, rk->ms[FM_CP_FWD] * 1e3, 1e-5, "%g", ag->ms[FM_CP_FWD]);
    cr_assert_float_eq(ag->ms[FM_CP_BWD] * 1e3, rk->ms[FM_CP_BWD] * 1e3 + 22 * u * R / h, 1e-5, "%g",
                       ag->ms[FM_CP_BWD]);
    cr_assert_eq(rk->nsteps, 2);
    for (int i = 0; i < 2; i++) {
      /* each step's launch: the rank's 16 row tiles (forward), the step's 16 key tiles (backward) */
      cr_assert_eq(rk->steps[i].items[FM_CP_FWD], 16, "rank %d step %d", r, i);
      cr_assert_eq(rk->steps[i].items[FM_CP_BWD], 16, "rank %d step %d", r, i);
      cr_assert_float_eq(rk->steps[i].ms[FM_CP_FWD] * 1e3, fwd_step[i], 1e-6, "rank %d step %d", r, i);
      cr_assert_float_eq(rk->steps[i].ms[FM_CP_BWD] * 1e3, bwd_step[i], 1e-6, "rank %d step %d", r, i);
    }
    cr_assert_float_eq(ring->ms[FM_CP_FWD] * 1e3, fwd_step[0] + fwd_step[1] + 3 * u * R / h, 1e-5, "rank %d", r);
    cr_assert_float_eq(ring->ms[FM_CP_BWD] * 1e3, bwd_step[0] + bwd_step[1] + 19 * u * R / h, 1e-5, "rank %d", r);
    /* the compute cp-run measures: the all-gather's launch, the ring's step
     * windows (no group resides beside them on this link: their own times) */
    for (int k = 0; k < FM_CP_NPASSES; k++) {
      cr_assert_float_eq(ag->compute_ms[k], rk->ms[k], 1e-12);
      double sum = 0;
      for (int i = 0; i < 2; i++) {
        cr_assert_float_eq(rk->steps[i].ring_ms[k], rk->steps[i].ms[k], 1e-9);
        sum += rk->steps[i].ring_ms[k];
      }
      cr_assert_float_eq(ring->compute_ms[k], sum, 1e-12);
    }
  }
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
  fm_colmask_destroy(half);
}

Test(cp_plan, the_allgather_clock_prices_the_allgather_alone) {
  /* --clock auto: the all-gather's launches in the burst state, all else sustained. The
   * one-GPU time, the ranks' compute and the ring are the all-sustained plan's; the
   * all-gather's compute is the all-burst plan's; and the profile's window makes them
   * differ where the profile has a window (8K causal_document, 3 ranks: launches of
   * 0.1-3 ms, inside it) */
  fm_colmask *m = family("causal_document", 8192, NULL);
  fm_clock st[3][2] = {{FM_CLOCK_SUSTAINED, FM_CLOCK_BURST}, {FM_CLOCK_SUSTAINED, FM_CLOCK_SUSTAINED},
                       {FM_CLOCK_BURST, FM_CLOCK_BURST}};
  fm_cp_plan *p[3];
  for (int k = 0; k < 3; k++) {
    fm_cp_options o = {.ranks = 3, .chunk = 512, .kernel = FM_KERNEL_SM90, .profile = profile(),
                       .clock = st[k][0], .allgather_clock = st[k][1]};
    cr_assert_eq(fm_cp_plan_create(m, &o, &p[k], NULL), FM_OK);
  }
  const fm_cp_summary *a = fm_cp_plan_summary(p[0]), *s = fm_cp_plan_summary(p[1]);
  cr_assert_eq(a->allgather_clock, FM_CLOCK_BURST);
  cr_assert_str_eq(fm_cp_clock_name(a->clock, a->allgather_clock), "auto");
  cr_assert_float_eq(a->one_gpu_total_ms, s->one_gpu_total_ms, 0);
  for (int sh = 0; sh < FM_CP_NSHARDINGS; sh++)
    for (int32_t r = 0; r < 3; r++)
      for (int k = 0; k < FM_CP_NPASSES; k++) {
        const fm_cp_rank *ra = &sharding(p[0], (fm_cp_sharding)sh)->ranks[r];
        const fm_cp_rank *rs = &sharding(p[1], (fm_cp_sharding)sh)->ranks[r];
        const fm_cp_rank *rb = &sharding(p[2], (fm_cp_sharding)sh)->ranks[r];
        cr_assert_float_eq(ra->ms[k], rs->ms[k], 0);
        cr_assert_float_eq(ra->cost[FM_CP_RING].compute_ms[k], rs->cost[FM_CP_RING].compute_ms[k], 0);
        cr_assert_float_eq(ra->cost[FM_CP_ALLGATHER].compute_ms[k], rb->cost[FM_CP_ALLGATHER].compute_ms[k], 0);
        if (k == FM_CP_FWD) /* this profile's forward has a window (1.1x past 6 ms), its backward none */
          cr_assert_lt(ra->cost[FM_CP_ALLGATHER].compute_ms[k], rs->cost[FM_CP_ALLGATHER].compute_ms[k] / 1.05,
                       "%s rank %d", fm_cp_sharding_name(sh), r);
      }
  for (int k = 0; k < 3; k++) fm_cp_plan_destroy(p[k]);
  fm_colmask_destroy(m);
  fm_clock c, g;
  cr_assert_eq(fm_cp_clock_parse("auto", &c, &g, NULL), FM_OK);
  cr_assert(c == FM_CLOCK_SUSTAINED && g == FM_CLOCK_BURST);
  cr_assert_eq(fm_cp_clock_parse("burst", &c, &g, NULL), FM_OK);
  cr_assert(c == FM_CLOCK_BURST && g == FM_CLOCK_BURST);
  fm_err err;
  cr_assert_eq(fm_cp_clock_parse("fast", &c, &g, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "expected auto"), "%s", err.msg);
  cr_assert_str_eq(fm_cp_clock_name(FM_CLOCK_BURST, FM_CLOCK_SUSTAINED), "mixed");
}

/* The exchange a sharding plan should take by its own costs (fm_cp_plan.h):
 * the one that fits; both: the faster, the smaller memory within 1%; none:
 * the smaller memory. */
static fm_cp_exchange expected_exchange(const fm_cp_sharding_plan *sp) {
  const fm_cp_cost *a = &sp->cost[FM_CP_ALLGATHER], *b = &sp->cost[FM_CP_RING];
  fm_cp_exchange by_mem = a->mem_bytes <= b->mem_bytes ? FM_CP_ALLGATHER : FM_CP_RING;
  if (sp->fits[FM_CP_ALLGATHER] != sp->fits[FM_CP_RING])
    return sp->fits[FM_CP_ALLGATHER] ? FM_CP_ALLGATHER : FM_CP_RING;
  if (!sp->fits[FM_CP_ALLGATHER] || fabs(a->step_ms - b->step_ms) <= 0.01 * fmin(a->step_ms, b->step_ms))
    return by_mem;
  return a->step_ms < b->step_ms ? FM_CP_ALLGATHER : FM_CP_RING;
}

Test(cp_plan, choice_follows_the_model) {
  /* Every sharding of a few masks at 64K (one at 256K) on 4 ranks (H = 8), under budgets
   * that let both exchanges fit (the default), only the smaller (920 MiB:
   * the all-gathers hold 896-1025 MiB, the rings 849-897) and neither: the plan's
   * exchange is the one its costs give, each sharding's cost is the slowest
   * rank's per pass, and the choice differs between cases (the rule is
   * exercised both ways). */
  const char *fams[] = {"causal_document", "sliding_window", "causal", "full", "document"};
  int seen[FM_CP_NEXCHANGES] = {0}, fits_one = 0, ties = 0;
  for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
    /* documents aligned to the contiguous ranks: no transfer; at 256K the ring's
     * merges and sums are within 1% of the launches, a tie */
    fm_colmask *m = family(fams[f], f == 4 ? 262144 : 65536, f == 4 ? "docs=65536,65536,65536,65536" : NULL);
    for (int budget = 0; budget < 3; budget++) {
      fm_cp_options o = {.ranks = 4, .kernel = FM_KERNEL_SM90, .heads = 8, .profile = profile(),
                         .mem_budget = budget == 0 ? 0 : budget == 1 ? (int64_t)920 << 20 : 1};
      fm_cp_plan *p = NULL;
      cr_assert_eq(fm_cp_plan_create(m, &o, &p, NULL), FM_OK);
      for (int s = 0; s < FM_CP_NSHARDINGS; s++) {
        const fm_cp_sharding_plan *sp = sharding(p, (fm_cp_sharding)s);
        for (int x = 0; x < FM_CP_NEXCHANGES; x++)
          for (int k = 0; k < FM_CP_NPASSES; k++) {
            double mx = 0;
            for (int r = 0; r < 4; r++) mx = fmax(mx, sp->ranks[r].cost[x].ms[k]);
            cr_assert_float_eq(sp->cost[x].ms[k], mx, 1e-12, "%s %s", fams[f], fm_cp_sharding_name(sp->sharding));
          }
        cr_assert_eq(sp->exchange, expected_exchange(sp), "%s %s budget %d: picked %s, ring %g / all-gather %g ms",
                     fams[f], fm_cp_sharding_name(sp->sharding), budget, fm_cp_exchange_name(sp->exchange),
                     sp->cost[FM_CP_RING].step_ms, sp->cost[FM_CP_ALLGATHER].step_ms);
        cr_assert_float_eq(sp->step_ms, sp->cost[sp->exchange].step_ms, 1e-12);
        seen[sp->exchange]++;
        fits_one += sp->fits[FM_CP_ALLGATHER] != sp->fits[FM_CP_RING];
        ties += budget == 0 && fabs(sp->cost[0].step_ms - sp->cost[1].step_ms) <=
                                   0.01 * fmin(sp->cost[0].step_ms, sp->cost[1].step_ms);
      }
      fm_cp_plan_destroy(p);
    }
    fm_colmask_destroy(m);
  }
  cr_assert_gt(seen[FM_CP_ALLGATHER], 0);
  cr_assert_gt(seen[FM_CP_RING], 0);
  cr_assert_gt(fits_one, 0, "no budget separated the two exchanges");
  cr_assert_gt(ties, 0, "no tie within 1%%");
}

Test(cp_plan, lockstep_ring_waits_on_zigzag) {
  /* causal_document at 1M on 4 ranks (H = 4): zigzag gives each rank one light
   * and one heavy stripe, so the ranks' compute per source differs and the
   * lockstep groups make ranks wait for one another: the ring's step exceeds
   * the slowest rank's compute by more than the all-gather's, whose only
   * waits are its one group each way (cp-run measured 802.3 against 620.4 ms,
   * bench/results/cp-scaling.md). Contiguous: one source per rank, nothing to
   * couple: the ring is within 2% of the compute. */
  fm_sample_set samples; /* the documents cp-run measured: the CLI's defaults (seed 0, no --sample) */
  cr_assert_eq(fm_samples_builtin(&samples, NULL), FM_OK);
  fm_family_request req = {.family = "causal_document", .seqlen = 1048576, .batch = 1, .heads = 1,
                           .seed = 0, .sample = -1, .samples = &samples};
  fm_colmask *m = NULL;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  fm_samples_free(&samples);
  fm_cp_options o = {.ranks = 4, .kernel = FM_KERNEL_SM90, .heads = 4, .profile = profile()};
  fm_cp_plan *p = NULL;
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, NULL), FM_OK);
  const fm_cp_sharding_plan *zz = sharding(p, FM_CP_ZIGZAG), *ct = sharding(p, FM_CP_CONTIGUOUS);
  double ring = zz->cost[FM_CP_RING].step_ms, ag = zz->cost[FM_CP_ALLGATHER].step_ms;
  cr_assert_gt(ring, 1.05 * ag, "zigzag: ring %g ms, all-gather %g ms", ring, ag);
  cr_assert_gt(ring, 1.10 * zz->step_compute_ms, "zigzag: ring %g, compute %g", ring, zz->step_compute_ms);
  cr_assert_eq(zz->exchange, FM_CP_ALLGATHER);
  cr_assert_lt(ct->cost[FM_CP_RING].step_ms, 1.02 * ct->step_compute_ms);
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

/* ---- mask-aware and the solvers ------------------------------------------------------------ */

Test(cp_plan, mask_aware_beats_contiguous_on_causal_document_at_1m) {
  fm_colmask *m = family("causal_document", 1048576, NULL);
  fm_cp_plan *p = plan_of(m, 4, 0, 1);
  const fm_cp_sharding_plan *ct = sharding(p, FM_CP_CONTIGUOUS), *ma = sharding(p, FM_CP_MASK_AWARE);
  cr_assert_lt(ma->imbalance_work, ct->imbalance_work, "%g vs %g", ma->imbalance_work, ct->imbalance_work);
  cr_assert_lt(ma->imbalance_time, ct->imbalance_time, "%g vs %g", ma->imbalance_time, ct->imbalance_time);
  cr_assert_lt(ma->imbalance_work, 1.01);
  cr_assert_lt(ma->step_compute_ms, ct->step_compute_ms);
  int64_t rows = 0;
  for (int r = 0; r < 4; r++) rows += ma->ranks[r].rows;
  cr_assert_eq(rows, 1048576);
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

static int64_t load_max(const int64_t *w, int n, int ranks, const int32_t *owner) {
  int64_t load[8] = {0}, best = 0;
  for (int i = 0; i < n; i++) load[owner[i]] += w[i];
  for (int r = 0; r < ranks; r++) best = load[r] > best ? load[r] : best;
  return best;
}

/* The least maximum load over every assignment (ranks^n of them). */
static int64_t brute_force(const int64_t *w, int n, int ranks) {
  int32_t owner[12];
  int64_t best = INT64_MAX, total = 1;
  for (int i = 0; i < n; i++) total *= ranks;
  for (int64_t code = 0; code < total; code++) {
    int64_t c = code;
    for (int i = 0; i < n; i++, c /= ranks) owner[i] = (int32_t)(c % ranks);
    int64_t v = load_max(w, n, ranks, owner);
    best = v < best ? v : best;
  }
  return best;
}

Test(cp_plan, exact_solver_matches_brute_force_and_never_loses_to_greedy) {
  fm_rng rng;
  fm_rng_seed(&rng, 11, 0);
  int better = 0;
  for (int t = 0; t < 300; t++) {
    int n = 2 + (int)fm_rng_below(&rng, 8), ranks = 2 + (int)fm_rng_below(&rng, 2);
    int64_t w[12];
    int32_t og[12], oe[12];
    for (int i = 0; i < n; i++) w[i] = (int64_t)fm_rng_below(&rng, t % 3 ? 1000 : 10);
    int64_t g = fm_cp_assign_greedy(w, n, ranks, og), e = fm_cp_assign_exact(w, n, ranks, oe, NULL);
    cr_assert_eq(g, load_max(w, n, ranks, og));
    cr_assert_eq(e, load_max(w, n, ranks, oe));
    cr_assert_leq(e, g);
    cr_assert_eq(e, brute_force(w, n, ranks), "n %d ranks %d: exact %lld", n, ranks, (long long)e);
    better += e < g;
    int count[4] = {0};
    for (int i = 0; i < n; i++) count[oe[i]]++;
    for (int r = 0; r < ranks && n >= ranks; r++) cr_assert_gt(count[r], 0, "rank %d left empty", r);
  }
  cr_assert_gt(better, 0, "greedy was optimal every time: the test would not see a wrong exact solver");
  /* the greedy answer on a known case: 3, 3, 2, 2, 2 on two ranks is 7 (3+2+2 | 3+2); the best is 6 */
  int64_t w[5] = {3, 3, 2, 2, 2};
  int32_t o[5];
  cr_assert_eq(fm_cp_assign_greedy(w, 5, 2, o), 7);
  cr_assert_eq(fm_cp_assign_exact(w, 5, 2, o, NULL), 6);
  int64_t big[FM_CP_EXACT_MAX_CHUNKS + 1] = {0};
  int32_t ob[FM_CP_EXACT_MAX_CHUNKS + 1];
  fm_err err;
  cr_assert_eq(fm_cp_assign_exact(big, FM_CP_EXACT_MAX_CHUNKS + 1, 2, ob, &err), -1);
  cr_assert(strstr(err.msg, "at most 24 chunks"), "%s", err.msg);
}

Test(cp_plan, exact_plan_is_at_least_as_balanced) {
  fm_colmask *m = family("causal_document", 32768, NULL);
  fm_cp_options o = {.ranks = 3, .chunk = 2048, .kernel = FM_KERNEL_SM90,
                     .shardings = 1u << FM_CP_MASK_AWARE};
  fm_cp_plan *g = NULL, *e = NULL;
  fm_err err;
  cr_assert_eq(fm_cp_plan_create(m, &o, &g, &err), FM_OK, "%s", err.msg);
  o.exact = 1;
  cr_assert_eq(fm_cp_plan_create(m, &o, &e, &err), FM_OK, "%s", err.msg);
  const fm_cp_sharding_plan *sg = sharding(g, FM_CP_MASK_AWARE), *se = sharding(e, FM_CP_MASK_AWARE);
  cr_assert_eq(se->exact_solver, 1);
  cr_assert_leq(se->imbalance_work, sg->imbalance_work);
  fm_cp_plan_destroy(g);
  fm_cp_plan_destroy(e);
  o.chunk = 1024; /* 32 chunks: refused */
  cr_assert_eq(fm_cp_plan_create(m, &o, &e, &err), FM_EUNSUPPORTED);
  cr_assert(strstr(err.msg, "--exact solves at most 24 chunks"), "%s", err.msg);
  fm_colmask_destroy(m);
}

Test(cp_plan, best_is_the_least_predicted_step_or_the_best_balance) {
  /* with times: the sharding whose picked exchange has the least step (every planned one
   * fits here); without: the least imbalance of visited tiles. Causal at 4 ranks: not
   * contiguous, whose last rank holds 7/16 of the work */
  const char *fams[3] = {"causal", "causal_document", "sliding_window"};
  for (int f = 0; f < 3; f++)
    for (int t = 0; t < 2; t++) {
      fm_colmask *m = family(fams[f], 65536, NULL);
      fm_cp_plan *p = plan_of(m, 4, 0, t);
      fm_cp_sharding b = fm_cp_plan_best(p);
      const fm_cp_sharding_plan *bp = sharding(p, b);
      for (int s = 0; s < FM_CP_NSHARDINGS; s++) {
        const fm_cp_sharding_plan *sp = sharding(p, (fm_cp_sharding)s);
        cr_assert(sp->fits[sp->exchange]);
        if (t) cr_assert_leq(bp->step_ms, sp->step_ms, "%s: best %s", fams[f], fm_cp_sharding_name(b));
        else cr_assert_leq(bp->imbalance_work, sp->imbalance_work, "%s: best %s", fams[f], fm_cp_sharding_name(b));
      }
      if (f == 0) cr_assert_neq(b, FM_CP_CONTIGUOUS);
      fm_cp_plan_destroy(p);
      fm_colmask_destroy(m);
    }
  /* one sharding planned: that one */
  fm_colmask *m = family("causal", 65536, NULL);
  fm_cp_plan *p = plan_of(m, 4, 1u << FM_CP_CONTIGUOUS, 1);
  cr_assert_eq(fm_cp_plan_best(p), FM_CP_CONTIGUOUS);
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

Test(cp_plan, all_shardings_leave_out_one_that_cannot_cut_the_rows) {
  /* S = 4096, 4 ranks: two mask-aware chunks of 2048 cannot feed four ranks. Asked for all,
   * the plan holds contiguous and zigzag and says why mask-aware is not there; asked for by
   * name, mask-aware fails the plan; none able (S = 256): the first one's reason */
  fm_colmask *m = family("causal", 4096, NULL);
  fm_cp_plan *p = plan_of(m, 4, 0, 1);
  cr_assert_not_null(fm_cp_plan_sharding(p, FM_CP_CONTIGUOUS));
  cr_assert_not_null(fm_cp_plan_sharding(p, FM_CP_ZIGZAG));
  cr_assert_null(fm_cp_plan_sharding(p, FM_CP_MASK_AWARE));
  cr_assert_null(fm_cp_plan_skipped(p, FM_CP_CONTIGUOUS));
  cr_assert(strstr(fm_cp_plan_skipped(p, FM_CP_MASK_AWARE), "mask-aware needs a chunk per rank"), "%s",
            fm_cp_plan_skipped(p, FM_CP_MASK_AWARE));
  cr_assert_neq(fm_cp_plan_best(p), FM_CP_MASK_AWARE);
  fm_cp_plan_destroy(p);
  fm_cp_options o = {.ranks = 4, .shardings = 1u << FM_CP_MASK_AWARE, .kernel = FM_KERNEL_SM90};
  fm_err err;
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "mask-aware needs a chunk per rank"), "%s", err.msg);
  fm_colmask_destroy(m);
  m = family("causal", 256, NULL);
  o.shardings = 0;
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "contiguous needs 4 blocks"), "%s", err.msg);
  cr_assert_null(p);
  fm_colmask_destroy(m);
}

Test(cp_plan, bad_options_are_refused) {
  fm_colmask *m = family("causal", 4096, NULL);
  fm_cp_plan *p = NULL;
  fm_err err;
  fm_cp_options o = {.ranks = 4, .chunk = 1000, .kernel = FM_KERNEL_SM90};
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "multiple of 128"), "%s", err.msg);
  o = (fm_cp_options){.ranks = 17, .kernel = FM_KERNEL_SM90, .shardings = 1u << FM_CP_ZIGZAG};
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "zigzag needs 34 blocks"), "%s", err.msg);
  o = (fm_cp_options){.ranks = 3, .kernel = FM_KERNEL_SM90, .shardings = 1u << FM_CP_MASK_AWARE};
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_EINVAL, "two chunks of 2048 for three ranks");
  cr_assert_null(p);
  fm_colmask_destroy(m);
  unsigned bits;
  cr_assert_eq(fm_cp_shardings_parse("all", &bits, NULL), FM_OK);
  cr_assert_eq(bits, 7u);
  cr_assert_eq(fm_cp_shardings_parse("zigzag", &bits, NULL), FM_OK);
  cr_assert_eq(bits, 1u << FM_CP_ZIGZAG);
  cr_assert_eq(fm_cp_shardings_parse("diagonal", &bits, &err), FM_EINVAL);
  cr_assert_str_eq(err.msg, "unknown sharding 'diagonal' (expected contiguous, zigzag, mask-aware, or all)");
}

/* ---- the command --------------------------------------------------------------------------- */

Test(cp_plan_cli, json_parses_and_equals_the_table) {
  const char *args = "cp-plan --family causal_document --seqlen 131072 --ranks 3 --gpu h200-sm90";
  fmt_result text, json;
  char a[512];
  fmt_run(&text, args);
  cr_assert_eq(text.status, 0, "%s", text.err);
  snprintf(a, sizeof a, "%s --json", args);
  fmt_run(&json, a);
  cr_assert_eq(json.status, 0, "%s", json.err);
  char path[512], txt[512], cmd[4096];
  snprintf(path, sizeof path, "%s/cp_plan.json", FM_TEST_TMP_DIR);
  snprintf(txt, sizeof txt, "%s/cp_plan.txt", FM_TEST_TMP_DIR);
  FILE *f = fopen(path, "w");
  fputs(json.out, f);
  fclose(f);
  f = fopen(txt, "w");
  fputs(text.out, f);
  fclose(f);
  /* every rank row of the table: rank rows segs 6 tile counts, fwd ms, bwd ms, compute ms, MiB, from */
  snprintf(cmd, sizeof cmd,
           "python3 - '%s' '%s' <<'PY'\n"
           "import json, sys\n"
           "d = json.load(open(sys.argv[1]))\n"
           "assert d['format'] == 'fmsim-cp-plan' and d['ranks'] == 3, d['format']\n"
           "rows, blocks = [], []\n"
           "for line in open(sys.argv[2]):\n"
           "    w = line.split()\n"
           "    if w and w[0] in ('contiguous,', 'zigzag,', 'mask-aware,'): blocks.append(w[0][:-1])\n"
           "    if len(w) == 14 and w[0].isdigit(): rows.append(w)\n"
           "assert blocks == [s['name'] for s in d['shardings']], blocks\n"
           "assert len(rows) == 9, len(rows)\n"
           "k = 0\n"
           "for s in d['shardings']:\n"
           "    for r in s['ranks']:\n"
           "        w = rows[k]; k += 1\n"
           "        t = r['tiles']\n"
           "        want = [r['rank'], r['rows'], r['segments'], t['fwd']['masked'], t['fwd']['partial'],\n"
           "                t['fwd']['unmasked'], t['bwd']['masked'], t['bwd']['partial'], t['bwd']['unmasked']]\n"
           "        assert [int(x) for x in w[:9]] == want, (w, want)\n"
           "        for i, key in ((9, 'fwd_ms'), (10, 'bwd_ms'), (11, 'compute_ms')):\n"
           "            assert abs(float(w[i]) - r[key]) <= 0.0005, (w[i], r[key])\n"
           "        assert abs(float(w[12]) - r['kv_recv_bytes'] / 2**20) <= 0.05, (w[12], r['kv_recv_bytes'])\n"
           "        assert int(w[13]) == r['kv_sources']\n"
           "best = min(d['shardings'], key=lambda s: s['step_ms'])\n"
           "assert d['best'] == {'sharding': best['name'], 'exchange': best['exchange'], 'step_ms': best['step_ms']}, d['best']\n"
           "w = next(l for l in open(sys.argv[2]) if l.startswith('best ')).split()\n"
           "assert w[1:4] == [best['name'] + ',', best['exchange'] + ':', 'step'], w\n"
           "assert abs(float(w[4]) - best['step_ms']) <= 0.0005, (w[4], best['step_ms'])\n"
           "print('ok')\n"
           "PY",
           path, txt);
  FILE *py = popen(cmd, "r");
  char out[256] = "";
  size_t n = fread(out, 1, sizeof out - 1, py);
  out[n] = 0;
  int st = pclose(py);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "ok"), "the table and the JSON differ: %s", out);
}

Test(cp_plan_cli, help_and_one_line_errors) {
  fmt_result r;
  fmt_run(&r, "cp-plan --help");
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "--sharding NAME") && strstr(r.out, "--exact"), "%s", r.out);
  fmt_run(&r, "--help");
  cr_assert(strstr(r.out, "  cp-plan "), "fmsim --help lists cp-plan: %s", r.out);
  fmt_run(&r, "cp-plan --family causal --seqlen 4096");
  cr_assert_eq(r.status, 2);
  cr_assert_eq(r.err_lines, 1, "%s", r.err);
  cr_assert(strstr(r.err, "--ranks P is required"), "%s", r.err);
  fmt_run(&r, "cp-plan --family causal --seqlen 4096 --ranks 2 --sharding diagonal");
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "expected contiguous, zigzag, mask-aware, or all"), "%s", r.err);
  fmt_run(&r, "cp-plan --family causal_document --seqlen 65536 --ranks 2 --exact");
  cr_assert_eq(r.status, 2);
  cr_assert_eq(r.err_lines, 1, "%s", r.err);
  cr_assert(strstr(r.err, "--exact solves at most 24 chunks"), "%s", r.err);
  fmt_run(&r, "cp-plan --family causal_document --seqlen 65536 --ranks 2 --exact --chunk 4096 --json");
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"solver\": \"exact\""), "%s", r.out);
}
