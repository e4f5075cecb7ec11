/* fm_paper.h — reference figures from the FlashMask paper, for comparison in
 * reports: block sparsity at 128 x 128 tiles, mean of the five samples
 * (docs/FAMILIES.md, "The paper's block sparsity"). The figures live in the
 * family registry (fm_families.c, one row per family); this is how reports
 * read them. The paper's document mask carries a generator bug (its UTE
 * advances by the next document's length), so its Document column is higher
 * than the true block-diagonal mask's. */
#ifndef FM_PAPER_H
#define FM_PAPER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The first FM_PAPER_NFAMILIES rows of the family registry (fm_family_at)
 * are the twelve cases of the paper's kernel table, in its order; the
 * gallery, the paper's table and the benchmark draw those. Families added
 * after them appear everywhere else (families, analyze, view, run). */
#define FM_PAPER_NFAMILIES 12
#define FM_PAPER_NLENGTHS 3
extern const int64_t fm_paper_lengths[FM_PAPER_NLENGTHS]; /* 8192, 32768, 131072 */

/* The paper's rho for a family at one of fm_paper_lengths, or -1 when the
 * paper reports none (the full mask, other lengths, unknown families). */
double fm_paper_sparsity(const char *family, int64_t seqlen);

#ifdef __cplusplus
}
#endif
#endif
