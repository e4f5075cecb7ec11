/* index_write.h — the runner's index writer (index_write.c). */
#ifndef FM_INDEX_WRITE_H
#define FM_INDEX_WRITE_H

#include "case_row.h"
#include "runner_ctx.h"

/* OUT/index.csv, OUT/index.json and OUT/run.json; 0, or -1 after printing. */
int index_write(runner_ctx *rc, const case_row *rows, int n);

#endif
