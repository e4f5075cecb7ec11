/* fm_families.h — the twelve mask families of the FlashMask paper's kernel
 * table (FAMILIES.md), generated directly in column-interval form in O(Sk)
 * time and memory per vector set.
 *
 * Parameters are given as "key=value" strings. Integer parameters default to
 * the paper's benchmark values (w = S/16, g = 16, wl = wr = S/16, p = S/2,
 * r = S/2). Documents come, in this order of preference, from an explicit
 * `docs=` list, a seeded draw when docs_min or docs_max is given, the sample
 * chosen with `sample` (or sample 0 when the sample file has samples for S),
 * or else a seeded draw of docs_min..docs_max documents (default 2..6).
 */
#ifndef FM_FAMILIES_H
#define FM_FAMILIES_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_samples.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_param_info {
  const char *name;
  const char *default_text; /* as shown to users, e.g. "S/16" */
  const char *meaning;
} fm_param_info;

typedef struct fm_family_info {
  const char *name;
  const char *short_name; /* column header of the paper's table */
  int causal;
  const char *form; /* smallest form, "-" when no intervals are needed */
  const char *meaning;
  int per_head;     /* 1: one draw per (batch, head) */
  int uses_docs;    /* 1: documents from docs=, a sample or a draw */
  const fm_param_info *params;
  int nparams;
} fm_family_info;

int fm_family_count(void);
const fm_family_info *fm_family_at(int i);
const fm_family_info *fm_family_find(const char *name); /* NULL when unknown */

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

/* Parses a document list "len,len,..." where each item is
 * [prefix:]len or [prefix:]question+answer+answer... (share_question). */
fm_status fm_docs_parse(const char *text, fm_docs *out, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
