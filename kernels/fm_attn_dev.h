/* fm_attn_dev.h — development knobs of the kernels (C-callable), for the
 * kernels' harness fm_kernel_bench (and fm_attn_check's check of the mask
 * methods) only: the sm90 pipelining modes, work orders and partial-tile
 * mask methods it compares (kernels/PERF_NOTES.md, "sm90 forward: versions",
 * "R2P (issue 25): design and SASS"). Not part of the library's interface
 * (fm_attn.h): every other caller gets the library's choices, which a zero
 * fm_attn_tuning also gives.
 */
#ifndef FM_ATTN_DEV_H
#define FM_ATTN_DEV_H

#include <stdint.h>

#include "fm_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  FM_SM90_ORDER_INDEX = 1,    /* heads in order, row tiles of a head from the last */
  FM_SM90_ORDER_EXACT = 2,    /* heaviest first over all heads */
  FM_SM90_ORDER_BUCKETED = 3, /* heaviest first in buckets of Tc / 16 tiles, heads in order inside */
  FM_SM90_ORDER_HEAD = 4      /* heads in order, heaviest first inside each head (the default) */
};
/* How the sm90 kernels, forward and backward, mask a partial tile (one knob
 * for both passes; kernels/fm_sm90_mask.h; PERF_NOTES.md, "R2P (issue 25):
 * design and SASS"): both methods mask the same elements and give the same
 * output (and gradients) bit for bit; the library's kernels use
 * FM_SM90_MASK_DEFAULT (R2P unless the build defines it: measured on an H100
 * 4-8% faster in the backward, equal or 2-10% cheaper in the forward), the
 * other method (SLICES) is built for the skip variant (plain and
 * instrumented), so that one build times both (fm_kernel_bench --sm90-masks
 * 1,2) and checks them against each other (fmsim verify, phases 3b, 7b). */
/* FM_SM90_MASK_WORDS (the public method words, forward only; PERF_NOTES, "R2P:
 * the precomputed words, built"): R2P's per-thread words precomputed per
 * partial tile by a preprocessing kernel into a global workspace, copied into
 * the K stage with K by the producer (which builds no slices) and read by the
 * consumers from shared memory, the same output bit for bit. Built for the
 * forward's skip variant in the default mode (plain and instrumented;
 * fm_kernel_bench --sm90-masks 2,3 times it, fmsim verify's phase 3b checks
 * it). The forward runs R2P instead, with one line on stderr, where it is not
 * built and when the workspace exceeds FM90M_WORDS_BUDGET
 * (kernels/fm_sm90_mask.h; kernels/fm_sm90.cu); the backward runs R2P. */
enum {
  FM_SM90_MASK_SLICES = FM_MASK_METHOD_SLICES, /* the public names: fm_mask_method, core/fm_kernels.h */
  FM_SM90_MASK_R2P = FM_MASK_METHOD_R2P,
  FM_SM90_MASK_WORDS = FM_MASK_METHOD_WORDS
};
#ifndef FM_SM90_MASK_DEFAULT
#define FM_SM90_MASK_DEFAULT FM_SM90_MASK_R2P
#endif
/* An experiment knob, the forward's consumer only (kernels/PERF_NOTES.md,
 * "Sixteenth session: the floor experiment"): what the R2P method does on a
 * partial tile of a slices variant. 0 (the default): the mask. 1: the apply
 * alone, R2P and FSEL on three words of an opaque zero, without the slice
 * loads and the gather. 2: no mask work. Builds with 1 or 2 mask nothing
 * there, so their masked outputs are wrong by design: for timing only. */
#ifndef FM_SM90_FWD_FLOOR
#define FM_SM90_FWD_FLOOR 0
#endif
typedef struct fm_attn_tuning {
  int32_t sm90_mode;  /* 1 + pipelining mode: 1 plain, 2 overlap, 3 ping-pong, 4 both
                         (fm_sm90_launch.cuh); 0: the default */
  int32_t sm90_order; /* work order: FM_SM90_ORDER_*; 0: the default (FM_SM90_ORDER_HEAD) */
  int32_t sm90_mask;  /* partial-tile mask, both passes: FM_SM90_MASK_*; 0: the problem's
                         mask_method (fm_attn.h), whose 0 is FM_SM90_MASK_DEFAULT */
} fm_attn_tuning;

/* One pass with knobs, as a launch function of the timing harness
 * (fm_launch_fn, fm_cupti.h): fm_attn_tuned_launch_run(user, ...) with user an
 * fm_attn_tuned_launch runs launch as fm_attn_launch_run does, with `tuning`
 * in place of the library's choices. */
typedef struct fm_attn_tuned_launch {
  fm_attn_launch launch;
  fm_attn_tuning tuning;
} fm_attn_tuned_launch;
fm_status fm_attn_tuned_launch_run(void *user, void *stream, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
