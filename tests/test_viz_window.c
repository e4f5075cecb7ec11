/* test_viz_window.c — the SDL2 window under Xvfb: `fmsim view --script`
 * pushes key and mouse events into SDL's queue (SDL_TEXTINPUT, SDL_KEYDOWN,
 * SDL_MOUSEMOTION, SDL_MOUSEBUTTON*, SDL_MOUSEWHEEL), the window handles
 * them like a user's, and the 'p' key saves screenshots. Each screenshot
 * must equal an offscreen draw of the same events replayed on the pure
 * handler (so SDL's translation, the window's frame and the screenshot path
 * are all checked), and show the mask where the mask is. Skips when xvfb-run
 * is absent (scripts/install-deps.sh installs xvfb and xauth). */
#include "fm_test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <criterion/criterion.h>
#include <string.h>
#include <sys/stat.h>

#include "fm_families.h"
#include "viz.h"

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

static void send(viz_state *s, viz_event e) {
  unsigned act = viz_handle_event(s, &e);
  if (act & VIZ_DO_SYNC) cr_assert_eq(viz_scene_sync(s->scene, s, NULL), FM_OK);
}
static void key(viz_state *s, int k) { send(s, (viz_event){.type = VIZ_EV_KEY, .key = k}); }
static void motion(viz_state *s, int x, int y) { send(s, (viz_event){.type = VIZ_EV_MOTION, .x = x, .y = y}); }

/* Compares a screenshot with an offscreen draw of s; returns pixels that differ. */
static long compare_shot(const char *path, const viz_state *s, int *w_out, int *h_out) {
  cairo_surface_t *shot = cairo_image_surface_create_from_png(path);
  cr_assert_eq(cairo_surface_status(shot), CAIRO_STATUS_SUCCESS, "%s: no screenshot", path);
  int w = cairo_image_surface_get_width(shot), h = cairo_image_surface_get_height(shot);
  *w_out = w;
  *h_out = h;
  cairo_surface_t *mine = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h);
  cairo_t *cr = cairo_create(mine);
  viz_draw(cr, s, w, h);
  cairo_destroy(cr);
  cairo_surface_flush(mine);
  const unsigned char *a = cairo_image_surface_get_data(shot), *b = cairo_image_surface_get_data(mine);
  int sa = cairo_image_surface_get_stride(shot), sb = cairo_image_surface_get_stride(mine);
  long bad = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      bad += (((const uint32_t *)(a + (size_t)y * sa))[x] & 0xFFFFFF) !=
             (((const uint32_t *)(b + (size_t)y * sb))[x] & 0xFFFFFF);
  if (bad) {
    char out[600];
    snprintf(out, sizeof out, "%s.expected.png", path);
    cairo_surface_write_to_png(mine, out);
  }
  cairo_surface_destroy(mine);
  cairo_surface_destroy(shot);
  return bad;
}

static uint32_t pixel_at(const char *path, int x, int y) {
  cairo_surface_t *img = cairo_image_surface_create_from_png(path);
  const unsigned char *d = cairo_image_surface_get_data(img);
  uint32_t p = ((const uint32_t *)(d + (size_t)y * cairo_image_surface_get_stride(img)))[x] & 0xFFFFFF;
  cairo_surface_destroy(img);
  return p;
}

Test(viz_window, injected_events_match_the_offscreen_replay, .timeout = 60) {
  if (system("command -v xvfb-run >/dev/null 2>&1") != 0)
    cr_skip_test("xvfb-run not found (apt-get install xvfb xauth; scripts/install-deps.sh)");
  char dir[512], script[600], cmd[2048], shot[700];
  snprintf(dir, sizeof dir, "%s/viz_window", FM_TEST_TMP_DIR);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  cr_assert_eq(system(cmd), 0);
  snprintf(script, sizeof script, "%s/events.txt", dir);
  write_text(script,
             "# hover, mask layer only, screenshot 1\n"
             "motion 200 150\n"
             "key t\n"
             "key p\n"
             "# zoom 3 notches at (250, 200), drag, screenshot 2\n"
             "wheel 3 250 200\n"
             "drag 250 200 180 160\n"
             "key p\n"
             "# reset, tiles back, Bc x2 (reclassifies), arrows, screenshot 3\n"
             "key 0\n"
             "key t\n"
             "key c\n"
             "key +\n"
             "key right\n"
             "key p\n"
             "key e\n"
             "resize 800 600\n"
             "key p\n"
             "key q\n");
  snprintf(cmd, sizeof cmd,
           "xvfb-run -a -s '-screen 0 2000x1600x24' %s view --family causal --seqlen 1024 --size 640x480 "
           "--script '%s' --out-dir '%s' > '%s/out.txt' 2>&1",
           FMSIM_BIN, script, dir, dir);
  int st = system(cmd);
  char out[8192], out_path[700];
  snprintf(out_path, sizeof out_path, "%s/out.txt", dir);
  fmt_slurp(out_path, out, sizeof out);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fmsim view under Xvfb failed:\n%s", out);

  /* the same session, offscreen */
  viz_state s;
  viz_state_init(&s, 640, 480);
  viz_scene_opts o = {0};
  o.batch = o.heads = 1;
  viz_scene *sc = NULL;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, NULL), FM_OK);
  for (int i = 0; i < fm_family_count(); i++)
    if (!strcmp(fm_family_at(i)->name, "causal")) s.family = i;
  s.seqlen = 1024;
  cr_assert_eq(viz_scene_sync(sc, &s, NULL), FM_OK);
  int w, h;

  motion(&s, 200, 150);
  key(&s, 't');
  key(&s, 'p');
  snprintf(shot, sizeof shot, "%s/fmsim-view-001.png", dir);
  cr_assert_eq(compare_shot(shot, &s, &w, &h), 0, "screenshot 1 differs from the replay (see %s.expected.png)", shot);
  cr_assert(w == 640 && h == 480, "screenshot 1 is %dx%d", w, h);
  /* the causal mask where it should be: below the diagonal visible, above masked */
  viz_layout l;
  viz_layout_compute(&s, 640, 480, &l);
  int lx = (int)(l.plot.x + l.plot.w * 0.2), ly = (int)(l.plot.y + l.plot.h * 0.8);
  int ux = (int)(l.plot.x + l.plot.w * 0.8), uy = (int)(l.plot.y + l.plot.h * 0.2);
  cr_assert_eq(pixel_at(shot, lx, ly), (uint32_t)VIZ_RGB_VISIBLE, "row 80%%, key 20%% is visible");
  cr_assert_eq(pixel_at(shot, ux, uy), (uint32_t)VIZ_RGB_MASKED, "row 20%%, key 80%% is masked");

  motion(&s, 250, 200);
  send(&s, (viz_event){.type = VIZ_EV_WHEEL, .x = 250, .y = 200, .wheel = 3});
  motion(&s, 250, 200);
  send(&s, (viz_event){.type = VIZ_EV_BUTTON_DOWN, .x = 250, .y = 200, .button = 1});
  for (int k = 1; k <= 4; k++) motion(&s, 250 + (180 - 250) * k / 4, 200 + (160 - 200) * k / 4);
  send(&s, (viz_event){.type = VIZ_EV_BUTTON_UP, .x = 180, .y = 160, .button = 1});
  key(&s, 'p');
  cr_assert_lt(s.view.x1 - s.view.x0, 1024 * 0.6, "the wheel zoomed in");
  snprintf(shot, sizeof shot, "%s/fmsim-view-002.png", dir);
  cr_assert_eq(compare_shot(shot, &s, &w, &h), 0, "screenshot 2 (zoom, drag) differs (see %s.expected.png)", shot);

  key(&s, '0');
  key(&s, 't');
  key(&s, 'c');
  key(&s, '+');
  key(&s, VIZ_KEY_RIGHT);
  key(&s, 'p');
  cr_assert_eq(s.bc, 256);
  snprintf(shot, sizeof shot, "%s/fmsim-view-003.png", dir);
  cr_assert_eq(compare_shot(shot, &s, &w, &h), 0, "screenshot 3 (keys) differs (see %s.expected.png)", shot);

  struct stat sb;
  snprintf(shot, sizeof shot, "%s/fmsim-view-004.pdf", dir);
  cr_assert(stat(shot, &sb) == 0 && sb.st_size > 1000, "the 'e' key wrote no PDF");

  send(&s, (viz_event){.type = VIZ_EV_RESIZE, .width = 800, .height = 600});
  key(&s, 'p');
  snprintf(shot, sizeof shot, "%s/fmsim-view-005.png", dir);
  cr_assert_eq(compare_shot(shot, &s, &w, &h), 0, "screenshot 4 (resized) differs (see %s.expected.png)", shot);
  cr_assert(w == 800 && h == 600, "the resized window's screenshot is %dx%d", w, h);
  cr_assert(strstr(out, "saved"), "the window reports its files: %s", out);
  viz_scene_destroy(sc);
}
