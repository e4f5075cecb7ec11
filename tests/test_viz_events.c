/* test_viz_events.c — the viewer's pure event handler, without a window:
 * zoom keeps the token under the cursor, zoom stops at single tokens and at
 * the whole mask, drag pans by exactly what the mouse moved, the view never
 * leaves the mask, every key does what --help says, and a pan or zoom never
 * reclassifies (only Br/Bc/S/family changes do); the backward key moves to
 * the backward's tile and back. */
#include "fm_test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "fm_families.h"
#include "fm_npy.h"
#include "fm_timing.h"
#include "viz.h"
#include "viz_internal.h"

/* A state for an S x S mask without a scene (the handler needs none). */
static viz_state state_for(int32_t s_len) {
  viz_state s;
  viz_state_init(&s, 1000, 700);
  s.facts.sq = s.facts.sk = s_len;
  s.facts.npairs = 1;
  s.seqlen = s_len;
  viz_view_reset(&s);
  return s;
}

static unsigned key(viz_state *s, int k) {
  viz_event e = {.type = VIZ_EV_KEY, .key = k};
  return viz_handle_event(s, &e);
}

static unsigned wheel(viz_state *s, int x, int y, double notches) {
  viz_event e = {.type = VIZ_EV_WHEEL, .x = x, .y = y, .wheel = notches};
  return viz_handle_event(s, &e);
}

static void drag(viz_state *s, int x0, int y0, int x1, int y1) {
  viz_event e = {.type = VIZ_EV_BUTTON_DOWN, .x = x0, .y = y0, .button = 1};
  viz_handle_event(s, &e);
  e = (viz_event){.type = VIZ_EV_MOTION, .x = x1, .y = y1};
  viz_handle_event(s, &e);
  e = (viz_event){.type = VIZ_EV_BUTTON_UP, .x = x1, .y = y1, .button = 1};
  viz_handle_event(s, &e);
}

static void assert_view_inside(const viz_state *s) {
  cr_assert(s->view.x0 >= 0 && s->view.x1 <= s->facts.sk + 1e-9 && s->view.x0 < s->view.x1,
            "keys [%g, %g) outside [0, %d)", s->view.x0, s->view.x1, s->facts.sk);
  cr_assert(s->view.y0 >= 0 && s->view.y1 <= s->facts.sq + 1e-9 && s->view.y0 < s->view.y1,
            "rows [%g, %g) outside [0, %d)", s->view.y0, s->view.y1, s->facts.sq);
}

Test(viz_events, zoom_keeps_the_token_under_the_cursor) {
  viz_state s = state_for(131072);
  viz_layout l;
  viz_layout_compute(&s, s.width, s.height, &l);
  int px = (int)(l.plot.x + 0.3 * l.plot.w), py = (int)(l.plot.y + 0.6 * l.plot.h);
  double k0, r0, k1, r1;
  viz_point_to_tokens(&s, &l, px, py, &k0, &r0);
  cr_assert(wheel(&s, px, py, 3) & VIZ_DO_REDRAW);
  cr_assert_lt(s.view.x1 - s.view.x0, 131072 * 0.52, "3 notches zoom in by 1.25^3");
  viz_point_to_tokens(&s, &l, px, py, &k1, &r1);
  cr_assert_float_eq(k1, k0, 1e-6);
  cr_assert_float_eq(r1, r0, 1e-6);
  assert_view_inside(&s);
}

Test(viz_events, zoom_reaches_single_tokens_and_stops) {
  viz_state s = state_for(131072);
  viz_layout l;
  viz_layout_compute(&s, s.width, s.height, &l);
  int px = (int)(l.plot.x + l.plot.w / 2), py = (int)(l.plot.y + l.plot.h / 2);
  for (int i = 0; i < 200; i++) wheel(&s, px, py, 1);
  double span = s.view.x1 - s.view.x0;
  cr_assert_float_eq(span, 2.0, 1e-9, "deepest zoom shows 2 tokens, got %g", span);
  cr_assert_gt(l.plot.w / span, 100, "a token is many pixels wide");
  assert_view_inside(&s);
  for (int i = 0; i < 200; i++) wheel(&s, px, py, -1);
  cr_assert_float_eq(s.view.x0, 0, 1e-9);
  cr_assert_float_eq(s.view.x1, 131072, 1e-6, "zooming out stops at the whole mask");
}

Test(viz_events, drag_pans_with_the_mouse_and_stays_inside) {
  viz_state s = state_for(8192);
  viz_layout l;
  viz_layout_compute(&s, s.width, s.height, &l);
  int cx = (int)(l.plot.x + l.plot.w / 2), cy = (int)(l.plot.y + l.plot.h / 2);
  for (int i = 0; i < 10; i++) wheel(&s, cx, cy, 1);
  viz_view before = s.view;
  double per_px = (before.x1 - before.x0) / l.plot.w;
  drag(&s, cx, cy, cx - 40, cy + 25);
  /* content follows the mouse: moving it left shows keys further right */
  cr_assert_float_eq(s.view.x0 - before.x0, 40 * per_px, 1e-6);
  cr_assert_float_eq(s.view.y0 - before.y0, -25 * per_px, 1e-6);
  cr_assert_float_eq(s.view.x1 - s.view.x0, before.x1 - before.x0, 1e-9, "a pan keeps the zoom");
  cr_assert_eq(s.dragging, 0);
  drag(&s, cx, cy, cx + 100000, cy + 100000);
  assert_view_inside(&s);
  cr_assert_float_eq(s.view.x0, 0, 1e-9, "clamped at the first key");
  cr_assert_float_eq(s.view.y0, 0, 1e-9, "clamped at the first row");
  /* a press outside the plot does not start a drag */
  viz_event e = {.type = VIZ_EV_BUTTON_DOWN, .x = 2, .y = 2, .button = 1};
  viz_handle_event(&s, &e);
  cr_assert_eq(s.dragging, 0);
}

Test(viz_events, reset_arrows_and_centre_zoom) {
  viz_state s = state_for(4096);
  cr_assert(key(&s, '+') & VIZ_DO_REDRAW);
  cr_assert_float_eq(s.view.x1 - s.view.x0, 4096 / 1.25, 1e-6);
  cr_assert_float_eq((s.view.x0 + s.view.x1) / 2, 2048, 1e-6, "'+' zooms at the centre");
  double x0 = s.view.x0;
  key(&s, VIZ_KEY_RIGHT);
  cr_assert_float_eq(s.view.x0 - x0, (s.view.x1 - s.view.x0) / 10, 1e-6);
  key(&s, VIZ_KEY_DOWN);
  key(&s, '-');
  key(&s, '0');
  cr_assert(s.view.x0 == 0 && s.view.x1 == 4096 && s.view.y0 == 0 && s.view.y1 == 4096);
  key(&s, '+');
  key(&s, VIZ_KEY_HOME);
  cr_assert(s.view.x1 == 4096);
}

Test(viz_events, family_sample_and_sizes_cycle) {
  viz_state s = state_for(8192);
  int n = fm_family_count(), f0 = s.family;
  cr_assert(key(&s, 'f') & VIZ_DO_SYNC);
  cr_assert_eq(s.family, (f0 + 1) % n);
  key(&s, 'F');
  key(&s, 'F');
  cr_assert_eq(s.family, (f0 + n - 1) % n);
  for (int i = 0; i < n; i++) key(&s, 'f');
  cr_assert_eq(s.family, (f0 + n - 1) % n, "f wraps around the twelve families");

  /* Br / Bc: powers of two in 16..256 */
  s.br = 128;
  key(&s, 'r');
  cr_assert_eq(s.br, 256);
  cr_assert(key(&s, 'r') & VIZ_DO_SYNC);
  cr_assert_eq(s.br, 256, "Br stops at 256");
  for (int i = 0; i < 10; i++) key(&s, 'R');
  cr_assert_eq(s.br, 16, "Br stops at 16");
  s.bc = 100;
  key(&s, 'c');
  cr_assert_eq(s.bc, 128, "a size between powers of two goes to the next one");
  s.bc = 100;
  key(&s, 'C');
  cr_assert_eq(s.bc, 64);

  /* S: powers of two in 64..1M */
  s.seqlen = 8192;
  cr_assert(key(&s, 's') & VIZ_DO_SYNC);
  cr_assert_eq(s.seqlen, 16384);
  for (int i = 0; i < 20; i++) key(&s, 's');
  cr_assert_eq(s.seqlen, 1 << 20);
  for (int i = 0; i < 30; i++) key(&s, 'S');
  cr_assert_eq(s.seqlen, 64);

  /* samples where S has them, else the seed */
  s.facts.nsamples = 5;
  s.sample = 4;
  key(&s, 'd');
  cr_assert_eq(s.sample, 0);
  key(&s, 'D');
  cr_assert_eq(s.sample, 4);
  s.facts.nsamples = 0;
  uint64_t seed = s.seed;
  cr_assert(key(&s, 'd') & VIZ_DO_SYNC);
  cr_assert_eq(s.seed, seed + 1);
}

Test(viz_events, a_file_keeps_its_length) {
  viz_state s = state_for(1000);
  s.use_family = 0;
  s.facts.has_file = 1;
  unsigned act = key(&s, 's');
  cr_assert_eq(act & VIZ_DO_SYNC, 0u);
  cr_assert_eq(s.seqlen, 1000);
  cr_assert(strstr(s.status, "fixed by the file"), "status: %s", s.status);
  cr_assert(key(&s, 'f') & VIZ_DO_SYNC);
  cr_assert_eq(s.use_family, 1, "f leaves the file for the families");
}

Test(viz_events, layers_overlays_pairs_and_files) {
  viz_state s = state_for(1024);
  unsigned l0 = s.layers;
  key(&s, 'm');
  cr_assert_eq(s.layers, l0 & ~(unsigned)VIZ_LAYER_MASK);
  key(&s, 'm');
  key(&s, 't');
  cr_assert_eq(s.layers, l0 & ~(unsigned)VIZ_LAYER_TILES);
  key(&s, 't');
  key(&s, 'g');
  key(&s, 'x');
  key(&s, 'n');
  cr_assert_eq(s.layers, l0 & ~(unsigned)(VIZ_LAYER_GRID | VIZ_LAYER_HATCH | VIZ_LAYER_PANEL));

  /* without cycles the overlay goes none -> bytes -> none, saying why */
  s.facts.has_cycles = 0;
  key(&s, 'o');
  cr_assert_eq(s.overlay, VIZ_OVERLAY_BYTES);
  cr_assert(strstr(s.status, "no cycles"), "status: %s", s.status);
  key(&s, 'o');
  cr_assert_eq(s.overlay, VIZ_OVERLAY_NONE);
  s.facts.has_cycles = 1;
  key(&s, 'o');
  cr_assert_eq(s.overlay, VIZ_OVERLAY_CYCLES);

  s.facts.npairs = 3;
  cr_assert(key(&s, 'h') & VIZ_DO_SYNC);
  key(&s, 'h');
  key(&s, 'h');
  cr_assert_eq(s.pair, 0, "h wraps around the pairs");
  key(&s, 'H');
  cr_assert_eq(s.pair, 2);

  cr_assert(key(&s, 'p') & VIZ_DO_SCREENSHOT);
  cr_assert(key(&s, 'e') & VIZ_DO_EXPORT_PDF);
  cr_assert(key(&s, 'v') & VIZ_DO_EXPORT_SVG);
  key(&s, '?');
  cr_assert_eq(s.show_help, 1);
  cr_assert_eq(key(&s, VIZ_KEY_ESCAPE) & VIZ_DO_QUIT, 0u, "Esc first closes the key list");
  cr_assert_eq(s.show_help, 0);
  cr_assert(key(&s, VIZ_KEY_ESCAPE) & VIZ_DO_QUIT);
  cr_assert(key(&s, 'q') & VIZ_DO_QUIT);
  viz_event e = {.type = VIZ_EV_QUIT};
  cr_assert(viz_handle_event(&s, &e) & VIZ_DO_QUIT);
  cr_assert_eq(key(&s, 'Z'), 0u, "an unbound key does nothing");
}

Test(viz_events, resize_and_layout) {
  viz_state s = state_for(8192);
  viz_event e = {.type = VIZ_EV_RESIZE, .width = 1600, .height = 1000};
  cr_assert(viz_handle_event(&s, &e) & VIZ_DO_REDRAW);
  cr_assert(s.width == 1600 && s.height == 1000);
  int sizes[][2] = {{1600, 1000}, {640, 480}, {300, 200}, {4000, 1000}, {1000, 4000}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    viz_layout l;
    viz_layout_compute(&s, sizes[i][0], sizes[i][1], &l);
    cr_assert_float_eq(l.plot.w, l.plot.h, 1.0, "square tokens for a square mask");
    cr_assert(l.plot.x >= 0 && l.plot.y >= 0 && l.plot.x + l.plot.w <= sizes[i][0] &&
              l.plot.y + l.plot.h <= sizes[i][1], "plot inside the figure");
    if (l.panel.w > 0)
      cr_assert(l.panel.x >= l.plot.x + l.plot.w && l.panel.x + l.panel.w <= sizes[i][0],
                "the panel does not overlap the plot");
  }
}

Test(viz_events, help_lists_every_key_the_handler_knows) {
  int n;
  const viz_key_help *t = viz_key_help_table(&n);
  char all[4096] = "";
  for (int i = 0; i < n; i++) {
    strcat(all, " ");
    strcat(all, t[i].keys);
    strcat(all, " ");
  }
  const char *bound = "fFdDrRcCsShHmtgxon+-0pev?q";
  for (const char *k = bound; *k; k++) {
    char needle[4] = {' ', *k, 0, 0};
    cr_assert(strstr(all, needle) || (*k == '0' && strstr(all, "0 /")), "key '%c' missing from help",
              *k);
  }
  for (const char *k = bound; *k; k++) {
    viz_state s = state_for(1024);
    s.facts.npairs = 2;
    cr_assert_neq(key(&s, *k), 0u, "key '%c' is listed but does nothing", *k);
  }
}

/* The scene rebuilds only what changed: pan, zoom and hover keep the tile
 * pieces; Br/Bc rebuild them; S rebuilds the mask. */
Test(viz_events, classification_recomputed_only_on_change) {
  viz_state s;
  viz_state_init(&s, 900, 600);
  viz_scene_opts o = {0};
  o.batch = o.heads = 1;
  viz_scene *sc = NULL;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, NULL), FM_OK);
  s.seqlen = 16384;
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  const viz_piece *pieces = sc->pieces.items;
  uint64_t version = sc->version;
  const fm_colmask *mask = sc->mask;
  viz_layout l;
  viz_layout_compute(&s, s.width, s.height, &l);
  viz_event ev[] = {{.type = VIZ_EV_WHEEL, .x = (int)l.plot.x + 50, .y = (int)l.plot.y + 80, .wheel = 2},
                    {.type = VIZ_EV_MOTION, .x = (int)l.plot.x + 90, .y = (int)l.plot.y + 90},
                    {.type = VIZ_EV_KEY, .key = VIZ_KEY_LEFT},
                    {.type = VIZ_EV_KEY, .key = 'g'}};
  for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) {
    unsigned act = viz_handle_event(&s, &ev[i]);
    cr_assert_eq(act & VIZ_DO_SYNC, 0u, "event %zu asks for a rebuild", i);
    cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
    cr_assert_eq(sc->version, version, "event %zu changed the data version", i);
  }
  cr_assert_eq(sc->pieces.items, pieces);
  cr_assert(key(&s, 'c') & VIZ_DO_SYNC);
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  cr_assert_gt(sc->version, version, "Bc reclassifies");
  cr_assert_eq(sc->mask, mask, "Bc keeps the mask");
  cr_assert_eq(sc->bc, 256);
  key(&s, 's');
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  cr_assert_eq(fm_colmask_sk(sc->mask), 32768, "S rebuilds the mask");
  cr_assert(s.view.x1 == 32768 && s.view.y1 == 32768, "a new extent resets the view");
  viz_scene_destroy(sc);
}

/* A family that cannot be built keeps the old mask and says why: per-head
 * random eviction for 65535 x 65535 (batch, head) pairs is far too large. */
Test(viz_events, failed_rebuild_keeps_the_old_mask) {
  viz_state s;
  viz_state_init(&s, 900, 600);
  viz_scene_opts o = {0};
  o.batch = o.heads = 65535;
  viz_scene *sc = NULL;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, NULL), FM_OK);
  for (int i = 0; i < fm_family_count(); i++)
    if (!strcmp(fm_family_at(i)->name, "causal")) s.family = i;
  s.seqlen = 128;
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK, "one mask serves every pair");
  int causal = s.family;
  for (int i = 0; i < fm_family_count(); i++)
    if (!strcmp(fm_family_at(i)->name, "random_eviction")) s.family = i;
  s.seqlen = 256;
  fm_err err;
  cr_assert_neq(viz_scene_sync(sc, &s, &err), FM_OK);
  cr_assert_neq(s.status[0], 0, "the failure is shown");
  cr_assert_eq(fm_colmask_sk(sc->mask), 128, "the old mask stays");
  cr_assert_eq(s.seqlen, 128, "the state goes back to what is shown");
  cr_assert_eq(s.family, causal);
  cr_assert_str_eq(viz_scene_label(sc), "causal");
  viz_scene_destroy(sc);
}

/* issue 11: a drag to the extremes of int must not overflow (it did in
 * viz_handle_event's e->x - drag_x and in the script's drag interpolation). */
#include <limits.h>

#include "viz_sdl.h"

Test(viz_events, drag_to_int_extremes_follows_the_pointer) {
  viz_state s = state_for(8192);
  viz_layout l;
  viz_layout_compute(&s, s.width, s.height, &l);
  int cx = (int)(l.plot.x + l.plot.w / 2), cy = (int)(l.plot.y + l.plot.h / 2);
  wheel(&s, cx, cy, 10); /* zoom in: there is room to pan */
  drag(&s, cx, cy, INT_MIN, INT_MIN);
  /* the pointer went far left and up: the content follows it, the view shows the end */
  cr_assert_float_eq(s.view.x1, 8192, 1e-6, "x1 = %f", s.view.x1);
  cr_assert_float_eq(s.view.y1, 8192, 1e-6, "y1 = %f", s.view.y1);
  assert_view_inside(&s);
  drag(&s, cx, cy, INT_MAX, INT_MAX);
  cr_assert_float_eq(s.view.x0, 0, 1e-6);
  assert_view_inside(&s);
}

Test(viz_events, script_lines_parse_strictly) {
  viz_script_cmd c;
  fm_err err;
  cr_assert_eq(viz_script_parse("drag 10 20 30 40\n", &c, &err), FM_OK);
  viz_event ev[VIZ_SCRIPT_MAX_EVENTS];
  cr_assert_eq(viz_script_events(&c, ev), 7);
  cr_assert(ev[1].type == VIZ_EV_BUTTON_DOWN && ev[6].type == VIZ_EV_BUTTON_UP && ev[6].x == 30);
  cr_assert_eq(viz_script_parse("drag -2147483648 0 2147483647 0", &c, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "out of range"), "%s", err.msg);
  cr_assert_eq(viz_script_parse("motion 1 99999999999999999999", &c, &err), FM_EINVAL);
  cr_assert_eq(viz_script_parse("motion 1", &c, &err), FM_EINVAL);
  cr_assert_eq(viz_script_parse("motion 1 2 3", &c, &err), FM_EINVAL);
  cr_assert_eq(viz_script_parse("wheel 1 2", &c, &err), FM_EINVAL);
  cr_assert_eq(viz_script_parse("resize 0 10", &c, &err), FM_EINVAL);
  cr_assert_eq(viz_script_parse("key ab", &c, &err), FM_EINVAL);
  cr_assert_eq(viz_script_parse("jump 1 2", &c, &err), FM_EINVAL);
  cr_assert_eq(viz_script_parse("key escape", &c, &err), FM_OK);
  cr_assert_eq(c.key, VIZ_KEY_ESCAPE);
  cr_assert_eq(viz_script_parse("  # comment", &c, &err), FM_OK);
  cr_assert_eq(c.op, VIZ_SCRIPT_NONE);
}

/* ---- hover over a mask no interval form holds --------------------------------------- */

/* A causal S x S mask (1 = may attend) whose column `bad` also masks rows
 * [S/2, S/2 + S/16) and [3S/4, 3S/4 + S/32): three masked runs, which no
 * interval form holds; every other column fits causal-1. */
static viz_scene *one_bad_column_on(viz_state *s, int n, int bad, const fm_gpu_profile *prof) {
  uint8_t *a = malloc((size_t)n * n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      a[i * n + j] = j <= i && !(j == bad && ((i >= n / 2 && i < n / 2 + n / 16) ||
                                              (i >= 3 * n / 4 && i < 3 * n / 4 + n / 32)));
  char path[512];
  snprintf(path, sizeof path, "%s/viz_events_bad_%d.npy", FM_TEST_TMP_DIR, n);
  int64_t shape[2] = {n, n};
  cr_assert_eq(fm_npy_save(path, FM_DT_BOOL, 2, shape, a, NULL), FM_OK);
  free(a);
  viz_scene_opts o = {.path = path, .profile = prof};
  viz_scene *sc = NULL;
  fm_err err;
  cr_assert_eq(viz_scene_create(&o, s, &sc, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(viz_scene_sync(sc, s, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(s->facts.misfit, 1);
  cr_assert_eq(s->facts.misfit_columns, 1, "one column no form holds");
  return sc;
}

static viz_scene *one_bad_column(viz_state *s, int n, int bad) { return one_bad_column_on(s, n, bad, NULL); }

/* Draws s at its size and fills items with what was drawn (the ink log):
 * returns how many of them (at most cap). */
static int drawn_strings(const viz_state *s, viz_ink *items, int cap) {
  cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, s->width, s->height);
  viz_ink_log log = {.items = items, .cap = cap};
  viz_ink_log_attach(surf, &log);
  cairo_t *cr = cairo_create(surf);
  viz_draw(cr, s, s->width, s->height);
  cairo_destroy(cr);
  cairo_surface_destroy(surf);
  return log.count < cap ? log.count : cap;
}

/* The hover lines after the mouse moved to key `key`, row `row` (token
 * centres), joined with newlines into out. */
static int hover_at(viz_state *s, double key, double row, char *out, size_t cap) {
  viz_layout l;
  viz_layout_compute(s, s->width, s->height, &l);
  viz_event e = {.type = VIZ_EV_MOTION,
                 .x = (int)floor(l.plot.x + (key - s->view.x0) / (s->view.x1 - s->view.x0) * l.plot.w),
                 .y = (int)floor(l.plot.y + (row - s->view.y0) / (s->view.y1 - s->view.y0) * l.plot.h)};
  cr_assert(viz_handle_event(s, &e) & VIZ_DO_REDRAW);
  char lines[24][160];
  int n = viz_hover_lines(s, s->width, s->height, lines, 24);
  out[0] = 0;
  for (int i = 0; i < n; i++) snprintf(out + strlen(out), cap - strlen(out), "%s\n", lines[i]);
  return n;
}

Test(viz_events, hover_shows_the_runs_of_a_column_no_form_holds) {
  viz_state s;
  viz_state_init(&s, 1200, 800);
  viz_scene *sc = one_bad_column(&s, 64, 10);
  char text[4096];
  cr_assert_gt(hover_at(&s, 10.5, 33.5, text, sizeof text), 0);
  cr_assert(strstr(text, "query i = 33, key j = 10: masked\n"), "%s", text);
  cr_assert(strstr(text, "column 10: 3 masked runs, no interval form holds it\n"), "%s", text);
  cr_assert(strstr(text, "[0, 10) [32, 36) [48, 50)\n"), "%s", text);
  cr_assert(strstr(text, "class: partial (exact; the mask has no intervals)"), "%s", text);
  cr_assert(hover_at(&s, 11.5, 33.5, text, sizeof text) > 0);
  cr_assert(strstr(text, "query i = 33, key j = 11: visible\n"), "%s", text);
  cr_assert(strstr(text, "column 11: 1 masked run, fits causal-1\n"), "%s", text);
  /* the window's panel draws these very lines */
  hover_at(&s, 10.5, 33.5, text, sizeof text);
  static viz_ink items[2048];
  int shown = 0, count = drawn_strings(&s, items, 2048);
  for (int i = 0; i < count; i++)
    shown |= (!strcmp(items[i].text, "column 10: 3 masked runs, no interval form holds it")) |
             (!strcmp(items[i].text, "[0, 10) [32, 36) [48, 50)") << 1) |
             (!strcmp(items[i].text, "Under the cursor") << 2) |
             (!strncmp(items[i].text, "j = 10: 3 runs [0, 10) [32, 36) [48, 50)", 40) << 3);
  cr_assert_eq(shown, 15, "the panel shows the hover lines and lists the column (%x)", shown);
  /* off the plot: nothing */
  viz_event leave = {.type = VIZ_EV_LEAVE};
  viz_handle_event(&s, &leave);
  char lines[4][160];
  cr_assert_eq(viz_hover_lines(&s, s.width, s.height, lines, 4), 0);
  viz_scene_destroy(sc);
}

/* Zoomed out, a pixel covers several keys: pointing at the pixel that holds
 * the marked column shows that column, whichever key is under the centre. */
Test(viz_events, hover_finds_the_marked_column_inside_a_pixel) {
  viz_state s;
  viz_state_init(&s, 1200, 800);
  viz_scene *sc = one_bad_column(&s, 4096, 1000);
  viz_layout l;
  viz_layout_compute(&s, s.width, s.height, &l);
  double keys_per_px = 4096 / l.plot.w;
  cr_assert_gt(keys_per_px, 3, "several keys per pixel");
  char text[4096];
  int hit = 0;
  for (int dx = -1; dx <= 1; dx++) { /* the pixel of key 1000 and its neighbours */
    double key = 1000.2 + dx * keys_per_px;
    hover_at(&s, key, 2100.5, text, sizeof text);
    int here = strstr(text, "key j = 1000:") != NULL;
    hit += here;
    if (dx == 0) cr_assert(here, "%s", text);
    else cr_assert(!here, "a neighbouring pixel points at column 1000: %s", text);
  }
  cr_assert_eq(hit, 1);
  hover_at(&s, 1000.2, 2100.5, text, sizeof text);
  cr_assert(strstr(text, "column 1000: 3 masked runs, no interval form holds it\n"), "%s", text);
  cr_assert(strstr(text, "[0, 1000) [2048, 2304) [3072, 3200)\n"), "%s", text);
  viz_scene_destroy(sc);
}

Test(viz_events, backward_key_moves_to_the_backward_tile_and_back) {
  viz_state s = state_for(8192);
  s.br = 128, s.bc = 64;
  s.facts.bwd_br = 64, s.facts.bwd_bc = 128;
  unsigned layers = s.layers;
  cr_assert(key(&s, 'b') & VIZ_DO_SYNC, "the tile changes: a sync");
  cr_assert(s.layers & VIZ_LAYER_BACKWARD);
  cr_assert(s.br == 64 && s.bc == 128, "the backward's tile: %d x %d", s.br, s.bc);
  cr_assert(strstr(s.status, "backward: tiles 64 x 128") && strstr(s.status, "CPU"), "%s", s.status);
  key(&s, 'r'); /* r and c still move the tile */
  cr_assert_eq(s.br, 128);
  cr_assert(key(&s, 'b') & VIZ_DO_SYNC);
  cr_assert_eq(s.layers, layers);
  cr_assert(s.br == 128 && s.bc == 64, "the forward's tile back: %d x %d", s.br, s.bc);
  s.facts.bwd_from_trace = 1;
  key(&s, 'b');
  cr_assert(strstr(s.status, "trace"), "%s", s.status);
  key(&s, 'b');
  /* no backward tile (a head dim the registry lacks): nothing changes, the status says why */
  s.facts.bwd_br = s.facts.bwd_bc = 0;
  cr_assert_eq(key(&s, 'b') & VIZ_DO_SYNC, 0);
  cr_assert_eq(s.layers, layers);
  cr_assert(s.br == 128 && s.bc == 64);
  cr_assert(strstr(s.status, "no backward tile"), "%s", s.status);
  int n, found = 0;
  const viz_key_help *h = viz_key_help_table(&n);
  for (int i = 0; i < n; i++) found |= !strcmp(h[i].keys, "b") && strstr(h[i].action, "backward");
  cr_assert(found, "the key list has b");
}

/* ---- the predicted time in the side panel (--gpu) ------------------------------------ */

/* The repository's H200 profile of sm80 (data/gpu/h200-sm80.json). */
static void h200_sm80(fm_gpu_profile *p) {
  char path[700];
  fm_err err;
  snprintf(path, sizeof path, "%s/../data/gpu/h200-sm80.json", FM_TEST_SOURCE_DIR);
  cr_assert_eq(fm_profile_load(path, p, &err), FM_OK, "%s", err.msg);
  snprintf(p->name, sizeof p->name, "h200-sm80");
}

/* The timing model's forward time of every pair of the scene's mask, ms. */
static double model_fwd_ms(const viz_scene *sc, const fm_gpu_profile *p, int64_t batch, int64_t heads) {
  fm_timing_work w;
  fm_timing_result r;
  fm_timing_problem pb = {.batch = batch, .heads = heads, .head_dim = 128, .pass = FM_PASS_FWD,
                          .variant = FM_VARIANT_SKIP};
  cr_assert_eq(fm_timing_work_init(&w, viz_scene_mask(sc), 128, 64, NULL), FM_OK);
  cr_assert_eq(fm_timing_predict(p, &w, &pb, &r, NULL), FM_OK);
  fm_timing_work_free(&w);
  return r.time_us / 1e3;
}

/* "predicted X ms fwd on h200-sm80 (sm80, 128x64)" with X within its three
 * significant digits of want. */
static void assert_predicted_line(const char *line, double want) {
  const char *tail = " ms fwd on h200-sm80 (sm80, 128x64)";
  cr_assert(!strncmp(line, "predicted ", 10), "%s", line);
  char *end;
  double got = strtod(line + 10, &end);
  cr_assert_str_eq(end, tail, "%s", line);
  cr_assert(fabs(got - want) <= 0.005 * want, "panel %s, model %.6g ms", line, want);
}

Test(viz_events, panel_shows_the_predicted_time_of_the_mask) {
  fm_gpu_profile prof;
  h200_sm80(&prof);
  viz_state s;
  viz_state_init(&s, 1200, 800);
  viz_scene_opts o = {.batch = 2, .heads = 4, .profile = &prof};
  viz_scene *sc = NULL;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, NULL), FM_OK);
  s.seqlen = 16384;
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  char lines[4][160];
  cr_assert_eq(viz_prediction_lines(&s, lines, 4), 1, "the forward alone");
  double fwd = model_fwd_ms(sc, &prof, 2, 4);
  assert_predicted_line(lines[0], fwd);
  /* the window's panel draws that very line */
  static viz_ink items[2048];
  int drawn = 0, count = drawn_strings(&s, items, 2048);
  for (int i = 0; i < count; i++) drawn |= !strcmp(items[i].text, lines[0]);
  cr_assert(drawn, "the panel shows '%s'", lines[0]);
  /* the backward layer: this profile has no backward fit, and says so */
  cr_assert(viz_toggle_backward(&s) & VIZ_DO_SYNC);
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  cr_assert_eq(viz_prediction_lines(&s, lines, 4), 2);
  assert_predicted_line(lines[0], fwd);
  cr_assert_str_eq(lines[1], "predicted bwd: h200-sm80 has no backward fit");
  /* another S: the prediction follows the new mask */
  viz_toggle_backward(&s);
  key(&s, 'S');
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  cr_assert_eq(fm_colmask_sk(viz_scene_mask(sc)), 8192);
  cr_assert_eq(viz_prediction_lines(&s, lines, 4), 1);
  double half = model_fwd_ms(sc, &prof, 2, 4);
  cr_assert_lt(half, 0.6 * fwd, "half the length, about a quarter of the work");
  assert_predicted_line(lines[0], half);
  viz_scene_destroy(sc);
  /* no profile, no line */
  o.profile = NULL;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, NULL), FM_OK);
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  cr_assert_eq(viz_prediction_lines(&s, lines, 4), 0);
  viz_scene_destroy(sc);
}

/* A mask no interval form holds runs on no kernel: no number, a reason. */
Test(viz_events, no_prediction_for_a_mask_no_form_holds) {
  fm_gpu_profile prof;
  h200_sm80(&prof);
  viz_state s;
  viz_state_init(&s, 1200, 800);
  viz_scene *sc = one_bad_column_on(&s, 256, 10, &prof);
  char lines[2][160];
  cr_assert_eq(viz_prediction_lines(&s, lines, 2), 1);
  cr_assert_str_eq(lines[0], "predicted fwd: none: no interval form holds this mask, no kernel runs it");
  viz_scene_destroy(sc);
}
