/* dense_report.h — how `fmsim check` and `fmsim convert` show the analysis of
 * a dense mask or an interval file (human text or JSON members). */
#ifndef FM_DENSE_REPORT_H
#define FM_DENSE_REPORT_H

#include <stdio.h>

#include "fm_dense.h"
#include "fm_json.h"
#include "fm_tiles.h"

/* stored: the form an interval file holds (FM_FORM_NONE for a dense mask). */
void dense_report_human(FILE *f, const char *path, const fm_dense_report *r, fm_form stored);
/* Adds the report's members to the object open in j; "causal" is the flag
 * of `written` (convert's output form) or, when FM_FORM_NONE, of the
 * smallest form. */
void dense_report_json(fm_json *j, const char *path, const fm_dense_report *r, fm_form stored,
                       fm_form written);

/* The options that say how a float mask is read, for check, convert and analyze. */
#define DENSE_READING_LONGOPTS                                                                  \
  {"bool", no_argument, 0, 3001}, {"additive", no_argument, 0, 3002}
#define DENSE_READING_HELP                                                                      \
  "  --bool               float masks: read like a bool mask (non-zero = may attend;\n"         \
  "                       with --masked-true non-zero = masked)\n"                              \
  "  --additive           float masks: additive (0 = attend, -inf or <= -10000 = masked);\n"    \
  "                       the default, except that a float mask of only 0 and 1 is refused\n"   \
  "                       until one of the two says how to read it\n"
/* 1 when opt was --bool or --additive (stored in *r), 0 when not, -1 when
 * both were given (error printed). */
int dense_reading_opt(const char *cmd, int opt, fm_dense_reading *r);

/* What check and analyze add for a mask that does not fit: the block
 * sparsity of the tightest fitting sub-mask (fm_dense_result_subset_colmask). */
typedef struct dense_subset {
  int known;             /* 0: the runs were not kept (too many columns) */
  int32_t br, bc;
  fm_tile_counts counts; /* of the sub-mask */
} dense_subset;

/* Classifies the sub-mask of res at br x bc; known = 0 when res kept no runs.
 * Prints the error and returns -1 on failure. */
int dense_subset_compute(const char *cmd, const fm_dense_result *res, int32_t br, int32_t bc,
                         dense_subset *out);

/* The exact tiles of the mask (report.tiles, when asked for) and, for a mask
 * that does not fit, what to do: human lines, or members "tiles" and "advice". */
void dense_report_advice_human(FILE *f, const fm_dense_report *r, const dense_subset *sub);
void dense_report_advice_json(fm_json *j, const fm_dense_report *r, const dense_subset *sub);

/* Columns (B*H*Sk) of the dense mask in path, from its header; 0 when unknown. */
int64_t dense_file_columns(const char *path);

/* 1 when path can be written (a temporary file is created and removed);
 * otherwise prints "fmsim CMD: ..." and returns 0. */
int dense_output_writable(const char *cmd, const char *path);

#endif
