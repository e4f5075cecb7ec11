/* fmsim analyze: tile classes, block sparsity and mask memory of one family
 * mask (or the paper's sparsity table). Counts are O(Sk + Tr) time and
 * O(Sk) memory; --out adds the per-tile arrays of the trace; --gpu the
 * predicted kernel time of a family mask (timing_cli.h). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "dense_report.h"
#include "fm_dense.h"
#include "fm_fileio.h"
#include "fm_forms.h"
#include "fm_intervals_io.h"
#include "fm_json.h"
#include "fm_memory.h"
#include "fm_paper.h"
#include "fm_tiles.h"
#include "fm_trace.h"
#include "timing_cli.h"

static const char *help =
    "usage: fmsim analyze --family NAME [options] [--json] [--out DIR]\n"
    "       fmsim analyze MASK.npy [--masked-true] [--bool | --additive] [--br N --bc N]\n"
    "                     [--json] [--out DIR]\n"
    "       fmsim analyze --intervals FILE.npy --causal|--bidir [--seqlen-q N] [--br N --bc N]\n"
    "                     [--json] [--out DIR]\n"
    "       fmsim analyze --paper-table [--br N --bc N] [--seed N] [--json]\n\n"
    "Builds a family mask in column-interval form (or reads one: a dense mask, read as by\n"
    "fmsim check, or an interval file), classifies every Br x Bc tile by the paper's\n"
    "min/max rule (what a kernel decides) and exactly (what the mask is), and reports tile\n"
    "counts, block sparsity rho = masked tiles / all tiles, how many tiles the min/max rule\n"
    "calls partial that are exactly masked or unmasked, and the memory of the mask as a\n"
    "dense bool array, a FlexAttention BlockMask and FlashMask intervals. A dense mask that\n"
    "does not fit any interval form gets its own tiles classified exactly, and the analysis\n"
    "of the tightest mask that fits and masks a subset of it (see fmsim check).\n\n" CLI_MASK_HELP
    "  --json               one JSON object on stdout instead of the table\n"
    "  --out DIR            also write a trace folder: summary.json, tiles.npy,\n"
    "                       tiles_exact.npy (uint8 [sets, Tr, Tc]), columns.npy\n"
    "  --gpu PROFILE        a family mask's predicted forward time at head dim 128 on a GPU\n"
    "                       profile (data/gpu, e.g. h200-sm80; fmsim predict tells more)\n"
    "  --paper-table        block sparsity of the twelve families at 8K/32K/128K, mean of the\n"
    "                       paper's five document samples, next to the paper's own figures\n"
    "  MASK.npy             a dense mask file instead of --family (tiles: --br, --bc)\n"
    "  --masked-true        MASK.npy, bool/integer (and --bool): non-zero = masked\n" DENSE_READING_HELP
    "  --intervals FILE     an interval file (Paddle startend_row_indices) instead of --family\n"
    "  --causal | --bidir   the causal flag of the interval file (required with it)\n"
    "  --seqlen-q N         Sq of the interval file (default Sk)\n"
    "  -h, --help           this text\n";

/* Tile arrays larger than this are refused for --out (two uint8 per tile). */
#define MAX_TILE_ARRAY_BYTES ((int64_t)2 << 30)

static int analyze_mask(const char *cmd, const fm_colmask *m, const cli_mask_opts *o,
                        const fm_family_used *used, int want_tiles, fm_analysis *a,
                        uint8_t **classes, uint8_t **exact) {
  fm_analysis_init(a, m, o->family, used->params, used->docs_source, o->batch, o->heads,
                   (int32_t)o->br, (int32_t)o->bc);
  *classes = *exact = NULL;
  if (want_tiles) {
    int64_t n = (int64_t)fm_colmask_nsets(m) * a->tr * a->tc;
    if (2 * n > MAX_TILE_ARRAY_BYTES) {
      cli_error(cmd, "--out: %lld tiles would need %lld MiB of tile arrays (limit %lld MiB); use "
                "larger --br/--bc or fewer sets", (long long)n, (long long)(2 * n >> 20),
                (long long)(MAX_TILE_ARRAY_BYTES >> 20));
      return -1;
    }
    *classes = malloc((size_t)n);
    *exact = malloc((size_t)n);
    if (!*classes || !*exact) {
      free(*classes);
      free(*exact);
      cli_error(cmd, "cannot allocate %lld bytes of tile arrays", (long long)(2 * n));
      return -1;
    }
  }
  fm_err err;
  if (fm_classify(m, a->br, a->bc, &a->counts, *classes, *exact, &err) != FM_OK) {
    free(*classes);
    free(*exact);
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  return 0;
}

static void print_human(const fm_analysis *a) {
  char b1[32], b2[32], b3[32], b4[32], b5[32];
  printf("family      %s (%s, form %s)\n", a->family, a->causal ? "causal" : "bidirectional",
         a->form == FM_FORM_NONE ? "none" : fm_form_name(a->form));
  if (a->params[0]) printf("params      %s\n", a->params);
  if (a->docs_source[0]) printf("documents   %s\n", a->docs_source);
  printf("mask        Sq=%lld x Sk=%lld, batch %lld, heads %lld, %lld mask set%s\n",
         (long long)a->seqlen_q, (long long)a->seqlen_k, (long long)a->batch, (long long)a->heads,
         (long long)a->bytes.sets, a->bytes.sets == 1 ? " (shared)" : "s (per head)");
  printf("tiles       %d x %d -> %d x %d = %lld tiles\n\n", a->br, a->bc, a->tr, a->tc,
         (long long)a->counts.total);
  printf("            %16s  %16s\n", "min/max rule", "exact");
  for (int c = 0; c < FM_TILE_NCLASSES; c++)
    printf("%-10s  %9lld %5.1f%%  %9lld %5.1f%%\n", fm_tile_class_name(c), (long long)a->counts.minmax[c],
           100.0 * (double)a->counts.minmax[c] / (double)a->counts.total,
           (long long)a->counts.exact[c],
           100.0 * (double)a->counts.exact[c] / (double)a->counts.total);
  printf("rho         %16.4f  %16.4f\n", a->counts.sparsity, a->counts.sparsity_exact);
  printf("min/max partial tiles that are exactly masked: %lld, exactly unmasked: %lld\n\n",
         (long long)a->counts.partial_but_masked, (long long)a->counts.partial_but_unmasked);
  printf("memory      dense bool %s | FlexAttention BlockMask (%d) %s | FlashMask intervals %s "
         "(vectors %s + bounds %s)\n",
         cli_bytes(a->bytes.dense, b1, sizeof b1), FM_FLEX_BLOCK,
         cli_bytes(a->bytes.block_mask, b2, sizeof b2), cli_bytes(a->bytes.intervals, b3, sizeof b3),
         cli_bytes(a->bytes.interval_vectors, b4, sizeof b4),
         cli_bytes(a->bytes.tile_bounds, b5, sizeof b5));
}

static int paper_table(const cli_mask_opts *base, int json) {
  const int64_t *lengths = fm_paper_lengths;
  const char *cmd = "analyze";
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_int(&j, "br", base->br);
  fm_json_int(&j, "bc", base->bc);
  fm_json_array(&j, "paper_table");
  if (!json) {
    printf("Block sparsity rho at %lld x %lld tiles (min/max rule), mean of the five document "
           "samples;\nthe paper's figure beside it. B = 128K/S, H = 32 for per-head random eviction.\n\n",
           (long long)base->br, (long long)base->bc);
    printf("%-22s", "family");
    for (int l = 0; l < FM_PAPER_NLENGTHS; l++) printf("  %4lldK fmsim paper", (long long)(lengths[l] / 1024));
    printf("\n");
  }
  int rc = FM_EXIT_OK;
  for (int f = 0; f < FM_PAPER_NFAMILIES && rc == FM_EXIT_OK; f++) {
    const fm_family_info *fam = fm_family_at(f);
    double paper[FM_PAPER_NLENGTHS];
    for (int l = 0; l < FM_PAPER_NLENGTHS; l++) paper[l] = fm_paper_sparsity(fam->name, lengths[l]);
    if (!json) printf("%-22s", fam->name);
    for (int l = 0; l < FM_PAPER_NLENGTHS && rc == FM_EXIT_OK; l++) {
      double sum = 0, sum_exact = 0;
      const int nsamples = 5;
      for (int k = 0; k < nsamples; k++) {
        cli_mask_opts o = *base;
        o.family = fam->name;
        o.seqlen = lengths[l];
        o.sample = fam->uses_docs ? k : -1;
        o.seed = base->seed + (uint64_t)k;
        o.batch = fam->per_head ? 131072 / lengths[l] : 1;
        o.heads = fam->per_head ? 32 : 1;
        fm_colmask *m = NULL;
        fm_family_used used;
        fm_analysis a;
        uint8_t *c, *e;
        if (cli_build_family(cmd, &o, &m, &used) || analyze_mask(cmd, m, &o, &used, 0, &a, &c, &e)) {
          fm_colmask_destroy(m);
          rc = FM_EXIT_USAGE;
          break;
        }
        sum += a.counts.sparsity;
        sum_exact += a.counts.sparsity_exact;
        fm_colmask_destroy(m);
      }
      if (rc != FM_EXIT_OK) break;
      double rho = sum / nsamples, rho_exact = sum_exact / nsamples;
      if (json) {
        fm_json_object(&j, NULL);
        fm_json_string(&j, "family", fam->name);
        fm_json_int(&j, "seqlen", lengths[l]);
        fm_json_double(&j, "sparsity", rho);
        fm_json_double(&j, "sparsity_exact", rho_exact);
        if (paper[l] >= 0) fm_json_double(&j, "paper", paper[l]);
        else fm_json_null(&j, "paper");
        fm_json_end(&j);
      } else if (paper[l] >= 0) {
        printf("  %11.3f %5.2f", rho, paper[l]);
      } else {
        printf("  %11.3f %5s", rho, "-");
      }
    }
    if (!json) printf("\n");
  }
  fm_json_end(&j);
  fm_json_end(&j);
  if (json && rc == FM_EXIT_OK) fputs(j.buf, stdout);
  if (!json && rc == FM_EXIT_OK)
    printf("\nThe paper's document column comes from a generator that is not block diagonal "
           "(docs/FAMILIES.md);\nfmsim builds the true block-diagonal mask, so its document figures "
           "are lower.\n");
  fm_json_free(&j);
  return rc;
}

/* A mask given as a file: a dense mask or an interval file. */
typedef struct file_opts {
  const char *path;      /* MASK.npy, or NULL */
  const char *intervals; /* --intervals FILE, or NULL */
  int causal, masked_true;
  int64_t sq;
  fm_dense_reading reading;
} file_opts;

/* The interval mask to analyse: the file's intervals, the dense mask's own
 * (when it fits) or its tightest fitting sub-mask; *res keeps a dense
 * analysis (NULL for an interval file). Prints the error; 0 on success. */
static int load_file(const char *cmd, const file_opts *f, const cli_mask_opts *o, fm_colmask **m,
                     fm_dense_result **res) {
  fm_err err;
  *m = NULL;
  *res = NULL;
  if (f->intervals) {
    fm_intervals_opts lo = {.causal = f->causal, .sq = f->sq};
    fm_intervals_note note;
    if (fm_intervals_load(f->intervals, &lo, m, &note, &err) == FM_OK) {
      if (note.text[0]) cli_note(cmd, "%s", note.text);
      return 0;
    }
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  fm_dense_opts d = {.masked_true = f->masked_true, .keep_intervals = 1, .reading = f->reading,
                     .br = (int32_t)o->br, .bc = (int32_t)o->bc};
  fm_status st = fm_dense_check_file(f->path, &d, res, &err);
  if (st == FM_OK)
    st = fm_dense_result_report(*res)->form != FM_FORM_NONE
             ? fm_dense_result_to_colmask(*res, FM_FORM_NONE, m, &err)
             : fm_dense_result_subset_colmask(*res, m, &err);
  if (st == FM_OK) return 0;
  cli_error(cmd, "%s", err.msg);
  fm_dense_result_destroy(*res);
  *res = NULL;
  return -1;
}

static int analyze_file(const char *cmd, const file_opts *f, cli_mask_opts *o, int json,
                        const char *out_dir) {
  fm_colmask *m = NULL;
  fm_dense_result *res = NULL;
  if (load_file(cmd, f, o, &m, &res)) return FM_EXIT_USAGE;
  const fm_dense_report *r = res ? fm_dense_result_report(res) : NULL;
  const int fits = !r || r->form != FM_FORM_NONE;
  fm_family_used used;
  memset(&used, 0, sizeof used);
  snprintf(used.docs_source, sizeof used.docs_source, "%s",
           !r ? "interval file" : fits ? "dense mask file" : "the tightest fitting sub-mask of a dense mask file");
  o->batch = r ? r->batch : fm_colmask_nb(m);
  o->heads = r ? r->heads : fm_colmask_nh(m);
  o->family = f->path ? f->path : f->intervals;
  fm_analysis a;
  uint8_t *classes, *exact;
  int rc = analyze_mask(cmd, m, o, &used, out_dir != NULL, &a, &classes, &exact) ? FM_EXIT_USAGE : FM_EXIT_OK;
  fm_err err;
  if (rc == FM_EXIT_OK && out_dir && fm_trace_write_analysis(out_dir, &a, m, classes, exact, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    rc = FM_EXIT_USAGE;
  }
  if (rc == FM_EXIT_OK && json) {
    fm_json j;
    fm_json_init(&j, 1);
    fm_json_object(&j, NULL);
    fm_analysis_json(&a, &j);
    fm_json_bool(&j, "representable", fits);
    if (r && !fits) dense_report_advice_json(&j, r, NULL);
    if (out_dir) fm_json_string(&j, "trace", out_dir);
    fm_json_end(&j);
    fputs(j.buf, stdout);
    fm_json_free(&j);
  } else if (rc == FM_EXIT_OK) {
    if (!fits) {
      printf("mask        %s does NOT FIT any interval form (fmsim check says why and what to do)\n", f->path);
      dense_report_advice_human(stdout, r, NULL);
      printf("\nThe tightest mask that fits and masks a subset of it (two longest runs per column):\n");
    }
    print_human(&a);
    if (out_dir) printf("trace       %s\n", out_dir);
  }
  if (rc == FM_EXIT_OK) {
    free(classes);
    free(exact);
  }
  fm_dense_result_destroy(res);
  fm_colmask_destroy(m);
  return rc;
}

/* Options that only a file takes, or only a family. 0 when consistent. */
static int file_usage(const char *cmd, const file_opts *f, const cli_mask_opts *o, int table) {
  if (f->path && f->intervals) {
    cli_error(cmd, "give a mask file or --intervals FILE, not both");
    return -1;
  }
  const char *file = f->path ? f->path : f->intervals;
  if (file && (o->family || table)) {
    cli_error(cmd, "%s: a mask file goes without --family and --paper-table", file);
    return -1;
  }
  if (!f->intervals && (f->causal >= 0 || f->sq)) {
    cli_error(cmd, "--causal, --bidir and --seqlen-q go with --intervals");
    return -1;
  }
  if (!f->path && (f->masked_true || f->reading != FM_DENSE_READ_AUTO)) {
    cli_error(cmd, "--masked-true, --bool and --additive go with a dense MASK.npy");
    return -1;
  }
  return 0;
}

static int analyze_family(const char *cmd, cli_mask_opts *op, int json, const char *out_dir,
                          const fm_gpu_profile *prof);

/* What analyze's command line says. */
typedef struct analyze_opts {
  cli_mask_opts mask; /* first: cli_mask_opt_any takes the family's options */
  file_opts f;
  const char *out_dir, *gpu;
  int json, table;
} analyze_opts;

/* analyze's options besides the family's: 1 taken, -1 a bad value (printed), 0 none of them. */
static int analyze_opt(const char *cmd, void *v, int opt, const char *arg) {
  analyze_opts *a = v;
  int r = dense_reading_opt(cmd, opt, &a->f.reading);
  if (r) return r;
  switch (opt) {
  case 'j': a->json = 1; return 1;
  case 'o': a->out_dir = arg; return 1;
  case 'P': a->table = 1; return 1;
  case 'g': a->gpu = arg; return 1;
  case 'i': a->f.intervals = arg; return 1;
  case 'c':
  case 'B': return cli_causal_flag(cmd, opt == 'c', &a->f.causal) ? -1 : 1;
  case 'q': return cli_size(cmd, "--seqlen-q", arg, 1, FM_MAX_SEQLEN, &a->f.sq) ? -1 : 1;
  case 'm': a->f.masked_true = 1; return 1;
  }
  return 0;
}

int cmd_analyze(int argc, char **argv) {
  static const struct option longopts[] = {CLI_MASK_LONGOPTS,
                                           {"json", no_argument, 0, 'j'},
                                           {"out", required_argument, 0, 'o'},
                                           {"paper-table", no_argument, 0, 'P'},
                                           {"gpu", required_argument, 0, 'g'},
                                           {"intervals", required_argument, 0, 'i'},
                                           {"causal", no_argument, 0, 'c'},
                                           {"bidir", no_argument, 0, 'B'},
                                           {"seqlen-q", required_argument, 0, 'q'},
                                           {"masked-true", no_argument, 0, 'm'},
                                           DENSE_READING_LONGOPTS,
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":", .longopts = longopts, .shared = cli_mask_opt_any,
                            .own = analyze_opt, .help = help, .operands = CLI_OPERANDS};
  const char *cmd = "analyze";
  analyze_opts a = {.f = {.causal = -1}};
  cli_mask_opts_init(&a.mask);
  int r = cli_parse_opts(cmd, argc, argv, &def, &a);
  if (r) return r > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  cli_mask_opts *o = &a.mask;
  file_opts *f = &a.f;
  if (optind < argc) f->path = argv[optind++];
  if (optind < argc) {
    cli_error(cmd, "unexpected argument '%s' (one mask file at a time)", argv[optind]);
    return FM_EXIT_USAGE;
  }
  if (cli_family_operand(cmd, f->path)) return FM_EXIT_USAGE;
  if (file_usage(cmd, f, o, a.table)) return FM_EXIT_USAGE;
  if (f->intervals && cli_intervals_causal(cmd, f->intervals, CLI_FLAG_REQUIRED, &f->causal))
    return FM_EXIT_USAGE;
  if (a.gpu && !o->family) {
    cli_error(cmd, "--gpu goes with --family (an interval file: fmsim predict --mask FILE)");
    return FM_EXIT_USAGE;
  }
  fm_gpu_profile prof;
  char note[8];
  if (a.gpu && timing_profile_load(cmd, a.gpu, FM_KERNEL_AUTO, 128, &prof, note, sizeof note))
    return FM_EXIT_USAGE;
  if (a.table) {
    if (o->family || a.out_dir) {
      cli_error(cmd, "--paper-table takes no --family or --out");
      return FM_EXIT_USAGE;
    }
    return paper_table(o, a.json);
  }
  if (!f->path && !f->intervals && !o->family) {
    cli_error(cmd, "--family is required, or a mask file, or --intervals FILE (fmsim families "
              "lists the families)");
    return FM_EXIT_USAGE;
  }
  /* the trace folder: locked and checked for planted links before any work (fm_fileio.h rule 7) */
  fm_outdir_lock lock = {.held = 0};
  fm_err err;
  if (a.out_dir && fm_outdir_lock_take(&lock, a.out_dir, 1, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  int rc = f->path || f->intervals ? analyze_file(cmd, f, o, a.json, a.out_dir)
                                   : analyze_family(cmd, o, a.json, a.out_dir, a.gpu ? &prof : NULL);
  fm_outdir_lock_release(&lock);
  return rc;
}

/* A family's analysis (and its trace in out_dir, its prediction on prof). */
static int analyze_family(const char *cmd, cli_mask_opts *op, int json, const char *out_dir,
                          const fm_gpu_profile *prof) {
  cli_mask_opts o = *op;
  const int gpu = prof != NULL;
  fm_colmask *m = NULL;
  fm_family_used used;
  fm_analysis a;
  uint8_t *classes, *exact;
  if (cli_build_family(cmd, &o, &m, &used)) return FM_EXIT_USAGE;
  if (analyze_mask(cmd, m, &o, &used, out_dir != NULL, &a, &classes, &exact)) {
    fm_colmask_destroy(m);
    return FM_EXIT_USAGE;
  }
  int rc = FM_EXIT_OK;
  if (out_dir) {
    fm_err err;
    if (fm_trace_write_analysis(out_dir, &a, m, classes, exact, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      rc = FM_EXIT_USAGE;
    }
  }
  if (rc == FM_EXIT_OK) {
    if (json) {
      fm_json j;
      fm_json_init(&j, 1);
      fm_json_object(&j, NULL);
      fm_analysis_json(&a, &j);
      if (out_dir) fm_json_string(&j, "trace", out_dir);
      if (gpu && timing_cli_predict_mask(cmd, prof, m, o.batch, o.heads, 128, &j)) rc = FM_EXIT_USAGE;
      if (rc == FM_EXIT_OK) cli_print_json(&j);
      else fm_json_free(&j);
    } else {
      print_human(&a);
      if (out_dir) printf("trace       %s\n", out_dir);
      if (gpu && timing_cli_predict_mask(cmd, prof, m, o.batch, o.heads, 128, NULL)) rc = FM_EXIT_USAGE;
    }
  }
  free(classes);
  free(exact);
  fm_colmask_destroy(m);
  return rc;
}
