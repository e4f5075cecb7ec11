/* case_row.c — a case's row (case_row.h): written last into the case folder as
 * row.tsv, it marks the case finished; a rerun reads it instead of running
 * the case again. One "name\tvalue" line per field of case_row. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "case_row.h"

#define PASS_FIELDS(X, i, q)                                                                    \
  X(I, k[i].p[q].br) X(I, k[i].p[q].bc) X(D, k[i].p[q].rho) X(D, k[i].p[q].flops)                \
  X(I, k[i].p[q].model_read) X(I, k[i].p[q].model_write) X(I, k[i].p[q].unique_read)             \
  X(I, k[i].p[q].unique_write) X(S, k[i].p[q].status) X(S, k[i].p[q].source) X(D, k[i].p[q].ms)  \
  X(D, k[i].p[q].tflops) X(D, k[i].p[q].noskip_ms) X(D, k[i].p[q].inst_ms)                        \
  X(D, k[i].p[q].inst_overhead)                                                                  \
  X(I, k[i].p[q].class_mismatches) X(D, k[i].p[q].dram_read) X(D, k[i].p[q].dram_write)          \
  X(D, k[i].p[q].l2_read) X(D, k[i].p[q].pred_ms) X(S, k[i].p[q].pred_note)
#define KERNEL_FIELDS(X, i)                                                                      \
  X(S, k[i].kernel) X(S, k[i].status) X(S, k[i].profile) PASS_FIELDS(X, i, 0) PASS_FIELDS(X, i, 1)

#define ROW_FIELDS(X)                                                                            \
  X(S, id) X(S, family) X(S, params) X(S, form) X(S, docs_source) X(S, gpu_settings)              \
  X(I, seqlen) X(I, head_dim)                                                                    \
  X(I, br) X(I, bc) X(I, batch) X(I, heads) X(I, sets) X(I, mask_nb) X(I, mask_nh) X(I, causal)    \
  X(I, sample) X(I, seed) X(I, ndocs) X(I, masked) X(I, partial) X(I, unmasked) X(I, total)        \
  X(I, partial_but_masked) X(I, partial_but_unmasked) X(I, dense_bytes) X(I, block_mask_bytes)     \
  X(I, interval_bytes) X(D, rho) X(D, rho_exact) X(D, rho_128) X(D, chunk_rho)                     \
  X(D, chunk_boundaries) X(D, chunk_visited) X(D, chunk_partial) X(D, chunk_work) X(I, sim_read) X(I, sim_write) X(D, sim_flops) X(I, nkernels)             \
  X(I, gpu_ran) X(I, pass) KERNEL_FIELDS(X, 0) KERNEL_FIELDS(X, 1) KERNEL_FIELDS(X, 2) KERNEL_FIELDS(X, 3)     \
  X(S, steps)

_Static_assert(FM_SCN_MAX_KERNELS == 4, "ROW_FIELDS lists four kernel records");
_Static_assert(RUN_NPASSES == 2, "KERNEL_FIELDS lists two passes");

void run_pass_rec_clear(run_pass_rec *k) {
  memset(k, 0, sizeof *k);
  k->rho = k->flops = k->ms = k->tflops = k->noskip_ms = k->inst_ms = k->inst_overhead = NAN;
  k->dram_read = k->dram_write = k->l2_read = k->pred_ms = NAN;
  k->class_mismatches = -1;
}

void case_row_clear(case_row *r) {
  memset(r, 0, sizeof *r);
  r->rho_128 = r->chunk_rho = r->chunk_boundaries = r->sim_flops = NAN;
  r->chunk_visited = r->chunk_partial = r->chunk_work = NAN;
  r->sim_read = r->sim_write = -1;
  for (int i = 0; i < FM_SCN_MAX_KERNELS; i++)
    for (int q = 0; q < RUN_NPASSES; q++) run_pass_rec_clear(&r->k[i].p[q]);
}

/* Every field: its name (the row's key), kind ('S' string, 'I' int64, 'D'
 * double), place and size. */
static const struct {
  const char *name;
  char kind;
  size_t off, size;
} fields[] = {
#define X(kind, name) {#name, #kind[0], offsetof(case_row, name), sizeof(((case_row *)0)->name)},
    ROW_FIELDS(X)
#undef X
};
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

int case_row_write(FILE *f, const case_row *r) {
  for (int i = 0; i < NFIELDS; i++) {
    const char *p = (const char *)r + fields[i].off;
    if (fields[i].kind == 'S') fprintf(f, "%s\t%s\n", fields[i].name, p);
    else if (fields[i].kind == 'I') fprintf(f, "%s\t%lld\n", fields[i].name, (long long)*(const int64_t *)p);
    else fprintf(f, "%s\t%.17g\n", fields[i].name, *(const double *)p);
  }
  return ferror(f) ? -1 : 0;
}

int case_row_read(const char *path, case_row *r) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  case_row_clear(r);
  char line[1024];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    char *tab = strchr(line, '\t');
    if (!tab) continue;
    *tab = 0;
    char *v = tab + 1, *p;
    v[strcspn(v, "\n")] = 0;
    for (int i = 0; i < NFIELDS; i++) {
      if (strcmp(line, fields[i].name)) continue;
      p = (char *)r + fields[i].off;
      if (fields[i].kind == 'S') snprintf(p, fields[i].size, "%s", v);
      else if (fields[i].kind == 'I') *(int64_t *)p = strtoll(v, NULL, 10);
      else *(double *)p = strtod(v, NULL);
      found++;
      break;
    }
  }
  fclose(f);
  return found == NFIELDS ? 0 : -1; /* every field of case_row */
}
