/* fm_intervals_io.h — interval masks on disk in Paddle's `startend_row_indices`
 * layout: int32 (or int64 on input) [B, H_mask, Sk, k], k = 1, 2 or 4 per the
 * form (fm_forms.h). The causal flag is not stored in the array; it travels
 * beside it (a command-line flag, summary.json). A trace's columns.npy is the
 * same layout with k = 4 holding LTS, LTE, UTS, UTE whatever the flag.
 *
 * fm_intervals_load is the one reader of these files: `check --intervals`,
 * `expand`, `view`/`render` of an interval file or a trace, and scenario
 * interval masks all call it (docs/DESIGN.md, "Semantics").
 *
 * Reading follows Paddle's semantics unless strict: a row index above Sq
 * acts as Sq (Python slicing clamps it; Paddle's generators write S + 1 for
 * "never"), and an interval whose start lies past its end is empty; both are
 * counted in a one-line note. A negative index is always an error. Strict
 * reading refuses both, naming the first (fmsim's own files never hold them).
 */
#ifndef FM_INTERVALS_IO_H
#define FM_INTERVALS_IO_H

#include "fm_colmask.h"
#include "fm_forms.h"
#include "fm_npy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_intervals_opts {
  int causal;        /* the causal flag the file goes with (not stored in it) */
  int causal_from_k; /* 1: k = 1 means causal and k = 4 bidirectional, whatever .causal
                        says (k = 2 takes .causal); 0: a k that contradicts .causal is an error */
  int64_t sq;        /* Sq of the mask; 0 takes Sq = Sk */
  int strict;        /* 1: values above Sq and starts past their end are errors */
  int four_vectors;  /* 1: a trace's columns.npy: int32 [nb, nh, Sk, 4] = LTS, LTE, UTS, UTE */
} fm_intervals_opts;

/* What Paddle's reading changed (all zero under strict). */
typedef struct fm_intervals_note {
  int64_t clamped; /* values above Sq read as Sq */
  int64_t emptied; /* intervals whose start lay past their end, read as empty */
  char text[400];  /* one line naming the file and both counts; "" when both are 0 */
} fm_intervals_note;

/* 1 when a header has the shape of an interval file: int32 or int64, four
 * dimensions, k = 1, 2 or 4. */
int fm_intervals_header_fits(const fm_npy_header *h);

/* Reads an interval file into a new mask (the caller owns *out). note may be
 * NULL. Errors are one line naming the file: not an interval file (a dense
 * mask is recognised and named), a k that contradicts the causal flag, an
 * index outside [0, Sq] (strict) or below 0, an invalid interval. Memory:
 * the file's array once plus the mask's vectors, O(B*H_mask*Sk). */
fm_status fm_intervals_load(const char *path, const fm_intervals_opts *o, fm_colmask **out,
                            fm_intervals_note *note, fm_err *err);

/* Shorthand for fm_intervals_load with .causal, .sq and .strict = 1: the exact
 * reader of what fm_colmask_save_npy writes (round trips, tests). */
fm_status fm_colmask_load_npy(const char *path, int causal, int64_t sq, fm_colmask **out,
                              fm_err *err);

/* Writes m in form f (FM_FORM_NONE: the smallest form that holds it); *used
 * (may be NULL) receives the form written. Atomic: nothing is left on failure. */
fm_status fm_colmask_save_npy(const fm_colmask *m, const char *path, fm_form f, fm_form *used,
                              fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
