/* fmsim expand: an interval file -> the dense mask (.npy), written one row
 * at a time (O(Sk) memory) and atomically; refuses outputs that would not
 * fit (size cap, free disk space). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "dense_report.h"
#include "fm_dense.h"
#include "fm_fileio.h"
#include "fm_intervals_io.h"

static const char *help =
    "usage: fmsim expand INTERVALS.npy --causal|--bidir -o DENSE.npy [--seqlen-q N]\n"
    "                    [--heads H] [--rank 2|3|4] [--dtype NAME] [--masked-true] [--strict]\n\n"
    "Writes the dense mask of an interval file (Paddle startend_row_indices, int32/int64\n"
    "[B, H_mask, Sk, k]) as [B, H, Sq, Sk]. Streams one row at a time; refuses outputs\n"
    "above 16 GiB or above the free space of the output folder.\n\n"
    "  --causal | --bidir   the causal flag the intervals go with (required)\n"
    "  -o, --output FILE    the dense .npy (written atomically); - writes it to stdout\n"
    "  --seqlen-q N         query rows Sq (default Sk)\n"
    "  --heads H            heads to write; a shared mask (H_mask = 1) is repeated\n"
    "                       (default H_mask)\n"
    "  --rank R             4: [B, H, Sq, Sk] (default); 3: [H, Sq, Sk]; 2: [Sq, Sk]\n"
    "  --dtype NAME         bool (default), uint8, int8, int32, int64, uint64: 1 = may\n"
    "                       attend, 0 = masked; float32, float64, float16, bfloat16 (as\n"
    "                       uint16): additive, 0 / -inf\n"
    "  --masked-true        bool/integer: write 1 for masked instead\n"
    "  --strict             refuse row indices above Sq and intervals whose start lies past\n"
    "                       their end (default: read as Paddle does, as Sq and as empty)\n\n"
    "exit status: 0 written, 1 the write failed, 2 bad input, refused size or usage.\n";

/* What expand's command line says. */
typedef struct expand_opts {
  cli_interval_opts io; /* first: cli_interval_opt takes --causal/--bidir, --seqlen-q, --strict */
  fm_dense_expand_opts eo;
  const char *out;
} expand_opts;

/* expand's options besides the intervals': 1 taken, -1 a bad value (printed), 0 none of them. */
static int expand_opt(const char *cmd, void *v, int opt, const char *arg) {
  expand_opts *x = v;
  int64_t n;
  fm_err err;
  switch (opt) {
  case 'o': x->out = arg; return 1;
  case 'H':
    if (cli_int(cmd, "--heads", arg, 1, 65535, &n)) return -1;
    x->eo.heads = n;
    return 1;
  case 'r':
    if (cli_int(cmd, "--rank", arg, 2, 4, &n)) return -1;
    x->eo.rank = (int)n;
    return 1;
  case 'd':
    if (fm_dense_dtype_parse(arg, &x->eo.dtype, &err) == FM_OK) return 1;
    cli_error(cmd, "--dtype: %s", err.msg);
    return -1;
  case 'm': x->eo.masked_true = 1; return 1;
  }
  return 0;
}

int cmd_expand(int argc, char **argv) {
  static const struct option longopts[] = {{"output", required_argument, 0, 'o'},
                                           CLI_INTERVAL_LONGOPTS,
                                           {"heads", required_argument, 0, 'H'},
                                           {"rank", required_argument, 0, 'r'},
                                           {"dtype", required_argument, 0, 'd'},
                                           {"masked-true", no_argument, 0, 'm'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":o:", .longopts = longopts, .shared = cli_interval_opt,
                            .own = expand_opt, .help = help, .operands = CLI_OPERANDS};
  const char *cmd = "expand";
  expand_opts x = {.io = {.causal = -1, .sq = 0}, .eo = {.dtype = FM_DT_BOOL}};
  int r = cli_parse_opts(cmd, argc, argv, &def, &x);
  if (r) return r > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  const cli_interval_opts io = x.io;
  const fm_dense_expand_opts eo = x.eo;
  const char *out = x.out;
  fm_err err;
  const char *path;
  int bad = cli_one_file(cmd, "an interval file", argc, argv, &path);
  if (bad) return bad;
  int causal = io.causal;
  int64_t sq = io.sq;
  if (cli_intervals_causal(cmd, path, CLI_FLAG_REQUIRED, &causal)) return FM_EXIT_USAGE;
  if (!out) {
    cli_error(cmd, "-o DENSE.npy is required");
    return FM_EXIT_USAGE;
  }
  fm_colmask *m = NULL;
  fm_intervals_opts lo = {.causal = causal, .sq = sq, .strict = io.strict};
  fm_intervals_note note;
  if (fm_intervals_load(path, &lo, &m, &note, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  if (note.text[0]) cli_note(cmd, "%s", note.text);
  int to_stdout = strcmp(out, "-") == 0;
  if (to_stdout && isatty(STDOUT_FILENO)) {
    cli_error(cmd, "-o -: standard output is a terminal; redirect it to a file or a pipe");
    fm_colmask_destroy(m);
    return FM_EXIT_USAGE;
  }
  if (!to_stdout && fm_output_check(out, FM_OUT_STDOUT, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    fm_colmask_destroy(m);
    return FM_EXIT_USAGE;
  }
  if (!to_stdout && !dense_output_writable(cmd, out)) {
    fm_colmask_destroy(m);
    return FM_EXIT_USAGE;
  }
  fm_status st = fm_dense_expand(m, out, &eo, &err);
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    fm_colmask_destroy(m);
    return st == FM_EIO ? FM_EXIT_FAIL : FM_EXIT_USAGE;
  }
  if (to_stdout) { /* stdout carries the array only */
    fm_colmask_destroy(m);
    return FM_EXIT_OK;
  }
  int64_t heads = eo.heads ? eo.heads : fm_colmask_nh(m);
  double bytes = (double)fm_colmask_nb(m) * (double)heads * fm_colmask_sq(m) * fm_colmask_sk(m) *
                 fm_dtype_size(eo.dtype);
  char b[32];
  printf("wrote %s: %s, B = %d, H = %lld, Sq = %d, Sk = %d, rank %d (%s), %s\n", out,
         fm_dense_dtype_name(eo.dtype), fm_colmask_nb(m), (long long)heads, fm_colmask_sq(m),
         fm_colmask_sk(m), eo.rank ? eo.rank : 4, cli_bytes((int64_t)bytes, b, sizeof b),
         fm_dense_dtype_is_float(eo.dtype)
             ? "additive: 0 = attend, -inf = masked"
             : eo.masked_true ? "1 = masked" : "1 = may attend");
  fm_colmask_destroy(m);
  return FM_EXIT_OK;
}
