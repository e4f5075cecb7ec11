/* runner_ctx.h — what every file of the scenario runner (runner.h) shares:
 * the options of a run, the run's context, and the helpers that read a case
 * or word a message (runner_ctx.c). */
#ifndef FM_RUNNER_CTX_H
#define FM_RUNNER_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "fm_samples.h"
#include "fm_scenario.h"

/* The results of runner_case (case_build.h) and of the GPU step on a case
 * (gpu_step.h) besides 0 and -1 (a failure on the CPU side, or in writing):
 * a stop asked for between two steps; a GPU run that failed. */
#define RUNNER_STOPPED 2
#define RUNNER_GPU_FAILED (-2)

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

/* Seconds on the monotonic clock. */
double runner_now(void);

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
