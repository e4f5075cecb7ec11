#!/usr/bin/env python3
"""The two ceilings of the floor (kernels/PERF_NOTES.md, "The floor"): a bf16 GEMM
(8192^3, the tensor cores' rate) and a device-to-device copy (HBM bandwidth), timed
with CUDA events through PyTorch (bash bench/gpu.sh ceilings).

    python3 bench/ceilings.py [--n 8192] [--copy-gib 4] [--json FILE]
"""
import argparse
import json
import sys


def median_ms(torch, fn, reps):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(reps):
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        ms.append(e0.elapsed_time(e1))
    ms.sort()
    return ms[len(ms) // 2]


def main(argv):
    ap = argparse.ArgumentParser(description="bf16 GEMM and device-copy ceilings of this GPU")
    ap.add_argument("--n", type=int, default=8192, help="GEMM size n (n x n x n), default 8192")
    ap.add_argument("--copy-gib", type=int, default=4, help="bytes copied, GiB (default 4)")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args(argv)
    if a.n < 64 or a.copy_gib < 1:
        sys.stderr.write("ceilings.py: --n must be at least 64 and --copy-gib at least 1\n")
        return 2
    try:
        import torch
    except ImportError:
        sys.stderr.write("ceilings.py: needs PyTorch (import torch failed)\n")
        return 2
    if not torch.cuda.is_available():
        sys.stderr.write("ceilings.py: no CUDA device\n")
        return 2
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        x @ y
    gemm = median_ms(torch, lambda: x @ y, 20)
    tflops = 2 * a.n ** 3 / gemm / 1e9
    print("bf16 GEMM %d^3: %.3f ms median of 20, %.1f TFLOP/s" % (a.n, gemm, tflops))
    del x, y
    src = torch.empty(a.copy_gib << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    copy = median_ms(torch, lambda: dst.copy_(src), 10)
    gbs = 2 * src.numel() / copy / 1e6
    print("device copy %d GiB: %.3f ms, %.1f GB/s read + written" % (a.copy_gib, copy, gbs))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), gemm_n=a.n, gemm_ms=gemm,
                           gemm_tflops=tflops, copy_gib=a.copy_gib, copy_ms=copy, copy_gbs=gbs), f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
