/* fm_hopper.cuh — the Hopper (sm_90a) instructions the sm90 kernels use, each
 * wrapped once with a comment saying what it does (private to kernels/).
 *
 *   mbarrier   shared-memory barriers that count arrivals and expected bytes:
 *              the copy engine's loads complete on them, consumers release
 *              stages through them (PTX ISA, "mbarrier")
 *   TMA        cp.async.bulk.tensor: a tile of a tensor described by a
 *              CUtensorMap (a __grid_constant__ kernel parameter) copied from
 *              global to shared memory by the copy engine, 128-byte swizzled
 *   wgmma      warpgroup matrix multiply (4 warps, 128 threads) reading B (and
 *              A, or A from registers) from shared memory through 64-bit matrix
 *              descriptors; asynchronous: fence, issue, commit, wait
 *   setmaxnreg per-warpgroup register budget (producer few, consumers many)
 *   bar.sync / bar.arrive on named barriers between warpgroups
 *
 * Shared-memory layout every operand uses: "SW128 atoms". A tile of R rows x
 * 64 bf16 (128 bytes a row) is stored row after row, and within each group of
 * 8 rows (1024 bytes) the 16-byte chunk c of row r sits at chunk c ^ (r % 8).
 * This is what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and a 64-element
 * inner box, and what a wgmma descriptor with swizzle mode 1 reads. A head dim
 * of 128 is two such tiles ("column blocks") one after the other. Every atom
 * starts on a 1024-byte boundary (the descriptor's base offset stays 0).
 *
 * Descriptors (PTX ISA "Matrix Descriptor Format"): start address >> 4 in bits
 * 0-13, leading byte offset (LBO) >> 4 in 16-29, stride byte offset (SBO) >> 4
 * in 32-45, swizzle mode in 62-63 (1 = 128B).
 *   K-major operand (the reduction dim contiguous: Q and K for S = Q K^T):
 *     8-row groups 1024 bytes apart -> SBO = 1024; LBO unused (1). The k-th
 *     16-element step inside a 64-element column block starts 32 bytes later.
 *   MN-major operand (the output dim contiguous: V for O += P V, "transposed"):
 *     64-column blocks LBO bytes apart (the block's size: rows x 128), 8-row
 *     groups of the reduction dim SBO = 1024 apart; the k-th 16-row step
 *     starts 16 * 128 bytes later.
 */
#ifndef FM_HOPPER_CUH
#define FM_HOPPER_CUH

#include <cuda.h>
#include <stdint.h>

#include "fm_wgmma_desc.h"

namespace fmh {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* ------------------------------------------------------------------ mbarrier */

/* Initialises the barrier at bar to expect `count` arrivals per phase. */
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}

/* Makes barrier initialisation visible to the async proxy (the copy engine). */
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* Arrives once and adds `bytes` to the transaction count the current phase
 * waits for (the copies issued next complete those bytes). */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

/* Arrives once and waits for a phase at a 32-bit shared-window address (a kernel
 * that keeps one 32-bit base for all of its shared memory instead of 64-bit
 * generic pointers: fewer registers); mbar_arrive and mbar_wait below take the
 * barrier's pointer. */
__device__ __forceinline__ void mbar_arrive_sa(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait_sa(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

/* Arrives once (release semantics: this thread's earlier writes are visible to
 * whoever observes the phase complete). */
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) { mbar_arrive_sa(smem_addr(bar)); }

/* Waits until the phase with parity `parity` (0 or 1) has completed (acquire). */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) { mbar_wait_sa(smem_addr(bar), parity); }

/* Plain shared-memory loads and stores at a 32-bit shared-window address
 * (volatile, with a memory clobber: kept in program order with the mbarrier
 * waits and arrivals around them, as the compiler keeps generic accesses). */
__device__ __forceinline__ int32_t ld_shared_s32(uint32_t at) {
  int32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(at) : "memory");
  return v;
}
__device__ __forceinline__ float2 ld_shared_f2(uint32_t at) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(at) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_u32(uint32_t at, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared_f2(uint32_t at, float2 v) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(v.x), "f"(v.y) : "memory");
}

/* The instrumented kernels' per-tile cycles: the clock64 ticks between two
 * consecutive releases of ring stages by the consumers (one tile after the
 * other, in ring order), read by the producer when it takes the stage again,
 * so that the consumers run the plain code. One producer thread owns it; its
 * state is a few words of shared memory (BYTES at `base`), so that it holds no
 * registers of the producer's small budget. The owner is a producer thread
 * that issues no copy and only observes the releases (the forward's observer;
 * warp 0, which issues the copies, runs the plain code; the backward's
 * observer takes part in the release barrier instead and needs none of this);
 * kernels/PERF_NOTES.md, "Third session":
 *   note(pos, rec, now)  ring entry pos (record index rec, -1: nothing to time)
 *                        was issued; `now`: when its stage came free (the
 *                        release of entry pos - S), read just before its copy
 *   flush(pos)           the release entry pos saw is written (once), tile of
 *                        entry pos - S getting now(pos) - now(pos - 1)
 *   drain(iter, empty)   at the end (entries < iter noted): the last flushed,
 *                        then the releases of the last S entries, waited for
 *                        and written. */
template <int S> struct stage_clock {
  static_assert((S & (S - 1)) == 0, "stages: a power of two");
  static constexpr int BYTES = 2 * S * 8 * 2 + 8; /* rec[2S], when[2S], last */
  unsigned char *base;
  int64_t *cycles; /* the kernel's tile_cycles */
  __device__ __forceinline__ int64_t &rec(int pos) const {
    return reinterpret_cast<int64_t *>(base)[(unsigned)pos & (2 * S - 1)];
  }
  __device__ __forceinline__ long long &when(int pos) const {
    return reinterpret_cast<long long *>(base + 2 * S * 8)[(unsigned)pos & (2 * S - 1)];
  }
  __device__ __forceinline__ long long &last() const { return *reinterpret_cast<long long *>(base + 4 * S * 8); }
  /* By the owning thread, before the first entry. */
  __device__ __forceinline__ void start() {
#ifdef __CUDA_ARCH__
    last() = clock64();
#endif
  }
  __device__ __forceinline__ void note(int pos, int64_t record, long long now) {
    rec(pos) = record;
    when(pos) = now;
  }
  __device__ __forceinline__ void write(int64_t record, long long now) {
    if (record >= 0) cycles[record] = now - last();
    last() = now;
  }
  __device__ __forceinline__ void flush(int pos) {
    if (pos < S) return;
    const int64_t r = rec(pos - S);
    rec(pos - S) = -1; /* written once: a second flush of pos only sets last again */
    write(r, when(pos));
  }
  template <class Empty> __device__ __forceinline__ void drain(int iter, Empty empty) {
    flush(iter - 1);
    for (int m = max(iter - S, 0); m < iter; m++) {
      mbar_wait(empty(m % S), (m / S) & 1);
#ifdef __CUDA_ARCH__
      write(rec(m), clock64());
#endif
    }
  }
};

/* The dynamic shared memory of a kernel from its first 1024-byte boundary (SW128
 * TMA boxes and wgmma descriptors need that alignment; the launch asks for 1 KiB
 * more than the layout). */
__device__ __forceinline__ unsigned char *smem_aligned_1k(unsigned char *raw) {
  return reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                           ~static_cast<uintptr_t>(1023));
}

/* stmatrix .m8n8 .x4 (.trans), b16: the inverse of ldmatrix .x4 (PTX ISA,
 * "stmatrix"): lanes 8i..8i+7 give the row addresses (16 bytes each) of matrix
 * i, lane t's r[i] holds (row t / 4, columns 2 (t % 4), + 1) of it (an mma
 * fragment); .trans stores the transpose. */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

/* ----------------------------------------------------------------------- TMA */

/* Loads the box at coordinates (c0, c1, c2, c3) (innermost first) of the 4-D
 * tensor `map` into shared memory at dst; completes `bytes` on bar. Elements
 * outside the tensor are filled with zeros. */
__device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_addr(dst)),
      "l"((uint64_t)map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

/* The rows [row, row + rows) of one (b, h) of a (B, S, H, D) tensor, every
 * 64-column block of its head dim (dblk of them, `rows` x 128 bytes apart in
 * shared memory), loaded by TMA onto bar. */
__device__ __forceinline__ void tma_load_rows(void *dst, const CUtensorMap *map, uint64_t *bar, int dblk,
                                              int rows, int32_t h, int32_t row, int32_t b) {
  for (int d = 0; d < dblk; d++)
    tma_load_4d(static_cast<unsigned char *>(dst) + d * rows * 128, map, bar, d * 64, h, row, b);
}

/* Copies `bytes` (a multiple of 16; src and dst 16-byte aligned) of global
 * memory at src into shared memory at dst by the copy engine (a bulk copy, no
 * tensor map); completes `bytes` on bar, as a TMA load does. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"((uint64_t)src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

/* Shared memory to global by the copy engine, one bulk group: `op` is the
 * instruction (a store, or a reduction). */
#define FMH_TMA_OUT_4D(op, map, src, c0, c1, c2, c3)                                            \
  asm volatile(op " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"((uint64_t)(map)), "r"(smem_addr(src)), \
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)                                             \
               : "memory")

/* Stores the box at (c0, c1, c2, c3) of `map` from shared memory at src
 * (elements outside the tensor are not written). */
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, const void *src, int32_t c0,
                                             int32_t c1, int32_t c2, int32_t c3) {
  FMH_TMA_OUT_4D("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group", map, src, c0, c1, c2, c3);
}
/* Adds the fp32 box at (c0, c1, c2, c3) of `map` from shared memory at src to
 * global memory (element-wise reduction done by the copy engine in L2;
 * elements outside the tensor are not touched). */
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap *map, const void *src, int32_t c0,
                                                  int32_t c1, int32_t c2, int32_t c3) {
  FMH_TMA_OUT_4D("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group", map, src, c0, c1,
                 c2, c3);
}
#undef FMH_TMA_OUT_4D
/* Closes the bulk stores issued since the last commit into a group. */
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* Waits until every committed bulk store has finished reading shared memory.
 * (ptxas of CUDA 13.0 assembles it for sm_90a to the very instruction of
 * bulk_wait_all, DEPBAR.LE SB0, 0x0: in practice it waits for the writes too.) */
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
/* Waits until every committed bulk store has finished writing global memory. */
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

/* Brings a tensor map (a kernel parameter) into the descriptor cache early. */
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}

/* Two 32-bit words to shared memory at a shared-window address (st.shared: a
 * 32-bit address where a generic pointer takes two registers). */
__device__ __forceinline__ void st_shared_v2(uint32_t addr, uint32_t a, uint32_t b) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr), "r"(a), "r"(b) : "memory");
}

/* Orders this thread's ordinary shared-memory writes before later reads of the
 * same memory by the async proxy (wgmma operands written with st.shared). */
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* The wgmma descriptors (desc_sw128, desc_kmajor, desc_mnmajor): fm_wgmma_desc.h. */

/* ------------------------------------------------------------------ wgmma ops */

/* Before the first wgmma that reads registers (accumulators, A fragments)
 * written by ordinary instructions. */
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
/* Closes the group of wgmma issued since the last commit. */
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Waits until at most N committed groups are still in flight. */
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Ties registers to the point after a wait, so that the compiler neither reads
 * accumulators before the wgmma that writes them has completed nor moves
 * writes to them above it. */
template <int R> __device__ __forceinline__ void reg_fence(float (&r)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int R, int C> __device__ __forceinline__ void reg_fence(uint32_t (&r)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; i++)
#pragma unroll
    for (int j = 0; j < C; j++) asm volatile("" : "+r"(r[i][j])::"memory");
}

/* The accumulator operands of a wgmma in its PTX text: %0 .. %31 (N = 64) or
 * %0 .. %63 (N = 128), the first operands of the asm statement (FMH_ACC8). */
#define FMH_D_LO                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FMH_D32 FMH_D_LO "}, "
#define FMH_D64                                                                        \
  FMH_D_LO ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, " \
  "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define FMH_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                    "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define FMH_ACC32 FMH_ACC8(0), FMH_ACC8(8), FMH_ACC8(16), FMH_ACC8(24)
#define FMH_ACC64 FMH_ACC32, FMH_ACC8(32), FMH_ACC8(40), FMH_ACC8(48), FMH_ACC8(56)
#define FMH_WGMMA_N128 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
#define FMH_WGMMA_N64 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "

/* d(64 x 128, fp32) (+)= A(64 x 16) B(16 x 128)^T, bf16; A and B K-major in
 * shared memory (S = Q K^T). accumulate = 0 overwrites d. Per thread 64
 * accumulators: warp w of the warpgroup holds rows 16 w + lane / 4 (+ 8), and
 * d[4 n + 2 h + e] is column 8 n + 2 (lane % 4) + e of the row (+ 8 h). */
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      FMH_WGMMA_N128 FMH_D64
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : FMH_ACC64
      : "l"(da), "l"(db), "r"(accumulate));
}

/* d(64 x 64, fp32) (+)= A(64 x 16) B(16 x 64), bf16, both from shared memory;
 * TA / TB = 1 read A / B MN-major ("transposed"), 0 K-major. Accumulator
 * layout as wgmma_ss_n128 with 8 n8 blocks. */
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      FMH_WGMMA_N64 FMH_D32
      "%32, %33, p, 1, 1, %35, %36;\n}\n"
      : FMH_ACC32
      : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB));
}

/* d(64 x 128, fp32) += A(64 x 16, bf16 in registers) B(16 x 128) with B
 * MN-major in shared memory (O += P V, head dim 128). a[0..3] is the A
 * fragment: rows lane / 4 (+ 8) of the warp's 16, columns 2 (lane % 4) (+ 8),
 * two bf16 a register, in the order (r, c), (r + 8, c), (r, c + 8), (r + 8, c + 8) —
 * the accumulator layout of the S tile's columns 16 kk .. 16 kk + 15. */
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      FMH_WGMMA_N128 FMH_D64
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : FMH_ACC64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

/* The same with N = 64; TB = 1: B MN-major (O += P V at head dim 64), 0:
 * K-major (the linear-RNN output kernel's inter term, B = Q^T). */
template <int TB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      FMH_WGMMA_N64 FMH_D32
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : FMH_ACC32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1), "n"(TB));
}
#undef FMH_ACC8
#undef FMH_ACC32
#undef FMH_ACC64
#undef FMH_WGMMA_N128
#undef FMH_WGMMA_N64
#undef FMH_D_LO
#undef FMH_D32
#undef FMH_D64

/* O += P V for head dim HD: dispatches on the accumulator size. */
template <int HD> struct pv_mma;
template <> struct pv_mma<128> {
  static __device__ __forceinline__ void run(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
    wgmma_rs_n128(d, a, db);
  }
};
template <> struct pv_mma<64> {
  static __device__ __forceinline__ void run(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    wgmma_rs_n64<1>(d, a, db);
  }
};

/* --------------------------------------------------------- registers, barriers */

/* Lowers (DEC) or raises (INC) this warpgroup's per-thread register budget.
 * Takes effect only in a kernel compiled with a register cap at entry
 * (__launch_bounds__(threads, 1)). */
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* Named barrier `id` (1..15; 0 is __syncthreads) over `nthreads` threads:
 * sync waits for all of them, arrive counts this thread without waiting. */
__device__ __forceinline__ void named_sync(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int nthreads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

}  // namespace fmh

#endif
