/* fm_linrnn_wg.cuh — the two-pass path's output kernel (sm_90a, wgmma; private
 * to kernels/; the contract: fm_linrnn.h; the design and its numbers:
 * kernels/PERF_NOTES.md, "Linear RNN", sixteenth session).
 *
 * The two-pass path (chunk C = 128, sub-chunk c = 64, dk = 128): the fused
 * kernel of fm_linrnn.cuh walks the documents in MODE_STATES, carrying the
 * state in registers as always, but instead of the outputs it stores the state
 * entering every live chunk (S_in, fp32, (nchunks, H, dk, dv): params.sin);
 * then out_kernel computes every chunk's outputs at once, no chunk waiting
 * for another:
 *
 *   O = scale exp(G_t) Q S_in  (rows whose document began before the chunk)
 *     + P V,  P = scale (Q K^T) o D  over the visited 64 x 64 sub-tiles
 *
 * One CTA per (chunk, head, 64 value columns), two warpgroups: warpgroup b
 * owns the chunk's rows 64 b .. 64 b + 63 (band b) and visits the key
 * sub-tiles j <= b the variant keeps (NOSKIP also j = 1 on band 0, all of it
 * masked). Every product is a wgmma m64n64k16 with fp32 accumulation; as in
 * the fused kernel, one operand is an exact bf16 input (Q, V) and the other
 * (S_in, P) is split into two bf16 halves, two wgmma per product.
 *
 * Shared memory (128-byte swizzle, 1024-byte atoms; fm_hopper.cuh's
 * descriptors): Q and K as two bands of 64 rows, each two K-major column
 * blocks of 64 (32 KiB each); V as one MN-major block of 128 key rows x 64
 * columns (16 KiB); S_in's hi and lo halves, 128 dk rows x 64 columns,
 * MN-major (16 KiB each; copied in as fp32 over both, then split in place):
 * 112 KiB, two CTAs a multiprocessor. The copies are
 * cp.async (generic proxy), so every thread fences to the async proxy before
 * the barrier that hands the tiles to wgmma. The per-row metadata (decay
 * sums, document starts) is read through L1 from the preprocessing's arrays.
 *
 * Variants: SKIP runs the inter term on a band only when it holds a row
 * whose document began before the chunk, and visits the sub-tiles the rule
 * does not call MASKED; CAUSAL the inter term on every band (S_in = 0 where
 * the chunk is not live) and j <= b; NOSKIP also (0, 1). A dead inter row is
 * selected to +0 and a masked element of P is +0, so a skipped product adds
 * exact zeros in the others: all three give the same bits (the one exception
 * as in fm_linrnn.cuh: an accumulator exactly -0.0).
 *
 * Instrumented (INSTR): warp 0 of each warpgroup of the value-block-0 CTA adds
 * the clock64 cycles of each visited sub-tile's scoring (Q K^T, decay, mask,
 * split) to its tile_cycles with a reduction.
 *
 * FM_LINRNN_SIM: fm_linrnn_sim.h emulates the wgmma used here (128-byte
 * swizzled descriptors, the accumulator and register fragments) and the fmh::
 * helpers, so the emulated check runs this kernel too. */
#ifndef FM_LINRNN_WG_CUH
#define FM_LINRNN_WG_CUH

#include "fm_linrnn.cuh"
#include "fm_linrnn_launch.cuh"
#ifndef FM_LINRNN_SIM
#include "fm_hopper.cuh" /* the emulated build (FM_LINRNN_SIM) has its fmh:: in fm_linrnn_sim.h */
#endif

namespace fmlr {
namespace wg {

constexpr int C = 128, DK = 128, DVB = 64, NT = 256;
/* byte offsets from the 1024-aligned base */
constexpr int Q_OFF = 0, K_OFF = 32768, V_OFF = 65536, SHI_OFF = 81920, SLO_OFF = 98304, BYTES = 114688;
constexpr int SMEM = BYTES + 1024; /* the dynamic allocation: 1 KiB of slack for the alignment */

/* Byte offset of 16-byte chunk c8 (0..7) of row r in a block of 64 bf16
 * columns: 128-byte rows, chunk c8 at c8 ^ (r % 8) (the fused kernel's swz
 * layout at len 64, in bytes; written out here: through swz the output
 * kernel's SASS changes, and this is the form measured). */
FMLR_DEV uint32_t mn_off(int r, int c8) { return (uint32_t)(r * 128 + ((c8 ^ (r & 7)) << 4)); }

/* Byte offset of 16-byte chunk c16 (0..15) of row r (0..127) in a 128 x 128
 * bf16 tile stored as two bands of 64 rows, each two K-major column blocks of
 * mn_off's layout. */
FMLR_DEV uint32_t kmaj_off(int r, int c16) {
  const int rr = r & 63;
  return (uint32_t)((((r >> 6) * 2 + (c16 >> 3)) << 13) + rr * 128 + ((((c16 & 7) ^ (rr & 7))) << 4));
}

/* Whether band b visits key sub-tile j (c = 64: sub-tile (b, j) of the chunk). */
FMLR_DEV bool visits(const params &p, const uint8_t *cls, int b, int j) {
  if (p.variant == VAR_SKIP) return cls[b * 2 + j] != FM_TILE_MASKED;
  return p.variant == VAR_NOSKIP || j <= b;
}

/* S_in's columns of the value block (fp32, 128 dk rows x 64) into the S_in
 * region, row-major, unswizzled (zeros when the chunk is not live); part of
 * the copy group in flight (Q's). split_sin turns them into the hi and lo
 * tiles in place. */
FMLR_DEV void issue_sin(const params &p, int ch, int h, int dvb, bool live, uint32_t sb) {
  const int tid = threadIdx.x;
  const float *src = p.sin + ((int64_t)ch * p.H + h) * DK * p.dv + dvb * DVB;
#pragma unroll
  for (int it = 0; it < DK * 16 / NT; it++) {
    const int idx = it * NT + tid, r = idx >> 4, c = idx & 15;
    cp16(sb + SHI_OFF + r * 256 + c * 16, live ? src + (int64_t)r * p.dv + c * 4 : p.sin, live);
  }
}

/* The staged fp32 S_in (issue_sin, arrived) split hi + lo into the two
 * MN-major tiles (128 dk rows x 64 bf16) over the same 32 KiB: every thread
 * reads its values, a barrier, then every thread writes. */
FMLR_DEV void split_sin(unsigned char *sm) {
  const int tid = threadIdx.x;
  float4 v[DK * 8 / NT][2];
#pragma unroll
  for (int it = 0; it < DK * 8 / NT; it++) {
    const int idx = it * NT + tid, r = idx >> 3, c8 = idx & 7;
    const float4 *at = reinterpret_cast<const float4 *>(sm + SHI_OFF + r * 256 + c8 * 32);
    v[it][0] = at[0];
    v[it][1] = at[1];
  }
  bar();
#pragma unroll
  for (int it = 0; it < DK * 8 / NT; it++) {
    const int idx = it * NT + tid, r = idx >> 3, c8 = idx & 7;
    uint4 hi, lo;
    split2(v[it][0].x, v[it][0].y, hi.x, lo.x);
    split2(v[it][0].z, v[it][0].w, hi.y, lo.y);
    split2(v[it][1].x, v[it][1].y, hi.z, lo.z);
    split2(v[it][1].z, v[it][1].w, hi.w, lo.w);
    *reinterpret_cast<uint4 *>(sm + SHI_OFF + mn_off(r, c8)) = hi;
    *reinterpret_cast<uint4 *>(sm + SLO_OFF + mn_off(r, c8)) = lo;
  }
}

/* The issue of the chunk's tiles: Q and (inter0) S_in (group 0), K (group 1),
 * V (group 2). */
FMLR_DEV void issue_tiles(const params &p, int ch, int h, int dvb, bool inter0, bool live, uint32_t sb) {
  const int c0 = ch * C;
  const int tid = threadIdx.x;
#pragma unroll 4
  for (int it = 0; it < C * 16 / NT; it++) {
    const int idx = it * NT + tid, r = idx >> 4, c16 = idx & 15, t = c0 + r;
    const bool ok = t < p.T;
    cp16(sb + Q_OFF + kmaj_off(r, c16), p.q + (ok ? ((int64_t)t * p.H + h) * DK + c16 * 8 : 0), ok);
  }
  if (inter0) issue_sin(p, ch, h, dvb, live, sb);
  cp_commit();
#pragma unroll 4
  for (int it = 0; it < C * 16 / NT; it++) {
    const int idx = it * NT + tid, r = idx >> 4, c16 = idx & 15, t = c0 + r;
    const bool ok = t < p.T;
    cp16(sb + K_OFF + kmaj_off(r, c16), p.k + (ok ? ((int64_t)t * p.H + h) * DK + c16 * 8 : 0), ok);
  }
  cp_commit();
#pragma unroll 4
  for (int it = 0; it < C * 8 / NT; it++) {
    const int idx = it * NT + tid, r = idx >> 3, c8 = idx & 7, t = c0 + r;
    const bool ok = t < p.T;
    cp16(sb + V_OFF + mn_off(r, c8), p.v + (ok ? ((int64_t)t * p.H + h) * p.dv + dvb * DVB + c8 * 8 : 0), ok);
  }
  cp_commit();
}

/* Every thread's copies and shared stores done, then visible to wgmma. */
template <int N> FMLR_DEV void hand_over() {
  cp_wait<N>();
  fmh::fence_proxy_async();
  bar();
}

/* The inter term of band b: o = scale exp(G_t) Q S_in on the rows whose
 * document began before the chunk, +0 elsewhere. */
FMLR_DEV void inter_band(const params &p, int c0, int h, int ch, uint32_t qb, uint32_t sb, float (&o)[32]) {
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) {
    const uint64_t da = fmh::desc_kmajor(qb, 64, kk);
    fmh::wgmma_ss_n64<0, 1>(o, da, fmh::desc_mnmajor(sb + SHI_OFF, DK, kk), 1);
    fmh::wgmma_ss_n64<0, 1>(o, da, fmh::desc_mnmajor(sb + SLO_OFF, DK, kk), 1);
  }
  fmh::wgmma_commit();
  fmh::wgmma_wait<0>();
  fmh::reg_fence(o);
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3, b = threadIdx.x >> 7, bt = 4 * b + w;
  const int64_t tpad = (int64_t)p.nchunks * C;
  const float pre = p.pre2[((int64_t)h * p.nchunks + ch) * (C / 16) + bt];
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int t = 64 * b + 16 * w + (lane >> 2) + 8 * hr;
    const bool live = __ldg(p.docstart + c0 + t) < c0;
    const float f = live ? p.scale * ex2(pre + __ldg(p.lp2 + h * tpad + c0 + t)) : 0.f;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
      for (int e = 0; e < 2; e++) o[4 * n + 2 * hr + e] = live ? o[4 * n + 2 * hr + e] * f : 0.f;
  }
}

/* P of band b against key sub-tile J from the scores s, as the hi and lo A
 * fragments of O += P V (4 k-steps of 16 keys). The decay's exponent is a sum
 * of non-positive terms, as in the fused kernel (fm_linrnn.cuh, "Decays"):
 * for row t in 16-row block bt and key s in block bs < bt, lp2[t] + the
 * blocks strictly between (summed from bt - 1 down) + (tot[bs] - lp2[s]); in
 * one block lp2[t] - lp2[s]. MASKED_ELEMS: the sub-tile is not UNMASKED, so
 * each element is selected against causality and its row's document start
 * (+0 where masked, whatever the exponent gave). */
template <int J>
FMLR_DEV void make_p(const params &p, int c0, int h, bool masked_elems, const float (&s)[32], uint32_t (&ph)[4][4],
                     uint32_t (&pl)[4][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3, w = (threadIdx.x >> 5) & 3, b = threadIdx.x >> 7;
  const int bt = 4 * b + w;
  const float *lp = p.lp2 + (int64_t)h * p.nchunks * C + c0;
  float tot[8]; /* the blocks' total log2 decays, blocks 4 J .. 7 */
#pragma unroll
  for (int k = 4 * J; k < 8; k++) tot[k] = __ldg(lp + 16 * k + 15);
  float mid[4], run = 0.f; /* mid[m]: the blocks strictly between 4 J + m and bt */
#pragma unroll
  for (int k = 7; k >= 4 * J; k--) {
    if (k < 4 * J + 4) mid[k - 4 * J] = run;
    if (k < bt) run += tot[k];
  }
  int t[2], dsl[2];
  float rowt[2][4];
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    t[hr] = 16 * bt + g + 8 * hr;
    dsl[hr] = __ldg(p.docstart + c0 + t[hr]) - c0;
    const float lpt = __ldg(lp + t[hr]);
#pragma unroll
    for (int m = 0; m < 4; m++) rowt[hr][m] = 4 * J + m < bt ? lpt + mid[m] : lpt;
  }
  float x[32];
#pragma unroll
  for (int n = 0; n < 8; n++) {
    const int m = n >> 1, bs = 4 * J + m;
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int sl = 64 * J + 8 * n + 2 * c4 + e;
      const float lps = __ldg(lp + sl), colt = bs < bt ? tot[bs] - lps : -lps;
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        const float v = s[4 * n + 2 * hr + e] * p.scale * ex2(rowt[hr][m] + colt);
        x[4 * n + 2 * hr + e] = !masked_elems || (sl <= t[hr] && sl >= dsl[hr]) ? v : 0.f;
      }
    }
  }
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
#pragma unroll
    for (int q = 0; q < 4; q++) { /* (row g, n 2kk), (g + 8, 2kk), (g, 2kk + 1), (g + 8, 2kk + 1) */
      const int i = 4 * (2 * kk + (q >> 1)) + 2 * (q & 1);
      split2(x[i], x[i + 1], ph[kk][q], pl[kk][q]);
    }
}

/* Band b's key sub-tile J (visited): S = Q K_J^T, P, O += P V_J; INSTR: the
 * scoring's cycles to the sub-tile's tile_cycles (rec: this thread records). */
template <int J, bool INSTR>
FMLR_DEV void band_tile(const params &p, int c0, int h, const uint8_t *cls, uint32_t qb, uint32_t sb, float (&o)[32],
                        int64_t *cyc, bool rec) {
  const int b = threadIdx.x >> 7;
  const long long t0 = INSTR ? clk() : 0;
  float s[32];
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++)
    fmh::wgmma_ss_n64<0, 0>(s, fmh::desc_kmajor(qb, 64, kk), fmh::desc_kmajor(sb + K_OFF + J * 16384, 64, kk), kk > 0);
  fmh::wgmma_commit();
  fmh::wgmma_wait<0>();
  fmh::reg_fence(s);
  uint32_t ph[4][4], pl[4][4];
  make_p<J>(p, c0, h, cls[b * 2 + J] != FM_TILE_UNMASKED, s, ph, pl);
  if (INSTR && rec) red_add(cyc + 2 * b + J, clk() - t0);
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    const uint64_t dv = fmh::desc_mnmajor(sb + V_OFF + J * 8192, 64, kk);
    fmh::wgmma_rs_n64(o, ph[kk], dv);
    fmh::wgmma_rs_n64(o, pl[kk], dv);
  }
  fmh::wgmma_commit();
  fmh::wgmma_wait<0>();
  fmh::reg_fence(o);
}

/* One CTA: chunk ch, head h, value columns 64 dvb .. 64 dvb + 63 (the grid's
 * x, value blocks fastest, so the CTAs that share a chunk's Q and K run
 * together). */
template <bool INSTR> FMLR_KERNEL void FMLR_BOUNDS(NT, 2) out_kernel(const params p) {
#ifdef FM_LINRNN_SIM
  FMLR_SMEM(raw);
#else
  extern __shared__ __align__(1024) unsigned char raw[];
#endif
  unsigned char *sm = fmh::smem_aligned_1k(raw);
  const uint32_t sb = smem_addr(sm);
  const int ndvb = p.dv / DVB, dvb = (int)(blockIdx.x % ndvb), h = (int)(blockIdx.x / ndvb % p.H);
  const int ch = (int)(blockIdx.x / ndvb / p.H), c0 = ch * C;
  const int b = threadIdx.x >> 7, lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3, g = lane >> 2, c4 = lane & 3;
  const bool live = (__ldg(p.flags + ch) & FLAG_LIVE) != 0;
  const uint8_t *cls = p.tclass + (int64_t)ch * CLS_STRIDE;
  /* the inter term's bands: SKIP those holding a row of the chunk's first
   * document when it began before the chunk; the others every band */
  const int ef = min(__ldg(p.docend + c0), min(c0 + C, p.T)) - c0;
  const bool inter0 = p.variant != VAR_SKIP || live, inter = p.variant != VAR_SKIP || (live && ef > 64 * b);
  issue_tiles(p, ch, h, dvb, inter0, live, sb);
  if (inter0) { /* Q and S_in (uniform over the CTA) */
    cp_wait<2>();
    bar();
    split_sin(sm);
    fmh::fence_proxy_async();
    bar();
  }
  const uint32_t qb = sb + Q_OFF + b * 16384;
  float o[32];
#pragma unroll
  for (int i = 0; i < 32; i++) o[i] = 0.f;
  if (inter) inter_band(p, c0, h, ch, qb, sb, o);
  hand_over<0>(); /* K and V */
  const int nn = 4; /* (C / c)^2 sub-tiles of the chunk */
  int64_t *cyc = INSTR ? p.tile_cycles + ((int64_t)h * p.nchunks + ch) * nn : nullptr;
  const bool rec = INSTR && dvb == 0 && w == 0 && lane == 0;
  if (visits(p, cls, b, 0)) band_tile<0, INSTR>(p, c0, h, cls, qb, sb, o, cyc, rec);
  if (visits(p, cls, b, 1)) band_tile<1, INSTR>(p, c0, h, cls, qb, sb, o, cyc, rec);
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int t = c0 + 64 * b + 16 * w + g + 8 * hr;
    if (t >= p.T) continue;
    uint16_t *row = p.o + ((int64_t)t * p.H + h) * p.dv + dvb * DVB + 2 * c4;
#pragma unroll
    for (int n = 0; n < 8; n++)
      *reinterpret_cast<uint32_t *>(row + 8 * n) = pack2(o[4 * n + 2 * hr], o[4 * n + 2 * hr + 1]);
  }
}

/* The launch: nchunks x H x dv / 64 CTAs of 256 threads. */
template <bool INSTR> cudaError_t launch_out(const params &p, cudaStream_t s) {
  auto kernel = out_kernel<INSTR>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (e != cudaSuccess) return e;
  const int64_t n = (int64_t)p.nchunks * p.H * (p.dv / DVB);
  FMLR_LAUNCH(kernel, (unsigned)n, NT, SMEM, s, p);
  return cudaGetLastError();
}

}  // namespace wg
}  // namespace fmlr

#endif
