/* fm_samples.h — the FlashMask paper's document samples
 * (data/kernel_test_seq_info.txt): per total length, lines of
 * (prefix_len, doc_len) pairs and a 0/1 QK-sparse flag per document. */
#ifndef FM_SAMPLES_H
#define FM_SAMPLES_H

#include <stdint.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_doc {
  int32_t prefix; /* tokens of the document's bidirectional prefix (prefix-LM) */
  int32_t len;    /* tokens */
  int32_t qk;     /* 1: the document is a QK-sparse span */
  int32_t nparts; /* 0: answers drawn; else question + answers given in parts[] */
  int32_t parts[8];
} fm_doc;

typedef struct fm_docs {
  int32_t n;
  fm_doc *docs; /* owned; free with fm_docs_free */
} fm_docs;
void fm_docs_free(fm_docs *d);

typedef struct fm_sample {
  int64_t total; /* the sequence length the sample is for */
  int index;     /* 0-based index among the samples of that total */
  fm_docs docs;
} fm_sample;

typedef struct fm_sample_set {
  int count;
  fm_sample *items; /* owned */
} fm_sample_set;

/* Parses the text of a sample file; `name` labels messages ("file:line: ..."). */
fm_status fm_samples_parse(const char *text, const char *name, fm_sample_set *out, fm_err *err);
fm_status fm_samples_load(const char *path, fm_sample_set *out, fm_err *err);
/* The samples shipped with fmsim (built into the binary). */
fm_status fm_samples_builtin(fm_sample_set *out, fm_err *err);
void fm_samples_free(fm_sample_set *s);

/* The k-th sample for `total`, or NULL. */
const fm_sample *fm_samples_find(const fm_sample_set *s, int64_t total, int k);
/* How many samples exist for `total`. */
int fm_samples_count(const fm_sample_set *s, int64_t total);

#ifdef __cplusplus
}
#endif
#endif
