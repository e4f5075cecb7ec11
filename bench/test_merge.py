#!/usr/bin/env python3
"""Test of bench/merge.py on the layout `fmsim bench` writes (ctest: bench_merge).

Runs `fmsim bench --export-only` with two kernels, gives every kernel record a
time as a GPU run would, writes a peer file as bench/peer_flex.py would (the
Triton backend timed, the FLASH backend unavailable, SDPA cuDNN on full and
causal) and a sweep fit, then checks the merged table: a column group per
kernel, both Flex backends, the time ratios, the SDPA section, the fit, the
peer's failures said, and the bars. Then the backward: kernel records with
backward times at 8K and 32K, the peers' backward figures, and the backward's
bars (each case at most Flex-Triton's backward time, the full mask at 450
TFLOP/s, 80% of the own full mask at 32K) and the ratio to Flex-FLASH
reported. Standard library only.

    python3 bench/test_merge.py FMSIM_BIN
"""
import csv
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
        results = []
        for i, c in enumerate(self.cases):
            self.assertEqual([k["kernel"] for k in c["kernels"]], ["sm90", "sm80"])
            for j, k in enumerate(c["kernels"]):  # as a GPU run writes them
                k.update(time_ms=1.0 + i + j, tflops=100.0 / (1 + i), status="ran",
                         instrumentation_overhead=0.01)
            base = dict(id=c["id"], family=c["family"], seqlen=c["seqlen"],
                        head_dim=c["head_dim"], peer="flex_attention")
            results.append(dict(base, backend="TRITON", fwd_ms=4.0 + i, fwd_tflops=50.0))
            results.append(dict(base, backend="FLASH", error="FLASH backend unavailable: x",
                                oom=False))
        for S in (256, 512):
            for fam in ("full", "causal"):
                results.append(dict(family=fam, peer="sdpa", backend="CUDNN_ATTENTION", seqlen=S,
                                    head_dim=128, fwd_ms=2.0, fwd_tflops=300.0))
        with open(path, "w") as f:
            json.dump(self.cases, f)
        self.peer = os.path.join(self.tmp.name, "peer.json")
        with open(self.peer, "w") as f:
            json.dump(dict(torch="test", results=results), f)
        fits = os.path.join(self.dir, "sparsity-sweep", "tables")
        os.makedirs(fits)
        with open(os.path.join(fits, "fit.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["kernel", "family", "n", "a (ms)", "b (ms)", "R^2"])
            w.writerow(["sm90", "document", "12", "0.1000", "2.0000", "0.9912"])

    def tearDown(self):
        self.tmp.cleanup()

    def test_merged_table(self):
        rc = merge.main(["merge.py", self.dir, self.peer])
        self.assertEqual(rc, 0)
        with open(os.path.join(self.dir, "merged.txt")) as f:
            text = f.read()
        for want in ("sm90 ms", "sm80 ms", "triton ms", "flash ms", "sm90/tri", "sm80/fla",
                     "sm90/cuDNN", "R^2=0.9912", "Flex-FLASH: FLASH backend unavailable",
                     "sm90: time <= 0.75x Flex-Triton", "sm80: every case runs",
                     "sm90 bwd: every case runs"):
            self.assertIn(want, text)
        self.assertNotIn("sm80 bwd:", text, "sm80 has no backward: no backward bars")
        with open(os.path.join(self.dir, "merged.json")) as f:
            merged = json.load(f)
        self.assertEqual(merged["kernels"], ["sm90", "sm80"])
        first = merged["rows"][0]
        self.assertEqual(first["id"], self.cases[0]["id"])
        # case 0: sm90 1.0 ms, sm80 2.0 ms, Triton 4.0 ms, cuDNN 2.0 ms (full)
        self.assertAlmostEqual(first["fmsim"]["sm90"]["over_triton"], 0.25)
        self.assertAlmostEqual(first["fmsim"]["sm80"]["over_triton"], 0.5)
        self.assertAlmostEqual(first["fmsim"]["sm90"]["over_cudnn"], 0.5)
        self.assertIsNone(first["fmsim"]["sm90"]["over_flash"])
        ok = {(c["check"], c["case"]): c["ok"] for c in merged["checks"]}
        self.assertTrue(ok[("sm90: time <= 0.75x Flex-Triton", first["id"])])
        # the speed bars are the Hopper kernel's; the portable kernel gets none of them
        self.assertNotIn(("sm80: full mask >= 600 TFLOP/s", first["id"]), ok)
        self.assertIn(("sm80: every case runs", "%d of %d" % (len(merged["rows"]), len(merged["rows"]))), ok)

    def test_refuses_a_folder_that_is_not_a_bench(self):
        rc = merge.main(["merge.py", self.tmp.name])
        self.assertEqual(rc, 2)


class BackwardMergeTest(unittest.TestCase):
    """The backward's columns and bars, from synthetic GPU and peer figures."""

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
        results = []
        for i, c in enumerate(self.cases):
            k = c["kernels"][0]
            self.assertEqual(k["bwd"]["br"], 64, "the backward's own tile")
            k.update(time_ms=1.0, tflops=100.0, status="ran")
            b = k["bwd"]
            b.update(time_ms=2.0 + i, tflops=self.TFLOPS[(c["family"], c["seqlen"])],
                     noskip_ms=3.0 * (2.0 + i), speedup_skip_over_noskip=3.0, status="ran",
                     instrumentation_overhead=0.015)
            slow = c["family"] == "document" and c["seqlen"] == 32768
            base = dict(id=c["id"], family=c["family"], seqlen=c["seqlen"],
                        head_dim=c["head_dim"], peer="flex_attention")
            results.append(dict(base, backend="TRITON", fwd_ms=4.0, fwd_tflops=50.0,
                                bwd_ms=1.0 if slow else 3.0 + i, bwd_tflops=250.0))
            results.append(dict(base, backend="FLASH", error="forward failed: x", oom=False,
                                bwd_ms=2.0 + i, bwd_tflops=400.0))
        results.append(dict(family="full", peer="sdpa", backend="CUDNN_ATTENTION", seqlen=32768,
                            head_dim=128, fwd_ms=2.0, fwd_tflops=300.0, bwd_ms=4.0,
                            bwd_tflops=520.0))
        with open(path, "w") as f:
            json.dump(self.cases, f)
        self.peer = os.path.join(self.tmp.name, "peer.json")
        with open(self.peer, "w") as f:
            json.dump(dict(torch="test", results=results), f)

    def tearDown(self):
        self.tmp.cleanup()

    def test_backward_columns_bars_and_flash_ratio(self):
        self.assertEqual(merge.main(["merge.py", self.dir, self.peer]), 0)
        with open(os.path.join(self.dir, "merged.json")) as f:
            merged = json.load(f)
        by_id = {r["id"]: r for r in merged["rows"]}
        doc32 = [c["id"] for c in self.cases if c["family"] == "document" and c["seqlen"] == 32768][0]
        full8 = [c["id"] for c in self.cases if c["family"] == "full" and c["seqlen"] == 8192][0]
        i_full8 = [c["id"] for c in self.cases].index(full8)
        b = by_id[full8]["fmsim"]["sm90"]["bwd"]
        self.assertAlmostEqual(b["over_triton"], (2.0 + i_full8) / (3.0 + i_full8))
        self.assertAlmostEqual(b["over_flash"], 1.0)
        self.assertAlmostEqual(by_id[doc32]["fmsim"]["sm90"]["bwd"]["over_triton"],
                               (2.0 + [c["id"] for c in self.cases].index(doc32)) / 1.0)
        full32 = [c["id"] for c in self.cases if c["family"] == "full" and c["seqlen"] == 32768][0]
        self.assertAlmostEqual(by_id[full32]["fmsim"]["sm90"]["bwd"]["over_cudnn"],
                               (2.0 + [c["id"] for c in self.cases].index(full32)) / 4.0)
        self.assertIsNone(by_id[full8]["flash_ms"], "the FLASH forward failed")
        ok = {(c["check"], c["case"]): c["ok"] for c in merged["checks"]}
        tri = "sm90 bwd: time <= 1.0x Flex-Triton's backward"
        self.assertFalse(ok[(tri, doc32)])
        self.assertEqual(sum(1 for (name, _), v in ok.items() if name == tri and not v), 1)
        self.assertTrue(ok[("sm90 bwd: full mask >= 450 TFLOP/s (2.5x count)", full8)])
        eighty = {case: v for (name, case), v in ok.items()
                  if name == "sm90 bwd: TFLOP/s >= 0.8x own full mask (32K, 128K)"}
        self.assertEqual(len(eighty), 2, "causal and document at 32K")
        self.assertFalse(eighty[doc32])
        self.assertEqual(sum(eighty.values()), 1)
        self.assertTrue(ok[("sm90 bwd: every case runs", "6 of 6")])
        rep = merged["reported"]
        self.assertEqual(len(rep), 1)
        self.assertEqual(rep[0]["cases"], 6)
        self.assertAlmostEqual(rep[0]["value"], 1.0)
        with open(os.path.join(self.dir, "merged.txt")) as f:
            text = f.read()
        for want in ("backward: the same", "backward, full and causal against SDPA",
                     "sm90 bwd: time <= 1.0x Flex-Triton's backward", "FAIL (1 of 6): " + doc32,
                     "sm90 bwd: full mask >= 450 TFLOP/s (2.5x count)",
                     "sm90 bwd: time / Flex-FLASH's backward, geomean (hd 128)",
                     "Flex-FLASH: forward failed: x", "   3.00    ", "+1.50"):
            self.assertIn(want, text)


if __name__ == "__main__":
    FMSIM = sys.argv.pop(1)
    unittest.main()
