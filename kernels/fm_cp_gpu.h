/* fm_cp_gpu.h — the GPU executor of a context-parallel schedule (issue 24;
 * core/fm_cp_run.h has the schedule, docs/DESIGN.md "Context parallelism",
 * "cp-run" the design): one process per rank, rank r on CUDA device r,
 * NCCL point-to-point sends, fmsim's kernels per launch. Built only when
 * CUDA and NCCL are both found (CMake FM_NCCL; FM_HAVE_NCCL).
 *
 * NCCL is loaded at run time (dlopen of libnccl.so.2), not linked: the
 * fmsim binary then starts on machines without it (every other command works
 * there), and cp-run finds the library where the Python wheel put it without
 * an rpath into somebody's site-packages. Search order: $FMSIM_NCCL_LIBRARY
 * (a path), then "libnccl.so.2" through the loader (LD_LIBRARY_PATH, e.g.
 * .../site-packages/nvidia/nccl/lib), then the library CMake found at build
 * time (FM_NCCL_LIBRARY_PATH). nccl.h is needed at build time only.
 *
 * Process model (fm_cp_gpu_run): the calling process sets NCCL_NVLS_ENABLE=0,
 * TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 (setenv
 * without overwriting: multicast stays off in every process, docs/DESIGN.md
 * "Context parallelism"), then forks P children BEFORE anything initialises
 * CUDA or NCCL in it; it then creates the ncclUniqueId (which starts NCCL's
 * bootstrap listener in the parent, which stays alive until the children are
 * done: forking after that would copy a process with NCCL's threads) and
 * writes it to each child through a pipe. Child r: cudaSetDevice(r),
 * ncclCommInitRank, the run, its results into a file of a private temporary
 * folder; on any failure it writes the message, calls ncclCommAbort and
 * exits non-zero. The parent waits; when a child fails (or a child hangs
 * past timeout_s) it kills the others (SIGKILL), so a failing rank never
 * leaves the rest blocked in NCCL. The parent itself never touches CUDA.
 *
 * A run (per rank): inputs filled on the device from their global indices
 * (fm_attn_fill_random_bf16_at with fm_cp_input_seed: equal to a one-GPU
 * run's tensors), the local and per-step masks' interval vectors uploaded
 * once; then warm-up passes for warmup_ms, then `iters` timed passes, each
 * started by a barrier (a one-float ncclAllReduce, then the streams wait on
 * it) and held behind a gate until the host has enqueued the whole pass (a
 * one-thread kernel spinning on a host-mapped word, at most 2 s, then a
 * warning on stderr; the first passes, which load the kernels, and
 * FM_CP_GATE=0 go without: docs/DESIGN.md, "The exchange model"), CUDA events
 * around every kernel launch (compute stream) and every
 * group of sends/receives (comm stream). The figures are medians over the
 * timed passes. check: after timing, each rank runs the whole problem on its
 * own device (the same kernel, one launch per pass, its CP buffers freed
 * first) and compares its rows; baseline: rank 0 times the whole problem the
 * same way (warm-up, iters, medians; its timed passes gated too).
 *
 * Memory per rank (B x H x D x 2 bytes a row, R own rows): own Q, K, V, O,
 * dO, dQ, dK, dV and fp32 O/dQ/dK/dV accumulators; allgather: K/V and dK/dV
 * of all S rows plus the partials received back (send_rows rows); ring: two
 * steps' K/V and two steps' dK/dV partials (ring_max_cols rows each) plus one
 * partial received back (send_rows_max rows). Every allocation and every CUDA
 * or NCCL call is checked; the message names the call and the rank.
 */
#ifndef FM_CP_GPU_H
#define FM_CP_GPU_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_cp_run.h"
#include "fm_kernels.h"
#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_cp_gpu_opts {
  const fm_colmask *mask;          /* the whole problem's (S x S) */
  const fm_cp_sharding_plan *plan; /* its sharding (segments, need) */
  const fm_cp_schedule *sched;     /* of plan, for the exchange to run */
  int32_t batch, heads, head_dim;
  uint64_t seed;                   /* inputs: fm_cp_input_seed(seed, 0..3) */
  int backward;                    /* 1: forward and backward */
  fm_kernel_id kernel;             /* FM_KERNEL_AUTO: resolved per device */
  int check, baseline, timeline;   /* see above; timeline: keep one pass's events */
  int32_t iters;                   /* timed passes (>= 1) */
  double warmup_ms;                /* warm-up passes for at least this long (at least one) */
  double timeout_s;                /* the parent kills every child past this (0: none) */
} fm_cp_gpu_opts;

/* One recorded span of a rank's timeline (the median pass's, ms from the
 * pass's start). */
typedef struct fm_cp_gpu_event {
  char name[48];
  int32_t stream;      /* 0 compute, 1 comm */
  int32_t pass;        /* FM_CP_FWD, FM_CP_BWD */
  double start_ms, end_ms;
  int64_t bytes_sent, bytes_recv;
  int32_t source;      /* the step's source or the peer, -1 when none */
} fm_cp_gpu_event;

typedef struct fm_cp_gpu_pass {
  double wall_ms;      /* median: barrier to both streams done */
  double compute_ms;   /* median of the sum of the kernel spans (launches, merges, sums) */
  double comm_ms;      /* median of the sum of the send/receive groups' spans */
  int64_t bytes_sent, bytes_recv; /* one pass */
  int32_t launches;    /* attention kernel launches in one pass */
} fm_cp_gpu_pass;

typedef struct fm_cp_gpu_rank {
  char device[96];                 /* "NVIDIA H200 (device 1)" */
  fm_cp_gpu_pass pass[FM_CP_NPASSES];
  double check_abs[5], check_rel[5]; /* O, LSE, dQ, dK, dV: max |cp - one GPU|, max that / |one GPU| */
  int64_t check_bad[5];            /* outside fm_ref_tolerance's atol + rtol |one GPU| */
  int32_t nevents;
  fm_cp_gpu_event *events;         /* (nevents,) owned by the result */
} fm_cp_gpu_rank;

typedef struct fm_cp_gpu_result {
  int32_t ranks;
  fm_kernel_id kernel;             /* the kernel that ran */
  fm_cp_gpu_rank *rank;            /* (P,) owned (fm_cp_gpu_result_free) */
  double step_ms[FM_CP_NPASSES];   /* the slowest rank's median wall per pass */
  int checked, check_ok;
  double baseline_ms[FM_CP_NPASSES]; /* NaN unless baseline */
} fm_cp_gpu_result;

/* Runs o on devices 0..P-1 (see above). FM_OK when every rank ran (r->check_ok
 * says whether the check passed); FM_EUNSUPPORTED when NCCL cannot be loaded
 * or fewer than P devices exist; FM_EIO with the failing rank's message
 * otherwise. The caller frees r with fm_cp_gpu_result_free. */
fm_status fm_cp_gpu_run(const fm_cp_gpu_opts *o, fm_cp_gpu_result *r, fm_err *err);
void fm_cp_gpu_result_free(fm_cp_gpu_result *r);

#ifdef __cplusplus
}
#endif
#endif
