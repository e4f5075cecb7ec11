#!/usr/bin/env python3
"""An interval mask whose every tile is partial: the partial tile's cost at full length (issue 25).

    python3 bench/partial_everywhere.py --seqlen 8192 --out pe.npy --scenario pe.yaml [--check FMSIM]
    fmsim run pe.yaml --mask-method r2p --out run1      # the mask and the full one, head dims 128, 64
    python3 bench/partial_everywhere.py --summary r2p=run1 slices=run2 ... [--json OUT]

Column j masks one row, r_j = (j mod 128) * STEP + (j div 128) mod STEP (STEP = --step, 64 by
default; a bidir-4 interval file, Paddle's startend_row_indices [1, 1, S, 4]: LTS = r_j,
LTE = r_j + 1, no upper interval). Every column tile of 128 keys then masks a row every STEP
rows, so every tile of at least STEP rows and 128 columns is partial and none is skipped: the
kernel visits the full mask's tiles, in the same items and order, each with its mask applied.
Its time over the full mask's is the partial tile's cost over an unmasked one, free of the
position in the row and of the item lengths that mix into the same ratio on the paper's masks.
--check runs `fmsim analyze` at 128 x 128, 192 x 128 (the sm90 forward's tiles) and 64 x 128 (the
backward's) and fails unless every tile is partial. The file is written atomically.

--scenario writes the scenario that times it: this mask and the full mask of the same shape
(B 16, H 4096 / D) at head dims 128 and 64, both passes, in one run. --summary reads such runs
(METHOD=RUN_FOLDER, in the order they ran: bench/gpu.sh partialall makes them) and prints per
head dim, method and pass the ratio of the two masks' medians in each run and their geometric
mean: the partial tile's cost over the unmasked one's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def intervals(seqlen, step):
    j = np.arange(seqlen, dtype=np.int64)
    r = ((j % 128) * step + (j // 128) % step) % seqlen
    iv = np.zeros((1, 1, seqlen, 4), dtype=np.int32)
    iv[..., 0] = r
    iv[..., 1] = r + 1
    return iv


def check(fmsim, path):
    for br in (128, 192, 64):
        out = subprocess.run([fmsim, "analyze", "--intervals", path, "--bidir", "--br", str(br), "--bc", "128",
                              "--json"], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"partial_everywhere: fmsim analyze: {out.stderr.strip()}")
        d = json.loads(out.stdout)
        if d["tiles_partial"] != d["tiles_total"]:
            sys.exit(f"partial_everywhere: at {br} x 128, {d['tiles_partial']} of {d['tiles_total']} tiles partial")
        print(f"{br} x 128: {d['tiles_partial']} of {d['tiles_total']} tiles partial")


SCENARIO = """name: partial-everywhere
description: >-
  Issue 25's per-tile bar at full length: a mask whose every tile is partial
  (bench/partial_everywhere.py) beside the full mask of the same shape, in one run.
batch: 16
heads: auto
head_dim: [128, 64]
pass: both
warmup: 3
reps: 20
kernel: sm90
run: [analyze, gpu]
masks:
  - intervals: {file}
    causal: false
  - family: full
    seqlen: {seqlen}
"""


def times(run):
    """{head_dim: {"partial": (fwd, bwd), "full": (fwd, bwd)}} of one scenario run's index.json
    (bwd None in a forward-only run: the scenario with `pass: fwd`)."""
    path = os.path.join(run, "index.json")
    try:
        cases = json.load(open(path))
    except (OSError, ValueError) as e:
        sys.exit(f"partial_everywhere: {path}: {e}")
    out = {}
    for c in cases:
        k = c["kernels"][0] if c.get("kernels") else {}
        t = (k.get("time_ms"), (k.get("bwd") or {}).get("time_ms"))
        ok = [isinstance(x, (int, float)) and x > 0 for x in t]
        if not ok[0] or (t[1] is not None and not ok[1]):
            sys.exit(f"partial_everywhere: {path}: {c['id']} has no forward time (a run without a GPU?)")
        kind = "full" if c["family"] == "full" else "partial"
        out.setdefault(c["head_dim"], {})[kind] = t
    return out


def summary(runs, out_json):
    """RUNS: LABEL=FOLDER (the mask method) in the order they ran."""
    rows = []
    per = {}
    for r in runs:
        lab, sep, folder = r.partition("=")
        if not sep:
            sys.exit(f"partial_everywhere: {r}: expected METHOD=RUN_FOLDER")
        for hd, t in times(folder).items():
            if set(t) != {"full", "partial"}:
                sys.exit(f"partial_everywhere: {folder}: head dim {hd} lacks the full or the partial case")
            for i, pass_ in enumerate(("fwd", "bwd")):
                if t["partial"][i] is not None and t["full"][i] is not None:
                    per.setdefault((hd, lab, pass_), []).append(t["partial"][i] / t["full"][i])
    for (hd, lab, pass_), ratios in sorted(per.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2])):
        gm = float(np.exp(np.mean(np.log(ratios))))
        rows.append({"head_dim": hd, "method": lab, "pass": pass_, "rounds": ratios, "geomean": gm})
        print(f"head dim {hd:3d} {lab:6s} {pass_}: partial everywhere / full " +
              " ".join(f"{x:.3f}" for x in ratios) + f"  (geomean {gm:.3f})")
    if out_json:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out_json)), prefix=".pe.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"runs": runs, "rows": rows}, f, indent=1)
        os.replace(tmp, out_json)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--step", type=int, default=64, help="rows between masked rows of a column tile")
    ap.add_argument("--out")
    ap.add_argument("--check", metavar="FMSIM", help="verify with fmsim analyze that every tile is partial")
    ap.add_argument("--scenario", metavar="YAML", help="also write the scenario that runs it beside the full mask")
    ap.add_argument("--summary", nargs="+", metavar="METHOD=RUN", help="the ratio table of the scenario's runs")
    ap.add_argument("--json", help="with --summary: also the table as JSON (atomically)")
    a = ap.parse_args()
    if a.summary:
        return summary(a.summary, a.json)
    if not a.out:
        sys.exit("partial_everywhere: --out FILE.npy (or --summary DIR) is required")
    if a.seqlen < 128 or a.seqlen % 128 or not 1 <= a.step <= a.seqlen // 128:
        sys.exit(f"partial_everywhere: --seqlen {a.seqlen} --step {a.step}: expected a multiple of 128 and "
                 f"1 <= step <= seqlen / 128")
    d = os.path.dirname(os.path.abspath(a.out))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".partial_everywhere.", suffix=".npy")
    with os.fdopen(fd, "wb") as f:
        np.save(f, intervals(a.seqlen, a.step))
    os.replace(tmp, a.out)
    if a.scenario:
        rel = os.path.relpath(os.path.abspath(a.out), os.path.dirname(os.path.abspath(a.scenario)))
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.scenario)), prefix=".pe.", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(SCENARIO.format(file=rel, seqlen=a.seqlen))
        os.replace(tmp, a.scenario)
    if a.check:
        check(a.check, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
