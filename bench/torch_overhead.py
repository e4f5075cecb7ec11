#!/usr/bin/env python3
"""What the PyTorch op (fmsim.torch.flashmask_attention) costs over the bare launch.

Host side: the time per call of the op against fm_attn_forward called through
ctypes with a problem built once (the bare launch: the library's own host work,
the preprocessing kernels and the kernel launch), both in bursts of N calls that
start on an idle GPU with a small problem, so the host and not the GPU sets the
pace (N x 6 launches stay inside the launch queue). GPU side: CUDA events around
N calls of each on a mid-size problem (the op adds one conversion kernel).
Prints one line per figure and writes --out JSON.

    python3 bench/torch_overhead.py [--out overhead.json]
"""
import argparse
import ctypes as C
import json
import statistics
import time

import torch

import fmsim
import fmsim.torch as ft


def bare_launcher(q, k, v, sri, causal):
    """fm_attn_forward with everything the op computes per call done once."""
    pp = ft._prepare(q, k, v, sri, causal, None, "bshd", "auto")
    s = pp.shape
    o = torch.empty((s.B, s.Sq, s.H, s.D), dtype=torch.bfloat16, device="cuda")
    lse = torch.empty((s.B, s.H, s.Sq), dtype=torch.float32, device="cuda")
    p = ft._problem(s, pp.scale, causal, pp.iv, pp.nb, pp.nh, pp.kid)
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    err, ref, stream = ft.N.Err(), C.byref(p), pp.stream
    fwd = ft._lib.fm_attn_forward

    def run():
        if fwd(ref, 0, 0, stream, C.byref(err)) != 0:
            raise RuntimeError(err.msg.decode())
    return run, (o, lse, pp)


def host_us(fn, n=100, rounds=30):
    per = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per.append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(per)


def gpu_ms(fn, n=50, rounds=5):
    out = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / n)
    return statistics.median(out)


def case(S, H, fam="causal_document"):
    m = fmsim.family(fam, S)
    sri, causal = m.to_paddle()
    sri = torch.as_tensor(sri, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, S, H, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    return q, k, v, sri, causal


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    q, k, v, sri, causal = case(256, 1)
    bare, keep = bare_launcher(q, k, v, sri, causal)

    def op():
        with torch.no_grad():
            return ft.flashmask_attention(q, k, v, sri, causal)

    qg = q.clone().requires_grad_()
    op_grad = lambda: ft.flashmask_attention(qg, k, v, sri, causal)  # noqa: E731  (records the graph)
    for f in (bare, op, op_grad):
        f()
    torch.cuda.synchronize()
    for _ in range(3):  # interleaved, so the host's state drifts alike
        res.setdefault("host_us_bare", []).append(host_us(bare))
        res.setdefault("host_us_op", []).append(host_us(op))
        res.setdefault("host_us_op_autograd", []).append(host_us(op_grad))
    for key in ("host_us_bare", "host_us_op", "host_us_op_autograd"):
        res[key] = statistics.median(res[key])
    res["overhead_us"] = res["host_us_op"] - res["host_us_bare"]
    res["overhead_us_autograd"] = res["host_us_op_autograd"] - res["host_us_bare"]
    q, k, v, sri, causal = case(4096, 8)
    bare, keep = bare_launcher(q, k, v, sri, causal)

    def op2():
        with torch.no_grad():
            return ft.flashmask_attention(q, k, v, sri, causal)
    gpu_ms(bare, rounds=1), gpu_ms(op2, rounds=1)  # warm-up
    res["gpu_ms_bare"], res["gpu_ms_op"] = gpu_ms(bare), gpu_ms(op2)
    res["gpu_overhead_us"] = 1e3 * (res["gpu_ms_op"] - res["gpu_ms_bare"])
    print(f"host per call: bare fm_attn_forward {res['host_us_bare']:.1f} us, op {res['host_us_op']:.1f} us "
          f"(no_grad), {res['host_us_op_autograd']:.1f} us (autograd): overhead {res['overhead_us']:.1f} / "
          f"{res['overhead_us_autograd']:.1f} us")
    print(f"GPU per call (S=4096, H=8): bare {res['gpu_ms_bare']:.4f} ms, op {res['gpu_ms_op']:.4f} ms: "
          f"{res['gpu_overhead_us']:.1f} us")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
