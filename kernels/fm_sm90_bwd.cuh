/* fm_sm90_bwd.cuh — the Hopper FlashMask backward kernel (sm_90a; private).
 *
 * FlashAttention-2/3's backward with FlashMask's column-side skipping (the
 * paper's Algorithm 2). One work item = one key tile of BC = 128 keys of one
 * (batch, head); the CTA holds K and V of those keys in shared memory and dK,
 * dV in registers, and steps through the query tiles of BR = 64 rows that the
 * min/max rule does not call MASKED for this key tile (the same 8 bounds the
 * forward uses, classified against the query tile's rows). Three warpgroups:
 *
 *   producer   warp 0: takes items from an atomic counter (key tiles in index
 *              order: heads in order, key tiles ascending, which for causal
 *              masks is heaviest first), loads K and V by TMA, classifies the
 *              query tiles and feeds the visited ones through a two-stage ring:
 *              Q and dO by TMA, the rows' LSE (log2 domain) and D = rowsum(dO O)
 *              by the lanes; in deterministic mode it takes the items in the
 *              take order of fm_sm90_bwd_order.h (det_item).
 *              Warps 2 and 3, thread 0: the writers of consumer warpgroups 1
 *              and 2 (dq_writer): each issues the copy-engine operations that
 *              read its warpgroup's staging buffer (dQ reductions, dK and dV
 *              stores), waits for those reads and hands the buffer back, and in
 *              deterministic mode waits for and passes the dQ turns, so that no
 *              consumer waits on the copy engine (fm_sm90_bwd_dq.h).
 *   consumers  warpgroups 1 and 2, 64 keys each, both at once (FlashAttention-4's
 *              Hopper order); per visited query tile:
 *                S^T  = K Q^T            wgmma m64n64, both K-major from smem
 *                dP^T = V dO^T           the same; issued together, S^T waited for
 *                mask (partial tiles: the thread's two keys' intervals, kept in
 *                shared memory for the item), P^T = exp2(S^T scale log2e -
 *                LSE2) under the dP^T GEMM
 *                dV  += P^T dO           A = P^T from registers (bf16), dO MN-major
 *                                        (its first query steps before the dP^T wait)
 *                dS^T = P^T (dP^T - D), stored to shared memory (this
 *                warpgroup's 64 keys of the 128); head dim 128: one 256-thread
 *                barrier, both halves written
 *                dQ_w = dS K             of THIS query tile; head dim 128:
 *                                        warpgroup w the columns 64 w .. 64 w + 63
 *                                        over all 128 keys; head dim 64: warpgroup
 *                                        w its own 64 keys, all columns (two
 *                                        additions to one place); A = dS MN-major
 *                                        from smem
 *                dK  += dS^T Q           A = dS^T from registers, Q MN-major
 *                dQ_w * scale staged in fp32 (while dK runs) and handed to the
 *                warpgroup's writer, which adds it to the fp32 dQ accumulator in
 *                global memory by the copy engine (cp.reduce.async.bulk .add):
 *                one bulk reduction per (key tile, query tile, warpgroup)
 *                instead of 8192 atomics.
 *              Two dS^T buffers (query-tile parity): a warpgroup writes buffer
 *              t & 1 only after the barrier of tile t - 1, which the other
 *              passed after its dQ GEMM of tile t - 2 had read that buffer.
 *              At the end of the item: dK * scale and dV, bf16, staged in turn
 *              and stored by the writer (TMA).
 *              Until 2026-11 a second consumer schedule sat beside this one
 *              (FA3's ping-pong: tensor-core turns, dQ deferred by a tile,
 *              ds_full / ds_empty barriers); measured 4-7% slower on an H100,
 *              it was removed (kernels/PERF_NOTES.md, "Schedule 2"). Its two
 *              mbarriers keep their slots and their initialization, so that
 *              the kernel's SASS stayed the same bits.
 *
 * Determinism: in the default mode the fp32 dQ additions of different key tiles
 * land in whatever order the CTAs reach them. With deterministic = 1 the order
 * of kernels/fm_sm90_bwd_order.h: the items are taken in its take order, and
 * every (batch, head, query tile) has a counter in global memory (head dim
 * 128: one per warpgroup's columns, turns t; head dim 64: one, turns 2 t + w)
 * on which the key tiles that visit the query tile add their dQ parts in take
 * order: the writer of the visitor with turn t (from the order's table) waits
 * for t, adds, and passes t + 1 once the addition has completed. Key tiles
 * that skip the query tile take no turn; NOSKIP's writers leave the MASKED
 * pairs (turn FMBO_NONE) out of the sum, so deterministic SKIP and NOSKIP add
 * the same terms in the same order: bit-identical gradients. Every wait is for
 * a key tile taken earlier (within a CTA at head dim 64, the second consumer
 * warpgroup's writer also for the first's, which never waits for the second),
 * so the waits end; tests/test_bwd_dq_protocol.c models the hand-off,
 * tests/test_bwd_det_order.c the order on the persistent grid.
 *
 * Variants: SKIP and NOSKIP (a MASKED pair element-masked to -inf: P = 0, dS =
 * 0, exact zeros added). INSTR: an observer, lane 0 of producer warp 1, which
 * issues no copy (observer() below), writes every visited pair's class (carried
 * in its ring entry) and the clock64 ticks between the consumers' releases of
 * consecutive ring stages; the skipped pairs keep the MASKED class and 0 cycles
 * the launch wrote beforehand. The producer's copies and walk, the writers and
 * the consumers run the plain code. MASK (FM_SM90_MASK_*, fm_attn_dev.h; one
 * knob for both passes): how a partial pair's S^T is masked
 * (kernels/fm_sm90_mask.h, the backward): SLICES an interval compare per
 * element, R2P two per-thread words from the keys' intervals applied with
 * R2P (in softmax_p, key by key); the gradients are the same bit for bit.
 *
 * Preprocessing (fm_sm90_bwd.cu): D = rowsum(dO * O) and LSE2 = LSE * log2 e
 * (+inf for a row with no visible key, so that its P is 0); the fp32 dQ
 * accumulator zeroed; afterwards dQ converted to bf16.
 * Measurements and the choices behind them: kernels/PERF_NOTES.md.
 */
#ifndef FM_SM90_BWD_CUH
#define FM_SM90_BWD_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fm_attn_dev.h"
#include "fm_device.cuh"
#include "fm_hopper.cuh"
#include "fm_kernel_traits.h"
#include "fm_kernels.h"
#include "fm_sm90_bwd_dq.h"
#include "fm_sm90_bwd_order.h"
#include "fm_sm90_mask.h"
#include "fm_tile_rule.h"

namespace fm90b {

template <int HD> struct traits {
  static constexpr int BR = 64;                  /* query rows per step */
  static constexpr int BC = 128;                 /* keys per item */
  static constexpr int NCW = 2;                  /* consumer warpgroups, 64 keys each */
  static constexpr int THREADS = 128 * (NCW + 1);
  static constexpr int DBLK = HD / 64;
  static constexpr int STAGES = 2;
  static constexpr int KV_BYTES = BC * HD * 2;   /* K or V of the item */
  static constexpr int QT_BYTES = BR * HD * 2;   /* one Q or dO tile */
  static constexpr int DS_BYTES = BC * BR * 2;   /* dS^T staging, (BC keys, BR queries) bf16 */
  static constexpr int DQ_BYTES = BR * 64 * 4;   /* one warpgroup's dQ part, (BR, 64) fp32 */
  static constexpr int OFF_K = 0;
  static constexpr int OFF_V = OFF_K + KV_BYTES;
  static constexpr int OFF_Q = OFF_V + KV_BYTES;             /* STAGES tiles */
  static constexpr int OFF_DO = OFF_Q + STAGES * QT_BYTES;   /* STAGES tiles */
  static constexpr int OFF_DS = OFF_DO + STAGES * QT_BYTES;  /* 2 buffers (query-tile parity) */
  static constexpr int OFF_DQ = OFF_DS + 2 * DS_BYTES;       /* NCW buffers; dK, dV staged here */
  static constexpr int OFF_ROWS = OFF_DQ + NCW * DQ_BYTES;   /* STAGES x (LSE2[BR], D[BR]) fp32 */
  static constexpr int OFF_KEYS = OFF_ROWS + STAGES * 2 * BR * 4; /* consumer thread's key intervals, [8][256] */
  static constexpr int KEYS_BYTES = 8 * NCW * 128 * 4;
  static constexpr int OFF_META = OFF_KEYS + KEYS_BYTES;     /* [s]: entry; [STAGES + s]: item (INSTR) */
  static constexpr int OFF_JOB = OFF_META + 16 * STAGES;     /* [w]: staging buffer w's job word (fmbq_job) */
  static constexpr int OFF_BAR = OFF_JOB + 8 * NCW;
  static constexpr int NBARS = 2 + 2 * STAGES + 4 + 2 * NCW; /* kv, q, ds full/empty; dq full/empty per warpgroup */
  static constexpr int OFF_ITEM = OFF_BAR + 8 * NBARS;
  static constexpr int SMEM = OFF_ITEM + 16 + 1024;          /* + alignment slack */
  static constexpr int REG_PRODUCER = 40, REG_CONSUMER = 232;
  /* dQ = dS K: head dim 128 splits the columns between the warpgroups (64 each);
     head dim 64 has one column block and splits the keys (the reduction) */
  static constexpr bool DQ_SPLIT_KEYS = HD == 64;
  static constexpr int DQ_KSTEPS = DQ_SPLIT_KEYS ? BC / 16 / NCW : BC / 16;
};
static_assert(traits<128>::BR == FM_SM90_BWD_BR_HD128 && traits<128>::BC == FM_SM90_BWD_BC_HD128 &&
                  traits<64>::BR == FM_SM90_BWD_BR_HD64 && traits<64>::BC == FM_SM90_BWD_BC_HD64,
              "core/fm_kernel_traits.h must match the sm90 backward kernel");
static_assert(traits<128>::SMEM <= 227 * 1024, "one CTA per SM: at most 227 KiB of shared memory");
static_assert(traits<128>::BR == FM90M_T_ROWS && traits<64>::BR == FM90M_T_ROWS,
              "kernels/fm_sm90_mask.h lays out the backward's R2P words for 64-query tiles");
static_assert(traits<128>::DQ_BYTES >= 64 * 128 * 2 && traits<64>::DQ_BYTES >= 64 * 64 * 2,
              "a warpgroup's dQ staging must hold its 64 keys of dK (or dV) in bf16");
static_assert(FMBQ_NCW == traits<128>::NCW && FMBQ_NCW == traits<64>::NCW && FMBQ_WG_THREADS == 128 &&
                  FMBQ_WRITER_WARP0 >= 2 && FMBQ_WRITER_WARP0 + FMBQ_NCW <= 4 && sizeof(fmbq_job) == 8,
              "fm_sm90_bwd_dq.h: a writer per consumer warpgroup in producer warps 2, 3 (warp 0 loads, "
              "warp 1 observes), every consumer thread arriving on dq_full, an 8-byte job word");
/* resident CTAs per SM: the kernel's __launch_bounds__ minimum, the registry's schedule */
constexpr int CTAS_PER_SM = 1;
static_assert(CTAS_PER_SM == FM_SM90_BWD_CTAS_PER_SM,
              "core/fm_kernel_traits.h must match the sm90 backward kernel's launch bounds");

enum : int32_t {
  FLAG_SHIFT = 24,
  F_NEEDMASK = 1 << 0, /* element mask (partial pair, a MASKED pair in NOSKIP, cut tiles) */
  F_LAST = 1 << 1,     /* the item's last visited query tile */
  F_EMPTY = 1 << 2,    /* no visited query tile: dK = dV = 0 */
  F_END = 1 << 3,      /* INSTR: no more items (for the observer; the consumers leave at item -1) */
  F_CLS_SHIFT = 4,     /* INSTR: bits 4, 5 of the flags: the pair's class (fm_tile_class), for the observer */
  TILE_MASK = (1 << FLAG_SHIFT) - 1
};
/* named barriers: 2, 3 a consumer warpgroup's own (at an item's end, store_dkdv); 6 both consumer
   warpgroups' dS^T halves written (head dim 128; 4, 5 were the removed ping-pong's turns) */
enum : int { BAR_WG = 2, BAR_DS = 6 };

struct params : fmd::attn_base { /* Tr query tiles of BR, Tc key tiles of BC */
  CUtensorMap tm_q, tm_do;   /* (B, Sq, H, D) bf16, boxes 64 x BR */
  CUtensorMap tm_k, tm_v;    /* (B, Sk, H, D) bf16, boxes 64 x BC */
  CUtensorMap tm_dk, tm_dv;  /* (B, Sk, H, D) bf16, boxes 64 x 64 (stores) */
  CUtensorMap tm_dq;         /* (B, Sq, H, D) fp32 accumulator, boxes 32 x BR (reductions) */
  const float *lse2;         /* (B, H, Sq) LSE * log2 e, +inf for rows with no visible key */
  const float *dsum;         /* (B, H, Sq) D = rowsum(dO * O) */
  int32_t *next_item;        /* atomic counter, zero at launch */
  int32_t *sem;              /* deterministic: (B * H * Tr * NCW) counters, zero at launch */
  const int32_t *take;       /* deterministic: (nsets, Tc) key tile at each take position (fm_sm90_bwd_order.h) */
  const int16_t *turns;      /* deterministic: (nsets, Tr, Tc) a pair's dQ turn, FMBO_NONE for a MASKED pair */
  int32_t nitems, deterministic;
};

template <int HD> struct bars {
  uint64_t *b;
  /* the barriers' indices in the array at OFF_BAR */
  static constexpr int KV_FULL = 0, KV_EMPTY = 1, Q_FULL = 2, Q_EMPTY = 2 + traits<HD>::STAGES,
                       DS_FULL = 2 + 2 * traits<HD>::STAGES, DS_EMPTY = 4 + 2 * traits<HD>::STAGES,
                       DQ_FULL = 6 + 2 * traits<HD>::STAGES, DQ_EMPTY = 6 + 2 * traits<HD>::STAGES + traits<HD>::NCW;
  __device__ uint64_t *kv_full() const { return b + KV_FULL; }
  __device__ uint64_t *kv_empty() const { return b + KV_EMPTY; }
  __device__ uint64_t *q_full(int s) const { return b + Q_FULL + s; }
  __device__ uint64_t *q_empty(int s) const { return b + Q_EMPTY + s; }
  __device__ uint64_t *ds_full(int d) const { return b + DS_FULL + d; }
  __device__ uint64_t *ds_empty(int d) const { return b + DS_EMPTY + d; }
  /* consumer warpgroup w's staging buffer: written (dq_full), read by the copy engine (dq_empty) */
  __device__ uint64_t *dq_full(int w) const { return b + DQ_FULL + w; }
  __device__ uint64_t *dq_empty(int w) const { return b + DQ_EMPTY + w; }
};
static_assert(bars<128>::DQ_EMPTY + FMBQ_NCW == traits<128>::NBARS && bars<64>::DQ_EMPTY + FMBQ_NCW == traits<64>::NBARS,
              "the barrier array holds every barrier");
/* The consumers reach the same barriers at 32-bit
 * shared-window addresses from one base (fewer registers than 64-bit
 * pointers): barrier i of the array at sa + bar_at<HD>(i). */
template <int HD> __device__ __forceinline__ constexpr uint32_t bar_at(int i) { return traits<HD>::OFF_BAR + 8 * i; }

using fmd::fast_exp2;
using fmd::pack_bf16;
using fmd::set_of;

/* Deterministic dQ turns: the counter's value (acquire). */
__device__ __forceinline__ int32_t sem_load(const int32_t *c) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(c) : "memory");
  return v;
}
/* Waits until the counter says `turn`, its first read `v` already taken (so
 * that the first read can be issued beside the load of the turn itself). */
__device__ __forceinline__ void sem_wait_from(const int32_t *c, int32_t turn, int32_t v) {
  while (v != turn) {
    __nanosleep(64);
    v = sem_load(c);
  }
}
/* Passes the turn on (release: the reduction this thread waited for is visible first). */
__device__ __forceinline__ void sem_pass(int32_t *c, int32_t next) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(c), "r"(next) : "memory");
}

/* Deterministic mode: item k of the atomic counter in take order
 * (fm_sm90_bwd_order.h, rule 2): its (batch, head) and the key tile at its
 * take position, as the item number bh Tc + n that the rest of the kernel
 * reads. */
__device__ __forceinline__ int32_t det_item(const params &p, int32_t k) {
  int32_t bh, pos;
  fmbo_item(k, p.B * p.H, p.Tc, &bh, &pos);
  const int b = bh / p.H, h = bh % p.H;
  return bh * p.Tc + __ldg(p.take + fmbo_take_at(set_of(p, b, h), p.Tc, pos));
}

/* ------------------------------------------------------------------ producer */

template <int HD, int VAR, bool INSTR>
__device__ __forceinline__ void producer(const params &p, unsigned char *smem, bars<HD> br) {
  using T = traits<HD>;
  const int lane = threadIdx.x & 31;
  int32_t *sItem = reinterpret_cast<int32_t *>(smem + T::OFF_ITEM);
  int32_t *sMeta = reinterpret_cast<int32_t *>(smem + T::OFF_META);
  float *sRows = reinterpret_cast<float *>(smem + T::OFF_ROWS);
  int q_iter = 0; /* ring position over all items */
  for (int it_n = 0;; it_n++) {
    int32_t item = 0;
    if (lane == 0) {
      if (it_n > 0) fmh::mbar_wait(br.kv_empty(), (it_n - 1) & 1);
      const int32_t k = atomicAdd(p.next_item, 1);
      item = k < p.nitems ? k : -1; /* items in index order; deterministic: in take order */
      if (p.deterministic && item >= 0) item = det_item(p, k);
      *sItem = item;
      if (item >= 0) {
        const int n = item % p.Tc, bh = item / p.Tc, b = bh / p.H, h = bh % p.H;
        fmh::mbar_arrive_expect_tx(br.kv_full(), 2 * T::KV_BYTES);
        fmh::tma_load_rows(smem + T::OFF_K, &p.tm_k, br.kv_full(), T::DBLK, T::BC, h, n * T::BC, b);
        fmh::tma_load_rows(smem + T::OFF_V, &p.tm_v, br.kv_full(), T::DBLK, T::BC, h, n * T::BC, b);
      } else {
        fmh::mbar_arrive(br.kv_full());
      }
    }
    item = __shfl_sync(0xffffffffu, item, 0);
    if (item < 0) {
      if (INSTR) { /* the observer's end mark, through the ring like an entry */
        const int s = q_iter % T::STAGES;
        if (q_iter >= T::STAGES) fmh::mbar_wait(br.q_empty(s), ((q_iter / T::STAGES) & 1) ^ 1);
        if (lane == 0) sMeta[s] = (F_END | F_EMPTY) << FLAG_SHIFT;
        __syncwarp();
        fmh::mbar_arrive(br.q_full(s));
      }
      return;
    }
    const int n = item % p.Tc, bh = item / p.Tc, b = bh / p.H, h = bh % p.H;
    const int set = set_of(p, b, h);
    /* the key tile's 8 bounds, re-read (L1) per 32 query tiles: held in registers
       across the item they would spill at the producer's 40 */
    const fm_tile_bounds *tbp = p.bounds + (int64_t)set * p.Tc + n;
    const bool cut = (n + 1) * T::BC > p.Sk;

    auto issue = [&](int32_t m, int32_t flags) {
      const int s = q_iter % T::STAGES;
      const uint32_t ph = (q_iter / T::STAGES) & 1;
      if (q_iter >= T::STAGES) fmh::mbar_wait(br.q_empty(s), ph ^ 1);
      if (!(flags & F_EMPTY)) { /* the rows' LSE2 and D */
        float *rows = sRows + s * 2 * T::BR;
        const int64_t base = (int64_t)bh * p.Sq + (int64_t)m * T::BR;
#pragma unroll
        for (int r = lane; r < T::BR; r += 32) {
          const int i = m * T::BR + r;
          rows[r] = i < p.Sq ? __ldg(p.lse2 + base + r) : 0.f;
          rows[T::BR + r] = i < p.Sq ? __ldg(p.dsum + base + r) : 0.f;
        }
        __threadfence_block();
      }
      if (lane != 0) {
        fmh::mbar_arrive(br.q_full(s)); /* this lane's rows are written */
      } else {
        sMeta[s] = m | (flags << FLAG_SHIFT);
        if (INSTR) sMeta[T::STAGES + s] = item;
        if (flags & F_EMPTY) {
          fmh::mbar_arrive(br.q_full(s));
        } else {
          fmh::mbar_arrive_expect_tx(br.q_full(s), 2 * T::QT_BYTES);
          fmh::tma_load_rows(smem + T::OFF_Q + s * T::QT_BYTES, &p.tm_q, br.q_full(s), T::DBLK, T::BR, h,
                             m * T::BR, b);
          fmh::tma_load_rows(smem + T::OFF_DO + s * T::QT_BYTES, &p.tm_do, br.q_full(s), T::DBLK, T::BR, h,
                             m * T::BR, b);
        }
      }
      __syncwarp();
      q_iter++;
    };

    /* classify the query tiles, 32 a step, and issue the visited ones in order,
       the last with F_LAST (fmd::warp_compact) */
    auto decide = [&](int m, int32_t *fl) {
      const fm_tile_bounds tb = fmd::load_bounds(tbp);
      const int cls = fm_classify_minmax(&tb, m * T::BR, min((m + 1) * T::BR, p.Sq));
      const bool keep = VAR == FM_VARIANT_NOSKIP || cls != FM_TILE_MASKED;
      *fl = ((cls != FM_TILE_UNMASKED || cut) ? F_NEEDMASK : 0) | (INSTR ? cls << F_CLS_SHIFT : 0);
      return keep;
    };
    fmd::warp_compact(p.Tr, decide, [&](int32_t m, int32_t fl, bool last) {
      if (m >= 0) issue(m, fl | (last ? F_LAST : 0));
      else issue(0, F_EMPTY | F_LAST);
    });
  }
}

/* ------------------------------------------------------------------ observer */

/* INSTR only: lane 0 of producer warp 1. For every ring entry, in ring order:
 * waits for it (Q-full), reads it, arrives on its Q-empty (whose count includes
 * this one arrival, so the phase cannot complete, and the producer cannot
 * overwrite the entry, before it is read), waits for the consumers' release
 * (the phase's completion) and writes the pair's class (from the entry) and
 * the clock64 ticks since the previous release as its cycles. The pairs it
 * never sees (skipped) keep the class MASKED and 0 cycles that the launch
 * wrote beforehand (fm_sm90_bwd.cu), so that the producer's walk over the
 * query tiles stores nothing: at a key tile of a sparse mask it passes
 * hundreds of masked tiles for each one it issues. Its arrival comes about one pair before the
 * consumers' release, so it delays nobody; and since every phase of Q-empty
 * needs it, no phase can pass it unseen (no parity aliasing). It ends at the
 * producer's F_END entry. */
template <int HD>
__device__ __forceinline__ void observer(const params &p, unsigned char *smem, bars<HD> br) {
  using T = traits<HD>;
  const volatile int32_t *sMeta = reinterpret_cast<const volatile int32_t *>(smem + T::OFF_META);
  long long last = clock64();
  for (int q_iter = 0;; q_iter++) {
    const int s = q_iter % T::STAGES;
    const uint32_t ph = (q_iter / T::STAGES) & 1;
    fmh::mbar_wait(br.q_full(s), ph);
    const int32_t entry = sMeta[s], item = sMeta[T::STAGES + s];
    const int m = entry & TILE_MASK, flags = entry >> FLAG_SHIFT;
    if (flags & F_END) return;
    fmh::mbar_arrive(br.q_empty(s));
    fmh::mbar_wait(br.q_empty(s), ph);
    const long long now = clock64();
    if (!(flags & F_EMPTY)) {
      const int n = item % p.Tc, bh = item / p.Tc;
      const int64_t at = ((int64_t)bh * p.Tr + m) * p.Tc + n;
      p.tile_class[at] = (uint8_t)((flags >> F_CLS_SHIFT) & 3);
      p.tile_cycles[at] = now - last;
    }
    last = now;
  }
}

/* ---------------------------------------------------------------- dQ writers */

/* Thread 0 of producer warp FMBQ_WRITER_WARP0 + w: the copy-engine side of
 * consumer warpgroup w's staging buffer (the protocol: fm_sm90_bwd_dq.h). Per
 * use, in order: waits until the warpgroup has written it (dq_full), issues
 * what its job word asks for (the dQ part's two reduce-add boxes, in
 * deterministic mode on the key tile's turn; or the dK or dV boxes' stores),
 * waits until the copy engine has read the buffer and hands it back
 * (dq_empty); in deterministic mode it then waits for the addition to complete
 * and passes the turn, while the warpgroup writes the next use. Each writer
 * owns its bulk groups (they are per thread), so a wait covers only its own
 * warpgroup's copies. Ends at the END job, after every copy has completed. */
template <int HD>
__device__ __forceinline__ void dq_writer(const params &p, unsigned char *smem, bars<HD> br, int w) {
  using T = traits<HD>;
  const int2 *job = reinterpret_cast<const int2 *>(smem + T::OFF_JOB) + w; /* fmbq_job */
  const unsigned char *stage = smem + T::OFF_DQ + w * T::DQ_BYTES;
  for (int u = 0;; u++) {
    fmh::mbar_wait(br.dq_full(w), fmbq_full_parity(u));
    const int2 j = *job;
    const int32_t code = j.x;
    if (code == FMBQ_JOB_END) break;
    const int n = j.y % p.Tc, bh = j.y / p.Tc, b = bh / p.H, h = bh % p.H;
    int32_t *sc = nullptr;
    int32_t turn = 0; /* deterministic: the pair's turn; FMBO_NONE (NOSKIP's MASKED pairs): no addition */
    if (code >= 0) { /* dQ of query tile `code`: this warpgroup's columns (head dim 64: all) */
      if (p.deterministic) {
        sc = p.sem + fmbq_sem_slot(T::DQ_SPLIT_KEYS, bh, p.Tr, code, w);
        turn = __ldg(p.turns + fmbo_turn_at(set_of(p, b, h), p.Tr, p.Tc, code, n));
        const int32_t v = sem_load(sc); /* in flight beside the turn's load: one round trip */
        if (turn != FMBO_NONE) sem_wait_from(sc, fmbq_turn(T::DQ_SPLIT_KEYS, turn, w), v);
      }
      if (turn != FMBO_NONE) {
        const int d0 = T::DQ_SPLIT_KEYS ? 0 : w * 64;
        fmh::tma_reduce_add_4d(&p.tm_dq, stage, d0, h, code * T::BR, b);
        fmh::tma_reduce_add_4d(&p.tm_dq, stage + T::BR * 128, d0 + 32, h, code * T::BR, b);
      }
    } else { /* dK or dV of this warpgroup's 64 keys */
#pragma unroll
      for (int d = 0; d < T::DBLK; d++)
        fmh::tma_store_4d(code == FMBQ_JOB_DK ? &p.tm_dk : &p.tm_dv, stage + d * 64 * 128, d * 64, h,
                          n * T::BC + w * 64, b);
    }
    fmh::bulk_commit();
    fmh::bulk_wait_read(); /* the copy engine has read the buffer */
    fmh::mbar_arrive(br.dq_empty(w));
    if (p.deterministic && code >= 0 && turn != FMBO_NONE) {
      fmh::bulk_wait_all(); /* the addition is done before the turn passes */
      __threadfence();
      sem_pass(sc, fmbq_turn_after(T::DQ_SPLIT_KEYS, turn, w));
    }
  }
  fmh::bulk_wait_all();
}

/* ----------------------------------------------------------------- consumers */

/* The two keys of this thread as (start, length) interval pairs, causal folded;
 * a key past Sk hides every query row. Kept in shared memory for the item
 * (word w of consumer thread c at [w][c], conflict-free) and read only by
 * the pairs that mask: in registers for the whole item they would push the
 * consumers, at their 232, into spilling. */
struct key_iv {
  int32_t ls[2], ll[2], us[2], ul[2];
  __device__ __forceinline__ void store(int32_t *keys, int c) const {
    const int32_t *w = ls;
#pragma unroll
    for (int i = 0; i < 8; i++) keys[i * 256 + c] = w[i];
  }
  /* key hr's words through the shared window (at = the keys' 32-bit address
     + 4 c), the starts as i0 - start (softmax_p) */
  __device__ __forceinline__ void load_key(uint32_t at, int hr, int i0) {
    ls[hr] = i0 - fmh::ld_shared_s32(at + (0 + hr) * 256 * 4);
    ll[hr] = fmh::ld_shared_s32(at + (2 + hr) * 256 * 4);
    us[hr] = i0 - fmh::ld_shared_s32(at + (4 + hr) * 256 * 4);
    ul[hr] = fmh::ld_shared_s32(at + (6 + hr) * 256 * 4);
  }
};
static_assert(sizeof(key_iv) == 8 * 4 && traits<128>::NCW * 128 == 256 && traits<64>::NCW * 128 == 256,
              "key_iv: 8 words per consumer thread, 256 consumer threads");

/* The R2P method's form of the same (fm_sm90_mask.h, the backward): per key
 * hr, the bit positions of its lower interval's start and end and of its
 * upper interval's at query tile 0 (fm90m_t_pos), kept like key_iv (word
 * 4 hr + k of consumer thread c at [4 hr + k][c]). */
struct key_pos {
  int32_t p[2][4];
  __device__ __forceinline__ void store(int32_t *keys, int c) const {
    const int32_t *w = &p[0][0];
#pragma unroll
    for (int i = 0; i < 8; i++) keys[i * 256 + c] = w[i];
  }
  /* key hr's four positions through the shared window (at = the keys' 32-bit
     address + 4 c) */
  __device__ __forceinline__ void load_key(uint32_t at, int hr) {
#pragma unroll
    for (int k = 0; k < 4; k++) p[hr][k] = fmh::ld_shared_s32(at + (4 * hr + k) * 256 * 4);
  }
};
static_assert(sizeof(key_pos) == sizeof(key_iv), "key_pos: key_iv's 8 words");
/* The thread's key form of mask method MASK (FM_SM90_MASK_*). */
template <int MASK> struct mask_keys { using type = key_iv; };
template <> struct mask_keys<FM_SM90_MASK_R2P> { using type = key_pos; };

/* The consumer in phases, one warpgroup's view: store_keys at the start of an
 * item; per visited query tile the phases of FlashAttention-4's order (below:
 * issue_s_dp_overlap, softmax_p, issue_dv_steps, ds_of_p, write_ds,
 * issue_dq_dk, stage_dq); store_dkdv at the item's end. The phases are inlined
 * into one program whose SASS is that of the consumer written as one function,
 * which holds only while the consumer's frame stays the same: the register
 * arrays (dk, dv, st, dpt, pa, da, dq) and the key intervals (kv) are declared
 * in consumer and passed by reference, and it_n is declared before q_iter;
 * kernels/PERF_NOTES.md, "Kernels in phases", has the rules and the check.
 * (Until 2026-11 a second schedule, FA3's ping-pong with dQ deferred by a
 * tile, sat beside this one behind a template parameter; measured 4-7% slower,
 * it was removed: PERF_NOTES, "Schedule 2".) */
/* One consumer warpgroup's view of shared memory, fixed for the kernel. */
template <int HD> struct ctx {
  int cw;                         /* consumer warpgroup 0 or 1 */
  int tid, warp, lane, g, c4;     /* thread 0 .. 127 of the warpgroup, its warp and lane */
  int ctid;                       /* thread 0 .. 255 of both consumer warpgroups */
  int32_t *sKeys;
  uint32_t k_base, v_base;        /* the item's K and V */
  uint32_t kw_base, vw_base;      /* this warpgroup's 64 keys: rows 64 cw .. of each 128-row column block */
  int k0;                         /* dQ: the first key step of this warpgroup */
  uint32_t kb;                    /* dQ: K's column block of this warpgroup */
  uint32_t sa;                    /* shared memory's 32-bit address (LDS, not generic loads) */
};

/* Issues dQ_w = dS K_w (not committed); dS^T at ds_base: 64 queries x 64
 * head-dim columns, the keys are the reduction. */
template <int HD>
__device__ __forceinline__ void issue_dq(const ctx<HD> &c, float (&dq)[32], uint32_t ds_base) {
  using T = traits<HD>;
#pragma unroll
  for (int kk = 0; kk < T::DQ_KSTEPS; kk++)
    fmh::wgmma_ss_n64<1, 1>(dq, fmh::desc_mnmajor(ds_base, T::BC, c.k0 + kk), fmh::desc_mnmajor(c.kb, T::BC, c.k0 + kk),
                            kk > 0);
}

/* Key hr of this thread (row 16 warp + g + 8 hr of this warpgroup's 64) of the
 * item's key tile n: its lower interval's start and length, its upper
 * interval's (causal folded in); a key past Sk hides every query row. */
template <int HD>
__device__ __forceinline__ void key_intervals(const params &p, const ctx<HD> &c, const int32_t *gv, int n, int hr,
                                              int32_t &ls, int32_t &ll, int32_t &us, int32_t &ul) {
  const int j = n * traits<HD>::BC + c.cw * 64 + c.warp * 16 + c.g + 8 * hr;
  int32_t lts = 0, lte = INT32_MAX, uts = 0, ute = 0;
  if (j < p.Sk) {
    lts = __ldg(gv + j);
    lte = __ldg(gv + (int64_t)p.Sk + j);
    fm_effective_upper(__ldg(gv + 2 * (int64_t)p.Sk + j), __ldg(gv + 3 * (int64_t)p.Sk + j), p.causal, j, p.Sq,
                       p.Sk, &uts, &ute);
  }
  ls = lts;
  ll = max(lte - lts, 0);
  us = uts;
  ul = max(ute - uts, 0);
}

/* The thread's keys for the item's key tile n, in shared memory (read back by
 * this thread only): key_iv intervals (SLICES) or key_pos bit positions (R2P:
 * fm90m_t_pos of each interval's start and end). */
template <int HD>
__device__ __forceinline__ void store_keys(const params &p, const ctx<HD> &c, key_iv &kv, int n, int b, int h) {
  const int32_t *gv = p.intervals + (int64_t)set_of(p, b, h) * 4 * p.Sk;
#pragma unroll
  for (int hr = 0; hr < 2; hr++) key_intervals<HD>(p, c, gv, n, hr, kv.ls[hr], kv.ll[hr], kv.us[hr], kv.ul[hr]);
  kv.store(c.sKeys, c.ctid);
}
template <int HD>
__device__ __forceinline__ void store_keys(const params &p, const ctx<HD> &c, key_pos &kp, int n, int b, int h) {
  const int32_t *gv = p.intervals + (int64_t)set_of(p, b, h) * 4 * p.Sk;
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    int32_t ls, ll, us, ul;
    key_intervals<HD>(p, c, gv, n, hr, ls, ll, us, ul);
    kp.p[hr][0] = fm90m_t_pos(ls, c.c4);
    kp.p[hr][1] = fm90m_t_pos(fm90m_t_end(ls, ll), c.c4);
    kp.p[hr][2] = fm90m_t_pos(us, c.c4);
    kp.p[hr][3] = fm90m_t_pos(fm90m_t_end(us, ul), c.c4);
  }
  kp.store(c.sKeys, c.ctid);
}

/* A consumer warpgroup's view (ctx), filled once per kernel. */
template <int HD>
__device__ __forceinline__ void init_ctx(ctx<HD> &c, unsigned char *smem, bars<HD> br, int cw) {
  using T = traits<HD>;
  c.cw = cw;
  c.tid = threadIdx.x - 128 * (cw + 1);
  c.warp = c.tid >> 5, c.lane = c.tid & 31, c.g = c.lane >> 2, c.c4 = c.lane & 3;
  c.sKeys = reinterpret_cast<int32_t *>(smem + T::OFF_KEYS);
  c.ctid = threadIdx.x - 128;
  c.k_base = fmh::smem_addr(smem + T::OFF_K), c.v_base = fmh::smem_addr(smem + T::OFF_V);
  c.kw_base = c.k_base + cw * 64 * 128, c.vw_base = c.v_base + cw * 64 * 128;
  c.k0 = T::DQ_SPLIT_KEYS ? cw * T::DQ_KSTEPS : 0;
  c.kb = c.k_base + (T::DQ_SPLIT_KEYS ? 0 : cw) * T::BC * 128;
}

/* ------------------------------------------ the phases: FlashAttention-4's order
 *
 * Per visited query tile, both consumer warpgroups at once (FA4's Hopper backward,
 * flash_bwd_sm90.py, on fmsim's 64 x 128 tile), one warpgroup's view:
 *   issue_s_dp_overlap   S^T and dP^T issued, two commit groups; wait for S^T only
 *   softmax_p            mask and P^T = exp2(..) under the dP^T GEMM
 *   issue_dv_steps       dV += P^T dO, the first DV_EARLY query steps (pins their exp2
 *                        above the wait; head dim 128: 3 of 4, head dim 64: all)
 *   ds_of_p              wait for dP^T; dS^T = P^T (dP^T - D)
 *   write_ds             dS^T to buffer ds_iter & 1 (fenced for the async proxy)
 *   issue_dv_steps       dV, the other query steps (head dim 128)
 *   issue_dq_dk          [head dim 128: BAR_DS, both halves written] dQ_w = dS K of
 *                        THIS tile, dK += dS^T Q; wait for dV and dQ
 *   stage_dq             dQ_w * scale to the writer while dK runs
 *   wait for dK; release the ring stage (q_empty, per thread)
 * dV and dK are the same wgmma on the same fragments in the same tile order as in
 * the removed ping-pong (schedule 1), and so is each tile's dQ part (the same
 * split, issue_dq): the gradients were the same bits (dQ: in deterministic mode). */

/* S^T = K_w Q^T and dP^T = V_w dO^T, one commit group each, issued without a
 * turn; waits for S^T only, so dP^T runs under the exp2. */
template <int HD>
__device__ __forceinline__ void issue_s_dp_overlap(const ctx<HD> &c, float (&st)[32], float (&dpt)[32],
                                                   uint32_t q_base, uint32_t do_base) {
  using T = traits<HD>;
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++)
    fmh::wgmma_ss_n64<0, 0>(st, fmh::desc_kmajor(c.kw_base, T::BC, kk), fmh::desc_kmajor(q_base, T::BR, kk), kk > 0);
  fmh::wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++)
    fmh::wgmma_ss_n64<0, 0>(dpt, fmh::desc_kmajor(c.vw_base, T::BC, kk), fmh::desc_kmajor(do_base, T::BR, kk),
                            kk > 0);
  fmh::wgmma_commit();
  fmh::wgmma_wait<1>();
  fmh::reg_fence(st);
}

/* P^T = exp2(S^T scale log2 e - LSE2) in place, the element mask on the
 * thread's keys (kv, loaded when the entry needs it) first; stage s holds
 * query tile m's LSE2. MASK: SLICES compares per element from key_iv; R2P
 * builds key hr's word (fm90m_t_key_word) from key_pos and applies it a byte
 * at a time (the byte's four tests stand together, so that ptxas sets their
 * predicates with one R2P), one select per element; the same elements. */
template <int HD, int MASK>
__device__ __forceinline__ void softmax_p(const params &p, const ctx<HD> &c, float (&st)[32],
                                          typename mask_keys<MASK>::type &kv, int s, int m, int flags) {
  using T = traits<HD>;
  constexpr bool R2P = MASK == FM_SM90_MASK_R2P;
  const int c4 = c.c4;
  const uint32_t lse2 = c.sa + T::OFF_ROWS + (s * 2 * T::BR + 2 * c4) * 4;
  const uint32_t keys = c.sa + T::OFF_KEYS + c.ctid * 4;
  const int i0 = m * T::BR + 2 * c4;
  /* key by key (hr), so that only one key's interval words are held; row i =
     i0 + 8 nb + e is masked for the key when i - ls < ll or i - us < ul
     (unsigned), computed as (i0 - ls) + (8 nb + e): the same values mod 2^32 */
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    if constexpr (R2P) {
      if (flags & F_NEEDMASK) {
        kv.load_key(keys, hr);
        const uint32_t w = fm90m_t_key_word(kv.p[hr], m);
#pragma unroll
        for (int nb = 0; nb < FM90M_T_NB; nb++) /* byte nb / 2 */
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int idx = 4 * nb + 2 * hr + e;
            st[idx] = (w & (1u << fm90m_t_bit(idx))) ? -INFINITY : st[idx];
          }
      }
    } else {
      if (flags & F_NEEDMASK) kv.load_key(keys, hr, i0);
    }
#pragma unroll
    for (int nb = 0; nb < 8; nb++) {
      const float2 l2 = fmh::ld_shared_f2(lse2 + 8 * nb * 4);
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int idx = 4 * nb + 2 * hr + e;
        float x = st[idx];
        if constexpr (!R2P) {
          if (flags & F_NEEDMASK) {
            const uint32_t o = (uint32_t)(8 * nb + e);
            const bool mk = ((uint32_t)kv.ls[hr] + o < (uint32_t)kv.ll[hr]) ||
                            ((uint32_t)kv.us[hr] + o < (uint32_t)kv.ul[hr]);
            x = mk ? -INFINITY : x;
          }
        }
        st[idx] = fast_exp2(fmaf(x, p.scale_log2, -(e ? l2.y : l2.x)));
      }
    }
  }
}

/* Waits for dP^T (all of this warpgroup's wgmma), then dS^T = P^T (dP^T - D)
 * in place. */
template <int HD>
__device__ __forceinline__ void ds_of_p(const ctx<HD> &c, const float (&st)[32], float (&dpt)[32], int s) {
  using T = traits<HD>;
  fmh::wgmma_wait<1>(); /* dV's early steps (issued after dP^T) stay in flight */
  fmh::reg_fence(dpt);
  const uint32_t dsum = c.sa + T::OFF_ROWS + (s * 2 * T::BR + T::BR + 2 * c.c4) * 4;
#pragma unroll
  for (int nb = 0; nb < 8; nb++) {
    const float2 dd = fmh::ld_shared_f2(dsum + 8 * nb * 4);
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int idx = 4 * nb + 2 * hr + e;
        dpt[idx] = st[idx] * (dpt[idx] - (e ? dd.y : dd.x));
      }
  }
}

/* Query steps K0 .. K1 - 1 of dV += P^T dO (A = P^T from registers, dO
 * MN-major), one commit group. The first DV_EARLY steps are issued before the
 * dP^T wait: the wgmma reads their P^T fragments, so ptxas must compute those
 * exp2 before it (the wait is no barrier to its scheduler: with all of dV
 * after the dS^T stores, every exp2 sank below the wait). Head dim 128 issues
 * three of the four early (in its SASS all 32 exp2 then sit above the wait;
 * with two, 24): the fourth too holds P^T in fp32 and bf16 at once, and ptxas
 * then serializes the wgmma at 232 (C7512); head dim 64 has the room for all
 * four. The steps add in query-step order, as the ping-pong's one group did:
 * the same bits. */
template <int HD> constexpr int DV_EARLY = HD == 64 ? 4 : 3;
template <int HD, int K0, int K1>
__device__ __forceinline__ void issue_dv_steps(const ctx<HD> &c, float (&dv)[HD / 2], const uint32_t (&pa)[4][4],
                                               uint32_t do_base) {
  using T = traits<HD>;
  if constexpr (K0 < K1) {
    fmh::wgmma_fence();
#pragma unroll
    for (int kk = K0; kk < K1; kk++) fmh::pv_mma<HD>::run(dv, pa[kk], fmh::desc_mnmajor(do_base, T::BR, kk));
    fmh::wgmma_commit();
  }
}

/* dQ_w = dS K of this query tile (issue_dq: dS^T buffer db) and dK += dS^T Q,
 * one commit group each; then waits until dV and dQ are done (dK stays in
 * flight under the dQ staging). Head dim 128: warpgroup w's dQ columns need
 * both warpgroups' halves of dS^T, so a 256-thread barrier first (each thread
 * fenced its stores for the async proxy before it); head dim 64: the
 * warpgroup's dQ reads only its own keys' half, no barrier. */
template <int HD>
__device__ __forceinline__ void issue_dq_dk(const ctx<HD> &c, float (&dq)[32], float (&dk)[HD / 2],
                                            const uint32_t (&da)[4][4], uint32_t q_base, int db) {
  using T = traits<HD>;
  if (!T::DQ_SPLIT_KEYS) fmh::named_sync(BAR_DS, T::NCW * 128);
  fmh::wgmma_fence();
  issue_dq<HD>(c, dq, c.sa + T::OFF_DS + db * T::DS_BYTES);
  fmh::wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < 4; kk++) fmh::pv_mma<HD>::run(dk, da[kk], fmh::desc_mnmajor(q_base, T::BR, kk));
  fmh::wgmma_commit();
  fmh::wgmma_wait<1>();
  fmh::reg_fence(dq);
}

/* The shared-memory side goes through 32-bit shared-window addresses from c.sa
 * (64-bit generic pointers cost registers that the head dim 128 consumer, which
 * holds P^T in fp32 and bf16 at once, lacks). */

/* This thread's part of dS^T (bf16) to buffer db, SW128: (128 keys, 64
 * queries; this warpgroup's rows 64 cw ..), conflict-free 32-bit stores. */
template <int HD> __device__ __forceinline__ void write_ds(const ctx<HD> &c, const uint32_t (&da)[4][4], int db) {
  using T = traits<HD>;
  const uint32_t ds = c.sa + T::OFF_DS + db * T::DS_BYTES;
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const int key = c.cw * 64 + c.warp * 16 + c.g + 8 * (r & 1), q = 16 * kk + 8 * (r >> 1) + 2 * c.c4;
      fmh::st_shared_u32(ds + key * 128 + (((q >> 3) ^ (key & 7)) << 4) + (q & 7) * 2, da[kk][r]);
    }
}

/* Staging buffer hand-off (fm_sm90_bwd_dq.h), this warpgroup's side: before
 * use u (fmbq_use: counted from ds_iter and it_n, no register of its own),
 * every thread waits until the copy engine has read use u - 1 (the writer's
 * dq_empty); after writing its part, it fences its stores for the copy engine
 * (async proxy), thread 0 writes the job word, and every thread arrives on
 * dq_full (each thread that wrote the buffer hands it on itself). No thread
 * waits for the copies or for a deterministic turn. */
template <int HD> __device__ __forceinline__ void take_stage(const ctx<HD> &c, int u) {
  fmh::mbar_wait_sa(c.sa + bar_at<HD>(bars<HD>::DQ_EMPTY + c.cw), fmbq_empty_parity(u));
}
template <int HD> __device__ __forceinline__ void hand_stage(const ctx<HD> &c, int32_t code, int32_t item) {
  fmh::fence_proxy_async();
  if (c.tid == 0) fmh::st_shared_v2(c.sa + traits<HD>::OFF_JOB + 8 * c.cw, (uint32_t)code, (uint32_t)item);
  fmh::mbar_arrive_sa(c.sa + bar_at<HD>(bars<HD>::DQ_FULL + c.cw));
}

/* dQ * scale of query tile mq, fp32, staged as two 32-column SW128 boxes for
 * the writer, which adds them to the fp32 accumulator by the copy engine
 * (deterministic: on its turn). The staging stores are 8 bytes a lane, which
 * shared memory serves a half-warp (16 lanes, 128 bytes) per wavefront at
 * best. In store step (nb, hr) the lanes of an even g write their column block
 * nb, those of an odd g block nb ^ 2 (so each lane still writes each of its 8
 * blocks once, to the same address): with every lane on block nb, rows g and
 * g ^ 1 of a half-warp hit the same 32-byte column of the swizzle, a 2-way bank
 * conflict, 4 wavefronts a store instead of 2 (Nsight Compute, full 8K: all
 * 1.07e9 excessive shared wavefronts of the kernel); with the odd rows two
 * blocks over, the four rows of a half-warp hit four different 32-byte columns.
 * tests/test_bwd_smem_banks.c checks both. */
template <int HD>
__device__ __forceinline__ void stage_dq(const params &p, const ctx<HD> &c, const float (&dq)[32], int mq,
                                         int32_t item, int u) {
  using T = traits<HD>;
  const int warp = c.warp, g = c.g, c4 = c.c4;
  const bool odd = g & 1;
  /* element (row, col) of the (BR, 64) part sits in box col / 32, at row, 16-byte
     chunk ((col % 32) / 4) ^ (row % 8), word col % 4; for this lane's column block
     (nb, or nb ^ 2 for an odd g) that chunk is (2 (nb % 4)) ^ xr, xr fixed per lane */
  const int xr = g ^ (c4 >> 1) ^ (odd ? 4 : 0);
  const uint32_t base = c.sa + T::OFF_DQ + c.cw * T::DQ_BYTES + (warp * 16 + g) * 128 + (c4 & 1) * 8;
  take_stage<HD>(c, u); /* the copy engine has read the previous use */
#pragma unroll
  for (int nb = 0; nb < 8; nb++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      /* this lane's column block in this step: nb, or nb ^ 2 for an odd g */
      const float x0 = odd ? dq[4 * (nb ^ 2) + 2 * hr] : dq[4 * nb + 2 * hr];
      const float x1 = odd ? dq[4 * (nb ^ 2) + 2 * hr + 1] : dq[4 * nb + 2 * hr + 1];
      fmh::st_shared_f2(base + (nb >> 2) * T::BR * 128 + hr * 8 * 128 + (((2 * (nb & 3)) ^ xr) << 4),
                        make_float2(x0 * p.scale, x1 * p.scale));
    }
  hand_stage<HD>(c, mq, item);
}

/* The end of an item: dK * scale and dV in bf16 through this warpgroup's
 * staging, one after the other, stored by TMA by the writer. The dK / dV map
 * puts other threads on a byte than the dQ map before and after it; the writer's
 * mbarriers order those writes already (through its acquire and release), the
 * two warpgroup barriers here (one before dK, one after dV: once per item) order
 * them directly, as compute-sanitizer's racecheck can see. */
template <int HD>
__device__ __forceinline__ void store_dkdv(const params &p, const ctx<HD> &c, const float (&dk)[HD / 2],
                                           const float (&dv)[HD / 2], int32_t item, int u) {
  const int warp = c.warp, g = c.g, c4 = c.c4;
  const uint32_t stage = c.sa + traits<HD>::OFF_DQ + c.cw * traits<HD>::DQ_BYTES;
#pragma unroll
  for (int which = 0; which < 2; which++) {
    take_stage<HD>(c, u + which);
    if (which == 0) fmh::named_sync(BAR_WG + c.cw, 128); /* every thread's dQ stores are before */
    const float *acc = which ? dv : dk;
    const float f = which ? 1.f : p.scale;
#pragma unroll
    for (int nb = 0; nb < HD / 8; nb++)
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        const int row = warp * 16 + g + 8 * hr, col = nb * 8 + 2 * c4, blk = col >> 6, chunk = (col & 63) >> 3;
        fmh::st_shared_u32(stage + blk * 64 * 128 + row * 128 + ((chunk ^ (row & 7)) << 4) + (col & 7) * 2,
                           pack_bf16(acc[4 * nb + 2 * hr] * f, acc[4 * nb + 2 * hr + 1] * f));
      }
    hand_stage<HD>(c, which ? FMBQ_JOB_DV : FMBQ_JOB_DK, item);
  }
  fmh::named_sync(BAR_WG + c.cw, 128); /* every thread's dV stores are before the next dQ stores */
}

/* The consumer warpgroups: items until the producer announces none; per item
 * store_keys, the visited query tiles (the phases above), then store_dkdv; at
 * the end the writer's END job. The staging uses are counted by fmbq_use from
 * ds_iter and it_n. */
template <int HD, int VAR, bool INSTR, int MASK>
__device__ __forceinline__ void consumer(const params &p, unsigned char *smem, bars<HD> br, int cw) {
  using T = traits<HD>;
  ctx<HD> c;
  init_ctx<HD>(c, smem, br, cw);
  c.sa = fmh::smem_addr(smem);
  int ds_iter = 0; /* dS^T tiles written (= dQ parts staged) so far: buffer ds_iter & 1 */
  for (int it_n = 0, q_iter = 0;; it_n++) { /* q_iter: ring position over all items */
    fmh::mbar_wait_sa(c.sa + bar_at<HD>(bars<HD>::KV_FULL), it_n & 1);
    const int32_t item = __shfl_sync(0xffffffffu, fmh::ld_shared_s32(c.sa + T::OFF_ITEM), 0);
    if (item < 0) { /* the writer's END job, once its last copy has read the buffer */
      take_stage<HD>(c, fmbq_use(ds_iter, it_n));
      hand_stage<HD>(c, FMBQ_JOB_END, -1);
      break;
    }
    const int n = item % p.Tc, bh = item / p.Tc, b = bh / p.H, h = bh % p.H;
    {
      typename mask_keys<MASK>::type kv;
      store_keys<HD>(p, c, kv, n, b, h);
    }
    float dk[HD / 2], dv[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk[i] = dv[i] = 0.f;
    for (;;) {
      const int s = q_iter % T::STAGES;
      const uint32_t ph = (q_iter / T::STAGES) & 1;
      fmh::mbar_wait_sa(c.sa + bar_at<HD>(bars<HD>::Q_FULL + s), ph);
      const int32_t entry = __shfl_sync(0xffffffffu, fmh::ld_shared_s32(c.sa + T::OFF_META + 4 * s), 0);
      const int m = entry & TILE_MASK, flags = entry >> FLAG_SHIFT;
      q_iter++;
      if (flags & F_EMPTY) {
        fmh::mbar_arrive_sa(c.sa + bar_at<HD>(bars<HD>::Q_EMPTY + s)); /* every thread: it read the entry */
        break;
      }
      const uint32_t q_base = c.sa + T::OFF_Q + s * T::QT_BYTES;
      const uint32_t do_base = c.sa + T::OFF_DO + s * T::QT_BYTES;
      float st[32], dpt[32];
      issue_s_dp_overlap<HD>(c, st, dpt, q_base, do_base);
      /* the thread's keys, loaded by softmax_p when the entry masks; zero otherwise, so
         that their registers are not live around the loop (uninitialized, they were:
         8 registers held through every GEMM) */
      typename mask_keys<MASK>::type kv = {};
      softmax_p<HD, MASK>(p, c, st, kv, s, m, flags);
      uint32_t pa[4][4], da[4][4]; /* P^T and dS^T as bf16 A fragments */
#pragma unroll
      for (int kk = 0; kk < DV_EARLY<HD>; kk++) fmd::pack_frag(st + 8 * kk, pa[kk]);
      issue_dv_steps<HD, 0, DV_EARLY<HD>>(c, dv, pa, do_base); /* before the dP^T wait: pins the exp2 above it */
      ds_of_p<HD>(c, st, dpt, s);
#pragma unroll
      for (int kk = 0; kk < 4; kk++) fmd::pack_frag(dpt + 8 * kk, da[kk]);
#pragma unroll
      for (int kk = DV_EARLY<HD>; kk < 4; kk++) fmd::pack_frag(st + 8 * kk, pa[kk]);
      const int db = ds_iter & 1;
      write_ds<HD>(c, da, db);
      fmh::fence_proxy_async(); /* for the dQ wgmma of both warpgroups (issue_dq_dk) */
      issue_dv_steps<HD, DV_EARLY<HD>, 4>(c, dv, pa, do_base);
      float dq[32];
      issue_dq_dk<HD>(c, dq, dk, da, q_base, db);
      fmh::reg_fence(dv); /* dV is done too (the group before dQ's): P^T is free */
      fmh::reg_fence(pa);
      stage_dq<HD>(p, c, dq, m, item, fmbq_use(ds_iter, it_n)); /* while dK runs */
      fmh::wgmma_wait<0>();
      fmh::reg_fence(dk);
      fmh::reg_fence(da);
      fmh::mbar_arrive_sa(c.sa + bar_at<HD>(bars<HD>::Q_EMPTY + s)); /* every thread: Q, dO, the entry, the rows */
      ds_iter++;
      if (flags & F_LAST) break;
    }
    /* ---- end of the item: K and V are no longer read */
    fmh::mbar_arrive_sa(c.sa + bar_at<HD>(bars<HD>::KV_EMPTY)); /* every thread: it read the item number */
    store_dkdv<HD>(p, c, dk, dv, item, fmbq_use(ds_iter, it_n));
  }
}

template <int HD, int VAR, bool INSTR, int MASK>
__global__ void __launch_bounds__(traits<HD>::THREADS, CTAS_PER_SM) bwd_kernel(const __grid_constant__ params p) {
  using T = traits<HD>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = fmh::smem_aligned_1k(smem_raw);
  bars<HD> br{reinterpret_cast<uint64_t *>(smem + T::OFF_BAR)};
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  if (threadIdx.x == 0) {
    /* arrivals per phase, the hand-off rule of the forward (fm_sm90_fwd.cuh):
       every thread that wrote or read the shared data the barrier hands on */
    fmh::mbar_init(br.kv_full(), 1);              /* the producer's lane 0: item number, K, V */
    fmh::mbar_init(br.kv_empty(), T::NCW * 128);  /* every consumer thread */
    for (int s = 0; s < T::STAGES; s++) {
      fmh::mbar_init(br.q_full(s), 32);           /* the producer's lanes: rows; lane 0: entry, Q, dO */
      fmh::mbar_init(br.q_empty(s), T::NCW * 128 + (INSTR ? 1 : 0)); /* + the observer */
    }
    for (int d = 0; d < 2; d++) {
      /* the removed ping-pong's ds_full / ds_empty, unused; initialized still, so that
         the SASS stayed the same bits as when both schedules were built */
      fmh::mbar_init(br.ds_full(d), T::NCW * 128);
      fmh::mbar_init(br.ds_empty(d), T::NCW * 128);
    }
    for (int w = 0; w < T::NCW; w++) {
      fmh::mbar_init(br.dq_full(w), FMBQ_FULL_COUNT);   /* every thread of warpgroup w: its part, the job */
      fmh::mbar_init(br.dq_empty(w), FMBQ_EMPTY_COUNT); /* its writer: the copy engine has read the buffer */
    }
    fmh::fence_barrier_init();
  }
  __syncthreads();
  if (wg == 0) {
    fmh::setmaxnreg_dec<T::REG_PRODUCER>();
    const int warp = threadIdx.x >> 5;
    if (warp == 0) producer<HD, VAR, INSTR>(p, smem, br);
    else if (INSTR && threadIdx.x == 32) observer<HD>(p, smem, br);
    else if (warp >= FMBQ_WRITER_WARP0 && (threadIdx.x & 31) == 0) dq_writer<HD>(p, smem, br, warp - FMBQ_WRITER_WARP0);
  } else {
    fmh::setmaxnreg_inc<T::REG_CONSUMER>();
    consumer<HD, VAR, INSTR, MASK>(p, smem, br, wg - 1);
  }
}

}  // namespace fm90b

#endif
