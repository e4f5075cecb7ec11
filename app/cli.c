#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_limits.h"
#include "fm_tiles.h"

void cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fmsim%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int cli_bad_option(const char *cmd, int opt, char *const argv[]) {
  if (opt == ':') cli_error(cmd, "option '%s' needs a value", argv[optind - 1]);
  else cli_error(cmd, "unknown option '%s' (see fmsim %s --help)", argv[optind - 1], cmd);
  return FM_EXIT_USAGE;
}

int cli_causal_flag(const char *cmd, int is_causal, int *causal) {
  if (*causal >= 0 && *causal != is_causal) {
    cli_error(cmd, "--causal and --bidir exclude each other");
    return -1;
  }
  *causal = is_causal;
  return 0;
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
    if (cli_int(cmd, "--seqlen", arg, INT64_MIN / 2, INT64_MAX / 2, &v)) return -1;
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

fm_status cli_family_build(const cli_mask_opts *o, fm_colmask **out, fm_family_used *used,
                           fm_err *err) {
  fm_sample_set samples;
  fm_status st = o->samples_path ? fm_samples_load(o->samples_path, &samples, err)
                                 : fm_samples_builtin(&samples, err);
  if (st != FM_OK) return st;
  fm_family_request req = {o->family, o->seqlen, o->batch, o->heads, o->seed, o->sample,
                           &samples,  o->nparams, o->params};
  st = fm_family_build(&req, out, used, err);
  fm_samples_free(&samples);
  return st;
}

int cli_build_family(const char *cmd, const cli_mask_opts *o, fm_colmask **out,
                     fm_family_used *used) {
  fm_err err;
  if (cli_family_build(o, out, used, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  return 0;
}

const char *cli_bytes(int64_t bytes, char *buf, int cap) { return fm_mem_format(bytes, buf, cap); }
