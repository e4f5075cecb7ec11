/* fm_attn.h — host API of the FlashMask attention kernels (C-callable).
 *
 * The kernels of the registry (core/fm_kernels.h): forward, and backward
 * where the kernel has one; bf16 in, fp32 accumulation, head dims 64 and
 * 128, FlashMask tile skipping, in three variants (FM_VARIANT_*), each with an
 * optional instrumented build that records per-tile class and clock64 cycles.
 *
 * Layouts (device pointers):
 *   q, k, v, o     (B, S, H, D) bf16 (uint16_t bit patterns), Sq rows for q/o, Sk for k/v
 *   lse            (B, H, Sq) fp32 log-sum-exp of the scaled scores (natural log);
 *                  -inf for a row with no visible key (its output row is 0)
 *   intervals      (nsets, 4, Sk) int32: LTS, LTE, UTS, UTE per set, sets as fm_colmask
 *                  (set = (nb == 1 ? 0 : b) * nh + (nh == 1 ? 0 : h))
 *   dense_mask     (Sq, Sk) uint8, 1 = masked (FM_VARIANT_DENSE only; shared by all heads),
 *                  or (nsets, Sq, Sk) with sets as the intervals' when dense_per_set is 1
 *   tile_class     (B, H, Tr, Tc) uint8 FM_TILE_* as the kernel saw it (instrumented only)
 *   tile_cycles    (B, H, Tr, Tc) int64 clock64 cycles spent on the tile (instrumented only)
 *   dout           (B, Sq, H, D) bf16 dL/dO (backward input)
 *   dq, dk, dv     (B, Sq, H, D), (B, Sk, H, D), (B, Sk, H, D) bf16 (backward outputs)
 * Tr = ceil(Sq / Br), Tc = ceil(Sk / Bc) at the kernel's own tile size for the
 * pass (fm_kernel_tile_size: the backward's tile is not the forward's).
 *
 * Kernels: the registry of core/fm_kernels.h (problem.kernel, never FM_KERNEL_AUTO here:
 * resolve it with fm_attn_device_kernel); tiles in core/fm_kernel_traits.h.
 * Limits: batch * heads <= 65535. The dense variant needs no intervals; the
 * others need them. CUDA runtime failures are returned as FM_EIO with the CUDA
 * error in the message; FM_EUNSUPPORTED when no usable device exists.
 * fm_attn_forward allocates a small stream-ordered workspace (8 int32 per key
 * tile per interval set) and frees it on the same stream. Workspaces come from
 * a memory pool per device that this library owns and that keeps what it has
 * reserved across synchronizations (kernels/fm_workspace.cuh says why):
 * fm_attn_trim_workspace gives it back.
 */
#ifndef FM_ATTN_H
#define FM_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "fm_colmask.h"
#include "fm_kernels.h"
#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fm_mask_method (how the sm90 kernels mask a partial tile, fm_attn_problem.mask_method)
 * is defined in core/fm_kernels.h, so that the command line and scenario files parse it. */

typedef struct fm_attn_problem {
  int32_t batch, heads, seqlen_q, seqlen_k, head_dim; /* head_dim 64 or 128 */
  float softmax_scale;                                /* usually 1/sqrt(head_dim) */
  int causal;
  int32_t mask_nb, mask_nh; /* interval sets: nb in {1, batch}, nh in {1, heads} */
  const void *q, *k, *v;
  void *o;
  float *lse;
  const int32_t *intervals;
  const uint8_t *dense_mask;
  uint8_t *tile_class;  /* NULL unless instrumented */
  int64_t *tile_cycles; /* NULL unless instrumented */
  int dense_per_set;    /* 0: dense_mask (Sq, Sk) shared by all heads; 1: (nsets, Sq, Sk) */
  fm_kernel_id kernel;  /* which kernel runs (a registry id, not FM_KERNEL_AUTO) */
  /* backward only (fm_attn_backward): o and lse above are its inputs (the forward's) */
  const void *dout;     /* (B, Sq, H, D) bf16 */
  void *dq, *dk, *dv;   /* (B, Sq, H, D), (B, Sk, H, D) x 2 bf16 */
  int deterministic;    /* 1: dQ accumulated in a fixed order of key tiles, so that SKIP
                           and NOSKIP give bit-identical gradients */
  int32_t mask_method;  /* fm_mask_method: how a partial tile is masked (sm90); 0: the library's */
} fm_attn_problem;

/* Zeroes *p and fills what the mask and the shape decide: batch, heads, head
 * dim, softmax scale, Sq, Sk, the causal flag and the interval sets (nb, nh)
 * of m; the kernel is FM_KERNEL_SM80. The device pointers are left NULL for
 * the caller to set. */
void fm_attn_problem_init(fm_attn_problem *p, const fm_colmask *m, int32_t batch, int32_t heads,
                          int32_t head_dim, float softmax_scale);

/* Launches the bounds preprocessing and the forward kernel on `stream`
 * (a cudaStream_t, NULL for the default stream); asynchronous. instrumented
 * selects the build that writes tile_class / tile_cycles. */
fm_status fm_attn_forward(const fm_attn_problem *p, fm_variant variant, int instrumented,
                          void *stream, fm_err *err);

/* Launches the backward of p->kernel on `stream` (asynchronous): dq, dk, dv
 * from q, k, v, o, lse (the forward's outputs) and dout. Rows with no
 * visible key (LSE = -inf) contribute nothing. dQ is accumulated in fp32 (a
 * stream-ordered workspace, freed on the same stream) and converted to bf16.
 * instrumented: tile_class / tile_cycles at the backward's tile.
 * FM_EUNSUPPORTED when the kernel has no backward (fm_kernel_desc.passes). */
fm_status fm_attn_backward(const fm_attn_problem *p, fm_variant variant, int instrumented,
                           void *stream, fm_err *err);

/* One pass of a problem as a launch function of the timing harness
 * (fm_launch_fn, fm_cupti.h): fm_attn_launch_run(user, ...) with user an
 * fm_attn_launch runs fm_attn_forward or fm_attn_backward with its fields. */
typedef struct fm_attn_launch {
  fm_attn_problem p;
  fm_pass pass; /* FM_PASS_FWD or FM_PASS_BWD */
  fm_variant variant;
  int instrumented;
} fm_attn_launch;
fm_status fm_attn_launch_run(void *user, void *stream, fm_err *err);

/* Fills n bf16 values at dst (device) with a deterministic function of (seed,
 * index): standard normal (Box-Muller, the distribution of torch.randn),
 * never all zeros. For benchmarks and checks that need large random inputs
 * without a host round trip. Asynchronous on `stream`. */
fm_status fm_attn_fill_random_bf16(void *dst, int64_t n, uint64_t seed, void *stream, fm_err *err);
/* The same values from index `first` on: dst[i] = value(seed, first + i), so
 * that a slice of a tensor filled alone equals that slice of the whole
 * (context parallelism: each rank fills its own rows from their global
 * indices). fm_attn_fill_random_bf16 is first = 0. core/fm_cp_run.h,
 * fm_cp_fill_bf16, is its CPU twin (equal but for the last bit of logf and
 * cospif). */
fm_status fm_attn_fill_random_bf16_at(void *dst, int64_t n, uint64_t seed, int64_t first, void *stream,
                                      fm_err *err);

/* Paddle's startend_row_indices to the kernels' interval vectors, on the
 * device and on `stream` (asynchronous, no host synchronisation):
 *   startend   (nsets, Sk, k) int32, Paddle's [B or 1, H or 1, Sk, k] with the sets
 *              flattened in the same order as fm_colmask's (batch-major)
 *   intervals  (nsets, 4, Sk) int32, written: LTS, LTE, UTS, UTE
 * k: 1 (causal-1: LTS) or 2 (causal-2: LTS, LTE) when causal; 2 (bidir-2: LTS,
 * UTE) or 4 (bidir-4) otherwise; another k is FM_EINVAL; startend NULL writes
 * the vectors of no interval (LT = [Sq, Sq), UT = [0, 0)). Values are read as
 * fm_intervals_load reads a file (docs/DESIGN.md, "Semantics"): above Sq is Sq,
 * start not before end is empty; a negative value, which a file may not hold,
 * is taken as 0 (checking it would need a host round trip: callers that want
 * the check validate on the host). Allocates nothing. */
fm_status fm_attn_intervals_from_startend(const int32_t *startend, int32_t k, int64_t nsets,
                                          int32_t seqlen_q, int32_t seqlen_k, int causal,
                                          int32_t *intervals, void *stream, fm_err *err);

/* The entry points of bindings (the Python package's fmsim.torch): one call
 * per pass and no struct to fill per call. `shape` gives every scalar member
 * (batch, heads, Sq, Sk, head dim, scale, causal, mask sets nb x nh, kernel,
 * deterministic, mask method); its pointers are ignored. The device pointers come
 * as arguments, `intervals` (nb * nh, 4, Sk) as fm_attn_intervals_from_startend
 * writes them. Makes `device` the current device when it is not, then
 * launches the pass as fm_attn_forward / fm_attn_backward do (not
 * instrumented). Asynchronous; the same status codes. */
fm_status fm_attn_forward_ptrs(const fm_attn_problem *shape, int32_t device, const int32_t *intervals,
                               const void *q, const void *k, const void *v, void *o, float *lse, int variant,
                               void *stream, fm_err *err);
fm_status fm_attn_backward_ptrs(const fm_attn_problem *shape, int32_t device, const int32_t *intervals,
                                const void *q, const void *k, const void *v, const void *o, const float *lse,
                                const void *dout, void *dq, void *dk, void *dv, int variant, void *stream,
                                fm_err *err);

/* sizeof(fm_attn_problem), so that bindings that mirror the struct (the
 * Python package's fmsim.torch) can check their copy at load time. */
size_t fm_attn_problem_size(void);
/* The i-th member of fm_attn_problem in declaration order (0 <= i), its name
 * ("batch", ..., "mask_method"), and *offset (may be NULL) its offsetof; NULL
 * past the last. With fm_attn_problem_size, a binding checks its mirror field
 * for field: a field added in the struct's tail padding leaves the size as it was. */
const char *fm_attn_problem_member(int32_t i, size_t *offset);

/* Makes `device` this thread's current CUDA device for the launches that
 * follow (cudaSetDevice in this library's runtime: a caller with its own CUDA
 * runtime, such as PyTorch, names the device of its tensors before each call). */
fm_status fm_attn_use_device(int32_t device, fm_err *err);

/* Gives the memory that device's workspace pool keeps reserved beyond
 * keep_bytes back to the driver (cudaMemPoolTrimTo); memory of launches still
 * in flight stays. FM_OK when the pool was never made. */
fm_status fm_attn_trim_workspace(int32_t device, size_t keep_bytes, fm_err *err);

/* FM_OK when a CUDA device some registry kernel runs on is present (sm80:
 * compute capability 8.0 or newer; sm90: 9.0); desc (may be NULL) receives
 * e.g. "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)". Otherwise FM_EUNSUPPORTED
 * and err says why (no driver, no device, too old). Initialises the CUDA
 * runtime. */
fm_status fm_attn_device_info(char *desc, int cap, fm_err *err);

/* The kernel that `requested` means on the current device (FM_KERNEL_AUTO:
 * the fastest it runs, fm_kernel_auto); FM_EUNSUPPORTED when that kernel
 * cannot run there. Initialises the CUDA runtime. */
fm_status fm_attn_device_kernel(fm_kernel_id requested, fm_kernel_id *out, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
