/* fmsim families: names, parameters, defaults and meaning of every family. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fm_families.h"
#include "fm_json.h"

static const char *help =
    "usage: fmsim families [--json]\n\n"
    "Lists the mask families, the twelve of the FlashMask paper's kernel table first: whether\n"
    "each is causal, the smallest interval form it needs, its parameters with their defaults\n"
    "(the paper's benchmark values; S is the sequence length) and a one-line meaning\n"
    "(definitions: docs/FAMILIES.md).\n"
    "Give parameters to other commands as --param key=value.\n\n"
    "  --json   one JSON array instead of the listing: per family its name, causal, form,\n"
    "           per_head, uses_docs, seeded (its mask depends on --seed), meaning and params,\n"
    "           each with name, default, meaning and kind (\"int\", \"docs\" or \"spans\"); an\n"
    "           \"int\" parameter also has its range, lo and hi (hi \"S\": up to the length)\n";

static const char *kind_name(fm_param_kind k) {
  return k == FM_PARAM_INT ? "int" : k == FM_PARAM_DOCS ? "docs" : "spans";
}

/* The --json listing; scripts read it (bench/make_heldout.py, fuzz/make_seeds.py). */
static void print_json(void) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_array(&j, NULL);
  for (int i = 0; i < fm_family_count(); i++) {
    const fm_family_info *f = fm_family_at(i);
    fm_json_object(&j, NULL);
    fm_json_string(&j, "name", f->name);
    fm_json_bool(&j, "causal", f->causal);
    fm_json_string(&j, "form", f->form);
    fm_json_bool(&j, "per_head", f->per_head);
    fm_json_bool(&j, "uses_docs", f->uses_docs);
    fm_json_bool(&j, "seeded", f->uses_docs || f->per_head || f->reports_seed);
    fm_json_string(&j, "meaning", f->meaning);
    fm_json_array(&j, "params");
    for (int p = 0; p < f->nparams; p++) {
      const fm_param_info *q = &f->params[p];
      fm_json_object(&j, NULL);
      fm_json_string(&j, "name", q->name);
      fm_json_string(&j, "default", q->default_text);
      fm_json_string(&j, "meaning", q->meaning);
      fm_json_string(&j, "kind", kind_name(q->kind));
      if (q->kind == FM_PARAM_INT) {
        fm_json_int(&j, "lo", q->lo);
        if (q->hi == FM_PARAM_HI_S) fm_json_string(&j, "hi", "S");
        else fm_json_int(&j, "hi", q->hi);
      }
      fm_json_end(&j);
    }
    fm_json_end(&j);
    fm_json_end(&j);
  }
  cli_print_json(&j);
}

/* --json, the one option (into an int). */
static int families_opt(const char *cmd, void *json, int opt, const char *arg) {
  (void)cmd;
  (void)arg;
  if (opt != 'j') return 0;
  *(int *)json = 1;
  return 1;
}

int cmd_families(int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, 0, 'j'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":", .longopts = longopts, .own = families_opt,
                            .help = help};
  int json = 0;
  int r = cli_parse_opts("families", argc, argv, &def, &json);
  if (r) return r > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  if (json) {
    print_json();
    return FM_EXIT_OK;
  }
  for (int i = 0; i < fm_family_count(); i++) {
    const fm_family_info *f = fm_family_at(i);
    printf("%-22s %-6s %-9s %s\n", f->name, f->causal ? "causal" : "bidir", f->form, f->meaning);
    for (int p = 0; p < f->nparams; p++)
      printf("    %-12s = %-16s %s\n", f->params[p].name, f->params[p].default_text,
             f->params[p].meaning);
  }
  printf("\nDocuments: docs=, else the sample of S chosen with --sample (sample 0 by default)\n"
         "from the paper's file, else a draw of docs_min..docs_max documents with --seed.\n");
  return FM_EXIT_OK;
}
