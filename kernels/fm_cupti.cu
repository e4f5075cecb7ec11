/* fm_cupti.cu — CUPTI glue: Activity API kernel durations, Range Profiler
 * HBM bytes, an L2 flush kernel, the CUDA-event fallback (fm_cupti.h).
 *
 * C++ only because cupti_profiler_host.h includes <string>; everything is
 * exported as extern "C". The call sequences follow docs/DESIGN.md, "CUPTI call sequences"
 * (verified on the H200 machine, CUDA 13.0): CUpti_ActivityKernel10 records,
 * cuptiActivityFlushAll(0) at sync points, never from the callbacks; Range
 * Profiler with AutoRange + KernelReplay, one pass for the four metrics.
 * The driver API is reached through cudaGetDriverEntryPointByVersion so that
 * nothing links libcuda (fmsim must start on machines without a driver).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include "fm_cuda_status.cuh"
#include "fm_cupti.h"

#ifdef FM_HAVE_CUPTI
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#endif

/* ------------------------------------------------------------- device probe */

extern "C" int fm_cupti_compiled(void) {
#ifdef FM_HAVE_CUPTI
  return 1;
#else
  return 0;
#endif
}

extern "C" int fm_gpu_probe(char *name, int name_cap, char *why, int why_cap) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (name && name_cap > 0) name[0] = 0;
  if (why && why_cap > 0) why[0] = 0;
  if (e != cudaSuccess || n == 0) {
    if (why && why_cap > 0)
      fm_cuda_no_device_reason(e, why, why_cap);
    return 0;
  }
  cudaDeviceProp p;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    if (why && why_cap > 0) snprintf(why, (size_t)why_cap, "cannot query the CUDA device");
    return 0;
  }
  if (name && name_cap > 0) snprintf(name, (size_t)name_cap, "%s", p.name);
  return 1;
}

extern "C" fm_status fm_gpu_props_get(fm_gpu_props *p, fm_err *err) {
  memset(p, 0, sizeof *p);
  int dev = 0, v = 0;
  CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp prop;
  CUDA_TRY(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  snprintf(p->name, sizeof p->name, "%.127s", prop.name);
  p->sm_count = prop.multiProcessorCount;
  p->cc_major = prop.major;
  p->cc_minor = prop.minor;
  p->mem_bytes = (int64_t)prop.totalGlobalMem;
  CUDA_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, dev), "cudaDeviceGetAttribute");
  p->clock_khz = v;
  CUDA_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev), "cudaDeviceGetAttribute");
  p->l2_bytes = v;
  return FM_OK;
}

/* ---------------------------------------------------------------- L2 flush */

/* Reads the buffer (16-byte loads) and folds it into one word that is written
 * only when it equals an impossible value: no store reaches memory, so the
 * flush leaves no dirty line behind to be written back during the next launch. */
__global__ void fm_l2_flush_kernel(const uint4 *__restrict__ buf, size_t n, uint32_t *sink) {
  uint32_t acc = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u && sink) *sink = acc;
}

static uint4 *g_flush_buf = nullptr;
static size_t g_flush_n = 0;
static uint32_t *g_flush_sink = nullptr;
static int g_flush_blocks = 0;

extern "C" fm_status fm_l2_flush(void *stream, fm_err *err) {
  if (!g_flush_buf) {
    int dev = 0, l2 = 0, sms = 0;
    CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
    CUDA_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "cudaDeviceGetAttribute");
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
             "cudaDeviceGetAttribute");
    size_t bytes = std::max((size_t)4 * (size_t)l2, (size_t)64 << 20);
    CUDA_TRY(cudaMalloc(&g_flush_buf, bytes), "cudaMalloc (L2 flush buffer)");
    CUDA_TRY(cudaMemset(g_flush_buf, 0x5a, bytes), "cudaMemset (L2 flush buffer)");
    CUDA_TRY(cudaMalloc(&g_flush_sink, sizeof(uint32_t)), "cudaMalloc (L2 flush sink)");
    CUDA_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    g_flush_n = bytes / sizeof(uint4);
    g_flush_blocks = 4 * std::max(sms, 1);
  }
  fm_l2_flush_kernel<<<g_flush_blocks, 512, 0, (cudaStream_t)stream>>>(g_flush_buf, g_flush_n,
                                                                      g_flush_sink);
  CUDA_TRY(cudaGetLastError(), "L2 flush kernel launch");
  return FM_OK;
}

/* ------------------------------------------------------------- shared helpers */

static double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void stats_into(const std::vector<double> &ms, fm_timing *out) {
  out->median_ms = median_of(ms);
  out->min_ms = *std::min_element(ms.begin(), ms.end());
  out->max_ms = *std::max_element(ms.begin(), ms.end());
  double s = 0;
  for (double x : ms) s += x;
  out->mean_ms = s / (double)ms.size();
}

/* "void ns::fm_fwd<128, 0, false>(fwd_params)" -> "ns::fm_fwd<128, 0, false>" */
[[maybe_unused]] static void short_name(const char *mangled, char *out, size_t cap) {
  int status = 0;
  char *d = mangled ? abi::__cxa_demangle(mangled, nullptr, nullptr, &status) : nullptr;
  const char *s = d && status == 0 ? d : (mangled ? mangled : "?");
  if (!strncmp(s, "void ", 5)) s += 5;
  size_t n = strlen(s);
  /* cut the argument list: the last '(' at template depth 0 */
  int depth = 0;
  size_t cut = n;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '<') depth++;
    else if (s[i] == '>') depth--;
    else if (s[i] == '(' && depth == 0) {
      cut = i;
      break;
    }
  }
  if (cut >= cap) cut = cap - 1;
  memcpy(out, s, cut);
  out[cut] = 0;
  free(d);
}

/* ---------------------------------------------------------- Activity records */

struct kernel_rec {
  char name[128];
  uint64_t start, end;
  int32_t grid[3], block[3], regs, ssmem, dsmem;
  uint32_t correlation;
};

#ifdef FM_HAVE_CUPTI
static std::mutex g_rec_mu;
static std::vector<kernel_rec> g_recs;
static int g_activity_registered = 0, g_activity_on = 0;
static size_t g_dropped = 0;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  const size_t sz = 4 << 20;
  void *p = nullptr;
  if (posix_memalign(&p, 8, sz) != 0) p = nullptr;
  *buffer = (uint8_t *)p;
  *size = p ? sz : 0;
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
  CUpti_Activity *rec = nullptr;
  std::vector<kernel_rec> got;
  while (buffer && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
    kernel_rec r;
    memset(&r, 0, sizeof r);
    short_name(k->name, r.name, sizeof r.name);
    r.start = k->start;
    r.end = k->end;
    r.grid[0] = k->gridX;
    r.grid[1] = k->gridY;
    r.grid[2] = k->gridZ;
    r.block[0] = k->blockX;
    r.block[1] = k->blockY;
    r.block[2] = k->blockZ;
    r.regs = k->registersPerThread;
    r.ssmem = k->staticSharedMemory;
    r.dsmem = k->dynamicSharedMemory;
    r.correlation = k->correlationId;
    got.push_back(r);
  }
  size_t dropped = 0;
  if (buffer) cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  {
    std::lock_guard<std::mutex> lock(g_rec_mu);
    g_recs.insert(g_recs.end(), got.begin(), got.end());
    g_dropped += dropped;
  }
  free(buffer);
}

static const char *cupti_str(CUptiResult r) {
  const char *s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

/* Enables kernel activity; on failure returns 0 with the reason in note. */
static int activity_start(char *note, size_t cap) {
  CUptiResult r;
  if (!g_activity_registered) {
    r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      snprintf(note, cap, "cuptiActivityRegisterCallbacks: %s", cupti_str(r));
      return 0;
    }
    g_activity_registered = 1;
  }
  r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    snprintf(note, cap, "cuptiActivityEnable: %s", cupti_str(r));
    return 0;
  }
  g_activity_on = 1;
  return 1;
}

static void activity_take(std::vector<kernel_rec> *out) {
  cuptiActivityFlushAll(0);
  std::lock_guard<std::mutex> lock(g_rec_mu);
  if (out) out->swap(g_recs);
  g_recs.clear();
}

static void activity_stop(void) {
  if (!g_activity_on) return;
  cuptiActivityFlushAll(0);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  g_activity_on = 0;
  std::lock_guard<std::mutex> lock(g_rec_mu);
  g_recs.clear();
}
#endif

static int is_flush(const char *name) { return strstr(name, "fm_l2_flush_kernel") != nullptr; }

/* Groups the records of the timed launches: each flush record opens a group;
 * the launch's kernels follow it. Returns 0 (and a note) when the records do
 * not make `reps` groups of real timestamps. */
[[maybe_unused]] static int group_records(std::vector<kernel_rec> recs, int reps, fm_timing *out,
                         fm_timeline *timeline, char *note, size_t cap) {
  std::sort(recs.begin(), recs.end(),
            [](const kernel_rec &a, const kernel_rec &b) { return a.start < b.start; });
  for (const kernel_rec &r : recs)
    if (r.start == 0 || r.end < r.start) {
      snprintf(note, cap, "activity records without timestamps (another profiler active?)");
      return 0;
    }
  size_t nflush = 0;
  for (const kernel_rec &r : recs) nflush += is_flush(r.name) != 0;
  size_t per_launch = 0; /* without flushes: consecutive chunks of equal size */
  if (nflush == 0) {
    if (recs.empty() || recs.size() % (size_t)reps) {
      snprintf(note, cap, "%zu activity records do not split into %d launches", recs.size(), reps);
      return 0;
    }
    per_launch = recs.size() / (size_t)reps;
  }
  std::vector<double> spans;
  struct kstat {
    kernel_rec first;
    std::vector<double> ms;
  };
  std::vector<kstat> per_kernel;
  uint64_t g0 = 0, g1 = 0;
  int open = 0;
  for (size_t i = 0; i <= recs.size(); i++) {
    int boundary = i == recs.size() || is_flush(recs[i].name) ||
                   (per_launch && i % per_launch == 0);
    if (boundary && open) {
      spans.push_back((double)(g1 - g0) * 1e-6);
      open = 0;
    }
    if (i == recs.size()) break;
    const kernel_rec &r = recs[i];
    if (is_flush(r.name)) continue;
    if (!open) {
      g0 = r.start;
      g1 = r.end;
      open = 1;
    }
    g0 = std::min(g0, r.start);
    g1 = std::max(g1, r.end);
    size_t k = 0;
    while (k < per_kernel.size() && strcmp(per_kernel[k].first.name, r.name)) k++;
    if (k == per_kernel.size()) per_kernel.push_back(kstat{r, {}});
    per_kernel[k].ms.push_back((double)(r.end - r.start) * 1e-6);
  }
  if ((int)spans.size() != reps) {
    snprintf(note, cap, "activity records made %d launches, expected %d", (int)spans.size(), reps);
    return 0;
  }
  stats_into(spans, out);
  out->nkernels = 0;
  for (size_t k = 0; k < per_kernel.size() && k < FM_TIMING_MAX_KERNELS; k++) {
    fm_kernel_stat *s = &out->kernels[out->nkernels++];
    const kernel_rec &f = per_kernel[k].first;
    snprintf(s->name, sizeof s->name, "%s", f.name);
    s->median_ms = median_of(per_kernel[k].ms);
    memcpy(s->grid, f.grid, sizeof s->grid);
    memcpy(s->block, f.block, sizeof s->block);
    s->registers = f.regs;
    s->static_smem = f.ssmem;
    s->dynamic_smem = f.dsmem;
  }
  if (timeline && !recs.empty()) {
    size_t n0 = (size_t)timeline->n;
    fm_timeline_event *ev =
        (fm_timeline_event *)realloc(timeline->events, sizeof *ev * (n0 + recs.size()));
    if (ev) {
      timeline->events = ev;
      uint64_t t0 = recs[0].start;
      for (const kernel_rec &r : recs) {
        fm_timeline_event *e = &timeline->events[timeline->n++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", r.name);
        e->pid = 0;
        e->tid = is_flush(r.name) ? 1 : 0;
        e->ts_us = (double)(r.start - t0) * 1e-3;
        e->dur_us = (double)(r.end - r.start) * 1e-3;
        e->cls = e->row_tile = e->col_tile = -1;
        e->cycles = -1;
      }
    }
  }
  return 1;
}

/* ------------------------------------------------------------------ timing */

extern "C" fm_status fm_time_interleaved(int n, const fm_launch_fn *fns, void *const *users, void *stream,
                                         const fm_time_opts *o, fm_timing *out, double *ratio,
                                         fm_err *err) {
  if (n < 1 || n > 8 || o->reps < 1 || o->warmup < 0)
    return fm_fail(err, FM_EINVAL, "interleaved timing needs 1..8 functions, reps >= 1, warmup >= 0");
  cudaStream_t s = (cudaStream_t)stream;
  fm_status result = FM_OK;
  cudaError_t e;
  /* warm-up rounds, then more until warmup_min_ms of wall time have passed */
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; result == FM_OK; r++) {
    const double el = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r >= o->warmup && el >= o->warmup_min_ms) break;
    for (int i = 0; i < n && result == FM_OK; i++) {
      if (o->flush_l2 && (result = fm_l2_flush(s, err)) != FM_OK) break;
      result = fns[i](users[i], s, err);
    }
    if (result == FM_OK && (e = cudaStreamSynchronize(s)) != cudaSuccess) result = cuda_fail(err, e, "warm-up");
  }
  std::vector<cudaEvent_t> ev((size_t)o->reps * n * 2, nullptr);
  for (size_t i = 0; i < ev.size() && result == FM_OK; i++)
    if ((e = cudaEventCreate(&ev[i])) != cudaSuccess) result = cuda_fail(err, e, "cudaEventCreate");
  for (int r = 0; r < o->reps && result == FM_OK; r++)
    for (int k = 0; k < n && result == FM_OK; k++) {
      const int i = r & 1 ? n - 1 - k : k; /* odd rounds in reverse */
      if (o->flush_l2 && (result = fm_l2_flush(s, err)) != FM_OK) break;
      cudaEventRecord(ev[(size_t)(r * n + i) * 2], s);
      if ((result = fns[i](users[i], s, err)) != FM_OK) break;
      cudaEventRecord(ev[(size_t)(r * n + i) * 2 + 1], s);
    }
  e = cudaStreamSynchronize(s);
  if (result == FM_OK && e != cudaSuccess) result = cuda_fail(err, e, "timed launches");
  std::vector<std::vector<double>> ms((size_t)n);
  for (int r = 0; r < o->reps && result == FM_OK; r++)
    for (int i = 0; i < n && result == FM_OK; i++) {
      float x = 0;
      if ((e = cudaEventElapsedTime(&x, ev[(size_t)(r * n + i) * 2], ev[(size_t)(r * n + i) * 2 + 1])) != cudaSuccess)
        result = cuda_fail(err, e, "cudaEventElapsedTime");
      ms[(size_t)i].push_back(x);
    }
  for (auto &x : ev)
    if (x) cudaEventDestroy(x);
  if (result != FM_OK) return result;
  if (ratio)
    for (int i = 0; i < n; i++) {
      /* one ratio per pair of rounds (forward and reverse order: a drift that is
         linear over the pair cancels), or per round when there is only one */
      std::vector<double> q;
      const size_t u = (size_t)i;
      if (o->reps == 1) q.push_back(ms[u][0] / ms[0][0]);
      for (int r = 0; r + 1 < o->reps; r += 2)
        q.push_back((ms[u][(size_t)r] + ms[u][(size_t)r + 1]) / (ms[0][(size_t)r] + ms[0][(size_t)r + 1]));
      std::sort(q.begin(), q.end());
      const size_t m = q.size();
      ratio[i] = m & 1 ? q[m / 2] : 0.5 * (q[m / 2 - 1] + q[m / 2]);
    }
  for (int i = 0; i < n; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].clock_mhz = out[i].power_w = NAN; /* not read for interleaved rounds */
    out[i].warmup = o->warmup;
    out[i].reps = o->reps;
    out[i].l2_flushed = o->flush_l2;
    snprintf(out[i].source, sizeof out[i].source, "cuda-events");
    snprintf(out[i].note, sizeof out[i].note, "interleaved with %d other launch function%s", n - 1,
             n == 2 ? "" : "s");
    stats_into(ms[(size_t)i], &out[i]);
    out[i].events_median_ms = out[i].median_ms;
  }
  return FM_OK;
}


/* ---- NVML: the SM clock and board power while launches run ------------------------------ */
/* The driver's libnvidia-ml, opened with dlopen (no link-time dependency);
 * the device is found by its PCI bus id, so that it is the CUDA device. */
namespace {
struct nvml_reader {
  void *lib = nullptr, *dev = nullptr;
  int (*clock)(void *, int, unsigned *) = nullptr;
  int (*power)(void *, unsigned *) = nullptr;
  bool ok() const { return dev != nullptr; }
};
nvml_reader nvml_open() {
  nvml_reader r;
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return r;
  auto init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
  auto by_bus = (int (*)(const char *, void **))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
  r.clock = (int (*)(void *, int, unsigned *))dlsym(lib, "nvmlDeviceGetClockInfo");
  r.power = (int (*)(void *, unsigned *))dlsym(lib, "nvmlDeviceGetPowerUsage");
  int dev = 0;
  char bus[32] = "";
  if (!init || !by_bus || !r.clock || !r.power || init() != 0 || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess || by_bus(bus, &r.dev) != 0) {
    r.dev = nullptr;
    return r;
  }
  r.lib = lib;
  return r;
}
/* Reads clock (MHz) and power (W) every ~10 ms until the stream has drained;
 * their medians (NaN without NVML). Returns the stream's status. */
cudaError_t nvml_until_done(cudaStream_t s, double *mhz, double *watts) {
  static nvml_reader nv = nvml_open();
  std::vector<double> c, p;
  cudaError_t e;
  while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
    unsigned v = 0;
    if (nv.ok() && nv.clock(nv.dev, 1 /* NVML_CLOCK_SM */, &v) == 0) c.push_back(v);
    if (nv.ok() && nv.power(nv.dev, &v) == 0) p.push_back(v / 1000.0);
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  *mhz = c.empty() ? NAN : median_of(c);
  *watts = p.empty() ? NAN : median_of(p);
  return e == cudaSuccess ? cudaStreamSynchronize(s) : e;
}
}  // namespace

/* The protocol's warm-up by time (o->sustain_ms > 0): launches back to back in
 * chunks that each last ~50 ms, so the GPU never idles, until warmup_min_ms;
 * *est_ms receives one launch's time (CUDA events) for sizing the timed part. */
static fm_status warm_back_to_back(fm_launch_fn fn, void *user, cudaStream_t s, const fm_time_opts *o,
                                   double *est_ms, fm_err *err) {
  cudaEvent_t a, b;
  cudaError_t e = cudaEventCreate(&a);
  if (e == cudaSuccess) e = cudaEventCreate(&b);
  if (e != cudaSuccess) return cuda_fail(err, e, "cudaEventCreate");
  fm_status st = FM_OK;
  if (o->flush_l2) st = fm_l2_flush(s, err);
  cudaEventRecord(a, s);
  if (st == FM_OK) st = fn(user, s, err);
  cudaEventRecord(b, s);
  float ms = 1.f;
  if (st == FM_OK && (e = cudaEventSynchronize(b)) == cudaSuccess) cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (st != FM_OK) return st;
  if (e != cudaSuccess) return cuda_fail(err, e, "warm-up");
  *est_ms = ms > 1e-3f ? ms : 1e-3;
  const int chunk = std::max(1, (int)(50.0 / *est_ms));
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() <
         o->warmup_min_ms) {
    for (int i = 0; i < chunk && st == FM_OK; i++) {
      if (o->flush_l2 && (st = fm_l2_flush(s, err)) != FM_OK) break;
      st = fn(user, s, err);
    }
    if (st != FM_OK) return st;
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess) return cuda_fail(err, e, "warm-up");
  }
  return FM_OK;
}

extern "C" fm_status fm_time_launches(fm_launch_fn fn, void *user, void *stream,
                                      const fm_time_opts *o, fm_timing *out,
                                      fm_timeline *timeline, fm_err *err) {
  memset(out, 0, sizeof *out);
  out->events_median_ms = out->clock_mhz = out->power_w = NAN;
  if (o->reps < 1 || o->warmup < 0)
    return fm_fail(err, FM_EINVAL, "timing needs reps >= 1 and warmup >= 0 (got %d, %d)", o->reps,
                   o->warmup);
  cudaStream_t s = (cudaStream_t)stream;
  char note[256] = "";
  [[maybe_unused]] int activity = 0;
#ifdef FM_HAVE_CUPTI
  if (o->use_cupti) activity = activity_start(note, sizeof note);
  else snprintf(note, sizeof note, "CUPTI not requested");
#else
  snprintf(note, sizeof note, "built without CUPTI");
#endif
  /* Every failure from here on sets `result` and falls through, so that the
   * events are destroyed and kernel activity is disabled on every path. */
  fm_status result = FM_OK;
  cudaError_t e;
  /* warm-up, with the flushes, so that caches and clocks are as in the timed part */
  for (int i = 0; i < o->warmup && result == FM_OK; i++) {
    if (o->flush_l2 && (result = fm_l2_flush(s, err)) != FM_OK) break;
    result = fn(user, s, err);
  }
  if (result == FM_OK && (e = cudaStreamSynchronize(s)) != cudaSuccess)
    result = cuda_fail(err, e, "warm-up");
  int reps = o->reps;
  if (o->sustain_ms > 0 && result == FM_OK) {
    double est = 1.0;
    result = warm_back_to_back(fn, user, s, o, &est, err);
    reps = (int)std::min(20000.0, std::max((double)o->reps, ceil(o->sustain_ms / est)));
  } else if (o->warmup_min_ms > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    while (result == FM_OK &&
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() <
               o->warmup_min_ms) {
      if (o->flush_l2 && (result = fm_l2_flush(s, err)) != FM_OK) break;
      if ((result = fn(user, s, err)) != FM_OK) break;
      if ((e = cudaStreamSynchronize(s)) != cudaSuccess) result = cuda_fail(err, e, "warm-up");
    }
  }
#ifdef FM_HAVE_CUPTI
  if (activity && result == FM_OK) activity_take(nullptr); /* drop the warm-up records */
#endif
  std::vector<cudaEvent_t> ev((size_t)reps * 2 + 1, nullptr);
  for (size_t i = 0; i < ev.size() && result == FM_OK; i++)
    if ((e = cudaEventCreate(&ev[i])) != cudaSuccess) result = cuda_fail(err, e, "cudaEventCreate");
  const auto w0 = std::chrono::steady_clock::now();
  if (result == FM_OK && (e = cudaEventRecord(ev[2 * reps], s)) != cudaSuccess)
    result = cuda_fail(err, e, "cudaEventRecord");
  for (int i = 0; i < reps && result == FM_OK; i++) {
    if (o->flush_l2 && (result = fm_l2_flush(s, err)) != FM_OK) break;
    cudaEventRecord(ev[2 * i], s);
    if ((result = fn(user, s, err)) != FM_OK) break;
    cudaEventRecord(ev[2 * i + 1], s);
  }
  double mhz = NAN, watts = NAN;
  e = nvml_until_done(s, &mhz, &watts);
  const double window = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
  if (result == FM_OK && e != cudaSuccess) result = cuda_fail(err, e, "timed launches");
  std::vector<double> ev_ms;
  std::vector<fm_timeline_event> ev_timeline;
  if (result == FM_OK)
    for (int i = 0; i < reps; i++) {
      float ms = 0, t0 = 0;
      if ((e = cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1])) != cudaSuccess ||
          (e = cudaEventElapsedTime(&t0, ev[2 * reps], ev[2 * i])) != cudaSuccess) {
        result = cuda_fail(err, e, "cudaEventElapsedTime");
        break;
      }
      ev_ms.push_back(ms);
      fm_timeline_event te;
      memset(&te, 0, sizeof te);
      snprintf(te.name, sizeof te.name, "launch %d (CUDA events)", i);
      te.ts_us = 1e3 * t0;
      te.dur_us = 1e3 * ms;
      te.cls = te.row_tile = te.col_tile = -1;
      te.cycles = -1;
      ev_timeline.push_back(te);
    }
  for (auto &x : ev)
    if (x) cudaEventDestroy(x);
  int from_activity = 0;
#ifdef FM_HAVE_CUPTI
  if (activity) {
    std::vector<kernel_rec> recs;
    activity_take(&recs);
    activity_stop();
    if (result == FM_OK)
      from_activity = group_records(recs, reps, out, timeline, note, sizeof note);
  }
#endif
  if (result != FM_OK) return result;
  out->warmup = o->warmup;
  out->reps = reps;
  out->clock_mhz = mhz;
  out->power_w = watts;
  out->window_ms = window;
  out->l2_flushed = o->flush_l2;
  out->events_median_ms = median_of(ev_ms);
  if (from_activity) {
    snprintf(out->source, sizeof out->source, "cupti-activity");
  } else {
    snprintf(out->source, sizeof out->source, "cuda-events");
    snprintf(out->note, sizeof out->note, "%s", note);
    stats_into(ev_ms, out);
    if (timeline && !ev_timeline.empty()) {
      size_t n0 = (size_t)timeline->n;
      fm_timeline_event *p = (fm_timeline_event *)realloc(
          timeline->events, sizeof *p * (n0 + ev_timeline.size()));
      if (p) {
        timeline->events = p;
        for (auto &te : ev_timeline) timeline->events[timeline->n++] = te;
      }
    }
  }
  return FM_OK;
}

/* ---------------------------------------------------------- Range Profiler */

#ifdef FM_HAVE_CUPTI
static const char *g_metrics[] = {"dram__bytes_read.sum", "dram__bytes_write.sum",
                                  "lts__t_sectors_srcunit_tex_op_read.sum",
                                  "gpu__time_duration.sum"};
enum { NMETRICS = 4, MAX_RANGES = 16 };

struct profiler_state {
  int tried, ok;
  char why[256];
  CUpti_Profiler_Host_Object *host;
  std::vector<uint8_t> config;
  size_t passes;
};
static profiler_state g_prof;

typedef CUresult (*cu_ctx_get_current_t)(CUcontext *);
typedef CUresult (*cu_device_get_t)(CUdevice *, int);

static int driver_fn(const char *sym, void **fn) {
  cudaDriverEntryPointQueryResult q;
  return cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
         q == cudaDriverEntryPointSuccess && *fn;
}

static int current_ctx(CUcontext *ctx, CUdevice *dev, char *why, size_t cap) {
  void *f1 = nullptr, *f2 = nullptr;
  int ord = 0;
  cudaFree(0);
  cudaGetDevice(&ord);
  if (!driver_fn("cuCtxGetCurrent", &f1) || !driver_fn("cuDeviceGet", &f2)) {
    snprintf(why, cap, "driver entry points cuCtxGetCurrent/cuDeviceGet unavailable");
    return 0;
  }
  if (((cu_ctx_get_current_t)f1)(ctx) != CUDA_SUCCESS || !*ctx ||
      ((cu_device_get_t)f2)(dev, ord) != CUDA_SUCCESS) {
    snprintf(why, cap, "no current CUDA context");
    return 0;
  }
  return 1;
}

#define PROF_TRY(call, name)                                              \
  do {                                                                    \
    CUptiResult r_ = (call);                                              \
    if (r_ != CUPTI_SUCCESS) {                                            \
      snprintf(g_prof.why, sizeof g_prof.why, "%s: %s", name, cupti_str(r_)); \
      return 0;                                                           \
    }                                                                     \
  } while (0)

/* Process-wide part: profiler init, host object, config image. */
static int profiler_init(void) {
  if (g_prof.tried) return g_prof.ok;
  g_prof.tried = 1;
  CUcontext ctx;
  CUdevice dev;
  if (!current_ctx(&ctx, &dev, g_prof.why, sizeof g_prof.why)) return 0;
  CUpti_Profiler_Initialize_Params ip = {CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  PROF_TRY(cuptiProfilerInitialize(&ip), "cuptiProfilerInitialize");
  CUpti_Profiler_DeviceSupported_Params sp = {CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE};
  sp.cuDevice = dev;
  sp.api = CUPTI_PROFILER_RANGE_PROFILING;
  PROF_TRY(cuptiProfilerDeviceSupported(&sp), "cuptiProfilerDeviceSupported");
  if (sp.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
    snprintf(g_prof.why, sizeof g_prof.why,
             "range profiling unsupported on this device (architecture %d, vGPU %d, confidential "
             "compute %d)", (int)sp.architecture, (int)sp.vGpu, (int)sp.confidentialCompute);
    return 0;
  }
  int ord = 0;
  cudaGetDevice(&ord);
  CUpti_Device_GetChipName_Params cp = {CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  cp.deviceIndex = (size_t)ord;
  PROF_TRY(cuptiDeviceGetChipName(&cp), "cuptiDeviceGetChipName");
  CUpti_Profiler_GetCounterAvailability_Params ap = {
      CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
  ap.ctx = ctx;
  PROF_TRY(cuptiProfilerGetCounterAvailability(&ap), "cuptiProfilerGetCounterAvailability");
  std::vector<uint8_t> avail(ap.counterAvailabilityImageSize);
  ap.pCounterAvailabilityImage = avail.data();
  PROF_TRY(cuptiProfilerGetCounterAvailability(&ap), "cuptiProfilerGetCounterAvailability");
  CUpti_Profiler_Host_Initialize_Params hp = {CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
  hp.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  hp.pChipName = cp.pChipName;
  hp.pCounterAvailabilityImage = avail.data();
  PROF_TRY(cuptiProfilerHostInitialize(&hp), "cuptiProfilerHostInitialize");
  g_prof.host = hp.pHostObject;
  CUpti_Profiler_Host_ConfigAddMetrics_Params mp = {
      CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  mp.pHostObject = g_prof.host;
  mp.ppMetricNames = g_metrics;
  mp.numMetrics = NMETRICS;
  PROF_TRY(cuptiProfilerHostConfigAddMetrics(&mp), "cuptiProfilerHostConfigAddMetrics");
  CUpti_Profiler_Host_GetConfigImageSize_Params cs = {
      CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  cs.pHostObject = g_prof.host;
  PROF_TRY(cuptiProfilerHostGetConfigImageSize(&cs), "cuptiProfilerHostGetConfigImageSize");
  g_prof.config.resize(cs.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params ci = {
      CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  ci.pHostObject = g_prof.host;
  ci.configImageSize = g_prof.config.size();
  ci.pConfigImage = g_prof.config.data();
  PROF_TRY(cuptiProfilerHostGetConfigImage(&ci), "cuptiProfilerHostGetConfigImage");
  CUpti_Profiler_Host_GetNumOfPasses_Params np = {
      CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  np.configImageSize = g_prof.config.size();
  np.pConfigImage = g_prof.config.data();
  PROF_TRY(cuptiProfilerHostGetNumOfPasses(&np), "cuptiProfilerHostGetNumOfPasses");
  g_prof.passes = np.numOfPasses;
  g_prof.ok = 1;
  return 1;
}

/* One measurement: enable on the context, counter data, config, start, launch,
 * stop, decode, evaluate every range, disable. 0 with g_prof.why on a CUPTI
 * failure; *launched says whether fn ran (so the caller can run it otherwise). */
static int profiler_measure(fm_launch_fn fn, void *user, cudaStream_t s, int flush_l2,
                            fm_measured_bytes *out, int *launched, fm_status *st, fm_err *err) {
  CUcontext ctx;
  CUdevice dev;
  *launched = 0;
  if (!current_ctx(&ctx, &dev, g_prof.why, sizeof g_prof.why)) return 0;
  CUpti_RangeProfiler_Enable_Params ep = {CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
  ep.ctx = ctx;
  PROF_TRY(cuptiRangeProfilerEnable(&ep), "cuptiRangeProfilerEnable");
  CUpti_RangeProfiler_Object *obj = ep.pRangeProfilerObject;
  int ok = 0;
  std::vector<uint8_t> data;
  do {
    CUptiResult r;
    CUpti_RangeProfiler_GetCounterDataSize_Params ds = {
        CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
    ds.pRangeProfilerObject = obj;
    ds.pMetricNames = g_metrics;
    ds.numMetrics = NMETRICS;
    ds.maxNumOfRanges = MAX_RANGES;
    ds.maxNumRangeTreeNodes = MAX_RANGES;
    if ((r = cuptiRangeProfilerGetCounterDataSize(&ds)) != CUPTI_SUCCESS) {
      snprintf(g_prof.why, sizeof g_prof.why, "cuptiRangeProfilerGetCounterDataSize: %s", cupti_str(r));
      break;
    }
    data.assign(ds.counterDataSize, 0);
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params di = {
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    di.pRangeProfilerObject = obj;
    di.counterDataSize = data.size();
    di.pCounterData = data.data();
    if ((r = cuptiRangeProfilerCounterDataImageInitialize(&di)) != CUPTI_SUCCESS) {
      snprintf(g_prof.why, sizeof g_prof.why, "cuptiRangeProfilerCounterDataImageInitialize: %s",
               cupti_str(r));
      break;
    }
    CUpti_RangeProfiler_SetConfig_Params sc = {CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
    sc.pRangeProfilerObject = obj;
    sc.configSize = g_prof.config.size();
    sc.pConfig = g_prof.config.data();
    sc.counterDataImageSize = data.size();
    sc.pCounterDataImage = data.data();
    sc.range = CUPTI_AutoRange;
    sc.replayMode = CUPTI_KernelReplay;
    sc.maxRangesPerPass = MAX_RANGES;
    sc.numNestingLevels = 1;
    sc.minNestingLevel = 1;
    sc.passIndex = 0;
    sc.targetNestingLevel = 1;
    if ((r = cuptiRangeProfilerSetConfig(&sc)) != CUPTI_SUCCESS) {
      snprintf(g_prof.why, sizeof g_prof.why, "cuptiRangeProfilerSetConfig: %s", cupti_str(r));
      break;
    }
    /* the flush runs before Start, so it is not one of the ranges */
    if (flush_l2 && (*st = fm_l2_flush(s, err)) != FM_OK) break;
    if (cudaStreamSynchronize(s) != cudaSuccess) break;
    CUpti_RangeProfiler_Start_Params sp = {CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    sp.pRangeProfilerObject = obj;
    if ((r = cuptiRangeProfilerStart(&sp)) != CUPTI_SUCCESS) {
      snprintf(g_prof.why, sizeof g_prof.why, "cuptiRangeProfilerStart: %s", cupti_str(r));
      break;
    }
    *launched = 1;
    *st = fn(user, s, err);
    cudaError_t ce = cudaStreamSynchronize(s);
    if (*st == FM_OK && ce != cudaSuccess) *st = cuda_fail(err, ce, "counted launch");
    CUpti_RangeProfiler_Stop_Params tp = {CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    tp.pRangeProfilerObject = obj;
    r = cuptiRangeProfilerStop(&tp);
    if (*st != FM_OK) break;
    if (r != CUPTI_SUCCESS) {
      snprintf(g_prof.why, sizeof g_prof.why, "cuptiRangeProfilerStop: %s", cupti_str(r));
      break;
    }
    if (!tp.isAllPassSubmitted) {
      snprintf(g_prof.why, sizeof g_prof.why, "the metrics need more than one pass");
      break;
    }
    CUpti_RangeProfiler_DecodeData_Params dd = {CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    dd.pRangeProfilerObject = obj;
    if ((r = cuptiRangeProfilerDecodeData(&dd)) != CUPTI_SUCCESS) {
      snprintf(g_prof.why, sizeof g_prof.why, "cuptiRangeProfilerDecodeData: %s", cupti_str(r));
      break;
    }
    CUpti_RangeProfiler_GetCounterDataInfo_Params ci = {
        CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
    ci.pCounterDataImage = data.data();
    ci.counterDataImageSize = data.size();
    if ((r = cuptiRangeProfilerGetCounterDataInfo(&ci)) != CUPTI_SUCCESS) {
      snprintf(g_prof.why, sizeof g_prof.why, "cuptiRangeProfilerGetCounterDataInfo: %s", cupti_str(r));
      break;
    }
    double sum[NMETRICS] = {0, 0, 0, 0};
    size_t i;
    for (i = 0; i < ci.numTotalRanges; i++) {
      double v[NMETRICS];
      CUpti_Profiler_Host_EvaluateToGpuValues_Params ev = {
          CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
      ev.pHostObject = g_prof.host;
      ev.pCounterDataImage = data.data();
      ev.counterDataImageSize = data.size();
      ev.rangeIndex = i;
      ev.ppMetricNames = g_metrics;
      ev.numMetrics = NMETRICS;
      ev.pMetricValues = v;
      if ((r = cuptiProfilerHostEvaluateToGpuValues(&ev)) != CUPTI_SUCCESS) {
        snprintf(g_prof.why, sizeof g_prof.why, "cuptiProfilerHostEvaluateToGpuValues: %s",
                 cupti_str(r));
        break;
      }
      for (int k = 0; k < NMETRICS; k++) sum[k] += v[k];
    }
    if (i < ci.numTotalRanges) break;
    if (ci.numTotalRanges == 0) {
      snprintf(g_prof.why, sizeof g_prof.why, "the Range Profiler recorded no range");
      break;
    }
    out->dram_read = sum[0];
    out->dram_write = sum[1];
    out->l2_read_sectors = sum[2];
    out->gpu_time_ns = sum[3];
    out->nranges = (int32_t)ci.numTotalRanges;
    if (dd.numOfRangeDropped)
      snprintf(out->note, sizeof out->note, "%zu ranges dropped", dd.numOfRangeDropped);
    ok = 1;
  } while (0);
  CUpti_RangeProfiler_Disable_Params dp = {CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
  dp.pRangeProfilerObject = obj;
  cuptiRangeProfilerDisable(&dp);
  return ok;
}
#endif

extern "C" fm_status fm_count_launch(fm_launch_fn fn, void *user, void *stream, int flush_l2,
                                     fm_measured_bytes *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  cudaStream_t s = (cudaStream_t)stream;
  fm_status st = FM_OK;
  int launched = 0;
#ifdef FM_HAVE_CUPTI
  if (profiler_init()) {
    if (profiler_measure(fn, user, s, flush_l2, out, &launched, &st, err)) {
      snprintf(out->source, sizeof out->source, "cupti-range-profiler");
      out->l2_flushed = flush_l2;
      return st;
    }
    if (st != FM_OK) return st;
  }
  snprintf(out->note, sizeof out->note, "no counters: %s", g_prof.why);
#else
  snprintf(out->note, sizeof out->note, "no counters: built without CUPTI");
#endif
  if (!launched) {
    if (flush_l2 && (st = fm_l2_flush(s, err)) != FM_OK) return st;
    if ((st = fn(user, s, err)) != FM_OK) return st;
    CUDA_TRY(cudaStreamSynchronize(s), "counted launch");
  }
  return FM_OK;
}

extern "C" void fm_cupti_shutdown(void) {
#ifdef FM_HAVE_CUPTI
  if (g_activity_registered) {
    activity_stop();
    cuptiActivityFlushAll(1);
  }
  if (g_prof.host) {
    CUpti_Profiler_Host_Deinitialize_Params hd = {
        CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
    hd.pHostObject = g_prof.host;
    cuptiProfilerHostDeinitialize(&hd);
    g_prof.host = nullptr;
  }
  if (g_prof.tried) {
    CUpti_Profiler_DeInitialize_Params dp = {CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};
    cuptiProfilerDeInitialize(&dp);
  }
  g_prof.tried = g_prof.ok = 0;
#endif
  if (g_flush_buf) {
    cudaFree(g_flush_buf);
    cudaFree(g_flush_sink);
    g_flush_buf = nullptr;
    g_flush_sink = nullptr;
  }
}
