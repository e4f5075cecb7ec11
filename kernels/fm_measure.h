/* fm_measure.h — the measurement harness of `fmsim run` and `fmsim bench`
 * (C-callable): device buffers, random bf16 Q/K/V, the interval vectors (or
 * the dense mask) on the device, and per pass (forward, backward: dO random,
 * O and LSE from one forward) timed launches, a counted launch, and an
 * instrumented launch whose per-tile record comes back to the host.
 *
 * One session holds device buffers sized for the largest case it was created
 * for and reuses them across cases (bench cases all have B*S*H*D equal).
 */
#ifndef FM_MEASURE_H
#define FM_MEASURE_H

#include <stdint.h>

#include "fm_attn.h"
#include "fm_colmask.h"
#include "fm_cupti.h"
#include "fm_run_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_gpu_session fm_gpu_session;

/* max_tokens: largest B*S; max_hidden: largest H*D; max_dense: largest Sq*Sk
 * of a dense-variant case (0 when none). The caller owns *out. The
 * backward's four buffers of the same size as Q are allocated by the first
 * case with a backward (FM_ENOMEM, one line, when the device lacks them). */
fm_status fm_gpu_session_create(int64_t max_tokens, int64_t max_hidden, int64_t max_dense,
                                uint64_t seed, fm_gpu_session **out, fm_err *err);
void fm_gpu_session_destroy(fm_gpu_session *s); /* NULL is a no-op */
const fm_gpu_props *fm_gpu_session_props(const fm_gpu_session *s);

typedef struct fm_gpu_case {
  const fm_colmask *mask; /* Sq = Sk = S, sets nb in {1, B}, nh in {1, H} */
  int32_t batch, heads, head_dim;
  fm_variant variant;
  fm_kernel_id kernel;    /* a registry kernel, or FM_KERNEL_AUTO (resolved for this device) */
  fm_pass pass;           /* FM_PASS_FWD (also when 0), FM_PASS_BWD or FM_PASS_BOTH; the
                             backward runs after one forward that gives it O and LSE */
  int32_t deterministic;  /* backward: dQ accumulated in a fixed order */
  int32_t mask_method;    /* fm_mask_method (core/fm_kernels.h): how the sm90 kernels mask a
                             partial tile, both passes; 0 (auto): the library's. The sm80
                             kernel refuses any other, and a variant a method is not built for
                             refuses it (FM_EUNSUPPORTED, fm_attn.h), but words, which runs r2p
                             there */
} fm_gpu_case;

typedef struct fm_gpu_opts {
  int32_t warmup, reps;   /* plain build */
  int32_t instrument;     /* also run the instrumented build */
  int32_t instrument_reps; /* its timed launches (0: one launch, not timed) */
  int32_t count_bytes;    /* one counted launch under the Range Profiler */
  int32_t use_cupti;      /* 0: CUDA events only, no counters */
  int32_t want_tiles;     /* download the instrumented per-tile record */
  int32_t want_timeline;  /* keep the kernel records of the timed launches */
  int32_t settle_ms;      /* idle milliseconds before each pass is timed (0: none), so that
                             a pass does not start at the clock the one before left: the
                             timing model's profiles assume launches apart (fm_timing.h) */
  int32_t sustain_ms;     /* > 0: the plain build's figure is the protocol's sustained one
                             (docs/DESIGN.md, "How we measure"): 1 s of back-to-back warm-up,
                             then back-to-back launches covering at least this long
                             (fm_time_opts.sustain_ms), timed by CUDA events alone as the
                             protocol times (no CUPTI records for it); 0: warmup + reps launches */
} fm_gpu_opts;

/* What one pass measured. timing.source is "" when the pass did not run. */
typedef struct fm_gpu_pass_result {
  fm_timing timing;              /* plain build */
  fm_timing timing_instrumented; /* source "" unless timed */
  double instr_overhead;         /* instrumented / plain - 1: the median over rounds of
                                    interleaved launches of the round's ratio
                                    (fm_time_interleaved); NaN unless timed */
  fm_measured_bytes measured;    /* source "" unless counted */
  int32_t tr, tc;                /* tile grid at the kernel's tile size for this pass */
  uint8_t *tile_class;   /* (B, H, Tr, Tc) as the kernel saw it, or NULL; free() */
  int64_t *tile_cycles;  /* (B, H, Tr, Tc) clock64 cycles, or NULL; free() */
} fm_gpu_pass_result;

typedef struct fm_gpu_result {
  fm_gpu_pass_result fwd, bwd; /* per pass of the case (fm_gpu_case.pass) */
  fm_timeline timeline;        /* kernel records of the first pass measured (the forward when
                                  both); events owned (free with fm_gpu_result_free) */
} fm_gpu_result;

/* The kernel that c->kernel means on this session's device (FM_KERNEL_AUTO
 * resolved); FM_EUNSUPPORTED when it cannot run there. */
fm_status fm_gpu_session_kernel(const fm_gpu_session *s, fm_kernel_id requested, fm_kernel_id *out,
                                fm_err *err);

fm_status fm_gpu_session_run(fm_gpu_session *s, const fm_gpu_case *c, const fm_gpu_opts *o,
                             fm_gpu_result *r, fm_err *err);
void fm_gpu_result_free(fm_gpu_result *r);

#ifdef __cplusplus
}
#endif
#endif
