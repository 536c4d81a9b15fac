"""Small sgl-kernel-shaped source trees for the patch_sgl_kernel tests.

The text here is written for these tests: it has the shapes the patch script hooks onto (policy
lines, the include_directories block, the FA3 forcing, the flash_ops import) as they appeared in
sgl-kernel over the years, and little else.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

OLD_ROOT = "old-root"  # <repo>/sgl-kernel/...            (up to 2025)
NEW_ROOT = "new-root"  # <repo>/python/sglang/kernels/aot/... (2026 on)
KERNEL_DIR = "kernel-dir"  # the sgl-kernel directory itself

KERNEL_SUBDIR = {
    OLD_ROOT: Path("sgl-kernel"),
    NEW_ROOT: Path("python/sglang/kernels/aot"),
    KERNEL_DIR: Path("."),
}

# How the CMakeLists turns FA3 on, by era.
FA3_FORCED = "forced"  # set(... ON) for CUDA >= 12.4, overriding -D...=OFF
FA3_FORCED_SM90A = "forced-sm90a"  # ... OR SGL_KERNEL_ENABLE_SM90A
FA3_FORCED_BELOW_13 = "forced-below-13"  # ... AND CUDA < 13
FA3_UPSTREAM_GUARDED = "upstream-guarded"  # a fork that already checks the cache itself
FA3_DEFAULT_ONLY = "default-only"  # later trees: the version only picks option()'s default
FA3_NONE = "none"  # before FA3 existed

# How python/sgl_kernel/flash_attn.py imports flash_ops.
IMPORT_HARD_TRY = "hard-try"  # try/except: raise ImportError(... multi-line ...)
IMPORT_HARD_TRY_ONELINE = "hard-try-oneline"
IMPORT_BARE = "bare"
IMPORT_SOFT = "soft"  # already falls back by itself
IMPORT_UNKNOWN = "unknown"  # a shape the patch does not know
IMPORT_NO_FILE = "no-file"  # no flash_attn.py at all

DEFAULT_POLICIES = (("CMP0169", "OLD"), ("CMP0177", "NEW"))

_HEAD = """\
cmake_minimum_required(VERSION 3.26 FATAL_ERROR)
project(sgl-kernel LANGUAGES CXX CUDA)

include(FetchContent)

# CMake
{policies}set(CMAKE_POSITION_INDEPENDENT_CODE ON)

find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
message(STATUS "Detected CUDA_VERSION=${{CUDA_VERSION}}")

find_package(Torch REQUIRED)

FetchContent_Declare(
    repo-cutlass
    GIT_REPOSITORY https://github.com/NVIDIA/cutlass
    GIT_TAG        v3.9.2
)
FetchContent_Populate(repo-cutlass)
"""

_INCLUDE_DIRS = """
include_directories(
    ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_SOURCE_DIR}/csrc  # kernels and their headers
)
"""

_FLAGS_AND_OPTIONS = """
set(SGL_KERNEL_CUDA_FLAGS
    "-DNDEBUG"
    "-O3"
    "--expt-relaxed-constexpr"
    "--threads=32"
)
{fa3_default}
option(SGL_KERNEL_ENABLE_FP8   "Enable FP8"   ON)
option(SGL_KERNEL_ENABLE_FA3   "Enable FA3"   {fa3_option_default})
option(SGL_KERNEL_ENABLE_SM90A "Enable SM90A" OFF)

if ("${{CUDA_VERSION}}" VERSION_GREATER_EQUAL "12.8")
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_120a,code=sm_120a"
    )
endif()
{fa3_forcing}
set(SOURCES
    "csrc/common_extension.cc"
    "csrc/gemm/nvfp4_quant_kernels.cu"
)

Python_add_library(common_ops MODULE WITH_SOABI ${{SOURCES}})
target_compile_options(common_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${{SGL_KERNEL_CUDA_FLAGS}}>)

if (SGL_KERNEL_ENABLE_FA3)
    Python_add_library(flash_ops MODULE WITH_SOABI "csrc/flash_extension.cc")
    install(TARGETS flash_ops LIBRARY DESTINATION sgl_kernel)
endif()
"""

_FA3_FORCING = {
    FA3_FORCED: """
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4")
    set(SGL_KERNEL_ENABLE_FA3 ON)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_90a,code=sm_90a"
    )
endif()
""",
    FA3_FORCED_SM90A: """
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4" OR SGL_KERNEL_ENABLE_SM90A)
    set(SGL_KERNEL_ENABLE_FA3 ON)
    list(APPEND SGL_KERNEL_CUDA_FLAGS "-gencode=arch=compute_90a,code=sm_90a")
endif()
""",
    FA3_FORCED_BELOW_13: """
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4" AND "${CUDA_VERSION}" VERSION_LESS "13.0")
    set(SGL_KERNEL_ENABLE_FA3 ON)
endif()
""",
    FA3_UPSTREAM_GUARDED: """
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4")
    if (NOT DEFINED CACHE{SGL_KERNEL_ENABLE_FA3})
        set(SGL_KERNEL_ENABLE_FA3 ON)
    endif()
endif()
""",
    FA3_DEFAULT_ONLY: "",
    FA3_NONE: "",
}

_FA3_DEFAULT_ONLY = """
set(DEFAULT_SGL_KERNEL_ENABLE_FA3 OFF)
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4" AND NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
    set(DEFAULT_SGL_KERNEL_ENABLE_FA3 ON)
endif()
"""


def policy_lines(policies, guarded=()):
    """cmake_policy lines; numbers in `guarded` come already wrapped in if(POLICY ...)."""
    out = []
    for num, value in policies:
        line = "cmake_policy(SET %s %s)\n" % (num, value)
        if num in guarded:
            out.append("if(POLICY %s)\n    %sendif()\n" % (num, line))
        else:
            out.append(line)
    return "".join(out)


def cmakelists(policies=DEFAULT_POLICIES, guarded=(), fa3=FA3_FORCED, include_dirs=True) -> str:
    text = _HEAD.format(policies=policy_lines(policies, guarded))
    if include_dirs:
        text += _INCLUDE_DIRS
    text += _FLAGS_AND_OPTIONS.format(
        fa3_default=_FA3_DEFAULT_ONLY if fa3 == FA3_DEFAULT_ONLY else "",
        fa3_option_default="${DEFAULT_SGL_KERNEL_ENABLE_FA3}" if fa3 == FA3_DEFAULT_ONLY else "OFF",
        fa3_forcing=_FA3_FORCING[fa3],
    )
    if fa3 == FA3_NONE:
        text = text.replace('option(SGL_KERNEL_ENABLE_FA3   "Enable FA3"   OFF)\n', "")
    return text


_FLASH_ATTN_TAIL = '''

def is_fa3_supported(device=None) -> bool:
    # FA3 kernels are built for sm80..sm90a only
    return torch.cuda.get_device_capability(device)[0] in (8, 9)


def flash_attn_with_kvcache(q, k_cache, v_cache, softmax_scale=None, causal=False):
    """Attention over a KV cache.

    Example::

        from sgl_kernel import flash_ops
    """
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** (-0.5)
    return torch.ops.sgl_kernel.fwd.default(q, k_cache, v_cache, softmax_scale, causal)
'''

_FLASH_ATTN_IMPORT = {
    IMPORT_HARD_TRY: '''try:
    from sgl_kernel import flash_ops
except:
    raise ImportError(
        "Can not import FA3 in sgl_kernel. Please check your installation."
    )
''',
    IMPORT_HARD_TRY_ONELINE: '''try:
    from sgl_kernel import flash_ops
except ImportError as e:
    raise ImportError("Can not import sgl_kernel. Please check your installation.") from e
''',
    IMPORT_BARE: "from sgl_kernel import flash_ops  # noqa: F401\n",
    IMPORT_SOFT: '''try:
    from sgl_kernel import flash_ops
except ImportError:
    flash_ops = None
''',
    IMPORT_UNKNOWN: "from sgl_kernel import common_ops, flash_ops\n",
}


def flash_attn_py(kind=IMPORT_HARD_TRY) -> str:
    return (
        "from typing import Optional, Union\n\nimport torch\n\n"
        + _FLASH_ATTN_IMPORT[kind]
        + _FLASH_ATTN_TAIL
    )


INIT_PY = '''import torch

from sgl_kernel.version import __version__

common_ops = None  # loaded from the architecture-specific build in the real package
'''

SPARSE_PY = '''def sparse_attn_func(q, k, v):
    # imported lazily: only fails when called
    from sgl_kernel import flash_ops  # noqa: F401

    return q
'''


def write_tree(
    root,
    layout=OLD_ROOT,
    policies=DEFAULT_POLICIES,
    guarded=(),
    fa3=FA3_FORCED,
    include_dirs=True,
    flash_import=IMPORT_HARD_TRY,
) -> Path:
    """Write an sgl-kernel-shaped tree under root in the given layout; return the kernel dir."""
    root = Path(root)
    kdir = root / KERNEL_SUBDIR[layout]
    pkg = kdir / "python" / "sgl_kernel"
    pkg.mkdir(parents=True, exist_ok=True)
    (kdir / "csrc").mkdir(exist_ok=True)
    (kdir / "CMakeLists.txt").write_text(
        cmakelists(policies=policies, guarded=guarded, fa3=fa3, include_dirs=include_dirs))
    (kdir / "csrc" / "common_extension.cc").write_text("// op registrations\n")
    (kdir / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core>=0.10"]\nbuild-backend = "scikit_build_core.build"\n')
    (pkg / "__init__.py").write_text(INIT_PY)
    (pkg / "version.py").write_text('__version__ = "0.3.21"\n')
    (pkg / "sparse_flash_attn.py").write_text(SPARSE_PY)
    if flash_import != IMPORT_NO_FILE:
        (pkg / "flash_attn.py").write_text(flash_attn_py(flash_import))
    if layout == NEW_ROOT:
        (root / "python" / "sglang" / "__init__.py").write_text("")
    if layout in (OLD_ROOT, NEW_ROOT):
        (root / "README.md").write_text("# sglang\n")
    return kdir


def tree_digest(root) -> dict:
    """sha256 and mode of every file under root, keyed by relative path."""
    root = Path(root)
    out = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for fn in filenames:
            p = Path(dirpath) / fn
            out[str(p.relative_to(root))] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                p.stat().st_mode,
            )
    return out
