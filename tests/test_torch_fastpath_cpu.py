#!/usr/bin/env python3
"""The C++ autograd op's fast path (python/fmsim/csrc/autograd_op.cpp: fast,
remember) on the CPU, no GPU and no libfmsim_cuda: its caches' keys, hits and
misses, with the library's entry points replaced by ctypes callbacks that record
which intervals and stream each launch got (and, for the calls without autograd,
which o and lse buffers). The GPU twin, against the real
kernels and the Python path's bits, is tests/test_torch_op.py, CppAutograd.

Builds the extension with torch.utils.cpp_extension.load (into torch's
extension cache, ~20-60 s the first time). Exits 77 (skipped) without torch or
a working C++ toolchain for torch extensions, unless FMSIM_TORCH_CPP=1.
"""
import ctypes as C
import gc
import os
import sys
import unittest

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(77)

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "fmsim", "csrc", "autograd_op.cpp")


def build():
    from torch.utils import cpp_extension
    tag = "".join(c if c.isalnum() else "_" for c in torch.__version__)
    return cpp_extension.load(name=f"fmsim_autograd_op_{tag}", sources=[SRC], extra_cflags=["-O2"],
                              verbose=bool(os.environ.get("FMSIM_TORCH_CPP_VERBOSE")))


try:
    M = build()
except Exception as e:  # no compiler, ninja or headers
    if os.environ.get("FMSIM_TORCH_CPP", "").strip() == "1":
        raise
    print(f"SKIP: the C++ autograd op does not build here ({str(e).splitlines()[0][:200]})")
    sys.exit(77)

FWD = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int32, C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p,
                  C.c_void_p, C.c_int, C.c_void_p, C.c_void_p)
BWD = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int32, C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p,
                  C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p, C.c_int, C.c_void_p, C.c_void_p)
LAUNCHES = []  # (pass, intervals pointer, stream) of each "kernel launch"
PROBLEMS = []  # the fm_attn_problem bytes each launch got (what carries the mask method)
BUFFERS = []   # (o, lse) pointers of each forward launch
FAIL = []      # a status (and message) the next forward launch returns


@FWD
def fake_fwd(shape, device, iv, q, k, v, o, lse, variant, stream, err):
    LAUNCHES.append(("fwd", iv, stream or 0))
    PROBLEMS.append(C.string_at(shape, PROBLEM_BYTES))
    BUFFERS.append((o, lse))
    if FAIL:
        status, msg = FAIL.pop()
        C.memmove(err, msg, len(msg) + 1)
        return status
    return 0


class FakeFmsimError(Exception):  # fmsim.FmsimError's signature: (message, status)
    def __init__(self, msg, status):
        super().__init__(msg)
        self.status = status


@BWD
def fake_bwd(shape, device, iv, q, k, v, o, lse, dout, dq, dk, dv, variant, stream, err):
    LAUNCHES.append(("bwd", iv, stream or 0))
    PROBLEMS.append(C.string_at(shape, PROBLEM_BYTES))
    return 0


B, S, H, D = 1, 64, 2, 64
PROBLEM_BYTES = 160


def make_plan(Sq=S, Sk=S, bhsd=False, problem=bytes(PROBLEM_BYTES)):
    # the bytes are the kernels' business (the callbacks record them: they must reach the call as made)
    return M.make_plan(problem, C.cast(fake_fwd, C.c_void_p).value, C.cast(fake_bwd, C.c_void_p).value, 0, 0,
                       bhsd, [B, Sq, H, D], [B, H, Sq], 512, cuda=False, seqlen_q=Sq, seqlen_k=Sk)


def qkv(Sq=S, Sk=S, grad=True):
    t = [torch.zeros(B, n, H, D, dtype=torch.bfloat16).requires_grad_(grad) for n in (Sq, Sk, Sk)]
    return t


class Sub(torch.Tensor):
    pass


def sri_of(Sk=S, k=1, value=0):
    return torch.full((1, 1, Sk, k), value, dtype=torch.int32)


class FastPath(unittest.TestCase):
    def setUp(self):
        M._cpu_check(True, 0)
        M.clear_caches()
        LAUNCHES.clear()
        PROBLEMS.clear()
        BUFFERS.clear()
        FAIL.clear()

    def tearDown(self):
        M._cpu_check(False, 0)
        M.clear_caches()

    # what torch.py passes: fast(q, k, v, sri, causal, scale, return_lse, deterministic, layout, kernel, variant,
    # mask_method)
    def fast(self, q, k, v, sri, causal=True, scale=None, lse=False, det=False, layout="bshd", kernel="auto",
             variant="skip", mask="auto"):
        return M.fast(q, k, v, sri, causal, scale, lse, det, layout, kernel, variant, mask)

    def remember(self, q, k, v, sri, plan, iv, stream=0, causal=True, scale=None, det=False, layout="bshd",
                 kernel="auto", variant="skip", mask="auto"):
        return M.remember(q, k, v, sri, causal, scale, det, layout, kernel, variant, mask, plan, iv, stream)

    def iv(self, nsets=1, Sk=S):
        return torch.zeros(nsets, 4, Sk, dtype=torch.int32)

    def stats(self):
        return M.cache_stats()

    def miss_remember_call(self, q, k, v):
        """A first call misses (no plan), remember() takes the plan, the next call is served:
        (its output, the startend tensor, the plan and the intervals remembered)."""
        sri, iv, plan = sri_of(), self.iv(), make_plan()
        self.assertIsNone(self.fast(q, k, v, sri))
        self.assertEqual(self.stats()["no_plan"], 1)
        self.assertTrue(self.remember(q, k, v, sri, plan, iv))
        return self.fast(q, k, v, sri), sri, plan, iv

    def test_miss_then_remembered_then_hit(self):
        q, k, v = qkv()
        o, sri, plan, iv = self.miss_remember_call(q, k, v)
        self.assertIsInstance(o, torch.Tensor)
        self.assertEqual(self.stats()["hits"], 1)
        self.assertIn("CppNode<fmsim::FlashMask>", o.grad_fn.name())
        self.assertEqual(LAUNCHES, [("fwd", iv.data_ptr(), 0)])
        o.sum().backward()
        self.assertEqual(LAUNCHES[-1], ("bwd", iv.data_ptr(), 0))
        self.assertEqual(tuple(q.grad.shape), tuple(q.shape))
        # the same shapes through other tensors: the same plan, the same intervals (the same sri)
        q2, k2, v2 = qkv()
        self.assertIsNotNone(self.fast(q2, k2, v2, sri))
        self.assertEqual(self.stats()["hits"], 2)

    def test_every_plan_key_field_misses(self):
        q, k, v = qkv()
        sri, iv = sri_of(), self.iv()
        self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv))
        self.assertIsNotNone(self.fast(q, k, v, sri))
        q2, k2, v2 = qkv(Sq=2 * S, Sk=2 * S)
        others = {
            "causal": dict(causal=False), "scale": dict(scale=0.5), "deterministic": dict(det=True),
            "layout": dict(layout="bhsd"), "kernel": dict(kernel="sm90"), "variant": dict(variant="noskip"),
            "mask_method r2p": dict(mask="r2p"), "mask_method slices": dict(mask="slices"),
            "mask_method words": dict(mask="words"),
        }
        for what, kw in others.items():
            with self.subTest(field=what):
                before = self.stats()["no_plan"]
                self.assertIsNone(self.fast(q, k, v, sri, **kw))
                self.assertEqual(self.stats()["no_plan"], before + 1)
        for what, args in {
            "q, k, v sizes": (q2, k2, v2, sri_of(2 * S)),
            "q strides": (q.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(), k, v, sri),
            "v dtype": (q, k, v.detach().half().requires_grad_(), sri),
            "sri sizes": (q, k, v, sri_of(k=2)),
            "no sri": (q, k, v, None),
        }.items():
            with self.subTest(field=what):
                before = self.stats()["no_plan"]
                self.assertIsNone(self.fast(*args))
                self.assertEqual(self.stats()["no_plan"], before + 1)
        # equal values of other types are the same key, as in Python's dict
        self.assertIsNotNone(self.fast(q, k, v, sri, causal=1, det=0))
        self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv, scale=0.125))
        self.assertIsNotNone(self.fast(q, k, v, sri, scale=torch.tensor(0.125).item()))
        self.assertIsNotNone(self.fast(q, k, v, sri, scale=1 / 8))

    def test_mask_method_keys_its_plan_whose_bytes_reach_the_call(self):
        # one plan per method (torch.py's _make_plan writes the method into the problem's bytes: a
        # marker here), each found under its own key, its bytes passed to both passes as they are
        q, k, v = qkv()
        sri, iv = sri_of(), self.iv()
        marks = {m: bytes([i + 1]) * PROBLEM_BYTES for i, m in enumerate(("auto", "r2p", "slices", "words"))}
        for m, raw in marks.items():
            self.assertTrue(self.remember(q, k, v, sri, make_plan(problem=raw), iv, mask=m))
        self.assertEqual(self.stats()["plans"], 4)
        for m in ("slices", "words", "auto", "r2p", "slices", "words"):
            with self.subTest(mask_method=m):
                PROBLEMS.clear()
                o = self.fast(q, k, v, sri, mask=m)
                o.sum().backward()
                self.assertEqual(PROBLEMS, [marks[m], marks[m]])
                o = self.fast(q.detach(), k.detach(), v.detach(), sri, mask=m)  # without autograd too
                self.assertEqual(PROBLEMS[-1], marks[m])
        self.assertEqual(self.stats()["no_plan"], 0)

    def test_declined(self):
        q, k, v = qkv()
        sri, iv = sri_of(), self.iv()
        self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv))

        def cases(q, k, v):
            return {
                "numpy startend": ((q, k, v), dict(sri=sri.numpy())),
                "non-contiguous startend": ((q, k, v), dict(sri=sri_of(k=2)[..., :1])),
                "a bad layout": ((q, k, v), dict(layout="bsdh")),
                "a layout not a str": ((q, k, v), dict(layout=["bshd"])),
                "a bad scale": ((q, k, v), dict(scale="x")),
                "a bad mask_method": ((q, k, v), dict(mask="R2P")),
                "a mask_method not yet named": ((q, k, v), dict(mask="word")),
                "a mask_method not a str": ((q, k, v), dict(mask=2)),
                "a causal that cannot be bool": ((q, k, v), dict(causal=torch.ones(2))),
                "a return_lse that cannot be bool": ((q, k, v), dict(lse=torch.ones(2))),
                "q a subclass": ((q.detach().as_subclass(Sub).requires_grad_(q.requires_grad), k, v), {}),
                "q not a tensor": ((q.detach().float().numpy(), k, v), {}),
            }
        # with autograd, and without: inputs needing no grad, or grad mode off
        for grad, (qq, kk, vv) in (("autograd", (q, k, v)), ("no grad needed", qkv(grad=False)),
                                   ("no_grad()", (q, k, v))):
            for what, (t, kw) in cases(qq, kk, vv).items():
                with self.subTest(case=what, grad=grad), torch.set_grad_enabled(grad != "no_grad()"):
                    before = self.stats()["declined"]
                    self.assertIsNone(self.fast(*t, kw.pop("sri", sri), **kw))
                    self.assertEqual(self.stats()["declined"], before + 1)
                    self.assertIsNone(sys.exc_info()[0])
        self.assertEqual(LAUNCHES, [])
        self.assertIsNotNone(self.fast(q, k, v, sri))
        self.assertEqual((self.stats()["hits"], self.stats()["hits_nograd"]), (1, 0))

    def test_in_place_change_converts_again(self):
        q, k, v = qkv()
        sri, iv, iv2 = sri_of(), self.iv(), self.iv()
        self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv))
        self.assertIsNotNone(self.fast(q, k, v, sri))
        sri.add_(1)  # the version moves
        self.assertIsNone(self.fast(q, k, v, sri))
        self.assertEqual(self.stats()["no_intervals"], 1)
        self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv2))
        self.assertIsNotNone(self.fast(q, k, v, sri))
        self.assertEqual(LAUNCHES[-1], ("fwd", iv2.data_ptr(), 0))
        sri[0, 0, 0, 0] = 5  # through a view: the version is shared
        self.assertIsNone(self.fast(q, k, v, sri))

    def test_a_freed_startend_is_not_taken_for_a_new_one(self):
        q, k, v = qkv()
        plan = make_plan()
        sri, iv = sri_of(), self.iv()
        self.assertTrue(self.remember(q, k, v, sri, plan, iv))
        old = id(sri)
        del sri
        gc.collect()
        reused = False
        for _ in range(200):  # new tensors, one very likely at the freed one's id
            sri2 = sri_of(value=3)
            self.assertIsNone(self.fast(q, k, v, sri2), "a new startend tensor hit the freed one's entry")
            if id(sri2) == old:
                reused = True
                break
        self.assertEqual(self.stats()["hits"], 0)
        if not reused:
            print("(the freed startend's id was not reused: the check ran on other ids)", file=sys.stderr)
        # the freed tensor's entry (and its intervals) go at the next remember
        iv2 = self.iv()
        self.assertTrue(self.remember(q, k, v, sri2, plan, iv2))
        self.assertEqual(self.stats()["startend"], 1)
        self.assertIsNotNone(self.fast(q, k, v, sri2))
        self.assertEqual(LAUNCHES[-1], ("fwd", iv2.data_ptr(), 0))

    def test_streams(self):
        q, k, v = qkv()
        plan, iv0, iv7 = make_plan(), self.iv(), self.iv()
        for sri in (sri_of(), None):
            with self.subTest(sri=sri is not None):
                M.clear_caches()
                M._cpu_check(True, 0)
                self.assertTrue(self.remember(q, k, v, sri, plan, iv0, stream=0))
                self.assertIsNotNone(self.fast(q, k, v, sri))
                M._cpu_check(True, 7)  # another current stream: intervals converted there are needed
                self.assertIsNone(self.fast(q, k, v, sri))
                self.assertEqual(self.stats()["no_intervals"], 1)
                self.assertFalse(self.remember(q, k, v, sri, plan, iv7, stream=0), "a stream not the current one")
                self.assertTrue(self.remember(q, k, v, sri, plan, iv7, stream=7))
                self.assertIsNotNone(self.fast(q, k, v, sri))
                self.assertEqual(LAUNCHES[-1], ("fwd", iv7.data_ptr(), 7))

    def test_no_startend_keys_by_sizes(self):
        q, k, v = qkv(Sq=S, Sk=2 * S)
        plan, iv = make_plan(Sq=S, Sk=2 * S), self.iv(Sk=2 * S)
        self.assertTrue(self.remember(q, k, v, None, plan, iv, causal=False))
        self.assertIsNotNone(self.fast(q, k, v, None, causal=False))
        self.assertEqual(self.stats()["no_startend"], 1)
        q2, k2, v2 = qkv(Sq=2 * S, Sk=S)
        self.assertIsNone(self.fast(q2, k2, v2, None, causal=False))
        self.assertTrue(self.remember(q2, k2, v2, None, make_plan(Sq=2 * S, Sk=S), self.iv(Sk=S), causal=False))
        self.assertEqual(self.stats()["no_startend"], 2)

    def test_return_lse_and_bhsd(self):
        q, k, v = (t.detach().transpose(1, 2).requires_grad_() for t in qkv())  # (B, H, S, D) views
        sri, iv = sri_of(), self.iv()
        plan = make_plan(bhsd=True)
        self.assertTrue(self.remember(q, k, v, sri, plan, iv, layout="bhsd"))
        self.assertIsNone(self.fast(q, k, v, sri))  # bshd: another key
        o, lse = self.fast(q, k, v, sri, lse=True, layout="bhsd")
        self.assertEqual(o.stride(), q.stride())
        self.assertEqual(tuple(lse.shape), (B, H, S))
        self.assertFalse(lse.requires_grad)
        (o.float().sum() + lse.sum()).backward()
        self.assertEqual(LAUNCHES[-1][0], "bwd")

    def test_per_head_and_sq_ne_sk(self):
        q, k, v = qkv(Sq=S, Sk=3 * S)
        sri = torch.zeros((B, H, 3 * S, 2), dtype=torch.int32)
        iv = self.iv(nsets=B * H, Sk=3 * S)
        self.assertTrue(self.remember(q, k, v, sri, make_plan(Sq=S, Sk=3 * S), iv))
        self.assertIsNotNone(self.fast(q, k, v, sri))
        self.assertIsNone(self.fast(q, k, v, sri[:, :1].contiguous()))  # one mask for every head: another key

    def test_caches_are_bounded(self):
        q, k, v = qkv()
        sri, iv = sri_of(), self.iv()
        for i in range(4200):
            self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv, scale=1.0 + i))
        self.assertLessEqual(self.stats()["plans"], 4097)
        self.assertIsNotNone(self.fast(q, k, v, sri, scale=1.0 + 4199))

    def test_plan_without_sizes_is_not_remembered(self):
        q, k, v = qkv()
        plan = M.make_plan(bytes(160), C.cast(fake_fwd, C.c_void_p).value, C.cast(fake_bwd, C.c_void_p).value, 0, 0,
                           False, [B, S, H, D], [B, H, S], 512, cuda=False)
        self.assertFalse(self.remember(q, k, v, sri_of(), plan, self.iv()))
        self.assertEqual(self.stats()["refused"], 1)

    # ---- calls without autograd: the forward alone (torch.py's _fwd), from the same caches ----

    def test_nograd_miss_then_remembered_then_hit(self):
        q, k, v = qkv(grad=False)
        o, sri, plan, iv = self.miss_remember_call(q, k, v)
        self.assertIsInstance(o, torch.Tensor)
        st = self.stats()
        self.assertEqual((st["hits_nograd"], st["hits"], st["scratch"]), (1, 0, 1), st)
        self.assertIsNone(o.grad_fn)
        self.assertFalse(o.requires_grad)
        self.assertEqual((tuple(o.shape), o.stride(), o.dtype), (tuple(q.shape), q.stride(), torch.bfloat16))
        self.assertEqual(LAUNCHES, [("fwd", iv.data_ptr(), 0)])
        self.assertEqual(BUFFERS[-1][0], o.data_ptr())
        # inputs that need grad under no_grad(): the same route; the plan and intervals are shared
        # with the autograd calls (one key), which hit afterwards
        qg, kg, vg = qkv()
        with torch.no_grad():
            o2 = self.fast(qg, kg, vg, sri)
        self.assertIsNone(o2.grad_fn)
        self.assertEqual(self.stats()["hits_nograd"], 2)
        og = self.fast(qg, kg, vg, sri)
        self.assertIn("CppNode<fmsim::FlashMask>", og.grad_fn.name())
        self.assertEqual((self.stats()["hits"], self.stats()["hits_nograd"]), (1, 2))
        with torch.inference_mode():  # grad mode off too; o an inference tensor, as torch.empty makes there
            o3 = self.fast(q, k, v, sri)
        self.assertTrue(o3.is_inference())
        self.assertEqual(self.stats()["hits_nograd"], 3)
        # an autograd call's remember serves a no-grad call (the keys are the same)
        M.clear_caches()
        self.assertIsNone(self.fast(qg, kg, vg, None))
        self.assertTrue(self.remember(qg, kg, vg, None, plan, iv))
        self.assertIsNotNone(self.fast(q, k, v, None))
        self.assertEqual(self.stats()["hits_nograd"], 1)

    def test_nograd_misses(self):
        q, k, v = qkv(grad=False)
        sri, iv = sri_of(), self.iv()
        self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv))
        self.assertIsNone(self.fast(q, k, v, sri, causal=False))  # another plan key
        self.assertEqual(self.stats()["no_plan"], 1)
        sri.add_(1)  # an in-place change: the intervals again
        self.assertIsNone(self.fast(q, k, v, sri))
        self.assertEqual(self.stats()["no_intervals"], 1)
        self.assertIsNone(self.fast(q, k, v, sri_of()))  # another startend tensor
        M._cpu_check(True, 7)  # another stream
        self.assertIsNone(self.fast(q, k, v, sri))
        self.assertEqual(self.stats()["no_intervals"], 3)
        st = self.stats()
        self.assertEqual((st["hits_nograd"], st["scratch"], LAUNCHES), (0, 0, []), st)

    def test_nograd_scratch_once_per_plan_and_stream(self):
        """The lse nobody reads goes to a buffer of the plan's, made at its first call on
        a stream and reused there (stream order makes that safe), as torch.py's _fwd does."""
        q, k, v = qkv(grad=False)
        plan, plan2 = make_plan(), make_plan()
        ivs = {0: self.iv(), 7: self.iv()}
        for stream, iv in ivs.items():  # no startend: one entry per stream, both kept
            M._cpu_check(True, stream)
            self.assertTrue(self.remember(q, k, v, None, plan, iv, stream=stream))
        lse_of, kept = {}, []
        for stream in (0, 0, 7, 7, 0, 7):
            M._cpu_check(True, stream)
            o = self.fast(q, k, v, None)
            self.assertIsNotNone(o)
            kept.append(o)  # alive: a freed o's memory can come back (the check below is of new buffers)
            self.assertEqual(LAUNCHES[-1], ("fwd", ivs[stream].data_ptr(), stream))
            self.assertEqual(BUFFERS[-1][0], o.data_ptr())
            lse = BUFFERS[-1][1]
            self.assertEqual(lse_of.setdefault(stream, lse), lse, f"stream {stream}: another scratch lse")
        self.assertNotEqual(lse_of[0], lse_of[7], "two streams share a scratch lse")
        self.assertEqual(self.stats()["scratch"], 2)
        # o is new at every call
        self.assertEqual(len({b[0] for b in BUFFERS}), len(BUFFERS))
        # another plan (another key: causal=False) has its own
        M._cpu_check(True, 0)
        self.assertTrue(self.remember(q, k, v, None, plan2, self.iv(), causal=False))
        self.assertIsNotNone(self.fast(q, k, v, None, causal=False))
        self.assertNotIn(BUFFERS[-1][1], lse_of.values())
        self.assertEqual(self.stats()["scratch"], 3)
        # the plan keeps its buffers through a cleared cache (Python's plan holds the same C++ plan)
        M.clear_caches()
        self.assertTrue(self.remember(q, k, v, None, plan, ivs[0]))
        self.fast(q, k, v, None)
        self.assertEqual((BUFFERS[-1][1], self.stats()["scratch"]), (lse_of[0], 0))

    def test_nograd_return_lse_and_bhsd(self):
        q, k, v = (t.transpose(1, 2) for t in qkv(grad=False))  # (B, H, S, D) views
        sri, iv = sri_of(), self.iv()
        self.assertTrue(self.remember(q, k, v, sri, make_plan(bhsd=True), iv, layout="bhsd"))
        seen, kept = set(), []
        for _ in range(2):
            o, lse = self.fast(q, k, v, sri, lse=True, layout="bhsd")
            self.assertEqual((tuple(o.shape), o.stride()), (tuple(q.shape), q.stride()))  # empty_like(q)
            self.assertEqual((tuple(lse.shape), lse.dtype, lse.is_contiguous()), ((B, H, S), torch.float32, True))
            self.assertEqual(BUFFERS[-1], (o.data_ptr(), lse.data_ptr()))
            self.assertIsNone(lse.grad_fn)
            seen.add(lse.data_ptr())
            kept.append((o, lse))  # kept alive: a freed lse's memory could come back
        self.assertEqual(len(seen), 2, "return_lse: a new lse per call")
        self.assertEqual((self.stats()["hits_nograd"], self.stats()["scratch"]), (2, 0))
        o = self.fast(q, k, v, sri, layout="bhsd")  # without the lse: o alone, the scratch written
        self.assertIsInstance(o, torch.Tensor)
        self.assertEqual(o.stride(), q.stride())
        self.assertEqual(self.stats()["scratch"], 1)

    def test_nograd_per_head_sq_ne_sk(self):
        q, k, v = qkv(Sq=S, Sk=3 * S, grad=False)
        sri = torch.zeros((B, H, 3 * S, 2), dtype=torch.int32)
        iv = self.iv(nsets=B * H, Sk=3 * S)
        self.assertTrue(self.remember(q, k, v, sri, make_plan(Sq=S, Sk=3 * S), iv))
        o, lse = self.fast(q, k, v, sri, lse=True)
        self.assertEqual((tuple(o.shape), tuple(lse.shape)), ((B, S, H, D), (B, H, S)))
        self.assertEqual(LAUNCHES[-1], ("fwd", iv.data_ptr(), 0))

    def test_nograd_alignment_and_library_error(self):
        q, k, v = qkv(grad=False)
        sri, iv = sri_of(), self.iv()
        self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv))
        odd = torch.zeros(q.numel() + 1, dtype=torch.bfloat16)[1:].view(q.shape)  # 2 bytes off: the same key
        for grad in (False, True):
            with self.subTest(grad=grad):
                qq = odd.detach().requires_grad_(grad)
                with self.assertRaisesRegex(ValueError, "16-byte aligned"):
                    self.fast(qq, k, v, sri)
        self.assertEqual(LAUNCHES, [])
        self.assertEqual(self.stats()["scratch"], 0)  # refused before any allocation
        M.set_error_type(FakeFmsimError)
        FAIL.append((7, b"fake launch failure"))
        with self.assertRaises(FakeFmsimError) as cm:
            self.fast(q, k, v, sri)
        self.assertEqual((str(cm.exception), cm.exception.status), ("fake launch failure", 7))
        self.assertIsNotNone(self.fast(q, k, v, sri))  # and the next call runs


if __name__ == "__main__":
    unittest.main(verbosity=2)
