/* fm_cp_run.h — executing a context-parallel plan (issue 24; docs/DESIGN.md,
 * "Context parallelism", "cp-run"): the schedule every executor follows, the
 * pure helpers it needs, and the CPU executor (a single-process fake of the
 * exchange, what CI runs). The GPU executor (kernels/fm_cp_gpu.h, NCCL) runs
 * the same schedule.
 *
 * The problem is the plan's (core/fm_cp_plan.h): self-attention over S
 * tokens (Sq = Sk = S), batch B, H heads, head dim D, P ranks; rank r owns
 * the query and K/V rows of its segments. Storage of a rank ("compact"):
 * its rows in row order, R = rows of rank r,
 *   Q, K, V, O, dO, dQ, dK, dV   (B, R, H, D)  (the plan's layout, fm_attn.h)
 *   LSE                          (B, H, R)
 * so segment k of rank r, rows [row0, row1), sits at local rows [local0,
 * local0 + row1 - row0) of every batch.
 *
 * Units: every count in a schedule is in rows (tokens); one row of one tensor
 * is H x D elements per batch. An offset `off` into a buffer of n rows means
 * elements [(b * n + off) * H * D, (b * n + off + rows) * H * D) of batch b.
 *
 * The two exchanges (fm_cp_exchange):
 * Every link's moves travel as its messages (fm_cp_msg: moves contiguous on
 * both sides coalesced), one NCCL message per batch, message and tensor.
 *   FM_CP_ALLGATHER  one group of point-to-point messages: rank r receives
 *     every segment its `need` row names into a (B, S, H, D) K/V buffer at
 *     its global rows (dst off = row0; its own rows are filled there too);
 *     a segment it does not need is never sent, and every tile of the rank's
 *     rows on it is MASKED (the plan's definition of need), so the kernel
 *     never reads it. One forward launch: the rank's local mask
 *     (fm_cp_rank_mask) against all S keys. Backward: one launch gives dQ and
 *     dK/dV partials for all S keys; the partials of needed segments go back
 *     to their owners (the `out` lists, in reverse), which add them to their
 *     own in fp32 and round to bf16 once.
 *   FM_CP_RING  steps over sources in ring order r, r-1, ... (mod P); step
 *     0 is the rank's own keys (always run), a step s > 0 runs when the rank
 *     needs a segment of source (r - s) mod P. The step's keys are the
 *     source's needed segments in row order (own step: all own segments),
 *     concatenated: a (B, ncols, H, D) K/V buffer; its mask is the local
 *     mask's column subset (fm_cp_colmask_subset). Each step gives partial O
 *     and LSE, merged by log-sum-exp (fm_cp_lse_merge). Backward: per step
 *     the kernel's backward with the MERGED O and LSE, dQ summed over steps
 *     in fp32, the step's dK/dV partials sent back to the source, which adds
 *     them in fp32. Communication of global step s (1 <= s < P): rank r
 *     receives in[(r - s) mod P] and sends out[(r + s) mod P] (backward
 *     partials: the reverse), so every pair of ranks meets in exactly one
 *     step per direction and every rank posts its groups in the same order
 *     of s (no deadlock).
 *
 * Ownership: fm_cp_schedule_create copies what it needs from the plan (it
 * may be destroyed after); the schedule owns every array it points to, freed
 * by fm_cp_schedule_destroy. Memory O(P x nsegments) in all.
 */
#ifndef FM_CP_RUN_H
#define FM_CP_RUN_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_cp_plan.h"
#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most ranks a run schedules (its links are P x P). */
#define FM_CP_RUN_MAX_RANKS 1024

/* One segment moved between two ranks (the same entry on both sides). */
typedef struct fm_cp_move {
  int32_t row0, row1; /* global rows */
  int32_t local0;     /* first row in the owner's compact storage */
  int32_t off;        /* first row in the receiver's buffer: ring: the source's step buffer
                         (ncols rows, the needed segments concatenated); allgather: row0 */
} fm_cp_move;

/* One message of a link: rows [src, src + rows) of the sender's buffer into
 * rows [dst, dst + rows) of the receiver's, in every batch (one message per
 * batch and tensor). */
typedef struct fm_cp_msg {
  int32_t src, dst, rows;
} fm_cp_msg;

/* What one rank receives from one peer, or sends to one (moves by row), and
 * the messages that carry it: consecutive moves whose rows are contiguous in
 * the sender's buffer AND in the receiver's become one message
 * (fm_cp_schedule_create). K/V (owner to receiver): src is the owner's row
 * (ring: local0 of its compact K/V; allgather: row0 of its S-row buffer), dst
 * the move's off. Partials back (receiver to owner): src the move's off in
 * the receiver's partial buffer, dst the running row of the move in the
 * owner's receive area of this link (ring: = off; allgather: the link's
 * slice of the buffer of every peer's partials). The all-gather's global
 * rows are never contiguous for two moves of one owner (the plan merges
 * adjacent segments of one owner), so only the ring coalesces. */
typedef struct fm_cp_link {
  int32_t n;              /* moves */
  const fm_cp_move *move; /* (n,) owned by the schedule */
  int32_t rows;           /* their rows in all */
  int32_t nkv, nback;     /* messages of K/V and of partials back (per batch and tensor) */
  const fm_cp_msg *kv, *back; /* (nkv,), (nback,) owned by the schedule */
} fm_cp_link;

/* One ring step of a rank. */
typedef struct fm_cp_step {
  int32_t s;       /* global step index: the source is (rank - s) mod P */
  int32_t source;
  int32_t ncols;   /* key rows of the step (its K/V buffer's rows) */
} fm_cp_step;

typedef struct fm_cp_rank_schedule {
  int32_t rank, rows;     /* R: rows owned */
  int32_t nown;
  const fm_cp_move *own;  /* (nown,) own segments by row (off = local0) */
  const fm_cp_link *in;   /* (P,) from each source; in[rank] empty */
  const fm_cp_link *out;  /* (P,) to each destination; out[rank] empty */
  int32_t nsteps;         /* ring: 1 + sources with something needed */
  const fm_cp_step *step; /* (nsteps,) step[0] is the own step (s = 0) */
  /* buffer sizes in rows (multiply by B x H x D x element size) */
  int32_t ring_max_cols;  /* the largest step's keys over s > 0 (0 when none) */
  int32_t recv_rows;      /* allgather: rows received in all */
  int32_t send_rows_max;  /* the most rows sent to one destination (ring: the partial dK/dV
                             received back from one destination at a time) */
  int32_t send_rows;      /* rows sent in all (allgather: the partials received back) */
} fm_cp_rank_schedule;

typedef struct fm_cp_schedule {
  int32_t seqlen, ranks;
  fm_cp_exchange exchange;
  const fm_cp_rank_schedule *rank; /* (P,) */
} fm_cp_schedule;

/* The schedule of plan sp (a sharding of a plan of seqlen rows, P ranks) for
 * exchange x. The caller owns *out (fm_cp_schedule_destroy). FM_EINVAL for a
 * rank with no rows or an exchange out of range; FM_ENOMEM. */
fm_status fm_cp_schedule_create(const fm_cp_sharding_plan *sp, int32_t seqlen, int32_t ranks,
                                fm_cp_exchange x, fm_cp_schedule **out, fm_err *err);
void fm_cp_schedule_destroy(fm_cp_schedule *s); /* NULL is a no-op */

/* The columns (keys) of ring step `st` of rank rs, as moves (their off is
 * the step buffer's row): own step the own segments, else in[source].
 * *n receives the count. Owned by the schedule. */
const fm_cp_move *fm_cp_step_cols(const fm_cp_rank_schedule *rs, const fm_cp_step *st, int32_t *n);

/* The column subset of mask m (Sq rows, Sk keys): the key columns [row0,
 * row1) of cols[0..n) (as moves; only row0, row1 are read), concatenated in
 * the given order: a mask of Sq rows and sum(row1 - row0) keys, the sets of
 * m, with masked'(i, c) = masked(i, j) for the c-th chosen column j, exactly.
 * A causal m keeps its causal flag only when the columns chosen are the last
 * Sk' of m in order (the triangle is then the same, bottom-right aligned);
 * otherwise the triangle is folded into each column's upper interval (a
 * valid causal mask's upper interval touches it: core/fm_tile_rule.h,
 * fm_effective_upper) and the subset is bidirectional. The caller owns *out.
 * FM_EINVAL for a column out of range or no columns; FM_ENOMEM. O(sets x Sk'). */
fm_status fm_cp_colmask_subset(const fm_colmask *m, const fm_cp_move *cols, int32_t n,
                               fm_colmask **out, fm_err *err);

/* Log-sum-exp merge of a partial result into an accumulated one, in place:
 *   lse' = log(exp(lse) + exp(lse_p)),  o' = (exp(lse - lse') o + exp(lse_p - lse') o_p)
 * o, o_p (B, R, H, D); lse, lse_p (B, H, R) natural log, -inf for a row that
 * saw no key (such a side contributes nothing; both: o stays, lse -inf). The
 * CPU twin of the GPU executor's merge kernel (same formula in fp32 there). */
void fm_cp_lse_merge(int64_t batch, int64_t heads, int64_t rows, int64_t head_dim, double *o,
                     double *lse, const double *o_p, const double *lse_p);

/* The bf16 inputs of a run as a function of (seed, global index): dst[i] =
 * value(seed, first + i) for 0 <= i < n, standard normal. The CPU twin of the
 * GPU's fm_attn_fill_random_bf16_at (kernels/fm_attn.h): the same hash and
 * Box-Muller transform, equal but for the last bit of the GPU's logf and
 * cospif, which changes a bf16 value rarely (the CPU and GPU runs each use
 * their own, consistently: a run never mixes them). */
void fm_cp_fill_bf16(uint16_t *dst, int64_t n, uint64_t seed, int64_t first);

/* Seeds of the four inputs of a run from the user's seed (Q, K, V, dO). */
uint64_t fm_cp_input_seed(uint64_t seed, int which);

/* ------------------------------------------------------------ the CPU executor */

typedef struct fm_cp_fake_opts {
  int32_t batch, heads, head_dim;
  uint64_t seed;   /* inputs: fm_cp_fill_bf16 with fm_cp_input_seed(seed, 0..3) */
  int backward;    /* 1: also dQ, dK, dV */
} fm_cp_fake_opts;

/* Per tensor: how the fake's result compares with the whole problem's. */
typedef struct fm_cp_fake_cmp {
  double max_abs, max_rel; /* max |got - ref|; max |got - ref| / |ref| over |ref| > 1e-6 */
  int64_t bad;             /* elements outside atol + rtol |ref| (infinities must match) */
} fm_cp_fake_cmp;

typedef struct fm_cp_fake_result {
  fm_cp_fake_cmp cmp[5];   /* O, LSE, dQ, dK, dV (fm_ref_quantity order); dQ.. when backward */
  int ok;                  /* every compared tensor has bad == 0 */
  int64_t sent_rows[2];    /* K/V rows moved in all (forward), partial dK/dV rows moved back */
  int64_t messages[2];     /* messages of one pass's K/V, and of the partials back (x batch x 2
                              tensors): what the GPU executor posts to NCCL */
  int32_t steps;           /* kernel launches per pass summed over ranks (ring: steps) */
} fm_cp_fake_result;

/* The tolerance of the fake's check: both sides are fp64, so only the order
 * of additions differs. */
#define FM_CP_FAKE_ATOL 1e-9
#define FM_CP_FAKE_RTOL 1e-9

/* Runs schedule s of mask m (the whole problem's, S x S) on the CPU: every
 * rank in turn in one process, its inputs filled from global indices, the
 * exchange as copies between rank buffers following exactly the schedule
 * (rows a rank does not receive hold NaN, so that a read of one shows), the
 * compute by fmsim's fp64 reference (core/fm_reference.h) per launch, the
 * merge by fm_cp_lse_merge; then compares every rank's O, LSE (and dQ, dK,
 * dV) with the fp64 reference of the whole problem. FM_EINVAL for a shape
 * the reference refuses; FM_ENOMEM. O(B x H x S^2 x D) time: for small S. */
fm_status fm_cp_fake_run(const fm_colmask *m, const fm_cp_sharding_plan *sp,
                         const fm_cp_schedule *s, const fm_cp_fake_opts *o, fm_cp_fake_result *r,
                         fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
