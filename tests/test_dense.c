/* test_dense.c — dense masks: fm_dense (streaming analysis, conversion,
 * expansion) and the `fmsim check`, `fmsim convert`, `fmsim expand` commands.
 *
 * Every dense input is generated here, from code: family masks are expanded
 * with fm_colmask_masked and written with fm_npy_save (never with the code
 * under test); the masks that do not fit (dilated sliding window, 2D
 * neighbourhood, random) come from the generators below; malformed files are
 * written byte by byte. Expected figures (runs per column, misfits per form,
 * transposed fit) are recomputed here by brute force over the dense flags.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fm_colmask.h"
#include "fm_dense.h"
#include "fm_families.h"
#include "fm_forms.h"
#include "fm_intervals_io.h"
#include "fm_npy.h"
#include "fm_rng.h"
#include "fm_tile_rule.h"
#include "fm_tiles.h"

/* ---------------------------------------------------------------- helpers */

static const char *tmp(const char *name) {
  static char buf[8][1024];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, sizeof buf[0], "%s/dense_%s", FM_TEST_TMP_DIR, name);
  return b;
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (len) *len = 0;
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  size_t got = fread(b, 1, (size_t)n, f);
  fclose(f);
  b[got] = 0;
  if (len) *len = got;
  return b;
}

static int count_lines(const char *text) {
  int n = 0;
  for (const char *p = text; *p; p++) n += *p == '\n';
  return n;
}

/* Runs fmsim with `args`; stdout and stderr go to <tag>.out / <tag>.err. */
static int fmsim(const char *tag, const char *args, char **out, char **err) {
  char cmd[4096];
  const char *o = tmp(tag);
  snprintf(cmd, sizeof cmd, "\"%s\" %s >\"%s.out\" 2>\"%s.err\"", FMSIM_BIN, args, o, o);
  int st = system(cmd);
  char path[1100];
  snprintf(path, sizeof path, "%s.out", o);
  if (out) *out = slurp(path, NULL);
  snprintf(path, sizeof path, "%s.err", o);
  if (err) *err = slurp(path, NULL);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Top-level JSON members (the first occurrence of the key). */
static const char *json_at(const char *j, const char *key) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(j, pat);
  cr_assert(p, "key %s missing in %s", key, j);
  return p + strlen(pat);
}
static long long json_int(const char *j, const char *key) { return atoll(json_at(j, key)); }
static int json_bool(const char *j, const char *key) {
  const char *v = json_at(j, key);
  cr_assert(!strncmp(v, "true", 4) || !strncmp(v, "false", 5), "%s is not a bool", key);
  return v[0] == 't';
}
static int json_is_null(const char *j, const char *key) { return !strncmp(json_at(j, key), "null", 4); }
static void json_str(const char *j, const char *key, char *buf, size_t cap) {
  const char *v = json_at(j, key);
  buf[0] = 0;
  if (*v != '"') return;
  v++;
  size_t n = 0;
  while (*v && *v != '"' && n + 1 < cap) buf[n++] = *v++;
  buf[n] = 0;
}
/* The integers of a flat JSON array member. */
static int json_ints(const char *j, const char *key, long long *vals, int cap) {
  const char *p = json_at(j, key);
  cr_assert(*p == '[');
  int n = 0;
  for (p++; *p && *p != ']';) {
    if ((*p >= '0' && *p <= '9') || *p == '-') {
      char *end;
      long long v = strtoll(p, &end, 10);
      if (n < cap) vals[n] = v;
      n++;
      p = end;
    } else {
      p++;
    }
  }
  return n;
}

/* A dense mask as 0/1 flags, (nsets, Sq, Sk), 1 = masked. */
typedef struct dense {
  int64_t b, h, sq, sk;
  uint8_t *m;
} dense;

static dense dense_new(int64_t b, int64_t h, int64_t sq, int64_t sk) {
  dense d = {b, h, sq, sk, calloc((size_t)(b * h * sq * sk), 1)};
  return d;
}
static uint8_t *at(const dense *d, int64_t s, int64_t i, int64_t j) {
  return &d->m[(s * d->sq + i) * d->sk + j];
}

static dense dense_from_colmask(const fm_colmask *m, int64_t b, int64_t h) {
  dense d = dense_new(b, h, fm_colmask_sq(m), fm_colmask_sk(m));
  for (int32_t bi = 0; bi < b; bi++)
    for (int32_t hi = 0; hi < h; hi++) {
      int32_t set = fm_colmask_set_index(m, bi, hi);
      for (int32_t i = 0; i < d.sq; i++)
        for (int32_t j = 0; j < d.sk; j++)
          *at(&d, bi * h + hi, i, j) = (uint8_t)fm_colmask_masked(m, set, i, j);
    }
  return d;
}

/* Writes d with the encoding of dtype t (this test's own encoder): varied
 * non-zero values for attend, several masked spellings for additive masks;
 * soft (when non-NULL) counts the soft values written. */
static void dense_write(const dense *d, const char *path, fm_dtype t, int masked_true, int rank,
                        int canonical, int64_t *soft) {
  int64_t n = d->b * d->h * d->sq * d->sk, cnt = 0;
  int es = fm_dtype_size(t);
  uint8_t *buf = malloc((size_t)(n * es));
  for (int64_t e = 0; e < n; e++) {
    int msk = d->m[e], v = (int)(e % 5);
    int truth = masked_true ? msk : !msk; /* bool/integer value: non-zero or zero */
    switch (t) {
    case FM_DT_BOOL: buf[e] = (uint8_t)truth; break;
    case FM_DT_U8: buf[e] = truth ? (uint8_t)(canonical ? 1 : 1 + (e * 37) % 255) : 0; break;
    case FM_DT_I8: ((int8_t *)buf)[e] = truth ? (int8_t)(canonical ? 1 : (v & 1 ? -3 : 1)) : 0; break;
    case FM_DT_I32: ((int32_t *)buf)[e] = truth ? (canonical ? 1 : (int32_t)(1 + e % 1000) * (v & 1 ? -1 : 1)) : 0; break;
    case FM_DT_I64: ((int64_t *)buf)[e] = truth ? (canonical ? 1 : (int64_t)(1 + e % 1000) * (v & 1 ? -1 : 1) * ((int64_t)1 << 33)) : 0; break;
    case FM_DT_U64: ((uint64_t *)buf)[e] = truth ? (canonical ? 1 : (uint64_t)(1 + e % 1000) << (v * 12)) : 0; break;
    case FM_DT_F64: {
      static const double mk[5] = {-INFINITY, -1e4, -1.7976931348623157e308, -1e9, -INFINITY};
      double x = msk ? (canonical ? -INFINITY : mk[v]) : (!canonical && v == 3 ? -1.5 : 0.0);
      cnt += !msk && !canonical && v == 3;
      memcpy(buf + e * 8, &x, 8);
      break;
    }
    case FM_DT_F32: {
      static const float mk[5] = {-INFINITY, -1e4f, -3.4028235e38f, -1e9f, -INFINITY};
      float x = msk ? (canonical ? -INFINITY : mk[v]) : (!canonical && v == 3 ? -1.5f : 0.0f);
      cnt += !msk && !canonical && v == 3;
      memcpy(buf + e * 4, &x, 4);
      break;
    }
    case FM_DT_F16: { /* -inf, -10000, -65504 | 0, -0, soft -1.5, soft NaN */
      static const uint16_t mk[5] = {0xFC00, 0xF0E2, 0xFBFF, 0xFC00, 0xF0E2};
      static const uint16_t at_[5] = {0x0000, 0x8000, 0x0000, 0xBE00, 0x7E00};
      uint16_t x = msk ? (canonical ? 0xFC00 : mk[v]) : (canonical ? 0 : at_[v]);
      cnt += !msk && !canonical && (v == 3 || v == 4);
      memcpy(buf + e * 2, &x, 2);
      break;
    }
    case FM_DT_U16: { /* bfloat16: -inf, -9984 (= -1e4 rounded), min | 0, soft -1.5, soft -9920 */
      static const uint16_t mk[5] = {0xFF80, 0xC61C, 0xFF7F, 0xFF80, 0xC61C};
      static const uint16_t at_[5] = {0x0000, 0x0000, 0x0000, 0xBFC0, 0xC61B};
      uint16_t x = msk ? (canonical ? 0xFF80 : mk[v]) : (canonical ? 0 : at_[v]);
      cnt += !msk && !canonical && (v == 3 || v == 4);
      memcpy(buf + e * 2, &x, 2);
      break;
    }
    default: cr_assert_fail("dtype");
    }
  }
  int64_t shape[4];
  int nd = 0;
  if (rank == 4) shape[nd++] = d->b;
  if (rank >= 3) shape[nd++] = d->h;
  shape[nd++] = d->sq;
  shape[nd++] = d->sk;
  cr_assert(rank == 4 || (d->b == 1 && (rank == 3 || d->h == 1)));
  fm_err err;
  cr_assert_eq(fm_npy_save(path, t, nd, shape, buf, &err), FM_OK, "%s", err.msg);
  free(buf);
  if (soft) *soft = cnt;
}

/* Brute force over one column (or one row when by_row): runs of masked
 * elements; returns the count, fills the first three. */
static int brute_runs(const dense *d, int64_t s, int64_t line, int by_row, int32_t runs[3][2]) {
  int64_t len = by_row ? d->sk : d->sq;
  int n = 0, in = 0;
  for (int64_t k = 0; k <= len; k++) {
    int msk = k < len && *(by_row ? at(d, s, line, k) : at(d, s, k, line));
    if (msk && !in) {
      if (n < 3) runs[n][0] = (int32_t)k;
      in = 1;
    } else if (!msk && in) {
      if (n < 3) runs[n][1] = (int32_t)k;
      n++;
      in = 0;
    }
  }
  return n;
}

typedef struct expect {
  int max_runs, max_row_runs;
  unsigned fit, row_fit;
  int64_t misfits[FM_FORM_COUNT];
  int64_t first_bad[8]; /* columns, for the closest form */
  int nfirst;
  fm_form form, closest, transposed;
  int shared;
  int64_t empty_rows, masked_diag;
} expect;

static fm_form lowest(unsigned fit) {
  for (int f = 0; f < FM_FORM_COUNT; f++)
    if (fit & (1u << f)) return (fm_form)f;
  return FM_FORM_NONE;
}

static expect brute(const dense *d) {
  expect e;
  memset(&e, 0, sizeof e);
  e.fit = e.row_fit = 15;
  for (int64_t s = 0; s < d->b * d->h; s++) {
    for (int64_t j = 0; j < d->sk; j++) {
      int32_t r[3][2];
      int n = brute_runs(d, s, j, 0, r);
      if (n > e.max_runs) e.max_runs = n;
      unsigned fit = fm_runs_fit((const int32_t(*)[2])r, n > 3 ? 4 : n,
                                 fm_causal_limit((int32_t)j, (int32_t)d->sq, (int32_t)d->sk), (int32_t)d->sq);
      e.fit &= fit;
      for (int f = 0; f < FM_FORM_COUNT; f++) e.misfits[f] += !(fit & (1u << f));
    }
    for (int64_t i = 0; i < d->sq; i++) {
      int32_t r[3][2];
      int n = brute_runs(d, s, i, 1, r);
      e.empty_rows += n == 1 && r[0][0] == 0 && r[0][1] == d->sk;
      int64_t diag = i + d->sk - d->sq;
      if (diag >= 0 && diag < d->sk) e.masked_diag += *at(d, s, i, diag);
      if (n > e.max_row_runs) e.max_row_runs = n;
      e.row_fit &= fm_runs_fit((const int32_t(*)[2])r, n > 3 ? 4 : n,
                               fm_causal_limit((int32_t)i, (int32_t)d->sk, (int32_t)d->sq), (int32_t)d->sk);
    }
  }
  e.form = lowest(e.fit);
  e.transposed = lowest(e.row_fit);
  e.closest = e.form;
  if (e.form == FM_FORM_NONE) {
    e.closest = FM_FORM_BIDIR4;
    for (int f = FM_FORM_COUNT - 1; f >= 0; f--)
      if (e.misfits[f] < e.misfits[e.closest]) e.closest = (fm_form)f;
  }
  /* first misfit columns of the closest form, in scan order */
  for (int64_t s = 0; s < d->b * d->h && e.form == FM_FORM_NONE; s++)
    for (int64_t j = 0; j < d->sk && e.nfirst < 8; j++) {
      int32_t r[3][2];
      int n = brute_runs(d, s, j, 0, r);
      unsigned fit = fm_runs_fit((const int32_t(*)[2])r, n > 3 ? 4 : n,
                                 fm_causal_limit((int32_t)j, (int32_t)d->sq, (int32_t)d->sk), (int32_t)d->sq);
      if (!(fit & (1u << e.closest))) e.first_bad[e.nfirst++] = j;
    }
  e.shared = 1;
  for (int64_t b = 0; b < d->b; b++)
    for (int64_t h = 1; h < d->h; h++)
      if (memcmp(at(d, b * d->h + h, 0, 0), at(d, b * d->h, 0, 0), (size_t)(d->sq * d->sk))) e.shared = 0;
  return e;
}

static fm_colmask *family(const char *name, int64_t S, int64_t heads, const char *param) {
  const char *params[1] = {param};
  fm_family_request req = {name, S, 1, heads, 7, -1, NULL, param ? 1 : 0, params};
  fm_colmask *m = NULL;
  fm_err err;
  cr_assert_eq(fm_family_build(&req, &m, NULL, &err), FM_OK, "%s: %s", name, err.msg);
  return m;
}

static const fm_dense_report *check_lib(const char *path, int masked_true, fm_dense_result **res) {
  fm_dense_opts o = {.masked_true = masked_true, .keep_intervals = 1};
  fm_err err;
  cr_assert_eq(fm_dense_check_file(path, &o, res, &err), FM_OK, "%s", err.msg);
  return fm_dense_result_report(*res);
}

/* ------------------------------------------------------- the twelve families */

Test(dense, families_fit_their_form_and_convert_back) {
  const int64_t S = 64, H = 2;
  for (int k = 0; k < fm_family_count(); k++) {
    const fm_family_info *fam = fm_family_at(k);
    fm_colmask *m = family(fam->name, S, H, NULL);
    dense d = dense_from_colmask(m, 1, H);
    char name[128];
    snprintf(name, sizeof name, "fam_%s.npy", fam->name);
    const char *path = tmp(name);
    dense_write(&d, path, FM_DT_BOOL, 0, 4, 1, NULL);

    fm_dense_result *res = NULL;
    const fm_dense_report *r = check_lib(path, 0, &res);
    expect e = brute(&d);
    cr_assert_neq(r->form, FM_FORM_NONE, "%s is not representable", fam->name);
    fm_form stated = FM_FORM_NONE;
    if (strcmp(fam->form, "-") != 0) {
      fm_err err;
      cr_assert_eq(fm_form_parse(fam->form, &stated, &err), FM_OK);
      cr_assert(r->fit & (1u << stated), "%s: form %s of docs/FAMILIES.md does not hold it", fam->name, fam->form);
      cr_assert_leq(r->form, stated, "%s: found %s, larger than %s", fam->name, fm_form_name(r->form), fam->form);
    }
    cr_assert_eq(r->fit, e.fit, "%s: fit %x, brute force %x", fam->name, r->fit, e.fit);
    cr_assert_eq(r->max_runs, e.max_runs, "%s", fam->name);
    cr_assert_eq(r->row_fit, e.row_fit, "%s", fam->name);
    cr_assert_eq(r->max_row_runs, e.max_row_runs, "%s", fam->name);
    cr_assert_eq(r->bad_columns, 0);
    cr_assert_eq(r->shared_across_heads, fm_colmask_nh(m) == 1, "%s", fam->name);
    cr_assert_eq(r->shared_across_heads, e.shared, "%s", fam->name);
    cr_assert_eq(r->h_mask, e.shared ? 1 : H);
    int64_t masked = 0;
    for (int64_t q = 0; q < H * S * S; q++) masked += d.m[q];
    cr_assert_eq(r->masked, masked);
    cr_assert_eq(r->empty_rows, e.empty_rows, "%s", fam->name);
    cr_assert_eq(r->masked_diagonal, e.masked_diag, "%s", fam->name);

    /* back to intervals: the smallest form, the stated form, and bidir-4 when it fits */
    fm_form forms[3] = {FM_FORM_NONE, stated, FM_FORM_BIDIR4};
    for (int q = 0; q < 3; q++) {
      if (q > 0 && (forms[q] == FM_FORM_NONE || !(r->fit & (1u << forms[q])))) continue;
      fm_colmask *c = NULL;
      fm_err err;
      cr_assert_eq(fm_dense_result_to_colmask(res, forms[q], &c, &err), FM_OK, "%s: %s", fam->name, err.msg);
      cr_assert(fm_colmask_equal(m, c), "%s: converted mask differs (form %s)", fam->name, fm_form_name(forms[q]));
      cr_assert_eq(fm_colmask_nh(c), r->h_mask);
      cr_assert_eq(fm_colmask_validate(c, &err), FM_OK, "%s", err.msg);
      fm_colmask_destroy(c);
    }
    fm_dense_result_destroy(res);
    fm_colmask_destroy(m);
    free(d.m);
  }
}

/* convert then expand (with the options convert prints) gives back the bytes */
Test(dense, cli_convert_then_expand_is_exact) {
  const int64_t S = 48, H = 3;
  for (int k = 0; k < fm_family_count(); k++) {
    const fm_family_info *fam = fm_family_at(k);
    fm_colmask *m = family(fam->name, S, H, NULL);
    dense d = dense_from_colmask(m, 1, H);
    char name[128], args[4096], iv[1100], back[1100], exp_cmd[1024];
    snprintf(name, sizeof name, "rt_%s.npy", fam->name);
    char path[1024];
    snprintf(path, sizeof path, "%s", tmp(name));
    dense_write(&d, path, FM_DT_BOOL, 0, 3, 1, NULL); /* [H, Sq, Sk] */
    snprintf(iv, sizeof iv, "%s.iv.npy", path);
    snprintf(back, sizeof back, "%s.back.npy", path);
    unlink(back);
    snprintf(args, sizeof args, "convert \"%s\" -o \"%s\" --json", path, iv);
    char *out, *err;
    cr_assert_eq(fmsim("rt", args, &out, &err), 0, "%s: %s", fam->name, err);
    cr_assert(json_bool(out, "representable"));
    cr_assert_eq(json_bool(out, "causal"), fm_form_causal(lowest(brute(&d).fit)));
    json_str(out, "expand_command", exp_cmd, sizeof exp_cmd);
    /* "fmsim expand IV ... -o MASK.npy": run it with our binary and output */
    char *tail = strstr(exp_cmd, " -o MASK.npy");
    cr_assert(tail && !strncmp(exp_cmd, "fmsim expand ", 13), "%s", exp_cmd);
    *tail = 0;
    snprintf(args, sizeof args, "%s -o \"%s\"", exp_cmd + 6, back);
    free(out);
    free(err);
    cr_assert_eq(fmsim("rt2", args, &out, &err), 0, "%s: %s: %s", fam->name, args, err);
    size_t la = 0, lb = 1;
    char *a = slurp(path, &la), *b = slurp(back, &lb);
    cr_assert(b, "%s: no expanded file", fam->name);
    cr_assert(a && la == lb && !memcmp(a, b, la), "%s: expand(convert(mask)) differs from the mask", fam->name);
    /* and the interval file validates with the same verdict */
    snprintf(args, sizeof args, "check --json --intervals \"%s\" --%s", iv, fm_form_causal(lowest(brute(&d).fit)) ? "causal" : "bidir");
    free(out);
    free(err);
    cr_assert_eq(fmsim("rt3", args, &out, &err), 0, "%s: %s", fam->name, err);
    cr_assert(json_bool(out, "valid"));
    char form[32];
    json_str(out, "form", form, sizeof form);
    cr_assert_str_eq(form, fm_form_name(lowest(brute(&d).fit)));
    cr_assert_eq(json_bool(out, "shared_across_heads"), brute(&d).shared);
    cr_assert_eq(json_int(out, "max_runs"), brute(&d).max_runs);
    free(out);
    free(err);
    free(a);
    free(b);
    free(d.m);
    fm_colmask_destroy(m);
  }
}

/* --------------------------------------------------- dtypes, shapes, values */

Test(dense, every_dtype_shape_and_convention) {
  static const fm_dtype types[] = {FM_DT_BOOL, FM_DT_U8, FM_DT_I8,  FM_DT_I32, FM_DT_I64,
                                   FM_DT_U64,  FM_DT_F32, FM_DT_F64, FM_DT_F16, FM_DT_U16};
  fm_colmask *m = family("causal_document", 40, 1, "docs=17,9,14");
  fm_colmask *m2 = family("document", 40, 1, "docs=17,9,14");
  for (int shape = 2; shape <= 4; shape++)
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
      for (int mt = 0; mt < 2; mt++) {
        int additive = types[t] == FM_DT_F32 || types[t] == FM_DT_F64 || types[t] == FM_DT_F16 ||
                       types[t] == FM_DT_U16;
        if (mt && additive) continue;
        const fm_colmask *src = (t + (size_t)shape) % 2 ? m : m2;
        int64_t b = shape == 4 ? 2 : 1, h = shape >= 3 ? 2 : 1;
        dense d = dense_from_colmask(src, b, h);
        int64_t soft = 0;
        const char *path = tmp("dtype.npy");
        dense_write(&d, path, types[t], mt, shape, 0, &soft);
        fm_dense_result *res = NULL;
        const fm_dense_report *r = check_lib(path, mt, &res);
        expect e = brute(&d);
        cr_assert_eq(r->dtype, types[t]);
        cr_assert_eq(r->ndim, shape);
        cr_assert_eq(r->batch, b);
        cr_assert_eq(r->heads, h);
        cr_assert_eq(r->form, e.form, "dtype %s shape %d mt %d: %s vs %s", fm_dense_dtype_name(types[t]), shape,
                     mt, fm_form_name(r->form), fm_form_name(e.form));
        cr_assert_eq(r->form, src == m ? FM_FORM_CAUSAL1 : FM_FORM_BIDIR2);
        cr_assert_eq(r->soft_values, soft, "dtype %s: %lld soft values, wrote %lld",
                     fm_dense_dtype_name(types[t]), (long long)r->soft_values, (long long)soft);
        if (additive) cr_assert_gt(soft, 0);
        cr_assert(r->shared_across_heads);
        fm_colmask *c = NULL;
        fm_err err;
        cr_assert_eq(fm_dense_result_to_colmask(res, FM_FORM_NONE, &c, &err), FM_OK, "%s", err.msg);
        cr_assert(fm_colmask_equal(src, c), "dtype %s shape %d", fm_dense_dtype_name(types[t]), shape);
        cr_assert_eq(fm_colmask_nb(c), b);
        cr_assert_eq(fm_colmask_nh(c), 1);
        fm_colmask_destroy(c);
        fm_dense_result_destroy(res);
        /* the opposite convention reads the complement, which is another mask */
        if (!additive) {
          r = check_lib(path, !mt, &res);
          int64_t masked = 0;
          for (int64_t q = 0; q < b * h * 40 * 40; q++) masked += d.m[q];
          cr_assert_eq(r->masked, b * h * 40 * 40 - masked);
          fm_dense_result_destroy(res);
        }
        free(d.m);
      }
  fm_colmask_destroy(m);
  fm_colmask_destroy(m2);
}

/* CLI round trip is exact for canonical values of every dtype, and --masked-true */
Test(dense, cli_roundtrip_dtypes) {
  static const fm_dtype types[] = {FM_DT_BOOL, FM_DT_U8, FM_DT_I8,  FM_DT_I32, FM_DT_I64,
                                   FM_DT_U64,  FM_DT_F32, FM_DT_F64, FM_DT_F16, FM_DT_U16};
  fm_colmask *m = family("global_sliding_window", 32, 1, NULL);
  dense d = dense_from_colmask(m, 1, 1);
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    for (int mt = 0; mt < 2; mt++) {
      int additive = types[t] == FM_DT_F32 || types[t] == FM_DT_F64 || types[t] == FM_DT_F16 ||
                     types[t] == FM_DT_U16;
      if (mt && additive) continue;
      char path[1024], iv[1100], back[1100], args[4096], exp_cmd[1024];
      snprintf(path, sizeof path, "%s", tmp("rtd.npy"));
      snprintf(iv, sizeof iv, "%s.iv.npy", path);
      snprintf(back, sizeof back, "%s.back.npy", path);
      dense_write(&d, path, types[t], mt, 2, 1, NULL);
      snprintf(args, sizeof args, "convert \"%s\" -o \"%s\" --json%s", path, iv, mt ? " --masked-true" : "");
      char *out, *err;
      cr_assert_eq(fmsim("rtd", args, &out, &err), 0, "%s", err);
      json_str(out, "expand_command", exp_cmd, sizeof exp_cmd);
      char form[32];
      json_str(out, "form", form, sizeof form);
      cr_assert_str_eq(form, "bidir-4");
      *strstr(exp_cmd, " -o MASK.npy") = 0;
      snprintf(args, sizeof args, "%s -o \"%s\"", exp_cmd + 6, back);
      free(out);
      free(err);
      cr_assert_eq(fmsim("rtd2", args, &out, &err), 0, "%s: %s", args, err);
      size_t la = 0, lb = 1;
      char *a = slurp(path, &la), *b = slurp(back, &lb);
      cr_assert(a && b && la == lb && !memcmp(a, b, la), "dtype %s masked_true %d: not the same bytes",
                fm_dense_dtype_name(types[t]), mt);
      free(a);
      free(b);
      free(out);
      free(err);
    }
  free(d.m);
  fm_colmask_destroy(m);
}

/* Sq != Sk: the causal triangle is aligned bottom-right */
Test(dense, unequal_lengths) {
  int64_t dims[2][2] = {{24, 56}, {56, 24}};
  for (int q = 0; q < 2; q++) {
    int64_t sq = dims[q][0], sk = dims[q][1];
    fm_colmask *m = NULL;
    fm_err err;
    cr_assert_eq(fm_colmask_create(sq, sk, 1, 1, 1, &m, &err), FM_OK);
    int32_t *lts = fm_colmask_vec(m, 0, FM_LTS);
    for (int32_t j = 0; j < sk; j++) {
      int32_t c = fm_causal_limit(j, (int32_t)sq, (int32_t)sk);
      lts[j] = c + 3 + j % 4 < sq ? c + 3 + j % 4 : (int32_t)sq;
    }
    dense d = dense_from_colmask(m, 1, 1);
    const char *path = tmp("uneq.npy");
    dense_write(&d, path, FM_DT_BOOL, 0, 2, 1, NULL);
    fm_dense_result *res = NULL;
    const fm_dense_report *r = check_lib(path, 0, &res);
    cr_assert_eq(r->form, FM_FORM_CAUSAL1, "Sq %lld Sk %lld: %s", (long long)sq, (long long)sk, fm_form_name(r->form));
    cr_assert_eq(r->row_fit, brute(&d).row_fit);
    fm_colmask *c = NULL;
    cr_assert_eq(fm_dense_result_to_colmask(res, FM_FORM_CAUSAL1, &c, &err), FM_OK, "%s", err.msg);
    cr_assert(fm_colmask_equal(m, c));
    fm_colmask_destroy(c);
    fm_dense_result_destroy(res);
    fm_colmask_destroy(m);
    free(d.m);
  }
}

/* -------------------------------------------------- masks that do not fit */

/* Dilated sliding window (causal): row i sees keys i, i-2, i-4, ... (w of them). */
static dense gen_dilated(int64_t S, int64_t w) {
  dense d = dense_new(1, 1, S, S);
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) {
      int64_t k = i - j;
      *at(&d, 0, i, j) = !(k >= 0 && k % 2 == 0 && k / 2 < w);
    }
  return d;
}

/* 2D neighbourhood: tokens on a g x g grid (row-major), each sees its 3 x 3 neighbours. */
static dense gen_neighbourhood(int64_t g) {
  int64_t S = g * g;
  dense d = dense_new(1, 1, S, S);
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) {
      int64_t dy = i / g - j / g, dx = i % g - j % g;
      *at(&d, 0, i, j) = !(dy >= -1 && dy <= 1 && dx >= -1 && dx <= 1);
    }
  return d;
}

static dense gen_random(int64_t b, int64_t h, int64_t sq, int64_t sk, uint64_t seed) {
  dense d = dense_new(b, h, sq, sk);
  fm_rng rng;
  fm_rng_seed(&rng, seed, 0);
  for (int64_t q = 0; q < b * h * sq * sk; q++) d.m[q] = (uint8_t)(fm_rng_next(&rng) >> 63);
  return d;
}

/* Every masked run of column j of set s (up to cap); returns the count. */
static int all_runs(const dense *d, int64_t s, int64_t j, int32_t (*runs)[2], int cap) {
  int n = 0, in = 0;
  for (int64_t i = 0; i <= d->sq; i++) {
    int msk = i < d->sq && *at(d, s, i, j);
    if (msk && !in && n < cap) runs[n][0] = (int32_t)i;
    if (!msk && in && n < cap) runs[n++][1] = (int32_t)i;
    in = msk;
  }
  return n;
}

/* The library's advice, kept runs, sub-mask and exact tiles against brute force
 * over the dense flags (Br x Bc = 7 x 5, uneven on purpose). */
static void check_advice(const dense *d, const char *path) {
  fm_dense_opts o = {.keep_intervals = 1, .br = 7, .bc = 5, .keep_tiles = 1, .keep_all_runs = 1};
  fm_dense_result *res = NULL;
  fm_err err;
  cr_assert_eq(fm_dense_check_file(path, &o, &res, &err), FM_OK, "%s", err.msg);
  const fm_dense_report *r = fm_dense_result_report(res);
  const int32_t *every = NULL;
  const int64_t *start = fm_dense_result_all_runs(res, &every);
  cr_assert(start && every, "keep_all_runs keeps the runs");
  fm_colmask *sub = NULL;
  cr_assert_eq(fm_dense_result_subset_colmask(res, &sub, &err), FM_OK, "%s", err.msg);
  int64_t hist[FM_DENSE_RUNS_HIST] = {0}, prefix = d->sq, sub_masked = 0, sets_fit = 0, total_runs = 0;
  int32_t (*runs)[2] = malloc((size_t)d->sq * sizeof *runs);
  for (int64_t s = 0; s < d->b * d->h; s++) {
    unsigned set_fit = 15;
    for (int64_t j = 0; j < d->sk; j++) {
      int n = all_runs(d, s, j, runs, (int)d->sq);
      hist[n < FM_DENSE_RUNS_HIST - 1 ? n : FM_DENSE_RUNS_HIST - 1]++;
      if (n >= 3 && runs[2][0] < prefix) prefix = runs[2][0];
      unsigned fit = fm_runs_fit((const int32_t(*)[2])runs, n > 3 ? 4 : n,
                                 fm_causal_limit((int32_t)j, (int32_t)d->sq, (int32_t)d->sk), (int32_t)d->sq);
      set_fit &= fit;
      /* every run, in row order, as the brute force sees it */
      int64_t c0 = start[s * d->sk + j], c1 = start[s * d->sk + j + 1];
      total_runs += n;
      cr_assert_eq(c1 - c0, n, "set %lld column %lld: %lld runs kept, %d", (long long)s,
                   (long long)j, (long long)(c1 - c0), n);
      for (int k = 0; k < n; k++)
        cr_assert(every[2 * (c0 + k)] == runs[k][0] && every[2 * (c0 + k) + 1] == runs[k][1],
                  "set %lld column %lld run %d", (long long)s, (long long)j, k);
      fm_dense_column c;
      unsigned got_fit;
      cr_assert_eq(fm_dense_result_column(res, s / d->h, s % d->h, j, &c, &got_fit, &err), FM_OK);
      cr_assert_eq(c.nruns, n, "set %lld column %lld", (long long)s, (long long)j);
      cr_assert_eq(got_fit, fit);
      for (int k = 0; k < n && k < 3; k++)
        cr_assert(c.runs[k][0] == runs[k][0] && c.runs[k][1] == runs[k][1]);
      /* the two longest runs (ties: the earlier) are the sub-mask's column */
      int a = -1, b = -1;
      for (int k = 0; k < n; k++) {
        int32_t len = runs[k][1] - runs[k][0];
        if (a < 0 || len > runs[a][1] - runs[a][0]) { b = a; a = k; }
        else if (b < 0 || len > runs[b][1] - runs[b][0]) b = k;
      }
      int32_t sr[3][2];
      int sn = fm_colmask_column_runs(sub, fm_colmask_set_index(sub, (int32_t)(s / d->h), (int32_t)(s % d->h)),
                                      (int32_t)j, sr);
      cr_assert_eq(sn, n < 2 ? n : 2, "sub-mask column %lld: %d runs", (long long)j, sn);
      int lo = a < b || b < 0 ? a : b, hi = a < b || b < 0 ? b : a;
      if (sn >= 1) cr_assert(sr[0][0] == runs[lo][0] && sr[0][1] == runs[lo][1]);
      if (sn == 2) cr_assert(sr[1][0] == runs[hi][0] && sr[1][1] == runs[hi][1]);
      for (int k = 0; k < sn; k++) sub_masked += sr[k][1] - sr[k][0];
    }
    sets_fit += set_fit != 0;
  }
  free(runs);
  for (int k = 0; k < FM_DENSE_RUNS_HIST; k++) cr_assert_eq(r->advice.runs_hist[k], hist[k], "hist %d", k);
  cr_assert_eq(r->advice.prefix_rows, prefix);
  cr_assert_eq(r->advice.subset_masked, sub_masked);
  cr_assert_eq(r->advice.sets_fit, sets_fit);
  cr_assert_eq(start[d->b * d->h * d->sk], total_runs, "the index ends at the count of runs");
  /* exact tiles: brute force over every set, and the kept classes */
  const uint8_t *tiles = fm_dense_result_tiles(res);
  cr_assert_not_null(tiles);
  int64_t tr = (d->sq + 6) / 7, tc = (d->sk + 4) / 5, cnt[3] = {0, 0, 0};
  cr_assert(r->tiles.tr == tr && r->tiles.tc == tc && r->tiles.total == d->b * d->h * tr * tc);
  for (int64_t s = 0; s < d->b * d->h; s++)
    for (int64_t ti = 0; ti < tr; ti++)
      for (int64_t tj = 0; tj < tc; tj++) {
        int64_t m = 0, n = 0;
        for (int64_t i = ti * 7; i < d->sq && i < ti * 7 + 7; i++)
          for (int64_t j = tj * 5; j < d->sk && j < tj * 5 + 5; j++, n++) m += *at(d, s, i, j);
        int cls = m == n ? FM_TILE_MASKED : m == 0 ? FM_TILE_UNMASKED : FM_TILE_PARTIAL;
        cnt[cls]++;
        cr_assert_eq(tiles[(s * tr + ti) * tc + tj], cls, "tile (%lld, %lld, %lld)", (long long)s,
                     (long long)ti, (long long)tj);
      }
  for (int c = 0; c < 3; c++) cr_assert_eq(r->tiles.count[c], cnt[c]);
  cr_assert_float_eq(r->tiles.sparsity, (double)cnt[0] / (double)r->tiles.total, 1e-12);
  fm_colmask_destroy(sub);
  fm_dense_result_destroy(res);
}

static void check_nonfitting(dense *d, const char *tag) {
  char path[1024], iv[1100], args[3000];
  snprintf(path, sizeof path, "%s", tmp(tag));
  snprintf(iv, sizeof iv, "%s.iv.npy", path);
  unlink(iv);
  dense_write(d, path, FM_DT_BOOL, 0, d->b == 1 && d->h == 1 ? 2 : 4, 1, NULL);
  expect e = brute(d);
  cr_assert_eq(e.form, FM_FORM_NONE, "%s: the generator made a mask that fits", tag);
  char *out, *err;
  snprintf(args, sizeof args, "check --json \"%s\"", path);
  cr_assert_eq(fmsim(tag, args, &out, &err), 1, "%s: %s", tag, err);
  cr_assert_str_empty(err);
  cr_assert_not(json_bool(out, "representable"));
  cr_assert(json_is_null(out, "form"));
  cr_assert_eq(json_int(out, "max_runs"), e.max_runs, "%s: max_runs %lld, brute force %d", tag,
               json_int(out, "max_runs"), e.max_runs);
  cr_assert_eq(json_int(out, "bad_columns"), e.misfits[e.closest], "%s", tag);
  cr_assert_gt(json_int(out, "bad_columns"), 0);
  char closest[32];
  json_str(out, "closest_form", closest, sizeof closest);
  cr_assert_str_eq(closest, fm_form_name(e.closest));
  long long cols[16];
  int n = json_ints(out, "first_bad_columns", cols, 16);
  cr_assert_eq(n, e.nfirst, "%s", tag);
  for (int k = 0; k < n; k++) cr_assert_eq(cols[k], e.first_bad[k], "%s: bad column %d", tag, k);
  cr_assert_eq(json_bool(out, "transposed_fits"), e.transposed != FM_FORM_NONE, "%s", tag);
  cr_assert_eq(json_int(out, "max_row_runs"), e.max_row_runs, "%s", tag);
  cr_assert_eq(json_bool(out, "shared_across_heads"), e.shared, "%s", tag);
  cr_assert(strstr(out, "\"prefix_rows_fit\": ") && strstr(out, "\"element_mask_fraction\": "), "%s", tag);
  free(out);
  free(err);
  check_advice(d, path);
  /* convert refuses: exit 1, the report on stdout, one line on stderr, no file */
  snprintf(args, sizeof args, "convert \"%s\" -o \"%s\"", path, iv);
  cr_assert_eq(fmsim(tag, args, &out, &err), 1, "%s", tag);
  cr_assert_eq(count_lines(err), 1, "%s: stderr: %s", tag, err);
  cr_assert(strstr(out, "DOES NOT FIT"));
  cr_assert_not(exists(iv));
  free(out);
  free(err);
}

Test(dense, dilated_sliding_window_does_not_fit) {
  dense d = gen_dilated(64, 4);
  check_nonfitting(&d, "dilated.npy");
  expect e = brute(&d);
  /* by the definition: column j is seen by rows j, j+2, j+4, j+6, so its masked
   * rows are [0, j), j+1, j+3, j+5 and [j+7, S): five runs */
  cr_assert_eq(e.max_runs, 5);
  free(d.m);
}

Test(dense, neighbourhood_2d_does_not_fit) {
  dense d = gen_neighbourhood(8);
  check_nonfitting(&d, "nbhd.npy");
  free(d.m);
}

Test(dense, random_does_not_fit) {
  dense d = gen_random(1, 1, 50, 70, 11);
  check_nonfitting(&d, "random.npy");
  dense d2 = gen_random(2, 3, 20, 30, 12);
  check_nonfitting(&d2, "random4.npy");
  free(d.m);
  free(d2.m);
}

/* ---------------------------------------------------------------- heads */

Test(dense, shared_heads_detection) {
  /* identical random heads (many runs per column: the hash path) are shared */
  dense d = gen_random(2, 3, 40, 24, 5);
  for (int64_t b = 0; b < 2; b++)
    for (int64_t h = 1; h < 3; h++) memcpy(at(&d, b * 3 + h, 0, 0), at(&d, b * 3, 0, 0), 40 * 24);
  const char *path = tmp("heads.npy");
  dense_write(&d, path, FM_DT_BOOL, 0, 4, 1, NULL);
  fm_dense_result *res;
  const fm_dense_report *r = check_lib(path, 0, &res);
  cr_assert(r->shared_across_heads);
  cr_assert_eq(r->h_mask, 1);
  fm_dense_result_destroy(res);
  /* one element deep in one column of one head (past the kept transitions) */
  *at(&d, 1 * 3 + 2, 37, 9) ^= 1;
  dense_write(&d, path, FM_DT_BOOL, 0, 4, 1, NULL);
  r = check_lib(path, 0, &res);
  cr_assert_not(r->shared_across_heads);
  cr_assert_eq(r->h_mask, 3);
  cr_assert(r->sets[3].same_as_head0);
  cr_assert(r->sets[4].same_as_head0);
  cr_assert_not(r->sets[5].same_as_head0);
  fm_dense_result_destroy(res);
  free(d.m);
  /* structured heads that differ in one column convert per head */
  fm_colmask *m = family("causal_document", 32, 1, "docs=10,12,10");
  dense s = dense_from_colmask(m, 1, 2);
  *at(&s, 1, 31, 3) = 0; /* head 1: key 3 visible to the last row as well */
  dense_write(&s, path, FM_DT_BOOL, 0, 3, 1, NULL);
  r = check_lib(path, 0, &res);
  cr_assert_not(r->shared_across_heads);
  cr_assert_eq(r->form, FM_FORM_CAUSAL2);
  fm_colmask *c;
  fm_err err;
  cr_assert_eq(fm_dense_result_to_colmask(res, FM_FORM_NONE, &c, &err), FM_OK, "%s", err.msg);
  cr_assert_eq(fm_colmask_nh(c), 2);
  cr_assert_eq(fm_colmask_masked(c, 1, 31, 3), 0);
  cr_assert_eq(fm_colmask_masked(c, 0, 31, 3), 1);
  cr_assert(fm_colmask_equal(m, c) == 0);
  fm_colmask_destroy(c);
  fm_dense_result_destroy(res);
  fm_colmask_destroy(m);
  free(s.m);
}

/* the streaming API gives what the file path gives */
Test(dense, scan_api_matches_file) {
  dense d = gen_dilated(40, 3);
  const char *path = tmp("scan.npy");
  dense_write(&d, path, FM_DT_BOOL, 0, 2, 1, NULL);
  fm_dense_result *a, *b;
  const fm_dense_report *ra = check_lib(path, 0, &a);
  fm_dense_scan *s;
  fm_err err;
  fm_dense_opts o = {0};
  cr_assert_eq(fm_dense_scan_create(1, 1, 40, 40, &o, &s, &err), FM_OK);
  for (int i = 0; i < 40; i++) fm_dense_scan_row(s, at(&d, 0, i, 0));
  cr_assert_eq(fm_dense_scan_finish(s, &b, &err), FM_OK, "%s", err.msg);
  const fm_dense_report *rb = fm_dense_result_report(b);
  cr_assert_eq(ra->fit, rb->fit);
  cr_assert_eq(ra->max_runs, rb->max_runs);
  cr_assert_eq(ra->bad_columns, rb->bad_columns);
  cr_assert_eq(ra->row_fit, rb->row_fit);
  cr_assert_eq(ra->masked, rb->masked);
  fm_dense_result_destroy(a);
  fm_dense_result_destroy(b);
  /* too few rows is an error */
  cr_assert_eq(fm_dense_scan_create(1, 1, 40, 40, &o, &s, &err), FM_OK);
  fm_dense_scan_row(s, at(&d, 0, 0, 0));
  cr_assert_neq(fm_dense_scan_finish(s, &b, &err), FM_OK);
  cr_assert_null(b);
  free(d.m);
}

/* docs/FAMILIES.md, "Known traps": LTS_j = j, LTE_j = end(doc(j)) for a causal
 * document mask masks the diagonal; the checker must say so, on the interval
 * file and densely. */
Test(dense, masked_diagonal_trap) {
  const int32_t S = 30, ends[3] = {12, 21, 30};
  fm_colmask *wrong = NULL;
  fm_err err;
  cr_assert_eq(fm_colmask_create(S, S, 1, 1, 1, &wrong, &err), FM_OK);
  for (int32_t j = 0; j < S; j++) {
    fm_colmask_vec(wrong, 0, FM_LTS)[j] = j;
    fm_colmask_vec(wrong, 0, FM_LTE)[j] = ends[j < 12 ? 0 : j < 21 ? 1 : 2];
  }
  fm_colmask *right = family("causal_document", S, 1, "docs=12,9,9");
  const fm_colmask *masks[2] = {wrong, right};
  for (int q = 0; q < 2; q++) {
    dense d = dense_from_colmask(masks[q], 1, 1);
    expect e = brute(&d);
    cr_assert_eq(e.masked_diag, q == 0 ? S : 0); /* by construction */
    char iv[1024], dn[1024], args[2200];
    snprintf(iv, sizeof iv, "%s", tmp(q ? "diag_right_iv.npy" : "diag_wrong_iv.npy"));
    snprintf(dn, sizeof dn, "%s", tmp(q ? "diag_right.npy" : "diag_wrong.npy"));
    cr_assert_eq(fm_colmask_save_npy(masks[q], iv, FM_FORM_NONE, NULL, &err), FM_OK, "%s", err.msg);
    dense_write(&d, dn, FM_DT_BOOL, 0, 2, 1, NULL);
    for (int k = 0; k < 2; k++) {
      char *out, *er;
      if (k == 0) snprintf(args, sizeof args, "check --json --intervals \"%s\" --causal", iv);
      else snprintf(args, sizeof args, "check --json \"%s\"", dn);
      cr_assert_eq(fmsim("diag", args, &out, &er), 0, "%s", er);
      cr_assert_eq(json_int(out, "masked_diagonal"), e.masked_diag);
      cr_assert_eq(json_int(out, "rows_without_visible_key"), e.empty_rows);
      free(out);
      free(er);
    }
    if (q == 0) cr_assert_gt(e.empty_rows, 0); /* the first document sees nothing */
    free(d.m);
  }
  fm_colmask_destroy(wrong);
  fm_colmask_destroy(right);
}

/* ------------------------------------------------------------ bad input */

/* Writes a .npy with a literal header dict and `nbytes` data bytes of value v. */
static void write_raw(const char *path, const char *dict, size_t nbytes, int v, const char *magic) {
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  int len = (int)strlen(dict), pad = (64 - (10 + len + 1) % 64) % 64, hlen = len + pad + 1;
  fwrite(magic, 1, 6, f);
  unsigned char ver[4] = {1, 0, (unsigned char)(hlen & 255), (unsigned char)(hlen >> 8)};
  fwrite(ver, 1, 4, f);
  fwrite(dict, 1, (size_t)len, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  for (size_t i = 0; i < nbytes; i++) fputc(v, f);
  fclose(f);
}

static int no_leftovers(const char *out) {
  /* neither the output nor a temporary beside it */
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "ls \"%s\"* >/dev/null 2>&1", out);
  return system(cmd) != 0;
}

/* Runs fmsim; asserts exit code, exactly one stderr line (containing `what`), no output. */
static void expect_bad(const char *args, int code, const char *what, const char *out_path) {
  char *out, *err, tag[32];
  snprintf(tag, sizeof tag, "bad%d", (int)getpid()); /* tests run in parallel processes */
  int rc = fmsim(tag, args, &out, &err);
  cr_assert_eq(rc, code, "fmsim %s: exit %d, expected %d (stderr: %s)", args, rc, code, err);
  cr_assert_eq(count_lines(err), 1, "fmsim %s: stderr has %d lines: %s", args, count_lines(err), err);
  cr_assert(strncmp(err, "fmsim ", 6) == 0, "%s", err);
  if (what) cr_assert(strstr(err, what), "fmsim %s: '%s' not in: %s", args, what, err);
  if (out_path) cr_assert(no_leftovers(out_path), "fmsim %s left %s behind", args, out_path);
  free(out);
  free(err);
}

Test(dense, bad_inputs) {
  char good[1024], iv[1024], p[1024], out[1024], args[4096];
  snprintf(out, sizeof out, "%s", tmp("bad_out.npy"));
  unlink(out);
  /* a good mask and its interval file */
  fm_colmask *m = family("document", 32, 1, "docs=10,12,10");
  dense d = dense_from_colmask(m, 1, 1);
  snprintf(good, sizeof good, "%s", tmp("good.npy"));
  dense_write(&d, good, FM_DT_BOOL, 0, 2, 1, NULL);
  snprintf(iv, sizeof iv, "%s", tmp("good_iv.npy"));
  fm_err err;
  cr_assert_eq(fm_colmask_save_npy(m, iv, FM_FORM_NONE, NULL, &err), FM_OK);

  struct {
    const char *name, *dict;
    size_t bytes;
    const char *magic, *what;
  } cases[] = {
      {"truncated", "{'descr': '|b1', 'fortran_order': False, 'shape': (32, 32), }", 1000, "\x93NUMPY", "truncated"},
      {"magic", "{'descr': '|b1', 'fortran_order': False, 'shape': (4, 4), }", 16, "\x93NUMPX", "magic"},
      {"dtype_u4", "{'descr': '<u4', 'fortran_order': False, 'shape': (4, 4), }", 64, "\x93NUMPY", "dtype"},
      {"dtype_c8", "{'descr': '<c8', 'fortran_order': False, 'shape': (4, 4), }", 128, "\x93NUMPY", "dtype"},
      {"dtype_c16", "{'descr': '<c16', 'fortran_order': False, 'shape': (4, 4), }", 256, "\x93NUMPY", "dtype"},
      {"bigendian", "{'descr': '>i4', 'fortran_order': False, 'shape': (4, 4), }", 64, "\x93NUMPY", "big-endian"},
      {"fortran", "{'descr': '|b1', 'fortran_order': True, 'shape': (4, 4), }", 16, "\x93NUMPY", "Fortran"},
      {"rank1", "{'descr': '|b1', 'fortran_order': False, 'shape': (16,), }", 16, "\x93NUMPY", "dimension"},
      {"rank5", "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 1, 1, 4, 4), }", 16, "\x93NUMPY", "dimensions"},
      {"sq0", "{'descr': '|b1', 'fortran_order': False, 'shape': (0, 8), }", 0, "\x93NUMPY", "Sq = 0"},
      {"sk0", "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2, 8, 0), }", 0, "\x93NUMPY", "Sk = 0"},
      {"h0", "{'descr': '|b1', 'fortran_order': False, 'shape': (0, 8, 8), }", 0, "\x93NUMPY", "H = 0"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char name[64];
    snprintf(name, sizeof name, "bad_%s.npy", cases[k].name);
    snprintf(p, sizeof p, "%s", tmp(name));
    write_raw(p, cases[k].dict, cases[k].bytes, 1, cases[k].magic);
    snprintf(args, sizeof args, "check \"%s\"", p);
    expect_bad(args, 2, cases[k].what, NULL);
    snprintf(args, sizeof args, "check --json \"%s\"", p);
    expect_bad(args, 2, cases[k].what, NULL);
    snprintf(args, sizeof args, "convert \"%s\" -o \"%s\"", p, out);
    expect_bad(args, 2, cases[k].what, out);
  }
  /* an interval file given as a mask, and a mask given as an interval file */
  snprintf(args, sizeof args, "check \"%s\"", iv);
  expect_bad(args, 2, "interval file", NULL);
  snprintf(args, sizeof args, "convert \"%s\" -o \"%s\"", iv, out);
  expect_bad(args, 2, "interval file", out);
  snprintf(args, sizeof args, "check --intervals \"%s\" --bidir", good);
  expect_bad(args, 2, "dense mask", NULL);
  snprintf(args, sizeof args, "expand \"%s\" --bidir -o \"%s\"", good, out);
  expect_bad(args, 2, "dense mask", out);
  /* an interval file with the wrong causal flag (bidir-4 has k = 4) */
  snprintf(p, sizeof p, "%s", tmp("good_iv4.npy"));
  cr_assert_eq(fm_colmask_save_npy(m, p, FM_FORM_BIDIR4, NULL, &err), FM_OK);
  snprintf(args, sizeof args, "expand \"%s\" --causal -o \"%s\"", p, out);
  expect_bad(args, 2, "bidir-4", out);
  snprintf(args, sizeof args, "check --intervals \"%s\" --causal", p);
  expect_bad(args, 2, "bidir-4", NULL);
  /* an out-of-range interval: invalid content under --strict (Paddle reads it as Sq) */
  snprintf(p, sizeof p, "%s", tmp("bad_range.npy"));
  {
    int32_t v[8] = {3, 0, 9, 2, 40, 1, 5, 5}; /* [1, 1, 4, 2] bidir-2: LTS=40 > Sq */
    int64_t shape[4] = {1, 1, 4, 2};
    cr_assert_eq(fm_npy_save(p, FM_DT_I32, 4, shape, v, &err), FM_OK);
  }
  snprintf(args, sizeof args, "check --intervals \"%s\" --bidir --strict", p);
  expect_bad(args, 1, "outside", NULL);
  snprintf(args, sizeof args, "expand \"%s\" --bidir --strict -o \"%s\"", p, out);
  expect_bad(args, 2, "outside", out);
  /* unwritable output paths */
  snprintf(args, sizeof args, "convert \"%s\" -o /nonexistent_fmsim_dir/x.npy", good);
  expect_bad(args, 2, "cannot write", NULL);
  snprintf(args, sizeof args, "expand \"%s\" --bidir -o /nonexistent_fmsim_dir/x.npy", iv);
  expect_bad(args, 2, "cannot write", NULL);
  cr_assert_not(exists("/nonexistent_fmsim_dir"));
  /* a form that cannot hold the mask: a block-diagonal mask is not causal */
  snprintf(args, sizeof args, "convert \"%s\" -o \"%s\" --form causal-2", good, out);
  expect_bad(args, 1, "causal-2", out);
  snprintf(args, sizeof args, "convert \"%s\" -o \"%s\" --form sideways", good, out);
  expect_bad(args, 2, "form", out);
  /* --masked-true on an additive mask */
  snprintf(p, sizeof p, "%s", tmp("bad_f32.npy"));
  dense_write(&d, p, FM_DT_F32, 0, 2, 1, NULL);
  snprintf(args, sizeof args, "check --masked-true \"%s\"", p);
  expect_bad(args, 2, "additive", NULL);
  /* expand refuses an output above its size cap */
  {
    fm_colmask *big = NULL;
    cr_assert_eq(fm_colmask_create(1 << 17, 1 << 17, 1, 1, 1, &big, &err), FM_OK);
    snprintf(p, sizeof p, "%s", tmp("bad_big_iv.npy"));
    cr_assert_eq(fm_colmask_save_npy(big, p, FM_FORM_CAUSAL1, NULL, &err), FM_OK);
    fm_colmask_destroy(big);
    snprintf(args, sizeof args, "expand \"%s\" --causal --seqlen-q 262144 -o \"%s\"", p, out);
    expect_bad(args, 2, "GiB", out);
  }
  /* usage */
  expect_bad("check", 2, "required", NULL);
  expect_bad("check a.npy b.npy", 2, "unexpected", NULL);
  snprintf(args, sizeof args, "check --intervals \"%s\"", iv);
  expect_bad(args, 2, "--causal", NULL);
  snprintf(args, sizeof args, "convert \"%s\"", good);
  expect_bad(args, 2, "-o", NULL);
  snprintf(args, sizeof args, "check \"%s\" --frobnicate", good);
  expect_bad(args, 2, "unknown option", NULL);
  free(d.m);
  fm_colmask_destroy(m);
}

/* a well-formed check exits 0 with nothing on stderr; the text report names the verdict */
Test(dense, human_report) {
  fm_colmask *m = family("qk_sparse", 40, 1, "spans=5:6,20:8");
  dense d = dense_from_colmask(m, 1, 1);
  char path[1024], args[2048];
  snprintf(path, sizeof path, "%s", tmp("human.npy"));
  dense_write(&d, path, FM_DT_BOOL, 0, 2, 1, NULL);
  snprintf(args, sizeof args, "check \"%s\"", path);
  char *out, *err;
  cr_assert_eq(fmsim("human", args, &out, &err), 0, "%s", err);
  cr_assert_str_empty(err);
  cr_assert(strstr(out, "FITS: smallest form causal-2"), "%s", out);
  free(out);
  free(err);
  free(d.m);
  fm_colmask_destroy(m);
}

/* ----------------------------------------------- float readings, tiles, rows */

/* A float mask of only 0 and 1 is ambiguous: refused until a reading is given. */
Test(dense, float_zero_one_needs_a_reading) {
  fm_colmask *m = family("causal_document", 40, 1, "docs=17,9,14");
  dense d = dense_from_colmask(m, 1, 1);
  static const fm_dtype types[] = {FM_DT_F32, FM_DT_F64};
  for (size_t t = 0; t < 2; t++) {
    int64_t n = 40 * 40, es = fm_dtype_size(types[t]);
    uint8_t *buf = malloc((size_t)(n * es));
    for (int64_t e = 0; e < n; e++) { /* 1 = may attend, 0 = masked: a bool mask stored as float */
      if (types[t] == FM_DT_F32) ((float *)buf)[e] = d.m[e] ? 0.0f : 1.0f;
      else ((double *)buf)[e] = d.m[e] ? 0.0 : 1.0;
    }
    const char *path = tmp("f01.npy");
    int64_t shape[2] = {40, 40};
    fm_err err;
    cr_assert_eq(fm_npy_save(path, types[t], 2, shape, buf, &err), FM_OK);
    free(buf);
    fm_dense_result *res = NULL;
    fm_dense_opts o = {.keep_intervals = 1};
    cr_assert_eq(fm_dense_check_file(path, &o, &res, &err), FM_EINVAL);
    cr_assert(strstr(err.msg, "only 0 and 1") && strstr(err.msg, "--bool") && strstr(err.msg, "--additive"),
              "%s", err.msg);
    cr_assert_null(res);
    o.reading = FM_DENSE_READ_BOOL;
    cr_assert_eq(fm_dense_check_file(path, &o, &res, &err), FM_OK, "%s", err.msg);
    fm_colmask *c = NULL;
    cr_assert_eq(fm_dense_result_to_colmask(res, FM_FORM_NONE, &c, &err), FM_OK, "%s", err.msg);
    cr_assert(fm_colmask_equal(c, m));
    fm_colmask_destroy(c);
    fm_dense_result_destroy(res);
    o.reading = FM_DENSE_READ_ADDITIVE;
    cr_assert_eq(fm_dense_check_file(path, &o, &res, &err), FM_OK, "%s", err.msg);
    cr_assert_eq(fm_dense_result_report(res)->masked, 0);
    cr_assert_gt(fm_dense_result_report(res)->soft_values, 0);
    fm_dense_result_destroy(res);
    /* the command line: one line naming both flags, exit 2; each flag works */
    char args[2048], *out, *er;
    snprintf(args, sizeof args, "check \"%s\"", path);
    expect_bad(args, 2, "--bool", NULL);
    snprintf(args, sizeof args, "check \"%s\" --bool --json", path);
    cr_assert_eq(fmsim("f01", args, &out, &er), 0, "%s", er);
    int64_t masked = 0;
    for (int64_t e = 0; e < n; e++) masked += d.m[e];
    cr_assert_eq(json_int(out, "masked_elements"), masked);
    free(out);
    free(er);
    snprintf(args, sizeof args, "check \"%s\" --bool --additive", path);
    expect_bad(args, 2, "exclude each other", NULL);
  }
  free(d.m);
  fm_colmask_destroy(m);
}

/* --bool and --additive are for float masks */
Test(dense, reading_flags_need_a_float_mask) {
  fm_colmask *m = family("causal", 16, 1, NULL);
  dense d = dense_from_colmask(m, 1, 1);
  const char *path = tmp("int_reading.npy");
  dense_write(&d, path, FM_DT_I64, 0, 2, 1, NULL);
  char args[2048];
  snprintf(args, sizeof args, "check \"%s\" --additive", path);
  expect_bad(args, 2, "float", NULL);
  snprintf(args, sizeof args, "analyze \"%s\" --bool", path);
  expect_bad(args, 2, "float", NULL);
  free(d.m);
  fm_colmask_destroy(m);
}

/* Exact tiles of the dense scan equal fm_classify's exact classes of the
 * converted intervals (fitting masks), at several tile sizes. */
Test(dense, exact_tiles_agree_with_intervals) {
  static const char *fams[] = {"causal_document", "document", "qk_sparse", "global_sliding_window"};
  static const int32_t sizes[][2] = {{16, 16}, {7, 5}, {64, 3}, {1, 1}};
  for (size_t f = 0; f < 4; f++) {
    fm_colmask *m = family(fams[f], 90, 1, NULL);
    dense d = dense_from_colmask(m, 1, 1);
    const char *path = tmp("tiles.npy");
    dense_write(&d, path, FM_DT_BOOL, 0, 2, 1, NULL);
    for (size_t z = 0; z < 4; z++) {
      fm_dense_opts o = {.br = sizes[z][0], .bc = sizes[z][1]};
      fm_dense_result *res = NULL;
      fm_err err;
      cr_assert_eq(fm_dense_check_file(path, &o, &res, &err), FM_OK, "%s", err.msg);
      fm_tile_counts counts;
      cr_assert_eq(fm_classify(m, sizes[z][0], sizes[z][1], &counts, NULL, NULL, &err), FM_OK);
      const fm_dense_tiles *t = &fm_dense_result_report(res)->tiles;
      cr_assert_eq(t->total, counts.total);
      for (int c = 0; c < 3; c++)
        cr_assert_eq(t->count[c], counts.exact[c], "%s at %d x %d, class %d", fams[f], sizes[z][0],
                     sizes[z][1], c);
      cr_assert_null(fm_dense_result_tiles(res), "classes kept only with keep_tiles");
      fm_dense_result_destroy(res);
    }
    free(d.m);
    fm_colmask_destroy(m);
  }
}

/* fm_dense_check_colmask (check --intervals, fmsim.from_paddle(...).check):
 * its tile counts are fm_classify's exact classes, once, whether the rows
 * are expanded (small masks) or not, causal and bidirectional, at tile sizes
 * that divide S and that do not; the counts add up to the total and rho is
 * in [0, 1]. */
Test(dense, colmask_check_counts_each_tile_once) {
  static const char *fams[] = {"causal_document", "document", "sliding_window", "causal",
                               "qk_sparse", "random_eviction"};
  static const int32_t sizes[][2] = {{128, 128}, {64, 64}, {48, 80}, {7, 5}};
  static const int64_t limits[] = {(int64_t)1 << 30, 0}; /* rows expanded, not expanded */
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
    fm_colmask *m = family(fams[f], 1000, 2, NULL);
    for (size_t z = 0; z < 4; z++)
      for (size_t l = 0; l < 2; l++) {
        fm_dense_opts o = {.br = sizes[z][0], .bc = sizes[z][1]};
        fm_dense_result *res = NULL;
        fm_err err;
        cr_assert_eq(fm_dense_check_colmask(m, limits[l], &o, &res, &err), FM_OK, "%s", err.msg);
        fm_tile_counts counts;
        cr_assert_eq(fm_classify(m, sizes[z][0], sizes[z][1], &counts, NULL, NULL, &err), FM_OK);
        const fm_dense_tiles *t = &fm_dense_result_report(res)->tiles;
        cr_assert_eq(t->total, counts.total);
        int64_t sum = 0;
        for (int c = 0; c < 3; c++) {
          cr_assert_eq(t->count[c], counts.exact[c], "%s at %d x %d (rows %s), class %d: %lld, not %lld",
                       fams[f], sizes[z][0], sizes[z][1], l ? "not expanded" : "expanded", c,
                       (long long)t->count[c], (long long)counts.exact[c]);
          sum += t->count[c];
        }
        cr_assert_eq(sum, t->total);
        cr_assert(t->sparsity >= 0 && t->sparsity <= 1, "rho %g", t->sparsity);
        fm_dense_result_destroy(res);
      }
    fm_colmask_destroy(m);
  }
}

/* fm_dense_scan_rows: a block of rows, and the attend convention */
Test(dense, scan_rows_blocks_and_attend) {
  dense d = gen_random(2, 2, 30, 41, 21);
  fm_dense_opts o = {.keep_intervals = 1};
  fm_dense_scan *a = NULL, *b = NULL;
  fm_err err;
  cr_assert_eq(fm_dense_scan_create(2, 2, 30, 41, &o, &a, &err), FM_OK);
  cr_assert_eq(fm_dense_scan_create(2, 2, 30, 41, &o, &b, &err), FM_OK);
  int64_t rows = 2 * 2 * 30;
  uint8_t *attend = malloc((size_t)(rows * 41));
  for (int64_t q = 0; q < rows * 41; q++) attend[q] = (uint8_t)(d.m[q] ? 0 : 7); /* any non-zero */
  for (int64_t r = 0; r < rows; r++) fm_dense_scan_row(a, d.m + r * 41);
  fm_dense_scan_rows(b, attend, 13, 1); /* uneven blocks across set boundaries */
  fm_dense_scan_rows(b, attend + 13 * 41, rows - 13, 1);
  fm_dense_result *ra, *rb;
  cr_assert_eq(fm_dense_scan_finish(a, &ra, &err), FM_OK);
  cr_assert_eq(fm_dense_scan_finish(b, &rb, &err), FM_OK);
  const fm_dense_report *x = fm_dense_result_report(ra), *y = fm_dense_result_report(rb);
  cr_assert_eq(x->masked, y->masked);
  cr_assert_eq(x->max_runs, y->max_runs);
  cr_assert_eq(x->advice.subset_masked, y->advice.subset_masked);
  cr_assert_eq(memcmp(fm_dense_result_runs(ra), fm_dense_result_runs(rb), (size_t)(4 * 41 * 6 * 4)), 0);
  /* too many rows fail at finish */
  fm_dense_result_destroy(ra);
  cr_assert_eq(fm_dense_scan_create(1, 1, 2, 41, &o, &a, &err), FM_OK);
  fm_dense_scan_rows(a, attend, 3, 1);
  cr_assert_eq(fm_dense_scan_finish(a, &ra, &err), FM_EINVAL);
  cr_assert(strstr(err.msg, "3 rows"), "%s", err.msg);
  fm_dense_result_destroy(rb);
  fm_dense_result_destroy(ra);
  free(attend);
  free(d.m);
}

/* check and analyze of a mask file: block sparsity at any Br x Bc, advice in the text */
Test(dense, cli_check_and_analyze_mask_files) {
  dense d = gen_dilated(48, 4);
  const char *path = tmp("cli_dil.npy");
  dense_write(&d, path, FM_DT_BOOL, 0, 2, 1, NULL);
  char args[2048], *out, *err;
  snprintf(args, sizeof args, "check \"%s\" --br 8 --bc 12", path);
  cr_assert_eq(fmsim("cli_dil", args, &out, &err), 1, "%s", err);
  cr_assert(strstr(out, "tiles        8 x 12") && strstr(out, "what to do") &&
            strstr(out, "sub-mask") && strstr(out, "smaller Sq"), "%s", out);
  free(out);
  free(err);
  snprintf(args, sizeof args, "analyze \"%s\" --br 8 --bc 12 --json", path);
  cr_assert_eq(fmsim("cli_dil2", args, &out, &err), 0, "%s", err);
  cr_assert_not(json_bool(out, "representable"));
  cr_assert_eq(json_int(out, "br"), 8);
  cr_assert_eq(json_int(out, "bc"), 12);
  free(out);
  free(err);
  snprintf(args, sizeof args, "analyze \"%s\" --family causal", path);
  expect_bad(args, 2, "--family", NULL);
  snprintf(args, sizeof args, "analyze --intervals \"%s\"", path);
  expect_bad(args, 2, "--causal", NULL);
  snprintf(args, sizeof args, "check \"%s\" --br 0", path);
  expect_bad(args, 2, "--br", NULL);
  free(d.m);
}

/* keep_all_runs asks the machine before growing: a mask with more runs than
 * the limit allows is refused with one line naming the file and the count,
 * and the same scan without keep_all_runs goes through */
Test(dense, all_runs_are_refused_past_the_memory_limit) {
  dense d = gen_random(1, 1, 300, 300, 21); /* about 22 000 runs */
  char path[1024];
  snprintf(path, sizeof path, "%s", tmp("many_runs.npy"));
  dense_write(&d, path, FM_DT_BOOL, 0, 2, 1, NULL);
  setenv("FMSIM_MEM_LIMIT", "100K", 1);
  fm_dense_opts o = {.keep_all_runs = 1};
  fm_dense_result *res = NULL;
  fm_err err;
  fm_status st = fm_dense_check_file(path, &o, &res, &err);
  cr_assert_eq(st, FM_ENOMEM, "%s", err.msg);
  cr_assert_null(res);
  cr_assert(strstr(err.msg, path) && strstr(err.msg, "masked runs") &&
            strstr(err.msg, "FMSIM_MEM_LIMIT"), "%s", err.msg);
  cr_assert_null(strchr(err.msg, '\n'));
  o.keep_all_runs = 0;
  cr_assert_eq(fm_dense_check_file(path, &o, &res, &err), FM_OK, "%s", err.msg);
  unsetenv("FMSIM_MEM_LIMIT");
  fm_dense_result_destroy(res);
  free(d.m);
}
