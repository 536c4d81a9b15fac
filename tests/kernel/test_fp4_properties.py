"""Hypothesis property tests on random blocks (CPU path vs reference and vs definitions)."""
from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp4_helpers import same_bytes

floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
finite = st.floats(min_value=-(2.0 ** 20), max_value=2.0 ** 20, allow_nan=False, width=32)
gscales = st.one_of(st.floats(min_value=2.0 ** -20, max_value=2.0 ** 20, width=32),
                    st.sampled_from([1.0, 448.0 * 6.0, 2.0 ** -20]))
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(vals=st.lists(floats, min_size=16, max_size=16 * 6), gs=gscales,
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_random_blocks_match_reference(fk, ref, vals, gs, dtype):
    n = len(vals) // 16 * 16
    x = torch.tensor(vals[:n], dtype=torch.float32).reshape(1, n).to(dtype)
    q, s = fk.scaled_fp4_quant(x, gs)
    rq, rs = ref.scaled_fp4_quant(x, gs)
    same_bytes(q, rq)
    same_bytes(s.view(torch.uint8), rs.view(torch.uint8))
    same_bytes(fk.dequantize_fp4(q, s, gs, dtype), ref.dequantize_fp4(q, s, gs, dtype))


@SETTINGS
@given(vals=st.lists(finite, min_size=16, max_size=16), gs=gscales)
def test_block_invariants(fk, vals, gs):
    """Codes never carry -0, magnitudes are monotone in |x|, the max element maps near 6."""
    x = torch.tensor(vals, dtype=torch.float32).reshape(1, 16)
    q, s = fk.scaled_fp4_quant(x, gs)
    codes = torch.stack([q[0] & 0xF, q[0] >> 4], dim=-1).reshape(16)
    assert not torch.any(codes == 8)
    mag = codes & 7
    order = torch.argsort(x[0].abs())
    assert torch.all(mag[order][1:] >= mag[order][:-1])
    sf = float(s.to(torch.float32)[0, 0])
    if float(x.abs().max()) * gs > 1e-30 and 1e-3 < sf < 448:
        assert int(mag.max()) >= 6      # the largest element lands on 4 or 6


@SETTINGS
@given(m=st.integers(1, 40), kb=st.integers(1, 12), seed=st.integers(0, 2 ** 16))
def test_swizzle_roundtrip(fk, ref, m, kb, seed):
    x = torch.randn(m, kb * 16, generator=torch.Generator().manual_seed(seed))
    _, s = fk.scaled_fp4_quant(x, 5.0)
    _, sw = fk.scaled_fp4_quant(x, 5.0, swizzle=True)
    mp, kp = sw.shape
    un = sw.view(torch.uint8).reshape(mp // 128, kp // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)
    un = un.reshape(mp, kp)
    assert torch.equal(un[:m, :kb], s.view(torch.uint8))
    assert int(un.sum()) == int(s.view(torch.uint8).to(torch.int64).sum())  # padding is zero
