/* viz_load.c — what `fmsim view` and `fmsim render` can open: a trace folder
 * (fm_trace.h: summary.json read with fm_jsonr.h, tiles.npy, tiles_exact.npy,
 * columns.npy, optional tile_cycles.npy; a run trace's backward, when its
 * summary has one, in tiles_bwd.npy, tiles_exact_bwd.npy and optional
 * tile_cycles_bwd.npy at its own tile), a dense mask .npy (any dtype of
 * fm_dense.h, [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk], streamed one row at a
 * time: converted once to intervals, or, when no interval form holds it,
 * kept as every masked run of every column so that it is drawn exactly) or
 * an interval .npy (Paddle layout, fm_intervals_io.h).
 * Every failure is one line naming the file and what was expected. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fm_dense.h"
#include "fm_forms.h"
#include "fm_intervals_io.h"
#include "fm_jsonr.h"
#include "fm_npy.h"
#include "fm_trace.h"
#include "viz_internal.h"

void viz_trace_free(viz_trace *t) {
  for (int p = 0; p < 2; p++) {
    free(t->pass[p].tiles);
    free(t->pass[p].tiles_exact);
    free(t->pass[p].cycles);
  }
  memset(t, 0, sizeof *t);
}

/* ---- dense masks ------------------------------------------------------------ */

void viz_source_free(viz_source *src) {
  viz_trace_free(&src->trace);
  fm_colmask_destroy(src->mask);
  fm_dense_result_destroy(src->misfit);
  memset(src, 0, sizeof *src);
}

/* A dense mask: its intervals in the smallest form that holds it, or, when
 * none does, every run kept (src->misfit) and the tightest fitting sub-mask. */
static fm_status load_dense(const char *path, const viz_source_opts *vo, viz_source *src,
                            fm_err *err) {
  fm_dense_opts o = {.masked_true = vo->true_masked, .keep_intervals = 1, .reading = vo->reading,
                     .keep_all_runs = 1};
  fm_dense_result *r = NULL;
  fm_status st = fm_dense_check_file(path, &o, &r, err);
  if (st != FM_OK) return st;
  const fm_dense_report *rep = fm_dense_result_report(r);
  char sets[64] = "";
  if (rep->nsets > 1)
    snprintf(sets, sizeof sets, ", B \xC3\x97 H = %lld \xC3\x97 %lld", (long long)rep->batch,
             (long long)rep->heads);
  if (rep->form != FM_FORM_NONE) {
    st = fm_dense_result_to_colmask(r, FM_FORM_NONE, &src->mask, err);
    snprintf(src->what, sizeof src->what, "dense %s mask%s, %s", fm_dense_dtype_name(rep->dtype),
             sets, fm_form_name(rep->form));
    fm_dense_result_destroy(r);
  } else {
    st = fm_dense_result_subset_colmask(r, &src->mask, err);
    snprintf(src->what, sizeof src->what, "dense %s mask%s, no interval form",
             fm_dense_dtype_name(rep->dtype), sets);
    if (st == FM_OK) src->misfit = r;
    else fm_dense_result_destroy(r);
  }
  if (st != FM_OK) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
    return fm_fail(err, st, "%s: %s", path, msg);
  }
  return FM_OK;
}

/* ---- traces ------------------------------------------------------------------ */

/* An integer member written as one (no fraction or exponent) in [lo, hi]. */
static fm_status json_int(const fm_jv *root, const char *file, const char *key, int64_t lo,
                          int64_t hi, int64_t *out, int required, fm_err *err) {
  const fm_jv *v = fm_jv_get(root, key);
  if (!v) {
    if (!required) return FM_OK;
    return fm_fail(err, FM_EFORMAT, "%s: member \"%s\" is missing", file, key);
  }
  if (!fm_jv_is_integer(v))
    return fm_fail(err, FM_EFORMAT, "%s: \"%s\" must be an integer", file, key);
  int64_t x = fm_jv_int64(v, 0);
  if (x < lo || x > hi)
    return fm_fail(err, FM_ERANGE, "%s: \"%s\" = %lld is outside %lld..%lld", file, key,
                   (long long)x, (long long)lo, (long long)hi);
  *out = x;
  return FM_OK;
}

static void json_str(const fm_jv *root, const char *key, char *buf, size_t cap) {
  const char *v = fm_jv_string(fm_jv_get(root, key));
  snprintf(buf, cap, "%s", v ? v : "");
}

/* Loads a uint8 tile array of pass tt, [sets, Tr, Tc] (analysis traces) or
 * [B, H, Tr, Tc] (run traces), with values 0..2; *by_pair says which. */
static fm_status load_tiles(const char *path, const viz_trace *t, const viz_trace_tiles *tt,
                            uint8_t **out, int *by_pair, fm_err *err) {
  fm_npy_header h;
  void *data = NULL;
  fm_status st = fm_npy_load(path, &h, &data, FM_MAX_ALLOC_BYTES, err);
  if (st != FM_OK) return st;
  int sets_shape = h.ndim == 3 && h.shape[0] == t->sets && h.shape[1] == tt->tr && h.shape[2] == tt->tc;
  int pair_shape = h.ndim == 4 && h.shape[0] == t->batch && h.shape[1] == t->heads &&
                   h.shape[2] == tt->tr && h.shape[3] == tt->tc;
  if (h.dtype != FM_DT_U8 || (!sets_shape && !pair_shape)) {
    free(data);
    return fm_fail(err, FM_EFORMAT,
                   "%s: expected uint8 [sets=%lld, Tr=%d, Tc=%d] or [B=%lld, H=%lld, Tr, Tc], got %s "
                   "with %d dimensions", path, (long long)t->sets, tt->tr, tt->tc, (long long)t->batch,
                   (long long)t->heads, fm_dtype_descr(h.dtype), h.ndim);
  }
  const uint8_t *c = data;
  for (int64_t i = 0; i < h.count; i++)
    if (c[i] >= FM_TILE_NCLASSES) {
      int bad = c[i];
      free(data);
      return fm_fail(err, FM_ERANGE, "%s: tile class %d at flat index %lld (expected 0..2)", path, bad,
                     (long long)i);
    }
  *out = data;
  *by_pair = pair_shape && !sets_shape;
  return FM_OK;
}

/* The optional cycles of pass tt: int64 [B, H, Tr, Tc], none negative. */
static fm_status load_cycles(const char *path, const viz_trace *t, viz_trace_tiles *tt, fm_err *err) {
  struct stat sb;
  fm_npy_header h;
  void *data = NULL;
  if (stat(path, &sb) != 0) return FM_OK;
  fm_status st = fm_npy_load(path, &h, &data, FM_MAX_ALLOC_BYTES, err);
  if (st != FM_OK) return st;
  if (h.dtype != FM_DT_I64 || h.ndim != 4 || h.shape[0] != t->batch || h.shape[1] != t->heads ||
      h.shape[2] != tt->tr || h.shape[3] != tt->tc) {
    free(data);
    return fm_fail(err, FM_EFORMAT, "%s: expected int64 [B=%lld, H=%lld, Tr=%d, Tc=%d], got %s with %d dimensions",
                   path, (long long)t->batch, (long long)t->heads, tt->tr, tt->tc,
                   fm_dtype_descr(h.dtype), h.ndim);
  }
  tt->cycles = data;
  for (int64_t i = 0; i < h.count; i++)
    if (tt->cycles[i] < 0)
      return fm_fail(err, FM_ERANGE, "%s: negative cycle count %lld at flat index %lld", path,
                     (long long)tt->cycles[i], (long long)i);
  return FM_OK;
}

/* The arrays of one pass at its tile (br, bc set): tiles, tiles_exact, cycles
 * (suffix "" or "_bwd"). */
static fm_status load_pass(const char *dir, const char *suffix, viz_trace *t, viz_trace_tiles *tt,
                           fm_err *err) {
  char path[4200];
  int exact_by_pair = 0;
  tt->tr = (int32_t)((t->seqlen_q + tt->br - 1) / tt->br);
  tt->tc = (int32_t)((t->seqlen_k + tt->bc - 1) / tt->bc);
  snprintf(path, sizeof path, "%s/tiles%s.npy", dir, suffix);
  fm_status st = load_tiles(path, t, tt, &tt->tiles, &tt->tiles_by_pair, err);
  if (st == FM_OK) {
    snprintf(path, sizeof path, "%s/tiles_exact%s.npy", dir, suffix);
    st = load_tiles(path, t, tt, &tt->tiles_exact, &exact_by_pair, err);
  }
  if (st == FM_OK && exact_by_pair != tt->tiles_by_pair)
    st = fm_fail(err, FM_EFORMAT, "%s/tiles%s.npy and tiles_exact%s.npy have different shapes", dir,
                 suffix, suffix);
  snprintf(path, sizeof path, "%s/tile_cycles%s.npy", dir, suffix);
  if (st == FM_OK) st = load_cycles(path, t, tt, err);
  return st;
}

/* The backward's tile from summary.json's "backward" object (0 x 0 when the
 * trace has none: null or absent). */
static fm_status backward_tile(const fm_jv *root, const char *path, viz_trace_tiles *tt,
                               fm_err *err) {
  const fm_jv *b = fm_jv_get(root, "backward");
  int64_t br = 0, bc = 0;
  if (fm_jv_type_of(b) != FM_JV_OBJECT) return FM_OK;
  fm_status st = json_int(b, path, "br", 1, 65536, &br, 1, err);
  if (st == FM_OK) st = json_int(b, path, "bc", 1, 65536, &bc, 1, err);
  tt->br = (int32_t)br;
  tt->bc = (int32_t)bc;
  return st;
}

fm_status viz_load_trace(const char *dir, viz_trace *t, fm_colmask **mask, fm_err *err) {
  memset(t, 0, sizeof *t);
  *mask = NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  fm_jdoc *doc = NULL;
  fm_status st = fm_jdoc_load(path, &doc, err); /* one line: "cannot open ..." or "PATH:L:C: ..." */
  if (st != FM_OK) return st;
  const fm_jv *root = fm_jdoc_root(doc);
  const char *fmt = fm_jv_string(fm_jv_get(root, "format"));
  int64_t version = 0, sq = 0, sk = 0, br = 0, bc = 0, causal = 0, hd = 0;
  if (fm_jv_type_of(root) != FM_JV_OBJECT)
    st = fm_fail(err, FM_EFORMAT, "%s: expected a JSON object", path);
  else if (!fmt || strcmp(fmt, FM_TRACE_FORMAT) != 0)
    st = fm_fail(err, FM_EFORMAT, "%s: \"format\" is not \"%s\"; not an fmsim trace", path,
                 FM_TRACE_FORMAT);
  if (st == FM_OK) st = json_int(root, path, "version", 1, 1 << 30, &version, 1, err);
  if (st == FM_OK && version > FM_TRACE_VERSION)
    st = fm_fail(err, FM_EUNSUPPORTED, "%s: trace format version %lld is newer than this fmsim reads (%d)",
                 path, (long long)version, FM_TRACE_VERSION);
  if (st == FM_OK) st = json_int(root, path, "seqlen_q", 1, FM_MAX_SEQLEN, &sq, 1, err);
  if (st == FM_OK) st = json_int(root, path, "seqlen_k", 1, FM_MAX_SEQLEN, &sk, 1, err);
  if (st == FM_OK) st = json_int(root, path, "br", 1, 65536, &br, 1, err);
  if (st == FM_OK) st = json_int(root, path, "bc", 1, 65536, &bc, 1, err);
  if (st == FM_OK) st = json_int(root, path, "head_dim", 1, 4096, &hd, 0, err);
  const fm_jv *kernel = fm_jv_get(root, "kernel"); /* run traces: "kernel": {"head_dim": D} */
  if (st == FM_OK && fm_jv_type_of(kernel) == FM_JV_OBJECT)
    st = json_int(kernel, path, "head_dim", 0, 4096, &hd, 0, err);
  t->batch = t->heads = 1;
  if (st == FM_OK) st = json_int(root, path, "batch", 1, 1 << 20, &t->batch, 0, err);
  if (st == FM_OK) st = json_int(root, path, "heads", 1, 1 << 20, &t->heads, 0, err);
  if (st == FM_OK) {
    const fm_jv *c = fm_jv_get(root, "causal");
    if (fm_jv_type_of(c) != FM_JV_BOOL)
      st = fm_fail(err, FM_EFORMAT, "%s: \"causal\" must be true or false", path);
    else causal = fm_jv_bool(c, 0);
  }
  if (st == FM_OK) st = backward_tile(root, path, &t->pass[VIZ_BWD], err);
  if (st == FM_OK) {
    json_str(root, "family", t->family, sizeof t->family);
    json_str(root, "params", t->params, sizeof t->params);
    json_str(root, "device", t->device, sizeof t->device);
  }
  fm_jdoc_free(doc);
  if (st != FM_OK) return st;
  t->seqlen_q = sq;
  t->seqlen_k = sk;
  t->causal = (int)causal;
  t->pass[VIZ_FWD].br = (int32_t)br;
  t->pass[VIZ_FWD].bc = (int32_t)bc;
  t->head_dim = (int32_t)hd;

  /* columns.npy: int32 [nb, nh, Sk, 4], read by the one interval loader */
  snprintf(path, sizeof path, "%s/columns.npy", dir);
  fm_colmask *m = NULL;
  fm_intervals_opts io = {.causal = (int)causal, .sq = sq, .strict = 1, .four_vectors = 1};
  st = fm_intervals_load(path, &io, &m, NULL, err);
  if (st != FM_OK) return st;
  int64_t nb = fm_colmask_nb(m), nh = fm_colmask_nh(m), msk = fm_colmask_sk(m);
  if (msk != sk || (nb != 1 && nb != t->batch) || (nh != 1 && nh != t->heads)) {
    fm_colmask_destroy(m); /* (the message uses only what was read before) */
    return fm_fail(err, FM_EFORMAT,
                   "%s: %lld x %lld vector sets of Sk = %lld do not fit Sk = %lld, batch %lld x "
                   "heads %lld", path, (long long)nb, (long long)nh, (long long)msk, (long long)sk,
                   (long long)t->batch, (long long)t->heads);
  }
  t->sets = nb * nh;

  st = load_pass(dir, "", t, &t->pass[VIZ_FWD], err);
  if (st == FM_OK && t->pass[VIZ_BWD].br > 0) st = load_pass(dir, "_bwd", t, &t->pass[VIZ_BWD], err);
  if (st != FM_OK) {
    fm_colmask_destroy(m);
    viz_trace_free(t);
    return st;
  }
  *mask = m;
  return FM_OK;
}

fm_status viz_load_source(const char *path, const viz_source_opts *o, viz_source *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  struct stat sb;
  if (stat(path, &sb) != 0) return fm_fail(err, FM_EIO, "%s: cannot open: %s", path, strerror(errno));
  fm_status st;
  if (S_ISDIR(sb.st_mode)) {
    out->kind = "trace";
    st = viz_load_trace(path, &out->trace, &out->mask, err);
    out->has_trace = st == FM_OK;
    if (st == FM_OK)
      snprintf(out->what, sizeof out->what, "trace, %.60s", out->trace.device[0] ? out->trace.device : "cpu");
    return st;
  }
  fm_npy_header h;
  st = fm_npy_read_header_path(path, &h, err);
  if (st != FM_OK) return st;
  /* int32/int64 [B, H, Sk, k] with k = 1, 2, 4 is an interval file; the
   * causal flag is not stored, but k = 1 can only be causal-1 and k = 4
   * only bidir-4 */
  if (fm_intervals_header_fits(&h)) {
    out->kind = "intervals";
    fm_intervals_opts io = {.causal = o->causal, .causal_from_k = !o->causal_given,
                            .strict = o->strict};
    st = fm_intervals_load(path, &io, &out->mask, &out->note, err);
    if (st == FM_OK)
      snprintf(out->what, sizeof out->what, "Paddle intervals, %s",
               fm_form_name(fm_colmask_smallest_form(out->mask)));
    return st;
  }
  out->kind = "dense mask";
  return load_dense(path, o, out, err);
}
