/* fm_timing_profile.c — GPU profiles of the timing model as JSON
 * (format in fm_timing.h): read and validated with fm_jsonr, written with
 * fm_json. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fm_fileio.h"
#include "fm_json.h"
#include "fm_jsonr.h"
#include "fm_timing.h"

#define PROFILE_FORMAT "fmsim-gpu-profile"
#define PROFILE_VERSION 2 /* written; version 1 (no boost window) is read too */

const fm_timing_coef *fm_profile_coef(const fm_gpu_profile *p, fm_pass pass, int32_t head_dim) {
  if (!p || (pass != FM_PASS_FWD && pass != FM_PASS_BWD)) return NULL;
  const fm_timing_coef *c = pass == FM_PASS_FWD ? p->fwd : p->bwd;
  int32_t n = pass == FM_PASS_FWD ? p->nfwd : p->nbwd;
  for (int32_t i = 0; i < n; i++)
    if (c[i].head_dim == head_dim) return &c[i];
  return NULL;
}

/* ------------------------------------------------------------ reading */

typedef struct reader {
  const char *name;
  fm_err *err;
  int32_t version; /* of the profile being read */
} reader;

static fm_status bad(const reader *r, const fm_jv *v, const char *key, const char *expected) {
  int line, col;
  fm_jv_where(v, &line, &col);
  if (v) return fm_fail(r->err, FM_EFORMAT, "%s:%d:%d: '%s': expected %s", r->name, line, col, key, expected);
  return fm_fail(r->err, FM_EFORMAT, "%s: '%s' is missing (expected %s)", r->name, key, expected);
}

static fm_status get_string(const reader *r, const fm_jv *obj, const char *key, char *out,
                            size_t cap) {
  const fm_jv *v = fm_jv_get(obj, key);
  const char *s = fm_jv_string(v);
  if (!s) return bad(r, v, key, "a string");
  if (strlen(s) >= cap) return bad(r, v, key, "a shorter string");
  snprintf(out, cap, "%s", s);
  return FM_OK;
}

static fm_status get_number(const reader *r, const fm_jv *obj, const char *key, double lo,
                            double hi, double *out) {
  const fm_jv *v = fm_jv_get(obj, key);
  double x = fm_jv_number(v, NAN);
  if (fm_jv_type_of(v) != FM_JV_NUMBER || !isfinite(x) || x < lo || x > hi) {
    char what[96];
    snprintf(what, sizeof what, "a number in [%g, %g]", lo, hi);
    return bad(r, v, key, what);
  }
  *out = x;
  return FM_OK;
}

static fm_status get_int(const reader *r, const fm_jv *obj, const char *key, int32_t lo,
                         int32_t hi, int32_t *out) {
  double x = 0;
  fm_status st = get_number(r, obj, key, lo, hi, &x);
  if (st != FM_OK) return st;
  if (x != floor(x)) return bad(r, fm_jv_get(obj, key), key, "an integer");
  *out = (int32_t)x;
  return FM_OK;
}

/* One entry of "forward" / "backward": coefficients of one head dim. */
static fm_status read_coef(const reader *r, const fm_jv *e, fm_kernel_id kernel, fm_pass pass,
                           fm_timing_coef *c) {
  memset(c, 0, sizeof *c);
  if (fm_jv_type_of(e) != FM_JV_OBJECT) return bad(r, e, "forward/backward entry", "an object");
  fm_status st;
  static const struct {
    const char *key;
    size_t off;
  } nums[] = {{"launch_us", offsetof(fm_timing_coef, launch_us)},
              {"item_us", offsetof(fm_timing_coef, item_us)},
              {"key_tile_us", offsetof(fm_timing_coef, key_tile_us)},
              {"unmasked_us", offsetof(fm_timing_coef, unmasked_us)},
              {"partial_us", offsetof(fm_timing_coef, partial_us)},
              {"partial_causal_us", offsetof(fm_timing_coef, partial_causal_us)}};
  if ((st = get_int(r, e, "head_dim", 1, 1024, &c->head_dim)) != FM_OK ||
      (st = get_int(r, e, "br", 1, 65536, &c->br)) != FM_OK ||
      (st = get_int(r, e, "bc", 1, 65536, &c->bc)) != FM_OK ||
      (st = get_int(r, e, "ctas_per_sm", 1, 32, &c->ctas_per_sm)) != FM_OK ||
      (st = get_number(r, e, "solo", 1, 4, &c->solo)) != FM_OK)
    return st;
  for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++)
    if ((st = get_number(r, e, nums[k].key, 0, 1e9, (double *)((char *)c + nums[k].off))) != FM_OK)
      return st;
  c->throttle = 1; /* version 1: no boost window */
  if (r->version >= 2 && ((st = get_number(r, e, "boost_us", 0, 1e9, &c->boost_us)) != FM_OK ||
                          (st = get_number(r, e, "throttle", 1, 4, &c->throttle)) != FM_OK))
    return st;
  const fm_jv *fit = fm_jv_get(e, "fit");
  const fm_jv *cases = fm_jv_get(fit, "cases");
  int64_t ncases = 0;
  if (cases && fm_jv_int_in(cases, 0, INT32_MAX, &ncases) != 0)
    return bad(r, cases, "fit.cases", "a count from 0 to 2147483647");
  c->fit_cases = (int32_t)ncases;
  c->fit_median_err = fm_jv_number(fm_jv_get(fit, "median_abs_error"), NAN);
  c->fit_worst_err = fm_jv_number(fm_jv_get(fit, "worst_abs_error"), NAN);
  c->fit_boost_p = -1; /* the fit's test is calibrate's report, not the profile's */
  /* the tile must be the kernel's own for the pass: the coefficients are per tile */
  int32_t br, bc;
  fm_err kerr;
  const char *kname = fm_kernel_get(kernel)->name;
  if (fm_kernel_tile_size(kernel, pass, c->head_dim, &br, &bc, &kerr) != FM_OK)
    return fm_fail(r->err, FM_EFORMAT, "%s: %s head dim %d: %s", r->name, fm_pass_name(pass),
                   c->head_dim, kerr.msg);
  if (br != c->br || bc != c->bc)
    return fm_fail(r->err, FM_EFORMAT,
                   "%s: %s head dim %d was fitted at %d x %d tiles, but kernel %s uses %d x %d "
                   "(a profile of another build; recalibrate with fmsim calibrate)",
                   r->name, fm_pass_name(pass), c->head_dim, c->br, c->bc, kname, br, bc);
  return FM_OK;
}

static fm_status read_coefs(const reader *r, const fm_jv *root, const char *key,
                            fm_kernel_id kernel, fm_pass pass, fm_timing_coef *out, int32_t *n) {
  const fm_jv *arr = fm_jv_get(root, key);
  *n = 0;
  if (fm_jv_type_of(arr) != FM_JV_ARRAY) return bad(r, arr, key, "an array of per-head-dim coefficients");
  if (fm_jv_count(arr) > FM_PROFILE_MAX_COEF) return bad(r, arr, key, "at most 8 entries");
  for (const fm_jv *e = fm_jv_first(arr); e; e = fm_jv_next(e)) {
    fm_status st = read_coef(r, e, kernel, pass, &out[*n]);
    if (st != FM_OK) return st;
    for (int32_t i = 0; i < *n; i++)
      if (out[i].head_dim == out[*n].head_dim) return bad(r, e, key, "one entry per head dim");
    (*n)++;
  }
  return FM_OK;
}

static fm_status profile_from(reader *r, const fm_jv *root, fm_gpu_profile *p) {
  if (fm_jv_type_of(root) != FM_JV_OBJECT) return bad(r, root, "profile", "a JSON object");
  const char *fmt = fm_jv_string(fm_jv_get(root, "format"));
  if (!fmt || strcmp(fmt, PROFILE_FORMAT))
    return bad(r, fm_jv_get(root, "format"), "format", "\"" PROFILE_FORMAT "\"");
  int32_t version;
  fm_status st = get_int(r, root, "version", 1, 1000, &version);
  if (st != FM_OK) return st;
  if (version < 1 || version > PROFILE_VERSION)
    return fm_fail(r->err, FM_EFORMAT, "%s: profile version %d; this fmsim reads versions 1 to %d",
                   r->name, version, PROFILE_VERSION);
  r->version = version;
  char kernel[32];
  fm_err kerr;
  if ((st = get_string(r, root, "gpu", p->gpu, sizeof p->gpu)) != FM_OK ||
      (st = get_string(r, root, "kernel", kernel, sizeof kernel)) != FM_OK)
    return st;
  if (fm_kernel_parse(kernel, &p->kernel, &kerr) != FM_OK || p->kernel == FM_KERNEL_AUTO) {
    char names[256], want[300];
    snprintf(want, sizeof want, "a kernel of the registry (%s)", fm_kernel_names(names, sizeof names));
    return bad(r, fm_jv_get(root, "kernel"), "kernel", want);
  }
  if ((st = get_int(r, root, "sms", 1, 1024, &p->sms)) != FM_OK ||
      (st = get_number(r, root, "hbm_gbs", 0, 1e6, &p->hbm_gbs)) != FM_OK ||
      (st = get_string(r, root, "date", p->date, sizeof p->date)) != FM_OK ||
      (st = get_string(r, root, "fmsim_version", p->fmsim_version, sizeof p->fmsim_version)) != FM_OK ||
      (st = get_string(r, root, "source", p->source, sizeof p->source)) != FM_OK ||
      (st = read_coefs(r, root, "forward", p->kernel, FM_PASS_FWD, p->fwd, &p->nfwd)) != FM_OK ||
      (st = read_coefs(r, root, "backward", p->kernel, FM_PASS_BWD, p->bwd, &p->nbwd)) != FM_OK)
    return st;
  return FM_OK;
}

fm_status fm_profile_parse(const char *text, size_t len, const char *name, fm_gpu_profile *out,
                           fm_err *err) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  fm_jdoc *d;
  fm_status st = fm_jdoc_parse(text, len, name, &d, err);
  if (st != FM_OK) return st;
  reader r = {name, err, 0};
  st = profile_from(&r, fm_jdoc_root(d), out);
  fm_jdoc_free(d);
  return st;
}

fm_status fm_profile_load(const char *path, fm_gpu_profile *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  fm_jdoc *d;
  fm_status st = fm_jdoc_load(path, &d, err);
  if (st != FM_OK) return st;
  reader r = {path, err, 0};
  st = profile_from(&r, fm_jdoc_root(d), out);
  fm_jdoc_free(d);
  snprintf(out->name, sizeof out->name, "%s", path);
  return st;
}

/* ------------------------------------------------------------ writing */

static void write_coefs(fm_json *j, const char *key, const fm_timing_coef *c, int32_t n) {
  fm_json_array(j, key);
  for (int32_t i = 0; i < n; i++) {
    fm_json_object(j, NULL);
    fm_json_int(j, "head_dim", c[i].head_dim);
    fm_json_int(j, "br", c[i].br);
    fm_json_int(j, "bc", c[i].bc);
    fm_json_int(j, "ctas_per_sm", c[i].ctas_per_sm);
    fm_json_double(j, "launch_us", c[i].launch_us);
    fm_json_double(j, "item_us", c[i].item_us);
    fm_json_double(j, "key_tile_us", c[i].key_tile_us);
    fm_json_double(j, "unmasked_us", c[i].unmasked_us);
    fm_json_double(j, "partial_us", c[i].partial_us);
    fm_json_double(j, "partial_causal_us", c[i].partial_causal_us);
    fm_json_double(j, "solo", c[i].solo);
    fm_json_double(j, "boost_us", c[i].throttle > 1 ? c[i].boost_us : 0);
    fm_json_double(j, "throttle", c[i].throttle > 1 ? c[i].throttle : 1);
    fm_json_object(j, "fit");
    fm_json_int(j, "cases", c[i].fit_cases);
    fm_json_double(j, "median_abs_error", c[i].fit_median_err);
    fm_json_double(j, "worst_abs_error", c[i].fit_worst_err);
    fm_json_end(j);
    fm_json_end(j);
  }
  fm_json_end(j);
}

void fm_profile_ident_json(const fm_gpu_profile *p, fm_json *j) {
  const fm_kernel_desc *k = fm_kernel_get(p->kernel);
  fm_json_string(j, "gpu", p->gpu);
  fm_json_string(j, "kernel", k ? k->name : NULL);
  fm_json_string(j, "date", p->date);
  fm_json_string(j, "fmsim_version", p->fmsim_version);
}

fm_status fm_profile_save(const fm_gpu_profile *p, const char *path, fm_err *err) {
  const fm_kernel_desc *k = fm_kernel_get(p->kernel);
  if (!k) return fm_fail(err, FM_EINVAL, "profile for unknown kernel id %d", (int)p->kernel);
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "format", PROFILE_FORMAT);
  fm_json_int(&j, "version", PROFILE_VERSION);
  fm_profile_ident_json(p, &j);
  fm_json_int(&j, "sms", p->sms);
  fm_json_double(&j, "hbm_gbs", p->hbm_gbs);
  fm_json_string(&j, "source", p->source);
  write_coefs(&j, "forward", p->fwd, p->nfwd);
  write_coefs(&j, "backward", p->bwd, p->nbwd);
  fm_json_end(&j);
  fm_status st = j.oom ? fm_fail(err, FM_ENOMEM, "out of memory writing %s", path)
                       : fm_write_file_atomic(path, j.buf, j.len, err);
  fm_json_free(&j);
  return st;
}
