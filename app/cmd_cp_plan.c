/* fmsim cp-plan: how P GPUs would split a masked attention by sequence
 * (context parallelism, issue 24), planned on the CPU: per sharding and rank
 * the tiles by class, predicted forward and backward times, the K/V to
 * receive, imbalance, step time and the exchange (core/fm_cp_plan.h does the
 * planning; this file parses, prints and draws). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "cp_cli.h"
#include "fm_cp_plan.h"
#include "fm_json.h"
#include "fm_timing.h"
#include "timing_cli.h"
#ifdef FM_HAVE_VIZ
#include "viz.h"
#include "viz_cli.h"
#endif

static const char *cmd = "cp-plan";
#define NO_CAIRO "this fmsim was built without cairo, so it draws no figures (install libcairo2-dev, " \
                 "scripts/install-deps.sh, and rebuild)"

static const char *help =
    "usage: fmsim cp-plan --family NAME [mask options] --ranks P [options]\n"
    "       fmsim cp-plan --mask FILE [--causal|--bidir] --ranks P [options]\n"
    "       fmsim cp-plan --trace DIR --ranks P [options]\n\n"
    "Plans context parallelism: P GPUs split the query rows of one sequence (Sq = Sk = S),\n"
    "each keeping the K/V rows of its queries and receiving the K/V of other ranks that its\n"
    "queries see. For each sharding, one row per rank: its tiles by class at the kernel's\n"
    "forward and backward tiles (min/max rule, what the kernel skips), its predicted forward\n"
    "and backward times on a GPU profile (the timing model of fmsim predict, on the rank's\n"
    "rows against every key, plus the 9 / 22 us cp-run's event windows hold around a forward /\n"
    "backward launch beyond the kernel), the K/V it must receive (only segments of other ranks with a\n"
    "tile its queries visit: rows x heads x head dim x 2 bytes x 2 (K, V) x batch); then the\n"
    "imbalance (max/mean of time and of visited tiles), the step time (the slowest rank),\n"
    "the scaling efficiency T1 / (P x step) against one GPU, the communication volume and\n"
    "the exchange the plan picks: an all-gather of the needed K/V or a ring of point-to-point\n"
    "sends overlapped with compute (docs/DESIGN.md, \"Context parallelism\", has the model).\n\n"
    "Shardings: contiguous (P blocks), zigzag (2P stripes, rank r owns r and 2P-1-r, as ring\n"
    "attention), mask-aware (chunks of --chunk rows by their visited tiles, largest first onto\n"
    "the least-loaded rank, as PaddlePaddle FlashMask's context parallel; K/V follow their\n"
    "chunks). Boundaries are multiples of the kernel's tiles (128 rows for sm90 at head dim\n"
    "128). Runs in O(S + P x tiles) time: 1M tokens in a fraction of a second.\n\n"
    CLI_MASK_SOURCE_HELP CLI_MASK_REST_HELP TIMING_MASK_HELP
    "  --ranks P            GPUs (1..4096, required)\n"
    "  --sharding NAME      contiguous, zigzag, mask-aware or all (default all; plan: all); the\n"
    "                       last line names the best: the least predicted step\n"
    "  --chunk N            mask-aware chunk rows, a multiple of the kernel's tiles (default\n"
    "                       2048, rounded up to them: 2304 at head dim 64 on sm90)\n"
    "  --exact              mask-aware: the best assignment (branch and bound) instead of the\n"
    "                       greedy one; at most 24 chunks (raise --chunk)\n"
    "  --kernel NAME        whose tiles and timing (sm80, sm90, auto; default: the profile's)\n"
    "  --head-dim D         64 or 128 (default 128)\n"
    "  --gpu PROFILE        a profile name in data/gpu (e.g. h200-sm90) or a file (default: the\n"
    "                       H200 profile of the kernel)\n"
    "  --link-gbs X         link bandwidth per pair of GPUs and direction, GB/s (default 90:\n"
    "                       cp-run's measured K/V rate on H200 NVLink, docs/DESIGN.md); an\n"
    "                       all-gather's pairs move side by side, at most --gpu-gbs through a GPU\n"
    "  --gpu-gbs X          all of an all-gather's transfers through one GPU and direction, GB/s\n"
    "                       (default 450)\n"
    "  --link-us X          latency per message, us (default 10)\n"
    "  --comm-sms F         the fraction of a GPU's SMs a ring group's NCCL kernels hold while\n"
    "                       in flight, slowing the step beside them (default: the model's,\n"
    "                       docs/DESIGN.md, \"The exchange model\"; 0: none)\n"
    "  --mem-gib X          memory per GPU the exchange may use, GiB (default 120)\n"
    "  --clock C            auto (default): the all-gather's launches at the burst clock (each\n"
    "                       follows the all-gather, the SMs idle: a launch apart, the profile's\n"
    "                       boost window from its start), the one-GPU time, the ranks' compute and\n"
    "                       the ring's steps at the sustained clock (launches back to back, the\n"
    "                       clock the power limit sets; as cp-run times them); burst or sustained:\n"
    "                       everything in that state (docs/DESIGN.md, \"The exchange model\")\n"
    "  --json               one JSON object on stdout instead of the tables\n"
    "  -o, --output FILE    also draw the plan (.png, .svg or .pdf): per sharding the tile grid\n"
    "                       coloured by owner and the ranks' work as bars\n"
    "  --size WxH           the figure's size in points (PDF/SVG) or pixels (PNG)\n"
    "  --long-run           run a plan above the timing model's work bound (2^28 items)\n";

typedef struct plan_opts {
  cp_cli_opts cp; /* first: cp_cli_mask_opt reads it */
  const char *out;
  int w, h; /* --size */
} plan_opts;

enum { O_SIZE = CP_O_NEXT };

/* cp-plan's own options: 1 taken, -1 a bad value (printed), 0 none of them. */
static int plan_opt(const char *c, void *v, int opt, const char *arg) {
  (void)c;
  plan_opts *o = v;
  int r = cp_cli_opt(cmd, &o->cp, opt, arg);
  if (r) return r;
  switch (opt) {
  case 'o': o->out = arg; return 1;
#ifdef FM_HAVE_VIZ
  case O_SIZE: return viz_cli_size(cmd, "--size", arg, &o->w, &o->h) ? -1 : 1;
#else
  case O_SIZE: cli_error(cmd, "--size: " NO_CAIRO); return -1;
#endif
  }
  return 0;
}

/* 0 parsed, 1 help printed, -1 bad usage (printed). */
static int parse_opts(int argc, char **argv, plan_opts *o) {
  static const struct option longopts[] = {
      CP_CLI_LONGOPTS,
      {"output", required_argument, 0, 'o'}, {"size", required_argument, 0, O_SIZE},
      {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
  memset(o, 0, sizeof *o);
  cp_cli_init(&o->cp);
  const cli_opts_def def = {.shortopts = ":o:", .longopts = longopts, .shared = cp_cli_mask_opt,
                            .own = plan_opt, .help = help};
  int r = cli_parse_opts(cmd, argc, argv, &def, o);
  return r ? r : cp_cli_check(cmd, &o->cp);
}

/* ------------------------------------------------------------ the tables */

/* What the mask is: the family, the file or the trace. */
static const char *mask_label(const plan_opts *o) {
  return o->cp.src.mask_file ? o->cp.src.mask_file : o->cp.src.trace ? o->cp.src.trace : o->cp.src.mask.family;
}

static void print_header(const plan_opts *o, const fm_colmask *m, const fm_gpu_profile *prof,
                         const fm_cp_summary *s) {
  char b[32];
  printf("mask      %s (%s), S = %d, batch %lld, heads %lld, head dim %d\n", mask_label(o),
         fm_colmask_causal(m) ? "causal" : "bidirectional", s->seqlen, (long long)s->batch,
         (long long)s->heads, s->head_dim);
  printf("kernel    %s: forward tile %d x %d, ", fm_kernel_get(s->kernel)->name, s->br[0], s->bc[0]);
  if (s->br[1]) printf("backward tile %d x %d", s->br[1], s->bc[1]);
  else printf("no backward");
  printf("; boundaries at multiples of %d rows\n", s->granule);
  printf("profile   %s: %s, measured %s; %s clock (--clock)\n", prof->name, prof->gpu, prof->date,
         fm_cp_clock_name(s->clock, s->allgather_clock));
  printf("one GPU   forward %.3f ms", s->one_gpu_ms[FM_CP_FWD]);
  if (!isnan(s->one_gpu_ms[FM_CP_BWD])) printf(" + backward %.3f ms", s->one_gpu_ms[FM_CP_BWD]);
  else printf(" (no backward fit in the profile)");
  printf(" = %.3f ms\n", s->one_gpu_total_ms);
  printf("exchange  links %g GB/s per pair of GPUs and direction (at most %g through one GPU), %g us a "
         "message; memory %s per GPU\n", s->link_gbs, s->gpu_gbs, s->link_us, cli_bytes(s->mem_budget, b, sizeof b));
}

static void print_rank(const fm_cp_rank *rk, int32_t r) {
  printf("%5d %9lld %5d", r, (long long)rk->rows, rk->segments);
  for (int k = 0; k < FM_CP_NPASSES; k++)
    printf(" %10lld %8lld %9lld", (long long)rk->tiles[k].minmax[FM_TILE_MASKED],
           (long long)rk->tiles[k].minmax[FM_TILE_PARTIAL], (long long)rk->tiles[k].minmax[FM_TILE_UNMASKED]);
  const double ms[3] = {rk->ms[FM_CP_FWD], rk->ms[FM_CP_BWD], rk->compute_ms};
  for (int k = 0; k < 3; k++) {
    if (isnan(ms[k])) printf(" %10s", "-"); /* no fit for the pass */
    else printf(" %10.3f", ms[k]);
  }
  printf(" %10.1f %5d\n", (double)rk->kv_recv_bytes / (1 << 20), rk->kv_sources);
}

static void print_sharding(const fm_cp_summary *s, const fm_cp_sharding_plan *sp) {
  char b1[32], b2[32], b3[32], b4[32];
  printf("\n%s, %d ranks, %d segments", fm_cp_sharding_name(sp->sharding), s->ranks, sp->nsegments);
  if (sp->sharding == FM_CP_MASK_AWARE)
    printf(" (%d chunks of %d rows, %s assignment)", s->chunks, s->chunk, sp->exact_solver ? "exact" : "greedy");
  printf("\n%5s %9s %5s %30s %30s %10s %10s %10s %10s %5s\n", "", "", "", "forward tiles (min/max)",
         "backward tiles (min/max)", "", "", "", "K/V in", "");
  printf("%5s %9s %5s %10s %8s %9s %10s %8s %9s %10s %10s %10s %10s %5s\n", "rank", "rows", "segs",
         "masked", "partial", "unmasked", "masked", "partial", "unmasked", "fwd ms", "bwd ms",
         "compute ms", "MiB", "from");
  for (int32_t r = 0; r < s->ranks; r++) print_rank(&sp->ranks[r], r);
  printf("imbalance (max/mean): time %.3f, visited tiles %.3f; step %.3f ms (compute), "
         "efficiency %.1f%%\n", sp->imbalance_time, sp->imbalance_work, sp->step_compute_ms,
         100 * sp->efficiency);
  printf("K/V received: %s in all, %s at most by one rank\n", cli_bytes(sp->kv_recv_bytes, b1, sizeof b1),
         cli_bytes(sp->kv_recv_bytes_max, b2, sizeof b2));
  const fm_cp_cost *c = &sp->cost[sp->exchange], *other = &sp->cost[!sp->exchange];
  printf("exchange: %s, step %.3f ms with communication, efficiency %.1f%%, %s per GPU%s; "
         "%s: %.3f ms, %s%s\n", fm_cp_exchange_name(sp->exchange), c->step_ms,
         100 * sp->efficiency_exchange, cli_bytes(c->mem_bytes, b3, sizeof b3),
         sp->fits[sp->exchange] ? "" : " (over the budget)", fm_cp_exchange_name(!sp->exchange),
         other->step_ms, cli_bytes(other->mem_bytes, b4, sizeof b4),
         sp->fits[!sp->exchange] ? "" : " (over the budget)");
}

static void print_json(const plan_opts *o, const fm_colmask *m, const fm_gpu_profile *prof,
                       const fm_cp_plan *plan) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_object(&j, "mask");
  fm_json_string(&j, "family", o->cp.src.mask.family);
  fm_json_string(&j, "mask_file", o->cp.src.mask_file);
  fm_json_string(&j, "trace", o->cp.src.trace);
  fm_json_bool(&j, "causal", fm_colmask_causal(m));
  fm_json_int(&j, "mask_sets", fm_colmask_nsets(m));
  fm_json_end(&j);
  fm_json_object(&j, "profile");
  fm_json_string(&j, "name", prof->name);
  fm_profile_ident_json(prof, &j);
  fm_json_end(&j);
  fm_cp_plan_json(plan, &j);
  cli_print_json(&j);
}

/* ------------------------------------------------------------ the figure */

#ifdef FM_HAVE_VIZ
/* The format of -o, checked before any work: 0, or -1 after printing. */
static int figure_check(const plan_opts *o) {
  fm_err err;
  viz_format fmt;
  if (o->out && viz_format_from_path(o->out, &fmt, &err) != FM_OK) {
    cli_error(cmd, "-o %s", err.msg);
    return -1;
  }
  return 0;
}

/* The registry's cp-plan figure of this plan into o->out (atomically). */
static int figure_write(const plan_opts *o, const fm_cp_plan *plan) {
  fm_err err;
  viz_format fmt;
  const viz_figure *fig = viz_figure_find("cp-plan");
  if (viz_format_from_path(o->out, &fmt, &err) != FM_OK || !fig) {
    cli_error(cmd, "-o %s", fig ? err.msg : "no cp-plan figure in the registry");
    return -1;
  }
  double w = o->w ? o->w : fmt == VIZ_FMT_PNG ? fig->width : 72 * fig->width_in;
  double h = o->h ? o->h : fmt == VIZ_FMT_PNG ? fig->height : 72 * fig->height_in;
  const fm_cp_summary *s = fm_cp_plan_summary(plan);
  char title[400], tok[32];
  snprintf(tok, sizeof tok, s->seqlen % (1 << 20) == 0 ? "%dM" : s->seqlen % 1024 == 0 ? "%dK" : "%d",
           s->seqlen % (1 << 20) == 0 ? s->seqlen >> 20 : s->seqlen % 1024 == 0 ? s->seqlen >> 10 : s->seqlen);
  snprintf(title, sizeof title, "Context parallelism: %.200s on %d ranks  \xC2\xB7  S = %s",
           mask_label(o), s->ranks, tok);
  viz_figure_opts fo = {.seqlen = s->seqlen, .text = 1, .cp_plan = plan, .title = title};
  if (viz_write_figure(o->out, fmt, w, h, fmt == VIZ_FMT_PNG ? 72 : 300, fig->draw, &fo, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  return 0;
}
#else
static int figure_check(const plan_opts *o) {
  if (o->out) cli_error(cmd, "-o %s: " NO_CAIRO, o->out);
  return o->out ? -1 : 0;
}
static int figure_write(const plan_opts *o, const fm_cp_plan *plan) {
  (void)o;
  (void)plan;
  return 0;
}
#endif

/* ------------------------------------------------------------ the command */

int cmd_cp_plan(int argc, char **argv) {
  plan_opts o;
  int r = parse_opts(argc, argv, &o);
  if (r) return r > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  if (figure_check(&o)) return FM_EXIT_USAGE;
  if ((o.w || o.h) && !o.out) {
    cli_error(cmd, "--size goes with -o FILE (the figure)");
    return FM_EXIT_USAGE;
  }
  fm_gpu_profile prof;
  char note[512];
  if (timing_profile_load(cmd, o.cp.gpu, o.cp.kernel, (int32_t)o.cp.head_dim, &prof, note, sizeof note))
    return FM_EXIT_USAGE;
  fm_colmask *m = timing_mask_build(cmd, &o.cp.src);
  if (!m) return FM_EXIT_USAGE;
  fm_cp_plan *plan = cp_cli_work_check(cmd, &o.cp, &prof, m) ? NULL : cp_cli_plan(cmd, &o.cp, m, &prof);
  int rc = plan && (!o.out || !figure_write(&o, plan)) ? FM_EXIT_OK : FM_EXIT_USAGE;
  if (rc == FM_EXIT_OK) {
    if (note[0]) fprintf(stderr, "%s\n", note);
    if (o.cp.json) {
      print_json(&o, m, &prof, plan);
    } else {
      const fm_cp_summary *s = fm_cp_plan_summary(plan);
      print_header(&o, m, &prof, s);
      for (int k = 0; k < FM_CP_NSHARDINGS; k++)
        if (fm_cp_plan_sharding(plan, (fm_cp_sharding)k))
          print_sharding(s, fm_cp_plan_sharding(plan, (fm_cp_sharding)k));
      for (int k = 0; k < FM_CP_NSHARDINGS; k++)
        if (fm_cp_plan_skipped(plan, (fm_cp_sharding)k))
          printf("\n%s: not planned: %s\n", fm_cp_sharding_name((fm_cp_sharding)k),
                 fm_cp_plan_skipped(plan, (fm_cp_sharding)k));
      const fm_cp_sharding_plan *b = fm_cp_plan_sharding(plan, fm_cp_plan_best(plan));
      printf("\nbest      %s, %s: step %.3f ms predicted, efficiency %.1f%% (`fmsim cp-run --sharding plan` "
             "runs it)\n", fm_cp_sharding_name(b->sharding), fm_cp_exchange_name(b->exchange), b->step_ms,
             100 * b->efficiency_exchange);
      if (o.out) printf("\nwrote %s\n", o.out);
    }
  }
  fm_cp_plan_destroy(plan);
  fm_colmask_destroy(m);
  return rc;
}
