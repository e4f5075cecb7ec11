"""The cases of the linear-RNN benchmark, without torch: bench/linrnn_bench.py runs them on
the GPU, bench/linrnn_table.py reports them. A case id names its documents and chunk:
fixedL-CC (documents of L tokens), drawnL-CC (log-normal lengths of mean L), oneT-CC (one
document of T tokens) and prod-BB-TT-HH-DD (flash-linear-attention's production shapes, as
separate sequences)."""
import math
import re

import numpy as np

# flash-linear-attention's benchmarks/ops registry: its six shapes (B, T, H, D with dk = dv = D)
PRODUCTION = [(1, 8192, 96, 128), (2, 16384, 16, 128), (4, 2048, 16, 128), (4, 4096, 64, 128),
              (8, 2048, 32, 256), (8, 1024, 8, 64)]


def prod_id(B: int, T: int, H: int, D: int) -> str:
    return f"prod-B{B}-T{T}-H{H}-D{D}"


def packed_id(kind: str, L: int, chunk: int) -> str:
    """kind: fixed, drawn or one (L: the document length, or T for one)."""
    return f"{kind}{L}-C{chunk}"


def parse_id(case: str):
    """(kind, nominal length, chunk) of a packed case's id, or None for another id."""
    m = re.fullmatch(r"(fixed|drawn|one)(\d+)-C(\d+)", case)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def doc_lengths(T: int, mean: int, drawn: bool, seed: int) -> list:
    """Fixed lengths, or log-normal ones of that mean (sigma 1, at least 16), the last cut to fill T."""
    if not drawn:
        n = T // mean
        out = [mean] * n
        if T - n * mean:
            out.append(T - n * mean)
        return out
    rng = np.random.default_rng(seed)
    mu = math.log(mean) - 0.5  # E[lognormal(mu, 1)] = exp(mu + 1/2) = mean
    out, total = [], 0
    while total < T:
        L = max(16, int(round(rng.lognormal(mu, 1.0))))
        L = min(L, T - total)
        out.append(L)
        total += L
    return out
