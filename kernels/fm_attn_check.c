/* fm_attn_check.c — see fm_attn_check.h. Host C11 + the CUDA runtime API. */
#include "fm_attn_check.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_attn.h"
#include "fm_attn_dev.h"
#include "fm_bf16.h"
#include "fm_cuda_status.cuh"
#include "fm_reference.h"
#include "fm_rng.h"
#include "fm_tiles.h"


static void fail_once(fm_check_result *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void fail_once(fm_check_result *r, const char *fmt, ...) {
  if (!r->ok) return; /* keep the first failure */
  r->ok = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->detail, sizeof r->detail, fmt, ap);
  va_end(ap);
}

/* Standard normal, rounded to bf16 (Box-Muller on the seeded generator). */
static void fill_normal_bf16(uint16_t *x, int64_t n, fm_rng *rng) {
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = ((double)(fm_rng_next(rng) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(fm_rng_next(rng) >> 11) * 0x1.0p-53;
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    x[i] = fm_f32_to_bf16((float)(rad * cos(th)));
    if (i + 1 < n) x[i + 1] = fm_f32_to_bf16((float)(rad * sin(th)));
  }
}

typedef struct dev_bufs {
  void *q, *k, *v, *o;
  float *lse;
  int32_t *iv;
  uint8_t *cls, *dense;
  int64_t *cyc;
} dev_bufs;

static void dev_free(dev_bufs *d) {
  cudaFree(d->q);
  cudaFree(d->k);
  cudaFree(d->v);
  cudaFree(d->o);
  cudaFree(d->lse);
  cudaFree(d->iv);
  cudaFree(d->cls);
  cudaFree(d->dense);
  cudaFree(d->cyc);
  memset(d, 0, sizeof *d);
}

/* Like CUDA_TRY, but leaves through `done` (the caller frees its buffers there). */
#define CK(call, what)                                  \
  do {                                                  \
    cudaError_t e_ = (call);                            \
    if (e_ != cudaSuccess) {                            \
      st = cuda_fail(err, e_, (what));                  \
      goto done;                                        \
    }                                                   \
  } while (0)

/* The sm90 partial-tile mask method the library does not use by default: the
 * one phases 3b and 7b compare with the default bit for bit. */
static fm_mask_method other_mask_method(void) {
  return FM_SM90_MASK_DEFAULT == FM_SM90_MASK_R2P ? FM_MASK_METHOD_SLICES : FM_MASK_METHOD_R2P;
}

/* Runs one variant with poisoned outputs and copies the results back; mask:
 * the sm90 forward's partial-tile mask method (fm_attn_problem.mask_method,
 * for this call only), FM_MASK_METHOD_AUTO for the library's. */
static fm_status run_variant(fm_attn_problem *pr, fm_variant var, int instr, fm_mask_method mask, int64_t nq,
                             int64_t nlse, int64_t ntiles, uint16_t *o, float *lse, uint8_t *cls,
                             int64_t *cyc, fm_err *err) {
  fm_status st = FM_OK;
  CK(cudaMemset(pr->o, 0xff, (size_t)nq * 2), "poison O");     /* bf16 0xffff = NaN */
  CK(cudaMemset(pr->lse, 0xff, (size_t)nlse * 4), "poison LSE"); /* NaN */
  if (instr) {
    CK(cudaMemset(pr->tile_class, 0xff, (size_t)ntiles), "poison classes");
    CK(cudaMemset(pr->tile_cycles, 0xff, (size_t)ntiles * 8), "poison cycles");
  }
  pr->mask_method = mask;
  st = fm_attn_forward(pr, var, instr, NULL, err);
  pr->mask_method = FM_MASK_METHOD_AUTO;
  if (st != FM_OK) goto done;
  CK(cudaDeviceSynchronize(), "forward kernel");
  CK(cudaMemcpy(o, pr->o, (size_t)nq * 2, cudaMemcpyDeviceToHost), "copy O");
  CK(cudaMemcpy(lse, pr->lse, (size_t)nlse * 4, cudaMemcpyDeviceToHost), "copy LSE");
  if (instr) {
    CK(cudaMemcpy(cls, pr->tile_class, (size_t)ntiles, cudaMemcpyDeviceToHost), "copy classes");
    CK(cudaMemcpy(cyc, pr->tile_cycles, (size_t)ntiles * 8, cudaMemcpyDeviceToHost),
       "copy cycles");
  }
done:
  return st;
}

/* First index where two buffers differ bytewise in elements of `size` bytes, -1 if none. */
static int64_t first_diff(const void *a, const void *b, int64_t n, int size) {
  if (!memcmp(a, b, (size_t)(n * size))) return -1;
  const unsigned char *x = a, *y = b;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(x + i * size, y + i * size, (size_t)size)) return i;
  return -1;
}

static void o_where(char *buf, int cap, int64_t idx, int32_t sq, int32_t H, int32_t D) {
  int64_t d = idx % D, h = (idx / D) % H, i = (idx / ((int64_t)D * H)) % sq,
          b = idx / ((int64_t)D * H * sq);
  snprintf(buf, (size_t)cap, "b=%lld row=%lld h=%lld d=%lld", (long long)b, (long long)i,
           (long long)h, (long long)d);
}

static void lse_where(char *buf, int cap, int64_t idx, int32_t sq, int32_t H) {
  int64_t i = idx % sq, h = (idx / sq) % H, b = idx / ((int64_t)sq * H);
  snprintf(buf, (size_t)cap, "b=%lld h=%lld row=%lld", (long long)b, (long long)h, (long long)i);
}

/* Checks that variant `what` gave the same O and LSE as variant `ref`, bit for
 * bit; on the first difference records a failure naming both. Returns 1 when
 * identical. */
static int same_output(fm_check_result *r, const char *what, const char *ref, const uint16_t *o,
                       const uint16_t *o_ref, const float *l, const float *l_ref, int64_t nq,
                       int64_t nlse, int32_t sq, int32_t H, int32_t D) {
  char where[128];
  int64_t io = first_diff(o_ref, o, nq, 2), il = first_diff(l_ref, l, nlse, 4);
  if (io >= 0) {
    o_where(where, sizeof where, io, sq, H, D);
    fail_once(r, "%s O differs from %s at %s: 0x%04x vs 0x%04x", what, ref, where, o[io],
              o_ref[io]);
  } else if (il >= 0) {
    lse_where(where, sizeof where, il, sq, H);
    fail_once(r, "%s LSE differs from %s at %s: %.9g vs %.9g", what, ref, where, (double)l[il],
              (double)l_ref[il]);
  }
  return io < 0 && il < 0;
}

/* Runs the backward of pr (forward outputs in pr->o, pr->lse on the device)
 * with poisoned gradients; copies dQ, dK, dV (bf16) back; classes and cycles
 * when instrumented. mask: the sm90 partial-tile mask method
 * (fm_attn_problem.mask_method, for this call only), FM_MASK_METHOD_AUTO for the library's. */
static fm_status run_backward(fm_attn_problem *pr, fm_variant var, int det, int instr, fm_mask_method mask, int64_t nq,
                              int64_t nk, int64_t ntiles, uint16_t *g[3], uint8_t *cls, int64_t *cyc,
                              fm_err *err) {
  fm_status st = FM_OK;
  CK(cudaMemset(pr->dq, 0xff, (size_t)nq * 2), "poison dQ");
  CK(cudaMemset(pr->dk, 0xff, (size_t)nk * 2), "poison dK");
  CK(cudaMemset(pr->dv, 0xff, (size_t)nk * 2), "poison dV");
  if (instr) {
    CK(cudaMemset(pr->tile_class, 0xff, (size_t)ntiles), "poison classes");
    CK(cudaMemset(pr->tile_cycles, 0xff, (size_t)ntiles * 8), "poison cycles");
  }
  pr->deterministic = det;
  pr->mask_method = mask;
  st = fm_attn_backward(pr, var, instr, NULL, err);
  pr->mask_method = FM_MASK_METHOD_AUTO;
  if (st != FM_OK) goto done;
  CK(cudaDeviceSynchronize(), "backward kernel");
  CK(cudaMemcpy(g[0], pr->dq, (size_t)nq * 2, cudaMemcpyDeviceToHost), "copy dQ");
  CK(cudaMemcpy(g[1], pr->dk, (size_t)nk * 2, cudaMemcpyDeviceToHost), "copy dK");
  CK(cudaMemcpy(g[2], pr->dv, (size_t)nk * 2, cudaMemcpyDeviceToHost), "copy dV");
  if (instr) {
    CK(cudaMemcpy(cls, pr->tile_class, (size_t)ntiles, cudaMemcpyDeviceToHost), "copy classes");
    CK(cudaMemcpy(cyc, pr->tile_cycles, (size_t)ntiles * 8, cudaMemcpyDeviceToHost), "copy cycles");
  }
done:
  return st;
}

static const char *const grad_names[3] = {"dQ", "dK", "dV"};

/* 1 when the three gradient buffers equal bit for bit; else a failure naming the first. */
static int same_grads(fm_check_result *r, const char *what, const char *ref, uint16_t *const *a,
                      uint16_t *const *b, const int64_t *n, int count) {
  for (int t = 0; t < count; t++) {
    int64_t i = first_diff(a[t], b[t], n[t], 2);
    if (i >= 0) {
      fail_once(r, "%s %s differs from %s at element %lld: 0x%04x vs 0x%04x", what, grad_names[t + 3 - count], ref,
                (long long)i, a[t][i], b[t][i]);
      return 0;
    }
  }
  return 1;
}

/* Phase 7's class and cycle check of one instrumented backward launch (what:
 * its name in the failure): classes (B, H, tr, tc) == core's (nsets, tr,
 * tc), skipped pairs 0 cycles, visited > 0. */
static void bwd_classes(const fm_colmask *m, int32_t B, int32_t H, int32_t tr, int32_t tc, const uint8_t *cpu_cls,
                        const uint8_t *cls, const int64_t *cyc, const char *what, fm_check_result *r) {
  const int64_t npairs = (int64_t)tr * tc;
  r->bwd_classes_identical = 1;
  r->bwd_cycles_ok = 1;
  for (int32_t b = 0; b < B; b++)
    for (int32_t h = 0; h < H; h++) {
      const int32_t set = fm_colmask_set_index(m, b, h);
      for (int64_t t = 0; t < npairs; t++) {
        const uint8_t want = cpu_cls[(int64_t)set * npairs + t];
        const int64_t gi = ((int64_t)b * H + h) * npairs + t;
        if (cls[gi] != want) {
          r->bwd_classes_identical = 0;
          fail_once(r, "%s: class at b=%d h=%d query tile %lld key tile %lld is %d, core says %d", what, b, h,
                    (long long)(t / tc), (long long)(t % tc), cls[gi], want);
          return;
        }
        const int skipped = want == FM_TILE_MASKED;
        if (skipped ? cyc[gi] != 0 : cyc[gi] <= 0) {
          r->bwd_cycles_ok = 0;
          fail_once(r, "%s: pair b=%d h=%d (%lld, %lld) has %lld cycles (%s)", what, b, h, (long long)(t / tc),
                    (long long)(t % tc), (long long)cyc[gi], skipped ? "skipped: want 0" : "visited: want > 0");
          return;
        }
      }
    }
}

/* The backward's buffers that phase 7b reads and reuses: sizes, core's and the
 * GPU's classes, the library's gradients (ref: default mode, deterministic)
 * and two scratch sets. */
typedef struct bwd_bufs {
  int64_t nq, nk, ntiles;
  const uint8_t *cpu_cls;
  uint8_t *cls;
  int64_t *cyc;
  uint16_t **ref[2];
  uint16_t **scratch[2];
} bwd_bufs;

/* Phase 7b (sm90): skip's backward with the partial-tile mask method the
 * library does not use (fm_sm90_bwd.cuh, MASK): deterministic, plain and
 * instrumented, == the library's deterministic skip bit for bit (dQ, dK, dV),
 * its classes == core's; in the default mode dK and dV bit for bit (dQ's
 * additions land in whatever order the CTAs reach them). */
static fm_status check_bwd_mask_methods(fm_attn_problem *pr, const fm_colmask *m, int32_t B, int32_t H, int32_t tr,
                                        int32_t tc, const bwd_bufs *bb, fm_check_result *r, fm_err *err) {
  const fm_mask_method other = other_mask_method();
  const char *name = other == FM_MASK_METHOD_R2P ? "backward with mask method r2p" : "backward with mask method slices";
  const int64_t n[3] = {bb->nq, bb->nk, bb->nk};
  char what[96];
  r->bwd_mask_methods_identical = 1;
  for (int det = 0; det < 2; det++)
    for (int instr = 0; instr < 1 + det; instr++) {
      uint16_t **g = bb->scratch[instr];
      fm_status st = run_backward(pr, FM_VARIANT_SKIP, det, instr, other, bb->nq, bb->nk, bb->ntiles, g, bb->cls,
                                  bb->cyc, err);
      if (st != FM_OK) return st;
      snprintf(what, sizeof what, "%s%s%s", instr ? "instrumented " : "", det ? "deterministic " : "", name);
      uint16_t *a[3] = {g[0], g[1], g[2]}, *ref[3] = {bb->ref[det][0], bb->ref[det][1], bb->ref[det][2]};
      /* default mode: dK and dV only (a and ref from index 1) */
      const int from = det ? 0 : 1;
      if (!same_grads(r, what, det ? "deterministic skip" : "skip", a + from, ref + from, n + from, 3 - from))
        r->bwd_mask_methods_identical = 0;
      if (instr) bwd_classes(m, B, H, tr, tc, bb->cpu_cls, bb->cls, bb->cyc, what, r);
    }
  return FM_OK;
}

/* Checks 5-7 of fm_attn_check.h. pr has the device inputs and the forward
 * outputs; q, k, v are the host inputs. */
static fm_status check_backward(const fm_check_case *c, fm_attn_problem *pr, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v, fm_check_result *r, fm_err *err) {
  const fm_colmask *m = c->mask;
  const int32_t B = c->batch, H = c->heads, D = c->head_dim;
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), nsets = fm_colmask_nsets(m);
  int32_t br, bc;
  fm_status st = fm_kernel_tile_size(c->kernel, FM_PASS_BWD, D, &br, &bc, err);
  if (st != FM_OK) return st;
  const int32_t tr = (sq + br - 1) / br, tc = (sk + bc - 1) / bc;
  const int64_t nq = (int64_t)B * sq * H * D, nk = (int64_t)B * sk * H * D;
  const int64_t n[3] = {nq, nk, nk}, ntiles = (int64_t)B * H * tr * tc;
  void *d_do = NULL, *d_g[3] = {NULL, NULL, NULL};
  uint8_t *d_cls = NULL, *cls = malloc((size_t)ntiles), *cpu_cls = malloc((size_t)nsets * tr * tc);
  int64_t *d_cyc = NULL, *cyc = malloc((size_t)ntiles * 8);
  uint16_t *dout = malloc((size_t)nq * 2), *g[4][3];
  double *ref[2][3];
  memset(g, 0, sizeof g);
  memset(ref, 0, sizeof ref);
  int alloc_ok = cls && cpu_cls && cyc && dout;
  for (int t = 0; t < 3; t++) {
    for (int w = 0; w < 4; w++) alloc_ok = alloc_ok && (g[w][t] = malloc((size_t)n[t] * 2));
    for (int w = 0; w < 2; w++) alloc_ok = alloc_ok && (ref[w][t] = malloc((size_t)n[t] * 8));
  }
  r->bwd_ran = 1;
  r->bwd_mask_methods_identical = -1;
  if (!alloc_ok) {
    st = fm_fail(err, FM_ENOMEM, "case %s: cannot allocate the backward's host buffers", c->name);
    goto done;
  }
  fm_rng rng;
  fm_rng_seed(&rng, c->seed, 0xd0d0);
  fill_normal_bf16(dout, nq, &rng);
  fm_ref_problem rp = {B, H, D, pr->softmax_scale, m, q, k, v};
  st = fm_reference_backward(&rp, dout, FM_REF_FP64, ref[0][0], ref[0][1], ref[0][2], err);
  if (st == FM_OK) st = fm_reference_backward(&rp, dout, FM_REF_BF16_FP32, ref[1][0], ref[1][1], ref[1][2], err);
  fm_tile_counts counts;
  if (st == FM_OK) st = fm_classify(m, br, bc, &counts, cpu_cls, NULL, err);
  if (st != FM_OK) goto done;
  r->bwd_tiles = counts.total / nsets;
  r->bwd_tiles_masked = counts.minmax[FM_TILE_MASKED] / nsets;
  CK(cudaMalloc(&d_do, (size_t)nq * 2), "cudaMalloc dO");
  for (int t = 0; t < 3; t++) CK(cudaMalloc(&d_g[t], (size_t)n[t] * 2), "cudaMalloc gradients");
  CK(cudaMalloc((void **)&d_cls, (size_t)ntiles), "cudaMalloc classes");
  CK(cudaMalloc((void **)&d_cyc, (size_t)ntiles * 8), "cudaMalloc cycles");
  CK(cudaMemcpy(d_do, dout, (size_t)nq * 2, cudaMemcpyHostToDevice), "copy dO");
  pr->dout = d_do;
  pr->dq = d_g[0];
  pr->dk = d_g[1];
  pr->dv = d_g[2];
  pr->tile_class = d_cls;
  pr->tile_cycles = d_cyc;
  /* the forward outputs the backward reads: skip's */
  st = fm_attn_forward(pr, FM_VARIANT_SKIP, 0, NULL, err);
  if (st != FM_OK) goto done;
  /* 5. skip (default mode) and 6. deterministic skip against the references */
  for (int det = 0; det < 2; det++) {
    st = run_backward(pr, FM_VARIANT_SKIP, det, 0, FM_MASK_METHOD_AUTO, nq, nk, ntiles, g[det], NULL, NULL, err);
    if (st != FM_OK) goto done;
    for (int t = 0; t < 3; t++) {
      const fm_ref_tol tol = fm_ref_tolerance((fm_ref_quantity)(FM_REF_Q_DQ + t));
      fm_compare_result cg, cc;
      fm_compare_bf16(g[det][t], ref[0][t], n[t], tol.atol, tol.rtol, &cg);
      fm_compare_f64(ref[1][t], ref[0][t], n[t], tol.atol, tol.rtol, &cc);
      if (!det) {
        r->bwd_err_gpu[t] = cg.max_abs_err;
        r->bwd_err_cpu[t] = cc.max_abs_err;
      }
      if (cg.bad)
        fail_once(r, "backward%s %s outside tolerance (or unwritten) at element %lld: gpu %.6g, fp64 %.6g "
                  "(%lld bad of %lld)", det ? " (deterministic)" : "", grad_names[t], (long long)cg.first_bad,
                  (double)fm_bf16_to_f32(g[det][t][cg.first_bad]), ref[0][t][cg.first_bad],
                  (long long)cg.bad, (long long)n[t]);
      if (cc.bad)
        fail_once(r, "CPU same-precision %s outside tolerance at element %lld: the tolerance is too tight",
                  grad_names[t], (long long)cc.first_bad);
      if (!fm_ref_within_twice(&cg, &cc))
        fail_once(r, "backward %s: GPU max error %.3g exceeds 2x the CPU same-precision error %.3g",
                  grad_names[t], cg.max_abs_err, cc.max_abs_err);
    }
  }
  /* 6. deterministic noskip == deterministic skip, bit for bit */
  st = run_backward(pr, FM_VARIANT_NOSKIP, 1, 0, FM_MASK_METHOD_AUTO, nq, nk, ntiles, g[2], NULL, NULL, err);
  if (st != FM_OK) goto done;
  r->bwd_det_identical = same_grads(r, "deterministic noskip", "deterministic skip", g[2], g[1], n, 3);
  /* 7. instrumented (deterministic) == plain, classes == core, cycles */
  st = run_backward(pr, FM_VARIANT_SKIP, 1, 1, FM_MASK_METHOD_AUTO, nq, nk, ntiles, g[3], cls, cyc, err);
  if (st != FM_OK) goto done;
  r->bwd_instr_identical = same_grads(r, "instrumented backward", "plain deterministic", g[3], g[1], n, 3);
  bwd_classes(m, B, H, tr, tc, cpu_cls, cls, cyc, "instrumented backward", r);
  /* 7b. sm90: the other partial-tile mask method == the library's, bit for bit */
  if (c->kernel == FM_KERNEL_SM90) {
    const bwd_bufs bb = {nq, nk, ntiles, cpu_cls, cls, cyc, {g[0], g[1]}, {g[2], g[3]}};
    st = check_bwd_mask_methods(pr, m, B, H, tr, tc, &bb, r, err);
  }
done:
  cudaFree(d_do);
  for (int t = 0; t < 3; t++) cudaFree(d_g[t]);
  cudaFree(d_cls);
  cudaFree(d_cyc);
  for (int t = 0; t < 3; t++) {
    for (int w = 0; w < 4; w++) free(g[w][t]);
    for (int w = 0; w < 2; w++) free(ref[w][t]);
  }
  free(cls), free(cpu_cls), free(cyc), free(dout);
  pr->dout = pr->dq = pr->dk = pr->dv = NULL;
  return st;
}

/* The forward check's shape and host buffers. */
typedef struct fwd_case {
  const fm_check_case *c;
  const fm_colmask *m;
  int32_t B, H, D, sq, sk, nsets, tr, tc;
  int64_t nq, nk, nlse, ntiles;
  uint16_t *q, *k, *v;    /* inputs */
  double *o64, *l64;      /* fp64 reference */
  double *osp, *lsp;      /* CPU at the kernel's precision */
  uint16_t *o_skip, *o_other;
  float *l_skip, *l_other;
  uint8_t *cls, *cpu_cls; /* GPU classes (B, H, Tr, Tc); core's (nsets, Tr, Tc) */
  int64_t *cyc;
} fwd_case;

/* Phase "upload": the device buffers of the inputs, the outputs and the
 * instrumentation, inputs and intervals copied. */
static fm_status upload(const fwd_case *f, dev_bufs *dv, fm_err *err) {
  fm_status st = FM_OK;
  CK(cudaMalloc(&dv->q, (size_t)f->nq * 2), "cudaMalloc q");
  CK(cudaMalloc(&dv->k, (size_t)f->nk * 2), "cudaMalloc k");
  CK(cudaMalloc(&dv->v, (size_t)f->nk * 2), "cudaMalloc v");
  CK(cudaMalloc(&dv->o, (size_t)f->nq * 2), "cudaMalloc o");
  CK(cudaMalloc((void **)&dv->lse, (size_t)f->nlse * 4), "cudaMalloc lse");
  CK(cudaMalloc((void **)&dv->iv, (size_t)f->nsets * 4 * f->sk * 4), "cudaMalloc intervals");
  CK(cudaMalloc((void **)&dv->cls, (size_t)f->ntiles), "cudaMalloc classes");
  CK(cudaMalloc((void **)&dv->cyc, (size_t)f->ntiles * 8), "cudaMalloc cycles");
  CK(cudaMemcpy(dv->q, f->q, (size_t)f->nq * 2, cudaMemcpyHostToDevice), "copy q");
  CK(cudaMemcpy(dv->k, f->k, (size_t)f->nk * 2, cudaMemcpyHostToDevice), "copy k");
  CK(cudaMemcpy(dv->v, f->v, (size_t)f->nk * 2, cudaMemcpyHostToDevice), "copy v");
  /* the mask stores its sets as (nsets, 4, Sk) int32, the kernel's layout (fm_colmask.h) */
  CK(cudaMemcpy(dv->iv, fm_colmask_cvec(f->m, 0, FM_LTS), (size_t)f->nsets * 4 * f->sk * 4,
                cudaMemcpyHostToDevice), "copy intervals");
done:
  return st;
}

/* Phase 1: skip's output (o_skip, l_skip) against the fp64 reference. */
static void check_reference(const fwd_case *f, fm_check_result *r) {
  const int32_t sq = f->sq, H = f->H, D = f->D;
  const int64_t nq = f->nq, nlse = f->nlse;
  char where[128];
  fm_compare_result co, csp, cl;
  const fm_ref_tol to = fm_ref_tolerance(FM_REF_Q_O), tl = fm_ref_tolerance(FM_REF_Q_LSE);
  fm_compare_bf16(f->o_skip, f->o64, nq, to.atol, to.rtol, &co);
  fm_compare_f64(f->osp, f->o64, nq, to.atol, to.rtol, &csp);
  fm_compare_f32(f->l_skip, f->l64, nlse, tl.atol, tl.rtol, &cl);
  r->err_gpu = co.max_abs_err;
  r->err_cpu = csp.max_abs_err;
  r->lse_err = cl.max_abs_err;
  /* rows with no visible key: exactly 0 and -inf */
  for (int64_t idx = 0; idx < nlse; idx++) {
    if (!isinf(f->l64[idx])) continue;
    int64_t i = idx % sq, h = (idx / sq) % H, b = idx / ((int64_t)sq * H);
    int exact = isinf(f->l_skip[idx]) && f->l_skip[idx] < 0;
    for (int32_t d = 0; d < D && exact; d++)
      exact = fm_bf16_to_f32(f->o_skip[((b * sq + i) * H + h) * D + d]) == 0.0f;
    if (!exact) {
      lse_where(where, sizeof where, idx, sq, H);
      fail_once(r, "row with no visible key at %s: LSE %g (want -inf) or O not exactly 0",
                where, (double)f->l_skip[idx]);
      break;
    }
  }
  if (co.bad) {
    o_where(where, sizeof where, co.first_bad, sq, H, D);
    fail_once(r, "O outside tolerance (or unwritten) at %s: gpu %.6g, fp64 %.6g (%lld bad of %lld)",
              where, (double)fm_bf16_to_f32(f->o_skip[co.first_bad]), f->o64[co.first_bad],
              (long long)co.bad, (long long)nq);
  }
  if (cl.bad) {
    lse_where(where, sizeof where, cl.first_bad, sq, H);
    fail_once(r, "LSE outside tolerance (or unwritten) at %s: gpu %.7g, fp64 %.7g (%lld bad)",
              where, (double)f->l_skip[cl.first_bad], f->l64[cl.first_bad], (long long)cl.bad);
  }
  if (csp.bad) {
    o_where(where, sizeof where, csp.first_bad, sq, H, D);
    fail_once(r, "CPU same-precision O outside tolerance at %s (%.6g vs %.6g): the tolerance "
              "is too tight for this case", where, f->osp[csp.first_bad], f->o64[csp.first_bad]);
  }
  if (!fm_ref_within_twice(&co, &csp)) {
    o_where(where, sizeof where, co.worst, sq, H, D);
    fail_once(r, "GPU max error %.3g exceeds 2x the CPU same-precision error %.3g (worst at %s)",
              co.max_abs_err, csp.max_abs_err, where);
  }
}

/* Phase 3, for one instrumented build: its classes against core's and its
 * cycles (0 for skipped tiles, > 0 for visited ones). */
static void check_classes(const fwd_case *f, int pass, const char *vname, fm_check_result *r) {
  const int32_t tr = f->tr, tc = f->tc, H = f->H;
  for (int32_t b = 0; b < f->B && r->classes_identical && r->cycles_ok; b++)
    for (int32_t h = 0; h < H && r->classes_identical && r->cycles_ok; h++) {
      int32_t set = fm_colmask_set_index(f->m, b, h);
      for (int64_t t = 0; t < (int64_t)tr * tc; t++) {
        uint8_t want = f->cpu_cls[(int64_t)set * tr * tc + t];
        int64_t gi = ((int64_t)b * H + h) * tr * tc + t;
        if (f->cls[gi] != want) {
          r->classes_identical = 0;
          fail_once(r, "instrumented %s: tile class at b=%d h=%d row tile %lld key tile %lld "
                    "is %d, core fm_classify says %d", vname, b, h, (long long)(t / tc),
                    (long long)(t % tc), f->cls[gi], want);
          break;
        }
        int skipped = pass == 0 && want == FM_TILE_MASKED;
        if (skipped ? f->cyc[gi] != 0 : f->cyc[gi] <= 0) {
          r->cycles_ok = 0;
          fail_once(r, "instrumented %s: tile b=%d h=%d (%lld, %lld) has %lld cycles (%s)",
                    vname, b, h, (long long)(t / tc), (long long)(t % tc), (long long)f->cyc[gi],
                    skipped ? "skipped: want 0" : "visited: want > 0");
          break;
        }
      }
    }
}

/* Phase 3: the instrumented builds (skip, noskip) give skip's output, core's
 * classes and plausible cycles. */
static fm_status check_instrumented(const fwd_case *f, fm_attn_problem *pr, fm_check_result *r, fm_err *err) {
  char where[128];
  r->instr_identical = 1;
  r->classes_identical = 1;
  r->cycles_ok = 1;
  for (int pass = 0; pass < 2; pass++) {
    fm_variant var = pass == 0 ? FM_VARIANT_SKIP : FM_VARIANT_NOSKIP;
    const char *vname = pass == 0 ? "skip" : "noskip";
    fm_status st = run_variant(pr, var, 1, FM_MASK_METHOD_AUTO, f->nq, f->nlse, f->ntiles, f->o_other, f->l_other,
                               f->cls, f->cyc, err);
    if (st != FM_OK) return st;
    int64_t io = first_diff(f->o_skip, f->o_other, f->nq, 2), il = first_diff(f->l_skip, f->l_other, f->nlse, 4);
    if (io >= 0 || il >= 0) {
      r->instr_identical = 0;
      if (io >= 0) o_where(where, sizeof where, io, f->sq, f->H, f->D);
      else lse_where(where, sizeof where, il, f->sq, f->H);
      fail_once(r, "instrumented %s output differs from plain skip at %s (%s)", vname, where,
                io >= 0 ? "O" : "LSE");
    }
    check_classes(f, pass, vname, r);
  }
  return FM_OK;
}

/* Phase 3b (sm90): the partial-tile mask method that the library does not
 * use, built for skip (fm_sm90_launch.cuh), and the forward-only method
 * words, each plain and instrumented: skip's output bit for bit, and core's
 * classes. */
static fm_status check_mask_methods(const fwd_case *f, fm_attn_problem *pr, fm_check_result *r, fm_err *err) {
  const fm_mask_method methods[2] = {other_mask_method(), FM_MASK_METHOD_WORDS};
  r->mask_methods_identical = 1;
  for (int k = 0; k < 2; k++)
    for (int instr = 0; instr < 2; instr++) {
      char name[48];
      snprintf(name, sizeof name, "skip with mask method %s", fm_mask_method_name(methods[k]));
      fm_status st = run_variant(pr, FM_VARIANT_SKIP, instr, methods[k], f->nq, f->nlse, f->ntiles, f->o_other,
                                 f->l_other, f->cls, f->cyc, err);
      if (st != FM_OK) return st;
      if (!same_output(r, name, "skip", f->o_other, f->o_skip, f->l_other, f->l_skip, f->nq, f->nlse, f->sq, f->H,
                       f->D))
        r->mask_methods_identical = 0;
      if (instr) check_classes(f, 0, name, r);
    }
  return FM_OK;
}

/* Phase 4: dense == noskip bit for bit (the dense mask expanded on the host,
 * uploaded to dv->dense). */
static fm_status check_dense(const fwd_case *f, fm_attn_problem *pr, dev_bufs *dv, fm_check_result *r,
                             fm_err *err) {
  fm_status st = FM_OK;
  const int32_t sq = f->sq, sk = f->sk, nsets = f->nsets;
  const int64_t nd = (int64_t)nsets * sq * sk;
  uint16_t *o_ns = NULL;
  float *l_ns = NULL;
  uint8_t *dense = malloc((size_t)nd);
  if (!dense) {
    st = fm_fail(err, FM_ENOMEM, "case %s: cannot allocate the dense mask", f->c->name);
    goto done;
  }
  for (int32_t s = 0; s < nsets; s++)
    for (int32_t i = 0; i < sq; i++)
      for (int32_t j = 0; j < sk; j++)
        dense[((int64_t)s * sq + i) * sk + j] = (uint8_t)fm_colmask_masked(f->m, s, i, j);
  CK(cudaMalloc((void **)&dv->dense, (size_t)nd), "cudaMalloc dense");
  CK(cudaMemcpy(dv->dense, dense, (size_t)nd, cudaMemcpyHostToDevice), "copy dense");
  pr->dense_mask = dv->dense;
  pr->dense_per_set = nsets > 1;
  o_ns = malloc((size_t)f->nq * 2);
  l_ns = malloc((size_t)f->nlse * 4);
  if (!o_ns || !l_ns) {
    st = fm_fail(err, FM_ENOMEM, "case %s: cannot allocate host buffers", f->c->name);
    goto done;
  }
  st = run_variant(pr, FM_VARIANT_NOSKIP, 0, FM_MASK_METHOD_AUTO, f->nq, f->nlse, f->ntiles, o_ns, l_ns, NULL, NULL,
                   err);
  if (st == FM_OK)
    st = run_variant(pr, FM_VARIANT_DENSE, 0, FM_MASK_METHOD_AUTO, f->nq, f->nlse, f->ntiles, f->o_other,
                     f->l_other, NULL, NULL, err);
  if (st == FM_OK)
    r->dense_identical = same_output(r, "dense", "noskip", f->o_other, o_ns, f->l_other, l_ns, f->nq, f->nlse,
                                     sq, f->H, f->D);
done:
  free(o_ns);
  free(l_ns);
  free(dense);
  return st;
}

/* Phase 0: the inputs (seeded normals), the two CPU references and core's
 * classes; the case's counts into r. */
static fm_status cpu_side(fwd_case *f, int32_t br, int32_t bc, double scale, fm_check_result *r, fm_err *err) {
  fm_rng rng;
  fm_rng_seed(&rng, f->c->seed, 0x51ab);
  fill_normal_bf16(f->q, f->nq, &rng);
  fill_normal_bf16(f->k, f->nk, &rng);
  fill_normal_bf16(f->v, f->nk, &rng);
  fm_ref_problem rp = {f->B, f->H, f->D, scale, f->m, f->q, f->k, f->v};
  fm_status st = fm_reference_forward(&rp, FM_REF_FP64, f->o64, f->l64, err);
  if (st != FM_OK) return st;
  st = fm_reference_forward(&rp, FM_REF_BF16_FP32, f->osp, f->lsp, err);
  if (st != FM_OK) return st;
  fm_tile_counts counts;
  st = fm_classify(f->m, br, bc, &counts, f->cpu_cls, NULL, err);
  if (st != FM_OK) return st;
  r->tiles = counts.total;
  r->tiles_masked = counts.minmax[FM_TILE_MASKED];
  r->tiles_partial = counts.minmax[FM_TILE_PARTIAL];
  for (int64_t i = 0; i < f->nlse; i++) r->rows_empty += isinf(f->l64[i]) ? 1 : 0;
  return FM_OK;
}

static void fwd_case_free(fwd_case *f) {
  free(f->q), free(f->k), free(f->v), free(f->o64), free(f->l64), free(f->osp), free(f->lsp);
  free(f->o_skip), free(f->o_other), free(f->l_skip), free(f->l_other), free(f->cls), free(f->cpu_cls);
  free(f->cyc);
}

/* The checks in order: CPU side, upload, 1. skip against the reference,
 * 2. noskip == skip, 3. the instrumented builds, 3b. sm90's other mask
 * method == skip, 4. dense == noskip,
 * 5-7. the backward (check_backward). */
fm_status fm_attn_check_run(const fm_check_case *c, fm_check_result *r, fm_err *err) {
  memset(r, 0, sizeof *r);
  r->ok = 1;
  r->dense_identical = -1;
  r->mask_methods_identical = -1;
  const fm_colmask *m = c->mask;
  fwd_case f = {.c = c, .m = m, .B = c->batch, .H = c->heads, .D = c->head_dim};
  const int32_t B = f.B, H = f.H, D = f.D;
  f.sq = fm_colmask_sq(m), f.sk = fm_colmask_sk(m), f.nsets = fm_colmask_nsets(m);
  const int32_t nb = fm_colmask_nb(m), nh = fm_colmask_nh(m);
  if ((nb != 1 && nb != B) || (nh != 1 && nh != H))
    return fm_fail(err, FM_EINVAL, "case %s: mask sets %d x %d do not fit B=%d, H=%d", c->name,
                   nb, nh, B, H);
  int32_t br = 0, bc = 0;
  if (fm_kernel_tile_size(c->kernel, FM_PASS_FWD, D, &br, &bc, err) != FM_OK) return FM_EUNSUPPORTED;
  f.tr = (f.sq + br - 1) / br, f.tc = (f.sk + bc - 1) / bc;
  f.nq = (int64_t)B * f.sq * H * D, f.nk = (int64_t)B * f.sk * H * D;
  f.nlse = (int64_t)B * H * f.sq, f.ntiles = (int64_t)B * H * f.tr * f.tc;
  const int64_t nsettiles = (int64_t)f.nsets * f.tr * f.tc;
  const double scale = 1.0 / sqrt((double)D);

  fm_status st = FM_OK;
  dev_bufs dv;
  memset(&dv, 0, sizeof dv);
  f.q = malloc((size_t)f.nq * 2), f.k = malloc((size_t)f.nk * 2), f.v = malloc((size_t)f.nk * 2);
  f.o64 = malloc((size_t)f.nq * 8), f.l64 = malloc((size_t)f.nlse * 8);
  f.osp = malloc((size_t)f.nq * 8), f.lsp = malloc((size_t)f.nlse * 8);
  f.o_skip = malloc((size_t)f.nq * 2), f.o_other = malloc((size_t)f.nq * 2);
  f.l_skip = malloc((size_t)f.nlse * 4), f.l_other = malloc((size_t)f.nlse * 4);
  f.cls = malloc((size_t)f.ntiles), f.cpu_cls = malloc((size_t)nsettiles);
  f.cyc = malloc((size_t)f.ntiles * 8);
  if (!f.q || !f.k || !f.v || !f.o64 || !f.l64 || !f.osp || !f.lsp || !f.o_skip || !f.o_other || !f.l_skip ||
      !f.l_other || !f.cls || !f.cpu_cls || !f.cyc) {
    st = fm_fail(err, FM_ENOMEM, "case %s: cannot allocate host buffers", c->name);
    goto done;
  }
  st = cpu_side(&f, br, bc, scale, r, err);
  if (st == FM_OK) st = upload(&f, &dv, err);
  if (st != FM_OK) goto done;

  fm_attn_problem pr;
  fm_attn_problem_init(&pr, m, B, H, D, (float)scale);
  pr.kernel = c->kernel;
  pr.q = dv.q;
  pr.k = dv.k;
  pr.v = dv.v;
  pr.o = dv.o;
  pr.lse = dv.lse;
  pr.intervals = dv.iv;
  pr.tile_class = dv.cls;
  pr.tile_cycles = dv.cyc;

  /* ---- 1. skip against the fp64 reference */
  st = run_variant(&pr, FM_VARIANT_SKIP, 0, 0, f.nq, f.nlse, f.ntiles, f.o_skip, f.l_skip, NULL, NULL, err);
  if (st != FM_OK) goto done;
  check_reference(&f, r);
  /* ---- 2. noskip == skip bit for bit */
  st = run_variant(&pr, FM_VARIANT_NOSKIP, 0, 0, f.nq, f.nlse, f.ntiles, f.o_other, f.l_other, NULL, NULL, err);
  if (st != FM_OK) goto done;
  r->skip_noskip_identical =
      same_output(r, "noskip", "skip", f.o_other, f.o_skip, f.l_other, f.l_skip, f.nq, f.nlse, f.sq, H, D);
  /* ---- 3. instrumented builds: same output, classes == core, cycles */
  st = check_instrumented(&f, &pr, r, err);
  /* ---- 3b. sm90: the other partial-tile mask method == skip bit for bit */
  if (st == FM_OK && c->kernel == FM_KERNEL_SM90) st = check_mask_methods(&f, &pr, r, err);
  /* ---- 4. dense == noskip bit for bit */
  if (st == FM_OK && c->check_dense) st = check_dense(&f, &pr, &dv, r, err);
  /* ---- 5-7. the backward */
  if (st == FM_OK && (c->pass & FM_PASS_BWD)) st = check_backward(c, &pr, f.q, f.k, f.v, r, err);

done:
  dev_free(&dv);
  fwd_case_free(&f);
  if (st != FM_OK) r->ok = 0;
  return st;
}
