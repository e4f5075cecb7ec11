/* fm_scenario.c — scenario files (fm_scenario.h). Every key is one row of
 * the key table below: its name, where it may stand (the top level, a mask
 * entry, or both), its parser and the field it fills. Adding a key is a row
 * here, a field in fm_scenario.h and a test in tests/test_scenario.c. */
#define _POSIX_C_SOURCE 200809L
#include "fm_scenario.h"
#include "fm_words.h"
#include "fm_input.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fm_families.h"

#ifdef FM_HAVE_YAML
#include <yaml.h>
#endif

static const char *const report_names[FM_SCN_NREPORTS] = {"cases", "paper-table", "sweep", "memory",
                                                          "chunks"};

const char *fm_scn_report_name(fm_scn_report r) {
  return (unsigned)r < FM_SCN_NREPORTS ? report_names[r] : "?";
}

void fm_scenario_defaults(fm_scenario *s) {
  memset(s, 0, sizeof *s);
  s->seqlen = (fm_int_list){.n = 1, .v = {8192}};
  s->head_dim = (fm_int_list){.n = 1, .v = {128}};
  s->br = s->bc = (fm_int_list){.n = 1, .v = {128}};
  s->batch = s->heads = 1;
  s->tokens = 131072;
  s->hidden = 4096;
  s->draws = 1;
  s->run = FM_SCN_ANALYZE;
  s->kernels[0] = FM_KERNEL_AUTO;
  s->nkernels = 1;
  s->variant = FM_VARIANT_SKIP;
  s->mask_method = FM_MASK_METHOD_AUTO;
  s->pass = FM_PASS_FWD;
  s->warmup = 2;
  s->reps = 5;
  s->cupti = 1;
  s->report = FM_SCN_REPORT_CASES;
}

const char *fm_scn_param(const fm_scenario *s, const fm_scn_mask *m, int i) {
  return i >= 0 && i < m->nparams ? s->pool + m->param_at[i] : "";
}

fm_status fm_scn_add_param(fm_scenario *s, fm_scn_mask *m, const char *kv, fm_err *err) {
  size_t n = strlen(kv) + 1;
  if (m->nparams == FM_SCN_MAX_PARAMS)
    return fm_fail(err, FM_EINVAL, "too many parameters (at most %d)", FM_SCN_MAX_PARAMS);
  if (n > (size_t)(FM_SCN_PARAM_POOL - s->pool_used))
    return fm_fail(err, FM_EINVAL, "parameters longer than %d characters in all",
                   FM_SCN_PARAM_POOL - 1);
  memcpy(s->pool + s->pool_used, kv, n);
  m->param_at[m->nparams++] = s->pool_used;
  s->pool_used += (int32_t)n;
  return FM_OK;
}

#ifndef FM_HAVE_YAML

fm_status fm_scenario_parse(const char *text, size_t len, const char *label, const char *dir,
                            fm_scenario *out, fm_err *err) {
  (void)text, (void)len, (void)dir;
  fm_scenario_defaults(out);
  return fm_fail(err, FM_EUNSUPPORTED, "%s: fmsim was built without libyaml (install libyaml-dev)",
                 label);
}

#else

/* ---- the parse context and its error lines -------------------------------------------- */

enum { AT_ROOT = 1u << 0, AT_MASK = 1u << 1 };

typedef struct ctx {
  yaml_document_t *doc;
  const char *path, *dir;
  fm_err *err;
  fm_scenario *s;
  fm_scn_mask *mask; /* the entry being parsed, NULL at the top level */
} ctx;

static int line_of(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }

static fm_status bad(ctx *c, const yaml_node_t *n, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static fm_status bad(ctx *c, const yaml_node_t *n, const char *key, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return fm_fail(c->err, FM_EINVAL, "%s:%d: key '%s': %s", c->path, n ? line_of(n) : 0, key, what);
}

static const char *scalar(const yaml_node_t *n) {
  return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static const yaml_node_t *node(ctx *c, int index) { return yaml_document_get_node(c->doc, index); }

/* A key given twice in one mapping is refused (YAML says keys are unique;
 * libyaml keeps both, and a silent choice would run another experiment).
 * p: a pair of mapping n; checks the pairs before it. */
static fm_status once(ctx *c, const yaml_node_t *n, const yaml_node_pair_t *p) {
  const yaml_node_t *kn = node(c, p->key);
  const char *ks = scalar(kn);
  if (!ks) return FM_OK;
  for (const yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
    const yaml_node_t *qn = node(c, q->key);
    const char *qs = scalar(qn);
    if (qs && !strcmp(qs, ks))
      return bad(c, kn, ks, "given twice in one mapping (first at line %d); keep one", line_of(qn));
  }
  return FM_OK;
}

static fm_status unknown_key(ctx *c, const yaml_node_t *n, const char *key,
                             const char *const *known, int nknown, const char *where) {
  const char *best = fm_closest(key, known, nknown, 3);
  if (best) return bad(c, n, key, "unknown key in %s (did you mean '%s'?)", where, best);
  return bad(c, n, key, "unknown key in %s", where);
}

/* ---- value parsers: one per kind of key ------------------------------------------------ */

typedef struct key_row key_row;
typedef fm_status (*key_parse)(ctx *c, const yaml_node_t *v, const key_row *k, void *field);

struct key_row {
  const char *name;
  unsigned where;             /* AT_ROOT and/or AT_MASK */
  key_parse parse;
  ptrdiff_t root_off, mask_off; /* the field in fm_scenario / fm_scn_mask, -1: none */
  int64_t lo, hi;             /* integer bounds; hi is the capacity of a string field */
};

static fm_status parse_int(ctx *c, const yaml_node_t *n, const char *key, int64_t lo, int64_t hi,
                           int64_t *out) {
  const char *s = scalar(n);
  if (!s)
    return bad(c, n, key, "expected an integer, got a %s",
               n->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno) return bad(c, n, key, "expected an integer, got '%s'", s);
  if (v < lo || v > hi)
    return bad(c, n, key, "%lld is out of range (%lld..%lld)", v, (long long)lo, (long long)hi);
  *out = v;
  return FM_OK;
}

static fm_status p_int(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  return parse_int(c, v, k->name, k->lo, k->hi, field);
}

static fm_status p_seed(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  int64_t seed = 0;
  fm_status st = parse_int(c, v, k->name, k->lo, k->hi, &seed);
  if (st == FM_OK) *(uint64_t *)field = (uint64_t)seed;
  return st;
}

static fm_status p_bool(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  const char *s = scalar(v);
  int *out = field;
  if (s && (!strcmp(s, "true") || !strcmp(s, "yes"))) *out = 1;
  else if (s && (!strcmp(s, "false") || !strcmp(s, "no"))) *out = 0;
  else return bad(c, v, k->name, "expected true or false");
  return FM_OK;
}

static fm_status p_string(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  const char *s = scalar(v);
  if (!s) return bad(c, v, k->name, "expected a string");
  if (strlen(s) >= (size_t)k->hi)
    return bad(c, v, k->name, "longer than %lld characters", (long long)k->hi - 1);
  snprintf(field, (size_t)k->hi, "%s", s);
  return FM_OK;
}

/* name: also the default output folder out/NAME, so one folder name: no '/',
 * not starting with '.' (no "..", no hidden folder), no control character. */
static fm_status p_name(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  fm_status st = p_string(c, v, k, field);
  if (st != FM_OK) return st;
  const char *name = field;
  int ctrl = 0;
  for (const char *p = name; *p; p++) ctrl |= (unsigned char)*p < 0x20 || *p == 0x7f;
  if (!*name || name[0] == '.' || strchr(name, '/') || strchr(name, '\\') || ctrl)
    return bad(c, v, k->name, "'%.80s' is not a folder name (it names out/NAME: no '/', no "
               "leading '.', no control characters; output: sets another folder)", name);
  return FM_OK;
}

/* A path relative to the scenario's folder (absolute paths stay as they are). */
static fm_status p_path(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  const char *rel = scalar(v);
  if (!rel) return bad(c, v, k->name, "expected a path");
  int len = rel[0] == '/' ? snprintf(field, (size_t)k->hi, "%s", rel)
                          : snprintf(field, (size_t)k->hi, "%s/%s", c->dir, rel);
  if (len < 0 || len >= k->hi) return bad(c, v, k->name, "path too long");
  return FM_OK;
}

/* int, [ints], or {from: a, to: b, factor: f} (geometric). */
static fm_status parse_range(ctx *c, const yaml_node_t *n, const key_row *k, fm_int_list *out) {
  int64_t from = 0, to = 0, factor = 2;
  int have_from = 0, have_to = 0;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *kn = node(c, p->key), *v = node(c, p->value);
    const char *ks = scalar(kn);
    fm_status st = once(c, n, p);
    if (st != FM_OK) return st;
    if (ks && !strcmp(ks, "from")) st = parse_int(c, v, "from", k->lo, k->hi, &from), have_from = 1;
    else if (ks && !strcmp(ks, "to")) st = parse_int(c, v, "to", k->lo, k->hi, &to), have_to = 1;
    else if (ks && !strcmp(ks, "factor")) st = parse_int(c, v, "factor", 2, 1 << 20, &factor);
    else {
      static const char *const known[] = {"from", "to", "factor"};
      return unknown_key(c, kn, ks ? ks : "?", known, 3, k->name);
    }
    if (st != FM_OK) return st;
  }
  if (!have_from || !have_to || from > to)
    return bad(c, n, k->name, "a range needs from <= to (and an optional factor)");
  for (int64_t x = from; x <= to; x *= factor) {
    if (out->n == FM_SCN_MAX_LIST)
      return bad(c, n, k->name, "range has more than %d values", FM_SCN_MAX_LIST);
    out->v[out->n++] = x;
  }
  return FM_OK;
}

static fm_status p_int_list(ctx *c, const yaml_node_t *n, const key_row *k, void *field) {
  fm_int_list *out = field;
  out->n = 0;
  if (n->type == YAML_SCALAR_NODE) {
    out->n = 1;
    return parse_int(c, n, k->name, k->lo, k->hi, &out->v[0]);
  }
  if (n->type == YAML_MAPPING_NODE) return parse_range(c, n, k, out);
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
    if (out->n == FM_SCN_MAX_LIST) return bad(c, n, k->name, "more than %d values", FM_SCN_MAX_LIST);
    fm_status st = parse_int(c, node(c, *it), k->name, k->lo, k->hi, &out->v[out->n++]);
    if (st != FM_OK) return st;
  }
  if (out->n == 0) return bad(c, n, k->name, "empty list");
  return FM_OK;
}

static fm_status p_head_dims(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  fm_int_list *l = field;
  fm_status st = p_int_list(c, v, k, field);
  for (int i = 0; st == FM_OK && i < l->n; i++)
    if (fm_kernel_tile_size(FM_KERNEL_AUTO, FM_PASS_FWD, (int32_t)l->v[i], NULL, NULL, NULL) != FM_OK)
      st = bad(c, v, k->name, "head dim %lld is not supported (64 or 128)", (long long)l->v[i]);
  return st;
}

static fm_status p_samples(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  const char *s = scalar(v);
  fm_int_list *out = field;
  if (s && !strcmp(s, "all")) {
    out->n = 5;
    for (int i = 0; i < 5; i++) out->v[i] = i;
    return FM_OK;
  }
  return p_int_list(c, v, k, field);
}

static fm_status p_auto_int(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  const char *s = scalar(v);
  if (s && !strcmp(s, "auto")) {
    *(int64_t *)field = 0;
    return FM_OK;
  }
  return parse_int(c, v, k->name, k->lo, k->hi, field);
}

/* A word or a list of words; each is passed to one(c, word node, key, field). */
static fm_status each_word(ctx *c, const yaml_node_t *n, const key_row *k, void *field,
                           fm_status (*one)(ctx *, const yaml_node_t *, const key_row *, void *)) {
  if (n->type == YAML_SCALAR_NODE) return one(c, n, k, field);
  if (n->type != YAML_SEQUENCE_NODE) return bad(c, n, k->name, "expected a list of words");
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
    fm_status st = one(c, node(c, *it), k, field);
    if (st != FM_OK) return st;
  }
  return FM_OK;
}

/* One of words (did-you-mean on a near miss); its index in *out. */
static fm_status match_word(ctx *c, const yaml_node_t *w, const char *key, const char *const *words,
                            int nwords, int *out) {
  const char *s = scalar(w);
  for (int i = 0; s && i < nwords; i++)
    if (!strcmp(s, words[i])) {
      *out = i;
      return FM_OK;
    }
  const char *best = s ? fm_closest(s, words, nwords, 3) : NULL;
  if (best) return bad(c, w, key, "unknown value '%s' (did you mean '%s'?)", s, best);
  return bad(c, w, key, "unknown value '%s'", s ? s : "(not a word)");
}

static fm_status one_step(ctx *c, const yaml_node_t *w, const key_row *k, void *field) {
  static const char *const steps[] = {"analyze", "simulate", "gpu", "peer"};
  int i = 0;
  fm_status st = match_word(c, w, k->name, steps, 4, &i);
  if (st == FM_OK) *(unsigned *)field |= 1u << i;
  return st;
}

static fm_status p_steps(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  *(unsigned *)field = 0;
  return each_word(c, v, k, field, one_step);
}

static fm_status one_kernel(ctx *c, const yaml_node_t *w, const key_row *k, void *field) {
  (void)field;
  fm_scenario *s = c->s;
  fm_err e;
  if (s->nkernels == FM_SCN_MAX_KERNELS)
    return bad(c, w, k->name, "more than %d kernels", FM_SCN_MAX_KERNELS);
  if (fm_kernel_parse(scalar(w), &s->kernels[s->nkernels], &e) != FM_OK)
    return bad(c, w, k->name, "%s", e.msg);
  s->nkernels++;
  return FM_OK;
}

static fm_status p_kernels(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  c->s->nkernels = 0;
  fm_status st = each_word(c, v, k, field, one_kernel);
  if (st == FM_OK && c->s->nkernels == 0) st = bad(c, v, k->name, "empty list");
  return st;
}

static fm_status p_variant(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  fm_err e;
  if (fm_variant_parse(scalar(v), field, &e) != FM_OK) return bad(c, v, k->name, "%s", e.msg);
  return FM_OK;
}

static fm_status p_mask_method(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  fm_err e;
  if (fm_mask_method_parse(scalar(v), field, &e) != FM_OK) return bad(c, v, k->name, "%s", e.msg);
  return FM_OK;
}

static fm_status p_pass(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  fm_err e;
  if (fm_pass_parse(scalar(v), field, &e) != FM_OK) return bad(c, v, k->name, "%s", e.msg);
  return FM_OK;
}

/* A GPU profile: a name of data/gpu (a word: no '/', no .json), or a file
 * relative to the scenario's folder. */
static fm_status p_profile(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  const char *name = scalar(v);
  if (!name || !*name) return bad(c, v, k->name, "expected a profile name (data/gpu) or a .json file");
  size_t n = strlen(name);
  int file = strchr(name, '/') || (n > 5 && !strcmp(name + n - 5, ".json"));
  fm_status st = file ? p_path(c, v, k, field) : p_string(c, v, k, field);
  if (st == FM_OK) c->s->profile_line = line_of(v);
  return st;
}

static fm_status one_figure(ctx *c, const yaml_node_t *w, const key_row *k, void *field) {
  (void)field;
  fm_scenario *s = c->s;
  const char *name = scalar(w);
  if (!name || !*name) return bad(c, w, k->name, "expected a figure name");
  if (s->nfigures == FM_SCN_MAX_FIGURES)
    return bad(c, w, k->name, "more than %d figures", FM_SCN_MAX_FIGURES);
  if (strlen(name) >= sizeof s->figures[0]) return bad(c, w, k->name, "'%s': name too long", name);
  snprintf(s->figures[s->nfigures++], sizeof s->figures[0], "%s", name);
  return FM_OK;
}

static fm_status p_figures(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  c->s->nfigures = 0;
  c->s->figures_line = line_of(v);
  return each_word(c, v, k, field, one_figure);
}

static fm_status p_report(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  int i = 0;
  if (match_word(c, v, k->name, report_names, FM_SCN_NREPORTS, &i) != FM_OK)
    return bad(c, v, k->name, "expected cases, paper-table, sweep, memory or chunks");
  *(fm_scn_report *)field = (fm_scn_report)i;
  return FM_OK;
}

static fm_status p_masks(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  (void)c, (void)k;
  *(const yaml_node_t **)field = v;
  return FM_OK;
}

static fm_status p_family(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  fm_status st = p_string(c, v, k, field);
  const char *name = field;
  if (st != FM_OK || fm_family_find(name)) return st;
  const char *best = fm_family_closest(name);
  return best ? bad(c, v, k->name, "unknown family '%s' (did you mean '%s'?)", name, best)
              : bad(c, v, k->name, "unknown family '%s' (fmsim families lists them)", name);
}

static fm_status p_params(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  (void)field;
  if (v->type != YAML_MAPPING_NODE) return bad(c, v, k->name, "expected a mapping {key: value}");
  for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
    const char *pk = scalar(node(c, q->key)), *pv = scalar(node(c, q->value));
    if (!pk || !pv) return bad(c, v, k->name, "parameters are key: value scalars");
    fm_status st = once(c, v, q);
    if (st != FM_OK) return st;
    size_t n = strlen(pk) + strlen(pv) + 2;
    char *kv = malloc(n);
    if (!kv) return fm_fail(c->err, FM_ENOMEM, "out of memory");
    snprintf(kv, n, "%s=%s", pk, pv);
    fm_err e;
    st = fm_scn_add_param(c->s, c->mask, kv, &e);
    free(kv);
    if (st != FM_OK) return bad(c, v, pk, "%s", e.msg);
  }
  return FM_OK;
}

static fm_status p_file(ctx *c, const yaml_node_t *v, const key_row *k, void *field) {
  c->mask->is_intervals = !strcmp(k->name, "intervals");
  return p_path(c, v, k, field);
}

/* ---- the key table ----------------------------------------------------------------------- */

#define R(f) offsetof(fm_scenario, f)
#define M(f) offsetof(fm_scn_mask, f)
#define CAP(type, f) ((int64_t)sizeof(((type *)0)->f))
#define NO (-1)
#define BOTH (AT_ROOT | AT_MASK)

static const key_row keys[] = {
    {"name", AT_ROOT, p_name, R(name), NO, 0, CAP(fm_scenario, name)},
    {"description", AT_ROOT, p_string, R(description), NO, 0, CAP(fm_scenario, description)},
    {"output", AT_ROOT, p_string, R(output), NO, 0, CAP(fm_scenario, output)},
    {"seqlen", BOTH, p_int_list, R(seqlen), M(seqlen), 1, 1 << 30},
    {"batch", BOTH, p_auto_int, R(batch), M(batch), 1, 65535},
    {"heads", BOTH, p_auto_int, R(heads), M(heads), 1, 65535},
    {"tokens", AT_ROOT, p_int, R(tokens), NO, 1, (int64_t)1 << 40},
    {"hidden", AT_ROOT, p_int, R(hidden), NO, 64, 1 << 20},
    {"head_dim", AT_ROOT, p_head_dims, R(head_dim), NO, 1, 1024},
    {"br", BOTH, p_int_list, R(br), M(br), 1, 65536},
    {"bc", BOTH, p_int_list, R(bc), M(bc), 1, 65536},
    {"samples", BOTH, p_samples, R(samples), M(samples), 0, 1 << 20},
    {"sample_file", AT_ROOT, p_path, R(sample_file), NO, 0, CAP(fm_scenario, sample_file)},
    {"seed", AT_ROOT, p_seed, R(seed), NO, 0, INT64_MAX},
    {"draws", BOTH, p_int, R(draws), M(draws), 1, 100000},
    {"run", AT_ROOT, p_steps, R(run), NO, 0, 0},
    {"kernel", AT_ROOT, p_kernels, R(kernels), NO, 0, 0},
    {"variant", AT_ROOT, p_variant, R(variant), NO, 0, 0},
    {"mask_method", AT_ROOT, p_mask_method, R(mask_method), NO, 0, 0},
    {"pass", AT_ROOT, p_pass, R(pass), NO, 0, 0},
    {"profile", AT_ROOT, p_profile, R(profile), NO, 0, CAP(fm_scenario, profile)},
    {"warmup", AT_ROOT, p_int, R(warmup), NO, 0, 100000},
    {"reps", AT_ROOT, p_int, R(reps), NO, 1, 100000},
    {"settle_ms", AT_ROOT, p_int, R(settle_ms), NO, 0, 10000},
    {"sustained_ms", AT_ROOT, p_int, R(sustained_ms), NO, 0, 60000},
    {"noskip_reps", AT_ROOT, p_int, R(noskip_reps), NO, 0, 100000},
    {"instrument_reps", AT_ROOT, p_int, R(instrument_reps), NO, 0, 100000},
    {"count_bytes", AT_ROOT, p_bool, R(count_bytes), NO, 0, 0},
    {"cupti", AT_ROOT, p_bool, R(cupti), NO, 0, 0},
    {"figures", AT_ROOT, p_figures, R(figures), NO, 0, 0},
    {"report", AT_ROOT, p_report, R(report), NO, 0, 0},
    {"chunk", AT_ROOT, p_int, R(chunk), NO, 1, 1 << 20},
    {"masks", AT_ROOT, p_masks, NO, NO, 0, 0},
    {"family", AT_MASK, p_family, NO, M(family), 0, CAP(fm_scn_mask, family)},
    {"params", AT_MASK, p_params, NO, M(nparams), 0, 0},
    {"intervals", AT_MASK, p_file, NO, M(file), 0, CAP(fm_scn_mask, file)},
    {"dense", AT_MASK, p_file, NO, M(file), 0, CAP(fm_scn_mask, file)},
    {"causal", AT_MASK, p_bool, NO, M(causal), 0, 0},
    {"masked_true", AT_MASK, p_bool, NO, M(masked_true), 0, 0},
    {"strict", AT_MASK, p_bool, NO, M(strict), 0, 0},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

/* Parses mapping n at one level (AT_ROOT into the scenario, AT_MASK into
 * c->mask); seen gets the bit of every key given. masks_node gets the value
 * of masks:. */
static fm_status parse_mapping(ctx *c, const yaml_node_t *n, unsigned where, uint64_t *seen,
                               const yaml_node_t **masks_node) {
  const char *where_text = where == AT_ROOT ? "the scenario" : "a mask entry";
  char *base = where == AT_ROOT ? (char *)c->s : (char *)c->mask;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
    const char *ks = scalar(k);
    if (!ks) return bad(c, k, where == AT_ROOT ? "?" : "masks", "keys are words");
    fm_status st = once(c, n, p);
    if (st != FM_OK) return st;
    int row = -1;
    for (int i = 0; i < NKEYS && row < 0; i++)
      if ((keys[i].where & where) && !strcmp(keys[i].name, ks)) row = i;
    if (row < 0) {
      const char *known[NKEYS];
      int nknown = 0;
      for (int i = 0; i < NKEYS; i++)
        if (keys[i].where & where) known[nknown++] = keys[i].name;
      return unknown_key(c, k, ks, known, nknown, where_text);
    }
    const key_row *kr = &keys[row];
    ptrdiff_t off = where == AT_ROOT ? kr->root_off : kr->mask_off;
    void *field = kr->parse == p_masks ? (void *)masks_node : base + off;
    st = kr->parse(c, v, kr, field);
    if (st != FM_OK) return st;
    *seen |= 1ull << row;
  }
  return FM_OK;
}

static int key_seen(uint64_t seen, const char *name) {
  for (int i = 0; i < NKEYS; i++)
    if (!strcmp(keys[i].name, name)) return (seen >> i) & 1;
  return 0;
}

static fm_status parse_mask(ctx *c, const yaml_node_t *n, fm_scn_mask *m) {
  memset(m, 0, sizeof *m);
  m->line = line_of(n);
  if (n->type != YAML_MAPPING_NODE)
    return bad(c, n, "masks", "each entry is a mapping (family: NAME ...)");
  c->mask = m;
  uint64_t seen = 0;
  fm_status st = parse_mapping(c, n, AT_MASK, &seen, NULL);
  c->mask = NULL;
  if (st != FM_OK) return st;
  m->batch_given = key_seen(seen, "batch");
  m->heads_given = key_seen(seen, "heads");
  if (!m->family[0] && !m->file[0])
    return bad(c, n, "masks", "an entry needs family:, intervals: or dense:");
  if (m->family[0] && m->file[0])
    return bad(c, n, "masks", "an entry has either family: or a file, not both");
  if (key_seen(seen, "intervals") && key_seen(seen, "dense"))
    return bad(c, n, "masks", "an entry has either intervals: or dense:, not both");
  if (m->is_intervals && !key_seen(seen, "causal"))
    return bad(c, n, "intervals", "an interval file needs causal: true or false beside it");
  if (m->nparams && !m->family[0]) return bad(c, n, "params", "parameters belong to a family");
  if (m->strict && !m->is_intervals) return bad(c, n, "strict", "strict: goes with intervals:");
  return FM_OK;
}

static fm_status parse_root(ctx *c, const yaml_node_t *root) {
  fm_scenario *s = c->s;
  if (!root || root->type != YAML_MAPPING_NODE)
    return fm_fail(c->err, FM_EINVAL, "%s:1: a scenario is a mapping of keys (name:, masks: ...)",
                   c->path);
  const yaml_node_t *masks = NULL;
  uint64_t seen = 0;
  fm_status st = parse_mapping(c, root, AT_ROOT, &seen, &masks);
  if (st != FM_OK) return st;
  if (!s->name[0]) return fm_fail(c->err, FM_EINVAL, "%s:1: key 'name': required", c->path);
  if (!masks || masks->type != YAML_SEQUENCE_NODE ||
      masks->data.sequence.items.start == masks->data.sequence.items.top)
    return fm_fail(c->err, FM_EINVAL, "%s:%d: key 'masks': required, a non-empty list", c->path,
                   masks ? line_of(masks) : 1);
  s->masks_line = line_of(masks);
  for (yaml_node_item_t *it = masks->data.sequence.items.start; it < masks->data.sequence.items.top;
       it++) {
    if (s->nmasks == FM_SCN_MAX_MASKS)
      return bad(c, masks, "masks", "more than %d entries", FM_SCN_MAX_MASKS);
    st = parse_mask(c, node(c, *it), &s->masks[s->nmasks]);
    if (st != FM_OK) return st;
    s->nmasks++;
  }
  if (s->report == FM_SCN_REPORT_CHUNKS && s->chunk == 0)
    return bad(c, root, "chunk", "report: chunks needs chunk: C (the chunk size in tokens)");
  return FM_OK;
}

/* Flow collections nest as deep as their brackets: refused past
 * FM_SCN_MAX_DEPTH before libyaml reads them (its scanner is quadratic in the
 * depth). Counted over the raw text, quotes and comments included: a
 * scenario never comes near the limit, so a bracket inside a string can only
 * make the count larger, never hide a deep nest. */
static fm_status check_depth(const char *text, size_t len, const char *label, fm_err *err) {
  int depth = 0, line = 1;
  for (size_t i = 0; i < len; i++) {
    char ch = text[i];
    if (ch == '\n') line++;
    else if (ch == '[' || ch == '{') {
      if (++depth > FM_SCN_MAX_DEPTH)
        return fm_fail(err, FM_EINVAL, "%s:%d: brackets nested deeper than %d levels", label, line,
                       FM_SCN_MAX_DEPTH);
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      depth--;
    }
  }
  return FM_OK;
}

/* A scenario is one YAML document: a second one (after `---`) would be read by
 * nobody, so a file holding two experiments is refused rather than half run. */
static fm_status no_second_document(yaml_parser_t *parser, const char *label, fm_err *err) {
  yaml_document_t next;
  if (!yaml_parser_load(parser, &next))
    return fm_fail(err, FM_EFORMAT, "%s:%d: YAML syntax error: %s", label,
                   (int)parser->problem_mark.line + 1, parser->problem ? parser->problem : "?");
  const yaml_node_t *root = yaml_document_get_root_node(&next);
  int line = root ? (int)next.start_mark.line + 1 : 0;
  yaml_document_delete(&next);
  if (!root) return FM_OK;
  return fm_fail(err, FM_EINVAL, "%s:%d: a second YAML document ('---'); a scenario file holds one "
                 "(write each experiment in its own file)", label, line);
}

fm_status fm_scenario_parse(const char *text, size_t len, const char *label, const char *dir,
                            fm_scenario *s, fm_err *err) {
  fm_scenario_defaults(s);
  snprintf(s->path, sizeof s->path, "%s", label);
  if (len > FM_SCN_MAX_FILE_BYTES)
    return fm_fail(err, FM_EINVAL, "%s: %zu bytes is too large for a scenario (at most %d)", label,
                   len, FM_SCN_MAX_FILE_BYTES);
  fm_status st = check_depth(text, len, label, err);
  if (st != FM_OK) return st;
  yaml_parser_t parser;
  yaml_document_t doc;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    st = fm_fail(err, FM_EFORMAT, "%s:%d: YAML syntax error: %s%s%s", label,
                 (int)parser.problem_mark.line + 1, parser.problem ? parser.problem : "?",
                 parser.context ? " " : "", parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    return st;
  }
  ctx c = {.doc = &doc, .path = label, .dir = dir, .err = err, .s = s, .mask = NULL};
  st = parse_root(&c, yaml_document_get_root_node(&doc));
  if (st == FM_OK && !s->output[0]) snprintf(s->output, sizeof s->output, "out/%s", s->name);
  yaml_document_delete(&doc);
  if (st == FM_OK) st = no_second_document(&parser, label, err);
  yaml_parser_delete(&parser);
  return st;
}

#endif /* FM_HAVE_YAML */

/* Reads the whole file, refusing one larger than a scenario can be before
 * reading it. */
static fm_status read_scenario_text(const char *path, char **text, size_t *len, fm_err *err) {
  FILE *f = NULL; /* a regular file only: a FIFO is refused at once, never waited on (fm_input.h) */
  fm_status st = fm_input_open(path, &f, err);
  if (st == FM_EIO) return fm_fail(err, FM_EIO, "%s: cannot open scenario: %s", path, strerror(errno));
  if (st != FM_OK) return st;
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > FM_SCN_MAX_FILE_BYTES) {
    fclose(f);
    return fm_fail(err, FM_EINVAL, "%s: %lld bytes is too large for a scenario (at most %d)", path,
                   (long long)sb.st_size, FM_SCN_MAX_FILE_BYTES);
  }
  char *buf = malloc(FM_SCN_MAX_FILE_BYTES + 1);
  if (!buf) {
    fclose(f);
    return fm_fail(err, FM_ENOMEM, "out of memory reading %s", path);
  }
  size_t n = fread(buf, 1, FM_SCN_MAX_FILE_BYTES + 1, f);
  int bad_read = ferror(f);
  fclose(f);
  if (bad_read || n > FM_SCN_MAX_FILE_BYTES) {
    free(buf);
    return bad_read ? fm_fail(err, FM_EIO, "%s: cannot read scenario", path)
                    : fm_fail(err, FM_EINVAL, "%s: more than %d bytes is too large for a scenario",
                              path, FM_SCN_MAX_FILE_BYTES);
  }
  *text = buf;
  *len = n;
  return FM_OK;
}

fm_status fm_scenario_load(const char *path, fm_scenario *s, fm_err *err) {
  fm_scenario_defaults(s);
  snprintf(s->path, sizeof s->path, "%s", path);
  char *text = NULL;
  size_t len = 0;
  fm_status st = read_scenario_text(path, &text, &len, err);
  if (st != FM_OK) return st;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  st = fm_scenario_parse(text, len, path, dir, s, err);
  free(text);
  return st;
}

/* ---- cases ----------------------------------------------------------------------------- */

/* What mask mi expands over. */
typedef struct mask_axes {
  const fm_int_list *seq, *brs, *bcs, *smp;
  int use_samples, nsamples; /* use_samples: a family of documents with samples given */
  int64_t draws;
} mask_axes;

static void axes_of(const fm_scenario *s, int mi, mask_axes *a) {
  static const fm_int_list file_length = {1, {0}}; /* a file mask has its own length */
  const fm_scn_mask *m = &s->masks[mi];
  const fm_family_info *fam = m->family[0] ? fm_family_find(m->family) : NULL;
  a->seq = m->file[0] ? &file_length : m->seqlen.n ? &m->seqlen : &s->seqlen;
  a->brs = m->br.n ? &m->br : &s->br;
  a->bcs = m->bc.n ? &m->bc : &s->bc;
  a->smp = m->samples.n ? &m->samples : &s->samples;
  a->use_samples = fam && fam->uses_docs && a->smp->n;
  a->nsamples = a->use_samples ? a->smp->n : 1;
  a->draws = m->draws ? m->draws : s->draws;
}

int64_t fm_scenario_count_cases(const fm_scenario *s) {
  int64_t total = 0;
  for (int mi = 0; mi < s->nmasks; mi++) {
    mask_axes a;
    axes_of(s, mi, &a);
    total += (int64_t)a.seq->n * s->head_dim.n * a.brs->n * a.bcs->n * a.nsamples * a.draws;
  }
  return total;
}

static void fill_case(const fm_scenario *s, int mi, const mask_axes *a, const int64_t at[6],
                      fm_scn_case *cs) {
  const fm_scn_mask *m = &s->masks[mi];
  memset(cs, 0, sizeof *cs);
  cs->mask_index = mi;
  cs->seqlen = a->seq->v[at[0]];
  cs->head_dim = s->head_dim.v[at[1]];
  cs->br = a->brs->v[at[2]];
  cs->bc = a->bcs->v[at[3]];
  const int64_t batch = m->batch_given ? m->batch : s->batch, heads = m->heads_given ? m->heads : s->heads;
  int64_t auto_batch = cs->seqlen > 0 ? s->tokens / cs->seqlen : 0;
  cs->batch = batch ? batch : auto_batch > 0 ? auto_batch : 1;
  int64_t auto_heads = s->hidden / cs->head_dim;
  cs->heads = heads ? heads : auto_heads > 0 ? auto_heads : 1;
  cs->sample = a->use_samples ? (int)a->smp->v[at[4]] : -1;
  cs->seed = s->seed + (uint64_t)at[5];
  const char *label = m->family[0] ? m->family : (strrchr(m->file, '/') ? strrchr(m->file, '/') + 1 : m->file);
  int len = m->file[0]
                ? snprintf(cs->id, sizeof cs->id, "m%02d-%.100s-D%lld-%lldx%lld", mi, label,
                           (long long)cs->head_dim, (long long)cs->br, (long long)cs->bc)
                : snprintf(cs->id, sizeof cs->id, "m%02d-%s-S%lld-D%lld-%lldx%lld", mi, label,
                           (long long)cs->seqlen, (long long)cs->head_dim, (long long)cs->br,
                           (long long)cs->bc);
  if (cs->sample >= 0) len += snprintf(cs->id + len, sizeof cs->id - (size_t)len, "-k%d", cs->sample);
  if (a->draws > 1) snprintf(cs->id + len, sizeof cs->id - (size_t)len, "-r%lld", (long long)at[5]);
}

fm_status fm_scenario_cases(const fm_scenario *s, fm_scn_case **cases, int *ncases, fm_err *err) {
  int64_t total = fm_scenario_count_cases(s);
  if (total > FM_SCN_MAX_CASES)
    return fm_fail(err, FM_ENOMEM,
                   "%s:%d: key 'masks': the scenario expands to %lld cases (at most %d); use fewer "
                   "lengths, head dims, tile sizes, samples or draws",
                   s->path, s->masks_line, (long long)total, FM_SCN_MAX_CASES);
  fm_scn_case *out = malloc(sizeof *out * (size_t)(total > 0 ? total : 1));
  if (!out) return fm_fail(err, FM_ENOMEM, "out of memory");
  int n = 0;
  for (int mi = 0; mi < s->nmasks; mi++) {
    mask_axes a;
    axes_of(s, mi, &a);
    int64_t at[6];
    for (at[0] = 0; at[0] < a.seq->n; at[0]++)
      for (at[1] = 0; at[1] < s->head_dim.n; at[1]++)
        for (at[2] = 0; at[2] < a.brs->n; at[2]++)
          for (at[3] = 0; at[3] < a.bcs->n; at[3]++)
            for (at[4] = 0; at[4] < a.nsamples; at[4]++)
              for (at[5] = 0; at[5] < a.draws; at[5]++) fill_case(s, mi, &a, at, &out[n++]);
  }
  *cases = out;
  *ncases = n;
  return FM_OK;
}
