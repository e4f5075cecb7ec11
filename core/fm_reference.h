/* fm_reference.h — the CPU reference of the FlashMask kernels, forward and
 * backward (docs/DESIGN.md, "Style", rule 1), the comparison the checks use
 * and the tolerance rule of every GPU-vs-CPU check.
 *
 * Attention of one column-interval mask over bf16 inputs:
 *   O_i = sum_j softmax_j(scale * q_i . k_j over visible j) v_j,
 *   LSE_i = log sum_j exp(scale * q_i . k_j) (natural log) over visible j;
 * a row with no visible key gets O_i = 0 and LSE_i = -inf.
 *
 * Its gradients, from dO (dL/dO), with P_ij = exp(scale * q_i . k_j - LSE_i)
 * over the visible j (0 elsewhere):
 *   dV_j = sum_i P_ij dO_i,      dP_ij = dO_i . v_j,      D_i = dO_i . O_i,
 *   dS_ij = P_ij (dP_ij - D_i),  dQ_i = scale sum_j dS_ij k_j,
 *   dK_j = scale sum_i dS_ij q_i;
 * a row with no visible key contributes nothing (dQ_i = 0, no term in dK, dV),
 * and a key no row sees gets dK_j = dV_j = 0.
 *
 * Two precisions:
 *   FM_REF_FP64      every product and sum in double: the reference.
 *   FM_REF_BF16_FP32 what the kernel does, in a plain loop: scores accumulated
 *                    in float, p = exp2(s * scale * log2 e - m * scale * log2 e)
 *                    in float, p rounded to bf16 before P V, the row sum of the
 *                    unrounded p in float, O rounded to bf16. Its error against
 *                    FM_REF_FP64 is the yardstick of the GPU error (the GPU may
 *                    not be more than twice as far from FP64).
 *                    Backward: the forward row recomputed as above (raw
 *                    scores in float, the float LSE, O rounded to bf16); P =
 *                    exp2(S * scale * log2 e - LSE * log2 e) in float; P
 *                    rounded to bf16 before dV += P^T dO; dP = dO V^T and D_i =
 *                    sum_d dO_id O_id in float; dS = P (dP - D) in float,
 *                    rounded to bf16 before dK += dS^T Q and dQ += dS K; float
 *                    accumulators, times scale (dQ, dK) and rounded to bf16 at
 *                    the end.
 *
 * Work is O(B * H * Sq * Sk * D) time, O(Sk * D) extra memory (one (batch,
 * head) slice of K, V, and of dK, dV for the backward): for small checks.
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

/* Runs the backward reference with dout (B, Sq, H, D) bf16 bit patterns. dq
 * is (B, Sq, H, D) double, dk and dv are (B, Sk, H, D) double; all three
 * caller-allocated. The forward (LSE, O) is recomputed inside, in the same
 * mode. In FM_REF_BF16_FP32 mode every output value is a bf16 value.
 * FM_EINVAL for a NULL pointer or a bad shape, FM_ENOMEM when a slice cannot
 * be allocated. */
fm_status fm_reference_backward(const fm_ref_problem *p, const uint16_t *dout, fm_ref_mode mode,
                                double *dq, double *dk, double *dv, fm_err *err);

/* The FM_REF_FP64 backward from the forward's O and LSE given instead of
 * recomputed, as the kernel's backward takes them: P_ij = exp(scale q_i .
 * k_j - lse_i) over the visible j, D_i = dO_i . o_i. o (B, Sq, H, D) and lse
 * (B, H, Sq) double, read only for rows with a visible key. For a column
 * subset of a larger problem whose O and LSE are the whole row's (context
 * parallelism, core/fm_cp_run.h): the gradients are then the subset's share
 * of the whole problem's. Outputs as fm_reference_backward's. */
fm_status fm_reference_backward_given(const fm_ref_problem *p, const uint16_t *dout, const double *o,
                                      const double *lse, double *dq, double *dk, double *dv,
                                      fm_err *err);

/* The FM_REF_FP64 reference on double inputs (same layouts; p's shape, scale
 * and mask are used, its bf16 pointers are not read): for tests that perturb
 * the inputs by less than a bf16 step (finite differences). */
fm_status fm_reference_forward_f64(const fm_ref_problem *p, const double *q, const double *k,
                                   const double *v, double *o, double *lse, fm_err *err);
fm_status fm_reference_backward_f64(const fm_ref_problem *p, const double *q, const double *k,
                                    const double *v, const double *dout, double *dq, double *dk,
                                    double *dv, fm_err *err);

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

/* The tolerance rule of every check of a kernel against the CPU reference
 * (docs/DESIGN.md, "Style", rule 1), written once for both passes:
 *   1. every element of the GPU output within atol + rtol * |ref| of the
 *      FM_REF_FP64 reference (fm_compare_*, with fm_ref_tolerance's pair);
 *   2. the same-precision CPU run (FM_REF_BF16_FP32) passes 1 too, else the
 *      tolerance is too tight for the case;
 *   3. the GPU's largest error at most twice the same-precision CPU's, plus
 *      1e-6 (so that two exact results pass).
 * The tolerances are in units of the outputs: O and the gradients are bf16
 * values of inputs drawn from a standard normal distribution, LSE a float. */
typedef enum fm_ref_quantity {
  FM_REF_Q_O = 0,   /* forward output, bf16 */
  FM_REF_Q_LSE = 1, /* log-sum-exp, float */
  FM_REF_Q_DQ = 2,  /* gradients, bf16 */
  FM_REF_Q_DK = 3,
  FM_REF_Q_DV = 4,
  FM_REF_NQUANTITIES = 5
} fm_ref_quantity;

typedef struct fm_ref_tol {
  double atol, rtol;
} fm_ref_tol;

fm_ref_tol fm_ref_tolerance(fm_ref_quantity q);    /* {0, 0} when out of range */
const char *fm_ref_quantity_name(fm_ref_quantity q); /* "O", "LSE", "dQ", "dK", "dV"; "?" */

/* Rule 3 on two comparisons made with fm_ref_tolerance: 1 when the GPU's max
 * error is at most twice the CPU same-precision run's (plus 1e-6). */
int fm_ref_within_twice(const fm_compare_result *gpu, const fm_compare_result *cpu);

#ifdef __cplusplus
}
#endif
#endif
