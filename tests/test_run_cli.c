/* End-to-end tests of `fmsim run` and `fmsim bench` that need no GPU: the
 * CPU-simulation trace of `run` (content checked against the cost model),
 * `bench --export-only`, and every bad input (one line on stderr, non-zero
 * exit, nothing written). On a machine with a GPU the tests that may
 * reach it use tiny problems and accept either outcome. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "fm_cost.h"
#include "fm_families.h"
#include "fm_kernel_traits.h"
#include "fm_jsonr.h"
#include "fm_kernels.h"
#include "fm_npy.h"
#include "fm_test_util.h"
#include "fm_tiles.h"
#include "fm_timing.h"
#include "timing_cli.h"

static fmt_result res;

static void tmpdir(char *buf, size_t cap, const char *tag) {
  snprintf(buf, cap, "%s/%s_%d", FM_TEST_TMP_DIR, tag, (int)getpid());
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", buf);
  cr_assert_eq(system(cmd), 0);
}

/* DIR.yaml beside the run folder DIR, holding text (its path into scn). */
static void scenario_beside(const char *dir, const char *text, char *scn, size_t cap) {
  snprintf(scn, cap, "%s.yaml", dir);
  FILE *f = fopen(scn, "w");
  cr_assert_not_null(f, "%s", scn);
  fputs(text, f);
  fclose(f);
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static void *load(const char *dir, const char *name, fm_npy_header *h) {
  char path[700];
  void *data = NULL;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  cr_assert_eq(fm_npy_load(path, h, &data, 1 << 26, NULL), FM_OK, "%s", path);
  return data;
}

/* The CPU simulation of three documents (S = 1000, B = 2, H = 3, D = 128) with more options
   into dir: it must succeed with one note on stderr. */
static void run_documents(const char *dir, const char *more) {
  char args[1024];
  snprintf(args, sizeof args,
           "run --family causal_document --seqlen 1000 --batch 2 --heads 3 --head-dim 128 "
           "--param docs=300,500,200 --cpu %s --out %s", more, dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert_eq(res.err_lines, 1, "one note on stderr: %s", res.err);
}

Test(run_cli, cpu_simulation_trace_matches_the_cost_model) {
  char dir[512], path[700];
  tmpdir(dir, sizeof dir, "run_cpu");
  run_documents(dir, "--br 128 --bc 64");
  cr_assert(strstr(res.err, "CPU simulation") || strstr(res.err, "cpu"), "%s", res.err);
  cr_assert(strstr(res.out, "cpu-simulation"), "%s", res.out);
  const char *files[] = {"summary.json", "tiles.npy", "tiles_exact.npy", "tile_bytes.npy",
                         "columns.npy", "timeline.json"};
  for (int i = 0; i < 6; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    cr_assert(exists(path), "%s missing", files[i]);
  }
  snprintf(path, sizeof path, "%s/tile_cycles.npy", dir);
  cr_assert(!exists(path), "no cycles without a GPU");
  /* the same mask and model, built here */
  const char *params[1] = {"docs=300,500,200"};
  fm_family_request req = {"causal_document", 1000, 2, 3, 0, -1, NULL, 1, params};
  fm_colmask *m = NULL;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  fm_cost_shape sh = {.batch = 2, .heads = 3, .head_dim = 128, .br = 128, .bc = 64, .elem_bytes = 2,
                      .variant = FM_VARIANT_SKIP};
  int32_t tr = 8, tc = 16;
  uint8_t cls[8 * 16];
  int64_t tb[8 * 16];
  fm_tile_counts counts;
  fm_cost cost;
  cr_assert_eq(fm_classify(m, 128, 64, &counts, cls, NULL, NULL), FM_OK);
  cr_assert_eq(fm_cost_compute(m, &sh, cls, tb, &cost, NULL), FM_OK);
  fm_npy_header h;
  uint8_t *tiles = load(dir, "tiles.npy", &h);
  cr_assert(h.dtype == FM_DT_U8 && h.ndim == 4 && h.shape[0] == 2 && h.shape[1] == 3 &&
            h.shape[2] == tr && h.shape[3] == tc);
  int64_t *bytes = load(dir, "tile_bytes.npy", &h);
  cr_assert(h.dtype == FM_DT_I64 && h.ndim == 4 && h.shape[0] == 2 && h.shape[3] == tc);
  int64_t sum = 0;
  for (int p = 0; p < 6; p++) {
    cr_assert_eq(memcmp(tiles + p * tr * tc, cls, sizeof cls), 0, "pair %d", p);
    cr_assert_eq(memcmp(bytes + p * tr * tc, tb, sizeof tb), 0, "pair %d", p);
    for (int i = 0; i < tr * tc; i++) sum += bytes[p * tr * tc + i];
  }
  cr_assert_eq(sum + cost.bytes_q + cost.bytes_prep_read, cost.bytes_read);
  free(tiles);
  free(bytes);
  char summary[32768];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  fmt_slurp(path, summary, sizeof summary);
  char want[128];
  snprintf(want, sizeof want, "\"read\": %lld", (long long)cost.bytes_read);
  const char *keys[] = {"\"format\": \"fmsim-trace\"", "\"version\": 1", "\"kind\": \"run\"",
                        "\"device\": \"cpu-simulation\"", "\"timing\": null", "\"tflops\": null",
                        "\"traffic\"", "\"source\": \"model\"", "\"measured\": null",
                        "\"variant\": \"skip\"", "\"head_dim\": 128", "\"br\": 128", "\"bc\": 64",
                        "\"tile_cycles\": null", want};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    cr_assert(strstr(summary, keys[k]), "missing %s in\n%s", keys[k], summary);
  snprintf(path, sizeof path, "%s/timeline.json", dir);
  fmt_slurp(path, summary, sizeof summary);
  cr_assert(strstr(summary, "\"traceEvents\"") && strstr(summary, "cpu-simulation"));
  /* no staging leftovers */
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      cr_assert_fail("leftover %s", e->d_name);
  closedir(d);
  fm_colmask_destroy(m);
}

Test(run_cli, variants_change_the_model) {
  char dir[512], args[1024], path[700], s1[32768], s2[32768];
  tmpdir(dir, sizeof dir, "run_var");
  snprintf(args, sizeof args, "run --family sliding_window --seqlen 512 --br 128 --bc 64 --cpu "
           "--variant noskip --json --out %s", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "\"variant\": \"noskip\""), "%s", res.out);
  snprintf(path, sizeof path, "%s/summary.json", dir);
  fmt_slurp(path, s1, sizeof s1);
  snprintf(args, sizeof args, "run --family sliding_window --seqlen 512 --br 128 --bc 64 --cpu "
           "--variant dense --head-dim 64 --out %s", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  fmt_slurp(path, s2, sizeof s2);
  cr_assert(strstr(s2, "\"variant\": \"dense\"") && strstr(s2, "\"head_dim\": 64"));
  cr_assert(strstr(s2, "\"bounds\": 0"), "dense reads no bounds");
}

/* A string member of a JSON file: root.k1.k2 ("kernel", "mask_method"), or root.k2 when k1 is NULL. */
static void assert_json_string(const char *path, const char *k1, const char *k2, const char *want) {
  fm_jdoc *d = NULL;
  fm_err err;
  cr_assert_eq(fm_jdoc_load(path, &d, &err), FM_OK, "%s", err.msg);
  const fm_jv *v = fm_jdoc_root(d);
  if (k1) v = fm_jv_get(v, k1);
  const char *got = fm_jv_string(fm_jv_get(v, k2));
  cr_assert(got && !strcmp(got, want), "%s: %s.%s is '%s', not '%s'", path, k1 ? k1 : "", k2,
            got ? got : "(none)", want);
  fm_jdoc_free(d);
}

/* --mask-method (fm_mask_method): taken without a GPU, where it changes nothing, and
   recorded in the trace (summary.json "kernel") and the report; auto by default. */
Test(run_cli, mask_method_is_recorded_and_changes_nothing_on_the_cpu) {
  char dir[512], args[1024], path[700];
  tmpdir(dir, sizeof dir, "run_mask_method");
  snprintf(args, sizeof args, "run --family causal --seqlen 1024 --cpu --out %s", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(!strstr(res.out, "mask method"), "auto is not in the report:\n%s", res.out);
  snprintf(path, sizeof path, "%s/summary.json", dir);
  assert_json_string(path, "kernel", "mask_method", "auto");
  fm_npy_header h1, h2;
  uint8_t *t1 = load(dir, "tiles.npy", &h1);
  int64_t *b1 = load(dir, "tile_bytes.npy", &h1);
  static const char *const methods[] = {"slices", "r2p", "words", "auto"};
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    snprintf(args, sizeof args, "run --family causal --seqlen 1024 --cpu --mask-method %s --out %s",
             methods[i], dir);
    fmt_run(&res, args);
    cr_assert_eq(res.status, 0, "%s", res.err);
    cr_assert_eq(res.err_lines, 1, "one note on stderr: %s", res.err);
    if (strcmp(methods[i], "auto")) {
      char line[64];
      snprintf(line, sizeof line, "variant skip, mask method %s, tiles 128 x 128", methods[i]);
      cr_assert(strstr(res.out, line), "the report names it:\n%s", res.out);
    }
    assert_json_string(path, "kernel", "mask_method", methods[i]);
    uint8_t *t2 = load(dir, "tiles.npy", &h2);
    int64_t *b2 = load(dir, "tile_bytes.npy", &h2);
    int64_t n = h1.shape[0] * h1.shape[1] * h1.shape[2] * h1.shape[3];
    cr_assert(!memcmp(t1, t2, (size_t)n) && !memcmp(b1, b2, (size_t)n * sizeof *b1),
              "the CPU simulation does not depend on the method");
    free(t2);
    free(b2);
  }
  free(t1);
  free(b1);
  snprintf(args, sizeof args, "run --family causal --seqlen 1024 --cpu --mask-method r2p --json --out %s", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  cr_assert(strstr(res.out, "\"mask_method\": \"r2p\""), "%s", res.out);
}

Test(run_cli, run_without_cpu_flag_uses_the_gpu_or_says_so) {
  char dir[512], args[1024], path[700], summary[32768];
  tmpdir(dir, sizeof dir, "run_auto");
  snprintf(args, sizeof args, "run --family causal --seqlen 300 --reps 2 --warmup 1 --out %s", dir);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "%s", res.err);
  snprintf(path, sizeof path, "%s/summary.json", dir);
  fmt_slurp(path, summary, sizeof summary);
  if (strstr(summary, "\"device\": \"cpu-simulation\"")) {
    cr_assert_eq(res.err_lines, 1, "%s", res.err);
    cr_assert(strstr(res.err, "note:"), "%s", res.err);
    cr_assert(strstr(summary, "\"timing\": null"));
  } else {
    cr_assert(strstr(summary, "\"median_ms\""), "a GPU run has a time:\n%s", summary);
  }
}

/* --mask-method other than auto on the sm80 kernel: on a GPU the library refuses the launch
   (one line naming the method, exit 1, no trace); without one the CPU simulation records it. */
Test(run_cli, mask_method_on_sm80_is_refused_by_the_gpu_or_recorded_without_one) {
  static const char *const methods[] = {"slices", "words"};
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    char dir[512], args[1024], path[700], want[160];
    tmpdir(dir, sizeof dir, "run_mask_sm80");
    snprintf(args, sizeof args, "run --family causal --seqlen 256 --kernel sm80 --mask-method %s --reps 1 "
             "--warmup 0 --out %s", methods[i], dir);
    fmt_run(&res, args);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    if (res.status == 0) {
      assert_json_string(path, "kernel", "mask_method", methods[i]);
      assert_json_string(path, NULL, "device", "cpu-simulation");
    } else {
      cr_assert_eq(res.status, 1, "%s", res.err);
      cr_assert_eq(res.err_lines, 1, "%s", res.err);
      snprintf(want, sizeof want, "GPU run failed (sm80): mask method %s: kernel sm80 has one way of masking "
               "a partial tile (auto only)", methods[i]);
      cr_assert(strstr(res.err, want), "%s", res.err);
      cr_assert(!exists(path), "no trace after a refused run");
    }
  }
}

static void expect_error(const char *args, int status, const char *needle, const char *dir) {
  fmt_run(&res, args);
  cr_assert_eq(res.status, status, "'%s' exited %d (%s)", args, res.status, res.err);
  cr_assert_eq(res.err_lines, 1, "'%s' printed %d lines on stderr:\n%s", args, res.err_lines,
               res.err);
  cr_assert(strstr(res.err, needle), "'%s': stderr '%s' lacks '%s'", args, res.err, needle);
  cr_assert_eq(res.out[0], 0, "'%s' printed on stdout", args);
  if (dir) cr_assert(!exists(dir), "'%s' left %s behind", args, dir);
}

Test(run_cli, bad_inputs_get_one_clear_line_and_write_nothing) {
  char dir[512], a[1024];
  tmpdir(dir, sizeof dir, "run_bad");
#define BAD(extra, needle)                                                         \
  do {                                                                             \
    snprintf(a, sizeof a, "run --family causal --seqlen 256 --cpu " extra " --out %s", dir); \
    expect_error(a, 2, needle, dir);                                               \
  } while (0)
  BAD("--variant fast", "unknown variant 'fast'");
  BAD("--mask-method bogus", "--mask-method: unknown mask method 'bogus' (expected auto, slices, r2p or words)");
  BAD("--mask-method R2P", "unknown mask method 'R2P'");
  BAD("--head-dim 96", "head dims 64 and 128");
  BAD("--head-dim x", "not an integer");
  BAD("--reps 0", "--reps");
  BAD("--warmup -1", "--warmup");
  BAD("--bogus", "unknown option '--bogus'");
  BAD("--seqlen 0", "sequence length");
  BAD("--br 0", "--br");
  BAD("extra_arg", "unexpected argument 'extra_arg'");
  expect_error("run --family causal --cpu", 2, "--out DIR is required", NULL);
  expect_error("run --cpu --out /tmp/x", 2, "--family is required", NULL);
  snprintf(a, sizeof a, "run --family nosuch --cpu --out %s", dir);
  expect_error(a, 2, "unknown family 'nosuch'", dir);
  expect_error("run --family causal --seqlen 256 --cpu --out /proc/fmsim_cannot_write", 2,
               "cannot", NULL);
  snprintf(a, sizeof a, "run --family causal --seqlen 1048576 --batch 64 --heads 64 --cpu --out %s",
           dir);
  expect_error(a, 2, "per-tile trace arrays", dir);
#undef BAD
}

/* Runs fmsim with args (a printf format), which must succeed. */
static void run_ok(const char *fmt, ...) {
  char args[1600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "fmsim %s: %s", args, res.err);
}

/* The kernel record of kernel id at head dim hd, with its tile, in an index.json. */
static const char *assert_kernel_tile(const char *text, fm_kernel_id id, int hd) {
  int32_t br, bc;
  cr_assert_eq(fm_kernel_tile_size(id, FM_PASS_FWD, hd, &br, &bc, NULL), FM_OK);
  char want[128];
  snprintf(want, sizeof want, "\"kernel\": \"%s\",\n        \"br\": %d,\n        \"bc\": %d",
           fm_kernel_get(id)->name, br, bc);
  const char *hit = strstr(text, want);
  cr_assert(hit, "missing %s in\n%s", want, text);
  return hit;
}

Test(run_cli, bench_export_only_writes_the_masks_for_the_peer) {
  char dir[512], path[700], text[65536];
  tmpdir(dir, sizeof dir, "bench_exp");
  run_ok("bench --export-only --seqlens 256,512 --tokens 1024 --hidden 256 "
         "--families causal,document,random_eviction --out %s", dir);
  cr_assert(strstr(res.out, "random_eviction"), "%s", res.out);
  /* the index the peer reads: one row per case, naming its interval vectors */
  snprintf(path, sizeof path, "%s/paper-kernel-table/index.json", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "\"id\": \"m01-document-S512-D128-128x128\""), "%s", text);
  cr_assert(strstr(text, "\"columns\": \"cases/m02-random_eviction-S256-D128-128x128/columns.npy\""),
            "%s", text);
  const char *keys[] = {"\"batch\": 4", "\"heads\": 2", "\"mask_nb\": 4", "\"mask_nh\": 2",
                        "\"causal\": true", "\"sparsity_128\"", "\"kernels\""};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    cr_assert(strstr(text, keys[k]), "missing %s in\n%s", keys[k], text);
  fm_npy_header h;
  /* random eviction at S = 256: B = 4, H = 2 per-head sets */
  int32_t *v = load(dir, "paper-kernel-table/cases/m02-random_eviction-S256-D128-128x128/columns.npy", &h);
  cr_assert(h.dtype == FM_DT_I32 && h.ndim == 4 && h.shape[0] == 4 && h.shape[1] == 2 &&
            h.shape[2] == 256 && h.shape[3] == 4);
  free(v);
  v = load(dir, "paper-kernel-table/cases/m01-document-S512-D128-128x128/columns.npy", &h);
  cr_assert(h.shape[0] == 1 && h.shape[1] == 1 && h.shape[2] == 512);
  free(v);
  snprintf(path, sizeof path, "%s/paper-kernel-table/run.json", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "\"format\": \"fmsim-scenario-run\"") &&
            strstr(text, "\"device\": \"cpu-simulation\"") &&
            strstr(text, "\"device_note\": \"--export-only\""), "%s", text);
  snprintf(path, sizeof path, "%s/table.txt", dir);
  cr_assert(exists(path));
  snprintf(path, sizeof path, "%s/sparsity-sweep", dir);
  cr_assert(!exists(path), "no sweep without times");
}

/* The model of --export-only uses each kernel's own tile from the registry,
 * a column group per kernel when several are asked for. */
Test(run_cli, bench_kernels_side_by_side_with_their_own_tiles) {
  char dir[512], path[700], text[65536];
  tmpdir(dir, sizeof dir, "bench_kern");
  run_ok("bench --export-only --seqlens 512 --tokens 1024 --hidden 256 --head-dims 64 "
         "--families causal --kernel sm90,sm80 --out %s", dir);
  cr_assert(strstr(res.out, "sm90 ms") && strstr(res.out, "sm80 ms") &&
            strstr(res.out, "sm90 / sm80 time"), "%s", res.out);
  snprintf(path, sizeof path, "%s/paper-kernel-table/index.json", dir);
  fmt_slurp(path, text, sizeof text);
  const char *sm90 = assert_kernel_tile(text, FM_KERNEL_SM90, 64);
  cr_assert_gt(assert_kernel_tile(text, FM_KERNEL_SM80, 64), sm90, "sm90 first, as asked");
}

Test(run_cli, bench_bad_inputs_write_nothing) {
  char dir[512], a[1024];
  tmpdir(dir, sizeof dir, "bench_bad");
#define BAD(extra, needle)                                          \
  do {                                                              \
    snprintf(a, sizeof a, "bench --export-only " extra " --out %s", dir); \
    expect_error(a, 2, needle, dir);                                \
  } while (0)
  BAD("--head-dims 96", "the kernels support 64 and 128");
  BAD("--head-dims 128,x", "not an integer");
  BAD("--seqlens 1000", "must divide --tokens");
  BAD("--families causal,nosuch", "unknown family 'nosuch'");
  BAD("--sample 9", "--sample 9 does not exist");
  BAD("--hidden 100", "not a multiple of head dim");
  BAD("--reps 0", "--reps");
  BAD("--what", "unknown option '--what'");
#undef BAD
  expect_error("bench --export-only", 2, "--out DIR is required", NULL);
  snprintf(a, sizeof a, "bench --sweep-seqlen 1000 --out %s", dir);
  expect_error(a, 2, "--sweep-seqlen 1000 must divide", dir);
  /* without --export-only: either no GPU (one line, exit 1, nothing written) or a tiny run */
  snprintf(a, sizeof a, "bench --seqlens 256 --tokens 512 --hidden 256 --families causal "
           "--warmup 0 --reps 1 --noskip-reps 0 --instrument-reps 0 --no-bytes --sweep-draws 0 "
           "--out %s", dir);
  fmt_run(&res, a);
  if (res.status != 0) {
    cr_assert_eq(res.status, 1, "%s", res.err);
    cr_assert_eq(res.err_lines, 1, "%s", res.err);
    cr_assert(strstr(res.err, "--export-only"), "%s", res.err);
    cr_assert(!exists(dir));
  }
}

/* --kernel picks the registry's kernel, and with it the tile of the trace;
 * without --br/--bc and without a GPU, auto is the reference GPU's kernel. */
Test(run_cli, kernel_option_sets_the_tile_from_the_registry) {
  char dir[512], args[1024], path[700], summary[32768];
  tmpdir(dir, sizeof dir, "run_kernel");
  fm_kernel_id ref;
  cr_assert_eq(fm_kernel_auto(-1, -1, &ref, NULL), FM_OK);
  const struct {
    const char *flag;
    fm_kernel_id id;
    int hd;
  } runs[] = {{"", ref, 128}, {"--kernel sm80", FM_KERNEL_SM80, 128},
              {"--kernel sm80", FM_KERNEL_SM80, 64}, {"--kernel sm90", FM_KERNEL_SM90, 64},
              {"--kernel auto", ref, 64}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    snprintf(args, sizeof args, "run --family causal --seqlen 1000 --cpu --head-dim %d %s --out %s",
             runs[i].hd, runs[i].flag, dir);
    fmt_run(&res, args);
    cr_assert_eq(res.status, 0, "%s: %s", args, res.err);
    int32_t br, bc;
    cr_assert_eq(fm_kernel_tile_size(runs[i].id, FM_PASS_FWD, runs[i].hd, &br, &bc, NULL), FM_OK);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    fmt_slurp(path, summary, sizeof summary);
    char want[64];
    snprintf(want, sizeof want, "\"br\": %d,\n    \"bc\": %d,", br, bc);
    cr_assert(strstr(summary, want), "%s: want %s in\n%s", args, want, summary);
    snprintf(want, sizeof want, "tiles %d x %d", br, bc);
    cr_assert(strstr(res.out, want), "%s: %s", args, res.out);
    snprintf(want, sizeof want, "of kernel %s", fm_kernel_get(runs[i].id)->name);
    cr_assert(strstr(res.err, want), "%s: %s", args, res.err);
  }
}

Test(run_cli, help_states_the_true_tile_defaults) {
  fmt_run(&res, "run --help");
  cr_assert_eq(res.status, 0);
  cr_assert(!strstr(res.out, "default 128 x 128"), "%s", res.out);
  for (int k = 0; k < FM_NKERNELS; k++) {
    const fm_kernel_desc *d = fm_kernel_get((fm_kernel_id)k);
    char want[96];
    snprintf(want, sizeof want, "%s: %d x %d at D=%d", d->name, d->tiles[0].br, d->tiles[0].bc,
             d->tiles[0].head_dim);
    cr_assert(strstr(res.out, want), "run --help lacks '%s':\n%s", want, res.out);
  }
  cr_assert(strstr(res.out, "--kernel K") && strstr(res.out, "default auto"), "%s", res.out);
}

Test(run_cli, kernel_and_form_errors) {
  char dir[512], a[1024];
  tmpdir(dir, sizeof dir, "run_kbad");
  snprintf(a, sizeof a, "run --family causal --seqlen 256 --cpu --kernel sm70 --out %s", dir);
  expect_error(a, 2, "--kernel: unknown kernel 'sm70' (expected sm80, sm90 or auto)", dir);
  snprintf(a, sizeof a, "run --family causal --seqlen 256 --cpu --kernel sm80,sm90 --out %s", dir);
  expect_error(a, 2, "--kernel: one kernel for one mask", dir);
  snprintf(a, sizeof a, "run %s/../scenarios/teaching-tour.yaml --seqlen 64 --out %s",
           FM_TEST_SOURCE_DIR, dir);
  expect_error(a, 2, "option '--seqlen' is for one mask (--family)", dir);
  snprintf(a, sizeof a, "run --family causal --cpu --only 'x*' --out %s", dir);
  expect_error(a, 2, "--only selects cases of a scenario file", dir);
}

/* A scenario file takes --kernel (its kernel: key) and --cpu. */
Test(run_cli, scenario_file_takes_kernel_and_cpu) {
  char dir[512], path[700], text[65536];
  tmpdir(dir, sizeof dir, "run_scn_kernel");
  run_ok("run %s/../scenarios/sparsity-sweep.yaml --only 'm00-*-r0' --kernel sm80 --cpu --out %s",
         FM_TEST_SOURCE_DIR, dir);
  snprintf(path, sizeof path, "%s/run.json", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "\"kernels\": [\n      \"sm80\"\n    ]") && strstr(text, "\"device_note\": \"--cpu\""),
            "%s", text);
  snprintf(path, sizeof path, "%s/index.json", dir);
  fmt_slurp(path, text, sizeof text);
  assert_kernel_tile(text, FM_KERNEL_SM80, 128);
}

/* What a killed run left in the trace folder (a staging folder, a temporary
 * file) is swept by the next run into it. */
Test(run_cli, a_killed_runs_staging_folder_is_swept) {
  char dir[512], path[800];
  tmpdir(dir, sizeof dir, "run_sweep");
  run_ok("run --family causal --seqlen 256 --cpu --out %s", dir);
  snprintf(path, sizeof path, "%s/.staging.XyZ123", dir);
  cr_assert_eq(mkdir(path, 0755), 0);
  snprintf(path, sizeof path, "%s/.staging.XyZ123/tiles.npy", dir);
  FILE *f = fopen(path, "w");
  fputs("partial", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/summary.json.tmp.AbC123", dir);
  f = fopen(path, "w");
  fclose(f);
  run_ok("run --family causal --seqlen 256 --cpu --out %s", dir);
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)))
    cr_assert(!strstr(e->d_name, ".staging.") && !strstr(e->d_name, ".tmp."), "left %s", e->d_name);
  closedir(d);
}

/* ---- the backward --------------------------------------------------------------------- */

/* --pass both on the CPU: the backward's files beside the forward's, at the backward's own
   tile (sm90's, 64 x 128 at D = 128: the reference GPU's kernel), equal to the classes and
   the cost model computed here; its summary member and its block of the report. */
Test(run_cli, backward_cpu_simulation_matches_the_cost_model_at_its_tile) {
  char dir[512], path[700], summary[65536];
  tmpdir(dir, sizeof dir, "run_bwd");
  run_documents(dir, "--pass both");
  cr_assert(strstr(res.out, "backward    variant skip, tiles 64 x 128 (16 x 8 per head)"), "%s", res.out);
  cr_assert(strstr(res.out, "(2.5x the forward's)"), "%s", res.out);
  const int32_t br = FM_SM90_BWD_BR_HD128, bc = FM_SM90_BWD_BC_HD128, tr = 16, tc = 8;
  const char *params[1] = {"docs=300,500,200"};
  fm_family_request req = {"causal_document", 1000, 2, 3, 0, -1, NULL, 1, params};
  fm_colmask *m = NULL;
  cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
  uint8_t cls[16 * 8], exact[16 * 8];
  int64_t tb[16 * 8];
  fm_tile_counts counts;
  fm_cost cost;
  fm_cost_shape sh = {.batch = 2, .heads = 3, .head_dim = 128, .br = br, .bc = bc, .elem_bytes = 2,
                      .variant = FM_VARIANT_SKIP, .pass = FM_PASS_BWD};
  cr_assert_eq(fm_classify(m, br, bc, &counts, cls, exact, NULL), FM_OK);
  cr_assert_eq(fm_cost_compute(m, &sh, cls, tb, &cost, NULL), FM_OK);
  fm_npy_header h;
  uint8_t *tiles = load(dir, "tiles_bwd.npy", &h);
  cr_assert(h.dtype == FM_DT_U8 && h.ndim == 4 && h.shape[0] == 2 && h.shape[1] == 3 &&
            h.shape[2] == tr && h.shape[3] == tc, "tiles_bwd.npy [B, H, Tr_bwd, Tc_bwd]");
  uint8_t *tex = load(dir, "tiles_exact_bwd.npy", &h);
  int64_t *bytes = load(dir, "tile_bytes_bwd.npy", &h);
  cr_assert(h.dtype == FM_DT_I64 && h.ndim == 4 && h.shape[2] == tr && h.shape[3] == tc);
  for (int p = 0; p < 6; p++) {
    cr_assert_eq(memcmp(tiles + p * tr * tc, cls, sizeof cls), 0, "pair %d", p);
    cr_assert_eq(memcmp(tex + p * tr * tc, exact, sizeof exact), 0, "pair %d", p);
    cr_assert_eq(memcmp(bytes + p * tr * tc, tb, sizeof tb), 0, "pair %d", p);
  }
  free(tiles), free(tex), free(bytes);
  snprintf(path, sizeof path, "%s/tile_cycles_bwd.npy", dir);
  cr_assert(!exists(path), "no cycles without a GPU");
  snprintf(path, sizeof path, "%s/summary.json", dir);
  fmt_slurp(path, summary, sizeof summary);
  const char *bwd = strstr(summary, "\"backward\": {");
  cr_assert(bwd, "%s", summary);
  char want[4][96];
  snprintf(want[0], sizeof want[0], "\"read\": %lld", (long long)cost.bytes_read);
  snprintf(want[1], sizeof want[1], "\"dq_accum\": %lld", (long long)cost.bytes_dq_accum);
  snprintf(want[2], sizeof want[2], "\"tiles_masked\": %lld", (long long)counts.minmax[FM_TILE_MASKED]);
  snprintf(want[3], sizeof want[3], "\"paper\": %.9g", cost.flops_paper);
  const char *in_bwd[] = {"\"pass\": \"bwd\"", "\"br\": 64", "\"bc\": 128", "\"tiles_rows\": 16",
                          "\"timing\": null", "2.5*4*B*H*Sq*Sk*D*(1-rho)", want[0], want[1],
                          want[2], want[3]};
  for (size_t k = 0; k < sizeof in_bwd / sizeof in_bwd[0]; k++)
    cr_assert(strstr(bwd, in_bwd[k]), "backward lacks %s in\n%s", in_bwd[k], bwd);
  const char *top[] = {"\"pass\": \"both\"", "\"tiles_bwd\": \"tiles_bwd.npy\"",
                       "\"tile_bytes_bwd\": \"tile_bytes_bwd.npy\"", "\"tile_cycles_bwd\": null",
                       "\"pass\": \"fwd\""};
  for (size_t k = 0; k < sizeof top / sizeof top[0]; k++)
    cr_assert(strstr(summary, top[k]), "missing %s", top[k]);
  cr_assert(strstr(summary, "\"pass\": \"fwd\"") < bwd, "the top-level members are the forward's");
  fm_colmask_destroy(m);
}

Test(run_cli, forward_only_by_default_and_backward_only_on_request) {
  char dir[512], path[700], summary[65536];
  tmpdir(dir, sizeof dir, "run_pass");
  run_ok("run --family causal --seqlen 512 --cpu --out %s", dir);
  snprintf(path, sizeof path, "%s/tiles_bwd.npy", dir);
  cr_assert(!exists(path), "no backward unless asked for");
  snprintf(path, sizeof path, "%s/summary.json", dir);
  fmt_slurp(path, summary, sizeof summary);
  cr_assert(strstr(summary, "\"backward\": null") && strstr(summary, "\"tiles_bwd\": null"), "%s", summary);
  cr_assert(!strstr(res.out, "backward"), "%s", res.out);
  run_ok("run --family causal --seqlen 512 --cpu --pass bwd --json --out %s", dir);
  cr_assert(strstr(res.out, "\"pass\": \"bwd\"") && strstr(res.out, "\"backward\": {"), "%s", res.out);
  snprintf(path, sizeof path, "%s/tiles_bwd.npy", dir);
  cr_assert(exists(path));
  run_ok("run --family causal --seqlen 512 --cpu --pass bwd --out %s", dir);
  cr_assert(strstr(res.out, "backward    variant skip") && !strstr(res.out, "forward     "), "%s", res.out);
}

Test(run_cli, pass_errors) {
  static const struct {
    const char *args, *want;
  } bad[] = {
      {"run --family causal --seqlen 256 --cpu --pass sideways",
       "--pass: unknown pass 'sideways' (expected fwd, bwd or both)"},
      {"run --family causal --seqlen 256 --cpu --kernel sm80 --pass both",
       "--pass both: kernel sm80 has no bwd pass"},
      {"bench --export-only --pass none", "--pass: unknown pass 'none'"},
  };
  char dir[512], a[1024];
  tmpdir(dir, sizeof dir, "run_pbad");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(a, sizeof a, "%s --out %s", bad[i].args, dir);
    expect_error(a, 2, bad[i].want, dir);
  }
}

/* A scenario with pass: both (and --pass overriding it): backward columns in the index and
   the report, the backward's tile and model in each kernel record. */
Test(run_cli, scenario_pass_key_and_override) {
  char dir[512], path[700], scn[700], text[65536];
  tmpdir(dir, sizeof dir, "run_scn_pass");
  scenario_beside(dir, "name: passes\nseqlen: 1024\nbatch: 1\nheads: 2\nrun: [analyze, gpu]\n"
                  "kernel: [sm90, sm80]\npass: both\nmasks:\n  - family: causal\n  - family: document\n",
                  scn, sizeof scn);
  run_ok("run %s --cpu --out %s", scn, dir);
  snprintf(path, sizeof path, "%s/index.csv", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, ",sm90_time_ms,") && strstr(text, ",sm90_bwd_sparsity,sm90_bwd_time_ms,") &&
            strstr(text, ",sm80_bwd_tflops,"), "%s", text);
  snprintf(path, sizeof path, "%s/index.json", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "\"pass\": \"both\""), "%s", text);
  cr_assert(strstr(text, "\"bwd\": {\n          \"br\": 64,\n          \"bc\": 128,"), "%s", text);
  cr_assert(strstr(text, "\"status\": \"kernel sm80 has no bwd pass\""), "%s", text);
  /* causal S = 1024 at 64 x 128: rho = 56 / 128 (tests/test_cost.c) */
  cr_assert(strstr(text, "\"sparsity\": 0.4375"), "%s", text);
  snprintf(path, sizeof path, "%s/tables/kernels.csv", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "sm90 bwd rho") && strstr(text, "sm90 bwd ms"), "%s", text);
  run_ok("run %s --cpu --pass fwd --out %s", scn, dir);
  snprintf(path, sizeof path, "%s/index.csv", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(!strstr(text, "_bwd_"), "no backward columns with --pass fwd:\n%s", text);
  snprintf(path, sizeof path, "%s/run.json", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "\"pass\": \"fwd\""), "%s", text);
  unlink(scn);
}

/* A scenario's mask_method: key, and --mask-method overriding it (run.json's gpu settings). */
Test(run_cli, scenario_mask_method_key_and_override) {
  char dir[512], scn[700], path[800];
  tmpdir(dir, sizeof dir, "run_scn_mask");
  scenario_beside(dir, "name: methods\nseqlen: 512\nrun: [analyze, gpu]\nkernel: sm90\nmask_method: slices\n"
                  "masks:\n  - family: causal\n", scn, sizeof scn);
  snprintf(path, sizeof path, "%s/run.json", dir);
  run_ok("run %s --cpu --out %s", scn, dir);
  assert_json_string(path, "gpu", "mask_method", "slices");
  run_ok("run %s --cpu --mask-method r2p --out %s", scn, dir);
  assert_json_string(path, "gpu", "mask_method", "r2p");
  run_ok("run %s --cpu --mask-method auto --out %s", scn, dir);
  assert_json_string(path, "gpu", "mask_method", "auto");
  unlink(scn);
}

/* bench's kernel table runs both passes by default (the paper reports both); --pass fwd keeps
   the forward alone. */
Test(run_cli, bench_table_has_the_backward_by_default) {
  char dir[512], path[700], text[65536];
  tmpdir(dir, sizeof dir, "bench_pass");
  run_ok("bench --export-only --seqlens 512 --tokens 1024 --hidden 256 --families causal --out %s", dir);
  cr_assert(strstr(res.out, "pass both") && strstr(res.out, "sm90 bwd ms"), "%s", res.out);
  snprintf(path, sizeof path, "%s/paper-kernel-table/index.json", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "\"bwd\": {"), "%s", text);
  run_ok("bench --export-only --seqlens 512 --tokens 1024 --hidden 256 --families causal --pass fwd "
         "--out %s", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "\"bwd\": null") && !strstr(res.out, "bwd ms"), "%s", text);
  fmt_run(&res, "bench --help");
  cr_assert(strstr(res.out, "--pass P") && strstr(res.out, "table both, the sweep fwd"), "%s", res.out);
}

/* ---- predicted times (the timing model, core/fm_timing.h) ------------------------------- */

/* A made-up sm90 profile at head dim 128, at the kernel's tiles: the forward,
 * and with bwd the backward; scale multiplies the per-tile costs (two
 * profiles that predict apart); bad_tile puts the forward at sm80's tile. */
static void write_sm90_profile(const char *path, int bwd, double scale, int bad_tile) {
  fm_gpu_profile p = {.kernel = FM_KERNEL_SM90, .sms = 132, .hbm_gbs = 4800, .nfwd = 1, .nbwd = bwd};
  snprintf(p.gpu, sizeof p.gpu, "test GPU");
  snprintf(p.date, sizeof p.date, "2026-01-02");
  fm_timing_coef c = {.head_dim = 128, .ctas_per_sm = 1, .launch_us = 5, .item_us = 3,
                      .key_tile_us = 0.01, .unmasked_us = 2 * scale, .partial_us = 3 * scale,
                      .partial_causal_us = 3.5 * scale, .solo = 1};
  p.fwd[0] = p.bwd[0] = c;
  cr_assert_eq(fm_kernel_tile_size(FM_KERNEL_SM90, FM_PASS_FWD, 128, &p.fwd[0].br, &p.fwd[0].bc, NULL), FM_OK);
  cr_assert_eq(fm_kernel_tile_size(FM_KERNEL_SM90, FM_PASS_BWD, 128, &p.bwd[0].br, &p.bwd[0].bc, NULL), FM_OK);
  if (bad_tile)
    cr_assert_eq(fm_kernel_tile_size(FM_KERNEL_SM80, FM_PASS_FWD, 128, &p.fwd[0].br, &p.fwd[0].bc, NULL), FM_OK);
  fm_err err;
  cr_assert_eq(fm_profile_save(&p, path, &err), FM_OK, "%s", err.msg);
}

/* `fmsim predict --json` of one pass of a case's trace: its time_ms. */
static double predict_trace_ms(const char *trace, const char *profile, const char *kernel, const char *pass) {
  char args[1600];
  snprintf(args, sizeof args, "predict --trace %s --gpu %s --kernel %s --pass %s --json", trace, profile,
           kernel, pass);
  fmt_run(&res, args);
  cr_assert_eq(res.status, 0, "fmsim %s: %s", args, res.err);
  fm_jdoc *d = NULL;
  cr_assert_eq(fm_jdoc_parse(res.out, strlen(res.out), "stdout", &d, NULL), FM_OK, "%s", res.out);
  const fm_jv *tile = fm_jv_first(fm_jv_get(fm_jv_first(fm_jv_get(fm_jdoc_root(d), "passes")), "tiles"));
  double ms = fm_jv_number(fm_jv_get(tile, "time_ms"), NAN);
  fm_jdoc_free(d);
  cr_assert(isfinite(ms), "%s", res.out);
  return ms;
}

/* Checks every kernel record of dir/index.json against `fmsim predict` on the
 * case's own mask (its trace): the forward's predicted_ms, and the
 * backward's (or null with bwd_fit 0); predicted_error null without a time.
 * Returns the rows checked. */
static int check_index_predictions(const char *dir, const char *profile, const char *kernel, int bwd_fit) {
  char path[700], trace[900];
  snprintf(path, sizeof path, "%s/index.json", dir);
  fm_jdoc *d = NULL;
  fm_err err;
  cr_assert_eq(fm_jdoc_load(path, &d, &err), FM_OK, "%s", err.msg);
  int rows = 0;
  for (const fm_jv *r = fm_jv_first(fm_jdoc_root(d)); r; r = fm_jv_next(r), rows++) {
    const fm_jv *k = fm_jv_first(fm_jv_get(r, "kernels")), *b = fm_jv_get(k, "bwd");
    snprintf(trace, sizeof trace, "%s/cases/%s", dir, fm_jv_string(fm_jv_get(r, "id")));
    cr_assert_str_eq(fm_jv_string(fm_jv_get(k, "kernel")), kernel);
    double want = predict_trace_ms(trace, profile, kernel, "fwd");
    cr_assert_eq(fm_jv_number(fm_jv_get(k, "predicted_ms"), NAN), want, "%s: index %.9g, predict %.9g",
                 trace, fm_jv_number(fm_jv_get(k, "predicted_ms"), NAN), want);
    cr_assert_eq(fm_jv_type_of(fm_jv_get(k, "predicted_error")), FM_JV_NULL, "no time, no error");
    if (!b || fm_jv_type_of(b) == FM_JV_NULL) continue;
    if (bwd_fit)
      cr_assert_eq(fm_jv_number(fm_jv_get(b, "predicted_ms"), NAN),
                   predict_trace_ms(trace, profile, kernel, "bwd"), "%s backward", trace);
    else
      cr_assert_eq(fm_jv_type_of(fm_jv_get(b, "predicted_ms")), FM_JV_NULL, "%s: no backward fit", trace);
  }
  fm_jdoc_free(d);
  return rows;
}

/* A CPU scenario run with profile: writes, for every case, the very number
 * `fmsim predict` gives for the case's mask and kernel; a profile without a
 * backward fit gives null and a note; another profile on a rerun predicts
 * the reused cases again. */
Test(run_cli, scenario_profile_writes_what_predict_gives) {
  char dir[512], path[700], scn[700], prof[700], prof2[700], text[65536];
  tmpdir(dir, sizeof dir, "run_predict");
  snprintf(scn, sizeof scn, "%s.yaml", dir);
  snprintf(prof, sizeof prof, "%s_fwd.json", dir);
  snprintf(prof2, sizeof prof2, "%s_both.json", dir);
  write_sm90_profile(prof, 0, 1.0, 0);
  write_sm90_profile(prof2, 1, 1.5, 0);
  FILE *f = fopen(scn, "w");
  fprintf(f, "name: predictions\nseqlen: 1000\nbatch: 2\nheads: 3\nrun: [analyze, gpu]\nkernel: sm90\n"
             "pass: both\nprofile: %s\nmasks:\n  - family: causal\n  - family: causal_document\n"
             "    params: {docs: '300,500,200'}\n  - family: random_eviction\n", strrchr(prof, '/') + 1);
  fclose(f);
  run_ok("run %s --cpu --out %s", scn, dir);
  snprintf(path, sizeof path, "%s/report.md", dir); /* the progress line is one line: the report says it */
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "sm90 predicted ms"), "the report's kernel table says it: %s", text);
  cr_assert_eq(check_index_predictions(dir, prof, "sm90", 0), 3);
  snprintf(path, sizeof path, "%s/run.json", dir);
  fmt_slurp(path, text, sizeof text);
  char want[900]; /* the key's file, found beside the scenario */
  snprintf(want, sizeof want, "\"profile\": \"%s\"", prof);
  cr_assert(strstr(text, want) && strstr(text, "\"profiles\": ["), "%s", text);
  snprintf(want, sizeof want, "\"note\": \"sm90 bwd: %s has no backward fit\",", prof);
  cr_assert(strstr(text, want) && strstr(text, "\"passes\": 3"), "the missing fit is said once, for "
            "3 passes:\n%s", text);
  snprintf(path, sizeof path, "%s/index.csv", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, ",sm90_predicted_ms,sm90_predicted_error,") &&
            strstr(text, ",sm90_bwd_predicted_ms,sm90_bwd_predicted_error"), "%s", text);
  snprintf(path, sizeof path, "%s/report.md", dir);
  fmt_slurp(path, text, sizeof text);
  cr_assert(strstr(text, "| sm90 predicted ms |") && strstr(text, "3 passes predicted, 3 without a fit"),
            "%s", text);
  /* another profile: the cases are reused, their predictions are the new profile's */
  run_ok("run %s --cpu --gpu %s --out %s", scn, prof2, dir);
  cr_assert(strstr(res.out, "3 cases (3 from an earlier run)"), "%s", res.out);
  cr_assert_eq(check_index_predictions(dir, prof2, "sm90", 1), 3);
  unlink(scn);
  unlink(prof);
  unlink(prof2);
}

/* bench --gpu with --export-only: the kernel table's predictions, equal to
 * predict's on each case's mask, in the index and in table.txt. */
Test(run_cli, bench_gpu_export_only_writes_predictions) {
  char dir[512], table[700], run_json[800], text[65536];
  tmpdir(dir, sizeof dir, "bench_predict");
  snprintf(table, sizeof table, "%s/paper-kernel-table", dir);
  snprintf(run_json, sizeof run_json, "%s/run.json", table);
  run_ok("bench --export-only --seqlens 512,1024 --tokens 2048 --hidden 512 --families "
         "causal,document,random_eviction --kernel sm80 --gpu h200-sm80 --out %s", dir);
  cr_assert(strstr(res.out, "sm80 predicted ms"), "table.txt has them too:\n%s", res.out);
  cr_assert_eq(check_index_predictions(table, "h200-sm80", "sm80", 0), 6);
  fmt_slurp(run_json, text, sizeof text);
  cr_assert(strstr(text, "\"profile\": \"h200-sm80\""), "%s", text);
}

/* A bad profile: one line, exit 2, nothing written, before any case runs. */
Test(run_cli, bad_profiles_are_refused_before_anything_runs) {
  char dir[512], scn[700], bad[700], a[2400];
  tmpdir(dir, sizeof dir, "run_badprof");
  snprintf(scn, sizeof scn, "%s.yaml", dir);
  snprintf(bad, sizeof bad, "%s_bad.json", dir);
  FILE *f = fopen(bad, "w");
  fputs("{\"format\": \"fmsim-gpu-profile\", \"version\": 1, \"kernel\": ", f);
  fclose(f);
  f = fopen(scn, "w");
  fputs("name: bad\nseqlen: 512\nrun: [analyze, gpu]\nkernel: sm90\nprofile: h200-sm80\nmasks:\n"
        "  - family: causal\n", f);
  fclose(f);
  snprintf(a, sizeof a, "run %s --cpu --out %s", scn, dir);
  expect_error(a, 2, ".yaml:5: key 'profile': h200-sm80: the profile is for kernel sm80, and this "
                     "run's kernels are sm90", dir);
  snprintf(a, sizeof a, "run %s --cpu --gpu nosuch --out %s", scn, dir);
  expect_error(a, 2, "--gpu nosuch: no such profile file", dir);
  snprintf(a, sizeof a, "run %s --cpu --gpu %s --out %s", scn, bad, dir);
  expect_error(a, 2, "GPU profile", dir);
  /* a tile that is not the kernel's: an sm90 profile at sm80's tile */
  write_sm90_profile(bad, 0, 1.0, 1);
  snprintf(a, sizeof a, "run %s --cpu --gpu %s --out %s", scn, bad, dir);
  expect_error(a, 2, "but kernel sm90 uses", dir);
  snprintf(a, sizeof a, "bench --export-only --seqlens 512 --tokens 1024 --hidden 256 --families causal "
           "--gpu h200-sm80 --out %s", dir);
  expect_error(a, 2, "--gpu h200-sm80: the profile is for kernel sm80, and this run's kernels are sm90 "
                     "(--kernel sm80", dir);
  snprintf(a, sizeof a, "bench --export-only --gpu nosuch --out %s", dir);
  expect_error(a, 2, "--gpu nosuch: no such profile file", dir);
  snprintf(a, sizeof a, "run --family causal --cpu --gpu h200-sm80 --out %s", dir);
  expect_error(a, 2, "--gpu: predicted times go in a scenario's index", dir);
  f = fopen(scn, "w");
  fputs("name: bad\nseqlen: 512\nkernel: sm80\nprofile: h200-sm80\nmasks:\n  - family: causal\n", f);
  fclose(f);
  snprintf(a, sizeof a, "run %s --out %s", scn, dir);
  expect_error(a, 2, ".yaml:4: key 'profile': h200-sm80: predictions go in the GPU step's kernel "
                     "records: add gpu to run:", dir);
  unlink(scn);
  unlink(bad);
}

/* The profile a GPU has by default: data/gpu/SHORT-KERNEL.json, SHORT from
 * the device's name as profiles are named. */
Test(run_cli, the_gpus_own_profile_by_its_short_name) {
  static const char *const names[][2] = {
      {"NVIDIA H200", "h200"}, {"NVIDIA H100 80GB HBM3", "h100"}, {"NVIDIA A100-SXM4-80GB", "a100"},
      {"NVIDIA GeForce RTX 4090", "rtx4090"}, {"Tesla V100-PCIE-16GB", "v100"}, {"NVIDIA", ""},
      {"", ""}};
  char got[64], name[128], path[4200];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    timing_gpu_short_name(names[i][0], got, sizeof got);
    cr_assert_str_eq(got, names[i][1], "'%s'", names[i][0]);
  }
  cr_assert_eq(timing_default_profile("NVIDIA H200", FM_KERNEL_SM80, name, sizeof name, path, sizeof path), 1);
  cr_assert_str_eq(name, "h200-sm80");
  cr_assert(strstr(path, "/data/gpu/h200-sm80.json"), "%s", path);
  cr_assert_eq(timing_default_profile("NVIDIA A100-SXM4-80GB", FM_KERNEL_SM80, name, sizeof name, path,
                                      sizeof path), 0, "no A100 profile in data/gpu");
  cr_assert_str_eq(name, "a100-sm80");
  cr_assert_eq(timing_default_profile("NVIDIA", FM_KERNEL_SM80, name, sizeof name, path, sizeof path), 0);
}
