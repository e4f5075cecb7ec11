/* cupti_copy.cu — a trivial copy kernel for the CUPTI glue tests (test_cupti.c):
 * known bytes (n read, n written) and a known kernel name. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "fm_cupti.h"

__global__ void fm_test_copy_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

typedef struct copy_job {
  void *src, *dst;
  size_t bytes;
} copy_job;

extern "C" fm_status fm_test_copy_launch(void *user, void *stream, fm_err *err) {
  copy_job *j = (copy_job *)user;
  size_t n = j->bytes / sizeof(uint4);
  fm_test_copy_kernel<<<132 * 8, 256, 0, (cudaStream_t)stream>>>((const uint4 *)j->src,
                                                                (uint4 *)j->dst, n);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? FM_OK : fm_fail(err, FM_EIO, "copy kernel: %s", cudaGetErrorString(e));
}

extern "C" void *fm_test_copy_create(size_t bytes) {
  copy_job *j = new copy_job{nullptr, nullptr, bytes};
  if (cudaMalloc(&j->src, bytes) != cudaSuccess || cudaMalloc(&j->dst, bytes) != cudaSuccess ||
      cudaMemset(j->src, 1, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    cudaFree(j->src);
    cudaFree(j->dst);
    delete j;
    return nullptr;
  }
  return j;
}

extern "C" void fm_test_copy_destroy(void *job) {
  copy_job *j = (copy_job *)job;
  if (!j) return;
  cudaFree(j->src);
  cudaFree(j->dst);
  delete j;
}
