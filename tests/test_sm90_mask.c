/* Tests of the sm90 forward's partial-tile mask methods (kernels/fm_sm90_mask.h),
 * on the host: the producer's slices written in both layouts, then every
 * thread of every consumer warp reads them back as the kernel does, and each
 * method's decision for each of the thread's 64 accumulator elements must
 * equal the other's and the element rule (docs/DESIGN.md, "Semantics";
 * core/fm_colmask.h, core/fm_tile_rule.h). Tiles of 64, 128 and 192 rows x 128
 * columns over random interval masks, causal and not, Sq != Sk, Sk not a
 * multiple of 128: tiles cut by the causal diagonal, by interval edges and by
 * Sk. The kernel's own arithmetic is in the header these functions come
 * from; kernels/PERF_NOTES.md, "R2P (issue 25): design and SASS". */
#include <criterion/criterion.h>

#include "fm_sm90_mask.h"
#include "fm_test_util.h"

#define MAX_WARPS 12 /* 192 rows: three consumer warpgroups (head dim 64) */

/* One tile's slices as the producer writes them: uint16 [warp][slot], in the
 * SLICES layout (sl) and the R2P layout (rp). Columns past Sk hide every row;
 * the causal triangle is folded into the upper interval (fm_sm90_fwd.cuh). */
typedef struct tile_slices {
  uint16_t sl[MAX_WARPS * FM90M_BC], rp[MAX_WARPS * FM90M_BC];
} tile_slices;

static void produce(const fm_colmask *m, int32_t r0, int nwarps, int32_t j0, tile_slices *t) {
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  for (int c = 0; c < FM90M_BC; c++) {
    const int32_t j = j0 + c;
    int32_t lts = 0, lte = INT32_MAX, us = 0, ue = 0;
    if (j < sk) {
      lts = fm_colmask_cvec(m, 0, FM_LTS)[j];
      lte = fm_colmask_cvec(m, 0, FM_LTE)[j];
      fm_effective_upper(fm_colmask_cvec(m, 0, FM_UTS)[j], fm_colmask_cvec(m, 0, FM_UTE)[j],
                         fm_colmask_causal(m), j, sq, sk, &us, &ue);
    }
    for (int w = 0; w < nwarps; w++) {
      const uint16_t v = (uint16_t)fm90m_row_slice(r0 + 16 * w, lts, lte, us, ue);
      t->sl[w * FM90M_BC + fm90m_slot(0, c)] = v;
      t->rp[w * FM90M_BC + fm90m_slot(1, c)] = v;
    }
  }
}

/* 32-bit word k of a warp's 128 uint16 (little-endian, as the GPU reads it). */
static uint32_t word32(const uint16_t *warp, int k) {
  return (uint32_t)warp[2 * k] | (uint32_t)warp[2 * k + 1] << 16;
}

/* SLICES (mask_slices in fm_sm90_fwd.cuh): element idx of lane's fragment. */
static int slices_masked(const uint16_t *warp, int lane, int idx) {
  const int g = lane >> 2, c4 = lane & 3, n = idx >> 2, hr = (idx >> 1) & 1, e = idx & 1;
  const uint32_t x = word32(warp, fm90m_slices_word(n, c4)) >> g;
  return (x >> fm90m_slices_bit(e, hr)) & 1;
}

/* R2P (mask_r2p): the thread's four 128-bit loads of 4 consecutive words,
 * its three words, then one bit per element. */
static void r2p_words(const uint16_t *warp, int lane, uint32_t acc[FM90M_R2P_GROUPS]) {
  const int g = lane >> 2, c4 = lane & 3;
  uint32_t w[FM90M_NB];
  for (int q = 0; q < FM90M_NB / 4; q++)
    for (int t = 0; t < 4; t++) w[4 * q + t] = word32(warp, fm90m_r2p_word(4 * q, c4) + t);
  fm90m_r2p_words(w, g, acc);
}
static int r2p_masked(const uint32_t acc[FM90M_R2P_GROUPS], int idx) {
  const int n = idx >> 2, hr = (idx >> 1) & 1, e = idx & 1;
  return (acc[fm90m_r2p_group(n)] >> fm90m_r2p_bit(n, e, hr)) & 1;
}

/* The element rule: a column past Sk is masked; a row past Sq (computed by
 * the kernel, clipped by its store) by the effective intervals. */
static int rule_masked(const fm_colmask *m, int32_t i, int32_t j) {
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  if (j >= sk) return 1;
  if (i < sq) return fm_colmask_masked(m, 0, i, j);
  int32_t us, ue;
  fm_effective_upper(fm_colmask_cvec(m, 0, FM_UTS)[j], fm_colmask_cvec(m, 0, FM_UTE)[j], fm_colmask_causal(m), j,
                     sq, sk, &us, &ue);
  return fm_masked_effective(i, fm_colmask_cvec(m, 0, FM_LTS)[j], fm_colmask_cvec(m, 0, FM_LTE)[j], us, ue);
}

/* What the tiles checked covered: tiles with masked and visible elements, and
 * among them those a causal diagonal, an interval edge or Sk cuts. */
typedef struct coverage {
  long partial, by_diagonal, by_edge, by_sk, elements;
} coverage;

static int cuts(int32_t v, int32_t r0, int32_t r1) { return v > r0 && v < r1; }

static void note_tile(const fm_colmask *m, int32_t r0, int32_t r1, int32_t j0, int nmasked, int nelem,
                      coverage *cv) {
  if (nmasked == 0 || nmasked == nelem) return;
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  int diag = 0, edge = 0;
  for (int32_t j = j0; j < j0 + FM90M_BC && j < sk; j++) {
    diag |= fm_colmask_causal(m) && cuts(fm_causal_limit(j, sq, sk), r0, r1);
    for (int v = 0; v < 4; v++) edge |= cuts(fm_colmask_cvec(m, 0, (fm_vec)v)[j], r0, r1);
  }
  cv->partial++;
  cv->by_diagonal += diag;
  cv->by_edge += edge;
  cv->by_sk += j0 + FM90M_BC > sk;
}

/* Every tile of mask m at br rows: both methods against each other and the rule. */
static void check_mask(const fm_colmask *m, int br, coverage *cv) {
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), nwarps = br / 16;
  static tile_slices t;
  for (int32_t r0 = 0; r0 < sq; r0 += br)
    for (int32_t j0 = 0; j0 < sk; j0 += FM90M_BC) {
      produce(m, r0, nwarps, j0, &t);
      int nmasked = 0;
      for (int w = 0; w < nwarps; w++)
        for (int lane = 0; lane < 32; lane++) {
          uint32_t acc[FM90M_R2P_GROUPS];
          r2p_words(t.rp + w * FM90M_BC, lane, acc);
          for (int idx = 0; idx < 4 * FM90M_NB; idx++) {
            const int32_t i = r0 + 16 * w + fm90m_elem_row(lane, idx), j = j0 + fm90m_elem_col(lane, idx);
            const int a = slices_masked(t.sl + w * FM90M_BC, lane, idx), b = r2p_masked(acc, idx);
            const int want = rule_masked(m, i, j);
            if (a != b || a != want)
              cr_assert_fail("Sq=%d Sk=%d causal=%d br=%d tile rows %d.. cols %d..: warp %d lane %d element %d "
                       "(row %d, col %d): slices %d, r2p %d, rule %d",
                       sq, sk, fm_colmask_causal(m), br, r0, j0, w, lane, idx, i, j, a, b, want);
            nmasked += want;
          }
        }
      cv->elements += (long)nwarps * 32 * 4 * FM90M_NB;
      note_tile(m, r0, r0 + br < sq ? r0 + br : sq, j0, nmasked, nwarps * 32 * 4 * FM90M_NB, cv);
    }
}

/* A causal sliding window with a sink: every band tile is cut by both the
 * diagonal and the window's lower edge. */
static fm_colmask *window_mask(int32_t sq, int32_t sk, int32_t w) {
  fm_colmask *m = NULL;
  if (fm_colmask_create(sq, sk, 1, 1, 1, &m, NULL) != FM_OK) return NULL;
  for (int32_t j = 0; j < sk; j++) {
    const int32_t lo = fm_causal_limit(j, sq, sk) + w;
    fm_colmask_vec(m, 0, FM_LTS)[j] = j < 4 ? sq : (lo < sq ? lo : sq);
    fm_colmask_vec(m, 0, FM_LTE)[j] = sq;
    fm_colmask_vec(m, 0, FM_UTS)[j] = 0;
    fm_colmask_vec(m, 0, FM_UTE)[j] = 0;
  }
  return m;
}

Test(sm90_mask, ownership_covers_the_tile_once) {
  static int seen[16][FM90M_BC];
  memset(seen, 0, sizeof seen);
  for (int lane = 0; lane < 32; lane++)
    for (int idx = 0; idx < 4 * FM90M_NB; idx++) seen[fm90m_elem_row(lane, idx)][fm90m_elem_col(lane, idx)]++;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < FM90M_BC; c++) cr_assert_eq(seen[r][c], 1, "row %d col %d owned %d times", r, c, seen[r][c]);
}

Test(sm90_mask, layouts_are_permutations) {
  for (int r2p = 0; r2p < 2; r2p++) {
    int seen[FM90M_BC] = {0};
    for (int c = 0; c < FM90M_BC; c++) seen[fm90m_slot(r2p, c)]++;
    for (int k = 0; k < FM90M_BC; k++) cr_assert_eq(seen[k], 1, "layout %d slot %d", r2p, k);
  }
}

/* What lets ptxas use R2P: a group's bits of one byte are bits 1..len of that
 * byte, one per element, none shared; bit 0 and bit 7 stay clear. */
Test(sm90_mask, r2p_bits_fill_bytes_from_bit_1) {
  for (int j = 0; j < FM90M_R2P_GROUPS; j++) {
    uint32_t used = 0;
    for (int n = fm90m_r2p_first(j); n < fm90m_r2p_first(j) + fm90m_r2p_len(j); n++) {
      cr_assert_eq(fm90m_r2p_group(n), j);
      for (int e = 0; e < 2; e++)
        for (int hr = 0; hr < 2; hr++) {
          const int b = fm90m_r2p_bit(n, e, hr);
          cr_assert(b / 8 == 2 * e + hr && b % 8 >= 1 && b % 8 <= fm90m_r2p_len(j), "n %d e %d hr %d: bit %d", n, e,
                    hr, b);
          cr_assert(!(used >> b & 1), "bit %d used twice", b);
          used |= 1u << b;
        }
    }
  }
  cr_assert_eq(fm90m_r2p_first(FM90M_R2P_GROUPS - 1) + fm90m_r2p_len(FM90M_R2P_GROUPS - 1), FM90M_NB);
}

Test(sm90_mask, methods_agree_with_the_rule_on_random_masks) {
  fm_rng r;
  fm_rng_seed(&r, 25, 0);
  coverage cv = {0};
  for (int iter = 0; iter < 48; iter++) {
    const int32_t sq = 1 + (int32_t)fm_rng_below(&r, 600), sk = 1 + (int32_t)fm_rng_below(&r, 600);
    const int causal = iter & 1;
    fm_colmask *m = fmt_random_mask(&r, sq, sk, 1, 1, causal);
    cr_assert_not_null(m);
    const int brs[3] = {64, 128, 192};
    for (int k = 0; k < 3; k++) check_mask(m, brs[k], &cv);
    fm_colmask_destroy(m);
  }
  cr_assert(cv.partial > 100 && cv.by_diagonal > 20 && cv.by_edge > 100 && cv.by_sk > 20,
            "coverage: %ld partial tiles (%ld by the diagonal, %ld by an edge, %ld by Sk)", cv.partial,
            cv.by_diagonal, cv.by_edge, cv.by_sk);
}

Test(sm90_mask, methods_agree_with_the_rule_on_windows) {
  coverage cv = {0};
  const int32_t shapes[][3] = {{700, 700, 100}, {513, 1000, 37}, {1000, 513, 300}, {384, 384, 1}, {257, 129, 64}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    fm_colmask *m = window_mask(shapes[s][0], shapes[s][1], shapes[s][2]);
    cr_assert_not_null(m);
    cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
    for (int br = 64; br <= 192; br += 64) check_mask(m, br, &cv);
    fm_colmask_destroy(m);
  }
  cr_assert(cv.partial > 20 && cv.by_diagonal > 10, "coverage: %ld partial tiles (%ld by the diagonal)", cv.partial,
            cv.by_diagonal);
}
