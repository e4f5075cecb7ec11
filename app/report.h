/* report.h — what a scenario run reports (runner.h): report.md, which leads
 * with a summary, then the scenario's comparison tables (the report: key),
 * the kernel table when kernels ran or were modelled, and the figures; every
 * table, the long per-case one included, is exported to OUT/tables/ as CSV,
 * LaTeX and aligned text. Texts that compare say "higher" or "lower" from
 * the numbers they print. */
#ifndef FM_REPORT_H
#define FM_REPORT_H

#include "case_row.h"
#include "report_table.h"
#include "runner_ctx.h"

/* report.md and OUT/tables/; 0, or -1 after printing the error. */
int report_write(runner_ctx *rc, const case_row *rows, int n);

/* The tables, for the report and for tests. */
void report_cases_table(const case_row *rows, int n, rpt_table *t);
void report_kernel_table(const case_row *rows, int n, rpt_table *t);
void report_fit_table(const case_row *rows, int n, rpt_table *t);

/* Least squares time = a + b (1 - rho) over the rows of one kernel record's
 * pass (RUN_FWD, RUN_BWD; family NULL: every family); n points, R^2 NAN when
 * undefined. */
typedef struct report_fit {
  int n;
  double intercept_ms, slope_ms, r2;
} report_fit;
report_fit report_fit_time(const case_row *rows, int n, int kernel, int pass, const char *family);

#endif
