/* fmsim verify: the GPU kernels against the CPU reference, every family at
 * small sizes (see kernels/fm_attn_check.h for what one case checks). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fm_colmask.h"
#include "fm_families.h"
#include "fm_json.h"
#include "fm_kernels.h"
#include "fm_rng.h"
#include "fm_samples.h"

#ifdef FM_HAVE_CUDA
#include "fm_attn.h"
#include "fm_attn_check.h"
#endif

static const char *help =
    "usage: fmsim verify [--quick] [--json] [--seed N] [--kernel all|sm80|sm90|auto]\n"
    "                    [--pass fwd|bwd|both]\n\n"
    "Runs the FlashMask kernels on the GPU for every mask family at small sizes (odd\n"
    "sequence lengths, B and H > 1, head dims 64 and 128, per-head masks, Sq != Sk, rows\n"
    "with no visible key) and checks, per case and kernel: skip against the CPU fp64\n"
    "reference (masked rows exact, values within tolerance, GPU error at most twice the\n"
    "CPU same-precision error), noskip == skip bit for bit, the instrumented build's\n"
    "output == the plain build's and its tile classes == core's bit for bit, the\n"
    "dense-mask variant == noskip bit for bit; and, for kernels with a backward, dQ,\n"
    "dK, dV against the fp64 reference by the same rule, deterministic skip ==\n"
    "deterministic noskip bit for bit, and the instrumented backward's classes and\n"
    "gradients (kernels/fm_attn_check.h).\n\n"
    "  --kernel K every kernel the GPU runs (all, the default), one of them, or auto\n"
    "  --pass P   fwd, bwd (after its forward) or both (default: both where the kernel\n"
    "             has a backward)\n"
    "  --families LIST  only these families (comma list; \"custom\" for the Sq != Sk masks)\n"
    "  --quick    one sequence length (257) instead of three\n"
    "  --json     one JSON object on stdout instead of the listing\n"
    "  --seed N   seed of the inputs and of drawn documents (default 0)\n\n"
    "Exit status: 0 all cases pass, 1 a case fails, 2 no GPU (or a build without CUDA)\n"
    "or bad usage.\n";

#ifdef FM_HAVE_CUDA

typedef struct vcase {
  const char *family; /* NULL: a custom mask (custom kind below) */
  int custom;         /* 1: causal Sq < Sk, per-head sets; 2: bidir-4 Sq > Sk, per-batch sets,
                         empty rows */
  int32_t seqlen, batch, heads, head_dim;
} vcase;

/* Custom masks with Sq != Sk (the families are square). */
static fm_status custom_mask(int kind, uint64_t seed, fm_colmask **out, fm_err *err) {
  fm_rng rng;
  fm_rng_seed(&rng, seed, 0xc0ffee + (uint64_t)kind);
  fm_status st;
  if (kind == 1) {
    const int32_t sq = 300, sk = 700; /* causal: c_j = j - 400, clamped */
    st = fm_colmask_create(sq, sk, 1, 2, 1, out, err);
    if (st != FM_OK) return st;
    for (int32_t s = 0; s < 2; s++) {
      int32_t *lts = fm_colmask_vec(*out, s, FM_LTS);
      for (int32_t j = 0; j < sk; j++) {
        int64_t c = j - (sk - sq);
        if (c < 0) c = 0;
        int64_t x = c + fm_rng_range(&rng, 0, sq);
        lts[j] = (int32_t)(x > sq ? sq : x);
      }
    }
  } else {
    const int32_t sq = 700, sk = 300; /* rows 0 .. 139 masked in every column */
    st = fm_colmask_create(sq, sk, 2, 1, 0, out, err);
    if (st != FM_OK) return st;
    for (int32_t s = 0; s < 2; s++) {
      int32_t *lts = fm_colmask_vec(*out, s, FM_LTS), *lte = fm_colmask_vec(*out, s, FM_LTE);
      int32_t *uts = fm_colmask_vec(*out, s, FM_UTS), *ute = fm_colmask_vec(*out, s, FM_UTE);
      for (int32_t j = 0; j < sk; j++) {
        uts[j] = 0;
        ute[j] = (int32_t)fm_rng_range(&rng, 140, 260);
        lts[j] = (int32_t)fm_rng_range(&rng, 300, sq);
        lte[j] = (int32_t)fm_rng_range(&rng, lts[j], sq);
      }
    }
  }
  return fm_colmask_validate(*out, err);
}

/* 1 when name is in the comma list (NULL: every name). */
static int listed(const char *list, const char *name) {
  if (!list) return 1;
  const size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *c = strchr(p, ',');
    const size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return 1;
    if (!c) break;
    p = c + 1;
  }
  return 0;
}

static int build_cases(int quick, const char *families, vcase *cases, int cap) {
  int n = 0;
  for (int f = 0; f < fm_family_count(); f++) {
    const char *name = fm_family_at(f)->name;
    if (!listed(families, name)) continue;
    if (quick) {
      vcase q1 = {name, 0, 257, 2, 3, 128}, q2 = {name, 0, 257, 2, 3, 64};
      if (n + 2 <= cap) cases[n++] = q1, cases[n++] = q2;
    } else {
      vcase list[] = {{name, 0, 128, 2, 2, 64},
                      {name, 0, 257, 2, 3, 128},
                      {name, 0, 257, 2, 3, 64},
                      {name, 0, 1000, 1, 2, 128},
                      {name, 0, 1000, 1, 2, 64}};
      for (size_t i = 0; i < sizeof list / sizeof list[0] && n < cap; i++) cases[n++] = list[i];
    }
  }
  vcase extra[] = {{NULL, 1, 0, 2, 2, 128}, {NULL, 2, 0, 2, 2, 64},
                   {NULL, 1, 0, 2, 2, 64},  {NULL, 2, 0, 2, 2, 128}};
  int nextra = !listed(families, "custom") ? 0 : quick ? 2 : 4;
  for (int i = 0; i < nextra && n < cap; i++) cases[n++] = extra[i];
  return n;
}

typedef struct verify_opts {
  const char *families; /* --families: a comma list (and "custom"), NULL for all */
  int quick, json, all_kernels;
  int64_t seed;
  fm_kernel_id want;
  fm_pass pass; /* 0: both where the kernel has a backward */
} verify_opts;

/* verify's options: 1 taken, -1 a bad value (printed), 0 none of them. */
static int verify_opt(const char *cmd, void *v, int opt, const char *arg) {
  verify_opts *o = v;
  fm_err err;
  switch (opt) {
  case 'q': o->quick = 1; return 1;
  case 'j': o->json = 1; return 1;
  case 's': return cli_int(cmd, "--seed", arg, 0, INT64_MAX, &o->seed) ? -1 : 1;
  case 'k':
    o->all_kernels = !strcmp(arg, "all");
    if (o->all_kernels || fm_kernel_parse(arg, &o->want, &err) == FM_OK) return 1;
    cli_error(cmd, "--kernel: %s (or all)", err.msg);
    return -1;
  case 'f':
    o->families = arg;
    for (const char *p = arg; *p;) { /* every name must be a family or "custom" */
      const char *c = strchr(p, ',');
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)(c ? c - p : (long)strlen(p)), p);
      if (strcmp(name, "custom") && !fm_family_find(name)) {
        cli_unknown_name(cmd, "--families: ", "family", name, fm_family_closest(name),
                         "fmsim families lists them; or custom");
        return -1;
      }
      p = c ? c + 1 : p + strlen(p);
    }
    return 1;
  case 'p':
    if (fm_pass_parse(arg, &o->pass, &err) == FM_OK) return 1;
    cli_error(cmd, "--pass: %s", err.msg);
    return -1;
  }
  return 0;
}

/* 0 parsed, -1 --help printed, FM_EXIT_USAGE after an error (printed). */
static int parse_opts(int argc, char **argv, verify_opts *o) {
  static const struct option longopts[] = {{"quick", no_argument, 0, 'q'},
                                           {"json", no_argument, 0, 'j'},
                                           {"seed", required_argument, 0, 's'},
                                           {"kernel", required_argument, 0, 'k'},
                                           {"pass", required_argument, 0, 'p'},
                                           {"families", required_argument, 0, 'f'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":h", .longopts = longopts, .own = verify_opt,
                            .help = help};
  *o = (verify_opts){.all_kernels = 1, .want = FM_KERNEL_AUTO};
  int r = cli_parse_opts("verify", argc, argv, &def, o);
  return r > 0 ? -1 : r < 0 ? FM_EXIT_USAGE : 0;
}

/* The kernels to check: every one the device runs, or the one asked for. */
static int pick_kernels(const verify_opts *o, fm_kernel_id *kernels) {
  int n = 0;
  fm_err err;
  if (!o->all_kernels) {
    if (fm_attn_device_kernel(o->want, &kernels[0], &err) != FM_OK) {
      cli_error("verify", "%s", err.msg);
      return -1;
    }
    return 1;
  }
  for (int k = 0; k < FM_NKERNELS; k++)
    if (fm_attn_device_kernel((fm_kernel_id)k, &kernels[n], NULL) == FM_OK) n++;
  return n;
}

/* The mask of case vc (the caller destroys it) and its label; 0, or -1 after printing. */
static int case_mask(const vcase *vc, int ci, int64_t seed, const fm_sample_set *samples, fm_colmask **m,
                     char *name, size_t cap) {
  fm_err err;
  fm_status st;
  if (vc->family) {
    fm_family_request req = {.family = vc->family, .seqlen = vc->seqlen, .batch = vc->batch,
                             .heads = vc->heads, .seed = (uint64_t)seed, .sample = -1, .samples = samples};
    st = fm_family_build(&req, m, NULL, &err);
    snprintf(name, cap, "%s S=%d", vc->family, vc->seqlen);
  } else {
    st = custom_mask(vc->custom, (uint64_t)seed, m, &err);
    snprintf(name, cap, "%s", vc->custom == 1 ? "custom causal Sq<Sk per-head" : "custom bidir-4 Sq>Sk empty rows");
  }
  if (st == FM_OK) return 0;
  cli_error("verify", "case %d (%s): cannot build the mask: %s", ci, vc->family ? vc->family : "custom", err.msg);
  return -1;
}

static void report_json(fm_json *j, const fm_check_case *cc, const fm_check_result *r) {
  const fm_colmask *m = cc->mask;
  fm_json_object(j, NULL);
  fm_json_string(j, "name", cc->name);
  fm_json_string(j, "kernel", fm_kernel_get(cc->kernel)->name);
  fm_json_string(j, "pass", fm_pass_name(cc->pass));
  fm_json_int(j, "seqlen_q", fm_colmask_sq(m));
  fm_json_int(j, "seqlen_k", fm_colmask_sk(m));
  fm_json_int(j, "batch", cc->batch);
  fm_json_int(j, "heads", cc->heads);
  fm_json_int(j, "head_dim", cc->head_dim);
  fm_json_int(j, "mask_sets", fm_colmask_nsets(m));
  fm_json_bool(j, "ok", r->ok);
  fm_json_double(j, "err_gpu", r->err_gpu);
  fm_json_double(j, "err_cpu_same_precision", r->err_cpu);
  fm_json_double(j, "lse_err", r->lse_err);
  fm_json_int(j, "rows_empty", r->rows_empty);
  fm_json_int(j, "tiles", r->tiles);
  fm_json_int(j, "tiles_masked", r->tiles_masked);
  fm_json_int(j, "tiles_partial", r->tiles_partial);
  fm_json_bool(j, "skip_noskip_identical", r->skip_noskip_identical);
  fm_json_bool(j, "instrumented_identical", r->instr_identical);
  fm_json_bool(j, "classes_identical", r->classes_identical);
  fm_json_bool(j, "cycles_ok", r->cycles_ok);
  if (r->dense_identical >= 0) fm_json_bool(j, "dense_identical", r->dense_identical);
  if (r->mask_methods_identical >= 0) fm_json_bool(j, "mask_methods_identical", r->mask_methods_identical);
  if (r->bwd_ran) {
    fm_json_object(j, "backward");
    static const char *const names[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; t++) {
      char key[32];
      snprintf(key, sizeof key, "err_gpu_%s", names[t]);
      fm_json_double(j, key, r->bwd_err_gpu[t]);
      snprintf(key, sizeof key, "err_cpu_%s", names[t]);
      fm_json_double(j, key, r->bwd_err_cpu[t]);
    }
    fm_json_int(j, "tiles", r->bwd_tiles);
    fm_json_int(j, "tiles_masked", r->bwd_tiles_masked);
    fm_json_bool(j, "deterministic_skip_noskip_identical", r->bwd_det_identical);
    fm_json_bool(j, "instrumented_identical", r->bwd_instr_identical);
    fm_json_bool(j, "classes_identical", r->bwd_classes_identical);
    fm_json_bool(j, "cycles_ok", r->bwd_cycles_ok);
    if (r->bwd_mask_methods_identical >= 0) fm_json_bool(j, "mask_methods_identical", r->bwd_mask_methods_identical);
    fm_json_end(j);
  }
  if (!r->ok) fm_json_string(j, "failure", r->detail);
  fm_json_end(j);
}

static void report_human(const fm_check_case *cc, const fm_check_result *r) {
  const fm_colmask *m = cc->mask;
  printf("%s %-4s %-34s D=%-3d Sq=%-4d Sk=%-4d B=%d H=%d sets=%-2d err %.2e (cpu %.2e) lse %.1e "
         "masked %lld/%lld partial %lld empty rows %lld\n",
         r->ok ? "PASS" : "FAIL", fm_kernel_get(cc->kernel)->name, cc->name, cc->head_dim, fm_colmask_sq(m),
         fm_colmask_sk(m), cc->batch, cc->heads, fm_colmask_nsets(m), r->err_gpu, r->err_cpu, r->lse_err,
         (long long)r->tiles_masked, (long long)r->tiles, (long long)r->tiles_partial, (long long)r->rows_empty);
  if (r->bwd_ran)
    printf("     backward: dQ %.2e (cpu %.2e) dK %.2e (cpu %.2e) dV %.2e (cpu %.2e), masked %lld/%lld, "
           "deterministic skip == noskip: %s\n",
           r->bwd_err_gpu[0], r->bwd_err_cpu[0], r->bwd_err_gpu[1], r->bwd_err_cpu[1], r->bwd_err_gpu[2],
           r->bwd_err_cpu[2], (long long)r->bwd_tiles_masked, (long long)r->bwd_tiles,
           r->bwd_det_identical ? "yes" : "NO");
  if (!r->ok) printf("     %s\n", r->detail);
}

/* Checks case cc on kernel k; 0 pass, 1 fail, -1 could not run. */
static int check_one(fm_check_case *cc, fm_kernel_id k, fm_pass want, fm_json *j, int json) {
  const fm_kernel_desc *d = fm_kernel_get(k);
  cc->kernel = k;
  cc->pass = want ? want : (d->passes & FM_PASS_BWD ? FM_PASS_BOTH : FM_PASS_FWD);
  if ((cc->pass & FM_PASS_BWD) && !(d->passes & FM_PASS_BWD)) cc->pass = FM_PASS_FWD;
  fm_check_result r;
  fm_err err;
  if (fm_attn_check_run(cc, &r, &err) != FM_OK) {
    cli_error("verify", "case %s D=%d kernel %s: could not run: %s", cc->name, cc->head_dim, d->name, err.msg);
    return -1;
  }
  if (json) report_json(j, cc, &r);
  else report_human(cc, &r);
  return r.ok ? 0 : 1;
}

int cmd_verify(int argc, char **argv) {
  verify_opts o;
  int bad = parse_opts(argc, argv, &o);
  if (bad) return bad < 0 ? FM_EXIT_OK : bad;
  fm_err err;
  char dev[256];
  if (fm_attn_device_info(dev, sizeof dev, &err) != FM_OK) {
    fprintf(stderr, "fmsim verify: no GPU to verify on (%s)\n", err.msg);
    return FM_EXIT_USAGE;
  }
  fm_kernel_id kernels[FM_NKERNELS];
  const int nkernels = pick_kernels(&o, kernels);
  if (nkernels < 0) return FM_EXIT_USAGE;
  fm_sample_set samples;
  if (fm_samples_builtin(&samples, &err) != FM_OK) {
    cli_error("verify", "%s", err.msg);
    return FM_EXIT_FAIL;
  }
  vcase cases[128];
  const int ncases = build_cases(o.quick, o.families, cases, 128);
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "device", dev);
  fm_json_bool(&j, "quick", o.quick);
  fm_json_int(&j, "seed", o.seed);
  fm_json_array(&j, "cases");
  if (!o.json) {
    printf("fmsim verify on %s: %d cases x %d kernel%s (", dev, ncases, nkernels, nkernels > 1 ? "s" : "");
    for (int k = 0; k < nkernels; k++) printf("%s%s", k ? ", " : "", fm_kernel_get(kernels[k])->name);
    printf(")\n");
  }
  int failed = 0, errors = 0;
  for (int ci = 0; ci < ncases; ci++) {
    fm_check_case cc = {.batch = cases[ci].batch, .heads = cases[ci].heads, .head_dim = cases[ci].head_dim,
                        .seed = (uint64_t)o.seed * 1000003u + (uint64_t)ci, .check_dense = 1};
    fm_colmask *m = NULL;
    if (case_mask(&cases[ci], ci, o.seed, &samples, &m, cc.name, sizeof cc.name)) {
      errors++;
      continue;
    }
    cc.mask = m;
    for (int k = 0; k < nkernels; k++) {
      const int rc = check_one(&cc, kernels[k], o.pass, &j, o.json);
      failed += rc == 1;
      errors += rc < 0;
    }
    fm_colmask_destroy(m);
  }
  fm_samples_free(&samples);
  fm_json_end(&j);
  fm_json_int(&j, "failed", failed);
  fm_json_int(&j, "errors", errors);
  if (o.json) cli_print_json(&j);
  else {
    printf("%s: %d of %d case runs pass%s\n", failed || errors ? "FAIL" : "OK", ncases * nkernels - failed - errors,
           ncases * nkernels, errors ? " (some could not run)" : "");
    fm_json_free(&j);
  }
  return failed || errors ? FM_EXIT_FAIL : FM_EXIT_OK;
}

#else

int cmd_verify(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(help, stdout);
      return FM_EXIT_OK;
    }
  fprintf(stderr, "fmsim verify: this build has no CUDA kernels (nvcc was not found at configure time)\n");
  return FM_EXIT_USAGE;
}

#endif
