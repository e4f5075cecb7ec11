/* fm_linrnn_wg.cuh — the two-pass path's output kernel (sm_90a, wgmma; private
 * to kernels/; the contract: fm_linrnn.h; the design and its numbers:
 * kernels/PERF_NOTES.md, "Linear RNN", sixteenth and seventeenth sessions).
 *
 * The two-pass path (chunk C = 128, sub-chunk c = 64, dk = 128): the fused
 * kernel of fm_linrnn.cuh walks the documents in MODE_STATES, carrying the
 * state in registers as always, but instead of the outputs it stores the state
 * entering every live chunk (S_in in fp16, scaled, in fragment order:
 * params.sin, fm_linrnn.cuh "S_in in fp16");
 * then out_kernel computes every chunk's outputs at once, no chunk waiting
 * for another:
 *
 *   O = scale exp(G_t) Q S_in  (rows whose document began before the chunk)
 *     + P V,  P = scale (Q K^T) o D  over the visited 64 x 64 sub-tiles
 *
 * computed transposed, O^T = S_in^T Q^T + V^T P^T, so that the value columns
 * are the wgmma's M and the chunk's 128 tokens its N. A persistent grid of
 * one CTA a multiprocessor takes the items (chunk, head) in turn; four
 * warpgroups (dv 256; at dv 128 or 64 the ones without value columns only
 * score): warpgroup u owns the value columns 64 u .. 64 u + 63, its O^T in
 * two m64n64 accumulator sets (tokens 0-63 and 64-127: an m64n64k16 on the
 * upper half of an m64n128 set makes ptxas serialize every wgmma). First the
 * scores, once an item: warpgroup u scores sub-tile (b, j) = (0, 0), (1, 0),
 * (1, 1), (0, 1) for u = 0 .. 3 when the variant visits it (S = Q_b K_j^T,
 * m64n64k16), forms P (make_p) and writes it split hi + lo into shared memory
 * (stmatrix), token-major, where it is O^T's K-major B operand. Then the inter term on
 * live chunks: per k-step of 16 dk rows each thread loads its A fragment of
 * S_in^T (fp16 in fragment order), scales it back and splits it hi + lo in
 * registers, A from registers, B = Q^T (Q's tile, K-major), over the first token half only when
 * the chunk's first document ends in it; the token columns are scaled by scale
 * exp(G_t) or selected to +0. Then O^T += V^T P^T per key band j: A = V^T (V's
 * tile, MN-major), B = P^T (hi, lo) on the token halves j's visited sub-tiles
 * cover. As in the fused kernel, one operand of every product is an exact
 * bf16 input (Q, V) and the other (S_in, P) is split in two bf16 halves. O^T
 * is staged through shared memory (over P; stmatrix .trans turns its
 * fragments into token rows) and stored as bf16 rows. The next
 * item's Q and K are copied once every warpgroup is done with this one's (its
 * P V and stores run meanwhile), its V once P V is done. Branch values go
 * through warp_uniform so that ptxas keeps the wgmma asynchronous.
 *
 * Shared memory (128-byte swizzle, 1024-byte atoms; fm_wgmma_desc.h's
 * descriptors): Q and K as two K-major blocks of 64 dk columns x 128 tokens
 * (32 KiB each); V as dv / 64 MN-major blocks of 128 key rows x 64 columns;
 * P hi and lo as two K-major blocks (key bands) of 128 tokens x 64 keys
 * (32 KiB each); the token factors (512 B): 193 KiB, one CTA a
 * multiprocessor. The copies are cp.async (generic proxy; copy_rows in
 * fm_linrnn.cuh), so every thread fences to the async proxy before the
 * barrier that hands tiles to wgmma. Design and measurements:
 * kernels/PERF_NOTES.md, Linear RNN, seventeenth session.
 *
 * Variants: SKIP visits the sub-tiles the rule does not call MASKED; CAUSAL
 * j <= b; NOSKIP all four ((0, 1) is all masked). The inter term runs on
 * live chunks only (S_in is zero elsewhere: a product of zeros selected to +0
 * is what skipping it leaves). A masked element of P is +0 and a dead token
 * column of the inter term is selected to +0, so a skipped product adds exact
 * zeros in the others: all three give the same bits (the one exception as in
 * fm_linrnn.cuh: an accumulator exactly -0.0).
 *
 * Instrumented (INSTR): warp 0 of each scoring warpgroup adds the clock64
 * cycles of its sub-tile's scoring (Q K^T, decay, mask, split, the P stores)
 * to its tile_cycles with a reduction.
 *
 * FM_LINRNN_SIM: fm_linrnn_sim.h emulates the wgmma used here (128-byte
 * swizzled descriptors, the accumulator fragments) and the fmh::
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

constexpr int C = 128, DK = 128, DVB = 64, MAXU = 4, NT = 128 * MAXU;
/* byte offsets from the 1024-aligned base */
constexpr int Q_OFF = 0, K_OFF = 32768, V_OFF = 65536, PH_OFF = 131072, PL_OFF = 163840, F_OFF = 196608;
constexpr int BYTES = F_OFF + 1024;
constexpr int SMEM = BYTES + 1024; /* the dynamic allocation: 1 KiB of slack for the alignment */
constexpr int ST_ROW = 2 * DVB * MAXU; /* the output staging's row (bytes; over P once it is dead) */
static_assert(C * ST_ROW <= F_OFF - PH_OFF, "the output staging fits over P");

/* Whether sub-tile (b, j) of the chunk (rows 64 b.., keys 64 j..) is visited. */
FMLR_DEV bool visits(const params &p, const uint8_t *cls, int b, int j) {
  if (p.variant == VAR_SKIP) return cls[b * 2 + j] != FM_TILE_MASKED;
  return p.variant == VAR_NOSKIP || j <= b;
}

/* Item it's chunk and head (items ch H + h: a chunk's heads together). */
struct item {
  int ch, h;
};
FMLR_DEV item item_of(const params &p, int64_t it) { return {(int)(it / p.H), (int)(it % p.H)}; }

/* The copies of item x's Q and K (one group): two K-major blocks of 64 dk
 * columns each (128-byte rows, chunk c8 of row r at c8 ^ (r % 8): the fused
 * kernel's swz layout at len 64). */
FMLR_DEV void issue_qk(const params &p, item x, uint32_t sb) {
  const int c0 = x.ch * C;
  const int64_t o = ((int64_t)c0 * p.H + x.h) * DK;
  copy_rows<NT, 16, C, 16384, 128>(sb + K_OFF, p.k + o, (int64_t)p.H * DK, p.T - c0, true, sb + Q_OFF, p.q + o);
  cp_commit();
}

/* The copies of item x's V, nu blocks of 64 columns (MN-major, the same
 * layout; one group). */
FMLR_DEV void issue_v(const params &p, item x, int nu, uint32_t sb) {
  const int c0 = x.ch * C;
  const uint16_t *src = p.v + ((int64_t)c0 * p.H + x.h) * p.dv;
  const int64_t gs = (int64_t)p.H * p.dv;
  if (nu == 4) copy_rows<NT, 32, C, 16384, 128>(sb + V_OFF, src, gs, p.T - c0);
  else if (nu == 2) copy_rows<NT, 16, C, 16384, 128>(sb + V_OFF, src, gs, p.T - c0);
  else copy_rows<NT, 8, C, 16384, 128>(sb + V_OFF, src, gs, p.T - c0);
  cp_commit();
}

/* The inter term's token factors: f[t] = scale exp(G_t) where token t's
 * document began before the chunk, else 0 (threads 0 .. C - 1 of the caller). */
FMLR_DEV void token_factors(const params &p, int c0, int h, int ch, int t, float *f) {
  const int64_t tpad = (int64_t)p.nchunks * C;
  const bool live = __ldg(p.docstart + c0 + t) < c0;
  const float pre = __ldg(p.pre2 + ((int64_t)h * p.nchunks + ch) * (C / 16) + (t >> 4));
  f[t] = live ? p.scale * ex2(pre + __ldg(p.lp2 + h * tpad + c0 + t)) : 0.f;
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
FMLR_DEV void make_p(const params &p, int c0, int h, int b, bool masked_elems, const float (&s)[32],
                     uint32_t (&ph)[4][4], uint32_t (&pl)[4][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3, w = (threadIdx.x >> 5) & 3;
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

/* Sub-tile (b, J) of the chunk: S = Q_b K_J^T, P (make_p), its hi and lo
 * halves into the P blocks of key band J (token-major); INSTR: the scoring's
 * cycles to the sub-tile's tile_cycles (rec: this thread records). */
template <int J, bool INSTR>
FMLR_DEV void score_tile(const params &p, int c0, int h, int b, bool masked_elems, uint32_t sb, int64_t *cyc,
                         bool rec) {
  const long long t0 = INSTR ? clk() : 0;
  float s[32];
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++)
    fmh::wgmma_ss_n64<0, 0>(s, fmh::desc_kmajor(sb + Q_OFF + b * 8192, C, kk),
                            fmh::desc_kmajor(sb + K_OFF + J * 8192, C, kk), kk > 0);
  fmh::wgmma_commit();
  fmh::wgmma_wait<0>();
  fmh::reg_fence(s);
  uint32_t ph[4][4], pl[4][4];
  make_p<J>(p, c0, h, b, masked_elems, s, ph, pl);
  /* ph[kk], pl[kk] are the four 8 x 8 matrices (rows 16 w + 8 (q & 1) .., key
     block 2 kk + (q >> 1)) of an stmatrix .x4: lane l gives the address of row
     l % 8 of matrix q = l / 8 (16-byte chunks swizzled by the row) */
  const int l = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3, r8 = l & 7, q = l >> 3;
  const uint32_t row = sb + J * 16384 + (64 * b + 16 * w + r8 + 8 * (q & 1)) * 128;
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    const uint32_t at = row + (((2 * kk + (q >> 1)) ^ r8) << 4);
    fmh::stmatrix_x4(at + PH_OFF, ph[kk]);
    fmh::stmatrix_x4(at + PL_OFF, pl[kk]);
  }
  if (INSTR && rec) red_add(cyc + 2 * b + J, clk() - t0);
}

/* The inter term of warpgroup u's value columns: d = S_in^T Q^T over the
 * first 64 (N 64) or 128 (N 128) tokens. S_in is stored in fp16 in fragment
 * order (fm_linrnn.cuh, "S_in in fp16"): per k-step of 16 dk rows each thread
 * loads its A fragment's eight values (16 bytes), splits them hi + lo in
 * registers and issues the wgmma with A from registers and B = Q^T (Q's tile,
 * K-major), waiting for them before the next k-step's fragments (two steps'
 * fragments live at once made ptxas spill). Each value is exact in hi + lo
 * (fp16's 11 bits within two bf16's 16). d is the product of sin's values:
 * the caller scales it by the returned power of two (sinv: one a warp's 16
 * columns) with the token factors. COV: a covered chunk (fm_linrnn.cuh,
 * "Covered segments"): S_in = inv sin + a ck_s of the segment's checkpoint
 * (fp32, the same order), a its decay since the segment's start, formed here
 * (returns 1). */
template <int N, bool COV>
FMLR_DEV float inter_term(const params &p, int ch, int h, int u, uint32_t sb, float (&d0)[32], float (&d1)[32]) {
  const int grp = 4 * u + ((threadIdx.x >> 5) & 3); /* the warp's 16 value columns */
  const int64_t at = frag_off<DK>(grp, 0); /* k-step 0; 256 a k-step */
  const uint4 *src = reinterpret_cast<const uint4 *>(p.sin + ((int64_t)ch * p.H + h) * DK * p.dv + at);
  const float inv = __ldg(p.sinv + ((int64_t)ch * p.H + h) * (p.dv / 16) + grp);
  const float4 *cks =
      COV ? reinterpret_cast<const float4 *>(p.ck_s + ((int64_t)(ch / p.kseg) * p.H + h) * DK * p.dv + at) : nullptr;
  /* (folding a covered chunk's inv into the caller's scale as a / inv would overflow where S_loc is 0
     or tiny: inv goes down to 2^-126) */
  const float a = COV ? __ldg(p.sa + (int64_t)ch * p.H + h) : 0.f;
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) {
    const uint4 x = __ldg(src + 32 * kk);
    const uint32_t xr[4] = {x.x, x.y, x.z, x.w};
    float f[8];
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = COV ? h_at(xr[i >> 1], i & 1) * inv : h_at(xr[i >> 1], i & 1);
    if (COV) { /* ck_s (L2: one state serves the segment) loaded here, not a step ahead: registers */
      const float4 y0 = __ldg(cks + 64 * kk), y1 = __ldg(cks + 64 * kk + 1);
      const float y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
      for (int i = 0; i < 8; i++) f[i] = fmaf(a, y[i], f[i]);
    }
    uint32_t ah[4], al[4];
#pragma unroll
    for (int i = 0; i < 4; i++) split2(f[2 * i], f[2 * i + 1], ah[i], al[i]);
    fmh::wgmma_fence();
    const uint64_t db0 = fmh::desc_kmajor(sb + Q_OFF, C, kk);
    fmh::wgmma_rs_n64<0>(d0, ah, db0);
    fmh::wgmma_rs_n64<0>(d0, al, db0);
    if (N == 128) {
      const uint64_t db1 = fmh::desc_kmajor(sb + Q_OFF + 8192, C, kk);
      fmh::wgmma_rs_n64<0>(d1, ah, db1);
      fmh::wgmma_rs_n64<0>(d1, al, db1);
    }
    fmh::wgmma_commit();
    fmh::wgmma_wait<0>(); /* one k-step's fragments live at a time (registers: ptxas spilled with two) */
  }
  fmh::reg_fence(d0);
  fmh::reg_fence(d1);
  return COV ? 1.f : inv;
}

/* O^T += V^T P^T over key band J for the token halves M covers (bit 0: the
 * first, d0; bit 1: the second, d1), m64n64k16 each (the halves are separate
 * accumulator sets: an m64n64k16 on the upper half of an m64n128 set makes
 * ptxas serialize every wgmma of the kernel). */
template <int J, int M> FMLR_DEV void pv_band(int u, uint32_t sb, float (&d0)[32], float (&d1)[32]) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    const uint64_t da = fmh::desc_mnmajor(sb + V_OFF + u * 16384, C, 4 * J + kk);
    if (M & 1) {
      fmh::wgmma_ss_n64<1, 0>(d0, da, fmh::desc_kmajor(sb + PH_OFF + J * 16384, C, kk), 1);
      fmh::wgmma_ss_n64<1, 0>(d0, da, fmh::desc_kmajor(sb + PL_OFF + J * 16384, C, kk), 1);
    }
    if (M & 2) {
      fmh::wgmma_ss_n64<1, 0>(d1, da, fmh::desc_kmajor(sb + PH_OFF + J * 16384 + 8192, C, kk), 1);
      fmh::wgmma_ss_n64<1, 0>(d1, da, fmh::desc_kmajor(sb + PL_OFF + J * 16384 + 8192, C, kk), 1);
    }
  }
}

/* Both key bands' P V for the visited halves M0 (band 0) and M1 (band 1), one
 * complete group (fence, the wgmma, commit, wait). */
template <int M0, int M1> FMLR_DEV void pv_bands(int u, uint32_t sb, float (&d0)[32], float (&d1)[32]) {
  fmh::wgmma_fence();
  pv_band<0, M0>(u, sb, d0, d1);
  pv_band<1, M1>(u, sb, d0, d1);
  fmh::wgmma_commit();
  fmh::wgmma_wait<0>();
  fmh::reg_fence(d0);
  fmh::reg_fence(d1);
}

/* The chunk's output rows from the staging area (rows of ST_ROW bytes, 16-byte
 * piece c of row t at chunk_off<128, ST_ROW>(t, c): copy_rows's layout) to O,
 * CW pieces a row, rows t >= nvalid not written. As in copy_rows a thread's
 * piece and swizzle stay fixed and only the addresses advance. */
template <int CW> FMLR_DEV void store_rows(const unsigned char *st, uint16_t *dst, int64_t gstride, int nvalid) {
  constexpr int RS = NT / CW;
  static_assert(NT % CW == 0 && RS % 8 == 0 && C % RS == 0, "a thread's rows keep their swizzle");
  const int cc = threadIdx.x % CW, r0 = threadIdx.x / CW;
  const unsigned char *s = st + chunk_off<128, ST_ROW>(r0, cc);
  uint16_t *d = dst + (int64_t)r0 * gstride + cc * 8;
#pragma unroll 4
  for (int i = 0; i < C / RS; i++)
    if (r0 + i * RS < nvalid)
      *reinterpret_cast<uint4 *>(d + i * RS * gstride) = *reinterpret_cast<const uint4 *>(s + i * RS * ST_ROW);
}

/* O^T of warpgroup u (value columns 64 u..) as bf16 rows of the staging area
 * over P (16-byte pieces swizzled by the row), then every thread's pieces of
 * the chunk's rows to O. Called after the barrier that ends P V. */
FMLR_DEV void store_out(const params &p, int c0, int h, int u, int nu, const float (&d0)[32], const float (&d1)[32],
                        unsigned char *sm, uint32_t sb) {
  const unsigned char *st = sm + PH_OFF;
  if (u < nu) { /* O^T's value column 16 w + g + 8 hh (of warpgroup u's 64), token 8 n + 2 c4 + e: an 8 x 8
                   matrix per (n, hh) whose transpose is 8 token rows x 8 value columns, one 16-byte piece
                   (8 u + 2 w + hh) of each row: stmatrix .x4 .trans, matrices (n, 0), (n, 1), (n + 1, 0),
                   (n + 1, 1); lane l gives the address of row l % 8 of matrix l / 8 */
    const int l = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3, j = l & 7, i = l >> 3;
    const uint32_t at = sb + PH_OFF + (8 * (i >> 1) + j) * ST_ROW + u * 128 + (((2 * w + (i & 1)) ^ j) << 4);
#pragma unroll
    for (int n = 0; n < 16; n += 2) {
      const float *d = n < 8 ? d0 : d1;
      const int m = 4 * (n & 7);
      const uint32_t r[4] = {pack2(d[m], d[m + 1]), pack2(d[m + 2], d[m + 3]), pack2(d[m + 4], d[m + 5]),
                             pack2(d[m + 6], d[m + 7])};
      fmh::stmatrix_x4_trans(at + 8 * n * ST_ROW, r);
    }
  }
  bar();
  const int64_t gs = (int64_t)p.H * p.dv;
  uint16_t *dst = p.o + ((int64_t)c0 * p.H + h) * p.dv;
  if (nu == 4) store_rows<32>(st, dst, gs, p.T - c0);
  else if (nu == 2) store_rows<16>(st, dst, gs, p.T - c0);
  else store_rows<8>(st, dst, gs, p.T - c0);
  bar(); /* the staging read before the next item's P */
}

/* One item x (chunk ch, head h), its Q and K copies (and then V's) in flight:
 * the scores, the inter term, the next item's Q and K copies once every
 * warpgroup is done with this one's (nxt >= 0), P V, the next item's V
 * copies, the stores. */
template <bool INSTR> FMLR_DEV void out_item(const params &p, item x, int64_t nxt, unsigned char *sm, uint32_t sb) {
  const int ch = x.ch, h = x.h, c0 = ch * C, u = warp_uniform(threadIdx.x >> 7), nu = p.dv / DVB, lane = threadIdx.x & 31;
  const int w = (threadIdx.x >> 5) & 3;
  const uint8_t *cls = p.tclass + (int64_t)ch * CLS_STRIDE;
  cp_wait<1>(); /* Q and K */
  fmh::fence_proxy_async();
  bar();
  /* the scores: warpgroup u takes sub-tile (b, j) = (0, 0), (1, 0), (1, 1), (0, 1) */
  const int sbnd = u == 1 || u == 2, sj = u >= 2;
  int64_t *cyc = INSTR ? p.tile_cycles + ((int64_t)h * p.nchunks + ch) * 4 : nullptr;
  const bool rec = INSTR && w == 0 && lane == 0;
  if (warp_uniform(visits(p, cls, sbnd, sj))) {
    const bool masked_elems = cls[sbnd * 2 + sj] != FM_TILE_UNMASKED;
    if (sj == 0) score_tile<0, INSTR>(p, c0, h, sbnd, masked_elems, sb, cyc, rec);
    else score_tile<1, INSTR>(p, c0, h, sbnd, masked_elems, sb, cyc, rec);
  }
  float d0[32], d1[32]; /* O^T, tokens 0 .. 63 and 64 .. 127 */
#pragma unroll
  for (int i = 0; i < 32; i++) d0[i] = d1[i] = 0.f;
  const int fl = warp_uniform(__ldg(p.flags + ch));
  /* the inter term where the chunk is live: over the first band only when the
     chunk's first document ends in it (never in a covered chunk: its document
     runs past the segment) */
  float inv = 1.f; /* the inter term's scale (fp16 S_in) */
  if ((fl & FLAG_LIVE) && u < nu) {
    const int ef = warp_uniform(min(__ldg(p.docend + c0), min(c0 + C, p.T)) - c0);
    if (fl & FLAG_COV) inv = inter_term<128, true>(p, ch, h, u, sb, d0, d1);
    else if (ef <= 64) inv = inter_term<64, false>(p, ch, h, u, sb, d0, d1);
    else inv = inter_term<128, false>(p, ch, h, u, sb, d0, d1);
  }
  /* its token factors, on live chunks only (elsewhere O^T's inter part stays +0) */
  if ((fl & FLAG_LIVE) && threadIdx.x < C) token_factors(p, c0, h, ch, threadIdx.x, reinterpret_cast<float *>(sm + F_OFF));
  cp_wait<0>(); /* V */
  fmh::fence_proxy_async(); /* and the P stores */
  bar();
  if (nxt >= 0) issue_qk(p, item_of(p, nxt), sb);
  if ((fl & FLAG_LIVE) && u < nu) { /* (not live: d is +0, as the factors' selects would leave it) */
    const float *f = reinterpret_cast<const float *>(sm + F_OFF);
    const int c4 = lane & 3;
#pragma unroll
    for (int i = 0; i < 32; i++) {
      const int t = 8 * (i >> 2) + 2 * c4 + (i & 1);
      const float x0 = f[t], x1 = f[t + 64];
      d0[i] = x0 != 0.f ? d0[i] * inv * x0 : 0.f;
      d1[i] = x1 != 0.f ? d1[i] * inv * x1 : 0.f;
    }
  }
  if (u < nu) { /* the halves each key band's visited sub-tiles cover */
    const int m0 = warp_uniform(visits(p, cls, 0, 0) + 2 * visits(p, cls, 1, 0));
    const int m1 = warp_uniform(visits(p, cls, 0, 1) + 2 * visits(p, cls, 1, 1));
    switch (m0 * 4 + m1) { /* SKIP, CAUSAL: (3 or 1, 2); NOSKIP: (3, 3) */
      case 14: pv_bands<3, 2>(u, sb, d0, d1); break;
      case 6: pv_bands<1, 2>(u, sb, d0, d1); break;
      case 15: pv_bands<3, 3>(u, sb, d0, d1); break;
      default: /* the last chunk's sub-tiles past T are MASKED (e.g. (1, 0) and (1, 1)):
                  the same products, one band at a time */
        if (m0 == 3) pv_bands<3, 0>(u, sb, d0, d1);
        else if (m0 == 2) pv_bands<2, 0>(u, sb, d0, d1);
        else if (m0 == 1) pv_bands<1, 0>(u, sb, d0, d1);
        if (m1 == 3) pv_bands<0, 3>(u, sb, d0, d1);
        else if (m1 == 2) pv_bands<0, 2>(u, sb, d0, d1);
        else if (m1 == 1) pv_bands<0, 1>(u, sb, d0, d1);
    }
  }
  bar(); /* every warpgroup done with V and P */
  if (nxt >= 0) issue_v(p, item_of(p, nxt), nu, sb);
  store_out(p, c0, h, u, nu, d0, d1, sm, sb);
}

/* A persistent grid, one CTA a multiprocessor: CTA b takes items (chunk, head)
 * b, b + gridDim.x, ... (item ch H + h: a chunk's heads together), the next
 * item's copies in flight behind the current one's P V and stores (items
 * drawn from a counter instead measured no faster: kernels/PERF_NOTES.md,
 * eighteenth session). */
template <bool INSTR> FMLR_KERNEL void FMLR_BOUNDS(NT, 1) out_kernel(const params p) {
#ifdef FM_LINRNN_SIM
  FMLR_SMEM(raw);
  unsigned char *sm = fmh::smem_aligned_1k(raw);
#else
  extern __shared__ __align__(1024) unsigned char raw[];
  /* aligned by an offset from raw, not through an integer: the pointer keeps its
     shared window, so its accesses are STS / LDS, not generic ST / LD (which
     queue behind the global accesses: kernels/PERF_NOTES.md, twentieth session) */
  unsigned char *sm = raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);
#endif
  const uint32_t sb = smem_addr(sm);
  const int64_t n = (int64_t)p.nchunks * p.H;
  int64_t it = blockIdx.x;
  if (it >= n) return;
  issue_qk(p, item_of(p, it), sb);
  issue_v(p, item_of(p, it), p.dv / DVB, sb);
  for (;;) {
    const int64_t nx = it + gridDim.x;
    out_item<INSTR>(p, item_of(p, it), nx < n ? nx : -1, sm, sb);
    if (nx >= n) break;
    it = nx;
  }
}

/* The launch: the CTAs that fit (one a multiprocessor), never more than the
 * nchunks x H items; 512 threads (dv 128 or 64 leave warpgroups 2, 3 or
 * 1 .. 3 without value columns: they score). */
template <bool INSTR> cudaError_t launch_out(const params &p, int sms, cudaStream_t s) {
  auto kernel = out_kernel<INSTR>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (e != cudaSuccess) return e;
  const int64_t n = (int64_t)p.nchunks * p.H;
  FMLR_LAUNCH(kernel, (unsigned)(n < sms ? n : sms), NT, SMEM, s, p);
  return cudaGetLastError();
}

}  // namespace wg
}  // namespace fmlr

#endif
