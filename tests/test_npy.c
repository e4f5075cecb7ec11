/* Tests of .npy reading/writing and interval files: round trips in every
 * form and dtype, and every malformed input rejected with a precise message
 * and nothing left behind. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fm_dense.h"
#include "fm_families.h"
#include "fm_jsonr.h"
#include "fm_limits.h"
#include "fm_samples.h"
#include "fm_intervals_io.h"
#include "fm_tiles.h"
#include "fm_npy.h"
#include "fm_test_util.h"

static void tmp_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/npy_%d_%s", FM_TEST_TMP_DIR, (int)getpid(), name);
}

/* Writes raw bytes: a header dict text with a valid preamble, then data. */
static void write_raw_npy(const char *path, const char *dict, const void *data, size_t n,
                          int major) {
  FILE *f = fopen(path, "wb");
  size_t len = strlen(dict) + 1;
  fwrite("\x93NUMPY", 1, 6, f);
  unsigned char ver[2] = {(unsigned char)major, 0};
  fwrite(ver, 1, 2, f);
  if (major == 1) {
    unsigned char l[2] = {(unsigned char)(len & 0xff), (unsigned char)(len >> 8)};
    fwrite(l, 1, 2, f);
  } else {
    unsigned char l[4] = {(unsigned char)(len & 0xff), (unsigned char)(len >> 8), 0, 0};
    fwrite(l, 1, 4, f);
  }
  fwrite(dict, 1, len - 1, f);
  fputc('\n', f);
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

Test(npy, save_load_round_trip_all_dtypes) {
  char path[512];
  tmp_path(path, sizeof path, "rt.npy");
  for (int t = 0; t < FM_DT_COUNT; t++) {
    int64_t shape[3] = {2, 3, 5};
    size_t n = 30 * (size_t)fm_dtype_size((fm_dtype)t);
    unsigned char *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i * 7 + (size_t)t);
    if (t == FM_DT_BOOL)
      for (size_t i = 0; i < n; i++) data[i] &= 1;
    cr_assert_eq(fm_npy_save(path, (fm_dtype)t, 3, shape, data, NULL), FM_OK);
    fm_npy_header h;
    void *back;
    cr_assert_eq(fm_npy_load(path, &h, &back, 1 << 20, NULL), FM_OK, "dtype %s",
                 fm_dtype_descr((fm_dtype)t));
    cr_assert_eq(h.dtype, t);
    cr_assert_eq(h.ndim, 3);
    cr_assert(h.shape[0] == 2 && h.shape[1] == 3 && h.shape[2] == 5);
    cr_assert_eq(h.data_offset % 64, 0, "header aligned to 64 bytes");
    cr_assert_eq(memcmp(back, data, n), 0);
    free(back);
    free(data);
  }
  /* one dimension: "(5,)" */
  int64_t one[1] = {5};
  int32_t v[5] = {1, 2, 3, 4, 5};
  cr_assert_eq(fm_npy_save(path, FM_DT_I32, 1, one, v, NULL), FM_OK);
  fm_npy_header h;
  void *back;
  cr_assert_eq(fm_npy_load(path, &h, &back, 1 << 20, NULL), FM_OK);
  cr_assert_eq(h.ndim, 1);
  cr_assert_eq(h.shape[0], 5);
  free(back);
  unlink(path);
}

Test(npy, reads_format_version_2) {
  char path[512];
  tmp_path(path, sizeof path, "v2.npy");
  int32_t v[4] = {1, 2, 3, 4};
  write_raw_npy(path, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", v, sizeof v, 2);
  fm_npy_header h;
  void *back;
  cr_assert_eq(fm_npy_load(path, &h, &back, 1 << 20, NULL), FM_OK);
  cr_assert_eq(((int32_t *)back)[3], 4);
  free(back);
  unlink(path);
}

static void expect_bad(const char *dict, const void *data, size_t n, fm_status want,
                       const char *needle) {
  char path[512];
  tmp_path(path, sizeof path, "bad.npy");
  write_raw_npy(path, dict, data, n, 1);
  fm_npy_header h;
  void *back = NULL;
  fm_err e;
  fm_status st = fm_npy_load(path, &h, &back, 1 << 20, &e);
  cr_assert_eq(st, want, "dict %s: got %d (%s)", dict, st, e.msg);
  cr_assert(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
  cr_assert(strstr(e.msg, path) != NULL, "message names the file: %s", e.msg);
  cr_assert_null(back);
  unlink(path);
}

Test(npy, rejects_malformed_headers) {
  int32_t v[4] = {0};
  expect_bad("{'descr': '>i4', 'fortran_order': False, 'shape': (2, 2), }", v, 16,
             FM_EUNSUPPORTED, "big-endian");
  expect_bad("{'descr': '<c16', 'fortran_order': False, 'shape': (2, 2), }", v, 16,
             FM_EUNSUPPORTED, "unsupported dtype");
  expect_bad("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 2), }", v, 16,
             FM_EUNSUPPORTED, "Fortran");
  expect_bad("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", v, 16, FM_EFORMAT,
             "truncated");
  expect_bad("{'descr': '<i4', 'shape': (2, 2), }", v, 16, FM_EFORMAT, "fortran_order");
  expect_bad("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", v, 16,
             FM_EFORMAT, "'x'");
  expect_bad("{'descr': '<i4', 'fortran_order': False, 'shape': (2, -2), }", v, 16, FM_EFORMAT,
             "shape");
  expect_bad("['descr']", v, 16, FM_EFORMAT, "not a dict");
}

Test(npy, rejects_bad_magic_and_short_files) {
  char path[512];
  tmp_path(path, sizeof path, "magic.npy");
  FILE *f = fopen(path, "wb");
  fputs("PK\x03\x04 this is a zip file, not npy", f);
  fclose(f);
  fm_npy_header h;
  void *back;
  fm_err e;
  cr_assert_eq(fm_npy_load(path, &h, &back, 1 << 20, &e), FM_EFORMAT);
  cr_assert(strstr(e.msg, "bad magic"), "%s", e.msg);
  f = fopen(path, "wb");
  fputs("\x93NUM", f);
  fclose(f);
  cr_assert_eq(fm_npy_load(path, &h, &back, 1 << 20, &e), FM_EFORMAT);
  cr_assert(strstr(e.msg, "too short"), "%s", e.msg);
  unlink(path);
  cr_assert_eq(fm_npy_load("/nonexistent/x.npy", &h, &back, 1 << 20, &e), FM_EIO);
}

Test(npy, failed_write_leaves_nothing) {
  int64_t shape[1] = {4};
  int32_t v[4] = {0};
  fm_err e;
  char dir[512];
  tmp_path(dir, sizeof dir, "ro");
  mkdir(dir, 0755);
  char path[600];
  snprintf(path, sizeof path, "%s/missing/x.npy", dir);
  cr_assert_eq(fm_npy_save(path, FM_DT_I32, 1, shape, v, &e), FM_EIO);
  cr_assert(strstr(e.msg, "missing/x.npy"), "%s", e.msg);
  /* a streaming writer closed without commit leaves nothing */
  snprintf(path, sizeof path, "%s/y.npy", dir);
  fm_npy_writer *w;
  cr_assert_eq(fm_npy_writer_open(path, FM_DT_I32, 1, shape, &w, NULL), FM_OK);
  fm_npy_writer_write(w, v, 2, NULL);
  cr_assert_neq(fm_npy_writer_close(w, 1, &e), FM_OK, "2 of 4 elements is not a whole array");
  DIR *d = opendir(dir);
  struct dirent *ent;
  int files = 0;
  while ((ent = readdir(d)))
    if (ent->d_name[0] != '.') files++;
  closedir(d);
  cr_assert_eq(files, 0, "nothing half-written is left");
  rmdir(dir);
}

Test(intervals_io, round_trip_every_form) {
  fm_rng r;
  fm_rng_seed(&r, 7, 0);
  char path[512];
  tmp_path(path, sizeof path, "iv.npy");
  int hits[FM_FORM_COUNT] = {0};
  for (int iter = 0; iter < 200; iter++) {
    int32_t sq = 1 + (int32_t)fm_rng_below(&r, 20), sk = 1 + (int32_t)fm_rng_below(&r, 20);
    int causal = (int)fm_rng_below(&r, 2);
    int32_t nb = 1 + (int32_t)fm_rng_below(&r, 2), nh = 1 + (int32_t)fm_rng_below(&r, 3);
    fm_colmask *m = fmt_random_mask(&r, sq, sk, nb, nh, causal);
    for (int f = 0; f < FM_FORM_COUNT; f++) {
      fm_form used;
      if (fm_colmask_save_npy(m, path, (fm_form)f, &used, NULL) != FM_OK) continue;
      hits[f]++;
      fm_colmask *back = NULL;
      fm_err e;
      cr_assert_eq(fm_colmask_load_npy(path, fm_form_causal((fm_form)f), sq, &back, &e), FM_OK,
                   "%s", e.msg);
      cr_assert(fm_colmask_equal(m, back), "form %s changed the mask", fm_form_name((fm_form)f));
      cr_assert_eq(fm_colmask_nb(back), nb);
      cr_assert_eq(fm_colmask_nh(back), nh);
      fm_npy_header h;
      void *raw;
      fm_npy_load(path, &h, &raw, 1 << 20, NULL);
      cr_assert_eq(h.dtype, FM_DT_I32);
      cr_assert(h.ndim == 4 && h.shape[2] == sk && h.shape[3] == fm_form_k((fm_form)f));
      free(raw);
      fm_colmask_destroy(back);
    }
    fm_colmask_destroy(m);
  }
  for (int f = 0; f < FM_FORM_COUNT; f++) cr_assert_gt(hits[f], 5, "form %d exercised", f);
  unlink(path);
}

Test(intervals_io, reads_int64_and_defaults_sq_to_sk) {
  char path[512];
  tmp_path(path, sizeof path, "i64.npy");
  int64_t lts[10] = {3, 4, 5, 6, 7, 8, 9, 10, 10, 10}; /* sliding window w=3 */
  int64_t shape[4] = {1, 1, 10, 1};
  cr_assert_eq(fm_npy_save(path, FM_DT_I64, 4, shape, lts, NULL), FM_OK);
  fm_colmask *m;
  cr_assert_eq(fm_colmask_load_npy(path, 1, 0, &m, NULL), FM_OK);
  cr_assert_eq(fm_colmask_sq(m), 10);
  cr_assert(fm_colmask_masked(m, 0, 3, 0) && !fm_colmask_masked(m, 0, 2, 0));
  cr_assert(fm_colmask_masked(m, 0, 0, 1)); /* causal */
  fm_colmask_destroy(m);
  unlink(path);
}

static void expect_bad_intervals(fm_dtype t, int ndim, const int64_t *shape, const void *data,
                                 int causal, const char *needle) {
  char path[512];
  tmp_path(path, sizeof path, "badiv.npy");
  cr_assert_eq(fm_npy_save(path, t, ndim, shape, data, NULL), FM_OK);
  fm_colmask *m = (fm_colmask *)1;
  fm_err e;
  cr_assert_neq(fm_colmask_load_npy(path, causal, 0, &m, &e), FM_OK);
  cr_assert_null(m);
  cr_assert(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
  unlink(path);
}

Test(intervals_io, rejects_bad_interval_files) {
  int32_t v[40] = {0};
  int64_t s4[4] = {1, 1, 10, 1};
  v[3] = 11; /* LTS beyond Sq = 10 */
  expect_bad_intervals(FM_DT_I32, 4, s4, v, 1, "LTS = 11 is outside [0, Sq=10]");
  v[3] = -1;
  expect_bad_intervals(FM_DT_I32, 4, s4, v, 1, "outside");
  v[3] = 0;
  expect_bad_intervals(FM_DT_I32, 4, s4, v, 0, "k = 1"); /* k = 1 is causal only */
  int64_t s3[3] = {1, 10, 1};
  expect_bad_intervals(FM_DT_I32, 3, s3, v, 1, "[B, H_mask, Sk, k]");
  int64_t sbool[4] = {1, 1, 10, 1};
  expect_bad_intervals(FM_DT_BOOL, 4, sbool, v, 1, "dense mask");
  int64_t s2[4] = {1, 1, 10, 2};
  for (int j = 0; j < 10; j++) {
    v[2 * j] = 5;
    v[2 * j + 1] = 4; /* start after end */
  }
  expect_bad_intervals(FM_DT_I32, 4, s2, v, 1, "LTS = 5 > LTE = 4");
  int64_t s0[4] = {1, 1, 0, 2};
  expect_bad_intervals(FM_DT_I32, 4, s0, v, 1, "positive");
}

Test(intervals_io, saved_families_classify_like_the_original) {
  /* the min/max rule reads the stored values: a saved family keeps its
     vectors (empty intervals included), so its tiles classify the same */
  char path[512];
  tmp_path(path, sizeof path, "fam.npy");
  for (int f = 0; f < fm_family_count(); f++) {
    const char *name = fm_family_at(f)->name;
    fm_family_request req = {name, 512, 1, 2, 3, -1, NULL, 0, NULL};
    fm_colmask *m, *back;
    cr_assert_eq(fm_family_build(&req, &m, NULL, NULL), FM_OK);
    fm_form used;
    cr_assert_eq(fm_colmask_save_npy(m, path, FM_FORM_NONE, &used, NULL), FM_OK);
    cr_assert_eq(fm_colmask_load_npy(path, fm_form_causal(used), 0, &back, NULL), FM_OK);
    fm_tile_counts a, b;
    fm_classify(m, 32, 16, &a, NULL, NULL, NULL);
    fm_classify(back, 32, 16, &b, NULL, NULL, NULL);
    cr_assert_eq(memcmp(a.minmax, b.minmax, sizeof a.minmax), 0, "%s: min/max classes changed", name);
    cr_assert_eq(memcmp(a.exact, b.exact, sizeof a.exact), 0, "%s", name);
    fm_colmask_destroy(m);
    fm_colmask_destroy(back);
  }
  unlink(path);
}

/* ---- output safety (fm_fileio.h) ------------------------------------------- */

#include <signal.h>

#include "fm_fileio.h"
#include "fm_limits.h"
#include "fm_samples.h"

Test(fileio, refuses_devices_folders_and_fifos) {
  fm_atomic_file af;
  fm_err err;
  char dir[512], fifo[600];
  tmp_path(dir, sizeof dir, "outdir");
  mkdir(dir, 0755);
  tmp_path(fifo, sizeof fifo, "fifo");
  unlink(fifo);
  cr_assert_eq(mkfifo(fifo, 0644), 0);
  char null_dev[600], full_dev[600];
  fmt_devnode(dir, "null", null_dev, sizeof null_dev);
  fmt_devnode(dir, "full", full_dev, sizeof full_dev);
  const char *bad[] = {null_dev, full_dev, dir, fifo};
  const char *why[] = {"character device", "character device", "directory", "FIFO"};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(fm_atomic_open(&af, bad[i], &err), FM_EINVAL, "%s", bad[i]);
    cr_assert(strstr(err.msg, why[i]) && strstr(err.msg, "refusing"), "%s", err.msg);
    cr_assert_eq(fm_output_check(bad[i], 0, &err), FM_EINVAL);
  }
  struct stat sb;
  cr_assert(stat(null_dev, &sb) == 0 && S_ISCHR(sb.st_mode), "%s is still a device", null_dev);
  unlink(null_dev);
  unlink(full_dev);
  /* "-" is stdout only where the caller allows it */
  cr_assert_eq(fm_output_check("-", FM_OUT_STDOUT, &err), FM_OK);
  unlink(fifo);
  rmdir(dir);
}

Test(fileio, follows_a_named_link_but_never_a_planted_one) {
  char target[512], link[512];
  tmp_path(target, sizeof target, "link_target.txt");
  tmp_path(link, sizeof link, "link.txt");
  unlink(link);
  cr_assert_eq(fm_write_file_atomic(target, "old", 3, NULL), FM_OK);
  cr_assert_eq(symlink(target, link), 0);
  /* named by the user: the link stays, its target gets the new content */
  cr_assert_eq(fm_write_file_atomic(link, "new!", 4, NULL), FM_OK);
  struct stat sb;
  cr_assert(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link itself is kept");
  char buf[16];
  fmt_slurp(target, buf, sizeof buf);
  cr_assert_str_eq(buf, "new!");
  /* a name fmsim chose: a link there is refused, its target untouched */
  fm_atomic_file af;
  fm_err err;
  cr_assert_eq(fm_atomic_open_ex(&af, link, FM_OUT_NOFOLLOW, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "symbolic link"), "%s", err.msg);
  fmt_slurp(target, buf, sizeof buf);
  cr_assert_str_eq(buf, "new!");
  unlink(link);
  cr_assert_eq(symlink("/nonexistent/fmsim", link), 0);
  cr_assert_eq(fm_atomic_open(&af, link, &err), FM_EINVAL, "a dangling link is refused");
  unlink(link);
  unlink(target);
}

Test(fileio, keeps_the_mode_of_a_replaced_file) {
  char path[512];
  tmp_path(path, sizeof path, "mode.txt");
  cr_assert_eq(fm_write_file_atomic(path, "a", 1, NULL), FM_OK);
  chmod(path, 0600);
  cr_assert_eq(fm_write_file_atomic(path, "b", 1, NULL), FM_OK);
  struct stat sb;
  cr_assert(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600, "mode %o", sb.st_mode & 0777);
  unlink(path);
}

/* Creates an entry NAME in dir as a leftover of a process that is gone. */
static long dead_pid(void) {
  pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, NULL, 0);
  return (long)p;
}

Test(fileio, sweeps_what_a_killed_writer_left) {
  char path[512], stale[700], live[700];
  tmp_path(path, sizeof path, "swept.npy");
  long gone = dead_pid();
  snprintf(stale, sizeof stale, "%s.tmp.%ld.AbCdEf", path, gone);
  snprintf(live, sizeof live, "%s.tmp.%ld.AbCdEf", path, (long)getppid()); /* alive */
  cr_assert_eq(fm_write_file_atomic(stale, "x", 1, NULL), FM_OK);
  cr_assert_eq(fm_write_file_atomic(live, "x", 1, NULL), FM_OK);
  cr_assert_eq(fm_write_file_atomic(path, "data", 4, NULL), FM_OK);
  cr_assert_neq(access(stale, F_OK), 0, "a dead writer's temporary is swept");
  cr_assert_eq(access(live, F_OK), 0, "a live writer's temporary is kept");
  unlink(live);
  unlink(path);
}

Test(fileio, cleanup_now_removes_registered_paths) {
  char file[512], dir[512], inner[700];
  tmp_path(file, sizeof file, "registered.tmp");
  tmp_path(dir, sizeof dir, "registered.dir");
  cr_assert_eq(fm_write_file_atomic(file, "x", 1, NULL), FM_OK);
  mkdir(dir, 0755);
  snprintf(inner, sizeof inner, "%s/member.npy", dir);
  cr_assert_eq(fm_write_file_atomic(inner, "x", 1, NULL), FM_OK);
  int a = fm_cleanup_add(file, FM_CLEANUP_FILE), b = fm_cleanup_add(dir, FM_CLEANUP_TREE);
  cr_assert(a >= 0 && b >= 0);
  fm_cleanup_now();
  cr_assert_neq(access(file, F_OK), 0);
  cr_assert_neq(access(dir, F_OK), 0, "the folder and its files are gone");
}

Test(fileio, a_signal_removes_the_temporary) {
  char path[512];
  tmp_path(path, sizeof path, "signalled.bin");
  pid_t p = fork();
  if (p == 0) {
    fm_atomic_file af;
    if (fm_atomic_open(&af, path, NULL) != FM_OK) _exit(3);
    fm_atomic_write(&af, "partial", 7, NULL);
    fflush(af.f);
    raise(SIGTERM);
    _exit(4); /* not reached: the handler re-raises with the default action */
  }
  int st;
  waitpid(p, &st, 0);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "died of SIGTERM (status %d)", st);
  char dir[512];
  snprintf(dir, sizeof dir, "%s", FM_TEST_TMP_DIR);
  DIR *d = opendir(dir);
  struct dirent *e;
  char prefix[128];
  snprintf(prefix, sizeof prefix, "npy_%d_signalled.bin", (int)getpid());
  while ((e = readdir(d))) cr_assert(strncmp(e->d_name, prefix, strlen(prefix)) != 0, "left %s", e->d_name);
  closedir(d);
}

/* ---- sizes against the file and the machine (fm_limits.h) ------------------- */

Test(limits, parse_and_check_against_the_environment) {
  int64_t b;
  cr_assert_eq(fm_mem_parse("4G", &b), 0);
  cr_assert_eq(b, (int64_t)4 << 30);
  cr_assert_eq(fm_mem_parse("512MiB", &b), 0);
  cr_assert_eq(b, (int64_t)512 << 20);
  cr_assert_eq(fm_mem_parse("12x", &b), -1);
  cr_assert_eq(fm_mem_parse("99999999999T", &b), -1);
  cr_assert_eq(fm_mem_mul(INT64_MAX / 2, 3), INT64_MAX, "saturates");
  setenv("FMSIM_MEM_LIMIT", "1G", 1);
  fm_err err;
  cr_assert_eq(fm_mem_check((int64_t)512 << 20, "half", &err), FM_OK);
  cr_assert_eq(fm_mem_check((int64_t)3 << 30, "the test arrays", &err), FM_ENOMEM);
  cr_assert(strstr(err.msg, "the test arrays would take about 3.0 GiB") &&
            strstr(err.msg, "1.0 GiB") && strstr(err.msg, "FMSIM_MEM_LIMIT"), "%s", err.msg);
  cr_assert_eq(fm_mem_check(-1, "overflowed", &err), FM_ENOMEM);
  unsetenv("FMSIM_MEM_LIMIT");
  fm_mem_limit l;
  fm_mem_limit_get(&l);
  cr_assert(l.bytes > 0 && l.source != FM_MEM_ENV);
}

Test(limits, npy_header_longer_than_the_file) {
  char path[512];
  tmp_path(path, sizeof path, "longheader.npy");
  FILE *f = fopen(path, "wb");
  fwrite("\x93NUMPY\x01\x00\xff\xff{", 1, 11, f); /* promises 65535 header bytes */
  fclose(f);
  fm_npy_header h;
  fm_err err;
  cr_assert_eq(fm_npy_read_header_path(path, &h, &err), FM_EFORMAT);
  cr_assert(strstr(err.msg, "exceeds the file"), "%s", err.msg);
  unlink(path);
}

Test(limits, npy_data_over_the_memory_limit) {
  char path[512];
  tmp_path(path, sizeof path, "overlimit.npy");
  int64_t shape[1] = {1 << 20};
  uint8_t *zero = calloc(1, 1 << 20);
  cr_assert_eq(fm_npy_save(path, FM_DT_U8, 1, shape, zero, NULL), FM_OK);
  free(zero);
  setenv("FMSIM_MEM_LIMIT", "64K", 1);
  fm_npy_header h;
  void *data = NULL;
  fm_err err;
  cr_assert_eq(fm_npy_load(path, &h, &data, (int64_t)1 << 30, &err), FM_ENOMEM);
  cr_assert(strstr(err.msg, "1.0 MiB") && strstr(err.msg, "64.0 KiB"), "%s", err.msg);
  unsetenv("FMSIM_MEM_LIMIT");
  unlink(path);
}

Test(limits, sample_count_beyond_the_file_is_refused) {
  /* issue 11: 76 bytes asking for 2^30 documents (48 GiB) */
  fm_sample_set s;
  fm_err err;
  cr_assert_eq(fm_samples_parse("Total length: 1073741824\n"
                                "Sample 1, num_docs 1073741824: [(0, 1)]# [0]\n",
                                "s.txt", &s, &err),
               FM_EFORMAT);
  cr_assert(strstr(err.msg, "s.txt:2: num_docs 1073741824 cannot fit"), "%s", err.msg);
  /* a count the text can hold still parses */
  cr_assert_eq(fm_samples_parse("Total length: 10\nSample 1, num_docs 2: [(0, 4), (1, 6)]# [0, 1]\n",
                                "s.txt", &s, &err),
               FM_OK, "%s", err.msg);
  fm_samples_free(&s);
}

/* issue 20: the limit was checked per allocation (10.5 GB used under 8.5 GB). */
Test(limits, the_limit_is_a_total_not_per_allocation) {
  setenv("FMSIM_MEM_LIMIT", "100K", 1);
  fm_colmask *a = NULL, *b = NULL;
  fm_err err;
  const int64_t held = fm_mem_reserved();
  cr_assert_eq(fm_colmask_create(64, 4096, 1, 1, 0, &a, &err), FM_OK, "%s", err.msg); /* 64 KiB */
  cr_assert_eq(fm_mem_reserved(), held + 65536);
  cr_assert_eq(fm_colmask_create(64, 4096, 1, 1, 0, &b, &err), FM_ENOMEM, "a second 64 KiB under 100K");
  cr_assert(strstr(err.msg, "64.0 KiB already reserved"), "%s", err.msg);
  cr_assert_eq(fm_mem_check(40 << 10, "40 KiB more", &err), FM_ENOMEM, "%s", err.msg);
  cr_assert_eq(fm_mem_check(30 << 10, "30 KiB more", &err), FM_OK, "%s", err.msg);
  fm_colmask_destroy(a); /* gives its 64 KiB back */
  cr_assert_eq(fm_mem_reserved(), held);
  cr_assert_eq(fm_colmask_create(64, 4096, 1, 1, 0, &b, &err), FM_OK, "%s", err.msg);
  fm_colmask_destroy(b);
  cr_assert_eq(fm_mem_reserved(), held);
  unsetenv("FMSIM_MEM_LIMIT");
}

/* issue 20: a malformed FMSIM_MEM_LIMIT was silently ignored. */
Test(limits, malformed_environment_is_an_error) {
  static const char *bad[] = {"12x", "", "-1", "lots", "4G ", "1.5G"};
  for (int i = 0; i < 6; i++) {
    setenv("FMSIM_MEM_LIMIT", bad[i], 1);
    fm_err err;
    cr_assert_eq(fm_mem_env_check(&err), FM_EINVAL, "'%s'", bad[i]);
    char want[64];
    snprintf(want, sizeof want, "FMSIM_MEM_LIMIT=%s: not a size", bad[i]);
    cr_assert(strstr(err.msg, want), "%s", err.msg);
    cr_assert_eq(fm_mem_check(10, "ten bytes", &err), FM_EINVAL, "'%s'", bad[i]);
    cr_assert_eq(fm_mem_check((int64_t)2 << 20, "2 MiB", &err), FM_EINVAL, "'%s'", bad[i]);
  }
  setenv("FMSIM_MEM_LIMIT", "4G", 1);
  cr_assert_eq(fm_mem_env_check(NULL), FM_OK);
  unsetenv("FMSIM_MEM_LIMIT");
  cr_assert_eq(fm_mem_env_check(NULL), FM_OK);
}

/* A [1, Sk] bool .npy header over a sparse file of zeros (no data written). */
static void wide_bool_npy(const char *path, int64_t sk) {
  char dict[128], hdr[128];
  int n = snprintf(dict, sizeof dict, "{'descr': '|b1', 'fortran_order': False, 'shape': (1, %lld), }",
                   (long long)sk);
  int pad = (64 - (10 + n + 1) % 64) % 64;
  int hlen = n + pad + 1;
  memcpy(hdr, "\x93NUMPY\x01\x00", 8);
  hdr[8] = (char)(hlen & 0xff);
  hdr[9] = (char)(hlen >> 8);
  memcpy(hdr + 10, dict, (size_t)n);
  memset(hdr + 10 + n, ' ', (size_t)pad);
  hdr[10 + n + pad] = '\n';
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  cr_assert_eq(fwrite(hdr, 1, (size_t)(10 + hlen), f), (size_t)(10 + hlen));
  fclose(f);
  cr_assert_eq(truncate(path, 10 + hlen + sk), 0);
}

/* issue 20: a [1, 2^29] bool mask grew to 22.8 GB: the scan state (about 50
 * bytes per key column) was allocated without a check. */
Test(limits, wide_dense_mask_is_refused_before_allocating) {
  char path[512];
  tmp_path(path, sizeof path, "wide.npy");
  wide_bool_npy(path, (int64_t)1 << 24); /* 16 MiB of data, 800 MiB of scan state */
  setenv("FMSIM_MEM_LIMIT", "256M", 1);
  fm_dense_result *r = NULL;
  fm_err err;
  fm_dense_opts o = {.br = 128, .bc = 128};
  cr_assert_eq(fm_dense_check_file(path, &o, &r, &err), FM_ENOMEM);
  cr_assert(strstr(err.msg, "wide.npy: the scan state of Sk = 16777216 key columns") &&
            strstr(err.msg, "FMSIM_MEM_LIMIT"), "%s", err.msg);
  cr_assert_null(r);
  cr_assert_eq(fm_mem_reserved(), 0, "a refusal gives back what it reserved");
  unsetenv("FMSIM_MEM_LIMIT");
  unlink(path);
}

/* issue 20: FIFO inputs blocked forever (open waited for a writer). */
Test(input, fifo_is_refused_at_once, .timeout = 20) {
  char path[512];
  tmp_path(path, sizeof path, "input.fifo");
  unlink(path);
  cr_assert_eq(mkfifo(path, 0600), 0);
  fm_err err;
  fm_npy_header h;
  void *data = NULL;
  cr_assert_eq(fm_npy_load(path, &h, &data, 1 << 20, &err), FM_EUNSUPPORTED);
  cr_assert(strstr(err.msg, "input.fifo: is a FIFO or pipe, not a regular file"), "%s", err.msg);
  cr_assert_eq(fm_npy_read_header_path(path, &h, &err), FM_EUNSUPPORTED);
  fm_dense_result *r = NULL;
  cr_assert_eq(fm_dense_check_file(path, NULL, &r, &err), FM_EUNSUPPORTED, "%s", err.msg);
  fm_jdoc *d = NULL;
  cr_assert_eq(fm_jdoc_load(path, &d, &err), FM_EUNSUPPORTED, "%s", err.msg);
  fm_sample_set s;
  cr_assert_eq(fm_samples_load(path, &s, &err), FM_EUNSUPPORTED, "%s", err.msg);
  fm_colmask *m = NULL;
  fm_intervals_opts lo = {.causal = 1};
  cr_assert_neq(fm_intervals_load(path, &lo, &m, NULL, &err), FM_OK);
  cr_assert(strstr(err.msg, "FIFO or pipe"), "%s", err.msg);
  unlink(path);
}

/* issue 20: a .npy on a pipe was refused as "too short to be a .npy file". */
Test(input, pipe_is_refused_with_what_it_is, .timeout = 20) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
  const char npy[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '|b1', 'fortran_order': False, "
                     "'shape': (1, 1), }";
  cr_assert(write(fds[1], npy, sizeof npy - 1) > 0);
  fm_dense_result *r = NULL;
  fm_err err;
  cr_assert_eq(fm_dense_check_file(path, NULL, &r, &err), FM_EUNSUPPORTED);
  cr_assert(strstr(err.msg, "is a FIFO or pipe, not a regular file; fmsim reads its inputs from "
                            "regular files"), "%s", err.msg);
  cr_assert_null(strstr(err.msg, "too short"));
  close(fds[0]);
  close(fds[1]);
}
