/* fm_families.c — the family registry (fm_families.h): the build functions,
 * then the table of rows, then the driver that parses parameters and calls a
 * row's build function for every vector set. */
#include "fm_families.h"
#include "fm_words.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_rng.h"

struct fm_family_ctx {
  const fm_family_info *fam;
  const fm_family_request *req;
  int64_t S;
  const char *text[FM_FAMILY_MAX_PARAMS]; /* as given, by index in fam->params; NULL = default */
  int64_t ival[FM_FAMILY_MAX_PARAMS];     /* FM_PARAM_INT values, resolved */
  fm_family_used *used;
  int docs_ready;
  fm_docs docs;
  int32_t (*spans)[2]; /* qk_sparse: [start, len] */
  int nspans;
};

/* ---- numbers in parameter strings: digits only, range-checked as they are read ---- */

/* Reads an optionally signed decimal at *p into *out and advances *p; 0 when
 * there is no digit. Magnitudes above 2^62 saturate there (the callers'
 * ranges are far below), so no arithmetic on a value read here overflows. */
static int take_int(const char **p, int64_t *out) {
  const int64_t cap = INT64_C(1) << 62;
  const char *s = *p;
  int neg = *s == '-';
  if (neg || *s == '+') s++;
  if (*s < '0' || *s > '9') return 0;
  int64_t v = 0;
  for (; *s >= '0' && *s <= '9'; s++) v = v > (cap - (*s - '0')) / 10 ? cap : v * 10 + (*s - '0');
  *out = neg ? -v : v;
  *p = s;
  return 1;
}

/* ---- parameters ---- */

static int param_index(const fm_family_info *fam, const char *name, size_t len) {
  for (int p = 0; p < fam->nparams; p++)
    if (strlen(fam->params[p].name) == len && strncmp(fam->params[p].name, name, len) == 0)
      return p;
  return -1;
}

static const char *param_text(const fm_family_ctx *c, const char *name) {
  int p = param_index(c->fam, name, strlen(name));
  return p < 0 ? NULL : c->text[p];
}

/* The resolved value of integer parameter `name` of the family (0 when the
 * row has none: a build function asks only for its own row's parameters). */
static int64_t ival(const fm_family_ctx *c, const char *name) {
  int p = param_index(c->fam, name, strlen(name));
  return p < 0 ? 0 : c->ival[p];
}

static fm_status unknown_param(const fm_family_info *fam, const char *kv, size_t klen,
                               fm_err *err) {
  char list[256] = "";
  for (int p = 0; p < fam->nparams; p++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", p ? ", " : "",
             fam->params[p].name);
  return fm_fail(err, FM_ENOTFOUND, "family %s has no parameter '%.*s' (%s%s)", fam->name,
                 (int)klen, kv, fam->nparams ? "its parameters: " : "it takes none", list);
}

static fm_status collect_params(fm_family_ctx *c, fm_err *err) {
  for (int i = 0; i < c->req->nparams; i++) {
    const char *kv = c->req->params[i], *eq = strchr(kv, '=');
    if (!eq || eq == kv)
      return fm_fail(err, FM_EINVAL, "parameter '%s' is not of the form key=value", kv);
    int p = param_index(c->fam, kv, (size_t)(eq - kv));
    if (p < 0) return unknown_param(c->fam, kv, (size_t)(eq - kv), err);
    if (c->text[p])
      return fm_fail(err, FM_EINVAL, "parameter '%s' given twice", c->fam->params[p].name);
    c->text[p] = eq + 1;
  }
  return FM_OK;
}

/* Resolves integer parameter p: its given value or its default, in range. */
static fm_status resolve_int(fm_family_ctx *c, int p, fm_err *err) {
  const fm_param_info *pi = &c->fam->params[p];
  int64_t lo = pi->lo, hi = pi->hi == FM_PARAM_HI_S ? c->S : pi->hi, v;
  if (pi->lo_param) {
    int q = param_index(c->fam, pi->lo_param, strlen(pi->lo_param));
    if (q >= 0 && q < p && c->ival[q] > lo) lo = c->ival[q];
  }
  const char *t = c->text[p];
  if (t) {
    const char *end = t;
    if (!take_int(&end, &v) || *end)
      return fm_fail(err, FM_EINVAL, "%s: parameter %s='%s' is not an integer", c->fam->name,
                     pi->name, t);
  } else {
    v = pi->dflt_s_div > 0 ? c->S / pi->dflt_s_div : pi->dflt;
    v = v < lo ? lo : v > hi ? hi : v;
  }
  if (v < lo || v > hi) {
    char hi_text[48];
    if (pi->hi == FM_PARAM_HI_S) snprintf(hi_text, sizeof hi_text, "S=%lld", (long long)hi);
    else snprintf(hi_text, sizeof hi_text, "%lld", (long long)hi);
    char given[32];
    snprintf(given, sizeof given, "%lld", (long long)v);
    return fm_fail(err, FM_EINVAL, "%s: parameter %s=%.40s is out of range (%lld <= %s <= %s)%s%s",
                   c->fam->name, pi->name, t ? t : given, (long long)lo, pi->name, hi_text,
                   pi->range_note ? ": " : "", pi->range_note ? pi->range_note : "");
  }
  c->ival[p] = v;
  return FM_OK;
}

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

/* Appends one "key=value" item to used->params, space-separated. */
static void PRINTF_LIKE(2, 3) used_append(fm_family_used *u, const char *fmt, ...) {
  size_t n = strlen(u->params);
  if (n && n + 1 < sizeof u->params) u->params[n++] = ' ', u->params[n] = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(u->params + n, sizeof u->params - n, fmt, ap);
  va_end(ap);
}

/* ---- documents ---- */

/* Frees what was parsed so far and fails with the message. */
static fm_status PRINTF_LIKE(4, 5) docs_fail(fm_docs *out, fm_err *err, fm_status st,
                                             const char *fmt, ...) {
  char msg[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fm_docs_free(out);
  return fm_fail(err, st, "%s", msg);
}

/* One item "[prefix:]len" or "[prefix:]part+part+..." at *p into d. */
static fm_status parse_doc(const char *text, const char **p, fm_doc *d, fm_docs *out,
                           fm_err *err) {
  int64_t v, prefix = -1, len = 0;
  int32_t parts[FM_DOC_MAX_PARTS];
  int nparts = 0;
  memset(d, 0, sizeof *d);
  for (;;) {
    const char *at = *p;
    if (!take_int(p, &v) || v < 0 || v > FM_MAX_SEQLEN)
      return docs_fail(out, err, FM_EINVAL, "documents '%s': expected a length in 0..%d at '%s'",
                       text, FM_MAX_SEQLEN, at);
    if (**p == ':' && prefix < 0 && nparts == 0) {
      prefix = v;
      (*p)++;
      continue;
    }
    if (v < 1)
      return docs_fail(out, err, FM_EINVAL, "documents '%s': every length must be >= 1 (at '%s')",
                       text, at);
    if (nparts == FM_DOC_MAX_PARTS)
      return docs_fail(out, err, FM_EINVAL,
                       "documents '%s': a document has at most %d parts (a question and %d "
                       "answers); one more at '%s'",
                       text, FM_DOC_MAX_PARTS, FM_DOC_MAX_PARTS - 1, at);
    parts[nparts++] = (int32_t)v;
    len += v; /* at most 8 parts of 2^30: no overflow */
    if (**p != '+') break;
    (*p)++;
  }
  if (len > FM_MAX_SEQLEN)
    return docs_fail(out, err, FM_EINVAL, "documents '%s': a document of %lld tokens (at most %d)",
                     text, (long long)len, FM_MAX_SEQLEN);
  if (prefix > len)
    return docs_fail(out, err, FM_EINVAL, "documents '%s': prefix %lld longer than its document (%lld)",
                     text, (long long)prefix, (long long)len);
  d->len = (int32_t)len;
  d->prefix = prefix < 0 ? 0 : (int32_t)prefix;
  if (nparts > 1) {
    d->nparts = nparts;
    memcpy(d->parts, parts, sizeof(int32_t) * (size_t)nparts);
  }
  return FM_OK;
}

fm_status fm_docs_parse(const char *text, fm_docs *out, fm_err *err) {
  out->n = 0;
  out->docs = NULL;
  int32_t cap = 0;
  const char *p = text;
  while (*p) {
    fm_doc d;
    fm_status st = parse_doc(text, &p, &d, out, err);
    if (st != FM_OK) return st;
    if (*p == ',') {
      p++;
      if (!*p) return docs_fail(out, err, FM_EINVAL, "documents '%s': trailing comma", text);
    } else if (*p) {
      return docs_fail(out, err, FM_EINVAL, "documents '%s': unexpected text at '%s'", text, p);
    }
    if (out->n == cap) {
      cap = cap ? cap * 2 : 16;
      fm_doc *nd = realloc(out->docs, sizeof *nd * (size_t)cap);
      if (!nd) return docs_fail(out, err, FM_ENOMEM, "documents '%s': out of memory", text);
      out->docs = nd;
    }
    out->docs[out->n++] = d;
  }
  if (out->n == 0) return fm_fail(err, FM_EINVAL, "documents: empty list");
  return FM_OK;
}

/* k distinct sorted values from [lo, hi) (k <= hi - lo): Floyd's algorithm
 * with insertion for small k, selection sampling (O(hi - lo)) otherwise. */
static void draw_distinct_sorted(fm_rng *rng, int64_t lo, int64_t hi, int64_t k, int64_t *out) {
  int64_t n = hi - lo;
  if (k <= 4096) {
    int64_t m = 0;
    for (int64_t t = n - k; t < n; t++) {
      int64_t v = (int64_t)fm_rng_below(rng, (uint64_t)t + 1) + lo;
      int dup = 0;
      for (int64_t q = 0; q < m; q++) dup |= out[q] == v;
      if (dup) v = t + lo;
      int64_t q = m++;
      while (q > 0 && out[q - 1] > v) {
        out[q] = out[q - 1];
        q--;
      }
      out[q] = v;
    }
    return;
  }
  int64_t chosen = 0;
  for (int64_t t = 0; t < n && chosen < k; t++)
    if ((int64_t)fm_rng_below(rng, (uint64_t)(n - t)) < k - chosen) out[chosen++] = lo + t;
}

static fm_status draw_docs(int64_t S, int64_t dmin, int64_t dmax, uint64_t seed, fm_docs *out,
                           fm_err *err) {
  fm_rng rng;
  fm_rng_seed(&rng, seed, 0x646f6373 /* "docs" */);
  int64_t n = fm_rng_range(&rng, dmin, dmax);
  int64_t *cuts = malloc(sizeof(int64_t) * (size_t)(n + 1));
  out->docs = calloc((size_t)n, sizeof(fm_doc));
  if (!cuts || !out->docs) {
    free(cuts);
    fm_docs_free(out);
    return fm_fail(err, FM_ENOMEM, "out of memory drawing %lld documents", (long long)n);
  }
  out->n = (int32_t)n;
  draw_distinct_sorted(&rng, 1, S, n - 1, cuts);
  int any_qk = 0;
  for (int64_t d = 0; d < n; d++) {
    int64_t a = d == 0 ? 0 : cuts[d - 1], b = d == n - 1 ? S : cuts[d];
    fm_doc *doc = &out->docs[d];
    doc->len = (int32_t)(b - a);
    doc->prefix = (int32_t)fm_rng_range(&rng, doc->len > 1 ? 1 : 0, doc->len / 2 > 1 ? doc->len / 2 : doc->len > 1);
    doc->qk = (int32_t)fm_rng_below(&rng, 2);
    any_qk |= doc->qk;
  }
  if (!any_qk) out->docs[fm_rng_below(&rng, (uint64_t)n)].qk = 1;
  free(cuts);
  return FM_OK;
}

static void format_docs(char *buf, size_t cap, const fm_docs *d, int with_prefix) {
  size_t n = 0;
  buf[0] = 0;
  for (int32_t i = 0; i < d->n && n + 32 < cap; i++)
    n += (size_t)(with_prefix ? snprintf(buf + n, cap - n, "%s%d:%d", i ? "," : "",
                                         d->docs[i].prefix, d->docs[i].len)
                              : snprintf(buf + n, cap - n, "%s%d", i ? "," : "", d->docs[i].len));
  if (n + 32 >= cap) snprintf(buf + cap - 5, 5, "...");
}

static fm_status docs_from_sample(const fm_family_ctx *c, fm_docs *docs, fm_err *err) {
  int64_t S = c->S;
  int k = c->req->sample >= 0 ? c->req->sample : 0;
  int have = fm_samples_count(c->req->samples, S);
  const fm_sample *smp = fm_samples_find(c->req->samples, S, k);
  if (!smp) {
    if (have == 0)
      return fm_fail(err, FM_ENOTFOUND,
                     "no document sample for S=%lld in the sample file (it has samples for "
                     "8192, 32768 and 131072 in the paper's file); give docs= or draw them",
                     (long long)S);
    return fm_fail(err, FM_ENOTFOUND, "sample %d does not exist for S=%lld (there are %d: 0..%d)",
                   k, (long long)S, have, have - 1);
  }
  docs->n = smp->docs.n;
  docs->docs = malloc(sizeof(fm_doc) * (size_t)docs->n);
  if (!docs->docs) return fm_fail(err, FM_ENOMEM, "out of memory");
  memcpy(docs->docs, smp->docs.docs, sizeof(fm_doc) * (size_t)docs->n);
  snprintf(c->used->docs_source, sizeof c->used->docs_source, "sample %d of %lld", k,
           (long long)S);
  return FM_OK;
}

/* The documents of the build: docs=, else a draw when asked, else the
 * sample, else a draw. The last document absorbs any padding. */
static fm_status resolve_docs(fm_family_ctx *c, fm_err *err) {
  const char *text = param_text(c, "docs"), *name = c->fam->name;
  const fm_family_request *req = c->req;
  fm_docs *docs = &c->docs;
  int64_t S = c->S;
  /* docs_min / docs_max ask for a draw, even where the sample file has S */
  int draw_asked = param_text(c, "docs_min") || param_text(c, "docs_max");
  if ((text || draw_asked) && req->sample >= 0)
    return fm_fail(err, FM_EINVAL, "%s: %s and --sample both choose the documents; give one", name,
                   text ? "docs=" : "docs_min/docs_max");
  if (text && draw_asked)
    return fm_fail(err, FM_EINVAL, "%s: docs= gives the documents, docs_min/docs_max draw them; "
                   "give one", name);
  fm_status st;
  if (text) {
    if ((st = fm_docs_parse(text, docs, err)) != FM_OK) return st;
    snprintf(c->used->docs_source, sizeof c->used->docs_source, "explicit");
  } else if (req->samples && !draw_asked &&
             (req->sample >= 0 || fm_samples_count(req->samples, S) > 0)) {
    if ((st = docs_from_sample(c, docs, err)) != FM_OK) return st;
  } else {
    int64_t dmin = ival(c, "docs_min"), dmax = ival(c, "docs_max");
    if ((st = draw_docs(S, dmin, dmax, req->seed, docs, err)) != FM_OK) return st;
    snprintf(c->used->docs_source, sizeof c->used->docs_source,
             "drawn: %lld..%lld documents, seed %llu", (long long)dmin, (long long)dmax,
             (unsigned long long)req->seed);
  }
  int64_t sum = 0;
  for (int32_t i = 0; i < docs->n; i++) sum += docs->docs[i].len;
  if (sum > S) {
    fm_docs_free(docs);
    return fm_fail(err, FM_EINVAL, "%s: documents sum to %lld tokens, more than S=%lld", name,
                   (long long)sum, (long long)S);
  }
  /* the last document absorbs any padding; given parts grow their last answer */
  fm_doc *last = &docs->docs[docs->n - 1];
  last->len += (int32_t)(S - sum);
  if (last->nparts) last->parts[last->nparts - 1] += (int32_t)(S - sum);
  c->used->ndocs = docs->n;
  return FM_OK;
}

/* The documents, resolved on first use and then listed in used->params
 * ("docs=len,..." or, with_prefix, "docs=prefix:len,..."). */
static fm_status use_docs(fm_family_ctx *c, int with_prefix, int listed, fm_err *err) {
  if (c->docs_ready) return FM_OK;
  fm_status st = resolve_docs(c, err);
  if (st != FM_OK) return st;
  c->docs_ready = 1;
  if (listed) {
    char buf[400];
    format_docs(buf, sizeof buf, &c->docs, with_prefix);
    used_append(c->used, "docs=%s", buf);
  }
  return FM_OK;
}

/* Sets v[a..b) to value. */
static void fill(int32_t *v, int32_t a, int32_t b, int32_t value) {
  for (int32_t j = a; j < b; j++) v[j] = value;
}

/* ---- build functions: one per family, each fills vector set `set` ---- */

static fm_status build_nothing(fm_family_ctx *c, fm_colmask *m, int32_t set, fm_err *err) {
  (void)c, (void)m, (void)set, (void)err;
  return FM_OK;
}

static fm_status build_sliding_window(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                      fm_err *err) {
  (void)err;
  int32_t *lts = fm_colmask_vec(m, set, FM_LTS);
  int64_t S = c->S, w = ival(c, "w");
  for (int64_t j = 0; j < S; j++) lts[j] = (int32_t)(j + w < S ? j + w : S);
  return FM_OK;
}

static fm_status build_causal_document(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                       fm_err *err) {
  fm_status st = use_docs(c, 0, 1, err);
  int32_t *lts = fm_colmask_vec(m, set, FM_LTS), a = 0;
  for (int32_t d = 0; st == FM_OK && d < c->docs.n; a += c->docs.docs[d++].len)
    fill(lts, a, a + c->docs.docs[d].len, a + c->docs.docs[d].len);
  return st;
}

static fm_status build_document(fm_family_ctx *c, fm_colmask *m, int32_t set, fm_err *err) {
  fm_status st = build_causal_document(c, m, set, err);
  int32_t *ute = fm_colmask_vec(m, set, FM_UTE), a = 0;
  for (int32_t d = 0; st == FM_OK && d < c->docs.n; a += c->docs.docs[d++].len)
    fill(ute, a, a + c->docs.docs[d].len, a);
  return st;
}

/* The parts of one share_question document: given, or 1..amax answers drawn
 * (the paper's split: one token per part, then every other token to a
 * uniformly chosen part, so parts come out near-equal). */
static int32_t question_parts(const fm_family_ctx *c, const fm_doc *doc, fm_rng *rng,
                              int32_t parts[FM_DOC_MAX_PARTS + 1]) {
  if (doc->nparts) {
    memcpy(parts, doc->parts, sizeof(int32_t) * (size_t)doc->nparts);
    return doc->nparts;
  }
  int64_t k = fm_rng_range(rng, ival(c, "answers_min"), ival(c, "answers_max"));
  if (k > doc->len - 1) k = doc->len - 1; /* each part keeps at least one token */
  int32_t np = (int32_t)k + 1;
  for (int32_t q = 0; q < np; q++) parts[q] = 1;
  for (int32_t t = np; t < doc->len; t++) parts[fm_rng_below(rng, (uint64_t)np)]++;
  return np;
}

static fm_status build_share_question(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                      fm_err *err) {
  fm_status st = use_docs(c, 0, 1, err);
  if (st != FM_OK) return st;
  int32_t *lts = fm_colmask_vec(m, set, FM_LTS);
  fm_rng rng;
  fm_rng_seed(&rng, c->req->seed, 0x7368617265 /* "share" */);
  int32_t start = 0;
  for (int32_t d = 0; d < c->docs.n; d++) {
    int32_t parts[FM_DOC_MAX_PARTS + 1];
    int32_t np = question_parts(c, &c->docs.docs[d], &rng, parts);
    int32_t end = start + c->docs.docs[d].len, pos = start;
    for (int32_t q = 0; q < np; pos += parts[q++])
      fill(lts, pos, pos + parts[q], q == 0 ? end : pos + parts[q]);
    if (pos != end)
      return fm_fail(err, FM_EINVAL, "share_question: parts of document %d sum to %d, not %d", d,
                     pos - start, c->docs.docs[d].len);
    start = end;
  }
  return FM_OK;
}

static fm_status build_global_sliding_window(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                             fm_err *err) {
  (void)err;
  int32_t *lts = fm_colmask_vec(m, set, FM_LTS), *uts = fm_colmask_vec(m, set, FM_UTS),
          *ute = fm_colmask_vec(m, set, FM_UTE);
  int64_t S = c->S, g = ival(c, "g"), wl = ival(c, "wl"), wr = ival(c, "wr");
  for (int64_t j = g; j < S; j++) {
    lts[j] = (int32_t)(j + wl + 1 < S ? j + wl + 1 : S);
    if (j >= g + wr + 1) {
      uts[j] = (int32_t)g;
      ute[j] = (int32_t)(j - wr);
    }
  }
  return FM_OK;
}

static fm_status build_causal_blockwise(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                        fm_err *err) {
  fm_status st = build_causal_document(c, m, set, err);
  if (st == FM_OK) /* every column before the test block (the last document) */
    fill(fm_colmask_vec(m, set, FM_LTE), 0, (int32_t)(c->S - c->docs.docs[c->docs.n - 1].len),
         (int32_t)(c->S - c->docs.docs[c->docs.n - 1].len));
  return st;
}

static fm_status build_prefix_lm_document(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                          fm_err *err) {
  fm_status st = use_docs(c, 1, 1, err);
  int32_t *lts = fm_colmask_vec(m, set, FM_LTS), *ute = fm_colmask_vec(m, set, FM_UTE), a = 0;
  for (int32_t d = 0; st == FM_OK && d < c->docs.n; a += c->docs.docs[d++].len) {
    int32_t end = a + c->docs.docs[d].len;
    fill(lts, a, end, end);
    for (int32_t j = a; j < end; j++) ute[j] = j < a + c->docs.docs[d].prefix ? a : j;
  }
  return st;
}

static fm_status build_prefix_lm_causal(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                        fm_err *err) {
  (void)err;
  int32_t *ute = fm_colmask_vec(m, set, FM_UTE);
  for (int64_t j = ival(c, "p"); j < c->S; j++) ute[j] = (int32_t)j;
  return FM_OK;
}

static fm_status add_span(fm_family_ctx *c, int *cap, int64_t a, int64_t len, fm_err *err) {
  if (c->nspans == *cap) {
    *cap = *cap ? *cap * 2 : 8;
    int32_t(*ns)[2] = realloc(c->spans, sizeof *ns * (size_t)*cap);
    if (!ns) return fm_fail(err, FM_ENOMEM, "out of memory");
    c->spans = ns;
  }
  c->spans[c->nspans][0] = (int32_t)a;
  c->spans[c->nspans][1] = (int32_t)len;
  c->nspans++;
  return FM_OK;
}

/* "start:len,start:len,...": sorted, disjoint spans inside [0, S). Every
 * number is checked against S before any sum is formed. */
static fm_status parse_spans(fm_family_ctx *c, const char *text, fm_err *err) {
  int cap = 0;
  const char *p = text;
  int64_t prev_end = 0, S = c->S;
  while (*p) {
    const char *item = p;
    int64_t a = -1, len = 0;
    int ok = take_int(&p, &a) && *p == ':';
    if (ok) p++;
    ok = ok && take_int(&p, &len) && (*p == 0 || *p == ',') && a >= 0 && len >= 1;
    if (!ok)
      return fm_fail(err, FM_EINVAL,
                     "qk_sparse: spans '%s' must be start:len,... with start >= 0 and len >= 1 "
                     "(at '%s')", text, item);
    int n = (int)(p - item);
    if (a >= S || len > S - a)
      return fm_fail(err, FM_EINVAL,
                     "qk_sparse: span %.*s ends past S=%lld (spans must lie inside [0, S))", n,
                     item, (long long)S);
    if (a < prev_end)
      return fm_fail(err, FM_EINVAL,
                     "qk_sparse: span %.*s overlaps the previous one (spans must be sorted and "
                     "disjoint)", n, item);
    fm_status st = add_span(c, &cap, a, len, err);
    if (st != FM_OK) return st;
    prev_end = a + len;
    if (*p) p++;
  }
  if (c->nspans == 0) return fm_fail(err, FM_EINVAL, "qk_sparse: empty span list");
  return FM_OK;
}

/* spans=, else the flagged documents, else the paper's fallback spans; then
 * listed in used->params. */
static fm_status resolve_spans(fm_family_ctx *c, fm_err *err) {
  const char *text = param_text(c, "spans");
  fm_status st = FM_OK;
  if (text) {
    st = parse_spans(c, text, err);
  } else {
    st = use_docs(c, 0, 0, err);
    int cap = 0;
    for (int32_t d = 0, a = 0; st == FM_OK && d < c->docs.n; a += c->docs.docs[d++].len)
      if (c->docs.docs[d].qk) st = add_span(c, &cap, a, c->docs.docs[d].len, err);
    if (st == FM_OK && c->nspans == 0) st = parse_spans(c, "1024:538,2358:1700", err);
  }
  if (st != FM_OK) return st;
  used_append(c->used, "spans=");
  size_t k = strlen(c->used->params);
  for (int q = 0; q < c->nspans && k + 24 < sizeof c->used->params; q++)
    k += (size_t)snprintf(c->used->params + k, sizeof c->used->params - k, "%s%d:%d",
                          q ? "," : "", c->spans[q][0], c->spans[q][1]);
  return FM_OK;
}

static fm_status build_qk_sparse(fm_family_ctx *c, fm_colmask *m, int32_t set, fm_err *err) {
  fm_status st = c->spans ? FM_OK : resolve_spans(c, err);
  int32_t *lts = fm_colmask_vec(m, set, FM_LTS), *lte = fm_colmask_vec(m, set, FM_LTE);
  for (int k = 0; st == FM_OK && k < c->nspans; k++) {
    int32_t a = c->spans[k][0], e = a + c->spans[k][1];
    for (int32_t j = a; j < e; j++) lts[j] = j;
    fill(lte, a, e, e);
  }
  return st;
}

static fm_status build_random_eviction(fm_family_ctx *c, fm_colmask *m, int32_t set,
                                       fm_err *err) {
  (void)err;
  int32_t *lts = fm_colmask_vec(m, set, FM_LTS);
  fm_rng rng;
  fm_rng_seed(&rng, c->req->seed, 0x10000u + (uint64_t)set);
  /* selection sampling: S - r sorted distinct columns from [0, S-1) */
  int64_t r = ival(c, "r"), n = c->S - 1, k = c->S - r, chosen = 0;
  for (int64_t t = 0; t < n && chosen < k; t++)
    if ((int64_t)fm_rng_below(&rng, (uint64_t)(n - t)) < k - chosen) lts[t] = (int32_t)(r + chosen++);
  return FM_OK;
}

/* ---- the registry ---- */

/* An integer parameter: default dflt or S / sdiv (sdiv > 0), range [lo, hi]. */
#define INT_PARAM(name_, text_, meaning_, dflt_, sdiv_, lo_, hi_)                               \
  {.name = name_, .default_text = text_, .meaning = meaning_, .kind = FM_PARAM_INT,              \
   .dflt = dflt_, .dflt_s_div = sdiv_, .lo = lo_, .hi = hi_}
#define UPTO_S FM_PARAM_HI_S
#define DOCS_PARAM(meaning_)                                                                    \
  {.name = "docs", .default_text = "sample 0 for S", .meaning = meaning_, .kind = FM_PARAM_DOCS}
#define DOC_DRAW_PARAMS                                                                         \
  {.name = "docs_min", .default_text = "2", .meaning = "fewest documents when drawn",          \
   .dflt = 2, .lo = 1, .hi = UPTO_S, .steers_draw = 1, .range_note = "more documents than tokens?"}, \
  {.name = "docs_max", .default_text = "6", .meaning = "most documents when drawn", .dflt = 6,  \
   .lo = 1, .hi = UPTO_S, .lo_param = "docs_min", .steers_draw = 1}
#define DOC_PARAMS DOCS_PARAM("document lengths len,len,... (last absorbs padding)"), DOC_DRAW_PARAMS
/* A row's parameter list, in place: .params and .nparams from one list. */
#define PARAMS(...)                                                                             \
  .params = (const fm_param_info[]){__VA_ARGS__},                                              \
  .nparams = (int)(sizeof((const fm_param_info[]){__VA_ARGS__}) / sizeof(fm_param_info))
#define NO_PAPER {-1, -1, -1}

static const fm_family_info families[] = {
    {.name = "full", .short_name = "full", .form = "-", .meaning = "nothing masked",
     .paper_rho = NO_PAPER, .build = build_nothing},
    {.name = "causal", .short_name = "causal", .causal = 1, .form = "-",
     .meaning = "nothing beyond the causal triangle", .paper_rho = {0.49, 0.50, 0.50},
     .build = build_nothing},
    {.name = "sliding_window", .short_name = "SW", .causal = 1, .form = "causal-1",
     .meaning = "causal, each key visible to the next w rows",
     PARAMS(INT_PARAM("w", "S/16", "window: key j visible to rows j .. j+w-1", 1, 16, 1, UPTO_S)),
     .paper_rho = {0.92, 0.94, 0.94}, .build = build_sliding_window},
    {.name = "causal_document", .short_name = "causal doc", .causal = 1, .form = "causal-1",
     .meaning = "causal within packed documents", .uses_docs = 1, PARAMS(DOC_PARAMS),
     .paper_rho = {0.86, 0.95, 0.95}, .build = build_causal_document},
    {.name = "document", .short_name = "doc", .form = "bidir-2",
     .meaning = "bidirectional within packed documents (block diagonal)", .uses_docs = 1,
     PARAMS(DOC_PARAMS), .paper_rho = {0.74, 0.92, 0.91}, .build = build_document},
    {.name = "share_question", .short_name = "share Q", .causal = 1, .form = "causal-1",
     .meaning = "causal; answers see their document's question, not each other", .uses_docs = 1,
     PARAMS(DOCS_PARAM("documents len or question+answer+...,..."), DOC_DRAW_PARAMS,
            {.name = "answers_min", .default_text = "2", .dflt = 2, .lo = 1, .hi = 8,
             .meaning = "fewest answers per document when drawn", .steers_draw = 1},
            {.name = "answers_max", .default_text = "6", .dflt = 6, .lo = 1, .hi = 8,
             .meaning = "most answers per document when drawn", .lo_param = "answers_min",
             .steers_draw = 1}),
     .reports_seed = 1, .paper_rho = {0.91, 0.97, 0.97}, .build = build_share_question},
    {.name = "global_sliding_window", .short_name = "global SW", .form = "bidir-4",
     .meaning = "bidirectional band of wl below, wr above, plus g global tokens",
     PARAMS(INT_PARAM("g", "16", "global tokens (first g keys and rows see all)", 16, 0, 0, UPTO_S),
            INT_PARAM("wl", "S/16", "window below the diagonal", 0, 16, 0, UPTO_S),
            INT_PARAM("wr", "S/16", "window above the diagonal", 0, 16, 0, UPTO_S)),
     .paper_rho = {0.84, 0.87, 0.88}, .build = build_global_sliding_window},
    {.name = "causal_blockwise", .short_name = "causal blockwise", .causal = 1,
     .form = "causal-2", .meaning = "causal documents; the last document (test block) sees all",
     .uses_docs = 1, PARAMS(DOC_PARAMS), .paper_rho = {0.67, 0.87, 0.87},
     .build = build_causal_blockwise},
    {.name = "prefix_lm_document", .short_name = "prefix LM doc", .form = "bidir-2",
     .meaning = "per document: bidirectional prefix, causal rest", .uses_docs = 1,
     PARAMS(DOCS_PARAM("documents prefix:len,prefix:len,..."), DOC_DRAW_PARAMS),
     .paper_rho = {0.86, 0.95, 0.95}, .build = build_prefix_lm_document},
    {.name = "prefix_lm_causal", .short_name = "prefix LM causal", .form = "bidir-2",
     .meaning = "bidirectional prefix of p tokens, causal rest",
     PARAMS(INT_PARAM("p", "S/2", "bidirectional prefix length", 0, 2, 0, UPTO_S)),
     .paper_rho = {0.37, 0.37, 0.37}, .build = build_prefix_lm_causal},
    {.name = "qk_sparse", .short_name = "QK-sparse", .causal = 1, .form = "causal-2",
     .meaning = "causal; queries in a span see only keys before it", .uses_docs = 1,
     PARAMS({.name = "spans", .default_text = "flagged sample documents", .kind = FM_PARAM_SPANS,
             .meaning = "QK-sparse spans start:len,start:len,..."},
            DOC_PARAMS),
     .paper_rho = {0.52, 0.52, 0.52}, .build = build_qk_sparse},
    {.name = "random_eviction", .short_name = "random eviction", .causal = 1, .form = "causal-1",
     .meaning = "causal; S-r random keys evicted from row r on, one draw per (batch, head)",
     .per_head = 1, PARAMS(INT_PARAM("r", "S/2", "first eviction row", 1, 2, 1, UPTO_S)),
     .reports_seed = 1, .paper_rho = {0.49, 0.50, 0.50}, .build = build_random_eviction},
};
#undef UPTO_S
#define NFAMILIES ((int)(sizeof families / sizeof families[0]))

int fm_family_count(void) { return NFAMILIES; }
const fm_family_info *fm_family_at(int i) { return i >= 0 && i < NFAMILIES ? &families[i] : NULL; }
const fm_family_info *fm_family_find(const char *name) {
  for (int i = 0; name && i < NFAMILIES; i++)
    if (strcmp(families[i].name, name) == 0) return &families[i];
  return NULL;
}

const char *fm_family_closest(const char *name) {
  const char *names[NFAMILIES];
  for (int i = 0; i < NFAMILIES; i++) names[i] = families[i].name;
  return fm_closest(name, names, NFAMILIES, fm_suggest_distance(name));
}

/* ---- the driver ---- */

static fm_status check_request(const fm_family_request *req, const fm_family_info *fam,
                               fm_err *err) {
  if (!fam) {
    char list[512] = "";
    for (int i = 0; i < NFAMILIES; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
               families[i].name);
    const char *best = fm_family_closest(req->family);
    if (best)
      return fm_fail(err, FM_ENOTFOUND, "unknown family '%s' (did you mean '%s'?)", req->family,
                     best);
    return fm_fail(err, FM_ENOTFOUND, "unknown family '%s' (known: %s)",
                   req->family ? req->family : "", list);
  }
  if (fam->nparams > FM_FAMILY_MAX_PARAMS || !fam->build)
    return fm_fail(err, FM_EUNSUPPORTED, "registry row %s: more than %d parameters or no build "
                   "function (core/fm_families.c)", fam->name, FM_FAMILY_MAX_PARAMS);
  if (req->seqlen < 1 || req->seqlen > FM_MAX_SEQLEN)
    return fm_fail(err, FM_EINVAL, "sequence length %lld is out of range (1..%d, int32 indices)",
                   (long long)req->seqlen, FM_MAX_SEQLEN);
  if (req->batch < 1 || req->batch > 65535 || req->heads < 1 || req->heads > 65535)
    return fm_fail(err, FM_EINVAL, "batch and heads must be in 1..65535 (got %lld, %lld)",
                   (long long)req->batch, (long long)req->heads);
  if (req->sample >= 0 && !fam->uses_docs)
    return fm_fail(err, FM_EINVAL, "%s takes no documents: --sample does not apply", fam->name);
  return FM_OK;
}

/* Parameters given, integers resolved and listed in used->params. */
static fm_status prepare(fm_family_ctx *c, fm_err *err) {
  fm_status st = collect_params(c, err);
  for (int p = 0; st == FM_OK && p < c->fam->nparams; p++) {
    const fm_param_info *pi = &c->fam->params[p];
    if (pi->kind != FM_PARAM_INT) continue;
    st = resolve_int(c, p, err);
    if (st == FM_OK && !pi->steers_draw)
      used_append(c->used, "%s=%lld", pi->name, (long long)c->ival[p]);
  }
  if (st == FM_OK && c->fam->reports_seed)
    used_append(c->used, "seed=%llu", (unsigned long long)c->req->seed);
  return st;
}

fm_status fm_family_build(const fm_family_request *req, fm_colmask **out, fm_family_used *used,
                          fm_err *err) {
  *out = NULL;
  fm_family_used local;
  fm_family_ctx c;
  memset(&c, 0, sizeof c);
  c.used = used ? used : &local;
  memset(c.used, 0, sizeof *c.used);
  c.fam = fm_family_find(req->family);
  c.req = req;
  c.S = req->seqlen;
  fm_status st = check_request(req, c.fam, err);
  if (st == FM_OK) st = prepare(&c, err);
  fm_colmask *m = NULL;
  if (st == FM_OK) {
    int64_t nb = c.fam->per_head ? req->batch : 1, nh = c.fam->per_head ? req->heads : 1;
    st = fm_colmask_create(c.S, c.S, nb, nh, c.fam->causal, &m, err);
  }
  for (int32_t s = 0; st == FM_OK && s < fm_colmask_nsets(m); s++)
    st = c.fam->build(&c, m, s, err);
  fm_docs_free(&c.docs);
  free(c.spans);
  if (st == FM_OK) st = fm_colmask_validate(m, err);
  if (st != FM_OK) {
    fm_colmask_destroy(m);
    return st;
  }
  *out = m;
  return FM_OK;
}

size_t fm_family_request_size(void) { return sizeof(fm_family_request); }
size_t fm_family_used_size(void) { return sizeof(fm_family_used); }
