"""The cross-check (issue 20, Deliver 2): every path that reports tile counts,
rho or memory for a mask must say the same for the same mask.

For a corpus of masks (every family at odd lengths and tile sizes, per-head
and per-batch masks, both causal forms, masks no interval form holds, Sq != Sk)
it runs `analyze` (family, --intervals, dense), `check` (dense, --intervals),
`predict`, `render --json` (the side panel's and the caption's numbers), a
scenario's index.csv and index.json, and the Python package (`analyze`,
`check`, `to_string` headers, `from_paddle`), and asserts that they agree
exactly, that every rho lies in [0, 1] and that the counts add up to the
total. The exact classes are also recomputed here by brute force from the
dense numpy mask, so a path that agrees with the others but not with the mask
fails too.

Runs the fmsim binary (FMSIM_BIN, or the package's) and the installed package;
prints the number of comparisons made.
"""
import csv
import json
import os
import subprocess

import numpy as np
import pytest

import fmsim

ROOT = os.environ.get("FM_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ["full", "causal", "sliding_window", "causal_document", "document", "share_question",
            "global_sliding_window", "causal_blockwise", "prefix_lm_document", "prefix_lm_causal",
            "qk_sparse", "random_eviction"]
LENGTHS = [300, 257]
TILES = [(64, 48), (32, 80)]
PER_HEAD = ("random_eviction", 2, 3)  # family, B, H: one mask per (batch, head)


class Tally:
    """Counts comparisons; every failure names the mask and the two paths."""

    def __init__(self):
        self.n = 0

    def eq(self, what, a, b):
        self.n += 1
        assert a == b, f"{what}: {a!r} != {b!r}"

    def rho(self, what, a, b):
        """rho printed to 9 digits (JSON) or fewer (text) against the exact fraction."""
        self.n += 1
        assert 0.0 <= a <= 1.0, f"{what}: rho {a} outside [0, 1]"
        digits = 9 if isinstance(a, float) else 4
        assert abs(a - b) <= 0.5 * 10 ** -digits + 1e-12, f"{what}: rho {a!r} != {b!r}"

    def counts(self, what, masked, partial, unmasked, total, want):
        """(masked, partial, unmasked) against want (m, p, u), adding up to total."""
        self.n += 2
        assert masked + partial + unmasked == total, f"{what}: {masked}+{partial}+{unmasked} != {total}"
        assert (masked, partial, unmasked) == want, f"{what}: {(masked, partial, unmasked)} != {want}"


T = Tally()


def fmsim_bin():
    exe = os.environ.get("FMSIM_BIN") or fmsim.binary_path()
    if not exe:
        pytest.skip("no fmsim binary")
    return exe


def run(*args, rc=0):
    out = subprocess.run([fmsim_bin(), *map(str, args)], capture_output=True, text=True)
    assert out.returncode == rc, f"fmsim {' '.join(map(str, args))}: exit {out.returncode}: {out.stderr}"
    return out.stdout


def run_json(*args, rc=0):
    return json.loads(run(*args, rc=rc))


def has_render():
    return "figures: yes" in run("--version")  # `fmsim --version` lists what the build can do


# ------------------------------------------------------------- references

def dense_from_columns(cols, causal, sq):
    """'masked' bool [nb, nh, Sq, Sk] from LTS, LTE, UTS, UTE [nb, nh, Sk, 4]."""
    sk = cols.shape[2]
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    v = cols.transpose(0, 1, 3, 2)[:, :, :, None, :]  # [nb, nh, 4, 1, Sk]
    m = ((i >= v[:, :, 0]) & (i < v[:, :, 1])) | ((i >= v[:, :, 2]) & (i < v[:, :, 3]))
    if causal:
        m = m | (i < j + sq - sk)
    return m


def exact_classes(masked, br, bc):
    """Exact tile classes of 'masked' [..., Sq, Sk]: counts (masked, partial, unmasked) per set."""
    *lead, sq, sk = masked.shape
    tr, tc = -(-sq // br), -(-sk // bc)
    pad = np.zeros((*lead, tr * br, tc * bc), np.int32)
    cnt = np.zeros_like(pad)
    pad[..., :sq, :sk] = masked
    cnt[..., :sq, :sk] = 1
    s = pad.reshape(*lead, tr, br, tc, bc).sum(axis=(-3, -1))
    n = cnt.reshape(*lead, tr, br, tc, bc).sum(axis=(-3, -1))
    cls = np.where(s == n, 0, np.where(s == 0, 2, 1))
    return cls  # [..., Tr, Tc]


def tally_classes(cls):
    return tuple(int(np.count_nonzero(cls == c)) for c in (0, 1, 2))


# ------------------------------------------------------------- one mask, every path

def check_fitting(tmp, name, dense, iv, causal, br, bc, ref, family=None, fam_args=(), sq=None):
    """Every path on a mask that fits: ref is `analyze --json` of it (family or
    intervals); dense ('masked' [B, H, Sq, Sk]) and iv (Paddle intervals) are the
    same mask as files."""
    what = f"{name} at {br} x {bc}"
    flag = "--causal" if causal else "--bidir"
    sqa = ["--seqlen-q", sq] if sq else []
    rule = (ref["tiles_masked"], ref["tiles_partial"], ref["tiles_unmasked"])
    ex = ref["exact"]
    exact = (ex["masked"], ex["partial"], ex["unmasked"])
    total = ref["tiles_total"]
    T.counts(f"{what}: analyze (rule)", *rule, total, rule)
    T.rho(f"{what}: analyze rho", ref["sparsity"], rule[0] / total)
    T.rho(f"{what}: analyze exact rho", ex["sparsity"], exact[0] / total)
    # brute force: the exact classes of the dense mask
    cls = exact_classes(dense, br, bc)
    sets = ref["mask_sets"]
    scale = cls.shape[0] * cls.shape[1] // sets  # a dense file repeats shared sets
    brute = tally_classes(cls)
    T.eq(f"{what}: brute-force exact classes vs analyze", tuple(x * scale for x in exact), brute)
    dpath, ipath = tmp / f"{name}-dense.npy", tmp / f"{name}-iv.npy"
    np.save(dpath, ~dense)  # true = may attend
    np.save(ipath, iv)
    # analyze --intervals
    # (the min/max rule reads the vectors: the file's smallest form may hold a run
    # in the other interval than the family did, so its rule counts are the
    # file's own, never fewer masked tiles than exactly; exact classes are the mask's)
    a = run_json("analyze", "--intervals", ipath, flag, *sqa, "--br", br, "--bc", bc, "--json")
    rule_iv = (a["tiles_masked"], a["tiles_partial"], a["tiles_unmasked"])
    T.counts(f"{what}: analyze --intervals (rule)", *rule_iv, a["tiles_total"], rule_iv)
    T.eq(f"{what}: analyze --intervals total", a["tiles_total"], total)
    T.eq(f"{what}: the rule skips no more than exactly", rule_iv[0] <= exact[0] and rule[0] <= exact[0], True)
    T.rho(f"{what}: analyze --intervals rho", a["sparsity"], rule_iv[0] / total)
    T.rho(f"{what}: analyze --intervals exact rho", a["exact"]["sparsity"], ex["sparsity"])
    T.eq(f"{what}: analyze --intervals exact counts",
         (a["exact"]["masked"], a["exact"]["partial"], a["exact"]["unmasked"]), exact)
    T.eq(f"{what}: analyze --intervals dense and block-mask bytes",
         (a["bytes"]["dense"], a["bytes"]["block_mask"]), (ref["bytes"]["dense"], ref["bytes"]["block_mask"]))
    if ref.get("form") == a.get("form"):
        T.eq(f"{what}: analyze --intervals bytes", a["bytes"], ref["bytes"])
    # check --intervals (defect 1: every count doubled)
    c = run_json("check", "--intervals", ipath, flag, *sqa, "--br", br, "--bc", bc, "--json")
    t = c["tiles"]
    T.counts(f"{what}: check --intervals", t["masked"], t["partial"], t["unmasked"], t["total"], exact)
    T.rho(f"{what}: check --intervals rho", t["sparsity"], ex["sparsity"])
    # check and analyze of the dense file
    c = run_json("check", dpath, "--br", br, "--bc", bc, "--json")
    t = c["tiles"]
    T.counts(f"{what}: check dense", t["masked"], t["partial"], t["unmasked"], t["total"], brute)
    T.rho(f"{what}: check dense rho", t["sparsity"], ex["sparsity"])
    T.eq(f"{what}: check dense fits", c["representable"], True)
    d = run_json("analyze", dpath, "--br", br, "--bc", bc, "--json")
    T.eq(f"{what}: analyze dense (rule) as its intervals",
         (d["tiles_masked"], d["tiles_partial"], d["tiles_unmasked"]), rule_iv)
    T.rho(f"{what}: analyze dense rho", d["sparsity"], a["sparsity"])
    T.rho(f"{what}: analyze dense exact rho", d["exact"]["sparsity"], ex["sparsity"])
    t = d["exact"]
    T.counts(f"{what}: analyze dense exact", t["masked"], t["partial"], t["unmasked"], d["tiles_total"], exact)
    # predict: its what-if row at this tile counts the same tiles by the rule
    p = run_json("predict", "--mask", ipath, flag, *sqa, "--br", br, "--bc", bc, "--json")
    rows = [r for ps in p["passes"] if ps["pass"] == "fwd" for r in ps["tiles"]
            if r["br"] == br and r["bc"] == bc]
    T.eq(f"{what}: predict has the tile", len(rows) >= 1, True)
    r = rows[0]
    T.eq(f"{what}: predict tiles_total", r["tiles_total"] * sets // (p["batch"] * p["heads"]), total)
    T.eq(f"{what}: predict tiles_partial", r["tiles_partial"] * sets // (p["batch"] * p["heads"]), rule_iv[1])
    T.eq(f"{what}: predict tiles_visited", r["tiles_visited"] * sets // (p["batch"] * p["heads"]),
         rule_iv[1] + rule_iv[2])
    T.rho(f"{what}: predict rho", r["rho"], a["sparsity"])
    # render --json: the side panel's and the caption's numbers
    if HAVE_RENDER:
        srcs = [("interval file", [ipath, flag], rule_iv, a)] if not sq else []
        if family:
            srcs.append(("family", ["--family", family, *fam_args], rule, ref))
        for src, args, rule_src, ref_src in srcs:
            j = run_json("render", *args, "--br", br, "--bc", bc, "-o", tmp / "r.png", "--json")
            k = j["tiles"]
            T.counts(f"{what}: render {src} panel (rule)", k["masked"], k["partial"], k["unmasked"],
                     k["total"], rule_src)
            k = j["exact"]
            T.counts(f"{what}: render {src} panel (exact)", k["masked"], k["partial"], k["unmasked"],
                     k["total"], exact)
            T.rho(f"{what}: render {src} rho", j["tiles"]["sparsity"], ref_src["sparsity"])
            T.eq(f"{what}: render {src} caption rho", f"\u03c1 = {ref_src['sparsity']:.3f}" in j["caption"], True)
            if j["pairs"] > 1:
                T.eq(f"{what}: render {src} caption names the pairs",
                     f"over {j['pairs']} (batch, head) pairs" in j["caption"], True)
            T.eq(f"{what}: render {src} bytes", j["bytes"],
                 {k: ref_src["bytes"][k] for k in ("dense", "block_mask", "intervals")})
    # the Python package
    m = fmsim.from_paddle(np.load(ipath), causal, seqlen_q=sq)
    pa = m.analyze(br, bc)
    T.counts(f"{what}: python from_paddle analyze (rule)", pa.counts["masked"], pa.counts["partial"],
             pa.counts["unmasked"], pa.total, rule_iv)
    T.counts(f"{what}: python from_paddle analyze (exact)", pa.counts_exact["masked"],
             pa.counts_exact["partial"], pa.counts_exact["unmasked"], pa.total, exact)
    T.rho(f"{what}: python rho", pa.rho, a["sparsity"])
    T.eq(f"{what}: python memory", {k: pa.memory[k] for k in ("dense", "block_mask", "intervals")},
         {k: a["bytes"][k] for k in ("dense", "block_mask", "intervals")})
    pc = fmsim.check(str(dpath), tiles=(br, bc))
    T.eq(f"{what}: python check fits", pc.fits, True)
    T.counts(f"{what}: python check tiles", pc.tiles["masked"], pc.tiles["partial"],
             pc.tiles["unmasked"], pc.tiles["total"], brute)
    # to_string headers: each pair's own rho, and all pairs' with their number
    for b in range(m.batch):
        for h in range(m.heads):
            head = m.to_string(br, bc, batch=b, head=h, exact=True).splitlines()[0]
            own = tally_classes(cls[b if cls.shape[0] > 1 else 0, h if cls.shape[1] > 1 else 0])
            T.eq(f"{what}: to_string pair ({b}, {h})",
                 f"(batch {b}, head {h}): rho = {own[0] / sum(own):.4f}" in head, True)
            if m.batch * m.heads > 1:
                T.eq(f"{what}: to_string all pairs", f"all {m.batch * m.heads} (batch, head) pairs: "
                     f"rho = {ex['sparsity']:.4f}" in head, True)
    return a


def family_case(tmp, fam, s, br, bc, b=1, h=1):
    args = ["--seqlen", s, "--batch", b, "--heads", h]
    ref = run_json("analyze", "--family", fam, *args, "--br", br, "--bc", bc, "--out",
                   tmp / f"{fam}-{s}-{br}x{bc}", "--json")
    cols = np.load(tmp / f"{fam}-{s}-{br}x{bc}" / "columns.npy")
    dense = dense_from_columns(cols, ref["causal"], s)
    m = fmsim.check(~dense, tiles=None).mask  # the smallest form, as Paddle takes it
    iv, causal = m.to_paddle()
    check_fitting(tmp, f"{fam}-S{s}", dense, iv, causal, br, bc, ref, family=fam, fam_args=args)
    if causal and iv.shape[-1] == 1:  # both causal forms: causal-2 of the same mask
        iv2, _ = m.to_paddle("causal-2")
        check_fitting(tmp, f"{fam}-S{s}-causal2", dense, iv2, True, br, bc, ref)
    return ref


# ------------------------------------------------------------- the corpus

HAVE_RENDER = None


def test_every_path_agrees(tmp_path):
    global HAVE_RENDER
    HAVE_RENDER = has_render()
    refs = {}
    for fam in FAMILIES:
        for s in LENGTHS:
            for br, bc in TILES:
                b, h = (PER_HEAD[1], PER_HEAD[2]) if fam == PER_HEAD[0] else (1, 1)
                refs[(fam, s, br, bc)] = family_case(tmp_path, fam, s, br, bc, b, h)
    # a shared family over several heads (H_mask = 1, every pair the same)
    family_case(tmp_path, "causal_document", 300, 64, 48, 2, 2)
    # the scenario index: the same masks, the same numbers
    br, bc = TILES[0]
    fams = "".join(f"  - family: {f}\n" for f in FAMILIES if f != PER_HEAD[0])
    (tmp_path / "x.yaml").write_text(f"name: crosscheck\nseqlen: {LENGTHS}\nbr: {br}\nbc: {bc}\n"
                                     f"run: [analyze]\nmasks:\n{fams}")
    run("run", tmp_path / "x.yaml", "--out", tmp_path / "scn")
    index = json.loads((tmp_path / "scn" / "index.json").read_text())
    rows = list(csv.DictReader(open(tmp_path / "scn" / "index.csv")))
    T.eq("scenario: index.json and index.csv have every case", (len(index), len(rows)),
         (len(FAMILIES[:-1]) * len(LENGTHS),) * 2)
    for rec, row in zip(index, rows):
        ref = refs[(rec["family"], rec["seqlen"], br, bc)]
        what = f"scenario {rec['id']}"
        T.eq(f"{what}: csv id", row["id"], rec["id"])
        T.counts(f"{what}: index.json", rec["tiles_masked"], rec["tiles_partial"], rec["tiles_unmasked"],
                 rec["tiles_total"], (ref["tiles_masked"], ref["tiles_partial"], ref["tiles_unmasked"]))
        T.counts(f"{what}: index.csv", int(row["tiles_masked"]), int(row["tiles_partial"]),
                 int(row["tiles_unmasked"]), int(row["tiles_total"]),
                 (ref["tiles_masked"], ref["tiles_partial"], ref["tiles_unmasked"]))
        T.rho(f"{what}: index.json rho", rec["sparsity"], ref["sparsity"])
        T.rho(f"{what}: index.json exact rho", rec["sparsity_exact"], ref["exact"]["sparsity"])
        T.eq(f"{what}: index.csv rho", abs(float(row["sparsity"]) - ref["sparsity"]) <= 5e-7, True)
        T.eq(f"{what}: index.json bytes", rec["bytes"],
             {k: ref["bytes"][k] for k in ("dense", "block_mask", "intervals")})
        T.eq(f"{what}: index.csv bytes", int(row["bytes_intervals"]), ref["bytes"]["intervals"])
    print(f"cross-check: {T.n} comparisons")


def test_per_batch_and_unequal_lengths_agree(tmp_path):
    """A mask with one set per batch (two different masks) and Sq != Sk."""
    r1 = run_json("analyze", "--family", "causal_document", "--seqlen", 300, "--out", tmp_path / "a", "--json")
    run("analyze", "--family", "sliding_window", "--seqlen", 300, "--out", tmp_path / "b", "--json")
    cols = np.concatenate([np.load(tmp_path / "a" / "columns.npy"), np.load(tmp_path / "b" / "columns.npy")])
    dense = dense_from_columns(cols, True, 300)  # [2, 1, S, S]
    m = fmsim.check(~dense, tiles=None).mask
    iv, causal = m.to_paddle()
    assert r1["causal"] and causal and iv.shape[:2] == (2, 1)
    for br, bc in TILES:
        ref = run_json("analyze", "--intervals", _save(tmp_path / "pb.npy", iv), "--causal", "--br", br,
                       "--bc", bc, "--json")
        check_fitting(tmp_path, f"per-batch-{br}x{bc}", dense, iv, True, br, bc, ref)
    # Sq = 200 query rows against Sk = 300 keys, causal bottom-right aligned, and a bidirectional one
    i, j = np.arange(200)[:, None], np.arange(300)[None, :]
    for name, masked, causal in (("causal-Sq200", (i < j + 200 - 300) | ((j < 150) & (i >= 120)), True),
                                 ("doc-Sq200", (i // 70) != (j // 105), False)):
        dense = np.broadcast_to(masked, (1, 1, 200, 300)).copy()
        res = fmsim.check(~dense, tiles=None)
        assert res.fits, res
        iv, c = res.mask.to_paddle()
        for br, bc in TILES:
            ref = run_json("analyze", "--intervals", _save(tmp_path / f"{name}.npy", iv),
                           "--causal" if c else "--bidir", "--seqlen-q", 200, "--br", br, "--bc", bc, "--json")
            check_fitting(tmp_path, f"{name}-{br}x{bc}", dense, iv, c, br, bc, ref, sq=200)


def _save(path, a):
    np.save(path, a)
    return path


def test_masks_no_form_holds_agree(tmp_path):
    """Masks that do not fit: check, analyze (the sub-mask), render and the
    package say the same exact classes and the same FlashMask-attainable rho."""
    i, j = np.arange(256)[:, None], np.arange(256)[None, :]
    d = i - j
    attend = (j < 2) | ((d >= 0) & (d < 32) & ((j >= 128) | (d % 2 == 0)))  # dilated window
    heads = np.stack([attend, attend.T])[None]  # two heads, one transposed: [1, 2, S, S]
    for name, a in (("dilated", attend[None, None]), ("dilated-2heads", heads)):
        path = _save(tmp_path / f"{name}.npy", a)
        for br, bc in ((16, 16), (48, 40)):
            what = f"{name} at {br} x {bc}"
            brute = tally_classes(exact_classes(~a, br, bc))
            c = run_json("check", path, "--br", br, "--bc", bc, "--json", rc=1)
            t = c["tiles"]
            T.counts(f"{what}: check", t["masked"], t["partial"], t["unmasked"], t["total"], brute)
            sub = c["advice"]["subset"]["sparsity"]
            T.rho(f"{what}: check sub-mask rho", sub, sub)
            an = run_json("analyze", path, "--br", br, "--bc", bc, "--json")
            T.eq(f"{what}: analyze representable", an["representable"], False)
            T.counts(f"{what}: analyze tiles", an["tiles"]["masked"], an["tiles"]["partial"],
                     an["tiles"]["unmasked"], an["tiles"]["total"], brute)
            T.rho(f"{what}: analyze sub-mask rho", an["sparsity"], sub)
            T.counts(f"{what}: analyze sub-mask counts", an["tiles_masked"], an["tiles_partial"],
                     an["tiles_unmasked"], an["tiles_total"],
                     (an["tiles_masked"], an["tiles_partial"], an["tiles_unmasked"]))
            pc = fmsim.check(str(path), tiles=(br, bc))
            T.eq(f"{what}: python check fits", pc.fits, False)
            T.counts(f"{what}: python check", pc.tiles["masked"], pc.tiles["partial"], pc.tiles["unmasked"],
                     pc.tiles["total"], brute)
            T.rho(f"{what}: python sub-mask rho", pc.subset.analyze(br, bc).rho, sub)
            if has_render():
                for pair in range(a.shape[1]):
                    j2 = run_json("render", path, "--pair", pair, "--br", br, "--bc", bc, "-o",
                                  tmp_path / "m.png", "--json")
                    k = j2["exact"]
                    T.counts(f"{what}: render panel (exact)", k["masked"], k["partial"], k["unmasked"],
                             k["total"], brute)
                    T.rho(f"{what}: render sub-mask rho", j2["subset_sparsity"], sub)
                    T.eq(f"{what}: render caption keeps FlashMask's rho",
                         f"\u03c1 = {sub:.3f}" in j2["caption"].split("FlashMask")[-1], True)
    print(f"cross-check: {T.n} comparisons in all")


def test_cp_plan_gpu_bound_slows_the_allgather_only():
    """--gpu-gbs bounds all of an all-gather's transfers through one GPU: recorded in the JSON; on
    a mask-aware split whose ranks gather from three peers (3 x 90 GB/s side by side) a bound
    of 100 GB/s lengthens the all-gather's step and leaves the ring's (one peer a group) alone."""
    mask = ("--family", "causal_document", "--seqlen", "262144", "--heads", "4", "--ranks", "4",
            "--sharding", "mask-aware", "--json")
    steps = {}
    for cap in (None, "100"):
        plan = run_json("cp-plan", *mask, *(("--gpu-gbs", cap) if cap else ()))
        T.eq(f"cp-plan --gpu-gbs {cap}: recorded", plan["link"]["gpu_gbs"], float(cap or 450))
        (sh,) = plan["shardings"]
        T.eq(f"cp-plan --gpu-gbs {cap}: three peers", max(r["kv_sources"] for r in sh["ranks"]), 3)
        steps[cap] = {x: sh["exchanges"][x]["step_ms"] for x in ("allgather", "ring")}
    T.eq(f"all-gather slower under the bound {steps}", steps["100"]["allgather"] > steps[None]["allgather"], True)
    T.eq(f"ring unchanged {steps}", steps["100"]["ring"], steps[None]["ring"])


def test_cp_plan_one_gpu_is_predict_in_either_clock():
    """cp-plan's one-GPU time (its default, --clock auto: the sustained clock, what cp-run times;
    only the all-gather's launches burst) is what `fmsim predict` gives for the same mask and
    clock; --clock burst matches predict's default."""
    mask = ("--family", "causal_document", "--seqlen", "65536", "--heads", "4")
    times = {}
    for clock in ("sustained", "burst"):
        plan = run_json("cp-plan", *mask, "--ranks", "2", "--json", *(("--clock", clock) if clock == "burst" else ()))
        T.eq(f"cp-plan --clock {clock}: recorded", (plan["clock"], plan["clocks"]["compute"]),
             ("auto" if clock == "sustained" else "burst", clock))
        T.eq(f"cp-plan --clock {clock}: the all-gather's", plan["clocks"]["allgather"], "burst")
        pred = run_json("predict", *mask, "--pass", "both", "--json", *(("--clock", clock) if clock == "sustained" else ()))
        for p in pred["passes"]:
            T.eq(f"predict --clock {clock} {p['pass']}: recorded", p["clock"], clock)
            got, want = plan["one_gpu"][f"{p['pass']}_ms"], p["tiles"][0]["time_ms"]
            T.eq(f"cp-plan {clock} one GPU {p['pass']} {got} vs predict {want}", abs(got - want) <= 1e-6 * want, True)
            times[(clock, p["pass"])] = (want, p["throttle"], p["tiles"][0]["schedule_ms"], p["tiles"][0]["launch_ms"])
    for ps in ("fwd", "bwd"):  # sustained: launch + throttle x the makespan, above the floor here
        t, thr, sched, launch = times[("sustained", ps)]
        T.eq(f"sustained {ps}: {t} = {launch} + {thr} x {sched}", abs(t - (launch + thr * sched)) <= 1e-6 * t, True)
        T.eq(f"sustained {ps} at least burst", t >= times[("burst", ps)][0], True)
