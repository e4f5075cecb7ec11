/* cli.h — what every fmsim subcommand shares: exit codes, error printing,
 * number parsing, and the options that describe a family mask. */
#ifndef FM_CLI_H
#define FM_CLI_H

#include <getopt.h>
#include <stdint.h>

#include "fm_colmask.h"
#include "fm_families.h"
#include "fm_json.h"
#include "fm_kernels.h"
#include "fm_samples.h"

/* Exit codes of every subcommand. */
enum {
  FM_EXIT_OK = 0,      /* success (check: the mask fits) */
  FM_EXIT_FAIL = 1,    /* ran, but the answer is "no" or a run failed */
  FM_EXIT_USAGE = 2    /* bad input or usage */
};

/* "fmsim CMD: PREFIXunknown WHAT 'NAME' (did you mean 'BEST'?)" when best is
 * not NULL (fm_closest, fm_family_closest in core), else "... (OTHERWISE)":
 * the one line for every name looked up in a registry (families, commands,
 * figures). prefix may be "" ("--families: "). */
void cli_unknown_name(const char *cmd, const char *prefix, const char *what, const char *name,
                      const char *best, const char *otherwise);

/* Prints "fmsim CMD: message" on stderr (one line). */
void cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A note on stderr about the input ("read as Paddle does: ..."), held until
 * the command's outcome is known: printed when it returns (or at
 * cli_notes_flush, e.g. before a window opens) unless it failed with an
 * error line, so that a refusal stays one line. At most 4 notes are kept. */
void cli_note(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void cli_notes_flush(void);

/* Every report of every command goes to stdout through stdio, and a write
 * error there (a full disk, a closed descriptor) is sticky on the stream:
 * app/main.c passes each command's exit code through this once, after the
 * command returned. It flushes stdout; when a write failed it prints one line
 * ("fmsim: cannot write to standard output: No space left on device") unless
 * the command already failed with its own error line, and returns
 * FM_EXIT_USAGE. Otherwise it returns rc. It prints the held notes first
 * (cli_note). */
int cli_finish_stdout(int rc);

/* --causal (is_causal = 1) or --bidir (0) into *causal (-1: not given yet);
 * both given is a usage error (printed). 0 on success. */
int cli_causal_flag(const char *cmd, int is_causal, int *causal);

/* The causal flag of an interval file, one check and one message for every
 * command that reads one: *causal as --causal (1) or --bidir (0) gave it;
 * without either (-1), CLI_FLAG_REQUIRED (check --intervals, analyze
 * --intervals, predict --mask, expand: the option names an interval file)
 * refuses, and CLI_FLAG_WHEN_AMBIGUOUS (render and view, whose operand may be a
 * dense mask or a trace too) takes k = 1 as causal-1 and k = 4 as bidir-4,
 * refuses k = 2 (causal-2 or bidir-2), and leaves *causal at -1 for anything
 * that is not an interval file. The refusal is "PATH: " CLI_INTERVALS_NEED_FLAG,
 * the same line from every command. 0, or FM_EXIT_USAGE after printing. */
#define CLI_INTERVALS_NEED_FLAG                                                                \
  "say whether the intervals are causal: --causal or --bidir (the flag is not stored in the " \
  "file)"
typedef enum cli_flag_rule { CLI_FLAG_REQUIRED, CLI_FLAG_WHEN_AMBIGUOUS } cli_flag_rule;
int cli_intervals_causal(const char *cmd, const char *path, cli_flag_rule rule, int *causal);

/* A parser of options several commands share (cli_mask_opt_any,
 * viz_cli_source_opt_any), or of a command's own: 1 taken, 0 not its option,
 * -1 a bad value (printed). */
typedef int (*cli_shared_opt_fn)(const char *cmd, void *opts, int opt, const char *arg);

/* Prints a command's help when the text is computed (defaults read from a
 * registry or a built-in scenario); opts: the command's options, as
 * cli_parse_opts has them, or NULL (cli_unavailable). */
typedef void cli_help_fn(const void *opts);

/* What operands a command takes after its options (cli_opts_def). */
typedef enum cli_operands {
  CLI_NO_OPERANDS,  /* none: the first one left is "unexpected argument 'X'" */
  CLI_OPERANDS      /* the command's own (files, a scenario): cli_parse_opts leaves them in
                       argv[optind..argc), getopt having moved them after the options, and the
                       command checks how many and what they are */
} cli_operands;

/* A command's options, for cli_parse_opts. */
typedef struct cli_opts_def {
  const char *shortopts;         /* getopt's, starting with ':' (":o:" also takes -o FILE) */
  const struct option *longopts; /* the table, {"help", no_argument, 0, 'h'} among it */
  cli_shared_opt_fn shared;      /* tried first: options several commands share; may be NULL */
  cli_shared_opt_fn own;         /* then the command's own; 0 for an option it does not know */
  const char *help;              /* what -h/--help prints; or NULL, and then */
  cli_help_fn *print_help;       /* prints it (called with the command's opts) */
  cli_operands operands;
} cli_opts_def;

/* Every command's whole option loop, the one getopt_long loop of fmsim: each
 * option goes to def->shared, then to def->own (both over the same opts); an
 * unknown option is "unknown option '--x' (see fmsim CMD --help)", a missing
 * value "option '--x' needs a value"; -h/--help prints the help; then the
 * operands as def->operands says. 0 parsed, 1 help printed, -1 bad usage (one
 * line printed). */
int cli_parse_opts(const char *cmd, int argc, char **argv, const cli_opts_def *def, void *opts);

/* The file operand of a command that also takes --family (analyze, view,
 * render): when no file of that name exists and it names a family (or is a
 * typo of one), prints "'causal' is a mask family, not a file: give --family
 * causal" and returns FM_EXIT_USAGE; else 0 (a missing file is the reader's
 * error, as before). path may be NULL. */
int cli_family_operand(const char *cmd, const char *path);

/* The single file operand of check, convert, expand ("a mask file", "an interval
 * file"): 0 with *path, else FM_EXIT_USAGE after printing what is missing or extra. */
int cli_one_file(const char *cmd, const char *what, int argc, char **argv, const char **path);

/* --causal, --bidir and --seqlen-q of interval files (check, expand). */
#define CLI_INTERVAL_LONGOPTS                                                                 \
  {"causal", no_argument, 0, 'c'}, {"bidir", no_argument, 0, 'B'},                            \
      {"seqlen-q", required_argument, 0, 'q'}, {"strict", no_argument, 0, 'S'}
typedef struct cli_interval_opts {
  int causal; /* -1 until --causal or --bidir */
  int64_t sq; /* --seqlen-q, 0 when not given */
  int strict; /* --strict: refuse values Paddle's semantics would read (docs/DESIGN.md) */
} cli_interval_opts;
/* A cli_shared_opt_fn over a cli_interval_opts. */
int cli_interval_opt(const char *cmd, void *o, int opt, const char *arg);

/* Two integers around sep ("0:1024", "1600x1000"; an 'x' sep takes 'X' too):
 * 0, or -1 when text is not of that shape. */
int cli_int_pair(const char *text, char sep, long long *a, long long *b);

/* A command this build lacks: --help/-h prints help(NULL) and exits 0; anything
 * else prints "why" as the error, exit 2. */
int cli_unavailable(const char *cmd, int argc, char **argv, cli_help_fn *help, const char *why);

/* Scans a dense mask file (fm_dense_check_file with options o) into *res
 * (the caller destroys it); 0, or FM_EXIT_USAGE after printing the error. */
struct fm_dense_result;
struct fm_dense_opts;
int cli_dense_scan(const char *cmd, const char *path, const struct fm_dense_opts *o,
                   struct fm_dense_result **res);

/* Ends the open JSON object, prints the document on stdout, frees it. */
void cli_print_json(fm_json *j);

/* Strict integer parsing: the whole string, in [lo, hi]. Prints the error. */
int cli_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
            int64_t *out);

/* A size (a sequence length): cli_int that also takes a k/K (x1024) or M
 * (x1048576) suffix, "32k" = 32768 (fm_parse_size in core/fm_words.h); every
 * size option parses through it. Prints the error. */
int cli_size(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
             int64_t *out);
/* A comma list of sizes (cli_size), at most max of them. */
int cli_size_list(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
                  int64_t *out, int *n, int max);

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
int cli_mask_opt_any(const char *cmd, void *o, int opt, const char *arg); /* a cli_shared_opt_fn */

/* Loads the samples and builds the family mask; the message goes to err
 * (cli_build_family below prints it instead). */
fm_status cli_build_family_err(const cli_mask_opts *o, fm_colmask **out, fm_family_used *used,
                               fm_err *err);
/* The same, printing the error as one line; 0 on success. */
int cli_build_family(const char *cmd, const cli_mask_opts *o, fm_colmask **out,
                     fm_family_used *used);

/* "12.0 MiB"-style text of a byte count. */
const char *cli_bytes(int64_t bytes, char *buf, int cap);

#endif
