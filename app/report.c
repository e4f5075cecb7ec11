/* report.c — report.md and the exported tables of a scenario run (report.h). */
#define _POSIX_C_SOURCE 200809L
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_study.h"
#include "cli.h"
#include "fm_fileio.h"
#include "fm_paper.h"
#include "fm_timing.h"
#include "gpu_step.h"
#include "report_figures.h"

/* ---- tables ------------------------------------------------------------------------------ */

/* The passes the rows asked for, RUN_FWD first: how many column groups a kernel gets. */
static int row_passes(const case_row *rows, int n, int *passes) {
  unsigned asked = 0;
  int np = 0;
  for (int i = 0; i < n; i++) asked |= (unsigned)rows[i].pass;
  if (!asked) asked = FM_PASS_FWD;
  for (int q = 0; q < RUN_NPASSES; q++)
    if (asked & run_pass_of(q)) passes[np++] = q;
  return np;
}

/* What the rows' kernel records hold: times (some pass ran), predictions
 * (some pass has one), both on one pass (an error to show). */
typedef struct row_kinds {
  int timed, predicted, compared;
} row_kinds;

static row_kinds kinds_of(const case_row *rows, int n) {
  row_kinds w = {0, 0, 0};
  for (int i = 0; i < n; i++)
    for (int k = 0; k < rows[i].nkernels; k++)
      for (int q = 0; q < RUN_NPASSES; q++) {
        const run_pass_rec *x = &rows[i].k[k].p[q];
        w.timed |= isfinite(x->ms);
        w.predicted |= isfinite(x->pred_ms);
        w.compared |= isfinite(x->ms) && isfinite(x->pred_ms);
      }
  return w;
}

/* "sm90" for the forward, "sm90 bwd" for the backward. */
static const char *pass_label(char *buf, size_t cap, const char *kernel, int q) {
  snprintf(buf, cap, "%s%s", kernel, q == RUN_BWD ? " bwd" : "");
  return buf;
}

/* The timing model's columns of a kernel's pass: predicted ms, and its
 * relative error when some pass was both measured and predicted. */
static void prediction_columns(rpt_table *t, const char *name, row_kinds w) {
  char h[64];
  snprintf(h, sizeof h, "%s predicted ms", name);
  if (w.predicted) rpt_col(t, h);
  snprintf(h, sizeof h, "%s predicted error %%", name);
  if (w.compared) rpt_col(t, h);
}

static void prediction_cells(rpt_table *t, const run_pass_rec *x, row_kinds w) {
  if (w.predicted) rpt_num(t, "%.3f", x ? x->pred_ms : NAN);
  if (w.compared) rpt_num(t, "%+.1f", x ? 100.0 * (x->pred_ms / x->ms - 1) : NAN);
}

void report_cases_table(const case_row *rows, int n, rpt_table *t) {
  char b[32];
  int sim = 0, nk = 0;
  row_kinds w = kinds_of(rows, n);
  for (int i = 0; i < n; i++) {
    sim |= rows[i].sim_read >= 0;
    if ((rows[i].gpu_ran || w.predicted) && rows[i].nkernels > nk) nk = (int)rows[i].nkernels;
  }
  rpt_init(t, "cases", "Every case of the scenario");
  static const char *const head[] = {"case", "S", "D", "Br x Bc", "sets", "form", "rho (min/max)",
                                     "rho (exact)", "masked", "partial", "unmasked",
                                     "rule's partial, exactly masked",
                                     "rule's partial, exactly unmasked", "dense", "block mask",
                                     "intervals"};
  for (size_t c = 0; c < sizeof head / sizeof head[0]; c++) rpt_col(t, head[c]);
  if (sim) rpt_col(t, "modelled read"), rpt_col(t, "modelled write"), rpt_col(t, "modelled GFLOP");
  int passes[RUN_NPASSES], np = row_passes(rows, n, passes);
  for (int pi = 0; pi < np; pi++)
    for (int k = 0; k < nk; k++) {
      char h[64], name[32];
      pass_label(name, sizeof name, rows[0].k[k].kernel, passes[pi]);
      snprintf(h, sizeof h, "%s ms", name);
      if (w.timed) rpt_col(t, h);
      snprintf(h, sizeof h, "%s TFLOP/s", name);
      if (w.timed) rpt_col(t, h);
      prediction_columns(t, name, w);
    }
  for (int i = 0; i < n; i++) {
    const case_row *r = &rows[i];
    rpt_cell(t, "%s", r->id);
    rpt_cell(t, "%lld", (long long)r->seqlen);
    rpt_cell(t, "%lld", (long long)r->head_dim);
    rpt_cell(t, "%lld x %lld", (long long)r->br, (long long)r->bc);
    rpt_cell(t, "%lld", (long long)r->sets);
    rpt_cell(t, "%s", r->form);
    rpt_num(t, "%.4f", r->rho);
    rpt_num(t, "%.4f", r->rho_exact);
    rpt_cell(t, "%lld", (long long)r->masked);
    rpt_cell(t, "%lld", (long long)r->partial);
    rpt_cell(t, "%lld", (long long)r->unmasked);
    rpt_cell(t, "%lld", (long long)r->partial_but_masked);
    rpt_cell(t, "%lld", (long long)r->partial_but_unmasked);
    rpt_cell(t, "%s", cli_bytes(r->dense_bytes, b, sizeof b));
    rpt_cell(t, "%s", cli_bytes(r->block_mask_bytes, b, sizeof b));
    rpt_cell(t, "%s", cli_bytes(r->interval_bytes, b, sizeof b));
    if (sim) {
      rpt_cell(t, "%s", r->sim_read >= 0 ? cli_bytes(r->sim_read, b, sizeof b) : "-");
      rpt_cell(t, "%s", r->sim_write >= 0 ? cli_bytes(r->sim_write, b, sizeof b) : "-");
      rpt_num(t, "%.4g", r->sim_flops / 1e9);
    }
    for (int pi = 0; pi < np; pi++)
      for (int k = 0; k < nk; k++) {
        const run_pass_rec *x = k < r->nkernels ? &r->k[k].p[passes[pi]] : NULL;
        if (w.timed) rpt_num(t, "%.3f", x ? x->ms : NAN);
        if (w.timed) rpt_num(t, "%.1f", x ? x->tflops : NAN);
        prediction_cells(t, x, w);
      }
  }
}

/* The distinct values of rows' seqlen, in order of appearance. */
static int distinct_lengths(const case_row *rows, int n, int64_t *out, int cap) {
  int nl = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int l = 0; l < nl; l++) seen |= out[l] == rows[i].seqlen;
    if (!seen && nl < cap) out[nl++] = rows[i].seqlen;
  }
  return nl;
}

static int first_of_family(const case_row *rows, int i) {
  for (int k = 0; k < i; k++)
    if (!strcmp(rows[k].family, rows[i].family)) return 0;
  return 1;
}

/* Mean rho of a family at one length over its cases (samples, draws, dims); NAN when none. */
static double mean_rho(const case_row *rows, int n, const char *family, int64_t S) {
  double sum = 0;
  int cnt = 0;
  for (int k = 0; k < n; k++)
    if (!strcmp(rows[k].family, family) && rows[k].seqlen == S) sum += rows[k].rho, cnt++;
  return cnt ? sum / cnt : NAN;
}

static void paper_table(const case_row *rows, int n, rpt_table *t) {
  int64_t lengths[FM_SCN_MAX_LIST];
  int nl = distinct_lengths(rows, n, lengths, FM_SCN_MAX_LIST);
  rpt_init(t, "paper-table", "Block sparsity by the min/max rule, fmsim beside the paper");
  rpt_col(t, "family");
  for (int l = 0; l < nl; l++) {
    char h[48];
    snprintf(h, sizeof h, "S=%lld fmsim", (long long)lengths[l]);
    rpt_col(t, h);
    rpt_col(t, "paper");
    rpt_col(t, "fmsim - paper");
  }
  for (int i = 0; i < n; i++) {
    if (!first_of_family(rows, i)) continue;
    rpt_cell(t, "%s", rows[i].family);
    for (int l = 0; l < nl; l++) {
      double mine = mean_rho(rows, n, rows[i].family, lengths[l]);
      double paper = fm_paper_sparsity(rows[i].family, lengths[l]);
      rpt_num(t, "%.3f", mine);
      rpt_num(t, "%.2f", paper >= 0 ? paper : NAN);
      rpt_num(t, "%+.3f", paper >= 0 ? mine - paper : NAN);
    }
  }
}

static void sweep_buckets(const case_row *rows, int n, rpt_table *t) {
  rpt_init(t, "sweep-buckets", "Cases bucketed by block sparsity, per family");
  static const char *const head[] = {"family", "rho bucket", "cases", "mean rho", "min rho",
                                     "max rho"};
  for (int c = 0; c < 6; c++) rpt_col(t, head[c]);
  for (int i = 0; i < n; i++) {
    if (!first_of_family(rows, i)) continue;
    for (int b = 0; b < 10; b++) {
      double sum = 0, lo = 1, hi = 0;
      int cnt = 0;
      for (int k = 0; k < n; k++) {
        int bucket = (int)(rows[k].rho * 10);
        if (strcmp(rows[k].family, rows[i].family) || (bucket > 9 ? 9 : bucket) != b) continue;
        sum += rows[k].rho;
        lo = fmin(lo, rows[k].rho);
        hi = fmax(hi, rows[k].rho);
        cnt++;
      }
      if (!cnt) continue;
      rpt_cell(t, "%s", rows[i].family);
      rpt_cell(t, "[%.1f, %.1f)", b / 10.0, (b + 1) / 10.0);
      rpt_cell(t, "%d", cnt);
      rpt_num(t, "%.3f", sum / cnt);
      rpt_num(t, "%.3f", lo);
      rpt_num(t, "%.3f", hi);
    }
  }
}

report_fit report_fit_time(const case_row *rows, int n, int kernel, int pass, const char *family) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  report_fit f = {.n = 0, .intercept_ms = NAN, .slope_ms = NAN, .r2 = NAN};
  for (int i = 0; i < n; i++) {
    const run_pass_rec *k = &rows[i].k[kernel].p[pass];
    if (kernel >= rows[i].nkernels || !isfinite(k->ms) || (family && strcmp(rows[i].family, family)))
      continue;
    double x = 1.0 - k->rho, y = k->ms;
    sx += x, sy += y, sxx += x * x, sxy += x * y;
    f.n++;
  }
  double den = f.n * sxx - sx * sx;
  if (f.n < 2 || den == 0) return f;
  f.slope_ms = (f.n * sxy - sx * sy) / den;
  f.intercept_ms = (sy - f.slope_ms * sx) / f.n;
  double my = sy / f.n, ssr = 0, sst = 0;
  for (int i = 0; i < n; i++) {
    const run_pass_rec *k = &rows[i].k[kernel].p[pass];
    if (kernel >= rows[i].nkernels || !isfinite(k->ms) || (family && strcmp(rows[i].family, family)))
      continue;
    double e = k->ms - (f.intercept_ms + f.slope_ms * (1.0 - k->rho));
    ssr += e * e;
    sst += (k->ms - my) * (k->ms - my);
  }
  f.r2 = sst > 0 ? 1.0 - ssr / sst : NAN;
  return f;
}

static void fit_row(rpt_table *t, const char *kernel, const char *family, report_fit f) {
  rpt_cell(t, "%s", kernel);
  rpt_cell(t, "%s", family);
  rpt_cell(t, "%d", f.n);
  rpt_num(t, "%.4f", f.intercept_ms);
  rpt_num(t, "%.4f", f.slope_ms);
  rpt_num(t, "%.4f", f.r2);
}

void report_fit_table(const case_row *rows, int n, rpt_table *t) {
  rpt_init(t, "fit", "Kernel time against 1 - rho: time = a + b (1 - rho), rho at the kernel's tile");
  static const char *const head[] = {"kernel", "family", "n", "a (ms)", "b (ms)", "R^2"};
  for (int c = 0; c < 6; c++) rpt_col(t, head[c]);
  int nk = n ? (int)rows[0].nkernels : 0;
  int passes[RUN_NPASSES], np = row_passes(rows, n, passes);
  for (int pi = 0; pi < np; pi++)
    for (int k = 0; k < nk; k++) {
      char name[32];
      int q = passes[pi];
      pass_label(name, sizeof name, rows[0].k[k].kernel, q);
      for (int i = 0; i < n; i++)
        if (first_of_family(rows, i))
          fit_row(t, name, rows[i].family, report_fit_time(rows, n, k, q, rows[i].family));
      fit_row(t, name, "pooled", report_fit_time(rows, n, k, q, NULL));
    }
}

static void memory_table(const case_row *rows, int n, rpt_table *t) {
  char b[32];
  rpt_init(t, "memory", "Mask memory against sequence length");
  static const char *const head[] = {"family", "S", "dense bool", "FlexAttention BlockMask",
                                     "FlashMask intervals", "dense / intervals"};
  for (int c = 0; c < 6; c++) rpt_col(t, head[c]);
  for (int i = 0; i < n; i++) {
    rpt_cell(t, "%s", rows[i].family);
    rpt_cell(t, "%lld", (long long)rows[i].seqlen);
    rpt_cell(t, "%s", cli_bytes(rows[i].dense_bytes, b, sizeof b));
    rpt_cell(t, "%s", cli_bytes(rows[i].block_mask_bytes, b, sizeof b));
    rpt_cell(t, "%s", cli_bytes(rows[i].interval_bytes, b, sizeof b));
    rpt_cell(t, "%.0fx", (double)rows[i].dense_bytes / (double)rows[i].interval_bytes);
  }
}

/* TFLOP/s of the full mask at the same S and D on pass q of kernel k (the
 * row's efficiency reference); NAN when that case did not run. */
static double full_tflops(const case_row *rows, int n, const case_row *r, int k, int q) {
  for (int i = 0; i < n; i++)
    if (rows[i].seqlen == r->seqlen && rows[i].head_dim == r->head_dim &&
        !strcmp(rows[i].family, "full") && k < rows[i].nkernels &&
        isfinite(rows[i].k[k].p[q].tflops))
      return rows[i].k[k].p[q].tflops;
  return NAN;
}

static int by_dim_then_length(const void *a, const void *b) {
  const case_row *x = *(const case_row *const *)a, *y = *(const case_row *const *)b;
  if (x->head_dim != y->head_dim) return x->head_dim > y->head_dim ? -1 : 1;
  if (x->seqlen != y->seqlen) return x->seqlen < y->seqlen ? -1 : 1;
  return x < y ? -1 : x > y;
}

static void kernel_columns(rpt_table *t, const char *name, row_kinds w) {
  static const char *const what[] = {"rho", "ms", "TFLOP/s", "eff", "noskip ms", "speedup",
                                     "ideal", "inst %", "classes", "DRAM/compulsory"};
  for (int c = 0; c < 10; c++) {
    char h[48];
    snprintf(h, sizeof h, "%s %s", name, what[c]);
    rpt_col(t, h);
  }
  prediction_columns(t, name, w);
}

static void kernel_cells(rpt_table *t, const case_row *rows, int n, const case_row *r, int k, int q,
                         row_kinds w) {
  const run_pass_rec *x = &r->k[k].p[q];
  rpt_num(t, "%.3f", x->rho);
  rpt_num(t, "%.3f", x->ms);
  rpt_num(t, "%.1f", x->tflops);
  rpt_num(t, "%.2f", x->tflops / full_tflops(rows, n, r, k, q));
  rpt_num(t, "%.3f", x->noskip_ms);
  rpt_num(t, "%.2f", x->noskip_ms / x->ms);
  rpt_num(t, "%.2f", x->rho < 1 ? 1.0 / (1.0 - x->rho) : NAN);
  rpt_num(t, "%+.2f", 100.0 * x->inst_overhead);
  rpt_cell(t, "%s", x->class_mismatches < 0 ? "-" : x->class_mismatches ? "DIFF" : "same");
  rpt_num(t, "%.2f", x->dram_read / (double)x->unique_read);
  prediction_cells(t, x, w);
}

void report_kernel_table(const case_row *rows, int n, rpt_table *t) {
  int nk = n ? (int)rows[0].nkernels : 0;
  row_kinds w = kinds_of(rows, n);
  int passes[RUN_NPASSES], np = row_passes(rows, n, passes);
  char title[sizeof t->title];
  snprintf(title, sizeof title, "%s%s",
           "Kernel times: median ms after warm-up, L2 flushed; TFLOP/s by the paper's count at the "
           "kernel's own tile (the backward's, bwd: 2.5 times the forward's count at the "
           "backward's tile); eff = TFLOP/s over the full mask's; speedup = noskip / skip beside "
           "the ideal 1 / (1 - rho); inst = instrumented overhead; classes = the instrumented "
           "kernel's tile classes against the CPU's; DRAM read over the compulsory bytes",
           w.predicted ? "; predicted = the timing model's time on the run's GPU profile, its "
                         "error = predicted / measured - 1" : "");
  rpt_init(t, "kernels", title);
  rpt_col(t, "D");
  rpt_col(t, "S");
  rpt_col(t, "family");
  for (int pi = 0; pi < np; pi++)
    for (int k = 0; k < nk; k++) {
      char name[32];
      kernel_columns(t, pass_label(name, sizeof name, rows[0].k[k].kernel, passes[pi]), w);
    }
  char ratio[80];
  for (int pi = 0; nk >= 2 && pi < np; pi++) {
    snprintf(ratio, sizeof ratio, "%s / %s%s time", rows[0].k[0].kernel, rows[0].k[1].kernel,
             passes[pi] == RUN_BWD ? " bwd" : "");
    rpt_col(t, ratio);
  }
  rpt_col(t, "note");
  rpt_col(t, "case");
  const case_row **order = malloc(sizeof *order * (size_t)(n ? n : 1));
  if (!order) {
    t->oom = 1;
    return;
  }
  for (int i = 0; i < n; i++) order[i] = &rows[i];
  qsort(order, (size_t)n, sizeof *order, by_dim_then_length);
  for (int i = 0; i < n; i++) {
    const case_row *r = order[i];
    rpt_cell(t, "%lld", (long long)r->head_dim);
    rpt_cell(t, "%lld", (long long)r->seqlen);
    rpt_cell(t, "%s", r->family);
    for (int pi = 0; pi < np; pi++)
      for (int k = 0; k < nk; k++) kernel_cells(t, rows, n, r, k, passes[pi], w);
    for (int pi = 0; nk >= 2 && pi < np; pi++)
      rpt_num(t, "%.2f", r->k[0].p[passes[pi]].ms / r->k[1].p[passes[pi]].ms);
    const char *note = "";
    for (int k = 0; k < nk && !note[0]; k++) {
      note = r->k[k].status;
      for (int pi = 0; pi < np && !note[0]; pi++) note = r->k[k].p[passes[pi]].status;
    }
    rpt_cell(t, "%s", note);
    rpt_cell(t, "%s", r->id);
  }
  free(order);
}

/* ---- report.md ------------------------------------------------------------------------------ */

static void summary_paper(FILE *f, const case_row *rows, int n) {
  int64_t lengths[FM_SCN_MAX_LIST];
  int nl = distinct_lengths(rows, n, lengths, FM_SCN_MAX_LIST), listed = 0, compared = 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    if (!first_of_family(rows, i)) continue;
    for (int l = 0; l < nl; l++) {
      double paper = fm_paper_sparsity(rows[i].family, lengths[l]);
      double mine = mean_rho(rows, n, rows[i].family, lengths[l]);
      if (paper < 0 || !isfinite(mine)) continue;
      compared++;
      worst = fmax(worst, fabs(mine - paper));
      if (fabs(mine - paper) < 0.005 || listed == 8) continue;
      fprintf(f, "- %s at S = %lld: fmsim's rho %.3f is %s than the paper's %.2f (%+.3f).\n",
              rows[i].family, (long long)lengths[l], mine, mine > paper ? "higher" : "lower", paper,
              mine - paper);
      listed++;
    }
  }
  if (compared && !listed)
    fprintf(f, "- fmsim's rho matches the paper's at every one of the %d (family, S) pairs within "
               "0.005 (largest difference %.3f).\n", compared, worst);
}

static void summary_kernels(FILE *f, const case_row *rows, int n) {
  int nk = n ? (int)rows[0].nkernels : 0;
  int passes[RUN_NPASSES], np = row_passes(rows, n, passes);
  for (int pi = 0; pi < np; pi++)
    for (int k = 0; k < nk; k++) {
      int q = passes[pi];
      double lo = INFINITY, hi = -INFINITY;
      int ran = 0;
      for (int i = 0; i < n; i++)
        if (k < rows[i].nkernels && isfinite(rows[i].k[k].p[q].tflops)) {
          lo = fmin(lo, rows[i].k[k].p[q].tflops);
          hi = fmax(hi, rows[i].k[k].p[q].tflops);
          ran++;
        }
      if (ran)
        fprintf(f, "- Kernel %s%s ran %d of %d cases: %.1f to %.1f TFLOP/s (the paper's count%s).\n",
                rows[0].k[k].kernel, q == RUN_BWD ? "'s backward" : "", ran, n, lo, hi,
                q == RUN_BWD ? ", 2.5 times the forward's" : "");
    }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The predictions: which profile, how many passes, and against the measured
 * times the median and worst |predicted / measured - 1|. */
static void summary_predictions(FILE *f, const gpu_step *g, const case_row *rows, int n) {
  for (int k = 0; k < g->nkernels; k++) {
    const fm_gpu_profile *p = g->profile[k];
    if (!p) continue;
    int npred = 0, nerr = 0, missing = 0;
    double *err = malloc(sizeof *err * (size_t)(2 * n + 1));
    for (int i = 0; err && i < n; i++)
      for (int q = 0; k < rows[i].nkernels && q < RUN_NPASSES; q++) {
        const run_pass_rec *x = &rows[i].k[k].p[q];
        npred += isfinite(x->pred_ms);
        missing += x->pred_note[0] != 0;
        if (isfinite(x->pred_ms) && isfinite(x->ms)) err[nerr++] = fabs(x->pred_ms / x->ms - 1);
      }
    fprintf(f, "- Kernel %s predicted by the timing model with profile `%s` (%s, measured %s): %d "
               "pass%s predicted", fm_kernel_get(g->kernel[k])->name, p->name, p->gpu, p->date,
            npred, npred == 1 ? "" : "es");
    if (missing)
      fprintf(f, ", %d without a fit (`run.json`, prediction_notes)", missing);
    if (nerr) {
      qsort(err, (size_t)nerr, sizeof *err, cmp_double);
      double med = nerr % 2 ? err[nerr / 2] : 0.5 * (err[nerr / 2 - 1] + err[nerr / 2]);
      fprintf(f, "; against the measured times, |error| median %.1f%%, worst %.1f%% over %d", 100 * med,
              100 * err[nerr - 1], nerr);
    }
    fprintf(f, ".\n");
    free(err);
  }
}

static void summary_sweep(FILE *f, const case_row *rows, int n) {
  int nk = n ? (int)rows[0].nkernels : 0;
  int passes[RUN_NPASSES], np = row_passes(rows, n, passes);
  for (int pi = 0; pi < np; pi++)
    for (int k = 0; k < nk; k++) {
      report_fit fit = report_fit_time(rows, n, k, passes[pi], NULL);
      if (fit.n >= 2)
        fprintf(f, "- Kernel %s%s: time = %.3f ms + %.3f ms x (1 - rho) over %d masks, R^2 = %.4f.\n",
                rows[0].k[k].kernel, passes[pi] == RUN_BWD ? " (backward)" : "", fit.intercept_ms,
                fit.slope_ms, fit.n, fit.r2);
    }
}

/* The largest length's memory, in the words of its numbers. */
static void summary_memory(FILE *f, const case_row *rows, int n) {
  const case_row *big = NULL;
  char b1[32], b2[32], b3[32];
  for (int i = 0; i < n; i++)
    if (!big || rows[i].seqlen > big->seqlen) big = &rows[i];
  if (!big || big->interval_bytes <= 0) return;
  fprintf(f, "- At S = %lld (%s): intervals take %s, %.0fx less than a dense bool mask (%s) and "
             "%.1fx %s than FlexAttention's block mask (%s).\n", (long long)big->seqlen, big->family,
          cli_bytes(big->interval_bytes, b1, sizeof b1),
          (double)big->dense_bytes / (double)big->interval_bytes,
          cli_bytes(big->dense_bytes, b2, sizeof b2),
          big->block_mask_bytes >= big->interval_bytes
              ? (double)big->block_mask_bytes / (double)big->interval_bytes
              : (double)big->interval_bytes / (double)big->block_mask_bytes,
          big->block_mask_bytes >= big->interval_bytes ? "less" : "more",
          cli_bytes(big->block_mask_bytes, b3, sizeof b3));
}

static void summary(FILE *f, runner_ctx *rc, const case_row *rows, int n) {
  const fm_scenario *s = rc->s;
  const gpu_step *g = rc->gpu;
  char variant[64]; /* the variant, and the mask method where one was asked for */
  snprintf(variant, sizeof variant, "%s%s%s", fm_variant_name(s->variant),
           s->mask_method ? ", mask method " : "",
           s->mask_method ? fm_mask_method_name(s->mask_method) : "");
  double lo = 1, hi = 0;
  for (int i = 0; i < n; i++) lo = fmin(lo, rows[i].rho), hi = fmax(hi, rows[i].rho);
  fprintf(f, "## Summary\n\n");
  fprintf(f, "- %d case%s from `%s`, run with fmsim %s; block sparsity rho (min/max rule) from "
             "%.3f to %.3f.\n", n, n == 1 ? "" : "s", s->path, FM_VERSION, n ? lo : 0.0, n ? hi : 0.0);
  if (g->wanted && g->skip_reason[0])
    fprintf(f, "- GPU step (kernels) skipped: %s. The kernels' tiles and cost model are reported "
               "without times.\n", g->skip_reason);
  else if (g->wanted && s->sustained_ms > 0)
    fprintf(f, "- Kernels timed on %s: pass %s, variant %s, the protocol's sustained figure (median "
               "of back-to-back launches over at least %lld ms after 1 s of warm-up, at least %lld "
               "launches), L2 flushed; TFLOP/s by the paper's count at each kernel's own tile.\n",
            g->device_desc[0] ? g->device_desc : g->device, fm_pass_name(s->pass), variant,
            (long long)s->sustained_ms, (long long)s->reps);
  else if (g->wanted)
    fprintf(f, "- Kernels timed on %s: pass %s, variant %s, median of %lld after %lld warm-up "
               "launch%s, L2 flushed; TFLOP/s by the paper's count at each kernel's own tile.\n",
            g->device_desc[0] ? g->device_desc : g->device, fm_pass_name(s->pass), variant,
            (long long)s->reps, (long long)s->warmup, s->warmup == 1 ? "" : "es");
  if (s->run & FM_SCN_PEER)
    fprintf(f, "- The FlexAttention and cuDNN peers are timed with fmsim in one process by "
               "`bench/protocol_bench.py` (bench/gpu.sh), not in scenarios.\n");
  if (s->report == FM_SCN_REPORT_PAPER_TABLE) summary_paper(f, rows, n);
  if (s->report == FM_SCN_REPORT_SWEEP) summary_sweep(f, rows, n);
  if (s->report == FM_SCN_REPORT_MEMORY) summary_memory(f, rows, n);
  if (g->wanted) summary_kernels(f, rows, n);
  summary_predictions(f, g, rows, n);
  fprintf(f, "- Files: traces in `cases/ID/`, the index in `index.csv` and `index.json`, every "
             "table of this report in `tables/` as CSV, LaTeX and text (the per-case table: "
             "`tables/cases.csv`).\n\n");
}

/* One table: inline in report.md, exported to OUT/tables/. */
static int emit(runner_ctx *rc, FILE *f, const rpt_table *t, int inline_md) {
  char dir[4300];
  fm_err err;
  snprintf(dir, sizeof dir, "%s/tables", rc->o->out);
  if (rpt_export(t, dir, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    return -1;
  }
  if (inline_md) {
    rpt_markdown(t, f);
    fprintf(f, "\n(`tables/%s.csv`, `tables/%s.tex`)\n\n", t->name, t->name);
  }
  return 0;
}

static const struct {
  const char *title, *intro;
} sections[FM_SCN_NREPORTS] = {
    [FM_SCN_REPORT_CASES] = {"Cases", "Every case: tile counts by the min/max rule and by exact "
                                      "class, block sparsity, and the mask's memory."},
    [FM_SCN_REPORT_PAPER_TABLE] = {"Block sparsity against the paper",
                                   "Block sparsity rho by the min/max rule, mean over the cases of "
                                   "each family and length (samples, draws and head dims), beside "
                                   "the paper's figure; the last column of each length is fmsim's "
                                   "minus the paper's, positive where fmsim's rho is higher."},
    [FM_SCN_REPORT_SWEEP] = {"Sparsity sweep",
                             "Cases bucketed by block sparsity rho (min/max rule), per family, as "
                             "the paper's Figure 4a samples them. Kernel times come from GPU runs "
                             "(`run: [gpu]` on a machine with a GPU, or `fmsim bench`); with them, "
                             "the fit of time against 1 - rho follows."},
    [FM_SCN_REPORT_MEMORY] = {"Mask memory",
                              "Mask memory against sequence length (one mask shared by all heads; "
                              "the block mask at FlexAttention's 128 x 128 blocks; intervals "
                              "include the 8 tile-bound vectors)."},
    [FM_SCN_REPORT_CHUNKS] = {"Intra-chunk tiles", NULL},
};

static int report_section(runner_ctx *rc, FILE *f, const case_row *rows, int n) {
  const fm_scenario *s = rc->s;
  rpt_table t;
  int rc_ = 0;
  fprintf(f, "## %s\n\n", sections[s->report].title);
  if (sections[s->report].intro) fprintf(f, "%s\n\n", sections[s->report].intro);
  switch (s->report) {
  case FM_SCN_REPORT_CASES: report_cases_table(rows, n, &t); break;
  case FM_SCN_REPORT_PAPER_TABLE: paper_table(rows, n, &t); break;
  case FM_SCN_REPORT_SWEEP: sweep_buckets(rows, n, &t); break;
  case FM_SCN_REPORT_MEMORY: memory_table(rows, n, &t); break;
  default: report_chunk_table(rows, n, s->chunk, &t); break;
  }
  if (s->report == FM_SCN_REPORT_CHUNKS) fprintf(f, "%s\n\n", t.title);
  rc_ = emit(rc, f, &t, 1);
  rpt_free(&t);
  int timed = 0;
  for (int i = 0; i < n; i++) timed |= (int)rows[i].gpu_ran;
  if (rc_ == 0 && s->report == FM_SCN_REPORT_SWEEP && timed) {
    report_fit_table(rows, n, &t);
    fprintf(f, "Kernel time against 1 - rho (rho at the kernel's own tile), least squares per "
               "family and pooled:\n\n");
    rc_ = emit(rc, f, &t, 1);
    rpt_free(&t);
  }
  return rc_;
}

/* The kernel table: inline when kernels were timed or predicted; the model
 * alone (tiles, rho, bytes without times) goes to the CSV only. */
static int kernel_section(runner_ctx *rc, FILE *f, const case_row *rows, int n) {
  rpt_table t;
  int timed = kinds_of(rows, n).predicted;
  for (int i = 0; i < n; i++) timed |= (int)rows[i].gpu_ran;
  char names[80] = "";
  for (int k = 0; n && k < rows[0].nkernels; k++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
             rows[0].k[k].kernel);
  report_kernel_table(rows, n, &t);
  fprintf(f, "## Kernels\n\n");
  if (timed) fprintf(f, "%s.\n\n", t.title);
  else
    fprintf(f, "No kernel was timed; each case's kernels (%s), their tiles, rho there and the cost "
               "model are in `tables/kernels.csv` (and `.tex`, `.txt`).\n\n", names);
  int rc_ = emit(rc, f, &t, timed);
  rpt_free(&t);
  return rc_;
}

static int figure_section(runner_ctx *rc, FILE *f, const case_row *rows, int n) {
  char figures[REPORT_MAX_FIGURES][80];
  int nfig = 0;
  if (report_figures(rc, rows, n, figures, &nfig)) return -1;
  if (nfig) {
    fprintf(f, "## Figures\n\n");
    for (int i = 0; i < nfig; i++) fprintf(f, "![%s](%s)\n\n", figures[i], figures[i]);
  } else if (rc->s->nfigures) {
    fprintf(f, "Figures were asked for but this fmsim was built without cairo.\n\n");
  }
  return 0;
}

int report_write(runner_ctx *rc, const case_row *rows, int n) {
  const fm_scenario *s = rc->s;
  char path[4400];
  fm_err err;
  snprintf(path, sizeof path, "%s/tables", rc->o->out);
  if (fm_mkdir_p(path, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    return -1;
  }
  snprintf(path, sizeof path, "%s/report.md", rc->o->out);
  fm_atomic_file af;
  if (fm_atomic_open_ex(&af, path, FM_OUT_NOFOLLOW, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    return -1;
  }
  FILE *f = af.f;
  fprintf(f, "# %s\n\n", s->name);
  if (s->description[0]) fprintf(f, "%s\n\n", s->description);
  summary(f, rc, rows, n);
  int rc_ = report_section(rc, f, rows, n);
  if (rc_ == 0 && rc->gpu->wanted) rc_ = kernel_section(rc, f, rows, n);
  if (rc_ == 0) rc_ = figure_section(rc, f, rows, n);
  if (rc_ == 0 && s->report != FM_SCN_REPORT_CASES) {
    rpt_table t;
    report_cases_table(rows, n, &t);
    fprintf(f, "## All cases\n\nThe per-case table (%d rows: tile counts, rho, memory, model and "
               "times) is in `tables/cases.csv` (and `.tex`, `.txt`).\n", n);
    rc_ = emit(rc, f, &t, 0);
    rpt_free(&t);
  }
  if (rc_ == 0 && fm_atomic_close(&af, 1, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    return -1;
  }
  if (rc_ != 0) fm_atomic_close(&af, 0, NULL);
  return rc_;
}
