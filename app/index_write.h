/* index_write.h — the runner's index writer (index_write.c). */
#ifndef FM_INDEX_WRITE_H
#define FM_INDEX_WRITE_H

#include "case_row.h"
#include "runner_ctx.h"

/* OUT/index.csv, OUT/index.json and OUT/run.json of the first n of the run's
 * total cases (n < total: a partial index, written while the run goes on, so
 * that a run cut short leaves the cases it finished listed; run.json says
 * "complete": false). Each file is replaced atomically. 0, or -1 after printing. */
int index_write(runner_ctx *rc, const case_row *rows, int n, int total);

#endif
