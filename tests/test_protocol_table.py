#!/usr/bin/env python3
"""bench/protocol_bench.py's curated table from synthetic JSON, without a GPU or torch
(ctest: bench_protocol_table, label python): the ratios fmsim / peer, the geomeans and
worst cases, a peer that disagreed with fmsim left out of every ratio, and the runs: records
of one run give one commit line; records resumed from another run are named run a, b, ...
in a column and in the header. Every value asserted is worked out by hand in the comments.
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import protocol_bench as pb  # noqa: E402


def fig(ms, mhz=1700.0):
    return {m: dict(mode=m, median_ms=ms, min_ms=ms, max_ms=ms, launches=10, clock_mhz=mhz, power_w=690.0,
                    window_s=1.0, tflops=100.0) for m in ("sustained", "burst")}


def rec(fam, fm, flash, cudnn=None, err_flash=1e-3, run=None):
    r = dict(id=f"{fam}-8192-d128", family=fam, seqlen=8192, head_dim=128, batch=16, heads=32, mask_sets=1,
             pass_="fwd", rho={"fwd": 0.5, "128x128": 0.5}, check_rel_err_vs_fmsim={"flex-flash": err_flash},
             impls={"fmsim": fig(fm), "flex-flash": fig(flash)}, wall_s=1.0)
    if cudnn is not None:
        r["impls"]["cudnn"] = fig(cudnn)
        r["check_rel_err_vs_fmsim"]["cudnn"] = 1e-4
    if run:
        r["run"] = run
    return r


def table_of(records, commit="abc1234"):
    """protocol_bench's table of one file holding these records (the file's commit as given)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "runs.json")
        with open(path, "w") as f:
            json.dump(dict(format="fmsim-protocol-bench", version=1, torch="2.x", device="GPU", nvml=True,
                           protocol=dict(warmup_s=1.0), commit=commit, command="x", records=records), f)
        return pb.table([path])


class Table(unittest.TestCase):
    def test_ratios_and_a_wrong_peer(self):
        # full: 10 / 8 = 1.25 (FLASH), 10 / 12.5 = 0.8 (cuDNN), fastest peer 8 -> 1.25;
        # causal: 4 / 5 = 0.8; document: FLASH disagreed (0.5 > 0.02): no ratio
        t = table_of([rec("full", 10.0, 8.0, cudnn=12.5), rec("causal", 4.0, 5.0),
                      rec("document", 3.0, 1.0, err_flash=0.5)])
        self.assertIn("commit abc1234.", t)
        self.assertNotIn("| run |", t)
        self.assertIn("| full-8192-d128 | 0.500 | 10.000 |", t)
        self.assertIn("1.000 (wrong)", t)
        # geomean over FLASH's two validated cases: sqrt(1.25 * 0.8) = 1.0; worst 1.25
        self.assertIn("fmsim/flex-flash: geomean 1.000, worst 1.250 (2 cases)", t)
        self.assertIn("fmsim/cudnn: geomean 0.800, worst 0.800 (1 cases)", t)
        # fastest peer: full 10 / 8 = 1.25, causal 0.8
        self.assertIn("fmsim/fastest peer: worst 1.250, geomean 1.000", t)
        self.assertIn("(wrong): 1 peer result(s)", t)

    def test_two_runs_named(self):
        a = dict(commit="1111111", date="2026-11-26", device="GPU")
        b = dict(commit="2222222", date="2026-11-27", device="GPU")
        t = table_of([rec("full", 10.0, 8.0, run=a), rec("causal", 4.0, 5.0, run=b)])
        self.assertIn("run a: 1111111 on 2026-11-26; run b: 2222222 on 2026-11-27.", t)
        self.assertIn("| case | run | rho |", t)
        self.assertIn("| full-8192-d128 | a | 0.500 |", t)
        self.assertIn("| causal-8192-d128 | b | 0.500 |", t)

    def test_mask_method_variants(self):
        # --fmsim-variants r2p,slices --peers '': fmsim[r2p] the base, fmsim[slices] a column and a ratio;
        # full: 10 / 8 = 1.25, causal: 4 / 5 = 0.8 -> geomean 1.0, worst 1.25; no peer: no fastest-peer line
        def vrec(fam, r2p, slices):
            r = rec(fam, 0, 0)
            r.update(impls={"fmsim[r2p]": fig(r2p), "fmsim[slices]": fig(slices)},
                     check_rel_err_vs_fmsim={"fmsim[slices]": 0.0})
            return r
        t = table_of([vrec("full", 10.0, 8.0), vrec("causal", 4.0, 5.0)])
        self.assertIn("| case | rho | fmsim[r2p] ms | fmsim[r2p] TF/s | MHz | W | fmsim[slices] ms | "
                      "fmsim[r2p]/fmsim[slices] |", t)
        self.assertIn("| full-8192-d128 | 0.500 | 10.000 | 100 | 1700 | 690 | 8.000 | 1.250 |", t)
        self.assertIn("fmsim[r2p]/fmsim[slices]: geomean 1.000, worst 1.250 (2 cases).", t)
        self.assertNotIn("fastest peer", t)
        # with a peer and the library's own fmsim too: "fmsim" first, the variants and the peer after it;
        # the fastest peer is the peer's alone (full: 10 / 8 = 1.25 though fmsim[slices] took 5)
        r = rec("full", 10.0, 8.0)
        r["impls"]["fmsim[slices]"] = fig(5.0)
        t = table_of([r])
        self.assertIn("| fmsim ms | fmsim TF/s | MHz | W | fmsim[slices] ms | flex-flash ms | fmsim/fmsim[slices] | "
                      "fmsim/flex-flash |", t)
        self.assertIn("fmsim/fastest peer: worst 1.250", t)

    def test_fmsim_variants_argument(self):
        self.assertEqual(pb.fmsim_impls(""), {"fmsim": "auto"})
        self.assertEqual(pb.fmsim_impls("r2p,slices"), {"fmsim[r2p]": "r2p", "fmsim[slices]": "slices"})
        self.assertEqual(pb.MASK_METHODS, ("auto", "r2p", "slices", "words"))  # fmsim.torch's names
        import subprocess
        bench = os.path.join(os.path.dirname(os.path.abspath(pb.__file__)), "protocol_bench.py")
        for bad in ("r2p,R2P", "r2p,r2p", "r2p,word"):
            p = subprocess.run([sys.executable, bench, "--out", "x.json", "--fmsim-variants", bad],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 2)
            self.assertIn("--fmsim-variants: ", p.stderr.strip().splitlines()[-1])

    def test_one_run_stamped(self):
        run = dict(commit="3333333", date="2026-11-27", device="GPU")
        t = table_of([rec("full", 10.0, 8.0, run=run), rec("causal", 4.0, 5.0, run=run)])
        self.assertIn("commit 3333333.", t)
        self.assertNotIn("| run |", t)


if __name__ == "__main__":
    unittest.main(verbosity=2)
