/* runner.h — the scenario runner: the one pipeline behind `fmsim run
 * SCENARIO.yaml`, `fmsim run --family ...` (a one-case scenario written
 * straight into --out) and `fmsim bench` (the shipped paper-kernel-table and
 * sparsity-sweep scenarios).
 *
 * Per case: the case builder (case_build.c) makes the mask and classifies it
 * at the scenario's tile, the simulate step models it, the GPU step
 * (gpu_step.c) classifies and models it at each requested kernel's own tile
 * and, where a GPU is usable, times it; the trace writer writes the case's
 * folder and its row. After a finished case the index writer (index_write.c)
 * lists the cases done so far (a partial index, throttled to 5% of the run's
 * time), and at the end all of them; then the report writers (report.c,
 * report_table.c, report_figures.c) run over the rows. Files by job, each with its header, lowest layer first (a file
 * includes and calls only files listed before it: docs/DESIGN.md,
 * "Layout and dependency direction", checked by ctest app_layers):
 *   run_stop.c        SIGINT/SIGTERM: stop within a second, sweep staging folders
 *   report_table.c    tables as Markdown, text, CSV and LaTeX
 *   case_row.c        the records: a case's row (row.tsv, the completion mark of a
 *                     case), its kernels' and passes' records
 *   runner_ctx.c      what the files share: options, context, message prefixes, clock
 *   gpu_step.c        the kernels: tiles, model, timed/counted/instrumented runs
 *   chunk_study.c     the intra-chunk study of chunkwise linear RNNs
 *   single_report.c   the single form's report on stdout
 *   report_figures.c  the scenario's figures, from the figure registry (viz/)
 *   index_write.c     index.csv, index.json, run.json
 *   report.c          report.md (summary first), cases.csv, the comparison tables
 *   case_build.c      masks from families and files, the analysis, the trace writer
 *   runner.c          the loop: pre-flight, memory estimates, resume, budget, Ctrl-C
 */
#ifndef FM_RUNNER_H
#define FM_RUNNER_H

#include "runner_ctx.h"

/* Runs every case of s. The exit code of the command (FM_EXIT_*, or 130
 * when interrupted); every error was printed as one line. */
int runner_run(const fm_scenario *s, const runner_opts *o);

#endif
