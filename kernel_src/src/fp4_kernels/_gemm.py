"""NVFP4 GEMMs: scaled_fp4_mm (W4A4), scaled_fp4_w4a16_mm (bf16 / fp16 activations) and their
grouped (MoE) forms. CPU and CUDA tensors; see :mod:`fp4_kernels.reference` for the definition.

CUDA paths (bench/NOTES.md has the measurements behind the choices):
  * "fused": cuda_skinny.cu -- reads the packed E2M1 codes and E4M3 scales, dequantizes in
    registers, multiplies with tensor cores (mma.sync on SM80-SM100; the block-scaled FP4
    MMA on SM120 for W4A4); split-K over a thread-block cluster where N is small. Needs K a
    multiple of 128 and 16-byte aligned operands.
  * "cublas": dequantize both operands to bf16 / fp16 (exact) and call cuBLAS; the big-shape
    path.
  * "mma": the older fused kernel that dequantizes 128x128 tiles in shared memory.
The default picks "fused" for M <= _gemm_fast.FUSED_MAX_ROWS (and K % 128 == 0), else "cublas".

Prepacked weights (fp4_kernels.prepack_fp4_weight -> PackedFP4Weight, passed as b_q with
b_scale=None): cuda_pk.cu's kernel (and cuda_wg.cu's wgmma kernel from M = 17 on compute capability
9.0 (up to M = 32 where its plan splits K at most in 2), from M = 9 for bf16 activations and weights of >= 2^25 elements with N >= 8192 whose plan
splits no K range) where _gemm_fast.pk_takes(device, n, k, M) (W4A4: after an exact
dequantization of the FP4 activations to bf16), else the weight is dequantized exactly from
the packed layout and cuBLAS runs. On CPU the weight is unpacked (bit-exact inverse) and the CPU
path runs, so results there are identical to the unpacked weight's.

The host side of every call is a few attribute reads, one output allocation and one call into
the extension (no DLPack, no detach / contiguous copies on the fast path).
"""
from __future__ import annotations

from ._ext import load as _load
from . import _gemm_fast
from ._gemm_fast import _fast_grouped, _fast_pk_w4a4, _fast_pk_w4a16, _fast_w4a4, _fast_w4a16
from ._prepack import PackedFP4Weight
from ._ops import _dl, _dtype_code, _round_up, _scalar, _stream, _torch

_C = _load()
_BLOCK = 16


_cublas_lib = None   # None: not looked up yet; "": unavailable (see _cublas_why)
_cublas_why = ""
_zeros = {}
_AK_FP4, _AK_BF16, _AK_F16 = 0, 1, 2


def _cublas(torch):
    """Path of the cuBLAS library torch loaded, once its entry points are resolved in _C;
    "" when unavailable (non-Linux, not found, FP4_KERNELS_NO_CUBLAS=1)."""
    global _cublas_lib, _cublas_why
    if _cublas_lib is None:
        import os

        _cublas_lib = ""
        if os.environ.get("FP4_KERNELS_NO_CUBLAS", "") not in ("", "0"):
            _cublas_why = "disabled by FP4_KERNELS_NO_CUBLAS"
            return _cublas_lib
        try:
            torch.cuda.current_blas_handle()  # loads cuBLAS and creates this thread's handle
            path = ""
            with open("/proc/self/maps") as f:
                for line in f:
                    p = line.rsplit(None, 1)[-1]
                    if os.path.basename(p).startswith("libcublas.so"):
                        path = p
                        break
            if not path:
                _cublas_why = "libcublas.so not mapped in this process"
            else:
                err = _C.cublas_load(path)
                if err:
                    _cublas_why = err
                else:
                    _cublas_lib = path
        except Exception as e:  # noqa: BLE001 - any failure means: use the fallback
            _cublas_why = "%s: %s" % (type(e).__name__, e)
    return _cublas_lib


def _zero(torch, device):
    z = _zeros.get(device)
    if z is None:
        z = _zeros[device] = torch.zeros(1, dtype=torch.float32, device=device)
    return z


def _alpha(torch, alpha, dev):
    """alpha for _gemm_16: a python number as it is (cuBLAS reads it from the host: no one-element
    device tensor, ~8 us of host time a call on an H100 host, bench/issue28_host.py), else the
    one-element float32 device tensor of _scalar."""
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        return float(alpha)
    return _scalar(torch, alpha, dev, "alpha")


def _gemm_16(torch, a16, b16, al, out_dtype, m, n, k, dev):
    """out = alpha * a16 @ b16^T (both bf16 or both fp16, exact values), fp32 accumulation,
    one rounding: cuBLAS with alpha in its epilogue, else torch.mm to fp32 and one scale pass.
    ``al``: a one-element float32 device tensor, or a python float (rounded to float32 once, as the
    tensor would be, and read by cuBLAS from the host)."""
    ab_code = _dtype_code(torch, a16.dtype, "ab")
    if _cublas(torch):
        out = torch.empty((m, n), dtype=out_dtype, device=dev)
        host = isinstance(al, float)
        _C.cublas_gemm(torch.cuda.current_blas_handle(), m, n, k, a16.data_ptr(), b16.data_ptr(),
                       ab_code, out.data_ptr(), _dtype_code(torch, out_dtype, "out_dtype"),
                       0 if host else al.data_ptr(), 0 if host else _zero(torch, dev).data_ptr(),
                       al if host else 0.0)
        return out
    try:
        c = torch.mm(a16, b16.t(), out_dtype=torch.float32)
    except TypeError:  # torch < 2.8: fp32 GEMM on the (exactly representable) values
        c = torch.mm(a16.float(), b16.float().t())
    if out_dtype == torch.float32:
        return c.mul_(al)
    out = torch.empty((m, n), dtype=out_dtype, device=dev)
    return torch.mul(c, al, out=out)


def _mm_cuda_cublas(torch, a_q, b_q, a_scale, b_scale, al, out_dtype, m, n, k, dev):
    """Dequantize A and B (global scale 1, exact in bf16 / fp16) in one call, then one GEMM."""
    ab = torch.float16 if out_dtype == torch.float16 else torch.bfloat16
    buf = torch.empty((m + n, k), dtype=ab, device=dev)
    _C.dequant_pair_cuda(a_q.data_ptr(), a_scale.data_ptr(), b_q.data_ptr(), b_scale.data_ptr(),
                         buf.data_ptr(), m, n, k, _dtype_code(torch, ab, "ab"), dev.index,
                         _stream(torch, dev))
    return _gemm_16(torch, buf[:m], buf[m:], al, out_dtype, m, n, k, dev)


# ---- argument checks (cheap: attribute reads only) --------------------------------------------
def _fail_tensor(torch, t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (name, type(t).__name__))
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError("%s: only CPU and CUDA tensors are supported, got %s" % (name, t.device))


def _codes(torch, t, name, rows_dims):
    """uint8 codes [..., K/2] with ``rows_dims`` leading dims; returns the tensor (contiguous)."""
    _fail_tensor(torch, t, name)
    if t.dtype != torch.uint8 or t.dim() != rows_dims + 1:
        raise TypeError("%s: expected a %d-D uint8 tensor, got %s %s"
                        % (name, rows_dims + 1, t.dtype, tuple(t.shape)))
    return t if t.is_contiguous() else t.contiguous()


def _scales(torch, t, name, shape):
    _fail_tensor(torch, t, name)
    if t.dtype == torch.float8_e4m3fn:
        t = t.view(torch.uint8)
    elif t.dtype != torch.uint8:
        raise TypeError("%s: expected float8_e4m3fn (or its uint8 bytes), got %s" % (name, t.dtype))
    if tuple(t.shape) != shape:
        raise ValueError("%s: expected shape %s (unswizzled), got %s" % (name, shape, tuple(t.shape)))
    return t if t.is_contiguous() else t.contiguous()


def _acts(torch, a, name="a"):
    _fail_tensor(torch, a, name)
    if a.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError("%s: expected bfloat16 or float16 activations, got %s" % (name, a.dtype))
    if a.dim() != 2:
        raise ValueError("%s: expected a 2-D tensor [M, K], got shape %s" % (name, tuple(a.shape)))
    if a.shape[1] % _BLOCK:
        raise ValueError("%s: K must be a multiple of 16, got %d" % (name, a.shape[1]))
    return a if a.is_contiguous() else a.contiguous()


def _same_device(dev, **tensors):
    for name, t in tensors.items():
        if t.device != dev:
            raise ValueError("%s: must be on the same device as the activations (%s), got %s"
                             % (name, dev, t.device))


def _fused_ok(k, *tensors):
    if k <= 0 or k % 128:
        return False
    for t in tensors:
        if t is not None and t.data_ptr() & 15:
            return False
    return True


def _alpha_arg(torch, alpha, dev, name, n_experts=None):
    """(pointer, per_expert, value) for the kernels: a device float32 tensor is read in place,
    a python number is passed by value; anything else becomes a float32 tensor on dev."""
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        return 0, False, float(alpha), None
    if not isinstance(alpha, torch.Tensor):
        raise TypeError("%s: expected a float or a tensor, got %s" % (name, type(alpha).__name__))
    n = alpha.numel()
    if n_experts is None or n == 1:
        t = _scalar(torch, alpha, dev, name)
        return t.data_ptr(), False, 0.0, t
    if n != n_experts:
        raise ValueError("%s: expected 1 or %d values (one per expert), got %d" % (name, n_experts, n))
    if not alpha.is_floating_point():
        raise TypeError("%s: expected a floating-point tensor, got %s" % (name, alpha.dtype))
    t = alpha.detach().reshape(-1).to(device=dev, dtype=torch.float32).contiguous()
    return t.data_ptr(), True, 0.0, t


def _offsets(torch, off, dev, n_experts_hint, t_rows):
    _fail_tensor(torch, off, "expert_offsets")
    if off.dtype not in (torch.int32, torch.int64) or off.dim() != 1 or off.numel() < 2:
        raise TypeError("expert_offsets: expected a 1-D int32 or int64 tensor [E + 1], got %s %s"
                        % (off.dtype, tuple(off.shape)))
    if off.numel() - 1 != n_experts_hint:
        raise ValueError("expert_offsets: expected %d values (experts + 1), got %d"
                         % (n_experts_hint + 1, off.numel()))
    if off.device != dev:
        raise ValueError("expert_offsets: must be on the activations' device (%s), got %s"
                         % (dev, off.device))
    off = off if off.is_contiguous() else off.contiguous()
    if dev.type == "cpu":  # CUDA: not checked (that would synchronize); see the docstrings
        v = off.tolist()
        if v[0] != 0 or v[-1] != t_rows or any(b < a for a, b in zip(v, v[1:])):
            raise ValueError("expert_offsets: must rise from 0 to the number of rows (%d), got %s"
                             % (t_rows, v if len(v) <= 12 else v[:6] + ["..."] + v[-3:]))
    return off


def _run_fused(torch, akind, a, a_scale, b_q, b_scale, alpha, offsets, out_dtype, t, n, k, e,
               dev, n_experts=None, tm=0, kw=0, split=0, no_omma=False):
    ap, per_e, aval, _keep = _alpha_arg(torch, alpha, dev, "alpha", n_experts)
    out = torch.empty((t, n), dtype=out_dtype, device=dev)
    code = _dtype_code(torch, out_dtype, "out_dtype")
    off_ptr = offsets.data_ptr() if offsets is not None else 0
    off64 = offsets is not None and offsets.dtype == torch.int64
    s_ptr = a_scale.data_ptr() if a_scale is not None else 0
    if dev.type == "cuda":
        _C.skinny_mm_cuda(akind, a.data_ptr(), s_ptr, b_q.data_ptr(), b_scale.data_ptr(), ap, per_e,
                          aval, off_ptr, off64, out.data_ptr(), code, t, n, k, e, tm, kw, split,
                          no_omma, dev.index, _stream(torch, dev))
    else:
        _C.skinny_mm_cpu(akind, a.data_ptr(), s_ptr, b_q.data_ptr(), b_scale.data_ptr(), ap, per_e,
                         aval, off_ptr, off64, out.data_ptr(), code, t, n, k, e)
    return out


def scaled_fp4_mm(a_q, b_q, a_scale, b_scale, alpha, out_dtype=None, *, impl=None):
    """NVFP4 GEMM: ``out[M, N] = alpha * A @ B^T``.

    Args:
        a_q: uint8 ``[M, K/2]``; b_q: uint8 ``[N, K/2]`` (both quantized along K), or a
            :class:`~fp4_kernels.PackedFP4Weight` (then ``b_scale`` must be None).
        a_scale: float8_e4m3fn ``[M, K/16]``; b_scale: ``[N, K/16]`` (unswizzled).
        alpha: ``1 / (gs_a * gs_b)`` (tensor or float).
        out_dtype: bfloat16 (default), float16 or float32.
        impl: CUDA only: ``"fused"`` (FP4 read directly, dequantized in registers, tensor cores;
            needs K % 128 == 0 and 16-byte aligned operands), ``"cublas"`` (dequantize A and B
            to bf16 -- fp16 for fp16 output -- with global scale 1, then cuBLAS with fp32
            accumulation and alpha in its epilogue), ``"mma"`` (the older tile-dequantizing
            kernel), or None: ``"fused"`` when ``M <= _gemm_fast.FUSED_MAX_ROWS`` and it applies, else
            ``"cublas"`` (K == 0: ``"mma"``). Ignored on CPU.

    Returns:
        ``[M, N]`` tensor of ``out_dtype``. A and B are the values ``e2m1 * e4m3_scale``
        (exact in fp32, bf16 and fp16: at most 6 significant bits, magnitudes in
        [2^-10, 2688]); products are exact and summed in FP32 (CUDA: tensor cores, fp32
        accumulate; CPU: sequential fp32 sums), then multiplied by alpha in fp32 and rounded
        once to ``out_dtype``.

    Error bound (tested against a float64 computation, ``reference.scaled_fp4_mm``):
        ``|out - ref| <= |alpha| * S * (K + 2) * 2**-22 + u * |ref| + tiny`` with
        ``S = sum_k |A[i,k] * B[j,k]|``, ``u`` = 2**-8 (bf16), 2**-11 (fp16), 2**-24 (fp32)
        and ``tiny`` the dtype's smallest subnormal; see
        :func:`fp4_kernels.reference.scaled_fp4_mm_error_bound`. NaN scales give NaN.

    Raises:
        TypeError / ValueError: wrong dtypes, shapes, devices. RuntimeError: CUDA device
        below compute capability 8.0, or a CUDA error.
    """
    if type(b_q) is PackedFP4Weight:
        if (impl is None or impl == "fused") and b_scale is None:
            out = _fast_pk_w4a4(a_q, a_scale, b_q, alpha, out_dtype)
            if out is not None:
                return out
        return _packed_w4a4(_torch(), a_q, a_scale, b_q, b_scale, alpha, out_dtype, impl)
    if impl is None or impl == "fused":
        out = _fast_w4a4(a_q, b_q, a_scale, b_scale, alpha, out_dtype)
        if out is not None:
            return out
    torch = _torch()
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    _dtype_code(torch, out_dtype, "out_dtype")
    a_q = _codes(torch, a_q, "a_q", 1)
    b_q = _codes(torch, b_q, "b_q", 1)
    m, n, k = a_q.shape[0], b_q.shape[0], 2 * a_q.shape[1]
    if b_q.shape[1] * 2 != k:
        raise ValueError("b_q: expected [N, %d], got %s" % (k // 2, tuple(b_q.shape)))
    if k % _BLOCK:
        raise ValueError("K must be a multiple of 16, got %d" % k)
    a_scale = _scales(torch, a_scale, "a_scale", (m, k // _BLOCK))
    b_scale = _scales(torch, b_scale, "b_scale", (n, k // _BLOCK))
    dev = a_q.device
    _same_device(dev, b_q=b_q, a_scale=a_scale, b_scale=b_scale)
    if dev.type == "cuda":
        if impl is None:
            impl = ("mma" if k == 0 else
                    "fused" if m <= _gemm_fast.FUSED_MAX_ROWS and _fused_ok(k, a_q, b_q, a_scale, b_scale)
                    else "cublas")
        if impl not in ("fused", "cublas", "mma"):
            raise ValueError("impl: expected None, 'fused', 'cublas' or 'mma', got %r" % (impl,))
        if impl == "fused":
            if not _fused_ok(k, a_q, b_q, a_scale, b_scale):
                raise ValueError("impl='fused' needs K a positive multiple of 128 and 16-byte "
                                 "aligned operands (K = %d)" % k)
            return _run_fused(torch, _AK_FP4, a_q, a_scale, b_q, b_scale, alpha, None, out_dtype,
                              m, n, k, 1, dev)
        al = _scalar(torch, alpha, dev, "alpha")
        if impl == "cublas" and m and n and k:
            return _mm_cuda_cublas(torch, a_q, b_q, a_scale, b_scale, al, out_dtype, m, n, k, dev)
        if k % 64:  # the mma kernel works on K tiles of 64: pad with zero codes and scales
            kp = _round_up(k, 64)
            pad = torch.nn.functional.pad
            a_q, b_q = pad(a_q, (0, (kp - k) // 2)), pad(b_q, (0, (kp - k) // 2))
            a_scale = pad(a_scale, (0, (kp - k) // _BLOCK))
            b_scale = pad(b_scale, (0, (kp - k) // _BLOCK))
        out = torch.empty((m, n), dtype=out_dtype, device=dev)
        _C.mm(_dl(a_q), _dl(b_q), _dl(a_scale), _dl(b_scale), _dl(al), _dl(out), _stream(torch, dev))
        return out
    return _run_fused(torch, _AK_FP4, a_q, a_scale, b_q, b_scale, alpha, None, out_dtype, m, n, k,
                      1, dev)


def scaled_fp4_w4a16_mm(a, b_q, b_scale, alpha, out_dtype=None):
    """W4A16 GEMM: 16-bit activations times NVFP4 weights, ``out[M, N] = alpha * a @ B^T``.

    Args:
        a: bfloat16 or float16 ``[M, K]`` (K a multiple of 16).
        b_q: uint8 ``[N, K/2]``; b_scale: float8_e4m3fn ``[N, K/16]`` (unswizzled): the weights
            ``B = e2m1 * e4m3_scale`` (no global scale). Or b_q a
            :class:`~fp4_kernels.PackedFP4Weight` and b_scale None (CUDA: the prepacked kernel
            for M <= ``_gemm_fast.PK_MAX_ROWS``).
        alpha: float or one-element tensor, typically ``1 / gs_b``.
        out_dtype: float32, float16 or bfloat16 (default: a's dtype).

    Returns:
        ``[M, N]`` tensor. Every product ``a * B`` is exact in fp32 (8 or 11 significant bits
        times 6); sums in fp32, then ``alpha * sum`` rounded once. Error bound:
        :func:`fp4_kernels.reference.scaled_fp4_w4a16_mm_error_bound` (the form of
        :func:`scaled_fp4_mm`'s with ``S = |a| @ |B|^T``). CUDA: the fused kernel when K is a
        multiple of 128 and M <= ``_gemm_fast.FUSED_MAX_ROWS`` (else B is dequantized exactly to
        a's dtype and cuBLAS runs).

    Raises:
        TypeError / ValueError: wrong dtypes, shapes, devices.
    """
    if type(b_q) is PackedFP4Weight:
        if b_scale is None:
            out = _fast_pk_w4a16(a, b_q, alpha, out_dtype)
            if out is not None:
                return out
        return _packed_w4a16(_torch(), a, b_q, b_scale, alpha, out_dtype)
    out = _fast_w4a16(a, b_q, b_scale, alpha, out_dtype)
    if out is not None:
        return out
    torch = _torch()
    a = _acts(torch, a)
    out_dtype = a.dtype if out_dtype is None else out_dtype
    _dtype_code(torch, out_dtype, "out_dtype")
    m, k = a.shape
    b_q = _codes(torch, b_q, "b_q", 1)
    n = b_q.shape[0]
    if b_q.shape[1] * 2 != k:
        raise ValueError("b_q: expected [N, %d] for K = %d, got %s" % (k // 2, k, tuple(b_q.shape)))
    b_scale = _scales(torch, b_scale, "b_scale", (n, k // _BLOCK))
    dev = a.device
    _same_device(dev, b_q=b_q, b_scale=b_scale)
    akind = _AK_BF16 if a.dtype == torch.bfloat16 else _AK_F16
    if dev.type == "cuda" and (m > _gemm_fast.FUSED_MAX_ROWS or not _fused_ok(k, a, b_q, b_scale)):
        if not (m and n and k):
            return torch.zeros((m, n), dtype=out_dtype, device=dev)
        b16 = torch.empty((n, k), dtype=a.dtype, device=dev)
        _C.dequant_cuda(b_q.data_ptr(), b_scale.data_ptr(), 0, b16.data_ptr(), n, k,
                        _dtype_code(torch, a.dtype, "a"), dev.index, _stream(torch, dev))
        return _gemm_16(torch, a, b16, _alpha(torch, alpha, dev), out_dtype, m, n, k, dev)
    return _run_fused(torch, akind, a, None, b_q, b_scale, alpha, None, out_dtype, m, n, k, 1, dev)


# ---- prepacked weights ---------------------------------------------------------------------------
def _check_packed(torch, pw, b_scale, k, dev):
    if b_scale is not None:
        raise ValueError("b_scale: must be None when b_q is a PackedFP4Weight (its scales are inside it)")
    if pw.k != k:
        raise ValueError("b_q: the prepacked weight is [%d, %d]; the activations have K = %d" % (pw.n, pw.k, k))
    if pw.device != dev:
        raise ValueError("b_q: the prepacked weight must be on the activations' device (%s), got %s"
                         % (dev, pw.device))
    if not pw.data.is_contiguous():
        pw = PackedFP4Weight(pw.data.contiguous(), pw.n, pw.k)
    return pw


def _run_pk(torch, akind, a, pw, alpha, out_dtype, m, n, k, dev, rt=0, split=0, un=0):
    """The prepacked kernel: a bf16 / fp16 [m, k] contiguous and 16-byte aligned."""
    ap, _per, aval, _keep = _alpha_arg(torch, alpha, dev, "alpha")
    out = torch.empty((m, n), dtype=out_dtype, device=dev)
    data = pw.data
    _C.pk_mm_cuda(akind, a.data_ptr(), k, data.data_ptr(), ap, aval, out.data_ptr(),
                  _dtype_code(torch, out_dtype, "out_dtype"), m, n, k, data.shape[0], data.shape[1],
                  rt, split, un, dev.index, _stream(torch, dev))
    return out


def _pk_dense(torch, pw, dtype, dev):
    """The prepacked weight as dense bf16 / fp16 values e2m1 * scale (exact), [N, K]."""
    out = torch.empty((pw.n, pw.k), dtype=dtype, device=dev)
    _C.pk_dequant_cuda(pw.data.data_ptr(), out.data_ptr(), pw.n, pw.k, pw.data.shape[0], pw.data.shape[1],
                       _dtype_code(torch, dtype, "dtype"), dev.index, _stream(torch, dev))
    return out


def _packed_w4a16(torch, a, pw, b_scale, alpha, out_dtype):
    a = _acts(torch, a)
    out_dtype = a.dtype if out_dtype is None else out_dtype
    _dtype_code(torch, out_dtype, "out_dtype")
    m, k = a.shape
    dev = a.device
    pw = _check_packed(torch, pw, b_scale, k, dev)
    if dev.type != "cuda":
        b_q, b_s = pw.unpack()
        return scaled_fp4_w4a16_mm(a, b_q, b_s, alpha, out_dtype)
    n = pw.n
    if not (m and n):
        return torch.zeros((m, n), dtype=out_dtype, device=dev)
    if a.data_ptr() & 15:
        a = a.clone()
    if _gemm_fast.pk_takes(dev.index, n, k, m):
        return _run_pk(torch, _AK_BF16 if a.dtype == torch.bfloat16 else _AK_F16, a, pw, alpha, out_dtype,
                       m, n, k, dev)
    return _gemm_16(torch, a, _pk_dense(torch, pw, a.dtype, dev), _alpha(torch, alpha, dev),
                    out_dtype, m, n, k, dev)


def _packed_w4a4(torch, a_q, a_scale, pw, b_scale, alpha, out_dtype, impl):
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    _dtype_code(torch, out_dtype, "out_dtype")
    if not isinstance(pw, PackedFP4Weight):
        raise TypeError("b_q: expected a uint8 tensor or a PackedFP4Weight")
    a_q = _codes(torch, a_q, "a_q", 1)
    m, k = a_q.shape[0], 2 * a_q.shape[1]
    a_scale = _scales(torch, a_scale, "a_scale", (m, k // _BLOCK))
    dev = a_q.device
    _same_device(dev, a_scale=a_scale)
    pw = _check_packed(torch, pw, b_scale, k, dev)
    if impl not in (None, "fused", "cublas", "mma"):
        raise ValueError("impl: expected None, 'fused', 'cublas' or 'mma', got %r" % (impl,))
    if dev.type != "cuda" or impl == "mma":
        b_q, b_s = pw.unpack()
        return scaled_fp4_mm(a_q, b_q, a_scale, b_s, alpha, out_dtype, impl=impl)
    n = pw.n
    if not (m and n):
        return torch.zeros((m, n), dtype=out_dtype, device=dev)
    if a_q.data_ptr() & 15:
        a_q = a_q.clone()
    pk = impl == "fused" or (impl is None and _gemm_fast.pk_takes(dev.index, n, k, m))
    ab = torch.bfloat16 if pk or out_dtype != torch.float16 else torch.float16
    a16 = torch.empty((m, k), dtype=ab, device=dev)
    _C.dequant_cuda(a_q.data_ptr(), a_scale.data_ptr(), 0, a16.data_ptr(), m, k, _dtype_code(torch, ab, "ab"),
                    dev.index, _stream(torch, dev))
    if pk:
        return _run_pk(torch, _AK_BF16, a16, pw, alpha, out_dtype, m, n, k, dev)
    return _gemm_16(torch, a16, _pk_dense(torch, pw, ab, dev), _alpha(torch, alpha, dev),
                    out_dtype, m, n, k, dev)


def _grouped_b(torch, b_q, b_scale, k):
    b_q = _codes(torch, b_q, "b_q", 2)
    e, n = b_q.shape[0], b_q.shape[1]
    if b_q.shape[2] * 2 != k:
        raise ValueError("b_q: expected [E, N, %d] for K = %d, got %s" % (k // 2, k, tuple(b_q.shape)))
    b_scale = _scales(torch, b_scale, "b_scale", (e, n, k // _BLOCK))
    return b_q, b_scale, e, n


def _grouped_fallback(torch, fn, a_rows, offsets, alpha, n_experts, out, **kw):
    """K not a multiple of 128 on CUDA: one call per expert (reads the offsets: synchronizes)."""
    bounds = offsets.tolist()
    al = alpha
    for e in range(n_experts):
        lo, hi = bounds[e], bounds[e + 1]
        if hi > lo:
            ae = al[e] if isinstance(al, torch.Tensor) and al.numel() > 1 else al
            out[lo:hi] = fn(*a_rows(lo, hi), e, ae)
    return out


def scaled_fp4_grouped_mm(a_q, a_scale, b_q, b_scale, alpha, expert_offsets, out_dtype=None):
    """Grouped (MoE) NVFP4 GEMM in one launch: rows ``offsets[e]:offsets[e+1]`` of A times
    expert e's weights.

    Args:
        a_q: uint8 ``[T, K/2]``, a_scale: ``[T, K/16]``: the activations of all experts, sorted
            by expert. b_q: uint8 ``[E, N, K/2]``, b_scale: ``[E, N, K/16]``: expert weights.
        alpha: float, one-element tensor, or float tensor ``[E]`` (per expert).
        expert_offsets: int32 / int64 tensor ``[E + 1]`` on A's device, rising from 0 to T.
            On CPU it is checked (ValueError); on CUDA it is read by the kernel and not checked
            (that would synchronize): values are clamped to [0, T] and rows outside every
            expert's range are left unwritten.
        out_dtype: bfloat16 (default), float16 or float32.

    Returns:
        ``[T, N]``: ``out[i] = scaled_fp4_mm(a_q[i], b_q[e], ...)`` for the expert e owning row
        i, with the same error bound. CUDA: one persistent launch over (expert, token tile,
        row group) tiles, host cost independent of E (needs K % 128 == 0; else one call per
        expert after reading the offsets).
    """
    out = _fast_grouped(a_q, a_scale, b_q, b_scale, alpha, expert_offsets, out_dtype)
    if out is not None:
        return out
    torch = _torch()
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    _dtype_code(torch, out_dtype, "out_dtype")
    a_q = _codes(torch, a_q, "a_q", 1)
    t, k = a_q.shape[0], 2 * a_q.shape[1]
    if k % _BLOCK:
        raise ValueError("K must be a multiple of 16, got %d" % k)
    a_scale = _scales(torch, a_scale, "a_scale", (t, k // _BLOCK))
    b_q, b_scale, e, n = _grouped_b(torch, b_q, b_scale, k)
    dev = a_q.device
    _same_device(dev, a_scale=a_scale, b_q=b_q, b_scale=b_scale)
    off = _offsets(torch, expert_offsets, dev, e, t)
    if dev.type == "cuda" and not _fused_ok(k, a_q, a_scale, b_q, b_scale):
        out = torch.empty((t, n), dtype=out_dtype, device=dev)
        return _grouped_fallback(
            torch, lambda aq, asc, ei, ae: scaled_fp4_mm(aq, b_q[ei], asc, b_scale[ei], ae, out_dtype),
            lambda lo, hi: (a_q[lo:hi], a_scale[lo:hi]), off, alpha, e, out)
    return _run_fused(torch, _AK_FP4, a_q, a_scale, b_q, b_scale, alpha, off, out_dtype, t, n, k,
                      e, dev, n_experts=e)


def scaled_fp4_w4a16_grouped_mm(a, b_q, b_scale, alpha, expert_offsets, out_dtype=None):
    """Grouped (MoE) W4A16 GEMM in one launch: rows ``offsets[e]:offsets[e+1]`` of ``a``
    (bfloat16 / float16 ``[T, K]``) times expert e's NVFP4 weights ``b_q [E, N, K/2]``,
    ``b_scale [E, N, K/16]``; alpha and expert_offsets as in :func:`scaled_fp4_grouped_mm`.
    Returns ``[T, N]`` of out_dtype (default a's dtype), rows as
    :func:`scaled_fp4_w4a16_mm` with the expert's weights."""
    out = _fast_grouped(a, None, b_q, b_scale, alpha, expert_offsets, out_dtype)
    if out is not None:
        return out
    torch = _torch()
    a = _acts(torch, a)
    out_dtype = a.dtype if out_dtype is None else out_dtype
    _dtype_code(torch, out_dtype, "out_dtype")
    t, k = a.shape
    b_q, b_scale, e, n = _grouped_b(torch, b_q, b_scale, k)
    dev = a.device
    _same_device(dev, b_q=b_q, b_scale=b_scale)
    off = _offsets(torch, expert_offsets, dev, e, t)
    akind = _AK_BF16 if a.dtype == torch.bfloat16 else _AK_F16
    if dev.type == "cuda" and not _fused_ok(k, a, b_q, b_scale):
        out = torch.empty((t, n), dtype=out_dtype, device=dev)
        return _grouped_fallback(
            torch, lambda ar, ei, ae: scaled_fp4_w4a16_mm(ar, b_q[ei], b_scale[ei], ae, out_dtype),
            lambda lo, hi: (a[lo:hi],), off, alpha, e, out)
    return _run_fused(torch, akind, a, None, b_q, b_scale, alpha, off, out_dtype, t, n, k, e, dev,
                      n_experts=e)


def _pk_plan(kind, t, n, k, rt=0, split=0, un=0, device=0):
    """The CUDA launch configuration (tokens per tile, rt, split, un) of the prepacked kernel."""
    return _C.pk_plan_cuda({"bf16": _AK_BF16, "f16": _AK_F16}[kind], t, n, k, rt, split, un, device)


def _fused_plan(kind, t, n, k, experts=1, grouped=False, tm=0, kw=0, split=0, no_omma=False, device=0):
    """The CUDA launch configuration (tm, kw, split, row groups, omma) of the fused kernel
    (for the benchmark and the notes)."""
    akind = {"fp4": _AK_FP4, "bf16": _AK_BF16, "f16": _AK_F16}[kind]
    return _C.skinny_plan_cuda(akind, t, n, k, experts, grouped, tm, kw, split, no_omma, device)
