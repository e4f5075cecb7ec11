/* dense_report.c — human and JSON views of an fm_dense_report. */
#define _POSIX_C_SOURCE 200809L
#include "dense_report.h"

#include <string.h>

#include "cli.h"
#include "fm_fileio.h"

#define SET_LINES 16 /* per-(batch, head) lines in the human report */

static const char *convention(const fm_dense_report *r) {
  if (r->additive) return "additive: 0 = attend, -inf or <= -10000 = masked";
  return r->masked_true ? "non-zero = masked" : "non-zero = may attend";
}

static void runs_text(char *buf, size_t cap, const fm_dense_column *c) {
  size_t n = 0;
  buf[0] = 0;
  for (int k = 0; k < c->nruns && k < 3 && n < cap; k++)
    n += (size_t)snprintf(buf + n, cap - n, "%s[%d, %d)", k ? " " : "", c->runs[k][0], c->runs[k][1]);
  if (c->nruns > 3 && n < cap) snprintf(buf + n, cap - n, " ... (%d runs)", c->nruns);
  if (c->nruns == 0) snprintf(buf, cap, "no masked rows");
}

static void shape_of(const fm_dense_report *r, int64_t shape[4], int *nd) {
  *nd = 0;
  if (r->ndim == 4) shape[(*nd)++] = r->batch;
  if (r->ndim >= 3) shape[(*nd)++] = r->heads;
  shape[(*nd)++] = r->sq;
  shape[(*nd)++] = r->sk;
}

void dense_report_human(FILE *f, const char *path, const fm_dense_report *r, fm_form stored) {
  char b1[32], b2[32], b3[32], runs[200];
  if (stored != FM_FORM_NONE) {
    fprintf(f, "intervals    %s: int32 [%lld, %lld, %lld, %d] in form %s (%s), Sq = %lld\n", path,
            (long long)r->batch, (long long)r->heads, (long long)r->sk, fm_form_k(stored),
            fm_form_name(stored), fm_form_causal(stored) ? "causal" : "bidirectional",
            (long long)r->sq);
  } else {
    int64_t shape[4];
    int nd;
    shape_of(r, shape, &nd);
    fprintf(f, "mask         %s: %s [", path, fm_dense_dtype_name(r->dtype));
    for (int d = 0; d < nd; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)shape[d]);
    fprintf(f, "] (B = %lld, H = %lld, Sq = %lld, Sk = %lld), %s\n", (long long)r->batch,
            (long long)r->heads, (long long)r->sq, (long long)r->sk, convention(r));
  }
  fprintf(f, "masked       %.2f%% of %lld elements\n",
          100.0 * (double)r->masked / (double)r->dense_bool_bytes, (long long)r->dense_bool_bytes);
  if (r->form != FM_FORM_NONE) {
    fprintf(f, "verdict      FITS: smallest form %s (Paddle startend_row_indices int32 [%lld, %lld, "
            "%lld, %d], causal = %s)\n",
            fm_form_name(r->form), (long long)r->batch, (long long)r->h_mask, (long long)r->sk,
            fm_form_k(r->form), fm_form_causal(r->form) ? "True" : "False");
    fprintf(f, "             forms that hold it:");
    for (int k = 0; k < FM_FORM_COUNT; k++)
      if (r->fit & (1u << k)) fprintf(f, " %s", fm_form_name((fm_form)k));
    fprintf(f, "\n");
  } else {
    fprintf(f, "verdict      DOES NOT FIT any interval form: %lld of %lld column%s need more "
            "than the closest form, %s, holds\n",
            (long long)r->bad_columns, (long long)(r->nsets * r->sk),
            r->nsets > 1 ? "s (all sets)" : "s", fm_form_name(r->closest));
    fprintf(f, "             columns each form cannot hold:");
    for (int k = 0; k < FM_FORM_COUNT; k++)
      fprintf(f, " %s %lld%s", fm_form_name((fm_form)k), (long long)r->misfits[k],
              k + 1 < FM_FORM_COUNT ? "," : "\n");
  }
  fprintf(f, "runs         at most %d masked run%s in a column (causal triangle rows included); "
          "the forms hold 2, or the triangle plus 1\n", r->max_runs, r->max_runs == 1 ? "" : "s");
  if (r->bad_columns > 0) {
    const char *lead = "bad columns ";
    for (int k = 0; k < r->nfirst[r->closest]; k++) {
      const fm_dense_column *c = &r->first[r->closest][k];
      runs_text(runs, sizeof runs, c);
      fprintf(f, "%-12s batch %d head %d column %d: %d run%s %s\n", lead, c->batch, c->head,
              c->column, c->nruns, c->nruns == 1 ? "" : "s", runs);
      lead = "";
    }
    if (r->bad_columns > r->nfirst[r->closest])
      fprintf(f, "             ... and %lld more\n",
              (long long)(r->bad_columns - r->nfirst[r->closest]));
  }
  if (r->heads > 1)
    fprintf(f, "heads        %s\n", r->shared_across_heads
                                        ? "every head equals head 0 of its batch: H_mask = 1"
                                        : "heads differ: H_mask = H (one mask per head)");
  else
    fprintf(f, "heads        1 head: H_mask = 1\n");
  if (!r->rows_known)
    fprintf(f, "transposed   not computed (the mask is too large to expand row by row)\n");
  else if (r->transposed_form != FM_FORM_NONE)
    fprintf(f, "transposed   the row-wise (transposed, keys as rows) mask fits %s; at most %d "
            "run%s along a row\n", fm_form_name(r->transposed_form), r->max_row_runs,
            r->max_row_runs == 1 ? "" : "s");
  else
    fprintf(f, "transposed   the row-wise (transposed) mask does not fit either; up to %d runs "
            "along a row\n", r->max_row_runs);
  if (r->rows_known && r->empty_rows)
    fprintf(f, "warning      %lld row%s no visible key (output 0, log-sum-exp -inf)\n",
            (long long)r->empty_rows, r->empty_rows == 1 ? " has" : "s have");
  if (r->masked_diagonal)
    fprintf(f, "warning      the diagonal is masked in %lld row%s: a token that cannot see itself is "
            "rarely meant (for a causal document mask it is the LTS_j = j mistake)\n",
            (long long)r->masked_diagonal, r->masked_diagonal == 1 ? "" : "s");
  if (r->additive && r->soft_values)
    fprintf(f, "note         %lld value%s neither 0 nor <= -10000 (biases, +inf or NaN) read as "
            "attend: a mask cannot carry them\n", (long long)r->soft_values,
            r->soft_values == 1 ? " is" : "s are");
  if (stored != FM_FORM_NONE)
    fprintf(f, "memory       dense %s as bool | intervals %s in form %s\n",
            cli_bytes(r->dense_bool_bytes, b2, sizeof b2),
            cli_bytes(r->interval_bytes, b3, sizeof b3), fm_form_name(r->form));
  else
    fprintf(f, "memory       dense %s as stored (%s as bool) | intervals %s\n",
            cli_bytes(r->dense_bytes, b1, sizeof b1), cli_bytes(r->dense_bool_bytes, b2, sizeof b2),
            r->form == FM_FORM_NONE ? "- (does not fit)" : cli_bytes(r->interval_bytes, b3, sizeof b3));
  if (r->nsets > 1) {
    fprintf(f, "\nper (batch, head)\n  batch  head  form      max runs  bad cols  transposed  = head 0\n");
    int lines = r->nset_reports < SET_LINES ? r->nset_reports : SET_LINES;
    for (int s = 0; s < lines; s++) {
      const fm_dense_set *d = &r->sets[s];
      fm_form sf = fm_form_smallest(d->fit), tf = fm_form_smallest(d->row_fit);
      fprintf(f, "  %5d %5d  %-9s %8d  %8lld  %-10s  %s\n", d->batch, d->head,
              fm_form_name(sf), d->max_runs, (long long)d->misfits[r->closest],
              r->rows_known ? fm_form_name(tf) : "-", d->same_as_head0 ? "yes" : "no");
    }
    if (r->nsets > lines) fprintf(f, "  ... %lld more (all in --json up to %d)\n",
                                  (long long)(r->nsets - lines), FM_DENSE_MAX_SET_REPORTS);
  }
}

static void json_form(fm_json *j, const char *key, fm_form f) {
  if (f == FM_FORM_NONE) fm_json_null(j, key);
  else fm_json_string(j, key, fm_form_name(f));
}

void dense_report_json(fm_json *j, const char *path, const fm_dense_report *r, fm_form stored,
                       fm_form written) {
  fm_json_string(j, "file", path);
  if (stored != FM_FORM_NONE) {
    fm_json_string(j, "kind", "intervals");
    json_form(j, "stored_form", stored);
  } else {
    fm_json_string(j, "kind", "dense");
    fm_json_string(j, "dtype", fm_dense_dtype_name(r->dtype));
    int64_t shape[4];
    int nd;
    shape_of(r, shape, &nd);
    fm_json_array(j, "shape");
    for (int d = 0; d < nd; d++) fm_json_int(j, NULL, shape[d]);
    fm_json_end(j);
    fm_json_string(j, "convention", r->additive ? "additive" : r->masked_true ? "nonzero_masked"
                                                                                : "nonzero_attends");
    if (r->additive) fm_json_int(j, "soft_values", r->soft_values);
  }
  fm_json_int(j, "batch", r->batch);
  fm_json_int(j, "heads", r->heads);
  fm_json_int(j, "seqlen_q", r->sq);
  fm_json_int(j, "seqlen_k", r->sk);
  fm_json_int(j, "masked_elements", r->masked);
  fm_json_bool(j, "representable", r->form != FM_FORM_NONE);
  json_form(j, "form", r->form);
  fm_form flag_form = written != FM_FORM_NONE ? written : r->form;
  if (flag_form == FM_FORM_NONE) fm_json_null(j, "causal");
  else fm_json_bool(j, "causal", fm_form_causal(flag_form));
  fm_json_array(j, "forms_that_fit");
  for (int k = 0; k < FM_FORM_COUNT; k++)
    if (r->fit & (1u << k)) fm_json_string(j, NULL, fm_form_name((fm_form)k));
  fm_json_end(j);
  json_form(j, "closest_form", r->closest);
  fm_json_int(j, "max_runs", r->max_runs);
  fm_json_int(j, "bad_columns", r->bad_columns);
  const int nb = r->bad_columns ? r->nfirst[r->closest] : 0;
  fm_json_array(j, "first_bad_columns");
  for (int k = 0; k < nb; k++) fm_json_int(j, NULL, r->first[r->closest][k].column);
  fm_json_end(j);
  fm_json_array(j, "bad_column_details");
  for (int k = 0; k < nb; k++) {
    const fm_dense_column *c = &r->first[r->closest][k];
    fm_json_object(j, NULL);
    fm_json_int(j, "batch", c->batch);
    fm_json_int(j, "head", c->head);
    fm_json_int(j, "column", c->column);
    fm_json_int(j, "nruns", c->nruns);
    fm_json_array(j, "runs");
    for (int q = 0; q < c->nruns && q < 3; q++) {
      fm_json_array(j, NULL);
      fm_json_int(j, NULL, c->runs[q][0]);
      fm_json_int(j, NULL, c->runs[q][1]);
      fm_json_end(j);
    }
    fm_json_end(j);
    fm_json_end(j);
  }
  fm_json_end(j);
  fm_json_object(j, "misfit_columns");
  for (int k = 0; k < FM_FORM_COUNT; k++) fm_json_int(j, fm_form_name((fm_form)k), r->misfits[k]);
  fm_json_end(j);
  if (r->rows_known) {
    fm_json_bool(j, "transposed_fits", r->transposed_form != FM_FORM_NONE);
    json_form(j, "transposed_form", r->transposed_form);
    fm_json_int(j, "max_row_runs", r->max_row_runs);
  } else {
    fm_json_null(j, "transposed_fits");
    fm_json_null(j, "transposed_form");
    fm_json_null(j, "max_row_runs");
  }
  if (r->rows_known) fm_json_int(j, "rows_without_visible_key", r->empty_rows);
  else fm_json_null(j, "rows_without_visible_key");
  fm_json_int(j, "masked_diagonal", r->masked_diagonal);
  fm_json_bool(j, "shared_across_heads", r->shared_across_heads);
  fm_json_int(j, "h_mask", r->h_mask);
  fm_json_object(j, "memory");
  fm_json_int(j, "dense_bytes", r->dense_bytes);
  fm_json_int(j, "dense_bool_bytes", r->dense_bool_bytes);
  if (r->form == FM_FORM_NONE) fm_json_null(j, "interval_bytes");
  else fm_json_int(j, "interval_bytes", r->interval_bytes);
  fm_json_end(j);
  if (r->nsets > 1) {
    fm_json_array(j, "sets");
    for (int s = 0; s < r->nset_reports; s++) {
      const fm_dense_set *d = &r->sets[s];
      fm_form sf = fm_form_smallest(d->fit), tf = fm_form_smallest(d->row_fit);
      fm_json_object(j, NULL);
      fm_json_int(j, "batch", d->batch);
      fm_json_int(j, "head", d->head);
      json_form(j, "form", sf);
      fm_json_int(j, "max_runs", d->max_runs);
      fm_json_int(j, "bad_columns", d->misfits[r->closest]);
      if (r->rows_known) json_form(j, "transposed_form", tf);
      else fm_json_null(j, "transposed_form");
      fm_json_bool(j, "same_as_head0", d->same_as_head0);
      fm_json_end(j);
    }
    fm_json_end(j);
  }
}

int dense_output_writable(const char *cmd, const char *path) {
  fm_atomic_file af;
  fm_err err;
  if (fm_atomic_open(&af, path, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return 0;
  }
  fm_atomic_close(&af, 0, NULL);
  return 1;
}

int dense_reading_opt(const char *cmd, int opt, fm_dense_reading *r) {
  if (opt != 3001 && opt != 3002) return 0;
  fm_dense_reading want = opt == 3001 ? FM_DENSE_READ_BOOL : FM_DENSE_READ_ADDITIVE;
  if (*r != FM_DENSE_READ_AUTO && *r != want) {
    cli_error(cmd, "--bool and --additive exclude each other (one reading of a float mask)");
    return -1;
  }
  *r = want;
  return 1;
}

int dense_subset_compute(const char *cmd, const fm_dense_result *res, int32_t br, int32_t bc,
                         dense_subset *out) {
  memset(out, 0, sizeof *out);
  out->br = br;
  out->bc = bc;
  if (!fm_dense_result_nruns(res)) return 0;
  fm_colmask *m = NULL;
  fm_err err;
  fm_status st = fm_dense_result_subset_colmask(res, &m, &err);
  if (st == FM_OK) st = fm_classify(m, br, bc, &out->counts, NULL, NULL, &err);
  fm_colmask_destroy(m);
  if (st != FM_OK) {
    cli_error(cmd, "the fitting sub-mask: %s", err.msg);
    return -1;
  }
  out->known = 1;
  return 0;
}

int64_t dense_file_columns(const char *path) {
  fm_npy_header h;
  if (fm_npy_read_header_path(path, &h, NULL) != FM_OK || h.ndim < 2) return 0;
  int64_t sq = h.shape[h.ndim - 2];
  return sq > 0 ? h.count / sq : 0;
}

static double pct(int64_t a, int64_t b) { return b > 0 ? 100.0 * (double)a / (double)b : 0.0; }

static void tiles_human(FILE *f, const fm_dense_tiles *t) {
  fprintf(f, "tiles        %d x %d, exactly: %lld masked (skippable), %lld partial, %lld "
          "unmasked of %lld; block sparsity rho = %.4f\n", t->br, t->bc,
          (long long)t->count[FM_TILE_MASKED], (long long)t->count[FM_TILE_PARTIAL],
          (long long)t->count[FM_TILE_UNMASKED], (long long)t->total, t->sparsity);
}

void dense_report_advice_human(FILE *f, const fm_dense_report *r, const dense_subset *sub) {
  const fm_dense_advice *a = &r->advice;
  if (r->tiles.total > 0) tiles_human(f, &r->tiles);
  if (r->form != FM_FORM_NONE) return;
  fprintf(f, "\nwhat to do   the mask needs up to %d masked runs (intervals) in a column; FlashMask "
          "holds 2 (bidir-4), or the causal triangle and 1 more (causal-2)\n", r->max_runs);
  fprintf(f, "  runs       columns with 0: %lld, 1: %lld, 2: %lld, 3: %lld, 4 or more: %lld runs\n",
          (long long)a->runs_hist[0], (long long)a->runs_hist[1], (long long)a->runs_hist[2],
          (long long)a->runs_hist[3], (long long)a->runs_hist[4]);
  if (!r->rows_known)
    fprintf(f, "  transposed not known (too large to expand row by row)\n");
  else if (r->transposed_form != FM_FORM_NONE)
    fprintf(f, "  transposed the transposed mask fits %s: swap the roles of queries and keys "
            "(attention of K over Q, then transpose)\n", fm_form_name(r->transposed_form));
  else
    fprintf(f, "  transposed does not fit either (up to %d runs along a row)\n", r->max_row_runs);
  if (r->nsets == 1)
    fprintf(f, "  per head   one (batch, head): no split to make\n");
  else if (a->sets_fit == r->nsets)
    fprintf(f, "  per head   every (batch, head) fits on its own\n");
  else
    fprintf(f, "  per head   %lld of %lld (batch, head) sets fit on their own%s\n",
            (long long)a->sets_fit, (long long)r->nsets,
            a->sets_fit ? ": run those with FlashMask, the rest with a dense mask"
                        : ": a per-head split does not help");
  if (a->prefix_rows > 0)
    fprintf(f, "  smaller Sq the first %lld query rows fit (bidir-4): Sq <= %lld would fit\n",
            (long long)a->prefix_rows, (long long)a->prefix_rows);
  else
    fprintf(f, "  smaller Sq no: a column has three masked runs from row 0 on\n");
  int64_t rest = r->masked - a->subset_masked;
  fprintf(f, "  sub-mask   the tightest mask that fits and masks a subset (bidir-4, the two "
          "longest runs of each column) masks %lld of the %lld masked elements (%.2f%%); an "
          "extra element mask must mask the other %lld (%.4f%% of all elements)\n",
          (long long)a->subset_masked, (long long)r->masked, pct(a->subset_masked, r->masked),
          (long long)rest, pct(rest, r->dense_bool_bytes));
  if (sub && sub->known)
    fprintf(f, "             its block sparsity at %d x %d: rho = %.4f (min/max rule), %.4f "
            "exactly: the tiles FlashMask could skip\n", sub->br, sub->bc, sub->counts.sparsity,
            sub->counts.sparsity_exact);
  else if (sub)
    fprintf(f, "             its block sparsity: not computed (too many columns to keep)\n");
}

void dense_report_advice_json(fm_json *j, const fm_dense_report *r, const dense_subset *sub) {
  const fm_dense_advice *a = &r->advice;
  if (r->tiles.total > 0) {
    fm_json_object(j, "tiles");
    fm_json_int(j, "br", r->tiles.br);
    fm_json_int(j, "bc", r->tiles.bc);
    fm_json_int(j, "total", r->tiles.total);
    fm_json_int(j, "masked", r->tiles.count[FM_TILE_MASKED]);
    fm_json_int(j, "partial", r->tiles.count[FM_TILE_PARTIAL]);
    fm_json_int(j, "unmasked", r->tiles.count[FM_TILE_UNMASKED]);
    fm_json_double(j, "sparsity", r->tiles.sparsity);
    fm_json_end(j);
  }
  fm_json_object(j, "advice");
  fm_json_array(j, "columns_by_runs");
  for (int k = 0; k < FM_DENSE_RUNS_HIST; k++) fm_json_int(j, NULL, a->runs_hist[k]);
  fm_json_end(j);
  fm_json_int(j, "sets_fit", a->sets_fit);
  fm_json_int(j, "sets", r->nsets);
  fm_json_int(j, "prefix_rows_fit", a->prefix_rows);
  fm_json_object(j, "subset");
  fm_json_int(j, "masked_elements", a->subset_masked);
  fm_json_int(j, "element_mask_elements", r->masked - a->subset_masked);
  fm_json_double(j, "element_mask_fraction",
                 r->dense_bool_bytes ? (double)(r->masked - a->subset_masked) / (double)r->dense_bool_bytes : 0);
  if (sub && sub->known) {
    fm_json_int(j, "br", sub->br);
    fm_json_int(j, "bc", sub->bc);
    fm_json_double(j, "sparsity", sub->counts.sparsity);
    fm_json_double(j, "sparsity_exact", sub->counts.sparsity_exact);
  } else {
    fm_json_null(j, "sparsity");
    fm_json_null(j, "sparsity_exact");
  }
  fm_json_end(j);
  fm_json_end(j);
}
