/* fm_cp_fake.c — the CPU executor of a context-parallel schedule
 * (core/fm_cp_run.h, fm_cp_fake_run): every rank in one process, the
 * exchange as copies between rank buffers that follow the schedule's moves
 * exactly, the compute by the fp64 reference, checked against the whole
 * problem's reference. What CI runs instead of NCCL. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_cp_run.h"
#include "fm_reference.h"

#define BF16_NAN 0x7fc0u /* rows a rank did not receive: a read of one shows as NaN */

typedef struct fake_rank {
  fm_colmask *local;          /* its rows against every key (fm_cp_rank_mask) */
  uint16_t *q, *k, *v, *dout; /* (B, R, H, D) compact */
  uint16_t *kg, *vg;          /* allgather: (B, S, H, D), its own rows at their global rows, NaN
                                 elsewhere (the GPU's buffer that it sends from) */
  double *o, *lse;            /* (B, R, H, D), (B, H, R): the merged forward */
  double *dq, *dk, *dv;       /* (B, R, H, D) */
} fake_rank;

typedef struct fake {
  const fm_cp_schedule *s;
  const fm_cp_fake_opts *o;
  const fm_colmask *m;
  int64_t B, H, D, HD, S;
  fake_rank *rk;
  uint16_t *kbuf, *vbuf;      /* a receiver's K/V buffer (allgather: S rows; ring: two steps) */
  double *op, *lp, *dqp, *dkp, *dvp; /* one launch's outputs */
  double *back;               /* partial dK/dV received back by an owner (2 tensors) */
  int64_t moved[2], messages[2];
  int32_t launches;
} fake;

static void *alloc_n(int64_t n, size_t esz, int *oom) {
  void *p = calloc((size_t)(n > 0 ? n : 1), esz);
  if (!p) *oom = 1;
  return p;
}

/* Copies rows of batch b between two (B, n, H, D) buffers of any element type. */
static void copy_rows(void *dst, int64_t dst_n, int64_t dst_off, const void *src, int64_t src_n,
                      int64_t src_off, int64_t rows, const fake *f, size_t esz) {
  for (int64_t b = 0; b < f->B; b++)
    memcpy((char *)dst + ((b * dst_n + dst_off) * f->HD) * esz,
           (const char *)src + ((b * src_n + src_off) * f->HD) * esz, (size_t)(rows * f->HD) * esz);
}

/* dst[local rows] += src[rows at off] (doubles, every batch). */
static void add_rows(double *dst, int64_t dst_n, int64_t dst_off, const double *src, int64_t src_n,
                     int64_t src_off, int64_t rows, const fake *f) {
  for (int64_t b = 0; b < f->B; b++) {
    double *d = dst + (b * dst_n + dst_off) * f->HD;
    const double *x = src + (b * src_n + src_off) * f->HD;
    for (int64_t e = 0; e < rows * f->HD; e++) d[e] += x[e];
  }
}

static void rank_free(fake_rank *r) {
  fm_colmask_destroy(r->local);
  free(r->q), free(r->k), free(r->v), free(r->dout), free(r->kg), free(r->vg);
  free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
}

/* Rank r's inputs, filled from the global indices of its rows, and its local mask. */
static fm_status rank_init(fake *f, const fm_cp_sharding_plan *sp, int32_t r, fm_err *err) {
  const fm_cp_rank_schedule *rs = &f->s->rank[r];
  fake_rank *k = &f->rk[r];
  int64_t n = f->B * rs->rows * f->HD;
  int oom = 0;
  uint16_t **in[4] = {&k->q, &k->k, &k->v, &k->dout};
  for (int t = 0; t < 4; t++) *in[t] = alloc_n(n, 2, &oom);
  k->o = alloc_n(n, 8, &oom);
  k->lse = alloc_n(f->B * f->H * rs->rows, 8, &oom);
  k->dq = alloc_n(n, 8, &oom);
  k->dk = alloc_n(n, 8, &oom);
  k->dv = alloc_n(n, 8, &oom);
  if (f->s->exchange == FM_CP_ALLGATHER) {
    k->kg = alloc_n(f->B * f->S * f->HD, 2, &oom);
    k->vg = alloc_n(f->B * f->S * f->HD, 2, &oom);
  }
  if (oom) return fm_fail(err, FM_ENOMEM, "fake: cannot allocate the buffers of rank %d", r);
  for (int t = 0; t < 4; t++)
    for (int64_t b = 0; b < f->B; b++)
      for (int32_t g = 0; g < rs->nown; g++) {
        const fm_cp_move *mv = &rs->own[g];
        fm_cp_fill_bf16(*in[t] + (b * rs->rows + mv->local0) * f->HD, (mv->row1 - mv->row0) * f->HD,
                        fm_cp_input_seed(f->o->seed, t), (b * f->S + mv->row0) * f->HD);
      }
  for (int64_t e = 0; k->kg && e < f->B * f->S * f->HD; e++) k->kg[e] = k->vg[e] = BF16_NAN;
  for (int32_t g = 0; k->kg && g < rs->nown; g++) {
    const fm_cp_move *mv = &rs->own[g];
    copy_rows(k->kg, f->S, mv->row0, k->k, rs->rows, mv->local0, mv->row1 - mv->row0, f, 2);
    copy_rows(k->vg, f->S, mv->row0, k->v, rs->rows, mv->local0, mv->row1 - mv->row0, f, 2);
  }
  return fm_cp_rank_mask(f->m, sp->segments, sp->nsegments, r, &k->local, err);
}

/* One launch of rank r: its rows against keys kb/vb under mask lm; forward
 * into f->op, f->lp, or (backward) from its merged O and LSE into f->dqp,
 * f->dkp, f->dvp. */
static fm_status launch(fake *f, int32_t r, const fm_colmask *lm, const uint16_t *kb,
                        const uint16_t *vb, int backward, fm_err *err) {
  fake_rank *k = &f->rk[r];
  fm_ref_problem p = {.batch = (int32_t)f->B, .heads = (int32_t)f->H, .head_dim = (int32_t)f->D,
                      .softmax_scale = 1.0 / sqrt((double)f->D), .mask = lm, .q = k->q, .k = kb,
                      .v = vb};
  f->launches++;
  if (!backward) return fm_reference_forward(&p, FM_REF_FP64, f->op, f->lp, err);
  return fm_reference_backward_given(&p, k->dout, k->o, k->lse, f->dqp, f->dkp, f->dvp, err);
}

/* The K/V messages of link l from their owner p (its buffer: ring compact,
 * R rows; allgather its S-row buffer) into rank buffers (B, nrows, H, D),
 * whose room is cap rows per batch. */
static fm_status receive(fake *f, int32_t p, const fm_cp_link *l, int64_t nrows, int64_t cap,
                         uint16_t *kb, uint16_t *vb, fm_err *err) {
  const fake_rank *o = &f->rk[p];
  const int ag = f->s->exchange == FM_CP_ALLGATHER;
  const int64_t n_src = ag ? f->S : f->s->rank[p].rows;
  for (int32_t i = 0; i < l->nkv; i++) {
    const fm_cp_msg *m = &l->kv[i];
    if (m->dst < 0 || m->dst + m->rows > nrows || nrows > cap || m->src < 0 || m->src + m->rows > n_src)
      return fm_fail(err, FM_EINVAL, "schedule: rows [%d, %d) past a buffer of %lld rows", m->dst,
                     m->dst + m->rows, (long long)cap);
    copy_rows(kb, nrows, m->dst, ag ? o->kg : o->k, n_src, m->src, m->rows, f, 2);
    copy_rows(vb, nrows, m->dst, ag ? o->vg : o->v, n_src, m->src, m->rows, f, 2);
    f->moved[0] += m->rows;
    f->messages[0] += 2 * f->B;
  }
  return FM_OK;
}

/* The partial dK/dV of link l (this rank's in-link from p; rows at the
 * messages' src in f->dkp, f->dvp of n_src rows) sent back to their owner p
 * by the link's messages into its receive buffer of cap rows (f->back); the
 * owner adds every move's rows to its own. */
static fm_status send_back(fake *f, int32_t p, const fm_cp_link *l, int64_t n_src, int64_t cap,
                           fm_err *err) {
  fake_rank *o = &f->rk[p];
  const int32_t R = f->s->rank[p].rows;
  double *bk = f->back, *bv = f->back + f->B * cap * f->HD;
  for (int32_t i = 0; i < l->nback; i++) {
    const fm_cp_msg *m = &l->back[i];
    if (m->dst < 0 || m->dst + m->rows > cap || m->src < 0 || m->src + m->rows > n_src)
      return fm_fail(err, FM_EINVAL, "schedule: partial dK/dV past a buffer of %lld rows", (long long)cap);
    copy_rows(bk, cap, m->dst, f->dkp, n_src, m->src, m->rows, f, 8);
    copy_rows(bv, cap, m->dst, f->dvp, n_src, m->src, m->rows, f, 8);
    f->moved[1] += m->rows;
    f->messages[1] += 2 * f->B;
  }
  for (int32_t i = 0, at = 0; i < l->n; at += l->move[i].row1 - l->move[i].row0, i++) {
    int64_t rows = l->move[i].row1 - l->move[i].row0;
    add_rows(o->dk, R, l->move[i].local0, bk, cap, at, rows, f);
    add_rows(o->dv, R, l->move[i].local0, bv, cap, at, rows, f);
  }
  return FM_OK;
}

/* The all-gather of rank r, one pass: receive every needed segment into an
 * S-row buffer (NaN elsewhere), one launch; backward: dQ, own dK/dV, and the
 * partials of received segments back to their owners. */
static fm_status allgather_rank(fake *f, int32_t r, int backward, fm_err *err) {
  const fm_cp_rank_schedule *rs = &f->s->rank[r];
  fake_rank *k = &f->rk[r];
  int64_t n = f->B * f->S * f->HD; /* its own rows at their global rows, NaN elsewhere */
  memcpy(f->kbuf, k->kg, sizeof *f->kbuf * (size_t)n);
  memcpy(f->vbuf, k->vg, sizeof *f->vbuf * (size_t)n);
  fm_status st = FM_OK;
  for (int32_t q = 0; q < f->s->ranks && st == FM_OK; q++)
    st = receive(f, q, &rs->in[q], f->S, f->S, f->kbuf, f->vbuf, err);
  if (st == FM_OK) st = launch(f, r, k->local, f->kbuf, f->vbuf, backward, err);
  if (st != FM_OK) return st;
  if (!backward) {
    memcpy(k->o, f->op, sizeof *f->op * (size_t)(f->B * rs->rows * f->HD));
    memcpy(k->lse, f->lp, sizeof *f->lp * (size_t)(f->B * f->H * rs->rows));
    return FM_OK;
  }
  memcpy(k->dq, f->dqp, sizeof *f->dqp * (size_t)(f->B * rs->rows * f->HD));
  for (int32_t g = 0; g < rs->nown; g++) {
    const fm_cp_move *mv = &rs->own[g];
    add_rows(k->dk, rs->rows, mv->local0, f->dkp, f->S, mv->row0, mv->row1 - mv->row0, f);
    add_rows(k->dv, rs->rows, mv->local0, f->dvp, f->S, mv->row0, mv->row1 - mv->row0, f);
  }
  for (int32_t q = 0; q < f->s->ranks && st == FM_OK; q++)
    st = send_back(f, q, &rs->in[q], f->S, f->s->rank[q].send_rows_max, err);
  return st;
}

/* Ring step st of rank r, one pass: the step's keys (own, or received into
 * the step's half of the double buffer), its column subset, one launch, the
 * merge (forward) or the dQ sum and the partials back (backward). */
static fm_status ring_step(fake *f, int32_t r, const fm_cp_step *st, int backward, fm_err *err) {
  const fm_cp_rank_schedule *rs = &f->s->rank[r];
  fake_rank *k = &f->rk[r];
  int32_t n;
  const fm_cp_move *cols = fm_cp_step_cols(rs, st, &n);
  int64_t cap = rs->ring_max_cols, half = f->B * cap * f->HD;
  uint16_t *kb = k->k, *vb = k->v;
  fm_status s = FM_OK;
  if (st->s > 0) {
    int64_t which = (st - rs->step) % 2; /* double buffered by active step */
    kb = f->kbuf + which * half;
    vb = f->vbuf + which * half;
    for (int64_t e = 0; e < half; e++) kb[e] = vb[e] = BF16_NAN;
    s = receive(f, st->source, &rs->in[st->source], st->ncols, cap, kb, vb, err);
  }
  fm_colmask *sub = NULL;
  if (s == FM_OK) s = fm_cp_colmask_subset(k->local, cols, n, &sub, err);
  if (s == FM_OK) s = launch(f, r, sub, kb, vb, backward, err);
  fm_colmask_destroy(sub);
  if (s != FM_OK) return s;
  int64_t R = rs->rows, no = f->B * R * f->HD;
  if (!backward) {
    if (st->s == 0) {
      memcpy(k->o, f->op, sizeof *f->op * (size_t)no);
      memcpy(k->lse, f->lp, sizeof *f->lp * (size_t)(f->B * f->H * R));
    } else {
      fm_cp_lse_merge(f->B, f->H, R, f->D, k->o, k->lse, f->op, f->lp);
    }
    return FM_OK;
  }
  for (int64_t e = 0; e < no; e++) k->dq[e] += f->dqp[e];
  if (st->s == 0) { /* the own step's keys are the compact layout */
    add_rows(k->dk, R, 0, f->dkp, R, 0, R, f);
    add_rows(k->dv, R, 0, f->dvp, R, 0, R, f);
    return FM_OK;
  }
  return send_back(f, st->source, &rs->in[st->source], st->ncols, f->s->rank[st->source].send_rows_max, err);
}

/* One pass over every rank: the all-gather rank by rank, the ring step by
 * step (global step s of every rank, then s + 1). */
static fm_status run_pass(fake *f, int backward, fm_err *err) {
  fm_status st = FM_OK;
  const int32_t P = f->s->ranks;
  if (f->s->exchange == FM_CP_ALLGATHER) {
    for (int32_t r = 0; r < P && st == FM_OK; r++) st = allgather_rank(f, r, backward, err);
    return st;
  }
  for (int32_t s = 0; s < P && st == FM_OK; s++)
    for (int32_t r = 0; r < P && st == FM_OK; r++) {
      const fm_cp_rank_schedule *rs = &f->s->rank[r];
      for (int32_t i = 0; i < rs->nsteps && st == FM_OK; i++)
        if (rs->step[i].s == s) st = ring_step(f, r, &rs->step[i], backward, err);
    }
  return st;
}

/* ------------------------------------------------------------ the check */

/* n values of got against ref into c (atol, rtol: FM_CP_FAKE_*). */
static void cmp_values(fm_cp_fake_cmp *c, const double *got, const double *ref, int64_t n) {
  for (int64_t e = 0; e < n; e++) {
    double g = got[e], x = ref[e];
    if (isinf(x) || isinf(g)) {
      c->bad += g != x;
      continue;
    }
    double d = fabs(g - x);
    if (!(d <= FM_CP_FAKE_ATOL + FM_CP_FAKE_RTOL * fabs(x))) c->bad++; /* NaN too */
    if (d > c->max_abs || d != d) c->max_abs = d != d ? INFINITY : d;
    if (fabs(x) > 1e-6 && d / fabs(x) > c->max_rel) c->max_rel = d / fabs(x);
  }
}

/* The whole problem's reference: inputs (B, S, H, D) by global index, then
 * O, LSE and (backward) dQ, dK, dV. */
typedef struct whole {
  uint16_t *in[4];
  double *o, *lse, *dq, *dk, *dv;
} whole;

static fm_status whole_run(const fake *f, whole *w, fm_err *err) {
  int64_t n = f->B * f->S * f->HD;
  int oom = 0;
  for (int t = 0; t < 4; t++) w->in[t] = alloc_n(n, 2, &oom);
  w->o = alloc_n(n, 8, &oom);
  w->lse = alloc_n(f->B * f->H * f->S, 8, &oom);
  if (f->o->backward) {
    w->dq = alloc_n(n, 8, &oom);
    w->dk = alloc_n(n, 8, &oom);
    w->dv = alloc_n(n, 8, &oom);
  }
  if (oom) return fm_fail(err, FM_ENOMEM, "fake: cannot allocate the whole problem (S = %lld)", (long long)f->S);
  for (int t = 0; t < 4; t++) fm_cp_fill_bf16(w->in[t], n, fm_cp_input_seed(f->o->seed, t), 0);
  fm_ref_problem p = {.batch = (int32_t)f->B, .heads = (int32_t)f->H, .head_dim = (int32_t)f->D,
                      .softmax_scale = 1.0 / sqrt((double)f->D), .mask = f->m, .q = w->in[0],
                      .k = w->in[1], .v = w->in[2]};
  fm_status st = fm_reference_forward(&p, FM_REF_FP64, w->o, w->lse, err);
  if (st == FM_OK && f->o->backward)
    st = fm_reference_backward(&p, w->in[3], FM_REF_FP64, w->dq, w->dk, w->dv, err);
  return st;
}

static void whole_free(whole *w) {
  for (int t = 0; t < 4; t++) free(w->in[t]);
  free(w->o), free(w->lse), free(w->dq), free(w->dk), free(w->dv);
}

/* Every rank's rows against the whole problem's. */
static void compare(const fake *f, const whole *w, fm_cp_fake_result *res) {
  memset(res->cmp, 0, sizeof res->cmp);
  for (int32_t r = 0; r < f->s->ranks; r++) {
    const fm_cp_rank_schedule *rs = &f->s->rank[r];
    const fake_rank *k = &f->rk[r];
    const double *got[5] = {k->o, k->lse, k->dq, k->dk, k->dv}, *ref[5] = {w->o, w->lse, w->dq, w->dk, w->dv};
    for (int32_t g = 0; g < rs->nown; g++) {
      const fm_cp_move *mv = &rs->own[g];
      int64_t rows = mv->row1 - mv->row0;
      for (int64_t b = 0; b < f->B; b++) {
        for (int t = 0; t < (f->o->backward ? 5 : 2); t++) {
          if (t == 1) continue;
          cmp_values(&res->cmp[t], got[t] + (b * rs->rows + mv->local0) * f->HD,
                     ref[t] + (b * f->S + mv->row0) * f->HD, rows * f->HD);
        }
        for (int64_t h = 0; h < f->H; h++)
          cmp_values(&res->cmp[1], k->lse + (b * f->H + h) * rs->rows + mv->local0,
                     w->lse + (b * f->H + h) * f->S + mv->row0, rows);
      }
    }
  }
  res->ok = 1;
  for (int t = 0; t < 5; t++) res->ok &= res->cmp[t].bad == 0;
}

/* The shared buffers: K/V receive (allgather: S rows; ring: two steps), one
 * launch's outputs (at most S keys), the owners' partial receive buffer. */
static fm_status fake_alloc(fake *f, fm_err *err) {
  int64_t ring = 0, back = 0, rmax = 0;
  for (int32_t r = 0; r < f->s->ranks; r++) {
    const fm_cp_rank_schedule *rs = &f->s->rank[r];
    if (rs->ring_max_cols > ring) ring = rs->ring_max_cols;
    if (rs->send_rows_max > back) back = rs->send_rows_max;
    if (rs->rows > rmax) rmax = rs->rows;
  }
  int64_t kv = f->s->exchange == FM_CP_ALLGATHER ? f->S : 2 * ring, BHD = f->B * f->HD;
  int oom = 0;
  f->rk = alloc_n(f->s->ranks, sizeof *f->rk, &oom);
  f->kbuf = alloc_n(kv * BHD, 2, &oom);
  f->vbuf = alloc_n(kv * BHD, 2, &oom);
  f->op = alloc_n(rmax * BHD, 8, &oom);
  f->lp = alloc_n(rmax * f->B * f->H, 8, &oom);
  f->dqp = alloc_n(rmax * BHD, 8, &oom);
  f->dkp = alloc_n(f->S * BHD, 8, &oom);
  f->dvp = alloc_n(f->S * BHD, 8, &oom);
  f->back = alloc_n(2 * back * BHD, 8, &oom);
  return oom ? fm_fail(err, FM_ENOMEM, "fake: cannot allocate the exchange buffers") : FM_OK;
}

fm_status fm_cp_fake_run(const fm_colmask *m, const fm_cp_sharding_plan *sp,
                         const fm_cp_schedule *s, const fm_cp_fake_opts *o, fm_cp_fake_result *r,
                         fm_err *err) {
  memset(r, 0, sizeof *r);
  if (o->batch < 1 || o->heads < 1 || o->head_dim < 1 || fm_colmask_sq(m) != s->seqlen)
    return fm_fail(err, FM_EINVAL, "fake: bad shape (batch %d, heads %d, head dim %d, S %d vs %d)",
                   o->batch, o->heads, o->head_dim, fm_colmask_sq(m), s->seqlen);
  fake f = {.s = s, .o = o, .m = m, .B = o->batch, .H = o->heads, .D = o->head_dim,
            .HD = (int64_t)o->heads * o->head_dim, .S = s->seqlen};
  whole w = {0};
  fm_status st = fake_alloc(&f, err);
  for (int32_t k = 0; k < s->ranks && st == FM_OK; k++) st = rank_init(&f, sp, k, err);
  if (st == FM_OK) st = whole_run(&f, &w, err);
  if (st == FM_OK) st = run_pass(&f, 0, err);
  r->steps = f.launches;
  if (st == FM_OK && o->backward) st = run_pass(&f, 1, err);
  if (st == FM_OK) {
    r->sent_rows[0] = f.moved[0] / (o->backward ? 2 : 1); /* both passes move the K/V */
    r->sent_rows[1] = f.moved[1];
    r->messages[0] = f.messages[0] / (o->backward ? 2 : 1);
    r->messages[1] = f.messages[1];
    compare(&f, &w, r);
  }
  for (int32_t k = 0; f.rk && k < s->ranks; k++) rank_free(&f.rk[k]);
  whole_free(&w);
  free(f.rk), free(f.kbuf), free(f.vbuf), free(f.op), free(f.lp);
  free(f.dqp), free(f.dkp), free(f.dvp), free(f.back);
  return st;
}
