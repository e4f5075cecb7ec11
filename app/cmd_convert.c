/* fmsim convert: a dense mask (.npy) -> Paddle startend_row_indices
 * (int32 [B, H_mask, Sk, k]), with the representability report; refuses
 * (exit 1, nothing written) when the mask does not fit the asked form. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "dense_report.h"
#include "fm_dense.h"
#include "fm_intervals_io.h"
#include "fm_json.h"

static const char *help =
    "usage: fmsim convert MASK.npy -o OUT.npy [--form auto|causal-1|causal-2|bidir-2|bidir-4]\n"
    "                     [--masked-true] [--json]\n\n"
    "Converts a dense attention mask into FlashMask column intervals in Paddle's\n"
    "startend_row_indices layout, int32 [B, H_mask, Sk, k] (k = 1, 2, 2, 4 for causal-1,\n"
    "causal-2, bidir-2, bidir-4), and prints the causal flag it goes with (the causal\n"
    "triangle is implied by the flag, not stored). H_mask = 1 when every head shares the\n"
    "mask. MASK.npy is read as by fmsim check (see fmsim check --help for dtypes and values).\n\n"
    "  -o, --output OUT.npy  the interval file (written atomically)\n"
    "  --form NAME           the form to write (default auto: the smallest that holds it)\n"
    "  --masked-true         bool/integer masks: non-zero = masked\n"
    "  --bool | --additive   how to read a float mask (see fmsim check --help)\n"
    "  --json                one JSON object: the check report plus output, written_form,\n"
    "                        causal, output_shape, expand_command\n\n"
    "fmsim expand with the printed options gives the mask back.\n"
    "exit status: 0 written, 1 the mask does not fit the form (report printed, nothing\n"
    "written), 2 bad input, output not writable or usage.\n";

/* "fmsim expand OUT --causal --seqlen-q N ... -o MASK.npy" (caller frees; NULL: out of memory). */
static char *expand_command(const char *out, fm_form used, const fm_dense_report *r) {
  char opts[256];
  int n = snprintf(opts, sizeof opts, " --%s --seqlen-q %lld", fm_form_causal(used) ? "causal" : "bidir",
                   (long long)r->sq);
  if (r->h_mask != r->heads)
    n += snprintf(opts + n, sizeof opts - (size_t)n, " --heads %lld", (long long)r->heads);
  if (r->ndim != 4) n += snprintf(opts + n, sizeof opts - (size_t)n, " --rank %d", r->ndim);
  if (r->dtype != FM_DT_BOOL)
    n += snprintf(opts + n, sizeof opts - (size_t)n, " --dtype %s", fm_dense_dtype_name(r->dtype));
  if (r->masked_true) snprintf(opts + n, sizeof opts - (size_t)n, " --masked-true");
  size_t cap = strlen(out) + strlen(opts) + 64;
  char *text = malloc(cap);
  if (text) snprintf(text, cap, "fmsim expand %s%s -o MASK.npy", out, opts);
  return text;
}

/* What convert's command line says. */
typedef struct convert_opts {
  const char *out, *form_name;
  int json, masked_true;
  fm_dense_reading reading;
} convert_opts;

/* convert's options: 1 taken, -1 a bad value (printed), 0 none of them. */
static int convert_opt(const char *cmd, void *v, int opt, const char *arg) {
  convert_opts *co = v;
  int r = dense_reading_opt(cmd, opt, &co->reading);
  if (r) return r;
  switch (opt) {
  case 'o': co->out = arg; return 1;
  case 'f': co->form_name = arg; return 1;
  case 'm': co->masked_true = 1; return 1;
  case 'j': co->json = 1; return 1;
  }
  return 0;
}

int cmd_convert(int argc, char **argv) {
  static const struct option longopts[] = {{"output", required_argument, 0, 'o'},
                                           {"form", required_argument, 0, 'f'},
                                           {"masked-true", no_argument, 0, 'm'},
                                           {"json", no_argument, 0, 'j'},
                                           DENSE_READING_LONGOPTS,
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":o:", .longopts = longopts, .own = convert_opt,
                            .help = help, .operands = CLI_OPERANDS};
  const char *cmd = "convert";
  convert_opts co = {.form_name = "auto", .reading = FM_DENSE_READ_AUTO};
  int parsed = cli_parse_opts(cmd, argc, argv, &def, &co);
  if (parsed) return parsed > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  const char *out = co.out, *form_name = co.form_name;
  const int json = co.json;
  const char *path;
  int bad = cli_one_file(cmd, "a mask file", argc, argv, &path);
  if (bad) return bad;
  if (!out) {
    cli_error(cmd, "-o OUT.npy is required");
    return FM_EXIT_USAGE;
  }
  if (strcmp(out, "-") == 0) {
    cli_error(cmd, "-o -: convert prints its report on stdout; give a file name");
    return FM_EXIT_USAGE;
  }
  fm_err err;
  fm_form want = FM_FORM_NONE; /* auto */
  if (strcmp(form_name, "auto") != 0 && fm_form_parse(form_name, &want, &err) != FM_OK) {
    cli_error(cmd, "--form: %s (or auto)", err.msg);
    return FM_EXIT_USAGE;
  }
  /* before a long scan: can the output be written at all? */
  if (!dense_output_writable(cmd, out)) return FM_EXIT_USAGE;
  fm_dense_opts o = {.masked_true = co.masked_true, .keep_intervals = 1, .reading = co.reading};
  fm_dense_result *res;
  if (cli_dense_scan(cmd, path, &o, &res)) return FM_EXIT_USAGE;
  const fm_dense_report *r = fm_dense_result_report(res);
  fm_colmask *m = NULL;
  fm_status st = fm_dense_result_to_colmask(res, want, &m, &err);
  if (st != FM_OK) {
    if (json) {
      fm_json j;
      fm_json_init(&j, 1);
      fm_json_object(&j, NULL);
      dense_report_json(&j, path, r, FM_FORM_NONE, FM_FORM_NONE);
      fm_json_null(&j, "output");
      fm_json_string(&j, "error", err.msg);
      cli_print_json(&j);
    } else {
      dense_report_human(stdout, path, r, FM_FORM_NONE);
    }
    cli_error(cmd, "%s: %s; nothing written", path, err.msg);
    fm_dense_result_destroy(res);
    return st == FM_EUNSUPPORTED ? FM_EXIT_FAIL : FM_EXIT_USAGE;
  }
  fm_form used = want == FM_FORM_NONE ? r->form : want;
  if (fm_colmask_save_npy(m, out, used, &used, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    fm_colmask_destroy(m);
    fm_dense_result_destroy(res);
    return FM_EXIT_USAGE;
  }
  /* the expand options that give this very file back (the output path is
     user text of any length: the command is built on the heap) */
  char *expand = expand_command(out, used, r);
  if (!expand) {
    cli_error(cmd, "out of memory");
    fm_colmask_destroy(m);
    fm_dense_result_destroy(res);
    return FM_EXIT_FAIL;
  }
  int64_t shape[4] = {r->batch, r->h_mask, r->sk, fm_form_k(used)};
  if (json) {
    fm_json j;
    fm_json_init(&j, 1);
    fm_json_object(&j, NULL);
    dense_report_json(&j, path, r, FM_FORM_NONE, used); /* "causal": the written file's flag */
    fm_json_string(&j, "output", out);
    fm_json_string(&j, "written_form", fm_form_name(used));
    fm_json_array(&j, "output_shape");
    for (int d = 0; d < 4; d++) fm_json_int(&j, NULL, shape[d]);
    fm_json_end(&j);
    fm_json_string(&j, "expand_command", expand);
    cli_print_json(&j);
  } else {
    dense_report_human(stdout, path, r, FM_FORM_NONE);
    printf("\nwrote        %s: int32 [%lld, %lld, %lld, %lld], form %s\n", out, (long long)shape[0],
           (long long)shape[1], (long long)shape[2], (long long)shape[3], fm_form_name(used));
    printf("causal       %s (pass causal=%s with it; the causal triangle is implied, not stored)\n",
           fm_form_causal(used) ? "True" : "False", fm_form_causal(used) ? "True" : "False");
    printf("expand back  %s\n", expand);
  }
  free(expand);
  fm_colmask_destroy(m);
  fm_dense_result_destroy(res);
  return FM_EXIT_OK;
}
