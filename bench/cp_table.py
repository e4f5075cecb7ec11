#!/usr/bin/env python3
"""The curated table of the multi-GPU benchmark (bench/cp_bench.py's JSON; no GPU needed).

    python3 bench/cp_table.py cp.json [more.json ...] > bench/results/cp-scaling.md

Per length S, one row per family, P and pass: fmsim's step time (sustained, the slowest
rank) per sharding and exchange with its scaling efficiency T1 / (P x TP) against one GPU
(P = 1, same pass), the mask-aware/contiguous ratio (each at its faster exchange), and the
measured per-rank compute time over cp-plan's prediction (lowest and highest ratio over the
row's ranks and runs); then, with more than one length, the best efficiency per family and
length at the most ranks; then fmsim against PyTorch's context_parallel on full and causal
masks; then issue 24's bars, each with the number that decides it (cp-plan's compute bar
once per length).

Several files are several run sets (different commits or days) of one device and shape:
their records and plans are taken together, each run set named in the header (its commit,
date when the file has one, commands and lengths). A case (family, S, P, sharding,
exchange, pass) in two files is the later file's (a re-run, e.g. with a newer kernel); the
earlier record stays its own run's. Every figure that divides two times takes both from one
run set: an efficiency T1 / (P x TP) the fastest TP of T1's run, mask-aware / contiguous and
fmsim / torch the latest run holding both sides, a compute ratio the record's run's plan. A
case twice in one file, or two shapes, is refused.
"""
import json
import sys

LONG = 1048576  # the bars' length
BAR_FAMILIES = ("full", "causal", "causal_document", "document", "prefix_lm_causal")
EFFICIENCY_BAR = {2: 0.90, 4: 0.85}
MASK_AWARE_BAR = 0.6   # causal_document, 1M, 4 GPUs: mask-aware step / contiguous step at most
MODEL_BAR = 0.15       # cp-plan's per-rank compute within 15% of the measured
PARTS_BELOW = 0.90     # "Where the efficiency goes" explains the runs below this efficiency
SHARDINGS = ("contiguous", "zigzag", "mask-aware")
EXCHANGES = ("allgather", "ring")
SHORT = {"oom": "oom", "error": "err", "timeout": "cut"}


def ms(r):
    """A record's sustained step time, or None (failed, missing)."""
    return r["step_ms"]["sustained"] if r and r.get("status") == "ok" else None


def find(doc, tool, fam, S, P, pass_, every=False, **match) -> list:
    """The current records of a case (every=True: the superseded ones of earlier runs too)."""
    recs = doc["records"] + (doc.get("superseded", []) if every else [])
    return [r for r in recs if r["tool"] == tool and r["family"] == fam and r["seqlen"] == S and
            r["ranks"] == P and r["pass"] == pass_ and all(r.get(k) == v for k, v in match.items())]


def run_of(r) -> int:
    return r.get("run", 0) if r else -1


def fastest(recs: list):
    ok = [r for r in recs if ms(r) is not None]
    return min(ok, key=ms) if ok else None


def one_gpu(doc, fam, S, pass_):
    """The fastest one-GPU (P = 1) record of the case: T1."""
    return fastest(find(doc, "fmsim", fam, S, 1, pass_))


def efficiency(t1, tp, P):
    return t1 / (P * tp) if t1 and tp else None


def scaled(doc, fam, S, P, pass_):
    """(efficiency, the P-rank record): T1 the fastest one-GPU record, TP the fastest of T1's run."""
    one = one_gpu(doc, fam, S, pass_)
    r = fastest([x for x in find(doc, "fmsim", fam, S, P, pass_, every=True) if run_of(x) == run_of(one)])
    return efficiency(ms(one), ms(r), P), r


def latest_pair(a_recs: list, b_recs: list):
    """The fastest of each side from the latest run holding both (None, None if none)."""
    for run in sorted({run_of(r) for r in a_recs} & {run_of(r) for r in b_recs}, reverse=True):
        a = fastest([r for r in a_recs if run_of(r) == run])
        b = fastest([r for r in b_recs if run_of(r) == run])
        if a and b:
            return a, b
    return None, None


def mask_aware_ratio(doc, fam, S, P, pass_):
    a, c = latest_pair(find(doc, "fmsim", fam, S, P, pass_, every=True, sharding="mask-aware"),
                       find(doc, "fmsim", fam, S, P, pass_, every=True, sharding="contiguous"))
    return ms(a) / ms(c) if ms(a) and ms(c) else None


def against_torch(doc, fam, S, P, pass_):
    """(fmsim's fastest record, torch's) from the latest run that timed both."""
    return latest_pair(find(doc, "fmsim", fam, S, P, pass_, every=True),
                       find(doc, "torch", fam, S, P, pass_, every=True))


def compute_ratios(doc, r) -> list:
    """Each rank's measured compute time over cp-plan's prediction for it on the record's exchange."""
    plans = doc.get("plans_by_run", {}).get(run_of(r), doc["plans"])
    plan = plans.get(f"{r['family']}:{r['seqlen']}:{r['ranks']}")
    if ms(r) is None or not r.get("rank_compute_ms") or not plan or "error" in plan:
        return []
    if r["ranks"] == 1:
        g = plan["one_gpu"]
        pred = [g["fwd_ms"] if r["pass"] == "fwd" else g["total_ms"]]
    else:
        x = plan["shardings"][r["sharding"]]["exchanges"][r["exchange"]]
        pred = x["rank_fwd_ms"] if r["pass"] == "fwd" else x["rank_compute_ms"]
    return [m / p for m, p in zip(r["rank_compute_ms"], pred)]


def torch_best(doc, fam, S, P, pass_):
    return fastest(find(doc, "torch", fam, S, P, pass_))


def pct(x):
    return f"{100 * x:.1f}%" if x is not None else "-"


def num(x, fmt=".3f"):
    return format(x, fmt) if x is not None else "-"


def verdict(ok):
    return "not measured" if ok is None else "met" if ok else "not met"


def model_bar(doc, S) -> tuple:
    ratios = [(abs(x - 1), x, r["id"], k) for r in doc["records"] if r["tool"] == "fmsim" and r["seqlen"] == S
              for k, x in enumerate(compute_ratios(doc, r))]
    if not ratios:
        return "-", verdict(None)
    dev, x, rid, k = max(ratios)
    within = sum(1 for d, *_ in ratios if d <= MODEL_BAR)
    return (f"worst {x:.3f} (`{rid}`, rank {k}); {within} of {len(ratios)} ranks within 15%",
            verdict(dev <= MODEL_BAR))


def bars(doc) -> list:
    """Issue 24's Must-reach items that a number decides: (item, number, verdict)."""
    checked = [r["check"] for r in doc["records"] if r["tool"] == "fmsim" and isinstance(r.get("check"), dict)]
    checked += doc.get("check_runs", [])
    passed = sum(1 for c in checked if c.get("passed"))
    out = [("outputs and gradients equal to the one-GPU kernel's within its tolerance rule",
            f"{passed} of {len(checked)} checked runs passed", verdict(passed == len(checked) if checked else None))]
    ranks = {r["ranks"] for r in doc["records"]}  # a bar of P GPUs where the table has P-GPU runs
    if 4 in ranks:
        q = mask_aware_ratio(doc, "causal_document", LONG, 4, "both")
        out.append(("causal_document, 1M tokens, 4 GPUs: mask-aware step (fwd+bwd) at most 0.6x contiguous's",
                    f"{num(q)}x", verdict(q <= MASK_AWARE_BAR if q is not None else None)))
    for fam in BAR_FAMILIES:
        for P, lo in ((P, lo) for P, lo in EFFICIENCY_BAR.items() if P in ranks):
            e, r = scaled(doc, fam, LONG, P, "both")
            where = f" ({r['sharding']}, {r['exchange']})" if e is not None else ""
            out.append((f"{fam}, 1M tokens, {P} GPUs: scaling efficiency (fwd+bwd) at least {lo:.0%}",
                        pct(e) + where, verdict(e >= lo if e is not None else None)))
    for fam in ("full", "causal"):
        for P in (P for P in EFFICIENCY_BAR if P in ranks):
            fr, t = against_torch(doc, fam, LONG, P, "both")
            q = ms(fr) / ms(t) if ms(fr) and ms(t) else None
            out.append((f"{fam}, 1M tokens, {P} GPUs: faster than PyTorch's context_parallel (fwd+bwd)",
                        f"fmsim/torch {num(q)}" + (f" (torch {t['backend']}, {t['exchange']})" if q else ""),
                        verdict(q < 1 if q is not None else None)))
    for S in seqlens(doc):
        out.append((f"cp-plan predicts each rank's measured compute time within 15% (S = {S})",) + model_bar(doc, S))
    return out


def cell(doc, fam, S, P, pass_, sh, ex, t1, t1_run) -> str:
    recs = find(doc, "fmsim", fam, S, P, pass_, sharding=sh, exchange=ex)
    if not recs:
        return ""
    t = ms(recs[0])
    if t is None:
        return SHORT.get(recs[0]["status"], recs[0]["status"])
    e = efficiency(t1, t, P) if run_of(recs[0]) == t1_run else None  # a later run's time: no T1 of its own
    return f"{t:.1f}" + (f" ({pct(e)})" if e is not None else "")


def ratio_range(doc, recs) -> str:
    xs = [x for r in recs for x in compute_ratios(doc, r)]
    return f"{min(xs):.3f}-{max(xs):.3f}" if xs else "-"


def scaling_table(doc, S) -> list:
    pairs = [(s, x) for s in SHARDINGS for x in EXCHANGES]
    hdr = ["family", "P", "pass", "1 GPU ms"] + [f"{s} {x}" for s, x in pairs] + \
          ["best eff.", "mask-aware / contiguous", "compute measured / predicted"]
    out = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for fam in families(doc):
        for P in sorted({r["ranks"] for r in doc["records"] if r["seqlen"] == S}):
            for pass_ in ("fwd", "both"):
                recs = find(doc, "fmsim", fam, S, P, pass_)
                if not recs:
                    continue
                one = one_gpu(doc, fam, S, pass_)
                t1 = ms(one)
                t1_cell = num(t1, ".1f") if t1 else SHORT.get(recs[0]["status"], "-") if P == 1 else "-"
                cells = [fam, str(P), pass_, t1_cell]
                if P == 1:
                    cells += [""] * (len(pairs) + 2)
                else:
                    cells += [cell(doc, fam, S, P, pass_, s, x, t1, run_of(one)) for s, x in pairs]
                    cells += [pct(scaled(doc, fam, S, P, pass_)[0]),
                              num(mask_aware_ratio(doc, fam, S, P, pass_))]
                out.append("| " + " | ".join(cells + [ratio_range(doc, recs)]) + " |")
    return out


def seqlens(doc) -> list:
    return sorted({r["seqlen"] for r in doc["records"]})


def efficiency_table(doc) -> tuple:
    """Per family, the best efficiency (fwd+bwd, any sharding and exchange) at each length, at
    the most ranks of the table: (rows, P)."""
    Ss = seqlens(doc)
    Pmax = max(r["ranks"] for r in doc["records"] if r["tool"] == "fmsim")
    out = ["| family | " + " | ".join(f"S = {S}" for S in Ss) + " |", "|" + "---|" * (len(Ss) + 1)]
    for fam in families(doc):
        cells = []
        for S in Ss:
            e, r = scaled(doc, fam, S, Pmax, "both")
            cells.append(f"{pct(e)} ({r['sharding']}, {r['exchange']})" if e is not None else "-")
        out.append(f"| {fam} | " + " | ".join(cells) + " |")
    return out, Pmax


def efficiency_parts(doc, fam, S, P):
    """The efficiency of the case's fastest run (scaled()) as three measured factors whose product
    it is: T1 / sum(C) (the ranks' kernels together against the one GPU's: split launches, lost
    waves, contention), mean(C) / max(C) (balance) and max(C) / TP (the step beyond the slowest
    rank's kernels: exposed exchange, waits and tails), C the ranks' measured compute. None
    without the ranks' compute."""
    e, r = scaled(doc, fam, S, P, "both")
    c = r.get("rank_compute_ms") if e is not None else None
    if not c:
        return None
    t1 = e * P * ms(r)
    return dict(eff=e, record=r, compute=t1 / sum(c), balance=sum(c) / len(c) / max(c), overlap=max(c) / ms(r),
                exposed_ms=ms(r) - max(c))


def parts_table(doc, below: float) -> tuple:
    """Where the efficiency goes, at the most ranks, for every family and length whose best run
    is below `below`: (rows, P, how many cases had the ranks' compute)."""
    Pmax = max(r["ranks"] for r in doc["records"] if r["tool"] == "fmsim")
    hdr = ["family", "S", "run", "efficiency", "= T1 / sum C", "x mean C / max C", "x max C / step",
           "step - max C (ms)"]
    out, n = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)], 0
    for S in seqlens(doc):
        for fam in families(doc):
            x = efficiency_parts(doc, fam, S, Pmax)
            n += x is not None
            if x is None or x["eff"] >= below:
                continue
            r = x["record"]
            out.append("| " + " | ".join([fam, str(S), f"{r['sharding']}, {r['exchange']}", pct(x["eff"]),
                                          num(x["compute"]), num(x["balance"]), num(x["overlap"]),
                                          num(x["exposed_ms"], ".1f")]) + " |")
    return out, Pmax, n


def best_pick(doc, fam, S, P):
    """(cp-plan's best record, the measured fastest) of a case where every sharding and exchange
    the plan holds was measured (forward and backward, the current records), else None."""
    recs = [r for r in find(doc, "fmsim", fam, S, P, "both") if ms(r) is not None]
    plan = doc.get("plans_by_run", {}).get(run_of(recs[0]), doc["plans"]).get(f"{fam}:{S}:{P}") if recs else None
    if not plan or "best" not in plan:
        return None
    by = {(r["sharding"], r["exchange"]): r for r in recs}
    if any((s, x) not in by for s, sh in plan["shardings"].items() for x in sh["exchanges"]):
        return None
    return by[(plan["best"]["sharding"], plan["best"]["exchange"])], fastest(recs)


def picks_table(doc) -> tuple:
    """cp-plan's best pair against the measured fastest wherever every pair ran: (rows, summary)."""
    hdr = ["family", "S", "P", "cp-plan's best", "measured fastest", "best's step / fastest's"]
    out, qs = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)], []
    for S in seqlens(doc):
        for P in sorted({r["ranks"] for r in doc["records"] if r["seqlen"] == S and r["ranks"] > 1}):
            for fam in families(doc):
                pick = best_pick(doc, fam, S, P)
                if pick is None:
                    continue
                b, f = pick
                qs.append(ms(b) / ms(f))
                out.append("| " + " | ".join([fam, str(S), str(P), f"{b['sharding']}, {b['exchange']}",
                                              f"{f['sharding']}, {f['exchange']}", num(qs[-1])]) + " |")
    within = lambda x: sum(1 for q in qs if q <= 1 + x)  # noqa: E731
    summary = (f"cp-plan's best is the measured fastest in {within(0)} of {len(qs)} cases, within 1% of it in "
               f"{within(0.01)} and within 3% in {within(0.03)}; its step is at most {max(qs):.3f}x the "
               "fastest's." if qs else "")
    return out, summary


def families(doc) -> list:
    seen = [k.split(":")[0] for k in doc["plans"]] + [r["family"] for r in doc["records"]]
    return list(dict.fromkeys(seen))


def torch_table(doc) -> list:
    hdr = ["mask", "S", "P", "pass", "fmsim ms", "torch ms", "fmsim / torch", "torch eff.", "torch check (O rel. err.)"]
    out = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    keys = sorted({(r["family"], r["seqlen"], r["ranks"], r["pass"]) for r in doc["records"] if r["tool"] == "torch"},
                  key=lambda k: (k[0], k[1], k[2], k[3] != "fwd"))
    for fam, S, P, pass_ in keys:
        f, t = against_torch(doc, fam, S, P, pass_)
        t1 = ms(torch_best(doc, fam, S, 1, pass_))
        checks = [f"{r['backend']}-{r['exchange']} {r['check']['out_rel']:.1e}"
                  for r in find(doc, "torch", fam, S, P, pass_) if r.get("check") and "out_rel" in r["check"]]
        q = ms(f) / ms(t) if ms(f) and ms(t) else None
        out.append("| " + " | ".join([
            fam, str(S), str(P), pass_,
            f"{ms(f):.1f} ({f['sharding']}, {f['exchange']})" if ms(f) else "-",
            f"{ms(t):.1f} ({t['backend']}, {t['exchange']})" if ms(t) else
            ", ".join(sorted({r["status"] for r in find(doc, "torch", fam, S, P, pass_)})),
            num(q), pct(efficiency(t1, ms(t), P)) if P > 1 else "", "; ".join(checks) or "-"]) + " |")
    return out


def run_sets(doc) -> list:
    return doc.get("run_sets") or [dict(commit=doc.get("commit"), date=doc.get("date"), commands=doc["commands"],
                                        seqlens=seqlens(doc), plans=plans_note(doc),
                                        clocks=clocks_note(doc.get("clocks", [])))]


def clocks_note(clocks: list) -> str:
    """What nvidia-smi sampled while each command ran (bench/cp_bench.py's "clocks"), or ''."""
    def one(c):
        sm = c.get("sm")
        if not sm:
            return f"command {c['command'] + 1}: none sampled"
        return (f"command {c['command'] + 1}: median {sm['median_mhz']:.0f} MHz (10th-90th percentile "
                f"{sm['p10_mhz']:.0f}-{sm['p90_mhz']:.0f}, {sm['samples']} samples)")
    return ("SM clock (nvidia-smi every second on every GPU, the samples drawing over 300 W): "
            + "; ".join(one(c) for c in clocks)) if clocks else ""


def plans_note(doc) -> str:
    """Whose predictions a file's plans are: the profile, the clock, and the --replan that made them."""
    ps = [p for p in doc["plans"].values() if "profile" in p]
    profiles = sorted({p["profile"] for p in ps}) or ["?"]
    clocks = sorted({p.get("clock", "burst") for p in ps}) or ["burst"]
    by = doc.get("plans_by")
    return (f"`fmsim cp-plan` on the {', '.join(profiles)} profile, {' and '.join(clocks)} clock"
            + (f" (plans computed again after the run, fmsim {by['commit'] or '?'}: `{by['command']}`)" if by else ""))


def header(doc) -> list:
    d = doc["device"]
    sets = run_sets(doc)
    if len(sets) == 1:
        rs = sets[0]
        cmds = "; ".join(f"`{c}`" for c in rs["commands"])
        runs = [f"- **Commit**: {rs['commit'] or '?'}."] + ([f"- **Date**: {rs['date']}."] if rs.get("date") else [])
        runs.append(f"- **Command** (`bash bench/gpu.sh cpbench` runs it): {cmds}; this table: "
                    "`python3 bench/cp_table.py JSON`.")
        runs += [f"- **Clocks**: {rs['clocks']}."] if rs.get("clocks") else []
    else:
        files = " ".join(rs.get("file") or f"JSON{k + 1}" for k, rs in enumerate(sets))
        runs = [f"- **Run sets** (this table: `python3 bench/cp_table.py {files}`):"]
        for k, rs in enumerate(sets):
            runs.append(f"  {k + 1}. S = {', '.join(str(S) for S in rs['seqlens'])}: commit {rs['commit'] or '?'}"
                        + f", {rs.get('date') or 'date not recorded'}; "
                        + "; ".join(f"`{c}`" for c in rs["commands"]) + ".")
            runs.append(f"     Predictions: {rs['plans']}.")
            runs += [f"     {rs['clocks']}."] if rs.get("clocks") else []
    return [
        f"# fmsim's context parallelism on {d['count']} GPUs: scaling, cp-plan's prediction, "
        "PyTorch's context_parallel",
        "",
        f"- **Device**: {d['name']} x {d['count']}; torch {doc.get('torch') or '-'} (the peer).",
        *runs,
        "- **Timing**: fmsim by `fmsim cp-run` itself: warm-up passes (as many on every rank), then "
        "`--iters` passes back to back (bench/cp_bench.py: at least 2, covering "
        f"{doc['protocol']['sustain_s']} s, after {doc['protocol']['warmup_s']} s of warm-up), forward and "
        "backward timed apart on every rank (CUDA events), the median per rank, the step the slowest rank's "
        "(at 1M tokens a pass lasts 0.1-16 s: sustained figures); the one-GPU time by `--baseline` or by "
        "`--ranks 1` (bench/cp_bench.py's P = 1 case), the same way on device 0. torch by fmsim.protocol "
        f"(docs/DESIGN.md, \"How we measure\"): warm-up {doc['protocol']['warmup_s']} s, sustained windows "
        f"of {doc['protocol']['sustain_s']} s in all, L2 flushed, every rank launching together after a "
        "barrier, the step the slowest rank's; its burst figures and the clocks per rank are in the JSON.",
        f"- **Shape**: self-attention, B = 1, H = {doc['heads']}, D = {doc['head_dim']}, bf16; predictions: "
        + (plans_note(doc) if len(sets) == 1 else "each run set's, above")
        + ". Efficiency = T1 / (P x TP), T1 the one-GPU time of the same pass (and run set).",
        ""]


def combine(docs: list, files: list = None) -> dict:
    """Several cp_bench JSONs (run sets) as one: their records and plans together, the run sets
    kept for the header (with their files' paths when given). One device and shape; no case in
    two files."""
    if len(docs) == 1:
        return docs[0]
    first = docs[0]
    out = dict(first, records=[], superseded=[], plans={}, plans_by_run={}, run_sets=[],
               torch=next((d["torch"] for d in docs if d.get("torch")), ""))
    seen = {}
    for k, d in enumerate(docs):
        if (d["device"], d["heads"], d["head_dim"]) != (first["device"], first["heads"], first["head_dim"]):
            raise SystemExit(f"cp_table: file {k + 1} has {d['device']}, H {d['heads']}, D {d['head_dim']}; "
                             f"file 1 {first['device']}, H {first['heads']}, D {first['head_dim']} (one table, "
                             "one device and shape)")
        for r in d["records"]:
            key = (r["tool"], r["family"], r["seqlen"], r["ranks"], r["sharding"], r["exchange"], r["pass"],
                   r.get("backend"))
            if key in seen and seen[key][0] == k:
                raise SystemExit(f"cp_table: {r['id']} is twice in file {k + 1}")
            r = dict(r, run=k)
            if key in seen:  # a re-run: the later file's record is the case's
                out["superseded"].append(seen[key][1])
                out["records"].remove(seen[key][1])
            seen[key] = (k, r)
            out["records"].append(r)
        out["plans"].update(d["plans"])
        out["plans_by_run"][k] = d["plans"]
        out["run_sets"].append(dict(commit=d.get("commit"), date=d.get("date"), commands=d["commands"],
                                    seqlens=seqlens(d), file=files[k] if files else None,
                                    plans=plans_note(d), clocks=clocks_note(d.get("clocks", []))))
    return out


def with_checks(doc: dict, runs: list) -> dict:
    """doc with the check runs of fmsim-cp-checks files (each a run with 'passed') counted by the
    bars beside the records' own checks."""
    return dict(doc, check_runs=[dict(passed=bool(r.get("passed"))) for r in runs]) if runs else doc


def render(doc) -> str:
    out = header(doc)
    for S in seqlens(doc):
        out += [f"## S = {S}", ""] + scaling_table(doc, S) + [""]
    if len(seqlens(doc)) > 1:
        table, P = efficiency_table(doc)
        out += [f"## Scaling efficiency on {P} GPUs per family and length", "",
                f"Forward and backward, each family's fastest run at each length (T1 / ({P} x T{P}); the "
                "sharding and exchange measured there named).", ""] + table + [""]
    parts, P, n = parts_table(doc, PARTS_BELOW)
    if n:
        out += [f"## Where the efficiency goes on {P} GPUs", "",
                f"Forward and backward, each family's fastest run where its efficiency is below "
                f"{PARTS_BELOW:.0%}, split into three measured factors whose product it is (C: each rank's "
                "measured compute, cp-run's kernel time; T1 the one-GPU time): T1 / sum C, the ranks' kernels "
                "together against the one GPU's (split launches, partly filled waves, the ring's contention); "
                "mean C / max C, the balance; max C / step, the step's time beyond the slowest rank's kernels "
                "(exposed exchange, waits, the tails), also in ms.", ""]
        out += (parts if len(parts) > 2 else [f"No run is below {PARTS_BELOW:.0%}."]) + [""]
    picks, summary = picks_table(doc)
    if summary:
        out += ["## cp-plan's best sharding against the measured fastest", "",
                "Wherever every sharding and exchange of the plan ran (forward and backward): the pair "
                "`fmsim cp-plan` names best (`cp-run --sharding plan` runs it) and the measured fastest. "
                + summary, ""] + picks + [""]
    if any(r["tool"] == "torch" for r in doc["records"]):
        out += ["## fmsim against PyTorch's context_parallel (full and causal)", "",
                "fmsim: its fastest sharding and exchange; torch: its fastest backend and rotate method "
                "(its own sharding: head-tail on causal, contiguous on full).", ""] + torch_table(doc) + [""]
    out += ["## Bars (issue 24, Must reach)", "", "| item | deciding number | verdict |", "|---|---|---|"]
    out += [f"| {item} | {n} | {v} |" for item, n, v in bars(doc)]
    return "\n".join(out) + "\n"


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: python3 bench/cp_table.py CP.json [MORE.json ...] > table.md", file=sys.stderr)
        return 2
    docs, files, checks = [], [], []
    for path in sys.argv[1:]:
        with open(path) as f:
            d = json.load(f)
        if d.get("format") == "fmsim-cp-checks":  # cp-run --check runs made outside the driver
            checks += d["runs"]
        else:
            docs.append(d)
            files.append(path)
    if not docs:
        print("cp_table: no cp_bench JSON among the files (only check files)", file=sys.stderr)
        return 2
    sys.stdout.write(render(with_checks(combine(docs, files), checks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
