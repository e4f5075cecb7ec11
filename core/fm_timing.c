/* fm_timing.c — the timing model (fm_timing.h): the work of a mask, the
 * schedule of its items over the SMs, the memory floor. Profiles are read and
 * written in fm_timing_profile.c, fitted in fm_timing_fit.c. */
#include "fm_timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_limits.h"
#include "fm_words.h"

/* ------------------------------------------------------------ kernels */

/* How kernel id schedules the items of one pass: the schedule facts of its
 * registry row (fm_kernel_desc.fwd_sched, bwd_sched; core/fm_kernels.c), as
 * the timing model's fm_sched. */
fm_status fm_timing_kernel_sched(fm_kernel_id id, fm_pass pass, fm_sched *kind,
                                 int32_t *ctas_per_sm, fm_err *err) {
  const fm_kernel_desc *d = fm_kernel_get(id);
  if (!d) return fm_fail(err, FM_EINVAL, "no schedule for kernel id %d", (int)id);
  if (pass != FM_PASS_FWD && pass != FM_PASS_BWD)
    return fm_fail(err, FM_EINVAL, "a schedule belongs to one pass, fwd or bwd");
  const fm_kernel_sched *ks = pass == FM_PASS_BWD ? &d->bwd_sched : &d->fwd_sched;
  fm_sched k;
  switch (ks->kind) {
  case FM_KSCHED_GRID: k = FM_SCHED_GRID; break;
  case FM_KSCHED_PERSISTENT_HEAD: k = FM_SCHED_PERSISTENT_HEAD; break;
  case FM_KSCHED_PERSISTENT_INDEX: k = FM_SCHED_PERSISTENT_INDEX; break;
  default: k = FM_SCHED_GRID; break;
  }
  if (ks->kind == FM_KSCHED_NONE || ks->ctas_per_sm < 1)
    return fm_fail(err, FM_EUNSUPPORTED, "kernel %s has no %s pass to schedule", d->name, fm_pass_name(pass));
  if (kind) *kind = k;
  if (ctas_per_sm) *ctas_per_sm = ks->ctas_per_sm;
  return FM_OK;
}

/* ------------------------------------------------------------ work */

fm_status fm_timing_work_init(fm_timing_work *w, const fm_colmask *m, int32_t br, int32_t bc,
                              fm_err *err) {
  memset(w, 0, sizeof *w);
  fm_status st = fm_tile_size_check(br, bc, err);
  if (st != FM_OK) return st;
  w->sq = fm_colmask_sq(m);
  w->sk = fm_colmask_sk(m);
  w->br = br;
  w->bc = bc;
  w->tr = (int32_t)(((int64_t)w->sq + br - 1) / br);
  w->tc = (int32_t)(((int64_t)w->sk + bc - 1) / bc);
  w->nb = fm_colmask_nb(m);
  w->nh = fm_colmask_nh(m);
  w->causal = fm_colmask_causal(m);
  size_t ns = (size_t)w->nb * (size_t)w->nh;
  char what[96];
  snprintf(what, sizeof what, "the work of %zu sets of %d x %d tiles", ns, w->tr, w->tc);
  st = fm_mem_check(fm_mem_mul((int64_t)ns, fm_mem_add(fm_mem_mul(w->tr, (int64_t)sizeof *w->rows),
                                                       fm_mem_mul(w->tc, (int64_t)sizeof *w->cols))),
                    what, err);
  if (st != FM_OK) return st;
  w->rows = malloc(sizeof *w->rows * ns * (size_t)w->tr);
  w->cols = malloc(sizeof *w->cols * ns * (size_t)w->tc);
  w->kv_cols = calloc(ns, sizeof *w->kv_cols);
  if (!w->rows || !w->cols || !w->kv_cols) {
    fm_timing_work_free(w);
    return fm_fail(err, FM_ENOMEM, "cannot allocate the work of %zu sets of %d x %d tiles", ns,
                   w->tr, w->tc);
  }
  st = fm_tile_count(m, br, bc, 0, &w->counts, w->rows, w->cols, err);
  if (st != FM_OK) {
    fm_timing_work_free(w);
    return st;
  }
  for (size_t s = 0; s < ns; s++)
    for (int32_t ct = 0; ct < w->tc; ct++)
      if (w->cols[s * (size_t)w->tc + (size_t)ct].visited)
        w->kv_cols[s] += w->sk - (int64_t)ct * bc < bc ? w->sk - (int64_t)ct * bc : bc;
  return FM_OK;
}

void fm_timing_work_free(fm_timing_work *w) {
  if (!w) return;
  free(w->rows);
  free(w->cols);
  free(w->kv_cols);
  memset(w, 0, sizeof *w);
}

/* ------------------------------------------------------------ schedule */

enum { F_LAUNCH = 0, F_ITEM, F_CONSIDERED, F_UNMASKED, F_PARTIAL, F_PARTIAL_CAUSAL };

typedef struct slot {
  double end;                    /* when its current CTA ends, us (every slot busy) */
  double feat[FM_TIMING_NFEAT];  /* work of the CTAs it ran */
} slot;

typedef struct sim {
  const double *coef;   /* FM_TIMING_NFEAT coefficients, what-if scaled */
  slot *slots;
  /* which slot frees first: a tournament tree over P >= nslots leaves;
     node n < P holds the slot with the smallest end in its subtree (the
     lower index on ties), leaf P + q is slot q; ends beyond nslots are +inf */
  double *end;          /* (P,) */
  int32_t *tree;        /* (P,) */
  int64_t nslots, pushed, P;
  double total;         /* summed item cost */
} sim;

static int slot_before(const sim *s, int32_t a, int32_t b) {
  return s->end[a] < s->end[b] || (s->end[a] == s->end[b] && a < b);
}

static int32_t tree_winner(const sim *s, int64_t n) {
  return n >= s->P ? (int32_t)(n - s->P) : s->tree[n];
}

/* The winner of node n's match: a's subtree holds the lower indices, so a
 * wins ties. */
static void tree_play(sim *s, int64_t n) {
  int32_t a = tree_winner(s, 2 * n), b = tree_winner(s, 2 * n + 1);
  s->tree[n] = s->end[b] < s->end[a] ? b : a;
}

/* Replays the matches on the path from slot q's leaf to the root. */
static void tree_update(sim *s, int32_t q) {
  for (int64_t n = (q + s->P) >> 1; n >= 1; n >>= 1) tree_play(s, n);
}

/* One item, in dispatch order: the first wave fills slot i (slot i is on SM
 * i % SMs, so the first wave spreads over the SMs), later items go to the
 * slot that frees first. */
static void sim_push(sim *s, const double f[FM_TIMING_NFEAT]) {
  double cost = 0;
  for (int k = F_ITEM; k < FM_TIMING_NFEAT; k++) cost += s->coef[k] * f[k];
  s->total += cost;
  int first_wave = s->pushed < s->nslots;
  int32_t q = first_wave ? (int32_t)s->pushed : s->tree[1];
  slot *sl = &s->slots[q];
  sl->end += cost;
  s->end[q] = sl->end;
  for (int k = 0; k < FM_TIMING_NFEAT; k++) sl->feat[k] += f[k];
  s->pushed++;
  if (!first_wave) {
    tree_update(s, q);
  } else if (s->pushed == s->nslots) { /* the first wave is placed: play every match once */
    for (int64_t n = s->P - 1; n >= 1; n--) tree_play(s, n);
  }
}

/* The drain: once no item is left, the CTAs of an SM end one by one and the
 * rest speed up; with k of c CTAs left each runs at
 * r_k = 1 + (solo - 1) (c - k) / (c - 1). The makespan is the last SM's end;
 * crit receives its work, weighted as its end depends on each slot. */
static double sim_finish(const sim *s, int32_t sms, int32_t ctas, double solo, double *crit) {
  double best = 0;
  memset(crit, 0, sizeof(double) * FM_TIMING_NFEAT);
  for (int32_t sm = 0; sm < sms; sm++) {
    int32_t q[32];
    int32_t n = 0;
    for (int32_t k = 0; k < ctas; k++) { /* its slots by end, ascending */
      int32_t id = k * sms + sm, a = n++;
      for (; a > 0 && slot_before(s, id, q[a - 1]); a--) q[a] = q[a - 1];
      q[a] = id;
    }
    double t = 0, prev = 0, w[32];
    for (int32_t m = 0; m < n; m++) {
      int32_t left = n - m; /* CTAs still running during [e_{m-1}, e_m) */
      double r = ctas > 1 ? 1 + (solo - 1) * (double)(ctas - left) / (double)(ctas - 1) : 1;
      t += (s->slots[q[m]].end - prev) / r;
      /* d t / d e_m: +1/r now, -1/r' in the next step */
      w[m] = 1 / r;
      if (m > 0) w[m - 1] -= 1 / r;
      prev = s->slots[q[m]].end;
    }
    if (t > best || sm == 0) {
      best = t;
      memset(crit, 0, sizeof(double) * FM_TIMING_NFEAT);
      for (int32_t m = 0; m < n; m++)
        for (int k = 0; k < FM_TIMING_NFEAT; k++) crit[k] += w[m] * s->slots[q[m]].feat[k];
    }
  }
  return best;
}

/* ------------------------------------------------------------ items */

/* The work of one item of set `set`, index i (row tile, or key tile for the
 * backward), as features. */
static void item_features(const fm_timing_work *w, const fm_timing_problem *pb, int32_t set,
                          int32_t i, double f[FM_TIMING_NFEAT]) {
  int bwd = pb->pass == FM_PASS_BWD;
  int32_t considered = bwd ? w->tr : w->tc;
  fm_work k = bwd ? w->cols[(int64_t)set * w->tc + i] : w->rows[(int64_t)set * w->tr + i];
  int64_t visited = k.visited, partial = k.partial;
  if (pb->full_mask) {
    visited = considered;
    partial = 0;
  } else if (pb->variant == FM_VARIANT_NOSKIP) {
    partial += considered - visited;
    visited = considered;
  }
  memset(f, 0, sizeof(double) * FM_TIMING_NFEAT);
  /* an item with no visited tile takes both kernels' F_EMPTY path (kernels/fm_sm90_fwd.cuh,
     fm_sm90_bwd.cuh: zeros stored, no load, no pipeline): its classification only, not
     item_us, which the fit learns from items that compute (a rank's backward in `fmsim
     cp-plan` has mostly such items: docs/DESIGN.md, "The exchange model") */
  f[F_ITEM] = visited > 0;
  f[F_CONSIDERED] = considered;
  f[F_UNMASKED] = (double)(visited - partial);
  f[w->causal && !pb->full_mask ? F_PARTIAL_CAUSAL : F_PARTIAL] = (double)partial;
}

static int32_t pair_set(const fm_timing_work *w, int64_t b, int64_t h) {
  return (int32_t)((w->nb == 1 ? 0 : b) * w->nh + (w->nh == 1 ? 0 : h));
}

/* Index order: (b, h) slowest, then the item; forward row tiles from the
 * last (sm80's reversed blockIdx.x), backward key tiles from the first. */
static void items_in_order(sim *s, const fm_timing_work *w, const fm_timing_problem *pb) {
  int bwd = pb->pass == FM_PASS_BWD;
  int32_t n = bwd ? w->tc : w->tr;
  double f[FM_TIMING_NFEAT];
  for (int64_t b = 0; b < pb->batch; b++)
    for (int64_t h = 0; h < pb->heads; h++)
      for (int32_t x = 0; x < n; x++) {
        item_features(w, pb, pair_set(w, b, h), bwd ? x : n - 1 - x, f);
        sim_push(s, f);
      }
}

/* Work-list order, as the sm90 kernel sorts its items (stable, from the
 * order b, h, row tiles from the last): by_head, heads in order and the
 * visited tiles of a head descending; else visited tiles descending over all
 * heads. A counting sort per set: O(items + sets * considered). */
static fm_status items_sorted(sim *s, const fm_timing_work *w, const fm_timing_problem *pb,
                              int by_head, fm_err *err) {
  int bwd = pb->pass == FM_PASS_BWD;
  int32_t n = bwd ? w->tc : w->tr, maxv = bwd ? w->tr : w->tc;
  int64_t ns = (int64_t)w->nb * w->nh;
  int64_t *start = calloc((size_t)(ns * (maxv + 2)), sizeof *start);
  int32_t *order = malloc(sizeof *order * (size_t)(ns * n));
  if (!start || !order) {
    free(start);
    free(order);
    return fm_fail(err, FM_ENOMEM, "cannot allocate the work list of %lld items", (long long)(ns * n));
  }
  double f[FM_TIMING_NFEAT];
  for (int64_t set = 0; set < ns; set++) { /* bucket v = maxv - visited, ties from the last index */
    int64_t *st = start + set * (maxv + 2);
    for (int32_t i = 0; i < n; i++) {
      item_features(w, pb, (int32_t)set, i, f);
      st[maxv - (int64_t)(f[F_UNMASKED] + f[F_PARTIAL] + f[F_PARTIAL_CAUSAL]) + 1]++;
    }
    for (int32_t v = 0; v <= maxv; v++) st[v + 1] += st[v];
    for (int32_t i = n - 1; i >= 0; i--) {
      item_features(w, pb, (int32_t)set, i, f);
      order[set * n + st[maxv - (int64_t)(f[F_UNMASKED] + f[F_PARTIAL] + f[F_PARTIAL_CAUSAL])]++] = i;
    }
    for (int32_t v = maxv; v >= 0; v--) st[v + 1] = st[v]; /* back to bucket starts */
    st[0] = 0;
  }
  int64_t pairs = pb->batch * pb->heads;
  for (int64_t outer = 0; outer < (by_head ? pairs : maxv + 1); outer++)
    for (int64_t inner = 0; inner < (by_head ? maxv + 1 : pairs); inner++) {
      int64_t bh = by_head ? outer : inner, v = by_head ? inner : outer;
      int32_t set = pair_set(w, bh / pb->heads, bh % pb->heads);
      const int64_t *st = start + (int64_t)set * (maxv + 2);
      for (int64_t q = st[v]; q < st[v + 1]; q++) {
        item_features(w, pb, set, order[(int64_t)set * n + q], f);
        sim_push(s, f);
      }
    }
  free(start);
  free(order);
  return FM_OK;
}

/* ------------------------------------------------------------ predict */

double fm_timing_clocked(const fm_timing_coef *c, fm_clock clock, double makespan_us) {
  if (!(c->throttle > 1)) return makespan_us;
  if (clock == FM_CLOCK_SUSTAINED) return c->throttle * makespan_us;
  if (!(makespan_us > c->boost_us)) return makespan_us;
  return c->boost_us + c->throttle * (makespan_us - c->boost_us);
}

double fm_timing_time_in(const fm_timing_coef *c, fm_clock clock, const fm_timing_result *r) {
  double clocked = fm_timing_clocked(c, clock, r->schedule_us);
  return r->launch_us + (r->floor_us > clocked ? r->floor_us : clocked);
}

static const char *const clock_names[] = {[FM_CLOCK_BURST] = "burst", [FM_CLOCK_SUSTAINED] = "sustained"};

const char *fm_clock_name(fm_clock c) {
  return (unsigned)c < 2u ? clock_names[c] : "?";
}

fm_status fm_clock_parse(const char *text, fm_clock *out, fm_err *err) {
  int c = fm_word_index(text, clock_names, 2);
  if (c >= 0) {
    *out = (fm_clock)c;
    return FM_OK;
  }
  return fm_fail(err, FM_EINVAL, "clock '%s': expected burst (a launch apart, the boost window) or "
                 "sustained (launches back to back)", text ? text : "");
}

static fm_status problem_check(const fm_timing_work *w, const fm_timing_problem *pb, fm_err *err) {
  if (pb->batch < 1 || pb->heads < 1 || pb->batch > 65535 || pb->heads > 65535)
    return fm_fail(err, FM_EINVAL, "batch and heads must be in 1..65535 (got %lld, %lld)",
                   (long long)pb->batch, (long long)pb->heads);
  if ((w->nb != 1 && w->nb != pb->batch) || (w->nh != 1 && w->nh != pb->heads))
    return fm_fail(err, FM_EINVAL,
                   "the mask has %d x %d vector sets; the problem has batch %lld and %lld heads "
                   "(sets must be 1 or match)", w->nb, w->nh, (long long)pb->batch,
                   (long long)pb->heads);
  if (pb->pass != FM_PASS_FWD && pb->pass != FM_PASS_BWD)
    return fm_fail(err, FM_EINVAL, "predict one pass at a time (fwd or bwd)");
  if (pb->variant == FM_VARIANT_DENSE)
    return fm_fail(err, FM_EUNSUPPORTED, "the timing model covers the skip and noskip variants, "
                   "not the dense-mask baseline");
  return FM_OK;
}

/* The memory floor's bytes (bf16 tensors): forward Q, O once, K/V of the
 * visited columns once, LSE, vectors and bounds; the backward adds dO, dQ and
 * dK, dV. */
static double floor_bytes(const fm_timing_work *w, const fm_timing_problem *pb) {
  double pairs = (double)pb->batch * (double)pb->heads, d = pb->head_dim, e = 2;
  double kv = 0;
  for (int64_t b = 0; b < pb->batch; b++)
    for (int64_t h = 0; h < pb->heads; h++)
      kv += pb->full_mask || pb->variant == FM_VARIANT_NOSKIP ? w->sk : w->kv_cols[pair_set(w, b, h)];
  double rows_side = 2 * pairs * w->sq * d * e, cols_side = 2 * kv * d * e;
  double ns = (double)w->nb * w->nh;
  double extra = pairs * w->sq * 4 + ns * (16.0 * w->sk + 32.0 * w->tc);
  return pb->pass == FM_PASS_BWD ? 2 * (rows_side + cols_side) + extra : rows_side + cols_side + extra;
}

static void tile_totals(const fm_timing_work *w, const fm_timing_problem *pb, fm_timing_result *r) {
  int64_t per_set = (int64_t)w->tr * w->tc, ns = (int64_t)w->nb * w->nh;
  int64_t mult = pb->batch * pb->heads / ns;
  r->tiles_total = per_set * pb->batch * pb->heads;
  int64_t masked = w->counts.minmax[FM_TILE_MASKED], partial = w->counts.minmax[FM_TILE_PARTIAL];
  if (pb->full_mask) masked = partial = 0;
  else if (pb->variant == FM_VARIANT_NOSKIP) partial += masked;
  r->tiles_visited = pb->full_mask || pb->variant == FM_VARIANT_NOSKIP ? r->tiles_total
                                                                        : (per_set * ns - masked) * mult;
  r->tiles_partial = partial * mult;
  r->rho = pb->full_mask ? 0 : w->counts.sparsity;
}

fm_status fm_timing_predict_coef(const fm_timing_coef *c, fm_kernel_id kernel, int32_t sms,
                                 double hbm_gbs, const fm_timing_work *w,
                                 const fm_timing_problem *pb, fm_timing_result *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  fm_sched kind;
  fm_status st = problem_check(w, pb, err);
  if (st == FM_OK) st = fm_timing_kernel_sched(kernel, pb->pass, &kind, NULL, err);
  if (st != FM_OK) return st;
  int32_t ctas = c->ctas_per_sm > 0 && c->ctas_per_sm <= 32 ? c->ctas_per_sm : 1;
  out->what_if = w->br != c->br || w->bc != c->bc;
  double area = (double)w->br * w->bc / ((double)c->br * c->bc), rows = (double)w->br / c->br;
  double coef[FM_TIMING_NFEAT] = {c->launch_us,   c->item_us * rows,  c->key_tile_us,
                                  c->unmasked_us * area, c->partial_us * area,
                                  c->partial_causal_us * area};
  sim s = {.coef = coef, .nslots = (int64_t)sms * ctas, .P = 2};
  while (s.P < s.nslots) s.P *= 2;
  s.slots = calloc((size_t)s.nslots, sizeof *s.slots);
  s.end = malloc(sizeof *s.end * (size_t)s.P);
  s.tree = calloc((size_t)s.P, sizeof *s.tree);
  if (!s.slots || !s.end || !s.tree) {
    free(s.slots);
    free(s.end);
    free(s.tree);
    return fm_fail(err, FM_ENOMEM, "cannot allocate %lld schedule slots", (long long)s.nslots);
  }
  for (int64_t q = 0; q < s.P; q++) s.end[q] = q < s.nslots ? 0 : INFINITY;
  if (kind == FM_SCHED_GRID || kind == FM_SCHED_PERSISTENT_INDEX) items_in_order(&s, w, pb);
  else st = items_sorted(&s, w, pb, kind == FM_SCHED_PERSISTENT_HEAD, err);
  if (st == FM_OK) {
    out->schedule_us = sim_finish(&s, sms, ctas, kind == FM_SCHED_GRID ? c->solo : 1, out->critical);
    out->critical[F_LAUNCH] = 1;
    out->items = s.pushed;
    out->slots = s.nslots;
    out->waves = (double)s.pushed / (double)s.nslots;
    out->busy = out->schedule_us > 0 ? s.total / ((double)s.nslots * out->schedule_us) : 0;
  }
  free(s.slots);
  free(s.end);
  free(s.tree);
  if (st != FM_OK) return st;
  out->launch_us = c->launch_us;
  out->throttle_us = fm_timing_clocked(c, pb->clock, out->schedule_us) - out->schedule_us;
  out->bytes = floor_bytes(w, pb);
  out->floor_us = hbm_gbs > 0 ? out->bytes / (hbm_gbs * 1e3) : 0;
  if (out->floor_us > out->schedule_us + out->throttle_us)
    memset(out->critical + 1, 0, sizeof(double) * (FM_TIMING_NFEAT - 1));
  out->time_us = fm_timing_time_in(c, pb->clock, out);
  out->br = w->br;
  out->bc = w->bc;
  tile_totals(w, pb, out);
  out->flops_paper = 4.0 * (double)pb->batch * (double)pb->heads * (double)w->sq * (double)w->sk *
                     pb->head_dim * (1 - out->rho) * (pb->pass == FM_PASS_BWD ? 2.5 : 1.0);
  out->tflops = out->time_us > 0 ? out->flops_paper / (out->time_us * 1e-6) / 1e12 : 0;
  return FM_OK;
}

fm_status fm_timing_predict(const fm_gpu_profile *prof, const fm_timing_work *w,
                            const fm_timing_problem *pb, fm_timing_result *out, fm_err *err) {
  const fm_timing_coef *c = fm_profile_coef(prof, pb->pass, pb->head_dim);
  if (!c) {
    memset(out, 0, sizeof *out);
    if (pb->pass == FM_PASS_BWD && prof->nbwd == 0)
      return fm_fail(err, FM_EUNSUPPORTED, "profile %s has no backward coefficients yet (no "
                     "backward kernel has been calibrated)", prof->name);
    return fm_fail(err, FM_EUNSUPPORTED, "profile %s has no %s coefficients for head dim %d",
                   prof->name, fm_pass_name(pb->pass), pb->head_dim);
  }
  return fm_timing_predict_coef(c, prof->kernel, prof->sms, prof->hbm_gbs, w, pb, out, err);
}
