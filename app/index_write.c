/* index_write.c — the one index writer of the scenario runner: OUT/index.csv
 * and OUT/index.json (one row per case: the notebooks and bench/merge.py read
 * it; each row names the case's interval vectors, columns.npy in its
 * trace), and OUT/run.json (the run: scenario, device, GPU settings). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "fm_fileio.h"
#include "fm_json.h"
#include "fm_timing.h"
#include "gpu_step.h"
#include "index_write.h"

static int max_kernels(const case_row *rows, int n) {
  int nk = 0;
  for (int i = 0; i < n; i++)
    if (rows[i].nkernels > nk) nk = (int)rows[i].nkernels;
  return nk;
}

static int any_pass(const case_row *rows, int n, fm_pass pass) {
  for (int i = 0; i < n; i++)
    if (rows[i].pass & pass) return 1;
  return 0;
}

static void write_csv(FILE *f, const case_row *rows, int n) {
  int nk = max_kernels(rows, n);
  int nq = any_pass(rows, n, FM_PASS_BWD) ? RUN_NPASSES : 1; /* backward columns when asked for */
  fprintf(f, "id,family,seqlen,head_dim,br,bc,batch,heads,sets,sample,seed,form,tiles_total,"
             "tiles_masked,tiles_partial,tiles_unmasked,sparsity,sparsity_exact,bytes_dense,"
             "bytes_block_mask,bytes_intervals,steps,causal,mask_nb,mask_nh,sparsity_128");
  for (int q = 0; q < nq; q++)
    for (int k = 0; k < nk; k++) {
      char kn[32];
      snprintf(kn, sizeof kn, "%s%s", rows[0].k[k].kernel, q == RUN_BWD ? "_bwd" : "");
      fprintf(f, ",%s_sparsity,%s_time_ms,%s_tflops,%s_noskip_ms,%s_instrumented_ms,"
                 "%s_class_mismatches,%s_predicted_ms,%s_predicted_error", kn, kn, kn, kn, kn, kn,
              kn, kn);
    }
  fputc('\n', f);
  for (int i = 0; i < n; i++) {
    const case_row *r = &rows[i];
    fprintf(f, "%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%s,%lld,%lld,%lld,%lld,%.6f,%.6f,"
               "%lld,%lld,%lld,\"%s\",%lld,%lld,%lld,%.6f",
            r->id, r->family, (long long)r->seqlen, (long long)r->head_dim, (long long)r->br,
            (long long)r->bc, (long long)r->batch, (long long)r->heads, (long long)r->sets,
            (long long)r->sample, (long long)r->seed, r->form, (long long)r->total,
            (long long)r->masked, (long long)r->partial, (long long)r->unmasked, r->rho,
            r->rho_exact, (long long)r->dense_bytes, (long long)r->block_mask_bytes,
            (long long)r->interval_bytes, r->steps, (long long)r->causal, (long long)r->mask_nb,
            (long long)r->mask_nh, r->rho_128);
    for (int q = 0; q < nq; q++)
      for (int k = 0; k < nk; k++) {
        const run_pass_rec *x = &r->k[k].p[q];
        fprintf(f, ",%.6f,%.6g,%.6g,%.6g,%.6g,%lld,%.6g,%.6g", x->rho, x->ms, x->tflops,
                x->noskip_ms, x->inst_ms, (long long)x->class_mismatches, x->pred_ms,
                x->pred_ms / x->ms - 1);
      }
    fputc('\n', f);
  }
}

/* Members of a JSON object read from a struct: key, kind ('S' string, 'I'
 * int64, 'D' double, 'B' int64 or int as a boolean, 'b' int, 'C' the case's
 * columns.npy from its id, '{' an object, '}' its end) and place. */
typedef struct member {
  const char *key;
  char kind;
  size_t off;
} member;

static void members_json(fm_json *j, const void *base, const member *m, size_t n) {
  char columns[300];
  for (size_t i = 0; i < n; i++) {
    const char *p = (const char *)base + m[i].off;
    switch (m[i].kind) {
    case 'S': fm_json_string(j, m[i].key, p); break;
    case 'I': fm_json_int(j, m[i].key, *(const int64_t *)p); break;
    case 'D': fm_json_double(j, m[i].key, *(const double *)p); break;
    case 'B': fm_json_bool(j, m[i].key, *(const int64_t *)p != 0); break;
    case 'b': fm_json_bool(j, m[i].key, *(const int *)p != 0); break;
    case 'C':
      snprintf(columns, sizeof columns, "cases/%s/columns.npy", p);
      fm_json_string(j, m[i].key, columns);
      break;
    case '{': fm_json_object(j, m[i].key); break;
    default: fm_json_end(j);
    }
  }
}
#define NMEMBERS(a) (sizeof a / sizeof a[0])

#define K(key, kind, field) {key, kind, offsetof(run_pass_rec, field)}
static const member pass_members[] = {
    K("br", 'I', br), K("bc", 'I', bc), K("sparsity", 'D', rho),
    K("flops_paper", 'D', flops), K("source", 'S', source), K("time_ms", 'D', ms),
    K("tflops", 'D', tflops), K("noskip_ms", 'D', noskip_ms), K("instrumented_ms", 'D', inst_ms),
    K("predicted_ms", 'D', pred_ms),
};
static const member traffic_members[] = {
    K("model_read", 'I', model_read), K("model_write", 'I', model_write),
    K("model_unique_read", 'I', unique_read), K("model_unique_write", 'I', unique_write),
    K("dram_read", 'D', dram_read), K("dram_write", 'D', dram_write),
    K("l2_read_bytes", 'D', l2_read),
};
#undef K

/* One pass's members (the forward's straight in the kernel's object, the
 * backward's in its "bwd" object): its figures, "status" ("ran" when it did),
 * the skip speed-up beside 1/(1-rho), the instrumentation overhead, the
 * classes, the traffic. */
static void pass_json(fm_json *j, const run_kernel_rec *x, int q, const case_row *row) {
  const run_pass_rec *p = &x->p[q];
  members_json(j, p, pass_members, NMEMBERS(pass_members));
  /* a pass the kernel does not have says so before any reason of the run's */
  const char *status = p->status[0] && !p->br ? p->status
                       : x->status[0]         ? x->status
                       : p->status[0]         ? p->status
                                              : "ran";
  if (!(row->pass & run_pass_of(q))) status = q == RUN_BWD ? "not asked for (pass: fwd)" : "not asked for (pass: bwd)";
  fm_json_string(j, "status", status);
  fm_json_string(j, "pass", fm_pass_name(run_pass_of(q)));
  fm_json_double(j, "predicted_error", p->pred_ms / p->ms - 1); /* null unless both */
  fm_json_double(j, "speedup_skip_over_noskip", p->noskip_ms / p->ms);
  fm_json_double(j, "ideal_speedup", p->rho < 1 ? 1.0 / (1.0 - p->rho) : NAN);
  fm_json_double(j, "instrumentation_overhead", p->inst_overhead);
  if (p->class_mismatches >= 0) fm_json_int(j, "class_mismatches", p->class_mismatches);
  else fm_json_null(j, "class_mismatches");
  fm_json_object(j, "traffic");
  members_json(j, p, traffic_members, NMEMBERS(traffic_members));
  fm_json_double(j, "dram_read_over_unique", p->dram_read / (double)p->unique_read);
  fm_json_double(j, "l2_read_over_model", p->l2_read / (double)p->model_read);
  fm_json_end(j);
}

static void kernel_json(fm_json *j, const run_kernel_rec *x, const case_row *row) {
  fm_json_object(j, NULL);
  fm_json_string(j, "kernel", x->kernel);
  pass_json(j, x, RUN_FWD, row);
  if (row->pass & FM_PASS_BWD) {
    fm_json_object(j, "bwd");
    pass_json(j, x, RUN_BWD, row);
    fm_json_end(j);
  } else {
    fm_json_null(j, "bwd");
  }
  fm_json_end(j);
}

#define F(key, kind, field) {key, kind, offsetof(case_row, field)}
static const member row_members[] = {
    F("id", 'S', id), F("trace", 'S', id), F("family", 'S', family), F("params", 'S', params),
    F("docs_source", 'S', docs_source), F("seqlen", 'I', seqlen), F("head_dim", 'I', head_dim),
    F("br", 'I', br), F("bc", 'I', bc), F("batch", 'I', batch), F("heads", 'I', heads),
    F("sets", 'I', sets), F("mask_nb", 'I', mask_nb), F("mask_nh", 'I', mask_nh),
    F("causal", 'B', causal), F("columns", 'C', id), F("sample", 'I', sample),
    F("seed", 'I', seed), F("ndocs", 'I', ndocs), F("form", 'S', form),
    F("tiles_total", 'I', total), F("tiles_masked", 'I', masked),
    F("tiles_partial", 'I', partial), F("tiles_unmasked", 'I', unmasked),
    F("sparsity", 'D', rho), F("sparsity_exact", 'D', rho_exact),
    F("sparsity_128", 'D', rho_128), F("bytes", '{', id), F("dense", 'I', dense_bytes),
    F("block_mask", 'I', block_mask_bytes), F("intervals", 'I', interval_bytes),
    F(NULL, '}', id), F("chunk_sparsity", 'D', chunk_rho),
    F("chunk_boundaries", 'D', chunk_boundaries), F("chunk_visited", 'D', chunk_visited),
    F("chunk_partial", 'D', chunk_partial), F("chunk_work", 'D', chunk_work),
};
#undef F

static void row_json(fm_json *j, const case_row *r) {
  fm_json_object(j, NULL);
  members_json(j, r, row_members, NMEMBERS(row_members));
  if (r->sim_read >= 0) {
    fm_json_object(j, "simulated");
    fm_json_int(j, "bytes_read", r->sim_read);
    fm_json_int(j, "bytes_write", r->sim_write);
    fm_json_double(j, "flops", r->sim_flops);
    fm_json_end(j);
  }
  /* the first kernel whose forward ran, as the notebooks read it */
  for (int k = 0; k < r->nkernels; k++)
    if (isfinite(r->k[k].p[RUN_FWD].ms)) {
      const run_pass_rec *f = &r->k[k].p[RUN_FWD];
      fm_json_object(j, "gpu");
      fm_json_string(j, "kernel", r->k[k].kernel);
      fm_json_double(j, "time_ms", f->ms);
      fm_json_double(j, "tflops", f->tflops);
      fm_json_double(j, "sparsity", f->rho);
      fm_json_end(j);
      break;
    }
  fm_json_string(j, "pass", fm_pass_name((fm_pass)r->pass));
  fm_json_array(j, "kernels");
  for (int k = 0; k < r->nkernels; k++) kernel_json(j, &r->k[k], r);
  fm_json_end(j);
  fm_json_string(j, "steps", r->steps);
  fm_json_end(j);
}

#define S_(key, kind, field) {key, kind, offsetof(fm_scenario, field)}
static const member settings_members[] = {
    S_("warmup", 'I', warmup), S_("reps", 'I', reps), S_("settle_ms", 'I', settle_ms),
    S_("sustained_ms", 'I', sustained_ms),
    S_("noskip_reps", 'I', noskip_reps),
    S_("instrument_reps", 'I', instrument_reps), S_("count_bytes", 'b', count_bytes),
    S_("cupti", 'b', cupti), S_("tokens", 'I', tokens), S_("hidden", 'I', hidden),
};
#undef S_

/* The timing model's part of run.json: the profile of each kernel (null
 * without), and why a prediction is missing where one was expected: one note
 * per distinct reason, with how many kernel passes it covers. */
static void prediction_json(fm_json *j, const gpu_step *g, const case_row *rows, int n) {
  const char *first = NULL;
  for (int k = 0; k < g->nkernels && !first; k++)
    if (g->profile[k]) first = g->profile[k]->name;
  fm_json_string(j, "profile", first);
  fm_json_array(j, "profiles");
  for (int k = 0; k < g->nkernels; k++) {
    const fm_gpu_profile *p = g->profile[k];
    if (!p) continue;
    fm_json_object(j, NULL);
    fm_json_string(j, "kernel", fm_kernel_get(g->kernel[k])->name);
    fm_json_string(j, "name", p->name);
    fm_json_string(j, "gpu", p->gpu);
    fm_json_string(j, "date", p->date);
    fm_json_string(j, "fmsim_version", p->fmsim_version);
    fm_json_string(j, "signature", g->profile_sig[k]);
    fm_json_end(j);
  }
  fm_json_end(j);
  enum { MAX_NOTES = 16 };
  char notes[MAX_NOTES][200];
  int counts[MAX_NOTES], nn = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < rows[i].nkernels; k++)
      for (int q = 0; q < RUN_NPASSES; q++) {
        const run_pass_rec *x = &rows[i].k[k].p[q];
        if (!x->pred_note[0]) continue;
        char note[200];
        snprintf(note, sizeof note, "%s %s: %.170s", rows[i].k[k].kernel, fm_pass_name(run_pass_of(q)),
                 x->pred_note);
        int at = 0;
        while (at < nn && strcmp(notes[at], note)) at++;
        if (at == nn && nn == MAX_NOTES) continue;
        if (at == nn) snprintf(notes[nn], sizeof notes[nn], "%s", note), counts[nn++] = 0;
        counts[at]++;
      }
  fm_json_array(j, "prediction_notes");
  for (int i = 0; i < nn; i++) {
    fm_json_object(j, NULL);
    fm_json_string(j, "note", notes[i]);
    fm_json_int(j, "passes", counts[i]);
    fm_json_end(j);
  }
  fm_json_end(j);
}

static void run_json(fm_json *j, runner_ctx *rc, const case_row *rows, int n, int total) {
  const fm_scenario *s = rc->s;
  const gpu_step *g = rc->gpu;
  fm_json_object(j, NULL);
  fm_json_string(j, "format", "fmsim-scenario-run");
  fm_json_int(j, "version", 1);
  fm_json_string(j, "scenario", s->name);
  fm_json_string(j, "path", s->path);
  fm_json_string(j, "report", fm_scn_report_name(s->report));
  fm_json_int(j, "cases", n);
  fm_json_int(j, "cases_total", total);
  fm_json_bool(j, "complete", n == total);
  fm_json_string(j, "device", g->device);
  fm_json_string(j, "device_note", g->wanted ? g->skip_reason : "no GPU step");
  fm_json_object(j, "gpu");
  fm_json_bool(j, "wanted", g->wanted);
  fm_json_array(j, "kernels");
  for (int k = 0; k < g->nkernels; k++) fm_json_string(j, NULL, fm_kernel_get(g->kernel[k])->name);
  fm_json_end(j);
  fm_json_string(j, "variant", fm_variant_name(s->variant));
  fm_json_string(j, "mask_method", fm_mask_method_name(s->mask_method));
  fm_json_string(j, "pass", fm_pass_name(s->pass));
  members_json(j, s, settings_members, NMEMBERS(settings_members));
  fm_json_bool(j, "l2_flushed", 1);
  fm_json_string(j, "flops", "4*B*H*S*S*D*(1-rho), rho by the min/max rule at the kernel's tile; "
                             "the backward 2.5 times that, rho at the backward's tile");
  fm_json_string(j, "dtype", "bf16");
  fm_json_end(j);
  prediction_json(j, g, rows, n);
  fm_json_object(j, "files");
  fm_json_string(j, "index", "index.json");
  fm_json_string(j, "index_csv", "index.csv");
  fm_json_string(j, "report", "report.md");
  fm_json_string(j, "tables", "tables");
  fm_json_end(j);
  fm_json_end(j);
}

static fm_status save_json(const char *out, const char *name, fm_json *j, fm_err *err) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", out, name);
  if (j->oom) return fm_fail(err, FM_ENOMEM, "out of memory writing %s", name);
  return fm_write_file_atomic_ex(path, j->buf, j->len, FM_OUT_NOFOLLOW, err);
}

int index_write(runner_ctx *rc, const case_row *rows, int n, int total) {
  const char *out = rc->o->out;
  char path[4400];
  fm_err err;
  fm_atomic_file af;
  snprintf(path, sizeof path, "%s/index.csv", out);
  fm_status st = fm_atomic_open_ex(&af, path, FM_OUT_NOFOLLOW, &err);
  if (st == FM_OK) {
    write_csv(af.f, rows, n);
    st = fm_atomic_close(&af, 1, &err);
  }
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_array(&j, NULL);
  for (int i = 0; i < n; i++) row_json(&j, &rows[i]);
  fm_json_end(&j);
  if (st == FM_OK) st = save_json(out, "index.json", &j, &err);
  fm_json_free(&j);
  fm_json_init(&j, 1);
  run_json(&j, rc, rows, n, total);
  if (st == FM_OK) st = save_json(out, "run.json", &j, &err);
  fm_json_free(&j);
  if (st != FM_OK) {
    cli_error(rc->o->cmd, "%s: cannot write the index: %s", out, err.msg);
    return -1;
  }
  return 0;
}
