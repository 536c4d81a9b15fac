"""NVFP4 reference implementation in plain torch (CPU or CUDA tensors).

This module is the DEFINITION the compiled kernels are tested against: quantization,
grouped quantization and dequantization must match it bit for bit (q bytes, scale bytes,
output values; NaN outputs match by position), the GEMM within
:func:`scaled_fp4_mm_error_bound`.

Format sources:
  * NVIDIA NVFP4 (Blackwell): E2M1 elements, one E4M3 scale per 16 elements of the last
    axis, one FP32 global scale; two elements per byte, element 2i in the low nibble.
  * PTX ISA, ``cvt.rn.satfinite.e2m1x2.f32``: round to nearest, ties to even, saturate
    to the largest finite value (+-6).
  * OCP Microscaling Formats (MX) v1.0 / OCP 8-bit Floating Point (OFP8): E2M1 values
    {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign bit 3, no Inf/NaN; E4M3 ("fn"): bias 7, max
    448, subnormals m * 2^-9, 0x7F / 0xFF are NaN, no Inf.

Arithmetic (every step one IEEE binary32 operation, round to nearest even):
  per block of 16 elements x[0..15] (as float32, exact for fp16/bf16 inputs):
    amax  = max(|x|)                 (NaN if the block holds a NaN)
    s     = gs * (amax / 6.0)
    scale = 0x7F                     if s is NaN (NaN in block, NaN gs, 0 * Inf)
            e4m3_rne(clamp(s, -448, 448)) otherwise (saturating finite, ties to even;
                                     values below 2^-6 become E4M3 subnormals or 0)
    sf    = float(scale)
    rs    = 0 if sf == 0 or sf is NaN else gs / sf
    code  = e2m1_rne_satfinite(x * rs), where a NaN product encodes +0 and a result whose
            magnitude rounds to 0 encodes +0 (code 0, never the -0 code 8)
  consequences: all-zero block -> scale 0, codes 0; a block containing NaN -> scale 0x7F,
  codes 0; +-Inf (finite positive gs) -> scale 448, the Inf encodes +-6.
  dequantize:   f = sf / gs ; out = to_dtype(e2m1_value(code) * f)
  GEMM:         out = to_dtype(alpha * sum_k A[i,k] * B[j,k]) with A, B = e2m1 * sf
                (no global scales); here computed in float64.
  W4A16 GEMM:   the same with A the bf16 / fp16 activation values.
  grouped GEMM: rows offsets[e]:offsets[e+1] of A use expert e's B and alpha[e]; offsets
                must rise from 0 to the number of rows.
"""
from __future__ import annotations

import torch

BLOCK = 16
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
# Midpoints between neighbouring E2M1 magnitudes; ">" where the tie goes down to the even
# code, ">=" where it goes up to the even code.
_THRESHOLDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False),
               (3.5, True), (5.0, False))


def _gs(v, device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.detach().reshape(()).to(device=device, dtype=torch.float32)
    return torch.tensor(float(v), dtype=torch.float32, device=device)


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """float32 tensor -> uint8 E2M1 codes (0..15), RNE, saturating, NaN -> 0, -0 -> 0."""
    a = v.abs()
    mag = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for t, inclusive in _THRESHOLDS:
        mag += (a >= t if inclusive else a > t).to(torch.uint8)
    neg = ((v < 0) & (mag != 0)).to(torch.uint8)
    return mag | (neg << 3)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes (0..15) -> float32 values (code 8 is -0.0)."""
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    return lut[codes.long()]


def e4m3_encode(s: torch.Tensor) -> torch.Tensor:
    """float32 -> uint8 E4M3 (fn) bytes: RNE, saturating finite at +-448, NaN -> 0x7F."""
    nan = torch.isnan(s)
    b = s.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(nan, torch.full_like(b, 0x7F), b)


def _unpack(q: torch.Tensor) -> torch.Tensor:
    m = q.shape[0]
    return torch.stack([q & 0xF, q >> 4], dim=-1).reshape(m, -1)


def swizzle_scales(scale: torch.Tensor) -> torch.Tensor:
    """[M, K/16] scales -> the 128x4-tile swizzled [round_up(M,128), round_up(K/16,4)] layout.

    Padded with zeros, viewed as [Mp/128, 4, 32, Kp/4, 4] and permuted to
    [Mp/128, Kp/4, 32, 4, 4] (the layout of vLLM / SGLang / FlashInfer swizzled blockscales).
    """
    m, kb = scale.shape
    mp, kp = (m + 127) // 128 * 128, (kb + 3) // 4 * 4
    u8 = scale.view(torch.uint8) if scale.dtype == torch.float8_e4m3fn else scale
    padded = torch.zeros((mp, kp), dtype=torch.uint8, device=scale.device)
    padded[:m, :kb] = u8
    sw = padded.reshape(mp // 128, 4, 32, kp // 4, 4).permute(0, 3, 2, 1, 4).contiguous()
    return sw.reshape(mp, kp).view(torch.float8_e4m3fn)


def scaled_fp4_quant(x: torch.Tensor, global_scale, *, swizzle: bool = False):
    """Reference of :func:`fp4_kernels.scaled_fp4_quant` (same arguments and results)."""
    if x.dim() != 2 or x.shape[1] % BLOCK:
        raise ValueError("x: expected [M, K] with K a multiple of 16, got %s" % (tuple(x.shape),))
    m, k = x.shape
    gs = _gs(global_scale, x.device)
    xf = x.detach().to(torch.float32).reshape(m, k // BLOCK, BLOCK)
    amax = xf.abs().amax(dim=-1)
    # amax / 6 divided by a tensor, never by a Python number: on CUDA, PyTorch divides by a CPU
    # scalar as a multiplication by its reciprocal (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu,
    # "may lose one bit of precision"), which is not RN(amax / 6) and, where gs * amax / 6 sits on
    # an E4M3 tie, picks the other scale (selfcheck's "quant scale on an E4M3 tie" block)
    s = gs * torch.div(amax, torch.full_like(amax, 6.0))
    sb = e4m3_encode(s)
    sf = sb.view(torch.float8_e4m3fn).to(torch.float32)
    rs = torch.where((sf == 0) | torch.isnan(sf), torch.zeros_like(sf), gs / sf)
    codes = e2m1_encode(xf * rs.unsqueeze(-1)).reshape(m, k)
    q = codes[:, 0::2] | (codes[:, 1::2] << 4)
    scale = sb.view(torch.float8_e4m3fn)
    if swizzle:
        scale = swizzle_scales(scale)
    return q.contiguous(), scale.contiguous()


def scaled_fp4_grouped_quant(xs, global_scales, *, swizzle: bool = False, expert_offsets=None,
                             packed: bool = False):
    """Reference of :func:`fp4_kernels.scaled_fp4_grouped_quant`: per-matrix quantization.

    With ``expert_offsets``: ``xs`` is one [T, K] tensor; rows offsets[e]:offsets[e+1] use
    global_scales[e]; returns ``(q [T, K/2], scale [T, K/16])``. ``packed``: the list form's
    results concatenated (flat when the K differ).
    """
    if isinstance(global_scales, torch.Tensor):
        global_scales = list(global_scales.reshape(-1))
    if expert_offsets is not None:
        if swizzle:
            raise ValueError("swizzle=True is not supported with expert_offsets")
        x = xs
        rows = _expert_rows(expert_offsets, x.shape[0])
        parts = [scaled_fp4_quant(x[lo:hi], g) for (lo, hi), g in zip(rows, global_scales)]
        q = torch.cat([p[0] for p in parts]) if parts else x.new_zeros((0, x.shape[1] // 2), dtype=torch.uint8)
        s = torch.cat([p[1].view(torch.uint8) for p in parts]).view(torch.float8_e4m3fn)
        return q, s
    xs = list(xs)
    qs, ss = [], []
    for x, g in zip(xs, global_scales):
        q, s = scaled_fp4_quant(x, g, swizzle=swizzle)
        qs.append(q)
        ss.append(s)
    if packed:
        if len({q.shape[1] for q in qs}) <= 1:
            return torch.cat(qs), torch.cat([s.view(torch.uint8) for s in ss]).view(torch.float8_e4m3fn)
        return (torch.cat([q.reshape(-1) for q in qs]),
                torch.cat([s.view(torch.uint8).reshape(-1) for s in ss]).view(torch.float8_e4m3fn))
    return qs, ss


def dequantize_unscaled(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """e2m1(q) * float(scale) as float32 [M, K] (exact), without the global scale."""
    m, k = q.shape[0], 2 * q.shape[1]
    sf = (scale.view(torch.float8_e4m3fn) if scale.dtype == torch.uint8 else scale).to(torch.float32)
    vals = e2m1_decode(_unpack(q)).reshape(m, k // BLOCK, BLOCK)
    return (vals * sf.unsqueeze(-1)).reshape(m, k)


def dequantize_fp4(q: torch.Tensor, scale: torch.Tensor, global_scale, dtype=torch.bfloat16):
    """Reference of :func:`fp4_kernels.dequantize_fp4`: ``dtype(e2m1 * (sf / gs))``."""
    m, k = q.shape[0], 2 * q.shape[1]
    gs = _gs(global_scale, q.device)
    sf = (scale.view(torch.float8_e4m3fn) if scale.dtype == torch.uint8 else scale).to(torch.float32)
    f = sf / gs
    vals = e2m1_decode(_unpack(q)).reshape(m, k // BLOCK, BLOCK)
    return (vals * f.unsqueeze(-1)).reshape(m, k).to(dtype)


def _weights(b_q, b_scale):
    """(b_q, b_scale), unpacking a PackedFP4Weight (exact inverse of the prepack)."""
    if type(b_q).__name__ == "PackedFP4Weight":
        if b_scale is not None:
            raise ValueError("b_scale: must be None when b_q is a PackedFP4Weight")
        return b_q.unpack()
    return b_q, b_scale


def scaled_fp4_mm(a_q, b_q, a_scale, b_scale, alpha, out_dtype=torch.bfloat16):
    """Reference of :func:`fp4_kernels.scaled_fp4_mm`, accumulated in float64 (b_q may be a
    PackedFP4Weight with b_scale None)."""
    b_q, b_scale = _weights(b_q, b_scale)
    a = dequantize_unscaled(a_q, a_scale).to(torch.float64)
    b = dequantize_unscaled(b_q, b_scale).to(torch.float64)
    al = float(alpha) if not isinstance(alpha, torch.Tensor) else alpha.detach().to(
        device=a.device, dtype=torch.float64).reshape(())
    return ((a @ b.T) * al).to(out_dtype)


_UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}
_TINY = {torch.bfloat16: 2.0 ** -133, torch.float16: 2.0 ** -24, torch.float32: 2.0 ** -149}


def scaled_fp4_mm_error_bound(a_q, b_q, a_scale, b_scale, alpha, out_dtype=torch.bfloat16):
    """Documented bound of |kernel - reference| for scaled_fp4_mm, float64 [M, N].

    ``|alpha| * S * (K + 2) * 2**-22 + u * |ref| + tiny`` with ``S = |A| @ |B|^T``: fp32
    accumulation error of K exact products (with a 2x margin for tensor-core accumulation
    order), plus one rounding to the output dtype.
    """
    b_q, b_scale = _weights(b_q, b_scale)
    a = dequantize_unscaled(a_q, a_scale).to(torch.float64)
    b = dequantize_unscaled(b_q, b_scale).to(torch.float64)
    k = a.shape[1]
    al = abs(float(alpha))
    ref = (a @ b.T) * (float(alpha))
    s = a.abs() @ b.abs().T
    return al * s * (k + 2) * 2.0 ** -22 + _UNIT_ROUNDOFF[out_dtype] * ref.abs() + _TINY[out_dtype]


def _alpha64(alpha, device):
    if isinstance(alpha, torch.Tensor):
        return alpha.detach().to(device=device, dtype=torch.float64).reshape(())
    return float(alpha)


def scaled_fp4_w4a16_mm(a, b_q, b_scale, alpha, out_dtype=None):
    """Reference of :func:`fp4_kernels.scaled_fp4_w4a16_mm` (bf16 / fp16 a), in float64."""
    b_q, b_scale = _weights(b_q, b_scale)
    b = dequantize_unscaled(b_q, b_scale).to(torch.float64)
    out = (a.detach().to(torch.float64) @ b.T) * _alpha64(alpha, a.device)
    return out.to(a.dtype if out_dtype is None else out_dtype)


def scaled_fp4_w4a16_mm_error_bound(a, b_q, b_scale, alpha, out_dtype=None):
    """Bound of |kernel - reference| for scaled_fp4_w4a16_mm, float64 [M, N]: the form of
    :func:`scaled_fp4_mm_error_bound` with ``S = |a| @ |B|^T`` (products a * B are exact in fp32)."""
    b_q, b_scale = _weights(b_q, b_scale)
    out_dtype = a.dtype if out_dtype is None else out_dtype
    a64 = a.detach().to(torch.float64)
    b = dequantize_unscaled(b_q, b_scale).to(torch.float64)
    al = abs(float(alpha))
    ref = (a64 @ b.T) * float(alpha)
    s = a64.abs() @ b.abs().T
    return al * s * (a64.shape[1] + 2) * 2.0 ** -22 + _UNIT_ROUNDOFF[out_dtype] * ref.abs() + _TINY[out_dtype]


def _expert_rows(expert_offsets, rows):
    v = [int(x) for x in expert_offsets.reshape(-1).tolist()]
    if len(v) < 2 or v[0] != 0 or v[-1] != rows or any(b < a for a, b in zip(v, v[1:])):
        raise ValueError("expert_offsets: must rise from 0 to the number of rows (%d), got %s" % (rows, v))
    return list(zip(v[:-1], v[1:]))


def _alpha_e(alpha, e):
    if isinstance(alpha, torch.Tensor) and alpha.numel() > 1:
        return alpha.reshape(-1)[e]
    return alpha


def scaled_fp4_grouped_mm(a_q, a_scale, b_q, b_scale, alpha, expert_offsets, out_dtype=torch.bfloat16):
    """Reference of :func:`fp4_kernels.scaled_fp4_grouped_mm`: one float64 GEMM per expert."""
    t, n = a_q.shape[0], b_q.shape[1]
    out = torch.zeros((t, n), dtype=out_dtype, device=a_q.device)
    for e, (lo, hi) in enumerate(_expert_rows(expert_offsets, t)):
        if hi > lo:
            out[lo:hi] = scaled_fp4_mm(a_q[lo:hi], b_q[e], a_scale[lo:hi], b_scale[e],
                                       _alpha_e(alpha, e), out_dtype)
    return out


def scaled_fp4_w4a16_grouped_mm(a, b_q, b_scale, alpha, expert_offsets, out_dtype=None):
    """Reference of :func:`fp4_kernels.scaled_fp4_w4a16_grouped_mm`."""
    out_dtype = a.dtype if out_dtype is None else out_dtype
    t, n = a.shape[0], b_q.shape[1]
    out = torch.zeros((t, n), dtype=out_dtype, device=a.device)
    for e, (lo, hi) in enumerate(_expert_rows(expert_offsets, t)):
        if hi > lo:
            out[lo:hi] = scaled_fp4_w4a16_mm(a[lo:hi], b_q[e], b_scale[e], _alpha_e(alpha, e), out_dtype)
    return out


def grouped_mm_error_bound(a, b_q, b_scale, alpha, expert_offsets, out_dtype, a_scale=None):
    """Per-row bound for the grouped GEMMs: the W4A4 (``a`` = codes with ``a_scale``) or the
    W4A16 (``a`` = 16-bit values) bound of each row's expert, float64 [T, N]."""
    t, n = a.shape[0], b_q.shape[1]
    out = torch.zeros((t, n), dtype=torch.float64, device=a.device)
    for e, (lo, hi) in enumerate(_expert_rows(expert_offsets, t)):
        if hi > lo:
            al = float(_alpha_e(alpha, e))
            if a_scale is not None:
                out[lo:hi] = scaled_fp4_mm_error_bound(a[lo:hi], b_q[e], a_scale[lo:hi], b_scale[e], al, out_dtype)
            else:
                out[lo:hi] = scaled_fp4_w4a16_mm_error_bound(a[lo:hi], b_q[e], b_scale[e], al, out_dtype)
    return out
