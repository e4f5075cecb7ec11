/* fm_intervals_io.h — interval masks on disk in Paddle's `startend_row_indices`
 * layout: int32 (or int64 on input) [B, H_mask, Sk, k], k = 1, 2 or 4 per the
 * form (fm_forms.h). The causal flag is not stored in the array; it travels
 * beside it (a command-line flag, summary.json). */
#ifndef FM_INTERVALS_IO_H
#define FM_INTERVALS_IO_H

#include "fm_colmask.h"
#include "fm_forms.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads an interval file. sq = 0 takes Sq = Sk. Any structural problem, an
 * index outside [0, Sq] or an invalid interval is an error naming the file. */
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
