/* case_build.h — the runner's case builder (case_build.c, runner.h lists the
 * runner's files): a case's mask, its analysis, its kernels' runs and its
 * folder, and the case in progress they share. */
#ifndef FM_CASE_BUILD_H
#define FM_CASE_BUILD_H

#include "case_row.h"
#include "fm_families.h"
#include "gpu_step.h"
#include "runner_ctx.h"

/* One case while it runs: the mask, its classes at the case's tile
 * ((sets, Tr, Tc) each), the model, the kernels' runs. */
typedef struct case_work {
  const fm_scn_case *c;
  fm_colmask *m;
  fm_family_used used;
  fm_analysis a;
  uint8_t *classes, *exact;
  int64_t *tile_bytes;     /* single form only: modelled bytes per tile */
  fm_cost cost;            /* simulate step (and the single form) */
  int have_cost;
  double rho_128, chunk_rho, chunk_boundaries;
  double chunk_visited, chunk_partial, chunk_work; /* chunks report: fm_linrnn_cpu.h counts */
  gpu_kernel_run runs[FM_SCN_MAX_KERNELS];
} case_work;

/* The one case builder: the case's mask from its family or file. Prints the
 * error (with the scenario's file, line and key). */
int case_build_mask(runner_ctx *rc, const fm_scn_case *c, fm_colmask **out, fm_family_used *used);

/* Writes a scenario case's row into dir/row.tsv, atomically (its completion
 * mark); 0, or -1 after printing. */
int case_row_save(runner_ctx *rc, const fm_scn_case *c, const char *dir, const case_row *row);

/* Runs one case and writes its folder (dir) and row: 0, -1 or
 * RUNNER_GPU_FAILED on a failure (printed), RUNNER_STOPPED when interrupted
 * between steps. */
int runner_case(runner_ctx *rc, const fm_scn_case *c, const char *dir, case_row *row);

#endif
