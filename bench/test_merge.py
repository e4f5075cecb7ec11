#!/usr/bin/env python3
"""Test of bench/merge.py on the layout `fmsim bench` writes (ctest: bench_merge).

Runs `fmsim bench --export-only` with two kernels, gives every kernel record a
time as a GPU run would and writes a sweep fit, then checks the merged table: a
column group per kernel, the fit, and the bars read from bench/bars.json (the
speed bars the Hopper kernel's only, the others every kernel's); a bars file of
one's own changes the verdict, and a bad one is refused in one line. Then the
backward: kernel records with backward times at 8K and 32K and the backward's
bars (the full mask at 450 TFLOP/s, 80% of the own full mask at 32K, every case
runs). Standard library only.

    python3 bench/test_merge.py FMSIM_BIN
"""
import contextlib
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import merge  # noqa: E402

FMSIM = None


class MergeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "bench")
        subprocess.run([FMSIM, "bench", "--export-only", "--seqlens", "256,512", "--tokens", "1024",
                        "--hidden", "256", "--families", "full,causal,document", "--kernel",
                        "sm90,sm80", "--out", self.dir], check=True, capture_output=True)
        path = os.path.join(self.dir, "paper-kernel-table", "index.json")
        with open(path) as f:
            self.cases = json.load(f)
        for i, c in enumerate(self.cases):
            self.assertEqual([k["kernel"] for k in c["kernels"]], ["sm90", "sm80"])
            for j, k in enumerate(c["kernels"]):  # as a GPU run writes them
                k.update(time_ms=1.0 + i + j, tflops=100.0 / (1 + i), status="ran",
                         instrumentation_overhead=0.01 if j == 0 else 0.03)
        with open(path, "w") as f:
            json.dump(self.cases, f)
        fits = os.path.join(self.dir, "sparsity-sweep", "tables")
        os.makedirs(fits)
        with open(os.path.join(fits, "fit.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["kernel", "family", "n", "a (ms)", "b (ms)", "R^2"])
            w.writerow(["sm90", "document", "12", "0.1000", "2.0000", "0.9912"])

    def tearDown(self):
        self.tmp.cleanup()

    def merged(self, *extra):
        self.assertEqual(merge.main(["merge.py", self.dir] + list(extra)), 0)
        with open(os.path.join(self.dir, "merged.txt")) as f:
            text = f.read()
        with open(os.path.join(self.dir, "merged.json")) as f:
            return text, json.load(f)

    def refused(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = merge.main(argv)
        self.assertEqual(rc, 2)
        lines = err.getvalue().splitlines()
        self.assertEqual(len(lines), 1, err.getvalue())
        return lines[0]

    def test_merged_table(self):
        text, merged = self.merged()
        for want in ("sm90 ms", "sm80 ms", "speedup", "inst%", "R^2=0.9912",
                     "sm90: full mask >= 600 TFLOP/s", "sm80: every case runs",
                     "sm90 bwd: every case runs", "bars of the issues (" + merge.BARS + ")"):
            self.assertIn(want, text)
        for gone in ("triton", "flash", "cuDNN"):
            self.assertNotIn(gone, text, "the peers are bench/protocol_bench.py's")
        self.assertNotIn("sm80 bwd:", text, "sm80 has no backward: no backward bars")
        self.assertEqual(merged["kernels"], ["sm90", "sm80"])
        first = merged["rows"][0]
        self.assertEqual(first["id"], self.cases[0]["id"])
        self.assertAlmostEqual(first["fmsim"]["sm90"]["ms"], 1.0)
        self.assertAlmostEqual(first["fmsim"]["sm80"]["ms"], 2.0)
        ok = {(c["check"], c["case"]): c["ok"] for c in merged["checks"]}
        full = [r["id"] for r in merged["rows"] if r["family"] == "full"]
        self.assertTrue(full)
        for case in full:  # 100 TFLOP/s at most: under the bar
            self.assertFalse(ok[("sm90: full mask >= 600 TFLOP/s", case)])
            # the speed bars are the Hopper kernel's; the portable kernel gets none of them
            self.assertNotIn(("sm80: full mask >= 600 TFLOP/s", case), ok)
        n = len(merged["rows"])
        self.assertTrue(ok[("sm80: every case runs", "%d of %d" % (n, n))])
        self.assertTrue(ok[("sm90: instrumentation overhead < 2%", first["id"])])
        self.assertFalse(ok[("sm80: instrumentation overhead < 2%", first["id"])])
        self.assertTrue(ok[("sm90: sweep time linear in 1-rho, R^2 >= 0.98", "sweep document")])

    def test_bars_of_a_file(self):
        bars = os.path.join(self.tmp.name, "bars.json")
        with open(bars, "w") as f:
            json.dump(dict(format="fmsim-bars", version=1, bars=[
                {"pass": "fwd", "kernels": ["*"], "families": ["full"], "metric": "tflops", "op": ">=",
                 "value": 50, "what": "full mask >= 50"}]), f)
        text, merged = self.merged("--bars", bars)
        checks = {c["check"] for c in merged["checks"]}
        self.assertEqual(checks, {"sm90: full mask >= 50", "sm80: full mask >= 50"})
        self.assertIn("bars of the issues (%s)" % bars, text)
        # case 0 (full, 8K first): sm90 and sm80 both at 100 TFLOP/s
        ok = {(c["check"], c["case"]): c["ok"] for c in merged["checks"]}
        self.assertTrue(ok[("sm90: full mask >= 50", self.cases[0]["id"])])

    def test_refuses_bad_bars_in_one_line(self):
        bad = os.path.join(self.tmp.name, "bad.json")
        for doc, want in ((None, "No such file"),
                          (dict(format="other", version=1, bars=[]), "not an fmsim-bars file"),
                          (dict(format="fmsim-bars", version=1, bars=[]), "no bars"),
                          (dict(format="fmsim-bars", version=1, bars=[dict(what="x", kernels=["*"], metric="tflops", op=">=", value=1)]), "bar 1: pass"),
                          (dict(format="fmsim-bars", version=1, bars=[{"what": "x", "pass": "fwd", "kernels": ["*"], "metric": "speed"}]), "metric 'speed'"),
                          (dict(format="fmsim-bars", version=1, bars=[{"what": "x", "pass": "fwd", "kernels": ["*"], "metric": "tflops", "op": "~"}]), "expected op"),
                          (dict(format="fmsim-bars", version=1, bars=[{"what": "x", "pass": "fwd", "kernels": "sm90", "metric": "cases_run"}]), "kernels:")):
            if os.path.exists(bad):
                os.remove(bad)
            if doc is not None:
                with open(bad, "w") as f:
                    json.dump(doc, f)
            self.assertIn(want, self.refused(["merge.py", self.dir, "--bars", bad]))

    def test_refuses_a_folder_that_is_not_a_bench(self):
        self.assertIn("not the output of fmsim bench", self.refused(["merge.py", self.tmp.name]))

    def test_refuses_a_peer_file(self):
        """The peer-file input is gone: a second folder or file is a usage error."""
        self.assertIn("usage: merge.py", self.refused(["merge.py", self.dir, "peer.json"]))
        self.assertIn("usage: merge.py", self.refused(["merge.py", self.dir, "--bars"]))


class BackwardMergeTest(unittest.TestCase):
    """The backward's columns and bars, from synthetic GPU figures."""

    # backward TFLOP/s per (family, S): the full mask at 460 and 500, causal at 32K 90% of
    # the full mask's (passes 80%), document at 32K 60% (fails)
    TFLOPS = {("full", 8192): 460.0, ("full", 32768): 500.0, ("causal", 8192): 300.0,
              ("causal", 32768): 450.0, ("document", 8192): 200.0, ("document", 32768): 300.0}

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "bench")
        subprocess.run([FMSIM, "bench", "--export-only", "--seqlens", "8192,32768", "--tokens",
                        "32768", "--hidden", "256", "--families", "full,causal,document",
                        "--kernel", "sm90", "--out", self.dir], check=True, capture_output=True)
        path = os.path.join(self.dir, "paper-kernel-table", "index.json")
        with open(path) as f:
            self.cases = json.load(f)
        for i, c in enumerate(self.cases):
            k = c["kernels"][0]
            self.assertEqual(k["bwd"]["br"], 64, "the backward's own tile")
            k.update(time_ms=1.0, tflops=100.0, status="ran")
            b = k["bwd"]
            b.update(time_ms=2.0 + i, tflops=self.TFLOPS[(c["family"], c["seqlen"])],
                     noskip_ms=3.0 * (2.0 + i), speedup_skip_over_noskip=3.0, status="ran",
                     instrumentation_overhead=0.015)
        with open(path, "w") as f:
            json.dump(self.cases, f)

    def tearDown(self):
        self.tmp.cleanup()

    def test_backward_columns_and_bars(self):
        self.assertEqual(merge.main(["merge.py", self.dir]), 0)
        with open(os.path.join(self.dir, "merged.json")) as f:
            merged = json.load(f)
        by_id = {r["id"]: r for r in merged["rows"]}
        ids = [c["id"] for c in self.cases]
        doc32 = [c["id"] for c in self.cases if c["family"] == "document" and c["seqlen"] == 32768][0]
        full8 = [c["id"] for c in self.cases if c["family"] == "full" and c["seqlen"] == 8192][0]
        b = by_id[full8]["fmsim"]["sm90"]["bwd"]
        self.assertAlmostEqual(b["ms"], 2.0 + ids.index(full8))
        self.assertAlmostEqual(b["speedup"], 3.0)
        ok = {(c["check"], c["case"]): c["ok"] for c in merged["checks"]}
        self.assertTrue(ok[("sm90 bwd: full mask >= 450 TFLOP/s (2.5x count)", full8)])
        eighty = {case: v for (name, case), v in ok.items()
                  if name == "sm90 bwd: TFLOP/s >= 0.8x own full mask (32K, 128K)"}
        self.assertEqual(len(eighty), 2, "causal and document at 32K")
        self.assertFalse(eighty[doc32])
        self.assertEqual(sum(eighty.values()), 1)
        self.assertTrue(ok[("sm90 bwd: every case runs", "6 of 6")])
        with open(os.path.join(self.dir, "merged.txt")) as f:
            text = f.read()
        for want in ("backward: the same", "sm90 bwd: full mask >= 450 TFLOP/s (2.5x count)",
                     "FAIL (1 of 2): " + doc32, "   3.00    ", "+1.50"):
            self.assertIn(want, text)


if __name__ == "__main__":
    FMSIM = sys.argv.pop(1)
    unittest.main()
