#include "fm_paper.h"

#include <string.h>

const int64_t fm_paper_lengths[FM_PAPER_NLENGTHS] = {8192, 32768, 131072};

static const struct {
  const char *family;
  double rho[FM_PAPER_NLENGTHS];
} paper_rho[] = {
    {"causal", {0.49, 0.50, 0.50}},           {"sliding_window", {0.92, 0.94, 0.94}},
    {"causal_document", {0.86, 0.95, 0.95}},  {"document", {0.74, 0.92, 0.91}},
    {"share_question", {0.91, 0.97, 0.97}},   {"global_sliding_window", {0.84, 0.87, 0.88}},
    {"causal_blockwise", {0.67, 0.87, 0.87}}, {"prefix_lm_document", {0.86, 0.95, 0.95}},
    {"prefix_lm_causal", {0.37, 0.37, 0.37}}, {"qk_sparse", {0.52, 0.52, 0.52}},
    {"random_eviction", {0.49, 0.50, 0.50}},
};

double fm_paper_sparsity(const char *family, int64_t seqlen) {
  for (size_t f = 0; f < sizeof paper_rho / sizeof paper_rho[0]; f++)
    if (!strcmp(paper_rho[f].family, family))
      for (int l = 0; l < FM_PAPER_NLENGTHS; l++)
        if (fm_paper_lengths[l] == seqlen) return paper_rho[f].rho[l];
  return -1;
}
