"""fmsim.torch: FlashMask attention on fmsim's Hopper kernels, as a PyTorch op.

    from fmsim.torch import flashmask_attention
    out = flashmask_attention(q, k, v, startend_row_indices, causal=True)
    out.sum().backward()                      # fmsim's backward kernel

Arguments follow PaddlePaddle's ``flashmask_attention``:

* ``q`` (B, Sq, H, D), ``k`` and ``v`` (B, Sk, H, D): bf16 CUDA tensors, head dim
  D 64 or 128, the same B, H and D (no grouped heads), contiguous in that
  (B, S, H, D) layout, which is the kernels' own (kernels/fm_attn.h). With
  ``layout="bhsd"`` they are (B, H, S, D) views whose ``transpose(1, 2)`` is
  contiguous (a (B, S, H, D) buffer seen head-major): no copy is ever made of
  q, k or v; anything else is refused with the reason. The output and the
  gradients come back in the layout of the inputs.
* ``startend_row_indices``: int32 [B or 1, H or 1, Sk, k], Paddle's layout
  (docs/DESIGN.md, "Semantics"): k = 1 (causal: LTS) or 2 (causal: LTS, LTE;
  bidirectional: LTS, UTE) or 4 (bidirectional: LTS, LTE, UTS, UTE). Row i may
  not see key j when i lies in [LTS_j, LTE_j) or [UTS_j, UTE_j), or, when
  ``causal``, when i < j + Sq - Sk. ``None``: no interval (full or causal).
  A CUDA tensor is used in place; a NumPy array or CPU tensor is copied to the
  device first (a host-to-device copy: pass a CUDA tensor in loops).
* ``softmax_scale`` (default 1/sqrt(D)), ``return_lse`` (also the log-sum-exp,
  (B, H, Sq) fp32, natural log, -inf for a row that sees no key, not
  differentiable), ``deterministic`` (the backward's dQ added in a fixed order:
  bit-identical gradients run to run and between skip and noskip).
* ``mask_method``: how the sm90 kernels mask the elements of a partial tile,
  forward and backward: ``"auto"`` (the library's choice, R2P), ``"r2p"``,
  ``"slices"`` or ``"words"`` (the forward reads R2P's words precomputed per
  tile; the backward runs r2p) (core/fm_kernels.h, fm_mask_method). All give
  the same output and gradients bit for bit; only their speed differs (issue
  25: for timing them against each other, bench/protocol_bench.py
  --fmsim-variants). ``"slices"``, not the library's, runs with
  ``variant="skip"`` only; ``"words"`` runs r2p where it is not built
  (``variant="noskip"``; a words workspace over 256 MiB), saying so once on
  stderr; the sm80 kernel takes ``"auto"`` only (the library refuses the
  launch: ``fmsim.FmsimError``).

The op launches on the current CUDA stream of the tensors' device with no host
synchronisation: the tile-bounds preprocessing and the kernel (fm_attn_forward);
the backward runs fm_attn_backward. The intervals are converted into the
kernels' vectors on the device once per startend tensor and version (a change
made in place through torch is seen; one made behind torch's back, through a
raw pointer, is not: pass a new tensor then) and kept while that tensor lives.
A row that sees no key gives output 0 and no gradient.

The kernels' scratch memory (the backward's fp32 dQ accumulator, 4 bytes per
element of q) comes from a pool of fmsim's own that keeps it between calls;
``trim_workspace`` gives it back (PyTorch's allocator does not see it).

When autograd records a call, the op is a C++ ``torch::autograd::Function``
(fmsim/csrc/autograd_op.cpp, built on the first such call by
``torch.utils.cpp_extension.load`` and cached in torch's extension folder) or,
when that cannot be built, the Python ``torch.autograd.Function`` below: the
same library calls with the same arguments, so the same bits.
``FMSIM_TORCH_CPP=0`` keeps the Python Function, ``=1`` makes a failed build an
error; unset, a failed build falls back to the Python Function with one
RuntimeWarning (``autograd_backend()`` says which runs and why). ``import
fmsim.torch`` compiles nothing; ``python3 -m fmsim.torch build`` (or
``build_autograd_op()``) compiles the C++ op ahead, at install time. The C++ op
also looks up a call's plan and intervals itself when a call like it ran before
(its fast path: no Python work per call beyond one function call), for calls
without autograd too once it is in use (after the first autograd call, or
``autograd_backend()``; a call without autograd never builds it): it then runs
the forward as the Python path does, the lse in a scratch buffer of its own per
plan and stream.

``flashmask_attention_profile`` runs the instrumented kernels and returns the
per-tile classes and clock64 cycles as tensors (``Profile``).

Errors: ``ValueError``/``TypeError`` for unsupported dtype, shape, layout or
device (one line saying what and what was expected); ``fmsim.FmsimError`` when
the library refuses a launch. ``import fmsim`` never imports torch; this module
does, and needs libfmsim_cuda.so (the CMake target ``fmsim_cuda``), found at
``$FMSIM_CUDA_LIBRARY``, in the installed package or in the checkout's build/.
"""
from __future__ import annotations

import ctypes as C
import logging
import math
import os
import threading
import time
import warnings
import weakref
from typing import NamedTuple, Optional

import numpy as np
import torch

from . import _native as N

__all__ = ["flashmask_attention", "flashmask_attention_profile", "Profile", "library_path", "trim_workspace",
           "autograd_backend", "build_autograd_op"]

_KERNELS = {"sm80": 0, "sm90": 1, "auto": -1}
_VARIANTS = {"skip": 0, "noskip": 1}
_MASK_METHODS = {"auto": 0, "slices": 1, "r2p": 2, "words": 3}  # fm_mask_method (core/fm_kernels.h)
_PASS_FWD, _PASS_BWD = 1, 2


class _Problem(C.Structure):  # mirrors fm_attn_problem (kernels/fm_attn.h), size-checked at load
    _fields_ = [("batch", C.c_int32), ("heads", C.c_int32), ("seqlen_q", C.c_int32),
                ("seqlen_k", C.c_int32), ("head_dim", C.c_int32), ("softmax_scale", C.c_float),
                ("causal", C.c_int), ("mask_nb", C.c_int32), ("mask_nh", C.c_int32),
                ("q", C.c_void_p), ("k", C.c_void_p), ("v", C.c_void_p), ("o", C.c_void_p),
                ("lse", C.c_void_p), ("intervals", C.c_void_p), ("dense_mask", C.c_void_p),
                ("tile_class", C.c_void_p), ("tile_cycles", C.c_void_p), ("dense_per_set", C.c_int),
                ("kernel", C.c_int), ("dout", C.c_void_p), ("dq", C.c_void_p),
                ("dk", C.c_void_p), ("dv", C.c_void_p), ("deterministic", C.c_int),
                ("mask_method", C.c_int32)]


def library_path() -> str:
    """Where libfmsim_cuda.so is loaded from: $FMSIM_CUDA_LIBRARY, the copy
    installed with the package, or the checkout's build/kernels/."""
    for p in N._candidates("FMSIM_CUDA_LIBRARY", "libfmsim_cuda.so",
                           os.path.join("kernels", "libfmsim_cuda.so")):
        if os.path.isfile(p):
            return p
    raise ImportError("fmsim.torch: libfmsim_cuda.so not found (set FMSIM_CUDA_LIBRARY, or build "
                      "it with `cmake --build build --target fmsim_cuda` where nvcc exists)")


def _load():
    path = library_path()
    vp, i32, i64, perr = C.c_void_p, C.c_int32, C.c_int64, C.POINTER(N.Err)
    sig = {
        "fm_attn_problem_size": (C.c_size_t, []),
        "fm_attn_problem_member": (C.c_char_p, [i32, C.POINTER(C.c_size_t)]),
        "fm_attn_forward": (C.c_int, [C.POINTER(_Problem), C.c_int, C.c_int, vp, perr]),
        "fm_attn_backward": (C.c_int, [C.POINTER(_Problem), C.c_int, C.c_int, vp, perr]),
        "fm_attn_forward_ptrs": (C.c_int, [C.POINTER(_Problem), i32, vp, vp, vp, vp, vp, vp, C.c_int, vp,
                                           perr]),
        "fm_attn_backward_ptrs": (C.c_int, [C.POINTER(_Problem), i32, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp,
                                            C.c_int, vp, perr]),
        "fm_attn_intervals_from_startend": (C.c_int, [vp, i32, i64, i32, i32, C.c_int, vp, vp, perr]),
        "fm_attn_use_device": (C.c_int, [i32, perr]),
        "fm_attn_trim_workspace": (C.c_int, [i32, C.c_size_t, perr]),
        "fm_attn_device_kernel": (C.c_int, [C.c_int, C.POINTER(C.c_int), perr]),
        "fm_kernel_tile_size": (C.c_int, [C.c_int, C.c_int, i32, C.POINTER(i32), C.POINTER(i32), perr]),
    }
    lib = N.load_library(path, sig, "fmsim.torch")
    _check_mirror(lib, path, _Problem)
    return lib


def _check_mirror(lib, path: str, mirror) -> None:
    """ImportError unless `mirror` is fm_attn_problem of the library at `path` field
    for field (names, order, offsets) and in size: a field added in the struct's tail
    padding leaves its size as it was."""
    def fail(what):
        raise ImportError(f"fmsim.torch: {path} does not match this package ({what})")
    if lib.fm_attn_problem_size() != C.sizeof(mirror):
        fail(f"fm_attn_problem is {lib.fm_attn_problem_size()} bytes there, {C.sizeof(mirror)} here")
    there, off = [], C.c_size_t(0)
    while (name := lib.fm_attn_problem_member(len(there), C.byref(off))) is not None:
        there.append((name.decode(), off.value))
    here = [(name, getattr(mirror, name).offset) for name, *_ in mirror._fields_]
    for i in range(max(len(there), len(here))):
        a = there[i] if i < len(there) else None
        b = here[i] if i < len(here) else None
        if a != b:
            fail(f"fm_attn_problem's member {i} is " + (f"{a[0]} at byte {a[1]}" if a else "none") +
                 " there, " + (f"{b[0]} at byte {b[1]}" if b else "none") + " here")


_lib = _load()
_err = N.Err()  # one message buffer; the op is called from one thread per process in practice
_errp = C.byref(_err)
_kernel_of_device: dict = {}
_plans: dict = {}
_converted: dict = {}  # id(startend) -> (weakref to it, version, (Sq, causal, stream), intervals)
_no_intervals: dict = {}  # (device, Sq, Sk, stream) -> the intervals of no interval
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(index: int) -> int:
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def _check(status: int) -> None:
    if status != 0:
        raise N.FmsimError(_err.msg.decode("utf-8", "replace"), status)


def _resolve_kernel(kernel: str, device: torch.device) -> int:
    key = (kernel, device.index)
    kid = _kernel_of_device.get(key)
    if kid is None:
        if kernel not in _KERNELS:
            raise ValueError(f"kernel {kernel!r}: expected one of {', '.join(_KERNELS)}")
        _check(_lib.fm_attn_use_device(device.index, _errp))
        out = C.c_int(0)
        _check(_lib.fm_attn_device_kernel(_KERNELS[kernel], C.byref(out), _errp))
        kid = _kernel_of_device[key] = out.value
    return kid


def _tile(kid: int, pass_: int, d: int) -> tuple[int, int]:
    br, bc = C.c_int32(0), C.c_int32(0)
    _check(_lib.fm_kernel_tile_size(kid, pass_, d, C.byref(br), C.byref(bc), _errp))
    return br.value, bc.value


def _bshd(name: str, t, layout: str) -> torch.Tensor:
    """t as its (B, S, H, D) contiguous view, or a one-line refusal."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.bfloat16:
        raise TypeError(f"{name}: dtype {t.dtype}; fmsim's kernels take torch.bfloat16")
    if not t.is_cuda:
        raise ValueError(f"{name}: on {t.device}; fmsim's kernels need a CUDA tensor")
    if t.dim() != 4:
        want = "(B, H, S, D)" if layout == "bhsd" else "(B, S, H, D)"
        raise ValueError(f"{name}: {t.dim()} dimensions; expected 4, {want}")
    x = t.transpose(1, 2) if layout == "bhsd" else t
    if not x.is_contiguous():
        seen = " seen as (B, H, S, D)" if layout == "bhsd" else ""
        raise ValueError(f"{name}: strides {tuple(t.stride())} for shape {tuple(t.shape)} are not a "
                         f"contiguous (B, S, H, D) buffer{seen}; fmsim copies nothing: pass .contiguous() "
                         "or the other layout=")
    return x


class _Shape(NamedTuple):
    B: int
    Sq: int
    Sk: int
    H: int
    D: int


class _Plan:
    """What one call needs once its arguments are checked (cached by their shapes).
    A plain object, not a tuple: torch.autograd.Function.apply flattens tuple
    arguments as pytrees on every call, and the op passes its plan through it."""
    __slots__ = ("shape", "problem", "pref", "k", "device", "torch_device", "kid", "layout", "variant",
                 "o_shape", "lse_shape", "scratch", "cpp")

    def __init__(self, shape, problem, k, device, kid, layout, variant, o_shape, lse_shape):
        self.shape = shape
        self.problem = problem          # the scalars; the C entry takes the pointers as arguments
        self.pref = C.byref(problem)    # made once: the argument of every call
        self.k = k                      # startend's last dimension (0: no startend)
        self.device = device
        self.torch_device = torch.device("cuda", device)
        self.kid = kid
        self.layout = layout
        self.variant = variant
        self.o_shape = o_shape
        self.lse_shape = lse_shape
        self.scratch = {}               # stream -> an lse nobody reads (calls without autograd; the C++
                                        # fast path's no-grad calls keep their own in the C++ plan)
        self.cpp = None                 # the C++ op's copy of this plan (made at its first call through the C++ op)


def _sri_tensor(sri, device):
    if sri is None:
        return None
    if not isinstance(sri, torch.Tensor):
        sri = torch.as_tensor(np.asarray(sri))
    if sri.device != device:
        sri = sri.to(device)
    return sri if sri.is_contiguous() else sri.contiguous()


def _make_plan(q, k, v, sri, causal, scale, layout, kernel, variant, deterministic, mask_method="auto") -> _Plan:
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"layout {layout!r}: expected 'bshd' (the kernels' own) or 'bhsd'")
    if variant not in _VARIANTS:
        raise ValueError(f"variant {variant!r}: expected 'skip' or 'noskip'")
    if not isinstance(mask_method, str) or mask_method not in _MASK_METHODS:
        raise ValueError(f"mask_method {mask_method!r}: expected 'auto', 'r2p', 'slices' or 'words'")
    qb, kb, vb = _bshd("q", q, layout), _bshd("k", k, layout), _bshd("v", v, layout)
    B, Sq, H, D = qb.shape
    if kb.shape != vb.shape or kb.shape[0] != B or kb.shape[2] != H or kb.shape[3] != D:
        raise ValueError(f"k {tuple(kb.shape)} and v {tuple(vb.shape)} must be (B={B}, Sk, H={H}, D={D}) "
                         f"like q {tuple(qb.shape)} (in (B, S, H, D) order)")
    if D not in (64, 128):
        raise ValueError(f"head dim {D}: fmsim's kernels take 64 or 128")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v on {q.device}, {k.device}, {v.device}: expected one device")
    if B * H > 65535:
        raise ValueError(f"batch * heads = {B * H}: the kernels take at most 65535")
    s = _Shape(B, Sq, kb.shape[1], H, D)
    nb = nh = kk = 1
    if sri is not None:
        if sri.dtype != torch.int32:
            raise TypeError(f"startend_row_indices: dtype {sri.dtype}; expected torch.int32 (Paddle's layout)")
        if sri.dim() != 4:
            raise ValueError(f"startend_row_indices: shape {tuple(sri.shape)}; expected [B or 1, H or 1, Sk, k]")
        nb, nh, sk, kk = sri.shape
        if nb not in (1, B) or nh not in (1, H) or sk != s.Sk:
            raise ValueError(f"startend_row_indices: shape {tuple(sri.shape)}; expected [1 or {B}, 1 or {H}, "
                             f"{s.Sk}, k] for B={B}, H={H}, Sk={s.Sk}")
        if (causal and kk not in (1, 2)) or (not causal and kk not in (2, 4)):
            raise ValueError(f"startend_row_indices: k = {kk}; a {'causal' if causal else 'bidirectional'} "
                             f"mask takes {'1 or 2' if causal else '2 or 4'}")
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(D)
    if not sc > 0:
        raise ValueError(f"softmax_scale {scale}: expected a positive number")
    dev = q.device
    kid = _resolve_kernel(kernel, dev)
    p = _Problem(batch=B, heads=H, seqlen_q=Sq, seqlen_k=s.Sk, head_dim=D, softmax_scale=sc,
                 causal=int(bool(causal)), mask_nb=nb, mask_nh=nh, kernel=kid,
                 deterministic=int(bool(deterministic)), mask_method=_MASK_METHODS[mask_method])
    return _Plan(s, p, kk if sri is not None else 0, dev.index, kid, layout, _VARIANTS[variant],
                 (B, Sq, H, D), (B, H, Sq))


def _plan(q, k, v, sri, causal, scale, layout, kernel, variant, deterministic, mask_method="auto") -> _Plan:
    key = (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device, v.shape,
           v.stride(), v.dtype, v.device, None if sri is None else (sri.shape, sri.dtype), causal, scale,
           layout, kernel, variant, deterministic, mask_method)
    pl = _plans.get(key)
    if pl is None:
        pl = _make_plan(q, k, v, sri, causal, scale, layout, kernel, variant, deterministic, mask_method)
        if len(_plans) > 4096:
            _plans.clear()
        _plans[key] = pl
    return pl


def _intervals(pl: _Plan, sri, causal: bool, stream: int):
    """The kernels' vectors (nsets, 4, Sk) int32 of sri, converted on the device once
    per startend tensor and version (an in-place change through torch bumps the
    version and converts again) and per stream."""
    s = pl.shape
    if sri is None:
        key = (pl.device, s.Sq, s.Sk, stream)
        iv = _no_intervals.get(key)
        if iv is None:
            iv = _no_intervals[key] = _convert(None, pl, 1, causal, stream)
        return iv
    key = id(sri)
    ent = _converted.get(key)
    tag = (s.Sq, causal, stream)
    if ent is not None and ent[0]() is sri and ent[1] == sri._version and ent[2] == tag:
        return ent[3]
    iv = _convert(sri, pl, sri.shape[0] * sri.shape[1], causal, stream)
    if ent is None or ent[0]() is not sri:  # the entry goes with the tensor
        weakref.finalize(sri, _converted.pop, key, None)
    _converted[key] = (weakref.ref(sri), sri._version, tag, iv)
    return iv


def _convert(sri, pl: _Plan, nsets: int, causal: bool, stream: int):
    s = pl.shape
    iv = torch.empty((nsets, 4, s.Sk), dtype=torch.int32, device=torch.device("cuda", pl.device))
    _check(_lib.fm_attn_intervals_from_startend(sri.data_ptr() if sri is not None else None, pl.k, nsets, s.Sq,
                                                s.Sk, int(causal), iv.data_ptr(), stream, _errp))
    return iv


def _fwd(pl: _Plan, q, k, v, iv, stream, keep_lse: bool):
    """o (in q's layout: the (B, S, H, D) buffer) and lse (None unless keep_lse: the
    kernel then writes it into a scratch buffer kept per plan and stream, which
    stream order makes safe to reuse, so that an inference call allocates only o)."""
    qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if (qp | kp | vp) & 15:
        raise ValueError("q, k, v: data pointers must be 16-byte aligned (the kernels load with TMA)")
    o = torch.empty(pl.o_shape, dtype=torch.bfloat16, device=pl.torch_device) if pl.layout == "bshd" \
        else torch.empty_like(q)
    if keep_lse:
        lse = torch.empty(pl.lse_shape, dtype=torch.float32, device=pl.torch_device)
        lp = lse.data_ptr()
    else:
        lse = None
        lp = pl.scratch.get(stream)
        if lp is None:
            t = torch.empty(pl.lse_shape, dtype=torch.float32, device=pl.torch_device)
            pl.scratch[stream] = lp = t.data_ptr()
            pl.scratch[(stream, "t")] = t  # kept alive with the plan
    _check(_lib.fm_attn_forward_ptrs(pl.pref, pl.device, iv.data_ptr(), qp, kp, vp, o.data_ptr(), lp,
                                     pl.variant, stream, _errp))
    return o, lse


def _bwd(pl: _Plan, q, k, v, iv, o, lse, dout):
    if dout.dtype != torch.bfloat16:
        dout = dout.to(torch.bfloat16)
    db = dout.transpose(1, 2) if pl.layout == "bhsd" else dout
    if not db.is_contiguous():
        db = db.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)  # q's strides: q's layout
    _check(_lib.fm_attn_backward_ptrs(pl.pref, pl.device, iv.data_ptr(), q.data_ptr(), k.data_ptr(),
                                      v.data_ptr(), o.data_ptr(), lse.data_ptr(), db.data_ptr(), dq.data_ptr(),
                                      dk.data_ptr(), dv.data_ptr(), pl.variant, _stream(pl.device), _errp))
    return dq, dk, dv


class _Call:
    """The non-tensor arguments of one autograd call, in one object that
    Function.apply passes through untouched (its intervals are not an input)."""
    __slots__ = ("plan", "iv", "stream")

    def __init__(self, plan, iv, stream):
        self.plan, self.iv, self.stream = plan, iv, stream


class _FlashMask(torch.autograd.Function):
    """o = attention(q, k, v); the lse stays on ctx (not an output: one output
    costs less per call than two with one marked non-differentiable)."""
    @staticmethod
    def forward(ctx, q, k, v, call):
        o, lse = _fwd(call.plan, q, k, v, call.iv, call.stream, True)
        ctx.save_for_backward(q, k, v, o)
        ctx.call, ctx.lse = call, lse
        return o

    @staticmethod
    def backward(ctx, dout):
        q, k, v, o = ctx.saved_tensors
        c = ctx.call
        return (*_bwd(c.plan, q, k, v, c.iv, o, ctx.lse, dout), None)


class _FlashMaskLse(torch.autograd.Function):
    """The same with the lse returned too (return_lse=True): not differentiable."""
    @staticmethod
    def forward(ctx, q, k, v, call):
        o, lse = _fwd(call.plan, q, k, v, call.iv, call.stream, True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.call = call
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        c = ctx.call
        return (*_bwd(c.plan, q, k, v, c.iv, o, lse, dout), None)


# The autograd op in C++ (fmsim/csrc/autograd_op.cpp): Function.apply of a Python
# torch.autograd.Function alone costs more than issue 21's 20 us over the bare launch
# (bench/torch_overhead.py, "autograd floor"); torch::autograd::Function behind a
# plain pybind11 function does not go through Python for the graph's bookkeeping.
_CPP_ENV = "FMSIM_TORCH_CPP"
_CPP_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "autograd_op.cpp")
_cpp = None          # the built extension module while the C++ op is in use, else None
_fast = None         # its fast path (_cpp.fast) while in use, else None
_cpp_state = None    # None until the first autograd call decides: then (backend, reason)
_cpp_lock = threading.Lock()


def _cpp_build(verbose: bool = False):
    """Builds (or finds in torch's extension cache) and imports the C++ op."""
    if not os.path.isfile(_CPP_SOURCE):
        raise FileNotFoundError(f"{_CPP_SOURCE} is not in this installation")
    from torch.utils import cpp_extension  # imported here: `import fmsim.torch` compiles nothing
    tag = "".join(c if c.isalnum() else "_" for c in torch.__version__)  # one build per torch version
    mod = cpp_extension.load(name=f"fmsim_autograd_op_{tag}", sources=[_CPP_SOURCE],
                             extra_cflags=["-O2"], verbose=verbose)
    mod.set_error_type(N.FmsimError)
    return mod


def _build_failure(e: Exception) -> str:
    """One line of a failed build: cpp_extension's first line without the build
    log, and the log's first line that says what went wrong."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    head = lines[0].split(": [", 1)[0] if lines else ""
    detail = next((ln for ln in lines[1:] if not ln.startswith(("FAILED", "ninja:", "[")) and " -c " not in ln
                   and any(w in ln.lower() for w in ("error", "not found", "no such file"))), None)
    return f"{type(e).__name__}: {head}" + (f": {detail}" if detail else "")


def _cpp_decide():
    """At the first autograd call: the C++ op (built now) or None (the Python
    Function), by $FMSIM_TORCH_CPP: "0" the Python Function; "1" the C++ op, a
    failed build raising; unset (or "auto") the C++ op where it builds, else the
    Python Function with one RuntimeWarning that says why (autograd_backend()
    gives the reason too). Decided once per process: the warning comes once."""
    global _cpp, _cpp_state
    with _cpp_lock:
        if _cpp_state is not None:
            return _cpp
        want = os.environ.get(_CPP_ENV, "").strip().lower()
        if want not in ("", "auto", "0", "1"):
            raise ValueError(f"{_CPP_ENV}={os.environ[_CPP_ENV]!r}: expected 0 (the Python autograd Function), "
                             "1 (the C++ one, a failed build an error) or unset (the C++ one where it builds)")
        if want == "0":
            _cpp_state = ("python", f"{_CPP_ENV}=0")
            return None
        try:
            if want == "1":
                mod = _cpp_build(verbose=bool(os.environ.get("FMSIM_TORCH_CPP_VERBOSE")))
            else:  # quietly: cpp_extension's warnings and log lines (a failure warns once, below)
                log = logging.getLogger("torch.utils.cpp_extension")
                level = log.level
                log.setLevel(logging.ERROR)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        mod = _cpp_build()
                finally:
                    log.setLevel(level)
        except Exception as e:  # no compiler, no headers, no ninja, a torch without them
            why = _build_failure(e)
            if want == "1":
                raise RuntimeError(f"fmsim.torch: {_CPP_ENV}=1 but the C++ autograd op did not build ({why})") from e
            _cpp_state = ("python", f"the C++ autograd op did not build ({why})")
            warnings.warn(f"fmsim.torch: the C++ autograd op did not build ({why}); autograd runs through the "
                          f"Python Function instead, about 25 us more host time per call (python/README.md). "
                          f"{_CPP_ENV}=0 uses it without trying the build and silences this; "
                          f"`python3 -m fmsim.torch build` retries the build and shows why", RuntimeWarning,
                          stacklevel=3)
            return None
        _use_cpp(mod)
        _cpp_state = ("cpp", "built" if want == "" or want == "auto" else f"{_CPP_ENV}=1")
        return mod


def _cpp_plan(cpp, pl: _Plan):
    """The C++ op's copy of a plan: the fm_attn_problem's bytes, the two entry
    points' addresses (the same functions torch.py calls through ctypes)."""
    return cpp.make_plan(bytes(pl.problem), C.cast(_lib.fm_attn_forward_ptrs, C.c_void_p).value,
                         C.cast(_lib.fm_attn_backward_ptrs, C.c_void_p).value, pl.device, pl.variant,
                         pl.layout == "bhsd", list(pl.o_shape), list(pl.lse_shape), C.sizeof(N.Err),
                         seqlen_q=pl.shape.Sq, seqlen_k=pl.shape.Sk)


def _use_cpp(mod, fast: bool = True) -> None:
    """Which autograd Function the op uses from now on: the C++ op `mod` (with its
    fast path unless fast=False) or the Python Function (None). For the tests and
    bench/torch_overhead.py, which compare them in one process."""
    global _cpp, _fast
    _cpp = mod
    _fast = mod.fast if mod is not None and fast and getattr(mod, "has_fast", False) else None


def autograd_backend(reason: bool = False):
    """Which autograd Function the op uses: "cpp" (fmsim/csrc/autograd_op.cpp) or
    "python" (decided, and the C++ op built, on the first call that needs it:
    asking here decides). With reason=True, (backend, why)."""
    if _cpp_state is None:
        _cpp_decide()
    return _cpp_state if reason else _cpp_state[0]


def build_autograd_op(verbose: bool = False) -> str:
    """Builds the C++ autograd op now, or finds it built, in torch's extension
    cache ($TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions): the compile
    (~30-60 s) then happens here, at install time, rather than in the first
    training step. The command line does the same: `python3 -m fmsim.torch build`.
    Prints where the module is and how long it took; returns its path. A failed
    build raises RuntimeError with the compiler's first error (verbose=True, or
    FMSIM_TORCH_CPP_VERBOSE=1, shows the whole build). One build per torch
    version, made again when fmsim/csrc/autograd_op.cpp changes."""
    t0 = time.perf_counter()
    try:
        mod = _cpp_build(verbose=verbose or bool(os.environ.get("FMSIM_TORCH_CPP_VERBOSE")))
    except Exception as e:
        raise RuntimeError(f"fmsim.torch: the C++ autograd op did not build ({_build_failure(e)})") from e
    path = os.path.abspath(mod.__file__)
    print(f"fmsim.torch: the C++ autograd op is built: {path} ({time.perf_counter() - t0:.1f} s, "
          f"torch {torch.__version__})")
    return path


def flashmask_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, startend_row_indices=None,
                        causal: bool = False, *, softmax_scale: Optional[float] = None,
                        return_lse: bool = False, deterministic: bool = False, layout: str = "bshd",
                        variant: str = "skip", kernel: str = "auto", mask_method: str = "auto"):
    """FlashMask attention (see the module's text). Returns out, or (out, lse)
    with return_lse. variant "noskip" visits every tile (the baseline; its
    output and, with deterministic, its gradients are bit-identical to skip's);
    kernel "auto" is the fastest the device runs (sm90 on Hopper; sm80 has no
    backward); mask_method "auto", "r2p", "slices" or "words" (the sm90 kernels'
    way of masking a partial tile: the same bits, another speed). The checks of a
    call's shapes run once per distinct shape."""
    if _fast is not None:
        # the C++ op's plan and intervals looked up in C++ (a call like one that ran
        # before), then its autograd Function or, when autograd does not record, the
        # forward alone (_fwd's work); None: anything else, which the path below takes
        r = _fast(q, k, v, startend_row_indices, causal, softmax_scale, return_lse, deterministic, layout,
                  kernel, variant, mask_method)
        if r is not None:
            return r
    causal = bool(causal)
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        _bshd("q", q, layout), _bshd("k", k, layout), _bshd("v", v, layout)  # raises the one-line error
    sri = startend_row_indices
    if sri is not None and not (isinstance(sri, torch.Tensor) and sri.is_cuda and sri.is_contiguous()):
        sri = _sri_tensor(sri, q.device)
    pl = _plan(q, k, v, sri, causal, softmax_scale, layout, kernel, variant, deterministic, mask_method)
    if sri is not None and sri.device != q.device:
        raise ValueError(f"startend_row_indices on {sri.device}, q on {q.device}: expected one device")
    stream = _stream(pl.device)
    iv = _intervals(pl, sri, causal, stream)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    # the C++ op: decided (and built) by the first autograd call; a no-grad call uses it
    # once it is in use but never builds it
    cpp = _cpp if _cpp_state is not None or not grad else _cpp_decide()
    if cpp is not None and (grad or _fast is not None):
        cp = pl.cpp
        if cp is None:
            cp = pl.cpp = _cpp_plan(cpp, pl)
        if _fast is not None and sri is startend_row_indices:  # the next such call takes the fast path
            cpp.remember(q, k, v, sri, causal, softmax_scale, deterministic, layout, kernel, variant, mask_method,
                         cp, iv, stream)
    if grad:
        if cpp is not None:
            if return_lse:
                return cpp.forward_lse(cp, q, k, v, iv, stream)
            return cpp.forward(cp, q, k, v, iv, stream)
        if return_lse:
            return _FlashMaskLse.apply(q, k, v, _Call(pl, iv, stream))
        return _FlashMask.apply(q, k, v, _Call(pl, iv, stream))
    o, lse = _fwd(pl, q, k, v, iv, stream, return_lse)
    return (o, lse) if return_lse else o


class Profile(NamedTuple):
    """What the instrumented kernels recorded. Tiles are the kernel's own for
    the pass: tile_class uint8 (B, H, Tr, Tc) 0 masked (skipped), 1 partial, 2
    unmasked; tile_cycles int64 clock64 cycles per tile (0 for skipped ones).
    The backward's members are None without dout."""
    out: torch.Tensor
    lse: torch.Tensor
    tile: tuple
    tile_class: torch.Tensor
    tile_cycles: torch.Tensor
    dq: Optional[torch.Tensor] = None
    dk: Optional[torch.Tensor] = None
    dv: Optional[torch.Tensor] = None
    tile_bwd: Optional[tuple] = None
    tile_class_bwd: Optional[torch.Tensor] = None
    tile_cycles_bwd: Optional[torch.Tensor] = None


def _instrumented(pl: _Plan, pass_: int, ptrs: dict, iv, stream):
    """One instrumented pass through fm_attn_forward/backward: (tile, class, cycles)."""
    s = pl.shape
    br, bc = _tile(pl.kid, pass_, s.D)
    tr, tc = -(-s.Sq // br), -(-s.Sk // bc)
    dev = torch.device("cuda", pl.device)
    cls = torch.zeros((s.B, s.H, tr, tc), dtype=torch.uint8, device=dev)
    cyc = torch.zeros((s.B, s.H, tr, tc), dtype=torch.int64, device=dev)
    p = _Problem.from_buffer_copy(pl.problem)
    p.intervals, p.tile_class, p.tile_cycles = iv.data_ptr(), cls.data_ptr(), cyc.data_ptr()
    for name, ptr in ptrs.items():
        setattr(p, name, ptr)
    run = _lib.fm_attn_forward if pass_ == _PASS_FWD else _lib.fm_attn_backward
    _check(run(C.byref(p), pl.variant, 1, stream, _errp))
    return (br, bc), cls, cyc


def flashmask_attention_profile(q, k, v, startend_row_indices=None, causal: bool = False, *,
                                dout: Optional[torch.Tensor] = None, softmax_scale=None,
                                deterministic: bool = False, layout: str = "bshd",
                                kernel: str = "auto", mask_method: str = "auto") -> Profile:
    """The instrumented forward (and backward when dout is given) on the same
    arguments as flashmask_attention: outputs, gradients and per-tile classes
    and cycles as tensors (no autograd). Asynchronous like the op."""
    causal = bool(causal)
    sri = _sri_tensor(startend_row_indices, q.device)
    pl = _make_plan(q, k, v, sri, causal, softmax_scale, layout, kernel, "skip", deterministic, mask_method)
    dev = q.device
    _check(_lib.fm_attn_use_device(pl.device, _errp))
    stream = _stream(pl.device)
    iv = _intervals(pl, sri, causal, stream)
    o = torch.empty(pl.o_shape, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(pl.lse_shape, dtype=torch.float32, device=dev)
    base = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr())
    ft, fcls, fcyc = _instrumented(pl, _PASS_FWD, base, iv, stream)
    prof = dict(out=o.transpose(1, 2) if layout == "bhsd" else o, lse=lse, tile=ft, tile_class=fcls,
                tile_cycles=fcyc)
    if dout is not None:
        db = (dout.transpose(1, 2) if layout == "bhsd" else dout).to(torch.bfloat16).contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        ptrs = dict(base, dout=db.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr())
        bt, bcls, bcyc = _instrumented(pl, _PASS_BWD, ptrs, iv, stream)
        prof.update(dq=dq, dk=dk, dv=dv, tile_bwd=bt, tile_class_bwd=bcls, tile_cycles_bwd=bcyc)
    return Profile(**prof)


def trim_workspace(device=None, keep_bytes: int = 0) -> None:
    """Gives the scratch memory fmsim's kernels keep reserved on ``device``
    (default: the current CUDA device) beyond ``keep_bytes`` back to the driver.
    The kernels take their workspaces (the backward's fp32 dQ accumulator: 4
    bytes per element of q) from a pool of fmsim's own that keeps them between
    calls, so that a call after a synchronization does not map them again;
    PyTorch's allocator does not see that memory (kernels/fm_workspace.cuh)."""
    d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
    if d.type != "cuda":
        raise ValueError(f"device {device!r}: expected a CUDA device")
    index = torch.cuda.current_device() if d.index is None else d.index
    if keep_bytes < 0:
        raise ValueError(f"keep_bytes {keep_bytes}: expected 0 or more")
    _check(_lib.fm_attn_trim_workspace(index, keep_bytes, _errp))


def _main(argv=None) -> int:
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="python3 -m fmsim.torch", description="fmsim.torch's tools")
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the C++ autograd op into torch's extension cache now (install time)")
    b.add_argument("--verbose", action="store_true", help="show the build's log")
    args = ap.parse_args(argv)
    try:
        build_autograd_op(verbose=args.verbose)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
