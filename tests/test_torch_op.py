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
"""
import math
import os
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy as np  # noqa: E402

import fmsim  # noqa: E402
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
