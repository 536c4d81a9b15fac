"""The lean CUDA fast paths of the GEMM entry points (see _gemm.py): a call that needs no
conversion (right dtypes, contiguous, 16-byte aligned, K a multiple of 128, one CUDA device)
costs about twenty attribute reads, one output allocation and one call into the extension.
Anything else returns None and the general path validates, converts and reports errors."""
from __future__ import annotations

from ._ext import load as _load

_C = _load()

# Rows of the activation side up to which the fused kernel beats dequantize + cuBLAS on an H200
# (bench/NOTES.md, "v4 fused"); above it the big-shape path stays.
FUSED_MAX_ROWS = 128
# The same for prepacked weights (the kernel of csrc/cuda_pk.cu; bench/NOTES.md, "v8"): above it,
# the prepacked weight is dequantized (exactly) and cuBLAS runs. On a compute capability 9.0 GPU
# with an sm_90a build the wgmma kernel (csrc/cuda_wg.cu) takes M = 17 .. 64 instead (up to 32
# where its plan splits K at most in 2), up to 256 for weights of at least 2^25 elements and for
# smaller ones whose 128-token plan has two consumer warpgroups, up to 512 for large weights whose
# plan there has two warpgroups on 256-token tiles, and from M = 9 for bf16 activations and such
# weights with N >= 8192 where its plan splits no K range (bench/NOTES.md, "Issue 28"):
# pk_max_rows(device, n, k) says which bound holds; above 512, up to 1024, such weights keep the wgmma
# kernel where its grid fills its waves (pk_takes).
PK_MAX_ROWS = 64
WIDE_ROWS, WIDE_MAX_ROWS = 512, 1024
_pk_rows: dict = {}  # (device index, n, k) -> the largest M the prepacked kernels take there
_pk_wide: dict = {}  # (device index, n, k, m) -> whether they take M = 513 .. 1024 there


def pk_max_rows(dev, n, k):
    """The largest M (rows of the activations) the prepacked kernels take on CUDA device `dev`
    (an index) for an [n, k] weight: 256 or 512 where the wgmma kernel runs, else PK_MAX_ROWS."""
    key = (dev, n, k)
    r = _pk_rows.get(key)
    if r is None:
        if len(_pk_rows) > 4096:
            _pk_rows.clear()
        r = _pk_rows[key] = int(_C.pk_max_rows(dev, n, k))
    return r


def pk_takes(dev, n, k, m):
    """Whether the prepacked kernels take M rows on CUDA device `dev` for an [n, k] weight (else the
    weight is dequantized and cuBLAS runs): M <= pk_max_rows, or M = 513 .. 1024 on a weight whose
    wgmma plan has 256-token tiles where that plan's grid fills at least 90% of its waves of CTA slots
    and of its token tiles (bindings.cpp, ``pk_wide_takes``)."""
    r = pk_max_rows(dev, n, k)
    if m <= r:
        return True
    if r != WIDE_ROWS or m > WIDE_MAX_ROWS:
        return False
    key = (dev, n, k, m)
    w = _pk_wide.get(key)
    if w is None:
        if len(_pk_wide) > 4096:
            _pk_wide.clear()
        w = _pk_wide[key] = bool(_C.pk_wide_takes(dev, n, k, m))
    return w


def set_pk_kernel(name):
    """Which kernel runs the prepacked GEMM, process-wide: "auto" (by M and the GPU; the default),
    "pk" (cuda_pk.cu's mma.sync kernel at every M up to PK_MAX_ROWS) or "wg" (the wgmma kernel,
    sm_90a on 9.0 GPUs only). For benchmarks. Raises ValueError for another name."""
    _C.set_pk_kernel(name)
    _pk_rows.clear()
    _pk_wide.clear()

# ---- the lean CUDA fast path: ~20 attribute reads, one allocation, one call into _C ---------
_fast = None  # (torch, Tensor, uint8, float8_e4m3fn, float32, {out dtype: code}, raw stream fn)


def _fast_init():
    global _fast
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
        lambda idx: torch.cuda.current_stream(idx).cuda_stream)
    _fast = (torch, torch.Tensor, torch.uint8, torch.float8_e4m3fn, torch.float32,
             {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}, raw)
    return _fast


def fast_experts_quant(x, global_scales, offsets):
    """scaled_fp4_grouped_quant(x, gs, expert_offsets=offsets) on CUDA with no conversions
    (x bf16 / fp16 / fp32 [T, K] contiguous and 16-byte aligned, gs float32 [E] and offsets
    int32 / int64 [E + 1] contiguous on x's device), or None."""
    torch, tensor, u8, f8, f32, codes, raw = _fast or _fast_init()
    try:
        code = codes.get(x.dtype)
        t, k = x.shape
        e = global_scales.shape[0]
        od = offsets.dtype
        if (code is None or k & 15 or not t or not k or global_scales.dtype is not f32
                or (od is not torch.int32 and od is not torch.int64) or offsets.shape != (e + 1,)):
            return None
        dev = x.get_device()
        if dev < 0 or global_scales.get_device() != dev or offsets.get_device() != dev:
            return None
        if not (x.is_contiguous() and global_scales.is_contiguous() and offsets.is_contiguous()):
            return None
        px = x.data_ptr()
        if px & 15:
            return None
    except (AttributeError, ValueError, TypeError):
        return None
    q = torch.empty((t, k >> 1), dtype=u8, device=dev)
    s = torch.empty((t, k >> 4), dtype=f8, device=dev)
    _C.experts_quant(px, global_scales.data_ptr(), offsets.data_ptr(), od is torch.int64, q.data_ptr(),
                     s.data_ptr(), t, k, e, code, 2, dev, raw(dev))
    return q, s


def _fast_alpha(alpha, dev, f32, tensor):
    """(pointer, value) for a python float or a float32 one-element tensor on CUDA device
    ``dev``; None for anything else (the general path converts it)."""
    if type(alpha) is float:
        return 0, alpha
    if isinstance(alpha, tensor) and alpha.dtype is f32 and alpha.get_device() == dev and alpha.numel() == 1:
        return alpha.data_ptr(), 0.0
    return None


def _fast_w4a4(a_q, b_q, a_scale, b_scale, alpha, out_dtype):
    """scaled_fp4_mm on the fused kernel with no conversions, or None when a check fails (the
    general path then validates, converts, reports errors and dispatches)."""
    torch, tensor, u8, f8, f32, codes, raw = _fast or _fast_init()
    try:
        if a_q.dtype is not u8 or b_q.dtype is not u8:
            return None
        sa, sb = a_scale.dtype, b_scale.dtype
        if (sa is not f8 and sa is not u8) or (sb is not f8 and sb is not u8):
            return None
        m, kh = a_q.shape
        n, kh2 = b_q.shape
        k = 2 * kh
        if kh2 != kh or not k or k & 127 or m > FUSED_MAX_ROWS or not m or not n:
            return None
        if a_scale.shape != (m, k >> 4) or b_scale.shape != (n, k >> 4):
            return None
        dev = a_q.get_device()
        if dev < 0 or b_q.get_device() != dev or a_scale.get_device() != dev or b_scale.get_device() != dev:
            return None
        if not (a_q.is_contiguous() and b_q.is_contiguous() and a_scale.is_contiguous()
                and b_scale.is_contiguous()):
            return None
        pa, pb, psa, psb = a_q.data_ptr(), b_q.data_ptr(), a_scale.data_ptr(), b_scale.data_ptr()
        if (pa | pb | psa | psb) & 15:
            return None
        al = _fast_alpha(alpha, dev, f32, tensor)
        out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
        code = codes.get(out_dtype)
        if al is None or code is None:
            return None
    except (AttributeError, ValueError, TypeError):
        return None
    out = torch.empty((m, n), dtype=out_dtype, device=dev)
    _C.skinny_mm_cuda(0, pa, psa, pb, psb, al[0], False, al[1], 0, False, out.data_ptr(), code,
                      m, n, k, 1, 0, 0, 0, False, dev, raw(dev))
    return out


def _fast_w4a16(a, b_q, b_scale, alpha, out_dtype):
    """scaled_fp4_w4a16_mm on the fused kernel with no conversions, or None."""
    torch, tensor, u8, f8, f32, codes, raw = _fast or _fast_init()
    try:
        adt = a.dtype
        akind = 1 if adt is torch.bfloat16 else 2 if adt is torch.float16 else 0
        sb = b_scale.dtype
        if not akind or b_q.dtype is not u8 or (sb is not f8 and sb is not u8):
            return None
        m, k = a.shape
        n, kh = b_q.shape
        if (2 * kh != k or not k or k & 127 or not m or not n or m > FUSED_MAX_ROWS
                or b_scale.shape != (n, k >> 4)):
            return None
        dev = a.get_device()
        if dev < 0 or b_q.get_device() != dev or b_scale.get_device() != dev:
            return None
        if not (a.is_contiguous() and b_q.is_contiguous() and b_scale.is_contiguous()):
            return None
        pa, pb, psb = a.data_ptr(), b_q.data_ptr(), b_scale.data_ptr()
        if (pa | pb | psb) & 15:
            return None
        al = _fast_alpha(alpha, dev, f32, tensor)
        out_dtype = adt if out_dtype is None else out_dtype
        code = codes.get(out_dtype)
        if al is None or code is None:
            return None
    except (AttributeError, ValueError, TypeError):
        return None
    out = torch.empty((m, n), dtype=out_dtype, device=dev)
    _C.skinny_mm_cuda(akind, pa, 0, pb, psb, al[0], False, al[1], 0, False, out.data_ptr(), code,
                      m, n, k, 1, 0, 0, 0, False, dev, raw(dev))
    return out


def _fast_grouped(a, a_scale, b_q, b_scale, alpha, offsets, out_dtype):
    """The grouped GEMMs on the fused kernel with no conversions (a_scale None: W4A16), or None."""
    torch, tensor, u8, f8, f32, codes, raw = _fast or _fast_init()
    try:
        adt = a.dtype
        if a_scale is None:
            akind = 1 if adt is torch.bfloat16 else 2 if adt is torch.float16 else -1
            t, k = a.shape
            out_dtype = adt if out_dtype is None else out_dtype
        else:
            akind = 0 if adt is u8 else -1
            t, kh = a.shape
            k = 2 * kh
            sa = a_scale.dtype
            if (sa is not f8 and sa is not u8) or a_scale.shape != (t, k >> 4):
                return None
            out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
        e, n, kh2 = b_q.shape
        sb, od = b_scale.dtype, offsets.dtype
        if (akind < 0 or b_q.dtype is not u8 or (sb is not f8 and sb is not u8) or 2 * kh2 != k
                or not k or k & 127 or not t or not n or b_scale.shape != (e, n, k >> 4)
                or (od is not torch.int32 and od is not torch.int64) or offsets.shape != (e + 1,)):
            return None
        dev = a.get_device()
        ts = (a, b_q, b_scale, offsets) if a_scale is None else (a, a_scale, b_q, b_scale, offsets)
        for x in ts:
            if x.get_device() != dev or not x.is_contiguous():
                return None
        if dev < 0:
            return None
        pa, pb, psb = a.data_ptr(), b_q.data_ptr(), b_scale.data_ptr()
        psa = a_scale.data_ptr() if a_scale is not None else 0
        if (pa | pb | psb | psa) & 15:
            return None
        if isinstance(alpha, tensor) and alpha.numel() == e and e > 1:
            if alpha.dtype is not f32 or alpha.get_device() != dev or not alpha.is_contiguous():
                return None
            al, per = (alpha.data_ptr(), 0.0), True
        else:
            al, per = _fast_alpha(alpha, dev, f32, tensor), False
        code = codes.get(out_dtype)
        if al is None or code is None:
            return None
    except (AttributeError, ValueError, TypeError):
        return None
    out = torch.empty((t, n), dtype=out_dtype, device=dev)
    _C.skinny_mm_cuda(akind, pa, psa, pb, psb, al[0], per, al[1], offsets.data_ptr(),
                      od is torch.int64, out.data_ptr(), code, t, n, k, e, 0, 0, 0, False, dev, raw(dev))
    return out




def _fast_pk_checks(a, pw, m, k, dev, tensor):
    """Common checks of the prepacked fast paths: shapes, device, alignment."""
    data = pw.data
    if k != pw.k or not m or not pw.n or dev < 0 or not pk_takes(dev, pw.n, k, m) or data.get_device() != dev:
        return None
    if not a.is_contiguous():
        return None
    pa = a.data_ptr()
    if pa & 15 or data.data_ptr() & 15:
        return None
    return pa, data


def _fast_pk_w4a16(a, pw, alpha, out_dtype):
    """scaled_fp4_w4a16_mm with a PackedFP4Weight on CUDA, no conversions, or None."""
    torch, tensor, u8, f8, f32, codes, raw = _fast or _fast_init()
    try:
        adt = a.dtype
        akind = 1 if adt is torch.bfloat16 else 2 if adt is torch.float16 else 0
        if not akind:
            return None
        m, k = a.shape
        dev = a.get_device()
        chk = _fast_pk_checks(a, pw, m, k, dev, tensor)
        if chk is None:
            return None
        pa, data = chk
        al = _fast_alpha(alpha, dev, f32, tensor)
        out_dtype = adt if out_dtype is None else out_dtype
        code = codes.get(out_dtype)
        if al is None or code is None:
            return None
    except (AttributeError, ValueError, TypeError):
        return None
    n = pw.n
    out = torch.empty((m, n), dtype=out_dtype, device=dev)
    _C.pk_mm_cuda(akind, pa, k, data.data_ptr(), al[0], al[1], out.data_ptr(), code, m, n, k,
                  data.shape[0], data.shape[1], 0, 0, 0, dev, raw(dev))
    return out


def _fast_pk_w4a4(a_q, a_scale, pw, alpha, out_dtype):
    """scaled_fp4_mm with a PackedFP4Weight on CUDA: the FP4 activations are dequantized exactly
    to bf16 (global scale 1: e2m1 * scale has at most 6 significant bits), then the prepacked
    W4A16 kernel runs with alpha. None when a check fails."""
    torch, tensor, u8, f8, f32, codes, raw = _fast or _fast_init()
    try:
        sa = a_scale.dtype
        if a_q.dtype is not u8 or (sa is not f8 and sa is not u8):
            return None
        m, kh = a_q.shape
        k = 2 * kh
        if a_scale.shape != (m, k >> 4):
            return None
        dev = a_q.get_device()
        chk = _fast_pk_checks(a_q, pw, m, k, dev, tensor)
        if chk is None or a_scale.get_device() != dev or not a_scale.is_contiguous():
            return None
        pa, data = chk
        al = _fast_alpha(alpha, dev, f32, tensor)
        out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
        code = codes.get(out_dtype)
        if al is None or code is None:
            return None
    except (AttributeError, ValueError, TypeError):
        return None
    n = pw.n
    stream = raw(dev)
    a16 = torch.empty((m, k), dtype=torch.bfloat16, device=dev)
    _C.dequant_cuda(pa, a_scale.data_ptr(), 0, a16.data_ptr(), m, k, 2, dev, stream)
    out = torch.empty((m, n), dtype=out_dtype, device=dev)
    _C.pk_mm_cuda(1, a16.data_ptr(), k, data.data_ptr(), al[0], al[1], out.data_ptr(), code, m, n, k,
                  data.shape[0], data.shape[1], 0, 0, 0, dev, stream)
    return out
