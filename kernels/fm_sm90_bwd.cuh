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
 *              by the lanes; in deterministic mode it also takes the dQ turn of
 *              the query tiles it skips (below).
 *              Warps 2 and 3, thread 0: the writers of consumer warpgroups 1
 *              and 2 (dq_writer): each issues the copy-engine operations that
 *              read its warpgroup's staging buffer (dQ reductions, dK and dV
 *              stores), waits for those reads and hands the buffer back, and in
 *              deterministic mode waits for and passes the dQ turns, so that no
 *              consumer waits on the copy engine (fm_sm90_bwd_dq.h).
 *   consumers  warpgroups 1 and 2, 64 keys each; per visited query tile:
 *                S^T  = K Q^T            wgmma m64n64, both K-major from smem
 *                dP^T = V dO^T           the same
 *                mask (partial tiles: the thread's two keys' intervals, kept in
 *                registers for the whole item), P^T = exp2(S^T scale log2e -
 *                LSE2), dS^T = P^T (dP^T - D)
 *                dV  += P^T dO           A = P^T from registers (bf16), dO MN-major
 *                dK  += dS^T Q           the same with dS^T and Q
 *                dQ_w = dS K             of the PREVIOUS query tile (below); head
 *                                        dim 128: warpgroup w the columns 64 w ..
 *                                        64 w + 63 over all 128 keys; head dim 64:
 *                                        warpgroup w its own 64 keys, all columns
 *                                        (two additions to one place); A = dS
 *                                        MN-major from smem
 *                dS^T to shared memory (this warpgroup's 64 keys of the 128)
 *                dQ_w * scale staged in fp32 and handed to the warpgroup's writer,
 *                which adds it to the fp32 dQ accumulator in global memory by the
 *                copy engine (cp.reduce.async.bulk .add): one bulk reduction per
 *                (key tile, query tile, warpgroup) instead of 8192 atomics.
 *              The two warpgroups take turns at the tensor cores (named barriers,
 *              FA3's ping-pong): S/dP of warpgroup 1, S/dP of 2, dV/dK/dQ of 1,
 *              dV/dK/dQ of 2, ..., so that one's softmax and staging run while
 *              the other's GEMMs do. dQ needs both warpgroups' dS, which the
 *              second writes only after the first's turn: so each warpgroup adds
 *              the dQ of query tile t in its turn of tile t + 1 (and of an item's
 *              last tile after it), from two dS buffers handed on by mbarriers
 *              (ds_full: both halves written; ds_empty: both dQ GEMMs read it).
 *              At the end of the item: dK * scale and dV, bf16, staged in turn
 *              and stored by the writer (TMA).
 *
 * Determinism: in the default mode the fp32 dQ additions of different key tiles
 * land in whatever order the CTAs reach them. With deterministic = 1 every
 * (batch, head, query tile) has a counter in global memory (head dim 128: one
 * per warpgroup's columns, turns n; head dim 64: one, turns 2 n + w), and the
 * CTA of key tile n adds its dQ part only on its turn (its writer waits), then
 * passes it on once the addition has completed; the producer takes the turns of
 * the query tiles this key tile skips. So dQ is summed in key-tile order, and
 * NOSKIP (which adds exact zeros where SKIP adds nothing) gives bit-identical
 * gradients. Items are handed out in increasing order and a CTA waits only for
 * lower items (within a CTA at head dim 64, the second consumer warpgroup's
 * writer also for the first's, which never waits for the second), so the waits
 * end; tests/test_bwd_dq_protocol.c models it.
 *
 * Variants: SKIP and NOSKIP (a MASKED pair element-masked to -inf: P = 0, dS =
 * 0, exact zeros added). INSTR: an observer, lane 0 of producer warp 1, which
 * issues no copy (observer() below), writes every visited pair's class (carried
 * in its ring entry) and the clock64 ticks between the consumers' releases of
 * consecutive ring stages; the skipped pairs keep the MASKED class and 0 cycles
 * the launch wrote beforehand. The producer's copies and walk, the writers and
 * the consumers run the plain code.
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

#include "fm_device.cuh"
#include "fm_hopper.cuh"
#include "fm_kernel_traits.h"
#include "fm_kernels.h"
#include "fm_sm90_bwd_dq.h"
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
/* named barriers: 2, 3 a consumer warpgroup's own (at an item's end, store_dkdv); 4, 5 its tensor-core turn */
enum : int { BAR_WG = 2, BAR_TURN = 4 };

struct params : fmd::attn_base { /* Tr query tiles of BR, Tc key tiles of BC */
  CUtensorMap tm_q, tm_do;   /* (B, Sq, H, D) bf16, boxes 64 x BR */
  CUtensorMap tm_k, tm_v;    /* (B, Sk, H, D) bf16, boxes 64 x BC */
  CUtensorMap tm_dk, tm_dv;  /* (B, Sk, H, D) bf16, boxes 64 x 64 (stores) */
  CUtensorMap tm_dq;         /* (B, Sq, H, D) fp32 accumulator, boxes 32 x BR (reductions) */
  const float *lse2;         /* (B, H, Sq) LSE * log2 e, +inf for rows with no visible key */
  const float *dsum;         /* (B, H, Sq) D = rowsum(dO * O) */
  int32_t *next_item;        /* atomic counter, zero at launch */
  int32_t *sem;              /* deterministic: (B * H * Tr * NCW) counters, zero at launch */
  int32_t nitems, deterministic;
};

template <int HD> struct bars {
  uint64_t *b;
  __device__ uint64_t *kv_full() const { return b; }
  __device__ uint64_t *kv_empty() const { return b + 1; }
  __device__ uint64_t *q_full(int s) const { return b + 2 + s; }
  __device__ uint64_t *q_empty(int s) const { return b + 2 + traits<HD>::STAGES + s; }
  __device__ uint64_t *ds_full(int d) const { return b + 2 + 2 * traits<HD>::STAGES + d; }
  __device__ uint64_t *ds_empty(int d) const { return b + 4 + 2 * traits<HD>::STAGES + d; }
  /* consumer warpgroup w's staging buffer: written (dq_full), read by the copy engine (dq_empty) */
  __device__ uint64_t *dq_full(int w) const { return b + 6 + 2 * traits<HD>::STAGES + w; }
  __device__ uint64_t *dq_empty(int w) const { return b + 6 + 2 * traits<HD>::STAGES + traits<HD>::NCW + w; }
};

using fmd::fast_exp2;
using fmd::pack_bf16;
using fmd::set_of;

/* Deterministic dQ turns: wait until the counter says `turn` (acquire). */
__device__ __forceinline__ void sem_wait(const int32_t *c, int32_t turn) {
  int32_t v;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(c) : "memory");
    if (v == turn) return;
    __nanosleep(64);
  }
}
/* Passes the turn on (release: the reduction this thread waited for is visible first). */
__device__ __forceinline__ void sem_pass(int32_t *c, int32_t next) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(c), "r"(next) : "memory");
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
      item = k < p.nitems ? k : -1; /* items in index order (determinism needs it) */
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
      /* deterministic: the dQ turns of the query tiles this key tile skips */
      if (p.deterministic && !keep) {
        for (int s = 0; s < fmbq_skip_slots(T::DQ_SPLIT_KEYS); s++) {
          int32_t *c = p.sem + fmbq_sem_slot(T::DQ_SPLIT_KEYS, bh, p.Tr, m, s);
          sem_wait(c, fmbq_turn(T::DQ_SPLIT_KEYS, n, s));
          sem_pass(c, fmbq_skip_pass(T::DQ_SPLIT_KEYS, n, s));
        }
      }
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
    if (code >= 0) { /* dQ of query tile `code`: this warpgroup's columns (head dim 64: all) */
      sc = p.sem + fmbq_sem_slot(T::DQ_SPLIT_KEYS, bh, p.Tr, code, w);
      if (p.deterministic) sem_wait(sc, fmbq_turn(T::DQ_SPLIT_KEYS, n, w));
      const int d0 = T::DQ_SPLIT_KEYS ? 0 : w * 64;
      fmh::tma_reduce_add_4d(&p.tm_dq, stage, d0, h, code * T::BR, b);
      fmh::tma_reduce_add_4d(&p.tm_dq, stage + T::BR * 128, d0 + 32, h, code * T::BR, b);
    } else { /* dK or dV of this warpgroup's 64 keys */
#pragma unroll
      for (int d = 0; d < T::DBLK; d++)
        fmh::tma_store_4d(code == FMBQ_JOB_DK ? &p.tm_dk : &p.tm_dv, stage + d * 64 * 128, d * 64, h,
                          n * T::BC + w * 64, b);
    }
    fmh::bulk_commit();
    fmh::bulk_wait_read(); /* the copy engine has read the buffer */
    fmh::mbar_arrive(br.dq_empty(w));
    if (p.deterministic && code >= 0) {
      fmh::bulk_wait_all(); /* the addition is done before the turn passes */
      __threadfence();
      sem_pass(sc, fmbq_turn_after(T::DQ_SPLIT_KEYS, n, w));
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
  __device__ __forceinline__ void load(const int32_t *keys, int c) {
    int32_t *w = ls;
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = keys[i * 256 + c];
  }
};
static_assert(sizeof(key_iv) == 8 * 4 && traits<128>::NCW * 128 == 256 && traits<64>::NCW * 128 == 256,
              "key_iv: 8 words per consumer thread, 256 consumer threads");

/* The consumer in phases (FlashAttention-3's backward, one warpgroup's view):
 * store_keys at the start of an item; per visited query tile issue_s_dp
 * (S^T, dP^T), softmax_ds (mask, P^T, dS^T), issue_dv_dk_dq (dV, dK and the
 * previous tile's dQ, issue_dq), store_ds, then stage_dq of the previous
 * tile (handed to the warpgroup's writer); the item's last dQ; store_dkdv.
 * The phases are inlined into one program whose SASS is that of the consumer
 * written as one function, which holds only while the consumer's frame stays
 * the same: the register arrays (dk, dv, st, dpt, pa, da, dq) and the key
 * intervals (kv) are declared in consumer and passed by reference, ds_iter
 * goes by reference where the one function's lambda captured it, and it_n is
 * declared before q_iter (the order that keeps ptxas's register assignment);
 * kernels/PERF_NOTES.md, "Kernels in phases", has the rules and the check. */

/* One consumer warpgroup's view of shared memory and of the tensor cores'
 * turns, fixed for the kernel. */
template <int HD> struct ctx {
  unsigned char *smem;
  bars<HD> br;
  int cw;                         /* consumer warpgroup 0 or 1 */
  int tid, warp, lane, g, c4;     /* thread 0 .. 127 of the warpgroup, its warp and lane */
  int ctid;                       /* thread 0 .. 255 of both consumer warpgroups */
  const int32_t *sItem, *sMeta;
  const float *sRows;
  int32_t *sKeys;
  uint32_t k_base, v_base;        /* the item's K and V */
  uint32_t kw_base, vw_base;      /* this warpgroup's 64 keys: rows 64 cw .. of each 128-row column block */
  unsigned char *dq_stage;        /* this warpgroup's dQ staging; dK and dV staged here at the item's end */
  int my_turn, other_turn;        /* named barriers: this warpgroup's tensor-core turn, the other's */
  int k0;                         /* dQ: the first key step of this warpgroup */
  uint32_t kb;                    /* dQ: K's column block of this warpgroup */
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

/* The pending dQ GEMM's A operand: the dS^T buffer of the previous query tile
 * or, with none pending, the item's K tile as a stand-in (read, discarded).
 * ds_iter (consumer's count of dS^T tiles) by reference: passed by value, the
 * buffer arithmetic compiles to other instructions. */
template <int HD> __device__ __forceinline__ uint32_t dq_source(const ctx<HD> &c, bool pend, const int &ds_iter) {
  return pend ? fmh::smem_addr(c.smem + traits<HD>::OFF_DS + ((ds_iter - 1) & 1) * traits<HD>::DS_BYTES) : c.k_base;
}

/* Staging buffer hand-off (fm_sm90_bwd_dq.h), this warpgroup's side: before
 * use u (fmbq_use: counted from ds_iter and it_n, no register of its own),
 * every thread waits until the copy engine has read use u - 1 (the writer's
 * dq_empty); after writing its part, it fences its stores for the copy engine
 * (async proxy), thread 0 writes the job word, and every thread arrives on
 * dq_full (each thread that wrote the buffer hands it on itself). No thread
 * waits for the copies or for a deterministic turn. */
template <int HD> __device__ __forceinline__ void take_stage(const ctx<HD> &c, int u) {
  fmh::mbar_wait(c.br.dq_empty(c.cw), fmbq_empty_parity(u));
}
/* (The job word is stored through a shared-window address: through a generic
 * pointer, ptxas spilled 8 to 28 bytes of the head dim 128 consumer, which sits
 * at 230 of its 232 registers.) */
template <int HD> __device__ __forceinline__ void hand_stage(const ctx<HD> &c, int32_t code, int32_t item) {
  fmh::fence_proxy_async();
  if (c.tid == 0)
    fmh::st_shared_v2(fmh::smem_addr(c.smem + traits<HD>::OFF_JOB) + 8 * c.cw, (uint32_t)code, (uint32_t)item);
  fmh::mbar_arrive(c.br.dq_full(c.cw));
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
  unsigned char *const base = c.dq_stage + (warp * 16 + g) * 128 + (c4 & 1) * 8;
  take_stage<HD>(c, u); /* the copy engine has read the previous use */
#pragma unroll
  for (int nb = 0; nb < 8; nb++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      /* this lane's column block in this step: nb, or nb ^ 2 for an odd g */
      const float x0 = odd ? dq[4 * (nb ^ 2) + 2 * hr] : dq[4 * nb + 2 * hr];
      const float x1 = odd ? dq[4 * (nb ^ 2) + 2 * hr + 1] : dq[4 * nb + 2 * hr + 1];
      float2 v = make_float2(x0 * p.scale, x1 * p.scale);
      *reinterpret_cast<float2 *>(base + (nb >> 2) * T::BR * 128 + hr * 8 * 128 + (((2 * (nb & 3)) ^ xr) << 4)) = v;
    }
  hand_stage<HD>(c, mq, item);
}

/* The thread's keys for the item's key tile n: rows 16 warp + g (+ 8) of this
 * warpgroup's 64, as key_iv intervals in shared memory (read back by this
 * thread only). */
template <int HD>
__device__ __forceinline__ void store_keys(const params &p, const ctx<HD> &c, key_iv &kv, int n, int b, int h) {
  using T = traits<HD>;
  const int32_t *gv = p.intervals + (int64_t)set_of(p, b, h) * 4 * p.Sk;
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int j = n * T::BC + c.cw * 64 + c.warp * 16 + c.g + 8 * hr;
    int32_t lts = 0, lte = INT32_MAX, us = 0, ue = 0;
    if (j < p.Sk) {
      lts = __ldg(gv + j);
      lte = __ldg(gv + (int64_t)p.Sk + j);
      fm_effective_upper(__ldg(gv + 2 * (int64_t)p.Sk + j), __ldg(gv + 3 * (int64_t)p.Sk + j), p.causal, j, p.Sq,
                         p.Sk, &us, &ue);
    }
    kv.ls[hr] = lts;
    kv.ll[hr] = max(lte - lts, 0);
    kv.us[hr] = us;
    kv.ul[hr] = max(ue - us, 0);
  }
  kv.store(c.sKeys, c.ctid);
}

/* S^T = K_w Q^T and dP^T = V_w dO^T (64 keys x 64 queries each) in this
 * warpgroup's turn, waited for. */
template <int HD>
__device__ __forceinline__ void issue_s_dp(const ctx<HD> &c, float (&st)[32], float (&dpt)[32], uint32_t q_base,
                                           uint32_t do_base) {
  using T = traits<HD>;
  fmh::named_sync(c.my_turn, 256);
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++)
    fmh::wgmma_ss_n64<0, 0>(st, fmh::desc_kmajor(c.kw_base, T::BC, kk), fmh::desc_kmajor(q_base, T::BR, kk), kk > 0);
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++)
    fmh::wgmma_ss_n64<0, 0>(dpt, fmh::desc_kmajor(c.vw_base, T::BC, kk), fmh::desc_kmajor(do_base, T::BR, kk),
                            kk > 0);
  fmh::wgmma_commit();
  fmh::named_arrive(c.other_turn, 256);
  fmh::wgmma_wait<0>();
  fmh::reg_fence(st);
  fmh::reg_fence(dpt);
}

/* P^T = exp2(S^T scale log2 e - LSE2) and dS^T = P^T (dP^T - D) in place, the
 * element mask on the thread's keys (kv, loaded when the entry needs it) first;
 * stage s holds the query tile m's LSE2 and D. */
template <int HD>
__device__ __forceinline__ void softmax_ds(const params &p, const ctx<HD> &c, float (&st)[32], float (&dpt)[32],
                                           key_iv &kv, int s, int m, int flags) {
  using T = traits<HD>;
  const int c4 = c.c4;
  const float *lse2 = c.sRows + s * 2 * T::BR, *dsum = lse2 + T::BR;
  const int i0 = m * T::BR + 2 * c4;
  if (flags & F_NEEDMASK) kv.load(c.sKeys, c.ctid);
#pragma unroll
  for (int nb = 0; nb < 8; nb++) {
    const float2 l2 = *reinterpret_cast<const float2 *>(lse2 + 8 * nb + 2 * c4);
    const float2 dd = *reinterpret_cast<const float2 *>(dsum + 8 * nb + 2 * c4);
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int idx = 4 * nb + 2 * hr + e;
        float x = st[idx];
        if (flags & F_NEEDMASK) {
          const uint32_t i = (uint32_t)(i0 + 8 * nb + e);
          const bool mk = (i - (uint32_t)kv.ls[hr] < (uint32_t)kv.ll[hr]) ||
                          (i - (uint32_t)kv.us[hr] < (uint32_t)kv.ul[hr]);
          x = mk ? -INFINITY : x;
        }
        const float pv = fast_exp2(fmaf(x, p.scale_log2, -(e ? l2.y : l2.x)));
        st[idx] = pv;
        dpt[idx] = pv * (dpt[idx] - (e ? dd.y : dd.x));
      }
  }
}

/* In this warpgroup's turn: dV += P^T dO, dK += dS^T Q (the queries are the
 * reduction dim; A = P^T, dS^T from registers) and the pending dQ (issue_dq
 * from dq_source), committed and not waited for. */
template <int HD>
__device__ __forceinline__ void issue_dv_dk_dq(const ctx<HD> &c, float (&dv)[HD / 2], float (&dk)[HD / 2],
                                               float (&dq)[32], const uint32_t (&pa)[4][4],
                                               const uint32_t (&da)[4][4], uint32_t q_base, uint32_t do_base,
                                               bool pend, const int &ds_iter) {
  using T = traits<HD>;
  fmh::named_sync(c.my_turn, 256);
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; kk++) fmh::pv_mma<HD>::run(dv, pa[kk], fmh::desc_mnmajor(do_base, T::BR, kk));
#pragma unroll
  for (int kk = 0; kk < 4; kk++) fmh::pv_mma<HD>::run(dk, da[kk], fmh::desc_mnmajor(q_base, T::BR, kk));
  fmh::wgmma_commit();
  fmh::wgmma_fence();
  issue_dq<HD>(c, dq, dq_source<HD>(c, pend, ds_iter));
  fmh::wgmma_commit();
  fmh::named_arrive(c.other_turn, 256);
}

/* dS^T (bf16) of this query tile to buffer db, SW128: (128 keys, 64 queries),
 * while the GEMMs run (written before the turn instead, it leaves ptxas too few
 * registers: it serializes the wgmma, C7512); then ds_full. */
template <int HD>
__device__ __forceinline__ void store_ds(const ctx<HD> &c, const uint32_t (&da)[4][4], int db) {
  using T = traits<HD>;
  unsigned char *ds = c.smem + T::OFF_DS + db * T::DS_BYTES;
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const int key = c.cw * 64 + c.warp * 16 + c.g + 8 * (r & 1), q = 16 * kk + 8 * (r >> 1) + 2 * c.c4;
      *reinterpret_cast<uint32_t *>(ds + key * 128 + (((q >> 3) ^ (key & 7)) << 4) + (q & 7) * 2) = da[kk][r];
    }
  fmh::fence_proxy_async();
  fmh::mbar_arrive(c.br.ds_full(db)); /* every thread: its part of dS^T is written */
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
        *reinterpret_cast<uint32_t *>(c.dq_stage + blk * 64 * 128 + row * 128 + ((chunk ^ (row & 7)) << 4) +
                                      (col & 7) * 2) =
            pack_bf16(acc[4 * nb + 2 * hr] * f, acc[4 * nb + 2 * hr + 1] * f);
      }
    hand_stage<HD>(c, which ? FMBQ_JOB_DV : FMBQ_JOB_DK, item);
  }
  fmh::named_sync(BAR_WG + c.cw, 128); /* every thread's dV stores are before the next dQ stores */
}

/* The consumer warpgroups: items until the producer announces none; per item
 * its visited query tiles (issue_s_dp, softmax_ds, issue_dv_dk_dq, store_ds,
 * stage_dq of the previous tile), the last dQ, then store_dkdv; at the end the
 * writer's END job. */
template <int HD, int VAR, bool INSTR>
__device__ __forceinline__ void consumer(const params &p, unsigned char *smem, bars<HD> br, int cw) {
  using T = traits<HD>;
  ctx<HD> c;
  c.smem = smem;
  c.br = br;
  c.cw = cw;
  c.tid = threadIdx.x - 128 * (cw + 1);
  c.warp = c.tid >> 5, c.lane = c.tid & 31, c.g = c.lane >> 2, c.c4 = c.lane & 3;
  c.sItem = reinterpret_cast<const int32_t *>(smem + T::OFF_ITEM);
  c.sMeta = reinterpret_cast<const int32_t *>(smem + T::OFF_META);
  c.sRows = reinterpret_cast<const float *>(smem + T::OFF_ROWS);
  c.sKeys = reinterpret_cast<int32_t *>(smem + T::OFF_KEYS);
  c.ctid = threadIdx.x - 128;
  c.k_base = fmh::smem_addr(smem + T::OFF_K), c.v_base = fmh::smem_addr(smem + T::OFF_V);
  c.kw_base = c.k_base + cw * 64 * 128, c.vw_base = c.v_base + cw * 64 * 128;
  c.dq_stage = smem + T::OFF_DQ + cw * T::DQ_BYTES;
  c.my_turn = BAR_TURN + cw, c.other_turn = BAR_TURN + (cw ^ 1);
  c.k0 = T::DQ_SPLIT_KEYS ? cw * T::DQ_KSTEPS : 0;
  c.kb = c.k_base + (T::DQ_SPLIT_KEYS ? 0 : cw) * T::BC * 128;
  /* the tensor cores' turns go round, warpgroup 0 first: its predecessor hands it the first */
  if (cw == T::NCW - 1) fmh::named_arrive(BAR_TURN + 0, 256);
  int ds_iter = 0; /* dS^T tiles written so far: buffer ds_iter & 1, phase (ds_iter >> 1) & 1 */
  for (int it_n = 0, q_iter = 0;; it_n++) { /* q_iter: ring position over all items */
    fmh::mbar_wait(br.kv_full(), it_n & 1);
    const int32_t item = __shfl_sync(0xffffffffu, *c.sItem, 0);
    if (item < 0) { /* the writer's END job, once its last copy has read the buffer */
      take_stage<HD>(c, fmbq_use(ds_iter, it_n));
      hand_stage<HD>(c, FMBQ_JOB_END, -1);
      break;
    }
    const int n = item % p.Tc, bh = item / p.Tc, b = bh / p.H, h = bh % p.H;
    {
      key_iv kv;
      store_keys<HD>(p, c, kv, n, b, h);
    }
    float dk[HD / 2], dv[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk[i] = dv[i] = 0.f;

    /* The visited query tiles; each adds, in its tensor-core turn, the dQ of the one
       before it (its dS^T in buffer (ds_iter - 1) & 1). An item's first tile has none
       pending: its dQ GEMM reads the item's K tile (in place, stable) as a stand-in for
       dS^T and is discarded, so that every wgmma is issued unconditionally (under a
       branch, ptxas serializes them); the same for the last dQ of an empty item. */
    int prev_m = -1; /* the query tile whose dQ is pending; -1: none */
    for (;;) {
      const int s = q_iter % T::STAGES;
      const uint32_t ph = (q_iter / T::STAGES) & 1;
      fmh::mbar_wait(br.q_full(s), ph);
      const int32_t entry = __shfl_sync(0xffffffffu, c.sMeta[s], 0);
      const int m = entry & TILE_MASK, flags = entry >> FLAG_SHIFT;
      q_iter++;
      if (flags & F_EMPTY) {
        fmh::mbar_arrive(br.q_empty(s)); /* every thread: it read the entry */
        break;
      }
      const uint32_t q_base = fmh::smem_addr(smem + T::OFF_Q + s * T::QT_BYTES);
      const uint32_t do_base = fmh::smem_addr(smem + T::OFF_DO + s * T::QT_BYTES);
      /* the dS^T buffer this tile writes (below) is free once both warpgroups' dQ GEMMs
         have read what it held (waited for unconditionally: a fresh barrier passes
         parity 1 at once, so the first two pass) */
      fmh::mbar_wait(br.ds_empty(ds_iter & 1), ((ds_iter >> 1) & 1) ^ 1);
      float st[32], dpt[32];
      issue_s_dp<HD>(c, st, dpt, q_base, do_base);
      key_iv kv; /* the thread's keys, loaded by softmax_ds when the entry masks */
      softmax_ds<HD>(p, c, st, dpt, kv, s, m, flags);
      uint32_t pa[4][4], da[4][4]; /* P^T and dS^T as bf16 A fragments */
#pragma unroll
      for (int kk = 0; kk < 4; kk++) {
        fmd::pack_frag(st + 8 * kk, pa[kk]);
        fmd::pack_frag(dpt + 8 * kk, da[kk]);
      }
      /* the pending dQ waits until both halves of its dS^T are written (with none
         pending, a completed phase: no wait) */
      const bool pend = prev_m >= 0;
      const int db = ds_iter & 1, pb = db ^ 1; /* this tile's dS^T buffer; the pending one's */
      fmh::mbar_wait(br.ds_full(pb), ((ds_iter - 1) >> 1) & 1);
      float dq[32];
      issue_dv_dk_dq<HD>(c, dv, dk, dq, pa, da, q_base, do_base, pend, ds_iter);
      store_ds<HD>(c, da, db);
      fmh::wgmma_wait<0>();
      fmh::reg_fence(dq);
      fmh::reg_fence(dk);
      fmh::reg_fence(dv);
      fmh::reg_fence(pa);
      fmh::reg_fence(da);
      fmh::mbar_arrive(br.q_empty(s)); /* every thread: Q, dO, the entry and the rows are free */
      if (pend) {
        fmh::mbar_arrive(br.ds_empty(pb)); /* every thread: its dQ GEMM has read the buffer */
        stage_dq<HD>(p, c, dq, prev_m, item, fmbq_use(ds_iter - 1, it_n));
      }
      prev_m = m;
      ds_iter++;
      if (flags & F_LAST) break;
    }
    /* ---- the item's last dQ (K is still in place) */
    {
      const bool pend = prev_m >= 0;
      fmh::mbar_wait(br.ds_full((ds_iter - 1) & 1), ((ds_iter - 1) >> 1) & 1);
      float dq[32];
      fmh::wgmma_fence();
      issue_dq<HD>(c, dq, dq_source<HD>(c, pend, ds_iter));
      fmh::wgmma_commit();
      fmh::wgmma_wait<0>();
      fmh::reg_fence(dq);
      if (pend) {
        fmh::mbar_arrive(br.ds_empty((ds_iter - 1) & 1));
        stage_dq<HD>(p, c, dq, prev_m, item, fmbq_use(ds_iter - 1, it_n));
      }
    }
    /* ---- end of the item: K and V are no longer read */
    fmh::mbar_arrive(br.kv_empty()); /* every thread: it read the item number */
    store_dkdv<HD>(p, c, dk, dv, item, fmbq_use(ds_iter, it_n));
  }
}

template <int HD, int VAR, bool INSTR>
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
      fmh::mbar_init(br.ds_full(d), T::NCW * 128);  /* every consumer thread: its dS^T part */
      fmh::mbar_init(br.ds_empty(d), T::NCW * 128); /* every consumer thread: its dQ GEMM read it */
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
    consumer<HD, VAR, INSTR>(p, smem, br, wg - 1);
  }
}

}  // namespace fm90b

#endif
