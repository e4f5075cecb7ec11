#include "fm_memory.h"

void fm_mask_bytes_compute(int64_t sq, int64_t sk, int64_t sets, fm_form form, int32_t bc,
                           fm_mask_bytes *out) {
  int64_t tq = (sq + FM_FLEX_BLOCK - 1) / FM_FLEX_BLOCK, tk = (sk + FM_FLEX_BLOCK - 1) / FM_FLEX_BLOCK;
  int64_t tc = (sk + bc - 1) / bc;
  int k = form == FM_FORM_NONE ? 4 : fm_form_k(form);
  out->sets = sets;
  out->dense = sets * sq * sk;
  out->block_mask = sets * 4 * (2 * (tq + tk) + 4 * tq * tk);
  out->interval_vectors = sets * sk * k * 4;
  out->tile_bounds = sets * 8 * tc * 4;
  out->intervals = out->interval_vectors + out->tile_bounds;
}
