#!/usr/bin/env python3
"""The C++ autograd op's fast path (python/fmsim/csrc/autograd_op.cpp: fast,
remember) on the CPU, no GPU and no libfmsim_cuda: its caches' keys, hits and
misses, with the library's entry points replaced by ctypes callbacks that record
which intervals and stream each launch got. The GPU twin, against the real
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


@FWD
def fake_fwd(shape, device, iv, q, k, v, o, lse, variant, stream, err):
    LAUNCHES.append(("fwd", iv, stream or 0))
    return 0


@BWD
def fake_bwd(shape, device, iv, q, k, v, o, lse, dout, dq, dk, dv, variant, stream, err):
    LAUNCHES.append(("bwd", iv, stream or 0))
    return 0


B, S, H, D = 1, 64, 2, 64


def make_plan(Sq=S, Sk=S, bhsd=False):
    problem = bytes(160)  # the bytes are the kernels' business; the callbacks ignore them
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

    def tearDown(self):
        M._cpu_check(False, 0)
        M.clear_caches()

    # what torch.py passes: fast(q, k, v, sri, causal, scale, return_lse, deterministic, layout, kernel, variant)
    def fast(self, q, k, v, sri, causal=True, scale=None, lse=False, det=False, layout="bshd", kernel="auto",
             variant="skip"):
        return M.fast(q, k, v, sri, causal, scale, lse, det, layout, kernel, variant)

    def remember(self, q, k, v, sri, plan, iv, stream=0, causal=True, scale=None, det=False, layout="bshd",
                 kernel="auto", variant="skip"):
        return M.remember(q, k, v, sri, causal, scale, det, layout, kernel, variant, plan, iv, stream)

    def iv(self, nsets=1, Sk=S):
        return torch.zeros(nsets, 4, Sk, dtype=torch.int32)

    def stats(self):
        return M.cache_stats()

    def test_miss_then_remembered_then_hit(self):
        q, k, v = qkv()
        sri, iv, plan = sri_of(), self.iv(), make_plan()
        self.assertIsNone(self.fast(q, k, v, sri))
        self.assertEqual(self.stats()["no_plan"], 1)
        self.assertTrue(self.remember(q, k, v, sri, plan, iv))
        o = self.fast(q, k, v, sri)
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

    def test_declined(self):
        q, k, v = qkv()
        sri, iv = sri_of(), self.iv()
        self.assertTrue(self.remember(q, k, v, sri, make_plan(), iv))
        cases = {
            "no grad needed": (qkv(grad=False), {}),
            "numpy startend": ((q, k, v), dict(sri=sri.numpy())),
            "non-contiguous startend": ((q, k, v), dict(sri=sri_of(k=2)[..., :1])),
            "a bad layout": ((q, k, v), dict(layout="bsdh")),
            "a layout not a str": ((q, k, v), dict(layout=["bshd"])),
            "a bad scale": ((q, k, v), dict(scale="x")),
            "a causal that cannot be bool": ((q, k, v), dict(causal=torch.ones(2))),
            "q a subclass": ((q.detach().as_subclass(Sub).requires_grad_(), k, v), {}),
            "q not a tensor": ((q.detach().float().numpy(), k, v), {}),
        }
        for what, (t, kw) in cases.items():
            with self.subTest(case=what):
                before = self.stats()["declined"]
                kw.setdefault("sri", sri)
                self.assertIsNone(self.fast(*t, kw.pop("sri"), **kw))
                self.assertEqual(self.stats()["declined"], before + 1)
                self.assertIsNone(sys.exc_info()[0])
        with torch.no_grad():
            self.assertIsNone(self.fast(q, k, v, sri))
        self.assertIsNotNone(self.fast(q, k, v, sri))

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
