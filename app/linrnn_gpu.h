/* linrnn_gpu.h — the GPU path of `fmsim linrnn` (app/cmd_linrnn.c) through
 * the chunkwise linear-RNN kernel's host API (kernels/fm_linrnn.h): one case
 * verified at a small size against the fp64 reference (core/fm_linrnn_cpu.h)
 * and timed per variant at full size with the project's harness
 * (kernels/fm_cupti.h). Compiled in a CUDA build only (FM_HAVE_CUDA); in any
 * other, linrnn_gpu_available is 0 and linrnn_gpu_run FM_EUNSUPPORTED. */
#ifndef FM_LINRNN_GPU_H
#define FM_LINRNN_GPU_H

#include <stdint.h>

#include "fm_linrnn_cpu.h"
#include "fm_run_trace.h"

/* The relative bar of the GPU's outputs and final states (issue 23). */
#define LINRNN_GPU_REL_BAR 1e-3

typedef struct linrnn_gpu_case {
  int64_t tokens;             /* T of the timed runs */
  int32_t heads, dk, dv, chunk, sub, ndocs;
  const int32_t *cu;          /* (ndocs + 1) documents of the timed runs */
  int64_t verify_tokens;      /* the check runs on the first of them (documents cut there) */
  int32_t verify_heads;
  uint64_t seed;              /* of the inputs */
  unsigned variants;          /* bits 1u << FM_LR_*: the variants timed */
  int32_t warmup, reps;       /* per variant, interleaved (fm_time_interleaved) */
  int want_record;            /* also run the instrumented build at full size, first variant */
} linrnn_gpu_case;

typedef struct linrnn_gpu_result {
  char device[128];
  double out_err[FM_LR_NVARIANTS];   /* ||o - bf16(ref)||_2 / ||bf16(ref)||_2 at the check size; NaN: not run */
  double out_err_raw[FM_LR_NVARIANTS]; /* the same against the unrounded fp64 reference */
  double state_err[FM_LR_NVARIANTS]; /* final states (fp32) against the fp64 reference */
  int identical;                     /* every variant's outputs and states == skip's, bit for bit */
  int64_t class_mismatches;          /* the instrumented record vs fm_lr_classify, every head */
  fm_timing timing[FM_LR_NVARIANTS]; /* source "" for a variant not timed */
  double ratio[FM_LR_NVARIANTS];     /* time over the first timed variant's (paired rounds) */
  double instr_overhead;             /* instrumented / plain - 1 (NaN: not measured) */
  uint8_t *tile_class;               /* (heads, nchunks, n, n) of the record, or NULL; free() */
  int64_t *tile_cycles;              /* the same shape, or NULL; free() */
  int record_variant;                /* the variant of the record */
} linrnn_gpu_result;

int linrnn_gpu_available(void);
/* Runs the case on the current CUDA device: FM_EUNSUPPORTED without one
 * (or in a build without CUDA), FM_EIO on a CUDA failure, FM_ENOMEM when the
 * host buffers cannot be had. The result's arrays belong to the caller. */
fm_status linrnn_gpu_run(const linrnn_gpu_case *c, linrnn_gpu_result *r, fm_err *err);
void linrnn_gpu_result_free(linrnn_gpu_result *r);

#endif
