/* fmsim run: one command, two forms, one pipeline (the scenario runner,
 * runner.h).
 *
 *   fmsim run --family NAME [options] --out DIR   one mask: a one-case scenario
 *       whose trace goes straight into DIR (a run trace, fm_run_trace.h): on a
 *       GPU (a build with the CUDA kernels and a device) random bf16 Q/K/V, the
 *       kernel timed after warm-up with the L2 flushed before every launch
 *       (CUPTI activity records, CUDA events as fallback), one launch counted
 *       by the CUPTI Range Profiler (HBM bytes, L2 sectors), with --instrument
 *       the instrumented build's per-tile classes and cycles; with --pass bwd
 *       or both the backward too, at its own tile (its files *_bwd.npy beside
 *       the forward's). Without a GPU the same trace comes from the CPU
 *       simulation: tile classes and the cost model's bytes, no timings
 *       (summary.json "device": "cpu-simulation").
 *   fmsim run SCENARIO.yaml [--out DIR] [--only PATTERN]   every case of a
 *       scenario file, one trace folder per case, an index and a report.
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fm_forms.h"
#include "fm_json.h"
#include "fm_kernels.h"
#include "fm_scenario.h"
#include "gpu_step.h"
#include "runner.h"

static const char *cmd = "run";

static const char *help_head =
    "usage: fmsim run --family NAME [options] --out DIR\n"
    "       fmsim run SCENARIO.yaml [--out DIR] [--only PATTERN] [--kernel LIST] [--pass P] [--cpu]\n"
    "                               [--mask-method M] [--gpu PROFILE]\n\n"
    "One mask (--family): runs the FlashMask forward kernel (bf16, fp32 accumulation) on a\n"
    "family mask and writes a trace into DIR: time (median after warm-up, L2 flushed),\n"
    "TFLOP/s (the paper's count 4*B*H*S*S*D*(1-rho), rho at the kernel's tile size), bytes\n"
    "measured (CUPTI Range Profiler) next to the cost model's, per-tile classes (and cycles\n"
    "with --instrument), a Chrome-trace timeline. --pass bwd or both adds the backward (dQ, dK,\n"
    "dV; 2.5 times the forward's FLOP count) at its own tile: files tiles_bwd.npy,\n"
    "tile_bytes_bwd.npy, tile_cycles_bwd.npy beside the forward's and \"backward\" in\n"
    "summary.json. Without a GPU it writes the same trace from the CPU simulation (classes and\n"
    "modelled bytes, no timings) and says so.\n\n"
    "A scenario file (see scenarios/ and core/fm_scenario.h for its keys): every case, one\n"
    "trace folder per case under DIR/cases/, an index (DIR/index.csv, DIR/index.json), a\n"
    "report (DIR/report.md, its tables in DIR/tables/ as CSV, LaTeX and text). Steps that need\n"
    "a GPU are reported as skipped without one. Ctrl-C stops within a second and keeps the\n"
    "finished cases, listed in the index as they finish (run.json: complete false until\n"
    "the last); a rerun skips them.\n\n"
    "one mask:\n" CLI_MASK_SOURCE_HELP;

static const char *help_tail =
    CLI_MASK_REST_HELP
    "  --head-dim D         64 or 128 (default 128)\n"
    "  --variant V          skip (default), noskip (every tile visited) or dense (an Sq x Sk\n"
    "                       uint8 mask per vector set, built on the device from the intervals)\n"
    "  --instrument         also run the instrumented build: per-tile classes and cycles\n"
    "  --warmup N           untimed launches first (default 3)\n"
    "  --reps N             timed launches (default 20)\n"
    "  --no-cupti           CUDA events only, no counters\n"
    "  --no-bytes           skip the counted launch\n"
    "  --json               one JSON object on stdout instead of the report\n"
    "  --out DIR            the trace folder (required)\n"
    "both forms:\n"
    "  --kernel K           sm80, sm90 or auto (default auto: the fastest kernel the GPU runs;\n"
    "                       without a GPU, the reference GPU's (H200): sm90); a scenario takes a\n"
    "                       comma list and times each kernel (overrides its kernel: key)\n"
    "  --pass P             fwd (default), bwd or both: the passes timed and modelled (the\n"
    "                       backward at its own tile; a scenario: overrides its pass: key)\n"
    "  --mask-method M      auto (default: the library's, R2P), slices, r2p or words (forward:\n"
    "                       R2P's words precomputed per tile; backward: r2p): how the sm90\n"
    "                       kernels mask a partial tile (same output, another speed; sm80 takes\n"
    "                       auto only; a scenario: overrides its mask_method: key); recorded\n"
    "                       without a GPU, where it changes nothing\n"
    "  --cpu                the CPU simulation even when a GPU is present\n"
    "a scenario file:\n"
    "  --out DIR            output folder (default: the scenario's output:, else out/NAME)\n"
    "  --only PATTERN       run only cases whose id matches the shell pattern (e.g.\n"
    "                       '*document*S32768*')\n"
    "  --gpu PROFILE        write each case's predicted time (the timing model, fmsim predict)\n"
    "                       beside the measured one: a profile in data/gpu (e.g. h200-sm80) or a\n"
    "                       file, for its kernel (overrides the profile: key; default: on a GPU,\n"
    "                       data/gpu/GPU-KERNEL.json where it exists)\n";

static void print_help(const void *opts) {
  (void)opts;
  fputs(help_head, stdout);
  printf("  --br N --bc N        tile rows x key columns (default: the kernel's own tile,\n");
  for (int k = 0; k < FM_NKERNELS; k++) {
    const fm_kernel_desc *d = fm_kernel_get((fm_kernel_id)k);
    printf("                       %s:", d->name);
    for (int t = 0; t < d->ntiles; t++)
      printf(" %d x %d at D=%d%s", d->tiles[t].br, d->tiles[t].bc, d->tiles[t].head_dim,
             t + 1 < d->ntiles ? "," : k + 1 < FM_NKERNELS ? "\n" : ")\n");
  }
  fputs(help_tail, stdout);
}

typedef struct run_opts {
  cli_mask_opts mask;
  int tile_given;
  int64_t head_dim, warmup, reps;
  fm_variant variant;
  int instrument, cupti, count_bytes, force_cpu, json;
  fm_kernel_id kernels[FM_SCN_MAX_KERNELS];
  int nkernels, kernel_given;
  fm_pass pass;
  int pass_given;
  fm_mask_method mask_method;
  int mask_method_given;
  const char *out, *only, *scenario, *gpu;
  const char *mask_only_option; /* the first option given that only the one-mask form takes */
} run_opts;

enum {
  O_HD = 2001, O_VAR, O_INST, O_WARM, O_REPS, O_NOCUPTI, O_NOBYTES, O_CPU, O_JSON, O_OUT, O_ONLY,
  O_KERNEL, O_PASS, O_GPU, O_MASK_METHOD
};

static const struct option longopts[] = {CLI_MASK_LONGOPTS,
                                         {"head-dim", required_argument, 0, O_HD},
                                         {"variant", required_argument, 0, O_VAR},
                                         {"instrument", no_argument, 0, O_INST},
                                         {"warmup", required_argument, 0, O_WARM},
                                         {"reps", required_argument, 0, O_REPS},
                                         {"no-cupti", no_argument, 0, O_NOCUPTI},
                                         {"no-bytes", no_argument, 0, O_NOBYTES},
                                         {"cpu", no_argument, 0, O_CPU},
                                         {"json", no_argument, 0, O_JSON},
                                         {"out", required_argument, 0, O_OUT},
                                         {"only", required_argument, 0, O_ONLY},
                                         {"kernel", required_argument, 0, O_KERNEL},
                                         {"pass", required_argument, 0, O_PASS},
                                         {"mask-method", required_argument, 0, O_MASK_METHOD},
                                         {"gpu", required_argument, 0, O_GPU},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};

/* The mask's options (cli_mask_opt), every one of them for one mask only:
 * 1 taken, -1 a bad value (printed), 0 none of them. */
static int run_mask_option(const char *c, void *v, int opt, const char *arg) {
  run_opts *o = v;
  int r = cli_mask_opt(c, &o->mask, opt, arg);
  if (r <= 0) return r;
  o->tile_given |= opt == 1001 || opt == 1002;
  for (const struct option *l = longopts; l->name && !o->mask_only_option; l++)
    if (l->val == opt) o->mask_only_option = l->name;
  return 1;
}

/* run's own options: 1 taken, -1 a bad value (printed), 0 none of them. */
static int run_option(const char *c, void *v, int opt, const char *arg) {
  (void)c;
  run_opts *o = v;
  fm_err err;
  static const char *const mask_only[] = {[O_HD - O_HD] = "head-dim", [O_VAR - O_HD] = "variant",
                                          [O_INST - O_HD] = "instrument", [O_WARM - O_HD] = "warmup",
                                          [O_REPS - O_HD] = "reps", [O_NOCUPTI - O_HD] = "no-cupti",
                                          [O_NOBYTES - O_HD] = "no-bytes", [O_JSON - O_HD] = "json"};
  if (opt >= O_HD && opt <= O_JSON && mask_only[opt - O_HD] && !o->mask_only_option)
    o->mask_only_option = mask_only[opt - O_HD];
  switch (opt) {
  case O_HD:
    if (cli_int(cmd, "--head-dim", arg, 1, 1 << 20, &o->head_dim)) return -1;
    if (o->head_dim != 64 && o->head_dim != 128) {
      cli_error(cmd, "--head-dim %lld: the kernels support head dims 64 and 128", (long long)o->head_dim);
      return -1;
    }
    return 1;
  case O_VAR:
    if (fm_variant_parse(arg, &o->variant, &err) == FM_OK) return 1;
    cli_error(cmd, "--variant: %s", err.msg);
    return -1;
  case O_INST: o->instrument = 1; return 1;
  case O_WARM: return cli_int(cmd, "--warmup", arg, 0, 100000, &o->warmup) ? -1 : 1;
  case O_REPS: return cli_int(cmd, "--reps", arg, 1, 100000, &o->reps) ? -1 : 1;
  case O_NOCUPTI: o->cupti = 0; return 1;
  case O_NOBYTES: o->count_bytes = 0; return 1;
  case O_CPU: o->force_cpu = 1; return 1;
  case O_JSON: o->json = 1; return 1;
  case O_OUT: o->out = arg; return 1;
  case O_ONLY: o->only = arg; return 1;
  case O_GPU: o->gpu = arg; return 1;
  case O_KERNEL:
    o->kernel_given = 1;
    return cli_kernels(cmd, "--kernel", arg, o->kernels, &o->nkernels, FM_SCN_MAX_KERNELS) ? -1 : 1;
  case O_PASS:
    o->pass_given = 1;
    if (fm_pass_parse(arg, &o->pass, &err) == FM_OK) return 1;
    cli_error(cmd, "--pass: %s", err.msg);
    return -1;
  case O_MASK_METHOD:
    o->mask_method_given = 1;
    if (fm_mask_method_parse(arg, &o->mask_method, &err) == FM_OK) return 1;
    cli_error(cmd, "--mask-method: %s", err.msg);
    return -1;
  }
  return 0;
}

/* Parses argv; -1: --help printed; 0: parsed; FM_EXIT_USAGE after an error. */
static int parse(int argc, char **argv, run_opts *o) {
  const cli_opts_def def = {.shortopts = ":h", .longopts = longopts, .shared = run_mask_option,
                            .own = run_option, .print_help = print_help, .operands = CLI_OPERANDS};
  *o = (run_opts){.head_dim = 128, .warmup = 3, .reps = 20, .variant = FM_VARIANT_SKIP,
                  .cupti = 1, .count_bytes = 1, .kernels = {FM_KERNEL_AUTO}, .nkernels = 1,
                  .pass = FM_PASS_FWD, .mask_method = FM_MASK_METHOD_AUTO};
  cli_mask_opts_init(&o->mask);
  int r = cli_parse_opts(cmd, argc, argv, &def, o);
  if (r) return r > 0 ? -1 : FM_EXIT_USAGE;
  if (optind < argc) o->scenario = argv[optind++];
  if (optind < argc || (o->scenario && o->mask.family)) {
    cli_error(cmd, "unexpected argument '%s' (one mask is --family ..., a scenario file comes "
              "alone: fmsim run SCENARIO.yaml)", argv[optind < argc ? optind : optind - 1]);
    return FM_EXIT_USAGE;
  }
  return 0;
}

/* The one-case scenario of --family: the tile left 0 means "the kernel's". */
static int single_scenario(const run_opts *o, fm_scenario *s) {
  fm_scenario_defaults(s);
  snprintf(s->name, sizeof s->name, "run");
  snprintf(s->output, sizeof s->output, "%s", o->out);
  if (o->mask.samples_path) snprintf(s->sample_file, sizeof s->sample_file, "%s", o->mask.samples_path);
  s->seqlen = (fm_int_list){.n = 1, .v = {o->mask.seqlen}};
  s->head_dim = (fm_int_list){.n = 1, .v = {o->head_dim}};
  s->br = (fm_int_list){.n = 1, .v = {o->tile_given ? o->mask.br : 0}};
  s->bc = (fm_int_list){.n = 1, .v = {o->tile_given ? o->mask.bc : 0}};
  if (o->mask.sample >= 0) s->samples = (fm_int_list){.n = 1, .v = {o->mask.sample}};
  s->batch = o->mask.batch;
  s->heads = o->mask.heads;
  s->seed = o->mask.seed;
  s->run = FM_SCN_ANALYZE | FM_SCN_SIMULATE | FM_SCN_GPU;
  s->kernels[0] = o->kernels[0];
  s->variant = o->variant;
  s->mask_method = o->mask_method;
  s->pass = o->pass;
  s->warmup = o->warmup;
  s->reps = o->reps;
  s->instrument_reps = o->instrument ? o->reps : 0;
  s->count_bytes = o->count_bytes;
  s->cupti = o->cupti;
  fm_scn_mask *m = &s->masks[s->nmasks++];
  if (strlen(o->mask.family) >= sizeof m->family) {
    cli_error(cmd, "unknown family '%s' (fmsim families lists them)", o->mask.family);
    return -1;
  }
  snprintf(m->family, sizeof m->family, "%s", o->mask.family);
  fm_err err;
  for (int p = 0; p < o->mask.nparams; p++)
    if (fm_scn_add_param(s, m, o->mask.params[p], &err) != FM_OK) {
      cli_error(cmd, "--param: %s", err.msg);
      return -1;
    }
  return 0;
}

/* A scenario file with the options that apply to it. */
static int file_scenario(const run_opts *o, fm_scenario *s) {
  fm_err err;
  if (o->mask_only_option) {
    cli_error(cmd, "option '--%s' is for one mask (--family); a scenario file sets it with its "
              "keys (the file form takes --out, --only, --kernel, --pass, --mask-method, --cpu and "
              "--gpu)", o->mask_only_option);
    return -1;
  }
  if (fm_scenario_load(o->scenario, s, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  if (o->kernel_given) {
    memcpy(s->kernels, o->kernels, sizeof s->kernels);
    s->nkernels = o->nkernels;
  }
  if (o->pass_given) s->pass = o->pass;
  if (o->mask_method_given) s->mask_method = o->mask_method;
  if (o->gpu) {
    if (strlen(o->gpu) >= sizeof s->profile) {
      cli_error(cmd, "--gpu: name too long");
      return -1;
    }
    snprintf(s->profile, sizeof s->profile, "%s", o->gpu);
    s->profile_line = 0;
  }
  return 0;
}

int cmd_run(int argc, char **argv) {
  run_opts o;
  int r = parse(argc, argv, &o);
  if (r) return r < 0 ? FM_EXIT_OK : r;
  if (!o.scenario) {
    const char *missing = !o.mask.family ? "--family is required (fmsim families lists them; a "
                                           "scenario file: fmsim run SCENARIO.yaml)"
                          : !o.out ? "--out DIR is required (the trace folder)"
                          : o.only ? "--only selects cases of a scenario file"
                          : o.nkernels > 1 ? "--kernel: one kernel for one mask (a scenario "
                                             "times several)"
                          : o.gpu ? "--gpu: predicted times go in a scenario's index (fmsim run "
                                    "SCENARIO.yaml --gpu P); one mask: fmsim predict" : NULL;
    if (missing) {
      cli_error(cmd, "%s", missing);
      return FM_EXIT_USAGE;
    }
  }
  fm_scenario *s = malloc(sizeof *s);
  if (!s) {
    cli_error(cmd, "out of memory");
    return FM_EXIT_FAIL;
  }
  int code = FM_EXIT_USAGE;
  if (o.scenario ? file_scenario(&o, s) == 0 : single_scenario(&o, s) == 0) {
    runner_opts ro = {.cmd = cmd, .out = o.out ? o.out : s->output, .only = o.only,
                      .single = !o.scenario, .no_gpu_why = o.force_cpu ? "--cpu" : NULL,
                      .json = o.json};
    code = runner_run(s, &ro);
    gpu_step_shutdown();
  }
  free(s);
  return code;
}
