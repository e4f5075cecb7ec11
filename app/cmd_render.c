/* fmsim render: the viewer's drawing, headless, into PNG, SVG or PDF, or any
 * figure of the figure registry (viz/viz_figures.c: its names, draw functions
 * and default sizes). Files are written atomically (nothing is left behind on
 * any error). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
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
    "                    -o FILE.{png,svg,pdf} [--layer L] [size] [--title TEXT | --no-title]\n"
    "       fmsim render --figure NAME -o FILE [--seqlen S] [--br N --bc N] [--sample K] [size]\n"
    "       fmsim render --figure linrnn_chunk [TRACE_DIR] -o FILE [size]\n\n"
    "Draws what `fmsim view` shows into a file: the mask (aggregated per pixel, so any S\n"
    "draws in the same time), the Br x Bc tiles coloured by class (min/max rule), hatching\n"
    "where the exact class differs, axes in tokens, a legend, live numbers and a caption\n"
    "(family, S, Br x Bc, rho). A dense mask that fits no interval form is drawn exactly\n"
    "from its masked runs, with exact tile classes, the columns no form holds marked above\n"
    "the plot and listed in the side panel. A trace folder (fmsim analyze --out, GPU runs)\n"
    "adds the cycles overlay when it holds tile_cycles.npy. The palette is colour-blind\n"
    "safe (Okabe-Ito; viridis for overlays).\n\n"
    "source (one of):\n" CLI_MASK_HELP
    "  TRACE_DIR            a trace folder: summary.json, tiles.npy, tiles_exact.npy, columns.npy\n"
    "                       [, tile_cycles.npy]\n"
    "  MASK.npy             dense mask: bool/int (true = may attend) or float (additive,\n"
    "                       -inf = masked), [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk]; any mask,\n"
    "                       whether an interval form holds it or not\n"
    "  INTERVALS.npy        int32/int64 [B, H, Sk, k] intervals (Paddle startend_row_indices)\n"
    VIZ_CLI_SOURCE_HELP
    "\noutput:\n"
    "  -o, --output FILE    .png, .svg or .pdf (required)\n"
    "  --layer L            mask | tiles | both (default) | cycles (trace) | bytes (modelled);\n"
    "                       tiles-bwd, both-bwd, cycles-bwd, bytes-bwd: the backward's\n"
    "  --title TEXT         the caption (the figure's title) instead of the default one\n"
    "  --no-title           no caption: its room goes to the drawing\n"
    "  --keys A:B           show key columns [A, B) only (default: all)\n"
    "  --rows A:B           show query rows [A, B) only (default: all)\n"
    "  --pair N             (batch, head) pair b*H+h of per-head masks (default 0)\n"
    "  --no-panel           no side panel and no legend (the mask, its axes and the caption)\n"
    "  --no-grid            no tile grid lines\n"
    "  --no-hatch           no hatching of min/max-vs-exact disagreements\n"
    "  --no-text            draw no text at all (font-independent reference images)\n"
    "  --json               also print the drawing's numbers on stdout, one JSON object: its\n"
    "                       caption, the tile counts and rho of the side panel (over every\n"
    "                       (batch, head) pair; the sub-mask's rho of a mask no form holds),\n"
    "                       the pairs and the one drawn, the mask memory\n"
    "\nsize (figures for papers: fonts are in points, so a figure sized in inches or points\n"
    "keeps text readable at that size; a figure too small for its side panel shows a\n"
    "compact legend instead, and text that cannot fit is shortened, never clipped):\n"
    "  --width-in W         width in inches (e.g. 3.3 for one column of a two-column paper,\n"
    "                       7 for the full width); with only one of the two, the other keeps\n"
    "  --height-in H        the figure's default aspect ratio\n"
    "  --size WxH           size in points (PDF/SVG) or in pixels at 72 dpi (PNG), 1..16384\n"
    "  --dpi N              PNG: pixels per inch (default 72 with --size or the default size,\n"
    "                       one pixel per point; 300 with --width-in/--height-in); PDF/SVG:\n"
    "                       resolution of the embedded mask image (default 300)\n"
    "  default size         PNG: the figure's screen size (pixels, below); PDF/SVG: its paper\n"
    "                       size (inches, below)\n"
    "\nfigures (--figure NAME; --gallery is --figure gallery):\n";

static void print_help(const void *opts) {
  (void)opts;
  fputs(help, stdout);
#ifdef FM_HAVE_VIZ
  for (int i = 0; i < viz_figure_count(); i++) {
    const viz_figure *f = viz_figure_at(i);
    printf("  %-8s %4.0fx%-4.0f px, %.1f x %.1f in: %s%s\n", f->name, f->width, f->height,
           f->width_in, f->height_in, f->summary,
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

/* What the command line says besides the source. */
typedef struct render_opts {
  viz_cli_source src; /* first: viz_cli_source_opt_any takes the source's options */
  const char *out, *keys, *rows, *figure, *title;
  int no_panel, no_grid, no_hatch, no_text, no_title, gallery, json;
  int64_t dpi, pair;
  double width_in, height_in; /* 0: not given */
} render_opts;

/* render's options besides the source's: 1 taken, -1 a bad value (printed), 0 none of them. */
static int render_opt(const char *cmd, void *v, int opt, const char *arg) {
  render_opts *ro = v;
  switch (opt) {
  case 'o': ro->out = arg; return 1;
  case 'd': return cli_int(cmd, "--dpi", arg, 18, 2400, &ro->dpi) ? -1 : 1;
  case 3001: ro->keys = arg; return 1;
  case 3002: ro->rows = arg; return 1;
  case 3003: return cli_int(cmd, "--pair", arg, 0, 1 << 30, &ro->pair) ? -1 : 1;
  case 3004: ro->no_panel = 1; return 1;
  case 3005: ro->no_grid = 1; return 1;
  case 3006: ro->no_hatch = 1; return 1;
  case 3007: ro->no_text = 1; return 1;
  case 3008: ro->gallery = 1; return 1;
  case 3009: ro->figure = arg; return 1;
  case 3010: ro->title = arg; return 1;
  case 3011: ro->no_title = 1; return 1;
  case 3012:
  case 3013:
    return viz_cli_inches(cmd, opt == 3012 ? "--width-in" : "--height-in", arg,
                          opt == 3012 ? &ro->width_in : &ro->height_in) ? -1 : 1;
  case 3014: ro->json = 1; return 1;
  }
  return 0;
}

static int parse_args(int argc, char **argv, render_opts *ro) {
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
                                           {"title", required_argument, 0, 3010},
                                           {"no-title", no_argument, 0, 3011},
                                           {"width-in", required_argument, 0, 3012},
                                           {"height-in", required_argument, 0, 3013},
                                           {"json", no_argument, 0, 3014},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":o:", .longopts = longopts,
                            .shared = viz_cli_source_opt_any, .own = render_opt,
                            .print_help = print_help, .operands = CLI_OPERANDS};
  const char *cmd = "render";
  memset(ro, 0, sizeof *ro);
  viz_cli_source_init(&ro->src);
  int r = cli_parse_opts(cmd, argc, argv, &def, ro);
  if (r) return r > 0 ? -1 : FM_EXIT_USAGE;
  return viz_cli_operand(cmd, &ro->src, argc, argv);
}

/* The figure asked for; prints the error and returns NULL when there is none. */
static const viz_figure *pick_figure(const char *cmd, render_opts *ro) {
  if (ro->gallery && ro->figure && strcmp(ro->figure, "gallery")) {
    cli_error(cmd, "--gallery and --figure are two different figures; pick one");
    return NULL;
  }
  if (ro->gallery) ro->figure = "gallery";
  const viz_figure *fig = ro->figure ? viz_figure_find(ro->figure) : viz_figure_find("tiles");
  if (!fig || (ro->figure && fig->per_case)) {
    char names[200] = "";
    for (int i = 0, n = 0; i < viz_figure_count(); i++)
      if (!viz_figure_at(i)->per_case)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", n++ ? ", " : "",
                 viz_figure_at(i)->name);
    if (fig)
      cli_error(cmd, "--figure %s is the drawing of a mask source: give --family or a file, "
                "without --figure", ro->figure);
    else
      cli_error(cmd, "--figure '%s': unknown figure (expected one of %s)", ro->figure, names);
    return NULL;
  }
  if (ro->figure && (ro->src.path || ro->src.mask.family) && !(fig->takes_trace && !ro->src.mask.family)) {
    cli_error(cmd, "--%s draws its own masks; it takes no --family or file", ro->gallery ? "gallery" : "figure");
    return NULL;
  }
  if (ro->title && ro->no_title) {
    cli_error(cmd, "--title and --no-title exclude each other");
    return NULL;
  }
  if (ro->src.gpu && (ro->figure || ro->no_panel)) {
    cli_error(cmd, "--gpu puts the predicted time in the side panel of a mask's drawing; %s",
              ro->figure ? "a --figure draws no such panel" : "--no-panel leaves it out");
    return NULL;
  }
  return fig;
}

/* The size in layout units (points; PNG pixels at 72 dpi) and the dpi. */
static int resolve_size(const char *cmd, render_opts *ro, const viz_figure *fig, viz_format fmt,
                        double *w, double *h) {
  int inches = ro->width_in > 0 || ro->height_in > 0;
  if (inches && ro->src.w) {
    cli_error(cmd, "--size and --width-in/--height-in are two ways to give the size; pick one");
    return -1;
  }
  if (inches) {
    double aspect = fig->width_in / fig->height_in;
    *w = 72 * (ro->width_in > 0 ? ro->width_in : ro->height_in * aspect);
    *h = 72 * (ro->height_in > 0 ? ro->height_in : ro->width_in / aspect);
  } else if (ro->src.w) {
    *w = ro->src.w;
    *h = ro->src.h;
  } else if (fmt == VIZ_FMT_PNG) {
    *w = fig->width;
    *h = fig->height;
  } else {
    *w = 72 * fig->width_in;
    *h = 72 * fig->height_in;
  }
  if (*w > VIZ_CLI_MAX_SIZE || *h > VIZ_CLI_MAX_SIZE) {
    cli_error(cmd, "%.4g x %.4g in is larger than %d points (%.0f in) per side", *w / 72, *h / 72,
              VIZ_CLI_MAX_SIZE, VIZ_CLI_MAX_SIZE / 72.0);
    return -1;
  }
  if (ro->dpi == 0) ro->dpi = fmt == VIZ_FMT_PNG && !inches ? 72 : 300;
  return 0;
}

static void counts_json(fm_json *j, const char *key, const fm_tile_counts *c, int exact) {
  const int64_t *n = exact ? c->exact : c->minmax;
  fm_json_object(j, key);
  fm_json_int(j, "total", c->total);
  fm_json_int(j, "masked", n[FM_TILE_MASKED]);
  fm_json_int(j, "partial", n[FM_TILE_PARTIAL]);
  fm_json_int(j, "unmasked", n[FM_TILE_UNMASKED]);
  fm_json_double(j, "sparsity", exact ? c->sparsity_exact : c->sparsity);
  fm_json_end(j);
}

/* --json: what the drawing of s says, in numbers (the caption, the side panel's). */
static void print_numbers(const viz_state *s, const viz_scene *sc) {
  char caption[1024];
  viz_state_caption(s, caption, sizeof caption);
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "caption", caption);
  fm_json_string(&j, "label", viz_scene_label(sc));
  fm_json_int(&j, "seqlen_q", s->facts.sq);
  fm_json_int(&j, "seqlen_k", s->facts.sk);
  fm_json_int(&j, "br", s->br);
  fm_json_int(&j, "bc", s->bc);
  fm_json_int(&j, "pairs", s->facts.npairs);
  fm_json_int(&j, "pair_drawn", s->pair);
  fm_json_bool(&j, "fits", !s->facts.misfit);
  const fm_tile_counts *c = viz_scene_counts(sc), *sub = viz_scene_subset_counts(sc);
  if (!s->facts.misfit) counts_json(&j, "tiles", c, 0);
  else fm_json_null(&j, "tiles");
  counts_json(&j, "exact", c, 1);
  if (sub) fm_json_double(&j, "subset_sparsity", sub->sparsity);
  else fm_json_null(&j, "subset_sparsity");
  int64_t b[3];
  viz_scene_bytes(sc, &b[0], &b[1], &b[2]);
  fm_json_object(&j, "bytes");
  fm_json_int(&j, "dense", b[0]);
  fm_json_int(&j, "block_mask", b[1]);
  fm_json_int(&j, "intervals", b[2]);
  fm_json_end(&j);
  cli_print_json(&j);
}

/* The drawing of a source (a family or a file), as the viewer draws it. */
static int render_source(const char *cmd, render_opts *ro, viz_format fmt, double w, double h) {
  viz_state s;
  viz_state_init(&s, (int)ceil(w), (int)ceil(h));
  /* on paper (sized in inches, or a PDF/SVG at its paper size) the text is 8 pt */
  if (ro->width_in > 0 || ro->height_in > 0 || (fmt != VIZ_FMT_PNG && !ro->src.w)) s.font_pt = 8;
  if (!ro->src.path && !ro->src.mask.family) ro->src.mask.family = "causal_document";
  s.pair = (int32_t)ro->pair;
  viz_scene *sc = NULL;
  if (viz_cli_open(cmd, &ro->src, &s, &sc)) return FM_EXIT_USAGE;
  int rc = FM_EXIT_OK;
  if (ro->pair >= s.facts.npairs) {
    cli_error(cmd, "--pair %lld: the mask has %d (batch, head) pairs", (long long)ro->pair, s.facts.npairs);
    rc = FM_EXIT_USAGE;
  } else if ((ro->keys && parse_range(cmd, "--keys", ro->keys, s.facts.sk, &s.view.x0, &s.view.x1)) ||
             (ro->rows && parse_range(cmd, "--rows", ro->rows, s.facts.sq, &s.view.y0, &s.view.y1))) {
    rc = FM_EXIT_USAGE;
  }
  if (rc == FM_EXIT_OK) {
    s.status[0] = 0;
    if (ro->no_panel) s.layers &= ~(unsigned)VIZ_LAYER_PANEL;
    if (ro->no_grid) s.layers &= ~(unsigned)VIZ_LAYER_GRID;
    if (ro->no_hatch) s.layers &= ~(unsigned)VIZ_LAYER_HATCH;
    s.text = !ro->no_text;
    s.no_title = ro->no_title;
    if (ro->title) snprintf(s.title, sizeof s.title, "%s", ro->title);
    fm_err err;
    if (viz_write_figure(ro->out, fmt, w, h, (double)ro->dpi, viz_draw_state_fn, &s, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      rc = FM_EXIT_USAGE;
    } else if (ro->json) {
      print_numbers(&s, sc);
    } else {
      printf("wrote %s\n", ro->out); /* as convert and expand say theirs (--json: the numbers only) */
    }
  }
  viz_scene_destroy(sc);
  return rc;
}

int cmd_render(int argc, char **argv) {
  const char *cmd = "render";
  render_opts ro;
  int rc = parse_args(argc, argv, &ro);
  if (rc < 0) return FM_EXIT_OK; /* --help */
  if (rc) return rc;
  if (!ro.out) {
    cli_error(cmd, "-o FILE.{png,svg,pdf} is required");
    return FM_EXIT_USAGE;
  }
  fm_err err;
  viz_format fmt;
  if (viz_format_from_path(ro.out, &fmt, &err) != FM_OK) {
    cli_error(cmd, "-o %s", err.msg);
    return FM_EXIT_USAGE;
  }
  const viz_figure *fig = pick_figure(cmd, &ro);
  double w, h;
  if (!fig || resolve_size(cmd, &ro, fig, fmt, &w, &h)) return FM_EXIT_USAGE;
  if (!ro.figure) return render_source(cmd, &ro, fmt, w, h);
  if (ro.json) {
    cli_error(cmd, "--json goes with the drawing of a mask source, not with --figure %s", ro.figure);
    return FM_EXIT_USAGE;
  }
  viz_figure_opts fo = {.seqlen = ro.src.mask.seqlen, .br = (int32_t)ro.src.mask.br,
                        .bc = (int32_t)ro.src.mask.bc, .sample = ro.src.mask.sample,
                        .seed = ro.src.mask.seed, .samples_path = ro.src.mask.samples_path,
                        .text = !ro.no_text, .title = ro.title, .no_title = ro.no_title,
                        .trace = fig->takes_trace ? ro.src.path : NULL};
  if (viz_write_figure(ro.out, fmt, w, h, (double)ro.dpi, fig->draw, &fo, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  printf("wrote %s\n", ro.out);
  return FM_EXIT_OK;
}
#endif
