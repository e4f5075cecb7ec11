/* fm_cp_gpu.cu — the GPU executor of a context-parallel schedule over NCCL
 * (kernels/fm_cp_gpu.h; the schedule is core/fm_cp_run.h's): NCCL loaded at
 * run time, the small kernels of the exchange (log-sum-exp merge, fp32
 * sums, conversions), one rank's run, and the processes. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "fm_attn.h"
#include "fm_bf16.h"
#include "fm_cp_gpu.h"
#include "fm_fileio.h"
#include "fm_reference.h"

/* ------------------------------------------------------------ NCCL at run time */

struct nccl_api {
  void *lib;
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclCommAbort) CommAbort;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
  decltype(&ncclSend) Send;
  decltype(&ncclRecv) Recv;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclGetErrorString) GetErrorString;
};
static nccl_api nccl;

#ifndef FM_NCCL_LIBRARY_PATH
#define FM_NCCL_LIBRARY_PATH ""
#endif

/* dlopen of libnccl.so.2 (fm_cp_gpu.h says where it looks and why). */
static fm_status nccl_load(fm_err *err) {
  if (nccl.lib) return FM_OK;
  const char *env = getenv("FMSIM_NCCL_LIBRARY");
  const char *tries[3] = {env && *env ? env : NULL, "libnccl.so.2", FM_NCCL_LIBRARY_PATH};
  char why[300] = "";
  for (int k = 0; k < 3 && !nccl.lib; k++) {
    if (!tries[k] || !*tries[k]) continue;
    nccl.lib = dlopen(tries[k], RTLD_NOW | RTLD_LOCAL);
    if (!nccl.lib && !why[0]) snprintf(why, sizeof why, "%s", dlerror());
  }
  if (!nccl.lib)
    return fm_fail(err, FM_EUNSUPPORTED, "cannot load libnccl.so.2 (%s): set LD_LIBRARY_PATH to the "
                   "folder that holds it (pip's nvidia-nccl-cu13: .../site-packages/nvidia/nccl/lib) or "
                   "FMSIM_NCCL_LIBRARY to its path", why);
#define FM_NCCL_SYM(f)                                                                            \
  nccl.f = (decltype(nccl.f))dlsym(nccl.lib, "nccl" #f);                                          \
  if (!nccl.f) return fm_fail(err, FM_EUNSUPPORTED, "libnccl.so.2 has no nccl" #f);
  FM_NCCL_SYM(GetUniqueId) FM_NCCL_SYM(CommInitRank) FM_NCCL_SYM(CommDestroy) FM_NCCL_SYM(CommAbort)
  FM_NCCL_SYM(GroupStart) FM_NCCL_SYM(GroupEnd) FM_NCCL_SYM(Send) FM_NCCL_SYM(Recv)
  FM_NCCL_SYM(AllReduce) FM_NCCL_SYM(GetErrorString)
#undef FM_NCCL_SYM
  return FM_OK;
}

/* ------------------------------------------------------------ small kernels */

namespace fmcp {

/* One row (b, i, h) per warp: the partial (o_p bf16, lse_p) merged into the
 * fp32 accumulators by log-sum-exp (core/fm_cp_run.h, fm_cp_lse_merge, is
 * its CPU twin); first: the accumulators take the partial. */
__global__ void merge_kernel(float *o, float *lse, const __nv_bfloat16 *o_p, const float *lse_p,
                             int64_t B, int64_t R, int64_t H, int D, int first) {
  int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= B * R * H) return;
  int64_t h = row % H, i = (row / H) % R, b = row / (H * R);
  int64_t li = (b * H + h) * R + i;
  float *oa = o + row * D;
  const __nv_bfloat16 *op = o_p + row * D;
  float a = first ? -INFINITY : lse[li], p = lse_p[li], mx = fmaxf(a, p);
  if (mx == -INFINITY) {
    if (first)
      for (int d = lane; d < D; d += 32) oa[d] = 0.f;
    if (first && lane == 0) lse[li] = -INFINITY;
    return;
  }
  float wa = __expf(a - mx), wp = __expf(p - mx), inv = 1.f / (wa + wp);
  for (int d = lane; d < D; d += 32)
    oa[d] = ((first ? 0.f : wa * oa[d]) + wp * __bfloat162float(op[d])) * inv;
  __syncwarp();
  if (lane == 0) lse[li] = mx + __logf(wa + wp);
}

/* One element range per record: dst (fp32) = or += src (bf16). */
struct seg_rec {
  int64_t src, dst, n; /* elements */
};
__global__ void seg_kernel(float *dst, const __nv_bfloat16 *src, const seg_rec *rec, int add) {
  seg_rec r = rec[blockIdx.y];
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < r.n; e += (int64_t)gridDim.x * blockDim.x) {
    float v = __bfloat162float(src[r.src + e]);
    dst[r.dst + e] = add ? dst[r.dst + e] + v : v;
  }
}

/* The pass gate (docs/DESIGN.md, "The exchange model", the 16K checks): holds
 * its stream until the host has enqueued the whole pass and written gen into
 * the mapped word, so that the events behind it time the GPU's work, not the
 * host's enqueue of it. Gives up after 2 s, counting the timeout in word[1]. */
__global__ void gate_kernel(volatile unsigned *word, unsigned gen) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (word[0] != gen) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 2000000000ull) {
      word[1] = word[1] + 1;
      return;
    }
    __nanosleep(256);
  }
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    dst[e] = __float2bfloat16_rn(src[e]);
}

} // namespace fmcp

/* ------------------------------------------------------------ one rank */

/* A failed call: the message names the call and the rank. */
#define CK(call, what)                                                                           \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess)                                                                       \
      return fm_fail(err, FM_EIO, "rank %d: %s: %s", rk->rank, what, cudaGetErrorString(e_));    \
  } while (0)
#define NK(call, what)                                                                           \
  do {                                                                                           \
    ncclResult_t e_ = (call);                                                                    \
    if (e_ != ncclSuccess)                                                                       \
      return fm_fail(err, FM_EIO, "rank %d: %s: %s", rk->rank, what, nccl.GetErrorString(e_));   \
  } while (0)
#define TRY(call)                                                                                \
  do {                                                                                           \
    fm_status s_ = (call);                                                                       \
    if (s_ != FM_OK) return s_;                                                                  \
  } while (0)

/* A range of records (their first and count in the rank's device table). */
struct rec_range {
  int32_t first, n;
  int64_t maxn;
};

/* One comm-stream item of a pass (docs/DESIGN.md, "cp-run": the order every
 * rank posts them in). */
enum item_kind { IT_KV, IT_DKV, IT_OWN };
struct comm_item {
  item_kind kind;
  int32_t s;      /* global step */
  int32_t step;   /* the rank's step index it receives for (KV) or sends for (DKV), -1 none */
  int32_t dep;    /* compute step that must be done first, -1 none */
};

struct rank_run {
  const fm_cp_gpu_opts *o;
  int32_t rank, P, R, S, B, H, D;
  int64_t HD;                  /* elements of one row of one batch */
  const fm_cp_rank_schedule *rs;
  fm_kernel_id kernel;
  ncclComm_t comm;
  cudaStream_t cs, xs;         /* compute, comm */
  fm_colmask *local;
  std::vector<fm_colmask *> sub; /* ring: each step's column subset */
  std::vector<int32_t *> iv;     /* device intervals: [0] the local mask, then per step */
  /* own tensors (B, R, H, D) bf16, LSE (B, H, R) fp32 */
  __nv_bfloat16 *q, *k, *v, *o_, *dout, *dq, *dk, *dv;
  float *lse, *o_acc, *dq_acc, *dk_acc, *dv_acc;
  /* exchange buffers */
  __nv_bfloat16 *kx[2], *vx[2];  /* ring: two steps' K/V; allgather: kx[0], vx[0] hold all S rows */
  __nv_bfloat16 *pk[2], *pv[2];  /* dK/dV partials of a step (allgather: [0] all S rows) */
  __nv_bfloat16 *rk_, *rv_;      /* partials received back */
  __nv_bfloat16 *o_p, *dq_p;     /* one launch's O, dQ */
  float *lse_p, *bar;
  fmcp::seg_rec *rec;            /* device records */
  std::vector<fmcp::seg_rec> hrec;
  rec_range own_set;
  std::vector<rec_range> back;   /* per peer t: the partials from t into the accumulators */
  rec_range whole;               /* one record over B x R x H x D */
  std::vector<comm_item> items[FM_CP_NPASSES];
  std::vector<void *> allocs;    /* every device buffer of the run */
  /* per pass: events of the comm items (start, end, released) and compute steps (start, end) */
  std::vector<cudaEvent_t> iev[FM_CP_NPASSES], sev[FM_CP_NPASSES];
  cudaEvent_t ev_start[FM_CP_NPASSES], ev_end[FM_CP_NPASSES], ev_xend[FM_CP_NPASSES];
  int64_t sent[FM_CP_NPASSES], recvd[FM_CP_NPASSES];
  std::vector<int64_t> ibytes[FM_CP_NPASSES]; /* per comm item: bytes sent, received */
  unsigned *gate_h, *gate_d;     /* the pass gate's mapped words (gen, timeouts); NULL: no gate */
  unsigned gate_gen;
  int gate_on;                   /* after the first passes, once every kernel is loaded (lazy loading) */
};

static int64_t bytes_of(const rank_run *rk, int64_t rows) { return (int64_t)rk->B * rows * rk->HD * 2; }

static fm_status dalloc(rank_run *rk, void **p, int64_t bytes, const char *what, fm_err *err) {
  *p = NULL;
  if (bytes <= 0) return FM_OK;
  cudaError_t e = cudaMalloc(p, (size_t)bytes);
  if (e != cudaSuccess)
    return fm_fail(err, FM_ENOMEM, "rank %d: cudaMalloc of %s (%.2f GiB): %s", rk->rank, what,
                   (double)bytes / (1 << 30), cudaGetErrorString(e));
  rk->allocs.push_back(*p);
  return FM_OK;
}
#define DALLOC(ptr, bytes, what) TRY(dalloc(rk, (void **)&(ptr), (bytes), (what), err))

static void run_free(rank_run *rk) {
  for (void *p : rk->allocs) cudaFree(p);
  rk->allocs.clear();
  for (int k = 0; k < FM_CP_NPASSES; k++) {
    for (cudaEvent_t e : rk->iev[k]) cudaEventDestroy(e);
    for (cudaEvent_t e : rk->sev[k]) cudaEventDestroy(e);
    rk->iev[k].clear();
    rk->sev[k].clear();
    if (rk->ev_start[k]) cudaEventDestroy(rk->ev_start[k]);
    if (rk->ev_end[k]) cudaEventDestroy(rk->ev_end[k]);
    if (rk->ev_xend[k]) cudaEventDestroy(rk->ev_xend[k]);
    rk->ev_start[k] = rk->ev_end[k] = rk->ev_xend[k] = NULL;
  }
  rk->iv.clear();
  rk->hrec.clear();
  rk->back.clear();
  for (fm_colmask *m : rk->sub) fm_colmask_destroy(m);
  rk->sub.clear();
  fm_colmask_destroy(rk->local);
  rk->local = NULL;
}

/* The interval vectors of m on the device (freed with the run). */
static fm_status upload_mask(rank_run *rk, const fm_colmask *m, fm_err *err) {
  int32_t *d = NULL;
  int64_t bytes = (int64_t)fm_colmask_nsets(m) * 4 * fm_colmask_sk(m) * 4;
  DALLOC(d, bytes, "interval vectors");
  CK(cudaMemcpy(d, fm_colmask_cvec(m, 0, FM_LTS), (size_t)bytes, cudaMemcpyHostToDevice),
     "cudaMemcpy (interval vectors)");
  rk->iv.push_back(d);
  return FM_OK;
}

/* A range of records appended to the host table. */
static rec_range add_recs(rank_run *rk, const std::vector<fmcp::seg_rec> &r) {
  rec_range g = {(int32_t)rk->hrec.size(), (int32_t)r.size(), 0};
  for (const fmcp::seg_rec &x : r) {
    rk->hrec.push_back(x);
    if (x.n > g.maxn) g.maxn = x.n;
  }
  return g;
}

/* The records of the sums: own partials (allgather: from the S-row dK/dV),
 * the partials received back from each peer, one over all own rows. */
static void build_records(rank_run *rk) {
  const fm_cp_rank_schedule *rs = rk->rs;
  const int ag = rk->o->sched->exchange == FM_CP_ALLGATHER;
  std::vector<fmcp::seg_rec> v;
  for (int32_t b = 0; b < rk->B; b++)
    for (int32_t g = 0; g < rs->nown; g++)
      v.push_back({((int64_t)b * rk->S + rs->own[g].row0) * rk->HD, ((int64_t)b * rk->R + rs->own[g].local0) * rk->HD,
                   (int64_t)(rs->own[g].row1 - rs->own[g].row0) * rk->HD});
  rk->own_set = add_recs(rk, v);
  rk->whole = add_recs(rk, {{0, 0, (int64_t)rk->B * rk->R * rk->HD}});
  int64_t at = 0; /* allgather: partials of every peer in one buffer of send_rows rows */
  for (int32_t t = 0; t < rk->P; t++) {
    const fm_cp_link *l = &rs->out[t];
    int64_t n = ag ? rs->send_rows : l->rows;
    v.clear();
    for (int32_t b = 0; b < rk->B; b++)
      for (int32_t i = 0, a = (int32_t)at; i < l->n; a += l->move[i].row1 - l->move[i].row0, i++)
        v.push_back({((int64_t)b * n + (ag ? a : l->move[i].off)) * rk->HD,
                     ((int64_t)b * rk->R + l->move[i].local0) * rk->HD,
                     (int64_t)(l->move[i].row1 - l->move[i].row0) * rk->HD});
    rk->back.push_back(add_recs(rk, v));
    if (ag) at += l->rows;
  }
}

/* The comm items of both passes in the order every rank posts them
 * (docs/DESIGN.md, "cp-run"): forward KV(1..P-1); backward KV(1), OWN, then
 * KV(s + 1) and DKV(s) for s = 1..P-1. The all-gather: one KV, one DKV. */
static void build_items(rank_run *rk) {
  const fm_cp_rank_schedule *rs = rk->rs;
  if (rk->o->sched->exchange == FM_CP_ALLGATHER) {
    rk->items[FM_CP_FWD].push_back({IT_KV, 0, 0, -1});
    rk->items[FM_CP_BWD].push_back({IT_DKV, 0, 0, 0});
    return;
  }
  std::vector<int32_t> at(rk->P, -1); /* the rank's step index of each global step */
  for (int32_t i = 0; i < rs->nsteps; i++) at[rs->step[i].s] = i;
  auto kv = [&](int32_t s) -> comm_item { return {IT_KV, s, at[s], at[s] >= 2 ? at[s] - 2 : -1}; };
  for (int32_t s = 1; s < rk->P; s++) rk->items[FM_CP_FWD].push_back(kv(s));
  if (rk->P > 1) rk->items[FM_CP_BWD].push_back(kv(1));
  rk->items[FM_CP_BWD].push_back({IT_OWN, 0, 0, 0});
  for (int32_t s = 1; s < rk->P; s++) {
    if (s + 1 < rk->P) rk->items[FM_CP_BWD].push_back(kv(s + 1));
    rk->items[FM_CP_BWD].push_back({IT_DKV, s, at[s], at[s]});
  }
}

/* Inputs from their global indices: Q, dO (and the ring's K, V) compact, the
 * all-gather's K, V at their global rows of the S-row buffers. */
static fm_status fill_inputs(rank_run *rk, fm_err *err) {
  const fm_cp_rank_schedule *rs = rk->rs;
  const int ag = rk->o->sched->exchange == FM_CP_ALLGATHER;
  __nv_bfloat16 *dst[4] = {rk->q, ag ? rk->kx[0] : rk->k, ag ? rk->vx[0] : rk->v, rk->dout};
  for (int t = 0; t < 4; t++)
    for (int32_t b = 0; b < rk->B; b++)
      for (int32_t g = 0; g < rs->nown; g++) {
        const fm_cp_move *mv = &rs->own[g];
        int64_t rows = (int64_t)(ag && (t == 1 || t == 2) ? rk->S : rk->R);
        int64_t at = (int64_t)(ag && (t == 1 || t == 2) ? mv->row0 : mv->local0);
        TRY(fm_attn_fill_random_bf16_at(dst[t] + ((int64_t)b * rows + at) * rk->HD,
                                        (int64_t)(mv->row1 - mv->row0) * rk->HD,
                                        fm_cp_input_seed(rk->o->seed, t),
                                        ((int64_t)b * rk->S + mv->row0) * rk->HD, rk->cs, err));
      }
  return FM_OK;
}

/* Masks, buffers, records, events of the rank's run. */
static fm_status run_setup(rank_run *rk, fm_err *err) {
  const fm_cp_gpu_opts *o = rk->o;
  const fm_cp_rank_schedule *rs = rk->rs;
  const int ag = o->sched->exchange == FM_CP_ALLGATHER;
  TRY(fm_cp_rank_mask(o->mask, o->plan->segments, o->plan->nsegments, rk->rank, &rk->local, err));
  TRY(upload_mask(rk, rk->local, err));
  for (int32_t i = 0; !ag && i < rs->nsteps; i++) {
    int32_t n;
    const fm_cp_move *cols = fm_cp_step_cols(rs, &rs->step[i], &n);
    fm_colmask *sub = NULL;
    TRY(fm_cp_colmask_subset(rk->local, cols, n, &sub, err));
    rk->sub.push_back(sub);
    TRY(upload_mask(rk, sub, err));
  }
  const int64_t own = bytes_of(rk, rk->R), own4 = 2 * own, lse = (int64_t)rk->B * rk->H * rk->R * 4;
  DALLOC(rk->q, own, "Q");
  DALLOC(rk->dout, own, "dO");
  DALLOC(rk->o_, own, "O");
  DALLOC(rk->dq, own, "dQ");
  DALLOC(rk->dk, own, "dK");
  DALLOC(rk->dv, own, "dV");
  DALLOC(rk->lse, lse, "LSE");
  DALLOC(rk->dk_acc, own4, "dK (fp32)");
  DALLOC(rk->dv_acc, own4, "dV (fp32)");
  DALLOC(rk->bar, 4, "barrier");
  if (ag) {
    const int64_t all = bytes_of(rk, rk->S), back = bytes_of(rk, rs->send_rows);
    DALLOC(rk->kx[0], all, "K (all S rows)");
    DALLOC(rk->vx[0], all, "V (all S rows)");
    DALLOC(rk->pk[0], all, "dK partials (all S rows)");
    DALLOC(rk->pv[0], all, "dV partials (all S rows)");
    DALLOC(rk->rk_, back, "dK partials received");
    DALLOC(rk->rv_, back, "dV partials received");
    CK(cudaMemset(rk->kx[0], 0, (size_t)all), "cudaMemset (K)");
    CK(cudaMemset(rk->vx[0], 0, (size_t)all), "cudaMemset (V)");
  } else {
    const int64_t step = bytes_of(rk, rs->ring_max_cols);
    const int64_t part = bytes_of(rk, rs->ring_max_cols > rk->R ? rs->ring_max_cols : rk->R);
    const int64_t back = bytes_of(rk, rs->send_rows_max);
    DALLOC(rk->k, own, "K");
    DALLOC(rk->v, own, "V");
    for (int h = 0; h < 2; h++) {
      DALLOC(rk->kx[h], step, "K of a ring step");
      DALLOC(rk->vx[h], step, "V of a ring step");
      DALLOC(rk->pk[h], part, "dK partials of a ring step");
      DALLOC(rk->pv[h], part, "dV partials of a ring step");
    }
    DALLOC(rk->rk_, back, "dK partials received");
    DALLOC(rk->rv_, back, "dV partials received");
    DALLOC(rk->o_acc, own4, "O (fp32)");
    DALLOC(rk->dq_acc, own4, "dQ (fp32)");
    DALLOC(rk->o_p, own, "O of a step");
    DALLOC(rk->dq_p, own, "dQ of a step");
    DALLOC(rk->lse_p, lse, "LSE of a step");
  }
  build_records(rk);
  DALLOC(rk->rec, (int64_t)rk->hrec.size() * (int64_t)sizeof(fmcp::seg_rec), "records");
  CK(cudaMemcpy(rk->rec, rk->hrec.data(), rk->hrec.size() * sizeof(fmcp::seg_rec), cudaMemcpyHostToDevice),
     "cudaMemcpy (records)");
  build_items(rk);
  for (int k = 0; k < FM_CP_NPASSES; k++) {
    rk->ibytes[k].assign(2 * rk->items[k].size(), 0);
    rk->iev[k].resize(3 * rk->items[k].size());
    rk->sev[k].resize(2 * (size_t)rs->nsteps);
    for (cudaEvent_t &e : rk->iev[k]) CK(cudaEventCreate(&e), "cudaEventCreate");
    for (cudaEvent_t &e : rk->sev[k]) CK(cudaEventCreate(&e), "cudaEventCreate");
    CK(cudaEventCreate(&rk->ev_start[k]), "cudaEventCreate");
    CK(cudaEventCreate(&rk->ev_end[k]), "cudaEventCreate");
    CK(cudaEventCreate(&rk->ev_xend[k]), "cudaEventCreate");
  }
  TRY(fill_inputs(rk, err));
  CK(cudaStreamSynchronize(rk->cs), "cudaStreamSynchronize (inputs)");
  return FM_OK;
}

/* ------------------------------------------------------------ the passes */

static fm_status seg_launch(rank_run *rk, cudaStream_t st, float *dst, const __nv_bfloat16 *src,
                            rec_range g, int add, fm_err *err) {
  if (!g.n) return FM_OK;
  int64_t bx = (g.maxn + 1023) / 1024;
  unsigned gx = (unsigned)(bx < 1 ? 1 : bx > 1024 ? 1024 : bx);
  for (int32_t f = 0; f < g.n; f += 65535) { /* grid.y is at most 65535 */
    unsigned gy = (unsigned)(g.n - f < 65535 ? g.n - f : 65535);
    fmcp::seg_kernel<<<dim3(gx, gy), 256, 0, st>>>(dst, src, rk->rec + g.first + f, add);
  }
  CK(cudaGetLastError(), "seg_kernel launch");
  return FM_OK;
}

static fm_status to_bf16(rank_run *rk, cudaStream_t st, __nv_bfloat16 *dst, const float *src, fm_err *err) {
  int64_t n = (int64_t)rk->B * rk->R * rk->HD, bx = (n + 1023) / 1024;
  fmcp::to_bf16_kernel<<<(unsigned)(bx > 4096 ? 4096 : bx < 1 ? 1 : bx), 256, 0, st>>>(dst, src, n);
  CK(cudaGetLastError(), "to_bf16_kernel launch");
  return FM_OK;
}

/* Closes the gate on stream st: what is enqueued behind it waits for gate_open. */
static fm_status gate_close(rank_run *rk, cudaStream_t st, fm_err *err) {
  if (!rk->gate_h || !rk->gate_on) return FM_OK;
  fmcp::gate_kernel<<<1, 1, 0, st>>>(rk->gate_d, ++rk->gate_gen);
  CK(cudaGetLastError(), "gate_kernel launch");
  return FM_OK;
}

/* Opens it: the host has enqueued everything the gate holds. */
static void gate_open(rank_run *rk) {
  if (rk->gate_h && rk->gate_on) __atomic_store_n(&rk->gate_h[0], rk->gate_gen, __ATOMIC_RELEASE);
}

/* The attention launch of step i (all-gather: the local mask against all S keys). */
static fm_status attn_launch(rank_run *rk, int pass, int32_t i, fm_err *err) {
  const int ag = rk->o->sched->exchange == FM_CP_ALLGATHER;
  const fm_colmask *m = ag ? rk->local : rk->sub[(size_t)i];
  fm_attn_problem p;
  fm_attn_problem_init(&p, m, rk->B, rk->H, rk->D, 1.0f / sqrtf((float)rk->D));
  p.kernel = rk->kernel;
  p.intervals = rk->iv[ag ? 0 : (size_t)i + 1];
  p.q = rk->q;
  p.k = ag ? rk->kx[0] : i == 0 ? rk->k : rk->kx[i % 2];
  p.v = ag ? rk->vx[0] : i == 0 ? rk->v : rk->vx[i % 2];
  if (pass == FM_CP_FWD) {
    p.o = ag ? rk->o_ : rk->o_p;
    p.lse = ag ? rk->lse : rk->lse_p;
    TRY(fm_attn_forward(&p, FM_VARIANT_SKIP, 0, rk->cs, err));
    if (ag) return FM_OK;
    int64_t rows = (int64_t)rk->B * rk->R * rk->H;
    fmcp::merge_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, rk->cs>>>(
        rk->o_acc, rk->lse, rk->o_p, rk->lse_p, rk->B, rk->R, rk->H, rk->D, i == 0);
    CK(cudaGetLastError(), "merge_kernel launch");
    return FM_OK;
  }
  p.o = rk->o_; /* the merged forward */
  p.lse = rk->lse;
  p.dout = rk->dout;
  p.dq = ag ? rk->dq : rk->dq_p;
  p.dk = rk->pk[ag ? 0 : i % 2];
  p.dv = rk->pv[ag ? 0 : i % 2];
  TRY(fm_attn_backward(&p, FM_VARIANT_SKIP, 0, rk->cs, err));
  return ag ? FM_OK : seg_launch(rk, rk->cs, rk->dq_acc, rk->dq_p, rk->whole, i > 0, err);
}

/* Messages of one side of a link (fm_cp_link: K/V or partials back, coalesced
 * by the schedule): one per (batch, message, tensor), from rows at + src
 * (send) or into rows at + dst (receive) of buffers a, b of `base` rows per
 * batch. */
static fm_status post_msgs(rank_run *rk, const fm_cp_msg *m, int32_t n, int32_t peer, int send,
                           const void *a, const void *b, int64_t base, int64_t at, int64_t *bytes,
                           fm_err *err) {
  for (int32_t bt = 0; bt < rk->B; bt++)
    for (int32_t i = 0; i < n; i++) {
      int64_t row = at + (send ? m[i].src : m[i].dst);
      int64_t off = ((int64_t)bt * base + row) * rk->HD, nb = (int64_t)m[i].rows * rk->HD * 2;
      for (int t = 0; t < 2; t++) {
        char *ptr = (char *)(t ? b : a) + off * 2;
        if (send) NK(nccl.Send(ptr, (size_t)nb, ncclChar, peer, rk->comm, rk->xs), "ncclSend");
        else NK(nccl.Recv(ptr, (size_t)nb, ncclChar, peer, rk->comm, rk->xs), "ncclRecv");
        *bytes += nb;
      }
    }
  return FM_OK;
}

/* The group of comm item c (its messages only; the sums follow it). */
static fm_status post_group(rank_run *rk, int pass, const comm_item &c, int64_t *sb, int64_t *rb, fm_err *err) {
  const fm_cp_rank_schedule *rs = rk->rs;
  const int ag = rk->o->sched->exchange == FM_CP_ALLGATHER;
  const int32_t P = rk->P, r = rk->rank;
  NK(nccl.GroupStart(), "ncclGroupStart");
  if (ag) {
    for (int32_t q = 0, at = 0; q < P; at += rs->out[q].rows, q++) {
      const fm_cp_link *in = &rs->in[q], *out = &rs->out[q];
      if (pass == FM_CP_FWD) { /* K/V at their global rows of the S-row buffers, both ways */
        TRY(post_msgs(rk, in->kv, in->nkv, q, 0, rk->kx[0], rk->vx[0], rk->S, 0, rb, err));
        TRY(post_msgs(rk, out->kv, out->nkv, q, 1, rk->kx[0], rk->vx[0], rk->S, 0, sb, err));
      } else { /* partials of received rows back; ours from every peer, one after the other */
        TRY(post_msgs(rk, in->back, in->nback, q, 1, rk->pk[0], rk->pv[0], rk->S, 0, sb, err));
        TRY(post_msgs(rk, out->back, out->nback, q, 0, rk->rk_, rk->rv_, rs->send_rows, at, rb, err));
      }
    }
  } else if (c.kind == IT_KV) {
    int32_t src = (r - c.s + P) % P, dst = (r + c.s) % P;
    const fm_cp_link *in = &rs->in[src], *out = &rs->out[dst];
    if (c.step >= 0)
      TRY(post_msgs(rk, in->kv, in->nkv, src, 0, rk->kx[c.step % 2], rk->vx[c.step % 2],
                    rs->step[c.step].ncols, 0, rb, err));
    TRY(post_msgs(rk, out->kv, out->nkv, dst, 1, rk->k, rk->v, rk->R, 0, sb, err));
  } else { /* DKV: this step's partials to their owner, ours from the rank that used them */
    int32_t src = (r - c.s + P) % P, dst = (r + c.s) % P;
    const fm_cp_link *in = &rs->in[src], *out = &rs->out[dst];
    if (c.step >= 0)
      TRY(post_msgs(rk, in->back, in->nback, src, 1, rk->pk[c.step % 2], rk->pv[c.step % 2],
                    rs->step[c.step].ncols, 0, sb, err));
    TRY(post_msgs(rk, out->back, out->nback, dst, 0, rk->rk_, rk->rv_, out->rows, 0, rb, err));
  }
  NK(nccl.GroupEnd(), "ncclGroupEnd");
  return FM_OK;
}

/* Comm item c of a pass on the comm stream: wait for its compute step, the
 * group between two events, then the sums it feeds (partials into the fp32
 * dK/dV); its third event marks the step's partial buffer free again. */
static fm_status enqueue_item(rank_run *rk, int pass, size_t idx, fm_err *err) {
  const comm_item &c = rk->items[pass][idx];
  cudaEvent_t *e = &rk->iev[pass][3 * idx];
  const int ag = rk->o->sched->exchange == FM_CP_ALLGATHER;
  if (c.dep >= 0) CK(cudaStreamWaitEvent(rk->xs, rk->sev[pass][2 * (size_t)c.dep + 1], 0), "cudaStreamWaitEvent");
  CK(cudaEventRecord(e[0], rk->xs), "cudaEventRecord");
  if (c.kind == IT_OWN) { /* the own step's partials: the compact layout */
    TRY(seg_launch(rk, rk->xs, rk->dk_acc, rk->pk[0], rk->whole, 1, err));
    TRY(seg_launch(rk, rk->xs, rk->dv_acc, rk->pv[0], rk->whole, 1, err));
  } else {
    int64_t sb = 0, rb = 0;
    TRY(post_group(rk, pass, c, &sb, &rb, err));
    rk->sent[pass] += sb;
    rk->recvd[pass] += rb;
    rk->ibytes[pass][2 * idx] = sb;
    rk->ibytes[pass][2 * idx + 1] = rb;
  }
  CK(cudaEventRecord(e[1], rk->xs), "cudaEventRecord");
  if (c.kind == IT_DKV) {
    int32_t t = ag ? -1 : (rk->rank + c.s) % rk->P;
    if (ag) { /* own rows of the S-row partials, then every peer's */
      TRY(seg_launch(rk, rk->xs, rk->dk_acc, rk->pk[0], rk->own_set, 0, err));
      TRY(seg_launch(rk, rk->xs, rk->dv_acc, rk->pv[0], rk->own_set, 0, err));
    }
    for (int32_t q = 0; q < rk->P; q++)
      if (ag ? 1 : q == t) {
        TRY(seg_launch(rk, rk->xs, rk->dk_acc, rk->rk_, rk->back[(size_t)q], 1, err));
        TRY(seg_launch(rk, rk->xs, rk->dv_acc, rk->rv_, rk->back[(size_t)q], 1, err));
      }
  }
  CK(cudaEventRecord(e[2], rk->xs), "cudaEventRecord");
  return FM_OK;
}

/* Compute step i of a pass on the compute stream, between its two events. */
static fm_status enqueue_step(rank_run *rk, int pass, int32_t i, const std::vector<int32_t> &kv_item,
                              const std::vector<int32_t> &rel_item, fm_err *err) {
  if (kv_item[(size_t)i] >= 0)
    CK(cudaStreamWaitEvent(rk->cs, rk->iev[pass][3 * (size_t)kv_item[(size_t)i] + 1], 0), "cudaStreamWaitEvent");
  if (pass == FM_CP_BWD && i >= 2 && rel_item[(size_t)i - 2] >= 0)
    CK(cudaStreamWaitEvent(rk->cs, rk->iev[pass][3 * (size_t)rel_item[(size_t)i - 2] + 2], 0), "cudaStreamWaitEvent");
  CK(cudaEventRecord(rk->sev[pass][2 * (size_t)i], rk->cs), "cudaEventRecord");
  TRY(attn_launch(rk, pass, i, err));
  CK(cudaEventRecord(rk->sev[pass][2 * (size_t)i + 1], rk->cs), "cudaEventRecord");
  return FM_OK;
}

/* Posts one pass: a barrier (one float all-reduced, the host waits), the
 * start event both streams wait on, then comm items and compute steps in an
 * order where every wait is on an event already recorded; the compute stream
 * joins the comm stream and converts the fp32 sums. */
static fm_status post_pass_body(rank_run *rk, int pass, fm_err *err) {
  const int ag = rk->o->sched->exchange == FM_CP_ALLGATHER;
  const std::vector<comm_item> &items = rk->items[pass];
  const int32_t nsteps = ag ? 1 : rk->rs->nsteps;
  std::vector<int32_t> kv_item((size_t)nsteps, -1), rel_item((size_t)nsteps, -1);
  for (size_t c = 0; c < items.size(); c++) {
    if (items[c].kind == IT_KV && items[c].step >= 0) kv_item[(size_t)items[c].step] = (int32_t)c;
    if (items[c].kind != IT_KV && items[c].step >= 0) rel_item[(size_t)items[c].step] = (int32_t)c;
  }
  if (ag && pass == FM_CP_BWD) kv_item[0] = -1;
  rk->sent[pass] = rk->recvd[pass] = 0;
  CK(cudaStreamSynchronize(rk->cs), "cudaStreamSynchronize (before the barrier)");
  CK(cudaStreamSynchronize(rk->xs), "cudaStreamSynchronize (before the barrier)");
  NK(nccl.AllReduce(rk->bar, rk->bar, 1, ncclFloat, ncclSum, rk->comm, rk->xs), "ncclAllReduce (barrier)");
  CK(cudaStreamSynchronize(rk->xs), "cudaStreamSynchronize (barrier)");
  TRY(gate_close(rk, rk->cs, err));
  CK(cudaEventRecord(rk->ev_start[pass], rk->cs), "cudaEventRecord");
  CK(cudaStreamWaitEvent(rk->xs, rk->ev_start[pass], 0), "cudaStreamWaitEvent");
  if (pass == FM_CP_BWD) {
    CK(cudaMemsetAsync(rk->dk_acc, 0, (size_t)(2 * bytes_of(rk, rk->R)), rk->xs), "cudaMemsetAsync");
    CK(cudaMemsetAsync(rk->dv_acc, 0, (size_t)(2 * bytes_of(rk, rk->R)), rk->xs), "cudaMemsetAsync");
  }
  size_t c = 0;
  int32_t i = 0;
  std::vector<char> posted(items.size(), 0);
  while (c < items.size() || i < nsteps) {
    if (c < items.size() && items[c].dep < i) {
      TRY(enqueue_item(rk, pass, c, err));
      posted[c++] = 1;
      continue;
    }
    int ready = i < nsteps && (kv_item[(size_t)i] < 0 || posted[(size_t)kv_item[(size_t)i]]) &&
                (pass == FM_CP_FWD || i < 2 || rel_item[(size_t)i - 2] < 0 || posted[(size_t)rel_item[(size_t)i - 2]]);
    if (!ready) return fm_fail(err, FM_EIO, "rank %d: the schedule's order stalls at item %zu, step %d", rk->rank, c, i);
    TRY(enqueue_step(rk, pass, i++, kv_item, rel_item, err));
  }
  CK(cudaEventRecord(rk->ev_xend[pass], rk->xs), "cudaEventRecord");
  CK(cudaStreamWaitEvent(rk->cs, rk->ev_xend[pass], 0), "cudaStreamWaitEvent");
  if (!ag && pass == FM_CP_FWD) TRY(to_bf16(rk, rk->cs, rk->o_, rk->o_acc, err));
  if (!ag && pass == FM_CP_BWD) TRY(to_bf16(rk, rk->cs, rk->dq, rk->dq_acc, err));
  if (pass == FM_CP_BWD) {
    TRY(to_bf16(rk, rk->cs, rk->dk, rk->dk_acc, err));
    TRY(to_bf16(rk, rk->cs, rk->dv, rk->dv_acc, err));
  }
  CK(cudaEventRecord(rk->ev_end[pass], rk->cs), "cudaEventRecord");
  return FM_OK;
}

/* One pass posted behind the gate, which opens whether or not it posted whole. */
static fm_status post_pass(rank_run *rk, int pass, fm_err *err) {
  fm_status st = post_pass_body(rk, pass, err);
  gate_open(rk);
  return st;
}

static double ev_ms(rank_run *rk, cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) return NAN;
  (void)rk;
  return ms;
}

/* After a pass: its wall, compute and comm times (ms); with ev, its spans. */
static fm_status pass_times(rank_run *rk, int pass, double t[3], std::vector<fm_cp_gpu_event> *ev, fm_err *err) {
  CK(cudaEventSynchronize(rk->ev_end[pass]), "cudaEventSynchronize (pass end)");
  const int ag = rk->o->sched->exchange == FM_CP_ALLGATHER;
  const int32_t nsteps = ag ? 1 : rk->rs->nsteps;
  t[0] = ev_ms(rk, rk->ev_start[pass], rk->ev_end[pass]);
  t[1] = t[2] = 0;
  for (int32_t i = 0; i < nsteps; i++) {
    double a = ev_ms(rk, rk->ev_start[pass], rk->sev[pass][2 * (size_t)i]);
    double b = ev_ms(rk, rk->ev_start[pass], rk->sev[pass][2 * (size_t)i + 1]);
    t[1] += b - a;
    if (ev) {
      fm_cp_gpu_event e = {"", 0, pass, a, b, 0, 0, ag ? -1 : rk->rs->step[i].source};
      snprintf(e.name, sizeof e.name, "%s %s%d", pass ? "bwd" : "fwd", ag ? "all keys" : "step ", ag ? 0 : i);
      if (ag) snprintf(e.name, sizeof e.name, "%s all keys", pass ? "bwd" : "fwd");
      ev->push_back(e);
    }
  }
  const std::vector<comm_item> &items = rk->items[pass];
  for (size_t c = 0; c < items.size(); c++) {
    double a = ev_ms(rk, rk->ev_start[pass], rk->iev[pass][3 * c]);
    double b = ev_ms(rk, rk->ev_start[pass], rk->iev[pass][3 * c + 2]);
    t[2] += b - a;
    if (ev) {
      fm_cp_gpu_event e = {"", 1, pass, a, b, rk->ibytes[pass][2 * c], rk->ibytes[pass][2 * c + 1],
                           items[c].kind == IT_OWN ? rk->rank : -1};
      snprintf(e.name, sizeof e.name, "%s %s%d", pass ? "bwd" : "fwd",
               items[c].kind == IT_KV ? "K/V s=" : items[c].kind == IT_DKV ? "dK/dV s=" : "own dK/dV ", items[c].s);
      ev->push_back(e);
    }
  }
  return FM_OK;
}

/* ------------------------------------------------------------ timing */

static double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Warm-up then the timed passes; medians into out, the last pass's spans into ev. */
static fm_status measure(rank_run *rk, fm_cp_gpu_rank *out, std::vector<fm_cp_gpu_event> *ev, fm_err *err) {
  const fm_cp_gpu_opts *o = rk->o;
  const int np = o->backward ? 2 : 1;
  double t[3];
  for (int k = 0; k < np; k++) TRY(post_pass(rk, k, err));
  double first = 0;
  for (int k = 0; k < np; k++) {
    TRY(pass_times(rk, k, t, NULL, err));
    first += t[0];
  }
  rk->gate_on = 1;
  /* every rank runs as many warm-up passes (they are collective): the most any wants */
  float want = (float)(first > 0 ? ceil(o->warmup_ms / first) : 1), got = 0;
  CK(cudaMemcpy(rk->bar, &want, 4, cudaMemcpyHostToDevice), "cudaMemcpy (warm-up count)");
  NK(nccl.AllReduce(rk->bar, rk->bar, 1, ncclFloat, ncclMax, rk->comm, rk->xs), "ncclAllReduce (warm-up count)");
  CK(cudaMemcpyAsync(&got, rk->bar, 4, cudaMemcpyDeviceToHost, rk->xs), "cudaMemcpy (warm-up count)");
  CK(cudaStreamSynchronize(rk->xs), "cudaStreamSynchronize");
  for (int w = 1; w < (int)got && w < 100000; w++)
    for (int k = 0; k < np; k++) TRY(post_pass(rk, k, err));
  std::vector<double> v[FM_CP_NPASSES][3];
  for (int it = 0; it < o->iters; it++)
    for (int k = 0; k < np; k++) {
      TRY(post_pass(rk, k, err));
      TRY(pass_times(rk, k, t, it == o->iters - 1 && o->timeline ? ev : NULL, err));
      for (int q = 0; q < 3; q++) v[k][q].push_back(t[q]);
    }
  for (int k = 0; k < np; k++) {
    fm_cp_gpu_pass *p = &out->pass[k];
    p->wall_ms = median(v[k][0]);
    p->compute_ms = median(v[k][1]);
    p->comm_ms = median(v[k][2]);
    p->bytes_sent = rk->sent[k];
    p->bytes_recv = rk->recvd[k];
    p->launches = o->sched->exchange == FM_CP_ALLGATHER ? 1 : rk->rs->nsteps;
  }
  return FM_OK;
}

/* ------------------------------------------------------------ the whole problem */

/* The own rows of the five outputs on the host: (B, R, H, D) bf16 x 4 (O, dQ,
 * dK, dV) and LSE (B, H, R). */
struct host_out {
  std::vector<uint16_t> t[4];
  std::vector<float> lse;
};

/* Copies the own rows of a (B, n, H, D) tensor (rows at row0 when n = S,
 * else compact) and of a (B, H, n) LSE. */
static fm_status download(rank_run *rk, const void *const dev[4], const float *lse, int32_t n, host_out *h,
                          fm_err *err) {
  const fm_cp_rank_schedule *rs = rk->rs;
  const int global = n == rk->S && n != rk->R;
  for (int t = 0; t < 4; t++) h->t[t].assign((size_t)rk->B * rk->R * rk->HD, 0);
  h->lse.assign((size_t)rk->B * rk->H * rk->R, 0);
  for (int32_t b = 0; b < rk->B; b++)
    for (int32_t g = 0; g < rs->nown; g++) {
      const fm_cp_move *mv = &rs->own[g];
      int64_t rows = mv->row1 - mv->row0, src = global ? mv->row0 : mv->local0;
      for (int t = 0; t < 4; t++)
        if (dev[t])
          CK(cudaMemcpy(h->t[t].data() + ((int64_t)b * rk->R + mv->local0) * rk->HD,
                        (const uint16_t *)dev[t] + ((int64_t)b * n + src) * rk->HD, (size_t)(rows * rk->HD * 2),
                        cudaMemcpyDeviceToHost), "cudaMemcpy (outputs)");
      for (int32_t hh = 0; hh < rk->H; hh++)
        CK(cudaMemcpy(h->lse.data() + ((int64_t)b * rk->H + hh) * rk->R + mv->local0,
                      lse + ((int64_t)b * rk->H + hh) * n + src, (size_t)rows * 4, cudaMemcpyDeviceToHost),
           "cudaMemcpy (LSE)");
    }
  return FM_OK;
}

/* got against ref by the kernels' tolerance (fm_ref_tolerance of quantity q). */
static void compare(const double *got, const double *ref, size_t n, int q, fm_cp_gpu_rank *out) {
  fm_ref_tol tol = fm_ref_tolerance((fm_ref_quantity)q);
  for (size_t e = 0; e < n; e++) {
    double g = got[e], x = ref[e];
    if (isinf(x) || isinf(g)) {
      out->check_bad[q] += g != x;
      continue;
    }
    double d = fabs(g - x);
    if (!(d <= tol.atol + tol.rtol * fabs(x))) out->check_bad[q]++;
    if (d > out->check_abs[q] || d != d) out->check_abs[q] = d != d ? INFINITY : d;
    if (fabs(x) > tol.atol && d / fabs(x) > out->check_rel[q]) out->check_rel[q] = d / fabs(x);
  }
}

static void compare_all(const host_out *cp, const host_out *one, int backward, fm_cp_gpu_rank *out) {
  static const int quantity[4] = {FM_REF_Q_O, FM_REF_Q_DQ, FM_REF_Q_DK, FM_REF_Q_DV};
  for (int t = 0; t < (backward ? 4 : 1); t++) {
    size_t n = cp->t[t].size();
    std::vector<double> a(n), b(n);
    for (size_t e = 0; e < n; e++) {
      a[e] = fm_bf16_to_f32(cp->t[t][e]);
      b[e] = fm_bf16_to_f32(one->t[t][e]);
    }
    compare(a.data(), b.data(), n, quantity[t], out);
  }
  size_t n = cp->lse.size();
  std::vector<double> a(cp->lse.begin(), cp->lse.end()), b(one->lse.begin(), one->lse.end());
  compare(a.data(), b.data(), n, FM_REF_Q_LSE, out);
}

/* Pass k (0 forward, 1 backward) of p on the compute stream between e[0] and e[1]. */
static fm_status one_pass(rank_run *rk, const fm_attn_problem *p, int k, cudaEvent_t e[2], fm_err *err) {
  CK(cudaEventRecord(e[0], rk->cs), "cudaEventRecord");
  TRY(k ? fm_attn_backward(p, FM_VARIANT_SKIP, 0, rk->cs, err) : fm_attn_forward(p, FM_VARIANT_SKIP, 0, rk->cs, err));
  CK(cudaEventRecord(e[1], rk->cs), "cudaEventRecord");
  return FM_OK;
}

/* The whole problem on this rank's device, one launch per pass: with
 * `timed`, warm-up and iters passes (medians into ms); its own rows' outputs
 * into h. Its buffers are freed before returning. */
static fm_status whole_run(rank_run *rk, int timed, double ms[2], host_out *h, fm_err *err) {
  const fm_cp_gpu_opts *o = rk->o;
  const int64_t n = bytes_of(rk, rk->S);
  __nv_bfloat16 *t[8];
  static const char *names[8] = {"Q", "K", "V", "dO", "O", "dQ", "dK", "dV"};
  float *lse = NULL;
  for (int k = 0; k < 8; k++) DALLOC(t[k], k < 5 || o->backward ? n : 0, names[k]);
  DALLOC(lse, (int64_t)rk->B * rk->H * rk->S * 4, "LSE");
  TRY(upload_mask(rk, o->mask, err));
  for (int k = 0; k < 4; k++) TRY(fm_attn_fill_random_bf16_at(t[k], n / 2, fm_cp_input_seed(o->seed, k), 0, rk->cs, err));
  fm_attn_problem p;
  fm_attn_problem_init(&p, o->mask, rk->B, rk->H, rk->D, 1.0f / sqrtf((float)rk->D));
  p.kernel = rk->kernel;
  p.intervals = rk->iv.back();
  p.q = t[0], p.k = t[1], p.v = t[2], p.dout = t[3], p.o = t[4], p.lse = lse;
  p.dq = t[5], p.dk = t[6], p.dv = t[7];
  cudaEvent_t e[2];
  CK(cudaEventCreate(&e[0]), "cudaEventCreate");
  CK(cudaEventCreate(&e[1]), "cudaEventCreate");
  std::vector<double> v[2];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* timed: warm-up passes for warmup_ms (at least one), then iters timed ones */
  for (int it = 0, warm = timed; it < (timed ? o->iters : 1);) {
    for (int k = 0; k < (o->backward ? 2 : 1); k++) {
      rk->gate_on = timed && !warm; /* the timed passes (every kernel loaded: lazy loading) */
      TRY(gate_close(rk, rk->cs, err));
      fm_status st = one_pass(rk, &p, k, e, err);
      gate_open(rk);
      TRY(st);
      CK(cudaEventSynchronize(e[1]), "cudaEventSynchronize (one GPU)");
      if (timed && !warm) v[k].push_back(ev_ms(rk, e[0], e[1]));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!warm) it++;
    warm = warm && (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6 < o->warmup_ms;
  }
  cudaEventDestroy(e[0]);
  cudaEventDestroy(e[1]);
  ms[0] = median(v[0]);
  ms[1] = median(v[1]);
  const void *dev[4] = {t[4], o->backward ? t[5] : NULL, o->backward ? t[6] : NULL, o->backward ? t[7] : NULL};
  if (h) TRY(download(rk, dev, lse, rk->S, h, err));
  run_free(rk);
  return FM_OK;
}

/* ------------------------------------------------------------ a rank's process */

/* What a child writes for the parent (then nevents events). */
struct rank_file {
  int32_t status;
  char msg[512];
  int32_t kernel;
  double baseline[2];
  fm_cp_gpu_rank rank;
};

static fm_status rank_body(rank_run *rk, const ncclUniqueId *id, rank_file *f, std::vector<fm_cp_gpu_event> *ev,
                           fm_err *err) {
  const fm_cp_gpu_opts *o = rk->o;
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
  if (ndev <= rk->rank)
    return fm_fail(err, FM_EUNSUPPORTED, "rank %d: only %d CUDA devices, %d ranks need %d", rk->rank, ndev,
                   rk->P, rk->P);
  CK(cudaSetDevice(rk->rank), "cudaSetDevice");
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, rk->rank), "cudaGetDeviceProperties");
  snprintf(f->rank.device, sizeof f->rank.device, "%s (device %d)", prop.name, rk->rank);
  TRY(fm_attn_device_kernel(o->kernel, &rk->kernel, err));
  f->kernel = (int32_t)rk->kernel;
  CK(cudaStreamCreateWithFlags(&rk->cs, cudaStreamNonBlocking), "cudaStreamCreate");
  CK(cudaStreamCreateWithFlags(&rk->xs, cudaStreamNonBlocking), "cudaStreamCreate");
  const char *g = getenv("FM_CP_GATE"); /* 0: no gate (the A/B of DESIGN's enqueue gap) */
  if (!(g && !strcmp(g, "0"))) {
    CK(cudaHostAlloc((void **)&rk->gate_h, 2 * sizeof(unsigned), cudaHostAllocMapped), "cudaHostAlloc (gate)");
    rk->gate_h[0] = rk->gate_h[1] = 0;
    CK(cudaHostGetDevicePointer((void **)&rk->gate_d, rk->gate_h, 0), "cudaHostGetDevicePointer (gate)");
  }
  NK(nccl.CommInitRank(&rk->comm, rk->P, *id, rk->rank), "ncclCommInitRank");
  TRY(run_setup(rk, err));
  TRY(measure(rk, &f->rank, ev, err));
  host_out cp, one;
  if (o->check) {
    const void *dev[4] = {rk->o_, o->backward ? rk->dq : NULL, o->backward ? rk->dk : NULL, o->backward ? rk->dv : NULL};
    TRY(download(rk, dev, rk->lse, rk->R, &cp, err));
  }
  run_free(rk);
  NK(nccl.CommDestroy(rk->comm), "ncclCommDestroy");
  rk->comm = NULL;
  f->baseline[0] = f->baseline[1] = NAN;
  if (o->baseline && rk->rank == 0) TRY(whole_run(rk, 1, f->baseline, o->check ? &one : NULL, err));
  else if (o->check) TRY(whole_run(rk, 0, f->baseline, &one, err));
  if (o->check) compare_all(&cp, &one, o->backward, &f->rank);
  if (rk->gate_h && __atomic_load_n(&rk->gate_h[1], __ATOMIC_ACQUIRE))
    fprintf(stderr, "fmsim cp-run: rank %d: the pass gate gave up %u times (the host took over 2 s to enqueue "
            "a pass); those passes' times include the enqueue\n", rk->rank, rk->gate_h[1]);
  return FM_OK;
}

/* Child r: read the id, run, write the file; exit 0, or 1 after aborting NCCL. */
static void rank_main(const fm_cp_gpu_opts *o, int32_t r, int fd, const char *path) {
  rank_run *rk = new rank_run();
  rk->o = o;
  rk->rank = r;
  rk->P = o->sched->ranks;
  rk->rs = &o->sched->rank[r];
  rk->R = rk->rs->rows;
  rk->S = o->sched->seqlen;
  rk->B = o->batch, rk->H = o->heads, rk->D = o->head_dim;
  rk->HD = (int64_t)o->heads * o->head_dim;
  rank_file f;
  memset(&f, 0, sizeof f);
  std::vector<fm_cp_gpu_event> ev;
  ncclUniqueId id;
  fm_err err = {""};
  size_t got = 0;
  while (got < sizeof id) {
    ssize_t k = read(fd, (char *)&id + got, sizeof id - got);
    if (k <= 0 && errno == EINTR) continue;
    if (k <= 0) _exit(3); /* the parent is gone */
    got += (size_t)k;
  }
  close(fd);
  fm_status st = rank_body(rk, &id, &f, &ev, &err);
  if (st != FM_OK && rk->comm) nccl.CommAbort(rk->comm);
  f.status = (int32_t)st;
  snprintf(f.msg, sizeof f.msg, "%s", st == FM_OK ? "" : err.msg);
  f.rank.nevents = (int32_t)ev.size();
  f.rank.events = NULL;
  FILE *out = fopen(path, "wb");
  int ok = out && fwrite(&f, sizeof f, 1, out) == 1 &&
           (ev.empty() || fwrite(ev.data(), sizeof ev[0], ev.size(), out) == ev.size());
  ok = out && !fclose(out) && ok;
  _exit(st == FM_OK && ok ? 0 : 1);
}

/* ------------------------------------------------------------ the processes */

/* Waits for the P children; when one fails (or the time is up) kills the
 * rest. Returns the rank that failed first (-1: none) in *failed. */
static void wait_children(const std::vector<pid_t> &pid, double timeout_s, int32_t *failed, int *timed_out) {
  size_t left = pid.size();
  std::vector<char> done(pid.size(), 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  *failed = -1;
  *timed_out = 0;
  while (left) {
    int status;
    pid_t w = waitpid(-1, &status, WNOHANG);
    if (w > 0) {
      for (size_t r = 0; r < pid.size(); r++)
        if (pid[r] == w && !done[r]) {
          done[r] = 1;
          left--;
          int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
          if (!ok && *failed < 0) *failed = (int32_t)r;
        }
      continue;
    }
    if (w < 0 && errno != EINTR) break;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double el = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (*failed >= 0 || (timeout_s > 0 && el > timeout_s)) {
      *timed_out = *failed < 0;
      for (size_t r = 0; r < pid.size(); r++)
        if (!done[r]) kill(pid[r], SIGKILL);
    }
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
}

/* Reads rank r's file into res; its status and message into st, msg. */
static int read_rank(const char *path, int32_t r, fm_cp_gpu_result *res, fm_status *st, char *msg, size_t cap) {
  FILE *f = fopen(path, "rb");
  rank_file h;
  int ok = f && fread(&h, sizeof h, 1, f) == 1;
  if (ok) {
    *st = (fm_status)h.status;
    snprintf(msg, cap, "%s", h.msg);
    res->rank[r] = h.rank;
    res->rank[r].events = NULL;
    if (r == 0) {
      res->kernel = (fm_kernel_id)h.kernel;
      res->baseline_ms[0] = h.baseline[0];
      res->baseline_ms[1] = h.baseline[1];
    }
    if (h.rank.nevents > 0 && h.rank.nevents < 1000000) {
      res->rank[r].events = (fm_cp_gpu_event *)calloc((size_t)h.rank.nevents, sizeof(fm_cp_gpu_event));
      ok = res->rank[r].events &&
           fread(res->rank[r].events, sizeof(fm_cp_gpu_event), (size_t)h.rank.nevents, f) == (size_t)h.rank.nevents;
    }
    if (!ok) res->rank[r].nevents = 0;
  }
  if (f) fclose(f);
  return ok;
}

/* Forks the children (each blocks on its pipe), then makes the NCCL id and
 * hands it out. *pid receives the children started. */
static fm_status start_children(const fm_cp_gpu_opts *o, const char *dir, std::vector<pid_t> *pid, fm_err *err) {
  const int32_t P = o->sched->ranks;
  std::vector<int> wfd;
  fflush(NULL);
  for (int32_t r = 0; r < P; r++) {
    int fd[2];
    if (pipe(fd)) return fm_fail(err, FM_EIO, "pipe: %s", strerror(errno));
    pid_t c = fork();
    if (c < 0) {
      close(fd[0]), close(fd[1]);
      for (int w : wfd) close(w);
      return fm_fail(err, FM_EIO, "fork (rank %d): %s", r, strerror(errno));
    }
    if (c == 0) {
      close(fd[1]);
      for (int w : wfd) close(w);
      char path[4200];
      snprintf(path, sizeof path, "%s/rank%d", dir, r);
      rank_main(o, r, fd[0], path);
    }
    close(fd[0]);
    wfd.push_back(fd[1]);
    pid->push_back(c);
  }
  ncclUniqueId id;
  ncclResult_t nr = nccl.GetUniqueId(&id);
  fm_status st = nr == ncclSuccess ? FM_OK : fm_fail(err, FM_EIO, "ncclGetUniqueId: %s", nccl.GetErrorString(nr));
  for (int w : wfd) {
    if (st == FM_OK && write(w, &id, sizeof id) != (ssize_t)sizeof id)
      st = fm_fail(err, FM_EIO, "writing the NCCL id to a rank: %s", strerror(errno));
    close(w); /* a child that got nothing exits */
  }
  return st;
}

extern "C" fm_status fm_cp_gpu_run(const fm_cp_gpu_opts *o, fm_cp_gpu_result *res, fm_err *err) {
  memset(res, 0, sizeof *res);
  res->baseline_ms[0] = res->baseline_ms[1] = NAN;
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
  TRY(nccl_load(err));
  const int32_t P = o->sched->ranks;
  res->ranks = P;
  res->rank = (fm_cp_gpu_rank *)calloc((size_t)P, sizeof *res->rank);
  if (!res->rank) return fm_fail(err, FM_ENOMEM, "cannot allocate the results of %d ranks", P);
  char tmpl[] = "/tmp/fmsim-cp-run.XXXXXX";
  int slot = -1;
  char *dir = fm_mkdtemp_registered(tmpl, &slot);
  if (!dir) return fm_fail(err, FM_EIO, "cannot create a temporary folder: %s", strerror(errno));
  std::vector<pid_t> pid;
  fm_status st = start_children(o, dir, &pid, err);
  int32_t failed;
  int timed_out;
  wait_children(pid, st == FM_OK ? o->timeout_s : 1e-9, &failed, &timed_out);
  for (int32_t r = 0; r < P; r++) { /* the first failure's message; every file removed */
    char path[4200], msg[512] = "";
    snprintf(path, sizeof path, "%s/rank%d", dir, r);
    fm_status rs = FM_EIO;
    int ok = st == FM_OK && read_rank(path, r, res, &rs, msg, sizeof msg);
    if (st == FM_OK && ok && rs != FM_OK) st = fm_fail(err, rs, "%s", msg);
    else if (st == FM_OK && !ok && (failed == r || failed < 0))
      st = fm_fail(err, FM_EIO, "rank %d %s without a result", r, timed_out ? "timed out" : "ended");
    unlink(path);
  }
  if (st == FM_OK && failed >= 0) st = fm_fail(err, FM_EIO, "rank %d failed", failed);
  rmdir(dir);
  fm_cleanup_forget(slot);
  if (st != FM_OK) return st;
  res->checked = o->check;
  res->check_ok = 1;
  for (int32_t r = 0; r < P; r++) {
    for (int k = 0; k < FM_CP_NPASSES; k++)
      if (res->rank[r].pass[k].wall_ms > res->step_ms[k]) res->step_ms[k] = res->rank[r].pass[k].wall_ms;
    for (int q = 0; q < 5; q++) res->check_ok &= res->rank[r].check_bad[q] == 0;
  }
  return FM_OK;
}

extern "C" void fm_cp_gpu_result_free(fm_cp_gpu_result *r) {
  if (!r || !r->rank) return;
  for (int32_t k = 0; k < r->ranks; k++) free(r->rank[k].events);
  free(r->rank);
  r->rank = NULL;
}
