"""Helper of bench/python_mask_mod_bench.sh (see there).
  gen NAME S PATH        the dense mask of a mask_mod as .npy (True = may attend)
  eval NAME S OUT.npy    fmsim.from_mask_mod: writes the intervals and prints one JSON line
"""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from test_python_gym_masks import gym_masks  # noqa: E402

import fmsim  # noqa: E402


def main():
    what, name, S, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    fn, _ = gym_masks(S)[name]
    if what == "gen":
        out = np.lib.format.open_memmap(path, mode="w+", dtype=bool, shape=(S, S))
        kv = np.arange(S, dtype=np.int32)[None, :]
        step = max(1, (1 << 22) // S)
        for r0 in range(0, S, step):
            q = np.arange(r0, min(S, r0 + step), dtype=np.int32)[:, None]
            out[r0:r0 + len(q)] = fn(np.int32(0), np.int32(0), q, kv)
        out.flush()
        return
    t = time.perf_counter()
    r = fmsim.from_mask_mod(fn, 1, 1, S)
    dt = time.perf_counter() - t
    np.save(path, r.intervals if r.fits else np.zeros((0,), np.int32))
    print(json.dumps({"mask": name, "S": S, "fits": r.fits, "form": r.form, "causal": r.causal,
                      "seconds": round(dt, 3), "rho_128": r.tiles["sparsity"]}))


if __name__ == "__main__":
    main()
