/* Tests of scenario files and `fmsim run SCENARIO.yaml`: the shipped
 * scenarios parse, cases expand as written, a run writes traces, index and
 * report and a rerun resumes, and every bad scenario gets one line naming
 * file:line and the key. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include "fm_jsonr.h"
#include "fm_npy.h"
#include "fm_scenario.h"
#include "fm_test_util.h"
#ifdef FM_HAVE_VIZ
#include "viz.h"
#endif

static fmt_result res;

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

static void scn_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/scn_%d_%s", FM_TEST_TMP_DIR, (int)getpid(), name);
}

Test(scenario, shipped_scenarios_parse) {
  const char *names[] = {"default", "paper-kernel-table", "sparsity-sweep", "memory-scaling",
                         "teaching-tour", "linear-rnn-docpack"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/../scenarios/%s.yaml", FM_TEST_SOURCE_DIR, names[i]);
    fm_scenario *s = malloc(sizeof *s);
    fm_err e;
    cr_assert_eq(fm_scenario_load(path, s, &e), FM_OK, "%s: %s", names[i], e.msg);
    fm_scn_case *cases;
    int n;
    cr_assert_eq(fm_scenario_cases(s, &cases, &n, NULL), FM_OK);
    cr_assert_gt(n, 0);
    free(cases);
    free(s);
  }
}

Test(scenario, cases_expand_as_written) {
  char path[512];
  scn_path(path, sizeof path, "expand.yaml");
  write_text(path,
             "# comment\n"
             "name: expand\n"
             "seqlen: {from: 1024, to: 8192, factor: 2}   # 4 lengths\n"
             "head_dim: [64, 128]\n"
             "batch: auto\n"
             "heads: auto\n"
             "samples: [0, 2]\n"
             "masks:\n"
             "  - family: causal\n"
             "  - family: document\n"
             "    seqlen: 8192\n"
             "    params: {docs: \"4000,4192\"}\n"
             "  - family: random_eviction\n"
             "    draws: 3\n"
             "    seqlen: [2048]\n");
  fm_scenario *s = malloc(sizeof *s);
  fm_err e;
  cr_assert_eq(fm_scenario_load(path, s, &e), FM_OK, "%s", e.msg);
  cr_assert_str_eq(s->name, "expand");
  cr_assert_str_eq(s->output, "out/expand");
  cr_assert_eq(s->seqlen.n, 4);
  cr_assert_eq(s->seqlen.v[3], 8192);
  fm_scn_case *c;
  int n;
  cr_assert_eq(fm_scenario_cases(s, &c, &n, NULL), FM_OK);
  /* causal: 4 lengths x 2 dims; document: 1 x 2 x 2 samples; eviction: 1 x 2 x 3 draws */
  cr_assert_eq(n, 8 + 4 + 6);
  cr_assert_eq(c[0].batch, 128);  /* 131072 / 1024 */
  cr_assert_eq(c[0].heads, 64);   /* 4096 / 64 */
  cr_assert_eq(c[1].heads, 32);
  cr_assert_eq(c[8].sample, 0);
  cr_assert_eq(c[9].sample, 2);
  cr_assert_eq(c[17].seed, 2);
  cr_assert_str_eq(fm_scn_param(s, &s->masks[1], 0), "docs=4000,4192");
  for (int i = 0; i < n; i++)
    for (int k = 0; k < i; k++) cr_assert_str_neq(c[i].id, c[k].id, "case ids are unique");
  free(c);
  free(s);
  unlink(path);
}

static void expect_bad(const char *text, const char *needle) {
  char path[512], args[1024];
  scn_path(path, sizeof path, "bad.yaml");
  write_text(path, text);
  snprintf(args, sizeof args, "run %s --out %s/scn_bad_out_%d", path, FM_TEST_TMP_DIR, (int)getpid());
  fmt_run(&res, args);
  cr_assert_eq(res.status, 2, "exit %d for:\n%s\nstderr: %s", res.status, text, res.err);
  cr_assert_eq(res.err_lines, 1, "stderr has %d lines:\n%s", res.err_lines, res.err);
  cr_assert(strstr(res.err, needle), "stderr '%s' lacks '%s'", res.err, needle);
  char out[600];
  snprintf(out, sizeof out, "%s/scn_bad_out_%d/index.csv", FM_TEST_TMP_DIR, (int)getpid());
  cr_assert(access(out, F_OK) != 0, "no index written for a bad scenario");
  unlink(path);
}

Test(scenario, bad_scenarios_name_file_line_and_key) {
  expect_bad("name: x\nseqlne: 1024\nmasks:\n  - family: causal\n",
             "bad.yaml:2: key 'seqlne': unknown key in the scenario (did you mean 'seqlen'?)");
  expect_bad("name: x\nseqlen: lots\nmasks:\n  - family: causal\n",
             ":2: key 'seqlen': expected an integer, got 'lots'");
  expect_bad("name: x\nhead_dim: 96\nmasks:\n  - family: causal\n",
             ":2: key 'head_dim': head dim 96 is not supported (64 or 128)");
  expect_bad("name: x\nbr: 0\nmasks:\n  - family: causal\n", ":2: key 'br': 0 is out of range");
  expect_bad("name: x\nmasks:\n  - family: casual\n",
             ":3: key 'family': unknown family 'casual' (did you mean 'causal'?)");
  expect_bad("name: x\nmasks:\n  - family: causal\n    parms: {a: 1}\n",
             ":4: key 'parms': unknown key in a mask entry (did you mean 'params'?)");
  expect_bad("name: x\nrun: [analyse]\nmasks:\n  - family: causal\n",
             "key 'run': unknown value 'analyse' (did you mean 'analyze'?)");
  expect_bad("name: x\nmasks: []\n", "key 'masks': required");
  expect_bad("seqlen: 8\nmasks:\n  - family: causal\n", "key 'name': required");
  expect_bad("name: x\nmasks:\n  - family: causal\n    seqlen: [1, [2]]\n", "expected an integer");
  expect_bad("name: x\nmasks:\n  - family: [causal\n", "YAML syntax error");
  expect_bad("name: x\nmasks:\n  - intervals: nonexistent.npy\n",
             "an interval file needs causal: true or false");
  expect_bad("name: x\nmasks:\n  - intervals: nonexistent.npy\n    causal: true\n", "nonexistent.npy");
  expect_bad("name: x\nmasks:\n  - family: sliding_window\n    params: {w: 0}\n", "w=0 is out of range");
  /* refused up front: 2^30 tokens with 1 x 1 tiles would need exabytes of tile arrays */
  expect_bad("name: x\nseqlen: 1073741824\nbr: 1\nbc: 1\nmasks:\n  - family: causal\n",
             "per-tile arrays would take about 2.0 EiB; this machine can give");
  expect_bad("name: x\nreport: chunks\nmasks:\n  - family: causal\n", "key 'chunk'");
}

Test(scenario, missing_file_and_help) {
  fmt_run(&res, "run /nonexistent/s.yaml");
  cr_assert_eq(res.status, 2);
  cr_assert_eq(res.err_lines, 1);
  cr_assert(strstr(res.err, "cannot open scenario"));
}

Test(scenario, run_writes_traces_index_report_and_resumes) {
  char path[512], out[512], args[1200], file[800];
  scn_path(path, sizeof path, "small.yaml");
  scn_path(out, sizeof out, "small_out");
  write_text(path,
             "name: small\n"
             "seqlen: [256, 512]\n"
             "br: 32\nbc: 32\n"
             "run: [analyze, gpu]\n"
             "masks:\n"
             "  - family: causal_document\n"
             "    params: {docs: \"100,100\"}\n"
             "  - family: sliding_window\n");
  snprintf(args, sizeof args, "run %s --out %s", path, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "4 cases (0 from an earlier run)"), "%s", res.out);
  const char *files[] = {"index.csv", "index.json", "report.md",
                         "cases/m00-causal_document-S256-D128-32x32/summary.json",
                         "cases/m01-sliding_window-S512-D128-32x32/tiles.npy"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(file, sizeof file, "%s/%s", out, files[i]);
    cr_assert(access(file, F_OK) == 0, "missing %s", files[i]);
  }
  char report[65536];
  snprintf(file, sizeof file, "%s/report.md", out);
  fmt_slurp(file, report, sizeof report);
  cr_assert(strstr(report, "GPU step (kernels) skipped: "), "%s", report);
  snprintf(file, sizeof file, "%s/index.csv", out);
  char csv[8192];
  fmt_slurp(file, csv, sizeof csv);
  int lines = 0;
  for (char *p = csv; *p; p++) lines += *p == '\n';
  cr_assert_eq(lines, 5, "header + 4 cases");
  /* a rerun skips finished cases; a case without its row is redone */
  snprintf(file, sizeof file, "%s/cases/m01-sliding_window-S256-D128-32x32/row.tsv", out);
  unlink(file);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "4 cases (3 from an earlier run)"), "%s", res.out);
  /* --only */
  snprintf(args, sizeof args, "run %s --out %s --only '*sliding*'", path, out);
  fmt_run(&res, args);
  cr_assert(strstr(res.out, "2 cases"), "%s", res.out);
  snprintf(args, sizeof args, "run %s --out %s --only 'nothing*'", path, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 2);
  cr_assert(strstr(res.err, "no case matches"));
}

Test(scenario, file_masks_and_a_sample_file) {
  /* a dense mask, an interval file and documents from a sample file, all
     relative to the scenario's folder */
  char dir[512], path[700], out[700], args[1600], file[900];
  scn_path(dir, sizeof dir, "files");
  mkdir(dir, 0755);
  const int S = 96;
  uint8_t *attend = malloc((size_t)S * S);
  for (int i = 0; i < S; i++)
    for (int j = 0; j < S; j++) attend[i * S + j] = j <= i && (i < 40) == (j < 40); /* two documents */
  int64_t shape[2] = {S, S};
  snprintf(path, sizeof path, "%s/docs.npy", dir);
  cr_assert_eq(fm_npy_save(path, FM_DT_BOOL, 2, shape, attend, NULL), FM_OK);
  free(attend);
  int32_t lts[S];
  for (int j = 0; j < S; j++) lts[j] = j + 8 < S ? j + 8 : S; /* sliding window w = 8 */
  int64_t ishape[4] = {1, 1, S, 1};
  snprintf(path, sizeof path, "%s/window.npy", dir);
  cr_assert_eq(fm_npy_save(path, FM_DT_I32, 4, ishape, lts, NULL), FM_OK);
  snprintf(path, sizeof path, "%s/docs.txt", dir);
  write_text(path, "Total length: 96\nSample 1, num_docs 2: [(5, 40), (5, 56)]# [0, 1]\n");
  snprintf(path, sizeof path, "%s/files.yaml", dir);
  write_text(path,
             "name: files\n"
             "seqlen: 96\n"
             "br: 16\nbc: 16\n"
             "sample_file: docs.txt\n"
             "masks:\n"
             "  - dense: docs.npy\n"
             "  - intervals: window.npy\n"
             "    causal: true\n"
             "  - family: causal_document\n"
             "    samples: 0\n");
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(args, sizeof args, "run %s --out %s", path, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  char index[65536];
  snprintf(file, sizeof file, "%s/index.csv", out);
  fmt_slurp(file, index, sizeof index);
  /* the dense mask and the sampled family are the same two causal documents */
  double rho_dense = -1, rho_family = -1, rho_window = -1;
  for (char *line = strtok(index, "\n"); line; line = strtok(NULL, "\n")) {
    double rho;
    char id[256];
    if (sscanf(line, "%255[^,],%*[^,],%*d,%*d,%*d,%*d,%*d,%*d,%*d,%*d,%*d,%*[^,],%*d,%*d,%*d,%*d,%lf", id, &rho) != 2)
      continue;
    if (strstr(id, "docs.npy")) rho_dense = rho;
    if (strstr(id, "window.npy")) rho_window = rho;
    if (strstr(id, "causal_document")) rho_family = rho;
  }
  cr_assert_gt(rho_dense, 0.3, "dense case ran (%f)", rho_dense);
  cr_assert_float_eq(rho_dense, rho_family, 1e-12, "dense %f vs family %f", rho_dense, rho_family);
  cr_assert_gt(rho_window, 0.5);
}

/* ---- the key table ------------------------------------------------------------------------ */

Test(scenario, gpu_step_keys_and_defaults) {
  fm_scenario *s = malloc(sizeof *s);
  fm_scenario_defaults(s);
  cr_assert_eq(s->nkernels, 1);
  cr_assert_eq(s->kernels[0], FM_KERNEL_AUTO);
  cr_assert(s->warmup == 2 && s->reps == 5 && s->noskip_reps == 0 && s->instrument_reps == 0);
  cr_assert_eq(s->sustained_ms, 0, "launch counts unless sustained_ms: says otherwise");
  cr_assert(s->cupti == 1 && s->count_bytes == 0 && s->variant == FM_VARIANT_SKIP);
  cr_assert_eq(s->pass, FM_PASS_FWD, "the forward unless pass: says otherwise");
  cr_assert_eq(s->mask_method, FM_MASK_METHOD_AUTO, "the library's unless mask_method: says otherwise");
  cr_assert(s->tokens == 131072 && s->hidden == 4096);
  const char *text = "name: keys\n"
                     "seqlen: 4096\n"
                     "batch: auto\nheads: auto\n"
                     "tokens: 65536\nhidden: 2048\n"
                     "kernel: [sm90, sm80]\n"
                     "variant: noskip\n"
                     "mask_method: slices\n"
                     "pass: both\n"
                     "warmup: 1\nreps: 7\nnoskip_reps: 2\ninstrument_reps: 4\n"
                     "sustained_ms: 1500\n"
                     "count_bytes: true\ncupti: false\n"
                     "figures: [gallery, tiles]\n"
                     "masks:\n  - family: causal\n";
  fm_err e;
  cr_assert_eq(fm_scenario_parse(text, strlen(text), "keys.yaml", ".", s, &e), FM_OK, "%s", e.msg);
  cr_assert_eq(s->nkernels, 2);
  cr_assert(s->kernels[0] == FM_KERNEL_SM90 && s->kernels[1] == FM_KERNEL_SM80);
  cr_assert_eq(s->variant, FM_VARIANT_NOSKIP);
  cr_assert_eq(s->mask_method, FM_MASK_METHOD_SLICES);
  cr_assert_eq(s->pass, FM_PASS_BOTH);
  cr_assert(s->warmup == 1 && s->reps == 7 && s->noskip_reps == 2 && s->instrument_reps == 4);
  cr_assert_eq(s->sustained_ms, 1500);
  cr_assert(s->count_bytes == 1 && s->cupti == 0);
  cr_assert(s->nfigures == 2 && !strcmp(s->figures[1], "tiles") && s->figures_line == 18);
  fm_scn_case *c;
  int n;
  cr_assert_eq(fm_scenario_cases(s, &c, &n, NULL), FM_OK);
  cr_assert_eq(n, 1);
  cr_assert_eq(c[0].batch, 16); /* tokens / S */
  cr_assert_eq(c[0].heads, 16); /* hidden / D */
  free(c);
  const char *r2p = "name: r2p\nmask_method: r2p\nmasks:\n  - family: causal\n";
  cr_assert_eq(fm_scenario_parse(r2p, strlen(r2p), "r2p.yaml", ".", s, &e), FM_OK, "%s", e.msg);
  cr_assert_eq(s->mask_method, FM_MASK_METHOD_R2P);
  const char *words = "name: words\nmask_method: words\nmasks:\n  - family: causal\n";
  cr_assert_eq(fm_scenario_parse(words, strlen(words), "words.yaml", ".", s, &e), FM_OK, "%s", e.msg);
  cr_assert_eq(s->mask_method, FM_MASK_METHOD_WORDS);
  free(s);
}

/* batch and heads per mask: a value or auto there wins over the scenario's */
Test(scenario, batch_and_heads_per_mask) {
  fm_scenario *s = malloc(sizeof *s);
  const char *text = "name: per_mask\n"
                     "seqlen: 4096\nhead_dim: 64\n"
                     "batch: 1\nheads: 16\n"
                     "masks:\n"
                     "  - family: causal\n"
                     "  - family: causal\n    batch: auto\n    heads: auto\n"
                     "  - family: full\n    batch: 3\n"
                     "  - family: full\n    heads: 5\n";
  fm_err e;
  cr_assert_eq(fm_scenario_parse(text, strlen(text), "per_mask.yaml", ".", s, &e), FM_OK, "%s", e.msg);
  fm_scn_case *c;
  int n;
  cr_assert_eq(fm_scenario_cases(s, &c, &n, NULL), FM_OK);
  cr_assert_eq(n, 4);
  cr_assert(c[0].batch == 1 && c[0].heads == 16, "the scenario's");
  cr_assert(c[1].batch == 32 && c[1].heads == 64, "auto: 131072 / 4096 and 4096 / 64");
  cr_assert(c[2].batch == 3 && c[2].heads == 16);
  cr_assert(c[3].batch == 1 && c[3].heads == 5);
  free(c);
  free(s);
  expect_bad("name: x\nmasks:\n  - family: causal\n    batch: 0\n", ":4: key 'batch': 0 is out of range");
}

Test(scenario, bad_gpu_step_keys) {
  expect_bad("name: x\nkernel: [sm80, sm70]\nmasks:\n  - family: causal\n",
             ":2: key 'kernel': unknown kernel 'sm70' (expected sm80, sm90 or auto)");
  expect_bad("name: x\nkernel: []\nmasks:\n  - family: causal\n", ":2: key 'kernel': empty list");
  expect_bad("name: x\nvariant: fast\nmasks:\n  - family: causal\n",
             ":2: key 'variant': unknown variant 'fast'");
  expect_bad("name: x\nseed: 1\nmask_method: R2P\nmasks:\n  - family: causal\n",
             ":3: key 'mask_method': unknown mask method 'R2P' (expected auto, slices, r2p or words)");
  expect_bad("name: x\nmask_method: [slices]\nmasks:\n  - family: causal\n",
             ":2: key 'mask_method': unknown mask method");
  expect_bad("name: x\nmasks:\n  - family: causal\n    mask_method: slices\n",
             ":4: key 'mask_method': unknown key in a mask entry");
  expect_bad("name: x\npass: backward\nmasks:\n  - family: causal\n",
             ":2: key 'pass': unknown pass 'backward' (expected fwd, bwd or both)");
  expect_bad("name: x\nmasks:\n  - family: causal\n    pass: bwd\n",
             ":4: key 'pass': unknown key in a mask entry");
  expect_bad("name: x\nreps: 0\nmasks:\n  - family: causal\n", ":2: key 'reps': 0 is out of range");
  expect_bad("name: x\nsustained_ms: 60001\nmasks:\n  - family: causal\n",
             ":2: key 'sustained_ms': 60001 is out of range");
  expect_bad("name: x\ncupti: maybe\nmasks:\n  - family: causal\n",
             ":2: key 'cupti': expected true or false");
  expect_bad("name: x\nmasks:\n  - family: causal\n    reps: 3\n",
             ":4: key 'reps': unknown key in a mask entry");
}

/* profile: a name of data/gpu stays a name; a file (a '/' or .json) is found
 * beside the scenario; the key's line is kept for the runner's messages. */
Test(scenario, profile_key_names_a_profile_or_a_file) {
  fm_scenario *s = malloc(sizeof *s);
  fm_err e;
  fm_scenario_defaults(s);
  cr_assert_eq(s->profile[0], 0, "no profile unless one is given");
  const char *name = "name: p\nkernel: sm80\n\nprofile: h200-sm80\nmasks:\n  - family: causal\n";
  cr_assert_eq(fm_scenario_parse(name, strlen(name), "p.yaml", "/some/dir", s, &e), FM_OK, "%s", e.msg);
  cr_assert_str_eq(s->profile, "h200-sm80");
  cr_assert_eq(s->profile_line, 4);
  const char *file = "name: p\nprofile: gpus/mine.json\nmasks:\n  - family: causal\n";
  cr_assert_eq(fm_scenario_parse(file, strlen(file), "p.yaml", "/some/dir", s, &e), FM_OK, "%s", e.msg);
  cr_assert_str_eq(s->profile, "/some/dir/gpus/mine.json");
  const char *bare = "name: p\nprofile: mine.json\nmasks:\n  - family: causal\n";
  cr_assert_eq(fm_scenario_parse(bare, strlen(bare), "p.yaml", "/some/dir", s, &e), FM_OK, "%s", e.msg);
  cr_assert_str_eq(s->profile, "/some/dir/mine.json");
  const char *abs = "name: p\nprofile: /abs/p.json\nmasks:\n  - family: causal\n";
  cr_assert_eq(fm_scenario_parse(abs, strlen(abs), "p.yaml", "/some/dir", s, &e), FM_OK, "%s", e.msg);
  cr_assert_str_eq(s->profile, "/abs/p.json");
  free(s);
  expect_bad("name: x\nprofile: [a, b]\nmasks:\n  - family: causal\n",
             ":2: key 'profile': expected a profile name (data/gpu) or a .json file");
  expect_bad("name: x\nprofile: ''\nmasks:\n  - family: causal\n",
             ":2: key 'profile': expected a profile name");
  expect_bad("name: x\nmasks:\n  - family: causal\n    profile: h200-sm80\n",
             ":4: key 'profile': unknown key in a mask entry");
}

Test(scenario, unknown_figure_names_its_line_and_the_registry) {
  char path[512], args[1024];
  scn_path(path, sizeof path, "fig.yaml");
  write_text(path, "name: x\nseqlen: 256\nfigures: [gallery, gallry]\nmasks:\n  - family: causal\n");
  snprintf(args, sizeof args, "run %s --out %s/scn_fig_out_%d", path, FM_TEST_TMP_DIR, (int)getpid());
  fmt_run(&res, args);
  if (res.status == 0) { /* a build without cairo draws no figures and says so */
    cr_assert(strstr(res.err, "without cairo"), "%s", res.err);
    return;
  }
  cr_assert_eq(res.status, 2, "%s", res.err);
  cr_assert_eq(res.err_lines, 1, "%s", res.err);
  cr_assert(strstr(res.err, "fig.yaml:3: key 'figures': unknown figure 'gallry' (expected gallery"),
            "%s", res.err);
}

/* ---- limits: refused before anything large is allocated ------------------------------------ */

static double elapsed_run(const char *args) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  fmt_run(&res, args);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

static void expect_refused_fast(const char *name, const char *text, size_t len, const char *needle) {
  char path[512], args[1300], out[600];
  scn_path(path, sizeof path, name);
  FILE *f = fopen(path, "wb");
  fwrite(text, 1, len, f);
  fclose(f);
  snprintf(out, sizeof out, "%s/scn_refused_%d", FM_TEST_TMP_DIR, (int)getpid());
  snprintf(args, sizeof args, "run %s --out %s", path, out);
  double s = elapsed_run(args);
  cr_assert_eq(res.status, 2, "%s: exit %d: %s", name, res.status, res.err);
  cr_assert_eq(res.err_lines, 1, "%s: %s", name, res.err);
  cr_assert(strstr(res.err, needle), "%s: '%s' lacks '%s'", name, res.err, needle);
  cr_assert_lt(s, 5.0, "%s: refused after %.1f s", name, s);
  cr_assert(access(out, F_OK) != 0, "%s: nothing written", name);
  unlink(path);
}

Test(scenario, case_count_is_capped_before_allocating) {
  /* 31 lengths x 64 x 64 tile sizes x 100000 draws: 1.3e10 cases */
  char text[4096];
  int n = snprintf(text, sizeof text, "name: x\nseqlen: {from: 1, to: 1073741824, factor: 2}\nbr: [");
  for (int i = 1; i <= 64; i++) n += snprintf(text + n, sizeof text - (size_t)n, "%s%d", i > 1 ? ", " : "", i);
  n += snprintf(text + n, sizeof text - (size_t)n, "]\nbc: {from: 1, to: 65536, factor: 2}\n"
                "draws: 100000\nmasks:\n  - family: causal\n");
  expect_refused_fast("count.yaml", text, (size_t)n, "cases (at most 50000); use fewer");
}

Test(scenario, yaml_size_and_nesting_are_capped_before_libyaml) {
  size_t big = FM_SCN_MAX_FILE_BYTES + 10;
  char *text = malloc(big);
  memset(text, '#', big);
  memcpy(text, "name: x\n", 8);
  text[big - 1] = '\n';
  expect_refused_fast("big.yaml", text, big, "too large for a scenario (at most 1048576)");
  free(text);
  /* 100K nested brackets took libyaml a minute */
  size_t depth = 100000, len = 0;
  text = malloc(2 * depth + 64);
  len += (size_t)sprintf(text, "name: x\nmasks: ");
  memset(text + len, '[', depth);
  len += depth;
  memset(text + len, ']', depth);
  len += depth;
  expect_refused_fast("deep.yaml", text, len, "deep.yaml:2: brackets nested deeper than 32 levels");
  free(text);
}

Test(scenario, per_tile_arrays_are_estimated_before_allocating) {
  /* 2^20 tokens in 16 x 16 tiles: 4.3e9 tiles, 8.6 GB of tile arrays */
  const char *text = "name: x\nseqlen: 1048576\nbr: 16\nbc: 16\nmasks:\n  - family: causal\n";
  expect_refused_fast("tiles.yaml", text, strlen(text), "GiB");
  cr_assert(strstr(res.err, "per-tile arrays") || strstr(res.err, "more than this machine has"),
            "%s", res.err);
  cr_assert(strstr(res.err, "tiles.yaml:6: key 'masks': case m00-causal-S1048576-D128-16x16"),
            "%s", res.err);
}

/* ---- interruption ------------------------------------------------------------------------- */

static void sleep_ms(long ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Starts `fmsim run path --out out` in the background, stderr into err_path. */
static pid_t spawn_run(const char *path, const char *out, const char *err_path) {
  pid_t pid = fork();
  if (pid == 0) {
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), n = open("/dev/null", O_RDWR);
    dup2(n, 0);
    dup2(n, 1);
    dup2(e, 2);
    execl(FMSIM_BIN, FMSIM_BIN, "run", path, "--out", out, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int count_entries_like(const char *dir, const char *needle) {
  char cmd[1200], buf[4096];
  snprintf(cmd, sizeof cmd, "find '%s' -name '*%s*' 2>/dev/null | wc -l", dir, needle);
  FILE *p = popen(cmd, "r");
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  buf[n] = 0;
  pclose(p);
  return atoi(buf);
}

/* A quick case, then one that takes seconds (2^20 tokens, 128 x 64 tiles):
 * the signal lands inside the slow one. */
static void interrupt_a_long_case(int sig) {
  char path[512], out[512], err_path[600], row[900], slow[900], text[8192];
  scn_path(path, sizeof path, "slow.yaml");
  scn_path(out, sizeof out, sig == SIGINT ? "slow_int" : "slow_term");
  snprintf(err_path, sizeof err_path, "%s.err", out);
  write_text(path, "name: slow\nrun: [analyze]\nmasks:\n  - family: causal\n    seqlen: 1024\n"
                   "  - family: document\n    seqlen: 1048576\n    br: 128\n    bc: 64\n"
                   "    params: {docs: \"524288,524288\"}\n");
  char rm[700];
  snprintf(rm, sizeof rm, "rm -rf '%s'", out);
  cr_assert_eq(system(rm), 0);
  snprintf(row, sizeof row, "%s/cases/m00-causal-S1024-D128-128x128/row.tsv", out);
  snprintf(slow, sizeof slow, "%s/cases/m01-document-S1048576-D128-128x64", out);
  pid_t pid = spawn_run(path, out, err_path);
  double t0 = now_s();
  while (access(row, F_OK) != 0 && now_s() - t0 < 60) sleep_ms(10);
  cr_assert_eq(access(row, F_OK), 0, "the first case never finished");
  sleep_ms(300);
  int status;
  cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "the slow case ended before the signal");
  double t_sig = now_s();
  kill(pid, sig);
  waitpid(pid, &status, 0);
  double took = now_s() - t_sig;
  fmt_slurp(err_path, text, sizeof text);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig, "status %d: %s", status, text);
  cr_assert_lt(took, 1.0, "stopped %.2f s after the signal", took);
  cr_assert(strstr(text, "interrupted: 1 of 2 cases finished and kept in"), "%s", text);
  cr_assert_eq(access(row, F_OK), 0, "the finished case is kept");
  cr_assert_neq(access(slow, F_OK), 0, "the interrupted case's folder is removed");
  cr_assert_eq(count_entries_like(out, ".staging."), 0, "a staging folder is left");
  cr_assert_eq(count_entries_like(out, ".tmp."), 0, "a temporary file is left");
  /* the partial index lists the finished case, and run.json says the run is not complete */
  char ipath[900], itext[16384];
  snprintf(ipath, sizeof ipath, "%s/index.json", out);
  fmt_slurp(ipath, itext, sizeof itext);
  cr_assert(strstr(itext, "\"id\": \"m00-causal-S1024-D128-128x128\"") && !strstr(itext, "m01-document"), "%s", itext);
  snprintf(ipath, sizeof ipath, "%s/run.json", out);
  fmt_slurp(ipath, itext, sizeof itext);
  cr_assert(strstr(itext, "\"cases\": 1,") && strstr(itext, "\"cases_total\": 2,") &&
            strstr(itext, "\"complete\": false"), "%s", itext);
  /* a rerun keeps the finished case */
  char args[1200];
  snprintf(args, sizeof args, "run %s --out %s --only 'm00-*'", path, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "1 cases (1 from an earlier run)"), "%s", res.out);
  snprintf(ipath, sizeof ipath, "%s/run.json", out);
  fmt_slurp(ipath, itext, sizeof itext);
  cr_assert(strstr(itext, "\"cases_total\": 1,") && strstr(itext, "\"complete\": true"), "%s", itext);
  cr_assert_eq(system(rm), 0);
  unlink(path);
  unlink(err_path);
}

Test(scenario, ctrl_c_stops_the_current_case_within_a_second) { interrupt_a_long_case(SIGINT); }
Test(scenario, sigterm_stops_the_current_case_within_a_second) { interrupt_a_long_case(SIGTERM); }

Test(scenario, a_killed_runs_leftovers_are_swept_and_a_running_one_locks_the_folder) {
  char path[512], out[512], p[1200], args[1200];
  scn_path(path, sizeof path, "sweep.yaml");
  scn_path(out, sizeof out, "sweep_out");
  write_text(path, "name: sweep\nseqlen: 256\nbr: 32\nbc: 32\nmasks:\n  - family: causal\n");
  snprintf(args, sizeof args, "run %s --out %s", path, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  /* what SIGKILL leaves: a staging folder in a finished case, an unfinished case,
     temporary files of the index */
  const char *left[] = {"cases/m00-causal-S256-D128-32x32/.staging.AbCdEf",
                        "cases/m00-causal-S512-D128-32x32"};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", out, left[i]);
    cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
    snprintf(p, sizeof p, "%s/%s/tiles.npy", out, left[i]);
    write_text(p, "partial");
  }
  snprintf(p, sizeof p, "%s/index.json.tmp.123456", out);
  write_text(p, "partial");
  snprintf(p, sizeof p, "%s/cases/m00-causal-S256-D128-32x32/row.tsv.tmp.abcdef", out);
  write_text(p, "partial");
  /* another run holds the folder: refused */
  snprintf(p, sizeof p, "%s/.fmsim.lock", out);
  int fd = open(p, O_RDWR | O_CREAT, 0644);
  cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 2, "%s", res.err);
  cr_assert(strstr(res.err, "another fmsim run is writing this folder"), "%s", res.err);
  close(fd);
  /* the next run sweeps it all and reuses the finished case */
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "1 cases (1 from an earlier run)"), "%s", res.out);
  cr_assert_eq(count_entries_like(out, ".staging."), 0);
  cr_assert_eq(count_entries_like(out, ".tmp."), 0);
  cr_assert_eq(count_entries_like(out, "S512"), 0, "the unfinished case is gone");
  cr_assert_eq(count_entries_like(out, ".fmsim.lock"), 0);
  snprintf(p, sizeof p, "rm -rf '%s'", out);
  cr_assert_eq(system(p), 0);
  unlink(path);
}

/* Writes a scenario (name.yaml), runs it into name_out (out), which must
 * succeed, and reads its report.md into report. */
static void run_text(const char *name, const char *yaml, char *path, char *out, char *report,
                     size_t cap) {
  char file[120], args[1200];
  snprintf(file, sizeof file, "%.100s.yaml", name);
  scn_path(path, 512, file);
  snprintf(file, sizeof file, "%.100s_out", name);
  scn_path(out, 512, file);
  write_text(path, yaml);
  snprintf(args, sizeof args, "run %s --out %s", path, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  char report_path[600];
  snprintf(report_path, sizeof report_path, "%s/report.md", out);
  fmt_slurp(report_path, report, cap);
}

/* ---- the report ----------------------------------------------------------------------------- */

/* report.md leads with the summary; the comparison tables are exported as CSV
 * and LaTeX, the per-case table goes to CSV only; "higher"/"lower" agree with
 * the numbers beside them. */
Test(scenario, report_leads_with_the_summary_and_says_what_its_numbers_say) {
  char path[512], out[512], args[1200], file[900], report[65536], text[65536];
  run_text("paper", "name: paper\nseqlen: 32768\nsamples: all\nreport: paper-table\n"
                    "masks:\n  - family: document\n  - family: causal\n",
           path, out, report, sizeof report);
  const char *summary = strstr(report, "## Summary"), *table = strstr(report, "## Block sparsity");
  cr_assert(summary && table && summary < table, "%s", report);
  cr_assert(summary == strstr(report, "## "), "the summary is the first section:\n%s", report);
  cr_assert_null(strstr(report, "| case |"), "no per-case table inline:\n%s", report);
  cr_assert_null(strstr(report, "sparser"), "%s", report);
  /* every comparison in words agrees with its numbers */
  int checked = 0;
  for (const char *p = strstr(report, "fmsim's rho "); p; p = strstr(p + 1, "fmsim's rho ")) {
    double mine, paper;
    char word[16];
    if (sscanf(p, "fmsim's rho %lf is %15s than the paper's %lf", &mine, word, &paper) != 3) continue;
    cr_assert_str_eq(word, mine > paper ? "higher" : "lower", "'%.80s'", p);
    checked++;
  }
  cr_assert_gt(checked, 0, "the document mask's difference is said:\n%s", report);
  /* the exports */
  snprintf(file, sizeof file, "%s/tables/paper-table.csv", out);
  fmt_slurp(file, text, sizeof text);
  cr_assert(!strncmp(text, "family,S=32768 fmsim,paper,fmsim - paper\ndocument,", 50), "%s", text);
  snprintf(file, sizeof file, "%s/tables/paper-table.tex", out);
  fmt_slurp(file, text, sizeof text);
  cr_assert(strstr(text, "\\begin{tabular}{lrrr}") && strstr(text, "document &"), "%s", text);
  snprintf(file, sizeof file, "%s/tables/cases.csv", out);
  fmt_slurp(file, text, sizeof text);
  int lines = 0;
  for (char *q = text; *q; q++) lines += *q == '\n';
  cr_assert_eq(lines, 1 + 6, "header + 5 document samples + causal:\n%s", text);
  snprintf(args, sizeof args, "rm -rf '%s'", out);
  cr_assert_eq(system(args), 0);
  unlink(path);
}

/* Rewrites the kernel record of a finished case's row as a GPU run would
 * have written it: forward time = 0.5 ms + 2 ms x (1 - rho at the kernel's
 * tile). */
static void fake_gpu_row(const char *row_path) {
  char text[16384], out[16384] = "";
  fmt_slurp(row_path, text, sizeof text);
  double rho = -1;
  for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
    char line[1100];
    if (!strncmp(l, "k[0].p[0].rho\t", 14)) rho = strtod(l + 14, NULL);
    if (!strncmp(l, "k[0].p[0].ms\t", 13))
      snprintf(line, sizeof line, "k[0].p[0].ms\t%.17g", 0.5 + 2.0 * (1 - rho));
    else if (!strncmp(l, "k[0].p[0].tflops\t", 17)) snprintf(line, sizeof line, "k[0].p[0].tflops\t100");
    else if (!strncmp(l, "k[0].status\t", 12)) snprintf(line, sizeof line, "k[0].status\t");
    else if (!strncmp(l, "gpu_ran\t", 8)) snprintf(line, sizeof line, "gpu_ran\t1");
    else snprintf(line, sizeof line, "%s", l);
    strncat(out, line, sizeof out - strlen(out) - 2);
    strcat(out, "\n");
  }
  cr_assert_geq(rho, 0, "%s has a kernel record", row_path);
  write_text(row_path, out);
}

/* The sweep's fit and the kernel table, from rows that carry kernel times
 * (a GPU run's, written here): the report recomputes them from the rows. */
Test(scenario, sweep_report_fits_time_against_density) {
  char path[512], out[512], args[1200], file[900], report[65536];
  run_text("sweepfit", "name: sweepfit\nseqlen: 2048\nbatch: 1\nheads: 1\ndraws: 4\n"
                       "run: [analyze, gpu]\nkernel: sm80\nreport: sweep\nmasks:\n"
                       "  - family: causal_document\n    params: {docs_min: 2, docs_max: 8}\n"
                       "  - family: document\n    params: {docs_min: 2, docs_max: 8}\n",
           path, out, report, sizeof report);
  snprintf(args, sizeof args, "run %s --out %s", path, out);
  cr_assert(strstr(report, "No kernel was timed"), "%s", report);
  for (int m = 0; m < 2; m++)
    for (int r = 0; r < 4; r++) {
      snprintf(file, sizeof file, "%s/cases/m%02d-%s-S2048-D128-128x128-r%d/row.tsv", out, m,
               m ? "document" : "causal_document", r);
      fake_gpu_row(file);
    }
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "8 cases (8 from an earlier run)"), "%s", res.out);
  snprintf(file, sizeof file, "%s/report.md", out);
  fmt_slurp(file, report, sizeof report);
  cr_assert(strstr(report, "- Kernel sm80: time = 0.500 ms + 2.000 ms x (1 - rho) over 8 masks, "
                           "R^2 = 1.0000."), "%s", report);
  cr_assert(strstr(report, "| sm80 | pooled | 8 | 0.5000 | 2.0000 | 1.0000 |"), "%s", report);
  cr_assert(strstr(report, "| sm80 | document | 4 | 0.5000 | 2.0000 |"), "%s", report);
  cr_assert(strstr(report, "## Kernels") && strstr(report, "| sm80 ms |"), "%s", report);
  snprintf(file, sizeof file, "%s/tables/fit.csv", out);
  fmt_slurp(file, report, sizeof report);
  cr_assert(strstr(report, "kernel,family,n,a (ms),b (ms),R^2\n"), "%s", report);
  snprintf(args, sizeof args, "rm -rf '%s'", out);
  cr_assert_eq(system(args), 0);
  unlink(path);
}

/* The value of "key": NUMBER after `after` in text (NAN when absent or null). */
static double json_number_after(const char *text, const char *after, const char *key) {
  const char *at = strstr(text, after);
  char want[80];
  snprintf(want, sizeof want, "\"%s\": ", key);
  at = at ? strstr(at, want) : NULL;
  if (!at || !strncmp(at + strlen(want), "null", 4)) return NAN;
  return strtod(at + strlen(want), NULL);
}

/* bench/validate_model.py on a run with measured and predicted times: its
 * table from the index's predictions (--from-index) is the one it makes by
 * calling `fmsim predict` on each case (skipped without python3). */
static void validate_from_index_equals_predict(const char *out) {
  if (system("command -v python3 >/dev/null 2>&1") != 0) {
    cr_log_warn("python3 not found: bench/validate_model.py --from-index not checked");
    return;
  }
  char args[2400], file[2][700];
  const char *how[2] = {"--from-index", "--profile h200-sm80 --fmsim " FMSIM_BIN};
  fm_jdoc *d[2];
  for (int i = 0; i < 2; i++) {
    snprintf(file[i], sizeof file[i], "%s/validation_%d.json", out, i);
    snprintf(args, sizeof args, "python3 %s/../bench/validate_model.py %s %s --out %s >/dev/null",
             FM_TEST_SOURCE_DIR, out, how[i], file[i]);
    cr_assert_eq(system(args), 0, "%s", args);
    fm_err err;
    cr_assert_eq(fm_jdoc_load(file[i], &d[i], &err), FM_OK, "%s", err.msg);
  }
  const fm_jv *a = fm_jv_get(fm_jdoc_root(d[0]), "cases"), *b = fm_jv_get(fm_jdoc_root(d[1]), "cases");
  cr_assert(fm_jv_count(a) == 2 && fm_jv_count(b) == 2, "two measured cases each");
  for (const fm_jv *x = fm_jv_first(a), *y = fm_jv_first(b); x; x = fm_jv_next(x), y = fm_jv_next(y)) {
    cr_assert_str_eq(fm_jv_string(fm_jv_get(x, "id")), fm_jv_string(fm_jv_get(y, "id")));
    cr_assert_eq(fm_jv_number(fm_jv_get(x, "predicted_ms"), NAN), fm_jv_number(fm_jv_get(y, "predicted_ms"), -1),
                 "%s: the index's prediction is predict's", fm_jv_string(fm_jv_get(x, "id")));
  }
  cr_assert_str_eq(fm_jv_string(fm_jv_get(fm_jdoc_root(d[0]), "profile")), "h200-sm80");
  fm_jdoc_free(d[0]);
  fm_jdoc_free(d[1]);
}

/* With a profile and measured times (a GPU run's rows, written here), each
 * kernel record carries predicted / measured - 1, and the report its error
 * column and the summary's median and worst. */
Test(scenario, predicted_error_beside_the_measured_time) {
  char path[512], out[512], args[1200], file[900], report[65536], text[65536];
  run_text("prederr", "name: prederr\nseqlen: 2048\nbatch: 2\nheads: 4\ndraws: 2\n"
                      "run: [analyze, gpu]\nkernel: sm80\nprofile: h200-sm80\nmasks:\n"
                      "  - family: causal_document\n    params: {docs_min: 2, docs_max: 8}\n",
           path, out, report, sizeof report);
  cr_assert(strstr(report, "`h200-sm80` (NVIDIA H200, measured 2026-11-23): 2 passes predicted."),
            "predicted, nothing measured yet:\n%s", report);
  double pred[2];
  for (int r = 0; r < 2; r++) {
    snprintf(file, sizeof file, "%s/cases/m00-causal_document-S2048-D128-128x128-r%d/row.tsv", out, r);
    fmt_slurp(file, text, sizeof text);
    const char *at = strstr(text, "k[0].p[0].pred_ms\t");
    cr_assert(at, "the row keeps the prediction:\n%s", text);
    pred[r] = strtod(at + strlen("k[0].p[0].pred_ms\t"), NULL);
    cr_assert_gt(pred[r], 0);
    fake_gpu_row(file);
  }
  snprintf(args, sizeof args, "run %s --out %s", path, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  snprintf(file, sizeof file, "%s/index.json", out);
  fmt_slurp(file, text, sizeof text);
  for (int r = 0; r < 2; r++) {
    char id[120];
    snprintf(id, sizeof id, "\"id\": \"m00-causal_document-S2048-D128-128x128-r%d\"", r);
    double ms = json_number_after(text, id, "time_ms"), p = json_number_after(text, id, "predicted_ms");
    double e = json_number_after(text, id, "predicted_error");
    cr_assert_float_eq(p, pred[r], 1e-8 * pred[r], "the reused row's prediction: %g vs %g", p, pred[r]);
    cr_assert(isfinite(ms) && isfinite(e), "%s", text);
    cr_assert_float_eq(e, p / ms - 1, 1e-7, "error %g, predicted %g, measured %g", e, p, ms);
  }
  snprintf(file, sizeof file, "%s/report.md", out);
  fmt_slurp(file, report, sizeof report);
  cr_assert(strstr(report, "| sm80 predicted ms | sm80 predicted error % |"), "%s", report);
  cr_assert(strstr(report, "2 passes predicted; against the measured times, |error| median "), "%s", report);
  validate_from_index_equals_predict(out);
  snprintf(args, sizeof args, "rm -rf '%s'", out);
  cr_assert_eq(system(args), 0);
  unlink(path);
}

/* ---- figures -------------------------------------------------------------------------------- */

#ifdef FM_HAVE_VIZ
/* Pixels of colour rgb in the rectangle [x0, x1) x [y0, y1) of a PNG. */
static long count_rgb(cairo_surface_t *img, int x0, int x1, int y0, int y1, uint32_t rgb) {
  const unsigned char *data = cairo_image_surface_get_data(img);
  int stride = cairo_image_surface_get_stride(img);
  long n = 0;
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++) n += (((const uint32_t *)(data + (size_t)y * stride))[x] & 0xFFFFFF) == rgb;
  return n;
}
#endif

/* figures: [gallery] draws the scenario's own masks, not the twelve families:
 * here `full` (every tile unmasked) beside `causal` (half the tiles masked). */
Test(scenario, gallery_draws_the_scenarios_masks) {
  char path[512], out[600], args[1300], file[800];
  scn_path(path, sizeof path, "gallery.yaml");
  write_text(path, "name: two-masks\nseqlen: 256\nbr: 32\nbc: 32\nfigures: [gallery]\n"
                   "masks:\n  - family: full\n  - family: causal\n");
  scn_path(out, sizeof out, "gallery_out");
  snprintf(args, sizeof args, "run %s --out %s", path, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  snprintf(file, sizeof file, "%s/figures/gallery.png", out);
#ifdef FM_HAVE_VIZ
  cairo_surface_t *img = cairo_image_surface_create_from_png(file);
  cr_assert_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS, "%s", file);
  const viz_figure *f = viz_figure_find("gallery");
  int w = cairo_image_surface_get_width(img), h = cairo_image_surface_get_height(img);
  cr_assert(w == (int)f->width && h == (int)f->height, "the registry's screen size: %dx%d", w, h);
  /* two panels side by side, the legend below them */
  int top = h / 10, bottom = h * 8 / 10;
  long area = (long)(w / 2) * (bottom - top);
  long blue_l = count_rgb(img, 0, w / 2, top, bottom, VIZ_RGB_VISIBLE);
  long grey_l = count_rgb(img, 0, w / 2, top, bottom, VIZ_RGB_MASKED);
  long blue_r = count_rgb(img, w / 2, w, top, bottom, VIZ_RGB_VISIBLE);
  long grey_r = count_rgb(img, w / 2, w, top, bottom, VIZ_RGB_MASKED);
  cr_assert_gt(blue_l, area / 4, "the full mask: unmasked tiles (%ld of %ld)", blue_l, area);
  cr_assert_lt(grey_l, area / 100, "the full mask masks nothing (%ld masked pixels)", grey_l);
  cr_assert_gt(grey_r, area / 8, "the causal mask: masked tiles (%ld)", grey_r);
  cr_assert_gt(blue_r, area / 8, "the causal mask: unmasked tiles (%ld)", blue_r);
  cairo_surface_destroy(img);
  char report[65536];
  snprintf(file, sizeof file, "%s/report.md", out);
  fmt_slurp(file, report, sizeof report);
  cr_assert(strstr(report, "figures/gallery.png"), "%s", report);
#else
  cr_assert(strstr(res.err, "without cairo"), "a build without cairo says it drew nothing: %s", res.err);
#endif
}

/* The teaching tour makes its figures: its gallery and the viewer's drawings. */
Test(scenario, teaching_tour_makes_its_figures) {
  fm_scenario *s = malloc(sizeof *s);
  char path[700];
  snprintf(path, sizeof path, "%s/../scenarios/teaching-tour.yaml", FM_TEST_SOURCE_DIR);
  fm_err err;
  cr_assert_eq(fm_scenario_load(path, s, &err), FM_OK, "%s", err.msg);
  int gallery = 0, tiles = 0;
  for (int i = 0; i < s->nfigures; i++) {
    gallery |= !strcmp(s->figures[i], "gallery");
    tiles |= !strcmp(s->figures[i], "tiles");
  }
  cr_assert(gallery && tiles, "teaching-tour asks for its gallery and tiles figures");
  free(s);
}
