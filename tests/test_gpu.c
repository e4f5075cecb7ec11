/* GPU tests of the FlashMask forward kernels (CTest label `gpu`): the checks of
 * kernels/fm_attn_check.h (CPU fp64 reference with the tolerance rule of
 * docs/DESIGN.md, "Style", rule 1; skip == noskip bit for bit, instrumented classes == core
 * classes, dense == noskip) on every family, on random interval masks with odd
 * lengths and Sq != Sk, and the argument checks of the host API.
 * Without a CUDA device every test skips, saying why, but the mask method's
 * checks, which run before any CUDA call. CUDA is initialised inside the
 * test bodies only, after Criterion has forked. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "fm_attn.h"
#include "fm_attn_check.h"
#include "fm_families.h"
#include "fm_samples.h"
#include "fm_test_util.h"

static void need_device(void) {
  fm_err err;
  char dev[256];
  if (fm_attn_device_info(dev, sizeof dev, &err) != FM_OK) cr_skip_test("no GPU: %s", err.msg);
}

static void run_case(const char *name, const fm_colmask *m, int32_t b, int32_t h, int32_t d,
                     uint64_t seed) {
  fm_check_case c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "%s", name);
  c.mask = m;
  c.batch = b;
  c.heads = h;
  c.head_dim = d;
  c.seed = seed;
  c.check_dense = 1;
  fm_check_result r;
  fm_err err;
  fm_status st = fm_attn_check_run(&c, &r, &err);
  cr_assert_eq(st, FM_OK, "%s D=%d: could not run: %s", name, d, err.msg);
  cr_expect(r.ok, "%s D=%d Sq=%d Sk=%d: %s", name, d, fm_colmask_sq(m), fm_colmask_sk(m),
            r.detail);
}

Test(gpu, every_family_both_head_dims) {
  need_device();
  fm_sample_set samples;
  fm_err err;
  cr_assert_eq(fm_samples_builtin(&samples, &err), FM_OK);
  for (int f = 0; f < fm_family_count(); f++) {
    const char *fam = fm_family_at(f)->name;
    for (int di = 0; di < 2; di++) {
      int32_t d = di ? 64 : 128, s = di ? 200 : 257;
      fm_colmask *m = NULL;
      fm_family_request req = {fam, s, 2, 3, 11, -1, &samples, 0, NULL};
      cr_assert_eq(fm_family_build(&req, &m, NULL, &err), FM_OK, "%s: %s", fam, err.msg);
      run_case(fam, m, 2, 3, d, 1000 + (uint64_t)f * 2 + (uint64_t)di);
      fm_colmask_destroy(m);
    }
  }
  fm_samples_free(&samples);
}

Test(gpu, random_interval_masks) {
  need_device();
  fm_rng r;
  fm_rng_seed(&r, 42, 0);
  const int32_t lens[][2] = {{1, 1}, {17, 300}, {300, 17}, {129, 129}, {191, 450}, {513, 64}};
  for (int i = 0; i < (int)(sizeof lens / sizeof lens[0]); i++) {
    for (int causal = 0; causal < 2; causal++) {
      int32_t nb = (i & 1) ? 2 : 1, nh = (i & 2) ? 3 : 1;
      fm_colmask *m = fmt_random_mask(&r, lens[i][0], lens[i][1], nb, nh, causal);
      cr_assert_not_null(m);
      char name[64];
      snprintf(name, sizeof name, "random mask #%d causal=%d", i, causal);
      run_case(name, m, 2, 3, (i + causal) % 2 ? 64 : 128, 7000 + (uint64_t)i * 2 + causal);
      fm_colmask_destroy(m);
    }
  }
}

Test(gpu, bad_arguments) {
  need_device();
  fm_attn_problem p;
  memset(&p, 0, sizeof p);
  fm_err err;
  cr_expect_eq(fm_attn_forward(NULL, FM_VARIANT_SKIP, 0, NULL, &err), FM_EINVAL);
  p.batch = p.heads = 1;
  p.seqlen_q = p.seqlen_k = 16;
  p.head_dim = 96;
  p.softmax_scale = 0.1f;
  p.mask_nb = p.mask_nh = 1;
  cr_expect_eq(fm_attn_forward(&p, FM_VARIANT_SKIP, 0, NULL, &err), FM_EUNSUPPORTED);
  p.head_dim = 128;
  cr_expect_eq(fm_attn_forward(&p, FM_VARIANT_SKIP, 0, NULL, &err), FM_EINVAL, "NULL buffers");
  int32_t br, bc;
  fm_kernel_tile_size(FM_KERNEL_SM80, FM_PASS_FWD, 128, &br, &bc, NULL);
  cr_expect(br == 128 && bc == 64);
  fm_kernel_tile_size(FM_KERNEL_SM80, FM_PASS_FWD, 64, &br, &bc, NULL);
  cr_expect(br == 128 && bc == 64);
}

/* fm_attn_problem.mask_method (fm_mask_method): a value out of range refused
   by both passes with one line naming the four, and the sm80 kernel, which
   has one method (and no backward), refusing each other method by its name;
   all checked before any CUDA call (the device pointers are never read: any
   non-NULL will do). */
Test(gpu, mask_method_checked_before_any_cuda_call) {
  fm_attn_problem p;
  memset(&p, 0, sizeof p);
  p.batch = p.heads = 1;
  p.seqlen_q = p.seqlen_k = 128;
  p.head_dim = 128;
  p.softmax_scale = 0.1f;
  p.mask_nb = p.mask_nh = 1;
  static float cell[4];
  p.q = p.k = p.v = p.dout = cell;
  p.o = p.dq = p.dk = p.dv = cell;
  p.lse = cell;
  p.intervals = (const int32_t *)cell;
  fm_err err;
  p.kernel = FM_KERNEL_SM90;
  for (int pass = 0; pass < 2; pass++) {
    fm_status (*run)(const fm_attn_problem *, fm_variant, int, void *, fm_err *) =
        pass ? fm_attn_backward : fm_attn_forward;
    p.mask_method = FM_MASK_METHOD_WORDS + 1;
    cr_expect_eq(run(&p, FM_VARIANT_SKIP, 0, NULL, &err), FM_EINVAL);
    cr_expect_str_eq(err.msg, "mask method 4: expected 0 (auto), 1 (slices), 2 (r2p) or 3 (words)");
    p.mask_method = -1;
    cr_expect_eq(run(&p, FM_VARIANT_SKIP, 0, NULL, &err), FM_EINVAL);
    cr_expect_str_eq(err.msg, "mask method -1: expected 0 (auto), 1 (slices), 2 (r2p) or 3 (words)");
  }
  p.kernel = FM_KERNEL_SM80;
  for (int m = FM_MASK_METHOD_SLICES; m <= FM_MASK_METHOD_WORDS; m++) {
    p.mask_method = m;
    char want[128];
    snprintf(want, sizeof want, "mask method %s: kernel sm80 has one way of masking a partial tile (auto only)",
             fm_mask_method_name((fm_mask_method)m));
    cr_expect_eq(fm_attn_forward(&p, FM_VARIANT_SKIP, 0, NULL, &err), FM_EUNSUPPORTED, "%s", want);
    cr_expect_str_eq(err.msg, want);
  }
}
