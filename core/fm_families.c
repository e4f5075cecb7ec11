#include "fm_families.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_rng.h"

/* ---- the registry ---- */

#define DOC_DRAW_PARAMS                                                                        \
  {"docs_min", "2", "fewest documents when drawn"}, {"docs_max", "6", "most documents when drawn"}
#define DOC_PARAMS                                                                             \
  {"docs", "sample 0 for S", "document lengths len,len,... (last absorbs padding)"},           \
      DOC_DRAW_PARAMS

static const fm_param_info p_sw[] = {{"w", "S/16", "window: key j visible to rows j .. j+w-1"}};
static const fm_param_info p_docs[] = {DOC_PARAMS};
static const fm_param_info p_pdoc[] = {
    {"docs", "sample 0 for S", "documents prefix:len,prefix:len,..."}, DOC_DRAW_PARAMS};
static const fm_param_info p_share[] = {
    {"docs", "sample 0 for S", "documents len or question+answer+...,..."},
    DOC_DRAW_PARAMS,
    {"answers_min", "2", "fewest answers per document when drawn"},
    {"answers_max", "6", "most answers per document when drawn"}};
static const fm_param_info p_gsw[] = {{"g", "16", "global tokens (first g keys and rows see all)"},
                                      {"wl", "S/16", "window below the diagonal"},
                                      {"wr", "S/16", "window above the diagonal"}};
static const fm_param_info p_plc[] = {{"p", "S/2", "bidirectional prefix length"}};
static const fm_param_info p_qk[] = {
    {"spans", "flagged sample documents", "QK-sparse spans start:len,start:len,..."},
    DOC_PARAMS};
static const fm_param_info p_rev[] = {{"r", "S/2", "first eviction row"}};

#define NP(a) a, (int)(sizeof a / sizeof a[0])
static const fm_family_info families[] = {
    {"full", "full", 0, "-", "nothing masked", 0, 0, NULL, 0},
    {"causal", "causal", 1, "-", "nothing beyond the causal triangle", 0, 0, NULL, 0},
    {"sliding_window", "SW", 1, "causal-1", "causal, each key visible to the next w rows", 0, 0,
     NP(p_sw)},
    {"causal_document", "causal doc", 1, "causal-1", "causal within packed documents", 0, 1,
     NP(p_docs)},
    {"document", "doc", 0, "bidir-2", "bidirectional within packed documents (block diagonal)", 0,
     1, NP(p_docs)},
    {"share_question", "share Q", 1, "causal-1",
     "causal; answers see their document's question, not each other", 0, 1, NP(p_share)},
    {"global_sliding_window", "global SW", 0, "bidir-4",
     "bidirectional band of wl below, wr above, plus g global tokens", 0, 0, NP(p_gsw)},
    {"causal_blockwise", "causal blockwise", 1, "causal-2",
     "causal documents; the last document (test block) sees all", 0, 1, NP(p_docs)},
    {"prefix_lm_document", "prefix LM doc", 0, "bidir-2",
     "per document: bidirectional prefix, causal rest", 0, 1, NP(p_pdoc)},
    {"prefix_lm_causal", "prefix LM causal", 0, "bidir-2",
     "bidirectional prefix of p tokens, causal rest", 0, 0, NP(p_plc)},
    {"qk_sparse", "QK-sparse", 1, "causal-2",
     "causal; queries in a span see only keys before it", 0, 1, NP(p_qk)},
    {"random_eviction", "random eviction", 1, "causal-1",
     "causal; S-r random keys evicted from row r on, one draw per (batch, head)", 1, 0,
     NP(p_rev)},
};
#define NFAMILIES ((int)(sizeof families / sizeof families[0]))

int fm_family_count(void) { return NFAMILIES; }
const fm_family_info *fm_family_at(int i) { return i >= 0 && i < NFAMILIES ? &families[i] : NULL; }
const fm_family_info *fm_family_find(const char *name) {
  for (int i = 0; i < NFAMILIES; i++)
    if (strcmp(families[i].name, name) == 0) return &families[i];
  return NULL;
}

/* ---- parameters ---- */

typedef struct {
  const fm_family_info *fam;
  const char *value[8]; /* by index in fam->params; NULL = default */
} param_values;

static fm_status collect_params(const fm_family_request *req, const fm_family_info *fam,
                                param_values *pv, fm_err *err) {
  memset(pv, 0, sizeof *pv);
  pv->fam = fam;
  for (int i = 0; i < req->nparams; i++) {
    const char *kv = req->params[i], *eq = strchr(kv, '=');
    if (!eq || eq == kv)
      return fm_fail(err, FM_EINVAL, "parameter '%s' is not of the form key=value", kv);
    size_t klen = (size_t)(eq - kv);
    int found = -1;
    for (int p = 0; p < fam->nparams; p++)
      if (strlen(fam->params[p].name) == klen && strncmp(fam->params[p].name, kv, klen) == 0)
        found = p;
    if (found < 0) {
      char list[256] = "";
      for (int p = 0; p < fam->nparams; p++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", p ? ", " : "",
                 fam->params[p].name);
      return fm_fail(err, FM_ENOTFOUND, "family %s has no parameter '%.*s' (%s%s)", fam->name,
                     (int)klen, kv, fam->nparams ? "its parameters: " : "it takes none",
                     list);
    }
    if (pv->value[found])
      return fm_fail(err, FM_EINVAL, "parameter '%s' given twice", fam->params[found].name);
    pv->value[found] = eq + 1;
  }
  return FM_OK;
}

static const char *param_text(const param_values *pv, const char *name) {
  for (int p = 0; p < pv->fam->nparams; p++)
    if (strcmp(pv->fam->params[p].name, name) == 0) return pv->value[p];
  return NULL;
}

/* An integer parameter in [lo, hi], or its default when not given. */
static fm_status int_param(const param_values *pv, const char *name, int64_t dflt, int64_t lo,
                           int64_t hi, const char *range_text, int64_t *out, fm_err *err) {
  const char *t = param_text(pv, name);
  if (!t) {
    *out = dflt;
  } else {
    char *end;
    errno = 0;
    long long v = strtoll(t, &end, 10);
    if (*t == 0 || *end != 0 || errno)
      return fm_fail(err, FM_EINVAL, "%s: parameter %s='%s' is not an integer", pv->fam->name,
                     name, t);
    *out = v;
  }
  if (*out < lo || *out > hi)
    return fm_fail(err, FM_EINVAL, "%s: parameter %s=%lld is out of range (%s)", pv->fam->name,
                   name, (long long)*out, range_text);
  return FM_OK;
}

/* ---- documents ---- */

fm_status fm_docs_parse(const char *text, fm_docs *out, fm_err *err) {
  out->n = 0;
  out->docs = NULL;
  int32_t cap = 0;
  const char *p = text;
  while (*p) {
    fm_doc d;
    memset(&d, 0, sizeof d);
    int64_t vals[10];
    int nv = 0;
    int64_t prefix = -1;
    for (;;) {
      char *end;
      errno = 0;
      long long v = strtoll(p, &end, 10);
      if (end == p || errno || v < 0 || v > (1 << 30)) {
        fm_docs_free(out);
        return fm_fail(err, FM_EINVAL, "documents '%s': expected a length at '%s'", text, p);
      }
      p = end;
      if (*p == ':' && prefix < 0 && nv == 0) {
        prefix = v;
        p++;
        continue;
      }
      if (nv == 8) { /* fm_doc.parts holds 8 */
        fm_docs_free(out);
        return fm_fail(err, FM_EINVAL, "documents '%s': at most 8 parts (question + 7 answers) per document", text);
      }
      vals[nv++] = v;
      if (*p == '+') {
        p++;
        continue;
      }
      break;
    }
    if (*p == ',') {
      p++;
      if (!*p) {
        fm_docs_free(out);
        return fm_fail(err, FM_EINVAL, "documents '%s': trailing comma", text);
      }
    } else if (*p) {
      fm_docs_free(out);
      return fm_fail(err, FM_EINVAL, "documents '%s': unexpected '%c'", text, *p);
    }
    int64_t len = 0;
    for (int k = 0; k < nv; k++) {
      if (vals[k] < 1) {
        fm_docs_free(out);
        return fm_fail(err, FM_EINVAL, "documents '%s': every length must be >= 1", text);
      }
      len += vals[k];
    }
    if (prefix > len || len > (1 << 30)) {
      fm_docs_free(out);
      return fm_fail(err, FM_EINVAL, "documents '%s': prefix %lld longer than its document (%lld)",
                     text, (long long)prefix, (long long)len);
    }
    d.len = (int32_t)len;
    d.prefix = prefix < 0 ? 0 : (int32_t)prefix;
    if (nv > 1) {
      d.nparts = nv;
      for (int k = 0; k < nv; k++) d.parts[k] = (int32_t)vals[k];
    }
    if (out->n == cap) {
      cap = cap ? cap * 2 : 16;
      fm_doc *nd = realloc(out->docs, sizeof *nd * (size_t)cap);
      if (!nd) {
        fm_docs_free(out);
        return fm_fail(err, FM_ENOMEM, "out of memory");
      }
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

static fm_status resolve_docs(const fm_family_request *req, const param_values *pv, int64_t S,
                              fm_docs *docs, fm_family_used *used, fm_err *err) {
  const char *text = param_text(pv, "docs");
  const char *name = pv->fam->name;
  memset(docs, 0, sizeof *docs);
  /* docs_min / docs_max ask for a draw, even where the sample file has S */
  int draw_asked = param_text(pv, "docs_min") || param_text(pv, "docs_max");
  if ((text || draw_asked) && req->sample >= 0)
    return fm_fail(err, FM_EINVAL, "%s: %s and --sample both choose the documents; give one", name,
                   text ? "docs=" : "docs_min/docs_max");
  if (text && draw_asked)
    return fm_fail(err, FM_EINVAL, "%s: docs= gives the documents, docs_min/docs_max draw them; "
                   "give one", name);
  fm_status st;
  if (text) {
    if ((st = fm_docs_parse(text, docs, err)) != FM_OK) return st;
    snprintf(used->docs_source, sizeof used->docs_source, "explicit");
  } else if (req->samples && !draw_asked &&
             (req->sample >= 0 || fm_samples_count(req->samples, S) > 0)) {
    int k = req->sample >= 0 ? req->sample : 0;
    int have = fm_samples_count(req->samples, S);
    const fm_sample *smp = fm_samples_find(req->samples, S, k);
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
    snprintf(used->docs_source, sizeof used->docs_source, "sample %d of %lld", k, (long long)S);
  } else {
    int64_t dmin, dmax;
    if ((st = int_param(pv, "docs_min", S < 2 ? S : 2, 1, S, "1 <= docs_min <= S: more documents than tokens?",
                        &dmin, err)) != FM_OK ||
        (st = int_param(pv, "docs_max", dmin > 6 ? dmin : (S < 6 ? S : 6), dmin, S,
                        "docs_min <= docs_max <= S", &dmax, err)) != FM_OK)
      return st;
    if ((st = draw_docs(S, dmin, dmax, req->seed, docs, err)) != FM_OK) return st;
    snprintf(used->docs_source, sizeof used->docs_source, "drawn: %lld..%lld documents, seed %llu",
             (long long)dmin, (long long)dmax, (unsigned long long)req->seed);
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
  used->ndocs = docs->n;
  return FM_OK;
}

/* ---- generators: each fills set `s` of m ---- */

typedef struct {
  int64_t S;
  fm_docs docs;
  int64_t a, b, c; /* integer parameters by family */
  uint64_t seed;
  int64_t amin, amax;
  int32_t (*spans)[2];
  int nspans;
} gen_args;

static void gen_sliding_window(fm_colmask *m, int32_t s, const gen_args *g) {
  int32_t *lts = fm_colmask_vec(m, s, FM_LTS);
  for (int64_t j = 0; j < g->S; j++) lts[j] = (int32_t)(j + g->a < g->S ? j + g->a : g->S);
}

static void gen_documents(fm_colmask *m, int32_t s, const gen_args *g, int upper,
                          int prefix_lm, int blockwise) {
  int32_t *lts = fm_colmask_vec(m, s, FM_LTS), *lte = fm_colmask_vec(m, s, FM_LTE),
          *ute = fm_colmask_vec(m, s, FM_UTE);
  int32_t start = 0, last_start = (int32_t)(g->S - g->docs.docs[g->docs.n - 1].len);
  for (int32_t d = 0; d < g->docs.n; d++) {
    int32_t end = start + g->docs.docs[d].len;
    for (int32_t j = start; j < end; j++) {
      lts[j] = end;
      if (upper) ute[j] = start;
      if (prefix_lm) ute[j] = j < start + g->docs.docs[d].prefix ? start : j;
      if (blockwise && d < g->docs.n - 1) lte[j] = last_start;
    }
    start = end;
  }
}

static fm_status gen_share_question(fm_colmask *m, int32_t s, const gen_args *g, fm_err *err) {
  int32_t *lts = fm_colmask_vec(m, s, FM_LTS);
  fm_rng rng;
  fm_rng_seed(&rng, g->seed, 0x7368617265 /* "share" */);
  int32_t start = 0;
  for (int32_t d = 0; d < g->docs.n; d++) {
    const fm_doc *doc = &g->docs.docs[d];
    int32_t parts[9], np;
    if (doc->nparts) {
      np = doc->nparts;
      memcpy(parts, doc->parts, sizeof(int32_t) * (size_t)np);
    } else {
      int64_t k = fm_rng_range(&rng, g->amin, g->amax);
      if (k > doc->len - 1) k = doc->len - 1; /* each part keeps at least one token */
      np = (int32_t)k + 1;
      /* the paper's split: one token per part, then every other token to a
         uniformly chosen part (multinomial, so parts come out near-equal) */
      for (int32_t q = 0; q < np; q++) parts[q] = 1;
      for (int32_t t = np; t < doc->len; t++) parts[fm_rng_below(&rng, (uint64_t)np)]++;
    }
    int32_t end = start + doc->len, pos = start;
    for (int32_t q = 0; q < np; q++) {
      for (int32_t j = pos; j < pos + parts[q]; j++) lts[j] = q == 0 ? end : pos + parts[q];
      pos += parts[q];
    }
    if (pos != end)
      return fm_fail(err, FM_EINVAL, "share_question: parts of document %d sum to %d, not %d", d,
                     pos - start, doc->len);
    start = end;
  }
  return FM_OK;
}

static void gen_global_sliding_window(fm_colmask *m, int32_t s, const gen_args *g) {
  int32_t *lts = fm_colmask_vec(m, s, FM_LTS), *uts = fm_colmask_vec(m, s, FM_UTS),
          *ute = fm_colmask_vec(m, s, FM_UTE);
  int64_t G = g->a, wl = g->b, wr = g->c;
  for (int64_t j = G; j < g->S; j++) {
    lts[j] = (int32_t)(j + wl + 1 < g->S ? j + wl + 1 : g->S);
    if (j >= G + wr + 1) {
      uts[j] = (int32_t)G;
      ute[j] = (int32_t)(j - wr);
    }
  }
}

static void gen_prefix_lm_causal(fm_colmask *m, int32_t s, const gen_args *g) {
  int32_t *ute = fm_colmask_vec(m, s, FM_UTE);
  for (int64_t j = g->a; j < g->S; j++) ute[j] = (int32_t)j;
}

static void gen_qk_sparse(fm_colmask *m, int32_t s, const gen_args *g) {
  int32_t *lts = fm_colmask_vec(m, s, FM_LTS), *lte = fm_colmask_vec(m, s, FM_LTE);
  for (int k = 0; k < g->nspans; k++) {
    int32_t a = g->spans[k][0], e = a + g->spans[k][1];
    for (int32_t j = a; j < e; j++) {
      lts[j] = j;
      lte[j] = e;
    }
  }
}

static void gen_random_eviction(fm_colmask *m, int32_t s, const gen_args *g) {
  int32_t *lts = fm_colmask_vec(m, s, FM_LTS);
  fm_rng rng;
  fm_rng_seed(&rng, g->seed, 0x10000u + (uint64_t)s);
  /* selection sampling: S - r sorted distinct columns from [0, S-1) */
  int64_t n = g->S - 1, k = g->S - g->a, chosen = 0;
  for (int64_t t = 0; t < n && chosen < k; t++)
    if ((int64_t)fm_rng_below(&rng, (uint64_t)(n - t)) < k - chosen) {
      lts[t] = (int32_t)(g->a + chosen);
      chosen++;
    }
}

/* "start:len,start:len,...": sorted, disjoint spans inside [0, S). */
static fm_status parse_spans(const char *text, int64_t S, gen_args *g, fm_err *err) {
  int cap = 0;
  const char *p = text;
  int64_t prev_end = 0;
  while (*p) {
    char *end;
    errno = 0;
    long long a = strtoll(p, &end, 10);
    long long L = -1;
    if (end != p && *end == ':') {
      p = end + 1;
      L = strtoll(p, &end, 10);
    }
    if (end == p || errno || L < 1 || a < 0 || (*end && *end != ','))
      return fm_fail(err, FM_EINVAL, "qk_sparse: spans '%s' must be start:len,... with len >= 1",
                     text);
    p = *end ? end + 1 : end;
    if (a < prev_end || a > S || L > S - a) /* not a + L: it can overflow */
      return fm_fail(err, FM_EINVAL,
                     "qk_sparse: span %lld:%lld overlaps the previous one or ends past S=%lld "
                     "(spans must be sorted, disjoint, inside [0, S))",
                     a, L, (long long)S);
    if (g->nspans == cap) {
      cap = cap ? cap * 2 : 8;
      int32_t(*ns)[2] = realloc(g->spans, sizeof *ns * (size_t)cap);
      if (!ns) return fm_fail(err, FM_ENOMEM, "out of memory");
      g->spans = ns;
    }
    g->spans[g->nspans][0] = (int32_t)a;
    g->spans[g->nspans][1] = (int32_t)L;
    g->nspans++;
    prev_end = a + L;
  }
  if (g->nspans == 0) return fm_fail(err, FM_EINVAL, "qk_sparse: empty span list");
  return FM_OK;
}

/* Spans of the flagged documents; the paper's fallback when none is flagged. */
static fm_status spans_from_docs(int64_t S, gen_args *g, fm_err *err) {
  int n = 0;
  for (int32_t d = 0; d < g->docs.n; d++) n += g->docs.docs[d].qk != 0;
  if (n == 0) return parse_spans("1024:538,2358:1700", S, g, err);
  g->spans = malloc(sizeof *g->spans * (size_t)n);
  if (!g->spans) return fm_fail(err, FM_ENOMEM, "out of memory");
  int32_t start = 0;
  for (int32_t d = 0; d < g->docs.n; d++) {
    if (g->docs.docs[d].qk) {
      g->spans[g->nspans][0] = start;
      g->spans[g->nspans][1] = g->docs.docs[d].len;
      g->nspans++;
    }
    start += g->docs.docs[d].len;
  }
  return FM_OK;
}

static void append_used(fm_family_used *u, const char *fmt, long long v, const char *name) {
  size_t n = strlen(u->params);
  snprintf(u->params + n, sizeof u->params - n, fmt, n ? " " : "", name, v);
}

fm_status fm_family_build(const fm_family_request *req, fm_colmask **out, fm_family_used *used,
                          fm_err *err) {
  *out = NULL;
  fm_family_used local;
  if (!used) used = &local;
  memset(used, 0, sizeof *used);
  const fm_family_info *fam = fm_family_find(req->family);
  if (!fam) {
    char list[512] = "";
    for (int i = 0; i < NFAMILIES; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
               families[i].name);
    return fm_fail(err, FM_ENOTFOUND, "unknown family '%s' (known: %s)", req->family, list);
  }
  int64_t S = req->seqlen;
  if (S < 1 || S > FM_MAX_SEQLEN)
    return fm_fail(err, FM_EINVAL, "sequence length %lld is out of range (1..%d, int32 indices)",
                   (long long)S, FM_MAX_SEQLEN);
  if (req->batch < 1 || req->batch > 65535 || req->heads < 1 || req->heads > 65535)
    return fm_fail(err, FM_EINVAL, "batch and heads must be in 1..65535 (got %lld, %lld)",
                   (long long)req->batch, (long long)req->heads);
  if (req->sample >= 0 && !fam->uses_docs)
    return fm_fail(err, FM_EINVAL, "%s takes no documents: --sample does not apply", fam->name);
  param_values pv;
  fm_status st = collect_params(req, fam, &pv, err);
  if (st != FM_OK) return st;

  gen_args g;
  memset(&g, 0, sizeof g);
  g.S = S;
  g.seed = req->seed;
  const char *n = fam->name;
  if (!strcmp(n, "sliding_window")) {
    st = int_param(&pv, "w", S / 16 > 0 ? S / 16 : 1, 1, S, "1 <= w <= S", &g.a, err);
    if (st == FM_OK) append_used(used, "%s%s=%lld", g.a, "w");
  } else if (!strcmp(n, "global_sliding_window")) {
    if ((st = int_param(&pv, "g", 16 < S ? 16 : S, 0, S, "0 <= g <= S", &g.a, err)) == FM_OK &&
        (st = int_param(&pv, "wl", S / 16, 0, S, "0 <= wl <= S", &g.b, err)) == FM_OK &&
        (st = int_param(&pv, "wr", S / 16, 0, S, "0 <= wr <= S", &g.c, err)) == FM_OK) {
      append_used(used, "%s%s=%lld", g.a, "g");
      append_used(used, "%s%s=%lld", g.b, "wl");
      append_used(used, "%s%s=%lld", g.c, "wr");
    }
  } else if (!strcmp(n, "prefix_lm_causal")) {
    st = int_param(&pv, "p", S / 2, 0, S, "0 <= p <= S", &g.a, err);
    if (st == FM_OK) append_used(used, "%s%s=%lld", g.a, "p");
  } else if (!strcmp(n, "random_eviction")) {
    st = int_param(&pv, "r", S / 2 > 0 ? S / 2 : 1, 1, S, "1 <= r <= S", &g.a, err);
    if (st == FM_OK) {
      append_used(used, "%s%s=%lld", g.a, "r");
      append_used(used, "%s%s=%lld", (long long)req->seed, "seed");
    }
  }
  if (st == FM_OK && !strcmp(n, "share_question")) {
    if ((st = int_param(&pv, "answers_min", 2, 1, 8, "1 <= answers_min <= 8", &g.amin, err)) ==
        FM_OK)
      st = int_param(&pv, "answers_max", g.amin > 6 ? g.amin : 6, g.amin, 8,
                     "answers_min <= answers_max <= 8", &g.amax, err);
    if (st == FM_OK) append_used(used, "%s%s=%lld", (long long)req->seed, "seed");
  }
  if (st == FM_OK && !strcmp(n, "qk_sparse") && param_text(&pv, "spans")) {
    st = parse_spans(param_text(&pv, "spans"), S, &g, err);
  } else if (st == FM_OK && fam->uses_docs) {
    st = resolve_docs(req, &pv, S, &g.docs, used, err);
    if (st == FM_OK && !strcmp(n, "qk_sparse")) st = spans_from_docs(S, &g, err);
    if (st == FM_OK && strcmp(n, "qk_sparse")) {
      char buf[400];
      format_docs(buf, sizeof buf, &g.docs, !strcmp(n, "prefix_lm_document"));
      size_t k = strlen(used->params);
      snprintf(used->params + k, sizeof used->params - k, "%sdocs=%s", k ? " " : "", buf);
    }
  }
  if (st == FM_OK && g.nspans) {
    size_t k = strlen(used->params);
    k += (size_t)snprintf(used->params + k, sizeof used->params - k, "%sspans=", k ? " " : "");
    for (int q = 0; q < g.nspans && k + 24 < sizeof used->params; q++)
      k += (size_t)snprintf(used->params + k, sizeof used->params - k, "%s%d:%d", q ? "," : "",
                            g.spans[q][0], g.spans[q][1]);
  }
  if (st != FM_OK) {
    fm_docs_free(&g.docs);
    free(g.spans);
    return st;
  }

  int64_t nb = fam->per_head ? req->batch : 1, nh = fam->per_head ? req->heads : 1;
  fm_colmask *m = NULL;
  st = fm_colmask_create(S, S, nb, nh, fam->causal, &m, err);
  for (int32_t s = 0; st == FM_OK && s < nb * nh; s++) {
    if (!strcmp(n, "sliding_window")) gen_sliding_window(m, s, &g);
    else if (!strcmp(n, "causal_document")) gen_documents(m, s, &g, 0, 0, 0);
    else if (!strcmp(n, "document")) gen_documents(m, s, &g, 1, 0, 0);
    else if (!strcmp(n, "share_question")) st = gen_share_question(m, s, &g, err);
    else if (!strcmp(n, "global_sliding_window")) gen_global_sliding_window(m, s, &g);
    else if (!strcmp(n, "causal_blockwise")) gen_documents(m, s, &g, 0, 0, 1);
    else if (!strcmp(n, "prefix_lm_document")) gen_documents(m, s, &g, 0, 1, 0);
    else if (!strcmp(n, "prefix_lm_causal")) gen_prefix_lm_causal(m, s, &g);
    else if (!strcmp(n, "qk_sparse")) gen_qk_sparse(m, s, &g);
    else if (!strcmp(n, "random_eviction")) gen_random_eviction(m, s, &g);
  }
  fm_docs_free(&g.docs);
  free(g.spans);
  if (st == FM_OK) st = fm_colmask_validate(m, err);
  if (st != FM_OK) {
    fm_colmask_destroy(m);
    return st;
  }
  *out = m;
  return FM_OK;
}
