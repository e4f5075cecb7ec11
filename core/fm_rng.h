/* fm_rng.h — the one seeded random generator of fmsim (splitmix64 seeding,
 * xoshiro256**). Deterministic across platforms: every random draw in fmsim
 * takes a seed and goes through here. */
#ifndef FM_RNG_H
#define FM_RNG_H

#include <stdint.h>

typedef struct fm_rng {
  uint64_t s[4];
} fm_rng;

static inline uint64_t fm_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#ifdef __CUDACC__
#define FM_RNG_HD __host__ __device__
#else
#define FM_RNG_HD
#endif

/* The inputs' bits: 64 random bits of (seed, index), splitmix64's finalizer
 * on a Weyl step. fm_attn_fill_random_bf16 draws every element on the device
 * from them, and fm_cp_fill_bf16 (the CPU executor's twin) on the host, so
 * that both give element `index` of the same tensor. */
static inline FM_RNG_HD uint64_t fm_fill_bits(uint64_t seed, uint64_t index) {
  uint64_t x = index * 0x9e3779b97f4a7c15ull ^ (seed * 0xd1b54a32d192ed03ull + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* stream lets one seed give independent generators (e.g. one per head). */
static inline void fm_rng_seed(fm_rng *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
  for (int i = 0; i < 4; i++) r->s[i] = fm_splitmix64(&x);
}

static inline uint64_t fm_rng_next(fm_rng *r) {
  uint64_t *s = r->s;
  uint64_t t = s[1] << 17, x = s[1] * 5;
  uint64_t out = ((x << 7) | (x >> 57)) * 9;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return out;
}

/* Uniform in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^64). */
static inline uint64_t fm_rng_below(fm_rng *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)fm_rng_next(r) * n) >> 64);
}

/* Uniform integer in [lo, hi], lo <= hi. */
static inline int64_t fm_rng_range(fm_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)fm_rng_below(r, (uint64_t)(hi - lo) + 1);
}

#endif
