#!/usr/bin/env python3
"""bench/ncu_phases.py on a hand-made kernel: each instruction's phase by the last line of the
phases' file seen before it, the samples and instructions summed per phase, the cycles per unit
worked out by hand, and the refusals (another build, a bad --phase) as one line and exit 1/2."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "ncu_phases.py")

SASS = """\t.section\t.text._Zk,"ax",@progbits
.text._Zk:
\t//## File "/src/k.cuh", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t//## File "/usr/include/helper.hpp", line 99
        /*0010*/                   S2R R5, SR_TID.X ;
\t//## File "/src/k.cuh", line 25
        /*0020*/                   FSEL R2, R3, R4, P0 ;
        /*0030*/                   FMNMX R2, R2, R6, !PT ;
\t//## File "/src/k.cuh", line 40
        /*0040*/                   EXIT ;
//--------------------- .text._Zother ---
.text._Zother:
        /*0000*/                   EXIT ;
"""
REASONS = ["stall_wait", "stall_selected", "stall_long_scoreboard"]


def ncu_csv(path, samples, executed, stalls):
    hdr = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"] + REASONS + \
          [r + " (Not Issued)" for r in REASONS]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "void k()"])
        w.writerow(hdr)
        for i, (s, e, st) in enumerate(zip(samples, executed, stalls)):
            w.writerow([hex(0x7f0000 + 16 * i), "OP", s, e] + list(st) + [0, 0, 0])


class NcuPhases(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.sass = os.path.join(self.tmp.name, "k.sass")
        with open(self.sass, "w") as f:
            f.write(SASS)

    def tearDown(self):
        self.tmp.cleanup()

    def run_tool(self, csv_path, *extra):
        out = os.path.join(self.tmp.name, "t.json")
        r = subprocess.run([sys.executable, SCRIPT, self.sass, "_Zk", csv_path, "--file", "k.cuh",
                            "--phase", "head=1-19", "--phase", "mask=20-30", *extra, "--json", out],
                           capture_output=True, text=True)
        return r, out

    def test_phases_by_the_last_line_of_the_file(self):
        p = os.path.join(self.tmp.name, "a.csv")
        # 5 instructions: head, head (helper inlined after line 10), mask, mask, other (line 40)
        ncu_csv(p, [4, 2, 10, 6, 1], [100, 100, 50, 50, 1], [(1, 3, 0), (0, 2, 0), (8, 2, 0), (2, 0, 4), (0, 1, 0)])
        r, out = self.run_tool(p, "--unit", "2", "--warps", "3", "--cta-warps", "6", "--interval", "100")
        self.assertEqual(r.returncode, 0, r.stderr)
        t = {row["phase"]: row for row in json.load(open(out))["phases"]}
        self.assertEqual(set(t), {"head", "mask", "other"})
        self.assertAlmostEqual(t["head"]["samples_per_unit"], 3.0)       # (4 + 2) / 2
        self.assertAlmostEqual(t["mask"]["samples_per_unit"], 8.0)       # (10 + 6) / 2
        self.assertAlmostEqual(t["mask"]["instructions_per_unit"], 50.0)  # (50 + 50) / 2
        self.assertAlmostEqual(t["mask"]["share"], 16 / 23)
        self.assertAlmostEqual(t["mask"]["cycles_per_unit_per_warp"], 8.0 * 100 * 6 / 3)
        self.assertAlmostEqual(t["mask"]["stalls"]["wait"], 10 / 16)
        self.assertAlmostEqual(t["mask"]["stalls"]["long_scoreboard"], 4 / 16)
        self.assertEqual(r.stdout.splitlines()[0].split()[0], "mask")    # largest first

    def test_a_phase_per_function_of_the_source(self):
        src = os.path.join(self.tmp.name, "k.cuh")
        lines = [""] * 45
        lines[8] = "__device__ __forceinline__ void setup(int x) {"          # line 9
        lines[19] = "__global__ void __launch_bounds__(128, 1) kern(int p) {"  # line 20: not __launch_bounds__
        lines[23] = "template <int J, bool I> FMLR_DEV void band(int u) {"       # line 24: a template on the line
        lines[37] = "static __device__ int tail(int y) {"                      # line 38
        with open(src, "w") as f:
            f.write("\n".join(lines))
        p = os.path.join(self.tmp.name, "f.csv")
        ncu_csv(p, [4, 2, 10, 6, 1], [1, 1, 1, 1, 1], [(1, 0, 0)] * 5)
        out = os.path.join(self.tmp.name, "f.json")
        r = subprocess.run([sys.executable, SCRIPT, self.sass, "_Zk", p, "--file", "k.cuh", "--functions", src,
                            "--json", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        t = {row["phase"]: row["samples_per_unit"] for row in json.load(open(out))["phases"]}
        # lines 10 (and the helper after it) in setup, 25 in band (kern: 20-23, no instruction), 40 in tail
        self.assertEqual({k: v for k, v in t.items() if v}, {"setup": 6.0, "band": 16.0, "tail": 1.0})

    def test_another_build_and_bad_phase_are_refused(self):
        p = os.path.join(self.tmp.name, "b.csv")
        ncu_csv(p, [1, 1], [1, 1], [(1, 0, 0), (1, 0, 0)])   # 2 instructions against 5
        r, out = self.run_tool(p)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("another build", r.stderr)
        self.assertFalse(os.path.exists(out))
        r = subprocess.run([sys.executable, SCRIPT, self.sass, "_Zk", p, "--file", "k.cuh", "--phase", "x=3"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("expected NAME=A-B", r.stderr)


if __name__ == "__main__":
    unittest.main()
