#!/usr/bin/env python3
"""The cycles of partial tiles against unmasked ones, free of the position effect (issue 25).

    python3 bench/partial_tiles.py TRACE_DIR [TRACE_DIR ...] [--label L ...] [--json FILE]

Each TRACE_DIR is an instrumented run trace (`fmsim run --family F --instrument --out DIR`,
--pass both for the backward): summary.json, tiles.npy, columns.npy, tile_cycles.npy, and
with a backward tiles_bwd.npy, tile_cycles_bwd.npy at the backward's own tile. Per folder and
pass (fwd, and bwd where the trace has its cycles) it prints a markdown table of:

1. the mean and median cycles per visited tile by class (partial, unmasked; masked too when a
   noskip run visited masked tiles) and position in the tile's visited sequence: "only" (the
   sequence's one visited tile), "first", "middle", "last"; "all" is the class as a whole;
2. the partial tiles by cut kind, from columns.npy: "diagonal" (a causal mask's diagonal
   i == c_j cuts the tile's rows), "edges" (a column's interval bound, LTS, LTE, UTS or UTE,
   lies strictly inside (r0, r1)), "both", "other" (neither: a tile cut only between its
   columns, some fully masked and some not, e.g. a document boundary at a row-tile
   boundary; or a min/max-partial tile that is exactly uniform). The bounds are those of
   each column's masked runs: its two intervals merged where they overlap or touch, the
   causal triangle folded into the upper one (fm_effective_upper, core/fm_tile_rule.h);
   columns past Sk have none;
3. partial / unmasked at equal position (first against first, ...), the naive ratio (all
   partial / all unmasked) and the position-weighted one: the partial tiles' cycles over
   what unmasked tiles at the same positions cost (n_p x unmasked mean_p, summed over the
   positions that have both; "covered" is the share of partial tiles counted);
4. the share of the pass's cycles spent in partial tiles;
5. with several folders of one family and seqlen, a before/after table: the mean cycles of
   each folder's method per class and position, and each over the first folder's (the
   baseline: the first of the group on the command line).

The label of a folder is the --label given for it (one per folder, in order), else
summary.json's kernel.mask_method ("auto", "slices", "r2p", "words"), else the folder's name.

The sequences (kernels/fm_sm90_fwd.cuh, fm_sm90_bwd.cuh; both issue their visited tiles with
fmd::warp_compact, kernels/fm_device.cuh, in ascending index order):
  fwd  a work item is (b, h, row tile); its visited key tiles are issued in ascending
       key-tile order. A tile's cycles: clock64 between the consumers' release of its V
       stage and that of the tile before it on the same SM, so the first tile of an item
       carries the item switch (Q load, the previous item's epilogue).
  bwd  a work item is (b, h, key tile); its visited query tiles are issued in ascending
       row-tile order. A tile's cycles: clock64 between the consumers' releases of
       consecutive ring stages, so the first query tile of an item carries the item switch
       (K, V load, the previous item's dK, dV store).
tile_cycles*.npy and tiles*.npy are (B, H, Tr, Tc) (core/fm_run_trace.c, write_pass_arrays:
the kernel's record per (b, h) pair, int64 cycles; classes broadcast from the mask sets when
they are the CPU's); columns.npy is (nb, nh, Sk, 4) int32 (core/fm_trace.c). Skipped tiles
have 0 cycles. Bad input: one line on stderr, exit status 2.
"""
import argparse
import json
import os
import sys
import atomic  # bench/atomic.py, beside this file

try:
    import numpy as np
except ImportError:  # the error path below says so in one line
    np = None

MASKED, PARTIAL, UNMASKED = 0, 1, 2  # core/fm_tile_rule.h, FM_TILE_*
CLASS_NAMES = {MASKED: "masked", PARTIAL: "partial", UNMASKED: "unmasked"}
POSITIONS = ("only", "first", "middle", "last")
ONLY, FIRST, MIDDLE, LAST = range(4)
CUTS = ("diagonal", "edges", "both", "other")
EDGE, DIAG = 1, 2  # bound tags
EXIT_BAD = 2  # bad input: as the C commands and the other bench scripts (docs/DESIGN.md, "Style")
ORDER = {"fwd": "per (b, h, row tile): key tiles ascending",
         "bwd": "per (b, h, key tile): query row tiles ascending"}


class BadInput(Exception):
    pass


# ------------------------------------------------------------------ reading

def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: {e.strerror if isinstance(e, OSError) else e}")


def load_npy(path):
    if not os.path.isfile(path):
        raise BadInput(f"{path}: missing")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: not a readable .npy file ({e})")


def pass_section(summary, name):
    """The summary's object for a pass: the top level (fwd) or "backward"."""
    return summary if name == "fwd" else summary.get("backward")


def has_cycles(d, summary, name):
    """True when the pass has per-tile cycles; BadInput when summary.json says so but the file is missing."""
    sec = pass_section(summary, name)
    if not sec:
        return False
    fname = "tile_cycles.npy" if name == "fwd" else "tile_cycles_bwd.npy"
    claimed = bool((sec.get("tiles_record") or {}).get("cycles"))
    there = os.path.isfile(os.path.join(d, fname))
    if claimed and not there:
        raise BadInput(f"{d}: {fname} is missing, though summary.json says the run recorded cycles")
    return there


def geometry(d, summary, name):
    sec = pass_section(summary, name)
    try:
        g = dict(B=int(summary["batch"]), H=int(summary["heads"]), sq=int(summary["seqlen_q"]),
                 sk=int(summary["seqlen_k"]), causal=bool(summary["causal"]),
                 br=int(sec["br"]), bc=int(sec["bc"]))
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"{d}/summary.json: no usable {e} for the {name} pass")
    g["tr"], g["tc"] = -(-g["sq"] // g["br"]), -(-g["sk"] // g["bc"])
    return g


def check_shapes(d, name, g, cls, cyc, columns):
    want = (g["B"], g["H"], g["tr"], g["tc"])
    if cyc.ndim != 4 or tuple(cyc.shape) != want:
        raise BadInput(f"{d}: {name} cycles have shape {tuple(cyc.shape)}, summary.json says {want} "
                       f"(B, H, Tr, Tc)")
    if cls.ndim != 4 or cls.shape[2:] != cyc.shape[2:] or cls.shape[0] not in (1, g["B"]) \
            or cls.shape[1] not in (1, g["H"]):
        raise BadInput(f"{d}: {name} classes of shape {tuple(cls.shape)} do not match the cycles' {want}")
    nb, nh, sk, four = columns.shape if columns.ndim == 4 else (0, 0, 0, 0)
    if four != 4 or sk != g["sk"] or nb not in (1, g["B"]) or nh not in (1, g["H"]):
        raise BadInput(f"{d}: columns.npy has shape {tuple(columns.shape)}, expected (nb, nh, {g['sk']}, 4) "
                       f"with nb in (1, {g['B']}), nh in (1, {g['H']})")


def read_pass(d, summary, name, columns):
    sfx = "" if name == "fwd" else "_bwd"
    g = geometry(d, summary, name)
    cls = load_npy(os.path.join(d, f"tiles{sfx}.npy"))
    cyc = load_npy(os.path.join(d, f"tile_cycles{sfx}.npy"))
    check_shapes(d, name, g, cls, cyc, columns)
    cls = np.broadcast_to(cls, cyc.shape)
    bad = int(np.count_nonzero((cls != MASKED) & (cyc <= 0)))
    if bad:
        raise BadInput(f"{d}: {bad} visited {name} tiles have no cycles (<= 0): not an instrumented record")
    return dict(name=name, geom=g, cls=cls, cyc=cyc.astype(np.int64, copy=False))


def folder_label(d, summary, given):
    k = summary.get("kernel") or {}
    return given or k.get("mask_method") or os.path.basename(os.path.normpath(d))


def read_folder(d, given_label):
    if not os.path.isdir(d):
        raise BadInput(f"{d}: not a folder")
    summary = load_json(os.path.join(d, "summary.json"))
    columns = load_npy(os.path.join(d, "columns.npy"))
    names = [n for n in ("fwd", "bwd") if has_cycles(d, summary, n)]
    if not names:
        raise BadInput(f"{d}: not instrumented (no tile_cycles.npy; run `fmsim run ... --instrument`)")
    return dict(dir=d, summary=summary, columns=columns, label=folder_label(d, summary, given_label),
                family=summary.get("family", "?"), seqlen=summary.get("seqlen", summary.get("seqlen_q")),
                passes=[read_pass(d, summary, n, columns) for n in names])


# ------------------------------------------------------------------ positions

def positions(visited, axis):
    """Position code of every visited tile along `axis` (ascending index order); -1 elsewhere."""
    idx = np.cumsum(visited, axis=axis, dtype=np.int32)
    n = np.take(idx, [-1], axis=axis)
    pos = np.where(idx == n, LAST, MIDDLE).astype(np.int8)
    pos[idx == 1] = FIRST
    pos[np.broadcast_to(n == 1, pos.shape)] = ONLY
    pos[~visited] = -1
    return pos


# ------------------------------------------------------------------ cut kinds

def column_bounds(columns, g):
    """Per column (nsets, Sk) the four row bounds and their tags (0 none, EDGE, DIAG): the
    masked runs' ends, the two intervals merged where they touch, the causal triangle folded
    into the upper one as fm_effective_upper (core/fm_tile_rule.h) does."""
    v = columns.reshape(-1, g["sk"], 4).astype(np.int64)
    lts, lte, uts, ute = (v[..., k] for k in range(4))
    us, ue, ue_tag = uts, ute, np.full(ute.shape, EDGE, np.int8)
    if g["causal"]:
        c = np.clip(np.arange(g["sk"]) + g["sq"] - g["sk"], 0, g["sq"])
        own = (uts < ute) & (ute > c)
        us, ue = np.zeros_like(uts), np.where(own, ute, c)
        ue_tag = np.where(own, EDGE, DIAG).astype(np.int8)
    lo, up = lts < lte, us < ue
    merged = lo & up & (lts <= ue) & (us <= lte)
    end_tag = np.where(ue >= lte, ue_tag, EDGE)
    vals = [np.where(merged, np.minimum(lts, us), lts), np.where(merged, np.maximum(lte, ue), lte), us, ue]
    tags = [np.where(lo | merged, EDGE, 0), np.where(merged, end_tag, np.where(lo, EDGE, 0)),
            np.where(up & ~merged, EDGE, 0), np.where(up & ~merged, ue_tag, 0)]
    return np.stack(vals, -1), np.stack(tags, -1).astype(np.int8)


def bound_keys(vals, tags, tag, g):
    """Sorted unique keys (set * Tc + key tile) * (Sq + 1) + bound of the bounds with `tag`
    that can lie strictly inside a row tile (0 < bound < Sq)."""
    tile = (np.arange(vals.shape[0])[:, None] * g["tc"] + np.arange(g["sk"])[None, :] // g["bc"])
    keys = tile[..., None] * (g["sq"] + 1) + vals
    sel = (tags == tag) & (vals > 0) & (vals < g["sq"])
    return np.unique(keys[sel])


def any_inside(keys, group, r0, r1, sq):
    """Per query: a key of its group lies strictly inside (r0, r1)."""
    if keys.size == 0:
        return np.zeros(group.shape, bool)
    base = group * (sq + 1)
    i = np.searchsorted(keys, base + r0, side="right")
    return (i < keys.size) & (keys[np.minimum(i, keys.size - 1)] < base + r1)


def cut_kinds(p, columns):
    """The cut kind (index into CUTS) of every visited partial tile, in np.nonzero order."""
    g = p["geom"]
    b, h, rt, ct = np.nonzero((p["cls"] == PARTIAL) & p["visited"])
    nb, nh = columns.shape[:2]
    group = ((b if nb > 1 else 0) * nh + (h if nh > 1 else 0)) * g["tc"] + ct
    r0 = rt.astype(np.int64) * g["br"]
    r1 = np.minimum(r0 + g["br"], g["sq"])
    vals, tags = column_bounds(columns, g)
    diag = any_inside(bound_keys(vals, tags, DIAG, g), group, r0, r1, g["sq"])
    edge = any_inside(bound_keys(vals, tags, EDGE, g), group, r0, r1, g["sq"])
    return np.where(diag & edge, 2, np.where(diag, 0, np.where(edge, 1, 3))).astype(np.int8)


# ------------------------------------------------------------------ statistics

def stats(values):
    n = int(values.size)
    if n == 0:
        return dict(count=0, mean=None, median=None, sum=0)
    return dict(count=n, mean=float(values.mean()), median=float(np.median(values)), sum=int(values.sum()))


def by_position(cyc, pos):
    out = {name: stats(cyc[pos == k]) for k, name in enumerate(POSITIONS)}
    out["all"] = stats(cyc)
    return out


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def weighted_ratio(part, unm):
    """Partial cycles over what as many unmasked tiles at the same positions cost; covered: the
    share of partial tiles at positions that have unmasked ones."""
    num = den = n = 0
    for k in POSITIONS:
        if part[k]["count"] and unm[k]["count"]:
            num, den, n = num + part[k]["sum"], den + part[k]["count"] * unm[k]["mean"], n + part[k]["count"]
    total = part["all"]["count"]
    return dict(ratio=num / den if den else None, covered=n / total if total else None)


def ratios(groups):
    part, unm = groups["partial"], groups["unmasked"]
    eq = {k: dict(mean=ratio(part[k]["mean"], unm[k]["mean"]), median=ratio(part[k]["median"], unm[k]["median"]))
          for k in POSITIONS}
    naive = dict(mean=ratio(part["all"]["mean"], unm["all"]["mean"]),
                 median=ratio(part["all"]["median"], unm["all"]["median"]))
    return dict(equal_position=eq, naive=naive, position_weighted=weighted_ratio(part, unm))


def cut_stats(p, columns, unm):
    sel = (p["cls"] == PARTIAL) & p["visited"]
    kind, cyc, pos = cut_kinds(p, columns), p["cyc"][sel], p["pos"][sel]
    out = {}
    for k, name in enumerate(CUTS):
        groups = by_position(cyc[kind == k], pos[kind == k])
        out[name] = dict(groups, vs_unmasked=weighted_ratio(groups, unm))
    return out


def analyze_pass(p, columns):
    p["visited"] = (p["cls"] != MASKED) | (p["cyc"] > 0)
    p["pos"] = positions(p["visited"], axis=3 if p["name"] == "fwd" else 2)
    classes = [PARTIAL, UNMASKED] + ([MASKED] if np.any(p["visited"] & (p["cls"] == MASKED)) else [])
    groups = {}
    for c in classes:
        sel = p["visited"] & (p["cls"] == c)
        groups[CLASS_NAMES[c]] = by_position(p["cyc"][sel], p["pos"][sel])
    total = int(p["cyc"][p["visited"]].sum())
    g = p["geom"]
    return dict(br=g["br"], bc=g["bc"], tiles=int(p["cyc"].size), visited=int(p["visited"].sum()),
                order=ORDER[p["name"]], groups=groups, ratios=ratios(groups),
                partial_share=groups["partial"]["all"]["sum"] / total if total else None,
                cuts=cut_stats(p, columns, groups["unmasked"]))


def analyze_folder(f):
    passes = {p["name"]: analyze_pass(p, f["columns"]) for p in f["passes"]}
    return dict(dir=f["dir"], label=f["label"], family=f["family"], seqlen=f["seqlen"],
                causal=bool(f["summary"].get("causal")), mask_method=(f["summary"].get("kernel") or {}).get(
                    "mask_method"), passes=passes)


# ------------------------------------------------------------------ before / after

def comparison_groups(results):
    groups = {}
    for r in results:
        groups.setdefault((r["family"], r["seqlen"]), []).append(r)
    out = []
    for (fam, S), rs in groups.items():
        if len(rs) < 2:
            continue
        labels = [r["label"] for r in rs]
        if len(set(labels)) != len(labels):
            raise BadInput(f"two folders of {fam} S={S} carry the same method label; tell them apart with --label")
        out.append((fam, S, rs))
    return out


def compare(results):
    rows = []
    for fam, S, rs in comparison_groups(results):
        base = rs[0]
        for pname in ("fwd", "bwd"):
            if not all(pname in r["passes"] for r in rs):
                continue
            for cls in ("partial", "unmasked"):
                for pos in POSITIONS + ("all",):
                    means = {r["label"]: r["passes"][pname]["groups"][cls][pos]["mean"] for r in rs}
                    rows.append({"family": fam, "seqlen": S, "pass": pname, "cls": cls, "position": pos,
                                 "baseline": base["label"], "mean": means,
                                 "ratio": {k: ratio(v, means[base["label"]]) for k, v in means.items()}})
    return rows


# ------------------------------------------------------------------ markdown

def num(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)


def rat(x):
    return num(x, "{:.3f}")


def md_groups(res):
    lines = ["| class | position | tiles | mean cycles | median cycles |", "|---|---|---|---|---|"]
    for cls, g in res["groups"].items():
        for pos in POSITIONS + ("all",):
            s = g[pos]
            lines.append(f"| {cls} | {pos} | {s['count']} | {num(s['mean'])} | {num(s['median'])} |")
    return lines


def md_ratios(res):
    part, unm, r = res["groups"]["partial"], res["groups"]["unmasked"], res["ratios"]
    lines = ["| position | partial mean | unmasked mean | partial / unmasked (mean) | (median) |",
             "|---|---|---|---|---|"]
    for pos in POSITIONS:
        e = r["equal_position"][pos]
        lines.append(f"| {pos} | {num(part[pos]['mean'])} | {num(unm[pos]['mean'])} | {rat(e['mean'])} | "
                     f"{rat(e['median'])} |")
    lines.append(f"| all (naive) | {num(part['all']['mean'])} | {num(unm['all']['mean'])} | "
                 f"{rat(r['naive']['mean'])} | {rat(r['naive']['median'])} |")
    w = r["position_weighted"]
    lines.append(f"| position-weighted (covers {num(pct(w['covered']), '{:.1f}')}% of partial) | | | "
                 f"{rat(w['ratio'])} | |")
    return lines


def pct(x):
    return None if x is None else 100.0 * x


def md_cuts(res):
    lines = ["| cut | tiles | mean | median | " + " | ".join(f"mean {p}" for p in POSITIONS) +
             " | vs unmasked (position-weighted) |", "|---" * (5 + len(POSITIONS)) + "|"]
    for name, c in res["cuts"].items():
        if c["all"]["count"]:
            lines.append(f"| {name} | {c['all']['count']} | {num(c['all']['mean'])} | {num(c['all']['median'])} | " +
                         " | ".join(num(c[p]["mean"]) for p in POSITIONS) + f" | {rat(c['vs_unmasked']['ratio'])} |")
    return lines + ["", "Cut kinds: diagonal, a causal mask's diagonal crosses the tile's rows; edges, an interval "
                        "bound does; other, neither (cut only between columns, or uniform by the exact mask)."]


def md_pass(r, pname, res):
    head = [f"## {r['family']} S={r['seqlen']}, {r['label']} ({r['dir']}): {pname}", "",
            f"Tiles {res['br']} x {res['bc']}, {res['visited']} visited of {res['tiles']}; order {res['order']}. "
            f"Partial tiles' share of the pass's cycles: {num(pct(res['partial_share']), '{:.2f}')}%.", ""]
    return head + md_groups(res) + [""] + md_ratios(res) + [""] + md_cuts(res) + [""]


def md_compare(rows):
    lines = []
    for key in dict.fromkeys((r["family"], r["seqlen"], r["pass"]) for r in rows):
        rs = [r for r in rows if (r["family"], r["seqlen"], r["pass"]) == key]
        labels = list(rs[0]["mean"])
        others = labels[1:]
        lines += [f"## Before / after: {key[0]} S={key[1]}, {key[2]} (baseline {labels[0]})", "",
                  "| class | position | " + " | ".join(f"{l} mean" for l in labels) + " | " +
                  " | ".join(f"{l} / {labels[0]}" for l in others) + " |",
                  "|---" * (2 + len(labels) + len(others)) + "|"]
        for r in rs:
            lines.append(f"| {r['cls']} | {r['position']} | " + " | ".join(num(r["mean"][l]) for l in labels) +
                         " | " + " | ".join(rat(r["ratio"][l]) for l in others) + " |")
        lines.append("")
    return lines


def markdown(results, rows):
    lines = []
    for r in results:
        for pname, res in r["passes"].items():
            lines += md_pass(r, pname, res)
    return "\n".join(lines + md_compare(rows))


# ------------------------------------------------------------------ main

def save_json(path, doc):
    try:
        atomic.save_json(path, doc)
    except OSError as e:
        raise BadInput(f"{path}: cannot write ({e.strerror})")


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="TRACE_DIR", help="instrumented run trace folders")
    ap.add_argument("--label", action="append", default=[],
                    help="a folder's method label when summary.json has no kernel.mask_method "
                         "(repeatable: one per folder, in order)")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON (atomically)")
    a = ap.parse_args(argv)
    if len(a.label) > len(a.dirs):
        ap.error(f"{len(a.label)} labels for {len(a.dirs)} folders")
    return a


def run(a):
    if np is None:
        raise BadInput("numpy is not installed (python3 -m pip install numpy)")
    labels = a.label + [None] * (len(a.dirs) - len(a.label))
    results = [analyze_folder(read_folder(d, l)) for d, l in zip(a.dirs, labels)]
    rows = compare(results)
    print(markdown(results, rows))
    if a.json:
        save_json(a.json, dict(format="fmsim-partial-tiles", version=1, classes=CLASS_NAMES, positions=POSITIONS,
                               cuts=CUTS, folders=results, compare=rows))


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    try:
        run(a)
    except BadInput as e:
        print(f"partial_tiles: {e}", file=sys.stderr)
        return EXIT_BAD
    return 0


if __name__ == "__main__":
    sys.exit(main())
