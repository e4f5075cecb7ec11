/* fm_sm90_fwd.cuh — the Hopper FlashMask forward kernel (sm_90a; private).
 *
 * FlashAttention-3's forward (warp specialization, TMA, wgmma, softmax
 * overlapped with the tensor cores) extended with FlashMask tile skipping
 * (the paper's Algorithm 1). One CTA = 3 warpgroups (384 threads):
 *
 *   producer   warpgroup 0, 40 registers a thread (32 at head dim 64; setmaxnreg),
 *              working: it takes the next work item (batch, head, row tile)
 *              from a list sorted heaviest first (atomic counter: a CTA that
 *              finishes early takes the next), loads Q by TMA, classifies every
 *              key tile of the row tile from its 8 bounds (fm_classify_minmax,
 *              32 tiles per step, ballot-compacted), and for each tile that is
 *              not MASKED writes its entry (tile, flags) and, when it needs the
 *              element mask, its column vectors into the stage's slot of a
 *              shared-memory ring, then loads K and V by TMA into the stage.
 *              Fully masked tiles cost no load and no math.
 *   consumers  warpgroups 1 and 2 (and 3 at head dim 64, FA3's choice), 232
 *              registers a thread (160 with three); warpgroup c owns
 *              query rows 64 c .. 64 c + 63 of the row tile. Per tile:
 *                S = Q K^T          wgmma m64n128k16, Q and K from shared memory
 *                mask               only for tiles flagged NEEDMASK (PARTIAL, the
 *                                   last key tile cut by Sk, every tile of NOSKIP's
 *                                   MASKED ones, DENSE); UNMASKED tiles do none
 *                online softmax     fp32, exp2 with the scale folded in
 *                O += P V           wgmma with P from registers (bf16) and V from
 *                                   shared memory, MN-major
 *              With OVERLAP (FA3's intra-warpgroup pipelining) the S GEMM of
 *              tile n and the P V GEMM of tile n - 1 are in flight together and
 *              the softmax of tile n waits only for its S. With PINGPONG the two consumer warpgroups take
 *              turns issuing their GEMMs (named barriers), so that one's softmax
 *              runs while the other's GEMMs occupy the tensor cores.
 *   epilogue   O / l staged in the item's own Q buffer (dead once its S GEMMs
 *              are done; SW128 atoms) and stored by TMA (rows past Sq clipped by
 *              the copy engine), LSE by the threads.
 *
 * Pipelines (mbarriers, fm_hopper.cuh): two Q buffers, full/empty each (the
 * producer loads the next item's Q while the current one runs; a buffer is
 * free again once both consumer warpgroups' O stores have read it), and per
 * stage K full/empty and V full/empty. The tile entry and its mask slices
 * travel with K (written before the K-full arrive, released after the mask).
 * The hand-off rule: an mbarrier arrive releases only the arriving thread's
 * own shared-memory accesses (PTX memory model; compute-sanitizer's racecheck
 * checks exactly that), so every thread that writes or reads data in shared
 * memory with ordinary loads and stores (the item number, the tile entry, the
 * mask slices, the O staging) arrives itself on the barrier that hands the
 * data on: K full counts the 128 producer threads, K empty and Q empty every
 * consumer thread. Tiles that only the copy engine and wgmma touch (Q, K, V)
 * are handed on by one arrival: V empty counts one lane per consumer warp.
 *
 * Variants (VAR) and instrumentation (INSTR) as the sm80 kernel
 * (fm_sm80_fwd.cuh): NOSKIP visits every tile (MASKED ones element-masked to
 * -inf, which changes nothing: the row max does not move, the rescale factor
 * is exactly 1, P is exactly 0), so its output is bit-identical to SKIP; DENSE
 * reads an (Sq, Sk) uint8 mask per element and no bounds. INSTR: the producer
 * writes every tile's class (0 cycles for skipped tiles) and, per visited tile,
 * the clock64 cycles between the consumers' release of its V stage and that of
 * the tile before it on the same SM (the first: since the CTA started); the
 * consumers run the plain code. MASK (FM_SM90_MASK_*, fm_attn_dev.h): how a
 * consumer thread turns the producer's bit slices into its elements' selects
 * (kernels/fm_sm90_mask.h): SLICES a bit test per element, R2P (the default)
 * per-thread words applied with R2P, WORDS (forward only) R2P's
 * words precomputed per tile by words_kernel, copied into the K stage with K
 * (no slices built) and read from shared memory; the output is the same bit
 * for bit.
 *
 * Rows with no visible key: max stays -inf, P = 0, l = 0: O = 0, LSE = -inf.
 * Design notes and measurements: kernels/PERF_NOTES.md.
 */
#ifndef FM_SM90_FWD_CUH
#define FM_SM90_FWD_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fm_attn_dev.h"
#include "fm_device.cuh"
#include "fm_hopper.cuh"
#include "fm_kernel_traits.h"
#include "fm_kernels.h"
#include "fm_sm90_mask.h"
#include "fm_tile_rule.h"

namespace fm90 {

/* The tile configuration (core/fm_kernel_traits.h is the source of truth). */
template <int HD> struct traits {
  /* head dim 64: three consumer warpgroups (FA3's choice): its softmax costs as
     much as its GEMMs, so two warpgroups' softmax must hide behind one's GEMMs */
  static constexpr int NCW = HD == 64 ? 3 : 2;  /* consumer warpgroups, 64 rows each */
  static constexpr int BR = 64 * NCW;            /* query rows per work item */
  static constexpr int BC = 128;                 /* key columns per tile */
  static constexpr int REG_PRODUCER = NCW == 3 ? 32 : 40;  /* setmaxnreg budgets: */
  static constexpr int REG_CONSUMER = NCW == 3 ? 160 : 232; /* 128 p + 128 NCW c <= 65536 */
  static constexpr int THREADS = 128 * (NCW + 1);
  static constexpr int DBLK = HD / 64;           /* 64-column blocks of the head dim */
  static constexpr int STAGES = HD == 128 ? 2 : 4;
  static constexpr int Q_BYTES = BR * HD * 2;   /* one Q buffer; the item's O is staged in it */
  static constexpr int KV_BYTES = BC * HD * 2;   /* one K or one V tile */
  static constexpr int MASK_WARPS = NCW * 4;     /* consumer warps, 16 query rows each */
  static constexpr int VEC_BYTES = MASK_WARPS * BC * 2; /* mask slices: (warp, column) uint16 of 16 rows */
  /* shared-memory offsets from the 1024-aligned base */
  static constexpr int OFF_Q = 0;                /* two Q buffers: item k uses buffer k % 2 */
  static constexpr int OFF_K = OFF_Q + 2 * Q_BYTES;
  static constexpr int OFF_V = OFF_K + STAGES * KV_BYTES;
  static constexpr int OFF_VEC = OFF_V + STAGES * KV_BYTES; /* the mask slices of each stage */
  static constexpr int OFF_META = OFF_VEC + STAGES * VEC_BYTES;
  static constexpr int OFF_BAR = OFF_META + 16 * STAGES;
  static constexpr int NBARS = 4 + 4 * STAGES;
  static constexpr int OFF_ITEM = OFF_BAR + 8 * NBARS; /* two slots, one per Q buffer */
  static constexpr int OFF_CLOCK = OFF_ITEM + 16;      /* INSTR: fmh::stage_clock's words */
  static constexpr int SMEM = OFF_CLOCK + fmh::stage_clock<STAGES>::BYTES + 1024; /* + alignment slack */
  /* MASK WORDS only: each stage's words buffer (a tile's precomputed words,
     copied with K), after everything else, so that the other methods' layout
     and SMEM stay as they are; OFF_VEC is unused there */
  static constexpr int WORDS_BYTES = FM90M_R2P_GROUPS * 4 * 128 * NCW; /* fm90m_words_tile_bytes */
  static constexpr int OFF_WORDS = (OFF_CLOCK + fmh::stage_clock<STAGES>::BYTES + 127) / 128 * 128;
  static constexpr int SMEM_WORDS = OFF_WORDS + STAGES * WORDS_BYTES + 1024;
};
static_assert(traits<128>::BR == FM_SM90_BR_HD128 && traits<128>::BC == FM_SM90_BC_HD128,
              "core/fm_kernel_traits.h must match the sm90 kernel (head dim 128)");
static_assert(traits<64>::BR == FM_SM90_BR_HD64 && traits<64>::BC == FM_SM90_BC_HD64,
              "core/fm_kernel_traits.h must match the sm90 kernel (head dim 64)");
static_assert(traits<128>::SMEM <= 227 * 1024 && traits<64>::SMEM <= 227 * 1024,
              "one CTA per SM: at most 227 KiB of shared memory");
static_assert(traits<128>::SMEM_WORDS <= 227 * 1024 && traits<64>::SMEM_WORDS <= 227 * 1024,
              "MASK WORDS: one CTA per SM with the words buffers");
static_assert(traits<128>::WORDS_BYTES % 16 == 0 && traits<64>::WORDS_BYTES % 16 == 0 &&
                  traits<128>::OFF_WORDS % 16 == 0 && traits<64>::OFF_WORDS % 16 == 0,
              "MASK WORDS: the bulk copy's size and destination are multiples of 16 bytes");
static_assert(128 * (traits<64>::REG_PRODUCER + traits<64>::NCW * traits<64>::REG_CONSUMER) <= 65536 &&
                  128 * (traits<128>::REG_PRODUCER + traits<128>::NCW * traits<128>::REG_CONSUMER) <= 65536,
              "register budgets must fit the register file");
static_assert(sizeof(fm_tile_bounds) == 32, "the bounds are read as two int4");
static_assert(traits<128>::BC == FM90M_BC && traits<64>::BC == FM90M_BC,
              "kernels/fm_sm90_mask.h lays out 128-column tiles");
/* resident CTAs per SM: the kernel's __launch_bounds__ minimum, the registry's schedule */
constexpr int CTAS_PER_SM = 1;
static_assert(CTAS_PER_SM == FM_SM90_CTAS_PER_SM,
              "core/fm_kernel_traits.h must match the sm90 kernel's launch bounds");

/* Named barriers (0 is __syncthreads): 1..3 the consumer warpgroups' GEMM
 * turns (PINGPONG, round robin), 4..6 their epilogues, 7 the producer warps. */
enum : int { BAR_TURN = 1, BAR_EPILOGUE = 4, BAR_PRODUCER = 7 };

/* Flags of a ring entry (packed with the tile index: tile | flags << FLAG_SHIFT). */
enum : int32_t {
  FLAG_SHIFT = 24,            /* tile index < 2^24 (Sk < 2^31 at 128 columns a tile) */
  F_NEEDMASK = 1 << 0,        /* apply the element mask (vectors or dense bytes) */
  F_LAST = 1 << 1,            /* the row tile's last visited tile */
  F_EMPTY = 1 << 2,           /* no tile at all: the row tile is fully masked */
  TILE_MASK = (1 << FLAG_SHIFT) - 1
};
__host__ __device__ constexpr int32_t entry_pack(int32_t tile, int32_t flags) {
  return tile | (flags << FLAG_SHIFT);
}

struct params : fmd::attn_base {
  CUtensorMap tm_q, tm_k, tm_v, tm_o; /* (B, S, H, D) bf16, boxes of 64 x rows */
  float *lse;                         /* (B, H, Sq) fp32 */
  const int32_t *items;               /* (nitems,) bh * Tr + rt, heaviest first */
  int32_t *next_item;                 /* atomic counter, zero at launch */
  int32_t nitems;
  const uint32_t *words;              /* MASK WORDS: the R2P words of the forward's masked tiles
                                         (fm90m_words_index; words_kernel); NULL otherwise */
};

using fmd::fast_exp2;
using fmd::pack_bf16;
using fmd::set_of;

/* Barriers, in shared memory after the buffers. */
template <int HD> struct bars {
  uint64_t *b;
  __device__ uint64_t *q_full(int qb) const { return b + qb; }
  __device__ uint64_t *q_empty(int qb) const { return b + 2 + qb; }
  __device__ uint64_t *k_full(int s) const { return b + 4 + s; }
  __device__ uint64_t *k_empty(int s) const { return b + 4 + traits<HD>::STAGES + s; }
  __device__ uint64_t *v_full(int s) const { return b + 4 + 2 * traits<HD>::STAGES + s; }
  __device__ uint64_t *v_empty(int s) const { return b + 4 + 3 * traits<HD>::STAGES + s; }
};
/* Arrivals per phase (the hand-off rule above): V empty one per consumer warp
 * (its lane 0 after __syncwarp); K empty and Q empty every consumer thread; K
 * full every producer thread (one of them with the K bytes); Q full and V full
 * the one producer thread that writes the item number and issues the copy. */
template <int HD> __host__ __device__ constexpr int v_empty_count() { return traits<HD>::NCW * 4; }
template <int HD> __host__ __device__ constexpr int consumer_threads() { return traits<HD>::NCW * 128; }
constexpr int PRODUCER_THREADS = 128;


/* ------------------------------------------------------------------ producer */

/* The intervals of key column j as the slices use them (gv: the set's
 * (4, Sk) vectors): the lower [*lts, *lte), the effective upper [*us, *ue)
 * with the causal triangle folded in; a column past Sk hides every row. The
 * producer and words_kernel both call it (each then fm90m_row_slice per
 * consumer warp), so WORDS gathers the bits R2P reads. */
__device__ __forceinline__ void column_intervals(const fmd::attn_base &p, const int32_t *gv, int32_t j,
                                                 int32_t *lts, int32_t *lte, int32_t *us, int32_t *ue) {
  *lts = 0, *lte = INT32_MAX, *us = 0, *ue = 0;
  if (j < p.Sk) {
    *lts = __ldg(gv + j);
    *lte = __ldg(gv + (int64_t)p.Sk + j);
    fm_effective_upper(__ldg(gv + 2 * (int64_t)p.Sk + j), __ldg(gv + 3 * (int64_t)p.Sk + j), p.causal, j, p.Sq,
                       p.Sk, us, ue);
  }
}

/* The producer warpgroup: all four warps walk the same items and tiles (each
 * classifies every key tile of the item itself, from the same bounds: no
 * communication but the item number). Warp 0 takes the items, loads Q, K and V
 * by TMA and writes the ring entries; for a tile that needs the element mask,
 * warp w expands columns 32 w .. 32 w + 31 of its intervals into one 16-row
 * bit slice per consumer warp (fm_sm90 "mask slices": (8, BC) uint16, bit r of
 * slice [cw][j] = row 16 cw + r of the row tile, column j of the tile, masked;
 * the same layout for every MASK method but WORDS). Every warp
 * arrives on the stage's K-full barrier once its slices are written (warp 0's
 * arrival carries the K bytes). WORDS builds no slices: warp 0 copies the
 * tile's precomputed words (words_kernel) into the stage's words buffer with
 * one bulk copy completing on K full beside K (load_k). */
template <int HD, int VAR, bool INSTR, int MASK>
__device__ __forceinline__ void producer(const params &p, unsigned char *smem, bars<HD> br) {
  using T = traits<HD>;
  const int lane = threadIdx.x & 31, pw = threadIdx.x >> 5; /* producer warp 0..3 */
  const int32_t *sItem = reinterpret_cast<int32_t *>(smem + T::OFF_ITEM); /* [2] */
  int32_t *sMeta = reinterpret_cast<int32_t *>(smem + T::OFF_META);
  uint16_t *sMask = reinterpret_cast<uint16_t *>(smem + T::OFF_VEC);
  int kv_iter = 0; /* ring position: stage kv_iter % STAGES, phase (kv_iter / STAGES) & 1 */
  /* INSTR: per-tile cycles between releases of V stages, observed by warp 3's
     lane 0 (OBSERVER); the tile classes written by warp 2; warp 0, which issues
     the copies, runs the plain code */
  constexpr int OBSERVER = 3, CLASS_WRITER = 2;
  fmh::stage_clock<T::STAGES> clk{smem + T::OFF_CLOCK, p.tile_cycles};
  if (INSTR && pw == OBSERVER && lane == 0) clk.start();
  if (pw == 0 && lane == 0) {
    fmh::tma_prefetch_map(&p.tm_q);
    fmh::tma_prefetch_map(&p.tm_k);
    fmh::tma_prefetch_map(&p.tm_v);
  }
  for (int q_iter = 0;; q_iter++) {
    /* ---- the next item, announced with its Q (buffer q_iter % 2, free once the
       item two back has stored its O from it) */
    const int qb = q_iter & 1;
    if (pw == 0 && lane == 0) {
      if (q_iter >= 2) fmh::mbar_wait(br.q_empty(qb), ((q_iter >> 1) - 1) & 1);
      const int32_t k = atomicAdd(p.next_item, 1);
      const int32_t it = k < p.nitems ? p.items[k] : -1;
      const_cast<int32_t *>(sItem)[qb] = it;
      if (it >= 0) {
        const int rt = it % p.Tr, bh = it / p.Tr, b = bh / p.H, h = bh % p.H;
        fmh::mbar_arrive_expect_tx(br.q_full(qb), T::Q_BYTES);
        fmh::tma_load_rows(smem + T::OFF_Q + qb * T::Q_BYTES, &p.tm_q, br.q_full(qb), T::DBLK, T::BR, h,
                           rt * T::BR, b);
      } else {
        fmh::mbar_arrive(br.q_full(qb)); /* no more work: the consumers read -1 and leave */
      }
    }
    fmh::named_sync(BAR_PRODUCER, 128); /* the item number is in sItem[qb] */
    const int32_t item = __shfl_sync(0xffffffffu, sItem[qb], 0);
    if (item < 0) {
      if (INSTR && pw == OBSERVER && lane == 0) /* the last tiles' releases */
        clk.drain(kv_iter, [&](int s) { return br.v_empty(s); });
      return;
    }
    const int rt = item % p.Tr, bh = item / p.Tr, b = bh / p.H, h = bh % p.H;
    const int set = set_of(p, b, h);
    const int r0 = rt * T::BR, r1 = min(r0 + T::BR, p.Sq);
    const int64_t instr_base = ((int64_t)bh * p.Tr + rt) * (int64_t)p.Tc;
    const int32_t *gv = VAR != FM_VARIANT_DENSE ? p.intervals + (int64_t)set * 4 * p.Sk : nullptr;

    /* A K or V tile of the entry into its stage on `full` (an empty entry only
       arrives); extra: bytes of a further copy on the same barrier (load_k's words). */
    auto load_kv = [&](uint64_t *full, const CUtensorMap *map, unsigned char *dst, int32_t flags, int hh,
                       int j, int bb, uint32_t extra = 0) {
      if (flags & F_EMPTY) {
        fmh::mbar_arrive(full);
        return;
      }
      fmh::mbar_arrive_expect_tx(full, T::KV_BYTES + extra);
      fmh::tma_load_rows(dst, map, full, T::DBLK, T::BC, hh, j, bb);
    };
    /* K of the entry into stage s; WORDS: with a masked tile's words, one bulk
       copy more on the same barrier (its bytes in the same expect_tx). */
    auto load_k = [&](int s, int32_t tile, int32_t flags) {
      uint64_t *full = br.k_full(s);
      const bool words = MASK == FM_SM90_MASK_WORDS && (flags & (F_NEEDMASK | F_EMPTY)) == F_NEEDMASK;
      load_kv(full, &p.tm_k, smem + T::OFF_K + s * T::KV_BYTES, flags, h, tile * T::BC, b,
              words ? (uint32_t)T::WORDS_BYTES : 0u);
      if constexpr (MASK == FM_SM90_MASK_WORDS) {
        if (words) {
          constexpr int CT = consumer_threads<HD>();
          fmh::bulk_load(smem + T::OFF_WORDS + s * T::WORDS_BYTES,
                         p.words + fm90m_words_index(fm90m_words_tile(set, rt, tile, p.Tr, p.Tc), 0, 0, CT),
                         T::WORDS_BYTES, full);
        }
      }
    };
    /* Issues one ring entry: wait for the stage, mask slices, entry, K and V. */
    auto issue = [&](int32_t tile, int32_t flags) {
      const int s = kv_iter % T::STAGES;
      const uint32_t ph = (kv_iter / T::STAGES) & 1;
      if (kv_iter >= T::STAGES) fmh::mbar_wait(br.k_empty(s), ph ^ 1);
      const int j0 = tile * T::BC;
      if (VAR != FM_VARIANT_DENSE && MASK != FM_SM90_MASK_WORDS && (flags & F_NEEDMASK)) {
#pragma unroll
        for (int cb = 0; cb < T::BC / 128; cb++) {
          const int c = cb * 128 + pw * 32 + lane, j = j0 + c;
          int32_t lts, lte, us, ue;
          column_intervals(p, gv, j, &lts, &lte, &us, &ue);
#pragma unroll
          for (int w = 0; w < T::MASK_WARPS; w++)
            sMask[(s * T::MASK_WARPS + w) * T::BC + c] = (uint16_t)fm90m_row_slice(r0 + 16 * w, lts, lte, us, ue);
        }
      }
      /* INSTR: the observer waits for the release that this entry's V copy waits
         for, and notes the clock. No phase of v_empty(s) can pass it unseen: the
         next one (this entry's release) needs the consumers' P V of this entry,
         which they issue only after the next entry's K-full (the observer's next
         arrival, made after this wait), except for an item's last entry, whose
         P V follows no K-full: there the observer waits before its own arrival
         (one wait on the consumers' path per item, none per tile) */
      const bool observe = INSTR && pw == OBSERVER && lane == 0;
      auto observe_release = [&]() {
        if (kv_iter >= T::STAGES) fmh::mbar_wait(br.v_empty(s), ph ^ 1);
        clk.note(kv_iter, (flags & F_EMPTY) ? -1 : instr_base + tile, clock64());
        clk.flush(kv_iter);
      };
      if (pw == 0 && lane == 0) {
        sMeta[s] = entry_pack(tile, flags);
        load_k(s, tile, flags);
        if (kv_iter >= T::STAGES) fmh::mbar_wait(br.v_empty(s), ph ^ 1);
        load_kv(br.v_full(s), &p.tm_v, smem + T::OFF_V + s * T::KV_BYTES, flags, h, j0, b);
      } else { /* this thread's slice columns are written; the observer's arrival
                  comes after its wait at an item's last entry, before it elsewhere */
        const bool wait_first = observe && (flags & F_LAST);
        if (!wait_first) fmh::mbar_arrive(br.k_full(s));
        if (observe) observe_release();
        if (wait_first) fmh::mbar_arrive(br.k_full(s));
      }
      __syncwarp();
      kv_iter++;
    };

    /* ---- classify the key tiles, 32 a step, and issue the visited ones in order,
       the last with F_LAST (fmd::warp_compact) */
    auto decide = [&](int t, int32_t *fl) {
      int cls = FM_TILE_PARTIAL;
      bool keep = true;
      if (VAR != FM_VARIANT_DENSE) {
        const fm_tile_bounds tb = fmd::load_bounds(p.bounds + (int64_t)set * p.Tc + t);
        cls = fm_classify_minmax(&tb, r0, r1);
        keep = VAR == FM_VARIANT_NOSKIP || cls != FM_TILE_MASKED;
      }
      if (INSTR && pw == CLASS_WRITER) {
        p.tile_class[instr_base + t] = (uint8_t)cls;
        if (!keep) p.tile_cycles[instr_base + t] = 0;
      }
      const bool cut = (t + 1) * T::BC > p.Sk; /* columns past Sk in this tile */
      *fl = (VAR == FM_VARIANT_DENSE || cls != FM_TILE_UNMASKED || cut) ? F_NEEDMASK : 0;
      return keep;
    };
    fmd::warp_compact(p.Tc, decide, [&](int32_t t, int32_t fl, bool last) {
      if (t >= 0) issue(t, fl | (last ? F_LAST : 0));
      else issue(0, F_EMPTY | F_LAST);
    });
  }
}

/* ----------------------------------------------------------------- consumers */

/* Element mask of one S tile from the producer's bit slices: `slices` points
 * at this warp's (BC,) uint16 row slices; the thread's rows are bits g and
 * g + 8 (g = lane / 4), its columns 8 n + 2 c4 + e. One 32-bit load covers
 * the thread's two columns of an n8 block; a set bit gives -inf. */
template <int NB>
__device__ __forceinline__ void mask_slices(float (&s)[NB * 4], const uint16_t *slices, int g, int c4) {
  const uint32_t *w32 = reinterpret_cast<const uint32_t *>(slices);
#pragma unroll
  for (int n = 0; n < NB; n++) {
    /* bit 0: (row g, column e = 0), 8: (g + 8, 0), 16: (g, 1), 24: (g + 8, 1) */
    const uint32_t x = w32[fm90m_slices_word(n, c4)] >> g;
    s[n * 4 + 0] = (x & (1u << fm90m_slices_bit(0, 0))) ? -INFINITY : s[n * 4 + 0];
    s[n * 4 + 1] = (x & (1u << fm90m_slices_bit(1, 0))) ? -INFINITY : s[n * 4 + 1];
    s[n * 4 + 2] = (x & (1u << fm90m_slices_bit(0, 1))) ? -INFINITY : s[n * 4 + 2];
    s[n * 4 + 3] = (x & (1u << fm90m_slices_bit(1, 1))) ? -INFINITY : s[n * 4 + 3];
  }
}

/* The apply of the R2P method: the three words' bits (fm90m_r2p_bit), a byte
 * at a time, give -inf (one R2P per byte, one FSEL per element). */
__device__ __forceinline__ void apply_r2p(float (&s)[64], const uint32_t (&acc)[FM90M_R2P_GROUPS]) {
#pragma unroll
  for (int j = 0; j < FM90M_R2P_GROUPS; j++)
#pragma unroll
    for (int b = 0; b < 4; b++) /* byte 2 e + hr */
#pragma unroll
      for (int k = 0; k < fm90m_r2p_len(j); k++) {
        const int n = fm90m_r2p_first(j) + k, e = b >> 1, hr = b & 1, idx = 4 * n + 2 * hr + e;
        s[idx] = (acc[j] & (1u << fm90m_r2p_bit(n, e, hr))) ? -INFINITY : s[idx];
      }
}

/* The element mask of one S tile by the R2P method (fm_sm90_mask.h): the
 * producer's slices exactly as mask_slices reads them (`slices`: this warp's
 * 128 uint16, the same generic pointer), the thread's 16 words 4 n + c4
 * loaded one by one, gathered into three words whose bytes hold 6 (6, 4)
 * predicate bits each (r2p_thread_words; WORDS's preprocessing runs the same),
 * applied a byte at a time (apply_r2p; WORDS applies its copied words with
 * it, mask_words): the tests of one byte's bits stand together, so that
 * ptxas sets their predicates with one R2P and the element needs one FSEL.
 *
 * Why the loads look like this (PERF_NOTES, "R2P: the unmasked tiles"): the
 * first build (a permuted layout, four ld.shared.v4 in volatile inline asm,
 * the producer's STS.U16) made ptxas compile the rest of the kernel
 * differently from SLICES, the unmasked tiles' path included (the S GEMM's
 * issue at the loop top, other registers), and unmasked tiles measured about
 * 1% dearer on an H100. Any inline asm load moved the loop top's schedule;
 * plain 128-bit generic loads kept it but moved the registers (their
 * destinations are aligned quads: the loop's entry went from R12 to R188).
 * Plain 32-bit generic loads of the SLICES layout leave everything outside
 * this block as SLICES compiles it. The move of the pointer to itself (no
 * SASS instruction) hides the base's alignment from LLVM, which otherwise
 * adds the offsets 16 n with OR, one 64-bit address pair per load as in
 * mask_slices; as an add, ptxas folds them into the loads' immediates. */
__device__ __forceinline__ void r2p_thread_words(const uint16_t *slices, int g, int c4,
                                                 uint32_t (&acc)[FM90M_R2P_GROUPS]) {
  const uint32_t *w32 = reinterpret_cast<const uint32_t *>(slices) + fm90m_slices_word(0, c4);
  asm("mov.b64 %0, %0;" : "+l"(w32));
  uint32_t w[FM90M_NB];
#pragma unroll
  for (int n = 0; n < FM90M_NB; n++) w[n] = w32[fm90m_slices_word(n, 0)];
  fm90m_r2p_words(w, g, acc);
}

__device__ __forceinline__ void mask_r2p(float (&s)[64], const uint16_t *slices, int g, int c4) {
  uint32_t acc[FM90M_R2P_GROUPS];
  r2p_thread_words(slices, g, c4, acc);
  apply_r2p(s, acc);
}

/* The same from a dense uint8 mask in global memory (rows past Sq: visible;
 * columns past Sk: masked). */
template <int NB>
__device__ __forceinline__ void mask_dense(float (&s)[NB * 4], const uint8_t *dm, int64_t sk,
                                           int sq, int i_lo, int j_base) {
#pragma unroll
  for (int n = 0; n < NB; n++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int j = j_base + n * 8 + e;
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        const int i = i_lo + 8 * hr;
        bool m = j >= sk;
        if (!m && i < sq) m = __ldg(dm + (int64_t)i * sk + j) != 0;
        float &x = s[n * 4 + 2 * hr + e];
        x = m ? -INFINITY : x;
      }
    }
}

/* The consumer state of one item: 64 rows of O, the running max and sum. */
template <int HD> struct cstate {
  float o[HD / 2];     /* 64 x HD fp32 accumulator fragment */
  float mx[2], sum[2]; /* rows lo, lo + 8: running max (raw scores) and partial sum */
};

/* Online softmax of one S tile in place (S becomes P, fp32); returns the
 * rescale factors of O for the two rows. The row max and sum are reduced as
 * trees (short dependency chains); the order is fixed, so SKIP and NOSKIP sum
 * the same values in the same order. */
template <int HD>
__device__ __forceinline__ void softmax_tile(float (&s)[64], cstate<HD> &st, float scale_log2,
                                             float (&alpha)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    float m8[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
      m8[k] = fmaxf(fmaxf(s[8 * k + 2 * hr], s[8 * k + 2 * hr + 1]), fmaxf(s[8 * k + 4 + 2 * hr], s[8 * k + 5 + 2 * hr]));
    float m = fmaxf(fmaxf(fmaxf(m8[0], m8[1]), fmaxf(m8[2], m8[3])), fmaxf(fmaxf(m8[4], m8[5]), fmaxf(m8[6], m8[7])));
    m = fmaxf(m, st.mx[hr]);
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    const float old = st.mx[hr];
    /* exactly 1 when the max does not move (a fully masked tile changes nothing) */
    alpha[hr] = (m == old) ? 1.f : fast_exp2((old - m) * scale_log2);
    const float ms = (m == -INFINITY) ? 0.f : m * scale_log2;
    st.mx[hr] = m;
    float p8[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
      float q[4];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int idx = 8 * k + 4 * (e >> 1) + 2 * hr + (e & 1);
        q[e] = fast_exp2(fmaf(s[idx], scale_log2, -ms));
        s[idx] = q[e];
      }
      p8[k] = (q[0] + q[1]) + (q[2] + q[3]);
    }
    const float sum = ((p8[0] + p8[1]) + (p8[2] + p8[3])) + ((p8[4] + p8[5]) + (p8[6] + p8[7]));
    st.sum[hr] = st.sum[hr] * alpha[hr] + sum;
  }
}

/* O *= alpha per row. Skipped when no row of the warp moved its max (every
 * alpha exactly 1: the product would be the identity, so the output is the
 * same bit for bit); after the first few key tiles of a row that is the usual
 * case. The test is warp-uniform (__any_sync), so no lane diverges. */
template <int HD>
__device__ __forceinline__ void rescale_o(cstate<HD> &st, const float (&alpha)[2]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int n = 0; n < HD / 8; n++) {
    st.o[n * 4 + 0] *= alpha[0];
    st.o[n * 4 + 1] *= alpha[0];
    st.o[n * 4 + 2] *= alpha[1];
    st.o[n * 4 + 3] *= alpha[1];
  }
}

/* P (fp32 in the S fragment) to bf16 A fragments, k-step kk = columns 16 kk .. 16 kk + 15. */
__device__ __forceinline__ void convert_p(const float (&s)[64], uint32_t (&pa)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 8; kk++) fmd::pack_frag(s + 8 * kk, pa[kk]);
}

/* Issues S = Q K^T for this warpgroup (not committed). */
template <int HD>
__device__ __forceinline__ void issue_s(float (&s)[64], uint32_t q_base, uint32_t k_base) {
  using T = traits<HD>;
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++)
    fmh::wgmma_ss_n128(s, fmh::desc_kmajor(q_base, T::BR, kk), fmh::desc_kmajor(k_base, T::BC, kk),
                       kk > 0);
}

/* Issues O += P V (not committed). */
template <int HD>
__device__ __forceinline__ void issue_pv(cstate<HD> &st, const uint32_t (&pa)[8][4], uint32_t v_base) {
  using T = traits<HD>;
#pragma unroll
  for (int kk = 0; kk < T::BC / 16; kk++)
    fmh::pv_mma<HD>::run(st.o, pa[kk], fmh::desc_mnmajor(v_base, T::BC, kk));
}

/* One consumer warpgroup's view of the ring and of its item. */
template <int HD> struct ctx {
  const params *p;
  unsigned char *smem;
  bars<HD> br;
  uint32_t q_base, k_base0, v_base0; /* q_base: this warpgroup's rows of the item's Q buffer */
  int qb;                             /* the item's Q buffer */
  int cw, tid, warp, lane, c4;
  int i_lo;                /* the thread's first query row (the other is i_lo + 8) */
  const uint8_t *dm;       /* DENSE: this (b, h)'s mask */
  int64_t instr_base;      /* INSTR: first tile of the item's row in tile_class/tile_cycles */
};

/* A ring entry as the consumer sees it. */
struct slot {
  int stg;
  uint32_t ph;
  int32_t tile, flags;
};

template <int HD>
__device__ __forceinline__ slot wait_entry(const ctx<HD> &c, int kv_iter) {
  using T = traits<HD>;
  slot e;
  e.stg = kv_iter % T::STAGES;
  e.ph = (kv_iter / T::STAGES) & 1;
  fmh::mbar_wait(c.br.k_full(e.stg), e.ph);
  /* broadcast from lane 0: the compiler then knows the entry is warp-uniform and
     keeps the wgmma of the branches it selects asynchronous */
  const int32_t entry =
      __shfl_sync(0xffffffffu, reinterpret_cast<const int32_t *>(c.smem + T::OFF_META)[e.stg], 0);
  e.tile = entry & TILE_MASK;
  e.flags = entry >> FLAG_SHIFT;
  return e;
}

/* Releases a tile that only wgmma read (V): lane 0 arrives once every lane
 * of the warp is done with the stage. */
__device__ __forceinline__ void warp_release(uint64_t *bar, int lane) {
  __syncwarp();
  if (lane == 0) fmh::mbar_arrive(bar);
}

/* The element mask of entry e by WORDS: the thread's three words, copied with
 * K into the stage's words buffer (the producer's load_k; visible once K full
 * completed), read at fm90m_words_slot and applied as R2P applies its own. */
template <int HD>
__device__ __forceinline__ void mask_words(const ctx<HD> &c, const slot &e, float (&s)[64]) {
  using T = traits<HD>;
  constexpr int CT = consumer_threads<HD>();
  const uint32_t *w = reinterpret_cast<const uint32_t *>(c.smem + T::OFF_WORDS + e.stg * T::WORDS_BYTES);
  const int ctid = 128 * c.cw + c.tid;
  uint32_t acc[FM90M_R2P_GROUPS];
#pragma unroll
  for (int j = 0; j < FM90M_R2P_GROUPS; j++) acc[j] = w[fm90m_words_slot(j, ctid, CT)];
  apply_r2p(s, acc);
}

static_assert(FM_SM90_FWD_FLOOR >= 0 && FM_SM90_FWD_FLOOR <= 2, "FM_SM90_FWD_FLOOR is 0, 1 or 2");
#if FM_SM90_FWD_FLOOR == 1
/* The floor experiment's words: zero (nothing writes them), in constant memory
 * so that neither compiler can fold them (ptxas folds a zero that inline asm
 * moves into a register, and the apply with it). after_s moves each word with
 * volatile inline asm on every tile, as mask_r2p builds its words: read
 * directly, LLVM hoists the loads, groups the 64 bit tests apart from their
 * selects, and ptxas makes them 64 LOP3 instead of 12 R2P. */
static __constant__ uint32_t floor_words[FM90M_R2P_GROUPS];
#endif

/* After S of entry e is in registers: the element mask, then the release of K
 * (and of the vectors that travel with it). FM_SM90_FWD_FLOOR 1 and 2 (the
 * floor experiment, fm_attn_dev.h) replace the R2P mask of a slices variant. */
template <int HD, int VAR, int MASK>
__device__ __forceinline__ void after_s(const ctx<HD> &c, const slot &e, float (&s)[64]) {
  using T = traits<HD>;
  if (e.flags & F_NEEDMASK) {
    if (VAR == FM_VARIANT_DENSE)
      mask_dense<16>(s, c.dm, c.p->Sk, c.p->Sq, c.i_lo, e.tile * T::BC + 2 * c.c4);
    else if (MASK == FM_SM90_MASK_WORDS)
      mask_words<HD>(c, e, s);
    else if (MASK == FM_SM90_MASK_R2P) {
#if FM_SM90_FWD_FLOOR == 0
      mask_r2p(s, reinterpret_cast<const uint16_t *>(c.smem + T::OFF_VEC) +
                      (e.stg * T::MASK_WARPS + c.cw * 4 + c.warp) * T::BC,
               c.lane >> 2, c.c4);
#elif FM_SM90_FWD_FLOOR == 1
      uint32_t acc[FM90M_R2P_GROUPS]; /* the apply alone, on words of zero */
#pragma unroll
      for (int j = 0; j < FM90M_R2P_GROUPS; j++)
        asm volatile("mov.b32 %0, %1;" : "=r"(acc[j]) : "r"(floor_words[j]));
      apply_r2p(s, acc);
#endif
    } else
      mask_slices<16>(s, reinterpret_cast<const uint16_t *>(c.smem + T::OFF_VEC) +
                             (e.stg * T::MASK_WARPS + c.cw * 4 + c.warp) * T::BC,
                      c.lane >> 2, c.c4);
  }
  fmh::mbar_arrive(c.br.k_empty(e.stg)); /* every thread: it read the entry and the slices */
}

/* After the P V GEMM of entry e completed: release V (the producer times it). */
template <int HD>
__device__ __forceinline__ void after_pv(ctx<HD> &c, const slot &e) {
  warp_release(c.br.v_empty(e.stg), c.lane);
}

/* Issues S = Q K^T of entry e (its K stage) as one wgmma group; PINGPONG: in
 * this warpgroup's turn of the tensor cores, handing the turn on once issued. */
template <int HD, bool PINGPONG>
__device__ __forceinline__ void issue_s_turn(const ctx<HD> &c, float (&s)[64], const slot &e, int sched_bar,
                                             int other_bar) {
  if (PINGPONG) fmh::named_sync(sched_bar, 256);
  fmh::wgmma_fence();
  issue_s<HD>(s, c.q_base, c.k_base0 + e.stg * traits<HD>::KV_BYTES);
  fmh::wgmma_commit();
  if (PINGPONG) fmh::named_arrive(other_bar, 256);
}

/* The tiles of one item, from its first visited tile e to the one marked
 * F_LAST; returns the ring position after them. Two loop shapes, kept apart:
 *   OVERLAP   FA3's intra-warpgroup pipelining: the S GEMM of tile n and the
 *             P V GEMM of tile n - 1 are in flight together; the softmax of
 *             tile n waits only for S. The first tile is peeled, so that every
 *             wgmma of the loop is issued unconditionally.
 *   otherwise the tiles one after the other: S, softmax, P V.
 * PINGPONG: the two consumer warpgroups take turns on the tensor cores. */
template <int HD, int VAR, bool INSTR, bool OVERLAP, bool PINGPONG, int MASK>
__device__ __forceinline__ int item_tiles(ctx<HD> &c, cstate<HD> &st, slot e, int kv_iter) {
  using T = traits<HD>;
  const int sched_bar = BAR_TURN + c.cw, other_bar = BAR_TURN + (c.cw + 1) % T::NCW;
  float s[64], alpha[2];
  uint32_t pa[8][4];
  if constexpr (OVERLAP) {
    issue_s_turn<HD, PINGPONG>(c, s, e, sched_bar, other_bar);
    fmh::wgmma_wait<0>();
    fmh::reg_fence(s);
    after_s<HD, VAR, MASK>(c, e, s);
    softmax_tile<HD>(s, st, c.p->scale_log2, alpha); /* O is still 0: no rescale */
    convert_p(s, pa);
    kv_iter++;
    slot prev = e;
    while (!(prev.flags & F_LAST)) {
      const slot cur = wait_entry<HD>(c, kv_iter);
      if (PINGPONG) fmh::named_sync(sched_bar, 256);
      fmh::wgmma_fence();
      issue_s<HD>(s, c.q_base, c.k_base0 + cur.stg * T::KV_BYTES);
      fmh::wgmma_commit();
      /* while S runs: O to the previous tile's max (FA3's order), then O += P V */
      rescale_o<HD>(st, alpha);
      fmh::mbar_wait(c.br.v_full(prev.stg), prev.ph);
      fmh::wgmma_fence();
      issue_pv<HD>(st, pa, c.v_base0 + prev.stg * T::KV_BYTES);
      fmh::wgmma_commit();
      if (PINGPONG) fmh::named_arrive(other_bar, 256);
      fmh::wgmma_wait<1>();
      fmh::reg_fence(s);
      after_s<HD, VAR, MASK>(c, cur, s);
      softmax_tile<HD>(s, st, c.p->scale_log2, alpha);
      fmh::wgmma_wait<0>();
      fmh::reg_fence(st.o);
      fmh::reg_fence(pa);
      after_pv<HD>(c, prev);
      convert_p(s, pa);
      kv_iter++;
      prev = cur;
    }
    rescale_o<HD>(st, alpha);
    fmh::mbar_wait(c.br.v_full(prev.stg), prev.ph);
    fmh::wgmma_fence();
    issue_pv<HD>(st, pa, c.v_base0 + prev.stg * T::KV_BYTES);
    fmh::wgmma_commit();
    fmh::wgmma_wait<0>();
    fmh::reg_fence(st.o);
    fmh::reg_fence(pa);
    after_pv<HD>(c, prev);
    return kv_iter;
  } else {
    for (;;) {
      issue_s_turn<HD, PINGPONG>(c, s, e, sched_bar, other_bar);
      fmh::wgmma_wait<0>();
      fmh::reg_fence(s);
      after_s<HD, VAR, MASK>(c, e, s);
      softmax_tile<HD>(s, st, c.p->scale_log2, alpha);
      rescale_o<HD>(st, alpha);
      convert_p(s, pa);
      fmh::mbar_wait(c.br.v_full(e.stg), e.ph);
      if (PINGPONG) fmh::named_sync(sched_bar, 256);
      fmh::wgmma_fence();
      issue_pv<HD>(st, pa, c.v_base0 + e.stg * T::KV_BYTES);
      fmh::wgmma_commit();
      if (PINGPONG) fmh::named_arrive(other_bar, 256);
      fmh::wgmma_wait<0>();
      fmh::reg_fence(st.o);
      fmh::reg_fence(pa);
      after_pv<HD>(c, e);
      kv_iter++;
      if (e.flags & F_LAST) return kv_iter;
      e = wait_entry<HD>(c, kv_iter);
    }
  }
}

/* Epilogue of one item: O / l and LSE; O staged in this warpgroup's rows of
 * the item's Q buffer (dead once its S GEMMs are done; SW128 atoms,
 * conflict-free) and stored by TMA, which clips rows past Sq; the buffer is
 * released to the producer once the store has read it. */
template <int HD>
__device__ __forceinline__ void epilogue(const ctx<HD> &c, const cstate<HD> &st, int b, int h, int r0) {
  using T = traits<HD>;
  const params &p = *c.p;
  unsigned char *o_stage = c.smem + T::OFF_Q + c.qb * T::Q_BYTES + c.cw * 64 * 128;
  const int epi_bar = BAR_EPILOGUE + c.cw;
  float inv[2];
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    float l = st.sum[hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[hr] = l > 0.f ? 1.f / l : 0.f;
    const int i = c.i_lo + 8 * hr;
    if (c.c4 == 0 && i < p.Sq)
      p.lse[((int64_t)b * p.H + h) * p.Sq + i] = l > 0.f ? st.mx[hr] * p.scale + logf(l) : -INFINITY;
  }
  fmh::named_sync(epi_bar, 128); /* every warp of the warpgroup is done with its S GEMMs */
#pragma unroll
  for (int n = 0; n < HD / 8; n++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int row = c.warp * 16 + (c.lane >> 2) + 8 * hr; /* 0..63 in this warpgroup */
      const int col = n * 8 + 2 * c.c4, blk = col >> 6, chunk = (col & 63) >> 3;
      const uint32_t v = pack_bf16(st.o[n * 4 + 2 * hr] * inv[hr], st.o[n * 4 + 2 * hr + 1] * inv[hr]);
      *reinterpret_cast<uint32_t *>(o_stage + blk * T::BR * 128 + row * 128 + ((chunk ^ (row & 7)) << 4) +
                                    (col & 7) * 2) = v;
    }
  fmh::fence_proxy_async();
  fmh::named_sync(epi_bar, 128);
  if (c.tid == 0) {
#pragma unroll
    for (int d = 0; d < T::DBLK; d++)
      fmh::tma_store_4d(&p.tm_o, o_stage + d * T::BR * 128, d * 64, h, r0 + c.cw * 64, b);
    fmh::bulk_commit();
    fmh::bulk_wait_read(); /* the store has read the staging */
  }
  /* every thread (it read the item number and wrote the staging); thread 0 once
     the store has read the buffer, so the phase cannot end before */
  fmh::mbar_arrive(c.br.q_empty(c.qb));
}

/* The consumer warpgroups: items until the producer announces none. */
template <int HD, int VAR, bool INSTR, bool OVERLAP, bool PINGPONG, int MASK>
__device__ __forceinline__ void consumer(const params &p, unsigned char *smem, bars<HD> br, int cw) {
  using T = traits<HD>;
  ctx<HD> c;
  c.p = &p;
  c.smem = smem;
  c.br = br;
  c.cw = cw;
  c.tid = threadIdx.x - 128 * (cw + 1);
  c.warp = c.tid >> 5;
  c.lane = c.tid & 31;
  c.c4 = c.lane & 3;
  const uint32_t q_base0 = fmh::smem_addr(smem + T::OFF_Q) + cw * 64 * 128;
  c.k_base0 = fmh::smem_addr(smem + T::OFF_K);
  c.v_base0 = fmh::smem_addr(smem + T::OFF_V);
  c.dm = nullptr;
  const int32_t *sItem = reinterpret_cast<const int32_t *>(smem + T::OFF_ITEM);
  /* GEMM turns go round the warpgroups, warpgroup 0 first: its predecessor
     (the last one) hands it the first turn */
  if (PINGPONG && cw == T::NCW - 1) fmh::named_arrive(BAR_TURN, 256);
  int kv_iter = 0;
  for (int q_iter = 0;; q_iter++) {
    c.qb = q_iter & 1;
    c.q_base = q_base0 + c.qb * T::Q_BYTES;
    fmh::mbar_wait(br.q_full(c.qb), (q_iter >> 1) & 1);
    const int32_t item = __shfl_sync(0xffffffffu, sItem[c.qb], 0); /* warp-uniform */
    if (item < 0) break;
    const int rt = item % p.Tr, bh = item / p.Tr, b = bh / p.H, h = bh % p.H;
    const int r0 = rt * T::BR;
    c.i_lo = r0 + cw * 64 + c.warp * 16 + (c.lane >> 2);
    c.instr_base = ((int64_t)bh * p.Tr + rt) * (int64_t)p.Tc;
    if (VAR == FM_VARIANT_DENSE) c.dm = p.dense + (int64_t)set_of(p, b, h) * p.dense_set_stride;
    cstate<HD> st;
#pragma unroll
    for (int i = 0; i < HD / 2; i++) st.o[i] = 0.f;
    st.mx[0] = st.mx[1] = -INFINITY;
    st.sum[0] = st.sum[1] = 0.f;
    const slot e = wait_entry<HD>(c, kv_iter);
    if (e.flags & F_EMPTY) { /* a fully masked row tile: O = 0, LSE = -inf */
      fmh::mbar_wait(br.v_full(e.stg), e.ph);
      fmh::mbar_arrive(br.k_empty(e.stg)); /* every thread: it read the entry */
      warp_release(br.v_empty(e.stg), c.lane);
      kv_iter++;
    } else {
      kv_iter = item_tiles<HD, VAR, INSTR, OVERLAP, PINGPONG, MASK>(c, st, e, kv_iter);
    }
    epilogue<HD>(c, st, b, h, r0);
  }
  if (c.tid == 0) fmh::bulk_wait_all();
}

/* ------------------------------------------------------------- WORDS's words */

/* The preprocessing of mask method WORDS: one CTA of the consumers' thread
 * count per (set, row tile, key tile) of the forward's grid (blockIdx.x =
 * fm90m_words_tile). A tile the skip forward masks (visited: not MASKED; and
 * NEEDMASK: not UNMASKED or cut by Sk, the producer's `decide`) gets its
 * slices as the producer makes them (column_intervals and fm90m_row_slice,
 * 128 threads, one column each, the producer's layout in shared memory), then every thread reads its warp's slices and
 * gathers its three words with r2p_thread_words, as consumer thread ctid
 * (128 cw + tid) does in mask_r2p, and stores them at fm90m_words_index: the
 * words R2P would build, by construction. Other tiles are not written (the
 * forward copies no words for them). */
template <int HD>
__global__ void __launch_bounds__(consumer_threads<HD>()) words_kernel(const fmd::attn_base d, uint32_t *words) {
  using T = traits<HD>;
  constexpr int CT = consumer_threads<HD>();
  static_assert(CT >= T::BC, "one thread a column of the slices");
  __shared__ uint16_t sl[T::MASK_WARPS * T::BC];
  const int64_t tile = blockIdx.x;
  const int32_t t = (int32_t)(tile % d.Tc), rt = (int32_t)(tile / d.Tc % d.Tr);
  const int32_t set = (int32_t)(tile / ((int64_t)d.Tc * d.Tr));
  const int32_t r0 = rt * T::BR, r1 = min(r0 + T::BR, d.Sq);
  const fm_tile_bounds tb = fmd::load_bounds(d.bounds + (int64_t)set * d.Tc + t);
  const int cls = fm_classify_minmax(&tb, r0, r1);
  if (!fm90m_words_needed(cls, t, d.Sk)) return; /* CTA-uniform */
  const int ctid = threadIdx.x, lane = ctid & 31;
  if (ctid < T::BC) {
    int32_t lts, lte, us, ue;
    column_intervals(d, d.intervals + (int64_t)set * 4 * d.Sk, t * T::BC + ctid, &lts, &lte, &us, &ue);
#pragma unroll
    for (int w = 0; w < T::MASK_WARPS; w++) sl[w * T::BC + ctid] = (uint16_t)fm90m_row_slice(r0 + 16 * w, lts, lte, us, ue);
  }
  __syncthreads();
  uint32_t acc[FM90M_R2P_GROUPS];
  r2p_thread_words(sl + (ctid >> 5) * T::BC, lane >> 2, lane & 3, acc); /* consumer warp ctid / 32 */
#pragma unroll
  for (int j = 0; j < FM90M_R2P_GROUPS; j++) words[fm90m_words_index(tile, j, ctid, CT)] = acc[j];
}

/* ------------------------------------------------------------------- kernel */

template <int HD, int VAR, bool INSTR, bool OVERLAP, bool PINGPONG, int MASK>
__global__ void __launch_bounds__(traits<HD>::THREADS, CTAS_PER_SM) fwd_kernel(const __grid_constant__ params p) {
  using T = traits<HD>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = fmh::smem_aligned_1k(smem_raw);
  bars<HD> br{reinterpret_cast<uint64_t *>(smem + T::OFF_BAR)};
  /* warp-uniform (broadcast): the role branches below are then not divergent
     to the compiler, which would otherwise serialize the wgmma inside them */
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  if (threadIdx.x == 0) {
    for (int qb = 0; qb < 2; qb++) {
      fmh::mbar_init(br.q_full(qb), 1);
      fmh::mbar_init(br.q_empty(qb), consumer_threads<HD>());
    }
    for (int s = 0; s < T::STAGES; s++) {
      fmh::mbar_init(br.k_full(s), PRODUCER_THREADS);
      fmh::mbar_init(br.k_empty(s), consumer_threads<HD>());
      fmh::mbar_init(br.v_full(s), 1);
      fmh::mbar_init(br.v_empty(s), v_empty_count<HD>());
    }
    fmh::fence_barrier_init();
  }
  __syncthreads();
  if (wg == 0) {
    fmh::setmaxnreg_dec<T::REG_PRODUCER>();
    producer<HD, VAR, INSTR, MASK>(p, smem, br);
  } else {
    fmh::setmaxnreg_inc<T::REG_CONSUMER>();
    consumer<HD, VAR, INSTR, OVERLAP, PINGPONG, MASK>(p, smem, br, wg - 1);
  }
}

}  // namespace fm90

#endif
