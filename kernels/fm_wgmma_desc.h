/* fm_wgmma_desc.h — the wgmma shared-memory matrix descriptors (128-byte
 * swizzle) as plain arithmetic, written once for the sm90 kernels
 * (fm_hopper.cuh, whose header comment describes the layouts) and for the
 * linear-RNN kernel's host emulation (fm_linrnn_sim.h), which decodes them
 * (private to kernels/). */
#ifndef FM_WGMMA_DESC_H
#define FM_WGMMA_DESC_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FMWD_HD __host__ __device__ __forceinline__
#else
#define FMWD_HD inline
#endif

namespace fmh {

/* Swizzle-128B descriptor of the operand at shared address `addr` (1024-byte
 * aligned atoms); lbo and sbo in bytes. */
FMWD_HD uint64_t desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr >> 4) & 0x3fff) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3fff) << 32) | (1ull << 62);
}

/* K-major operand: rows of the M/N dim, 64-element column blocks of `rows`
 * rows each; the descriptor of k-step kk (16 elements of the reduction dim). */
FMWD_HD uint64_t desc_kmajor(uint32_t base, int rows, int kk) {
  const uint32_t addr = base + (uint32_t)(kk >> 2) * (uint32_t)rows * 128u + (uint32_t)(kk & 3) * 32u;
  return desc_sw128(addr, 16, 1024);
}

/* MN-major operand (B transposed): `rows` reduction-dim rows per 64-column
 * block; the descriptor of k-step kk (rows 16 kk .. 16 kk + 15). */
FMWD_HD uint64_t desc_mnmajor(uint32_t base, int rows, int kk) {
  return desc_sw128(base + (uint32_t)kk * 16u * 128u, (uint32_t)rows * 128u, 1024);
}

}  // namespace fmh

#endif
