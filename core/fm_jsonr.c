/* fm_jsonr.c — the JSON reader (fm_jsonr.h): recursive descent into a node
 * array and a string pool, indices while parsing, pointers once done. */
#include "fm_jsonr.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_input.h"

#define MAX_DEPTH 64

struct fm_jv {
  fm_jv_type type;
  int boolean, integer, line, col; /* integer: a number without fraction or exponent */
  double number;
  int64_t count;
  int64_t first_i, next_i, last_i, str_i, key_i; /* while parsing; -1 for none */
  const fm_jv *first, *next;                      /* once parsed */
  const char *str, *key;
};

struct fm_jdoc {
  fm_jv *nodes;
  int64_t n, cap;
  char *pool;
  int64_t plen, pcap;
};

typedef struct parser {
  const char *s, *name;
  size_t len, at;
  fm_jdoc *d;
  fm_err *err;
  size_t wat;        /* where_of's position, line and column */
  int wline, wcol;
} parser;

/* Line and column of offset `at` (1-based), counted on from the last query:
 * the parser only moves forward, so the whole count is O(len). */
static void where_of(parser *p, size_t at, int *line, int *col) {
  if (at < p->wat) {
    p->wat = 0;
    p->wline = p->wcol = 1;
  }
  for (; p->wat < at && p->wat < p->len; p->wat++) {
    if (p->s[p->wat] == '\n') {
      p->wline++;
      p->wcol = 1;
    } else {
      p->wcol++;
    }
  }
  *line = p->wline;
  *col = p->wcol;
}

static fm_status fail_at(parser *p, const char *what) {
  int line, col;
  where_of(p, p->at, &line, &col);
  return fm_fail(p->err, FM_EFORMAT, "%s:%d:%d: %s", p->name, line, col, what);
}

static void skip_ws(parser *p) {
  while (p->at < p->len && strchr(" \t\r\n", p->s[p->at]) && p->s[p->at]) p->at++;
}

static int64_t new_node(parser *p, fm_jv_type t) {
  fm_jdoc *d = p->d;
  if (d->n == d->cap) {
    int64_t cap = d->cap ? d->cap * 2 : 64;
    fm_jv *nn = realloc(d->nodes, sizeof *nn * (size_t)cap);
    if (!nn) return -1;
    d->nodes = nn;
    d->cap = cap;
  }
  fm_jv *v = &d->nodes[d->n];
  memset(v, 0, sizeof *v);
  v->type = t;
  v->first_i = v->next_i = v->last_i = v->str_i = v->key_i = -1;
  where_of(p, p->at, &v->line, &v->col);
  return d->n++;
}

static int pool_put(fm_jdoc *d, const char *bytes, size_t n) {
  if (d->plen + (int64_t)n + 1 > d->pcap) {
    int64_t cap = d->pcap ? d->pcap : 256;
    while (cap < d->plen + (int64_t)n + 1) cap *= 2;
    char *np = realloc(d->pool, (size_t)cap);
    if (!np) return -1;
    d->pool = np;
    d->pcap = cap;
  }
  memcpy(d->pool + d->plen, bytes, n);
  d->plen += (int64_t)n;
  return 0;
}

static int hex4(const char *s, unsigned *out) {
  *out = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    unsigned v = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
    if (v > 15) return -1;
    *out = *out * 16 + v;
  }
  return 0;
}

static int put_utf8(fm_jdoc *d, unsigned cp) {
  char b[4];
  size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  static const unsigned char lead[5] = {0, 0x00, 0xc0, 0xe0, 0xf0};
  for (size_t i = n - 1; i > 0; i--) {
    b[i] = (char)(0x80 | (cp & 0x3f));
    cp >>= 6;
  }
  b[0] = (char)(lead[n] | cp);
  return pool_put(d, b, n);
}

/* A string at p->at (the opening quote): its pool offset in *off. */
static fm_status parse_string(parser *p, int64_t *off) {
  p->at++;
  *off = p->d->plen;
  while (p->at < p->len && p->s[p->at] != '"') {
    unsigned char c = (unsigned char)p->s[p->at];
    if (c < 0x20) return fail_at(p, "control character in a string");
    if (c != '\\') {
      if (pool_put(p->d, (const char *)&c, 1)) return fm_fail(p->err, FM_ENOMEM, "out of memory");
      p->at++;
      continue;
    }
    if (p->at + 1 >= p->len) break;
    char e = p->s[p->at + 1];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *k = strchr(from, e);
    if (e && k) {
      if (pool_put(p->d, to + (k - from), 1)) return fm_fail(p->err, FM_ENOMEM, "out of memory");
      p->at += 2;
      continue;
    }
    unsigned cp, lo;
    if (e != 'u' || p->at + 6 > p->len || hex4(p->s + p->at + 2, &cp))
      return fail_at(p, "bad escape in a string (expected \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX)");
    p->at += 6;
    if (cp >= 0xd800 && cp < 0xdc00 && p->at + 6 <= p->len && p->s[p->at] == '\\' &&
        p->s[p->at + 1] == 'u' && !hex4(p->s + p->at + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      p->at += 6;
    }
    if (put_utf8(p->d, cp)) return fm_fail(p->err, FM_ENOMEM, "out of memory");
  }
  if (p->at >= p->len) return fail_at(p, "unterminated string");
  p->at++;
  if (pool_put(p->d, "", 1)) return fm_fail(p->err, FM_ENOMEM, "out of memory");
  return FM_OK;
}

static fm_status parse_value(parser *p, int depth, int64_t *out);

/* Appends child c to container v (by index). */
static void adopt(fm_jdoc *d, int64_t v, int64_t c) {
  if (d->nodes[v].last_i < 0) d->nodes[v].first_i = c;
  else d->nodes[d->nodes[v].last_i].next_i = c;
  d->nodes[v].last_i = c;
  d->nodes[v].count++;
}

static fm_status parse_container(parser *p, int depth, int64_t v, int object) {
  char close = object ? '}' : ']';
  p->at++;
  skip_ws(p);
  if (p->at < p->len && p->s[p->at] == close) {
    p->at++;
    return FM_OK;
  }
  for (;;) {
    int64_t key = -1, c;
    fm_status st;
    skip_ws(p);
    if (object) {
      if (p->at >= p->len || p->s[p->at] != '"') return fail_at(p, "expected a member name in quotes");
      if ((st = parse_string(p, &key)) != FM_OK) return st;
      skip_ws(p);
      if (p->at >= p->len || p->s[p->at] != ':') return fail_at(p, "expected ':' after a member name");
      p->at++;
    }
    if ((st = parse_value(p, depth + 1, &c)) != FM_OK) return st;
    p->d->nodes[c].key_i = key;
    adopt(p->d, v, c);
    skip_ws(p);
    if (p->at < p->len && p->s[p->at] == ',') {
      p->at++;
      continue;
    }
    if (p->at < p->len && p->s[p->at] == close) {
      p->at++;
      return FM_OK;
    }
    return fail_at(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static fm_status parse_number(parser *p, int64_t v) {
  size_t a = p->at;
  if (p->at < p->len && p->s[p->at] == '-') p->at++;
  size_t digits = p->at;
  while (p->at < p->len && strchr("0123456789+-.eE", p->s[p->at]) && p->s[p->at]) p->at++;
  char buf[64];
  size_t n = p->at - a;
  if (n == 0 || n >= sizeof buf || digits >= p->at || p->s[digits] < '0' || p->s[digits] > '9') {
    p->at = a;
    return fail_at(p, "expected a value (number, string, array, object, true, false, null)");
  }
  memcpy(buf, p->s + a, n);
  buf[n] = 0;
  char *end;
  errno = 0;
  p->d->nodes[v].number = strtod(buf, &end);
  if (*end || errno == ERANGE) {
    p->at = a;
    return fail_at(p, "malformed number");
  }
  p->d->nodes[v].integer = strpbrk(buf, ".eE") == NULL;
  return FM_OK;
}

static fm_status parse_value(parser *p, int depth, int64_t *out) {
  if (depth > MAX_DEPTH) return fail_at(p, "nesting deeper than 64 levels");
  skip_ws(p);
  if (p->at >= p->len) return fail_at(p, "unexpected end of input");
  char c = p->s[p->at];
  static const struct {
    const char *word;
    fm_jv_type type;
    int b;
  } words[] = {{"true", FM_JV_BOOL, 1}, {"false", FM_JV_BOOL, 0}, {"null", FM_JV_NULL, 0}};
  fm_jv_type t = c == '{' ? FM_JV_OBJECT : c == '[' ? FM_JV_ARRAY : c == '"' ? FM_JV_STRING : FM_JV_NUMBER;
  for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) { /* the text is not NUL-terminated */
    const size_t wl = strlen(words[w].word);
    if (p->len - p->at >= wl && !memcmp(p->s + p->at, words[w].word, wl)) t = words[w].type;
  }
  int64_t v = new_node(p, t);
  if (v < 0) return fm_fail(p->err, FM_ENOMEM, "out of memory parsing %s", p->name);
  *out = v;
  if (t == FM_JV_OBJECT || t == FM_JV_ARRAY) return parse_container(p, depth, v, t == FM_JV_OBJECT);
  if (t == FM_JV_STRING) {
    int64_t off;
    fm_status st = parse_string(p, &off);
    p->d->nodes[v].str_i = off;
    return st;
  }
  if (t == FM_JV_NUMBER) return parse_number(p, v);
  p->d->nodes[v].boolean = c == 't';
  p->at += t == FM_JV_NULL ? 4 : (c == 't' ? 4 : 5);
  return FM_OK;
}

/* Indices to pointers, once the arrays no longer move. */
static void finish(fm_jdoc *d) {
  for (int64_t i = 0; i < d->n; i++) {
    fm_jv *v = &d->nodes[i];
    v->first = v->first_i >= 0 ? &d->nodes[v->first_i] : NULL;
    v->next = v->next_i >= 0 ? &d->nodes[v->next_i] : NULL;
    v->str = v->str_i >= 0 ? d->pool + v->str_i : NULL;
    v->key = v->key_i >= 0 ? d->pool + v->key_i : NULL;
  }
}

fm_status fm_jdoc_parse(const char *text, size_t len, const char *name, fm_jdoc **out,
                        fm_err *err) {
  *out = NULL;
  if ((int64_t)len > FM_JSON_MAX_BYTES)
    return fm_fail(err, FM_ENOMEM, "%s: %lld bytes of JSON (limit %lld)", name, (long long)len,
                   (long long)FM_JSON_MAX_BYTES);
  fm_jdoc *d = calloc(1, sizeof *d);
  if (!d) return fm_fail(err, FM_ENOMEM, "out of memory parsing %s", name);
  parser p = {.s = text, .name = name, .len = len, .d = d, .err = err, .wline = 1, .wcol = 1};
  int64_t root;
  fm_status st = parse_value(&p, 0, &root);
  if (st == FM_OK) {
    skip_ws(&p);
    if (p.at < p.len) st = fail_at(&p, "unexpected text after the document");
  }
  if (st != FM_OK) {
    fm_jdoc_free(d);
    return st;
  }
  finish(d);
  *out = d;
  return FM_OK;
}

fm_status fm_jdoc_load(const char *path, fm_jdoc **out, fm_err *err) {
  *out = NULL;
  FILE *f;
  fm_status ost = fm_input_open(path, &f, err);
  if (ost == FM_EIO) return fm_fail(err, FM_EIO, "cannot open %s: %s", path, strerror(errno));
  if (ost != FM_OK) return ost;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 65536;
      char *nb = (int64_t)cap > FM_JSON_MAX_BYTES + 1 ? NULL : realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return fm_fail(err, FM_ENOMEM, "%s: larger than %lld bytes of JSON", path,
                       (long long)FM_JSON_MAX_BYTES);
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return fm_fail(err, FM_EIO, "cannot read %s", path);
  }
  fm_status st = fm_jdoc_parse(buf, n, path, out, err);
  free(buf);
  return st;
}

void fm_jdoc_free(fm_jdoc *d) {
  if (!d) return;
  free(d->nodes);
  free(d->pool);
  free(d);
}

const fm_jv *fm_jdoc_root(const fm_jdoc *d) { return d && d->n ? &d->nodes[0] : NULL; }
fm_jv_type fm_jv_type_of(const fm_jv *v) { return v ? v->type : FM_JV_NULL; }
const fm_jv *fm_jv_first(const fm_jv *v) {
  return v && (v->type == FM_JV_ARRAY || v->type == FM_JV_OBJECT) ? v->first : NULL;
}
const fm_jv *fm_jv_next(const fm_jv *v) { return v ? v->next : NULL; }
const char *fm_jv_key(const fm_jv *member) { return member ? member->key : NULL; }
int64_t fm_jv_count(const fm_jv *v) {
  return v && (v->type == FM_JV_ARRAY || v->type == FM_JV_OBJECT) ? v->count : 0;
}

const fm_jv *fm_jv_get(const fm_jv *v, const char *key) {
  const fm_jv *found = NULL;
  if (!v || v->type != FM_JV_OBJECT) return NULL;
  for (const fm_jv *c = v->first; c; c = c->next)
    if (!strcmp(c->key, key)) found = c;
  return found;
}

double fm_jv_number(const fm_jv *v, double dflt) {
  return v && v->type == FM_JV_NUMBER ? v->number : dflt;
}
int64_t fm_jv_int64(const fm_jv *v, int64_t dflt) {
  if (!v || v->type != FM_JV_NUMBER || v->number != v->number) return dflt;
  if (v->number >= 9223372036854775807.0) return INT64_MAX; /* 2^63: the first double past it */
  if (v->number <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v->number;
}

int fm_jv_is_integer(const fm_jv *v) { return v && v->type == FM_JV_NUMBER && v->integer; }

int fm_jv_int_in(const fm_jv *v, int64_t lo, int64_t hi, int64_t *out) {
  if (!v || v->type != FM_JV_NUMBER || !(v->number >= (double)lo && v->number <= (double)hi))
    return -1;
  int64_t i = fm_jv_int64(v, 0);
  if ((double)i != v->number || i < lo || i > hi) return -1;
  *out = i;
  return 0;
}

const char *fm_jv_string(const fm_jv *v) { return v && v->type == FM_JV_STRING ? v->str : NULL; }
int fm_jv_bool(const fm_jv *v, int dflt) { return v && v->type == FM_JV_BOOL ? v->boolean : dflt; }

void fm_jv_where(const fm_jv *v, int *line, int *col) {
  *line = v ? v->line : 0;
  *col = v ? v->col : 0;
}
