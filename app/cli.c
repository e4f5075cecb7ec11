#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fm_dense.h"
#include "fm_intervals_io.h"
#include "fm_limits.h"
#include "fm_tiles.h"
#include "fm_words.h"

/* How many errors cli_error printed (app state, not core's: one process, one command). */
static int errors_printed;

void cli_error(const char *cmd, const char *fmt, ...) {
  errors_printed++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fmsim%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void cli_unknown_name(const char *cmd, const char *prefix, const char *what, const char *name,
                      const char *best, const char *otherwise) {
  if (best) cli_error(cmd, "%sunknown %s '%s' (did you mean '%s'?)", prefix, what, name, best);
  else cli_error(cmd, "%sunknown %s '%s' (%s)", prefix, what, name, otherwise);
}

/* Notes held until the command's outcome is known (cli_note). */
#define CLI_NOTES 4
static char notes[CLI_NOTES][1200];
static int nnotes;

void cli_note(const char *cmd, const char *fmt, ...) {
  if (nnotes == CLI_NOTES) return;
  int at = snprintf(notes[nnotes], sizeof notes[0], "fmsim%s%s: note: ", cmd ? " " : "", cmd ? cmd : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(notes[nnotes] + at, sizeof notes[0] - (size_t)at, fmt, ap);
  va_end(ap);
  nnotes++;
}

void cli_notes_flush(void) {
  for (int i = 0; i < nnotes; i++) fprintf(stderr, "%s\n", notes[i]);
  nnotes = 0;
}

int cli_finish_stdout(int rc) {
  if (rc != FM_EXIT_OK && errors_printed) nnotes = 0; /* the refusal is the one line */
  cli_notes_flush();
  errno = 0;
  int bad = fflush(stdout) != 0;
  int saved = errno;
  bad |= ferror(stdout) != 0;
  if (!bad) return rc;
  if (!saved) { /* an earlier write failed and its errno is gone (a report larger than stdout's
                   buffer): the stream is broken already, so one more byte tells why */
    clearerr(stdout);
    errno = 0;
    if (fputc('\n', stdout) == EOF || fflush(stdout) != 0) saved = errno;
  }
  if (rc != FM_EXIT_OK && errors_printed) return FM_EXIT_USAGE; /* its one line is out */
  cli_error(NULL, "cannot write to standard output: %s",
            saved ? strerror(saved) : "a write failed (disk full or output closed?)");
  return FM_EXIT_USAGE;
}

/* What getopt_long (optstring starting with ':') returned for a bad option:
 * ':' a missing value, anything else an unknown option; argv[optind - 1]
 * names it. */
static void bad_option(const char *cmd, int opt, char *const argv[]) {
  if (opt == ':') cli_error(cmd, "option '%s' needs a value", argv[optind - 1]);
  else cli_error(cmd, "unknown option '%s' (see fmsim %s --help)", argv[optind - 1], cmd);
}

int cli_parse_opts(const char *cmd, int argc, char **argv, const cli_opts_def *def, void *opts) {
  int opt;
  opterr = 0;
  optind = 1; /* each command parses its argv from 1 */
  while ((opt = getopt_long(argc, argv, def->shortopts, def->longopts, NULL)) != -1) {
    int r = def->shared ? def->shared(cmd, opts, opt, optarg) : 0;
    if (r == 0 && opt == 'h') {
      if (def->help) fputs(def->help, stdout);
      else def->print_help(opts);
      return 1;
    }
    if (r == 0) r = def->own(cmd, opts, opt, optarg);
    if (r < 0) return -1;
    if (r == 0) {
      bad_option(cmd, opt, argv);
      return -1;
    }
  }
  if (def->operands == CLI_NO_OPERANDS && optind < argc) {
    cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    return -1;
  }
  return 0;
}

int cli_family_operand(const char *cmd, const char *path) {
  struct stat sb;
  if (!path || lstat(path, &sb) == 0 || errno != ENOENT) return 0;
  const char *fam = fm_family_find(path) ? path : fm_family_closest(path);
  if (!fam) return 0;
  if (fam == path) cli_error(cmd, "'%s' is a mask family, not a file: give --family %s", path, fam);
  else cli_error(cmd, "'%s': no such file (the family '%s'? give --family %s)", path, fam, fam);
  return FM_EXIT_USAGE;
}

int cli_one_file(const char *cmd, const char *what, int argc, char **argv, const char **path) {
  if (optind == argc) {
    cli_error(cmd, "%s is required (see fmsim %s --help)", what, cmd);
    return FM_EXIT_USAGE;
  }
  if (optind + 1 < argc) {
    cli_error(cmd, "unexpected argument '%s' (one %s at a time)", argv[optind + 1],
              strchr(what, ' ') ? strchr(what, ' ') + 1 : what);
    return FM_EXIT_USAGE;
  }
  *path = argv[optind];
  return 0;
}

int cli_interval_opt(const char *cmd, void *o, int opt, const char *arg) {
  cli_interval_opts *io = o;
  if (opt == 'c' || opt == 'B') return cli_causal_flag(cmd, opt == 'c', &io->causal) ? -1 : 1;
  if (opt == 'S') {
    io->strict = 1;
    return 1;
  }
  if (opt != 'q') return 0;
  return cli_size(cmd, "--seqlen-q", arg, 1, FM_MAX_SEQLEN, &io->sq) ? -1 : 1;
}

int cli_int_pair(const char *text, char sep, long long *a, long long *b) {
  char *end;
  *a = strtoll(text, &end, 10);
  if (end == text || (*end != sep && !(sep == 'x' && *end == 'X'))) return -1;
  const char *q = end + 1;
  *b = strtoll(q, &end, 10);
  return end != q && *end == 0 ? 0 : -1;
}

int cli_unavailable(const char *cmd, int argc, char **argv, cli_help_fn *help, const char *why) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    help(NULL);
    return FM_EXIT_OK;
  }
  cli_error(cmd, "%s", why);
  return FM_EXIT_USAGE;
}

int cli_dense_scan(const char *cmd, const char *path, const fm_dense_opts *o, fm_dense_result **res) {
  fm_err err;
  *res = NULL;
  if (fm_dense_check_file(path, o, res, &err) == FM_OK) return 0;
  cli_error(cmd, "%s", err.msg);
  return FM_EXIT_USAGE;
}

void cli_print_json(fm_json *j) {
  fm_json_end(j);
  fputs(j->buf, stdout);
  fm_json_free(j);
}

int cli_causal_flag(const char *cmd, int is_causal, int *causal) {
  if (*causal >= 0 && *causal != is_causal) {
    cli_error(cmd, "--causal and --bidir exclude each other");
    return -1;
  }
  *causal = is_causal;
  return 0;
}

int cli_intervals_causal(const char *cmd, const char *path, cli_flag_rule rule, int *causal) {
  if (*causal >= 0) return 0;
  if (rule == CLI_FLAG_WHEN_AMBIGUOUS) {
    fm_npy_header h;
    if (fm_npy_read_header_path(path, &h, NULL) != FM_OK || !fm_intervals_header_fits(&h))
      return 0; /* a dense mask or no file: not an interval file's question */
    if (h.shape[3] != 2) {
      *causal = h.shape[3] == 1; /* k = 1 is causal-1, k = 4 bidir-4 */
      return 0;
    }
  }
  cli_error(cmd, "%s: " CLI_INTERVALS_NEED_FLAG, path);
  return FM_EXIT_USAGE;
}

/* Calls one(token) for each comma-separated token of text; counts them. */
static int each_token(const char *cmd, const char *opt, const char *text, int max, int *n,
                      int (*one)(const char *tok, int i, void *arg), void *arg) {
  char buf[1024];
  if (strlen(text) >= sizeof buf) {
    cli_error(cmd, "%s: list too long", opt);
    return -1;
  }
  snprintf(buf, sizeof buf, "%s", text);
  *n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (*n == max) {
      cli_error(cmd, "%s: at most %d values", opt, max);
      return -1;
    }
    if (one(tok, (*n)++, arg)) return -1;
  }
  if (*n == 0) {
    cli_error(cmd, "%s: empty list", opt);
    return -1;
  }
  return 0;
}

typedef struct list_arg {
  const char *cmd, *opt;
  int64_t lo, hi, *out;
  fm_kernel_id *kernels;
  int sizes; /* 1: cli_size, 0: cli_int */
} list_arg;

static int one_int(const char *tok, int i, void *arg) {
  list_arg *a = arg;
  return (a->sizes ? cli_size : cli_int)(a->cmd, a->opt, tok, a->lo, a->hi, &a->out[i]);
}

int cli_size_list(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
                  int64_t *out, int *n, int max) {
  list_arg a = {.cmd = cmd, .opt = opt, .lo = lo, .hi = hi, .out = out, .sizes = 1};
  return each_token(cmd, opt, text, max, n, one_int, &a);
}

int cli_size(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
             int64_t *out) {
  int64_t v;
  int r = fm_parse_size(text, &v);
  if (r == -1 && (*text == '-' || *text == '+')) return cli_int(cmd, opt, text, lo, hi, out);
  if (r == -1) {
    cli_error(cmd, "%s: '%s' is not a size (an integer, or with a suffix: 32k = 32768, "
              "1M = 1048576)", opt, text);
    return -1;
  }
  if (r == -2 || v < lo || v > hi) {
    cli_error(cmd, "%s: %s is out of range (%lld..%lld)", opt, text, (long long)lo, (long long)hi);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_int_list(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
                 int64_t *out, int *n, int max) {
  list_arg a = {.cmd = cmd, .opt = opt, .lo = lo, .hi = hi, .out = out};
  return each_token(cmd, opt, text, max, n, one_int, &a);
}

static int one_kernel(const char *tok, int i, void *arg) {
  list_arg *a = arg;
  fm_err err;
  if (fm_kernel_parse(tok, &a->kernels[i], &err) == FM_OK) return 0;
  cli_error(a->cmd, "%s: %s", a->opt, err.msg);
  return -1;
}

int cli_kernels(const char *cmd, const char *opt, const char *text, fm_kernel_id *out, int *n,
                int max) {
  list_arg a = {.cmd = cmd, .opt = opt, .kernels = out};
  return each_token(cmd, opt, text, max, n, one_kernel, &a);
}

int cli_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
            int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (*text == 0 || *end != 0 || errno) {
    cli_error(cmd, "%s: '%s' is not an integer", opt, text);
    return -1;
  }
  if (v < lo || v > hi) {
    cli_error(cmd, "%s: %lld is out of range (%lld..%lld)", opt, v, (long long)lo, (long long)hi);
    return -1;
  }
  *out = v;
  return 0;
}

void cli_mask_opts_init(cli_mask_opts *o) {
  memset(o, 0, sizeof *o);
  o->seqlen = 8192;
  o->sample = -1;
  o->br = o->bc = 128;
  o->batch = o->heads = 1;
}

int cli_mask_opt(const char *cmd, cli_mask_opts *o, int opt, const char *arg) {
  int64_t v;
  switch (opt) {
  case 'f': o->family = arg; return 1;
  case 's':
    /* parsed wide so that "too large for int32 indices" gets its own message */
    if (cli_size(cmd, "--seqlen", arg, INT64_MIN / 2, INT64_MAX / 2, &v)) return -1;
    if (v < 1 || v > FM_MAX_SEQLEN) {
      cli_error(cmd, "--seqlen %lld: sequence length must be in 1..%d (int32 row indices)",
                (long long)v, FM_MAX_SEQLEN);
      return -1;
    }
    o->seqlen = v;
    return 1;
  case 'k':
    if (cli_int(cmd, "--sample", arg, 0, 1 << 20, &v)) return -1;
    o->sample = (int)v;
    return 1;
  case 1001:
    if (cli_int(cmd, "--br", arg, 1, 65536, &v)) return -1;
    o->br = v;
    return 1;
  case 1002:
    if (cli_int(cmd, "--bc", arg, 1, 65536, &v)) return -1;
    o->bc = v;
    return 1;
  case 'b':
    if (cli_int(cmd, "--batch", arg, 1, 65535, &v)) return -1;
    o->batch = v;
    return 1;
  case 'H':
    if (cli_int(cmd, "--heads", arg, 1, 65535, &v)) return -1;
    o->heads = v;
    return 1;
  case 'p':
    if (o->nparams == 32) {
      cli_error(cmd, "too many --param options (at most 32)");
      return -1;
    }
    o->params[o->nparams++] = arg;
    return 1;
  case 1003:
    if (cli_int(cmd, "--seed", arg, 0, INT64_MAX, &v)) return -1;
    o->seed = (uint64_t)v;
    return 1;
  case 1004: o->samples_path = arg; return 1;
  }
  return 0;
}

int cli_mask_opt_any(const char *cmd, void *o, int opt, const char *arg) {
  return cli_mask_opt(cmd, o, opt, arg);
}

fm_status cli_build_family_err(const cli_mask_opts *o, fm_colmask **out, fm_family_used *used,
                               fm_err *err) {
  fm_sample_set samples;
  fm_status st = o->samples_path ? fm_samples_load(o->samples_path, &samples, err)
                                 : fm_samples_builtin(&samples, err);
  if (st != FM_OK) return st;
  fm_family_request req = {.family = o->family, .seqlen = o->seqlen, .batch = o->batch,
                           .heads = o->heads, .seed = o->seed, .sample = o->sample,
                           .samples = &samples, .nparams = o->nparams, .params = o->params};
  st = fm_family_build(&req, out, used, err);
  fm_samples_free(&samples);
  return st;
}

int cli_build_family(const char *cmd, const cli_mask_opts *o, fm_colmask **out,
                     fm_family_used *used) {
  fm_err err;
  if (cli_build_family_err(o, out, used, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  return 0;
}

const char *cli_bytes(int64_t bytes, char *buf, int cap) { return fm_mem_format(bytes, buf, cap); }
