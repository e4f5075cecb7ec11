/* fmsim predict: the kernel time of a mask on a calibrated GPU profile,
 * without a GPU (core/fm_timing.h): time, TFLOP/s by the paper's count, the
 * speed-up over the full mask and over the noskip variant, and what-if tile
 * sizes. O(S + items log slots) time and O(S) memory. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fm_json.h"
#include "fm_timing.h"
#include "timing_cli.h"

static const char *cmd = "predict";

static const char *help =
    "usage: fmsim predict --family NAME [mask options] [options]\n"
    "       fmsim predict --mask INTERVALS.npy --causal|--bidir [--seqlen-q N] [options]\n"
    "       fmsim predict --trace DIR [options]\n\n"
    "Predicts the kernel time of a mask (forward, and backward where the profile has it) on\n"
    "a GPU without one, from the tile work of the mask at the kernel's tile size and a GPU\n"
    "profile fitted by `fmsim calibrate` to measured times (data/gpu/; the model:\n"
    "core/fm_timing.h). Prints the time, TFLOP/s by the paper's count\n"
    "4*B*H*Sq*Sk*D*(1-rho) (x2.5 backward), the speed-up over the full mask and over the\n"
    "noskip variant (every tile visited), and how the work spreads over the SMs.\n\n"
    CLI_MASK_SOURCE_HELP CLI_MASK_REST_HELP
    "  --br LIST --bc LIST  also predict these tile sizes (comma lists, every pair): a what-if\n"
    "                       of the same kernel, tile costs scaled by tile area from the\n"
    "                       profile's own tile; the kernel itself runs only its own tile\n"
    TIMING_MASK_HELP
    "  --head-dim D         64 or 128 (default 128)\n"
    "  --kernel NAME        a kernel of the registry (sm80, sm90, ...) or auto (default auto:\n"
    "                       the H200's kernel)\n"
    "  --gpu PROFILE        a profile name in data/gpu (e.g. h200-sm80) or a file (default:\n"
    "                       the H200 profile of the kernel)\n"
    "  --pass P             fwd, bwd or both (default fwd; the backward needs a backward profile)\n"
    "  --clock C            burst (default: a launch apart from others, the profile's boost window\n"
    "                       from its start, as fmsim run times) or sustained (launches back to\n"
    "                       back: the power limit's clock throughout, the protocol's sustained\n"
    "                       figure and cp-run's timing)\n"
    "  --json               one JSON object on stdout\n"
    "  --long-run           run a prediction above the work bound: batch x heads x the\n"
    "                       pass's tiles per pair (row tiles fwd, key tiles bwd) x 3 (skip,\n"
    "                       noskip, full mask) x the tile sizes, summed over the passes,\n"
    "                       above 2^28 = 268435456 work items (about ten seconds) is\n"
    "                       refused without it (--batch 65535 --heads 65535: hours)\n";

#define MAX_TILES 16

typedef struct pred_opts {
  timing_mask src; /* the mask: --family, --mask or --trace */
  const char *gpu;
  int json;
  int64_t head_dim;
  fm_kernel_id kernel;
  fm_pass pass;
  fm_clock clock;
  int64_t br[MAX_TILES], bc[MAX_TILES];
  int nbr, nbc;
  int long_run; /* --long-run: work above TIMING_MAX_ITEMS confirmed */
} pred_opts;

typedef struct pred_row {
  int32_t br, bc;
  fm_timing_result skip, noskip, full;
} pred_row;

/* The shared options (a cli_shared_opt_fn): --br/--bc as lists here, then
 * the mask's (timing_cli.h). */
static int shared_opt(const char *c, void *opts, int opt, const char *arg) {
  pred_opts *o = opts;
  if (opt == 1001 || opt == 1002)
    return cli_int_list(c, opt == 1001 ? "--br" : "--bc", arg, 1, 65536, opt == 1001 ? o->br : o->bc,
                        opt == 1001 ? &o->nbr : &o->nbc, MAX_TILES) ? -1 : 1;
  return timing_mask_opt(c, &o->src, opt, arg);
}

/* Options of predict alone; 1 when handled, -1 on error, 0 not one of them. */
static int predict_opt(const char *c, void *v, int opt, const char *arg) {
  (void)c;
  pred_opts *o = v;
  fm_err err;
  switch (opt) {
  case 'd': return cli_int(cmd, "--head-dim", arg, 1, 1024, &o->head_dim) ? -1 : 1;
  case 'g': o->gpu = arg; return 1;
  case 'j': o->json = 1; return 1;
  case 'L': o->long_run = 1; return 1;
  case 'K':
    if (fm_kernel_parse(arg, &o->kernel, &err) == FM_OK) return 1;
    cli_error(cmd, "--kernel: %s", err.msg);
    return -1;
  case 'P':
    if (fm_pass_parse(arg, &o->pass, &err) == FM_OK) return 1;
    cli_error(cmd, "--pass: %s", err.msg);
    return -1;
  case 'C':
    if (fm_clock_parse(arg, &o->clock, &err) == FM_OK) return 1;
    cli_error(cmd, "--clock: %s", err.msg);
    return -1;
  }
  return 0;
}

/* 0 parsed, 1 help printed, -1 bad usage (printed). */
static int parse_opts(int argc, char **argv, pred_opts *o) {
  static const struct option longopts[] = {
      TIMING_MASK_LONGOPTS,
      {"head-dim", required_argument, 0, 'd'}, {"kernel", required_argument, 0, 'K'},
      {"gpu", required_argument, 0, 'g'},      {"pass", required_argument, 0, 'P'},
      {"json", no_argument, 0, 'j'},           {"help", no_argument, 0, 'h'},
      {"long-run", no_argument, 0, 'L'},       {"clock", required_argument, 0, 'C'},
      {0, 0, 0, 0}};
  memset(o, 0, sizeof *o);
  timing_mask_init(&o->src);
  o->head_dim = 128;
  o->kernel = FM_KERNEL_AUTO;
  o->pass = FM_PASS_FWD;
  const cli_opts_def def = {.shortopts = ":", .longopts = longopts, .shared = shared_opt,
                            .own = predict_opt, .help = help};
  int r = cli_parse_opts(cmd, argc, argv, &def, o);
  return r ? r : timing_mask_check(cmd, &o->src);
}

/* Skip, noskip and full-mask predictions of m at one tile. */
static int predict_tile(const pred_opts *o, const fm_gpu_profile *prof, const fm_colmask *m,
                        fm_pass pass, int32_t br, int32_t bc, pred_row *row) {
  fm_timing_work w;
  fm_err err;
  fm_timing_problem pb = {.batch = o->src.mask.batch, .heads = o->src.mask.heads,
                          .head_dim = (int32_t)o->head_dim, .pass = pass,
                          .variant = FM_VARIANT_SKIP, .clock = o->clock};
  row->br = br;
  row->bc = bc;
  fm_status st = fm_timing_work_init(&w, m, br, bc, &err);
  if (st == FM_OK) st = fm_timing_predict(prof, &w, &pb, &row->skip, &err);
  pb.variant = FM_VARIANT_NOSKIP;
  if (st == FM_OK) st = fm_timing_predict(prof, &w, &pb, &row->noskip, &err);
  pb.variant = FM_VARIANT_SKIP;
  pb.full_mask = 1;
  if (st == FM_OK) st = fm_timing_predict(prof, &w, &pb, &row->full, &err);
  fm_timing_work_free(&w);
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  return 0;
}

/* The kernel's tile first, then every --br x --bc pair not equal to it. */
static int tile_list(const pred_opts *o, const fm_timing_coef *c, int32_t (*tiles)[2]) {
  int n = 0;
  tiles[n][0] = c->br;
  tiles[n++][1] = c->bc;
  int nbr = o->nbr ? o->nbr : 1, nbc = o->nbc ? o->nbc : 1;
  for (int a = 0; a < nbr; a++)
    for (int b = 0; b < nbc; b++) {
      int32_t br = o->nbr ? (int32_t)o->br[a] : c->br, bc = o->nbc ? (int32_t)o->bc[b] : c->bc;
      int dup = 0;
      for (int k = 0; k < n; k++) dup |= tiles[k][0] == br && tiles[k][1] == bc;
      if (!dup) {
        tiles[n][0] = br;
        tiles[n++][1] = bc;
      }
    }
  return n;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static void row_json(fm_json *j, const pred_row *r) {
  fm_json_object(j, NULL);
  fm_json_int(j, "br", r->br);
  fm_json_int(j, "bc", r->bc);
  fm_json_bool(j, "what_if", r->skip.what_if);
  fm_json_double(j, "rho", r->skip.rho);
  fm_json_double(j, "time_ms", r->skip.time_us / 1e3);
  fm_json_double(j, "tflops", r->skip.tflops);
  fm_json_double(j, "full_mask_ms", r->full.time_us / 1e3);
  fm_json_double(j, "speedup_over_full_mask", ratio(r->full.time_us, r->skip.time_us));
  fm_json_double(j, "noskip_ms", r->noskip.time_us / 1e3);
  fm_json_double(j, "speedup_over_noskip", ratio(r->noskip.time_us, r->skip.time_us));
  fm_json_int(j, "items", r->skip.items);
  fm_json_int(j, "slots", r->skip.slots);
  fm_json_double(j, "waves", r->skip.waves);
  fm_json_double(j, "busy", r->skip.busy);
  fm_json_double(j, "schedule_ms", r->skip.schedule_us / 1e3);
  fm_json_double(j, "throttle_ms", r->skip.throttle_us / 1e3);
  fm_json_double(j, "memory_floor_ms", r->skip.floor_us / 1e3);
  fm_json_double(j, "launch_ms", r->skip.launch_us / 1e3);
  fm_json_int(j, "tiles_total", r->skip.tiles_total);
  fm_json_int(j, "tiles_visited", r->skip.tiles_visited);
  fm_json_int(j, "tiles_partial", r->skip.tiles_partial);
  fm_json_end(j);
}

static void header_json(fm_json *j, const pred_opts *o, const fm_gpu_profile *p, const fm_colmask *m) {
  const fm_timing_coef *c = fm_profile_coef(p, FM_PASS_FWD, (int32_t)o->head_dim);
  fm_json_string(j, "family", o->src.mask.family);
  fm_json_string(j, "mask_file", o->src.mask_file);
  fm_json_string(j, "trace", o->src.trace);
  fm_json_bool(j, "causal", fm_colmask_causal(m));
  fm_json_int(j, "seqlen_q", fm_colmask_sq(m));
  fm_json_int(j, "seqlen_k", fm_colmask_sk(m));
  fm_json_int(j, "batch", o->src.mask.batch);
  fm_json_int(j, "heads", o->src.mask.heads);
  fm_json_int(j, "mask_sets", fm_colmask_nsets(m));
  fm_json_int(j, "head_dim", o->head_dim);
  fm_json_object(j, "profile");
  fm_json_string(j, "name", p->name);
  fm_profile_ident_json(p, j);
  fm_json_int(j, "br", c->br);
  fm_json_int(j, "bc", c->bc);
  fm_json_double(j, "fit_median_abs_error", c->fit_median_err);
  fm_json_double(j, "fit_worst_abs_error", c->fit_worst_err);
  fm_json_end(j);
}

static void print_human(const pred_opts *o, const fm_gpu_profile *p, const fm_colmask *m,
                        fm_pass pass, const pred_row *rows, int n) {
  const fm_timing_coef *c = fm_profile_coef(p, pass, (int32_t)o->head_dim);
  const pred_row *r = &rows[0];
  if (pass == FM_PASS_FWD) {
    printf("mask        %s (%s), Sq %d x Sk %d, batch %lld, heads %lld, head dim %lld\n",
           o->src.mask_file ? o->src.mask_file : o->src.trace ? o->src.trace : o->src.mask.family,
           fm_colmask_causal(m) ? "causal" : "bidirectional", fm_colmask_sq(m), fm_colmask_sk(m),
           (long long)o->src.mask.batch, (long long)o->src.mask.heads, (long long)o->head_dim);
    printf("profile     %s: %s, kernel %s, measured %s, fmsim %s (fit |error| median %.1f%%, "
           "worst %.1f%% over %d cases)\n", p->name, p->gpu, fm_kernel_get(p->kernel)->name,
           p->date, p->fmsim_version, 100 * c->fit_median_err, 100 * c->fit_worst_err, c->fit_cases);
  } else {
    printf("\n");
  }
  printf("tile        %d x %d (the kernel's %s tile), rho %.4f\n\n", r->br, r->bc,
         pass == FM_PASS_BWD ? "backward" : "forward", r->skip.rho);
  printf("%-11s %.3f ms, %.1f TFLOP/s (paper count%s)\n", pass == FM_PASS_BWD ? "backward" : "forward",
         r->skip.time_us / 1e3, r->skip.tflops, pass == FM_PASS_BWD ? ", x2.5" : "");
  printf("full mask   %.3f ms: speed-up %.2fx\n", r->full.time_us / 1e3, ratio(r->full.time_us, r->skip.time_us));
  printf("noskip      %.3f ms: speed-up %.2fx\n", r->noskip.time_us / 1e3,
         ratio(r->noskip.time_us, r->skip.time_us));
  printf("schedule    %lld work items over %lld CTA slots: %.1f waves, %.0f%% busy; launch %.3f ms, "
         "memory floor %.3f ms\n", (long long)r->skip.items, (long long)r->skip.slots, r->skip.waves,
         100 * r->skip.busy, r->skip.launch_us / 1e3, r->skip.floor_us / 1e3);
  if (c->throttle > 1 && o->clock == FM_CLOCK_SUSTAINED)
    printf("clock       sustained: the power limit's clock throughout, %.3fx the boost clock's time: "
           "%+.3f ms here\n", c->throttle, r->skip.throttle_us / 1e3);
  else if (c->throttle > 1)
    printf("clock       burst: boost window %.2f ms, then %.3fx slower (the power limit's clock): %+.3f ms "
           "here\n", c->boost_us / 1e3, c->throttle, r->skip.throttle_us / 1e3);
  else
    printf("clock       no boost window in the profile (the boost clock throughout)\n");
  if (n < 2) return;
  printf("\nwhat-if tiles: the same kernel at other tiles, tile costs scaled by area from %d x %d\n"
         "(an estimate: the kernel is built for its own tile only)\n", c->br, c->bc);
  printf("  %-11s %7s %13s %13s %9s  speed-up over %d x %d\n", "Br x Bc", "rho", "visited",
         "predicted ms", "TFLOP/s", c->br, c->bc);
  for (int i = 0; i < n; i++) {
    char t[32];
    snprintf(t, sizeof t, "%d x %d", rows[i].br, rows[i].bc);
    printf("  %-11s %7.4f %13lld %13.3f %9.1f %9.2fx\n", t, rows[i].skip.rho,
           (long long)rows[i].skip.tiles_visited, rows[i].skip.time_us / 1e3, rows[i].skip.tflops,
           ratio(r->skip.time_us, rows[i].skip.time_us));
  }
}

/* Every tile of one pass: rows (caller frees), its count in *n. */
static pred_row *predict_pass(const pred_opts *o, const fm_gpu_profile *prof, const fm_colmask *m,
                              fm_pass pass, int *n) {
  const fm_timing_coef *c = fm_profile_coef(prof, pass, (int32_t)o->head_dim);
  int32_t tiles[1 + MAX_TILES * MAX_TILES][2];
  *n = tile_list(o, c, tiles);
  pred_row *rows = calloc((size_t)*n, sizeof *rows);
  if (!rows) cli_error(cmd, "out of memory");
  for (int i = 0; rows && i < *n; i++)
    if (predict_tile(o, prof, m, pass, tiles[i][0], tiles[i][1], &rows[i])) {
      free(rows);
      return NULL;
    }
  return rows;
}

/* Every prediction asked for (three per tile: skip, noskip, full mask; per
 * pass) against the timing model's work bound (timing_cli.h). */
static int work_check(const pred_opts *o, const fm_gpu_profile *prof, const fm_colmask *m) {
  static const fm_pass passes[2] = {FM_PASS_FWD, FM_PASS_BWD};
  double items = 0;
  for (int k = 0; k < 2; k++) {
    if (!(o->pass & passes[k])) continue;
    int32_t tiles[1 + MAX_TILES * MAX_TILES][2];
    int n = tile_list(o, fm_profile_coef(prof, passes[k], (int32_t)o->head_dim), tiles);
    for (int i = 0; i < n; i++)
      items += 3 * timing_items(passes[k], fm_colmask_sq(m), fm_colmask_sk(m), tiles[i][0],
                                tiles[i][1], o->src.mask.batch, o->src.mask.heads);
  }
  char what[96];
  snprintf(what, sizeof what, "batch %lld x heads %lld", (long long)o->src.mask.batch,
           (long long)o->src.mask.heads);
  return timing_work_check(cmd, what, items, o->long_run);
}

int cmd_predict(int argc, char **argv) {
  pred_opts o;
  int r = parse_opts(argc, argv, &o);
  if (r) return r > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  fm_gpu_profile prof;
  char note[512];
  if (timing_profile_load(cmd, o.gpu, o.kernel, (int32_t)o.head_dim, &prof, note, sizeof note))
    return FM_EXIT_USAGE;
  if ((o.pass & FM_PASS_BWD) && !fm_profile_coef(&prof, FM_PASS_BWD, (int32_t)o.head_dim)) {
    cli_error(cmd, "--pass %s: no backward profile yet (%s has no backward coefficients for head "
              "dim %lld: fmsim calibrate fits them from a run that times the backward)",
              fm_pass_name(o.pass), prof.name, (long long)o.head_dim);
    return FM_EXIT_USAGE;
  }
  fm_colmask *m = timing_mask_build(cmd, &o.src);
  if (!m) return FM_EXIT_USAGE;
  if (work_check(&o, &prof, m)) {
    fm_colmask_destroy(m);
    return FM_EXIT_USAGE;
  }
  static const fm_pass passes[2] = {FM_PASS_FWD, FM_PASS_BWD};
  pred_row *rows[2] = {NULL, NULL};
  int nrows[2] = {0, 0}, rc = FM_EXIT_OK;
  for (int k = 0; k < 2 && rc == FM_EXIT_OK; k++)
    if ((o.pass & passes[k]) && !(rows[k] = predict_pass(&o, &prof, m, passes[k], &nrows[k])))
      rc = FM_EXIT_USAGE;
  if (rc == FM_EXIT_OK && note[0]) fprintf(stderr, "%s\n", note);
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  if (rc == FM_EXIT_OK && o.json) header_json(&j, &o, &prof, m);
  if (rc == FM_EXIT_OK && o.json) fm_json_array(&j, "passes");
  for (int k = 0; k < 2 && rc == FM_EXIT_OK; k++) {
    if (!rows[k]) continue;
    if (!o.json) {
      print_human(&o, &prof, m, passes[k], rows[k], nrows[k]);
      continue;
    }
    const fm_timing_coef *c = fm_profile_coef(&prof, passes[k], (int32_t)o.head_dim);
    fm_json_object(&j, NULL);
    fm_json_string(&j, "pass", fm_pass_name(passes[k]));
    fm_json_string(&j, "clock", fm_clock_name(o.clock));
    fm_json_double(&j, "boost_window_ms", c->throttle > 1 ? c->boost_us / 1e3 : 0);
    fm_json_double(&j, "throttle", c->throttle > 1 ? c->throttle : 1);
    fm_json_array(&j, "tiles");
    for (int i = 0; i < nrows[k]; i++) row_json(&j, &rows[k][i]);
    fm_json_end(&j);
    fm_json_end(&j);
  }
  if (rc == FM_EXIT_OK && o.json) {
    fm_json_end(&j);
    cli_print_json(&j);
  } else {
    fm_json_free(&j);
  }
  free(rows[0]);
  free(rows[1]);
  fm_colmask_destroy(m);
  return rc;
}
