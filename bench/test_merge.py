#!/usr/bin/env python3
"""Test of bench/merge.py on the layout `fmsim bench` writes (ctest: bench_merge).

Runs `fmsim bench --export-only` with two kernels, gives every kernel record a
time as a GPU run would, writes a peer file as bench/peer_flex.py would (the
Triton backend timed, the FLASH backend unavailable, SDPA cuDNN on full and
causal) and a sweep fit, then checks the merged table: a column group per
kernel, both Flex backends, the time ratios, the SDPA section, the fit, the
peer's failures said, and the bars. Standard library only.

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
                     "sm90: time <= 0.75x Flex-Triton", "sm80: every case runs"):
            self.assertIn(want, text)
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
        self.assertFalse(ok[("sm80: full mask >= 600 TFLOP/s", first["id"])])

    def test_refuses_a_folder_that_is_not_a_bench(self):
        rc = merge.main(["merge.py", self.tmp.name])
        self.assertEqual(rc, 2)


if __name__ == "__main__":
    FMSIM = sys.argv.pop(1)
    unittest.main()
