/* fm_cp_run.c — the schedule of a context-parallel run and its pure helpers
 * (core/fm_cp_run.h): who sends which segment to whom, the ring's steps, the
 * column subset of a mask, the log-sum-exp merge and the inputs' values. */
#include "fm_cp_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_bf16.h"
#include "fm_rng.h"
#include "fm_tile_rule.h"

/* The schedule and everything it points to. */
typedef struct sched_impl {
  fm_cp_schedule pub;
  fm_cp_rank_schedule *rank; /* (P,) */
  fm_cp_link *links;         /* (2, P, P): in[r][q], then out[r][t] */
  fm_cp_move *moves;         /* every received segment: in-lists by rank, then source */
  fm_cp_msg *msgs;           /* (2, moves): K/V messages, then partials' messages */
  fm_cp_move *own;           /* every segment, grouped by owner */
  fm_cp_step *steps;         /* (P, P) at most */
} sched_impl;

void fm_cp_schedule_destroy(fm_cp_schedule *s) {
  if (!s) return;
  sched_impl *x = (sched_impl *)s;
  free(x->rank);
  free(x->links);
  free(x->moves);
  free(x->msgs);
  free(x->own);
  free(x->steps);
  free(x);
}

/* Own segments of every rank (grouped by owner, by row; off = local0) and
 * each segment's local0 in loc. Returns -1 when a rank owns no rows. */
static int fill_own(sched_impl *x, const fm_cp_sharding_plan *sp, int32_t P, int32_t *loc,
                    int32_t *first) {
  int32_t *count = calloc((size_t)P + 1, sizeof *count);
  if (!count) return -2;
  for (int32_t k = 0; k < sp->nsegments; k++) count[sp->segments[k].rank + 1]++;
  for (int32_t r = 0; r < P; r++) count[r + 1] += count[r];
  memcpy(first, count, sizeof *first * ((size_t)P + 1));
  int32_t *rows = calloc((size_t)P, sizeof *rows);
  if (!rows) {
    free(count);
    return -2;
  }
  for (int32_t k = 0; k < sp->nsegments; k++) {
    const fm_cp_segment *g = &sp->segments[k];
    loc[k] = rows[g->rank];
    x->own[count[g->rank]++] = (fm_cp_move){g->row0, g->row1, loc[k], loc[k]};
    rows[g->rank] += g->row1 - g->row0;
  }
  int bad = 0;
  for (int32_t r = 0; r < P; r++) {
    x->rank[r].rank = r;
    x->rank[r].rows = rows[r];
    bad |= rows[r] == 0;
  }
  free(count);
  free(rows);
  return bad ? -1 : 0;
}

/* Rank r's in-lists (by source, moves by row), its steps and sizes; moves
 * appended at x->moves + *nm. */
static void fill_in(sched_impl *x, const fm_cp_sharding_plan *sp, int32_t P, int32_t r,
                    const int32_t *loc, int ring, int64_t *nm) {
  fm_cp_rank_schedule *rs = &x->rank[r];
  fm_cp_link *in = x->links + (size_t)r * P;
  for (int32_t q = 0; q < P; q++) {
    fm_cp_move *m = x->moves + *nm;
    int32_t n = 0, rows = 0;
    for (int32_t k = 0; k < sp->nsegments && q != r; k++) {
      const fm_cp_segment *g = &sp->segments[k];
      if (g->rank != q || !sp->need[(int64_t)r * sp->nsegments + k]) continue;
      m[n++] = (fm_cp_move){g->row0, g->row1, loc[k], ring ? rows : g->row0};
      rows += g->row1 - g->row0;
    }
    in[q] = (fm_cp_link){.n = n, .move = m, .rows = rows};
    *nm += n;
    rs->recv_rows += rows;
  }
  fm_cp_step *st = x->steps + (size_t)r * P;
  st[0] = (fm_cp_step){0, r, rs->rows};
  rs->nsteps = 1;
  for (int32_t s = 1; s < P; s++) {
    int32_t q = (r - s + P) % P;
    if (!in[q].n) continue;
    st[rs->nsteps++] = (fm_cp_step){s, q, in[q].rows};
    if (in[q].rows > rs->ring_max_cols) rs->ring_max_cols = in[q].rows;
  }
  rs->step = st;
  rs->in = in;
}

/* Appends the message of rows [src, src + rows) -> [dst, dst + rows) to
 * m[0..*n), extending the last one when both sides continue it. */
static void msg_add(fm_cp_msg *m, int32_t *n, int32_t src, int32_t dst, int32_t rows) {
  fm_cp_msg *l = *n ? &m[*n - 1] : NULL;
  if (l && l->src + l->rows == src && l->dst + l->rows == dst) l->rows += rows;
  else m[(*n)++] = (fm_cp_msg){src, dst, rows};
}

/* The messages of every link (fm_cp_link says what src and dst are):
 * link i's at msgs + first move's index (K/V) and + nneed (partials). */
static void fill_msgs(sched_impl *x, int32_t P, int ring, int64_t nneed) {
  for (int64_t l = 0; l < (int64_t)P * P; l++) {
    fm_cp_link *k = &x->links[l];
    if (!k->n) continue;
    int64_t first = k->move - x->moves;
    fm_cp_msg *kv = x->msgs + first, *back = x->msgs + nneed + first;
    int32_t nkv = 0, nback = 0, run = 0;
    for (int32_t i = 0; i < k->n; i++) {
      const fm_cp_move *mv = &k->move[i];
      int32_t rows = mv->row1 - mv->row0;
      msg_add(kv, &nkv, ring ? mv->local0 : mv->row0, mv->off, rows);
      msg_add(back, &nback, mv->off, run, rows);
      run += rows;
    }
    k->nkv = nkv, k->nback = nback, k->kv = kv, k->back = back;
  }
}

fm_status fm_cp_schedule_create(const fm_cp_sharding_plan *sp, int32_t seqlen, int32_t ranks,
                                fm_cp_exchange xch, fm_cp_schedule **out, fm_err *err) {
  *out = NULL;
  if ((unsigned)xch >= FM_CP_NEXCHANGES)
    return fm_fail(err, FM_EINVAL, "schedule: exchange %d out of range", (int)xch);
  if (ranks < 1 || ranks > FM_CP_RUN_MAX_RANKS)
    return fm_fail(err, FM_EINVAL, "schedule: %d ranks, expected 1..%d", ranks, FM_CP_RUN_MAX_RANKS);
  const int32_t P = ranks, nseg = sp->nsegments;
  int64_t nneed = 0;
  for (int64_t i = 0; i < (int64_t)P * nseg; i++) nneed += sp->need[i] != 0;
  sched_impl *x = calloc(1, sizeof *x);
  int32_t *loc = malloc(sizeof *loc * (size_t)(nseg > 0 ? nseg : 1));
  int32_t *first = malloc(sizeof *first * ((size_t)P + 1));
  if (x) {
    x->rank = calloc((size_t)P, sizeof *x->rank);
    x->links = calloc(2 * (size_t)P * (size_t)P, sizeof *x->links);
    x->moves = malloc(sizeof *x->moves * (size_t)(nneed > 0 ? nneed : 1));
    x->msgs = malloc(sizeof *x->msgs * 2 * (size_t)(nneed > 0 ? nneed : 1));
    x->own = malloc(sizeof *x->own * (size_t)(nseg > 0 ? nseg : 1));
    x->steps = malloc(sizeof *x->steps * (size_t)P * (size_t)P);
  }
  int rc = x && loc && first && x->rank && x->links && x->moves && x->msgs && x->own && x->steps
               ? fill_own(x, sp, P, loc, first) : -2;
  if (rc) {
    fm_cp_schedule_destroy(x ? &x->pub : NULL);
    free(loc);
    free(first);
    return rc == -1 ? fm_fail(err, FM_EINVAL, "schedule: a rank owns no rows")
                    : fm_fail(err, FM_ENOMEM, "cannot allocate the schedule of %d ranks", P);
  }
  int64_t nm = 0;
  for (int32_t r = 0; r < P; r++) {
    x->rank[r].own = x->own + first[r];
    x->rank[r].nown = first[r + 1] - first[r];
    fill_in(x, sp, P, r, loc, xch == FM_CP_RING, &nm);
  }
  fill_msgs(x, P, xch == FM_CP_RING, nneed);
  for (int32_t r = 0; r < P; r++) { /* out[r][t] is in[t][r]: the same moves */
    fm_cp_link *o = x->links + (size_t)P * P + (size_t)r * P;
    for (int32_t t = 0; t < P; t++) {
      o[t] = x->links[(size_t)t * P + r];
      x->rank[r].send_rows += o[t].rows;
      if (o[t].rows > x->rank[r].send_rows_max) x->rank[r].send_rows_max = o[t].rows;
    }
    x->rank[r].out = o;
  }
  free(loc);
  free(first);
  x->pub = (fm_cp_schedule){seqlen, P, xch, x->rank};
  *out = &x->pub;
  return FM_OK;
}

const fm_cp_move *fm_cp_step_cols(const fm_cp_rank_schedule *rs, const fm_cp_step *st, int32_t *n) {
  if (st->s == 0) {
    *n = rs->nown;
    return rs->own;
  }
  *n = rs->in[st->source].n;
  return rs->in[st->source].move;
}

/* ------------------------------------------------------------ column subset */

fm_status fm_cp_colmask_subset(const fm_colmask *m, const fm_cp_move *cols, int32_t n,
                               fm_colmask **out, fm_err *err) {
  *out = NULL;
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  int64_t width = 0;
  for (int32_t c = 0; c < n; c++) {
    if (cols[c].row0 < 0 || cols[c].row1 > sk || cols[c].row0 >= cols[c].row1)
      return fm_fail(err, FM_EINVAL, "column subset: columns [%d, %d) outside [0, %d) or empty",
                     cols[c].row0, cols[c].row1, sk);
    width += cols[c].row1 - cols[c].row0;
  }
  if (!width) return fm_fail(err, FM_EINVAL, "column subset: no columns");
  int causal = fm_colmask_causal(m), suffix = 1; /* the last `width` columns, in order? */
  for (int32_t c = 0, j = (int32_t)(sk - width); c < n; j += cols[c].row1 - cols[c].row0, c++)
    suffix &= cols[c].row0 == j;
  fm_status st = fm_colmask_create(sq, width, fm_colmask_nb(m), fm_colmask_nh(m), causal && suffix,
                                   out, err);
  for (int32_t s = 0; st == FM_OK && s < fm_colmask_nsets(m); s++) {
    const int32_t *v[4];
    int32_t *w[4];
    for (int q = 0; q < 4; q++) {
      v[q] = fm_colmask_cvec(m, s, (fm_vec)q);
      w[q] = fm_colmask_vec(*out, s, (fm_vec)q);
    }
    int32_t at = 0;
    for (int32_t c = 0; c < n; c++)
      for (int32_t j = cols[c].row0; j < cols[c].row1; j++, at++) {
        int32_t us = v[FM_UTS][j], ue = v[FM_UTE][j];
        if (causal && !suffix) fm_effective_upper(us, ue, 1, j, sq, sk, &us, &ue);
        w[FM_LTS][at] = v[FM_LTS][j];
        w[FM_LTE][at] = v[FM_LTE][j];
        w[FM_UTS][at] = us;
        w[FM_UTE][at] = ue;
      }
  }
  return st;
}

/* ------------------------------------------------------------ merge, inputs */

void fm_cp_lse_merge(int64_t batch, int64_t heads, int64_t rows, int64_t head_dim, double *o,
                     double *lse, const double *o_p, const double *lse_p) {
  for (int64_t b = 0; b < batch; b++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < rows; i++) {
        int64_t li = (b * heads + h) * rows + i;
        double a = lse[li], p = lse_p[li], mx = a > p ? a : p;
        if (mx == -INFINITY) continue; /* neither side saw a key */
        double wa = exp(a - mx), wp = exp(p - mx), sum = wa + wp;
        double *oa = o + ((b * rows + i) * heads + h) * head_dim;
        const double *op = o_p + ((b * rows + i) * heads + h) * head_dim;
        for (int64_t d = 0; d < head_dim; d++) oa[d] = (wa * oa[d] + wp * op[d]) / sum;
        lse[li] = mx + log(sum);
      }
}

/* The GPU's fill_random_kernel (kernels/fm_attn.cu): the same hash, the same
 * Box-Muller transform (in double here: the GPU's logf and cospif may differ
 * in a float's last bit, which changes a bf16 value rarely). */
void fm_cp_fill_bf16(uint16_t *dst, int64_t n, uint64_t seed, int64_t first) {
  for (int64_t i = 0; i < n; i++) {
    const uint64_t x = fm_fill_bits(seed, (uint64_t)(first + i));
    const float u1 = ((float)(uint32_t)(x & 0xffffffffu) + 1.f) * 0x1.0p-32f; /* (0, 1] */
    const float u2 = (float)(uint32_t)(x >> 32) * 0x1.0p-32f;                /* [0, 1) */
    dst[i] = fm_f32_to_bf16((float)(sqrt(-2.0 * log((double)u1)) * cos(2.0 * 3.14159265358979323846 * u2)));
  }
}

uint64_t fm_cp_input_seed(uint64_t seed, int which) {
  return seed * 4 + (uint64_t)which + 0x5eed;
}
