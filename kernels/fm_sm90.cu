/* fm_sm90.cu — host side of the Hopper forward kernel (fm_sm90_fwd.cuh):
 * TMA tensor maps, the work list (row tiles sorted heaviest first), launch.
 *
 * Work list: one item per (b, h, row tile), item = (b * H + h) * Tr + rt. A
 * small kernel counts, per (interval set, row tile), the key tiles the kernel
 * will visit (the min/max rule on the bounds, the same test the producer
 * makes); CUB's radix sort (stable) orders the items by that count, heaviest
 * first, inside each head, heads in order (FM_SM90_ORDER_HEAD). The persistent
 * grid (one CTA per SM) takes items in that order from an atomic counter, so
 * the CTAs running at one time work on one or two heads and read the same K/V
 * through L2, and each head's light row tiles fill the gaps its heavy ones
 * leave. A global heaviest-first order (FM_SM90_ORDER_EXACT) puts up to 132
 * different heads side by side, each streaming its own K/V from HBM: measured
 * 1.2-1.3x slower on causal and random eviction at 8K and 32K (PERF_NOTES.md).
 */
#include <cub/device/device_radix_sort.cuh>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdio.h>
#include <string.h>

#include "fm_cuda_status.cuh"
#include "fm_workspace.cuh"
#include "fm_pass_launch.cuh"
#include "fm_sm90_launch.cuh"

namespace fm90 {

/* One warp per (set, row tile): visited key tiles (not MASKED by the rule). */
__global__ void __launch_bounds__(256) row_work_kernel(const fm_tile_bounds *__restrict__ bounds,
                                                       int32_t *__restrict__ counts, int32_t nsets,
                                                       int32_t Tr, int32_t Tc, int32_t Sq, int32_t br) {
  const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= (int64_t)nsets * Tr) return;
  const int32_t set = (int32_t)(w / Tr), rt = (int32_t)(w % Tr);
  const int32_t r0 = rt * br, r1 = min(r0 + br, Sq);
  int n = 0;
  for (int32_t t = lane; t < Tc; t += 32) {
    const fm_tile_bounds b = bounds[(int64_t)set * Tc + t];
    n += fm_classify_minmax(&b, r0, r1) != FM_TILE_MASKED;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) n += __shfl_xor_sync(0xffffffffu, n, off);
  if (lane == 0) counts[w] = n;
}

/* Sort keys and values: value = the item (heads in order, row tiles of a head
 * from the last), key = (Tc - visited) >> shift, with the head above it when
 * by_head (NULL counts: every tile). */
__global__ void item_keys_kernel(const int32_t *__restrict__ counts, uint64_t *__restrict__ keys,
                                 int32_t *__restrict__ items, int32_t nitems, const fmd::attn_base d, int shift,
                                 int by_head) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nitems) return;
  const int32_t bh = i / d.Tr, rt = d.Tr - 1 - i % d.Tr;
  const int32_t set = fmd::set_of(d, bh / d.H, bh % d.H);
  const int32_t visited = counts ? counts[(int64_t)set * d.Tr + rt] : d.Tc;
  keys[i] = ((uint64_t)(by_head ? bh : 0) << 32) | ((uint32_t)(d.Tc - visited) >> shift);
  items[i] = bh * d.Tr + rt;
}

}  // namespace fm90

namespace fmk {

/* cuTensorMapEncodeTiled from the driver, through the runtime (no -lcuda). */
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(fm_err *err) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn) return fn;
  void *ptr = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                   cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !ptr) {
    fm_fail(err, FM_EUNSUPPORTED, "the CUDA driver has no cuTensorMapEncodeTiled (TMA): %s",
            cudaGetErrorString(e));
    return nullptr;
  }
  fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  return fn;
}

}  // namespace fmk

namespace fm90 {
fm_status tensor_map_bshd(CUtensorMap *map, const void *base, int32_t B, int32_t S, int32_t H,
                          int32_t D, int32_t rows, fm_err *err) {
  return tensor_map_bshd_typed(map, base, 2, B, S, H, D, rows, err);
}

fm_status tensor_map_bshd_typed(CUtensorMap *map, const void *base, int elem_bytes, int32_t B, int32_t S,
                                int32_t H, int32_t D, int32_t rows, fm_err *err) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = fmk::tensor_map_encoder(err);
  if (!encode) return FM_EUNSUPPORTED;
  const cuuint64_t e = (cuuint64_t)elem_bytes;
  const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)S, (cuuint64_t)B};
  const cuuint64_t strides[3] = {(cuuint64_t)D * e, (cuuint64_t)H * D * e, (cuuint64_t)S * H * D * e};
  const cuuint32_t box[4] = {(cuuint32_t)(128 / elem_bytes), 1, (cuuint32_t)rows, 1}; /* 128-byte rows */
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  CUresult r = encode(map, elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
                      const_cast<void *>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return fm_fail(err, FM_EINVAL, "cuTensorMapEncodeTiled failed (error %d) for a (%d, %d, %d, %d) tensor",
                   (int)r, B, S, H, D);
  return FM_OK;
}
}  // namespace fm90

namespace fmk {
using fm90::tensor_map_bshd;

/* Bucket shift of the sort key: buckets of about Tc / 16 key tiles. */
static int bucket_shift(int32_t Tc, int order) {
  if (order != FM_SM90_ORDER_BUCKETED) return 0;
  int s = 0;
  while ((Tc >> (s + 5)) > 0) s++; /* 2^s <= Tc / 16 */
  return s;
}

/* Whether *told was still 0 (it becomes 1): a line said once a process. */
static bool first_time(int *told) {
  if (*told) return false;
  *told = 1;
  return true;
}

/* Mask method WORDS (fm_attn_dev.h): the dense words workspace of the
 * forward's grid, allocated and filled by words_kernel on l.stream (*words;
 * free it with cudaFreeAsync), when it fits FM90M_WORDS_BUDGET
 * (kernels/fm_sm90_mask.h); otherwise *mask becomes R2P, the method whose
 * words these are, with one line on stderr (the first time in the process),
 * and *words stays NULL. */
static cudaError_t words_workspace(const pass_launch &l, int32_t D, uint32_t **words, int *mask) {
  const int threads = D == 128 ? fm90::consumer_threads<128>() : fm90::consumer_threads<64>();
  if (!fm90m_words_fit(l.nsets, l.base.Tr, l.base.Tc, threads)) {
    static int told = 0; /* once a process: a timing loop launches the same problem many times */
    if (first_time(&told))
      fprintf(stderr, "fmsim: sm90 forward, mask method words: %.1f MiB of words exceed the budget of %.0f MiB; "
              "running r2p (said once)\n", (double)fm90m_words_bytes(l.nsets, l.base.Tr, l.base.Tc, threads) / (1 << 20),
              (double)FM90M_WORDS_BUDGET / (1 << 20));
    *mask = FM_SM90_MASK_R2P;
    return cudaSuccess;
  }
  cudaError_t e = fm_ws_alloc((void **)words, (size_t)fm90m_words_bytes(l.nsets, l.base.Tr, l.base.Tc, threads),
                              l.stream);
  if (e != cudaSuccess) {
    *words = nullptr;
    return e;
  }
  return D == 128 ? fm90::launch_words<128>(l.base, l.nsets, *words, l.stream)
                  : fm90::launch_words<64>(l.base, l.nsets, *words, l.stream);
}

/* The forward's mask method for a launch of this variant and mode asked for
 * `mask` (0: the default): WORDS where it is not built (fm90::mask_built_fwd)
 * becomes R2P, whose mask WORDS computes, with one line on stderr the first
 * time in the process; any other method is left as asked. */
static int mask_fwd(int variant, int mode, int mask) {
  if (mask != FM_SM90_MASK_WORDS || fm90::mask_built_fwd(variant, mode, mask)) return mask;
  static int told = 0; /* once a process, as words_workspace's line */
  if (first_time(&told))
    fprintf(stderr, "fmsim: sm90 forward, mask method words: built for the skip variant in the default mode "
            "only; running r2p (said once)\n");
  return FM_SM90_MASK_R2P;
}

fm_status launch_sm90(const pass_launch &l, fm_err *err) {
  const fm_attn_problem *p = l.p;
  if ((uintptr_t)p->q % 16 || (uintptr_t)p->k % 16 || (uintptr_t)p->v % 16 || (uintptr_t)p->o % 16)
    return fm_fail(err, FM_EINVAL, "sm90: q, k, v and o must be 16-byte aligned (TMA)");
  if (p->seqlen_k >= (1 << 30) || (int64_t)l.base.Tc >= (1 << fm90::FLAG_SHIFT))
    return fm_fail(err, FM_EUNSUPPORTED, "sm90: Sk = %d is too long (at most 2^30 - 1)", p->seqlen_k);
  const int mode = l.tuning.sm90_mode ? l.tuning.sm90_mode - 1 : fm90::MODE_DEFAULT;
  int mask = mask_fwd((int)l.variant, mode, l.tuning.sm90_mask);
  if (!fm90::mask_built_fwd((int)l.variant, mode, mask))
    return fm_fail(err, FM_EUNSUPPORTED,
                   "sm90: partial-tile mask method %d is not built for this launch (expected 1, 2 or 3; the "
                   "non-default one of 1 and 2 for the skip variant in the default mode only)", mask);
  fm90::params kp;
  memset(&kp, 0, sizeof kp);
  static_cast<fmd::attn_base &>(kp) = l.base;
  fm_status st;
  const int32_t B = p->batch, H = p->heads, D = p->head_dim;
  if ((st = tensor_map_bshd(&kp.tm_q, p->q, B, p->seqlen_q, H, D, l.br, err)) != FM_OK ||
      (st = tensor_map_bshd(&kp.tm_k, p->k, B, p->seqlen_k, H, D, l.bc, err)) != FM_OK ||
      (st = tensor_map_bshd(&kp.tm_v, p->v, B, p->seqlen_k, H, D, l.bc, err)) != FM_OK ||
      (st = tensor_map_bshd(&kp.tm_o, p->o, B, p->seqlen_q, H, D, 64, err)) != FM_OK)
    return st;
  kp.lse = p->lse;
  const int64_t nitems64 = (int64_t)B * H * l.base.Tr;
  if (nitems64 >= (1ll << 31)) return fm_fail(err, FM_EUNSUPPORTED, "sm90: too many row tiles");
  const int32_t nitems = (int32_t)nitems64;
  kp.nitems = nitems;

  /* workspace: counts, keys x2, items x2, the counter, CUB's scratch */
  const int order = l.tuning.sm90_order ? l.tuning.sm90_order : FM_SM90_ORDER_HEAD;
  const bool sorted = order != FM_SM90_ORDER_INDEX && l.variant == FM_VARIANT_SKIP;
  const int shift = bucket_shift(l.base.Tc, order), by_head = order == FM_SM90_ORDER_HEAD;
  int end_bit = 1;
  while ((((uint32_t)l.base.Tc) >> shift) >> end_bit) end_bit++;
  if (by_head) {
    end_bit = 33;
    while (end_bit < 64 && ((uint64_t)(B * H) >> (end_bit - 32))) end_bit++;
  }
  size_t cub_bytes = 0;
  cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, (const uint64_t *)nullptr,
                                                  (uint64_t *)nullptr, (const int32_t *)nullptr,
                                                  (int32_t *)nullptr, nitems, 0, end_bit, l.stream);
  if (e != cudaSuccess) return cuda_fail(err, e, "sm90: sort scratch size");
  const size_t n_counts = sorted ? (size_t)l.nsets * l.base.Tr : 0;
  const size_t off_keys = 256 * ((n_counts * 4 + 255) / 256);
  const size_t off_items = off_keys + 2 * 256 * (((size_t)nitems * 8 + 255) / 256);
  const size_t off_counter = off_items + 2 * 256 * (((size_t)nitems * 4 + 255) / 256);
  const size_t off_cub = off_counter + 256;
  const size_t ws_bytes = off_cub + cub_bytes;
  unsigned char *ws = nullptr;
  e = fm_ws_alloc((void **)&ws, ws_bytes, l.stream);
  if (e != cudaSuccess) return cuda_fail(err, e, "workspace allocation (sm90 work list)");
  int32_t *counts = sorted ? (int32_t *)ws : nullptr;
  uint64_t *keys_in = (uint64_t *)(ws + off_keys);
  uint64_t *keys_out = keys_in + 32 * (((size_t)nitems + 31) / 32);
  int32_t *items_in = (int32_t *)(ws + off_items);
  int32_t *items_out = items_in + 64 * (((size_t)nitems + 63) / 64);
  int32_t *counter = (int32_t *)(ws + off_counter);
  const char *what = "sm90 work list";
  if (sorted) {
    const int64_t threads = (int64_t)l.nsets * l.base.Tr * 32;
    fm90::row_work_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, l.stream>>>(
        l.base.bounds, counts, l.nsets, l.base.Tr, l.base.Tc, p->seqlen_q, l.br);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) {
    fm90::item_keys_kernel<<<(unsigned)((nitems + 255) / 256), 256, 0, l.stream>>>(
        counts, keys_in, items_in, nitems, l.base, shift, by_head);
    e = cudaGetLastError();
  }
  const int32_t *items = items_in;
  if (e == cudaSuccess && sorted) {
    e = cub::DeviceRadixSort::SortPairs(ws + off_cub, cub_bytes, keys_in, keys_out, items_in, items_out,
                                        nitems, 0, end_bit, l.stream);
    items = items_out;
  }
  if (e == cudaSuccess) e = cudaMemsetAsync(counter, 0, sizeof(int32_t), l.stream);
  uint32_t *words = nullptr;
  if (e == cudaSuccess && mask == FM_SM90_MASK_WORDS) {
    what = "sm90 words (mask method words)";
    e = words_workspace(l, D, &words, &mask);
    kp.words = words;
  }
  if (e == cudaSuccess) {
    kp.items = items;
    kp.next_item = counter;
    what = "sm90 forward kernel launch";
    const int grid = nitems < l.sms ? nitems : l.sms;
    e = D == 128 ? fm90::launch<128>(kp, (int)l.variant, l.instrumented, mode, mask, grid, l.stream)
                 : fm90::launch<64>(kp, (int)l.variant, l.instrumented, mode, mask, grid, l.stream);
  }
  cudaError_t e2 = cudaFreeAsync(ws, l.stream);
  cudaError_t e3 = words ? cudaFreeAsync(words, l.stream) : cudaSuccess;
  if (e != cudaSuccess) return cuda_fail(err, e, what);
  if (e2 != cudaSuccess) return cuda_fail(err, e2, "cudaFreeAsync (sm90 work list)");
  if (e3 != cudaSuccess) return cuda_fail(err, e3, "cudaFreeAsync (sm90 words)");
  return FM_OK;
}

}  // namespace fmk
