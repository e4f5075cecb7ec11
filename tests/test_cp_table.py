#!/usr/bin/env python3
"""The multi-GPU benchmark's arithmetic on synthetic JSON, without a GPU or torch (ctest:
bench_cp_table, label python): bench/cp_table.py's efficiencies, ratios and the bars'
verdicts; bench/cp_bench.py's reading of cp-run and cp-plan and its order of cases;
bench/cp_torch_peer.py's step (the slowest rank per launch). The numbers are chosen so that
every value asserted is worked out by hand in the comments.
"""
import os
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import cp_bench  # noqa: E402
import cp_collect  # noqa: E402
import cp_table  # noqa: E402
import cp_torch_peer  # noqa: E402

M = 1048576


def plan(one_gpu_fwd, one_gpu_total, shardings):
    """A plan_summary(): shardings {name: (exchange, step_ms, rank_fwd_ms, rank_compute_ms)}, the
    ranks' compute that exchange's; the other exchange's half of it (a table that compares a run
    with the wrong exchange's prediction fails)."""
    def ex(e, x, st, fw, cm):
        k = 1 if e == x else 0.5
        return dict(fwd_ms=st / 4, bwd_ms=3 * st / 4, step_ms=st, fits=True, rank_fwd_ms=[k * v for v in fw],
                    rank_compute_ms=[k * v for v in cm])
    best = min(shardings, key=lambda n: shardings[n][1]) if shardings else "contiguous"
    return dict(profile="h200-sm90", one_gpu=dict(fwd_ms=one_gpu_fwd, bwd_ms=one_gpu_total - one_gpu_fwd,
                                                  total_ms=one_gpu_total),
                shardings={n: dict(exchange=x, efficiency=0.9,
                                   exchanges={e: ex(e, x, st, fw, cm) for e in ("allgather", "ring")})
                           for n, (x, st, fw, cm) in shardings.items()},
                best=dict(sharding=best, exchange=shardings[best][0] if shardings else "allgather"))


def fm(fam, P, sh, ex, pass_, sustained, compute=None, check=None, status="ok"):
    r = dict(id=f"fmsim:{fam}:{M}:{P}:{sh}:{ex}:{pass_}", tool="fmsim", family=fam, seqlen=M, ranks=P,
             sharding=sh, exchange=ex, status=status, error="", job="j", **{"pass": pass_})
    if status == "ok":
        r.update(step_ms=dict(sustained=sustained, burst=0.9 * sustained), rank_compute_ms=compute or [],
                 check=check)
    return r


def tc(fam, P, backend, ex, sustained, status="ok"):
    r = dict(id=f"torch:{fam}:{M}:{P}:{backend}-{ex}:both", tool="torch", family=fam, seqlen=M, ranks=P,
             sharding="contiguous", exchange=ex, backend=backend, status=status, error="", job="t",
             check=None, **{"pass": "both"})
    if status == "ok":
        r["step_ms"] = dict(sustained=sustained, burst=sustained)
    return r


def synthetic():
    cd = "causal_document"
    plans = {f"{cd}:{M}:4": plan(4000, 16000, {
        "contiguous": ("allgather", 5200, [1000] * 4, [5000, 5100, 5150, 5200]),
        "mask-aware": ("ring", 4010, [1000] * 4, [4000, 4010, 3990, 4000])}),
        f"{cd}:{M}:2": plan(4000, 16000, {"mask-aware": ("ring", 8000, [2000, 2000], [8000, 8000])}),
        f"{cd}:{M}:1": plan(4000, 16000, {}),
        f"full:{M}:2": plan(30000, 120000, {"contiguous": ("ring", 60000, [15000] * 2, [60000] * 2)})}
    recs = [
        fm(cd, 1, "-", "-", "both", 16000.0, [16800.0]),                 # one GPU: 16800 / 16000 = 1.05
        fm(cd, 4, "contiguous", "allgather", "both", 5400.0, [5000, 5100, 5150, 5200], {"passed": True}),
        fm(cd, 4, "contiguous", "ring", "both", 5600.0),
        fm(cd, 4, "mask-aware", "allgather", "both", 4300.0, check={"passed": False}),
        fm(cd, 4, "mask-aware", "ring", "both", 4200.0, [4100, 4000, 3900, 4640], {"passed": True}),
        fm(cd, 4, "zigzag", "ring", "both", 0.0, status="oom"),
        fm(cd, 2, "mask-aware", "ring", "both", 8400.0, [8400, 8000]),
        fm("full", 1, "-", "-", "both", 100000.0),
        fm("full", 2, "contiguous", "ring", "both", 62000.0),
        tc("full", 2, "cudnn", "allgather", 70000.0), tc("full", 2, "flash", "allgather", 90000.0),
        tc("full", 2, "flash", "ring", 0.0, status="oom")]
    return dict(format="fmsim-cp-bench", version=1, commit="abc1234", commands=["python3 bench/cp_bench.py --out x"],
                device=dict(name="NVIDIA H100 80GB HBM3", count=4), heads=32, head_dim=128, gpu_profile="",
                protocol=dict(warmup_s=1.0, sustain_s=1.0), torch="2.11.0", plans=plans, records=recs)


class Table(unittest.TestCase):
    def setUp(self):
        self.doc = synthetic()
        self.bars = {item: (n, v) for item, n, v in cp_table.bars(self.doc)}

    def bar(self, start):
        (key,) = [k for k in self.bars if k.startswith(start)]
        return self.bars[key]

    def test_efficiency_and_mask_aware_ratio(self):
        d = self.doc
        self.assertEqual(cp_table.ms(cp_table.one_gpu(d, "causal_document", M, "both")), 16000.0)
        # the fastest of six runs is mask-aware ring (4200; the OOM is no time): 16000 / (4 x 4200)
        e, r = cp_table.scaled(d, "causal_document", M, 4, "both")
        self.assertEqual((r["sharding"], r["exchange"]), ("mask-aware", "ring"))
        self.assertAlmostEqual(e, 16000 / 16800)
        # each sharding at its faster exchange: 4200 / 5400
        self.assertAlmostEqual(cp_table.mask_aware_ratio(d, "causal_document", M, 4, "both"), 4200 / 5400)
        self.assertIsNone(cp_table.mask_aware_ratio(d, "causal_document", M, 2, "both"))

    def test_compute_against_the_plan(self):
        d = self.doc
        (r,) = cp_table.find(d, "fmsim", "causal_document", M, 4, "both", sharding="mask-aware", exchange="ring")
        got = cp_table.compute_ratios(d, r)
        for x, want in zip(got, (4100 / 4000, 4000 / 4010, 3900 / 3990, 4640 / 4000)):
            self.assertAlmostEqual(x, want)
        (one,) = cp_table.find(d, "fmsim", "causal_document", M, 1, "both")
        self.assertEqual(cp_table.compute_ratios(d, one), [16800 / 16000])  # against one_gpu total_ms
        # the worst deviation of all 11 ranks: 4640 / 4000 = 1.16, over 15%; the other 10 within
        number, v = self.bar("cp-plan predicts")
        self.assertIn("worst 1.160", number)
        self.assertIn("10 of 11 ranks within 15%", number)
        self.assertEqual(v, "not met")

    def test_bar_verdicts(self):
        self.assertEqual(self.bar("outputs and gradients"), ("2 of 3 checked runs passed", "not met"))
        self.assertEqual(self.bar("causal_document, 1M tokens, 4 GPUs: mask-aware"), (f"{4200 / 5400:.3f}x", "not met"))
        # 16000 / (2 x 8400) = 95.2% >= 90%; 16000 / (4 x 4200) = 95.2% >= 85%
        self.assertEqual(self.bar("causal_document, 1M tokens, 2 GPUs: scaling"), ("95.2% (mask-aware, ring)", "met"))
        self.assertEqual(self.bar("causal_document, 1M tokens, 4 GPUs: scaling")[1], "met")
        # full on 2: 100000 / (2 x 62000) = 80.6% < 90%
        self.assertEqual(self.bar("full, 1M tokens, 2 GPUs: scaling"), ("80.6% (contiguous, ring)", "not met"))
        self.assertEqual(self.bar("document, 1M tokens, 2 GPUs: scaling"), ("-", "not measured"))
        # torch's fastest of cudnn 70000, flash 90000 (its OOM left out): 62000 / 70000
        n, v = self.bar("full, 1M tokens, 2 GPUs: faster")
        self.assertEqual((n, v), (f"fmsim/torch {62000 / 70000:.3f} (torch cudnn, allgather)", "met"))
        self.assertEqual(self.bar("causal, 1M tokens, 4 GPUs: faster")[1], "not measured")

    def test_where_the_efficiency_goes(self):
        """The fastest run's efficiency as three measured factors (mask-aware ring, 4200 ms; its
        ranks' compute 4100, 4000, 3900, 4640, sum 16640; T1 16000)."""
        x = cp_table.efficiency_parts(self.doc, "causal_document", M, 4)
        self.assertAlmostEqual(x["compute"], 16000 / 16640)
        self.assertAlmostEqual(x["balance"], 4160 / 4640)
        self.assertAlmostEqual(x["overlap"], 4640 / 4200)
        self.assertAlmostEqual(x["compute"] * x["balance"] * x["overlap"], x["eff"])
        self.assertAlmostEqual(x["eff"], 16000 / (4 * 4200))
        self.assertAlmostEqual(x["exposed_ms"], -440.0)
        # full on 2 GPUs has no ranks' compute: nothing to split
        self.assertIsNone(cp_table.efficiency_parts(self.doc, "full", M, 2))
        rows, P, n = cp_table.parts_table(self.doc, 0.96)  # 95.2% is below 96%, not below 90%
        self.assertEqual((P, n, len(rows)), (4, 1, 3))
        self.assertIn("| causal_document | 1048576 | mask-aware, ring | 95.2% | 0.962 | 0.897 | 1.105 | -440.0 |", rows)
        self.assertEqual(len(cp_table.parts_table(self.doc, 0.90)[0]), 2)
        self.assertIn("No run is below 90%.", cp_table.render(self.doc))  # the header alone is not a table

    def test_best_pick_against_the_fastest(self):
        """The plan's best (the least predicted step: mask-aware at its ring, 4010) ran at 4200 ms,
        the fastest of the four pairs the plan holds (zigzag is not in it); a plan naming
        contiguous allgather picks 5400 ms: 5400 / 4200."""
        d = self.doc
        b, f = cp_table.best_pick(d, "causal_document", M, 4)
        self.assertIs(b, f)
        self.assertEqual((b["sharding"], b["exchange"]), ("mask-aware", "ring"))
        rows, summary = cp_table.picks_table(d)
        self.assertEqual(len(rows), 3)
        self.assertIn("best is the measured fastest in 1 of 1 cases", summary)
        d["plans"][f"causal_document:{M}:4"]["best"] = dict(sharding="contiguous", exchange="allgather")
        b, f = cp_table.best_pick(d, "causal_document", M, 4)
        self.assertAlmostEqual(cp_table.ms(b) / cp_table.ms(f), 5400 / 4200)
        self.assertIn(f"at most {5400 / 4200:.3f}x", cp_table.picks_table(d)[1])
        # on 2 GPUs the plan's mask-aware allgather never ran: no verdict
        self.assertIsNone(cp_table.best_pick(d, "causal_document", M, 2))

    def test_clocks_in_the_header(self):
        d = dict(self.doc, commands=["a", "b"], clocks=[
            dict(command=0, sm=dict(median_mhz=1710.0, p10_mhz=1605.0, p90_mhz=1980.0, samples=251)),
            dict(command=1, sm=None)])
        md = cp_table.render(d)
        self.assertIn("command 1: median 1710 MHz (10th-90th percentile 1605-1980, 251 samples); "
                      "command 2: none sampled.", md)
        self.assertNotIn("SM clock", cp_table.render(self.doc))  # a file without samples says nothing

    def test_bars_only_for_the_gpus_measured(self):
        """A 2-GPU table states the 2-GPU bars and none of the 4-GPU ones."""
        d = dict(self.doc, records=[r for r in self.doc["records"] if r["ranks"] <= 2])
        items = [item for item, _, _ in cp_table.bars(d)]
        self.assertFalse([i for i in items if "4 GPUs" in i])
        self.assertIn("full, 1M tokens, 2 GPUs: scaling efficiency (fwd+bwd) at least 90%", items)
        self.assertTrue([i for i in self.bars if "4 GPUs" in i])  # the full table keeps them

    def test_check_files_count(self):
        # the records' 3 checks (2 passed) and 2 runs of a check file, both passed: 4 of 5
        d = cp_table.with_checks(self.doc, [dict(passed=True, family="x"), dict(passed=True)])
        bars = {item: (n, v) for item, n, v in cp_table.bars(d)}
        (key,) = [k for k in bars if k.startswith("outputs and gradients")]
        self.assertEqual(bars[key], ("4 of 5 checked runs passed", "not met"))
        self.assertIs(cp_table.with_checks(self.doc, []), self.doc)

    def test_render(self):
        md = cp_table.render(self.doc)
        self.assertIn("NVIDIA H100 80GB HBM3 x 4", md)
        self.assertIn("abc1234", md)
        self.assertIn("`python3 bench/cp_bench.py --out x`", md)
        row = next(x for x in md.splitlines() if x.startswith("| causal_document | 4 | both |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        # 1 GPU, then contiguous ag/ring, zigzag ag/ring, mask-aware ag/ring, best eff, ratio, compute
        self.assertEqual(cells[3], "16000.0")
        self.assertEqual(cells[4], f"5400.0 ({100 * 16000 / (4 * 5400):.1f}%)")
        self.assertEqual(cells[6:8], ["", "oom"])
        self.assertEqual(cells[9], f"4200.0 ({100 * 16000 / 16800:.1f}%)")
        self.assertEqual(cells[11], f"{4200 / 5400:.3f}")
        self.assertEqual(cells[12], f"{3900 / 3990:.3f}-{4640 / 4000:.3f}")


class RunSets(unittest.TestCase):
    """Two files, two run sets: a second length measured on another day joins the first's table."""

    def second(self):
        K = 131072
        recs = [fm("causal_document", 1, "-", "-", "both", 100.0, [110.0]),     # 110 / 100 = 1.10
                fm("causal_document", 4, "mask-aware", "allgather", "both", 40.0, [15.0, 15.0, 15.0, 15.0]),
                fm("causal_document", 4, "mask-aware", "ring", "both", 50.0, [45.0, 45.0, 45.0, 48.0])]
        for r in recs:
            r["seqlen"] = K
            r["id"] = r["id"].replace(f":{M}:", f":{K}:")
        plans = {f"causal_document:{K}:4": plan(25, 100, {"mask-aware": ("ring", 30, [5] * 4, [30, 30, 30, 30])}),
                 f"causal_document:{K}:1": plan(25, 100, {})}
        return dict(synthetic(), commit="def5678", date="2026-11-27", commands=["python3 bench/cp_bench.py --out y"],
                    torch="", plans=plans, records=recs)

    def test_combined(self):
        second = dict(self.second(), plans_by=dict(commit="0123abc", command="bench/cp_bench.py --replan --out y"))
        doc = cp_table.combine([synthetic(), second], ["a.json", "b.json"])
        md = cp_table.render(doc)
        self.assertIn("(this table: `python3 bench/cp_table.py a.json b.json`)", md)
        self.assertIn("1. S = 1048576: commit abc1234, date not recorded; `python3 bench/cp_bench.py --out x`.", md)
        self.assertIn("2. S = 131072: commit def5678, 2026-11-27; `python3 bench/cp_bench.py --out y`.", md)
        # each run set says whose predictions its plans are: the second was planned again
        self.assertIn("     Predictions: `fmsim cp-plan` on the h200-sm90 profile, burst clock.\n  2.", md)
        self.assertIn("     Predictions: `fmsim cp-plan` on the h200-sm90 profile, burst clock (plans computed again "
                      "after the run, fmsim 0123abc: `bench/cp_bench.py --replan --out y`).", md)
        self.assertIn("predictions: each run set's, above.", md)
        self.assertIn("torch 2.11.0 (the peer)", md)  # the first file's peer, not the second's ""
        self.assertLess(md.index("## S = 131072"), md.index("## S = 1048576"))
        # the efficiency per length at P = 4: 100 / (4 x 40) = 62.5% (allgather, the faster);
        # 16000 / (4 x 4200) = 95.2% at 1M (mask-aware ring)
        row = next(x for x in md.splitlines() if x.startswith("| causal_document | 62.5%"))
        self.assertEqual(row, "| causal_document | 62.5% (mask-aware, allgather) | 95.2% (mask-aware, ring) |")
        self.assertIn("| full | - | - |", md)  # full has P = 2 alone
        bars = {item: (n, v) for item, n, v in cp_table.bars(doc)}
        # compute / plan at 131072: all-gather 15/15 (x 4; the plan's all-gather compute, half the
        # ring's), ring 45/30 = 1.5 (x 3), 48/30 = 1.6, the one GPU 110/100:
        # 5 of 9 within, the worst rank 3 of the ring
        self.assertEqual(bars["cp-plan predicts each rank's measured compute time within 15% (S = 131072)"],
                         ("worst 1.600 (`fmsim:causal_document:131072:4:mask-aware:ring:both`, rank 3); "
                          "5 of 9 ranks within 15%", "not met"))
        self.assertEqual(bars["cp-plan predicts each rank's measured compute time within 15% (S = 1048576)"][1],
                         "not met")  # the first file's alone, as in Table
        # the 1M bars still read the first file's records alone
        self.assertEqual(bars["causal_document, 1M tokens, 4 GPUs: mask-aware step (fwd+bwd) at most 0.6x "
                              "contiguous's"], (f"{4200 / 5400:.3f}x", "not met"))

    def test_one_file_keeps_its_header(self):
        md = cp_table.render(cp_table.combine([self.second()]))
        self.assertIn("- **Commit**: def5678.", md)
        self.assertIn("- **Date**: 2026-11-27.", md)
        self.assertNotIn("Run sets", md)
        self.assertNotIn("per family and length", md)  # one length: no summary

    def test_refusals(self):
        one = synthetic()
        with self.assertRaises(SystemExit):  # a case twice in one file
            cp_table.combine([dict(one, records=one["records"] + one["records"][-1:]), self.second()])
        with self.assertRaises(SystemExit):  # another shape
            cp_table.combine([synthetic(), dict(self.second(), heads=4)])

    def test_a_later_run_supersedes(self):
        """A re-run of cases (a newer kernel): its records are the cases'; every ratio takes
        both times from one run."""
        cd = "causal_document"
        rerun = dict(synthetic(), commit="fed9876", records=[
            fm(cd, 4, "mask-aware", "ring", "both", 4000.0),   # faster than the first run's 4200
            fm("full", 2, "contiguous", "ring", "both", 60000.0),
            tc("full", 2, "cudnn", "allgather", 66000.0)])
        doc = cp_table.combine([synthetic(), rerun])
        (cur,) = cp_table.find(doc, "fmsim", cd, M, 4, "both", sharding="mask-aware", exchange="ring")
        self.assertEqual(cp_table.ms(cur), 4000.0)
        self.assertEqual(len(doc["superseded"]), 3)
        bars = {item: (n, v) for item, n, v in cp_table.bars(doc)}
        # efficiency: T1 = 16000 is the first run's, so TP its fastest, 4200 (not the re-run's 4000):
        # 16000 / (4 x 4200) = 95.2%
        self.assertEqual(bars["causal_document, 1M tokens, 4 GPUs: scaling efficiency (fwd+bwd) at least 85%"][0],
                         "95.2% (mask-aware, ring)")
        # mask-aware / contiguous from the first run, the only one with both: 4200 / 5400
        self.assertEqual(bars["causal_document, 1M tokens, 4 GPUs: mask-aware step (fwd+bwd) at most 0.6x "
                              "contiguous's"][0], f"{4200 / 5400:.3f}x")
        # fmsim / torch from the re-run, which has both: 60000 / 66000 = 0.909 (the first run's: 62000 / 70000)
        self.assertEqual(bars["full, 1M tokens, 2 GPUs: faster than PyTorch's context_parallel (fwd+bwd)"],
                         (f"fmsim/torch {60000 / 66000:.3f} (torch cudnn, allgather)", "met"))
        md = cp_table.render(doc)
        # the re-run's cell shows its time without an efficiency (its run has no one-GPU time)
        self.assertIn("| 4000.0 |", md)


class Bench(unittest.TestCase):
    def test_parse_cp_run(self):
        def rank(i, f, b):
            return dict(rank=i, measured=dict(fwd=dict(compute_ms=f, wall_ms=f + 1), bwd=dict(compute_ms=b)))
        doc = dict(format="fmsim-cp-run", step_ms=dict(fwd=4.0, bwd=6.0, total=10.0),
                   rank_results=[rank(0, 2.0, 5.0), rank(1, 3.0, 6.0)], check={"pass": True, "reference": "one-gpu"})
        r = cp_bench.parse_cp_run(doc, "both")
        self.assertEqual(r["rank_compute_ms"], [7.0, 9.0])
        self.assertEqual(r["rank_compute_fwd_ms"], [2.0, 3.0])  # the forward apart: where a miss lies
        self.assertEqual(cp_bench.parse_cp_run(doc, "fwd")["rank_compute_ms"], [2.0, 3.0])
        self.assertEqual(r["step_ms"], dict(sustained=10.0, burst=None))
        self.assertEqual(cp_bench.parse_cp_run(doc, "fwd")["step_ms"]["sustained"], 4.0)
        self.assertTrue(r["check"]["passed"])
        self.assertEqual(cp_bench.parse_cp_run({"error": "CUDA error: out of memory"}, "fwd")["status"], "oom")

    def test_fmsim_records_keeps_a_passing_run_s_warnings(self):
        """cp-run's stderr of a run that passed (the pass gate giving up, kernels/fm_cp_gpu.cu)
        stays in its record; a quiet run has none."""
        import json
        import tempfile
        doc = dict(format="fmsim-cp-run", step_ms=dict(fwd=4.0, bwd=6.0, total=10.0),
                   rank_results=[dict(rank=0, measured=dict(fwd=dict(compute_ms=2.0), bwd=dict(compute_ms=5.0)))])
        job = dict(id="fmsim:full:16384:2:contiguous:ring:both", tool="fmsim", family="full", seqlen=16384,
                   ranks=2, sharding="contiguous", exchange="ring", est_s=1.0, t_s=0.01, check=False)
        job["pass"] = "both"
        args = types.SimpleNamespace(heads=4, sustain_s=1.0, warmup_s=1.0, gpu=None)
        with tempfile.TemporaryDirectory() as d:
            for name, say in (("loud", "fmsim cp-run: rank 1: the pass gate gave up 2 times"), ("quiet", "")):
                fake = os.path.join(d, name)
                with open(fake, "w") as f:
                    f.write("#!/bin/sh\n" + (f"echo '{say}' >&2\n" if say else "") +
                            f"echo '{json.dumps(doc)}'\n")
                os.chmod(fake, 0o755)
                args.fmsim = fake
                rec = cp_bench.fmsim_records(args, job, 30)[0]
                self.assertEqual(rec["status"], "ok")
                self.assertEqual(rec["rank_compute_ms"], [7.0])
                if say:
                    self.assertEqual(rec["stderr"], [say])
                else:
                    self.assertNotIn("stderr", rec)

    def test_plan_summary(self):
        x = dict(fwd_ms=1.0, bwd_ms=2.0, step_ms=3.0, memory_bytes=5, fits=True)

        def rank(ag, ring):  # (compute_fwd_ms, compute_bwd_ms) per exchange, as fmsim cp-plan --json
            return dict(fwd_ms=9.0, compute_ms=99.0,  # the one launch's: not what either exchange measures
                        exchanges=dict(allgather=dict(compute_fwd_ms=ag[0], compute_bwd_ms=ag[1]),
                                       ring=dict(compute_fwd_ms=ring[0], compute_bwd_ms=ring[1])))
        doc = dict(profile=dict(name="h200-sm90"), one_gpu=dict(fwd_ms=4.0, bwd_ms=8.0, total_ms=12.0),
                   shardings=[dict(name="zigzag", exchange="ring", efficiency_exchange=0.8,
                                   exchanges=dict(allgather=x, ring=x),
                                   ranks=[rank((1.0, 2.0), (1.5, 2.5)), rank((0.5, 2.0), (0.75, 2.0))])])
        doc["best"] = dict(sharding="zigzag", exchange="ring", step_ms=3.0)
        self.assertEqual(cp_bench.plan_summary(doc)["best"], dict(sharding="zigzag", exchange="ring"))
        self.assertEqual(cp_bench.plan_choice(cp_bench.plan_summary(doc)), ("zigzag", "ring"))
        s = cp_bench.plan_summary(doc)["shardings"]["zigzag"]
        self.assertEqual(s["exchanges"]["ring"], dict(fwd_ms=1.0, bwd_ms=2.0, step_ms=3.0, fits=True,
                                                      rank_fwd_ms=[1.5, 0.75], rank_compute_ms=[4.0, 2.75]))
        self.assertEqual((s["exchanges"]["allgather"]["rank_fwd_ms"], s["exchanges"]["allgather"]["rank_compute_ms"]),
                         ([1.0, 0.5], [3.0, 2.5]))

    def test_clock_samples(self):
        """nvidia-smi's lines with units or without; [N/A] and junk skipped; the summary of the
        samples over 300 W by nearest rank (10 loaded samples: 1000..1900 MHz)."""
        text = "0, 1980 MHz, 450.25 W\n1, [N/A], 80 W\nnot a sample\n0, 345, 80.5\n" + \
               "\n".join(f"2, {1000 + 100 * k}, 500" for k in range(10))
        got = cp_bench.clock_samples(text)
        self.assertEqual(got[0], (1980.0, 450.25))
        self.assertEqual(got[1], (345.0, 80.5))
        self.assertEqual(len(got), 12)
        s = cp_bench.clock_summary(got)
        self.assertEqual((s["samples"], s["median_mhz"], s["p10_mhz"], s["p90_mhz"], s["min_mhz"], s["max_mhz"]),
                         (11, 1500.0, 1100.0, 1900.0, 1000.0, 1980.0))
        self.assertIsNone(cp_bench.clock_summary([(345.0, 80.5)]))  # idle only: nothing to say

    def test_a_stopped_bench_ends_its_command(self):
        """cp_bench stopped by TERM (a timeout around it) while a command runs: the command's
        session is killed, not left holding the GPUs."""
        import signal
        import subprocess
        import tempfile
        import time
        with tempfile.TemporaryDirectory() as tmp:
            pidfile = os.path.join(tmp, "pid")
            code = ("import signal, sys; sys.path.insert(0, sys.argv[1]); import cp_bench; "
                    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143)); "
                    "cp_bench.run(['sh', '-c', 'echo $$ > ' + sys.argv[2] + '; exec sleep 30'], 60)")
            bench = subprocess.Popen([sys.executable, "-c", code, os.path.dirname(cp_bench.__file__), pidfile])
            for _ in range(100):
                if os.path.exists(pidfile) and open(pidfile).read().strip():
                    break
                time.sleep(0.05)
            child = int(open(pidfile).read())
            bench.send_signal(signal.SIGTERM)
            self.assertEqual(bench.wait(timeout=10), 143)
            for _ in range(100):  # the child's exit is reaped by init; give it a moment
                try:
                    os.kill(child, 0)
                except ProcessLookupError:
                    break
                if open(f"/proc/{child}/stat").read().split()[2] == "Z":
                    break
                time.sleep(0.05)
            else:
                os.kill(child, signal.SIGKILL)
                self.fail("the command outlived the bench")

    def test_clocks_keep_every_sample(self):
        """Clocks reads nvidia-smi through a file: 20000 samples (600 KB, far more than a pipe
        holds before the writer blocks) all arrive, and a missing nvidia-smi gives none."""
        import stat
        import tempfile
        import time
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "nvidia-smi")
            with open(fake, "w") as f:
                f.write('#!/bin/sh\ni=0\nwhile [ $i -lt 20000 ]; do echo "0, 1980, 450.5"; i=$((i+1)); done\n'
                        "exec sleep 30\n")
            os.chmod(fake, stat.S_IRWXU)
            path = os.environ["PATH"]
            try:
                os.environ["PATH"] = tmp + os.pathsep + path
                c = cp_bench.Clocks()
                for _ in range(200):  # until the fake has written everything and sleeps
                    if c.out.tell() >= 20000 * len("0, 1980, 450.5\n"):
                        break
                    time.sleep(0.05)
                got = c.stop()
                os.environ["PATH"] = tmp  # no nvidia-smi but the one removed below
                os.unlink(fake)
                none = cp_bench.Clocks().stop()
            finally:
                os.environ["PATH"] = path
        self.assertEqual(len(got), 20000)
        self.assertEqual(cp_bench.clock_summary(got)["median_mhz"], 1980.0)
        self.assertEqual(none, [])

    def test_order_of_cases(self):
        """Checks first, then the bars at 1M; the rest last."""
        args = types.SimpleNamespace(families=("causal_document", "sliding_window"), seqlens=[131072, M],
                                     ranks=[1, 4], shardings=["contiguous", "mask-aware"], exchanges=["ring"],
                                     passes=["fwd", "both"], check_seqlens={131072}, peer_impls="",
                                     warmup_s=1.0, sustain_s=1.0)
        p = plan(4000, 16000, {"contiguous": ("ring", 5200, [1] * 4, [1] * 4),
                               "mask-aware": ("ring", 4010, [1] * 4, [1] * 4)})
        plans = {f"{f}:{S}:{P}": p for f in args.families for S in args.seqlens for P in args.ranks}
        js = cp_bench.jobs(args, plans)
        tiers = [j["tier"] for j in js]
        self.assertEqual(tiers, sorted(tiers))
        first = {j["id"] for j in js if j["tier"] == 0}
        self.assertEqual(first, {f"fmsim:{f}:131072:4:mask-aware:ring:both" for f in args.families})
        self.assertEqual({j["id"] for j in js if j["tier"] == 1}, {
            f"fmsim:causal_document:{M}:1:-:-:both", f"fmsim:causal_document:{M}:4:mask-aware:ring:both",
            f"fmsim:causal_document:{M}:4:contiguous:ring:both"})
        self.assertTrue(all(j["check"] == (j["seqlen"] == 131072 and j["ranks"] > 1) for j in js))


class Collect(unittest.TestCase):
    def test_run_records(self):
        """A cp-run file with --baseline gives P's records and the one-GPU ones, per pass."""
        import json
        import tempfile

        def rank(i, f, b):
            return dict(rank=i, measured=dict(fwd=dict(compute_ms=f), bwd=dict(compute_ms=b)))
        run = dict(format="fmsim-cp-run", mask=dict(family="causal"), seqlen=M, ranks=2, heads=4, head_dim=128,
                   sharding="mask-aware", exchange="ring", passes="both", step_ms=dict(fwd=5.0, bwd=15.0, total=20.0),
                   rank_results=[rank(0, 4.0, 14.0), rank(1, 4.5, 14.5)], check=None,
                   baseline=dict(fwd_ms=9.0, bwd_ms=27.0, total_ms=36.0, efficiency=0.9))
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(run, f)
        doc = dict(heads=0, head_dim=128)
        try:
            recs = {(r["ranks"], r["pass"]): r for r in cp_collect.run_records(f.name, doc)}
        finally:
            os.unlink(f.name)
        self.assertEqual(sorted(recs), [(1, "both"), (1, "fwd"), (2, "both"), (2, "fwd")])
        self.assertEqual(recs[(2, "both")]["step_ms"]["sustained"], 20.0)
        self.assertEqual(recs[(2, "fwd")]["rank_compute_ms"], [4.0, 4.5])
        self.assertEqual(recs[(2, "both")]["rank_compute_ms"], [18.0, 19.0])
        self.assertEqual((recs[(1, "fwd")]["step_ms"]["sustained"], recs[(1, "both")]["step_ms"]["sustained"]),
                         (9.0, 36.0))
        # the table's efficiency from these records: 36 / (2 x 20) = 0.9, cp-run's own figure
        t = dict(records=list(recs.values()), plans={})
        self.assertAlmostEqual(cp_table.efficiency(cp_table.ms(cp_table.one_gpu(t, "causal", M, "both")),
                                                   cp_table.ms(recs[(2, "both")]), 2), 0.9)
        self.assertEqual(doc["heads"], 4)


class Peer(unittest.TestCase):
    def test_step_is_the_slowest_rank_per_launch(self):
        a = dict(samples=[1.0, 5.0, 2.0, 9.0], median_ms=3.5, clock_mhz=1700.0, power_w=600.0, window_s=1.0)
        b = dict(samples=[3.0, 1.0, 4.0, 1.0], median_ms=2.0, clock_mhz=1650.0, power_w=650.0, window_s=1.2)
        f = cp_torch_peer.combine([a, b])
        # per launch: max(1, 3), max(5, 1), max(2, 4), max(9, 1) = 3, 5, 4, 9: median 4.5
        self.assertEqual((f["median_ms"], f["min_ms"], f["max_ms"], f["launches"]), (4.5, 3.0, 9.0, 4))
        self.assertEqual(f["window_s"], 1.2)
        self.assertEqual([r["clock_mhz"] for r in f["ranks"]], [1700.0, 1650.0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
