/* Tests of the analytic cost model (fm_cost) against brute-force counts on
 * small masks: every tile's class recomputed from the dense expansion (for
 * masks whose min/max and exact classes agree) or taken from fm_classify, and
 * every byte and FLOP summed tile by tile, element by element, for the
 * forward and for the backward at its own tile; the paper's FLOP convention
 * and the serializers of timings and traffic. */
#include <criterion/criterion.h>
#include <math.h>

#include "fm_cost.h"
#include "fm_families.h"
#include "fm_kernel_traits.h"
#include "fm_run_trace.h"
#include "fm_test_util.h"
#include "fm_tiles.h"

typedef struct brute {
  int64_t visited, elementwise, tiles[3];
  double exec_elems;
  int64_t kv, vectors, dense, bounds, unique_cols;
  int64_t rows_visited; /* rows of the visited tiles: the backward's Q, dO, LSE, D and dQ */
  int64_t cols_all;     /* columns of every key tile: the backward's dK, dV */
} brute;

/* Sums the model tile by tile from the classes, for every (b, h) pair (the
 * backward's terms follow from rows_visited, unique_cols and cols_all). */
static brute brute_force(const fm_colmask *m, const fm_cost_shape *s, const uint8_t *cls) {
  brute r;
  memset(&r, 0, sizeof r);
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  int32_t tr = (sq + s->br - 1) / s->br, tc = (sk + s->bc - 1) / s->bc;
  for (int32_t b = 0; b < s->batch; b++)
    for (int32_t h = 0; h < s->heads; h++) {
      int32_t set = fm_colmask_set_index(m, b, h);
      for (int32_t ct = 0; ct < tc; ct++) {
        int any = 0;
        int32_t cols = 0;
        for (int32_t j = ct * s->bc; j < sk && j < (ct + 1) * s->bc; j++) cols++;
        for (int32_t rt = 0; rt < tr; rt++) {
          int32_t rows = 0;
          for (int32_t i = rt * s->br; i < sq && i < (rt + 1) * s->br; i++) rows++;
          int c = cls[((int64_t)set * tr + rt) * tc + ct];
          r.tiles[c]++;
          int visit = s->variant != FM_VARIANT_SKIP || c != FM_TILE_MASKED;
          int elem = s->variant == FM_VARIANT_DENSE    ? 1
                     : s->variant == FM_VARIANT_NOSKIP ? c != FM_TILE_UNMASKED
                                                    : c == FM_TILE_PARTIAL;
          if (visit) {
            any = 1;
            r.visited++;
            r.exec_elems += (double)rows * cols;
            r.kv += 2LL * cols * s->head_dim * s->elem_bytes;
            r.rows_visited += rows;
          }
          if (elem) {
            r.elementwise++;
            if (s->variant == FM_VARIANT_DENSE) r.dense += (int64_t)rows * cols;
            else r.vectors += 16LL * cols;
          }
          if (s->variant != FM_VARIANT_DENSE) r.bounds += 32;
        }
        if (any) r.unique_cols += cols;
        r.cols_all += cols;
      }
    }
  return r;
}

/* The classes of the min/max rule by brute force from the dense mask, for masks
 * where min/max and exact agree (causal, sliding window, documents). */
static uint8_t *exact_classes(const fm_colmask *m, int32_t br, int32_t bc) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), ns = fm_colmask_nsets(m);
  int32_t tr = (sq + br - 1) / br, tc = (sk + bc - 1) / bc;
  uint8_t *out = malloc((size_t)ns * tr * tc);
  for (int32_t s = 0; s < ns; s++) {
    uint8_t *d = fmt_dense(m, s);
    for (int32_t rt = 0; rt < tr; rt++)
      for (int32_t ct = 0; ct < tc; ct++) {
        int64_t n = 0, k = 0;
        for (int32_t i = rt * br; i < sq && i < (rt + 1) * br; i++)
          for (int32_t j = ct * bc; j < sk && j < (ct + 1) * bc; j++) {
            n++;
            k += d[(size_t)i * sk + j];
          }
        out[((int64_t)s * tr + rt) * tc + ct] =
            k == n ? FM_TILE_MASKED : k == 0 ? FM_TILE_UNMASKED : FM_TILE_PARTIAL;
      }
    free(d);
  }
  return out;
}

/* The model of m at s with its per-tile array summed over every (b, h) pair. */
static fm_cost model(const fm_colmask *m, const fm_cost_shape *s, const uint8_t *cls, int64_t *tile_sum) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), ns = fm_colmask_nsets(m);
  int32_t tr = (sq + s->br - 1) / s->br, tc = (sk + s->bc - 1) / s->bc;
  int64_t *tb = malloc(sizeof(int64_t) * (size_t)ns * tr * tc);
  fm_cost c;
  fm_err err;
  cr_assert_eq(fm_cost_compute(m, s, cls, tb, &c, &err), FM_OK, "%s", err.msg);
  *tile_sum = 0;
  for (int32_t bb = 0; bb < s->batch; bb++)
    for (int32_t h = 0; h < s->heads; h++) {
      int32_t set = fm_colmask_set_index(m, bb, h);
      for (int64_t i = 0; i < (int64_t)tr * tc; i++) *tile_sum += tb[(int64_t)set * tr * tc + i];
    }
  free(tb);
  return c;
}

static void check_against_brute(const fm_colmask *m, fm_cost_shape s, const uint8_t *cls) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), ns = fm_colmask_nsets(m);
  int32_t tr = (sq + s.br - 1) / s.br, tc = (sk + s.bc - 1) / s.bc;
  int64_t sum;
  fm_cost c = model(m, &s, cls, &sum);
  brute b = brute_force(m, &s, cls);
  int64_t pairs = s.batch * s.heads, e = s.elem_bytes, d = s.head_dim;
  cr_assert_eq(c.tr, tr);
  cr_assert_eq(c.tc, tc);
  cr_assert_eq(c.tiles_total, pairs * tr * tc);
  for (int k = 0; k < 3; k++) cr_assert_eq(c.tiles[k], b.tiles[k], "class %d", k);
  cr_assert_eq(c.tiles_visited, b.visited);
  cr_assert_eq(c.tiles_elementwise, b.elementwise);
  cr_assert_eq(c.bytes_kv, b.kv);
  cr_assert_eq(c.bytes_vectors, b.vectors);
  cr_assert_eq(c.bytes_dense_mask, b.dense);
  cr_assert_eq(c.bytes_bounds, b.bounds);
  cr_assert_eq(c.bytes_q, pairs * sq * d * e);
  cr_assert_eq(c.bytes_o, pairs * sq * d * e);
  cr_assert_eq(c.bytes_lse, pairs * sq * 4);
  int dense = s.variant == FM_VARIANT_DENSE;
  cr_assert_eq(c.bytes_prep_read, dense ? 0 : (int64_t)ns * 16 * sk);
  cr_assert_eq(c.bytes_prep_write, dense ? 0 : (int64_t)ns * 32 * tc);
  cr_assert_eq(c.bytes_read, c.bytes_q + b.kv + b.vectors + b.dense + b.bounds + c.bytes_prep_read);
  cr_assert_eq(c.bytes_write, c.bytes_o + c.bytes_lse + c.bytes_prep_write);
  cr_assert_eq(c.unique_read, c.bytes_q + b.unique_cols * 2 * d * e +
                                  (dense ? (int64_t)ns * sq * sk : c.bytes_prep_read + c.bytes_prep_write));
  double rho = (double)b.tiles[FM_TILE_MASKED] / (double)(pairs * tr * tc);
  cr_assert_float_eq(c.rho, rho, 1e-12);
  double full = 4.0 * pairs * sq * (double)sk * d;
  cr_assert_float_eq(c.flops_full, full, full * 1e-12);
  cr_assert_float_eq(c.flops_paper, full * (1 - rho), full * 1e-12);
  cr_assert_float_eq(c.flops_executed, 4.0 * d * b.exec_elems, full * 1e-12);
  /* the per-tile array adds up to the tile part of the reads */
  cr_assert_eq(sum, b.kv + b.vectors + b.dense + b.bounds);
}

/* ---- the backward ---------------------------------------------------------------------- */

/* The backward at the same tile: one CTA per key tile visits the tiles the rule leaves, each
   visited tile reads Q, dO, LSE and D of its rows and adds its rows of the fp32 dQ; a key tile
   reads K, V when it visits anything and always writes dK, dV. */
static void check_bwd_against_brute(const fm_colmask *m, fm_cost_shape s, const uint8_t *cls) {
  s.pass = FM_PASS_BWD;
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), ns = fm_colmask_nsets(m);
  int32_t tr = (sq + s.br - 1) / s.br, tc = (sk + s.bc - 1) / s.bc;
  int64_t sum;
  fm_cost c = model(m, &s, cls, &sum);
  brute b = brute_force(m, &s, cls);
  int64_t pairs = s.batch * s.heads, e = s.elem_bytes, d = s.head_dim, rows_d = pairs * sq * d;
  int64_t rv = b.rows_visited, kv = b.unique_cols * 2 * d * e, dkdv = b.cols_all * 2 * d * e;
  cr_assert_eq(c.pass, FM_PASS_BWD);
  cr_assert_eq(c.tiles_total, pairs * tr * tc);
  for (int k = 0; k < 3; k++) cr_assert_eq(c.tiles[k], b.tiles[k], "class %d", k);
  cr_assert_eq(c.tiles_visited, b.visited);
  cr_assert_eq(c.tiles_elementwise, b.elementwise);
  cr_assert_eq(c.bytes_q, rv * d * e);
  cr_assert_eq(c.bytes_do, rv * d * e);
  cr_assert_eq(c.bytes_lse, rv * 4);
  cr_assert_eq(c.bytes_delta, rv * 4);
  cr_assert_eq(c.bytes_dq_accum, rv * d * 4);
  cr_assert_eq(c.bytes_kv, kv);
  cr_assert_eq(c.bytes_dkdv, dkdv);
  cr_assert_eq(c.bytes_vectors, b.vectors);
  cr_assert_eq(c.bytes_dense_mask, b.dense);
  cr_assert_eq(c.bytes_bounds, b.bounds);
  cr_assert_eq(c.bytes_o, 0, "the backward writes no O");
  cr_assert_eq(c.bytes_rowsum_read, 2 * rows_d * e + pairs * sq * 4, "O, dO and LSE once");
  cr_assert_eq(c.bytes_rowsum_write, 2 * pairs * sq * 4 + rows_d * 4, "D, LSE2, and the fp32 dQ zeroed");
  cr_assert_eq(c.bytes_dq_convert, rows_d * 4);
  cr_assert_eq(c.bytes_dq, rows_d * e);
  int dense = s.variant == FM_VARIANT_DENSE;
  cr_assert_eq(c.bytes_prep_read, dense ? 0 : (int64_t)ns * 16 * sk);
  cr_assert_eq(c.bytes_prep_write, dense ? 0 : (int64_t)ns * 32 * tc);
  cr_assert_eq(c.bytes_read, rv * (2 * d * e + 8 + 4 * d) + kv + b.vectors + b.dense + b.bounds +
                                 c.bytes_prep_read + 2 * rows_d * e + pairs * sq * 4 + rows_d * 4);
  cr_assert_eq(c.bytes_write, rv * d * 4 + dkdv + 2 * pairs * sq * 4 + rows_d * 4 + rows_d * e +
                                  c.bytes_prep_write);
  int64_t mask = dense ? (int64_t)ns * sq * sk : c.bytes_prep_read + c.bytes_prep_write;
  cr_assert_eq(c.unique_read, 3 * rows_d * e + pairs * sq * 4 + kv + mask, "Q, dO, O, LSE, K/V, mask");
  cr_assert_eq(c.unique_write, rows_d * e + dkdv + c.bytes_prep_write, "dQ, dK, dV");
  double rho = (double)b.tiles[FM_TILE_MASKED] / (double)(pairs * tr * tc);
  double full = 2.5 * 4.0 * pairs * sq * (double)sk * d;
  cr_assert_float_eq(c.rho, rho, 1e-12);
  cr_assert_float_eq(c.flops_full, full, full * 1e-12);
  cr_assert_float_eq(c.flops_paper, full * (1 - rho), full * 1e-12);
  cr_assert_float_eq(c.flops_executed, 10.0 * d * b.exec_elems, full * 1e-12);
  cr_assert_eq(sum, rv * (2 * d * e + 8 + 8 * d) + b.vectors + b.dense + b.bounds,
               "the per-tile array adds up to the per-tile requests");
}

static fm_colmask *family(const char *name, int64_t S, int64_t B, int64_t H, const char *param) {
  const char *params[1] = {param};
  fm_family_request req = {.family = name, .seqlen = S, .batch = B, .heads = H, .seed = 7,
                           .sample = -1, .nparams = param ? 1 : 0, .params = params};
  fm_colmask *m = NULL;
  fm_err err;
  cr_assert_eq(fm_family_build(&req, &m, NULL, &err), FM_OK, "%s", err.msg);
  return m;
}

Test(cost, full_mask_edges_and_every_variant) {
  /* S = 100 with 32 x 16 tiles: the last row tile has 4 rows, the last key tile 4 columns */
  fm_colmask *m = family("full", 100, 1, 1, NULL);
  for (int v = 0; v < 3; v++) {
    fm_cost_shape s = {.batch = 2, .heads = 3, .head_dim = 64, .br = 32, .bc = 16, .elem_bytes = 2,
                       .variant = (fm_variant)v};
    uint8_t *cls = exact_classes(m, 32, 16);
    check_against_brute(m, s, cls);
    check_bwd_against_brute(m, s, cls);
    fm_cost c;
    cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, NULL), FM_OK);
    cr_assert_eq(c.tiles_visited, 6 * 4 * 7);
    cr_assert_float_eq(c.flops_executed, c.flops_full, 1);
    cr_assert_eq(c.bytes_kv, 6LL * 4 * 2 * 100 * 64 * 2); /* each row tile reads all K/V */
    s.pass = FM_PASS_BWD;
    cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, NULL), FM_OK);
    cr_assert_eq(c.tiles_visited, 6 * 4 * 7);
    cr_assert_float_eq(c.flops_executed, c.flops_full, 1);
    cr_assert_eq(c.bytes_kv, 6LL * 2 * 100 * 64 * 2, "backward: each key tile reads its K, V once");
    cr_assert_eq(c.bytes_q, 6LL * 7 * 100 * 64 * 2, "backward: each key tile reads every Q row");
    cr_assert_eq(c.bytes_vectors, 0);
    free(cls);
  }
  fm_colmask_destroy(m);
}

Test(cost, causal_and_documents_match_the_dense_brute_force) {
  const char *names[] = {"causal", "sliding_window", "causal_document", "document"};
  for (int f = 0; f < 4; f++)
    for (int v = 0; v < 3; v++) {
      fm_colmask *m = family(names[f], 203, 1, 1, NULL);
      uint8_t *cls = exact_classes(m, 16, 32);
      /* these masks' min/max classes are exact: the brute-force classes are the kernel's */
      fm_tile_counts counts;
      int32_t n = ((203 + 15) / 16) * ((203 + 31) / 32);
      uint8_t *mm = malloc((size_t)n);
      cr_assert_eq(fm_classify(m, 16, 32, &counts, mm, NULL, NULL), FM_OK);
      cr_assert_eq(memcmp(mm, cls, (size_t)n), 0, "%s", names[f]);
      fm_cost_shape s = {.batch = 3, .heads = 2, .head_dim = 128, .br = 16, .bc = 32,
                         .elem_bytes = 2, .variant = (fm_variant)v};
      check_against_brute(m, s, cls);
      check_bwd_against_brute(m, s, cls); /* the same classes as a backward's tile */
      /* classes computed internally give the same */
      fm_cost a, b;
      cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &a, NULL), FM_OK);
      cr_assert_eq(fm_cost_compute(m, &s, cls, NULL, &b, NULL), FM_OK);
      cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
      free(mm);
      free(cls);
      fm_colmask_destroy(m);
    }
}

Test(cost, per_head_and_random_masks) {
  fm_rng r;
  fm_rng_seed(&r, 42, 1);
  for (int t = 0; t < 30; t++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 90), sk = 1 + (int32_t)fm_rng_below(&r, 90);
    int32_t nb = 1 + (int32_t)fm_rng_below(&r, 2), nh = 1 + (int32_t)fm_rng_below(&r, 3);
    int causal = (int)fm_rng_below(&r, 2);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, nb, nh, causal);
    cr_assert_not_null(m);
    int32_t br = 1 + (int32_t)fm_rng_below(&r, 40), bc = 1 + (int32_t)fm_rng_below(&r, 40);
    int32_t tr = (sq + br - 1) / br, tc = (sk + bc - 1) / bc;
    uint8_t *cls = malloc((size_t)nb * nh * tr * tc);
    fm_tile_counts counts;
    cr_assert_eq(fm_classify(m, br, bc, &counts, cls, NULL, NULL), FM_OK);
    fm_cost_shape s = {.batch = nb == 1 ? 3 : nb, .heads = nh == 1 ? 2 : nh, .head_dim = 64,
                       .br = br, .bc = bc, .elem_bytes = 2,
                       .variant = (fm_variant)fm_rng_below(&r, 3)};
    check_against_brute(m, s, cls);
    check_bwd_against_brute(m, s, cls);
    free(cls);
    fm_colmask_destroy(m);
  }
}

Test(cost, paper_count_of_random_eviction) {
  fm_colmask *m = family("random_eviction", 512, 2, 4, NULL);
  fm_cost_shape s = {.batch = 2, .heads = 4, .head_dim = 128, .br = 64, .bc = 64, .elem_bytes = 2,
                     .variant = FM_VARIANT_SKIP};
  fm_cost c;
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, NULL), FM_OK);
  fm_tile_counts counts;
  cr_assert_eq(fm_classify(m, 64, 64, &counts, NULL, NULL, NULL), FM_OK);
  cr_assert_float_eq(c.rho, counts.sparsity, 1e-12);
  cr_assert_float_eq(c.flops_paper, 4.0 * 8 * 512 * 512 * 128 * (1 - counts.sparsity), 1);
  cr_assert_eq(c.flops_paper, fm_cost_paper_flops(2, 4, 512, 512, 128, c.rho, FM_PASS_FWD),
               "the cost model's count is the one function's");
  cr_assert_float_eq(fm_cost_tflops(1e12, 1000.0), 1.0, 1e-12);
  cr_assert(isnan(fm_cost_tflops(1e12, 0)));
  fm_colmask_destroy(m);
}

Test(cost, tile_bytes_by_class) {
  fm_cost_shape s = {.batch = 1, .heads = 1, .head_dim = 128, .br = 128, .bc = 64, .elem_bytes = 2,
                     .variant = FM_VARIANT_SKIP};
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_MASKED, 128, 64), 32);
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_UNMASKED, 128, 64), 32 + 2 * 64 * 128 * 2);
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_PARTIAL, 128, 64), 32 + 2 * 64 * 128 * 2 + 16 * 64);
  s.variant = FM_VARIANT_NOSKIP;
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_MASKED, 128, 64), 32 + 2 * 64 * 128 * 2 + 16 * 64);
  s.variant = FM_VARIANT_DENSE;
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_UNMASKED, 100, 10), 2 * 10 * 128 * 2 + 100 * 10);
}

Test(cost, bad_inputs) {
  fm_colmask *m = family("causal", 64, 1, 1, NULL);
  fm_cost c;
  fm_err err;
  fm_cost_shape s = {.batch = 0, .heads = 1, .head_dim = 64, .br = 16, .bc = 16, .elem_bytes = 2,
                     .variant = FM_VARIANT_SKIP};
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "batch"));
  s.batch = 1;
  s.br = 0;
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, &err), FM_EINVAL);
  s.br = 16;
  s.variant = (fm_variant)7;
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, &err), FM_EINVAL);
  fm_colmask_destroy(m);
  m = family("random_eviction", 64, 2, 2, NULL); /* 2 x 2 sets */
  fm_cost_shape t = {.batch = 3, .heads = 2, .head_dim = 64, .br = 16, .bc = 16, .elem_bytes = 2,
                     .variant = FM_VARIANT_SKIP};
  cr_assert_eq(fm_cost_compute(m, &t, NULL, NULL, &c, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "sets"), "%s", err.msg);
  fm_colmask_destroy(m);
  fm_variant v;
  cr_assert_eq(fm_variant_parse("noskip", &v, &err), FM_OK);
  cr_assert_eq(v, FM_VARIANT_NOSKIP);
  cr_assert_eq(fm_variant_parse("fast", &v, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "skip, noskip or dense"));
  cr_assert_str_eq(fm_variant_name(FM_VARIANT_DENSE), "dense");
}

Test(cost_bwd, at_the_sm90_backward_tile) {
  /* causal S = 1024 at 64 x 128 (the kernel's backward tile at D = 128): 16 x 8 tiles, a key
     tile j visits the row tiles from 2j on, so rho = (sum_j 2j) / 128 = 56 / 128 */
  fm_colmask *m = family("causal", 1024, 1, 1, NULL);
  fm_cost_shape s = {.batch = 2, .heads = 4, .head_dim = 128, .br = FM_SM90_BWD_BR_HD128,
                     .bc = FM_SM90_BWD_BC_HD128, .elem_bytes = 2, .variant = FM_VARIANT_SKIP,
                     .pass = FM_PASS_BWD};
  fm_cost c, f;
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, NULL), FM_OK);
  cr_assert_eq(c.tr, 16);
  cr_assert_eq(c.tc, 8);
  cr_assert_float_eq(c.rho, 56.0 / 128.0, 1e-12);
  cr_assert_eq(c.flops_paper, fm_cost_paper_flops(2, 4, 1024, 1024, 128, c.rho, FM_PASS_BWD),
               "the paper's count is the one function's, 2.5 times the forward's");
  s.pass = FM_PASS_FWD;
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &f, NULL), FM_OK);
  cr_assert_float_eq(c.flops_paper, 2.5 * f.flops_paper, 1);
  cr_assert_float_eq(c.flops_executed, 2.5 * f.flops_executed, 1, "same tiles: same elements");
  /* the per-tile bytes of a visited tile: Q, dO, LSE, D, the fp32 dQ both ways, bounds */
  s.pass = FM_PASS_BWD;
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_UNMASKED, 64, 128), 32 + 64 * (2 * 128 * 2 + 8 + 8 * 128));
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_PARTIAL, 64, 128),
               32 + 16 * 128 + 64 * (2 * 128 * 2 + 8 + 8 * 128));
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_MASKED, 64, 128), 32, "skipped: its bounds only");
  s.variant = FM_VARIANT_NOSKIP;
  cr_assert_eq(fm_cost_tile_bytes(&s, FM_TILE_MASKED, 64, 128),
               32 + 16 * 128 + 64 * (2 * 128 * 2 + 8 + 8 * 128));
  fm_colmask_destroy(m);
}

Test(cost_bwd, a_key_tile_with_nothing_visible_reads_no_kv_but_writes_its_zeros) {
  /* bidirectional S = 64, key columns 32..63 masked for every row: with 16 x 32 tiles the
     second key tile is all skipped */
  fm_colmask *m = NULL;
  cr_assert_eq(fm_colmask_create(64, 64, 1, 1, 0, &m, NULL), FM_OK);
  for (int32_t j = 32; j < 64; j++) fm_colmask_vec(m, 0, FM_LTS)[j] = 0;
  fm_cost_shape s = {.batch = 1, .heads = 1, .head_dim = 8, .br = 16, .bc = 32, .elem_bytes = 2,
                     .variant = FM_VARIANT_SKIP, .pass = FM_PASS_BWD};
  fm_cost c;
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, NULL), FM_OK);
  cr_assert_float_eq(c.rho, 0.5, 1e-12);
  cr_assert_eq(c.bytes_kv, 2 * 32 * 8 * 2, "only the first key tile loads K, V");
  cr_assert_eq(c.bytes_dkdv, 2 * 64 * 8 * 2, "both write dK, dV");
  fm_colmask_destroy(m);
}

Test(cost_bwd, one_pass_at_a_time) {
  fm_colmask *m = family("causal", 64, 1, 1, NULL);
  fm_cost c;
  fm_err err;
  fm_cost_shape s = {.batch = 1, .heads = 1, .head_dim = 64, .br = 16, .bc = 16, .elem_bytes = 2,
                     .variant = FM_VARIANT_SKIP, .pass = FM_PASS_BOTH};
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "one pass"), "%s", err.msg);
  s.pass = (fm_pass)0; /* 0 is the forward */
  fm_cost a, b;
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &a, NULL), FM_OK);
  s.pass = FM_PASS_FWD;
  cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &b, NULL), FM_OK);
  cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
  cr_assert_eq(a.pass, FM_PASS_FWD);
  fm_colmask_destroy(m);
}

/* The traffic serializer names the backward's terms for a backward cost only. */
Test(cost_bwd, traffic_json_names_the_backward_terms) {
  fm_colmask *m = family("causal", 128, 1, 1, NULL);
  fm_cost_shape s = {.batch = 1, .heads = 2, .head_dim = 64, .br = 16, .bc = 32, .elem_bytes = 2,
                     .variant = FM_VARIANT_SKIP};
  for (int bwd = 0; bwd < 2; bwd++) {
    s.pass = bwd ? FM_PASS_BWD : FM_PASS_FWD;
    fm_cost c;
    cr_assert_eq(fm_cost_compute(m, &s, NULL, NULL, &c, NULL), FM_OK);
    fm_json j;
    fm_json_init(&j, 0);
    fm_json_object(&j, NULL);
    fm_traffic_json(&j, "traffic", &c, NULL);
    fm_json_end(&j);
    char want[96];
    snprintf(want, sizeof want, "\"dq_accum\": %lld,", (long long)c.bytes_dq_accum);
    cr_assert(!strstr(j.buf, "\"dq_accum\"") == !bwd, "%s", j.buf);
    if (bwd) cr_assert(strstr(j.buf, want) && strstr(j.buf, "\"dkdv\": "), "%s", j.buf);
    fm_json_free(&j);
  }
  fm_colmask_destroy(m);
}

/* The kernel registry (core/fm_kernels.h): names, auto selection, tiles. */
Test(kernels, registry) {
  fm_err err;
  fm_kernel_id id;
  cr_assert_eq(fm_kernel_parse("sm90", &id, &err), FM_OK);
  cr_assert_eq(id, FM_KERNEL_SM90);
  cr_assert_eq(fm_kernel_parse("auto", &id, &err), FM_OK);
  cr_assert_eq(id, FM_KERNEL_AUTO);
  cr_assert_eq(fm_kernel_parse("sm70", &id, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "sm80, sm90 or auto"), "%s", err.msg);
  for (int k = 0; k < FM_NKERNELS; k++) {
    const fm_kernel_desc *d = fm_kernel_get((fm_kernel_id)k);
    cr_assert_not_null(d);
    cr_assert_eq((int)d->id, k, "row %d is in its own slot", k);
    cr_assert(d->ntiles >= 1 && d->ntiles <= FM_KERNEL_MAX_TILES);
    for (int t = 0; t < d->ntiles; t++) {
      int32_t br = 0, bc = 0;
      cr_assert_eq(fm_kernel_tile_size(d->id, FM_PASS_FWD, d->tiles[t].head_dim, &br, &bc, &err), FM_OK);
      cr_assert(br > 0 && bc > 0 && br == d->tiles[t].br && bc == d->tiles[t].bc);
    }
  }
  cr_assert_null(fm_kernel_get(FM_NKERNELS));
  /* auto: Hopper gets sm90, Ampere and Blackwell get the portable kernel, Volta none */
  cr_assert_eq(fm_kernel_auto(9, 0, &id, &err), FM_OK);
  cr_assert_eq(id, FM_KERNEL_SM90);
  cr_assert_eq(fm_kernel_auto(8, 0, &id, &err), FM_OK);
  cr_assert_eq(id, FM_KERNEL_SM80);
  cr_assert_eq(fm_kernel_auto(10, 0, &id, &err), FM_OK);
  cr_assert_eq(id, FM_KERNEL_SM80);
  cr_assert_eq(fm_kernel_auto(7, 5, &id, &err), FM_EUNSUPPORTED);
  cr_assert_eq(fm_kernel_auto(-1, -1, &id, &err), FM_OK, "no device: the H200's kernel");
  cr_assert_eq(id, FM_KERNEL_SM90);
  int32_t br, bc;
  cr_assert_eq(fm_kernel_tile_size(FM_KERNEL_SM80, FM_PASS_FWD, 64, &br, &bc, &err), FM_OK);
  cr_assert(br == 128 && bc == 64);
  cr_assert_eq(fm_kernel_tile_size(FM_KERNEL_SM80, FM_PASS_FWD, 96, &br, &bc, &err), FM_EUNSUPPORTED);
  cr_assert(strstr(err.msg, "head dim 96"), "%s", err.msg);
  fm_pass p;
  cr_assert_eq(fm_pass_parse("both", &p, &err), FM_OK);
  cr_assert_eq(p, FM_PASS_BOTH);
  cr_assert_eq(fm_pass_parse("back", &p, &err), FM_EINVAL);
  cr_assert_str_eq(fm_pass_name(FM_PASS_BWD), "bwd");
}

/* The sm90 kernels' partial-tile mask methods (fm_mask_method): the four names
   and their values (the library's, fm_attn_problem.mask_method, and fmsim.torch's
   _MASK_METHODS), one message naming the choices for anything else. */
Test(kernels, mask_method_names) {
  static const struct {
    const char *name;
    fm_mask_method m;
    int value;
  } ok[] = {{"auto", FM_MASK_METHOD_AUTO, 0},
             {"slices", FM_MASK_METHOD_SLICES, 1},
             {"r2p", FM_MASK_METHOD_R2P, 2},
             {"words", FM_MASK_METHOD_WORDS, 3}};
  fm_err err;
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    fm_mask_method m = (fm_mask_method)-1;
    cr_assert_eq(fm_mask_method_parse(ok[i].name, &m, &err), FM_OK, "%s", ok[i].name);
    cr_assert_eq(m, ok[i].m, "%s", ok[i].name);
    cr_assert_eq((int)m, ok[i].value, "%s", ok[i].name);
    cr_assert_str_eq(fm_mask_method_name(m), ok[i].name);
  }
  static const char *const bad[] = {"R2P", "Slices", "", "r2p ", "bogus", "Words", "word"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fm_mask_method m = FM_MASK_METHOD_R2P;
    cr_assert_eq(fm_mask_method_parse(bad[i], &m, &err), FM_EINVAL, "'%s'", bad[i]);
    char want[128];
    snprintf(want, sizeof want, "unknown mask method '%s' (expected auto, slices, r2p or words)", bad[i]);
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(m, FM_MASK_METHOD_R2P, "left as it was");
  }
  cr_assert_eq(fm_mask_method_parse(NULL, &(fm_mask_method){0}, &err), FM_EINVAL);
  cr_assert_str_eq(fm_mask_method_name((fm_mask_method)4), "?");
  cr_assert_str_eq(fm_mask_method_name((fm_mask_method)-1), "?");
}

/* The paper's FLOP convention, written once (fm_cost_paper_flops). */
Test(cost, paper_flops_convention) {
  double fwd = fm_cost_paper_flops(3, 5, 1024, 2048, 64, 0.25, FM_PASS_FWD);
  cr_assert_float_eq(fwd, 4.0 * 3 * 5 * 1024 * 2048 * 64 * 0.75, 1e-3);
  cr_assert_float_eq(fm_cost_paper_flops(3, 5, 1024, 2048, 64, 0.25, FM_PASS_BWD), 2.5 * fwd, 1e-3);
  cr_assert_float_eq(fm_cost_paper_flops(3, 5, 1024, 2048, 64, 0.25, FM_PASS_BOTH), 3.5 * fwd, 1e-3);
  cr_assert_eq(fm_cost_paper_flops(1, 1, 8, 8, 64, 1.0, FM_PASS_FWD), 0.0, "all skipped");
  /* the paper's kernel-table shape at 128K: B = 1, H = 32, D = 128, no overflow */
  double big = fm_cost_paper_flops(1, 32, 131072, 131072, 128, 0.0, FM_PASS_FWD);
  cr_assert_float_eq(big, 4.0 * 32 * 131072.0 * 131072.0 * 128, 1.0);
  cr_assert_gt(big, 2.8e14);
}

/* The one serializer of fm_timing and fm_measured_bytes (fm_run_trace.h):
 * the keys it promises, null when not measured. */
Test(cost, timing_and_traffic_serializers) {
  fm_timing t;
  memset(&t, 0, sizeof t);
  fm_json j;
  fm_json_init(&j, 0);
  fm_json_object(&j, NULL);
  fm_timing_json(&j, "timing", &t);
  fm_timing_json(&j, "none", NULL);
  fm_measured_bytes_json(&j, "measured", NULL);
  fm_json_end(&j);
  cr_assert_str_eq(j.buf, "{\"timing\": null, \"none\": null, \"measured\": null}");
  fm_json_free(&j);

  snprintf(t.source, sizeof t.source, "cuda-events");
  t.reps = 5;
  t.median_ms = 1.5;
  t.nkernels = 1;
  snprintf(t.kernels[0].name, sizeof t.kernels[0].name, "fwd");
  t.kernels[0].grid[2] = 7;
  fm_measured_bytes mb;
  memset(&mb, 0, sizeof mb);
  snprintf(mb.source, sizeof mb.source, "cupti-range-profiler");
  mb.dram_read = 4096;
  mb.l2_read_sectors = 10;
  fm_cost c;
  memset(&c, 0, sizeof c);
  c.bytes_read = (int64_t)1 << 40; /* integers stay exact */
  c.unique_read = 2048;
  fm_json_init(&j, 0);
  fm_json_object(&j, NULL);
  fm_timing_json(&j, "timing", &t);
  fm_traffic_json(&j, "traffic", &c, &mb);
  fm_json_end(&j);
  const char *want[] = {
      "\"timing\": {\"source\": \"cuda-events\", \"note\": \"\", \"warmup\": 0, \"reps\": 5, "
      "\"l2_flushed\": false, \"median_ms\": 1.5,",
      "\"kernels\": [{\"name\": \"fwd\", \"median_ms\": 0, \"grid\": [0, 0, 7], "
      "\"block\": [0, 0, 0], \"registers\": 0, \"static_smem\": 0, \"dynamic_smem\": 0}]}",
      "\"traffic\": {\"model\": {\"source\": \"model\", \"read\": 1099511627776,",
      "\"unique_read\": 2048, \"unique_write\": 0}, "
      "\"measured\": {\"source\": \"cupti-range-profiler\", \"l2_flushed\": false, "
      "\"ranges\": 0, \"dram_read\": 4096,",
      "\"l2_read_bytes\": 320,",
      "\"ratios\": {\"dram_read_over_unique_read\": 2,",
      "\"measured_note\": \"\"}"};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
    cr_assert(strstr(j.buf, want[k]), "missing %s in %s", want[k], j.buf);
  fm_json_free(&j);
}
