/* case_row.h — the scenario runner's records (runner.h): a case's row, what
 * the index and the reports know of a case, with one record per kernel of
 * the GPU step and one per pass of that kernel. A row is persisted as the
 * case's row.tsv (case_row.c), the completion mark of a case. */
#ifndef FM_CASE_ROW_H
#define FM_CASE_ROW_H

#include <stdint.h>
#include <stdio.h>

#include "fm_kernels.h"
#include "fm_scenario.h"

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
  char gpu_settings[192]; /* the GPU step's settings the kernels ran with (resume compares them) */
  int64_t seqlen, head_dim, br, bc, batch, heads, sets, mask_nb, mask_nh, causal;
  int64_t sample, seed, ndocs;
  int64_t masked, partial, unmasked, total;
  int64_t partial_but_masked, partial_but_unmasked; /* rule says partial, exact class differs */
  int64_t dense_bytes, block_mask_bytes, interval_bytes;
  double rho, rho_exact, rho_128;
  double chunk_rho, chunk_boundaries; /* chunks report: NAN otherwise */
  double chunk_visited, chunk_partial, chunk_work; /* chunks report, fm_linrnn_cpu.h: the skip
                                       variant's visited and partial sub-tiles (fractions), its
                                       FLOPs over noskip's; NAN otherwise */
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

#endif
