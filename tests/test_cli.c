/* End-to-end tests of the fmsim command line for the foundation commands:
 * --help/--version, families, analyze (human, --json, --out, --paper-table)
 * and every bad input: one line on stderr, non-zero exit, nothing written. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "fm_npy.h"
#include "fm_test_util.h"

static fmt_result res;

/* Writes text to path (replacing it). */
static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

Test(cli, help_and_version) {
  fmt_run(&res, "--version");
  cr_assert_eq(res.status, 0);
  cr_assert(strstr(res.out, "fmsim 0."), "%s", res.out);
  cr_assert(strstr(res.out, "figures: ") && strstr(res.out, "window: ") && strstr(res.out, "GPU kernels: ") &&
                strstr(res.out, "NCCL: "),
            "%s", res.out);
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
  /* what bench/make_heldout.py and fuzz/make_seeds.py read */
  cr_assert(strstr(res.out, "\"seeded\": false") && strstr(res.out, "\"seeded\": true"));
  cr_assert(strstr(res.out, "\"uses_docs\": true"));
  cr_assert(strstr(res.out, "\"kind\": \"int\",\n        \"lo\": 1,\n        \"hi\": \"S\""), "%s", res.out);
  cr_assert(strstr(res.out, "\"kind\": \"docs\""));
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

/* Whether this fmsim draws figures (cairo): `fmsim --version` lists what the build can do. */
static int have_figures(void) {
  fmt_run(&res, "--version");
  return strstr(res.out, "figures: yes") != NULL;
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
  expect_usage_error("analyze --family causal --seqlen 12x", "not a size");
  expect_usage_error("analyze --family causal --br 0", "--br");
  expect_usage_error("analyze --family causal --bc -64", "--bc");
  expect_usage_error("analyze --family document --sample 9", "sample 9 does not exist");
  expect_usage_error("analyze --family document --seqlen 1000 --sample 0", "no document sample");
  expect_usage_error("analyze --family causal --sample 0", "takes no documents");
  expect_usage_error("analyze --family document --samples /nonexistent/s.txt", "cannot open");
  expect_usage_error("analyze --family causal --out /proc/fmsim_cannot_write", "cannot");
  expect_usage_error("analyze --paper-table --family causal", "--paper-table takes no");
}

/* issue 27: "did you mean" for families and commands, from the registries */
Test(cli, typos_get_did_you_mean) {
  expect_usage_error("analyze --family casual", "unknown family 'casual' (did you mean 'causal'?)");
  expect_usage_error("analyze --family slidingwindow",
                     "unknown family 'slidingwindow' (did you mean 'sliding_window'?)");
  expect_usage_error("anlyze --family causal", "unknown command 'anlyze' (did you mean 'analyze'?)");
  expect_usage_error("help chek", "unknown command 'chek' (did you mean 'check'?)");
  expect_usage_error("bench --families causal,casual", "(did you mean 'causal'?)");
  /* nothing close: the list, as before */
  expect_usage_error("analyze --family nosuch", "unknown family 'nosuch' (known: full, causal");
  expect_usage_error("xyzzy", "unknown command 'xyzzy' (fmsim --help lists them)");
}

/* issue 27: sizes with k/K/M suffixes (binary: 32k = 32768, as the paper writes 32K) */
Test(cli, sizes_take_k_and_m_suffixes) {
  fmt_run(&res, "analyze --family causal --seqlen 32k --json");
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "\"seqlen\": 32768"), "%s", res.out);
  fmt_run(&res, "analyze --family causal --seqlen 2K --br 64 --bc 64 --json");
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "\"seqlen\": 2048"), "%s", res.out);
  fmt_run(&res, "analyze --family causal --seqlen 1M --br 4096 --bc 4096 --json");
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "\"seqlen\": 1048576"), "%s", res.out);
  expect_usage_error("analyze --family causal --seqlen 1m", "not a size");
  expect_usage_error("analyze --family causal --seqlen 1.5k", "not a size");
  expect_usage_error("analyze --family causal --seqlen 2048M", "sequence length must be in");
  expect_usage_error("analyze --family causal --seqlen 99999999999999999k", "out of range");
  expect_usage_error("bench --seqlens 1k,2x", "--seqlens: '2x' is not a size");
}

/* issue 27: a family name where a file goes suggests --family */
Test(cli, positional_family_suggests_the_flag) {
  expect_usage_error("analyze causal", "'causal' is a mask family, not a file: give --family causal");
  expect_usage_error("analyze casual", "give --family causal");
  if (have_figures()) /* without cairo, render says so before it reads its arguments */
    expect_usage_error("render sliding_window -o x.png", "give --family sliding_window");
  expect_usage_error("analyze nosuchfile.npy", "nosuchfile.npy: cannot open");
}

Test(cli, malformed_sample_file) {
  char path[512], args[700];
  snprintf(path, sizeof path, "%s/cli_samples_%d.txt", FM_TEST_TMP_DIR, (int)getpid());
  write_text(path, "Total length: 100\nSample 1, num_docs 2: [(1, 50), (2, 30]# [0, 1]\n");
  snprintf(args, sizeof args, "analyze --family document --seqlen 100 --samples %s", path);
  expect_usage_error(args, ":2: malformed sample file");
  unlink(path);
}

/* ---- issue 11: robustness ----------------------------------------------------- */

#include <signal.h>
#include <sys/wait.h>

/* A scratch folder of this test process, made fresh. */
static void scratch(char *dir, size_t cap, const char *name) {
  char cmd[1200];
  snprintf(dir, cap, "%s/robust_%d_%s", FM_TEST_TMP_DIR, (int)getpid(), name);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  cr_assert_eq(system(cmd), 0);
}

/* DIR/NAME holding text; its path into path. */
static void scratch_file(const char *dir, const char *name, const char *text, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, name);
  write_text(path, text);
}

/* DIR/mask.npy (dense bool 64 x 64, causal) and DIR/iv.npy (its intervals). */
static void small_masks(const char *dir) {
  char args[2048];
  snprintf(args, sizeof args, "analyze --family causal --seqlen 64 --out %s/tr", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  snprintf(args, sizeof args, "expand %s/tr/columns.npy --bidir -o %s/mask.npy", dir, dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  snprintf(args, sizeof args, "convert %s/mask.npy -o %s/iv.npy", dir, dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
}

/* Entries of dir whose name contains `part`. */
static int count_entries(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, part) != NULL;
  closedir(d);
  return n;
}

Test(robust, no_arguments_print_one_line) {
  fmt_run(&res, "");
  cr_assert_eq(res.status, 2);
  cr_assert_eq(res.err_lines, 1, "%s", res.err);
  cr_assert(strstr(res.err, "fmsim --help"), "%s", res.err);
}

Test(robust, convert_with_an_output_path_over_1024_characters) {
  char dir[512], deep[2048], args[4096];
  scratch(dir, sizeof dir, "longpath");
  small_masks(dir);
  /* five nested 240-character folders: a path of about 1300 characters */
  int n = snprintf(deep, sizeof deep, "%s", dir);
  for (int i = 0; i < 5; i++) {
    deep[n++] = '/';
    memset(deep + n, 'd', 240);
    n += 240;
    deep[n] = 0;
    cr_assert(mkdir(deep, 0755) == 0);
  }
  cr_assert_gt(strlen(deep), 1024);
  snprintf(args, sizeof args, "convert %s/mask.npy -o %s/out.npy", dir, deep);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  /* the whole path and every option: nothing cut at 1024 characters */
  const char *line = strstr(res.out, "expand back  fmsim expand ");
  cr_assert(line, "%s", res.out);
  cr_assert(strstr(line, deep) && strstr(line, "--bidir --seqlen-q 64") &&
            strstr(line, "-o MASK.npy\n"), "%.300s", line);
}

Test(robust, outputs_onto_devices_are_refused) {
  char dir[512], args[1200];
  scratch(dir, sizeof dir, "devices");
  small_masks(dir);
  char null_dev[600], full_dev[600];
  fmt_devnode(dir, "null", null_dev, sizeof null_dev);
  fmt_devnode(dir, "full", full_dev, sizeof full_dev);
  const char *forms[] = {"convert %s/mask.npy -o %s", "expand %s/iv.npy --bidir -o %s"};
  for (int i = 0; i < 4; i++) {
    snprintf(args, sizeof args, forms[i / 2], dir, i % 2 ? full_dev : null_dev);
    fmt_run(&res, args);
    cr_assert_eq(res.status, 2, "%s: %d %s", args, res.status, res.err);
    cr_assert_eq(res.err_lines, 1, "%s", res.err);
    cr_assert(strstr(res.err, "character device") && strstr(res.err, "refusing"), "%s", res.err);
  }
  struct stat sb;
  cr_assert(stat(null_dev, &sb) == 0 && S_ISCHR(sb.st_mode), "%s is still a device", null_dev);
  cr_assert(stat(full_dev, &sb) == 0 && S_ISCHR(sb.st_mode), "%s is still a device", full_dev);
}

Test(robust, expand_to_stdout_checks_the_write) {
  char dir[512], args[1200];
  scratch(dir, sizeof dir, "stdout");
  small_masks(dir);
  /* exactly the .npy, nothing else on stdout */
  snprintf(args, sizeof args, "expand %s/iv.npy --bidir -o -", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  static char file[65536];
  char path[700];
  snprintf(path, sizeof path, "%s/mask.npy", dir);
  FILE *f = fopen(path, "rb");
  size_t n = fread(file, 1, sizeof file, f);
  fclose(f);
  cr_assert(n > 4096 && n < sizeof file - 1 && memcmp(res.out, file, n) == 0,
            "stdout is not the file's %zu bytes", n);
  /* to a full disk: the error, one line, non-zero */
  char cmd[2048], err_path[700], err[1024];
  snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
  snprintf(cmd, sizeof cmd, "%s expand %s/iv.npy --bidir -o - >/dev/full 2>%s", FMSIM_BIN, dir,
           err_path);
  int st = system(cmd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "status %d", st);
  fmt_slurp(err_path, err, sizeof err);
  cr_assert(strstr(err, "No space left on device") && strchr(err, '\n') == err + strlen(err) - 1,
            "%s", err);
}

/* Entries of dir whose name contains `part` and that hold something: a
 * folder, or a file with bytes in it (an output check's empty probe does not
 * count: it is gone an instant later). */
static int count_written(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct stat sb;
  for (struct dirent *e; (e = readdir(d));)
    n += strstr(e->d_name, part) && fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
         (S_ISDIR(sb.st_mode) || sb.st_size > 0);
  closedir(d);
  return n;
}

/* Starts `fmsim ARGS` (no shell, output discarded) and polls dir until an
 * entry containing `part` is being written (count_written): 1 then, with the
 * child still running; 0 when the child ended first (its wait status in *st). */
static int start_and_wait_for(const char *const argv[], const char *dir, const char *part, pid_t *pid,
                              int *st) {
  *pid = fork();
  if (*pid == 0) {
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    execv(FMSIM_BIN, (char *const *)argv);
    _exit(127);
  }
  *st = 0;
  for (int i = 0; i < 100000; i++) { /* 20 s at most */
    if (count_written(dir, part) > 0) return 1;
    if (waitpid(*pid, st, WNOHANG) == *pid) return 0;
    usleep(200);
  }
  return 0;
}

/* Starts `fmsim ARGS`, waits until an entry containing `part` is being
 * written in dir, sends sig and returns the wait status. */
static int kill_when_present(const char *const argv[], const char *dir, const char *part, int sig) {
  pid_t p;
  int st;
  int seen = start_and_wait_for(argv, dir, part, &p, &st);
  cr_assert(seen, "no '%s' appeared in %s (status %d)", part, dir, st);
  kill(p, sig);
  waitpid(p, &st, 0);
  return st;
}

/* The same for a command whose output is written in a short burst at its
 * end: a run that finishes before the poll sees its temporary is tried again
 * (its output, a file or a folder, removed), five times at most. */
static int interrupt_while_writing(const char *const argv[], const char *dir, const char *part, int sig,
                                   const char *out) {
  for (int attempt = 0; attempt < 5; attempt++) {
    pid_t p;
    int st;
    if (start_and_wait_for(argv, dir, part, &p, &st)) {
      kill(p, sig);
      waitpid(p, &st, 0);
      return st;
    }
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %s: status %d", argv[1], argv[2], st);
    char rm[1200];
    snprintf(rm, sizeof rm, "rm -rf '%s'", out);
    cr_assert_eq(system(rm), 0);
  }
  cr_assert_fail("five runs ended before a '%s' appeared in %s", part, dir);
  return 0;
}

/* SIGTERM, then SIGINT (Ctrl-C), sent to `fmsim ARGS` while an entry
 * containing `part` is being written in dir (burst_out: the output, for a
 * command that writes in one short burst; see interrupt_while_writing): each
 * time the process dies of the signal and leaves no temporary, no staging
 * folder and nothing named like out_name in dir. */
static void interrupts_leave_nothing(const char *const argv[], const char *dir, const char *part,
                                     const char *out_name, const char *burst_out) {
  int sigs[2] = {SIGTERM, SIGINT};
  for (int i = 0; i < 2; i++) {
    int st = burst_out ? interrupt_while_writing(argv, dir, part, sigs[i], burst_out)
                       : kill_when_present(argv, dir, part, sigs[i]);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == sigs[i], "%s: status %d", argv[1], st);
    cr_assert_eq(count_entries(dir, ".tmp.") + count_entries(dir, ".staging."), 0,
                 "%s: signal %d left a temporary or a staging folder", argv[1], sigs[i]);
    cr_assert_eq(count_entries(dir, out_name), 0, "%s: signal %d left %s", argv[1], sigs[i], out_name);
  }
}

/* An interval file of S = 16384 whose dense expansion (heads 4) is 1 GiB. */
static void big_intervals(const char *dir, char *iv, size_t cap) {
  char args[1200];
  snprintf(args, sizeof args, "analyze --family causal --seqlen 16384 --out %s/big", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  snprintf(iv, cap, "%s/big/columns.npy", dir);
}

Test(robust, interrupted_expand_leaves_no_temporary, .timeout = 120) {
  char dir[512], iv[700], out[700];
  scratch(dir, sizeof dir, "interrupt");
  big_intervals(dir, iv, sizeof iv);
  snprintf(out, sizeof out, "%s/dense.npy", dir);
  const char *argv[] = {FMSIM_BIN, "expand", iv, "--bidir", "--heads", "4", "-o", out, NULL};
  interrupts_leave_nothing(argv, dir, "dense.npy.tmp.", "dense.npy", NULL);
  /* SIGKILL cannot be caught: the next run onto the same target sweeps it */
  int st = kill_when_present(argv, dir, "dense.npy.tmp.", SIGKILL);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  cr_assert_eq(count_entries(dir, "dense.npy.tmp."), 1, "the killed run's temporary is there");
  char small[700], args[2048];
  snprintf(small, sizeof small, "%s/small", dir);
  mkdir(small, 0755);
  small_masks(small);
  snprintf(args, sizeof args, "expand %s/iv.npy --bidir -o %s", small, out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert_eq(count_entries(dir, ".tmp."), 0, "swept by the next run");
}

Test(robust, interrupted_analyze_out_leaves_no_staging, .timeout = 120) {
  char dir[512], out[700];
  scratch(dir, sizeof dir, "staging");
  snprintf(out, sizeof out, "%s/trace", dir);
  mkdir(out, 0755);
  const char *argv[] = {FMSIM_BIN, "analyze", "--family", "random_eviction", "--seqlen", "131072",
                        "--br", "16", "--bc", "16", "--out", out, NULL};
  interrupts_leave_nothing(argv, out, ".staging.", "summary.json", NULL);
  int st = kill_when_present(argv, out, ".staging.", SIGKILL);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  cr_assert_eq(count_entries(out, ".staging."), 1, "the killed run's staging folder is there");
  char args[1200];
  snprintf(args, sizeof args, "analyze --family causal --seqlen 64 --out %s", out);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert_eq(count_entries(out, ".staging."), 0, "swept by the next run");
}

/* `--version`'s "figures" says what render does: draws (yes) or refuses with one line (no) */
Test(cli, version_figures_agree_with_render) {
  const int figures = have_figures();
  char dir[512], args[1024];
  scratch(dir, sizeof dir, "version_figures");
  snprintf(args, sizeof args, "render --family causal --seqlen 64 -o %s/v.png", dir);
  fmt_run(&res, args);
  if (figures) {
    cr_assert_eq(res.status, 0, "--version says figures: yes, render failed: %s", res.err);
  } else {
    cr_assert_neq(res.status, 0, "--version says figures: no, render drew");
    cr_assert_eq(res.err_lines, 1, "%s", res.err);
    cr_assert(strstr(res.err, "built without cairo"), "%s", res.err);
  }
}

/* Ctrl-C (and SIGTERM) while render writes its PNG, convert its interval
 * file, and the single form of run its trace: the temporary file or staging
 * folder goes with the process, and no output appears half-written. */
Test(robust, interrupted_render_leaves_no_temporary, .timeout = 120) {
  if (!have_figures()) cr_skip_test("no cairo: no render");
  char dir[512], out[700];
  scratch(dir, sizeof dir, "int_render");
  snprintf(out, sizeof out, "%s/big.png", dir);
  /* 4000 x 4000 pixels: the PNG is encoded and written over a few hundred ms */
  const char *argv[] = {FMSIM_BIN, "render", "--family", "causal", "--seqlen", "4096", "--size",
                        "4000x4000", "-o", out, NULL};
  interrupts_leave_nothing(argv, dir, "big.png.tmp.", "big.png", out);
}

/* The line of text that starts with key ("forward ..."), copied into buf. */
static const char *line_of(const char *text, const char *key, char *buf, size_t cap) {
  const char *p = strstr(text, key);
  cr_assert(p, "no '%s' in %s", key, text);
  size_t n = strcspn(p, "\n");
  snprintf(buf, cap, "%.*s", (int)n, p);
  return buf;
}

/* issue 27: predict --mask takes a dense mask, streamed as check reads it and
 * converted to its smallest form; a mask no form holds gets one line */
Test(robust, predict_reads_a_dense_mask) {
  char dir[512], args[2048], want[1200], got[400];
  scratch(dir, sizeof dir, "predict_dense");
  small_masks(dir);
  snprintf(args, sizeof args, "predict --mask %s/iv.npy --causal", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  line_of(res.out, "forward", want, sizeof want);
  snprintf(args, sizeof args, "predict --mask %s/mask.npy", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert_str_eq(line_of(res.out, "forward", got, sizeof got), want);
  snprintf(args, sizeof args, "predict --mask %s/mask.npy --causal", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 2);
  cr_assert(strstr(res.err, "is a dense mask: --causal"), "%s", res.err);
  /* a checkerboard: four masked runs per column, no form holds it */
  uint8_t board[64];
  for (int i = 0; i < 64; i++) board[i] = (uint8_t)((i / 8 + i % 8) & 1);
  int64_t shape[2] = {8, 8};
  fm_err err;
  snprintf(args, sizeof args, "%s/board.npy", dir);
  cr_assert_eq(fm_npy_save(args, FM_DT_BOOL, 2, shape, board, &err), FM_OK, "%s", err.msg);
  snprintf(want, sizeof want, "predict --mask %s/board.npy", dir);
  fmt_run(&res, want);
  cr_assert_eq(res.status, 2);
  cr_assert_eq(res.err_lines, 1, "%s", res.err);
  cr_assert(strstr(res.err, "no interval form holds this mask") && strstr(res.err, "fmsim check"),
            "%s", res.err);
  cr_assert_eq(res.out[0], 0);
}

/* issue 27: render says what it wrote, one line on stdout as convert and expand do
 * (with --json it prints the numbers only) */
Test(robust, render_says_what_it_wrote) {
  char dir[512], args[2048], want[800];
  scratch(dir, sizeof dir, "render_wrote");
  if (!have_figures()) cr_skip_test("no cairo: no render");
  snprintf(args, sizeof args, "render --family causal --seqlen 256 -o %s/m.png", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  snprintf(want, sizeof want, "wrote %s/m.png\n", dir);
  cr_assert_str_eq(res.out, want);
  cr_assert_eq(res.err[0], 0, "%s", res.err);
  snprintf(args, sizeof args, "render --figure memory -o %s/f.svg", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  snprintf(want, sizeof want, "wrote %s/f.svg\n", dir);
  cr_assert_str_eq(res.out, want);
  snprintf(args, sizeof args, "render --family causal --seqlen 256 --json -o %s/j.png", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(res.out[0] == '{' && !strstr(res.out, "wrote"), "%s", res.out);
}

Test(robust, interrupted_convert_leaves_no_temporary, .timeout = 120) {
  char dir[512], mask[700], out[700];
  scratch(dir, sizeof dir, "int_convert");
  /* one query row of 2^22 keys, every other one masked: 4 MiB in, and in the
     bidir-4 form 64 MiB out, written in one burst after the scan */
  int64_t sk = (int64_t)1 << 22, shape[4] = {1, 1, 1, sk};
  uint8_t *row = malloc((size_t)sk);
  for (int64_t j = 0; j < sk; j++) row[j] = (uint8_t)(j & 1);
  snprintf(mask, sizeof mask, "%s/wide.npy", dir);
  fm_err err;
  cr_assert_eq(fm_npy_save(mask, FM_DT_BOOL, 4, shape, row, &err), FM_OK, "%s", err.msg);
  free(row);
  snprintf(out, sizeof out, "%s/wide_iv.npy", dir);
  const char *argv[] = {FMSIM_BIN, "convert", mask, "--form", "bidir-4", "-o", out, NULL};
  interrupts_leave_nothing(argv, dir, "wide_iv.npy.tmp.", "wide_iv", out);
}

Test(robust, interrupted_run_trace_leaves_no_staging, .timeout = 120) {
  char dir[512], out[700];
  scratch(dir, sizeof dir, "int_run");
  snprintf(out, sizeof out, "%s/trace", dir);
  /* 16 (batch, head) pairs of 1024 x 1024 tiles: about 160 MB of trace arrays */
  const char *argv[] = {FMSIM_BIN, "run", "--family", "causal", "--seqlen", "16384", "--br", "16",
                        "--bc", "16", "--batch", "4", "--heads", "4", "--cpu", "--out", out, NULL};
  int sigs[2] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; i++) {
    int st = interrupt_while_writing(argv, out, ".staging.", sigs[i], out);
    cr_assert_eq(count_entries(out, ".staging."), 0, "signal %d left a staging folder", sigs[i]);
    cr_assert_eq(count_entries(out, ".tmp."), 0, "signal %d left a temporary", sigs[i]);
    /* the runner's watcher lets a step end within its grace period (app/run_stop.h): a
       write that ends in time commits the whole trace; one cut leaves none of it */
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      /* columns, tiles, tiles_exact, tile_bytes; summary and timeline */
      cr_assert_eq(count_entries(out, ".npy") + count_entries(out, ".json"), 6, "a partial trace");
    } else {
      cr_assert((WIFEXITED(st) && WEXITSTATUS(st) == 128 + sigs[i]) ||
                (WIFSIGNALED(st) && WTERMSIG(st) == sigs[i]), "status %d", st);
      cr_assert_eq(count_entries(out, "summary.json"), 0, "a summary of a trace not written");
    }
    char rm[800];
    snprintf(rm, sizeof rm, "rm -rf '%s'", out);
    cr_assert_eq(system(rm), 0);
  }
}

Test(robust, trace_members_that_are_links_are_refused) {
  char dir[512], link[700], victim[700], args[1200];
  scratch(dir, sizeof dir, "planted");
  scratch_file(dir, "victim.txt", "victim\n", victim, sizeof victim);
  snprintf(args, sizeof args, "%s/trace", dir);
  mkdir(args, 0755);
  snprintf(link, sizeof link, "%s/trace/tiles.npy", dir);
  cr_assert_eq(symlink(victim, link), 0);
  snprintf(args, sizeof args, "analyze --family causal --seqlen 64 --out %s/trace", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 2, "%s", res.err);
  cr_assert_eq(res.err_lines, 1, "%s", res.err);
  cr_assert(strstr(res.err, "symbolic link"), "%s", res.err);
  struct stat sb;
  cr_assert(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link is not replaced");
  char buf[32];
  fmt_slurp(victim, buf, sizeof buf);
  cr_assert_str_eq(buf, "victim\n");
  cr_assert_eq(count_entries(args + strlen("analyze --family causal --seqlen 64 --out "), ".staging."), 0);
}

Test(robust, sample_file_asking_for_48_gib) {
  char dir[512], path[700], args[1200];
  scratch(dir, sizeof dir, "samples");
  scratch_file(dir, "s.txt", "Total length: 1073741824\nSample 1, num_docs 1073741824: [(0, 1)]# [0]\n",
               path, sizeof path);
  snprintf(args, sizeof args,
           "analyze --family causal_document --seqlen 1024 --samples %s", path);
  expect_usage_error(args, "cannot fit in the");
}

Test(robust, render_at_2_to_the_29_is_refused_up_front) {
  if (!have_figures()) cr_skip_test("no cairo: no render");
  setenv("FMSIM_MEM_LIMIT", "4G", 1);
  char dir[512], args[1200];
  scratch(dir, sizeof dir, "render");
  snprintf(args, sizeof args, "render --family causal --seqlen 536870912 -o %s/x.png", dir);
  fmt_run(&res, args);
  unsetenv("FMSIM_MEM_LIMIT");
  cr_assert_eq(res.status, 2, "%s", res.err);
  cr_assert_eq(res.err_lines, 1, "%s", res.err);
  cr_assert(strstr(res.err, "S = 536870912 would take about 25.0 GiB") && strstr(res.err, "4.0 GiB"),
            "%s", res.err);
  cr_assert_eq(count_entries(dir, "x.png"), 0);
}

Test(robust, view_without_a_display_exits_2_at_once) {
  fmt_run(&res, "--version");
  if (!strstr(res.out, "window: yes")) cr_skip_test("no viewer in this build");
  const char *envs[] = {"env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER",
                        "env -u DISPLAY -u WAYLAND_DISPLAY SDL_VIDEODRIVER=",
                        "env -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER DISPLAY="};
  for (int i = 0; i < 3; i++) {
    char cmd[1200];
    /* through timeout(1): a hang is exit 124, not a stuck test */
    snprintf(cmd, sizeof cmd, "%s timeout 20 %s view --family causal --seqlen 256 >/dev/null 2>&1",
             envs[i], FMSIM_BIN);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: status %d", envs[i], WEXITSTATUS(st));
  }
}

/* The scenario runner (both forms) estimates a case's masks and per-tile
 * arrays with core/fm_limits before it takes them: under FMSIM_MEM_LIMIT a
 * case that does not fit is one line with the estimate, exit 2, nothing
 * written; with room for it, the same case runs. */
Test(robust, scenario_cases_are_checked_against_the_memory_limit) {
  char dir[512], yaml[700], out[700], args[2048];
  scratch(dir, sizeof dir, "runner_mem");
  /* 2^16 tokens in 16 x 16 tiles: 16.8 M tiles, 2 bytes each (classes, exact) */
  scratch_file(dir, "big.yaml",
               "name: big\nseqlen: 65536\nbr: 16\nbc: 16\nrun: [analyze]\nmasks:\n  - family: causal\n",
               yaml, sizeof yaml);
  snprintf(out, sizeof out, "%s/out", dir);
  char forms[2][1600];
  snprintf(forms[0], sizeof forms[0], "run %s --out %s", yaml, out);
  snprintf(forms[1], sizeof forms[1], "run --family causal --seqlen 65536 --br 16 --bc 16 --cpu --out %s",
           out);
  const char *said[2] = {
      "big.yaml:7: key 'masks': case m00-causal-S65536-D128-16x16's masks and per-tile arrays would "
      "take about 34.0 MiB; this machine can give 16.0 MiB now (FMSIM_MEM_LIMIT)",
      /* the single form keeps each tile's modelled bytes too (8 more per tile) */
      "would take about 162.2 MiB; this machine can give 16.0 MiB now (FMSIM_MEM_LIMIT)"};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof args, "%.1900s", forms[i]);
    setenv("FMSIM_MEM_LIMIT", "16M", 1);
    fmt_run(&res, args);
    cr_assert_eq(res.status, 2, "%s: %s", args, res.err);
    cr_assert_eq(res.err_lines, 1, "%s", res.err);
    cr_assert(strstr(res.err, said[i]), "%s", res.err);
    cr_assert_eq(access(out, F_OK), -1, "%s: wrote %s", args, out);
    setenv("FMSIM_MEM_LIMIT", "256M", 1);
    fmt_run(&res, args);
    unsetenv("FMSIM_MEM_LIMIT");
    cr_assert_eq(res.status, 0, "%s: %s", args, res.err);
    char rm[800];
    snprintf(rm, sizeof rm, "rm -rf '%s'", out);
    cr_assert_eq(system(rm), 0);
  }
}

/* Outputs the user did not name (a scenario run's index, report, tables,
 * figures and case files) never follow a symbolic link found in their place:
 * the run refuses with one line and the link's target stays as it was
 * (core/fm_fileio.h, rule 4). */
Test(robust, scenario_outputs_do_not_follow_planted_links) {
  char dir[512], yaml[700], out[700], victim[700], args[2048], link[1200];
  scratch(dir, sizeof dir, "runner_links");
  int figures = have_figures();
  scratch_file(dir, "s.yaml",
               figures ? "name: s\nseqlen: 256\nbr: 32\nbc: 32\nfigures: [gallery]\nmasks:\n"
                         "  - family: causal\n"
                       : "name: s\nseqlen: 256\nbr: 32\nbc: 32\nmasks:\n  - family: causal\n",
               yaml, sizeof yaml);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(victim, sizeof victim, "%s/victim.txt", dir);
  /* (a case's row.tsv is unlinked before its case is redone, and its trace
     members are test robust/trace_members_that_are_links_are_refused) */
  const char *names[] = {"index.csv", "index.json", "run.json", "report.md", "tables/cases.csv",
                         "figures/gallery.png"};
  for (int i = 0; i < 6 - !figures; i++) {
    snprintf(args, sizeof args, "rm -rf '%s'", out);
    cr_assert_eq(system(args), 0);
    snprintf(args, sizeof args, "run %s --out %s", yaml, out);
    fmt_run(&res, args);
    cr_assert_eq(res.status, 0, "%s", res.err);
    write_text(victim, "victim\n");
    snprintf(link, sizeof link, "%s/%s", out, names[i]);
    cr_assert_eq(unlink(link), 0, "%s", link);
    cr_assert_eq(symlink(victim, link), 0);
    /* the same run again: the case is reused, the index and report rewritten */
    snprintf(args, sizeof args, "run %s --out %s --only 'm00-*'", yaml, out);
    fmt_run(&res, args);
    cr_assert_neq(res.status, 0, "%s: followed the link", names[i]);
    /* one line says why (after the progress line of a case that ran) */
    const char *why = strstr(res.err, "is a symbolic link");
    cr_assert(why && strchr(why, '\n') == res.err + strlen(res.err) - 1 &&
              res.err_lines == 1 + (strstr(res.err, "1/1 cases done") != NULL), "%s: %s", names[i], res.err);
    char buf[32];
    fmt_slurp(victim, buf, sizeof buf);
    cr_assert_str_eq(buf, "victim\n", "%s: the link's target was written", names[i]);
    struct stat sb;
    cr_assert(lstat(link, &sb) != 0 || S_ISLNK(sb.st_mode), "%s: the link was replaced", names[i]);
  }
}

/* A trace whose columns.npy holds another Sk than its summary says is refused
 * with both lengths (the message once read the freed mask: a use after free
 * that fuzz/corpus/trace/crash-columns-sk-mismatch reproduces under ASan). */
Test(robust, trace_with_columns_of_another_length) {
  if (!have_figures()) cr_skip_test("no cairo: no render");
  char dir[512], args[2048];
  scratch(dir, sizeof dir, "sk_mismatch");
  /* the columns of S = 64 in the trace of S = 65 (every row index still inside [0, 65]) */
  char t64[700], t65[700];
  snprintf(t64, sizeof t64, "%s/t64", dir);
  snprintf(t65, sizeof t65, "%s/t65", dir);
  snprintf(args, sizeof args, "analyze --family causal --seqlen 64 --out %s", t64);
  fmt_run(&res, args);
  snprintf(args, sizeof args, "analyze --family causal --seqlen 65 --out %s", t65);
  fmt_run(&res, args);
  snprintf(args, sizeof args, "cp %s/columns.npy %s/", t64, t65);
  cr_assert_eq(system(args), 0);
  snprintf(args, sizeof args, "render %s -o %s/x.png", t65, dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 2, "%s", res.err);
  cr_assert_eq(res.err_lines, 1, "%s", res.err);
  cr_assert(strstr(res.err, "1 x 1 vector sets of Sk = 64 do not fit Sk = 65"), "%s", res.err);
  cr_assert_eq(count_entries(dir, "x.png"), 0);
}
