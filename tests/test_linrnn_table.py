#!/usr/bin/env python3
"""bench/linrnn_table.py on a synthetic run, without a GPU or torch (ctest: bench_linrnn_table,
label python): the ratios, the proposal's criteria and issue 23's bars with their verdicts,
the figure written whole or not at all, a file of another format refused in one line. Every
value asserted is worked out by hand in the comments."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, BENCH)
import linrnn_table as lt  # noqa: E402
from linrnn_cases import prod_id  # noqa: E402


def rec(case, mean, skip, noskip, causal, fla, ndocs=1):
    def m(x):
        return {"sustained": {"ns_per_token_head": x}, "burst": {"ns_per_token_head": 2 * x}}
    return {"id": case, "ndocs": ndocs, "mean_len": mean,
            "checks": {"skip_equals_noskip": True, "rel_err_vs_fla-simple-gla": 0.0068},
            "impls": {"fmsim-skip": m(skip), "fmsim-noskip": m(noskip), "fmsim-causal": m(causal),
                      "fla-simple-gla": m(fla)}}


def synthetic(one_fla=2.4):
    return {"format": "fmsim-linrnn-bench", "version": 1, "device": "NVIDIA H200", "torch": "2.11",
            "protocol": {"warmup_s": 1.0}, "useful_flops": "4 * dk * dv", "commands": ["bench/linrnn_bench.py"],
            "commits": ["abc1234"], "records": [
                rec("fixed16-C128", 16.0, 1.0, 2.0, 1.5, 4.0, 4096),   # fla/skip 4.0, noskip/skip 2.0
                rec("drawn16-C128", 22.0, 2.0, 3.0, 2.5, 4.4, 2981),   # 2.2, 1.5
                rec("fixed64-C128", 64.0, 1.0, 1.3, 1.2, 1.9, 1024),   # 1.9 (< 2), 1.3 (1.1..1.4)
                rec("fixed2048-C128", 2048.0, 2.0, 2.4, 2.0, 2.2, 32),  # 1.1
                rec("one65536-C128", 65536.0, 3.0, 3.3, 3.0, one_fla),  # 0.8 (or 1.1)
                rec(prod_id(4, 2048, 16, 128), 2048.0, 2.0, 2.1, 2.0, 3.0, 4),  # 1.5
                {"id": prod_id(8, 2048, 32, 256), "skipped": "dk 256: fmsim's kernel takes 64 or 128"}]}


class Table(unittest.TestCase):
    def test_ratios(self):
        r = synthetic()["records"][1]
        self.assertAlmostEqual(lt.ratio(r, "fla-simple-gla", "fmsim-skip"), 2.2)
        self.assertAlmostEqual(lt.ratio(r, "fmsim-noskip", "fmsim-skip"), 1.5)
        self.assertIsNone(lt.ratio(r, "fla-gla", "fmsim-skip"))  # not timed: no ratio

    def test_proposal(self):
        rows = {a.split(":")[0]: (b, c) for a, b, c in lt.proposal_rows(synthetic())}
        # at 64 the fixed case decides: 1.3 is between the failure (1.1) and the bar (1.4)
        self.assertEqual(rows["throughput gain over noskip at mean length 64"], ("fixed 1.30x, drawn -", "inconclusive"))
        self.assertEqual(rows["throughput gain over noskip at mean length 16"], ("fixed 2.00x, drawn 1.50x", "confirmed"))

    def test_bars(self):
        (short, long_, prod) = lt.bar_rows(synthetic())
        # 4.00, 2.20 and 1.90: one case under 2x
        self.assertEqual(short[1], "fixed16-C128 4.00x; drawn16-C128 2.20x; fixed64-C128 1.90x")
        self.assertEqual(short[2], "**not met**")
        self.assertEqual(long_[1], "fixed2048-C128 1.10x; one65536-C128 0.80x")
        self.assertEqual(long_[2], "**not met**")
        self.assertEqual(lt.bar_rows(synthetic(one_fla=3.3))[1][2], "met")  # 3.3 / 3.0 = 1.1
        # one of six shapes measured (1.5x), one skipped with its reason, four not run: undecided
        self.assertIn(f"{prod_id(4, 2048, 16, 128)} 1.50x", prod[1])
        self.assertIn(f"{prod_id(8, 2048, 32, 256)} dk 256: fmsim's kernel takes 64 or 128", prod[1])
        self.assertIn(f"{prod_id(1, 8192, 96, 128)} not run", prod[1])
        self.assertEqual(prod[2], "not measured")
        d = synthetic()
        d["records"][5]["impls"]["fla-simple-gla"]["sustained"]["ns_per_token_head"] = 1.0  # 0.5x
        self.assertEqual(lt.bar_rows(d)[2][2], "**not met**")  # one shape slower decides it

    def test_render(self):
        md = lt.render(synthetic(), "/x/fig.png")
        row = next(x for x in md.splitlines() if x.startswith("| drawn16-C128 |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        # case, docs, mean, skip, causal, noskip, fla, fla separate, fla gla, fla/skip, noskip/skip, causal/skip
        self.assertEqual(cells[:7], ["drawn16-C128", "2981", "22.0", "2.000", "2.500", "3.000", "4.400"])
        self.assertEqual(cells[7:12], ["-", "-", "2.20", "1.50", "1.25"])
        self.assertEqual(cells[12:], ["yes", "0.0068"])
        self.assertIn(f"| {prod_id(8, 2048, 32, 256)} | dk 256", md)
        self.assertIn("![ns per token and head, and the speed-ups](fig.png)", md)
        self.assertIn("abc1234", md)

    def test_figure_whole_or_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "f.png")
            lt.draw(synthetic(), path)
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            self.assertEqual(os.listdir(tmp), ["f.png"])  # no temporary left beside it
            with self.assertRaises(OSError):
                lt.draw(synthetic(), os.path.join(tmp, "missing", "f.png"))
            self.assertEqual(os.listdir(tmp), ["f.png"])

    def test_command_refuses_another_format(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.json")
            with open(path, "w") as f:
                json.dump({"format": "fmsim-cp-bench"}, f)
            p = subprocess.run([sys.executable, os.path.join(BENCH, "linrnn_table.py"), path,
                                "--figure", os.path.join(tmp, "f.png")], capture_output=True, text=True)
            self.assertEqual(p.returncode, 2)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1)
            self.assertIn("not bench/linrnn_bench.py's JSON", p.stderr)
            self.assertEqual(p.stdout, "")
            self.assertEqual(sorted(os.listdir(tmp)), ["x.json"])  # no figure drawn


if __name__ == "__main__":
    unittest.main(verbosity=2)
