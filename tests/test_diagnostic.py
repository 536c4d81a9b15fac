"""Diagnostics are told by their tool's syntax, not by words in a path (fleetctl/reporting/diaglines.py);
real lines from GCC, nvcc, CMake, ninja, ld, pip and Python."""

from __future__ import annotations

import pytest

from fleetctl.reporting.diaglines import is_diagnostic, is_error
from fleetctl.reporting.logscan import first_error_line

ERRORS = [
    "/src/csrc/error.cpp:12:5: error: 'foo' was not declared in this scope",
    "csrc/kernel.cu(4): error: expected an expression",
    "kernel.cu(88): catastrophic error: cannot open source file \"cuda_fp4.h\"",
    "cc1plus: fatal error: cuda_runtime.h: No such file or directory",
    "nvcc fatal   : Unsupported gpu architecture 'compute_99'",
    "CMake Error at CMakeLists.txt:3 (project):",
    "CMake Error: The source directory \"/x\" does not exist.",
    "/usr/bin/ld: cannot find -lcudart",
    "kernel.o: undefined reference to `foo'",
    "collect2: error: ld returned 1 exit status",
    "FAILED: CMakeFiles/fp4.dir/csrc/error.cu.o",
    "make[2]: *** [CMakeFiles/x.dir/build.make:76: x.o] Error 1",
    "Traceback (most recent call last):",
    "ModuleNotFoundError: No module named 'torch'",
    "ERROR: Could not find a version that satisfies the requirement torch==9",
    "  error: subprocess-exited-with-error",
    "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
    "Killed",
    "sh: 1: nvcc: not found",
    "bash: line 1: cmake: command not found",
    "cat: /w/src/k/pyproject.toml: No such file or directory",
]
WARNINGS = [
    "csrc/warnings.cu(12): warning #177-D: variable \"x\" was declared but never referenced",
    "/src/a.cpp:3:1: warning: unused variable 'y' [-Wunused-variable]",
    "nvcc warning : The -std=c++17 flag is not supported with the configured host compiler",
    "CMake Warning (dev) at CMakeLists.txt:5 (find_package):",
    "/venv/lib/python3.12/site-packages/torch/utils/cpp_extension.py:41: UserWarning: no CUDA runtime",
    "WARNING: Running pip as the 'root' user",
    "warning: variable set but not used",
    "/usr/bin/ld: warning: libcudart.so.12, needed by x.so, not found",
]
NOT = [
    "[3/12] Building CUDA object CMakeFiles/fp4.dir/csrc/error.cu.o",
    "/usr/local/cuda/bin/nvcc -c /src/csrc/error.cpp -o error.cpp.o -Werror=return-type",
    "-- Found error_handling: /usr/include/error.h",
    "copying fp4_kernels/warning_utils.py -> build/lib/fp4_kernels",
    "test_fatal_path PASSED",
    "  adding 'fp4_kernels/errors.py'",
    "Successfully installed fp4-kernels-0.1.0",
    "-- Looking for pthread_create in pthreads - not found",
]


@pytest.mark.parametrize("line", ERRORS)
def test_errors_in_their_tools_syntax(line):
    assert is_error(line) and is_diagnostic(line)


@pytest.mark.parametrize("line", WARNINGS)
def test_warnings_in_their_tools_syntax(line):
    assert is_diagnostic(line) and not is_error(line)


@pytest.mark.parametrize("line", NOT)
def test_words_in_paths_and_flags_are_not_diagnostics(line):
    assert not is_diagnostic(line)


def test_the_reports_first_error_skips_a_compile_line_of_error_cpp(tmp_path):
    log = tmp_path / "h.log"
    log.write_text("==> task 1/1 build\nout| [1/2] Building CXX object CMakeFiles/x.dir/error.cpp.o\n"
                   "err| /src/error.cpp:3:1: error: expected ';' before '}' token\n")
    assert first_error_line(log) == "/src/error.cpp:3:1: error: expected ';' before '}' token"
