#!/usr/bin/env python3
"""The curated table of the linear-RNN benchmark (bench/linrnn_bench.py's JSON; no GPU needed).

    python3 bench/linrnn_table.py linrnn.json [--figure linrnn.png] > bench/results/linrnn-DEVICE.md

From one run (every figure divides two times of that run, measured interleaved under
fmsim.protocol): ns per token and head of every implementation (sustained; burst ones stay
in the JSON), fla's chunk_simple_gla (cu_seqlens) over fmsim's skip kernel, noskip and
causal-only over skip, the outputs' checks; then the proposal's throughput criteria
(docs/LINRNN.md: skip against noskip at mean document length 64 and 16) and issue 23's bars
against fla, each with the numbers that decide it. --figure draws ns per token and head and
the two speed-ups against the mean document length, fixed and drawn lengths apart, the bars
as lines (written to a temporary file, then renamed into place).
"""
import argparse
import json
import os
import sys
from atomic import replace_with  # bench/atomic.py, beside this file

from linrnn_cases import PRODUCTION, parse_id, prod_id

PEER = "fla-simple-gla"  # chunk_simple_gla with cu_seqlens: the like-for-like peer of the bars
COLUMNS = (("fmsim-skip", "fmsim skip"), ("fmsim-causal", "fmsim causal"), ("fmsim-noskip", "fmsim noskip"),
           (PEER, "fla simple_gla (cu_seqlens)"), ("fla-simple-gla-separate", "fla simple_gla (separate)"),
           ("fla-gla", "fla gla"))
PROPOSAL = {64: (1.4, 1.1), 16: (1.8, None)}  # noskip / skip above the first; failure below the second
SHORT_MEAN, LONG_MEAN = 64, 2048                # the bars: 2x fla at mean <= 64; no slower at >= 2048
SHORT_GAIN = 2.0


def ns(rec: dict, impl: str):
    """The implementation's sustained ns per token and head in the record, or None."""
    m = rec.get("impls", {}).get(impl, {}).get("sustained")
    return m["ns_per_token_head"] if m else None


def ratio(rec: dict, slow: str, fast: str):
    a, b = ns(rec, slow), ns(rec, fast)
    return a / b if a and b else None


def fmt(x, spec=".3f"):
    return format(x, spec) if x is not None else "-"


def times(x):
    return f"{x:.2f}x" if x is not None else "-"


def packed(doc: dict) -> list:
    """(kind, nominal length, record) of the packed cases, in the run's order."""
    return [(p[0], p[1], r) for r in doc["records"] for p in [parse_id(r["id"])] if p]


def speed_table(doc: dict) -> list:
    hdr = ["case", "docs", "mean length"] + [n for _, n in COLUMNS] + \
          ["fla / skip", "noskip / skip", "causal / skip", "skip == noskip", "max rel. diff vs fla"]
    out = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for r in doc["records"]:
        if "impls" not in r:
            out.append(f"| {r['id']} | " + (r.get("skipped") or r.get("error") or "-") + " |")
            continue
        c = r.get("checks", {})
        out.append("| " + " | ".join(
            [r["id"], str(r["ndocs"]), fmt(r["mean_len"], ".1f")] + [fmt(ns(r, i)) for i, _ in COLUMNS] +
            [fmt(ratio(r, PEER, "fmsim-skip"), ".2f"), fmt(ratio(r, "fmsim-noskip", "fmsim-skip"), ".2f"),
             fmt(ratio(r, "fmsim-causal", "fmsim-skip"), ".2f"),
             {True: "yes", False: "**no**"}.get(c.get("skip_equals_noskip"), "-"),
             fmt(c.get(f"rel_err_vs_{PEER}"), ".4f")]) + " |")
    return out


def verdict(ok):
    return "not measured" if ok is None else "met" if ok else "**not met**"


def proposal_rows(doc: dict) -> list:
    """(criterion, measured, verdict): skip's gain over noskip at mean 64 and 16, fixed lengths
    deciding, drawn ones beside."""
    rows = []
    for L, (bar, fail) in PROPOSAL.items():
        got = {kind: ratio(r, "fmsim-noskip", "fmsim-skip") for kind, n, r in packed(doc) if n == L}
        x = got.get("fixed")
        v = "not measured" if x is None else "confirmed" if x > bar else \
            "refuted" if fail is not None and x < fail else "inconclusive"
        rows.append((f"throughput gain over noskip at mean length {L}: above {bar}x"
                     + (f" (failure below {fail}x)" if fail else ""),
                     f"fixed {times(x)}, drawn {times(got.get('drawn'))}", v))
    return rows


def bar_rows(doc: dict) -> list:
    """(bar, measured, verdict) of issue 23's bars against fla's chunk_simple_gla."""
    rows = []
    short = [(r["id"], ratio(r, PEER, "fmsim-skip")) for kind, n, r in packed(doc) if kind != "one" and n <= SHORT_MEAN]
    long_ = [(r["id"], ratio(r, PEER, "fmsim-skip")) for kind, n, r in packed(doc) if n >= LONG_MEAN]
    by_id = {r["id"]: r for r in doc["records"]}
    prod = []
    for shape in PRODUCTION:
        r = by_id.get(prod_id(*shape))
        prod.append((prod_id(*shape), ratio(r, PEER, "fmsim-skip") if r and "impls" in r else None,
                     (r.get("skipped") or r.get("error")) if r else "not run"))
    for what, cases, lo in ((f"at least {SHORT_GAIN:g}x faster at mean length <= {SHORT_MEAN}", short, SHORT_GAIN),
                            (f"no slower at mean length >= {LONG_MEAN}", long_, 1.0)):
        got = [x for _, x in cases if x is not None]
        rows.append((what, "; ".join(f"{i} {times(x)}" for i, x in cases) or "-",
                     verdict(all(x >= lo for x in got) if got else None)))
    got = [x for _, x, _ in prod if x is not None]
    rows.append((f"no slower on fla's {len(PRODUCTION)} production shapes",
                 "; ".join(f"{i} {times(x)}" if x is not None else f"{i} {why}" for i, x, why in prod),
                 verdict(all(x >= 1 for x in got) if len(got) == len(prod) else False if any(x < 1 for x in got)
                         else None)))
    return rows


def render(doc: dict, figure: str = None) -> str:
    commands = doc.get("commands") or ([doc["command"]] if doc.get("command") else [])
    out = [f"# The linear-RNN kernel against flash-linear-attention on the {doc['device']}", "",
           f"- **Device**: {doc['device']}; torch {doc.get('torch') or '-'}.",
           f"- **Commits**: {', '.join(doc.get('commits') or ([doc['commit']] if doc.get('commit') else [])) or '?'}.",
           "- **Commands**: " + ("; ".join(f"`{c}`" for c in commands) or "?") +
           "; this table: `python3 bench/linrnn_table.py JSON`.",
           "- **Protocol**: fmsim.protocol (docs/DESIGN.md, \"How we measure\"): "
           + ", ".join(f"{k} {v}" for k, v in doc.get("protocol", {}).items()) + "; sustained figures below.",
           f"- **Useful work** (TFLOP/s in the JSON): {doc.get('useful_flops', '-')}.", "",
           "## ns per token and head (sustained)", "",
           "fla / skip above 1: fmsim faster. `fla gla` does more work (a decay per key dimension).", ""]
    out += speed_table(doc) + [""]
    if figure:
        out += [f"![ns per token and head, and the speed-ups]({os.path.basename(figure)})", ""]
    out += ["## The proposal's throughput criteria (skip against noskip, one kernel)", "",
            "| criterion | measured | verdict |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in proposal_rows(doc)] + [""]
    out += ["## Issue 23's bars against fla (chunk_simple_gla with cu_seqlens; fla / fmsim skip)", "",
            "| bar | measured | verdict |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in bar_rows(doc)]
    return "\n".join(out) + "\n"


def draw(doc: dict, path: str) -> None:
    """ns per token and head (left) and fla / skip, noskip / skip (right) against the mean document
    length, fixed lengths solid and drawn ones dashed; into path through a temporary file."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind, style in (("fixed", "-o"), ("drawn", "--s")):
        pts = sorted((r["mean_len"], r) for k, _, r in packed(doc) if k == kind)
        if not pts:
            continue
        xs = [x for x, _ in pts]
        for k, (impl, name) in enumerate(COLUMNS[:4]):  # one colour an implementation, one style a kind
            ys = [ns(r, impl) for _, r in pts]
            if any(y is not None for y in ys):
                a.plot(xs, [y if y is not None else float("nan") for y in ys], style, color=f"C{k}",
                       label=f"{name}, {kind}", ms=4)
        for (slow, fast), name, colour in (((PEER, "fmsim-skip"), "fla / skip", "C3"),
                                           (("fmsim-noskip", "fmsim-skip"), "noskip / skip", "C2")):
            b.plot(xs, [ratio(r, slow, fast) or float("nan") for _, r in pts], style, color=colour,
                   label=f"{name}, {kind}", ms=4)
    b.axhline(SHORT_GAIN, color="grey", lw=0.8, ls=":")
    b.axhline(1.0, color="black", lw=0.8)
    for L, (bar, _) in PROPOSAL.items():
        b.plot([L], [bar], "k^", ms=7)
    for ax, ylabel in ((a, "ns per token and head (sustained)"), (b, "speed-up (x)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("mean document length (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    b.set_title(f"dotted: the {SHORT_GAIN:g}x bar against fla; triangles: the proposal's", fontsize=8)
    fig.suptitle(f"fmsim's linear-RNN kernel against flash-linear-attention, {doc['device']}", fontsize=10)
    fig.tight_layout()
    try:
        replace_with(path, lambda f: fig.savefig(f, format="png", dpi=110), binary=True)
    finally:
        plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", help="bench/linrnn_bench.py's output")
    ap.add_argument("--figure", help="a PNG to draw (its name goes into the table)")
    args = ap.parse_args()
    try:
        with open(args.json) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"linrnn_table: {args.json}: {e}", file=sys.stderr)
        return 2
    if doc.get("format") != "fmsim-linrnn-bench":
        print(f"linrnn_table: {args.json}: not bench/linrnn_bench.py's JSON (format {doc.get('format')!r})",
              file=sys.stderr)
        return 2
    if args.figure:
        try:
            draw(doc, args.figure)
        except OSError as e:
            print(f"linrnn_table: {args.figure}: cannot write ({e.strerror or e})", file=sys.stderr)
            return 2
    sys.stdout.write(render(doc, args.figure))
    return 0


if __name__ == "__main__":
    sys.exit(main())
