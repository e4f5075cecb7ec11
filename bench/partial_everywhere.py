#!/usr/bin/env python3
"""An interval mask whose every tile is partial: the partial tile's cost at full length (issue 25).

    python3 bench/partial_everywhere.py --seqlen 8192 --out partial.npy [--check FMSIM]
    fmsim run --mask partial.npy --bidir --kernel sm90 ...   # against --family full, same shape
    python3 bench/partial_everywhere.py --summary DIR [--json OUT]   # bench/gpu.sh partialall's runs

Column j masks one row, r_j = (j mod 128) * STEP + (j div 128) mod STEP (STEP = --step, 64 by
default; a bidir-4 interval file, Paddle's startend_row_indices [1, 1, S, 4]: LTS = r_j,
LTE = r_j + 1, no upper interval). Every column tile of 128 keys then masks a row every STEP
rows, so every tile of at least STEP rows and 128 columns is partial and none is skipped: the
kernel visits the full mask's tiles, in the same items and order, each with its mask applied.
Its time over the full mask's is the partial tile's cost over an unmasked one, free of the
position in the row and of the item lengths that mix into the same ratio on the paper's masks.
--check runs `fmsim analyze` at 128 x 128, 192 x 128 (the sm90 forward's tiles) and 64 x 128 (the
backward's) and fails unless every tile is partial. The file is written atomically.

--summary DIR reads the `fmsim run --json` outputs bench/gpu.sh partialall leaves there,
pe-HD-METHOD-rR.json (this mask) and full-HD-rR.json (the full mask, the same shape, run right
after them in each round), and prints per head dim, method and pass the ratio of the medians
in each round and their geometric mean: the partial tile's cost over the unmasked one's.
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


def median_ms(path, pass_):
    try:
        d = json.load(open(path))
        t = (d if pass_ == "fwd" else d["backward"])["timing"]["median_ms"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"partial_everywhere: {path}: no {pass_} time ({type(e).__name__}: {e})")
    if not isinstance(t, (int, float)) or not t > 0:
        sys.exit(f"partial_everywhere: {path}: no {pass_} time (a run without a GPU?)")
    return float(t)


def summary(folder, out_json):
    rows = []
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    runs = [n[3:-5].split("-") for n in names if n.startswith("pe-") and n.endswith(".json")]
    if not runs:
        sys.exit(f"partial_everywhere: {folder}: no pe-HD-METHOD-rR.json")
    for hd, m in sorted({(int(h), m) for h, m, _ in runs}):
        rounds = sorted(r for h, mm, r in runs if int(h) == hd and mm == m)
        for pass_ in ("fwd", "bwd"):
            ratios = [median_ms(os.path.join(folder, f"pe-{hd}-{m}-{r}.json"), pass_) /
                      median_ms(os.path.join(folder, f"full-{hd}-{r}.json"), pass_) for r in rounds]
            gm = float(np.exp(np.mean(np.log(ratios))))
            rows.append({"head_dim": hd, "method": m, "pass": pass_, "rounds": ratios, "geomean": gm})
            print(f"head dim {hd:3d} {m:6s} {pass_}: partial everywhere / full " +
                  " ".join(f"{x:.3f}" for x in ratios) + f"  (geomean {gm:.3f})")
    if out_json:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out_json)), prefix=".pe.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"folder": folder, "rows": rows}, f, indent=1)
        os.replace(tmp, out_json)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--step", type=int, default=64, help="rows between masked rows of a column tile")
    ap.add_argument("--out")
    ap.add_argument("--check", metavar="FMSIM", help="verify with fmsim analyze that every tile is partial")
    ap.add_argument("--summary", metavar="DIR", help="the ratio table of bench/gpu.sh partialall's runs")
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
    if a.check:
        check(a.check, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
