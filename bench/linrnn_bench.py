#!/usr/bin/env python3
"""fmsim's chunkwise linear-attention kernel against flash-linear-attention, one protocol.

For each case (packed documents of fixed or drawn length, or one of fla's
production shapes as separate sequences), on the very same inputs: fmsim's
kernel (fmsim.linrnn) in its variants skip, causal and noskip, and fla's
chunk_simple_gla (scalar decay: the like-for-like peer) with cu_seqlens, as
separate sequences where the lengths are fixed, and chunk_gla (vector decay,
the scalar decay repeated over dk). Outputs are compared first (fmsim skip
against fla's chunk_simple_gla, and skip against noskip bit for bit), then every
implementation is timed by fmsim.protocol.measure (docs/DESIGN.md, "How we
measure": interleaved, sustained and burst figures apart, clock recorded).

Figures per implementation: ms, ns per token per head, and TFLOP/s of the
recurrence's useful work, 4 * dk * dv FLOPs per token and head (the state
update k v^T and the read-out S^T q; what every chunkwise kernel computes at
the least, whatever its chunking).

    python3 bench/linrnn_bench.py --out linrnn.json [--lengths 16,32,64,128,256,2048] [--quick]
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from fmsim.linrnn import chunk_linear_attention  # noqa: E402
from fmsim.protocol import PROTOCOL, measure  # noqa: E402
from linrnn_cases import PRODUCTION, doc_lengths, packed_id, prod_id  # noqa: E402  (bench/, beside this file)
from atomic import save_json  # noqa: E402


# every implementation impls_of can time (--impls picks among them)
IMPLS = ("fmsim-skip", "fmsim-causal", "fmsim-noskip", "fla-simple-gla", "fla-simple-gla-separate", "fla-gla")


def inputs(T, H, dk, dv, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(1, T, H, dk, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, T, H, dk, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, T, H, dv, device="cuda", dtype=torch.bfloat16, generator=g)
    # fla's registry draws simple_gla's gate as logsigmoid of a normal
    gate = F.logsigmoid(torch.randn(1, T, H, device="cuda", dtype=torch.float32, generator=g))
    return q, k, v, gate


def impls_of(q, k, v, gate, lens, chunk, sub, fla, separate):
    T = q.shape[1]
    cu32 = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    cu64 = cu32.long()
    out = {f"fmsim-{var}": (lambda var=var: chunk_linear_attention(q, k, v, gate, cu32, chunk=chunk, sub=sub,
                                                                   variant=var)[0])
           for var in ("skip", "causal", "noskip")}
    if fla is None:
        return out, cu32
    simple, gla = fla
    out["fla-simple-gla"] = lambda: simple(q, k, v, g=gate, cu_seqlens=cu64)[0]
    if separate:  # every document the same length: fla's batch of separate sequences
        L = lens[0]
        qs, ks, vs, gs = (t.view(T // L, L, *t.shape[2:]) for t in (q, k, v, gate))
        out["fla-simple-gla-separate"] = lambda: simple(qs, ks, vs, g=gs)[0].view(1, T, *v.shape[2:])
    gk = gate.unsqueeze(-1).expand(*gate.shape, q.shape[-1]).contiguous()
    out["fla-gla"] = lambda: gla(q, k, v, g=gk, cu_seqlens=cu64)[0]
    return out, cu32


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


def run_case(name, q, k, v, gate, lens, chunk, sub, fla, separate, log, timed=()):
    T, H, dk, dv = q.shape[1], q.shape[2], q.shape[3], v.shape[3]
    impls, cu32 = impls_of(q, k, v, gate, lens, chunk, sub, fla, separate)
    rec = {"id": name, "tokens": T, "heads": H, "dk": dk, "dv": dv, "chunk": chunk, "sub": sub,
           "ndocs": len(lens), "mean_len": T / len(lens), "checks": {}}
    outs, failed = {}, {}
    for n, f in list(impls.items()):  # a peer that cannot run this case is recorded, not timed
        try:
            outs[n] = f()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            failed[n] = {"error": f"{type(e).__name__}: {e}"}
            del impls[n]
    rec["failed"] = failed
    rec["checks"]["skip_equals_noskip"] = bool(torch.equal(outs["fmsim-skip"], outs["fmsim-noskip"]))
    rec["checks"]["skip_equals_causal"] = bool(torch.equal(outs["fmsim-skip"], outs["fmsim-causal"]))
    for n in impls:
        if n.startswith("fla"):
            rec["checks"][f"rel_err_vs_{n}"] = rel(outs["fmsim-skip"], outs[n])
    del outs
    if timed:  # --impls: every output is checked above; only these are timed
        impls = {n: f for n, f in impls.items() if n in timed}
    figs = measure(impls, log=log)
    flops = 4.0 * dk * dv * T * H
    rec["impls"] = {}
    for n, r in figs.items():
        if "error" in r:
            rec["impls"][n] = r
            continue
        d = {m: r[m].to_dict() for m in ("sustained", "burst")}
        for m in d:
            ms = d[m]["median_ms"]
            d[m]["ns_per_token_head"] = ms * 1e6 / (T * H)
            d[m]["tflops_useful"] = flops / (ms * 1e-3) / 1e12
        rec["impls"][n] = d
    return rec


def line(rec):
    s = rec["impls"]
    parts = [f"{rec['id']}:"]
    for n, d in s.items():
        if "sustained" in d:
            parts.append(f"{n} {d['sustained']['median_ms']:.3f} ms {d['sustained']['ns_per_token_head']:.3f} ns/th")
    sk = s.get("fmsim-skip", {}).get("sustained", {}).get("median_ms")
    for peer in ("fla-simple-gla", "fmsim-noskip", "fmsim-causal"):
        pm = s.get(peer, {}).get("sustained", {}).get("median_ms")
        if sk and pm:
            parts.append(f"| {peer}/skip {pm / sk:.2f}x")
    parts.append(f"| checks {rec['checks']}")
    return " ".join(parts)


def load_fla():
    try:
        from fla.ops.gla import chunk_gla
        from fla.ops.simple_gla import chunk_simple_gla
        return chunk_simple_gla, chunk_gla
    except Exception as e:  # noqa: BLE001  (the peer is optional; say why it is missing)
        print(f"linrnn_bench: flash-linear-attention not available ({e}); fmsim only", flush=True)
        return None


def cases(args):
    T, H, dk, dv = args.tokens, args.heads, args.dk, args.dv
    for chunk in args.chunks:
        for L in args.lengths:
            yield packed_id("fixed", L, chunk), (T, H, dk, dv), doc_lengths(T, L, False, 0), chunk, L <= T
            if L < T and not args.quick:
                yield packed_id("drawn", L, chunk), (T, H, dk, dv), doc_lengths(T, L, True, args.seed), chunk, False
        yield packed_id("one", T, chunk), (T, H, dk, dv), [T], chunk, False
    if not args.quick:  # at the first of --chunks (C 64 until the seventeenth session)
        for B, Tp, Hp, D in PRODUCTION:
            yield prod_id(B, Tp, Hp, D), (B * Tp, Hp, D, D), [Tp] * B, args.chunks[0], True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dk", type=int, default=128)
    ap.add_argument("--dv", type=int, default=256)
    ap.add_argument("--sub", type=int, default=16)
    ap.add_argument("--chunks", default="64", help="comma list of C")
    ap.add_argument("--lengths", default="16,32,64,128,256,2048")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=0.0, help="start no case after this many seconds")
    ap.add_argument("--quick", action="store_true", help="fixed lengths only, no production shapes")
    ap.add_argument("--only", default="", help="run the cases whose id contains one of these (comma list)")
    ap.add_argument("--impls", default="", help="time only these implementations (comma list, e.g. "
                    "fmsim-skip,fla-simple-gla); every one is still run once and its output checked")
    args = ap.parse_args()
    timed = tuple(x for x in args.impls.split(",") if x)
    bad = [x for x in timed if x not in IMPLS]
    if bad:  # one line, before any device work
        sys.exit(f"linrnn_bench: --impls {','.join(bad)}: not one of {', '.join(IMPLS)}")
    args.chunks = [int(x) for x in args.chunks.split(",")]
    args.lengths = [int(x) for x in args.lengths.split(",")]
    fla = load_fla()
    res = {"format": "fmsim-linrnn-bench", "version": 1, "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "protocol": PROTOCOL, "commit": os.environ.get("FM_COMMIT", ""),
           "command": " ".join(sys.argv), "useful_flops": "4 * dk * dv per token and head", "records": []}
    t0 = time.time()
    only = [x for x in args.only.split(",") if x]
    for name, (T, H, dk, dv), lens, chunk, separate in cases(args):
        if only and not any(x in name for x in only):
            continue
        if args.budget_s and time.time() - t0 > args.budget_s:
            print(f"budget spent: {name} not started", flush=True)
            continue
        if dk not in (64, 128):
            res["records"].append({"id": name, "skipped": f"dk {dk}: fmsim's kernel takes 64 or 128"})
            print(f"{name}: skipped (dk {dk})", flush=True)
            continue
        q, k, v, gate = inputs(T, H, dk, dv, args.seed)
        try:
            rec = run_case(name, q, k, v, gate, lens, chunk, args.sub, fla, separate, None, timed)
        except Exception as e:  # noqa: BLE001  (one case's failure is recorded, the others run)
            rec = {"id": name, "error": f"{type(e).__name__}: {e}"}
            print(f"{name}: {rec['error']}", flush=True)
        else:
            print(line(rec), flush=True)
        res["records"].append(rec)
        del q, k, v, gate
        torch.cuda.empty_cache()
        save_json(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
