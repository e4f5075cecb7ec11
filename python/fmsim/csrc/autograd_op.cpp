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
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
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

// torch.py's _fwd with keep_lse: o in q's layout and the lse, one library call.
std::pair<at::Tensor, at::Tensor> fwd(const Call &c, const at::Tensor &q, const at::Tensor &k,
                                      const at::Tensor &v) {
  const Plan &p = *c.plan;
  const auto qp = reinterpret_cast<uintptr_t>(q.data_ptr()), kp = reinterpret_cast<uintptr_t>(k.data_ptr()),
             vp = reinterpret_cast<uintptr_t>(v.data_ptr());
  if ((qp | kp | vp) & 15)
    throw py::value_error("q, k, v: data pointers must be 16-byte aligned (the kernels load with TMA)");
  at::Tensor o = p.bhsd ? at::empty_like(q) : at::empty(p.o_shape, p.o_opts);
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
                                   std::vector<int64_t> lse_shape, int64_t err_bytes, bool cuda) {
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
  return p;
}

}  // namespace fmsim

using namespace fmsim;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fmsim.torch's autograd op in C++ (fmsim/csrc/autograd_op.cpp); used through fmsim.torch";
  py::class_<Plan, c10::intrusive_ptr<Plan>>(m, "Plan");
  m.def("make_plan", &make_plan, py::arg("problem"), py::arg("fwd"), py::arg("bwd"), py::arg("device"),
        py::arg("variant"), py::arg("bhsd"), py::arg("o_shape"), py::arg("lse_shape"), py::arg("err_bytes"),
        py::arg("cuda") = true,
        "A plan: the fm_attn_problem's bytes, the entry points' addresses, the device, the variant, "
        "the layout, o's and the lse's shapes, sizeof(fm_err); cuda=False only for a CPU check");
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
