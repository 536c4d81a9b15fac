"""One rule set names why a build (compiler, CMake) or an install (pip, uv) failed
(fleetctl/tasks/causes.py ``cause_line``, used by build_wheel, pip_install and venv_upgrade).
Real outputs where this machine makes them in a second (nvcc 13.0, g++, cmake, pip resolving
against local wheels with no index); recorded ones where it cannot (the OOM killer, a full disk)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fleetctl.connection.base import CommandResult
from fleetctl.tasks.causes import cause_line

NVCC = "/usr/local/cuda/bin/nvcc"
BUILD_FACTS = {"cuda": {"version": "13.0"}, "host_compilers": {"used": {"path": "/usr/bin/g++", "kind": "gnu",
                                                                        "version": "12.2"}}}


def ran(argv: list[str], cwd: Path) -> CommandResult:
    res = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=120)
    assert res.returncode != 0, res.stdout[-2000:] + res.stderr[-2000:]
    return CommandResult(argv=argv, rc=res.returncode, stdout=res.stdout, stderr=res.stderr)


def test_a_real_nvcc_error_is_the_compilers_own_line(tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void k(float *x) {\n  x[0] = undeclared;\n}\n")
    res = ran([NVCC, "-c", "k.cu", "-o", "k.o"], tmp_path)
    assert cause_line(res, "/w/tmp", facts=BUILD_FACTS, max_jobs=8) == 'k.cu(2): error: identifier "undeclared" is undefined'


def test_a_real_gxx_error_and_a_real_cmake_error(tmp_path):
    (tmp_path / "a.cpp").write_text("int f() {\n  return x;\n}\n")
    why = cause_line(ran(["g++", "-c", "a.cpp"], tmp_path), "/w/tmp", facts=BUILD_FACTS)
    assert why.startswith("a.cpp:2:10: error: ") and "was not declared in this scope" in why, why
    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 99.0)\nproject(p NONE)\n")
    why = cause_line(ran(["cmake", "-S", ".", "-B", "b"], tmp_path), "/w/tmp", facts=BUILD_FACTS)
    assert why.startswith("CMake Error at CMakeLists.txt:1 (cmake_minimum_required): CMake 99.0 or higher is required."), why


def test_a_real_cmake_missing_source_error_carries_the_files_path(tmp_path):
    """CMake prints ``Cannot find source file:``, a blank line, then the path, indented deeper (a
    venv's nanobind with a source file removed: the fresh operator's trial cut the summary at the
    colon). The one line carries the path, not the ``Tried extensions`` paragraph after it."""
    # outside the source tree (CMake names it by its full path), deep enough that the line passes 300
    # characters: the file CMake read is shortened, the missing file's path is kept whole
    nanobind = tmp_path / ("site-packages-" + "x" * 80) / "nanobind"
    (nanobind / "cmake").mkdir(parents=True)
    (nanobind / "cmake" / "nanobind-config.cmake").write_text(
        "get_filename_component(NB_DIR ${CMAKE_CURRENT_LIST_DIR} DIRECTORY)\n"
        "function(nanobind_add_module name)\n  add_library(${name} MODULE ${NB_DIR}/src/nb_func.cpp)\nendfunction()\n")
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(p LANGUAGES NONE)\n"
        f"include({nanobind}/cmake/nanobind-config.cmake)\nnanobind_add_module(m)\n")
    res = ran(["cmake", "-S", "k", "-B", "b"], tmp_path)
    gone = nanobind / "src" / "nb_func.cpp"
    assert f"\n  Cannot find source file:\n\n    {gone}\n" in res.stderr_text, res.stderr_text  # CMake's own layout
    why = cause_line(res, "/w/tmp", facts=BUILD_FACTS)
    assert why == f"CMake Error at .../cmake/nanobind-config.cmake:3 (add_library): Cannot find source file: {gone}", why


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal pure-Python wheel (PEP 427: METADATA, WHEEL, RECORD) that pip resolves."""
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}/METADATA", meta)
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")


def test_a_real_pip_resolution_impossible_names_the_conflict_not_the_help_link(tmp_path):
    _wheel(tmp_path, "fltoyk", "0.1", ("fltorchk==2.12.0",))
    _wheel(tmp_path, "fltorchk", "2.11.0")
    _wheel(tmp_path, "fltorchk", "2.12.0")
    res = ran([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "--isolated",
               "--no-cache-dir", "--disable-pip-version-check", "--find-links", str(tmp_path), "fltoyk==0.1",
               "fltorchk==2.11.0"], tmp_path)
    assert "ResolutionImpossible" in res.stderr_text
    why = cause_line(res, "/venv or the TMPDIR /w/runs/r1")
    assert why.startswith("ERROR: Cannot install ") and " because these package versions have conflicting " \
        "dependencies (" in why, why
    assert "fltoyk 0.1 depends on fltorchk==2.12.0" in why and "for help visit" not in why


@pytest.mark.parametrize("stderr, facts, jobs, want", [
    # the OOM killer, as g++ and nvcc report it (recorded: the kernel picks the victim)
    ("g++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.\n", BUILD_FACTS, 8,
     "compiler killed (likely out of memory) with MAX_JOBS=8"),
    ("nvcc error   : 'cicc' died due to signal 9 (Kill signal)\nKilled\n", BUILD_FACTS, 4,
     "compiler killed (likely out of memory) with MAX_JOBS=4"),
    ("Killed\n", None, None, "process killed (likely out of memory)"),
    # a full disk and a quota, as pip and the compiler say them (pip names no path: where is named)
    ("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n", None, None,
     "No space left on device (ENOSPC) writing /venv or the TMPDIR /w/runs/r1"),
    ("cc1plus: fatal error: error writing to /w/tmp/ccAB.s: Disk quota exceeded\n", BUILD_FACTS, 8,
     "Disk quota exceeded (EDQUOT) writing /w/tmp/ccAB.s"),
    # uv's resolver (recorded from uv 0.9)
    ("  × No solution found when resolving dependencies:\n  ╰─▶ Because fltoyk==0.1 depends on fltorchk==2.12.0 and you "
     "require fltorchk==2.11.0, we can conclude that your requirements are unsatisfiable.\n", None, None,
     "no solution found when resolving dependencies: Because fltoyk==0.1 depends on fltorchk==2.12.0"),
    # the index could not be read: uv's innermost cause, not its generic "client error (Connect)" nor its hint
    # (recorded: the fresh operator's trial, a site mirror set in pip.conf that uv does not read)
    ("error: Request failed after 3 retries\n  Caused by: Failed to fetch: `https://pypi.org/simple/nanobind/`\n"
     "  Caused by: error sending request for url (https://pypi.org/simple/nanobind/)\n  Caused by: client error "
     "(Connect)\n  Caused by: invalid peer certificate: UnknownIssuer\nhint: Consider enabling use of system TLS "
     "certificates with the `--system-certs` command-line flag\n", None, None,
     "error: Request failed after 3 retries (the package index could not be read: invalid peer certificate: "
     "UnknownIssuer)"),
    ("error: Failed to fetch: `https://pypi.org/simple/x/`\n  cause: Request failed after 3 retries\n  cause: client "
     "error (Connect)\n  cause: invalid peer certificate: UnknownIssuer\n", None, None,
     "error: Failed to fetch: `https://pypi.org/simple/x/` (the package index could not be read: invalid peer "
     "certificate: UnknownIssuer)"),
    # pip's: its retry warning's SSL error beside its "(from versions: none)" (recorded from pip 24)
    ("WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken "
     "by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable "
     "to get local issuer certificate (_ssl.c:1000)'))': /simple/nanobind/\nERROR: Could not find a version that "
     "satisfies the requirement nanobind>=2.0 (from versions: none)\nERROR: No matching distribution found for "
     "nanobind>=2.0\n", None, None,
     "ERROR: Could not find a version that satisfies the requirement nanobind>=2.0 (from versions: none) (the package "
     "index could not be read: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer "
     "certificate (_ssl.c:1000))"),
    # no rule: the last error-looking line, else stderr's last line
    ("env: '/venv/bin/python3': No such file or directory\n", None, None,
     "env: '/venv/bin/python3': No such file or directory"),
])
def test_recorded_causes(stderr, facts, jobs, want):
    res = CommandResult(argv=["x"], rc=1, stdout=b"Processing ./toy\n", stderr=stderr.encode())
    assert cause_line(res, "/venv or the TMPDIR /w/runs/r1" if facts is None else "/w/tmp", facts=facts,
                      max_jobs=jobs).startswith(want), cause_line(res, "/w/tmp", facts=facts, max_jobs=jobs)


#: What pip printed for a scikit-build-core build whose ptxas crashed (a fresh operator's trial: the
#: summary read ``build failed (pip): Failed to build fp4-kernels``), the middle of ninja's log cut.
PTXAS_DIED = """\
  *** Building project with Ninja...
  [1/6] Building CUDA object CMakeFiles/fp4_cuda.dir/csrc/cuda_quant.cu.o
  [2/6] Building CUDA object CMakeFiles/fp4_cuda.dir/csrc/cuda_gemm.cu.o
  FAILED: CMakeFiles/fp4_cuda.dir/csrc/cuda_gemm.cu.o
  /usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -DFP4_WITH_CUDA -O3 -std=c++17 "--generate-code=arch=compute_120a,code=[sm_120a]" -x cu -c /w/src/kernel_src/csrc/cuda_gemm.cu -o CMakeFiles/fp4_cuda.dir/csrc/cuda_gemm.cu.o
  nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)
  ninja: build stopped: subcommand failed.

  *** CMake build failed
  error: subprocess-exited-with-error

  × Building wheel for fp4-kernels (pyproject.toml) did not run successfully.
  │ exit code: 1
  ╰─> See above for output.

  note: This error originates from a subprocess, and is likely not a problem with pip.
  ERROR: Failed building wheel for fp4-kernels
Failed to build fp4-kernels
ERROR: Failed to build installable wheels for some pyproject.toml based projects (fp4-kernels)
"""


def test_nvccs_own_error_and_ninjas_failed_object_are_the_summary_not_pips_wrap_up():
    res = CommandResult(argv=["pip", "wheel"], rc=1, stdout=b"", stderr=PTXAS_DIED.encode())
    assert cause_line(res, "/w/tmp", facts=BUILD_FACTS, max_jobs=8) == (
        "nvcc error : 'ptxas' died due to signal 11 (Invalid memory reference) "
        "(building CMakeFiles/fp4_cuda.dir/csrc/cuda_gemm.cu.o)")
    fatal = PTXAS_DIED.replace("nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)",
                               "nvcc fatal   : Unsupported gpu architecture 'compute_120a'")
    res = CommandResult(argv=["pip", "wheel"], rc=1, stdout=b"", stderr=fatal.encode())
    assert cause_line(res, "/w/tmp", facts=BUILD_FACTS) == (
        "nvcc fatal : Unsupported gpu architecture 'compute_120a' (building CMakeFiles/fp4_cuda.dir/csrc/cuda_gemm.cu.o)")


def test_a_real_ninja_build_whose_nvcc_fails_is_summed_up_by_nvccs_line_and_the_object(tmp_path):
    """A real ninja run; its ``nvcc`` a stand-in printing what nvcc 13 prints when ptxas dies
    (nvcc reports a tool's death only when the tool itself is signalled, which a stand-in ptxas
    under nvcc's ``sh -c`` cannot be)."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho \"nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)\" >&2\n"
                    "exit 1\n")
    nvcc.chmod(0o755)
    (tmp_path / "gemm.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "build.ninja").write_text(f"rule cu\n  command = {nvcc} -c $in -o $out\n"
                                          "build obj/gemm.cu.o: cu gemm.cu\n")
    res = ran(["ninja"], tmp_path)
    assert cause_line(res, "/w/tmp", facts=BUILD_FACTS) == (
        "nvcc error : 'ptxas' died due to signal 11 (Invalid memory reference) (building obj/gemm.cu.o)")


def test_a_compiler_line_naming_its_source_file_gets_no_object_after_it(tmp_path):
    """A real ninja run whose compiler names the file and line (a real g++ error): that line alone."""
    (tmp_path / "a.cpp").write_text("int f() {\n  return x;\n}\n")
    (tmp_path / "build.ninja").write_text("rule cxx\n  command = g++ -c $in -o $out\nbuild obj/a.o: cxx a.cpp\n")
    why = cause_line(ran(["ninja"], tmp_path), "/w/tmp", facts=BUILD_FACTS)
    assert why.startswith("a.cpp:2:10: error: ") and "(building" not in why, why


def test_no_space_left_anywhere_in_a_long_build_log_wins_over_ninjas_failed_line():
    """A verbose build's log put the linker's ENOSPC line more than SCAN_CHARS before its end; ninja's
    ``FAILED: OBJECT`` came last: the write error is still the cause (it is searched for everywhere)."""
    from fleetctl.tasks.causes import SCAN_CHARS

    out = ("/usr/bin/ld: final link failed: No space left on device\n" + "-- a verbose build line\n" * (SCAN_CHARS // 20)
           + "FAILED: CMakeFiles/fp4_cuda.dir/csrc/cuda_pk.cu.o\nninja: build stopped: subcommand failed.\n")
    res = CommandResult(argv=["pip", "wheel"], rc=1, stdout=out.encode(), stderr=b"ERROR: Failed to build fp4_kernels\n")
    why = cause_line(res, "/w/tmp/k", facts=BUILD_FACTS, max_jobs=8)
    assert why.startswith("No space left on device (ENOSPC) writing /w/tmp/k: the file system is full"), why


def test_an_install_enospc_names_the_full_file_system_and_its_own_fix():
    """An install's ENOSPC with its file systems measured (build_room.measure's lines appended):
    named by the full one, the venv's fix for the venv's site-packages (never the workdir: the
    operator trial), the workdir's for the workdir and fleetctl's TMPDIR in it. The real tmpfs
    case: tests/test_install_room_e2e.py."""
    from fleetctl.tasks.build_room import ROOM_MARK

    def df(role, dev, total_k, avail_k, mount):
        return (f"{ROOM_MARK} {role} bytes: {dev} {total_k} {total_k - avail_k} {avail_k} 50% {mount}\n"
                f"{ROOM_MARK} {role} inodes: {dev} 1000 10 990 1% {mount}\n")

    pip = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"
    paths = {"workdir": "/w", "TMPDIR": "/w/runs/r1", "venv": "/v/lib/python3.11/site-packages"}
    venv_full = (pip + df("workdir", "/dev/sda1", 100 << 20, 50 << 20, "/") + df("TMPDIR", "/dev/sda1", 100 << 20,
                 50 << 20, "/") + df("venv", "tmpfs", 40960, 5120, "/v")).encode()
    why = cause_line(CommandResult(argv=["pip"], rc=1, stderr=venv_full), "/v or the TMPDIR /w/runs/r1", room=paths)
    assert why.startswith("No space left on device (ENOSPC) on /v (5.0 MiB free of 40 MiB, measured after the install "
                          "failed; the venv's site-packages /v/lib/python3.11/site-packages): the file system is full"), why
    assert "free space on /v (the venv's site-packages), or point the host var 'venv' at a venv on a larger" in why, why
    assert "workdir" not in why, why
    work_full = (pip + df("workdir", "/dev/sdb1", 40960, 1024, "/w") + df("TMPDIR", "/dev/sdb1", 40960, 1024, "/w")
                 + df("venv", "/dev/sda1", 100 << 20, 50 << 20, "/")).encode()
    why = cause_line(CommandResult(argv=["pip"], rc=1, stderr=work_full), "/v or the TMPDIR /w/runs/r1", room=paths)
    assert ("on /w (1.0 MiB free of 40 MiB, measured after the install failed; the workdir /w, the TMPDIR /w/runs/r1)"
            in why and "free space on /w (the workdir and the TMPDIR), or set the host var workdir to a folder on a "
            "larger file system" in why and "host var 'venv'" not in why), why
