"""fmsim.protocol: the one timing protocol for fmsim and every peer
(docs/DESIGN.md, "How we measure"). Needs torch with CUDA; NVML is optional.

    from fmsim.protocol import measure
    figs = measure({"fmsim": f, "cudnn": g})      # f, g: callables that launch one pass
    figs["fmsim"]["sustained"].median_ms, figs["fmsim"]["burst"].clock_mhz

For one case, every implementation is timed in the same process, interleaved,
under the same rules:

1. First calls (compilation, autotuning) untimed; then ``warmup_s`` of
   back-to-back launches cycling through the implementations, so the GPU's
   clock has settled at what its power limit allows before anything is timed.
2. Sustained: ``rounds`` rounds, implementations in order in even rounds and
   reversed in odd ones; in each round each gets a window of back-to-back
   launches lasting at least ``sustain_s / rounds`` of wall time (and at least
   ``min_launches`` launches). Every
   launch is preceded by the same L2 flush (a kernel that reads a buffer of
   4x the L2) and bracketed by CUDA events; the figure is the median over all
   of an implementation's launches, at least ``sustain_s`` of them in all.
3. Burst: ``burst`` rounds; in each, each implementation (order alternating)
   runs one launch after ``idle_s`` of idle GPU, the L2 flushed; the figure is
   the median of those single launches: the boost-clock figure.

The two figures are never mixed: a ratio is sustained/sustained or
burst/burst. The SM clock (MHz) and the board power (W) are read through NVML
while each sustained window runs (every ~10 ms, median kept) and just before
each burst launch, and are reported with the time. A callable that raises
during its first call is reported as an error and left out of the rest.

Several processes (one per GPU, each launch a collective step) run the same
protocol in lockstep with two hooks: ``agree(n)`` makes every launch count and
every go-on decision taken from a process's own clock the same on all
(an all-reduce of the maximum), and ``barrier()``, enqueued after the flush
before every launch, starts the timed launches together; the step is then the
slowest process's time of each launch (bench/cp_torch_peer.py).
"""
from __future__ import annotations

import ctypes as C
import math
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import torch

__all__ = ["Figure", "Nvml", "measure", "PROTOCOL"]

PROTOCOL = dict(warmup_s=1.0, sustain_s=1.0, rounds=2, min_launches=2, burst=2, idle_s=0.3,
                l2_flush="read of 4x the L2 before every launch", timer="CUDA events per launch",
                statistic="median")


@dataclass
class Figure:
    """One implementation's figure under one mode ("sustained" or "burst")."""
    mode: str
    median_ms: float
    min_ms: float
    max_ms: float
    launches: int
    clock_mhz: Optional[float]  # median SM clock read during the launches (NVML); None without NVML
    power_w: Optional[float]    # median board power (NVML)
    window_s: float = 0.0       # wall time the timed launches covered (sustained)
    samples_ms: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("samples_ms")
        return d


class Nvml:
    """The SM clock and board power of one GPU through libnvidia-ml (ctypes,
    the driver's library); ``ok`` is False, and reads give None, without it."""
    _CLOCK_SM = 1

    def __init__(self, device: Optional[torch.device] = None):
        self.ok, self._h = False, C.c_void_p()
        try:
            self._lib = C.CDLL("libnvidia-ml.so.1")
            if self._lib.nvmlInit_v2() != 0:
                return
            props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
            uuid = ("GPU-" + str(props.uuid)).encode()
            if self._lib.nvmlDeviceGetHandleByUUID(C.c_char_p(uuid), C.byref(self._h)) != 0:
                return
            self.ok = True
        except (OSError, AttributeError):
            self.ok = False

    def read(self) -> tuple[Optional[float], Optional[float]]:
        if not self.ok:
            return None, None
        mhz, mw = C.c_uint(0), C.c_uint(0)
        a = self._lib.nvmlDeviceGetClockInfo(self._h, self._CLOCK_SM, C.byref(mhz))
        b = self._lib.nvmlDeviceGetPowerUsage(self._h, C.byref(mw))
        return (float(mhz.value) if a == 0 else None), (mw.value / 1000.0 if b == 0 else None)


class _Sampler:
    """Reads NVML every `period_s` on a thread between start() and stop()."""

    def __init__(self, nvml: Nvml, period_s: float = 0.01):
        self.nvml, self.period = nvml, period_s
        self.clock, self.power = [], []
        self._stop = threading.Event()
        self._t = None

    def start(self):
        if self.nvml.ok:
            self._t = threading.Thread(target=self._run, daemon=True)
            self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            c, p = self.nvml.read()
            if c is not None:
                self.clock.append(c)
            if p is not None:
                self.power.append(p)
            self._stop.wait(self.period)

    def stop(self):
        self._stop.set()
        if self._t:
            self._t.join()
        return (statistics.median(self.clock) if self.clock else None,
                statistics.median(self.power) if self.power else None)


class _Flush:
    """The L2 flush: a reduction that reads 4x the L2 (reads only: no dirty line
    of the flush is written back during the measured launch)."""

    def __init__(self, device):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20) or (64 << 20)
        self.buf = torch.ones(max(4 * l2, 64 << 20) // 4, dtype=torch.float32, device=device)

    def __call__(self):
        self.buf.sum()


def _launches(fn, n: int, flush: _Flush):
    """n back-to-back launches of fn, each after the flush, between CUDA events:
    their times in ms (synchronizes once, at the end)."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        flush()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in ev]


def _count(window_s: float, est_ms: float, lo: int, hi: int = 4000) -> int:
    return int(min(hi, max(lo, math.ceil(window_s * 1e3 / max(est_ms, 1e-3)))))


def _same(n: int) -> int:
    return n


def _window(fn, target_s: float, est_ms: float, min_launches: int, flush, agree=_same) -> tuple[list, float]:
    """Back-to-back launches until they cover target_s of wall time and number at
    least min_launches (in chunks sized from est_ms, so a wrong estimate only adds
    a chunk): their times and the wall time covered."""
    ms: list = []
    t0 = time.perf_counter()
    while True:
        left = target_s - (time.perf_counter() - t0)
        need = min_launches - len(ms)
        n = agree(0 if left <= 0 and need <= 0 else max(need, _count(left, est_ms, 1)))
        if n == 0:
            return ms, time.perf_counter() - t0
        ms += _launches(fn, n, flush)


def _figure(mode: str, ms: list, clock: list, power: list, window_s: float = 0.0) -> Figure:
    return Figure(mode, statistics.median(ms), min(ms), max(ms), len(ms),
                  statistics.median(clock) if clock else None,
                  statistics.median(power) if power else None, window_s, ms)


def _first_calls(impls: dict, flush: _Flush, out: dict, log) -> tuple[dict, dict]:
    """Compilation and autotuning, untimed; then one launch's time of each (for the
    windows' launch counts). An implementation that fails is recorded and left out."""
    live, est = {}, {}
    for name, fn in impls.items():
        try:
            fn()
            torch.cuda.synchronize()
            est[name] = statistics.median(_launches(fn, 2, flush))
            live[name] = fn
        except Exception as e:  # noqa: BLE001  (an implementation's failure is its record)
            torch.cuda.synchronize()
            out[name] = {"error": ("out of memory: " if "out of memory" in str(e).lower() else "") + repr(e)[:300]}
            if log:
                log(f"{name}: {out[name]['error']}")
    return live, est


def _sustained(live: dict, est: dict, flush, nvml, sustain_s, rounds, min_launches, agree=_same) -> dict:
    names = list(live)
    ms, clock, power, span = ({n: [] for n in names} for _ in range(4))
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            s = _Sampler(nvml).start()
            got, wall = _window(live[n], sustain_s / rounds, est[n], min_launches, flush, agree)
            ms[n] += got
            span[n].append(wall)
            c, p = s.stop()
            clock[n] += [c] if c is not None else []
            power[n] += [p] if p is not None else []
    return {n: _figure("sustained", ms[n], clock[n], power[n], sum(span[n])) for n in names}


def _burst(live: dict, flush, nvml, burst, idle_s) -> dict:
    names = list(live)
    ms, clock, power = ({n: [] for n in names} for _ in range(3))
    for r in range(burst):
        for n in (names if r % 2 == 0 else names[::-1]):
            torch.cuda.synchronize()
            time.sleep(idle_s)
            c, p = nvml.read()
            ms[n] += _launches(live[n], 1, flush)
            clock[n] += [c] if c is not None else []
            power[n] += [p] if p is not None else []
    return {n: _figure("burst", ms[n], clock[n], power[n]) for n in names}


def measure(impls: dict, *, warmup_s: float = PROTOCOL["warmup_s"], sustain_s: float = PROTOCOL["sustain_s"],
            rounds: int = PROTOCOL["rounds"], min_launches: int = PROTOCOL["min_launches"],
            burst: int = PROTOCOL["burst"], idle_s: float = PROTOCOL["idle_s"],
            device=None, log: Optional[Callable[[str], None]] = None,
            agree: Callable[[int], int] = _same, barrier: Optional[Callable[[], None]] = None) -> dict:
    """Times every callable of impls under the protocol. Returns {name: {"sustained":
    Figure, "burst": Figure}} or {name: {"error": "..."}} for one that failed.
    agree and barrier: the hooks of a run in several processes (the module's doc)."""
    device = torch.device(device or torch.cuda.current_device())
    flush, nvml = _Flush(device), Nvml(device)
    if barrier is not None:
        l2 = flush

        def flush():
            l2()
            barrier()
    out: dict = {}
    live, est = _first_calls(impls, flush, out, log)
    if not live:
        return out
    t0 = time.perf_counter()  # warm-up: back-to-back load until the clock has settled
    while agree(int(time.perf_counter() - t0 < warmup_s)):
        for n, fn in live.items():
            _launches(fn, agree(_count(warmup_s / (2 * len(live)), est[n], 1)), flush)
    sus = _sustained(live, est, flush, nvml, sustain_s, rounds, min_launches, agree)
    bur = _burst(live, flush, nvml, burst, idle_s)
    for n in live:
        out[n] = {"sustained": sus[n], "burst": bur[n]}
    return out
