/* fm_kernel_bench — the kernels' development harness (llm.c dev/cuda style):
 * validate first, then time, with the napkin math beside every figure.
 *
 *   fm_kernel_bench [--kernels sm90,sm80] [--head-dim 128] [--seqlens 8192,32768,131072]
 *                   [--families all|a,b,...] [--warmup 1] [--reps 5] [--reps-long 3]
 *                   [--no-noskip] [--no-instr] [--no-validate] [--pass fwd|bwd|both] [--control]
 *                   [--sm90-modes 1,2,3,4] [--sm90-orders 1,2,3] [--sm90-masks 1,2,3]
 *                   [--json FILE] [--seed N] [--sustained MS]
 *
 * 1. Validation: a few small cases through fm_attn_check_run (CPU fp64
 *    reference, skip == noskip, instrumented classes == core) on every kernel
 *    named; any failure stops here.
 * 2. For each S: B = 128K / S, H = 4096 / D (the paper's kernel table), random
 *    bf16 inputs; for every family (full first) its block sparsity rho at the
 *    first kernel's tile, then median times through the one timing harness
 *    (fm_time_interleaved, kernels/fm_cupti.h: warm-up launches, L2 flushed by
 *    a read of 4x its size before every launch, CUDA events, the columns
 *    launched interleaved so that clock drift hits them alike). Each time
 *    includes the kernel's preprocessing. With --pass bwd|both, a line per
 *    family for the first kernel's backward (skip, instrumented, noskip,
 *    deterministic; TFLOP/s by 2.5x the count at the backward's own tile).
 *    Columns: the first kernel's skip time, TFLOP/s by the paper's count
 *    4 * B * H * S * S * D * (1 - rho), efficiency against its own full-mask
 *    TFLOP/s, noskip and the speed-up next to 1 / (1 - rho), the instrumented
 *    build and its overhead (--control: the plain launch once more, timed the
 *    same way: its "overhead" is the timing method's floor, A/A); then each
 *    other kernel's skip time and the ratio
 *    (first / other); then, for sm90, the pipelining modes, work orders and
 *    partial-tile mask methods asked for (fm_attn_tuning, fm_attn_dev.h), as
 *    times; with --sm90-masks also one line per method and family: the
 *    instrumented skip launch's cycles per PARTIAL and per UNMASKED tile (the
 *    kernel's own classes and clock64 record; two rounds, the methods in
 *    alternating order); with the backward (--pass bwd|both) each method's
 *    skip backward timed in the bwd line (interleaved with its other
 *    launches) and a line of its cycles per PARTIAL and UNMASKED pair.
 *    The methods are fm_mask_method's values (1 slices, 2 r2p, 3 words);
 *    words is forward-only: its backward runs R2P, and its forward runs R2P
 *    (one stderr line) where the words exceed their budget; its times
 *    include its preprocessing.
 *    --sustained MS: one more line per
 *    family and pass, the first kernel's sustained figure under the timing
 *    protocol (docs/DESIGN.md, "How we measure": 1 s of back-to-back warm-up,
 *    then at least MS of back-to-back launches, median, SM clock and power
 *    from NVML), the figure fmsim.protocol must reproduce within 2%.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_attn.h"
#include "fm_attn_dev.h"
#include "fm_attn_check.h"
#include "fm_cupti.h"
#include "fm_families.h"
#include "fm_fileio.h"
#include "fm_json.h"
#include "fm_samples.h"
#include "fm_tiles.h"

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "fm_kernel_bench: %s failed: %s (%s:%d)\n", #call,                 \
              cudaGetErrorString(e_), __FILE__, __LINE__);                              \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

#define MAX_COLS 16
#define MAX_LIST 8

/* One timed column: a kernel, a variant, instrumented or not, sm90 knobs. */
typedef struct column {
  char label[24];
  fm_kernel_id kernel;
  fm_variant variant;
  int instr;
  fm_attn_tuning tuning;
} column;


static int in_list(const char *list, const char *name) {
  if (!strcmp(list, "all")) return 1;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return 1;
    if (!c) break;
    p = c + 1;
  }
  return 0;
}

/* Parses "a,b,c" integers into out (at most MAX_LIST); returns the count, -1 on junk. */
static int int_list(const char *s, int *out) {
  int n = 0;
  while (s && *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || n == MAX_LIST) return -1;
    out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

static int validate(const fm_kernel_id *kernels, int nk, int head_dim, fm_pass pass, const fm_sample_set *samples) {
  struct {
    const char *family;
    int32_t s, b, h;
  } cs[] = {{"causal", 1000, 1, 2}, {"random_eviction", 1000, 1, 2}, {"document", 257, 2, 3},
            {"global_sliding_window", 1000, 1, 2}, {"full", 300, 2, 2}};
  int bad = 0;
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    fm_err err;
    fm_colmask *m = NULL;
    fm_family_request req = {cs[i].family, cs[i].s, cs[i].b, cs[i].h, 7, -1, samples, 0, NULL};
    if (fm_family_build(&req, &m, NULL, &err) != FM_OK) {
      fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
      return 1;
    }
    for (int k = 0; k < nk; k++) {
      fm_check_case c = {.mask = m, .batch = cs[i].b, .heads = cs[i].h, .head_dim = head_dim,
                         .seed = 100 + i, .check_dense = 1, .kernel = kernels[k]};
      c.pass = (pass & FM_PASS_BWD) && (fm_kernel_get(kernels[k])->passes & FM_PASS_BWD) ? FM_PASS_BOTH
                                                                                        : FM_PASS_FWD;
      snprintf(c.name, sizeof c.name, "%s S=%d", cs[i].family, cs[i].s);
      fm_check_result r;
      if (fm_attn_check_run(&c, &r, &err) != FM_OK) {
        fprintf(stderr, "fm_kernel_bench: validation could not run (%s): %s\n",
                fm_kernel_get(kernels[k])->name, err.msg);
        fm_colmask_destroy(m);
        return 1;
      }
      printf("validate %-4s %-28s D=%d: %s (max err %.2e, cpu same-precision %.2e", fm_kernel_get(kernels[k])->name,
             c.name, head_dim, r.ok ? "ok" : "FAIL", r.err_gpu, r.err_cpu);
      if (r.bwd_ran)
        printf("; dQ %.2e/%.2e dK %.2e/%.2e dV %.2e/%.2e", r.bwd_err_gpu[0], r.bwd_err_cpu[0], r.bwd_err_gpu[1],
               r.bwd_err_cpu[1], r.bwd_err_gpu[2], r.bwd_err_cpu[2]);
      printf(")%s%s\n", r.ok ? "" : ": ", r.ok ? "" : r.detail);
      bad += !r.ok;
    }
    fm_colmask_destroy(m);
  }
  return bad;
}

static void usage(void) {
  printf("usage: fm_kernel_bench [--kernels sm90,sm80] [--head-dim 128] [--seqlens 8192,32768,131072]\n"
         "       [--families all|a,b] [--warmup 1] [--reps 5] [--reps-long 3] [--no-noskip]\n"
         "       [--no-instr] [--no-validate] [--sm90-modes 1,2,3,4] [--sm90-orders 1,2,3]\n"
         "       [--sm90-masks 1,2,3] [--pass fwd|bwd|both] [--control] [--json FILE] [--seed N]\n"
         "       [--sustained MS]\n");
}

typedef struct bench_opts {
  const char *seqlens, *families, *json_path;
  fm_pass pass; /* FM_PASS_FWD (0), FM_PASS_BWD or FM_PASS_BOTH */
  fm_kernel_id kernels[FM_NKERNELS];
  int nkernels, head_dim, warmup, reps, reps_long, noskip, instr, validate;
  int control; /* --control: the plain launch again, timed like the instrumented one (A/A) */
  int modes[MAX_LIST], nmodes, orders[MAX_LIST], norders;
  int masks[MAX_LIST], nmasks; /* --sm90-masks: FM_SM90_MASK_* (fm_attn_dev.h) */
  unsigned long long seed;
  double sustain_ms; /* --sustained MS: the protocol's sustained figure of the first kernel too */
} bench_opts;

static int parse_opts(int argc, char **argv, bench_opts *o) {
  static const struct option longopts[] = {
      {"seqlens", required_argument, 0, 's'},  {"families", required_argument, 0, 'f'},
      {"head-dim", required_argument, 0, 'd'}, {"reps", required_argument, 0, 'r'},
      {"reps-long", required_argument, 0, 'R'}, {"warmup", required_argument, 0, 'w'},
      {"no-noskip", no_argument, 0, 'N'},      {"no-instr", no_argument, 0, 'I'},
      {"json", required_argument, 0, 'j'},     {"seed", required_argument, 0, 'S'},
      {"no-validate", no_argument, 0, 'V'},    {"kernels", required_argument, 0, 'k'},
      {"sm90-modes", required_argument, 0, 'm'}, {"sm90-orders", required_argument, 0, 'o'},
      {"sm90-masks", required_argument, 0, 'M'},
      {"pass", required_argument, 0, 'p'},    {"control", no_argument, 0, 'C'},
      {"sustained", required_argument, 0, 'T'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  *o = (bench_opts){.seqlens = "8192,32768,131072", .families = "all", .head_dim = 128, .warmup = 1,
                    .reps = 5, .reps_long = 3, .noskip = 1, .instr = 1, .validate = 1, .seed = 1,
                    .nkernels = 1, .kernels = {FM_KERNEL_SM90}};
  int opt;
  fm_err err;
  while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (opt) {
      case 's': o->seqlens = optarg; break;
      case 'f': o->families = optarg; break;
      case 'd': o->head_dim = atoi(optarg); break;
      case 'r': o->reps = atoi(optarg); break;
      case 'R': o->reps_long = atoi(optarg); break;
      case 'w': o->warmup = atoi(optarg); break;
      case 'N': o->noskip = 0; break;
      case 'I': o->instr = 0; break;
      case 'C': o->control = 1; break;
      case 'T': o->sustain_ms = strtod(optarg, NULL); break;
      case 'j': o->json_path = optarg; break;
      case 'S': o->seed = strtoull(optarg, NULL, 10); break;
      case 'V': o->validate = 0; break;
      case 'p':
        if (fm_pass_parse(optarg, &o->pass, &err) != FM_OK) {
          fprintf(stderr, "fm_kernel_bench: --pass: %s\n", err.msg);
          return 2;
        }
        break;
      case 'm': o->nmodes = int_list(optarg, o->modes); break;
      case 'o': o->norders = int_list(optarg, o->orders); break;
      case 'M': o->nmasks = int_list(optarg, o->masks); break;
      case 'k': {
        o->nkernels = 0;
        char buf[64];
        snprintf(buf, sizeof buf, "%s", optarg);
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
          if (o->nkernels == FM_NKERNELS || fm_kernel_parse(t, &o->kernels[o->nkernels], &err) != FM_OK ||
              o->kernels[o->nkernels] == FM_KERNEL_AUTO) {
            fprintf(stderr, "fm_kernel_bench: --kernels: '%s' is not sm80 or sm90\n", t);
            return 2;
          }
          o->nkernels++;
        }
        break;
      }
      case 'h': usage(); exit(0);
      default: usage(); return 2;
    }
  }
  if (o->head_dim != 64 && o->head_dim != 128) {
    fprintf(stderr, "fm_kernel_bench: --head-dim must be 64 or 128\n");
    return 2;
  }
  if (!(o->sustain_ms >= 0 && o->sustain_ms <= 60000)) {
    fprintf(stderr, "fm_kernel_bench: --sustained takes milliseconds in 0..60000\n");
    return 2;
  }
  if (o->reps < 1 || o->reps_long < 1 || o->warmup < 0 || o->nmodes < 0 || o->norders < 0 || o->nmasks < 0 ||
      o->nkernels < 1) {
    fprintf(stderr, "fm_kernel_bench: bad --reps, --warmup, --kernels, --sm90-modes, --sm90-orders or --sm90-masks\n");
    return 2;
  }
  for (int i = 0; i < o->nmasks; i++)
    if (o->masks[i] != FM_SM90_MASK_SLICES && o->masks[i] != FM_SM90_MASK_R2P && o->masks[i] != FM_SM90_MASK_WORDS) {
      fprintf(stderr, "fm_kernel_bench: --sm90-masks: %d is not 1 (slices), 2 (r2p) or 3 (words)\n", o->masks[i]);
      return 2;
    }
  return 0;
}

/* The columns: the first kernel (skip, instrumented, noskip), the other
 * kernels (skip), the sm90 modes and orders (skip). */
static int make_columns(const bench_opts *o, column *cols) {
  int n = 0;
  const char *k0 = fm_kernel_get(o->kernels[0])->name;
  cols[n++] = (column){.kernel = o->kernels[0], .variant = FM_VARIANT_SKIP};
  snprintf(cols[n - 1].label, sizeof cols[0].label, "%s", k0);
  if (o->instr) {
    cols[n++] = (column){.kernel = o->kernels[0], .variant = FM_VARIANT_SKIP, .instr = 1};
    snprintf(cols[n - 1].label, sizeof cols[0].label, "%s/instr", k0);
  }
  if (o->control) { /* the floor of the overhead's method: plain against plain */
    cols[n++] = (column){.kernel = o->kernels[0], .variant = FM_VARIANT_SKIP};
    snprintf(cols[n - 1].label, sizeof cols[0].label, "%s/again", k0);
  }
  if (o->noskip) {
    cols[n++] = (column){.kernel = o->kernels[0], .variant = FM_VARIANT_NOSKIP};
    snprintf(cols[n - 1].label, sizeof cols[0].label, "%s/noskip", k0);
  }
  for (int k = 1; k < o->nkernels && n < MAX_COLS; k++) {
    cols[n++] = (column){.kernel = o->kernels[k], .variant = FM_VARIANT_SKIP};
    snprintf(cols[n - 1].label, sizeof cols[0].label, "%s", fm_kernel_get(o->kernels[k])->name);
  }
  for (int i = 0; i < o->nmodes && n < MAX_COLS; i++) {
    cols[n++] = (column){.kernel = FM_KERNEL_SM90, .variant = FM_VARIANT_SKIP, .tuning.sm90_mode = o->modes[i]};
    snprintf(cols[n - 1].label, sizeof cols[0].label, "sm90/mode%d", o->modes[i]);
  }
  for (int i = 0; i < o->norders && n < MAX_COLS; i++) {
    cols[n++] = (column){.kernel = FM_KERNEL_SM90, .variant = FM_VARIANT_SKIP, .tuning.sm90_order = o->orders[i]};
    snprintf(cols[n - 1].label, sizeof cols[0].label, "sm90/order%d", o->orders[i]);
  }
  for (int i = 0; i < o->nmasks && n < MAX_COLS; i++) {
    cols[n++] = (column){.kernel = FM_KERNEL_SM90, .variant = FM_VARIANT_SKIP, .tuning.sm90_mask = o->masks[i]};
    snprintf(cols[n - 1].label, sizeof cols[0].label, "sm90/mask%d", o->masks[i]);
  }
  return n;
}

/* Median ms of every column on problem pr, the columns launched interleaved
 * (fm_time_interleaved, groups of 8) so that clock drift hits them alike;
 * NaN where a launch fails (printed). ratio[c]: the median of the rounds'
 * ratios of column c to the first column of its group of 8. */
static void time_columns(const column *cols, int ncols, const fm_attn_problem *pr, int warmup, int reps,
                         double *t, double *ratio) {
  for (int c0 = 0; c0 < ncols; c0 += 8) {
    const int n = ncols - c0 < 8 ? ncols - c0 : 8;
    fm_attn_tuned_launch lc[8];
    fm_launch_fn fns[8];
    void *users[8];
    for (int i = 0; i < n; i++) {
      const column *c = &cols[c0 + i];
      lc[i].launch = (fm_attn_launch){.p = *pr, .pass = FM_PASS_FWD, .variant = c->variant, .instrumented = c->instr};
      lc[i].launch.p.kernel = c->kernel;
      lc[i].tuning = c->tuning;
      fns[i] = fm_attn_tuned_launch_run;
      users[i] = &lc[i];
    }
    fm_time_opts to = {.warmup = warmup, .reps = reps, .warmup_min_ms = 60, .flush_l2 = 1};
    fm_timing tt[8];
    fm_err err;
    const int ok = fm_time_interleaved(n, fns, users, NULL, &to, tt, ratio + c0, &err) == FM_OK;
    if (!ok) fprintf(stderr, "fm_kernel_bench: %s..: %s\n", cols[c0].label, err.msg);
    for (int i = 0; i < n; i++) {
      t[c0 + i] = ok ? tt[i].median_ms : NAN;
      if (!ok) ratio[c0 + i] = NAN;
    }
  }
}

/* The backward of the first kernel on problem pr (forward outputs in place):
 * skip, instrumented, noskip and deterministic skip and, for sm90, skip with
 * each partial-tile mask method of --sm90-masks, all interleaved, one line
 * next to the forward's; TFLOP/s by 2.5x the paper's count at the backward's
 * own tile. Returns the skip TFLOP/s. */
static double bench_backward(const bench_opts *o, fm_attn_problem *pr, const fm_colmask *m, int64_t B, int64_t H,
                             int64_t S, int warm, int nrep, double full_tflops, fm_json *j) {
  int32_t br, bc;
  fm_err err;
  fm_tile_counts counts;
  if (fm_kernel_tile_size(pr->kernel, FM_PASS_BWD, pr->head_dim, &br, &bc, &err) != FM_OK ||
      fm_classify(m, br, bc, &counts, NULL, NULL, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: backward: %s\n", err.msg);
    return NAN;
  }
  const double rho = counts.sparsity;
  const double flops = 2.5 * 4.0 * B * H * (double)S * S * pr->head_dim * (1.0 - rho);
  const struct { fm_variant var; int instr, det; } runs[4] = {
      {FM_VARIANT_SKIP, 0, 0}, {FM_VARIANT_SKIP, 1, 0}, {FM_VARIANT_NOSKIP, 0, 0}, {FM_VARIANT_SKIP, 0, 1}};
  const int nm = pr->kernel == FM_KERNEL_SM90 ? o->nmasks : 0, nr = 4 + nm;
  double t[4 + MAX_LIST];
  fm_attn_tuned_launch lc[4 + MAX_LIST];
  fm_launch_fn fns[4 + MAX_LIST];
  void *users[4 + MAX_LIST];
  for (int r = 0; r < nr; r++) { /* runs 4 ..: skip with mask method o->masks[r - 4] */
    const int k = r < 4 ? r : 0;
    lc[r] = (fm_attn_tuned_launch){
        .launch = {.p = *pr, .pass = FM_PASS_BWD, .variant = runs[k].var, .instrumented = runs[k].instr},
        .tuning = {.sm90_mask = r < 4 ? 0 : o->masks[r - 4]}};
    lc[r].launch.p.deterministic = runs[k].det;
    fns[r] = fm_attn_tuned_launch_run;
    users[r] = &lc[r];
  }
  fm_time_opts to = {.warmup = warm, .reps = nrep, .warmup_min_ms = 60, .flush_l2 = 1};
  fm_timing tt[4 + MAX_LIST];
  double ratio[4 + MAX_LIST]; /* per-round ratios to the plain skip launch, median */
  const int ok = fm_time_interleaved(nr, fns, users, NULL, &to, tt, ratio, &err) == FM_OK;
  if (!ok) fprintf(stderr, "fm_kernel_bench: backward: %s\n", err.msg);
  for (int r = 0; r < nr; r++) t[r] = ok ? tt[r].median_ms : NAN;
  const double tflops = flops / (t[0] * 1e-3) / 1e12;
  printf("  %-20s %6.3f %9.3f %8.1f %5.1f%% instr %9.3f (%+.2f%%) noskip %9.3f speedup %.2f (1/(1-rho) %.2f) "
         "deterministic %9.3f", "bwd", rho, t[0], tflops, 100 * tflops / (full_tflops > 0 ? full_tflops : tflops),
         t[1], ok ? 100 * (ratio[1] - 1) : NAN, t[2], t[2] / t[0], 1 / (1 - rho), t[3]);
  for (int r = 4; r < nr; r++) /* the ratio to skip: the median of the rounds' ratios */
    printf(" mask%d %9.3f (%.4fx)", o->masks[r - 4], t[r], ok ? ratio[r] : NAN);
  printf("\n");
  fm_json_object(j, "backward");
  fm_json_int(j, "tile_rows", br);
  fm_json_int(j, "tile_cols", bc);
  fm_json_double(j, "rho", rho);
  fm_json_double(j, "flops_paper", flops);
  fm_json_double(j, "ms_skip", t[0]);
  fm_json_double(j, "tflops", tflops);
  fm_json_double(j, "ms_skip_instrumented", t[1]);
  fm_json_double(j, "ms_noskip", t[2]);
  fm_json_double(j, "ms_skip_deterministic", t[3]);
  for (int r = 4; r < nr; r++) {
    char key[32];
    snprintf(key, sizeof key, "ms_skip_mask%d", o->masks[r - 4]);
    fm_json_double(j, key, t[r]);
    snprintf(key, sizeof key, "ratio_skip_mask%d", o->masks[r - 4]);
    fm_json_double(j, key, ok ? ratio[r] : NAN);
  }
  fm_json_end(j);
  return tflops;
}


/* The protocol's sustained figure (docs/DESIGN.md, "How we measure") of the
 * first kernel's skip launch for `pass`: 1 s of back-to-back warm-up, then
 * back-to-back launches covering at least sustain_ms, L2 flushed before each,
 * median; the SM clock and power read through NVML meanwhile. One line, and
 * a "sustained" member in the JSON record. */
static void sustained_line(const fm_attn_problem *pr, fm_pass pass, double sustain_ms, fm_json *j) {
  fm_attn_launch l = {.p = *pr, .pass = pass, .variant = FM_VARIANT_SKIP};
  fm_time_opts to = {.warmup = 1, .reps = 2, .warmup_min_ms = 1000, .flush_l2 = 1, .sustain_ms = sustain_ms};
  fm_timing t;
  fm_err err;
  if (fm_time_launches(fm_attn_launch_run, &l, NULL, &to, &t, NULL, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: sustained %s: %s\n", fm_pass_name(pass), err.msg);
    return;
  }
  printf("  %-20s sustained %s %9.3f ms (median of %d launches over %.0f ms) @ %.0f MHz, %.0f W\n", "",
         fm_pass_name(pass), t.median_ms, t.reps, t.window_ms, t.clock_mhz, t.power_w);
  fm_json_object(j, pass == FM_PASS_BWD ? "sustained_bwd" : "sustained_fwd");
  fm_json_double(j, "median_ms", t.median_ms);
  fm_json_int(j, "launches", t.reps);
  fm_json_double(j, "window_ms", t.window_ms);
  fm_json_double(j, "clock_mhz", t.clock_mhz);
  fm_json_double(j, "power_w", t.power_w);
  fm_json_end(j);
}

/* The device buffers of every case: inputs and outputs at the largest shape
 * (tokens x H x D), the backward's when it runs. */
typedef struct bench_bufs {
  void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
  float *lse;
} bench_bufs;

/* Running figures of the summary line. */
typedef struct bench_totals {
  double worst_eff, worst_over, sum_over;
  int n_over;
} bench_totals;

/* What every family row of one S shares. */
typedef struct bench_case {
  const bench_opts *o;
  const column *cols;
  int ncols;
  const fm_sample_set *samples;
  const bench_bufs *bufs;
  int64_t S, B, H;
  int head_dim, warm, nrep;
  int32_t br, bc;
  uint8_t *cls;
  int64_t *cyc;
} bench_case;

/* Allocates the buffers and fills q, k, v (and dout) with random bf16; 1 on failure. */
static int alloc_buffers(const bench_opts *o, int64_t nelem, int64_t rows, bench_bufs *bb) {
  fm_err err;
  memset(bb, 0, sizeof *bb);
  CUDA_OK(cudaMalloc(&bb->q, (size_t)nelem * 2));
  CUDA_OK(cudaMalloc(&bb->k, (size_t)nelem * 2));
  CUDA_OK(cudaMalloc(&bb->v, (size_t)nelem * 2));
  CUDA_OK(cudaMalloc(&bb->out, (size_t)nelem * 2));
  CUDA_OK(cudaMalloc((void **)&bb->lse, (size_t)rows * 4));
  if (o->pass & FM_PASS_BWD) {
    CUDA_OK(cudaMalloc(&bb->dout, (size_t)nelem * 2));
    CUDA_OK(cudaMalloc(&bb->dq, (size_t)nelem * 2));
    CUDA_OK(cudaMalloc(&bb->dk, (size_t)nelem * 2));
    CUDA_OK(cudaMalloc(&bb->dv, (size_t)nelem * 2));
    if (fm_attn_fill_random_bf16(bb->dout, nelem, o->seed * 3 + 7, NULL, &err) != FM_OK) {
      fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
      return 1;
    }
  }
  if (fm_attn_fill_random_bf16(bb->q, nelem, o->seed * 3 + 0, NULL, &err) != FM_OK ||
      fm_attn_fill_random_bf16(bb->k, nelem, o->seed * 3 + 1, NULL, &err) != FM_OK ||
      fm_attn_fill_random_bf16(bb->v, nelem, o->seed * 3 + 2, NULL, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
    return 1;
  }
  CUDA_OK(cudaDeviceSynchronize());
  return 0;
}

/* The device check, the kernels' availability and the built-in samples; the
 * exit status on failure, 0 otherwise. */
static int bench_setup(const bench_opts *o, char *dev, int cap, fm_sample_set *samples) {
  fm_err err;
  if (fm_attn_device_info(dev, cap, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: no GPU: %s\n", err.msg);
    return 2;
  }
  for (int k = 0; k < o->nkernels; k++) {
    fm_kernel_id id;
    if (fm_attn_device_kernel(o->kernels[k], &id, &err) != FM_OK) {
      fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
      return 2;
    }
  }
  if (fm_samples_builtin(samples, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
    return 1;
  }
  return 0;
}

/* The forward row of one family (its columns' times, the napkin math) and its
 * JSON members. */
static void forward_row(const bench_case *bc, const char *fam, int fi, const fm_tile_counts *counts, int32_t nsets,
                        fm_attn_problem *pr, double *full_tflops, bench_totals *tot, fm_json *j) {
  const bench_opts *o = bc->o;
  const double B = (double)bc->B, H = (double)bc->H, S = (double)bc->S;
  const double rho = counts->sparsity;
  const double flops = 4.0 * B * H * S * S * bc->head_dim * (1.0 - rho);
  /* visited tiles over every (b, h): sets broadcast over the batch/heads they cover */
  const double visited = (double)(counts->total - counts->minmax[FM_TILE_MASKED]) * (B * H / nsets);
  const double kv_gb = visited * bc->bc * bc->head_dim * 2.0 * 2.0 / 1e9;
  double t[MAX_COLS], ratio[MAX_COLS];
  time_columns(bc->cols, bc->ncols, pr, bc->warm, bc->nrep, t, ratio);
  const double tflops = flops / (t[0] * 1e-3) / 1e12;
  if (fi == 0) *full_tflops = tflops;
  const double eff = *full_tflops > 0 ? tflops / *full_tflops : NAN;
  const double t_noskip = o->noskip ? t[1 + o->instr + o->control] : NAN;
  const double again = o->control ? ratio[1 + o->instr] - 1.0 : NAN; /* A/A: the method's floor */
  const double over = o->instr ? ratio[1] - 1.0 : NAN; /* column 1 shares column 0's group */
  if (fi > 0 && eff < tot->worst_eff) tot->worst_eff = eff;
  if (o->instr) {
    if (over > tot->worst_over) tot->worst_over = over;
    tot->sum_over += over;
    tot->n_over++;
  }
  printf("%-22s %6.3f %9.3f %8.1f %5.1f%%", fam, rho, t[0], tflops, 100 * eff);
  for (int c = 1; c < bc->ncols; c++) printf(" %12.3f", t[c]);
  /* a column not run prints "-", never a nan */
  if (o->noskip) printf(" %7.2f", t_noskip / t[0]);
  else printf(" %7s", "-");
  printf(" %9.2f", 1.0 / (1.0 - rho));
  if (o->instr) printf(" %6.2f%%", 100 * over);
  else printf(" %7s", "-");
  printf(" %9.0f %8.2f", visited, kv_gb);
  if (o->control) printf("  A/A %+.2f%%", 100 * again);
  printf("\n");
  fflush(stdout);
  fm_json_double(j, "rho", rho);
  fm_json_double(j, "flops_paper", flops);
  fm_json_double(j, "tflops", tflops);
  fm_json_double(j, "efficiency_vs_full", eff);
  fm_json_double(j, "ideal_speedup", 1.0 / (1.0 - rho));
  fm_json_double(j, "instrumentation_overhead", over);
  if (o->control) fm_json_double(j, "control_overhead", again);
  fm_json_double(j, "tiles_visited", visited);
  fm_json_double(j, "kv_gbytes_model", kv_gb);
  fm_json_object(j, "ms");
  for (int c = 0; c < bc->ncols; c++) fm_json_double(j, bc->cols[c].label, t[c]);
  fm_json_end(j);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Mean and median of the cycles of the tiles of class `cls` (n tiles). */
static void class_cycles(const uint8_t *cls, const int64_t *cyc, int64_t ntiles, int want, double *buf,
                         double *mean, double *median, int64_t *n) {
  double sum = 0;
  *n = 0;
  for (int64_t t = 0; t < ntiles; t++)
    if (cls[t] == want) sum += buf[(*n)++] = (double)cyc[t];
  qsort(buf, (size_t)*n, sizeof *buf, cmp_double);
  *mean = *n ? sum / *n : NAN;
  *median = *n ? (*n % 2 ? buf[*n / 2] : 0.5 * (buf[*n / 2 - 1] + buf[*n / 2])) : NAN;
}

/* --sm90-masks: each method's instrumented skip launch of `pass` (a warm-up
 * launch, then the one read; the backward's forward outputs in place), two
 * rounds in alternating order; per method the mean over the rounds of the
 * mean and median cycles of PARTIAL and UNMASKED tiles (the backward: pairs,
 * at its own tile) (kernels/PERF_NOTES.md, "R2P (issue 25): design and SASS"). */
static void mask_cycles(const bench_case *bc, const fm_attn_problem *pr, fm_pass pass, fm_json *j) {
  const bench_opts *o = bc->o;
  int32_t br = bc->br, bcols = bc->bc;
  fm_err err;
  if (pass == FM_PASS_BWD && fm_kernel_tile_size(pr->kernel, FM_PASS_BWD, pr->head_dim, &br, &bcols, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: --sm90-masks: %s\n", err.msg);
    return;
  }
  const int64_t ntiles = bc->B * bc->H * ((bc->S + br - 1) / br) * ((bc->S + bcols - 1) / bcols);
  uint8_t *cls = malloc((size_t)ntiles);
  int64_t *cyc = malloc((size_t)ntiles * 8);
  double *buf = malloc((size_t)ntiles * sizeof(double));
  double st[MAX_LIST][4] = {{0}}; /* partial mean, median, unmasked mean, median: sums over rounds */
  int64_t np = 0, nu = 0;
  if (!cls || !cyc || !buf) {
    fprintf(stderr, "fm_kernel_bench: --sm90-masks: cannot allocate %lld tiles' records\n", (long long)ntiles);
    goto done;
  }
  for (int round = 0; round < 2; round++)
    for (int k = 0; k < o->nmasks; k++) {
      const int i = round ? o->nmasks - 1 - k : k;
      fm_attn_tuned_launch t = {.launch = {.p = *pr, .pass = pass, .variant = FM_VARIANT_SKIP, .instrumented = 1},
                                .tuning = {.sm90_mask = o->masks[i]}};
      for (int rep = 0; rep < 2; rep++)
        if (fm_attn_tuned_launch_run(&t, NULL, &err) != FM_OK) {
          fprintf(stderr, "fm_kernel_bench: --sm90-masks %d: %s\n", o->masks[i], err.msg);
          goto done;
        }
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaMemcpy(cls, pr->tile_class, (size_t)ntiles, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(cyc, pr->tile_cycles, (size_t)ntiles * 8, cudaMemcpyDeviceToHost));
      double mean, median;
      class_cycles(cls, cyc, ntiles, FM_TILE_PARTIAL, buf, &mean, &median, &np);
      st[i][0] += mean / 2, st[i][1] += median / 2;
      class_cycles(cls, cyc, ntiles, FM_TILE_UNMASKED, buf, &mean, &median, &nu);
      st[i][2] += mean / 2, st[i][3] += median / 2;
    }
  fm_json_object(j, pass == FM_PASS_BWD ? "bwd_tile_cycles_by_mask" : "tile_cycles_by_mask");
  for (int i = 0; i < o->nmasks; i++) {
    printf("  %-20s mask%d cycles/tile: partial %.0f (median %.0f, %lld tiles), unmasked %.0f (median %.0f, "
           "%lld tiles), partial/unmasked %.3f (medians %.3f)\n", pass == FM_PASS_BWD ? "bwd" : "", o->masks[i], st[i][0], st[i][1],
           (long long)np, st[i][2], st[i][3], (long long)nu, st[i][0] / st[i][2], st[i][1] / st[i][3]);
    char key[16];
    snprintf(key, sizeof key, "mask%d", o->masks[i]);
    fm_json_object(j, key);
    fm_json_double(j, "partial_mean", st[i][0]);
    fm_json_double(j, "partial_median", st[i][1]);
    fm_json_int(j, "partial_tiles", np);
    fm_json_double(j, "unmasked_mean", st[i][2]);
    fm_json_double(j, "unmasked_median", st[i][3]);
    fm_json_int(j, "unmasked_tiles", nu);
    fm_json_end(j);
  }
  fm_json_end(j);
done:
  free(cls);
  free(cyc);
  free(buf);
}

/* One family at one S: its mask, the forward row, the sustained and backward
 * lines asked for; one JSON case. 1 on a failure that stops the bench. */
static int bench_family(const bench_case *bc, int fi, double *full_tflops, double *bwd_full_tflops,
                        bench_totals *tot, fm_json *j) {
  const bench_opts *o = bc->o;
  const char *fam = fm_family_at(fi)->name;
  fm_err err;
  fm_colmask *m = NULL;
  fm_family_request req = {fam, bc->S, bc->B, bc->H, o->seed, -1, bc->samples, 0, NULL};
  fm_family_used used;
  fm_tile_counts counts;
  if (fm_family_build(&req, &m, &used, &err) != FM_OK ||
      fm_classify(m, bc->br, bc->bc, &counts, NULL, NULL, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: %s: %s\n", fam, err.msg);
    return 1;
  }
  const int32_t nsets = fm_colmask_nsets(m);
  int32_t *iv = NULL; /* (nsets, 4, S) int32, the mask's own layout (fm_colmask.h) */
  CUDA_OK(cudaMalloc((void **)&iv, (size_t)nsets * 4 * bc->S * 4));
  CUDA_OK(cudaMemcpy(iv, fm_colmask_cvec(m, 0, FM_LTS), (size_t)nsets * 4 * bc->S * 4, cudaMemcpyHostToDevice));
  const bench_bufs *bb = bc->bufs;
  fm_attn_problem pr;
  fm_attn_problem_init(&pr, m, (int32_t)bc->B, (int32_t)bc->H, bc->head_dim, 1.0f / sqrtf((float)bc->head_dim));
  pr.q = bb->q, pr.k = bb->k, pr.v = bb->v, pr.o = bb->out, pr.lse = bb->lse;
  pr.intervals = iv;
  pr.tile_class = bc->cls;
  pr.tile_cycles = bc->cyc;
  pr.kernel = o->kernels[0];
  pr.dout = bb->dout, pr.dq = bb->dq, pr.dk = bb->dk, pr.dv = bb->dv;
  fm_json_object(j, NULL);
  fm_json_string(j, "family", fam);
  fm_json_string(j, "params", used.params);
  fm_json_int(j, "seqlen", bc->S);
  fm_json_int(j, "batch", bc->B);
  fm_json_int(j, "heads", bc->H);
  fm_json_int(j, "mask_sets", nsets);
  forward_row(bc, fam, fi, &counts, nsets, &pr, full_tflops, tot, j);
  if (o->nmasks && o->kernels[0] == FM_KERNEL_SM90 && o->pass != FM_PASS_BWD) mask_cycles(bc, &pr, FM_PASS_FWD, j);
  if (o->sustain_ms > 0 && o->pass != FM_PASS_BWD) sustained_line(&pr, FM_PASS_FWD, o->sustain_ms, j);
  if (o->pass & FM_PASS_BWD) {
    /* the forward outputs the backward reads */
    if (fm_attn_forward(&pr, FM_VARIANT_SKIP, 0, NULL, &err) != FM_OK) {
      fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
      return 1;
    }
    const double bt = bench_backward(o, &pr, m, bc->B, bc->H, bc->S, bc->warm, bc->nrep, *bwd_full_tflops, j);
    if (fi == 0) *bwd_full_tflops = bt;
    if (o->nmasks && o->kernels[0] == FM_KERNEL_SM90) mask_cycles(bc, &pr, FM_PASS_BWD, j);
    if (o->sustain_ms > 0) sustained_line(&pr, FM_PASS_BWD, o->sustain_ms, j);
  }
  fm_json_end(j);
  CUDA_OK(cudaFree(iv));
  fm_colmask_destroy(m);
  return 0;
}

/* Every family at sequence length S (B = tokens / S): the table's header and
 * rows. 1 on a failure that stops the bench. */
static int bench_seqlen(bench_case *bc, int64_t tokens, bench_totals *tot, fm_json *j) {
  const bench_opts *o = bc->o;
  const int64_t S = bc->S;
  bc->B = tokens / S;
  const int long_run = S >= 65536;
  bc->warm = long_run ? (o->warmup > 0 ? 1 : 0) : o->warmup;
  bc->nrep = long_run ? o->reps_long : o->reps;
  /* instrumentation buffers at the smallest tile of any kernel */
  const int64_t ntiles = bc->B * bc->H * ((S + 63) / 64) * ((S + 63) / 64);
  bc->cls = NULL;
  bc->cyc = NULL;
  CUDA_OK(cudaMalloc((void **)&bc->cls, (size_t)ntiles));
  CUDA_OK(cudaMalloc((void **)&bc->cyc, (size_t)ntiles * 8));
  printf("\nS=%lld B=%lld H=%lld D=%d, %s tile %dx%d, paper count 4*B*H*S*S*D*(1-rho); ms, median of %d%s\n",
         (long long)S, (long long)bc->B, (long long)bc->H, bc->head_dim, fm_kernel_get(o->kernels[0])->name, bc->br,
         bc->bc, bc->nrep, bc->warm ? " after warm-up" : "");
  printf("%-22s %6s %9s %8s %6s", "family", "rho", bc->cols[0].label, "TFLOP/s", "eff");
  for (int c = 1; c < bc->ncols; c++) printf(" %12s", bc->cols[c].label);
  printf(" %7s %9s %7s %9s %8s\n", "speedup", "1/(1-rho)", "overhd", "visited", "K/V GB");
  double full_tflops = 0, bwd_full_tflops = 0;
  for (int fi = 0; fi < fm_family_count(); fi++) {
    if (fi > 0 && !in_list(o->families, fm_family_at(fi)->name)) continue;
    if (bench_family(bc, fi, &full_tflops, &bwd_full_tflops, tot, j)) return 1;
  }
  CUDA_OK(cudaFree(bc->cls));
  CUDA_OK(cudaFree(bc->cyc));
  return 0;
}

/* The summary line and members; writes --json. The exit status. */
static int bench_finish(const bench_opts *o, const bench_totals *tot, fm_json *j) {
  fm_err err;
  fm_json_end(j);
  const double worst_eff = tot->worst_eff < 1e9 ? tot->worst_eff : NAN; /* only the full mask ran: none */
  fm_json_double(j, "worst_efficiency_vs_full", worst_eff);
  fm_json_double(j, "worst_instrumentation_overhead", tot->n_over ? tot->worst_over : NAN);
  fm_json_double(j, "mean_instrumentation_overhead", tot->n_over ? tot->sum_over / tot->n_over : NAN);
  fm_json_end(j);
  if (worst_eff == worst_eff) printf("\nworst family efficiency vs full: %.1f%%", 100 * worst_eff);
  else printf("\nworst family efficiency vs full: - (only the full mask ran)");
  if (tot->n_over)
    printf("; instrumentation overhead mean %.2f%%, worst %.2f%%", 100 * tot->sum_over / tot->n_over,
           100 * tot->worst_over);
  printf("\n");
  if (o->json_path) {
    if (j->oom) {
      fprintf(stderr, "fm_kernel_bench: %s: out of memory building the JSON\n", o->json_path);
      return 1;
    }
    if (fm_write_file_atomic(o->json_path, j->buf, j->len, &err) != FM_OK) {
      fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  bench_opts o;
  int prc = parse_opts(argc, argv, &o);
  if (prc) return prc;
  char dev[256];
  fm_sample_set samples;
  prc = bench_setup(&o, dev, sizeof dev, &samples);
  if (prc) return prc;
  const int head_dim = o.head_dim;
  printf("fm_kernel_bench on %s, head dim %d\n", dev, head_dim);
  if (o.validate && validate(o.kernels, o.nkernels, head_dim, o.pass, &samples)) {
    fprintf(stderr, "fm_kernel_bench: validation failed: no timings\n");
    return 1;
  }
  column cols[MAX_COLS];
  bench_case bc = {.o = &o, .cols = cols, .ncols = make_columns(&o, cols), .samples = &samples,
                   .head_dim = head_dim};
  fm_kernel_tile_size(o.kernels[0], FM_PASS_FWD, head_dim, &bc.br, &bc.bc, NULL);

  const int64_t tokens = 131072, H = 4096 / head_dim;
  bench_bufs bufs;
  if (alloc_buffers(&o, tokens * H * head_dim, tokens * H, &bufs)) return 1;
  bc.bufs = &bufs;
  bc.H = H;

  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "device", dev);
  fm_json_int(&j, "head_dim", head_dim);
  fm_json_string(&j, "kernel", fm_kernel_get(o.kernels[0])->name);
  fm_json_int(&j, "tile_rows", bc.br);
  fm_json_int(&j, "tile_cols", bc.bc);
  fm_json_string(&j, "timing", "fm_time_interleaved: CUDA events, median, L2 flushed, columns interleaved");
  fm_json_array(&j, "cases");

  bench_totals tot = {.worst_eff = 1e9, .worst_over = -1e9};
  for (const char *sp = o.seqlens; *sp;) {
    int64_t S = strtoll(sp, NULL, 10);
    const char *comma = strchr(sp, ',');
    sp = comma ? comma + 1 : sp + strlen(sp);
    if (S < 1 || S > tokens) continue;
    bc.S = S;
    if (bench_seqlen(&bc, tokens, &tot, &j)) return 1;
  }
  if (bench_finish(&o, &tot, &j)) return 1;
  fm_json_free(&j);
  fm_samples_free(&samples);
  fm_cupti_shutdown();
  return 0;
}
