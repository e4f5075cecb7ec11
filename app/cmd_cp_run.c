/* fmsim cp-run: execute a context-parallel plan (issue 24): P ranks, the
 * plan's sharding, an all-gather or a ring exchange, forward and backward.
 * --cpu runs every rank in this process (the fake of the exchange, checked
 * against the fp64 reference: core/fm_cp_run.h); otherwise one process per
 * GPU over NCCL (kernels/fm_cp_gpu.h). This file parses, prints and writes
 * the timeline. */
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
#include "fm_cp_run.h"
#include "fm_fileio.h"
#include "fm_json.h"
#include "fm_reference.h"
#include "fm_timing.h"
#include "timing_cli.h"
#ifdef FM_HAVE_NCCL
#include "fm_cp_gpu.h"
#endif

static const char *cmd = "cp-run";

#define NO_NCCL "built without NCCL, so it runs only --cpu (configure with CUDA and -DFM_NCCL_ROOT=DIR " \
                "or the nvidia-nccl-cu13 wheel installed, and rebuild)"
/* The fake's work bound: B x H x S^2 x D multiply-adds per pass in fp64. */
#define CPU_MAX_WORK ((double)(1ull << 36))

static const char *help =
    "usage: fmsim cp-run --family NAME [mask options] --ranks P [options]\n"
    "       fmsim cp-run --mask FILE [--causal|--bidir] --ranks P [options]\n\n"
    "Runs context parallelism: P ranks split the query rows of one sequence as fmsim cp-plan\n"
    "plans it (the sharding's segments; K/V stay with their owner), each computes its rows\n"
    "against every key it needs, forward and backward. Two exchanges: allgather (one group of\n"
    "point-to-point messages brings every needed K/V segment, one launch; dK/dV partials go\n"
    "back to their owners) and ring (one step per source rank, the next source's K/V arriving\n"
    "while this one computes, partial outputs merged by their log-sum-exp). A segment a rank\n"
    "does not need is never sent (every tile of it is skipped).\n\n"
    "On GPUs (built with CUDA and NCCL): one process per GPU, rank r on device r, timed\n"
    "(warm-up, then --iters passes, medians), the plan's predicted compute beside the measured.\n"
    "With --cpu: every rank in this process, the exchange as copies between rank buffers,\n"
    "each launch by the fp64 CPU reference, checked against the whole problem's (small S).\n\n"
    CLI_MASK_SOURCE_HELP CLI_MASK_REST_HELP TIMING_MASK_HELP
    "  --ranks P            ranks (GPUs: devices 0..P-1; --cpu: up to 1024)\n"
    "  --sharding NAME      contiguous, zigzag, mask-aware (the default) or plan (every sharding\n"
    "                       planned, the one cp-plan calls best run)\n"
    "  --exchange NAME      allgather, ring or plan (the plan's choice; default plan)\n"
    "  --chunk N            mask-aware chunk rows (as cp-plan)\n"
    "  --exact              mask-aware: the exact assignment (as cp-plan)\n"
    "  --kernel NAME        sm90 or auto (default auto: the device's)\n"
    "  --head-dim D         64 or 128 (default 128)\n"
    "  --pass fwd|both      the forward alone or forward and backward (default both)\n"
    "  --cpu                run on the CPU (the fake of the exchange); always checks\n"
    "  --check              GPU: also run the whole problem on one GPU and compare every rank's\n"
    "                       O, LSE, dQ, dK, dV by the kernels' tolerance (exit 1 on FAIL)\n"
    "  --baseline           GPU: time the whole problem on device 0 alone (scaling efficiency)\n"
    "  --iters N            GPU: timed passes (default 20)\n"
    "  --warmup-ms MS       GPU: warm-up passes for at least MS ms (default 500)\n"
    "  --gpu PROFILE        the timing model's profile for the predicted times (as cp-plan)\n"
    "  --timeline FILE      GPU: a Chrome trace (JSON) of one pass: a process per rank, a thread\n"
    "                       per stream (compute, comm), kernels and message groups with bytes\n"
    "  --json               one JSON object (format fmsim-cp-run) instead of the tables\n"
    "  --link-gbs X, --link-us X, --gpu-gbs X, --comm-sms F, --mem-gib X, --clock C, --long-run   as cp-plan\n";

typedef struct run_opts {
  cp_cli_opts cp; /* first: cp_cli_mask_opt reads it */
  int exchange;   /* fm_cp_exchange, -1: the plan's */
  int both, cpu, check, baseline;
  int64_t iters;
  double warmup_ms;
  const char *timeline;
} run_opts;

enum { O_EXCHANGE = CP_O_NEXT, O_PASS, O_CPU, O_CHECK, O_BASELINE, O_ITERS, O_WARMUP, O_TIMELINE };

/* cp-run's own options: 1 taken, -1 a bad value (printed), 0 none of them. */
static int run_opt(const char *c, void *v, int opt, const char *arg) {
  (void)c;
  run_opts *o = v;
  int r = cp_cli_opt(cmd, &o->cp, opt, arg);
  if (r) return r;
  char *end;
  switch (opt) {
  case O_EXCHANGE:
    for (int x = 0; x < FM_CP_NEXCHANGES; x++)
      if (!strcmp(arg, fm_cp_exchange_name((fm_cp_exchange)x))) return o->exchange = x, 1;
    if (!strcmp(arg, "plan")) return o->exchange = -1, 1;
    cli_error(cmd, "--exchange '%s': expected allgather, ring or plan", arg);
    return -1;
  case O_PASS:
    if (strcmp(arg, "fwd") && strcmp(arg, "both")) {
      cli_error(cmd, "--pass '%s': expected fwd or both", arg);
      return -1;
    }
    o->both = !strcmp(arg, "both");
    return 1;
  case O_CPU: o->cpu = 1; return 1;
  case O_CHECK: o->check = 1; return 1;
  case O_BASELINE: o->baseline = 1; return 1;
  case O_ITERS: return cli_int(cmd, "--iters", arg, 1, 100000, &o->iters) ? -1 : 1;
  case O_TIMELINE: o->timeline = arg; return 1;
  case O_WARMUP:
    o->warmup_ms = strtod(arg, &end);
    if (end == arg || *end || !(o->warmup_ms >= 0) || o->warmup_ms > 600000) {
      cli_error(cmd, "--warmup-ms '%s': expected a number in [0, 600000]", arg);
      return -1;
    }
    return 1;
  }
  return 0;
}

/* What --cpu does not take, and the sharding: one. 0, or -1 after printing. */
static int combo_check(const run_opts *o) {
  const char *gpu_only = o->baseline ? "--baseline" : o->timeline ? "--timeline" : o->iters ? "--iters"
                         : o->warmup_ms >= 0 ? "--warmup-ms" : NULL;
  if (o->cpu && gpu_only) {
    cli_error(cmd, "%s goes with the GPU run (--cpu runs the fake of the exchange, untimed)", gpu_only);
    return -1;
  }
  unsigned s = o->cp.shardings;
  if (s & (s - 1)) {
    cli_error(cmd, "--sharding: cp-run runs one sharding (contiguous, zigzag or mask-aware)");
    return -1;
  }
  if (o->timeline) {
    fm_err err;
    if (fm_output_check(o->timeline, 0, &err) != FM_OK) {
      cli_error(cmd, "--timeline %s", err.msg);
      return -1;
    }
  }
  return 0;
}

/* 0 parsed, 1 help printed, -1 bad usage (printed). */
static int parse_opts(int argc, char **argv, run_opts *o) {
  static const struct option longopts[] = {
      CP_CLI_LONGOPTS,
      {"exchange", required_argument, 0, O_EXCHANGE}, {"pass", required_argument, 0, O_PASS},
      {"cpu", no_argument, 0, O_CPU},                 {"check", no_argument, 0, O_CHECK},
      {"baseline", no_argument, 0, O_BASELINE},       {"iters", required_argument, 0, O_ITERS},
      {"warmup-ms", required_argument, 0, O_WARMUP},  {"timeline", required_argument, 0, O_TIMELINE},
      {"help", no_argument, 0, 'h'},                  {0, 0, 0, 0}};
  memset(o, 0, sizeof *o);
  cp_cli_init(&o->cp);
  o->exchange = -1;
  o->both = 1;
  o->warmup_ms = -1;
  const cli_opts_def def = {.shortopts = ":", .longopts = longopts, .shared = cp_cli_mask_opt,
                            .own = run_opt, .help = help};
  int r = cli_parse_opts(cmd, argc, argv, &def, o);
  if (r) return r;
  if (cp_cli_check(cmd, &o->cp) || combo_check(o)) return -1;
  if (!o->cp.shardings && !o->cp.best) o->cp.shardings = 1u << FM_CP_MASK_AWARE;
  if (!o->iters) o->iters = 20;
  if (o->warmup_ms < 0) o->warmup_ms = 500;
  if (o->cpu && o->cp.ranks > FM_CP_RUN_MAX_RANKS) {
    cli_error(cmd, "--ranks %lld: the CPU run schedules at most %d ranks", (long long)o->cp.ranks,
              FM_CP_RUN_MAX_RANKS);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ what ran */

typedef struct run_ctx {
  const run_opts *o;
  const fm_colmask *m;
  const fm_gpu_profile *prof;
  const fm_cp_summary *sum;
  const fm_cp_sharding_plan *sp;
  const fm_cp_schedule *sc;
  fm_cp_exchange x;
} run_ctx;

static const char *mask_label(const run_opts *o) {
  return o->cp.src.mask_file ? o->cp.src.mask_file : o->cp.src.trace ? o->cp.src.trace : o->cp.src.mask.family;
}

static void print_header(const run_ctx *c, const char *executor) {
  const fm_cp_summary *s = c->sum;
  printf("mask      %s (%s), S = %d, batch %lld, heads %lld, head dim %d\n", mask_label(c->o),
         fm_colmask_causal(c->m) ? "causal" : "bidirectional", s->seqlen, (long long)s->batch,
         (long long)s->heads, s->head_dim);
  printf("plan      %s, %d ranks, %d segments, boundaries at multiples of %d rows; exchange %s "
         "(the plan's: %s)\n", fm_cp_sharding_name(c->sp->sharding), s->ranks, c->sp->nsegments,
         s->granule, fm_cp_exchange_name(c->x), fm_cp_exchange_name(c->sp->exchange));
  printf("executor  %s\n", executor);
}

/* The rank's sources (ranks it receives from) and the rows it sends. */
static void rank_links(const fm_cp_rank_schedule *rs, int32_t P, int32_t *sources, int64_t *sent) {
  *sources = 0;
  *sent = 0;
  for (int32_t q = 0; q < P; q++) {
    *sources += rs->in[q].n > 0;
    *sent += rs->out[q].rows;
  }
}

static void json_mask(const run_ctx *c, fm_json *j) {
  fm_json_object(j, "mask");
  fm_json_string(j, "family", c->o->cp.src.mask.family);
  fm_json_string(j, "mask_file", c->o->cp.src.mask_file);
  fm_json_string(j, "trace", c->o->cp.src.trace);
  fm_json_bool(j, "causal", fm_colmask_causal(c->m));
  fm_json_int(j, "mask_sets", fm_colmask_nsets(c->m));
  fm_json_end(j);
  const fm_cp_summary *s = c->sum;
  fm_json_int(j, "seqlen", s->seqlen);
  fm_json_int(j, "ranks", s->ranks);
  fm_json_int(j, "batch", s->batch);
  fm_json_int(j, "heads", s->heads);
  fm_json_int(j, "head_dim", s->head_dim);
  fm_json_int(j, "granule", s->granule);
  fm_json_string(j, "sharding", fm_cp_sharding_name(c->sp->sharding));
  fm_json_int(j, "segments", c->sp->nsegments);
  fm_json_string(j, "exchange", fm_cp_exchange_name(c->x));
  fm_json_string(j, "exchange_plan", fm_cp_exchange_name(c->sp->exchange));
  fm_json_string(j, "passes", c->o->both ? "both" : "fwd");
}

/* One rank's schedule and plan as members of the open object. */
static void json_rank_plan(const run_ctx *c, int32_t r, fm_json *j) {
  const fm_cp_rank_schedule *rs = &c->sc->rank[r];
  const fm_cp_rank *rk = &c->sp->ranks[r];
  int32_t sources;
  int64_t sent;
  rank_links(rs, c->sc->ranks, &sources, &sent);
  fm_json_int(j, "rank", r);
  fm_json_int(j, "rows", rs->rows);
  fm_json_int(j, "segments", rs->nown);
  fm_json_int(j, "steps", c->x == FM_CP_RING ? rs->nsteps : 1);
  fm_json_int(j, "kv_recv_rows", rs->recv_rows);
  fm_json_int(j, "kv_send_rows", sent);
  fm_json_int(j, "kv_sources", sources);
  fm_json_object(j, "predicted");
  fm_json_double(j, "fwd_ms", rk->ms[FM_CP_FWD]);
  fm_json_double(j, "bwd_ms", c->o->both ? rk->ms[FM_CP_BWD] : NAN);
  fm_json_double(j, "compute_ms", c->o->both ? rk->compute_ms : rk->ms[FM_CP_FWD]);
  fm_json_end(j);
}

/* ------------------------------------------------------------ the CPU run */

static void print_cmp(const fm_cp_fake_result *r, int both) {
  printf("check     every rank's rows against the whole problem's fp64 reference (atol %g, rtol %g):\n",
         FM_CP_FAKE_ATOL, FM_CP_FAKE_RTOL);
  for (int t = 0; t < (both ? 5 : 2); t++)
    printf("  %-4s max abs %.3g, max rel %.3g, %lld off: %s\n", fm_ref_quantity_name((fm_ref_quantity)t),
           r->cmp[t].max_abs, r->cmp[t].max_rel, (long long)r->cmp[t].bad, r->cmp[t].bad ? "FAIL" : "PASS");
  printf("%s\n", r->ok ? "PASS" : "FAIL");
}

static void cpu_json(const run_ctx *c, const fm_cp_fake_result *r) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "format", "fmsim-cp-run");
  fm_json_int(&j, "version", 1);
  fm_json_string(&j, "executor", "cpu");
  json_mask(c, &j);
  fm_json_null(&j, "kernel");
  fm_json_array(&j, "rank_results");
  for (int32_t k = 0; k < c->sc->ranks; k++) {
    fm_json_object(&j, NULL);
    json_rank_plan(c, k, &j);
    fm_json_null(&j, "measured");
    fm_json_end(&j);
  }
  fm_json_end(&j);
  fm_json_object(&j, "check");
  fm_json_string(&j, "reference", "cpu-fp64");
  fm_json_double(&j, "atol", FM_CP_FAKE_ATOL);
  fm_json_double(&j, "rtol", FM_CP_FAKE_RTOL);
  for (int t = 0; t < (c->o->both ? 5 : 2); t++) {
    fm_json_object(&j, fm_ref_quantity_name((fm_ref_quantity)t));
    fm_json_double(&j, "max_abs", r->cmp[t].max_abs);
    fm_json_double(&j, "max_rel", r->cmp[t].max_rel);
    fm_json_int(&j, "bad", r->cmp[t].bad);
    fm_json_bool(&j, "pass", r->cmp[t].bad == 0);
    fm_json_end(&j);
  }
  fm_json_bool(&j, "pass", r->ok);
  fm_json_end(&j);
  fm_json_null(&j, "step_ms");
  fm_json_null(&j, "baseline");
  cli_print_json(&j);
}

static int run_cpu(const run_ctx *c) {
  const fm_cp_summary *s = c->sum;
  double work = (double)s->batch * (double)s->heads * (double)s->seqlen * (double)s->seqlen * s->head_dim;
  if (work > CPU_MAX_WORK) {
    cli_error(cmd, "--cpu: batch x heads x S^2 x head dim = %.3g, above the CPU run's bound of 2^36 "
              "(it is the fp64 reference: use a smaller S, batch or heads)", work);
    return FM_EXIT_USAGE;
  }
  fm_cp_fake_opts fo = {.batch = (int32_t)s->batch, .heads = (int32_t)s->heads, .head_dim = s->head_dim,
                        .backward = c->o->both};
  fm_cp_fake_result r;
  fm_err err;
  if (fm_cp_fake_run(c->m, c->sp, c->sc, &fo, &r, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_FAIL;
  }
  if (c->o->cp.json) {
    cpu_json(c, &r);
    return r.ok ? FM_EXIT_OK : FM_EXIT_FAIL;
  }
  print_header(c, "CPU: every rank in this process, the exchange as copies, each launch by the fp64 "
               "reference");
  printf("%5s %9s %5s %6s %12s %5s %12s\n", "rank", "rows", "segs", "steps", "K/V in rows", "from",
         "K/V out rows");
  for (int32_t k = 0; k < c->sc->ranks; k++) {
    const fm_cp_rank_schedule *rs = &c->sc->rank[k];
    int32_t sources;
    int64_t sent;
    rank_links(rs, c->sc->ranks, &sources, &sent);
    printf("%5d %9d %5d %6d %12d %5d %12lld\n", k, rs->rows, rs->nown, c->x == FM_CP_RING ? rs->nsteps : 1,
           rs->recv_rows, sources, (long long)sent);
  }
  printf("moved     %lld K/V rows%s\n", (long long)r.sent_rows[0],
         c->o->both ? " each pass, as many dK/dV partial rows back" : "");
  print_cmp(&r, c->o->both);
  return r.ok ? FM_EXIT_OK : FM_EXIT_FAIL;
}

/* ------------------------------------------------------------ the GPU run */

#ifdef FM_HAVE_NCCL
/* The Chrome trace of the recorded pass: a process per rank, a thread per
 * stream; times in microseconds from the pass's start (the backward after
 * the forward's end). Written to a temporary file renamed into place. */
static int write_timeline(const run_ctx *c, const fm_cp_gpu_result *g) {
  fm_json j;
  fm_json_init(&j, 0);
  fm_json_object(&j, NULL);
  fm_json_array(&j, "traceEvents");
  for (int32_t r = 0; r < g->ranks; r++) {
    const fm_cp_gpu_rank *rk = &g->rank[r];
    const fm_cp_rank *pr = &c->sp->ranks[r];
    char name[160];
    snprintf(name, sizeof name, "rank %d: %s", r, rk->device);
    for (int t = -1; t < 2; t++) { /* the process's name, then its two threads' */
      fm_json_object(&j, NULL);
      fm_json_string(&j, "name", t < 0 ? "process_name" : "thread_name");
      fm_json_string(&j, "ph", "M");
      fm_json_int(&j, "pid", r);
      fm_json_int(&j, "tid", t < 0 ? 0 : t);
      fm_json_object(&j, "args");
      fm_json_string(&j, "name", t < 0 ? name : t ? "comm" : "compute");
      if (t < 0) {
        for (int k = 0; k < FM_CP_NPASSES; k++) {
          fm_json_object(&j, k ? "tiles_bwd" : "tiles_fwd");
          fm_json_int(&j, "masked", pr->tiles[k].minmax[FM_TILE_MASKED]);
          fm_json_int(&j, "partial", pr->tiles[k].minmax[FM_TILE_PARTIAL]);
          fm_json_int(&j, "unmasked", pr->tiles[k].minmax[FM_TILE_UNMASKED]);
          fm_json_end(&j);
        }
        fm_json_int(&j, "rows", pr->rows);
      }
      fm_json_end(&j);
      fm_json_end(&j);
    }
    double fwd_end = rk->pass[FM_CP_FWD].wall_ms;
    for (int32_t e = 0; e < rk->nevents; e++) {
      const fm_cp_gpu_event *ev = &rk->events[e];
      double base = ev->pass == FM_CP_BWD ? fwd_end : 0;
      fm_json_object(&j, NULL);
      fm_json_string(&j, "name", ev->name);
      fm_json_string(&j, "ph", "X");
      fm_json_int(&j, "pid", r);
      fm_json_int(&j, "tid", ev->stream);
      fm_json_double(&j, "ts", 1e3 * (base + ev->start_ms));
      fm_json_double(&j, "dur", 1e3 * (ev->end_ms - ev->start_ms));
      fm_json_object(&j, "args");
      fm_json_int(&j, "bytes_sent", ev->bytes_sent);
      fm_json_int(&j, "bytes_recv", ev->bytes_recv);
      fm_json_int(&j, "source", ev->source);
      fm_json_end(&j);
      fm_json_end(&j);
    }
  }
  fm_json_end(&j);
  fm_json_end(&j);
  fm_err err;
  fm_status st = j.oom ? fm_fail(&err, FM_ENOMEM, "cannot build the timeline")
                       : fm_write_file_atomic(c->o->timeline, j.buf, j.len, &err);
  fm_json_free(&j);
  if (st != FM_OK) cli_error(cmd, "--timeline: %s", err.msg);
  return st == FM_OK ? 0 : -1;
}

static void gpu_json(const run_ctx *c, const fm_cp_gpu_result *g) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "format", "fmsim-cp-run");
  fm_json_int(&j, "version", 1);
  fm_json_string(&j, "executor", "gpu");
  json_mask(c, &j);
  fm_json_string(&j, "kernel", fm_kernel_get(g->kernel)->name);
  fm_json_string(&j, "profile", c->prof->name);
  fm_json_int(&j, "iters", c->o->iters);
  fm_json_array(&j, "rank_results");
  for (int32_t k = 0; k < g->ranks; k++) {
    const fm_cp_gpu_rank *rk = &g->rank[k];
    fm_json_object(&j, NULL);
    json_rank_plan(c, k, &j);
    fm_json_object(&j, "measured");
    fm_json_string(&j, "device", rk->device);
    for (int p = 0; p < (c->o->both ? 2 : 1); p++) {
      fm_json_object(&j, p ? "bwd" : "fwd");
      fm_json_double(&j, "wall_ms", rk->pass[p].wall_ms);
      fm_json_double(&j, "compute_ms", rk->pass[p].compute_ms);
      fm_json_double(&j, "comm_ms", rk->pass[p].comm_ms);
      fm_json_int(&j, "bytes_sent", rk->pass[p].bytes_sent);
      fm_json_int(&j, "bytes_recv", rk->pass[p].bytes_recv);
      fm_json_int(&j, "launches", rk->pass[p].launches);
      fm_json_end(&j);
    }
    fm_json_end(&j);
    if (g->checked) {
      fm_json_object(&j, "check");
      for (int t = 0; t < (c->o->both ? 5 : 2); t++) {
        fm_json_object(&j, fm_ref_quantity_name((fm_ref_quantity)t));
        fm_json_double(&j, "max_abs", rk->check_abs[t]);
        fm_json_double(&j, "max_rel", rk->check_rel[t]);
        fm_json_int(&j, "bad", rk->check_bad[t]);
        fm_json_end(&j);
      }
      fm_json_end(&j);
    }
    fm_json_end(&j);
  }
  fm_json_end(&j);
  if (g->checked) {
    fm_json_object(&j, "check");
    fm_json_string(&j, "reference", "one-gpu");
    fm_json_bool(&j, "pass", g->check_ok);
    fm_json_end(&j);
  } else {
    fm_json_null(&j, "check");
  }
  double step = g->step_ms[0] + (c->o->both ? g->step_ms[1] : 0);
  fm_json_object(&j, "step_ms");
  fm_json_double(&j, "fwd", g->step_ms[0]);
  fm_json_double(&j, "bwd", c->o->both ? g->step_ms[1] : NAN);
  fm_json_double(&j, "total", step);
  fm_json_end(&j);
  if (c->o->baseline) {
    double one = g->baseline_ms[0] + (c->o->both ? g->baseline_ms[1] : 0);
    fm_json_object(&j, "baseline");
    fm_json_double(&j, "fwd_ms", g->baseline_ms[0]);
    fm_json_double(&j, "bwd_ms", c->o->both ? g->baseline_ms[1] : NAN);
    fm_json_double(&j, "total_ms", one);
    fm_json_double(&j, "efficiency", one / (g->ranks * step));
    fm_json_end(&j);
  } else {
    fm_json_null(&j, "baseline");
  }
  fm_json_string(&j, "timeline", c->o->timeline);
  cli_print_json(&j);
}

static void gpu_print(const run_ctx *c, const fm_cp_gpu_result *g) {
  char exe[200];
  snprintf(exe, sizeof exe, "GPU: %d processes over NCCL, kernel %s, %lld timed passes (medians)", g->ranks,
           fm_kernel_get(g->kernel)->name, (long long)c->o->iters);
  print_header(c, exe);
  printf("%5s %-28s %8s %9s %9s %9s %8s %9s %9s %9s %8s %10s %10s\n", "rank", "device", "rows", "fwd ms",
         "compute", "comm", "pred", "bwd ms", "compute", "comm", "pred", "sent MiB", "recv MiB");
  for (int32_t k = 0; k < g->ranks; k++) {
    const fm_cp_gpu_rank *rk = &g->rank[k];
    const fm_cp_rank *pr = &c->sp->ranks[k];
    printf("%5d %-28.28s %8lld", k, rk->device, (long long)pr->rows);
    for (int p = 0; p < 2; p++) {
      if (p && !c->o->both) {
        printf(" %9s %9s %9s %8s", "-", "-", "-", "-");
        continue;
      }
      printf(" %9.3f %9.3f %9.3f %8.3f", rk->pass[p].wall_ms, rk->pass[p].compute_ms, rk->pass[p].comm_ms,
             pr->ms[p]);
    }
    int64_t s = rk->pass[0].bytes_sent + rk->pass[1].bytes_sent, r = rk->pass[0].bytes_recv + rk->pass[1].bytes_recv;
    printf(" %10.1f %10.1f\n", (double)s / (1 << 20), (double)r / (1 << 20));
  }
  printf("predicted compute / measured compute per rank (profile %s, %s clock, %s):", c->prof->name,
         fm_cp_clock_name(c->sum->clock, c->sum->allgather_clock), fm_cp_exchange_name(c->x));
  for (int32_t k = 0; k < g->ranks; k++) {
    const fm_cp_gpu_rank *rk = &g->rank[k];
    double meas = rk->pass[0].compute_ms + (c->o->both ? rk->pass[1].compute_ms : 0);
    const fm_cp_cost *pc = &c->sp->ranks[k].cost[c->x]; /* the exchange's compute stream */
    double pred = pc->compute_ms[FM_CP_FWD] + (c->o->both ? pc->compute_ms[FM_CP_BWD] : 0);
    printf(" %.3f", pred / meas);
  }
  double step = g->step_ms[0] + (c->o->both ? g->step_ms[1] : 0);
  printf("\nstep      %.3f ms (forward %.3f", step, g->step_ms[0]);
  if (c->o->both) printf(", backward %.3f", g->step_ms[1]);
  printf("): the slowest rank's wall time per pass\n");
  if (c->o->baseline) {
    double one = g->baseline_ms[0] + (c->o->both ? g->baseline_ms[1] : 0);
    printf("one GPU   %.3f ms (device 0, the same kernel); scaling efficiency %.1f%%\n", one,
           100 * one / (g->ranks * step));
  }
  if (g->checked) {
    printf("check     every rank's rows against the whole problem on one GPU (the kernels' tolerance):\n");
    for (int t = 0; t < (c->o->both ? 5 : 2); t++) {
      double a = 0, rel = 0;
      int64_t bad = 0;
      for (int32_t k = 0; k < g->ranks; k++) {
        a = fmax(a, g->rank[k].check_abs[t]);
        rel = fmax(rel, g->rank[k].check_rel[t]);
        bad += g->rank[k].check_bad[t];
      }
      fm_ref_tol tol = fm_ref_tolerance((fm_ref_quantity)t);
      printf("  %-4s max abs %.3g, max rel %.3g, %lld off (atol %g, rtol %g): %s\n",
             fm_ref_quantity_name((fm_ref_quantity)t), a, rel, (long long)bad, tol.atol, tol.rtol,
             bad ? "FAIL" : "PASS");
    }
    printf("%s\n", g->check_ok ? "PASS" : "FAIL");
  }
  if (c->o->timeline) printf("wrote %s\n", c->o->timeline);
}

static int run_gpu(const run_ctx *c) {
  const fm_cp_summary *s = c->sum;
  fm_cp_gpu_opts go = {.mask = c->m, .plan = c->sp, .sched = c->sc, .batch = (int32_t)s->batch,
                       .heads = (int32_t)s->heads, .head_dim = s->head_dim, .backward = c->o->both,
                       .kernel = c->o->cp.kernel, .check = c->o->check, .baseline = c->o->baseline,
                       .timeline = c->o->timeline != NULL, .iters = (int32_t)c->o->iters,
                       .warmup_ms = c->o->warmup_ms};
  fm_cp_gpu_result g;
  fm_err err;
  fm_status st = fm_cp_gpu_run(&go, &g, &err);
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    fm_cp_gpu_result_free(&g);
    return st == FM_EUNSUPPORTED ? FM_EXIT_USAGE : FM_EXIT_FAIL;
  }
  int rc = c->o->timeline && write_timeline(c, &g) ? FM_EXIT_FAIL : FM_EXIT_OK;
  if (rc == FM_EXIT_OK) {
    if (c->o->cp.json) gpu_json(c, &g);
    else gpu_print(c, &g);
    if (g.checked && !g.check_ok) rc = FM_EXIT_FAIL;
  }
  fm_cp_gpu_result_free(&g);
  return rc;
}
#else
static int run_gpu(const run_ctx *c) {
  (void)c;
  cli_error(cmd, NO_NCCL);
  return FM_EXIT_USAGE;
}
#endif

/* ------------------------------------------------------------ the command */

int cmd_cp_run(int argc, char **argv) {
  run_opts o;
  int r = parse_opts(argc, argv, &o);
  if (r) return r > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
#ifndef FM_HAVE_NCCL
  if (!o.cpu) {
    cli_error(cmd, NO_NCCL);
    return FM_EXIT_USAGE;
  }
#endif
  fm_gpu_profile prof;
  char note[512];
  if (timing_profile_load(cmd, o.cp.gpu, o.cp.kernel, (int32_t)o.cp.head_dim, &prof, note, sizeof note))
    return FM_EXIT_USAGE;
  fm_colmask *m = timing_mask_build(cmd, &o.cp.src);
  if (!m) return FM_EXIT_USAGE;
  fm_cp_plan *plan = cp_cli_work_check(cmd, &o.cp, &prof, m) ? NULL : cp_cli_plan(cmd, &o.cp, m, &prof);
  fm_cp_schedule *sc = NULL;
  int rc = FM_EXIT_USAGE;
  if (plan) {
    fm_cp_sharding s = FM_CP_CONTIGUOUS;
    if (o.cp.best) s = fm_cp_plan_best(plan);
    else
      while (!(o.cp.shardings & (1u << s))) s++;
    run_ctx c = {.o = &o, .m = m, .prof = &prof, .sum = fm_cp_plan_summary(plan),
                 .sp = fm_cp_plan_sharding(plan, s)};
    c.x = o.exchange < 0 ? c.sp->exchange : (fm_cp_exchange)o.exchange;
    fm_err err;
    if (fm_cp_schedule_create(c.sp, c.sum->seqlen, c.sum->ranks, c.x, &sc, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
    } else {
      c.sc = sc;
      rc = o.cpu ? run_cpu(&c) : run_gpu(&c);
      if (rc == FM_EXIT_OK && note[0]) fprintf(stderr, "%s\n", note);
    }
  }
  fm_cp_schedule_destroy(sc);
  fm_cp_plan_destroy(plan);
  fm_colmask_destroy(m);
  return rc;
}
