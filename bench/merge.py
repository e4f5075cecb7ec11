#!/usr/bin/env python3
"""Joins `fmsim bench` (its scenario runs under DIR) and, optionally, a peer file
of the earlier peer harness's layout into one table, and checks the bars of the
Hopper kernel's issue and, where the backward ran, those of the backward's issue.
fmsim against its peers is now timed in one process under the one protocol by
bench/protocol_bench.py, whose tables stand on their own; this tool keeps the
C harness's figures (no-skip speed-up, instrumentation overhead, bytes, sweep).

`fmsim bench --out DIR` writes two scenario runs: DIR/paper-kernel-table/
(index.json: one row per case, with one record per kernel: time, TFLOP/s by
the paper's count at the kernel's own tile, the no-skip time and speed-up, the
instrumented overhead and classes, bytes; run.json: the device and settings)
and DIR/sparsity-sweep/ (tables/fit.csv: time = a + b (1 - rho) per kernel and
family). Per case: each fmsim kernel's time and TFLOP/s, FlexAttention with
its Triton and its FLASH backend on the same exported vectors, the time ratios
fmsim/peer (< 1: fmsim faster), the skip speed-up next to 1/(1-rho), the
instrumentation overhead; per (S, D) the full and causal masks against SDPA's
FlashAttention-2 and cuDNN; the sweep's fit. The same again for the backward
(each kernel record's "bwd", the peer's bwd_ms: the backward alone, TFLOP/s by
2.5 times the forward's count) when the bench ran it. Writes DIR/merged.json
and DIR/merged.txt (atomically). Standard library only.

    python3 bench/merge.py DIR [PEER.json]
"""
import csv
import json
import math
import os
import sys

TABLE = "paper-kernel-table"
SWEEP = "sparsity-sweep"
# The kernel the Hopper issue's speed bars are about; the portable sm80 kernel is
# the teaching baseline: every kernel gets the bars that hold for any kernel (every
# case runs, the instrumentation overhead, the sweep's linearity), only this one the
# speed bars against the peers.
HOPPER = "sm90"


def load(path):
    with open(path) as f:
        return json.load(f)


def save_text(path, text):
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def fmt(x, spec, width):
    x = num(x)
    return format(x, spec).rjust(width) if x is not None else "-".rjust(width)


def ratio(a, b):
    a, b = num(a), num(b)
    return a / b if a is not None and b else None


def geomean(xs):
    xs = [x for x in xs if num(x) and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def peer_maps(peer):
    """FlexAttention records by (case id, backend), SDPA by (backend, family, S, D)."""
    flex, sdpa = {}, {}
    for r in (peer or {}).get("results", []):
        if r.get("peer") == "flex_attention":
            flex[(r.get("id"), r.get("backend", "TRITON"))] = r
        elif r.get("peer") == "sdpa":
            sdpa[(r.get("backend"), r.get("family"), r.get("seqlen"), r.get("head_dim"))] = r
    return flex, sdpa


PASS_KEYS = dict(br="br", ms="time_ms", tflops="tflops", rho="sparsity", status="status",
                 noskip_ms="noskip_ms", speedup="speedup_skip_over_noskip",
                 ideal_speedup="ideal_speedup", instrumentation_overhead="instrumentation_overhead",
                 class_mismatches="class_mismatches")
PEERS = ("triton", "flash", "fa2", "cudnn")


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


def peer_figures(row, c, flex, sdpa, prefix, tag):
    """The peers' figures of one pass (tag "fwd" or "bwd") into row, keys PREFIX + peer."""
    for be, key in (("TRITON", "triton"), ("FLASH", "flash")):
        fx = flex.get((c["id"], be))
        if fx is not None:
            row[prefix + key + "_ms"] = fx.get(tag + "_ms")
            row[prefix + key + "_tflops"] = fx.get(tag + "_tflops")
            row[prefix + key + "_error"] = fx.get("error" if tag == "fwd" else "bwd_error")
            row[prefix + key + "_oom"] = fx.get("oom" if tag == "fwd" else "bwd_oom", False)
    for be, key in (("FLASH_ATTENTION", "fa2"), ("CUDNN_ATTENTION", "cudnn")):
        s = sdpa.get((be, c["family"], c["seqlen"], c["head_dim"]))
        if s is not None and num(s.get(tag + "_ms")):
            row[prefix + key + "_ms"] = s[tag + "_ms"]
            row[prefix + key + "_tflops"] = s.get(tag + "_tflops")
    peers = [row.get(prefix + k + "_ms") for k in PEERS]
    row[prefix + "fastest_peer_ms"] = min([p for p in peers if num(p)], default=None)


def merge(cases, kernels, peer):
    flex, sdpa = peer_maps(peer)
    rows = []
    for c in cases:
        row = dict(id=c["id"], family=c["family"], seqlen=c["seqlen"], head_dim=c["head_dim"],
                   rho_128=c.get("sparsity_128"), fmsim=kernel_cols(c, kernels))
        peer_figures(row, c, flex, sdpa, "", "fwd")
        peer_figures(row, c, flex, sdpa, "bwd_", "bwd")
        for name, f in row["fmsim"].items():
            for prefix, figures in (("", f), ("bwd_", f["bwd"])):
                for key in PEERS + ("fastest_peer",):
                    if figures is not None:
                        figures["over_" + key] = ratio(figures["ms"], row.get(prefix + key + "_ms"))
        rows.append(row)
    return rows


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


def checks(rows, kernels, fits):
    """The bars of the Hopper kernel's issue, per kernel."""
    out = []

    def add(check, case, value, ok):
        out.append(dict(check=check, case=case, value=value, ok=bool(ok)))

    for name in kernels:
        hd128 = [r for r in rows if r["head_dim"] == 128] if name == HOPPER else []
        for r in hd128:
            f = r["fmsim"][name]
            if r["family"] == "full":
                tf = num(f["tflops"])
                add("%s: full mask >= 600 TFLOP/s" % name, r["id"], tf, tf is not None and tf >= 600)
                v = f["over_cudnn"]
                add("%s: full mask time <= 1.0x cuDNN" % name, r["id"], v, v is not None and v <= 1.0)
            v = f["over_triton"]
            add("%s: time <= 0.75x Flex-Triton" % name, r["id"], v, v is not None and v <= 0.75)
            v = f["over_fastest_peer"]
            add("%s: time <= 1.05x the fastest peer" % name, r["id"], v, v is not None and v <= 1.05)
            if r["seqlen"] >= 32768 and r["family"] != "full":
                v = ratio(f["tflops"], full_tflops(rows, r, name))
                add("%s: TFLOP/s >= 0.8x own full mask" % name, r["id"], v, v is not None and v >= 0.8)
        if hd128:
            g = geomean([r["fmsim"][name]["over_flash"] for r in hd128])
            add("%s: geomean time / Flex-FLASH <= 0.9 (hd 128)" % name, "%d cases" % len(hd128), g,
                g is not None and g <= 0.9)
        hd64 = [r for r in rows if r["head_dim"] == 64 and r["seqlen"] <= 32768 and name == HOPPER]
        if hd64:
            g = geomean([r["fmsim"][name]["over_flash"] for r in hd64])
            add("%s: geomean time / Flex-FLASH <= 0.9 (hd 64)" % name, "%d cases" % len(hd64), g,
                g is not None and g <= 0.9)
        ran = [r for r in rows if num(r["fmsim"][name]["ms"])]
        add("%s: every case runs" % name, "%d of %d" % (len(ran), len(rows)), len(ran),
            len(ran) == len(rows))
        for r in rows:
            v = num(r["fmsim"][name]["instrumentation_overhead"])
            if v is not None:
                add("%s: instrumentation overhead < 2%%" % name, r["id"], v, v < 0.02)
    for f in fits:
        v = num(float(f["r2"])) if f["r2"] not in ("", "-") else None
        add("%s: sweep time linear in 1-rho, R^2 >= 0.98" % f["kernel"], "sweep " + f["family"], v,
            v is not None and v >= 0.98)
    for name in kernels:  # a kernel with a backward (its tile: br > 0) gets the backward's bars
        if any((r["fmsim"][name]["bwd"] or {}).get("br") for r in rows):
            out += backward_checks(rows, name)
    return out


def backward_checks(rows, name):
    """The bars of the backward's issue for one kernel (head dim 128: the paper's 36 cases)."""
    out = []

    def add(check, case, value, ok):
        out.append(dict(check=check, case=case, value=value, ok=bool(ok)))

    hd128 = [r for r in rows if r["head_dim"] == 128]
    for r in hd128:
        b = figures_of(r, name, True)
        v = b.get("over_triton")
        add("%s bwd: time <= 1.0x Flex-Triton's backward" % name, r["id"], v, v is not None and v <= 1.0)
        if r["family"] == "full":
            tf = num(b.get("tflops"))
            add("%s bwd: full mask >= 450 TFLOP/s (2.5x count)" % name, r["id"], tf,
                tf is not None and tf >= 450)
        if r["seqlen"] in (32768, 131072) and r["family"] != "full":
            v = ratio(b.get("tflops"), full_tflops(rows, r, name, True))
            add("%s bwd: TFLOP/s >= 0.8x own full mask (32K, 128K)" % name, r["id"], v,
                v is not None and v >= 0.8)
    ran = [r for r in rows if num(figures_of(r, name, True).get("ms"))]
    add("%s bwd: every case runs" % name, "%d of %d" % (len(ran), len(rows)), len(ran),
        len(ran) == len(rows))
    return out


def reported(rows, kernels):
    """What the backward's issue asks to report without a bar: the ratio to Flex-FLASH's
    backward (the next bar), per kernel, as a geomean over the cases that have both."""
    out = []
    for name in kernels:
        xs = [figures_of(r, name, True).get("over_flash") for r in rows
              if r["head_dim"] == 128 and r["fmsim"][name]["bwd"] is not None]
        xs = [x for x in xs if num(x)]
        if xs:
            out.append(dict(what="%s bwd: time / Flex-FLASH's backward, geomean (hd 128)" % name,
                            cases=len(xs), value=geomean(xs), worst=max(xs)))
    return out


def case_table(rows, kernels, bwd=False):
    """One line per case for one pass: fmsim's kernels, the Flex peers, the ratios, and the
    first kernel's skip speed-up beside 1/(1-rho) and instrumentation overhead."""
    pre = "bwd_" if bwd else ""
    head = "%-4s %-7s %-22s %6s" % ("D", "S", "family", "rho128")
    for name in kernels:
        head += " %9s %7s" % (name + " ms", "TF/s")
    head += " %9s %7s %9s %7s" % ("triton ms", "TF/s", "flash ms", "TF/s")
    for name in kernels:
        head += " %9s %9s" % (name + "/tri", name + "/fla")
    head += " %7s %7s %7s" % ("speedup", "ideal", "inst%")
    L = [head]
    for r in rows:
        line = "%-4d %-7d %-22s %6s" % (r["head_dim"], r["seqlen"], r["family"],
                                        fmt(r.get("rho_128"), ".3f", 6))
        for name in kernels:
            f = figures_of(r, name, bwd)
            line += " %9s %7s" % (fmt(f.get("ms"), ".3f", 9), fmt(f.get("tflops"), ".1f", 7))
        for key in ("triton", "flash"):
            ms = fmt(r.get(pre + key + "_ms"), ".3f", 9)
            if r.get(pre + key + "_oom"):
                ms = "OOM".rjust(9)
            elif r.get(pre + key + "_error") and not num(r.get(pre + key + "_ms")):
                ms = "error".rjust(9)
            line += " %9s %7s" % (ms, fmt(r.get(pre + key + "_tflops"), ".1f", 7))
        for name in kernels:
            f = figures_of(r, name, bwd)
            line += " %9s %9s" % (fmt(f.get("over_triton"), ".2f", 9), fmt(f.get("over_flash"), ".2f", 9))
        f = figures_of(r, kernels[0], bwd) if kernels else {}
        inst = num(f.get("instrumentation_overhead"))
        line += " %7s %7s %7s" % (fmt(f.get("speedup"), ".2f", 7), fmt(f.get("ideal_speedup"), ".2f", 7),
                                  fmt(100 * inst if inst is not None else None, "+.2f", 7))
        L.append(line)
    return L


def sdpa_table(rows, kernels, bwd=False):
    pre = "bwd_" if bwd else ""
    head = "%-4s %-7s %-8s" % ("D", "S", "mask")
    for name in kernels:
        head += " %9s" % (name + " TF")
    head += " %9s %9s" % ("FA2 TF", "cuDNN TF")
    for name in kernels:
        head += " %10s %10s" % (name + "/FA2", name + "/cuDNN")
    L = [head]
    for r in rows:
        if r["family"] not in ("full", "causal"):
            continue
        line = "%-4d %-7d %-8s" % (r["head_dim"], r["seqlen"], r["family"])
        for name in kernels:
            line += " %9s" % fmt(figures_of(r, name, bwd).get("tflops"), ".1f", 9)
        line += " %9s %9s" % (fmt(r.get(pre + "fa2_tflops"), ".1f", 9),
                              fmt(r.get(pre + "cudnn_tflops"), ".1f", 9))
        for name in kernels:
            f = figures_of(r, name, bwd)
            line += " %10s %10s" % (fmt(f.get("over_fa2"), ".2f", 10), fmt(f.get("over_cudnn"), ".2f", 10))
        L.append(line)
    return L


def peer_errors(rows, bwd):
    pre, what = ("bwd_", " backward") if bwd else ("", "")
    L = []
    for r in rows:
        for key in ("triton", "flash"):
            if r.get(pre + key + "_error"):
                L.append("  %-40s Flex-%s%s: %s" % (r["id"], key.upper(), what,
                                                    r[pre + key + "_error"][:120]))
    return L


def table(run, peer, rows, kernels, fits, chk, rep):
    L = ["fmsim bench vs peers on %s (%s); forward, bf16, medians, L2 flushed"
         % (run.get("device"), peer.get("torch", "no peer") if peer else "no peer"),
         "ratio = fmsim time / peer time (< 1: fmsim faster); TFLOP/s by the paper's count at each "
         "one's own tile (fmsim: its kernel's, FlexAttention: 128); tri/fla = Flex-Triton, "
         "Flex-FLASH", ""]
    L += case_table(rows, kernels)
    L += ["", "full and causal against SDPA (same S, D, B, H): TFLOP/s, and time ratios fmsim/peer "
          "(> 1 means fmsim is slower)"]
    L += sdpa_table(rows, kernels)
    has_bwd = any(r["fmsim"][n]["bwd"] is not None for r in rows for n in kernels)
    if has_bwd:
        L += ["", "backward: the same, times of the backward alone (fmsim at its backward tile; the "
              "peers' gradient of (out * dout).sum()), TFLOP/s by 2.5 times the forward's count; "
              "speedup = noskip / skip beside the ideal 1/(1-rho) at the backward tile"]
        L += case_table(rows, kernels, bwd=True)
        L += ["", "backward, full and causal against SDPA"]
        L += sdpa_table(rows, kernels, bwd=True)
    if fits:
        L += ["", "sparsity sweep: median_ms = a + b * (1 - rho)"]
        for f in fits:
            L.append("  %-6s %-18s n=%-4s a=%9s ms  b=%9s ms  R^2=%s" % (
                f["kernel"], f["family"], f["n"], f["a"], f["b"], f["r2"]))
    errors = peer_errors(rows, False) + (peer_errors(rows, True) if has_bwd else [])
    if errors:
        L += ["", "where a peer could not run a case:"] + errors
    L += ["", "bars of the issue:"]
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
    if rep:
        L += ["", "reported (the next bar):"]
        for x in rep:
            L.append("  %-52s %s over %d cases (worst %s)" % (
                x["what"], fmt(x["value"], ".3f", 0).strip(), x["cases"], fmt(x["worst"], ".3f", 0).strip()))
    return "\n".join(L) + "\n"


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write("usage: merge.py BENCH_DIR [PEER.json]\n")
        return 2
    bdir = argv[1]
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
    peer = None
    if len(argv) == 3:
        try:
            peer = load(argv[2])
        except (OSError, ValueError) as e:
            sys.stderr.write("merge.py: %s: %s (merging without the peer)\n" % (argv[2], e))
    kernels = (run.get("gpu") or {}).get("kernels") or []
    rows = merge(cases, kernels, peer)
    fits = read_fits(bdir)
    chk = checks(rows, kernels, fits)
    rep = reported(rows, kernels)
    text = table(run, peer, rows, kernels, fits, chk, rep)
    merged = dict(format="fmsim-bench-merged", version=3, device=run.get("device"),
                  kernels=kernels, peer_torch=peer.get("torch") if peer else None, rows=rows,
                  fits=fits, checks=chk, reported=rep, peer=peer)
    save_text(os.path.join(bdir, "merged.json"), json.dumps(merged, indent=1) + "\n")
    save_text(os.path.join(bdir, "merged.txt"), text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
