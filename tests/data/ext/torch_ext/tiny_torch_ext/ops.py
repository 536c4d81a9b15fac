"""The extension's API: torch is imported first, so ``_C``'s libtorch dependencies resolve."""
import torch  # noqa: F401  (loads libc10/libtorch for _C)

from ._C import device, kernel_archs, scale  # noqa: E402

__all__ = ["device", "kernel_archs", "scale"]
