/* fm_linrnn_check — the GPU check and the timing of the chunkwise
 * linear-attention forward (fm_linrnn.h). ctest linrnn_gpu runs the check.
 *
 *   fm_linrnn_check            every case below; one line per case, a summary
 *   fm_linrnn_check --quick    the first case of each shape and layout group
 *   fm_linrnn_check --case N   case N only (as numbered in the output)
 *   fm_linrnn_check --kseg K   one checkpoint spacing only (-1 the library's choice,
 *                              0 none, K chunks), instead of all three below
 *   fm_linrnn_check --bench    the timing table (kernels/PERF_NOTES.md, "Linear RNN");
 *                              --bench 64:32 128:64:64 128:d64:64 ... only those (C, L[, c]) points (c 16 by
 *                              default; dL: log-normal lengths of mean L, sigma 1, at least 16, seeded);
 *                              C:pB:T:H:D a production shape: B packed documents of T tokens, H heads,
 *                              dk = dv = D, c 64
 *   fm_linrnn_check --skip-only --bench ...   SKIP alone, no instrumented comparison (A/B runs)
 *
 * Each case draws bf16 q, k, v (seeded) and g by its mode, packs documents of
 * the case's lengths with cu_seqlens, runs the three variants and their
 * instrumented builds three times (state checkpoints and grid as the library
 * chooses; no checkpoints on 5 CTAs; checkpoints every 3 chunks on 7 CTAs: a
 * CTA walks many items one after another, fm_linrnn_forward_tuned), and
 * checks each time, each check named in the output:
 *   o      against a token-by-token fp64 recurrence written here (S_t = e^g_t
 *          S_{t-1} + k_t v_t^T, reset at document starts, o_t = scale S_t^T q_t):
 *          the error beyond the output's own bf16 rounding, max over elements of
 *          max(0, |o - ref| - half an ulp of o), over max |ref|, at most 1e-3 (a
 *          bf16 output alone is off by up to 2^-9 relative, ~2e-3 of max |ref|: the
 *          raw max |o - ref| / max |ref| is printed beside it, bar 2^-7)
 *   final  each document's final state (fp32) against the recurrence's:
 *          max |err| / max |ref| at most 1e-3
 *   bits   skip == causal == noskip, o and final states byte for byte
 *   class  the instrumented builds' tile_class against a classification written
 *          here from cu_seqlens (the min/max rule on the documents: sub-tile rows
 *          [r0, r1), keys [j0, j1) MASKED when r0 >= the latest end of their
 *          documents or r1 <= j0, PARTIAL when r1 > the earliest end or
 *          r0 < j1 - 1, else UNMASKED; tiles past T MASKED), every head
 *   instr  instrumented o and final states byte-equal to the plain build's;
 *          cycles 0 exactly on the sub-tiles the variant skips (skip: MASKED;
 *          causal: above the diagonal; noskip: none)
 * The cases: every built (dk, dv, C, c) with log-normal, fixed-17 and single
 * documents (T 1000, g in [-0.5, 0]); four shapes with every layout (lengths 1,
 * 2, 15, 16, 17, 64, 100, 2048, log-normal, one document) and every g mode
 * (in [-0.5, 0], 0, strongly negative with -inf); edges (T of 1, 17, 65, 129,
 * 130, 191, 383, 640 with lengths that end documents on chunk ends).
 * Exit 0 when every case passes, 1 on any failure, 2 when there is no sm_90
 * device (ctest: skipped), 3 on bad arguments. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <random>
#include <vector>

#ifdef FM_LINRNN_SIM
#include "fm_linrnn_sim.h"
#else
#include <cuda_runtime.h>

#include "fm_attn.h"
#include "fm_cupti.h"
#endif
#include "fm_bf16.h"
#include "fm_linrnn.h"
#include "fm_linrnn_launch.cuh"
#include "fm_tile_rule.h"

#define CK(call)                                                                                 \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "fm_linrnn_check: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

/* ------------------------------------------------------------------ cases */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
struct rng {
  uint64_t s;
  double uni() { return (double)((s = mix(s)) >> 11) * (1.0 / 9007199254740992.0); }
  double normal() { /* sum of four uniforms, variance 1 */
    double a = 0;
    for (int i = 0; i < 4; i++) a += uni() * 2 - 1;
    return a * 0.8660254037844386;
  }
};

enum { DOCS_FIXED, DOCS_RANDOM, DOCS_ONE };
enum { G_SMALL, G_ZERO, G_STRONG, G_NMODES };
static const char *const g_names[G_NMODES] = {"g in [-0.5, 0]", "g = 0", "g strong (in [-12, -3], 1/13 -inf, 1/7 0)"};

struct tcase {
  int dk, dv, C, c, T, H, docs, L, gmode;
  uint64_t seed;
};

/* Document lengths: fixed L (the last one cut at T), one document, or drawn
 * log-normal (mean L, sigma 1, at least 1) and cut at T. */
static std::vector<int32_t> make_cu(const tcase &tc) {
  std::vector<int32_t> cu(1, 0);
  rng r{tc.seed * 7919 + 17};
  while (cu.back() < tc.T) {
    int len = tc.L;
    if (tc.docs == DOCS_ONE) len = tc.T;
    if (tc.docs == DOCS_RANDOM) len = std::max(1, (int)lround(exp(log((double)tc.L) - 0.5 + r.normal())));
    cu.push_back(std::min(tc.T, cu.back() + len));
  }
  return cu;
}

/* The case list: every built shape on three layouts, then every layout and g
 * mode on four shapes. */
static std::vector<tcase> make_cases() {
  std::vector<tcase> v;
  const int dks[2] = {64, 128}, dvs[3] = {64, 128, 256}, Cs[2] = {64, 128}, cs[3] = {16, 32, 64};
  uint64_t seed = 1;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 2; c++)
        for (int d = 0; d < 3; d++) {
          if (cs[d] > Cs[c]) continue;
          const tcase base = {dks[a], dvs[b], Cs[c], cs[d], 1000, 2 + (int)(seed % 2), DOCS_RANDOM, 40, G_SMALL, seed};
          tcase x = base;
          v.push_back(x);
          x.docs = DOCS_FIXED, x.L = 17, x.seed = ++seed;
          v.push_back(x);
          x.docs = DOCS_ONE, x.L = 0, x.seed = ++seed;
          v.push_back(x);
          ++seed;
        }
  /* the fourth shape takes the two-pass path (fm_linrnn.h: C 128, c 64, dk 128) */
  const int shapes[4][4] = {{128, 256, 64, 16}, {128, 256, 128, 16}, {64, 128, 128, 32}, {128, 256, 128, 64}};
  const int Ls[8] = {1, 2, 15, 16, 17, 64, 100, 2048};
  for (int s = 0; s < 4; s++)
    for (int gm = 0; gm < G_NMODES; gm++)
      for (int l = 0; l < 10; l++) {
        tcase x = {shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], 1000, 2, DOCS_FIXED, 0, gm, ++seed};
        if (l < 8) x.L = Ls[l];
        if (l == 8) x.docs = DOCS_RANDOM, x.L = 40;
        if (l == 9) x.docs = DOCS_ONE;
        if (x.L <= 2 && x.docs == DOCS_FIXED) x.T = 256; /* final states: one per token */
        if (x.L == 2048) x.T = 4200;
        v.push_back(x);
      }
  /* edges: one token, a chunk and a bit, one head, documents of one token at chunk ends */
  const int edges[8][7] = {{64, 64, 64, 16, 1, 1, DOCS_ONE},       {64, 64, 64, 16, 17, 1, DOCS_RANDOM},
                           {64, 128, 64, 32, 65, 2, DOCS_ONE},      {128, 64, 128, 16, 129, 1, DOCS_ONE},
                           {128, 256, 128, 64, 130, 2, DOCS_RANDOM}, {128, 256, 64, 16, 191, 1, DOCS_FIXED},
                           {64, 256, 128, 16, 383, 3, DOCS_FIXED},   {128, 128, 64, 64, 640, 2, DOCS_FIXED}};
  for (int e = 0; e < 8; e++) {
    tcase x = {edges[e][0], edges[e][1], edges[e][2], edges[e][3], edges[e][4], edges[e][5], edges[e][6],
               e == 5 ? 63 : e == 6 ? 127 : e == 7 ? 64 : 5, G_SMALL, ++seed};
    if (e == 7) x.gmode = G_STRONG;
    v.push_back(x);
  }
  return v;
}

/* ------------------------------------------------------ inputs, reference */

struct inputs {
  std::vector<int32_t> cu;
  std::vector<uint16_t> q, k, v; /* bf16 bits */
  std::vector<float> g;
};

static inputs make_inputs(const tcase &tc) {
  inputs in;
  in.cu = make_cu(tc);
  rng r{tc.seed};
  const size_t T = (size_t)tc.T, H = (size_t)tc.H;
  in.q.resize(T * H * tc.dk);
  in.k.resize(T * H * tc.dk);
  in.v.resize(T * H * tc.dv);
  for (auto &x : in.q) x = fm_f32_to_bf16((float)r.normal());
  for (auto &x : in.k) x = fm_f32_to_bf16((float)r.normal());
  for (auto &x : in.v) x = fm_f32_to_bf16((float)r.normal());
  in.g.resize(T * H);
  for (size_t i = 0; i < in.g.size(); i++) {
    float x = -0.5f * (float)r.uni();
    if (tc.gmode == G_ZERO) x = 0.f;
    if (tc.gmode == G_STRONG) x = i % 13 == 5 ? -INFINITY : i % 7 == 3 ? 0.f : (float)(-3.0 - 9.0 * r.uni());
    in.g[i] = x;
  }
  return in;
}

/* The fp64 recurrence, token by token: o (T, H, dv) and final states (ndocs, H, dk, dv). */
static void reference(const tcase &tc, const inputs &in, float scale, std::vector<double> &o, std::vector<double> &fs) {
  const int T = tc.T, H = tc.H, dk = tc.dk, dv = tc.dv, nd = (int)in.cu.size() - 1;
  o.assign((size_t)T * H * dv, 0.0);
  fs.assign((size_t)nd * H * dk * dv, 0.0);
  std::vector<double> S((size_t)dk * dv), kf(dk), qf(dk);
  for (int h = 0; h < H; h++)
    for (int d = 0; d < nd; d++) {
      std::fill(S.begin(), S.end(), 0.0);
      for (int t = in.cu[d]; t < in.cu[d + 1]; t++) {
        const double a = t == in.cu[d] ? 0.0 : exp((double)in.g[(size_t)t * H + h]);
        const uint16_t *kt = &in.k[((size_t)t * H + h) * dk], *qt = &in.q[((size_t)t * H + h) * dk];
        const uint16_t *vt = &in.v[((size_t)t * H + h) * dv];
        for (int i = 0; i < dk; i++) kf[i] = fm_bf16_to_f32(kt[i]), qf[i] = fm_bf16_to_f32(qt[i]);
        for (int i = 0; i < dk; i++)
          for (int j = 0; j < dv; j++) S[(size_t)i * dv + j] = a * S[(size_t)i * dv + j] + kf[i] * fm_bf16_to_f32(vt[j]);
        double *ot = &o[((size_t)t * H + h) * dv];
        for (int i = 0; i < dk; i++)
          for (int j = 0; j < dv; j++) ot[j] += qf[i] * S[(size_t)i * dv + j];
        for (int j = 0; j < dv; j++) ot[j] *= scale;
      }
      std::copy(S.begin(), S.end(), fs.begin() + ((size_t)d * H + h) * dk * dv);
    }
}

/* Sub-tile classes from cu_seqlens (the header's rule), (nchunks, n, n). */
static std::vector<uint8_t> cpu_classes(const tcase &tc, const std::vector<int32_t> &cu) {
  const int T = tc.T, C = tc.C, c = tc.c, n = C / c, nch = (T + C - 1) / C;
  std::vector<int32_t> end(T);
  for (size_t d = 0; d + 1 < cu.size(); d++)
    for (int t = cu[d]; t < cu[d + 1]; t++) end[t] = cu[d + 1];
  std::vector<uint8_t> cls((size_t)nch * n * n);
  for (int ch = 0; ch < nch; ch++)
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) {
        const int r0 = ch * C + i * c, r1 = std::min(r0 + c, T), j0 = ch * C + j * c, j1 = std::min(j0 + c, T);
        int k = 0; /* MASKED */
        if (r0 < T && j0 < T) {
          const int mx = *std::max_element(&end[j0], &end[0] + j1), mn = *std::min_element(&end[j0], &end[0] + j1);
          k = (r0 >= mx || r1 <= j0) ? 0 : (r1 > mn || r0 < j1 - 1) ? 1 : 2;
        }
        cls[((size_t)ch * n + i) * n + j] = (uint8_t)k;
      }
  return cls;
}

/* The rule against the elements themselves (a self-check of the test): a
 * MASKED sub-tile sees nothing, an UNMASKED one sees every element. */
static int rule_contradictions(const tcase &tc, const std::vector<int32_t> &cu, const std::vector<uint8_t> &cls) {
  const int T = tc.T, C = tc.C, c = tc.c, n = C / c, nch = (T + C - 1) / C;
  std::vector<int32_t> start(T);
  for (size_t d = 0; d + 1 < cu.size(); d++)
    for (int t = cu[d]; t < cu[d + 1]; t++) start[t] = cu[d];
  int bad = 0;
  for (int ch = 0; ch < nch; ch++)
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) {
        int vis = 0, all = 0;
        for (int t = ch * C + i * c; t < ch * C + (i + 1) * c; t++)
          for (int s = ch * C + j * c; s < ch * C + (j + 1) * c; s++) {
            if (t >= T || s >= T) continue;
            all++;
            vis += s <= t && s >= start[t];
          }
        const int k = cls[((size_t)ch * n + i) * n + j];
        bad += (k == FM_TILE_MASKED && vis > 0) || (k == FM_TILE_UNMASKED && vis < all);
      }
  return bad;
}

/* --------------------------------------------------------------- device side */

struct dbuf {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float *g = nullptr, *fs = nullptr;
  int32_t *cu = nullptr;
  uint8_t *tc = nullptr;
  int64_t *ty = nullptr;
};

template <class T> static T *upload(const std::vector<T> &h) {
  void *d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return (T *)d;
}

/* What one run returns: o (bf16 bits), final states, classes and cycles. */
struct result {
  std::vector<uint16_t> o;
  std::vector<float> fs;
  std::vector<uint8_t> cls;
  std::vector<int64_t> cyc;
  char err[600];
};

/* One launch of variant v (instrumented or not), synchronized and read back.
 * o and the instrumentation buffers are filled with a pattern first, so that
 * an element the kernel does not write shows. */
static bool run(const fm_linrnn_problem &pb, const dbuf &b, int v, int instr, int kseg, size_t ntiles, result &r) {
  const size_t no = (size_t)pb.tokens * pb.heads * pb.dv, nf = (size_t)pb.ndocs * pb.heads * pb.dk * pb.dv;
  CK(cudaMemset(b.o, 0xff, no * 2));
  CK(cudaMemset(b.fs, 0xff, nf * 4));
  CK(cudaMemset(b.tc, 0xee, ntiles));
  CK(cudaMemset(b.ty, 0xff, ntiles * 8));
  fm_err e;
  e.msg[0] = 0;
  /* the library's path; or checkpoints every kseg chunks and a grid of 5 or 7
     CTAs, so that each CTA walks many units (items one after another) */
  fm_status st = kseg == -1 ? fm_linrnn_forward(&pb, (fm_linrnn_variant)v, instr, NULL, &e)
                            : fm_linrnn_forward_tuned(&pb, (fm_linrnn_variant)v, instr, kseg, kseg ? 7 : 5, NULL, &e);
  cudaError_t ce = cudaDeviceSynchronize();
  if (st != FM_OK || ce != cudaSuccess) {
    snprintf(r.err, sizeof r.err, "%s %s, checkpoints %d: %s", fm_linrnn_variant_name((fm_linrnn_variant)v),
             instr ? "instrumented" : "plain", kseg, st != FM_OK ? e.msg : cudaGetErrorString(ce));
    return false;
  }
  r.o.resize(no);
  r.fs.resize(nf);
  CK(cudaMemcpy(r.o.data(), b.o, no * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.fs.data(), b.fs, nf * 4, cudaMemcpyDeviceToHost));
  if (instr) {
    r.cls.resize(ntiles);
    r.cyc.resize(ntiles);
    CK(cudaMemcpy(r.cls.data(), b.tc, ntiles, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r.cyc.data(), b.ty, ntiles * 8, cudaMemcpyDeviceToHost));
  }
  return true;
}

/* ------------------------------------------------------------------- checks */

struct verdict {
  bool ok = true;
  char why[2048] = "";
  void fail(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
};
void verdict::fail(const char *fmt, ...) {
  ok = false;
  size_t n = strlen(why);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why + n, sizeof why - n, fmt, ap);
  va_end(ap);
}

/* Half an ulp of the bf16 value x (0 for 0). */
static double half_ulp_bf16(float x) {
  if (x == 0.f || !isfinite(x)) return 0.0;
  int e;
  frexp(fabs((double)x), &e); /* |x| in [2^(e-1), 2^e) */
  return ldexp(1.0, e - 1 - 8);
}

/* o against the reference: *excess (beyond the output's rounding) and *raw. */
static void compare_o(const tcase &tc, const std::vector<uint16_t> &o, const std::vector<double> &ref, double *excess,
                      double *raw, verdict &vd) {
  double mref = 0, mx = 0, mraw = 0;
  size_t worst = 0;
  for (double x : ref) mref = std::max(mref, fabs(x));
  for (size_t i = 0; i < o.size(); i++) {
    const float g = fm_bf16_to_f32(o[i]);
    const double e = fabs((double)g - ref[i]);
    if (!(e == e)) { /* NaN, or an element never written (0xffff is a NaN) */
      vd.fail(" o[token %zu, head %zu, col %zu] is NaN (not written?);", i / tc.dv / tc.H, i / tc.dv % tc.H,
              i % tc.dv);
      *excess = *raw = INFINITY;
      return;
    }
    mraw = std::max(mraw, e);
    const double x = e - half_ulp_bf16(g);
    if (x > mx) mx = x, worst = i;
  }
  *excess = mref > 0 ? mx / mref : mx;
  *raw = mref > 0 ? mraw / mref : mraw;
  if (*excess > 1e-3 || *raw > 0x1p-7)
    vd.fail(" o error %.3g beyond bf16 rounding (bar 1e-3), raw %.3g (bar 2^-7), worst at token %zu head %zu col %zu: "
            "gpu %.6g ref %.6g;",
            *excess, *raw, worst / tc.dv / tc.H, worst / tc.dv % tc.H, worst % tc.dv,
            (double)fm_bf16_to_f32(o[worst]), ref[worst]);
}

static double compare_fs(const tcase &tc, const std::vector<float> &fs, const std::vector<double> &ref,
                         verdict &vd) {
  double mref = 0, mx = 0;
  size_t worst = 0;
  for (double x : ref) mref = std::max(mref, fabs(x));
  for (size_t i = 0; i < fs.size(); i++) {
    const double e = fabs((double)fs[i] - ref[i]);
    if (!(e <= mx)) mx = e, worst = i; /* NaN counts as worst */
  }
  const double rel = mref > 0 ? mx / mref : mx;
  const size_t per = (size_t)tc.dk * tc.dv;
  if (!(rel <= 1e-3))
    vd.fail(" final state error %.3g (bar 1e-3), worst doc %zu head %zu (row %zu, col %zu): gpu %.6g ref %.6g;", rel,
            worst / per / tc.H, worst / per % tc.H, worst % per / tc.dv, worst % tc.dv, (double)fs[worst], ref[worst]);
  return rel;
}

/* Byte-equality of two runs' o and final states. */
static void same_bits(const result &a, const result &b, const char *what, verdict &vd) {
  const bool o = a.o.size() == b.o.size() && !memcmp(a.o.data(), b.o.data(), a.o.size() * 2);
  const bool f = a.fs.size() == b.fs.size() && !memcmp(a.fs.data(), b.fs.data(), a.fs.size() * 4);
  if (o && f) return;
  size_t i = 0;
  if (!o)
    while (i < a.o.size() && a.o[i] == b.o[i]) i++;
  vd.fail(" %s differ (%s%s%s, first o element %zu);", what, o ? "" : "o", !o && !f ? " and " : "", f ? "" : "final",
          o ? (size_t)0 : i);
}

/* Instrumented record of variant v: classes against the CPU's, cycles 0
 * exactly on the skipped sub-tiles. Emulated (FM_LINRNN_SIM): every span is
 * sim::CLOCK_STEP, so a visited sub-tile holds exactly that times its (c/16)^2
 * 16 x 16 blocks on the fused kernel (each block counted once, by one unit) and
 * that once on the two-pass path (two: one span a sub-tile). */
static void check_record(const tcase &tc, int v, bool two, const result &r, const std::vector<uint8_t> &cpu,
                         verdict &vd) {
  (void)two; /* the emulated build's expectation only */
  const int n = tc.C / tc.c;
  const size_t per_head = cpu.size();
  size_t cls_bad = 0, cyc_bad = 0, first_cls = 0, first_cyc = 0;
  for (size_t x = 0; x < r.cls.size(); x++) {
    const size_t y = x % per_head;
    const int i = (int)(y / n % n), j = (int)(y % n), k = cpu[y];
    if (r.cls[x] != k && !cls_bad++) first_cls = x;
    const bool skipped = v == FM_LINRNN_SKIP ? k == FM_TILE_MASKED : v == FM_LINRNN_CAUSAL ? j > i : false;
#ifdef FM_LINRNN_SIM
    if (r.cyc[x] != (skipped ? 0 : sim::CLOCK_STEP * (two ? 1 : (tc.c / 16) * (tc.c / 16))))
#else
    if ((r.cyc[x] == 0) != skipped || r.cyc[x] < 0)
#endif
      if (!cyc_bad++) first_cyc = x;
  }
  const char *vn = fm_linrnn_variant_name((fm_linrnn_variant)v);
  if (cls_bad) {
    const size_t y = first_cls % per_head;
    vd.fail(" %s: %zu tile classes differ from the CPU's, first head %zu chunk %zu tile (%zu, %zu): gpu %d cpu %d;", vn,
            cls_bad, first_cls / per_head, y / n / n, y / n % n, y % n, r.cls[first_cls], cpu[y]);
  }
  if (cyc_bad) {
    const size_t y = first_cyc % per_head;
    vd.fail(" %s: %zu tiles have cycles where they should not (0 exactly on skipped tiles; emulated: a visited "
            "one its blocks' spans), first head %zu chunk %zu "
            "tile (%zu, %zu) class %d: %lld cycles;",
            vn, cyc_bad, first_cyc / per_head, y / n / n, y / n % n, y % n, cpu[y], (long long)r.cyc[first_cyc]);
  }
}

/* ------------------------------------------------------------------ one case */

/* --kseg K: only checkpoint spacing K (-1 auto, 0 none); -2: all three. */
static int g_kseg_only = -2;
struct bench_point {
  int C, L, c;
  bool drawn; /* log-normal lengths of mean L (sigma 1, at least 16), else fixed */
  int B, H, D; /* a production shape (B > 0): B documents of L tokens, H heads, dk = dv = D */
};
static bool g_skip_only = false; /* --skip-only: the bench times SKIP alone (A/B runs) */
static std::vector<bench_point> g_bench_only; /* --bench C:L[:c] ...: only these points, in order (empty: all) */
static const int kBenchLens[7] = {16, 32, 64, 128, 256, 2048, 65536}; /* --bench's document lengths */

/* One point after --bench, appended to g_bench_only: C:L[:c] (C 64 or 128, L
 * one of kBenchLens, dL: log-normal lengths of mean L; c 16 (default), 32 or
 * 64, c <= C) or C:pB:T:H:D (a production shape at c 64: B documents of T
 * tokens, H heads, dk = dv = D, within the bench's buffers). 1: a point; 0:
 * not one (the next argument); -1: a bad point, said on stderr. */
static int parse_point(const char *a) {
  int c, l, sub, pB, pT, pH, pD;
  char d;
  if (sscanf(a, "%d:p%d:%d:%d:%d", &c, &pB, &pT, &pH, &pD) == 5) {
    if ((c != 64 && c != 128) || (pD != 64 && pD != 128) || pB < 1 || pT < 16 || pH < 1 ||
        (int64_t)pB * pT * pH > 65536 * 16 || (int64_t)pB * pT > 65536) {
      fprintf(stderr, "fm_linrnn_check: --bench %s: C:pB:T:H:D needs C 64 or 128, D 64 or 128, T >= 16, B T H at "
                      "most 65536 x 16 token-heads and B T at most 65536\n", a);
      return -1;
    }
    g_bench_only.push_back({c, pT, 64, false, pB, pH, pD});
    return 1;
  }
  const bool drawn = sscanf(a, "%d:%c%d", &c, &d, &l) == 3 && d == 'd';
  if (!drawn && sscanf(a, "%d:%d", &c, &l) != 2) return 0;
  if (sscanf(a, drawn ? "%*d:d%*d:%d" : "%*d:%*d:%d", &sub) != 1) sub = 16;
  bool len_ok = false;
  for (int k : kBenchLens) len_ok |= l == k;
  if ((c != 64 && c != 128) || !len_ok || (sub != 16 && sub != 32 && sub != 64) || sub > c) {
    fprintf(stderr, "fm_linrnn_check: --bench %s: C must be 64 or 128, L one of 16, 32, 64, 128, 256, 2048, 65536 "
                    "(dL: log-normal lengths of mean L) and c 16, 32 or 64 with c <= C\n", a);
    return -1;
  }
  g_bench_only.push_back({c, l, sub, drawn, 0, 0, 0});
  return 1;
}

static const char *docs_name(const tcase &tc, char *buf, size_t cap) {
  if (tc.docs == DOCS_ONE) snprintf(buf, cap, "one document");
  else if (tc.docs == DOCS_RANDOM) snprintf(buf, cap, "log-normal lengths, mean %d", tc.L);
  else snprintf(buf, cap, "fixed length %d", tc.L);
  return buf;
}

/* Runs every variant of case tc, plain and instrumented, and checks them. */
static bool run_case(int idx, const tcase &tc) {
  const inputs in = make_inputs(tc);
  const int nd = (int)in.cu.size() - 1;
  const float scale = 1.f / sqrtf((float)tc.dk);
  std::vector<double> oref, fsref;
  reference(tc, in, scale, oref, fsref);
  const std::vector<uint8_t> cpu = cpu_classes(tc, in.cu);
  verdict vd;
  if (int bad = rule_contradictions(tc, in.cu, cpu)) vd.fail(" the test's own rule contradicts %d sub-tiles;", bad);
  dbuf b;
  b.q = upload(in.q), b.k = upload(in.k), b.v = upload(in.v), b.g = upload(in.g), b.cu = upload(in.cu);
  const size_t ntiles = cpu.size() * tc.H;
  CK(cudaMalloc(&b.o, (size_t)tc.T * tc.H * tc.dv * 2));
  CK(cudaMalloc((void **)&b.fs, (size_t)nd * tc.H * tc.dk * tc.dv * 4));
  CK(cudaMalloc((void **)&b.tc, ntiles));
  CK(cudaMalloc((void **)&b.ty, ntiles * 8));
  fm_linrnn_problem pb;
  memset(&pb, 0, sizeof pb);
  pb.tokens = tc.T, pb.heads = tc.H, pb.dk = tc.dk, pb.dv = tc.dv, pb.chunk = tc.C, pb.sub = tc.c, pb.ndocs = nd;
  pb.scale = scale, pb.cu_seqlens = b.cu, pb.q = b.q, pb.k = b.k, pb.v = b.v, pb.g = b.g, pb.o = b.o;
  pb.final_state = b.fs, pb.tile_class = b.tc, pb.tile_cycles = b.ty;
  static result r[FM_LINRNN_NVARIANTS], ri[FM_LINRNN_NVARIANTS];
  double excess = 0, raw = 0, fserr = 0;
  for (int m = 0; m < 3; m++) {
    const int kseg = g_kseg_only != -2 ? g_kseg_only : m == 0 ? -1 : m == 1 ? 0 : 3;
    if (g_kseg_only != -2 && m > 0) break;
    char pre[64];
    snprintf(pre, sizeof pre, " [checkpoints %s]",
             kseg == -1 ? "auto" : kseg == 0 ? "none, 5 CTAs" : "every 3 chunks, 7 CTAs");
    verdict vm;
    bool ran = true;
    for (int v = 0; v < FM_LINRNN_NVARIANTS && ran; v++) {
      ran = run(pb, b, v, 0, kseg, ntiles, r[v]);
      if (!ran) vm.fail(" launch failed: %s;", r[v].err);
      else if (!(ran = run(pb, b, v, 1, kseg, ntiles, ri[v]))) vm.fail(" launch failed: %s;", ri[v].err);
    }
    if (ran && kseg == -1) { /* the caller's workspace (poisoned first): the same bits; one too small or
                                misaligned: refused */
      fm_linrnn_problem pw = pb;
      const size_t need = fm_linrnn_workspace_bytes(&pb);
      pw.workspace_bytes = need;
      CK(cudaMalloc(&pw.workspace, need + 256)); /* room for the misaligned one below */
      CK(cudaMemset(pw.workspace, 0xff, need + 256));
      static result rw;
      if (!run(pw, b, FM_LINRNN_SKIP, 0, -1, ntiles, rw)) vm.fail(" launch with the caller's workspace failed: %s;", rw.err);
      else same_bits(r[FM_LINRNN_SKIP], rw, "the library's workspace and the caller's", vm);
      fm_err e;
      pw.workspace_bytes--;
      if (fm_linrnn_forward(&pw, FM_LINRNN_SKIP, 0, NULL, &e) != FM_EINVAL)
        vm.fail(" a workspace one byte short was not refused;");
      void *base = pw.workspace;
      pw.workspace = (char *)base + 16; /* large enough, 16-byte aligned only */
      pw.workspace_bytes = need;
      if (fm_linrnn_forward(&pw, FM_LINRNN_SKIP, 0, NULL, &e) != FM_EINVAL)
        vm.fail(" a workspace not 256-byte aligned was not refused;");
      CK(cudaFree(base));
    }
    if (ran) {
      double ex, rw;
      compare_o(tc, r[FM_LINRNN_SKIP].o, oref, &ex, &rw, vm);
      excess = std::max(excess, ex), raw = std::max(raw, rw);
      fserr = std::max(fserr, compare_fs(tc, r[FM_LINRNN_SKIP].fs, fsref, vm));
      same_bits(r[FM_LINRNN_SKIP], r[FM_LINRNN_CAUSAL], "skip and causal", vm);
      same_bits(r[FM_LINRNN_SKIP], r[FM_LINRNN_NOSKIP], "skip and noskip", vm);
      for (int v = 0; v < FM_LINRNN_NVARIANTS; v++) {
        check_record(tc, v, fm_linrnn_two_pass(&pb), ri[v], cpu, vm);
        char what[64];
        snprintf(what, sizeof what, "%s instrumented and plain", fm_linrnn_variant_name((fm_linrnn_variant)v));
        same_bits(r[v], ri[v], what, vm);
      }
    }
    if (!vm.ok) vd.fail("%s%s", pre, vm.why);
  }
  size_t masked = 0;
  for (uint8_t k : cpu) masked += k == FM_TILE_MASKED;
  char dn[64];
  printf("case %3d %s: dk %d dv %d C %d c %d | T %d H %d | %s (%d docs) | %s | o %.1e beyond bf16 rounding (raw "
         "%.1e) | final %.1e | rho %.3f%s%s\n",
         idx, vd.ok ? "ok  " : "FAIL", tc.dk, tc.dv, tc.C, tc.c, tc.T, tc.H, docs_name(tc, dn, sizeof dn), nd,
         g_names[tc.gmode], excess, raw, fserr, (double)masked / (double)cpu.size(),
         vd.ok ? " | skip = causal = noskip, classes, instrumented: same (library's path; 5 CTAs; every 3, 7 CTAs)"
               : "\n   ",
         vd.why);
  fflush(stdout);
  const void *bufs[9] = {b.q, b.k, b.v, b.g, b.cu, b.o, b.fs, b.tc, b.ty};
  for (const void *x : bufs) CK(cudaFree((void *)x));
  return vd.ok;
}

/* ------------------------------------------------------------------- timing */

#ifndef FM_LINRNN_SIM
/* g uniform in [-0.5, 0], seeded, on the device. */
__global__ void fill_g_kernel(float *g, int64_t n, uint64_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint64_t x = ((uint64_t)i + seed) * 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    g[i] = -0.5f * (float)((x ^ (x >> 31)) >> 40) * (1.f / 16777216.f);
  }
}

struct launch_ctx {
  fm_linrnn_problem pb;
  int variant, instr;
};
static fm_status launch_one(void *user, void *stream, fm_err *err) {
  const launch_ctx *c = (const launch_ctx *)user;
  return fm_linrnn_forward(&c->pb, (fm_linrnn_variant)c->variant, c->instr, stream, err);
}

/* One (C, L) row group: each variant under the sustained protocol, then the
 * instrumented skip against the plain one, interleaved. */
static int bench_one(fm_linrnn_problem pb, int L, bool drawn, int B, cudaStream_t s, double nominal_flop) {
  std::vector<int32_t> cu(1, 0);
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> lengths(log((double)L) - 0.5, 1.0); /* mean L */
  while (cu.back() < pb.tokens) {
    const int n = drawn ? std::max(16, (int)lround(lengths(rng))) : L;
    cu.push_back(std::min(pb.tokens, cu.back() + n));
  }
  pb.ndocs = (int)cu.size() - 1;
  char lab[16];
  if (B > 0) snprintf(lab, sizeof lab, "B%dH%d", B, pb.heads); /* a production shape */
  else snprintf(lab, sizeof lab, "%s%d", drawn ? "d" : "", L);
  CK(cudaMalloc((void **)&pb.cu_seqlens, cu.size() * 4));
  CK(cudaMemcpy((void *)pb.cu_seqlens, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  const fm_time_opts o = {.warmup = 2, .reps = 10, .warmup_min_ms = 1000, .flush_l2 = 1, .use_cupti = 1,
                          .sustain_ms = 1000};
  double ms[FM_LINRNN_NVARIANTS];
  for (int v = 0; v < FM_LINRNN_NVARIANTS; v++) {
    if (g_skip_only && v != FM_LINRNN_SKIP) continue;
    launch_ctx c = {pb, v, 0};
    fm_timing t;
    fm_err e;
    if (fm_time_launches(launch_one, &c, s, &o, &t, NULL, &e) != FM_OK) {
      fprintf(stderr, "fm_linrnn_check: timing failed: %s\n", e.msg);
      return 1;
    }
    ms[v] = t.median_ms;
    const double ns = t.median_ms * 1e6 / ((double)pb.tokens * pb.heads);
    char kern[256] = "", *kp = kern; /* per kernel (CUPTI): the preprocessing is the classification */
    for (int i = 0; i < t.nkernels && kp < kern + 200; i++) {
      const char *n = t.kernels[i].name;
      const char *label = strstr(n, "prep_kernel") ? "prep" : strstr(n, "ckpt_scan") ? "scan"
                          : strstr(n, "items_kernel") ? "items" : strstr(n, "out_kernel") ? "out"
                          : strstr(n, "st_kernel") ? "states" : "fwd";
      kp += snprintf(kp, 40, " %s %.3f", label, t.kernels[i].median_ms);
    }
    printf("C %3d c %2d L %5s %-6s %9.3f ms %7.3f ns/token/head %7.1f TFLOP/s  %4.0f MHz  %3d launches (%s)%s%s\n",
           pb.chunk, pb.sub, lab, fm_linrnn_variant_name((fm_linrnn_variant)v), t.median_ms, ns,
           nominal_flop / (t.median_ms * 1e-3) / 1e12, t.clock_mhz, t.reps, t.source, kern[0] ? "; kernels (ms):" : "",
           kern);
    fflush(stdout);
  }
  if (g_skip_only) {
    CK(cudaFree((void *)pb.cu_seqlens));
    return 0;
  }
  launch_ctx pair[2] = {{pb, FM_LINRNN_SKIP, 0}, {pb, FM_LINRNN_SKIP, 1}};
  const fm_launch_fn fns[2] = {launch_one, launch_one};
  void *users[2] = {&pair[0], &pair[1]};
  const fm_time_opts oi = {.warmup = 2, .reps = 20, .warmup_min_ms = 300, .flush_l2 = 1, .use_cupti = 0, .sustain_ms = 0};
  fm_timing ti[2];
  double ratio[2] = {1, 1};
  fm_err e;
  if (fm_time_interleaved(2, fns, users, s, &oi, ti, ratio, &e) != FM_OK) {
    fprintf(stderr, "fm_linrnn_check: interleaved timing failed: %s\n", e.msg);
    return 1;
  }
  printf("C %3d c %2d L %5s skip speed-up %.2fx over noskip, %.2fx over causal; instrumented skip %+.2f%% (%.3f vs "
         "%.3f ms, 20 interleaved rounds)\n",
         pb.chunk, pb.sub, lab, ms[FM_LINRNN_NOSKIP] / ms[FM_LINRNN_SKIP], ms[FM_LINRNN_CAUSAL] / ms[FM_LINRNN_SKIP],
         100.0 * (ratio[1] - 1.0), ti[1].median_ms, ti[0].median_ms);
  CK(cudaFree((void *)pb.cu_seqlens));
  return 0;
}

/* The timing table: T 65536, H 16, dk 128, dv 256, C 64 and 128, c 16, fixed
 * document lengths (or the points of --bench, with their c); final states not
 * written. */
static int bench() {
  const int T = 65536, H = 16, dk = 128, dv = 256;
  fm_gpu_props gp;
  fm_err e;
  if (fm_gpu_props_get(&gp, &e) == FM_OK)
    printf("device %s, %d SMs, max SM clock %d MHz\n", gp.name, gp.sm_count, gp.clock_khz / 1000);
  fm_linrnn_problem pb;
  memset(&pb, 0, sizeof pb);
  pb.tokens = T, pb.heads = H, pb.dk = dk, pb.dv = dv, pb.scale = 1.f / sqrtf((float)dk);
  const int64_t nq = (int64_t)T * H * dk, nv = (int64_t)T * H * dv;
  CK(cudaMalloc((void **)&pb.q, nq * 2));
  CK(cudaMalloc((void **)&pb.k, nq * 2));
  CK(cudaMalloc((void **)&pb.v, nv * 2));
  CK(cudaMalloc(&pb.o, nv * 2));
  CK(cudaMalloc((void **)&pb.g, (int64_t)T * H * 4));
  CK(cudaMalloc((void **)&pb.tile_class, (int64_t)H * (T / 64) * 64));
  CK(cudaMalloc((void **)&pb.tile_cycles, (int64_t)H * (T / 64) * 64 * 8));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  if (fm_attn_fill_random_bf16((void *)pb.q, nq, 1, s, &e) != FM_OK ||
      fm_attn_fill_random_bf16((void *)pb.k, nq, 2, s, &e) != FM_OK ||
      fm_attn_fill_random_bf16((void *)pb.v, nv, 3, s, &e) != FM_OK) {
    fprintf(stderr, "fm_linrnn_check: %s\n", e.msg);
    return 1;
  }
  fill_g_kernel<<<1024, 256, 0, s>>>((float *)pb.g, (int64_t)T * H, 4);
  CK(cudaStreamSynchronize(s));
  const double nominal = (double)T * H * (4.0 * dk * dv + 64.0 * (dk + dv));
  printf("T %d H %d dk %d dv %d, bf16, g in [-0.5, 0], final states not written; median of back-to-back launches "
         "over >= 1 s after 1 s of warm-up, L2 flushed before each (fm_time_launches, sustained); TFLOP/s of the "
         "nominal work T H (4 dk dv + 64 (dk + dv)) = %.3g FLOP; kernels: each kernel's median (CUPTI; prep + items: the classification), fwd "
         "over both of its launches where checkpoints run (the state-only pass and the forward)\n",
         T, H, dk, dv, nominal);
  std::vector<bench_point> pts = g_bench_only;
  if (pts.empty())
    for (int C = 64; C <= 128; C *= 2)
      for (int L : kBenchLens) pts.push_back({C, L, 16, false, 0, 0, 0});
  int bad = 0;
  for (size_t i = 0; i < pts.size() && !bad; i++) {
    fm_linrnn_problem q = pb;
    q.chunk = pts[i].C, q.sub = pts[i].c;
    double flop = nominal;
    if (pts[i].B > 0) { /* within the buffers: B L H D <= T H dk (checked when parsed) */
      const bench_point &b = pts[i];
      q.tokens = b.B * b.L, q.heads = b.H, q.dk = q.dv = b.D, q.scale = 1.f / sqrtf((float)b.D);
      flop = (double)q.tokens * b.H * (4.0 * b.D * b.D + 128.0 * b.D);
      printf("production shape: B %d T %d H %d dk = dv = %d (documents of T tokens, packed)\n", b.B, b.L, b.H, b.D);
    }
    bad = bench_one(q, pts[i].L, pts[i].drawn, pts[i].B, s, flop);
  }
  const void *bufs[7] = {pb.q, pb.k, pb.v, pb.o, pb.g, pb.tile_class, pb.tile_cycles};
  for (const void *x : bufs) CK(cudaFree((void *)x));
  CK(cudaStreamDestroy(s));
  return bad;
}
#endif

/* --------------------------------------------------------------------- main */

static bool have_sm90() {
  int n = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

int main(int argc, char **argv) {
  bool quick = false, do_bench = false;
  int only = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--bench")) {
      do_bench = true;
      int r;
      while (i + 1 < argc && (r = parse_point(argv[i + 1])) != 0) {
        if (r < 0) return 3;
        i++;
      }
    }
    else if (!strcmp(argv[i], "--skip-only")) g_skip_only = true;
    else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kseg") && i + 1 < argc) g_kseg_only = atoi(argv[++i]);
    else {
      fprintf(stderr, "fm_linrnn_check: unknown argument '%s' (--quick, --case N, --kseg K, --skip-only, --bench [C:[d]L[:c] | C:pB:T:H:D ...])\n", argv[i]);
      return 3;
    }
  }
  if (!have_sm90()) {
    printf("fm_linrnn_check: skipped, no sm_90 device\n");
    return 2;
  }
#ifndef FM_LINRNN_SIM
  if (do_bench) return bench();
#else
  if (do_bench) return 3;
#endif
  const std::vector<tcase> cases = make_cases();
  int run = 0, failed = 0;
  for (size_t i = 0; i < cases.size(); i++) {
    if (only >= 0 && (int)i != only) continue;
    if (quick && only < 0 && i % 5 != 0) continue;
    run++;
    failed += !run_case((int)i, cases[i]);
  }
  printf("fm_linrnn_check: %d of %d cases passed%s\n", run - failed, run, failed ? " -- FAIL" : "");
  return failed ? 1 : 0;
}
