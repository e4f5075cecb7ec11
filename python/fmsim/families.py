"""fmsim.family: the paper's mask families (core/fm_families.c) built by the C
core, as the CLI builds them (`fmsim families` lists them and their parameters).

    m = fmsim.family("causal_document", 32768)            # the paper's sample 0
    m = fmsim.family("sliding_window", 8192, w=1024)
    m = fmsim.family("random_eviction", 8192, batch=2, heads=4, seed=3)
    sri, causal = m.to_paddle()                            # Paddle's startend_row_indices

The same name, length, batch, heads, seed and parameters give the vectors that
`fmsim analyze --family NAME ... --out DIR` writes to columns.npy.
"""
from __future__ import annotations

import ctypes as C

from . import _native as N
from .mask import Mask

__all__ = ["family", "family_names"]


class _Request(C.Structure):  # mirrors fm_family_request (core/fm_families.h), size-checked
    _fields_ = [("family", C.c_char_p), ("seqlen", C.c_int64), ("batch", C.c_int64),
                ("heads", C.c_int64), ("seed", C.c_uint64), ("sample", C.c_int),
                ("samples", C.c_void_p), ("nparams", C.c_int), ("params", C.POINTER(C.c_char_p))]


class _Used(C.Structure):  # mirrors fm_family_used
    _fields_ = [("params", C.c_char * 512), ("docs_source", C.c_char * 160), ("ndocs", C.c_int32)]


class _SampleSet(C.Structure):  # mirrors fm_sample_set (opaque items)
    _fields_ = [("count", C.c_int), ("items", C.c_void_p)]


_lib = N.lib
for _name, _res, _args in (
        ("fm_family_request_size", C.c_size_t, []), ("fm_family_used_size", C.c_size_t, []),
        ("fm_family_build", C.c_int, [C.POINTER(_Request), C.POINTER(N.VP), C.POINTER(_Used),
                                      C.POINTER(N.Err)]),
        ("fm_samples_builtin", C.c_int, [C.POINTER(_SampleSet), C.POINTER(N.Err)]),
        ("fm_family_count", C.c_int, []), ("fm_family_at", C.POINTER(C.c_char_p), [C.c_int])):
    _f = getattr(_lib, _name)
    _f.restype, _f.argtypes = _res, _args
if (_lib.fm_family_request_size() != C.sizeof(_Request) or
        _lib.fm_family_used_size() != C.sizeof(_Used)):
    raise ImportError("fmsim: the library's fm_family_request/fm_family_used do not match this "
                      "package: reinstall the package from the same checkout")
_samples = None


def _builtin_samples() -> _SampleSet:
    global _samples
    if _samples is None:
        s, err = _SampleSet(), N.Err()
        N.check(_lib.fm_samples_builtin(C.byref(s), C.byref(err)), err)
        _samples = s  # kept for the process's life (a few kB)
    return _samples


def family_names() -> list[str]:
    """The registry's family names, in `fmsim families` order."""
    out = []
    for i in range(_lib.fm_family_count()):
        info = _lib.fm_family_at(i)  # fm_family_info*: its first member is the name
        out.append(info[0].decode())
    return out


def family(name: str, seqlen: int, *, batch: int = 1, heads: int = 1, seed: int = 0,
           sample: int = -1, **params) -> Mask:
    """The family's mask at S = seqlen (Sq = Sk), built by the C core. params are the
    family's parameters (`fmsim families`), e.g. w=1024 or docs="3145,2203,2844";
    sample: the paper's document sample (-1: sample 0 where the file has S, else a
    seeded draw). Per-head families draw batch x heads sets. FmsimError on an unknown
    family or parameter, with the core's one-line message."""
    kv = [f"{k}={v}".encode() for k, v in params.items()]
    arr = (C.c_char_p * max(1, len(kv)))(*kv)
    req = _Request(family=name.encode(), seqlen=int(seqlen), batch=int(batch), heads=int(heads),
                   seed=int(seed), sample=int(sample),
                   samples=C.cast(C.pointer(_builtin_samples()), C.c_void_p), nparams=len(kv),
                   params=arr)
    out, used, err = N.VP(), _Used(), N.Err()
    N.check(_lib.fm_family_build(C.byref(req), C.byref(out), C.byref(used), C.byref(err)), err)
    return Mask(out)
