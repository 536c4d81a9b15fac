"""scaled_fp4_mm (CPU path) against a float64 computation, within the documented bound."""
from __future__ import annotations

import pytest
import torch

OUT = [torch.bfloat16, torch.float16, torch.float32]


def _quant(fk, x):
    gs = 448.0 * 6.0 / float(x.abs().max())
    q, s = fk.scaled_fp4_quant(x, gs)
    return q, s, gs


@pytest.mark.parametrize("out_dtype", OUT, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("mnk", [(1, 1, 16), (17, 33, 48), (128, 64, 256), (70, 130, 1040)],
                         ids=lambda t: "%dx%dx%d" % t)
def test_mm_within_bound(fk, ref, out_dtype, mnk):
    m, n, k = mnk
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(n, k, generator=g)
    aq, asc, ga = _quant(fk, a)
    bq, bsc, gb = _quant(fk, b)
    alpha = 1.0 / (ga * gb)
    out = fk.scaled_fp4_mm(aq, bq, asc, bsc, alpha, out_dtype)
    assert out.shape == (m, n) and out.dtype == out_dtype
    # float64 computation written out independently of the reference module
    da = fk.dequantize_fp4(aq, asc, 1.0, torch.float32).double()
    db = fk.dequantize_fp4(bq, bsc, 1.0, torch.float32).double()
    exact = (da @ db.T) * alpha
    torch.testing.assert_close(ref.scaled_fp4_mm(aq, bq, asc, bsc, alpha, torch.float64), exact,
                               rtol=1e-12, atol=0)
    bound = ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, alpha, out_dtype)
    err = (out.double() - exact).abs()
    assert torch.all(err <= bound), float((err / bound).max())
    # the bound is meaningful: a few output ulps, not vacuous
    u = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}[out_dtype]
    scale = (da.abs() @ db.abs().T) * alpha
    assert torch.all(bound <= scale * (k * 2.0 ** -21 + 2 * u) + 1e-30)
    # and relative to the unquantized product the FP4 error is the expected size
    rel = float((out.double() - (a.double() @ b.double().T)).norm() / (a.double() @ b.double().T).norm())
    assert rel < 0.2, rel


def test_mm_alpha_tensor_and_scales_as_uint8(fk):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(8, 64, generator=g), torch.randn(4, 64, generator=g)
    aq, asc, ga = _quant(fk, a)
    bq, bsc, gb = _quant(fk, b)
    o1 = fk.scaled_fp4_mm(aq, bq, asc, bsc, 1.0 / (ga * gb), torch.float32)
    o2 = fk.scaled_fp4_mm(aq, bq, asc.view(torch.uint8), bsc.view(torch.uint8),
                          torch.tensor(1.0 / (ga * gb)), torch.float32)
    assert torch.equal(o1, o2)


def test_mm_nan_scale_propagates(fk):
    aq = torch.full((2, 8), 0x22, dtype=torch.uint8)
    asc = torch.tensor([[0x38], [0x7F]], dtype=torch.uint8).view(torch.float8_e4m3fn)
    bq = torch.full((3, 8), 0x22, dtype=torch.uint8)
    bsc = torch.full((3, 1), 0x38, dtype=torch.uint8).view(torch.float8_e4m3fn)
    out = fk.scaled_fp4_mm(aq, bq, asc, bsc, 1.0, torch.float32)
    assert torch.all(out[0] == 16.0)           # 16 * (1.0 * 1.0) * (1.0 * 1.0)
    assert torch.all(torch.isnan(out[1]))


def test_mm_shape_errors(fk):
    q = torch.zeros(4, 8, dtype=torch.uint8)
    s = torch.zeros(4, 1, dtype=torch.uint8)
    with pytest.raises(ValueError):
        fk.scaled_fp4_mm(q, torch.zeros(4, 16, dtype=torch.uint8), s, s, 1.0)
    with pytest.raises(ValueError):
        fk.scaled_fp4_mm(q, q, s, torch.zeros(4, 2, dtype=torch.uint8), 1.0)


def test_dequantized_operands_exact_in_bf16_and_fp16(fk, ref):
    """The CUDA GEMM path multiplies e2m1 * e4m3 values rounded to bf16 (fp16 for fp16 output):
    every such product (16 codes x 254 finite scale bytes) must be exactly representable."""
    codes = torch.arange(16, dtype=torch.uint8)
    sbytes = torch.tensor([b for b in range(256) if b not in (0x7F, 0xFF)], dtype=torch.uint8)
    vals = ref.e2m1_decode(codes).double()[:, None] * \
        sbytes.view(torch.float8_e4m3fn).double()[None, :]
    for dt in (torch.bfloat16, torch.float16):
        assert torch.equal(vals.to(dt).double(), vals), dt
    nz = vals[vals != 0].abs()
    assert float(nz.min()) == 2.0 ** -10 and float(nz.max()) == 6 * 448
    # and the dequantize kernel with global scale 1 produces exactly these values
    q = (codes[:, None] | (codes[:, None] << 4)).repeat(1, 8)           # [16, 8]: K = 16
    for sb in (0x01, 0x38, 0x7E, 0xB3):
        s = torch.full((16, 1), sb, dtype=torch.uint8).view(torch.float8_e4m3fn)
        for dt in (torch.bfloat16, torch.float16):
            out = fk.dequantize_fp4(q, s, 1.0, dt).double()
            exact = ref.dequantize_unscaled(q, s).double()
            assert torch.equal(out, exact), (sb, dt)
