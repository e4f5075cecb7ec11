/* fm_families.h — the mask families of the FlashMask paper's kernel table
 * (docs/FAMILIES.md), generated directly in column-interval form in O(Sk)
 * time and memory per vector set.
 *
 * The registry: one fm_family_info row per family in fm_families.c holds
 * everything about it — name, causal flag, smallest form, its parameters
 * with their defaults, ranges and meanings, the paper's block sparsity and
 * the function that fills the interval vectors. `fmsim families`, the
 * paper's table (fm_paper.h), the viewer and the tests all read these rows;
 * adding a family is one row and one build function (docs/DESIGN.md,
 * "Adding a family").
 *
 * Parameters are given as "key=value" strings. Integer parameters default to
 * the paper's benchmark values (w = S/16, g = 16, wl = wr = S/16, p = S/2,
 * r = S/2). Documents come, in this order of preference, from an explicit
 * `docs=` list, a seeded draw when docs_min or docs_max is given, the sample
 * chosen with `sample` (or sample 0 when the sample file has samples for S),
 * or else a seeded draw of docs_min..docs_max documents (default 2..6).
 * Every number in a parameter string is range-checked before any arithmetic:
 * a bad string is FM_EINVAL with one line, never an overflow.
 */
#ifndef FM_FAMILIES_H
#define FM_FAMILIES_H

#include <stddef.h>
#include <stdint.h>

#include "fm_colmask.h"
#include "fm_paper.h"
#include "fm_samples.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fm_param_kind {
  FM_PARAM_INT = 0,  /* an integer with a default and a range (the fields below) */
  FM_PARAM_DOCS = 1, /* a document list, fm_docs_parse syntax */
  FM_PARAM_SPANS = 2 /* QK-sparse spans "start:len,start:len,..." */
} fm_param_kind;

/* Where an integer parameter's range ends: a number, or S. */
#define FM_PARAM_HI_S (-1)

typedef struct fm_param_info {
  const char *name;
  const char *default_text; /* as shown to users, e.g. "S/16" */
  const char *meaning;
  fm_param_kind kind;
  /* FM_PARAM_INT only. The default is S / dflt_s_div when dflt_s_div > 0,
   * else dflt, moved into the range; the range is [lo, hi] with hi = S for
   * FM_PARAM_HI_S and lo raised to the value of parameter lo_param when that
   * is not NULL (docs_min <= docs_max). */
  int64_t dflt;
  int32_t dflt_s_div;
  int64_t lo, hi;
  const char *lo_param;
  int steers_draw;        /* 1: only steers a draw, not listed in fm_family_used.params */
  const char *range_note; /* said after an out-of-range value, or NULL */
} fm_param_info;

/* What a build function reads: S, the resolved parameters, the documents
 * (opaque; fm_families.c). */
typedef struct fm_family_ctx fm_family_ctx;

/* Fills vector set `set` of m (created by fm_family_build with every
 * interval empty, one set unless the family is per_head). */
typedef fm_status (*fm_family_build_fn)(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                        fm_err *err);

#define FM_FAMILY_MAX_PARAMS 8 /* parameters of one row */

typedef struct fm_family_info {
  const char *name;
  const char *short_name; /* column header of the paper's table */
  int causal;
  const char *form; /* smallest form, "-" when no intervals are needed */
  const char *meaning;
  int per_head;     /* 1: one draw per (batch, head) */
  int uses_docs;    /* 1: documents from docs=, a sample or a draw */
  const fm_param_info *params;
  int nparams;      /* at most FM_FAMILY_MAX_PARAMS */
  int reports_seed; /* 1: the build draws from the seed; fm_family_used.params says it */
  double paper_rho[FM_PAPER_NLENGTHS]; /* the paper's rho at fm_paper_lengths; -1: none */
  fm_family_build_fn build;
} fm_family_info;

int fm_family_count(void);
const fm_family_info *fm_family_at(int i);             /* NULL when out of range */
const fm_family_info *fm_family_find(const char *name); /* NULL when unknown */
/* The family name closest to a typo ("casual" -> "causal"; fm_closest in
 * fm_words.h), NULL when none is close or name is known. */
const char *fm_family_closest(const char *name);

typedef struct fm_family_request {
  const char *family;
  int64_t seqlen;            /* S = Sq = Sk */
  int64_t batch, heads;      /* B, H: per-head families draw B*H sets */
  uint64_t seed;             /* every random draw derives from it */
  int sample;                /* -1: default (sample 0 when the file has S) */
  const fm_sample_set *samples; /* may be NULL: then documents are drawn */
  int nparams;
  const char *const *params; /* "key=value" strings */
} fm_family_request;

/* What a build actually used, for reports and traces. */
typedef struct fm_family_used {
  char params[512];      /* "w=512", "docs=3145,2203,2844" ... */
  char docs_source[160]; /* "sample 0 of 8192", "explicit", "drawn (seed 1)", "" */
  int32_t ndocs;
} fm_family_used;

/* Builds the mask; the caller owns *out. `used` may be NULL. */
fm_status fm_family_build(const fm_family_request *req, fm_colmask **out, fm_family_used *used,
                          fm_err *err);

/* sizeof of the two structs above, so that bindings mirroring them (the
 * Python package's fmsim.family) can check their copies at load time. */
size_t fm_family_request_size(void);
size_t fm_family_used_size(void);

/* Parses a document list "len,len,..." where each item is [prefix:]len or
 * [prefix:]question+answer+answer... (share_question: at most
 * FM_DOC_MAX_PARTS parts, a question and up to FM_DOC_MAX_PARTS - 1
 * answers). Every number lies in 0..FM_MAX_SEQLEN. On success the caller
 * frees out with fm_docs_free; on failure out is empty. */
#define FM_DOC_MAX_PARTS ((int)(sizeof(((fm_doc *)0)->parts) / sizeof(int32_t)))
fm_status fm_docs_parse(const char *text, fm_docs *out, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
