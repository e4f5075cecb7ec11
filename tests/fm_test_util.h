/* fm_test_util.h — helpers shared by the Criterion tests: random interval
 * masks, dense expansion by brute force, and running the fmsim binary. */
#ifndef FM_TEST_UTIL_H
#define FM_TEST_UTIL_H

#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fm_colmask.h"
#include "fm_families.h"
#include "fm_samples.h"
#include "fm_rng.h"
#include "fm_tile_rule.h"

/* A character device to aim "-o" at in tests of the output guard: "null" or
 * "full". Run as root, a regressed guard would rename a file over the
 * machine's /dev node, so root gets private nodes of the same devices in
 * dir; anyone else gets /dev/NAME (a rename there fails for them). */
static inline const char *fmt_devnode(const char *dir, const char *name, char *buf, size_t cap) {
  if (geteuid() != 0) {
    snprintf(buf, cap, "/dev/%s", name);
    return buf;
  }
  snprintf(buf, cap, "%s/dev-%s", dir, name);
  struct stat sb;
  if (stat(buf, &sb) != 0 || !S_ISCHR(sb.st_mode)) {
    char cmd[1200];
    unlink(buf);
    snprintf(cmd, sizeof cmd, "mknod '%s' c 1 %d 2>/dev/null", buf, strcmp(name, "full") == 0 ? 7 : 3);
    if (system(cmd) != 0 || stat(buf, &sb) != 0 || !S_ISCHR(sb.st_mode))
      snprintf(buf, cap, "/dev/%s", name); /* no CAP_MKNOD: the real node */
  }
  return buf;
}

/* A random valid mask: each interval empty, random, touching an edge or
 * non-canonically empty; causal masks keep UT attached to the triangle. */
static inline fm_colmask *fmt_random_mask(fm_rng *r, int32_t sq, int32_t sk, int32_t nb,
                                          int32_t nh, int causal) {
  fm_colmask *m = NULL;
  if (fm_colmask_create(sq, sk, nb, nh, causal, &m, NULL) != FM_OK) return NULL;
  for (int32_t s = 0; s < nb * nh; s++) {
    int32_t *v[4];
    for (int k = 0; k < 4; k++) v[k] = fm_colmask_vec(m, s, (fm_vec)k);
    for (int32_t j = 0; j < sk; j++) {
      for (int pair = 0; pair < 2; pair++) {
        int32_t a, b;
        switch (fm_rng_below(r, 5)) {
        case 0: a = b = (int32_t)fm_rng_below(r, (uint64_t)sq + 1); break; /* empty anywhere */
        case 1: a = 0; b = (int32_t)fm_rng_below(r, (uint64_t)sq + 1); break;
        case 2: a = (int32_t)fm_rng_below(r, (uint64_t)sq + 1); b = sq; break;
        default:
          a = (int32_t)fm_rng_below(r, (uint64_t)sq + 1);
          b = (int32_t)fm_rng_below(r, (uint64_t)sq + 1);
          if (a > b) { int32_t t = a; a = b; b = t; }
        }
        if (pair == 1 && causal && a < b && a > fm_causal_limit(j, sq, sk))
          a = (int32_t)fm_rng_below(r, (uint64_t)fm_causal_limit(j, sq, sk) + 1);
        v[pair * 2][j] = a;
        v[pair * 2 + 1][j] = b;
      }
    }
  }
  return m;
}

/* Dense expansion of one set by the definition: (Sq, Sk) bytes, 1 = masked. */
static inline uint8_t *fmt_dense(const fm_colmask *m, int32_t set) {
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  const int32_t *lts = fm_colmask_cvec(m, set, FM_LTS), *lte = fm_colmask_cvec(m, set, FM_LTE);
  const int32_t *uts = fm_colmask_cvec(m, set, FM_UTS), *ute = fm_colmask_cvec(m, set, FM_UTE);
  uint8_t *d = malloc((size_t)sq * (size_t)sk);
  for (int32_t i = 0; i < sq; i++)
    for (int32_t j = 0; j < sk; j++)
      d[(size_t)i * sk + j] = (i >= lts[j] && i < lte[j]) || (i >= uts[j] && i < ute[j]) ||
                              (fm_colmask_causal(m) && (int64_t)i < (int64_t)j + sq - sk);
  return d;
}

typedef struct fmt_result {
  int status;       /* exit code, or -1 when killed */
  char out[65536];  /* stdout */
  char err[8192];   /* stderr */
  int err_lines;    /* newline-terminated lines on stderr */
} fmt_result;

static inline void fmt_slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = 0;
  if (f) fclose(f);
}

/* Runs "FMSIM_BIN args" through the shell, capturing stdout and stderr. */
static inline void fmt_run(fmt_result *r, const char *args) {
  char cmd[8192], out_path[512], err_path[512];
  snprintf(out_path, sizeof out_path, "%s/run.%d.out", FM_TEST_TMP_DIR, (int)getpid());
  snprintf(err_path, sizeof err_path, "%s/run.%d.err", FM_TEST_TMP_DIR, (int)getpid());
  snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s </dev/null", FMSIM_BIN, args, out_path, err_path);
  int st = system(cmd);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  fmt_slurp(out_path, r->out, sizeof r->out);
  fmt_slurp(err_path, r->err, sizeof r->err);
  r->err_lines = 0;
  for (const char *p = r->err; *p; p++) r->err_lines += *p == '\n';
  unlink(out_path);
  unlink(err_path);
}

/* A family's mask (B = H = 1) with the built-in document samples, one
 * parameter "name=value" or none; NULL (the error on stderr) on failure. */
static inline fm_colmask *fmt_family(const char *name, int64_t seqlen, const char *param, uint64_t seed) {
  fm_sample_set samples;
  if (fm_samples_builtin(&samples, NULL) != FM_OK) return NULL;
  const char *params[1] = {param};
  fm_family_request req = {.family = name, .seqlen = seqlen, .batch = 1, .heads = 1, .seed = seed,
                           .sample = -1, .samples = &samples, .nparams = param ? 1 : 0, .params = params};
  fm_colmask *m = NULL;
  fm_err err;
  if (fm_family_build(&req, &m, NULL, &err) != FM_OK) fprintf(stderr, "%s: %s\n", name, err.msg);
  fm_samples_free(&samples);
  return m;
}

#endif
