#!/usr/bin/env python3
"""bench/validate_model.py on a bench/protocol_bench.py run (fmsim-protocol-bench): each
record's fmsim figures become two cases (protocol-sustained, protocol-burst), each predicted
by `fmsim predict` on its own mask; the test checks the table against predict called here,
and that a record without its fields is one line on stderr and exit 1, nothing written.

    python3 tests/test_validate_model.py FMSIM_BIN
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "validate_model.py")
PROFILE = os.path.join(ROOT, "tests", "ref", "h200-sm90-2026-11-23.json")
FMSIM = None


def figure(ms):
    return {"mode": "x", "median_ms": ms, "min_ms": ms, "max_ms": ms, "launches": 2, "clock_mhz": 1700.0}


def record(fam, S, B, H, pass_, sust, burst, name="fmsim[r2p]"):
    return {"id": f"{fam}-{S}-d128", "family": fam, "seqlen": S, "head_dim": 128, "batch": B, "heads": H,
            "pass_": pass_, "impls": {name: {"sustained": figure(sust), "burst": figure(burst)},
                                      "fmsim[slices]": {"sustained": figure(99.0), "burst": figure(99.0)}}}


def load(path):
    with open(path) as f:
        return json.load(f)


def predicted(fam, S, B, H, pass_, clock):
    out = subprocess.run([FMSIM, "predict", "--json", "--gpu", PROFILE, "--kernel", "sm90", "--pass", pass_,
                          "--clock", clock, "--head-dim", "128", "--batch", str(B), "--heads", str(H), "--family", fam,
                          "--seqlen", str(S), "--seed", "0"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["passes"][0]["tiles"][0]["time_ms"]


class ValidateProtocol(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, records):
        path = os.path.join(self.tmp.name, "run.json")
        with open(path, "w") as f:
            json.dump({"format": "fmsim-protocol-bench", "version": 1, "records": records}, f)
        return path

    def validate(self, path):
        out = os.path.join(self.tmp.name, "table.json")
        r = subprocess.run([sys.executable, SCRIPT, path, "--profile", PROFILE, "--fmsim", FMSIM, "--out", out],
                           capture_output=True, text=True)
        return r, out

    def test_two_figures_per_record_against_predict(self):
        recs = [record("causal", 2048, 2, 4, "fwd", 0.30, 0.25), record("document", 4096, 1, 8, "bwd", 2.0, 1.5)]
        r, out = self.validate(self.write(recs))
        self.assertEqual(r.returncode, 0, r.stderr)
        cases = load(out)["cases"]
        self.assertEqual(sorted((c["id"], c["source"]) for c in cases),
                         [("causal-2048-d128-fwd", "protocol-burst"), ("causal-2048-d128-fwd", "protocol-sustained"),
                          ("document-4096-d128-bwd", "protocol-burst"), ("document-4096-d128-bwd", "protocol-sustained")])
        measured = {"protocol-sustained": {"fwd": 0.30, "bwd": 2.0}, "protocol-burst": {"fwd": 0.25, "bwd": 1.5}}
        # each figure predicted in its own clock state (fmsim predict --clock)
        want = {src: {"fwd": predicted("causal", 2048, 2, 4, "fwd", src[9:]),
                      "bwd": predicted("document", 4096, 1, 8, "bwd", src[9:])} for src in measured}
        # this profile has a boost window on the forward only: the states differ there alone
        self.assertGreater(want["protocol-sustained"]["fwd"], want["protocol-burst"]["fwd"])
        self.assertEqual(want["protocol-sustained"]["bwd"], want["protocol-burst"]["bwd"])
        for c in cases:
            self.assertEqual(c["measured_ms"], measured[c["source"]][c["pass"]])  # the reference method's, not slices'
            w = want[c["source"]][c["pass"]]
            self.assertAlmostEqual(c["predicted_ms"], w, places=9)
            self.assertAlmostEqual(c["error"], w / c["measured_ms"] - 1, places=12)

    def test_plain_fmsim_and_failed_records(self):
        recs = [record("causal", 2048, 2, 4, "fwd", 0.30, 0.25, name="fmsim"),
                dict(record("full", 2048, 2, 4, "fwd", 1, 1), impls={"fmsim": {"error": "launch failed"}})]
        r, out = self.validate(self.write(recs))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual({c["id"] for c in load(out)["cases"]}, {"causal-2048-d128-fwd"})

    def test_incomplete_record_is_one_line(self):
        bad = record("causal", 2048, 2, 4, "fwd", 0.30, 0.25)
        del bad["pass_"]
        r, out = self.validate(self.write([bad]))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("not a complete protocol_bench record", r.stderr)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_validate_model.py FMSIM_BIN")
    FMSIM = sys.argv.pop(1)
    unittest.main()
