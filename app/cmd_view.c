/* fmsim view: the interactive window (SDL2 + cairo), and its offscreen frame
 * benchmark (--bench-frames, no display needed). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "viz_cli.h"

#ifdef FM_HAVE_VIZ_SDL
#include "viz_sdl.h"
#endif

static const char *help_head =
    "usage: fmsim view [--family NAME [mask options] | TRACE_DIR | MASK.npy | INTERVALS.npy]\n"
    "                  [--layer L] [--size WxH] [--out-dir DIR] [--script FILE]\n"
    "       fmsim view ... --bench-frames N\n\n"
    "An interactive window onto a mask: zoom down to single tokens, see each tile's class\n"
    "(min/max rule and exact), its 8 bounds and the intervals of the key column under the\n"
    "cursor; cycle families, document samples, Br, Bc and S with keys; live tile counts, rho\n"
    "and mask memory. Without a source: causal_document at S = 8192. Needs a display; on a\n"
    "machine without one, `fmsim render` draws the same figure into a file.\n\n"
    "source (one of):\n" CLI_MASK_HELP
    "  TRACE_DIR            a trace folder (fmsim analyze --out, GPU runs)\n"
    "  MASK.npy             dense mask: bool/int (true = may attend) or float (additive,\n"
    "                       -inf = masked), [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk]\n"
    "  INTERVALS.npy        int32/int64 [B, H, Sk, k] intervals\n" VIZ_CLI_SOURCE_HELP
    "\nwindow:\n"
    "  --layer L            mask | tiles | both (default) | cycles | bytes; tiles-bwd,\n"
    "                       both-bwd, cycles-bwd, bytes-bwd: the backward's (key b)\n"
    "  --size WxH           window size, 1..16384 (default: the screen size of the figure\n"
    "                       registry's 'tiles' figure, which render uses too)\n"
    "  --out-dir DIR        where screenshots and exports go (default .)\n"
    "  --export-dpi N       mask resolution inside PDF/SVG exports (default 300)\n"
    "  --script FILE        replay events from FILE (one per line, then quit): key CHAR,\n"
    "                       key left|right|up|down|home|escape, motion X Y, down X Y, up X Y,\n"
    "                       drag X0 Y0 X1 Y1, wheel N [X Y], resize W H\n"
    "  --bench-frames N     replay N scripted zoom/pan/hover events offscreen (no window) and\n"
    "                       print frame-time percentiles (p50/p90/p99), then 8 Br/Bc key frames\n"
    "\nkeys:\n";

static void print_help(const void *opts) {
  (void)opts;
  fputs(help_head, stdout);
#ifdef FM_HAVE_VIZ
  int n;
  const viz_key_help *k = viz_key_help_table(&n);
  for (int i = 0; i < n; i++) printf("  %-14s %s\n", k[i].keys, k[i].action);
#else
  printf("  (this fmsim was built without cairo/SDL2: no viewer)\n");
#endif
}

#ifndef FM_HAVE_VIZ
int cmd_view(int argc, char **argv) {
  return cli_unavailable("view", argc, argv, print_help,
                         "built without cairo/SDL2: install libcairo2-dev and libsdl2-dev "
                         "(scripts/install-deps.sh) and rebuild");
}
#else

#ifdef FM_HAVE_VIZ_SDL
static int env_set(const char *name) {
  const char *v = getenv(name);
  return v && *v;
}
#endif

/* What view's command line says. */
typedef struct view_opts {
  viz_cli_source src; /* first: viz_cli_source_opt_any takes the source's options */
  const char *out_dir, *script;
  int64_t bench, export_dpi;
} view_opts;

/* view's options besides the source's: 1 taken, -1 a bad value (printed), 0 none of them. */
static int view_opt(const char *cmd, void *v, int opt, const char *arg) {
  view_opts *vo = v;
  switch (opt) {
  case 'O': vo->out_dir = arg; return 1;
  case 'd': return cli_int(cmd, "--export-dpi", arg, 18, 2400, &vo->export_dpi) ? -1 : 1;
  case 'S': vo->script = arg; return 1;
  case 'B': return cli_int(cmd, "--bench-frames", arg, 1, 1000000, &vo->bench) ? -1 : 1;
  }
  return 0;
}

int cmd_view(int argc, char **argv) {
  static const struct option longopts[] = {CLI_MASK_LONGOPTS,
                                           VIZ_CLI_SOURCE_LONGOPTS,
                                           {"out-dir", required_argument, 0, 'O'},
                                           {"export-dpi", required_argument, 0, 'd'},
                                           {"script", required_argument, 0, 'S'},
                                           {"bench-frames", required_argument, 0, 'B'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":", .longopts = longopts,
                            .shared = viz_cli_source_opt_any, .own = view_opt,
                            .print_help = print_help, .operands = CLI_OPERANDS};
  const char *cmd = "view";
  view_opts vo = {.out_dir = ".", .export_dpi = 300};
  viz_cli_source_init(&vo.src);
  int parsed = cli_parse_opts(cmd, argc, argv, &def, &vo);
  if (parsed) return parsed > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  viz_cli_source *src = &vo.src;
  const char *out_dir = vo.out_dir, *script = vo.script;
  const int64_t bench = vo.bench, export_dpi = vo.export_dpi;
  if (viz_cli_operand(cmd, src, argc, argv)) return FM_EXIT_USAGE;
#ifndef FM_HAVE_VIZ_SDL
  (void)out_dir;
  (void)script;
  if (!bench) {
    cli_error(cmd, "built without SDL2: no window (install libsdl2-dev and rebuild); "
              "'fmsim render ... -o FILE.png' draws the same figure into a file");
    return FM_EXIT_USAGE;
  }
#else
  /* fail before any work when there is plainly no display (an empty variable
     is no display either: SDL would probe every driver and may wait forever) */
  if (!bench && !env_set("DISPLAY") && !env_set("WAYLAND_DISPLAY") && !env_set("SDL_VIDEODRIVER")) {
    cli_error(cmd, "no display available (DISPLAY and WAYLAND_DISPLAY are unset or empty); draw "
              "into a file with 'fmsim render ... -o FILE.png' instead");
    return FM_EXIT_USAGE;
  }
#endif
  viz_state s;
  const viz_figure *fig = viz_figure_find("tiles"); /* the registry's screen size */
  viz_state_init(&s, src->w ? src->w : (int)fig->width, src->w ? src->h : (int)fig->height);
  viz_scene *sc = NULL;
  if (viz_cli_open(cmd, src, &s, &sc)) return FM_EXIT_USAGE;
  fm_err err;
  int rc = FM_EXIT_OK;
  if (bench) {
    viz_bench_result r;
    if (viz_bench_frames(&s, (int)bench, &r, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      rc = FM_EXIT_FAIL;
    } else {
      const char *lname = src->layer ? src->layer : "both";
      printf("fmsim view: %d frames at %dx%d, %s S = %d, Br x Bc = %d x %d, layer %s\n", r.frames,
             s.width, s.height, viz_scene_label(sc), s.facts.sk, s.br, s.bc, lname);
      printf("  pan/zoom/hover frames: p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms\n",
             r.p50_ms, r.p90_ms, r.p99_ms, r.max_ms);
      printf("  Br/Bc key frames (reclassify + draw): p50 %.2f ms  max %.2f ms (%d frames)\n",
             r.rebuild_p50_ms, r.rebuild_max_ms, r.rebuild_frames);
    }
  } else {
#ifdef FM_HAVE_VIZ_SDL
    viz_window_opts wo = {.out_dir = out_dir, .script = script, .export_dpi = (double)export_dpi};
    cli_notes_flush(); /* the window runs until closed: its notes now */
    fm_status st = viz_window_run(&s, &wo, &err);
    if (st != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      rc = FM_EXIT_USAGE; /* no display, a bad script, an unwritable --out-dir */
    }
#endif
  }
  viz_scene_destroy(sc);
  return rc;
}
#endif
