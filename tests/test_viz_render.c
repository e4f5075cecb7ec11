/* test_viz_render.c — what the figures show is right:
 *   - tile pieces (the viewer's O(Sk) classification) equal fm_classify tile
 *     for tile, for every family and random masks;
 *   - the per-pixel aggregation is exact: at one pixel per token every pixel
 *     is its element's colour, at several tokens per pixel the colour mixes
 *     the masked fraction counted by brute force;
 *   - reference images: cases drawn into cairo image surfaces compare with
 *     tests/ref/NAME.png (made by tests/ref/make_refs.sh with `fmsim render
 *     --no-text`), per-pixel tolerance; on failure NAME.out.png and
 *     NAME.diff.png land in FM_TEST_TMP_DIR. The references carry no text
 *     (glyphs depend on the machine's fonts), so the tolerance is tight:
 *     channel differences up to 2/255 pass, and at most 0.05% of pixels may
 *     differ more (antialiased line edges across cairo/pixman versions). */
#include "fm_test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "fm_dense.h"
#include "fm_families.h"
#include "fm_intervals_io.h"
#include "fm_linrnn_cpu.h"
#include "fm_npy.h"
#include "fm_tiles.h"
#include "viz.h"
#include "viz_internal.h"

static fm_colmask *build(const char *family, int64_t seqlen, int64_t batch, int64_t heads) {
  fm_sample_set samples;
  cr_assert_eq(fm_samples_builtin(&samples, NULL), FM_OK);
  fm_family_request req = {family, seqlen, batch, heads, 7, -1, &samples, 0, NULL};
  fm_colmask *m = NULL;
  fm_err err;
  cr_assert_eq(fm_family_build(&req, &m, NULL, &err), FM_OK, "%s: %s", family, err.msg);
  fm_samples_free(&samples);
  return m;
}

/* Pieces of every set expanded back to (nsets, Tr, Tc) arrays equal fm_classify's. */
static void check_pieces(const fm_colmask *m, int32_t br, int32_t bc, const char *what) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), ns = fm_colmask_nsets(m);
  int32_t tr = (sq + br - 1) / br, tc = (sk + bc - 1) / bc;
  int64_t n = (int64_t)ns * tr * tc;
  uint8_t *cls = malloc((size_t)n), *ex = malloc((size_t)n);
  fm_tile_counts ref, got;
  cr_assert_eq(fm_classify(m, br, bc, &ref, cls, ex, NULL), FM_OK);
  memset(&got, 0, sizeof got);
  viz_pieces p;
  viz_piece_scratch scratch;
  memset(&p, 0, sizeof p);
  memset(&scratch, 0, sizeof scratch);
  for (int32_t s = 0; s < ns; s++) {
    cr_assert_eq(viz_pieces_build(m, s, br, bc, &p, NULL, &got, &scratch, NULL), FM_OK);
    for (int32_t ct = 0; ct < tc; ct++) {
      int32_t next = 0;
      for (int64_t q = p.start[ct]; q < p.start[ct + 1]; q++) {
        const viz_piece *pc = &p.items[q];
        cr_assert_eq(pc->rt0, next, "%s: pieces of key tile %d leave a gap", what, ct);
        cr_assert_lt(pc->rt0, pc->rt1);
        for (int32_t rt = pc->rt0; rt < pc->rt1; rt++) {
          int64_t i = ((int64_t)s * tr + rt) * tc + ct;
          cr_assert_eq(pc->minmax, cls[i], "%s Br=%d Bc=%d set %d tile (%d, %d): min/max %d, fm_classify %d",
                       what, br, bc, s, rt, ct, pc->minmax, cls[i]);
          cr_assert_eq(pc->exact, ex[i], "%s Br=%d Bc=%d set %d tile (%d, %d): exact %d, fm_classify %d",
                       what, br, bc, s, rt, ct, pc->exact, ex[i]);
        }
        next = pc->rt1;
      }
      cr_assert_eq(next, tr, "%s: pieces of key tile %d end at %d, not Tr = %d", what, ct, next, tr);
    }
  }
  viz_counts_finish(&got);
  cr_assert_eq(got.total, ref.total);
  for (int c = 0; c < FM_TILE_NCLASSES; c++) {
    cr_assert_eq(got.minmax[c], ref.minmax[c], "%s: min/max count %d", what, c);
    cr_assert_eq(got.exact[c], ref.exact[c], "%s: exact count %d", what, c);
  }
  cr_assert_eq(got.partial_but_masked, ref.partial_but_masked);
  cr_assert_eq(got.partial_but_unmasked, ref.partial_but_unmasked);
  cr_assert_float_eq(got.sparsity, ref.sparsity, 1e-12);
  viz_pieces_free(&p);
  viz_piece_scratch_free(&scratch);
  free(cls);
  free(ex);
}

Test(viz_render, pieces_equal_fm_classify_for_every_family) {
  static const struct {
    int64_t s;
    int32_t br, bc;
  } sizes[] = {{1000, 48, 80}, {4096, 64, 128}, {8192, 128, 128}, {777, 16, 256}, {300, 1, 7}};
  for (int f = 0; f < fm_family_count(); f++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      const fm_family_info *fam = fm_family_at(f);
      fm_colmask *m = build(fam->name, sizes[k].s, fam->per_head ? 2 : 1, fam->per_head ? 3 : 1);
      check_pieces(m, sizes[k].br, sizes[k].bc, fam->name);
      fm_colmask_destroy(m);
    }
}

Test(viz_render, pieces_equal_fm_classify_for_random_masks) {
  fm_rng r;
  fm_rng_seed(&r, 11, 0);
  for (int t = 0; t < 40; t++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 300), sk = 1 + (int32_t)fm_rng_below(&r, 300);
    int causal = (int)fm_rng_below(&r, 2);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, 1, 2, causal);
    cr_assert_not_null(m);
    int32_t br = 1 + (int32_t)fm_rng_below(&r, 70), bc = 1 + (int32_t)fm_rng_below(&r, 70);
    check_pieces(m, br, bc, causal ? "random causal" : "random");
    fm_colmask_destroy(m);
  }
}

/* ---- the aggregation ---------------------------------------------------------- */

/* A scene holding m, through an interval file (the viewer's own loader). */
static viz_scene *scene_of(const fm_colmask *m, viz_state *s, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/viz_render_%s.npy", FM_TEST_TMP_DIR, name);
  fm_form used;
  fm_err err;
  cr_assert_eq(fm_colmask_save_npy(m, path, FM_FORM_NONE, &used, &err), FM_OK, "%s", err.msg);
  viz_scene_opts o = {0};
  o.path = path;
  o.causal = fm_form_causal(used);
  viz_scene *sc = NULL;
  cr_assert_eq(viz_scene_create(&o, s, &sc, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(viz_scene_sync(sc, s, &err), FM_OK, "%s", err.msg);
  cr_assert(fm_colmask_equal(viz_scene_mask(sc), m), "the file holds the mask");
  return sc;
}

static void unpack(uint32_t p, double rgb[3]) {
  rgb[0] = ((p >> 16) & 255) / 255.0;
  rgb[1] = ((p >> 8) & 255) / 255.0;
  rgb[2] = (p & 255) / 255.0;
}

/* The mask layer of a 96 x 96 scene at n x n pixels for each n of sizes,
 * pixel by pixel against the masked share of its area by brute force over
 * dense (96 x 96, 1 = masked). */
static void assert_mask_pixels(viz_scene *sc, viz_state *s, const uint8_t *dense, const int *sizes,
                               int nsizes, const char *what) {
  s->layers = VIZ_LAYER_MASK;
  viz_view_reset(s);
  double masked[3], visible[3];
  unpack(VIZ_RGB_MASKED, masked);
  unpack(VIZ_RGB_VISIBLE, visible);
  for (int z = 0; z < nsizes; z++) {
    int n = sizes[z];
    const uint32_t *px = viz_raster_render(sc, s, n, n, 7);
    cr_assert_not_null(px);
    double tok = 96.0 / n;
    for (int y = 0; y < n; y++)
      for (int x = 0; x < n; x++) {
        double cnt = 0, area = 0;
        for (int i = (int)floor(y * tok); i < (int)ceil((y + 1) * tok); i++)
          for (int j = (int)floor(x * tok); j < (int)ceil((x + 1) * tok); j++) {
            double w = (fmin(j + 1, (x + 1) * tok) - fmax(j, x * tok)) *
                       (fmin(i + 1, (y + 1) * tok) - fmax(i, y * tok));
            area += w;
            cnt += w * dense[i * 96 + j];
          }
        double f = cnt / area, got[3];
        unpack(px[y * n + x], got);
        for (int c = 0; c < 3; c++) {
          double want = masked[c] * f + visible[c] * (1 - f);
          cr_assert(fabs(got[c] - want) <= 0.6 / 255 + 1e-9,
                    "%s, %d px: pixel (%d, %d) channel %d = %.4f, want %.4f (masked share %.3f)", what,
                    n, x, y, c, got[c], want, f);
        }
      }
  }
}

Test(viz_render, mask_pixels_are_exact_at_any_zoom) {
  fm_rng r;
  fm_rng_seed(&r, 5, 0);
  for (int causal = 0; causal < 2; causal++) {
    fm_colmask *m = fmt_random_mask(&r, 96, 96, 1, 1, causal);
    uint8_t *dense = fmt_dense(m, 0);
    viz_state s;
    viz_state_init(&s, 800, 600);
    viz_scene *sc = scene_of(m, &s, causal ? "causal" : "bidir");
    /* 1, 4 and 6 tokens per pixel, and a quarter token per pixel */
    static const int sizes[] = {96, 24, 16, 384};
    assert_mask_pixels(sc, &s, dense, sizes, 4, causal ? "causal" : "bidir");
    free(dense);
    viz_scene_destroy(sc);
    fm_colmask_destroy(m);
  }
}

Test(viz_render, tile_pixels_have_their_tile_class) {
  fm_colmask *m = build("causal_blockwise", 512, 1, 1);
  viz_state s;
  viz_state_init(&s, 800, 600);
  viz_scene *sc = scene_of(m, &s, "blockwise");
  s.br = 32;
  s.bc = 16;
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  s.layers = VIZ_LAYER_TILES;
  int32_t tr = 16, tc = 32;
  uint8_t *cls = malloc((size_t)tr * tc);
  fm_tile_counts counts;
  /* the scene's own mask: the file holds canonical empties, and the min/max rule
   * reads a non-canonical empty interval as partial (fm_tile_rule.h) */
  cr_assert_eq(fm_classify(viz_scene_mask(sc), 32, 16, &counts, cls, NULL, NULL), FM_OK);
  cr_assert_float_eq(viz_scene_counts(sc)->sparsity, counts.sparsity, 1e-12);
  const uint32_t *px = viz_raster_render(sc, &s, 512, 512, 7);
  static const uint32_t colour[3] = {VIZ_RGB_MASKED, VIZ_RGB_PARTIAL, VIZ_RGB_VISIBLE};
  for (int y = 0; y < 512; y++)
    for (int x = 0; x < 512; x++)
      cr_assert_eq(px[y * 512 + x] & 0xFFFFFF, colour[cls[(y / 32) * tc + x / 16]],
                   "pixel (%d, %d) of tile (%d, %d)", x, y, y / 32, x / 16);
  free(cls);
  viz_scene_destroy(sc);
  fm_colmask_destroy(m);
}

/* ---- masks that fit no interval form ------------------------------------------------ */

/* The mask of tests/ref/misfit_both.png (make_refs.sh writes the same): S =
 * 256, two global keys, a causal window of 32 that is dilated (every other
 * row) over keys 0..127: those columns hold 16 runs, no interval form
 * holds them; keys 128.. fit. 1 = may attend. */
static int misfit_attend(int i, int j) {
  int d = i - j;
  return j < 2 || (d >= 0 && d < 32 && (j >= 128 || d % 2 == 0));
}

static void write_misfit(const char *path, int s_len) {
  uint8_t *a = malloc((size_t)s_len * s_len);
  for (int i = 0; i < s_len; i++)
    for (int j = 0; j < s_len; j++) a[i * s_len + j] = (uint8_t)misfit_attend(i, j);
  int64_t shape[2] = {s_len, s_len};
  cr_assert_eq(fm_npy_save(path, FM_DT_BOOL, 2, shape, a, NULL), FM_OK);
  free(a);
}

static viz_scene *misfit_scene(viz_state *s, int s_len) {
  char path[512];
  snprintf(path, sizeof path, "%s/viz_render_misfit_%d.npy", FM_TEST_TMP_DIR, s_len);
  write_misfit(path, s_len);
  viz_scene_opts o = {.path = path};
  viz_scene *sc = NULL;
  fm_err err;
  cr_assert_eq(viz_scene_create(&o, s, &sc, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(viz_scene_sync(sc, s, &err), FM_OK, "%s", err.msg);
  return sc;
}

Test(viz_render, a_mask_no_form_holds_is_drawn_exactly) {
  viz_state s;
  viz_state_init(&s, 800, 600);
  viz_scene *sc = misfit_scene(&s, 96);
  cr_assert_eq(s.facts.misfit, 1, "no interval form holds the mask");
  /* columns 2..95 hold several runs (the window is dilated below key 128) */
  int64_t bad = 0;
  for (int j = 0; j < 96; j++) {
    int runs = 0, prev = 0;
    for (int i = 0; i < 96; i++) {
      int m = !misfit_attend(i, j);
      runs += m && !prev;
      prev = m;
    }
    bad += runs > 2;
  }
  cr_assert_eq(s.facts.misfit_columns, bad, "%lld columns marked, %lld by brute force",
               (long long)s.facts.misfit_columns, (long long)bad);
  uint8_t dense[96 * 96];
  for (int i = 0; i < 96; i++)
    for (int j = 0; j < 96; j++) dense[i * 96 + j] = (uint8_t)!misfit_attend(i, j);
  static const int sizes[] = {96, 24, 40};
  assert_mask_pixels(sc, &s, dense, sizes, 3, "no interval form");
  /* exact tile classes from every run (no bounds: the min/max class is the exact one) */
  s.br = 7;
  s.bc = 5;
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  int64_t cnt[3] = {0, 0, 0};
  for (int rt = 0; rt < (96 + 6) / 7; rt++)
    for (int ct = 0; ct < (96 + 4) / 5; ct++) {
      int m = 0, n = 0;
      for (int i = rt * 7; i < 96 && i < rt * 7 + 7; i++)
        for (int j = ct * 5; j < 96 && j < ct * 5 + 5; j++, n++) m += !misfit_attend(i, j);
      int want = m == n ? FM_TILE_MASKED : m == 0 ? FM_TILE_UNMASKED : FM_TILE_PARTIAL, cm, ce;
      viz_scene_tile_class(sc, rt, ct, &cm, &ce);
      cr_assert(ce == want && cm == want, "tile (%d, %d): %d / %d, brute force %d", rt, ct, cm, ce, want);
      cnt[want]++;
    }
  const fm_tile_counts *k = viz_scene_counts(sc);
  for (int c = 0; c < 3; c++) cr_assert_eq(k->exact[c], cnt[c]);
  viz_scene_destroy(sc);
}

/* ---- reference images ----------------------------------------------------------- */

typedef struct ref_case {
  const char *name;
  const char *family; /* NULL: the misfit mask (misfit_attend), at S = seqlen */
  int64_t seqlen;
  int32_t br, bc;
  const char *layer;
  double keys[2], rows[2]; /* {0, 0}: all */
  int w, h;
} ref_case;

/* As make_refs.sh: every case there has a twin here. */
static const ref_case cases[] = {
    {"causal_document_both", "causal_document", 8192, 128, 128, "both", {0, 0}, {0, 0}, 480, 320},
    {"qk_sparse_tiles", "qk_sparse", 8192, 64, 64, "tiles", {0, 0}, {0, 0}, 480, 320},
    {"random_eviction_mask", "random_eviction", 131072, 128, 128, "mask", {0, 0}, {0, 0}, 480, 320},
    {"causal_zoom_tokens", "causal", 64, 8, 8, "both", {0, 16}, {0, 16}, 480, 320},
    {"sliding_window_bytes", "sliding_window", 4096, 64, 64, "bytes", {0, 0}, {0, 0}, 480, 320},
    {"misfit_both", NULL, 256, 16, 16, "both", {0, 0}, {0, 0}, 480, 320},
};

/* The layers of `fmsim render --layer NAME` (app/viz_cli.c), panel kept. */
static void set_layer(viz_state *s, const char *name) {
  unsigned tiles = VIZ_LAYER_TILES | VIZ_LAYER_GRID | VIZ_LAYER_HATCH;
  s->overlay = VIZ_OVERLAY_NONE;
  if (!strcmp(name, "mask")) s->layers = VIZ_LAYER_PANEL | VIZ_LAYER_MASK;
  else if (!strcmp(name, "tiles")) s->layers = VIZ_LAYER_PANEL | tiles;
  else if (!strcmp(name, "both")) s->layers = VIZ_LAYER_PANEL | tiles | VIZ_LAYER_MASK;
  else {
    s->layers = VIZ_LAYER_PANEL | VIZ_LAYER_TILES | VIZ_LAYER_GRID;
    s->overlay = name[0] == 'c' ? VIZ_OVERLAY_CYCLES : VIZ_OVERLAY_BYTES;
  }
}

/* Per-pixel comparison; returns the number of pixels beyond the tolerance
 * and writes NAME.out.png / NAME.diff.png when there are any. */
static long compare_with_ref(const char *name, cairo_surface_t *got, long *total) {
  char ref_path[512], out_path[512], diff_path[512];
  snprintf(ref_path, sizeof ref_path, "%s/ref/%s.png", FM_TEST_SOURCE_DIR, name);
  snprintf(out_path, sizeof out_path, "%s/%s.out.png", FM_TEST_TMP_DIR, name);
  snprintf(diff_path, sizeof diff_path, "%s/%s.diff.png", FM_TEST_TMP_DIR, name);
  cairo_surface_t *ref = cairo_image_surface_create_from_png(ref_path);
  cr_assert_eq(cairo_surface_status(ref), CAIRO_STATUS_SUCCESS, "%s: cannot read (%s)", ref_path,
               cairo_status_to_string(cairo_surface_status(ref)));
  cairo_surface_flush(got);
  int w = cairo_image_surface_get_width(got), h = cairo_image_surface_get_height(got);
  cr_assert(w == cairo_image_surface_get_width(ref) && h == cairo_image_surface_get_height(ref),
            "%s: size %dx%d, reference %dx%d", name, w, h, cairo_image_surface_get_width(ref),
            cairo_image_surface_get_height(ref));
  const unsigned char *a = cairo_image_surface_get_data(got), *b = cairo_image_surface_get_data(ref);
  int sa = cairo_image_surface_get_stride(got), sb = cairo_image_surface_get_stride(ref);
  cairo_surface_t *diff = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  unsigned char *d = cairo_image_surface_get_data(diff);
  int sd = cairo_image_surface_get_stride(diff);
  long bad = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint32_t p = ((const uint32_t *)(a + (size_t)y * sa))[x], q = ((const uint32_t *)(b + (size_t)y * sb))[x];
      int worst = 0;
      for (int c = 0; c < 3; c++) {
        int dv = abs((int)((p >> (8 * c)) & 255) - (int)((q >> (8 * c)) & 255));
        if (dv > worst) worst = dv;
      }
      bad += worst > 2;
      /* the difference amplified in red over a faint copy of the reference */
      uint32_t g = ((q & 255) + ((q >> 8) & 255) + ((q >> 16) & 255)) / 12 + 160;
      uint32_t r = worst > 2 ? 255 : g;
      ((uint32_t *)(d + (size_t)y * sd))[x] = r << 16 | (worst > 2 ? 0 : g) << 8 | (worst > 2 ? 0 : g);
    }
  cairo_surface_mark_dirty(diff);
  long allowed = (long)w * h / 2000; /* 0.05% */
  if (bad > allowed) {
    cairo_surface_write_to_png(got, out_path);
    cairo_surface_write_to_png(diff, diff_path);
  }
  cairo_surface_destroy(diff);
  cairo_surface_destroy(ref);
  *total = (long)w * h;
  return bad;
}

static void assert_matches(const char *name, cairo_surface_t *got) {
  long total, bad = compare_with_ref(name, got, &total);
  cr_assert_leq(bad, total / 2000,
                "%s: %ld of %ld pixels differ from tests/ref/%s.png by more than 2/255; see "
                "%s/%s.out.png and %s.diff.png (if the change is deliberate, rerun tests/ref/make_refs.sh)",
                name, bad, total, name, FM_TEST_TMP_DIR, name, name);
}

static cairo_surface_t *draw_case(const ref_case *c, unsigned drop_layers) {
  viz_state s;
  viz_state_init(&s, c->w, c->h);
  viz_scene_opts o = {0};
  o.batch = o.heads = 1;
  viz_scene *sc = NULL;
  char path[512];
  if (!c->family) {
    snprintf(path, sizeof path, "%s/viz_render_%s.npy", FM_TEST_TMP_DIR, c->name);
    write_misfit(path, (int)c->seqlen);
    o.path = path;
  }
  cr_assert_eq(viz_scene_create(&o, &s, &sc, NULL), FM_OK);
  s.family = -1;
  for (int i = 0; i < fm_family_count() && c->family; i++)
    if (!strcmp(fm_family_at(i)->name, c->family)) s.family = i;
  cr_assert(s.family >= 0 || !c->family);
  s.seqlen = c->seqlen;
  s.br = c->br;
  s.bc = c->bc;
  set_layer(&s, c->layer);
  s.layers &= ~drop_layers;
  s.text = 0;
  fm_err err;
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s: %s", c->name, err.msg);
  if (c->keys[1] > 0) {
    s.view.x0 = c->keys[0];
    s.view.x1 = c->keys[1];
    s.view.y0 = c->rows[0];
    s.view.y1 = c->rows[1];
  }
  cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, c->w, c->h);
  cairo_t *cr = cairo_create(surf);
  viz_draw(cr, &s, c->w, c->h);
  cairo_destroy(cr);
  viz_scene_destroy(sc);
  return surf;
}

Test(viz_render, reference_images_of_masks) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cairo_surface_t *surf = draw_case(&cases[i], 0);
    assert_matches(cases[i].name, surf);
    cairo_surface_destroy(surf);
  }
}

Test(viz_render, the_comparison_sees_a_missing_layer) {
  /* the same case without its tile layer must not pass as the reference */
  cairo_surface_t *surf = draw_case(&cases[0], VIZ_LAYER_TILES);
  long total, bad = compare_with_ref(cases[0].name, surf, &total);
  cr_assert_gt(bad, total / 2000, "a drawing without tiles matched the reference (%ld pixels)", bad);
  cairo_surface_destroy(surf);
}

/* The trace the cycles reference was made from: fmsim analyze, plus
 * tile_cycles.npy with cycles(rt, ct) = 1000 + 37*rt + 11*ct, as make_refs.sh. */
static void write_cycles_trace(const char *dir) {
  char args[1024];
  snprintf(args, sizeof args, "analyze --family causal_document --seqlen 4096 --br 128 --bc 128 --out %s",
           dir);
  fmt_result *r = malloc(sizeof *r);
  fmt_run(r, args);
  cr_assert_eq(r->status, 0, "fmsim analyze: %s", r->err);
  free(r);
  int64_t cycles[32 * 32], shape[4] = {1, 1, 32, 32};
  for (int rt = 0; rt < 32; rt++)
    for (int ct = 0; ct < 32; ct++) cycles[rt * 32 + ct] = 1000 + 37 * rt + 11 * ct;
  char path[600];
  snprintf(path, sizeof path, "%s/tile_cycles.npy", dir);
  cr_assert_eq(fm_npy_save(path, FM_DT_I64, 4, shape, cycles, NULL), FM_OK);
}

/* A fresh state of w x h with the scene of the trace in dir. */
static viz_scene *trace_scene(const char *dir, viz_state *s, int w, int h) {
  viz_state_init(s, w, h);
  viz_scene_opts o = {0};
  o.path = dir;
  viz_scene *sc = NULL;
  fm_err err;
  cr_assert_eq(viz_scene_create(&o, s, &sc, &err), FM_OK, "%s", err.msg);
  return sc;
}

Test(viz_render, reference_image_of_the_cycles_overlay) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/viz_render_trace", FM_TEST_TMP_DIR);
  write_cycles_trace(dir);
  viz_state s;
  viz_scene *sc = trace_scene(dir, &s, 480, 320);
  fm_err err;
  cr_assert(s.br == 128 && s.bc == 128, "a trace brings its tile size");
  set_layer(&s, "cycles");
  s.text = 0;
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(s.facts.has_cycles, 1);
  cr_assert_eq(s.overlay, VIZ_OVERLAY_CYCLES);
  cr_assert_float_eq(sc->cycles_max, 1000 + 37 * 31 + 11 * 31, 0.5, "brightest: the last unmasked tile");
  cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 480, 320);
  cairo_t *cr = cairo_create(surf);
  viz_draw(cr, &s, 480, 320);
  cairo_destroy(cr);
  assert_matches("cycles_overlay", surf);
  cairo_surface_destroy(surf);
  /* another tile size reclassifies from the columns; cycles no longer apply */
  s.bc = 64;
  s.overlay = VIZ_OVERLAY_CYCLES;
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  cr_assert_eq(s.facts.has_cycles, 0);
  cr_assert_eq(s.overlay, VIZ_OVERLAY_NONE);
  cr_assert(strstr(s.status, "cycles"), "status: %s", s.status);
  viz_scene_destroy(sc);
}

/* Every figure of the registry (viz/viz_figures.c) has a reference image:
 * a row here, its twin in make_refs.sh. A figure drawn from a source
 * ("tiles") is drawn here without one: its default mask, as render draws it. */
static const struct {
  const char *figure, *ref;
  int w, h;
} figure_refs[] = {
    {"gallery", "gallery", 800, 700},
    {"memory", "memory", 500, 350},
    {"tiles", "causal_document_both", 480, 320},
    {"linrnn_chunk", "linrnn_chunk", 420, 460},
    {"cp-plan", "cp_plan", 500, 350},
};

Test(viz_render, reference_images_of_the_figures) {
  int nrefs = (int)(sizeof figure_refs / sizeof figure_refs[0]);
  for (int i = 0; i < viz_figure_count(); i++) {
    const viz_figure *f = viz_figure_at(i);
    int k = 0;
    while (k < nrefs && strcmp(figure_refs[k].figure, f->name)) k++;
    cr_assert_lt(k, nrefs, "figure '%s' of the registry has no reference image here", f->name);
    cr_assert(f->width > 0 && f->height > 0 && f->summary && f->draw, "figure '%s'", f->name);
    cr_assert_eq(viz_figure_find(f->name), f);
    viz_figure_opts o = {.seqlen = 8192, .br = 128, .bc = 128, .sample = -1, .text = 0};
    cairo_surface_t *surf =
        cairo_image_surface_create(CAIRO_FORMAT_ARGB32, figure_refs[k].w, figure_refs[k].h);
    cairo_t *cr = cairo_create(surf);
    fm_err err;
    cr_assert_eq(f->draw(cr, figure_refs[k].w, figure_refs[k].h, &o, &err), FM_OK, "%s: %s",
                 f->name, err.msg);
    cairo_destroy(cr);
    assert_matches(figure_refs[k].ref, surf);
    cairo_surface_destroy(surf);
  }
  cr_assert_null(viz_figure_find("speed"));
  char names[400];
  viz_figure_names(names, sizeof names);
  for (int i = 0; i < viz_figure_count(); i++)
    cr_assert(strstr(names, viz_figure_at(i)->name), "'%s' lacks %s", names, viz_figure_at(i)->name);
}

/* The linrnn_chunk figure of a trace with a per-tile record: `fmsim linrnn
 * --cpu` writes the trace, cycles(chunk, bi, bj) = 1000 + 37 bi + 11 bj +
 * 5 chunk on the tiles not masked (0 on the masked ones) are added as the
 * kernel's instrumented build would record them (make_refs.sh does the same
 * with Python), and the figure draws the cycles instead of the classes. */
Test(viz_render, linrnn_chunk_draws_the_cycles_of_a_trace) {
  char dir[600], args[1200];
  snprintf(dir, sizeof dir, "%s/viz_linrnn_trace_%d", FM_TEST_TMP_DIR, (int)getpid());
  snprintf(args, sizeof args, "%s linrnn --cpu --doc-len 40 --tokens 1024 --heads 1 --verify-tokens 64 "
           "--trace %s > /dev/null", FMSIM_BIN, dir);
  cr_assert_eq(system(args), 0);
  fm_lr_trace t;
  fm_err err;
  cr_assert_eq(fm_lr_trace_load(dir, &t, &err), FM_OK, "%s", err.msg);
  const int32_t n = t.chunk / t.sub;
  t.tile_cycles = malloc(sizeof(int64_t) * (size_t)t.nchunks * n * n);
  for (int32_t ch = 0; ch < t.nchunks; ch++)
    for (int32_t bi = 0; bi < n; bi++)
      for (int32_t bj = 0; bj < n; bj++) {
        int64_t i = ((int64_t)ch * n + bi) * n + bj;
        t.tile_cycles[i] = t.tile_class[i] == FM_TILE_MASKED ? 0 : 1000 + 37 * bi + 11 * bj + 5 * ch;
      }
  cr_assert_eq(fm_lr_trace_write(dir, &t, NULL, &err), FM_OK, "%s", err.msg);
  fm_lr_trace_free(&t);
  const viz_figure *f = viz_figure_find("linrnn_chunk");
  cr_assert(f && f->takes_trace);
  cairo_surface_t *surf[2];
  for (int k = 0; k < 2; k++) {
    viz_figure_opts o = {.sample = -1, .text = 0, .trace = k ? dir : NULL};
    surf[k] = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 420, 460);
    cairo_t *cr = cairo_create(surf[k]);
    cr_assert_eq(f->draw(cr, 420, 460, &o, &err), FM_OK, "%s", err.msg);
    cairo_destroy(cr);
  }
  assert_matches("linrnn_chunk_cycles", surf[1]);
  cairo_surface_flush(surf[0]);
  cairo_surface_flush(surf[1]);
  cr_assert(memcmp(cairo_image_surface_get_data(surf[0]), cairo_image_surface_get_data(surf[1]),
                   (size_t)cairo_image_surface_get_stride(surf[0]) * 460),
            "the trace's cycles are drawn, not the example's classes");
  cairo_surface_destroy(surf[0]);
  cairo_surface_destroy(surf[1]);
  viz_figure_opts bad = {.sample = -1, .trace = "/nonexistent/linrnn"};
  cairo_surface_t *s2 = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 100, 100);
  cairo_t *cr = cairo_create(s2);
  cr_assert_neq(f->draw(cr, 420, 460, &bad, &err), FM_OK, "a missing trace is an error");
  cairo_destroy(cr);
  cairo_surface_destroy(s2);
  snprintf(args, sizeof args, "rm -rf '%s'", dir);
  cr_assert_eq(system(args), 0);
}

/* ---- figures for papers: nothing drawn past the surface ------------------------- */

/* One column of a two-column paper: 3.3 x 2.5 in, drawn at 300 dpi. */
#define COL_W (3.3 * 72)
#define COL_H (2.5 * 72)
#define DPI_SCALE (300.0 / 72.0)

typedef struct inked {
  cairo_surface_t *surf;
  cairo_t *cr;
  viz_ink items[4096];
  viz_ink_log log;
  double pw, ph; /* the surface, pixels */
} inked;

static inked *ink_begin(double w, double h) {
  inked *k = calloc(1, sizeof *k);
  k->pw = ceil(w * DPI_SCALE);
  k->ph = ceil(h * DPI_SCALE);
  k->surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, (int)k->pw, (int)k->ph);
  k->log = (viz_ink_log){.items = k->items, .cap = 4096};
  viz_ink_log_attach(k->surf, &k->log);
  k->cr = cairo_create(k->surf);
  cairo_scale(k->cr, DPI_SCALE, DPI_SCALE);
  return k;
}

/* Every string and legend mark lies inside the surface (half a pixel of
 * antialiasing allowed), and no two strings overlap. */
static void ink_check(inked *k, const char *what, int min_items) {
  const viz_ink_log *log = &k->log;
  cr_assert_lt(log->count, log->cap, "%s: the log overflowed", what);
  cr_assert_geq(log->count, min_items, "%s: %d strings and marks drawn", what, log->count);
  for (int i = 0; i < log->count; i++) {
    const viz_ink *a = &log->items[i];
    cr_assert(a->x0 >= -0.5 && a->y0 >= -0.5 && a->x1 <= k->pw + 0.5 && a->y1 <= k->ph + 0.5,
              "%s: '%s' at [%.1f, %.1f] x [%.1f, %.1f] leaves the %.0f x %.0f surface", what, a->text,
              a->x0, a->x1, a->y0, a->y1, k->pw, k->ph);
    for (int j = 0; j < i && a->text[0]; j++) {
      const viz_ink *b = &log->items[j];
      if (!b->text[0]) continue;
      double ox = fmin(a->x1, b->x1) - fmax(a->x0, b->x0), oy = fmin(a->y1, b->y1) - fmax(a->y0, b->y0);
      cr_assert(ox <= 1.0 || oy <= 1.0, "%s: '%s' overlaps '%s' (%.1f x %.1f px)", what, a->text,
                b->text, ox, oy);
    }
  }
  cairo_destroy(k->cr);
  cairo_surface_destroy(k->surf);
  free(k);
}

/* The viewer's drawing of a state on paper: 8 pt text. */
static void ink_state(viz_state *s, const char *what, double w, double h) {
  inked *k = ink_begin(w, h);
  s->font_pt = 8;
  viz_draw(k->cr, s, w, h);
  viz_layout l;
  viz_layout_compute(s, w, h, &l);
  cr_assert_float_eq(l.font, 8, 1e-9, "%s: 8 pt text on paper", what);
  cr_assert_eq(l.panel.w, 0, "%s: no room for the side panel in one column", what);
  cr_assert_gt(l.legend.h, 0, "%s: the compact legend instead", what);
  ink_check(k, what, 10);
}

Test(viz_render, one_paper_column_clips_nothing) {
  viz_state s;
  viz_state_init(&s, (int)COL_W, (int)COL_H);
  viz_scene_opts o = {.batch = 1, .heads = 1};
  viz_scene *sc = NULL;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, NULL), FM_OK);
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  ink_state(&s, "causal_document, default caption", COL_W, COL_H);
  snprintf(s.title, sizeof s.title, "%s", "Packed documents with a causal mask at S = 8192 and 128 x 128 "
           "tiles, drawn for a single column of a two-column paper where a title this long must wrap");
  ink_state(&s, "a long --title", COL_W, COL_H);
  s.title[0] = 0;
  s.no_title = 1;
  ink_state(&s, "--no-title", COL_W, COL_H);
  s.no_title = 0;
  s.layers = VIZ_LAYER_MASK | VIZ_LAYER_PANEL;
  ink_state(&s, "the mask layer", COL_W, COL_H);
  s.layers = VIZ_LAYER_DEFAULT;
  ink_state(&s, "a tall column", COL_W, 4.5 * 72);
  viz_scene_destroy(sc);
  /* a mask no interval form holds: its strip, its legend entry */
  viz_state_init(&s, (int)COL_W, (int)COL_H);
  sc = misfit_scene(&s, 256);
  ink_state(&s, "a mask no form holds", COL_W, COL_H);
  viz_scene_destroy(sc);
}

Test(viz_render, every_figure_fits_one_paper_column) {
  for (int i = 0; i < viz_figure_count(); i++) {
    const viz_figure *f = viz_figure_at(i);
    cr_assert(f->width_in > 0 && f->width_in <= 7.5 && f->height_in > 0 && f->height_in <= 9,
              "%s: paper size %g x %g in", f->name, f->width_in, f->height_in);
    if (f->per_case) continue; /* the drawing of a source: one_paper_column_clips_nothing */
    /* twelve panels need a square column; the others fit 3.3 x 2.5 in */
    double h = strcmp(f->name, "gallery") ? COL_H : COL_W;
    for (int t = 0; t < 3; t++) {
      viz_figure_opts o = {.seqlen = 8192, .br = 128, .bc = 128, .sample = -1, .text = 1,
                           .title = t == 1 ? "A title given on the command line that is far too "
                                             "long for one column of a paper" : NULL,
                           .no_title = t == 2};
      inked *k = ink_begin(COL_W, h);
      fm_err err;
      cr_assert_eq(f->draw(k->cr, COL_W, h, &o, &err), FM_OK, "%s: %s", f->name, err.msg);
      char what[96];
      snprintf(what, sizeof what, "%s (%s)", f->name, t == 0 ? "its title" : t == 1 ? "--title" : "--no-title");
      ink_check(k, what, 10);
    }
  }
  /* twelve panels in 3.3 x 2.5 in: refused with one line, not squeezed */
  inked *k = ink_begin(COL_W, COL_H);
  viz_figure_opts o = {.seqlen = 8192, .br = 128, .bc = 128, .sample = -1, .text = 1};
  fm_err err;
  cr_assert_eq(viz_figure_find("gallery")->draw(k->cr, COL_W, COL_H, &o, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "(3.30 x 2.50 in) is too small for 12 panels"), "%s", err.msg);
  cairo_destroy(k->cr);
  cairo_surface_destroy(k->surf);
  free(k);
}

/* ---- captions at paper sizes keep their numbers whole ----------------------------- */

/* Every string drawn on k, joined by " | " (the caption's lines are separate strings). */
static void ink_text(const inked *k, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < k->log.count && i < k->log.cap && n + 4 < cap; i++)
    if (k->items[i].text[0]) n += (size_t)snprintf(buf + n, cap - n, "%s | ", k->items[i].text);
}

/* want (a number with its words, e.g. "ρ = 0.812") is drawn whole, and no
 * drawn string cuts a number ("ρ = 0…"). */
static void assert_drawn_whole(const inked *k, const char *what, const char *want) {
  static char text[65536];
  ink_text(k, text, sizeof text);
  cr_assert(strstr(text, want), "%s: '%s' is not drawn whole; drawn: %s", what, want, text);
  for (const char *p = strstr(text, "\xE2\x80\xA6"); p; p = strstr(p + 1, "\xE2\x80\xA6"))
    cr_assert(p == text || (!(p[-1] >= '0' && p[-1] <= '9') && strncmp(p - 2, "= ", 2) &&
                            strncmp(p - 1, ".", 1)),
              "%s: a number is cut: ...%.40s", what, p > text + 20 ? p - 20 : text);
}

/* The tiles figure of a state at the registry's paper size (3.3 in wide). */
static inked *ink_tiles_figure(viz_state *s) {
  const viz_figure *f = viz_figure_find("tiles");
  double w = f->width_in * 72, h = f->height_in * 72;
  inked *k = ink_begin(w, h);
  s->font_pt = 8;
  s->width = (int)w;
  s->height = (int)h;
  viz_draw(k->cr, s, w, h);
  return k;
}

static void ink_free(inked *k) {
  cairo_destroy(k->cr);
  cairo_surface_destroy(k->surf);
  free(k);
}

/* Each figure drawn at 3.3 in: the caption keeps rho (over all pairs, named
 * with their number; the pair drawn), S and the tiles whole, shortening the
 * words and the file name instead; a mask no form holds keeps FlashMask's
 * rho (its tightest fitting sub-mask's) although the side panel is gone. */
Test(viz_render, captions_at_one_paper_column_keep_their_numbers) {
  char want[160];
  /* families, one pair and several (a per-head family), and an unequal Sq x Sk is a file */
  static const struct { const char *family; int64_t s, b, h; } fams[] = {
      {"causal_document", 8192, 1, 1}, {"random_eviction", 4096, 2, 4}, {"qk_sparse", 4096, 1, 1}};
  for (size_t q = 0; q < sizeof fams / sizeof fams[0]; q++) {
    viz_state s;
    viz_state_init(&s, 238, 202);
    viz_scene_opts o = {.batch = fams[q].b, .heads = fams[q].h};
    viz_scene *sc = NULL;
    cr_assert_eq(viz_scene_create(&o, &s, &sc, NULL), FM_OK);
    for (int i = 0; i < fm_family_count(); i++)
      if (!strcmp(fm_family_at(i)->name, fams[q].family)) s.family = i;
    s.seqlen = fams[q].s;
    s.pair = (int32_t)(fams[q].b * fams[q].h - 1);
    cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
    fm_tile_counts c;
    cr_assert_eq(fm_classify(viz_scene_mask(sc), 128, 128, &c, NULL, NULL, NULL), FM_OK);
    inked *k = ink_tiles_figure(&s);
    assert_drawn_whole(k, fams[q].family, "S = ");
    snprintf(want, sizeof want, "S = %lld", (long long)fams[q].s);
    assert_drawn_whole(k, fams[q].family, want);
    assert_drawn_whole(k, fams[q].family, "128 \xC3\x97 128");
    snprintf(want, sizeof want, "\xCF\x81 = %.3f", c.sparsity);
    assert_drawn_whole(k, fams[q].family, want);
    if (fabs(c.sparsity - c.sparsity_exact) >= 5e-4) {
      snprintf(want, sizeof want, "exact %.3f", c.sparsity_exact);
      assert_drawn_whole(k, fams[q].family, want);
    }
    if (fams[q].b * fams[q].h > 1) {
      snprintf(want, sizeof want, "over %lld", (long long)(fams[q].b * fams[q].h));
      assert_drawn_whole(k, fams[q].family, want);
      snprintf(want, sizeof want, "batch %lld, head %lld", (long long)(fams[q].b - 1),
               (long long)(fams[q].h - 1));
      assert_drawn_whole(k, fams[q].family, want);
    }
    ink_free(k);
    viz_scene_destroy(sc);
  }
  /* a mask no interval form holds, under a long file name */
  char path[512];
  snprintf(path, sizeof path, "%s/viz_render_a_long_name_of_a_mask_that_fits_no_form.npy", FM_TEST_TMP_DIR);
  write_misfit(path, 256);
  viz_state s;
  viz_state_init(&s, 238, 202);
  viz_scene_opts o = {.path = path};
  viz_scene *sc = NULL;
  fm_err err;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, &err), FM_OK, "%s", err.msg);
  s.br = s.bc = 16;
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  cr_assert(s.facts.misfit);
  /* the reference: the tightest fitting sub-mask from the dense checker, classified */
  fm_dense_opts dopt = {.keep_intervals = 1};
  fm_dense_result *res = NULL;
  fm_colmask *sub = NULL;
  fm_tile_counts c;
  cr_assert_eq(fm_dense_check_file(path, &dopt, &res, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(fm_dense_result_subset_colmask(res, &sub, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(fm_classify(sub, 16, 16, &c, NULL, NULL, NULL), FM_OK);
  cr_assert_gt(c.sparsity, 0.1, "a sub-mask worth naming");
  inked *k = ink_tiles_figure(&s);
  snprintf(want, sizeof want, "FlashMask \xCF\x81 = %.3f", c.sparsity);
  assert_drawn_whole(k, "a mask no form holds", want);
  snprintf(want, sizeof want, "\xCF\x81 = %.3f", viz_scene_counts(sc)->sparsity_exact);
  assert_drawn_whole(k, "a mask no form holds", want);
  assert_drawn_whole(k, "a mask no form holds", "S = 256");
  ink_free(k);
  fm_colmask_destroy(sub);
  fm_dense_result_destroy(res);
  viz_scene_destroy(sc);
  /* the memory figure and the gallery (a square column: twelve panels) */
  viz_figure_opts fo = {.seqlen = 8192, .br = 128, .bc = 128, .sample = -1, .text = 1};
  k = ink_begin(3.3 * 72, 2.5 * 72);
  cr_assert_eq(viz_figure_find("memory")->draw(k->cr, 3.3 * 72, 2.5 * 72, &fo, &err), FM_OK, "%s", err.msg);
  assert_drawn_whole(k, "memory", "Bc = 128");
  ink_free(k);
  k = ink_begin(3.3 * 72, 3.3 * 72);
  cr_assert_eq(viz_figure_find("gallery")->draw(k->cr, 3.3 * 72, 3.3 * 72, &fo, &err), FM_OK, "%s", err.msg);
  assert_drawn_whole(k, "gallery", "S = 8192");
  assert_drawn_whole(k, "gallery", "128 \xC3\x97 128");
  for (int i = 0; i < fm_family_count() && i < 12; i++) {
    fm_family_request req = {fm_family_at(i)->name, 8192, 1, 1, 0, -1, NULL, 0, NULL};
    fm_colmask *m = NULL;
    if (fm_family_at(i)->uses_docs) continue; /* the paper's documents: not drawn here */
    cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
    cr_assert_eq(fm_classify(m, 128, 128, &c, NULL, NULL, NULL), FM_OK);
    snprintf(want, sizeof want, "\xCF\x81 = %.3f", c.sparsity);
    assert_drawn_whole(k, fm_family_at(i)->name, want);
    fm_colmask_destroy(m);
  }
  ink_free(k);
}

/* A gallery of a scenario's masks: panels from traces, in a single column. */
Test(viz_render, a_gallery_of_traces_fits_one_paper_column) {
  static const char *fams[4] = {"causal", "sliding_window", "document", "qk_sparse"};
  char dirs[4][512], titles[4][64];
  viz_gallery_item items[4];
  for (int q = 0; q < 4; q++) {
    snprintf(dirs[q], sizeof dirs[q], "%s/viz_render_gallery_%d", FM_TEST_TMP_DIR, q);
    char args[1024];
    snprintf(args, sizeof args, "analyze --family %s --seqlen 1024 --br 64 --bc 64 --out %s", fams[q], dirs[q]);
    fmt_result *r = malloc(sizeof *r);
    fmt_run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    free(r);
    snprintf(titles[q], sizeof titles[q], "%s", fams[q]);
    items[q] = (viz_gallery_item){.trace = dirs[q], .title = titles[q]};
  }
  viz_figure_opts o = {.seqlen = 8192, .br = 128, .bc = 128, .sample = -1, .text = 1, .items = items,
                       .nitems = 4, .items_name = "a test"};
  inked *k = ink_begin(COL_W, COL_H);
  fm_err err;
  cr_assert_eq(viz_figure_find("gallery")->draw(k->cr, COL_W, COL_H, &o, &err), FM_OK, "%s", err.msg);
  /* the panels are the traces' masks, titled as given (cut with an ellipsis
   * where the cell is narrower than the title: "sliding_w…") */
  int seen = 0;
  for (int i = 0; i < k->log.count; i++)
    for (int q = 0; q < 4; q++) {
      const char *t = k->items[i].text, *cut = strstr(t, "\xE2\x80\xA6");
      size_t n = cut ? (size_t)(cut - t) : strlen(t);
      if (n >= 4 && !strncmp(t, fams[q], n) && (cut ? !cut[3] : !fams[q][n])) seen |= 1 << q;
    }
  cr_assert_eq(seen, 15, "panel titles drawn: %x", seen);
  ink_check(k, "a gallery of four traces", 10);
}

/* The backward's tile map in the scene: a run trace's own record (tiles_bwd.npy and its
   cycles) at its tile, the forward's back when the layer goes off, and for a family the
   CPU's classes at the kernel's backward tile. */
Test(viz_render, backward_tile_map_from_a_trace_and_from_the_cpu) {
  char dir[512], args[1024], path[700];
  snprintf(dir, sizeof dir, "%s/viz_render_bwd", FM_TEST_TMP_DIR);
  snprintf(args, sizeof args, "run --family causal_document --seqlen 4096 --pass both --cpu --out %s", dir);
  fmt_result *r = malloc(sizeof *r);
  fmt_run(r, args);
  cr_assert_eq(r->status, 0, "fmsim run: %s", r->err);
  free(r);
  static int64_t cycles[64 * 32];
  int64_t shape[4] = {1, 1, 64, 32};
  for (int rt = 0; rt < 64; rt++)
    for (int ct = 0; ct < 32; ct++) cycles[rt * 32 + ct] = 3000 + rt + 7 * ct;
  snprintf(path, sizeof path, "%s/tile_cycles_bwd.npy", dir);
  cr_assert_eq(fm_npy_save(path, FM_DT_I64, 4, shape, cycles, NULL), FM_OK);
  fm_npy_header h;
  uint8_t *want = NULL;
  snprintf(path, sizeof path, "%s/tiles_bwd.npy", dir);
  cr_assert_eq(fm_npy_load(path, &h, (void **)&want, 1 << 20, NULL), FM_OK);

  viz_state s;
  viz_scene *sc = trace_scene(dir, &s, 900, 600);
  fm_err err;
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  cr_assert(s.br == 128 && s.bc == 128 && s.facts.bwd_from_trace, "forward first; a backward there");
  cr_assert(s.facts.bwd_br == 64 && s.facts.bwd_bc == 128);
  fm_tile_counts fwd = sc->counts;
  cr_assert(viz_toggle_backward(&s) & VIZ_DO_SYNC);
  s.overlay = VIZ_OVERLAY_CYCLES;
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  cr_assert(sc->classes_from_trace && sc->pass == VIZ_BWD && sc->tr == 64 && sc->tc == 32);
  cr_assert(s.facts.has_cycles && s.overlay == VIZ_OVERLAY_CYCLES, "%s", s.status);
  int64_t masked = 0;
  for (int i = 0; i < 64 * 32; i++) {
    int cm, ce;
    viz_scene_tile_class(sc, i / 32, i % 32, &cm, &ce);
    cr_assert_eq(cm, want[i], "tile %d: the trace's backward class", i);
    masked += want[i] == FM_TILE_MASKED;
  }
  cr_assert_eq(sc->counts.minmax[FM_TILE_MASKED], masked);
  double brightest = 0;
  for (int i = 0; i < 64 * 32; i++)
    if (want[i] != FM_TILE_MASKED && cycles[i] > brightest) brightest = (double)cycles[i];
  cr_assert_float_eq(sc->cycles_max, brightest, 0.5, "the brightest visited backward tile");
  s.text = 0;
  cairo_surface_t *bwd = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 900, 600);
  cairo_t *cr = cairo_create(bwd);
  viz_draw(cr, &s, 900, 600);
  cairo_destroy(cr);
  /* off again: the forward's tile, classes and counts */
  viz_toggle_backward(&s);
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  cr_assert(s.br == 128 && s.bc == 128 && sc->pass == VIZ_FWD);
  cr_assert_eq(memcmp(&sc->counts, &fwd, sizeof fwd), 0);
  cr_assert_eq(s.overlay, VIZ_OVERLAY_NONE, "no forward cycles in this trace");
  cairo_surface_t *fw = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 900, 600);
  cr = cairo_create(fw);
  viz_draw(cr, &s, 900, 600);
  cairo_destroy(cr);
  cairo_surface_flush(bwd), cairo_surface_flush(fw);
  cr_assert_neq(memcmp(cairo_image_surface_get_data(bwd), cairo_image_surface_get_data(fw),
                       (size_t)cairo_image_surface_get_stride(fw) * 600), 0);
  cairo_surface_destroy(bwd);
  cairo_surface_destroy(fw);
  viz_scene_destroy(sc);
  free(want);

  /* a family: the kernel's backward tile (sm90 at D = 128), the CPU's classes there */
  viz_state_init(&s, 900, 600);
  viz_scene_opts fo = {.head_dim = 128};
  cr_assert_eq(viz_scene_create(&fo, &s, &sc, &err), FM_OK, "%s", err.msg);
  s.seqlen = 4096;
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  cr_assert(!s.facts.bwd_from_trace && s.facts.bwd_br == 64 && s.facts.bwd_bc == 128);
  viz_toggle_backward(&s);
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  fm_tile_counts counts;
  cr_assert_eq(fm_classify(viz_scene_mask(sc), 64, 128, &counts, NULL, NULL, NULL), FM_OK);
  cr_assert(!sc->classes_from_trace && sc->pass == VIZ_BWD);
  cr_assert_eq(memcmp(sc->counts.minmax, counts.minmax, sizeof counts.minmax), 0);
  cr_assert_eq(sc->bytes_max, (double)viz_tile_model_bytes(FM_TILE_PARTIAL, 64, 128, 128, FM_PASS_BWD),
               "the bytes overlay's scale is the backward's model");
  viz_scene_destroy(sc);
}
