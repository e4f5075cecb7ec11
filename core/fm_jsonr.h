/* fm_jsonr.h — a small JSON reader: parses a whole document (RFC 8259) into
 * a read-only tree (fm_json.h is the writer). Used for the GPU profiles of
 * the timing model and the per-case records of bench and scenario runs, so
 * that core reads them with no dependency.
 *
 * A document owns every value in it: pointers returned by the accessors live
 * until fm_jdoc_free. Accessors take NULL and wrong types gracefully (NULL,
 * the default, or 0), so that a missing key and a key of the wrong type read
 * alike; callers that must tell them apart check fm_jv_type_of.
 *
 * Limits: documents up to FM_JSON_MAX_BYTES, nesting up to 64 levels.
 * Parse errors read "NAME:LINE:COL: what was expected".
 */
#ifndef FM_JSONR_H
#define FM_JSONR_H

#include <stddef.h>
#include <stdint.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FM_JSON_MAX_BYTES ((int64_t)256 << 20)

typedef enum fm_jv_type {
  FM_JV_NULL = 0,
  FM_JV_BOOL,
  FM_JV_NUMBER,
  FM_JV_STRING,
  FM_JV_ARRAY,
  FM_JV_OBJECT
} fm_jv_type;

typedef struct fm_jdoc fm_jdoc; /* a parsed document */
typedef struct fm_jv fm_jv;     /* one value inside it */

/* Parses len bytes of text; name labels error messages (a file name). The
 * caller owns *out (fm_jdoc_free). FM_EFORMAT on a syntax error, FM_ENOMEM
 * when too large. */
fm_status fm_jdoc_parse(const char *text, size_t len, const char *name, fm_jdoc **out,
                        fm_err *err);
/* Reads and parses a file: FM_EIO when it cannot be read, then as above. */
fm_status fm_jdoc_load(const char *path, fm_jdoc **out, fm_err *err);
void fm_jdoc_free(fm_jdoc *d); /* NULL is a no-op */

const fm_jv *fm_jdoc_root(const fm_jdoc *d);

fm_jv_type fm_jv_type_of(const fm_jv *v); /* FM_JV_NULL for NULL */
/* The member `key` of an object (the last one when repeated); NULL when v is
 * not an object or has no such member. */
const fm_jv *fm_jv_get(const fm_jv *v, const char *key);
/* Children of an array or object, in document order: first, then next;
 * NULL at the end (or when v has none). fm_jv_key is a member's key. */
const fm_jv *fm_jv_first(const fm_jv *v);
const fm_jv *fm_jv_next(const fm_jv *v);
const char *fm_jv_key(const fm_jv *member); /* NULL for array elements */
int64_t fm_jv_count(const fm_jv *v);        /* children of an array or object, else 0 */

double fm_jv_number(const fm_jv *v, double dflt); /* dflt unless a number */
/* A number as an integer without undefined conversion: dflt unless a
 * number; truncated toward zero and saturated to [INT64_MIN, INT64_MAX]
 * (callers range-check the result; JSON has no NaN or infinity). */
int64_t fm_jv_int64(const fm_jv *v, int64_t dflt);
/* 1 when v is a number written as an integer (no fraction and no exponent:
 * "64", not "64.0" or "6.4e1"), else 0; its value is fm_jv_int64's. Readers
 * of formats whose integers are written that way (trace summaries) tell a
 * mistyped member from a number with it. */
int fm_jv_is_integer(const fm_jv *v);
/* 0 and *out when v is a number holding an integer in [lo, hi]; else -1. */
int fm_jv_int_in(const fm_jv *v, int64_t lo, int64_t hi, int64_t *out);
const char *fm_jv_string(const fm_jv *v);         /* NULL unless a string (UTF-8) */
int fm_jv_bool(const fm_jv *v, int dflt);         /* dflt unless true/false */

/* Location of a value in its document's text, for messages: line and column (1-based). */
void fm_jv_where(const fm_jv *v, int *line, int *col);

#ifdef __cplusplus
}
#endif
#endif
