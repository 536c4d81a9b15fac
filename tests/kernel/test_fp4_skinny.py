"""The fused GEMM entry points (W4A16, grouped / MoE) and the stacked grouped quantize.

CPU path: against fp4_kernels.reference within the documented bound (and the reference against
an independent float64 computation). CUDA: the kernels are really compiled (sm_90a, sm_120a in
the session build, sm_100a here with nvcc) and their SASS is read with cuobjdump: tensor-core
instructions present, no local memory. The arithmetic of the register-level E2M1 decode is
checked exhaustively here; the kernels' numerics are checked on a GPU by selfcheck('cuda') and
bench/bench_fp4.py.
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest
import torch

from fp4_helpers import KERNEL_SRC, cuda_home, same_bytes, sass_functions

OUT = [torch.bfloat16, torch.float16, torch.float32]


def _quant(fk, x):
    gs = 448.0 * 6.0 / float(x.abs().max())
    q, s = fk.scaled_fp4_quant(x, gs)
    return q, s, gs


def _worst(out, exact, bound):
    return float(((out.double() - exact).abs() / bound).max()) if out.numel() else 0.0


@pytest.mark.parametrize("adt", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("mnk", [(1, 1, 16), (1, 40, 128), (16, 33, 272), (70, 130, 1024), (0, 5, 32)],
                         ids=lambda t: "%dx%dx%d" % t)
def test_w4a16_within_bound(fk, ref, adt, mnk):
    m, n, k = mnk
    g = torch.Generator().manual_seed(m * 7919 + n * 31 + k)
    a = (torch.randn(m, k, generator=g) * 3).to(adt)
    bq, bsc, gb = _quant(fk, torch.randn(n, k, generator=g))
    for out_dtype in (None, *OUT):
        out = fk.scaled_fp4_w4a16_mm(a, bq, bsc, 1.0 / gb, out_dtype)
        assert out.shape == (m, n) and out.dtype == (adt if out_dtype is None else out_dtype)
        # independent float64 computation
        w = fk.dequantize_fp4(bq, bsc, 1.0, torch.float32).double()
        exact = (a.double() @ w.T) / gb
        torch.testing.assert_close(ref.scaled_fp4_w4a16_mm(a, bq, bsc, 1.0 / gb, torch.float64), exact,
                                   rtol=1e-12, atol=0)
        bound = ref.scaled_fp4_w4a16_mm_error_bound(a, bq, bsc, 1.0 / gb, out.dtype)
        assert _worst(out, exact, bound) <= 1.0
    # alpha as a tensor gives the same bytes as a float
    o1 = fk.scaled_fp4_w4a16_mm(a, bq, bsc, 0.25, torch.float32)
    o2 = fk.scaled_fp4_w4a16_mm(a, bq, bsc.view(torch.uint8), torch.tensor([0.25]), torch.float32)
    assert torch.equal(o1, o2)


def test_w4a16_rejects_bad_input(fk):
    bq = torch.zeros(4, 8, dtype=torch.uint8)
    bs = torch.zeros(4, 1, dtype=torch.uint8)
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        fk.scaled_fp4_w4a16_mm(torch.zeros(2, 16), bq, bs, 1.0)
    with pytest.raises(ValueError, match="b_q"):
        fk.scaled_fp4_w4a16_mm(torch.zeros(2, 32, dtype=torch.bfloat16), bq, bs, 1.0)
    with pytest.raises(ValueError, match="b_scale"):
        fk.scaled_fp4_w4a16_mm(torch.zeros(2, 16, dtype=torch.bfloat16), bq, torch.zeros(4, 2, dtype=torch.uint8), 1.0)


def _experts(fk, g, e, n, k):
    qs = [_quant(fk, torch.randn(n, k, generator=g)) for _ in range(e)]
    return (torch.stack([q for q, _, _ in qs]), torch.stack([s for _, s, _ in qs]),
            torch.tensor([gs for _, _, gs in qs]))


@pytest.mark.parametrize("offdt", [torch.int32, torch.int64])
def test_grouped_mm_within_bound(fk, ref, offdt):
    g = torch.Generator().manual_seed(5)
    e, n, k = 5, 48, 256
    sizes = [3, 0, 9, 1, 4]
    off = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist(), dtype=offdt)
    t = sum(sizes)
    a = torch.randn(t, k, generator=g)
    aq, asc, ga = _quant(fk, a)
    bq, bsc, gbs = _experts(fk, g, e, n, k)
    alphas = 1.0 / (ga * gbs)
    for alpha in (alphas, float(alphas[0]), alphas[:1].clone()):
        for out_dtype in OUT:
            out = fk.scaled_fp4_grouped_mm(aq, asc, bq, bsc, alpha, off, out_dtype)
            exact = ref.scaled_fp4_grouped_mm(aq, asc, bq, bsc, alpha, off, torch.float64)
            bound = ref.grouped_mm_error_bound(aq, bq, bsc, alpha, off, out_dtype, a_scale=asc)
            assert _worst(out, exact, bound) <= 1.0
            # row by row the same as the single-matrix GEMM with the row's expert
            lo, hi = int(off[2]), int(off[3])
            al2 = alpha[2] if isinstance(alpha, torch.Tensor) and alpha.numel() > 1 else alpha
            assert torch.equal(out[lo:hi], fk.scaled_fp4_mm(aq[lo:hi], bq[2], asc[lo:hi], bsc[2], al2, out_dtype))
    a16 = a.to(torch.bfloat16)
    out = fk.scaled_fp4_w4a16_grouped_mm(a16, bq, bsc, 1.0 / gbs, off)
    assert out.dtype == torch.bfloat16
    exact = ref.scaled_fp4_w4a16_grouped_mm(a16, bq, bsc, 1.0 / gbs, off, torch.float64)
    bound = ref.grouped_mm_error_bound(a16, bq, bsc, 1.0 / gbs, off, torch.bfloat16)
    assert _worst(out, exact, bound) <= 1.0


def test_grouped_mm_rejects_bad_offsets(fk):
    a = torch.zeros(4, 32, dtype=torch.bfloat16)
    bq = torch.zeros(2, 3, 16, dtype=torch.uint8)
    bs = torch.zeros(2, 3, 2, dtype=torch.uint8)
    for bad in ([0, 3, 2], [1, 2, 4], [0, 2, 5]):
        with pytest.raises(ValueError, match="expert_offsets"):
            fk.scaled_fp4_w4a16_grouped_mm(a, bq, bs, 1.0, torch.tensor(bad, dtype=torch.int32))
    with pytest.raises(ValueError, match="experts"):
        fk.scaled_fp4_w4a16_grouped_mm(a, bq, bs, 1.0, torch.tensor([0, 4], dtype=torch.int32))
    with pytest.raises(TypeError, match="int32 or int64"):
        fk.scaled_fp4_w4a16_grouped_mm(a, bq, bs, 1.0, torch.tensor([0.0, 2.0, 4.0]))
    with pytest.raises(ValueError, match="one per expert"):
        fk.scaled_fp4_w4a16_grouped_mm(a, bq, bs, torch.ones(3), torch.tensor([0, 2, 4], dtype=torch.int32))


def test_stacked_grouped_quant_equals_per_expert(fk, ref):
    g = torch.Generator().manual_seed(9)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        x = (torch.randn(600, 96, generator=g) * 4).to(dt)
        off = torch.tensor([0, 0, 130, 131, 450, 600], dtype=torch.int64)
        gss = torch.tensor([1.0, 2.0, 0.5, 448.0, 3.0])
        q, s = fk.scaled_fp4_grouped_quant(x, gss, expert_offsets=off)
        assert q.shape == (600, 48) and s.shape == (600, 6) and s.dtype == torch.float8_e4m3fn
        for e in range(5):
            lo, hi = int(off[e]), int(off[e + 1])
            rq, rs = ref.scaled_fp4_quant(x[lo:hi], gss[e])
            same_bytes(q[lo:hi], rq)
            same_bytes(s[lo:hi].view(torch.uint8), rs.view(torch.uint8))
        rq, rs = ref.scaled_fp4_grouped_quant(x, gss, expert_offsets=off)
        same_bytes(q, rq)
        same_bytes(s.view(torch.uint8), rs.view(torch.uint8))
    with pytest.raises(ValueError, match="expert_offsets"):
        fk.scaled_fp4_grouped_quant(x, gss, expert_offsets=torch.tensor([0, 5, 3, 600, 600, 600]))
    with pytest.raises(ValueError, match="swizzle"):
        fk.scaled_fp4_grouped_quant(x, gss, expert_offsets=off, swizzle=True)


def test_grouped_quant_list_packed_and_general_path(fk, ref):
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(m, 64, generator=g).to(torch.bfloat16) for m in (5, 0, 130, 1)]
    gss = [1.0, 2.0, 0.5, 3.0]
    qa, sa = fk.scaled_fp4_grouped_quant(xs, gss, packed=True)
    qs, ss = fk.scaled_fp4_grouped_quant(xs, gss)
    assert torch.equal(qa, torch.cat(qs)) and torch.equal(sa.view(torch.uint8), torch.cat(ss).view(torch.uint8))
    rqa, rsa = ref.scaled_fp4_grouped_quant(xs, gss, packed=True)
    same_bytes(qa, rqa)
    same_bytes(sa.view(torch.uint8), rsa.view(torch.uint8))
    # a non-contiguous matrix takes the general path and gives the same bytes
    nc = torch.randn(64, 5, generator=g).to(torch.bfloat16).t()
    xs2 = [xs[0], nc]
    q2, s2 = fk.scaled_fp4_grouped_quant(xs2, [1.0, 2.0])
    same_bytes(q2[1], fk.scaled_fp4_quant(nc.contiguous(), 2.0)[0])
    with pytest.raises(TypeError, match=r"xs\[1\]"):
        fk.scaled_fp4_grouped_quant([xs[0], "no"], [1.0, 2.0])


# ---- the register-level decode of the CUDA kernel (cuda_skinny.cu: decode8 / scales2) -------
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _bits_to(dtype, bits):
    return torch.tensor([bits], dtype=torch.int16).view(dtype).double().item()


@pytest.mark.parametrize("dtype,P,fix", [(torch.float16, 9, 2.0 ** 7), (torch.bfloat16, 6, 2.0 ** 119)],
                         ids=["fp16", "bf16"])
def test_register_decode_is_exact(dtype, P, fix):
    """Magnitude bits at P..P+2 and the sign at bit 15 give e2m1 * 2^-14 (fp16) / 2^-126 (bf16);
    times the block scale * 2^7 (fp16) / 2^119 (bf16), rounded to the same 16-bit format, that is
    exactly e2m1 * scale * 2^-7 for every code and every finite E4M3 scale byte."""
    placed = torch.tensor([((c & 7) << P) | ((c & 8) << 12) for c in range(16)], dtype=torch.int32)
    placed = placed.to(torch.int16).view(dtype)
    sbytes = torch.tensor([b for b in range(256) if b not in (0x7F, 0xFF)], dtype=torch.uint8)
    sf = sbytes.view(torch.float8_e4m3fn).double()
    scale16 = (sf * fix).to(dtype)
    assert torch.equal(scale16.double(), sf * fix)               # the scale register is exact
    prod = placed[:, None] * scale16[None, :]                     # one rounding in `dtype`
    vals = torch.tensor(E2M1 + [-v for v in E2M1], dtype=torch.float64)
    expect = vals[:, None] * sf[None, :] * 2.0 ** -7
    assert torch.equal(prod.double(), expect)
    assert float(expect[expect != 0].abs().min()) == 2.0 ** -17 and float(expect.abs().max()) == 21.0


# ---- CUDA: compiled, tensor-core SASS, no local memory -------------------------------------------
def test_fused_kernels_sass_sm90a_sm120a(fp4_build):
    """sm_90a: the skinny kernels run mma.sync (HMMA) on bf16 / fp16; sm_120a: the W4A4 kernel
    uses the block-scaled FP4 tensor-core MMA (OMMA ... E2M1.E2M1.UE4M3.4X)."""
    funcs = sass_functions(fp4_build.so, "skinny")
    k90 = {k: v for k, v in funcs.items() if k[0] == "sm_90a" and "skinny_kernel" in k[1]}
    assert len(k90) == 12, sorted(k[1] for k in k90)  # 3 activation kinds x 4 token tiles
    for (arch, name), text in k90.items():
        assert re.search(r"HMMA\.16816\.F32(\.BF16)?", text), name
        assert "LDGSTS" in text, name          # cp.async pipeline
        assert "LDL" not in text and "STL" not in text, name  # no spills / local memory
    o120 = {k: v for k, v in funcs.items() if k[0] == "sm_120a" and "skinny_omma_kernel" in k[1]}
    assert len(o120) == 4
    for (arch, name), text in o120.items():
        assert re.search(r"OMMA\.SF\.16864\.F32\.E2M1\.E2M1\.UE4M3\.4X", text), name
    # the sm_90a build of the OMMA kernel is an empty trap (it is dispatched on SM120 only)
    o90 = [v for k, v in funcs.items() if k[0] == "sm_90a" and "skinny_omma_kernel" in k[1]]
    assert o90 and all("OMMA" not in v for v in o90)


def test_fused_kernels_compile_for_sm100a(tmp_path):
    """nvcc builds cuda_skinny.cu for sm_100a (no block-scaled mma.sync there: the HMMA kernel)."""
    nvcc = os.path.join(cuda_home(), "bin", "nvcc")
    cubin = tmp_path / "skinny_sm100a.cubin"
    r = subprocess.run([nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_100a,code=sm_100a", "-cubin",
                        "-I", str(KERNEL_SRC / "csrc"), "-DFP4_CUDA_ARCHS=\"sm_100a\"", "-o", str(cubin),
                        str(KERNEL_SRC / "csrc" / "cuda_skinny.cu")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:]
    funcs = sass_functions(cubin, "skinny_kernel", arch="sm_100a")
    assert len(funcs) == 12
    for (arch, name), text in funcs.items():
        assert arch == "sm_100a" and "HMMA" in text and "LDL" not in text, name
