/* single_report.h — the report of the runner's single form (`fmsim run
 * --family ...`, runner.h), printed on stdout once its trace is written:
 * text for a reader, or JSON with --json (single_report.c). */
#ifndef FM_SINGLE_REPORT_H
#define FM_SINGLE_REPORT_H

#include "fm_run_trace.h"
#include "fm_trace.h"

/* Everything one case produced, for the single form's report. */
typedef struct run_case_out {
  const fm_analysis *analysis;
  const fm_run_info *info; /* the forward's */
  fm_pass pass;            /* the passes asked for */
  const fm_run_info *bwd;  /* the backward's (its analysis at its tile), NULL without one */
} run_case_out;

/* Prints the single form's report of c, whose trace is the folder out
 * (json: as JSON). */
void run_print_report(const run_case_out *c, const char *out, int json);

#endif
