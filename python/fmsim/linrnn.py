"""fmsim.linrnn: the chunkwise linear-attention kernel (kernels/fm_linrnn.h) as a PyTorch call.

    from fmsim.linrnn import chunk_linear_attention
    o, final = chunk_linear_attention(q, k, v, g, cu_seqlens, chunk=64, sub=16,
                                      output_final_state=True)

Linear attention with a scalar decay per token and head over packed documents,
the state reset at every document start (docs/LINRNN.md):

    S_t = exp(g_t) S_{t-1} + k_t v_t^T,   o_t = scale * S_t^T q_t

with the arguments of flash-linear-attention's ``chunk_simple_gla`` on its
``cu_seqlens`` path, so that one can stand in for the other:

* ``q``, ``k`` (1, T, H, dk) and ``v`` (1, T, H, dv): bf16 CUDA tensors, contiguous
  (the leading 1 may be left out); dk 64 or 128, dv 64, 128 or 256.
* ``g`` (1, T, H) fp32 log decay (<= 0); a document's first g is not used.
* ``cu_seqlens`` (ndocs + 1) int32 or int64 on the device: 0 = cu[0] < ... = T.
  An int64 tensor is converted on the device (one small kernel per call: pass
  int32 in loops). ``None``: one document of all T tokens.
* ``scale`` (default dk^-0.5), ``chunk`` C (64 or 128) and ``sub`` c (16, 32 or
  64), ``variant``: "skip" (FlashMask: sub-chunk tiles that cross a boundary or
  lie above the diagonal are not computed), "causal" (only the tiles above the
  diagonal skipped, as chunkwise kernels do today) or "noskip"; all three give
  the same bits.
* ``output_final_state``: also each document's final state (ndocs, H, dk, dv) fp32.

Returns (o, final_state or None); o is (1, T, H, dv) bf16 (the input's rank).
The call launches on the current stream with no host synchronisation. Forward
only: there is no backward yet (kernels/PERF_NOTES.md, "Linear RNN").
``chunk_linear_attention_profile`` runs the instrumented kernel and returns the
per-sub-tile classes and cycles, (H, nchunks, C/c, C/c).
"""
from __future__ import annotations

import ctypes as C
from typing import NamedTuple, Optional

import torch

from . import _native as N
from . import torch as _ft  # the library's loader and the stream helper of fmsim.torch

__all__ = ["chunk_linear_attention", "chunk_linear_attention_profile", "LinrnnProfile"]

_VARIANTS = {"skip": 0, "causal": 1, "noskip": 2}


class _Problem(C.Structure):  # mirrors fm_linrnn_problem (kernels/fm_linrnn.h), size-checked at load
    _fields_ = [("tokens", C.c_int32), ("heads", C.c_int32), ("dk", C.c_int32), ("dv", C.c_int32),
                ("chunk", C.c_int32), ("sub", C.c_int32), ("ndocs", C.c_int32), ("scale", C.c_float),
                ("cu_seqlens", C.c_void_p), ("q", C.c_void_p), ("k", C.c_void_p), ("v", C.c_void_p),
                ("g", C.c_void_p), ("o", C.c_void_p), ("final_state", C.c_void_p),
                ("tile_class", C.c_void_p), ("tile_cycles", C.c_void_p),
                ("workspace", C.c_void_p), ("workspace_bytes", C.c_size_t)]


def _load():
    lib = C.CDLL(_ft.library_path())
    for name, (res, args) in {
            "fm_linrnn_problem_size": (C.c_size_t, []),
            "fm_linrnn_workspace_bytes": (C.c_size_t, [C.POINTER(_Problem)]),
            "fm_linrnn_forward": (C.c_int, [C.POINTER(_Problem), C.c_int, C.c_int, C.c_void_p,
                                            C.POINTER(N.Err)])}.items():
        if not hasattr(lib, name):
            raise ImportError(f"fmsim.linrnn: {_ft.library_path()} has no {name} (an older build)")
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if lib.fm_linrnn_problem_size() != C.sizeof(_Problem):
        raise ImportError(f"fmsim.linrnn: fm_linrnn_problem is {lib.fm_linrnn_problem_size()} bytes in the "
                          f"library, {C.sizeof(_Problem)} here")
    return lib


_lib = _load()
_err = N.Err()


def _tensor(name, t, dtype, dims):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name}: dtype {t.dtype}; expected {dtype}")
    if not t.is_cuda:
        raise ValueError(f"{name}: on {t.device}; expected a CUDA tensor")
    if t.dim() == dims + 1:
        if t.shape[0] != 1:
            raise ValueError(f"{name}: batch {t.shape[0]}; pack the sequences along T with cu_seqlens")
        t = t[0]
    if t.dim() != dims or not t.is_contiguous():
        raise ValueError(f"{name}: shape {tuple(t.shape)}, contiguous {t.is_contiguous()}; expected a "
                         f"contiguous {dims}-dimensional tensor (with or without the leading 1)")
    return t


def _problem(q, k, v, g, cu_seqlens, scale, chunk, sub):
    q, k = _tensor("q", q, torch.bfloat16, 3), _tensor("k", k, torch.bfloat16, 3)
    v, g = _tensor("v", v, torch.bfloat16, 3), _tensor("g", g, torch.float32, 2)
    T, H, dk = q.shape
    dv = v.shape[2]
    if k.shape != q.shape or v.shape[:2] != (T, H) or g.shape != (T, H):
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, g {tuple(g.shape)}: "
                         "expected (T, H, dk), (T, H, dk), (T, H, dv), (T, H)")
    if cu_seqlens is None:
        cu = torch.tensor([0, T], dtype=torch.int32, device=q.device)
    else:
        if cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.dim() != 1:
            raise TypeError(f"cu_seqlens: {cu_seqlens.dtype} {tuple(cu_seqlens.shape)}; expected 1-D int32/int64")
        cu = cu_seqlens.to(device=q.device, dtype=torch.int32).contiguous()
    p = _Problem(tokens=T, heads=H, dk=dk, dv=dv, chunk=chunk, sub=sub, ndocs=cu.numel() - 1,
                 scale=float(scale) if scale is not None else dk ** -0.5)
    p.cu_seqlens, p.q, p.k, p.v, p.g = cu.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), g.data_ptr()
    return p, (q, k, v, g, cu)


def _run(p, variant, instrumented, device):
    if variant not in _VARIANTS:
        raise ValueError(f"variant {variant!r}: expected skip, causal or noskip")
    _ft._check(_ft._lib.fm_attn_use_device(device.index, _ft._errp))
    # the workspace from PyTorch's caching allocator (on the current stream, where
    # the launch runs): no stream-ordered allocation, and no fresh mapping of it
    # after the pool trims on an idle synchronisation, on every call
    ws = torch.empty(max(_lib.fm_linrnn_workspace_bytes(C.byref(p)), 1), dtype=torch.uint8, device=device)
    p.workspace, p.workspace_bytes = ws.data_ptr(), ws.numel()
    if _lib.fm_linrnn_forward(C.byref(p), _VARIANTS[variant], instrumented, _ft._stream(device.index),
                              C.byref(_err)) != 0:
        raise N.FmsimError(_err.msg.decode("utf-8", "replace"), 1)


def chunk_linear_attention(q, k, v, g, cu_seqlens=None, *, scale: Optional[float] = None, chunk: int = 64,
                           sub: int = 16, variant: str = "skip", output_final_state: bool = False):
    """See the module's text."""
    p, (q3, _, v3, _, cu) = _problem(q, k, v, g, cu_seqlens, scale, chunk, sub)
    o = torch.empty_like(v3)
    p.o = o.data_ptr()
    final = None
    if output_final_state:
        final = torch.empty((p.ndocs, p.heads, p.dk, p.dv), dtype=torch.float32, device=q3.device)
        p.final_state = final.data_ptr()
    _run(p, variant, 0, q3.device)
    return (o.unsqueeze(0) if q.dim() == 4 else o), final


class LinrnnProfile(NamedTuple):
    """The instrumented kernel's record: tile_class uint8 and tile_cycles int64,
    (H, nchunks, C/c, C/c) (docs kernels/fm_linrnn.h), with the output."""
    out: torch.Tensor
    tile_class: torch.Tensor
    tile_cycles: torch.Tensor


def chunk_linear_attention_profile(q, k, v, g, cu_seqlens=None, *, scale=None, chunk=64, sub=16,
                                   variant="skip") -> LinrnnProfile:
    p, (q3, _, v3, _, cu) = _problem(q, k, v, g, cu_seqlens, scale, chunk, sub)
    o = torch.empty_like(v3)
    nc, n = -(-p.tokens // chunk), chunk // sub
    cls = torch.zeros((p.heads, nc, n, n), dtype=torch.uint8, device=q3.device)
    cyc = torch.zeros((p.heads, nc, n, n), dtype=torch.int64, device=q3.device)
    p.o, p.tile_class, p.tile_cycles = o.data_ptr(), cls.data_ptr(), cyc.data_ptr()
    _run(p, variant, 1, q3.device)
    return LinrnnProfile(o.unsqueeze(0) if q.dim() == 4 else o, cls, cyc)
