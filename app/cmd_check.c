/* fmsim check: does a dense mask (.npy) fit FlashMask's column-interval
 * forms, and if not, where, why and what to do? Also validates interval
 * files. The mask is streamed (O(Sk) memory), so masks larger than RAM can
 * be checked. */
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

/* check --intervals expands rows (for the transposed form) up to this many elements. */
#define INTERVAL_ROW_LIMIT ((int64_t)1 << 30)
/* check keeps each column's runs (44 bytes a column) for the fitting sub-mask up to this. */
#define KEEP_RUNS_MAX_BYTES ((int64_t)1 << 30)

static const char *help =
    "usage: fmsim check MASK.npy [--json] [--masked-true] [--bool | --additive] [--br N --bc N]\n"
    "       fmsim check --intervals FILE.npy --causal|--bidir [--seqlen-q N] [--strict]\n"
    "                   [--json] [--br N --bc N]\n\n"
    "Reads a dense attention mask and says whether FlashMask can run it: the smallest\n"
    "column-interval form that holds it (causal-1 < causal-2 < bidir-2 < bidir-4), or that\n"
    "none does and which columns are to blame (their masked row runs); the most masked runs\n"
    "in a column; whether the transposed (row-wise) mask would fit; whether every head\n"
    "shares one mask (H_mask = 1); dense vs interval memory; the mask's own Br x Bc tiles,\n"
    "classified exactly, and its block sparsity. For a mask that does not fit it says what\n"
    "to do: how many runs its columns need, whether the transposed mask, a per-head split\n"
    "or a smaller Sq would fit, and the tightest mask that fits and masks a subset of it\n"
    "(what FlashMask could skip) with its block sparsity and the share of elements left to\n"
    "an extra element mask. The file is streamed row by row with O(Sk) memory.\n\n"
    "MASK.npy     shape [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk], C order, little-endian;\n"
    "             bool, uint8, int8, int32, int64, uint64: non-zero = may attend (PyTorch),\n"
    "             0 = masked; float32, float64, float16, bfloat16 (stored as uint16):\n"
    "             additive, 0 = attend, -inf or any value <= -10000 (bfloat16: <= -9984,\n"
    "             its rounding of -1e4) = masked; other values (biases, NaN) are read as\n"
    "             attend and counted. A float mask holding only 0 and 1 is refused until\n"
    "             --bool or --additive says how to read it. An integer array [B, H, N, k]\n"
    "             with k = 1, 2 or 4 and values other than 0 and 1 is taken for an interval\n"
    "             file and refused (use --intervals).\n"
    "  --masked-true        bool/integer masks (and --bool): non-zero = masked instead\n" DENSE_READING_HELP
    "  --br N --bc N        tile rows x key columns of the block sparsity (default 128 x 128)\n"
    "  --json               one JSON object on stdout (representable, form, max_runs,\n"
    "                       bad_columns, first_bad_columns, transposed_fits,\n"
    "                       shared_across_heads, tiles, advice, ...)\n"
    "  --intervals FILE     validate an interval file instead: Paddle startend_row_indices,\n"
    "                       int32/int64 [B, H_mask, Sk, k] (ranges, shape, form)\n"
    "  --causal | --bidir   the causal flag the interval file goes with (required with it)\n"
    "  --seqlen-q N         Sq of the interval file (default Sk)\n"
    "  --strict             refuse row indices above Sq and intervals whose start lies past\n"
    "                       their end (by default they read as Paddle reads them: as Sq, and\n"
    "                       as empty, with a one-line note)\n"
    "  -h, --help           this text\n\n"
    "exit status: 0 the mask fits a form (an interval file is valid), 1 it does not (an\n"
    "interval file holds out-of-range intervals), 2 bad input or usage.\n";

typedef struct check_opts {
  cli_interval_opts io; /* first: cli_interval_opt takes --causal/--bidir, --seqlen-q, --strict */
  int json, masked_true;
  fm_dense_reading reading;
  int64_t br, bc;
  const char *intervals;
} check_opts;

static void print_report(const char *path, const fm_dense_report *r, fm_form stored,
                         const dense_subset *sub, int json) {
  if (json) {
    fm_json j;
    fm_json_init(&j, 1);
    fm_json_object(&j, NULL);
    if (stored != FM_FORM_NONE) fm_json_bool(&j, "valid", 1);
    dense_report_json(&j, path, r, stored, FM_FORM_NONE);
    dense_report_advice_json(&j, r, sub);
    cli_print_json(&j);
  } else {
    dense_report_human(stdout, path, r, stored);
    dense_report_advice_human(stdout, r, sub);
  }
}

static void print_invalid(const char *path, const char *msg) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "file", path);
  fm_json_string(&j, "kind", "intervals");
  fm_json_bool(&j, "valid", 0);
  fm_json_bool(&j, "representable", 0);
  fm_json_string(&j, "error", msg);
  cli_print_json(&j);
}

static int check_intervals(const char *cmd, const check_opts *co) {
  const char *path = co->intervals;
  fm_err err;
  fm_colmask *m = NULL;
  fm_intervals_opts lo = {.causal = co->io.causal, .sq = co->io.sq, .strict = co->io.strict};
  fm_intervals_note note;
  fm_status st = fm_intervals_load(path, &lo, &m, &note, &err);
  if (st == FM_OK && note.text[0]) cli_note(cmd, "%s", note.text);
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    if (st != FM_ERANGE) return FM_EXIT_USAGE;
    if (co->json) print_invalid(path, err.msg);
    return FM_EXIT_FAIL;
  }
  fm_dense_result *res = NULL;
  fm_dense_opts o = {.br = (int32_t)co->br, .bc = (int32_t)co->bc};
  st = fm_dense_check_colmask(m, INTERVAL_ROW_LIMIT, &o, &res, &err);
  fm_colmask_destroy(m);
  if (st != FM_OK) {
    cli_error(cmd, "%s: %s", path, err.msg);
    return FM_EXIT_USAGE;
  }
  /* the form the file holds: its k and the causal flag */
  fm_npy_header h;
  fm_form stored = FM_FORM_BIDIR4;
  if (fm_npy_read_header_path(path, &h, NULL) == FM_OK) stored = fm_form_from_k((int)h.shape[3], co->io.causal);
  print_report(path, fm_dense_result_report(res), stored, NULL, co->json);
  fm_dense_result_destroy(res);
  return FM_EXIT_OK;
}

static int check_dense(const char *cmd, const char *path, const check_opts *co) {
  int keep = dense_file_columns(path) * 44 <= KEEP_RUNS_MAX_BYTES;
  fm_dense_opts o = {.masked_true = co->masked_true, .keep_intervals = keep,
                     .reading = co->reading, .br = (int32_t)co->br, .bc = (int32_t)co->bc};
  fm_dense_result *res;
  if (cli_dense_scan(cmd, path, &o, &res)) return FM_EXIT_USAGE;
  const fm_dense_report *r = fm_dense_result_report(res);
  dense_subset sub;
  if (dense_subset_compute(cmd, res, (int32_t)co->br, (int32_t)co->bc, &sub)) {
    fm_dense_result_destroy(res);
    return FM_EXIT_USAGE;
  }
  print_report(path, r, FM_FORM_NONE, &sub, co->json);
  int rc = r->form != FM_FORM_NONE ? FM_EXIT_OK : FM_EXIT_FAIL;
  fm_dense_result_destroy(res);
  return rc;
}

/* check's options besides the intervals' (cli_interval_opt): 1 taken, -1 a bad
 * value (printed), 0 none of them. */
static int check_opt(const char *cmd, void *v, int opt, const char *arg) {
  check_opts *co = v;
  int r = dense_reading_opt(cmd, opt, &co->reading);
  if (r) return r;
  switch (opt) {
  case 'j': co->json = 1; return 1;
  case 'm': co->masked_true = 1; return 1;
  case 'i': co->intervals = arg; return 1;
  case 'r':
  case 'C':
    return cli_int(cmd, opt == 'r' ? "--br" : "--bc", arg, 1, 65536, opt == 'r' ? &co->br : &co->bc)
               ? -1 : 1;
  }
  return 0;
}

int cmd_check(int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, 0, 'j'},
                                           {"masked-true", no_argument, 0, 'm'},
                                           {"intervals", required_argument, 0, 'i'},
                                           CLI_INTERVAL_LONGOPTS,
                                           {"br", required_argument, 0, 'r'},
                                           {"bc", required_argument, 0, 'C'},
                                           DENSE_READING_LONGOPTS,
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":h", .longopts = longopts, .shared = cli_interval_opt,
                            .own = check_opt, .help = help, .operands = CLI_OPERANDS};
  const char *cmd = "check";
  check_opts co = {.io = {.causal = -1}, .br = 128, .bc = 128};
  int r = cli_parse_opts(cmd, argc, argv, &def, &co);
  if (r) return r > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  if (co.intervals) {
    if (optind < argc) {
      cli_error(cmd, "unexpected argument '%s' (--intervals names the file)", argv[optind]);
      return FM_EXIT_USAGE;
    }
    if (cli_intervals_causal(cmd, co.intervals, CLI_FLAG_REQUIRED, &co.io.causal))
      return FM_EXIT_USAGE;
    if (co.masked_true || co.reading != FM_DENSE_READ_AUTO) {
      cli_error(cmd, "--masked-true, --bool and --additive apply to dense masks, not to --intervals");
      return FM_EXIT_USAGE;
    }
    return check_intervals(cmd, &co);
  }
  const char *path;
  int bad = cli_one_file(cmd, "a mask file", argc, argv, &path);
  if (bad) return bad;
  if (co.io.causal >= 0 || co.io.sq || co.io.strict) {
    cli_error(cmd, "--causal, --bidir, --seqlen-q and --strict go with --intervals; a dense mask "
              "carries its own shape and causality");
    return FM_EXIT_USAGE;
  }
  return check_dense(cmd, path, &co);
}
