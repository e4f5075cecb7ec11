/* fm_bf16.h — bfloat16 <-> float conversion for the CPU side (inputs of the
 * kernels, the same-precision reference, checks). A bf16 value is carried as
 * its uint16_t bit pattern: the upper half of an IEEE float32.
 *
 * fm_f32_to_bf16 rounds to nearest, ties to even (as cvt.rn.bf16.f32 and
 * __float2bfloat16_rn on the GPU); NaN stays NaN (quiet), infinities stay.
 */
#ifndef FM_BF16_H
#define FM_BF16_H

#include <stdint.h>
#include <string.h>

static inline float fm_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t fm_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) /* NaN: keep it quiet */
    return (uint16_t)((u >> 16) | 0x0040u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb; /* overflow past the largest finite rounds to inf, as it should */
  return (uint16_t)(u >> 16);
}

/* f rounded to the nearest bf16, as a float. */
static inline float fm_round_bf16(float f) { return fm_bf16_to_f32(fm_f32_to_bf16(f)); }

#endif
