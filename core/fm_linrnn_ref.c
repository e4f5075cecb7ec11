/* fm_linrnn_ref.c — the fp64 references of the chunkwise linear RNN
 * (fm_linrnn_cpu.h): the chunkwise form over classified sub-chunk tiles, as
 * a kernel of each variant runs it, and the token-by-token recurrence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_limits.h"
#include "fm_linrnn_cpu.h"

static fm_status problem_check(const fm_lr_problem *p, const double *o, fm_err *err) {
  if (!p || !o || !p->q || !p->k || !p->v || !p->g)
    return fm_fail(err, FM_EINVAL, "linear RNN reference: a NULL input or output");
  if (p->heads < 1 || p->dk < 1 || p->dv < 1)
    return fm_fail(err, FM_EINVAL, "heads %d, dk %d, dv %d: expected >= 1 each", p->heads, p->dk, p->dv);
  fm_status st = fm_lr_docs_check(p->cu_seqlens, p->ndocs, p->tokens, err);
  if (st != FM_OK) return st;
  for (int64_t i = 0; i < p->tokens * p->heads; i++)
    if (!(p->g[i] <= 0) || !isfinite(p->g[i]))
      return fm_fail(err, FM_EINVAL, "g[token %lld, head %lld] = %g: expected a finite log decay <= 0",
                     (long long)(i / p->heads), (long long)(i % p->heads), (double)p->g[i]);
  return FM_OK;
}

/* The document of token t (binary search in cu). */
static int32_t doc_of(const int32_t *cu, int32_t ndocs, int64_t t) {
  int32_t lo = 0, hi = ndocs - 1;
  while (lo < hi) {
    int32_t mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* What one head's chunk walk shares. */
typedef struct lr_walk {
  const fm_lr_problem *p;
  const fm_colmask *m;
  int32_t chunk, sub, n, h, variant;
  double *S, *tmp, *G; /* (dk, dv) carried state, (dk, dv) scratch, (C,) */
  uint8_t *cls;        /* (n, n) */
  fm_tile_bounds *b;   /* (n,) */
} lr_walk;

static double dot_qk(const fm_lr_problem *p, int32_t h, int64_t t, int64_t s) {
  const float *q = p->q + (t * p->heads + h) * p->dk, *k = p->k + (s * p->heads + h) * p->dk;
  double d = 0;
  for (int32_t i = 0; i < p->dk; i++) d += (double)q[i] * (double)k[i];
  return d;
}

/* Output row t (block bi) of chunk [a, b): the inter term, then the tiles. */
static void chunk_row(const lr_walk *w, int64_t a, int64_t b, int32_t bi, int64_t t, int32_t carried,
                      double *o) {
  const fm_lr_problem *p = w->p;
  const int32_t dv = p->dv, h = w->h;
  const int32_t *lts = fm_colmask_cvec(w->m, 0, FM_LTS);
  double *acc = o + (t * p->heads + h) * dv;
  for (int32_t e = 0; e < dv; e++) acc[e] = 0;
  if (fm_lr_inter_live(w->variant, bi, w->sub, carried) && t - a < carried) {
    const float *q = p->q + (t * p->heads + h) * p->dk;
    double eg = p->scale * exp(w->G[t - a]);
    for (int32_t e = 0; e < dv; e++) {
      double s = 0;
      for (int32_t i = 0; i < p->dk; i++) s += (double)q[i] * w->S[(int64_t)i * dv + e];
      acc[e] = eg * s;
    }
  }
  for (int32_t bj = 0; bj < w->n; bj++) {
    int cls = w->cls[bi * w->n + bj];
    if (!fm_lr_tile_visited(w->variant, cls, bi, bj)) continue;
    int ew = fm_lr_tile_elementwise(w->variant, cls, bi, bj);
    int64_t j0 = a + (int64_t)bj * w->sub, j1 = j0 + w->sub < b ? j0 + w->sub : b;
    for (int64_t s = j0; s < j1; s++) {
      /* the element mask of a partial tile; an unmasked one is taken as all visible */
      double d = ew && !(s <= t && lts[s] > t) ? 0.0 : exp(w->G[t - a] - w->G[s - a]);
      double x = p->scale * dot_qk(p, h, t, s) * d;
      const float *v = p->v + (s * p->heads + h) * dv;
      for (int32_t e = 0; e < dv; e++) acc[e] += x * (double)v[e];
    }
  }
}

/* The state at token e - 1 of the run [j, e) of one document in chunk [a, .)
 * into w->tmp: S_in decayed when the document began before the chunk, plus
 * the run's keys and values, decayed to e - 1. */
static void run_state(const lr_walk *w, int64_t a, int64_t j, int64_t e, int with_carry) {
  const fm_lr_problem *p = w->p;
  const int64_t dkdv = (int64_t)p->dk * p->dv;
  double ge = w->G[e - 1 - a], carry = with_carry ? exp(ge) : 0.0;
  for (int64_t x = 0; x < dkdv; x++) w->tmp[x] = carry * w->S[x];
  for (int64_t s = j; s < e; s++) {
    double d = exp(ge - w->G[s - a]);
    const float *k = p->k + (s * p->heads + w->h) * p->dk, *v = p->v + (s * p->heads + w->h) * p->dv;
    for (int32_t i = 0; i < p->dk; i++) {
      double ki = d * (double)k[i];
      for (int32_t c = 0; c < p->dv; c++) w->tmp[(int64_t)i * p->dv + c] += ki * (double)v[c];
    }
  }
}

/* One chunk of one head: outputs, final states of the documents that end in
 * it, and the state handed to the next chunk (w->S). */
static void chunk_walk(lr_walk *w, int32_t ch, double *o, double *final_state) {
  const fm_lr_problem *p = w->p;
  const int64_t T = p->tokens, a = (int64_t)ch * w->chunk, b = a + w->chunk < T ? a + w->chunk : T;
  const int64_t dkdv = (int64_t)p->dk * p->dv;
  const int32_t *lts = fm_colmask_cvec(w->m, 0, FM_LTS);
  int32_t carried;
  int64_t from;
  fm_lr_chunk_rows(w->m, w->chunk, w->sub, ch, &carried, &from);
  double g = 0;
  for (int64_t t = a; t < b; t++) w->G[t - a] = g += (double)p->g[t * p->heads + w->h];
  fm_lr_classify_chunk(w->m, w->chunk, w->sub, ch, w->b, w->cls);
  for (int64_t t = a; t < b; t++) chunk_row(w, a, b, (int32_t)((t - a) / w->sub), t, carried, o);
  int carry_next = 0;
  for (int64_t j = a; j < b; j = lts[j] < b ? lts[j] : b) {
    int64_t e = lts[j] < b ? lts[j] : b;
    run_state(w, a, j, e, j == a && carried > 0);
    if (final_state && e == lts[j]) {
      int32_t d = doc_of(p->cu_seqlens, p->ndocs, j);
      memcpy(final_state + ((int64_t)d * p->heads + w->h) * dkdv, w->tmp, (size_t)dkdv * sizeof(double));
    }
    carry_next = e == b && lts[j] > b;
  }
  if (carry_next) memcpy(w->S, w->tmp, (size_t)dkdv * sizeof(double));
  else memset(w->S, 0, (size_t)dkdv * sizeof(double));
}

fm_status fm_lr_reference_chunkwise(const fm_lr_problem *p, int32_t chunk, int32_t sub, int variant,
                                    double *o, double *final_state, fm_err *err) {
  fm_status st = problem_check(p, o, err);
  if (st == FM_OK) st = fm_lr_shape_check(p->tokens, chunk, sub, err);
  if (st != FM_OK) return st;
  if (!fm_lr_variant_name(variant)) return fm_fail(err, FM_EINVAL, "variant %d: expected 0 to %d", variant, FM_LR_NVARIANTS - 1);
  lr_walk w = {.p = p, .chunk = chunk, .sub = sub, .n = chunk / sub, .variant = variant};
  fm_colmask *m = NULL;
  if ((st = fm_lr_docs_colmask(p->cu_seqlens, p->ndocs, &m, err)) != FM_OK) return st;
  w.m = m;
  const int64_t dkdv = (int64_t)p->dk * p->dv;
  int64_t bytes = fm_mem_mul(2 * dkdv + chunk, 8) + (int64_t)w.n * w.n + (int64_t)w.n * 32;
  if ((st = fm_mem_check(bytes, "the chunkwise reference's scratch", err)) != FM_OK) {
    fm_colmask_destroy(m);
    return st;
  }
  w.S = malloc((size_t)(2 * dkdv + chunk) * sizeof(double));
  w.b = malloc((size_t)w.n * sizeof *w.b);
  w.cls = malloc((size_t)w.n * w.n);
  if (w.S && w.b && w.cls) {
    w.tmp = w.S + dkdv;
    w.G = w.tmp + dkdv;
    for (w.h = 0; w.h < p->heads; w.h++) {
      memset(w.S, 0, (size_t)dkdv * sizeof(double));
      for (int32_t ch = 0; ch < fm_lr_nchunks(p->tokens, chunk); ch++) chunk_walk(&w, ch, o, final_state);
    }
  } else {
    st = fm_fail(err, FM_ENOMEM, "cannot allocate the chunkwise reference's scratch");
  }
  free(w.S);
  free(w.b);
  free(w.cls);
  fm_colmask_destroy(m);
  return st;
}

fm_status fm_lr_reference_recurrent(const fm_lr_problem *p, double *o, double *final_state,
                                    fm_err *err) {
  fm_status st = problem_check(p, o, err);
  if (st != FM_OK) return st;
  const int32_t dk = p->dk, dv = p->dv;
  const int64_t dkdv = (int64_t)dk * dv;
  if ((st = fm_mem_check(fm_mem_mul(dkdv, 8), "the recurrent reference's state", err)) != FM_OK) return st;
  double *S = malloc((size_t)dkdv * sizeof *S);
  if (!S) return fm_fail(err, FM_ENOMEM, "cannot allocate a %d x %d state", dk, dv);
  for (int32_t h = 0; h < p->heads; h++) {
    for (int32_t d = 0; d < p->ndocs; d++) {
      memset(S, 0, (size_t)dkdv * sizeof *S);
      for (int64_t t = p->cu_seqlens[d]; t < p->cu_seqlens[d + 1]; t++) {
        const int64_t th = t * p->heads + h;
        const float *q = p->q + th * dk, *k = p->k + th * dk, *v = p->v + th * dv;
        double decay = t == p->cu_seqlens[d] ? 0.0 : exp((double)p->g[th]);
        for (int32_t i = 0; i < dk; i++)
          for (int32_t e = 0; e < dv; e++) S[i * dv + e] = decay * S[i * dv + e] + (double)k[i] * (double)v[e];
        for (int32_t e = 0; e < dv; e++) {
          double s = 0;
          for (int32_t i = 0; i < dk; i++) s += (double)q[i] * S[i * dv + e];
          o[th * dv + e] = p->scale * s;
        }
      }
      if (final_state) memcpy(final_state + ((int64_t)d * p->heads + h) * dkdv, S, (size_t)dkdv * sizeof *S);
    }
  }
  free(S);
  return FM_OK;
}

double fm_lr_rel_error(const double *got, const double *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (isnan(num) || isnan(den)) return NAN;
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return sqrt(num / den);
}
