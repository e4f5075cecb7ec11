#!/usr/bin/env python3
"""Joins `fmsim bench` (DIR/summary.json) and the peer (bench/peer_flex.py's
JSON) into one table, and checks the issue's bars.

Per case: fmsim skip time and TFLOP/s (paper count at its own tile), rho,
FlexAttention time on the same exported vectors, the time ratio fmsim/peer
(< 1: fmsim faster), skip vs noskip speed-up next to 1/(1-rho), the
instrumentation overhead; per (S, D) the full and causal masks against SDPA's
FlashAttention-2 and cuDNN; the sweep's linear fit. Writes DIR/merged.json and
DIR/merged.txt, and adds "peer" and "merged" members to DIR/summary.json
(atomically). Standard library only.

    python3 bench/merge.py DIR PEER.json
"""
import json
import math
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def save_text(path, text):
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def num(x):
    return x if isinstance(x, (int, float)) and x is not None and math.isfinite(x) else None


def fmt(x, spec, width):
    x = num(x)
    return format(x, spec).rjust(width) if x is not None else "-".rjust(width)


def merge(bench, peer):
    flex = {}
    sdpa = {}
    for r in peer.get("results", []) if peer else []:
        if r.get("peer") == "flex_attention":
            flex[r["id"]] = r
        elif r.get("peer") == "sdpa":
            sdpa[(r.get("backend"), r.get("family"), r.get("seqlen"), r.get("head_dim"))] = r
    rows = []
    for c in bench.get("cases", []):
        sk = c.get("skip") or {}
        ns = c.get("noskip") or {}
        fx = flex.get(c["id"])
        row = dict(id=c["id"], family=c["family"], seqlen=c["seqlen"], head_dim=c["head_dim"],
                   rho=c.get("rho"), rho_128=c.get("rho_128"), fmsim_ms=sk.get("median_ms"),
                   fmsim_tflops=sk.get("tflops"), fmsim_source=sk.get("source"),
                   noskip_ms=ns.get("median_ms"), speedup=c.get("speedup_skip_over_noskip"),
                   ideal_speedup=c.get("ideal_speedup"),
                   instrumentation_overhead=c.get("instrumentation_overhead"),
                   tflops_over_full=c.get("tflops_over_full"),
                   class_mismatches=c.get("class_mismatches"),
                   fmsim_skipped=c.get("skipped"))
        if fx is not None:
            row["flex_ms"] = fx.get("fwd_ms")
            row["flex_tflops"] = fx.get("fwd_tflops")
            row["flex_error"] = fx.get("error")
            row["flex_oom"] = fx.get("oom", False)
        if num(row.get("fmsim_ms")) and num(row.get("flex_ms")):
            row["ratio_fmsim_over_flex"] = row["fmsim_ms"] / row["flex_ms"]
        for be in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
            s = sdpa.get((be, c["family"], c["seqlen"], c["head_dim"]))
            if s is not None and num(s.get("fwd_ms")):
                key = "fa2" if be == "FLASH_ATTENTION" else "cudnn"
                row[key + "_ms"] = s["fwd_ms"]
                row[key + "_tflops"] = s.get("fwd_tflops")
                if num(row.get("fmsim_ms")):
                    row["ratio_fmsim_over_" + key] = row["fmsim_ms"] / s["fwd_ms"]
        rows.append(row)
    return rows


def checks(bench, rows):
    out = []
    by = {(r["family"], r["seqlen"], r["head_dim"]): r for r in rows}
    for r in rows:
        if r["family"] == "full" and r["head_dim"] == 128:
            tf, fa2 = num(r.get("fmsim_tflops")), num(r.get("fa2_tflops"))
            ok = tf is not None and tf >= 300 and (fa2 is None or tf >= 0.85 * fa2)
            out.append(dict(check="full mask >= 300 TFLOP/s and >= 0.85x SDPA FA2", case=r["id"],
                            value=tf, fa2=fa2,
                            ratio=(tf / fa2) if tf is not None and fa2 else None, ok=ok))
    for r in rows:
        if r["head_dim"] == 128 and r["seqlen"] >= 32768 and r["family"] != "full":
            v = num(r.get("tflops_over_full"))
            out.append(dict(check="TFLOP/s >= 0.8x own full-mask TFLOP/s", case=r["id"], value=v,
                            ok=v is not None and v >= 0.8))
    for f in (bench.get("sweep") or {}).get("fits", []):
        out.append(dict(check="sweep time linear in 1-rho, R^2 >= 0.95",
                        case="sweep " + f["family"], value=f.get("r2"),
                        ok=num(f.get("r2")) is not None and f["r2"] >= 0.95))
    ran = [r for r in rows if num(r.get("fmsim_ms"))]
    out.append(dict(check="every case runs on fmsim", case="%d of %d" % (len(ran), len(rows)),
                    value=len(ran), ok=len(ran) == len(rows)))
    for r in rows:
        v = num(r.get("instrumentation_overhead"))
        if v is not None:
            out.append(dict(check="instrumentation overhead < 3%", case=r["id"], value=v,
                            ok=v < 0.03))
    _ = by
    return out


def table(bench, peer, rows, chk):
    L = []
    L.append("fmsim bench vs peers on %s (%s); forward, bf16, medians, L2 flushed"
             % (bench.get("device"), peer.get("torch", "no peer") if peer else "no peer"))
    L.append("ratio = fmsim time / peer time (< 1: fmsim faster); TFLOP/s by the paper's count at "
             "each one's own tile (fmsim: its kernel's, FlexAttention: 128)")
    L.append("")
    L.append("%-4s %-7s %-22s %6s %9s %8s %9s %8s %7s %7s %7s %7s"
             % ("D", "S", "family", "rho", "fmsim ms", "TFLOP/s", "flex ms", "TFLOP/s", "ratio",
                "speedup", "ideal", "inst%"))
    for r in rows:
        flex_ms = fmt(r.get("flex_ms"), ".3f", 9)
        if r.get("flex_oom"):
            flex_ms = "OOM".rjust(9)
        elif r.get("flex_error") and not num(r.get("flex_ms")):
            flex_ms = "error".rjust(9)
        inst = num(r.get("instrumentation_overhead"))
        L.append("%-4d %-7d %-22s %6s %9s %8s %9s %8s %7s %7s %7s %7s" % (
            r["head_dim"], r["seqlen"], r["family"], fmt(r.get("rho"), ".3f", 6),
            fmt(r.get("fmsim_ms"), ".3f", 9), fmt(r.get("fmsim_tflops"), ".1f", 8), flex_ms,
            fmt(r.get("flex_tflops"), ".1f", 8), fmt(r.get("ratio_fmsim_over_flex"), ".2f", 7),
            fmt(r.get("speedup"), ".2f", 7), fmt(r.get("ideal_speedup"), ".2f", 7),
            fmt(100 * inst if inst is not None else None, "+.2f", 7)))
    L.append("")
    L.append("full and causal against SDPA (same S, D, B, H):")
    L.append("(TFLOP/s, and time ratios fmsim/peer: > 1 means fmsim is slower)")
    L.append("%-4s %-7s %-8s %9s %9s %9s %9s %9s" % ("D", "S", "mask", "fmsim TF", "FA2 TF",
                                                    "cuDNN TF", "t/FA2", "t/cuDNN"))
    for r in rows:
        if r["family"] in ("full", "causal"):
            L.append("%-4d %-7d %-8s %9s %9s %9s %9s %9s" % (
                r["head_dim"], r["seqlen"], r["family"], fmt(r.get("fmsim_tflops"), ".1f", 9),
                fmt(r.get("fa2_tflops"), ".1f", 9), fmt(r.get("cudnn_tflops"), ".1f", 9),
                fmt(r.get("ratio_fmsim_over_fa2"), ".2f", 9),
                fmt(r.get("ratio_fmsim_over_cudnn"), ".2f", 9)))
    sw = bench.get("sweep") or {}
    if sw.get("fits"):
        L.append("")
        L.append("sparsity sweep at S=%s (%d points): median_ms = a + b * (1 - rho)"
                 % (sw.get("seqlen"), len(sw.get("points", []))))
        for f in sw["fits"]:
            L.append("  %-18s n=%-3s a=%s ms  b=%s ms  R^2=%s" % (
                f["family"], f.get("n"), fmt(f.get("intercept_ms"), ".4f", 8),
                fmt(f.get("slope_ms_per_density"), ".4f", 9), fmt(f.get("r2"), ".4f", 6)))
    L.append("")
    L.append("bars of the issue:")
    groups = {}
    for c in chk:
        groups.setdefault(c["check"], []).append(c)
    for name, cs in groups.items():
        bad = [c for c in cs if not c["ok"]]
        L.append("  %-52s %s" % (name, "PASS" if not bad else "FAIL (%d of %d): %s" % (
            len(bad), len(cs), ", ".join(
                "%s=%s" % (c["case"], fmt(c.get("value"), ".3f", 0).strip()) for c in bad[:6]))))
    return "\n".join(L) + "\n"


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write("usage: merge.py BENCH_DIR [PEER.json]\n")
        return 2
    bdir = argv[1]
    spath = os.path.join(bdir, "summary.json")
    try:
        bench = load(spath)
    except (OSError, ValueError) as e:
        sys.stderr.write("merge.py: %s: %s\n" % (spath, e))
        return 2
    if bench.get("format") != "fmsim-trace" or bench.get("kind") != "bench":
        sys.stderr.write("merge.py: %s is not an fmsim bench summary\n" % spath)
        return 2
    peer = None
    if len(argv) == 3:
        try:
            peer = load(argv[2])
        except (OSError, ValueError) as e:
            sys.stderr.write("merge.py: %s: %s (merging without the peer)\n" % (argv[2], e))
    rows = merge(bench, peer)
    chk = checks(bench, rows)
    text = table(bench, peer, rows, chk)
    merged = dict(format="fmsim-bench-merged", version=1, device=bench.get("device"),
                  peer_torch=peer.get("torch") if peer else None, rows=rows, checks=chk)
    save_text(os.path.join(bdir, "merged.json"), json.dumps(merged, indent=1) + "\n")
    save_text(os.path.join(bdir, "merged.txt"), text)
    bench["peer"] = peer
    bench["merged"] = dict(rows=rows, checks=chk)
    bench.setdefault("files", {})["merged"] = "merged.json"
    save_text(spath, json.dumps(bench, indent=2) + "\n")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
