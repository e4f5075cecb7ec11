/* fm_cuda_status.cuh — CUDA runtime errors as fm_status, shared by the host
 * code of kernels/ (.cu and .c alike: only the C runtime API is used): one
 * line naming the call, the error and its meaning. */
#ifndef FM_CUDA_STATUS_CUH
#define FM_CUDA_STATUS_CUH

#include <cuda_runtime_api.h>
#include <stdio.h>

#include "fm_status.h"

static inline fm_status cuda_fail(fm_err *err, cudaError_t e, const char *what) {
  return fm_fail(err, FM_EIO, "CUDA error in %s: %s (%s)", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}

/* Why there is no usable device, after cudaGetDeviceCount returned e (or 0
 * devices with cudaSuccess), into buf: the CUDA runtime reports a machine
 * with no NVIDIA driver at all as cudaErrorInsufficientDriver ("CUDA driver
 * version is insufficient for CUDA runtime version"), which misleads; the
 * driver's version (0 when none is loaded) tells the two apart. */
static inline const char *fm_cuda_no_device_reason(cudaError_t e, char *buf, int cap) {
  int drv = 0, rt = 0;
  if (e == cudaErrorInsufficientDriver && (cudaDriverGetVersion(&drv) != cudaSuccess || drv == 0))
    snprintf(buf, (size_t)cap, "no NVIDIA driver found (libcuda.so is not installed or cannot "
             "be loaded)");
  else if (e == cudaErrorInsufficientDriver) {
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, (size_t)cap, "the NVIDIA driver (CUDA %d.%d) is older than this build's CUDA "
             "runtime (%d.%d)", drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
  } else if (e == cudaErrorNoDevice || e == cudaSuccess)
    snprintf(buf, (size_t)cap, "no CUDA device found (the NVIDIA driver sees none)");
  else
    snprintf(buf, (size_t)cap, "%s", cudaGetErrorString(e));
  return buf;
}

/* Returns cuda_fail(err, ...) from the enclosing function when `call` fails
 * (the function has an `fm_err *err` in scope). */
#define CUDA_TRY(call, what)                                   \
  do {                                                         \
    cudaError_t e_ = (call);                                   \
    if (e_ != cudaSuccess) return cuda_fail(err, e_, (what)); \
  } while (0)

#endif
