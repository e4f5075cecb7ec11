/* fm_paper.c — the paper's figures, read from the family registry. */
#include "fm_paper.h"

#include "fm_families.h"

const int64_t fm_paper_lengths[FM_PAPER_NLENGTHS] = {8192, 32768, 131072};

double fm_paper_sparsity(const char *family, int64_t seqlen) {
  const fm_family_info *f = fm_family_find(family);
  for (int l = 0; f && l < FM_PAPER_NLENGTHS; l++)
    if (fm_paper_lengths[l] == seqlen) return f->paper_rho[l];
  return -1;
}
