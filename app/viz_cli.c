/* viz_cli.c — shared option handling of `fmsim view` and `fmsim render`. */
#define _POSIX_C_SOURCE 200809L
#include "viz_cli.h"

#ifdef FM_HAVE_VIZ
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dense_report.h"
#include "fm_families.h"
#include "timing_cli.h"

void viz_cli_source_init(viz_cli_source *src) {
  memset(src, 0, sizeof *src);
  cli_mask_opts_init(&src->mask);
  src->causal = -1;
}

int viz_cli_source_opt(const char *cmd, viz_cli_source *src, int opt, const char *arg) {
  int r = cli_mask_opt(cmd, &src->mask, opt, arg);
  if (r != 0) {
    if (r > 0 && opt == 1001) src->br_given = 1;
    if (r > 0 && opt == 1002) src->bc_given = 1;
    return r;
  }
  switch (opt) {
  case 2001:
  case 2008: return cli_causal_flag(cmd, opt == 2001, &src->causal) ? -1 : 1;
  case 2002: src->true_masked = 1; return 1;
  case 2004: src->strict = 1; return 1;
  case 2005:
  case 2006: { /* the codes of DENSE_READING_LONGOPTS are taken by render's own options */
    fm_dense_reading r = (fm_dense_reading)src->reading;
    if (dense_reading_opt(cmd, opt == 2005 ? 3001 : 3002, &r) < 0) return -1;
    src->reading = (int)r;
    return 1;
  }
  case 2003:
    if (cli_int(cmd, "--head-dim", arg, 1, 4096, &src->head_dim)) return -1;
    return 1;
  case 2007: src->gpu = arg; return 1;
  case 'l': src->layer = arg; return 1;
  case 'z': return viz_cli_size(cmd, "--size", arg, &src->w, &src->h) ? -1 : 1;
  }
  return 0;
}

int viz_cli_source_opt_any(const char *cmd, void *src, int opt, const char *arg) {
  return viz_cli_source_opt(cmd, src, opt, arg);
}

int viz_cli_operand(const char *cmd, viz_cli_source *src, int argc, char **argv) {
  if (optind < argc) src->path = argv[optind++];
  if (optind < argc) {
    cli_error(cmd, "unexpected argument '%s' (one source at most)", argv[optind]);
    return FM_EXIT_USAGE;
  }
  if (cli_family_operand(cmd, src->path)) return FM_EXIT_USAGE;
  /* an interval file's form, before any work (view: before the display) */
  struct stat sb;
  if (src->path && stat(src->path, &sb) == 0 && !S_ISDIR(sb.st_mode))
    return cli_intervals_causal(cmd, src->path, CLI_FLAG_WHEN_AMBIGUOUS, &src->causal);
  return 0;
}

int viz_cli_inches(const char *cmd, const char *opt, const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end || errno || !(v >= 0.1 && v <= VIZ_CLI_MAX_SIZE / 72.0)) {
    cli_error(cmd, "%s '%s': expected a length in inches from 0.1 to %.0f, e.g. 3.3", opt, text,
              floor(VIZ_CLI_MAX_SIZE / 72.0));
    return -1;
  }
  *out = v;
  return 0;
}

int viz_cli_size(const char *cmd, const char *opt, const char *text, int *w, int *h) {
  long long a, b;
  if (cli_int_pair(text, 'x', &a, &b)) {
    cli_error(cmd, "%s '%s': expected WIDTHxHEIGHT, e.g. 1600x1000", opt, text);
    return -1;
  }
  if (a < 1 || a > VIZ_CLI_MAX_SIZE || b < 1 || b > VIZ_CLI_MAX_SIZE) {
    cli_error(cmd, "%s %s: width and height must be in 1..%d pixels", opt, text, VIZ_CLI_MAX_SIZE);
    return -1;
  }
  *w = (int)a;
  *h = (int)b;
  return 0;
}

int viz_cli_layer(const char *cmd, const char *name, unsigned *layers, viz_overlay *overlay) {
  unsigned keep = *layers & VIZ_LAYER_PANEL;
  unsigned tiles = VIZ_LAYER_TILES | VIZ_LAYER_GRID | VIZ_LAYER_HATCH;
  size_t n = strlen(name);
  int bwd = n > 4 && !strcmp(name + n - 4, "-bwd"); /* the backward's tiles and overlays */
  char base[16];
  snprintf(base, sizeof base, "%.*s", (int)(bwd ? n - 4 : n), name);
  *overlay = VIZ_OVERLAY_NONE;
  if (!strcmp(base, "mask") && !bwd) *layers = keep | VIZ_LAYER_MASK;
  else if (!strcmp(base, "tiles")) *layers = keep | tiles;
  else if (!strcmp(base, "both")) *layers = keep | tiles | VIZ_LAYER_MASK;
  else if (!strcmp(base, "cycles") || !strcmp(base, "bytes")) {
    *layers = keep | VIZ_LAYER_TILES | VIZ_LAYER_GRID;
    *overlay = base[0] == 'c' ? VIZ_OVERLAY_CYCLES : VIZ_OVERLAY_BYTES;
  } else {
    cli_error(cmd, "--layer '%s': unknown layer (expected mask, tiles, both, cycles or bytes, the "
              "last four with -bwd for the backward's, e.g. cycles-bwd)", name);
    return -1;
  }
  if (bwd) *layers |= VIZ_LAYER_BACKWARD;
  return 0;
}

/* The --gpu profile has a forward fit at the scene's head dim, or says it has none. */
static int profile_fits(const char *cmd, const viz_cli_source *src, const viz_scene *sc) {
  int32_t D = viz_scene_head_dim(sc);
  if (!src->gpu || fm_profile_coef(&src->profile, FM_PASS_FWD, D)) return 0;
  char have[64] = "";
  for (int i = 0; i < src->profile.nfwd; i++)
    snprintf(have + strlen(have), sizeof have - strlen(have), "%s%d", i ? ", " : "",
             src->profile.fwd[i].head_dim);
  cli_error(cmd, "--gpu %s: the profile has no forward fit for head dim %d (it has: %s); give "
            "--head-dim or another profile", src->gpu, D, have[0] ? have : "none");
  return -1;
}

int viz_cli_open(const char *cmd, viz_cli_source *src, viz_state *s, viz_scene **sc) {
  const cli_mask_opts *o = &src->mask;
  *sc = NULL;
  if (src->layer && viz_cli_layer(cmd, src->layer, &s->layers, &s->overlay)) return -1;
  char what[300];
  snprintf(what, sizeof what, "--gpu %.280s", src->gpu ? src->gpu : "");
  if (src->gpu && timing_profile_open(cmd, what, src->gpu, &src->profile)) return -1;
  viz_overlay want = s->overlay;
  int want_bwd = (s->layers & VIZ_LAYER_BACKWARD) != 0; /* turned on after the first sync */
  s->layers &= ~(unsigned)VIZ_LAYER_BACKWARD;
  if (src->path && o->family) {
    cli_error(cmd, "give either --family or a file (%s), not both", src->path);
    return -1;
  }
  if (o->family) {
    const fm_family_info *f = fm_family_find(o->family);
    if (!f) {
      cli_unknown_name(cmd, "", "family", o->family, fm_family_closest(o->family),
                       "fmsim families lists them");
      return -1;
    }
    for (int i = 0; i < fm_family_count(); i++)
      if (fm_family_at(i) == f) s->family = i;
  }
  viz_scene_opts so = {.path = src->path, .causal = src->causal > 0,
                       .causal_given = src->causal >= 0, .true_masked = src->true_masked,
                       .strict = src->strict, .reading = src->reading,
                       .batch = o->batch, .heads = o->heads, .param_family = o->family,
                       .params = o->params, .nparams = o->nparams,
                       .samples_path = o->samples_path, .head_dim = (int32_t)src->head_dim,
                       .profile = src->gpu ? &src->profile : NULL};
  s->seqlen = o->seqlen;
  s->sample = o->sample;
  s->seed = o->seed;
  s->br = (int32_t)o->br;
  s->bc = (int32_t)o->bc;
  fm_err err;
  if (viz_scene_create(&so, s, sc, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  if (viz_scene_note(*sc)[0]) cli_note(cmd, "%s", viz_scene_note(*sc));
  /* a trace keeps its own tile size unless --br/--bc say otherwise */
  if (src->br_given) s->br = (int32_t)o->br;
  if (src->bc_given) s->bc = (int32_t)o->bc;
  fm_status st = viz_scene_sync(*sc, s, &err);
  if (st == FM_OK && want_bwd) { /* the backward's tile unless --br/--bc gave one */
    if (src->br_given || src->bc_given) s->layers |= VIZ_LAYER_BACKWARD;
    else if (!(viz_toggle_backward(s) & VIZ_DO_SYNC))
      st = fm_fail(&err, FM_EUNSUPPORTED, "--layer %s: %s", src->layer, s->status);
    s->status[0] = 0;
    s->overlay = want;
    if (st == FM_OK) st = viz_scene_sync(*sc, s, &err);
  }
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    viz_scene_destroy(*sc);
    *sc = NULL;
    return -1;
  }
  int bad = profile_fits(cmd, src, *sc);
  if (!bad && want == VIZ_OVERLAY_CYCLES && !s->facts.has_cycles) {
    cli_error(cmd, "--layer %s: %s", src->layer, s->status[0] ? s->status : "no cycles in this source");
    bad = 1;
  }
  if (bad) {
    viz_scene_destroy(*sc);
    *sc = NULL;
    return -1;
  }
  return 0;
}
#else
typedef int viz_cli_unused; /* ISO C wants a declaration in every file */
#endif
