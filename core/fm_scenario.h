/* fm_scenario.h — scenario files: experiments written by hand in YAML (with
 * comments), parsed with libyaml. A scenario names masks, sequence lengths,
 * batch and heads, head dims, tile sizes, samples and seeds, what to run and
 * where to write; fm_scenario_cases expands it into cases.
 *
 *   name: paper-kernel-table          # required; also the default output folder
 *   description: "..."
 *   output: out/paper-kernel-table    # relative to the current folder
 *   seqlen: [8192, 32768]             # int, list, or {from: 1024, to: 1048576, factor: 2}
 *   batch: auto                       # int, or auto = 131072 / S (the paper's B)
 *   heads: auto                       # int, or auto = 4096 / head_dim (the paper's H)
 *   head_dim: [128, 64]               # 64 and/or 128
 *   br: 128                           # int or list; bc likewise
 *   samples: all                      # document samples: int, list, or all (0..4)
 *   sample_file: data/my_docs.txt     # documents in the paper's format (default: built in)
 *   seed: 0
 *   draws: 1                          # seeded draws per case (seed, seed+1, ...)
 *   run: [analyze, simulate, gpu, peer]
 *   figures: [gallery, memory]        # also tiles: a tile figure per case (first 16)
 *   report: cases                     # cases | paper-table | sweep | memory | chunks
 *   chunk: 128                        # chunks report: chunk size C (tiles are br x bc)
 *   masks:
 *     - family: sliding_window        # any family of `fmsim families`
 *       params: {w: 512}              # family parameters
 *       seqlen: 4096                  # per-mask overrides: seqlen, samples, draws, br, bc
 *     - intervals: masks/x.npy        # an interval file (relative to the scenario)
 *       causal: true
 *       strict: false                 # true: refuse indices above Sq (default: Paddle's reading)
 *     - dense: masks/y.npy            # a dense mask file (converted once)
 *       masked_true: false
 *
 * Every error names the file, the line and the key.
 */
#ifndef FM_SCENARIO_H
#define FM_SCENARIO_H

#include <stdint.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FM_SCN_MAX_LIST 64
#define FM_SCN_MAX_MASKS 64
#define FM_SCN_MAX_PARAMS 16

enum { /* steps, as bits of fm_scenario.run */
  FM_SCN_ANALYZE = 1u << 0,
  FM_SCN_SIMULATE = 1u << 1,
  FM_SCN_GPU = 1u << 2,
  FM_SCN_PEER = 1u << 3
};
enum { /* figures, as bits of fm_scenario.figures */
  FM_SCN_FIG_GALLERY = 1u << 0,
  FM_SCN_FIG_MEMORY = 1u << 1,
  FM_SCN_FIG_TILES = 1u << 2
};
typedef enum fm_scn_report {
  FM_SCN_REPORT_CASES,
  FM_SCN_REPORT_PAPER_TABLE,
  FM_SCN_REPORT_SWEEP,
  FM_SCN_REPORT_MEMORY,
  FM_SCN_REPORT_CHUNKS
} fm_scn_report;

typedef struct fm_int_list {
  int n;
  int64_t v[FM_SCN_MAX_LIST];
} fm_int_list;

typedef struct fm_scn_mask {
  int line;                     /* where the entry starts in the file */
  char family[64];              /* "" for a file mask */
  char params[FM_SCN_MAX_PARAMS][128]; /* "key=value" */
  int nparams;
  char file[4096];              /* dense or interval file, resolved path; "" for a family */
  int is_intervals, causal, masked_true;
  int strict;                   /* intervals: refuse what Paddle reads leniently */
  fm_int_list seqlen, br, bc, samples; /* n = 0: the scenario's value */
  int64_t draws;                /* 0: the scenario's value */
} fm_scn_mask;

typedef struct fm_scenario {
  char path[4096];
  char name[128];
  char description[1024];
  char output[4096];
  char sample_file[4096]; /* resolved path, "" for the built-in samples */
  fm_int_list seqlen, head_dim, br, bc, samples; /* samples n = 0: default sample */
  int64_t batch, heads;                          /* 0 = auto (the paper's) */
  uint64_t seed;
  int64_t draws;
  unsigned run, figures;
  fm_scn_report report;
  int64_t chunk;
  fm_scn_mask masks[FM_SCN_MAX_MASKS];
  int nmasks;
} fm_scenario;

/* Parses a scenario file. Errors read "FILE:LINE: key 'k': what was wrong". */
fm_status fm_scenario_load(const char *path, fm_scenario *out, fm_err *err);
const char *fm_scn_report_name(fm_scn_report r);

/* One case: a mask at one (seqlen, head_dim, br, bc, sample, draw). */
typedef struct fm_scn_case {
  int mask_index;
  int64_t seqlen, head_dim, br, bc, batch, heads; /* seqlen 0: a file mask's own length */
  int sample; /* -1: default */
  uint64_t seed;
  char id[256]; /* folder name, unique in the scenario */
} fm_scn_case;

/* Expands the scenario into cases (caller frees *cases with free()). */
fm_status fm_scenario_cases(const fm_scenario *s, fm_scn_case **cases, int *ncases, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
