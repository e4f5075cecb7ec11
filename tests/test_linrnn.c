/* Tests of the CPU side of the chunkwise linear RNN (core/fm_linrnn_cpu.h,
 * docs/LINRNN.md): document lengths, the packed documents' vectors, the
 * sub-chunk tile classes against brute force and against fmsim's own
 * classification, the counts of every variant on hand-worked cases, the
 * proposal's estimate, mask memory, the fp64 references against each other,
 * the trace, and the `fmsim linrnn` command. */
#include <criterion/criterion.h>
#include <math.h>

#include "../kernels/fm_linrnn.h" /* the kernel's variants, which core's must equal */
#include "fm_bf16.h"
#include "fm_families.h"
#include "fm_fileio.h"
#include "fm_limits.h"
#include "fm_linrnn_cpu.h"
#include "fm_npy.h"
#include "fm_test_util.h"
#include "fm_tiles.h"

_Static_assert(FM_LR_SKIP == (int)FM_LINRNN_SKIP && FM_LR_CAUSAL == (int)FM_LINRNN_CAUSAL &&
                   FM_LR_NOSKIP == (int)FM_LINRNN_NOSKIP && FM_LR_NVARIANTS == (int)FM_LINRNN_NVARIANTS,
               "core's variants are kernels/fm_linrnn.h's");

/* cu of explicit lengths (at most 64 documents). */
static int32_t make_cu(const int32_t *len, int32_t n, int32_t *cu) {
  cu[0] = 0;
  for (int32_t d = 0; d < n; d++) cu[d + 1] = cu[d] + len[d];
  return cu[n];
}

/* Random lengths in [1, maxlen] filling T (the last cut). */
static int32_t random_cu(fm_rng *r, int32_t T, int32_t maxlen, int32_t *cu, int32_t cap) {
  int32_t n = 0;
  cu[0] = 0;
  while (cu[n] < T && n < cap - 2) {
    int32_t l = 1 + (int32_t)fm_rng_below(r, (uint64_t)maxlen);
    cu[n + 1] = cu[n] + l < T ? cu[n] + l : T;
    n++;
  }
  cu[n] = T;
  return n;
}

static fm_colmask *doc_mask(const int32_t *cu, int32_t n) {
  fm_colmask *m = NULL;
  fm_err err;
  cr_assert_eq(fm_lr_docs_colmask(cu, n, &m, &err), FM_OK, "%s", err.msg);
  return m;
}

/* ---- documents ---------------------------------------------------------------- */

Test(linrnn, fixed_lengths_cut_the_last_document) {
  int32_t *cu = NULL, n = 0;
  cr_assert_eq(fm_lr_docs_fixed(100, 30, &cu, &n, NULL), FM_OK);
  int32_t want[] = {0, 30, 60, 90, 100};
  cr_assert_eq(n, 4);
  for (int d = 0; d <= 4; d++) cr_assert_eq(cu[d], want[d], "cu[%d] = %d", d, cu[d]);
  free(cu);
  cr_assert_eq(fm_lr_docs_fixed(100, 0, &cu, &n, NULL), FM_EINVAL);
  cr_assert_eq(fm_lr_docs_fixed(100, 101, &cu, &n, NULL), FM_EINVAL);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

Test(linrnn, lognormal_lengths_fill_T_exactly_with_the_minimum_and_a_right_skew) {
  int32_t *cu = NULL, *cu2 = NULL, n = 0, n2 = 0;
  fm_err err;
  cr_assert_eq(fm_lr_docs_lognormal(65536, 256, 1.0, 16, 7, &cu, &n, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(n, 256, "N = round(T / mean)");
  cr_assert_eq(cu[n], 65536);
  int32_t *len = malloc(sizeof *len * (size_t)n);
  for (int32_t d = 0; d < n; d++) {
    len[d] = cu[d + 1] - cu[d];
    cr_assert_geq(len[d], 16, "document %d of %d tokens", d, len[d]);
  }
  qsort(len, (size_t)n, sizeof *len, cmp_i32);
  /* log-normal weights with sigma 1: the 90th percentile well above twice the median */
  cr_assert_gt(len[n * 9 / 10], 2 * len[n / 2], "p90 %d, median %d", len[n * 9 / 10], len[n / 2]);
  cr_assert_eq(fm_lr_docs_lognormal(65536, 256, 1.0, 16, 7, &cu2, &n2, NULL), FM_OK);
  cr_assert(n2 == n && !memcmp(cu, cu2, sizeof *cu * (size_t)(n + 1)), "seeded: the same draw twice");
  free(cu2);
  cr_assert_eq(fm_lr_docs_lognormal(65536, 256, 1.0, 16, 8, &cu2, &n2, NULL), FM_OK);
  cr_assert(memcmp(cu, cu2, sizeof *cu * (size_t)(n + 1)), "another seed, another draw");
  free(cu2);
  /* mean 16 with minimum 16: every document is 16 tokens */
  cr_assert_eq(fm_lr_docs_lognormal(1000, 16, 1.0, 16, 1, &cu2, &n2, NULL), FM_OK);
  cr_assert_eq(cu2[n2], 1000);
  cr_assert_eq(n2, 62);
  free(cu2);
  cr_assert_eq(fm_lr_docs_lognormal(1000, 8, 1.0, 16, 1, &cu2, &n2, NULL), FM_EINVAL, "mean below the minimum");
  free(len);
  free(cu);
}

Test(linrnn, document_vectors_are_the_causal_document_family) {
  int32_t len[] = {4, 3, 3}, cu[4];
  make_cu(len, 3, cu);
  fm_colmask *m = doc_mask(cu, 3);
  int32_t want[] = {4, 4, 4, 4, 7, 7, 7, 10, 10, 10}; /* docs/FAMILIES.md, ten-token examples */
  for (int j = 0; j < 10; j++) cr_assert_eq(fm_colmask_cvec(m, 0, FM_LTS)[j], want[j]);
  const char *params[] = {"docs=4,3,3"};
  fm_family_request req = {.family = "causal_document", .seqlen = 10, .batch = 1, .heads = 1,
                           .sample = -1, .nparams = 1, .params = params};
  fm_colmask *f = NULL;
  cr_assert_eq(fm_family_build(&req, &f, NULL, NULL), FM_OK);
  cr_assert(fm_colmask_equal(m, f), "the same mask as the causal_document family");
  cr_assert_eq(fm_lr_mask_check(m, NULL), FM_OK);
  fm_colmask *p = NULL;
  cr_assert_eq(fm_lr_proposal_colmask(cu, 3, &p, NULL), FM_OK);
  cr_assert_eq(fm_lr_mask_check(p, NULL), FM_EINVAL, "the proposal's vectors are no document mask");
  for (int32_t i = 0; i < 10; i++) {
    cr_assert(fm_colmask_masked(p, 0, i, i), "the proposal masks the diagonal at %d", i);
    cr_assert(!fm_colmask_masked(m, 0, i, i), "the right vectors keep it");
  }
  cr_assert(!fm_colmask_masked(p, 0, 9, 0), "the proposal lets row 9 see key 0 of the first document");
  fm_colmask_destroy(p);
  fm_colmask_destroy(f);
  req.family = "causal";
  req.nparams = 0;
  cr_assert_eq(fm_family_build(&req, &f, NULL, NULL), FM_OK);
  cr_assert_eq(fm_lr_mask_check(f, NULL), FM_OK, "one document is the causal mask");
  fm_colmask_destroy(f);
  req.family = "sliding_window";
  const char *w3[] = {"w=3"};
  req.nparams = 1;
  req.params = w3;
  cr_assert_eq(fm_family_build(&req, &f, NULL, NULL), FM_OK);
  cr_assert_eq(fm_lr_mask_check(f, NULL), FM_EINVAL);
  fm_colmask_destroy(f);
  fm_colmask_destroy(m);
}

/* ---- tile classes -------------------------------------------------------------- */

/* The class of rows [r0, r1) x keys [j0, j1) by the definition: visible pairs. */
static int brute_class(const int32_t *cu, int32_t n, int64_t r0, int64_t r1, int64_t j0, int64_t j1) {
  int64_t vis = 0, all = (r1 - r0) * (j1 - j0);
  for (int64_t t = r0; t < r1; t++)
    for (int64_t s = j0; s < j1; s++) {
      int32_t d = 0;
      while (d < n - 1 && cu[d + 1] <= s) d++;
      vis += s <= t && t < cu[d + 1];
    }
  return vis == 0 ? FM_TILE_MASKED : vis == all ? FM_TILE_UNMASKED : FM_TILE_PARTIAL;
}

Test(linrnn, classes_match_brute_force_and_fmsim_classify) {
  fm_rng r;
  fm_rng_seed(&r, 23, 0);
  int32_t cu[400];
  for (int iter = 0; iter < 60; iter++) {
    int32_t sub = 1 << fm_rng_below(&r, 4), chunk = sub << fm_rng_below(&r, 4);
    int32_t T = 1 + (int32_t)fm_rng_below(&r, 300), n = random_cu(&r, T, 1 + (int32_t)fm_rng_below(&r, 60), cu, 400);
    fm_colmask *m = doc_mask(cu, n);
    int64_t len = fm_lr_class_len(T, chunk, sub);
    uint8_t *cls = malloc((size_t)len);
    cr_assert_eq(fm_lr_classify(m, chunk, sub, cls, NULL), FM_OK);
    fm_tile_counts tc;
    int32_t tr = (T + sub - 1) / sub;
    uint8_t *whole = malloc((size_t)tr * tr), *exact = malloc((size_t)tr * tr);
    cr_assert_eq(fm_classify(m, sub, sub, &tc, whole, exact, NULL), FM_OK);
    const int32_t nb = chunk / sub;
    for (int32_t ch = 0; ch < fm_lr_nchunks(T, chunk); ch++)
      for (int32_t bi = 0; bi < nb; bi++)
        for (int32_t bj = 0; bj < nb; bj++) {
          int64_t r0 = (int64_t)ch * chunk + bi * sub, j0 = (int64_t)ch * chunk + bj * sub;
          int got = cls[((int64_t)ch * nb + bi) * nb + bj];
          if (r0 >= T || j0 >= T) {
            cr_assert_eq(got, FM_TILE_MASKED, "a tile past T is stored masked");
            continue;
          }
          int64_t r1 = r0 + sub < T ? r0 + sub : T, j1 = j0 + sub < T ? j0 + sub : T;
          cr_assert_eq(got, brute_class(cu, n, r0, r1, j0, j1), "T %d C %d c %d chunk %d tile %d,%d", T,
                       chunk, sub, ch, bi, bj);
          int64_t rt = r0 / sub, ct = j0 / sub;
          cr_assert_eq(got, whole[rt * tr + ct], "fm_classify's min/max class of the same tile");
          cr_assert_eq(got, exact[rt * tr + ct], "the rule is exact on document masks");
        }
    free(cls);
    free(whole);
    free(exact);
    fm_colmask_destroy(m);
  }
}

/* ---- counts on hand-worked cases ----------------------------------------------- */

static fm_lr_counts count_of(const int32_t *cu, int32_t n, int32_t chunk, int32_t sub, int32_t dk,
                             int32_t dv) {
  fm_colmask *m = doc_mask(cu, n);
  fm_lr_counts c;
  fm_err err;
  cr_assert_eq(fm_lr_count(m, chunk, sub, dk, dv, &c, &err), FM_OK, "%s", err.msg);
  fm_colmask_destroy(m);
  return c;
}

Test(linrnn, documents_of_one_sub_chunk_leave_only_the_diagonal) {
  int32_t *cu = NULL, n = 0;
  cr_assert_eq(fm_lr_docs_fixed(256, 16, &cu, &n, NULL), FM_OK);
  fm_lr_counts c = count_of(cu, n, 128, 16, 128, 256);
  cr_assert_eq(c.tiles, 128);
  cr_assert_eq(c.tiles_class[FM_TILE_MASKED], 112);
  cr_assert_eq(c.tiles_class[FM_TILE_PARTIAL], 16, "each diagonal tile is one document's triangle");
  cr_assert_eq(c.tiles_class[FM_TILE_UNMASKED], 0);
  cr_assert_float_eq(c.rho, 0.875, 1e-15);
  cr_assert_eq(c.work[FM_LR_SKIP].tiles_visited, 16);
  cr_assert_eq(c.work[FM_LR_CAUSAL].tiles_visited, 72);
  cr_assert_eq(c.work[FM_LR_NOSKIP].tiles_visited, 128);
  cr_assert_eq(c.work[FM_LR_CAUSAL].tiles_elementwise, 72, "below the diagonal: masked element-wise");
  cr_assert_eq(c.work[FM_LR_SKIP].inter_blocks, 0, "no document crosses a chunk");
  cr_assert_eq(c.work[FM_LR_NOSKIP].inter_blocks, 16);
  cr_assert_eq(c.work[FM_LR_SKIP].state_rows, 0);
  cr_assert_eq(c.work[FM_LR_NOSKIP].state_rows, 128, "the state into chunk 1");
  cr_assert_eq(c.boundaries, 14);
  cr_assert_float_eq(c.boundaries_per_chunk, 7.0, 1e-15);
  cr_assert_float_eq(c.work[FM_LR_SKIP].flops, 16.0 * 2 * 16 * 16 * (128 + 256), 1e-3);
  cr_assert_float_eq(c.flops_useful, 16.0 * (16 * 17 / 2) * 2 * (128 + 256), 1e-3);
  fm_lr_estimate e;
  fm_lr_estimate_of(&c, &e);
  cr_assert_float_eq(e.rho_estimate, 28.0 / 64 + 7.0 * 7 / 64, 1e-15, "the proposal overshoots 1");
  cr_assert_float_eq(e.visited_exact, 0.125, 1e-15);
  cr_assert_float_eq(fm_lr_proposal_rho(128, 16, 3.5), 28.0 / 64 + 7.0 * 3.5 / 64, 1e-15);
  free(cu);
}

Test(linrnn, state_rows_and_inter_terms_follow_the_documents) {
  /* T = 384, C = 128, c = 16: documents 100, 156, 128 */
  int32_t len[] = {100, 156, 128}, cu[4];
  make_cu(len, 3, cu);
  fm_lr_counts c = count_of(cu, 3, 128, 16, 64, 64);
  fm_colmask *m = doc_mask(cu, 3);
  int32_t carried;
  int64_t from;
  fm_lr_chunk_rows(m, 128, 16, 0, &carried, &from);
  cr_assert(carried == 0 && from == 96, "chunk 0: the state from row block 6 (doc 1 starts at 100)");
  fm_lr_chunk_rows(m, 128, 16, 1, &carried, &from);
  cr_assert(carried == 128 && from == 256, "chunk 1: carried whole; doc 2 starts at 256: no state");
  fm_lr_chunk_rows(m, 128, 16, 2, &carried, &from);
  cr_assert_eq(carried, 0);
  fm_colmask_destroy(m);
  cr_assert_eq(c.work[FM_LR_SKIP].inter_blocks, 8);
  cr_assert_eq(c.work[FM_LR_CAUSAL].inter_blocks, 24);
  cr_assert_eq(c.work[FM_LR_SKIP].state_rows, 32);
  cr_assert_eq(c.work[FM_LR_NOSKIP].state_rows, 256);
  cr_assert_eq(c.boundaries, 1, "256 starts chunk 2");
  /* chunk 0: one boundary at 100 inside row block 6: blocks 0..5 and 7 see only doc 0 / doc 1 */
  cr_assert_eq(c.tiles_class[FM_TILE_MASKED], 28 + 6 + 28 + 28);
  /* a single document: the causal variant is the skip variant, all but the inter terms */
  int32_t one[] = {0, 384};
  fm_lr_counts s = count_of(one, 1, 128, 16, 64, 64);
  cr_assert_eq(s.work[FM_LR_SKIP].tiles_visited, s.work[FM_LR_CAUSAL].tiles_visited);
  cr_assert_eq(s.work[FM_LR_SKIP].inter_blocks, 16);
  cr_assert_eq(s.work[FM_LR_SKIP].state_rows, 256);
}

Test(linrnn, counts_agree_with_the_scenario_chunk_study_and_the_last_chunk_is_cut) {
  fm_rng r;
  fm_rng_seed(&r, 5, 1);
  int32_t cu[2100];
  for (int iter = 0; iter < 20; iter++) {
    int32_t T = 512 + (int32_t)fm_rng_below(&r, 1500), n = random_cu(&r, T, 300, cu, 2100);
    fm_colmask *m = doc_mask(cu, n);
    fm_lr_counts c;
    cr_assert_eq(fm_lr_count(m, 128, 16, 128, 128, &c, NULL), FM_OK);
    int32_t tr = (T + 15) / 16;
    uint8_t *whole = malloc((size_t)tr * tr);
    cr_assert_eq(fm_classify(m, 16, 16, NULL, whole, NULL, NULL), FM_OK);
    int64_t masked = 0, tiles = 0;
    for (int32_t rt = 0; rt < tr; rt++)
      for (int32_t ct = rt / 8 * 8; ct <= rt; ct++) { /* the diagonal 8 x 8 blocks, on and below */
        tiles++;
        masked += whole[rt * tr + ct] == FM_TILE_MASKED;
      }
    for (int32_t rt = 0; rt < tr; rt++)
      for (int32_t ct = rt + 1; ct < tr && ct < (rt / 8 + 1) * 8; ct++) tiles++, masked++;
    cr_assert_eq(c.tiles, tiles, "T %d", T);
    cr_assert_eq(c.tiles_class[FM_TILE_MASKED], masked, "T %d", T);
    cr_assert_eq(c.row_blocks, tr);
    free(whole);
    fm_colmask_destroy(m);
  }
}

/* ---- memory -------------------------------------------------------------------- */

Test(linrnn, mask_memory_is_linear_in_T_and_independent_of_the_chunk) {
  int64_t bytes[2];
  for (int k = 0; k < 2; k++) {
    int64_t T = (int64_t)65536 << k;
    int32_t *cu = NULL, n = 0;
    cr_assert_eq(fm_lr_docs_fixed(T, 48, &cu, &n, NULL), FM_OK);
    int64_t before = fm_mem_reserved();
    fm_colmask *m = doc_mask(cu, n);
    bytes[k] = fm_mem_reserved() - before;
    fm_lr_counts c64, c256;
    cr_assert_eq(fm_lr_count(m, 64, 16, 128, 128, &c64, NULL), FM_OK);
    cr_assert_eq(fm_lr_count(m, 256, 16, 128, 128, &c256, NULL), FM_OK);
    cr_assert_eq(fm_mem_reserved() - before, bytes[k], "counting reserves nothing more");
    cr_assert_eq(c64.mask_bytes, bytes[k], "the reported bytes are the mask's reservation");
    cr_assert_eq(c256.mask_bytes, bytes[k]);
    cr_assert_eq(c64.scratch_bytes, 4 * 32 + 16, "n bounds and one chunk's classes");
    cr_assert_eq(c256.scratch_bytes, 16 * 32 + 256);
    fm_colmask_destroy(m);
    free(cu);
  }
  cr_assert_eq(bytes[0], 16 * 65536, "4 int32 vectors of T keys");
  cr_assert_eq(bytes[1], 2 * bytes[0], "O(T)");
}

/* ---- flash-linear-attention's aligned packing --------------------------------- */

Test(linrnn, aligned_packing_pads_every_document_to_a_chunk) {
  int32_t *cu = NULL, n = 0;
  cr_assert_eq(fm_lr_docs_fixed(4096, 16, &cu, &n, NULL), FM_OK);
  fm_lr_aligned a;
  cr_assert_eq(fm_lr_aligned_count(cu, n, 64, 16, 128, 256, &a, NULL), FM_OK);
  cr_assert_eq(a.tokens_padded, 4 * 4096, "a 16-token document fills a 64-token chunk");
  cr_assert_eq(a.chunks, 256);
  cr_assert_eq(a.work.tiles_visited, 256 * 10);
  fm_lr_counts c = count_of(cu, n, 64, 16, 128, 256);
  cr_assert_eq(c.work[FM_LR_CAUSAL].tiles_visited, 64 * 10, "unaligned: a quarter of the chunks");
  double intra = 2560.0 * 2 * 16 * 16 * (128 + 256), inter = 1024.0 * 2 * 16 * 128 * 256,
         state = 255.0 * 64 * 2 * 128 * 256;
  cr_assert_float_eq(a.work.flops, intra + inter + state, 1e-3 * a.work.flops * 1e-12);
  cr_assert_gt(a.work.flops, 3.9 * c.work[FM_LR_CAUSAL].flops);
  free(cu);
}

/* ---- the references ------------------------------------------------------------ */

typedef struct lr_inputs {
  fm_lr_problem p;
  float *q, *k, *v, *g;
} lr_inputs;

static float randn(fm_rng *r) {
  double u1 = ((double)(fm_rng_next(r) >> 11) + 1.0) * 0x1.0p-53, u2 = (double)(fm_rng_next(r) >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void inputs_make(lr_inputs *x, int64_t T, int32_t H, int32_t dk, int32_t dv, const int32_t *cu,
                        int32_t n, uint64_t seed, double gmin) {
  fm_rng r;
  fm_rng_seed(&r, seed, 99);
  x->q = malloc(sizeof(float) * (size_t)(T * H * dk));
  x->k = malloc(sizeof(float) * (size_t)(T * H * dk));
  x->v = malloc(sizeof(float) * (size_t)(T * H * dv));
  x->g = malloc(sizeof(float) * (size_t)(T * H));
  for (int64_t i = 0; i < T * H * dk; i++) x->q[i] = fm_round_bf16(randn(&r)), x->k[i] = fm_round_bf16(randn(&r));
  for (int64_t i = 0; i < T * H * dv; i++) x->v[i] = fm_round_bf16(randn(&r));
  for (int64_t i = 0; i < T * H; i++) x->g[i] = (float)(gmin * (double)(fm_rng_next(&r) >> 11) * 0x1.0p-53);
  x->p = (fm_lr_problem){.tokens = T, .heads = H, .dk = dk, .dv = dv, .scale = 1.0 / sqrt(dk),
                         .ndocs = n, .cu_seqlens = cu, .q = x->q, .k = x->k, .v = x->v, .g = x->g};
}

static void inputs_free(lr_inputs *x) {
  free(x->q);
  free(x->k);
  free(x->v);
  free(x->g);
}

Test(linrnn, chunkwise_equals_recurrent_and_every_variant_is_bit_identical) {
  fm_rng r;
  fm_rng_seed(&r, 11, 2);
  int32_t cu[300];
  static const int32_t shapes[][2] = {{8, 2}, {8, 8}, {16, 4}, {32, 8}, {64, 16}, {64, 64}, {128, 16}, {12, 3}};
  for (int iter = 0; iter < 32; iter++) {
    int32_t chunk = shapes[iter % 8][0], sub = shapes[iter % 8][1];
    int32_t T = 1 + (int32_t)fm_rng_below(&r, 260), n = random_cu(&r, T, 1 + (int32_t)fm_rng_below(&r, 90), cu, 300);
    int32_t H = 1 + (int32_t)fm_rng_below(&r, 2), dk = 1 + (int32_t)fm_rng_below(&r, 6), dv = 1 + (int32_t)fm_rng_below(&r, 5);
    lr_inputs x;
    inputs_make(&x, T, H, dk, dv, cu, n, (uint64_t)iter, iter % 4 == 0 ? 0.0 : -0.3);
    size_t no = (size_t)T * H * dv, ns = (size_t)n * H * dk * dv;
    double *o_rec = malloc(no * 8), *s_rec = malloc(ns * 8), *o[3], *s[3];
    fm_err err;
    cr_assert_eq(fm_lr_reference_recurrent(&x.p, o_rec, s_rec, &err), FM_OK, "%s", err.msg);
    for (int v = 0; v < FM_LR_NVARIANTS; v++) {
      o[v] = malloc(no * 8);
      s[v] = malloc(ns * 8);
      cr_assert_eq(fm_lr_reference_chunkwise(&x.p, chunk, sub, v, o[v], s[v], &err), FM_OK, "%s", err.msg);
      double eo = fm_lr_rel_error(o[v], o_rec, (int64_t)no), es = fm_lr_rel_error(s[v], s_rec, (int64_t)ns);
      cr_assert_leq(eo, 1e-12, "T %d C %d c %d %s: outputs %g", T, chunk, sub, fm_lr_variant_name(v), eo);
      cr_assert_leq(es, 1e-12, "T %d C %d c %d: final states %g", T, chunk, sub, es);
    }
    for (int v = 1; v < FM_LR_NVARIANTS; v++) {
      cr_assert(!memcmp(o[v], o[FM_LR_SKIP], no * 8), "%s == skip bit for bit", fm_lr_variant_name(v));
      cr_assert(!memcmp(s[v], s[FM_LR_SKIP], ns * 8));
    }
    for (int v = 0; v < FM_LR_NVARIANTS; v++) free(o[v]), free(s[v]);
    free(o_rec);
    free(s_rec);
    inputs_free(&x);
  }
}

Test(linrnn, the_packed_run_equals_each_document_alone) {
  int32_t len[] = {37, 5, 120, 64, 1, 90}, cu[7];
  int32_t T = make_cu(len, 6, cu), H = 2, dk = 4, dv = 3;
  lr_inputs x;
  inputs_make(&x, T, H, dk, dv, cu, 6, 3, -0.2);
  double *o = malloc(sizeof(double) * (size_t)T * H * dv), *s = malloc(sizeof(double) * 6 * H * dk * dv);
  cr_assert_eq(fm_lr_reference_chunkwise(&x.p, 32, 8, FM_LR_SKIP, o, s, NULL), FM_OK);
  for (int32_t d = 0; d < 6; d++) {
    int32_t one[2] = {0, len[d]};
    fm_lr_problem p = x.p;
    p.tokens = len[d];
    p.ndocs = 1;
    p.cu_seqlens = one;
    p.q = x.q + (int64_t)cu[d] * H * dk;
    p.k = x.k + (int64_t)cu[d] * H * dk;
    p.v = x.v + (int64_t)cu[d] * H * dv;
    p.g = x.g + (int64_t)cu[d] * H;
    double *od = malloc(sizeof(double) * (size_t)len[d] * H * dv), *sd = malloc(sizeof(double) * H * dk * dv);
    cr_assert_eq(fm_lr_reference_chunkwise(&p, 32, 8, FM_LR_SKIP, od, sd, NULL), FM_OK);
    cr_assert_leq(fm_lr_rel_error(o + (int64_t)cu[d] * H * dv, od, (int64_t)len[d] * H * dv), 1e-12, "document %d", d);
    cr_assert_leq(fm_lr_rel_error(s + (int64_t)d * H * dk * dv, sd, (int64_t)H * dk * dv), 1e-12, "state %d", d);
    free(od);
    free(sd);
  }
  free(o);
  free(s);
  inputs_free(&x);
}

Test(linrnn, the_references_refuse_bad_inputs) {
  int32_t cu[] = {0, 4};
  lr_inputs x;
  inputs_make(&x, 4, 1, 2, 2, cu, 1, 1, -0.1);
  double o[8];
  fm_err err;
  x.g[2] = 0.5f;
  cr_assert_eq(fm_lr_reference_recurrent(&x.p, o, NULL, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "g[token 2, head 0]"), "%s", err.msg);
  x.g[2] = 0;
  cr_assert_eq(fm_lr_reference_chunkwise(&x.p, 4, 3, FM_LR_SKIP, o, NULL, &err), FM_EINVAL, "3 does not divide 4");
  cr_assert_eq(fm_lr_reference_chunkwise(&x.p, 4, 2, 7, o, NULL, &err), FM_EINVAL);
  int32_t bad[] = {0, 5};
  x.p.cu_seqlens = bad;
  cr_assert_eq(fm_lr_reference_recurrent(&x.p, o, NULL, &err), FM_EINVAL);
  inputs_free(&x);
}

/* ---- variants, trace ------------------------------------------------------------ */

Test(linrnn, variant_registry) {
  for (int v = 0; v < FM_LR_NVARIANTS; v++) {
    cr_assert_eq(fm_lr_variant_parse(fm_lr_variant_name(v)), v);
    cr_assert(fm_lr_variant_meaning(v)[0]);
  }
  cr_assert_str_eq(fm_lr_variant_name(FM_LR_CAUSAL), "causal");
  cr_assert_eq(fm_lr_variant_parse("all"), -1);
  cr_assert_null(fm_lr_variant_name(FM_LR_NVARIANTS));
}

Test(linrnn, trace_round_trip_and_refusals) {
  int32_t len[] = {40, 13, 100, 60, 43}, cu[6];
  int32_t T = make_cu(len, 5, cu);
  fm_colmask *m = doc_mask(cu, 5);
  int64_t nc = fm_lr_class_len(T, 128, 16);
  uint8_t *cls = malloc((size_t)nc);
  int64_t *cyc = malloc(sizeof(int64_t) * (size_t)nc);
  cr_assert_eq(fm_lr_classify(m, 128, 16, cls, NULL), FM_OK);
  for (int64_t i = 0; i < nc; i++) cyc[i] = cls[i] == FM_TILE_MASKED ? 0 : 1000 + i;
  fm_lr_counts c;
  cr_assert_eq(fm_lr_count(m, 128, 16, 64, 64, &c, NULL), FM_OK);
  fm_lr_trace t = {.device = "cpu", .variant = "skip", .docs_source = "explicit", .tokens = T,
                   .chunk = 128, .sub = 16, .nchunks = fm_lr_nchunks(T, 128), .ndocs = 5,
                   .record_heads = 1, .shown_chunk = fm_lr_busiest_chunk(cu, 5, 128),
                   .cu_seqlens = cu, .tile_class = cls, .tile_cycles = cyc};
  cr_assert_eq(t.shown_chunk, 0, "boundaries 40, 53 in chunk 0; 153, 213 in chunk 1: the first wins");
  char dir[600];
  snprintf(dir, sizeof dir, "%s/linrnn_trace_%d", FM_TEST_TMP_DIR, (int)getpid());
  fm_err err;
  cr_assert_eq(fm_lr_trace_write(dir, &t, &c, &err), FM_OK, "%s", err.msg);
  fm_lr_trace back;
  cr_assert_eq(fm_lr_trace_load(dir, &back, &err), FM_OK, "%s", err.msg);
  cr_assert(back.tokens == T && back.chunk == 128 && back.sub == 16 && back.ndocs == 5);
  cr_assert(!memcmp(back.tile_class, cls, (size_t)nc) && !memcmp(back.tile_cycles, cyc, (size_t)nc * 8));
  cr_assert(!memcmp(back.cu_seqlens, cu, sizeof cu));
  cr_assert_str_eq(back.device, "cpu");
  fm_lr_trace_free(&back);
  /* a class value out of range is refused */
  cls[3] = 7;
  t.tile_cycles = NULL;
  cr_assert_eq(fm_lr_trace_write(dir, &t, NULL, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(fm_lr_trace_load(dir, &back, &err), FM_EFORMAT);
  cr_assert(strstr(err.msg, "tile_class.npy"), "%s", err.msg);
  t.shown_chunk = 9;
  cr_assert_eq(fm_lr_trace_write(dir, &t, NULL, &err), FM_EINVAL);
  char cmd[1300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
  free(cls);
  free(cyc);
  fm_colmask_destroy(m);
}

/* ---- fmsim linrnn ----------------------------------------------------------------- */

#include "fm_jsonr.h"

/* Runs fmsim with args; its stdout (any size) parsed as JSON. */
static fm_jdoc *run_json(const char *args) {
  char path[600], line[2000];
  snprintf(path, sizeof path, "%s/linrnn_json_%d.json", FM_TEST_TMP_DIR, (int)getpid());
  snprintf(line, sizeof line, "%s %s > %s 2>/dev/null", FMSIM_BIN, args, path);
  int st = system(line);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fmsim %s: status %d", args, st);
  fm_jdoc *d = NULL;
  fm_err err;
  cr_assert_eq(fm_jdoc_load(path, &d, &err), FM_OK, "%s", err.msg);
  unlink(path);
  return d;
}

static int64_t jint(const fm_jv *v, const char *path) {
  char buf[200];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *save = NULL, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save)) v = fm_jv_get(v, k);
  cr_assert(fm_jv_type_of(v) == FM_JV_NUMBER || fm_jv_type_of(v) == FM_JV_BOOL, "%s missing", path);
  return fm_jv_type_of(v) == FM_JV_BOOL ? fm_jv_bool(v, 0) : fm_jv_int64(v, -1);
}

Test(linrnn, cli_cpu_reports_the_counts_and_the_reference) {
  fm_jdoc *d = run_json("linrnn --cpu --json --doc-len 16 --tokens 4096 --heads 2 --verify-tokens 300");
  const fm_jv *r = fm_jdoc_root(d);
  cr_assert_eq(jint(r, "tiles"), 32 * 64);
  cr_assert_eq(jint(r, "tiles_masked"), 32 * 56);
  cr_assert_eq(jint(r, "variants.skip.tiles_visited"), 32 * 8);
  cr_assert_eq(jint(r, "variants.causal.tiles_visited"), 32 * 36);
  cr_assert_eq(jint(r, "memory.mask_bytes"), 16 * 4096);
  cr_assert_eq(jint(r, "reference.tokens"), 300);
  cr_assert_eq(jint(r, "reference.pass"), 1);
  cr_assert_eq(jint(r, "reference.variants_bit_identical"), 1);
  cr_assert_leq(fm_jv_number(fm_jv_get(fm_jv_get(r, "reference"), "chunkwise_vs_recurrent"), 1), 1e-12);
  fm_jdoc_free(d);
  d = run_json("linrnn --cpu --json --doc-mean 64 --tokens 8192 --variant skip --seed 3");
  r = fm_jdoc_root(d);
  cr_assert_null(fm_jv_get(fm_jv_get(r, "variants"), "noskip"), "--variant skip reports skip alone");
  cr_assert_geq(jint(r, "ndocs"), 127);
  fm_jdoc_free(d);
}

Test(linrnn, cli_sweep_covers_every_shape_and_length) {
  fm_jdoc *d = run_json("linrnn --sweep --json --tokens 16384");
  const fm_jv *rows = fm_jv_get(fm_jdoc_root(d), "rows");
  cr_assert_eq(fm_jv_count(rows), 9 * 6 * 2, "C x c x mean length x fixed/drawn");
  int seen = 0;
  for (const fm_jv *row = fm_jv_first(rows); row; row = fm_jv_next(row))
    if (jint(row, "chunk") == 128 && jint(row, "sub") == 16 && jint(row, "mean_len") == 16) {
      cr_assert_float_eq(fm_jv_number(fm_jv_get(row, "rho"), 0), 0.875, 1e-12);
      cr_assert_float_eq(fm_jv_number(fm_jv_get(row, "rho_estimate"), 0), 77.0 / 64, 1e-9);
      seen++;
    }
  cr_assert_eq(seen, 2, "fixed and drawn");
  fm_jdoc_free(d);
}

/* masked_diagonal of `fmsim check --intervals FILE --causal --json`. */
static int64_t checked_diagonal(const char *file, int64_t *empty_rows) {
  char args[1200];
  snprintf(args, sizeof args, "check --intervals %s --causal --json", file);
  fm_jdoc *d = run_json(args);
  int64_t n = jint(fm_jdoc_root(d), "masked_diagonal");
  *empty_rows = jint(fm_jdoc_root(d), "rows_without_visible_key");
  fm_jdoc_free(d);
  return n;
}

Test(linrnn, fmsim_check_finds_the_diagonal_the_proposals_vectors_mask) {
  char file[600], args[1400];
  snprintf(file, sizeof file, "%s/linrnn_iv_%d.npy", FM_TEST_TMP_DIR, (int)getpid());
  fmt_result r;
  snprintf(args, sizeof args, "linrnn --doc-len 100 --tokens 1000 --intervals %s --proposal", file);
  fmt_run(&r, args);
  cr_assert_eq(r.status, 0, "%s", r.err);
  int64_t empty;
  cr_assert_eq(checked_diagonal(file, &empty), 1000, "every token's own key is masked");
  cr_assert_eq(empty, 100, "the first document's rows see nothing (later rows see earlier documents)");
  snprintf(args, sizeof args, "linrnn --doc-len 100 --tokens 1000 --intervals %s", file);
  fmt_run(&r, args);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert_eq(checked_diagonal(file, &empty), 0, "the right vectors: LTS = the end of the document");
  cr_assert_eq(empty, 0);
  unlink(file);
}

Test(linrnn, cli_trace_holds_the_cpu_classes) {
  char dir[600], args[1400];
  snprintf(dir, sizeof dir, "%s/linrnn_cli_trace_%d", FM_TEST_TMP_DIR, (int)getpid());
  snprintf(args, sizeof args, "linrnn --cpu --doc-mean 40 --tokens 3000 --heads 1 --trace %s --show-chunk 5",
           dir);
  fmt_result r;
  fmt_run(&r, args);
  cr_assert_eq(r.status, 0, "%s", r.err);
  fm_lr_trace t;
  fm_err err;
  cr_assert_eq(fm_lr_trace_load(dir, &t, &err), FM_OK, "%s", err.msg);
  cr_assert(t.tokens == 3000 && t.chunk == 128 && t.sub == 16 && t.record_heads == 1 && t.shown_chunk == 5);
  cr_assert_null(t.tile_cycles, "no cycles on the CPU");
  cr_assert_str_eq(t.device, "cpu");
  fm_colmask *m = doc_mask(t.cu_seqlens, t.ndocs);
  int64_t n = fm_lr_class_len(3000, 128, 16);
  uint8_t *cls = malloc((size_t)n);
  cr_assert_eq(fm_lr_classify(m, 128, 16, cls, NULL), FM_OK);
  cr_assert(!memcmp(cls, t.tile_class, (size_t)n));
  free(cls);
  fm_colmask_destroy(m);
  fm_lr_trace_free(&t);
  snprintf(args, sizeof args, "rm -rf '%s'", dir);
  cr_assert_eq(system(args), 0);
}

Test(linrnn, cli_gpu_path_without_a_gpu_is_one_line) {
  fmt_result r;
  fmt_run(&r, "linrnn --doc-len 16 --tokens 1024");
  if (r.status == 0 || r.status == 1) cr_skip_test("a GPU ran the kernel");
  cr_assert_eq(r.status, 2);
  cr_assert_eq(r.err_lines, 1, "%s", r.err);
  cr_assert(strstr(r.err, "CUDA") || strstr(r.err, "GPU"), "%s", r.err);
  cr_assert_eq(r.out[0], 0, "nothing on stdout");
}

Test(linrnn, the_chunks_report_shows_the_exact_visited_tiles_beside_the_estimate) {
  char dir[600], yaml[700], args[1500];
  snprintf(dir, sizeof dir, "%s/linrnn_scn_%d", FM_TEST_TMP_DIR, (int)getpid());
  snprintf(yaml, sizeof yaml, "%s.yaml", dir);
  FILE *f = fopen(yaml, "w");
  cr_assert(f);
  fputs("name: lr\nseqlen: 4096\nbr: 16\nbc: 16\nchunk: 128\nrun: [analyze]\nreport: chunks\nmasks:\n"
        "  - family: causal_document\n    params: {docs_min: 128, docs_max: 128}\n", f);
  fclose(f);
  snprintf(args, sizeof args, "run %s --out %s", yaml, dir);
  fmt_result r;
  fmt_run(&r, args);
  if (r.status == 2 && strstr(r.err, "libyaml")) cr_skip_test("built without libyaml");
  cr_assert_eq(r.status, 0, "%s", r.err);
  char path[700];
  snprintf(path, sizeof path, "%s/index.json", dir);
  fm_jdoc *d = NULL;
  fm_err err;
  cr_assert_eq(fm_jdoc_load(path, &d, &err), FM_OK, "%s", err.msg);
  const fm_jv *cases = fm_jdoc_root(d); /* an array of the cases */
  cr_assert_geq(fm_jv_count(cases), 1);
  for (const fm_jv *c = fm_jv_first(cases); c; c = fm_jv_next(c)) {
    double skipped = fm_jv_number(fm_jv_get(c, "chunk_sparsity"), NAN);
    double visited = fm_jv_number(fm_jv_get(c, "chunk_visited"), NAN);
    cr_assert_float_eq(visited, 1 - skipped, 1e-9, "fm_linrnn's skip variant visits what the rule does not mask");
    double work = fm_jv_number(fm_jv_get(c, "chunk_work"), NAN);
    cr_assert(work > 0 && work < 1, "skip's work over noskip's: %g", work);
  }
  fm_jdoc_free(d);
  snprintf(path, sizeof path, "%s/report.md", dir);
  static char report[1 << 16];
  fmt_slurp(path, report, sizeof report);
  cr_assert(strstr(report, "visited (fm_linrnn, exact)"), "the chunks table has the exact column");
  snprintf(args, sizeof args, "rm -rf '%s' '%s'", dir, yaml);
  cr_assert_eq(system(args), 0);
}
