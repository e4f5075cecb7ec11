/* fm_kernel_bench — the forward kernel's development harness (llm.c dev/cuda
 * style): validate first, then time.
 *
 *   fm_kernel_bench [--seqlens 8192,32768,131072] [--families all|a,b,...]
 *                   [--head-dim 128] [--reps N] [--reps-long N] [--no-noskip]
 *                   [--no-instr] [--no-validate] [--json FILE] [--seed N]
 *
 * 1. Validation: a few small cases through fm_attn_check_run (CPU fp64
 *    reference, skip == noskip, classes == core); any failure stops here.
 * 2. For each S: B = 128K / S, H = 4096 / D (the paper's kernel table), random
 *    bf16 inputs; for every family (full first) the interval mask, its block
 *    sparsity rho at the kernel's own tile size, then median times (CUDA events,
 *    L2 flushed by a 256 MiB memset before every launch, warm-up launches
 *    discarded) of skip, instrumented skip and noskip, launched interleaved
 *    (skip, instr, noskip, skip, ...) so that drift hits all three alike. Each
 *    time includes the tile-bounds preprocessing kernel.
 * Printed next to every time: TFLOP/s by the paper's count
 * 4 * B * H * S * S * D * (1 - rho), efficiency against the kernel's own
 * full-mask TFLOP/s at the same S, skip vs noskip speed-up next to 1 / (1 - rho),
 * instrumentation overhead, tiles visited and K/V bytes those tiles load.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_attn.h"
#include "fm_attn_check.h"
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
#define FM_OK_OR_DIE(call)                                                              \
  do {                                                                                  \
    fm_err err_;                                                                        \
    fm_status s_ = (call);                                                              \
    if (s_ != FM_OK) {                                                                  \
      fprintf(stderr, "fm_kernel_bench: %s failed: %s\n", #call, err_.msg);              \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct timer {
  cudaEvent_t e0, e1;
  void *flush;
  size_t flush_bytes;
} timer;

/* One timed launch (ms), L2 flushed before it. */
static double time_once(timer *t, const fm_attn_problem *pr, fm_variant var, int instr, int it) {
  CUDA_OK(cudaMemsetAsync(t->flush, it & 0xff, t->flush_bytes, NULL));
  CUDA_OK(cudaEventRecord(t->e0, NULL));
  fm_err err;
  fm_status st = fm_attn_forward(pr, var, instr, NULL, &err);
  if (st != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: forward failed: %s\n", err.msg);
    exit(1);
  }
  CUDA_OK(cudaEventRecord(t->e1, NULL));
  CUDA_OK(cudaEventSynchronize(t->e1));
  CUDA_OK(cudaGetLastError());
  float f;
  CUDA_OK(cudaEventElapsedTime(&f, t->e0, t->e1));
  return f;
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof x[0], cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

typedef struct variant_spec {
  fm_variant var;
  int instr, enabled;
} variant_spec;

#define MAX_VARIANTS 4
#define MAX_REPS 64

/* Median times (ms) of nv <= MAX_VARIANTS variants, launched interleaved
 * (v0, v1, v2, v0, ...) so that clock or thermal drift affects them alike:
 * `warmup` rounds discarded, then `reps` rounds (1..MAX_REPS, checked by
 * main). out[v] is NAN for a variant not enabled. */
static void time_interleaved(timer *t, const fm_attn_problem *pr, const variant_spec *vs, int nv,
                             int warmup, int reps, double *out) {
  double ms[MAX_VARIANTS][MAX_REPS];
  for (int it = 0; it < warmup + reps; it++)
    for (int v = 0; v < nv; v++)
      if (vs[v].enabled) {
        double f = time_once(t, pr, vs[v].var, vs[v].instr, it * nv + v);
        if (it >= warmup) ms[v][it - warmup] = f;
      }
  for (int v = 0; v < nv; v++) out[v] = vs[v].enabled ? median(ms[v], reps) : NAN;
}

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

static int validate(int head_dim, const fm_sample_set *samples) {
  struct {
    const char *family;
    int32_t s, b, h;
  } cs[] = {{"causal", 1000, 1, 2}, {"random_eviction", 1000, 1, 2}, {"document", 257, 2, 3},
            {"global_sliding_window", 1000, 1, 2}};
  int bad = 0;
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    fm_err err;
    fm_colmask *m = NULL;
    fm_family_request req = {cs[i].family, cs[i].s, cs[i].b, cs[i].h, 7, -1, samples, 0, NULL};
    if (fm_family_build(&req, &m, NULL, &err) != FM_OK) {
      fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
      return 1;
    }
    fm_check_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s S=%d", cs[i].family, cs[i].s);
    c.mask = m;
    c.batch = cs[i].b;
    c.heads = cs[i].h;
    c.head_dim = head_dim;
    c.seed = 100 + i;
    c.check_dense = 1;
    fm_check_result r;
    if (fm_attn_check_run(&c, &r, &err) != FM_OK) {
      fprintf(stderr, "fm_kernel_bench: validation could not run: %s\n", err.msg);
      fm_colmask_destroy(m);
      return 1;
    }
    printf("validate %-28s D=%d: %s (max err %.2e, cpu same-precision %.2e)%s%s\n", c.name,
           head_dim, r.ok ? "ok" : "FAIL", r.err_gpu, r.err_cpu, r.ok ? "" : ": ",
           r.ok ? "" : r.detail);
    bad += !r.ok;
    fm_colmask_destroy(m);
  }
  return bad;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"seqlens", required_argument, 0, 's'},  {"families", required_argument, 0, 'f'},
      {"head-dim", required_argument, 0, 'd'}, {"reps", required_argument, 0, 'r'},
      {"reps-long", required_argument, 0, 'R'}, {"no-noskip", no_argument, 0, 'N'},
      {"no-instr", no_argument, 0, 'I'},       {"json", required_argument, 0, 'j'},
      {"seed", required_argument, 0, 'S'},     {"no-validate", no_argument, 0, 'V'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  const char *seqlens = "8192,32768,131072", *families = "all", *json_path = NULL;
  int head_dim = 128, reps = 5, reps_long = 3, do_noskip = 1, do_instr = 1, do_validate = 1;
  unsigned long long seed = 1;
  int opt;
  while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (opt) {
      case 's': seqlens = optarg; break;
      case 'f': families = optarg; break;
      case 'd': head_dim = atoi(optarg); break;
      case 'r': reps = atoi(optarg); break;
      case 'R': reps_long = atoi(optarg); break;
      case 'N': do_noskip = 0; break;
      case 'I': do_instr = 0; break;
      case 'j': json_path = optarg; break;
      case 'S': seed = strtoull(optarg, NULL, 10); break;
      case 'V': do_validate = 0; break;
      case 'h':
        printf("usage: fm_kernel_bench [--seqlens 8192,32768,131072] [--families all|a,b]\n"
               "       [--head-dim 128] [--reps 5] [--reps-long 3] [--no-noskip] [--no-instr]\n"
               "       [--no-validate] [--json FILE] [--seed N]\n");
        return 0;
      default: return 2;
    }
  }
  if (head_dim != 64 && head_dim != 128) {
    fprintf(stderr, "fm_kernel_bench: --head-dim must be 64 or 128\n");
    return 2;
  }
  if (reps < 1 || reps > MAX_REPS || reps_long < 1 || reps_long > MAX_REPS) {
    fprintf(stderr, "fm_kernel_bench: --reps and --reps-long must be in 1..%d\n", MAX_REPS);
    return 2;
  }
  fm_err err;
  char dev[256];
  if (fm_attn_device_info(dev, sizeof dev, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: no GPU: %s\n", err.msg);
    return 2;
  }
  fm_sample_set samples;
  if (fm_samples_builtin(&samples, &err) != FM_OK) {
    fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
    return 1;
  }
  printf("fm_kernel_bench on %s, head dim %d\n", dev, head_dim);
  if (do_validate && validate(head_dim, &samples)) {
    fprintf(stderr, "fm_kernel_bench: validation failed: no timings\n");
    return 1;
  }
  int32_t br, bc;
  fm_kernel_tile_size(FM_KERNEL_SM80, head_dim, &br, &bc, NULL);

  /* memory pool keeps the bounds workspace between launches */
  cudaMemPool_t pool;
  CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t thresh = UINT64_MAX;
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thresh));
  timer tm;
  tm.flush_bytes = (size_t)256 << 20;
  CUDA_OK(cudaMalloc(&tm.flush, tm.flush_bytes));
  CUDA_OK(cudaEventCreate(&tm.e0));
  CUDA_OK(cudaEventCreate(&tm.e1));

  const int64_t tokens = 131072, H = 4096 / head_dim;
  const int64_t nelem = tokens * H * head_dim;
  void *q, *k, *v, *o;
  float *lse;
  CUDA_OK(cudaMalloc(&q, (size_t)nelem * 2));
  CUDA_OK(cudaMalloc(&k, (size_t)nelem * 2));
  CUDA_OK(cudaMalloc(&v, (size_t)nelem * 2));
  CUDA_OK(cudaMalloc(&o, (size_t)nelem * 2));
  CUDA_OK(cudaMalloc((void **)&lse, (size_t)tokens * H * 4));
  FM_OK_OR_DIE(fm_attn_fill_random_bf16(q, nelem, seed * 3 + 0, NULL, &err_));
  FM_OK_OR_DIE(fm_attn_fill_random_bf16(k, nelem, seed * 3 + 1, NULL, &err_));
  FM_OK_OR_DIE(fm_attn_fill_random_bf16(v, nelem, seed * 3 + 2, NULL, &err_));
  CUDA_OK(cudaDeviceSynchronize());

  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "device", dev);
  fm_json_int(&j, "head_dim", head_dim);
  fm_json_int(&j, "tile_rows", br);
  fm_json_int(&j, "tile_cols", bc);
  fm_json_string(&j, "timing", "CUDA events, median, L2 flushed (256 MiB memset) before each launch");
  fm_json_array(&j, "cases");

  double worst_eff = 1e9, worst_over = -1e9, sum_over = 0;
  int n_over = 0;
  for (const char *sp = seqlens; *sp;) {
    int64_t S = strtoll(sp, NULL, 10);
    const char *comma = strchr(sp, ',');
    sp = comma ? comma + 1 : sp + strlen(sp);
    if (S < 1 || S > tokens) continue;
    const int64_t B = tokens / S;
    const int long_run = S >= 65536;
    const int warm = long_run ? 0 : 1, nrep = long_run ? reps_long : reps;
    const int64_t tr = (S + br - 1) / br, tc = (S + bc - 1) / bc;
    const int64_t ntiles = B * H * tr * tc;
    uint8_t *cls = NULL;
    int64_t *cyc = NULL;
    if (do_instr) {
      CUDA_OK(cudaMalloc((void **)&cls, (size_t)ntiles));
      CUDA_OK(cudaMalloc((void **)&cyc, (size_t)ntiles * 8));
    }
    printf("\nS=%lld B=%lld H=%lld D=%d tile %dx%d, %s; times in ms (median of %d%s)\n",
           (long long)S, (long long)B, (long long)H, head_dim, br, bc,
           "paper count 4*B*H*S*S*D*(1-rho)", nrep, warm ? " after 1 warm-up" : "");
    printf("%-22s %6s %9s %8s %6s %9s %7s %9s %9s %7s %10s %8s\n", "family", "rho", "skip",
           "TFLOP/s", "eff", "noskip", "speedup", "1/(1-rho)", "instr", "overhd", "visited", "K/V GB");
    double full_tflops = 0;
    for (int fi = 0; fi < fm_family_count(); fi++) {
      const char *fam = fm_family_at(fi)->name;
      if (fi > 0 && !in_list(families, fam)) continue;
      fm_colmask *m = NULL;
      fm_family_request req = {fam, S, B, H, seed, -1, &samples, 0, NULL};
      fm_family_used used;
      if (fm_family_build(&req, &m, &used, &err) != FM_OK) {
        fprintf(stderr, "fm_kernel_bench: %s: %s\n", fam, err.msg);
        return 1;
      }
      fm_tile_counts counts;
      if (fm_classify(m, br, bc, &counts, NULL, NULL, &err) != FM_OK) {
        fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
        return 1;
      }
      const int32_t nsets = fm_colmask_nsets(m);
      int32_t *iv = NULL; /* (nsets, 4, S) int32, the mask's own layout (fm_colmask.h) */
      CUDA_OK(cudaMalloc((void **)&iv, (size_t)nsets * 4 * S * 4));
      CUDA_OK(cudaMemcpy(iv, fm_colmask_cvec(m, 0, FM_LTS), (size_t)nsets * 4 * S * 4,
                         cudaMemcpyHostToDevice));
      fm_attn_problem pr;
      fm_attn_problem_init(&pr, m, (int32_t)B, (int32_t)H, head_dim, 1.0f / sqrtf((float)head_dim));
      pr.q = q, pr.k = k, pr.v = v, pr.o = o, pr.lse = lse;
      pr.intervals = iv;
      pr.tile_class = cls;
      pr.tile_cycles = cyc;
      const double rho = counts.sparsity;
      const double flops = 4.0 * B * H * (double)S * S * head_dim * (1.0 - rho);
      /* visited tiles over every (b, h): sets broadcast over the batch/heads they cover */
      const double visited = (double)(counts.total - counts.minmax[FM_TILE_MASKED]) *
                             ((double)B * H / nsets);
      const double kv_gb = visited * bc * head_dim * 2.0 * 2.0 / 1e9;
      const variant_spec vs[3] = {{FM_VARIANT_SKIP, 0, 1},
                                  {FM_VARIANT_SKIP, 1, do_instr},
                                  {FM_VARIANT_NOSKIP, 0, do_noskip}};
      double tv[3];
      time_interleaved(&tm, &pr, vs, 3, warm, nrep, tv);
      const double t_skip = tv[0], t_instr = tv[1], t_noskip = tv[2];
      const double tflops = flops / (t_skip * 1e-3) / 1e12;
      if (fi == 0) full_tflops = tflops;
      const double eff = full_tflops > 0 ? tflops / full_tflops : NAN;
      const double over = do_instr ? (t_instr / t_skip - 1.0) : NAN;
      if (fi > 0 && eff < worst_eff) worst_eff = eff;
      if (do_instr) {
        if (over > worst_over) worst_over = over;
        sum_over += over;
        n_over++;
      }
      printf("%-22s %6.3f %9.3f %8.1f %5.1f%% %9.3f %7.2f %9.2f %9.3f %6.2f%% %10.0f %8.2f\n", fam,
             rho, t_skip, tflops, 100 * eff, t_noskip, t_noskip / t_skip, 1.0 / (1.0 - rho),
             t_instr, 100 * over, visited, kv_gb);
      fflush(stdout);
      fm_json_object(&j, NULL);
      fm_json_string(&j, "family", fam);
      fm_json_string(&j, "params", used.params);
      fm_json_int(&j, "seqlen", S);
      fm_json_int(&j, "batch", B);
      fm_json_int(&j, "heads", H);
      fm_json_int(&j, "mask_sets", nsets);
      fm_json_double(&j, "rho", rho);
      fm_json_double(&j, "flops_paper", flops);
      fm_json_double(&j, "ms_skip", t_skip);
      fm_json_double(&j, "tflops_skip", tflops);
      fm_json_double(&j, "efficiency_vs_full", eff);
      fm_json_double(&j, "ms_noskip", t_noskip);
      fm_json_double(&j, "speedup_skip_vs_noskip", t_noskip / t_skip);
      fm_json_double(&j, "ideal_speedup", 1.0 / (1.0 - rho));
      fm_json_double(&j, "ms_skip_instrumented", t_instr);
      fm_json_double(&j, "instrumentation_overhead", over);
      fm_json_double(&j, "tiles_visited", visited);
      fm_json_double(&j, "kv_gbytes_model", kv_gb);
      fm_json_end(&j);
      CUDA_OK(cudaFree(iv));
      fm_colmask_destroy(m);
    }
    CUDA_OK(cudaFree(cls));
    CUDA_OK(cudaFree(cyc));
  }
  fm_json_end(&j);
  fm_json_double(&j, "worst_efficiency_vs_full", worst_eff);
  fm_json_double(&j, "worst_instrumentation_overhead", worst_over);
  fm_json_double(&j, "mean_instrumentation_overhead", n_over ? sum_over / n_over : NAN);
  fm_json_end(&j);
  printf("\nworst family efficiency vs full: %.1f%%; instrumentation overhead mean %.2f%%, worst %.2f%%\n",
         100 * worst_eff, n_over ? 100 * sum_over / n_over : NAN, 100 * worst_over);
  if (json_path) {
    if (j.oom) {
      fprintf(stderr, "fm_kernel_bench: %s: out of memory building the JSON\n", json_path);
      return 1;
    }
    if (fm_write_file_atomic(json_path, j.buf, j.len, &err) != FM_OK) {
      fprintf(stderr, "fm_kernel_bench: %s\n", err.msg);
      return 1;
    }
  }
  fm_json_free(&j);
  fm_samples_free(&samples);
  return 0;
}
