#!/usr/bin/env python3
"""Predicted against measured kernel time, case by case: the timing model's error table.

    validate_model.py RUN [RUN...] --profile PROFILE [--fmsim BIN] [--out TABLE.json]
    validate_model.py RUN [RUN...] --from-index [--profile PROFILE] [--out TABLE.json]
    validate_model.py --export OUT.json TABLE [TABLE...] --gpu NAME --kernel sm80 --date YYYY-MM-DD

RUN is what a GPU run left behind: a scenario run folder (`fmsim run`, `fmsim bench`:
index.json with each kernel's time, and the cases' traces; the cases of the profile's
kernel are compared), a bench/protocol_bench.py JSON (fmsim's sustained and burst figures,
two sources), an older bench summary.json (its cases and sweep points), an
fmsim-measurements JSON file, a bench table (merged.txt) or kernels/PERF_NOTES.md (its
per-family tables). Every case is predicted by `fmsim predict --json` on the very mask the
run measured (its interval file, or its family rebuilt from the recorded parameters and
seeds), with the profile's kernel; the table gives measured and predicted time and the
relative error, and the median and worst |error| per source and over all.

--from-index takes the predictions a scenario run wrote itself (`fmsim run --gpu`, `fmsim bench
--gpu`, the profile: key, or the GPU's own profile: "predicted_ms" in index.json beside each
time, the profile named in run.json) instead of calling `fmsim predict`: the same numbers,
from the same function (core/fm_timing), without a second pass over the masks. A --profile
given with it must be the one the run names.

--export turns the tables that only exist as text (merged.txt, PERF_NOTES.md) into an
fmsim-measurements file that `fmsim calibrate` reads.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER_TOKENS, PAPER_HIDDEN = 131072, 4096


def case(pass_="fwd", **kw):
    c = {"params": [], "seed": 0, "sample": None, "mask": None, "causal": None, "trace": None,
         "kernel": None, "tile": None, "pass": "fwd", "clock": "burst"}
    c.update(kw)
    c["pass"] = pass_
    return c


def split_params(text):
    """'w=512 seed=3' -> (['w=512'], 3): seed= is the draw's seed, not a family parameter."""
    params, seed = [], 0
    for tok in (text or "").split():
        if tok.startswith("seed="):
            seed = int(tok[5:])
        else:
            params.append(tok)
    return params, seed


def run_profiles(folder):
    """{kernel: profile} of a scenario run's predictions (run.json: name, gpu, kernel, date),
    {} without."""
    path = os.path.join(folder, "run.json")
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        run = json.load(f)
    return {p["kernel"]: p for p in run.get("profiles") or []}


def read_scenario(folder):
    """A scenario run (`fmsim run`, `fmsim bench`): one case per index.json row, kernel and
    pass that timed it (the forward's figures in the kernel's record, the backward's in its
    "bwd" object); the mask is the case's trace (cases/ID), predicted with --trace. The run's
    own prediction (predicted_ms) and its profile come along for --from-index."""
    with open(os.path.join(folder, "index.json")) as f:
        rows = json.load(f)
    profiles = run_profiles(folder)
    out = []
    for r in rows:
        for kr in r.get("kernels", []):
            for k in (kr, kr.get("bwd") or {}):
                if k.get("time_ms") is None:
                    continue
                pas = k.get("pass", "fwd")
                out.append(case(id="%s %s%s" % (r["id"], kr["kernel"], " bwd" if pas == "bwd" else ""),
                                kernel=kr["kernel"], source=os.path.basename(os.path.normpath(folder)),
                                family=r.get("family"), seqlen=r["seqlen"], batch=r["batch"],
                                heads=r["heads"], head_dim=r["head_dim"], time_ms=k["time_ms"],
                                trace=os.path.join(folder, "cases", r["id"]), pass_=pas,
                                tile=(k["br"], k["bc"]) if k.get("br") else None,
                                predicted_ms=k.get("predicted_ms"),
                                profile=profiles.get(kr["kernel"], {}).get("name")))
    return out


def read_bench(path):
    with open(path) as f:
        d = json.load(f)
    out, folder = [], os.path.dirname(path)
    for c in d.get("cases", []):
        skip = c.get("skip") or {}
        if skip.get("median_ms") is None:
            continue
        params, seed = split_params(c.get("params"))
        mask = os.path.join(folder, c.get("columns_file") or "")
        out.append(case(id=c["id"], source="bench", family=c["family"], seqlen=c["seqlen"],
                        batch=c["batch"], heads=c["heads"], head_dim=c["head_dim"],
                        params=params, seed=seed, time_ms=skip["median_ms"],
                        mask=mask if os.path.isfile(mask) else None, causal=c.get("causal")))
    sweep, settings = d.get("sweep") or {}, d.get("settings") or {}
    hd = out[0]["head_dim"] if out else 128
    for p in sweep.get("points", []):
        if p.get("median_ms") is None:
            continue
        S, docs = sweep["seqlen"], p["docs"]  # bench draws seed + 1000 + draw, docs_min = docs_max
        out.append(case(id="sweep_%s_%d" % (p["family"], p["draw"]), source="sweep",
                        family=p["family"], seqlen=S, batch=settings["tokens"] // S,
                        heads=settings["hidden"] // hd, head_dim=hd,
                        params=["docs_min=%d" % docs, "docs_max=%d" % docs],
                        seed=settings.get("seed", 0) + 1000 + p["draw"], time_ms=p["median_ms"]))
    return out


def read_measurements(path):
    with open(path) as f:
        d = json.load(f)
    out = []
    for c in d["cases"]:
        params = c.get("params", [])
        params, seed = split_params(params) if isinstance(params, str) else (params, c.get("seed", 0))
        out.append(case(id=c["id"], source=c.get("source", os.path.basename(path)),
                        family=c["family"], seqlen=c["seqlen"], batch=c["batch"], heads=c["heads"],
                        head_dim=c["head_dim"], params=params, seed=seed, sample=c.get("sample"),
                        time_ms=c["time_ms"]))
    return out


def paper_case(source, family, S, D, ms, B=None, H=None, seed=0):
    """A case of the paper's kernel table: default parameters, document sample 0."""
    B = B or max(1, PAPER_TOKENS // S)
    H = H or PAPER_HIDDEN // D
    return case(id="%s_S%d_hd%d" % (family, S, D), source=source, family=family, seqlen=S,
                batch=B, heads=H, head_dim=D, seed=seed, time_ms=ms)


def read_merged_txt(path):
    """merged.txt of bench/merge.py: rows 'D S family rho fmsim_ms TFLOP/s ...'."""
    out = []
    with open(path) as f:
        for line in f:
            m = re.match(r"^(\d+)\s+(\d+)\s+([a-z_]+)\s+([\d.]+)\s+([\d.]+)\s", line)
            if m and len(line.split()) >= 10:
                out.append(paper_case("bench-" + os.path.basename(os.path.dirname(path)), m.group(3),
                                      int(m.group(2)), int(m.group(1)), float(m.group(5))))
    return out


def read_perf_notes(path):
    """kernels/PERF_NOTES.md: a line 'S=.. B=.. H=.. D=.. tile ..' heads a block of rows
    'family rho skip ...' that the closing ``` ends."""
    out, hdr = [], None
    with open(path) as f:
        for line in f:
            h = re.match(r"^S=(\d+) B=(\d+) H=(\d+) D=(\d+) tile (\d+)x(\d+)", line)
            if h:
                hdr = tuple(int(x) for x in h.groups())
                continue
            if line.startswith("```"):
                hdr = None
                continue
            m = re.match(r"^([a-z_]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+%", line)
            if hdr and m:
                S, B, H, D, br, bc = hdr
                # fm_kernel_bench draws with its --seed, 1 by default
                c = paper_case("perf-notes-hd%d" % D, m.group(1), S, D, float(m.group(3)), B, H, 1)
                c["tile"] = (br, bc)  # the kernel's: compared with the profile's
                out.append(c)
    return out


def read_protocol(path):
    """A bench/protocol_bench.py run (fmsim-protocol-bench): fmsim's cases, each pass twice,
    sources protocol-sustained and protocol-burst (docs/DESIGN.md, "How we measure"), each
    predicted in its own clock state (fmsim predict --clock sustained, burst). The
    implementation is "fmsim", else the first fmsim[METHOD] of the run (its reference)."""
    with open(path) as f:
        d = json.load(f)
    try:
        return protocol_cases(d)
    except (KeyError, TypeError) as e:
        raise SystemExit("%s: not a complete protocol_bench record (no %s)" % (path, e))


def protocol_cases(d):
    out = []
    for r in d["records"]:
        impls = r.get("impls", {})
        name = "fmsim" if "fmsim" in impls else next((n for n in impls if n.startswith("fmsim[")), None)
        if name is None or "error" in impls[name]:
            continue
        for fig in ("sustained", "burst"):
            out.append(case(r["pass_"], id="%s-%s" % (r["id"], r["pass_"]), source="protocol-" + fig, clock=fig,
                            family=r["family"], seqlen=r["seqlen"], batch=r["batch"], heads=r["heads"],
                            head_dim=r["head_dim"], time_ms=impls[name][fig]["median_ms"]))
    return out


def read_run(path):
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "index.json")):
            return read_scenario(path)
        return read_bench(os.path.join(path, "summary.json"))
    if path.endswith(".md"):
        return read_perf_notes(path)
    if path.endswith(".txt"):
        return read_merged_txt(path)
    with open(path) as f:
        d = json.load(f)
    if isinstance(d, list):
        return read_scenario(os.path.dirname(path) or ".")
    if d.get("format") == "fmsim-measurements":
        return read_measurements(path)
    if d.get("format") == "fmsim-protocol-bench":
        return read_protocol(path)
    if d.get("format") == "fmsim-trace" and d.get("kind") == "bench":
        return read_bench(path)
    raise SystemExit("%s: not a run output this script knows" % path)


def predict(fmsim, profile, kernel, c):
    cmd = [fmsim, "predict", "--json", "--gpu", profile, "--kernel", kernel, "--pass", c["pass"],
           "--clock", c["clock"], "--head-dim", str(c["head_dim"]), "--batch", str(c["batch"]), "--heads", str(c["heads"])]
    if c["trace"]:
        cmd += ["--trace", c["trace"]]
    elif c["mask"]:
        cmd += ["--mask", c["mask"], "--causal" if c["causal"] else "--bidir"]
    else:
        cmd += ["--family", c["family"], "--seqlen", str(c["seqlen"]), "--seed", str(c["seed"])]
        if c["sample"] is not None and c["sample"] >= 0:
            cmd += ["--sample", str(c["sample"])]
        for p in c["params"]:
            cmd += ["--param", p]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("case %s: %s: %s" % (c["id"], " ".join(cmd), r.stderr.strip()))
    return json.loads(r.stdout)["passes"][0]["tiles"][0]["time_ms"]


def stats(errors):
    a = [abs(e) for e in errors]
    return {"cases": len(a), "median_abs_error": statistics.median(a) if a else None,
            "worst_abs_error": max(a) if a else None}


def indexed_cases(args):
    """--from-index: the cases of scenario runs that carry the run's own prediction, and the
    profile they name (one for all, and --profile's when given)."""
    cases, names, entry = [], set(), None
    for run in args.runs:
        if not os.path.isfile(os.path.join(run, "index.json")):
            raise SystemExit("%s: --from-index reads scenario runs (a folder with index.json)" % run)
        profiles = run_profiles(run)
        entry = entry or next(iter(profiles.values()), None)
        if not profiles:
            raise SystemExit("%s: run.json names no profile: the run made no prediction (give it "
                             "--gpu PROFILE or profile:, or drop --from-index)" % run)
        for c in read_scenario(run):
            if c["profile"] and c["predicted_ms"] is not None:
                cases.append(c)
                names.add(c["profile"])
    if len(names) > 1:
        raise SystemExit("the runs were predicted with several profiles (%s): validate one at a time"
                         % ", ".join(sorted(names)))
    if args.profile and names and args.profile not in names:
        raise SystemExit("--profile %s: the runs were predicted with %s" % (args.profile, names.pop()))
    if not cases:
        raise SystemExit("no case has both a measured and a predicted time")
    return cases, entry


def validate(args):
    if args.from_index:  # the profile as run.json names it (its file need not be at hand)
        cases, prof = indexed_cases(args)
        args.profile = prof["name"]
    else:
        with open(profile_path(args.profile)) as f:
            prof = json.load(f)
    tiles = {(name, e["head_dim"]): (e["br"], e["bc"])
             for name, key in (("fwd", "forward"), ("bwd", "backward")) for e in prof.get(key, [])}
    if not args.from_index:
        cases = [c for run in args.runs for c in read_run(run)  # the profile's kernel, or unnamed;
                 if c["kernel"] in (None, prof["kernel"])       # passes and head dims it has a fit of
                 and (c["pass"], c["head_dim"]) in tiles and c["tile"] in (None, tiles[(c["pass"], c["head_dim"])])]
    if not cases:
        raise SystemExit("no case of %s: none of the runs timed kernel %s at a pass and head dim the "
                         "profile fits" % (", ".join(args.runs), prof["kernel"]))
    rows = []
    for c in cases:
        pred = c["predicted_ms"] if args.from_index else predict(args.fmsim, args.profile, prof["kernel"], c)
        rows.append({"id": c["id"], "source": c["source"], "pass": c["pass"], "family": c["family"],
                     "seqlen": c["seqlen"], "batch": c["batch"], "heads": c["heads"],
                     "head_dim": c["head_dim"], "measured_ms": c["time_ms"], "predicted_ms": pred,
                     "error": pred / c["time_ms"] - 1})
    sources = sorted({r["source"] for r in rows}) + sorted({"pass " + r["pass"] for r in rows})
    summary = {s: stats([r["error"] for r in rows if s in (r["source"], "pass " + r["pass"])])
               for s in sources}
    summary["all"] = stats([r["error"] for r in rows])
    print("%-44s %-18s %12s %12s %8s" % ("case", "source", "measured ms", "predicted ms", "error"))
    for r in rows:
        print("%-44.44s %-18.18s %12.4f %12.4f %+7.2f%%" % (r["id"], r["source"], r["measured_ms"],
                                                          r["predicted_ms"], 100 * r["error"]))
    print()
    for s in sources + ["all"]:
        v = summary[s]
        print("%-20s %4d cases  |error| median %5.2f%%  worst %5.2f%%" %
              (s, v["cases"], 100 * v["median_abs_error"], 100 * v["worst_abs_error"]))
    if args.out:
        doc = {"format": "fmsim-model-validation", "version": 1, "profile": args.profile,
               "predictions": "the runs' index.json" if args.from_index else "fmsim predict",
               "gpu": prof["gpu"], "kernel": prof["kernel"], "runs": args.runs, "cases": rows,
               "summary": summary}
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.out)


def profile_path(name):
    if os.path.isfile(name):
        return name
    p = os.path.join(ROOT, "data", "gpu", name if name.endswith(".json") else name + ".json")
    if not os.path.isfile(p):
        raise SystemExit("no profile %s (not a file, not in data/gpu)" % name)
    return p


def export(args):
    cases = [c for run in args.runs for c in read_run(run)]
    if any(c["mask"] or c["trace"] for c in cases):
        raise SystemExit("--export takes text tables; runs with interval files go to fmsim calibrate as they are")
    doc = {"format": "fmsim-measurements", "version": 1, "gpu": args.gpu, "kernel": args.kernel,
           "date": args.date, "from": args.runs,
           "cases": [{k: c[k] for k in ("id", "source", "family", "params", "seqlen", "batch", "heads",
                                         "head_dim", "seed", "sample", "time_ms")} for c in cases]}
    tmp = args.export + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.export)
    print("wrote %d cases to %s" % (len(cases), args.export))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN")
    ap.add_argument("--profile", help="GPU profile: a name in data/gpu or a path")
    ap.add_argument("--fmsim", default=os.path.join(ROOT, "build", "app", "fmsim"))
    ap.add_argument("--from-index", action="store_true",
                    help="take the predictions the scenario runs wrote (index.json) instead of "
                         "calling fmsim predict")
    ap.add_argument("--out", help="write the table as JSON (fmsim-model-validation)")
    ap.add_argument("--export", metavar="OUT.json", help="write the runs as an fmsim-measurements file")
    ap.add_argument("--gpu", default="NVIDIA H200")
    ap.add_argument("--kernel", default="sm80")
    ap.add_argument("--date")
    args = ap.parse_args()
    if args.export:
        return export(args)
    if not args.profile and not args.from_index:
        ap.error("--profile is required (or --from-index, or --export)")
    validate(args)


if __name__ == "__main__":
    sys.exit(main())
