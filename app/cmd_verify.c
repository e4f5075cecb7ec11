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
    "usage: fmsim verify [--quick] [--json] [--seed N] [--kernel all|sm80|sm90|auto]\n\n"
    "Runs the FlashMask forward kernels on the GPU for every mask family at small sizes\n"
    "(odd sequence lengths, B and H > 1, head dims 64 and 128, per-head masks, Sq != Sk,\n"
    "rows with no visible key) and checks, per case: skip against the CPU fp64 reference\n"
    "(masked rows exact, values within tolerance, GPU error at most twice the CPU\n"
    "same-precision error), noskip == skip bit for bit, the instrumented build's output\n"
    "== the plain build's and its tile classes == core's classes bit for bit, and the\n"
    "dense-mask variant == noskip bit for bit.\n\n"
    "  --kernel K every kernel the GPU runs (all, the default), one of them, or auto\n"
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

static int build_cases(int quick, vcase *cases, int cap) {
  int n = 0;
  for (int f = 0; f < fm_family_count(); f++) {
    const char *name = fm_family_at(f)->name;
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
  int nextra = quick ? 2 : 4;
  for (int i = 0; i < nextra && n < cap; i++) cases[n++] = extra[i];
  return n;
}

int cmd_verify(int argc, char **argv) {
  static const struct option longopts[] = {{"quick", no_argument, 0, 'q'},
                                           {"json", no_argument, 0, 'j'},
                                           {"seed", required_argument, 0, 's'},
                                           {"kernel", required_argument, 0, 'k'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  int quick = 0, json = 0, opt, all_kernels = 1;
  int64_t seed = 0;
  fm_kernel_id want = FM_KERNEL_AUTO;
  fm_err err;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    if (opt == 'q') quick = 1;
    else if (opt == 'j') json = 1;
    else if (opt == 's') {
      if (cli_int("verify", "--seed", optarg, 0, INT64_MAX, &seed)) return FM_EXIT_USAGE;
    } else if (opt == 'k') {
      all_kernels = !strcmp(optarg, "all");
      if (!all_kernels && fm_kernel_parse(optarg, &want, &err) != FM_OK) {
        cli_error("verify", "--kernel: %s (or all)", err.msg);
        return FM_EXIT_USAGE;
      }
    } else if (opt == 'h') {
      fputs(help, stdout);
      return FM_EXIT_OK;
    } else {
      return cli_bad_option("verify", opt, argv);
    }
  }
  if (optind < argc) {
    cli_error("verify", "unexpected argument '%s'", argv[optind]);
    return FM_EXIT_USAGE;
  }
  char dev[256];
  if (fm_attn_device_info(dev, sizeof dev, &err) != FM_OK) {
    fprintf(stderr, "fmsim verify: no GPU to verify on (%s)\n", err.msg);
    return FM_EXIT_USAGE;
  }
  /* the kernels to check: every one the device runs, or the one asked for */
  fm_kernel_id kernels[FM_NKERNELS];
  int nkernels = 0;
  for (int k = 0; k < FM_NKERNELS; k++) {
    fm_kernel_id id;
    if (all_kernels ? fm_attn_device_kernel((fm_kernel_id)k, &id, NULL) == FM_OK : k == 0) {
      if (!all_kernels && fm_attn_device_kernel(want, &id, &err) != FM_OK) {
        cli_error("verify", "%s", err.msg);
        return FM_EXIT_USAGE;
      }
      kernels[nkernels++] = id;
    }
  }
  fm_sample_set samples;
  if (fm_samples_builtin(&samples, &err) != FM_OK) {
    cli_error("verify", "%s", err.msg);
    return FM_EXIT_FAIL;
  }
  vcase cases[128];
  int ncases = build_cases(quick, cases, 128);
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "device", dev);
  fm_json_bool(&j, "quick", quick);
  fm_json_int(&j, "seed", seed);
  fm_json_array(&j, "cases");
  if (!json) {
    printf("fmsim verify on %s: %d cases x %d kernel%s (", dev, ncases, nkernels, nkernels > 1 ? "s" : "");
    for (int k = 0; k < nkernels; k++) printf("%s%s", k ? ", " : "", fm_kernel_get(kernels[k])->name);
    printf(")\n");
  }
  int failed = 0, errors = 0;
  for (int ci = 0; ci < ncases; ci++) {
    const vcase *vc = &cases[ci];
    fm_colmask *m = NULL;
    fm_check_case cc;
    memset(&cc, 0, sizeof cc);
    fm_status st;
    if (vc->family) {
      fm_family_request req = {vc->family, vc->seqlen, vc->batch, vc->heads, (uint64_t)seed, -1,
                               &samples,   0,          NULL};
      st = fm_family_build(&req, &m, NULL, &err);
      snprintf(cc.name, sizeof cc.name, "%s S=%d", vc->family, vc->seqlen);
    } else {
      st = custom_mask(vc->custom, (uint64_t)seed, &m, &err);
      snprintf(cc.name, sizeof cc.name, "%s", vc->custom == 1 ? "custom causal Sq<Sk per-head"
                                                              : "custom bidir-4 Sq>Sk empty rows");
    }
    if (st != FM_OK) {
      cli_error("verify", "case %d (%s): cannot build the mask: %s", ci,
                vc->family ? vc->family : "custom", err.msg);
      errors++;
      continue;
    }
    cc.mask = m;
    cc.batch = vc->batch;
    cc.heads = vc->heads;
    cc.head_dim = vc->head_dim;
    cc.seed = (uint64_t)seed * 1000003u + (uint64_t)ci;
    cc.check_dense = 1;
    for (int ki = 0; ki < nkernels; ki++) {
    cc.kernel = kernels[ki];
    const char *kname = fm_kernel_get(cc.kernel)->name;
    fm_check_result r;
    st = fm_attn_check_run(&cc, &r, &err);
    if (st != FM_OK) {
      cli_error("verify", "case %s D=%d kernel %s: could not run: %s", cc.name, vc->head_dim, kname,
                err.msg);
      errors++;
      continue;
    }
    if (!r.ok) failed++;
    if (json) {
      fm_json_object(&j, NULL);
      fm_json_string(&j, "name", cc.name);
      fm_json_string(&j, "kernel", kname);
      fm_json_int(&j, "seqlen_q", fm_colmask_sq(m));
      fm_json_int(&j, "seqlen_k", fm_colmask_sk(m));
      fm_json_int(&j, "batch", vc->batch);
      fm_json_int(&j, "heads", vc->heads);
      fm_json_int(&j, "head_dim", vc->head_dim);
      fm_json_int(&j, "mask_sets", fm_colmask_nsets(m));
      fm_json_bool(&j, "ok", r.ok);
      fm_json_double(&j, "err_gpu", r.err_gpu);
      fm_json_double(&j, "err_cpu_same_precision", r.err_cpu);
      fm_json_double(&j, "lse_err", r.lse_err);
      fm_json_int(&j, "rows_empty", r.rows_empty);
      fm_json_int(&j, "tiles", r.tiles);
      fm_json_int(&j, "tiles_masked", r.tiles_masked);
      fm_json_int(&j, "tiles_partial", r.tiles_partial);
      fm_json_bool(&j, "skip_noskip_identical", r.skip_noskip_identical);
      fm_json_bool(&j, "instrumented_identical", r.instr_identical);
      fm_json_bool(&j, "classes_identical", r.classes_identical);
      fm_json_bool(&j, "cycles_ok", r.cycles_ok);
      if (r.dense_identical >= 0) fm_json_bool(&j, "dense_identical", r.dense_identical);
      if (!r.ok) fm_json_string(&j, "failure", r.detail);
      fm_json_end(&j);
    } else {
      printf("%s %-4s %-34s D=%-3d Sq=%-4d Sk=%-4d B=%d H=%d sets=%-2d err %.2e (cpu %.2e) lse %.1e "
             "masked %lld/%lld partial %lld empty rows %lld\n",
             r.ok ? "PASS" : "FAIL", kname, cc.name, vc->head_dim, fm_colmask_sq(m), fm_colmask_sk(m),
             vc->batch, vc->heads, fm_colmask_nsets(m), r.err_gpu, r.err_cpu, r.lse_err,
             (long long)r.tiles_masked, (long long)r.tiles, (long long)r.tiles_partial,
             (long long)r.rows_empty);
      if (!r.ok) printf("     %s\n", r.detail);
    }
    }
    fm_colmask_destroy(m);
  }
  fm_samples_free(&samples);
  fm_json_end(&j);
  fm_json_int(&j, "failed", failed);
  fm_json_int(&j, "errors", errors);
  fm_json_end(&j);
  if (json) fputs(j.buf, stdout);
  else
    printf("%s: %d of %d case runs pass%s\n", failed || errors ? "FAIL" : "OK",
           ncases * nkernels - failed - errors, ncases * nkernels, errors ? " (some could not run)" : "");
  fm_json_free(&j);
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
