/* End-to-end tests of the fmsim command line for the foundation commands:
 * --help/--version, families, analyze (human, --json, --out, --paper-table)
 * and every bad input: one line on stderr, non-zero exit, nothing written. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/stat.h>

#include "fm_npy.h"
#include "fm_test_util.h"

static fmt_result res;

Test(cli, help_and_version) {
  fmt_run(&res, "--version");
  cr_assert_eq(res.status, 0);
  cr_assert(strstr(res.out, "fmsim 0."), "%s", res.out);
  fmt_run(&res, "--help");
  cr_assert_eq(res.status, 0);
  cr_assert(strstr(res.out, "analyze") && strstr(res.out, "families"));
  fmt_run(&res, "analyze --help");
  cr_assert_eq(res.status, 0);
  cr_assert(strstr(res.out, "--paper-table") && strstr(res.out, "--out DIR"));
  fmt_run(&res, "families --help");
  cr_assert_eq(res.status, 0);
  fmt_run(&res, "");
  cr_assert_eq(res.status, 2);
}

Test(cli, families_lists_all_twelve) {
  fmt_run(&res, "families");
  cr_assert_eq(res.status, 0);
  const char *names[] = {"full", "causal", "sliding_window", "causal_document", "document",
                         "share_question", "global_sliding_window", "causal_blockwise",
                         "prefix_lm_document", "prefix_lm_causal", "qk_sparse", "random_eviction"};
  for (int i = 0; i < 12; i++) cr_assert(strstr(res.out, names[i]), "%s missing", names[i]);
  cr_assert(strstr(res.out, "S/16"));
  fmt_run(&res, "families --json");
  cr_assert_eq(res.status, 0);
  cr_assert(strstr(res.out, "\"name\": \"random_eviction\""));
  cr_assert(strstr(res.out, "\"per_head\": true"));
}

Test(cli, analyze_json_has_the_promised_keys) {
  fmt_run(&res, "analyze --family sliding_window --seqlen 1000 --br 64 --bc 32 --json");
  cr_assert_eq(res.status, 0, "%s", res.err);
  const char *keys[] = {"\"family\": \"sliding_window\"", "\"seqlen\": 1000", "\"br\": 64",
                        "\"bc\": 32", "\"tiles_total\": 512", "\"tiles_masked\"",
                        "\"tiles_partial\"", "\"tiles_unmasked\"", "\"sparsity\"", "\"exact\"",
                        "\"bytes\"", "\"dense\": 1000000", "\"block_mask\"", "\"intervals\"",
                        "\"form\": \"causal-1\"", "\"params\": \"w=62\""};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    cr_assert(strstr(res.out, keys[k]), "missing %s in\n%s", keys[k], res.out);
  cr_assert_eq(res.err[0], 0, "nothing on stderr");
}

Test(cli, analyze_human_table) {
  fmt_run(&res, "analyze --family causal_document --seqlen 8192 --sample 1");
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "sample 1 of 8192"));
  cr_assert(strstr(res.out, "min/max rule") && strstr(res.out, "exact"));
  cr_assert(strstr(res.out, "FlexAttention BlockMask"));
}

Test(cli, analyze_out_writes_a_trace) {
  char dir[512], path[600], args[1024];
  snprintf(dir, sizeof dir, "%s/cli_trace_%d", FM_TEST_TMP_DIR, (int)getpid());
  snprintf(args, sizeof args,
           "analyze --family random_eviction --seqlen 300 --br 32 --bc 16 --batch 2 --heads 3 --out %s",
           dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  fm_npy_header h;
  void *data;
  snprintf(path, sizeof path, "%s/tiles.npy", dir);
  cr_assert_eq(fm_npy_load(path, &h, &data, 1 << 20, NULL), FM_OK);
  cr_assert(h.dtype == FM_DT_U8 && h.ndim == 3 && h.shape[0] == 6 && h.shape[1] == 10 &&
            h.shape[2] == 19);
  for (int64_t i = 0; i < h.count; i++) cr_assert_leq(((uint8_t *)data)[i], 2);
  free(data);
  snprintf(path, sizeof path, "%s/columns.npy", dir);
  cr_assert_eq(fm_npy_load(path, &h, &data, 1 << 20, NULL), FM_OK);
  cr_assert(h.dtype == FM_DT_I32 && h.ndim == 4 && h.shape[0] == 2 && h.shape[1] == 3 &&
            h.shape[2] == 300 && h.shape[3] == 4);
  free(data);
  char summary[8192];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  fmt_slurp(path, summary, sizeof summary);
  cr_assert(strstr(summary, "\"format\": \"fmsim-trace\"") && strstr(summary, "\"version\": 1"));
  cr_assert(strstr(summary, "\"mask_sets\": 6"));
  /* no staging leftovers */
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      cr_assert_fail("leftover %s", e->d_name);
    n += e->d_name[0] != '.';
  }
  closedir(d);
  cr_assert_eq(n, 4);
}

Test(cli, paper_table_json_matches_the_paper) {
  fmt_run(&res, "analyze --paper-table --json");
  cr_assert_eq(res.status, 0, "%s", res.err);
  /* every family at every length, and within 0.01 of the paper except document */
  int rows = 0;
  for (const char *p = strstr(res.out, "\"family\""); p; p = strstr(p + 1, "\"family\"")) {
    char fam[64];
    double rho, paper;
    rows++;
    cr_assert_eq(sscanf(p, "\"family\": \"%63[^\"]\"", fam), 1);
    const char *s = strstr(p, "\"sparsity\": ");
    cr_assert_eq(sscanf(s, "\"sparsity\": %lf", &rho), 1);
    const char *q = strstr(p, "\"paper\": ");
    if (sscanf(q, "\"paper\": %lf", &paper) == 1 && strcmp(fam, "document") != 0)
      cr_assert(rho > paper - 0.0105 && rho < paper + 0.0105, "%s: %.3f vs paper %.2f", fam, rho,
                paper);
  }
  cr_assert_eq(rows, 36);
}

static void expect_usage_error(const char *args, const char *needle) {
  fmt_run(&res, args);
  cr_assert_eq(res.status, 2, "'%s' exited %d", args, res.status);
  cr_assert_eq(res.err_lines, 1, "'%s' printed %d lines on stderr:\n%s", args, res.err_lines,
               res.err);
  cr_assert(strstr(res.err, needle), "'%s': stderr '%s' lacks '%s'", args, res.err, needle);
  cr_assert_eq(res.out[0], 0, "'%s' printed on stdout", args);
}

Test(cli, bad_inputs_get_one_clear_line) {
  expect_usage_error("nosuch", "unknown command 'nosuch'");
  expect_usage_error("analyze", "--family is required");
  expect_usage_error("analyze --family nosuch", "unknown family 'nosuch'");
  expect_usage_error("analyze --family causal --bogus", "unknown option '--bogus'");
  expect_usage_error("analyze --family sliding_window --param w=0", "w=0 is out of range");
  expect_usage_error("analyze --family sliding_window --param width=3", "no parameter 'width'");
  expect_usage_error("analyze --family prefix_lm_causal --seqlen 100 --param p=101", "p=101");
  expect_usage_error("analyze --family document --seqlen 10 --param docs=5,9", "more than S=10");
  expect_usage_error("analyze --family document --seqlen 10 --param docs_min=11",
                     "more documents than tokens");
  expect_usage_error("analyze --family causal --seqlen 0", "sequence length");
  expect_usage_error("analyze --family causal --seqlen -5", "sequence length");
  expect_usage_error("analyze --family causal --seqlen 4294967296", "int32");
  expect_usage_error("analyze --family causal --seqlen 12x", "not an integer");
  expect_usage_error("analyze --family causal --br 0", "--br");
  expect_usage_error("analyze --family causal --bc -64", "--bc");
  expect_usage_error("analyze --family document --sample 9", "sample 9 does not exist");
  expect_usage_error("analyze --family document --seqlen 1000 --sample 0", "no document sample");
  expect_usage_error("analyze --family causal --sample 0", "takes no documents");
  expect_usage_error("analyze --family document --samples /nonexistent/s.txt", "cannot open");
  expect_usage_error("analyze --family causal --out /proc/fmsim_cannot_write", "cannot");
  expect_usage_error("analyze --paper-table --family causal", "--paper-table takes no");
}

Test(cli, malformed_sample_file) {
  char path[512], args[700];
  snprintf(path, sizeof path, "%s/cli_samples_%d.txt", FM_TEST_TMP_DIR, (int)getpid());
  FILE *f = fopen(path, "w");
  fputs("Total length: 100\nSample 1, num_docs 2: [(1, 50), (2, 30]# [0, 1]\n", f);
  fclose(f);
  snprintf(args, sizeof args, "analyze --family document --seqlen 100 --samples %s", path);
  expect_usage_error(args, ":2: malformed sample file");
  unlink(path);
}
