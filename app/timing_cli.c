/* timing_cli.c — profile lookup and one-line predictions (timing_cli.h). */
#define _POSIX_C_SOURCE 200809L
#include "timing_cli.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "fm_dense.h"
#include "fm_intervals_io.h"
#include "fm_jsonr.h"
#include "fm_npy.h"
#include "fm_trace.h"

#ifndef FM_DATA_DIR
#define FM_DATA_DIR "data"
#endif

/* Anything but a folder: a FIFO or device is then refused by the reader
 * with what it is (fm_input.h), not reported missing. */
static int is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

/* The profiles in data/gpu, "a, b, c" (or "none"). */
static void known_profiles(char *buf, size_t cap) {
  DIR *d = opendir(FM_DATA_DIR "/gpu");
  size_t at = 0;
  buf[0] = 0;
  for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
    size_t n = strlen(e->d_name);
    if (n > 5 && !strcmp(e->d_name + n - 5, ".json") && at + n + 2 < cap)
      at += (size_t)snprintf(buf + at, cap - at, "%s%.*s", at ? ", " : "", (int)(n - 5), e->d_name);
  }
  if (d) closedir(d);
  if (!buf[0]) snprintf(buf, cap, "none");
}

/* NAME -> a path: the file itself, or data/gpu/NAME[.json]. 0 when found. */
static int profile_path(const char *name, char *path, size_t cap) {
  if (is_file(name)) {
    snprintf(path, cap, "%s", name);
    return 0;
  }
  if (strchr(name, '/')) return -1;
  size_t n = strlen(name);
  int has_ext = n > 5 && !strcmp(name + n - 5, ".json");
  snprintf(path, cap, "%s/gpu/%s%s", FM_DATA_DIR, name, has_ext ? "" : ".json");
  return is_file(path) ? 0 : -1;
}

int timing_profile_open(const char *cmd, const char *what, const char *name, fm_gpu_profile *out) {
  char path[4096], names[1024];
  fm_err err;
  int found = profile_path(name, path, sizeof path) == 0;
  if (!found && strchr(name, '/')) { /* a path: not a name of data/gpu either */
    cli_error(cmd, "%s: no such profile file", what);
    return -1;
  }
  if (!found) {
    known_profiles(names, sizeof names);
    cli_error(cmd, "%s: no such profile file, and no %s/gpu/%s.json (profiles: %s)", what,
              FM_DATA_DIR, name, names);
    return -1;
  }
  if (fm_profile_load(path, out, &err) != FM_OK) {
    cli_error(cmd, "GPU profile %s", err.msg);
    return -1;
  }
  snprintf(out->name, sizeof out->name, "%s", name);
  return 0;
}

/* The profile label (a name or a file), for kernel (auto: any) and head dim. */
static int load_checked(const char *cmd, const char *label, fm_kernel_id kernel, int32_t head_dim,
                        fm_gpu_profile *out) {
  char what[300];
  snprintf(what, sizeof what, "--gpu %s", label);
  if (timing_profile_open(cmd, what, label, out)) return -1;
  const char *pk = fm_kernel_get(out->kernel)->name;
  if (kernel != FM_KERNEL_AUTO && kernel != out->kernel) {
    cli_error(cmd, "GPU profile %s is for kernel %s, not %s (give the %s profile, or --kernel %s)",
              label, pk, fm_kernel_get(kernel)->name, fm_kernel_get(kernel)->name, pk);
    return -1;
  }
  if (!fm_profile_coef(out, FM_PASS_FWD, head_dim)) {
    char have[64] = "";
    for (int i = 0; i < out->nfwd; i++)
      snprintf(have + strlen(have), sizeof have - strlen(have), "%s%d", i ? ", " : "", out->fwd[i].head_dim);
    cli_error(cmd, "GPU profile %s has no coefficients for head dim %d (it has: %s)", label,
              head_dim, have[0] ? have : "none");
    return -1;
  }
  return 0;
}

int timing_profile_load(const char *cmd, const char *gpu, fm_kernel_id kernel, int32_t head_dim,
                        fm_gpu_profile *out, char *note, size_t note_cap) {
  char path[4096], names[1024];
  note[0] = 0;
  if (gpu) return load_checked(cmd, gpu, kernel, head_dim, out);
  fm_kernel_id want = kernel;
  if (want == FM_KERNEL_AUTO && fm_kernel_auto(-1, -1, &want, NULL) != FM_OK) want = FM_KERNEL_SM80;
  char name[64];
  snprintf(name, sizeof name, "h200-%s", fm_kernel_get(want)->name);
  if (!profile_path(name, path, sizeof path)) return load_checked(cmd, name, kernel, head_dim, out);
  if (kernel == FM_KERNEL_AUTO) /* the next kernel by preference that has an H200 profile */
    for (int pref = fm_kernel_get(want)->preference - 1; pref >= 0; pref--)
      for (int k = 0; k < FM_NKERNELS; k++) {
        const fm_kernel_desc *d = fm_kernel_get((fm_kernel_id)k);
        char alt[64];
        snprintf(alt, sizeof alt, "h200-%s", d->name);
        if (d->preference != pref || profile_path(alt, path, sizeof path)) continue;
        snprintf(note, note_cap, "fmsim %s: note: no H200 profile for kernel %s yet (%s.json); "
                 "predicting for kernel %s with %s", cmd, fm_kernel_get(want)->name, name, d->name, alt);
        return load_checked(cmd, alt, FM_KERNEL_AUTO, head_dim, out);
      }
  known_profiles(names, sizeof names);
  cli_error(cmd, "no H200 profile for kernel %s (%s/gpu/%s.json; profiles: %s): fit one with "
            "fmsim calibrate, or give --gpu", fm_kernel_get(want)->name, FM_DATA_DIR, name, names);
  return -1;
}

void timing_gpu_short_name(const char *device, char *out, size_t cap) {
  static const char *const vendor[] = {"nvidia", "geforce", "tesla", "quadro"};
  char word[128];
  size_t at = 0;
  int digit = 0;
  out[0] = 0;
  for (const char *p = device; *p && !digit && cap > 1;) {
    size_t n = 0;
    while (*p == ' ') p++;
    while (*p && *p != ' ' && n + 1 < sizeof word) word[n++] = (char)tolower((unsigned char)*p++);
    while (*p && *p != ' ') p++;
    word[n] = 0;
    int skip = 0;
    for (size_t v = 0; v < sizeof vendor / sizeof vendor[0]; v++) skip |= !strcmp(word, vendor[v]);
    for (size_t i = 0; !skip && i < n && isalnum((unsigned char)word[i]) && at + 1 < cap; i++) {
      digit |= isdigit((unsigned char)word[i]) != 0;
      out[at++] = word[i];
    }
    out[at] = 0;
  }
}

int timing_default_profile(const char *device, fm_kernel_id kernel, char *name, size_t name_cap,
                           char *path, size_t path_cap) {
  char gpu[64];
  timing_gpu_short_name(device, gpu, sizeof gpu);
  if (!gpu[0]) return 0;
  snprintf(name, name_cap, "%s-%s", gpu, fm_kernel_get(kernel)->name);
  snprintf(path, path_cap, "%s/gpu/%s.json", FM_DATA_DIR, name);
  return is_file(path);
}

fm_status timing_predict(const fm_gpu_profile *prof, const fm_colmask *m, const fm_timing_problem *pb,
                         fm_timing_result *out, fm_err *err) {
  const fm_timing_coef *c = fm_profile_coef(prof, pb->pass, pb->head_dim);
  if (!c && pb->pass == FM_PASS_BWD && prof->nbwd == 0)
    return fm_fail(err, FM_EUNSUPPORTED, "%s has no backward fit", prof->name);
  if (!c)
    return fm_fail(err, FM_EUNSUPPORTED, "%s has no %s fit for head dim %d", prof->name,
                   fm_pass_name(pb->pass), pb->head_dim);
  fm_timing_work w;
  fm_status st = fm_timing_work_init(&w, m, c->br, c->bc, err);
  if (st == FM_OK) st = fm_timing_predict(prof, &w, pb, out, err);
  fm_timing_work_free(&w);
  return st;
}

int timing_cli_predict_mask(const char *cmd, const fm_gpu_profile *prof, const fm_colmask *m,
                            int64_t batch, int64_t heads, int32_t head_dim, fm_json *j) {
  const fm_timing_coef *c = fm_profile_coef(prof, FM_PASS_FWD, head_dim);
  fm_timing_result r;
  fm_timing_problem pb = {.batch = batch, .heads = heads, .head_dim = head_dim,
                          .pass = FM_PASS_FWD, .variant = FM_VARIANT_SKIP};
  fm_err err;
  if (timing_predict(prof, m, &pb, &r, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  const char *kname = fm_kernel_get(prof->kernel)->name;
  if (j) {
    fm_json_object(j, "predicted");
    fm_json_string(j, "profile", prof->name);
    fm_json_string(j, "gpu", prof->gpu);
    fm_json_string(j, "kernel", kname);
    fm_json_int(j, "head_dim", head_dim);
    fm_json_int(j, "br", c->br);
    fm_json_int(j, "bc", c->bc);
    fm_json_double(j, "time_ms", r.time_us / 1e3);
    fm_json_double(j, "tflops", r.tflops);
    fm_json_end(j);
  } else {
    printf("predicted   %.3f ms forward on %s (kernel %s, head dim %d, %d x %d tiles, %.1f "
           "TFLOP/s; fmsim predict tells more)\n", r.time_us / 1e3, prof->gpu, kname, head_dim,
           c->br, c->bc, r.tflops);
  }
  return 0;
}

/* What a trace's summary.json says of its mask (docs/DESIGN.md, "Traces"). */
typedef struct trace_shape {
  int causal;                   /* -1: absent */
  int64_t sq, sk, batch, heads, sets; /* sets 0: absent */
} trace_shape;

/* Reads the summary's format, version and mask shape; 0, or -1 after printing. */
static int trace_summary(const char *cmd, const char *dir, trace_shape *t) {
  char path[4096];
  fm_err err;
  fm_jdoc *d = NULL;
  if (snprintf(path, sizeof path, "%s/summary.json", dir) >= (int)sizeof path) {
    cli_error(cmd, "--trace %s: path too long", dir);
    return -1;
  }
  if (fm_jdoc_load(path, &d, &err) != FM_OK) {
    cli_error(cmd, "--trace: %s", err.msg);
    return -1;
  }
  const fm_jv *root = fm_jdoc_root(d);
  const char *format = fm_jv_string(fm_jv_get(root, "format"));
  double version = fm_jv_number(fm_jv_get(root, "version"), 0);
  t->causal = fm_jv_bool(fm_jv_get(root, "causal"), -1);
  /* integers read saturating: no float-to-int overflow (fm_jsonr.h) */
  t->sk = fm_jv_int64(fm_jv_get(root, "seqlen_k"), 0);
  t->sq = fm_jv_int64(fm_jv_get(root, "seqlen_q"), t->sk);
  t->batch = fm_jv_int64(fm_jv_get(root, "batch"), 1);
  t->heads = fm_jv_int64(fm_jv_get(root, "heads"), 1);
  t->sets = fm_jv_int64(fm_jv_get(root, "mask_sets"), 0);
  int fmt_ok = format && !strcmp(format, FM_TRACE_FORMAT);
  fm_jdoc_free(d);
  const char *why = !fmt_ok ? "its \"format\" is not \"" FM_TRACE_FORMAT "\" (not an fmsim trace?)"
                    : version > FM_TRACE_VERSION ? "its version is newer than this fmsim reads"
                    : t->causal < 0 ? "it has no causal flag (not an fmsim trace?)"
                    : t->sk < 1 || t->sq < 1 || t->sk > FM_MAX_SEQLEN || t->sq > FM_MAX_SEQLEN
                        ? "its seqlen_q / seqlen_k are missing or out of range"
                    : t->batch < 1 || t->heads < 1 ? "its batch / heads are out of range" : NULL;
  if (!why) return 0;
  cli_error(cmd, "--trace %s: summary.json: %s", dir, why);
  return -1;
}

int timing_load_trace(const char *cmd, const char *dir, fm_colmask **out, int64_t *batch,
                      int64_t *heads) {
  char path[4096];
  fm_err err;
  trace_shape t;
  *out = NULL;
  if (trace_summary(cmd, dir, &t)) return -1;
  snprintf(path, sizeof path, "%s/columns.npy", dir);
  /* the files of one trace agree: columns.npy ([nb, nh, Sk, 4]) is the mask
     summary.json describes, checked on its header before it is read */
  fm_npy_header h;
  if (fm_npy_read_header_path(path, &h, &err) != FM_OK) {
    cli_error(cmd, "--trace %s: %s", dir, err.msg);
    return -1;
  }
  int64_t nb = h.ndim == 4 ? h.shape[0] : 0, nh = h.ndim == 4 ? h.shape[1] : 0;
  int64_t sk = h.ndim == 4 ? h.shape[2] : 0;
  if (h.ndim != 4 || sk != t.sk || (nb != 1 && nb != t.batch) || (nh != 1 && nh != t.heads) ||
      (t.sets && nb * nh != t.sets)) {
    cli_error(cmd, "--trace %s: columns.npy holds %lld x %lld vector sets of Sk = %lld, but "
              "summary.json says Sk = %lld, batch %lld, heads %lld, %lld mask sets (files of "
              "different runs?)", dir, (long long)nb, (long long)nh, (long long)sk, (long long)t.sk,
              (long long)t.batch, (long long)t.heads, (long long)t.sets);
    return -1;
  }
  fm_intervals_opts lo = {.causal = t.causal, .sq = t.sq, .strict = 1, .four_vectors = 1};
  if (fm_intervals_load(path, &lo, out, NULL, &err) != FM_OK) {
    cli_error(cmd, "--trace %s: %s", dir, err.msg);
    return -1;
  }
  *batch = t.batch;
  *heads = t.heads;
  return 0;
}

double timing_items(fm_pass pass, int64_t sq, int64_t sk, int32_t br, int32_t bc, int64_t batch,
                    int64_t heads) {
  double per_pair = pass == FM_PASS_BWD ? (double)((sk + bc - 1) / bc) : (double)((sq + br - 1) / br);
  return per_pair * (double)batch * (double)heads;
}

int timing_work_check(const char *cmd, const char *what, double items, int confirmed) {
  if (items <= TIMING_MAX_ITEMS || confirmed) return 0;
  double s = items / 30e6; /* about 30 M items a second (one core) */
  char eta[32];
  if (s < 3600) snprintf(eta, sizeof eta, "%.0f minutes", s / 60);
  else if (s < 3 * 86400) snprintf(eta, sizeof eta, "%.1f hours", s / 3600);
  else snprintf(eta, sizeof eta, "%.0f days", s / 86400);
  cli_error(cmd, "%s: %.3g work items for the timing model, above the bound of 2^28 (%.0f, about "
            "ten seconds); pass %s to run it (about %s)", what, items, TIMING_MAX_ITEMS,
            TIMING_CONFIRM_FLAG, eta);
  return -1;
}

/* ------------------------------------------------------------ the mask of a timing command */

void timing_mask_init(timing_mask *t) {
  memset(t, 0, sizeof *t);
  cli_mask_opts_init(&t->mask);
  t->io.causal = -1;
}

int timing_mask_opt(const char *cmd, void *opts, int opt, const char *arg) {
  timing_mask *t = opts;
  if (opt == 'M' || opt == 'T') {
    *(opt == 'M' ? &t->mask_file : &t->trace) = arg;
    return 1;
  }
  int r = cli_interval_opt(cmd, &t->io, opt, arg);
  if (r == 0) r = cli_mask_opt(cmd, &t->mask, opt, arg);
  t->batch_given |= r > 0 && opt == 'b';
  t->heads_given |= r > 0 && opt == 'H';
  return r;
}

/* A .npy that is not an interval file: a dense mask for the dense checker
 * (which gives the error of a file it cannot read). */
static int is_dense(const char *path) {
  fm_npy_header h;
  if (fm_npy_read_header_path(path, &h, NULL) != FM_OK) return 0;
  return !fm_intervals_header_fits(&h);
}

int timing_mask_check(const char *cmd, timing_mask *t) {
  if ((t->mask.family != NULL) + (t->mask_file != NULL) + (t->trace != NULL) != 1) {
    cli_error(cmd, "give one mask: --family NAME, --mask FILE or --trace DIR");
    return -1;
  }
  if (t->mask_file && is_dense(t->mask_file)) {
    if (t->io.causal >= 0 || t->io.sq || t->io.strict) {
      cli_error(cmd, "%s is a dense mask: --causal, --bidir, --seqlen-q and --strict go with an "
                "interval file", t->mask_file);
      return -1;
    }
    t->dense = 1;
  } else if (t->mask_file &&
             cli_intervals_causal(cmd, t->mask_file, CLI_FLAG_REQUIRED, &t->io.causal)) {
    return -1;
  }
  if (!t->mask_file && (t->io.causal >= 0 || t->io.sq || t->io.strict)) {
    cli_error(cmd, "--causal, --bidir, --seqlen-q and --strict go with --mask (a family or a "
              "trace fixes them)");
    return -1;
  }
  return 0;
}

/* The mask of a dense file, streamed as check reads it, in its smallest
 * interval form; NULL after one line when no form holds it. */
static fm_colmask *dense_mask(const char *cmd, const char *path) {
  fm_dense_opts dopts = {.keep_intervals = 1};
  fm_dense_result *r;
  if (cli_dense_scan(cmd, path, &dopts, &r)) return NULL;
  const fm_dense_report *rep = fm_dense_result_report(r);
  fm_colmask *m = NULL;
  fm_err err;
  if (rep->form == FM_FORM_NONE)
    cli_error(cmd, "%s: no interval form holds this mask (%lld columns misfit even %s), so "
              "FlashMask cannot run it; 'fmsim check %s' says where and what to do",
              path, (long long)rep->bad_columns, fm_form_name(rep->closest), path);
  else if (fm_dense_result_to_colmask(r, rep->form, &m, &err) != FM_OK)
    cli_error(cmd, "%s", err.msg);
  fm_dense_result_destroy(r);
  return m;
}

fm_colmask *timing_mask_build(const char *cmd, timing_mask *t) {
  fm_colmask *m = NULL;
  int64_t b, h;
  if (t->trace) {
    if (timing_load_trace(cmd, t->trace, &m, &b, &h)) return NULL;
    if (!t->batch_given) t->mask.batch = b;
    if (!t->heads_given) t->mask.heads = h;
    return m;
  }
  if (!t->mask_file) return cli_build_family(cmd, &t->mask, &m, NULL) ? NULL : m;
  if (t->dense && !(m = dense_mask(cmd, t->mask_file))) return NULL;
  if (!t->dense) {
    fm_err err;
    fm_intervals_opts lo = {.causal = t->io.causal, .sq = t->io.sq, .strict = t->io.strict};
    fm_intervals_note note;
    if (fm_intervals_load(t->mask_file, &lo, &m, &note, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      return NULL;
    }
    if (note.text[0]) cli_note(cmd, "%s", note.text);
  }
  if (!t->batch_given) t->mask.batch = fm_colmask_nb(m);
  if (!t->heads_given) t->mask.heads = fm_colmask_nh(m);
  return m;
}
