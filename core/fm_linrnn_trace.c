/* fm_linrnn_trace.c — the per-tile trace of a chunkwise linear-RNN run
 * (fm_linrnn_cpu.h): tile_class.npy, tile_cycles.npy, cu_seqlens.npy and
 * summary.json, staged and committed as every fmsim trace (fm_trace.h). */
#include <stdlib.h>
#include <string.h>

#include "fm_fileio.h"
#include "fm_json.h"
#include "fm_jsonr.h"
#include "fm_linrnn_cpu.h"
#include "fm_npy.h"
#include "fm_trace.h"

#define LR_KIND "linrnn"

void fm_lr_work_json(fm_json *j, const char *key, const fm_lr_work *w, double heads) {
  fm_json_object(j, key);
  fm_json_int(j, "tiles_visited", w->tiles_visited);
  fm_json_int(j, "tiles_elementwise", w->tiles_elementwise);
  fm_json_int(j, "inter_blocks", w->inter_blocks);
  fm_json_int(j, "state_rows", w->state_rows);
  fm_json_double(j, "flops", w->flops * heads);
  fm_json_double(j, "flops_intra", w->flops_intra * heads);
  fm_json_double(j, "flops_inter", w->flops_inter * heads);
  fm_json_double(j, "flops_state", w->flops_state * heads);
  fm_json_end(j);
}

static void counts_json(fm_json *j, const fm_lr_counts *c) {
  fm_lr_estimate e;
  fm_lr_estimate_of(c, &e);
  fm_json_object(j, "counts");
  fm_json_int(j, "dk", c->dk);
  fm_json_int(j, "dv", c->dv);
  fm_json_int(j, "tiles", c->tiles);
  for (int k = 0; k < FM_TILE_NCLASSES; k++) fm_json_int(j, fm_tile_class_name(k), c->tiles_class[k]);
  fm_json_int(j, "row_blocks", c->row_blocks);
  fm_json_int(j, "boundaries", c->boundaries);
  fm_json_double(j, "rho", c->rho);
  fm_json_double(j, "flops_useful", c->flops_useful);
  fm_json_int(j, "mask_bytes", c->mask_bytes);
  fm_json_object(j, "variants");
  for (int v = 0; v < FM_LR_NVARIANTS; v++) fm_lr_work_json(j, fm_lr_variant_name(v), &c->work[v], 1);
  fm_json_end(j);
  fm_json_object(j, "estimate");
  fm_json_double(j, "boundaries_per_chunk", e.m);
  fm_json_double(j, "rho_estimate", e.rho_estimate);
  fm_json_double(j, "rho_exact", e.rho_exact);
  fm_json_double(j, "visited_estimate", e.visited_estimate);
  fm_json_double(j, "visited_exact", e.visited_exact);
  fm_json_end(j);
  fm_json_end(j);
}

static void summary_json(fm_json *j, const fm_lr_trace *t, const fm_lr_counts *c) {
  fm_json_init(j, 1);
  fm_json_object(j, NULL);
  fm_json_string(j, "format", FM_TRACE_FORMAT);
  fm_json_int(j, "version", FM_TRACE_VERSION);
  fm_json_string(j, "kind", LR_KIND);
  fm_json_string(j, "device", t->device);
  fm_json_string(j, "variant", t->variant);
  fm_json_string(j, "docs_source", t->docs_source);
  fm_json_int(j, "tokens", t->tokens);
  fm_json_int(j, "chunk", t->chunk);
  fm_json_int(j, "sub", t->sub);
  fm_json_int(j, "nchunks", t->nchunks);
  fm_json_int(j, "ndocs", t->ndocs);
  fm_json_int(j, "record_heads", t->record_heads);
  fm_json_int(j, "shown_chunk", t->shown_chunk);
  fm_json_object(j, "tile_classes");
  for (int k = 0; k < FM_TILE_NCLASSES; k++) fm_json_int(j, fm_tile_class_name(k), k);
  fm_json_end(j);
  if (c) counts_json(j, c);
  fm_json_object(j, "files");
  fm_json_string(j, "tile_class", "tile_class.npy");
  fm_json_string(j, "tile_cycles", t->tile_cycles ? "tile_cycles.npy" : NULL);
  fm_json_string(j, "cu_seqlens", "cu_seqlens.npy");
  fm_json_end(j);
  fm_json_end(j);
}

static fm_status trace_shape_check(const fm_lr_trace *t, fm_err *err) {
  fm_status st = fm_lr_docs_check(t->cu_seqlens, t->ndocs, t->tokens, err);
  if (st == FM_OK) st = fm_lr_shape_check(t->tokens, t->chunk, t->sub, err);
  if (st != FM_OK) return st;
  if (t->nchunks != fm_lr_nchunks(t->tokens, t->chunk) || t->record_heads < 1 || !t->tile_class)
    return fm_fail(err, FM_EINVAL, "linrnn trace: %d chunks, %d record heads: expected %d chunks and >= 1",
                   t->nchunks, t->record_heads, fm_lr_nchunks(t->tokens, t->chunk));
  if (t->shown_chunk < 0 || t->shown_chunk >= t->nchunks)
    return fm_fail(err, FM_EINVAL, "linrnn trace: shown chunk %d: expected 0 to %d", t->shown_chunk,
                   t->nchunks - 1);
  return FM_OK;
}

fm_status fm_lr_trace_write(const char *dir, const fm_lr_trace *t, const fm_lr_counts *counts,
                            fm_err *err) {
  fm_status st = trace_shape_check(t, err);
  if (st != FM_OK) return st;
  fm_trace_writer w;
  if ((st = fm_trace_begin(&w, dir, err)) != FM_OK) return st;
  int64_t n = t->chunk / t->sub, shape[4] = {t->record_heads, t->nchunks, n, n}, ncu = t->ndocs + 1;
  char path[4200];
  fm_json j;
  summary_json(&j, t, counts);
  if (j.oom) st = fm_fail(err, FM_ENOMEM, "out of memory writing summary.json");
  if (st == FM_OK)
    st = fm_npy_save(fm_trace_file(&w, "tile_class.npy", path, sizeof path), FM_DT_U8, 4, shape,
                     t->tile_class, err);
  if (st == FM_OK && t->tile_cycles)
    st = fm_npy_save(fm_trace_file(&w, "tile_cycles.npy", path, sizeof path), FM_DT_I64, 4, shape,
                     t->tile_cycles, err);
  if (st == FM_OK)
    st = fm_npy_save(fm_trace_file(&w, "cu_seqlens.npy", path, sizeof path), FM_DT_I32, 1, &ncu,
                     t->cu_seqlens, err);
  if (st == FM_OK)
    st = fm_write_file_atomic(fm_trace_file(&w, "summary.json", path, sizeof path), j.buf, j.len, err);
  fm_json_free(&j);
  if (st != FM_OK) {
    fm_trace_abort(&w);
    return st;
  }
  return fm_trace_commit(&w, err);
}

/* Loads DIR/name into *data, checking its dtype and shape. */
static fm_status load_array(const char *dir, const char *name, fm_dtype dt, int ndim,
                            const int64_t *shape, void **data, fm_err *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  fm_npy_header h;
  fm_status st = fm_npy_load(path, &h, data, INT64_MAX, err);
  if (st != FM_OK) return st;
  int ok = h.dtype == dt && h.ndim == ndim;
  for (int k = 0; ok && k < ndim; k++) ok = h.shape[k] == shape[k];
  if (ok) return FM_OK;
  free(*data);
  *data = NULL;
  return fm_fail(err, FM_EFORMAT, "%s: expected %s of %d dimensions as summary.json describes", path,
                 fm_dtype_descr(dt), ndim);
}

/* The summary's numbers into t; FM_EFORMAT naming the first one missing. */
static fm_status read_summary(const char *dir, const fm_jv *r, fm_lr_trace *t, int *has_cycles,
                              fm_err *err) {
  const char *fmt = fm_jv_string(fm_jv_get(r, "format")), *kind = fm_jv_string(fm_jv_get(r, "kind"));
  if (!fmt || strcmp(fmt, FM_TRACE_FORMAT) || !kind || strcmp(kind, LR_KIND))
    return fm_fail(err, FM_EFORMAT, "%s/summary.json: not a linrnn trace (format %s, kind %s)", dir,
                   fmt ? fmt : "none", kind ? kind : "none");
  if (fm_jv_int64(fm_jv_get(r, "version"), 0) > FM_TRACE_VERSION)
    return fm_fail(err, FM_EFORMAT, "%s/summary.json: version newer than %d", dir, FM_TRACE_VERSION);
  static const char *const keys[] = {"tokens", "chunk", "sub", "nchunks", "ndocs", "record_heads", "shown_chunk"};
  int64_t v[7];
  for (int k = 0; k < 7; k++)
    if (fm_jv_int_in(fm_jv_get(r, keys[k]), 0, FM_MAX_SEQLEN, &v[k]) != 0)
      return fm_fail(err, FM_EFORMAT, "%s/summary.json: \"%s\" missing or out of range", dir, keys[k]);
  t->tokens = v[0];
  t->chunk = (int32_t)v[1], t->sub = (int32_t)v[2], t->nchunks = (int32_t)v[3];
  t->ndocs = (int32_t)v[4], t->record_heads = (int32_t)v[5], t->shown_chunk = (int32_t)v[6];
  const char *s[3] = {fm_jv_string(fm_jv_get(r, "device")), fm_jv_string(fm_jv_get(r, "variant")),
                      fm_jv_string(fm_jv_get(r, "docs_source"))};
  snprintf(t->device, sizeof t->device, "%s", s[0] ? s[0] : "");
  snprintf(t->variant, sizeof t->variant, "%s", s[1] ? s[1] : "");
  snprintf(t->docs_source, sizeof t->docs_source, "%s", s[2] ? s[2] : "");
  *has_cycles = fm_jv_string(fm_jv_get(fm_jv_get(r, "files"), "tile_cycles")) != NULL;
  fm_status st = fm_lr_shape_check(t->tokens, t->chunk, t->sub, err);
  if (st == FM_OK && (t->nchunks != fm_lr_nchunks(t->tokens, t->chunk) || t->record_heads < 1 ||
                      t->ndocs < 1 || t->shown_chunk >= t->nchunks))
    st = fm_fail(err, FM_EFORMAT, "%s/summary.json: inconsistent chunks, heads, documents or shown chunk", dir);
  return st;
}

fm_status fm_lr_trace_load(const char *dir, fm_lr_trace *t, fm_err *err) {
  memset(t, 0, sizeof *t);
  char path[4200];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  fm_jdoc *doc = NULL;
  fm_status st = fm_jdoc_load(path, &doc, err);
  int has_cycles = 0;
  if (st == FM_OK) st = read_summary(dir, fm_jdoc_root(doc), t, &has_cycles, err);
  fm_jdoc_free(doc);
  int64_t n = t->sub > 0 ? t->chunk / t->sub : 0, shape[4] = {t->record_heads, t->nchunks, n, n};
  int64_t ncu = (int64_t)t->ndocs + 1;
  if (st == FM_OK) st = load_array(dir, "tile_class.npy", FM_DT_U8, 4, shape, (void **)&t->tile_class, err);
  if (st == FM_OK && has_cycles)
    st = load_array(dir, "tile_cycles.npy", FM_DT_I64, 4, shape, (void **)&t->tile_cycles, err);
  if (st == FM_OK) st = load_array(dir, "cu_seqlens.npy", FM_DT_I32, 1, &ncu, (void **)&t->cu_seqlens, err);
  fm_err why;
  if (st == FM_OK && fm_lr_docs_check(t->cu_seqlens, t->ndocs, t->tokens, &why) != FM_OK)
    st = fm_fail(err, FM_EFORMAT, "%s/cu_seqlens.npy: %s", dir, why.msg);
  for (int64_t i = 0; st == FM_OK && i < shape[0] * shape[1] * n * n; i++)
    if (t->tile_class[i] >= FM_TILE_NCLASSES)
      st = fm_fail(err, FM_EFORMAT, "%s/tile_class.npy: element %lld is %d, not a tile class", dir,
                   (long long)i, t->tile_class[i]);
  if (st != FM_OK) fm_lr_trace_free(t);
  return st;
}

void fm_lr_trace_free(fm_lr_trace *t) {
  if (!t) return;
  free(t->cu_seqlens);
  free(t->tile_class);
  free(t->tile_cycles);
  t->cu_seqlens = NULL;
  t->tile_class = NULL;
  t->tile_cycles = NULL;
}
