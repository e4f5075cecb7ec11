/* fm_colmask.h — the column-interval mask, fmsim's one representation.
 *
 * A mask has Sq query rows and Sk key columns. For every key column j it holds
 * four int32 row indices, two half-open row intervals:
 *   masked(i, j) = i in [LTS_j, LTE_j) or i in [UTS_j, UTE_j) or (causal and i < c_j)
 * with c_j = clamp(j + Sq - Sk, 0, Sq) (causal triangle aligned bottom-right).
 *
 * Vector sets: nb x nh of them, nb in {1, B} and nh in {1, H}; a (batch, head)
 * pair uses set (nb == 1 ? 0 : b) * nh + (nh == 1 ? 0 : h). A mask shared by
 * every head has nb = nh = 1. Storage is (nb, nh, 4, Sk) int32, each vector
 * contiguous, which is also what the GPU kernels read.
 */
#ifndef FM_COLMASK_H
#define FM_COLMASK_H

#include <stddef.h>
#include <stdint.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest Sq or Sk: keeps every row index, and index + tile size, in int32. */
#define FM_MAX_SEQLEN (1 << 30)
/* Largest single allocation core makes on the interval path (bytes). */
#define FM_MAX_ALLOC_BYTES ((int64_t)8 << 30)

typedef enum fm_vec { FM_LTS = 0, FM_LTE = 1, FM_UTS = 2, FM_UTE = 3 } fm_vec;

typedef struct fm_colmask fm_colmask;

/* A new mask with every interval empty in canonical position (LT = [Sq, Sq),
 * UT = [0, 0)). The caller owns *out and frees it with fm_colmask_destroy.
 * Allocates nb x nh x 4 x Sk int32, reserved in the memory budget
 * (fm_mem_reserve, fm_limits.h) until fm_colmask_destroy: FM_ENOMEM when
 * that exceeds FM_MAX_ALLOC_BYTES or what the machine can give in total,
 * FM_EINVAL for bad lengths or counts (or a malformed FMSIM_MEM_LIMIT). */
fm_status fm_colmask_create(int64_t sq, int64_t sk, int64_t nb, int64_t nh, int causal,
                            fm_colmask **out, fm_err *err);
void fm_colmask_destroy(fm_colmask *m); /* NULL is a no-op */
fm_status fm_colmask_clone(const fm_colmask *m, fm_colmask **out, fm_err *err);

int32_t fm_colmask_sq(const fm_colmask *m);
int32_t fm_colmask_sk(const fm_colmask *m);
int32_t fm_colmask_nb(const fm_colmask *m);
int32_t fm_colmask_nh(const fm_colmask *m);
int32_t fm_colmask_nsets(const fm_colmask *m);
int fm_colmask_causal(const fm_colmask *m);
/* Set index for (batch b, head h); b and h may exceed nb-1 / nh-1 (broadcast). */
int32_t fm_colmask_set_index(const fm_colmask *m, int32_t b, int32_t h);

/* One vector (Sk,) int32 of one set; owned by the mask. */
int32_t *fm_colmask_vec(fm_colmask *m, int32_t set, fm_vec v);
const int32_t *fm_colmask_cvec(const fm_colmask *m, int32_t set, fm_vec v);

/* Checks every interval: 0 <= start <= end <= Sq, and for a causal mask an
 * upper interval that is empty or starts inside the causal triangle
 * (UTS_j <= c_j; otherwise the mask needs three intervals). The message names
 * the set, the column and the values. */
fm_status fm_colmask_validate(const fm_colmask *m, fm_err *err);

/* masked(i, j) for set `set`; 0 <= i < Sq, 0 <= j < Sk. */
int fm_colmask_masked(const fm_colmask *m, int32_t set, int32_t i, int32_t j);

/* The masked rows of column j as sorted, disjoint, non-adjacent runs
 * [runs[k][0], runs[k][1]), causal triangle included. Returns the count (0..2
 * for a valid mask). */
int fm_colmask_column_runs(const fm_colmask *m, int32_t set, int32_t j, int32_t runs[3][2]);

/* 1 when column j masks the same rows in set sa of a and set sb of b (same Sq). */
int fm_colmask_column_equal(const fm_colmask *a, int32_t sa, const fm_colmask *b, int32_t sb,
                            int32_t j);

/* Semantic equality: same Sq, Sk and the same masked set for every (batch,
 * head) pair the two masks describe (sets broadcast). Causal flags may differ. */
int fm_colmask_equal(const fm_colmask *a, const fm_colmask *b);

/* Rewrites every column into the canonical form (see forms.h): semantic
 * content unchanged, empties canonical, overlapping intervals merged. */
void fm_colmask_canonicalize(fm_colmask *m);

#ifdef __cplusplus
}
#endif
#endif
