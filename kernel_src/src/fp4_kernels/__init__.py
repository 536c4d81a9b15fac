"""fp4_kernels: NVFP4 quantization, dequantization and GEMM for torch tensors (CPU and CUDA).

Format (NVIDIA NVFP4): FP4 E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives;
bit 3 is the sign), two per byte with element 2i in the low nibble, one FP8 E4M3 scale
per 16 consecutive elements of the last axis, and an FP32 global scale chosen by the
caller (commonly ``448 * 6 / amax(|x|)``). The exact arithmetic is documented in
:mod:`fp4_kernels.reference`, which is also the definition the kernels are tested against.

Public API:
    scaled_fp4_quant, scaled_fp4_grouped_quant, dequantize_fp4, scaled_fp4_mm,
    scaled_fp4_w4a16_mm (bf16 / fp16 activations, NVFP4 weights), scaled_fp4_grouped_mm and
    scaled_fp4_w4a16_grouped_mm (MoE: one launch for all experts), prepack_fp4_weight /
    PackedFP4Weight (weights reordered once for the fused skinny kernel),
    reference (module), build_info(), selfcheck().

torch is imported lazily (the compiled extension does not link against it), so importing
this package before or after torch both work.
"""
from __future__ import annotations

from ._ext import load as _load

_C = _load()

from ._gemm import (  # noqa: E402
    scaled_fp4_grouped_mm,
    scaled_fp4_mm,
    scaled_fp4_w4a16_grouped_mm,
    scaled_fp4_w4a16_mm,
)
from ._ops import (  # noqa: E402
    dequantize_fp4,
    scaled_fp4_grouped_quant,
    scaled_fp4_quant,
)
from ._prepack import PackedFP4Weight, prepack_fp4_weight  # noqa: E402

__version__ = "0.1.0"
__all__ = [
    "scaled_fp4_quant",
    "scaled_fp4_grouped_quant",
    "dequantize_fp4",
    "scaled_fp4_mm",
    "scaled_fp4_w4a16_mm",
    "scaled_fp4_grouped_mm",
    "scaled_fp4_w4a16_grouped_mm",
    "prepack_fp4_weight",
    "PackedFP4Weight",
    "reference",
    "build_info",
    "selfcheck",
]


def build_info() -> dict:
    """Describe the compiled extension.

    Returns:
        dict with ``version``; ``cuda`` (bool: CUDA kernels compiled in); ``archs`` (list
        of the targets compiled, e.g. ``["sm_90a", "sm_120a"]``, ``compute_XX`` for PTX);
        ``nvcc_version`` (e.g. ``"13.0"``, None for CPU-only builds); ``extension`` (path
        of the loaded ``_C`` file); ``cuda_device_count`` (devices visible now, 0 without
        a driver).
    """
    return {
        "version": __version__,
        "cuda": bool(_C.cuda_compiled()),
        "archs": list(_C.cuda_archs()),
        "nvcc_version": _C.nvcc_version() or None,
        "extension": _C.__file__,
        "cuda_device_count": int(_C.cuda_device_count()),
    }


def selfcheck(device: str = "cpu", seed=None) -> dict:
    """Run every function against :mod:`fp4_kernels.reference` on fresh random inputs.

    See :func:`fp4_kernels._selfcheck.selfcheck` for the list of checks.
    """
    from ._selfcheck import selfcheck as _run

    return _run(device=device, seed=seed)


def __getattr__(name):
    if name == "reference":
        import importlib

        return importlib.import_module(".reference", __name__)
    raise AttributeError("module 'fp4_kernels' has no attribute %r" % name)
