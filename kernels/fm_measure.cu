/* fm_measure.cu — the measurement harness of `fmsim run` and `fmsim bench`
 * (fm_measure.h): buffers, random bf16 inputs, the mask on the device,
 * timed / counted / instrumented launches of fm_attn_forward.
 *
 * Order of the phases of one case (docs/DESIGN.md, "Timing and CUPTI": time and count
 * never together):
 *   1. plain build: warm-up, then timed launches (activity records, events),
 *      an L2 flush before every launch;
 *   2. one counted launch of the plain build under the Range Profiler;
 *   3. instrumented build: timed launches (its overhead), and its per-tile
 *      record copied back from the last of them.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_cuda_status.cuh"
#include "fm_measure.h"

struct fm_gpu_session {
  fm_gpu_props props;
  int64_t max_tokens, max_hidden, max_dense;
  uint16_t *q, *k, *v, *o; /* (B, S, H, D) bf16, max_tokens * max_hidden each */
  float *lse;              /* (B, H, S): max_tokens * max_hidden / 64 floats */
  int32_t *iv;             /* (nsets, 4, Sk) int32 */
  int64_t iv_cap;          /* bytes */
  uint8_t *dense;          /* (dense sets, Sq, Sk) uint8, max_dense bytes */
  uint8_t *tcls;           /* (B, H, Tr, Tc) */
  int64_t *tcyc;
  int64_t tiles_cap;
  cudaStream_t stream;
};

/* Uniform bf16 in [-1, 1) from a hash of (seed, index): deterministic. */
__global__ void fm_fill_bf16_kernel(uint16_t *x, int64_t n, uint64_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    float f = (float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    uint32_t bits = __float_as_uint(f);
    x[i] = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16); /* round to nearest even */
  }
}

/* Dense expansion of the interval vectors on the device: (nsets, Sq, Sk), 1 = masked. */
__global__ void fm_dense_from_intervals_kernel(const int32_t *iv, uint8_t *out, int32_t nsets,
                                               int32_t sq, int32_t sk, int causal) {
  int64_t total = (int64_t)nsets * sq * sk;
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < total;
       x += (int64_t)gridDim.x * blockDim.x) {
    int32_t j = (int32_t)(x % sk);
    int64_t r = x / sk;
    int32_t i = (int32_t)(r % sq), set = (int32_t)(r / sq);
    const int32_t *v = iv + (int64_t)set * 4 * sk;
    int m = (i >= v[j] && i < v[sk + j]) || (i >= v[2 * sk + j] && i < v[3 * (int64_t)sk + j]) ||
            (causal && (int64_t)i < (int64_t)j + sq - sk);
    out[x] = (uint8_t)m;
  }
}

extern "C" fm_status fm_gpu_session_create(int64_t max_tokens, int64_t max_hidden,
                                           int64_t max_dense, uint64_t seed,
                                           fm_gpu_session **out, fm_err *err) {
  *out = NULL;
  char desc[256];
  fm_status st = fm_attn_device_info(desc, sizeof desc, err);
  if (st != FM_OK) return st;
  fm_gpu_session *s = (fm_gpu_session *)calloc(1, sizeof *s);
  if (!s) return fm_fail(err, FM_ENOMEM, "out of memory");
  *out = s;
  if ((st = fm_gpu_props_get(&s->props, err)) != FM_OK) goto fail;
  s->max_tokens = max_tokens;
  s->max_hidden = max_hidden;
  s->max_dense = max_dense;
  {
    int64_t n = max_tokens * max_hidden;
    int64_t need = 4 * n * 2 + n / 64 * 4 + max_dense;
    if (need > s->props.mem_bytes - ((int64_t)4 << 30)) {
      st = fm_fail(err, FM_ENOMEM,
                   "the case needs %.1f GiB of device memory, %s has %.1f GiB",
                   (double)need / (1 << 30), s->props.name, (double)s->props.mem_bytes / (1 << 30));
      goto fail;
    }
    cudaError_t e;
    const char *what = "cudaMalloc (Q, K, V, O)";
    if ((e = cudaMalloc((void **)&s->q, (size_t)n * 2)) != cudaSuccess ||
        (e = cudaMalloc((void **)&s->k, (size_t)n * 2)) != cudaSuccess ||
        (e = cudaMalloc((void **)&s->v, (size_t)n * 2)) != cudaSuccess ||
        (e = cudaMalloc((void **)&s->o, (size_t)n * 2)) != cudaSuccess ||
        (what = "cudaMalloc (LSE)", e = cudaMalloc((void **)&s->lse, (size_t)(n / 64 + 1) * 4)) !=
            cudaSuccess ||
        (what = "cudaMalloc (dense mask)",
         e = max_dense ? cudaMalloc((void **)&s->dense, (size_t)max_dense) : cudaSuccess) !=
            cudaSuccess ||
        (what = "cudaStreamCreate", e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking)) !=
            cudaSuccess) {
      st = cuda_fail(err, e, what);
      goto fail;
    }
    int blocks = 8 * (s->props.sm_count > 0 ? s->props.sm_count : 1);
    fm_fill_bf16_kernel<<<blocks, 256, 0, s->stream>>>(s->q, n, seed * 3 + 1);
    fm_fill_bf16_kernel<<<blocks, 256, 0, s->stream>>>(s->k, n, seed * 3 + 2);
    fm_fill_bf16_kernel<<<blocks, 256, 0, s->stream>>>(s->v, n, seed * 3 + 3);
    if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaStreamSynchronize(s->stream)) != cudaSuccess) {
      st = cuda_fail(err, e, "random inputs");
      goto fail;
    }
  }
  return FM_OK;
fail:
  fm_gpu_session_destroy(s);
  *out = NULL;
  return st;
}

extern "C" void fm_gpu_session_destroy(fm_gpu_session *s) {
  if (!s) return;
  cudaFree(s->q);
  cudaFree(s->k);
  cudaFree(s->v);
  cudaFree(s->o);
  cudaFree(s->lse);
  cudaFree(s->iv);
  cudaFree(s->dense);
  cudaFree(s->tcls);
  cudaFree(s->tcyc);
  if (s->stream) cudaStreamDestroy(s->stream);
  free(s);
}

extern "C" const fm_gpu_props *fm_gpu_session_props(const fm_gpu_session *s) {
  return &s->props;
}

extern "C" void fm_gpu_result_free(fm_gpu_result *r) {
  if (!r) return;
  free(r->fwd.tile_class);
  free(r->fwd.tile_cycles);
  free(r->bwd.tile_class);
  free(r->bwd.tile_cycles);
  free(r->timeline.events);
  memset(r, 0, sizeof *r);
}

typedef struct launch_ctx {
  fm_attn_problem p;
  fm_variant variant;
  int instrumented;
} launch_ctx;

static fm_status launch_forward(void *user, void *stream, fm_err *err) {
  launch_ctx *c = (launch_ctx *)user;
  return fm_attn_forward(&c->p, c->variant, c->instrumented, stream, err);
}

extern "C" fm_status fm_gpu_session_kernel(const fm_gpu_session *s, fm_kernel_id requested,
                                           fm_kernel_id *out, fm_err *err) {
  (void)s; /* the session's device is the current one */
  return fm_attn_device_kernel(requested, out, err);
}

extern "C" fm_status fm_gpu_session_run(fm_gpu_session *s, const fm_gpu_case *c,
                                        const fm_gpu_opts *o, fm_gpu_result *r, fm_err *err) {
  memset(r, 0, sizeof *r);
  const fm_colmask *m = c->mask;
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), nsets = fm_colmask_nsets(m);
  int64_t tokens = (int64_t)c->batch * (sq > sk ? sq : sk), hidden = (int64_t)c->heads * c->head_dim;
  if (tokens > s->max_tokens || hidden > s->max_hidden)
    return fm_fail(err, FM_EINVAL, "case B*S = %lld, H*D = %lld exceeds the session (%lld, %lld)",
                   (long long)tokens, (long long)hidden, (long long)s->max_tokens,
                   (long long)s->max_hidden);
  if (c->variant == FM_VARIANT_DENSE && (int64_t)nsets * sq * sk > s->max_dense)
    return fm_fail(err, FM_EINVAL, "the dense mask (%lld bytes) exceeds the session's %lld",
                   (long long)nsets * sq * sk, (long long)s->max_dense);
  fm_kernel_id kernel;
  fm_status kst = fm_gpu_session_kernel(s, c->kernel, &kernel, err);
  if (kst != FM_OK) return kst;
  int32_t br = 0, bc = 0, bbr = 0, bbc = 0;
  const fm_pass pass = c->pass ? c->pass : FM_PASS_FWD;
  if ((kst = fm_kernel_tile_size(kernel, FM_PASS_FWD, c->head_dim, &br, &bc, err)) != FM_OK) return kst;
  if ((pass & FM_PASS_BWD) &&
      (kst = fm_kernel_tile_size(kernel, FM_PASS_BWD, c->head_dim, &bbr, &bbc, err)) != FM_OK)
    return kst;
  fm_gpu_pass_result *rf = &r->fwd;
  rf->tr = (sq + br - 1) / br;
  rf->tc = (sk + bc - 1) / bc;
  int64_t tiles = (int64_t)c->batch * c->heads * rf->tr * rf->tc;

  int64_t ivb = (int64_t)nsets * 4 * sk * 4;
  if (ivb > s->iv_cap) {
    cudaFree(s->iv);
    s->iv = NULL;
    s->iv_cap = 0;
    CUDA_TRY(cudaMalloc((void **)&s->iv, (size_t)ivb), "cudaMalloc (interval vectors)");
    s->iv_cap = ivb;
  }
  CUDA_TRY(cudaMemcpyAsync(s->iv, fm_colmask_cvec(m, 0, FM_LTS), (size_t)ivb,
                           cudaMemcpyHostToDevice, s->stream),
           "cudaMemcpy (interval vectors)");
  if (c->variant == FM_VARIANT_DENSE) {
    fm_dense_from_intervals_kernel<<<8 * s->props.sm_count, 256, 0, s->stream>>>(
        s->iv, s->dense, nsets, sq, sk, fm_colmask_causal(m));
    CUDA_TRY(cudaGetLastError(), "dense mask kernel");
  }
  if (o->instrument && tiles > s->tiles_cap) {
    cudaFree(s->tcls);
    cudaFree(s->tcyc);
    s->tcls = NULL;
    s->tcyc = NULL;
    s->tiles_cap = 0;
    CUDA_TRY(cudaMalloc((void **)&s->tcls, (size_t)tiles), "cudaMalloc (tile classes)");
    CUDA_TRY(cudaMalloc((void **)&s->tcyc, (size_t)tiles * 8), "cudaMalloc (tile cycles)");
    s->tiles_cap = tiles;
  }
  CUDA_TRY(cudaStreamSynchronize(s->stream), "mask upload");

  launch_ctx lc;
  memset(&lc, 0, sizeof lc);
  fm_attn_problem *p = &lc.p;
  fm_attn_problem_init(p, m, c->batch, c->heads, c->head_dim, 1.0f / sqrtf((float)c->head_dim));
  p->q = s->q;
  p->k = s->k;
  p->v = s->v;
  p->o = s->o;
  p->lse = s->lse;
  p->intervals = s->iv;
  p->dense_mask = c->variant == FM_VARIANT_DENSE ? s->dense : NULL;
  p->dense_per_set = nsets > 1;
  p->kernel = kernel;
  lc.variant = c->variant;

  fm_status st;
  fm_time_opts to = {.warmup = o->warmup, .reps = o->reps, .warmup_min_ms = 0, .flush_l2 = 1, .use_cupti = o->use_cupti};
  if ((st = fm_time_launches(launch_forward, &lc, s->stream, &to, &rf->timing,
                             o->want_timeline ? &r->timeline : NULL, err)) != FM_OK)
    return st;
  if (o->count_bytes && o->use_cupti) {
    if ((st = fm_count_launch(launch_forward, &lc, s->stream, 1, &rf->measured, err)) != FM_OK)
      return st;
  } else {
    snprintf(rf->measured.note, sizeof rf->measured.note, "no counters: %s",
             o->use_cupti ? "not requested" : "CUPTI not requested");
  }
  rf->instr_overhead = NAN;
  if (o->instrument) {
    launch_ctx plain = lc;
    lc.instrumented = 1;
    p->tile_class = s->tcls;
    p->tile_cycles = s->tcyc;
    if (o->instrument_reps > 0) {
      /* plain and instrumented interleaved: the overhead is a ratio of two medians
         taken under the same clocks */
      const fm_launch_fn fns[2] = {launch_forward, launch_forward};
      void *const users[2] = {&plain, &lc};
      fm_timing tt[2];
      fm_time_opts ti = {.warmup = 1, .reps = o->instrument_reps, .warmup_min_ms = 30, .flush_l2 = 1};
      if ((st = fm_time_interleaved(2, fns, users, s->stream, &ti, tt, err)) != FM_OK) return st;
      rf->timing_instrumented = tt[1];
      rf->instr_overhead = tt[1].median_ms / tt[0].median_ms - 1.0;
    } else {
      if ((st = fm_l2_flush(s->stream, err)) != FM_OK) return st;
      if ((st = launch_forward(&lc, s->stream, err)) != FM_OK) return st;
    }
    if (o->want_tiles) {
      rf->tile_class = (uint8_t *)malloc((size_t)tiles);
      rf->tile_cycles = (int64_t *)malloc((size_t)tiles * 8);
      if (!rf->tile_class || !rf->tile_cycles)
        return fm_fail(err, FM_ENOMEM, "cannot allocate %lld tiles of instrumentation record",
                       (long long)tiles);
      CUDA_TRY(cudaMemcpyAsync(rf->tile_class, s->tcls, (size_t)tiles, cudaMemcpyDeviceToHost,
                               s->stream), "cudaMemcpy (tile classes)");
      CUDA_TRY(cudaMemcpyAsync(rf->tile_cycles, s->tcyc, (size_t)tiles * 8, cudaMemcpyDeviceToHost,
                               s->stream), "cudaMemcpy (tile cycles)");
    }
  }
  CUDA_TRY(cudaStreamSynchronize(s->stream), "measurement");
  return FM_OK;
}
