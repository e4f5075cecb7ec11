/* fm_timing.h — predicted kernel time without a GPU: a calibrated model of how
 * fmsim's FlashMask kernels spend their time, from the tile work of a mask.
 *
 * Work items. The forward kernels give one work item to each row tile of each
 * (batch, head): the item considers every key tile of its row (reads its 8
 * bounds, classifies it), skips the MASKED ones and computes the others, the
 * PARTIAL ones with the element mask. The backward gives one item to each key
 * tile and walks its row tiles (the column side of the same counts). The
 * per-item work comes from fm_tile_count at the kernel's tile size for the
 * pass (fm_kernels.h), in O(S) per vector set (fm_timing_work_init).
 *
 * Cost of an item, in microseconds of one CTA slot while the GPU is full:
 *   item_us + considered * key_tile_us + unmasked * unmasked_us
 *           + partial * (causal mask ? partial_causal_us : partial_us)
 * item_us is the fixed part (Q load, pipeline prologue, epilogue, O and LSE
 * stores); key_tile_us is what a MASKED tile costs (its classification);
 * partial tiles of causal masks cost more than those of bidirectional ones
 * (the kernel folds the causal triangle into the element test). An item with
 * no visited tile pays no item_us: both sm90 kernels end it at once (their
 * F_EMPTY path stores zeros). The calibration's masks have almost none; a
 * rank's share of a mask (fmsim cp-plan) has many: charging them item_us
 * put a rank's backward up to 15% higher (share_question, 128K tokens, 4
 * ranks: 2.03 against 1.77 ms), where the 4-H200 runs of 2026-11-27 measured
 * it low (docs/DESIGN.md, "The exchange model").
 *
 * Schedule (fm_sched, per kernel: fm_timing_kernel_sched):
 *   FM_SCHED_GRID (sm80): grid (Tr, B*H), blockIdx.x reversed so that the
 *     heaviest row tiles of causal masks go first; ctas_per_sm CTAs resident
 *     per SM. The hardware hands blocks out in index order (x fastest): the
 *     first wave breadth-first over the SMs, then each block to the slot that
 *     frees first. Once no block is left, an SM running a single CTA runs it
 *     `solo` times faster than when two share it (the tail).
 *   FM_SCHED_PERSISTENT_HEAD (sm90): one CTA per SM, each taking the next
 *     item of a work list when it is done (an atomic counter: greedy list
 *     scheduling); the list holds the heads in order and, inside each head,
 *     its row tiles by visited tiles, heaviest first (ties: the last row tile
 *     first), as kernels/fm_sm90.cu sorts it by default (the CTAs of one time
 *     share one or two heads' K/V in L2).
 *   FM_SCHED_PERSISTENT: the same with the list sorted heaviest first over all
 *     heads (LPT; the sm90 kernel's FM_SM90_ORDER_EXACT).
 *   FM_SCHED_PERSISTENT_INDEX (sm90 backward): one CTA per SM taking the key
 *     tiles of every (b, h) in index order (heads in order, key tiles
 *     ascending: for causal masks, heaviest first within each head).
 * The makespan over the SMs is simulated item by item: O(items log slots).
 *
 * Clock (the boost window): the costs above are those of the SMs at their
 * boost clock, which a GPU holds only for a while. A pass that draws more
 * power than the board's limit allows (the forward on Hopper: its tensor
 * cores are the busiest) runs at the boost clock for the first boost_us of a
 * launch, then at the lower clock the power limit sets, where the same work
 * takes `throttle` times longer:
 *   clocked(t) = t                                  for t <= boost_us
 *              = boost_us + throttle * (t - boost_us) beyond
 * applied to the makespan t (the clock is the whole chip's: every SM slows
 * alike, so the critical SM stays critical). throttle = 1 (or 0, as in a
 * zeroed struct) means no window: the makespan is the time, as in version-1
 * profiles. Fitted per pass and head dim (fm_fit_options.boost_window).
 * The evidence (scenarios/calibration.yaml on the H200, 2026-11-23): the
 * sm90 forward's full masks run at 680-709 TFLOP/s in launches of 0.8-12 ms
 * and at 610-630 in launches of 58-223 ms (head dim 64: 555 against
 * 507-527), and the fit puts the window at 12-16 ms with a throttle of 1.16
 * at both head dims; the backward (452 TFLOP/s at 3 ms and at 775 ms) and
 * the sm80 forward show no such drop, and a window fitted to them does not
 * pass the fit's test. The window starts with each launch: it describes
 * launches apart from each other, as timed (warm-up, an L2 flush between
 * repetitions), not a busy GPU running launches back to back, which may
 * stay at the lower clock. That second state is the problem's clock
 * FM_CLOCK_SUSTAINED: the lower clock from the first microsecond,
 *   clocked(t) = throttle * t,
 * what the project's sustained figures time (docs/DESIGN.md, "How we
 * measure": launches back to back after a second of warm-up) and what
 * `fmsim cp-run` times; FM_CLOCK_BURST (0) is the window above, what a
 * scenario run times (a warm-up launch, a pause, a few launches).
 *
 * Memory floor: the compulsory bytes (Q, O and LSE once, the K/V columns some
 * tile loads once, the interval vectors and bounds) over the profile's HBM
 * bandwidth; HBM keeps its clock, so the floor is not throttled. Predicted
 * time = launch_us + max(clocked(makespan), floor).
 *
 * What-if tiles: at a tile other than the profile's (Br0 x Bc0), the tile
 * costs are scaled by area (Br*Bc)/(Br0*Bc0), item_us by Br/Br0, and
 * key_tile_us, launch_us and the schedule are kept: an estimate of how the
 * same kernel would behave, not a measured kernel (results say so: what_if).
 *
 * Profiles (data/gpu/NAME.json, written by `fmsim calibrate`):
 *   {"format": "fmsim-gpu-profile", "version": 2, "gpu": "NVIDIA H200",
 *    "kernel": "sm80", "sms": 132, "hbm_gbs": 4300, "date": "2026-11-21",
 *    "fmsim_version": "0.1.0", "source": "what it was fitted from",
 *    "forward": [{"head_dim": 128, "br": 128, "bc": 64, "ctas_per_sm": 2,
 *                 "launch_us": ..., "item_us": ..., "key_tile_us": ...,
 *                 "unmasked_us": ..., "partial_us": ..., "partial_causal_us": ...,
 *                 "solo": ..., "boost_us": ..., "throttle": ...,
 *                 "fit": {"cases": N, "median_abs_error": e,
 *                         "worst_abs_error": e}}, ...],
 *    "backward": []}
 * Every coefficient is a non-negative number, throttle one in [1, 4]; the
 * tile of each head dim must be the kernel's own (fm_kernel_tile_size), or
 * the profile is refused. Version 1 (no boost_us, no throttle) is still
 * read: no boost window (throttle 1), the same predictions as before.
 */
#ifndef FM_TIMING_H
#define FM_TIMING_H

#include <stddef.h>
#include <stdint.h>

#include "fm_colmask.h"
#include "fm_kernels.h"
#include "fm_status.h"
#include "fm_tiles.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fm_sched {
  FM_SCHED_GRID = 0,             /* hardware block dispatch over a grid (sm80 forward) */
  FM_SCHED_PERSISTENT = 1,       /* one CTA per SM, work list heaviest first over all heads */
  FM_SCHED_PERSISTENT_HEAD = 2,  /* the same, heads in order, heaviest first in each (sm90 fwd) */
  FM_SCHED_PERSISTENT_INDEX = 3  /* the same, heads in order, items in index order (sm90 bwd) */
} fm_sched;

/* How kernel id schedules the work of one pass, and how many CTAs share an
 * SM by default (a profile may say otherwise per head dim): the kernel's
 * registry row (fm_kernel_desc.fwd_sched / bwd_sched, core/fm_kernels.h). FM_EINVAL for an unknown id
 * or FM_PASS_BOTH, FM_EUNSUPPORTED when the kernel has no such pass. */
fm_status fm_timing_kernel_sched(fm_kernel_id id, fm_pass pass, fm_sched *kind,
                                 int32_t *ctas_per_sm, fm_err *err);

/* The model of one kernel at one head dim, for one pass. Times in us. */
typedef struct fm_timing_coef {
  int32_t head_dim, br, bc; /* the tile the coefficients belong to */
  int32_t ctas_per_sm;      /* resident CTAs per SM (slots = SMs * this) */
  double launch_us;         /* once per launch: preprocessing, launch latency */
  double item_us;           /* per work item: Q load, prologue, epilogue, stores */
  double key_tile_us;       /* per tile an item considers, visited or skipped */
  double unmasked_us;       /* per visited UNMASKED tile */
  double partial_us;        /* per visited PARTIAL tile of a bidirectional mask */
  double partial_causal_us; /* per visited PARTIAL tile of a causal mask */
  double solo;              /* grid schedule: speed of a lone CTA over a shared one (>= 1) */
  double boost_us;          /* boost window: makespan at the boost clock, us */
  double throttle;          /* how much longer work takes past it (>= 1; <= 1: no window) */
  int32_t fit_cases;        /* cases of the fit, 0 when unknown */
  double fit_median_err;    /* median |predicted / measured - 1| of the fit */
  double fit_worst_err;     /* largest of those */
  double fit_boost_p;       /* p of the window's test (fm_timing_fit); -1: none tried
                               (and in profiles read from a file) */
} fm_timing_coef;

/* The GPU's clock state a prediction is for (the boost window above). */
typedef enum fm_clock {
  FM_CLOCK_BURST = 0,    /* a launch apart from others: the boost window from its start */
  FM_CLOCK_SUSTAINED = 1 /* launches back to back: the power limit's clock throughout */
} fm_clock;
const char *fm_clock_name(fm_clock c); /* "burst", "sustained"; "?" out of range. Static storage */
/* "burst" or "sustained" into *out; FM_EINVAL naming both otherwise. */
fm_status fm_clock_parse(const char *text, fm_clock *out, fm_err *err);

/* The map from the makespan at the boost clock to the time it takes, in us, in either
 * clock state (clocked() above: BURST the window, SUSTAINED throttle * makespan); the
 * identity where c has no window. The fit calls it with BURST (its runs are launches apart). */
double fm_timing_clocked(const fm_timing_coef *c, fm_clock clock, double makespan_us);

#define FM_PROFILE_MAX_COEF 8

typedef struct fm_gpu_profile {
  char name[128];          /* where it came from: a file stem or path */
  char gpu[128];           /* the device, e.g. "NVIDIA H200" */
  fm_kernel_id kernel;     /* registry id (never FM_KERNEL_AUTO) */
  int32_t sms;             /* streaming multiprocessors */
  double hbm_gbs;          /* HBM bandwidth for the memory floor, GB/s */
  char date[32];           /* of the measurements, YYYY-MM-DD */
  char fmsim_version[32];  /* of the fmsim that fitted it */
  char source[512];        /* the data it was fitted from */
  int32_t nfwd, nbwd;
  fm_timing_coef fwd[FM_PROFILE_MAX_COEF], bwd[FM_PROFILE_MAX_COEF]; /* per head dim */
} fm_gpu_profile;

/* Reads a profile from JSON text (name labels the messages) and validates it:
 * format and version, a known kernel, numbers where numbers belong, every
 * coefficient finite and >= 0, solo in [1, 4], ctas_per_sm in 1..32, and
 * each head dim's tile equal to the kernel's (fm_kernel_tile_size).
 * FM_EFORMAT names the file, the key and what was expected. */
fm_status fm_profile_parse(const char *text, size_t len, const char *name, fm_gpu_profile *out,
                           fm_err *err);
fm_status fm_profile_load(const char *path, fm_gpu_profile *out, fm_err *err);
/* Writes p as JSON (the format above), atomically. */
fm_status fm_profile_save(const fm_gpu_profile *p, const char *path, fm_err *err);
/* The profile's identity as members of the open JSON object j: "gpu",
 * "kernel", "date", "fmsim_version" (the profile file and `fmsim predict --json`). */
struct fm_json;
void fm_profile_ident_json(const fm_gpu_profile *p, struct fm_json *j);

/* The coefficients for pass (FM_PASS_FWD or FM_PASS_BWD) at head_dim; NULL
 * when the profile has none (no backward kernel yet, another head dim). */
const fm_timing_coef *fm_profile_coef(const fm_gpu_profile *p, fm_pass pass, int32_t head_dim);

/* What the model needs of a mask at one tile size: per-row-tile and
 * per-key-tile work of every vector set. O((Tr + Tc) * sets) memory. */
typedef struct fm_timing_work {
  int32_t sq, sk, br, bc, tr, tc;
  int32_t nb, nh;        /* vector sets nb x nh (fm_colmask) */
  int causal;
  fm_work *rows;         /* (nb * nh, Tr), owned */
  fm_work *cols;         /* (nb * nh, Tc), owned */
  int64_t *kv_cols;      /* (nb * nh,) key columns that some row tile visits, owned */
  fm_tile_counts counts; /* min/max counts over the sets (exact not computed) */
} fm_timing_work;

/* Counts the work of m at Br x Bc (fm_tile_count). Free with
 * fm_timing_work_free (a zeroed or failed work is fine to free). */
fm_status fm_timing_work_init(fm_timing_work *w, const fm_colmask *m, int32_t br, int32_t bc,
                              fm_err *err);
void fm_timing_work_free(fm_timing_work *w);

typedef struct fm_timing_problem {
  int64_t batch, heads;  /* B, H; the mask's sets must be 1 or match (as the kernels) */
  int32_t head_dim;
  fm_pass pass;          /* FM_PASS_FWD or FM_PASS_BWD (not both: call twice) */
  fm_variant variant;    /* SKIP, or NOSKIP (every tile visited, MASKED as PARTIAL) */
  int full_mask;         /* 1: cost as the full mask of the same shape (every tile UNMASKED) */
  fm_clock clock;        /* BURST (zeroed) or SUSTAINED: how the boost window applies */
} fm_timing_problem;

#define FM_TIMING_NFEAT 6 /* launch, items, considered, unmasked, partial, partial causal */

typedef struct fm_timing_result {
  double time_us;       /* predicted: launch_us + max(schedule_us + throttle_us, floor_us) */
  double schedule_us;   /* makespan of the items over the SMs at the boost clock */
  double throttle_us;   /* what the clock's fall adds to it (>= 0): past the boost window
                           (BURST), or from the start (SUSTAINED) */
  double floor_us;      /* memory floor */
  double launch_us;
  double bytes;         /* compulsory bytes of the floor */
  double flops_paper;   /* 4*B*H*Sq*Sk*D*(1 - rho), x2.5 for the backward */
  double tflops;        /* flops_paper / time_us */
  double rho;           /* block sparsity at the tile used (min/max rule) */
  double waves;         /* items / slots */
  double busy;          /* summed item time / (slots * schedule_us): 1 = no idle slot */
  int64_t items, slots;
  int64_t tiles_visited, tiles_partial, tiles_total; /* over every (b, h) */
  int32_t br, bc;       /* the tile used */
  int what_if;          /* 1: the tile differs from the profile's, costs scaled */
  /* The critical slot's work: schedule_us = sum_{k >= 1} critical[k] *
     coefficient k, and time_us = launch_us + clocked(schedule_us) when the
     schedule sets the time (what `fmsim calibrate` fits); critical[0] = 1. */
  double critical[FM_TIMING_NFEAT];
} fm_timing_result;

/* Predicts the time of pb on the profile's kernel with the work w (counted at
 * the kernel's tile for pb->head_dim, or at a what-if tile). FM_EUNSUPPORTED
 * when the profile has no coefficients for the pass or head dim, or for the
 * dense variant; FM_EINVAL when the sets do not fit B and H. */
fm_status fm_timing_predict(const fm_gpu_profile *prof, const fm_timing_work *w,
                            const fm_timing_problem *pb, fm_timing_result *out, fm_err *err);

/* The time of r, a prediction with coefficients c, in clock state `clock` (whatever
 * state r was predicted in): launch_us + max(clocked(schedule_us), floor_us), what
 * r->time_us is in r's own state. `fmsim cp-plan` prices one rank's launch in two states. */
double fm_timing_time_in(const fm_timing_coef *c, fm_clock clock, const fm_timing_result *r);

/* The same with explicit coefficients (no profile): what the fit iterates. */
fm_status fm_timing_predict_coef(const fm_timing_coef *c, fm_kernel_id kernel, int32_t sms,
                                 double hbm_gbs, const fm_timing_work *w,
                                 const fm_timing_problem *pb, fm_timing_result *out, fm_err *err);

/* ------------------------------------------------------------------ fit */

/* One measured case for the fit. */
typedef struct fm_fit_case {
  const fm_timing_work *work; /* at the kernel's tile for head_dim */
  fm_timing_problem problem;
  double measured_us;
} fm_fit_case;

typedef struct fm_fit_options {
  int32_t ctas_per_sm;  /* 0: the kernel's default */
  int max_iterations;   /* schedule <-> coefficients rounds, 0: 12 */
  unsigned fixed;       /* bit k (k as in critical[]): coefficient k is pinned to fixed_value[k] */
  double fixed_value[FM_TIMING_NFEAT];
  int boost_window;     /* 1: fit a boost window too (boost_us, throttle); 0: none */
} fm_fit_options;

/* The level below which the window's test keeps a fitted boost window. */
#define FM_FIT_BOOST_P 0.001

/* Fits out (launch, item, key tile, unmasked, partial, partial causal
 * coefficients, and solo for the grid schedule) to n cases of one head dim:
 * Gauss-Newton steps on the relative error: the time of a case is its
 * critical work (fm_timing_result.critical) times the coefficients, so each
 * step is a non-negative least squares on the critical work of the current
 * schedule; solo by a search over [1, 2]; then restarts from perturbed
 * coefficients and a pattern search, as the residual is piecewise linear
 * (kinks where the critical SM changes). Its cost is a few hundred schedule
 * simulations of every case at most (fewer for large sets: tens of seconds
 * for a hundred cases of 32K work items). predicted_us (n,) receives the
 * fitted model's prediction of each case. A coefficient that no case
 * exercises (e.g. no PARTIAL tile of a causal mask) cannot be fitted: it
 * takes its nearest kin (partial <-> partial causal, else unmasked) and the
 * bit (1 << k, k as in critical[]) is set in *unidentified; two that the cases
 * cannot tell apart (proportional work in every case) both get their bit,
 * their split is then arbitrary though the predictions hold. Pinned coefficients
 * (opt->fixed) are not fitted: for data that cannot separate two of them,
 * e.g. launch_us from item_us when every case has as many work items.
 *
 * Boost window (opt->boost_window): once the coefficients above are fitted
 * without one, the window is searched with each case's critical work held at
 * that fit's schedule. Past the window a case takes launch + throttle * work
 * - (throttle - 1) * boost_us: for a given throttle, and the cases' sides of
 * the window, the time is linear in the coefficients and boost_us, a
 * non-negative least squares (re-sided until no case moves). Throttle is
 * searched on a grid (1.02 to 1.5 by 0.02) from every split of the cases by
 * makespan that leaves 3 or more on each side; then, on the true schedule
 * held anew at each round, finer around the best (steps of 0.0025, then
 * 0.0003) while the residual falls, and a pattern search moves everything,
 * the window too. The window is kept when the residual sum of squares falls
 * from RSS0 to RSS1 with p = (RSS1 / RSS0)^((n - k) / 2) < FM_FIT_BOOST_P,
 * k the parameters fitted (the F test of two more parameters; the window
 * being searched, p is optimistic, hence the strict level); else out has
 * none (throttle 1, boost_us 0). At least 8 cases.
 * out->fit_boost_p receives p (-1 when no window was tried).
 * FM_EINVAL for fewer cases than 2 or a non-positive measurement. */
fm_status fm_timing_fit(fm_kernel_id kernel, int32_t sms, double hbm_gbs, int32_t head_dim,
                        const fm_fit_case *cases, int n, const fm_fit_options *opt,
                        fm_timing_coef *out, double *predicted_us, unsigned *unidentified,
                        fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
