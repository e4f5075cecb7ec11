/* fmsim bench: the FlashMask paper's kernel table on the GPU, and the sparsity
 * sweep of its Figure 4a, as two shipped scenarios run by the scenario runner
 * (runner.h): scenarios/paper-kernel-table.yaml and
 * scenarios/sparsity-sweep.yaml, built into the binary; bench's options
 * override their keys.
 *
 * Kernel table: the twelve families x S in {8K, 32K, 128K}, B = tokens / S,
 * H = hidden / D, documents from the paper's samples (sample 0), head dim 128,
 * forward and backward (the scenario's pass: both, as the paper's tables
 * report both), bf16. Per case, kernel and pass: time (median after warm-up, L2
 * flushed), TFLOP/s with the paper's count, the no-skip time and the skip
 * speed-up next to 1/(1-rho), the instrumented build's time (its overhead)
 * and its tile classes against the CPU's, HBM bytes counted next to the cost
 * model's. Sweep: drawn document masks at 32K, time against 1 - rho, a linear
 * fit and R^2 per family and pooled; the forward only unless --pass says
 * otherwise (the paper's Figure 4a is the forward's, and the backward would
 * double the sweep's time).
 *
 * Output: DIR/paper-kernel-table/ and DIR/sparsity-sweep/ (scenario runs:
 * traces with each case's interval vectors, index.json, report.md, tables/),
 * and DIR/table.txt (the
 * kernel table and the fit, also printed).
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fm_fileio.h"
#include "fm_samples.h"
#include "fm_scenario.h"
#include "gpu_step.h"
#include "runner.h"

extern const char fm_scenario_paper_kernel_table_text[];
extern const char fm_scenario_sparsity_sweep_text[];

static const char *cmd = "bench";

#define MAX_LIST 16

typedef struct bench_opts {
  int64_t hd[MAX_LIST], seq[MAX_LIST], sample, tokens, hidden, warmup, reps, noskip_reps;
  int64_t inst_reps, sweep_draws, sweep_seqlen, sweep_reps, seed, budget_s, sustained_ms;
  int nhd, nseq, nfam, nkernels, no_bytes, no_cupti, export_only;
  const char *fam[MAX_LIST], *out, *samples_path, *gpu;
  fm_kernel_id kernels[FM_SCN_MAX_KERNELS];
  fm_pass pass;
  unsigned given; /* bits of the options given (1 << option - O_FIRST) */
  const fm_scenario *table, *sweep; /* the built-in scenarios: the help's defaults */
} bench_opts;

enum {
  O_FIRST = 3001, O_OUT = O_FIRST, O_HD, O_SEQ, O_FAM, O_SAMPLE, O_TOK, O_HID, O_WARM, O_REPS,
  O_NSR, O_ISR, O_NOBYTES, O_NOCUPTI, O_SWD, O_SWS, O_SWR, O_BUDGET, O_EXPORT, O_SEED, O_SAMPLES,
  O_KERNEL, O_PASS, O_SUSTAINED, O_GPU
};
#define GIVEN(o, opt) (((o)->given >> ((opt) - O_FIRST)) & 1u)

/* The help, with the defaults read from the built-in scenarios (a cli_help_fn over
 * bench_opts). */
static void print_help(const void *opts) {
  const fm_scenario *t = ((const bench_opts *)opts)->table, *w = ((const bench_opts *)opts)->sweep;
  char kernels[64] = "", lengths[200] = "";
  for (int k = 0; k < t->nkernels; k++)
    snprintf(kernels + strlen(kernels), sizeof kernels - strlen(kernels), "%s%s", k ? "," : "",
             t->kernels[k] == FM_KERNEL_AUTO ? "auto" : fm_kernel_get(t->kernels[k])->name);
  for (int i = 0; i < t->seqlen.n; i++)
    snprintf(lengths + strlen(lengths), sizeof lengths - strlen(lengths), "%s%lld", i ? "," : "",
             (long long)t->seqlen.v[i]);
  printf("usage: fmsim bench --out DIR [options]\n\n"
         "The FlashMask paper's kernel table on the GPU: the twelve families x S in {8K, 32K, 128K},\n"
         "B = tokens/S, H = hidden/D, documents from the paper's samples, forward and backward\n"
         "(%s by default), bf16; then the\n"
         "sparsity sweep of its Figure 4a (drawn documents at 32K) with a linear fit of time against\n"
         "1 - rho. Both are the shipped scenarios scenarios/paper-kernel-table.yaml and\n"
         "scenarios/sparsity-sweep.yaml (built in), run as `fmsim run` runs a scenario, into\n"
         "DIR/paper-kernel-table/ and DIR/sparsity-sweep/; the options below override their keys.\n"
         "fmsim against FlexAttention and cuDNN: bench/protocol_bench.py (one process, one timing\n"
         "protocol). DIR/table.txt holds the kernel table and the fit.\n\n",
         fm_pass_name(t->pass));
  printf("  --out DIR             output folder (required)\n"
         "  --kernel LIST         kernels (sm80, sm90, auto), a column group each (default %s)\n"
         "  --head-dims LIST      head dims, 64 and/or 128 (default %lld)\n"
         "  --seqlens LIST        sequence lengths (default %s)\n"
         "  --families LIST       families of the table (default: all %d)\n"
         "  --sample K            document sample of each S that has samples (default 0)\n"
         "  --tokens N            B*S of every case (default %lld)\n"
         "  --hidden N            H*D of every case (default %lld)\n"
         "  --pass P              fwd, bwd or both, for the table and the sweep (default: the\n"
         "                       table %s, the sweep %s)\n",
         kernels, (long long)t->head_dim.v[0], lengths, t->nmasks, (long long)t->tokens,
         (long long)t->hidden, fm_pass_name(t->pass), fm_pass_name(w->pass));
  printf("  --warmup N --reps N   untimed then timed launches (default %lld, %lld)\n"
         "  --sustained MS        the protocol's sustained figure (docs/DESIGN.md, \"How we measure\"):\n"
         "                        1 s of back-to-back warm-up, then back-to-back launches over at\n"
         "                        least MS ms, median (default 0: --warmup, then --reps launches)\n"
         "  --noskip-reps N       no-skip variant's timed launches, 0 = not run (default %lld)\n"
         "  --instrument-reps N   instrumented build's timed launches, 0 = not run (default %lld)\n"
         "  --no-bytes            no counted launch\n"
         "  --no-cupti            CUDA events only, no counters\n"
         "  --sweep-draws N       masks drawn per sweep family, 0 = no sweep (default %lld)\n"
         "  --sweep-seqlen S      sweep length (default %lld)\n"
         "  --sweep-reps N        timed launches per sweep mask (default %lld)\n"
         "  --budget-s SECONDS    time no case after this many seconds (default none)\n"
         "  --export-only         the masks, the index and the model of the table (no GPU needed)\n"
         "  --gpu PROFILE         predicted times beside the measured ones, for the profile's kernel:\n"
         "                        a profile in data/gpu (e.g. h200-sm80) or a file (default: on a\n"
         "                        GPU, data/gpu/GPU-KERNEL.json where it exists)\n"
         "  --seed N              seed of every random draw (default %lld)\n"
         "  --samples FILE        document samples in the paper's format (default: built in)\n",
         (long long)t->warmup, (long long)t->reps, (long long)t->noskip_reps,
         (long long)t->instrument_reps, (long long)w->draws, (long long)w->seqlen.v[0],
         (long long)w->reps, (long long)t->seed);
}

static int families_option(bench_opts *o, const char *text) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", text);
  o->nfam = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    const fm_family_info *f = fm_family_find(t);
    if (!f) {
      cli_unknown_name(cmd, "--families: ", "family", t, fm_family_closest(t),
                       "fmsim families lists them");
      return -1;
    }
    if (o->nfam == MAX_LIST) {
      cli_error(cmd, "--families: at most %d", MAX_LIST);
      return -1;
    }
    o->fam[o->nfam++] = f->name;
  }
  if (!o->nfam) cli_error(cmd, "--families: empty list");
  return o->nfam ? 0 : -1;
}

/* The integer options: their name, range and field. */
static int64_t *int_option(bench_opts *o, int opt, const char **name, int64_t *lo, int64_t *hi) {
  static const struct {
    int opt;
    const char *name;
    int64_t lo, hi;
    size_t off;
  } ints[] = {
      {O_SAMPLE, "--sample", 0, 1 << 20, offsetof(bench_opts, sample)},
      {O_TOK, "--tokens", 1, (int64_t)1 << 40, offsetof(bench_opts, tokens)},
      {O_HID, "--hidden", 64, 1 << 20, offsetof(bench_opts, hidden)},
      {O_WARM, "--warmup", 0, 1000, offsetof(bench_opts, warmup)},
      {O_REPS, "--reps", 1, 10000, offsetof(bench_opts, reps)},
      {O_NSR, "--noskip-reps", 0, 10000, offsetof(bench_opts, noskip_reps)},
      {O_ISR, "--instrument-reps", 0, 10000, offsetof(bench_opts, inst_reps)},
      {O_SWD, "--sweep-draws", 0, 10000, offsetof(bench_opts, sweep_draws)},
      {O_SWS, "--sweep-seqlen", 1, FM_MAX_SEQLEN, offsetof(bench_opts, sweep_seqlen)},
      {O_SWR, "--sweep-reps", 1, 10000, offsetof(bench_opts, sweep_reps)},
      {O_BUDGET, "--budget-s", 1, 1 << 30, offsetof(bench_opts, budget_s)},
      {O_SEED, "--seed", 0, INT64_MAX, offsetof(bench_opts, seed)},
      {O_SUSTAINED, "--sustained", 0, 60000, offsetof(bench_opts, sustained_ms)},
  };
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if (ints[i].opt == opt) {
      *name = ints[i].name;
      *lo = ints[i].lo;
      *hi = ints[i].hi;
      return (int64_t *)((char *)o + ints[i].off);
    }
  return NULL;
}

/* bench's options: 1 taken, -1 a bad value (printed), 0 none of them. */
static int bench_option(const char *c, void *v, int opt, const char *arg) {
  (void)c;
  bench_opts *o = v;
  if (opt >= O_FIRST && opt <= O_GPU) o->given |= 1u << (opt - O_FIRST);
  const char *name;
  int64_t lo, hi, *field = int_option(o, opt, &name, &lo, &hi);
  if (field) /* sequence lengths and token counts are sizes (32k) */
    return (opt == O_SWS || opt == O_TOK ? cli_size : cli_int)(cmd, name, arg, lo, hi, field) ? -1 : 1;
  switch (opt) {
  case O_OUT: o->out = arg; return 1;
  case O_HD:
    if (cli_int_list(cmd, "--head-dims", arg, 1, 1 << 20, o->hd, &o->nhd, MAX_LIST)) return -1;
    for (int i = 0; i < o->nhd; i++)
      if (o->hd[i] != 64 && o->hd[i] != 128) {
        cli_error(cmd, "--head-dims: head dim %lld: the kernels support 64 and 128", (long long)o->hd[i]);
        return -1;
      }
    return 1;
  case O_SEQ:
    return cli_size_list(cmd, "--seqlens", arg, 1, FM_MAX_SEQLEN, o->seq, &o->nseq, MAX_LIST) ? -1 : 1;
  case O_FAM: return families_option(o, arg) ? -1 : 1;
  case O_NOBYTES: o->no_bytes = 1; return 1;
  case O_NOCUPTI: o->no_cupti = 1; return 1;
  case O_EXPORT: o->export_only = 1; return 1;
  case O_SAMPLES: o->samples_path = arg; return 1;
  case O_GPU:
    if (strlen(arg) < sizeof ((fm_scenario *)0)->profile) {
      o->gpu = arg;
      return 1;
    }
    cli_error(cmd, "--gpu: name too long");
    return -1;
  case O_KERNEL:
    return cli_kernels(cmd, "--kernel", arg, o->kernels, &o->nkernels, FM_SCN_MAX_KERNELS) ? -1 : 1;
  case O_PASS: {
    fm_err err;
    if (fm_pass_parse(arg, &o->pass, &err) == FM_OK) return 1;
    cli_error(cmd, "--pass: %s", err.msg);
    return -1;
  }
  }
  return 0;
}

/* Parses argv; -1: --help printed; 0: parsed; FM_EXIT_USAGE after an error. */
static int parse(int argc, char **argv, bench_opts *o, const fm_scenario *t, const fm_scenario *w) {
  static const struct option longopts[] = {
      {"out", required_argument, 0, O_OUT},          {"head-dims", required_argument, 0, O_HD},
      {"seqlens", required_argument, 0, O_SEQ},      {"families", required_argument, 0, O_FAM},
      {"sample", required_argument, 0, O_SAMPLE},    {"tokens", required_argument, 0, O_TOK},
      {"hidden", required_argument, 0, O_HID},       {"warmup", required_argument, 0, O_WARM},
      {"reps", required_argument, 0, O_REPS},        {"noskip-reps", required_argument, 0, O_NSR},
      {"instrument-reps", required_argument, 0, O_ISR}, {"no-bytes", no_argument, 0, O_NOBYTES},
      {"no-cupti", no_argument, 0, O_NOCUPTI},       {"sweep-draws", required_argument, 0, O_SWD},
      {"sweep-seqlen", required_argument, 0, O_SWS}, {"sweep-reps", required_argument, 0, O_SWR},
      {"budget-s", required_argument, 0, O_BUDGET},  {"export-only", no_argument, 0, O_EXPORT},
      {"seed", required_argument, 0, O_SEED},        {"samples", required_argument, 0, O_SAMPLES},
      {"kernel", required_argument, 0, O_KERNEL},    {"pass", required_argument, 0, O_PASS},
      {"sustained", required_argument, 0, O_SUSTAINED},
      {"gpu", required_argument, 0, O_GPU},          {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":h", .longopts = longopts, .own = bench_option,
                            .print_help = print_help};
  memset(o, 0, sizeof *o);
  o->table = t;
  o->sweep = w;
  int r = cli_parse_opts(cmd, argc, argv, &def, o);
  if (r) return r > 0 ? -1 : FM_EXIT_USAGE;
  if (!o->out) {
    cli_error(cmd, "--out DIR is required");
    return FM_EXIT_USAGE;
  }
  return 0;
}

/* Keeps the table's masks of the --families list. */
static int keep_families(const bench_opts *o, fm_scenario *t) {
  int kept = 0;
  for (int f = 0; f < o->nfam; f++) {
    int found = -1;
    for (int m = 0; m < t->nmasks && found < 0; m++)
      if (!strcmp(t->masks[m].family, o->fam[f])) found = m;
    if (found < 0) {
      cli_error(cmd, "--families: family '%s' is not in %s", o->fam[f], t->path);
      return -1;
    }
    if (found != kept) {
      fm_scn_mask tmp = t->masks[kept];
      t->masks[kept] = t->masks[found];
      t->masks[found] = tmp;
    }
    kept++;
  }
  t->nmasks = kept;
  return 0;
}

/* bench's options onto the two scenarios' keys. */
static void apply(const bench_opts *o, fm_scenario *t, fm_scenario *w) {
  fm_scenario *both[2] = {t, w};
  for (int i = 0; i < 2; i++) {
    fm_scenario *s = both[i];
    if (GIVEN(o, O_TOK)) s->tokens = o->tokens;
    if (GIVEN(o, O_HID)) s->hidden = o->hidden;
    if (GIVEN(o, O_NOCUPTI)) s->cupti = 0;
    if (GIVEN(o, O_SAMPLES)) snprintf(s->sample_file, sizeof s->sample_file, "%s", o->samples_path);
    if (GIVEN(o, O_KERNEL)) {
      memcpy(s->kernels, o->kernels, sizeof s->kernels);
      s->nkernels = o->nkernels;
    }
    if (GIVEN(o, O_PASS)) s->pass = o->pass;
    if (GIVEN(o, O_GPU)) {
      snprintf(s->profile, sizeof s->profile, "%s", o->gpu);
      s->profile_line = 0;
    }
  }
  if (GIVEN(o, O_HD)) {
    t->head_dim.n = o->nhd;
    memcpy(t->head_dim.v, o->hd, sizeof o->hd[0] * (size_t)o->nhd);
    w->head_dim = (fm_int_list){.n = 1, .v = {o->hd[0]}};
  }
  if (GIVEN(o, O_SEQ)) {
    t->seqlen.n = o->nseq;
    memcpy(t->seqlen.v, o->seq, sizeof o->seq[0] * (size_t)o->nseq);
  }
  if (GIVEN(o, O_SAMPLE) && o->sample != 0) t->samples = (fm_int_list){.n = 1, .v = {o->sample}};
  if (GIVEN(o, O_WARM)) t->warmup = o->warmup;
  if (GIVEN(o, O_REPS)) t->reps = o->reps;
  if (GIVEN(o, O_SUSTAINED)) t->sustained_ms = w->sustained_ms = o->sustained_ms;
  if (GIVEN(o, O_NSR)) t->noskip_reps = o->noskip_reps;
  if (GIVEN(o, O_ISR)) t->instrument_reps = o->inst_reps;
  if (GIVEN(o, O_NOBYTES)) t->count_bytes = 0;
  if (GIVEN(o, O_SEED)) t->seed = w->seed = (uint64_t)o->seed;
  if (GIVEN(o, O_SWD) && o->sweep_draws > 0) w->draws = o->sweep_draws;
  if (GIVEN(o, O_SWS)) w->seqlen = (fm_int_list){.n = 1, .v = {o->sweep_seqlen}};
  if (GIVEN(o, O_SWR)) w->reps = o->sweep_reps;
}

/* Every case's shape, checked before anything is written (bench's words). */
static int validate(const bench_opts *o, const fm_scenario *t, const fm_scenario *w) {
  for (int d = 0; d < t->head_dim.n; d++) {
    int64_t D = t->head_dim.v[d];
    if (t->hidden % D || t->hidden / D > 65535) {
      cli_error(cmd, t->hidden % D ? "--hidden %lld is not a multiple of head dim %lld"
                                   : "--hidden %lld / head dim %lld is more than 65535 heads",
                (long long)t->hidden, (long long)D);
      return -1;
    }
  }
  for (int i = 0; i < t->seqlen.n; i++)
    if (t->tokens % t->seqlen.v[i] || t->tokens / t->seqlen.v[i] > 65535) {
      cli_error(cmd, "--seqlens: S=%lld must divide --tokens %lld (B = tokens/S, at most 65535)",
                (long long)t->seqlen.v[i], (long long)t->tokens);
      return -1;
    }
  int64_t ws = w->seqlen.v[0];
  if (!o->export_only && !(GIVEN(o, O_SWD) && o->sweep_draws == 0) &&
      (w->tokens % ws || w->tokens / ws > 65535)) {
    cli_error(cmd, "--sweep-seqlen %lld must divide --tokens %lld", (long long)ws, (long long)w->tokens);
    return -1;
  }
  fm_sample_set samples;
  fm_err err;
  if ((t->sample_file[0] ? fm_samples_load(t->sample_file, &samples, &err)
                         : fm_samples_builtin(&samples, &err)) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  int bad = 0;
  for (int i = 0; i < t->seqlen.n && !bad; i++) {
    int have = fm_samples_count(&samples, t->seqlen.v[i]);
    if (have > 0 && o->sample >= have) {
      cli_error(cmd, "--sample %lld does not exist for S=%lld (there are %d: 0..%d)",
                (long long)o->sample, (long long)t->seqlen.v[i], have, have - 1);
      bad = 1;
    }
  }
  fm_samples_free(&samples);
  return bad ? -1 : 0;
}

/* DIR/table.txt: the kernel table and the sweep's fit, as the runs wrote them. */
static int write_table(const bench_opts *o, const char *device, fm_pass pass, int sweep) {
  char *buf = NULL, path[4400], text[65536];
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return -1;
  fprintf(f, "fmsim bench on %s: pass %s, bf16, B = tokens/S, H = hidden/D, L2 flushed, median ms\n"
             "TFLOP/s = 4*B*H*S*S*D*(1-rho)/time (bwd: 2.5 times that), rho at each kernel's tile "
             "for the pass; eff = TFLOP/s / full-mask TFLOP/s; speedup = noskip/skip next to the "
             "ideal 1/(1-rho); inst = instrumented overhead; predicted = the timing model's time on "
             "the GPU profile (--gpu), its error = predicted / measured - 1\n\n", device, fm_pass_name(pass));
  const char *parts[2] = {"paper-kernel-table/tables/kernels.txt", "sparsity-sweep/tables/fit.txt"};
  for (int i = 0; i < 1 + sweep; i++) {
    snprintf(path, sizeof path, "%s/%s", o->out, parts[i]);
    FILE *in = fopen(path, "r");
    size_t n = in ? fread(text, 1, sizeof text - 1, in) : 0;
    if (in) fclose(in);
    text[n] = 0;
    if (i) fprintf(f, "\nsparsity sweep: median ms = a + b * (1 - rho)\n");
    fputs(text, f);
  }
  fclose(f);
  fm_err err;
  snprintf(path, sizeof path, "%s/table.txt", o->out);
  fm_status st = fm_write_file_atomic_ex(path, buf, len, FM_OUT_NOFOLLOW, &err);
  if (st == FM_OK) fputs(buf, stdout);
  else cli_error(cmd, "%s", err.msg);
  free(buf);
  return st == FM_OK ? 0 : -1;
}

/* One of the two scenarios into DIR/NAME. */
static int run_one(const bench_opts *o, const fm_scenario *s, double deadline) {
  char out[4300];
  snprintf(out, sizeof out, "%s/%s", o->out, s->name);
  runner_opts ro = {.cmd = cmd, .out = out, .no_gpu_why = o->export_only ? "--export-only" : NULL,
                    .deadline = deadline, .quiet = 1};
  return runner_run(s, &ro);
}

static int load_builtin(const char *text, const char *name, fm_scenario *s) {
  char label[200];
  fm_err err;
  snprintf(label, sizeof label, "scenarios/%s.yaml (built in)", name);
  if (fm_scenario_parse(text, strlen(text), label, ".", s, &err) == FM_OK) return 0;
  cli_error(cmd, "%s", err.msg);
  return -1;
}

static int bench(bench_opts *o, fm_scenario *t, fm_scenario *w) {
  if ((o->nfam && keep_families(o, t))) return FM_EXIT_USAGE;
  apply(o, t, w);
  if (validate(o, t, w)) return FM_EXIT_USAGE;
  char device[300] = "cpu-simulation (--export-only: masks and cost model, no timings)";
  if (!o->export_only && !gpu_step_usable(device, sizeof device)) {
    cli_error(cmd, "%s; --export-only writes the masks and the model without one", device);
    return FM_EXIT_FAIL;
  }
  double deadline = GIVEN(o, O_BUDGET) ? runner_now() + (double)o->budget_s : 0;
  int sweep = !o->export_only && !(GIVEN(o, O_SWD) && o->sweep_draws == 0);
  int code = run_one(o, t, deadline);
  if (code == FM_EXIT_OK && sweep) code = run_one(o, w, deadline);
  if (code == FM_EXIT_OK && write_table(o, device, t->pass, sweep)) code = FM_EXIT_FAIL;
  if (code == FM_EXIT_OK && o->export_only)
    fprintf(stderr, "fmsim bench: note: --export-only: wrote the table's masks, index and model "
            "to %s/%s (no timings)\n", o->out, t->name);
  return code;
}

int cmd_bench(int argc, char **argv) {
  fm_scenario *t = malloc(sizeof *t), *w = malloc(sizeof *w);
  bench_opts *o = malloc(sizeof *o);
  int code = FM_EXIT_FAIL;
  if (!t || !w || !o) cli_error(cmd, "out of memory");
  else if (load_builtin(fm_scenario_paper_kernel_table_text, "paper-kernel-table", t) == 0 &&
           load_builtin(fm_scenario_sparsity_sweep_text, "sparsity-sweep", w) == 0) {
    int r = parse(argc, argv, o, t, w);
    code = r < 0 ? FM_EXIT_OK : r ? r : bench(o, t, w);
    gpu_step_shutdown();
  }
  free(t);
  free(w);
  free(o);
  return code;
}
