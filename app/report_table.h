/* report_table.h — a table of text cells for the scenario reports, written as
 * Markdown (report.md), aligned text (bench's table.txt), CSV and LaTeX (the
 * exported comparison tables). Cells are added row by row; a row is
 * complete after one cell per column. */
#ifndef FM_REPORT_TABLE_H
#define FM_REPORT_TABLE_H

#include <stdio.h>

#include "fm_status.h"

#define RPT_MAX_COLS 64

typedef struct rpt_table {
  char name[48];             /* file stem of its exports: NAME.csv, NAME.tex */
  char title[600];           /* caption of the LaTeX table */
  int ncols;
  char cols[RPT_MAX_COLS][48];
  char **cells;              /* nrows * ncols strings, owned */
  int nrows, cap, filled;    /* filled: cells given in all */
  int oom;
} rpt_table;

void rpt_init(rpt_table *t, const char *name, const char *title);
void rpt_col(rpt_table *t, const char *header);
/* The next cell (a printf format). */
void rpt_cell(rpt_table *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A number with a printf format, or "-" when it is not finite. */
void rpt_num(rpt_table *t, const char *fmt, double v);
void rpt_free(rpt_table *t);

void rpt_markdown(const rpt_table *t, FILE *f);
void rpt_text(const rpt_table *t, FILE *f);
/* dir/NAME.csv, dir/NAME.tex and dir/NAME.txt (rpt_text), each written atomically. */
fm_status rpt_export(const rpt_table *t, const char *dir, fm_err *err);

#endif
