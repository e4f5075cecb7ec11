/* fm_sm90_bwd.cu — host side of the Hopper backward kernel (fm_sm90_bwd.cuh):
 * preprocessing (D = rowsum(dO * O), LSE in the log2 domain), the fp32 dQ
 * accumulator and its conversion to bf16, tensor maps, launch.
 *
 * Work items are the key tiles of every (b, h), in index order (heads in
 * order, key tiles ascending): the deterministic mode needs every CTA to wait
 * only for lower items, and for causal masks the first key tiles of a head are
 * the heaviest, so index order is heaviest first within each head.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <string.h>

#include "fm_cuda_status.cuh"
#include "fm_workspace.cuh"
#include "fm_pass_launch.cuh"
#include "fm_sm90_bwd.cuh"
#include "fm_sm90_launch.cuh"

namespace fm90b {

/* One warp per (b, h, row): D = sum_d dO * O (fp32 from bf16), LSE2 = LSE * log2 e
 * (+inf where LSE = -inf: that row's P must be 0). */
__global__ void __launch_bounds__(256) prep_kernel(const __nv_bfloat16 *__restrict__ o,
                                                   const __nv_bfloat16 *__restrict__ dout,
                                                   const float *__restrict__ lse, float *__restrict__ lse2,
                                                   float *__restrict__ dsum, int32_t B, int32_t H, int32_t Sq,
                                                   int32_t D) {
  const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= (int64_t)B * H * Sq) return;
  const int32_t i = (int32_t)(w % Sq), bh = (int32_t)(w / Sq), b = bh / H, h = bh % H;
  const int64_t row = (((int64_t)b * Sq + i) * H + h) * D;
  float acc = 0.f;
  for (int d = 2 * lane; d < D; d += 64) {
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(o + row + d));
    const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(dout + row + d));
    acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const float l = lse[w];
    dsum[w] = acc;
    lse2[w] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
  }
}

/* dq (bf16) = the fp32 accumulator, four elements a thread. */
__global__ void dq_convert_kernel(const float4 *__restrict__ acc, uint2 *__restrict__ dq, int64_t n4) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    const float4 v = acc[i];
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), c = __floats2bfloat162_rn(v.z, v.w);
    dq[i] = make_uint2(*reinterpret_cast<uint32_t *>(&a), *reinterpret_cast<uint32_t *>(&c));
  }
}

template <int HD, int VAR, bool INSTR>
static cudaError_t launch_one(const params &p, int grid, cudaStream_t s) {
  constexpr int smem = traits<HD>::SMEM;
  cudaError_t e = cudaFuncSetAttribute(bwd_kernel<HD, VAR, INSTR>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  bwd_kernel<HD, VAR, INSTR><<<grid, traits<HD>::THREADS, smem, s>>>(p);
  return cudaGetLastError();
}

template <int HD>
static cudaError_t launch(const params &p, int variant, bool instr, int grid, cudaStream_t s) {
  if (variant == FM_VARIANT_SKIP)
    return instr ? launch_one<HD, FM_VARIANT_SKIP, true>(p, grid, s) : launch_one<HD, FM_VARIANT_SKIP, false>(p, grid, s);
  if (variant == FM_VARIANT_NOSKIP)
    return instr ? launch_one<HD, FM_VARIANT_NOSKIP, true>(p, grid, s)
                 : launch_one<HD, FM_VARIANT_NOSKIP, false>(p, grid, s);
  return cudaErrorInvalidValue;
}

}  // namespace fm90b

namespace fmk {

fm_status launch_sm90_bwd(const pass_launch &l, fm_err *err) {
  const fm_attn_problem *p = l.p;
  if (l.variant != FM_VARIANT_SKIP && l.variant != FM_VARIANT_NOSKIP)
    return fm_fail(err, FM_EUNSUPPORTED, "the sm90 backward has the variants skip and noskip");
  for (const void *ptr : {(const void *)p->q, (const void *)p->k, (const void *)p->v, (const void *)p->dout,
                          (const void *)p->dk, (const void *)p->dv})
    if ((uintptr_t)ptr % 16) return fm_fail(err, FM_EINVAL, "sm90 backward: tensors must be 16-byte aligned (TMA)");
  const int32_t B = p->batch, H = p->heads, D = p->head_dim, Sq = p->seqlen_q, Sk = p->seqlen_k;
  fm90b::params kp;
  memset(&kp, 0, sizeof kp);
  static_cast<fmd::attn_base &>(kp) = l.base;
  /* workspace: LSE2, D, the fp32 dQ accumulator, the counter, the turn counters */
  const int64_t rows = (int64_t)B * H * Sq, nq = (int64_t)B * Sq * H * D;
  const int64_t nitems64 = (int64_t)B * H * l.base.Tc, nsem = p->deterministic ? (int64_t)B * H * l.base.Tr * 2 : 0;
  if (nitems64 >= (1ll << 31)) return fm_fail(err, FM_EUNSUPPORTED, "sm90 backward: too many key tiles");
  auto up = [](int64_t x) { return 256 * ((x + 255) / 256); };
  const int64_t off_d = up(rows * 4), off_dq = off_d + up(rows * 4), off_cnt = off_dq + up(nq * 4);
  const int64_t off_sem = off_cnt + 256, ws_bytes = off_sem + up(nsem * 4);
  unsigned char *ws = nullptr;
  cudaError_t e = fm_ws_alloc((void **)&ws, (size_t)ws_bytes, l.stream);
  if (e != cudaSuccess) return cuda_fail(err, e, "workspace allocation (sm90 backward workspace)");
  float *lse2 = (float *)ws, *dsum = (float *)(ws + off_d), *dq_acc = (float *)(ws + off_dq);
  int32_t *counter = (int32_t *)(ws + off_cnt), *sem = (int32_t *)(ws + off_sem);
  fm_status st = FM_OK;
  const char *what = "sm90 backward preprocessing";
  if ((st = fm90::tensor_map_bshd(&kp.tm_q, p->q, B, Sq, H, D, l.br, err)) != FM_OK ||
      (st = fm90::tensor_map_bshd(&kp.tm_do, p->dout, B, Sq, H, D, l.br, err)) != FM_OK ||
      (st = fm90::tensor_map_bshd(&kp.tm_k, p->k, B, Sk, H, D, l.bc, err)) != FM_OK ||
      (st = fm90::tensor_map_bshd(&kp.tm_v, p->v, B, Sk, H, D, l.bc, err)) != FM_OK ||
      (st = fm90::tensor_map_bshd(&kp.tm_dk, p->dk, B, Sk, H, D, 64, err)) != FM_OK ||
      (st = fm90::tensor_map_bshd(&kp.tm_dv, p->dv, B, Sk, H, D, 64, err)) != FM_OK ||
      (st = fm90::tensor_map_bshd_typed(&kp.tm_dq, dq_acc, 4, B, Sq, H, D, l.br, err)) != FM_OK) {
    cudaFreeAsync(ws, l.stream);
    return st;
  }
  kp.lse2 = lse2;
  kp.dsum = dsum;
  kp.next_item = counter;
  kp.sem = sem;
  kp.nitems = (int32_t)nitems64;
  kp.deterministic = p->deterministic ? 1 : 0;
  fm90b::prep_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, l.stream>>>(
      (const __nv_bfloat16 *)p->o, (const __nv_bfloat16 *)p->dout, p->lse, lse2, dsum, B, H, Sq, D);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemsetAsync(dq_acc, 0, (size_t)nq * 4, l.stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(counter, 0, 256 + (size_t)up(nsem * 4), l.stream);
  if (e == cudaSuccess && l.instrumented) { /* the pairs the kernel skips: MASKED (0), 0 cycles */
    static_assert(FM_TILE_MASKED == 0, "the skipped pairs' class is written as zero bytes");
    const size_t pairs = (size_t)B * H * l.base.Tr * l.base.Tc;
    e = cudaMemsetAsync(kp.tile_class, 0, pairs, l.stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(kp.tile_cycles, 0, pairs * 8, l.stream);
  }
  if (e == cudaSuccess) {
    what = "sm90 backward kernel launch";
    const int grid = (int)(nitems64 < l.sms ? nitems64 : l.sms);
    e = D == 128 ? fm90b::launch<128>(kp, (int)l.variant, l.instrumented, grid, l.stream)
                 : fm90b::launch<64>(kp, (int)l.variant, l.instrumented, grid, l.stream);
  }
  if (e == cudaSuccess) {
    what = "dQ conversion";
    const int64_t n4 = nq / 4;
    const int64_t blocks = (n4 + 255) / 256 < 4096 ? (n4 + 255) / 256 : 4096;
    fm90b::dq_convert_kernel<<<(unsigned)blocks, 256, 0, l.stream>>>((const float4 *)dq_acc, (uint2 *)p->dq, n4);
    e = cudaGetLastError();
  }
  cudaError_t e2 = cudaFreeAsync(ws, l.stream);
  if (e != cudaSuccess) return cuda_fail(err, e, what);
  if (e2 != cudaSuccess) return cuda_fail(err, e2, "cudaFreeAsync (sm90 backward workspace)");
  return FM_OK;
}

}  // namespace fmk
