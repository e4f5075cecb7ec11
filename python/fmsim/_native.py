"""ctypes bindings of libfmsim (the C core built by the project's CMake).

Only this module knows the C side: the library's location, the function
signatures and the structs mirrored from core/fm_status.h, fm_dense.h,
fm_tiles.h and fm_memory.h. Every mirrored struct is checked against the
library's own sizeof (fm_struct_size, core/fm_sizes.h) at load time, so a
header change that is not mirrored here fails at import with one clear line
naming the struct instead of reading garbage.
"""
from __future__ import annotations

import ctypes as C
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))
# the checkout's build folder, for a package used in place (PYTHONPATH=python)
_CHECKOUT_BUILD = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build")


class FmsimError(RuntimeError):
    """An fmsim call failed; the message is the C core's one-line explanation."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


def _candidates(env: str, bundled: str, in_checkout: str) -> list[str]:
    out = []
    if os.environ.get(env):
        out.append(os.environ[env])
    out.append(os.path.join(_HERE, "_native", bundled))
    out.append(os.path.join(_CHECKOUT_BUILD, in_checkout))
    return out


def library_path() -> str:
    """Where libfmsim is loaded from: $FMSIM_LIBRARY, the copy installed with
    the package, or the checkout's build/core/libfmsim.so."""
    for p in _candidates("FMSIM_LIBRARY", "libfmsim.so", os.path.join("core", "libfmsim.so")):
        if os.path.isfile(p):
            return p
    raise ImportError("fmsim: libfmsim.so not found (set FMSIM_LIBRARY, run `pip install ./python` "
                      "from the checkout, or build it with `cmake --build build --target fmsim_shared`)")


def binary_path() -> str | None:
    """The `fmsim` command line ($FMSIM_BIN, the copy installed with the
    package, the checkout's build/app/fmsim, or PATH), or None."""
    for p in _candidates("FMSIM_BIN", "fmsim", os.path.join("app", "fmsim")):
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return shutil.which("fmsim")


i32, i64, u8 = C.c_int32, C.c_int64, C.c_uint8
P = C.POINTER


class Err(C.Structure):
    _fields_ = [("msg", C.c_char * 512)]


class DenseOpts(C.Structure):
    _fields_ = [("masked_true", C.c_int), ("keep_intervals", C.c_int), ("reading", C.c_int),
                ("br", i32), ("bc", i32), ("keep_tiles", C.c_int),
                ("keep_all_runs", C.c_int)]  # mirrors fm_dense_opts (core/fm_dense.h)


class DenseColumn(C.Structure):
    _fields_ = [("batch", i32), ("head", i32), ("column", i32), ("nruns", i32),
                ("runs", (i32 * 2) * 3)]


class DenseSet(C.Structure):
    _fields_ = [("batch", i32), ("head", i32), ("fit", C.c_uint), ("max_runs", i32),
                ("misfits", i64 * 4), ("row_fit", C.c_uint), ("max_row_runs", i32),
                ("masked", i64), ("empty_rows", i64), ("masked_diagonal", i64),
                ("same_as_head0", C.c_int)]


class DenseAdvice(C.Structure):
    _fields_ = [("runs_hist", i64 * 5), ("sets_fit", i64), ("prefix_rows", i64),
                ("subset_masked", i64)]


class DenseTiles(C.Structure):
    _fields_ = [("br", i32), ("bc", i32), ("tr", i32), ("tc", i32), ("total", i64),
                ("count", i64 * 3), ("sparsity", C.c_double)]


class DenseReport(C.Structure):
    _fields_ = [("dtype", C.c_int), ("ndim", C.c_int), ("batch", i64), ("heads", i64), ("sq", i64),
                ("sk", i64), ("masked_true", C.c_int), ("additive", C.c_int), ("soft_values", i64),
                ("masked", i64), ("empty_rows", i64), ("masked_diagonal", i64), ("fit", C.c_uint),
                ("form", C.c_int), ("closest", C.c_int), ("max_runs", i32), ("misfits", i64 * 4),
                ("nfirst", C.c_int * 4), ("first", (DenseColumn * 8) * 4), ("bad_columns", i64),
                ("rows_known", C.c_int), ("row_fit", C.c_uint), ("transposed_form", C.c_int),
                ("max_row_runs", i32), ("shared_across_heads", C.c_int), ("h_mask", i64),
                ("dense_bytes", i64), ("dense_bool_bytes", i64), ("interval_bytes", i64),
                ("advice", DenseAdvice), ("tiles", DenseTiles), ("nsets", i64),
                ("nset_reports", C.c_int), ("sets", P(DenseSet))]


class TileCounts(C.Structure):
    _fields_ = [("total", i64), ("minmax", i64 * 3), ("exact", i64 * 3),
                ("partial_but_masked", i64), ("partial_but_unmasked", i64),
                ("sparsity", C.c_double), ("sparsity_exact", C.c_double)]


class MaskBytes(C.Structure):
    _fields_ = [("sets", i64), ("dense", i64), ("block_mask", i64), ("interval_vectors", i64),
                ("tile_bounds", i64), ("intervals", i64)]


VP = C.c_void_p  # opaque handles: fm_colmask*, fm_dense_scan*, fm_dense_result*

_SIGNATURES = {
    "fm_status_str": (C.c_char_p, [C.c_int]),
    "fm_form_name": (C.c_char_p, [C.c_int]),
    "fm_struct_size": (C.c_size_t, [C.c_char_p]),
    "fm_dense_scan_create": (C.c_int, [i64, i64, i64, i64, P(DenseOpts), P(VP), P(Err)]),
    "fm_dense_scan_rows": (None, [VP, VP, i64, C.c_int]),
    "fm_dense_scan_finish": (C.c_int, [VP, P(VP), P(Err)]),
    "fm_dense_scan_destroy": (None, [VP]),
    "fm_dense_check_file": (C.c_int, [C.c_char_p, P(DenseOpts), P(VP), P(Err)]),
    "fm_dense_check_colmask": (C.c_int, [VP, i64, P(DenseOpts), P(VP), P(Err)]),
    "fm_dense_result_report": (P(DenseReport), [VP]),
    "fm_dense_result_to_colmask": (C.c_int, [VP, C.c_int, P(VP), P(Err)]),
    "fm_dense_result_subset_colmask": (C.c_int, [VP, P(VP), P(Err)]),
    "fm_dense_result_nruns": (P(i32), [VP]),
    "fm_dense_result_runs": (P(i32), [VP]),
    "fm_dense_result_tiles": (P(u8), [VP]),
    "fm_dense_result_destroy": (None, [VP]),
    "fm_colmask_create": (C.c_int, [i64, i64, i64, i64, C.c_int, P(VP), P(Err)]),
    "fm_colmask_destroy": (None, [VP]),
    "fm_colmask_sq": (i32, [VP]),
    "fm_colmask_sk": (i32, [VP]),
    "fm_colmask_nb": (i32, [VP]),
    "fm_colmask_nh": (i32, [VP]),
    "fm_colmask_causal": (C.c_int, [VP]),
    "fm_colmask_vec": (P(i32), [VP, i32, C.c_int]),
    "fm_colmask_validate": (C.c_int, [VP, P(Err)]),
    "fm_colmask_equal": (C.c_int, [VP, VP]),
    "fm_colmask_smallest_form": (C.c_int, [VP]),
    "fm_colmask_to_form": (C.c_int, [VP, C.c_int, P(VP), P(Err)]),
    "fm_colmask_save_npy": (C.c_int, [VP, C.c_char_p, C.c_int, P(C.c_int), P(Err)]),
    "fm_classify": (C.c_int, [VP, i32, i32, P(TileCounts), P(u8), P(u8), P(Err)]),
    "fm_mask_bytes_compute": (None, [i64, i64, i64, C.c_int, i32, P(MaskBytes)]),
}


def load_library(path: str, signatures: dict, who: str = "fmsim") -> C.CDLL:
    """CDLL(path) with every function of signatures {name: (restype, argtypes)} typed;
    ImportError with one line when it cannot be loaded."""
    try:
        lib = C.CDLL(path)
    except OSError as e:
        raise ImportError(f"{who}: cannot load {path}: {e}") from None
    for name, (res, args) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


# every struct mirrored above, by its C name (core/fm_sizes.h)
MIRRORS = {"fm_err": Err, "fm_dense_opts": DenseOpts, "fm_dense_column": DenseColumn,
           "fm_dense_set": DenseSet, "fm_dense_advice": DenseAdvice, "fm_dense_tiles": DenseTiles,
           "fm_dense_report": DenseReport, "fm_tile_counts": TileCounts,
           "fm_mask_bytes": MaskBytes}


def check_mirrors(lib: C.CDLL, path: str, mirrors: dict, who: str = "fmsim") -> None:
    """ImportError with one line naming the first struct of mirrors {C name:
    ctypes class} whose size differs from the library's fm_struct_size."""
    for name, cls in mirrors.items():
        there = lib.fm_struct_size(name.encode())
        if there != C.sizeof(cls):
            have = f"{there} bytes there" if there else "unknown there"
            raise ImportError(f"{who}: {path} does not match this package ({name} is {have}, "
                              f"{C.sizeof(cls)} here): reinstall the package from the same checkout")


def _load():
    path = library_path()
    lib = load_library(path, _SIGNATURES)
    check_mirrors(lib, path, MIRRORS)
    return lib, path


lib, LIBRARY = _load()


def check(status: int, err: Err) -> None:
    """Raises FmsimError with the core's message when status is not FM_OK."""
    if status != 0:
        raise FmsimError(err.msg.decode("utf-8", "replace"), status)


FORMS = ("causal-1", "causal-2", "bidir-2", "bidir-4")
FORM_K = {"causal-1": 1, "causal-2": 2, "bidir-2": 2, "bidir-4": 4}
FORM_CAUSAL = {"causal-1": True, "causal-2": True, "bidir-2": False, "bidir-4": False}


def form_name(code: int) -> str | None:
    return FORMS[code] if 0 <= code < len(FORMS) else None


def form_code(name: str | None) -> int:
    if name is None or name == "auto":
        return -1
    if name not in FORMS:
        raise ValueError(f"unknown form {name!r} (expected one of {', '.join(FORMS)} or None)")
    return FORMS.index(name)
