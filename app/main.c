/* fmsim — the command line. One file per subcommand; this one dispatches. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "fm_limits.h"
#include "fm_words.h"
#include "commands.h"

/* What this build can do, for `fmsim --version` (the targets' public definitions). */
#ifdef FM_HAVE_VIZ
#define HAS_FIGURES "yes"
#else
#define HAS_FIGURES "no"
#endif
#ifdef FM_HAVE_VIZ_SDL
#define HAS_WINDOW "yes"
#else
#define HAS_WINDOW "no"
#endif
#ifdef FM_HAVE_CUDA
#define HAS_CUDA "yes"
#else
#define HAS_CUDA "no"
#endif
#ifdef FM_HAVE_NCCL
#define HAS_NCCL "yes"
#else
#define HAS_NCCL "no"
#endif

/* The commands: one row each (name, one line for the help); N(fn, "name", ...) for a
 * command whose name is not a C identifier (cmd_fn runs `fmsim name`). */
#define COMMANDS(X, N)                                                                          \
  X(families, "list the mask families, their parameters and defaults")                          \
  X(analyze, "tile classes, block sparsity and mask memory of a family mask")                   \
  X(predict, "predicted kernel time of a mask on a calibrated GPU profile (no GPU needed)")      \
  N(cp_plan, "cp-plan", "context parallelism: split a mask over P GPUs, per-rank work, time, K/V") \
  N(cp_run, "cp-run", "context parallelism: run a plan on P GPUs over NCCL (or --cpu), check, time") \
  X(calibrate, "fit a GPU profile of the timing model to measured kernel times")                 \
  X(check, "does a dense mask (.npy) fit the interval forms? where and why not")                \
  X(convert, "dense mask (.npy) -> Paddle startend_row_indices intervals")                      \
  X(expand, "interval file -> dense mask (.npy)")                                                \
  X(run, "run the kernel on a family mask (GPU, or the CPU simulation), or a scenario file")     \
  X(bench, "the paper's kernel table and sparsity sweep on the GPU (masks for the peer)")        \
  X(verify, "check the GPU kernels against the CPU reference on every family")                  \
  X(linrnn, "chunkwise linear RNN over packed documents: sub-chunk tiles, references, kernel")  \
  X(view, "interactive window: mask, tile classes, bounds, live numbers (SDL2)")                \
  X(render, "the viewer's figure into PNG/SVG/PDF; --gallery; --figure NAME")

#define DECLARE(name, summary) fm_command_fn cmd_##name;
#define DECLARE_N(fn, name, summary) fm_command_fn cmd_##fn;
COMMANDS(DECLARE, DECLARE_N)
#undef DECLARE
#undef DECLARE_N

static const struct {
  const char *name;
  fm_command_fn *run;
  const char *summary;
} commands[] = {
#define ROW(name, summary) {#name, cmd_##name, summary},
#define ROW_N(fn, name, summary) {name, cmd_##fn, summary},
    COMMANDS(ROW, ROW_N)
#undef ROW
#undef ROW_N
};
#define NCOMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void usage(FILE *f) {
  fprintf(f,
          "fmsim %s: a simulator of FlashMask column-interval attention masks\n\n"
          "usage: fmsim [--help | --version] COMMAND [OPTIONS]\n\ncommands:\n",
          FM_VERSION);
  for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n'fmsim help COMMAND' (or 'fmsim COMMAND --help', '-h') describes a command.\n");
}

/* The command closest to a typo, NULL when none is close. */
static const char *closest_command(const char *word) {
  const char *names[NCOMMANDS + 1];
  for (int i = 0; i < NCOMMANDS; i++) names[i] = commands[i].name;
  names[NCOMMANDS] = "help";
  return fm_closest(word, names, NCOMMANDS + 1, fm_suggest_distance(word));
}

static int dispatch(int argc, char **argv) {
  fm_err env_err; /* a malformed FMSIM_MEM_LIMIT is refused before any command (fm_limits.h) */
  if (fm_mem_env_check(&env_err) != FM_OK) {
    cli_error(NULL, "%s", env_err.msg);
    return FM_EXIT_USAGE;
  }
  if (argc < 2) {
    cli_error(NULL, "a command is required (fmsim --help lists them)");
    return FM_EXIT_USAGE;
  }
  /* -h means --help for every command; `fmsim help CMD` is `fmsim CMD --help` */
  for (int k = 2; k < argc && strcmp(argv[k], "--"); k++)
    if (!strcmp(argv[k], "-h")) argv[k] = (char *)"--help";
  if (!strcmp(argv[1], "help") && argc > 2) {
    for (int i = 0; i < NCOMMANDS; i++)
      if (!strcmp(argv[2], commands[i].name)) {
        char *args[] = {argv[2], (char *)"--help", NULL};
        return commands[i].run(2, args);
      }
    cli_unknown_name(NULL, "help: ", "command", argv[2], closest_command(argv[2]),
                     "fmsim --help lists them");
    return FM_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return FM_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    /* one line: the version and what this build can do (tests and scripts probe it) */
    printf("fmsim %s (figures: %s, window: %s, GPU kernels: %s, NCCL: %s)\n", FM_VERSION, HAS_FIGURES,
           HAS_WINDOW, HAS_CUDA, HAS_NCCL);
    return FM_EXIT_OK;
  }
  for (int i = 0; i < NCOMMANDS; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  cli_unknown_name(NULL, "", "command", argv[1], argv[1][0] == '-' ? NULL : closest_command(argv[1]),
                   "fmsim --help lists them");
  return FM_EXIT_USAGE;
}

/* Every command returns through here: a report lost to a full disk or a
 * closed stdout is one line and exit 2, never a silent exit 0 (cli.h). */
int main(int argc, char **argv) { return cli_finish_stdout(dispatch(argc, argv)); }
