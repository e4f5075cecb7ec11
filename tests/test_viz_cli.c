/* test_viz_cli.c — `fmsim render` and `fmsim view` from the outside:
 * valid SVG (an XML parser) and PDF (pdfinfo, pdftoppm) files, byte-identical
 * reruns (no timestamps), every bad input of the issue answered with one
 * line on stderr, a non-zero exit and no file left behind, the cycles
 * overlay of a trace the test writes, dense and interval .npy sources, the
 * frame benchmark and the key list of --help. Tests that need xmllint or
 * poppler-utils skip with a message when the tool is absent
 * (scripts/install-deps.sh installs them). */
#include "fm_test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "fm_families.h"
#include "fm_intervals_io.h"
#include "fm_npy.h"
#include "viz.h"

static const char *tmpdir(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/viz_cli_%s", FM_TEST_TMP_DIR, name);
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", path, path);
  cr_assert_eq(system(cmd), 0);
  return path;
}

static int have_tool(const char *tool) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
  return system(cmd) == 0;
}

/* Names in dir, space separated (to show what was left behind). */
static int dir_entries(const char *dir, char *names, size_t cap) {
  DIR *d = opendir(dir);
  int n = 0;
  names[0] = 0;
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    n++;
    strncat(names, e->d_name, cap - strlen(names) - 2);
    strncat(names, " ", cap - strlen(names) - 1);
  }
  closedir(d);
  return n;
}

static fmt_result *run(const char *fmt, ...) {
  char args[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  fmt_result *r = malloc(sizeof *r);
  fmt_run(r, args);
  return r;
}

/* ---- valid files ------------------------------------------------------------ */

/* Renders `args` (a `render` command line with one %s: the folder d) and
 * checks the SVG is valid XML; skips the test without xmllint. */
static void render_valid_svg(const char *d, const char *args, const char *file) {
  if (!have_tool("xmllint")) cr_skip_test("xmllint not found (apt-get install libxml2-utils; scripts/install-deps.sh)");
  fmt_result *r = run(args, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "xmllint --noout '%s/%s'", d, file);
  cr_assert_eq(system(cmd), 0, "xmllint rejects %s", file);
}

Test(viz_cli, svg_is_valid_xml) {
  const char *d = tmpdir("svg");
  render_valid_svg(d, "render --family share_question --seqlen 8192 --br 64 --bc 64 -o %s/f.svg", "f.svg");
  char cmd[1024];
  /* the root is an SVG document with the page size in points: by default the
   * paper size of the registry (inches x 72), not a screen's */
  const viz_figure *f = viz_figure_find("tiles");
  char want[64];
  snprintf(want, sizeof want, "%gpt", f->width_in * 72);
  cr_assert_lt(f->width_in, 8.5, "a default that fits a page");
  snprintf(cmd, sizeof cmd,
           "xmllint --xpath \"string(/*[local-name()='svg']/@width)\" '%s/f.svg' | grep -qx '%s'", d, want);
  cr_assert_eq(system(cmd), 0, "the SVG's width is not %s", want);
}

/* SVG text is <text> elements an editor can change, not glyph outlines: the
 * caption, the tick labels and the rotated axis title are there as strings,
 * and cairo's glyph definitions are not. */
Test(viz_cli, svg_text_is_editable_text) {
  const char *d = tmpdir("svgtext");
  render_valid_svg(d, "render --family causal_document --seqlen 8192 -o %s/t.svg", "t.svg");
  char cmd[1024];
  static const char *const queries[] = {
      "count(//*[local-name()='text']) >= 10",
      "count(//*[local-name()='text'][contains(., 'causal_document')]) = 1",
      "count(//*[local-name()='text'][.='8K']) >= 2",
      "count(//*[local-name()='text'][contains(., 'query row')][starts-with(@transform, 'rotate(-90')]) = 1",
      "count(//*[contains(@id, 'glyph')]) = 0"};
  for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
    snprintf(cmd, sizeof cmd, "xmllint --xpath \"%s\" '%s/t.svg' | grep -qx true", queries[i], d);
    cr_assert_eq(system(cmd), 0, "the SVG fails: %s", queries[i]);
  }
}

Test(viz_cli, pdf_is_valid_and_reproducible) {
  if (!have_tool("pdfinfo") || !have_tool("pdftoppm"))
    cr_skip_test("pdfinfo/pdftoppm not found (apt-get install poppler-utils; scripts/install-deps.sh)");
  const char *d = tmpdir("pdf");
  fmt_result *r = run("render --family causal_blockwise --seqlen 8192 --size 900x600 -o %s/a.pdf", d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render --family causal_blockwise --seqlen 8192 --size 900x600 -o %s/b.pdf", d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "pdfinfo '%s/a.pdf' > '%s/info.txt'", d, d);
  cr_assert_eq(system(cmd), 0, "pdfinfo rejects the PDF");
  char info[4096], path[600];
  snprintf(path, sizeof path, "%s/info.txt", d);
  fmt_slurp(path, info, sizeof info);
  cr_assert(strstr(info, "Pages:") && strstr(info, "1\n"), "%s", info);
  cr_assert(strstr(info, "Page size:       900 x 600 pts"), "%s", info);
  snprintf(cmd, sizeof cmd, "pdftoppm -r 36 -png '%s/a.pdf' '%s/page' && test -s '%s/page-1.png'", d, d, d);
  cr_assert_eq(system(cmd), 0, "pdftoppm cannot render the PDF");
  snprintf(cmd, sizeof cmd, "cmp -s '%s/a.pdf' '%s/b.pdf'", d, d);
  cr_assert_eq(system(cmd), 0, "two runs wrote different PDFs (a timestamp?)");
  free(r);
}

Test(viz_cli, png_is_reproducible_and_sized) {
  const char *d = tmpdir("png");
  for (int k = 0; k < 2; k++) {
    fmt_result *r = run("render --family document --seqlen 32768 --size 640x400 --dpi 144 -o %s/%c.png",
                        d, 'a' + k);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert_eq(r->err[0], 0, "a good render prints nothing on stderr: %s", r->err);
    free(r);
  }
  char path[600], cmd[1300];
  snprintf(path, sizeof path, "%s/a.png", d);
  cairo_surface_t *img = cairo_image_surface_create_from_png(path);
  cr_assert_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
  cr_assert_eq(cairo_image_surface_get_width(img), 1280, "--dpi 144 doubles the pixels");
  cr_assert_eq(cairo_image_surface_get_height(img), 800);
  cairo_surface_destroy(img);
  snprintf(cmd, sizeof cmd, "cmp -s '%s/a.png' '%s/b.png'", d, d);
  cr_assert_eq(system(cmd), 0, "two runs wrote different PNGs");
}

Test(viz_cli, gallery_and_memory_figures) {
  const char *d = tmpdir("figures");
  fmt_result *r = run("render --gallery -o %s/g.png", d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render --figure memory -o %s/m.svg", d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  char p[600];
  snprintf(p, sizeof p, "%s/g.png", d);
  cairo_surface_t *img = cairo_image_surface_create_from_png(p);
  cr_assert_eq(cairo_image_surface_get_width(img), 1600);
  cairo_surface_destroy(img);
  r = run("render --gallery --family causal -o %s/x.png", d);
  cr_assert_neq(r->status, 0);
  cr_assert_eq(r->err_lines, 1, "%s", r->err);
  free(r);
}

/* ---- bad input: one line, non-zero exit, nothing left ------------------------------ */

static void assert_refused(const char *dir, const char *args, const char *expect) {
  fmt_result *r = run("%s", args);
  cr_assert_neq(r->status, 0, "accepted: fmsim %s", args);
  cr_assert_eq(r->err_lines, 1, "fmsim %s: expected one line on stderr, got:\n%s", args, r->err);
  cr_assert(strncmp(r->err, "fmsim render: ", 14) == 0 || strncmp(r->err, "fmsim view: ", 12) == 0,
            "fmsim %s: %s", args, r->err);
  cr_assert(strstr(r->err, expect), "fmsim %s: the message '%s' does not say '%s'", args, r->err, expect);
  char names[2048];
  int n = dir_entries(dir, names, sizeof names);
  cr_assert_eq(n, 0, "fmsim %s left files behind: %s", args, names);
  free(r);
}

Test(viz_cli, bad_render_options) {
  const char *d = tmpdir("bad_options");
  char a[2048];
  snprintf(a, sizeof a, "render --family causal --layer heatmap -o %s/x.png", d);
  assert_refused(d, a, "unknown layer");
  snprintf(a, sizeof a, "render --family causal --size 0x100 -o %s/x.png", d);
  assert_refused(d, a, "1..16384");
  snprintf(a, sizeof a, "render --family causal --size 20000x100 -o %s/x.png", d);
  assert_refused(d, a, "1..16384");
  snprintf(a, sizeof a, "render --family causal --size 800 -o %s/x.png", d);
  assert_refused(d, a, "WIDTHxHEIGHT");
  snprintf(a, sizeof a, "render --family causal --size 12000x12000 --dpi 144 -o %s/x.png", d);
  assert_refused(d, a, "limit is 16384");
  snprintf(a, sizeof a, "render --family causal -o %s/x.bmp", d);
  assert_refused(d, a, "expected .png, .svg or .pdf");
  snprintf(a, sizeof a, "render --family causal -o %s/noextension", d);
  assert_refused(d, a, ".png, .svg or .pdf");
  snprintf(a, sizeof a, "render --family causal -o %s/missing/dir/x.png", d);
  assert_refused(d, a, "x.png");
  snprintf(a, sizeof a, "render --family nosuchfamily -o %s/x.png", d);
  assert_refused(d, a, "unknown family");
  snprintf(a, sizeof a, "render --family causal --layer cycles -o %s/x.png", d);
  assert_refused(d, a, "cycles");
  snprintf(a, sizeof a, "render --family causal --keys 10:5 -o %s/x.png", d);
  assert_refused(d, a, "START < END");
  snprintf(a, sizeof a, "render --family causal -o %s/x.png %s/also-a-file.npy", d, d);
  assert_refused(d, a, "not both");
  snprintf(a, sizeof a, "render --figure speed -o %s/x.png", d);
  assert_refused(d, a, "unknown figure");
  snprintf(a, sizeof a, "view --family causal --size 0x0");
  assert_refused(d, a, "1..16384");
  snprintf(a, sizeof a, "view --family causal --layer nope --bench-frames 2");
  assert_refused(d, a, "unknown layer");
  /* sizes for papers and titles */
  snprintf(a, sizeof a, "render --family causal --width-in 0 -o %s/x.pdf", d);
  assert_refused(d, a, "inches from 0.1");
  snprintf(a, sizeof a, "render --family causal --height-in 3in -o %s/x.pdf", d);
  assert_refused(d, a, "--height-in '3in'");
  snprintf(a, sizeof a, "render --family causal --width-in 300 -o %s/x.pdf", d);
  assert_refused(d, a, "inches from 0.1 to 227");
  snprintf(a, sizeof a, "render --family causal --width-in 3.3 --size 200x200 -o %s/x.pdf", d);
  assert_refused(d, a, "pick one");
  snprintf(a, sizeof a, "render --family causal --title T --no-title -o %s/x.pdf", d);
  assert_refused(d, a, "exclude each other");
  snprintf(a, sizeof a, "render --gallery --width-in 3.3 --height-in 2.5 -o %s/x.pdf", d);
  assert_refused(d, a, "too small for 12 panels");
  snprintf(a, sizeof a, "render --family causal --width-in 100 --height-in 1 --dpi 300 -o %s/x.png", d);
  assert_refused(d, a, "limit is 16384");
}

/* Sizes in inches: PDF pages in points, PNG pixels at --dpi (300 when sized
 * in inches); the other side follows the figure's paper aspect; titles. */
Test(viz_cli, figures_sized_for_papers) {
  if (!have_tool("pdfinfo")) cr_skip_test("pdfinfo not found (apt-get install poppler-utils)");
  const char *d = tmpdir("paper");
  char cmd[1400], info[4096], path[700];
  static const struct {
    const char *args, *size;
  } cases[] = {{"--family causal_document --width-in 3.3 --height-in 2.5", "237.6 x 180 pts"},
               {"--family causal --width-in 3.3 --title 'Causal, 128 x 128 tiles'", "237.6 x 201.6 pts"},
               {"--figure memory --height-in 2.5 --no-title", "237.6 x 180 pts"},
               {"--gallery --width-in 7", "504 x 432 pts"},
               {"--family causal", "237.6 x 201.6 pts"}, /* the paper size of the registry */
               {"--family causal --size 500x300", "500 x 300 pts"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fmt_result *r = run("render %s -o %s/f.pdf", cases[i].args, d);
    cr_assert_eq(r->status, 0, "%s: %s", cases[i].args, r->err);
    cr_assert_eq(r->err[0], 0, "%s: %s", cases[i].args, r->err);
    free(r);
    snprintf(cmd, sizeof cmd, "pdfinfo '%s/f.pdf' > '%s/info.txt'", d, d);
    cr_assert_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/info.txt", d);
    fmt_slurp(path, info, sizeof info);
    cr_assert(strstr(info, cases[i].size), "%s: want %s\n%s", cases[i].args, cases[i].size, info);
  }
  fmt_result *r = run("render --family causal --width-in 3.3 --height-in 2.5 -o %s/f.png", d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  snprintf(path, sizeof path, "%s/f.png", d);
  cairo_surface_t *img = cairo_image_surface_create_from_png(path);
  cr_assert_eq(cairo_image_surface_get_width(img), 990, "3.3 in at 300 dpi");
  cr_assert_eq(cairo_image_surface_get_height(img), 750);
  cairo_surface_destroy(img);
  r = run("render --family causal --width-in 3.3 --height-in 2.5 --dpi 100 -o %s/f.png", d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  img = cairo_image_surface_create_from_png(path);
  cr_assert_eq(cairo_image_surface_get_width(img), 330, "3.3 in at 100 dpi");
  cairo_surface_destroy(img);
}

/* A dense mask no interval form holds is drawn (it was refused), by render
 * and by the viewer; --help says so. */
Test(viz_cli, masks_no_form_holds_are_drawn) {
  const char *d = tmpdir("misfit");
  uint8_t dense[64 * 64];
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 64; j++) dense[i * 64 + j] = j <= i && (j != 10 || (i % 8) < 4);
  int64_t shape[2] = {64, 64};
  char path[700];
  snprintf(path, sizeof path, "%s/holes.npy", d);
  cr_assert_eq(fm_npy_save(path, FM_DT_BOOL, 2, shape, dense, NULL), FM_OK);
  fmt_result *r = run("check %s", path);
  cr_assert_eq(r->status, 1, "check says it does not fit: %s", r->out);
  free(r);
  static const char *args[] = {"-o %s/a.png", "--layer mask --keys 0:32 --rows 0:32 -o %s/b.png",
                               "--width-in 3.3 --height-in 2.5 -o %s/c.pdf", "--no-panel -o %s/d.svg"};
  for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
    char out[900];
    snprintf(out, sizeof out, args[i], d);
    r = run("render %s %s", path, out);
    cr_assert_eq(r->status, 0, "render %s: %s", out, r->err);
    cr_assert_eq(r->err[0], 0, "%s", r->err);
    free(r);
  }
  char names[2048];
  cr_assert_eq(dir_entries(d, names, sizeof names), 5, "%s", names);
  r = run("view %s --bench-frames 20", path);
  cr_assert_eq(r->status, 0, "%s", r->err);
  cr_assert(strstr(r->out, "holes.npy"), "%s", r->out);
  free(r);
  r = run("render --help");
  cr_assert(strstr(r->out, "fits no interval form") && strstr(r->out, "--width-in") &&
            strstr(r->out, "--no-title"), "%s", r->out);
  free(r);
}

/* Keeping every run of a noisy mask past the memory limit: one line naming
 * the file, nothing written. */
Test(viz_cli, too_many_runs_are_refused) {
  const char *d = tmpdir("many_runs");
  char out[600], path[700], a[1600];
  snprintf(out, sizeof out, "%s/out", d);
  mkdir(out, 0755);
  enum { N = 300 };
  uint8_t *noise = malloc(N * N);
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < N * N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    noise[i] = (uint8_t)(x >> 63);
  }
  int64_t shape[2] = {N, N};
  snprintf(path, sizeof path, "%s/noise.npy", d);
  cr_assert_eq(fm_npy_save(path, FM_DT_BOOL, 2, shape, noise, NULL), FM_OK);
  free(noise);
  snprintf(a, sizeof a, "render %s -o %s/x.png", path, out);
  setenv("FMSIM_MEM_LIMIT", "100K", 1);
  assert_refused(out, a, "masked runs");
  unsetenv("FMSIM_MEM_LIMIT");
  fmt_result *r = run("render %s -o %s/x.png", path, out);
  cr_assert_eq(r->status, 0, "without the limit it draws: %s", r->err);
  free(r);
}

static void write_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fwrite(text, 1, n, f);
  fclose(f);
}

Test(viz_cli, unreadable_traces_and_masks) {
  const char *d = tmpdir("bad_inputs");
  char src[600], out[600], a[2048], path[700];
  snprintf(out, sizeof out, "%s/out", d);
  mkdir(out, 0755);
  /* a folder that is no trace */
  snprintf(src, sizeof src, "%s/empty_trace", d);
  mkdir(src, 0755);
  snprintf(a, sizeof a, "render %s -o %s/x.png", src, out);
  assert_refused(out, a, "summary.json");
  /* broken JSON */
  snprintf(path, sizeof path, "%s/summary.json", src);
  write_file(path, "{\"format\": \"fmsim-trace\", \"version\": 1,", 40);
  assert_refused(out, a, "summary.json");
  /* a newer format version */
  snprintf(src, sizeof src, "%s/newer", d);
  fmt_result *r = run("analyze --family causal --seqlen 256 --out %s", src);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  snprintf(path, sizeof path, "%s/summary.json", src);
  char json[16384];
  fmt_slurp(path, json, sizeof json);
  char *v = strstr(json, "\"version\": 1");
  cr_assert_not_null(v, "%s", json);
  v[11] = '9';
  write_file(path, json, strlen(json));
  snprintf(a, sizeof a, "render %s -o %s/x.png", src, out);
  assert_refused(out, a, "version 9");
  /* tiles of the wrong shape */
  snprintf(src, sizeof src, "%s/badtiles", d);
  r = run("analyze --family causal --seqlen 256 --out %s", src);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  snprintf(path, sizeof path, "%s/tiles.npy", src);
  uint8_t cls[6] = {0};
  int64_t shape[2] = {2, 3};
  cr_assert_eq(fm_npy_save(path, FM_DT_U8, 2, shape, cls, NULL), FM_OK);
  snprintf(a, sizeof a, "render %s -o %s/x.png", src, out);
  assert_refused(out, a, "tiles.npy");
  /* tile_cycles.npy of the wrong dtype */
  snprintf(src, sizeof src, "%s/badcycles", d);
  r = run("analyze --family causal --seqlen 256 --out %s", src);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  snprintf(path, sizeof path, "%s/tile_cycles.npy", src);
  int32_t c32[4] = {0};
  int64_t shape4[4] = {1, 1, 2, 2};
  cr_assert_eq(fm_npy_save(path, FM_DT_I32, 4, shape4, c32, NULL), FM_OK);
  snprintf(a, sizeof a, "render %s -o %s/x.png", src, out);
  assert_refused(out, a, "tile_cycles.npy");
  /* a file that is not .npy */
  snprintf(src, sizeof src, "%s/garbage.npy", d);
  write_file(src, "not a numpy file at all", 23);
  snprintf(a, sizeof a, "render %s -o %s/x.png", src, out);
  assert_refused(out, a, "garbage.npy");
  /* a missing file */
  snprintf(a, sizeof a, "render %s/nothing-here.npy -o %s/x.png", d, out);
  assert_refused(out, a, "nothing-here.npy");
  /* a float mask of only 0 and 1 needs --bool or --additive, which render takes */
  snprintf(src, sizeof src, "%s/zero_one.npy", d);
  float zo[8 * 8];
  for (int i = 0; i < 64; i++) zo[i] = (float)(i % 8 <= i / 8);
  int64_t zshape[2] = {8, 8};
  cr_assert_eq(fm_npy_save(src, FM_DT_F32, 2, zshape, zo, NULL), FM_OK);
  snprintf(a, sizeof a, "render %s -o %s/x.png", src, out);
  assert_refused(out, a, "--bool");
  r = run("render %s --bool -o %s/zo.png", src, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render %s --bool --additive -o %s/zo.png", src, d);
  cr_assert_eq(r->status, 2, "%s", r->err);
  cr_assert_eq(r->err_lines, 1, "%s", r->err);
  free(r);
}

Test(viz_cli, view_without_a_display_points_to_render) {
  const char *d = tmpdir("nodisplay");
  char cmd[2048], err_path[600], err[4096];
  snprintf(err_path, sizeof err_path, "%s/stderr", d);
  snprintf(cmd, sizeof cmd,
           "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER %s view --family causal --seqlen 1024 "
           "--out-dir %s >/dev/null 2>%s", FMSIM_BIN, d, err_path);
  int st = system(cmd);
  fmt_slurp(err_path, err, sizeof err);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "view without a display exited 0");
  int lines = 0;
  for (const char *p = err; *p; p++) lines += *p == '\n';
  cr_assert_eq(lines, 1, "%s", err);
  cr_assert(strstr(err, "fmsim view: no display"), "%s", err);
  cr_assert(strstr(err, "fmsim render"), "the message does not point to render: %s", err);
  unlink(err_path);
  char names[1024];
  cr_assert_eq(dir_entries(d, names, sizeof names), 0, "files left: %s", names);
}

/* ---- sources and overlays ---------------------------------------------------------- */

Test(viz_cli, cycles_overlay_from_a_written_trace) {
  const char *d = tmpdir("cycles");
  char trace[600];
  snprintf(trace, sizeof trace, "%s/trace", d);
  fmt_result *r = run("analyze --family sliding_window --seqlen 2048 --br 64 --bc 64 --out %s", trace);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  /* 32 x 32 tiles; cycles grow along the key tiles */
  int64_t cycles[32 * 32], shape[4] = {1, 1, 32, 32};
  for (int i = 0; i < 32 * 32; i++) cycles[i] = 500 + 100 * (i % 32);
  char path[700];
  snprintf(path, sizeof path, "%s/tile_cycles.npy", trace);
  cr_assert_eq(fm_npy_save(path, FM_DT_I64, 4, shape, cycles, NULL), FM_OK);
  r = run("render %s --layer cycles -o %s/c.png", trace, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render %s --layer cycles --bc 32 -o %s/other.png", trace, d);
  cr_assert_neq(r->status, 0, "cycles at another tile size were accepted");
  cr_assert(strstr(r->err, "tile size"), "%s", r->err);
  free(r);
  r = run("view %s --layer cycles --bench-frames 20", trace);
  cr_assert_eq(r->status, 0, "%s", r->err);
  cr_assert(strstr(r->out, "p50"), "%s", r->out);
  free(r);
  /* the cycles colour bar is drawn: the right half of the figure holds viridis colours */
  snprintf(path, sizeof path, "%s/c.png", d);
  cairo_surface_t *img = cairo_image_surface_create_from_png(path);
  cr_assert_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
  int w = cairo_image_surface_get_width(img), h = cairo_image_surface_get_height(img);
  const unsigned char *px = cairo_image_surface_get_data(img);
  int stride = cairo_image_surface_get_stride(img), dark_purple = 0, yellow = 0;
  for (int y = 0; y < h; y++)
    for (int x = w / 2; x < w; x++) {
      uint32_t p = ((const uint32_t *)(px + (size_t)y * stride))[x] & 0xFFFFFF;
      for (int end = 0; end < 2; end++) {
        uint32_t q = viz_viridis(end);
        int near = 1;
        for (int c = 0; c < 24; c += 8) near &= abs((int)((p >> c) & 255) - (int)((q >> c) & 255)) <= 8;
        if (near) *(end ? &yellow : &dark_purple) += 1;
      }
    }
  cr_assert(dark_purple > 0 && yellow > 0, "no colour bar ends in the panel");
  cairo_surface_destroy(img);
}

Test(viz_cli, dense_and_interval_sources) {
  const char *d = tmpdir("sources");
  /* a causal 64 x 64 dense mask (true = may attend) and its intervals */
  uint8_t dense[64 * 64];
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 64; j++) dense[i * 64 + j] = j <= i;
  int64_t shape[2] = {64, 64};
  char path[600];
  snprintf(path, sizeof path, "%s/causal.npy", d);
  cr_assert_eq(fm_npy_save(path, FM_DT_BOOL, 2, shape, dense, NULL), FM_OK);
  viz_state s;
  viz_state_init(&s, 640, 480);
  viz_scene_opts o = {0};
  o.path = path;
  viz_scene *sc = NULL;
  fm_err err;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  fm_colmask *causal = NULL;
  fm_family_request req = {"causal", 64, 1, 1, 0, -1, NULL, 0, NULL};
  cr_assert_eq(fm_family_build(&req, &causal, NULL, NULL), FM_OK);
  cr_assert(fm_colmask_equal(viz_scene_mask(sc), causal), "the dense mask reads as the causal mask");
  cr_assert_eq(s.use_family, 0);
  cr_assert_str_eq(viz_scene_label(sc), "causal.npy");
  viz_scene_destroy(sc);
  /* --true-masked reads the opposite convention */
  o.true_masked = 1;
  cr_assert_eq(viz_scene_create(&o, &s, &sc, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(viz_scene_sync(sc, &s, &err), FM_OK, "%s", err.msg);
  cr_assert(!fm_colmask_equal(viz_scene_mask(sc), causal));
  cr_assert(fm_colmask_masked(viz_scene_mask(sc), 0, 5, 2), "true = masked: (5, 2) is masked");
  viz_scene_destroy(sc);
  /* the same mask as an interval file (causal-1, k = 1 says causal by itself) */
  snprintf(path, sizeof path, "%s/causal_intervals.npy", d);
  fm_form used;
  cr_assert_eq(fm_colmask_save_npy(causal, path, FM_FORM_NONE, &used, NULL), FM_OK);
  fmt_result *r = run("render %s -o %s/i.png", path, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  snprintf(path, sizeof path, "%s/causal.npy", d);
  r = run("render %s --layer mask --no-panel -o %s/d.pdf", path, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  fm_colmask_destroy(causal);
}

/* An interval file with k = 2 holds causal-2 or bidir-2: without --causal or
 * --bidir every command that reads one refuses it, exit 2, with one and the
 * same line after "fmsim CMD: "; with the flag render and view draw it; k = 1
 * and k = 4 name their form, and a flag against them is refused. */
Test(viz_cli, ambiguous_interval_file_is_refused_alike) {
  const char *d = tmpdir("ambiguous");
  fm_colmask *m = NULL;
  fm_family_request req = {"causal_document", 256, 1, 1, 0, -1, NULL, 0, NULL};
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  char iv2[600], iv1[600];
  snprintf(iv2, sizeof iv2, "%s/k2.npy", d);
  snprintf(iv1, sizeof iv1, "%s/k1.npy", d);
  cr_assert_eq(fm_colmask_save_npy(m, iv2, FM_FORM_CAUSAL2, NULL, NULL), FM_OK);
  cr_assert_eq(fm_colmask_save_npy(m, iv1, FM_FORM_CAUSAL1, NULL, NULL), FM_OK);
  fm_colmask_destroy(m);
  static const char *cmds[][2] = {{"check", "check --intervals %s"},
                                  {"analyze", "analyze --intervals %s"},
                                  {"predict", "predict --mask %s"},
                                  {"expand", "expand %s -o %s.dense.npy"},
                                  {"render", "render %s -o %s.png"},
                                  {"view", "view %s --bench-frames 2"}};
  char first[1024] = "";
  for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
    fmt_result *r = run(cmds[c][1], iv2, iv2);
    cr_assert_eq(r->status, 2, "%s: exit %d: %s", cmds[c][0], r->status, r->err);
    cr_assert_eq(r->err_lines, 1, "%s: %s", cmds[c][0], r->err);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "fmsim %s: ", cmds[c][0]);
    cr_assert(!strncmp(r->err, prefix, strlen(prefix)), "%s", r->err);
    const char *line = r->err + strlen(prefix);
    cr_assert(strstr(line, "--causal or --bidir"), "%s", r->err);
    if (!first[0]) snprintf(first, sizeof first, "%s", line);
    cr_assert_str_eq(line, first, "%s says it differently", cmds[c][0]);
    free(r);
  }
  char png[700];
  snprintf(png, sizeof png, "%s.png", iv2);
  cr_assert_not(access(png, F_OK) == 0, "nothing written on a refusal");
  /* the flag decides; k = 1 says it itself and refuses --bidir */
  fmt_result *r = run("render %s --causal --layer mask -o %s/c.png", iv2, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render %s --bidir --layer mask -o %s/b.png", iv2, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render %s --layer mask -o %s/k1.png", iv1, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render %s --bidir -o %s/k1b.png", iv1, d);
  cr_assert_eq(r->status, 2, "%s", r->err);
  cr_assert(strstr(r->err, "causal-1"), "%s", r->err);
  free(r);
}

Test(viz_cli, bench_frames_prints_percentiles) {
  fmt_result *r = run("view --family causal_document --seqlen 131072 --br 128 --bc 64 --bench-frames 48");
  cr_assert_eq(r->status, 0, "%s", r->err);
  double p50, p90, p99, mx;
  const char *line = strstr(r->out, "p50");
  cr_assert_not_null(line, "%s", r->out);
  cr_assert_eq(sscanf(line, "p50 %lf ms  p90 %lf ms  p99 %lf ms  max %lf ms", &p50, &p90, &p99, &mx), 4,
               "%s", r->out);
  cr_assert(p50 > 0 && p50 <= p90 && p90 <= p99 && p99 <= mx, "%s", r->out);
  cr_assert(strstr(r->out, "S = 131072") && strstr(r->out, "128 x 64"), "%s", r->out);
  free(r);
}

Test(viz_cli, view_help_lists_every_key) {
  fmt_result *r = run("view --help");
  cr_assert_eq(r->status, 0);
  int n;
  const viz_key_help *k = viz_key_help_table(&n);
  for (int i = 0; i < n; i++) {
    cr_assert(strstr(r->out, k[i].keys), "--help lacks '%s'", k[i].keys);
    cr_assert(strstr(r->out, k[i].action), "--help lacks '%s'", k[i].action);
  }
  free(r);
}

/* The backward's layers: from a run trace with its *_bwd.npy files (classes, cycles at the
   backward's tile), or classes at the kernel's backward tile from the CPU. */
Test(viz_cli, backward_layers_from_a_run_trace_and_from_the_cpu) {
  const char *d = tmpdir("bwd");
  char trace[600], path[700];
  snprintf(trace, sizeof trace, "%s/trace", d);
  fmt_result *r = run("run --family causal_document --seqlen 4096 --pass both --cpu --out %s", trace);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render %s --layer cycles-bwd -o %s/x.png", trace, d);
  cr_assert_neq(r->status, 0, "no backward cycles in a CPU trace");
  cr_assert(strstr(r->err, "tile_cycles_bwd.npy"), "%s", r->err);
  free(r);
  /* 64 x 128 backward tiles of S = 4096: 64 x 32; cycles grow along the key tiles */
  static int64_t cycles[64 * 32];
  int64_t shape[4] = {1, 1, 64, 32};
  for (int i = 0; i < 64 * 32; i++) cycles[i] = 2000 + 40 * (i % 32);
  snprintf(path, sizeof path, "%s/tile_cycles_bwd.npy", trace);
  cr_assert_eq(fm_npy_save(path, FM_DT_I64, 4, shape, cycles, NULL), FM_OK);
  r = run("render %s --layer cycles-bwd --size 900x600 -o %s/c.png", trace, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  snprintf(path, sizeof path, "%s/c.png", d);
  cairo_surface_t *img = cairo_image_surface_create_from_png(path);
  cr_assert_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
  int w = cairo_image_surface_get_width(img), h = cairo_image_surface_get_height(img), yellow = 0;
  const unsigned char *px = cairo_image_surface_get_data(img);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w * 66 / 100; x++) { /* the plot, not the panel: the last key tiles are the brightest */
      uint32_t p = ((const uint32_t *)(px + (size_t)y * cairo_image_surface_get_stride(img)))[x] & 0xFFFFFF;
      uint32_t q = viz_viridis(1);
      int near = 1;
      for (int c = 0; c < 24; c += 8) near &= abs((int)((p >> c) & 255) - (int)((q >> c) & 255)) <= 8;
      yellow += near;
    }
  cr_assert_gt(yellow, 0, "no tile at the top of the cycles scale");
  cairo_surface_destroy(img);
  r = run("render %s --layer cycles-bwd --bc 64 -o %s/x.png", trace, d);
  cr_assert_neq(r->status, 0, "backward cycles at another tile size were accepted");
  cr_assert(strstr(r->err, "64 x 128"), "%s", r->err);
  free(r);
  r = run("render %s --layer tiles-bwd -o %s/t.png", trace, d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  r = run("render --family causal --seqlen 2048 --layer both-bwd -o %s/f.png", d);
  cr_assert_eq(r->status, 0, "the CPU's classes at the backward tile: %s", r->err);
  free(r);
  r = run("render --family causal --layer mask-bwd -o %s/m.png", d);
  cr_assert_neq(r->status, 0);
  cr_assert(strstr(r->err, "cycles-bwd"), "the message names the -bwd layers: %s", r->err);
  free(r);
  r = run("view %s --layer bytes-bwd --bench-frames 10", trace);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
}

/* --gpu: the side panel's predicted time; a bad profile is one line, exit 2,
 * no file (render) and no window (view). */
Test(viz_cli, gpu_profile_in_the_panel_and_bad_profiles_refused) {
  const char *d = tmpdir("gpu_profile");
  char a[2048], bad[700], path[800];
  snprintf(bad, sizeof bad, "%s/../viz_cli_gpu_bad.json", d);
  FILE *f = fopen(bad, "w");
  fputs("{\"format\": \"fmsim-gpu-profile\", \"version\": 1, \"kernel\": \"sm80\"}", f);
  fclose(f);
  static const struct {
    const char *render_options, *says; /* BAD: the malformed file */
  } refused[] = {
      {"--family causal --gpu nosuch", "--gpu nosuch: no such profile file, and no "},
      {"--family causal --gpu BAD", "GPU profile "},
      {"--family causal --gpu h200-sm80 --head-dim 96",
       "--gpu h200-sm80: the profile has no forward fit for head dim 96 (it has: 64, 128)"},
      {"--gallery --gpu h200-sm80", "a --figure draws no such panel"},
      {"--family causal --gpu h200-sm80 --no-panel", "--no-panel leaves it out"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char opts[1200];
    const char *at = strstr(refused[i].render_options, "BAD");
    snprintf(opts, sizeof opts, "%.*s%.700s", at ? (int)(at - refused[i].render_options) : 400,
             refused[i].render_options, at ? bad : "");
    snprintf(a, sizeof a, "render %s -o %s/x.png", opts, d);
    assert_refused(d, a, refused[i].says);
  }
  snprintf(a, sizeof a, "view --family causal --gpu %s --bench-frames 2", bad);
  assert_refused(d, a, "GPU profile ");
  unlink(bad);
  /* a good one: the figure is drawn (the panel's line: test_viz_events.c) */
  fmt_result *r = run("render --family causal --seqlen 4096 --gpu h200-sm80 --layer both-bwd -o %s/ok.png", d);
  cr_assert_eq(r->status, 0, "%s", r->err);
  free(r);
  snprintf(path, sizeof path, "%s/ok.png", d);
  struct stat sb;
  cr_assert(stat(path, &sb) == 0 && sb.st_size > 0);
}
