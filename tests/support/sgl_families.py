"""One small sgl-kernel tree per construct family found in upstream's real history, for CI.

CI has no network, and upstream code never goes into this repository, so each family that
scripts/sgl_history.py found (tests/data/sgl_kernel_history.json, docs/sgl-kernel-history.md) is
modelled here in our own words: a CMakeLists.txt and a flash_attn.py holding the constructs that
the patch script and the checks care about (policy settings, the include anchor, the FA3 switch,
nvcc's --threads, the flash_ops import) as the family has them, and little else. Each family is
named by the upstream commit that first had it; tests/test_sgl_kernel_history.py checks that
every fixture has its family's features (tests/support/sgl_checks.features) and passes the same
checks with the same outcomes as the real revisions did.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Family:
    """The construct choices of one family (see :func:`cmakelists` and :func:`flash_attn_py`)."""

    commit: str  # the first upstream commit (sgl-project/sglang) with these constructs
    date: str  # its commit date on main
    summary: str
    policies: tuple[str, ...] = ("CMP0169",)
    fa3: str = "option-forced"  # none | in-common-ops | build-fa3 | option-forced | option-default
    forced_with_sm90a: bool = True  # the forcing also fires for -DSGL_KERNEL_ENABLE_SM90A=ON
    threads: str = "none"  # none | fixed | option
    flash_import: str = "raise-1"  # no-file | none | raise-1 | raise-3
    layout: str = "sgl-kernel"  # sgl-kernel | aot
    extra: dict = field(default_factory=dict)


FAMILIES = {f.commit[:9]: f for f in (
    Family("8bf6d7f40", "2025-03-27", "the first CMake build: no FA3 yet, CMP0169 only", fa3="none",
           flash_import="no-file"),
    Family("37c66ec85", "2025-03-30", "FA3's sources compiled into common_ops, no switch at all",
           fa3="in-common-ops", flash_import="none"),
    Family("b8b6008f4", "2025-04-03", "BUILD_FA3: a plain variable forced ON for CUDA >= 12.4, no option",
           fa3="build-fa3"),
    Family("4879e50c6", "2025-04-12", "option(SGL_KERNEL_ENABLE_FA3 OFF) overridden by set(... ON)"),
    Family("b62e7e99b", "2025-04-12", "as 4879e50c6, and nvcc gets a fixed --threads", threads="fixed"),
    Family("d631290e3", "2025-09-02", "CMP0177 joins CMP0169", policies=("CMP0169", "CMP0177"), threads="fixed"),
    Family("6049ca209", "2025-09-07", "--threads from the SGL_KERNEL_COMPILE_THREADS cache option",
           policies=("CMP0169", "CMP0177"), threads="option"),
    Family("0c9174108", "2025-09-28", "the forcing no longer looks at SGL_KERNEL_ENABLE_SM90A",
           policies=("CMP0169", "CMP0177"), threads="option", forced_with_sm90a=False),
    Family("32803fb27", "2025-10-14", "the flash_ops import raises over three lines",
           policies=("CMP0169", "CMP0177"), threads="option", forced_with_sm90a=False, flash_import="raise-3"),
    Family("4b817f5d7", "2026-06-17", "the CUDA version only picks option()'s default: nothing forced",
           policies=("CMP0169", "CMP0177"), threads="option", fa3="option-default", flash_import="raise-3"),
    Family("c32c4ef79", "2026-07-29", "the kernel build moves to python/sglang/kernels/aot/ (sglang-kernel)",
           policies=("CMP0169", "CMP0177"), threads="option", fa3="option-default", flash_import="raise-3",
           layout="aot"),
)}


def cmakelists(f: Family) -> str:
    """A CMakeLists.txt with the family's constructs (written for these tests)."""
    parts = ["cmake_minimum_required(VERSION 3.26 FATAL_ERROR)",
             "project(sgl-kernel LANGUAGES CXX CUDA)", "",
             "# download the third-party sources only; they are not built as projects"]
    parts += [f"cmake_policy(SET {num} {'OLD' if num == 'CMP0169' else 'NEW'})" for num in f.policies]
    parts += ["",
              "find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)",
              "enable_language(CUDA)",
              "find_package(CUDAToolkit REQUIRED)",
              'message(STATUS "CUDA ${CUDA_VERSION}")',
              "find_package(Torch REQUIRED)", "",
              "include(FetchContent)",
              "FetchContent_Declare(repo-cutlass GIT_REPOSITORY https://github.com/NVIDIA/cutlass GIT_TAG main)",
              "FetchContent_Populate(repo-cutlass)",
              "FetchContent_Declare(repo-flash-attention GIT_REPOSITORY https://github.com/sgl-project/sgl-attn "
              "GIT_TAG sgl-kernel)",
              "FetchContent_Populate(repo-flash-attention)", "",
              "include_directories(",
              "    ${PROJECT_SOURCE_DIR}/include",
              "    ${repo-cutlass_SOURCE_DIR}/include",
              "    ${repo-flash-attention_SOURCE_DIR}/hopper",
              ")", ""]
    if f.fa3 == "build-fa3":
        parts += ["set(BUILD_FA3, OFF)  # sic: the comma makes this a different variable", ""]
    if f.threads == "option":
        parts += ['set(SGL_KERNEL_COMPILE_THREADS 32 CACHE STRING "nvcc threads")',
                  "if (SGL_KERNEL_COMPILE_THREADS LESS 1)",
                  "    set(SGL_KERNEL_COMPILE_THREADS 1)",
                  "endif()", ""]
    threads_flag = {"none": [], "fixed": ['    "--threads=16"'],
                    "option": ['    "--threads=${SGL_KERNEL_COMPILE_THREADS}"']}[f.threads]
    parts += ["set(SGL_KERNEL_CUDA_FLAGS", '    "-DNDEBUG"', '    "-O3"', '    "--expt-relaxed-constexpr"',
              *threads_flag, ")", ""]
    if f.fa3 == "option-default":
        parts += ["set(DEFAULT_SGL_KERNEL_ENABLE_FA3 OFF)",
                  'if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4")',
                  "    set(DEFAULT_SGL_KERNEL_ENABLE_FA3 ON)",
                  "endif()", ""]
    parts += ['option(SGL_KERNEL_ENABLE_SM90A "Enable SM90A" OFF)',
              'option(SGL_KERNEL_ENABLE_FP4  "Enable FP4"  OFF)']
    if f.fa3 in ("option-forced", "option-default"):
        default = "${DEFAULT_SGL_KERNEL_ENABLE_FA3}" if f.fa3 == "option-default" else "OFF"
        parts += [f'option(SGL_KERNEL_ENABLE_FA3  "Enable FA3"  {default})']
    parts += [""]
    if f.fa3 in ("option-forced", "build-fa3"):
        var = "BUILD_FA3" if f.fa3 == "build-fa3" else "SGL_KERNEL_ENABLE_FA3"
        cond = '"${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4"' + (" OR SGL_KERNEL_ENABLE_SM90A" if f.forced_with_sm90a else "")
        parts += [f"if ({cond})", f"    set({var} ON)",
                  '    list(APPEND SGL_KERNEL_CUDA_FLAGS "-gencode=arch=compute_90a,code=sm_90a")', "endif()", ""]
    elif f.fa3 == "option-default":
        parts += ['if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4" AND SGL_KERNEL_ENABLE_FA3)',
                  '    list(APPEND SGL_KERNEL_CUDA_FLAGS "-gencode=arch=compute_90a,code=sm_90a")', "endif()", ""]
    parts += ["set(SOURCES", '    "csrc/common_extension.cc"', '    "csrc/gemm/nvfp4_quant_kernels.cu"']
    if f.fa3 == "in-common-ops":
        parts += ['    "${repo-flash-attention_SOURCE_DIR}/hopper/flash_api.cpp"', '    "${FA3_GEN_SRCS}"']
    parts += [")", "Python_add_library(common_ops MODULE WITH_SOABI ${SOURCES})",
              "target_compile_options(common_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${SGL_KERNEL_CUDA_FLAGS}>)",
              'install(TARGETS common_ops LIBRARY DESTINATION "sgl_kernel")', ""]
    if f.fa3 in ("option-forced", "option-default", "build-fa3"):
        var = "BUILD_FA3" if f.fa3 == "build-fa3" else "SGL_KERNEL_ENABLE_FA3"
        parts += ["# FA3, Hopper only", f"if ({var})",
                  '    file(GLOB FA3_GEN_SRCS "${repo-flash-attention_SOURCE_DIR}/hopper/instantiations/*_sm90.cu")',
                  "    set(FLASH_SOURCES",
                  '        "csrc/flash_extension.cc"',
                  '        "${repo-flash-attention_SOURCE_DIR}/hopper/flash_api.cpp"',
                  '        "${FA3_GEN_SRCS}"',
                  "    )",
                  "    Python_add_library(flash_ops MODULE WITH_SOABI ${FLASH_SOURCES})",
                  '    install(TARGETS flash_ops LIBRARY DESTINATION "sgl_kernel")',
                  "endif()", ""]
    return "\n".join(parts)


def flash_attn_py(f: Family) -> str | None:
    """The family's python/sgl_kernel/flash_attn.py (None: the file does not exist yet)."""
    if f.flash_import == "no-file":
        return None
    head = "from typing import Optional\n\nimport torch\n\n"
    imports = {
        "none": "",
        "raise-1": ("try:\n    from sgl_kernel import flash_ops\nexcept:\n"
                    '    raise ImportError("sgl_kernel was installed without its FA3 module")\n\n'),
        "raise-3": ("try:\n    from sgl_kernel import flash_ops\nexcept:\n    raise ImportError(\n"
                    '        "sgl_kernel was installed without its FA3 module"\n    )\n\n'),
    }[f.flash_import]
    tail = ('\ndef is_fa3_supported(device=None) -> bool:\n'
            '    return torch.cuda.get_device_capability(device)[0] == 9\n\n\n'
            'def flash_attn_with_kvcache(q, k_cache, v_cache, causal: bool = False, out: Optional[torch.Tensor] = None):\n'
            '    return torch.ops.sgl_kernel.fwd.default(q, k_cache, v_cache, causal)\n')
    return head + imports + tail
