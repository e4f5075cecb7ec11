/* fm_memory.h — how many bytes each mask representation takes.
 *
 * For `sets` mask copies (1 when one mask serves every batch and head, B*H for
 * per-head masks) of an Sq x Sk mask:
 *   dense       bool [sets, Sq, Sk]: 1 byte per element;
 *   block_mask  PyTorch FlexAttention's BlockMask at its block size (128):
 *               kv_num_blocks / full_kv_num_blocks [sets, Tq] and
 *               kv_indices / full_kv_indices [sets, Tq, Tk], plus the
 *               transposed q_num_blocks / full_q_num_blocks [sets, Tk] and
 *               q_indices / full_q_indices [sets, Tk, Tq], all int32;
 *   intervals   FlashMask: the form's k int32 vectors [sets, Sk, k] plus the
 *               8 int32 bound vectors per key tile [sets, 8, Tc] at Bc.
 */
#ifndef FM_MEMORY_H
#define FM_MEMORY_H

#include <stdint.h>

#include "fm_forms.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FM_FLEX_BLOCK 128

typedef struct fm_mask_bytes {
  int64_t sets;
  int64_t dense;
  int64_t block_mask;
  int64_t interval_vectors; /* k vectors of the form */
  int64_t tile_bounds;      /* 8 bound vectors */
  int64_t intervals;        /* interval_vectors + tile_bounds */
} fm_mask_bytes;

void fm_mask_bytes_compute(int64_t sq, int64_t sk, int64_t sets, fm_form form, int32_t bc,
                           fm_mask_bytes *out);

#ifdef __cplusplus
}
#endif
#endif
