/* fm_measure.cu — the measurement harness of `fmsim run` and `fmsim bench`
 * (fm_measure.h): buffers, random bf16 inputs, the mask on the device,
 * timed / counted / instrumented launches of either pass (fm_attn_launch_run).
 *
 * Order of the phases of one pass (docs/DESIGN.md, "Timing and CUPTI": time and count
 * never together; the forward first when the case has both, and before the
 * backward one forward launch that gives it O and LSE):
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
#include <time.h>

#include "fm_cuda_status.cuh"
#include "fm_measure.h"

struct fm_gpu_session {
  fm_gpu_props props;
  int64_t max_tokens, max_hidden, max_dense;
  uint16_t *q, *k, *v, *o; /* (B, S, H, D) bf16, max_tokens * max_hidden each */
  uint16_t *dout, *dq, *dk, *dv; /* the same, once a case has a backward (ensure_backward_buffers) */
  uint64_t seed;
  float *lse;              /* (B, H, S): max_tokens * max_hidden / 64 floats */
  int32_t *iv;             /* (nsets, 4, Sk) int32 */
  int64_t iv_cap;          /* bytes */
  uint8_t *dense;          /* (dense sets, Sq, Sk) uint8, max_dense bytes */
  uint8_t *tcls;           /* (B, H, Tr, Tc) */
  int64_t *tcyc;
  int64_t tiles_cap;
  cudaStream_t stream;
};

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
  s->seed = seed;
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
    /* the inputs of every harness: fm_attn_fill_random_bf16's N(0, 1), torch.randn's
       distribution, which the timing protocol's inputs have (timing depends on it) */
    if ((st = fm_attn_fill_random_bf16(s->q, n, seed * 3 + 1, s->stream, err)) != FM_OK ||
        (st = fm_attn_fill_random_bf16(s->k, n, seed * 3 + 2, s->stream, err)) != FM_OK ||
        (st = fm_attn_fill_random_bf16(s->v, n, seed * 3 + 3, s->stream, err)) != FM_OK)
      goto fail;
    if ((e = cudaStreamSynchronize(s->stream)) != cudaSuccess) {
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
  cudaFree(s->dout);
  cudaFree(s->dq);
  cudaFree(s->dk);
  cudaFree(s->dv);
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

extern "C" fm_status fm_gpu_session_kernel(const fm_gpu_session *s, fm_kernel_id requested,
                                           fm_kernel_id *out, fm_err *err) {
  (void)s; /* the session's device is the current one */
  return fm_attn_device_kernel(requested, out, err);
}

/* The backward's buffers (dO random, dQ, dK, dV), allocated by the first
 * case that has a backward, sized like Q. */
static fm_status ensure_backward_buffers(fm_gpu_session *s, fm_err *err) {
  if (s->dout) return FM_OK;
  const int64_t n = s->max_tokens * s->max_hidden;
  size_t free_b = 0, total_b = 0;
  CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if ((int64_t)free_b < 4 * n * 2 + ((int64_t)1 << 30))
    return fm_fail(err, FM_ENOMEM, "the backward needs %.1f GiB more device memory (dO, dQ, dK, dV); %s has "
                   "%.1f GiB free", (double)(4 * n * 2) / (1 << 30), s->props.name, (double)free_b / (1 << 30));
  CUDA_TRY(cudaMalloc((void **)&s->dout, (size_t)n * 2), "cudaMalloc (dO)");
  CUDA_TRY(cudaMalloc((void **)&s->dq, (size_t)n * 2), "cudaMalloc (dQ)");
  CUDA_TRY(cudaMalloc((void **)&s->dk, (size_t)n * 2), "cudaMalloc (dK)");
  CUDA_TRY(cudaMalloc((void **)&s->dv, (size_t)n * 2), "cudaMalloc (dV)");
  return fm_attn_fill_random_bf16(s->dout, n, s->seed * 3 + 4, s->stream, err);
}

/* Device memory for `tiles` instrumented tile records. */
static fm_status ensure_tile_buffers(fm_gpu_session *s, int64_t tiles, fm_err *err) {
  if (tiles <= s->tiles_cap) return FM_OK;
  cudaFree(s->tcls);
  cudaFree(s->tcyc);
  s->tcls = NULL;
  s->tcyc = NULL;
  s->tiles_cap = 0;
  CUDA_TRY(cudaMalloc((void **)&s->tcls, (size_t)tiles), "cudaMalloc (tile classes)");
  CUDA_TRY(cudaMalloc((void **)&s->tcyc, (size_t)tiles * 8), "cudaMalloc (tile cycles)");
  s->tiles_cap = tiles;
  return FM_OK;
}

/* One pass of the case, the phases of the file's comment: plain build timed
 * (its kernel records into tl when not NULL), counted, instrumented build
 * timed interleaved with the plain one and its tile record downloaded. lc
 * holds the problem and the pass; rp->tr, rp->tc are set. */
static fm_status measure_pass(fm_gpu_session *s, fm_attn_launch *lc, const fm_gpu_opts *o,
                              fm_gpu_pass_result *rp, fm_timeline *tl, fm_err *err) {
  fm_status st;
  const fm_attn_problem *p = &lc->p;
  const int64_t tiles = (int64_t)p->batch * p->heads * rp->tr * rp->tc;
  /* the sustained figure is the protocol's: CUDA events around each launch, no profiler attached
     (CUPTI's kernel records stay for the launches counted apart and the other figures) */
  fm_time_opts to = {.warmup = o->warmup, .reps = o->reps, .warmup_min_ms = o->sustain_ms > 0 ? 1000.0 : 0.0,
                     .flush_l2 = 1, .use_cupti = o->sustain_ms > 0 ? 0 : o->use_cupti,
                     .sustain_ms = (double)o->sustain_ms};
  if (o->settle_ms > 0) {
    CUDA_TRY(cudaStreamSynchronize(s->stream), "synchronize before settling");
    const struct timespec ts = {.tv_sec = o->settle_ms / 1000, .tv_nsec = (long)(o->settle_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  if ((st = fm_time_launches(fm_attn_launch_run, lc, s->stream, &to, &rp->timing, tl, err)) != FM_OK) return st;
  if (o->count_bytes && o->use_cupti) {
    if ((st = fm_count_launch(fm_attn_launch_run, lc, s->stream, 1, &rp->measured, err)) != FM_OK) return st;
  } else {
    snprintf(rp->measured.note, sizeof rp->measured.note, "no counters: %s",
             o->use_cupti ? "not requested" : "CUPTI not requested");
  }
  rp->instr_overhead = NAN;
  if (!o->instrument) return FM_OK;
  fm_attn_launch inst = *lc;
  inst.instrumented = 1;
  inst.p.tile_class = s->tcls;
  inst.p.tile_cycles = s->tcyc;
  if (o->instrument_reps > 0) {
    /* plain and instrumented interleaved: the overhead is the median of the
       rounds' ratios, each taken under the same clock */
    const fm_launch_fn fns[2] = {fm_attn_launch_run, fm_attn_launch_run};
    void *const users[2] = {lc, &inst};
    fm_timing tt[2];
    double ratio[2];
    fm_time_opts ti = {.warmup = 1, .reps = o->instrument_reps, .warmup_min_ms = 30, .flush_l2 = 1};
    if ((st = fm_time_interleaved(2, fns, users, s->stream, &ti, tt, ratio, err)) != FM_OK) return st;
    rp->timing_instrumented = tt[1];
    rp->instr_overhead = ratio[1] - 1.0;
  } else {
    if ((st = fm_l2_flush(s->stream, err)) != FM_OK) return st;
    if ((st = fm_attn_launch_run(&inst, s->stream, err)) != FM_OK) return st;
  }
  if (!o->want_tiles) return FM_OK;
  rp->tile_class = (uint8_t *)malloc((size_t)tiles);
  rp->tile_cycles = (int64_t *)malloc((size_t)tiles * 8);
  if (!rp->tile_class || !rp->tile_cycles)
    return fm_fail(err, FM_ENOMEM, "cannot allocate %lld tiles of instrumentation record", (long long)tiles);
  CUDA_TRY(cudaMemcpyAsync(rp->tile_class, s->tcls, (size_t)tiles, cudaMemcpyDeviceToHost, s->stream),
           "cudaMemcpy (tile classes)");
  CUDA_TRY(cudaMemcpyAsync(rp->tile_cycles, s->tcyc, (size_t)tiles * 8, cudaMemcpyDeviceToHost, s->stream),
           "cudaMemcpy (tile cycles)");
  return FM_OK;
}

extern "C" fm_status fm_gpu_session_run(fm_gpu_session *s, const fm_gpu_case *c,
                                        const fm_gpu_opts *o, fm_gpu_result *r, fm_err *err) {
  memset(r, 0, sizeof *r);
  r->fwd.instr_overhead = r->bwd.instr_overhead = NAN;
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
  const fm_pass pass = c->pass ? c->pass : FM_PASS_FWD;
  if (pass & ~FM_PASS_BOTH) return fm_fail(err, FM_EINVAL, "unknown pass %d", (int)pass);
  fm_kernel_id kernel;
  fm_status st = fm_gpu_session_kernel(s, c->kernel, &kernel, err);
  if (st != FM_OK) return st;
  fm_gpu_pass_result *rp[2] = {&r->fwd, &r->bwd};
  const fm_pass passes[2] = {FM_PASS_FWD, FM_PASS_BWD};
  int64_t tiles_max = 0;
  for (int q = 0; q < 2; q++) {
    if (!(pass & passes[q])) continue;
    int32_t br, bc;
    if ((st = fm_kernel_tile_size(kernel, passes[q], c->head_dim, &br, &bc, err)) != FM_OK) return st;
    rp[q]->tr = (sq + br - 1) / br;
    rp[q]->tc = (sk + bc - 1) / bc;
    const int64_t tiles = (int64_t)c->batch * c->heads * rp[q]->tr * rp[q]->tc;
    tiles_max = tiles > tiles_max ? tiles : tiles_max;
  }
  if ((pass & FM_PASS_BWD) && (st = ensure_backward_buffers(s, err)) != FM_OK) return st;
  if (o->instrument && (st = ensure_tile_buffers(s, tiles_max, err)) != FM_OK) return st;

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
  CUDA_TRY(cudaStreamSynchronize(s->stream), "mask upload");

  fm_attn_launch lc;
  memset(&lc, 0, sizeof lc);
  fm_attn_problem *p = &lc.p;
  fm_attn_problem_init(p, m, c->batch, c->heads, c->head_dim, 1.0f / sqrtf((float)c->head_dim));
  p->q = s->q;
  p->k = s->k;
  p->v = s->v;
  p->o = s->o;
  p->lse = s->lse;
  p->dout = s->dout;
  p->dq = s->dq;
  p->dk = s->dk;
  p->dv = s->dv;
  p->deterministic = c->deterministic;
  p->mask_method = c->mask_method;
  p->intervals = s->iv;
  p->dense_mask = c->variant == FM_VARIANT_DENSE ? s->dense : NULL;
  p->dense_per_set = nsets > 1;
  p->kernel = kernel;
  lc.variant = c->variant;
  fm_timeline *tl = o->want_timeline ? &r->timeline : NULL; /* the first pass measured */
  if (pass & FM_PASS_FWD) {
    lc.pass = FM_PASS_FWD;
    if ((st = measure_pass(s, &lc, o, &r->fwd, tl, err)) != FM_OK) return st;
    tl = NULL;
  }
  if (pass & FM_PASS_BWD) {
    /* O and LSE of this problem: one forward (the plain skip build) */
    fm_attn_launch fwd = lc;
    fwd.pass = FM_PASS_FWD;
    fwd.variant = FM_VARIANT_SKIP;
    if ((st = fm_attn_launch_run(&fwd, s->stream, err)) != FM_OK) return st;
    lc.pass = FM_PASS_BWD;
    if ((st = measure_pass(s, &lc, o, &r->bwd, tl, err)) != FM_OK) return st;
  }
  CUDA_TRY(cudaStreamSynchronize(s->stream), "measurement");
  return FM_OK;
}
