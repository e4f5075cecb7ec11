/* fm_linrnn.cu — host side of the chunkwise linear-attention forward
 * (fm_linrnn.h): argument checks, the stream-ordered workspace, the
 * preprocessing launch and the choice of the forward's instantiation. The
 * kernels: fm_linrnn.cuh; their instantiations: fm_linrnn_hd64.cu and
 * fm_linrnn_hd128.cu (one translation unit per head dim dk). */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "fm_cuda_status.cuh"
#include "fm_linrnn.cuh"
#include "fm_linrnn.h"
#include "fm_linrnn_launch.cuh"

extern "C" const char *fm_linrnn_variant_name(fm_linrnn_variant v) {
  static const char *const names[FM_LINRNN_NVARIANTS] = {"skip", "causal", "noskip"};
  return (unsigned)v < FM_LINRNN_NVARIANTS ? names[v] : NULL;
}

extern "C" size_t fm_linrnn_problem_size(void) { return sizeof(fm_linrnn_problem); }

static_assert((int)FM_LINRNN_SKIP == fmlr::VAR_SKIP && (int)FM_LINRNN_CAUSAL == fmlr::VAR_CAUSAL &&
                  (int)FM_LINRNN_NOSKIP == fmlr::VAR_NOSKIP,
              "fm_linrnn_variant values are the kernel's");

/* The shape this build instantiates (fm_linrnn.h): dk 64/128, dv 64/128/256,
 * C 64/128, c 16/32/64 with c <= C. */
static bool shape_built(const fm_linrnn_problem *p) {
  return (p->dk == 64 || p->dk == 128) && (p->dv == 64 || p->dv == 128 || p->dv == 256) &&
         (p->chunk == 64 || p->chunk == 128) && (p->sub == 16 || p->sub == 32 || p->sub == 64) &&
         p->sub <= p->chunk;
}

/* Chunks of C tokens covering the T tokens (the last one may be short). */
static int64_t nchunks_of(const fm_linrnn_problem *p) { return ((int64_t)p->tokens + p->chunk - 1) / p->chunk; }

/* Warps per CTA: 8 (value blocks of 128 columns) at C = 128 when dv allows, else 4. */
static int warps_of(const fm_linrnn_problem *p) { return p->chunk == 128 && p->dv % 128 == 0 ? 8 : 4; }

/* Checkpoint spacing in chunks (0: none), a function of the shape alone (so
 * every variant and device takes the same): when the documents are long
 * (8 chunks or more on average) and too few to fill the GPU one CTA per
 * document, head and value block (under 512 such walks), the state is
 * checkpointed every kseg chunks so that about 1024 units share the walk. */
static int auto_kseg(const fm_linrnn_problem *p) {
  const int64_t nch = nchunks_of(p), ndvb = p->dv / (16 * warps_of(p));
  if (nch < 8 * (int64_t)p->ndocs || (int64_t)p->ndocs * p->heads * ndvb >= 512) return 0;
  const int64_t k = (nch * p->heads * ndvb + 1023) / 1024;
  return (int)(k < 4 ? 4 : k);
}

/* Bytes of the two-pass path's states (S_in of every chunk, fp16: fm_linrnn.cuh, "S_in in fp16"). */
static int64_t sin_bytes(const fm_linrnn_problem *p) { return 2 * nchunks_of(p) * p->heads * p->dk * p->dv; }

/* The most workspace the two-pass path's states may take; beyond it the fused
 * kernel runs (a function of the shape, like every choice here). */
static const int64_t kSinBudget = (int64_t)4 << 30;

/* Whether the shape takes the two-pass path (fm_linrnn_wg.cuh): C 128, c 64,
 * dk 128, its states within kSinBudget. Until the seventeenth session it also
 * asked for documents of at most C tokens on average; with the transposed
 * output kernel the path is the faster one at every length measured
 * (kernels/PERF_NOTES.md, Linear RNN, seventeenth session: 1.85 against the
 * fused kernel's 2.00 ns a token and head at L 2048). */
static bool two_pass(const fm_linrnn_problem *p) {
  /* FM_LINRNN_TWO_PASS=0 never takes it (the A/B against the fused kernel;
     unset or 1: the rule) */
  static const int off = [] {
    const char *e = getenv("FM_LINRNN_TWO_PASS");
    return e && e[0] == '0' && !e[1];
  }();
  return !off && p->chunk == 128 && p->sub == 64 && p->dk == 128 && sin_bytes(p) <= kSinBudget;
}

bool fm_linrnn_two_pass(const fm_linrnn_problem *p) { return p && shape_built(p) && two_pass(p); }

/* Lays the workspace out from base (NULL: only sizes it) into k; returns its
 * bytes. kseg > 0 adds the checkpoint states and decays; the two-pass path its
 * states (sin). */
static size_t carve(const fm_linrnn_problem *p, int kseg, char *base, fmlr::params *k) {
  const int64_t H = p->heads, C = p->chunk, nch = nchunks_of(p), tpad = nch * C;
  const int64_t slots = kseg > 0 ? (nch - 1) / kseg + 1 : 0;
  const bool cover = two_pass(p) && kseg > 0;
  const int64_t bytes[17] = {4 * tpad, 4 * tpad, 4 * nch, 4 * H * tpad, 4 * H * nch * (C / 16),
                            (int64_t)fmlr::CLS_STRIDE * nch, 4 * slots * H * p->dk * p->dv, 4 * slots * H,
                            4 * tpad, 16 * nch, 16 * nch, 32, 16 * nch, two_pass(p) ? sin_bytes(p) : 0,
                            16 * nch, cover ? 4 * nch * H : 0, two_pass(p) ? 4 * nch * H * (p->dv / 16) : 0};
  char *at[17];
  size_t off = 0;
  for (int i = 0; i < 17; i++) {
    at[i] = base ? base + off : NULL;
    off += ((size_t)bytes[i] + 255) & ~(size_t)255;
  }
  if (k) {
    k->docidx = (int32_t *)at[0];
    k->docstart = (int32_t *)at[1];
    k->flags = (int32_t *)at[2];
    k->lp2 = (float *)at[3];
    k->pre2 = (float *)at[4];
    k->tclass = (uint8_t *)at[5];
    k->ck_s = (float *)at[6];
    k->ck_a = (float *)at[7];
    k->docend = (int32_t *)at[8];
    k->items_main = (int32_t *)at[9];
    k->items_ckpt = (int32_t *)at[10];
    k->nitems = (int32_t *)at[11];
    k->items_state = (int32_t *)at[12];
    k->sin = (uint16_t *)at[13];
    k->sinv = (float *)at[16];
    k->items_all = (int32_t *)at[14];
    k->sa = cover ? (float *)at[15] : NULL;
    k->cover = cover;
  }
  return off;
}

/* Every check that needs no device; one line each. */
static fm_status check_problem(const fm_linrnn_problem *p, fm_linrnn_variant variant, int instrumented,
                               fm_err *err) {
  if (!p) return fm_fail(err, FM_EINVAL, "fm_linrnn_forward: problem is NULL");
  if (p->tokens < 1 || p->heads < 1 || p->tokens > (1 << 30) || p->heads > 65534)
    return fm_fail(err, FM_EINVAL, "fm_linrnn: tokens must be in [1, 2^30] and heads in [1, 65534] (got %d, %d)",
                   p->tokens, p->heads);
  if (p->ndocs < 1 || p->ndocs > p->tokens)
    return fm_fail(err, FM_EINVAL, "fm_linrnn: ndocs must be in [1, tokens = %d] (got %d)", p->tokens, p->ndocs);
  if (!shape_built(p))
    return fm_fail(err, FM_EUNSUPPORTED,
                   "fm_linrnn: dk %d, dv %d, chunk %d, sub %d is not built; supported: dk 64 or 128, dv 64, "
                   "128 or 256, chunk 64 or 128, sub 16, 32 or 64 with sub <= chunk",
                   p->dk, p->dv, p->chunk, p->sub);
  if (!(p->scale > 0.f) || isinf(p->scale))
    return fm_fail(err, FM_EINVAL, "fm_linrnn: scale must be finite and > 0 (got %g)", (double)p->scale);
  if (!p->cu_seqlens || !p->q || !p->k || !p->v || !p->g || !p->o)
    return fm_fail(err, FM_EINVAL, "fm_linrnn: cu_seqlens, q, k, v, g and o must be device pointers (one is NULL)");
  if (((uintptr_t)p->q | (uintptr_t)p->k | (uintptr_t)p->v) & 15 || ((uintptr_t)p->o | (uintptr_t)p->g) & 3 ||
      (uintptr_t)p->final_state & 3)
    return fm_fail(err, FM_EINVAL, "fm_linrnn: q, k and v must be 16-byte aligned, o, g and final_state 4-byte aligned");
  if ((unsigned)variant >= FM_LINRNN_NVARIANTS)
    return fm_fail(err, FM_EINVAL, "fm_linrnn: variant %d is not skip (0), causal (1) or noskip (2)", (int)variant);
  if (instrumented && (!p->tile_class || !p->tile_cycles))
    return fm_fail(err, FM_EINVAL, "fm_linrnn: the instrumented build needs tile_class and tile_cycles");
  const int64_t nch = nchunks_of(p);
  /* the kernel counts units (at most one a chunk, head and value block) in int,
   * up to the count plus the grid: a bound well inside 2^31 - 1 */
  const int64_t units = nch * p->heads * (p->dv / (16 * warps_of(p)));
  if (units > 0x7fffffffLL - 0x100000LL)
    return fm_fail(err, FM_EUNSUPPORTED, "fm_linrnn: %lld work units exceed the kernel's int unit index",
                   (long long)units);
  return FM_OK;
}

extern "C" size_t fm_linrnn_workspace_bytes(const fm_linrnn_problem *p) {
  if (!p || p->tokens < 1 || p->heads < 1 || p->ndocs < 1 || !shape_built(p)) return 0;
  return carve(p, auto_kseg(p), NULL, NULL);
}

/* The current device must be sm_90 (the kernels are built for sm_90a only);
 * *sms receives its multiprocessor count. */
static fm_status check_device(int *sms, fm_err *err) {
  int n = 0, dev = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  char why[200];
  if (e != cudaSuccess || n == 0)
    return fm_fail(err, FM_EUNSUPPORTED, "fm_linrnn: no usable CUDA device: %s",
                   fm_cuda_no_device_reason(e, why, sizeof why));
  CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "compute capability");
  CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "compute capability");
  if (major != 9 || minor != 0)
    return fm_fail(err, FM_EUNSUPPORTED, "fm_linrnn: device %d is sm_%d%d; the kernel is built for sm_90a only", dev,
                   major, minor);
  CUDA_TRY(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev), "multiprocessor count");
  if (*sms < 1) return fm_fail(err, FM_EUNSUPPORTED, "fm_linrnn: the device reports no multiprocessor");
  return FM_OK;
}

/* The kernels' parameters from the problem (the workspace pointers are carved). */
static void fill_params(const fm_linrnn_problem *p, fm_linrnn_variant variant, int instrumented, fmlr::params *k) {
  memset(k, 0, sizeof *k);
  k->T = p->tokens;
  k->H = p->heads;
  k->dk = p->dk;
  k->dv = p->dv;
  k->C = p->chunk;
  k->c = p->sub;
  k->ndocs = p->ndocs;
  k->nchunks = (int32_t)nchunks_of(p);
  k->variant = (int32_t)variant;
  k->ndvb = p->dv / (16 * warps_of(p));
  k->scale = p->scale;
  k->cu = p->cu_seqlens;
  k->q = (const uint16_t *)p->q;
  k->k = (const uint16_t *)p->k;
  k->v = (const uint16_t *)p->v;
  k->g = p->g;
  k->o = (uint16_t *)p->o;
  k->final_state = p->final_state;
  k->tile_class = instrumented ? p->tile_class : NULL;
  k->tile_cycles = instrumented ? p->tile_cycles : NULL;
}

/* The forward with checkpoints every kseg chunks (0: none, -1: auto_kseg) and
 * at most max_ctas CTAs (0: as many as fit): preprocessing, the checkpoint pass
 * and its scan when kseg > 0, the forward: the fused kernel, or on the two-pass
 * path its state pass (MODE_STATES) and the output kernel. */
fm_status fm_linrnn_forward_tuned(const fm_linrnn_problem *p, fm_linrnn_variant variant, int instrumented, int kseg,
                                  int max_ctas, void *stream, fm_err *err) {
  int sms = 0;
  fm_status st = check_problem(p, variant, instrumented, err);
  if (st == FM_OK) st = check_device(&sms, err);
  if (st != FM_OK) return st;
  if (kseg < 0) kseg = auto_kseg(p);
  cudaStream_t s = (cudaStream_t)stream;
  fmlr::params k;
  fill_params(p, variant, instrumented, &k);
  k.kseg = kseg;
  const size_t need = carve(p, kseg, NULL, NULL);
  char *ws = (char *)p->workspace;
  cudaError_t e = cudaSuccess;
  if (ws && (p->workspace_bytes < need || ((uintptr_t)ws & 255)))
    return fm_fail(err, FM_EINVAL,
                   "fm_linrnn: the workspace must be 256-byte aligned and at least %zu bytes "
                   "(fm_linrnn_workspace_bytes; got %zu bytes at %p)",
                   need, p->workspace_bytes, p->workspace);
  if (!ws && (e = cudaMallocAsync((void **)&ws, need, s)) != cudaSuccess)
    return cuda_fail(err, e, "cudaMallocAsync (linrnn workspace)");
  carve(p, kseg, ws, &k);
  const char *what = "linrnn preprocessing launch";
  e = fmlr::launch_prep(k, s);
  if (e == cudaSuccess && kseg > 0) {
    k.mode = fmlr::MODE_CKPT;
    what = "linrnn checkpoint launch";
    /* on the two-pass path the state walk's own instantiation (its layout: two
       CTAs a multiprocessor) walks the segments too */
    e = two_pass(p)      ? fmlr::launch_states_dk128(k, warps_of(p), sms, max_ctas, s)
        : p->dk == 64    ? fmlr::launch_fwd_dk64(k, warps_of(p), false, sms, max_ctas, s)
                         : fmlr::launch_fwd_dk128(k, warps_of(p), false, sms, max_ctas, s);
    if (e == cudaSuccess) e = fmlr::launch_scan(k, s);
    k.mode = fmlr::MODE_MAIN;
  }
  if (e == cudaSuccess && two_pass(p)) {
    k.mode = fmlr::MODE_STATES;
    what = "linrnn state pass launch";
    e = fmlr::launch_states_dk128(k, warps_of(p), sms, max_ctas, s);
    if (e == cudaSuccess) {
      what = "linrnn output pass launch";
      e = fmlr::launch_out_wg(k, instrumented != 0, max_ctas > 0 ? max_ctas : sms, s);
    }
  } else if (e == cudaSuccess) {
    what = "linrnn forward launch";
    e = p->dk == 64 ? fmlr::launch_fwd_dk64(k, warps_of(p), instrumented != 0, sms, max_ctas, s)
                    : fmlr::launch_fwd_dk128(k, warps_of(p), instrumented != 0, sms, max_ctas, s);
  }
  if (e != cudaSuccess) st = cuda_fail(err, e, what);
  if (!p->workspace && (e = cudaFreeAsync(ws, s)) != cudaSuccess && st == FM_OK)
    st = cuda_fail(err, e, "cudaFreeAsync (linrnn workspace)");
  return st;
}

extern "C" fm_status fm_linrnn_forward(const fm_linrnn_problem *p, fm_linrnn_variant variant, int instrumented,
                                       void *stream, fm_err *err) {
  return fm_linrnn_forward_tuned(p, variant, instrumented, -1, 0, stream, err);
}
