/* fm_cp_plan.h — context-parallel plans: how P GPUs split one masked
 * attention by sequence, planned on the CPU (issue 24; docs/DESIGN.md,
 * "Context parallelism"). `fmsim cp-plan` prints a plan; `fmsim cp-run`
 * executes one (its rows, its K/V exchange, its per-rank masks).
 *
 * The problem: self-attention over one sequence of S tokens (Sq = Sk = S),
 * batch B, H heads, head dim D, a mask fmsim reads (fm_colmask). Query rows
 * are split among P ranks; a rank's K/V rows are the same rows as its query
 * rows (K/V stay with their owner). A rank computes its query rows against
 * every key: the keys of other ranks arrive by an exchange.
 *
 * Shardings (one registry row each, fm_cp_sharding_name/parse):
 *   contiguous  P blocks of consecutive rows, as equal as the granule allows;
 *   zigzag      2P stripes, rank r owning stripes r and 2P-1-r (ring
 *               attention's zigzag: for a causal mask each rank gets one
 *               light and one heavy stripe);
 *   mask-aware  query chunks of `chunk` rows assigned by their work, largest
 *               first onto the least-loaded rank (PaddlePaddle FlashMask's
 *               context parallel), or by the exact solver; the work of a
 *               chunk is its visited forward tiles (min/max rule, the
 *               kernel's tile). K/V follow their query chunk, as in the other
 *               two (a chunk's K/V rows live on the rank that owns its
 *               queries: for document masks most visited tiles are then
 *               local; docs/DESIGN.md, "Context parallelism", says why
 *               not contiguous K/V).
 * Every boundary is a multiple of the granule, the least common multiple of
 * the kernel's forward and backward tiles (rows and columns): 128 for sm90 at
 * head dim 128, 384 at 64. A rank's rows are then whole row tiles and its K/V
 * whole key tiles, of both passes; the last segment ends at S.
 *
 * A rank's sub-problem is its rows (its segments, in row order) against all
 * S keys. Its local mask (fm_cp_rank_mask) maps every interval [a, b) of a
 * column to [L(a), L(b)), L(x) = rows of the rank below x, which is exact
 * (the rank's rows inside [a, b) are consecutive in local order); a causal
 * mask keeps its causal flag when the rank owns one segment that ends at S
 * (the bottom-right triangle is then the same), else its triangle is folded
 * into the upper interval (a bidir-4 mask). Every tile of the local mask
 * keeps its class, by the min/max rule and exactly (L is monotone and the
 * rank's tiles are whole), so the plan classifies the whole mask once per
 * pass tile (fm_tile_walk) and counts each rank's tiles from that walk,
 * never building a local mask and never allocating O(S^2) or O(Tr x Tc).
 *
 * Times: a rank's forward and backward come from the timing model
 * (fm_timing_predict, core/fm_timing.h) on the work of its local mask at the
 * kernel's tile of each pass (built from the walk; equal to
 * fm_timing_work_init of fm_cp_rank_mask, which the tests check). The
 * one-GPU time is fm_timing_predict of the whole mask, what `fmsim predict`
 * prints.
 *
 * K/V exchange. A segment is the unit sent. Rank r needs segment k when
 * another rank owns k and some tile of r's rows on k's keys is not MASKED by
 * the min/max rule, in the forward or the backward (the kernel skips MASKED
 * tiles before loading K/V). Both exchanges are costed as cp-run's executor
 * runs them (fm_cp_model_ring, fm_cp_model_allgather below; link: link_gbs
 * GB/s per pair of GPUs and direction, at most gpu_gbs through one GPU,
 * link_us per NCCL message; the backward also
 * sends the dK/dV partials of received segments back to their owners):
 *   FM_CP_ALLGATHER  one group of every needed segment, then one launch; the
 *                    backward's launch, then the partials back. Holds K/V
 *                    and partials for all S rows.
 *   FM_CP_RING       one step per source rank in ring order (r, r-1, ...),
 *                    a source with nothing needed skipped, one launch per
 *                    step and the merge (forward) or dQ sum (backward) it
 *                    feeds; the groups lockstep across ranks (global step s:
 *                    r receives from r - s, sends to r + s), each after the
 *                    rank's step i - 2 (double buffering). Holds two steps.
 * Both count the executor's own kernels (merges, fp32 sums, conversions) as
 * the HBM bytes they move at the profile's hbm_gbs, and a ring step past the
 * first the fixed part of one more launch (the profile's launch_us; forward,
 * every row tile's item_us; backward, the launch's row work).
 * The step is the sum over passes of the slowest rank's wall (a barrier
 * between passes); memory is what cp-run allocates. The plan picks the faster
 * whose peak memory fits mem_budget (ties within 1%: the smaller memory);
 * docs/DESIGN.md, "The exchange model", has the recurrences and the
 * measurements they were checked against.
 *
 * Memory: fm_cp_plan_create allocates O(sets x (Tr + Tc) + P x segments)
 * per pass (checked against the memory budget, fm_limits.h) and frees it all
 * in fm_cp_plan_destroy; O(P x (Tr + sets x Tc)) time per sharding and pass
 * plus the timing model's: 0.04 s at 1M tokens, 0.7 s at 16M on the 2-core
 * machine (docs/DESIGN.md, "Context parallelism").
 */
#ifndef FM_CP_PLAN_H
#define FM_CP_PLAN_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_kernels.h"
#include "fm_status.h"
#include "fm_tiles.h"
#include "fm_timing.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fm_cp_sharding {
  FM_CP_CONTIGUOUS = 0,
  FM_CP_ZIGZAG = 1,
  FM_CP_MASK_AWARE = 2,
  FM_CP_NSHARDINGS = 3
} fm_cp_sharding;

typedef enum fm_cp_exchange {
  FM_CP_ALLGATHER = 0, /* (a) all-gather of only the needed K/V segments */
  FM_CP_RING = 1,      /* (b) ring of point-to-point sends, LSE merge */
  FM_CP_NEXCHANGES = 2
} fm_cp_exchange;

/* Index of per-pass arrays. */
enum { FM_CP_FWD = 0, FM_CP_BWD = 1, FM_CP_NPASSES = 2 };

#define FM_CP_DEFAULT_CHUNK 2048       /* mask-aware chunk rows (Paddle's), rounded up to the granule */
#define FM_CP_EXACT_MAX_CHUNKS 24      /* the exact solver's limit */
#define FM_CP_MAX_RANKS 65536
#define FM_CP_DEFAULT_LINK_GBS 90.0    /* per pair of GPUs and direction: cp-run's measured K/V
                                          group rate on H200 NVLink (docs/DESIGN.md, "The exchange model") */
#define FM_CP_GPU_GBS 450.0            /* through one GPU and direction, all its pairs at once: NVLink
                                          4's 18 links x 25 GB/s (H100, H200), the hardware's bound */
#define FM_CP_DEFAULT_LINK_US 10.0     /* per message */
#define FM_CP_DEFAULT_COMM_SM_FRAC 0.03 /* the SMs a ring group in flight holds: bench/cp_contend.sh on
                                          4 H200s at 128K, NCCL at its default (f 0.031, 0.035;
                                          docs/DESIGN.md, "The exchange model") */
#define FM_CP_WINDOW_US_FWD 9.0       /* what cp-run's event window around one forward launch holds
                                          beyond the timing model's prediction of it, us ... */
#define FM_CP_WINDOW_US_BWD 22.0      /* ... and around one backward launch: the medians over cp-run's
                                          one-GPU 16K runs (docs/DESIGN.md, "The exchange model") */
#define FM_CP_DEFAULT_MEM_BUDGET ((int64_t)120 << 30) /* bytes per GPU: an H200's 141 GB less room */

/* "contiguous", "zigzag", "mask-aware"; "?" out of range. Static storage. */
const char *fm_cp_sharding_name(fm_cp_sharding s);
/* A sharding name or "all" into bits (1u << fm_cp_sharding); FM_EINVAL naming
 * the choices (read from the registry) otherwise. */
fm_status fm_cp_shardings_parse(const char *text, unsigned *bits, fm_err *err);
/* "allgather", "ring"; "?" out of range. Static storage. */
const char *fm_cp_exchange_name(fm_cp_exchange e);

typedef struct fm_cp_options {
  int32_t ranks;          /* P, 1..FM_CP_MAX_RANKS */
  unsigned shardings;     /* bits (1u << fm_cp_sharding); 0: all */
  int32_t chunk;          /* mask-aware chunk rows, a multiple of the granule; 0: the default */
  int exact;              /* 1: mask-aware by fm_cp_assign_exact (FM_EUNSUPPORTED above
                             FM_CP_EXACT_MAX_CHUNKS chunks), else fm_cp_assign_greedy */
  fm_kernel_id kernel;    /* whose tiles; FM_KERNEL_AUTO: the profile's, else the H200's */
  int32_t head_dim;       /* D; 0: 128 */
  int64_t batch, heads;   /* B, H (1..65535; 0: 1); the mask's sets must be 1 or match */
  const fm_gpu_profile *profile; /* the timing model's; NULL: no times (tile work only).
                                    Borrowed during fm_cp_plan_create only */
  double link_gbs;        /* GB/s per pair of GPUs and direction; 0: FM_CP_DEFAULT_LINK_GBS */
  double link_us;         /* latency per message, us; 0: FM_CP_DEFAULT_LINK_US */
  double gpu_gbs;         /* GB/s through one GPU and direction; 0: FM_CP_GPU_GBS; negative: unbounded */
  double comm_sm_frac;    /* the fraction of a GPU's SMs its NCCL kernels hold while a ring
                             group is in flight, < 1; 0: FM_CP_DEFAULT_COMM_SM_FRAC;
                             negative: none (fm_cp_model's comm_sm_frac) */
  int64_t mem_budget;     /* bytes per GPU; 0: FM_CP_DEFAULT_MEM_BUDGET */
  fm_clock clock;         /* the clock state (fm_timing.h) of the one-GPU time, the ranks'
                             compute and the ring's steps: BURST (zeroed), or SUSTAINED,
                             what cp-run times (launches back to back) */
  fm_clock allgather_clock; /* the state of the all-gather's launches. Each follows an
                             all-gather during which the rank's SMs idle, so it starts at the
                             boost clock as a launch apart does: fmsim's default (--clock
                             auto) is BURST here and SUSTAINED above (docs/DESIGN.md, "The
                             exchange model": measured on 2 and 4 H200s) */
} fm_cp_options;

/* --clock's words: "auto" (clock SUSTAINED, allgather_clock BURST), "burst" or
 * "sustained" (both); FM_EINVAL naming them otherwise. */
fm_status fm_cp_clock_parse(const char *text, fm_clock *clock, fm_clock *allgather_clock, fm_err *err);
/* The word of a pair: "auto", "burst", "sustained", or "mixed". Static storage. */
const char *fm_cp_clock_name(fm_clock clock, fm_clock allgather_clock);

/* Rows [row0, row1) of queries and of K/V, owned by rank. */
typedef struct fm_cp_segment {
  int32_t row0, row1, rank;
} fm_cp_segment;

/* One exchange's cost for a rank (times NaN without a profile). */
typedef struct fm_cp_cost {
  double ms[FM_CP_NPASSES]; /* the pass with its exchange: compute, waits, sends */
  double compute_ms[FM_CP_NPASSES]; /* what cp-run measures as the pass's compute: the compute
                                       stream's step windows summed (all-gather: the launch,
                                       at allgather_clock; ring: every step with its merge or
                                       dQ sum, stretched by the NCCL groups beside it) */
  double step_ms;           /* ms[FWD] + ms[BWD] */
  int64_t mem_bytes;        /* peak per GPU: its own tensors plus the exchange's buffers */
} fm_cp_cost;

typedef struct fm_cp_rank {
  int64_t rows;                       /* query rows owned (= K/V rows) */
  int32_t segments;                   /* segments owned */
  fm_tile_counts tiles[FM_CP_NPASSES]; /* its rows x all keys at the pass's tile, min/max and
                                         exact, over the mask's vector sets (as fm_classify) */
  int64_t work;                       /* visited forward tiles (min/max): the balance measure */
  double ms[FM_CP_NPASSES];           /* predicted time of each pass (NaN: no profile, no fit) */
  double compute_ms;                  /* the sum of the passes predicted (NaN: none) */
  int64_t kv_recv_rows;               /* K/V rows of needed segments of other ranks */
  int64_t kv_recv_bytes;              /* kv_recv_rows x kv_row_bytes */
  int32_t kv_sources;                 /* ranks it receives from */
  int64_t kv_messages[FM_CP_NEXCHANGES]; /* NCCL messages of the K/V it receives in one pass
                                         (cp-run's: per batch, tensor and run of segments
                                         contiguous on both sides) */
  fm_cp_cost cost[FM_CP_NEXCHANGES];  /* FM_CP_ALLGATHER, FM_CP_RING */
  const struct fm_cp_ring_step *steps;     /* (nsteps,) its ring steps in order (own keys first); the
                                         plan owns them */
  int32_t nsteps;
} fm_cp_rank;

/* One ring step of a rank (times NaN without a profile). */
typedef struct fm_cp_ring_step {
  int32_t source, s;                  /* the source rank, (rank - s) mod P; s = 0: the own keys */
  int64_t kv_bytes;                   /* K/V bytes received from it (0 for the own keys) */
  double ms[FM_CP_NPASSES];           /* its compute alone: the timing model's launch of the
                                         rank's rows against the step's keys (its segments
                                         the rank needs; s = 0: all its own), a further
                                         launch's extras (s > 0), the merge or dQ sum */
  double ring_ms[FM_CP_NPASSES];      /* its window in the ring's replay: ms stretched by the
                                         rank's NCCL groups beside it (comm_sm_frac) */
  int64_t items[FM_CP_NPASSES];       /* its launch's work items (0 without a profile): against
                                         the SM count, the waves NCCL's SMs may add */
} fm_cp_ring_step;

typedef struct fm_cp_sharding_plan {
  fm_cp_sharding sharding;
  int exact_solver;                /* mask-aware: 1 assigned by fm_cp_assign_exact */
  int32_t nsegments;
  const fm_cp_segment *segments;   /* (nsegments,) by row, covering [0, S); the plan owns it */
  const fm_cp_rank *ranks;         /* (P,); the plan owns it */
  const uint8_t *need;             /* (P, nsegments): 1 when rank r receives segment k */
  double imbalance_time;           /* max / mean of compute_ms (NaN without times) */
  double imbalance_work;           /* max / mean of work (NaN when no tile is visited) */
  double step_compute_ms;          /* max over ranks of compute_ms */
  double efficiency;               /* one GPU's time / (P x step_compute_ms) */
  int64_t kv_recv_bytes;           /* over every rank: the communication volume */
  int64_t kv_recv_bytes_max;       /* the most one rank receives */
  fm_cp_cost cost[FM_CP_NEXCHANGES]; /* max over ranks of each member */
  int fits[FM_CP_NEXCHANGES];      /* cost[e].mem_bytes <= mem_budget */
  fm_cp_exchange exchange;         /* the plan's choice */
  double step_ms;                  /* cost[exchange].step_ms */
  double efficiency_exchange;      /* one GPU's time / (P x step_ms) */
} fm_cp_sharding_plan;

typedef struct fm_cp_summary {
  int32_t seqlen, ranks;
  int32_t granule, chunk, chunks;      /* mask-aware: rows per chunk, chunks */
  fm_kernel_id kernel;
  int32_t head_dim;
  int64_t batch, heads;
  int32_t br[FM_CP_NPASSES], bc[FM_CP_NPASSES]; /* the kernel's tiles; 0 x 0: no backward */
  fm_tile_counts tiles[FM_CP_NPASSES]; /* the whole mask (fm_classify's counts) */
  int have_times;                      /* a profile was given */
  fm_clock clock, allgather_clock;     /* of the predicted times (fm_cp_options) */
  double one_gpu_ms[FM_CP_NPASSES];    /* fm_timing_predict of the whole mask (NaN: none) */
  double one_gpu_total_ms;             /* the sum of those predicted */
  int64_t kv_row_bytes;                /* one K/V row: heads x head_dim x 2 (bf16) x 2 (K, V) x batch */
  double link_gbs, link_us;            /* per pair of GPUs */
  double gpu_gbs;                      /* through one GPU (FM_CP_GPU_GBS) */
  double comm_sm_frac;                 /* 0: no contention modelled */
  int64_t mem_budget;
  int32_t map_rows, map_cols;          /* the work map's cells (fm_cp_plan_work_map) */
} fm_cp_summary;

typedef struct fm_cp_plan fm_cp_plan;

/* Plans m (Sq = Sk; FM_EINVAL otherwise, and for options out of range: a
 * chunk that is not a multiple of the granule, more ranks than a sharding has
 * room for (contiguous: granules, zigzag: 2P stripes, mask-aware: chunks)).
 * FM_EUNSUPPORTED: --exact above FM_CP_EXACT_MAX_CHUNKS chunks, a head dim
 * the kernel has no tile for; FM_ENOMEM past the memory budget; the timing
 * model's errors. The caller owns *out (fm_cp_plan_destroy). */
fm_status fm_cp_plan_create(const fm_colmask *m, const fm_cp_options *o, fm_cp_plan **out,
                            fm_err *err);
void fm_cp_plan_destroy(fm_cp_plan *p); /* NULL is a no-op */

/* Views owned by the plan, valid until fm_cp_plan_destroy. */
const fm_cp_summary *fm_cp_plan_summary(const fm_cp_plan *p);
/* The plan of one sharding; NULL when it was not asked for. */
const fm_cp_sharding_plan *fm_cp_plan_sharding(const fm_cp_plan *p, fm_cp_sharding s);
/* Why sharding s was left out of a plan of all shardings (it cannot cut these rows for
 * these ranks, e.g. mask-aware with fewer chunks than ranks); NULL when it was planned or
 * not asked for. Asked for by name, such a sharding fails fm_cp_plan_create instead. */
const char *fm_cp_plan_skipped(const fm_cp_plan *p, fm_cp_sharding s);
/* The planned sharding to run: the least predicted step (each at the exchange the plan
 * picked for it: fm_cp_sharding_plan.step_ms), ties to the first in registry order; without
 * times (no profile) the least imbalance of visited tiles. A sharding none of whose
 * exchanges fits the memory budget is taken only when none fits anywhere. */
fm_cp_sharding fm_cp_plan_best(const fm_cp_plan *p);
/* The work map of the first vector set at the forward tile: (map_rows,
 * map_cols) fractions in [0, 1] of visited tiles (min/max rule) per cell, each
 * cell a block of row tiles x key tiles (the whole grid when it has at most 512
 * of each). What the figure draws under the owners' colours. */
const float *fm_cp_plan_work_map(const fm_cp_plan *p);

/* The rank that owns row i (0 <= i < S): a binary search of the segments. */
int32_t fm_cp_owner(const fm_cp_sharding_plan *sp, int32_t i);

/* ------------------------------------------------------------ the exchange model */

/* One source of a rank, as cp-run's executor sees it (docs/DESIGN.md,
 * "Context parallelism", "The exchange model"). */
typedef struct fm_cp_model_src {
  int32_t s;                    /* global step: the source is (rank - s) mod P; 0: the own keys */
  double us[FM_CP_NPASSES];     /* the ring step on this source's keys, per pass: its launch and
                                   the sum it feeds (forward: the merge of its O and LSE; backward:
                                   its dQ into the fp32 dQ), what the compute stream runs */
  double bytes;                 /* K/V bytes received from it (the partials back: as many) */
  int32_t msgs[FM_CP_NEXCHANGES][2]; /* NCCL messages of K/V and of the partials back */
  double back_us;               /* backward, both exchanges: the source adding these partials
                                   (dK, dV) into its fp32 sums, on its comm stream after the
                                   group that brings them back */
  int64_t items[FM_CP_NPASSES]; /* the work items of the step's launch (forward: the rank's row
                                   tiles x B x H; backward: the step's key tiles x B x H) */
  double rate[FM_CP_NPASSES];   /* ring: the step's progress while an NCCL group is resident,
                                   in (0, 1]: the waves of its launch's items on every SM over
                                   those on the SMs NCCL leaves (fm_cp_contended_rate); 0:
                                   1 - the model's comm_sm_frac */
} fm_cp_model_src;

/* What a rank does outside its compute steps and its transfers (us). */
typedef struct fm_cp_model_rank {
  double own_us;                /* ring backward: the OWN item, the own step's dK/dV partials
                                   added into the fp32 sums (comm stream, after step 0) */
  double copy_us;               /* all-gather backward: the own rows' dK/dV partials copied into
                                   the fp32 sums (comm stream, after the group) */
  double tail_us[FM_CP_NEXCHANGES][FM_CP_NPASSES]; /* once both streams are done: the fp32 ->
                                   bf16 conversions (ring: O; dQ, dK, dV; all-gather: dK, dV) */
} fm_cp_model_rank;

typedef struct fm_cp_model {
  int32_t ranks;                /* P */
  const int64_t *start;         /* (P + 1,): rank r's sources are src[start[r] .. start[r + 1]) */
  const fm_cp_model_src *src;   /* by s, s = 0 first; a source that sends nothing is left out */
  double link_gbs, link_us;     /* GB/s per pair of GPUs and direction; us per message */
  double gpu_gbs;               /* GB/s through one GPU and direction, all its transfers of a
                                   group together (FM_CP_GPU_GBS); 0: no such bound */
  const fm_cp_model_rank *rank; /* (P,); NULL: none of that work */
  double comm_sm_frac;          /* ring: the fraction of a rank's SMs its NCCL kernels hold
                                   while a group is posted and not yet moved, in [0, 1); a step
                                   computing then progresses at 1 - comm_sm_frac (0: none) */
} fm_cp_model;

/* The walls (us, from the pass's barrier to the end of its conversions) of
 * every rank in one pass of the ring as cp-run runs it: lockstep groups
 * (global step s: rank r receives from r - s and sends to r + s), every group
 * of a rank after its previous one (one comm stream) and after its compute of
 * step i - 2 (the double buffer; the backward's partials: after step i), each
 * transfer starting when both its ends have posted the group; backward, the
 * sums of the partials a rank gets back follow their group on its comm stream
 * (back_us) and release the buffer; the OWN item adds own_us after step 0; a
 * step's launch after the previous one and its group (backward: and the
 * partials of step i - 2 released); then tail_us. FM_EINVAL for sources not
 * in ring order; FM_ENOMEM. */
fm_status fm_cp_model_ring(const fm_cp_model *m, int pass, double *wall, fm_err *err);
/* The same, with each step's window on the compute stream (us, from its start
 * to its end: its src us, stretched where the rank's NCCL groups are resident)
 * into step_us (start[P],) unless NULL. With comm_sm_frac > 0 the pass is
 * replayed until the walls settle (each replay's steps stretched by the
 * previous one's residences: [the rank posts the group, its last transfer
 * ends], the sums after it left out); FM_EINVAL for comm_sm_frac outside
 * [0, 1). */
fm_status fm_cp_model_ring_steps(const fm_cp_model *m, int pass, double *wall, double *step_us,
                                 fm_err *err);
/* When a step of `us` microseconds of the whole GPU's time, started at t0,
 * ends where NCCL kernels hold the fraction f of the SMs during the intervals
 * iv ([a, b) pairs, n of them, disjoint, in time order): it progresses at
 * 1 - f inside them and at 1 outside (docs/DESIGN.md, "The exchange model"). */
double fm_cp_stretch(double t0, double us, double f, const double *iv, int32_t n);
/* The progress of a launch of `items` equal work items on `slots` SMs while NCCL holds
 * the fraction f of them: ceil(items / slots) / ceil(items / (1 - f) slots), the waves
 * on all over the waves on what is left (1 when they fit on the rest; 1 - f for many
 * items). A one-wave launch that needs more SMs than NCCL leaves takes two. */
double fm_cp_contended_rate(int64_t items, int32_t slots, double f);
/* The fixed microseconds of one more sm90 launch that the code runs on the
 * stream besides the attention kernel (pass FM_CP_FWD / FM_CP_BWD; items the
 * forward's work items, B x H x row tiles; bh = B x H), each small kernel or
 * memset at its measured duration and gap (core/fm_cp_plan.c; docs/DESIGN.md,
 * "The exchange model"). A ring step past the first costs the larger of this
 * and the profile's launch_us. */
double fm_cp_launch_ops_us(int pass, int64_t items, int64_t bh);
/* The same for the all-gather as cp-run runs it: the forward's group (every
 * source at once, side by side: a transfer takes its bytes over the pair's
 * link_gbs, or its sender's outgoing and its receiver's incoming bytes over
 * gpu_gbs if longer, plus its messages' latency) before the one launch compute_us[r]; the
 * backward's launch, then the partials back, each transfer once both ends are
 * done computing, then the rank's copy_us and the back_us of every partial it
 * gets back; then tail_us. */
fm_status fm_cp_model_allgather(const fm_cp_model *m, int pass, const double *compute_us,
                                double *wall, fm_err *err);

struct fm_json;
/* The plan as members of the open JSON object j (format "fmsim-cp-plan",
 * version 1; the keys are listed in docs/DESIGN.md, "Context parallelism"). */
void fm_cp_plan_json(const fm_cp_plan *p, struct fm_json *j);

/* The local mask of rank `rank` for segments seg (nseg, by row, covering
 * [0, Sq) of m): its rows in row order against every key, as described
 * above (Sq' = its rows, Sk unchanged, the sets of m). The caller owns *out
 * (fm_colmask_destroy). FM_EINVAL when the rank owns no rows or m has
 * Sq != Sk; FM_ENOMEM as fm_colmask_create. O(sets x Sk) time. */
fm_status fm_cp_rank_mask(const fm_colmask *m, const fm_cp_segment *seg, int32_t nseg,
                          int32_t rank, fm_colmask **out, fm_err *err);

/* Assignments of n items of work[i] >= 0 to ranks (owner (n,), written):
 * greedy: items by work descending (ties: lower index first), each onto the
 *   rank with the least work (ties: fewer items, then the lower rank);
 * exact: the least possible maximum load (branch and bound from the greedy
 *   answer; FM_EUNSUPPORTED above FM_CP_EXACT_MAX_CHUNKS items).
 * Both leave no rank empty when n >= ranks (an empty rank takes a lighter
 * item from a rank holding two, which never raises the maximum). Return the
 * maximum load; fm_cp_assign_exact returns -1 on failure (err set). */
int64_t fm_cp_assign_greedy(const int64_t *work, int32_t n, int32_t ranks, int32_t *owner);
int64_t fm_cp_assign_exact(const int64_t *work, int32_t n, int32_t ranks, int32_t *owner,
                           fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
