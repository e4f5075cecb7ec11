#!/usr/bin/env python3
"""PyTorch's own context parallelism, fmsim's peer on full and causal masks (issue 24).

torch.distributed.tensor.experimental.context_parallel: ring attention over SDPA (full and
causal masks only), one process per GPU of one host. Its K/V exchange is torch's rotate
method, "allgather" (its default: all K/V gathered once) or "alltoall" (a ring of
point-to-point shifts); its sharding is its own: causal masks take its head-tail load
balancer (2P stripes, rank r owning r and 2P-1-r: "zigzag"), full masks contiguous blocks.
Self-attention, B = 1, H heads, head dim D, bf16. Each implementation "BACKEND-ROTATE"
(SDPA's cuDNN, FLASH or EFFICIENT backend) is timed by fmsim.protocol.measure on every rank
in lockstep (its agree and barrier hooks): the same launches everywhere, a device-side
barrier (an all-reduce) after the L2 flush before every launch, the step = the slowest
rank's time of each launch, median; sustained and burst figures apart; NVML clock and power
per rank. "fwd" is the forward (no_grad), "both" the forward and torch.autograd.grad.

    torchrun --standalone --nproc-per-node P bench/cp_torch_peer.py --mask causal \\
        --seqlen 131072 --out peer.json [--heads 32] [--passes fwd,both] \\
        [--impls cudnn-allgather,flash-allgather] [--check]

--check (when one GPU holds the whole sequence): rank 0 runs one GPU's SDPA (same backend)
on the whole inputs first; then the context-parallel output and gradients, gathered from
the ranks (torch's context_parallel_unshard), are compared with it.

JSON (format "fmsim-cp-torch-peer", version 1), written by rank 0 (temporary file, renamed):
  torch, device (GPU name), gpus (P), nvml (bool), commit ($FM_COMMIT), command, multicast
  (the environment below), protocol (fmsim.protocol.PROTOCOL with this run's warmup_s and
  sustain_s), case {mask, seqlen, batch, heads, head_dim, dtype, sharding},
  check: null or {IMPL: {out_max_abs, out_rel, grad_max_abs [dq, dk, dv], grad_rel [...]}
    (grad_* with "both") or {error}} (rel: norm of the difference over the reference's),
  records: [{pass, impl, backend, rotate, status ("ok", "oom", "error"), error, finite (the
    first call's result has no inf or NaN, on every rank), sustained, burst}], a figure being
    {median_ms, min_ms, max_ms, launches, window_s, ranks: [{rank, median_ms, clock_mhz,
    power_w}]}: median_ms etc. of the step, the per-rank medians beside.
"""
import argparse
import os
import shlex
import statistics
import sys
import time
from atomic import save_json  # bench/atomic.py, beside this file

# NVLink multicast stays off (a program that uses it can take a shared host's GPUs out of
# service): set before torch.distributed is imported or any process group exists
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

MODES = ("sustained", "burst")


def combine(per_rank: list) -> dict:
    """One mode's step figure from every rank's {samples, median_ms, clock_mhz, power_w,
    window_s}: launch i of every rank started together, so the step of launch i is the
    slowest rank's time of it; the figure is the median (min, max) over launches."""
    n = min(len(p["samples"]) for p in per_rank)
    step = [max(p["samples"][i] for p in per_rank) for i in range(n)]
    return dict(median_ms=statistics.median(step), min_ms=min(step), max_ms=max(step), launches=n,
                window_s=max(p["window_s"] for p in per_rank),
                ranks=[dict(rank=r, median_ms=p["median_ms"], clock_mhz=p["clock_mhz"], power_w=p["power_w"])
                       for r, p in enumerate(per_rank)])


def status_of(error: str) -> str:
    return "ok" if not error else "oom" if "out of memory" in error.lower() else "error"


class Ranks:
    """The process group, its mesh and the protocol's hooks (fmsim.protocol)."""

    def __init__(self, timeout_s: float):
        import datetime

        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(self.local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", self.local),
                                timeout=datetime.timedelta(seconds=timeout_s))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.mesh = init_device_mesh("cuda", (self.size,))
        self._one = torch.ones(1, device="cuda")

    def agree(self, n: int) -> int:
        """The largest n of all ranks (an all-reduce; the host waits for it)."""
        import torch
        import torch.distributed as dist
        t = torch.tensor([n], device="cuda", dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def barrier(self) -> None:
        """A device-side barrier: enqueued on the stream, the host goes on."""
        import torch.distributed as dist
        dist.all_reduce(self._one, op=dist.ReduceOp.MAX)

    def gather(self, obj) -> list:
        import torch.distributed as dist
        out = [None] * self.size
        dist.all_gather_object(out, obj)
        return out


def attention(backend: str, causal: bool, q, k, v):
    """SDPA on one backend (under context_parallel: torch's ring attention over it)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
         "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
    with sdpa_kernel(b):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # looked up now: patched in the context


def pass_fn(pass_: str, impl: str, causal: bool, t: list):
    """The callable that launches one pass of impl on this rank's q, k, v, dO (t)."""
    import torch
    from torch.distributed.tensor.experimental._attention import _cp_options, _RotateMethod
    backend, rotate = impl.split("-")
    method = {"allgather": _RotateMethod.ALL_GATHER, "alltoall": _RotateMethod.ALL_TO_ALL}[rotate]

    def fwd():
        _cp_options.rotate_method = method
        with torch.no_grad():
            return attention(backend, causal, *t[:3])

    def both():
        _cp_options.rotate_method = method
        q, k, v = (x.detach().requires_grad_() for x in t[:3])
        return torch.autograd.grad(attention(backend, causal, q, k, v), (q, k, v), t[3])
    return fwd if pass_ == "fwd" else both


def inputs(args, rank: int, size: int, whole: bool) -> list:
    """q, k, v, dO as (B, H, S, D) bf16: the whole sequence, the same on every rank (for the
    check), or this rank's S / P rows only (their values do not change the time)."""
    import torch
    S = args.seqlen if whole else args.seqlen // size
    g = torch.Generator(device="cuda").manual_seed(args.seed + (0 if whole else rank))
    return [torch.randn(1, args.heads, S, args.head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(4)]


def cp_context(ranks: Ranks, t: list, whole: bool, causal: bool):
    """torch's context_parallel: it shards the whole inputs (t) in place, by its load
    balancer on causal masks. Inputs created as shards are not sharded again: the context
    then takes a stand-in of 2P rows (it reads the sequence length from its first buffer)."""
    import torch
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import _cp_options
    _cp_options.enable_load_balance = causal  # torch refuses load balancing on a full mask
    bufs = t if whole else [torch.zeros(1, 1, 2 * ranks.size, 1, device="cuda")]
    return context_parallel(ranks.mesh, buffers=bufs, buffer_seq_dims=[2] * len(bufs), no_restore_buffers=set(bufs))


def references(args, t: list, causal: bool) -> dict:
    """One GPU's SDPA on the whole inputs, per backend: {backend: [O, dQ, dK, dV] or an error}
    (rank 0, before the context: SDPA is patched in it)."""
    import torch
    refs = {}
    for b in sorted({i.split("-")[0] for i in args.impls}):
        try:
            q, k, v = (x.detach().requires_grad_() for x in t[:3])
            o = attention(b, causal, q, k, v)
            refs[b] = [o.detach()] + (list(torch.autograd.grad(o, (q, k, v), t[3])) if "both" in args.passes else [])
        except Exception as e:  # noqa: BLE001  (a failed reference is the check's record)
            refs[b] = repr(e)[:300]
    return refs


def differences(got: list, ref: list) -> dict:
    mx = [float((a.float() - b.float()).abs().max()) for a, b in zip(got, ref)]
    rel = [float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)) for a, b in zip(got, ref)]
    out = dict(out_max_abs=mx[0], out_rel=rel[0])
    if len(got) > 1:
        out.update(grad_max_abs=mx[1:], grad_rel=rel[1:])
    return out


def check(ranks: Ranks, args, t: list, causal: bool, refs) -> dict:
    """Every implementation's output (and gradients), gathered in sequence order from the
    ranks, against the reference (inside the context, every rank)."""
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard
    out = {}
    for impl in args.impls:
        try:
            got = [pass_fn("fwd", impl, causal, t)()]
            if "both" in args.passes:
                got += list(pass_fn("both", impl, causal, t)())
            got = [context_parallel_unshard(ranks.mesh, [x], [2])[0] for x in got]
            err = ""
        except Exception as e:  # noqa: BLE001
            err = repr(e)[:300]
        if ranks.rank == 0:
            ref = refs[impl.split("-")[0]]
            out[impl] = ({"error": err} if err else {"error": "reference: " + ref} if isinstance(ref, str)
                         else differences(got, ref))
    return out


def first_call(fn) -> tuple:
    """(error, finite) of one untimed call: its error message ("" none) and whether its
    result has no inf or NaN."""
    import torch
    try:
        r = fn()
        torch.cuda.synchronize()
        return "", all(bool(torch.isfinite(x).all()) for x in (r if isinstance(r, tuple) else (r,)))
    except Exception as e:  # noqa: BLE001  (a failure is the record; every rank learns it)
        torch.cuda.empty_cache()
        return repr(e)[:300], False


def run_pass(ranks: Ranks, args, pass_: str, causal: bool, t: list, log) -> list:
    """One pass of every implementation under the protocol: its records (rank 0), [] elsewhere."""
    from fmsim.protocol import measure
    live, recs = {}, {}
    for impl in args.impls:
        fn = pass_fn(pass_, impl, causal, t)
        got = ranks.gather(first_call(fn))
        err = next((e for e, _ in got if e), "")
        backend, rotate = impl.split("-")
        recs[impl] = {"pass": pass_, "impl": impl, "backend": backend, "rotate": rotate,
                      "status": status_of(err), "error": err, "finite": all(f for _, f in got)}
        if not err:
            live[impl] = fn
    figs = measure(live, warmup_s=args.warmup_s, sustain_s=args.sustain_s, agree=ranks.agree,
                   barrier=ranks.barrier, log=log) if live else {}
    mine = {n: ({"error": f["error"]} if "error" in f else
                {m: dict(samples=f[m].samples_ms, median_ms=f[m].median_ms, clock_mhz=f[m].clock_mhz,
                         power_w=f[m].power_w, window_s=f[m].window_s) for m in MODES})
            for n, f in figs.items()}
    every = ranks.gather(mine)
    for n in figs:
        err = next((r[n]["error"] for r in every if "error" in r[n]), "")
        if err:
            recs[n].update(status=status_of(err), error=err)
        else:
            recs[n].update({m: combine([r[n][m] for r in every]) for m in MODES})
    return list(recs.values()) if ranks.rank == 0 else []


def header(args, ranks: Ranks) -> dict:
    import torch

    from fmsim.protocol import PROTOCOL, Nvml
    return dict(format="fmsim-cp-torch-peer", version=1, torch=torch.__version__,
                device=torch.cuda.get_device_name(), gpus=ranks.size, nvml=Nvml().ok,
                commit=os.environ.get("FM_COMMIT", ""), command=shlex.join(sys.argv),
                multicast={k: os.environ.get(k) for k in MULTICAST_OFF},
                protocol=dict(PROTOCOL, warmup_s=args.warmup_s, sustain_s=args.sustain_s),
                case=dict(mask=args.mask, seqlen=args.seqlen, batch=1, heads=args.heads, head_dim=args.head_dim,
                          dtype="bf16", sharding="zigzag" if args.mask == "causal" else "contiguous"),
                check=None, records=[])


def measure_all(ranks: Ranks, args, doc: dict, log) -> None:
    """Inputs, the check, every pass; a failure to make the inputs (out of memory) is every
    record's."""
    import torch
    causal, whole = args.mask == "causal", args.check
    try:
        t, err = inputs(args, ranks.rank, ranks.size, whole), ""
    except Exception as e:  # noqa: BLE001
        t, err = None, repr(e)[:300]
        torch.cuda.empty_cache()
    err = next((e for e in ranks.gather(err) if e), "")
    if err:
        doc["records"] = [{"pass": p, "impl": i, "backend": i.split("-")[0], "rotate": i.split("-")[1],
                           "status": status_of(err), "error": "inputs: " + err}
                          for p in args.passes for i in args.impls]
        return
    refs = references(args, t, causal) if whole and ranks.rank == 0 else None
    with cp_context(ranks, t, whole, causal):
        if whole:
            doc["check"] = check(ranks, args, t, causal, refs)
            del refs
        for p in args.passes:
            w0 = time.time()
            doc["records"] += run_pass(ranks, args, p, causal, t, log)
            log(f"{args.mask} {args.seqlen} x{ranks.size} {p}: {time.time() - w0:.0f} s")
            if ranks.rank == 0:
                save_json(args.out, doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the JSON (rank 0 writes it)")
    ap.add_argument("--mask", required=True, choices=("full", "causal"))
    ap.add_argument("--seqlen", type=int, required=True, help="S, e.g. 131072, 524288, 1048576")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--passes", default="fwd,both", help="fwd, both (forward and backward), or fwd,both")
    ap.add_argument("--impls", default="cudnn-allgather,flash-allgather",
                    help="BACKEND-ROTATE list: backend cudnn, flash or efficient; rotate allgather or alltoall")
    ap.add_argument("--check", action="store_true", help="compare with one GPU's SDPA (the whole inputs on each GPU)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--sustain-s", type=float, default=1.0)
    args = ap.parse_args()
    args.passes = [p for p in args.passes.split(",") if p]
    args.impls = [i for i in args.impls.split(",") if i]
    for i in args.impls:
        b, _, r = i.partition("-")
        if b not in ("cudnn", "flash", "efficient") or r not in ("allgather", "alltoall"):
            ap.error(f"--impls: {i!r} is not BACKEND-ROTATE (cudnn|flash|efficient)-(allgather|alltoall)")
    if any(p not in ("fwd", "both") for p in args.passes):
        ap.error("--passes: fwd and/or both")
    ranks = Ranks(timeout_s=1800)  # one launch of 1M tokens on few GPUs takes minutes
    if args.seqlen % (2 * ranks.size):
        ap.error(f"--seqlen {args.seqlen}: not a multiple of 2P = {2 * ranks.size}")
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if ranks.rank == 0 else None
    doc = header(args, ranks)
    measure_all(ranks, args, doc, log or (lambda s: None))
    if ranks.rank == 0:
        save_json(args.out, doc)
        for r in doc["records"]:
            s = r.get("sustained")
            print(f"{args.mask} {args.seqlen} x{ranks.size} {r['pass']} {r['impl']}: " +
                  (f"{s['median_ms']:.3f} ms sustained, {r['burst']['median_ms']:.3f} burst" if s else r["status"]),
                  flush=True)
    import torch.distributed as dist
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
