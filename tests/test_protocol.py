#!/usr/bin/env python3
"""fmsim.protocol's rules, without a GPU (ctest: protocol, label python): a stand-in
for the few torch calls the protocol makes (CUDA events that read the host clock,
synchronize, a buffer for the flush) and implementations that take a known time,
so the windows, the interleaving, the figures and the failure records are checked
on any machine. The GPU side (real events, NVML) runs in bench/gpu.sh crosscheck.
"""
import os
import sys
import threading
import time
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def fake_torch():
    t = types.ModuleType("torch")

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = time.perf_counter()

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    class Buf:
        def sum(self):
            return 0.0

    class Props:
        L2_cache_size = 1 << 20
        uuid = "fake"

    cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: None, current_device=lambda: 0,
                                 get_device_properties=lambda d: Props())
    t.cuda = cuda
    t.device = lambda d: d
    t.float32 = "float32"
    t.ones = lambda *a, **k: Buf()
    return t


sys.modules.setdefault("torch", fake_torch())
from fmsim import protocol  # noqa: E402


class Protocol(unittest.TestCase):
    def test_windows_interleaving_and_figures(self):
        calls = []

        def impl(name, ms):
            def run():
                calls.append(name)
                time.sleep(ms / 1e3)
            return run
        kw = dict(warmup_s=0.05, sustain_s=0.2, rounds=2, min_launches=2, burst=2, idle_s=0.01)
        figs = protocol.measure({"a": impl("a", 5.0), "b": impl("b", 20.0)}, **kw)
        for n in ("a", "b"):
            s, b = figs[n]["sustained"], figs[n]["burst"]
            self.assertEqual((s.mode, b.mode), ("sustained", "burst"))
            self.assertGreaterEqual(s.launches, 2 * kw["min_launches"])
            self.assertEqual(b.launches, kw["burst"])
            self.assertGreaterEqual(s.window_s, kw["sustain_s"])  # the windows cover sustain_s
            self.assertIsNone(s.clock_mhz)  # no NVML here: no clock, never a made-up one
        ratio = figs["b"]["sustained"].median_ms / figs["a"]["sustained"].median_ms
        self.assertTrue(2.0 < ratio < 6.0, ratio)  # 20 ms against 5 ms, with the sleeps' slack
        # the sustained rounds alternate the order (a b, then b a), and so do the bursts
        tail = calls[-kw["burst"] * 2:]
        self.assertEqual(tail, ["a", "b", "b", "a"])

    def test_a_failing_implementation_is_a_record_not_a_crash(self):
        def bad():
            raise RuntimeError("CUDA out of memory. Tried to allocate")
        figs = protocol.measure({"ok": lambda: time.sleep(0.001), "bad": bad},
                                warmup_s=0.01, sustain_s=0.02, burst=1, idle_s=0.0)
        self.assertIn("sustained", figs["ok"])
        self.assertTrue(figs["bad"]["error"].startswith("out of memory: "))

    def test_processes_in_lockstep(self):
        """Two "ranks" (threads) of unequal speed under agree and barrier: the same launch
        count in every window (a collective launch that one rank skipped would hang), and
        the barrier before every launch but the untimed first call."""
        gate, vals, lock = threading.Barrier(2), {}, threading.Lock()

        def agree(n):  # the maximum of both ranks' values, as an all-reduce of MAX
            with lock:
                vals[threading.get_ident()] = n
            gate.wait()
            m = max(vals.values())
            gate.wait()
            return m
        calls, barriers, figs = ({0: 0, 1: 0} for _ in range(3))

        def rank(r, ms):
            def run():
                calls[r] += 1
                time.sleep(ms / 1e3)

            def barrier():
                barriers[r] += 1
            figs[r] = protocol.measure({"x": run}, warmup_s=0.05, sustain_s=0.1, burst=2, idle_s=0.0,
                                       agree=agree, barrier=barrier)["x"]
        ts = [threading.Thread(target=rank, args=(r, ms)) for r, ms in ((0, 2.0), (1, 9.0))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(calls[0], calls[1])
        self.assertEqual(figs[0]["sustained"].launches, figs[1]["sustained"].launches)
        self.assertEqual(barriers[0], calls[0] - 1)
        # the larger count wins: the slow rank ran the fast one's windows (~25 launches of
        # 2 ms each), not its own (6 of 9 ms)
        self.assertGreaterEqual(figs[1]["sustained"].launches, 20)

    def test_nothing_runs_gives_only_errors(self):
        def bad():
            raise ValueError("no")
        self.assertEqual(list(protocol.measure({"bad": bad}, warmup_s=0.01)), ["bad"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
