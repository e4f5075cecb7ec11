#define _POSIX_C_SOURCE 200809L
#include "fm_trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fm_fileio.h"
#include "fm_npy.h"

void fm_analysis_init(fm_analysis *a, const fm_colmask *m, const char *family, const char *params,
                      const char *docs_source, int64_t batch, int64_t heads, int32_t br,
                      int32_t bc) {
  const int64_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  *a = (fm_analysis){.family = family, .params = params, .docs_source = docs_source, .seqlen_q = sq,
                     .seqlen_k = sk, .batch = batch, .heads = heads, .causal = fm_colmask_causal(m),
                     .br = br, .bc = bc, .tr = (int32_t)((sq + br - 1) / br),
                     .tc = (int32_t)((sk + bc - 1) / bc), .form = fm_colmask_smallest_form(m)};
  fm_mask_bytes_compute(a->seqlen_q, a->seqlen_k, fm_colmask_nsets(m), a->form, bc, &a->bytes);
}

void fm_tile_counts_json(const fm_analysis *a, fm_json *j) {
  fm_json_int(j, "br", a->br);
  fm_json_int(j, "bc", a->bc);
  fm_json_int(j, "tiles_rows", a->tr);
  fm_json_int(j, "tiles_cols", a->tc);
  fm_json_int(j, "tiles_total", a->counts.total);
  fm_json_int(j, "tiles_masked", a->counts.minmax[FM_TILE_MASKED]);
  fm_json_int(j, "tiles_partial", a->counts.minmax[FM_TILE_PARTIAL]);
  fm_json_int(j, "tiles_unmasked", a->counts.minmax[FM_TILE_UNMASKED]);
  fm_json_double(j, "sparsity", a->counts.sparsity);
  fm_json_object(j, "exact");
  for (int c = 0; c < FM_TILE_NCLASSES; c++) fm_json_int(j, fm_tile_class_name(c), a->counts.exact[c]);
  fm_json_double(j, "sparsity", a->counts.sparsity_exact);
  fm_json_int(j, "partial_but_masked", a->counts.partial_but_masked);
  fm_json_int(j, "partial_but_unmasked", a->counts.partial_but_unmasked);
  fm_json_end(j);
}

void fm_analysis_json(const fm_analysis *a, fm_json *j) {
  fm_json_string(j, "family", a->family);
  fm_json_string(j, "params", a->params);
  fm_json_string(j, "docs_source", a->docs_source);
  fm_json_int(j, "seqlen", a->seqlen_k);
  fm_json_int(j, "seqlen_q", a->seqlen_q);
  fm_json_int(j, "seqlen_k", a->seqlen_k);
  fm_json_int(j, "batch", a->batch);
  fm_json_int(j, "heads", a->heads);
  fm_json_int(j, "mask_sets", a->bytes.sets);
  fm_json_bool(j, "causal", a->causal);
  fm_json_string(j, "form", a->form == FM_FORM_NONE ? NULL : fm_form_name(a->form));
  fm_tile_counts_json(a, j);
  fm_json_object(j, "bytes");
  fm_json_int(j, "dense", a->bytes.dense);
  fm_json_int(j, "block_mask", a->bytes.block_mask);
  fm_json_int(j, "block_mask_block", FM_FLEX_BLOCK);
  fm_json_int(j, "intervals", a->bytes.intervals);
  fm_json_int(j, "interval_vectors", a->bytes.interval_vectors);
  fm_json_int(j, "tile_bounds", a->bytes.tile_bounds);
  fm_json_end(j);
  fm_json_object(j, "tile_classes");
  for (int c = 0; c < FM_TILE_NCLASSES; c++) fm_json_int(j, fm_tile_class_name(c), c);
  fm_json_end(j);
}

fm_status fm_trace_begin(fm_trace_writer *w, const char *dir, fm_err *err) {
  memset(w, 0, sizeof *w);
  w->stage_slot = w->dir_slot = -1;
  if (strlen(dir) >= sizeof w->dir - 1)
    return fm_fail(err, FM_EINVAL, "%.200s...: path too long", dir);
  snprintf(w->dir, sizeof w->dir, "%s", dir);
  w->created_dir = access(dir, F_OK) != 0;
  fm_status st = fm_mkdir_p(dir, err);
  if (st != FM_OK) return st;
  if (w->created_dir) w->dir_slot = fm_cleanup_add(dir, FM_CLEANUP_EMPTY_DIR);
  fm_sweep_stale(dir, ".staging.", 1); /* left by a killed writer */
  snprintf(w->stage, sizeof w->stage, "%s/.staging.%ld.XXXXXX", dir, (long)getpid());
  if (!fm_mkdtemp_registered(w->stage, &w->stage_slot)) {
    int saved = errno;
    w->stage[0] = 0;
    fm_trace_abort(w);
    return fm_fail(err, FM_EIO, "%s: cannot write into the folder: %s", dir, strerror(saved));
  }
  return FM_OK;
}

const char *fm_trace_file(fm_trace_writer *w, const char *name, char *buf, size_t cap) {
  int known = 0;
  for (int i = 0; i < w->nfiles; i++) known |= strcmp(w->files[i], name) == 0;
  if (!known && w->nfiles < 16) snprintf(w->files[w->nfiles++], sizeof w->files[0], "%s", name);
  snprintf(buf, cap, "%s/%s", w->stage, name);
  return buf;
}

/* Removes the staging folder and whatever is still in it. */
static void remove_stage(fm_trace_writer *w) {
  char p[4200];
  for (int i = 0; i < w->nfiles; i++) {
    snprintf(p, sizeof p, "%s/%s", w->stage, w->files[i]);
    unlink(p);
  }
  if (w->stage[0]) rmdir(w->stage);
  w->stage[0] = 0;
  w->nfiles = 0;
  fm_cleanup_forget(w->stage_slot);
  w->stage_slot = -1;
}

/* Moves the staged files into the target. summary.json goes last and only when
 * every other file moved: readers start from it, so they never see a new
 * summary beside old arrays. Each move is an atomic rename; a failure stops
 * before the summary, leaving the old summary (or none) in place. Every
 * target member is checked first (fm_output_check, no links followed), so a
 * refusal moves nothing. */
fm_status fm_trace_commit(fm_trace_writer *w, fm_err *err) {
  char from[4200], to[4200];
  fm_status st = FM_OK;
  for (int i = 0; i < w->nfiles && st == FM_OK; i++) {
    snprintf(to, sizeof to, "%s/%s", w->dir, w->files[i]);
    st = fm_output_check(to, FM_OUT_NOFOLLOW, err);
  }
  for (int pass = 0; pass < 2 && st == FM_OK; pass++)
    for (int i = 0; i < w->nfiles && st == FM_OK; i++) {
      if ((strcmp(w->files[i], "summary.json") == 0) != (pass == 1)) continue;
      snprintf(from, sizeof from, "%s/%s", w->stage, w->files[i]);
      snprintf(to, sizeof to, "%s/%s", w->dir, w->files[i]);
      if (access(from, F_OK) != 0) continue;
      if (rename(from, to) != 0)
        st = fm_fail(err, FM_EIO, "%s: cannot move into place: %s", to, strerror(errno));
    }
  remove_stage(w);
  fm_cleanup_forget(w->dir_slot);
  w->dir_slot = -1;
  if (st != FM_OK && w->created_dir) rmdir(w->dir);
  return st;
}

void fm_trace_abort(fm_trace_writer *w) {
  remove_stage(w);
  if (w->created_dir) rmdir(w->dir);
  w->created_dir = 0;
  fm_cleanup_forget(w->dir_slot);
  w->dir_slot = -1;
}

fm_status fm_trace_write_columns(const char *path, const fm_colmask *m, fm_err *err) {
  int64_t sk = fm_colmask_sk(m), ns = fm_colmask_nsets(m);
  int64_t shape[4] = {fm_colmask_nb(m), fm_colmask_nh(m), sk, 4};
  fm_npy_writer *w;
  fm_status st = fm_npy_writer_open(path, FM_DT_I32, 4, shape, &w, err);
  if (st != FM_OK) return st;
  int32_t row[4 * 1024];
  for (int64_t s = 0; s < ns && st == FM_OK; s++)
    for (int64_t j0 = 0; j0 < sk && st == FM_OK; j0 += 1024) {
      int64_t n = sk - j0 < 1024 ? sk - j0 : 1024;
      for (int k = 0; k < 4; k++) {
        const int32_t *v = fm_colmask_cvec(m, (int32_t)s, (fm_vec)k);
        for (int64_t q = 0; q < n; q++) row[q * 4 + k] = v[j0 + q];
      }
      st = fm_npy_writer_write(w, row, n * 4, err);
    }
  fm_status cs = fm_npy_writer_close(w, st == FM_OK, st == FM_OK ? err : NULL);
  return st != FM_OK ? st : cs;
}

fm_status fm_trace_write_analysis(const char *dir, const fm_analysis *a, const fm_colmask *m,
                                  const uint8_t *classes, const uint8_t *exact, fm_err *err) {
  fm_trace_writer w;
  fm_status st = fm_trace_begin(&w, dir, err);
  if (st != FM_OK) return st;
  char path[4200];
  int64_t shape[3] = {a->bytes.sets, a->tr, a->tc};
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "format", FM_TRACE_FORMAT);
  fm_json_int(&j, "version", FM_TRACE_VERSION);
  fm_json_string(&j, "kind", "analysis");
  fm_json_string(&j, "device", "cpu");
  fm_analysis_json(a, &j);
  fm_json_object(&j, "files");
  fm_json_string(&j, "tiles", "tiles.npy");
  fm_json_string(&j, "tiles_exact", "tiles_exact.npy");
  fm_json_string(&j, "columns", "columns.npy");
  fm_json_end(&j);
  fm_json_end(&j);
  if (j.oom) st = fm_fail(err, FM_ENOMEM, "out of memory writing summary.json");
  if (st == FM_OK)
    st = fm_npy_save(fm_trace_file(&w, "tiles.npy", path, sizeof path), FM_DT_U8, 3, shape,
                     classes, err);
  if (st == FM_OK)
    st = fm_npy_save(fm_trace_file(&w, "tiles_exact.npy", path, sizeof path), FM_DT_U8, 3, shape,
                     exact, err);
  if (st == FM_OK) st = fm_trace_write_columns(fm_trace_file(&w, "columns.npy", path, sizeof path), m, err);
  if (st == FM_OK)
    st = fm_write_file_atomic(fm_trace_file(&w, "summary.json", path, sizeof path), j.buf, j.len,
                              err);
  fm_json_free(&j);
  if (st != FM_OK) {
    fm_trace_abort(&w);
    return st;
  }
  return fm_trace_commit(&w, err);
}
