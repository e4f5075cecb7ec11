#define _POSIX_C_SOURCE 200809L
#include "fm_scenario.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_families.h"

#ifdef FM_HAVE_YAML
#include <yaml.h>
#endif

static const char *const report_names[] = {"cases", "paper-table", "sweep", "memory", "chunks"};

const char *fm_scn_report_name(fm_scn_report r) { return report_names[r]; }

#ifndef FM_HAVE_YAML

fm_status fm_scenario_load(const char *path, fm_scenario *out, fm_err *err) {
  (void)out;
  return fm_fail(err, FM_EUNSUPPORTED, "%s: fmsim was built without libyaml (install libyaml-dev)",
                 path);
}

#else

typedef struct {
  yaml_document_t *doc;
  const char *path;
  fm_err *err;
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

/* Edit distance for "did you mean". */
static int distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b), d[64][64];
  if (la > 63 || lb > 63) return 99;
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
      d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
  return d[la][lb];
}

static fm_status unknown_key(ctx *c, const yaml_node_t *n, const char *key, const char *const *known,
                             int nknown, const char *where) {
  int best = -1, bestd = 99;
  for (int k = 0; k < nknown; k++) {
    int dd = distance(key, known[k]);
    if (dd < bestd) {
      bestd = dd;
      best = k;
    }
  }
  if (best >= 0 && bestd <= 3)
    return bad(c, n, key, "unknown key in %s (did you mean '%s'?)", where, known[best]);
  return bad(c, n, key, "unknown key in %s", where);
}

static fm_status parse_int(ctx *c, const yaml_node_t *n, const char *key, int64_t lo, int64_t hi,
                           int64_t *out) {
  const char *s = scalar(n);
  if (!s) return bad(c, n, key, "expected an integer, got a %s", n->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno) return bad(c, n, key, "expected an integer, got '%s'", s);
  if (v < lo || v > hi)
    return bad(c, n, key, "%lld is out of range (%lld..%lld)", v, (long long)lo, (long long)hi);
  *out = v;
  return FM_OK;
}

static fm_status parse_bool(ctx *c, const yaml_node_t *n, const char *key, int *out) {
  const char *s = scalar(n);
  if (s && (!strcmp(s, "true") || !strcmp(s, "yes"))) *out = 1;
  else if (s && (!strcmp(s, "false") || !strcmp(s, "no"))) *out = 0;
  else return bad(c, n, key, "expected true or false");
  return FM_OK;
}

static fm_status parse_string(ctx *c, const yaml_node_t *n, const char *key, char *out, size_t cap) {
  const char *s = scalar(n);
  if (!s) return bad(c, n, key, "expected a string");
  if (strlen(s) >= cap) return bad(c, n, key, "longer than %zu characters", cap - 1);
  snprintf(out, cap, "%s", s);
  return FM_OK;
}

/* int, [ints], or {from: a, to: b, factor: f} (geometric). */
static fm_status parse_int_list(ctx *c, const yaml_node_t *n, const char *key, int64_t lo,
                                int64_t hi, fm_int_list *out) {
  out->n = 0;
  if (n->type == YAML_SCALAR_NODE) {
    out->n = 1;
    return parse_int(c, n, key, lo, hi, &out->v[0]);
  }
  if (n->type == YAML_SEQUENCE_NODE) {
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
      if (out->n == FM_SCN_MAX_LIST) return bad(c, n, key, "more than %d values", FM_SCN_MAX_LIST);
      fm_status st = parse_int(c, yaml_document_get_node(c->doc, *it), key, lo, hi, &out->v[out->n++]);
      if (st != FM_OK) return st;
    }
    if (out->n == 0) return bad(c, n, key, "empty list");
    return FM_OK;
  }
  int64_t from = 0, to = 0, factor = 2;
  int have_from = 0, have_to = 0;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = yaml_document_get_node(c->doc, p->key), *v = yaml_document_get_node(c->doc, p->value);
    const char *ks = scalar(k);
    fm_status st;
    if (ks && !strcmp(ks, "from")) st = parse_int(c, v, "from", lo, hi, &from), have_from = 1;
    else if (ks && !strcmp(ks, "to")) st = parse_int(c, v, "to", lo, hi, &to), have_to = 1;
    else if (ks && !strcmp(ks, "factor")) st = parse_int(c, v, "factor", 2, 1 << 20, &factor);
    else {
      static const char *const known[] = {"from", "to", "factor"};
      return unknown_key(c, k, ks ? ks : "?", known, 3, key);
    }
    if (st != FM_OK) return st;
  }
  if (!have_from || !have_to || from > to)
    return bad(c, n, key, "a range needs from <= to (and an optional factor)");
  for (int64_t x = from; x <= to; x *= factor) {
    if (out->n == FM_SCN_MAX_LIST) return bad(c, n, key, "range has more than %d values", FM_SCN_MAX_LIST);
    out->v[out->n++] = x;
  }
  return FM_OK;
}

static fm_status parse_samples(ctx *c, const yaml_node_t *n, fm_int_list *out) {
  const char *s = scalar(n);
  if (s && !strcmp(s, "all")) {
    out->n = 5;
    for (int k = 0; k < 5; k++) out->v[k] = k;
    return FM_OK;
  }
  return parse_int_list(c, n, "samples", 0, 1 << 20, out);
}

static fm_status parse_auto_int(ctx *c, const yaml_node_t *n, const char *key, int64_t *out) {
  const char *s = scalar(n);
  if (s && !strcmp(s, "auto")) {
    *out = 0;
    return FM_OK;
  }
  return parse_int(c, n, key, 1, 65535, out);
}

static fm_status match_word(ctx *c, const yaml_node_t *w, const char *key, const char *const *words,
                            const unsigned *bits, int nwords, unsigned *out) {
  const char *s = scalar(w);
  int best = 0, bestd = 99;
  for (int k = 0; s && k < nwords; k++) {
    if (!strcmp(s, words[k])) {
      *out |= bits[k];
      return FM_OK;
    }
    if (distance(s, words[k]) < bestd) bestd = distance(s, words[k]), best = k;
  }
  if (s && bestd <= 3) return bad(c, w, key, "unknown value '%s' (did you mean '%s'?)", s, words[best]);
  return bad(c, w, key, "unknown value '%s'", s ? s : "(not a word)");
}

/* A word or a list of words, each one of `words`; their bits or-ed. */
static fm_status parse_words(ctx *c, const yaml_node_t *n, const char *key, const char *const *words,
                             const unsigned *bits, int nwords, unsigned *out) {
  *out = 0;
  if (n->type == YAML_SCALAR_NODE) return match_word(c, n, key, words, bits, nwords, out);
  if (n->type != YAML_SEQUENCE_NODE) return bad(c, n, key, "expected a list of words");
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
    fm_status st = match_word(c, yaml_document_get_node(c->doc, *it), key, words, bits, nwords, out);
    if (st != FM_OK) return st;
  }
  return FM_OK;
}

/* A path relative to the scenario's folder (absolute paths stay as they are). */
static fm_status parse_path(ctx *c, const yaml_node_t *n, const char *key, const char *dir,
                            char *out, size_t cap) {
  char rel[2048];
  fm_status st = parse_string(c, n, key, rel, sizeof rel);
  if (st != FM_OK) return st;
  int len = rel[0] == '/' ? snprintf(out, cap, "%s", rel) : snprintf(out, cap, "%s/%s", dir, rel);
  if (len < 0 || (size_t)len >= cap) return bad(c, n, key, "path too long");
  return FM_OK;
}

static fm_status parse_mask(ctx *c, const yaml_node_t *n, const char *dir, fm_scn_mask *m) {
  static const char *const known[] = {"family", "params", "intervals", "dense", "causal",
                                      "masked_true", "seqlen", "br", "bc", "samples", "draws",
                                      "strict"};
  memset(m, 0, sizeof *m);
  m->line = line_of(n);
  if (n->type != YAML_MAPPING_NODE) return bad(c, n, "masks", "each entry is a mapping (family: NAME ...)");
  int have_causal = 0;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = yaml_document_get_node(c->doc, p->key), *v = yaml_document_get_node(c->doc, p->value);
    const char *ks = scalar(k);
    fm_status st = FM_OK;
    if (!ks) return bad(c, k, "masks", "keys are words");
    if (!strcmp(ks, "family")) {
      st = parse_string(c, v, ks, m->family, sizeof m->family);
      if (st == FM_OK && !fm_family_find(m->family)) {
        int best = 0, bestd = 99;
        for (int f = 0; f < fm_family_count(); f++) {
          int dd = distance(m->family, fm_family_at(f)->name);
          if (dd < bestd) bestd = dd, best = f;
        }
        return bestd <= 4 ? bad(c, v, ks, "unknown family '%s' (did you mean '%s'?)", m->family,
                                fm_family_at(best)->name)
                          : bad(c, v, ks, "unknown family '%s' (fmsim families lists them)", m->family);
      }
    } else if (!strcmp(ks, "params")) {
      if (v->type != YAML_MAPPING_NODE) return bad(c, v, ks, "expected a mapping {key: value}");
      for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
        const char *pk = scalar(yaml_document_get_node(c->doc, q->key));
        const char *pv = scalar(yaml_document_get_node(c->doc, q->value));
        if (!pk || !pv) return bad(c, v, ks, "parameters are key: value scalars");
        if (m->nparams == FM_SCN_MAX_PARAMS) return bad(c, v, ks, "too many parameters");
        if ((size_t)snprintf(m->params[m->nparams], sizeof m->params[0], "%s=%s", pk, pv) >= sizeof m->params[0])
          return bad(c, v, pk, "value too long");
        m->nparams++;
      }
    } else if (!strcmp(ks, "intervals") || !strcmp(ks, "dense")) {
      st = parse_path(c, v, ks, dir, m->file, sizeof m->file);
      m->is_intervals = !strcmp(ks, "intervals");
    } else if (!strcmp(ks, "causal")) {
      st = parse_bool(c, v, ks, &m->causal);
      have_causal = 1;
    } else if (!strcmp(ks, "masked_true")) st = parse_bool(c, v, ks, &m->masked_true);
    else if (!strcmp(ks, "strict")) st = parse_bool(c, v, ks, &m->strict);
    else if (!strcmp(ks, "seqlen")) st = parse_int_list(c, v, ks, 1, 1 << 30, &m->seqlen);
    else if (!strcmp(ks, "br")) st = parse_int_list(c, v, ks, 1, 65536, &m->br);
    else if (!strcmp(ks, "bc")) st = parse_int_list(c, v, ks, 1, 65536, &m->bc);
    else if (!strcmp(ks, "samples")) st = parse_samples(c, v, &m->samples);
    else if (!strcmp(ks, "draws")) st = parse_int(c, v, ks, 1, 100000, &m->draws);
    else return unknown_key(c, k, ks, known, (int)(sizeof known / sizeof known[0]), "a mask entry");
    if (st != FM_OK) return st;
  }
  if (!m->family[0] && !m->file[0])
    return bad(c, n, "masks", "an entry needs family:, intervals: or dense:");
  if (m->family[0] && m->file[0])
    return bad(c, n, "masks", "an entry has either family: or a file, not both");
  if (m->is_intervals && !have_causal)
    return bad(c, n, "intervals", "an interval file needs causal: true or false beside it");
  if (m->nparams && !m->family[0]) return bad(c, n, "params", "parameters belong to a family");
  if (m->strict && !m->is_intervals) return bad(c, n, "strict", "strict: goes with intervals:");
  return FM_OK;
}

static fm_status parse_root(ctx *c, const yaml_node_t *root, const char *dir, fm_scenario *s) {
  static const char *const known[] = {"name", "description", "output", "seqlen", "batch", "heads",
                                      "head_dim", "br", "bc", "samples", "seed", "draws", "run",
                                      "figures", "report", "chunk", "masks", "sample_file"};
  static const char *const steps[] = {"analyze", "simulate", "gpu", "peer"};
  static const unsigned step_bits[] = {FM_SCN_ANALYZE, FM_SCN_SIMULATE, FM_SCN_GPU, FM_SCN_PEER};
  static const char *const figs[] = {"gallery", "memory", "tiles"};
  static const unsigned fig_bits[] = {FM_SCN_FIG_GALLERY, FM_SCN_FIG_MEMORY, FM_SCN_FIG_TILES};
  if (!root || root->type != YAML_MAPPING_NODE)
    return fm_fail(c->err, FM_EINVAL, "%s:1: a scenario is a mapping of keys (name:, masks: ...)", c->path);
  const yaml_node_t *masks = NULL;
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = yaml_document_get_node(c->doc, p->key), *v = yaml_document_get_node(c->doc, p->value);
    const char *ks = scalar(k);
    fm_status st = FM_OK;
    if (!ks) return bad(c, k, "?", "keys are words");
    if (!strcmp(ks, "name")) st = parse_string(c, v, ks, s->name, sizeof s->name);
    else if (!strcmp(ks, "description")) st = parse_string(c, v, ks, s->description, sizeof s->description);
    else if (!strcmp(ks, "output")) st = parse_string(c, v, ks, s->output, sizeof s->output);
    else if (!strcmp(ks, "seqlen")) st = parse_int_list(c, v, ks, 1, 1 << 30, &s->seqlen);
    else if (!strcmp(ks, "batch")) st = parse_auto_int(c, v, ks, &s->batch);
    else if (!strcmp(ks, "heads")) st = parse_auto_int(c, v, ks, &s->heads);
    else if (!strcmp(ks, "head_dim")) {
      st = parse_int_list(c, v, ks, 1, 1024, &s->head_dim);
      for (int i = 0; st == FM_OK && i < s->head_dim.n; i++)
        if (s->head_dim.v[i] != 64 && s->head_dim.v[i] != 128)
          st = bad(c, v, ks, "head dim %lld is not supported (64 or 128)", (long long)s->head_dim.v[i]);
    } else if (!strcmp(ks, "br")) st = parse_int_list(c, v, ks, 1, 65536, &s->br);
    else if (!strcmp(ks, "bc")) st = parse_int_list(c, v, ks, 1, 65536, &s->bc);
    else if (!strcmp(ks, "samples")) st = parse_samples(c, v, &s->samples);
    else if (!strcmp(ks, "seed")) {
      int64_t seed;
      st = parse_int(c, v, ks, 0, INT64_MAX, &seed);
      s->seed = (uint64_t)seed;
    } else if (!strcmp(ks, "draws")) st = parse_int(c, v, ks, 1, 100000, &s->draws);
    else if (!strcmp(ks, "run")) st = parse_words(c, v, ks, steps, step_bits, 4, &s->run);
    else if (!strcmp(ks, "figures")) st = parse_words(c, v, ks, figs, fig_bits, 3, &s->figures);
    else if (!strcmp(ks, "report")) {
      const char *r = scalar(v);
      int found = -1;
      for (int w = 0; r && w < 5; w++)
        if (!strcmp(r, report_names[w])) found = w;
      if (found < 0) st = bad(c, v, ks, "expected cases, paper-table, sweep, memory or chunks");
      else s->report = (fm_scn_report)found;
    } else if (!strcmp(ks, "chunk")) st = parse_int(c, v, ks, 1, 1 << 20, &s->chunk);
    else if (!strcmp(ks, "masks")) masks = v;
    else if (!strcmp(ks, "sample_file")) st = parse_path(c, v, ks, dir, s->sample_file, sizeof s->sample_file);
    else return unknown_key(c, k, ks, known, (int)(sizeof known / sizeof known[0]), "the scenario");
    if (st != FM_OK) return st;
  }
  if (!s->name[0]) return fm_fail(c->err, FM_EINVAL, "%s:1: key 'name': required", c->path);
  if (!masks || masks->type != YAML_SEQUENCE_NODE || masks->data.sequence.items.start == masks->data.sequence.items.top)
    return fm_fail(c->err, FM_EINVAL, "%s:%d: key 'masks': required, a non-empty list", c->path,
                   masks ? line_of(masks) : 1);
  for (yaml_node_item_t *it = masks->data.sequence.items.start; it < masks->data.sequence.items.top; it++) {
    if (s->nmasks == FM_SCN_MAX_MASKS) return bad(c, masks, "masks", "more than %d entries", FM_SCN_MAX_MASKS);
    fm_status st = parse_mask(c, yaml_document_get_node(c->doc, *it), dir, &s->masks[s->nmasks]);
    if (st != FM_OK) return st;
    s->nmasks++;
  }
  if (s->report == FM_SCN_REPORT_CHUNKS && s->chunk == 0)
    return bad(c, root, "chunk", "report: chunks needs chunk: C (the chunk size in tokens)");
  return FM_OK;
}

fm_status fm_scenario_load(const char *path, fm_scenario *s, fm_err *err) {
  memset(s, 0, sizeof *s);
  snprintf(s->path, sizeof s->path, "%s", path);
  FILE *f = fopen(path, "rb");
  if (!f) return fm_fail(err, FM_EIO, "%s: cannot open scenario: %s", path, strerror(errno));
  yaml_parser_t parser;
  yaml_document_t doc;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_file(&parser, f);
  if (!yaml_parser_load(&parser, &doc)) {
    fm_status st = fm_fail(err, FM_EFORMAT, "%s:%d: YAML syntax error: %s%s%s", path,
                           (int)parser.problem_mark.line + 1, parser.problem ? parser.problem : "?",
                           parser.context ? " " : "", parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    fclose(f);
    return st;
  }
  /* defaults */
  s->seqlen.n = 1;
  s->seqlen.v[0] = 8192;
  s->head_dim.n = 1;
  s->head_dim.v[0] = 128;
  s->br.n = s->bc.n = 1;
  s->br.v[0] = s->bc.v[0] = 128;
  s->batch = s->heads = 1;
  s->draws = 1;
  s->run = FM_SCN_ANALYZE;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  ctx c = {&doc, path, err};
  fm_status st = parse_root(&c, yaml_document_get_root_node(&doc), dir, s);
  if (st == FM_OK && !s->output[0]) snprintf(s->output, sizeof s->output, "out/%s", s->name);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  fclose(f);
  return st;
}

#endif /* FM_HAVE_YAML */

fm_status fm_scenario_cases(const fm_scenario *s, fm_scn_case **cases, int *ncases, fm_err *err) {
  int cap = 64, n = 0;
  fm_scn_case *out = malloc(sizeof *out * (size_t)cap);
  if (!out) return fm_fail(err, FM_ENOMEM, "out of memory");
  for (int mi = 0; mi < s->nmasks; mi++) {
    const fm_scn_mask *m = &s->masks[mi];
    /* a file mask has its own length: one case per head dim and tile size */
    static const fm_int_list file_length = {1, {0}};
    const fm_int_list *seq = m->file[0] ? &file_length : m->seqlen.n ? &m->seqlen : &s->seqlen;
    const fm_int_list *brs = m->br.n ? &m->br : &s->br, *bcs = m->bc.n ? &m->bc : &s->bc;
    const fm_int_list *smp = m->samples.n ? &m->samples : &s->samples;
    const fm_family_info *fam = m->family[0] ? fm_family_find(m->family) : NULL;
    int nsamples = fam && fam->uses_docs && smp->n ? smp->n : 1;
    int64_t draws = m->draws ? m->draws : s->draws;
    for (int a = 0; a < seq->n; a++)
      for (int d = 0; d < s->head_dim.n; d++)
        for (int b = 0; b < brs->n; b++)
          for (int q = 0; q < bcs->n; q++)
            for (int k = 0; k < nsamples; k++)
              for (int64_t r = 0; r < draws; r++) {
                if (n == cap) {
                  cap *= 2;
                  fm_scn_case *g = realloc(out, sizeof *out * (size_t)cap);
                  if (!g) {
                    free(out);
                    return fm_fail(err, FM_ENOMEM, "out of memory");
                  }
                  out = g;
                }
                fm_scn_case *cs = &out[n++];
                memset(cs, 0, sizeof *cs);
                cs->mask_index = mi;
                cs->seqlen = seq->v[a];
                cs->head_dim = s->head_dim.v[d];
                cs->br = brs->v[b];
                cs->bc = bcs->v[q];
                cs->batch = s->batch ? s->batch
                            : cs->seqlen > 0 && 131072 / cs->seqlen > 0 ? 131072 / cs->seqlen : 1;
                cs->heads = s->heads ? s->heads : 4096 / cs->head_dim;
                cs->sample = fam && fam->uses_docs && smp->n ? (int)smp->v[k] : -1;
                cs->seed = s->seed + (uint64_t)r;
                const char *label = m->family[0] ? m->family : (strrchr(m->file, '/') ? strrchr(m->file, '/') + 1 : m->file);
                int len = m->file[0]
                              ? snprintf(cs->id, sizeof cs->id, "m%02d-%.100s-D%lld-%lldx%lld", mi, label,
                                         (long long)cs->head_dim, (long long)cs->br, (long long)cs->bc)
                              : snprintf(cs->id, sizeof cs->id, "m%02d-%s-S%lld-D%lld-%lldx%lld", mi,
                                         label, (long long)cs->seqlen, (long long)cs->head_dim,
                                         (long long)cs->br, (long long)cs->bc);
                if (cs->sample >= 0) len += snprintf(cs->id + len, sizeof cs->id - (size_t)len, "-k%d", cs->sample);
                if (draws > 1) snprintf(cs->id + len, sizeof cs->id - (size_t)len, "-r%lld", (long long)r);
              }
  }
  *cases = out;
  *ncases = n;
  return FM_OK;
}
