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

The op launches on the current CUDA stream of the tensors' device with no host
synchronisation: a conversion of the intervals into the kernels' vectors, the
tile-bounds preprocessing and the kernel (fm_attn_forward); the backward runs
fm_attn_backward. A row that sees no key gives output 0 and no gradient.

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
import math
import os
from typing import NamedTuple, Optional

import numpy as np
import torch

from . import _native as N

__all__ = ["flashmask_attention", "flashmask_attention_profile", "Profile", "library_path"]

_KERNELS = {"sm80": 0, "sm90": 1, "auto": -1}
_VARIANTS = {"skip": 0, "noskip": 1}
_PASS_FWD, _PASS_BWD = 1, 2


class _Tuning(C.Structure):
    _fields_ = [("sm90_mode", C.c_int32), ("sm90_order", C.c_int32)]


class _Problem(C.Structure):  # mirrors fm_attn_problem (kernels/fm_attn.h), size-checked at load
    _fields_ = [("batch", C.c_int32), ("heads", C.c_int32), ("seqlen_q", C.c_int32),
                ("seqlen_k", C.c_int32), ("head_dim", C.c_int32), ("softmax_scale", C.c_float),
                ("causal", C.c_int), ("mask_nb", C.c_int32), ("mask_nh", C.c_int32),
                ("q", C.c_void_p), ("k", C.c_void_p), ("v", C.c_void_p), ("o", C.c_void_p),
                ("lse", C.c_void_p), ("intervals", C.c_void_p), ("dense_mask", C.c_void_p),
                ("tile_class", C.c_void_p), ("tile_cycles", C.c_void_p), ("dense_per_set", C.c_int),
                ("kernel", C.c_int), ("tuning", _Tuning), ("dout", C.c_void_p), ("dq", C.c_void_p),
                ("dk", C.c_void_p), ("dv", C.c_void_p), ("deterministic", C.c_int)]


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
    try:
        lib = C.CDLL(path)
    except OSError as e:
        raise ImportError(f"fmsim.torch: cannot load {path}: {e}") from None
    vp, i32, i64, perr = C.c_void_p, C.c_int32, C.c_int64, C.POINTER(N.Err)
    sig = {
        "fm_attn_problem_size": (C.c_size_t, []),
        "fm_attn_forward": (C.c_int, [C.POINTER(_Problem), C.c_int, C.c_int, vp, perr]),
        "fm_attn_backward": (C.c_int, [C.POINTER(_Problem), C.c_int, C.c_int, vp, perr]),
        "fm_attn_intervals_from_startend": (C.c_int, [vp, i32, i64, i32, i32, C.c_int, vp, vp, perr]),
        "fm_attn_use_device": (C.c_int, [i32, perr]),
        "fm_attn_device_kernel": (C.c_int, [C.c_int, C.POINTER(C.c_int), perr]),
        "fm_kernel_tile_size": (C.c_int, [C.c_int, C.c_int, i32, C.POINTER(i32), C.POINTER(i32), perr]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if lib.fm_attn_problem_size() != C.sizeof(_Problem):
        raise ImportError(f"fmsim.torch: {path} does not match this package (fm_attn_problem is "
                          f"{lib.fm_attn_problem_size()} bytes there, {C.sizeof(_Problem)} here)")
    return lib


_lib = _load()
_err = N.Err()  # one message buffer; the op is called from one thread per process in practice
_kernel_of_device: dict = {}
_empty_intervals: dict = {}


def _check(status: int) -> None:
    if status != 0:
        raise N.FmsimError(_err.msg.decode("utf-8", "replace"), status)


def _resolve_kernel(kernel: str, device: torch.device) -> int:
    key = (kernel, device.index)
    kid = _kernel_of_device.get(key)
    if kid is None:
        if kernel not in _KERNELS:
            raise ValueError(f"kernel {kernel!r}: expected one of {', '.join(_KERNELS)}")
        _check(_lib.fm_attn_use_device(device.index, C.byref(_err)))
        out = C.c_int(0)
        _check(_lib.fm_attn_device_kernel(_KERNELS[kernel], C.byref(out), C.byref(_err)))
        kid = _kernel_of_device[key] = out.value
    return kid


def _tile(kid: int, pass_: int, d: int) -> tuple[int, int]:
    br, bc = C.c_int32(0), C.c_int32(0)
    _check(_lib.fm_kernel_tile_size(kid, pass_, d, C.byref(br), C.byref(bc), C.byref(_err)))
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
        raise ValueError(f"{name}: {t.dim()} dimensions; expected 4, {'(B, H, S, D)' if layout == 'bhsd' else '(B, S, H, D)'}")
    x = t.transpose(1, 2) if layout == "bhsd" else t
    if not x.is_contiguous():
        raise ValueError(f"{name}: strides {tuple(t.stride())} for shape {tuple(t.shape)} are not a "
                         f"contiguous (B, S, H, D) buffer{' seen as (B, H, S, D)' if layout == 'bhsd' else ''};"
                         " fmsim copies nothing: pass .contiguous() or the other layout=")
    if x.data_ptr() % 16:
        raise ValueError(f"{name}: data pointer not 16-byte aligned (the kernels load with TMA)")
    return x


class _Shape(NamedTuple):
    B: int
    Sq: int
    Sk: int
    H: int
    D: int


def _shapes(q, k, v) -> _Shape:
    B, Sq, H, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[2] != H or k.shape[3] != D:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be (B={B}, Sk, H={H}, D={D}) "
                         f"like q {tuple(q.shape)} (in (B, S, H, D) order)")
    if D not in (64, 128):
        raise ValueError(f"head dim {D}: fmsim's kernels take 64 or 128")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v on {q.device}, {k.device}, {v.device}: expected one device")
    if B * H > 65535:
        raise ValueError(f"batch * heads = {B * H}: the kernels take at most 65535")
    return _Shape(B, Sq, k.shape[1], H, D)


def _intervals(sri, s: _Shape, causal: bool, device: torch.device, stream: int):
    """(intervals (nsets, 4, Sk) int32 on the device, nb, nh) from Paddle's layout."""
    if sri is None:
        key = (device.index, s.Sq, s.Sk)
        iv = _empty_intervals.get(key)
        if iv is None:
            iv = torch.empty((1, 4, s.Sk), dtype=torch.int32, device=device)
            iv[:, 0:2] = s.Sq  # LT = [Sq, Sq), UT = [0, 0): nothing masked but the causal triangle
            iv[:, 2:4] = 0
            _empty_intervals[key] = iv
        return iv, 1, 1
    if not isinstance(sri, torch.Tensor):
        sri = torch.as_tensor(np.asarray(sri))
    if sri.dtype != torch.int32:
        raise TypeError(f"startend_row_indices: dtype {sri.dtype}; expected torch.int32 (Paddle's layout)")
    if sri.dim() != 4:
        raise ValueError(f"startend_row_indices: shape {tuple(sri.shape)}; expected [B or 1, H or 1, Sk, k]")
    nb, nh, sk, kk = sri.shape
    if nb not in (1, s.B) or nh not in (1, s.H) or sk != s.Sk:
        raise ValueError(f"startend_row_indices: shape {tuple(sri.shape)}; expected [1 or {s.B}, 1 or {s.H}, "
                         f"{s.Sk}, k] for B={s.B}, H={s.H}, Sk={s.Sk}")
    if (causal and kk not in (1, 2)) or (not causal and kk not in (2, 4)):
        raise ValueError(f"startend_row_indices: k = {kk}; a {'causal' if causal else 'bidirectional'} "
                         f"mask takes {'1 or 2' if causal else '2 or 4'}")
    if sri.device != device:
        sri = sri.to(device)
    sri = sri.contiguous()
    iv = torch.empty((nb * nh, 4, s.Sk), dtype=torch.int32, device=device)
    _check(_lib.fm_attn_intervals_from_startend(sri.data_ptr(), kk, nb * nh, s.Sq, s.Sk, int(causal),
                                                iv.data_ptr(), stream, C.byref(_err)))
    return iv, nb, nh


def _problem(s: _Shape, scale: float, causal: bool, iv, nb: int, nh: int, kid: int) -> _Problem:
    p = _Problem()
    p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim = s.B, s.H, s.Sq, s.Sk, s.D
    p.softmax_scale, p.causal, p.mask_nb, p.mask_nh = scale, int(causal), nb, nh
    p.intervals, p.kernel = iv.data_ptr(), kid
    return p


class _Prepared(NamedTuple):
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    shape: _Shape
    iv: torch.Tensor
    nb: int
    nh: int
    kid: int
    scale: float
    stream: int


def _prepare(q, k, v, sri, causal, softmax_scale, layout, kernel) -> _Prepared:
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"layout {layout!r}: expected 'bshd' (the kernels' own) or 'bhsd'")
    q, k, v = _bshd("q", q, layout), _bshd("k", k, layout), _bshd("v", v, layout)
    s = _shapes(q, k, v)
    dev = q.device
    kid = _resolve_kernel(kernel, dev)
    _check(_lib.fm_attn_use_device(dev.index, C.byref(_err)))
    stream = torch.cuda.current_stream(dev).cuda_stream
    iv, nb, nh = _intervals(sri, s, bool(causal), dev, stream)
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(s.D)
    if not scale > 0:
        raise ValueError(f"softmax_scale {softmax_scale}: expected a positive number")
    return _Prepared(q, k, v, s, iv, nb, nh, kid, scale, stream)


def _forward(pp: _Prepared, causal: bool, variant: int, tiles=None):
    s = pp.shape
    o = torch.empty((s.B, s.Sq, s.H, s.D), dtype=torch.bfloat16, device=pp.q.device)
    lse = torch.empty((s.B, s.H, s.Sq), dtype=torch.float32, device=pp.q.device)
    p = _problem(s, pp.scale, causal, pp.iv, pp.nb, pp.nh, pp.kid)
    p.q, p.k, p.v, p.o, p.lse = pp.q.data_ptr(), pp.k.data_ptr(), pp.v.data_ptr(), o.data_ptr(), lse.data_ptr()
    if tiles is not None:
        p.tile_class, p.tile_cycles = tiles[0].data_ptr(), tiles[1].data_ptr()
    _check(_lib.fm_attn_forward(C.byref(p), variant, int(tiles is not None), pp.stream, C.byref(_err)))
    return o, lse


def _backward(pp: _Prepared, causal: bool, variant: int, o, lse, dout, deterministic: bool, tiles=None):
    s = pp.shape
    if dout.dtype != torch.bfloat16:
        dout = dout.to(torch.bfloat16)
    dout = dout.contiguous()
    dq, dk, dv = torch.empty_like(pp.q), torch.empty_like(pp.k), torch.empty_like(pp.v)
    p = _problem(s, pp.scale, causal, pp.iv, pp.nb, pp.nh, pp.kid)
    p.q, p.k, p.v, p.o, p.lse = pp.q.data_ptr(), pp.k.data_ptr(), pp.v.data_ptr(), o.data_ptr(), lse.data_ptr()
    p.dout, p.dq, p.dk, p.dv, p.deterministic = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), int(deterministic)
    if tiles is not None:
        p.tile_class, p.tile_cycles = tiles[0].data_ptr(), tiles[1].data_ptr()
    _check(_lib.fm_attn_use_device(pp.q.device.index, C.byref(_err)))
    stream = torch.cuda.current_stream(pp.q.device).cuda_stream
    _check(_lib.fm_attn_backward(C.byref(p), variant, int(tiles is not None), stream, C.byref(_err)))
    return dq, dk, dv


class _FlashMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, pp, causal, variant, deterministic, layout):
        o, lse = _forward(pp, causal, variant)
        ctx.save_for_backward(q, k, v, o, lse, pp.iv)
        ctx.meta = (pp._replace(q=None, k=None, v=None, iv=None), causal, variant, deterministic, layout)
        ctx.mark_non_differentiable(lse)
        return (o.transpose(1, 2) if layout == "bhsd" else o), lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, o, lse, iv = ctx.saved_tensors
        meta, causal, variant, deterministic, layout = ctx.meta
        if layout == "bhsd":
            q, k, v, dout = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dout.transpose(1, 2)
        pp = meta._replace(q=q, k=k, v=v, iv=iv)
        dq, dk, dv = _backward(pp, causal, variant, o, lse, dout, deterministic)
        if layout == "bhsd":
            dq, dk, dv = dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
        return dq, dk, dv, None, None, None, None, None


def flashmask_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, startend_row_indices=None,
                        causal: bool = False, *, softmax_scale: Optional[float] = None,
                        return_lse: bool = False, deterministic: bool = False, layout: str = "bshd",
                        variant: str = "skip", kernel: str = "auto"):
    """FlashMask attention (see the module's text). Returns out, or (out, lse)
    with return_lse. variant "noskip" visits every tile (the baseline; its
    output and, with deterministic, its gradients are bit-identical to skip's);
    kernel "auto" is the fastest the device runs (sm90 on Hopper; sm80 has no
    backward)."""
    if variant not in _VARIANTS:
        raise ValueError(f"variant {variant!r}: expected 'skip' or 'noskip'")
    pp = _prepare(q, k, v, startend_row_indices, causal, softmax_scale, layout, kernel)
    o, lse = _FlashMask.apply(q, k, v, pp, bool(causal), _VARIANTS[variant], bool(deterministic), layout)
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


def _tile_tensors(s: _Shape, br: int, bc: int, device):
    tr, tc = -(-s.Sq // br), -(-s.Sk // bc)
    return (torch.zeros((s.B, s.H, tr, tc), dtype=torch.uint8, device=device),
            torch.zeros((s.B, s.H, tr, tc), dtype=torch.int64, device=device))


def flashmask_attention_profile(q, k, v, startend_row_indices=None, causal: bool = False, *,
                                dout: Optional[torch.Tensor] = None, softmax_scale=None,
                                deterministic: bool = False, layout: str = "bshd",
                                kernel: str = "auto") -> Profile:
    """The instrumented forward (and backward when dout is given) on the same
    arguments as flashmask_attention: outputs, gradients and per-tile classes
    and cycles as tensors (no autograd). Asynchronous like the op."""
    pp = _prepare(q, k, v, startend_row_indices, causal, softmax_scale, layout, kernel)
    s, dev = pp.shape, pp.q.device
    ft = _tile(pp.kid, _PASS_FWD, s.D)
    tiles = _tile_tensors(s, *ft, dev)
    o, lse = _forward(pp, bool(causal), 0, tiles)
    prof = dict(out=o.transpose(1, 2) if layout == "bhsd" else o, lse=lse, tile=ft,
                tile_class=tiles[0], tile_cycles=tiles[1])
    if dout is not None:
        d = dout.transpose(1, 2) if layout == "bhsd" else dout
        bt = _tile(pp.kid, _PASS_BWD, s.D)
        btiles = _tile_tensors(s, *bt, dev)
        dq, dk, dv = _backward(pp, bool(causal), 0, o, lse, d, deterministic, btiles)
        if layout == "bhsd":
            dq, dk, dv = dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
        prof.update(dq=dq, dk=dk, dv=dv, tile_bwd=bt, tile_class_bwd=btiles[0], tile_cycles_bwd=btiles[1])
    return Profile(**prof)
