/* fm_cupti.h — CUPTI glue (C-callable): kernel durations from the Activity
 * API, HBM bytes and L2 sectors from the Range Profiler, an L2 flush, and the
 * CUDA-event fallback. The verified call sequences: docs/DESIGN.md, "CUPTI call sequences".
 *
 * Two phases, never together (docs/DESIGN.md, "Timing and CUPTI"): fm_time_launches enables
 * kernel activity tracing only while it runs; fm_count_launch enables the
 * Range Profiler only while it runs. Every launch measured is preceded by an
 * L2 flush: a kernel that reads a buffer of 4x the L2 size (reads only, so no
 * dirty line of the flush is written back during the measured launch).
 *
 * Any CUPTI failure (no library, no permission, under ncu/nsys, another
 * profiling process) is not an error: timing falls back to CUDA events, and
 * counting reports no counters; the result's `note` says why and `source`
 * says where each figure came from ("cupti-activity", "cuda-events",
 * "cupti-range-profiler", or "" for none). Errors are returned only when
 * CUDA itself fails (launch error, out of memory).
 *
 * CUPTI's activity callbacks carry no user pointer, so this module keeps
 * process-wide state; call it from one thread. The CUDA device must be
 * selected (cudaSetDevice) before the first call.
 */
#ifndef FM_CUPTI_H
#define FM_CUPTI_H

#include <stdint.h>

#include "fm_run_trace.h"
#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues the work to measure on `stream` (a cudaStream_t); must not synchronize. */
typedef fm_status (*fm_launch_fn)(void *user, void *stream, fm_err *err);

/* 1 when this build has CUPTI (FM_HAVE_CUPTI), 0 when only CUDA events are available. */
int fm_cupti_compiled(void);

/* 1 when a CUDA device can be used; otherwise 0 and `why` says why (no
 * driver, no device, ...). Initialises CUDA: never call it before a test
 * framework forks. name receives the device name. */
int fm_gpu_probe(char *name, int name_cap, char *why, int why_cap);

typedef struct fm_gpu_props {
  char name[128];
  int32_t sm_count, clock_khz, cc_major, cc_minor;
  int64_t l2_bytes, mem_bytes;
} fm_gpu_props;
fm_status fm_gpu_props_get(fm_gpu_props *p, fm_err *err);

/* Evicts the L2 by reading 4x its size (at least 64 MiB) on `stream`. */
fm_status fm_l2_flush(void *stream, fm_err *err);

typedef struct fm_time_opts {
  int32_t warmup, reps; /* reps >= 1 */
  double warmup_min_ms; /* keep warming up (after `warmup` launches) until this much wall
                           time has passed, so that clocks have ramped (0: no minimum) */
  int flush_l2;         /* flush before every launch (warm-up included) */
  int use_cupti;        /* 0: CUDA events only */
  double sustain_ms;    /* > 0: the protocol's sustained figure (docs/DESIGN.md, "How we
                           measure"): the warm-up by time runs back to back (no idle gap),
                           and the timed launches, back to back, go on until they cover at
                           least this long (at least `reps` of them) */
} fm_time_opts;

/* Times `reps` launches of fn after `warmup` ones (more under o->sustain_ms);
 * out->clock_mhz and power_w are read through NVML while they run (NaN
 * without the driver's NVML library). The timing is the median
 * over the launches of one launch's span (first kernel start to last kernel
 * end, activity records) or of the events around it (fallback). timeline,
 * when not NULL, receives the timed launches' kernel records (pid 0, flush
 * kernels included), ts relative to the first; the caller frees
 * timeline->events. */
fm_status fm_time_launches(fm_launch_fn fn, void *user, void *stream, const fm_time_opts *o,
                           fm_timing *out, fm_timeline *timeline, fm_err *err);

/* Times n launch functions interleaved, so that clock and thermal drift
 * affect them alike (for ratios such as the instrumentation overhead):
 * `warmup` rounds (and at least warmup_min_ms), then `reps` rounds, each round
 * launching every function once, fns[0] .. fns[n-1] in even rounds and in the
 * reverse order in odd ones (so that a drift within a round favours none of
 * them), L2 flushed before every launch when o->flush_l2; CUDA events around
 * each launch (o->use_cupti is ignored: kernel records of interleaved
 * launches would need attributing). out[i] (n of them) receives fns[i]'s
 * statistics, source "cuda-events". ratio, when not NULL, receives n values:
 * ratio[i] the median over pairs of rounds (2k, 2k + 1: one in each order) of
 * fns[i]'s time over fns[0]'s in the pair (ratio[0] = 1; one round: its own
 * ratio; an odd last round is left out): a drift between pairs cancels, and a
 * drift linear within a pair too, which neither the ratio of two medians nor
 * one ratio per round promises. Ask for an even reps. n in 1..8. */
fm_status fm_time_interleaved(int n, const fm_launch_fn *fns, void *const *users, void *stream,
                              const fm_time_opts *o, fm_timing *out, double *ratio, fm_err *err);

/* One counted launch under the Range Profiler (AutoRange, KernelReplay),
 * metrics dram__bytes_read.sum, dram__bytes_write.sum,
 * lts__t_sectors_srcunit_tex_op_read.sum and gpu__time_duration.sum summed
 * over the kernels of the launch; L2 flushed before it. On a CUPTI failure
 * the work is still launched once, out->source is "" and out->note says why. */
fm_status fm_count_launch(fm_launch_fn fn, void *user, void *stream, int flush_l2,
                          fm_measured_bytes *out, fm_err *err);

/* Flushes outstanding activity records and releases CUPTI (idempotent). */
void fm_cupti_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
