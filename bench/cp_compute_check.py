#!/usr/bin/env python3
"""cp-plan's per-rank compute against cp-run's measured, recomputed with the current fmsim.

Issue 24's bar: each rank's measured compute within 15% of cp-plan's. cp-run's `compute_ms` is
the compute stream's step windows summed (kernels/fm_cp_gpu.cu: all-gather one launch a pass;
ring one launch a step with its merge or dQ sum, beside the NCCL groups of the comm stream).
Two predictions per rank:

  launch    the rank's `compute_ms` (`fwd_ms` for a forward-only run): one launch a pass at the
            plan's compute clock, whatever the exchange;
  exchange  the exchange's `compute_fwd_ms` (+ `compute_bwd_ms`): what cp-plan says the
            executor's compute stream runs (docs/DESIGN.md, "The exchange model"), what
            bench/cp_table.py compares (the bar).

Reads cp_bench.py's files (records with `rank_compute_ms`) and cp-run's own JSON collected
in an "fmsim-cp-runs" file (`runs`: cp-run --json per call); runs `fmsim cp-plan` once per
(family, S, P, sharding) with --heads of the file and the h200-sm90 profile; prints one line
per rank with --verbose and, per length, how many ranks are within 15% by each prediction.

  python3 bench/cp_compute_check.py [--fmsim build/app/fmsim] [--comm-sms F] FILE...

--calibrate TIMELINE (with --family, --seqlen, --ranks, --heads, --sharding of that run) instead
estimates cp-plan's --comm-sms from a ring run's `--timeline`: per rank and pass, the steps
that no NCCL group overlaps (the backward's "own dK/dV" sums are kernels, not
NCCL: left out, as cp-plan's model leaves them) give the rank's measured / predicted (b, the profile's error); a
step that one overlaps for o ms of its d gives f = (d - b x p) / o, p its predicted compute
alone (cp-plan's `steps`, `fwd_ms` / `bwd_ms`): a step progressing at 1 - f while a group is in
flight (docs/DESIGN.md, "The exchange model"). Prints each estimate and their mean.
"""
import argparse
import json
import subprocess
import sys

BAR = 0.15


def cases(path: str) -> list:
    """(id, family, S, P, heads, sharding, exchange, pass, [measured ms per rank])."""
    doc = json.load(open(path))
    out = []
    if doc.get("format") == "fmsim-cp-runs":
        for run in doc["runs"]:
            fam, S, P, H = run["mask"]["family"], run["seqlen"], run["ranks"], run["heads"]
            passes = ("fwd",) if run["passes"] == "fwd" else ("fwd", "bwd")
            meas = [sum(r["measured"][k]["compute_ms"] for k in passes) for r in run["rank_results"]]
            p = "fwd" if run["passes"] == "fwd" else "both"
            out.append((f"{path}:{fam}:{S}:{P}:{run['sharding']}:{run['exchange']}:{p}", fam, S, P, H,
                        run["sharding"], run["exchange"], p, meas))
        return out
    H = doc.get("heads", 4)
    for r in doc["records"]:
        if r.get("tool") != "fmsim" or r.get("status") != "ok" or not r.get("rank_compute_ms"):
            continue
        out.append((r["id"], r["family"], r["seqlen"], r["ranks"], H, r["sharding"], r["exchange"], r["pass"],
                    r["rank_compute_ms"]))
    return out


def plan(args, cache: dict, fam: str, S: int, P: int, H: int, sharding: str) -> dict:
    key = (fam, S, P, H, sharding)
    if key not in cache:
        cmd = [args.fmsim, "cp-plan", "--family", fam, "--seqlen", str(S), "--ranks", str(P), "--heads", str(H),
               "--gpu", args.gpu, "--json"]
        if P > 1:
            cmd += ["--sharding", sharding]
        if args.comm_sms is not None:
            cmd += ["--comm-sms", str(args.comm_sms)]
        cache[key] = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return cache[key]


def predictions(doc: dict, P: int, sharding: str, exchange: str, pass_: str) -> tuple:
    """Per rank: (launch, exchange) predicted ms."""
    if P == 1:
        g = doc["one_gpu"]
        t = g["fwd_ms"] if pass_ == "fwd" else g["total_ms"]
        return [t], [t]
    s = next(x for x in doc["shardings"] if x["name"] == sharding)
    launch = [r["fwd_ms"] if pass_ == "fwd" else r["compute_ms"] for r in s["ranks"]]
    ex = []
    for r in s["ranks"]:
        c = r["exchanges"][exchange]
        ex.append(c["compute_fwd_ms"] + (0 if pass_ == "fwd" else c["compute_bwd_ms"]))
    return launch, ex


def calibrate(args) -> int:
    """Per-step estimates of the SM fraction from a ring timeline (see the module's text)."""
    ev = [e for e in json.load(open(args.calibrate))["traceEvents"] if e.get("ph") == "X"]
    doc = plan(args, {}, args.family, args.seqlen, args.ranks, args.heads, args.sharding)
    ranks = next(x for x in doc["shardings"] if x["name"] == args.sharding)["ranks"]
    est = []
    for r in range(args.ranks):
        for pass_ in ("fwd", "bwd"):
            mine = [e for e in ev if e["pid"] == r and e["name"].startswith(pass_)]
            steps = sorted((e for e in mine if e["tid"] == 0), key=lambda e: e["ts"])
            comm = [e for e in mine if e["tid"] == 1 and " own " not in e["name"]]  # NCCL groups only
            rows = []
            for i, st in enumerate(steps):
                a, b = st["ts"], st["ts"] + st["dur"]
                o = sum(max(0.0, min(b, c["ts"] + c["dur"]) - max(a, c["ts"])) for c in comm) / 1e3
                rows.append((i, st["dur"] / 1e3, ranks[r]["steps"][i][pass_ + "_ms"], o))
            alone = [d / p for _, d, p, o in rows if o == 0]
            if not alone:
                continue
            bias = sum(alone) / len(alone)
            for i, d, p, o in rows:
                if o > 0:
                    f = (d - bias * p) / o
                    est.append(f)
                    print(f"rank {r} {pass_} step {i}: {d:.3f} ms measured, {p:.3f} predicted alone, x {bias:.3f} "
                          f"(the rank's steps without comm), {o:.3f} ms beside comm: f = {f:.3f}")
    if est:
        print(f"{len(est)} estimates, mean f = {sum(est) / len(est):.3f} (min {min(est):.3f}, max {max(est):.3f})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--fmsim", default="build/app/fmsim")
    ap.add_argument("--gpu", default="h200-sm90")
    ap.add_argument("--comm-sms", type=float, default=None, help="cp-plan's --comm-sms (default: its own)")
    ap.add_argument("--verbose", action="store_true", help="one line per rank")
    ap.add_argument("--calibrate", metavar="TIMELINE", help="estimate --comm-sms from a ring run's timeline")
    ap.add_argument("--family", default="causal_document")
    ap.add_argument("--seqlen", type=int, default=131072)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--sharding", default="mask-aware")
    args = ap.parse_args()
    if args.calibrate:
        return calibrate(args)
    cache, tally = {}, {}
    for path in args.files:
        for cid, fam, S, P, H, sh, ex, pass_, meas in cases(path):
            launch, exch = predictions(plan(args, cache, fam, S, P, H, sh), P, sh, ex, pass_)
            t = tally.setdefault(S, {"n": 0, "launch": 0, "exchange": 0, "worst": (1.0, None, None, None)})
            for k, m in enumerate(meas):
                a, b = m / launch[k], m / exch[k]
                t["n"] += 1
                t["launch"] += abs(a - 1) <= BAR
                t["exchange"] += abs(b - 1) <= BAR
                if abs(b - 1) > abs(t["worst"][0] - 1):
                    t["worst"] = (b, cid, k, ex)
                if args.verbose:
                    print(f"{cid} rank {k}: measured {m:.3f} ms, launch {launch[k]:.3f} ({a:.3f}), "
                          f"exchange {exch[k]:.3f} ({b:.3f})")
    for S in sorted(tally):
        t = tally[S]
        w = t["worst"]
        print(f"S = {S}: {t['n']} ranks; within 15%: launch {t['launch']}, exchange {t['exchange']}; "
              f"worst by exchange {w[0]:.3f} ({w[1]}, rank {w[2]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
