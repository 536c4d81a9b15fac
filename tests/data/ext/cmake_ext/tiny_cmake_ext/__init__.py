"""tiny_cmake_ext: a CUDA extension without torch (verify checks it with a plain import)."""
from ._C import cuda_version, value

__all__ = ["cuda_version", "value"]
