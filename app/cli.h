/* cli.h — what every fmsim subcommand shares: exit codes, error printing,
 * number parsing, and the options that describe a family mask. */
#ifndef FM_CLI_H
#define FM_CLI_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_families.h"
#include "fm_kernels.h"
#include "fm_samples.h"

/* Exit codes of every subcommand. */
enum {
  FM_EXIT_OK = 0,      /* success (check: the mask fits) */
  FM_EXIT_FAIL = 1,    /* ran, but the answer is "no" or a run failed */
  FM_EXIT_USAGE = 2    /* bad input or usage */
};

/* Prints "fmsim CMD: message" on stderr (one line). */
void cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* What getopt_long (optstring starting with ':') returned for a bad option:
 * ':' a missing value, anything else an unknown option. Prints the error
 * (argv[optind - 1] names the option) and returns FM_EXIT_USAGE. */
int cli_bad_option(const char *cmd, int opt, char *const argv[]);

/* --causal (is_causal = 1) or --bidir (0) into *causal (-1: not given yet);
 * both given is a usage error (printed). 0 on success. */
int cli_causal_flag(const char *cmd, int is_causal, int *causal);

/* Resets getopt for a command's parse (each command parses argv from 1). */
void cli_getopt_reset(void);

/* Strict integer parsing: the whole string, in [lo, hi]. Prints the error. */
int cli_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
            int64_t *out);

/* A comma list of integers in [lo, hi], at most max of them. Prints the error. */
int cli_int_list(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
                 int64_t *out, int *n, int max);

/* A comma list of kernels (sm80, sm90, auto: fm_kernel_parse), at most max. */
int cli_kernels(const char *cmd, const char *opt, const char *text, fm_kernel_id *out, int *n,
                int max);

/* Options that pick a family mask; defaults: S = 8192, Br = Bc = 128, B = H = 1. */
typedef struct cli_mask_opts {
  const char *family;
  int64_t seqlen;
  int sample;
  int64_t br, bc, batch, heads;
  uint64_t seed;
  const char *params[32];
  int nparams;
  const char *samples_path; /* NULL: the built-in samples */
} cli_mask_opts;

void cli_mask_opts_init(cli_mask_opts *o);

/* getopt_long entries for the mask options (to append to a command's table),
 * and the handler: returns 1 when `opt` was a mask option, 0 when not, -1 on
 * a bad value (error printed). */
#define CLI_MASK_LONGOPTS                                                                     \
  {"family", required_argument, 0, 'f'}, {"seqlen", required_argument, 0, 's'},              \
      {"sample", required_argument, 0, 'k'}, {"br", required_argument, 0, 1001},             \
      {"bc", required_argument, 0, 1002}, {"batch", required_argument, 0, 'b'},              \
      {"heads", required_argument, 0, 'H'}, {"param", required_argument, 0, 'p'},            \
      {"seed", required_argument, 0, 1003}, {"samples", required_argument, 0, 1004}
#define CLI_MASK_SOURCE_HELP                                                                  \
  "  --family NAME        mask family (fmsim families lists them)\n"                         \
  "  --seqlen S           sequence length, Sq = Sk (default 8192)\n"                          \
  "  --sample K           K-th (0-based) document sample of S from the sample file\n"
#define CLI_MASK_REST_HELP                                                                    \
  "  --batch B --heads H  batch and heads (per-head families draw B*H masks; default 1)\n"   \
  "  --param k=v          a family parameter (repeatable; see fmsim families)\n"              \
  "  --seed N             seed of every random draw (default 0)\n"                            \
  "  --samples FILE       document samples in the paper's format (default: built in)\n"
#define CLI_MASK_HELP                                                                         \
  CLI_MASK_SOURCE_HELP "  --br N --bc N        tile rows x key columns (default 128 x 128)\n" \
      CLI_MASK_REST_HELP
int cli_mask_opt(const char *cmd, cli_mask_opts *o, int opt, const char *arg);

/* Loads the samples and builds the family mask; the message goes to err. */
fm_status cli_family_build(const cli_mask_opts *o, fm_colmask **out, fm_family_used *used,
                           fm_err *err);
/* The same, printing the error as one line; 0 on success. */
int cli_build_family(const char *cmd, const cli_mask_opts *o, fm_colmask **out,
                     fm_family_used *used);

/* "12.0 MiB"-style text of a byte count. */
const char *cli_bytes(int64_t bytes, char *buf, int cap);

#endif
