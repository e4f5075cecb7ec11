#!/usr/bin/env python3
"""Peer figures for `fmsim bench`: PyTorch FlexAttention on the very interval
vectors fmsim exported, with its Triton backend and its FLASH backend
(FlashAttention-4's CuTe-DSL kernels, when flash_attn.cute imports), and
SDPA's FlashAttention-2 and cuDNN backends on the full and causal masks;
forward and backward in the same run.

Input is
the index of the scenario run that `fmsim bench` writes for the kernel table
(DIR/paper-kernel-table/index.json, the scenario runner's one index: a list of
cases), each with its batch, heads, head dim, causal flag and its trace's
interval vectors ("columns", relative to the index), int32 [nb, nh, Sk, 4]
(LTS, LTE, UTS, UTE; set = (nb > 1 ? b : 0) * nh + (nh > 1 ? h : 0)).
A mask_mod reads those vectors:

    masked(q, kv) = LTS <= q < LTE  or  UTS <= q < UTE  or  (causal and q < kv)

Times are medians of triton's do_bench (it clears the L2 with a 256 MB write
before every launch; warm-up first), bf16, layout [B, H, S, D]. The forward is
timed without autograd; the backward alone is the gradient of
loss = (out * dout).sum() with a fixed dout (seeded), i.e.
torch.autograd.grad(out, (q, k, v), dout) on one recorded forward
(retain_graph), so the product and the sum are not in its time; its TFLOP/s
use 2.5 times the forward's count. A backward that fails leaves its own error
(bwd_error, bwd_oom) beside the forward's figures.
The BlockMask comes from create_block_mask (what FlexAttention users call), except
for per-head masks past --auto-limit mask_mod evaluations (random eviction at 128K:
create_block_mask took 85 s at 32K, and runs out of memory or time at 128K), where
it is built from the interval vectors by FlashMask's min/max rule on 128 x 128
blocks (BlockMask.from_kv_blocks); each record says which ("block_mask_from").
TFLOP/s use 4*B*H*S*S*D*(1 - rho) with rho at FlexAttention's own 128 x 128
block (the index's sparsity_128); the fmsim/peer comparison in bench/merge.py uses
times, which need no convention. An out-of-memory failure is recorded as such
("oom": true) and the run goes on. The JSON output is rewritten after every
case, so a run cut short keeps what it measured; --resume reads it back and
measures only what it lacks (records that failed for want of time are run
again), so that a long table can be spread over several calls of a machine.

    python3 bench/peer_flex.py --index OUT/paper-kernel-table/index.json --out peer.json [--sdpa]
        [--pass fwd|bwd|both] [--resume]
"""
import argparse
import functools
import json
import os
import sys
import time

import numpy as np
import torch
import torch._functorch.config
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
from triton.testing import do_bench

torch._dynamo.config.cache_size_limit = 512
torch._dynamo.config.accumulated_cache_size_limit = 4096
# the backward is timed as repeated torch.autograd.grad(..., retain_graph=True) on one
# recorded forward, which compiled graphs with donated buffers refuse (torch's own rule:
# "this flag must be set False if a user wants to retain_graph=True for backward")
torch._functorch.config.donated_buffer = False
flex = torch.compile(flex_attention, dynamic=False)


def mask_mod_from(lts, lte, uts, ute, causal, nb, nh):
    """lts..ute: int32 tensors [nb * nh, S] on the GPU. One shared set is indexed by
    the key alone (1-D vectors): the FLASH backend's CuTe DSL traces mask_mod and
    takes tensor indices only, not a Python int."""
    per_set = nb * nh > 1
    if not per_set:
        lts, lte, uts, ute = lts[0].contiguous(), lte[0].contiguous(), uts[0].contiguous(), ute[0].contiguous()

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


def block_mask_from_intervals(cols, causal, B, H, nb, nh, S, mm, dev, blk=128):
    """The BlockMask by FlashMask's min/max rule on 128 x 128 blocks, straight from the
    interval vectors (cols: int32 [nb * nh, S, 4]): O(sets * (S + T^2)) instead of
    create_block_mask's sets * S^2 mask_mod evaluations. The rule is conservative (a
    block it calls masked is masked, one it calls full is unmasked), so FlexAttention's
    output is the same; only blocks the exact test would call masked or full may be
    computed as partial. Its sparsity is the index's rho_128 (fmsim's C classifier)."""
    T = -(-S // blk)
    v = cols.astype(np.int64)
    lts, lte, uts, ute = v[..., 0], v[..., 1], v[..., 2], v[..., 3]
    if causal:  # fold the causal triangle into the upper interval (fm_effective_upper, Sq == Sk)
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
    full = ~masked & ~partial  # [sets, T rows, T cols]
    sets = nb * nh
    if sets > 1:
        b = np.arange(B)[:, None] if nb > 1 else np.zeros((B, 1), np.int64)
        h = np.arange(H)[None, :] if nh > 1 else np.zeros((1, H), np.int64)
        idx = (b * nh + h).reshape(-1)
        partial, full = partial[idx], full[idx]
        shape = (B, H)
    else:
        shape = (1, 1)

    def kv(sel):
        num = sel.sum(-1).astype(np.int32)
        order = np.argsort(~sel, axis=-1, kind="stable").astype(np.int32)  # selected blocks first
        t = lambda x: torch.as_tensor(x, device=dev)
        return t(num.reshape(*shape, T)), t(order.reshape(*shape, T, T))

    kn, ki = kv(partial)
    fn, fi = kv(full)
    rho = float(masked.mean())
    return BlockMask.from_kv_blocks(kn, ki, fn, fi, BLOCK_SIZE=blk, mask_mod=mm,
                                    seq_lengths=(S, S)), rho


def bench_ms(fn, warmup, rep):
    return float(do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5]))


def is_oom(e):
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def rho_128(case):
    """The case's block sparsity at 128 x 128 (the index's sparsity_128)."""
    v = case.get("sparsity_128", case.get("rho_128"))
    return float(v) if v is not None else 0.0


def load_cases(path):
    """The index's cases: the scenario runner's list (or an older {"cases": [...]})."""
    with open(path) as f:
        index = json.load(f)
    return index["cases"] if isinstance(index, dict) else index


def error_record(base, e):
    return dict(base, error=("out of memory: " if is_oom(e) else "") + repr(e)[:300], oom=is_oom(e))


def timed(prefix, fn, flops, args):
    """{PREFIX_ms, PREFIX_tflops} of fn (one untimed call first: the first call of a shape
    compiles), or {PREFIX_error, PREFIX_oom} when it fails."""
    try:
        fn()
        torch.cuda.synchronize()
        ms = bench_ms(fn, args.warmup_ms, args.rep_ms)
        return {prefix + "_ms": ms, prefix + "_tflops": flops / (ms * 1e-3) / 1e12}
    except Exception as e:
        return {prefix + "_error": ("out of memory: " if is_oom(e) else "") + repr(e)[:300],
                prefix + "_oom": is_oom(e)}


def time_passes(attn, q, k, v, dout, flops, args):
    """The forward of attn() without autograd and the backward alone (the gradient of
    (out * dout).sum() on one recorded forward), as --pass asks: one dict of figures, a
    forward failure under "error"/"oom" (what bench/merge.py reads), a backward's under
    "bwd_error"/"bwd_oom"."""
    r = {}
    if args.pass_ in ("fwd", "both"):
        with torch.no_grad():
            f = timed("fwd", attn, flops, args)
        if "fwd_error" in f:
            f = dict(error=f.pop("fwd_error"), oom=f.pop("fwd_oom"))
        r.update(f)
    if args.pass_ in ("bwd", "both"):
        out = None
        try:
            out = attn()
            r.update(timed("bwd", functools.partial(torch.autograd.grad, out, (q, k, v), dout,
                                                    retain_graph=True), 2.5 * flops, args))
        except Exception as e:  # the recorded forward itself
            r.update(bwd_error=("out of memory: " if is_oom(e) else "") + repr(e)[:300],
                     bwd_oom=is_oom(e))
        del out
    return r


def inputs(B, H, S, D):
    """q, k, v (autograd leaves, for the backward) and a fixed dout, seeded."""
    g = torch.Generator(device="cuda").manual_seed(0)
    t = [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)]
    return t[0].requires_grad_(), t[1].requires_grad_(), t[2].requires_grad_(), t[3]


def flex_case(case, root, args, backends, unavailable):
    """One case on every backend, one BlockMask for all: a record per backend (a backend's
    failure is its record's error)."""
    S, B, H, D = case["seqlen"], case["batch"], case["heads"], case["head_dim"]
    nb, nh = case["mask_nb"], case["mask_nh"]
    cols = np.load(os.path.join(root, case["columns"]))  # [nb, nh, S, 4] int32
    assert cols.shape == (nb, nh, S, 4), cols.shape
    cols = cols.reshape(nb * nh, S, 4)
    dev = "cuda"
    vec = [torch.as_tensor(np.ascontiguousarray(cols[:, :, k]), device=dev) for k in range(4)]
    mm = mask_mod_from(*vec, bool(case["causal"]), nb, nh)
    per_set = nb * nh > 1
    how = args.block_mask
    if how == "auto":  # create_block_mask evaluates mask_mod on every element of every set
        how = "intervals" if per_set and B * H * S * S > args.auto_limit else "create"
    t0 = time.time()
    rho_rule = None
    if how == "intervals":
        bm, rho_rule = block_mask_from_intervals(cols, bool(case["causal"]), B, H, nb, nh, S, mm, dev)
    else:
        bm = create_block_mask(mm, B if per_set else None, H if per_set else None, S, S,
                               device=dev, _compile=True)
    torch.cuda.synchronize()
    t_mask = time.time() - t0
    bm_bytes = sum(x.numel() * x.element_size() for x in bm.as_tuple() if isinstance(x, torch.Tensor))
    q, k, v, dout = inputs(B, H, S, D)
    rho = rho_128(case)
    base = dict(id=case["id"], family=case["family"], seqlen=S, head_dim=D, batch=B, heads=H,
                peer="flex_attention", rho_128=rho,
                block_mask_from="create_block_mask" if how == "create" else
                "intervals (min/max rule at 128; create_block_mask not attempted: %.2g mask_mod "
                "evaluations)" % (B * H * S * S), block_mask_rule_rho=rho_rule,
                flex_sparsity=float(bm.sparsity()) / 100.0, block_mask_s=t_mask,
                block_mask_bytes=bm_bytes)
    out = []
    for be in backends:
        r = dict(base, backend=be)
        if be in unavailable:
            out.append(dict(r, error=unavailable[be], oom=False))
            continue
        # a partial, not a lambda: same call, and no closure over names the del below unbinds
        call = functools.partial(flex, q, k, v, block_mask=bm, kernel_options={"BACKEND": be})
        flops = 4.0 * B * H * S * S * D * (1 - rho)
        out.append(dict(r, **time_passes(call, q, k, v, dout, flops, args)))
        torch.cuda.empty_cache()
    del q, k, v, dout, bm, vec
    return out


def sdpa_case(S, D, B, H, is_causal, backend, args):
    q, k, v, dout = inputs(B, H, S, D)
    # rho of the causal mask at 128 x 128 blocks: (T - 1) / (2 T) of the tiles are masked
    T = -(-S // 128)
    rho = (T - 1) / (2 * T) if is_causal else 0.0
    with sdpa_kernel(backend):
        figures = time_passes(functools.partial(F.scaled_dot_product_attention, q, k, v,
                                                is_causal=is_causal),
                              q, k, v, dout, 4.0 * B * H * S * S * D * (1 - rho), args)
    del q, k, v, dout
    return dict(family="causal" if is_causal else "full", peer="sdpa",
                backend=str(backend).split(".")[-1], seqlen=S, head_dim=D, batch=B, heads=H,
                rho_128=rho, **figures)


def peer_case(c, root, args, backends, unavailable, t_start):
    """The FlexAttention records of one case; errors (out of memory, no backend, budget) are
    records too."""
    base = dict(id=c["id"], family=c["family"], seqlen=c["seqlen"], head_dim=c["head_dim"],
                peer="flex_attention")
    if args.budget_s and time.time() - t_start > args.budget_s:
        return [dict(base, backend=be, error="not run: time budget spent", oom=False)
                for be in backends]
    t0 = time.time()
    try:
        out = flex_case(c, root, args, backends, unavailable)
    except Exception as e:  # the BlockMask or the inputs
        out = [error_record(dict(base, backend=be), e) for be in backends]
    for r in out:
        r["wall_s"] = round(time.time() - t0, 1)
    torch.cuda.empty_cache()
    return out


def save(path, doc):
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True,
                    help="DIR/paper-kernel-table/index.json written by fmsim bench")
    ap.add_argument("--backends", default="TRITON,FLASH",
                    help="FlexAttention backends (comma list of TRITON, FLASH)")
    ap.add_argument("--out", required=True, help="JSON output")
    ap.add_argument("--sdpa", action="store_true", help="also SDPA FA2 and cuDNN, full and causal")
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd", "both"), default="both",
                    help="the passes timed (default both: the forward, then the backward alone)")
    ap.add_argument("--families", default="", help="only these families (comma list)")
    ap.add_argument("--seqlens", default="", help="only these lengths (comma list)")
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--rep-ms", type=float, default=100.0)
    ap.add_argument("--budget-s", type=float, default=0.0, help="start no case after this many s")
    ap.add_argument("--block-mask", choices=("auto", "create", "intervals"), default="auto",
                    help="BlockMask by create_block_mask, from the interval vectors, or auto: "
                    "from the vectors for per-head masks past --auto-limit evaluations")
    ap.add_argument("--resume", action="store_true",
                    help="keep the records of an earlier --out of the same index and passes and "
                    "measure only the cases and SDPA shapes it lacks")
    ap.add_argument("--auto-limit", type=float, default=2.0 ** 38,
                    help="B*H*S*S above which auto builds per-head BlockMasks from the vectors "
                    "(create_block_mask took 85 s at 1.4e11 on the H200)")
    args = ap.parse_args()
    cases = load_cases(args.index)
    root = os.path.dirname(os.path.abspath(args.index))
    backends = [b.strip().upper() for b in args.backends.split(",") if b.strip()]
    if args.families:
        keep = set(args.families.split(","))
        cases = [c for c in cases if c["family"] in keep]
    if args.seqlens:
        keep = set(int(x) for x in args.seqlens.split(","))
        cases = [c for c in cases if c["seqlen"] in keep]
    doc = dict(format="fmsim-peer", version=2, torch=torch.__version__,
               device=torch.cuda.get_device_name(), timing="triton do_bench median, L2 cleared "
               "before every launch", passes=args.pass_,
               backward="torch.autograd.grad(out, (q, k, v), dout, retain_graph=True): the gradient "
               "of (out * dout).sum() for a fixed dout; TFLOP/s by 2.5 times the forward's count",
               index=os.path.abspath(args.index), results=[])
    done_cases, done_sdpa = set(), set()
    if args.resume and os.path.isfile(args.out):
        with open(args.out) as f:
            old = json.load(f)
        if old.get("index") != doc["index"] or old.get("passes") != doc["passes"]:
            raise SystemExit("--resume: %s holds another index or other passes" % args.out)
        budget_cut = "not run: time budget spent"
        kept = [r for r in old.get("results", []) if r.get("error") != budget_cut]
        doc["results"] = kept
        done_cases = {r["id"] for r in kept if r.get("peer") == "flex_attention"}
        done_sdpa = {(r["seqlen"], r["head_dim"], r.get("batch"), r.get("heads")) for r in kept
                     if r.get("peer") == "sdpa"}
        print("peer: resuming, %d records kept" % len(kept), flush=True)
    cases = [c for c in cases if c["id"] not in done_cases]
    print("peer:", torch.__version__, doc["device"], len(cases), "cases", flush=True)
    t_start = time.time()
    shapes = sorted({(c["seqlen"], c["head_dim"], c["batch"], c["heads"]) for c in cases} - done_sdpa)
    if args.sdpa:
        for S, D, B, H in shapes:
            for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
                for causal in (False, True):
                    try:
                        r = sdpa_case(S, D, B, H, causal, be, args)
                    except Exception as e:  # a backend may be unavailable for a shape
                        r = dict(family="causal" if causal else "full", peer="sdpa",
                                 backend=str(be).split(".")[-1], seqlen=S, head_dim=D,
                                 error=repr(e)[:300], oom=is_oom(e))
                    torch.cuda.empty_cache()
                    print(json.dumps(r), flush=True)
                    doc["results"].append(r)
                    save(args.out, doc)
    unavailable = {}
    if "FLASH" in backends:
        try:
            import flash_attn.cute  # noqa: F401  (FlexAttention's FLASH backend needs it)
        except Exception as e:
            unavailable["FLASH"] = "FLASH backend unavailable: " + repr(e)[:200]
    for c in cases:
        for r in peer_case(c, root, args, backends, unavailable, t_start):
            print(json.dumps(r), flush=True)
            doc["results"].append(r)
        save(args.out, doc)
    doc["complete"] = True
    save(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
