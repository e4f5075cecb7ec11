/* Tests of the sm90 kernels' partial-tile mask methods (kernels/fm_sm90_mask.h),
 * on the host.
 *
 * Forward: the producer's slices (one layout for both methods), then every
 * thread of every consumer warp reads them back as the kernel does, and each
 * method's decision for each of the thread's 64 accumulator elements must
 * equal the other's and the element rule (docs/DESIGN.md, "Semantics";
 * core/fm_colmask.h, core/fm_tile_rule.h). Tiles of 64, 128 and 192 rows x 128
 * columns over random interval masks, causal and not, Sq != Sk, Sk not a
 * multiple of 128: tiles cut by the causal diagonal, by interval edges and by
 * Sk.
 *
 * Backward (the transposed tile: keys as rows, queries as columns): every
 * thread of both consumer warpgroups builds its keys' (start, length) pairs
 * as fm_sm90_bwd.cuh's key_intervals does, their R2P bit positions as its
 * store_keys does, and at every query tile of the mask (past Sq too) its two
 * words; each of its 32 elements' bits must equal the SLICES backward's
 * compare and the element rule; and on raw int32 intervals (any start, any
 * length >= 0, tiles up to 2^31 queries) the R2P bit must equal the compare.
 * WORDS (the forward's method words): the workspace's budget, its layout (a
 * tile's words one contiguous block of a bulk copy's size and alignment, a
 * warp's reads of a word consecutive), and each consumer thread's words through it
 * (the producer's bulk copy into a stage buffer, the thread's read there)
 * against the rule.
 * The kernels' own arithmetic is in the header these functions come from;
 * kernels/PERF_NOTES.md, "R2P (issue 25): design and SASS". */
#include <criterion/criterion.h>

#include "fm_sm90_mask.h"
#include "fm_test_util.h"

#define MAX_WARPS 12 /* 192 rows: three consumer warpgroups (head dim 64) */

/* One tile's slices as the producer writes them: uint16 [warp][column], read
 * by both methods. Columns past Sk hide every row; the causal triangle is
 * folded into the upper interval (fm_sm90_fwd.cuh). */
typedef struct tile_slices {
  uint16_t sl[MAX_WARPS * FM90M_BC];
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
      t->sl[w * FM90M_BC + c] = v;
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

/* R2P (mask_r2p): the thread's 16 words, as SLICES reads them, gathered
 * into its three words, then one bit per element. */
static void r2p_words(const uint16_t *warp, int lane, uint32_t acc[FM90M_R2P_GROUPS]) {
  const int g = lane >> 2, c4 = lane & 3;
  uint32_t w[FM90M_NB];
  for (int n = 0; n < FM90M_NB; n++) w[n] = word32(warp, fm90m_slices_word(n, c4));
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
          r2p_words(t.sl + w * FM90M_BC, lane, acc);
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

/* The four lanes c4 of a row group read the warp's 64 words once each, and
 * word 4 n + c4 holds the columns of their block n (both methods). */
Test(sm90_mask, thread_words_cover_the_warp_once) {
  int seen[FM90M_BC / 2] = {0};
  for (int c4 = 0; c4 < 4; c4++)
    for (int n = 0; n < FM90M_NB; n++) {
      const int k = fm90m_slices_word(n, c4);
      seen[k]++;
      for (int e = 0; e < 2; e++) cr_assert_eq(2 * k + e, fm90m_elem_col(c4, 4 * n + e), "n %d c4 %d e %d", n, c4, e);
    }
  for (int k = 0; k < FM90M_BC / 2; k++) cr_assert_eq(seen[k], 1, "word %d", k);
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

/* The window masks both passes' method checks run on: (Sq, Sk, width). */
static const int32_t WINDOWS[][3] = {{700, 700, 100}, {513, 1000, 37}, {1000, 513, 300}, {384, 384, 1}, {257, 129, 64}};

/* The random masks reached every way a tile is cut, often enough to count. */
static void assert_random_coverage(const coverage *cv) {
  cr_assert(cv->partial > 100 && cv->by_diagonal > 20 && cv->by_edge > 100 && cv->by_sk > 20,
            "coverage: %ld partial tiles (%ld by the diagonal, %ld by an edge, %ld by Sk)", cv->partial,
            cv->by_diagonal, cv->by_edge, cv->by_sk);
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
  assert_random_coverage(&cv);
}

Test(sm90_mask, methods_agree_with_the_rule_on_windows) {
  coverage cv = {0};
  for (size_t s = 0; s < sizeof WINDOWS / sizeof WINDOWS[0]; s++) {
    fm_colmask *m = window_mask(WINDOWS[s][0], WINDOWS[s][1], WINDOWS[s][2]);
    cr_assert_not_null(m);
    cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
    for (int br = 64; br <= 192; br += 64) check_mask(m, br, &cv);
    fm_colmask_destroy(m);
  }
  cr_assert(cv.partial > 20 && cv.by_diagonal > 10, "coverage: %ld partial tiles (%ld by the diagonal)", cv.partial,
            cv.by_diagonal);
}

/* ========================================== WORDS (the forward's method words) */

/* The budget decision on the masks it was sized for (fm_sm90_mask.h,
 * FM90M_WORDS_BUDGET): one set at 8K and 32K fits at both head dims (row
 * tiles of 128 rows and 256 consumer threads, 192 rows and 384), one set at
 * 128K and random eviction's 512 per-head sets at 8K fall back to R2P. */
Test(sm90_mask, words_budget_decides_the_fallback) {
  cr_assert_eq(fm90m_words_bytes(1, 64, 64, 256), (uint64_t)64 * 64 * 256 * 12); /* 12 MiB */
  cr_assert(fm90m_words_fit(1, 64, 64, 256));
  cr_assert_eq(fm90m_words_bytes(1, 256, 256, 256), (uint64_t)192 << 20);
  cr_assert(fm90m_words_fit(1, 256, 256, 256));
  cr_assert(fm90m_words_fit(1, 171, 256, 384)); /* 32K, head dim 64: 192.4 MiB */
  cr_assert(!fm90m_words_fit(1, 1024, 1024, 256)); /* 128K: 3 GiB */
  cr_assert(!fm90m_words_fit(512, 64, 64, 256));   /* random eviction 8K: 6 GiB */
  /* the edge: the most tiles within the budget fit, one tile more does not */
  const int64_t tiles = (int64_t)(FM90M_WORDS_BUDGET / (256 * 12));
  cr_assert(fm90m_words_bytes(1, 1, tiles, 256) <= FM90M_WORDS_BUDGET);
  cr_assert(fm90m_words_bytes(1, 1, tiles + 1, 256) > FM90M_WORDS_BUDGET);
  cr_assert(fm90m_words_fit(1, 1, tiles, 256));
  cr_assert(!fm90m_words_fit(1, 1, tiles + 1, 256));
  /* no grid, and grids whose byte count would wrap 64 bits */
  cr_assert(!fm90m_words_fit(0, 64, 64, 256));
  cr_assert(!fm90m_words_fit(1, 0, 64, 256));
  cr_assert(!fm90m_words_fit(1, 64, 64, 0));
  cr_assert(!fm90m_words_fit(INT32_MAX, INT32_MAX, INT32_MAX, 384));
  cr_assert(!fm90m_words_fit(65535, (int64_t)1 << 30, 2, 256));
  cr_assert_eq(fm90m_words_bytes((int64_t)1 << 30, (int64_t)1 << 30, 4, 1), 0); /* 12 x 2^62 wraps to 0 */
  cr_assert(!fm90m_words_fit((int64_t)1 << 30, (int64_t)1 << 30, 4, 1));
}

/* [tile][j][thread]: every word of a grid once; a tile's words one block of
 * fm90m_words_tile_bytes (a multiple of 16 bytes) at a multiple of 16 bytes,
 * the slots of the stage buffer the producer's one bulk copy fills (index =
 * the tile's block + the slot, the slots a permutation of the block); a
 * warp's 32 reads of word j consecutive (128 bytes: no bank conflict); tiles
 * row-major over (set, row tile, key tile). */
Test(sm90_mask, words_layout_is_thread_native) {
  enum { NSETS = 2, TR = 3, TC = 5 };
  const int threads_of[2] = {256, 384};
  for (int k = 0; k < 2; k++) {
    const int threads = threads_of[k];
    const int64_t n = (int64_t)fm90m_words_bytes(NSETS, TR, TC, threads) / 4;
    cr_assert_eq(fm90m_words_tile_bytes(threads), 4 * FM90M_R2P_GROUPS * threads);
    cr_assert_eq(fm90m_words_tile_bytes(threads) % 16, 0, "a bulk copy's size");
    cr_assert_eq(n, (int64_t)NSETS * TR * TC * fm90m_words_tile_words(threads));
    unsigned char *seen = calloc((size_t)n, 1);
    cr_assert_not_null(seen);
    int64_t next_tile = 0;
    for (int set = 0; set < NSETS; set++)
      for (int rt = 0; rt < TR; rt++)
        for (int t = 0; t < TC; t++) {
          const int64_t tile = fm90m_words_tile(set, rt, t, TR, TC);
          cr_assert_eq(tile, next_tile++, "set %d rt %d t %d", set, rt, t);
          const int64_t block = fm90m_words_index(tile, 0, 0, threads), tw = fm90m_words_tile_words(threads);
          cr_assert_eq(block * 4 % 16, 0, "tile %lld's block at byte %lld", (long long)tile, (long long)block * 4);
          for (int j = 0; j < FM90M_R2P_GROUPS; j++)
            for (int ctid = 0; ctid < threads; ctid++) {
              const int64_t i = fm90m_words_index(tile, j, ctid, threads);
              const int slot = fm90m_words_slot(j, ctid, threads);
              cr_assert(i >= 0 && i < n, "index %lld of %lld", (long long)i, (long long)n);
              cr_assert_eq(seen[i], 0, "index %lld twice", (long long)i);
              seen[i] = 1;
              cr_assert(slot >= 0 && slot < tw, "slot %d of %lld", slot, (long long)tw);
              cr_assert_eq(i, block + slot, "tile %lld j %d thread %d: not in the tile's block", (long long)tile, j, ctid);
              if (ctid & 31) cr_assert_eq(slot, fm90m_words_slot(j, ctid - 1, threads) + 1);
            }
        }
    for (int64_t i = 0; i < n; i++) cr_assert(seen[i], "index %lld never used", (long long)i);
    free(seen);
  }
}

/* Every tile of mask m at br rows through the workspace: words_kernel's part
 * (the tiles fm90m_words_needed keeps, from core's bounds and class; the
 * producer's slices; thread ctid's words from consumer warp ctid / 32's
 * slices, stored at fm90m_words_index), the forward producer's (one bulk copy
 * of fm90m_words_tile_bytes from the tile's block, fm90m_words_index(tile, 0,
 * 0), into a stage buffer, for the tiles it masks) and the consumer's (thread
 * tid of warpgroup cw reads its word j at fm90m_words_slot(j, 128 cw + tid)
 * of the stage buffer and applies the R2P bits to rows 64 cw + 16 warp + g,
 * + 8): each element must follow the rule; a visited tile left unwritten
 * (poison, never copied) must have no masked element in rows below Sq.
 * Returns the tiles written. */
static long check_words(const fm_colmask *m, int br) {
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), nwarps = br / 16, threads = 32 * nwarps;
  const int32_t tr = (sq + br - 1) / br, tc = (sk + FM90M_BC - 1) / FM90M_BC;
  const int64_t n = (int64_t)fm90m_words_bytes(1, tr, tc, threads) / 4;
  uint32_t *ws = malloc((size_t)n * 4);
  cr_assert_not_null(ws);
  for (int64_t i = 0; i < n; i++) ws[i] = 0xdeadbeefu;
  const int tbytes = fm90m_words_tile_bytes(threads);
  uint32_t *stage = malloc((size_t)tbytes);
  cr_assert_not_null(stage);
  static tile_slices t;
  long written = 0;
  for (int32_t rt = 0; rt < tr; rt++)
    for (int32_t kt = 0; kt < tc; kt++) {
      const int32_t r0 = rt * br, r1 = r0 + br < sq ? r0 + br : sq, j0 = kt * FM90M_BC;
      const fm_tile_bounds b = fm_tile_bounds_of_columns(
          fm_colmask_cvec(m, 0, FM_LTS), fm_colmask_cvec(m, 0, FM_LTE), fm_colmask_cvec(m, 0, FM_UTS),
          fm_colmask_cvec(m, 0, FM_UTE), j0, j0 + FM90M_BC < sk ? j0 + FM90M_BC : sk, 1, fm_colmask_causal(m), sq, sk);
      const int cls = fm_classify_minmax(&b, r0, r1);
      const int64_t tile = fm90m_words_tile(0, rt, kt, tr, tc);
      const bool needed = fm90m_words_needed(cls, kt, sk);
      if (needed) { /* words_kernel */
        produce(m, r0, nwarps, j0, &t);
        for (int ctid = 0; ctid < threads; ctid++) {
          uint32_t acc[FM90M_R2P_GROUPS];
          r2p_words(t.sl + (ctid >> 5) * FM90M_BC, ctid & 31, acc);
          for (int j = 0; j < FM90M_R2P_GROUPS; j++) ws[fm90m_words_index(tile, j, ctid, threads)] = acc[j];
        }
        written++;
      }
      if (cls == FM_TILE_MASKED) continue; /* not visited */
      for (int i = 0; i < tbytes / 4; i++) stage[i] = 0x5a5a5a5au; /* the previous tile's, say */
      if (needed) /* the producer's bulk copy, with K */
        memcpy(stage, ws + fm90m_words_index(tile, 0, 0, threads), (size_t)tbytes);
      for (int cw = 0; cw < nwarps / 4; cw++) /* the consumer */
        for (int tid = 0; tid < 128; tid++) {
          const int warp = tid >> 5, lane = tid & 31;
          uint32_t wd[FM90M_R2P_GROUPS];
          for (int j = 0; j < FM90M_R2P_GROUPS; j++) wd[j] = stage[fm90m_words_slot(j, 128 * cw + tid, threads)];
          for (int idx = 0; idx < 4 * FM90M_NB; idx++) {
            const int32_t i = r0 + 64 * cw + 16 * warp + fm90m_elem_row(lane, idx), j = j0 + fm90m_elem_col(lane, idx);
            if (!needed && i >= sq) continue; /* rows past Sq: computed, never stored */
            const int want = rule_masked(m, i, j), got = needed ? r2p_masked(wd, idx) : 0;
            if (got != want)
              cr_assert_fail("Sq=%d Sk=%d causal=%d br=%d tile (%d, %d) class %d%s: cw %d tid %d element %d (row %d, "
                             "col %d): words %d, rule %d",
                             sq, sk, fm_colmask_causal(m), br, rt, kt, cls, needed ? "" : " (no words)", cw, tid, idx,
                             i, j, got, want);
          }
        }
    }
  free(stage);
  free(ws);
  return written;
}

Test(sm90_mask, words_workspace_gives_each_thread_r2p_words) {
  fm_rng r;
  fm_rng_seed(&r, 2525, 0);
  long written = 0;
  for (int iter = 0; iter < 24; iter++) {
    const int32_t sq = 1 + (int32_t)fm_rng_below(&r, 600), sk = 1 + (int32_t)fm_rng_below(&r, 600);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, 1, 1, iter & 1);
    cr_assert_not_null(m);
    written += check_words(m, 128) + check_words(m, 192); /* head dims 128 and 64 */
    fm_colmask_destroy(m);
  }
  for (size_t s = 0; s < sizeof WINDOWS / sizeof WINDOWS[0]; s++) {
    fm_colmask *m = window_mask(WINDOWS[s][0], WINDOWS[s][1], WINDOWS[s][2]);
    cr_assert_not_null(m);
    written += check_words(m, 128) + check_words(m, 192);
    fm_colmask_destroy(m);
  }
  cr_assert(written > 200, "%ld tiles with words", written);
}

/* ================================================================ backward */

/* Key j's (start, length) pairs as key_intervals (fm_sm90_bwd.cuh) forms them. */
static void bwd_key(const fm_colmask *m, int32_t j, int32_t iv[4]) {
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  int32_t lts = 0, lte = INT32_MAX, us = 0, ue = 0;
  if (j < sk) {
    lts = fm_colmask_cvec(m, 0, FM_LTS)[j];
    lte = fm_colmask_cvec(m, 0, FM_LTE)[j];
    fm_effective_upper(fm_colmask_cvec(m, 0, FM_UTS)[j], fm_colmask_cvec(m, 0, FM_UTE)[j], fm_colmask_causal(m), j,
                       sq, sk, &us, &ue);
  }
  iv[0] = lts;
  iv[1] = lte - lts > 0 ? lte - lts : 0;
  iv[2] = us;
  iv[3] = ue - us > 0 ? ue - us : 0;
}

/* Their bit positions as store_keys (R2P) forms them. */
static void bwd_pos(const int32_t iv[4], int c4, int32_t p[4]) {
  p[0] = fm90m_t_pos(iv[0], c4);
  p[1] = fm90m_t_pos(fm90m_t_end(iv[0], iv[1]), c4);
  p[2] = fm90m_t_pos(iv[2], c4);
  p[3] = fm90m_t_pos(fm90m_t_end(iv[2], iv[3]), c4);
}

/* One thread's 32 elements at query tile m: R2P bit == compare (== rule when
 * m is given); returns the number masked. */
static int bwd_thread(const fm_colmask *m, const int32_t iv[2][4], int lane, int32_t mt, const int32_t keys[2],
                      int *bad_idx) {
  const int c4 = lane & 3;
  int32_t p[2][4];
  uint32_t w[2];
  for (int hr = 0; hr < 2; hr++) {
    bwd_pos(iv[hr], c4, p[hr]);
    w[hr] = fm90m_t_key_word(p[hr], mt);
  }
  int nmasked = 0;
  for (int idx = 0; idx < 4 * FM90M_T_NB; idx++) {
    const int hr = fm90m_elem_row(lane, idx) >> 3; /* the element's key: g + 8 hr */
    const int64_t i = (int64_t)FM90M_T_ROWS * mt + fm90m_elem_col(lane, idx);
    const int r2p = (w[fm90m_t_word(idx)] >> fm90m_t_bit(idx)) & 1;
    const int cmp = fm90m_t_masked((uint32_t)i, iv[hr][0], iv[hr][1], iv[hr][2], iv[hr][3]);
    const int want = m ? rule_masked(m, (int32_t)i, keys[hr]) : cmp;
    if (r2p != cmp || cmp != want) {
      *bad_idx = idx;
      return -1;
    }
    nmasked += r2p;
  }
  return nmasked;
}

/* Every (key tile, query tile) pair of mask m, past Sq to the last query tile. */
static void check_bwd_mask(const fm_colmask *m, coverage *cv) {
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  for (int32_t j0 = 0; j0 < sk; j0 += FM90M_BC)
    for (int32_t mt = 0; mt * FM90M_T_ROWS < sq; mt++) {
      int nmasked = 0;
      for (int w = 0; w < FM90M_BC / 16; w++) /* 2 warpgroups x 4 warps, 16 keys each */
        for (int lane = 0; lane < 32; lane++) {
          int32_t iv[2][4], keys[2];
          for (int hr = 0; hr < 2; hr++) {
            keys[hr] = j0 + 16 * w + fm90m_elem_row(lane, 2 * hr);
            bwd_key(m, keys[hr], iv[hr]);
          }
          int bad = -1;
          const int n = bwd_thread(m, iv, lane, mt, keys, &bad);
          if (n < 0) {
            const int hr = fm90m_t_word(bad);
            cr_assert_fail("backward Sq=%d Sk=%d causal=%d key tile %d query tile %d: warp %d lane %d element %d "
                           "(key %d, query %d): R2P, compare and rule disagree",
                           sq, sk, fm_colmask_causal(m), j0 / FM90M_BC, mt, w, lane, bad, keys[hr],
                           FM90M_T_ROWS * mt + fm90m_elem_col(lane, bad));
          }
          nmasked += n;
        }
      cv->elements += FM90M_BC * FM90M_T_ROWS;
      const int32_t r0 = FM90M_T_ROWS * mt, r1 = r0 + FM90M_T_ROWS < sq ? r0 + FM90M_T_ROWS : sq;
      note_tile(m, r0, r1, j0, nmasked, FM90M_BC * FM90M_T_ROWS, cv);
    }
}

/* The S^T fragment (m64n64, idx 0 .. 31) covers 16 keys x 64 queries once. */
Test(sm90_mask, bwd_ownership_covers_the_tile_once) {
  static int seen[16][FM90M_T_ROWS];
  memset(seen, 0, sizeof seen);
  for (int lane = 0; lane < 32; lane++)
    for (int idx = 0; idx < 4 * FM90M_T_NB; idx++) {
      cr_assert_eq(fm90m_elem_row(lane, idx), (lane >> 2) + 8 * fm90m_t_word(idx), "key word of element %d", idx);
      seen[fm90m_elem_row(lane, idx)][fm90m_elem_col(lane, idx)]++;
    }
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < FM90M_T_ROWS; c++) cr_assert_eq(seen[r][c], 1, "key %d query %d owned %d times", r, c, seen[r][c]);
}

/* What makes a key's interval one run and lets ptxas use R2P: along a key's
 * word the thread's queries increase with the bit; each bit is bit 1, 2, 5
 * or 6 of its byte (R2P's mask 0x66), one per element. */
Test(sm90_mask, bwd_bits_increase_with_the_query) {
  for (int lane = 0; lane < 32; lane++)
    for (int hr = 0; hr < 2; hr++) {
      int last_bit = 0, last_col = -1;
      uint32_t used = 0;
      for (int idx = 0; idx < 4 * FM90M_T_NB; idx++) {
        if (fm90m_t_word(idx) != hr) continue;
        const int b = fm90m_t_bit(idx), col = fm90m_elem_col(lane, idx);
        cr_assert(b % 8 == 1 || b % 8 == 2 || b % 8 == 5 || b % 8 == 6, "element %d: bit %d", idx, b);
        cr_assert(!(used >> b & 1), "bit %d used twice", b);
        cr_assert(b > last_bit && col > last_col, "element %d: bit %d, query %d after bit %d, query %d", idx, b, col,
                  last_bit, last_col);
        used |= 1u << b;
        last_bit = b, last_col = col;
      }
    }
}

/* fm90m_t_pos: at every query tile m, query i of the thread is at or after v
 * exactly when its bit is at or after the position of v, 32 m further on. */
Test(sm90_mask, bwd_positions_split_the_queries) {
  const int32_t tiles[] = {0, 1, 2, 7, 1000, (1 << 24) - 1, (1 << 25) - 2};
  for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++)
    for (int lane = 0; lane < 4; lane++)
      for (int32_t dv = -80; dv <= 80; dv++) {
        const int32_t mt = tiles[t], v = FM90M_T_ROWS * mt + dv;
        if (v < 0) continue;
        const int32_t q = fm90m_t_pos(v, lane & 3) - FM90M_T_SHIFT * mt;
        for (int idx = 0; idx < 4 * FM90M_T_NB; idx++) {
          const int32_t i = FM90M_T_ROWS * mt + fm90m_elem_col(lane, idx);
          cr_assert_eq(i >= v, fm90m_t_bit(idx) >= q, "tile %d v %d lane %d element %d: position %d", mt, v, lane,
                       idx, q);
        }
      }
}

Test(sm90_mask, bwd_r2p_agrees_with_the_compare_on_raw_intervals) {
  fm_rng r;
  fm_rng_seed(&r, 25, 1);
  const int32_t extremes[] = {0, 1, 63, 64, 65, INT32_MAX, INT32_MAX - 1, INT32_MAX - 63, INT32_MIN, -1, -64};
  const int ne = (int)(sizeof extremes / sizeof extremes[0]);
  for (int iter = 0; iter < 200000; iter++) {
    const int32_t mt = (int32_t)fm_rng_below(&r, iter & 1 ? (1u << 25) : 64u);
    const int32_t base = FM90M_T_ROWS * mt;
    int32_t iv[2][4];
    for (int hr = 0; hr < 2; hr++)
      for (int k = 0; k < 2; k++) {
        const uint32_t how = (uint32_t)fm_rng_below(&r, 4);
        int32_t s, len;
        if (how == 0) s = extremes[fm_rng_below(&r, (uint64_t)ne)];
        else if (how == 1) s = (int32_t)(uint32_t)fm_rng_next(&r);
        else { /* near the tile */
          const int64_t t = (int64_t)base + (int64_t)fm_rng_below(&r, 200) - 100;
          s = t > INT32_MAX ? INT32_MAX : (int32_t)t;
        }
        const uint32_t lhow = (uint32_t)fm_rng_below(&r, 4);
        if (lhow == 0) len = extremes[fm_rng_below(&r, 6)]; /* the non-negative ones */
        else if (lhow == 1) len = (int32_t)(fm_rng_next(&r) >> 33);
        else len = (int32_t)fm_rng_below(&r, 130);
        iv[hr][2 * k] = s;
        iv[hr][2 * k + 1] = len;
      }
    for (int lane = 0; lane < 32; lane++) {
      int bad = -1;
      const int32_t keys[2] = {0, 0};
      if (bwd_thread(NULL, iv, lane, mt, keys, &bad) < 0) {
        const int hr = fm90m_t_word(bad);
        cr_assert_fail("tile %d lane %d element %d: intervals (%d, %d), (%d, %d): R2P != compare", mt, lane, bad,
                       iv[hr][0], iv[hr][1], iv[hr][2], iv[hr][3]);
      }
    }
  }
}

Test(sm90_mask, bwd_methods_agree_with_the_rule_on_random_masks) {
  fm_rng r;
  fm_rng_seed(&r, 25, 2);
  coverage cv = {0};
  for (int iter = 0; iter < 48; iter++) {
    const int32_t sq = 1 + (int32_t)fm_rng_below(&r, 600), sk = 1 + (int32_t)fm_rng_below(&r, 600);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, 1, 1, iter & 1);
    cr_assert_not_null(m);
    check_bwd_mask(m, &cv);
    fm_colmask_destroy(m);
  }
  for (size_t s = 0; s < sizeof WINDOWS / sizeof WINDOWS[0]; s++) {
    fm_colmask *m = window_mask(WINDOWS[s][0], WINDOWS[s][1], WINDOWS[s][2]);
    cr_assert_not_null(m);
    check_bwd_mask(m, &cv);
    fm_colmask_destroy(m);
  }
  assert_random_coverage(&cv);
}

/* Empty and full key columns (LT = [Sq, Sq), [0, Sq); UT both ways). */
Test(sm90_mask, bwd_empty_and_full_columns) {
  coverage cv = {0};
  const int32_t shapes[][2] = {{200, 300}, {300, 200}, {64, 128}, {65, 129}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int32_t sq = shapes[s][0], sk = shapes[s][1];
    fm_colmask *m = NULL;
    cr_assert_eq(fm_colmask_create(sq, sk, 1, 1, 0, &m, NULL), FM_OK);
    for (int32_t j = 0; j < sk; j++) {
      const int kind = j % 4; /* empty, full by LT, full by UT, a run */
      fm_colmask_vec(m, 0, FM_LTS)[j] = kind == 1 ? 0 : (kind == 3 ? j % sq : sq);
      fm_colmask_vec(m, 0, FM_LTE)[j] = sq;
      fm_colmask_vec(m, 0, FM_UTS)[j] = 0;
      fm_colmask_vec(m, 0, FM_UTE)[j] = kind == 2 ? sq : 0;
    }
    cr_assert_eq(fm_colmask_validate(m, NULL), FM_OK);
    check_bwd_mask(m, &cv);
    fm_colmask_destroy(m);
  }
  cr_assert(cv.partial > 4, "coverage: %ld partial tiles", cv.partial);
}
