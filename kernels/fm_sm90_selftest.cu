/* fm_sm90_selftest — the Hopper building blocks of fm_hopper.cuh, each proven
 * on its own before the attention kernel uses them (llm.c style: small, exact
 * checks that name the piece that is wrong):
 *
 *   tma      a (B, S, H, D) bf16 tensor of distinct bit patterns; one box
 *            (64 head-dim elements x 128 tokens of one (b, h), partly past S)
 *            loaded by TMA with 128-byte swizzle; every byte of shared memory
 *            compared with the SW128 atom layout (zeros past S)
 *   ss       S = Q K^T for a 64 x 128 tile at head dim 128 (wgmma m64n128k16,
 *            both operands K-major from TMA-loaded shared memory, 8 k-steps
 *            across two 64-column blocks) against a CPU product
 *   rs128    O = P V, P (64 x 128, bf16) in registers as A fragments, V
 *            (128 keys x 128) MN-major ("transposed") from shared memory
 *   rs64     the same at head dim 64 (wgmma m64n64k16)
 *   ring     the producer/consumer hand-off both sm90 kernels use for data in
 *            shared memory: a two-stage ring on mbarriers with parity waits;
 *            one warp writes a stage with plain stores and every lane arrives
 *            on the stage's full barrier (lane 0 with arrive.expect_tx, as the
 *            kernels' TMA stages, or plainly), the other warp waits, checks
 *            every value and every lane arrives on the stage's empty barrier
 *            (an arrive releases only the arriving thread's own accesses).
 *            `ring-lane0` is the form the kernels used before: __syncwarp,
 *            then lane 0 alone arrives; correct values, but the other lanes'
 *            accesses are not released by an arrive of their own, and
 *            compute-sanitizer's racecheck reports them (bench/gpu.sh's
 *            sanitize experiment runs both; kernels/PERF_NOTES.md)
 *
 * Exit 0 when every check passes, 1 on a mismatch (the first one printed), 2
 * when no sm_90 device is present, 3 for an unknown check name. A gpu-labelled test (ctest).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_bf16.h"
#include "fm_hopper.cuh"
#include "fm_sm90_launch.cuh"

#define CK(call)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "fm_sm90_selftest: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), \
              __LINE__);                                                                    \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

/* ---- tma: the box into shared memory, then shared memory out as it is */
__global__ void tma_kernel(const __grid_constant__ CUtensorMap map, uint16_t *out, int h, int s0, int b,
                           int d0) {
  extern __shared__ unsigned char raw[];
  unsigned char *sm = fmh::smem_aligned_1k(raw);
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    fmh::mbar_init(&bar, 1);
    fmh::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    fmh::mbar_arrive_expect_tx(&bar, 128 * 128);
    fmh::tma_load_4d(sm, &map, &bar, d0, h, s0, b);
  }
  fmh::mbar_wait(&bar, 0);
  for (int i = threadIdx.x; i < 128 * 64; i += blockDim.x) out[i] = ((const uint16_t *)sm)[i];
}

/* ---- ring: warp 0 produces, warp 1 consumes, `rounds` rounds over 2 stages;
   EVERY_LANE: each lane arrives (the kernels' rule), else lane 0 after __syncwarp */
template <bool EXPECT_TX, bool EVERY_LANE> __global__ void ring_kernel(int rounds, int *bad) {
  __shared__ uint64_t full[2], empty[2];
  __shared__ int buf[2][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; s++) {
      fmh::mbar_init(&full[s], EVERY_LANE ? 32 : 1);
      fmh::mbar_init(&empty[s], EVERY_LANE ? 32 : 1);
    }
    fmh::fence_barrier_init();
  }
  __syncthreads();
  for (int r = 0; r < rounds; r++) {
    const int s = r & 1;
    const uint32_t ph = (r >> 1) & 1; /* the stage's use number, mod 2 */
    if (warp == 0) {
      if (r >= 2) fmh::mbar_wait(&empty[s], ph ^ 1);
      buf[s][lane] = r * 32 + lane;
      if (!EVERY_LANE) __syncwarp();
      if (lane == 0) {
        if (EXPECT_TX) fmh::mbar_arrive_expect_tx(&full[s], 0);
        else fmh::mbar_arrive(&full[s]);
      } else if (EVERY_LANE) {
        fmh::mbar_arrive(&full[s]);
      }
    } else {
      fmh::mbar_wait(&full[s], ph);
      if (buf[s][lane] != r * 32 + lane) atomicAdd(bad, 1);
      if (!EVERY_LANE) __syncwarp();
      if (EVERY_LANE || lane == 0) fmh::mbar_arrive(&empty[s]);
    }
  }
}

template <bool EXPECT_TX, bool EVERY_LANE> static int check_ring(void) {
  int *dbad, bad = 0;
  CK(cudaMalloc((void **)&dbad, sizeof(int)));
  CK(cudaMemset(dbad, 0, sizeof(int)));
  ring_kernel<EXPECT_TX, EVERY_LANE><<<1, 64>>>(64, dbad);
  CK(cudaGetLastError());
  CK(cudaMemcpy(&bad, dbad, sizeof(int), cudaMemcpyDeviceToHost));
  CK(cudaFree(dbad));
  printf("%s (%s): %s", EVERY_LANE ? "ring" : "ring-lane0", EXPECT_TX ? "arrive.expect_tx" : "arrive",
         bad ? "FAIL" : "ok");
  if (bad) printf(", %d values read out of turn", bad);
  printf("\n");
  return bad != 0;
}

/* ---- ss / rs: one warpgroup (128 threads) */
template <int HD>
__global__ void mma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                           const __grid_constant__ CUtensorMap tv, const uint16_t *p_bf16, float *s_out,
                           float *o_out) {
  extern __shared__ unsigned char raw[];
  unsigned char *sm = fmh::smem_aligned_1k(raw);
  unsigned char *sq = sm, *sk = sm + 64 * HD * 2, *sv = sk + 128 * HD * 2;
  __shared__ uint64_t bar;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
  if (tid == 0) {
    fmh::mbar_init(&bar, 1);
    fmh::fence_barrier_init();
  }
  __syncthreads();
  if (tid == 0) {
    fmh::mbar_arrive_expect_tx(&bar, (64 + 128 + 128) * HD * 2);
    for (int d = 0; d < HD / 64; d++) {
      fmh::tma_load_4d(sq + d * 64 * 128, &tq, &bar, d * 64, 0, 0, 0);
      fmh::tma_load_4d(sk + d * 128 * 128, &tk, &bar, d * 64, 0, 0, 0);
      fmh::tma_load_4d(sv + d * 128 * 128, &tv, &bar, d * 64, 0, 0, 0);
    }
  }
  fmh::mbar_wait(&bar, 0);
  float s[64];
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++)
    fmh::wgmma_ss_n128(s, fmh::desc_kmajor(fmh::smem_addr(sq), 64, kk),
                       fmh::desc_kmajor(fmh::smem_addr(sk), 128, kk), kk > 0);
  fmh::wgmma_commit();
  fmh::wgmma_wait<0>();
  fmh::reg_fence(s);
  for (int n = 0; n < 16; n++)
    for (int hr = 0; hr < 2; hr++)
      for (int e = 0; e < 2; e++)
        s_out[(16 * warp + g + 8 * hr) * 128 + 8 * n + 2 * c4 + e] = s[4 * n + 2 * hr + e];
  /* P from global as A fragments: rows 16 warp + g (+8), columns 16 kk + 2 c4 (+8) */
  uint32_t pa[8][4];
  for (int kk = 0; kk < 8; kk++)
    for (int r = 0; r < 4; r++) {
      const int row = 16 * warp + g + 8 * (r & 1), col = 16 * kk + 2 * c4 + 8 * (r >> 1);
      pa[kk][r] = (uint32_t)p_bf16[row * 128 + col] | ((uint32_t)p_bf16[row * 128 + col + 1] << 16);
    }
  float o[HD / 2];
  for (int i = 0; i < HD / 2; i++) o[i] = 0.f;
  fmh::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; kk++) fmh::pv_mma<HD>::run(o, pa[kk], fmh::desc_mnmajor(fmh::smem_addr(sv), 128, kk));
  fmh::wgmma_commit();
  fmh::wgmma_wait<0>();
  fmh::reg_fence(o);
  for (int n = 0; n < HD / 8; n++)
    for (int hr = 0; hr < 2; hr++)
      for (int e = 0; e < 2; e++)
        o_out[(16 * warp + g + 8 * hr) * HD + 8 * n + 2 * c4 + e] = o[4 * n + 2 * hr + e];
}

static uint32_t rng = 12345;
static float frand(void) {
  rng = rng * 1664525u + 1013904223u;
  return ((rng >> 8) * (1.0f / 16777216.0f)) * 2.f - 1.f;
}

static int check_tma(void) {
  const int B = 2, S = 200, H = 3, D = 128;
  const size_t n = (size_t)B * S * H * D;
  uint16_t *h = (uint16_t *)malloc(n * 2), *out = (uint16_t *)malloc(128 * 64 * 2);
  for (size_t i = 0; i < n; i++) h[i] = (uint16_t)(i * 7 + 1);
  void *d;
  uint16_t *dout;
  CK(cudaMalloc(&d, n * 2));
  CK(cudaMalloc((void **)&dout, 128 * 64 * 2));
  CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
  CUtensorMap map;
  fm_err err;
  if (fm90::tensor_map_bshd(&map, d, B, S, H, D, 128, &err) != FM_OK) {
    fprintf(stderr, "tma: %s\n", err.msg);
    return 1;
  }
  const int hh = 2, s0 = 128, bb = 1, d0 = 64;
  CK(cudaFuncSetAttribute(tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 128 * 128 + 1024));
  tma_kernel<<<1, 128, 128 * 128 + 1024>>>(map, dout, hh, s0, bb, d0);
  CK(cudaGetLastError());
  CK(cudaMemcpy(out, dout, 128 * 64 * 2, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int r = 0; r < 128 && !bad; r++)
    for (int c = 0; c < 64; c++) {
      const int tok = s0 + r;
      const uint16_t want = tok < S ? h[(((size_t)bb * S + tok) * H + hh) * D + d0 + c] : 0;
      const int pos = r * 64 + (((c >> 3) ^ (r & 7)) << 3) + (c & 7);
      if (out[pos] != want) {
        printf("tma: FAIL at row %d col %d: smem element %d holds 0x%04x, expected 0x%04x\n", r, c, pos,
               out[pos], want);
        bad = 1;
        break;
      }
    }
  if (!bad) printf("tma: ok (SW128 box of 64 x 128, 56 rows past S zero-filled)\n");
  cudaFree(d);
  cudaFree(dout);
  free(h);
  free(out);
  return bad;
}

/* got (rows x cols, fp32) against ref(i, j) to 1e-3 absolute + 1e-3 relative;
 * one line either way. Returns 1 on a mismatch. */
template <class Ref> static int check_close(const char *what, int rows, int cols, const float *got, Ref ref) {
  double worst = 0;
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      const double r = ref(i, j), e = fabs(got[i * cols + j] - r);
      worst = e > worst ? e : worst;
      if (e > 1e-3 + 1e-3 * fabs(r)) {
        printf("%s: FAIL [%d][%d] = %g, expected %g\n", what, i, j, got[i * cols + j], r);
        return 1;
      }
    }
  printf("%s: ok, max |err| %.2e\n", what, worst);
  return 0;
}

template <int HD> static int check_mma(void) {
  const int NQ = 64, NK = 128;
  uint16_t *q = (uint16_t *)malloc(NQ * HD * 2), *k = (uint16_t *)malloc(NK * HD * 2),
           *v = (uint16_t *)malloc(NK * HD * 2), *pm = (uint16_t *)malloc(NQ * NK * 2);
  for (int i = 0; i < NQ * HD; i++) q[i] = fm_f32_to_bf16(frand());
  for (int i = 0; i < NK * HD; i++) k[i] = fm_f32_to_bf16(frand());
  for (int i = 0; i < NK * HD; i++) v[i] = fm_f32_to_bf16(frand());
  for (int i = 0; i < NQ * NK; i++) pm[i] = fm_f32_to_bf16(frand() * 0.5f + 0.5f);
  void *dq, *dk, *dv, *dp;
  float *ds, *dout;
  CK(cudaMalloc(&dq, NQ * HD * 2));
  CK(cudaMalloc(&dk, NK * HD * 2));
  CK(cudaMalloc(&dv, NK * HD * 2));
  CK(cudaMalloc(&dp, NQ * NK * 2));
  CK(cudaMalloc((void **)&ds, NQ * NK * 4));
  CK(cudaMalloc((void **)&dout, NQ * HD * 4));
  CK(cudaMemcpy(dq, q, NQ * HD * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dk, k, NK * HD * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, v, NK * HD * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dp, pm, NQ * NK * 2, cudaMemcpyHostToDevice));
  CUtensorMap tq, tk, tv;
  fm_err err;
  /* (B, S, H, D) = (1, rows, 1, HD) */
  if (fm90::tensor_map_bshd(&tq, dq, 1, NQ, 1, HD, 64, &err) != FM_OK ||
      fm90::tensor_map_bshd(&tk, dk, 1, NK, 1, HD, 128, &err) != FM_OK ||
      fm90::tensor_map_bshd(&tv, dv, 1, NK, 1, HD, 128, &err) != FM_OK) {
    fprintf(stderr, "mma: %s\n", err.msg);
    return 1;
  }
  const int smem = (64 + 256) * HD * 2 + 1024;
  CK(cudaFuncSetAttribute(mma_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  mma_kernel<HD><<<1, 128, smem>>>(tq, tk, tv, (const uint16_t *)dp, ds, dout);
  CK(cudaGetLastError());
  float *s = (float *)malloc(NQ * NK * 4), *o = (float *)malloc(NQ * HD * 4);
  CK(cudaMemcpy(s, ds, NQ * NK * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(o, dout, NQ * HD * 4, cudaMemcpyDeviceToHost));
  /* bf16 products in fp64 against the fp32 accumulators */
  auto S = [&](int i, int j) {
    double r = 0;
    for (int d = 0; d < HD; d++) r += (double)fm_bf16_to_f32(q[i * HD + d]) * fm_bf16_to_f32(k[j * HD + d]);
    return r;
  };
  auto O = [&](int i, int d) {
    double r = 0;
    for (int j = 0; j < NK; j++) r += (double)fm_bf16_to_f32(pm[i * NK + j]) * fm_bf16_to_f32(v[j * HD + d]);
    return r;
  };
  char what_s[32], what_o[32];
  snprintf(what_s, sizeof what_s, "ss (hd %d): S", HD);
  snprintf(what_o, sizeof what_o, "rs%d: O", HD);
  const int bad = check_close(what_s, NQ, NK, s, S) || check_close(what_o, NQ, HD, o, O);
  cudaFree(dq);
  cudaFree(dk);
  cudaFree(dv);
  cudaFree(dp);
  cudaFree(ds);
  cudaFree(dout);
  free(q);
  free(k);
  free(v);
  free(pm);
  free(s);
  free(o);
  return bad;
}

/* Which checks run: every one (no argument), or those named ("tma", "mma",
   "ring", "ring-lane0"; the sanitize steps run the two rings apart). */
static int wanted(int argc, char **argv, const char *name) {
  if (argc < 2) return strcmp(name, "ring-lane0") != 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], name)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "tma") && strcmp(argv[i], "mma") && strcmp(argv[i], "ring") &&
        strcmp(argv[i], "ring-lane0")) {
      fprintf(stderr, "fm_sm90_selftest: unknown check '%s' (tma, mma, ring, ring-lane0)\n", argv[i]);
      return 3;
    }
  int n = 0;
  cudaDeviceProp prop;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
      prop.major != 9) {
    printf("fm_sm90_selftest: skipped, no sm_90 device\n");
    return 2;
  }
  int bad = 0;
  if (wanted(argc, argv, "tma")) bad |= check_tma();
  if (wanted(argc, argv, "mma")) bad |= check_mma<128>() | check_mma<64>();
  if (wanted(argc, argv, "ring")) bad |= check_ring<false, true>() | check_ring<true, true>();
  if (wanted(argc, argv, "ring-lane0")) bad |= check_ring<false, false>() | check_ring<true, false>();
  printf("fm_sm90_selftest: %s\n", bad ? "FAIL" : "all ok");
  return bad ? 1 : 0;
}
