/* fmsim calibrate: fits a GPU profile of the timing model (core/fm_timing.h)
 * to the kernel times a GPU run measured, and reports the fit's residuals.
 *
 * Runs are read through one adapter (read_run) that turns whatever wrote
 * them into per-case records: a scenario run of `fmsim run` or `fmsim bench`
 * (its folder: index.json with each kernel's time, run.json, the cases'
 * columns.npy) or a measurements file ("format":
 * "fmsim-measurements", written by bench/validate_model.py from tables that
 * exist only as text). */
#define _XOPEN_SOURCE 700 /* realpath */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "commands.h"
#include "fm_fileio.h"
#include "fm_intervals_io.h"
#include "fm_json.h"
#include "fm_jsonr.h"
#include "fm_timing.h"
#include "timing_cli.h"

static const char *cmd = "calibrate";

static const char *help =
    "usage: fmsim calibrate RUN [RUN...] --out PROFILE.json [options]\n\n"
    "Fits the timing model of one kernel (core/fm_timing.h) to the kernel times measured by\n"
    "GPU runs, one set of coefficients per pass and head dim, by non-negative least squares\n"
    "of the relative error on each case's critical work, and prints every case's measured\n"
    "and fitted time (tens of seconds for a hundred large cases). RUN is a scenario run\n"
    "folder (fmsim run, fmsim bench: index.json, its kernels' times, the cases' columns.npy),\n"
    "or a measurements JSON file (bench/validate_model.py --export).\n"
    "scenarios/calibration.yaml is the calibration set: masks chosen to separate the\n"
    "coefficients.\n\n"
    "  --out FILE          the profile to write (data/gpu/GPU-KERNEL.json for fmsim predict)\n"
    "  --kernel NAME       the kernel to fit (sm80, sm90, ...; default: the one the runs timed)\n"
    "  --gpu-name TEXT     the GPU (default: the device the runs name)\n"
    "  --sms N             its SM count (default 132 for H100/H200)\n"
    "  --hbm-gbs X         its HBM bandwidth in GB/s for the memory floor (default: known GPUs)\n"
    "  --date YYYY-MM-DD   date of the measurements (default: what the runs say, else today)\n"
    "  --ctas-per-sm N     resident CTAs per SM (default: the kernel's)\n"
    "  --fix NAME=VALUE    pin a coefficient (launch_us, item_us, key_tile_us, unmasked_us,\n"
    "                      partial_us, partial_causal_us) where the runs cannot separate it,\n"
    "                      e.g. launch_us from item_us when every case has as many items\n"
    "  --boost-window P    fwd (default), bwd, both or none: the passes whose fit may add a\n"
    "                      boost window (work at the fitted costs for boost_us, then\n"
    "                      `throttle` times slower: the clock the power limit allows),\n"
    "                      kept only where it lowers the residual significantly\n"
    "  --source TEXT       what the profile was fitted from (default: the RUN arguments)\n"
    "  --json              the fit as JSON on stdout instead of the table\n"
    "  --long-run          fit cases above the work bound: the cases' batch x heads x\n"
    "                      tiles per pair (row tiles fwd, key tiles bwd), summed, above\n"
    "                      2^28 = 268435456 work items (about ten seconds per pass of the fit,\n"
    "                      which makes dozens) is refused without it\n";

/* ------------------------------------------------------------ records */

typedef struct cal_case {
  char id[160];
  char family[64];
  char params[1024];     /* "key=value" tokens separated by NUL, nparams of them */
  int nparams, sample;
  uint64_t seed;
  char mask_path[4096];  /* an interval file, "" for a family mask */
  int causal, trace_columns; /* trace_columns: a trace's columns.npy (raw vectors) */
  char kernel[16];           /* the kernel that ran it, "" when the run does not say */
  int64_t seqlen, batch, heads;
  int32_t head_dim, br, bc; /* br = 0: the run does not say */
  fm_pass pass;             /* what was timed: FM_PASS_FWD unless the record says "bwd" */
  double time_ms;
} cal_case;

typedef struct cal_set {
  cal_case *v;
  int n, cap;
  char gpu[128], date[32];
} cal_set;

static cal_case *set_add(cal_set *s) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    cal_case *nv = realloc(s->v, sizeof *nv * (size_t)cap);
    if (!nv) return NULL;
    s->v = nv;
    s->cap = cap;
  }
  cal_case *c = &s->v[s->n++];
  memset(c, 0, sizeof *c);
  c->sample = -1;
  c->pass = FM_PASS_FWD;
  return c;
}

/* "w=512 seed=3 docs=..." (measurement and scenario records): seed= is the draw's
 * seed, the rest are family parameters. */
static void set_params(cal_case *c, const char *text) {
  size_t at = 0;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", text ? text : "");
  for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    if (!strncmp(tok, "seed=", 5)) {
      c->seed = strtoull(tok + 5, NULL, 10);
      continue;
    }
    size_t n = strlen(tok) + 1;
    if (at + n > sizeof c->params || c->nparams == 32) break;
    memcpy(c->params + at, tok, n);
    at += n;
    c->nparams++;
  }
}

static void copy_str(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src ? src : ""); }

/* dir/name into out; -1 when it does not fit. */
static int join_path(char *out, size_t cap, const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  if (a + 1 + b + 1 > cap) return -1;
  memcpy(out, dir, a);
  out[a] = '/';
  memcpy(out + a + 1, name, b + 1);
  return 0;
}

/* A file a run's record names inside the run folder (a case's columns.npy)
 * into out: a relative path without a ".." component that, links resolved,
 * stays in dir. A record is data from outside: it does not send calibrate to
 * read files elsewhere. 0, or -1 after printing (one line). */
static int run_member(char *out, size_t cap, const char *dir, const char *name, const char *id) {
  int escapes = name[0] == '/' || !name[0];
  for (const char *p = name; *p && !escapes; p = strchr(p, '/') ? strchr(p, '/') + 1 : p + strlen(p))
    escapes = !strncmp(p, "..", 2) && (p[2] == '/' || !p[2]);
  if (!escapes && join_path(out, cap, dir, name)) {
    cli_error(cmd, "%s: case path too long", dir);
    return -1;
  }
  char *real_dir = escapes ? NULL : realpath(dir, NULL), *real = escapes ? NULL : realpath(out, NULL);
  if (real_dir && real) {
    size_t n = strlen(real_dir);
    escapes = strncmp(real, real_dir, n) != 0 || (real[n] != '/' && strcmp(real_dir, "/") != 0);
  }
  free(real_dir);
  free(real);
  if (!escapes) return 0;
  cli_error(cmd, "case %.120s: its columns file '%.200s' is outside the run folder %.200s (a run's "
            "files stay in its folder)", id ? id : "?", name, dir);
  return -1;
}

/* A record's "pass" ("fwd" when absent); -1 for an unknown one. */
static int record_pass(const fm_jv *rec, fm_pass *out) {
  const char *p = fm_jv_string(fm_jv_get(rec, "pass"));
  *out = FM_PASS_FWD;
  if (!p) return 0;
  if (fm_pass_parse(p, out, NULL) == FM_OK && *out != FM_PASS_BOTH) return 0;
  cli_error(cmd, "a record's pass is '%s' (expected fwd or bwd)", p);
  return -1;
}

static int64_t num(const fm_jv *obj, const char *key, int64_t dflt) {
  return fm_jv_int64(fm_jv_get(obj, key), dflt); /* no float-to-int overflow */
}

/* One pass's record k (the kernel's record kr itself, or its "bwd" object) of
 * row r as a case: 0 when added or not run, -1 after printing. */
static int scenario_case(cal_set *s, const fm_jv *r, const fm_jv *kr, const fm_jv *k, const char *dir,
                         const char *columns) {
  double ms = fm_jv_number(fm_jv_get(k, "time_ms"), NAN);
  if (!isfinite(ms)) return 0; /* not run (or no such pass) */
  cal_case *c = set_add(s);
  if (!c) return -1;
  copy_str(c->kernel, sizeof c->kernel, fm_jv_string(fm_jv_get(kr, "kernel")));
  if (record_pass(k, &c->pass)) return -1;
  snprintf(c->id, sizeof c->id, "%.120s %s%s", fm_jv_string(fm_jv_get(r, "id")), c->kernel,
           c->pass == FM_PASS_BWD ? " bwd" : "");
  c->batch = num(r, "batch", 1);
  c->heads = num(r, "heads", 1);
  c->head_dim = (int32_t)num(r, "head_dim", 128);
  c->br = (int32_t)num(k, "br", 0);
  c->bc = (int32_t)num(k, "bc", 0);
  c->causal = fm_jv_bool(fm_jv_get(r, "causal"), 0);
  c->time_ms = ms;
  c->trace_columns = 1;
  return run_member(c->mask_path, sizeof c->mask_path, dir, columns, fm_jv_string(fm_jv_get(r, "id")));
}

/* A scenario run (fmsim run, fmsim bench): one case per row, kernel and pass
 * that ran, index.json's "kernels" records (the forward's figures in the
 * record, the backward's in its "bwd" object: the kernel, its tile and time);
 * the mask is the row's columns.npy (the trace's vectors, the causal flag
 * beside them); the device from run.json. */
static int read_scenario(const fm_jv *rows, const char *dir, cal_set *s) {
  char path[4096];
  fm_jdoc *d;
  if (snprintf(path, sizeof path, "%s/run.json", dir) < (int)sizeof path &&
      fm_jdoc_load(path, &d, NULL) == FM_OK) {
    copy_str(s->gpu, sizeof s->gpu, fm_jv_string(fm_jv_get(fm_jdoc_root(d), "device")));
    fm_jdoc_free(d);
  }
  for (const fm_jv *r = fm_jv_first(rows); r; r = fm_jv_next(r)) {
    const char *columns = fm_jv_string(fm_jv_get(r, "columns"));
    for (const fm_jv *kr = fm_jv_first(fm_jv_get(r, "kernels")); kr && columns; kr = fm_jv_next(kr))
      if (scenario_case(s, r, kr, kr, dir, columns) ||
          scenario_case(s, r, kr, fm_jv_get(kr, "bwd"), dir, columns))
        return -1;
  }
  return 0;
}

/* The fields of a measurement record. */
static cal_case *family_case(cal_set *s, const fm_jv *r, double ms) {
  cal_case *c = set_add(s);
  if (!c) return NULL;
  copy_str(c->id, sizeof c->id, fm_jv_string(fm_jv_get(r, "id")));
  copy_str(c->family, sizeof c->family, fm_jv_string(fm_jv_get(r, "family")));
  c->seqlen = num(r, "seqlen", 0);
  c->batch = num(r, "batch", 1);
  c->heads = num(r, "heads", 1);
  c->head_dim = (int32_t)num(r, "head_dim", 128);
  c->br = (int32_t)num(r, "br", 0);
  c->bc = (int32_t)num(r, "bc", 0);
  c->seed = (uint64_t)num(r, "seed", 0);
  c->sample = (int)num(r, "sample", -1);
  c->time_ms = ms;
  const fm_jv *pv = fm_jv_get(r, "params"); /* "k=v k=v" or ["k=v", ...] */
  char joined[1024] = "";
  for (const fm_jv *e = fm_jv_first(pv); e; e = fm_jv_next(e)) {
    size_t at = strlen(joined);
    snprintf(joined + at, sizeof joined - at, "%s%s", at ? " " : "", fm_jv_string(e) ? fm_jv_string(e) : "");
  }
  set_params(c, fm_jv_type_of(pv) == FM_JV_ARRAY ? joined : fm_jv_string(pv));
  return c;
}

/* A measurements file: {"format": "fmsim-measurements", "gpu", "kernel",
 * "date", "cases": [{id, family, params, seqlen, batch, heads, head_dim,
 * seed, sample, br, bc, time_ms}]}. */
static int read_measurements(const fm_jv *root, cal_set *s) {
  copy_str(s->gpu, sizeof s->gpu, fm_jv_string(fm_jv_get(root, "gpu")));
  copy_str(s->date, sizeof s->date, fm_jv_string(fm_jv_get(root, "date")));
  for (const fm_jv *r = fm_jv_first(fm_jv_get(root, "cases")); r; r = fm_jv_next(r)) {
    double ms = fm_jv_number(fm_jv_get(r, "time_ms"), NAN);
    if (!isfinite(ms)) continue;
    cal_case *c = family_case(s, r, ms);
    if (!c || record_pass(r, &c->pass)) return -1;
    copy_str(c->kernel, sizeof c->kernel, fm_jv_string(fm_jv_get(root, "kernel")));
  }
  return 0;
}

/* The adapter: the per-case records of one run output, whatever wrote it,
 * added to out. 0; 1 when the run holds no measured case; -1 after printing
 * why it cannot be read. */
static int read_run(const char *arg, cal_set *out) {
  char path[4096], dir[4096];
  struct stat sb;
  snprintf(dir, sizeof dir, "%s", arg);
  if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    snprintf(path, sizeof path, "%s/index.json", arg);
  } else {
    snprintf(path, sizeof path, "%s", arg);
    char *slash = strrchr(dir, '/'); /* the file's folder: what its relative paths start from */
    if (!slash) snprintf(dir, sizeof dir, ".");
    else slash[slash == dir] = 0;  /* "/f.json": "/" */
  }
  fm_err err;
  fm_jdoc *d;
  if (fm_jdoc_load(path, &d, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  const fm_jv *root = fm_jdoc_root(d);
  const char *format = fm_jv_string(fm_jv_get(root, "format"));
  int rc, before = out->n;
  if (fm_jv_type_of(root) == FM_JV_ARRAY) rc = read_scenario(root, dir, out);
  else if (format && !strcmp(format, "fmsim-measurements")) rc = read_measurements(root, out);
  else {
    cli_error(cmd, "%s: not a run output (expected a scenario index.json or an "
              "fmsim-measurements file)", path);
    rc = -1;
  }
  fm_jdoc_free(d);
  if (rc == 0 && out->n == before) rc = 1;
  return rc;
}

/* ------------------------------------------------------------ fit */

/* One fit: the cases of one pass and head dim, its coefficients in the profile. */
typedef struct cal_group {
  fm_pass pass;
  int32_t head_dim;
  fm_timing_coef *coef;  /* in cal_state.prof.fwd or .bwd */
  unsigned unidentified; /* fm_timing_fit's bits */
} cal_group;

typedef struct cal_state {
  fm_kernel_id kernel;
  fm_gpu_profile prof;
  cal_set set;
  fm_timing_work *works;  /* (set.n,) */
  double *pred;           /* (set.n,) fitted prediction, us */
  cal_group groups[2 * FM_PROFILE_MAX_COEF]; /* the fits: one per pass and head dim */
  int ngroups;
} cal_state;

/* The work of one case at the kernel's tile for its head dim. */
static int case_work(const cal_case *c, fm_kernel_id kernel, fm_timing_work *w) {
  fm_err err;
  int32_t br, bc;
  if (fm_kernel_tile_size(kernel, c->pass, c->head_dim, &br, &bc, &err) != FM_OK) {
    cli_error(cmd, "case %s: %s", c->id, err.msg);
    return -1;
  }
  if (c->br && (c->br != br || c->bc != bc)) {
    cli_error(cmd, "case %s ran at %d x %d tiles, but kernel %s uses %d x %d (%s): not this "
              "kernel's measurement (--kernel)", c->id, c->br, c->bc, fm_kernel_get(kernel)->name,
              br, bc, fm_pass_name(c->pass));
    return -1;
  }
  fm_colmask *m = NULL;
  fm_status st;
  if (c->mask_path[0]) {
    fm_intervals_opts lo = {.causal = c->causal, .strict = 1, .four_vectors = c->trace_columns};
    st = fm_intervals_load(c->mask_path, &lo, &m, NULL, &err);
  } else {
    /* the case's own mask (its tile is the kernel's, below) */
    cli_mask_opts o = {.family = c->family, .seqlen = c->seqlen, .sample = c->sample, .br = br,
                       .bc = bc, .batch = c->batch, .heads = c->heads, .seed = c->seed};
    const char *p = c->params;
    for (int k = 0; k < c->nparams; k++, p += strlen(p) + 1) o.params[o.nparams++] = p;
    st = cli_build_family_err(&o, &m, NULL, &err);
  }
  if (st == FM_OK) st = fm_timing_work_init(w, m, br, bc, &err);
  fm_colmask_destroy(m);
  if (st != FM_OK) {
    cli_error(cmd, "case %s: %s", c->id, err.msg);
    return -1;
  }
  return 0;
}

/* The groups of the cases: one per pass and head dim, in order of appearance. */
static int make_groups(cal_state *st) {
  for (int i = 0; i < st->set.n; i++) {
    const cal_case *c = &st->set.v[i];
    int seen = 0;
    for (int k = 0; k < st->ngroups; k++)
      seen |= st->groups[k].pass == c->pass && st->groups[k].head_dim == c->head_dim;
    if (seen) continue;
    int32_t *n = c->pass == FM_PASS_BWD ? &st->prof.nbwd : &st->prof.nfwd;
    if (*n == FM_PROFILE_MAX_COEF) {
      cli_error(cmd, "more than %d head dims in one pass", FM_PROFILE_MAX_COEF);
      return -1;
    }
    fm_timing_coef *coef = c->pass == FM_PASS_BWD ? &st->prof.bwd[(*n)++] : &st->prof.fwd[(*n)++];
    st->groups[st->ngroups++] = (cal_group){.pass = c->pass, .head_dim = c->head_dim, .coef = coef};
  }
  return 0;
}

static int in_group(const cal_case *c, const cal_group *g) {
  return c->pass == g->pass && c->head_dim == g->head_dim;
}

/* Fits every group into the profile. */
static int fit_all(cal_state *st, const fm_fit_options *fo, unsigned window_passes) {
  fm_fit_case *fc = malloc(sizeof *fc * (size_t)st->set.n);
  double *pred = malloc(sizeof *pred * (size_t)st->set.n);
  int rc = fc && pred ? make_groups(st) : -1;
  if (!fc || !pred) cli_error(cmd, "out of memory");
  for (int k = 0; k < st->ngroups && rc == 0; k++) {
    cal_group *g = &st->groups[k];
    int n = 0;
    for (int i = 0; i < st->set.n; i++) {
      const cal_case *c = &st->set.v[i];
      if (!in_group(c, g)) continue;
      fc[n++] = (fm_fit_case){.work = &st->works[i],
                              .problem = {.batch = c->batch, .heads = c->heads,
                                          .head_dim = c->head_dim, .pass = c->pass,
                                          .variant = FM_VARIANT_SKIP},
                              .measured_us = c->time_ms * 1e3};
    }
    fm_err err;
    fm_fit_options go = *fo;
    go.boost_window = (window_passes & g->pass) != 0;
    if (fm_timing_fit(st->kernel, st->prof.sms, st->prof.hbm_gbs, g->head_dim, fc, n, &go, g->coef,
                      pred, &g->unidentified, &err) != FM_OK) {
      cli_error(cmd, "%s head dim %d: %s", fm_pass_name(g->pass), g->head_dim, err.msg);
      rc = -1;
    }
    for (int i = 0, q = 0; rc == 0 && i < st->set.n; i++)
      if (in_group(&st->set.v[i], g)) st->pred[i] = pred[q++];
  }
  free(fc);
  free(pred);
  return rc;
}

/* ------------------------------------------------------------ report */

static const char *coef_names[FM_TIMING_NFEAT] = {"launch_us", "item_us", "key_tile_us",
                                                  "unmasked_us", "partial_us", "partial_causal_us"};

static void report_text(const cal_state *st, const char *out) {
  printf("fmsim calibrate: %d cases, kernel %s on %s (%d SMs)\n", st->set.n,
         fm_kernel_get(st->kernel)->name, st->prof.gpu, st->prof.sms);
  for (int k = 0; k < st->ngroups; k++) {
    const cal_group *g = &st->groups[k];
    const fm_timing_coef *c = g->coef;
    printf("\n%s, head dim %d, tile %d x %d, %d CTAs per SM: launch %.2f us, item %.3f us, key "
           "tile %.5f us,\n  unmasked %.4f us, partial %.4f us (causal %.4f us), solo %.2f\n",
           g->pass == FM_PASS_BWD ? "backward" : "forward", c->head_dim, c->br, c->bc,
           c->ctas_per_sm, c->launch_us, c->item_us, c->key_tile_us, c->unmasked_us, c->partial_us,
           c->partial_causal_us, c->solo);
    if (c->throttle > 1)
      printf("  boost window: %.2f ms at these costs, then %.3fx slower (the clock the power limit "
             "allows); kept, test p %.2g\n", c->boost_us / 1e3, c->throttle, c->fit_boost_p);
    else if (c->fit_boost_p >= 0)
      printf("  boost window: none (a fitted one did not lower the residual enough: test p %.2g, "
             "needs < %g)\n", c->fit_boost_p, FM_FIT_BOOST_P);
    else
      printf("  boost window: none (not fitted: --boost-window)\n");
    for (int f = 0; f < FM_TIMING_NFEAT; f++)
      if (g->unidentified & (1u << f))
        printf("  note: the cases do not determine %s (no case exercises it, or its work is "
               "proportional to another's): add cases (scenarios/calibration.yaml) or --fix it\n",
               coef_names[f]);
    printf("  %-44s %12s %12s %8s\n", "case", "measured ms", "fitted ms", "error");
    for (int i = 0; i < st->set.n; i++) {
      const cal_case *cs = &st->set.v[i];
      if (!in_group(cs, g)) continue;
      printf("  %-44.44s %12.4f %12.4f %+7.2f%%\n", cs->id, cs->time_ms, st->pred[i] / 1e3,
             100 * (st->pred[i] / 1e3 / cs->time_ms - 1));
    }
    printf("  |error| median %.2f%%, worst %.2f%% over %d cases\n", 100 * c->fit_median_err,
           100 * c->fit_worst_err, c->fit_cases);
  }
  printf("\nwrote %s\n", out);
}

static void report_json(const cal_state *st, const char *out) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "profile", out);
  fm_json_string(&j, "kernel", fm_kernel_get(st->kernel)->name);
  fm_json_string(&j, "gpu", st->prof.gpu);
  fm_json_array(&j, "fits");
  for (int k = 0; k < st->ngroups; k++) {
    const cal_group *g = &st->groups[k];
    const fm_timing_coef *c = g->coef;
    fm_json_object(&j, NULL);
    fm_json_string(&j, "pass", fm_pass_name(g->pass));
    fm_json_int(&j, "head_dim", c->head_dim);
    const double v[FM_TIMING_NFEAT] = {c->launch_us,   c->item_us,    c->key_tile_us,
                                       c->unmasked_us, c->partial_us, c->partial_causal_us};
    for (int f = 0; f < FM_TIMING_NFEAT; f++) fm_json_double(&j, coef_names[f], v[f]);
    fm_json_double(&j, "solo", c->solo);
    fm_json_double(&j, "boost_us", c->throttle > 1 ? c->boost_us : 0);
    fm_json_double(&j, "throttle", c->throttle > 1 ? c->throttle : 1);
    if (c->fit_boost_p >= 0) fm_json_double(&j, "boost_p", c->fit_boost_p);
    else fm_json_null(&j, "boost_p");
    fm_json_int(&j, "unidentified", g->unidentified);
    fm_json_double(&j, "median_abs_error", c->fit_median_err);
    fm_json_double(&j, "worst_abs_error", c->fit_worst_err);
    fm_json_array(&j, "cases");
    for (int i = 0; i < st->set.n; i++) {
      if (!in_group(&st->set.v[i], g)) continue;
      fm_json_object(&j, NULL);
      fm_json_string(&j, "id", st->set.v[i].id);
      fm_json_double(&j, "measured_ms", st->set.v[i].time_ms);
      fm_json_double(&j, "fitted_ms", st->pred[i] / 1e3);
      fm_json_end(&j);
    }
    fm_json_end(&j);
    fm_json_end(&j);
  }
  fm_json_end(&j);
  cli_print_json(&j);
}

/* ------------------------------------------------------------ main */

typedef struct cal_opts {
  const char *out, *kernel, *gpu, *date, *source;
  int64_t sms, ctas;
  double hbm;
  int json;
  int long_run;     /* --long-run: work above TIMING_MAX_ITEMS confirmed */
  unsigned window;  /* fm_pass bits: the passes that may get a boost window */
  fm_fit_options fit;
} cal_opts;

/* --boost-window fwd|bwd|both|none. */
static int parse_window(const char *arg, unsigned *out) {
  fm_pass p;
  if (!strcmp(arg, "none")) {
    *out = 0;
    return 0;
  }
  if (fm_pass_parse(arg, &p, NULL) == FM_OK) {
    *out = (unsigned)p;
    return 0;
  }
  cli_error(cmd, "--boost-window %s: expected fwd, bwd, both or none", arg);
  return -1;
}

/* --fix NAME=VALUE. */
static int parse_fix(const char *arg, fm_fit_options *fo) {
  const char *eq = strchr(arg, '=');
  for (int k = 0; eq && k < FM_TIMING_NFEAT; k++) {
    if (strlen(coef_names[k]) != (size_t)(eq - arg) || strncmp(arg, coef_names[k], (size_t)(eq - arg)))
      continue;
    char *end;
    double v = strtod(eq + 1, &end);
    if (*end || !(v >= 0) || !isfinite(v)) break;
    fo->fixed |= 1u << k;
    fo->fixed_value[k] = v;
    return 0;
  }
  cli_error(cmd, "--fix %s: expected NAME=VALUE with NAME one of launch_us, item_us, key_tile_us, "
            "unmasked_us, partial_us, partial_causal_us and VALUE >= 0", arg);
  return -1;
}

/* A kernel's name (not auto) into *k; 0, or -1 after printing. */
static int kernel_that_ran(const char *name, fm_kernel_id *k) {
  fm_err err;
  if (fm_kernel_parse(name, k, &err) != FM_OK) {
    cli_error(cmd, "--kernel: %s", err.msg);
    return -1;
  }
  if (*k == FM_KERNEL_AUTO) {
    cli_error(cmd, "--kernel: name the kernel that ran, not auto");
    return -1;
  }
  return 0;
}

/* The kernel to fit: --kernel, else the one the runs name; keeps its cases
 * (and those whose run names no kernel). */
static int choose_kernel(cal_state *st, const char *given) {
  const char *name = given, *other = NULL;
  for (int i = 0; !given && i < st->set.n; i++) {
    const char *k = st->set.v[i].kernel;
    if (k[0] && !name) name = k;
    else if (k[0] && strcmp(k, name)) other = k;
  }
  if (!name) {
    char names[256];
    cli_error(cmd, "the runs do not say which kernel ran: give --kernel (%s)",
              fm_kernel_names(names, sizeof names));
    return -1;
  }
  if (other) {
    cli_error(cmd, "the runs hold kernels %s and %s: choose one with --kernel", name, other);
    return -1;
  }
  if (kernel_that_ran(name, &st->kernel)) return -1;
  int n = 0;
  for (int i = 0; i < st->set.n; i++)
    if (!st->set.v[i].kernel[0] || !strcmp(st->set.v[i].kernel, name)) st->set.v[n++] = st->set.v[i];
  st->set.n = n;
  if (n == 0) {
    cli_error(cmd, "no case of kernel %s in the runs given", name);
    return -1;
  }
  return 0;
}

/* GPU name, SMs, bandwidth, kernel, date and source of the profile. */
static int profile_header(cal_state *st, const cal_opts *o, int argc, char **argv, int first) {
  fm_gpu_profile *p = &st->prof;
  if (choose_kernel(st, o->kernel)) return -1;
  p->kernel = st->kernel;
  copy_str(p->gpu, sizeof p->gpu, o->gpu ? o->gpu : st->set.gpu);
  if (!p->gpu[0]) {
    cli_error(cmd, "the runs do not name the GPU: give --gpu-name");
    return -1;
  }
  int hopper = strstr(p->gpu, "H100") || strstr(p->gpu, "H200");
  p->sms = (int32_t)(o->sms ? o->sms : hopper ? 132 : 0);
  p->hbm_gbs = o->hbm > 0 ? o->hbm : strstr(p->gpu, "H200") ? 4800 : strstr(p->gpu, "H100") ? 3350 : 0;
  if (!p->sms || !(p->hbm_gbs > 0)) {
    cli_error(cmd, "unknown GPU '%s': give --sms and --hbm-gbs", p->gpu);
    return -1;
  }
  time_t now = time(NULL);
  struct tm tmv;
  gmtime_r(&now, &tmv);
  if (o->date) copy_str(p->date, sizeof p->date, o->date);
  else if (st->set.date[0]) copy_str(p->date, sizeof p->date, st->set.date);
  else strftime(p->date, sizeof p->date, "%Y-%m-%d", &tmv);
  copy_str(p->fmsim_version, sizeof p->fmsim_version, FM_VERSION);
  if (o->source) copy_str(p->source, sizeof p->source, o->source);
  for (int i = first; !o->source && i < argc; i++) {
    size_t at = strlen(p->source);
    snprintf(p->source + at, sizeof p->source - at, "%s%s", at ? " " : "", argv[i]);
  }
  return 0;
}

/* calibrate's options: 1 taken, -1 a bad value (printed), 0 none of them. */
static int cal_opt(const char *c, void *v, int opt, const char *arg) {
  (void)c;
  cal_opts *o = v;
  int64_t n;
  fm_kernel_id k;
  switch (opt) {
  case 'o': o->out = arg; return 1;
  case 'k':
    if (kernel_that_ran(arg, &k)) return -1;
    o->kernel = arg;
    return 1;
  case 'g': o->gpu = arg; return 1;
  case 'd': o->date = arg; return 1;
  case 'S': o->source = arg; return 1;
  case 'j': o->json = 1; return 1;
  case 'L': o->long_run = 1; return 1;
  case 'F': return parse_fix(arg, &o->fit) ? -1 : 1;
  case 'W': return parse_window(arg, &o->window) ? -1 : 1;
  case 's': return cli_int(cmd, "--sms", arg, 1, 1024, &o->sms) ? -1 : 1;
  case 'c': return cli_int(cmd, "--ctas-per-sm", arg, 1, 32, &o->ctas) ? -1 : 1;
  case 'b':
    if (cli_int(cmd, "--hbm-gbs", arg, 1, 1000000, &n)) return -1;
    o->hbm = (double)n;
    return 1;
  }
  return 0;
}

/* 0 parsed (the runs are argv[optind..argc)), 1 help printed, -1 bad usage (printed). */
static int parse_opts(int argc, char **argv, cal_opts *o) {
  static const struct option longopts[] = {
      {"out", required_argument, 0, 'o'},      {"kernel", required_argument, 0, 'k'},
      {"gpu-name", required_argument, 0, 'g'}, {"sms", required_argument, 0, 's'},
      {"hbm-gbs", required_argument, 0, 'b'},  {"date", required_argument, 0, 'd'},
      {"ctas-per-sm", required_argument, 0, 'c'}, {"source", required_argument, 0, 'S'},
      {"fix", required_argument, 0, 'F'},      {"boost-window", required_argument, 0, 'W'},
      {"json", no_argument, 0, 'j'},           {"help", no_argument, 0, 'h'},
      {"long-run", no_argument, 0, 'L'},       {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":", .longopts = longopts, .own = cal_opt, .help = help,
                            .operands = CLI_OPERANDS};
  int r = cli_parse_opts(cmd, argc, argv, &def, o);
  if (r) return r;
  if (optind >= argc) {
    cli_error(cmd, "give at least one RUN (a scenario run folder or a "
              "measurements file)");
    return -1;
  }
  if (!o->out) {
    cli_error(cmd, "--out PROFILE.json is required");
    return -1;
  }
  fm_err err; /* before the runs are read and fitted (seconds): a target that cannot be written */
  if (fm_output_check(o->out, 0, &err) != FM_OK) {
    cli_error(cmd, "--out: %s", err.msg);
    return -1;
  }
  return 0;
}

/* One pass of the fit over the cases against the timing model's work bound
 * (timing_cli.h), before the fit's dozens of passes start. */
static int work_check(const cal_state *st, int confirmed) {
  double items = 0;
  for (int i = 0; i < st->set.n; i++) {
    const cal_case *c = &st->set.v[i];
    const fm_timing_work *w = &st->works[i];
    items += timing_items(c->pass, w->sq, w->sk, w->br, w->bc, c->batch, c->heads);
  }
  char what[64];
  snprintf(what, sizeof what, "%d cases", st->set.n);
  return timing_work_check(cmd, what, items, confirmed);
}

int cmd_calibrate(int argc, char **argv) {
  cal_opts o = {.window = FM_PASS_FWD};
  int r = parse_opts(argc, argv, &o);
  if (r) return r > 0 ? FM_EXIT_OK : FM_EXIT_USAGE;
  cal_state st;
  memset(&st, 0, sizeof st);
  int rc = FM_EXIT_USAGE;
  int empty = 0, first_empty = 0; /* runs without a measured case: noted once the fit can go on */
  for (int i = optind; i < argc; i++) {
    int r = read_run(argv[i], &st.set);
    if (r < 0) goto done;
    if (r > 0 && !empty++) first_empty = i;
  }
  if (st.set.n == 0) {
    cli_error(cmd, "no measured case in %s (did the GPU step run?)",
              empty == 1 ? argv[first_empty] : "the runs given");
    goto done;
  }
  if (empty)
    cli_note(cmd, "%d run%s without a measured case (%s%s) left out", empty,
            empty == 1 ? "" : "s", argv[first_empty], empty > 1 ? ", ..." : "");
  if (profile_header(&st, &o, argc, argv, optind)) goto done;
  st.works = calloc((size_t)st.set.n, sizeof *st.works);
  st.pred = calloc((size_t)st.set.n, sizeof *st.pred);
  if (!st.works || !st.pred) {
    cli_error(cmd, "out of memory");
    goto done;
  }
  for (int i = 0; i < st.set.n; i++)
    if (case_work(&st.set.v[i], st.kernel, &st.works[i])) goto done;
  if (work_check(&st, o.long_run)) goto done;
  o.fit.ctas_per_sm = (int32_t)o.ctas;
  if (fit_all(&st, &o.fit, o.window)) goto done;
  fm_err err;
  if (fm_profile_save(&st.prof, o.out, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    goto done;
  }
  if (o.json) report_json(&st, o.out);
  else report_text(&st, o.out);
  rc = FM_EXIT_OK;
done:
  for (int i = 0; st.works && i < st.set.n; i++) fm_timing_work_free(&st.works[i]);
  free(st.works);
  free(st.pred);
  free(st.set.v);
  return rc;
}
