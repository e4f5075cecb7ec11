#!/usr/bin/env python3
"""Joins the scenario runs of `fmsim bench` (under DIR) into one table of the C
harness's figures and checks the issues' bars on them, read from a data file
(bench/bars.json unless --bars names another). fmsim against its peers is timed in
one process under the one protocol by bench/protocol_bench.py, whose tables stand
on their own (docs/DESIGN.md, "How we measure"); this tool keeps what only the C
harness measures: the no-skip speed-up, the instrumentation overhead, the sweep.

`fmsim bench --out DIR` writes two scenario runs: DIR/paper-kernel-table/
(index.json: one row per case, with one record per kernel: time, TFLOP/s by
the paper's count at the kernel's own tile, the no-skip time and speed-up, the
instrumented overhead and classes, bytes; run.json: the device and settings)
and DIR/sparsity-sweep/ (tables/fit.csv: time = a + b (1 - rho) per kernel and
family). Per case: each kernel's time and TFLOP/s, the skip speed-up next to
1/(1-rho), the instrumentation overhead; the same again for the backward (each
kernel record's "bwd": TFLOP/s by 2.5 times the forward's count) when the bench
ran it; the sweep's fit; the bars. Writes DIR/merged.json and DIR/merged.txt
(atomically). Standard library only.

    python3 bench/merge.py DIR [--bars BARS.json]
"""
import csv
import json
import math
import os
import sys
from atomic import save_text  # bench/atomic.py, beside this file

TABLE = "paper-kernel-table"
SWEEP = "sparsity-sweep"
BARS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bars.json")
METRICS = ("tflops", "over_own_full", "instrumentation_overhead", "cases_run", "sweep_r2")
OPS = {">=": lambda v, x: v >= x, "<=": lambda v, x: v <= x, "<": lambda v, x: v < x, ">": lambda v, x: v > x}


def load(path):
    with open(path) as f:
        return json.load(f)


def num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def fmt(x, spec, width):
    x = num(x)
    return format(x, spec).rjust(width) if x is not None else "-".rjust(width)


def ratio(a, b):
    a, b = num(a), num(b)
    return a / b if a is not None and b else None


PASS_KEYS = dict(br="br", ms="time_ms", tflops="tflops", rho="sparsity", status="status",
                 noskip_ms="noskip_ms", speedup="speedup_skip_over_noskip",
                 ideal_speedup="ideal_speedup", instrumentation_overhead="instrumentation_overhead",
                 class_mismatches="class_mismatches")


def kernel_cols(c, kernels):
    """The case's fmsim figures per kernel name: the forward's, and the backward's under
    "bwd" (None when the bench did not run it)."""
    by = {k.get("kernel"): k for k in c.get("kernels", [])}
    out = {}
    for name in kernels:
        k = by.get(name) or {}
        out[name] = {key: k.get(src) for key, src in PASS_KEYS.items()}
        b = k.get("bwd")
        out[name]["bwd"] = {key: b.get(src) for key, src in PASS_KEYS.items()} if b else None
    return out


def read_fits(bdir):
    path = os.path.join(bdir, SWEEP, "tables", "fit.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [dict(kernel=r["kernel"], family=r["family"], n=r["n"], a=r["a (ms)"],
                     b=r["b (ms)"], r2=r["R^2"]) for r in csv.DictReader(f)]


def figures_of(row, name, bwd):
    """A kernel's figures for one pass of a row ({} when the pass did not run)."""
    f = row["fmsim"][name]
    return (f["bwd"] or {}) if bwd else f


def full_tflops(rows, r, name, bwd=False):
    for x in rows:
        if x["family"] == "full" and x["seqlen"] == r["seqlen"] and x["head_dim"] == r["head_dim"]:
            return num(figures_of(x, name, bwd).get("tflops"))
    return None


def merge(cases, kernels):
    return [dict(id=c["id"], family=c["family"], seqlen=c["seqlen"], head_dim=c["head_dim"],
                 rho_128=c.get("sparsity_128"), fmsim=kernel_cols(c, kernels)) for c in cases]


class BarsError(Exception):
    pass


def load_bars(path):
    """The bars of a bars file (bench/bars.json's layout), checked: BarsError says what is wrong."""
    try:
        doc = load(path)
    except (OSError, ValueError) as e:
        raise BarsError("%s: %s" % (path, e))
    if not isinstance(doc, dict) or doc.get("format") != "fmsim-bars" or doc.get("version") != 1:
        raise BarsError("%s: not an fmsim-bars file of version 1" % path)
    bars = doc.get("bars")
    if not isinstance(bars, list) or not bars:
        raise BarsError("%s: no bars" % path)
    for i, b in enumerate(bars):
        where = "%s: bar %d" % (path, i + 1)
        if not isinstance(b, dict) or not isinstance(b.get("what"), str):
            raise BarsError("%s: expected an object with 'what'" % where)
        if b.get("pass") not in ("fwd", "bwd"):
            raise BarsError("%s: pass %r: expected fwd or bwd" % (where, b.get("pass")))
        if b.get("metric") not in METRICS:
            raise BarsError("%s: metric %r: expected one of %s" % (where, b.get("metric"), ", ".join(METRICS)))
        ks = b.get("kernels")
        if not isinstance(ks, list) or not ks or not all(isinstance(k, str) for k in ks):
            raise BarsError("%s: kernels: expected a list of names (or [\"*\"])" % where)
        if b["metric"] != "cases_run" and (b.get("op") not in OPS or num(b.get("value")) is None):
            raise BarsError("%s: expected op (one of %s) and a numeric value" % (where, " ".join(OPS)))
    return bars


def bar_rows(rows, bar):
    """The rows a bar is about: its head dim, families, lengths."""
    out = []
    for r in rows:
        if "head_dim" in bar and r["head_dim"] != bar["head_dim"]:
            continue
        if "families" in bar and r["family"] not in bar["families"]:
            continue
        if r["family"] in bar.get("not_families", ()):
            continue
        if "seqlens" in bar and r["seqlen"] not in bar["seqlens"]:
            continue
        if r["seqlen"] < bar.get("min_seqlen", 0):
            continue
        out.append(r)
    return out


def has_bwd(rows, name):
    return any((r["fmsim"][name]["bwd"] or {}).get("br") for r in rows)


def checks(rows, kernels, fits, bars):
    """Every bar on every kernel it names: one record (check, case, value, ok) per case,
    per sweep family or per kernel (cases_run)."""
    out = []
    for bar in bars:
        bwd = bar["pass"] == "bwd"
        for name in kernels:
            if "*" not in bar["kernels"] and name not in bar["kernels"]:
                continue
            if bwd and not has_bwd(rows, name):
                continue
            check = "%s%s: %s" % (name, " bwd" if bwd else "", bar["what"])
            ok = (lambda v: v is not None and OPS[bar["op"]](v, bar["value"])) if "op" in bar else None
            m = bar["metric"]
            if m == "cases_run":
                ran = [r for r in rows if num(figures_of(r, name, bwd).get("ms"))]
                out.append(dict(check=check, case="%d of %d" % (len(ran), len(rows)), value=len(ran),
                                ok=len(ran) == len(rows)))
            elif m == "sweep_r2":
                for f in fits:
                    if f["kernel"] == name:
                        v = num(float(f["r2"])) if f["r2"] not in ("", "-") else None
                        out.append(dict(check=check, case="sweep " + f["family"], value=v, ok=ok(v)))
            else:
                for r in bar_rows(rows, bar):
                    f = figures_of(r, name, bwd)
                    if m == "over_own_full":
                        v = ratio(f.get("tflops"), full_tflops(rows, r, name, bwd))
                    else:
                        v = num(f.get(m))
                        if m == "instrumentation_overhead" and v is None:
                            continue  # not measured: no figure to hold to the bar
                    out.append(dict(check=check, case=r["id"], value=v, ok=bool(ok(v))))
    return out


def case_table(rows, kernels, bwd=False):
    """One line per case for one pass: each kernel's time and TFLOP/s, and the first
    kernel's skip speed-up beside 1/(1-rho) and instrumentation overhead."""
    head = "%-4s %-7s %-22s %6s" % ("D", "S", "family", "rho128")
    for name in kernels:
        head += " %9s %7s" % (name + " ms", "TF/s")
    head += " %7s %7s %7s" % ("speedup", "ideal", "inst%")
    L = [head]
    for r in rows:
        line = "%-4d %-7d %-22s %6s" % (r["head_dim"], r["seqlen"], r["family"],
                                        fmt(r.get("rho_128"), ".3f", 6))
        for name in kernels:
            f = figures_of(r, name, bwd)
            line += " %9s %7s" % (fmt(f.get("ms"), ".3f", 9), fmt(f.get("tflops"), ".1f", 7))
        f = figures_of(r, kernels[0], bwd) if kernels else {}
        inst = num(f.get("instrumentation_overhead"))
        line += " %7s %7s %7s" % (fmt(f.get("speedup"), ".2f", 7), fmt(f.get("ideal_speedup"), ".2f", 7),
                                  fmt(100 * inst if inst is not None else None, "+.2f", 7))
        L.append(line)
    return L


def table(run, rows, kernels, fits, chk, bars_path):
    L = ["fmsim bench on %s; forward, bf16, medians, L2 flushed" % run.get("device"),
         "TFLOP/s by the paper's count at each kernel's own tile; speedup = noskip / skip beside "
         "the ideal 1/(1-rho); inst% = instrumented / plain - 1 (the peers: bench/protocol_bench.py)", ""]
    L += case_table(rows, kernels)
    if any(r["fmsim"][n]["bwd"] is not None for r in rows for n in kernels):
        L += ["", "backward: the same, times of the backward alone at its own tile, TFLOP/s by 2.5 "
              "times the forward's count"]
        L += case_table(rows, kernels, bwd=True)
    if fits:
        L += ["", "sparsity sweep: median_ms = a + b * (1 - rho)"]
        for f in fits:
            L.append("  %-6s %-18s n=%-4s a=%9s ms  b=%9s ms  R^2=%s" % (
                f["kernel"], f["family"], f["n"], f["a"], f["b"], f["r2"]))
    L += ["", "bars of the issues (%s):" % bars_path]
    groups = {}
    for c in chk:
        groups.setdefault(c["check"], []).append(c)
    for name, cs in groups.items():
        bad = [c for c in cs if not c["ok"]]
        L.append("  %-52s %s" % (name, "PASS" if not bad else "FAIL (%d of %d): %s" % (
            len(bad), len(cs), ", ".join(
                "%s=%s" % (c["case"], fmt(c.get("value"), ".3f", 0).strip()) for c in bad[:6]))))
    over = [num(r["fmsim"][n]["instrumentation_overhead"]) for r in rows for n in kernels]
    over += [num((r["fmsim"][n]["bwd"] or {}).get("instrumentation_overhead")) for r in rows for n in kernels]
    over = sorted(x for x in over if x is not None)
    if over:
        L += ["", "instrumentation overhead (instrumented / plain - 1, the two interleaved), all kernels and "
              "passes: %d cases, median %+.2f%%, mean %+.2f%%, from %+.2f%% to %+.2f%%" % (
                  len(over), 100 * over[len(over) // 2], 100 * sum(over) / len(over), 100 * over[0],
                  100 * over[-1])]
    return "\n".join(L) + "\n"


def parse_args(argv):
    """(bench folder, bars file) or None after a usage line."""
    args, bars = [], BARS
    i = 1
    while i < len(argv):
        if argv[i] == "--bars" and i + 1 < len(argv):
            bars = argv[i + 1]
            i += 2
        elif argv[i].startswith("-"):
            return None
        else:
            args.append(argv[i])
            i += 1
    return (args[0], bars) if len(args) == 1 else None


def main(argv):
    parsed = parse_args(argv)
    if parsed is None:
        sys.stderr.write("usage: merge.py BENCH_DIR [--bars BARS.json]\n")
        return 2
    bdir, bars_path = parsed
    try:
        bars = load_bars(bars_path)
    except BarsError as e:
        sys.stderr.write("merge.py: %s\n" % e)
        return 2
    tdir = os.path.join(bdir, TABLE)
    try:
        run = load(os.path.join(tdir, "run.json"))
        cases = load(os.path.join(tdir, "index.json"))
    except (OSError, ValueError) as e:
        sys.stderr.write("merge.py: %s: %s (not the output of fmsim bench?)\n" % (tdir, e))
        return 2
    if run.get("format") != "fmsim-scenario-run" or not isinstance(cases, list):
        sys.stderr.write("merge.py: %s is not an fmsim scenario run\n" % tdir)
        return 2
    kernels = (run.get("gpu") or {}).get("kernels") or []
    rows = merge(cases, kernels)
    fits = read_fits(bdir)
    chk = checks(rows, kernels, fits, bars)
    text = table(run, rows, kernels, fits, chk, bars_path)
    merged = dict(format="fmsim-bench-merged", version=4, device=run.get("device"),
                  kernels=kernels, bars=bars_path, rows=rows, fits=fits, checks=chk)
    save_text(os.path.join(bdir, "merged.json"), json.dumps(merged, indent=1) + "\n")
    save_text(os.path.join(bdir, "merged.txt"), text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
