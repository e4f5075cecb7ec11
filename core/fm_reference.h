/* fm_reference.h — the CPU reference of the FlashMask forward kernels
 * (docs/DESIGN.md, "Style", rule 1), and the comparison the checks use.
 *
 * Attention of one column-interval mask over bf16 inputs:
 *   O_i = sum_j softmax_j(scale * q_i . k_j over visible j) v_j,
 *   LSE_i = log sum_j exp(scale * q_i . k_j) (natural log) over visible j;
 * a row with no visible key gets O_i = 0 and LSE_i = -inf.
 *
 * Two precisions:
 *   FM_REF_FP64      every product and sum in double: the reference.
 *   FM_REF_BF16_FP32 what the kernel does, in a plain loop: scores accumulated
 *                    in float, p = exp2(s * scale * log2 e - m * scale * log2 e)
 *                    in float, p rounded to bf16 before P V, the row sum of the
 *                    unrounded p in float, O rounded to bf16. Its error against
 *                    FM_REF_FP64 is the yardstick of the GPU error (the GPU may
 *                    not be more than twice as far from FP64).
 *
 * Work is O(B * H * Sq * Sk * D) time, O(Sk) extra memory: for small checks.
 */
#ifndef FM_REFERENCE_H
#define FM_REFERENCE_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fm_ref_mode {
  FM_REF_FP64 = 0,     /* double everywhere */
  FM_REF_BF16_FP32 = 1 /* the kernel's precision (see above) */
} fm_ref_mode;

typedef struct fm_ref_problem {
  int32_t batch, heads, head_dim; /* Sq, Sk and causality come from the mask */
  double softmax_scale;
  const fm_colmask *mask;       /* sets broadcast over (batch, head) as fm_colmask says */
  const uint16_t *q, *k, *v;    /* (B, S, H, D) bf16 bit patterns; Sq rows for q, Sk for k, v */
} fm_ref_problem;

/* Runs the reference. o is (B, Sq, H, D) double, lse is (B, H, Sq) double
 * (-inf for a row with no visible key); both caller-allocated. In
 * FM_REF_BF16_FP32 mode every o value is a bf16 value and lse a float value. */
fm_status fm_reference_forward(const fm_ref_problem *p, fm_ref_mode mode, double *o, double *lse,
                               fm_err *err);

/* Element-wise comparison of `got` against `ref` (n values):
 * an element passes when both are the same infinity, or both are finite and
 * |got - ref| <= atol + rtol * |ref|. NaN never passes. */
typedef struct fm_compare_result {
  int64_t n;
  int64_t bad;         /* elements that fail the tolerance (NaN and infinity mismatches included) */
  int64_t first_bad;   /* index of the first failing element, -1 when none */
  int64_t worst;       /* index of the largest finite |got - ref|, -1 when none */
  double max_abs_err;  /* over elements where both are finite */
  double rms_err;      /* over elements where both are finite */
} fm_compare_result;

void fm_compare_f32(const float *got, const double *ref, int64_t n, double atol, double rtol,
                    fm_compare_result *out);
void fm_compare_f64(const double *got, const double *ref, int64_t n, double atol, double rtol,
                    fm_compare_result *out);
/* got as bf16 bit patterns. */
void fm_compare_bf16(const uint16_t *got, const double *ref, int64_t n, double atol, double rtol,
                     fm_compare_result *out);

#ifdef __cplusplus
}
#endif
#endif
