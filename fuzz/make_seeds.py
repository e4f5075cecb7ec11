#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/ (small, deterministic; rerun after a
format change: python3 fuzz/make_seeds.py). Reproducers of crashes found by
fuzzing are added beside the seeds by hand (crash-*/repro-* files) and never
regenerated. Needs numpy (Debian's python3-numpy) and a built fmsim, whose
`fmsim families --json` lists the families ($FMSIM_BIN, else the checkout's
build/app/fmsim, else PATH): a new family gets its seed with no edit here."""
import io
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fmsim_registry  # noqa: E402  (scripts/: the registry as fmsim prints it)
SEP = b"\n#FILE#\n"


def npy(a, version=None):
    b = io.BytesIO()
    if version:
        np.lib.format.write_array(b, a, version=version)
    else:
        np.save(b, a)
    return b.getvalue()


def put(kind, name, data):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def causal(n):
    return np.tril(np.ones((n, n), dtype=bool))


def docs(n, cuts):
    m = np.zeros((n, n), dtype=bool)
    s = 0
    for c in cuts + [n]:
        m[s:c, s:c] = np.tril(np.ones((c - s, c - s), dtype=bool))
        s = c
    return m


def intervals(sk, k, sq, rng):
    a = np.zeros((1, 1, sk, k), dtype=np.int32)
    for j in range(sk):
        lo = int(rng.integers(0, sq + 1))
        hi = int(rng.integers(lo, sq + 1))
        a[0, 0, j, :] = ([lo, hi, 0, 0] if k == 4 else [lo, hi] if k == 2 else [lo])[:k]
    return a


def main():
    rng = np.random.default_rng(0)
    # .npy reader
    put("npy", "bool-2d", npy(causal(8)))
    put("npy", "u8-4d", npy(docs(8, [3]).astype(np.uint8).reshape(1, 1, 8, 8)))
    put("npy", "i32-1d", npy(np.arange(5, dtype=np.int32)))
    put("npy", "f32-3d", npy(np.zeros((2, 2, 3), dtype=np.float32)))
    put("npy", "i64-v2", npy(np.arange(4, dtype=np.int64), version=(2, 0)))
    put("npy", "f16-v3", npy(np.ones(3, dtype=np.float16), version=(3, 0)))
    put("npy", "scalar", npy(np.array(7, dtype=np.int8)))
    put("npy", "empty", npy(np.zeros((0, 4), dtype=np.int32)))
    # interval files: byte 0 = causal bit + Sq choice, then the array
    put("intervals", "causal1", b"\x01" + npy(np.arange(8, dtype=np.int32).reshape(1, 1, 8, 1)))
    put("intervals", "causal2", b"\x01" + npy(intervals(8, 2, 8, rng)))
    put("intervals", "bidir2", b"\x00" + npy(intervals(8, 2, 8, rng)))
    put("intervals", "bidir4-sq64", b"\x08" + npy(intervals(16, 4, 64, rng)))
    put("intervals", "i64", b"\x00" + npy(intervals(4, 4, 4, rng).astype(np.int64)))
    put("intervals", "dense-given", b"\x00" + npy(causal(4)))
    # dense checker: byte 0 = masked-true bit, then the mask
    put("dense", "causal", b"\x00" + npy(causal(16)))
    put("dense", "docs-4d", b"\x00" + npy(docs(16, [5, 11]).reshape(1, 1, 16, 16)))
    put("dense", "u8-masked-true", b"\x01" + npy((~causal(8)).astype(np.uint8)))
    add = np.where(causal(8), 0.0, -np.inf).astype(np.float32)
    put("dense", "additive-f32", b"\x00" + npy(add))
    put("dense", "heads", b"\x00" + npy(np.stack([causal(8), docs(8, [4])]).reshape(1, 2, 8, 8)))
    put("dense", "misfit", b"\x00" + npy(rng.integers(0, 2, (8, 8)).astype(bool)))
    # sample files
    with open(os.path.join(ROOT, "data", "kernel_test_seq_info.txt")) as f:
        lines = f.read().splitlines()
    put("samples", "paper-head", "\n".join(lines[:4]) + "\n")
    put("samples", "one", "Total length: 64\nSample 1, num_docs 2: [(0, 30), (5, 34)]# [0, 1]\n")
    put("samples", "huge-count",
        "Total length: 1073741824\nSample 1, num_docs 1073741824: [(0, 1)]# [0]\n")
    # family parameters: family index, S (2 bytes, little-endian, mod 4096), B/H byte, lines
    names = [f["name"] for f in fmsim_registry.families(None, "make_seeds")]  # the fuzzer picks byte 0 % count
    # seeds that reach past the defaults; any other family is seeded with its defaults
    params = {"sliding_window": "w=16", "causal_document": "docs=100,50,106",
              "document": "docs=3:100,156", "share_question": "docs=10+5+5,20+10\ndocs_min=2",
              "global_sliding_window": "wl=8\nwr=4\ng=4", "causal_blockwise": "docs_min=2\ndocs_max=4",
              "prefix_lm_document": "docs=10:100,20:156", "prefix_lm_causal": "p=32",
              "qk_sparse": "spans=10:20,100:5\ndocs=128,128", "random_eviction": "r=100"}
    for i, n in enumerate(names):
        put("params", n, bytes([i, 0, 1, 0]) + params.get(n, "").encode())
    # scenarios: the repository's own
    for fn in sorted(os.listdir(os.path.join(ROOT, "scenarios"))):
        if fn.endswith(".yaml"):
            with open(os.path.join(ROOT, "scenarios", fn), "rb") as f:
                put("scenario", fn[:-5], f.read())
    # trace folders: summary.json, tiles.npy, tiles_exact.npy, columns.npy[, tile_cycles.npy]
    summary = (b'{"format": "fmsim-trace", "version": 1, "kind": "analysis", "device": "cpu", '
               b'"family": "causal", "params": "", "docs_source": "", "seqlen": 64, "seqlen_q": 64, '
               b'"seqlen_k": 64, "batch": 1, "heads": 1, "mask_sets": 1, "causal": true, '
               b'"form": "causal-1", "br": 32, "bc": 32, "tiles_rows": 2, "tiles_cols": 2}')
    tiles = np.array([[[2, 0], [1, 2]]], dtype=np.uint8)
    cols = np.zeros((1, 1, 64, 4), dtype=np.int32)
    cols[..., 0] = 64
    cols[..., 1] = 64
    put("trace", "analysis", SEP.join([summary, npy(tiles), npy(tiles), npy(cols)]))
    cyc = np.arange(4, dtype=np.int64).reshape(1, 1, 2, 2)
    put("trace", "cycles", SEP.join([summary, npy(tiles), npy(tiles), npy(cols), npy(cyc)]))
    # viewer scripts: 4 bytes of extent, then lines
    put("viz_script", "tour", b"\x00\x04\x00\x04" + b"key +\nmotion 600 400\nwheel 3 500 300\n"
        b"drag 300 300 900 500\nkey left\nkey 0\nresize 800 600\n# done\nkey q\n")
    put("viz_script", "extreme", b"\xff\xff\xff\xff" + b"drag -1048576 -1048576 1048576 1048576\n"
        b"wheel -1000\nwheel 1000 0 0\n")
    # GPU profiles: the committed ones, and the inputs of issue 20's hostile pass
    for fn in sorted(os.listdir(os.path.join(ROOT, "data", "gpu"))):
        if fn.endswith(".json"):
            with open(os.path.join(ROOT, "data", "gpu", fn), "rb") as f:
                put("profile", fn[:-5], f.read())
    put("profile", "one-byte-t", b"t")
    put("profile", "words", b'[true, false, null, tru, fals, nul]')
    with open(os.path.join(ROOT, "data", "gpu", "h200-sm80.json"), "rb") as f:
        sm80 = f.read()
    put("profile", "fit-cases-huge", sm80.replace(b'"cases": ', b'"cases": 1e300, "x": ', 1))


if __name__ == "__main__":
    main()
