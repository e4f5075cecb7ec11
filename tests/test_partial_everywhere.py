#!/usr/bin/env python3
"""bench/partial_everywhere.py: the mask's every tile partial by fmsim analyze (forward and backward
tiles), the --summary ratios worked out by hand (both passes, and a forward-only run), and a run
without times refused in one line."""
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

    def case(self, family, hd, fwd, bwd):
        return {"id": f"{family}-{hd}", "family": family, "head_dim": hd,
                "kernels": [{"time_ms": fwd, "bwd": {"time_ms": bwd}}]}

    def run_folder(self, name, cases):
        d = os.path.join(self.d, name)
        os.makedirs(d)
        with open(os.path.join(d, "index.json"), "w") as f:
            json.dump(cases, f)
        return d

    def test_scenario_runs_the_mask_beside_the_full_one(self):
        npy, yml = os.path.join(self.d, "pe.npy"), os.path.join(self.d, "pe.yaml")
        r = run("--seqlen", "4096", "--step", "32", "--out", npy, "--scenario", yml)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = os.path.join(self.d, "run")
        c = subprocess.run([FMSIM, "run", yml, "--cpu", "--out", out], capture_output=True, text=True)
        self.assertEqual(c.returncode, 0, c.stderr)
        cases = json.load(open(os.path.join(out, "index.json")))
        got = sorted((x["family"], x["head_dim"], x["batch"], x["heads"], x["tiles_partial"], x["tiles_total"])
                     for x in cases)
        self.assertEqual(got, [("file", 64, 16, 64, 1024, 1024), ("file", 128, 16, 32, 1024, 1024),
                               ("full", 64, 16, 64, 0, 1024), ("full", 128, 16, 32, 0, 1024)])
        r = run("--summary", f"r2p={out}")   # the CPU run has no times: refused in one line
        self.assertEqual((r.returncode, len(r.stderr.strip().splitlines())), (1, 1), r.stderr)
        self.assertIn("has no forward time", r.stderr)

    def test_summary_ratios(self):
        r1 = self.run_folder("r1", [self.case("file", 128, 1.2, 3.0), self.case("full", 128, 1.0, 3.0)])
        r2 = self.run_folder("r2", [self.case("file", 128, 1.1, 3.3), self.case("full", 128, 1.0, 3.0)])
        out = os.path.join(self.d, "t.json")
        r = run("--summary", f"r2p={r1}", f"r2p={r2}", "--json", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {(x["method"], x["pass"]): x for x in json.load(open(out))["rows"]}
        self.assertEqual(rows[("r2p", "fwd")]["rounds"], [1.2, 1.1])
        self.assertAlmostEqual(rows[("r2p", "fwd")]["geomean"], math.sqrt(1.2 * 1.1))
        self.assertAlmostEqual(rows[("r2p", "bwd")]["geomean"], math.sqrt(1.0 * 1.1))

    def test_summary_forward_only(self):
        """A run of the scenario with `pass: fwd` (no bwd times): forward rows only."""
        fwd_only = [{"id": "file-128", "family": "file", "head_dim": 128, "kernels": [{"time_ms": 1.3}]},
                    {"id": "full-128", "family": "full", "head_dim": 128, "kernels": [{"time_ms": 1.0}]}]
        r1 = self.run_folder("f1", fwd_only)
        out = os.path.join(self.d, "f.json")
        r = run("--summary", f"fl1={r1}", "--json", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json.load(open(out))["rows"]
        self.assertEqual([(x["method"], x["pass"], x["rounds"]) for x in rows], [("fl1", "fwd", [1.3])])

    def test_bad_inputs_are_refused(self):
        r1 = self.run_folder("only_full", [self.case("full", 128, 1.0, 1.0)])
        r = run("--summary", f"r2p={r1}")
        self.assertEqual((r.returncode, len(r.stderr.strip().splitlines())), (1, 1), r.stderr)
        self.assertIn("lacks the full or the partial case", r.stderr)
        r = run("--seqlen", "100", "--out", os.path.join(self.d, "x.npy"))
        self.assertEqual(r.returncode, 1)
        self.assertFalse(os.path.exists(os.path.join(self.d, "x.npy")))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_partial_everywhere.py FMSIM_BIN")
    FMSIM = sys.argv.pop(1)
    unittest.main()
