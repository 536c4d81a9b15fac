"""CPU kernels vs the torch reference, bit for bit, plus independent oracles."""
from __future__ import annotations

import math

import pytest
import torch

from fp4_helpers import same_bytes

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(1, 16), (3, 48), (64, 256), (129, 160), (300, 1024)]
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * scale
    # a spread of block magnitudes: multiply each 16-block by 10^U(-4, 4)
    m, k = shape
    mags = 10.0 ** (torch.rand((m, k // 16, 1), generator=g) * 8 - 4)
    return (x.reshape(m, k // 16, 16) * mags).reshape(m, k).to(dtype)


def _gs(x):
    amax = float(x.float().abs().nan_to_num(0, 0, 0).max())
    return 448.0 * 6.0 / amax if amax > 0 else 1.0


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "%dx%d" % s)
def test_quant_matches_reference(fk, ref, dtype, shape):
    x = _rand(shape, dtype, seed=hash((shape, str(dtype))) & 0xFFFF)
    for gs in (_gs(x), 1.0, torch.tensor(0.37), torch.tensor([1e3], dtype=torch.float64)):
        q, s = fk.scaled_fp4_quant(x, gs)
        rq, rs = ref.scaled_fp4_quant(x, gs)
        assert q.dtype == torch.uint8 and q.shape == (shape[0], shape[1] // 2)
        assert s.dtype == torch.float8_e4m3fn and s.shape == (shape[0], shape[1] // 16)
        same_bytes(q, rq)
        same_bytes(s.view(torch.uint8), rs.view(torch.uint8))


def _edge_matrix(dtype):
    """One row per edge case, K = 64 (4 blocks)."""
    rows = []
    z = [0.0] * 64
    rows.append(z)                                                  # all zeros
    rows.append([-0.0] * 64)                                        # negative zeros
    r = [1.0] * 64; r[3] = float("nan"); rows.append(r)            # NaN in block 0
    r = [0.5] * 64; r[20] = float("inf"); r[40] = float("-inf"); rows.append(r)   # +-Inf
    r = [1e30 if i % 2 else -1e30 for i in range(64)]; rows.append(r)          # beyond saturation
    r = [2e-4 * (i + 1) for i in range(64)]; rows.append(r)        # tiny: subnormal E4M3 / 0 scale
    r = [0.01 * ((i * 7) % 5 - 2) for i in range(64)]
    for b in range(4):
        r[b * 16 + 5] = 1000.0                                      # one huge outlier per block
    rows.append(r)
    r = [v * 0.25 for v in range(-32, 32)]; rows.append(r)          # exact grid points / ties
    return torch.tensor(rows, dtype=torch.float32).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("gs", [1.0, 6.0, 448.0, 2.0 ** -10, 3e5])
def test_edge_cases_match_reference(fk, ref, dtype, gs):
    x = _edge_matrix(dtype)
    q, s = fk.scaled_fp4_quant(x, gs)
    rq, rs = ref.scaled_fp4_quant(x, gs)
    same_bytes(q, rq)
    same_bytes(s.view(torch.uint8), rs.view(torch.uint8))


def test_edge_case_semantics(fk):
    """The documented behaviour for zeros, NaN, Inf, saturation and tiny blocks."""
    x = _edge_matrix(torch.float32)
    q, s = fk.scaled_fp4_quant(x, 1.0)
    sb = s.view(torch.uint8)
    assert torch.all(q[0] == 0) and torch.all(sb[0] == 0)          # zeros -> scale 0, +0
    assert torch.all(q[1] == 0) and torch.all(sb[1] == 0)          # -0 encodes +0 too
    assert sb[2, 0] == 0x7F and torch.all(q[2, :8] == 0)           # NaN block: NaN scale, +0
    assert torch.all(sb[2, 1:] != 0x7F)                            # other blocks unaffected
    assert sb[3, 1] == 0x7E and sb[3, 2] == 0x7E                   # Inf -> scale 448 (satfinite)
    assert (q[3, 10] & 0xF) == 0x7 and (q[3, 20] & 0xF) == 0xF     # +Inf -> +6, -Inf -> -6
    assert torch.all(sb[4] == 0x7E)                                # 1e30 * 1 / 6 saturates: 448
    assert torch.all(q[4] == 0x7F)                                 # +6 (hi), -6 (lo)
    tiny = sb[5].to(torch.int32)
    assert torch.all(tiny < 0x08)                                  # subnormal E4M3 scales or 0
    assert tiny.max() > 0


def test_nan_global_scale_and_zero_global_scale(fk, ref):
    x = _edge_matrix(torch.float32)
    for gs in (float("nan"), 0.0, float("inf"), -2.0):
        q, s = fk.scaled_fp4_quant(x, gs)
        rq, rs = ref.scaled_fp4_quant(x, gs)
        same_bytes(q, rq)
        same_bytes(s.view(torch.uint8), rs.view(torch.uint8))


# ---- independent oracle: nearest E4M3 and nearest E2M1 by exhaustive search in float64

def _e4m3_table():
    vals = []
    for b in range(0x7F):  # positive finite codes 0..0x7E
        e, m = b >> 3, b & 7
        vals.append((m * 2.0 ** -9) if e == 0 else 2.0 ** (e - 7) * (1 + m / 8))
    return vals


E4M3 = _e4m3_table()


def nearest_even(v, grid):
    """Index of the grid value nearest to v (ties to the even index), saturating."""
    if v >= grid[-1]:
        return len(grid) - 1
    best = min(range(len(grid)), key=lambda i: (abs(grid[i] - v), i % 2))
    return best


def test_oracle_scale_and_codes(fk):
    x = _rand((40, 256), torch.float32, seed=7)
    gs = _gs(x)
    q, s = fk.scaled_fp4_quant(x, gs)
    sb = s.view(torch.uint8)
    gs32 = torch.tensor(gs, dtype=torch.float32)
    for r in range(x.shape[0]):
        for b in range(x.shape[1] // 16):
            blk = x[r, b * 16:(b + 1) * 16]
            amax = blk.abs().max()
            sv = float(gs32 * (amax / 6.0))           # fp32 arithmetic as documented
            assert sb[r, b] == nearest_even(sv, E4M3), (r, b)
            sf = torch.tensor(E4M3[sb[r, b]], dtype=torch.float32)
            rs = (gs32 / sf) if sf != 0 else torch.tensor(0.0)
            for i in range(16):
                v = float(blk[i] * rs)
                code = nearest_even(abs(v), E2M1)
                if code and v < 0:
                    code |= 8
                e = b * 16 + i
                got = (int(q[r, e // 2]) >> (4 * (e % 2))) & 0xF
                assert got == code, (r, e, v, got, code)


def test_swizzle_layout_independent_formula(fk, ref):
    for m, k in ((1, 16), (130, 80), (256, 128), (77, 1024)):
        x = _rand((m, k), torch.bfloat16, seed=m * k)
        _, s = fk.scaled_fp4_quant(x, 3.0)
        _, sw = fk.scaled_fp4_quant(x, 3.0, swizzle=True)
        kb = k // 16
        mp, kp = (m + 127) // 128 * 128, (kb + 3) // 4 * 4
        assert sw.shape == (mp, kp) and sw.dtype == torch.float8_e4m3fn
        flat = sw.view(torch.uint8).reshape(-1)
        plain = s.view(torch.uint8)
        expect = torch.zeros(mp * kp, dtype=torch.uint8)
        for r in range(mp):
            for c in range(kp):
                # 128x4 tiles; inside a tile: 32 rows x (4 row-groups of 32) x 4 columns
                off = (r // 128) * (kp // 4) * 512 + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
                expect[off] = plain[r, c] if (r < m and c < kb) else 0
        assert torch.equal(flat, expect)
        same_bytes(sw.view(torch.uint8), ref.swizzle_scales(s).view(torch.uint8))


def test_grouped_equals_per_matrix(fk):
    xs = [_rand((m, k), torch.bfloat16, seed=i) for i, (m, k) in
          enumerate([(5, 64), (0, 64), (130, 64), (33, 256), (1, 16)])]
    gss = torch.tensor([1.0, 2.0, 0.5, 448.0, 3.0])
    for swizzle in (False, True):
        qs, ss = fk.scaled_fp4_grouped_quant(xs, gss, swizzle=swizzle)
        assert len(qs) == len(ss) == len(xs)
        for x, g, q, s in zip(xs, gss, qs, ss):
            eq, es = fk.scaled_fp4_quant(x, g, swizzle=swizzle)
            same_bytes(q, eq)
            same_bytes(s.view(torch.uint8), es.view(torch.uint8))
    qs2, _ = fk.scaled_fp4_grouped_quant(xs, [1.0, 2.0, 0.5, 448.0, 3.0])
    for a, b in zip(qs, qs2):
        same_bytes(a, b)
    assert fk.scaled_fp4_grouped_quant([], []) == ([], [])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_dequant_matches_reference(fk, ref, dtype):
    x = torch.cat([_rand((50, 64), torch.float32, seed=3), _edge_matrix(torch.float32)])
    for gs in (1.0, _gs(x), 2.0 ** -12, 1e6):
        q, s = ref.scaled_fp4_quant(x, gs)
        same_bytes(fk.dequantize_fp4(q, s, gs, dtype), ref.dequantize_fp4(q, s, gs, dtype))
    # every byte value and a spread of scale bytes (incl. subnormal, max, NaN)
    q = torch.arange(256, dtype=torch.uint8).repeat(16, 1)
    s = torch.tensor([0, 1, 7, 8, 0x38, 0x7E, 0x7F, 0x80 | 0x38] * 4 * 16,
                     dtype=torch.uint8).reshape(16, 32).view(torch.float8_e4m3fn)
    same_bytes(fk.dequantize_fp4(q, s, 0.75, dtype), ref.dequantize_fp4(q, s, 0.75, dtype))


def test_round_trip_error_bound(fk):
    """|x - deq(quant(x))| <= max(sf, |x| * gs - 6 * sf) / gs elementwise (half an E2M1 step)."""
    x = _rand((64, 512), torch.float32, seed=11)
    gs = _gs(x)
    q, s = fk.scaled_fp4_quant(x, gs)
    y = fk.dequantize_fp4(q, s, gs, torch.float32).double()
    sf = s.to(torch.float32).double().repeat_interleave(16, dim=1)
    xd = x.double()
    bound = torch.maximum(sf, xd.abs() * gs - 6 * sf) / gs * (1 + 1e-6) + 1e-30
    assert torch.all((xd - y).abs() <= bound)
    rel = float((xd - y).norm() / xd.norm())
    assert rel < 0.12, rel   # NVFP4 on gaussian-like data: ~0.08


def test_input_validation(fk):
    with pytest.raises(ValueError, match="multiple of 16"):
        fk.scaled_fp4_quant(torch.zeros(4, 24), 1.0)
    with pytest.raises(TypeError, match="dtype"):
        fk.scaled_fp4_quant(torch.zeros(4, 32, dtype=torch.int32), 1.0)
    with pytest.raises(ValueError, match="2-D"):
        fk.scaled_fp4_quant(torch.zeros(32), 1.0)
    with pytest.raises(ValueError, match="scalar"):
        fk.scaled_fp4_quant(torch.zeros(4, 32), torch.ones(2))
    with pytest.raises(ValueError, match="unswizzled"):
        fk.dequantize_fp4(torch.zeros(4, 16, dtype=torch.uint8),
                          torch.zeros(4, 3, dtype=torch.uint8), 1.0)
    x = torch.zeros(0, 32)
    q, s = fk.scaled_fp4_quant(x, 1.0)
    assert q.shape == (0, 16) and s.shape == (0, 2)


def test_non_contiguous_and_unaligned_inputs(fk, ref):
    base = _rand((32, 160), torch.bfloat16, seed=5)
    for x in (base[:, 16:144], base[1:, :], base.T.contiguous().T[:, :128]):
        q, s = fk.scaled_fp4_quant(x, 2.0)
        rq, rs = ref.scaled_fp4_quant(x.contiguous(), 2.0)
        same_bytes(q, rq)
        same_bytes(s.view(torch.uint8), rs.view(torch.uint8))
    flat = torch.zeros(1 + 8 * 64, dtype=torch.float32)
    x = flat[1:].view(8, 64)              # data pointer 4 bytes past a 16-byte boundary
    x.copy_(_rand((8, 64), torch.float32, seed=9))
    same_bytes(fk.scaled_fp4_quant(x, 1.0)[0], ref.scaled_fp4_quant(x, 1.0)[0])
    assert math.isfinite(float(x.sum()))
