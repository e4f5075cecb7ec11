#!/usr/bin/env python3
"""The C harnesses against the Python protocol: A is either fm_kernel_bench
--sustained MS --json A, or the index.json of `fmsim bench --sustained MS --kernel
sm90` (its sm90 kernel's figures); B is bench/protocol_bench.py --peers '' --out B on
the same cases. They must give the same sustained median within --tol (default 2%)
for every (family, length, pass) both hold. Prints one line per pair and exits 1
when any pair is off or none is common.

    python3 bench/protocol_crosscheck.py A.json B.json [--tol 0.02]
"""
import argparse
import json
import sys


def c_figures(c) -> dict:
    """(family, seqlen, pass) -> (median ms, clock MHz or None) of either C harness."""
    out = {}
    if isinstance(c, list):  # fmsim bench's index.json: one row per case, its kernels' passes
        for r in c:
            for k in r.get("kernels", []):
                if k.get("kernel") != "sm90":
                    continue
                for p, rec in (("fwd", k), ("bwd", k.get("bwd") or {})):
                    if rec.get("status") == "ran" and rec.get("time_ms"):
                        out[(r["family"], r["seqlen"], p)] = (rec["time_ms"], None)
        return out
    for r in c.get("cases", []):  # fm_kernel_bench --json
        for p in ("fwd", "bwd"):
            s = r.get("sustained_" + p)
            if s:
                out[(r["family"], r["seqlen"], p)] = (s["median_ms"], s.get("clock_mhz"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("c_json")
    ap.add_argument("py_json")
    ap.add_argument("--tol", type=float, default=0.02)
    a = ap.parse_args()
    with open(a.c_json) as f:
        c = json.load(f)
    with open(a.py_json) as f:
        py = json.load(f)
    c_ms = c_figures(c)
    bad = n = 0
    for r in py.get("records", []):
        f = r.get("impls", {}).get("fmsim", {}).get("sustained")
        key = (r.get("family"), r.get("seqlen"), r.get("pass_"))
        if not f or key not in c_ms:
            continue
        cm, cclk = c_ms[key]
        q = f["median_ms"] / cm
        ok = abs(q - 1) <= a.tol
        n += 1
        bad += not ok
        print(f"{key[0]:22s} {key[1]:7d} {key[2]}: C {cm:9.3f} ms @ {cclk} MHz, Python {f['median_ms']:9.3f} ms "
              f"@ {f['clock_mhz']} MHz: ratio {q:.4f} {'ok' if ok else 'OFF'}")
    print(f"crosscheck: {n - bad} of {n} pairs within {100 * a.tol:.1f}%")
    return 1 if bad or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
