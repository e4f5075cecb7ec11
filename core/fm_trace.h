/* fm_trace.h — trace folders (docs/DESIGN.md, "Traces").
 *
 * A trace is a folder: summary.json (format "fmsim-trace", FM_TRACE_VERSION),
 * tiles.npy (uint8 [sets, Tr, Tc], FM_TILE_* by the min/max rule),
 * tiles_exact.npy (same, exact class), columns.npy (int32 [nb, nh, Sk, 4]:
 * LTS, LTE, UTS, UTE; the causal flag is in summary.json), and for GPU runs
 * tile_cycles.npy and timeline.json.
 *
 * Writers build every file in a hidden staging folder inside the target
 * (DIR/.staging.PID.XXXXXX) and move them into place only on commit
 * (summary.json last), so a failure while writing leaves the target as it was
 * and never a half-written file. The staging folder (and the target folder
 * when the writer created it) is removed on the signals of fm_fileio.h rule 6
 * (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGXFSZ, ...), and a
 * staging folder left by a killed writer (SIGKILL) is swept by the next
 * fm_trace_begin on the same target (fm_fileio.h, rule 6). A member of the
 * target that is not a regular file (a symbolic link, a folder, a device) is
 * never replaced: commit refuses it before moving anything.
 */
#ifndef FM_TRACE_H
#define FM_TRACE_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_forms.h"
#include "fm_json.h"
#include "fm_memory.h"
#include "fm_tiles.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FM_TRACE_FORMAT "fmsim-trace"
#define FM_TRACE_VERSION 1

/* What `fmsim analyze` measured on one mask: the common part of every trace. */
typedef struct fm_analysis {
  const char *family;      /* family name, or the source file */
  const char *params;      /* resolved parameters, "" when none */
  const char *docs_source; /* "", "sample 0 of 8192", "explicit", "drawn..." */
  int64_t seqlen_q, seqlen_k, batch, heads;
  int causal;
  int32_t br, bc, tr, tc;
  fm_form form; /* smallest form holding the mask */
  fm_tile_counts counts;
  fm_mask_bytes bytes;
} fm_analysis;

/* Fills the mask's part of an analysis: the names (borrowed, not copied),
 * Sq, Sk, batch, heads, the causal flag, the Br x Bc tile grid, the smallest
 * form and the mask memory. counts are left zero for fm_classify to fill. */
void fm_analysis_init(fm_analysis *a, const fm_colmask *m, const char *family, const char *params,
                      const char *docs_source, int64_t batch, int64_t heads, int32_t br,
                      int32_t bc);

/* Writes the analysis as members of the innermost open JSON object. */
void fm_analysis_json(const fm_analysis *a, fm_json *j);
/* Its tile part alone: "br", "bc", "tiles_rows", "tiles_cols", "tiles_total",
 * "tiles_masked", "tiles_partial", "tiles_unmasked", "sparsity", "exact" {...}
 * (a run trace's backward, at its own tile, fm_run_trace.h). */
void fm_tile_counts_json(const fm_analysis *a, fm_json *j);

typedef struct fm_trace_writer {
  char dir[4000];
  char stage[4096];
  int created_dir; /* the target did not exist: abort removes it again */
  int nfiles;
  char files[16][64];
  int stage_slot, dir_slot; /* fm_cleanup_add slots (-1: none) */
} fm_trace_writer;

fm_status fm_trace_begin(fm_trace_writer *w, const char *dir, fm_err *err);
/* Path of a file inside the staging folder; records it for commit. */
const char *fm_trace_file(fm_trace_writer *w, const char *name, char *buf, size_t cap);
fm_status fm_trace_commit(fm_trace_writer *w, fm_err *err);
/* Discards the staged files (and the target folder when begin created it). */
void fm_trace_abort(fm_trace_writer *w);

/* The analysis trace: summary.json, tiles.npy, tiles_exact.npy, columns.npy. */
fm_status fm_trace_write_analysis(const char *dir, const fm_analysis *a, const fm_colmask *m,
                                  const uint8_t *classes, const uint8_t *exact, fm_err *err);

/* columns.npy of a mask: int32 [nb, nh, Sk, 4]. */
fm_status fm_trace_write_columns(const char *path, const fm_colmask *m, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
