"""bench/bwd_bits.py: the sm90 backward's gradients as digests, to compare two builds bit for bit.

    FMSIM_CUDA_LIBRARY=BUILD_A/libfmsim_cuda.so python3 bench/bwd_bits.py --out a.json
    FMSIM_CUDA_LIBRARY=BUILD_B/libfmsim_cuda.so python3 bench/bwd_bits.py --out b.json
    python3 bench/bwd_bits.py --compare a.json b.json      # exit 1 on any difference

A change that moves only data (not arithmetic) must keep every digest: dK and dV in
both modes, dQ in deterministic mode (the default mode adds dQ's fp32 parts in the order
the CTAs reach them, so its dQ may differ run to run; it is recorded, not compared).
Cases: full, causal, a document mask and random intervals; query tails (257, 1000
rows), Sq != Sk, head dims 64 and 128; skip and noskip. Inputs from a seeded generator.
"""
import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

CASES = [  # name, B, H, Sq, Sk, D, causal, mask
    ("full", 2, 3, 257, 257, 128, False, None),
    ("causal", 2, 3, 1000, 1000, 128, True, None),
    ("causal_sq_ne_sk", 1, 2, 300, 520, 128, True, None),
    ("document", 1, 4, 1000, 1000, 128, True, "document"),
    ("random", 2, 2, 777, 640, 128, False, "random"),
    ("full_hd64", 2, 3, 257, 257, 64, False, None),
    ("document_hd64", 1, 4, 1000, 1000, 64, True, "document"),
]


def mask(kind, b, h, sq, sk, g, torch):
    if kind is None:
        return None
    if kind == "document":  # causal: LTS = the end of key j's document
        ends = torch.tensor([137, 400, 401, 800, sk], dtype=torch.int32)
        j = torch.arange(sk, dtype=torch.int32)
        lts = ends[torch.searchsorted(ends, j, right=True)].clamp(max=sq)
        return lts.view(1, 1, sk, 1).expand(b, h, sk, 1).contiguous().cuda()
    a = torch.randint(0, sq, (b, h, sk, 2), generator=g, dtype=torch.int32).sort(dim=-1).values
    return torch.stack([a[..., 0], a[..., 1], torch.full_like(a[..., 0], sq), torch.full_like(a[..., 0], sq)],
                       dim=-1).contiguous().cuda()


def digests():
    import torch
    from fmsim.torch import flashmask_attention, library_path
    out = {"library": library_path(), "cases": {}}
    for name, B, H, sq, sk, D, causal, kind in CASES:
        g = torch.Generator().manual_seed(1234)
        q, k, v, do = (torch.randn(B, s, H, D, generator=g).to(torch.bfloat16).cuda()
                       for s in (sq, sk, sk, sq))
        sri = mask(kind, B, H, sq, sk, g, torch)
        for det in (False, True):
            for variant in ("skip", "noskip"):
                qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
                o = flashmask_attention(qq, kk, vv, sri, causal, deterministic=det, variant=variant)
                o.backward(do)
                torch.cuda.synchronize()
                rec = {n: hashlib.sha256(t.grad.contiguous().view(torch.int16).cpu().numpy().tobytes()).hexdigest()
                       for n, t in (("dq", qq), ("dk", kk), ("dv", vv))}
                out["cases"][f"{name}/{'det' if det else 'default'}/{variant}"] = rec
    return out


def compare(a, b):
    bad = 0
    for key, ra in a["cases"].items():
        rb = b["cases"].get(key)
        for n in ("dq", "dk", "dv"):
            if n == "dq" and "/default/" in key:
                continue
            same = rb is not None and ra[n] == rb[n]
            bad += not same
            print(f"{key:36s} {n}: {'same' if same else 'DIFFERENT'}")
    print(f"bwd_bits: {'all compared digests identical' if not bad else f'{bad} differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2)
    args = ap.parse_args()
    if args.compare:
        sys.exit(compare(*(json.load(open(p)) for p in args.compare)))
    json.dump(digests(), open(args.out, "w"), indent=1)
