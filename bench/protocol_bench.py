#!/usr/bin/env python3
"""fmsim's kernels against their peers under one timing protocol, in one process.

For each case of the paper's kernel table (the twelve families at the given
lengths, B = tokens / S, H = hidden / D) and each pass, fmsim (through
fmsim.torch, its PyTorch op) and the peers (bench/peers.py: FlexAttention's
Triton and FLASH backends on the very same interval vectors, SDPA's cuDNN on
the full and causal masks) are first checked against each other on the same
inputs, then timed by fmsim.protocol.measure: interleaved, the same warm-up,
L2 flush and windows, sustained and burst figures apart, with the SM clock and
power read through NVML (docs/DESIGN.md, "How we measure"). The backward is
torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on one recorded
forward for every implementation alike.

    python3 bench/protocol_bench.py --out runs.json [--seqlens 8192,32768,131072]
        [--families all] [--head-dim 128] [--passes fwd,bwd] [--peers triton,flash,cudnn]
        [--budget-s S] [--resume] [--fmsim-variants r2p,slices,words]
    python3 bench/protocol_bench.py --table runs.json [more.json ...] > table.md   # no GPU needed

--fmsim-variants times fmsim once per partial-tile mask method (fmsim.torch's
mask_method: auto, r2p, slices, words; issue 25) as separate implementations of the same
interleaved run, named fmsim[r2p], fmsim[slices], ...: the first is the one the
others and the peers are checked and compared against (the table's ratio
columns fmsim[r2p]/fmsim[slices], ...); the methods must agree bit for bit (a
log line says so where they do not). --peers '' times fmsim alone.

The JSON is rewritten after every case and pass (temporary file, renamed), so a
run cut short keeps what it measured; --resume measures only what it lacks.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Optional
from atomic import save_json  # bench/atomic.py, beside this file

FAMILIES = ("full", "causal", "sliding_window", "causal_document", "document", "share_question",
            "global_sliding_window", "causal_blockwise", "prefix_lm_document", "prefix_lm_causal",
            "qk_sparse", "random_eviction")
PEERS = {"triton": "flex-triton", "flash": "flex-flash", "cudnn": "cudnn"}
MASK_METHODS = ("auto", "r2p", "slices", "words")  # fmsim.torch's mask_method


def fmsim_impls(variants: str) -> dict:
    """The fmsim implementations timed, {name: mask_method}: "fmsim" with the
    library's method, or one "fmsim[method]" per --fmsim-variants entry."""
    vs = [v for v in variants.split(",") if v]
    return {f"fmsim[{m}]": m for m in vs} if vs else {"fmsim": "auto"}


def is_fmsim(name: str) -> bool:
    return name == "fmsim" or name.startswith("fmsim[")


def paper_flops(B, H, S, D, rho, pass_):
    f = 4.0 * B * H * S * S * D * (1.0 - rho)
    return 2.5 * f if pass_ == "bwd" else f


def rel_err(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / max(b.norm().item(), 1e-30))


class Case:
    """One mask and its inputs: fmsim's (B, S, H, D) tensors and the peers' (B, H, S, D) copies."""

    def __init__(self, fam, S, D, args):
        import numpy as np
        import torch

        import fmsim
        from fmsim.torch import _tile
        self.fam, self.S, self.D = fam, S, D
        self.B, self.H = max(1, args.tokens // S), max(1, args.hidden // D)
        self.id = f"{fam}-{S}-d{D}"
        self.fmsim = fmsim_impls(args.fmsim_variants)  # {name: mask_method}
        self.ref = next(iter(self.fmsim))              # what the others are checked against
        m = fmsim.family(fam, S, batch=self.B, heads=self.H, seed=args.seed)
        self.causal = m.causal
        sri, causal = m.to_paddle()
        assert causal == m.causal
        self.sri = torch.as_tensor(sri, device="cuda")
        nb, nh = m.batch, m.heads
        self.nb, self.nh = nb, nh
        self.vec = np.array(m.vectors().reshape(nb * nh, 4, S), copy=True)  # m owns the view: copy
        self.rho = {"128x128": m.analyze(128, 128).rho}
        for p, code in (("fwd", 1), ("bwd", 2)):
            br, bc = _tile(1, code, D)
            self.rho[p] = m.analyze(br, bc).rho
            self.rho[p + "_tile"] = f"{br}x{bc}"
        g = torch.Generator(device="cuda").manual_seed(args.seed)
        shape = (self.B, S, self.H, D)
        self.qb, self.kb, self.vb, self.dob = (torch.randn(shape, device="cuda", dtype=torch.bfloat16,
                                                           generator=g) for _ in range(4))
        self.qh, self.kh, self.vh, self.doh = (t.transpose(1, 2).contiguous()
                                               for t in (self.qb, self.kb, self.vb, self.dob))


def forward_impls(c: Case, peers, flexm):
    import torch

    from fmsim.torch import flashmask_attention
    import peers as P

    def nograd(fn):
        def run():
            with torch.no_grad():
                return fn()
        return run

    impls = {n: nograd(lambda m=m: flashmask_attention(c.qb, c.kb, c.vb, c.sri, c.causal, mask_method=m))
             for n, m in c.fmsim.items()}
    for p in peers:
        if p in ("triton", "flash") and flexm is not None:
            impls[PEERS[p]] = nograd(P.flex_call(p.upper(), flexm, c.qh, c.kh, c.vh))
        if p == "cudnn" and c.fam in ("full", "causal"):
            impls["cudnn"] = nograd(P.cudnn_call(c.fam == "causal", c.qh, c.kh, c.vh))
    return impls


def with_inputs(c: Case, peers, flexm):
    """Forward callables that take (q, k, v): what backward_impls records a forward of."""
    from fmsim.torch import flashmask_attention
    import peers as P
    fns = {n: (lambda q, k, v, m=m: flashmask_attention(q, k, v, c.sri, c.causal, mask_method=m))
           for n, m in c.fmsim.items()}
    for p in peers:
        if p in ("triton", "flash") and flexm is not None:
            fns[PEERS[p]] = (lambda q, k, v, b=p.upper(): P.flex_call(b, flexm, q, k, v)())
        if p == "cudnn" and c.fam in ("full", "causal"):
            fns["cudnn"] = (lambda q, k, v: P.cudnn_call(c.fam == "causal", q, k, v)())
    return fns


AGREE = 2e-2  # relative error two right bf16 kernels stay under (seen: <= 3.1e-3)


def worst_err(e):
    """The largest relative error of a check record (a number, a list, or an error string)."""
    if isinstance(e, str):
        return float("inf")
    return max(e) if isinstance(e, list) else e


def drop_disagreeing(c: Case, impls: dict, errs: dict, log, bits: Optional[dict] = None) -> dict:
    """The peers whose result agrees with fmsim's; the others are not timed (their
    record says why): a timing of a different computation compares nothing. fmsim's
    mask methods give the same bits: a log line where they do not (timed all the same).
    The forward's bits are errs' (o); the backward's are `bits` (deterministic_bits:
    the default dQ's fp32 atomics add in an order that varies run to run)."""
    out = {}
    for n, fn in impls.items():
        if n != c.ref and worst_err(errs.get(n, 0.0)) > AGREE:
            log(f"{c.id}: {n}: result differs from {c.ref}'s (relative error {errs[n]}): not timed")
            continue
        same = errs.get(n, 0.0) if bits is None else bits.get(n, 0.0)
        if n != c.ref and is_fmsim(n) and worst_err(same) != 0:
            log(f"{c.id}: {n}: not bit-identical to {c.ref} (relative error {same})")
        out[n] = fn
    return out


def deterministic_bits(c: Case) -> dict:
    """{fmsim variant: [dq, dk, dv] relative errors against c.ref's}, both run with
    deterministic=True (dQ added in a fixed order): what "the mask methods give the same
    gradients bit for bit" means. Empty unless c.ref and another fmsim variant are timed."""
    import torch
    from fmsim.torch import flashmask_attention
    names = [n for n in c.fmsim if n != c.ref]
    if c.ref not in c.fmsim or not names:
        return {}

    def grads(m):
        q, k, v = (t.detach().requires_grad_() for t in (c.qb, c.kb, c.vb))
        o = flashmask_attention(q, k, v, c.sri, c.causal, mask_method=m, deterministic=True)
        return torch.autograd.grad(o, (q, k, v), c.dob)
    ref = grads(c.fmsim[c.ref])
    out = {n: [rel_err(a, b) for a, b in zip(grads(c.fmsim[n]), ref)] for n in names}
    del ref
    return out


def check_outputs(c: Case, impls: dict) -> dict:
    """Every forward against fmsim's on the same inputs: relative error (bf16: ~1e-2 at most)."""
    import torch
    ref = impls[c.ref]().transpose(1, 2)
    errs = {}
    for n, fn in impls.items():
        if n != c.ref:
            try:
                o = fn()
                errs[n] = rel_err(o.transpose(1, 2) if is_fmsim(n) else o, ref)
            except Exception as e:  # noqa: BLE001
                errs[n] = repr(e)[:200]
    torch.cuda.synchronize()
    return errs


def record(c: Case, pass_: str, figs: dict, errs: dict, bits: Optional[dict] = None) -> dict:
    rec = dict(id=c.id, family=c.fam, seqlen=c.S, head_dim=c.D, batch=c.B, heads=c.H, mask_sets=c.nb * c.nh,
               pass_=pass_, rho=c.rho, check_rel_err_vs_fmsim=errs, impls={})
    if bits:  # the backward's method check in deterministic mode (deterministic_bits)
        rec["check_deterministic_vs_fmsim"] = bits
    for n, f in figs.items():
        if "error" in f:
            rec["impls"][n] = {"error": f["error"]}
            continue
        rho = c.rho[pass_] if is_fmsim(n) else c.rho["128x128"]
        fl = paper_flops(c.B, c.H, c.S, c.D, rho, pass_)
        rec["impls"][n] = {m: dict(f[m].to_dict(), tflops=fl / (f[m].median_ms * 1e-3) / 1e12)
                           for m in ("sustained", "burst")}
    return rec


def run_case(c: Case, passes, peers, args, log):
    import torch

    from fmsim.protocol import measure
    import peers as P
    flexm = None
    # compiled FlexAttention kept from an earlier case can run that case's mask_mod on this
    # one's blocks (seen on 2026-11-26: 8K cases after the full mask, relative error up to
    # 0.52 against fmsim and cuDNN): every case compiles afresh
    torch._dynamo.reset()
    if any(p in ("triton", "flash") for p in peers):
        try:
            flexm = P.flex_mask(c.vec, c.causal, c.B, c.H, c.nb, c.nh, c.S)
        except Exception as e:  # noqa: BLE001
            log(f"{c.id}: BlockMask failed: {e!r}"[:300])
    kw = dict(warmup_s=args.warmup_s, sustain_s=args.sustain_s, burst=args.burst, idle_s=args.idle_s)
    recs = []
    fwd = forward_impls(c, peers, flexm)
    if "fwd" in passes:
        errs = check_outputs(c, fwd)
        recs.append(record(c, "fwd", measure(drop_disagreeing(c, fwd, errs, log), log=log, **kw), errs))
    if "bwd" in passes:
        fns = with_inputs(c, peers, flexm)
        bwd = {}
        for n, fn in fns.items():
            q, k, v = ((c.qb, c.kb, c.vb) if is_fmsim(n) else (c.qh, c.kh, c.vh))
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            d = c.dob if is_fmsim(n) else c.doh
            try:
                o = fn(q, k, v)
                bwd[n] = (lambda o=o, q=q, k=k, v=v, d=d: torch.autograd.grad(o, (q, k, v), d, retain_graph=True))
            except Exception as e:  # noqa: BLE001
                log(f"{c.id} {n} recorded forward failed: {e!r}"[:300])
        g = {n: f() for n, f in bwd.items()}
        errs = {}
        if c.ref in g:
            for n, gr in g.items():
                if n != c.ref:
                    errs[n] = [rel_err(a if is_fmsim(n) else a.transpose(1, 2), b) for a, b in zip(gr, g[c.ref])]
        del g
        bits = deterministic_bits(c)
        recs.append(record(c, "bwd", measure(drop_disagreeing(c, bwd, errs, log, bits), log=log, **kw), errs,
                           bits))
    if flexm is not None:
        del flexm
    torch.cuda.empty_cache()
    return recs


def measure_main(args) -> int:
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fmsim.protocol import PROTOCOL, Nvml
    import peers as P
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            raise SystemExit(f"--peers: unknown peer {p!r} (known: {', '.join(PEERS)})")
    if "flash" in peers and P.flash_backend_error():
        print("protocol_bench: " + P.flash_backend_error() + "; FLASH left out", file=sys.stderr)
        peers.remove("flash")
    passes = [p for p in args.passes.split(",") if p]
    fams = FAMILIES if args.families == "all" else tuple(args.families.split(","))
    doc = dict(format="fmsim-protocol-bench", version=1, torch=torch.__version__,
               device=torch.cuda.get_device_name(), nvml=Nvml().ok,
               protocol=dict(PROTOCOL, warmup_s=args.warmup_s, sustain_s=args.sustain_s, burst=args.burst,
                             idle_s=args.idle_s),
               commit=os.environ.get("FM_COMMIT", ""), command=" ".join(sys.argv),
               fmsim=fmsim_impls(args.fmsim_variants), records=[])
    done = set()
    if args.resume and os.path.isfile(args.out):
        with open(args.out) as f:
            old = json.load(f)
        doc["records"] = old.get("records", [])
        for r in doc["records"]:  # the run each resumed record came from, where its file did not say
            r.setdefault("run", dict(commit=old.get("commit", ""), date="", device=old.get("device", "")))
        done = {(r["id"], r["pass_"]) for r in doc["records"]}
    run = dict(commit=doc["commit"], date=time.strftime("%Y-%m-%d", time.gmtime()), device=doc["device"])
    t0 = time.time()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    for S in (int(x) for x in args.seqlens.split(",")):
        for fam in fams:
            todo = [p for p in passes if (f"{fam}-{S}-d{args.head_dim}", p) not in done]
            if not todo:
                continue
            if args.budget_s and time.time() - t0 > args.budget_s:
                log(f"budget spent: {fam} {S} not started")
                continue
            w0 = time.time()
            try:
                recs = run_case(Case(fam, S, args.head_dim, args), todo, peers, args, log)
            except Exception as e:  # noqa: BLE001  (a case's failure is recorded, the run goes on)
                recs = [dict(id=f"{fam}-{S}-d{args.head_dim}", family=fam, seqlen=S, head_dim=args.head_dim,
                             pass_=p, error=repr(e)[:300]) for p in todo]
                torch.cuda.empty_cache()
            for r in recs:
                r["wall_s"] = round(time.time() - w0, 1)
                r["run"] = run
                doc["records"].append(r)
                print(one_line(r), flush=True)
            save_json(args.out, doc)
    return 0


def one_line(r: dict) -> str:
    if "error" in r:
        return f"{r['id']} {r['pass_']}: error {r['error']}"
    parts = [f"{r['id']} {r['pass_']}:"]
    for n, f in r["impls"].items():
        if "error" in f:
            parts.append(f"{n} error")
        else:
            s, b = f["sustained"], f["burst"]
            parts.append(f"{n} {s['median_ms']:.3f}/{b['median_ms']:.3f} ms @{s['clock_mhz']}/{b['clock_mhz']} MHz")
    return " ".join(parts)


# ---- the curated table (no GPU) --------------------------------------------------------------

def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def run_key(r: dict, meta: dict) -> str:
    """The run a record came from: its commit and date ("commit on date"), the file's commit where it says none."""
    u = r.get("run") or dict(commit=meta.get("commit", ""), date="")
    return f"{u.get('commit') or '?'} on {u.get('date') or '?'}"


def run_letters(recs, meta) -> dict:
    """Each distinct run of the records, in order of appearance, named a, b, c, ..."""
    keys = {}
    for r in recs:
        keys.setdefault(run_key(r, meta), chr(ord("a") + len(keys)))
    return keys or {f"{meta.get('commit') or '?'} on ?": "a"}


def table(paths) -> str:
    recs, meta = [], []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        recs += [r for r in d["records"] if "impls" in r]
        meta.append(d)
    out = []
    m0 = meta[0]
    runs = run_letters(recs, m0)
    out.append(f"Device: {m0['device']}; torch {m0['torch']}; NVML clocks: {'yes' if m0['nvml'] else 'no'}; " +
               ("; ".join(f"run {k}: {v}" for v, k in runs.items()) if len(runs) > 1 else
                f"commit {next(iter(runs)).split(' on ')[0] or '?'}") + ".")
    out.append("Protocol (fmsim.protocol, docs/DESIGN.md \"How we measure\"): " +
               ", ".join(f"{k} {v}" for k, v in m0["protocol"].items()) + ".")
    out.append("")
    keys = sorted({(r["head_dim"], r["pass_"]) for r in recs}, key=lambda x: (-x[0], x[1] != "fwd"))
    for D, pass_ in keys:
        rows = [r for r in recs if r["head_dim"] == D and r["pass_"] == pass_]
        fms = list(dict.fromkeys(n for r in rows for n in r["impls"] if is_fmsim(n)))  # in order of appearance
        fms.sort(key=lambda n: n != "fmsim")  # the library's method first where it was timed
        names = fms + [n for n in ("flex-triton", "flex-flash", "cudnn") if any(n in r["impls"] for r in rows)]
        if not names:
            continue
        base = names[0]  # the first fmsim: the ms, TF/s, MHz and W columns and every ratio's numerator
        for mode in ("sustained", "burst"):
            out.append(f"### head dim {D}, {pass_}, {mode}")
            out.append("")
            hdr = ["case"] + (["run"] if len(runs) > 1 else []) + ["rho", f"{base} ms", f"{base} TF/s", "MHz", "W"] + \
                [f"{n} ms" for n in names[1:]] + [f"{base}/{n}" for n in names[1:]]
            out.append("| " + " | ".join(hdr) + " |")
            out.append("|" + "---|" * len(hdr))
            ratios = {n: [] for n in names[1:]}
            best = []
            for r in rows:
                f = r["impls"].get(base, {})
                if mode not in f:
                    continue
                fm = f[mode]
                cells = [r["id"]] + ([runs[run_key(r, m0)]] if len(runs) > 1 else []) + [f"{r['rho'][pass_]:.3f}", f"{fm['median_ms']:.3f}", f"{fm['tflops']:.0f}",
                         f"{fm['clock_mhz']:.0f}" if fm["clock_mhz"] else "-",
                         f"{fm['power_w']:.0f}" if fm["power_w"] else "-"]
                peer_ms = []
                bad = {n for n, e in r.get("check_rel_err_vs_fmsim", {}).items() if worst_err(e) > AGREE}
                for n in names[1:]:
                    g = r["impls"].get(n, {})
                    cell = f"{g[mode]['median_ms']:.3f}" if mode in g else ("err" if g else "")
                    cells.append(cell + (" (wrong)" if n in bad and mode in g else ""))
                for n in names[1:]:
                    g = r["impls"].get(n, {})
                    if mode in g and n not in bad:
                        q = fm["median_ms"] / g[mode]["median_ms"]
                        ratios[n].append(q)
                        if not is_fmsim(n):
                            peer_ms.append(g[mode]["median_ms"])
                        cells.append(f"{q:.3f}")
                    else:
                        cells.append("")
                if peer_ms:
                    best.append(fm["median_ms"] / min(peer_ms))
                out.append("| " + " | ".join(cells) + " |")
            out.append("")
            summ = [f"{base}/{n}: geomean {geomean(v):.3f}, worst {max(v):.3f} ({len(v)} cases)"
                    for n, v in ratios.items() if v]
            if best:
                summ.append(f"{base}/fastest peer: worst {max(best):.3f}, geomean {geomean(best):.3f}")
            out.append("; ".join(summ) + ".")
            out.append("")
            wrong = sum(1 for r in rows for e in r.get("check_rel_err_vs_fmsim", {}).values() if worst_err(e) > AGREE)
            if wrong:
                out.append(f"(wrong): {wrong} peer result(s) differed from fmsim's on the same inputs by a "
                           f"relative error above {AGREE} (`check_rel_err_vs_fmsim` in the JSON); their times "
                           "are shown but left out of every ratio and summary.")
                out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="JSON output (measure mode)")
    ap.add_argument("--table", nargs="+", help="print the markdown table of these JSON runs (no GPU)")
    ap.add_argument("--seqlens", default="8192,32768,131072")
    ap.add_argument("--families", default="all", help="comma list, or all (the paper's twelve)")
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128))
    ap.add_argument("--passes", default="fwd,bwd")
    ap.add_argument("--peers", default="triton,flash,cudnn", help="comma list of triton, flash, cudnn; '' for none")
    ap.add_argument("--fmsim-variants", default="",
                    help="time fmsim once per mask method, e.g. r2p,slices,words (fmsim[r2p], fmsim[slices], "
                         "...; the first is the reference); '' (default): fmsim with the library's method")
    ap.add_argument("--tokens", type=int, default=131072, help="B = tokens / S")
    ap.add_argument("--hidden", type=int, default=4096, help="H = hidden / D")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--sustain-s", type=float, default=1.0)
    ap.add_argument("--burst", type=int, default=2)
    ap.add_argument("--idle-s", type=float, default=0.3)
    ap.add_argument("--budget-s", type=float, default=0.0, help="start no case after this many seconds")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return 0
    if not args.out:
        ap.error("--out is required to measure (or --table to print a table)")
    for p in args.passes.split(","):
        if p not in ("fwd", "bwd"):
            ap.error(f"--passes: {p!r} is not fwd or bwd")
    vs = [v for v in args.fmsim_variants.split(",") if v]
    if any(v not in MASK_METHODS for v in vs) or len(set(vs)) != len(vs):
        ap.error(f"--fmsim-variants: {args.fmsim_variants!r}: expected distinct entries of {', '.join(MASK_METHODS)}")
    return measure_main(args)


if __name__ == "__main__":
    sys.exit(main())
