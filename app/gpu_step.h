/* gpu_step.h — the GPU step of the scenario runner (runner.h): the scenario's
 * kernels on each case, for each pass the scenario asks for (pass: fwd, bwd
 * or both). Per kernel and pass, what the CPU knows without a GPU (the
 * kernel's tile for the pass from the registry, rho there, the cost model)
 * and, where a device runs it, the timed launches of the scenario's variant
 * (median after warm-up, L2 flushed; the backward after one forward that
 * gives it O and LSE), the counted launch (CUPTI Range Profiler), the
 * instrumented build (its time and its per-tile classes against the CPU's)
 * and the no-skip variant. A kernel without the pass says so in the pass's
 * status. One GPU session serves the whole run.
 *
 * Predictions (core/fm_timing.h, through timing_cli.h): where a kernel has a
 * GPU profile, each pass it models gets the predicted time of the scenario's
 * variant on the case's mask at the pass's tile, with or without a device;
 * the profile is the scenario's (profile:, `run --gpu`, `bench --gpu`) for
 * its kernel, else on a device that times the kernels the GPU's own
 * (data/gpu/GPU-KERNEL.json, timing_default_profile). */
#ifndef FM_GPU_STEP_H
#define FM_GPU_STEP_H

#include "case_row.h"
#include "fm_cost.h"
#include "fm_run_trace.h"
#include "runner_ctx.h"

struct gpu_step {
  int wanted;            /* the scenario (or the single form) asks for kernels */
  char skip_reason[400]; /* "" when kernels are timed on a device */
  char device[160];      /* the GPU's name, "cpu-simulation" without one */
  char device_desc[256]; /* fm_attn_device_info's line, "" without a GPU */
  int32_t clock_khz;
  int nkernels;          /* the requested kernels, resolved and distinct */
  fm_kernel_id kernel[FM_SCN_MAX_KERNELS];
  char kernel_status[FM_SCN_MAX_KERNELS][160]; /* "" runnable here; else why not */
  void *session;         /* fm_gpu_session when built with the kernels */
  struct fm_gpu_profile *profile[FM_SCN_MAX_KERNELS]; /* each kernel's, NULL: none; owned */
  char profile_sig[FM_SCN_MAX_KERNELS][160];         /* "NAME #HASH" of it ("" : none) */
};

/* One pass of one kernel on one case. */
typedef struct gpu_pass_run {
  fm_analysis a;          /* the mask at the pass's tile (counts filled) */
  uint8_t *classes;       /* (sets, Tr, Tc) at that tile; owned; NULL: pass not modelled */
  fm_cost cost;           /* the scenario's variant at that tile, for the pass */
  int ran;                /* timed on the GPU */
  fm_timing timing, timing_inst, noskip;
  fm_measured_bytes measured;
  uint8_t *tile_class;    /* (B, H, Tr, Tc) the kernel's record, or NULL; owned */
  int64_t *tile_cycles;   /* (B, H, Tr, Tc), or NULL; owned */
} gpu_pass_run;

/* One kernel's run on one case; gpu_kernel_run_free releases it. */
typedef struct gpu_kernel_run {
  run_kernel_rec rec;
  gpu_pass_run p[RUN_NPASSES]; /* RUN_FWD, RUN_BWD */
  int ran;                /* some pass timed on the GPU */
  fm_timeline timeline;   /* kernel records (single form), events owned */
} gpu_kernel_run;

/* The tile of kernel id for one pass at head dim D (fm_kernel_tile_size,
 * FM_KERNEL_AUTO as without a device): 0, or -1 with why it has none in why. */
int gpu_pass_tile(fm_kernel_id id, fm_pass pass, int32_t D, int32_t *br, int32_t *bc, char *why,
                  size_t cap);

/* Resolves the kernels and opens the session (when the scenario wants the
 * GPU step and a device is usable); what cannot run is said in
 * skip_reason / kernel_status, never an error. cases: to size the session. */
void gpu_step_open(gpu_step *g, runner_ctx *rc, const fm_scn_case *cases, int ncases);
void gpu_step_close(gpu_step *g); /* the session and the profiles */

/* The scenario's profile (s->profile: a name in data/gpu or a file) into
 * rc->profile, before anything runs; NULL when it names none. A bad one
 * (unknown name, malformed file, a tile not the kernel's): one line naming
 * the key's line or the --gpu option, -1. */
int gpu_step_profile_load(runner_ctx *rc);
/* Each kernel's profile, after gpu_step_open: rc->profile for its kernel,
 * which must be one the run times or models (else one line, -1), and the
 * GPU's own for the others where a device times them. A note on stderr for
 * a profile found by the device's name. */
int gpu_step_profiles(gpu_step *g, runner_ctx *rc);
/* The predictions of kernel k on case c (its mask m) into the passes rec
 * models (br > 0): pred_ms, or pred_note saying why there is none. */
void gpu_step_predict(const gpu_step *g, runner_ctx *rc, const fm_scn_case *c, const fm_colmask *m,
                      int k, run_kernel_rec *rec);
/* Flushes and releases CUPTI once the command is done with the GPU (idempotent). */
void gpu_step_shutdown(void);

/* 1 when this fmsim can time kernels on a device here (text: the device);
 * 0 with the reason in text. */
int gpu_step_usable(char *text, int cap);

/* The kernels on one case (m classified at the case's tile into classes).
 * runs[g->nkernels] are filled; 0 on success, -1 on a failure (printed). */
int gpu_step_case(gpu_step *g, runner_ctx *rc, const fm_scn_case *c, const fm_colmask *m,
                  const fm_analysis *case_a, const uint8_t *classes, gpu_kernel_run *runs);
void gpu_kernel_run_free(gpu_kernel_run *r);

/* The fm_run_info of one pass (RUN_FWD, RUN_BWD) of a kernel run (borrowing
 * from r and g), with the scenario's variant and mask method. */
void gpu_run_info(const gpu_step *g, const gpu_kernel_run *r, int pass, const fm_scenario *s,
                  int head_dim, fm_run_info *info);

#endif
