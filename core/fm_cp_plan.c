/* fm_cp_plan.c — context-parallel plans (fm_cp_plan.h): the walk of the
 * mask's tiles at each pass's tile, the shardings (a registry), each rank's
 * tiles, times and K/V needs, and the exchanges' costs. */
#include "fm_cp_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_limits.h"

/* ------------------------------------------------------------ the walk */

/* The mask at one pass's tile, from one fm_tile_walk: what every sharding
 * needs to count a rank's tiles without walking again. */
typedef struct pass_data {
  int present;            /* the kernel has this pass */
  int32_t br, bc, tr, tc;
  fm_work *rows;          /* (sets, tr) min/max work of every row tile */
  int32_t *xmasked;       /* (sets, tr) exactly MASKED tiles of every row tile */
  int32_t *xpartial;      /* (sets, tr) exactly PARTIAL tiles of every row tile */
  fm_tile_span *spans;    /* (sets, tc, 4): masked[0..1], touched[0..1] row-tile spans */
  uint8_t *nspans;        /* (sets, tc, 2): how many of each */
  int32_t *diff;          /* walk scratch: 4 difference arrays of (tr + 1) */
  fm_tile_counts counts;  /* the whole mask */
} pass_data;

struct fm_cp_plan {
  fm_cp_summary sum;
  int32_t nsets, nb, nh;
  int causal;
  pass_data pass[FM_CP_NPASSES];
  float *map;             /* (map_rows, map_cols) */
  int32_t *map_diff;      /* walk scratch (tr + 1) */
  int have[FM_CP_NSHARDINGS];
  char skipped[FM_CP_NSHARDINGS][256]; /* all asked for: why a sharding could not cut the rows */
  fm_cp_sharding_plan sp[FM_CP_NSHARDINGS];
  fm_cp_segment *segs[FM_CP_NSHARDINGS];
  fm_cp_rank *ranks[FM_CP_NSHARDINGS];
  uint8_t *need[FM_CP_NSHARDINGS];
  fm_cp_ring_step *steps[FM_CP_NSHARDINGS];
};

#define MAP_MAX 512

static int32_t map_cell(int32_t i, int32_t n, int32_t cells) {
  return (int32_t)((int64_t)i * cells / n);
}

/* The work map: key tile k's visited rows (set 0, forward) into the current
 * cell column; binned into cells once the column's last key tile is in. */
static void map_key_tile(fm_cp_plan *p, const pass_data *pd, const fm_key_tile_spans *k) {
  int32_t *d = p->map_diff, mr = p->sum.map_rows, mc = p->sum.map_cols;
  d[0]++;
  d[pd->tr]--;
  for (int q = 0; q < k->nmasked; q++) {
    d[k->masked[q].begin]--;
    d[k->masked[q].end]++;
  }
  int32_t cc = map_cell(k->ct, pd->tc, mc);
  if (k->ct + 1 < pd->tc && map_cell(k->ct + 1, pd->tc, mc) == cc) return;
  int32_t run = 0;
  for (int32_t rt = 0; rt < pd->tr; rt++) {
    run += d[rt];
    p->map[(int64_t)map_cell(rt, pd->tr, mr) * mc + cc] += (float)run;
  }
  memset(d, 0, sizeof *d * ((size_t)pd->tr + 1));
}

/* The last key tile of a set is in: the row tiles' work and exact classes
 * from the difference arrays. */
static void finish_set(pass_data *pd, int32_t set) {
  int32_t *dm = pd->diff, *dt = dm + pd->tr + 1, *dxm = dt + pd->tr + 1, *dxc = dxm + pd->tr + 1;
  int32_t m = 0, t = 0, xm = 0, xc = 0;
  int64_t off = (int64_t)set * pd->tr;
  fm_tile_counts *c = &pd->counts;
  for (int32_t rt = 0; rt < pd->tr; rt++) {
    m += dm[rt];
    t += dt[rt];
    xm += dxm[rt];
    xc += dxc[rt];
    pd->rows[off + rt] = (fm_work){pd->tc - m, t - m};
    pd->xmasked[off + rt] = m + xm;
    pd->xpartial[off + rt] = t - m - xm - xc;
    c->minmax[FM_TILE_MASKED] += m;
    c->minmax[FM_TILE_PARTIAL] += t - m;
    c->minmax[FM_TILE_UNMASKED] += pd->tc - t;
    c->exact[FM_TILE_MASKED] += m + xm;
    c->exact[FM_TILE_PARTIAL] += t - m - xm - xc;
    c->exact[FM_TILE_UNMASKED] += pd->tc - t + xc;
    c->partial_but_masked += xm;
    c->partial_but_unmasked += xc;
  }
  memset(pd->diff, 0, sizeof *pd->diff * 4 * ((size_t)pd->tr + 1));
}

typedef struct walk_ctx {
  fm_cp_plan *plan;
  pass_data *pd;
  int map; /* 1: also the work map (the forward) */
} walk_ctx;

static void add_spans(int32_t *d, const fm_tile_span *s, int n) {
  for (int q = 0; q < n; q++) {
    d[s[q].begin]++;
    d[s[q].end]--;
  }
}

static void on_key_tile(const fm_key_tile_spans *k, void *ctx) {
  walk_ctx *w = ctx;
  pass_data *pd = w->pd;
  int64_t at = (int64_t)k->set * pd->tc + k->ct;
  fm_tile_span *sp = pd->spans + at * 4;
  memset(sp, 0, 4 * sizeof *sp);
  memcpy(sp, k->masked, sizeof *sp * (size_t)k->nmasked);
  memcpy(sp + 2, k->touched, sizeof *sp * (size_t)k->ntouched);
  pd->nspans[at * 2] = (uint8_t)k->nmasked;
  pd->nspans[at * 2 + 1] = (uint8_t)k->ntouched;
  int32_t n1 = pd->tr + 1;
  add_spans(pd->diff, k->masked, k->nmasked);
  add_spans(pd->diff + n1, k->touched, k->ntouched);
  add_spans(pd->diff + 2 * n1, k->xmasked, k->nxmasked);
  add_spans(pd->diff + 3 * n1, k->xclear, k->nxclear);
  if (w->map && k->set == 0) map_key_tile(w->plan, pd, k);
  if (k->ct == pd->tc - 1) finish_set(pd, k->set);
}

static void pass_free(pass_data *pd) {
  free(pd->rows);
  free(pd->xmasked);
  free(pd->xpartial);
  free(pd->spans);
  free(pd->nspans);
  free(pd->diff);
}

/* Walks m at the pass's tile into pd (and the work map for the forward). */
static fm_status pass_walk(fm_cp_plan *p, const fm_colmask *m, pass_data *pd, int map, fm_err *err) {
  int32_t s = fm_colmask_sq(m);
  pd->tr = (int32_t)(((int64_t)s + pd->br - 1) / pd->br);
  pd->tc = (int32_t)(((int64_t)s + pd->bc - 1) / pd->bc);
  int64_t ns = p->nsets, tr = pd->tr, tc = pd->tc;
  char what[128];
  snprintf(what, sizeof what, "the tile walk of %lld sets of %d x %d tiles", (long long)ns, pd->tr, pd->tc);
  int64_t bytes = fm_mem_add(fm_mem_mul(ns * tr, 16), fm_mem_mul(ns * tc, 4 * (int64_t)sizeof(fm_tile_span) + 2));
  fm_status st = fm_mem_check(fm_mem_add(bytes, fm_mem_mul(tr + 1, 20)), what, err);
  if (st != FM_OK) return st;
  pd->rows = malloc(sizeof *pd->rows * (size_t)(ns * tr));
  pd->xmasked = malloc(sizeof *pd->xmasked * (size_t)(ns * tr));
  pd->xpartial = malloc(sizeof *pd->xpartial * (size_t)(ns * tr));
  pd->spans = malloc(sizeof *pd->spans * (size_t)(ns * tc * 4));
  pd->nspans = malloc((size_t)(ns * tc * 2));
  pd->diff = calloc(4 * ((size_t)tr + 1), sizeof *pd->diff);
  if (map && !p->map_diff) p->map_diff = calloc((size_t)tr + 1, sizeof *p->map_diff);
  if (!pd->rows || !pd->xmasked || !pd->xpartial || !pd->spans || !pd->nspans || !pd->diff ||
      (map && !p->map_diff))
    return fm_fail(err, FM_ENOMEM, "cannot allocate %s", what);
  walk_ctx w = {.plan = p, .pd = pd, .map = map};
  st = fm_tile_walk(m, pd->br, pd->bc, 1, on_key_tile, &w, err);
  pd->counts.total = ns * tr * tc;
  pd->counts.sparsity = (double)pd->counts.minmax[FM_TILE_MASKED] / (double)pd->counts.total;
  pd->counts.sparsity_exact = (double)pd->counts.exact[FM_TILE_MASKED] / (double)pd->counts.total;
  return st;
}

/* The work map's cells as fractions of their tiles. */
static void map_finish(fm_cp_plan *p) {
  const pass_data *pd = &p->pass[FM_CP_FWD];
  int32_t mr = p->sum.map_rows, mc = p->sum.map_cols;
  for (int32_t cr = 0; cr < mr; cr++) {
    /* row tiles rt with rt * mr / tr == cr: [ceil(cr tr / mr), ceil((cr + 1) tr / mr)) */
    int64_t r0 = ((int64_t)cr * pd->tr + mr - 1) / mr, r1 = ((int64_t)(cr + 1) * pd->tr + mr - 1) / mr;
    for (int32_t cc = 0; cc < mc; cc++) {
      int64_t c0 = ((int64_t)cc * pd->tc + mc - 1) / mc, c1 = ((int64_t)(cc + 1) * pd->tc + mc - 1) / mc;
      double n = (double)(r1 - r0) * (double)(c1 - c0);
      p->map[(int64_t)cr * mc + cc] = n > 0 ? (float)(p->map[(int64_t)cr * mc + cc] / n) : 0.0f;
    }
  }
}

/* ------------------------------------------------------------ shardings */

typedef struct shard_ctx {
  const fm_cp_plan *plan;
  const fm_cp_options *o;
  int32_t seqlen, ranks, granule;
} shard_ctx;

static fm_status segs_alloc(int32_t n, fm_cp_segment **out, fm_err *err) {
  *out = malloc(sizeof **out * (size_t)(n > 0 ? n : 1));
  return *out ? FM_OK : fm_fail(err, FM_ENOMEM, "cannot allocate %d segments", n);
}

static int32_t granule_row(const shard_ctx *c, int64_t g) {
  int64_t r = g * c->granule;
  return r > c->seqlen ? c->seqlen : (int32_t)r;
}

/* `parts` blocks of granules as equal as they can be; block k to owner(k). */
static fm_status blocks(const shard_ctx *c, int32_t parts, const char *name, int zigzag,
                        fm_cp_segment **segs, int32_t *nseg, fm_err *err) {
  int64_t g = ((int64_t)c->seqlen + c->granule - 1) / c->granule;
  if (parts > g)
    return fm_fail(err, FM_EINVAL, "--ranks %d: %s needs %d blocks of %d rows, S = %d has %lld",
                   c->ranks, name, parts, c->granule, c->seqlen, (long long)g);
  fm_status st = segs_alloc(parts, segs, err);
  for (int32_t k = 0; st == FM_OK && k < parts; k++) {
    (*segs)[k].row0 = granule_row(c, (int64_t)k * g / parts);
    (*segs)[k].row1 = granule_row(c, (int64_t)(k + 1) * g / parts);
    (*segs)[k].rank = zigzag && k >= c->ranks ? 2 * c->ranks - 1 - k : k;
  }
  *nseg = parts;
  return st;
}

static fm_status shard_contiguous(const shard_ctx *c, fm_cp_segment **segs, int32_t *nseg,
                                  int *exact, fm_err *err) {
  *exact = 0;
  return blocks(c, c->ranks, "contiguous", 0, segs, nseg, err);
}

static fm_status shard_zigzag(const shard_ctx *c, fm_cp_segment **segs, int32_t *nseg, int *exact,
                              fm_err *err) {
  *exact = 0;
  return blocks(c, 2 * c->ranks, "zigzag", 1, segs, nseg, err);
}

/* Chunks of c->o->chunk rows, their visited forward tiles, assigned. */
static fm_status shard_mask_aware(const shard_ctx *c, fm_cp_segment **segs, int32_t *nseg,
                                  int *exact, fm_err *err) {
  const fm_cp_plan *p = c->plan;
  const pass_data *pd = &p->pass[FM_CP_FWD];
  int32_t chunk = p->sum.chunk, n = p->sum.chunks;
  *exact = c->o->exact;
  if (n < c->ranks)
    return fm_fail(err, FM_EINVAL, "--ranks %d: mask-aware needs a chunk per rank, S = %d has %d "
                   "chunk%s of %d rows (a smaller --chunk gives more)", c->ranks, c->seqlen, n,
                   n == 1 ? "" : "s", chunk);
  if (c->o->exact && n > FM_CP_EXACT_MAX_CHUNKS)
    return fm_fail(err, FM_EUNSUPPORTED, "--exact solves at most %d chunks; S = %d has %d chunks of "
                   "%d rows (a larger --chunk, or the greedy assignment without --exact)",
                   FM_CP_EXACT_MAX_CHUNKS, c->seqlen, n, chunk);
  int64_t *work = calloc((size_t)n, sizeof *work);
  int32_t *owner = malloc(sizeof *owner * (size_t)n);
  fm_status st = work && owner ? segs_alloc(n, segs, err)
                               : fm_fail(err, FM_ENOMEM, "cannot allocate %d chunks", n);
  for (int32_t k = 0; st == FM_OK && k < n; k++) {
    (*segs)[k].row0 = (int32_t)((int64_t)k * chunk);
    (*segs)[k].row1 = (int32_t)((int64_t)(k + 1) * chunk > c->seqlen ? c->seqlen : (int64_t)(k + 1) * chunk);
    int32_t t0 = (*segs)[k].row0 / pd->br, t1 = (int32_t)(((int64_t)(*segs)[k].row1 + pd->br - 1) / pd->br);
    for (int32_t s = 0; s < p->nsets; s++)
      for (int32_t rt = t0; rt < t1; rt++) work[k] += pd->rows[(int64_t)s * pd->tr + rt].visited;
  }
  if (st == FM_OK) {
    int64_t best = c->o->exact ? fm_cp_assign_exact(work, n, c->ranks, owner, err)
                               : fm_cp_assign_greedy(work, n, c->ranks, owner);
    if (best < 0) st = c->o->exact ? FM_EUNSUPPORTED : fm_fail(err, FM_ENOMEM, "cannot assign %d chunks", n);
  }
  for (int32_t k = 0; st == FM_OK && k < n; k++) (*segs)[k].rank = owner[k];
  *nseg = n;
  free(work);
  free(owner);
  return st;
}

typedef fm_status (*shard_fn)(const shard_ctx *c, fm_cp_segment **segs, int32_t *nseg, int *exact,
                              fm_err *err);

/* The shardings: one row each (name, the function that cuts the rows). */
static const struct {
  const char *name;
  shard_fn build;
} shardings[FM_CP_NSHARDINGS] = {
    {"contiguous", shard_contiguous},
    {"zigzag", shard_zigzag},
    {"mask-aware", shard_mask_aware},
};

const char *fm_cp_sharding_name(fm_cp_sharding s) {
  return s >= 0 && s < FM_CP_NSHARDINGS ? shardings[s].name : "?";
}

fm_status fm_cp_shardings_parse(const char *text, unsigned *bits, fm_err *err) {
  if (text && !strcmp(text, "all")) {
    *bits = (1u << FM_CP_NSHARDINGS) - 1;
    return FM_OK;
  }
  char names[160] = "";
  for (int s = 0; s < FM_CP_NSHARDINGS; s++) {
    if (text && !strcmp(text, shardings[s].name)) {
      *bits = 1u << s;
      return FM_OK;
    }
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s, ", shardings[s].name);
  }
  return fm_fail(err, FM_EINVAL, "unknown sharding '%s' (expected %sor all)", text ? text : "", names);
}

const char *fm_cp_exchange_name(fm_cp_exchange e) {
  static const char *const names[FM_CP_NEXCHANGES] = {"allgather", "ring"};
  return e >= 0 && e < FM_CP_NEXCHANGES ? names[e] : "?";
}

/* Adjacent segments of one owner become one (the unit a rank receives). */
static int32_t merge_segments(fm_cp_segment *s, int32_t n) {
  int32_t m = 0;
  for (int32_t k = 0; k < n; k++) {
    if (s[k].row0 >= s[k].row1) continue;
    if (m > 0 && s[m - 1].rank == s[k].rank && s[m - 1].row1 == s[k].row0) s[m - 1].row1 = s[k].row1;
    else s[m++] = s[k];
  }
  return m;
}

int32_t fm_cp_owner(const fm_cp_sharding_plan *sp, int32_t i) {
  int32_t lo = 0, hi = sp->nsegments - 1;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo + 1) / 2;
    if (sp->segments[mid].row0 <= i) lo = mid;
    else hi = mid - 1;
  }
  return sp->segments[lo].rank;
}

/* ------------------------------------------------------------ a rank's tiles and times */

/* What one sharding's evaluation shares. */
typedef struct eval_ctx {
  const fm_cp_plan *p;
  const fm_cp_options *o;
  const fm_cp_segment *segs;
  int32_t nseg, ranks;
  fm_cp_rank *out;        /* (P,) */
  uint8_t *need;          /* (P, nseg) */
  int32_t *by_rank;       /* (nseg,) segment indices grouped by rank ... */
  int32_t *rank_start;    /* (P + 1,) ... rank r's: by_rank[rank_start[r] .. rank_start[r + 1]) */
  int32_t *kseg[FM_CP_NPASSES]; /* (tc,) the segment holding each key tile */
  int32_t *pre;           /* (tr + 1,) the rank's row tiles below each row tile */
  double *vis[FM_CP_NPASSES]; /* (P,) visited tiles of the rank on each source rank's keys */
  double *step_us[FM_CP_NPASSES];    /* (P,) the rank's ring step on each source's keys (rank_steps) */
  int64_t *step_items[FM_CP_NPASSES]; /* (P,) its work items */
  int32_t *sdiff;         /* rank_steps' scratch: 2 difference arrays of (tr + 1) */
  double *ag_ms[FM_CP_NPASSES]; /* (P,) each rank's pass at the all-gather's clock (NaN: no time) */
  int64_t *src_rows;      /* (P,) K/V rows the rank receives from each source */
  int32_t *src_segs, *src_runs; /* (P,) its segments needed, their runs in the source's storage */
  fm_cp_model_src *src;   /* every rank's sources in ring order (the exchange model) ... */
  int64_t *src_start;     /* (P + 1,) ... rank r's: src[src_start[r] .. src_start[r + 1]) */
  int64_t nsrc, cap;
  int64_t *send_rows, *send_max; /* (P,) rows every other rank receives from it, the most one does */
  int64_t *max_src;       /* (P,) the most rows it receives from one source */
  fm_cp_model_rank *mrank; /* (P,) work outside the steps and groups (the exchange model) */
} eval_ctx;

/* Columns of key tile ct (bc wide, the last one cut at S). */
static int64_t key_tile_width(int32_t S, int32_t bc, int32_t ct) {
  int64_t j0 = (int64_t)ct * bc;
  return S - j0 < bc ? S - j0 : bc;
}

/* Whether rank r's launch runs the kernel's causal path: a causal mask and
 * the rank's rows one segment that ends at S (its diagonal the mask's). */
static int rank_causal(const eval_ctx *e, int32_t r) {
  return e->p->causal && e->out[r].segments == 1 && e->segs[e->by_rank[e->rank_start[r]]].row1 == e->p->sum.seqlen;
}

/* The timing model's problem of one pass of the plan's shape, in its clock. */
static fm_timing_problem pass_problem(const fm_cp_summary *s, int pass) {
  return (fm_timing_problem){.batch = s->batch, .heads = s->heads, .head_dim = s->head_dim,
                             .pass = pass == FM_CP_FWD ? FM_PASS_FWD : FM_PASS_BWD, .variant = FM_VARIANT_SKIP,
                             .clock = s->clock};
}

/* The rank's row tiles at pd's tile into e->pre (prefix counts); returns them. */
static int32_t rank_row_tiles(eval_ctx *e, const pass_data *pd, int32_t r) {
  int32_t *pre = e->pre;
  memset(pre, 0, sizeof *pre * ((size_t)pd->tr + 1));
  for (int32_t q = e->rank_start[r]; q < e->rank_start[r + 1]; q++) {
    const fm_cp_segment *s = &e->segs[e->by_rank[q]];
    int32_t t1 = (int32_t)(((int64_t)s->row1 + pd->br - 1) / pd->br);
    for (int32_t rt = s->row0 / pd->br; rt < t1; rt++) pre[rt + 1] = 1;
  }
  for (int32_t rt = 0; rt < pd->tr; rt++) pre[rt + 1] += pre[rt];
  return pre[pd->tr];
}

static int32_t in_spans(const int32_t *pre, const fm_tile_span *s, int n) {
  int32_t c = 0;
  for (int q = 0; q < n; q++) c += pre[s[q].end] - pre[s[q].begin];
  return c;
}

/* The rank's key-tile work (its rows only), the key columns it visits, its
 * visited tiles per source rank and the segments it needs. */
static void rank_cols(eval_ctx *e, const pass_data *pd, int pass, int32_t r, int32_t tr_r,
                      fm_work *cols, int64_t *kv_cols) {
  const fm_cp_plan *p = e->p;
  double *vis = e->vis[pass];
  memset(vis, 0, sizeof *vis * (size_t)e->ranks);
  for (int32_t s = 0; s < p->nsets; s++) {
    kv_cols[s] = 0;
    for (int32_t ct = 0; ct < pd->tc; ct++) {
      int64_t at = (int64_t)s * pd->tc + ct;
      const fm_tile_span *sp = pd->spans + at * 4;
      int32_t m = in_spans(e->pre, sp, pd->nspans[at * 2]);
      int32_t t = in_spans(e->pre, sp + 2, pd->nspans[at * 2 + 1]);
      cols[at] = (fm_work){tr_r - m, t - m};
      if (tr_r - m == 0) continue;
      kv_cols[s] += key_tile_width(p->sum.seqlen, pd->bc, ct);
      int32_t k = e->kseg[pass][ct], q = e->segs[k].rank;
      vis[q] += tr_r - m;
      if (q != r) e->need[(int64_t)r * e->nseg + k] = 1;
    }
  }
}

/* The rank's own row tiles' work and its tile counts. */
static void rank_rows(const eval_ctx *e, const pass_data *pd, int32_t tr_r, fm_work *rows,
                      fm_tile_counts *c) {
  const fm_cp_plan *p = e->p;
  memset(c, 0, sizeof *c);
  for (int32_t s = 0; s < p->nsets; s++) {
    int32_t k = 0;
    for (int32_t rt = 0; rt < pd->tr; rt++) {
      if (e->pre[rt + 1] == e->pre[rt]) continue;
      int64_t at = (int64_t)s * pd->tr + rt;
      fm_work w = pd->rows[at];
      rows[(int64_t)s * tr_r + k++] = w;
      c->minmax[FM_TILE_MASKED] += pd->tc - w.visited;
      c->minmax[FM_TILE_PARTIAL] += w.partial;
      c->minmax[FM_TILE_UNMASKED] += w.visited - w.partial;
      c->exact[FM_TILE_MASKED] += pd->xmasked[at];
      c->exact[FM_TILE_PARTIAL] += pd->xpartial[at];
      c->exact[FM_TILE_UNMASKED] += pd->tc - pd->xmasked[at] - pd->xpartial[at];
    }
  }
  c->total = (int64_t)p->nsets * tr_r * pd->tc;
  c->partial_but_masked = c->exact[FM_TILE_MASKED] - c->minmax[FM_TILE_MASKED];
  c->partial_but_unmasked = c->exact[FM_TILE_UNMASKED] - c->minmax[FM_TILE_UNMASKED];
  c->sparsity = c->total ? (double)c->minmax[FM_TILE_MASKED] / (double)c->total : 0;
  c->sparsity_exact = c->total ? (double)c->exact[FM_TILE_MASKED] / (double)c->total : 0;
}

/* ------------------------------------------------------------ the executor's own kernels */

/* HBM bytes per row of a rank that cp-run's small kernels move (each reads
 * and writes its tensors once), in units of u = B x H x D x 2 bytes (one
 * bf16 row of one tensor) and l = B x H x 4 bytes (one fp32 LSE row), from
 * kernels/fm_cp_gpu.cu and kernels/fm_sm90_bwd.cu:
 *   MERGE0  the first merge_kernel of the forward: O (bf16) read, fp32 O
 *           written (3u); LSE read, written (2l)
 *   MERGE   a later one: fp32 O also read (5u); the LSE too (3l)
 *   SUM0    seg_kernel copying bf16 into fp32 (3u), per tensor: dQ at step 0
 *           (ring), the own dK, dV (all-gather)
 *   SUM     seg_kernel adding bf16 into fp32 (5u), per tensor: dQ at a later
 *           step, the OWN item's dK, dV, every dK, dV partial got back
 *   CONV    to_bf16_kernel, fp32 read, bf16 written (3u), per tensor
 *   BWDROWS what every sm90 backward launch does over its Sq rows besides the
 *           kernel: prep_kernel (O, dO read: 2u; LSE read, LSE2 and D
 *           written: 3l), the fp32 dQ accumulator zeroed (2u) and converted
 *           to bf16 (3u): 7u + 3l. The all-gather's one launch has it in the
 *           timing model's fit; each further ring step adds it once more. */
enum { MERGE0_U = 3, MERGE0_L = 2, MERGE_U = 5, MERGE_L = 3, SUM0_U = 3, SUM_U = 5, CONV_U = 3,
       BWDROWS_U = 7, BWDROWS_L = 3 };

/* Microseconds to move `rows` rows of nu x u + nl x l bytes through HBM at
 * the profile's bandwidth (hbm_gbs, the timing model's floor: 4800 GB/s on
 * the H200, its specification); 0 without a profile. */
static double hbm_us(const eval_ctx *e, int64_t rows, int nu, int nl) {
  const fm_cp_summary *s = &e->p->sum;
  const fm_gpu_profile *prof = e->o->profile;
  double u = (double)s->kv_row_bytes / 2, l = (double)(s->batch * s->heads * 4);
  return prof && prof->hbm_gbs > 0 ? (double)rows * (nu * u + nl * l) / (prof->hbm_gbs * 1e3) : 0;
}

/* The stream operations of one sm90 launch besides its kernels priced by
 * bytes (kernels/fm_attn.cu, fm_sm90.cu, fm_sm90_bwd.cu), each a small kernel
 * or memset: OP_US its duration and the gap before the next one, GAP_US the
 * gap alone (what a kernel priced by its bytes adds). Measured: CUPTI kernel
 * records of 10 timed launches on an H200
 * (notebooks/data/h200_causal_document_8k/timeline.json): tile_bounds_kernel
 * 2.336 us (median), the next kernel 1.008 us after it. */
#define OP_US (2.336 + 1.008)
#define GAP_US 1.008
/* CUB's radix sort of n items of end_bit bits (its tuning: one kernel up to
 * a tile of 256 x 19 items; else histogram, exclusive sum, and a lookback
 * memset and one onesweep kernel per 8-bit digit). */
static int sort_ops(int64_t n, int end_bit) { return n <= 256 * 19 ? 1 : 2 + 2 * ((end_bit + 7) / 8); }

/* Fixed microseconds of one more ring launch over the rank's rows, counted:
 * forward, tile_bounds, row_work, item_keys, the sort (key: the head above 32
 * bits), the counter memset, each OP_US, and the kernel and merge_kernel each
 * GAP_US; backward, tile_bounds and the counter memset OP_US, prep_kernel, the
 * dQ accumulator's memset, the kernel, dq_convert_kernel and the dQ sum each
 * GAP_US (their bytes: BWDROWS, SUM). */
double fm_cp_launch_ops_us(int pass, int64_t items, int64_t bh) {
  if (pass == FM_CP_BWD) return 2 * OP_US + 5 * GAP_US;
  int end_bit = 33;
  while (end_bit < 64 && (bh >> (end_bit - 32))) end_bit++;
  return (4 + sort_ops(items, end_bit)) * OP_US + 2 * GAP_US;
}

/* What a ring step past the first adds to its own launch's prediction
 * (rank_steps): the operations counted (fm_cp_launch_ops_us) where they exceed
 * the timing model's launch_us (the intercept of the calibration's launches,
 * whose spans hold the same operations); backward, the launch's row work
 * (BWDROWS: the calibration's launches have Sq = Sk, so their fit prices it
 * by the keys, and a step's keys are a part of the rows'). */
static double ring_step_extra_us(const eval_ctx *e, int pass, int64_t rows, const fm_timing_result *res) {
  const fm_cp_summary *s = &e->p->sum;
  double ops = fm_cp_launch_ops_us(pass, res->items, (int64_t)s->batch * s->heads);
  double extra = ops > res->launch_us ? ops - res->launch_us : 0;
  return pass == FM_CP_BWD ? extra + hbm_us(e, rows, BWDROWS_U, BWDROWS_L) : extra;
}

/* What cp-run's event window around one of a rank's launches holds beyond the
 * timing model's prediction of the launch (us): the small kernels and gaps of
 * the pass around the attention kernel, beyond the profile's launch_us (the
 * calibration times kernels by CUPTI). Measured on cp-run's one-GPU runs at
 * 16K, where launches are short enough to show it (docs/DESIGN.md, "The
 * exchange model"); every rank launch (the all-gather's, each ring step's)
 * carries it, and the one-GPU run's (one_gpu). */
static double window_us(int pass) { return pass == FM_CP_FWD ? FM_CP_WINDOW_US_FWD : FM_CP_WINDOW_US_BWD; }

/* Whether segment k is in rank r's ring step on source q's keys: one of q's
 * that r needs, or, when q = r, any of r's own (cp-run launches a step over
 * them, docs/DESIGN.md, "cp-run"). */
static int step_segment(const eval_ctx *e, int32_t r, int32_t q, int32_t k) {
  return e->segs[k].rank == q && (q == r || e->need[(int64_t)r * e->nseg + k]);
}

/* Adds the spans (global row tiles) to d, indexed by the rank's own row tiles
 * (e->pre: a span maps onto the consecutive own tiles it holds). */
static void add_spans_local(int32_t *d, const int32_t *pre, const fm_tile_span *sp, int n) {
  for (int k = 0; k < n; k++) d[pre[sp[k].begin]]++, d[pre[sp[k].end]]--;
}

/* The work of rank r's step on source q's keys into w (allocated here; free
 * with fm_timing_work_free): per own row tile the step's key tiles it visits
 * and how many are PARTIAL (the pass's spans restricted to the step's key
 * tiles, summed in difference arrays over the own row tiles), per step key
 * tile its column of the own rows, the key columns visited. O(the step's key
 * tiles + the own row tiles) a set. */
static fm_status step_work(eval_ctx *e, int32_t r, int pass, int32_t q, int32_t tr_r, fm_timing_work *w,
                           fm_err *err) {
  const fm_cp_plan *p = e->p;
  const pass_data *pd = &p->pass[pass];
  const fm_cp_rank *rk = &e->out[r];
  const int32_t S = p->sum.seqlen;
  int32_t tc = 0;
  int64_t sk = 0;
  for (int32_t i = e->rank_start[q]; i < e->rank_start[q + 1]; i++)
    if (step_segment(e, r, q, e->by_rank[i])) {
      const fm_cp_segment *g = &e->segs[e->by_rank[i]];
      tc += (int32_t)(((int64_t)g->row1 + pd->bc - 1) / pd->bc - g->row0 / pd->bc);
      sk += g->row1 - g->row0;
    }
  *w = (fm_timing_work){.sq = (int32_t)rk->rows, .sk = (int32_t)sk, .br = pd->br, .bc = pd->bc, .tr = tr_r,
                        .tc = tc, .nb = p->nb, .nh = p->nh, .causal = q == r && rank_causal(e, r)};
  w->rows = malloc(sizeof *w->rows * (size_t)p->nsets * (size_t)(tr_r > 0 ? tr_r : 1));
  w->cols = malloc(sizeof *w->cols * (size_t)p->nsets * (size_t)(tc > 0 ? tc : 1));
  w->kv_cols = calloc((size_t)p->nsets, sizeof *w->kv_cols);
  if (!w->rows || !w->cols || !w->kv_cols)
    return fm_fail(err, FM_ENOMEM, "cannot allocate the work of rank %d's step on rank %d's keys", r, q);
  int64_t visited = 0, partial = 0;
  int32_t *dm = e->sdiff, *dt = e->sdiff + tr_r + 1;
  for (int32_t st = 0; st < p->nsets; st++) {
    memset(e->sdiff, 0, sizeof *e->sdiff * 2 * ((size_t)tr_r + 1));
    int32_t j = 0;
    for (int32_t i = e->rank_start[q]; i < e->rank_start[q + 1]; i++) {
      if (!step_segment(e, r, q, e->by_rank[i])) continue;
      const fm_cp_segment *g = &e->segs[e->by_rank[i]];
      for (int32_t ct = g->row0 / pd->bc; (int64_t)ct * pd->bc < g->row1; ct++) {
        int64_t at = (int64_t)st * pd->tc + ct;
        const fm_tile_span *sp = pd->spans + at * 4;
        int32_t m = in_spans(e->pre, sp, pd->nspans[at * 2]), t = in_spans(e->pre, sp + 2, pd->nspans[at * 2 + 1]);
        w->cols[(int64_t)st * tc + j++] = (fm_work){tr_r - m, t - m};
        if (tr_r - m > 0) w->kv_cols[st] += key_tile_width(S, pd->bc, ct);
        add_spans_local(dm, e->pre, sp, pd->nspans[at * 2]);
        add_spans_local(dt, e->pre, sp + 2, pd->nspans[at * 2 + 1]);
      }
    }
    for (int32_t i = 0, M = 0, T = 0; i < tr_r; i++) {
      M += dm[i], T += dt[i];
      w->rows[(int64_t)st * tr_r + i] = (fm_work){tc - M, T - M};
      visited += tc - M, partial += T - M;
    }
  }
  fm_tile_counts *c = &w->counts;
  c->total = (int64_t)p->nsets * tr_r * tc;
  c->minmax[FM_TILE_MASKED] = c->total - visited;
  c->minmax[FM_TILE_PARTIAL] = partial;
  c->minmax[FM_TILE_UNMASKED] = visited - partial;
  c->sparsity = c->total ? (double)c->minmax[FM_TILE_MASKED] / (double)c->total : 0;
  return FM_OK;
}

/* Rank r's ring steps of one pass, each predicted by the timing model as the
 * launch cp-run makes of it (step_work: the rank's rows against the step's
 * keys alone), a step past the first with its extra (ring_step_extra_us):
 * e->step_us[pass][q] and its items e->step_items[pass][q] (NaN and 0: no
 * step on q's keys, or no time without a profile). */
static fm_status rank_steps(eval_ctx *e, int32_t r, int pass, fm_err *err) {
  const fm_cp_plan *p = e->p;
  const pass_data *pd = &p->pass[pass];
  const fm_gpu_profile *prof = e->o->profile;
  fm_timing_problem pb = pass_problem(&p->sum, pass);
  for (int32_t q = 0; q < e->ranks; q++) e->step_us[pass][q] = NAN, e->step_items[pass][q] = 0;
  if (!pd->present || !prof || !fm_profile_coef(prof, pb.pass, pb.head_dim)) return FM_OK;
  int32_t tr_r = rank_row_tiles(e, pd, r);
  fm_status st = FM_OK;
  for (int32_t q = 0; st == FM_OK && q < e->ranks; q++) {
    if (q != r && e->src_rows[q] == 0) continue;
    fm_timing_work w;
    fm_timing_result res;
    st = step_work(e, r, pass, q, tr_r, &w, err);
    if (st == FM_OK && w.tc > 0) st = fm_timing_predict(prof, &w, &pb, &res, err);
    if (st == FM_OK && w.tc > 0) {
      e->step_us[pass][q] = res.time_us + window_us(pass) +
                            (q != r ? ring_step_extra_us(e, pass, e->out[r].rows, &res) : 0);
      e->step_items[pass][q] = res.items;
    }
    fm_timing_work_free(&w);
  }
  return st;
}

/* One pass of rank r: its tiles, needs and, with a profile, its time on the
 * timing model (the work of its local mask, fm_cp_rank_mask). */
static fm_status rank_pass(eval_ctx *e, int32_t r, int pass, fm_err *err) {
  const fm_cp_plan *p = e->p;
  const pass_data *pd = &p->pass[pass];
  fm_cp_rank *rk = &e->out[r];
  rk->ms[pass] = e->ag_ms[pass][r] = NAN;
  if (!pd->present) return FM_OK;
  int32_t tr_r = rank_row_tiles(e, pd, r);
  fm_timing_work w = {.sq = (int32_t)rk->rows, .sk = p->sum.seqlen, .br = pd->br, .bc = pd->bc,
                      .tr = tr_r, .tc = pd->tc, .nb = p->nb, .nh = p->nh, .causal = rank_causal(e, r)};
  w.rows = malloc(sizeof *w.rows * (size_t)p->nsets * (size_t)(tr_r > 0 ? tr_r : 1));
  w.cols = malloc(sizeof *w.cols * (size_t)p->nsets * (size_t)pd->tc);
  w.kv_cols = calloc((size_t)p->nsets, sizeof *w.kv_cols);
  if (!w.rows || !w.cols || !w.kv_cols) {
    fm_timing_work_free(&w);
    return fm_fail(err, FM_ENOMEM, "cannot allocate the work of rank %d", r);
  }
  rank_rows(e, pd, tr_r, w.rows, &rk->tiles[pass]);
  rank_cols(e, pd, pass, r, tr_r, w.cols, w.kv_cols);
  w.counts = rk->tiles[pass];
  if (pass == FM_CP_FWD) rk->work = rk->tiles[pass].total - rk->tiles[pass].minmax[FM_TILE_MASKED];
  fm_status st = FM_OK;
  const fm_gpu_profile *prof = e->o->profile;
  if (prof && fm_profile_coef(prof, pass == FM_CP_FWD ? FM_PASS_FWD : FM_PASS_BWD, p->sum.head_dim)) {
    fm_timing_problem pb = pass_problem(&p->sum, pass);
    fm_timing_result res;
    st = fm_timing_predict(prof, &w, &pb, &res, err);
    rk->ms[pass] = (res.time_us + window_us(pass)) / 1e3;
    e->ag_ms[pass][r] = (fm_timing_time_in(fm_profile_coef(prof, pb.pass, pb.head_dim), p->sum.allgather_clock,
                                           &res) + window_us(pass)) / 1e3;
  }
  fm_timing_work_free(&w);
  return st;
}

/* ------------------------------------------------------------ the exchanges */

/* Rows the rank receives from each source, the segments and their runs
 * (consecutive in the source's storage: cp-run's ring sends a run as one
 * message, its all-gather each segment). */
static void rank_sources(eval_ctx *e, int32_t r) {
  const int32_t P = e->ranks;
  memset(e->src_rows, 0, sizeof *e->src_rows * (size_t)P);
  memset(e->src_segs, 0, sizeof *e->src_segs * (size_t)P);
  memset(e->src_runs, 0, sizeof *e->src_runs * (size_t)P);
  const uint8_t *need = e->need + (int64_t)r * e->nseg;
  for (int32_t q = 0; q < P; q++)
    for (int32_t i = e->rank_start[q], prev = 0; i < e->rank_start[q + 1]; i++) {
      int32_t k = e->by_rank[i];
      if (need[k]) {
        e->src_rows[q] += e->segs[k].row1 - e->segs[k].row0;
        e->src_segs[q]++;
        e->src_runs[q] += !prev;
      }
      prev = need[k];
    }
}

/* The rank's sources in ring order into e->src: each ring step's compute
 * (its share of the rank's visited tiles of the pass, one more launch for s
 * > 0, and the sum it feeds: the merge of its O and LSE, its dQ added), the
 * bytes and the messages of both exchanges, and the owner's sum of the
 * partials it gets back (2 tensors of SUM). */
static fm_status rank_model_src(eval_ctx *e, int32_t r, fm_err *err) {
  const int32_t P = e->ranks;
  const fm_cp_rank *rk = &e->out[r];
  const int64_t B = e->p->sum.batch;
  if (e->nsrc + P > e->cap) {
    int64_t cap = e->cap * 2 > e->nsrc + P ? e->cap * 2 : e->nsrc + P;
    fm_cp_model_src *x = realloc(e->src, sizeof *x * (size_t)cap);
    if (!x) return fm_fail(err, FM_ENOMEM, "cannot allocate the exchange model of %d ranks", P);
    e->src = x, e->cap = cap;
  }
  e->src_start[r] = e->nsrc;
  for (int pass = 0; pass < FM_CP_NPASSES; pass++) {
    fm_status st = rank_steps(e, r, pass, err);
    if (st != FM_OK) return st;
  }
  for (int32_t s = 0; s < P; s++) {
    int32_t q = (r - s + P) % P;
    if (s > 0 && e->src_rows[q] == 0) continue;
    fm_cp_model_src *x = &e->src[e->nsrc++];
    memset(x, 0, sizeof *x);
    x->s = s;
    for (int pass = 0; pass < FM_CP_NPASSES; pass++) {
      int first = s == 0, fwd = pass == FM_CP_FWD;
      x->us[pass] = e->step_us[pass][q] +
                    hbm_us(e, rk->rows, fwd ? (first ? MERGE0_U : MERGE_U) : (first ? SUM0_U : SUM_U),
                           fwd ? (first ? MERGE0_L : MERGE_L) : 0);
      /* its launch's items beside NCCL: forward the rank's row tiles, backward the step's key tiles */
      x->items[pass] = e->step_items[pass][q];
      x->rate[pass] = e->o->profile ? fm_cp_contended_rate(x->items[pass], e->o->profile->sms,
                                                           e->p->sum.comm_sm_frac) : 0;
    }
    if (s == 0) continue;
    x->bytes = (double)e->src_rows[q] * (double)e->p->sum.kv_row_bytes;
    x->back_us = hbm_us(e, e->src_rows[q], 2 * SUM_U, 0);
    int32_t ag = (int32_t)(2 * B * e->src_segs[q]), ring = (int32_t)(2 * B * e->src_runs[q]);
    x->msgs[FM_CP_ALLGATHER][0] = x->msgs[FM_CP_ALLGATHER][1] = ag;
    x->msgs[FM_CP_RING][0] = ring;
    x->msgs[FM_CP_RING][1] = (int32_t)(2 * B); /* the partials: concatenated on both sides */
    e->out[r].kv_messages[FM_CP_ALLGATHER] += ag;
    e->out[r].kv_messages[FM_CP_RING] += ring;
    e->send_rows[q] += e->src_rows[q];
    if (e->src_rows[q] > e->send_max[q]) e->send_max[q] = e->src_rows[q];
    if (e->src_rows[q] > e->max_src[r]) e->max_src[r] = e->src_rows[q];
  }
  e->src_start[r + 1] = e->nsrc;
  return FM_OK;
}

/* The rank's K/V needs in bytes and its sources for the exchange model. */
static fm_status rank_costs(eval_ctx *e, int32_t r, fm_err *err) {
  fm_cp_rank *rk = &e->out[r];
  rank_sources(e, r);
  for (int32_t q = 0; q < e->ranks; q++) {
    rk->kv_recv_rows += e->src_rows[q];
    rk->kv_sources += e->src_rows[q] > 0;
  }
  rk->kv_recv_bytes = rk->kv_recv_rows * e->p->sum.kv_row_bytes;
  /* the sums and conversions outside the steps (the constants above) */
  fm_cp_model_rank *mr = &e->mrank[r];
  mr->own_us = hbm_us(e, rk->rows, 2 * SUM_U, 0);
  mr->copy_us = hbm_us(e, rk->rows, 2 * SUM0_U, 0);
  mr->tail_us[FM_CP_RING][FM_CP_FWD] = hbm_us(e, rk->rows, CONV_U, 0);         /* O */
  mr->tail_us[FM_CP_RING][FM_CP_BWD] = hbm_us(e, rk->rows, 3 * CONV_U, 0);     /* dQ, dK, dV */
  mr->tail_us[FM_CP_ALLGATHER][FM_CP_FWD] = 0;                                 /* O is bf16 */
  mr->tail_us[FM_CP_ALLGATHER][FM_CP_BWD] = hbm_us(e, rk->rows, 2 * CONV_U, 0); /* dK, dV */
  return rank_model_src(e, r, err);
}

/* Peak bytes per GPU of each exchange, as cp-run allocates them (a row is
 * B x H x D x 2 bytes, u): Q, dO, O, dQ, dK, dV in bf16, the fp32 dK/dV
 * sums, LSE; the all-gather adds K, V and their partials for all S rows and
 * the partials received back; the ring its own K, V, two steps' K/V and
 * partials, one received partial, fp32 O and dQ sums and a step's O, dQ, LSE. */
static void rank_memory(const eval_ctx *e, int32_t r) {
  const fm_cp_summary *s = &e->p->sum;
  fm_cp_rank *rk = &e->out[r];
  const int64_t u = s->kv_row_bytes / 2, lse = s->batch * s->heads * 4, R = rk->rows;
  const int64_t base = R * (10 * u + lse), cols = e->max_src[r];
  rk->cost[FM_CP_ALLGATHER].mem_bytes = base + (4 * (int64_t)s->seqlen + 2 * e->send_rows[r]) * u;
  rk->cost[FM_CP_RING].mem_bytes = base + R * (8 * u + lse) +
                                   (4 * cols + 4 * (cols > R ? cols : R) + 2 * e->send_max[r]) * u;
}

/* The ranks' steps from the model's sources and the ring's step windows
 * (step_us, per pass; NULL: no times) into the plan (p->steps[sh]). */
static fm_status keep_steps(fm_cp_plan *p, eval_ctx *e, fm_cp_sharding sh, double *const step_us[FM_CP_NPASSES],
                            fm_err *err) {
  fm_cp_ring_step *st = calloc((size_t)(e->nsrc > 0 ? e->nsrc : 1), sizeof *st);
  if (!st) return fm_fail(err, FM_ENOMEM, "cannot allocate the ring steps of %d ranks", e->ranks);
  p->steps[sh] = st;
  for (int32_t r = 0; r < e->ranks; r++) {
    fm_cp_rank *rk = &e->out[r];
    rk->steps = st + e->src_start[r];
    rk->nsteps = (int32_t)(e->src_start[r + 1] - e->src_start[r]);
    for (int64_t k = e->src_start[r]; k < e->src_start[r + 1]; k++) {
      const fm_cp_model_src *c = &e->src[k];
      st[k] = (fm_cp_ring_step){.source = (r - c->s + e->ranks) % e->ranks, .s = c->s,
                           .kv_bytes = (int64_t)c->bytes};
      for (int pass = 0; pass < FM_CP_NPASSES; pass++) {
        int times = step_us[pass] && !isnan(rk->ms[pass]);
        st[k].ms[pass] = times ? c->us[pass] / 1e3 : NAN;
        st[k].ring_ms[pass] = times ? step_us[pass][k] / 1e3 : NAN;
        st[k].items[pass] = c->items[pass];
      }
    }
  }
  return FM_OK;
}

/* Rank r's compute as cp-run measures it, per exchange and pass. */
static void rank_compute(const eval_ctx *e, int32_t r) {
  fm_cp_rank *rk = &e->out[r];
  for (int pass = 0; pass < FM_CP_NPASSES; pass++) {
    rk->cost[FM_CP_ALLGATHER].compute_ms[pass] = e->ag_ms[pass][r];
    double t = isnan(rk->ms[pass]) ? NAN : 0;
    for (int32_t i = 0; i < rk->nsteps; i++) t += rk->steps[i].ring_ms[pass];
    rk->cost[FM_CP_RING].compute_ms[pass] = t;
  }
}

/* Both exchanges' walls per rank and pass from the model (NaN for a pass
 * some rank has no time for), their compute and their memory. */
static fm_status exchange_costs(fm_cp_plan *p, eval_ctx *e, fm_cp_sharding sh, fm_err *err) {
  const int32_t P = e->ranks;
  const fm_cp_summary *s = &e->p->sum;
  fm_cp_model m = {.ranks = P, .start = e->src_start, .src = e->src, .link_gbs = s->link_gbs,
                   .link_us = s->link_us, .gpu_gbs = s->gpu_gbs, .rank = e->mrank,
                   .comm_sm_frac = s->comm_sm_frac};
  double *wall = malloc(sizeof *wall * (size_t)P), *comp = malloc(sizeof *comp * (size_t)P);
  double *step_us[FM_CP_NPASSES] = {NULL, NULL}, *buf = malloc(sizeof *buf * (size_t)(2 * e->nsrc + 1));
  fm_status st = wall && comp && buf ? FM_OK : fm_fail(err, FM_ENOMEM, "cannot allocate the costs of %d ranks", P);
  for (int32_t r = 0; r < P; r++) rank_memory(e, r);
  for (int pass = 0; st == FM_OK && pass < FM_CP_NPASSES; pass++) {
    int times = 1;
    for (int32_t r = 0; r < P; r++) { /* the all-gather's launches: at its clock */
      comp[r] = e->ag_ms[pass][r] * 1e3;
      times &= !isnan(comp[r]);
    }
    if (times) step_us[pass] = buf + pass * e->nsrc;
    for (int x = 0; st == FM_OK && x < FM_CP_NEXCHANGES; x++) {
      if (times)
        st = x == FM_CP_RING ? fm_cp_model_ring_steps(&m, pass, wall, step_us[pass], err)
                             : fm_cp_model_allgather(&m, pass, comp, wall, err);
      for (int32_t r = 0; st == FM_OK && r < P; r++) e->out[r].cost[x].ms[pass] = times ? wall[r] / 1e3 : NAN;
    }
  }
  if (st == FM_OK) st = keep_steps(p, e, sh, step_us, err);
  for (int32_t r = 0; st == FM_OK && r < P; r++) {
    rank_compute(e, r);
    for (int x = 0; x < FM_CP_NEXCHANGES; x++) {
      fm_cp_cost *c = &e->out[r].cost[x];
      c->step_ms = isnan(e->out[r].compute_ms) ? NAN : 0;
      for (int pass = 0; pass < FM_CP_NPASSES; pass++)
        if (!isnan(c->ms[pass]) && !isnan(c->step_ms)) c->step_ms += c->ms[pass];
    }
  }
  free(wall);
  free(comp);
  free(buf);
  return st;
}

/* ------------------------------------------------------------ one sharding */

static void eval_free(eval_ctx *e) {
  free(e->by_rank);
  free(e->rank_start);
  for (int k = 0; k < FM_CP_NPASSES; k++) {
    free(e->kseg[k]);
    free(e->vis[k]);
    free(e->ag_ms[k]);
    free(e->step_us[k]);
    free(e->step_items[k]);
  }
  free(e->pre);
  free(e->sdiff);
  free(e->src_rows);
  free(e->src_segs);
  free(e->src_runs);
  free(e->src);
  free(e->src_start);
  free(e->send_rows);
  free(e->send_max);
  free(e->max_src);
  free(e->mrank);
}

/* The segments grouped by rank, the segment of every key tile, scratch. */
static fm_status eval_init(eval_ctx *e, fm_err *err) {
  const fm_cp_plan *p = e->p;
  int32_t P = e->ranks, maxtr = 1;
  e->by_rank = malloc(sizeof *e->by_rank * (size_t)e->nseg);
  e->rank_start = calloc((size_t)P + 1, sizeof *e->rank_start);
  e->src_rows = malloc(sizeof *e->src_rows * (size_t)P);
  e->src_segs = malloc(sizeof *e->src_segs * (size_t)P);
  e->src_runs = malloc(sizeof *e->src_runs * (size_t)P);
  e->src_start = calloc((size_t)P + 1, sizeof *e->src_start);
  e->send_rows = calloc((size_t)P, sizeof *e->send_rows);
  e->send_max = calloc((size_t)P, sizeof *e->send_max);
  e->max_src = calloc((size_t)P, sizeof *e->max_src);
  e->mrank = calloc((size_t)P, sizeof *e->mrank);
  int ok = e->by_rank && e->rank_start && e->src_rows && e->src_segs && e->src_runs && e->src_start &&
           e->send_rows && e->send_max && e->max_src && e->mrank;
  for (int k = 0; k < FM_CP_NPASSES; k++) {
    const pass_data *pd = &p->pass[k];
    e->vis[k] = calloc((size_t)P, sizeof *e->vis[k]);
    e->ag_ms[k] = calloc((size_t)P, sizeof *e->ag_ms[k]);
    e->step_us[k] = calloc((size_t)P, sizeof *e->step_us[k]);
    e->step_items[k] = calloc((size_t)P, sizeof *e->step_items[k]);
    ok = ok && e->step_us[k] && e->step_items[k];
    e->kseg[k] = pd->present ? malloc(sizeof *e->kseg[k] * (size_t)pd->tc) : NULL;
    ok = ok && e->vis[k] && e->ag_ms[k] && (!pd->present || e->kseg[k]);
    if (pd->present && pd->tr > maxtr) maxtr = pd->tr;
    for (int32_t ct = 0, s = 0; ok && pd->present && ct < pd->tc; ct++) {
      while ((int64_t)ct * pd->bc >= e->segs[s].row1) s++;
      e->kseg[k][ct] = s;
    }
  }
  e->pre = malloc(sizeof *e->pre * ((size_t)maxtr + 1));
  e->sdiff = malloc(sizeof *e->sdiff * 2 * ((size_t)maxtr + 1));
  if (!ok || !e->pre || !e->sdiff) return fm_fail(err, FM_ENOMEM, "cannot allocate the plan of %d ranks", P);
  for (int32_t k = 0; k < e->nseg; k++) e->rank_start[e->segs[k].rank + 1]++;
  for (int32_t r = 0; r < P; r++) e->rank_start[r + 1] += e->rank_start[r];
  int32_t *fill = calloc((size_t)P, sizeof *fill);
  if (!fill) return fm_fail(err, FM_ENOMEM, "cannot allocate the plan of %d ranks", P);
  for (int32_t k = 0; k < e->nseg; k++) {
    int32_t r = e->segs[k].rank;
    e->by_rank[e->rank_start[r] + fill[r]++] = k;
  }
  free(fill);
  return FM_OK;
}

static double ratio_max_mean(double max, double sum, int32_t n) {
  return sum > 0 ? max / (sum / n) : NAN;
}

/* What the ranks add up to: imbalance, step, volume, the exchange chosen. */
static void sharding_finish(const fm_cp_plan *p, fm_cp_sharding_plan *sp) {
  int32_t P = p->sum.ranks;
  double tmax = 0, tsum = 0, wmax = 0, wsum = 0;
  int times = p->sum.have_times;
  for (int x = 0; x < FM_CP_NEXCHANGES; x++) sp->cost[x] = (fm_cp_cost){{0, 0}, {0, 0}, 0, 0};
  for (int32_t r = 0; r < P; r++) {
    const fm_cp_rank *rk = &sp->ranks[r];
    if (!isnan(rk->compute_ms) && rk->compute_ms > tmax) tmax = rk->compute_ms;
    tsum += isnan(rk->compute_ms) ? 0 : rk->compute_ms;
    wmax = (double)rk->work > wmax ? (double)rk->work : wmax;
    wsum += (double)rk->work;
    sp->kv_recv_bytes += rk->kv_recv_bytes;
    if (rk->kv_recv_bytes > sp->kv_recv_bytes_max) sp->kv_recv_bytes_max = rk->kv_recv_bytes;
    for (int x = 0; x < FM_CP_NEXCHANGES; x++) {
      fm_cp_cost *c = &sp->cost[x];
      for (int k = 0; k < FM_CP_NPASSES; k++) {
        c->ms[k] = fmax(c->ms[k], rk->cost[x].ms[k]);
        c->compute_ms[k] = fmax(c->compute_ms[k], rk->cost[x].compute_ms[k]);
      }
      if (rk->cost[x].mem_bytes > c->mem_bytes) c->mem_bytes = rk->cost[x].mem_bytes;
    }
  }
  sp->imbalance_time = times ? ratio_max_mean(tmax, tsum, P) : NAN;
  sp->imbalance_work = ratio_max_mean(wmax, wsum, P);
  sp->step_compute_ms = times ? tmax : NAN;
  sp->efficiency = times && tmax > 0 ? p->sum.one_gpu_total_ms / (P * tmax) : NAN;
  for (int x = 0; x < FM_CP_NEXCHANGES; x++) {
    sp->fits[x] = sp->cost[x].mem_bytes <= p->sum.mem_budget;
    for (int k = 0; k < FM_CP_NPASSES; k++) { /* a barrier between passes: the slowest of each */
      if (!times || isnan(p->sum.one_gpu_ms[k])) sp->cost[x].ms[k] = sp->cost[x].compute_ms[k] = NAN;
      if (!isnan(sp->cost[x].ms[k])) sp->cost[x].step_ms += sp->cost[x].ms[k];
    }
    if (!times) sp->cost[x].step_ms = NAN;
  }
  /* the faster that fits (ties within 1%: the smaller memory); none fits: the smaller memory */
  const fm_cp_cost *a = &sp->cost[FM_CP_ALLGATHER], *b = &sp->cost[FM_CP_RING];
  int by_mem = a->mem_bytes <= b->mem_bytes ? FM_CP_ALLGATHER : FM_CP_RING;
  if (sp->fits[FM_CP_ALLGATHER] != sp->fits[FM_CP_RING])
    sp->exchange = sp->fits[FM_CP_ALLGATHER] ? FM_CP_ALLGATHER : FM_CP_RING;
  else if (!sp->fits[FM_CP_ALLGATHER] || !times || fabs(a->step_ms - b->step_ms) <= 0.01 * fmin(a->step_ms, b->step_ms))
    sp->exchange = by_mem;
  else
    sp->exchange = a->step_ms < b->step_ms ? FM_CP_ALLGATHER : FM_CP_RING;
  sp->step_ms = sp->cost[sp->exchange].step_ms;
  sp->efficiency_exchange = times && sp->step_ms > 0 ? p->sum.one_gpu_total_ms / (P * sp->step_ms) : NAN;
}

/* Every rank of one sharding, both passes, then the exchanges. */
static fm_status sharding_eval(fm_cp_plan *p, const fm_cp_options *o, fm_cp_sharding s, fm_err *err) {
  fm_cp_sharding_plan *sp = &p->sp[s];
  int32_t P = p->sum.ranks, nseg = sp->nsegments;
  char what[96];
  snprintf(what, sizeof what, "the K/V needs of %d ranks x %d segments", P, nseg);
  fm_status st = fm_mem_check(fm_mem_mul(P, nseg), what, err);
  if (st != FM_OK) return st;
  p->ranks[s] = calloc((size_t)P, sizeof *p->ranks[s]);
  p->need[s] = calloc((size_t)P * (size_t)nseg, 1);
  if (!p->ranks[s] || !p->need[s]) return fm_fail(err, FM_ENOMEM, "cannot allocate %s", what);
  eval_ctx e = {.p = p, .o = o, .segs = p->segs[s], .nseg = nseg, .ranks = P, .out = p->ranks[s],
                .need = p->need[s]};
  st = eval_init(&e, err);
  for (int32_t k = 0; k < nseg; k++) {
    p->ranks[s][e.segs[k].rank].rows += e.segs[k].row1 - e.segs[k].row0;
    p->ranks[s][e.segs[k].rank].segments++;
  }
  for (int32_t r = 0; st == FM_OK && r < P; r++) {
    fm_cp_rank *rk = &p->ranks[s][r];
    for (int pass = 0; st == FM_OK && pass < FM_CP_NPASSES; pass++) st = rank_pass(&e, r, pass, err);
    rk->compute_ms = NAN;
    for (int pass = 0; pass < FM_CP_NPASSES; pass++)
      if (!isnan(rk->ms[pass])) rk->compute_ms = (isnan(rk->compute_ms) ? 0 : rk->compute_ms) + rk->ms[pass];
    if (st == FM_OK) st = rank_costs(&e, r, err);
  }
  if (st == FM_OK) st = exchange_costs(p, &e, s, err);
  eval_free(&e);
  sp->sharding = s;
  sp->segments = p->segs[s];
  sp->ranks = p->ranks[s];
  sp->need = p->need[s];
  if (st == FM_OK) sharding_finish(p, sp);
  return st;
}

/* ------------------------------------------------------------ the plan */

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static int64_t lcm64(int64_t a, int64_t b) { return a && b ? a / gcd64(a, b) * b : (a ? a : b); }

fm_status fm_cp_clock_parse(const char *text, fm_clock *clock, fm_clock *allgather_clock, fm_err *err) {
  if (text && !strcmp(text, "auto")) {
    *clock = FM_CLOCK_SUSTAINED;
    *allgather_clock = FM_CLOCK_BURST;
    return FM_OK;
  }
  fm_clock c;
  if (fm_clock_parse(text, &c, NULL) != FM_OK)
    return fm_fail(err, FM_EINVAL, "clock '%s': expected auto (the all-gather's launches at the burst clock, "
                   "the rest sustained), burst or sustained", text ? text : "");
  *clock = *allgather_clock = c;
  return FM_OK;
}

const char *fm_cp_clock_name(fm_clock clock, fm_clock allgather_clock) {
  if (clock == allgather_clock) return fm_clock_name(clock);
  return clock == FM_CLOCK_SUSTAINED && allgather_clock == FM_CLOCK_BURST ? "auto" : "mixed";
}

/* Options, the kernel and its tiles, the granule and the chunk into p->sum. */
static fm_status plan_setup(fm_cp_plan *p, const fm_colmask *m, const fm_cp_options *o, fm_err *err) {
  fm_cp_summary *s = &p->sum;
  int32_t sq = fm_colmask_sq(m);
  if (sq != fm_colmask_sk(m))
    return fm_fail(err, FM_EINVAL, "context parallelism splits one sequence: it needs Sq = Sk (the "
                   "mask is %d x %d)", sq, fm_colmask_sk(m));
  if (o->ranks < 1 || o->ranks > FM_CP_MAX_RANKS)
    return fm_fail(err, FM_EINVAL, "--ranks %d: expected 1..%d", o->ranks, FM_CP_MAX_RANKS);
  s->seqlen = sq;
  s->ranks = o->ranks;
  s->head_dim = o->head_dim ? o->head_dim : 128;
  s->batch = o->batch ? o->batch : 1;
  s->heads = o->heads ? o->heads : 1;
  s->link_gbs = o->link_gbs > 0 ? o->link_gbs : FM_CP_DEFAULT_LINK_GBS;
  s->gpu_gbs = o->gpu_gbs > 0 ? o->gpu_gbs : o->gpu_gbs < 0 ? 0 : FM_CP_GPU_GBS;
  s->link_us = o->link_us > 0 ? o->link_us : FM_CP_DEFAULT_LINK_US;
  if (o->comm_sm_frac >= 1)
    return fm_fail(err, FM_EINVAL, "the SMs NCCL holds, %g of the GPU: expected less than 1", o->comm_sm_frac);
  s->clock = o->clock;
  s->allgather_clock = o->allgather_clock;
  if ((unsigned)s->clock > FM_CLOCK_SUSTAINED || (unsigned)s->allgather_clock > FM_CLOCK_SUSTAINED)
    return fm_fail(err, FM_EINVAL, "clock states %d, %d: expected burst (0) or sustained (1)", (int)s->clock,
                   (int)s->allgather_clock);
  s->comm_sm_frac = o->comm_sm_frac > 0 ? o->comm_sm_frac : o->comm_sm_frac < 0 ? 0 : FM_CP_DEFAULT_COMM_SM_FRAC;
  s->mem_budget = o->mem_budget > 0 ? o->mem_budget : FM_CP_DEFAULT_MEM_BUDGET;
  s->kv_row_bytes = s->heads * s->head_dim * 2 * 2 * s->batch;
  fm_kernel_id k = o->kernel;
  if (o->profile && k != FM_KERNEL_AUTO && k != o->profile->kernel)
    return fm_fail(err, FM_EINVAL, "the profile %s is for kernel %s, not %s", o->profile->name,
                   fm_kernel_get(o->profile->kernel)->name, fm_kernel_get(k)->name);
  if (o->profile) k = o->profile->kernel;
  fm_status st = k == FM_KERNEL_AUTO ? fm_kernel_auto(-1, 0, &k, err) : FM_OK;
  if (st == FM_OK) st = fm_kernel_tile_size(k, FM_PASS_FWD, s->head_dim, &s->br[0], &s->bc[0], err);
  if (st != FM_OK) return st;
  s->kernel = k;
  if (fm_kernel_tile_size(k, FM_PASS_BWD, s->head_dim, &s->br[1], &s->bc[1], NULL) != FM_OK)
    s->br[1] = s->bc[1] = 0;
  int64_t g = lcm64(lcm64(s->br[0], s->bc[0]), lcm64(s->br[1], s->bc[1]));
  s->granule = (int32_t)g;
  int64_t chunk = o->chunk ? o->chunk : (FM_CP_DEFAULT_CHUNK + g - 1) / g * g;
  if (chunk < 1 || chunk % g || chunk > FM_MAX_SEQLEN)
    return fm_fail(err, FM_EINVAL, "--chunk %lld: expected a multiple of %lld rows (the kernel's tiles: "
                   "%d x %d forward, %d x %d backward)", (long long)o->chunk, (long long)g, s->br[0],
                   s->bc[0], s->br[1], s->bc[1]);
  s->chunk = (int32_t)chunk;
  s->chunks = (int32_t)((sq + chunk - 1) / chunk);
  p->nsets = fm_colmask_nsets(m);
  p->nb = fm_colmask_nb(m);
  p->nh = fm_colmask_nh(m);
  p->causal = fm_colmask_causal(m);
  return FM_OK;
}

/* The whole mask on one GPU as cp-run's one-GPU run times it: what `fmsim
 * predict` prints plus the window of its launch (window_us). */
static fm_status one_gpu(fm_cp_plan *p, const fm_colmask *m, const fm_gpu_profile *prof, fm_err *err) {
  fm_cp_summary *s = &p->sum;
  s->one_gpu_ms[0] = s->one_gpu_ms[1] = s->one_gpu_total_ms = NAN;
  s->have_times = prof != NULL;
  for (int k = 0; prof && k < FM_CP_NPASSES; k++) {
    fm_pass pass = k == FM_CP_FWD ? FM_PASS_FWD : FM_PASS_BWD;
    if (!p->pass[k].present || !fm_profile_coef(prof, pass, s->head_dim)) continue;
    fm_timing_work w;
    fm_timing_result res;
    fm_timing_problem pb = pass_problem(s, k);
    fm_status st = fm_timing_work_init(&w, m, s->br[k], s->bc[k], err);
    if (st == FM_OK) st = fm_timing_predict(prof, &w, &pb, &res, err);
    fm_timing_work_free(&w);
    if (st != FM_OK) return st;
    s->one_gpu_ms[k] = (res.time_us + window_us(k)) / 1e3;
    s->one_gpu_total_ms = (isnan(s->one_gpu_total_ms) ? 0 : s->one_gpu_total_ms) + s->one_gpu_ms[k];
  }
  if (prof && !fm_profile_coef(prof, FM_PASS_FWD, s->head_dim))
    return fm_fail(err, FM_EUNSUPPORTED, "profile %s has no forward coefficients for head dim %d",
                   prof->name, s->head_dim);
  return FM_OK;
}

static fm_status plan_build(fm_cp_plan *p, const fm_colmask *m, const fm_cp_options *o, fm_err *err) {
  fm_status st = plan_setup(p, m, o, err);
  for (int k = 0; st == FM_OK && k < FM_CP_NPASSES; k++) {
    pass_data *pd = &p->pass[k];
    pd->present = p->sum.br[k] > 0;
    pd->br = p->sum.br[k];
    pd->bc = p->sum.bc[k];
    if (!pd->present) continue;
    if (k == FM_CP_FWD) {
      int32_t tr = (int32_t)(((int64_t)p->sum.seqlen + pd->br - 1) / pd->br);
      int32_t tc = (int32_t)(((int64_t)p->sum.seqlen + pd->bc - 1) / pd->bc);
      p->sum.map_rows = tr < MAP_MAX ? tr : MAP_MAX;
      p->sum.map_cols = tc < MAP_MAX ? tc : MAP_MAX;
      p->map = calloc((size_t)p->sum.map_rows * (size_t)p->sum.map_cols, sizeof *p->map);
      if (!p->map) return fm_fail(err, FM_ENOMEM, "cannot allocate the work map");
    }
    st = pass_walk(p, m, pd, k == FM_CP_FWD, err);
    p->sum.tiles[k] = pd->counts;
  }
  if (st == FM_OK) map_finish(p);
  if (st == FM_OK) st = one_gpu(p, m, o->profile, err);
  unsigned want = o->shardings ? o->shardings : (1u << FM_CP_NSHARDINGS) - 1;
  shard_ctx c = {.plan = p, .o = o, .seqlen = p->sum.seqlen, .ranks = p->sum.ranks,
                 .granule = p->sum.granule};
  int planned = 0;
  fm_err first = {{0}};
  for (int s = 0; st == FM_OK && s < FM_CP_NSHARDINGS; s++) {
    if (!(want & (1u << s))) continue;
    int32_t n = 0;
    fm_err why = {{0}};
    st = shardings[s].build(&c, &p->segs[s], &n, &p->sp[s].exact_solver, &why);
    if (st == FM_EINVAL && !o->shardings) { /* all of them asked for: one that cannot cut these
                                                rows is left out, saying why */
      snprintf(p->skipped[s], sizeof p->skipped[s], "%.250s", why.msg);
      if (!first.msg[0]) first = why;
      free(p->segs[s]);
      p->segs[s] = NULL;
      st = FM_OK;
      continue;
    }
    if (st != FM_OK) {
      if (err) *err = why;
      break;
    }
    p->sp[s].nsegments = merge_segments(p->segs[s], n);
    st = sharding_eval(p, o, (fm_cp_sharding)s, err);
    p->have[s] = st == FM_OK;
    planned += p->have[s];
  }
  if (st == FM_OK && !planned) { /* none could: the first one's reason */
    if (err) *err = first;
    return FM_EINVAL;
  }
  return st;
}

const char *fm_cp_plan_skipped(const fm_cp_plan *p, fm_cp_sharding s) {
  return s >= 0 && s < FM_CP_NSHARDINGS && p->skipped[s][0] ? p->skipped[s] : NULL;
}

fm_status fm_cp_plan_create(const fm_colmask *m, const fm_cp_options *o, fm_cp_plan **out,
                            fm_err *err) {
  *out = NULL;
  fm_cp_plan *p = calloc(1, sizeof *p);
  if (!p) return fm_fail(err, FM_ENOMEM, "cannot allocate a plan");
  fm_status st = plan_build(p, m, o, err);
  for (int k = 0; k < FM_CP_NPASSES; k++) {
    free(p->pass[k].diff);
    p->pass[k].diff = NULL;
  }
  free(p->map_diff);
  p->map_diff = NULL;
  if (st != FM_OK) {
    fm_cp_plan_destroy(p);
    return st;
  }
  *out = p;
  return FM_OK;
}

void fm_cp_plan_destroy(fm_cp_plan *p) {
  if (!p) return;
  for (int k = 0; k < FM_CP_NPASSES; k++) pass_free(&p->pass[k]);
  for (int s = 0; s < FM_CP_NSHARDINGS; s++) {
    free(p->segs[s]);
    free(p->ranks[s]);
    free(p->need[s]);
    free(p->steps[s]);
  }
  free(p->map);
  free(p->map_diff);
  free(p);
}

const fm_cp_summary *fm_cp_plan_summary(const fm_cp_plan *p) { return &p->sum; }

const fm_cp_sharding_plan *fm_cp_plan_sharding(const fm_cp_plan *p, fm_cp_sharding s) {
  return s >= 0 && s < FM_CP_NSHARDINGS && p->have[s] ? &p->sp[s] : NULL;
}

fm_cp_sharding fm_cp_plan_best(const fm_cp_plan *p) {
  int best = -1;
  for (int s = 0; s < FM_CP_NSHARDINGS; s++) {
    if (!p->have[s]) continue;
    const fm_cp_sharding_plan *a = &p->sp[s], *b = best < 0 ? NULL : &p->sp[best];
    /* the fitting first; then the step (without times, the balance of visited tiles) */
    int fa = a->fits[a->exchange], fb = b ? b->fits[b->exchange] : 0;
    double ka = p->sum.have_times ? a->step_ms : a->imbalance_work;
    if (!b || fa > fb || (fa == fb && ka < (p->sum.have_times ? b->step_ms : b->imbalance_work))) best = s;
  }
  return (fm_cp_sharding)(best < 0 ? FM_CP_MASK_AWARE : best);
}

const float *fm_cp_plan_work_map(const fm_cp_plan *p) { return p->map; }
