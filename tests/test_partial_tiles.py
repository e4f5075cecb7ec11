#!/usr/bin/env python3
"""bench/partial_tiles.py on synthetic instrumented traces, no GPU (ctest: bench_partial_tiles,
label python): the classes and columns of real masks from the CPU simulation (`fmsim run
--cpu`), the cycles made up here by class and position (COST: unmasked first 2000, middle
1000, last 1500, only 2500; partial each 100 more), the positions computed by plain loops,
independently of the script's vectorized ones. Asserted: the position groups' counts and
cycles, the cut kinds on hand-checked tiles (causal: every partial tile is diagonal;
document with docs 300,724: the row tile holding row 300 is cut by edges, key tile 2 only
between its columns, "other"; causal_document: the one tile with both), the same cut kinds
as a per-element reference on every family, the equal-position and position-weighted
ratios, the partial share, the before/after table, and the bad-input lines. Every number is
worked out by hand in the comments. Exits 77 (skipped) without numpy.

    python3 tests/test_partial_tiles.py FMSIM_BIN
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed")
    sys.exit(77)

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
SCRIPT = os.path.join(BENCH, "partial_tiles.py")
sys.path.insert(0, BENCH)
import partial_tiles as pt  # noqa: E402

FMSIM = None
ONLY, FIRST, MIDDLE, LAST = range(4)
COST = {(2, ONLY): 2500, (2, FIRST): 2000, (2, MIDDLE): 1000, (2, LAST): 1500,
        (1, ONLY): 2600, (1, FIRST): 2100, (1, MIDDLE): 1100, (1, LAST): 1600}


def loop_positions(cls, axis):
    """Position of every visited tile along rows (axis 3, fwd) or columns (axis 2, bwd), by loops."""
    pos = np.full(cls.shape, -1, np.int64)
    B, H, Tr, Tc = cls.shape
    outer, inner = (Tr, Tc) if axis == 3 else (Tc, Tr)
    for b in range(B):
        for h in range(H):
            for o in range(outer):
                at = [(o, i) if axis == 3 else (i, o) for i in range(inner)]
                seen = [x for x in at if cls[(b, h) + x] != 0]
                for k, x in enumerate(seen):
                    pos[(b, h) + x] = ONLY if len(seen) == 1 else FIRST if k == 0 else \
                        LAST if k == len(seen) - 1 else MIDDLE
    return pos


def drop_method(d):
    """summary.json without kernel.mask_method (a trace written before fmsim recorded it)."""
    p = os.path.join(d, "summary.json")
    s = json.load(open(p))
    s["kernel"].pop("mask_method", None)
    json.dump(s, open(p, "w"))


def add_cycles(d, cost=COST, method=None):
    """Cycles by (class, position) into d's trace, summary.json marked as an instrumented run."""
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    for sec, sfx, axis in ((s, "", 3), (s.get("backward"), "_bwd", 2)):
        if not sec:
            continue
        cls = np.load(os.path.join(d, f"tiles{sfx}.npy"))
        pos = loop_positions(cls, axis)
        cyc = np.zeros(cls.shape, np.int64)
        for (c, p), v in cost.items():
            cyc[(cls == c) & (pos == p)] = v
        np.save(os.path.join(d, f"tile_cycles{sfx}.npy"), cyc)
        sec["tiles_record"].update(cycles=True, source="kernel", clock_khz=1755000)
    if method:
        s["kernel"]["mask_method"] = method
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(s, f)


def make_trace(d, family, S=1024, B=1, H=1, params=(), pass_="both", method="auto"):
    cmd = [FMSIM, "run", "--family", family, "--seqlen", str(S), "--batch", str(B), "--heads", str(H),
           "--kernel", "sm90", "--cpu", "--pass", pass_, "--mask-method", method, "--out", d]
    for p in params:
        cmd += ["--param", p]
    subprocess.run(cmd, check=True, capture_output=True)
    return d


def tool(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def reference_cuts(cls, columns, g):
    """Cut kind per visited partial tile (np.nonzero order), element by element: a row b in
    (r0, r1) where a column's masked status changes; at b == c_j of a causal mask the
    diagonal, anywhere else an edge."""
    out = []
    nb, nh = columns.shape[:2]
    for b, h, rt, ct in zip(*np.nonzero(cls == 1)):
        v = columns[b if nb > 1 else 0, h if nh > 1 else 0]
        r0, r1 = rt * g["br"], min((rt + 1) * g["br"], g["sq"])
        j = np.arange(ct * g["bc"], min((ct + 1) * g["bc"], g["sk"]))
        i = np.arange(r0, r1)[:, None]
        lts, lte, uts, ute = (v[j, k][None, :] for k in range(4))
        c = np.clip(j + g["sq"] - g["sk"], 0, g["sq"])[None, :]
        m = ((lts <= i) & (i < lte)) | ((uts <= i) & (i < ute)) | (g["causal"] & (i < c))
        change = m[1:] != m[:-1]
        diag = change & g["causal"] & (i[1:] == c)
        d, e = bool(diag.any()), bool((change & ~diag).any())
        out.append(2 if d and e else 0 if d else 1 if e else 3)
    return np.array(out, np.int8)


def random_columns(rng, g):
    """(1, H, Sk, 4) valid random intervals (fm_colmask_validate: start <= end; a causal upper
    interval starts at or above the triangle, UTS <= c_j), its bounds often on multiples of 64."""
    sq, sk = g["sq"], g["sk"]
    c = np.clip(np.arange(sk) + sq - sk, 0, sq) if g["causal"] else np.full(sk, sq)

    def pick(lo, hi):
        x = rng.integers(lo, hi + 1)
        snap = np.minimum(np.maximum((x // 64) * 64, lo), hi)
        return np.where(rng.random(sk) < 0.3, snap, x)

    out = np.zeros((1, g["H"], sk, 4), np.int32)
    for h in range(g["H"]):
        lts = pick(0, np.full(sk, sq))
        lte = pick(lts, np.full(sk, sq))
        uts = pick(0, c)
        ute = pick(uts, np.full(sk, sq))
        share = 0.99 if h else 0.3  # empty intervals; head 1: mostly the triangle alone
        empty = rng.random(sk) < share
        uts, ute = np.where(empty, 0, uts), np.where(empty, 0, ute)
        empty = rng.random(sk) < share
        lts, lte = np.where(empty, sq, lts), np.where(empty, sq, lte)
        out[0, h] = np.stack([lts, lte, uts, ute], -1)
    return out


class PartialTiles(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def analyze(self, *dirs, labels=()):
        out = self.path("out.json")
        r = tool(*dirs, *sum((["--label", l] for l in labels), []), "--json", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        with open(out) as f:
            return json.load(f), r.stdout

    def test_causal_positions_diagonal_ratios_share(self):
        d = make_trace(self.path("causal"), "causal", B=2, H=3)
        add_cycles(d)
        doc, text = self.analyze(d)
        fwd = doc["folders"][0]["passes"]["fwd"]
        g = fwd["groups"]
        # forward, 8 x 8 tiles: row rt visits key tiles 0..rt, the diagonal one partial and last;
        # row 0's one tile is partial "only". Per pair: partial only 1, last 7; unmasked first 7,
        # middle 1 + 2 + ... + 6 = 21; six pairs
        counts = {c: [g[c][p]["count"] for p in ("only", "first", "middle", "last")] for c in g}
        self.assertEqual(counts, {"partial": [6, 0, 0, 42], "unmasked": [0, 42, 126, 0]})
        self.assertEqual(g["partial"]["last"]["mean"], 1600.0)
        self.assertEqual(g["unmasked"]["middle"]["median"], 1000.0)
        # no position holds both classes: no equal-position ratio; naive (2600 + 7 * 1600) / 8 = 1725
        # over (7 * 2000 + 21 * 1000) / 28 = 1250
        r = fwd["ratios"]
        self.assertTrue(all(r["equal_position"][p]["mean"] is None for p in pt.POSITIONS))
        self.assertAlmostEqual(r["naive"]["mean"], 1725 / 1250)
        self.assertIsNone(r["position_weighted"]["ratio"])
        self.assertEqual(r["position_weighted"]["covered"], 0.0)
        # share: 13800 / (13800 + 35000)
        self.assertAlmostEqual(fwd["partial_share"], 13800 / 48800)
        self.assertEqual([fwd["cuts"][k]["all"]["count"] for k in pt.CUTS], [48, 0, 0, 0])
        # backward, 16 x 8 tiles of 64 x 128: key tile ct visits query tiles 2ct..15, 2ct and
        # 2ct + 1 partial (the diagonal crosses both); ct = 7 visits only its two partial ones.
        # Per pair: partial first 8, middle 7, last 1; unmasked middle 13 + 11 + ... + 1 = 49, last 7
        bwd = doc["folders"][0]["passes"]["bwd"]
        gb = bwd["groups"]
        counts = {c: [gb[c][p]["count"] for p in ("only", "first", "middle", "last")] for c in gb}
        self.assertEqual(counts, {"partial": [0, 48, 42, 6], "unmasked": [0, 0, 294, 42]})
        e = bwd["ratios"]["equal_position"]
        self.assertIsNone(e["first"]["mean"])
        self.assertAlmostEqual(e["middle"]["mean"], 1.1)
        self.assertAlmostEqual(e["last"]["median"], 1600 / 1500)
        # position-weighted: (7 * 1100 + 1600) / (7 * 1000 + 1500), over 8 of the 16 partial tiles
        w = bwd["ratios"]["position_weighted"]
        self.assertAlmostEqual(w["ratio"], 9300 / 8500)
        self.assertAlmostEqual(w["covered"], 0.5)
        # share: (8 * 2100 + 7 * 1100 + 1600) / (26100 + 49 * 1000 + 7 * 1500)
        self.assertAlmostEqual(bwd["partial_share"], 26100 / 85600)
        self.assertEqual([bwd["cuts"][k]["all"]["count"] for k in pt.CUTS], [96, 0, 0, 0])
        self.assertIn("| partial | last | 42 | 1600.0 | 1600.0 |", text)
        self.assertIn("| middle | 1100.0 | 1000.0 | 1.100 | 1.100 |", text)
        self.assertIn("Partial tiles' share of the pass's cycles: 28.28%", text)

    def test_document_edges_and_other(self):
        d = make_trace(self.path("document"), "document", params=["docs=300,724"])
        add_cycles(d)
        doc, text = self.analyze(d)
        fwd = doc["folders"][0]["passes"]["fwd"]
        # row tile 2 (rows 256..383) holds row 300: all 8 of its tiles partial, cut by LTS = 300
        # (columns < 300) or UTE = 300 (the others): edges, first 1, middle 6, last 1. Key tile 2
        # (columns 256..383) in the other rows: columns < 300 and >= 300 differ as wholes: other,
        # last in rows 0, 1 and first in rows 3..7
        c = fwd["cuts"]
        self.assertEqual([c["edges"][p]["count"] for p in ("only", "first", "middle", "last")], [0, 1, 6, 1])
        self.assertEqual([c["other"][p]["count"] for p in ("only", "first", "middle", "last")], [0, 5, 0, 2])
        self.assertEqual(c["diagonal"]["all"]["count"] + c["both"]["all"]["count"], 0)
        # unmasked: rows 0, 1 first (key tile 0) and middle (1); rows 3..7 middle (3..6), last (7)
        u = fwd["groups"]["unmasked"]
        self.assertEqual([u[p]["count"] for p in ("only", "first", "middle", "last")], [0, 2, 22, 5])
        e = fwd["ratios"]["equal_position"]
        self.assertAlmostEqual(e["first"]["mean"], 1.05)
        self.assertAlmostEqual(e["middle"]["mean"], 1.1)
        self.assertAlmostEqual(e["last"]["mean"], 1600 / 1500)
        # naive: (6 * 2100 + 6 * 1100 + 3 * 1600) / 15 = 1600 over 33500 / 29
        self.assertAlmostEqual(fwd["ratios"]["naive"]["mean"], 1600 / (33500 / 29))
        self.assertAlmostEqual(fwd["ratios"]["position_weighted"]["ratio"], 24000 / 22500)
        self.assertAlmostEqual(fwd["partial_share"], 24000 / 57500)
        # edges against unmasked at their positions: (2100 + 6 * 1100 + 1600) / (2000 + 6000 + 1500)
        self.assertAlmostEqual(c["edges"]["vs_unmasked"]["ratio"], 10300 / 9500)
        self.assertIn("| edges | 8 | 1287.5 | 1100.0 | - | 2100.0 | 1100.0 | 1600.0 | 1.084 |", text)
        # backward: query tile 4 (rows 256..319) holds row 300, cut by edges in all 8 key tiles
        cb = doc["folders"][0]["passes"]["bwd"]["cuts"]
        self.assertEqual([cb[k]["all"]["count"] for k in pt.CUTS], [0, 8, 0, 15])

    def test_causal_document_both(self):
        d = make_trace(self.path("cd"), "causal_document", params=["docs=300,724"], pass_="fwd")
        add_cycles(d)
        doc, _ = self.analyze(d)
        c = doc["folders"][0]["passes"]["fwd"]["cuts"]
        # tile (2, 2): the diagonal and row 300 (the first document's LTS) both cross it; the other
        # diagonal tiles are diagonal; row tile 2's tiles left of it edges; key tile 2 below, other
        self.assertEqual([c[k]["all"]["count"] for k in pt.CUTS], [7, 2, 1, 5])
        self.assertNotIn("bwd", doc["folders"][0]["passes"])

    def test_cut_kinds_match_elementwise_reference(self):
        fams = [("causal", ()), ("sliding_window", ()), ("causal_document", ()), ("document", ()),
                ("share_question", ()), ("global_sliding_window", ()), ("causal_blockwise", ()),
                ("prefix_lm_document", ()), ("prefix_lm_causal", ()), ("qk_sparse", ()),
                ("random_eviction", ()), ("document", ("docs=320,448",))]
        seen = set()
        for k, (fam, params) in enumerate(fams):
            d = make_trace(self.path(f"f{k}"), fam, S=768, H=2, params=params)
            add_cycles(d)
            f = pt.read_folder(d, None)
            for p in f["passes"]:
                p["visited"] = p["cls"] != 0
                got = pt.cut_kinds(p, f["columns"])
                want = reference_cuts(np.asarray(p["cls"]), f["columns"], p["geom"])
                self.assertTrue(np.array_equal(got, want), f"{fam} {params} {p['name']}: {got} vs {want}")
                seen.update(want.tolist())
        self.assertEqual(seen, {0, 1, 2, 3}, "every cut kind occurs")

    def test_cut_kinds_random_masks(self):
        # every tile of random interval masks, causal or not, Sq != Sk (the triangle aligned
        # bottom-right), causal upper intervals past the diagonal, bounds on tile boundaries
        rng = np.random.default_rng(25)
        seen = {False: set(), True: set()}
        for causal in (False, True):
            for sq, sk in ((200, 300), (320, 256), (256, 256)):
                g = dict(B=1, H=2, sq=sq, sk=sk, causal=causal, br=64, bc=128)
                g["tr"], g["tc"] = -(-sq // 64), -(-sk // 128)
                cols = random_columns(rng, g)
                p = dict(name="fwd", geom=g, cls=np.ones((1, 2, g["tr"], g["tc"]), np.uint8))
                p["visited"] = p["cls"] != 0
                got = pt.cut_kinds(p, cols)
                want = reference_cuts(p["cls"], cols, g)
                self.assertTrue(np.array_equal(got, want), f"causal {causal} {sq}x{sk}: {got} vs {want}")
                seen[causal].update(want.tolist())
        self.assertEqual(seen[False] & {0, 2}, set(), "no diagonal without a causal mask")
        self.assertLessEqual({0, 1, 2}, seen[True])

    def test_before_after(self):
        a = make_trace(self.path("slices"), "document", params=["docs=300,724"], pass_="fwd")
        b = make_trace(self.path("r2p"), "document", params=["docs=300,724"], pass_="fwd")
        add_cycles(a, method="slices")
        add_cycles(b, {k: v - 50 if k[0] == 1 else v for k, v in COST.items()}, method="r2p")
        doc, text = self.analyze(a, b)
        rows = {(r["cls"], r["position"]): r for r in doc["compare"]}
        self.assertEqual(rows[("partial", "first")]["mean"], {"slices": 2100.0, "r2p": 2050.0})
        self.assertAlmostEqual(rows[("partial", "first")]["ratio"]["r2p"], 2050 / 2100)
        self.assertAlmostEqual(rows[("unmasked", "middle")]["ratio"]["r2p"], 1.0)
        self.assertEqual(rows[("partial", "only")]["ratio"]["r2p"], None)
        self.assertIn("## Before / after: document S=1024, fwd (baseline slices)", text)
        self.assertIn("| partial | middle | 1100.0 | 1050.0 | 0.955 |", text)
        # the --label given wins; then kernel.mask_method; without either, the folder's name
        c = make_trace(self.path("third"), "document", params=["docs=300,724"], pass_="fwd")
        add_cycles(c)
        self.assertEqual(self.analyze(c)[0]["folders"][0]["label"], "auto")  # fmsim run records it
        w = make_trace(self.path("fourth"), "document", params=["docs=300,724"], pass_="fwd", method="words")
        add_cycles(w)
        self.assertEqual(self.analyze(w)[0]["folders"][0]["label"], "words")
        drop_method(c)
        doc, _ = self.analyze(c, a, labels=["before"])
        self.assertEqual([f["label"] for f in doc["folders"]], ["before", "slices"])
        self.assertEqual(doc["compare"][0]["baseline"], "before")
        self.assertEqual(self.analyze(c)[0]["folders"][0]["label"], "third")
        self.assertEqual([n for n in os.listdir(self.tmp.name) if ".tmp." in n], [])

    def assert_refused(self, args, words):
        out = self.path("refused.json")
        r = tool(*args, "--json", out)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_bad_inputs(self):
        d = make_trace(self.path("bad"), "causal", pass_="fwd")
        self.assert_refused([d], ["not instrumented"])
        add_cycles(d)
        os.remove(os.path.join(d, "tile_cycles.npy"))
        self.assert_refused([d], ["tile_cycles.npy is missing"])
        np.save(os.path.join(d, "tile_cycles.npy"), np.ones((1, 1, 8, 7), np.int64))
        self.assert_refused([d], ["(1, 1, 8, 7)", "(1, 1, 8, 8)"])
        np.save(os.path.join(d, "tile_cycles.npy"), np.zeros((1, 1, 8, 8), np.int64))
        self.assert_refused([d], ["36 visited fwd tiles have no cycles"])
        self.assert_refused([self.path("nowhere")], ["not a folder"])
        os.remove(os.path.join(d, "columns.npy"))
        self.assert_refused([d], ["columns.npy: missing"])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_partial_tiles.py FMSIM_BIN")
    FMSIM = sys.argv.pop(1)
    unittest.main()
