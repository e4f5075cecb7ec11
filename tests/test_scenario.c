/* Tests of scenario files and `fmsim run SCENARIO.yaml`: the shipped
 * scenarios parse, cases expand as written, a run writes traces, index and
 * report and a rerun resumes, and every bad scenario gets one line naming
 * file:line and the key. */
#include <criterion/criterion.h>
#include <sys/stat.h>

#include "fm_npy.h"
#include "fm_scenario.h"
#include "fm_test_util.h"

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
             "more than this machine has");
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
