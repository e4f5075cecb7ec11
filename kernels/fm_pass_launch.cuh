/* fm_pass_launch.cuh — what fm_attn_forward and fm_attn_backward (fm_attn.cu)
 * hand to a kernel's launchers (private to kernels/). fm_attn.cu checks the
 * problem, resolves the registry kernel's tile for the pass (core/fm_kernels.h),
 * computes the per-key-tile bounds once, and calls the launcher of
 * problem.kernel from its table. */
#ifndef FM_PASS_LAUNCH_CUH
#define FM_PASS_LAUNCH_CUH

#include <cuda_runtime.h>

#include "fm_attn.h"
#include "fm_attn_dev.h"
#include "fm_device.cuh"
#include "fm_tile_rule.h"

namespace fmk {

struct pass_launch {
  const fm_attn_problem *p;
  fm_variant variant;
  bool instrumented;
  cudaStream_t stream;
  int32_t br, bc;               /* the kernel's tile */
  int32_t nsets;                /* interval sets */
  fmd::attn_base base;          /* what every kernel's parameters start with: the tile grid
                                   Tr x Tc at (br, bc), bounds (nsets, Tc) at bc, ... */
  int32_t sms;                  /* multiprocessors of the device (persistent grids) */
  fm_attn_tuning tuning;        /* development knobs (fm_attn_dev.h); zero: the library's choices */
};

/* Enqueues the kernel (and its own preprocessing) on l.stream. */
typedef fm_status (*pass_launcher)(const pass_launch &l, fm_err *err);

fm_status launch_sm80(const pass_launch &l, fm_err *err); /* fm_sm80.cu */
fm_status launch_sm90(const pass_launch &l, fm_err *err); /* fm_sm90.cu */
fm_status launch_sm90_bwd(const pass_launch &l, fm_err *err); /* fm_sm90_bwd.cu */

}  // namespace fmk

#endif
