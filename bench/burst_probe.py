#!/usr/bin/env python3
"""How long an idle pause the H200 needs before a launch runs at its boost clock
(sizes the protocol's burst pause, idle_s): fmsim's forward on the full mask at
8K (B 16, H 32, D 128), after 2 s of back-to-back load, then single launches
after pauses of 0.05 to 1.6 s, each with the SM clock and power read just
before it (NVML). Two passes over the pauses; prints a line per launch.

    python3 bench/burst_probe.py [--out probe.json]
"""
import argparse
import json
import time

import torch

import fmsim
from fmsim.protocol import Nvml, _Flush, _launches
from fmsim.torch import flashmask_attention


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--seqlen", type=int, default=8192)
    a = ap.parse_args()
    S = a.seqlen
    B, H, D = max(1, 131072 // S), 32, 128
    sri, causal = fmsim.family("full", S).to_paddle()
    sri = torch.as_tensor(sri, device="cuda")
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def fn():
        with torch.no_grad():
            return flashmask_attention(q, k, v, sri, causal)
    flush, nv = _Flush(torch.device("cuda")), Nvml()
    rows = []
    for rep in range(2):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2.0:
            hot = _launches(fn, 8, flush)
        for pause in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6):
            time.sleep(pause)
            clk, pw = nv.read()
            ms = _launches(fn, 1, flush)[0]
            rows.append(dict(rep=rep, pause_s=pause, ms=ms, clock_mhz=clk, power_w=pw, hot_ms=hot[-1]))
            print(f"pass {rep}: after {pause:4.2f} s idle: {ms:8.3f} ms (clock before {clk} MHz, {pw} W); "
                  f"hot {hot[-1]:.3f} ms", flush=True)
            _launches(fn, 8, flush)  # back to the hot state before the next pause
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
