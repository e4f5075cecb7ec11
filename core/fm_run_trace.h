/* fm_run_trace.h — the trace of one kernel run (`fmsim run`), from the GPU
 * or from the CPU simulation (docs/DESIGN.md, "Traces").
 *
 * A run trace is an analysis trace (fm_trace.h) with "kind": "run" and:
 *   summary.json     + "device" (the GPU's name, or "cpu-simulation"),
 *                    "kernel" (head dim, variant, mask method, pass, tile size,
 *                    instrumented),
 *                    "timing" (median after warm-up, L2 flushed; null on the CPU),
 *                    "flops" and "tflops", "traffic": the bytes the kernel moves
 *                    ("model" always, "measured" when counted, "ratios"; each figure
 *                    names its "source": "cupti-activity", "cupti-range-profiler",
 *                    "cuda-events" or "model"). The analysis member "bytes" stays
 *                    what it is in an analysis trace: the memory of the mask.
 *                    "pass": "fwd", "bwd" or "both" (what was asked for); the
 *                    members above are the forward's; "backward" (null without
 *                    one) holds the same run members for the backward and its
 *                    tile counts at the backward's own tile (fm_tile_counts_json).
 *   tiles.npy        uint8 [B, H, Tr, Tc] min/max class per tile (the kernel's own
 *                    record when instrumented, else the CPU classes broadcast)
 *   tiles_exact.npy  uint8 [B, H, Tr, Tc] exact class (CPU)
 *   tile_bytes.npy   int64 [B, H, Tr, Tc] modelled bytes per tile (fm_cost_tile_bytes)
 *   tile_cycles.npy  int64 [B, H, Tr, Tc] clock64 cycles per tile (instrumented GPU runs)
 *   tiles_bwd.npy, tiles_exact_bwd.npy, tile_bytes_bwd.npy, tile_cycles_bwd.npy
 *                    the same four of the backward, [B, H, Tr_bwd, Tc_bwd] at its
 *                    tile (when it was asked for; cycles when instrumented)
 *   columns.npy      int32 [nb, nh, Sk, 4] the interval vectors
 *   timeline.json    Chrome trace event format (Perfetto): kernel records of the timed
 *                    launches and, when instrumented, the forward tiles of (b=0, h=0)
 *                    laid end to end per row tile; metadata only on the CPU
 * The tile arrays are written at the kernel's tile size for each pass; the
 * summary's "br"/"bc" (and "backward" "br"/"bc") say it.
 */
#ifndef FM_RUN_TRACE_H
#define FM_RUN_TRACE_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_cost.h"
#include "fm_json.h"
#include "fm_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FM_TIMING_MAX_KERNELS 8

/* One kernel of the measured work (several kernels make one forward call). */
typedef struct fm_kernel_stat {
  char name[128];
  double median_ms;
  int32_t grid[3], block[3];
  int32_t registers, static_smem, dynamic_smem; /* per thread; bytes per block */
} fm_kernel_stat;

/* Time of repeated launches: median after warm-up, L2 flushed before each. */
typedef struct fm_timing {
  char source[32];         /* "cupti-activity" or "cuda-events"; "" when not measured */
  char note[256];          /* why a fallback happened, "" otherwise */
  int32_t warmup, reps, l2_flushed;
  double median_ms, min_ms, max_ms, mean_ms; /* of one forward call (all its kernels) */
  double events_median_ms; /* CUDA events around the same launches (cross-check), NaN if none */
  double clock_mhz, power_w; /* median SM clock and board power read through NVML while the
                                timed launches ran; NaN when not read (no NVML) */
  double window_ms;        /* wall time the timed launches covered */
  int32_t nkernels;
  fm_kernel_stat kernels[FM_TIMING_MAX_KERNELS];
} fm_timing;

/* Bytes counted by the Range Profiler over one forward call (all its kernels). */
typedef struct fm_measured_bytes {
  char source[32]; /* "cupti-range-profiler"; "" when not counted */
  char note[256];  /* why not counted, "" otherwise */
  int32_t l2_flushed, nranges;
  double dram_read, dram_write; /* bytes */
  double l2_read_sectors;       /* lts__t_sectors_srcunit_tex_op_read.sum (32 B each) */
  double gpu_time_ns;           /* gpu__time_duration.sum of the counted pass */
} fm_measured_bytes;

/* A Chrome trace "X" (complete) event; args < 0 are left out. */
typedef struct fm_timeline_event {
  char name[64];
  int32_t pid, tid;
  double ts_us, dur_us;
  int32_t cls, row_tile, col_tile;
  int64_t cycles;
} fm_timeline_event;

typedef struct fm_timeline {
  int32_t n;
  fm_timeline_event *events; /* owned by whoever built it */
  const char *process_names[4]; /* pid 0..3 labels, NULL when unused */
} fm_timeline;

typedef struct fm_run_info {
  const fm_analysis *analysis; /* at the kernel's tile size */
  const char *device;          /* GPU name, or "cpu-simulation" */
  const char *device_note;     /* why the CPU simulation ran, "" on the GPU */
  int32_t head_dim;
  fm_variant variant;
  fm_mask_method mask_method;  /* the sm90 kernels' partial-tile masking asked for (auto: the
                                  library's); recorded as asked, also on the CPU */
  int instrumented;
  const fm_cost *cost;
  const fm_timing *timing;              /* NULL: no timings (CPU) */
  const fm_timing *timing_instrumented; /* NULL unless instrumented on the GPU */
  double instr_overhead;       /* instrumented / plain - 1, median of interleaved rounds' ratios; NaN: none */
  const fm_measured_bytes *measured;    /* NULL: no counters */
  const uint8_t *gpu_classes;  /* (B, H, Tr, Tc) from the instrumented kernel, or NULL */
  const int64_t *gpu_cycles;   /* (B, H, Tr, Tc), or NULL */
  int64_t class_mismatches;    /* GPU vs CPU min/max classes; -1 when not compared */
  int32_t clock_khz;           /* SM clock used to turn cycles into time, 0 unknown */
  const fm_timeline *timeline; /* NULL: metadata only */
} fm_run_info;

/* The serializers of the structs above: the only writers of these JSON
 * objects, used by run traces, `fmsim bench` and the scenario runner alike,
 * so that every file names a figure the same way. Each writes one member
 * `key` (NULL inside an array) into the innermost open object or array.
 *
 * fm_timing_json: null when t is NULL or not measured (source ""), else
 *   {"source", "note", "warmup", "reps", "l2_flushed", "median_ms", "min_ms",
 *    "max_ms", "mean_ms", "events_median_ms",
 *    "kernels": [{"name", "median_ms", "grid": [x, y, z], "block": [x, y, z],
 *                 "registers", "static_smem", "dynamic_smem"}]}
 * fm_measured_bytes_json: null when mb is NULL or not counted, else
 *   {"source", "l2_flushed", "ranges", "dram_read", "dram_write",
 *    "l2_read_sectors", "l2_read_bytes", "gpu_time_ns"} (bytes, ns)
 * fm_traffic_json: the model's bytes beside the measured ones,
 *   {"model": {"source": "model", "read", "write", "q", "kv", "vectors",
 *              "dense_mask", "bounds", "prep_read", "prep_write", "o", "lse",
 *              backward costs only: "do", "delta", "dq_accum", "dkdv", "rowsum_read",
 *              "rowsum_write", "dq_convert", "dq" (fm_cost.h says what each is),
 *              "unique_read", "unique_write"},
 *    "measured": fm_measured_bytes_json or null,
 *    "ratios": {"dram_read_over_unique_read", "dram_write_over_unique_write",
 *               "l2_read_over_model_read"} or null,
 *    "measured_note": why not counted, "" otherwise} */
void fm_timing_json(fm_json *j, const char *key, const fm_timing *t);
void fm_measured_bytes_json(fm_json *j, const char *key, const fm_measured_bytes *mb);
void fm_traffic_json(fm_json *j, const char *key, const fm_cost *c, const fm_measured_bytes *mb);

/* Writes the run members into the innermost open JSON object: "device",
 * "device_note", "kernel" {"head_dim", "variant", "mask_method" ("auto",
 * "slices", "r2p" or "words"), "pass", "dtype", "br", "bc", "instrumented"}, "timing"
 * and "timing_instrumented" (fm_timing_json), "instrumentation_overhead", "flops" {"convention", "paper", "executed",
 * "full"}, "tflops" {"source", "paper", "executed"} or null, "model" {"source",
 * "rho", "tiles_total", "tiles_visited", "tiles_elementwise"}, "traffic"
 * (fm_traffic_json) and "tiles_record" {"source", "class_mismatches",
 * "cycles", "clock_khz"}; the analysis members are not included. The pass is
 * r->cost->pass. */
void fm_run_json(const fm_run_info *r, fm_json *j);

/* The member "backward": fm_run_json of bwd and its tile counts at its own
 * tile (fm_tile_counts_json), or null when bwd is NULL. */
void fm_run_backward_json(fm_json *j, const fm_run_info *bwd);

/* One pass of a run trace: its run members and the CPU's per-tile arrays at
 * the pass's tile, (nsets, Tr, Tc) each (classes and exact from fm_classify,
 * tile_bytes from fm_cost_compute), broadcast to [B, H, Tr, Tc]. */
typedef struct fm_run_trace_pass {
  const fm_run_info *info;
  const uint8_t *classes, *exact;
  const int64_t *tile_bytes;
} fm_run_trace_pass;

/* The whole trace folder, atomically (staging folder, then rename): the
 * forward's members and files, and the backward's when bwd is not NULL;
 * asked: the passes asked for (the "pass" member). */
fm_status fm_run_trace_write(const char *dir, const fm_run_trace_pass *fwd,
                             const fm_run_trace_pass *bwd, fm_pass asked, const fm_colmask *m,
                             fm_err *err);

/* Timeline events for the instrumented tiles of (b, h) = (0, 0): each row tile
 * is a thread, its visited tiles laid end to end in key-tile order (cycles
 * turned into microseconds at clock_khz). At most max_events events; the
 * caller frees t->events. classes/cycles: (B, H, Tr, Tc); only the first
 * Tr * Tc, the pair (0, 0), are read. */
fm_status fm_timeline_add_tiles(fm_timeline *t, const uint8_t *classes, const int64_t *cycles,
                                int32_t tr, int32_t tc, int32_t clock_khz, int32_t pid,
                                int32_t max_events, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
