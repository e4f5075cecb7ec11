/* fm_linrnn_docs.c — the documents of the chunkwise linear-RNN study
 * (fm_linrnn_cpu.h): fixed and log-normal lengths, the packed documents as
 * column intervals (right and as the proposal wrote them), the variants'
 * registry and flash-linear-attention's chunk-aligned packing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_limits.h"
#include "fm_linrnn_cpu.h"
#include "fm_rng.h"

/* ---- the variants ----------------------------------------------------------- */

static const struct {
  const char *name, *meaning;
} variants[FM_LR_NVARIANTS] = {
    [FM_LR_SKIP] = {"skip", "FlashMask: masked sub-chunk tiles, dead inter-chunk terms and states "
                            "that do not cross a chunk skipped"},
    [FM_LR_CAUSAL] = {"causal", "only the tiles above each chunk's diagonal skipped (today's "
                                "chunkwise kernels)"},
    [FM_LR_NOSKIP] = {"noskip", "every tile, inter term and state row computed (the baseline)"},
};

const char *fm_lr_variant_name(int v) { return v >= 0 && v < FM_LR_NVARIANTS ? variants[v].name : NULL; }

const char *fm_lr_variant_meaning(int v) {
  return v >= 0 && v < FM_LR_NVARIANTS ? variants[v].meaning : NULL;
}

int fm_lr_variant_parse(const char *name) {
  for (int v = 0; name && v < FM_LR_NVARIANTS; v++)
    if (!strcmp(name, variants[v].name)) return v;
  return -1;
}

/* ---- document lengths ------------------------------------------------------- */

static fm_status alloc_cu(int64_t ndocs, int32_t **cu, fm_err *err) {
  int64_t bytes = fm_mem_mul(ndocs + 1, (int64_t)sizeof(int32_t));
  fm_status st = fm_mem_check(bytes, "the document boundaries", err);
  if (st != FM_OK) return st;
  *cu = malloc((size_t)bytes);
  return *cu ? FM_OK : fm_fail(err, FM_ENOMEM, "cannot allocate %lld document boundaries", (long long)ndocs + 1);
}

static fm_status tokens_check(int64_t tokens, fm_err *err) {
  if (tokens < 1 || tokens > FM_MAX_SEQLEN)
    return fm_fail(err, FM_EINVAL, "tokens %lld: expected 1 to %d", (long long)tokens, FM_MAX_SEQLEN);
  return FM_OK;
}

fm_status fm_lr_docs_fixed(int64_t tokens, int64_t len, int32_t **cu, int32_t *ndocs, fm_err *err) {
  fm_status st = tokens_check(tokens, err);
  if (st != FM_OK) return st;
  if (len < 1 || len > tokens)
    return fm_fail(err, FM_EINVAL, "document length %lld: expected 1 to T = %lld", (long long)len,
                   (long long)tokens);
  int64_t n = (tokens + len - 1) / len;
  if ((st = alloc_cu(n, cu, err)) != FM_OK) return st;
  for (int64_t d = 0; d <= n; d++) (*cu)[d] = (int32_t)(d * len < tokens ? d * len : tokens);
  *ndocs = (int32_t)n;
  return FM_OK;
}

/* Uniform in (0, 1]. */
static double unit_open(fm_rng *r) { return ((double)(fm_rng_next(r) >> 11) + 1.0) * 0x1.0p-53; }

/* Standard normal (Box-Muller, one of the pair). */
static double normal(fm_rng *r) {
  double u1 = unit_open(r), u2 = unit_open(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#define LOGNORMAL_STREAM 0x6c6f676eull /* "logn" */
#define SPACING_STREAM 0x73706163ull   /* "spac" */

/* The R extra tokens handed out one at a time with probabilities w / sum w:
 * the R draws sorted are the partial sums of R + 1 exponential spacings over
 * their total (two passes over the same seeded stream, no O(R) buffer), each
 * walked into the interval of its document. */
static void hand_out(int64_t extra, const double *w, int64_t n, uint64_t seed, int32_t *len) {
  double wsum = 0, total = 0, cum = 0, bound;
  for (int64_t i = 0; i < n; i++) wsum += w[i];
  fm_rng r;
  fm_rng_seed(&r, seed, SPACING_STREAM);
  for (int64_t k = 0; k <= extra; k++) total -= log(unit_open(&r));
  fm_rng_seed(&r, seed, SPACING_STREAM);
  int64_t i = 0;
  bound = w[0] / wsum;
  for (int64_t k = 0; k < extra; k++) {
    cum -= log(unit_open(&r));
    double u = cum / total;
    while (u > bound && i < n - 1) bound += w[++i] / wsum;
    len[i]++;
  }
}

fm_status fm_lr_docs_lognormal(int64_t tokens, double mean, double sigma, int32_t min_len,
                               uint64_t seed, int32_t **cu, int32_t *ndocs, fm_err *err) {
  fm_status st = tokens_check(tokens, err);
  if (st != FM_OK) return st;
  if (!(min_len >= 1 && mean >= min_len && mean <= (double)tokens))
    return fm_fail(err, FM_EINVAL,
                   "mean document length %g: expected from the minimum length %d to T = %lld", mean,
                   min_len, (long long)tokens);
  if (!(sigma > 0 && sigma <= 10)) return fm_fail(err, FM_EINVAL, "sigma %g: expected 0 < sigma <= 10", sigma);
  int64_t n = llround((double)tokens / mean);
  if (n < 1) n = 1;
  if (n > tokens / min_len) n = tokens / min_len;
  if ((st = fm_mem_check(fm_mem_mul(n, 16), "the document weights", err)) != FM_OK) return st;
  double *w = malloc((size_t)n * sizeof *w);
  int32_t *len = malloc((size_t)n * sizeof *len);
  if (!w || !len || alloc_cu(n, cu, err) != FM_OK) {
    free(w);
    free(len);
    return fm_fail(err, FM_ENOMEM, "cannot allocate %lld document lengths", (long long)n);
  }
  fm_rng r;
  fm_rng_seed(&r, seed, LOGNORMAL_STREAM);
  for (int64_t i = 0; i < n; i++) {
    w[i] = exp(sigma * normal(&r));
    len[i] = min_len;
  }
  hand_out(tokens - n * min_len, w, n, seed, len);
  (*cu)[0] = 0;
  for (int64_t i = 0; i < n; i++) (*cu)[i + 1] = (*cu)[i] + len[i];
  free(w);
  free(len);
  *ndocs = (int32_t)n;
  return FM_OK;
}

fm_status fm_lr_docs_check(const int32_t *cu, int32_t ndocs, int64_t tokens, fm_err *err) {
  if (!cu || ndocs < 1) return fm_fail(err, FM_EINVAL, "documents: need at least one");
  if (cu[0] != 0) return fm_fail(err, FM_EINVAL, "cu_seqlens[0] = %d: expected 0", cu[0]);
  for (int32_t d = 0; d < ndocs; d++)
    if (cu[d + 1] <= cu[d])
      return fm_fail(err, FM_EINVAL, "cu_seqlens[%d] = %d after %d: expected strictly increasing", d + 1,
                     cu[d + 1], cu[d]);
  if (cu[ndocs] != tokens)
    return fm_fail(err, FM_EINVAL, "cu_seqlens[%d] = %d: expected T = %lld", ndocs, cu[ndocs],
                   (long long)tokens);
  return FM_OK;
}

/* ---- the documents as column intervals ------------------------------------- */

static fm_status docs_mask(const int32_t *cu, int32_t ndocs, int proposal, fm_colmask **out,
                           fm_err *err) {
  fm_status st = fm_lr_docs_check(cu, ndocs, cu ? cu[ndocs > 0 ? ndocs : 0] : 0, err);
  if (st == FM_OK) st = fm_colmask_create(cu[ndocs], cu[ndocs], 1, 1, 1, out, err);
  if (st != FM_OK) return st;
  int32_t *lts = fm_colmask_vec(*out, 0, FM_LTS), *lte = fm_colmask_vec(*out, 0, FM_LTE);
  for (int32_t d = 0; d < ndocs; d++)
    for (int32_t s = cu[d]; s < cu[d + 1]; s++) {
      lts[s] = proposal ? s : cu[d + 1];
      if (proposal) lte[s] = cu[d + 1];
    }
  return FM_OK;
}

fm_status fm_lr_docs_colmask(const int32_t *cu, int32_t ndocs, fm_colmask **out, fm_err *err) {
  return docs_mask(cu, ndocs, 0, out, err);
}

fm_status fm_lr_proposal_colmask(const int32_t *cu, int32_t ndocs, fm_colmask **out, fm_err *err) {
  return docs_mask(cu, ndocs, 1, out, err);
}

fm_status fm_lr_mask_check(const fm_colmask *m, fm_err *err) {
  if (!m) return fm_fail(err, FM_EINVAL, "no mask");
  int32_t T = fm_colmask_sk(m);
  if (fm_colmask_sq(m) != T || !fm_colmask_causal(m) || fm_colmask_nsets(m) != 1)
    return fm_fail(err, FM_EINVAL, "a packed-document mask is causal, square and has one vector set");
  const int32_t *lts = fm_colmask_cvec(m, 0, FM_LTS), *lte = fm_colmask_cvec(m, 0, FM_LTE);
  const int32_t *uts = fm_colmask_cvec(m, 0, FM_UTS), *ute = fm_colmask_cvec(m, 0, FM_UTE);
  int32_t start = 0; /* the key that begins the current document */
  for (int32_t j = 0; j < T; j++) {
    int ok = lte[j] == T && uts[j] >= ute[j] && lts[j] > j && lts[j] <= T &&
             (j == start || lts[j] == lts[j - 1]);
    if (!ok)
      return fm_fail(err, FM_EINVAL,
                     "key %d (LTS %d, LTE %d, UTS %d, UTE %d) is not a packed document's: expected "
                     "LTS = the end of its document, LTE = %d, no upper interval",
                     j, lts[j], lte[j], uts[j], ute[j], T);
    if (lts[j] == j + 1) start = j + 1;
  }
  return FM_OK;
}

/* ---- flash-linear-attention's chunk-aligned packing -------------------------- */

fm_status fm_lr_aligned_count(const int32_t *cu, int32_t ndocs, int32_t chunk, int32_t sub,
                              int32_t dk, int32_t dv, fm_lr_aligned *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  fm_status st = fm_lr_docs_check(cu, ndocs, cu ? cu[ndocs > 0 ? ndocs : 0] : 0, err);
  if (st == FM_OK) st = fm_lr_shape_check(cu[ndocs], chunk, sub, err);
  if (st != FM_OK) return st;
  if (dk < 1 || dv < 1) return fm_fail(err, FM_EINVAL, "dk %d, dv %d: expected >= 1", dk, dv);
  for (int32_t d = 0; d < ndocs; d++) out->chunks += (cu[d + 1] - cu[d] + chunk - 1) / chunk;
  int64_t n = chunk / sub, k = out->chunks;
  out->tokens_padded = k * chunk;
  fm_lr_work *w = &out->work;
  w->tiles_visited = k * n * (n + 1) / 2;
  w->tiles_elementwise = k * n;
  w->inter_blocks = k * n;
  w->state_rows = (k - 1) * chunk;
  w->flops_intra = (double)w->tiles_visited * 2.0 * sub * sub * (double)(dk + dv);
  w->flops_inter = (double)w->inter_blocks * 2.0 * sub * (double)dk * dv;
  w->flops_state = (double)w->state_rows * 2.0 * (double)dk * dv;
  w->flops = w->flops_intra + w->flops_inter + w->flops_state;
  return FM_OK;
}
