/* fm_scenario.h — scenario files: experiments written by hand in YAML (with
 * comments), parsed with libyaml. A scenario names masks, sequence lengths,
 * batch and heads, head dims, tile sizes, samples and seeds, what to run, how
 * the kernels are timed and where to write; fm_scenario_cases expands it into
 * cases. `fmsim run SCENARIO.yaml` runs one, `fmsim bench` runs the shipped
 * paper-kernel-table and sparsity-sweep scenarios, and `fmsim run --family`
 * is a one-case scenario built in memory (fm_scenario_defaults).
 *
 *   name: paper-kernel-table          # required; also the default output folder
 *   description: "..."
 *   output: out/paper-kernel-table    # relative to the current folder
 *   seqlen: [8192, 32768]             # int, list, or {from: 1024, to: 1048576, factor: 2}
 *   batch: auto                       # int, or auto = tokens / S (the paper's B)
 *   heads: auto                       # int, or auto = hidden / head_dim (the paper's H)
 *   tokens: 131072                    # what batch: auto means (default 131072)
 *   hidden: 4096                      # what heads: auto means (default 4096)
 *   head_dim: [128, 64]               # 64 and/or 128
 *   br: 128                           # int or list; bc likewise (the analysis' tiles; the
 *                                     # GPU step uses each kernel's own tile as well)
 *   samples: all                      # document samples: int, list, or all (0..4)
 *   sample_file: data/my_docs.txt     # documents in the paper's format (default: built in)
 *   seed: 0
 *   draws: 1                          # seeded draws per case (seed, seed+1, ...)
 *   run: [analyze, simulate, gpu, peer]
 *   kernel: [sm90, sm80]              # kernels of the GPU step: sm80, sm90, auto (default auto)
 *   variant: skip                     # skip (default), noskip or dense
 *   mask_method: slices               # auto (default), slices, r2p or words: how the sm90
 *                                     # kernels mask a partial tile (fm_mask_method,
 *                                     # fm_kernels.h); the sm80 kernel takes auto only, the
 *                                     # one of slices and r2p that is not the library's runs
 *                                     # in the skip variant only, words (forward only) runs
 *                                     # r2p where it is not built
 *   pass: both                        # fwd (default), bwd or both: which passes the GPU step
 *                                     # times and models (the backward at its own tile)
 *   profile: h200-sm90                # a GPU profile of the timing model (core/fm_timing.h):
 *                                     # a name in data/gpu, or a .json file (relative to the
 *                                     # scenario); the GPU step writes each case's predicted
 *                                     # time beside the measured one, for the profile's kernel
 *   warmup: 2                         # untimed launches before the timed ones (default 2)
 *   reps: 5                           # timed launches, median reported (default 5)
 *   noskip_reps: 2                    # also time the no-skip variant (default 0: not run)
 *   instrument_reps: 3                # also time the instrumented build (default 0: not run)
 *   settle_ms: 250                    # idle before each pass is timed (default 0), so that
 *                                     # it does not start at the clock the last one left
 *   sustained_ms: 1000                # time the protocol's sustained figure: 1 s of warm-up,
 *                                     # then back-to-back launches over this long (default 0:
 *                                     # warmup + reps launches; docs/DESIGN.md "How we measure")
 *   count_bytes: true                 # one launch counted by the CUPTI Range Profiler
 *   cupti: true                       # false: CUDA events only, no counters
 *   figures: [gallery, memory]        # names of the figure registry (viz/viz_figures.c)
 *   report: cases                     # cases | paper-table | sweep | memory | chunks
 *   chunk: 128                        # chunks report: chunk size C (tiles are br x bc)
 *   masks:
 *     - family: sliding_window        # any family of `fmsim families`
 *       params: {w: 512}              # family parameters
 *       seqlen: 4096                  # per-mask overrides: seqlen, samples, draws, br, bc,
 *       batch: 16                     # batch, heads (int or auto)
 *     - intervals: masks/x.npy        # an interval file (relative to the scenario)
 *       causal: true
 *       strict: false                 # true: refuse indices above Sq (default: Paddle's reading)
 *     - dense: masks/y.npy            # a dense mask file (converted once)
 *       masked_true: false
 *
 * Every key is one row of the key table in fm_scenario.c (its name, where it
 * may stand, its parser and its field). Every error names the file, the line
 * and the key. Limits, checked before anything large is allocated: the file
 * at most FM_SCN_MAX_FILE_BYTES, brackets nested at most FM_SCN_MAX_DEPTH deep
 * (checked before libyaml reads the text), at most FM_SCN_MAX_CASES cases.
 */
#ifndef FM_SCENARIO_H
#define FM_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#include "fm_kernels.h"
#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FM_SCN_MAX_LIST 64
#define FM_SCN_MAX_MASKS 64
#define FM_SCN_MAX_PARAMS 32
#define FM_SCN_PARAM_POOL 65536       /* bytes of "key=value" text over all masks */
#define FM_SCN_MAX_FIGURES 8
#define FM_SCN_MAX_KERNELS 4
#define FM_SCN_MAX_CASES 50000
#define FM_SCN_MAX_FILE_BYTES (1 << 20)
#define FM_SCN_MAX_DEPTH 32           /* [ and { nested at most this deep */

enum { /* steps, as bits of fm_scenario.run */
  FM_SCN_ANALYZE = 1u << 0,
  FM_SCN_SIMULATE = 1u << 1,
  FM_SCN_GPU = 1u << 2,
  FM_SCN_PEER = 1u << 3
};
typedef enum fm_scn_report {
  FM_SCN_REPORT_CASES,
  FM_SCN_REPORT_PAPER_TABLE,
  FM_SCN_REPORT_SWEEP,
  FM_SCN_REPORT_MEMORY,
  FM_SCN_REPORT_CHUNKS,
  FM_SCN_NREPORTS
} fm_scn_report;

typedef struct fm_int_list {
  int n;
  int64_t v[FM_SCN_MAX_LIST];
} fm_int_list;

typedef struct fm_scn_mask {
  int line;                     /* where the entry starts in the file (0: built in memory) */
  char family[64];              /* "" for a file mask */
  int nparams;
  int32_t param_at[FM_SCN_MAX_PARAMS]; /* offsets of "key=value" strings in the scenario's
                                          pool: read them with fm_scn_param */
  char file[4096];              /* dense or interval file, resolved path; "" for a family */
  int is_intervals, causal, masked_true;
  int strict;                   /* intervals: refuse what Paddle reads leniently */
  fm_int_list seqlen, br, bc, samples; /* n = 0: the scenario's value */
  int64_t draws;                /* 0: the scenario's value */
  int64_t batch, heads;         /* where given (*_given): 0 = auto, else the value */
  int batch_given, heads_given; /* 0: the scenario's batch / heads */
} fm_scn_mask;

typedef struct fm_scenario {
  char path[4096];        /* the file ("" for a scenario built in memory) */
  char name[128];
  char description[1024];
  char output[4096];
  char sample_file[4096]; /* resolved path, "" for the built-in samples */
  fm_int_list seqlen, head_dim, br, bc, samples; /* samples n = 0: default sample */
  int64_t batch, heads;                          /* 0 = auto (the paper's) */
  int64_t tokens, hidden;                        /* auto: batch = tokens / S, heads = hidden / D */
  uint64_t seed;
  int64_t draws;
  unsigned run;
  /* the GPU step */
  fm_kernel_id kernels[FM_SCN_MAX_KERNELS]; /* registry ids or FM_KERNEL_AUTO */
  int nkernels;
  fm_variant variant;
  fm_mask_method mask_method;               /* the sm90 kernels' partial-tile masking (auto: the
                                               library's); the no-skip comparison runs auto */
  fm_pass pass;                             /* FM_PASS_FWD, FM_PASS_BWD or FM_PASS_BOTH */
  char profile[4096];                       /* timing model profile: a name in data/gpu, or a
                                               file (resolved against the scenario's folder);
                                               "" : none (the GPU's own where one exists) */
  int profile_line;                         /* its line in the file (0: given on the command line) */
  int64_t warmup, reps, noskip_reps, instrument_reps;
  int64_t settle_ms; /* idle before each timed pass (fm_gpu_opts.settle_ms) */
  int64_t sustained_ms; /* > 0: the protocol's sustained figure (fm_gpu_opts.sustain_ms) */
  int count_bytes, cupti;
  /* output */
  char figures[FM_SCN_MAX_FIGURES][32]; /* figure names, checked by the runner against the
                                           figure registry (core does not know figures) */
  int nfigures, figures_line;
  fm_scn_report report;
  int64_t chunk;
  fm_scn_mask masks[FM_SCN_MAX_MASKS];
  int nmasks, masks_line;
  char pool[FM_SCN_PARAM_POOL]; /* the masks' parameter strings */
  int32_t pool_used;
} fm_scenario;

/* Every field at its default: seqlen 8192, head dim 128, 128 x 128 tiles,
 * batch = heads = 1, tokens 131072, hidden 4096, one draw, run: [analyze],
 * kernel auto, variant skip, mask method auto, pass fwd, 2 warm-up and 5 timed launches, CUPTI on, no
 * counted launch, report cases, no masks. */
void fm_scenario_defaults(fm_scenario *s);

/* Parses a scenario file. Errors read "FILE:LINE: key 'k': what was wrong". */
fm_status fm_scenario_load(const char *path, fm_scenario *out, fm_err *err);

/* The same from text in memory (a scenario built into the binary): label
 * names it in errors and becomes out->path; relative paths in it resolve
 * against dir. */
fm_status fm_scenario_parse(const char *text, size_t len, const char *label, const char *dir,
                            fm_scenario *out, fm_err *err);

const char *fm_scn_report_name(fm_scn_report r);

/* The i-th parameter of mask m ("key=value"). */
const char *fm_scn_param(const fm_scenario *s, const fm_scn_mask *m, int i);
/* Appends a parameter to mask m; FM_EINVAL when the mask or the pool is full. */
fm_status fm_scn_add_param(fm_scenario *s, fm_scn_mask *m, const char *kv, fm_err *err);

/* One case: a mask at one (seqlen, head_dim, br, bc, sample, draw). */
typedef struct fm_scn_case {
  int mask_index;
  int64_t seqlen, head_dim, br, bc, batch, heads; /* seqlen 0: a file mask's own length */
  int sample; /* -1: default */
  uint64_t seed;
  char id[256]; /* folder name, unique in the scenario */
} fm_scn_case;

/* How many cases the scenario expands to (computed without allocating). */
int64_t fm_scenario_count_cases(const fm_scenario *s);

/* Expands the scenario into cases (caller frees *cases with free()).
 * FM_ENOMEM naming the count when it exceeds FM_SCN_MAX_CASES. */
fm_status fm_scenario_cases(const fm_scenario *s, fm_scn_case **cases, int *ncases, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
