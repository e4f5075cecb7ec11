/* fmsim — the command line. One file per subcommand; this one dispatches. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "scenario_run.h"

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} commands[] = {
    {"families", cmd_families, "list the mask families, their parameters and defaults"},
    {"analyze", cmd_analyze, "tile classes, block sparsity and mask memory of a family mask"},
    {"predict", cmd_predict, "predicted kernel time of a mask on a calibrated GPU profile (no GPU needed)"},
    {"calibrate", cmd_calibrate, "fit a GPU profile of the timing model to measured kernel times"},
    {"check", cmd_check, "does a dense mask (.npy) fit the interval forms? where and why not"},
    {"convert", cmd_convert, "dense mask (.npy) -> Paddle startend_row_indices intervals"},
    {"expand", cmd_expand, "interval file -> dense mask (.npy)"},
    {"run", cmd_run, "run the kernel on a family mask (GPU, or the CPU simulation) and write a trace"},
    {"bench", cmd_bench, "the paper's kernel table and sparsity sweep on the GPU (masks for the peer)"},
    {"verify", cmd_verify, "check the GPU kernels against the CPU reference on every family"},
    {"view", cmd_view, "interactive window: mask, tile classes, bounds, live numbers (SDL2)"},
    {"render", cmd_render, "the viewer's figure into PNG/SVG/PDF; --gallery; --figure memory"},
};
#define NCOMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void usage(FILE *f) {
  fprintf(f,
          "fmsim %s: a simulator of FlashMask column-interval attention masks\n\n"
          "usage: fmsim [--help | --version] COMMAND [OPTIONS]\n\ncommands:\n",
          FM_VERSION);
  for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n'fmsim COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return FM_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return FM_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("fmsim %s\n", FM_VERSION);
    return FM_EXIT_OK;
  }
  /* `fmsim run SCENARIO.yaml [options]` (a file right after `run`) runs a scenario;
     `fmsim run --family ...` runs one mask (cmd_run, which also answers --help) */
  if (!strcmp(argv[1], "run") && argc > 2 && argv[2][0] != '-')
    return scenario_run_main(argc - 1, argv + 1);
  for (int i = 0; i < NCOMMANDS; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  cli_error(NULL, "unknown command '%s' (fmsim --help lists them)", argv[1]);
  return FM_EXIT_USAGE;
}
