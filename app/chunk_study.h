/* chunk_study.h — the intra-chunk study of chunkwise linear RNNs (the
 * scenario key chunk:, runner.h): its measurement per case and its table in
 * the report (chunk_study.c). */
#ifndef FM_CHUNK_STUDY_H
#define FM_CHUNK_STUDY_H

#include <stdint.h>

#include "case_row.h"
#include "fm_colmask.h"
#include "report_table.h"

/* Over the diagonal chunk x chunk blocks of m (classes: (sets, Tr, Tc) at
 * br x bc): the fraction of tiles the min/max rule masks (rho), and the
 * document boundaries strictly inside a chunk, per chunk (boundaries). */
void chunk_study(const fm_colmask *m, const uint8_t *classes, int64_t br, int64_t bc, int64_t chunk,
                 double *rho, double *boundaries);
/* The same chunks as the chunkwise linear-RNN kernel sees them
 * (core/fm_linrnn_cpu.h, sub-chunks c = br = bc): the fractions of the
 * sub-tiles its skip variant visits and masks element-wise, and its FLOPs
 * over the noskip variant's (dk = dv = head_dim). NAN for a mask that is no
 * packed-document mask or a chunk that c does not divide. */
void chunk_study_linrnn(const fm_colmask *m, int64_t br, int64_t bc, int64_t chunk, int64_t head_dim,
                        double *visited, double *partial, double *work);
/* The report's table of the study over the rows. */
void report_chunk_table(const case_row *rows, int n, int64_t chunk, rpt_table *t);

#endif
