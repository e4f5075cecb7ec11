#include "fm_run_trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_fileio.h"
#include "fm_npy.h"

/* Named numbers of a JSON object, written in order. */
typedef struct {
  const char *key;
  int kind; /* 'i' integer, 'd' double, 'b' boolean */
  int64_t i;
  double d;
} json_number;

static void json_fields(fm_json *j, const json_number *n, size_t count) {
  for (size_t i = 0; i < count; i++)
    if (n[i].kind == 'i') fm_json_int(j, n[i].key, n[i].i);
    else if (n[i].kind == 'b') fm_json_bool(j, n[i].key, (int)n[i].i);
    else fm_json_double(j, n[i].key, n[i].d);
}
#define FIELDS(j, ...)                                                                         \
  do {                                                                                         \
    const json_number n_[] = {__VA_ARGS__};                                                    \
    json_fields(j, n_, sizeof n_ / sizeof n_[0]);                                              \
  } while (0)
/* An object `key` holding "source" (when not NULL) and the numbers. */
#define NUMBERS(j, key, source, ...)                                                           \
  do {                                                                                         \
    fm_json_object(j, key);                                                                    \
    if (source) fm_json_string(j, "source", source);                                           \
    FIELDS(j, __VA_ARGS__);                                                                    \
    fm_json_end(j);                                                                            \
  } while (0)
#define I(k, v) {k, 'i', (int64_t)(v), 0.0}
#define B(k, v) {k, 'b', (v) ? 1 : 0, 0.0}
#define D(k, v) {k, 'd', 0, (double)(v)}

static void kernel_stat_json(fm_json *j, const fm_kernel_stat *s) {
  fm_json_object(j, NULL);
  fm_json_string(j, "name", s->name);
  fm_json_double(j, "median_ms", s->median_ms);
  const int32_t *dims[2] = {s->grid, s->block};
  for (int a = 0; a < 2; a++) {
    fm_json_array(j, a ? "block" : "grid");
    for (int d = 0; d < 3; d++) fm_json_int(j, NULL, dims[a][d]);
    fm_json_end(j);
  }
  fm_json_int(j, "registers", s->registers);
  fm_json_int(j, "static_smem", s->static_smem);
  fm_json_int(j, "dynamic_smem", s->dynamic_smem);
  fm_json_end(j);
}

void fm_timing_json(fm_json *j, const char *key, const fm_timing *t) {
  if (!t || !t->source[0]) {
    fm_json_null(j, key);
    return;
  }
  fm_json_object(j, key);
  fm_json_string(j, "source", t->source);
  fm_json_string(j, "note", t->note);
  FIELDS(j, I("warmup", t->warmup), I("reps", t->reps), B("l2_flushed", t->l2_flushed),
         D("median_ms", t->median_ms), D("min_ms", t->min_ms), D("max_ms", t->max_ms),
         D("mean_ms", t->mean_ms), D("events_median_ms", t->events_median_ms),
         D("clock_mhz", t->clock_mhz), D("power_w", t->power_w), D("window_ms", t->window_ms));
  fm_json_array(j, "kernels");
  for (int k = 0; k < t->nkernels && k < FM_TIMING_MAX_KERNELS; k++)
    kernel_stat_json(j, &t->kernels[k]);
  fm_json_end(j);
  fm_json_end(j);
}

void fm_measured_bytes_json(fm_json *j, const char *key, const fm_measured_bytes *mb) {
  if (!mb || !mb->source[0])
    fm_json_null(j, key);
  else
    NUMBERS(j, key, mb->source, B("l2_flushed", mb->l2_flushed), I("ranges", mb->nranges),
            D("dram_read", mb->dram_read), D("dram_write", mb->dram_write),
            D("l2_read_sectors", mb->l2_read_sectors),
            D("l2_read_bytes", 32.0 * mb->l2_read_sectors), D("gpu_time_ns", mb->gpu_time_ns));
}

void fm_traffic_json(fm_json *j, const char *key, const fm_cost *c, const fm_measured_bytes *mb) {
  fm_json_object(j, key);
  fm_json_object(j, "model");
  fm_json_string(j, "source", "model");
  FIELDS(j, I("read", c->bytes_read), I("write", c->bytes_write), I("q", c->bytes_q),
         I("kv", c->bytes_kv), I("vectors", c->bytes_vectors), I("dense_mask", c->bytes_dense_mask),
         I("bounds", c->bytes_bounds), I("prep_read", c->bytes_prep_read),
         I("prep_write", c->bytes_prep_write), I("o", c->bytes_o), I("lse", c->bytes_lse));
  if (c->pass == FM_PASS_BWD)
    FIELDS(j, I("do", c->bytes_do), I("delta", c->bytes_delta),
           I("dq_accum", c->bytes_dq_accum), I("dkdv", c->bytes_dkdv),
           I("rowsum_read", c->bytes_rowsum_read), I("rowsum_write", c->bytes_rowsum_write),
           I("dq_convert", c->bytes_dq_convert), I("dq", c->bytes_dq));
  FIELDS(j, I("unique_read", c->unique_read), I("unique_write", c->unique_write));
  fm_json_end(j);
  fm_measured_bytes_json(j, "measured", mb);
  if (mb && mb->source[0])
    NUMBERS(j, "ratios", NULL,
            D("dram_read_over_unique_read", mb->dram_read / (double)c->unique_read),
            D("dram_write_over_unique_write", mb->dram_write / (double)c->unique_write),
            D("l2_read_over_model_read", 32.0 * mb->l2_read_sectors / (double)c->bytes_read));
  else
    fm_json_null(j, "ratios");
  fm_json_string(j, "measured_note", mb ? mb->note : "no counters: not measured on this device");
  fm_json_end(j);
}

void fm_run_json(const fm_run_info *r, fm_json *j) {
  const fm_cost *c = r->cost;
  const fm_timing *t = r->timing && r->timing->source[0] ? r->timing : NULL;
  const fm_timing *ti =
      r->timing_instrumented && r->timing_instrumented->source[0] ? r->timing_instrumented : NULL;
  fm_json_string(j, "device", r->device);
  fm_json_string(j, "device_note", r->device_note ? r->device_note : "");
  fm_json_object(j, "kernel");
  fm_json_int(j, "head_dim", r->head_dim);
  fm_json_string(j, "variant", fm_variant_name(r->variant));
  fm_json_string(j, "mask_method", fm_mask_method_name(r->mask_method));
  fm_json_string(j, "pass", fm_pass_name(c->pass == FM_PASS_BWD ? FM_PASS_BWD : FM_PASS_FWD));
  fm_json_string(j, "dtype", "bf16");
  fm_json_int(j, "br", r->analysis ? r->analysis->br : 0);
  fm_json_int(j, "bc", r->analysis ? r->analysis->bc : 0);
  fm_json_bool(j, "instrumented", r->instrumented);
  fm_json_end(j);
  fm_timing_json(j, "timing", t);
  fm_timing_json(j, "timing_instrumented", ti);
  fm_json_double(j, "instrumentation_overhead", r->instr_overhead); /* NaN is written null */

  fm_json_object(j, "flops");
  fm_json_string(j, "convention",
                 c->pass == FM_PASS_BWD
                     ? "paper: 2.5*4*B*H*Sq*Sk*D*(1-rho), rho by the min/max rule at the backward's "
                       "tile size; executed: 10*D*rows*cols of the visited tiles"
                     : "paper: 4*B*H*Sq*Sk*D*(1-rho), rho by the min/max rule at the kernel's tile "
                       "size; executed: 4*D*rows*cols of the visited tiles");
  fm_json_double(j, "paper", c->flops_paper);
  fm_json_double(j, "executed", c->flops_executed);
  fm_json_double(j, "full", c->flops_full);
  fm_json_end(j);
  if (t)
    NUMBERS(j, "tflops", t->source, D("paper", fm_cost_tflops(c->flops_paper, t->median_ms)),
            D("executed", fm_cost_tflops(c->flops_executed, t->median_ms)));
  else
    fm_json_null(j, "tflops");
  NUMBERS(j, "model", "model", D("rho", c->rho), I("tiles_total", c->tiles_total),
          I("tiles_visited", c->tiles_visited), I("tiles_elementwise", c->tiles_elementwise));
  fm_traffic_json(j, "traffic", c, r->measured);

  fm_json_object(j, "tiles_record");
  fm_json_string(j, "source", r->gpu_classes ? "kernel" : "cpu");
  if (r->class_mismatches >= 0) fm_json_int(j, "class_mismatches", r->class_mismatches);
  else fm_json_null(j, "class_mismatches");
  fm_json_bool(j, "cycles", r->gpu_cycles != NULL);
  fm_json_int(j, "clock_khz", r->clock_khz);
  fm_json_end(j);
}
#undef I
#undef B
#undef D

/* Writes a (nsets, per_set) array broadcast to [B, H, per_set...]. */
static fm_status write_broadcast(const char *path, fm_dtype t, const fm_colmask *m, int64_t batch,
                                 int64_t heads, int32_t tr, int32_t tc, const void *data,
                                 int per_pair, fm_err *err) {
  int64_t shape[4] = {batch, heads, tr, tc};
  int64_t per_set = (int64_t)tr * tc;
  size_t esz = (size_t)fm_dtype_size(t);
  fm_npy_writer *w;
  fm_status st = fm_npy_writer_open(path, t, 4, shape, &w, err);
  if (st != FM_OK) return st;
  for (int64_t b = 0; b < batch && st == FM_OK; b++)
    for (int64_t h = 0; h < heads && st == FM_OK; h++) {
      int64_t idx = per_pair ? b * heads + h : fm_colmask_set_index(m, (int32_t)b, (int32_t)h);
      st = fm_npy_writer_write(w, (const char *)data + (size_t)(idx * per_set) * esz, per_set, err);
    }
  fm_status cs = fm_npy_writer_close(w, st == FM_OK, st == FM_OK ? err : NULL);
  return st != FM_OK ? st : cs;
}

static void timeline_json(const fm_run_info *r, fm_json *j) {
  const fm_timeline *t = r->timeline;
  fm_json_object(j, NULL);
  fm_json_string(j, "displayTimeUnit", "ns");
  fm_json_array(j, "traceEvents");
  const char *labels[4] = {NULL, NULL, NULL, NULL};
  if (t)
    for (int p = 0; p < 4; p++) labels[p] = t->process_names[p];
  if (!t || !t->n) {
    labels[0] = r->timing ? "no kernel records" : "cpu-simulation: classes and modelled bytes, no timings";
  }
  for (int p = 0; p < 4; p++) {
    if (!labels[p]) continue;
    fm_json_object(j, NULL);
    fm_json_string(j, "name", "process_name");
    fm_json_string(j, "ph", "M");
    fm_json_int(j, "pid", p);
    fm_json_object(j, "args");
    fm_json_string(j, "name", labels[p]);
    fm_json_end(j);
    fm_json_end(j);
  }
  for (int32_t i = 0; t && i < t->n; i++) {
    const fm_timeline_event *e = &t->events[i];
    fm_json_object(j, NULL);
    fm_json_string(j, "name", e->name);
    fm_json_string(j, "ph", "X");
    fm_json_int(j, "pid", e->pid);
    fm_json_int(j, "tid", e->tid);
    fm_json_double(j, "ts", e->ts_us);
    fm_json_double(j, "dur", e->dur_us);
    if (e->cls >= 0 || e->row_tile >= 0 || e->cycles >= 0) {
      fm_json_object(j, "args");
      if (e->cls >= 0 && e->cls < FM_TILE_NCLASSES) fm_json_string(j, "class", fm_tile_class_name(e->cls));
      if (e->row_tile >= 0) fm_json_int(j, "row_tile", e->row_tile);
      if (e->col_tile >= 0) fm_json_int(j, "col_tile", e->col_tile);
      if (e->cycles >= 0) fm_json_int(j, "cycles", e->cycles);
      fm_json_end(j);
    }
    fm_json_end(j);
  }
  fm_json_end(j);
  fm_json_object(j, "metadata");
  fm_json_string(j, "format", FM_TRACE_FORMAT);
  fm_json_int(j, "version", FM_TRACE_VERSION);
  fm_json_string(j, "device", r->device);
  fm_json_end(j);
  fm_json_end(j);
}

fm_status fm_timeline_add_tiles(fm_timeline *t, const uint8_t *classes, const int64_t *cycles,
                                int32_t tr, int32_t tc, int32_t clock_khz, int32_t pid,
                                int32_t max_events, fm_err *err) {
  if (clock_khz <= 0) return FM_OK;
  int64_t add = 0;
  for (int64_t i = 0; i < (int64_t)tr * tc; i++) add += cycles[i] > 0;
  if (add > max_events) add = max_events;
  fm_timeline_event *ev = realloc(t->events, sizeof *ev * (size_t)(t->n + add + 1));
  if (!ev) return fm_fail(err, FM_ENOMEM, "out of memory building the timeline");
  t->events = ev;
  double us_per_cycle = 1000.0 / clock_khz;
  for (int32_t rt = 0; rt < tr && add > 0; rt++) {
    double ts = 0;
    for (int32_t ct = 0; ct < tc && add > 0; ct++) {
      int64_t i = (int64_t)rt * tc + ct;
      if (cycles[i] <= 0) continue;
      fm_timeline_event *e = &t->events[t->n++];
      memset(e, 0, sizeof *e);
      snprintf(e->name, sizeof e->name, "tile %d,%d", rt, ct);
      e->pid = pid;
      e->tid = rt;
      e->ts_us = ts;
      e->dur_us = (double)cycles[i] * us_per_cycle;
      e->cls = classes ? classes[i] : -1;
      e->row_tile = rt;
      e->col_tile = ct;
      e->cycles = cycles[i];
      ts += e->dur_us;
      add--;
    }
  }
  return FM_OK;
}

void fm_run_backward_json(fm_json *j, const fm_run_info *bwd) {
  if (!bwd) {
    fm_json_null(j, "backward");
    return;
  }
  fm_json_object(j, "backward");
  fm_run_json(bwd, j);
  fm_tile_counts_json(bwd->analysis, j);
  fm_json_end(j);
}

/* The four per-tile files of one pass ("" or "_bwd" after each name). */
static fm_status write_pass_arrays(fm_trace_writer *w, const fm_run_trace_pass *p,
                                   const char *suffix, const fm_colmask *m, fm_err *err) {
  const fm_analysis *a = p->info->analysis;
  const int64_t B = a->batch, H = a->heads;
  static const char *const names[4] = {"tiles", "tiles_exact", "tile_bytes", "tile_cycles"};
  const void *data[4] = {p->info->gpu_classes ? (const void *)p->info->gpu_classes : p->classes,
                         p->exact, p->tile_bytes, p->info->gpu_cycles};
  /* the kernel's own record is per (B, H) pair, the CPU's per set */
  const int per_pair[4] = {p->info->gpu_classes != NULL, 0, 0, 1};
  const fm_dtype types[4] = {FM_DT_U8, FM_DT_U8, FM_DT_I64, FM_DT_I64};
  fm_status st = FM_OK;
  for (int f = 0; f < 4 && st == FM_OK; f++) {
    if (!data[f]) continue; /* no cycles without an instrumented GPU run */
    char name[64], path[4200];
    snprintf(name, sizeof name, "%s%s.npy", names[f], suffix);
    st = write_broadcast(fm_trace_file(w, name, path, sizeof path), types[f], m, B, H, a->tr, a->tc,
                         data[f], per_pair[f], err);
  }
  return st;
}

/* "files": every file of the trace, null for the ones it does not have. */
static void files_json(fm_json *j, const fm_run_trace_pass *fwd, const fm_run_trace_pass *bwd) {
  fm_json_object(j, "files");
  fm_json_string(j, "tiles", "tiles.npy");
  fm_json_string(j, "tiles_exact", "tiles_exact.npy");
  fm_json_string(j, "tile_bytes", "tile_bytes.npy");
  fm_json_string(j, "tile_cycles", fwd->info->gpu_cycles ? "tile_cycles.npy" : NULL);
  fm_json_string(j, "tiles_bwd", bwd ? "tiles_bwd.npy" : NULL);
  fm_json_string(j, "tiles_exact_bwd", bwd ? "tiles_exact_bwd.npy" : NULL);
  fm_json_string(j, "tile_bytes_bwd", bwd ? "tile_bytes_bwd.npy" : NULL);
  fm_json_string(j, "tile_cycles_bwd", bwd && bwd->info->gpu_cycles ? "tile_cycles_bwd.npy" : NULL);
  fm_json_string(j, "columns", "columns.npy");
  fm_json_string(j, "timeline", "timeline.json");
  fm_json_string(j, "tile_shape", "[batch, heads, tiles_rows, tiles_cols]");
  fm_json_end(j);
}

fm_status fm_run_trace_write(const char *dir, const fm_run_trace_pass *fwd,
                             const fm_run_trace_pass *bwd, fm_pass asked, const fm_colmask *m,
                             fm_err *err) {
  fm_trace_writer w;
  fm_status st = fm_trace_begin(&w, dir, err);
  if (st != FM_OK) return st;
  char path[4200];
  fm_json j, tl;
  fm_json_init(&j, 1);
  fm_json_init(&tl, 0);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "format", FM_TRACE_FORMAT);
  fm_json_int(&j, "version", FM_TRACE_VERSION);
  fm_json_string(&j, "kind", "run");
  fm_json_string(&j, "pass", fm_pass_name(asked));
  fm_run_json(fwd->info, &j);
  fm_analysis_json(fwd->info->analysis, &j);
  fm_run_backward_json(&j, bwd ? bwd->info : NULL);
  files_json(&j, fwd, bwd);
  fm_json_end(&j);
  timeline_json(fwd->info, &tl);
  if (j.oom || tl.oom) st = fm_fail(err, FM_ENOMEM, "out of memory writing the trace's JSON");
  if (st == FM_OK) st = write_pass_arrays(&w, fwd, "", m, err);
  if (st == FM_OK && bwd) st = write_pass_arrays(&w, bwd, "_bwd", m, err);
  if (st == FM_OK)
    st = fm_trace_write_columns(fm_trace_file(&w, "columns.npy", path, sizeof path), m, err);
  if (st == FM_OK)
    st = fm_write_file_atomic(fm_trace_file(&w, "timeline.json", path, sizeof path), tl.buf, tl.len,
                              err);
  if (st == FM_OK)
    st = fm_write_file_atomic(fm_trace_file(&w, "summary.json", path, sizeof path), j.buf, j.len,
                              err);
  fm_json_free(&j);
  fm_json_free(&tl);
  if (st != FM_OK) {
    fm_trace_abort(&w);
    return st;
  }
  return fm_trace_commit(&w, err);
}
