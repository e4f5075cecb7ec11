/* fm_linrnn_sim.h — a host emulation of the CUDA pieces the linear-RNN kernel
 * uses, so that its real source (fm_linrnn.cuh, fm_linrnn.cu) and its check
 * (fm_linrnn_check.cu) run on a machine without a GPU: tests/CMakeLists.txt builds
 * it as fm_linrnn_emulated (kernels/sim/: the sources as C++ and this header in
 * place of cuda_runtime.h) and `make test` runs three of its cases; every case:
 * `fm_linrnn_emulated` with no argument (kernels/PERF_NOTES.md, "Linear RNN").
 *
 * Compiled with a host C++20 compiler and -DFM_LINRNN_SIM, in place of the CUDA
 * runtime: blocks run one after the other, each CUDA thread of a block is a
 * fiber of one host thread, switched only at barriers; __syncthreads
 * is a barrier of the block's fibers; the warp collectives (shuffles, ldmatrix,
 * mma.sync m16n8k16) exchange values through per-warp buffers behind a barrier
 * of the warp's 32 fibers, with the fragment layouts of the PTX ISA (mma m16n8k16 .bf16, ldmatrix .x4 with and
 * without .trans; wgmma m64n64k16 .bf16 from shared memory through 128-byte
 * swizzled descriptors, or with A from registers). cp.async copies are deferred to the wait that completes
 * their group and poison their destination (0x7f bytes) when issued, so that a
 * read before the wait, or a copy issued while other threads still read the
 * buffer, shows up as wrong values. The runtime calls (cudaMalloc*,
 * cudaMemcpy*, ...) are malloc and memcpy; a stream does nothing.
 *
 * The fibers of a block run round robin, each up to its next barrier, in thread
 * order or, with the environment variable FM_LINRNN_SIM_SHUFFLE=seed, in an
 * order drawn anew every round (other interleavings of the warps). Either way
 * the warps stay within a collective or two of each other; with
 * FM_LINRNN_SIM_SKEW=1 (or 2) each warp instead runs alone, warp 0 first (or the
 * last warp first), until only a __syncthreads holds it, so that a warp finishes
 * a whole phase before the next one starts it: a copy issued into a buffer that
 * other warps still read, with no barrier between, shows up.
 *
 * Not emulated: timing, the L2, real concurrency between blocks, the exact
 * rounding of the tensor cores' accumulation (here: exact products summed in
 * double, rounded once to float), ex2.approx (here exp2f), wgmma's asynchrony
 * (computed when issued: a write to its operands before the wait goes unseen)
 * and the proxies (fence.proxy.async does nothing here). */
#ifndef FM_LINRNN_SIM_H
#define FM_LINRNN_SIM_H

#include <array>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <csetjmp>
#include <ucontext.h>
#include <vector>

#include "fm_wgmma_desc.h"

/* ---- the runtime API subset, as malloc and memcpy ---- */
typedef int cudaError_t;
typedef void *cudaStream_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35,
       cudaErrorNoDevice = 100 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMinor,
                      cudaDevAttrMultiProcessorCount, cudaDevAttrMaxSharedMemoryPerBlockOptin };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline const char *cudaGetErrorName(cudaError_t e) { return e ? "cudaErrorSim" : "cudaSuccess"; }
inline const char *cudaGetErrorString(cudaError_t e) { return e ? "simulated error" : "no error"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : a == cudaDevAttrComputeCapabilityMinor ? 0
     : a == cudaDevAttrMultiProcessorCount ? 132 : 232448;
  return cudaSuccess;
}
/* 256-byte aligned, as the CUDA allocators' (the library checks a caller's workspace for it) */
inline cudaError_t cudaMalloc(void **p, size_t n) {
  const size_t r = (n + 255) & ~(size_t)255;
  *p = std::aligned_alloc(256, r ? r : 256);
  if (*p) std::memset(*p, 0, r ? r : 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) {
  const size_t r = (n + 255) & ~(size_t)255;
  *p = std::aligned_alloc(256, r ? r : 256);
  if (*p) std::memset(*p, 0x7f, r ? r : 256); /* stream-ordered memory is not zeroed: poison it */
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void *p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaFreeAsync(void *p, cudaStream_t) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { std::memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { std::memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemset(void *d, int v, size_t n) { std::memset(d, v, n); return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { std::memset(d, v, n); return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }

namespace sim {

struct idx3 {
  unsigned x = 0, y = 0, z = 0;
};

/* A CUDA thread: a fiber with its own stack, started with setcontext and
 * switched with _setjmp/_longjmp (no signal-mask system call per switch). */
struct pending_copy {
  uint32_t dst;
  const void *src;
  int bytes, src_bytes;
};
struct fiber {
  ucontext_t ctx;
  jmp_buf jb;
  bool started = false;
  char *stack = nullptr; /* owned by launch() */
  idx3 tid, bid;
  std::vector<std::vector<pending_copy>> groups; /* committed cp.async groups */
  std::vector<pending_copy> open;                /* not yet committed */
  long long clock = 0;
  unsigned rounds = 0; /* warp collectives so far: selects the exchange buffer */
  bool done = false;
};

struct barrier_state {
  int expected = 0, count = 0;
  unsigned gen = 0;
};

/* One block in flight. */
struct block_state {
  int nthreads = 0;
  std::vector<unsigned char> smem;
  barrier_state all;
  std::vector<barrier_state> warp, wg; /* per warp; per warpgroup (bar.sync id, 128) */
  std::vector<std::array<unsigned char, 64>> xbuf[2]; /* per thread: its offer, by round parity */
};
inline block_state *g_block = nullptr;
inline fiber *g_cur = nullptr;
inline jmp_buf g_main_jb;
inline idx3 g_dim, b_dim;
inline unsigned long g_progress = 0;
inline const std::function<void()> *g_body = nullptr;

inline void yield() {
  if (!_setjmp(g_cur->jb)) _longjmp(g_main_jb, 1);
}
inline void arrive_and_wait(barrier_state &b) {
  const unsigned gen = b.gen;
  if (++b.count == b.expected) {
    b.count = 0;
    b.gen++;
    g_progress++;
    return;
  }
  while (b.gen == gen) yield();
}

inline unsigned char *smem() { return g_block->smem.data(); }
inline void syncthreads() { arrive_and_wait(g_block->all); }
inline void sync_warpgroup() { arrive_and_wait(g_block->wg[(size_t)(g_cur->tid.x >> 7)]); }
inline int lane() { return (int)(g_cur->tid.x & 31); }
inline int warp_id() { return (int)(g_cur->tid.x >> 5); }

/* Offers `bytes` of `mine` to the warp and runs `use(lane -> its offer)` once
 * every lane has offered (one barrier: offers alternate between two buffers, and
 * a lane can offer twice more only after every lane has used this round's). */
template <class Use> inline void warp_exchange(const void *mine, size_t bytes, Use use) {
  auto &buf = g_block->xbuf[g_cur->rounds++ & 1];
  if (bytes) std::memcpy(buf[g_cur->tid.x].data(), mine, bytes);
  arrive_and_wait(g_block->warp[(size_t)warp_id()]);
  const unsigned base = g_cur->tid.x & ~31u;
  use([&buf, base](int l) -> const unsigned char * { return buf[base + (unsigned)l].data(); });
}

template <class T> inline T shfl_from(T v, int src) {
  T out = v;
  warp_exchange(&v, sizeof v, [&](auto at) { std::memcpy(&out, at(src & 31), sizeof out); });
  return out;
}
template <class T> inline T shfl_up(T v, unsigned d, int width) {
  const int l = lane(), seg = l % width;
  return shfl_from(v, seg >= (int)d ? l - (int)d : l);
}
template <class T> inline T shfl_xor(T v, int m) { return shfl_from(v, lane() ^ m); }
inline uint32_t ballot(bool v) {
  uint32_t bits = 0;
  warp_exchange(&v, sizeof v, [&](auto at) {
    for (int l = 0; l < 32; l++) bits |= (uint32_t)(*(const bool *)at(l)) << l;
  });
  return bits;
}

/* ldmatrix .x4 (.trans): lanes 8i..8i+7 give the row addresses of matrix i. */
inline void ldmatrix(uint32_t addr, uint32_t (&r)[4], bool trans) {
  uint32_t a[32];
  warp_exchange(&addr, sizeof addr, [&](auto at) {
    for (int l = 0; l < 32; l++) std::memcpy(&a[l], at(l), 4);
  });
  const int t = lane(), row = t / 4, col = 2 * (t % 4);
  const unsigned char *s = smem();
  for (int i = 0; i < 4; i++) {
    uint16_t e0, e1;
    if (!trans) {
      std::memcpy(&e0, s + a[8 * i + row] + 2 * col, 2);
      std::memcpy(&e1, s + a[8 * i + row] + 2 * col + 2, 2);
    } else { /* (row col, column row) and (row col + 1, column row) of matrix i */
      std::memcpy(&e0, s + a[8 * i + col] + 2 * row, 2);
      std::memcpy(&e1, s + a[8 * i + col + 1] + 2 * row, 2);
    }
    r[i] = (uint32_t)e0 | ((uint32_t)e1 << 16);
  }
}

/* stmatrix .x4 (.trans): lanes 8i..8i+7 give the row addresses of matrix i;
 * lane t's r[i] holds (row t / 4, columns 2 (t % 4), + 1) of matrix i, stored
 * at its row's address (.trans: at the addresses of rows 2 (t % 4), + 1,
 * column t / 4). */
inline void stmatrix(uint32_t addr, const uint32_t (&r)[4], bool trans) {
  uint32_t a[32];
  warp_exchange(&addr, sizeof addr, [&](auto at) {
    for (int l = 0; l < 32; l++) std::memcpy(&a[l], at(l), 4);
  });
  const int t = lane(), row = t / 4, col = 2 * (t % 4);
  unsigned char *s = smem();
  for (int i = 0; i < 4; i++) {
    const uint16_t e0 = (uint16_t)(r[i] & 0xffffu), e1 = (uint16_t)(r[i] >> 16);
    if (!trans) {
      std::memcpy(s + a[8 * i + row] + 2 * col, &e0, 2);
      std::memcpy(s + a[8 * i + row] + 2 * col + 2, &e1, 2);
    } else {
      std::memcpy(s + a[8 * i + col] + 2 * row, &e0, 2);
      std::memcpy(s + a[8 * i + col + 1] + 2 * row, &e1, 2);
    }
  }
}

inline float bf16_at(uint32_t reg, int half) {
  uint32_t u = half ? (reg & 0xffff0000u) : (reg << 16);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/* mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32, d += a b (fragments of the PTX ISA). */
inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct frag {
    uint32_t a[4], b[2];
  } mine = {{a[0], a[1], a[2], a[3]}, {b0, b1}}, all[32];
  warp_exchange(&mine, sizeof mine, [&](auto at) {
    for (int l = 0; l < 32; l++) std::memcpy(&all[l], at(l), sizeof(frag));
  });
  auto A = [&](int m, int k) { /* a[0] (g, k 0-7), a[1] (g+8, k 0-7), a[2] (g, k 8-15), a[3] (g+8, k 8-15) */
    const int reg = (m >= 8) + 2 * (k >= 8), ln = (m % 8) * 4 + (k % 8) / 2;
    return bf16_at(all[ln].a[reg], k % 2);
  };
  auto B = [&](int k, int n) { /* b0 (k 0-7, n g), b1 (k 8-15, n g) */
    const int reg = k >= 8, ln = n * 4 + (k % 8) / 2;
    return bf16_at(all[ln].b[reg], k % 2);
  };
  const int g = lane() / 4, c4 = lane() % 4;
  for (int r = 0; r < 4; r++) {
    const int m = g + 8 * (r >> 1), n = 2 * c4 + (r & 1);
    double acc = d[r];
    for (int k = 0; k < 16; k++) acc += (double)A(m, k) * (double)B(k, n);
    d[r] = (float)acc;
  }
}

/* ---- wgmma (sm_90a), for the two-pass path's output kernel (fm_linrnn_wg.cuh) ----
 * Computed when issued (commit and wait do nothing): the kernel changes the
 * operands' shared memory only after waiting, so issue time reads what the
 * hardware would. Descriptors as fm_hopper.cuh builds them (128-byte swizzle:
 * start address, leading and stride byte offsets); a byte's place is its
 * linear offset with bits 4-6 XORed by bits 7-9, the swizzle of 1024-byte
 * atoms. K-major (T 0): element (row r, k) at start + (r / 8) SBO + (r % 8) 128
 * + 2 k; MN-major (T 1): element (k, column c) at start + (k / 8) SBO + (k % 8)
 * 128 + (c / 64) LBO + 2 (c % 64). The accumulator layout is the PTX ISA's
 * m64nNk16 D fragment (warp w of the warpgroup: rows 16 w + lane / 4 (+ 8),
 * d[4 n + 2 h + e] column 8 n + 2 (lane % 4) + e). */
inline float smem_bf16_sw128(uint32_t linear) {
  const uint32_t at = linear ^ (((linear >> 7) & 7u) << 4);
  uint16_t e;
  std::memcpy(&e, smem() + at, 2);
  return bf16_at((uint32_t)e, 0);
}
inline float wg_operand(uint64_t desc, bool mn_major, int k, int rc) {
  const uint32_t start = (uint32_t)(desc & 0x3fff) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4,
                 sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
  if (!mn_major) return smem_bf16_sw128(start + (uint32_t)(rc / 8) * sbo + (uint32_t)(rc % 8) * 128 + 2u * (uint32_t)k);
  return smem_bf16_sw128(start + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128 + (uint32_t)(rc / 64) * lbo +
                         2u * (uint32_t)(rc % 64));
}
/* d (64 x 64) (+)= A (64 x 16) B (16 x 64), both from shared memory; TA /
 * TB: A / B MN-major. */
template <int TA, int TB> inline void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  const int w = (int)((g_cur->tid.x >> 5) & 3), g = lane() / 4, c4 = lane() % 4;
  for (int i = 0; i < 32; i++) {
    const int n = i / 4, h = (i / 2) % 2, e = i % 2, m = 16 * w + g + 8 * h, col = 8 * n + 2 * c4 + e;
    double acc = accumulate ? d[i] : 0.0;
    for (int k = 0; k < 16; k++) acc += (double)wg_operand(da, TA != 0, k, m) * (double)wg_operand(db, TB != 0, k, col);
    d[i] = (float)acc;
  }
}

/* d (64 x 64) += A (64 x 16, the warps' registers: warp w's a[0..3] its rows
 * 16 w .., in mma m16n8k16's A fragment) B (16 x 64) from shared memory; TB:
 * B MN-major. */
template <int TB> inline void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  struct frag {
    uint32_t a[4];
  } mine = {{a[0], a[1], a[2], a[3]}}, all[32];
  warp_exchange(&mine, sizeof mine, [&](auto at) {
    for (int l = 0; l < 32; l++) std::memcpy(&all[l], at(l), sizeof(frag));
  });
  const int g = lane() / 4, c4 = lane() % 4;
  for (int i = 0; i < 32; i++) {
    const int n = i / 4, h = (i / 2) % 2, e = i % 2, m = g + 8 * h, col = 8 * n + 2 * c4 + e;
    double acc = d[i];
    for (int k = 0; k < 16; k++) {
      const float x = bf16_at(all[(m % 8) * 4 + (k % 8) / 2].a[(m >= 8) + 2 * (k >= 8)], k % 2);
      acc += (double)x * (double)wg_operand(db, TB != 0, k, col);
    }
    d[i] = (float)acc;
  }
}

/* cp.async: destination poisoned now, the copy done when its group completes. */
inline void cp_async(uint32_t dst, const void *src, int bytes, int src_bytes) {
  std::memset(smem() + dst, 0x7f, (size_t)bytes);
  g_cur->open.push_back({dst, src, bytes, src_bytes});
}
inline void cp_commit() {
  g_cur->groups.push_back(g_cur->open);
  g_cur->open.clear();
}
inline void cp_wait(int n) {
  auto &gs = g_cur->groups;
  while ((int)gs.size() > n) {
    for (const pending_copy &c : gs.front()) {
      std::memset(smem() + c.dst, 0, (size_t)c.bytes);
      if (c.src_bytes) std::memcpy(smem() + c.dst, c.src, (size_t)c.src_bytes);
    }
    gs.erase(gs.begin());
  }
}

/* clock64 advances CLOCK_STEP a read of the calling thread: a span between two reads of
   one thread with no read between them is exactly CLOCK_STEP (the check counts on it) */
inline constexpr long long CLOCK_STEP = 7;
inline long long clock64() { return g_cur->clock += CLOCK_STEP; }

inline void fiber_entry() {
  (*g_body)();
  cp_wait(0);
  g_cur->done = true;
  g_progress++;
  _longjmp(g_main_jb, 1);
}

/* Runs fiber x until it yields or ends. */
__attribute__((noinline)) inline void run_fiber(fiber &x) {
  g_cur = &x;
  if (!_setjmp(g_main_jb)) {
    if (!x.started) {
      x.started = true;
      setcontext(&x.ctx);
    }
    _longjmp(x.jb, 1);
  }
}

/* Runs grid x block threads of body(), one block at a time, the block's threads
 * as fibers scheduled round robin; a round in which no barrier opens and no
 * thread ends is a deadlock (a collective some lanes of a warp skip): abort. */
inline void launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &body) {
  const int nt = (int)(block.x * block.y * block.z), nw = (nt + 31) / 32;
  g_dim = {grid.x, grid.y, grid.z};
  b_dim = {block.x, block.y, block.z};
  g_body = &body;
  std::vector<fiber> f((size_t)nt);
  std::vector<std::unique_ptr<char[]>> stacks((size_t)nt);
  for (auto &x : stacks) x.reset(new char[1 << 17]);
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        block_state bs;
        bs.nthreads = nt;
        bs.smem.assign(smem_bytes + 16, 0x7f);
        bs.all.expected = nt;
        bs.warp.resize((size_t)nw);
        for (auto &w : bs.warp) w.expected = 32;
        bs.wg.resize((size_t)(nt + 127) / 128);
        for (auto &w : bs.wg) w.expected = 128;
        for (auto &x : bs.xbuf) x.resize((size_t)nw * 32);
        g_block = &bs;
        for (int t = 0; t < nt; t++) {
          fiber &x = f[(size_t)t];
          x = fiber();
          x.tid = {(unsigned)t, 0, 0};
          x.bid = {bx, by, bz};
          x.stack = stacks[(size_t)t].get();
          getcontext(&x.ctx);
          x.ctx.uc_stack.ss_sp = x.stack;
          x.ctx.uc_stack.ss_size = 1 << 17;
          x.ctx.uc_link = nullptr;
          makecontext(&x.ctx, fiber_entry, 0);
        }
        std::vector<int> order((size_t)nt);
        for (int t = 0; t < nt; t++) order[(size_t)t] = t;
        const char *shuffle = std::getenv("FM_LINRNN_SIM_SHUFFLE"), *skew = std::getenv("FM_LINRNN_SIM_SKEW");
        uint64_t rs = shuffle ? std::strtoull(shuffle, nullptr, 10) * 0x9e3779b97f4a7c15ull + bx : 0;
        for (int live = nt; live > 0;) {
          const unsigned long before = g_progress;
          live = 0;
          for (int i = nt - 1; shuffle && i > 0; i--) { /* Fisher-Yates, xorshift */
            rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
            std::swap(order[(size_t)i], order[(size_t)(rs % (uint64_t)(i + 1))]);
          }
          if (skew) { /* each warp alone until a block barrier (or its end) holds every lane */
            for (int wi = 0; wi < nw; wi++) {
              const int w = skew[0] == '2' ? nw - 1 - wi : wi;
              unsigned long seen;
              do {
                seen = g_progress;
                for (int t = w * 32; t < w * 32 + 32 && t < nt; t++)
                  if (!f[(size_t)t].done) run_fiber(f[(size_t)t]);
              } while (g_progress != seen);
            }
            for (const fiber &x : f) live += !x.done;
          } else
            for (int t : order) {
              fiber &x = f[(size_t)t];
              if (x.done) continue;
              run_fiber(x);
              live += !x.done;
            }
          if (live && g_progress == before) {
            fprintf(stderr, "sim: deadlock in block (%u, %u, %u): threads wait on barriers that never open\n", bx, by, bz);
            abort();
          }
        }
        g_block = nullptr;
        g_cur = nullptr;
      }
}

}  // namespace sim

/* The pieces of fm_hopper.cuh the output kernel uses: the wgmma above, the
 * descriptors (fm_wgmma_desc.h, the kernels' own), fences and waits that order
 * nothing here. */
namespace fmh {
template <int TA, int TB> inline void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  sim::wgmma_ss_n64<TA, TB>(d, da, db, accumulate);
}
template <int TB> inline void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  sim::wgmma_rs_n64<TB>(d, a, db);
}
inline void wgmma_fence() {}
inline void wgmma_commit() {}
template <int N> inline void wgmma_wait() {}
template <int R> inline void reg_fence(float (&)[R]) {}
inline void fence_proxy_async() {}
inline unsigned char *smem_aligned_1k(unsigned char *raw) { return raw; } /* offsets from 0: aligned */
inline void stmatrix_x4(uint32_t a, const uint32_t (&r)[4]) { sim::stmatrix(a, r, false); }
inline void stmatrix_x4_trans(uint32_t a, const uint32_t (&r)[4]) { sim::stmatrix(a, r, true); }
}  // namespace fmh

struct float4 {
  float x, y, z, w;
};
struct uint4 {
  uint32_t x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
template <class T> inline T __ldg(const T *p) { return *p; }

#define threadIdx (sim::g_cur->tid)
#define blockIdx (sim::g_cur->bid)
#define gridDim (sim::g_dim)
#define blockDim (sim::b_dim)

#endif
