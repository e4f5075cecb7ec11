/* GPU tests (label gpu) of the CUPTI glue and the measurement harness:
 * a 1 GiB copy kernel (known bytes, known name) through the Activity API, the
 * Range Profiler and the CUDA-event fallback; then one small attention case
 * through fm_gpu_session_run, whose instrumented tile classes must equal the
 * CPU's. Each test skips cleanly without a usable device. CUDA is touched
 * only inside the tests (Criterion forks first). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <string.h>

#include "fm_cupti.h"
#include "fm_families.h"
#include "fm_measure.h"
#include "fm_tiles.h"

void *fm_test_copy_create(size_t bytes);
void fm_test_copy_destroy(void *job);
fm_status fm_test_copy_launch(void *user, void *stream, fm_err *err);

#define COPY_BYTES ((size_t)1 << 30)

static void need_gpu(void) {
  char name[128], why[256];
  if (!fm_gpu_probe(name, sizeof name, why, sizeof why)) cr_skip_test("no GPU: %s", why);
}

Test(measure, copy_timing_from_activity_records) {
  need_gpu();
  void *job = fm_test_copy_create(COPY_BYTES);
  cr_assert_not_null(job);
  fm_time_opts o = {.warmup = 2, .reps = 5, .flush_l2 = 1, .use_cupti = 1};
  fm_timing t;
  fm_timeline tl = {0};
  fm_err err;
  cr_assert_eq(fm_time_launches(fm_test_copy_launch, job, NULL, &o, &t, &tl, &err), FM_OK, "%s",
               err.msg);
  cr_log_info("copy 1 GiB: %s median %.4f ms (events %.4f ms) %s", t.source, t.median_ms,
              t.events_median_ms, t.note);
  cr_assert_eq(t.reps, 5);
  cr_assert(t.median_ms > 0 && t.min_ms <= t.median_ms && t.median_ms <= t.max_ms);
  cr_assert(isfinite(t.events_median_ms));
  if (fm_cupti_compiled()) {
    cr_assert_str_eq(t.source, "cupti-activity", "fell back: %s", t.note);
    cr_assert_eq(t.nkernels, 1);
    cr_assert(strstr(t.kernels[0].name, "fm_test_copy_kernel"), "%s", t.kernels[0].name);
    cr_assert_eq(t.kernels[0].block[0], 256);
    /* activity (kernel only) and events (around it) agree within 10% */
    cr_assert(fabs(t.median_ms - t.events_median_ms) < 0.1 * t.events_median_ms, "%g vs %g",
              t.median_ms, t.events_median_ms);
    /* the timeline holds the 5 copies and the 5 flushes */
    cr_assert_eq(tl.n, 10);
  }
  /* 2 GiB moved: H200 HBM does ~4.3 TB/s, so anything under 0.3 ms is wrong */
  cr_assert(t.median_ms > 0.3, "%g ms", t.median_ms);
  free(tl.events);
  fm_test_copy_destroy(job);
  fm_cupti_shutdown();
}

Test(measure, copy_bytes_from_the_range_profiler) {
  need_gpu();
  void *job = fm_test_copy_create(COPY_BYTES);
  cr_assert_not_null(job);
  fm_measured_bytes b;
  fm_err err;
  cr_assert_eq(fm_count_launch(fm_test_copy_launch, job, NULL, 1, &b, &err), FM_OK, "%s", err.msg);
  cr_log_info("copy 1 GiB: %s dram read %.0f write %.0f, L2 read sectors %.0f, %d ranges; %s",
              b.source, b.dram_read, b.dram_write, b.l2_read_sectors, b.nranges, b.note);
  if (!fm_cupti_compiled()) {
    cr_assert_str_eq(b.source, "");
    cr_assert(strstr(b.note, "without CUPTI"));
  } else {
    cr_assert_str_eq(b.source, "cupti-range-profiler", "no counters: %s", b.note);
    double n = (double)COPY_BYTES;
    cr_assert_eq(b.nranges, 1);
    cr_assert(fabs(b.dram_read - n) < 0.05 * n, "dram read %.0f vs %.0f", b.dram_read, n);
    cr_assert(fabs(b.dram_write - n) < 0.15 * n, "dram write %.0f vs %.0f", b.dram_write, n);
    cr_assert(fabs(32.0 * b.l2_read_sectors - n) < 0.05 * n, "L2 read %.0f vs %.0f",
              32.0 * b.l2_read_sectors, n);
    /* phases alternate: timing after counting still gets activity records */
    fm_time_opts o = {.warmup = 1, .reps = 3, .flush_l2 = 1, .use_cupti = 1};
    fm_timing t;
    cr_assert_eq(fm_time_launches(fm_test_copy_launch, job, NULL, &o, &t, NULL, &err), FM_OK);
    cr_assert_str_eq(t.source, "cupti-activity", "%s", t.note);
  }
  fm_test_copy_destroy(job);
  fm_cupti_shutdown();
}

Test(measure, cuda_events_fallback) {
  need_gpu();
  void *job = fm_test_copy_create((size_t)256 << 20);
  cr_assert_not_null(job);
  fm_time_opts o = {.warmup = 1, .reps = 4, .flush_l2 = 1, .use_cupti = 0};
  fm_timing t;
  fm_timeline tl = {0};
  fm_err err;
  cr_assert_eq(fm_time_launches(fm_test_copy_launch, job, NULL, &o, &t, &tl, &err), FM_OK);
  cr_assert_str_eq(t.source, "cuda-events");
  cr_assert(t.note[0], "the fallback says why");
  cr_assert_eq(tl.n, 4);
  cr_assert(t.median_ms > 0);
  fm_time_opts bad = {.warmup = 0, .reps = 0, .flush_l2 = 1, .use_cupti = 1};
  cr_assert_eq(fm_time_launches(fm_test_copy_launch, job, NULL, &bad, &t, NULL, &err), FM_EINVAL);
  free(tl.events);
  fm_test_copy_destroy(job);
}

Test(measure, attention_case_through_the_session) {
  need_gpu();
  char desc[256];
  fm_err err;
  if (fm_attn_device_info(desc, sizeof desc, &err) != FM_OK) cr_skip_test("%s", err.msg);
  const int32_t B = 2, H = 4, S = 1000, D = 128;
  fm_family_request req = {"causal_document", S, B, H, 3, -1, NULL, 0, NULL};
  fm_colmask *m = NULL;
  cr_assert_eq(fm_family_build(&req, &m, NULL, &err), FM_OK, "%s", err.msg);
  fm_gpu_session *s = NULL;
  cr_assert_eq(fm_gpu_session_create((int64_t)B * S, (int64_t)H * D, (int64_t)S * S, 1, &s, &err),
               FM_OK, "%s", err.msg);
  fm_gpu_case c = {.mask = m, .batch = B, .heads = H, .head_dim = D, .variant = FM_VARIANT_SKIP, .kernel = FM_KERNEL_SM80};
  fm_gpu_opts o = {.warmup = 1, .reps = 3, .instrument = 1, .instrument_reps = 2, .count_bytes = 1,
                   .use_cupti = 1, .want_tiles = 1, .want_timeline = 1};
  fm_gpu_result r;
  cr_assert_eq(fm_gpu_session_run(s, &c, &o, &r, &err), FM_OK, "%s", err.msg);
  int32_t br, bc;
  fm_kernel_tile_size(FM_KERNEL_SM80, FM_PASS_FWD, D, &br, &bc, NULL);
  cr_assert_eq(r.fwd.tr, (S + br - 1) / br);
  cr_assert_eq(r.fwd.tc, (S + bc - 1) / bc);
  cr_assert(r.fwd.timing.median_ms > 0 && r.fwd.timing_instrumented.median_ms > 0);
  cr_log_info("attention: %s %.4f ms, instrumented %.4f ms; %s dram read %.0f, L2 read %.0f; %s",
              r.fwd.timing.source, r.fwd.timing.median_ms, r.fwd.timing_instrumented.median_ms,
              r.fwd.measured.source, r.fwd.measured.dram_read, 32 * r.fwd.measured.l2_read_sectors,
              r.fwd.measured.note);
  if (fm_cupti_compiled()) cr_assert_str_eq(r.fwd.timing.source, "cupti-activity", "%s", r.fwd.timing.note);
  /* the kernel's classes are the CPU's, bit for bit */
  int64_t per = (int64_t)r.fwd.tr * r.fwd.tc;
  uint8_t *cls = malloc((size_t)per);
  fm_tile_counts counts;
  cr_assert_eq(fm_classify(m, br, bc, &counts, cls, NULL, NULL), FM_OK);
  for (int32_t b = 0; b < B; b++)
    for (int32_t h = 0; h < H; h++)
      cr_assert_eq(memcmp(cls, r.fwd.tile_class + ((int64_t)b * H + h) * per, (size_t)per), 0,
                   "b=%d h=%d", b, h);
  for (int64_t i = 0; i < per; i++)
    cr_assert_eq(r.fwd.tile_cycles[i] > 0, cls[i] != FM_TILE_MASKED, "tile %lld", (long long)i);
  free(cls);
  fm_gpu_result_free(&r);
  /* the dense variant runs from the device-built mask */
  c.variant = FM_VARIANT_DENSE;
  fm_gpu_opts od = {.warmup = 1, .reps = 2, .use_cupti = 1};
  cr_assert_eq(fm_gpu_session_run(s, &c, &od, &r, &err), FM_OK, "%s", err.msg);
  cr_assert(r.fwd.timing.median_ms > 0);
  fm_gpu_result_free(&r);
  fm_gpu_session_destroy(s);
  fm_colmask_destroy(m);
  fm_cupti_shutdown();
}
