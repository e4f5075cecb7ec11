/* fm_json.h — a small JSON emitter into a growing buffer (no parsing).
 * Keys are given for object members and NULL for array elements. */
#ifndef FM_JSON_H
#define FM_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_json {
  char *buf; /* owned; NUL-terminated text */
  size_t len, cap;
  int depth;
  int first[64];   /* per level: no member written yet */
  char closer[64]; /* per level: '}' or ']' */
  int pretty;
  int oom;
} fm_json;

void fm_json_init(fm_json *j, int pretty);
void fm_json_free(fm_json *j);
void fm_json_object(fm_json *j, const char *key);
void fm_json_array(fm_json *j, const char *key);
void fm_json_end(fm_json *j); /* closes the innermost object or array */
void fm_json_int(fm_json *j, const char *key, int64_t v);
void fm_json_double(fm_json *j, const char *key, double v); /* non-finite: null */
void fm_json_string(fm_json *j, const char *key, const char *v); /* NULL: null */
void fm_json_bool(fm_json *j, const char *key, int v);
void fm_json_null(fm_json *j, const char *key);

#ifdef __cplusplus
}
#endif
#endif
