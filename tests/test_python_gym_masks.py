"""attention-gym-style mask_mods (written here, in that style) and the check
that from_mask_mod gives what `fmsim check` / `fmsim convert` give on the
dense mask. bench/python_mask_mod_bench.sh runs the same mask_mods at
S = 32768 for time and memory.

Each generator returns mask_mod(b, h, q_idx, kv_idx) -> True where query q_idx
may attend key kv_idx, written as attention-gym writes them (broadcasting
comparisons, a lookup table for documents), so the same function works with
numpy index arrays and with torch tensors.
"""
import json
import os
import subprocess

import numpy as np
import pytest

import fmsim


def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def generate_sliding_window(window_size):
    """attention-gym's sliding window: causal, keys at most window_size behind."""
    def sliding_window(b, h, q_idx, kv_idx):
        causal = q_idx >= kv_idx
        window = q_idx - kv_idx <= window_size
        return causal & window
    return sliding_window


def lengths_to_offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def generate_doc_mask_mod(inner, offsets):
    """attention-gym's document mask: tokens attend within their document, and
    `inner` decides inside it on logical (per-document) positions."""
    offsets = np.asarray(offsets)
    document_id = np.repeat(np.arange(len(offsets) - 1, dtype=np.int32), np.diff(offsets))

    def doc_mask_mod(b, h, q_idx, kv_idx):
        lib = _lib_of(q_idx)
        doc = lib.asarray(document_id) if lib is not np else document_id
        off = lib.asarray(offsets) if lib is not np else offsets
        same_doc = doc[q_idx] == doc[kv_idx]
        q_logical = q_idx - off[doc[q_idx]]
        kv_logical = kv_idx - off[doc[kv_idx]]
        return same_doc & inner(b, h, q_logical, kv_logical)
    return doc_mask_mod


def noop(b, h, q_idx, kv_idx):
    return (q_idx >= 0) | (kv_idx >= 0)


def generate_prefix_lm_mask(prefix_length):
    """attention-gym's prefix LM: the prefix is seen by everyone, the rest causally."""
    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_length) | (q_idx >= kv_idx)
    return prefix_lm


def _lib_of(x):
    if type(x).__module__.startswith("torch"):
        import torch
        return torch
    return np


def doc_lengths(S, seed=0):
    """Document lengths summing to S (seeded)."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, S), size=max(1, S // 2048) - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [S]]))


def gym_masks(S):
    """The three must-reach mask_mods at length S, with the form each must give."""
    return {
        "sliding_window": (generate_sliding_window(S // 16), "causal-1"),
        "document": (generate_doc_mask_mod(noop, lengths_to_offsets(doc_lengths(S))), "bidir-2"),
        "prefix_lm": (generate_prefix_lm_mask(S // 2), "bidir-2"),
    }


def dense_of(fn, S, chunk=None):
    """The dense mask (True = may attend) of a mask_mod, evaluated in row chunks."""
    chunk = chunk or max(1, (1 << 22) // S)
    out = np.empty((S, S), dtype=bool)
    kv = np.arange(S, dtype=np.int32)[None, :]
    for r0 in range(0, S, chunk):
        q = np.arange(r0, min(S, r0 + chunk), dtype=np.int32)[:, None]
        out[r0:r0 + len(q)] = np.broadcast_to(fn(np.int32(0), np.int32(0), q, kv), (len(q), S))
    return out


def fmsim_bin():
    exe = fmsim.binary_path()
    if exe is None:
        pytest.skip("the fmsim binary is not built")
    return exe


@pytest.mark.parametrize("name", ["sliding_window", "document", "prefix_lm"])
def test_gym_mask_matches_fmsim_check(name, tmp_path):
    S = 1024
    fn, form = gym_masks(S)[name]
    r = fmsim.from_mask_mod(fn, 1, 1, S, chunk_rows=100)  # uneven chunks on purpose
    assert r.fits and r.form == form
    dense = dense_of(fn, S)
    path = tmp_path / "m.npy"
    np.save(path, dense)
    exe = fmsim_bin()
    rep = json.loads(subprocess.run([exe, "check", str(path), "--json"], capture_output=True,
                                    text=True, check=True).stdout)
    assert rep["representable"] and rep["form"] == form
    assert rep["max_runs"] == r.max_runs and rep["tiles"]["masked"] == r.tiles["masked"]
    iv = tmp_path / "iv.npy"
    out = json.loads(subprocess.run([exe, "convert", str(path), "-o", str(iv), "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    assert out["causal"] == r.causal
    assert np.array_equal(np.load(iv), r.intervals)
    # and the intervals are the mask
    assert np.array_equal(r.mask.to_dense(), dense)
