/* fm_dense_impl.h — what the files of the dense-mask module share (the
 * contract of fm_dense.h is theirs to keep; nothing outside core/fm_dense*.c
 * includes this header). Files by concern:
 *   fm_dense_report.c   the report builder: per-column and per-row results ->
 *                       fm_dense_report, its advice and the exact tiles; the result
 *   fm_dense_scan.c     the row scan: the row pass, every run of every column, the
 *                       streaming scanner (fm_dense_scan_*)
 *   fm_dense_file.c     dense .npy files: values to flags, fm_dense_check_file; dtype names
 *   fm_dense_convert.c  conversion of a result to intervals (fm_dense_result_to_colmask,
 *                       the fitting subset)
 *   fm_dense_expand.c   interval masks as rows: fm_dense_check_colmask and the dense
 *                       expansion (fm_dense_expand)
 *
 *
 * The scan works on rows of 0/1 "masked" flags (Sk,) uint8. A dtype-specific
 * pass turns each stored row into flags; two passes then follow:
 *   columns: consecutive rows are compared 64 columns at a time; a block with
 *            no change costs two word loads per 8 columns, so a structured mask
 *            (a few changes per column over the whole scan) is read at memory
 *            speed. A changed block updates the per-column transition count
 *            (and, with several heads, a hash of the transition rows) with
 *            branch-free loops the compiler vectorises, so a random mask does
 *            not pay a branch misprediction per change.
 *   rows:    the flags are compared with themselves shifted by one column
 *            (unaligned word loads) to count the runs along the row and keep
 *            its first three.
 * Transition counts alternate start, end, start, ... because every column
 * starts unmasked above row 0: runs = (transitions + 1) / 2, and the first six
 * transition rows give the first three runs.
 */
#ifndef FM_DENSE_IMPL_H
#define FM_DENSE_IMPL_H

#include <stdint.h>
#include <string.h>

#include "fm_dense.h"

#define BLOCK 64                   /* columns per change test in the column pass */
#define NTRANS 6                   /* transition rows kept per column: three runs */
#define READ_CHUNK ((int64_t)4 << 20) /* bytes per read() of whole rows */
#define ALL_FORMS ((1u << FM_FORM_COUNT) - 1)

static inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* Sum of the bytes of w when each byte is 0 or 1 (byte order does not matter). */
static inline uint64_t bytesum01(uint64_t w) { return (w * 0x0101010101010101ull) >> 56; }

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Per-row key mixed into a column's hash at each transition (the same for every
 * set, so equal masks hash equally). */
static inline uint64_t row_key(int32_t i) {
  uint64_t x = (uint64_t)i;
  x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 32);
}

/* Every fm_npy dtype can be written by the expansion and named. */
static inline int fm_dense_dtype_ok(fm_dtype t) { return (unsigned)t < FM_DT_COUNT; }

/* ---- the report builder (fm_dense_report.c) ---- */

#define KR FM_DENSE_KEEP_RUNS

typedef struct builder {
  fm_dense_report rep;
  fm_dense_set *sets;  /* (min(nsets, FM_DENSE_MAX_SET_REPORTS),) */
  fm_dense_set cur;    /* the set being scanned */
  int64_t set;         /* index of the current set */
  int32_t *nruns;      /* keep_intervals: (nsets, Sk) runs per column; else NULL */
  int32_t *runs;       /* keep_intervals: (nsets, Sk, KR, 2) first runs */
  int32_t *best;       /* keep_intervals: (nsets, Sk, 2, 2) two longest runs, row order */
  int64_t *tile_acc;   /* br > 0: (Tc,) masked elements of the current row tile */
  uint8_t *tiles;      /* keep_tiles: (nsets, Tr, Tc) exact classes */
  int64_t reserved;    /* bytes of the arrays above held in the memory budget (fm_limits.h) */
} builder;

struct fm_dense_result {
  fm_dense_report rep;
  fm_dense_set *sets;
  int32_t *nruns, *runs, *best;
  uint8_t *tiles;
  int64_t *all_start; /* keep_all_runs: (nsets*Sk + 1,) */
  int32_t *all_runs;  /* keep_all_runs: (all_start[nsets*Sk], 2) */
  int64_t reserved;   /* bytes of the arrays above held in the memory budget */
};

/* Sq, Sk at least 1 and (batch, heads, Sq, Sk) within the limits; else the
 * status, with the message in err. */
fm_status fm_dense_check_dims(int64_t batch, int64_t heads, int64_t sq, int64_t sk, fm_err *err);
/* The builder of a (batch, heads, Sq, Sk) mask with the options o (the arrays
 * they ask for reserved in the memory budget); its arrays freed by
 * fm_dense_builder_free, or handed to a result by fm_dense_b_result. */
fm_status fm_dense_builder_init(builder *bd, int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                                const fm_dense_opts *o, fm_err *err);
void fm_dense_builder_free(builder *bd);
/* The tile grid of o (br, bc > 0), its accumulator and kept classes. */
fm_status fm_dense_builder_tiles(builder *bd, const fm_dense_opts *o, fm_err *err);

/* A set is fed as: fm_dense_b_begin_set, then its columns (fm_dense_b_column)
 * and rows (fm_dense_b_row, fm_dense_b_tile_row) in any order, then
 * fm_dense_b_end_set; after the last set fm_dense_b_finish, then
 * fm_dense_b_result. */
void fm_dense_b_begin_set(builder *bd, int32_t b, int32_t h);
/* Column j of the current set has n masked runs; runs holds the first
 * min(n, 3), best its two longest (row order; [0, 0) when fewer). */
void fm_dense_b_column(builder *bd, int32_t j, int32_t n, const int32_t (*runs)[2],
                       const int32_t (*best)[2]);
/* The two longest of n <= 3 runs, in row order, [0, 0) for missing ones. */
void fm_dense_best_of_runs(const int32_t (*runs)[2], int n, int32_t best[2][2]);
/* Row i of the current set has n masked runs along it (the transposed mask's
 * column i: Sq' = Sk rows, its own causal limit). */
void fm_dense_b_row(builder *bd, int32_t i, int32_t n, const int32_t (*runs)[2]);
/* Row i of the current set (flags m, (Sk,)) into the exact tile classes. */
void fm_dense_b_tile_row(builder *bd, int32_t i, const uint8_t *m);
/* The current set is done (same_as_head0: it equals head 0 of its batch). */
void fm_dense_b_end_set(builder *bd, int same_as_head0);
/* The report's totals: forms, advice, byte counts (element_size: bytes per
 * stored element of the dense mask). */
void fm_dense_b_finish(builder *bd, int64_t element_size);
/* The result, taking the builder's kept arrays (the builder is freed). */
fm_status fm_dense_b_result(builder *bd, fm_dense_result **out, fm_err *err);

/* ---- the row scan (fm_dense_scan.c) ---- */

/* Every run of every column (keep_all_runs). Runs are recorded as they end
 * (row order, columns mixed) and sorted into
 * their columns when a set ends: pend holds (column, start, end) of the
 * current set, items the sorted runs of the sets before. */
typedef struct run_store {
  int on;
  int64_t sk;
  int32_t *pend; /* (npend, 3) */
  int64_t npend, pend_cap;
  int64_t *start; /* (nsets*Sk + 1,) */
  int32_t *items; /* (count, 2) */
  int64_t count, cap;
  int64_t *cursor; /* (Sk,) */
  fm_status st;    /* FM_ENOMEM once the runs outgrew the machine: the scan fails */
  fm_err err;
  int64_t reserved; /* bytes of the arrays above held in the memory budget */
} run_store;

/* The streaming scanner (fm_dense_scan_*). */
struct fm_dense_scan {
  builder bd;
  int64_t batch, heads, sq, sk;
  int64_t rows_total, row; /* rows expected and fed, every set */
  uint8_t *buf[2];         /* (8 + Sk + 8) bytes each; flags at +8, the 8 before are 0 */
  uint8_t *cur, *prev;     /* flags (Sk,) of this row and the row above (0s above row 0) */
  int32_t *nt;             /* (Sk,) transitions of each column in this set */
  int32_t *tr;             /* (Sk, NTRANS) first transition rows of each column */
  int32_t *start;          /* (Sk,) first row of each column's latest run */
  int32_t *best;           /* (4, Sk) start and length of the longest run, then the second */
  uint64_t *hash;          /* (Sk,) hash of all transition rows; only when heads > 1 */
  int32_t *ref_nt;         /* (Sk,) head 0 of the current batch, when heads > 1 */
  int32_t *ref_tr;         /* (Sk, NTRANS) */
  uint64_t *ref_hash;      /* (Sk,) */
  run_store all;           /* keep_all_runs */
  int64_t reserved;        /* bytes of the arrays above held in the memory budget */
};


/* Runs of masked columns along one row m (Sk,) 0/1 flags, m[-1] readable and 0.
 * Feeds the builder (runs, empty row, diagonal, tiles) and returns the masked count. */
int64_t fm_dense_row_runs(builder *bd, const uint8_t *m, int64_t sk, int32_t i);
/* Processes s->cur (its flags, (Sk,)) as the next row of the scan. */
void fm_dense_scan_commit(fm_dense_scan *s);
/* fm_dense_scan_finish for a mask of element_size bytes per stored element
 * (the report's dense byte counts); s is destroyed. */
fm_status fm_dense_scan_finish_sized(fm_dense_scan *s, int64_t element_size, fm_dense_result **out,
                                     fm_err *err);

#endif
