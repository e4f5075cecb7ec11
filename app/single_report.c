/* single_report.c — the report of the runner's single form
 * (single_report.h): the mask, the device, and per pass its tile, rho,
 * FLOPs, modelled and measured bytes, time and tile record. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "single_report.h"

#include "cli.h"
#include "fm_json.h"

/* One pass of the report: its tile, rho, FLOPs, bytes, time and records;
 * its own note when it differs from the run's (top). */
static void print_pass(const char *label, const fm_run_info *r, const char *top) {
  const fm_analysis *a = r->analysis;
  const fm_cost *c = r->cost;
  char b1[32], b2[32], b3[32], b4[32], b5[32];
  printf("%-11s variant %s%s%s, tiles %d x %d (%d x %d per head)%s\n", label,
         fm_variant_name(r->variant), r->mask_method ? ", mask method " : "",
         r->mask_method ? fm_mask_method_name(r->mask_method) : "", a->br, a->bc, a->tr, a->tc,
         r->instrumented ? ", instrumented" : "");
  if (r->device_note[0] && strcmp(r->device_note, top)) printf("            %s\n", r->device_note);
  printf("rho         %.4f (min/max rule; exact %.4f); visited tiles %lld of %lld\n", c->rho,
         a->counts.sparsity_exact, (long long)c->tiles_visited, (long long)c->tiles_total);
  printf("FLOPs       paper %.4g%s, executed %.4g\n", c->flops_paper,
         c->pass == FM_PASS_BWD ? " (2.5x the forward's)" : "", c->flops_executed);
  printf("bytes model read %s (Q %s, K/V %s), write %s; compulsory read %s\n",
         cli_bytes(c->bytes_read, b1, sizeof b1), cli_bytes(c->bytes_q, b2, sizeof b2),
         cli_bytes(c->bytes_kv, b3, sizeof b3), cli_bytes(c->bytes_write, b4, sizeof b4),
         cli_bytes(c->unique_read, b5, sizeof b5));
  const fm_timing *t = r->timing;
  if (t && t->source[0]) {
    printf("time        %.4f ms median of %d after %d warm-up, L2 flushed (%s", t->median_ms,
           t->reps, t->warmup, t->source);
    if (isfinite(t->events_median_ms)) printf("; CUDA events %.4f ms", t->events_median_ms);
    printf(")%s%s\n", t->note[0] ? "; " : "", t->note);
    printf("TFLOP/s     %.1f paper count, %.1f executed; %.0f GB/s of modelled reads\n",
           fm_cost_tflops(c->flops_paper, t->median_ms),
           fm_cost_tflops(c->flops_executed, t->median_ms),
           (double)c->bytes_read / (t->median_ms * 1e-3) / 1e9);
  } else {
    printf("time        none (no GPU run)\n");
  }
  const fm_measured_bytes *mb = r->measured;
  if (mb && mb->source[0])
    printf("bytes meas. DRAM read %s (%.2fx compulsory), write %s; L2 read %s (%.2fx model) (%s)\n",
           cli_bytes((int64_t)mb->dram_read, b1, sizeof b1), mb->dram_read / (double)c->unique_read,
           cli_bytes((int64_t)mb->dram_write, b2, sizeof b2),
           cli_bytes((int64_t)(32.0 * mb->l2_read_sectors), b3, sizeof b3),
           32.0 * mb->l2_read_sectors / (double)c->bytes_read, mb->source);
  else if (mb)
    printf("bytes meas. none: %s\n", mb->note);
  const fm_timing *ti = r->timing_instrumented;
  if (ti && ti->source[0] && isfinite(r->instr_overhead))
    printf("instrumented %.4f ms (%+.1f%% over plain, the two timed interleaved)\n", ti->median_ms,
           100.0 * r->instr_overhead);
  if (r->class_mismatches >= 0)
    printf("tile record kernel classes vs CPU: %lld mismatch%s\n", (long long)r->class_mismatches,
           r->class_mismatches == 1 ? "" : "es");
}

static void print_report(const run_case_out *o, const char *out) {
  const fm_run_info *r = o->info;
  const fm_analysis *a = o->analysis;
  printf("family      %s (%s), S=%lld, batch %lld, heads %lld, head dim %d\n", a->family,
         a->causal ? "causal" : "bidirectional", (long long)a->seqlen_k, (long long)a->batch,
         (long long)a->heads, r->head_dim);
  if (a->params[0]) printf("params      %s\n", a->params);
  printf("device      %s%s%s\n", r->device, r->device_note[0] ? ": " : "", r->device_note);
  if (o->pass & FM_PASS_FWD) print_pass(o->bwd ? "forward" : "kernel", r, r->device_note);
  if (o->bwd) print_pass("backward", o->bwd, r->device_note);
  printf("trace       %s\n", out);
}

void run_print_report(const run_case_out *c, const char *out, int json) {
  if (!json) {
    print_report(c, out);
    return;
  }
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "kind", "run");
  fm_json_string(&j, "pass", fm_pass_name(c->pass ? c->pass : FM_PASS_FWD));
  fm_run_json(c->info, &j);
  fm_analysis_json(c->analysis, &j);
  fm_run_backward_json(&j, c->bwd);
  fm_json_string(&j, "trace", out);
  fm_json_end(&j);
  fputs(j.buf, stdout);
  fm_json_free(&j);
}
