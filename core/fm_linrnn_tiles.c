/* fm_linrnn_tiles.c — the sub-chunk tiles of the chunkwise linear RNN
 * (fm_linrnn_cpu.h): their classes by fmsim's one tile rule, what each
 * variant visits and its FLOPs, and the proposal's estimate. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_linrnn_cpu.h"

fm_status fm_lr_shape_check(int64_t tokens, int32_t chunk, int32_t sub, fm_err *err) {
  if (tokens < 1 || tokens > FM_MAX_SEQLEN)
    return fm_fail(err, FM_EINVAL, "tokens %lld: expected 1 to %d", (long long)tokens, FM_MAX_SEQLEN);
  if (chunk < 1 || chunk > 4096)
    return fm_fail(err, FM_EINVAL, "chunk %d: expected 1 to 4096 tokens", chunk);
  if (sub < 1 || sub > chunk || chunk % sub)
    return fm_fail(err, FM_EINVAL, "sub-chunk %d: expected a divisor of the chunk %d", sub, chunk);
  return FM_OK;
}

int32_t fm_lr_nchunks(int64_t tokens, int32_t chunk) {
  return chunk > 0 && tokens > 0 ? (int32_t)((tokens + chunk - 1) / chunk) : 0;
}

int64_t fm_lr_class_len(int64_t tokens, int32_t chunk, int32_t sub) {
  if (sub < 1 || chunk < sub) return 0;
  int64_t n = chunk / sub;
  return (int64_t)fm_lr_nchunks(tokens, chunk) * n * n;
}

void fm_lr_classify_chunk(const fm_colmask *m, int32_t chunk, int32_t sub, int32_t ch,
                          fm_tile_bounds *b, uint8_t *cls) {
  const int32_t T = fm_colmask_sk(m), n = chunk / sub;
  const int32_t *lts = fm_colmask_cvec(m, 0, FM_LTS), *lte = fm_colmask_cvec(m, 0, FM_LTE);
  const int32_t *uts = fm_colmask_cvec(m, 0, FM_UTS), *ute = fm_colmask_cvec(m, 0, FM_UTE);
  const int64_t a = (int64_t)ch * chunk;
  for (int32_t bj = 0; bj < n; bj++) {
    int64_t j0 = a + (int64_t)bj * sub, j1 = j0 + sub < T ? j0 + sub : T;
    if (j0 < T) b[bj] = fm_tile_bounds_of_columns(lts, lte, uts, ute, (int32_t)j0, (int32_t)j1, 1, 1, T, T);
  }
  for (int32_t bi = 0; bi < n; bi++) {
    int64_t r0 = a + (int64_t)bi * sub, r1 = r0 + sub < T ? r0 + sub : T;
    for (int32_t bj = 0; bj < n; bj++) {
      int64_t j0 = a + (int64_t)bj * sub;
      cls[bi * n + bj] = (uint8_t)(r0 >= T || j0 >= T ? FM_TILE_MASKED
                                                      : fm_classify_minmax(&b[bj], (int32_t)r0, (int32_t)r1));
    }
  }
}

static fm_status tiles_args(const fm_colmask *m, int32_t chunk, int32_t sub, fm_err *err) {
  fm_status st = fm_lr_mask_check(m, err);
  if (st == FM_OK) st = fm_lr_shape_check(fm_colmask_sk(m), chunk, sub, err);
  return st;
}

fm_status fm_lr_classify(const fm_colmask *m, int32_t chunk, int32_t sub, uint8_t *classes,
                         fm_err *err) {
  fm_status st = tiles_args(m, chunk, sub, err);
  if (st != FM_OK) return st;
  const int32_t n = chunk / sub, nch = fm_lr_nchunks(fm_colmask_sk(m), chunk);
  fm_tile_bounds *b = malloc((size_t)n * sizeof *b);
  if (!b) return fm_fail(err, FM_ENOMEM, "cannot allocate %d tile bounds", n);
  for (int32_t ch = 0; ch < nch; ch++) fm_lr_classify_chunk(m, chunk, sub, ch, b, classes + (int64_t)ch * n * n);
  free(b);
  return FM_OK;
}

void fm_lr_chunk_rows(const fm_colmask *m, int32_t chunk, int32_t sub, int32_t n, int32_t *carried,
                      int64_t *state_from) {
  const int64_t T = fm_colmask_sk(m), a = (int64_t)n * chunk, b = a + chunk < T ? a + chunk : T;
  const int32_t *lts = fm_colmask_cvec(m, 0, FM_LTS);
  /* LTS of key a - 1 is the end of its document: past a, the document goes on */
  *carried = a > 0 && lts[a - 1] > a ? (int32_t)((lts[a - 1] < b ? lts[a - 1] : b) - a) : 0;
  *state_from = b;
  if (b >= T || lts[b - 1] == b) return; /* no state crosses into the next chunk */
  int64_t s0 = b - 1;
  while (s0 > a && lts[s0 - 1] == lts[b - 1]) s0--; /* the start of doc(b - 1), or a */
  *state_from = a + (s0 - a) / sub * sub;
}

/* Adds chunk ch's counts (its classes cls) to c. */
static void count_chunk(const fm_colmask *m, int32_t ch, const uint8_t *cls, fm_lr_counts *c) {
  const int64_t T = c->tokens, a = (int64_t)ch * c->chunk, b = a + c->chunk < T ? a + c->chunk : T;
  const int32_t n = c->n, sub = c->sub;
  const int32_t *lts = fm_colmask_cvec(m, 0, FM_LTS);
  int32_t carried;
  int64_t from;
  fm_lr_chunk_rows(m, c->chunk, sub, ch, &carried, &from);
  for (int32_t bi = 0; bi < n && a + (int64_t)bi * sub < T; bi++) {
    c->row_blocks++;
    for (int v = 0; v < FM_LR_NVARIANTS; v++) c->work[v].inter_blocks += fm_lr_inter_live(v, bi, sub, carried);
    for (int32_t bj = 0; bj < n && a + (int64_t)bj * sub < T; bj++) {
      int k = cls[bi * n + bj];
      c->tiles++;
      c->tiles_class[k]++;
      for (int v = 0; v < FM_LR_NVARIANTS; v++) {
        c->work[v].tiles_visited += fm_lr_tile_visited(v, k, bi, bj);
        c->work[v].tiles_elementwise += fm_lr_tile_elementwise(v, k, bi, bj);
      }
    }
  }
  if (b < T) { /* a state handed to the next chunk */
    c->work[FM_LR_SKIP].state_rows += b - from;
    c->work[FM_LR_CAUSAL].state_rows += c->chunk;
    c->work[FM_LR_NOSKIP].state_rows += c->chunk;
  }
  /* useful work: the visible pairs of each document's run in the chunk, the
     rows with a carried state, the rows of a state that crosses */
  double pairs = 0;
  int64_t last = a; /* the start of the chunk's last run: doc(b - 1) from a on */
  for (int64_t j = a; j < b; j = lts[j] < b ? lts[j] : b) {
    int64_t l = (lts[j] < b ? lts[j] : b) - j;
    pairs += (double)l * (double)(l + 1) / 2;
    if (j > a) c->boundaries++;
    last = j;
  }
  double crossing = b < T && lts[b - 1] > b ? (double)(b - last) : 0;
  double dkdv = (double)c->dk * c->dv;
  c->flops_useful += 2.0 * (c->dk + c->dv) * pairs + 2.0 * dkdv * (carried + crossing);
}

fm_status fm_lr_count(const fm_colmask *m, int32_t chunk, int32_t sub, int32_t dk, int32_t dv,
                      fm_lr_counts *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  fm_status st = tiles_args(m, chunk, sub, err);
  if (st != FM_OK) return st;
  if (dk < 1 || dv < 1) return fm_fail(err, FM_EINVAL, "dk %d, dv %d: expected >= 1", dk, dv);
  out->tokens = fm_colmask_sk(m);
  out->chunk = chunk;
  out->sub = sub;
  out->n = chunk / sub;
  out->nchunks = fm_lr_nchunks(out->tokens, chunk);
  out->dk = dk;
  out->dv = dv;
  const int32_t n = out->n;
  size_t scratch = (size_t)n * sizeof(fm_tile_bounds) + (size_t)n * n;
  fm_tile_bounds *b = malloc(scratch);
  if (!b) return fm_fail(err, FM_ENOMEM, "cannot allocate %zu bytes of tile scratch", scratch);
  uint8_t *cls = (uint8_t *)(b + n);
  for (int32_t ch = 0; ch < out->nchunks; ch++) {
    fm_lr_classify_chunk(m, chunk, sub, ch, b, cls);
    count_chunk(m, ch, cls, out);
  }
  free(b);
  const int32_t *lts = fm_colmask_cvec(m, 0, FM_LTS);
  for (int64_t j = 0; j < out->tokens; j = lts[j]) out->ndocs++;
  out->rho = out->tiles ? (double)out->tiles_class[FM_TILE_MASKED] / (double)out->tiles : NAN;
  out->boundaries_per_chunk = (double)out->boundaries / out->nchunks;
  for (int v = 0; v < FM_LR_NVARIANTS; v++) {
    fm_lr_work *w = &out->work[v];
    w->flops_intra = (double)w->tiles_visited * 2.0 * sub * sub * (double)(dk + dv);
    w->flops_inter = (double)w->inter_blocks * 2.0 * sub * (double)dk * dv;
    w->flops_state = (double)w->state_rows * 2.0 * (double)dk * dv;
    w->flops = w->flops_intra + w->flops_inter + w->flops_state;
  }
  out->mask_bytes = (int64_t)4 * 4 * out->tokens;
  out->scratch_bytes = (int64_t)scratch;
  return FM_OK;
}

double fm_lr_proposal_rho(int32_t chunk, int32_t sub, double m) {
  double n = (double)chunk / (double)sub;
  return n * (n - 1) / 2 / (n * n) + m * (n - 1) * (n - 2) / 6 / (n * n);
}

void fm_lr_estimate_of(const fm_lr_counts *c, fm_lr_estimate *e) {
  e->m = c->boundaries_per_chunk;
  e->rho_causal = fm_lr_proposal_rho(c->chunk, c->sub, 0);
  e->rho_estimate = fm_lr_proposal_rho(c->chunk, c->sub, e->m);
  e->rho_exact = c->rho;
  e->visited_estimate = 1 - e->rho_estimate;
  e->visited_exact = c->tiles ? (double)c->work[FM_LR_SKIP].tiles_visited / (double)c->tiles : NAN;
  e->error = e->rho_estimate - e->rho_exact;
}

int32_t fm_lr_busiest_chunk(const int32_t *cu, int32_t ndocs, int32_t chunk) {
  int32_t best = 0, best_n = -1, cur = -1, cur_n = 0;
  for (int32_t d = 1; d < ndocs; d++) {
    if (cu[d] % chunk == 0) continue; /* a document that starts a chunk is not inside it */
    int32_t ch = cu[d] / chunk;
    if (ch != cur) cur = ch, cur_n = 0;
    if (++cur_n > best_n) best = cur, best_n = cur_n;
  }
  return best;
}
