#define _POSIX_C_SOURCE 200809L
#include "fm_samples.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_input.h"
#include "fm_limits.h"

/* Text of data/kernel_test_seq_info.txt, generated into the build by CMake. */
extern const char fm_builtin_samples_text[];

void fm_docs_free(fm_docs *d) {
  if (!d) return;
  free(d->docs);
  d->docs = NULL;
  d->n = 0;
}

void fm_samples_free(fm_sample_set *s) {
  if (!s) return;
  for (int i = 0; i < s->count; i++) fm_docs_free(&s->items[i].docs);
  free(s->items);
  s->items = NULL;
  s->count = 0;
}

typedef struct {
  const char *p;
  const char *end; /* the terminating NUL */
  const char *name;
  int line;
  fm_err *err;
} lex;

static void ws(lex *x) {
  while (*x->p == ' ' || *x->p == '\t' || *x->p == '\r') x->p++;
}
static int lit(lex *x, const char *s) {
  ws(x);
  size_t n = strlen(s);
  if (strncmp(x->p, s, n) != 0) return 0;
  x->p += n;
  return 1;
}
static int num(lex *x, int64_t *v) {
  ws(x);
  if (!isdigit((unsigned char)*x->p)) return 0;
  int64_t r = 0;
  while (isdigit((unsigned char)*x->p)) {
    r = r * 10 + (*x->p++ - '0');
    if (r > ((int64_t)1 << 40)) return 0;
  }
  *v = r;
  return 1;
}

static fm_status bad(lex *x, const char *what) {
  return fm_fail(x->err, FM_EFORMAT, "%s:%d: malformed sample file: expected %s", x->name,
                 x->line, what);
}

/* "Sample K, num_docs N: [(p, l), ...]# [f, ...]" */
static fm_status parse_sample(lex *x, int64_t total, int expect_k, fm_sample *out) {
  int64_t k, n, p, l, f;
  if (!lit(x, "Sample") || !num(x, &k) || !lit(x, ",") || !lit(x, "num_docs") || !num(x, &n) ||
      !lit(x, ":"))
    return bad(x, "'Sample K, num_docs N:'");
  if (k != expect_k)
    return fm_fail(x->err, FM_EFORMAT, "%s:%d: sample numbered %lld, expected %d", x->name,
                   x->line, (long long)k, expect_k);
  if (n < 1 || n > total)
    return fm_fail(x->err, FM_EFORMAT, "%s:%d: num_docs %lld is outside 1..%lld", x->name,
                   x->line, (long long)n, (long long)total);
  /* a count is never trusted past the text that must hold it: each document
     takes at least "(0,1)" and its flag, 6 characters */
  if (n > (x->end - x->p) / 6 + 1)
    return fm_fail(x->err, FM_EFORMAT, "%s:%d: num_docs %lld cannot fit in the %lld bytes left of "
                   "the file (each document takes at least 6)", x->name, x->line, (long long)n,
                   (long long)(x->end - x->p));
  char what[300];
  snprintf(what, sizeof what, "%.200s:%d: %lld documents", x->name, x->line, (long long)n);
  fm_status ms = fm_mem_check(fm_mem_mul(n, (int64_t)sizeof(fm_doc)), what, x->err);
  if (ms != FM_OK) return ms;
  fm_doc *docs = calloc((size_t)n, sizeof *docs);
  if (!docs) return fm_fail(x->err, FM_ENOMEM, "out of memory");
  fm_status st = FM_OK;
  int64_t sum = 0;
  if (!lit(x, "[")) st = bad(x, "'['");
  for (int64_t d = 0; st == FM_OK && d < n; d++) {
    if ((d > 0 && !lit(x, ",")) || !lit(x, "(") || !num(x, &p) || !lit(x, ",") || !num(x, &l) ||
        !lit(x, ")")) {
      st = bad(x, "num_docs pairs '(prefix_len, doc_len)'");
      break;
    }
    if (l < 1 || p > l) {
      st = fm_fail(x->err, FM_EFORMAT, "%s:%d: document %lld has length %lld and prefix %lld "
                   "(need length >= 1 and prefix <= length)", x->name, x->line, (long long)d,
                   (long long)l, (long long)p);
      break;
    }
    docs[d].prefix = (int32_t)p;
    docs[d].len = (int32_t)l;
    sum += l;
  }
  if (st == FM_OK && !lit(x, "]")) st = bad(x, "']' after num_docs pairs");
  if (st == FM_OK && sum > total)
    st = fm_fail(x->err, FM_EFORMAT, "%s:%d: documents sum to %lld tokens, more than the total %lld",
                 x->name, x->line, (long long)sum, (long long)total);
  if (st == FM_OK && (!lit(x, "#") || !lit(x, "["))) st = bad(x, "'# [' and the QK-sparse flags");
  for (int64_t d = 0; st == FM_OK && d < n; d++) {
    if ((d > 0 && !lit(x, ",")) || !num(x, &f) || f > 1) {
      st = bad(x, "num_docs flags of 0 or 1");
      break;
    }
    docs[d].qk = (int32_t)f;
  }
  if (st == FM_OK && !lit(x, "]")) st = bad(x, "']' after the flags");
  ws(x);
  if (st == FM_OK && *x->p != '\n' && *x->p != 0) st = bad(x, "the end of the line");
  if (st != FM_OK) {
    free(docs);
    return st;
  }
  out->total = total;
  out->index = expect_k - 1;
  out->docs.n = (int32_t)n;
  out->docs.docs = docs;
  return FM_OK;
}

fm_status fm_samples_parse(const char *text, const char *name, fm_sample_set *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  lex x = {text, text + strlen(text), name, 1, err};
  int64_t total = 0;
  int next_k = 1, cap = 0;
  fm_status st = FM_OK;
  while (*x.p && st == FM_OK) {
    ws(&x);
    if (*x.p == '\n') {
      x.p++;
      x.line++;
      continue;
    }
    if (*x.p == 0) break;
    if (strncmp(x.p, "Total length", 12) == 0) {
      x.p += 12;
      if (!lit(&x, ":") || !num(&x, &total) || total < 1 || total > (1 << 30)) {
        st = bad(&x, "'Total length: N' with 1 <= N <= 2^30");
        break;
      }
      next_k = 1;
      while (*x.p && *x.p != '\n') x.p++; /* the rest names the count range: informative only */
      continue;
    }
    if (total == 0) {
      st = bad(&x, "'Total length: N' before the first sample");
      break;
    }
    if (out->count == cap) {
      cap = cap ? cap * 2 : 16;
      fm_sample *items = realloc(out->items, sizeof *items * (size_t)cap);
      if (!items) {
        st = fm_fail(err, FM_ENOMEM, "out of memory");
        break;
      }
      out->items = items;
    }
    st = parse_sample(&x, total, next_k, &out->items[out->count]);
    if (st == FM_OK) {
      out->count++;
      next_k++;
    }
  }
  if (st == FM_OK && out->count == 0)
    st = fm_fail(err, FM_EFORMAT, "%s: no samples found", name);
  if (st != FM_OK) fm_samples_free(out);
  return st;
}

fm_status fm_samples_load(const char *path, fm_sample_set *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  FILE *f;
  fm_status ost = fm_input_open(path, &f, err);
  if (ost != FM_OK) return ost;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 65536;
      if (cap > (64u << 20)) {
        free(buf);
        fclose(f);
        return fm_fail(err, FM_EFORMAT, "%s: sample file larger than 64 MiB", path);
      }
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return fm_fail(err, FM_ENOMEM, "out of memory");
      }
      buf = nb;
    }
    size_t r = fread(buf + n, 1, 4096, f);
    n += r;
    if (r < 4096) break;
  }
  if (ferror(f)) { /* a read error (a folder, say) is not the end of the file */
    int saved = errno;
    free(buf);
    fclose(f);
    return fm_fail(err, FM_EIO, "%s: cannot read sample file: %s", path, strerror(saved));
  }
  fclose(f);
  buf[n] = 0;
  if (strlen(buf) != n) {
    free(buf);
    return fm_fail(err, FM_EFORMAT, "%s: sample file contains NUL bytes (binary?)", path);
  }
  fm_status st = fm_samples_parse(buf, path, out, err);
  free(buf);
  return st;
}

fm_status fm_samples_builtin(fm_sample_set *out, fm_err *err) {
  return fm_samples_parse(fm_builtin_samples_text, "kernel_test_seq_info.txt (built in)", out, err);
}

const fm_sample *fm_samples_find(const fm_sample_set *s, int64_t total, int k) {
  for (int i = 0; i < s->count; i++)
    if (s->items[i].total == total && s->items[i].index == k) return &s->items[i];
  return NULL;
}

int fm_samples_count(const fm_sample_set *s, int64_t total) {
  int n = 0;
  for (int i = 0; i < s->count; i++) n += s->items[i].total == total;
  return n;
}
