#!/usr/bin/env python3
"""fmsim.torch against libfmsim_cuda.so on the CPU, no GPU (ctest: torch_problem_cpu,
label python): the ctypes mirror of fm_attn_problem checked member for member at
import (fm_attn_problem_member, kernels/fm_attn.h), and the mask method (issue 25)
checked on both sides before any CUDA call: mask_method refused with one line by
the op, an out-of-range or sm80 method by the library, the method part of the
plan's key. The GPU side (every method, the same bits): tests/test_torch_op.py,
MaskMethod. Exits 77 (skipped) without torch or the libraries.
"""
import ctypes as C
import os
import sys
import unittest

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
try:
    import fmsim.torch as ft
except ImportError as e:
    if "not found" not in str(e):  # a library that is there but does not match: the failure this test is for
        raise
    print(f"SKIP: {e}")
    sys.exit(77)


class Mirror(unittest.TestCase):
    def test_every_member_at_its_offset(self):
        lib, off, names = ft._lib, C.c_size_t(0), []
        while (n := lib.fm_attn_problem_member(len(names), C.byref(off))) is not None:
            names.append(n.decode())
            self.assertEqual(off.value, getattr(ft._Problem, names[-1]).offset, names[-1])
        self.assertEqual(names, [f[0] for f in ft._Problem._fields_])
        self.assertEqual(names[-1], "mask_method")
        self.assertIsNone(lib.fm_attn_problem_member(-1, None))
        ft._check_mirror(lib, "lib", ft._Problem)

    def test_a_mirror_without_mask_method_is_refused(self):
        # the field sits in the tail padding of the struct without it: the size alone would pass
        class Old(C.Structure):
            _fields_ = ft._Problem._fields_[:-1]
        self.assertEqual(C.sizeof(Old), C.sizeof(ft._Problem))
        with self.assertRaisesRegex(ImportError, r"^fmsim.torch: lib does not match this package "
                                    r"\(fm_attn_problem's member 25 is mask_method at byte 156 there, none here\)$"):
            ft._check_mirror(ft._lib, "lib", Old)

        class Swapped(C.Structure):
            _fields_ = ft._Problem._fields_[:-2] + [ft._Problem._fields_[-1], ft._Problem._fields_[-2]]
        with self.assertRaisesRegex(ImportError, r"member 24 is deterministic at byte 152 there, mask_method "
                                    r"at byte 152 here"):
            ft._check_mirror(ft._lib, "lib", Swapped)


class MaskMethod(unittest.TestCase):
    def test_refused_with_one_line(self):
        q = torch.zeros(1, 64, 2, 64, dtype=torch.bfloat16)
        for bad in ("R2P", "", 2, None, "word"):
            with self.subTest(mask_method=bad):
                with self.assertRaises(ValueError) as cm:
                    ft.flashmask_attention(q, q, q, mask_method=bad)
                self.assertEqual(str(cm.exception),
                                 f"mask_method {bad!r}: expected 'auto', 'r2p', 'slices' or 'words'")
                with self.assertRaisesRegex(ValueError, "^mask_method "):
                    ft.flashmask_attention_profile(q, q, q, mask_method=bad)
        for good in ("auto", "r2p", "slices", "words"):  # taken: the refusal is the CPU tensor's
            with self.assertRaisesRegex(ValueError, "^q: on cpu"):
                ft.flashmask_attention(q, q, q, mask_method=good)

    def test_in_the_plan_key(self):
        made = []
        real = ft._make_plan
        ft._make_plan = lambda *a: made.append(a[-1]) or object()
        ft._plans.clear()
        try:
            q = torch.zeros(1, 64, 2, 64, dtype=torch.bfloat16)
            for m in ("auto", "r2p", "slices", "words", "r2p", "words", "auto"):
                ft._plan(q, q, q, None, True, None, "bshd", "auto", "skip", False, m)
            self.assertEqual(made, ["auto", "r2p", "slices", "words"])
        finally:
            ft._make_plan = real
            ft._plans.clear()

    def test_the_library_checks_it_first(self):
        # fm_attn_forward's checks run before any CUDA call: fake pointers do
        def status(kernel, method):
            p = ft._Problem(batch=1, heads=1, seqlen_q=128, seqlen_k=128, head_dim=128, softmax_scale=0.1,
                            causal=1, mask_nb=1, mask_nh=1, kernel=kernel, mask_method=method)
            p.q = p.k = p.v = p.o = p.lse = p.intervals = 4096
            st = ft._lib.fm_attn_forward(C.byref(p), 0, 0, None, ft._errp)
            return st, ft._err.msg.decode()
        for method in (4, -1):
            st, msg = status(1, method)
            self.assertNotEqual(st, 0)
            self.assertEqual(msg, f"mask method {method}: expected 0 (auto), 1 (slices), 2 (r2p) or 3 (words)")
        for method, name in ((2, "r2p"), (3, "words")):
            st, msg = status(0, method)
            self.assertNotEqual(st, 0)
            self.assertRegex(msg, f"^mask method {name}: kernel sm80 has one way of masking a partial tile "
                             r"\(auto only\)$")
        for kernel, method in ((1, 0), (1, 1), (1, 2), (1, 3), (0, 0)):  # taken: no device is what stops them
            with self.subTest(kernel=kernel, method=method):
                st, msg = status(kernel, method)
                self.assertNotIn("mask method", msg)


if __name__ == "__main__":
    unittest.main(verbosity=2)
