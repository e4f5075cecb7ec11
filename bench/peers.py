"""The peers of fmsim's kernels on one mask, as callables for fmsim.protocol:
PyTorch FlexAttention (Triton backend, and FLASH: FlashAttention-4's CuTe-DSL
kernels when flash_attn.cute imports) fed the very interval vectors fmsim runs,
and SDPA's cuDNN backend on the full and causal masks. Used by
bench/protocol_bench.py; needs torch with CUDA.

The mask_mod reads the vectors (set = (nb > 1 ? b : 0) * nh + (nh > 1 ? h : 0)):

    masked(q, kv) = LTS <= q < LTE  or  UTS <= q < UTE  or  (causal and q < kv)

The BlockMask comes from create_block_mask (what FlexAttention users call), except
for per-head masks past `auto_limit` (2^33) mask_mod evaluations (random eviction
at every paper length: create_block_mask took 85 s at 32K and runs out of memory
at 128K),
where it is built from the vectors by FlashMask's min/max rule on 128 x 128
blocks (BlockMask.from_kv_blocks): conservative, so FlexAttention's output is the
same; only blocks the exact test would call masked or full may be computed as
partial. Each Peer says which (`block_mask_from`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch
import torch._functorch.config
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

torch._dynamo.config.cache_size_limit = 512
torch._dynamo.config.accumulated_cache_size_limit = 4096
# the backward is timed as torch.autograd.grad(..., retain_graph=True) on one recorded
# forward, which compiled graphs with donated buffers refuse
torch._functorch.config.donated_buffer = False
_flex = torch.compile(flex_attention, dynamic=False)


def mask_mod_from(vec, causal: bool, nb: int, nh: int):
    """vec: int32 [nb * nh, 4, S] on the GPU (LTS, LTE, UTS, UTE). One shared set is
    indexed by the key alone (1-D vectors: the FLASH backend's CuTe DSL takes tensor
    indices only)."""
    per_set = nb * nh > 1
    lts, lte, uts, ute = (vec[:, i].contiguous() for i in range(4))
    if not per_set:
        lts, lte, uts, ute = lts[0], lte[0], uts[0], ute[0]

    def mm(b, h, q, kv):
        if per_set:
            s = (b if nb > 1 else 0) * nh + (h if nh > 1 else 0)
            a, e, c, d = lts[s, kv], lte[s, kv], uts[s, kv], ute[s, kv]
        else:
            a, e, c, d = lts[kv], lte[kv], uts[kv], ute[kv]
        masked = ((q >= a) & (q < e)) | ((q >= c) & (q < d))
        if causal:
            masked = masked | (q < kv)
        return ~masked

    return mm


def block_mask_from_intervals(v: np.ndarray, causal: bool, B: int, H: int, nb: int, nh: int, S: int, mm,
                              dev, blk: int = 128):
    """The BlockMask by the min/max rule on blk x blk blocks from v, int32
    [nb * nh, 4, S]: O(sets * (S + T^2)) work instead of sets * S^2 evaluations."""
    T = -(-S // blk)
    v = v.astype(np.int64)
    lts, lte, uts, ute = v[:, 0], v[:, 1], v[:, 2], v[:, 3]
    if causal:  # fold the triangle into the upper interval (fm_effective_upper, Sq == Sk)
        j = np.arange(S)[None, :]
        ute = np.where((uts < ute) & (ute > j), ute, j)
        uts = np.zeros_like(uts)
    pad = T * blk - S

    def mm_(x):
        lo = np.pad(x, ((0, 0), (0, pad)), constant_values=np.iinfo(np.int64).max)
        hi = np.pad(x, ((0, 0), (0, pad)), constant_values=np.iinfo(np.int64).min)
        return lo.reshape(-1, T, blk).min(-1)[:, None, :], hi.reshape(-1, T, blk).max(-1)[:, None, :]

    (a0, a1), (e0, e1), (c0, c1), (d0, d1) = mm_(lts), mm_(lte), mm_(uts), mm_(ute)
    r0 = (np.arange(T) * blk)[None, :, None]
    r1 = np.minimum(r0 + blk, S)
    masked = ((r0 >= a1) & (r1 <= e0)) | ((r0 >= c1) & (r1 <= d0))
    partial = ~masked & (((r1 > a0) & (r0 < e1)) | ((r1 > c0) & (r0 < d1)))
    full = ~masked & ~partial
    if nb * nh > 1:
        b = np.arange(B)[:, None] if nb > 1 else np.zeros((B, 1), np.int64)
        h = np.arange(H)[None, :] if nh > 1 else np.zeros((1, H), np.int64)
        idx = (b * nh + h).reshape(-1)
        partial, full, shape = partial[idx], full[idx], (B, H)
    else:
        shape = (1, 1)

    def kv(sel):
        num = sel.sum(-1).astype(np.int32)
        order = np.argsort(~sel, axis=-1, kind="stable").astype(np.int32)
        return (torch.as_tensor(num.reshape(*shape, T), device=dev),
                torch.as_tensor(order.reshape(*shape, T, T), device=dev))

    kn, ki = kv(partial)
    fn, fi = kv(full)
    return BlockMask.from_kv_blocks(kn, ki, fn, fi, BLOCK_SIZE=blk, mask_mod=mm, seq_lengths=(S, S))


@dataclass
class FlexMask:
    """What every FlexAttention backend of one case shares."""
    block_mask: object
    block_mask_from: str
    sparsity: float
    extra: dict = field(default_factory=dict)


def flex_mask(vec_np: np.ndarray, causal: bool, B: int, H: int, nb: int, nh: int, S: int,
              auto_limit: float = 2.0 ** 33) -> FlexMask:
    dev = "cuda"
    vec = torch.as_tensor(np.ascontiguousarray(vec_np), device=dev)
    mm = mask_mod_from(vec, causal, nb, nh)
    per_set = nb * nh > 1
    if per_set and B * H * S * S > auto_limit:
        bm = block_mask_from_intervals(vec_np, causal, B, H, nb, nh, S, mm, dev)
        how = "intervals (min/max rule at 128)"
    else:
        bm = create_block_mask(mm, B if per_set else None, H if per_set else None, S, S, device=dev,
                               _compile=True)
        how = "create_block_mask"
    return FlexMask(bm, how, float(bm.sparsity()) / 100.0, {"vec": vec})


def flex_call(backend: str, fm: FlexMask, q, k, v):
    """One forward of FlexAttention's backend ("TRITON" or "FLASH") on (B, H, S, D) tensors."""
    return functools.partial(_flex, q, k, v, block_mask=fm.block_mask, kernel_options={"BACKEND": backend})


def flash_backend_error():
    """None when FlexAttention's FLASH backend can run, else why not."""
    try:
        import flash_attn.cute  # noqa: F401
        return None
    except Exception as e:  # noqa: BLE001
        return "FLASH backend unavailable: " + repr(e)[:200]


def cudnn_call(causal: bool, q, k, v):
    """SDPA's cuDNN backend on (B, H, S, D) tensors (full or causal masks only)."""
    def run():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run
