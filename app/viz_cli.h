/* viz_cli.h — what `fmsim view` and `fmsim render` share: the mask source
 * (a family or a file), --layer, --size, and opening the scene. Only built
 * with cairo (FM_HAVE_VIZ). */
#ifndef FM_VIZ_CLI_H
#define FM_VIZ_CLI_H

/* Options of the source beyond CLI_MASK_LONGOPTS (handled by viz_cli_source_opt). */
#define VIZ_CLI_SOURCE_LONGOPTS                                                                 \
  {"causal", no_argument, 0, 2001}, {"masked-true", no_argument, 0, 2002},                     \
      {"true-masked", no_argument, 0, 2002}, {"head-dim", required_argument, 0, 2003},        \
      {"strict", no_argument, 0, 2004}, {"layer", required_argument, 0, 'l'},                \
      {"size", required_argument, 0, 'z'}, {"bool", no_argument, 0, 2005},                     \
      {"additive", no_argument, 0, 2006}, {"gpu", required_argument, 0, 2007},                \
      {"bidir", no_argument, 0, 2008}
#define VIZ_CLI_SOURCE_HELP                                                                     \
  "  --causal | --bidir   INTERVALS.npy: the causal flag, needed when k = 2 (causal-2 or\n"    \
  "                       bidir-2; k = 1 is causal-1 and k = 4 bidir-4 without it)\n"         \
  "  --masked-true        MASK.npy: true means masked (default: true means may attend);\n"      \
  "                       --true-masked is an alias\n"                                       \
  "  --bool               MASK.npy of floats: read like a bool mask (non-zero = may attend)\n"  \
  "  --additive           MASK.npy of floats: additive (0 = attend, -inf or <= -10000 =\n"     \
  "                       masked); the default, but a float mask of only 0 and 1 needs one\n" \
  "  --head-dim D         head dimension of the modelled bytes overlay (default 128)\n"       \
  "  --strict             INTERVALS.npy: refuse indices above Sq and starts past their end\n"  \
  "                       (default: read as Paddle does, as Sq and as empty, with a note)\n"  \
  "  --gpu PROFILE        the side panel's predicted time of the mask on a GPU profile (a\n"  \
  "                       name in data/gpu, e.g. h200-sm80, or a file; fmsim predict tells\n" \
  "                       more): forward, and backward with the backward layer\n"
#ifdef FM_HAVE_VIZ
#include "cli.h"
#include "fm_timing.h"
#include "viz.h"

/* Largest figure or window side, pixels (or points for PDF/SVG). */
#define VIZ_CLI_MAX_SIZE 16384

typedef struct viz_cli_source {
  cli_mask_opts mask;      /* --family and the shared mask options */
  int br_given, bc_given;  /* --br / --bc on the command line (else a trace's own) */
  const char *path;        /* TRACE_DIR, MASK.npy or INTERVALS.npy */
  int causal;              /* --causal 1, --bidir 0, -1 neither: INTERVALS.npy's causal flag */
  int true_masked;         /* --true-masked: MASK.npy true means masked */
  int strict;              /* --strict: INTERVALS.npy read strictly */
  int reading;             /* --bool / --additive: an fm_dense_reading (0: auto) */
  int64_t head_dim;        /* --head-dim: D of the modelled bytes (0: default) */
  const char *layer;       /* --layer (NULL: the state's default, both) */
  int w, h;                /* --size (0: the command's default) */
  const char *gpu;         /* --gpu: a profile of the timing model (NULL: none) */
  fm_gpu_profile profile;  /* loaded by viz_cli_open; the scene borrows it */
} viz_cli_source;

void viz_cli_source_init(viz_cli_source *src);

/* 1: handled, 0: not a source option, -1: bad value (error printed). */
int viz_cli_source_opt(const char *cmd, viz_cli_source *src, int opt, const char *arg);
int viz_cli_source_opt_any(const char *cmd, void *src, int opt, const char *arg); /* a cli_shared_opt_fn */

/* The operands after the options: at most one source path; an interval file
 * gets its causal flag from --causal/--bidir or its k (cli_intervals_causal:
 * k = 2 without a flag is refused). 0, or FM_EXIT_USAGE after printing. */
int viz_cli_operand(const char *cmd, viz_cli_source *src, int argc, char **argv);

/* A length in inches: a number in 0.1..227 (16384 points). Prints the error;
 * 0 on success. */
int viz_cli_inches(const char *cmd, const char *opt, const char *text, double *out);

/* "WxH" with both in 1..16384. Prints the error; 0 on success. */
int viz_cli_size(const char *cmd, const char *opt, const char *text, int *w, int *h);

/* --layer mask|tiles|both|cycles|bytes, the last four also with -bwd (the
 * backward's tile map and overlays) -> layer bits (panel kept) and overlay. */
int viz_cli_layer(const char *cmd, const char *name, unsigned *layers, viz_overlay *overlay);

/* Checks the source options (one of --family or a path), applies --layer,
 * loads the --gpu profile into src->profile, creates the scene, sets the
 * state's mask fields and syncs (a -bwd layer at the backward's tile unless
 * --br/--bc gave one); refuses --layer cycles (or cycles-bwd) on a source
 * without those cycles, and a profile that is unknown, malformed or has no
 * forward fit at the scene's head dim. Prints the error; 0 on success (the
 * scene borrows src->profile: keep src while it lives). */
int viz_cli_open(const char *cmd, viz_cli_source *src, viz_state *s, viz_scene **sc);

#endif
#endif
