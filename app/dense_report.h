/* dense_report.h — how `fmsim check` and `fmsim convert` show the analysis of
 * a dense mask or an interval file (human text or JSON members). */
#ifndef FM_DENSE_REPORT_H
#define FM_DENSE_REPORT_H

#include <stdio.h>

#include "fm_dense.h"
#include "fm_json.h"

/* stored: the form an interval file holds (FM_FORM_NONE for a dense mask). */
void dense_report_human(FILE *f, const char *path, const fm_dense_report *r, fm_form stored);
/* Adds the report's members to the object open in j; "causal" is the flag
 * of `written` (convert's output form) or, when FM_FORM_NONE, of the
 * smallest form. */
void dense_report_json(fm_json *j, const char *path, const fm_dense_report *r, fm_form stored,
                       fm_form written);

/* 1 when path can be written (a temporary file is created and removed);
 * otherwise prints "fmsim CMD: ..." and returns 0. */
int dense_output_writable(const char *cmd, const char *path);

#endif
