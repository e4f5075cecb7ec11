/* fm_sm90_bwd.cu — host side of the Hopper backward kernel (fm_sm90_bwd.cuh):
 * preprocessing (D = rowsum(dO * O), LSE in the log2 domain), the fp32 dQ
 * accumulator and its conversion to bf16, tensor maps, launch.
 *
 * Work items are the key tiles of every (b, h), in index order (heads in
 * order, key tiles ascending; for causal masks the first key tiles of a head
 * are the heaviest, so index order is heaviest first within each head). The
 * deterministic mode takes them in the order of fm_sm90_bwd_order.h instead,
 * whose tables the order kernels below build from the tile bounds first.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The deterministic order's tables (fm_sm90_bwd_order.h), in three passes
 * over the (nsets, Tc) tile bounds: each key tile's key; each key tile's take
 * position (its rank by fmbo_before, O(Tc) a thread) into take; each (set,
 * query tile)'s turns, one warp walking the take order 32 key tiles a step. */
__global__ void order_key_kernel(const fm_tile_bounds *__restrict__ bounds, int32_t *__restrict__ key, int64_t n_all,
                                 int32_t br, int32_t sq) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_all) key[i] = fmbo_key(&bounds[i], br, sq);
}
__global__ void order_take_kernel(const int32_t *__restrict__ key, int32_t *__restrict__ take, int64_t n_all,
                                  int32_t tc) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_all) return;
  const int64_t set = i / tc;
  const int32_t n = (int32_t)(i % tc), kn = key[i];
  const int32_t *ks = key + set * tc;
  int32_t rank = 0;
  for (int32_t j = 0; j < tc; j++) rank += fmbo_before(ks[j], j, kn, n);
  take[fmbo_take_at((int32_t)set, tc, rank)] = n;
}
__global__ void order_turn_kernel(const fm_tile_bounds *__restrict__ bounds, const int32_t *__restrict__ take,
                                  int16_t *__restrict__ turns, int32_t nsets, int32_t tr, int32_t tc, int32_t br,
                                  int32_t sq) {
  const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= (int64_t)nsets * tr) return;
  const int32_t set = (int32_t)(w / tr), m = (int32_t)(w % tr);
  int32_t base = 0;
  for (int32_t k0 = 0; k0 < tc; k0 += 32) {
    const int32_t k = k0 + lane, n = k < tc ? take[fmbo_take_at(set, tc, k)] : 0;
    const bool v = k < tc && fmbo_visits(&bounds[(int64_t)set * tc + n], m, br, sq);
    const unsigned bal = __ballot_sync(0xffffffffu, v);
    if (k < tc)
      turns[fmbo_turn_at(set, tr, tc, m, n)] = (int16_t)(v ? base + __popc(bal & ((1u << lane) - 1u)) : FMBO_NONE);
    base += __popc(bal);
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

/* Deterministic mode: the order's tables from the tile bounds (nsets x Tc at
 * BC), in the workspace at key (scratch), take and turns. */
static cudaError_t build_order(const fmd::attn_base &b, int32_t *key, int32_t *take, int16_t *turns,
                               cudaStream_t s) {
  const int32_t nsets = b.nb * b.nh;
  const int64_t nk = (int64_t)nsets * b.Tc, warps = (int64_t)nsets * b.Tr;
  order_key_kernel<<<(unsigned)((nk + 255) / 256), 256, 0, s>>>(b.bounds, key, nk, traits<128>::BR, b.Sq);
  order_take_kernel<<<(unsigned)((nk + 255) / 256), 256, 0, s>>>(key, take, nk, b.Tc);
  order_turn_kernel<<<(unsigned)((warps * 32 + 255) / 256), 256, 0, s>>>(b.bounds, take, turns, nsets, b.Tr, b.Tc,
                                                                          traits<128>::BR, b.Sq);
  return cudaGetLastError();
}

template <int HD, int VAR, bool INSTR, int MASK = FM_SM90_MASK_DEFAULT>
static cudaError_t launch_one(const params &p, int grid, cudaStream_t s) {
  constexpr int smem = traits<HD>::SMEM;
  cudaError_t e =
      cudaFuncSetAttribute(bwd_kernel<HD, VAR, INSTR, MASK>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  bwd_kernel<HD, VAR, INSTR, MASK><<<grid, traits<HD>::THREADS, smem, s>>>(p);
  return cudaGetLastError();
}

/* The library's kernels (both variants, plain and instrumented, the default
 * mask method) and the other mask method for SKIP (fm90::mask_built, as the
 * forward's). */
template <int HD>
static cudaError_t launch(const params &p, int variant, bool instr, int mask, int grid, cudaStream_t s) {
  if (!fm90::mask_built(variant, fm90::MODE_DEFAULT, mask)) return cudaErrorInvalidValue;
  if (mask == fm90::MASK_OTHER)
    return instr ? launch_one<HD, FM_VARIANT_SKIP, true, fm90::MASK_OTHER>(p, grid, s)
                 : launch_one<HD, FM_VARIANT_SKIP, false, fm90::MASK_OTHER>(p, grid, s);
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
  /* WORDS is forward-only (fm_mask_method): its words are R2P's, so the
     backward runs R2P for it */
  const int mask = l.tuning.sm90_mask == FM_SM90_MASK_WORDS ? FM_SM90_MASK_R2P : l.tuning.sm90_mask;
  if (!fm90::mask_built((int)l.variant, fm90::MODE_DEFAULT, mask))
    return fm_fail(err, FM_EUNSUPPORTED,
                   "sm90 backward: partial-tile mask method %d is not built for this launch (expected 1 or 2; the "
                   "non-default one for the skip variant only)", mask);
  fm90b::params kp;
  memset(&kp, 0, sizeof kp);
  static_cast<fmd::attn_base &>(kp) = l.base;
  /* workspace: LSE2, D, the fp32 dQ accumulator, the counter, the turn counters */
  const int64_t rows = (int64_t)B * H * Sq, nq = (int64_t)B * Sq * H * D;
  const int64_t nitems64 = (int64_t)B * H * l.base.Tc, nsem = p->deterministic ? (int64_t)B * H * l.base.Tr * 2 : 0;
  if (nitems64 >= (1ll << 31)) return fm_fail(err, FM_EUNSUPPORTED, "sm90 backward: too many key tiles");
  if (p->deterministic && (l.base.Tc > FMBO_MAX_TC || !l.base.bounds))
    return fm_fail(err, FM_EUNSUPPORTED, "sm90 backward, deterministic: at most %d key tiles and tile bounds",
                   FMBO_MAX_TC);
  /* deterministic: the order's tables (fm_sm90_bwd_order.h) */
  const int64_t nord = p->deterministic ? (int64_t)l.base.nb * l.base.nh * l.base.Tc : 0;
  auto up = [](int64_t x) { return 256 * ((x + 255) / 256); };
  const int64_t off_d = up(rows * 4), off_dq = off_d + up(rows * 4), off_cnt = off_dq + up(nq * 4);
  const int64_t off_sem = off_cnt + 256, off_key = off_sem + up(nsem * 4), off_take = off_key + up(nord * 4);
  const int64_t off_turn = off_take + up(nord * 4), ws_bytes = off_turn + up(nord * l.base.Tr * 2);
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
  kp.take = (const int32_t *)(ws + off_take);
  kp.turns = (const int16_t *)(ws + off_turn);
  kp.nitems = (int32_t)nitems64;
  kp.deterministic = p->deterministic ? 1 : 0;
  fm90b::prep_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, l.stream>>>(
      (const __nv_bfloat16 *)p->o, (const __nv_bfloat16 *)p->dout, p->lse, lse2, dsum, B, H, Sq, D);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemsetAsync(dq_acc, 0, (size_t)nq * 4, l.stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(counter, 0, 256 + (size_t)up(nsem * 4), l.stream);
  if (e == cudaSuccess && p->deterministic)
    e = fm90b::build_order(l.base, (int32_t *)(ws + off_key), (int32_t *)(ws + off_take), (int16_t *)(ws + off_turn),
                           l.stream);
  if (e == cudaSuccess && l.instrumented) { /* the pairs the kernel skips: MASKED (0), 0 cycles */
    static_assert(FM_TILE_MASKED == 0, "the skipped pairs' class is written as zero bytes");
    const size_t pairs = (size_t)B * H * l.base.Tr * l.base.Tc;
    e = cudaMemsetAsync(kp.tile_class, 0, pairs, l.stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(kp.tile_cycles, 0, pairs * 8, l.stream);
  }
  if (e == cudaSuccess) {
    what = "sm90 backward kernel launch";
    const int grid = (int)(nitems64 < l.sms ? nitems64 : l.sms);
    e = D == 128 ? fm90b::launch<128>(kp, (int)l.variant, l.instrumented, mask, grid, l.stream)
                 : fm90b::launch<64>(kp, (int)l.variant, l.instrumented, mask, grid, l.stream);
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
