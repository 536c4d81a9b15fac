"""tiny_cpp_ext: torch first (it loads libc10 for ``_C``), then the compiled module."""
import torch  # noqa: F401

from ._C import device, scale  # noqa: E402

__all__ = ["device", "scale"]
