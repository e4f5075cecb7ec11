// fmsim.torch's autograd op in C++ (issue 21: the op's host overhead over the bare
// kernel launch under 20 us). A Python torch.autograd.Function costs more than that
// before it does any work (bench/torch_overhead.py, "autograd floor"); this file is
// the same op as fmsim/torch.py's _FlashMask / _FlashMaskLse written as a
// torch::autograd::Function (torch/csrc/autograd/custom_function.h) behind a plain
// pybind11 function: no dispatcher, no TORCH_LIBRARY (kernels/PERF_NOTES.md, "The
// op's autograd floor": the dispatcher's argument handling cost more than
// Function.apply).
//
// It links neither libfmsim_cuda nor CUDA: Python hands over, once per plan, the
// addresses of fm_attn_forward_ptrs and fm_attn_backward_ptrs (kernels/fm_attn.h)
// and a copy of the plan's fm_attn_problem, and, per call, the current stream it
// already read. The calls are the Python path's, argument for argument (torch.py,
// _fwd and _bwd), so the results are bit-identical by construction.
//
// Built on first use by torch.utils.cpp_extension.load (fmsim/torch.py,
// _cpp_decide); python/README.md says when and how it falls back.

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace fmsim {  // named: the autograd node is "torch::autograd::CppNode<fmsim::FlashMask>"

// fm_attn_forward_ptrs and fm_attn_backward_ptrs (kernels/fm_attn.h); fm_status is a
// C enum (an int), fm_attn_problem and fm_err are passed by pointer.
using FwdFn = int (*)(const void *shape, int32_t device, const int32_t *intervals, const void *q,
                      const void *k, const void *v, void *o, float *lse, int variant, void *stream,
                      void *err);
using BwdFn = int (*)(const void *shape, int32_t device, const int32_t *intervals, const void *q,
                      const void *k, const void *v, const void *o, const float *lse, const void *dout,
                      void *dq, void *dk, void *dv, int variant, void *stream, void *err);

constexpr size_t kErrBytes = 512;  // fm_err (core/fm_status.h): char msg[512]; checked per plan

struct ErrBuf {
  char msg[kErrBytes];
};

// A status other than FM_OK becomes fmsim.FmsimError(msg, status), as in the Python
// path: in the forward through the module's exception translator, in the backward
// (the autograd engine's thread) as a torch python_error, which the engine hands
// back to the Python caller of backward() unchanged.
struct LibraryError : std::runtime_error {
  int status;
  LibraryError(const char *msg, int s) : std::runtime_error(msg), status(s) {}
};

py::object *g_error_type = nullptr;  // fmsim.FmsimError, set by set_error_type; never freed

void set_python_error(const LibraryError &x) {  // with the GIL held
  if (g_error_type && *g_error_type) {
    py::object err = (*g_error_type)(x.what(), x.status);
    PyErr_SetObject(g_error_type->ptr(), err.ptr());
  } else {
    PyErr_SetString(PyExc_RuntimeError, x.what());
  }
}

LibraryError library_error(const ErrBuf &err, int status) {
  char msg[kErrBytes + 1];
  std::memcpy(msg, err.msg, kErrBytes);
  msg[kErrBytes] = '\0';
  return LibraryError(msg, status);
}

inline void check(int status, const ErrBuf &err) {
  if (status != 0)
    throw library_error(err, status);
}

inline void check_in_backward(int status, const ErrBuf &err) {
  if (status != 0) {
    const LibraryError x = library_error(err, status);
    py::gil_scoped_acquire gil;
    set_python_error(x);
    python_error e;
    e.persist();  // fetched here, under the GIL, for the engine to restore in the caller
    throw e;
  }
}

// What a plan fixes (torch.py's _Plan): made once per plan from Python.
struct Plan : torch::CustomClassHolder {
  std::vector<uint64_t> problem;  // a copy of the plan's fm_attn_problem (its pointers unused)
  FwdFn fwd = nullptr;
  BwdFn bwd = nullptr;
  int32_t device = 0;
  int variant = 0;
  bool bhsd = false;  // layout="bhsd": o like q, dout seen through transpose(1, 2)
  std::vector<int64_t> o_shape, lse_shape;
  at::TensorOptions o_opts, lse_opts;
  int64_t seqlen_q = 0, seqlen_k = 0;  // the fast path's interval keys (0: a plan made without them)
  // The fast path's no-grad calls: stream -> an lse nobody reads (torch.py's _Plan.scratch), made
  // once per stream, reused in stream order; touched only with the GIL held.
  std::unordered_map<int64_t, at::Tensor> scratch;

  const void *shape() const { return problem.data(); }
};

// What one call passes besides q, k, v: not a Variable (Function::apply ignores it).
struct Call {
  Plan *plan;
  const at::Tensor *iv;  // the kernels' interval vectors (torch.py, _intervals)
  int64_t stream;        // the current stream of the plan's device, read by Python
};

// The backward's state beyond the saved Variables (torch.py: ctx.call, ctx.lse).
struct Saved : torch::CustomClassHolder {
  c10::intrusive_ptr<Plan> plan;
  at::Tensor iv;
  at::Tensor lse;  // _FlashMask's lse (not an output); undefined for _FlashMaskLse
  int64_t stream = 0;
};

template <typename S, typename = void>
struct HasNativeHandle : std::false_type {};
template <typename S>
struct HasNativeHandle<S, std::void_t<decltype(std::declval<const S &>().native_handle())>>
    : std::true_type {};

template <typename S>
void *native_handle(const S &s, int64_t fallback) {
  if constexpr (HasNativeHandle<S>::value) {
    (void)fallback;
    return s.native_handle();
  } else {  // an older torch: the forward's stream, which the autograd engine makes
    (void)s;  // current for this node's backward anyway
    return reinterpret_cast<void *>(fallback);
  }
}

// torch.py's _stream(pl.device) at the time of the backward: the current CUDA stream
// of the plan's device, read through c10's device-guard interface (libc10, which
// libc10_cuda registers into: no CUDA header or library needed here).
void *current_stream(const Plan &p, const at::Tensor &like, int64_t fallback) {
  if (!like.is_cuda())
    return nullptr;  // only the CPU check of this file's plumbing gets here (torch.py refuses CPU tensors)
  const auto *impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  c10::Stream s = impl->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(p.device)));
  return native_handle(s, fallback);
}

// torch.py's _fwd's check, with its message.
void check_aligned(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) {
  const auto qp = reinterpret_cast<uintptr_t>(q.data_ptr()), kp = reinterpret_cast<uintptr_t>(k.data_ptr()),
             vp = reinterpret_cast<uintptr_t>(v.data_ptr());
  if ((qp | kp | vp) & 15)
    throw py::value_error("q, k, v: data pointers must be 16-byte aligned (the kernels load with TMA)");
}

// o as torch.py's _fwd allocates it: in q's layout ((B, S, H, D), or empty_like(q) for bhsd).
at::Tensor new_o(const Plan &p, const at::Tensor &q) {
  return p.bhsd ? at::empty_like(q) : at::empty(p.o_shape, p.o_opts);
}

// torch.py's _fwd with keep_lse: o in q's layout and the lse, one library call.
std::pair<at::Tensor, at::Tensor> fwd(const Call &c, const at::Tensor &q, const at::Tensor &k,
                                      const at::Tensor &v) {
  const Plan &p = *c.plan;
  check_aligned(q, k, v);
  at::Tensor o = new_o(p, q);
  at::Tensor lse = at::empty(p.lse_shape, p.lse_opts);
  ErrBuf err;
  err.msg[0] = '\0';
  check(p.fwd(p.shape(), p.device, c.iv->data_ptr<int32_t>(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
              o.data_ptr(), lse.data_ptr<float>(), p.variant, reinterpret_cast<void *>(c.stream), &err),
        err);
  return {std::move(o), std::move(lse)};
}

// torch.py's _bwd: dout as bf16 in the kernels' layout, dq/dk/dv like q/k/v.
variable_list bwd(const Saved &s, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                  const at::Tensor &o, const at::Tensor &lse, at::Tensor dout) {
  const Plan &p = *s.plan;
  if (!dout.defined())  // o's gradient unset (only the lse used): what materialize_grads gives
    dout = at::zeros_like(o);
  if (dout.scalar_type() != at::kBFloat16)
    dout = dout.to(at::kBFloat16);
  at::Tensor db = p.bhsd ? dout.transpose(1, 2) : dout;
  if (!db.is_contiguous())
    db = db.contiguous();
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  ErrBuf err;
  err.msg[0] = '\0';
  check_in_backward(p.bwd(p.shape(), p.device, s.iv.data_ptr<int32_t>(), q.data_ptr(), k.data_ptr(),
                          v.data_ptr(), o.data_ptr(), lse.data_ptr<float>(), db.data_ptr(), dq.data_ptr(),
                          dk.data_ptr(), dv.data_ptr(), p.variant, current_stream(p, q, s.stream), &err),
                    err);
  return {dq, dk, dv, at::Tensor()};  // the last: Call, not a Variable
}

c10::IValue saved_capsule(const Call &c, at::Tensor lse) {
  auto s = c10::make_intrusive<Saved>();
  s->plan = c10::intrusive_ptr<Plan>::reclaim_copy(c.plan);
  s->iv = *c.iv;
  s->lse = std::move(lse);
  s->stream = c.stream;
  return c10::IValue::make_capsule(std::move(s));
}

const Saved &saved(AutogradContext *ctx) {
  return *static_cast<const Saved *>(ctx->saved_data.at("s").toCapsule().get());
}

// _FlashMask: o = attention(q, k, v); the lse stays in the context (not an output).
struct FlashMask : torch::autograd::Function<FlashMask> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                            const Call &c) {
    auto ol = fwd(c, q, k, v);
    ctx->save_for_backward({q, k, v, ol.first});
    ctx->saved_data.emplace("s", saved_capsule(c, std::move(ol.second)));
    return std::move(ol.first);
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const auto sv = ctx->get_saved_variables();
    const Saved &s = saved(ctx);
    return bwd(s, sv[0], sv[1], sv[2], sv[3], s.lse, std::move(grads[0]));
  }
};

// _FlashMaskLse: (o, lse), the lse not differentiable.
struct FlashMaskLse : torch::autograd::Function<FlashMaskLse> {
  static variable_list forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k,
                               const at::Tensor &v, const Call &c) {
    auto ol = fwd(c, q, k, v);
    ctx->save_for_backward({q, k, v, ol.first, ol.second});
    ctx->saved_data.emplace("s", saved_capsule(c, at::Tensor()));
    ctx->mark_non_differentiable({ol.second});
    ctx->set_materialize_grads(false);  // no zeros for the lse's gradient; bwd fills an unset dout
    return {std::move(ol.first), std::move(ol.second)};
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const auto sv = ctx->get_saved_variables();
    return bwd(saved(ctx), sv[0], sv[1], sv[2], sv[3], sv[4], std::move(grads[0]));
  }
};

c10::intrusive_ptr<Plan> make_plan(py::bytes problem, int64_t fwd_addr, int64_t bwd_addr, int64_t device,
                                   int64_t variant, bool bhsd, std::vector<int64_t> o_shape,
                                   std::vector<int64_t> lse_shape, int64_t err_bytes, bool cuda, int64_t seqlen_q,
                                   int64_t seqlen_k) {
  if (err_bytes != static_cast<int64_t>(kErrBytes))
    throw std::invalid_argument("fmsim autograd op: fm_err is " + std::to_string(err_bytes) +
                                " bytes in the package, " + std::to_string(kErrBytes) + " here");
  if (!fwd_addr || !bwd_addr)
    throw std::invalid_argument("fmsim autograd op: a null entry point");
  auto p = c10::make_intrusive<Plan>();
  const std::string raw = problem;  // the bytes of the ctypes struct
  p->problem.assign((raw.size() + 7) / 8, 0);
  std::memcpy(p->problem.data(), raw.data(), raw.size());
  p->fwd = reinterpret_cast<FwdFn>(static_cast<uintptr_t>(fwd_addr));
  p->bwd = reinterpret_cast<BwdFn>(static_cast<uintptr_t>(bwd_addr));
  p->device = static_cast<int32_t>(device);
  p->variant = static_cast<int>(variant);
  p->bhsd = bhsd;
  p->o_shape = std::move(o_shape);
  p->lse_shape = std::move(lse_shape);
  const c10::Device dev = cuda ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device))
                               : c10::Device(c10::DeviceType::CPU);
  p->o_opts = at::TensorOptions().dtype(at::kBFloat16).device(dev);
  p->lse_opts = at::TensorOptions().dtype(at::kFloat).device(dev);
  p->seqlen_q = seqlen_q;
  p->seqlen_k = seqlen_k;
  return p;
}

// ---- The fast path: flashmask_attention's call without Python's per-call work ----
// torch.py's flashmask_attention looks up its plan (_plan), its interval vectors
// (_intervals) and the current stream, then, when autograd records, calls
// forward/forward_lse above, else _fwd: about 5 us of Python per call. fast() does those
// lookups here, in caches that hold only what Python's path made and checked, and runs
// either (forward_nograd is _fwd): a miss (or any argument it does not take as it is)
// returns None, Python runs its own path, which checks the arguments (one source of
// truth: _make_plan) and then hands its plan and intervals to remember(), so that the
// next such call, with or without autograd, is a hit. Keys: torch.py's, field for field.
//
// Thread safety: the caches and the plans' scratch buffers are touched only with the GIL
// held (fast() and remember() are pybind11 functions; fast() releases the GIL only around
// Function::apply or forward_nograd's allocations and library call, with its own
// references to the plan and the intervals).

constexpr size_t kCacheMax = 4096;  // torch.py's bound: a cache past it is cleared

// The plan's key (torch.py, _plan): for q, k, v their sizes, strides, dtype and device;
// for startend its sizes and dtype (or none); causal, the scale, the layout, the kernel,
// the variant, deterministic, the mask method (which the plan's problem bytes carry).
constexpr int kKeyWords = 3 * 11 + 6 + 8;
using PlanKey = std::array<int64_t, kKeyWords>;

struct WordsHash {
  template <size_t N>
  size_t operator()(const std::array<int64_t, N> &a) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int64_t x : a) {
      h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

// The intervals of one startend tensor (torch.py's _converted): the tensor by a weak
// reference (its TensorImpl's memory stays allocated while the entry holds it, so no
// other tensor can come to have its address), the version and tag it was converted at.
struct SriEntry {
  c10::weak_intrusive_ptr<c10::TensorImpl> ref;
  int64_t version;
  const void *data;
  std::array<int64_t, 4> sizes;
  int64_t seqlen_q;
  bool causal;
  int64_t stream;
  at::Tensor iv;
};

// The intervals of no startend (torch.py's _no_intervals): (device, Sq, Sk, stream).
using NoneKey = std::array<int64_t, 4>;

struct Caches {
  std::unordered_map<PlanKey, c10::intrusive_ptr<Plan>, WordsHash> plans;
  std::unordered_map<const c10::TensorImpl *, SriEntry> sri;
  std::unordered_map<NoneKey, at::Tensor, WordsHash> none;
  int64_t hits = 0, no_plan = 0, no_intervals = 0, declined = 0, remembered = 0, refused = 0;
  int64_t hits_nograd = 0, scratch = 0;  // no-grad hits; scratch lse buffers made (once per plan and stream)
};

// Never freed: tensors (CUDA memory) must not be released by static destructors at exit.
Caches &caches() {
  static Caches *c = new Caches();
  return *c;
}

// The CPU check of this plumbing (no GPU): CPU tensors taken, the stream given.
bool g_cpu_check = false;
int64_t g_cpu_stream = 0;

// A call's arguments as the fast path reads them.
struct Args {
  at::Tensor q, k, v, sri;  // sri undefined: None
  bool causal = false, deterministic = false, return_lse = false, has_scale = false;
  double scale = 0;
  int layout = 0, kernel = 0, variant = 0, mask_method = 0;
};

// A tensor the fast path takes: exactly torch.Tensor (or Parameter; a subclass goes
// through Python), strided, with storage, on a CUDA device (or the CPU in the check).
bool plain_tensor(py::handle h, at::Tensor &out) {
  if (!THPVariable_CheckExact(h.ptr()))
    return false;
  const at::Tensor &t = THPVariable_Unpack(h.ptr());
  if (!t.defined() || t.layout() != c10::kStrided || t.is_nested() || !t.unsafeGetTensorImpl()->has_storage() ||
      t.dim() != 4)
    return false;
  if (!(t.is_cuda() || (g_cpu_check && t.is_cpu())))
    return false;
  out = t;
  return true;
}

int truth(py::handle h) {  // Python's bool(h); -1 where that raises (Python's path then raises it)
  const int r = PyObject_IsTrue(h.ptr());
  if (r < 0)
    PyErr_Clear();
  return r;
}

int name_code(py::handle h, const char *const *names, const int *codes, int n) {
  if (!PyUnicode_Check(h.ptr()))
    return -100;
  for (int i = 0; i < n; ++i)
    if (PyUnicode_CompareWithASCIIString(h.ptr(), names[i]) == 0)
      return codes[i];
  return -100;
}

// Reads the arguments; false for any call the fast path leaves to Python (which then
// takes or refuses it with its own checks).
bool read_args(Args &a, py::handle q, py::handle k, py::handle v, py::handle sri, py::handle causal,
               py::handle scale, py::handle deterministic, py::handle layout, py::handle kernel,
               py::handle variant, py::handle mask_method) {
  static const char *const kLayouts[] = {"bshd", "bhsd"};
  static const int kLayoutCodes[] = {0, 1};
  static const char *const kKernels[] = {"auto", "sm80", "sm90"};  // torch.py's _KERNELS
  static const int kKernelCodes[] = {-1, 0, 1};
  static const char *const kVariants[] = {"skip", "noskip"};  // torch.py's _VARIANTS
  static const int kVariantCodes[] = {0, 1};
  static const char *const kMaskMethods[] = {"auto", "slices", "r2p", "words"};  // torch.py's _MASK_METHODS
  static const int kMaskMethodCodes[] = {0, 1, 2, 3};
  if (!plain_tensor(q, a.q) || !plain_tensor(k, a.k) || !plain_tensor(v, a.v))
    return false;
  if (!sri.is_none()) {  // used as given by Python only when a contiguous tensor on q's device
    if (!plain_tensor(sri, a.sri) || !a.sri.is_contiguous() || a.sri.device() != a.q.device() ||
        a.sri.is_inference())
      return false;
  }
  const int c = truth(causal), d = truth(deterministic);
  if (c < 0 || d < 0)
    return false;
  a.causal = c, a.deterministic = d;
  a.has_scale = !scale.is_none();
  if (a.has_scale) {
    a.scale = PyFloat_AsDouble(scale.ptr());  // float(scale), as _make_plan reads it
    if (a.scale == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
  }
  a.layout = name_code(layout, kLayouts, kLayoutCodes, 2);
  a.kernel = name_code(kernel, kKernels, kKernelCodes, 3);
  a.variant = name_code(variant, kVariants, kVariantCodes, 2);
  a.mask_method = name_code(mask_method, kMaskMethods, kMaskMethodCodes, 4);
  return a.layout != -100 && a.kernel != -100 && a.variant != -100 && a.mask_method != -100;
}

int64_t *put_tensor(int64_t *w, const at::Tensor &t) {
  const auto sz = t.sizes(), st = t.strides();
  for (int i = 0; i < 4; ++i)
    *w++ = sz[i];
  for (int i = 0; i < 4; ++i)
    *w++ = st[i];
  *w++ = static_cast<int64_t>(t.scalar_type());
  *w++ = static_cast<int64_t>(t.device().type());
  *w++ = t.device().index();
  return w;
}

PlanKey plan_key(const Args &a) {
  PlanKey key{};
  int64_t *w = key.data();
  w = put_tensor(w, a.q);
  w = put_tensor(w, a.k);
  w = put_tensor(w, a.v);
  if (a.sri.defined()) {
    *w++ = 1;
    for (int i = 0; i < 4; ++i)
      *w++ = a.sri.sizes()[i];
    *w++ = static_cast<int64_t>(a.sri.scalar_type());
  } else {
    for (int i = 0; i < 6; ++i)
      *w++ = 0;
  }
  int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &a.scale, sizeof scale_bits);
  *w++ = a.causal;
  *w++ = a.deterministic;
  *w++ = a.has_scale;
  *w++ = a.has_scale ? scale_bits : 0;
  *w++ = a.layout;
  *w++ = a.kernel;
  *w++ = a.variant;
  *w++ = a.mask_method;
  return key;
}

// The current stream of the plan's device, as torch.py's _stream reads it.
int64_t current_stream_of(const Plan &p) {
  if (g_cpu_check)
    return g_cpu_stream;
  const auto *impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const c10::Stream s = impl->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(p.device)));
  return reinterpret_cast<int64_t>(native_handle(s, 0));
}

std::array<int64_t, 4> sizes4(const at::Tensor &t) {
  const auto sz = t.sizes();
  return {sz[0], sz[1], sz[2], sz[3]};
}

// The intervals the fast path may use for this call, or null (a miss).
const at::Tensor *find_intervals(const Args &a, const Plan &p, int64_t stream) {
  Caches &c = caches();
  if (!a.sri.defined()) {
    const auto it = c.none.find(NoneKey{p.device, p.seqlen_q, p.seqlen_k, stream});
    return it == c.none.end() ? nullptr : &it->second;
  }
  const auto it = c.sri.find(a.sri.unsafeGetTensorImpl());
  if (it == c.sri.end())
    return nullptr;
  const SriEntry &e = it->second;
  if (e.ref.expired() || e.version != a.sri._version() || e.data != a.sri.const_data_ptr() ||
      e.sizes != sizes4(a.sri) || e.seqlen_q != p.seqlen_q || e.causal != a.causal || e.stream != stream)
    return nullptr;
  return &e.iv;
}

// torch.py's no-autograd call (flashmask_attention's last lines, _fwd with keep_lse =
// return_lse): o allocated as _fwd does; the lse a new tensor when returned, else the
// plan's scratch buffer for this stream (made here once, with the GIL held); one call of
// the same entry point with the same arguments.
py::object forward_nograd(const c10::intrusive_ptr<Plan> &plan, const at::Tensor &iv, int64_t stream,
                          const Args &a, bool return_lse) {
  Plan &p = *plan;
  check_aligned(a.q, a.k, a.v);
  float *scratch = nullptr;
  if (!return_lse) {
    at::Tensor &t = p.scratch[stream];
    if (!t.defined()) {
      t = at::empty(p.lse_shape, p.lse_opts);
      ++caches().scratch;
    }
    scratch = t.data_ptr<float>();
  }
  at::Tensor o, lse;
  int status;
  ErrBuf err;
  err.msg[0] = '\0';
  {
    py::gil_scoped_release nogil;  // as ctypes releases it around the call
    o = new_o(p, a.q);
    float *lp = scratch;
    if (return_lse) {
      lse = at::empty(p.lse_shape, p.lse_opts);
      lp = lse.data_ptr<float>();
    }
    status = p.fwd(p.shape(), p.device, iv.data_ptr<int32_t>(), a.q.data_ptr(), a.k.data_ptr(), a.v.data_ptr(),
                   o.data_ptr(), lp, p.variant, reinterpret_cast<void *>(stream), &err);
  }
  check(status, err);
  if (return_lse)
    return py::make_tuple(std::move(o), std::move(lse));
  return py::cast(std::move(o));
}

// flashmask_attention's call, autograd recording it or not: the output (or (o, lse)),
// or None when the call is not one the caches hold (Python's path then runs and
// remembers it). With grad mode off or no input requiring grad, the forward alone
// (forward_nograd); else the C++ Function.
py::object fast(py::handle q, py::handle k, py::handle v, py::handle sri, py::handle causal, py::handle scale,
                py::handle return_lse, py::handle deterministic, py::handle layout, py::handle kernel,
                py::handle variant, py::handle mask_method) {
  Caches &c = caches();
  Args a;
  int rl = 0;
  if (!read_args(a, q, k, v, sri, causal, scale, deterministic, layout, kernel, variant, mask_method) ||
      (rl = truth(return_lse)) < 0) {
    ++c.declined;
    return py::none();
  }
  const bool grad = at::GradMode::is_enabled() && (a.q.requires_grad() || a.k.requires_grad() || a.v.requires_grad());
  const auto pit = c.plans.find(plan_key(a));
  if (pit == c.plans.end()) {
    ++c.no_plan;
    return py::none();
  }
  c10::intrusive_ptr<Plan> plan = pit->second;  // own references: the caches may change without the GIL
  const int64_t stream = current_stream_of(*plan);
  const at::Tensor *found = find_intervals(a, *plan, stream);
  if (!found) {
    ++c.no_intervals;
    return py::none();
  }
  const at::Tensor iv = *found;
  if (!grad) {
    ++c.hits_nograd;
    return forward_nograd(plan, iv, stream, a, rl);
  }
  ++c.hits;
  const Call call{plan.get(), &iv, stream};
  if (rl) {
    variable_list out;
    {
      py::gil_scoped_release nogil;
      out = FlashMaskLse::apply(a.q, a.k, a.v, call);
    }
    return py::make_tuple(std::move(out[0]), std::move(out[1]));
  }
  at::Tensor o;
  {
    py::gil_scoped_release nogil;
    o = FlashMask::apply(a.q, a.k, a.v, call);
  }
  return py::cast(std::move(o));
}

// After Python's path ran a call: its plan and intervals, under the keys fast() looks
// them up by. False (nothing kept) for a call fast() would not take, or where the
// stream Python read is not the one read here.
bool remember(py::handle q, py::handle k, py::handle v, py::handle sri, py::handle causal, py::handle scale,
              py::handle deterministic, py::handle layout, py::handle kernel, py::handle variant,
              py::handle mask_method, const c10::intrusive_ptr<Plan> &plan, const at::Tensor &iv, int64_t stream) {
  Caches &c = caches();
  Args a;
  if (!plan || plan->seqlen_q <= 0 || !iv.defined() ||
      !read_args(a, q, k, v, sri, causal, scale, deterministic, layout, kernel, variant, mask_method) ||
      (!g_cpu_check && a.q.device().index() != plan->device) || current_stream_of(*plan) != stream) {
    ++c.refused;
    return false;
  }
  if (c.plans.size() > kCacheMax)
    c.plans.clear();
  c.plans[plan_key(a)] = plan;
  if (!a.sri.defined()) {
    if (c.none.size() > kCacheMax)
      c.none.clear();
    c.none[NoneKey{plan->device, plan->seqlen_q, plan->seqlen_k, stream}] = iv;
  } else {
    for (auto it = c.sri.begin(); it != c.sri.end();)  // the entries of freed tensors go (their intervals too)
      it = it->second.ref.expired() ? c.sri.erase(it) : std::next(it);
    if (c.sri.size() > kCacheMax)
      c.sri.clear();
    c.sri.insert_or_assign(a.sri.unsafeGetTensorImpl(),
                           SriEntry{c10::weak_intrusive_ptr<c10::TensorImpl>(a.sri.getIntrusivePtr()),
                                    a.sri._version(), a.sri.const_data_ptr(), sizes4(a.sri), plan->seqlen_q,
                                    a.causal, stream, iv});
  }
  ++c.remembered;
  return true;
}

py::dict cache_stats() {
  const Caches &c = caches();
  py::dict d;
  d["hits"] = c.hits;
  d["no_plan"] = c.no_plan;
  d["no_intervals"] = c.no_intervals;
  d["declined"] = c.declined;
  d["remembered"] = c.remembered;
  d["refused"] = c.refused;
  d["hits_nograd"] = c.hits_nograd;
  d["scratch"] = c.scratch;
  d["plans"] = c.plans.size();
  d["startend"] = c.sri.size();
  d["no_startend"] = c.none.size();
  return d;
}

void clear_caches() {
  Caches &c = caches();
  c.plans.clear();
  c.sri.clear();
  c.none.clear();
  c.hits = c.no_plan = c.no_intervals = c.declined = c.remembered = c.refused = c.hits_nograd = c.scratch = 0;
}

}  // namespace fmsim

using namespace fmsim;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fmsim.torch's autograd op in C++ (fmsim/csrc/autograd_op.cpp); used through fmsim.torch";
  py::class_<Plan, c10::intrusive_ptr<Plan>>(m, "Plan");
  m.def("make_plan", &make_plan, py::arg("problem"), py::arg("fwd"), py::arg("bwd"), py::arg("device"),
        py::arg("variant"), py::arg("bhsd"), py::arg("o_shape"), py::arg("lse_shape"), py::arg("err_bytes"),
        py::arg("cuda") = true, py::arg("seqlen_q") = 0, py::arg("seqlen_k") = 0,
        "A plan: the fm_attn_problem's bytes, the entry points' addresses, the device, the variant, "
        "the layout, o's and the lse's shapes, sizeof(fm_err); cuda=False only for a CPU check; Sq and Sk "
        "(the fast path's interval keys: a plan without them is never remembered)");
  m.def(
      "forward",
      [](const c10::intrusive_ptr<Plan> &plan, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
         const at::Tensor &iv, int64_t stream) {
        return FlashMask::apply(q, k, v, Call{plan.get(), &iv, stream});
      },
      py::call_guard<py::gil_scoped_release>(), "o (autograd records the call)");
  m.def(
      "forward_lse",
      [](const c10::intrusive_ptr<Plan> &plan, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
         const at::Tensor &iv, int64_t stream) {
        auto out = FlashMaskLse::apply(q, k, v, Call{plan.get(), &iv, stream});
        return std::make_tuple(std::move(out[0]), std::move(out[1]));
      },
      py::call_guard<py::gil_scoped_release>(), "(o, lse), the lse not differentiable");
  m.attr("has_fast") = py::bool_(HasNativeHandle<c10::Stream>::value);  // else no stream to key by here
  m.def("fast", &fast, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("startend_row_indices"),
        py::arg("causal"), py::arg("softmax_scale"), py::arg("return_lse"), py::arg("deterministic"),
        py::arg("layout"), py::arg("kernel"), py::arg("variant"), py::arg("mask_method"),
        "flashmask_attention's call from the caches (autograd recording it or not): o or (o, lse); None on a "
        "miss");
  m.def("remember", &remember, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("startend_row_indices"),
        py::arg("causal"), py::arg("softmax_scale"), py::arg("deterministic"), py::arg("layout"),
        py::arg("kernel"), py::arg("variant"), py::arg("mask_method"), py::arg("plan"), py::arg("intervals"), py::arg("stream"),
        "Keeps a call's plan and intervals (made and checked by Python's path) for fast()");
  m.def("cache_stats", &cache_stats, "The fast path's counters and cache sizes");
  m.def("clear_caches", &clear_caches, "Empties the fast path's caches and zeroes its counters");
  m.def("_cpu_check", [](bool on, int64_t stream) { g_cpu_check = on, g_cpu_stream = stream; },
        "The plumbing's CPU check only: CPU tensors taken, `stream` taken as the current stream");
  m.def("set_error_type", [](py::object t) {
    if (!g_error_type)
      g_error_type = new py::object();  // never freed: no Python call at interpreter exit
    *g_error_type = std::move(t);
  });
  py::register_local_exception_translator([](std::exception_ptr e) {
    try {
      if (e)
        std::rethrow_exception(e);
    } catch (const LibraryError &x) {
      set_python_error(x);
    }
  });
}
