#!/usr/bin/env python3
"""Two kernel settings compared case by case over scenario runs (their index.csv): the A/B table of
a mask-method or build change on drawn masks (bench/results/r2p-h200.md, the sparsity sweep).

    python3 bench/method_ab.py r2p=RUN1 slices=RUN2 r2p=RUN3 slices=RUN4 [--json OUT]

Runs given in the order they ran (A B A B: each label's runs bracket the other's, so a drift of
the clock shows as each label's A/A spread). Per case and pass, each label's time is the
geometric mean of its runs; per family the geometric mean, lowest and highest of A / B (A is the
first label), the A/A spread of each label (its later run over its first, lowest and highest),
and the model's |error| of the first label's first run (sm90_predicted_error). A case must be
in every run; a run missing a pass's times is refused (one line, exit 1).
"""
import argparse
import csv
import math
import os
import sys
from atomic import save_json  # bench/atomic.py, beside this file

PASSES = {"fwd": "sm90_time_ms", "bwd": "sm90_bwd_time_ms"}
ERRORS = {"fwd": "sm90_predicted_error", "bwd": "sm90_bwd_predicted_error"}


def load(path):
    f = os.path.join(path, "index.csv") if os.path.isdir(path) else path
    try:
        with open(f, newline="") as fh:
            return {r["id"]: r for r in csv.DictReader(fh)}
    except OSError as e:
        sys.exit(f"method_ab: {f}: {e.strerror}")


def gm(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def num(row, key, where):
    try:
        v = float(row[key])
    except (KeyError, ValueError):
        v = float("nan")
    if not v > 0:
        sys.exit(f"method_ab: {where}: no {key} (a run without the GPU step or the pass)")
    return v


def table(runs):
    labels = list(dict.fromkeys(lab for lab, _ in runs))
    if len(labels) != 2:
        sys.exit(f"method_ab: expected two labels, got {', '.join(labels) or 'none'}")
    a, b = labels
    ids = set.intersection(*(set(d) for _, d in runs))
    if not ids or any(set(d) != ids for _, d in runs):
        sys.exit("method_ab: the runs do not hold the same cases")
    first = next(d for lab, d in runs if lab == a)
    passes = [p for p, k in PASSES.items() if first[next(iter(ids))].get(k) not in (None, "", "nan")]
    if not passes:
        sys.exit("method_ab: the runs hold no kernel times (runs without the GPU step?)")
    out = []
    for p in passes:
        fams = {}
        for i in sorted(ids):
            t = {lab: [num(d[i], PASSES[p], f"{lab} {i}") for l2, d in runs if l2 == lab] for lab in labels}
            f = fams.setdefault(first[i]["family"], {"ratio": [], "aa": {a: [], b: []}, "err": []})
            f["ratio"].append(gm(t[a]) / gm(t[b]))
            for lab in labels:
                if len(t[lab]) > 1:
                    f["aa"][lab].append(t[lab][-1] / t[lab][0])
            e = first[i].get(ERRORS[p], "")
            if e not in ("", "nan"):
                f["err"].append(abs(float(e)))
        for fam, f in sorted(fams.items()):
            e = sorted(f["err"])
            aa = f["aa"][a] + f["aa"][b]
            out.append({"pass": p, "family": fam, "cases": len(f["ratio"]), "geomean": gm(f["ratio"]),
                        "lowest": min(f["ratio"]), "highest": max(f["ratio"]),
                        "aa_lowest": min(aa) if aa else None, "aa_highest": max(aa) if aa else None,
                        "model_median_abs_error": e[len(e) // 2] if e else None,
                        "model_worst_abs_error": e[-1] if e else None})
        allr = [x for f in fams.values() for x in f["ratio"]]
        out.append({"pass": p, "family": "all", "cases": len(allr), "geomean": gm(allr), "lowest": min(allr),
                    "highest": max(allr), "aa_lowest": None, "aa_highest": None,
                    "model_median_abs_error": None, "model_worst_abs_error": None})
    return a, b, out


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_FOLDER (or its index.csv), in the order they ran")
    ap.add_argument("--json", help="also write the table as JSON (atomically)")
    args = ap.parse_args()
    runs = []
    for r in args.runs:
        lab, sep, path = r.partition("=")
        if not sep or not lab or not path:
            sys.exit(f"method_ab: {r}: expected LABEL=RUN")
        runs.append((lab, load(path)))
    a, b, rows = table(runs)
    print(f"| pass | family | cases | {a} / {b}: geomean | lowest | highest | A/A spread (later run / first) | model |error| median / worst |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        aa = "-" if r["aa_lowest"] is None else f"{r['aa_lowest']:.3f}-{r['aa_highest']:.3f}"
        print(f"| {r['pass']} | {r['family']} | {r['cases']} | {r['geomean']:.4f} | {r['lowest']:.3f} | "
              f"{r['highest']:.3f} | {aa} | {pct(r['model_median_abs_error'])} / {pct(r['model_worst_abs_error'])} |")
    if args.json:
        save_json(args.json, {"a": a, "b": b, "runs": [f"{lab}={p}" for lab, p in
                                                        (r.partition("=")[::2] for r in args.runs)], "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
