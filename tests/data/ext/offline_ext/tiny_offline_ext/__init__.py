"""tiny_offline_ext: a CUDA extension built from dependencies on an unreachable server."""
from ._C import value

__all__ = ["value"]
