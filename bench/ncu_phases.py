#!/usr/bin/env python3
"""Nsight Compute's warp-state samples of one kernel by phase of its source: where a kernel's
warps spend their time, per unit of work (kernels/PERF_NOTES.md, "R2P: what a partial tile's
cycles are spent on").

    ncu --set full --import-source yes -k regex:KERNEL -c 1 -o rep CMD...
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep-sass.csv
    cuobjdump -xelf all LIB && nvdisasm -g -c CUBIN > kernel.sass
    python3 bench/ncu_phases.py kernel.sass FUNCTION rep-sass.csv --file fm_sm90_fwd.cuh \\
        --phase producer=189-323 --phase mask=330-385 ... [--unit 1064960] [--warps 8] [--json OUT]

    python3 bench/ncu_phases.py kernel.sass FUNCTION rep-sass.csv --file fm_sm90_fwd.cuh \\
        --functions kernels/fm_sm90_fwd.cuh          # a phase per function of that source

Each SASS instruction of FUNCTION (nvdisasm -g's line comments) belongs to the phase of the
last line of --file seen before it in program order (the inlined helpers of other files count
to the phase that calls them); instructions before any such line are "other". Printed per
phase: samples and warp instructions executed per --unit (e.g. the visited tiles), the top
stall reasons, and with --warps N the cycles per unit of one of N warps of the phase
(samples x the sampling interval x the CTA's warps / N; --interval, --cta-warps).
"""
import argparse
import collections
import csv
import json
import os
import re
import sys
import tempfile


def sass_phases(path, func, file, phases):
    """{offset: phase} of func's instructions."""
    lines = open(path).read().split("\n")
    head = ".text." + func + ":"
    start = next((i for i, l in enumerate(lines) if l.startswith(head)), None)
    if start is None:
        sys.exit(f"ncu_phases: {path}: no function {func}")
    ctx, out = -1, {}
    for line in lines[start + 1:]:
        if line.startswith("//----"):
            break
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)', line)
        if m:
            if os.path.basename(m.group(1)) == file:
                ctx = int(m.group(2))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s", line)
        if m:
            out[int(m.group(1), 16)] = next((n for n, a, b in phases if a <= ctx <= b), "other")
    return out


SKIP_NAMES = {"__launch_bounds__", "if", "for", "while", "switch", "return", "sizeof"}


def function_phases(source):
    """[(name, first line, last line)] of the functions defined at the start of a line in source
    (`__device__`, `__global__`, `static`, `inline` or an FMLR_ macro first, after a `template
    <...>` on the same line if any; the name is the first identifier followed by '(' that is not a
    bounds macro), each up to the next one."""
    try:
        lines = open(source).read().split("\n")
    except OSError as e:
        sys.exit(f"ncu_phases: {source}: {e.strerror}")
    starts = []
    for i, line in enumerate(lines, 1):
        if not re.match(r"(template\s*<[^>]*>\s*)?(__device__|__global__|static |inline |FMLR_DEV|FMLR_KERNEL)", line):
            continue
        names = [n for n in re.findall(r"(\w+)\s*\(", line) if n not in SKIP_NAMES and not n.endswith("_BOUNDS")]
        if names:
            starts.append((names[0], i))
    return [(n, a, (starts[k + 1][1] - 1) if k + 1 < len(starts) else 10 ** 9) for k, (n, a) in enumerate(starts)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sass"), ap.add_argument("function"), ap.add_argument("csv")
    ap.add_argument("--file", required=True, help="the source file whose lines name the phases")
    ap.add_argument("--phase", action="append", default=[], help="NAME=A-B (lines of --file), repeatable")
    ap.add_argument("--functions", metavar="SOURCE", help="a phase per function defined in SOURCE (--file's text)")
    ap.add_argument("--unit", type=float, default=1.0, help="divide by this (e.g. work items in millions)")
    ap.add_argument("--warps", type=int, default=0, help="warps of a phase's role, for cycles per unit")
    ap.add_argument("--cta-warps", type=int, default=12, help="resident warps per SM (one CTA a SM)")
    ap.add_argument("--interval", type=float, default=2048, help="cycles between two samples of an SM")
    ap.add_argument("--json", help="also write the table as JSON (atomically)")
    a = ap.parse_args()
    phases = []
    for p in a.phase:
        m = re.fullmatch(r"([\w:.-]+)=(\d+)-(\d+)", p)
        if not m:
            sys.exit(f"ncu_phases: --phase {p}: expected NAME=A-B")
        phases.append((m.group(1), int(m.group(2)), int(m.group(3))))
    if a.functions:
        phases += function_phases(a.functions)
    of = sass_phases(a.sass, a.function, a.file, phases)
    rows = list(csv.reader(open(a.csv)))
    if len(rows) < 3 or "Address" not in rows[1]:
        sys.exit(f"ncu_phases: {a.csv}: not ncu's source page as CSV (--page source --csv --print-source sass)")
    hdr, data = rows[1], rows[2:]
    ia, iss = hdr.index("Address"), hdr.index("Warp Stall Sampling (All Samples)")
    iex = hdr.index("Instructions Executed")
    reasons = [(i, h[6:]) for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    base = int(data[0][ia], 16)
    if len(data) != len(of):
        sys.exit(f"ncu_phases: {a.csv} has {len(data)} instructions, {a.function} in {a.sass} {len(of)}: another build")
    agg = collections.defaultdict(collections.Counter)
    for r in data:
        c = agg[of[int(r[ia], 16) - base]]
        c["samples"] += int(r[iss] or 0)
        c["instructions"] += int(r[iex] or 0)
        for i, name in reasons:
            c[name] += int(r[i] or 0)
    total = sum(c["samples"] for c in agg.values())
    table = []
    for name, c in sorted(agg.items(), key=lambda kv: -kv[1]["samples"]):
        top = sorted(((v, k) for k, v in c.items() if k not in ("samples", "instructions")), reverse=True)[:3]
        row = {"phase": name, "samples_per_unit": c["samples"] / a.unit, "share": c["samples"] / total,
               "instructions_per_unit": c["instructions"] / a.unit,
               "stalls": {k: v / max(c["samples"], 1) for v, k in top}}
        if a.warps:
            row["cycles_per_unit_per_warp"] = c["samples"] / a.unit * a.interval * a.cta_warps / a.warps
        table.append(row)
        print(f"{name:16s} {row['samples_per_unit']:10.5f} samples {100 * row['share']:5.1f}%  "
              f"{row['instructions_per_unit']:10.2f} instr"
              + (f"  {row['cycles_per_unit_per_warp']:8.1f} cycles/warp" if a.warps else "")
              + "  " + " ".join(f"{k}={100 * v:.0f}%" for k, v in row["stalls"].items()))
    if a.json:
        d = os.path.dirname(os.path.abspath(a.json))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".ncu_phases.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"sass": os.path.basename(a.sass), "function": a.function, "csv": os.path.basename(a.csv),
                       "unit": a.unit, "warps": a.warps, "phases": table}, f, indent=1)
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
