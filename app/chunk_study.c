/* chunk_study.c — the intra-chunk study of chunkwise linear RNNs with
 * document packing (scenarios/linear-rnn-docpack.yaml): inside each chunk of
 * C tokens the intra-chunk attention is tiled in Br x Bc sub-chunks; the
 * measurement (chunk_study) and its table (report_chunk_table). */
#include <math.h>
#include <stdio.h>

#include "chunk_study.h"

#include "fm_linrnn_cpu.h"
#include "fm_tile_rule.h"

/* Over the diagonal C x C blocks: the fraction of br x bc tiles the min/max
 * rule masks, and the document boundaries strictly inside a chunk, per chunk. */
void chunk_study(const fm_colmask *m, const uint8_t *classes, int64_t br, int64_t bc, int64_t chunk,
                 double *rho, double *boundaries) {
  int64_t S = fm_colmask_sk(m), tr = (S + br - 1) / br, tc = (S + bc - 1) / bc;
  int64_t masked = 0, tiles = 0, bounds = 0, nchunks = S / chunk;
  const int32_t *lts = fm_colmask_cvec(m, 0, FM_LTS);
  for (int64_t ch = 0; ch < nchunks; ch++) {
    for (int64_t rt = ch * chunk / br; rt < (ch + 1) * chunk / br && rt < tr; rt++)
      for (int64_t ct = ch * chunk / bc; ct < (ch + 1) * chunk / bc && ct < tc; ct++) {
        masked += classes[rt * tc + ct] == FM_TILE_MASKED;
        tiles++;
      }
    /* a document boundary at p: LTS (the document end) changes between p-1 and p */
    for (int64_t p = ch * chunk + 1; p < (ch + 1) * chunk; p++) bounds += lts[p] != lts[p - 1];
  }
  *rho = tiles ? (double)masked / (double)tiles : NAN;
  *boundaries = nchunks ? (double)bounds / (double)nchunks : NAN;
}

void chunk_study_linrnn(const fm_colmask *m, int64_t br, int64_t bc, int64_t chunk, int64_t head_dim,
                        double *visited, double *partial, double *work) {
  *visited = *partial = *work = NAN;
  fm_lr_counts c;
  if (br != bc || br > chunk || chunk > 4096 || head_dim < 1 || head_dim > INT32_MAX ||
      fm_lr_count(m, (int32_t)chunk, (int32_t)br, (int32_t)head_dim, (int32_t)head_dim, &c, NULL) != FM_OK)
    return;
  *visited = (double)c.work[FM_LR_SKIP].tiles_visited / (double)c.tiles;
  *partial = (double)c.tiles_class[FM_TILE_PARTIAL] / (double)c.tiles;
  *work = c.work[FM_LR_SKIP].flops / c.work[FM_LR_NOSKIP].flops;
}

/* Intra-chunk tiles skipped beyond the causal ones, against the estimate
 * causal + m (n-1)(n-2) / (6 n^2) (n sub-chunks per chunk, m document
 * boundaries per chunk; 28/64 + 7m/64 for n = 8: fm_lr_proposal_rho); and
 * the sub-tiles the linear-RNN kernel's skip variant visits, exactly. */
void report_chunk_table(const case_row *rows, int n, int64_t chunk, rpt_table *t) {
  char title[200];
  snprintf(title, sizeof title,
           "Intra-chunk tiling of a chunkwise linear RNN with document packing, chunks of C = %lld "
           "tokens: measured skipped sub-chunk tiles against causal + m (n-1)(n-2) / (6 n^2)",
           (long long)chunk);
  rpt_init(t, "chunks", title);
  static const char *const head[] = {"case", "mean document length", "boundaries per chunk m",
                                     "skipped (measured)", "beyond causal (measured)", "estimate",
                                     "beyond causal (estimate)", "visited (fm_linrnn, exact)",
                                     "visited (estimate)", "partial (fm_linrnn)",
                                     "skip work / noskip"};
  for (int c = 0; c < 11; c++) rpt_col(t, head[c]);
  for (int i = 0; i < n; i++) {
    const case_row *r = &rows[i];
    double causal = fm_lr_proposal_rho((int32_t)chunk, (int32_t)r->br, 0);
    double est = fm_lr_proposal_rho((int32_t)chunk, (int32_t)r->br, r->chunk_boundaries);
    rpt_cell(t, "%s", r->id);
    rpt_num(t, "%.1f", r->ndocs ? (double)r->seqlen / (double)r->ndocs : NAN);
    rpt_num(t, "%.3f", r->chunk_boundaries);
    rpt_num(t, "%.4f", r->chunk_rho);
    rpt_num(t, "%.4f", r->chunk_rho - causal);
    rpt_num(t, "%.4f", est);
    rpt_num(t, "%.4f", est - causal);
    rpt_num(t, "%.4f", r->chunk_visited);
    rpt_num(t, "%.4f", 1 - est);
    rpt_num(t, "%.4f", r->chunk_partial);
    rpt_num(t, "%.4f", r->chunk_work);
  }
}
