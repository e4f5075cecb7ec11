#!/usr/bin/env python3
"""Runs made outside bench/cp_bench.py (`fmsim cp-run --json` and bench/cp_torch_peer.py
files from a script) as one cp_bench JSON, which bench/cp_table.py renders.

    python3 bench/cp_collect.py --out cp.json --fmsim build/app/fmsim --device "NVIDIA H200" \\
        --count 4 [--commit C] [--command "what ran them"] RUN.json ... [--peer PEER.json ...]

Each cp-run file gives a forward record (step_ms.fwd) and, when it ran both passes, a
forward-and-backward one (step_ms.total); with --baseline, the one-GPU records (P = 1) of
the same passes. cp-plan's predictions are made here, as the driver makes them
(cp_bench.make_plans, the same arguments), for every (family, S, P) seen.
"""
import argparse
import json
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cp_bench  # noqa: E402


def run_records(path: str, doc: dict) -> list:
    """The records of one `fmsim cp-run --json` file."""
    with open(path) as f:
        d = json.load(f)
    fam, S, P = d["mask"]["family"], d["seqlen"], d["ranks"]
    passes = ["fwd", "both"] if d["passes"] == "both" else ["fwd"]
    out = []
    for p in passes:
        rec = dict(tool="fmsim", family=fam, seqlen=S, ranks=P, sharding=d["sharding"], exchange=d["exchange"],
                   **{"pass": p}, source=os.path.basename(path))
        rec.update(cp_bench.parse_cp_run(d, p))
        rec["id"] = rec["job"] = f"fmsim:{fam}:{S}:{P}:{d['sharding']}:{d['exchange']}:{p}"
        out.append(rec)
        b = d.get("baseline")
        if b:
            t = b["fwd_ms"] if p == "fwd" else b["total_ms"]
            jid = f"fmsim:{fam}:{S}:1:-:-:{p}"
            out.append(dict(tool="fmsim", family=fam, seqlen=S, ranks=1, sharding="-", exchange="-", **{"pass": p},
                            id=jid, job=jid, status="ok", error="", step_ms=dict(sustained=t, burst=None),
                            rank_compute_ms=[], check=None, source=os.path.basename(path)))
    if doc["heads"] and (doc["heads"], doc["head_dim"]) != (d["heads"], d["head_dim"]):
        raise SystemExit(f"cp_collect: {path} has H {d['heads']}, D {d['head_dim']}; the others "
                         f"H {doc['heads']}, D {doc['head_dim']} (one table, one shape: collect them apart)")
    doc["heads"], doc["head_dim"] = d["heads"], d["head_dim"]
    return out


def peer_file_records(path: str, doc: dict) -> list:
    with open(path) as f:
        got = json.load(f)
    c = got["case"]
    doc["torch"] = got["torch"]
    jid = f"torch:{c['mask']}:{c['seqlen']}:{got['gpus']}"
    base = dict(tool="torch", family=c["mask"], seqlen=c["seqlen"], ranks=got["gpus"], sharding=c["sharding"],
                job=jid, command=got["command"], source=os.path.basename(path))
    return cp_bench.peer_records(base, jid, got)


def collect(args) -> dict:
    doc = dict(format="fmsim-cp-bench", version=1, commit=args.commit, commands=[args.command],
               device=dict(name=args.device, count=args.count), heads=0, head_dim=128, gpu_profile=args.gpu,
               protocol=dict(warmup_s=1.0, sustain_s=1.0), torch="", plans={}, records=[])
    seen = {}  # a record replaces an earlier one of the same id (the later run of a case)
    for path in args.runs:
        for r in run_records(path, doc):
            seen[r["id"]] = r
    for path in args.peer:
        for r in peer_file_records(path, doc):
            seen[r["id"]] = r
    doc["records"] = list(seen.values())
    keys = {(r["family"], r["seqlen"], r["ranks"]) for r in doc["records"]}
    for fam, S, P in sorted(keys):
        ns = SimpleNamespace(fmsim=args.fmsim, heads=doc["heads"], gpu=args.gpu, families=[fam], seqlens=[S],
                             ranks=[P])
        cp_bench.make_plans(ns, doc["plans"])
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="fmsim cp-run --json files")
    ap.add_argument("--peer", nargs="*", default=[], help="bench/cp_torch_peer.py JSON files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--fmsim", default="build/app/fmsim", help="for cp-plan's predictions")
    ap.add_argument("--gpu", default="", help="cp-plan's profile (default: its own)")
    ap.add_argument("--device", required=True, help="the GPUs' name")
    ap.add_argument("--count", type=int, required=True, help="GPUs on the host")
    ap.add_argument("--commit", default="")
    ap.add_argument("--command", default="", help="what ran the files (recorded in the table's header)")
    args = ap.parse_args()
    cp_bench.save_json(args.out, collect(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
