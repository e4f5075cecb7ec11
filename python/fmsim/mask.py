"""Interval masks (Mask) and dense-mask analyses (CheckResult) over libfmsim.

Semantics (the repository's README and core/fm_colmask.h): query row i may
not attend key column j when i is in [LTS_j, LTE_j) or [UTS_j, UTE_j), or,
for a causal mask, i < j + Sq - Sk. Dense masks and mask_mod results use
PyTorch's convention: True = may attend.
"""
from __future__ import annotations

import ctypes as C
import io
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from . import _native as N
from ._native import FmsimError

TILE_MASKED, TILE_PARTIAL, TILE_UNMASKED = 0, 1, 2
# rows of dense data evaluated or fed per call (elements), unless chunk_rows says otherwise
_CHUNK_ELEMENTS = 1 << 22


def _handle_out() -> C.c_void_p:
    return C.c_void_p()


@dataclass
class Analysis:
    """Tile classes, block sparsity and memory of an interval mask at Br x Bc.

    counts / counts_exact: tiles per class ("masked", "partial", "unmasked") by
    the paper's min/max rule (what a kernel decides from 8 bounds per key tile)
    and exactly; rho / rho_exact: masked tiles / all tiles; memory: bytes of the
    mask as a dense bool array, a FlexAttention BlockMask and FlashMask intervals.
    """
    br: int
    bc: int
    tr: int
    tc: int
    total: int
    counts: dict
    counts_exact: dict
    rho: float
    rho_exact: float
    partial_but_masked: int
    partial_but_unmasked: int
    memory: dict

    def __str__(self) -> str:
        c, e = self.counts, self.counts_exact
        return (f"tiles {self.br} x {self.bc} -> {self.tr} x {self.tc} = {self.total}: "
                f"masked {c['masked']} / partial {c['partial']} / unmasked {c['unmasked']} "
                f"(exactly {e['masked']} / {e['partial']} / {e['unmasked']}), "
                f"rho = {self.rho:.4f} (exact {self.rho_exact:.4f})")


def _classes(counts) -> dict:
    return {"masked": int(counts[0]), "partial": int(counts[1]), "unmasked": int(counts[2])}


class Mask:
    """A column-interval mask held by libfmsim: B x H_mask sets of the four
    int32 vectors LTS, LTE, UTS, UTE over Sk key columns, and a causal flag."""

    def __init__(self, handle: C.c_void_p):
        if not handle:
            raise ValueError("Mask needs a libfmsim handle")
        self._h = handle

    # bound at class creation: at interpreter exit module globals (N, N.lib) may
    # already be None when __del__ runs, which printed AttributeError noise
    def __del__(self, _destroy=N.lib.fm_colmask_destroy):
        h = getattr(self, "_h", None)
        if h:
            _destroy(h)
            self._h = None

    name: Optional[str] = None  # the caption's name (from_mask_mod: the mask_mod's __name__)

    def _repr_png_(self) -> Optional[bytes]:
        return _figure_png(self)

    # --- shape ---------------------------------------------------------------
    @property
    def seqlen_q(self) -> int:
        return int(N.lib.fm_colmask_sq(self._h))

    @property
    def seqlen_k(self) -> int:
        return int(N.lib.fm_colmask_sk(self._h))

    @property
    def batch(self) -> int:
        """Batch dimension of the stored vectors (1 when shared by the batch)."""
        return int(N.lib.fm_colmask_nb(self._h))

    @property
    def heads(self) -> int:
        """H_mask: 1 when every head shares the mask, else the head count."""
        return int(N.lib.fm_colmask_nh(self._h))

    @property
    def causal(self) -> bool:
        return bool(N.lib.fm_colmask_causal(self._h))

    @property
    def form(self) -> str:
        """The smallest form that holds the mask (causal-1 < causal-2 < bidir-2 < bidir-4)."""
        return N.form_name(N.lib.fm_colmask_smallest_form(self._h))

    def vectors(self) -> np.ndarray:
        """The stored vectors as a read-only view, int32 [B, H_mask, 4, Sk] (LTS, LTE,
        UTS, UTE); no copy, valid while the mask lives."""
        nb, nh, sk = self.batch, self.heads, self.seqlen_k
        ptr = N.lib.fm_colmask_vec(self._h, 0, 0)
        v = np.ctypeslib.as_array(ptr, shape=(nb, nh, 4, sk))
        v.flags.writeable = False
        return v

    def __repr__(self) -> str:
        return (f"fmsim.Mask(Sq={self.seqlen_q}, Sk={self.seqlen_k}, B={self.batch}, "
                f"H_mask={self.heads}, causal={self.causal}, form={self.form})")

    def __eq__(self, other: object) -> bool:
        """Semantic equality (the same masked elements for every (batch, head))."""
        if not isinstance(other, Mask):
            return NotImplemented
        return bool(N.lib.fm_colmask_equal(self._h, other._h))

    __hash__ = None  # mutable content, semantic equality

    # --- interop ---------------------------------------------------------------
    def to_paddle(self, form: Optional[str] = None) -> tuple[np.ndarray, bool]:
        """Paddle's startend_row_indices: (int32 [B, H_mask, Sk, k], causal).

        form: "causal-1", "causal-2", "bidir-2", "bidir-4", or None for the
        smallest that holds the mask. FmsimError when the form cannot hold it.
        """
        code = N.form_code(form)
        if code < 0:
            code = N.lib.fm_colmask_smallest_form(self._h)
        name = N.FORMS[code]
        out, err = _handle_out(), N.Err()
        N.check(N.lib.fm_colmask_to_form(self._h, code, C.byref(out), C.byref(err)), err)
        m = Mask(out)
        v = m.vectors()
        pick = {"causal-1": [0], "causal-2": [0, 1], "bidir-2": [0, 3], "bidir-4": [0, 1, 2, 3]}[name]
        arr = np.ascontiguousarray(np.moveaxis(v[:, :, pick, :], 2, 3))
        return arr, N.FORM_CAUSAL[name]

    def to_dense(self, batch: int = 0, head: int = 0, *, max_elements: int = 1 << 28) -> np.ndarray:
        """One (batch, head) as a dense bool array [Sq, Sk], True = may attend.
        For small masks (tests, plots): refuses more than max_elements."""
        sq, sk = self.seqlen_q, self.seqlen_k
        if sq * sk > max_elements:
            raise ValueError(f"to_dense: Sq x Sk = {sq * sk} elements is above max_elements = "
                             f"{max_elements}; the interval form is the point of fmsim")
        v = self.vectors()[min(batch, self.batch - 1), min(head, self.heads - 1)]
        i = np.arange(sq, dtype=np.int64)[:, None]
        lts, lte, uts, ute = (v[k][None, :] for k in range(4))
        masked = ((i >= lts) & (i < lte)) | ((i >= uts) & (i < ute))
        if self.causal:
            masked |= i < np.arange(sk, dtype=np.int64)[None, :] + sq - sk
        return ~masked

    # --- analysis --------------------------------------------------------------
    def tile_classes(self, br: int = 128, bc: int = 128, exact: bool = False) -> np.ndarray:
        """Class of every Br x Bc tile, uint8 [B, H_mask, Tr, Tc]: 0 masked (skipped),
        1 partial, 2 unmasked; by the min/max rule, or exactly."""
        tr, tc = -(-self.seqlen_q // br), -(-self.seqlen_k // bc)
        out = np.empty((self.batch, self.heads, tr, tc), dtype=np.uint8)
        p = out.ctypes.data_as(C.POINTER(C.c_uint8))
        counts, err = N.TileCounts(), N.Err()
        N.check(N.lib.fm_classify(self._h, br, bc, C.byref(counts), None if exact else p,
                                  p if exact else None, C.byref(err)), err)
        return out

    def analyze(self, br: int = 128, bc: int = 128) -> Analysis:
        """Tile classes (min/max rule and exact), block sparsity rho and memory at Br x Bc."""
        counts, err = N.TileCounts(), N.Err()
        N.check(N.lib.fm_classify(self._h, br, bc, C.byref(counts), None, None, C.byref(err)), err)
        mb = N.MaskBytes()
        N.lib.fm_mask_bytes_compute(self.seqlen_q, self.seqlen_k, self.batch * self.heads,
                                    N.lib.fm_colmask_smallest_form(self._h), bc, C.byref(mb))
        memory = {k: int(getattr(mb, k)) for k, _ in N.MaskBytes._fields_}
        return Analysis(br=br, bc=bc, tr=-(-self.seqlen_q // br), tc=-(-self.seqlen_k // bc),
                        total=int(counts.total), counts=_classes(counts.minmax),
                        counts_exact=_classes(counts.exact), rho=counts.sparsity,
                        rho_exact=counts.sparsity_exact,
                        partial_but_masked=int(counts.partial_but_masked),
                        partial_but_unmasked=int(counts.partial_but_unmasked), memory=memory)

    def to_string(self, br: int = 128, bc: int = 128, *, batch: int = 0, head: int = 0,
                  exact: bool = False, max_size: int = 64) -> str:
        """A text map of the tiles of one (batch, head) pair, like FlexAttention's
        BlockMask.to_string(): one character per tile ('█' unmasked, '░' partial,
        ' ' masked: skipped), tiles grouped when the grid is larger than
        max_size x max_size. The header gives that pair's own rho and, when the
        mask stores several (batch, head) sets, rho over all of them with their
        number. batch and head index the stored sets (0 <= batch < self.batch,
        0 <= head < self.heads); anything else is an IndexError."""
        return self._tile_map(br, bc, batch, head, exact, max_size, self.batch, self.heads)

    def _tile_map(self, br: int, bc: int, batch: int, head: int, exact: bool, max_size: int,
                  nb: int, nh: int) -> str:
        """to_string of pair (batch, head) of a B = nb, H = nh mask whose stored
        sets may be shared (a set per batch and head only where the mask has them)."""
        for name, v, n in (("batch", batch, nb), ("head", head, nh)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 0 <= v < n:
                raise IndexError(f"to_string: {name} {v!r} is out of range: the mask has {n} "
                                 f"{'batch entries' if name == 'batch' else 'heads'} ({name} 0..{n - 1})")
        cls = self.tile_classes(br, bc, exact)[batch if self.batch > 1 else 0,
                                               head if self.heads > 1 else 0]
        rho = float(np.count_nonzero(cls == TILE_MASKED)) / cls.size
        head_line = (f"{'exact' if exact else 'min/max rule'} tiles {br} x {bc} of Sq={self.seqlen_q} "
                     f"x Sk={self.seqlen_k} (batch {batch}, head {head}): rho = {rho:.4f}")
        if nb * nh > 1:
            a = self.analyze(br, bc)
            head_line += f"; all {nb * nh} (batch, head) pairs: rho = {a.rho_exact if exact else a.rho:.4f}"
        return head_line + "\n" + tile_text(cls, max_size)

    # --- figures ---------------------------------------------------------------
    def render(self, path: str, *, br: int = 128, bc: int = 128, layer: str = "both",
               size: Optional[str] = None, width_in: Optional[float] = None,
               height_in: Optional[float] = None, title: Any = True, dpi: Optional[int] = None,
               extra: Sequence[str] = ()) -> str:
        """Draws the mask into path (.png, .svg or .pdf) with `fmsim render`: the same
        figure, palette and legend as the command line. width_in / height_in (inches:
        3.3 is one column of a two-column paper), size ("WxH" points), dpi and title
        are render's --width-in, --height-in, --size, --dpi and --title (title=None or
        False: --no-title; True: the caption with this mask's name). FmsimError when the
        fmsim binary is not found or was built without cairo."""
        with tempfile.TemporaryDirectory(prefix="fmsim-render-") as tmp:
            iv = os.path.join(tmp, "intervals.npy")
            used, err = C.c_int(), N.Err()
            N.check(N.lib.fm_colmask_save_npy(self._h, iv.encode(), -1, C.byref(used), C.byref(err)), err)
            src = [iv]
            if N.FORM_CAUSAL[N.FORMS[used.value]] and N.FORM_K[N.FORMS[used.value]] == 2:
                src.append("--causal")
            return _render_cli(src, path, self.name, br=br, bc=bc, layer=layer, size=size,
                               width_in=width_in, height_in=height_in, title=title, dpi=dpi,
                               extra=extra)

    def plot(self, ax=None, *, br: int = 128, bc: int = 128, batch: int = 0, head: int = 0,
             title: Any = True, legend: bool = True):
        """A matplotlib Figure of one (batch, head): the mask (aggregated per pixel:
        masked, visible, or both inside the pixel) with the Br x Bc tile classes
        (min/max rule) over it, in render's palette and legend (fmsim.palette). ax: an
        Axes to draw into (its figure is returned); None makes a new figure."""
        return _plot(ax, self.seqlen_q, self.seqlen_k, br, bc,
                     lambda ps: self.tile_classes(ps, ps, exact=True)[min(batch, self.batch - 1),
                                                                      min(head, self.heads - 1)],
                     self.tile_classes(br, bc)[min(batch, self.batch - 1), min(head, self.heads - 1)],
                     _caption(self.name, title, self.seqlen_q, br, bc), legend)

    def predict(self, gpu: str = "h200-sm90", *, heads: Optional[int] = None,
                batch: Optional[int] = None, passes: str = "fwd", head_dim: int = 128,
                kernel: str = "auto") -> "Prediction":
        """Predicted kernel time of this mask on a GPU profile (`fmsim predict --json`
        on its intervals: the C core's timing model, core/fm_timing.h). gpu: a profile
        name of data/gpu or a file; heads / batch default to the mask's sets; passes:
        "fwd", "bwd" or "both"."""
        with tempfile.TemporaryDirectory(prefix="fmsim-predict-") as tmp:
            iv = os.path.join(tmp, "intervals.npy")
            used, err = C.c_int(), N.Err()
            N.check(N.lib.fm_colmask_save_npy(self._h, iv.encode(), -1, C.byref(used), C.byref(err)), err)
            form = N.FORMS[used.value]
            cmd = ["predict", "--mask", iv, "--causal" if N.FORM_CAUSAL[form] else "--bidir",
                   "--seqlen-q", str(self.seqlen_q), "--gpu", str(gpu), "--pass", passes,
                   "--head-dim", str(head_dim), "--kernel", kernel, "--json"]
            if heads is not None:
                cmd += ["--heads", str(int(heads))]
            if batch is not None:
                cmd += ["--batch", str(int(batch))]
            out = _run_cli("predict", cmd)
        return Prediction._from_json(json.loads(out))

    def to_block_mask(self, block_size: int = 128, device: str = "cpu"):
        """A FlexAttention BlockMask of this mask (needs torch with flex_attention):
        fully masked tiles are left out, unmasked tiles are full blocks, partial
        tiles are evaluated by a mask_mod that reads the interval vectors."""
        try:
            import torch
            from torch.nn.attention.flex_attention import BlockMask
        except ImportError as e:
            raise ImportError(f"to_block_mask needs torch with flex_attention: {e}") from None
        cls = self.tile_classes(block_size, block_size, exact=True)  # [B, H, Tr, Tc]

        def blocks(which):
            sel = cls == which
            num = sel.sum(-1).astype(np.int32)
            order = np.argsort(~sel, axis=-1, kind="stable").astype(np.int32)
            return torch.from_numpy(num).to(device), torch.from_numpy(order).to(device)

        kv_num, kv_idx = blocks(TILE_PARTIAL)
        full_num, full_idx = blocks(TILE_UNMASKED)
        v = torch.from_numpy(np.array(self.vectors())).to(device)  # [B, H, 4, Sk]
        nb, nh, sq, sk, causal = self.batch, self.heads, self.seqlen_q, self.seqlen_k, self.causal

        def mask_mod(b, h, q_idx, kv_idx):
            vb = v[b % nb if nb > 1 else 0, h % nh if nh > 1 else 0]
            masked = ((q_idx >= vb[0, kv_idx]) & (q_idx < vb[1, kv_idx])) | \
                     ((q_idx >= vb[2, kv_idx]) & (q_idx < vb[3, kv_idx]))
            if causal:
                masked = masked | (q_idx < kv_idx + sq - sk)
            return ~masked

        return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block_size,
                                        mask_mod=mask_mod, seq_lengths=(sq, sk))


def tile_text(cls: np.ndarray, max_size: int = 64) -> str:
    """Text map of a [Tr, Tc] class grid; groups of tiles become one character:
    ' ' all masked, '█' all unmasked, '░' anything else."""
    tr, tc = cls.shape
    gr, gc = -(-tr // max_size), -(-tc // max_size)
    lines = []
    for r0 in range(0, tr, gr):
        row = []
        for c0 in range(0, tc, gc):
            blk = cls[r0:r0 + gr, c0:c0 + gc]
            row.append(" " if (blk == TILE_MASKED).all() else "█" if (blk == TILE_UNMASKED).all() else "░")
        lines.append("|" + "".join(row) + "|")
    note = f"(each character {gr} x {gc} tiles) " if gr > 1 or gc > 1 else ""
    return "\n".join(lines) + f"\n{note}█ unmasked  ░ partial  ' ' masked (skipped)"


def _run_cli(what: str, args: list) -> str:
    """Runs the fmsim binary; its stdout, or FmsimError with its last stderr line."""
    exe = N.binary_path()
    if exe is None:
        raise FmsimError(f"{what}: the fmsim binary was not found (set FMSIM_BIN, or build the "
                         "checkout's fmsim" + (" with cairo)" if what == "render" else ")"))
    r = subprocess.run([exe] + args, capture_output=True, text=True)
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        if "unknown command" in msg:
            msg = f"{exe} was built without cairo: render is not available"
        raise FmsimError(f"{what}: {msg}")
    return r.stdout


def _caption_title(name: Optional[str], title: Any) -> Optional[list]:
    if title is None or title is False:
        return ["--no-title"]
    if isinstance(title, str):
        return ["--title", title]
    return None  # the CLI's caption, with the name put in below


def _render_cli(src: list, path, name: Optional[str], *, br, bc, layer, size, width_in, height_in,
                title, dpi, extra) -> str:
    cmd = ["render"] + list(src) + ["-o", os.fspath(path), "--br", str(br), "--bc", str(bc),
                                    "--layer", layer]
    for flag, v in (("--size", size), ("--width-in", width_in), ("--height-in", height_in),
                    ("--dpi", dpi)):
        if v is not None:
            cmd += [flag, str(v)]
    t = _caption_title(name, title)
    if t is None and name:
        # the CLI's own caption names its input file (a temporary one here): ask it for the
        # caption (--json) and put the mask's name in place of the file name
        info = json.loads(_run_cli("render", cmd + list(extra) + ["--json"]))
        cap, label = str(info.get("caption", "")), str(info.get("label", ""))
        head, sep, rest = cap.partition("  \u00b7  ")
        if label and head.startswith(label):
            head = name + head[len(label):].replace("Paddle intervals, ", "")
        else:
            head = f"{name} ({head})" if head else name
        t = ["--title", head + sep + rest]
    _run_cli("render", cmd + (t or []) + list(extra))
    return os.fspath(path)


def _caption(name: Optional[str], title: Any, sq: int, br: int, bc: int) -> Optional[str]:
    if title is None or title is False:
        return None
    if isinstance(title, str):
        return title
    return f"{name or 'mask'}, S = {sq}, tiles {br} x {bc}"


def _plot(ax, sq: int, sk: int, br: int, bc: int, pixels, tiles: np.ndarray, caption, legend: bool):
    """The mask aggregated to at most 512 x 512 pixels (pixels(ps): exact classes of
    ps x ps tiles) with the tile classes over it, as render draws them."""
    import matplotlib
    from matplotlib.colors import ListedColormap
    from . import palette as P
    if ax is None:
        from matplotlib.figure import Figure
        fig = Figure(figsize=(5.0, 4.6), dpi=100)
        ax = fig.add_subplot(1, 1, 1)
    else:
        fig = ax.figure
    ps = max(1, -(-max(sq, sk) // 512))
    pix = pixels(ps)
    # pixel: all masked, partly masked (render's masked-inside-partial colour), all visible
    ax.imshow(pix, cmap=ListedColormap([P.PALETTE["masked"], P.PALETTE["partial_masked"],
                                        P.PALETTE["visible"]]), vmin=0, vmax=2,
              interpolation="nearest", extent=(0, sk, sq, 0), aspect="auto")
    # tiles: partial tiles outlined in the partial colour, the grid where it is readable
    tr, tc = tiles.shape
    part = np.ma.masked_where(tiles != 1, np.ones_like(tiles, dtype=float))
    ax.imshow(part, cmap=ListedColormap([P.PALETTE["partial"]]), alpha=0.45, vmin=0, vmax=1,
              interpolation="nearest", extent=(0, tc * bc, tr * br, 0), aspect="auto")
    if tr <= 64 and tc <= 64:
        ax.set_xticks(np.arange(0, sk + 1, bc), minor=True)
        ax.set_yticks(np.arange(0, sq + 1, br), minor=True)
        ax.grid(which="minor", color="#FFFFFF", linewidth=0.4)
    ax.set_xlim(0, sk)
    ax.set_ylim(sq, 0)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    if caption:
        ax.set_title(caption, fontsize=9, color=P.PALETTE["text"])
    if legend:
        P.legend(ax, "tiles", loc="upper right", fontsize=7)
    del matplotlib
    return fig


def _figure_png(obj) -> Optional[bytes]:
    """PNG bytes of obj.plot() for Jupyter, or None (no matplotlib: Jupyter shows the repr)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = obj.plot()
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


@dataclass
class Prediction:
    """fmsim predict's numbers for a mask (at the kernel's own tile size).

    time_ms / tflops: forward (and backward_ms / backward_tflops when asked for);
    speedup_over_full_mask and speedup_over_noskip: the forward's; passes: every
    pass's full record as `fmsim predict --json` prints it; gpu / profile: the
    profile used."""
    gpu: str
    profile: str
    time_ms: Optional[float]
    tflops: Optional[float]
    speedup_over_full_mask: Optional[float]
    speedup_over_noskip: Optional[float]
    rho: Optional[float]
    backward_ms: Optional[float]
    backward_tflops: Optional[float]
    batch: int
    heads: int
    passes: dict = field(repr=False, default_factory=dict)

    @classmethod
    def _from_json(cls, j: dict) -> "Prediction":
        own = {}
        for p in j.get("passes", []):
            t = [x for x in p.get("tiles", []) if not x.get("what_if")]
            if t:
                own[p["pass"]] = t[0]
        f, b = own.get("fwd", {}), own.get("bwd", {})
        return cls(gpu=j["profile"].get("gpu", ""), profile=j["profile"].get("name", ""),
                   time_ms=f.get("time_ms"), tflops=f.get("tflops"),
                   speedup_over_full_mask=f.get("speedup_over_full_mask"),
                   speedup_over_noskip=f.get("speedup_over_noskip"),
                   rho=f.get("rho", b.get("rho")), backward_ms=b.get("time_ms"),
                   backward_tflops=b.get("tflops"), batch=int(j["batch"]), heads=int(j["heads"]),
                   passes=own)

    def __str__(self) -> str:
        parts = []
        if self.time_ms is not None:
            parts.append(f"forward {self.time_ms:.4f} ms, {self.tflops:.1f} TFLOP/s, "
                         f"x{self.speedup_over_full_mask:.2f} over the full mask, "
                         f"x{self.speedup_over_noskip:.2f} over noskip")
        if self.backward_ms is not None:
            parts.append(f"backward {self.backward_ms:.4f} ms, {self.backward_tflops:.1f} TFLOP/s")
        return f"{self.profile} ({self.gpu}): " + "; ".join(parts)


@dataclass
class ColumnRuns:
    """One column that some form cannot hold: its masked runs (the first three)."""
    batch: int
    head: int
    column: int
    nruns: int
    runs: list


@dataclass
class CheckResult:
    """What fmsim learned about a dense mask (check, from_mask_mod).

    fits / form: whether an interval form holds the mask and the smallest one;
    mask / intervals / causal: the interval mask, Paddle's startend_row_indices
    (int32 [B, H_mask, Sk, k]) and its causal flag, when it fits; bad_columns:
    the first columns the closest form cannot hold, with their runs; nruns /
    runs: masked runs of every column (int32 [B, H, Sk] and [B, H, Sk, 3, 2]);
    tiles: the dense mask's own Br x Bc tiles classified exactly; advice: what
    to do when it does not fit; subset: the tightest fitting mask that masks a
    subset of it (per column its two longest runs).
    """
    fits: bool
    form: Optional[str]
    closest_form: str
    batch: int
    heads: int
    seqlen_q: int
    seqlen_k: int
    h_mask: int
    masked: int
    max_runs: int
    misfits: dict
    bad_columns: list
    transposed_form: Optional[str]
    shared_across_heads: bool
    rows_without_visible_key: Optional[int]
    masked_diagonal: int
    tiles: Optional[dict]
    advice: dict
    memory: dict
    mask: Optional[Mask] = None
    subset: Optional[Mask] = None
    nruns: Optional[np.ndarray] = None
    runs: Optional[np.ndarray] = None
    tile_classes: Optional[np.ndarray] = None
    name: Optional[str] = None
    _keep: Any = field(default=None, repr=False)
    # rows(): the checked mask again, (rows, Sk) bool blocks (True = may attend) in
    # storage order: what draws a mask that fits no form exactly (to_string, plot, render)
    _source: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        nm = f"{self.name!r}: " if self.name else ""
        verdict = (f"fits {self.form}, H_mask = {self.h_mask}" if self.fits else
                   f"does not fit (closest {self.closest_form}, up to {self.max_runs} runs a column)")
        rho = f", rho = {self.tiles['sparsity']:.4f} at {self.tiles['br']} x {self.tiles['bc']}" \
            if self.tiles else ""
        return (f"<fmsim.CheckResult {nm}B={self.batch} H={self.heads} Sq={self.seqlen_q} "
                f"Sk={self.seqlen_k}, {verdict}{rho}>")

    def _repr_png_(self) -> Optional[bytes]:
        return _figure_png(self)

    def _rescan(self, br: int, bc: int) -> np.ndarray:
        """Exact Br x Bc tile classes of the checked mask, uint8 [B, H, Tr, Tc], by
        checking it again from its source (a mask that fits no form has no intervals)."""
        if self._source is None:
            raise FmsimError("the mask does not fit any interval form and its source is gone; "
                             "result.subset is the tightest mask that fits")
        scan = _Scan(self.batch, self.heads, self.seqlen_q, self.seqlen_k,
                     _opts(False, False, (br, bc), keep_tiles=True))
        for block in self._source():
            scan.rows(np.ascontiguousarray(block).view(np.uint8), True)
        r = _result(scan.finish(), False)
        return r.tile_classes

    def _dense_npy(self, path: str) -> None:
        """The checked mask as a bool .npy [B, H, Sq, Sk] (True = may attend), streamed."""
        if self._source is None:
            self._rescan(1, 1)  # the one-line error
        shape = (self.batch, self.heads, self.seqlen_q, self.seqlen_k)
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.bool_, shape=shape)
        flat, r0 = out.reshape(-1, self.seqlen_k), 0
        for block in self._source():
            flat[r0:r0 + block.shape[0]] = block
            r0 += block.shape[0]
        out.flush()
        del flat, out

    @property
    def causal(self) -> Optional[bool]:
        return N.FORM_CAUSAL[self.form] if self.fits else None

    @property
    def intervals(self) -> Optional[np.ndarray]:
        """Paddle startend_row_indices in the smallest form, int32 [B, H_mask, Sk, k]."""
        return self.mask.to_paddle()[0] if self.fits else None

    def _need_mask(self, what: str) -> Mask:
        if not self.fits:
            first = self.bad_columns[0] if self.bad_columns else None
            where = (f"; column {first.column} of batch {first.batch}, head {first.head} has "
                     f"{first.nruns} masked runs") if first else ""
            raise FmsimError(f"{what}: the mask does not fit any interval form{where}; "
                             f"result.subset is the tightest mask that fits")
        return self.mask

    def to_paddle(self, form: Optional[str] = None) -> tuple[np.ndarray, bool]:
        """(startend_row_indices, causal) of the mask; see Mask.to_paddle."""
        return self._need_mask("to_paddle").to_paddle(form)

    def analyze(self, br: int = 128, bc: int = 128) -> Analysis:
        return self._need_mask("analyze").analyze(br, bc)

    def to_string(self, br: int = 128, bc: int = 128, *, batch: int = 0, head: int = 0,
                  exact: bool = False, max_size: int = 64) -> str:
        """Mask.to_string of pair (batch, head) of the checked B x H mask (heads
        sharing one set included); out of range is an IndexError. A mask that fits
        no form is drawn exactly (its exact tile classes, checked again from its
        source), as `fmsim render` draws it."""
        if self.fits:
            if self.mask.name is None:
                self.mask.name = self.name
            return self.mask._tile_map(br, bc, batch, head, exact, max_size, self.batch, self.heads)
        for nm, v, n in (("batch", batch, self.batch), ("head", head, self.heads)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 0 <= v < n:
                raise IndexError(f"to_string: {nm} {v!r} is out of range: the mask has {n} "
                                 f"{'batch entries' if nm == 'batch' else 'heads'} ({nm} 0..{n - 1})")
        cls = self._rescan(br, bc)[batch, head]
        rho = float(np.count_nonzero(cls == TILE_MASKED)) / cls.size
        return (f"exact tiles {br} x {bc} of Sq={self.seqlen_q} x Sk={self.seqlen_k} (batch {batch}, "
                f"head {head}), no interval form holds the mask: rho = {rho:.4f}\n"
                + tile_text(cls, max_size))

    def render(self, path: str, *, br: int = 128, bc: int = 128, layer: str = "both",
               size: Optional[str] = None, width_in: Optional[float] = None,
               height_in: Optional[float] = None, title: Any = True, dpi: Optional[int] = None,
               extra: Sequence[str] = ()) -> str:
        """Mask.render's figure; captioned with the mask_mod's name. A mask that fits
        no form is written as a dense .npy (in a temporary folder) and drawn by
        `fmsim render` exactly, with the columns no form holds marked."""
        kw = dict(br=br, bc=bc, layer=layer, size=size, width_in=width_in, height_in=height_in,
                  title=title, dpi=dpi, extra=extra)
        if self.fits:
            if self.mask.name is None:
                self.mask.name = self.name
            return self.mask.render(path, **kw)
        with tempfile.TemporaryDirectory(prefix="fmsim-render-") as tmp:
            dense = os.path.join(tmp, "mask.npy")
            self._dense_npy(dense)
            return _render_cli([dense], path, self.name, **kw)

    def plot(self, ax=None, *, br: int = 128, bc: int = 128, batch: int = 0, head: int = 0,
             title: Any = True, legend: bool = True):
        """Mask.plot's figure (a matplotlib Figure; ax: an Axes to draw into). A mask
        that fits no form is drawn exactly from its source, with exact tile classes."""
        if self.fits:
            if self.mask.name is None:
                self.mask.name = self.name
            return self.mask.plot(ax, br=br, bc=bc, batch=batch, head=head, title=title, legend=legend)
        return _plot(ax, self.seqlen_q, self.seqlen_k, br, bc,
                     lambda ps: self._rescan(ps, ps)[batch, head], self._rescan(br, bc)[batch, head],
                     _caption(self.name, title, self.seqlen_q, br, bc), legend)

    def predict(self, gpu: str = "h200-sm90", **kw) -> "Prediction":
        """Mask.predict of the checked mask (its heads and batch by default)."""
        kw.setdefault("heads", self.heads)
        kw.setdefault("batch", self.batch)
        return self._need_mask("predict").predict(gpu, **kw)

    def to_block_mask(self, block_size: int = 128, device: str = "cpu"):
        return self._need_mask("to_block_mask").to_block_mask(block_size, device)

    def __str__(self) -> str:
        if self.fits:
            head = f"FITS: smallest form {self.form} (causal = {self.causal}), H_mask = {self.h_mask}"
        else:
            head = (f"DOES NOT FIT: {self.misfits[self.closest_form]} columns need more than "
                    f"{self.closest_form}; up to {self.max_runs} masked runs in a column")
        lines = [f"mask B={self.batch} H={self.heads} Sq={self.seqlen_q} Sk={self.seqlen_k}: {head}"]
        if self.tiles:
            t = self.tiles
            lines.append(f"tiles {t['br']} x {t['bc']} exactly: masked {t['masked']}, partial "
                         f"{t['partial']}, unmasked {t['unmasked']}; rho = {t['sparsity']:.4f}")
        if not self.fits:
            a = self.advice
            lines.append(f"sub-mask that fits masks {a['subset_masked']} of {self.masked} masked "
                         f"elements; {a['element_mask_fraction']:.4%} of all elements are left to an "
                         f"element mask; the first {a['prefix_rows_fit']} query rows fit")
        return "\n".join(lines)


def _result(res: C.c_void_p, keep_runs: bool) -> CheckResult:
    """A CheckResult from a libfmsim fm_dense_result (consumed)."""
    try:
        r = N.lib.fm_dense_result_report(res).contents
        closest = N.form_name(r.closest)
        bad = []
        if r.form < 0:
            for k in range(r.nfirst[r.closest]):
                c = r.first[r.closest][k]
                bad.append(ColumnRuns(c.batch, c.head, c.column, c.nruns,
                                      [(c.runs[q][0], c.runs[q][1]) for q in range(min(c.nruns, 3))]))
        a = r.advice
        rest = r.masked - a.subset_masked
        total = r.dense_bool_bytes
        advice = {"columns_by_runs": list(a.runs_hist), "sets_fit": int(a.sets_fit),
                  "sets": int(r.nsets), "prefix_rows_fit": int(a.prefix_rows),
                  "subset_masked": int(a.subset_masked), "element_mask_elements": int(rest),
                  "element_mask_fraction": rest / total if total else 0.0,
                  "transposed_form": N.form_name(r.transposed_form) if r.rows_known else None}
        tiles = None
        if r.tiles.total:
            tiles = {"br": r.tiles.br, "bc": r.tiles.bc, "total": int(r.tiles.total),
                     "masked": int(r.tiles.count[0]), "partial": int(r.tiles.count[1]),
                     "unmasked": int(r.tiles.count[2]), "sparsity": r.tiles.sparsity}
        out = CheckResult(
            fits=r.form >= 0, form=N.form_name(r.form), closest_form=closest, batch=int(r.batch),
            heads=int(r.heads), seqlen_q=int(r.sq), seqlen_k=int(r.sk), h_mask=int(r.h_mask),
            masked=int(r.masked), max_runs=int(r.max_runs),
            misfits={N.FORMS[f]: int(r.misfits[f]) for f in range(4)}, bad_columns=bad,
            transposed_form=N.form_name(r.transposed_form) if r.rows_known else None,
            shared_across_heads=bool(r.shared_across_heads),
            rows_without_visible_key=int(r.empty_rows) if r.rows_known else None,
            masked_diagonal=int(r.masked_diagonal), tiles=tiles, advice=advice,
            memory={"dense_bool_bytes": int(r.dense_bool_bytes),
                    "interval_bytes": int(r.interval_bytes) if r.form >= 0 else None})
        if keep_runs:
            err = N.Err()
            if out.fits:
                h = _handle_out()
                N.check(N.lib.fm_dense_result_to_colmask(res, -1, C.byref(h), C.byref(err)), err)
                out.mask = Mask(h)
            h = _handle_out()
            N.check(N.lib.fm_dense_result_subset_colmask(res, C.byref(h), C.byref(err)), err)
            out.subset = Mask(h)
            shape = (out.batch, out.heads, out.seqlen_k)
            out.nruns = np.ctypeslib.as_array(N.lib.fm_dense_result_nruns(res), shape=shape).copy()
            out.runs = np.ctypeslib.as_array(N.lib.fm_dense_result_runs(res), shape=shape + (3, 2)).copy()
        tp = N.lib.fm_dense_result_tiles(res)
        if tp and tiles:
            tr, tc = r.tiles.tr, r.tiles.tc
            out.tile_classes = np.ctypeslib.as_array(tp, shape=(out.batch, out.heads, tr, tc)).copy()
        return out
    finally:
        N.lib.fm_dense_result_destroy(res)


_READINGS = {None: 0, "auto": 0, "bool": 1, "additive": 2}


def _opts(masked_true: bool, keep_runs: bool, tiles: Optional[tuple], reading=None,
          keep_tiles: bool = False) -> N.DenseOpts:
    if reading not in _READINGS:
        raise ValueError(f"reading={reading!r}: expected None, 'bool' or 'additive'")
    br, bc = tiles if tiles else (0, 0)
    return N.DenseOpts(masked_true=int(bool(masked_true)), keep_intervals=int(bool(keep_runs)),
                       reading=_READINGS[reading], br=int(br), bc=int(bc),
                       keep_tiles=int(bool(keep_tiles and tiles)))


class _Scan:
    """A streaming dense check: rows in storage order, (B, H, Sq) of them."""

    def __init__(self, B: int, H: int, Sq: int, Sk: int, opts: N.DenseOpts):
        self.h, err = _handle_out(), N.Err()
        N.check(N.lib.fm_dense_scan_create(B, H, Sq, Sk, C.byref(opts), C.byref(self.h),
                                           C.byref(err)), err)
        self.sk = Sk

    def rows(self, block: np.ndarray, attend: bool) -> None:
        """block: (rows, Sk) bool or uint8, C-contiguous (no copy)."""
        N.lib.fm_dense_scan_rows(self.h, block.ctypes.data, block.shape[0], int(attend))

    def finish(self) -> C.c_void_p:
        res, err = _handle_out(), N.Err()
        h, self.h = self.h, None
        N.check(N.lib.fm_dense_scan_finish(h, C.byref(res), C.byref(err)), err)
        return res

    def __del__(self, _destroy=N.lib.fm_dense_scan_destroy):  # bound early, as Mask.__del__
        if getattr(self, "h", None):
            _destroy(self.h)
