/* test_cp_run.c — executing context-parallel plans on the CPU
 * (core/fm_cp_run.h, fmsim cp-run --cpu):
 *   - the column subset of a mask (fm_cp_colmask_subset) is the mask on the
 *     chosen columns, element by element, with the causal triangle folded in
 *     (kept only for a suffix of the columns), for global and local masks;
 *   - the log-sum-exp merge of two column halves equals the whole row's
 *     forward, rows that see nothing on one side or both included;
 *   - the inputs' fill by global index: a slice filled at an offset equals
 *     the same slice of the whole;
 *   - the schedule: in-lists are the plan's need rows, out-lists their
 *     transpose, ring steps in ring order, buffer sizes as declared; its
 *     messages carry exactly the moves' rows, coalesced where both sides are
 *     contiguous (counts derived by hand for a contiguous split and for a
 *     mask-aware causal split);
 *   - the fake of the exchange (fm_cp_fake_run): every sharding x exchange on
 *     causal, causal_document, sliding_window, full, share_question, a
 *     per-head mask and a mask with rows that see no key, forward and
 *     backward, equals the fp64 reference of the whole problem (atol = rtol
 *     = 1e-9: both sides are fp64); a rank never reads K/V it was not sent
 *     (those rows hold NaN);
 *   - fmsim cp-run --cpu prints PASS, and with --sharding plan runs the sharding and
 *     exchange cp-plan names best. */
#include "fm_test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <criterion/criterion.h>
#include <math.h>

#include "fm_cp_plan.h"
#include "fm_bf16.h"
#include "fm_cp_run.h"
#include "fm_families.h"
#include "fm_jsonr.h"
#include "fm_reference.h"
#include "fm_samples.h"

static fm_colmask *family(const char *name, int64_t s, const char *param) {
  fm_colmask *m = fmt_family(name, s, param, 5);
  cr_assert_not_null(m, "%s", name);
  return m;
}

/* Two heads, two masks: head 0 a causal window of 100, head 1 causal documents
 * [0, 300), [300, 500), [500, S) (S > 500). */
static fm_colmask *per_head(int32_t s) {
  fm_colmask *m = NULL;
  fm_err err;
  cr_assert_eq(fm_colmask_create(s, s, 1, 2, 1, &m, &err), FM_OK, "%s", err.msg);
  for (int32_t j = 0; j < s; j++) {
    fm_colmask_vec(m, 0, FM_LTS)[j] = j + 100 < s ? j + 100 : s;
    fm_colmask_vec(m, 1, FM_LTS)[j] = j < 300 ? 300 : j < 500 && s > 500 ? 500 : s;
  }
  cr_assert_eq(fm_colmask_validate(m, &err), FM_OK, "%s", err.msg);
  return m;
}

/* Bidirectional: rows [S/4, S/4 + S/6) see no key; rows [3S/4, 3S/4 + S/8)
 * miss the keys below S/3. */
static fm_colmask *blind_rows(int32_t s) {
  fm_colmask *m = NULL;
  fm_err err;
  cr_assert_eq(fm_colmask_create(s, s, 1, 1, 0, &m, &err), FM_OK, "%s", err.msg);
  for (int32_t j = 0; j < s; j++) {
    fm_colmask_vec(m, 0, FM_LTS)[j] = s / 4;
    fm_colmask_vec(m, 0, FM_LTE)[j] = s / 4 + s / 6;
    fm_colmask_vec(m, 0, FM_UTS)[j] = j < s / 3 ? 3 * s / 4 : 0;
    fm_colmask_vec(m, 0, FM_UTE)[j] = j < s / 3 ? 3 * s / 4 + s / 8 : 0;
  }
  cr_assert_eq(fm_colmask_validate(m, &err), FM_OK, "%s", err.msg);
  return m;
}

/* ---- the column subset ---------------------------------------------------------- */

static void check_subset(const fm_colmask *m, const fm_cp_move *cols, int32_t n, const char *what) {
  fm_colmask *sub = NULL;
  fm_err err;
  cr_assert_eq(fm_cp_colmask_subset(m, cols, n, &sub, &err), FM_OK, "%s: %s", what, err.msg);
  cr_assert_eq(fm_colmask_validate(sub, &err), FM_OK, "%s: %s", what, err.msg);
  int32_t sk = fm_colmask_sk(m), width = 0;
  for (int32_t c = 0; c < n; c++) width += cols[c].row1 - cols[c].row0;
  cr_assert_eq(fm_colmask_sk(sub), width);
  cr_assert_eq(fm_colmask_sq(sub), fm_colmask_sq(m));
  int suffix = n == 1 && cols[0].row1 == sk;
  cr_assert_eq(fm_colmask_causal(sub), fm_colmask_causal(m) && suffix, "%s: causal flag", what);
  for (int32_t set = 0; set < fm_colmask_nsets(m); set++) {
    int32_t at = 0;
    for (int32_t c = 0; c < n; c++)
      for (int32_t j = cols[c].row0; j < cols[c].row1; j++, at++)
        for (int32_t i = 0; i < fm_colmask_sq(m); i++)
          cr_assert_eq(fm_colmask_masked(sub, set, i, at), fm_colmask_masked(m, set, i, j),
                       "%s: set %d row %d column %d (subset column %d)", what, set, i, j, at);
  }
  fm_colmask_destroy(sub);
}

Test(cp_run, column_subset_is_exact) {
  fm_colmask *masks[] = {family("causal", 640, NULL), family("causal_document", 640, NULL),
                         family("sliding_window", 640, "w=70"), family("full", 640, NULL),
                         family("share_question", 640, NULL), per_head(640), blind_rows(640)};
  const fm_cp_move a[] = {{0, 128, 0, 0}, {384, 512, 0, 0}}, b[] = {{256, 384, 0, 0}, {0, 128, 0, 0}},
                   c[] = {{512, 640, 0, 0}}, d[] = {{100, 640, 0, 0}}, e[] = {{3, 4, 0, 0}, {639, 640, 0, 0}};
  for (size_t k = 0; k < sizeof masks / sizeof *masks; k++) {
    check_subset(masks[k], a, 2, "two ranges");
    check_subset(masks[k], b, 2, "out of order");
    check_subset(masks[k], c, 1, "a suffix");
    check_subset(masks[k], d, 1, "a ragged suffix");
    check_subset(masks[k], e, 2, "single columns");
    fm_colmask_destroy(masks[k]);
  }
}

Test(cp_run, column_subset_of_a_local_mask) {
  /* a rank that owns one segment ending at S keeps the causal flag; one that
   * owns two has it folded; their subsets stay exact */
  fm_colmask *m = family("causal_document", 768, NULL);
  const fm_cp_segment seg[] = {{0, 256, 0}, {256, 512, 1}, {512, 768, 0}};
  const fm_cp_move own1[] = {{256, 512, 0, 0}}, cols[] = {{0, 256, 0, 0}, {512, 768, 0, 0}};
  for (int32_t r = 0; r < 2; r++) {
    fm_colmask *lm = NULL;
    fm_err err;
    cr_assert_eq(fm_cp_rank_mask(m, seg, 3, r, &lm, &err), FM_OK, "%s", err.msg);
    check_subset(lm, r ? own1 : cols, r ? 1 : 2, "local");
    check_subset(lm, r ? cols : own1, r ? 2 : 1, "local, the other rank's keys");
    fm_colmask_destroy(lm);
  }
  fm_colmask *lm = NULL;
  const fm_cp_segment seg2[] = {{0, 512, 1}, {512, 768, 0}};
  cr_assert_eq(fm_cp_rank_mask(m, seg2, 2, 0, &lm, NULL), FM_OK);
  cr_assert(fm_colmask_causal(lm), "one segment ending at S keeps the flag");
  const fm_cp_move last[] = {{512, 768, 0, 0}};
  check_subset(lm, last, 1, "local suffix");
  fm_colmask_destroy(lm);
  fm_colmask_destroy(m);
}

Test(cp_run, column_subset_refuses_bad_columns) {
  fm_colmask *m = family("causal", 256, NULL), *sub = NULL;
  fm_err err;
  const fm_cp_move bad[] = {{200, 300, 0, 0}}, empty[] = {{5, 5, 0, 0}};
  cr_assert_eq(fm_cp_colmask_subset(m, bad, 1, &sub, &err), FM_EINVAL);
  cr_assert_eq(fm_cp_colmask_subset(m, empty, 1, &sub, &err), FM_EINVAL);
  cr_assert_eq(fm_cp_colmask_subset(m, bad, 0, &sub, &err), FM_EINVAL);
  cr_assert_null(sub);
  fm_colmask_destroy(m);
}

/* ---- the merge -------------------------------------------------------------------- */

Test(cp_run, lse_merge_of_two_halves_is_the_whole) {
  const int32_t S = 384, H = 2, D = 64;
  fm_colmask *masks[] = {family("causal_document", S, NULL), blind_rows(S), per_head(S)};
  for (size_t k = 0; k < sizeof masks / sizeof *masks; k++) {
    fm_colmask *m = masks[k];
    uint16_t *q = malloc(2 * (size_t)S * H * D), *kv = malloc(2 * (size_t)S * H * D);
    fm_cp_fill_bf16(q, (int64_t)S * H * D, 1, 0);
    fm_cp_fill_bf16(kv, (int64_t)S * H * D, 2, 0);
    double *o = malloc(8 * (size_t)S * H * D), *l = malloc(8 * (size_t)S * H);
    double *o1 = malloc(8 * (size_t)S * H * D), *l1 = malloc(8 * (size_t)S * H);
    double *o2 = malloc(8 * (size_t)S * H * D), *l2 = malloc(8 * (size_t)S * H);
    fm_ref_problem p = {.batch = 1, .heads = H, .head_dim = D, .softmax_scale = 0.125, .mask = m,
                        .q = q, .k = kv, .v = kv};
    cr_assert_eq(fm_reference_forward(&p, FM_REF_FP64, o, l, NULL), FM_OK);
    /* keys [0, 128) + [256, 384), then [128, 256): the second half has rows that see nothing */
    const fm_cp_move c1[] = {{0, 128, 0, 0}, {256, 384, 0, 128}}, c2[] = {{128, 256, 0, 0}};
    uint16_t *k1 = malloc(2 * (size_t)256 * H * D), *k2 = malloc(2 * (size_t)128 * H * D);
    memcpy(k1, kv, 2 * (size_t)128 * H * D);
    memcpy(k1 + 128 * H * D, kv + 256 * H * D, 2 * (size_t)128 * H * D);
    memcpy(k2, kv + 128 * H * D, 2 * (size_t)128 * H * D);
    fm_colmask *s1 = NULL, *s2 = NULL;
    cr_assert_eq(fm_cp_colmask_subset(m, c1, 2, &s1, NULL), FM_OK);
    cr_assert_eq(fm_cp_colmask_subset(m, c2, 1, &s2, NULL), FM_OK);
    p.mask = s1, p.k = p.v = k1;
    cr_assert_eq(fm_reference_forward(&p, FM_REF_FP64, o1, l1, NULL), FM_OK);
    p.mask = s2, p.k = p.v = k2;
    cr_assert_eq(fm_reference_forward(&p, FM_REF_FP64, o2, l2, NULL), FM_OK);
    fm_cp_lse_merge(1, H, S, D, o1, l1, o2, l2);
    for (int64_t i = 0; i < (int64_t)S * H; i++) {
      if (isinf(l[i])) cr_assert(isinf(l1[i]) && l1[i] < 0, "row %lld sees nothing", (long long)i);
      else cr_assert_float_eq(l1[i], l[i], 1e-12, "LSE %lld: %g vs %g", (long long)i, l1[i], l[i]);
    }
    for (int64_t i = 0; i < (int64_t)S * H * D; i++)
      cr_assert_float_eq(o1[i], o[i], 1e-12, "O %lld: %g vs %g", (long long)i, o1[i], o[i]);
    fm_colmask_destroy(s1), fm_colmask_destroy(s2), fm_colmask_destroy(m);
    free(q), free(kv), free(o), free(l), free(o1), free(l1), free(o2), free(l2), free(k1), free(k2);
  }
}

Test(cp_run, lse_merge_of_empty_sides) {
  double o[2] = {0, 0}, l[1] = {-INFINITY}, op[2] = {1.5, -2}, lp[1] = {0.25};
  fm_cp_lse_merge(1, 1, 1, 2, o, l, op, lp); /* nothing yet: the partial is the result */
  cr_assert_float_eq(o[0], 1.5, 1e-15);
  cr_assert_float_eq(o[1], -2, 1e-15);
  cr_assert_float_eq(l[0], 0.25, 1e-15);
  double none[1] = {-INFINITY}, zero[2] = {7, 7};
  fm_cp_lse_merge(1, 1, 1, 2, o, l, zero, none); /* a side that saw nothing changes nothing */
  cr_assert_float_eq(o[0], 1.5, 1e-15);
  cr_assert_float_eq(l[0], 0.25, 1e-15);
  double e[2] = {0, 0}, el[1] = {-INFINITY};
  fm_cp_lse_merge(1, 1, 1, 2, e, el, zero, none); /* neither: O stays 0, LSE -inf */
  cr_assert(e[0] == 0 && e[1] == 0 && isinf(el[0]) && el[0] < 0);
  double a[1] = {1}, al[1] = {log(2.0)}, b[1] = {4}, bl[1] = {log(6.0)};
  fm_cp_lse_merge(1, 1, 1, 1, a, al, b, bl); /* weights 2 and 6 of 8 */
  cr_assert_float_eq(a[0], (2 * 1 + 6 * 4) / 8.0, 1e-14);
  cr_assert_float_eq(al[0], log(8.0), 1e-14);
}

Test(cp_run, fill_at_an_offset_is_a_slice_of_the_whole) {
  uint16_t whole[4096], part[1000];
  fm_cp_fill_bf16(whole, 4096, 9, 0);
  fm_cp_fill_bf16(part, 1000, 9, 3000);
  cr_assert_eq(memcmp(part, whole + 3000, sizeof part), 0);
  int nonzero = 0;
  double sum2 = 0;
  for (int i = 0; i < 4096; i++) {
    float x = fm_bf16_to_f32(whole[i]);
    nonzero += x != 0;
    sum2 += (double)x * x;
  }
  cr_assert_gt(nonzero, 4000);
  cr_assert(sum2 / 4096 > 0.7 && sum2 / 4096 < 1.3, "variance %g, expected about 1", sum2 / 4096);
  fm_cp_fill_bf16(part, 1000, 10, 3000);
  cr_assert_neq(memcmp(part, whole + 3000, sizeof part), 0, "another seed, other values");
}

/* ---- the schedule ------------------------------------------------------------------ */

static fm_cp_plan *plan_of(const fm_colmask *m, int32_t ranks, fm_cp_sharding s, int32_t head_dim) {
  fm_cp_options o = {.ranks = ranks, .shardings = 1u << s, .kernel = FM_KERNEL_SM90,
                     .head_dim = head_dim, .chunk = head_dim == 64 ? 384 : 128};
  fm_cp_plan *p = NULL;
  fm_err err;
  cr_assert_eq(fm_cp_plan_create(m, &o, &p, &err), FM_OK, "%s", err.msg);
  return p;
}

Test(cp_run, schedule_follows_the_plan) {
  fm_colmask *m = family("causal_document", 2048, NULL);
  for (int s = 0; s < FM_CP_NSHARDINGS; s++)
    for (int x = 0; x < FM_CP_NEXCHANGES; x++) {
      const int32_t P = 4;
      fm_cp_plan *p = plan_of(m, P, (fm_cp_sharding)s, 128);
      const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(p, (fm_cp_sharding)s);
      fm_cp_schedule *sc = NULL;
      fm_err err;
      cr_assert_eq(fm_cp_schedule_create(sp, 2048, P, (fm_cp_exchange)x, &sc, &err), FM_OK, "%s", err.msg);
      for (int32_t r = 0; r < P; r++) {
        const fm_cp_rank_schedule *rs = &sc->rank[r];
        cr_assert_eq(rs->rows, sp->ranks[r].rows);
        cr_assert_eq(rs->recv_rows, sp->ranks[r].kv_recv_rows, "the plan's K/V rows");
        int32_t own = 0;
        for (int32_t g = 0; g < rs->nown; g++) {
          cr_assert_eq(rs->own[g].local0, own);
          own += rs->own[g].row1 - rs->own[g].row0;
          cr_assert_eq(fm_cp_owner(sp, rs->own[g].row0), r);
        }
        cr_assert_eq(own, rs->rows);
        int32_t needed = 0, sources = 0;
        for (int32_t k = 0; k < sp->nsegments; k++) needed += sp->need[(int64_t)r * sp->nsegments + k];
        int32_t listed = 0;
        for (int32_t q = 0; q < P; q++) {
          const fm_cp_link *in = &rs->in[q];
          const fm_cp_link *back = &sc->rank[q].out[r];
          cr_assert_eq(back->n, in->n, "out[%d][%d] is in[%d][%d]", q, r, r, q);
          int32_t off = 0;
          for (int32_t i = 0; i < in->n; i++) {
            cr_assert_eq(fm_cp_owner(sp, in->move[i].row0), q);
            cr_assert_eq(in->move[i].off, x == FM_CP_RING ? off : in->move[i].row0);
            cr_assert(!memcmp(&in->move[i], &back->move[i], sizeof in->move[i]));
            off += in->move[i].row1 - in->move[i].row0;
          }
          listed += in->n;
          sources += in->n > 0;
          if (in->rows) cr_assert_leq(in->rows, x == FM_CP_RING ? rs->ring_max_cols : 2048);
        }
        cr_assert_eq(listed, needed);
        cr_assert_eq(rs->nsteps, 1 + sources);
        cr_assert_eq(rs->step[0].s, 0);
        cr_assert_eq(rs->step[0].ncols, rs->rows);
        for (int32_t i = 1; i < rs->nsteps; i++) {
          cr_assert_gt(rs->step[i].s, rs->step[i - 1].s, "ring order");
          cr_assert_eq(rs->step[i].source, (r - rs->step[i].s + P) % P);
          cr_assert_eq(rs->step[i].ncols, rs->in[rs->step[i].source].rows);
        }
      }
      fm_cp_schedule_destroy(sc);
      fm_cp_plan_destroy(p);
    }
  fm_colmask_destroy(m);
}

/* ---- the messages ------------------------------------------------------------------ */

/* The messages of link l carry its moves' rows exactly, in order (K/V: from
 * the owner's rows, ring local0 / allgather row0, to off; back: from off to
 * the running row), and no two consecutive messages could have been one. */
static void check_msgs(const fm_cp_link *l, int ring) {
  for (int side = 0; side < 2; side++) {
    const fm_cp_msg *m = side ? l->back : l->kv;
    int32_t n = side ? l->nback : l->nkv, i = 0, o = 0, run = 0, rows = 0;
    for (int32_t j = 0; j < l->n; j++) {
      const fm_cp_move *mv = &l->move[j];
      int32_t src = side ? mv->off : ring ? mv->local0 : mv->row0, dst = side ? run : mv->off;
      cr_assert_lt(i, n, "more moves than messages carry");
      cr_assert_eq(m[i].src + o, src, "side %d move %d: source row", side, j);
      cr_assert_eq(m[i].dst + o, dst, "side %d move %d: destination row", side, j);
      o += mv->row1 - mv->row0;
      run += mv->row1 - mv->row0;
      cr_assert_leq(o, m[i].rows);
      if (o == m[i].rows) i++, o = 0;
    }
    cr_assert_eq(i, n, "every message carries moves");
    for (int32_t k = 0; k < n; k++) rows += m[k].rows;
    cr_assert_eq(rows, l->rows, "the rows moved are the moves'");
    for (int32_t k = 0; k + 1 < n; k++)
      cr_assert(m[k].src + m[k].rows != m[k + 1].src || m[k].dst + m[k].rows != m[k + 1].dst,
                "messages %d and %d are one", k, k + 1);
  }
}

static void link_counts(const fm_cp_schedule *sc, int64_t *kv, int64_t *back) {
  *kv = *back = 0;
  for (int32_t r = 0; r < sc->ranks; r++)
    for (int32_t q = 0; q < sc->ranks; q++) {
      check_msgs(&sc->rank[r].in[q], sc->exchange == FM_CP_RING);
      *kv += sc->rank[r].in[q].nkv;
      *back += sc->rank[r].in[q].nback;
    }
}

Test(cp_run, messages_of_a_contiguous_split) {
  /* one segment per owner: every link is at most one move, so one message per
   * source, tensor and batch, both ways, whatever the exchange */
  fm_colmask *m = family("causal_document", 2048, NULL);
  fm_cp_plan *p = plan_of(m, 4, FM_CP_CONTIGUOUS, 128);
  const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(p, FM_CP_CONTIGUOUS);
  for (int x = 0; x < FM_CP_NEXCHANGES; x++) {
    fm_cp_schedule *sc = NULL;
    cr_assert_eq(fm_cp_schedule_create(sp, 2048, 4, (fm_cp_exchange)x, &sc, NULL), FM_OK);
    int64_t kv, back, sources = 0;
    link_counts(sc, &kv, &back);
    for (int32_t r = 0; r < 4; r++) {
      sources += sp->ranks[r].kv_sources;
      for (int32_t q = 0; q < 4; q++) cr_assert_eq(sc->rank[r].in[q].nkv, sc->rank[r].in[q].n > 0);
    }
    cr_assert_gt(sources, 0);
    cr_assert_eq(kv, sources);
    cr_assert_eq(back, sources);
    fm_cp_schedule_destroy(sc);
  }
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

Test(cp_run, messages_of_a_mask_aware_causal_split) {
  /* causal, S = 1024, chunks of 128 (8 chunks c0..c7), 2 ranks, sm90 (forward
   * tile 128 x 128): chunk j visits j + 1 forward tiles. Greedy, largest
   * first onto the least-loaded rank (ties: fewer chunks, then the lower
   * rank): c7 -> r0 (8), c6 -> r1 (7), c5 -> r1 (13), c4 -> r0 (13), c3 -> r0
   * (17; tie at 13 with two chunks each), c2 -> r1 (16), c1 -> r1 (18), c0 ->
   * r0 (18). Segments: A [0, 128) r0, B [128, 384) r1, C [384, 640) r0, D
   * [640, 896) r1, E [896, 1024) r0; r0 stores A, C, E at local rows 0, 128,
   * 384, r1 B, D at 0, 256. Causally r0's C needs B and its E needs B and D;
   * r1's B needs A and its D needs A and C. Each link moves two segments that
   * are consecutive in the owner's storage: the ring (off: concatenated)
   * sends each as one message, the all-gather (global rows 128, 640 and 0,
   * 384) as two. The partials go back from the receiver's off (ring:
   * concatenated; all-gather: global rows) to a concatenated buffer: one
   * message per link for the ring, two for the all-gather. */
  fm_colmask *m = family("causal", 1024, NULL);
  fm_cp_plan *p = plan_of(m, 2, FM_CP_MASK_AWARE, 128);
  const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(p, FM_CP_MASK_AWARE);
  const fm_cp_segment want[] = {{0, 128, 0}, {128, 384, 1}, {384, 640, 0}, {640, 896, 1}, {896, 1024, 0}};
  cr_assert_eq(sp->nsegments, 5);
  cr_assert(!memcmp(sp->segments, want, sizeof want), "the greedy assignment derived above");
  for (int x = 0; x < FM_CP_NEXCHANGES; x++) {
    fm_cp_schedule *sc = NULL;
    cr_assert_eq(fm_cp_schedule_create(sp, 1024, 2, (fm_cp_exchange)x, &sc, NULL), FM_OK);
    int64_t kv, back;
    link_counts(sc, &kv, &back);
    cr_assert_eq(sc->rank[0].in[1].n, 2);
    cr_assert_eq(sc->rank[1].in[0].n, 2);
    cr_assert_eq(sc->rank[0].in[1].rows, 512);
    cr_assert_eq(sc->rank[1].in[0].rows, 384);
    cr_assert_eq(kv, x == FM_CP_RING ? 2 : 4, "%s", fm_cp_exchange_name((fm_cp_exchange)x));
    cr_assert_eq(back, x == FM_CP_RING ? 2 : 4, "%s", fm_cp_exchange_name((fm_cp_exchange)x));
    fm_cp_fake_opts o = {.batch = 2, .heads = 1, .head_dim = 128, .seed = 4, .backward = 1};
    fm_cp_fake_result r;
    fm_err err;
    cr_assert_eq(fm_cp_fake_run(m, sp, sc, &o, &r, &err), FM_OK, "%s", err.msg);
    cr_assert(r.ok);
    cr_assert_eq(r.messages[0], kv * 2 * 2, "K and V of 2 batches");
    cr_assert_eq(r.messages[1], back * 2 * 2);
    cr_assert_eq(r.sent_rows[0], 512 + 384);
    fm_cp_schedule_destroy(sc);
  }
  fm_cp_plan_destroy(p);
  fm_colmask_destroy(m);
}

/* ---- the fake of the exchange ------------------------------------------------------ */

static void run_fake(const fm_colmask *m, const char *what, int32_t P, int32_t B, int32_t H, int32_t D) {
  for (int s = 0; s < FM_CP_NSHARDINGS; s++) {
    fm_cp_plan *p = plan_of(m, P, (fm_cp_sharding)s, D);
    const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(p, (fm_cp_sharding)s);
    for (int x = 0; x < FM_CP_NEXCHANGES; x++) {
      fm_cp_schedule *sc = NULL;
      fm_err err;
      cr_assert_eq(fm_cp_schedule_create(sp, fm_colmask_sq(m), P, (fm_cp_exchange)x, &sc, &err), FM_OK);
      fm_cp_fake_opts o = {.batch = B, .heads = H, .head_dim = D, .seed = 11, .backward = 1};
      fm_cp_fake_result r;
      cr_assert_eq(fm_cp_fake_run(m, sp, sc, &o, &r, &err), FM_OK, "%s %s %s: %s", what,
                   fm_cp_sharding_name((fm_cp_sharding)s), fm_cp_exchange_name((fm_cp_exchange)x), err.msg);
      for (int t = 0; t < 5; t++)
        cr_expect_eq(r.cmp[t].bad, 0, "%s, %s, %s: %s has %lld elements off (max abs %g)", what,
                     fm_cp_sharding_name((fm_cp_sharding)s), fm_cp_exchange_name((fm_cp_exchange)x),
                     fm_ref_quantity_name((fm_ref_quantity)t), (long long)r.cmp[t].bad, r.cmp[t].max_abs);
      cr_assert(r.ok);
      int64_t recv = 0;
      for (int32_t k = 0; k < P; k++) recv += sp->ranks[k].kv_recv_rows;
      cr_assert_eq(r.sent_rows[0], recv, "K/V moved = the plan's needs");
      cr_assert_eq(r.sent_rows[1], recv, "as many partial rows go back");
      int64_t kv, back;
      link_counts(sc, &kv, &back);
      cr_assert_eq(r.messages[0], kv * 2 * B, "the executor posts the schedule's messages");
      cr_assert_eq(r.messages[1], back * 2 * B);
      fm_cp_schedule_destroy(sc);
    }
    fm_cp_plan_destroy(p);
  }
}

Test(cp_run, fake_causal) {
  fm_colmask *m = family("causal", 768, NULL);
  run_fake(m, "causal", 3, 1, 1, 128);
  fm_colmask_destroy(m);
}

Test(cp_run, fake_causal_document) {
  fm_colmask *m = family("causal_document", 768, NULL);
  run_fake(m, "causal_document", 3, 2, 1, 128);
  fm_colmask_destroy(m);
}

Test(cp_run, fake_sliding_window) {
  fm_colmask *m = family("sliding_window", 1024, "w=100");
  run_fake(m, "sliding_window", 4, 1, 1, 128);
  fm_colmask_destroy(m);
}

Test(cp_run, fake_full) {
  fm_colmask *m = family("full", 512, NULL);
  run_fake(m, "full", 2, 1, 1, 128);
  fm_colmask_destroy(m);
}

Test(cp_run, fake_share_question) {
  fm_colmask *m = family("share_question", 768, NULL);
  run_fake(m, "share_question", 3, 1, 1, 128);
  fm_colmask_destroy(m);
}

Test(cp_run, fake_per_head) {
  fm_colmask *m = per_head(768);
  run_fake(m, "per-head", 3, 1, 2, 128);
  fm_colmask_destroy(m);
}

Test(cp_run, fake_rows_without_keys) {
  fm_colmask *m = blind_rows(768);
  run_fake(m, "blind rows", 3, 1, 1, 128);
  fm_colmask_destroy(m);
}

Test(cp_run, fake_head_dim_64) {
  fm_colmask *m = family("causal_document", 1536, NULL); /* granule 384 */
  run_fake(m, "causal_document D=64", 2, 1, 1, 64);
  fm_colmask_destroy(m);
}

/* ---- the command --------------------------------------------------------------------------- */

/* Member `key` of object `obj` in the JSON text `text` (obj NULL: the root), as a string. */
static void json_member(const char *text, const char *obj, const char *key, char *out, size_t n) {
  fm_jdoc *d = NULL;
  fm_err err;
  cr_assert_eq(fm_jdoc_parse(text, strlen(text), "output", &d, &err), FM_OK, "%s", err.msg);
  const fm_jv *v = fm_jdoc_root(d);
  if (obj) v = fm_jv_get(v, obj);
  const char *str = fm_jv_string(fm_jv_get(v, key));
  cr_assert_not_null(str, "no %s.%s in %s", obj ? obj : "", key, text);
  snprintf(out, n, "%s", str);
  fm_jdoc_free(d);
}

Test(cp_run_cli, cpu_run_passes_and_plan_runs_the_best_sharding) {
  /* --cpu prints PASS; with --json, --sharding plan runs the sharding (and exchange) that
   * cp-plan's "best" names. At this size the launches' fixed costs make contiguous the best
   * (fewest segments), so the run is not cp-run's default, mask-aware (the choice itself:
   * cp_plan.best_is_the_least_predicted_step_or_the_best_balance) */
  const char *mask = "--family causal --seqlen 4096 --heads 1 --ranks 4 --chunk 256";
  char a[512], best[32] = "", bx[32] = "", ran[32] = "", rx[32] = "";
  fmt_result r;
  snprintf(a, sizeof a, "cp-run %s --sharding zigzag --cpu", mask);
  fmt_run(&r, a);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "PASS"), "%s", r.out);
  snprintf(a, sizeof a, "cp-plan %s --json", mask);
  fmt_run(&r, a);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_member(r.out, "best", "sharding", best, sizeof best);
  json_member(r.out, "best", "exchange", bx, sizeof bx);
  cr_assert_str_neq(best, "mask-aware");
  snprintf(a, sizeof a, "cp-run %s --sharding plan --cpu --json", mask);
  fmt_run(&r, a);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_member(r.out, NULL, "sharding", ran, sizeof ran);
  json_member(r.out, NULL, "exchange", rx, sizeof rx);
  cr_assert_str_eq(ran, best);
  cr_assert_str_eq(rx, bx);
}
