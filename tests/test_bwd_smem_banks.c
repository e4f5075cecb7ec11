/* The shared-memory stores of the sm90 backward (kernels/fm_sm90_bwd.cuh), host
 * side: for every store site, each lane's address in each store instruction of
 * a warp, as the kernel computes it, against (a) the layout the consumer reads
 * (the 128-byte swizzle of the TMA box or of the wgmma descriptor) and (b) the
 * shared-memory bank model, in wavefronts per instruction.
 *
 * The bank model (the one Nsight Compute's per-instruction counters follow):
 * 32 banks of 4 bytes; a warp's store of W bytes a lane is served in 32 W / 128
 * lane groups (W = 4: the warp; W = 8: half-warps of 16 lanes; W = 16: quarter
 * warps), and a group needs as many wavefronts as the most distinct 4-byte
 * words any one bank holds among its lanes' bytes. Ideal: 32 W / 128.
 *
 * Checked against the Nsight Compute profile of the full 8K backward at 2156e7d
 * (/work/wt/bwd_full8k.ncu-rep, bwd_kernel<128, 0, 0>; per SASS instruction):
 * the dQ staging's 16 ST.E.64 at 4 wavefronts a request (ideal 2), every
 * 32-bit store at 1; together 1,113,620,612 store requests and 2,724,233,348
 * store wavefronts, and all 1,073,741,824 excessive shared wavefronts of the
 * kernel are those ST.E.64's. The model gives the same per instruction
 * (old_mapping_matches_the_profile); with the new dQ mapping 2 (fm_sm90_bwd.cuh,
 * stage_dq, called reduce_dq before the dQ writers of branch bwddq).
 *
 * Each store map is a copy of the kernel's index arithmetic (keep them in step);
 * the lane's data comes from the wgmma fragment layouts of fm_hopper.cuh, the
 * addresses the consumer reads from the swizzle's definition, so a store map
 * that writes any element anywhere else, twice, or not at all fails. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BR = 64, BC = 128 };

/* ------------------------------------------------------------ the bank model */

/* Wavefronts of one warp-wide store of `width` bytes a lane at addr[32]. */
static int wavefronts(const uint32_t addr[32], int width) {
  const int group = 32 * 4 / width; /* lanes per group */
  int total = 0;
  for (int g0 = 0; g0 < 32; g0 += group) {
    uint32_t words[32][32]; /* per bank, the distinct words */
    int nw[32] = {0}, most = 0;
    for (int l = g0; l < g0 + group; l++)
      for (int k = 0; k < width / 4; k++) {
        const uint32_t w = addr[l] / 4 + (uint32_t)k, b = w % 32;
        int seen = 0;
        for (int i = 0; i < nw[b]; i++) seen |= words[b][i] == w;
        if (!seen) words[b][nw[b]++] = w;
        if (nw[b] > most) most = nw[b];
      }
    total += most;
  }
  return total;
}
static int ideal_wavefronts(int width) { return 32 * width / 128; }

/* ------------------------------------------------ the consumers' read layout */

/* The 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B, wgmma swizzle mode 1) of a
 * byte offset from a 1024-byte-aligned atom: the 16-byte chunk index (bits
 * 4-6) XOR the row index within the 8-row group (bits 7-9). */
static uint32_t swz128(uint32_t off) { return off ^ (((off >> 7) & 7u) << 4); }

/* dQ staging read by the two cp.reduce.async.bulk.tensor boxes of 32 fp32 x BR
 * rows (tm_dq, SWIZZLE_128B): element (r, c) of the warpgroup's (BR, 64) part. */
static uint32_t dq_consumer(int r, int c) { return swz128((uint32_t)((c >> 5) * BR * 128 + r * 128 + (c & 31) * 4)); }
/* dS^T read by the dQ wgmma (A = dS, MN-major, SW128, desc_mnmajor(ds, BC, kk)):
 * key k is a 128-byte row of 64 queries. */
static uint32_t ds_consumer(int k, int q) { return swz128((uint32_t)(k * 128 + q * 2)); }
/* dK / dV staging read by the TMA stores of 64 bf16 x 64 rows (tm_dk, tm_dv). */
static uint32_t dkdv_consumer(int r, int c) { return swz128((uint32_t)((c >> 6) * 64 * 128 + r * 128 + (c & 63) * 2)); }

/* ----------------------------------------------- the lanes' data (fm_hopper.cuh) */

/* Accumulator of a warpgroup's wgmma (m64nN): d[4 n + 2 h + e] of lane l of
 * warp w is row 16 w + l / 4 + 8 h, column 8 n + 2 (l % 4) + e. */
static void acc_elem(int w, int lane, int idx, int *row, int *col) {
  const int n = idx / 4, h = (idx / 2) & 1, e = idx & 1;
  *row = 16 * w + lane / 4 + 8 * h;
  *col = 8 * n + 2 * (lane % 4) + e;
}
/* A fragment of k-step kk (wgmma RS, fm_hopper.cuh wgmma_rs_n128): a[r] holds
 * row l / 4 + 8 (r % 2) of the warp's 16, columns 16 kk + 2 (l % 4) + 8 (r / 2),
 * + 1; element e of that pair. */
static void afrag_elem(int w, int lane, int kk, int r, int e, int *row, int *col) {
  *row = 16 * w + lane / 4 + 8 * (r & 1);
  *col = 16 * kk + 2 * (lane % 4) + 8 * (r >> 1) + e;
}

/* ----------------------------------------------------------- the store maps */

/* One store instruction of one lane: its address and which of the lane's
 * registers (as an index into the site's register space) it stores; the
 * element(s) follow from the fragment layout, `per` consecutive ones. */
typedef struct {
  uint32_t addr;
  int reg; /* site-specific register index */
} st_lane;

/* reduce_dq, before (2156e7d): step (nb, hr) -> d[4 nb + 2 hr], d[.. + 1]. */
static st_lane dq_old(int w, int lane, int step) {
  const int nb = step / 2, hr = step % 2, g = lane >> 2, c4 = lane & 3;
  const int row = w * 16 + g + 8 * hr, col = 8 * nb + 2 * c4;
  const int box = col >> 5, cc = col & 31;
  st_lane s = {(uint32_t)(box * BR * 128 + row * 128 + (((cc >> 2) ^ (row & 7)) << 4) + (cc & 3) * 4),
               4 * nb + 2 * hr};
  return s;
}
/* stage_dq (reduce_dq until bwddq), now: the lanes of an odd g store column block nb ^ 2 in step nb. */
static st_lane dq_new(int w, int lane, int step) {
  const int nb = step / 2, hr = step % 2, g = lane >> 2, c4 = lane & 3;
  const int odd = g & 1;
#ifdef FM_BANKS_MUTATE
#if FM_BANKS_MUTATE == 1 /* a bijection with the conflict back: odd rows one block over */
  const int xr = g ^ (c4 >> 1) ^ (odd ? 2 : 0), nl = odd ? nb ^ 1 : nb;
#else /* the data permuted, the address not */
  const int xr = g ^ (c4 >> 1), nl = odd ? nb ^ 2 : nb;
#endif
#else
  const int xr = g ^ (c4 >> 1) ^ (odd ? 4 : 0), nl = odd ? nb ^ 2 : nb;
#endif
  const uint32_t base = (uint32_t)((w * 16 + g) * 128 + (c4 & 1) * 8);
  st_lane s = {base + (uint32_t)((nb >> 2) * BR * 128 + hr * 8 * 128 + (((2 * (nb & 3)) ^ xr) << 4)),
               4 * nl + 2 * hr};
  return s;
}
/* A deliberately wrong map (the checker must reject it): the odd rows' data
 * moved two blocks over, the address left at block nb. */
static st_lane dq_bad_address(int w, int lane, int step) {
  const int nb = step / 2, hr = step % 2, g = lane >> 2;
  st_lane s = dq_old(w, lane, step);
  if (g & 1) s.reg = 4 * (nb ^ 2) + 2 * hr;
  return s;
}
/* One more: a bijection onto the right addresses, but still 2-way conflicted
 * (odd rows one block over instead of two). */
static st_lane dq_conflicted(int w, int lane, int step) {
  const int nb = step / 2, hr = step % 2, g = lane >> 2, c4 = lane & 3, odd = g & 1;
  const int nl = odd ? nb ^ 1 : nb, row = w * 16 + g + 8 * hr, col = 8 * nl + 2 * c4;
  const int box = col >> 5, cc = col & 31;
  st_lane s = {(uint32_t)(box * BR * 128 + row * 128 + (((cc >> 2) ^ (row & 7)) << 4) + (cc & 3) * 4),
               4 * nl + 2 * hr};
  return s;
}

/* store_ds, consumer warpgroup cw (step = 4 kk + r): da[kk][r]. Registers
 * numbered 4 kk + r. */
static int ds_cw = 0;
static st_lane ds_store(int w, int lane, int step) {
  const int kk = step / 4, r = step % 4, g = lane >> 2, c4 = lane & 3;
  const int key = ds_cw * 64 + w * 16 + g + 8 * (r & 1), q = 16 * kk + 8 * (r >> 1) + 2 * c4;
  st_lane s = {(uint32_t)(key * 128 + (((q >> 3) ^ (key & 7)) << 4) + (q & 7) * 2), step};
  return s;
}

/* store_dkdv (step = 2 nb + hr): acc[4 nb + 2 hr], acc[.. + 1] packed to bf16. */
static int dkdv_hd = 128;
static st_lane dkdv_store(int w, int lane, int step) {
  const int nb = step / 2, hr = step % 2, g = lane >> 2, c4 = lane & 3;
  const int row = w * 16 + g + 8 * hr, col = nb * 8 + 2 * c4, blk = col >> 6, chunk = (col & 63) >> 3;
  st_lane s = {(uint32_t)(blk * 64 * 128 + row * 128 + ((chunk ^ (row & 7)) << 4) + (col & 7) * 2),
               4 * nb + 2 * hr};
  return s;
}

/* ------------------------------------------------------------- the checker */

typedef st_lane (*store_map)(int w, int lane, int step);
enum site { SITE_DQ, SITE_DS, SITE_DKDV };

typedef struct {
  int ok_once;    /* every register of every lane stored exactly once */
  int ok_layout;  /* every element at the address the consumer reads it from */
  int ok_cover;   /* the stores cover the consumer's bytes exactly once */
  int wf_max, wf_sum, steps;
  char why[160];
} site_report;

/* Runs `steps` store instructions of each of a warpgroup's 4 warps. */
static site_report check_site(enum site site, store_map f, int steps) {
  site_report rep;
  memset(&rep, 0, sizeof rep);
  rep.ok_once = rep.ok_layout = rep.ok_cover = 1;
  rep.steps = steps;
  const int esize = site == SITE_DQ ? 4 : 2, width = site == SITE_DQ ? 8 : 4, per = width / esize;
  const int nreg = site == SITE_DQ ? 32 : site == SITE_DS ? 16 : dkdv_hd / 2; /* registers a lane */
  const uint32_t bytes = site == SITE_DQ ? BR * 64 * 4 : site == SITE_DS ? BC * BR * 2 : 64 * (uint32_t)dkdv_hd * 2;
  unsigned char *hit = calloc(bytes, 1);
  for (int w = 0; w < 4; w++) {
    int used[32][64];
    memset(used, 0, sizeof used);
    for (int step = 0; step < steps; step++) {
      uint32_t addr[32];
      for (int lane = 0; lane < 32; lane++) {
        const st_lane s = f(w, lane, step);
        addr[lane] = s.addr;
        /* the registers this store takes: two fp32 accumulators (dQ; dK, dV packed
           to bf16 on the way), or one packed bf16 pair (dS^T) */
        const int nslots = site == SITE_DS ? 1 : 2;
        for (int k = 0; k < nslots; k++) {
          const int reg = s.reg + k;
          if (reg < 0 || reg >= nreg || used[lane][reg]++) {
            rep.ok_once = 0;
            snprintf(rep.why, sizeof rep.why, "warp %d lane %d step %d: register %d stored twice", w, lane, step, reg);
          }
        }
        for (int e = 0; e < per; e++) {
          int row, col;
          uint32_t want;
          if (site == SITE_DS) {
            afrag_elem(w, lane, s.reg / 4, s.reg % 4, e, &row, &col);
            want = ds_consumer(row + 64 * ds_cw, col);
          } else {
            acc_elem(w, lane, s.reg + e, &row, &col); /* d[4 n + 2 h + e] */
            want = site == SITE_DQ ? dq_consumer(row, col) : dkdv_consumer(row, col);
          }
          const uint32_t got = s.addr + (uint32_t)(e * esize);
          if (got != want) {
            if (rep.ok_layout)
              snprintf(rep.why, sizeof rep.why, "warp %d lane %d step %d: element (%d, %d) at %u, read from %u", w,
                       lane, step, row, col, got, want);
            rep.ok_layout = 0;
          }
          for (int b = 0; b < esize; b++) {
            const uint32_t a = got + (uint32_t)b;
            if (a >= bytes || hit[a]++) rep.ok_cover = 0;
          }
        }
      }
      const int wf = wavefronts(addr, width);
      rep.wf_sum += wf;
      if (wf > rep.wf_max) rep.wf_max = wf;
    }
    for (int lane = 0; lane < 32; lane++)
      for (int reg = 0; reg < nreg; reg++)
        if (used[lane][reg] != 1) {
          if (rep.ok_once)
            snprintf(rep.why, sizeof rep.why, "warp %d lane %d: register %d stored %d times", w, lane, reg,
                     used[lane][reg]);
          rep.ok_once = 0;
        }
  }
  /* the warpgroup's part of the buffer: dS^T holds both warpgroups' halves */
  const uint32_t lo = site == SITE_DS ? (uint32_t)ds_cw * 64u * 128u : 0;
  const uint32_t hi = site == SITE_DS ? lo + 64u * 128u : bytes;
  for (uint32_t a = lo; a < hi; a++)
    if (hit[a] != 1) {
      if (rep.ok_cover)
        snprintf(rep.why + strlen(rep.why), sizeof rep.why - strlen(rep.why), " byte %u written %d times", a,
                 hit[a]);
      rep.ok_cover = 0;
    }
  free(hit);
  return rep;
}

/* ------------------------------------------------------------------- tests */

Test(bwd_smem_banks, consumer_layouts_are_bijections) {
  static unsigned char seen[BR * 64 * 4];
  memset(seen, 0, sizeof seen);
  for (int r = 0; r < BR; r++)
    for (int c = 0; c < 64; c++) {
      const uint32_t a = dq_consumer(r, c);
      cr_assert(a % 4 == 0 && a < sizeof seen && !seen[a]);
      seen[a] = 1;
    }
  memset(seen, 0, sizeof seen);
  for (int k = 0; k < BC; k++)
    for (int q = 0; q < BR; q++) {
      const uint32_t a = ds_consumer(k, q);
      cr_assert(a % 2 == 0 && a < BC * BR * 2 && !seen[a]);
      seen[a] = 1;
    }
}

Test(bwd_smem_banks, old_mapping_matches_the_profile) {
  /* reduce_dq before: right layout, 4 wavefronts a store where 2 would do
     (Nsight Compute: 133,169,152 wavefronts over 33,292,288 requests per ST.E.64) */
  site_report r = check_site(SITE_DQ, dq_old, 16);
  cr_assert(r.ok_once && r.ok_layout && r.ok_cover, "%s", r.why);
  cr_assert_eq(r.wf_max, 4);
  cr_assert_eq(r.wf_sum, 4 * 16 * 4);
  cr_assert_eq(ideal_wavefronts(8), 2);
  /* store_ds and store_dkdv: 1 wavefront a store, as profiled */
  for (ds_cw = 0; ds_cw < 2; ds_cw++) {
    r = check_site(SITE_DS, ds_store, 16);
    cr_assert(r.ok_once && r.ok_layout && r.ok_cover, "dS^T, warpgroup %d: %s", ds_cw, r.why);
    cr_assert_eq(r.wf_max, 1);
  }
  ds_cw = 0;
  for (dkdv_hd = 64; dkdv_hd <= 128; dkdv_hd += 64) {
    r = check_site(SITE_DKDV, dkdv_store, dkdv_hd / 4);
    cr_assert(r.ok_once && r.ok_layout && r.ok_cover, "dK/dV, head dim %d: %s", dkdv_hd, r.why);
    cr_assert_eq(r.wf_max, 1);
  }
  dkdv_hd = 128;
}

Test(bwd_smem_banks, new_dq_mapping_is_the_same_layout_conflict_free) {
  site_report r = check_site(SITE_DQ, dq_new, 16);
  cr_assert(r.ok_once, "%s", r.why);
  cr_assert(r.ok_layout, "%s", r.why);
  cr_assert(r.ok_cover, "the new map does not cover the staging exactly once");
  cr_assert_eq(r.wf_max, ideal_wavefronts(8), "new dQ staging store: %d wavefronts, ideal %d", r.wf_max,
               ideal_wavefronts(8));
}

/* The checker rejects what it should: a map whose data and addresses disagree,
 * and a bijective map that still conflicts. */
Test(bwd_smem_banks, checker_catches_mutated_maps) {
  site_report r = check_site(SITE_DQ, dq_bad_address, 16);
  cr_assert(!r.ok_layout);
  r = check_site(SITE_DQ, dq_conflicted, 16);
  cr_assert(r.ok_once && r.ok_layout && r.ok_cover, "%s", r.why);
  cr_assert_gt(r.wf_max, ideal_wavefronts(8));
  /* the model itself: 32 lanes on one bank, 32 words -> 32 wavefronts; broadcast -> 1 */
  uint32_t a[32];
  for (int l = 0; l < 32; l++) a[l] = (uint32_t)l * 128;
  cr_assert_eq(wavefronts(a, 4), 32);
  for (int l = 0; l < 32; l++) a[l] = 64;
  cr_assert_eq(wavefronts(a, 4), 1);
  for (int l = 0; l < 32; l++) a[l] = (uint32_t)l * 16;
  cr_assert_eq(wavefronts(a, 16), 4);
}

/* The calculator's table: per store site, wavefronts per instruction and per
 * (64 x 128) pair of the full 8K shape (Tr = 128 query tiles per key tile), the
 * weights Nsight Compute's instruction counts give. */
Test(bwd_smem_banks, table) {
  const double pairs_per_item = 128.0;
  const site_report dq0 = check_site(SITE_DQ, dq_old, 16), dq1 = check_site(SITE_DQ, dq_new, 16);
  const site_report ds = check_site(SITE_DS, ds_store, 16), kv = check_site(SITE_DKDV, dkdv_store, 32);
  /* per pair: 8 consumer warps; dQ staging and dS^T once per pair, dK and dV
     (2 x 32 stores a warp) once per item; the producer's LSE2 / D rows (4 stores
     of 32 lanes, 1 wavefront), its ring entry (1) and the key intervals (8 a
     consumer warp per item) are 32-bit linear stores, 1 wavefront each */
  const double other = 4 + 1 + 8 * 8 / pairs_per_item;
  const double ds_pp = 8.0 * ds.wf_sum / 4, kv_pp = 8.0 * 2 * kv.wf_sum / 4 / pairs_per_item;
  const double before = ds_pp + kv_pp + other + 8.0 * dq0.wf_sum / 4;
  const double after = ds_pp + kv_pp + other + 8.0 * dq1.wf_sum / 4;
  printf("site                width  wf/instr  ideal  instr/pair  wf/pair\n");
  printf("store_ds   (dS^T)   4     %d        %d     %6.1f     %6.1f\n", ds.wf_max, 1, 8.0 * 16, ds_pp);
  printf("reduce_dq  before   8     %d        %d     %6.1f     %6.1f\n", dq0.wf_max, 2, 8.0 * 16, 8.0 * dq0.wf_sum / 4);
  printf("reduce_dq  now      8     %d        %d     %6.1f     %6.1f\n", dq1.wf_max, 2, 8.0 * 16, 8.0 * dq1.wf_sum / 4);
  printf("store_dkdv (dK,dV)  4     %d        %d     %6.1f     %6.1f\n", kv.wf_max, 1, 8.0 * 64 / pairs_per_item,
         kv_pp);
  printf("rows,entry,keys     4     1        1     %6.1f     %6.1f\n", other, other);
  printf("store wavefronts per pair: before %.1f, after %.1f (-%.1f)\n", before, after, before - after);
  /* Nsight Compute, full 8K (4,194,304 pairs): 2,724,233,348 store wavefronts
     over the SASS store instructions = 649.5 a pair */
  cr_assert(before > 649.4 && before < 649.6, "model %.2f against the profile's 649.5", before);
  cr_assert(after > 393.4 && after < 393.6);
}
