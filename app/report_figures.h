/* report_figures.h — the figures of a scenario run (runner.h, report.h):
 * the scenario's figures: key, drawn from the figure registry (viz/) into
 * OUT/figures (report_figures.c). */
#ifndef FM_REPORT_FIGURES_H
#define FM_REPORT_FIGURES_H

#include "case_row.h"
#include "runner_ctx.h"

/* The scenario's figures under OUT/figures (report_figures.c); names of the
 * files written (relative to OUT) go to names[]. 0, or -1 after printing. */
#define REPORT_MAX_FIGURES 24
int report_figures(runner_ctx *rc, const case_row *rows, int n, char names[][80], int *nnames);
/* Every name of the figures: key is in the registry (without cairo: not
 * checked, the figures are skipped). 0, or -1 after printing. */
int report_figures_check(runner_ctx *rc);

#endif
