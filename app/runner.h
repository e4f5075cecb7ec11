/* runner.h — the scenario runner: the one pipeline behind `fmsim run
 * SCENARIO.yaml`, `fmsim run --family ...` (a one-case scenario written
 * straight into --out) and `fmsim bench` (the shipped paper-kernel-table and
 * sparsity-sweep scenarios).
 *
 * Per case: the case builder (case_build.c) makes the mask and classifies it
 * at the scenario's tile, the simulate step models it, the GPU step
 * (gpu_step.c) classifies and models it at each requested kernel's own tile
 * and, where a GPU is usable, times it; the trace writer writes the case's
 * folder and its row. At the end the index writer (index_write.c) and the
 * report writers (report.c, report_table.c, report_figures.c) run over the
 * rows. Files by job:
 *   runner.c          the loop: pre-flight, memory estimates, resume, budget, Ctrl-C
 *   run_stop.c        SIGINT/SIGTERM: stop within a second, sweep staging folders
 *   case_build.c      masks from families and files, the analysis, the trace writer
 *   gpu_step.c        the kernels: tiles, model, timed/counted/instrumented runs
 *   case_row.c        a case's row (row.tsv, the completion mark of a case)
 *   index_write.c     index.csv, index.json, run.json
 *   report.c          report.md (summary first), cases.csv, the comparison tables
 *   report_table.c    tables as Markdown, text, CSV and LaTeX
 *   report_figures.c  the scenario's figures, from the figure registry (viz/)
 *   chunk_study.c     the intra-chunk study of chunkwise linear RNNs
 */
#ifndef FM_RUNNER_H
#define FM_RUNNER_H

#include <stdint.h>
#include <stdio.h>

#include "fm_colmask.h"
#include "fm_cost.h"
#include "fm_run_trace.h"
#include "fm_samples.h"
#include "fm_scenario.h"
#include "fm_trace.h"

/* One pass of one kernel of the GPU step on one case, at that pass's tile.
 * The CPU half (tile, rho, model, the timing model's prediction) is known
 * without a GPU; times and counters are NAN when not measured; br = 0 when
 * the pass was not asked for. */
typedef struct run_pass_rec {
  int64_t br, bc;           /* the kernel's tile for the pass at the case's head dim */
  double rho;               /* min/max rule at that tile */
  double flops;             /* the paper's count at that tile (fm_cost; backward 2.5x) */
  int64_t model_read, model_write, unique_read, unique_write; /* cost model, bytes */
  char status[160];         /* "" when it ran (or would run on a GPU); else why not */
  char source[32];          /* timing source ("cupti-activity", "cuda-events") */
  double ms, tflops;        /* the scenario's variant: median time, paper TFLOP/s */
  double noskip_ms, inst_ms; /* the no-skip variant, the instrumented build */
  double inst_overhead;     /* instrumented / plain - 1, both timed interleaved (NaN: not timed) */
  int64_t class_mismatches; /* instrumented classes vs the CPU's, -1: not compared */
  double dram_read, dram_write, l2_read; /* CUPTI Range Profiler bytes */
  double pred_ms;           /* the timing model's time of the scenario's variant (NAN: none) */
  char pred_note[160];      /* why there is none when a profile was given ("" otherwise) */
} run_pass_rec;

/* The passes of a record: p[RUN_FWD], p[RUN_BWD]. */
enum { RUN_FWD = 0, RUN_BWD = 1, RUN_NPASSES = 2 };
static inline fm_pass run_pass_of(int i) { return i == RUN_BWD ? FM_PASS_BWD : FM_PASS_FWD; }

/* One kernel of the GPU step on one case: its passes. */
typedef struct run_kernel_rec {
  char kernel[16];          /* registry name of the resolved kernel ("sm80") */
  char status[160];         /* "" when it ran; else why not (the kernel as a whole) */
  char profile[160];        /* the profile of the predictions, "NAME #HASH" ("" : none) */
  run_pass_rec p[RUN_NPASSES];
} run_kernel_rec;

/* What the index and the reports know of a case; persisted as row.tsv. */
typedef struct case_row {
  char id[256], family[64], params[512], form[16], steps[128], docs_source[160];
  char gpu_settings[128]; /* the GPU step's settings the kernels ran with (resume compares them) */
  int64_t seqlen, head_dim, br, bc, batch, heads, sets, mask_nb, mask_nh, causal;
  int64_t sample, seed, ndocs;
  int64_t masked, partial, unmasked, total;
  int64_t partial_but_masked, partial_but_unmasked; /* rule says partial, exact class differs */
  int64_t dense_bytes, block_mask_bytes, interval_bytes;
  double rho, rho_exact, rho_128;
  double chunk_rho, chunk_boundaries; /* chunks report: NAN otherwise */
  int64_t sim_read, sim_write;         /* simulate step: modelled bytes, -1 if not run */
  double sim_flops;                    /* simulate step: the paper's FLOP count at Br x Bc */
  int64_t nkernels, gpu_ran;           /* kernels of the GPU step; any of them timed */
  int64_t pass;                        /* the scenario's passes: FM_PASS_* bits */
  run_kernel_rec k[FM_SCN_MAX_KERNELS];
} case_row;

/* Writes / reads a row (tab-separated "name\tvalue" lines). read: 0 when the
 * file holds every field. */
int case_row_write(FILE *f, const case_row *r);
int case_row_read(const char *path, case_row *r);
void case_row_clear(case_row *r); /* zero, NANs where "not measured" is NAN */
void run_pass_rec_clear(run_pass_rec *k); /* the same for one pass record */

/* A run of one scenario. */
typedef struct runner_opts {
  const char *cmd;         /* "run" or "bench": the prefix of every message */
  const char *out;         /* output folder (single: the trace folder) */
  const char *only;        /* shell pattern of case ids, NULL: every case */
  int single;              /* one case, traced straight into out; no index, no report */
  const char *no_gpu_why;  /* non-NULL: no GPU step on the device ("--cpu", "--export-only") */
  double deadline;         /* monotonic seconds past which no case times kernels; 0: none */
  int quiet;               /* no closing "N cases -> report" line */
  int json;                /* single: print JSON instead of the text report */
} runner_opts;

/* Everything one case produced, for the single form's report. */
typedef struct run_case_out {
  const fm_analysis *analysis;
  const fm_run_info *info; /* the forward's */
  fm_pass pass;            /* the passes asked for */
  const fm_run_info *bwd;  /* the backward's (its analysis at its tile), NULL without one */
} run_case_out;

/* The single form's report (cmd_run.c prints it). */
void run_print_report(const run_case_out *c, const char *out, int json);

/* Runs every case of s. The exit code of the command (FM_EXIT_*, or 130
 * when interrupted); every error was printed as one line. */
int runner_run(const fm_scenario *s, const runner_opts *o);

/* Seconds on the monotonic clock. */
double runner_now(void);

/* ---- shared between the runner's files ---------------------------------------------- */

typedef struct gpu_step gpu_step;
struct fm_gpu_profile;

/* What the whole run shares. */
typedef struct runner_ctx {
  const fm_scenario *s;
  const runner_opts *o;
  fm_sample_set samples;
  gpu_step *gpu;
  struct fm_gpu_profile *profile; /* the scenario's (profile:, --gpu), NULL: none; owned */
  char tile_note[300]; /* single form on the CPU: where its tile size came from */
  char where[4200];    /* scratch for error prefixes */
  char label[300];
} runner_ctx;

/* The GPU step's settings as a row records them ("" without a GPU step). */
void runner_gpu_settings(const fm_scenario *s, char *buf, size_t cap);

/* A case's sequence length (a file mask's from its header) and vector sets
 * (B*H for per-head families and files that hold them, else 1). */
int64_t runner_case_length(runner_ctx *rc, const fm_scn_case *c);
int64_t runner_case_sets(runner_ctx *rc, const fm_scn_case *c);

/* "FILE:LINE: key 'K': " for scenario files, "" for the single form. */
const char *runner_where(runner_ctx *rc, int line, const char *key);
/* "case ID: " in a scenario, "" for the single form. */
const char *runner_case_label(runner_ctx *rc, const fm_scn_case *c);

#endif
