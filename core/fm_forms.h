/* fm_forms.h — the interop forms of Paddle's `startend_row_indices`
 * (int32 [B, H_mask, Sk, k]), smallest first, and which of them can hold a
 * column given its masked-row runs.
 *
 *   causal-1  [LTS]                 causal, LTE = Sq
 *   causal-2  [LTS, LTE]            causal
 *   bidir-2   [LTS, UTE]            not causal, LTE = Sq, UTS = 0
 *   bidir-4   [LTS, LTE, UTS, UTE]  not causal
 *
 * Canonical column (fm_runs_canonical): with rem = the masked runs outside the
 * causal triangle (all runs when not causal), one run goes to LT unless it
 * starts at the top (row 0, or the triangle for causal masks) and ends before
 * Sq, where it goes to UT with UTS = 0; two runs put the first in UT (UTS = 0
 * when it starts at the top) and the second in LT; empties are LT = [Sq, Sq),
 * UT = [0, 0).
 */
#ifndef FM_FORMS_H
#define FM_FORMS_H

#include <stdint.h>

#include "fm_colmask.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fm_form {
  FM_FORM_CAUSAL1 = 0,
  FM_FORM_CAUSAL2 = 1,
  FM_FORM_BIDIR2 = 2,
  FM_FORM_BIDIR4 = 3,
  FM_FORM_COUNT = 4,
  FM_FORM_NONE = -1
} fm_form;

const char *fm_form_name(fm_form f); /* "causal-1", ...; "none" for FM_FORM_NONE */
fm_status fm_form_parse(const char *name, fm_form *out, fm_err *err);
int fm_form_k(fm_form f);      /* vectors stored: 1, 2, 2, 4 */
int fm_form_causal(fm_form f); /* 1 for the causal forms */
/* The form of a Paddle array with k vectors and a causal flag, or FM_FORM_NONE. */
fm_form fm_form_from_k(int k, int causal);

/* Sets of forms are bit masks: bit fm_form_bit(f) for form f. */
static inline unsigned fm_form_bit(fm_form f) { return 1u << (unsigned)f; }
#define FM_FORMS_ALL ((1u << FM_FORM_COUNT) - 1u) /* every form */

/* Bit fm_form_bit(form) set for every form that can hold a column whose masked
 * rows are the n sorted, disjoint, non-adjacent runs; c is the column's causal
 * limit (rows [0, c) must be masked for the causal forms). */
unsigned fm_runs_fit(const int32_t (*runs)[2], int n, int32_t c, int32_t sq);

/* The smallest form whose bit is set in fit (fm_runs_fit bits), or FM_FORM_NONE. */
fm_form fm_form_smallest(unsigned fit);

/* Interval values (LTS, LTE, UTS, UTE) that express the runs in form f, which
 * must fit (fm_runs_fit). f = FM_FORM_NONE gives the canonical column for a
 * mask whose causal flag is `causal`. */
void fm_runs_to_intervals(const int32_t (*runs)[2], int n, int32_t c, int32_t sq, fm_form f,
                          int causal, int32_t out[4]);

/* The smallest form that holds every column of every set of m. */
fm_form fm_colmask_smallest_form(const fm_colmask *m);

/* A new mask with the same content expressed in form f (causal flag of f).
 * FM_EUNSUPPORTED, naming the first column that does not fit, otherwise. */
fm_status fm_colmask_to_form(const fm_colmask *m, fm_form f, fm_colmask **out, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
