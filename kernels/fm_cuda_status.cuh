/* fm_cuda_status.cuh — CUDA runtime errors as fm_status, shared by the host
 * code of kernels/ (.cu and .c alike: only the C runtime API is used): one
 * line naming the call, the error and its meaning. */
#ifndef FM_CUDA_STATUS_CUH
#define FM_CUDA_STATUS_CUH

#include <cuda_runtime_api.h>

#include "fm_status.h"

static inline fm_status cuda_fail(fm_err *err, cudaError_t e, const char *what) {
  return fm_fail(err, FM_EIO, "CUDA error in %s: %s (%s)", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}

/* Returns cuda_fail(err, ...) from the enclosing function when `call` fails
 * (the function has an `fm_err *err` in scope). */
#define CUDA_TRY(call, what)                                   \
  do {                                                         \
    cudaError_t e_ = (call);                                   \
    if (e_ != cudaSuccess) return cuda_fail(err, e_, (what)); \
  } while (0)

#endif
