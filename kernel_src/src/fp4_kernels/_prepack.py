"""Prepacked NVFP4 weights: the tile layout of the fused W4A16 kernel (csrc/cuda_pk.cu), prepared
once at load so that each thread's fragment loads are wide and contiguous and the decode to bf16
mma operands costs about one instruction per element.

Layout (csrc/pk_layout.h has the full description): the weight [N, K] is padded with zero codes
and zero scales to 16-row x 128-k units; unit (rt, u) is 1152 bytes: 1024 bytes of codes (per
lane of a warp, two 16-byte pieces of four 32-bit words, one word per mma k-step) and 128 bytes
of E4M3 scales (4 per lane). A word is not the plain nibbles: it is the w for which
``pk_decode(w)`` (shifts, a rotate, XOR and masks; mirrored by :func:`_decode_regs`) places the 8 codes of
the step as bf16 bit patterns, i.e. the inverse of that GF(2)-linear map applied to the codes.
Prepacking and unpacking are exact inverses (tests/kernel/test_fp4_prepack.py) and run as torch
operations on the tensors' device (CPU or CUDA).
"""
from __future__ import annotations

UNIT_K = 128
UNIT_BYTES = 1152
CODE_BYTES = 1024
_M32 = 0xFFFFFFFF
_TMASK = 0x81C081C0  # bf16 placement: magnitude bits 6..8, sign bit 15 (and +16)


def _decode_regs(w):
    """csrc/pk_layout.h pk_decode: one 32-bit word -> 4 registers (python ints or int64 tensors
    holding values below 2^32)."""
    rot10 = (w << 10) | (w >> 22)  # a 32-bit rotate left by 10 (the mask drops bits above 31)
    return (w & _TMASK, (w << 4) & _TMASK, rot10 & _TMASK, ((w >> 2) ^ (w << 6)) & _TMASK)


def _nibbles(regs):
    """The 8 placed codes of 4 registers as one 32-bit value, code (register j, half h) in nibble
    2 j + h (bit b of the code: bit 6 + b (b < 3) / 15 of the half)."""
    v = 0
    for j, r in enumerate(regs):
        for h in range(2):
            c = ((r >> (6 + 16 * h)) & 7) | (((r >> (15 + 16 * h)) & 1) << 3)
            v = v | (c << (4 * (2 * j + h)))
    return v


def _inverse_rows():
    """Rows of the inverse map over GF(2): bit i of the stored word is the parity of
    (nibble vector & rows[i])."""
    cols = [_nibbles(_decode_regs(1 << i)) for i in range(32)]  # image of each word bit
    # Solve: for each target bit vector e_t find the word; Gauss-Jordan on [cols^T | I].
    rows = [(cols[i], 1 << i) for i in range(32)]  # (image, word) pairs spanning the space
    basis = {}
    for img, word in rows:
        for bit in range(32):
            if not (img >> bit) & 1:
                continue
            if bit in basis:
                bi, bw = basis[bit]
                img, word = img ^ bi, word ^ bw
            else:
                basis[bit] = (img, word)
                break
        else:
            raise AssertionError("pk_decode is not invertible")
    # back-substitute to a reduced basis: image of basis[bit] has lowest set bit `bit`
    for bit in sorted(basis, reverse=True):
        img, word = basis[bit]
        for other in range(bit + 1, 32):
            if (img >> other) & 1:
                oi, ow = basis[other]
                img, word = img ^ oi, word ^ ow
        basis[bit] = (img, word)
    assert all(basis[b][0] == 1 << b for b in range(32))
    inv_cols = [basis[b][1] for b in range(32)]  # word for target e_b
    return [sum(((inv_cols[b] >> i) & 1) << b for b in range(32)) for i in range(32)]


_INV_ROWS = _inverse_rows()


def encode_word(v):
    """Word whose decode places the codes of nibble vector v (python int)."""
    w = 0
    for i, row in enumerate(_INV_ROWS):
        w |= (bin(v & row).count("1") & 1) << i
    return w


def _parity(torch, x):
    for s in (16, 8, 4, 2, 1):
        x = x ^ (x >> s)
    return x & 1


class PackedFP4Weight:
    """NVFP4 weights ``[N, K]`` prepacked for the fused skinny GEMM (see
    :func:`prepack_fp4_weight`). Pass it as ``b_q`` (with ``b_scale=None``) to
    :func:`fp4_kernels.scaled_fp4_mm` and :func:`fp4_kernels.scaled_fp4_w4a16_mm`.

    Attributes:
        data: uint8 tensor ``[ceil(N / 16), ceil(K / 128), 1152]`` (CPU or CUDA), the layout of
            ``csrc/pk_layout.h``; 1.125x the bytes of ``(b_q, b_scale)`` per padded element
            (0.5625 bytes per weight).
        n, k: the logical shape ``[N, K]``.
    """

    __slots__ = ("data", "n", "k")

    def __init__(self, data, n, k):
        self.data, self.n, self.k = data, int(n), int(k)

    @property
    def shape(self):
        return (self.n, self.k)

    @property
    def device(self):
        return self.data.device

    @property
    def nt(self):
        return self.data.shape[0]

    @property
    def u(self):
        return self.data.shape[1]

    def to(self, device):
        """The same weight on ``device`` (the bytes are copied as they are)."""
        return PackedFP4Weight(self.data.to(device), self.n, self.k)

    def unpack(self):
        """``(b_q uint8 [N, K/2], b_scale float8_e4m3fn [N, K/16])``: exactly the arrays that were
        prepacked (the inverse of :func:`prepack_fp4_weight`)."""
        return unpack(self)

    def __repr__(self):
        return "PackedFP4Weight(shape=(%d, %d), device=%s)" % (self.n, self.k, self.data.device)


def prepack_fp4_weight(b_q, b_scale):
    """Reorder NVFP4 weights once (at load time) into the fused kernel's tile layout.

    Args:
        b_q: uint8 ``[N, K/2]`` E2M1 codes (element 2i in the low nibble), CPU or CUDA.
        b_scale: float8_e4m3fn (or its uint8 bytes) ``[N, K/16]``, unswizzled, same device.

    Returns:
        :class:`PackedFP4Weight` on the same device. GEMMs with it give results identical to
        those with ``(b_q, b_scale)`` on the CPU path and the reference, and within the same
        documented error bound on CUDA; ``.unpack()`` returns the original arrays bit for bit.

    Raises:
        TypeError: wrong dtypes. ValueError: wrong shapes (K must be a positive multiple of
        16), different devices.
    """
    import torch

    if not isinstance(b_q, torch.Tensor) or not isinstance(b_scale, torch.Tensor):
        raise TypeError("prepack_fp4_weight: b_q and b_scale must be tensors")
    if b_q.dtype != torch.uint8 or b_q.dim() != 2:
        raise TypeError("b_q: expected a 2-D uint8 tensor [N, K/2], got %s %s" % (b_q.dtype, tuple(b_q.shape)))
    if b_scale.dtype == torch.float8_e4m3fn:
        b_scale = b_scale.view(torch.uint8)
    elif b_scale.dtype != torch.uint8:
        raise TypeError("b_scale: expected float8_e4m3fn (or its uint8 bytes), got %s" % b_scale.dtype)
    n, k = b_q.shape[0], 2 * b_q.shape[1]
    if k == 0 or k % 16:
        raise ValueError("b_q: K = 2 * b_q.shape[1] must be a positive multiple of 16, got %d" % k)
    if tuple(b_scale.shape) != (n, k // 16):
        raise ValueError("b_scale: expected shape %s (unswizzled), got %s" % ((n, k // 16), tuple(b_scale.shape)))
    if b_scale.device != b_q.device:
        raise ValueError("b_scale: must be on b_q's device (%s), got %s" % (b_q.device, b_scale.device))
    dev = b_q.device
    nt, u = (n + 15) // 16, (k + UNIT_K - 1) // UNIT_K
    npad, kpad = nt * 16, u * UNIT_K
    codes = torch.zeros((npad, kpad), dtype=torch.uint8, device=dev)
    codes[:n, 0:k:2] = b_q & 0xF
    codes[:n, 1:k:2] = b_q >> 4
    scales = torch.zeros((npad, kpad // 16), dtype=torch.uint8, device=dev)
    scales[:n, :k // 16] = b_scale
    # codes[rt, h8, g, u, t, s, i]: row 16 rt + 8 h8 + g, k = 128 u + 32 t + 4 s + i
    c = codes.view(nt, 2, 8, u, 4, 8, 4).to(torch.int64)
    v = torch.zeros((nt, 8, u, 4, 8), dtype=torch.int64, device=dev)
    for h8 in range(2):
        for i in range(4):
            v |= c[:, h8, :, :, :, :, i] << (4 * (2 * h8 + 4 * (i >> 1) + (i & 1)))
    w = torch.zeros_like(v)
    for i, row in enumerate(_INV_ROWS):
        w |= _parity(torch, v & row) << i
    # [rt, g, u, t, s] -> [rt, u, h, g, t, q] with s = 4 h + q, then little-endian bytes
    w = w.view(nt, 8, u, 4, 2, 4).permute(0, 2, 4, 1, 3, 5)
    wb = torch.stack([((w >> (8 * b)) & 0xFF) for b in range(4)], dim=-1).to(torch.uint8)
    # scales[rt, h8, g, u, t, b]: block 8 u + 2 t + b -> [rt, u, g, t, b, h8]
    sb = scales.view(nt, 2, 8, u, 4, 2).permute(0, 3, 2, 4, 5, 1)
    data = torch.cat([wb.reshape(nt, u, CODE_BYTES), sb.reshape(nt, u, UNIT_BYTES - CODE_BYTES)], dim=-1)
    return PackedFP4Weight(data.contiguous(), n, k)


def unpack(pw):
    """PackedFP4Weight -> (b_q, b_scale) on its device (the exact inverse of the prepack)."""
    import torch

    data = pw.data
    nt, u = data.shape[0], data.shape[1]
    wb = data[:, :, :CODE_BYTES].reshape(nt, u, 2, 8, 4, 4, 4).to(torch.int64)
    w = wb[..., 0] | (wb[..., 1] << 8) | (wb[..., 2] << 16) | (wb[..., 3] << 24)  # [rt, u, h, g, t, q]
    w = w.permute(0, 3, 1, 4, 2, 5).reshape(nt, 8, u, 4, 8)  # [rt, g, u, t, s]
    regs = _decode_regs(w)
    c = torch.zeros((nt, 2, 8, u, 4, 8, 4), dtype=torch.int64, device=data.device)
    for h8 in range(2):
        for i in range(4):
            j, h = h8 + 2 * (i >> 1), i & 1
            r = regs[j]
            c[:, h8, :, :, :, :, i] = ((r >> (6 + 16 * h)) & 7) | (((r >> (15 + 16 * h)) & 1) << 3)
    codes = c.to(torch.uint8).view(nt * 16, u * UNIT_K)[:pw.n, :pw.k]
    b_q = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
    sb = data[:, :, CODE_BYTES:].reshape(nt, u, 8, 4, 2, 2).permute(0, 5, 2, 1, 3, 4)  # [rt, h8, g, u, t, b]
    b_scale = sb.reshape(nt * 16, u * 8)[:pw.n, :pw.k // 16].contiguous().view(torch.float8_e4m3fn)
    return b_q, b_scale
