"""Tests of the Python package (python/fmsim) over libfmsim.

Expected figures are recomputed here by brute force over dense numpy masks
(runs per column, tile classes, sub-masks), never taken from the code under
test; the command line (`fmsim check`) is the second reference.
"""
import json
import os
import re
import subprocess

import numpy as np
import pytest

import fmsim
from fmsim import _native

ROOT = os.environ.get("FM_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------- references

def runs_of(col):
    """Masked runs [start, end) of a 1-D bool 'masked' array."""
    d = np.diff(np.concatenate([[0], col.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def dense_eval(fn, B, H, S, Sk=None):
    Sk = Sk or S
    q = np.arange(S, dtype=np.int32)[:, None]
    k = np.arange(Sk, dtype=np.int32)[None, :]
    return np.stack([np.stack([np.broadcast_to(fn(np.int32(b), np.int32(h), q, k), (S, Sk))
                               for h in range(H)]) for b in range(B)])


def exact_tiles(masked, br, bc):
    """Exact classes of a [Sq, Sk] 'masked' array: 0 masked, 1 partial, 2 unmasked."""
    sq, sk = masked.shape
    tr, tc = -(-sq // br), -(-sk // bc)
    out = np.empty((tr, tc), np.uint8)
    for r in range(tr):
        for c in range(tc):
            t = masked[r * br:(r + 1) * br, c * bc:(c + 1) * bc]
            out[r, c] = 0 if t.all() else 2 if not t.any() else 1
    return out


def dilated(b, h, q, k):  # does not fit: every 4th key of a causal window of 24
    return (q >= k) & ((q - k) % 4 == 0) & (q - k < 24)


def per_head(b, h, q, k):  # causal window that depends on the head (and batch)
    return (q >= k) & (q - k < 5 + 3 * h + b)


def fmsim_bin():
    exe = fmsim.binary_path()
    if exe is None:
        pytest.skip("no fmsim binary")
    return exe


def skip_without_figures(exe):
    """Skips unless this fmsim draws figures (cairo): `fmsim --version` lists what the build can do."""
    if "figures: yes" not in subprocess.run([exe, "--version"], capture_output=True, text=True).stdout:
        pytest.skip("fmsim built without cairo")


# ----------------------------------------------------------------- from_mask_mod

@pytest.mark.parametrize("chunk", [1, 7, 64, None])
def test_from_mask_mod_fitting_equals_brute_force(chunk):
    S = 96
    r = fmsim.from_mask_mod(per_head, B=2, H=3, Sq=S, chunk_rows=chunk, tiles=(16, 8))
    attend = dense_eval(per_head, 2, 3, S)
    assert r.fits and r.form == "causal-1" and r.causal
    assert r.h_mask == 3 and not r.shared_across_heads
    for b in range(2):
        for h in range(3):
            assert np.array_equal(r.mask.to_dense(b, h), attend[b, h])
            exact = exact_tiles(~attend[b, h], 16, 8)
    assert r.intervals.shape == (2, 3, S, 1) and r.intervals.dtype == np.int32
    # the exact tile counts of the scan equal brute force over all sets
    want = np.concatenate([exact_tiles(~attend[b, h], 16, 8).ravel() for b in range(2) for h in range(3)])
    assert r.tiles["masked"] == (want == 0).sum() and r.tiles["partial"] == (want == 1).sum()
    assert r.tiles["unmasked"] == (want == 2).sum()


def test_heads_sharing_a_mask_give_h_mask_1():
    r = fmsim.from_mask_mod(lambda b, h, q, k: q >= k, B=2, H=4, Sq=40)
    assert r.fits and r.h_mask == 1 and r.intervals.shape == (2, 1, 40, 1)


def test_from_mask_mod_not_fitting_runs_advice_and_subset():
    S, Sk = 80, 72
    r = fmsim.from_mask_mod(dilated, 1, 1, S, Sk, chunk_rows=9, tiles=(16, 16))
    masked = ~dense_eval(dilated, 1, 1, S, Sk)[0, 0]
    assert not r.fits and r.form is None and r.intervals is None
    cols = [runs_of(masked[:, j]) for j in range(Sk)]
    assert r.max_runs == max(len(c) for c in cols)
    assert np.array_equal(r.nruns[0, 0], [len(c) for c in cols])
    for j, c in enumerate(cols):
        for k, run in enumerate(c[:3]):
            assert tuple(r.runs[0, 0, j, k]) == run
    # bad columns: the first eight that bidir-4 cannot hold, with their runs
    bad = [j for j, c in enumerate(cols) if len(c) > 2][:8]
    assert [c.column for c in r.bad_columns] == bad
    assert r.bad_columns[0].runs == [tuple(map(int, x)) for x in cols[bad[0]][:3]]
    # advice: histogram, prefix of rows that fits, sub-mask
    hist = [sum(len(c) == n for c in cols) for n in range(4)] + [sum(len(c) >= 4 for c in cols)]
    assert r.advice["columns_by_runs"] == hist
    assert r.advice["prefix_rows_fit"] == min(c[2][0] for c in cols if len(c) > 2)
    sub = r.subset.to_dense()  # True = may attend
    sub_masked = ~sub
    assert not (sub_masked & ~masked).any(), "the sub-mask masks only masked elements"
    for j, c in enumerate(cols):  # per column: its two longest runs
        longest = sorted(c, key=lambda x: (-(x[1] - x[0]), x[0]))[:2]
        assert sorted(runs_of(sub_masked[:, j])) == sorted(longest)
    assert r.advice["subset_masked"] == sub_masked.sum()
    assert r.advice["element_mask_fraction"] == pytest.approx((masked & ~sub_masked).sum() / masked.size)
    with pytest.raises(fmsim.FmsimError, match="does not fit"):
        r.analyze()
    assert r.subset.analyze(16, 16).rho_exact == (exact_tiles(sub_masked, 16, 16) == 0).mean()


def test_from_mask_mod_matches_the_command_line(tmp_path):
    S = 64
    attend = dense_eval(dilated, 1, 1, S)[0, 0]
    np.save(tmp_path / "m.npy", attend)
    cli = subprocess.run([fmsim_bin(), "check", str(tmp_path / "m.npy"), "--json", "--br", "16",
                          "--bc", "16"], capture_output=True, text=True)
    assert cli.returncode == 1
    rep = json.loads(cli.stdout)
    r = fmsim.from_mask_mod(dilated, 1, 1, S, tiles=(16, 16))
    assert rep["representable"] == r.fits and rep["max_runs"] == r.max_runs
    assert rep["first_bad_columns"] == [c.column for c in r.bad_columns]
    assert rep["advice"]["columns_by_runs"] == r.advice["columns_by_runs"]
    assert rep["advice"]["subset"]["masked_elements"] == r.advice["subset_masked"]
    assert rep["advice"]["subset"]["sparsity_exact"] == pytest.approx(r.subset.analyze(16, 16).rho_exact)
    assert rep["tiles"]["masked"] == r.tiles["masked"]


def test_from_mask_mod_bad_inputs():
    with pytest.raises(ValueError, match="Sq"):
        fmsim.from_mask_mod(lambda b, h, q, k: q >= k, 1, 1, 0)
    with pytest.raises(ValueError, match="B"):
        fmsim.from_mask_mod(lambda b, h, q, k: q >= k, -1, 1, 8)
    with pytest.raises(TypeError, match="callable"):
        fmsim.from_mask_mod(None, 1, 1, 8)
    with pytest.raises(ValueError, match="broadcast"):
        fmsim.from_mask_mod(lambda b, h, q, k: np.ones((3, 3), bool), 1, 1, 8, backend="numpy")
    # a float result is an additive mask, read as check reads the same values
    soft = fmsim.from_mask_mod(lambda b, h, q, k: (q - k) * 0.5, 1, 1, 8, backend="numpy")
    ref = fmsim.check(((np.arange(8)[:, None] - np.arange(8)[None, :]) * 0.5).astype(np.float64))
    assert soft.masked == ref.masked == 0 and soft.fits == ref.fits
    with pytest.raises(TypeError, match="only 0 and 1"):
        fmsim.from_mask_mod(lambda b, h, q, k: (q >= k) * 1.0, 1, 1, 8, backend="numpy")
    # None means 1, as in create_block_mask; a mask_mod that only uses kv broadcasts
    r = fmsim.from_mask_mod(lambda b, h, q, k: k < 3, None, None, 8)
    assert r.fits and r.batch == 1 and r.heads == 1


def test_torch_backend():
    torch = pytest.importorskip("torch")
    r = fmsim.from_mask_mod(lambda b, h, q, k: torch.logical_and(q >= k, q - k < 4), 1, 2, 32,
                            backend="torch")
    assert r.fits and r.form == "causal-1"


# ----------------------------------------------------------------- check

def test_check_array_path_and_dtypes(tmp_path):
    attend = dense_eval(per_head, 2, 3, 48)
    base = fmsim.check(attend)
    np.save(tmp_path / "m.npy", attend)
    from_file = fmsim.check(tmp_path / "m.npy")
    assert base.fits and from_file.fits and base.mask == from_file.mask
    for dt in (np.uint8, np.int8, np.int32, np.int64, np.uint64):
        assert fmsim.check(attend.astype(dt)).mask == base.mask, dt
    additive = np.where(attend, 0.0, -np.inf)
    for dt in (np.float32, np.float64, np.float16):
        assert fmsim.check(additive.astype(dt)).mask == base.mask, dt
    inv = fmsim.check(~attend, masked_true=True)
    assert inv.mask == base.mask
    # a float mask of 0 and 1 is ambiguous
    with pytest.raises(ValueError, match="only 0 and 1"):
        fmsim.check(attend.astype(np.float32))
    assert fmsim.check(attend.astype(np.float32), reading="bool").mask == base.mask
    assert fmsim.check(attend.astype(np.float32), reading="additive").masked == 0
    np.save(tmp_path / "f.npy", attend.astype(np.float64))
    with pytest.raises(fmsim.FmsimError, match="--bool"):
        fmsim.check(tmp_path / "f.npy")
    assert fmsim.check(tmp_path / "f.npy", reading="bool").mask == base.mask
    with pytest.raises(ValueError, match="dense mask is"):
        fmsim.check(np.zeros(5, bool))


def test_check_reads_bool_in_place():
    a = np.zeros((1 << 10, 1 << 10), bool)
    a[:, 0] = True
    before = a.copy()
    r = fmsim.check(a)
    assert r.fits and np.array_equal(a, before)


# ----------------------------------------------------------------- paddle

@pytest.mark.parametrize("form", ["causal-1", "causal-2", "bidir-2", "bidir-4"])
def test_paddle_round_trip(form):
    S = 40
    rng = np.random.default_rng(3)
    k = _native.FORM_K[form]
    causal = _native.FORM_CAUSAL[form]
    a = np.sort(rng.integers(0, S + 1, size=(2, 1, S, k)), axis=-1).astype(np.int32)
    if form == "causal-1":
        a[..., 0] = np.maximum(a[..., 0], np.arange(S) + 1)
    if form == "causal-2":
        a[..., 0] = np.maximum(a[..., 0], np.arange(S) + 1)
        a[..., 1] = np.maximum(a[..., 0], a[..., 1])
    m = fmsim.from_paddle(a, causal)
    back, c = m.to_paddle(form)
    assert c == causal and back.shape == a.shape
    assert fmsim.from_paddle(back, causal) == m
    # semantics: masked(i, j) from the form's vectors
    lts = a[0, 0, :, 0]
    dense = m.to_dense(0, 0)
    i = np.arange(S)[:, None]
    if form == "causal-1":
        want = (i >= lts[None, :]) | (i < np.arange(S)[None, :])
        assert np.array_equal(~dense, want)


def test_from_paddle_rejects_bad_arrays():
    with pytest.raises(ValueError, match=r"\[B, H_mask, Sk, k\]"):
        fmsim.from_paddle(np.zeros((4, 2), np.int32), True)
    with pytest.raises(ValueError, match="bidir-4"):
        fmsim.from_paddle(np.zeros((1, 1, 4, 4), np.int32), True)
    with pytest.raises(fmsim.FmsimError, match=r"\[0, Sq"):
        fmsim.from_paddle(np.full((1, 1, 4, 1), 9, np.int32), True)


# ----------------------------------------------------------------- analyze, text, render

def test_analyze_equals_brute_force_and_cli(tmp_path):
    fn = lambda b, h, q, k: ((q >= k) & (q - k < 20)) | (k < 5)  # noqa: E731
    r = fmsim.from_mask_mod(fn, 1, 1, 100)
    a = r.analyze(16, 32)
    exact = exact_tiles(~dense_eval(fn, 1, 1, 100)[0, 0], 16, 32)
    assert (a.tr, a.tc, a.total) == (7, 4, 28)
    assert a.counts_exact == {"masked": int((exact == 0).sum()), "partial": int((exact == 1).sum()),
                              "unmasked": int((exact == 2).sum())}
    assert a.rho <= a.rho_exact  # the min/max rule is conservative
    assert a.memory["dense"] == 100 * 100
    np.save(tmp_path / "iv.npy", r.intervals)
    out = subprocess.run([fmsim_bin(), "analyze", "--intervals", str(tmp_path / "iv.npy"), "--bidir",
                          "--br", "16", "--bc", "32", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    assert cli["sparsity"] == pytest.approx(a.rho) and cli["exact"]["sparsity"] == pytest.approx(a.rho_exact)


def test_to_string_is_the_tile_map():
    r = fmsim.from_mask_mod(lambda b, h, q, k: (q >= k) & (q - k < 8), 1, 1, 64)
    text = r.to_string(8, 8)
    grid = [line[1:-1] for line in text.splitlines() if line.startswith("|")]
    cls = r.mask.tile_classes(8, 8)[0, 0]
    assert len(grid) == 8 and all(len(g) == 8 for g in grid)
    for row, want in zip(grid, cls):
        assert [" ░█"[c] for c in want] == list(row)
    assert "rho = 0.7656" in text  # 49 of 64 tiles skipped
    big = fmsim.from_mask_mod(lambda b, h, q, k: q >= k, 1, 1, 4096).to_string(16, 16, max_size=32)
    assert len([l for l in big.splitlines() if l.startswith("|")]) == 32 and "8 x 8 tiles" in big


def test_render_png_and_clean_errors(tmp_path, monkeypatch):
    exe = fmsim_bin()
    r = fmsim.from_mask_mod(lambda b, h, q, k: (q >= k) & (q - k < 100), 1, 1, 512)
    skip_without_figures(exe)
    out = tmp_path / "m.png"
    assert r.render(str(out), br=64, bc=64, size="400x300") == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a mask no form holds is drawn too (exactly, from its dense mask), as the CLI draws it
    assert fmsim.from_mask_mod(dilated, 1, 1, 64).render(str(tmp_path / "x.png")) == str(tmp_path / "x.png")
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setattr(_native, "binary_path", lambda: None)
    with pytest.raises(fmsim.FmsimError, match="binary was not found"):
        r.render(str(tmp_path / "y.png"))
    assert not (tmp_path / "y.png").exists()


def test_to_block_mask():
    pytest.importorskip("torch")
    pytest.importorskip("torch.nn.attention.flex_attention")
    r = fmsim.from_mask_mod(lambda b, h, q, k: (q >= k) & (q - k < 300), 1, 1, 1024)
    bm = r.to_block_mask()
    dense = bm.to_dense()[0, 0].numpy()
    cls = r.mask.tile_classes(128, 128, exact=True)[0, 0]
    assert np.array_equal(dense != 0, cls != 0)


def test_palette_matches_render():
    header = open(os.path.join(ROOT, "viz", "viz.h")).read()
    names = {"BACKGROUND": "background", "MASKED": "masked", "VISIBLE": "visible",
             "PARTIAL": "partial", "PARTIAL_MASKED": "partial_masked", "HATCH": "hatch", "TEXT": "text",
             "MISFIT": "misfit"}
    found = dict(re.findall(r"VIZ_RGB_([A-Z_]+) = 0x([0-9A-Fa-f]{6})", header))
    assert set(found) == set(names)
    for c, key in names.items():
        assert fmsim.PALETTE[key].lower() == "#" + found[c].lower()
    # the legend entries are written once, in viz_legend_entries (viz/viz_notes.c)
    draw = open(os.path.join(ROOT, "viz", "viz_notes.c")).read()
    for kind in fmsim.LEGEND.values():
        for text, _ in kind:
            assert f'"{text}"' in draw or f'"partial tile: visible element" : "{text}"' in draw, text


def test_to_string_names_what_its_rho_counts():
    """The header's rho is the (batch, head) pair's own, and the all-pairs
    figure is named with its number of pairs; an index out of range is an
    IndexError, never clamped (issue 20, defect 3)."""
    fn = lambda b, h, q, k: (q >= k) & (q - k < 1024 * (h + 1))  # noqa: E731
    r = fmsim.from_mask_mod(fn, 1, 4, 4096)
    masked = ~dense_eval(fn, 1, 4, 4096)
    own = [np.mean(exact_tiles(masked[0, h], 1024, 1024) == 0) for h in range(4)]
    assert len(set(own)) > 1, "the heads differ"
    for h in range(4):
        head = r.to_string(1024, 1024, head=h, exact=True).splitlines()[0]
        assert f"(batch 0, head {h}): rho = {own[h]:.4f}" in head, head
        assert f"all 4 (batch, head) pairs: rho = {np.mean(own):.4f}" in head, head
    for bad in (dict(head=4), dict(head=7), dict(head=-1), dict(batch=1)):
        with pytest.raises(IndexError, match="out of range"):
            r.to_string(1024, 1024, **bad)
    one = fmsim.from_mask_mod(lambda b, h, q, k: q >= k, 1, 1, 256).to_string(64, 64)
    assert "pairs" not in one.splitlines()[0]


class _UsersOwnError(Exception):
    pass


def test_a_mask_mods_own_exception_comes_back():
    """The mask_mod's own exception, with its traceback, comes back from
    from_mask_mod; torch is named only when a torch call failed (issue 20)."""
    def broken(b, h, q, k):
        raise _UsersOwnError("my mask_mod is broken")

    with pytest.raises(_UsersOwnError, match="my mask_mod is broken") as info:
        fmsim.from_mask_mod(broken, 1, 1, 64)
    assert any(t.name == "broken" for t in info.traceback), "the traceback reaches the mask_mod"
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "torch" not in str(info.value) and "torch" not in " ".join(getattr(info.value, "__notes__", []))

    def late(b, h, q, k):  # fails on a later chunk, not in the probe
        if int(np.max(q)) >= 40:
            raise KeyError("row 40")
        return q >= k

    with pytest.raises(KeyError, match="row 40") as info:
        fmsim.from_mask_mod(late, 1, 1, 64, chunk_rows=8, backend="numpy")
    assert any("query rows [40, 48)" in n for n in getattr(info.value, "__notes__", [])), info.value


# ----------------------------------------------------------------- struct mirrors

def test_every_struct_mirror_is_size_checked():
    import ctypes
    mirrored = {c for c in vars(_native).values()
                if isinstance(c, type) and issubclass(c, ctypes.Structure)}
    assert mirrored == set(_native.MIRRORS.values()), "a ctypes mirror missing from MIRRORS"
    for name, cls in _native.MIRRORS.items():
        assert _native.lib.fm_struct_size(name.encode()) == ctypes.sizeof(cls), name
    assert _native.lib.fm_struct_size(b"no_such_struct") == 0

    class Short(ctypes.Structure):  # a mirror that lost a field
        _fields_ = [("msg", ctypes.c_char * 511)]
    with pytest.raises(ImportError, match=r"^fmsim: .* \(fm_err is 512 bytes there, 511 here\)"):
        _native.check_mirrors(_native.lib, "libfmsim.so", {"fm_err": Short})
    with pytest.raises(ImportError, match=r"fm_nosuch is unknown there"):
        _native.check_mirrors(_native.lib, "libfmsim.so", {"fm_nosuch": Short})


# ----------------------------------------------------------------- the paper-and-course user's day (issue 27)

def readme_blocks():
    """The mask_mod and the five lines of the README's Python section, as written there."""
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    mod = next(b for b in blocks if b.startswith("def per_head_window("))
    five = next(b for b in blocks if "r.predict(" in b and "r.render(" in b and "r.plot()" in b)
    return mod, five


def test_readme_five_lines(tmp_path, monkeypatch):
    from matplotlib.figure import Figure
    exe = fmsim_bin()
    skip_without_figures(exe)
    mod, five = readme_blocks()
    lines = [l for l in five.strip().splitlines() if l.strip()]
    assert len(lines) <= 5
    monkeypatch.chdir(tmp_path)
    ns = {}
    exec(mod, ns)
    exec(five, ns)
    r, fig, t = ns["r"], ns["fig"], ns["t"]
    # an inline figure: a matplotlib Figure, and the result shows itself in Jupyter
    assert isinstance(fig, Figure) and fig.axes
    assert r._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"
    # a paper-size PDF: 3.3 inches = 237.6 points wide
    pdf = (tmp_path / "per_head_window.pdf").read_bytes()
    assert pdf[:5] == b"%PDF-"
    box = re.search(rb"/MediaBox \[\s*0 0 ([0-9.]+) ([0-9.]+)", pdf)
    assert box and float(box.group(1)) == pytest.approx(237.6, abs=0.5)
    # an H200 time: what `fmsim predict` says of the same intervals
    iv, causal = r.to_paddle()
    np.save(tmp_path / "iv.npy", iv)
    cli = json.loads(subprocess.run([exe, "predict", "--mask", str(tmp_path / "iv.npy"), "--causal",
                                     "--gpu", "h200-sm90", "--heads", "4", "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    fwd = cli["passes"][0]["tiles"][0]
    assert t.time_ms == pytest.approx(fwd["time_ms"]) and t.tflops == pytest.approx(fwd["tflops"])
    assert t.speedup_over_full_mask == pytest.approx(fwd["speedup_over_full_mask"])
    assert t.gpu == "NVIDIA H200" and t.heads == 4 and r.h_mask == 4


def test_plot_draws_the_mask_and_tiles():
    from matplotlib.figure import Figure
    S = 64
    r = fmsim.from_mask_mod(per_head, B=1, H=2, Sq=S, name="my window")
    attend = dense_eval(per_head, 1, 2, S)[0, 1]
    fig = r.plot(br=16, bc=16, head=1)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert "my window" in ax.get_title()
    pix, tiles = ax.images[0].get_array(), ax.images[1].get_array()
    assert np.array_equal(np.asarray(pix), np.where(attend, 2, 0))  # 1 pixel per element here
    want = r.mask.tile_classes(16, 16)[0, 1] == 1
    assert np.array_equal(~np.ma.getmaskarray(tiles), want)
    # into a given axis
    f2 = Figure()
    ax2 = f2.add_subplot(1, 2, 2)
    assert r.plot(ax2) is f2 and ax2.images
    # a mask no form holds: drawn exactly from its source
    d = fmsim.from_mask_mod(dilated, 1, 1, S)
    px = np.asarray(d.plot(br=16, bc=16).axes[0].images[0].get_array())
    assert np.array_equal(px, np.where(dense_eval(dilated, 1, 1, S)[0, 0], 2, 0))
    # short reprs naming the mask_mod
    assert len(repr(r)) < 200 and "my window" in repr(r) and "fits causal-1" in repr(r)
    assert len(repr(d)) < 200 and "'dilated'" in repr(d) and "does not fit" in repr(d)


def test_misfit_to_string_is_exact():
    S = 64
    d = fmsim.from_mask_mod(dilated, 1, 1, S)
    text = d.to_string(8, 8)
    want = exact_tiles(~dense_eval(dilated, 1, 1, S)[0, 0], 8, 8)
    rows = [l[1:-1] for l in text.splitlines() if l.startswith("|")]
    assert rows == ["".join(" ░█"[c] for c in row) for row in want]
    assert f"rho = {(want == 0).mean():.4f}" in text.splitlines()[0]
    # from check() of an array and of a file too
    arr = dense_eval(dilated, 1, 1, S)[0, 0]
    assert fmsim.check(arr).to_string(8, 8).splitlines()[1:] == text.splitlines()[1:]


def test_render_keywords_and_caption(tmp_path, monkeypatch):
    exe = fmsim_bin()
    skip_without_figures(exe)
    from fmsim import mask as M
    seen, real = [], subprocess.run

    def spy(cmd, **kw):
        seen.append(cmd)
        return real(cmd, **kw)
    monkeypatch.setattr(M.subprocess, "run", spy)

    def per_head_window(b, h, q, k):
        return (q >= k) & (q - k < 64 * (h + 1))
    r = fmsim.from_mask_mod(per_head_window, 1, 1, 512)
    out = tmp_path / "w.png"
    r.render(str(out), width_in=2, height_in=1.5, dpi=100)
    cmd = seen[-1]
    assert cmd[cmd.index("--width-in") + 1] == "2" and cmd[cmd.index("--height-in") + 1] == "1.5"
    assert cmd[cmd.index("--dpi") + 1] == "100"
    cap = cmd[cmd.index("--title") + 1]
    assert cap.startswith("per_head_window") and "intervals.npy" not in cap
    png = out.read_bytes()
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (200, 150)
    r.render(str(out), title="Mine")
    assert seen[-1][seen[-1].index("--title") + 1] == "Mine"
    r.render(str(out), title=None)
    assert "--no-title" in seen[-1]
    d = fmsim.from_mask_mod(dilated, 1, 1, 64)
    d.render(str(out))
    cap = seen[-1][seen[-1].index("--title") + 1]
    assert cap.startswith("dilated") and "mask.npy" not in cap


def test_predict_fields(tmp_path):
    exe = fmsim_bin()
    r = fmsim.from_mask_mod(lambda b, h, q, k: (q >= k) & (q - k < 1000), 1, 2, 4096)
    p = r.predict(gpu="h200-sm90", passes="both")
    iv, _ = r.to_paddle()
    np.save(tmp_path / "iv.npy", iv)
    cli = json.loads(subprocess.run([exe, "predict", "--mask", str(tmp_path / "iv.npy"), "--causal",
                                     "--heads", "2", "--pass", "both", "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    f, b = (x["tiles"][0] for x in cli["passes"])
    assert p.heads == 2 and p.profile == "h200-sm90"
    assert (p.time_ms, p.tflops, p.speedup_over_noskip) == pytest.approx(
        (f["time_ms"], f["tflops"], f["speedup_over_noskip"]))
    assert (p.backward_ms, p.backward_tflops) == pytest.approx((b["time_ms"], b["tflops"]))
    assert "TFLOP/s" in str(p)
    p8 = r.predict(heads=8)  # heads passed through: 4 x the work
    assert p8.heads == 8 and p8.time_ms > p.time_ms and p8.passes["fwd"]["items"] == 4 * p.passes["fwd"]["items"]
    with pytest.raises(fmsim.FmsimError, match="does not fit"):
        fmsim.from_mask_mod(dilated, 1, 1, 64).predict()


def test_additive_float_mask_mod():
    S = 128
    base = fmsim.from_mask_mod(lambda b, h, q, k: (q >= k) & (q - k < 9), 1, 1, S)
    for dt in (np.float32, np.float64, np.float16):
        add = fmsim.from_mask_mod(lambda b, h, q, k: np.where((q >= k) & (q - k < 9), 0, -np.inf).astype(dt),
                                  1, 1, S)
        assert add.fits and add.mask == base.mask and add.masked == base.masked
    big = fmsim.from_mask_mod(lambda b, h, q, k: np.where(q >= k, 0.0, -1e9), 1, 1, S)
    assert big.form == "causal-1"


def test_head_sharing_found_early_saves_evaluations():
    calls = {}

    def shared(b, h, q, k):
        calls[int(h)] = calls.get(int(h), 0) + q.shape[0]
        return (q >= k) & (q - k < 100)
    S, H = 1024, 16
    r = fmsim.from_mask_mod(shared, 1, H, S, chunk_rows=128)
    full = [h for h, n in calls.items() if n >= S]
    assert 0 in full and 1 in full and len(full) == 3  # heads 0, 1 and one random third
    assert sum(calls.values()) <= 3 * S + 2 * S + (H - 3) * 2 * 64  # the others only sampled
    calls.clear()
    v = fmsim.from_mask_mod(shared, 1, H, S, chunk_rows=128, verify_heads=True)
    assert all(calls[h] >= S for h in range(H))  # every head in full (head 0 also probed once)
    for k in ("masked", "misfits", "tiles", "advice", "memory", "h_mask", "shared_across_heads",
              "rows_without_visible_key", "masked_diagonal", "heads", "form"):
        assert getattr(r, k) == getattr(v, k), k
    assert np.array_equal(r.nruns, v.nruns) and np.array_equal(r.runs, v.runs)
    assert r.mask == v.mask and r.h_mask == 1 and r.heads == H


def test_head_sharing_still_finds_a_per_head_mask():
    S, H = 64, 6
    r = fmsim.from_mask_mod(per_head, 2, H, S, chunk_rows=16)
    assert r.h_mask == H and not r.shared_across_heads
    attend = dense_eval(per_head, 2, H, S)
    for b in range(2):
        for h in range(H):
            assert np.array_equal(r.mask.to_dense(b, h), attend[b, h])
    # a head that differs from the others (not head 0, 1 or the third) is caught by sampling rows
    odd = fmsim.from_mask_mod(lambda b, h, q, k: (q >= k) & ((h != 4) | (q - k < 3)), 1, H, S)
    assert odd.h_mask == H and odd.mask.to_dense(0, 4).sum() < odd.mask.to_dense(0, 0).sum()


def test_no_noise_at_interpreter_exit():
    # masks held by a module that the interpreter clears after fmsim's own (as a Jupyter
    # kernel or torch holds objects): their __del__ ran with fmsim._native already gone
    code = ("import ctypes, fmsim\n"
            "r = fmsim.from_mask_mod(lambda b, h, q, k: q >= k, 1, 2, 64)\n"
            "ctypes.zz_keep = [r, r.mask, r.subset, fmsim.from_paddle(r.intervals, True)]\n")
    p = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "", p.stderr
