/* fm_cp_model.c — the exchange model of cp-plan (core/fm_cp_plan.h,
 * fm_cp_model_ring, fm_cp_model_allgather): what cp-run's GPU executor
 * (kernels/fm_cp_gpu.cu) does with its two streams per rank and its NCCL
 * groups, replayed on the host in the order the executor posts them. The
 * recurrences are written out in docs/DESIGN.md, "The exchange model". */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_cp_plan.h"

/* Microseconds of one transfer: bytes over the link plus every message's latency. */
static double xfer_us(const fm_cp_model *m, double bytes, int32_t msgs) {
  return bytes > 0 ? bytes / (m->link_gbs * 1e3) + msgs * m->link_us : 0;
}

typedef struct ring_sim {
  const fm_cp_model *m;
  int pass;
  double *comp_end, *kv_end, *rel_end; /* (sources): a step's compute end, its K/V's
                                          arrival, its partial buffer free again */
  double *comp_start;                  /* (sources): a step's compute start */
  double *comm, *ready, *iend;         /* (P): the comm stream's last end; this group's */
  int64_t *at;                         /* (P): the source of this group's step, -1 none */
  int32_t *done;                       /* (P): compute steps replayed */
  int32_t *busy;                       /* (P): this group moves something of the rank */
  /* NCCL residences (the comm stream's groups, [posted, last transfer done)), per
   * rank at most res_cap: the ones this replay records (res, nres) and the
   * previous replay's that stretch its steps (old, nold) */
  double *res, *old;                   /* (P, res_cap, 2) */
  int32_t *nres, *nold, res_cap;
} ring_sim;

/* When a step of `us` microseconds of the whole GPU's time, started at t0,
 * ends on a rank whose NCCL kernels hold the fraction f of its SMs during the
 * intervals iv (n, disjoint, in time order): it progresses at 1 - f inside
 * them, at 1 outside. */
double fm_cp_stretch(double t0, double us, double f, const double *iv, int32_t n) {
  double t = t0, left = us;
  for (int32_t k = 0; k < n && f > 0 && left > 0; k++) {
    double a = iv[2 * k], b = iv[2 * k + 1];
    if (b <= t) continue;
    if (a > t) {
      if (left <= a - t) return t + left;
      left -= a - t;
      t = a;
    }
    double got = (1 - f) * (b - t);
    if (left <= got) return t + left / (1 - f);
    left -= got;
    t = b;
  }
  return t + left;
}

double fm_cp_contended_rate(int64_t items, int32_t slots, double f) {
  if (!(f > 0) || items <= 0 || slots <= 0) return 1;
  int64_t left = (int64_t)floor((1 - f) * slots);
  if (left < 1) left = 1;
  return (double)((items + slots - 1) / slots) / (double)((items + left - 1) / left);
}

/* Replays rank r's compute steps up to its step i (each after the previous
 * one, its K/V group and, backward, the release of step i - 2's partials). */
static void ring_compute(ring_sim *x, int32_t r, int64_t i) {
  const int64_t s0 = x->m->start[r];
  for (; x->done[r] <= i; x->done[r]++) {
    int64_t k = s0 + x->done[r];
    double t = x->done[r] ? x->comp_end[k - 1] : 0;
    if (x->done[r]) t = fmax(t, x->kv_end[k]);
    if (x->pass == FM_CP_BWD && x->done[r] >= 2) t = fmax(t, x->rel_end[k - 2]);
    x->comp_start[k] = t;
    const fm_cp_model_src *src = &x->m->src[k];
    double f = x->m->comm_sm_frac > 0 && src->rate[x->pass] > 0 ? 1 - src->rate[x->pass] : x->m->comm_sm_frac;
    x->comp_end[k] = fm_cp_stretch(t, src->us[x->pass], f, x->old + (size_t)r * x->res_cap * 2, x->nold[r]);
  }
}

/* The source of rank r at global step s (its index in src), -1 none: a
 * binary search of its sources (by s). */
static int64_t ring_at(const fm_cp_model *m, int32_t r, int32_t s) {
  int64_t lo = m->start[r], hi = m->start[r + 1];
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (m->src[mid].s < s) lo = mid + 1;
    else hi = mid;
  }
  return lo < m->start[r + 1] && m->src[lo].s == s ? lo : -1;
}

/* One group of global step s on every rank: K/V (back = 0: r receives from
 * r - s, waits for its compute of step i - 2) or the partials (back = 1: r
 * sends the partials of step s to r - s, after computing that step). */
static void ring_group(ring_sim *x, int32_t s, int back) {
  const fm_cp_model *m = x->m;
  const int32_t P = m->ranks;
  for (int32_t r = 0; r < P; r++) {
    int64_t k = x->at[r] = ring_at(m, r, s), i = k >= 0 ? k - m->start[r] : -1;
    int64_t dep = back ? i : i - 2;
    x->ready[r] = x->comm[r];
    if (k >= 0 && dep >= 0) {
      ring_compute(x, r, dep);
      x->ready[r] = fmax(x->ready[r], x->comp_end[m->start[r] + dep]);
    }
    x->iend[r] = x->ready[r];
    x->busy[r] = 0;
  }
  for (int32_t r = 0; r < P; r++) {
    int64_t k = x->at[r];
    if (k < 0) continue;
    int32_t q = (r - s + P) % P;
    const fm_cp_model_src *c = &m->src[k];
    double t = fmax(x->ready[r], x->ready[q]) + xfer_us(m, c->bytes, c->msgs[FM_CP_RING][back]);
    x->iend[r] = fmax(x->iend[r], t);
    x->iend[q] = fmax(x->iend[q], t);
    x->busy[r] = x->busy[q] = 1;
  }
  for (int32_t r = 0; r < P; r++) {
    x->comm[r] = x->iend[r];
    if (x->busy[r] && x->nres[r] < x->res_cap && x->iend[r] > x->ready[r]) {
      double *iv = x->res + ((size_t)r * x->res_cap + (size_t)x->nres[r]++) * 2;
      iv[0] = x->ready[r], iv[1] = x->iend[r];
    }
  }
  /* the partials back: r - s adds what r sent it after the group (r - s gets
   * them from r alone in this group), and only then releases its own buffer */
  for (int32_t r = 0; back && r < P; r++)
    if (x->at[r] >= 0) x->comm[(r - s + P) % P] += m->src[x->at[r]].back_us;
  for (int32_t r = 0; r < P; r++)
    if (x->at[r] >= 0) (back ? x->rel_end : x->kv_end)[x->at[r]] = x->comm[r];
}

/* The backward's own partials summed on the comm stream after step 0. */
static void ring_own(ring_sim *x) {
  for (int32_t r = 0; r < x->m->ranks; r++) {
    ring_compute(x, r, 0);
    int64_t k = x->m->start[r];
    x->comm[r] = fmax(x->comm[r], x->comp_end[k]) + (x->m->rank ? x->m->rank[r].own_us : 0);
    x->rel_end[k] = x->comm[r];
  }
}

/* What rank r does after both streams are done: its conversions. */
static double tail_us(const fm_cp_model *m, int32_t r, int exchange, int pass) {
  return m->rank ? m->rank[r].tail_us[exchange][pass] : 0;
}

static fm_status check_model(const fm_cp_model *m, fm_err *err) {
  for (int32_t r = 0; r < m->ranks; r++) {
    int64_t a = m->start[r], b = m->start[r + 1];
    int ok = b > a && m->src[a].s == 0;
    for (int64_t k = a + 1; ok && k < b; k++) ok = m->src[k].s > m->src[k - 1].s && m->src[k].s < m->ranks;
    if (!ok) return fm_fail(err, FM_EINVAL, "exchange model: rank %d's sources are not in ring order", r);
  }
  return FM_OK;
}

/* One replay of a pass (the executor's order of groups: docs/DESIGN.md,
 * "cp-run", "Order and deadlock"), its walls into wall; x's state zeroed
 * first, its NCCL residences recorded into res. */
static void ring_replay(ring_sim *x, double *wall) {
  const fm_cp_model *m = x->m;
  const int32_t P = m->ranks;
  const size_t n = (size_t)m->start[P];
  memset(x->comp_end, 0, sizeof *x->comp_end * n);
  memset(x->comp_start, 0, sizeof *x->comp_start * n);
  memset(x->kv_end, 0, sizeof *x->kv_end * n);
  memset(x->rel_end, 0, sizeof *x->rel_end * n);
  memset(x->comm, 0, sizeof *x->comm * (size_t)P);
  memset(x->done, 0, sizeof *x->done * (size_t)P);
  memset(x->nres, 0, sizeof *x->nres * (size_t)P);
  if (x->pass == FM_CP_FWD)
    for (int32_t s = 1; s < P; s++) ring_group(x, s, 0);
  if (x->pass == FM_CP_BWD) {
    if (P > 1) ring_group(x, 1, 0);
    ring_own(x);
    for (int32_t s = 1; s < P; s++) {
      if (s + 1 < P) ring_group(x, s + 1, 0);
      ring_group(x, s, 1);
    }
  }
  for (int32_t r = 0; r < P; r++) {
    int64_t last = m->start[r + 1] - 1;
    ring_compute(x, r, last - m->start[r]);
    wall[r] = fmax(x->comp_end[last], x->comm[r]) + tail_us(m, r, FM_CP_RING, x->pass);
  }
}

fm_status fm_cp_model_ring(const fm_cp_model *m, int pass, double *wall, fm_err *err) {
  return fm_cp_model_ring_steps(m, pass, wall, NULL, err);
}

/* Replays until no wall moves by more than RING_TOL_US (at most RING_MAX_REPLAYS):
 * each replay's steps stretched by the previous one's NCCL residences. */
#define RING_MAX_REPLAYS 16
#define RING_TOL_US 1e-3

fm_status fm_cp_model_ring_steps(const fm_cp_model *m, int pass, double *wall, double *step_us,
                                 fm_err *err) {
  fm_status st = check_model(m, err);
  if (st != FM_OK) return st;
  if (m->comm_sm_frac < 0 || m->comm_sm_frac >= 1)
    return fm_fail(err, FM_EINVAL, "exchange model: the SMs NCCL holds (%g) must be in [0, 1)", m->comm_sm_frac);
  const int32_t P = m->ranks;
  const int64_t n = m->start[P];
  ring_sim x = {.m = m, .pass = pass, .res_cap = 2 * P};
  size_t nres = (size_t)P * (size_t)x.res_cap * 2;
  x.comp_end = calloc((size_t)n, sizeof *x.comp_end);
  x.comp_start = calloc((size_t)n, sizeof *x.comp_start);
  x.kv_end = calloc((size_t)n, sizeof *x.kv_end);
  x.rel_end = calloc((size_t)n, sizeof *x.rel_end);
  x.comm = calloc((size_t)P, sizeof *x.comm);
  x.ready = calloc((size_t)P, sizeof *x.ready);
  x.iend = calloc((size_t)P, sizeof *x.iend);
  x.at = calloc((size_t)P, sizeof *x.at);
  x.done = calloc((size_t)P, sizeof *x.done);
  x.busy = calloc((size_t)P, sizeof *x.busy);
  x.res = calloc(nres, sizeof *x.res);
  x.old = calloc(nres, sizeof *x.old);
  x.nres = calloc((size_t)P, sizeof *x.nres);
  x.nold = calloc((size_t)P, sizeof *x.nold);
  double *prev = calloc((size_t)P, sizeof *prev);
  if (!x.comp_end || !x.comp_start || !x.kv_end || !x.rel_end || !x.comm || !x.ready || !x.iend ||
      !x.at || !x.done || !x.busy || !x.res || !x.old || !x.nres || !x.nold || !prev)
    st = fm_fail(err, FM_ENOMEM, "cannot allocate the exchange model of %d ranks", P);
  for (int it = 0; st == FM_OK && it < RING_MAX_REPLAYS; it++) {
    ring_replay(&x, wall);
    double moved = 0;
    for (int32_t r = 0; r < P; r++) moved = fmax(moved, fabs(wall[r] - prev[r]));
    if (m->comm_sm_frac == 0 || (it > 0 && moved <= RING_TOL_US)) break;
    memcpy(prev, wall, sizeof *prev * (size_t)P);
    double *t = x.old; /* the residences just recorded stretch the next replay */
    x.old = x.res, x.res = t;
    int32_t *c = x.nold;
    x.nold = x.nres, x.nres = c;
  }
  for (int64_t k = 0; st == FM_OK && step_us && k < n; k++) step_us[k] = x.comp_end[k] - x.comp_start[k];
  free(x.comp_end), free(x.comp_start), free(x.kv_end), free(x.rel_end), free(x.comm);
  free(x.ready), free(x.iend), free(x.at), free(x.done), free(x.busy);
  free(x.res), free(x.old), free(x.nres), free(x.nold), free(prev);
  return st;
}

/* Bytes each rank receives and sends in one all-gather group; backward, the
 * time it takes to add the partials it gets back. */
typedef struct ag_load {
  double in, out;
  double sum_us;
} ag_load;

fm_status fm_cp_model_allgather(const fm_cp_model *m, int pass, const double *compute_us,
                                double *wall, fm_err *err) {
  fm_status st = check_model(m, err);
  if (st != FM_OK) return st;
  const int32_t P = m->ranks, dir = pass == FM_CP_BWD;
  ag_load *ld = calloc((size_t)P, sizeof *ld);
  if (!ld) return fm_fail(err, FM_ENOMEM, "cannot allocate the exchange model of %d ranks", P);
  for (int32_t r = 0; r < P; r++)
    for (int64_t k = m->start[r] + 1; k < m->start[r + 1]; k++) {
      int32_t q = (r - m->src[k].s + P) % P;
      ag_load *to = &ld[dir ? q : r], *from = &ld[dir ? r : q]; /* backward: r sends to q */
      to->in += m->src[k].bytes;
      from->out += m->src[k].bytes;
      if (dir) to->sum_us += m->src[k].back_us;
    }
  /* forward: everyone posts at the barrier, the launch follows the group;
   * backward: the launch first, each transfer once both ends are done */
  for (int32_t r = 0; r < P; r++) wall[r] = dir ? compute_us[r] : 0;
  for (int32_t r = 0; r < P; r++)
    for (int64_t k = m->start[r] + 1; k < m->start[r + 1]; k++) {
      int32_t q = (r - m->src[k].s + P) % P, a = dir ? r : q, b = dir ? q : r; /* a sends to b */
      /* the pairs of a group move side by side (NCCL's P2P connections, one per peer): this
         one at the pair's rate, unless its two ends' loads through their GPUs take longer */
      const fm_cp_model_src *x = &m->src[k];
      double pair = x->bytes, both = fmax(ld[a].out, ld[b].in);
      double move = m->gpu_gbs > 0 ? fmax(pair / m->link_gbs, both / m->gpu_gbs) : pair / m->link_gbs;
      double t = (dir ? fmax(compute_us[a], compute_us[b]) : 0) +
                 (pair > 0 ? move / 1e3 + x->msgs[FM_CP_ALLGATHER][dir] * m->link_us : 0);
      wall[a] = fmax(wall[a], t);
      wall[b] = fmax(wall[b], t);
    }
  /* forward: the launch after the group; backward: the sums after the group */
  for (int32_t r = 0; r < P; r++)
    wall[r] += (dir ? (m->rank ? m->rank[r].copy_us : 0) + ld[r].sum_us : compute_us[r]) +
               tail_us(m, r, FM_CP_ALLGATHER, pass);
  free(ld);
  return FM_OK;
}
