#!/usr/bin/env python3
"""What the PyTorch op (fmsim.torch.flashmask_attention) costs over the bare launch.

Host side: the time per call of the op against fm_attn_forward called through
ctypes with a problem built once and the intervals converted once (the bare
launch: the library's own host work, the preprocessing kernels and the kernel
launch), in bursts of N calls queued behind a 50 ms sleep kernel, so that the
host's work alone is timed. The op without autograd is timed two ways,
interleaved: as it runs by default (the C++ fast path's forward alone where the C++
op built: "op") and through Python's lookups and _fwd ("op_nograd_python"). The
op recording autograd is timed three ways,
interleaved: as it runs by default, the C++ Function (fmsim/csrc/autograd_op.cpp,
built here first if it builds) reached through its fast path (the plan and the
intervals looked up in C++: "cpp_fast"); the C++ Function with Python's lookups
("cpp", the path of a call the fast path misses); and the Python Function
("python"); so is one training step of the op alone (forward and backward,
torch.autograd.grad). GPU side: CUDA events
around N calls of each on a problem of a few ms (the op adds one conversion
kernel and an allocation). Prints one line per figure and writes --out JSON.

    python3 bench/torch_overhead.py [--out overhead.json]
"""
import argparse
import ctypes as C
import json
import statistics
import time

import torch

import fmsim
import fmsim.torch as ft


def bare_launcher(q, k, v, sri, causal):
    """fm_attn_forward with everything the op computes per call done once: the
    problem filled, the intervals converted, o and lse allocated."""
    pl = ft._make_plan(q, k, v, sri, causal, None, "bshd", "auto", "skip", False)
    s = pl.shape
    stream = ft._stream(pl.device)
    iv = torch.empty((pl.problem.mask_nb * pl.problem.mask_nh, 4, s.Sk), dtype=torch.int32, device="cuda")
    ft._check(ft._lib.fm_attn_intervals_from_startend(sri.data_ptr(), pl.k, iv.shape[0], s.Sq, s.Sk,
                                                      int(causal), iv.data_ptr(), stream, ft._errp))
    o = torch.empty(pl.o_shape, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(pl.lse_shape, dtype=torch.float32, device="cuda")
    p = ft._Problem.from_buffer_copy(pl.problem)
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    p.intervals = iv.data_ptr()
    err, ref = ft.N.Err(), C.byref(p)
    fwd = ft._lib.fm_attn_forward

    def run():
        if fwd(ref, 0, 0, stream, C.byref(err)) != 0:
            raise RuntimeError(err.msg.decode())
    return run, (o, lse, iv)


def host_us(fns: dict, n=10, rounds=40) -> dict:
    """Host time per call of each function while the GPU is busy (a 50 ms sleep
    kernel queued first, so that the host's work alone is timed), the functions
    interleaved in blocks of n calls inside each window, their order reversed
    every other round, so that a drift of the host's speed reaches them alike.
    Median over the blocks, per function."""
    per = {name: [] for name in fns}
    items = list(fns.items())
    for r in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time at ~2 GHz
        for name, fn in (items if r % 2 == 0 else items[::-1]) * 2:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            per[name].append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in per.items()}


class _Floor(torch.autograd.Function):
    """What any autograd op of this signature costs in PyTorch: o and lse allocated,
    the inputs and o saved, no kernel (the floor under the op's autograd path)."""
    @staticmethod
    def forward(ctx, q, k, v, shapes):
        o = torch.empty(shapes[0], dtype=torch.bfloat16, device=q.device)
        lse = torch.empty(shapes[1], dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, o)
        ctx.lse = lse
        return o

    @staticmethod
    def backward(ctx, dout):
        return dout, None, None, None


class _NoKernel:
    """ft._lib with the forward's C entry replaced by a no-op: the op's own Python work."""
    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        return getattr(self._lib, name)

    @staticmethod
    def fm_attn_forward_ptrs(*args):
        return 0


def gpu_ms(fns: dict, n=20, rounds=10) -> dict:
    """GPU time per call of each function (CUDA events around n calls), the
    functions interleaved round by round in alternating order, so that the
    clock's drift reaches them alike; median over the rounds."""
    out = {name: [] for name in fns}
    items = list(fns.items())
    for r in range(rounds):
        for name, fn in (items if r % 2 == 0 else items[::-1]):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(n):
                fn()
            b.record()
            torch.cuda.synchronize()
            out[name].append(a.elapsed_time(b) / n)
    return {name: statistics.median(v) for name, v in out.items()}


def case(S, H, fam="causal_document"):
    m = fmsim.family(fam, S)
    sri, causal = m.to_paddle()
    sri = torch.as_tensor(sri, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, S, H, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    return q, k, v, sri, causal


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    q, k, v, sri, causal = case(256, 1)
    bare, keep = bare_launcher(q, k, v, sri, causal)

    op = lambda: ft.flashmask_attention(q, k, v, sri, causal)  # noqa: E731  (q needs no grad: no autograd)
    qg = q.clone().requires_grad_()
    op_grad = lambda: ft.flashmask_attention(qg, k, v, sri, causal)  # noqa: E731  (records the graph)
    t0 = time.perf_counter()
    backend, why = ft.autograd_backend(reason=True)  # builds the C++ op now (or finds it cached)
    res["autograd_backend"], res["autograd_backend_why"] = backend, why
    res["cpp_build_or_load_s"] = time.perf_counter() - t0
    print(f"autograd backend: {backend} ({why}; {res['cpp_build_or_load_s']:.1f} s to decide)")
    cpp = ft._cpp
    has_fast = ft._fast is not None

    def with_backend(mod, fast, fn):  # the op through one autograd path (the switch costs each alike)
        fast_fn = mod.fast if fast else None

        def run():
            ft._cpp, ft._fast = mod, fast_fn
            return fn()
        return run
    # no autograd: the default (the fast path's forward where it is in use) and Python's path
    nograd = {"op": with_backend(cpp, has_fast, op), "op_nograd_python": with_backend(None, False, op)}
    paths = {"op_autograd_python": with_backend(None, False, op_grad)}
    if cpp is not None:
        paths["op_autograd_cpp"] = with_backend(cpp, False, op_grad)
        if has_fast:
            paths["op_autograd_cpp_fast"] = with_backend(cpp, True, op_grad)
    for f in (bare, *nograd.values(), *paths.values()):
        f()
    torch.cuda.synchronize()
    st0 = cpp.cache_stats() if has_fast else {}
    got = host_us({"bare": bare, **nograd, **paths})
    ft._use_cpp(cpp)
    if has_fast:  # every timed call of the fast path was a hit (a miss runs Python's path)
        st = cpp.cache_stats()
        res["fast_path_hits"] = st["hits"] - st0["hits"]
        res["fast_path_hits_nograd"] = st["hits_nograd"] - st0["hits_nograd"]
        res["fast_path_stats"] = st
    res["host_us_bare"], res["host_us_op"] = got["bare"], got["op"]
    res["host_us_op_nograd_python"] = got["op_nograd_python"]
    for name in paths:
        res[f"host_us_{name}"] = got[name]
    # the op as it runs by default: the C++ Function through its fast path where it built
    res["host_us_op_autograd"] = got[[p for p in ("op_autograd_cpp_fast", "op_autograd_cpp", "op_autograd_python")
                                      if p in paths][0]]
    # one training step of the op alone: forward and backward (no accumulation into .grad)
    do = torch.randn_like(q)
    steps = {name.replace("op_autograd", "step"): (lambda f=f: torch.autograd.grad(f(), (qg,), do))
             for name, f in paths.items()}
    for f in steps.values():
        f()
    torch.cuda.synchronize()
    got = host_us(steps)
    ft._use_cpp(cpp)
    for name in steps:
        res[f"host_us_{name}"] = got[name]
    # where the op's host time goes: its parts, each timed the same way
    pl = ft._plan(q, k, v, sri, causal, None, "bshd", "auto", "skip", False)
    o = torch.empty(pl.o_shape, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(pl.lse_shape, dtype=torch.float32, device="cuda")
    stream = ft._stream(pl.device)
    iv = ft._intervals(pl, sri, causal, stream)

    def c_entry():
        ft._check(ft._lib.fm_attn_forward_ptrs(pl.pref, pl.device, iv.data_ptr(), q.data_ptr(), k.data_ptr(),
                                               v.data_ptr(), o.data_ptr(), lse.data_ptr(), 0, stream, ft._errp))
    dev = pl.torch_device
    parts = {"plan lookup": lambda: ft._plan(q, k, v, sri, causal, None, "bshd", "auto", "skip", False),
             "intervals lookup": lambda: ft._intervals(pl, sri, causal, stream),
             "o allocated": lambda: torch.empty(pl.o_shape, dtype=torch.bfloat16, device=dev),
             "lse allocated (autograd)": lambda: torch.empty(pl.lse_shape, dtype=torch.float32, device=dev),
             "current stream": lambda: ft._stream(pl.device),
             "C entry (fm_attn_forward_ptrs)": c_entry,
             "bare (again, beside the parts)": bare}
    if has_fast:  # the fast path's own cost: one call, its arguments read, no lookup (the last one declines)
        parts["fast path call, declined (an unknown variant)"] = \
            lambda: cpp.fast(q, k, v, sri, causal, None, False, False, "bshd", "auto", "declined", "auto")
    shapes = (pl.o_shape, pl.lse_shape)
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    qgh = qg.transpose(1, 2)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    parts.update({
        "autograd floor (Function: o, lse, save; no kernel)": lambda: _Floor.apply(qg, k, v, shapes),
        "no-grad floor (o and lse allocated)": lambda: (torch.empty(pl.o_shape, dtype=torch.bfloat16, device=dev),
                                                        torch.empty(pl.lse_shape, dtype=torch.float32, device=dev)),
        "SDPA no_grad (PyTorch's own op, causal)": lambda: sdpa(qh, kh, vh, is_causal=True),
        "SDPA autograd (causal)": lambda: sdpa(qgh, kh, vh, is_causal=True)})
    res["parts_us"] = host_us(parts)
    real = ft._lib
    ft._lib = _NoKernel(real)  # the C++ Function calls the library by its own pointers: not it
    ft._use_cpp(None)
    try:  # the op with its C entry a no-op: everything the op does in Python
        res["parts_us"].update({f"{k} without the C entry": t for k, t in
                                host_us({"op": op, "op autograd (Python Function)": op_grad}).items()})
    finally:
        ft._lib = real
        ft._use_cpp(cpp)
    res["overhead_us"] = res["host_us_op"] - res["host_us_bare"]
    res["overhead_us_nograd_python"] = res["host_us_op_nograd_python"] - res["host_us_bare"]
    res["overhead_us_autograd"] = res["host_us_op_autograd"] - res["host_us_bare"]
    for name in paths:
        res[f"overhead_us_{name.replace('op_', '')}"] = res[f"host_us_{name}"] - res["host_us_bare"]
    q, k, v, sri, causal = case(16384, 16)
    bare, keep = bare_launcher(q, k, v, sri, causal)

    def op2():
        return ft.flashmask_attention(q, k, v, sri, causal)
    gpu_ms({"bare": bare, "op": op2}, rounds=2)  # warm-up
    got = gpu_ms({"bare": bare, "op": op2})
    res["gpu_ms_bare"], res["gpu_ms_op"] = got["bare"], got["op"]
    res["gpu_overhead_us"] = 1e3 * (res["gpu_ms_op"] - res["gpu_ms_bare"])
    print(f"host per call: bare fm_attn_forward {res['host_us_bare']:.1f} us, op {res['host_us_op']:.1f} us "
          f"(no_grad{', the C++ fast path' if has_fast else ''}): overhead {res['overhead_us']:.1f} us; "
          f"Python's no-grad path {res['host_us_op_nograd_python']:.1f} us: overhead "
          f"{res['overhead_us_nograd_python']:.1f} us")
    words = {"python": "the Python Function", "cpp": "the C++ Function, Python's lookups",
             "cpp_fast": "the C++ Function, its fast path (the default)"}
    for name in paths:
        kind = name.replace("op_autograd_", "")
        print(f"host per call, autograd through {words[kind]}: op {res[f'host_us_{name}']:.1f} us, "
              f"overhead {res[f'overhead_us_autograd_{kind}']:.1f} us; forward and backward "
              f"{res[f'host_us_step_{kind}']:.1f} us")
    if cpp is None:
        print(f"the C++ autograd Function was not timed: {why}")
    elif not has_fast:
        print("the C++ fast path was not timed: this torch's c10::Stream has no native_handle()")
    else:
        print(f"the fast path's timed calls: {res['fast_path_hits']} autograd hits, "
              f"{res['fast_path_hits_nograd']} no-grad hits; caches {res['fast_path_stats']}")
    print("parts: " + ", ".join(f"{n} {t:.1f} us" for n, t in res["parts_us"].items()))
    print(f"GPU per call (S=16384, H=16): bare {res['gpu_ms_bare']:.4f} ms, op {res['gpu_ms_op']:.4f} ms: "
          f"{res['gpu_overhead_us']:.1f} us")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
