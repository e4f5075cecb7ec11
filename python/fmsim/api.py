"""The entry points: from_mask_mod, check, from_paddle."""
from __future__ import annotations

import ctypes as C
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Union

import numpy as np

from . import _native as N
from ._native import FmsimError
from .mask import _CHUNK_ELEMENTS, CheckResult, Mask, _opts, _result, _Scan

MaskMod = Callable[[Any, Any, Any, Any], Any]


def _dim(name: str, v: Optional[int]) -> int:
    if v is None:
        return 1
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} = {v!r}: expected a positive integer (or None for 1)")
    return int(v)


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _as_block(out: Any, rows: int, sk: int) -> np.ndarray:
    """A mask_mod result -> (rows, Sk) bool, C-contiguous (no copy when it already is)."""
    if hasattr(out, "detach"):  # a torch tensor
        out = out.detach().cpu().numpy()
    out = np.asarray(out)
    if out.dtype != np.bool_:
        if out.dtype.kind == "f":
            # an additive mask (0 = attend, -inf or <= -10000 = masked), read as `fmsim check` reads it
            if out.size and not ((out != 0) & (out != 1)).any() and (out == 1).any():
                raise TypeError(f"mask_mod returned {out.dtype} values of only 0 and 1: as an additive "
                                "mask nothing would be masked; return bool (True = may attend) or "
                                "an additive mask (0 = attend, -inf = masked)")
            out = out > -10000.0
        elif out.dtype.kind not in "biu":
            raise TypeError(f"mask_mod returned {out.dtype} values; expected bool (True = may attend) "
                            "or an additive float mask (0 = attend, -inf = masked)")
        else:
            out = out != 0
    if out.shape != (rows, sk):
        try:
            out = np.broadcast_to(out, (rows, sk))
        except ValueError:
            raise ValueError(f"mask_mod returned shape {out.shape}, which does not broadcast to "
                             f"(rows, Sk) = ({rows}, {sk}) for q_idx ({rows}, 1) and kv_idx (1, {sk})") from None
    return np.ascontiguousarray(out)


class _Indexer:
    """Index arrays for one backend: numpy int32, or torch int32 tensors."""

    def __init__(self, backend: str, sk: int):
        self.backend = backend
        if backend == "torch":
            torch = _torch()
            self.torch = torch
            self.kv = torch.arange(sk, dtype=torch.int32)[None, :]
        else:
            self.kv = np.arange(sk, dtype=np.int32)[None, :]

    def args(self, b: int, h: int, r0: int, r1: int):
        if self.backend == "torch":
            t = self.torch
            return (t.tensor(b, dtype=t.int32), t.tensor(h, dtype=t.int32),
                    t.arange(r0, r1, dtype=t.int32)[:, None], self.kv)
        return np.int32(b), np.int32(h), np.arange(r0, r1, dtype=np.int32)[:, None], self.kv


def _pick_backend(fn: MaskMod, backend: str, sk: int, rows: int) -> str:
    """'numpy' or 'torch': auto tries numpy index arrays first and falls back to
    torch tensors when the mask_mod cannot take them and torch is installed."""
    if backend not in ("auto", "numpy", "torch"):
        raise ValueError(f"backend={backend!r}: expected 'auto', 'numpy' or 'torch'")
    if backend == "torch" and _torch() is None:
        raise ImportError("backend='torch' needs torch installed")
    if backend != "auto":
        return backend
    try:
        out = fn(*_Indexer("numpy", sk).args(0, 0, 0, rows))
    except Exception as e:  # noqa: BLE001 - any failure of the user's function under numpy
        if _torch() is None:  # the user's own exception, with its traceback
            _note(e, "fmsim: raised by the mask_mod called with numpy int32 index arrays "
                     f"(q_idx ({rows}, 1), kv_idx (1, {sk}))")
            raise
        return "torch"
    _as_block(out, rows, sk)  # fmsim's own check of what it returned
    return "numpy"


def _note(e: BaseException, text: str) -> None:
    """Adds a line to the traceback of e (Python 3.11 and newer)."""
    if hasattr(e, "add_note"):
        e.add_note(text)


def from_mask_mod(fn: MaskMod, B: Optional[int] = 1, H: Optional[int] = 1, Sq: int = 0,
                  Sk: Optional[int] = None, *, chunk_rows: Optional[int] = None,
                  backend: str = "auto", tiles: Optional[tuple[int, int]] = (128, 128),
                  keep_runs: bool = True, keep_tiles: bool = False, name: Optional[str] = None,
                  verify_heads: bool = False, seed: Optional[int] = None) -> CheckResult:
    """Evaluates an attention-gym / FlexAttention mask_mod and checks the mask.

    fn(b, h, q_idx, kv_idx) -> True where query q_idx may attend key kv_idx. It is
    called once per (batch, head) and chunk of query rows with q_idx of shape
    (rows, 1) and kv_idx of shape (1, Sk) (int32 numpy arrays, or torch tensors
    with backend="torch" or when numpy fails and torch is installed); b and h are
    scalars. Memory is O(chunk_rows * Sk), never O(Sq * Sk): each chunk is streamed
    through libfmsim's dense checker (core/fm_dense.h) and dropped.

    fn may return bool / integer (non-zero = may attend) or an additive float mask
    (0 = attend, -inf or <= -10000 = masked), read as `fmsim check` reads it.

    B, H: None means 1 (as in create_block_mask). Heads sharing one mask are found
    early: with H >= 3, heads 0, 1 and a random third are evaluated first (every
    row); when they agree, every other head is only sampled (a few chunks of rows
    compared with head 0) and head 0's mask stands for all H, so a mask_mod that
    ignores h costs 3 heads, not H. verify_heads=True evaluates every head in full
    (a mask_mod that differs per head only outside the sampled rows is then seen).
    seed: the random third head and the sampled rows (default: fixed). Sk defaults to Sq.
    name: the caption of figures (default: fn.__name__). chunk_rows defaults to
    about 4M elements a chunk. tiles: the (Br, Bc) at which the mask's own tiles
    are classified (None: not). keep_runs keeps every column's runs (44 bytes a
    column): result.mask, result.subset, result.nruns need it.
    """
    B, H, Sq = _dim("B", B), _dim("H", H), _dim("Sq", Sq)
    Sk = Sq if Sk is None else _dim("Sk", Sk)
    if chunk_rows is None:
        chunk_rows = max(1, min(Sq, _CHUNK_ELEMENTS // Sk))
    chunk_rows = min(_dim("chunk_rows", chunk_rows), Sq)
    if not callable(fn):
        raise TypeError("from_mask_mod: fn must be callable as fn(b, h, q_idx, kv_idx)")
    ix = _Indexer(_pick_backend(fn, backend, Sk, min(chunk_rows, 2)), Sk)
    how = ("numpy int32 index arrays" if ix.backend == "numpy" else "torch int32 index tensors"
           + (" (numpy index arrays failed first)" if backend == "auto" else ""))
    opts = _opts(False, keep_runs, tiles, keep_tiles=keep_tiles)
    if name is None:
        name = getattr(fn, "__name__", None)
        name = "mask_mod" if not name or name == "<lambda>" else name

    def evaluate(job):
        b, h, r0, r1 = job
        try:
            out = fn(*ix.args(b, h, r0, r1))
        except Exception as e:  # noqa: BLE001 - the user's own, with where it was called
            _note(e, f"fmsim: raised by the mask_mod at batch {b}, head {h}, query rows "
                     f"[{r0}, {r1}) with {how}")
            raise
        return _as_block(out, r1 - r0, Sk)

    def source(heads=range(H)):
        for b in range(B):
            for h in heads:
                for r0 in range(0, Sq, chunk_rows):
                    yield evaluate((b, h, r0, min(Sq, r0 + chunk_rows)))

    res = None
    if H >= 3 and not verify_heads:
        res = _shared_heads(evaluate, B, H, Sq, Sk, chunk_rows, opts, keep_runs, seed)
    if res is None:
        scan = _Scan(B, H, Sq, Sk, opts)
        jobs = ((b, h, r0, min(Sq, r0 + chunk_rows)) for b in range(B) for h in range(H)
                for r0 in range(0, Sq, chunk_rows))
        # the next chunk is evaluated (numpy or torch, GIL released) while libfmsim
        # scans this one (ctypes releases the GIL): two chunks alive at most
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(evaluate, next(jobs))
            for job in jobs:
                block = pending.result()
                pending = pool.submit(evaluate, job)
                scan.rows(block, attend=True)
            scan.rows(pending.result(), attend=True)
        res = _result(scan.finish(), keep_runs)
        res._source = source
    else:
        def shared_source():  # head 0 stands for every head
            for b in range(B):
                for _ in range(H):
                    for r0 in range(0, Sq, chunk_rows):
                        yield evaluate((b, 0, r0, min(Sq, r0 + chunk_rows)))
        res._source = shared_source
    res.name = name
    if res.mask is not None:
        res.mask.name = name
    return res


# the chunks of rows of every other head compared with head 0 when heads 0, 1 and a third agree
_SAMPLED_CHUNKS = 2
_SAMPLED_ROWS = 64


def _shared_heads(evaluate, B, H, Sq, Sk, chunk_rows, opts, keep_runs, seed) -> Optional[CheckResult]:
    """Heads 0, 1 and a random third evaluated in full (head 0 scanned as the mask of
    every head); the other heads sampled. None as soon as two differ (the caller then
    evaluates every head)."""
    rng = np.random.default_rng(0 if seed is None else seed)
    third = int(rng.integers(2, H))
    scan = _Scan(B, 1, Sq, Sk, opts)
    for b in range(B):
        for r0 in range(0, Sq, chunk_rows):
            job = (r0, min(Sq, r0 + chunk_rows))
            block = evaluate((b, 0) + job)
            for h in (1, third):
                if not np.array_equal(evaluate((b, h) + job), block):
                    return None
            scan.rows(block, attend=True)
        for h in range(2, H):
            if h == third:
                continue
            for _ in range(_SAMPLED_CHUNKS):
                r0 = int(rng.integers(0, max(1, Sq - _SAMPLED_ROWS + 1)))
                job = (r0, min(Sq, r0 + _SAMPLED_ROWS))
                if not np.array_equal(evaluate((b, h) + job), evaluate((b, 0) + job)):
                    return None
    return _widen_heads(_result(scan.finish(), keep_runs), H)


def _widen_heads(r: CheckResult, H: int) -> CheckResult:
    """A B x 1 result as the B x H one of H heads sharing its mask."""
    r.heads, r.h_mask, r.shared_across_heads = H, 1, True
    r.masked *= H
    r.masked_diagonal *= H
    r.misfits = {k: v * H for k, v in r.misfits.items()}
    if r.rows_without_visible_key is not None:
        r.rows_without_visible_key *= H
    if r.tiles:
        for k in ("total", "masked", "partial", "unmasked"):
            r.tiles[k] *= H
    a = r.advice
    a["columns_by_runs"] = [v * H for v in a["columns_by_runs"]]
    for k in ("sets_fit", "sets", "subset_masked", "element_mask_elements"):
        a[k] *= H
    r.memory["dense_bool_bytes"] *= H
    for k in ("nruns", "runs", "tile_classes"):
        v = getattr(r, k)
        if v is not None:
            setattr(r, k, np.repeat(v, H, axis=1))
    return r


def _dense_shape(shape: tuple) -> tuple[int, int, int, int]:
    if len(shape) == 2:
        return 1, 1, shape[0], shape[1]
    if len(shape) == 3:
        return 1, shape[0], shape[1], shape[2]
    if len(shape) == 4:
        return shape
    raise ValueError(f"a dense mask is [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk]; got shape {shape}")


def _float_flags(block: np.ndarray, reading: Optional[str], masked_true: bool) -> tuple[np.ndarray, bool]:
    """A float block -> (flags, attend): additive (masked at <= -10000) or bool reading."""
    if reading == "bool":
        return block != 0, not masked_true
    return block <= -10000.0, False


def check(dense: Union[np.ndarray, str, os.PathLike], *, masked_true: bool = False,
          reading: Optional[str] = None, tiles: Optional[tuple[int, int]] = (128, 128),
          keep_runs: bool = True, keep_tiles: bool = False) -> CheckResult:
    """Checks a dense mask: a numpy array [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk]
    (bool or integer: True/non-zero = may attend, or masked with masked_true;
    float: additive, 0 = attend, -inf or <= -10000 = masked), or a .npy path
    (streamed from disk, as `fmsim check` does). A float mask of only 0 and 1 is
    refused unless reading="bool" or "additive" says how to read it. A C-contiguous
    bool or uint8 array is read in place (no copy)."""
    opts = _opts(masked_true, keep_runs, tiles, reading, keep_tiles)
    if isinstance(dense, (str, os.PathLike)):
        res, err = C.c_void_p(), N.Err()
        N.check(N.lib.fm_dense_check_file(os.fsencode(dense), C.byref(opts), C.byref(res),
                                          C.byref(err)), err)
        out = _result(res, keep_runs)
        path = os.fspath(dense)
        out.name = os.path.basename(path)
        out._source = lambda: (blk.astype(bool) if att else ~blk.astype(bool) for blk, att in
                               _dense_blocks(np.load(path, mmap_mode="r"), reading, masked_true))
        return out
    a = np.asarray(dense)
    B, H, Sq, Sk = _dense_shape(a.shape)
    kind = a.dtype.kind
    if kind not in "biuf":
        raise TypeError(f"check: dtype {a.dtype} is not a mask dtype (bool, integer or float)")
    if kind == "f":
        if masked_true and reading != "bool":
            raise ValueError("check: masked_true is for bool and integer masks; a float mask is "
                             "additive (0 = attend, -inf or <= -10000 = masked) unless reading='bool'")
        if reading in (None, "auto") and a.size and not ((a != 0) & (a != 1)).any() and (a == 1).any():
            raise ValueError(f"check: the {a.dtype} mask holds only 0 and 1: as an additive mask nothing "
                             "would be masked; pass reading='bool' (1 = may attend) or reading='additive'")
    elif reading not in (None, "auto"):
        raise ValueError(f"check: reading={reading!r} is for float masks; this one is {a.dtype}")
    scan = _Scan(B, H, Sq, Sk, opts)
    for block, attend in _dense_blocks(a, reading, masked_true):
        scan.rows(np.ascontiguousarray(block).view(np.uint8), attend)
    out = _result(scan.finish(), keep_runs)
    out._source = lambda: (blk.astype(bool) if att else ~blk.astype(bool)
                           for blk, att in _dense_blocks(a, reading, masked_true))
    return out


def _dense_blocks(a: np.ndarray, reading, masked_true):
    """(flags, attend) blocks of rows of a dense mask in storage order."""
    kind = a.dtype.kind
    rows = a.reshape(-1, a.shape[-1])
    step = max(1, _CHUNK_ELEMENTS // a.shape[-1])
    for r0 in range(0, rows.shape[0], step):
        block = rows[r0:r0 + step]
        if kind == "f":
            block, attend = _float_flags(block, reading, masked_true)
        else:
            attend = not masked_true
            if block.dtype not in (np.bool_, np.uint8, np.int8):
                block = block != 0
        yield block, attend


def from_paddle(startend_row_indices: Any, causal: bool, seqlen_q: Optional[int] = None) -> Mask:
    """A Mask from Paddle's startend_row_indices, int [B, H_mask, Sk, k]:
    k = 1 (causal: LTS), 2 (causal: LTS, LTE; bidirectional: LTS, UTE) or 4
    (LTS, LTE, UTS, UTE); seqlen_q defaults to Sk. Values must lie in [0, Sq]
    and form valid intervals (FmsimError naming the set and column otherwise)."""
    a = startend_row_indices
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    elif hasattr(a, "numpy"):
        a = a.numpy()
    a = np.asarray(a)
    if a.ndim != 4 or a.shape[3] not in (1, 2, 4) or a.dtype.kind not in "iu":
        raise ValueError(f"from_paddle: expected an integer array [B, H_mask, Sk, k] with k = 1, 2 "
                         f"or 4; got {a.dtype} {a.shape}")
    nb, nh, sk, k = a.shape
    if causal and k == 4:
        raise ValueError("from_paddle: k = 4 is the bidirectional form bidir-4, not a causal one")
    if not causal and k == 1:
        raise ValueError("from_paddle: k = 1 is the causal form causal-1, not a bidirectional one")
    sq = sk if seqlen_q is None else _dim("seqlen_q", seqlen_q)
    if a.size and (a.min() < 0 or a.max() > sq):
        raise FmsimError(f"from_paddle: values must lie in [0, Sq = {sq}]; found {a.min()}..{a.max()}")
    h, err = C.c_void_p(), N.Err()
    N.check(N.lib.fm_colmask_create(sq, sk, nb, nh, int(bool(causal)), C.byref(h), C.byref(err)), err)
    m = Mask(h)
    v = np.ctypeslib.as_array(N.lib.fm_colmask_vec(h, 0, 0), shape=(nb, nh, 4, sk))  # writable view
    cols = {1: {0: 0}, 2: {0: 0, 1: 1} if causal else {0: 0, 3: 1}, 4: {0: 0, 1: 1, 2: 2, 3: 3}}[k]
    for vec, src in cols.items():
        v[:, :, vec, :] = a[..., src]
    N.check(N.lib.fm_colmask_validate(h, C.byref(err)), err)
    return m
