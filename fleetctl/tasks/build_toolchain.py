"""``build_wheel``'s host compiler preflight: the compiler nvcc will compile host code with.

Pure: facts (``host_compilers``, the toolkit's ``host_compiler_max``) and the task's ``env`` and
``cmake_defines`` -> the facts the build runs with (``host_compilers.used`` and ``.choice``) and
at most one problem. The rules are :func:`fleetctl.build.hostcompiler.choose`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..build.hostcompiler import choose, with_choice


def host_compiler_preflight(facts: Mapping[str, Any], args: Any) -> tuple[Mapping[str, Any], list[str], str | None]:
    """``(facts, problems, note)``.

    ``facts`` carries the choice (the build sets ``CUDAHOSTCXX``, ``NVCC_CCBIN`` and
    ``-DCMAKE_CUDA_HOST_COMPILER`` from it, the record and the class key read it); ``problems`` is
    ``["nvcc 13.0 at ... refuses the host compiler gcc 16.1 (...) ...: install g++-15 ..."]`` when
    neither nvcc's default nor any installed compiler is accepted; ``note`` says what was chosen.
    """
    choice = choose(facts, getattr(args, "env", None) or {}, getattr(args, "cmake_defines", None) or {})
    return with_choice(facts, choice), ([choice.problem] if choice.problem else []), choice.note
