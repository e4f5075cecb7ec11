/* fmsim check: does a dense mask (.npy) fit FlashMask's column-interval
 * forms, and if not, where and why? Also validates interval files. The mask
 * is streamed (O(Sk) memory), so masks larger than RAM can be checked. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "dense_report.h"
#include "fm_dense.h"
#include "fm_json.h"

/* check --intervals expands rows (for the transposed form) up to this many elements. */
#define INTERVAL_ROW_LIMIT ((int64_t)1 << 30)

static const char *help =
    "usage: fmsim check MASK.npy [--json] [--masked-true]\n"
    "       fmsim check --intervals FILE.npy --causal|--bidir [--seqlen-q N] [--json]\n\n"
    "Reads a dense attention mask and says whether FlashMask can run it: the smallest\n"
    "column-interval form that holds it (causal-1 < causal-2 < bidir-2 < bidir-4), or that\n"
    "none does and which columns are to blame (their masked row runs); the most masked runs\n"
    "in a column; whether the transposed (row-wise) mask would fit; whether every head\n"
    "shares one mask (H_mask = 1); dense vs interval memory. The file is streamed row by\n"
    "row with O(Sk) memory.\n\n"
    "MASK.npy     shape [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk], C order, little-endian;\n"
    "             bool, uint8, int8, int32: non-zero = may attend (PyTorch), 0 = masked;\n"
    "             float32, float16, bfloat16 (stored as uint16): additive, 0 = attend,\n"
    "             -inf or any value <= -10000 (bfloat16: <= -9984, its rounding of -1e4)\n"
    "             = masked; other values (biases, NaN) are read as attend and counted.\n"
    "             An int32/int64 array [B, H, N, k] with k = 1, 2 or 4 and values other\n"
    "             than 0 and 1 is taken for an interval file and refused (use --intervals).\n"
    "  --masked-true        bool/integer masks: non-zero = masked instead\n"
    "  --json               one JSON object on stdout (representable, form, max_runs,\n"
    "                       bad_columns, first_bad_columns, transposed_fits,\n"
    "                       shared_across_heads, ...)\n"
    "  --intervals FILE     validate an interval file instead: Paddle startend_row_indices,\n"
    "                       int32/int64 [B, H_mask, Sk, k] (ranges, shape, form)\n"
    "  --causal | --bidir   the causal flag the interval file goes with\n"
    "  --seqlen-q N         Sq of the interval file (default Sk)\n\n"
    "exit status: 0 the mask fits a form (an interval file is valid), 1 it does not (an\n"
    "interval file holds out-of-range intervals), 2 bad input or usage.\n";

static int check_intervals(const char *cmd, const char *path, int causal, int64_t sq, int json) {
  fm_err err;
  fm_colmask *m = NULL;
  fm_status st = fm_interval_file_load(path, causal, sq, &m, &err);
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    if (st != FM_ERANGE) return FM_EXIT_USAGE;
    if (json) {
      fm_json j;
      fm_json_init(&j, 1);
      fm_json_object(&j, NULL);
      fm_json_string(&j, "file", path);
      fm_json_string(&j, "kind", "intervals");
      fm_json_bool(&j, "valid", 0);
      fm_json_bool(&j, "representable", 0);
      fm_json_string(&j, "error", err.msg);
      fm_json_end(&j);
      fputs(j.buf, stdout);
      fm_json_free(&j);
    }
    return FM_EXIT_FAIL;
  }
  fm_dense_result *res = NULL;
  st = fm_dense_check_colmask(m, INTERVAL_ROW_LIMIT, NULL, &res, &err);
  if (st != FM_OK) {
    cli_error(cmd, "%s: %s", path, err.msg);
    fm_colmask_destroy(m);
    return FM_EXIT_USAGE;
  }
  /* the form the file holds: its k and the causal flag */
  fm_npy_header h;
  fm_form stored = FM_FORM_BIDIR4;
  if (fm_npy_read_header_path(path, &h, NULL) == FM_OK) stored = fm_form_from_k((int)h.shape[3], causal);
  const fm_dense_report *r = fm_dense_result_report(res);
  if (json) {
    fm_json j;
    fm_json_init(&j, 1);
    fm_json_object(&j, NULL);
    fm_json_bool(&j, "valid", 1);
    dense_report_json(&j, path, r, stored, FM_FORM_NONE);
    fm_json_end(&j);
    fputs(j.buf, stdout);
    fm_json_free(&j);
  } else {
    dense_report_human(stdout, path, r, stored);
  }
  fm_dense_result_destroy(res);
  fm_colmask_destroy(m);
  return FM_EXIT_OK;
}

int cmd_check(int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, 0, 'j'},
                                           {"masked-true", no_argument, 0, 'm'},
                                           {"intervals", required_argument, 0, 'i'},
                                           {"causal", no_argument, 0, 'c'},
                                           {"bidir", no_argument, 0, 'B'},
                                           {"seqlen-q", required_argument, 0, 'q'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *cmd = "check", *intervals = NULL;
  int json = 0, masked_true = 0, causal = -1, opt;
  int64_t sq = 0;
  opterr = 0;
  optind = 1;
  while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    switch (opt) {
    case 'j': json = 1; break;
    case 'm': masked_true = 1; break;
    case 'i': intervals = optarg; break;
    case 'c':
    case 'B':
      if (cli_causal_flag(cmd, opt == 'c', &causal)) return FM_EXIT_USAGE;
      break;
    case 'q':
      if (cli_int(cmd, "--seqlen-q", optarg, 1, FM_MAX_SEQLEN, &sq)) return FM_EXIT_USAGE;
      break;
    case 'h': fputs(help, stdout); return FM_EXIT_OK;
    default: return cli_bad_option(cmd, opt, argv);
    }
  }
  if (intervals) {
    if (optind < argc) {
      cli_error(cmd, "unexpected argument '%s' (--intervals names the file)", argv[optind]);
      return FM_EXIT_USAGE;
    }
    if (causal < 0) {
      cli_error(cmd, "--intervals needs --causal or --bidir (the flag is not stored in the file)");
      return FM_EXIT_USAGE;
    }
    if (masked_true) {
      cli_error(cmd, "--masked-true applies to dense masks, not to --intervals");
      return FM_EXIT_USAGE;
    }
    return check_intervals(cmd, intervals, causal, sq, json);
  }
  if (optind == argc) {
    cli_error(cmd, "a mask file is required (see fmsim check --help)");
    return FM_EXIT_USAGE;
  }
  if (optind + 1 < argc) {
    cli_error(cmd, "unexpected argument '%s' (one mask file at a time)", argv[optind + 1]);
    return FM_EXIT_USAGE;
  }
  if (causal >= 0 || sq) {
    cli_error(cmd, "--causal, --bidir and --seqlen-q go with --intervals; a dense mask carries "
              "its own shape and causality");
    return FM_EXIT_USAGE;
  }
  const char *path = argv[optind];
  fm_err err;
  fm_dense_opts o = {.masked_true = masked_true};
  fm_dense_result *res = NULL;
  if (fm_dense_check_file(path, &o, &res, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  const fm_dense_report *r = fm_dense_result_report(res);
  if (json) {
    fm_json j;
    fm_json_init(&j, 1);
    fm_json_object(&j, NULL);
    dense_report_json(&j, path, r, FM_FORM_NONE, FM_FORM_NONE);
    fm_json_end(&j);
    fputs(j.buf, stdout);
    fm_json_free(&j);
  } else {
    dense_report_human(stdout, path, r, FM_FORM_NONE);
  }
  int rc = r->form != FM_FORM_NONE ? FM_EXIT_OK : FM_EXIT_FAIL;
  fm_dense_result_destroy(res);
  return rc;
}
