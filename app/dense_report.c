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
