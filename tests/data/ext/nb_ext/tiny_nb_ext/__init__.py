from ._C import answer  # noqa: F401
