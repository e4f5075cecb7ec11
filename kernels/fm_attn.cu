/* fm_attn.cu — host side of the FlashMask forward kernels: argument checks,
 * the tile-bounds preprocessing kernel (shared by every kernel), the launcher
 * table indexed by the registry's fm_kernel_id (core/fm_kernels.h), device
 * discovery. The kernels and what each variant changes: fm_sm80_fwd.cuh (the
 * portable mma.sync kernel), fm_sm90_fwd.cuh (Hopper). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include <mutex>

#include "fm_cuda_status.cuh"
#include "fm_workspace.cuh"
#include "fm_attn.h"
#include "fm_pass_launch.cuh"
#include "fm_kernel_traits.h"
#include "fm_rng.h"
#include "fm_tile_rule.h"

namespace fmk {
/* One warp per (set, key tile): the 8 min/max bounds over the tile's real
 * columns, upper interval with the causal triangle folded in (fm_tile_rule.h).
 * out is (nsets, Tc). */
__global__ void __launch_bounds__(256) tile_bounds_kernel(const int32_t *__restrict__ iv,
                                                          fm_tile_bounds *__restrict__ out,
                                                          int32_t nsets, int32_t Sq, int32_t Sk,
                                                          int32_t Tc, int32_t BC, int causal) {
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (w >= (int64_t)nsets * Tc) return;
  int32_t set = (int32_t)(w / Tc), t = (int32_t)(w % Tc);
  const int32_t *lts = iv + (int64_t)set * 4 * Sk;
  const int32_t *lte = lts + Sk, *uts = lts + 2 * (int64_t)Sk, *ute = lts + 3 * (int64_t)Sk;
  fm_tile_bounds b;
  fm_bounds_reset(&b);
  int32_t j1 = min((t + 1) * BC, Sk);
  for (int32_t j = t * BC + lane; j < j1; j += 32) {
    int32_t us, ue;
    fm_effective_upper(__ldg(uts + j), __ldg(ute + j), causal, j, Sq, Sk, &us, &ue);
    fm_bounds_add(&b, __ldg(lts + j), __ldg(lte + j), us, ue);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    b.lts_min = min(b.lts_min, __shfl_xor_sync(0xffffffffu, b.lts_min, off));
    b.lts_max = max(b.lts_max, __shfl_xor_sync(0xffffffffu, b.lts_max, off));
    b.lte_min = min(b.lte_min, __shfl_xor_sync(0xffffffffu, b.lte_min, off));
    b.lte_max = max(b.lte_max, __shfl_xor_sync(0xffffffffu, b.lte_max, off));
    b.uts_min = min(b.uts_min, __shfl_xor_sync(0xffffffffu, b.uts_min, off));
    b.uts_max = max(b.uts_max, __shfl_xor_sync(0xffffffffu, b.uts_max, off));
    b.ute_min = min(b.ute_min, __shfl_xor_sync(0xffffffffu, b.ute_min, off));
    b.ute_max = max(b.ute_max, __shfl_xor_sync(0xffffffffu, b.ute_max, off));
  }
  if (lane == 0) out[w] = b;
}

/* N(0, 1) by Box-Muller from two 32-bit uniforms of a hash of (seed, index):
 * the distribution of torch.randn, which the timing protocol's inputs come
 * from. The distribution matters to timing, not only to checks: measured on
 * an H100 in one process (kernels/PERF_NOTES.md, "Seventh session: why the C
 * harness was slower than the protocol"), the earlier sum of four uniforms
 * (bounded at 3.46) made the sm90 forward 2.0-2.6% slower on causal_document
 * than torch.randn's values did. The bits: fm_fill_bits (core/fm_rng.h). */
__global__ void fill_random_kernel(__nv_bfloat16 *dst, int64_t n, uint64_t seed, int64_t first) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t x = fm_fill_bits(seed, (uint64_t)(first + i));
    const float u1 = ((float)(uint32_t)(x & 0xffffffffu) + 1.f) * 0x1.0p-32f; /* (0, 1] */
    const float u2 = (float)(uint32_t)(x >> 32) * 0x1.0p-32f;                /* [0, 1) */
    dst[i] = __float2bfloat16_rn(sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}


/* Paddle's startend_row_indices (sets, Sk, k) int32 to the kernels' interval
 * vectors (sets, 4, Sk): LTS, LTE, UTS, UTE with the form's implied values
 * (fm_attn.h, fm_attn_intervals_from_startend). Read as fm_intervals_load reads
 * a file: an index above Sq is Sq, an interval whose start is not before its
 * end is the canonical empty one (LT [Sq, Sq), UT [0, 0)); a negative index,
 * which the loader refuses, is taken as 0 here (no host round trip). */
__global__ void startend_kernel(const int32_t *__restrict__ sri, int32_t *__restrict__ out,
                                int64_t nsets, int32_t Sq, int32_t Sk, int k, int causal) {
  const int64_t n = nsets * Sk;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t set = i / Sk, j = i % Sk;
    int32_t a = Sq, e = Sq, c = 0, d = 0; /* no startend: no interval */
    if (sri) {
      const int32_t *v = sri + i * k;
      a = v[0];                          /* causal-1: [LTS] */
      if (k == 2 && causal) e = v[1];    /* causal-2: [LTS, LTE] */
      if (k == 2 && !causal) d = v[1];   /* bidir-2: [LTS, UTE] */
      if (k == 4) e = v[1], c = v[2], d = v[3];
    }
    a = min(max(a, 0), Sq), e = min(max(e, 0), Sq), c = min(max(c, 0), Sq), d = min(max(d, 0), Sq);
    if (a >= e) a = e = Sq;
    if (c >= d) c = d = 0;
    int32_t *o = out + set * 4 * (int64_t)Sk + j;
    o[0] = a;
    o[Sk] = e;
    o[2 * (int64_t)Sk] = c;
    o[3 * (int64_t)Sk] = d;
  }
}
}  // namespace fmk

extern "C" void fm_attn_problem_init(fm_attn_problem *p, const fm_colmask *m, int32_t batch,
                                     int32_t heads, int32_t head_dim, float softmax_scale) {
  memset(p, 0, sizeof *p);
  p->batch = batch;
  p->heads = heads;
  p->seqlen_q = fm_colmask_sq(m);
  p->seqlen_k = fm_colmask_sk(m);
  p->head_dim = head_dim;
  p->softmax_scale = softmax_scale;
  p->causal = fm_colmask_causal(m);
  p->mask_nb = fm_colmask_nb(m);
  p->mask_nh = fm_colmask_nh(m);
  p->kernel = FM_KERNEL_SM80;
}

extern "C" fm_status fm_attn_fill_random_bf16(void *dst, int64_t n, uint64_t seed, void *stream,
                                              fm_err *err) {
  return fm_attn_fill_random_bf16_at(dst, n, seed, 0, stream, err);
}

extern "C" fm_status fm_attn_fill_random_bf16_at(void *dst, int64_t n, uint64_t seed, int64_t first,
                                                 void *stream, fm_err *err) {
  if (!dst || n < 0 || first < 0)
    return fm_fail(err, FM_EINVAL, "fill: NULL destination or negative count or offset");
  if (n == 0) return FM_OK;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  fmk::fill_random_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(
      (__nv_bfloat16 *)dst, n, seed, first);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_fail(err, e, "fill kernel launch");
  return FM_OK;
}

/* The current device's properties; FM_EUNSUPPORTED when there is none. */
static fm_status current_device(cudaDeviceProp *prop, int *dev, fm_err *err) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  char why[200];
  if (e != cudaSuccess || n == 0)
    return fm_fail(err, FM_EUNSUPPORTED, "no usable CUDA device: %s",
                   fm_cuda_no_device_reason(e, why, sizeof why));
  e = cudaGetDevice(dev);
  if (e != cudaSuccess) return cuda_fail(err, e, "cudaGetDevice");
  e = cudaGetDeviceProperties(prop, *dev);
  if (e != cudaSuccess) return cuda_fail(err, e, "cudaGetDeviceProperties");
  return FM_OK;
}

extern "C" fm_status fm_attn_device_info(char *desc, int cap, fm_err *err) {
  cudaDeviceProp prop;
  int dev = 0;
  fm_status st = current_device(&prop, &dev, err);
  if (st != FM_OK) return st;
  fm_kernel_id k;
  if (fm_kernel_auto(prop.major, prop.minor, &k, NULL) != FM_OK)
    return fm_fail(err, FM_EUNSUPPORTED,
                   "device %d (%s) is sm_%d%d; fmsim's kernels need sm_80 or newer (sm90: sm_90 exactly)",
                   dev, prop.name, prop.major, prop.minor);
  if (desc && cap > 0)
    snprintf(desc, (size_t)cap, "%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30));
  return FM_OK;
}

extern "C" fm_status fm_attn_device_kernel(fm_kernel_id requested, fm_kernel_id *out, fm_err *err) {
  cudaDeviceProp prop;
  int dev = 0;
  fm_status st = current_device(&prop, &dev, err);
  if (st != FM_OK) return st;
  if (requested == FM_KERNEL_AUTO) return fm_kernel_auto(prop.major, prop.minor, out, err);
  const fm_kernel_desc *d = fm_kernel_get(requested);
  if (!d) return fm_fail(err, FM_EINVAL, "unknown kernel id %d", (int)requested);
  if (!fm_kernel_runs_on(requested, prop.major, prop.minor))
    return fm_fail(err, FM_EUNSUPPORTED, "kernel %s does not run on %s (sm_%d%d)", d->name, prop.name,
                   prop.major, prop.minor);
  *out = requested;
  return FM_OK;
}

/* The launchers, one row per registry kernel (NULL: the kernel has no such pass). */
static const struct {
  fm_kernel_id id;
  fmk::pass_launcher fwd, bwd;
} launchers[] = {{FM_KERNEL_SM80, fmk::launch_sm80, NULL},
                 {FM_KERNEL_SM90, fmk::launch_sm90, fmk::launch_sm90_bwd}};
static_assert(sizeof launchers / sizeof launchers[0] == FM_NKERNELS, "one launcher row per registry kernel");

/* The fields of every kernel's parameters that come from the problem (the
 * bounds are set once computed). */
static void fill_base(const fm_attn_problem *p, fm_variant variant, bool instrumented, int32_t br, int32_t bc,
                      fmd::attn_base *base) {
  fmd::attn_base &d = *base;
  memset(&d, 0, sizeof d);
  d.B = p->batch;
  d.H = p->heads;
  d.Sq = p->seqlen_q;
  d.Sk = p->seqlen_k;
  d.Tr = (p->seqlen_q + br - 1) / br;
  d.Tc = (p->seqlen_k + bc - 1) / bc;
  d.nb = p->mask_nb;
  d.nh = p->mask_nh;
  d.causal = p->causal ? 1 : 0;
  d.scale = p->softmax_scale;
  d.scale_log2 = p->softmax_scale * 1.4426950408889634f; /* log2(e) */
  if (variant == FM_VARIANT_DENSE) {
    d.dense = p->dense_mask;
    d.dense_set_stride = p->dense_per_set ? (int64_t)p->seqlen_q * p->seqlen_k : 0;
  } else {
    d.intervals = p->intervals;
  }
  if (instrumented) {
    d.tile_class = p->tile_class;
    d.tile_cycles = p->tile_cycles;
  }
}

/* Checks p for `pass`, fills l (tile, grid, bounds at the pass's tile) and
 * launches the bounds preprocessing; *bounds (freed by the caller on the
 * stream) is NULL for DENSE. */
static fm_status prepare(const fm_attn_problem *p, fm_pass pass, fm_variant variant, int instrumented,
                         const fm_attn_tuning *tuning, void *stream, fmk::pass_launch *l, fm_tile_bounds **bounds,
                         fm_err *err) {
  *bounds = NULL;
  if (!p) return fm_fail(err, FM_EINVAL, "fm_attn_%s: problem is NULL", fm_pass_name(pass));
  const fm_kernel_desc *kd = fm_kernel_get(p->kernel);
  if (!kd) return fm_fail(err, FM_EINVAL, "unknown kernel id %d (resolve auto first)", (int)p->kernel);
  int32_t br, bc;
  fm_status st = fm_kernel_tile_size(p->kernel, pass, p->head_dim, &br, &bc, err);
  if (st != FM_OK) return st;
  if (p->batch < 1 || p->heads < 1 || p->seqlen_q < 1 || p->seqlen_k < 1)
    return fm_fail(err, FM_EINVAL, "batch, heads, Sq, Sk must be >= 1 (got %d, %d, %d, %d)",
                   p->batch, p->heads, p->seqlen_q, p->seqlen_k);
  if ((int64_t)p->batch * p->heads > 65535)
    return fm_fail(err, FM_EUNSUPPORTED, "batch * heads = %lld exceeds 65535",
                   (long long)p->batch * p->heads);
  if ((p->mask_nb != 1 && p->mask_nb != p->batch) || (p->mask_nh != 1 && p->mask_nh != p->heads))
    return fm_fail(err, FM_EINVAL, "mask sets %d x %d must be 1 or the batch (%d) x heads (%d)",
                   p->mask_nb, p->mask_nh, p->batch, p->heads);
  if ((unsigned)variant >= FM_NVARIANTS || !(kd->variants & (1u << variant)))
    return fm_fail(err, FM_EINVAL, "kernel %s has no variant %d", kd->name, (int)variant);
  if (!p->q || !p->k || !p->v || !p->o || !p->lse)
    return fm_fail(err, FM_EINVAL, "q, k, v, o and lse must be device pointers (one is NULL)");
  if (pass == FM_PASS_BWD && (!p->dout || !p->dq || !p->dk || !p->dv))
    return fm_fail(err, FM_EINVAL, "the backward needs dout, dq, dk and dv (one is NULL)");
  if (variant == FM_VARIANT_DENSE ? !p->dense_mask : !p->intervals)
    return fm_fail(err, FM_EINVAL, "variant %s needs %s", fm_variant_name(variant),
                   variant == FM_VARIANT_DENSE ? "dense_mask" : "intervals");
  if (instrumented && (!p->tile_class || !p->tile_cycles))
    return fm_fail(err, FM_EINVAL, "the instrumented build needs tile_class and tile_cycles");
  if (p->mask_method < FM_MASK_METHOD_AUTO || p->mask_method > FM_MASK_METHOD_WORDS)
    return fm_fail(err, FM_EINVAL, "mask method %d: expected 0 (auto), 1 (slices), 2 (r2p) or 3 (words)",
                   (int)p->mask_method);
  if (p->mask_method != FM_MASK_METHOD_AUTO && p->kernel != FM_KERNEL_SM90)
    return fm_fail(err, FM_EUNSUPPORTED, "mask method %s: kernel %s has one way of masking a partial tile (auto only)",
                   fm_mask_method_name((fm_mask_method)p->mask_method), kd->name);
  if (!(p->softmax_scale > 0.f))
    return fm_fail(err, FM_EINVAL, "softmax scale must be positive (got %g)", (double)p->softmax_scale);

  l->p = p;
  l->variant = variant;
  l->instrumented = instrumented != 0;
  l->stream = (cudaStream_t)stream;
  l->br = br;
  l->bc = bc;
  l->nsets = p->mask_nb * p->mask_nh;
  if (tuning) l->tuning = *tuning;
  else memset(&l->tuning, 0, sizeof l->tuning);
  if (!l->tuning.sm90_mask) l->tuning.sm90_mask = p->mask_method; /* the harness's knob, else the problem's */
  fill_base(p, variant, instrumented != 0, br, bc, &l->base);
  int dev = 0;
  l->sms = 0;
  CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  CUDA_TRY(cudaDeviceGetAttribute(&l->sms, cudaDevAttrMultiProcessorCount, dev), "multiprocessor count");
  if (l->sms < 1) return fm_fail(err, FM_EUNSUPPORTED, "the device reports no multiprocessor");
  if (variant == FM_VARIANT_DENSE) return FM_OK;
  const int64_t ntiles = (int64_t)l->nsets * l->base.Tc;
  cudaError_t e = fm_ws_alloc((void **)bounds, (size_t)ntiles * sizeof(fm_tile_bounds), l->stream);
  if (e != cudaSuccess) return cuda_fail(err, e, "workspace allocation (tile bounds)");
  const int64_t threads = ntiles * 32;
  fmk::tile_bounds_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, l->stream>>>(
      p->intervals, *bounds, l->nsets, p->seqlen_q, p->seqlen_k, l->base.Tc, bc, p->causal ? 1 : 0);
  e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_fail(err, e, "tile bounds kernel launch");
  l->base.bounds = *bounds;
  return FM_OK;
}

/* The pass of problem p: prepare, the kernel's launcher, the bounds freed.
 * tuning NULL: the library's choices. */
static fm_status run_pass(const fm_attn_problem *p, fm_pass pass, fm_variant variant, int instrumented,
                          const fm_attn_tuning *tuning, void *stream, fm_err *err) {
  fmk::pass_launch l;
  fm_tile_bounds *bounds = NULL;
  fm_status st = prepare(p, pass, variant, instrumented, tuning, stream, &l, &bounds, err);
  if (st == FM_OK) {
    st = fm_fail(err, FM_EUNSUPPORTED, "kernel %s has no %s launcher", fm_kernel_get(p->kernel)->name,
                 fm_pass_name(pass));
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++)
      if (launchers[i].id == p->kernel && (pass == FM_PASS_FWD ? launchers[i].fwd : launchers[i].bwd))
        st = (pass == FM_PASS_FWD ? launchers[i].fwd : launchers[i].bwd)(l, err);
  }
  if (bounds) {
    cudaError_t e = cudaFreeAsync(bounds, (cudaStream_t)stream);
    if (st == FM_OK && e != cudaSuccess) return cuda_fail(err, e, "cudaFreeAsync (tile bounds)");
  }
  return st;
}

extern "C" fm_status fm_attn_forward(const fm_attn_problem *p, fm_variant variant, int instrumented,
                                     void *stream, fm_err *err) {
  return run_pass(p, FM_PASS_FWD, variant, instrumented, NULL, stream, err);
}

extern "C" fm_status fm_attn_backward(const fm_attn_problem *p, fm_variant variant, int instrumented,
                                      void *stream, fm_err *err) {
  return run_pass(p, FM_PASS_BWD, variant, instrumented, NULL, stream, err);
}

extern "C" fm_status fm_attn_launch_run(void *user, void *stream, fm_err *err) {
  const fm_attn_launch *l = (const fm_attn_launch *)user;
  if (l->pass != FM_PASS_FWD && l->pass != FM_PASS_BWD)
    return fm_fail(err, FM_EINVAL, "a launch runs one pass (fwd or bwd), not %d", (int)l->pass);
  return run_pass(&l->p, l->pass, l->variant, l->instrumented, NULL, stream, err);
}

extern "C" fm_status fm_attn_tuned_launch_run(void *user, void *stream, fm_err *err) {
  const fm_attn_tuned_launch *t = (const fm_attn_tuned_launch *)user;
  const fm_attn_launch *l = &t->launch;
  if (l->pass != FM_PASS_FWD && l->pass != FM_PASS_BWD)
    return fm_fail(err, FM_EINVAL, "a launch runs one pass (fwd or bwd), not %d", (int)l->pass);
  return run_pass(&l->p, l->pass, l->variant, l->instrumented, &t->tuning, stream, err);
}

extern "C" size_t fm_attn_problem_size(void) { return sizeof(fm_attn_problem); }

extern "C" const char *fm_attn_problem_member(int32_t i, size_t *offset) {
#define FM_MEMBER(m) {#m, offsetof(fm_attn_problem, m)}
  static const struct {
    const char *name;
    size_t offset;
  } members[] = {FM_MEMBER(batch),       FM_MEMBER(heads),         FM_MEMBER(seqlen_q),   FM_MEMBER(seqlen_k),
                 FM_MEMBER(head_dim),    FM_MEMBER(softmax_scale), FM_MEMBER(causal),     FM_MEMBER(mask_nb),
                 FM_MEMBER(mask_nh),     FM_MEMBER(q),             FM_MEMBER(k),          FM_MEMBER(v),
                 FM_MEMBER(o),           FM_MEMBER(lse),           FM_MEMBER(intervals),  FM_MEMBER(dense_mask),
                 FM_MEMBER(tile_class),  FM_MEMBER(tile_cycles),   FM_MEMBER(dense_per_set), FM_MEMBER(kernel),
                 FM_MEMBER(dout),        FM_MEMBER(dq),            FM_MEMBER(dk),         FM_MEMBER(dv),
                 FM_MEMBER(deterministic), FM_MEMBER(mask_method)};
#undef FM_MEMBER
  static_assert(sizeof members / sizeof members[0] == 26, "fm_attn_problem_member: every member, in order");
  if (i < 0 || (size_t)i >= sizeof members / sizeof members[0]) return NULL;
  if (offset) *offset = members[i].offset;
  return members[i].name;
}

extern "C" fm_status fm_attn_intervals_from_startend(const int32_t *startend, int32_t k, int64_t nsets,
                                                     int32_t seqlen_q, int32_t seqlen_k, int causal,
                                                     int32_t *intervals, void *stream, fm_err *err) {
  if (!intervals) return fm_fail(err, FM_EINVAL, "startend_row_indices: NULL destination");
  if (nsets < 1 || seqlen_q < 1 || seqlen_k < 1)
    return fm_fail(err, FM_EINVAL, "startend_row_indices: sets, Sq and Sk must be >= 1");
  if (startend && (causal ? (k != 1 && k != 2) : (k != 2 && k != 4)))
    return fm_fail(err, FM_EINVAL,
                   "startend_row_indices: its last dimension is %d; a %s mask takes %s", (int)k,
                   causal ? "causal" : "bidirectional", causal ? "1 or 2" : "2 or 4");
  const int64_t n = nsets * seqlen_k;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  fmk::startend_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(
      startend, intervals, nsets, seqlen_q, seqlen_k, (int)k, causal ? 1 : 0);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_fail(err, e, "startend_row_indices conversion kernel launch");
  return FM_OK;
}

/* The library's workspace pools (fm_workspace.cuh): one per device, made on
 * first use, kept for the process. */
enum { FM_WS_DEVICES = 64 };
static std::mutex ws_mutex;
static cudaMemPool_t ws_pools[FM_WS_DEVICES];

static cudaError_t ws_pool(int dev, bool create, cudaMemPool_t *out) {
  std::lock_guard<std::mutex> lock(ws_mutex);
  *out = ws_pools[dev];
  if (*out || !create) return cudaSuccess;
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaError_t e = cudaMemPoolCreate(out, &props);
  uint64_t keep = UINT64_MAX;
  if (e == cudaSuccess) e = cudaMemPoolSetAttribute(*out, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e == cudaSuccess) ws_pools[dev] = *out;
  else if (*out) cudaMemPoolDestroy(*out), *out = NULL;
  return e;
}

cudaError_t fm_ws_alloc(void **p, size_t bytes, cudaStream_t s) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < 0 || dev >= FM_WS_DEVICES) return cudaMallocAsync(p, bytes, s); /* CUDA's default pool */
  cudaMemPool_t pool = NULL;
  e = ws_pool(dev, true, &pool);
  return e == cudaSuccess ? cudaMallocFromPoolAsync(p, bytes, pool, s) : e;
}

extern "C" fm_status fm_attn_trim_workspace(int32_t device, size_t keep_bytes, fm_err *err) {
  if (device < 0) return fm_fail(err, FM_EINVAL, "fm_attn_trim_workspace: device %d", device);
  if (device >= FM_WS_DEVICES) return FM_OK; /* its workspaces come from CUDA's default pool */
  cudaMemPool_t pool = NULL;
  cudaError_t e = ws_pool(device, false, &pool);
  if (e == cudaSuccess && pool) e = cudaMemPoolTrimTo(pool, keep_bytes);
  return e == cudaSuccess ? FM_OK : cuda_fail(err, e, "cudaMemPoolTrimTo (workspace)");
}

extern "C" fm_status fm_attn_use_device(int32_t device, fm_err *err) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
  return FM_OK;
}

/* The bindings' entry: shape's scalars with these pointers and intervals. */
static fm_status run_ptrs(const fm_attn_problem *shape, fm_pass pass, int32_t device, const int32_t *intervals,
                          const void *const *ptr, int variant, void *stream, fm_err *err) {
  if (!shape) return fm_fail(err, FM_EINVAL, "fm_attn_%s_ptrs: problem is NULL", fm_pass_name(pass));
  int cur = -1;
  cudaError_t e = cudaGetDevice(&cur);
  if (e == cudaSuccess && cur != device) e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
  fm_attn_problem p = *shape;
  p.q = ptr[0], p.k = ptr[1], p.v = ptr[2], p.o = (void *)ptr[3], p.lse = (float *)ptr[4];
  if (pass == FM_PASS_BWD) p.dout = ptr[5], p.dq = (void *)ptr[6], p.dk = (void *)ptr[7], p.dv = (void *)ptr[8];
  p.intervals = intervals;
  p.tile_class = NULL, p.tile_cycles = NULL;
  return run_pass(&p, pass, (fm_variant)variant, 0, NULL, stream, err);
}

extern "C" fm_status fm_attn_forward_ptrs(const fm_attn_problem *shape, int32_t device, const int32_t *intervals,
                                          const void *q, const void *k, const void *v, void *o, float *lse,
                                          int variant, void *stream, fm_err *err) {
  const void *ptr[5] = {q, k, v, o, lse};
  return run_ptrs(shape, FM_PASS_FWD, device, intervals, ptr, variant, stream, err);
}

extern "C" fm_status fm_attn_backward_ptrs(const fm_attn_problem *shape, int32_t device, const int32_t *intervals,
                                           const void *q, const void *k, const void *v, const void *o,
                                           const float *lse, const void *dout, void *dq, void *dk, void *dv,
                                           int variant, void *stream, fm_err *err) {
  const void *ptr[9] = {q, k, v, o, lse, dout, dq, dk, dv};
  return run_ptrs(shape, FM_PASS_BWD, device, intervals, ptr, variant, stream, err);
}
