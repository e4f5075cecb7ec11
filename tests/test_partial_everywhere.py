#!/usr/bin/env python3
"""bench/partial_everywhere.py: the mask's every tile partial by fmsim analyze (forward and backward
tiles), the --summary ratios worked out by hand, and a run without times refused in one line."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "partial_everywhere.py")
FMSIM = None


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def timed(path, fwd, bwd):
    with open(path, "w") as f:
        json.dump({"timing": {"median_ms": fwd}, "backward": {"timing": {"median_ms": bwd}}}, f)


class PartialEverywhere(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_every_tile_is_partial(self):
        out = os.path.join(self.d, "pe.npy")
        r = run("--seqlen", "4096", "--step", "32", "--out", out, "--check", FMSIM)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("128 x 128: 1024 of 1024 tiles partial", r.stdout)
        self.assertIn("64 x 128: 2048 of 2048 tiles partial", r.stdout)
        a = json.loads(subprocess.run([FMSIM, "analyze", "--intervals", out, "--bidir", "--json"],
                                      capture_output=True, text=True, check=True).stdout)
        self.assertEqual((a["tiles_masked"], a["tiles_unmasked"]), (0, 0))

    def test_summary_ratios(self):
        for r, (pf, pb, ff, fb) in {"r1": (1.2, 3.0, 1.0, 3.0), "r2": (1.1, 3.3, 1.0, 3.0)}.items():
            timed(os.path.join(self.d, f"pe-128-r2p-{r}.json"), pf, pb)
            timed(os.path.join(self.d, f"full-128-{r}.json"), ff, fb)
        out = os.path.join(self.d, "t.json")
        r = run("--summary", self.d, "--json", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {(x["method"], x["pass"]): x for x in json.load(open(out))["rows"]}
        self.assertEqual(rows[("r2p", "fwd")]["rounds"], [1.2, 1.1])
        self.assertAlmostEqual(rows[("r2p", "fwd")]["geomean"], math.sqrt(1.2 * 1.1))
        self.assertAlmostEqual(rows[("r2p", "bwd")]["geomean"], math.sqrt(1.0 * 1.1))

    def test_a_run_without_times_is_refused(self):
        with open(os.path.join(self.d, "pe-64-slices-r1.json"), "w") as f:
            json.dump({"timing": None}, f)
        timed(os.path.join(self.d, "full-64-r1.json"), 1.0, 1.0)
        r = run("--summary", self.d)
        self.assertEqual((r.returncode, len(r.stderr.strip().splitlines())), (1, 1), r.stderr)
        self.assertIn("no fwd time", r.stderr)
        r = run("--seqlen", "100", "--out", os.path.join(self.d, "x.npy"))
        self.assertEqual(r.returncode, 1)
        self.assertFalse(os.path.exists(os.path.join(self.d, "x.npy")))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_partial_everywhere.py FMSIM_BIN")
    FMSIM = sys.argv.pop(1)
    unittest.main()
