/* index_write.c — the one index writer of the scenario runner: OUT/index.csv
 * and OUT/index.json (one row per case: the notebooks and bench/peer_flex.py
 * read it; each row names the case's interval vectors, columns.npy in its
 * trace), and OUT/run.json (the run: scenario, device, GPU settings). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "fm_fileio.h"
#include "fm_json.h"
#include "gpu_step.h"
#include "index_write.h"

static int max_kernels(const case_row *rows, int n) {
  int nk = 0;
  for (int i = 0; i < n; i++)
    if (rows[i].nkernels > nk) nk = (int)rows[i].nkernels;
  return nk;
}

static void write_csv(FILE *f, const case_row *rows, int n) {
  int nk = max_kernels(rows, n);
  fprintf(f, "id,family,seqlen,head_dim,br,bc,batch,heads,sets,sample,seed,form,tiles_total,"
             "tiles_masked,tiles_partial,tiles_unmasked,sparsity,sparsity_exact,bytes_dense,"
             "bytes_block_mask,bytes_intervals,steps,causal,mask_nb,mask_nh,sparsity_128");
  for (int k = 0; k < nk; k++) {
    const char *kn = rows[0].k[k].kernel;
    fprintf(f, ",%s_sparsity,%s_time_ms,%s_tflops,%s_noskip_ms,%s_instrumented_ms,"
               "%s_class_mismatches", kn, kn, kn, kn, kn, kn);
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
    for (int k = 0; k < nk; k++) {
      const run_kernel_rec *x = &r->k[k];
      fprintf(f, ",%.6f,%.6g,%.6g,%.6g,%.6g,%lld", x->rho, x->ms, x->tflops, x->noskip_ms,
              x->inst_ms, (long long)x->class_mismatches);
    }
    fputc('\n', f);
  }
}

static void kernel_json(fm_json *j, const run_kernel_rec *x) {
  fm_json_object(j, NULL);
  fm_json_string(j, "kernel", x->kernel);
  fm_json_int(j, "br", x->br);
  fm_json_int(j, "bc", x->bc);
  fm_json_double(j, "sparsity", x->rho);
  fm_json_double(j, "flops_paper", x->flops);
  fm_json_string(j, "status", x->status[0] ? x->status : "ran");
  fm_json_string(j, "source", x->source);
  fm_json_double(j, "time_ms", x->ms);
  fm_json_double(j, "tflops", x->tflops);
  fm_json_double(j, "noskip_ms", x->noskip_ms);
  fm_json_double(j, "speedup_skip_over_noskip", x->noskip_ms / x->ms);
  fm_json_double(j, "ideal_speedup", x->rho < 1 ? 1.0 / (1.0 - x->rho) : NAN);
  fm_json_double(j, "instrumented_ms", x->inst_ms);
  fm_json_double(j, "instrumentation_overhead", x->inst_ms / x->ms - 1.0);
  if (x->class_mismatches >= 0) fm_json_int(j, "class_mismatches", x->class_mismatches);
  else fm_json_null(j, "class_mismatches");
  fm_json_object(j, "traffic");
  fm_json_int(j, "model_read", x->model_read);
  fm_json_int(j, "model_write", x->model_write);
  fm_json_int(j, "model_unique_read", x->unique_read);
  fm_json_int(j, "model_unique_write", x->unique_write);
  fm_json_double(j, "dram_read", x->dram_read);
  fm_json_double(j, "dram_write", x->dram_write);
  fm_json_double(j, "l2_read_bytes", x->l2_read);
  fm_json_double(j, "dram_read_over_unique", x->dram_read / (double)x->unique_read);
  fm_json_double(j, "l2_read_over_model", x->l2_read / (double)x->model_read);
  fm_json_end(j);
  fm_json_end(j);
}

static void row_json(fm_json *j, const case_row *r) {
  char columns[300];
  fm_json_object(j, NULL);
  fm_json_string(j, "id", r->id);
  fm_json_string(j, "trace", r->id[0] ? r->id : NULL);
  fm_json_string(j, "family", r->family);
  fm_json_string(j, "params", r->params);
  fm_json_string(j, "docs_source", r->docs_source);
  fm_json_int(j, "seqlen", r->seqlen);
  fm_json_int(j, "head_dim", r->head_dim);
  fm_json_int(j, "br", r->br);
  fm_json_int(j, "bc", r->bc);
  fm_json_int(j, "batch", r->batch);
  fm_json_int(j, "heads", r->heads);
  fm_json_int(j, "sets", r->sets);
  fm_json_int(j, "mask_nb", r->mask_nb);
  fm_json_int(j, "mask_nh", r->mask_nh);
  fm_json_bool(j, "causal", (int)r->causal);
  snprintf(columns, sizeof columns, "cases/%s/columns.npy", r->id);
  fm_json_string(j, "columns", columns);
  fm_json_int(j, "sample", r->sample);
  fm_json_int(j, "seed", r->seed);
  fm_json_int(j, "ndocs", r->ndocs);
  fm_json_string(j, "form", r->form);
  fm_json_int(j, "tiles_total", r->total);
  fm_json_int(j, "tiles_masked", r->masked);
  fm_json_int(j, "tiles_partial", r->partial);
  fm_json_int(j, "tiles_unmasked", r->unmasked);
  fm_json_double(j, "sparsity", r->rho);
  fm_json_double(j, "sparsity_exact", r->rho_exact);
  fm_json_double(j, "sparsity_128", r->rho_128);
  fm_json_object(j, "bytes");
  fm_json_int(j, "dense", r->dense_bytes);
  fm_json_int(j, "block_mask", r->block_mask_bytes);
  fm_json_int(j, "intervals", r->interval_bytes);
  fm_json_end(j);
  fm_json_double(j, "chunk_sparsity", r->chunk_rho);
  fm_json_double(j, "chunk_boundaries", r->chunk_boundaries);
  if (r->sim_read >= 0) {
    fm_json_object(j, "simulated");
    fm_json_int(j, "bytes_read", r->sim_read);
    fm_json_int(j, "bytes_write", r->sim_write);
    fm_json_double(j, "flops", r->sim_flops);
    fm_json_end(j);
  }
  /* the first kernel that ran, as the notebooks read it */
  for (int k = 0; k < r->nkernels; k++)
    if (isfinite(r->k[k].ms)) {
      fm_json_object(j, "gpu");
      fm_json_string(j, "kernel", r->k[k].kernel);
      fm_json_double(j, "time_ms", r->k[k].ms);
      fm_json_double(j, "tflops", r->k[k].tflops);
      fm_json_double(j, "sparsity", r->k[k].rho);
      fm_json_end(j);
      break;
    }
  fm_json_array(j, "kernels");
  for (int k = 0; k < r->nkernels; k++) kernel_json(j, &r->k[k]);
  fm_json_end(j);
  fm_json_string(j, "steps", r->steps);
  fm_json_end(j);
}

static void run_json(fm_json *j, runner_ctx *rc, int n) {
  const fm_scenario *s = rc->s;
  const gpu_step *g = rc->gpu;
  fm_json_object(j, NULL);
  fm_json_string(j, "format", "fmsim-scenario-run");
  fm_json_int(j, "version", 1);
  fm_json_string(j, "scenario", s->name);
  fm_json_string(j, "path", s->path);
  fm_json_string(j, "report", fm_scn_report_name(s->report));
  fm_json_int(j, "cases", n);
  fm_json_string(j, "device", g->device);
  fm_json_string(j, "device_note", g->wanted ? g->skip_reason : "no GPU step");
  fm_json_object(j, "gpu");
  fm_json_bool(j, "wanted", g->wanted);
  fm_json_array(j, "kernels");
  for (int k = 0; k < g->nkernels; k++) fm_json_string(j, NULL, fm_kernel_get(g->kernel[k])->name);
  fm_json_end(j);
  fm_json_string(j, "variant", fm_variant_name(s->variant));
  fm_json_int(j, "warmup", s->warmup);
  fm_json_int(j, "reps", s->reps);
  fm_json_int(j, "noskip_reps", s->noskip_reps);
  fm_json_int(j, "instrument_reps", s->instrument_reps);
  fm_json_bool(j, "count_bytes", s->count_bytes);
  fm_json_bool(j, "cupti", s->cupti);
  fm_json_bool(j, "l2_flushed", 1);
  fm_json_int(j, "tokens", s->tokens);
  fm_json_int(j, "hidden", s->hidden);
  fm_json_string(j, "flops", "4*B*H*S*S*D*(1-rho), rho by the min/max rule at the kernel's tile");
  fm_json_string(j, "dtype", "bf16");
  fm_json_end(j);
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
  return fm_write_file_atomic(path, j->buf, j->len, err);
}

int index_write(runner_ctx *rc, const case_row *rows, int n) {
  const char *out = rc->o->out;
  char path[4400];
  fm_err err;
  fm_atomic_file af;
  snprintf(path, sizeof path, "%s/index.csv", out);
  fm_status st = fm_atomic_open(&af, path, &err);
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
  run_json(&j, rc, n);
  if (st == FM_OK) st = save_json(out, "run.json", &j, &err);
  fm_json_free(&j);
  if (st != FM_OK) {
    cli_error(rc->o->cmd, "%s: cannot write the index: %s", out, err.msg);
    return -1;
  }
  return 0;
}
