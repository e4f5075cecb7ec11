#!/usr/bin/env python3
"""SDPA peers of the kernel benchmark (fm_kernel_bench), run in the same session
on the same GPU: PyTorch scaled_dot_product_attention with the FlashAttention-2
and cuDNN backends, full and causal masks, bf16, layout [B, S, H, D] (viewed as
[B, H, S, D]), B = 128K / S, H = 4096 / D. Times: CUDA events, median after one
warm-up, L2 flushed (256 MiB zero fill) before every launch.

With --bench-json (fm_kernel_bench --json output) it prints fmsim / peer next to
each figure: TFLOP/s by the paper's count 4*B*H*S*S*D*(1-rho), rho at fmsim's own
tile size taken from the bench file (0 for full).
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, reps, flush):
    times = []
    for it in range(reps + 1):
        flush.zero_()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        if it > 0:
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlens", default="8192,32768")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--bench-json", default=None)
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    D = a.head_dim
    H = 4096 // D
    bench = {}
    if a.bench_json:
        with open(a.bench_json) as f:
            for c in json.load(f)["cases"]:
                bench[(c["family"], c["seqlen"])] = c
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    torch.manual_seed(0)
    out = []
    print(f"SDPA peers on {torch.cuda.get_device_name()} (torch {torch.__version__}), D={D}")
    for S in [int(x) for x in a.seqlens.split(",")]:
        B = max(1, 131072 // S)
        q, k, v = (torch.randn(B, S, H, D, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
                   for _ in range(3))
        for causal in (False, True):
            fam = "causal" if causal else "full"
            fm = bench.get((fam, S))
            rho = fm["rho"] if fm else (0.0 if not causal else 0.5)
            flops = 4.0 * B * H * S * S * D * (1.0 - rho)
            for name, backend in (("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                     a.reps, flush)
                except Exception as e:  # a backend may refuse a shape
                    print(f"  {fam:6s} S={S:6d} SDPA {name:5s}: failed ({type(e).__name__}: {str(e)[:80]})")
                    continue
                tf = flops / (ms * 1e-3) / 1e12
                line = f"  {fam:6s} S={S:6d} B={B:3d} H={H} SDPA {name:5s} {ms:9.3f} ms {tf:7.1f} TFLOP/s"
                rec = {"family": fam, "seqlen": S, "peer": "sdpa_" + name.lower(), "ms": ms, "tflops": tf}
                if fm:
                    ratio = tf and fm["tflops_skip"] / tf
                    line += f" | fmsim {fm['ms_skip']:9.3f} ms {fm['tflops_skip']:7.1f} TFLOP/s, fmsim/peer {ratio:.3f}"
                    rec["fmsim_tflops"] = fm["tflops_skip"]
                    rec["fmsim_over_peer"] = ratio
                print(line, flush=True)
                out.append(rec)
        del q, k, v
        torch.cuda.empty_cache()
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
