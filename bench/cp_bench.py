#!/usr/bin/env python3
"""The multi-GPU benchmark of issue 24 in one call: fmsim's context-parallel run against
cp-plan's prediction, the one-GPU baseline, and PyTorch's context_parallel as the peer.

For every family, length S and rank count P (1 is the one-GPU baseline; 2 and 4 as far as
GPUs are visible), every sharding and exchange and both passes ("fwd"; "both": forward and
backward): `fmsim cp-run ... --json` (timed under the protocol, docs/DESIGN.md "How we
measure", checked against the one-GPU kernel at --check-seqlens), `fmsim cp-plan ... --json`
(the prediction: per rank compute and step), and for full and causal masks
bench/cp_torch_peer.py under torchrun on the same GPUs. Cases run in order of what they
decide (tier 0: the checks at the shortest length; 1: issue 24's bars at the longest; 2:
the bars' cases at the other lengths; 3: the rest), cheapest first within a tier; a case
whose estimated time (cp-plan's prediction, an H100's margin) exceeds the budget left is
not started. The JSON is rewritten after every case; --resume skips what it holds.

    python3 bench/cp_bench.py --out cp.json --fmsim build/app/fmsim [--budget-s S] [--resume]
        [--families all] [--seqlens 131072,524288,1048576] [--ranks 1,2,4] [--heads 32]
    python3 bench/cp_table.py cp.json [more.json ...] > bench/results/cp-scaling.md   # no GPU needed
    python3 bench/cp_bench.py --replan --out cp.json --fmsim build/app/fmsim [--gpu PROFILE]  # no GPU

--replan computes every plan of the JSON again with the given fmsim and profile (cp-plan's
defaults: the sustained clock since 2026-11-27; earlier files hold burst predictions) and
rewrites the JSON's plans, noting what made them (plans_by); the measurements stay as they are.

JSON (format "fmsim-cp-bench", version 1): commit, date (UTC, the first invocation's),
command, device {name, count}, heads, head_dim, protocol {warmup_s, sustain_s}, gpu_profile,
torch (the peer's version), plans {"FAMILY:S:P": plan_summary()}, records [{id, tool
("fmsim", "torch"), family, seqlen, ranks, sharding, exchange, pass, status ("ok", "oom",
"error", "timeout"), error, wall_s, est_s, step_ms {sustained, burst} (the slowest rank),
rank_compute_ms [per rank, the pass's kernel time] and rank_compute_fwd_ms [per rank, the
forward's alone] (fmsim), check (fmsim: {passed, ...};
torch: its check of the impl), backend (torch), stderr (fmsim, only when an "ok" run wrote
to it: its last 5 lines, e.g. cp-run's pass gate giving up)}], clocks [{command (its index in commands), sm
(clock_summary: the SM clock nvidia-smi sampled over that command's cases, on every GPU, the
samples drawing over 300 W: median_mhz, p10_mhz, p90_mhz, min_mhz, max_mhz, samples; null if
none)}]. "timeout" (cut by the budget) is measured
again by --resume; the others are not.
"""
import argparse
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from atomic import save_json  # bench/atomic.py, beside this file

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)  # every process started here inherits it

FAMILIES = ("full", "causal", "sliding_window", "causal_document", "document", "share_question",
            "global_sliding_window", "causal_blockwise", "prefix_lm_document", "prefix_lm_causal",
            "qk_sparse", "random_eviction")  # core/fm_families.c, `fmsim families`
BAR_FAMILIES = ("full", "causal", "causal_document", "document", "prefix_lm_causal")  # issue 24's efficiency bar
PEER_FAMILIES = ("full", "causal")  # all torch's context_parallel supports
SHARDINGS = ("contiguous", "zigzag", "mask-aware")
EXCHANGES = ("allgather", "ring")
TORCH_EXCHANGE = {"allgather": "allgather", "alltoall": "ring"}  # torch's rotate methods by our names
H100_MARGIN = 1.3  # the estimate's factor over the H200 profile's prediction
STARTUP_S = {"fmsim": 20.0, "torch": 40.0}  # processes, NCCL, inputs

# ---- fmsim cp-run's JSON: the one place that reads it ------------------------------------
# parse_cp_run reads the keys of docs/DESIGN.md ("cp-run"): step_ms {fwd, bwd, total},
# rank_results[].measured.{fwd,bwd}.compute_ms, check {pass, reference, ...}.

def parse_cp_run(doc: dict, pass_: str) -> dict:
    """The record's fields from one `fmsim cp-run --json` (format "fmsim-cp-run", keys in
    docs/DESIGN.md, "cp-run"; KeyError on a JSON without them). cp-run times N
    back-to-back steps after its warm-up (at these sizes each step lasts seconds: a
    sustained figure); it has no burst figure and records no clock."""
    if doc.get("error"):
        return dict(status=status_of(doc["error"]), error=doc["error"])
    step = doc["step_ms"]
    meas = [r["measured"] for r in doc["rank_results"]]
    compute = [m["fwd"]["compute_ms"] + (m["bwd"]["compute_ms"] if pass_ == "both" else 0.0) for m in meas]
    chk = doc.get("check")
    return dict(status="ok", error="",
                step_ms=dict(sustained=step["total"] if pass_ == "both" else step["fwd"], burst=None),
                rank_compute_ms=compute, rank_compute_fwd_ms=[m["fwd"]["compute_ms"] for m in meas],
                check=None if chk is None else dict(chk, passed=bool(chk["pass"])),
                rank_clock_mhz=[None] * len(meas), rank_power_w=[None] * len(meas))


def status_of(error: str) -> str:
    return "oom" if "out of memory" in error.lower() else "error"


def plan_summary(doc: dict) -> dict:
    """What the table and the estimates need of one `fmsim cp-plan --json`."""
    def exchange(s, x, c):
        """Its step, and each rank's compute as cp-run measures it on that exchange (fmsim cp-plan's
        compute_fwd_ms, compute_bwd_ms: the all-gather's launch, the ring's step windows)."""
        rk = [r["exchanges"][x] for r in s["ranks"]]
        return dict({k: c[k] for k in ("fwd_ms", "bwd_ms", "step_ms", "fits")},
                    rank_fwd_ms=[r["compute_fwd_ms"] for r in rk],
                    rank_compute_ms=[r["compute_fwd_ms"] + r["compute_bwd_ms"] for r in rk])
    return dict(profile=doc["profile"]["name"], clock=doc.get("clock", "burst"), one_gpu=doc["one_gpu"],
                shardings={s["name"]: dict(exchange=s["exchange"], efficiency=s["efficiency_exchange"],
                                           exchanges={x: exchange(s, x, c) for x, c in s["exchanges"].items()})
                           for s in doc["shardings"]},
                best={k: doc["best"][k] for k in ("sharding", "exchange")})


def predicted_ms(plan: dict, P: int, sharding: str, exchange: str, pass_: str) -> float:
    """cp-plan's time of one launch of the case (the step, or one GPU's time at P = 1)."""
    if P == 1:
        g = plan["one_gpu"]
        return g["fwd_ms"] if pass_ == "fwd" else g["total_ms"]
    c = plan["shardings"][sharding]["exchanges"][exchange]
    return c["fwd_ms"] if pass_ == "fwd" else c["step_ms"]


def plan_choice(plan: dict, sharding=None) -> tuple:
    """(sharding, exchange): the plan's exchange for sharding, or cp-plan's best pair (its "best")."""
    if sharding is None:
        return plan["best"]["sharding"], plan["best"]["exchange"]
    return sharding, plan["shardings"][sharding]["exchange"]


# ---- the cases ----------------------------------------------------------------------------

def iters_for(t_s: float, sustain_s: float) -> int:
    """Timed launches of a cp-run: at least two, covering sustain_s back to back."""
    return max(2, math.ceil(sustain_s / max(t_s, 1e-3)))


def fmsim_job(args, plan: dict, fam: str, S: int, P: int, sh: str, ex: str, pass_: str) -> dict:
    t = predicted_ms(plan, P, sh, ex, pass_) * H100_MARGIN / 1e3
    check = P > 1 and S in args.check_seqlens
    launches = 4 + iters_for(t, args.sustain_s) + math.ceil(args.warmup_s / t)
    t1 = predicted_ms(plan, 1, sh, ex, pass_) * H100_MARGIN / 1e3
    return dict(id=f"fmsim:{fam}:{S}:{P}:{sh}:{ex}:{pass_}", tool="fmsim", family=fam, seqlen=S, ranks=P,
                sharding=sh, exchange=ex, **{"pass": pass_}, check=check, t_s=t,
                est_s=STARTUP_S["fmsim"] + t * launches + (2 * t1 if check else 0.0))


def torch_job(args, plan: dict, fam: str, S: int, P: int) -> dict:
    """One torchrun: every pass and implementation of the peer on (fam, S, P)."""
    sh = "zigzag" if fam == "causal" else "contiguous"
    n = len(args.peer_impls.split(","))
    est = STARTUP_S["torch"]
    for p in args.passes:
        t = 1.5 * predicted_ms(plan, P, sh, "allgather", p) * H100_MARGIN / 1e3  # torch: ~1.5x fmsim's time
        est += n * t * (6 + math.ceil(args.warmup_s / t) + max(4, math.ceil(args.sustain_s / t)))
    return dict(id=f"torch:{fam}:{S}:{P}", tool="torch", family=fam, seqlen=S, ranks=P, sharding=sh,
                check=P > 1 and S in args.check_seqlens, est_s=est)


def tier(j: dict, args, plan: dict) -> int:
    """0: the checks (shortest length, most ranks, mask-aware both passes); 1: the bars' cases
    at the longest length; 2: the bars' cases at the others; 3: the rest."""
    S, P, fam = j["seqlen"], j["ranks"], j["family"]
    if j["tool"] == "torch":
        bar = P > 1
    elif j["pass"] != "both":
        bar = False
    elif S == min(args.seqlens) and P == max(args.ranks) and P > 1 and \
            (j["sharding"], j["exchange"]) == plan_choice(plan, "mask-aware"):
        return 0
    else:
        pair = (j["sharding"], j["exchange"])
        bar = (fam in BAR_FAMILIES and (P == 1 or pair == plan_choice(plan))) or \
            (fam == "causal_document" and P == 4 and pair in (plan_choice(plan, "contiguous"),
                                                               plan_choice(plan, "mask-aware")))
    return 3 if not bar else 1 if S == max(args.seqlens) else 2


def jobs(args, plans: dict) -> list:
    """Every case with its estimate and tier, in the order they run."""
    out = []
    for fam in args.families:
        for S in args.seqlens:
            for P in args.ranks:
                plan = plans[f"{fam}:{S}:{P}"]
                if "error" in plan:
                    continue
                pairs = [("-", "-")] if P == 1 else [(s, x) for s in args.shardings for x in args.exchanges
                                                     if s in plan["shardings"]]  # cp-plan may leave one out
                cases = [fmsim_job(args, plan, fam, S, P, s, x, p) for s, x in pairs for p in args.passes]
                if fam in PEER_FAMILIES and args.peer_impls:
                    cases.append(torch_job(args, plan, fam, S, P))
                out += [dict(c, tier=tier(c, args, plan)) for c in cases]
    return sorted(out, key=lambda j: (j["tier"], j["est_s"]))


# ---- running them -------------------------------------------------------------------------

def run(cmd: list, timeout_s: float) -> tuple:
    """(exit code or None when cut at timeout_s, stdout, stderr, seconds). The command runs in
    its own session, so that a cut ends it and every process it started (torchrun's workers)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=max(1.0, timeout_s))
        return p.returncode, out, err, time.time() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(p.pid, signal.SIGKILL)  # whatever of the session is left
        except ProcessLookupError:
            pass
        p.communicate()
        return None, "", "", time.time() - t0
    except BaseException:  # this script stopped (its TERM, ^C): the command's session ends with it
        os.killpg(p.pid, signal.SIGKILL)
        raise


def last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


def plan_cmd(args, fam: str, S: int, P: int) -> list:
    return [args.fmsim, "cp-plan", "--family", fam, "--seqlen", str(S), "--ranks", str(P), "--heads",
            str(args.heads), "--head-dim", "128", "--json"] + (["--gpu", args.gpu] if args.gpu else [])


def make_plans(args, plans: dict) -> None:
    """cp-plan of every (family, S, P) not in plans yet: its summary, or {error}."""
    for fam in args.families:
        for S in args.seqlens:
            for P in args.ranks:
                key = f"{fam}:{S}:{P}"
                if key not in plans:
                    rc, out, err, _ = run(plan_cmd(args, fam, S, P), 300)
                    plans[key] = plan_summary(json.loads(out)) if rc == 0 else {"error": last_line(err)}


def fmsim_records(args, j: dict, left_s: float) -> list:
    cmd = [args.fmsim, "cp-run", "--family", j["family"], "--seqlen", str(j["seqlen"]), "--batch", "1",
           "--heads", str(args.heads), "--head-dim", "128", "--ranks", str(j["ranks"]), "--pass", j["pass"],
           "--iters", str(iters_for(j["t_s"], args.sustain_s)), "--warmup-ms", str(round(args.warmup_s * 1e3)),
           "--json"]
    if j["ranks"] > 1:
        cmd += ["--sharding", j["sharding"], "--exchange", j["exchange"]]
    cmd += (["--check"] if j["check"] else []) + (["--gpu", args.gpu] if args.gpu else [])
    rc, out, err, wall = run(cmd, left_s)
    rec = {k: j[k] for k in ("id", "tool", "family", "seqlen", "ranks", "sharding", "exchange", "pass", "est_s")}
    rec.update(job=j["id"], wall_s=round(wall, 1), command=shlex.join(cmd))
    if rc is None:
        return [dict(rec, status="timeout", error=f"cut at {left_s:.0f} s (the budget)")]
    try:
        rec.update(parse_cp_run(json.loads(out), j["pass"]))
    except (ValueError, KeyError, TypeError) as e:
        msg = last_line(err) if rc else f"cp-run's JSON not read: {e!r}"
        rec.update(status=status_of(msg) if rc else "error", error=msg)
    warnings = [x[:300] for x in err.splitlines() if x.strip()]
    if rc == 0 and warnings:  # a run that passed but said something (the pass gate giving up, ...)
        rec["stderr"] = warnings[-5:]
    return [rec]


def torch_records(args, j: dict, left_s: float, doc: dict) -> list:
    """The peer's records of one torchrun (one per pass and implementation)."""
    peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cp_torch_peer.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(j["ranks"]), peer,
           "--mask", j["family"], "--seqlen", str(j["seqlen"]), "--heads", str(args.heads),
           "--passes", ",".join(args.passes), "--impls", args.peer_impls, "--warmup-s", str(args.warmup_s),
           "--sustain-s", str(args.sustain_s)] + (["--check"] if j["check"] else [])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "peer.json")
        rc, _, err, wall = run(cmd + ["--out", path], left_s)
        got = None
        if rc == 0 and os.path.isfile(path):
            with open(path) as f:
                got = json.load(f)
    base = {k: j[k] for k in ("tool", "family", "seqlen", "ranks", "sharding", "est_s")}
    base.update(job=j["id"], wall_s=round(wall, 1), command=shlex.join(cmd))
    if got is None:
        status = "timeout" if rc is None else status_of(last_line(err))
        return [dict(base, id=j["id"], exchange="-", **{"pass": "-"}, status=status, error=last_line(err))]
    doc["torch"] = got["torch"]
    return peer_records(base, j["id"], got)


def peer_records(base: dict, job_id: str, got: dict) -> list:
    """The records of one peer JSON (bench/cp_torch_peer.py), one per pass and implementation."""
    out = []
    for r in got["records"]:
        rec = dict(base, id=f"{job_id}:{r['impl']}:{r['pass']}", exchange=TORCH_EXCHANGE[r["rotate"]],
                   backend=r["backend"], status=r["status"], error=r["error"], finite=r.get("finite"),
                   check=(got["check"] or {}).get(r["impl"]), **{"pass": r["pass"]})
        if r["status"] == "ok":
            rec.update(step_ms={m: r[m]["median_ms"] for m in ("sustained", "burst")},
                       figures={m: r[m] for m in ("sustained", "burst")})
        out.append(rec)
    return out


def one_line(r: dict) -> str:
    what = f"{r['id']}:"
    if r["status"] != "ok":
        return f"{what} {r['status']} {r.get('error', '')}"
    ms = {k: (f"{v:.3f}" if v is not None else "-") for k, v in r["step_ms"].items()}
    return f"{what} {ms.get('sustained', '-')} ms sustained, {ms.get('burst', '-')} burst ({r['wall_s']} s)"


def gpus() -> list:
    """The visible GPUs' names (nvidia-smi, narrowed by CUDA_VISIBLE_DEVICES)."""
    rc, out, _, _ = run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], 60)
    names = [x.strip() for x in out.splitlines() if x.strip()] if rc == 0 else []
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        names = [names[int(i)] for i in vis.split(",") if i.strip().isdigit() and int(i) < len(names)]
    return names


CLOCK_PERIOD_MS = 1000  # nvidia-smi's sampling period while the cases run
LOADED_W = 300.0        # a sample counts when its GPU draws more (an idle H200 draws about 80 W)


class Clocks:
    """The SM clock and power of every visible GPU, sampled by nvidia-smi while the cases run
    (cp-run does not read clocks itself); none when nvidia-smi is missing."""
    def __init__(self):
        cmd = ["nvidia-smi", "--query-gpu=index,clocks.sm,power.draw", "--format=csv,noheader,nounits",
               "-lms", str(CLOCK_PERIOD_MS)]
        self.out = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: hours of samples never block it
        try:
            self.p = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.p = None

    def stop(self) -> list:
        """[(MHz, W)] of every sample taken."""
        if self.p is not None:
            self.p.terminate()
            self.p.wait()
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        return clock_samples(text)


def clock_samples(text: str) -> list:
    """[(MHz, W)] from nvidia-smi's CSV lines 'index, clocks.sm, power.draw', units or not; lines
    with [N/A] or anything else unreadable are skipped."""
    got = []
    for line in text.splitlines():
        f = [x.strip().split(" ")[0] for x in line.split(",")]
        try:
            got.append((float(f[-2]), float(f[-1])))
        except (ValueError, IndexError):
            continue
    return got


def clock_summary(samples: list) -> dict:
    """The SM clock of the samples drawing over LOADED_W: median, 10th and 90th percentile, min
    and max (nearest rank), or None when no sample was loaded."""
    v = sorted(m for m, w in samples if w > LOADED_W)
    if not v:
        return None
    rank = lambda q: v[min(len(v) - 1, int(q * len(v)))]  # noqa: E731
    return dict(samples=len(v), loaded_w=LOADED_W, period_ms=CLOCK_PERIOD_MS, median_mhz=rank(0.5),
                p10_mhz=rank(0.1), p90_mhz=rank(0.9), min_mhz=v[0], max_mhz=v[-1])


def start(args, names: list) -> dict:
    """The document: a new one, or the one --resume reads back (the same heads and profile)."""
    doc = dict(format="fmsim-cp-bench", version=1, commit=os.environ.get("FM_COMMIT", ""),
               date=time.strftime("%Y-%m-%d", time.gmtime()), commands=[],
               device=dict(name=names[0] if names else "", count=len(names)), heads=args.heads, head_dim=128,
               gpu_profile=args.gpu or "", protocol=dict(warmup_s=args.warmup_s, sustain_s=args.sustain_s),
               torch="", plans={}, records=[])
    if args.resume and os.path.isfile(args.out):
        with open(args.out) as f:
            old = json.load(f)
        if (old["heads"], old["gpu_profile"]) != (doc["heads"], doc["gpu_profile"]):
            raise SystemExit(f"cp_bench: {args.out} has heads {old['heads']} and profile "
                             f"'{old['gpu_profile']}': resume with the same, or another --out")
        doc.update(commands=old["commands"], plans=old["plans"], records=old["records"], torch=old["torch"],
                   date=old.get("date") or doc["date"], clocks=old.get("clocks", []))
    doc["commands"].append(shlex.join(sys.argv))
    return doc


def measure_all(args, doc: dict) -> int:
    """Every case not yet held, within the budget; the clocks sampled meanwhile go into the
    document's "clocks" as this command's (its index in "commands")."""
    t0 = time.time()
    make_plans(args, doc["plans"])
    save_json(args.out, doc)
    clocks = Clocks()
    try:
        measure_cases(args, doc, t0)
    finally:
        doc.setdefault("clocks", []).append(dict(command=len(doc["commands"]) - 1,
                                                 sm=clock_summary(clocks.stop())))
        save_json(args.out, doc)
    return 0


def measure_cases(args, doc: dict, t0: float) -> None:
    done = {r["job"] for r in doc["records"] if r["status"] != "timeout"}
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    for key, p in doc["plans"].items():
        if "error" in p:
            log(f"cp-plan {key}: {p['error']} (its cases are left out)")
    for j in jobs(args, doc["plans"]):
        if j["id"] in done:
            continue
        left = args.budget_s - (time.time() - t0) if args.budget_s else 86400.0
        if j["est_s"] > left:
            log(f"{j['id']}: about {j['est_s']:.0f} s, {max(left, 0):.0f} s left: not started")
            continue
        recs = (fmsim_records(args, j, left) if j["tool"] == "fmsim" else torch_records(args, j, left, doc))
        doc["records"] = [r for r in doc["records"] if r["job"] != j["id"]] + recs
        save_json(args.out, doc)
        for r in recs:
            print(one_line(r), flush=True)


def replan(args) -> int:
    """Every plan of args.out again, with args.fmsim and args.gpu (no GPU needed)."""
    with open(args.out) as f:
        doc = json.load(f)
    args.heads = doc.get("heads", args.heads)
    plans = {}
    for key in doc["plans"]:
        fam, S, P = key.split(":")
        rc, out, err, _ = run(plan_cmd(args, fam, int(S), int(P)), 600)
        if rc != 0:
            print(f"cp_bench: replan {key}: {last_line(err)}", file=sys.stderr)
            return 1
        plans[key] = plan_summary(json.loads(out))
    doc["plans"] = plans
    doc["plans_by"] = {"fmsim": os.path.abspath(args.fmsim), "gpu": args.gpu or "cp-plan's default",
                       "commit": os.environ.get("FM_COMMIT", ""), "command": " ".join(sys.argv)}
    save_json(args.out, doc)
    print(f"{len(plans)} plans -> {args.out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the JSON (rewritten after every case)")
    ap.add_argument("--fmsim", default="build/app/fmsim", help="the fmsim binary (cp-run, cp-plan)")
    ap.add_argument("--families", default="all", help="comma list, or all (the paper's twelve)")
    ap.add_argument("--seqlens", default="131072,524288,1048576")
    ap.add_argument("--ranks", default="", help="comma list (default: 1 and 2, 4 as far as GPUs are visible)")
    ap.add_argument("--shardings", default=",".join(SHARDINGS))
    ap.add_argument("--exchanges", default=",".join(EXCHANGES))
    ap.add_argument("--passes", default="fwd,both")
    ap.add_argument("--heads", type=int, default=4,
                    help="H (the table in bench/results/cp-scaling.md: 4; at 32 the matrix takes about a day)")
    ap.add_argument("--gpu", default="", help="the profile of cp-plan's prediction and cp-run (default: theirs)")
    ap.add_argument("--check-seqlens", default="131072", help="lengths checked against the one-GPU kernel")
    ap.add_argument("--peer-impls", default="cudnn-allgather,flash-allgather",
                    help="bench/cp_torch_peer.py --impls ('' leaves the peer out)")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--sustain-s", type=float, default=1.0)
    ap.add_argument("--budget-s", type=float, default=0.0, help="start no case that would end after this")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--replan", action="store_true",
                    help="no GPU: the plans of --out computed again with --fmsim (and --gpu); measurements kept")
    args = ap.parse_args()
    if args.replan:
        return replan(args)
    names = gpus()
    args.families = FAMILIES if args.families == "all" else tuple(args.families.split(","))
    args.seqlens = [int(x) for x in args.seqlens.split(",")]
    args.check_seqlens = {int(x) for x in args.check_seqlens.split(",") if x}
    args.ranks = ([int(x) for x in args.ranks.split(",")] if args.ranks else
                  [p for p in (1, 2, 4) if p <= len(names)])
    args.shardings, args.exchanges = args.shardings.split(","), args.exchanges.split(",")
    args.passes = args.passes.split(",")
    for name, got, known in (("--families", args.families, FAMILIES), ("--shardings", args.shardings, SHARDINGS),
                             ("--exchanges", args.exchanges, EXCHANGES), ("--passes", args.passes, ("fwd", "both"))):
        if set(got) - set(known):
            ap.error(f"{name}: {', '.join(sorted(set(got) - set(known)))} unknown (known: {', '.join(known)})")
    if not args.ranks or max(args.ranks) > len(names):
        ap.error(f"--ranks {args.ranks}: {len(names)} GPUs visible")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout's TERM still saves the clocks
    return measure_all(args, start(args, names))


if __name__ == "__main__":
    sys.exit(main())
