/* fmsim bench: the FlashMask paper's kernel table on the GPU, and the sparsity
 * sweep of its Figure 4a.
 *
 * Cases: the twelve families x S in {8K, 32K, 128K}, B = tokens / S (128K),
 * H = hidden / D (4096), documents from the paper's samples (sample 0), head
 * dim 128 (64 with --head-dims), forward, bf16. Each case exports the very
 * interval vectors it runs (masks/ID.npy, int32 [nb, nh, Sk, 4], listed in
 * masks/index.json) so that bench/peer_flex.py runs FlexAttention on the same
 * masks. Per case: skip time (median after warm-up, L2 flushed), TFLOP/s with
 * the paper's count, no-skip time and the skip speed-up next to 1/(1-rho),
 * the instrumented build's time (its overhead) and its tile classes against
 * the CPU's, HBM bytes counted next to the cost model's.
 *
 * Sweep: causal_document, document and share_question at 32K with drawn
 * documents (1..64 per draw), skip time against 1 - rho, linear fit and R^2
 * per family and pooled.
 *
 * Output folder: summary.json ("kind": "bench", rewritten after every case so
 * that a run cut short keeps what it finished), table.txt, sweep.json (one
 * record per sweep mask: family, sparsity, time_ms), masks/.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "commands.h"
#include "fm_cost.h"
#include "fm_fileio.h"
#include "fm_json.h"
#include "fm_kernels.h"
#include "fm_paper.h"
#include "fm_run_trace.h"
#include "fm_tiles.h"
#include "fm_trace.h"
#ifdef FM_HAVE_GPU_RUN
#include "fm_measure.h"
#endif

static const char *cmd = "bench";

static const char *help =
    "usage: fmsim bench --out DIR [options]\n\n"
    "The FlashMask paper's kernel table on the GPU: the twelve families x S in {8K, 32K, 128K},\n"
    "B = tokens/S, H = hidden/D, documents from the paper's samples, forward, bf16; then the\n"
    "sparsity sweep of its Figure 4a (causal_document, document, share_question at 32K, drawn\n"
    "documents) with a linear fit of time against 1 - rho. Exports every case's interval vectors\n"
    "(DIR/masks/) for bench/peer_flex.py; bench/merge.py joins the peer's figures.\n\n"
    "  --out DIR             output folder (required)\n"
    "  --head-dims LIST      head dims, 64 and/or 128 (default 128)\n"
    "  --seqlens LIST        sequence lengths (default 8192,32768,131072)\n"
    "  --families LIST       families (default: all twelve)\n"
    "  --sample K            document sample of each S (default 0)\n"
    "  --tokens N            B*S of every case (default 131072)\n"
    "  --hidden N            H*D of every case (default 4096)\n"
    "  --warmup N --reps N   skip build: untimed then timed launches (default 2, 5)\n"
    "  --noskip-reps N       no-skip build timed launches, 0 = not run (default 2)\n"
    "  --instrument-reps N   instrumented build timed launches, 0 = not run (default 3)\n"
    "  --no-bytes            no counted launch\n"
    "  --no-cupti            CUDA events only, no counters\n"
    "  --sweep-draws N       documents drawn per sweep family, 0 = no sweep (default 16)\n"
    "  --sweep-seqlen S      sweep length (default 32768)\n"
    "  --sweep-reps N        timed launches per sweep point (default 3)\n"
    "  --budget-s SECONDS    start no case or draw after this many seconds (default none)\n"
    "  --export-only         write the masks, the index and the model (no GPU needed)\n"
    "  --seed N              seed of every random draw (default 0)\n"
    "  --samples FILE        document samples in the paper's format (default: built in)\n";

#define MAX_LIST 16

typedef struct bench_opts {
  int64_t hd[MAX_LIST];
  int nhd;
  int64_t seq[MAX_LIST];
  int nseq;
  const char *fam[MAX_LIST];
  int nfam;
  int64_t sample, tokens, hidden, warmup, reps, noskip_reps, inst_reps;
  int64_t sweep_draws, sweep_seqlen, sweep_reps, seed;
  double budget_s;
  int bytes, cupti, export_only;
  const char *out, *samples_path;
} bench_opts;

typedef struct bench_case {
  char id[96];
  const char *family;
  int64_t S, B, H, D;
  int32_t nb, nh, br, bc;
  int causal;
  char params[512], docs_source[160];
  double rho, rho_exact, rho128;
  fm_cost cost, cost_noskip;
  int ran;
  char skipped[160];
  fm_timing skip, noskip, inst;
  fm_measured_bytes meas;
  int64_t class_mismatches;
} bench_case;

typedef struct sweep_point {
  const char *family;
  int32_t draw, ndocs;
  double rho, rho128, ms, tflops; /* rho at the kernel's tile and at 128 x 128 */
  char source[32];
} sweep_point;

typedef struct sweep_fit {
  const char *family; /* NULL: pooled */
  int n;
  double slope_ms, intercept_ms, r2;
} sweep_fit;

typedef struct bench_state {
  const bench_opts *o;
  char device[160], device_note[256];
  bench_case *cases;
  int ncases, cap;
  sweep_point *pts;
  int npts, ptcap;
  sweep_fit fits[4];
  int nfits;
  double t0;
} bench_state;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_list(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out,
                      int *n) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", text);
  *n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (*n == MAX_LIST) {
      cli_error(cmd, "%s: at most %d values", opt, MAX_LIST);
      return -1;
    }
    if (cli_int(cmd, opt, tok, lo, hi, &out[(*n)++])) return -1;
  }
  if (*n == 0) {
    cli_error(cmd, "%s: empty list", opt);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ JSON */

static void timing_brief(fm_json *j, const char *key, const fm_timing *t, double flops) {
  if (!t->source[0]) {
    fm_json_null(j, key);
    return;
  }
  fm_json_object(j, key);
  fm_json_double(j, "median_ms", t->median_ms);
  fm_json_double(j, "min_ms", t->min_ms);
  fm_json_double(j, "max_ms", t->max_ms);
  fm_json_int(j, "reps", t->reps);
  fm_json_string(j, "source", t->source);
  if (t->note[0]) fm_json_string(j, "note", t->note);
  fm_json_double(j, "events_median_ms", t->events_median_ms);
  fm_json_double(j, "tflops", fm_cost_tflops(flops, t->median_ms));
  fm_json_array(j, "kernels");
  for (int k = 0; k < t->nkernels; k++) {
    fm_json_object(j, NULL);
    fm_json_string(j, "name", t->kernels[k].name);
    fm_json_double(j, "median_ms", t->kernels[k].median_ms);
    fm_json_int(j, "registers", t->kernels[k].registers);
    fm_json_int(j, "dynamic_smem", t->kernels[k].dynamic_smem);
    fm_json_end(j);
  }
  fm_json_end(j);
  fm_json_end(j);
}

static double full_tflops(const bench_state *st, int64_t S, int64_t D) {
  for (int i = 0; i < st->ncases; i++) {
    const bench_case *c = &st->cases[i];
    if (c->S == S && c->D == D && !strcmp(c->family, "full") && c->skip.source[0])
      return fm_cost_tflops(c->cost.flops_paper, c->skip.median_ms);
  }
  return NAN;
}

static void case_json(const bench_state *st, const bench_case *c, fm_json *j) {
  fm_json_object(j, NULL);
  fm_json_string(j, "id", c->id);
  fm_json_string(j, "family", c->family);
  fm_json_int(j, "seqlen", c->S);
  fm_json_int(j, "batch", c->B);
  fm_json_int(j, "heads", c->H);
  fm_json_int(j, "head_dim", c->D);
  fm_json_int(j, "mask_nb", c->nb);
  fm_json_int(j, "mask_nh", c->nh);
  fm_json_bool(j, "causal", c->causal);
  fm_json_string(j, "params", c->params);
  fm_json_string(j, "docs_source", c->docs_source);
  char path[160];
  snprintf(path, sizeof path, "masks/%s.npy", c->id);
  fm_json_string(j, "columns_file", path);
  fm_json_int(j, "br", c->br);
  fm_json_int(j, "bc", c->bc);
  fm_json_double(j, "rho", c->rho);
  fm_json_double(j, "rho_exact", c->rho_exact);
  fm_json_double(j, "rho_128", c->rho128);
  double paper = fm_paper_sparsity(c->family, c->S);
  if (paper >= 0) fm_json_double(j, "rho_paper_128", paper);
  else fm_json_null(j, "rho_paper_128");
  fm_json_double(j, "flops_paper", c->cost.flops_paper);
  fm_json_double(j, "flops_executed", c->cost.flops_executed);
  if (c->skipped[0]) fm_json_string(j, "skipped", c->skipped);
  timing_brief(j, "skip", &c->skip, c->cost.flops_paper);
  timing_brief(j, "noskip", &c->noskip, c->cost.flops_paper);
  timing_brief(j, "instrumented", &c->inst, c->cost.flops_paper);
  double ideal = c->rho < 1 ? 1.0 / (1.0 - c->rho) : NAN;
  fm_json_double(j, "ideal_speedup", ideal);
  if (c->skip.source[0] && c->noskip.source[0])
    fm_json_double(j, "speedup_skip_over_noskip", c->noskip.median_ms / c->skip.median_ms);
  else fm_json_null(j, "speedup_skip_over_noskip");
  if (c->skip.source[0] && c->inst.source[0])
    fm_json_double(j, "instrumentation_overhead", c->inst.median_ms / c->skip.median_ms - 1.0);
  else fm_json_null(j, "instrumentation_overhead");
  double full = full_tflops(st, c->S, c->D);
  if (c->skip.source[0] && isfinite(full))
    fm_json_double(j, "tflops_over_full", fm_cost_tflops(c->cost.flops_paper, c->skip.median_ms) / full);
  else fm_json_null(j, "tflops_over_full");
  if (c->class_mismatches >= 0) fm_json_int(j, "class_mismatches", c->class_mismatches);
  else fm_json_null(j, "class_mismatches");
  fm_json_object(j, "traffic");
  fm_json_int(j, "model_read", c->cost.bytes_read);
  fm_json_int(j, "model_write", c->cost.bytes_write);
  fm_json_int(j, "model_unique_read", c->cost.unique_read);
  fm_json_int(j, "model_unique_write", c->cost.unique_write);
  if (c->meas.source[0]) {
    fm_json_string(j, "measured_source", c->meas.source);
    fm_json_double(j, "dram_read", c->meas.dram_read);
    fm_json_double(j, "dram_write", c->meas.dram_write);
    fm_json_double(j, "l2_read_bytes", 32.0 * c->meas.l2_read_sectors);
    fm_json_double(j, "dram_read_over_unique", c->meas.dram_read / (double)c->cost.unique_read);
    fm_json_double(j, "l2_read_over_model", 32.0 * c->meas.l2_read_sectors / (double)c->cost.bytes_read);
  } else {
    fm_json_null(j, "measured_source");
    fm_json_string(j, "measured_note", c->meas.note);
  }
  fm_json_end(j);
  fm_json_end(j);
}

#ifdef FM_HAVE_GPU_RUN
static void fit_line(const sweep_point *p, int n, const char *family, sweep_fit *f) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (family && strcmp(p[i].family, family)) continue;
    if (!isfinite(p[i].ms)) continue;
    double x = 1.0 - p[i].rho, y = p[i].ms;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    k++;
  }
  memset(f, 0, sizeof *f);
  f->family = family;
  f->n = k;
  f->slope_ms = f->intercept_ms = f->r2 = NAN;
  if (k < 2) return;
  double den = k * sxx - sx * sx;
  if (den == 0) return;
  f->slope_ms = (k * sxy - sx * sy) / den;
  f->intercept_ms = (sy - f->slope_ms * sx) / k;
  double my = sy / k, ssr = 0, sst = 0;
  for (int i = 0; i < n; i++) {
    if (family && strcmp(p[i].family, family)) continue;
    if (!isfinite(p[i].ms)) continue;
    double x = 1.0 - p[i].rho, y = p[i].ms, e = y - (f->intercept_ms + f->slope_ms * x);
    ssr += e * e;
    sst += (y - my) * (y - my);
  }
  f->r2 = sst > 0 ? 1.0 - ssr / sst : NAN;
}

#endif

static fm_status write_summary(const bench_state *st, int done, fm_err *err) {
  const bench_opts *o = st->o;
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "format", FM_TRACE_FORMAT);
  fm_json_int(&j, "version", FM_TRACE_VERSION);
  fm_json_string(&j, "kind", "bench");
  fm_json_bool(&j, "complete", done);
  fm_json_string(&j, "device", st->device);
  fm_json_string(&j, "device_note", st->device_note);
  fm_json_object(&j, "settings");
  fm_json_int(&j, "tokens", o->tokens);
  fm_json_int(&j, "hidden", o->hidden);
  fm_json_int(&j, "sample", o->sample);
  fm_json_int(&j, "seed", o->seed);
  fm_json_int(&j, "warmup", o->warmup);
  fm_json_int(&j, "reps", o->reps);
  fm_json_int(&j, "noskip_reps", o->noskip_reps);
  fm_json_int(&j, "instrument_reps", o->inst_reps);
  fm_json_bool(&j, "l2_flushed", 1);
  fm_json_string(&j, "flops", "4*B*H*S*S*D*(1-rho), rho by the min/max rule at the kernel's tile size");
  fm_json_string(&j, "dtype", "bf16");
  fm_json_end(&j);
  fm_json_array(&j, "cases");
  for (int i = 0; i < st->ncases; i++) case_json(st, &st->cases[i], &j);
  fm_json_end(&j);
  fm_json_object(&j, "sweep");
  fm_json_int(&j, "seqlen", o->sweep_seqlen);
  fm_json_array(&j, "points");
  for (int i = 0; i < st->npts; i++) {
    const sweep_point *p = &st->pts[i];
    fm_json_object(&j, NULL);
    fm_json_string(&j, "family", p->family);
    fm_json_int(&j, "draw", p->draw);
    fm_json_int(&j, "docs", p->ndocs);
    fm_json_double(&j, "rho", p->rho);
    fm_json_double(&j, "median_ms", p->ms);
    fm_json_double(&j, "tflops", p->tflops);
    fm_json_string(&j, "source", p->source);
    fm_json_end(&j);
  }
  fm_json_end(&j);
  fm_json_array(&j, "fits");
  for (int i = 0; i < st->nfits; i++) {
    const sweep_fit *f = &st->fits[i];
    fm_json_object(&j, NULL);
    fm_json_string(&j, "family", f->family ? f->family : "pooled");
    fm_json_int(&j, "n", f->n);
    fm_json_double(&j, "slope_ms_per_density", f->slope_ms);
    fm_json_double(&j, "intercept_ms", f->intercept_ms);
    fm_json_double(&j, "r2", f->r2);
    fm_json_end(&j);
  }
  fm_json_end(&j);
  fm_json_string(&j, "model", "median_ms = intercept + slope * (1 - rho)");
  fm_json_end(&j);
  fm_json_object(&j, "files");
  fm_json_string(&j, "masks_index", "masks/index.json");
  fm_json_string(&j, "table", "table.txt");
  fm_json_string(&j, "sweep", st->npts ? "sweep.json" : NULL);
  fm_json_end(&j);
  fm_json_end(&j);
  char path[4200];
  snprintf(path, sizeof path, "%s/summary.json", o->out);
  fm_status s = j.oom ? fm_fail(err, FM_ENOMEM, "out of memory writing summary.json")
                      : fm_write_file_atomic(path, j.buf, j.len, err);
  fm_json_free(&j);
  return s;
}

#ifdef FM_HAVE_GPU_RUN
/* sweep.json: one record per sweep mask (what notebooks/02 reads). */
static fm_status write_sweep(const bench_state *st, fm_err *err) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_array(&j, NULL);
  for (int i = 0; i < st->npts; i++) {
    const sweep_point *p = &st->pts[i];
    fm_json_object(&j, NULL);
    fm_json_string(&j, "family", p->family);
    fm_json_int(&j, "seqlen", st->o->sweep_seqlen);
    fm_json_int(&j, "draw", p->draw);
    fm_json_int(&j, "docs", p->ndocs);
    fm_json_double(&j, "sparsity", p->rho);
    fm_json_double(&j, "sparsity_128", p->rho128);
    fm_json_double(&j, "time_ms", p->ms);
    fm_json_double(&j, "tflops", p->tflops);
    fm_json_string(&j, "source", p->source);
    fm_json_end(&j);
  }
  fm_json_end(&j);
  char path[4200];
  snprintf(path, sizeof path, "%s/sweep.json", st->o->out);
  fm_status s = j.oom ? fm_fail(err, FM_ENOMEM, "out of memory writing sweep.json")
                      : fm_write_file_atomic(path, j.buf, j.len, err);
  fm_json_free(&j);
  return s;
}

#endif

static fm_status write_index(const bench_state *st, fm_err *err) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "format", "fmsim-bench-masks");
  fm_json_int(&j, "version", 1);
  fm_json_string(&j, "layout", "int32 [nb, nh, Sk, 4]: LTS, LTE, UTS, UTE; masked(i, j) = i in "
                               "[LTS, LTE) or i in [UTS, UTE) or (causal and i < j)");
  fm_json_int(&j, "tokens", st->o->tokens);
  fm_json_int(&j, "hidden", st->o->hidden);
  fm_json_array(&j, "cases");
  for (int i = 0; i < st->ncases; i++) {
    const bench_case *c = &st->cases[i];
    char path[160];
    snprintf(path, sizeof path, "%s.npy", c->id);
    fm_json_object(&j, NULL);
    fm_json_string(&j, "id", c->id);
    fm_json_string(&j, "family", c->family);
    fm_json_int(&j, "seqlen", c->S);
    fm_json_int(&j, "batch", c->B);
    fm_json_int(&j, "heads", c->H);
    fm_json_int(&j, "head_dim", c->D);
    fm_json_bool(&j, "causal", c->causal);
    fm_json_int(&j, "mask_nb", c->nb);
    fm_json_int(&j, "mask_nh", c->nh);
    fm_json_string(&j, "columns", path);
    fm_json_double(&j, "rho", c->rho);
    fm_json_double(&j, "rho_128", c->rho128);
    fm_json_end(&j);
  }
  fm_json_end(&j);
  fm_json_end(&j);
  char path[4200];
  snprintf(path, sizeof path, "%s/masks/index.json", st->o->out);
  fm_status s = j.oom ? fm_fail(err, FM_ENOMEM, "out of memory writing index.json")
                      : fm_write_file_atomic(path, j.buf, j.len, err);
  fm_json_free(&j);
  return s;
}

static fm_status write_table(const bench_state *st, FILE *echo, fm_err *err) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return fm_fail(err, FM_ENOMEM, "out of memory writing the table");
  fprintf(f, "fmsim bench on %s: forward, bf16, B = %lld/S, H = %lld/D, L2 flushed, median ms\n",
          st->device, (long long)st->o->tokens, (long long)st->o->hidden);
  fprintf(f, "TFLOP/s = 4*B*H*S*S*D*(1-rho)/time, rho at the kernel's tile; eff = TFLOP/s / full-mask "
             "TFLOP/s; speedup = noskip/skip next to 1/(1-rho); inst = instrumented overhead\n\n");
  fprintf(f, "%-4s %-7s %-22s %6s %10s %8s %6s %10s %7s %7s %7s %6s\n", "D", "S", "family", "rho",
          "skip ms", "TFLOP/s", "eff", "noskip ms", "speedup", "ideal", "inst%", "class");
  for (int i = 0; i < st->ncases; i++) {
    const bench_case *c = &st->cases[i];
    fprintf(f, "%-4lld %-7lld %-22s %6.3f ", (long long)c->D, (long long)c->S, c->family, c->rho);
    if (!c->skip.source[0]) {
      fprintf(f, "%s\n", c->skipped[0] ? c->skipped : "not run");
      continue;
    }
    double tf = fm_cost_tflops(c->cost.flops_paper, c->skip.median_ms);
    double full = full_tflops(st, c->S, c->D);
    fprintf(f, "%10.3f %8.1f %6.2f ", c->skip.median_ms, tf, tf / full);
    if (c->noskip.source[0])
      fprintf(f, "%10.3f %7.2f ", c->noskip.median_ms, c->noskip.median_ms / c->skip.median_ms);
    else fprintf(f, "%10s %7s ", "-", "-");
    fprintf(f, "%7.2f ", c->rho < 1 ? 1.0 / (1.0 - c->rho) : NAN);
    if (c->inst.source[0]) fprintf(f, "%+7.2f ", 100.0 * (c->inst.median_ms / c->skip.median_ms - 1));
    else fprintf(f, "%7s ", "-");
    if (c->class_mismatches >= 0) fprintf(f, "%6s", c->class_mismatches ? "DIFF" : "same");
    else fprintf(f, "%6s", "-");
    fprintf(f, "\n");
  }
  if (st->npts) {
    fprintf(f, "\nsparsity sweep at S=%lld (%d points): median_ms = a + b * (1 - rho)\n",
            (long long)st->o->sweep_seqlen, st->npts);
    for (int i = 0; i < st->nfits; i++)
      fprintf(f, "  %-18s n=%-3d a=%8.4f ms  b=%9.4f ms  R^2=%.4f\n",
              st->fits[i].family ? st->fits[i].family : "pooled", st->fits[i].n,
              st->fits[i].intercept_ms, st->fits[i].slope_ms, st->fits[i].r2);
  }
  fclose(f);
  if (echo) fputs(buf, echo);
  char path[4200];
  snprintf(path, sizeof path, "%s/table.txt", st->o->out);
  fm_status s = fm_write_file_atomic(path, buf, len, err);
  free(buf);
  return s;
}

/* ------------------------------------------------------------------ cases */

static int build_case_mask(const fm_sample_set *samples, const char *family, int64_t S,
                           int64_t B, int64_t H, int sample, uint64_t seed, int nparams,
                           const char *const *params, fm_colmask **m, fm_family_used *used) {
  fm_err err;
  fm_family_request req = {family, S, B, H, seed, sample, samples, nparams, params};
  if (fm_family_build(&req, m, used, &err) != FM_OK) {
    cli_error(cmd, "%s at S=%lld: %s", family, (long long)S, err.msg);
    return -1;
  }
  return 0;
}

/* Classifies m at the kernel's tile and at 128 x 128, computes the model. */
static int model_case(bench_case *c, const fm_colmask *m) {
  fm_err err;
  fm_tile_counts counts, c128;
  int32_t ns = fm_colmask_nsets(m);
  int32_t tr = (int32_t)((c->S + c->br - 1) / c->br), tc = (int32_t)((c->S + c->bc - 1) / c->bc);
  uint8_t *cls = malloc((size_t)ns * (size_t)tr * (size_t)tc);
  if (!cls) {
    cli_error(cmd, "out of memory classifying %s", c->id);
    return -1;
  }
  fm_cost_shape sh = {c->B, c->H, (int32_t)c->D, c->br, c->bc, 2, FM_VARIANT_SKIP};
  if (fm_classify(m, c->br, c->bc, &counts, cls, NULL, &err) != FM_OK ||
      fm_classify(m, 128, 128, &c128, NULL, NULL, &err) != FM_OK ||
      fm_cost_compute(m, &sh, cls, NULL, &c->cost, &err) != FM_OK) {
    free(cls);
    cli_error(cmd, "%s: %s", c->id, err.msg);
    return -1;
  }
  sh.variant = FM_VARIANT_NOSKIP;
  fm_cost_compute(m, &sh, cls, NULL, &c->cost_noskip, NULL);
  free(cls);
  c->rho = counts.sparsity;
  c->rho_exact = counts.sparsity_exact;
  c->rho128 = c128.sparsity;
  return 0;
}

#ifdef FM_HAVE_GPU_RUN
/* Runs one case on the GPU: skip (timed, counted, instrumented), then noskip. */
static int gpu_case(fm_gpu_session *sess, const bench_opts *o, bench_case *c, const fm_colmask *m) {
  fm_err err;
  fm_gpu_case gc = {.mask = m, .batch = (int32_t)c->B, .heads = (int32_t)c->H, .head_dim = (int32_t)c->D, .variant = FM_VARIANT_SKIP, .kernel = FM_KERNEL_SM80};
  fm_gpu_opts go = {(int32_t)o->warmup, (int32_t)o->reps, o->inst_reps > 0, (int32_t)o->inst_reps,
                    o->bytes && o->cupti, o->cupti, o->inst_reps > 0, 0};
  fm_gpu_result r;
  if (fm_gpu_session_run(sess, &gc, &go, &r, &err) != FM_OK) {
    cli_error(cmd, "%s: GPU run failed: %s", c->id, err.msg);
    fm_gpu_result_free(&r);
    return -1;
  }
  c->skip = r.timing;
  c->inst = r.timing_instrumented;
  c->meas = r.measured;
  if (r.tile_class) {
    int64_t per = (int64_t)r.tr * r.tc;
    uint8_t *cls = malloc((size_t)fm_colmask_nsets(m) * (size_t)per);
    fm_tile_counts counts;
    if (cls && fm_classify(m, c->br, c->bc, &counts, cls, NULL, NULL) == FM_OK)
      c->class_mismatches = fm_class_mismatches(m, cls, r.tile_class, c->B, c->H, per);
    free(cls);
  }
  fm_gpu_result_free(&r);
  if (o->noskip_reps > 0) {
    gc.variant = FM_VARIANT_NOSKIP;
    fm_gpu_opts gn = {1, (int32_t)o->noskip_reps, 0, 0, 0, o->cupti, 0, 0};
    if (fm_gpu_session_run(sess, &gc, &gn, &r, &err) != FM_OK) {
      cli_error(cmd, "%s: GPU run (noskip) failed: %s", c->id, err.msg);
      fm_gpu_result_free(&r);
      return -1;
    }
    c->noskip = r.timing;
    fm_gpu_result_free(&r);
  }
  c->ran = 1;
  return 0;
}
#endif

static fm_status write_columns(const bench_opts *o, const bench_case *c, const fm_colmask *m,
                               fm_err *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/masks/%s.npy", o->out, c->id);
  return fm_trace_write_columns(path, m, err);
}

int cmd_bench(int argc, char **argv) {
  enum {
    O_OUT = 3001, O_HD, O_SEQ, O_FAM, O_SAMPLE, O_TOK, O_HID, O_WARM, O_REPS, O_NSR, O_ISR,
    O_NOBYTES, O_NOCUPTI, O_SWD, O_SWS, O_SWR, O_BUDGET, O_EXPORT, O_SEED, O_SAMPLES
  };
  static const struct option longopts[] = {
      {"out", required_argument, 0, O_OUT},          {"head-dims", required_argument, 0, O_HD},
      {"seqlens", required_argument, 0, O_SEQ},      {"families", required_argument, 0, O_FAM},
      {"sample", required_argument, 0, O_SAMPLE},    {"tokens", required_argument, 0, O_TOK},
      {"hidden", required_argument, 0, O_HID},       {"warmup", required_argument, 0, O_WARM},
      {"reps", required_argument, 0, O_REPS},        {"noskip-reps", required_argument, 0, O_NSR},
      {"instrument-reps", required_argument, 0, O_ISR}, {"no-bytes", no_argument, 0, O_NOBYTES},
      {"no-cupti", no_argument, 0, O_NOCUPTI},       {"sweep-draws", required_argument, 0, O_SWD},
      {"sweep-seqlen", required_argument, 0, O_SWS}, {"sweep-reps", required_argument, 0, O_SWR},
      {"budget-s", required_argument, 0, O_BUDGET},  {"export-only", no_argument, 0, O_EXPORT},
      {"seed", required_argument, 0, O_SEED},        {"samples", required_argument, 0, O_SAMPLES},
      {"help", no_argument, 0, 'h'},                 {0, 0, 0, 0}};
  bench_opts o;
  memset(&o, 0, sizeof o);
  o.hd[0] = 128;
  o.nhd = 1;
  o.seq[0] = 8192;
  o.seq[1] = 32768;
  o.seq[2] = 131072;
  o.nseq = 3;
  o.tokens = 131072;
  o.hidden = 4096;
  o.warmup = 2;
  o.reps = 5;
  o.noskip_reps = 2;
  o.inst_reps = 3;
  o.sweep_draws = 16;
  o.sweep_seqlen = 32768;
  o.sweep_reps = 3;
  o.bytes = o.cupti = 1;
  int64_t v;
  int opt;
  opterr = 0;
  optind = 1;
  while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    switch (opt) {
    case O_OUT: o.out = optarg; break;
    case O_HD:
      if (parse_list("--head-dims", optarg, 1, 1 << 20, o.hd, &o.nhd)) return FM_EXIT_USAGE;
      for (int i = 0; i < o.nhd; i++)
        if (o.hd[i] != 64 && o.hd[i] != 128) {
          cli_error(cmd, "--head-dims: head dim %lld: the kernels support 64 and 128",
                    (long long)o.hd[i]);
          return FM_EXIT_USAGE;
        }
      break;
    case O_SEQ:
      if (parse_list("--seqlens", optarg, 1, FM_MAX_SEQLEN, o.seq, &o.nseq)) return FM_EXIT_USAGE;
      break;
    case O_FAM: {
      static char buf[1024];
      snprintf(buf, sizeof buf, "%s", optarg);
      o.nfam = 0;
      for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!fm_family_find(t)) {
          cli_error(cmd, "--families: unknown family '%s' (fmsim families lists them)", t);
          return FM_EXIT_USAGE;
        }
        if (o.nfam == MAX_LIST) {
          cli_error(cmd, "--families: at most %d", MAX_LIST);
          return FM_EXIT_USAGE;
        }
        o.fam[o.nfam++] = fm_family_find(t)->name;
      }
      if (!o.nfam) {
        cli_error(cmd, "--families: empty list");
        return FM_EXIT_USAGE;
      }
      break;
    }
    case O_SAMPLE:
      if (cli_int(cmd, "--sample", optarg, 0, 1 << 20, &o.sample)) return FM_EXIT_USAGE;
      break;
    case O_TOK:
      if (cli_int(cmd, "--tokens", optarg, 1, (int64_t)1 << 40, &o.tokens)) return FM_EXIT_USAGE;
      break;
    case O_HID:
      if (cli_int(cmd, "--hidden", optarg, 64, 1 << 20, &o.hidden)) return FM_EXIT_USAGE;
      break;
    case O_WARM:
      if (cli_int(cmd, "--warmup", optarg, 0, 1000, &o.warmup)) return FM_EXIT_USAGE;
      break;
    case O_REPS:
      if (cli_int(cmd, "--reps", optarg, 1, 10000, &o.reps)) return FM_EXIT_USAGE;
      break;
    case O_NSR:
      if (cli_int(cmd, "--noskip-reps", optarg, 0, 10000, &o.noskip_reps)) return FM_EXIT_USAGE;
      break;
    case O_ISR:
      if (cli_int(cmd, "--instrument-reps", optarg, 0, 10000, &o.inst_reps)) return FM_EXIT_USAGE;
      break;
    case O_NOBYTES: o.bytes = 0; break;
    case O_NOCUPTI: o.cupti = 0; break;
    case O_SWD:
      if (cli_int(cmd, "--sweep-draws", optarg, 0, 10000, &o.sweep_draws)) return FM_EXIT_USAGE;
      break;
    case O_SWS:
      if (cli_int(cmd, "--sweep-seqlen", optarg, 1, FM_MAX_SEQLEN, &o.sweep_seqlen))
        return FM_EXIT_USAGE;
      break;
    case O_SWR:
      if (cli_int(cmd, "--sweep-reps", optarg, 1, 10000, &o.sweep_reps)) return FM_EXIT_USAGE;
      break;
    case O_BUDGET:
      if (cli_int(cmd, "--budget-s", optarg, 1, 1 << 30, &v)) return FM_EXIT_USAGE;
      o.budget_s = (double)v;
      break;
    case O_EXPORT: o.export_only = 1; break;
    case O_SEED:
      if (cli_int(cmd, "--seed", optarg, 0, INT64_MAX, &o.seed)) return FM_EXIT_USAGE;
      break;
    case O_SAMPLES: o.samples_path = optarg; break;
    case 'h': fputs(help, stdout); return FM_EXIT_OK;
    default: return cli_bad_option(cmd, opt, argv);
    }
  }
  if (optind < argc) {
    cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    return FM_EXIT_USAGE;
  }
  if (!o.out) {
    cli_error(cmd, "--out DIR is required");
    return FM_EXIT_USAGE;
  }
  if (!o.nfam)
    for (int f = 0; f < fm_family_count() && f < MAX_LIST; f++) o.fam[o.nfam++] = fm_family_at(f)->name;
  /* every case's shape, checked before anything is written */
  for (int d = 0; d < o.nhd; d++) {
    if (o.hidden % o.hd[d]) {
      cli_error(cmd, "--hidden %lld is not a multiple of head dim %lld", (long long)o.hidden,
                (long long)o.hd[d]);
      return FM_EXIT_USAGE;
    }
    if (o.hidden / o.hd[d] > 65535) {
      cli_error(cmd, "--hidden %lld / head dim %lld = %lld heads (at most 65535)",
                (long long)o.hidden, (long long)o.hd[d], (long long)(o.hidden / o.hd[d]));
      return FM_EXIT_USAGE;
    }
  }
  for (int s = 0; s < o.nseq; s++)
    if (o.tokens % o.seq[s] || o.tokens / o.seq[s] > 65535) {
      cli_error(cmd, "--seqlens: S=%lld must divide --tokens %lld (B = tokens/S, at most 65535)",
                (long long)o.seq[s], (long long)o.tokens);
      return FM_EXIT_USAGE;
    }
  if (!o.export_only && o.sweep_draws && (o.tokens % o.sweep_seqlen || o.tokens / o.sweep_seqlen > 65535)) {
    cli_error(cmd, "--sweep-seqlen %lld must divide --tokens %lld", (long long)o.sweep_seqlen,
              (long long)o.tokens);
    return FM_EXIT_USAGE;
  }

  bench_state st;
  memset(&st, 0, sizeof st);
  st.o = &o;
  st.t0 = now_s();
  fm_err err;
#ifdef FM_HAVE_GPU_RUN
  fm_gpu_session *sess = NULL;
  if (!o.export_only) {
    char desc[256];
    if (fm_attn_device_info(desc, sizeof desc, &err) != FM_OK) {
      cli_error(cmd, "no usable GPU (%s); --export-only writes the masks and the model without one",
                err.msg);
      return FM_EXIT_FAIL;
    }
    if (fm_gpu_session_create(o.tokens, o.hidden, 0, (uint64_t)o.seed, &sess, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      return FM_EXIT_FAIL;
    }
    snprintf(st.device, sizeof st.device, "%s", fm_gpu_session_props(sess)->name);
  }
#else
  if (!o.export_only) {
    cli_error(cmd, "built without the CUDA kernels: the benchmark needs a GPU build; "
              "--export-only writes the masks and the model without one");
    return FM_EXIT_FAIL;
  }
#endif
  if (o.export_only) {
    snprintf(st.device, sizeof st.device, "cpu-simulation");
    snprintf(st.device_note, sizeof st.device_note,
             "--export-only: masks and cost model, no timings");
  }
  fm_sample_set samples;
  fm_status fs = o.samples_path ? fm_samples_load(o.samples_path, &samples, &err)
                                : fm_samples_builtin(&samples, &err);
  if (fs != FM_OK) {
    cli_error(cmd, "%s", err.msg);
#ifdef FM_HAVE_GPU_RUN
    fm_gpu_session_destroy(sess);
#endif
    return FM_EXIT_USAGE;
  }
  /* the paper's samples must hold the chosen sample for every S that has samples */
  for (int s = 0; s < o.nseq; s++) {
    int have = fm_samples_count(&samples, o.seq[s]);
    if (have > 0 && o.sample >= have) {
      cli_error(cmd, "--sample %lld does not exist for S=%lld (there are %d: 0..%d)",
                (long long)o.sample, (long long)o.seq[s], have, have - 1);
      fm_samples_free(&samples);
#ifdef FM_HAVE_GPU_RUN
      fm_gpu_session_destroy(sess);
#endif
      return FM_EXIT_USAGE;
    }
  }
  int rc = FM_EXIT_OK;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/masks", o.out);
  if (fm_mkdir_p(dir, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    rc = FM_EXIT_USAGE;
  }
  st.cap = o.nhd * o.nseq * o.nfam;
  st.cases = calloc((size_t)st.cap, sizeof *st.cases);
  if (!st.cases) {
    cli_error(cmd, "out of memory");
    rc = FM_EXIT_FAIL;
  }
  /* the table: build, model and export every case; run it on the GPU */
  for (int d = 0; d < o.nhd && rc == FM_EXIT_OK; d++)
    for (int s = 0; s < o.nseq && rc == FM_EXIT_OK; s++)
      for (int f = 0; f < o.nfam && rc == FM_EXIT_OK; f++) {
        bench_case *c = &st.cases[st.ncases];
        memset(c, 0, sizeof *c);
        const fm_family_info *fam = fm_family_find(o.fam[f]);
        c->family = fam->name;
        c->S = o.seq[s];
        c->D = o.hd[d];
        c->B = o.tokens / c->S;
        c->H = o.hidden / c->D;
        c->class_mismatches = -1;
        snprintf(c->id, sizeof c->id, "%s_S%lld_hd%lld", c->family, (long long)c->S, (long long)c->D);
        fm_kernel_tile_size(FM_KERNEL_SM80, (int32_t)c->D, &c->br, &c->bc, NULL);
        fm_colmask *m = NULL;
        fm_family_used used;
        int sample = fam->uses_docs && fm_samples_count(&samples, c->S) > 0 ? (int)o.sample : -1;
        if (build_case_mask(&samples, c->family, c->S, c->B, c->H, sample, (uint64_t)o.seed, 0,
                            NULL, &m, &used) ||
            model_case(c, m)) {
          fm_colmask_destroy(m);
          rc = FM_EXIT_USAGE;
          break;
        }
        st.ncases++;
        c->nb = fm_colmask_nb(m);
        c->nh = fm_colmask_nh(m);
        c->causal = fm_colmask_causal(m);
        snprintf(c->params, sizeof c->params, "%s", used.params);
        snprintf(c->docs_source, sizeof c->docs_source, "%s", used.docs_source);
        if (write_columns(&o, c, m, &err) != FM_OK || write_index(&st, &err) != FM_OK) {
          cli_error(cmd, "%s", err.msg);
          fm_colmask_destroy(m);
          rc = FM_EXIT_FAIL;
          break;
        }
#ifdef FM_HAVE_GPU_RUN
        if (sess) {
          if (o.budget_s > 0 && now_s() - st.t0 > o.budget_s) {
            snprintf(c->skipped, sizeof c->skipped, "not run: time budget of %.0f s spent", o.budget_s);
          } else if (gpu_case(sess, &o, c, m)) {
            rc = FM_EXIT_FAIL;
          } else {
            fprintf(stderr, "fmsim bench: %-32s rho %.3f  skip %.3f ms (%.1f TFLOP/s)  noskip %.3f ms  [%.0f s]\n",
                    c->id, c->rho, c->skip.median_ms,
                    fm_cost_tflops(c->cost.flops_paper, c->skip.median_ms),
                    c->noskip.source[0] ? c->noskip.median_ms : NAN, now_s() - st.t0);
          }
        }
#endif
        fm_colmask_destroy(m);
        if (write_summary(&st, 0, &err) != FM_OK) {
          cli_error(cmd, "%s", err.msg);
          rc = FM_EXIT_FAIL;
        }
      }
  /* the sweep (GPU only) */
#ifdef FM_HAVE_GPU_RUN
  static const char *sweep_fams[3] = {"causal_document", "document", "share_question"};
  if (sess && rc == FM_EXIT_OK && o.sweep_draws > 0) {
    st.ptcap = 3 * (int)o.sweep_draws;
    st.pts = calloc((size_t)st.ptcap, sizeof *st.pts);
    int64_t S = o.sweep_seqlen, D = o.hd[0], B = o.tokens / S, H = o.hidden / D;
    for (int f = 0; f < 3 && st.pts && rc == FM_EXIT_OK; f++)
      for (int k = 0; k < o.sweep_draws && rc == FM_EXIT_OK; k++) {
        if (o.budget_s > 0 && now_s() - st.t0 > o.budget_s) break;
        int ndocs = o.sweep_draws > 1
                        ? (int)lround(pow(2.0, 6.0 * (double)k / (double)(o.sweep_draws - 1)))
                        : 8;
        char p1[32], p2[32];
        snprintf(p1, sizeof p1, "docs_min=%d", ndocs);
        snprintf(p2, sizeof p2, "docs_max=%d", ndocs);
        const char *params[2] = {p1, p2};
        fm_colmask *m = NULL;
        fm_family_used used;
        bench_case c;
        memset(&c, 0, sizeof c);
        c.S = S;
        c.B = B;
        c.H = H;
        c.D = D;
        fm_kernel_tile_size(FM_KERNEL_SM80, (int32_t)D, &c.br, &c.bc, NULL);
        snprintf(c.id, sizeof c.id, "sweep %s draw %d", sweep_fams[f], k);
        if (build_case_mask(NULL, sweep_fams[f], S, B, H, -1, (uint64_t)o.seed + 1000 + (uint64_t)k,
                            2, params, &m, &used) ||
            model_case(&c, m)) {
          fm_colmask_destroy(m);
          rc = FM_EXIT_USAGE;
          break;
        }
        fm_gpu_case gc = {.mask = m, .batch = (int32_t)B, .heads = (int32_t)H, .head_dim = (int32_t)D, .variant = FM_VARIANT_SKIP, .kernel = FM_KERNEL_SM80};
        fm_gpu_opts go = {1, (int32_t)o.sweep_reps, 0, 0, 0, o.cupti, 0, 0};
        fm_gpu_result r;
        if (fm_gpu_session_run(sess, &gc, &go, &r, &err) != FM_OK) {
          cli_error(cmd, "%s: GPU run failed: %s", c.id, err.msg);
          rc = FM_EXIT_FAIL;
        } else {
          sweep_point *p = &st.pts[st.npts++];
          p->family = sweep_fams[f];
          p->draw = k;
          p->ndocs = used.ndocs;
          p->rho = c.rho;
          p->rho128 = c.rho128;
          p->ms = r.timing.median_ms;
          p->tflops = fm_cost_tflops(c.cost.flops_paper, p->ms);
          snprintf(p->source, sizeof p->source, "%s", r.timing.source);
        }
        fm_gpu_result_free(&r);
        fm_colmask_destroy(m);
      }
    for (int f = 0; f < 3; f++) fit_line(st.pts, st.npts, sweep_fams[f], &st.fits[st.nfits++]);
    fit_line(st.pts, st.npts, NULL, &st.fits[st.nfits++]);
    if (st.npts && write_sweep(&st, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      rc = FM_EXIT_FAIL;
    }
  }
  fm_gpu_session_destroy(sess);
  fm_cupti_shutdown();
#endif
  if (rc != FM_EXIT_USAGE || st.ncases > 0) {
    if (write_summary(&st, rc == FM_EXIT_OK, &err) != FM_OK ||
        write_table(&st, rc == FM_EXIT_OK ? stdout : NULL, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      rc = FM_EXIT_FAIL;
    }
  }
  if (rc == FM_EXIT_OK && o.export_only)
    fprintf(stderr, "fmsim bench: note: --export-only: wrote %d cases' masks and the model to %s "
            "(no timings)\n", st.ncases, o.out);
  fm_samples_free(&samples);
  free(st.cases);
  free(st.pts);
  return rc;
}
