#include "fm_json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fm_json_init(fm_json *j, int pretty) {
  memset(j, 0, sizeof *j);
  j->pretty = pretty;
  j->first[0] = 1;
}

void fm_json_free(fm_json *j) {
  free(j->buf);
  memset(j, 0, sizeof *j);
}

static void put(fm_json *j, const char *fmt, ...) {
  if (j->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (j->len + (size_t)n + 1 > j->cap) {
    size_t cap = j->cap ? j->cap : 1024;
    while (j->len + (size_t)n + 1 > cap) cap *= 2;
    char *b = realloc(j->buf, cap);
    if (!b) {
      j->oom = 1;
      return;
    }
    j->buf = b;
    j->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(j->buf + j->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  j->len += (size_t)n;
}

static void put_string(fm_json *j, const char *s) {
  put(j, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') put(j, "\\%c", c);
    else if (c == '\n') put(j, "\\n");
    else if (c < 0x20) put(j, "\\u%04x", c);
    else put(j, "%c", c);
  }
  put(j, "\"");
}

static void member(fm_json *j, const char *key) {
  if (j->depth > 0) {
    if (!j->first[j->depth]) put(j, ",");
    if (j->pretty) put(j, "\n%*s", 2 * j->depth, "");
    else if (!j->first[j->depth]) put(j, " ");
  }
  j->first[j->depth] = 0;
  if (key) {
    put_string(j, key);
    put(j, ": ");
  }
}

static void open_level(fm_json *j, const char *key, const char *br) {
  member(j, key);
  put(j, "%s", br);
  if (j->depth < 63) j->depth++;
  j->first[j->depth] = 1;
  j->closer[j->depth] = br[0] == '{' ? '}' : ']';
}

void fm_json_object(fm_json *j, const char *key) { open_level(j, key, "{"); }
void fm_json_array(fm_json *j, const char *key) { open_level(j, key, "["); }

void fm_json_end(fm_json *j) {
  int empty = j->first[j->depth];
  char close = j->closer[j->depth];
  j->depth--;
  if (j->pretty && !empty) put(j, "\n%*s", 2 * j->depth, "");
  put(j, "%c", close);
  if (j->depth == 0 && j->pretty) put(j, "\n");
}

void fm_json_int(fm_json *j, const char *key, int64_t v) {
  member(j, key);
  put(j, "%lld", (long long)v);
}
void fm_json_double(fm_json *j, const char *key, double v) {
  member(j, key);
  if (isfinite(v)) put(j, "%.9g", v);
  else put(j, "null");
}
void fm_json_string(fm_json *j, const char *key, const char *v) {
  member(j, key);
  if (v) put_string(j, v);
  else put(j, "null");
}
void fm_json_bool(fm_json *j, const char *key, int v) {
  member(j, key);
  put(j, v ? "true" : "false");
}
void fm_json_null(fm_json *j, const char *key) {
  member(j, key);
  put(j, "null");
}
