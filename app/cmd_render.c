/* fmsim render: the viewer's drawing, headless, into PNG, SVG or PDF, or any
 * figure of the figure registry (viz/viz_figures.c: its names, draw functions
 * and default sizes). Files are written atomically (nothing is left behind on
 * any error). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "viz_cli.h"
#ifdef FM_HAVE_VIZ
#include "viz.h"
#endif

static const char *help =
    "usage: fmsim render [--family NAME [mask options] | TRACE_DIR | MASK.npy | INTERVALS.npy]\n"
    "                    -o FILE.{png,svg,pdf} [--layer L] [--size WxH] [--dpi N] [view options]\n"
    "       fmsim render --figure NAME -o FILE [--seqlen S] [--br N --bc N] [--sample K] [--size WxH]\n\n"
    "Draws what `fmsim view` shows into a file: the mask (aggregated per pixel, so any S\n"
    "draws in the same time), the Br x Bc tiles coloured by class (min/max rule), hatching\n"
    "where the exact class differs, axes in tokens, a legend, live numbers and a caption\n"
    "(family, S, Br x Bc, rho). A trace folder (fmsim analyze --out, GPU runs) adds the\n"
    "cycles overlay when it holds tile_cycles.npy. The palette is colour-blind safe\n"
    "(Okabe-Ito; viridis for overlays).\n\n"
    "source (one of):\n" CLI_MASK_HELP
    "  TRACE_DIR            a trace folder: summary.json, tiles.npy, tiles_exact.npy, columns.npy\n"
    "                       [, tile_cycles.npy]\n"
    "  MASK.npy             dense mask: bool/int (true = may attend) or float (additive,\n"
    "                       -inf = masked), [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk]\n"
    "  INTERVALS.npy        int32/int64 [B, H, Sk, k] intervals (Paddle startend_row_indices)\n"
    VIZ_CLI_SOURCE_HELP
    "\noutput:\n"
    "  -o, --output FILE    .png, .svg or .pdf (required)\n"
    "  --layer L            mask | tiles | both (default) | cycles (trace) | bytes (modelled);\n"
    "                       tiles-bwd, both-bwd, cycles-bwd, bytes-bwd: the backward's\n"
    "  --size WxH           figure size: PNG pixels at 72 dpi, PDF/SVG points, 1..16384\n"
    "                       (default: the figure's, listed below)\n"
    "  --dpi N              PNG: pixels per inch (72: one pixel per unit; 144 doubles the pixels);\n"
    "                       PDF/SVG: resolution of the embedded mask image (default 300)\n"
    "  --keys A:B           show key columns [A, B) only (default: all)\n"
    "  --rows A:B           show query rows [A, B) only (default: all)\n"
    "  --pair N             (batch, head) pair b*H+h of per-head masks (default 0)\n"
    "  --no-panel           no side panel (legend, numbers)\n"
    "  --no-grid            no tile grid lines\n"
    "  --no-hatch           no hatching of min/max-vs-exact disagreements\n"
    "  --no-text            draw no text at all (font-independent reference images)\n"
    "\nfigures (--figure NAME; --gallery is --figure gallery):\n";

static void print_help(void) {
  fputs(help, stdout);
#ifdef FM_HAVE_VIZ
  for (int i = 0; i < viz_figure_count(); i++) {
    const viz_figure *f = viz_figure_at(i);
    printf("  %-8s %4.0fx%-5.0f %s%s\n", f->name, f->width, f->height, f->summary,
           f->per_case ? " (the drawing of a source, the default)" : "");
  }
#endif
}

#ifndef FM_HAVE_VIZ
int cmd_render(int argc, char **argv) {
  return cli_unavailable("render", argc, argv, print_help,
                         "built without cairo: install libcairo2-dev (scripts/install-deps.sh) and rebuild");
}
#else

/* "A:B" with 0 <= A < B <= limit. */
static int parse_range(const char *cmd, const char *opt, const char *text, int64_t limit, double *a,
                       double *b) {
  long long x, y;
  if (cli_int_pair(text, ':', &x, &y)) {
    cli_error(cmd, "%s '%s': expected START:END in tokens, e.g. 0:1024", opt, text);
    return -1;
  }
  if (x < 0 || y <= x || y > limit) {
    cli_error(cmd, "%s %s: need 0 <= START < END <= %lld", opt, text, (long long)limit);
    return -1;
  }
  *a = (double)x;
  *b = (double)y;
  return 0;
}

int cmd_render(int argc, char **argv) {
  static const struct option longopts[] = {CLI_MASK_LONGOPTS,
                                           VIZ_CLI_SOURCE_LONGOPTS,
                                           {"output", required_argument, 0, 'o'},
                                           {"dpi", required_argument, 0, 'd'},
                                           {"keys", required_argument, 0, 3001},
                                           {"rows", required_argument, 0, 3002},
                                           {"pair", required_argument, 0, 3003},
                                           {"no-panel", no_argument, 0, 3004},
                                           {"no-grid", no_argument, 0, 3005},
                                           {"no-hatch", no_argument, 0, 3006},
                                           {"no-text", no_argument, 0, 3007},
                                           {"gallery", no_argument, 0, 3008},
                                           {"figure", required_argument, 0, 3009},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *cmd = "render", *out = NULL, *keys = NULL, *rows = NULL, *figure = NULL;
  int no_panel = 0, no_grid = 0, no_hatch = 0, no_text = 0, gallery = 0, opt;
  int64_t dpi = 0, pair = 0;
  viz_cli_source src;
  viz_cli_source_init(&src);
  cli_getopt_reset();
  while ((opt = cli_next_opt(cmd, argc, argv, ":o:", longopts, viz_cli_source_opt_any, &src, NULL)) != -1) {
    switch (opt) {
    case CLI_OPT_ERROR: return FM_EXIT_USAGE;
    case 'o': out = optarg; break;
    case 'd':
      if (cli_int(cmd, "--dpi", optarg, 18, 2400, &dpi)) return FM_EXIT_USAGE;
      break;
    case 3001: keys = optarg; break;
    case 3002: rows = optarg; break;
    case 3003:
      if (cli_int(cmd, "--pair", optarg, 0, 1 << 30, &pair)) return FM_EXIT_USAGE;
      break;
    case 3004: no_panel = 1; break;
    case 3005: no_grid = 1; break;
    case 3006: no_hatch = 1; break;
    case 3007: no_text = 1; break;
    case 3008: gallery = 1; break;
    case 3009: figure = optarg; break;
    case 'h': print_help(); return FM_EXIT_OK;
    default: return cli_bad_option(cmd, opt, argv);
    }
  }
  if (viz_cli_operand(cmd, &src, argc, argv)) return FM_EXIT_USAGE;
  int w = src.w, h = src.h;
  if (!out) {
    cli_error(cmd, "-o FILE.{png,svg,pdf} is required");
    return FM_EXIT_USAGE;
  }
  fm_err err;
  viz_format fmt;
  if (viz_format_from_path(out, &fmt, &err) != FM_OK) {
    cli_error(cmd, "-o %s", err.msg);
    return FM_EXIT_USAGE;
  }
  if (dpi == 0) dpi = fmt == VIZ_FMT_PNG ? 72 : 300;
  if (gallery && figure && strcmp(figure, "gallery")) {
    cli_error(cmd, "--gallery and --figure are two different figures; pick one");
    return FM_EXIT_USAGE;
  }
  if (gallery) figure = "gallery";
  const viz_figure *fig = figure ? viz_figure_find(figure) : viz_figure_find("tiles");
  if (!fig || (figure && fig->per_case)) {
    char names[200] = "";
    for (int i = 0, n = 0; i < viz_figure_count(); i++)
      if (!viz_figure_at(i)->per_case)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", n++ ? ", " : "",
                 viz_figure_at(i)->name);
    if (fig)
      cli_error(cmd, "--figure %s is the drawing of a mask source: give --family or a file, "
                "without --figure", figure);
    else
      cli_error(cmd, "--figure '%s': unknown figure (expected one of %s)", figure, names);
    return FM_EXIT_USAGE;
  }
  if (figure && (src.path || src.mask.family)) {
    cli_error(cmd, "--%s draws its own masks; it takes no --family or file", gallery ? "gallery" : "figure");
    return FM_EXIT_USAGE;
  }
  if (!w) {
    w = (int)fig->width;
    h = (int)fig->height;
  }

  fm_status st;
  if (figure) {
    viz_figure_opts fo = {.seqlen = src.mask.seqlen, .br = (int32_t)src.mask.br,
                          .bc = (int32_t)src.mask.bc, .sample = src.mask.sample,
                          .seed = src.mask.seed, .samples_path = src.mask.samples_path,
                          .text = !no_text};
    st = viz_write_figure(out, fmt, w, h, (double)dpi, fig->draw, &fo, &err);
  } else {
    viz_state s;
    viz_state_init(&s, w, h);
    if (!src.path && !src.mask.family) src.mask.family = "causal_document";
    s.pair = (int32_t)pair;
    viz_scene *sc = NULL;
    if (viz_cli_open(cmd, &src, &s, &sc)) return FM_EXIT_USAGE;
    int rc = FM_EXIT_OK;
    if (pair >= s.facts.npairs) {
      cli_error(cmd, "--pair %lld: the mask has %d (batch, head) pairs", (long long)pair, s.facts.npairs);
      rc = FM_EXIT_USAGE;
    } else if ((keys && parse_range(cmd, "--keys", keys, s.facts.sk, &s.view.x0, &s.view.x1)) ||
               (rows && parse_range(cmd, "--rows", rows, s.facts.sq, &s.view.y0, &s.view.y1))) {
      rc = FM_EXIT_USAGE;
    }
    if (rc != FM_EXIT_OK) {
      viz_scene_destroy(sc);
      return rc;
    }
    s.status[0] = 0;
    if (no_panel) s.layers &= ~(unsigned)VIZ_LAYER_PANEL;
    if (no_grid) s.layers &= ~(unsigned)VIZ_LAYER_GRID;
    if (no_hatch) s.layers &= ~(unsigned)VIZ_LAYER_HATCH;
    s.text = !no_text;
    st = viz_write_figure(out, fmt, w, h, (double)dpi, viz_draw_state_fn, &s, &err);
    viz_scene_destroy(sc);
  }
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  return FM_EXIT_OK;
}
#endif
