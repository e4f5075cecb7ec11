/* cp_cli.h — what `fmsim cp-plan` and `fmsim cp-run` share (context
 * parallelism, issue 24; docs/DESIGN.md, "Context parallelism"): the mask
 * options (timing_cli.h's, with --br/--bc refused: the kernel's tiles
 * decide), the plan's options, the bound on the timing model's work and
 * making the plan (core/fm_cp_plan.h). */
#ifndef FM_CP_CLI_H
#define FM_CP_CLI_H

#include <getopt.h>
#include <stdint.h>

#include "fm_colmask.h"
#include "fm_cp_plan.h"
#include "fm_kernels.h"
#include "fm_timing.h"
#include "timing_cli.h"

typedef struct cp_cli_opts {
  timing_mask src;          /* the mask (first member: cp_cli_mask_opt reads it) */
  int64_t ranks, chunk, head_dim;
  unsigned shardings;       /* bits (1u << fm_cp_sharding); 0: all */
  int best;                 /* --sharding plan: every sharding planned, cp-run runs fm_cp_plan_best's */
  int exact, json, long_run;
  fm_kernel_id kernel;
  const char *gpu;          /* --gpu PROFILE (NULL: the kernel's default) */
  double link_gbs, link_us, gpu_gbs, mem_gib; /* 0: the plan's defaults */
  double comm_sm_frac;      /* --comm-sms: 0 the plan's default, negative none */
  fm_clock clock, allgather_clock; /* --clock: auto by default (fm_cp_clock_parse) */
} cp_cli_opts;

/* Option values of the plan's options, above every other command's. */
enum { CP_O_RANKS = 5001, CP_O_SHARDING, CP_O_CHUNK, CP_O_EXACT, CP_O_KERNEL, CP_O_HEAD_DIM,
       CP_O_GPU, CP_O_JSON, CP_O_LINK_GBS, CP_O_LINK_US, CP_O_GPU_GBS, CP_O_MEM, CP_O_LONG, CP_O_COMM_SMS, CP_O_CLOCK,
       CP_O_NEXT };

/* The long options of the mask and the plan (cp_cli_opt takes them). */
#define CP_CLI_LONGOPTS                                                                          \
  TIMING_MASK_LONGOPTS, {"ranks", required_argument, 0, CP_O_RANKS},                             \
      {"sharding", required_argument, 0, CP_O_SHARDING}, {"chunk", required_argument, 0, CP_O_CHUNK}, \
      {"exact", no_argument, 0, CP_O_EXACT}, {"kernel", required_argument, 0, CP_O_KERNEL},      \
      {"head-dim", required_argument, 0, CP_O_HEAD_DIM}, {"gpu", required_argument, 0, CP_O_GPU}, \
      {"json", no_argument, 0, CP_O_JSON}, {"link-gbs", required_argument, 0, CP_O_LINK_GBS},    \
      {"link-us", required_argument, 0, CP_O_LINK_US}, {"gpu-gbs", required_argument, 0, CP_O_GPU_GBS}, \
      {"mem-gib", required_argument, 0, CP_O_MEM},                                                 \
      {"long-run", no_argument, 0, CP_O_LONG}, {"comm-sms", required_argument, 0, CP_O_COMM_SMS},  \
      {"clock", required_argument, 0, CP_O_CLOCK}

/* Defaults: head dim 128, kernel auto, the mask's timing_mask_init. */
void cp_cli_init(cp_cli_opts *o);
/* A cli_shared_opt_fn over a struct whose first member is a cp_cli_opts:
 * the mask's options, --br and --bc refused. */
int cp_cli_mask_opt(const char *cmd, void *opts, int opt, const char *arg);
/* The plan's options (CP_O_*): 1 taken, -1 a bad value (printed), 0 none of them. */
int cp_cli_opt(const char *cmd, cp_cli_opts *o, int opt, const char *arg);
/* After the options: --ranks given, and timing_mask_check. 0, or -1 after printing. */
int cp_cli_check(const char *cmd, cp_cli_opts *o);
/* The bound on the timing model's work of the plan (timing_cli.h): 0, or -1
 * after printing. */
int cp_cli_work_check(const char *cmd, const cp_cli_opts *o, const fm_gpu_profile *prof,
                      const fm_colmask *m);
/* The plan of m (the caller destroys it); NULL after printing the error. */
fm_cp_plan *cp_cli_plan(const char *cmd, const cp_cli_opts *o, const fm_colmask *m,
                        const fm_gpu_profile *prof);

#endif
