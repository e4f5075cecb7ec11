/* case_build.c — one case of the scenario runner (runner.h): the one case
 * builder (a family, an interval file or a dense file), the analysis at the
 * scenario's tile, the simulate and GPU steps, and the one trace writer: the
 * single form's run trace (fm_run_trace.h) straight into --out, or a
 * scenario case's analysis trace (fm_trace.h) with its kernels' records
 * (gpu.json) and its row. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "case_build.h"

#include "chunk_study.h"
#include "cli.h"
#include "fm_dense.h"
#include "fm_fileio.h"
#include "fm_forms.h"
#include "fm_intervals_io.h"
#include "fm_json.h"
#include "fm_tiles.h"
#include "gpu_step.h"
#include "run_stop.h"
#include "single_report.h"

int case_build_mask(runner_ctx *rc, const fm_scn_case *c, fm_colmask **out, fm_family_used *used) {
  const fm_scenario *s = rc->s;
  const fm_scn_mask *m = &s->masks[c->mask_index];
  fm_err err;
  memset(used, 0, sizeof *used);
  if (m->family[0]) {
    const char *params[FM_SCN_MAX_PARAMS];
    for (int p = 0; p < m->nparams; p++) params[p] = fm_scn_param(s, m, p);
    fm_family_request req = {.family = m->family, .seqlen = c->seqlen, .batch = c->batch,
                             .heads = c->heads, .seed = c->seed, .sample = c->sample,
                             .samples = &rc->samples, .nparams = m->nparams, .params = params};
    if (fm_family_build(&req, out, used, &err) != FM_OK) {
      cli_error(rc->o->cmd, "%s%s", runner_where(rc, m->line, "family"), err.msg);
      return -1;
    }
    return 0;
  }
  if (m->is_intervals) {
    fm_intervals_opts io = {.causal = m->causal, .strict = m->strict};
    fm_intervals_note note;
    if (fm_intervals_load(m->file, &io, out, &note, &err) != FM_OK) {
      cli_error(rc->o->cmd, "%s%s", runner_where(rc, m->line, "intervals"), err.msg);
      return -1;
    }
    if (note.text[0])
      fprintf(stderr, "fmsim %s: note: %s%s\n", rc->o->cmd, runner_where(rc, m->line, "intervals"),
              note.text);
    return 0;
  }
  /* a dense mask: scanned once (O(Sk) state), converted to its smallest form */
  fm_dense_opts dopts = {.masked_true = m->masked_true, .keep_intervals = 1};
  fm_dense_result *res = NULL;
  fm_status st = fm_dense_check_file(m->file, &dopts, &res, &err);
  if (st == FM_OK) st = fm_dense_result_to_colmask(res, FM_FORM_NONE, out, &err);
  fm_dense_result_destroy(res);
  if (st != FM_OK) {
    cli_error(rc->o->cmd, "%s%s", runner_where(rc, m->line, "dense"), err.msg);
    return -1;
  }
  return 0;
}

/* The mask built, classified at the case's tile, studied and modelled. */
static int analyze_case(runner_ctx *rc, case_work *w) {
  const fm_scenario *s = rc->s;
  const fm_scn_case *c = w->c;
  const fm_scn_mask *sm = &s->masks[c->mask_index];
  if (case_build_mask(rc, c, &w->m, &w->used)) return -1;
  fm_analysis_init(&w->a, w->m, sm->family[0] ? sm->family : sm->file, w->used.params,
                   w->used.docs_source, c->batch, c->heads, (int32_t)c->br, (int32_t)c->bc);
  size_t n = (size_t)fm_colmask_nsets(w->m) * (size_t)w->a.tr * (size_t)w->a.tc;
  w->classes = malloc(n ? n : 1);
  w->exact = malloc(n ? n : 1);
  if (rc->o->single) w->tile_bytes = malloc(sizeof(int64_t) * (n ? n : 1));
  fm_err err;
  if (!w->classes || !w->exact || (rc->o->single && !w->tile_bytes)) {
    cli_error(rc->o->cmd, "%scannot allocate the tile arrays (%zu tiles)", runner_case_label(rc, c), n);
    return -1;
  }
  if (fm_classify(w->m, w->a.br, w->a.bc, &w->a.counts, w->classes, w->exact, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s%s", runner_case_label(rc, c), err.msg);
    return -1;
  }
  w->rho_128 = w->a.counts.sparsity;
  fm_tile_counts c128;
  if ((c->br != 128 || c->bc != 128) && (s->run & (FM_SCN_GPU | FM_SCN_PEER)) &&
      fm_classify(w->m, 128, 128, &c128, NULL, NULL, NULL) == FM_OK)
    w->rho_128 = c128.sparsity;
  w->chunk_rho = w->chunk_boundaries = w->chunk_visited = w->chunk_partial = w->chunk_work = NAN;
  if (s->report == FM_SCN_REPORT_CHUNKS) {
    chunk_study(w->m, w->classes, c->br, c->bc, s->chunk, &w->chunk_rho, &w->chunk_boundaries);
    chunk_study_linrnn(w->m, c->br, c->bc, s->chunk, c->head_dim, &w->chunk_visited, &w->chunk_partial,
                       &w->chunk_work);
  }
  if (!(s->run & FM_SCN_SIMULATE) && !rc->o->single) return 0;
  /* the CPU simulation: the cost model of the scenario's variant at this tile */
  fm_cost_shape shape = {.batch = c->batch, .heads = c->heads, .head_dim = (int32_t)c->head_dim,
                         .br = w->a.br, .bc = w->a.bc, .elem_bytes = 2, .variant = s->variant};
  if (fm_cost_compute(w->m, &shape, w->classes, w->tile_bytes, &w->cost, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s%s", runner_case_label(rc, c), err.msg);
    return -1;
  }
  w->have_cost = 1;
  return 0;
}

static void fill_row(runner_ctx *rc, const case_work *w, case_row *row) {
  const fm_scenario *s = rc->s;
  const fm_scn_case *c = w->c;
  const fm_scn_mask *sm = &s->masks[c->mask_index];
  const fm_analysis *a = &w->a;
  case_row_clear(row);
  snprintf(row->id, sizeof row->id, "%s", c->id);
  snprintf(row->family, sizeof row->family, "%s", sm->family[0] ? sm->family : "file");
  snprintf(row->params, sizeof row->params, "%s", w->used.params);
  snprintf(row->docs_source, sizeof row->docs_source, "%s", w->used.docs_source);
  snprintf(row->form, sizeof row->form, "%s", fm_form_name(a->form));
  row->seqlen = fm_colmask_sk(w->m);
  row->head_dim = c->head_dim;
  row->br = c->br;
  row->bc = c->bc;
  row->batch = c->batch;
  row->heads = c->heads;
  row->sets = fm_colmask_nsets(w->m);
  row->mask_nb = fm_colmask_nb(w->m);
  row->mask_nh = fm_colmask_nh(w->m);
  row->causal = fm_colmask_causal(w->m);
  row->sample = c->sample;
  row->seed = (int64_t)c->seed;
  row->ndocs = w->used.ndocs;
  row->masked = a->counts.minmax[FM_TILE_MASKED];
  row->partial = a->counts.minmax[FM_TILE_PARTIAL];
  row->unmasked = a->counts.minmax[FM_TILE_UNMASKED];
  row->total = a->counts.total;
  row->partial_but_masked = a->counts.partial_but_masked;
  row->partial_but_unmasked = a->counts.partial_but_unmasked;
  row->rho = a->counts.sparsity;
  row->rho_exact = a->counts.sparsity_exact;
  row->rho_128 = w->rho_128;
  row->dense_bytes = a->bytes.dense;
  row->block_mask_bytes = a->bytes.block_mask;
  row->interval_bytes = a->bytes.intervals;
  row->chunk_rho = w->chunk_rho;
  row->chunk_boundaries = w->chunk_boundaries;
  row->chunk_visited = w->chunk_visited;
  row->chunk_partial = w->chunk_partial;
  row->chunk_work = w->chunk_work;
  if (w->have_cost && (s->run & FM_SCN_SIMULATE)) {
    row->sim_read = w->cost.bytes_read;
    row->sim_write = w->cost.bytes_write;
    row->sim_flops = w->cost.flops_paper;
  }
  const gpu_step *g = rc->gpu;
  row->pass = s->pass;
  row->nkernels = g->wanted ? g->nkernels : 0;
  if (g->wanted) runner_gpu_settings(s, row->gpu_settings, sizeof row->gpu_settings);
  for (int k = 0; k < row->nkernels; k++) {
    row->k[k] = w->runs[k].rec;
    row->gpu_ran |= w->runs[k].ran;
  }
  snprintf(row->steps, sizeof row->steps, "analyze%s%s%s", s->run & FM_SCN_SIMULATE ? ",simulate" : "",
           !g->wanted ? "" : row->gpu_ran ? ",gpu" : ",gpu:skipped",
           s->run & FM_SCN_PEER ? ",peer:skipped(bench/protocol_bench.py times the peers)" : "");
}

/* One pass of a kernel run in gpu.json: its run members and, when timed, the
 * no-skip variant's. */
static void pass_json(runner_ctx *rc, const gpu_kernel_run *r, int q, int head_dim, fm_json *j) {
  fm_run_info info;
  gpu_run_info(rc->gpu, r, q, rc->s, head_dim, &info);
  fm_run_json(&info, j);
  if (q == RUN_BWD) fm_tile_counts_json(&r->p[q].a, j);
  if (r->p[q].noskip.source[0]) {
    info.variant = FM_VARIANT_NOSKIP;
    info.mask_method = FM_MASK_METHOD_AUTO; /* time_noskip's (gpu_step.c) */
    info.timing = &r->p[q].noskip;
    info.timing_instrumented = NULL;
    info.instr_overhead = NAN;
    info.measured = NULL;
    fm_json_object(j, "noskip");
    fm_run_json(&info, j);
    fm_json_end(j);
  }
}

/* gpu.json beside a scenario case's trace: each kernel's run, by the run
 * trace's own serializer (fm_run_json): the forward's members, and the
 * backward's in "backward" (null when it did not run). */
static int write_gpu_json(runner_ctx *rc, const case_work *w, const char *dir) {
  const gpu_step *g = rc->gpu;
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "kind", "gpu");
  fm_json_string(&j, "case", w->c->id);
  fm_json_string(&j, "format", FM_TRACE_FORMAT);
  fm_json_int(&j, "version", FM_TRACE_VERSION);
  fm_json_string(&j, "pass", fm_pass_name(rc->s->pass));
  fm_json_array(&j, "kernels");
  for (int k = 0; k < g->nkernels; k++) {
    const gpu_kernel_run *r = &w->runs[k];
    if (!r->ran) continue;
    fm_json_object(&j, NULL);
    fm_json_string(&j, "kernel_name", r->rec.kernel);
    if (r->p[RUN_FWD].ran) pass_json(rc, r, RUN_FWD, (int)w->c->head_dim, &j);
    if (r->p[RUN_BWD].ran) {
      fm_json_object(&j, "backward");
      pass_json(rc, r, RUN_BWD, (int)w->c->head_dim, &j);
      fm_json_end(&j);
    } else {
      fm_json_null(&j, "backward");
    }
    fm_json_end(&j);
  }
  fm_json_end(&j);
  fm_json_end(&j);
  char path[4700];
  snprintf(path, sizeof path, "%s/gpu.json", dir);
  fm_err err;
  fm_status st = j.oom ? fm_fail(&err, FM_ENOMEM, "out of memory writing gpu.json")
                       : fm_write_file_atomic_ex(path, j.buf, j.len, FM_OUT_NOFOLLOW, &err);
  fm_json_free(&j);
  if (st != FM_OK) cli_error(rc->o->cmd, "case %s: %s", w->c->id, err.msg);
  return st == FM_OK ? 0 : -1;
}

/* The CPU's record of one pass: no timings, no counters, its classes. */
static void cpu_info(const char *note, const fm_analysis *a, const fm_cost *cost, int head_dim,
                     const fm_scenario *s, const fm_measured_bytes *none, fm_run_info *info) {
  memset(info, 0, sizeof *info);
  info->analysis = a;
  info->device = "cpu-simulation";
  info->device_note = note;
  info->head_dim = head_dim;
  info->variant = s->variant;
  info->mask_method = s->mask_method; /* recorded; the CPU simulation does not depend on it */
  info->cost = cost;
  info->class_mismatches = -1;
  info->instr_overhead = NAN;
  info->measured = none;
}

/* The backward's exact classes and modelled bytes per tile at its tile (the
 * single form's trace files); 0, or -1 after printing. */
static int bwd_arrays(runner_ctx *rc, const case_work *w, const gpu_pass_run *p, uint8_t **exact,
                      int64_t **tile_bytes) {
  const fm_scn_case *c = w->c;
  size_t n = (size_t)fm_colmask_nsets(w->m) * (size_t)p->a.tr * (size_t)p->a.tc;
  fm_tile_counts counts;
  fm_err err;
  *exact = malloc(n ? n : 1);
  *tile_bytes = malloc(sizeof(int64_t) * (n ? n : 1));
  uint8_t *minmax = malloc(n ? n : 1);
  fm_cost_shape sh = {.batch = c->batch, .heads = c->heads, .head_dim = (int32_t)c->head_dim,
                      .br = p->a.br, .bc = p->a.bc, .elem_bytes = 2, .variant = rc->s->variant,
                      .pass = FM_PASS_BWD};
  fm_cost cost;
  fm_status st = !*exact || !*tile_bytes || !minmax
                     ? fm_fail(&err, FM_ENOMEM, "cannot allocate the backward's tile arrays")
                     : fm_classify(w->m, p->a.br, p->a.bc, &counts, minmax, *exact, &err);
  if (st == FM_OK) st = fm_cost_compute(w->m, &sh, minmax, *tile_bytes, &cost, &err);
  free(minmax);
  if (st != FM_OK) cli_error(rc->o->cmd, "%s", err.msg);
  return st == FM_OK ? 0 : -1;
}

/* The single form's trace: a run trace of the one kernel (or the CPU
 * simulation) straight into dir, its forward and, when asked for, its
 * backward at its own tile; then its report on stdout. */
static int write_single(runner_ctx *rc, case_work *w, const char *dir) {
  const gpu_step *g = rc->gpu;
  const fm_scenario *s = rc->s;
  const gpu_kernel_run *r = g->nkernels ? &w->runs[0] : NULL;
  const int hd = (int)w->c->head_dim;
  fm_run_info info[RUN_NPASSES];
  char note[900] = "";
  fm_measured_bytes none = {.note = "no counters: CPU simulation"};
  snprintf(note, sizeof note, "%s: classes and modelled bytes, no timings%s", g->skip_reason,
           rc->tile_note);
  if (r && r->p[RUN_FWD].ran) {
    gpu_run_info(g, r, RUN_FWD, s, hd, &info[RUN_FWD]);
    info[RUN_FWD].analysis = &w->a;
    info[RUN_FWD].cost = &w->cost;
  } else if (r && r->ran) { /* --pass bwd on a GPU: the forward modelled, the device's records */
    cpu_info("forward not asked for (--pass bwd): modelled, not timed", &w->a, &w->cost, hd, s,
             &none, &info[RUN_FWD]);
    info[RUN_FWD].device = g->device;
    info[RUN_FWD].timeline = &r->timeline;
  } else {
    cpu_info(note, &w->a, &w->cost, hd, s, &none, &info[RUN_FWD]);
  }
  fm_run_trace_pass fwd = {.info = &info[RUN_FWD], .classes = w->classes, .exact = w->exact,
                           .tile_bytes = w->tile_bytes},
                    bwd = {0};
  const gpu_pass_run *b = r && (s->pass & FM_PASS_BWD) && r->p[RUN_BWD].classes ? &r->p[RUN_BWD] : NULL;
  uint8_t *bexact = NULL;
  int64_t *bbytes = NULL;
  int bad = b && bwd_arrays(rc, w, b, &bexact, &bbytes);
  if (b && b->ran) gpu_run_info(g, r, RUN_BWD, s, hd, &info[RUN_BWD]);
  else if (b)
    cpu_info(r->rec.p[RUN_BWD].status[0] ? r->rec.p[RUN_BWD].status : note, &b->a, &b->cost, hd, s,
             &none, &info[RUN_BWD]);
  if (b)
    bwd = (fm_run_trace_pass){.info = &info[RUN_BWD], .classes = b->classes, .exact = bexact,
                              .tile_bytes = bbytes};
  fm_err err;
  if (!bad && fm_run_trace_write(dir, &fwd, b ? &bwd : NULL, s->pass, w->m, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    bad = 1;
  }
  free(bexact);
  free(bbytes);
  if (bad) return -1;
  if (!(r && r->ran))
    fprintf(stderr, "fmsim %s: note: %s; wrote the CPU simulation\n", rc->o->cmd, note);
  run_case_out out = {.analysis = &w->a, .info = &info[RUN_FWD], .pass = s->pass,
                      .bwd = b ? &info[RUN_BWD] : NULL};
  run_print_report(&out, dir, rc->o->json);
  return 0;
}

int case_row_save(runner_ctx *rc, const fm_scn_case *c, const char *dir, const case_row *row) {
  char path[4700];
  fm_err err;
  snprintf(path, sizeof path, "%s/row.tsv", dir);
  fm_atomic_file af;
  if (fm_atomic_open_ex(&af, path, FM_OUT_NOFOLLOW, &err) != FM_OK || case_row_write(af.f, row) != 0 ||
      fm_atomic_close(&af, 1, &err) != FM_OK) {
    fm_atomic_close(&af, 0, NULL);
    cli_error(rc->o->cmd, "case %s: %s", c->id, err.msg);
    return -1;
  }
  return 0;
}

/* A scenario case's folder: the analysis trace, gpu.json, and the row last. */
static int write_case(runner_ctx *rc, const case_work *w, const char *dir, const case_row *row) {
  fm_err err;
  if (fm_trace_write_analysis(dir, &w->a, w->m, w->classes, w->exact, &err) != FM_OK) {
    cli_error(rc->o->cmd, "case %s: %s", w->c->id, err.msg);
    return -1;
  }
  if (row->gpu_ran && write_gpu_json(rc, w, dir)) return -1;
  return case_row_save(rc, w->c, dir, row);
}

static void case_work_free(case_work *w, int nkernels) {
  for (int k = 0; k < nkernels; k++) gpu_kernel_run_free(&w->runs[k]);
  free(w->classes);
  free(w->exact);
  free(w->tile_bytes);
  fm_colmask_destroy(w->m);
}

int runner_case(runner_ctx *rc, const fm_scn_case *c, const char *dir, case_row *row) {
  case_work w;
  memset(&w, 0, sizeof w);
  w.c = c;
  int rc_ = analyze_case(rc, &w);
  if (rc_ == 0 && run_stop_requested()) rc_ = RUNNER_STOPPED;
  if (rc_ == 0 && rc->gpu->wanted) rc_ = gpu_step_case(rc->gpu, rc, c, w.m, &w.a, w.classes, w.runs);
  if (rc_ == 0 && run_stop_requested()) rc_ = RUNNER_STOPPED;
  if (rc_ == 0) fill_row(rc, &w, row);
  if (rc_ == 0) rc_ = rc->o->single ? write_single(rc, &w, dir) : write_case(rc, &w, dir, row);
  case_work_free(&w, rc->gpu->nkernels);
  return rc_;
}
