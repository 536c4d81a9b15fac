"""Public NVFP4 operations (torch tensors in and out; CPU and CUDA tensors).

The arithmetic is defined once, in :mod:`fp4_kernels.reference` (and ``csrc/nvfp4_math.h``);
these functions call the compiled kernels and give bit-identical results, except for the
GEMM whose accuracy bound is stated in :func:`scaled_fp4_mm`.
"""
from __future__ import annotations

from ._ext import load as _load
from ._gemm_fast import fast_experts_quant

_C = _load()

_BLOCK = 16


_to_dlpack = None


def _torch():
    import torch

    return torch


def _dl(t):
    """DLPack capsule of a tensor (torch.utils.dlpack.to_dlpack: no Python-level
    ``__dlpack__`` stream handling; the kernels run on the stream passed explicitly)."""
    global _to_dlpack
    if _to_dlpack is None:
        from torch.utils.dlpack import to_dlpack

        _to_dlpack = to_dlpack
    return _to_dlpack(t)


def _dtype_code(torch, dtype, name):
    codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    if dtype not in codes:
        raise TypeError("%s: dtype must be float32, float16 or bfloat16, got %s" % (name, dtype))
    return codes[dtype]


def _check_device(t, name):
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError("%s: only CPU and CUDA tensors are supported, got %s" % (name, t.device))


def _prep(torch, t, name, align=16):
    """Detached, contiguous, ``align``-byte aligned version of ``t``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (name, type(t).__name__))
    _check_device(t, name)
    t = t.detach().contiguous()
    if t.numel() and t.data_ptr() % align:
        t = t.clone()
    return t


def _scalar(torch, v, device, name):
    """One-element float32 tensor on ``device`` from a python number or a tensor."""
    if isinstance(v, torch.Tensor):
        if (v.dtype == torch.float32 and v.device == device and v.dim() <= 1 and v.numel() == 1
                and not v.requires_grad):
            return v.reshape(1)
        if v.numel() != 1:
            raise ValueError("%s: expected a scalar (one element), got shape %s"
                             % (name, tuple(v.shape)))
        if not v.is_floating_point():
            raise TypeError("%s: expected a floating-point tensor, got %s" % (name, v.dtype))
        return v.detach().reshape(1).to(device=device, dtype=torch.float32).contiguous()
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return torch.full((1,), float(v), dtype=torch.float32, device=device)
    raise TypeError("%s: expected a float or a one-element tensor, got %s"
                    % (name, type(v).__name__))


_raw_stream = None


def _stream(torch, device):
    """The current CUDA stream of ``device`` as an int (0 for CPU)."""
    global _raw_stream
    if device.type != "cuda":
        return 0
    if _raw_stream is None:
        # torch._C._cuda_getCurrentRawStream: one C call (what Triton uses); the public API
        # builds a Stream object per call.
        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda idx: torch.cuda.current_stream(idx).cuda_stream)
    return int(_raw_stream(device.index if device.index is not None else
                           torch.cuda.current_device()))


def _round_up(x, m):
    return (x + m - 1) // m * m


def _scale_u8(torch, s, name):
    if s.dtype == torch.float8_e4m3fn:
        return s.view(torch.uint8)
    if s.dtype == torch.uint8:
        return s
    raise TypeError("%s: expected float8_e4m3fn (or its uint8 bytes), got %s" % (name, s.dtype))


def _check_x(torch, x, name="x"):
    if not isinstance(x, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (name, type(x).__name__))
    _dtype_code(torch, x.dtype, name)
    if x.dim() != 2:
        raise ValueError("%s: expected a 2-D tensor [M, K], got shape %s" % (name, tuple(x.shape)))
    if x.shape[1] % _BLOCK:
        raise ValueError("%s: K (last dim) must be a multiple of 16, got %d" % (name, x.shape[1]))


def _alloc_scales(torch, m, k, swizzle, device):
    kb = k // _BLOCK
    if swizzle:
        mp, kp = _round_up(m, 128), _round_up(kb, 4)
        maker = torch.zeros if (mp, kp) != (m, kb) else torch.empty
        return maker((mp, kp), dtype=torch.uint8, device=device)
    return torch.empty((m, kb), dtype=torch.uint8, device=device)


def scaled_fp4_quant(x, global_scale, *, swizzle=False):
    """Quantize ``x`` to NVFP4.

    Args:
        x: ``[M, K]`` float16 / bfloat16 / float32 tensor on CPU or CUDA; K a multiple of 16.
        global_scale: FP32 global scale (one-element tensor, any float dtype is converted
            to float32, or a python float), commonly ``448 * 6 / amax(|x|)``.
        swizzle: False: scales ``[M, K/16]`` row-major. True: the 128x4-tile swizzled
            layout of CUTLASS-style FP4 GEMMs (vLLM / SGLang / FlashInfer), shape
            ``[round_up(M, 128), round_up(K/16, 4)]``, padding zero; scale (m, kb) is at
            flat offset ``((((m//128)*(Kp//4) + kb//4)*32 + m%32)*4 + (m%128)//32)*4 + kb%4``.

    Returns:
        ``(q, scale)``: q uint8 ``[M, K/2]`` (element 2i in the low nibble), scale
        float8_e4m3fn as above. Both on x's device.

    Rules (NVIDIA NVFP4; PTX ISA ``cvt.rn.satfinite.e2m1x2.f32``; OCP MX v1.0 for E2M1 /
    E4M3), fp32 arithmetic, one rounding per step, see :mod:`fp4_kernels.reference`:
    ``scale = e4m3_satfinite(gs * (amax / 6))``, ``q = e2m1(x * (gs / float(scale)))``,
    round to nearest even, saturating at +-6 / +-448. All-zero block: scale 0, elements +0.
    NaN in a block: scale 0x7F (E4M3 NaN), all its elements +0. +-Inf: scale 448 (for
    finite positive gs) and the Inf encodes +-6. Tiny blocks may get subnormal E4M3
    scales (m * 2^-9) or scale 0 (then every element encodes +0).

    Raises:
        TypeError: wrong tensor dtype or argument type. ValueError: wrong shape, K not a
        multiple of 16, unsupported device. RuntimeError: CUDA tensor with a CPU-only
        build, or a CUDA error (e.g. no kernel image for this GPU).
    """
    torch = _torch()
    _check_x(torch, x)
    x = _prep(torch, x, "x")
    gs = _scalar(torch, global_scale, x.device, "global_scale")
    m, k = x.shape
    q = torch.empty((m, k // 2), dtype=torch.uint8, device=x.device)
    s = _alloc_scales(torch, m, k, swizzle, x.device)
    if x.device.type == "cuda":
        if m and k:
            _C.quant_cuda(x.data_ptr(), gs.data_ptr(), q.data_ptr(), s.data_ptr(), m, k,
                          _dtype_code(torch, x.dtype, "x"), bool(swizzle), x.device.index,
                          _stream(torch, x.device))
    else:
        _C.quant(_dl(x), _dl(gs), _dl(q), _dl(s), bool(swizzle), 0)
    return q, s.view(torch.float8_e4m3fn)


def _gs_vector(torch, global_scales, device, n):
    """E float32 global scales on ``device`` (a [E] tensor is used in place when it already is)."""
    if isinstance(global_scales, torch.Tensor):
        g = global_scales
        if not (g.dtype is torch.float32 and g.dim() == 1 and g.is_contiguous() and g.device == device):
            g = g.detach().reshape(-1).to(device=device, dtype=torch.float32).contiguous()
    else:
        g = torch.cat([_scalar(torch, v, device, "global_scales[%d]" % i)
                       for i, v in enumerate(global_scales)]) if len(global_scales) else None
    if g is None or g.numel() != n:
        raise ValueError("global_scales: expected %d scales" % n)
    return g


def _experts_quant(torch, x, global_scales, expert_offsets, swizzle):
    """Stacked form: x [T, K], rows offsets[e]:offsets[e+1] with global_scales[e]."""
    if swizzle:
        raise ValueError("swizzle=True is not supported with expert_offsets (pad each expert "
                         "to 128 rows and use the list form)")
    if not isinstance(x, torch.Tensor):
        raise TypeError("xs: with expert_offsets, expected one [T, K] tensor, got %s" % type(x).__name__)
    if x.dim() != 2 or x.shape[1] % _BLOCK or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        _check_x(torch, x, "xs")
    if not x.is_contiguous() or x.data_ptr() & 15:
        x = _prep(torch, x, "xs")
    off = expert_offsets
    if not isinstance(off, torch.Tensor) or off.dtype not in (torch.int32, torch.int64) or off.dim() != 1:
        raise TypeError("expert_offsets: expected a 1-D int32 or int64 tensor [E + 1]")
    dev = x.device
    cuda = dev.type == "cuda"
    if off.get_device() != x.get_device():
        raise ValueError("expert_offsets: must be on xs's device (%s), got %s" % (dev, off.device))
    if not off.is_contiguous():
        off = off.contiguous()
    e = off.numel() - 1
    if e < 1:
        raise ValueError("expert_offsets: expected E + 1 >= 2 values")
    t, k = x.shape
    if not cuda:
        v = off.tolist()
        if v[0] != 0 or v[-1] != t or any(b < a for a, b in zip(v, v[1:])):
            raise ValueError("expert_offsets: must rise from 0 to the number of rows (%d)" % t)
    gs = _gs_vector(torch, global_scales, dev, e)
    q = torch.empty((t, k // 2), dtype=torch.uint8, device=dev)
    s = torch.empty((t, k // _BLOCK), dtype=torch.float8_e4m3fn, device=dev)
    _C.experts_quant(x.data_ptr(), gs.data_ptr(), off.data_ptr(), off.dtype == torch.int64,
                     q.data_ptr(), s.data_ptr(), t, k, e, _dtype_code(torch, x.dtype, "xs"),
                     2 if cuda else 1, dev.index if cuda else -1, _stream(torch, dev))
    return q, s


def scaled_fp4_grouped_quant(xs, global_scales, *, swizzle=False, expert_offsets=None, packed=False):
    """Quantize a list of (expert) matrices with ONE kernel launch (MoE).

    Args:
        xs: sequence of E tensors ``[M_i, K_i]``, all the same dtype (float16 / bfloat16 /
            float32) and device; each K_i a multiple of 16; M_i may be 0. With
            ``expert_offsets``: ONE tensor ``[T, K]`` holding all experts' rows, sorted by
            expert.
        global_scales: E global scales: a 1-D tensor ``[E]`` or a sequence of floats /
            one-element tensors.
        swizzle: per-matrix swizzled scales, as in :func:`scaled_fp4_quant` (list form only).
        expert_offsets: int32 / int64 tensor ``[E + 1]`` on xs's device: rows
            ``offsets[e]:offsets[e+1]`` of xs belong to expert e and use ``global_scales[e]``.
            Must rise from 0 to T (checked on CPU; on CUDA the kernel reads them from device
            memory, unchecked, so the call never synchronizes).
        packed: list form only: return the two packed buffers instead of per-matrix views.

    Returns:
        List form: ``(qs, scales)``, two lists of E tensors equal to ``scaled_fp4_quant(xs[i],
        global_scales[i], swizzle=swizzle)``, views into one uint8 buffer and one
        float8_e4m3fn buffer, matrix after matrix (when all K_i are equal the buffers are
        ``[sum M_i, K/2]`` and ``[sum rows_i, K/16 or Kp]``); with ``packed=True`` those two
        buffers. With ``expert_offsets``: ``(q [T, K/2], scale [T, K/16])``, row i quantized
        with its expert's global scale -- the operands of :func:`scaled_fp4_grouped_mm`.

    Host cost: the stacked form is O(1) per call (no per-expert Python work); the list form
    reads each tensor's pointer, shape, dtype and device in C++ (bindings.cpp); returning E
    views per output costs about a microsecond each (``packed=True`` avoids it).

    Raises:
        TypeError / ValueError: as :func:`scaled_fp4_quant`, and when dtypes or devices of
        the matrices differ or the number of scales is not E.
    """
    if expert_offsets is not None:
        if not swizzle:
            r = fast_experts_quant(xs, global_scales, expert_offsets)
            if r is not None:
                return r
        return _experts_quant(_torch(), xs, global_scales, expert_offsets, swizzle)
    torch = _torch()
    xs = list(xs)
    if not xs:
        return [], []
    x0 = xs[0]
    _check_x(torch, x0, "xs[0]")
    device, dtype = x0.device, x0.dtype
    _check_device(x0, "xs[0]")
    gs = _gs_vector(torch, global_scales, device, len(xs))
    cuda = device.type == "cuda"
    zeros = torch.zeros

    def alloc(q_shape, s_shape, zero_scales):
        return (torch.empty(q_shape, dtype=torch.uint8, device=device),
                (zeros if zero_scales else torch.empty)(s_shape, dtype=torch.uint8, device=device))

    r = _C.grouped_quant_list(xs, dtype, _dtype_code(torch, dtype, "xs"),
                              device.index if cuda else -1, bool(swizzle), gs.data_ptr(),
                              _stream(torch, device), alloc)
    if r is not None:
        q_all, s_all, ms, srows = r
        s_all = s_all.view(torch.float8_e4m3fn)
        if packed:
            return q_all, s_all
        if q_all.dim() == 2:  # split_with_sizes: half the host time of Tensor.split(list)
            return (list(torch.split_with_sizes(q_all, ms)),
                    list(torch.split_with_sizes(s_all, srows)))
        qs, ss, qo, so = [], [], 0, 0
        for x, m, rr in zip(xs, ms, srows):
            kk = x.shape[1]
            c = (kk // _BLOCK + 3) // 4 * 4 if swizzle else kk // _BLOCK
            qs.append(q_all[qo:qo + m * kk // 2].view(m, kk // 2))
            ss.append(s_all[so:so + rr * c].view(rr, c))
            qo += m * kk // 2
            so += rr * c
        return qs, ss
    return _grouped_quant_general(torch, xs, gs, swizzle, packed)


def _grouped_quant_general(torch, xs, gs, swizzle, packed):
    """List form when some matrix is not contiguous or not 16-byte aligned (copies those)."""
    x0 = xs[0]
    device, dtype = x0.device, x0.dtype
    ms, ks, ptrs = [], [], []
    for i, x in enumerate(xs):
        if not isinstance(x, torch.Tensor) or x.dtype is not dtype or x.device != device:
            _check_x(torch, x, "xs[%d]" % i)
            raise ValueError("xs[%d]: all matrices must share dtype and device" % i)
        shp = x.shape
        if len(shp) != 2 or shp[1] % _BLOCK:
            _check_x(torch, x, "xs[%d]" % i)
        p = x.data_ptr()
        # inputs are only read through their pointers: keep them as they are when possible
        if p & 15 or not x.is_contiguous():
            xs[i] = x = _prep(torch, x, "xs[%d]" % i)
            p = x.data_ptr()
        ms.append(shp[0])
        ks.append(shp[1])
        ptrs.append(p)
    n = len(xs)
    same_k = ks.count(ks[0]) == n
    if swizzle:
        srows = [_round_up(m, 128) for m in ms]
        scols = [_round_up(k // _BLOCK, 4) for k in ks]
    else:
        srows, scols = ms, [k // _BLOCK for k in ks]
    if same_k:  # the common MoE case
        rows_total, srows_total = sum(ms), sum(srows)
        q_all = torch.empty((rows_total, ks[0] // 2), dtype=torch.uint8, device=device)
        s_all = (torch.zeros if swizzle else torch.empty)(
            (srows_total, scols[0]), dtype=torch.uint8, device=device)
    else:
        q_all = torch.empty(sum(m * k // 2 for m, k in zip(ms, ks)), dtype=torch.uint8,
                            device=device)
        s_all = (torch.zeros if swizzle else torch.empty)(
            sum(r * c for r, c in zip(srows, scols)), dtype=torch.uint8, device=device)
    code = _dtype_code(torch, dtype, "xs")
    if device.type == "cuda":
        _C.grouped_quant_cuda(ptrs, ms, ks, q_all.data_ptr(),
                              s_all.data_ptr(), gs.data_ptr(), code, bool(swizzle), device.index,
                              _stream(torch, device))
    else:
        q_ptr, s_ptr, gs_ptr = q_all.data_ptr(), s_all.data_ptr(), gs.data_ptr()
        rows, start, qo, so = [], 0, 0, 0
        for i, x in enumerate(xs):
            m, k = ms[i], ks[i]
            rows.append([x.data_ptr() if m else 0, q_ptr + qo, s_ptr + so, gs_ptr + 4 * i, m, k,
                         start, int(bool(swizzle))])
            qo += m * k // 2
            so += srows[i] * scols[i]
            start += m * k // _BLOCK
        table = torch.tensor(rows, dtype=torch.int64)
        _C.grouped_quant(_dl(table), n, start, code, 1, 0, 0)
    s_all = s_all.view(torch.float8_e4m3fn)
    if packed:
        return q_all, s_all
    if same_k:
        return (list(torch.split_with_sizes(q_all, ms)),
                list(torch.split_with_sizes(s_all, srows)))
    qs, ss, qo, so = [], [], 0, 0
    for m, k, r, c in zip(ms, ks, srows, scols):
        qs.append(q_all[qo:qo + m * k // 2].view(m, k // 2))
        ss.append(s_all[so:so + r * c].view(r, c))
        qo += m * k // 2
        so += r * c
    return qs, ss


def dequantize_fp4(q, scale, global_scale, dtype=None):
    """Dequantize NVFP4 data: ``out = dtype(e2m1(q) * (float(scale) / global_scale))``.

    Args:
        q: uint8 ``[M, K/2]`` (element 2i in the low nibble).
        scale: float8_e4m3fn (or its uint8 bytes) ``[M, K/16]``, row-major (unswizzled).
        global_scale: the FP32 global scale used for quantization (tensor or float).
        dtype: float32, float16 or bfloat16 (default bfloat16).

    Returns:
        ``[M, K]`` tensor of ``dtype`` on q's device. Per block ``f = float(scale) /
        global_scale`` (fp32 division), then ``e2m1_value * f`` (fp32 multiply) rounded to
        ``dtype`` (nearest even; beyond the dtype's range: +-inf). A NaN scale gives NaN
        outputs (canonical quiet NaN; NaN bit patterns are not part of the contract).

    Raises:
        TypeError: wrong dtypes. ValueError: inconsistent shapes / devices.
    """
    torch = _torch()
    dtype = torch.bfloat16 if dtype is None else dtype
    _dtype_code(torch, dtype, "dtype")
    q = _prep(torch, q, "q", 4)
    scale = _prep(torch, scale, "scale", 1)
    if q.dtype != torch.uint8 or q.dim() != 2:
        raise TypeError("q: expected a 2-D uint8 tensor, got %s %s" % (q.dtype, tuple(q.shape)))
    m, k = q.shape[0], 2 * q.shape[1]
    if k % _BLOCK:
        raise ValueError("q: K = 2 * q.shape[1] must be a multiple of 16, got %d" % k)
    if tuple(scale.shape) != (m, k // _BLOCK):
        raise ValueError("scale: expected shape %s (unswizzled), got %s"
                         % ((m, k // _BLOCK), tuple(scale.shape)))
    if scale.device != q.device:
        raise ValueError("scale: must be on q's device")
    gs = _scalar(torch, global_scale, q.device, "global_scale")
    out = torch.empty((m, k), dtype=dtype, device=q.device)
    scale = _scale_u8(torch, scale, "scale")
    if q.device.type == "cuda":
        _C.dequant_cuda(q.data_ptr(), scale.data_ptr(), gs.data_ptr(), out.data_ptr(), m, k,
                        _dtype_code(torch, dtype, "dtype"), q.device.index,
                        _stream(torch, q.device))
    else:
        _C.dequant(_dl(q), _dl(scale), _dl(gs), _dl(out), 0)
    return out
