/* fm_dense.h — dense attention masks (.npy) as a source of column-interval
 * masks: streaming representability analysis, conversion and expansion.
 *
 * A dense mask is only ever a source or a check (docs/DESIGN.md, "Data
 * flow"): it is scanned
 * once, row by row in storage order, with O(Sk) working state per (batch,
 * head); it is never held in memory. Per key column the scanner counts the
 * masked runs (transitions between consecutive rows) and keeps the first
 * three runs, enough to decide which interval forms hold the column
 * (fm_runs_fit, causal triangle rows included) and to show a column that
 * does not fit. Per query row it does the same along the row, which decides
 * whether the transposed (row-wise) mask would fit instead.
 *
 * For masks that do not fit, the scan also gathers what to do about it
 * (fm_dense_advice): runs per column as a histogram, the longest prefix of
 * query rows that fits, how many (batch, head) sets fit on their own, and the
 * tightest fitting sub-mask: per column its two longest masked runs (a
 * bidir-4 mask that masks a subset of the mask, so FlashMask can skip what
 * it skips and an extra element mask does the rest). With a tile size in the
 * options the dense mask's own Br x Bc tiles are classified exactly as well.
 *
 * Values (the element -> masked rule):
 *   bool, uint8, int8, int32,  non-zero = may attend (PyTorch's convention),
 *   int64, uint64              zero = masked; masked_true flips it.
 *   float32, float64,          additive: masked when the value is -inf or
 *   float16, bfloat16          <= -10000 as rounded to the dtype (bfloat16:
 *   (stored as <u2)            -9984); 0 = attend. Any other value (a soft
 *                              bias, +inf, NaN) is read as attend and
 *                              counted in soft_values, so a report can say
 *                              the mask carries more than a mask. A float
 *                              mask holding only 0 and 1 (and some 1) is
 *                              ambiguous and refused unless the reading is
 *                              given: FM_DENSE_READ_BOOL reads it like a bool
 *                              mask (masked_true applies), FM_DENSE_READ_ADDITIVE
 *                              as additive (the 1s are biases).
 * Shapes: [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk], C order, little-endian.
 */
#ifndef FM_DENSE_H
#define FM_DENSE_H

#include <stddef.h>
#include <stdint.h>

#include "fm_colmask.h"
#include "fm_forms.h"
#include "fm_npy.h"
#include "fm_tile_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Additive masks: a value <= this (rounded to the dtype) is masked. */
#define FM_DENSE_ADDITIVE_MASKED (-10000.0)
/* Columns that do not fit kept per form, with their runs, for reports. */
#define FM_DENSE_FIRST_BAD 8
/* Per-(batch, head) summaries kept in a report (aggregates cover all). */
#define FM_DENSE_MAX_SET_REPORTS 1024
/* fm_dense_expand refuses outputs larger than this by default (bytes). */
#define FM_DENSE_EXPAND_MAX_BYTES ((int64_t)16 << 30)

/* How float masks are read (integer and bool masks ignore it). */
typedef enum fm_dense_reading {
  FM_DENSE_READ_AUTO = 0,    /* additive, but a mask of only 0 and 1 is refused (ambiguous) */
  FM_DENSE_READ_BOOL = 1,    /* non-zero = may attend, like a bool mask (masked_true flips) */
  FM_DENSE_READ_ADDITIVE = 2 /* additive: 0 = attend, -inf or <= -10000 = masked */
} fm_dense_reading;

/* Runs kept per column by keep_intervals (the first ones, in row order). */
#define FM_DENSE_KEEP_RUNS 3
/* Buckets of the runs-per-column histogram: 0, 1, 2, 3 and 4 or more. */
#define FM_DENSE_RUNS_HIST 5

typedef struct fm_dense_opts {
  int masked_true;          /* bool/integer masks: non-zero = masked (default: non-zero = attend) */
  int keep_intervals;       /* keep each column's runs, B*H*Sk*11 int32: fm_dense_result_to_colmask,
                               fm_dense_result_runs, fm_dense_result_subset_colmask */
  fm_dense_reading reading; /* float masks (default FM_DENSE_READ_AUTO) */
  int32_t br, bc;           /* > 0: classify the mask's Br x Bc tiles exactly (report.tiles) */
  int keep_tiles;           /* with br, bc: keep the class of every tile (fm_dense_result_tiles) */
  int keep_all_runs;        /* dense files and scans: keep every masked run of every column
                               (fm_dense_result_all_runs), 8 bytes per run; an interval mask
                               (fm_dense_check_colmask) ignores it: fm_colmask_column_runs */
} fm_dense_opts;

/* One column of one (batch, head) that some form cannot hold. */
typedef struct fm_dense_column {
  int32_t batch, head, column;
  int32_t nruns;      /* masked runs in the column, causal triangle rows included */
  int32_t runs[3][2]; /* the first min(nruns, 3) runs, half-open row ranges */
} fm_dense_column;

/* The analysis of one (batch, head). */
typedef struct fm_dense_set {
  int32_t batch, head;
  unsigned fit;                   /* bit (1u << form) for each form holding every column */
  int32_t max_runs;               /* most masked runs in one column */
  int64_t misfits[FM_FORM_COUNT]; /* columns each form cannot hold */
  unsigned row_fit;               /* the same for the rows (the transposed mask) */
  int32_t max_row_runs;           /* most masked runs along one row */
  int64_t masked;                 /* masked elements */
  int64_t empty_rows;             /* rows with no visible key (output 0, LSE -inf) */
  int64_t masked_diagonal;        /* rows i whose diagonal key i + Sk - Sq is masked */
  int same_as_head0;              /* equal to head 0 of its batch (1 for head 0) */
} fm_dense_set;

/* What to do about a mask that does not fit (filled for every mask). */
typedef struct fm_dense_advice {
  int64_t runs_hist[FM_DENSE_RUNS_HIST]; /* columns (every set) with 0, 1, 2, 3, >= 4 masked runs */
  int64_t sets_fit;    /* (batch, head) sets that fit some form on their own */
  int64_t prefix_rows; /* the first prefix_rows query rows fit bidir-4 (= Sq when it all fits) */
  int64_t subset_masked; /* elements the tightest fitting sub-mask masks (two longest runs per
                            column); masked - subset_masked are left to an element mask */
} fm_dense_advice;

/* The dense mask's own tiles, classified exactly (when opts br, bc > 0). */
typedef struct fm_dense_tiles {
  int32_t br, bc, tr, tc;           /* 0 when not asked for */
  int64_t total;                    /* tiles over every set */
  int64_t count[FM_TILE_NCLASSES];  /* by FM_TILE_* class */
  double sparsity;                  /* count[FM_TILE_MASKED] / total */
} fm_dense_tiles;

typedef struct fm_dense_report {
  /* the input */
  fm_dtype dtype;     /* of the file (FM_DT_U16 = bfloat16); FM_DT_I32 for an interval file */
  int ndim;           /* 2, 3 or 4 */
  int64_t batch, heads, sq, sk;
  int masked_true;    /* convention used for bool/integer values */
  int additive;       /* float dtype: 0 = attend, <= threshold = masked */
  int64_t soft_values; /* additive masks: values neither 0 nor masked, read as attend */
  int64_t masked;     /* masked elements, every set */
  /* sanity, every set: a token that cannot see itself is rarely meant (it is
   * the LTS_j = j mistake of docs/FAMILIES.md, "Known traps"); rows that see
   * nothing give 0 */
  int64_t empty_rows;      /* rows with no visible key; valid when rows_known */
  int64_t masked_diagonal; /* rows whose diagonal key (i + Sk - Sq, when in range) is masked */
  /* columns (the column-interval forms) */
  unsigned fit;       /* forms holding every column of every set */
  fm_form form;       /* the smallest of them; FM_FORM_NONE when none does */
  fm_form closest;    /* = form when one fits, else the form with the fewest misfits */
  int32_t max_runs;   /* most masked runs in any column (causal triangle included) */
  int64_t misfits[FM_FORM_COUNT];
  int nfirst[FM_FORM_COUNT];
  fm_dense_column first[FM_FORM_COUNT][FM_DENSE_FIRST_BAD]; /* per form, in scan order */
  int64_t bad_columns; /* misfits[closest]: 0 when the mask fits */
  /* rows (the transposed mask, keys as rows, its own causal triangle) */
  int rows_known;      /* 0 when the rows were not analysed (large interval files) */
  unsigned row_fit;
  fm_form transposed_form; /* smallest form holding the transposed mask, or FM_FORM_NONE */
  int32_t max_row_runs;
  /* heads */
  int shared_across_heads; /* within every batch, every head equals head 0 */
  int64_t h_mask;          /* 1 when shared, else heads */
  /* memory */
  int64_t dense_bytes;      /* the dense data as given: B*H*Sq*Sk*element size */
  int64_t dense_bool_bytes; /* B*H*Sq*Sk */
  int64_t interval_bytes;   /* Paddle int32 [B, H_mask, Sk, k] in `form`; 0 when none fits */
  fm_dense_advice advice;
  fm_dense_tiles tiles;
  /* per (batch, head), the first FM_DENSE_MAX_SET_REPORTS in storage order */
  int64_t nsets;
  int nset_reports;
  const fm_dense_set *sets; /* owned by the result */
} fm_dense_report;

typedef struct fm_dense_result fm_dense_result;

/* Reads and analyses a dense mask file. Never loads it: buffered reads of
 * whole rows (a few MiB, at least one row) and O(Sk) state (the scanner's,
 * below). The caller owns *out (destroy with fm_dense_result_destroy). An
 * interval file given here is recognised and named as such.
 * Memory: the scan state, the read buffer and what the options keep are
 * reserved in the memory budget (fm_mem_reserve, fm_limits.h) before they are
 * allocated, from the file's header alone; a mask too wide for the limit is
 * refused (FM_ENOMEM, one line naming the estimate and the limit) before
 * any data is read. The kept arrays stay reserved until
 * fm_dense_result_destroy. The path is opened with fm_input_open
 * (fm_input.h): a FIFO, socket or device is refused at once (FM_EIO). */
fm_status fm_dense_check_file(const char *path, const fm_dense_opts *o, fm_dense_result **out,
                              fm_err *err);

/* The analysis of an interval mask, for `check --intervals`: columns from
 * the intervals (O(Sk) per set); the rows are expanded (O(Sq*Sk) per set)
 * only when nsets*Sq*Sk <= max_row_elements, else rows_known = 0. Of o (may
 * be NULL) only keep_intervals, br, bc and keep_tiles count (the tiles come
 * from fm_classify's exact classes). */
fm_status fm_dense_check_colmask(const fm_colmask *m, int64_t max_row_elements,
                                 const fm_dense_opts *o, fm_dense_result **out, fm_err *err);

const fm_dense_report *fm_dense_result_report(const fm_dense_result *r);

/* The intervals of an analysed mask in form f (FM_FORM_NONE: the smallest
 * form), H_mask = 1 when every head shares the mask. Needs keep_intervals.
 * FM_EUNSUPPORTED naming the first column that f cannot hold. The caller
 * owns *out. */
fm_status fm_dense_result_to_colmask(const fm_dense_result *r, fm_form f, fm_colmask **out,
                                     fm_err *err);

void fm_dense_result_destroy(fm_dense_result *r); /* NULL is a no-op */

/* Per-column runs of every set (needs keep_intervals; else NULL, as for an
 * interval mask). nruns: (B, H, Sk) int32, the masked runs of each column
 * (causal triangle rows included); runs: (B, H, Sk, FM_DENSE_KEEP_RUNS, 2)
 * int32, the first min(nruns, 3) runs as half-open row ranges, the rest 0.
 * Owned by the result. What a viewer needs to show the columns that no form
 * holds (fm_runs_fit on min(nruns, 4) of them says which forms do). */
const int32_t *fm_dense_result_nruns(const fm_dense_result *r);
const int32_t *fm_dense_result_runs(const fm_dense_result *r);

/* Every masked run of every column, when the options asked for keep_all_runs
 * (else NULL): the return value is start, (B*H*Sk + 1,) int64; *runs gets
 * (start[B*H*Sk], 2) int32 half-open row ranges. Column j of (batch b, head h)
 * is c = (b*H + h)*Sk + j and holds runs[start[c] .. start[c+1]), in row
 * order. Owned by the result. This is what draws a mask that fits no
 * interval form exactly (viz/); a scan that would keep more runs than the
 * machine can hold fails with FM_ENOMEM (fm_limits.h) naming the count. */
const int64_t *fm_dense_result_all_runs(const fm_dense_result *r, const int32_t **runs);

/* One column's runs and the forms that hold it (needs keep_intervals;
 * FM_EINVAL for an index out of range). *fit gets fm_runs_fit bits. */
fm_status fm_dense_result_column(const fm_dense_result *r, int64_t batch, int64_t head,
                                 int64_t column, fm_dense_column *out, unsigned *fit, fm_err *err);

/* The tightest mask that fits and masks a subset of the analysed one: per
 * column its two longest masked runs (ties: the earlier), as a bidirectional
 * mask, B x H_mask sets. Equal to the mask when it fits. Needs keep_intervals.
 * The caller owns *out. */
fm_status fm_dense_result_subset_colmask(const fm_dense_result *r, fm_colmask **out, fm_err *err);

/* The exact class (FM_TILE_*) of every tile, (B, H, Tr, Tc) uint8, when the
 * options asked for br, bc and keep_tiles; else NULL. Owned by the result. */
const uint8_t *fm_dense_result_tiles(const fm_dense_result *r);

/* sizeof(fm_dense_report), for bindings that mirror the struct (Python). */
size_t fm_dense_report_size(void);

/* --- streaming from any source: rows in storage order --- */

typedef struct fm_dense_scan fm_dense_scan;

/* batch, heads >= 1; the scan expects batch*heads*sq rows of sk flags.
 * Allocates about 50 bytes per key column (90 when heads > 1), plus what o
 * keeps (keep_intervals: 60 bytes per column of every set; keep_tiles: a
 * byte per tile; keep_all_runs: 8 bytes per column of every set and the runs
 * as they come), all reserved in the memory budget (fm_limits.h) until
 * fm_dense_scan_destroy / _finish (the kept arrays: until the result is
 * destroyed). FM_ENOMEM, before allocating, when that exceeds the limit. */
fm_status fm_dense_scan_create(int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                               const fm_dense_opts *o, fm_dense_scan **out, fm_err *err);
/* One row (Sk,) uint8: non-zero = masked. */
void fm_dense_scan_row(fm_dense_scan *s, const uint8_t *masked);
/* nrows consecutive rows (nrows, Sk) uint8, C order; attend = 1: non-zero =
 * may attend (a FlexAttention mask_mod's bool result), 0: non-zero = masked.
 * Rows past B*H*Sq are counted and make fm_dense_scan_finish fail. */
void fm_dense_scan_rows(fm_dense_scan *s, const uint8_t *rows, int64_t nrows, int attend);
/* Ends the scan (always consumes s) and returns the result. */
fm_status fm_dense_scan_finish(fm_dense_scan *s, fm_dense_result **out, fm_err *err);
void fm_dense_scan_destroy(fm_dense_scan *s); /* abandon; NULL is a no-op */

/* --- dense output --- */

typedef struct fm_dense_expand_opts {
  fm_dtype dtype;    /* BOOL (default), U8, I8, I32, I64, U64, F32, F64, F16, U16 (bfloat16) */
  int masked_true;   /* bool/integer: write 1 for masked (default: 1 = attend) */
  int64_t heads;     /* 0: the mask's H_mask; else H (a shared mask is repeated) */
  int rank;          /* 4 (0 = 4): [B, H, Sq, Sk]; 3: [H, Sq, Sk] (B = 1); 2: [Sq, Sk] */
  int64_t max_bytes; /* refuse larger outputs; 0 = FM_DENSE_EXPAND_MAX_BYTES */
} fm_dense_expand_opts;

/* Writes m as a dense mask, one row at a time (O(Sk) memory, checked with
 * fm_mem_check), atomically.
 * Refuses (FM_ENOMEM) an output above max_bytes or above the free space of
 * the target's folder. Additive dtypes get 0 and -inf. */
fm_status fm_dense_expand(const fm_colmask *m, const char *path, const fm_dense_expand_opts *o,
                          fm_err *err);

/* --- names and file kinds --- */

/* "bool", "uint8", "int8", "int32", "int64", "uint64", "float32", "float64", "float16",
 * "bfloat16". */
const char *fm_dense_dtype_name(fm_dtype t);
fm_status fm_dense_dtype_parse(const char *name, fm_dtype *out, fm_err *err);
/* 1 for the float dtypes (float32, float64, float16, bfloat16): additive when written. */
int fm_dense_dtype_is_float(fm_dtype t);

#ifdef __cplusplus
}
#endif
#endif
