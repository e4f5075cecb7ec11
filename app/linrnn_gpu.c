/* linrnn_gpu.c — see linrnn_gpu.h. Host C11 and the CUDA runtime API; every
 * line that needs CUDA is behind FM_HAVE_CUDA. */
#include "linrnn_gpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_bf16.h"
#include "fm_rng.h"

void linrnn_gpu_result_free(linrnn_gpu_result *r) {
  if (!r) return;
  free(r->tile_class);
  free(r->tile_cycles);
  r->tile_class = NULL;
  r->tile_cycles = NULL;
}

#ifndef FM_HAVE_CUDA

int linrnn_gpu_available(void) { return 0; }

fm_status linrnn_gpu_run(const linrnn_gpu_case *c, linrnn_gpu_result *r, fm_err *err) {
  (void)c, (void)r;
  return fm_fail(err, FM_EUNSUPPORTED, "the GPU path needs the CUDA build (nvcc and the CUDA toolkit)");
}

#else

#include <cuda_runtime_api.h>

#include "fm_cupti.h"
#include "fm_linrnn.h"

int linrnn_gpu_available(void) { return 1; }

#define CK(call, what)                                                                            \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess)                                                                        \
      return fm_fail(err, FM_EIO, "CUDA error in %s: %s", (what), cudaGetErrorString(e_));        \
  } while (0)

/* Inputs on the host: bf16 bit patterns (what the kernel reads) and their
 * float values (what the reference reads). */
typedef struct host_in {
  int64_t T;
  int32_t H, dk, dv;
  uint16_t *q, *k, *v;
  float *qf, *kf, *vf, *g;
} host_in;

static void host_free(host_in *h) {
  free(h->q), free(h->k), free(h->v), free(h->qf), free(h->kf), free(h->vf), free(h->g);
  memset(h, 0, sizeof *h);
}

static float draw(fm_rng *r, int normal) {
  double u1 = ((double)(fm_rng_next(r) >> 11) + 1.0) * 0x1.0p-53;
  if (!normal) return (float)(2 * u1 - 1);
  double u2 = (double)(fm_rng_next(r) >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* q, k, v standard normal (normal) or uniform in [-1, 1], rounded to bf16;
 * g = log(alpha), alpha uniform in [0.9, 1]. */
static fm_status host_make(host_in *h, int64_t T, int32_t H, int32_t dk, int32_t dv, uint64_t seed,
                           int normal, fm_err *err) {
  *h = (host_in){.T = T, .H = H, .dk = dk, .dv = dv};
  size_t nk = (size_t)(T * H * dk), nv = (size_t)(T * H * dv);
  h->q = malloc(nk * 2), h->k = malloc(nk * 2), h->v = malloc(nv * 2);
  h->qf = malloc(nk * 4), h->kf = malloc(nk * 4), h->vf = malloc(nv * 4), h->g = malloc((size_t)(T * H) * 4);
  if (!h->q || !h->k || !h->v || !h->qf || !h->kf || !h->vf || !h->g) {
    host_free(h);
    return fm_fail(err, FM_ENOMEM, "cannot allocate the inputs of %lld tokens x %d heads", (long long)T, H);
  }
  fm_rng r;
  fm_rng_seed(&r, seed, 0x6c696e72 /* "linr" */);
  uint16_t *b[3] = {h->q, h->k, h->v};
  float *f[3] = {h->qf, h->kf, h->vf};
  size_t n[3] = {nk, nk, nv};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < n[a]; i++) {
      b[a][i] = fm_f32_to_bf16(draw(&r, normal));
      f[a][i] = fm_bf16_to_f32(b[a][i]);
    }
  for (int64_t i = 0; i < T * H; i++) h->g[i] = (float)log(0.9 + 0.1 * (0.5 + 0.5 * draw(&r, 0)));
  return FM_OK;
}

/* Device buffers of one size. */
typedef struct dev_in {
  void *q, *k, *v, *o;
  float *g, *state;
  int32_t *cu;
  uint8_t *cls;
  int64_t *cyc;
} dev_in;

static void dev_free(dev_in *d) {
  cudaFree(d->q), cudaFree(d->k), cudaFree(d->v), cudaFree(d->o), cudaFree(d->g);
  cudaFree(d->state), cudaFree(d->cu), cudaFree(d->cls), cudaFree(d->cyc);
  memset(d, 0, sizeof *d);
}

/* Uploads h and cu; allocates O, the final states (when states) and the
 * per-tile record (nclass > 0: heads x nclass of each). */
static fm_status dev_upload(dev_in *d, const host_in *h, const int32_t *cu, int32_t ndocs, int states,
                            int64_t nclass, fm_err *err) {
  size_t nk = (size_t)(h->T * h->H * h->dk), nv = (size_t)(h->T * h->H * h->dv);
  CK(cudaMalloc(&d->q, nk * 2), "allocate Q");
  CK(cudaMalloc(&d->k, nk * 2), "allocate K");
  CK(cudaMalloc(&d->v, nv * 2), "allocate V");
  CK(cudaMalloc(&d->o, nv * 2), "allocate O");
  CK(cudaMalloc((void **)&d->g, (size_t)(h->T * h->H) * 4), "allocate g");
  CK(cudaMalloc((void **)&d->cu, (size_t)(ndocs + 1) * 4), "allocate cu_seqlens");
  if (states) CK(cudaMalloc((void **)&d->state, (size_t)ndocs * h->H * h->dk * h->dv * 4), "allocate states");
  if (nclass > 0) {
    CK(cudaMalloc((void **)&d->cls, (size_t)(nclass * h->H)), "allocate tile_class");
    CK(cudaMalloc((void **)&d->cyc, (size_t)(nclass * h->H) * 8), "allocate tile_cycles");
  }
  CK(cudaMemcpy(d->q, h->q, nk * 2, cudaMemcpyHostToDevice), "copy Q");
  CK(cudaMemcpy(d->k, h->k, nk * 2, cudaMemcpyHostToDevice), "copy K");
  CK(cudaMemcpy(d->v, h->v, nv * 2, cudaMemcpyHostToDevice), "copy V");
  CK(cudaMemcpy(d->g, h->g, (size_t)(h->T * h->H) * 4, cudaMemcpyHostToDevice), "copy g");
  CK(cudaMemcpy(d->cu, cu, (size_t)(ndocs + 1) * 4, cudaMemcpyHostToDevice), "copy cu_seqlens");
  return FM_OK;
}

static fm_linrnn_problem problem_of(const linrnn_gpu_case *c, const host_in *h, const dev_in *d,
                                    int32_t ndocs) {
  return (fm_linrnn_problem){.tokens = (int32_t)h->T, .heads = h->H, .dk = h->dk, .dv = h->dv,
                             .chunk = c->chunk, .sub = c->sub, .ndocs = ndocs,
                             .scale = (float)(1.0 / sqrt((double)h->dk)), .cu_seqlens = d->cu,
                             .q = d->q, .k = d->k, .v = d->v, .g = d->g, .o = d->o,
                             .final_state = d->state};
}

typedef struct launch_arg {
  fm_linrnn_problem p;
  fm_linrnn_variant v;
  int instrumented;
} launch_arg;

static fm_status launch(void *user, void *stream, fm_err *err) {
  const launch_arg *a = user;
  return fm_linrnn_forward(&a->p, a->v, a->instrumented, stream, err);
}

/* One synchronous run; O (bf16 -> double) and the states into o, s. */
static fm_status run_once(launch_arg *a, int64_t no, int64_t ns, uint16_t *ob, float *sf, double *o,
                          double *s, fm_err *err) {
  fm_status st = launch(a, NULL, err);
  if (st != FM_OK) return st;
  CK(cudaDeviceSynchronize(), "the linear-RNN kernel");
  CK(cudaMemcpy(ob, a->p.o, (size_t)no * 2, cudaMemcpyDeviceToHost), "copy O");
  CK(cudaMemcpy(sf, a->p.final_state, (size_t)ns * 4, cudaMemcpyDeviceToHost), "copy states");
  for (int64_t i = 0; i < no; i++) o[i] = fm_bf16_to_f32(ob[i]);
  for (int64_t i = 0; i < ns; i++) s[i] = sf[i];
  return FM_OK;
}

/* What the check at the small size holds (freed by check_free). */
typedef struct check_bufs {
  host_in h;
  dev_in d;
  int32_t *cu;
  double *oref, *sref, *oround, *o, *s;
  uint16_t *ob, *ob0;
  float *sf, *sf0;
  uint8_t *cls, *cpu_cls;
} check_bufs;

static void check_free(check_bufs *b) {
  host_free(&b->h);
  dev_free(&b->d);
  free(b->cu), free(b->oref), free(b->sref), free(b->oround), free(b->o), free(b->s);
  free(b->ob), free(b->ob0), free(b->sf), free(b->sf0), free(b->cls), free(b->cpu_cls);
}

/* The documents of c cut at T tokens into b->cu; their count. */
static int32_t cut_docs(const linrnn_gpu_case *c, int64_t T, int32_t *cu) {
  int32_t n = 0;
  while (n < c->ndocs && c->cu[n] < T) cu[n] = c->cu[n], n++;
  cu[n] = (int32_t)T;
  return n;
}

/* Every variant against the reference and against skip, bit for bit; the
 * instrumented build's classes against the CPU's. */
static fm_status check_variants(const linrnn_gpu_case *c, check_bufs *b, int32_t nd, int64_t no,
                                int64_t ns, int64_t nclass, linrnn_gpu_result *r, fm_err *err) {
  r->identical = 1;
  for (int v = 0; v < FM_LR_NVARIANTS + 1; v++) { /* the last: skip, instrumented */
    launch_arg a = {problem_of(c, &b->h, &b->d, nd), v < FM_LR_NVARIANTS ? (fm_linrnn_variant)v : FM_LINRNN_SKIP,
                    v == FM_LR_NVARIANTS};
    if (a.instrumented) a.p.tile_class = b->d.cls, a.p.tile_cycles = b->d.cyc;
    fm_status st = run_once(&a, no, ns, b->ob, b->sf, b->o, b->s, err);
    if (st != FM_OK) return st;
    if (v == 0) memcpy(b->ob0, b->ob, (size_t)no * 2), memcpy(b->sf0, b->sf, (size_t)ns * 4);
    else r->identical &= !memcmp(b->ob0, b->ob, (size_t)no * 2) && !memcmp(b->sf0, b->sf, (size_t)ns * 4);
    if (v == FM_LR_NVARIANTS) break;
    r->out_err[v] = fm_lr_rel_error(b->o, b->oround, no);
    r->out_err_raw[v] = fm_lr_rel_error(b->o, b->oref, no);
    r->state_err[v] = fm_lr_rel_error(b->s, b->sref, ns);
  }
  CK(cudaMemcpy(b->cls, b->d.cls, (size_t)(nclass * b->h.H), cudaMemcpyDeviceToHost), "copy tile_class");
  r->class_mismatches = 0;
  for (int32_t h = 0; h < b->h.H; h++)
    for (int64_t i = 0; i < nclass; i++) r->class_mismatches += b->cls[h * nclass + i] != b->cpu_cls[i];
  return FM_OK;
}

static fm_status check_small(const linrnn_gpu_case *c, linrnn_gpu_result *r, fm_err *err) {
  check_bufs b = {0};
  const int64_t T = c->verify_tokens < c->tokens ? c->verify_tokens : c->tokens;
  fm_status st = (b.cu = malloc(sizeof(int32_t) * (size_t)(c->ndocs + 1))) ? FM_OK
                 : fm_fail(err, FM_ENOMEM, "cannot allocate the documents");
  int32_t nd = st == FM_OK ? cut_docs(c, T, b.cu) : 0;
  if (st == FM_OK) st = host_make(&b.h, T, c->verify_heads, c->dk, c->dv, c->seed, 1, err);
  const int64_t no = T * c->verify_heads * c->dv, ns = (int64_t)nd * c->verify_heads * c->dk * c->dv;
  const int64_t nclass = fm_lr_class_len(T, c->chunk, c->sub);
  if (st == FM_OK) {
    b.oref = malloc((size_t)no * 8), b.oround = malloc((size_t)no * 8), b.o = malloc((size_t)no * 8);
    b.sref = malloc((size_t)ns * 8), b.s = malloc((size_t)ns * 8);
    b.ob = malloc((size_t)no * 2), b.ob0 = malloc((size_t)no * 2), b.sf = malloc((size_t)ns * 4);
    b.sf0 = malloc((size_t)ns * 4), b.cls = malloc((size_t)(nclass * c->verify_heads));
    b.cpu_cls = malloc((size_t)nclass);
    if (!b.oref || !b.oround || !b.o || !b.sref || !b.s || !b.ob || !b.ob0 || !b.sf || !b.sf0 || !b.cls ||
        !b.cpu_cls)
      st = fm_fail(err, FM_ENOMEM, "cannot allocate the check's buffers");
  }
  fm_lr_problem rp = {.tokens = T, .heads = c->verify_heads, .dk = c->dk, .dv = c->dv,
                      .scale = (float)(1.0 / sqrt((double)c->dk)), .ndocs = nd, .cu_seqlens = b.cu,
                      .q = b.h.qf, .k = b.h.kf, .v = b.h.vf, .g = b.h.g};
  if (st == FM_OK) st = fm_lr_reference_chunkwise(&rp, c->chunk, c->sub, FM_LR_SKIP, b.oref, b.sref, err);
  fm_colmask *m = NULL;
  if (st == FM_OK) st = fm_lr_docs_colmask(b.cu, nd, &m, err);
  if (st == FM_OK) st = fm_lr_classify(m, c->chunk, c->sub, b.cpu_cls, err);
  fm_colmask_destroy(m);
  for (int64_t i = 0; st == FM_OK && i < no; i++) b.oround[i] = fm_round_bf16((float)b.oref[i]);
  if (st == FM_OK) st = dev_upload(&b.d, &b.h, b.cu, nd, 1, nclass, err);
  if (st == FM_OK) st = check_variants(c, &b, nd, no, ns, nclass, r, err);
  check_free(&b);
  return st;
}

/* Times the asked variants at full size, interleaved; the instrumented
 * record (and its overhead) of the first when asked. */
static fm_status time_full(const linrnn_gpu_case *c, linrnn_gpu_result *r, fm_err *err) {
  host_in h;
  dev_in d = {0};
  const int64_t nclass = fm_lr_class_len(c->tokens, c->chunk, c->sub);
  fm_status st = host_make(&h, c->tokens, c->heads, c->dk, c->dv, c->seed + 1, 0, err);
  if (st == FM_OK) st = dev_upload(&d, &h, c->cu, c->ndocs, 0, c->want_record ? nclass : 0, err);
  launch_arg args[FM_LR_NVARIANTS + 1];
  fm_launch_fn fns[FM_LR_NVARIANTS + 1];
  void *users[FM_LR_NVARIANTS + 1];
  int n = 0, which[FM_LR_NVARIANTS];
  for (int v = 0; st == FM_OK && v < FM_LR_NVARIANTS; v++)
    if (c->variants & (1u << v)) {
      args[n] = (launch_arg){problem_of(c, &h, &d, c->ndocs), (fm_linrnn_variant)v, 0};
      fns[n] = launch, users[n] = &args[n], which[n++] = v;
    }
  fm_time_opts to = {.warmup = c->warmup, .reps = c->reps, .warmup_min_ms = 500, .flush_l2 = 1};
  fm_timing tm[FM_LR_NVARIANTS + 1];
  double ratio[FM_LR_NVARIANTS + 1];
  if (st == FM_OK && n > 0) st = fm_time_interleaved(n, fns, users, NULL, &to, tm, ratio, err);
  for (int i = 0; st == FM_OK && i < n; i++) r->timing[which[i]] = tm[i], r->ratio[which[i]] = ratio[i];
  if (st == FM_OK && c->want_record && n > 0) {
    args[n] = args[0];
    args[n].instrumented = 1;
    args[n].p.tile_class = d.cls, args[n].p.tile_cycles = d.cyc;
    void *pair[2] = {&args[0], &args[n]};
    fm_launch_fn two[2] = {launch, launch};
    st = fm_time_interleaved(2, two, pair, NULL, &to, tm, ratio, err);
    if (st == FM_OK) r->instr_overhead = ratio[1] - 1, r->record_variant = which[0];
    size_t bytes = (size_t)(nclass * c->heads);
    if (st == FM_OK && (!(r->tile_class = malloc(bytes)) || !(r->tile_cycles = malloc(bytes * 8))))
      st = fm_fail(err, FM_ENOMEM, "cannot allocate the per-tile record");
    cudaError_t e = st == FM_OK ? cudaMemcpy(r->tile_class, d.cls, bytes, cudaMemcpyDeviceToHost) : cudaSuccess;
    if (e == cudaSuccess && st == FM_OK) e = cudaMemcpy(r->tile_cycles, d.cyc, bytes * 8, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) st = fm_fail(err, FM_EIO, "CUDA error in copy the record: %s", cudaGetErrorString(e));
  }
  dev_free(&d);
  host_free(&h);
  return st;
}

fm_status linrnn_gpu_run(const linrnn_gpu_case *c, linrnn_gpu_result *r, fm_err *err) {
  memset(r, 0, sizeof *r);
  for (int v = 0; v < FM_LR_NVARIANTS; v++)
    r->out_err[v] = r->out_err_raw[v] = r->state_err[v] = r->ratio[v] = NAN;
  r->instr_overhead = NAN;
  r->class_mismatches = -1;
  char why[256];
  if (!fm_gpu_probe(r->device, sizeof r->device, why, sizeof why))
    return fm_fail(err, FM_EUNSUPPORTED, "no usable GPU: %s", why);
  fm_status st = check_small(c, r, err);
  return st == FM_OK ? time_full(c, r, err) : st;
}

#endif
