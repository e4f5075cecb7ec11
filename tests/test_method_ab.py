#!/usr/bin/env python3
"""bench/method_ab.py on hand-made runs: the per-family ratio of geometric means, the A/A spread,
the model's error column, and the refusals (other cases, a missing pass) as one line, exit 1."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "method_ab.py")
COLS = ["id", "family", "sm90_time_ms", "sm90_predicted_error", "sm90_bwd_time_ms", "sm90_bwd_predicted_error"]


def write(folder, rows):
    os.makedirs(folder)
    with open(os.path.join(folder, "index.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLS)
        w.writerows(rows)
    return folder


class MethodAB(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def run_tool(self, *runs):
        out = os.path.join(self.tmp.name, "ab.json")
        r = subprocess.run([sys.executable, SCRIPT, *runs, "--json", out], capture_output=True, text=True)
        return r, out

    def test_ratios_spread_and_errors(self):
        t = self.tmp.name
        # case x (family f): A runs 1.0 and 4.0 (geomean 2), B runs 4.0 and 4.0: ratio 0.5; A/A 4.0, B/B 1.0
        # case y (family f): A 2, 2; B 1, 1: ratio 2.   Family f: geomean sqrt(0.5 * 2) = 1
        a1 = write(f"{t}/a1", [["x", "f", 1.0, 0.10, 3.0, -0.2], ["y", "f", 2.0, -0.30, 3.0, 0.1]])
        b1 = write(f"{t}/b1", [["x", "f", 4.0, 0.0, 3.0, 0.0], ["y", "f", 1.0, 0.0, 3.0, 0.0]])
        a2 = write(f"{t}/a2", [["x", "f", 4.0, 0.0, 3.0, 0.0], ["y", "f", 2.0, 0.0, 3.0, 0.0]])
        b2 = write(f"{t}/b2", [["x", "f", 4.0, 0.0, 6.0, 0.0], ["y", "f", 1.0, 0.0, 6.0, 0.0]])
        r, out = self.run_tool(f"A={a1}", f"B={b1}", f"A={a2}", f"B={b2}")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {(x["pass"], x["family"]): x for x in json.load(open(out))["rows"]}
        f = rows[("fwd", "f")]
        self.assertAlmostEqual(f["geomean"], 1.0)
        self.assertAlmostEqual(f["lowest"], 0.5)
        self.assertAlmostEqual(f["highest"], 2.0)
        self.assertAlmostEqual(f["aa_lowest"], 1.0)
        self.assertAlmostEqual(f["aa_highest"], 4.0)
        self.assertAlmostEqual(f["model_worst_abs_error"], 0.30)  # A's first run only
        bw = rows[("bwd", "f")]
        self.assertAlmostEqual(bw["geomean"], 3.0 / (18 ** 0.5))  # A 3, 3; B 3, 6
        self.assertAlmostEqual(bw["aa_highest"], 2.0)

    def test_other_cases_and_missing_pass_are_refused(self):
        t = self.tmp.name
        a = write(f"{t}/a", [["x", "f", 1.0, 0, 1.0, 0]])
        b = write(f"{t}/b", [["z", "f", 1.0, 0, 1.0, 0]])
        r, out = self.run_tool(f"A={a}", f"B={b}")
        self.assertEqual((r.returncode, len(r.stderr.strip().splitlines())), (1, 1), r.stderr)
        self.assertIn("same cases", r.stderr)
        self.assertFalse(os.path.exists(out))
        d = write(f"{t}/d", [["x", "f", "nan", 0, "nan", 0]])
        r, out = self.run_tool(f"A={d}", f"B={d}")
        self.assertEqual((r.returncode, len(r.stderr.strip().splitlines())), (1, 1), r.stderr)
        self.assertIn("no kernel times", r.stderr)
        c = write(f"{t}/c", [["x", "f", 1.0, 0, "nan", 0]])
        r, out = self.run_tool(f"A={a}", f"B={c}")
        self.assertEqual((r.returncode, len(r.stderr.strip().splitlines())), (1, 1), r.stderr)
        self.assertIn("sm90_bwd_time_ms", r.stderr)


if __name__ == "__main__":
    unittest.main()
