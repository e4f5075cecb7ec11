/* fm_attn_check.h — the GPU-vs-CPU check of the forward kernels, shared by
 * `fmsim verify`, the gpu-labelled Criterion test and the kernel benchmark.
 *
 * One case = one mask (any Sq, Sk, causal flag, interval sets), B, H, a head
 * dim and the registry kernel to check (classes at that kernel's tile). fm_attn_check_run draws fresh bf16 inputs (normal, seeded), poisons
 * every output, runs the kernel variants and compares:
 *   1. skip vs the CPU fp64 reference (fm_reference.h): every output written
 *      (no NaN left of the poison), rows with no visible key exactly O = 0 and
 *      LSE = -inf, other values within atol + rtol * |ref|, and the GPU's max
 *      error at most twice that of the CPU same-precision run (plus 1e-6);
 *   2. noskip == skip bit for bit (O and LSE);
 *   3. instrumented skip == plain skip bit for bit, and its per-tile classes ==
 *      core fm_classify at the kernel's tile size bit for bit; skipped (MASKED)
 *      tiles 0 cycles, visited tiles > 0 cycles; same for instrumented noskip;
 *   3b. (sm90) skip with the partial-tile mask method the library does not use
 *      (fm_attn_dev.h, FM_SM90_MASK_*) and with the forward-only method words,
 *      each plain and instrumented, == skip bit for bit, and its classes == core's;
 *   4. (check_dense) dense with the mask expanded to (sets, Sq, Sk) == noskip
 *      bit for bit: the element mask of the interval path is exact.
 * With pass including FM_PASS_BWD (kernels that have a backward), after the
 * forward: fresh bf16 dO, poisoned gradients, and
 *   5. skip's dQ, dK, dV against the CPU fp64 reference (fm_reference_backward)
 *      by the same tolerance rule (fm_ref_tolerance, fm_ref_within_twice);
 *   6. deterministic skip == deterministic noskip bit for bit (dQ, dK, dV),
 *      and deterministic skip within the tolerance too;
 *   7. the instrumented backward's gradients == the plain one's (deterministic),
 *      its per-pair classes == core fm_classify at the backward tile, skipped
 *      pairs 0 cycles, visited pairs > 0;
 *   7b. (sm90) skip's backward with the partial-tile mask method the library
 *      does not use: deterministic (plain and instrumented) == deterministic
 *      skip bit for bit in dQ, dK, dV, its classes == core's; default mode:
 *      dK and dV bit for bit (dQ's fp32 additions land in any order).
 * The tolerances of every check are core's (fm_reference.h, "tolerance rule").
 */
#ifndef FM_ATTN_CHECK_H
#define FM_ATTN_CHECK_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_kernels.h"
#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_check_case {
  char name[96];          /* label printed in reports */
  const fm_colmask *mask; /* not owned */
  int32_t batch, heads, head_dim;
  uint64_t seed;
  int check_dense; /* also run the dense variant (needs sets * Sq * Sk bytes) */
  fm_kernel_id kernel; /* the registry kernel checked (not FM_KERNEL_AUTO) */
  fm_pass pass;        /* 0 or FM_PASS_FWD: the forward checks; FM_PASS_BWD / BOTH adds 5-7 */
} fm_check_case;

typedef struct fm_check_result {
  int ok;                 /* every check passed */
  char detail[512];       /* the first failure: which check, where, values */
  double err_gpu;         /* max |O_gpu - O_fp64| */
  double err_cpu;         /* max |O_cpu_same_precision - O_fp64| */
  double lse_err;         /* max |LSE_gpu - LSE_fp64| over finite rows */
  int64_t rows_empty;     /* rows with no visible key (over B, H) */
  int64_t tiles, tiles_masked, tiles_partial; /* per (b, h), min/max rule */
  int skip_noskip_identical, instr_identical, classes_identical, cycles_ok;
  int dense_identical;    /* -1 when not run */
  int mask_methods_identical; /* 3b (sm90); -1 when not run */
  /* backward (5-7), when the case asked for it */
  int bwd_ran;
  double bwd_err_gpu[3], bwd_err_cpu[3]; /* max |err| of dQ, dK, dV vs fp64: GPU, CPU same precision */
  int bwd_det_identical, bwd_instr_identical, bwd_classes_identical, bwd_cycles_ok;
  int bwd_mask_methods_identical; /* 7b (sm90); -1 when not run */
  int64_t bwd_tiles, bwd_tiles_masked; /* per (b, h), at the backward tile */
} fm_check_result;

/* Runs one case on the current CUDA device. Returns FM_OK when the case ran
 * (r->ok says whether it passed); an error status when it could not run (no
 * device, CUDA failure, allocation), with err filled. */
fm_status fm_attn_check_run(const fm_check_case *c, fm_check_result *r, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
