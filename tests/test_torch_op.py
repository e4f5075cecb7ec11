#!/usr/bin/env python3
"""GPU tests of fmsim.torch (ctest label gpu): fmsim's kernels as a PyTorch op
against PyTorch's own attention. Exits 77 (skipped) without torch, CUDA or a
Hopper GPU. Run directly (python3 tests/test_torch_op.py) or through ctest.

The oracle is PyTorch's SDPA, math backend, in fp32 on the same bf16 inputs,
with the boolean mask expanded from the intervals by torch (no fmsim code):
every element within the kernels' tolerance (core/fm_reference.c: O atol 3e-3
rtol 1.5e-2; gradients atol 3e-2 rtol 2e-2), fmsim's largest error at most
twice that of the same-precision run (the kernels' rule 3: torch computing as
the kernel rounds, `same_precision`), no NaN anywhere.

The op records autograd through its C++ Function (fmsim/csrc/autograd_op.cpp)
where that builds, so the tests above run it; `CppAutograd` compares it bit for
bit with the Python Function and checks FMSIM_TORCH_CPP=0. A C++ op that does not
build fails that class (with the build's reason) unless FMSIM_TORCH_CPP=0.
"""
import math
import os
import subprocess
import sys
import unittest

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: no CUDA device")
    sys.exit(77)
if torch.cuda.get_device_capability() != (9, 0):
    print("SKIP: fmsim's sm90 kernels need an sm_90 GPU (got sm_%d%d)" % torch.cuda.get_device_capability())
    sys.exit(77)

PYDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
sys.path.insert(0, PYDIR)
import numpy as np  # noqa: E402

import fmsim  # noqa: E402
import fmsim.torch as ft  # noqa: E402
from fmsim.torch import flashmask_attention, flashmask_attention_profile  # noqa: E402

TOL = {"o": (3e-3, 1.5e-2), "grad": (3e-2, 2e-2)}
FAMILIES = fmsim.family_names()


def dense_masked(sri: torch.Tensor, causal: bool, B: int, H: int, Sq: int, Sk: int) -> torch.Tensor:
    """[B, H, Sq, Sk] bool, True = masked, from Paddle's layout by torch alone."""
    nb, nh, sk, k = sri.shape
    s = sri.long().clamp(min=0, max=Sq)
    lts = s[..., 0]
    lte = s[..., 1] if (k == 4 or (k == 2 and causal)) else torch.full_like(lts, Sq)
    uts = s[..., 2] if k == 4 else torch.zeros_like(lts)
    ute = s[..., 3] if k == 4 else (s[..., 1] if (k == 2 and not causal) else torch.zeros_like(lts))
    i = torch.arange(Sq, device=sri.device)[:, None]
    j = torch.arange(Sk, device=sri.device)[None, :]
    m = ((i >= lts[..., None, :]) & (i < lte[..., None, :])) | ((i >= uts[..., None, :]) & (i < ute[..., None, :]))
    if causal:
        m = m | (i < j + Sq - Sk)
    return m.expand(B, H, Sq, Sk)


def sdpa(q, k, v, masked, dtype):
    """SDPA math on (B, S, H, D) inputs cast to dtype; rows with no visible key give 0."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qh, kh, vh = (t.transpose(1, 2).to(dtype) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=~masked)
    return torch.nan_to_num(o, nan=0.0).transpose(1, 2)


def same_precision(q, k, v, do, masked, scale):
    """The kernels' own precision (core/fm_reference.h, FM_REF_BF16_FP32), by torch:
    scores and sums in fp32, P rounded to bf16 before P V and P^T dO, dS rounded to
    bf16 before dS^T Q and dS K, every output rounded to bf16. Returns O, dQ, dK, dV
    as fp32 tensors (B, S, H, D); the row of no visible key 0 throughout."""
    f = lambda t: t.transpose(1, 2).float()  # noqa: E731
    qf, kf, vf, dof = f(q), f(k), f(v), f(do)
    s = (qf @ kf.transpose(-1, -2)).masked_fill(masked, float("-inf"))
    m = s.amax(-1, keepdim=True)
    alive = torch.isfinite(m)
    m = torch.where(alive, m, torch.zeros_like(m))
    p = torch.exp2((s - m) * scale * 1.4426950408889634)
    l = p.sum(-1, keepdim=True)
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    o = torch.where(alive, (bf(p) @ vf) / l, torch.zeros_like(qf))
    o = bf(o)
    lse = torch.where(alive, m * scale + torch.log(l), torch.full_like(m, float("-inf")))
    pp = torch.where(alive, torch.exp2(s * scale * 1.4426950408889634 - lse * 1.4426950408889634),
                     torch.zeros_like(s))
    dv = bf(pp).transpose(-1, -2) @ dof
    dp = dof @ vf.transpose(-1, -2)
    dd = (dof * o).sum(-1, keepdim=True)
    ds = bf(pp * (dp - dd))
    dq, dk = scale * (ds @ kf), scale * (ds.transpose(-1, -2) @ qf)
    b = lambda t: bf(t).transpose(1, 2)  # noqa: E731
    return b(o), b(dq), b(dk), b(dv)


def inputs(B, Sq, Sk, H, D, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda S: torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    return r(Sq), r(Sk), r(Sk), r(Sq)


def side_stream_inputs():
    """A sliding-window case for the side-stream tests: (sri, q, k, v, do)."""
    B, H, S, D = 1, 2, 1024, 128
    sri = torch.as_tensor(fmsim.family("sliding_window", S).to_paddle()[0], device="cuda")
    return (sri, *inputs(B, S, S, H, D, seed=4))


def on_side_stream(fn):
    """fn() run on a new stream that waits for the current one, which then waits for it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    return out


def max_err(a, b):
    return float((a.float() - b.float()).abs().max())


class Oracle(unittest.TestCase):
    def within(self, got, ref32, ref16, tol, what):
        atol, rtol = tol
        self.assertFalse(torch.isnan(got).any().item(), f"{what}: NaN in fmsim's result")
        self.assertFalse(torch.isnan(ref32).any().item(), f"{what}: NaN in the reference")
        bad = ((got.float() - ref32).abs() > atol + rtol * ref32.abs()).sum().item()
        self.assertEqual(bad, 0, f"{what}: {bad} elements outside atol {atol} + rtol {rtol} x |ref| "
                                 f"(max err {max_err(got, ref32):.3g})")
        e_gpu, e_same = max_err(got, ref32), max_err(ref16, ref32)
        self.assertLessEqual(e_gpu, 2 * e_same + 1e-6, f"{what}: fmsim's max error {e_gpu:.3g} is more "
                             f"than twice the same-precision run's {e_same:.3g}")

    def run_case(self, sri, causal, B, H, Sq, Sk, D, backward=True, what=""):
        q, k, v, do = inputs(B, Sq, Sk, H, D)
        sri_t = torch.as_tensor(sri, device="cuda") if sri is not None else None
        masked = (dense_masked(sri_t, causal, B, H, Sq, Sk) if sri_t is not None else
                  dense_masked(torch.full((1, 1, Sk, 2), Sq, dtype=torch.int32, device="cuda"), causal, B, H, Sq, Sk)
                  if causal else torch.zeros(B, H, Sq, Sk, dtype=torch.bool, device="cuda"))
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        out, lse = flashmask_attention(qg, kg, vg, sri_t, causal, return_lse=True)
        q32, k32, v32 = (t.float().requires_grad_() for t in (q, k, v))
        ref = sdpa(q32, k32, v32, masked, torch.float32)
        same = same_precision(q, k, v, do, masked, 1.0 / math.sqrt(D))
        self.within(out, ref.detach(), same[0], TOL["o"], f"{what} O")
        empty = masked.all(-1)  # [B, H, Sq]
        if empty.any():
            self.assertTrue(torch.isneginf(lse[empty]).all().item(), f"{what}: LSE of empty rows not -inf")
            self.assertEqual(float(out.transpose(1, 2)[empty].abs().max()), 0.0, f"{what}: empty rows not 0")
        if not backward:
            return
        (out.float() * do.float()).sum().backward()
        (ref * do.float()).sum().backward()
        for name, g, r, sp in (("dQ", qg, q32, same[1]), ("dK", kg, k32, same[2]), ("dV", vg, v32, same[3])):
            self.within(g.grad, r.grad, sp, TOL["grad"], f"{what} {name}")


class Families(Oracle):
    def test_every_family_both_passes(self):
        for fam in FAMILIES:
            for D in (128, 64):
                with self.subTest(family=fam, D=D):
                    B, H, S = 2, 2, 1024
                    m = fmsim.family(fam, S, batch=B, heads=H, seed=1)
                    sri, causal = m.to_paddle()
                    self.run_case(sri, causal, B, H, S, S, D, what=f"{fam} D={D}")

    def test_forms(self):
        for fam, forms in (("causal_document", ("causal-1", "causal-2")),
                           ("document", ("bidir-2", "bidir-4")), ("share_question", ("causal-2",)),
                           ("qk_sparse", ("bidir-4",))):
            m = fmsim.family(fam, 2048, batch=1, heads=1)
            for form in forms:
                with self.subTest(family=fam, form=form):
                    sri, causal = m.to_paddle(form)
                    self.assertEqual(sri.shape[-1], {"causal-1": 1, "causal-2": 2, "bidir-2": 2, "bidir-4": 4}[form])
                    self.run_case(sri, causal, 1, 2, 2048, 2048, 128, what=f"{fam} {form}")

    def test_per_head_masks(self):
        B, H, S = 2, 3, 1024
        m = fmsim.family("random_eviction", S, batch=B, heads=H, seed=5)
        sri, causal = m.to_paddle()
        self.assertEqual(sri.shape[:2], (B, H))
        self.run_case(sri, causal, B, H, S, S, 128, what="per-head")
        sri1 = sri[:1]  # one batch row shared by the batch, per head
        self.run_case(np.ascontiguousarray(sri1), causal, B, H, S, S, 128, what="[1, H]")

    def test_a_mask_mod_in_three_lines(self):
        def window(b, h, q_idx, kv_idx):  # attention-gym style
            return (q_idx >= kv_idx) & (q_idx - kv_idx < 200)
        sri, causal = fmsim.from_mask_mod(window, B=1, H=1, Sq=1024).to_paddle()
        self.assertTrue(causal)
        self.run_case(sri, causal, 1, 2, 1024, 1024, 128, what="mask_mod")

    def test_full_and_causal_without_intervals(self):
        for causal in (False, True):
            self.run_case(None, causal, 2, 2, 1024, 1024, 128, what=f"none causal={causal}")

    def test_sq_ne_sk(self):
        for Sq, Sk in ((768, 1024), (1024, 640), (300, 1000)):
            for causal in (True, False):
                with self.subTest(Sq=Sq, Sk=Sk, causal=causal):
                    g = np.random.default_rng(Sq + Sk)
                    a = g.integers(0, Sq + 1, size=(1, 1, Sk, 1))
                    sri = np.concatenate([a, np.minimum(a + g.integers(0, Sq // 2, size=a.shape), Sq)], -1)
                    if not causal:
                        sri = np.concatenate([sri, np.zeros_like(a), g.integers(0, Sq // 3, size=a.shape)], -1)
                    self.run_case(sri.astype(np.int32), causal, 1, 2, Sq, Sk, 128, what=f"Sq={Sq} Sk={Sk}")

    def test_rows_with_no_visible_key(self):
        S = 1024
        sri = np.zeros((1, 1, S, 2), np.int32)
        sri[..., 0] = 0      # LTS = 0: rows [0, LTE) masked in every column
        sri[..., 1] = 200    # so rows 0..199 see no key at all
        self.run_case(sri, False, 1, 2, S, S, 128, what="empty rows")


class Properties(unittest.TestCase):
    def test_skip_equals_noskip_and_layouts(self):
        B, H, S, D = 2, 2, 2048, 128
        sri, causal = fmsim.family("causal_document", S).to_paddle()
        sri = torch.as_tensor(sri, device="cuda")
        q, k, v, do = inputs(B, S, S, H, D, seed=3)
        outs = {}
        for var in ("skip", "noskip"):
            qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
            o = flashmask_attention(qg, kg, vg, sri, causal, variant=var, deterministic=True)
            o.backward(do)
            outs[var] = (o, qg.grad, kg.grad, vg.grad)
        for a, b in zip(outs["skip"], outs["noskip"]):
            self.assertTrue(torch.equal(a, b), "skip and noskip (deterministic) differ")
        # the (B, H, S, D) view of the same buffers gives the same bits, in that layout
        qg, kg, vg = (t.clone().transpose(1, 2).requires_grad_() for t in (q, k, v))
        o = flashmask_attention(qg, kg, vg, sri, causal, layout="bhsd", deterministic=True)
        self.assertEqual(tuple(o.shape), (B, H, S, D))
        o.backward(do.transpose(1, 2))
        self.assertTrue(torch.equal(o.transpose(1, 2), outs["skip"][0]))
        self.assertTrue(torch.equal(qg.grad.transpose(1, 2), outs["skip"][1]))
        self.assertTrue(torch.equal(vg.grad.transpose(1, 2), outs["skip"][3]))

    def test_every_call_path_gives_the_same_bits(self):
        """The op's four paths (no autograd or autograd, with or without the lse; the
        first keeps its lse in a per-stream scratch buffer) on the current stream and on
        a side stream: the same output bits, and the same lse where one comes back."""
        B, H, S, D = 1, 2, 1024, 64
        sri, causal = fmsim.family("sliding_window", S).to_paddle()
        sri = torch.as_tensor(sri, device="cuda")
        q, k, v, _ = inputs(B, S, S, H, D, seed=5)
        ref, ref_lse = flashmask_attention(q, k, v, sri, causal, return_lse=True)
        side = torch.cuda.Stream()
        for stream in (torch.cuda.current_stream(), side):
            with torch.cuda.stream(stream):
                outs = [flashmask_attention(q, k, v, sri, causal)]
                qg = q.clone().requires_grad_()
                outs.append(flashmask_attention(qg, k, v, sri, causal))
                o, lse = flashmask_attention(qg, k, v, sri, causal, return_lse=True)
                outs.append(o)
                outs.append(flashmask_attention(q, k, v, sri, causal))  # the scratch lse again
            stream.synchronize()
            for i, o in enumerate(outs):
                self.assertTrue(torch.equal(o.detach(), ref), f"path {i} on {stream}: output differs")
            self.assertTrue(torch.equal(lse, ref_lse), "the autograd path's lse differs")
            self.assertFalse(lse.requires_grad, "the lse is not differentiable")

    def test_directional_finite_difference(self):
        """fmsim's gradient against central finite differences of the fp64 reference loss
        L = sum(out * dout) along a random direction (the kernel is bf16, so the
        differences are taken on the fp64 reference at fmsim's own bf16 inputs)."""
        B, H, S, D = 1, 1, 256, 64
        sri, causal = fmsim.family("sliding_window", S, w=64).to_paddle()
        sri_t = torch.as_tensor(sri, device="cuda")
        q, k, v, do = inputs(B, S, S, H, D, seed=7)
        masked = dense_masked(sri_t, causal, B, H, S, S)
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        flashmask_attention(qg, kg, vg, sri_t, causal).backward(do)
        g = torch.Generator(device="cuda").manual_seed(11)
        u = [torch.randn(t.shape, device="cuda", dtype=torch.float64, generator=g) for t in (q, k, v)]

        def loss(eps):
            x = [t.double() + eps * d for t, d in zip((q, k, v), u)]
            o = sdpa(*x, masked, torch.float64)
            return float((o * do.double()).sum())

        eps = 1e-4
        fd = (loss(eps) - loss(-eps)) / (2 * eps)
        an = sum(float((gr.double() * d).sum()) for gr, d in zip((qg.grad, kg.grad, vg.grad), u))
        self.assertLess(abs(an - fd), 2e-2 * abs(fd) + 1e-3, f"directional derivative {an} vs FD {fd}")

    def test_training_loop(self):
        torch.manual_seed(0)
        V, Dm, H, D, S, B = 64, 256, 2, 128, 512, 4
        sri, causal = fmsim.family("causal_document", S, docs="128,256,128").to_paddle()
        sri = torch.as_tensor(sri, device="cuda")
        emb = torch.nn.Embedding(V, Dm).cuda()
        qkv = torch.nn.Linear(Dm, 3 * H * D).cuda()
        head = torch.nn.Linear(H * D, V).cuda()
        params = list(emb.parameters()) + list(qkv.parameters()) + list(head.parameters())
        opt = torch.optim.Adam(params, lr=3e-3)
        x = torch.randint(0, V, (B, S), device="cuda")
        y = torch.roll(x, 1, dims=1)  # predict the previous token: needs attention
        losses = []
        for _ in range(40):
            h = emb(x)
            qv, kv, vv = qkv(h).view(B, S, 3, H, D).to(torch.bfloat16).unbind(2)
            a = flashmask_attention(qv.contiguous(), kv.contiguous(), vv.contiguous(), sri, causal)
            logits = head(a.reshape(B, S, H * D).float())
            loss = torch.nn.functional.cross_entropy(logits.view(-1, V), y.view(-1))
            opt.zero_grad()
            loss.backward()
            self.assertFalse(any(torch.isnan(p.grad).any().item() for p in params), "NaN gradient")
            opt.step()
            losses.append(loss.item())
        self.assertTrue(all(math.isfinite(x) for x in losses))
        self.assertLess(losses[-1], 0.5 * losses[0], f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")


class MaskMethod(unittest.TestCase):
    """mask_method (issue 25): R2P, slices and words mask the same elements of a
    partial tile, so the output, the lse and (deterministic) the gradients are the
    same bits; "auto" is the library's (R2P); words' backward is R2P's, and where its
    forward is not built or its words pass their budget it runs R2P. Through the C++
    op's fast path too: one plan per method, each call running its own (the CPU twin:
    tests/test_torch_fastpath_cpu.py)."""

    def run_method(self, q, k, v, do, sri, causal, method, **kw):
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        o, lse = flashmask_attention(qg, kg, vg, sri, causal, return_lse=True, deterministic=True,
                                     mask_method=method, **kw)
        o.backward(do)
        return o.detach(), lse, qg.grad, kg.grad, vg.grad

    def test_methods_give_the_same_bits(self):
        cases = [("causal_document", 2048, 2048, 128), ("sliding_window", 1024, 1024, 64),
                 ("share_question", 1536, 1536, 128), ("random_eviction", 1024, 1024, 64),
                 ("document", 1000, 1000, 128),  # a partial last tile in both directions
                 ("causal", 700, 1900, 64)]      # Sq != Sk
        for fam, Sq, Sk, D in cases:
            with self.subTest(family=fam, Sq=Sq, Sk=Sk, D=D):
                B, H = 2, 2
                if fam == "causal":
                    sri, causal = None, True
                else:
                    sri, causal = fmsim.family(fam, Sk, batch=B, heads=H, seed=4).to_paddle()
                    sri = torch.as_tensor(sri, device="cuda")
                q, k, v, do = inputs(B, Sq, Sk, H, D, seed=11)
                got = {m: self.run_method(q, k, v, do, sri, causal, m) for m in ("r2p", "slices", "words", "auto")}
                for m in ("slices", "words", "auto"):
                    for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), got["r2p"], got[m]):
                        self.assertTrue(torch.equal(a, b), f"{name}: r2p and {m} differ")
                # and right: against the oracle's tolerance, so that equal bits are not equally wrong
                masked = dense_masked(sri if sri is not None else torch.zeros((1, 1, Sk, 1), dtype=torch.int32,
                                                                                device="cuda") + Sq,
                                      causal, B, H, Sq, Sk)
                ref = sdpa(q, k, v, masked, torch.float32)
                self.assertLess(max_err(got["slices"][0], ref), 3e-3 + 1.5e-2 * float(ref.abs().max()))

    def test_no_grad_fast_path_alternating(self):
        B, H, S, D = 1, 4, 2048, 128
        sri, causal = fmsim.family("causal_blockwise", S).to_paddle()
        sri = torch.as_tensor(sri, device="cuda")
        q, k, v, _ = inputs(B, S, S, H, D, seed=12)
        ref = flashmask_attention(q, k, v, sri, causal)
        for m in ("r2p", "slices", "words", "auto", "words", "slices", "r2p") * 2:
            self.assertTrue(torch.equal(flashmask_attention(q, k, v, sri, causal, mask_method=m), ref), m)

    def test_refusals(self):
        B, H, S, D = 1, 2, 512, 64
        q, k, v, _ = inputs(B, S, S, H, D)
        with self.assertRaisesRegex(ValueError, r"^mask_method 'R2P': expected 'auto', 'r2p', 'slices' or 'words'$"):
            flashmask_attention(q, k, v, None, True, mask_method="R2P")
        # the method that is not the library's is built for the skip variant alone
        with self.assertRaisesRegex(fmsim.FmsimError, "mask method 1 is not built"):
            flashmask_attention(q, k, v, None, True, variant="noskip", mask_method="slices")
        o = flashmask_attention(q, k, v, None, True, variant="noskip", mask_method="r2p")  # the default: taken
        self.assertTrue(torch.equal(o, flashmask_attention(q, k, v, None, True, mask_method="slices")))
        # words is built for skip alone too, and runs r2p elsewhere: taken, the same bits
        o = flashmask_attention(q, k, v, None, True, variant="noskip", mask_method="words")
        self.assertTrue(torch.equal(o, flashmask_attention(q, k, v, None, True, mask_method="words")))
        for m in ("r2p", "words"):
            with self.assertRaisesRegex(fmsim.FmsimError, rf"^mask method {m}: kernel sm80 has one way"):
                flashmask_attention(q, k, v, None, True, kernel="sm80", mask_method=m)

    def test_words_past_their_budget_run_r2p(self):
        # per-head sets at 8K, head dim 128: 32 x 64 x 64 tiles of 3 KiB of words, 384 MiB, past
        # FM90M_WORDS_BUDGET (256 MiB): the forward runs r2p (one stderr line), the same bits
        B, H, S, D = 1, 32, 8192, 128
        sri, causal = fmsim.family("random_eviction", S, batch=B, heads=H, seed=5).to_paddle()
        self.assertEqual(sri.shape[1], H, "one interval set per head")
        sri = torch.as_tensor(sri, device="cuda")
        q, k, v, _ = inputs(B, S, S, H, D, seed=13)
        o, lse = flashmask_attention(q, k, v, sri, causal, return_lse=True, mask_method="words")
        o2, lse2 = flashmask_attention(q, k, v, sri, causal, return_lse=True, mask_method="r2p")
        self.assertTrue(torch.equal(o, o2) and torch.equal(lse, lse2))


class Instrumented(unittest.TestCase):
    def test_profile_classes_match_the_cpu(self):
        B, H, S, D = 1, 2, 2048, 128
        m = fmsim.family("share_question", S)
        sri, causal = m.to_paddle()
        q, k, v, do = inputs(B, S, S, H, D)
        p = flashmask_attention_profile(q, k, v, torch.as_tensor(sri, device="cuda"), causal, dout=do)
        torch.cuda.synchronize()
        seen = fmsim.from_paddle(sri, causal)  # the vectors the kernel reads (the paddle form's)
        for cls, cyc, tile in ((p.tile_class, p.tile_cycles, p.tile), (p.tile_class_bwd, p.tile_cycles_bwd, p.tile_bwd)):
            cpu = seen.tile_classes(*tile)[0, 0]  # [Tr, Tc], the min/max rule at the kernel's tile
            for h in range(H):
                self.assertTrue(np.array_equal(cls[0, h].cpu().numpy(), cpu), f"classes at {tile} differ")
            visited = cls != 0
            self.assertTrue((cyc[visited] > 0).all().item(), "a visited tile has no cycles")
            self.assertTrue((cyc[~visited] == 0).all().item(), "a skipped tile has cycles")
        ref = flashmask_attention(q, k, v, torch.as_tensor(sri, device="cuda"), causal)
        self.assertTrue(torch.equal(ref, p.out), "the instrumented forward's output differs")


def linrnn_reference(q, k, v, g, lens, scale):
    """fp64 token-by-token recurrence (no fmsim code): o (T, H, dv), final states (ndocs, H, dk, dv)."""
    T, H, dk = q.shape
    dv = v.shape[2]
    q, k, v, g = q.double(), k.double(), v.double(), g.double()
    o = torch.zeros(T, H, dv, dtype=torch.float64, device=q.device)
    finals, t = [], 0
    for L in lens:
        S = torch.zeros(H, dk, dv, dtype=torch.float64, device=q.device)
        for i in range(t, t + L):
            if i > t:
                S = S * torch.exp(g[i])[:, None, None]
            S = S + k[i][:, :, None] * v[i][:, None, :]
            o[i] = scale * torch.einsum("hk,hkv->hv", q[i], S)
        finals.append(S)
        t += L
    return o, torch.stack(finals)


class LinearRnn(unittest.TestCase):
    """fmsim.linrnn (the chunkwise linear-attention kernel) against an fp64 recurrence
    written here: outputs within 1e-3 of the largest |o| beyond the output's own bf16
    rounding, final states within 1e-3, the variants bit for bit."""
    def test_against_the_recurrence(self):
        try:
            from fmsim.linrnn import chunk_linear_attention
        except ImportError as e:
            self.skipTest(f"fmsim.linrnn: {e}")
        gen = torch.Generator(device="cuda").manual_seed(9)
        for dk, dv, chunk, sub, lens in ((64, 64, 64, 16, [5, 16, 17, 90, 128]),
                                         (128, 256, 64, 16, [16] * 8 + [200]),
                                         (128, 128, 128, 32, [300, 1, 2, 33]),
                                         (64, 128, 128, 64, [333])):
            T, H = sum(lens), 2
            q, k = (torch.randn(T, H, dk, device="cuda", generator=gen).bfloat16() for _ in range(2))
            v = torch.randn(T, H, dv, device="cuda", generator=gen).bfloat16()
            g = torch.nn.functional.logsigmoid(torch.randn(T, H, device="cuda", generator=gen) + 2)
            cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
            what = f"dk {dk} dv {dv} C {chunk} c {sub} lengths {lens}"
            ref, ref_final = linrnn_reference(q, k, v, g, lens, dk ** -0.5)
            outs = {}
            for var in ("skip", "causal", "noskip"):
                outs[var] = chunk_linear_attention(q, k, v, g, cu, chunk=chunk, sub=sub, variant=var,
                                                   output_final_state=True)
            o, final = outs["skip"]
            for var in ("causal", "noskip"):
                self.assertTrue(torch.equal(outs[var][0], o) and torch.equal(outs[var][1], final),
                                f"{what}: {var} differs from skip")
            bf16_err = float((ref.bfloat16().double() - ref).abs().max())
            err = float((o.double() - ref).abs().max())
            self.assertLessEqual(err, bf16_err + 1e-3 * float(ref.abs().max()), f"{what}: output error {err:.3g}")
            ferr = float((final.double() - ref_final).abs().max() / ref_final.abs().max())
            self.assertLess(ferr, 1e-3, f"{what}: final state error {ferr:.3g}")


class Workspace(unittest.TestCase):
    def test_pool_keeps_then_trims(self):
        """The backward's fp32 dQ accumulator (4 bytes per element of q) stays
        reserved in fmsim's pool after a synchronization, and trim_workspace
        gives it back to the driver (kernels/fm_workspace.cuh)."""
        from fmsim.torch import trim_workspace
        B, H, S, D = 2, 8, 8192, 128
        acc = B * H * S * D * 4  # 128 MiB
        sri, causal = fmsim.family("causal_document", S).to_paddle()
        sri = torch.as_tensor(sri, device="cuda")
        q, k, v, do = inputs(B, S, S, H, D, seed=5)
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        flashmask_attention(qg, kg, vg, sri, causal, deterministic=True).backward(do)
        torch.cuda.synchronize()
        kept = torch.cuda.mem_get_info()[0]
        trim_workspace()
        torch.cuda.synchronize()
        freed = torch.cuda.mem_get_info()[0] - kept
        self.assertGreaterEqual(freed, 0.9 * acc, f"trim gave back {freed} bytes, the accumulator is {acc}")
        # a second backward after the trim runs and gives the same bits
        g1 = (qg.grad.clone(), kg.grad.clone(), vg.grad.clone())
        for t in (qg, kg, vg):
            t.grad = None
        flashmask_attention(qg, kg, vg, sri, causal, deterministic=True).backward(do)
        for a, b in zip(g1, (qg.grad, kg.grad, vg.grad)):
            self.assertTrue(torch.equal(a, b), "gradients after trim_workspace differ")
        with self.assertRaises(ValueError):
            trim_workspace(keep_bytes=-1)


class CppAutograd(unittest.TestCase):
    """The C++ autograd Function against the Python one: the same library calls with
    the same arguments, so the same bits (outputs, lse, gradients, strides), and the
    environment switch."""
    @classmethod
    def setUpClass(cls):
        cls.backend, cls.why = ft.autograd_backend(reason=True)
        cls.cpp = ft._cpp

    def setUp(self):
        if self.backend != "cpp":
            if os.environ.get("FMSIM_TORCH_CPP", "").strip() == "0":
                self.skipTest("FMSIM_TORCH_CPP=0: the Python autograd Function only")
            self.fail(f"the C++ autograd op is not in use: {self.why}")

    def tearDown(self):
        ft._use_cpp(self.cpp)

    def assert_fast_path(self, path, expect, before, after, counter):
        """The caches' counts around one call: `counter` ("hits" or "hits_nograd") moved
        only on the fast path, by one on an expected hit; an expected miss was remembered."""
        hits = after[counter] - before[counter]
        if path != "fast":
            self.assertEqual(hits, 0, f"{path}: the fast path ran")
        elif expect is not None:
            self.assertEqual(hits, int(expect == "hit"), f"expected a {expect}: {before} -> {after}")
            if expect == "miss":
                self.assertEqual(after["remembered"] - before["remembered"], 1, "the miss was not remembered")

    def run_path(self, path, q, k, v, sri, causal, do, expect=None, **kw):
        """One forward and backward through `path`: "python" (the Python Function),
        "cpp" (the C++ Function, the plan and intervals looked up by Python) or "fast"
        (the default: the C++ Function from the C++ caches where they hold the call;
        expect="hit" or "miss" says which this call must be)."""
        ft._use_cpp(None if path == "python" else self.cpp, fast=path == "fast")
        before = self.cpp.cache_stats()
        qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))  # clone keeps a bhsd view's strides
        out = flashmask_attention(qg, kg, vg, sri, causal, **kw)
        after = self.cpp.cache_stats()
        self.assert_fast_path(path, expect, before, after, "hits")
        o, lse = out if kw.get("return_lse") else (out, None)
        want = "CppNode<fmsim::FlashMask" if path != "python" else "_FlashMask"
        self.assertIn(want, o.grad_fn.name())
        o.backward(do)
        return {"o": o.detach(), "lse": lse, "dq": qg.grad, "dk": kg.grad, "dv": vg.grad}

    def paths(self, q, k, v, sri, causal, do, **kw):
        """The Python Function, the C++ one, and the fast path's miss then hit."""
        self.cpp.clear_caches()
        return {"python": self.run_path("python", q, k, v, sri, causal, do, **kw),
                "cpp": self.run_path("cpp", q, k, v, sri, causal, do, **kw),
                "fast miss": self.run_path("fast", q, k, v, sri, causal, do, expect="miss", **kw),
                "fast hit": self.run_path("fast", q, k, v, sri, causal, do, expect="hit", **kw)}

    def assert_all_same(self, res, what):
        for name, r in res.items():
            if name != "python":
                self.assert_same(res["python"], r, f"{what}: {name}")

    def assert_same(self, a, b, what):
        for name in a:
            if a[name] is None:
                self.assertIsNone(b[name], f"{what}: {name}")
                continue
            x, y = a[name], b[name]
            self.assertEqual((x.dtype, tuple(x.shape), x.stride()), (y.dtype, tuple(y.shape), y.stride()),
                             f"{what}: {name}'s dtype, shape or strides differ")
            self.assertTrue(torch.equal(x, y), f"{what}: {name} differs (max {max_err(x, y):.3g})")

    @staticmethod
    def bit_cases():
        """(what, B, H, Sq, Sk, D, sri, causal, layout, return_lse, dout dtype) of the bits tests."""
        rng = np.random.default_rng(21)

        def random_sri(Sq, Sk, causal, k):
            a = rng.integers(0, Sq + 1, size=(1, 1, Sk, 1))
            cols = [a, np.minimum(a + rng.integers(0, Sq // 2 + 1, size=a.shape), Sq)]
            if not causal:
                cols += [np.zeros_like(a), rng.integers(0, Sq // 3 + 1, size=a.shape)]
            sri = np.concatenate(cols, -1)[..., {1: [0], 2: [0, 1] if causal else [0, 3], 4: [0, 1, 2, 3]}[k]]
            return torch.as_tensor(np.ascontiguousarray(sri).astype(np.int32), device="cuda")

        fam = lambda name, S, **kw: torch.as_tensor(fmsim.family(name, S, **kw).to_paddle()[0], device="cuda")  # noqa: E731
        cases = [  # (what, B, H, Sq, Sk, D, sri, causal, layout, return_lse, dout dtype)
            ("causal_document", 2, 2, 1024, 1024, 128, fam("causal_document", 1024), True, "bshd", False, torch.bfloat16),
            ("document bidir", 1, 2, 1024, 1024, 64, fam("document", 1024), False, "bhsd", True, torch.bfloat16),
            ("per-head", 2, 3, 512, 512, 128, fam("random_eviction", 512, batch=2, heads=3, seed=5), True, "bshd",
             True, torch.float32),
            ("causal Sq<Sk", 1, 2, 768, 1024, 128, random_sri(768, 1024, True, 2), True, "bhsd", False, torch.float32),
            ("bidir Sq>Sk", 1, 2, 1024, 640, 128, random_sri(1024, 640, False, 4), False, "bshd", True, torch.bfloat16),
            ("causal-1 Sq<Sk", 2, 1, 300, 1000, 64, random_sri(300, 1000, True, 1), True, "bshd", False, torch.bfloat16),
            ("bidir-2 Sq<Sk", 1, 2, 512, 896, 64, random_sri(512, 896, False, 2), False, "bhsd", False, torch.bfloat16),
            ("no intervals, causal", 1, 2, 640, 1024, 128, None, True, "bhsd", True, torch.bfloat16),
            ("no intervals, full", 1, 2, 1024, 512, 128, None, False, "bshd", False, torch.bfloat16),
        ]
        return cases

    def test_bits_equal_the_python_function(self):
        for what, B, H, Sq, Sk, D, sri, causal, layout, lse, dt in self.bit_cases():
            with self.subTest(case=what, layout=layout):
                q, k, v, do = inputs(B, Sq, Sk, H, D, seed=len(what))
                if layout == "bhsd":
                    q, k, v, do = (t.transpose(1, 2) for t in (q, k, v, do))
                do = do.to(dt)
                kw = dict(return_lse=lse, deterministic=True, layout=layout)
                self.assert_all_same(self.paths(q, k, v, sri, causal, do, **kw), f"{what} {layout}")

    # ---- calls without autograd: the fast path's forward alone against Python's _fwd ----

    def run_nograd(self, path, q, k, v, sri, causal, expect=None, how="no_grad", **kw):
        """One call without autograd through `path`: "python" (Python's lookups and _fwd)
        or "fast" (the C++ fast path where its caches hold the call; expect="hit" or
        "miss" says which this call must be). how="no_grad": inputs that require grad,
        under torch.no_grad(); "plain": inputs that require none."""
        ft._use_cpp(self.cpp, fast=path == "fast")
        before = self.cpp.cache_stats()
        if how == "no_grad":
            qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
            with torch.no_grad():
                out = flashmask_attention(qg, kg, vg, sri, causal, **kw)
        else:
            out = flashmask_attention(q.detach(), k.detach(), v.detach(), sri, causal, **kw)
        after = self.cpp.cache_stats()
        self.assertEqual(after["hits"], before["hits"], "a no-grad call took the autograd route")
        self.assert_fast_path(path, expect, before, after, "hits_nograd")
        o, lse = out if kw.get("return_lse") else (out, None)
        self.assertIsNone(o.grad_fn)
        self.assertFalse(o.requires_grad)
        if lse is not None:
            self.assertFalse(lse.requires_grad)
        return {"o": o, "lse": lse}

    def nograd_paths(self, q, k, v, sri, causal, **kw):
        """Python's no-grad path, and the fast path's miss then hits (under no_grad(), and
        with inputs that need no grad)."""
        self.cpp.clear_caches()
        return {"python": self.run_nograd("python", q, k, v, sri, causal, **kw),
                "fast miss": self.run_nograd("fast", q, k, v, sri, causal, expect="miss", **kw),
                "fast hit": self.run_nograd("fast", q, k, v, sri, causal, expect="hit", **kw),
                "fast hit, plain": self.run_nograd("fast", q, k, v, sri, causal, expect="hit", how="plain", **kw)}

    def test_nograd_bits_equal_the_python_path(self):
        """Every bits case (both layouts, Sq != Sk, per-head masks, no intervals), with and
        without return_lse (the lse returned, or written to the scratch buffer)."""
        for what, B, H, Sq, Sk, D, sri, causal, layout, _, _ in self.bit_cases():
            q, k, v, _ = inputs(B, Sq, Sk, H, D, seed=len(what))
            if layout == "bhsd":
                q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            for lse in (False, True):
                with self.subTest(case=what, layout=layout, return_lse=lse):
                    kw = dict(return_lse=lse, layout=layout)
                    res = self.nograd_paths(q, k, v, sri, causal, **kw)
                    self.assert_all_same(res, f"no grad: {what} {layout}")
                    if lse:  # an autograd call hits what the no-grad miss remembered (one key): o and lse alike
                        ag = self.run_path("fast", q, k, v, sri, causal, torch.zeros_like(q), expect="hit", **kw)
                        self.assert_same(res["python"], {"o": ag["o"], "lse": ag["lse"]}, f"autograd: {what}")

    def test_nograd_on_a_side_stream_and_noskip(self):
        sri, q, k, v, _ = side_stream_inputs()
        res = on_side_stream(lambda: {lse: self.nograd_paths(q, k, v, sri, True, variant="noskip", return_lse=lse)
                                      for lse in (False, True)})
        for lse, r in res.items():
            self.assert_all_same(r, f"no grad, side stream, noskip, return_lse={lse}")

    def test_nograd_scratch_once_per_plan_and_stream(self):
        """The lse of a no-grad call without return_lse goes to the C++ plan's buffer for
        the current stream: made at the plan's first hit on that stream, then reused there;
        each call's o equals Python's path's on that stream."""
        B, H, S, D = 1, 3, 384, 64  # a plan of its own (Python's plans emptied too, below)
        q, k, v, _ = inputs(B, S, S, H, D, seed=12)
        sri = torch.as_tensor(fmsim.family("causal_document", S).to_paddle()[0], device="cuda")
        ft._plans.clear()  # fresh plans: no scratch from an earlier test
        self.cpp.clear_caches()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        main = torch.cuda.current_stream()

        def call(stream, s, expect, scratch):
            with torch.cuda.stream(stream):
                py = self.run_nograd("python", q, k, v, s, True)
                fa = self.run_nograd("fast", q, k, v, s, True, expect=expect)
            self.assert_same(py, fa, f"{expect} on {stream}")
            self.assertEqual(self.cpp.cache_stats()["scratch"], scratch, f"{expect} on {stream}")

        # no startend: one intervals entry per stream, so both streams keep hitting
        call(main, None, "miss", 0)
        call(main, None, "hit", 1)
        call(main, None, "hit", 1)
        call(side, None, "miss", 1)
        call(side, None, "hit", 2)
        call(side, None, "hit", 2)
        call(main, None, "hit", 2)
        call(side, None, "hit", 2)
        # a startend (another plan key): its own buffers, once per stream again
        call(main, sri, "miss", 2)
        call(main, sri, "hit", 3)
        call(main, sri, "hit", 3)
        call(side, sri, "miss", 3)  # one intervals entry per startend, as in Python
        call(side, sri, "hit", 4)
        call(side, sri, "hit", 4)
        # return_lse: a new lse per call, no scratch
        with torch.cuda.stream(side):
            a = self.run_nograd("fast", q, k, v, sri, True, expect="hit", return_lse=True)
            b = self.run_nograd("fast", q, k, v, sri, True, expect="hit", return_lse=True)
        self.assertNotEqual(a["lse"].data_ptr(), b["lse"].data_ptr())
        self.assertTrue(torch.equal(a["lse"], b["lse"]))
        self.assertEqual(self.cpp.cache_stats()["scratch"], 4)
        torch.cuda.synchronize()

    def test_nograd_misaligned_refused_like_python(self):
        B, H, S, D = 1, 2, 256, 64
        q, k, v, _ = inputs(B, S, S, H, D, seed=13)
        odd = torch.empty(q.numel() + 8, dtype=q.dtype, device="cuda")[1:1 + q.numel()].view(q.shape).copy_(q)
        self.assertEqual(odd.stride(), q.stride())
        self.cpp.clear_caches()
        ft._use_cpp(self.cpp)
        self.run_nograd("fast", q, k, v, None, True, expect="miss")
        for path in ("python", "fast"):
            ft._use_cpp(self.cpp, fast=path == "fast")
            with self.subTest(path=path), self.assertRaisesRegex(ValueError, "16-byte aligned"):
                flashmask_attention(odd, k, v, None, True)
        self.assertEqual(self.cpp.cache_stats()["hits_nograd"], 1, "the misaligned call was not a hit")

    def test_on_a_side_stream_and_noskip(self):
        sri, q, k, v, do = side_stream_inputs()
        res = on_side_stream(lambda: self.paths(q, k, v, sri, True, do, variant="noskip", deterministic=True,
                                                return_lse=True))
        self.assert_all_same(res, "side stream, noskip")

    def test_not_deterministic_outputs_equal(self):
        """Without deterministic, dQ's atomics may order differently run to run: the
        outputs and lse are the same bits, the gradients agree to the kernels' tolerance."""
        B, H, S, D = 2, 2, 1024, 128
        sri = torch.as_tensor(fmsim.family("causal_document", S).to_paddle()[0], device="cuda")
        q, k, v, do = inputs(B, S, S, H, D, seed=6)
        py, cc = (self.run_path(path, q, k, v, sri, True, do, return_lse=True) for path in ("python", "fast"))
        for name in ("o", "lse"):
            self.assertTrue(torch.equal(py[name], cc[name]), f"{name} differs")
        for name in ("dq", "dk", "dv"):
            ref = py[name].float()
            self.assertLessEqual(max_err(py[name], cc[name]), 3e-2 + 2e-2 * float(ref.abs().max()), name)

    def test_fast_path_in_place_change_freed_startend_streams(self):
        """The fast path's caches against the Python Function, call by call: a startend
        changed in place converts again, a new startend at a freed one's id is not taken
        for it, another stream converts there; each call's bits equal the Python path's."""
        B, H, S, D = 1, 2, 512, 128
        q, k, v, do = inputs(B, S, S, H, D, seed=8)
        fam = lambda name, **kw: torch.as_tensor(fmsim.family(name, S, **kw).to_paddle()[0], device="cuda")  # noqa: E731
        self.cpp.clear_caches()

        def check(sri, expect, what, causal=True):
            py = self.run_path("python", q, k, v, sri, causal, do, deterministic=True, return_lse=True)
            fa = self.run_path("fast", q, k, v, sri, causal, do, expect=expect, deterministic=True, return_lse=True)
            self.assert_same(py, fa, what)
            return py

        sri = fam("causal_document")
        check(sri, "miss", "first call")
        first = check(sri, "hit", "second call")
        sri.copy_(fam("sliding_window"))  # in place: the version moves
        changed = check(sri, "miss", "after an in-place change")
        self.assertFalse(torch.equal(first["o"], changed["o"]), "the in-place change did not change the output")
        check(sri, "hit", "after an in-place change, again")
        old = id(sri)
        del sri
        for i in range(100):  # a new startend tensor, very likely at the freed one's id at some point
            sri = fam("random_eviction", seed=i)
            check(sri, "miss", f"a new startend tensor ({i})")
            if id(sri) == old:
                break
        check(sri, "hit", "the new startend, again")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            check(sri, "miss", "on a side stream")
            check(sri, "hit", "on a side stream, again")
        torch.cuda.current_stream().wait_stream(side)
        check(sri, "miss", "back on the current stream")  # one entry per startend, as in Python: the side's
        check(sri, "hit", "back on the current stream, again")
        check(None, "miss", "no startend")
        check(None, "hit", "no startend, again")
        check(None, "miss", "no startend, bidirectional", causal=False)
        torch.cuda.synchronize()
        st = self.cpp.cache_stats()
        self.assertEqual(st["refused"], 0, st)

    def test_fast_path_declines(self):
        """Calls the fast path leaves to Python: no autograd, a CPU or NumPy startend (copied
        per call), a non-contiguous one; Python's path still gives the same bits."""
        B, H, S, D = 1, 2, 256, 64
        q, k, v, do = inputs(B, S, S, H, D, seed=9)
        sri = torch.as_tensor(fmsim.family("causal_document", S).to_paddle()[0], device="cuda")
        self.cpp.clear_caches()
        ft._use_cpp(self.cpp)
        for what, s in (("cpu", sri.cpu()), ("numpy", sri.cpu().numpy()),
                        ("non-contiguous", sri.repeat(1, 1, 1, 2)[..., :1])):
            with self.subTest(startend=what):
                for _ in range(2):
                    res = [self.run_path(p, q, k, v, s, True, do, deterministic=True) for p in ("python", "fast")]
                    self.assert_same(res[0], res[1], what)
                    for how in ("no_grad", "plain"):  # without autograd: declined alike
                        res = [self.run_nograd(p, q, k, v, s, True, how=how) for p in ("python", "fast")]
                        self.assert_same(res[0], res[1], f"{what}, no grad ({how})")
                st = self.cpp.cache_stats()
                self.assertEqual((st["hits"], st["hits_nograd"], st["remembered"]), (0, 0, 0), what)

    def run_child(self, env: dict, code: str, drop=()) -> str:
        """The last line the child prints (a build may print before it)."""
        e = dict(os.environ, **env)
        for name in ("FMSIM_TORCH_CPP_VERBOSE", *drop):
            e.pop(name, None)
        e["PYTHONPATH"] = PYDIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
        r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        lines = r.stdout.strip().splitlines()
        self.assertTrue(lines, f"the child printed nothing; stderr: {r.stderr[-2000:]}")
        return lines[-1]

    def test_env_zero_gives_the_python_function(self):
        code = (
            "import sys, torch, fmsim.torch as ft\n"
            "assert ft._cpp_state is None, 'import decided the backend'\n"
            "q, k, v = (torch.randn(1, 256, 2, 64, device='cuda', dtype=torch.bfloat16) for _ in range(3))\n"
            "qg = q.clone().requires_grad_()\n"
            "o = ft.flashmask_attention(qg, k, v, None, True)\n"
            "o.float().sum().backward()\n"
            "o2 = ft.flashmask_attention(qg, k, v, None, True)\n"
            "hits = ft._cpp.cache_stats()['hits'] if ft._cpp is not None else -1\n"
            "print(ft.autograd_backend(), o.grad_fn.name(), any(m.startswith('fmsim_autograd_op') for m in sys.modules),\n"
            "      o2.grad_fn.name(), hits)\n")
        backend, node, loaded, node2, hits = self.run_child({"FMSIM_TORCH_CPP": "0"}, code).split()
        self.assertEqual(backend, "python")
        self.assertIn("_FlashMask", node)
        self.assertIn("_FlashMask", node2)
        self.assertEqual(loaded, "False", "FMSIM_TORCH_CPP=0 still loaded the C++ op")
        backend, node, _, node2, hits = self.run_child({"FMSIM_TORCH_CPP": "1"}, code).split()
        self.assertEqual(backend, "cpp")
        self.assertIn("CppNode<fmsim::FlashMask", node)
        self.assertIn("CppNode<fmsim::FlashMask", node2)
        self.assertEqual(hits, "1", "the second call did not take the fast path")

    def test_failed_build_warns_once(self):
        """FMSIM_TORCH_CPP unset and a build that fails (a compiler that does not exist, a
        fresh extension folder): one RuntimeWarning that names FMSIM_TORCH_CPP=0, and the
        Python Function."""
        import tempfile
        code = ("import warnings, torch, fmsim.torch as ft\n"
                "warnings.simplefilter('always')\n"
                "q, k, v = (torch.randn(1, 256, 2, 64, device='cuda', dtype=torch.bfloat16) for _ in range(3))\n"
                "qg = q.clone().requires_grad_()\n"
                "with warnings.catch_warnings(record=True) as w:\n"
                "    warnings.simplefilter('always')\n"
                "    for _ in range(3):\n"
                "        o = ft.flashmask_attention(qg, k, v, None, True)\n"
                "    ft.autograd_backend()\n"
                "ours = [x for x in w if 'fmsim.torch' in str(x.message)]\n"
                "print(len(ours), ours[0].category.__name__ if ours else '-', 'FMSIM_TORCH_CPP=0' in str(ours[0].message) "
                "if ours else '-', ft.autograd_backend(), o.grad_fn.name())\n")
        with tempfile.TemporaryDirectory() as d:
            env = {"TORCH_EXTENSIONS_DIR": d, "CXX": os.path.join(d, "no-such-c++")}
            out = self.run_child(env, code, drop=("FMSIM_TORCH_CPP",)).split()
        self.assertEqual(out[:4], ["1", "RuntimeWarning", "True", "python"], out)
        self.assertIn("_FlashMask", out[4])

    def test_nograd_call_builds_nothing(self):
        """A call without autograd never decides the backend (never builds the C++ op); once
        it is in use (autograd_backend() here), no-grad calls take its fast path."""
        code = ("import sys, torch, fmsim.torch as ft\n"
                "q, k, v = (torch.randn(1, 256, 2, 64, device='cuda', dtype=torch.bfloat16) for _ in range(3))\n"
                "o = [ft.flashmask_attention(q, k, v, None, True) for _ in range(2)]\n"
                "none = (ft._cpp_state is None, any(m.startswith('fmsim_autograd_op') for m in sys.modules))\n"
                "ft.autograd_backend()\n"
                "o += [ft.flashmask_attention(q, k, v, None, True) for _ in range(2)]\n"
                "print(*none, ft._cpp.cache_stats()['hits_nograd'], all(torch.equal(o[0], x) for x in o))\n")
        out = self.run_child({"FMSIM_TORCH_CPP": "1"}, code).split()
        self.assertEqual(out, ["True", "False", "1", "True"])

    def test_import_compiles_nothing(self):
        out = self.run_child({}, "import sys, fmsim, fmsim.torch as ft\n"
                                 "print(ft._cpp_state is None, ft._cpp is None, "
                                 "any(m.startswith('fmsim_autograd_op') for m in sys.modules))")
        self.assertEqual(out, "True True False")


class Errors(unittest.TestCase):
    def test_refusals(self):
        q, k, v, _ = inputs(1, 256, 256, 2, 128)
        sri = torch.zeros((1, 1, 256, 1), dtype=torch.int32, device="cuda")
        cases = [
            (TypeError, "bfloat16", lambda: flashmask_attention(q.half(), k.half(), v.half(), sri, True)),
            (ValueError, "CUDA", lambda: flashmask_attention(q.cpu(), k.cpu(), v.cpu(), sri, True)),
            (ValueError, "64 or 128", lambda: flashmask_attention(q[..., :96].contiguous(), k[..., :96].contiguous(),
                                                                  v[..., :96].contiguous(), sri, True)),
            (ValueError, "contiguous", lambda: flashmask_attention(q.transpose(1, 2), k, v, sri, True)),
            (ValueError, "k = 4", lambda: flashmask_attention(q, k, v, sri.repeat(1, 1, 1, 4), True)),
            (ValueError, "expected [1 or", lambda: flashmask_attention(q, k, v, sri[:, :, :100], True)),
            (TypeError, "int32", lambda: flashmask_attention(q, k, v, sri.long(), True)),
            (ValueError, "variant", lambda: flashmask_attention(q, k, v, sri, True, variant="dense")),
        ]
        for exc, words, call in cases:
            with self.subTest(words=words):
                with self.assertRaises(exc) as cm:
                    call()
                self.assertIn(words, str(cm.exception))
                self.assertEqual(len(str(cm.exception).splitlines()), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
