"""The pure rules behind the build checks: CUDA compatibility (driver, SASS/PTX coverage, toolkit
choice), what a source tree declares about its build, and what a build's record says it used."""

from __future__ import annotations

import json

import pytest

from fleetctl.build.cudacompat import (driver_problem, how_covered, parse_tokens, predicted_binaries, runs_on,
                                 toolkit_torch_mismatch, torch_cuda_of, uncovered_gpus, with_toolkit_for)
from fleetctl.tasks.build_meta import META_FILES, meta_from_texts, requirement_name
from fleetctl.util.cmaketree import read_cmake_tree
from fleetctl.tasks.build_record import compiler_mismatch, parse_record, torch_drift


@pytest.mark.parametrize("driver, cuda, bad", [
    ("535.104.05", "13.0", True), ("580.65.06", "13.0", False), ("580.95.05", "13.1", False),
    ("525.60.13", "12.8", False), ("470.82.01", "12.4", True), (None, "13.0", False), ("535.104.05", None, False),
])
def test_driver_minimum_per_cuda_major(driver, cuda, bad):
    problem = driver_problem(driver, cuda, f"nvcc {cuda}")
    assert bool(problem) is bad
    if bad:
        assert driver in problem and f"nvcc {cuda}" in problem


@pytest.mark.parametrize("binary, cap, ok", [
    ("sm_80", "8.6", True), ("sm_86", "8.0", False), ("sm_80", "9.0", False),       # SASS: same major, not older minor
    ("sm_90a", "9.0", True), ("sm_90a", "10.0", False), ("sm_100a", "10.3", False),  # 'a': exactly that GPU
    ("sm_100f", "10.3", True), ("sm_100f", "12.0", False),                           # 'f': its family
    ("compute_80", "12.0", True), ("compute_90", "8.9", False),                      # PTX: any newer GPU (JIT)
    ("compute_90a", "9.0", True), ("compute_90a", "10.0", False), ("bogus", "9.0", False),
])
def test_what_runs_on_which_gpu(binary, cap, ok):
    assert runs_on(binary, cap) is ok


def test_tokens_ptx_and_coverage():
    toks = parse_tokens("9.0a;8.0+PTX, 9.0a 12.0f")
    assert [t.text for t in toks] == ["9.0a", "8.0+PTX", "12.0f"]
    assert predicted_binaries(toks) == (["sm_90a", "sm_80", "sm_120f"], ["compute_80"])
    gpus = [{"index": 0, "name": "H200", "compute_cap": "9.0"}, {"index": 1, "name": "B200", "compute_cap": "10.0"}]
    assert uncovered_gpus(gpus, ["sm_90a"], []) == ["GPU 1 (B200, 10.0)"]
    assert uncovered_gpus(gpus, ["sm_90a"], ["compute_80"]) == []
    assert how_covered("10.0", ["sm_90a"], ["compute_80"]) == "PTX compute_80 (JIT)"
    with pytest.raises(ValueError, match="'9.0b'"):
        parse_tokens("9.0b")


def test_the_newest_toolkit_that_compiles_the_archs_is_chosen_unless_pinned():
    old = {"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "version": "12.4", "archs": ["compute_90"]}
    toolkits = [old, {"home": "/usr/local/cuda-12.9", "nvcc": "/usr/local/cuda-12.9/bin/nvcc", "version": "12.9",
                      "archs": ["compute_90", "compute_120"]},
                {"home": "/usr/local/cuda-13.0", "nvcc": "/usr/local/cuda-13.0/bin/nvcc", "version": "13.0",
                 "archs": ["compute_90", "compute_120"]}]
    facts = {"cuda": {**old, "toolkits": toolkits}}
    switched, note = with_toolkit_for(facts, parse_tokens("12.0a"))
    assert switched["cuda"]["home"] == "/usr/local/cuda-13.0" and switched["cuda"]["toolkits"] == toolkits
    assert note.startswith("nvcc 12.4 at /usr/local/cuda/bin/nvcc cannot build 12.0a: using nvcc 13.0")
    assert with_toolkit_for(facts, parse_tokens("12.0a"), pinned=True) == (facts, None)
    assert with_toolkit_for(facts, parse_tokens("9.0a")) == (facts, None)


def test_a_trees_own_build_declarations():
    meta = meta_from_texts({"pyproject.toml": '[build-system]\nrequires = ["scikit-build-core>=0.10", "Torch>=2.4"]\n'
                                              'build-backend = "scikit_build_core.build"\n',
                            "CMakeLists.txt": "find_package(Torch REQUIRED)\n"}, "controller")
    assert meta.requires == ("scikit-build-core>=0.10", "Torch>=2.4") and meta.cmake and meta.torch_extension
    assert meta.torch_required and requirement_name("scikit_build.core>=1") == "scikit-build-core"
    legacy = meta_from_texts({"setup.py": "from torch.utils.cpp_extension import CUDAExtension\n"}, "host")
    assert legacy.requires == ("setuptools>=40.8.0",) and legacy.torch_extension and not legacy.cmake
    assert not meta_from_texts({}, "host").found
    assert meta_from_texts({"pyproject.toml": "[build-system\n"}, "host").error.startswith("pyproject.toml: ")


def test_one_read_of_a_tree_gives_its_build_files_and_its_cmake_files(tmp_path):
    """build_deps.read_tree reads a tree once (cmaketree: the same program on the host) for both
    the build's metadata and its dependencies: the top-level pyproject.toml and setup.py come
    with the CMake files."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["scikit-build-core"]\n')
    (tmp_path / "setup.py").write_text("import x\n")
    (tmp_path / "CMakeLists.txt").write_text("find_package(Torch REQUIRED)\n")
    (tmp_path / "sub" / "CMakeLists.txt").write_text("add_library(a a.c)\n")
    (tmp_path / "sub" / "setup.py").write_text("not top\n")
    got = read_cmake_tree(str(tmp_path), [f for f in META_FILES if f != "CMakeLists.txt"])
    assert got["top"] == {"pyproject.toml": '[build-system]\nrequires = ["scikit-build-core"]\n', "setup.py": "import x\n"}
    assert set(got["texts"]) == {"CMakeLists.txt", "sub/CMakeLists.txt"} and got["errors"] == []
    assert read_cmake_tree(str(tmp_path))["top"] == {}


RUNTIME = {"torch": "2.11.0+cu130", "torch_cuda": "13.0", "torch_file": "/v/lib/python3.12/site-packages/torch/__init__.py"}


def test_the_build_record_and_what_it_is_checked_against():
    rec_text = "\n".join(json.dumps(x) for x in [
        {"kind": "torch", **RUNTIME, "python": "/v/bin/python3"}, {"kind": "torch", **RUNTIME, "python": "/v/bin/python3"},
        {"kind": "cmake", "path": "/v/bin/cmake", "version": "4.1.2", "policy_version_minimum": "3.5"}]) + "\nnot json\n"
    output = ("-- The CUDA compiler identification is NVIDIA 13.0.88\n"
              "-- Check for working CUDA compiler: /usr/local/cuda/bin/nvcc - skipped\n")
    record = parse_record(rec_text, output)
    assert len(record["torch"]) == 1 and record["cmake"]["version"] == "4.1.2"
    assert record["cuda_compiler"] == {"path": "/usr/local/cuda/bin/nvcc", "realpath": None, "version": "13.0.88",
                                       "source": "CMake configure output"}
    cuda = {"nvcc": "/usr/local/cuda/bin/nvcc", "nvcc_realpath": "/usr/local/cuda-13.0/bin/nvcc", "version": "13.0"}
    assert torch_drift(record, RUNTIME) is None and compiler_mismatch(record, cuda) is None
    assert "12.4" in compiler_mismatch({"cuda_compiler": {**record["cuda_compiler"], "version": "12.4.131"}}, cuda)
    # an isolated build: pip reset PYTHONPATH, so only the compile commands show its torch
    isolated = parse_record("", "[1/2] /usr/local/cuda/bin/nvcc -I/tmp/pip-build-env-x/site-packages/torch/include "
                                "-c -c /w/k.cu -o k.o\n")
    assert isolated["cuda_compiler"]["source"] == "compile commands"
    drift = torch_drift(isolated, RUNTIME)
    assert drift.startswith("torch drift: the build compiled against the torch in /tmp/pip-build-env-x/site-packages/torch")
    other = parse_record(json.dumps({"kind": "torch", **RUNTIME, "torch": "2.12.0+cu130"}), "")
    assert "torch 2.12.0+cu130 (CUDA 13.0)" in torch_drift(other, RUNTIME) and "torch 2.11.0+cu130" in torch_drift(other, RUNTIME)


@pytest.mark.parametrize("cmakelists, tool, floor", [
    ("cmake_minimum_required(VERSION 3.26...3.30 FATAL_ERROR)\n", "", ("3.26", "CMakeLists.txt cmake_minimum_required")),
    ("  CMAKE_MINIMUM_REQUIRED ( VERSION 3.18 )\n", 'cmake.version = ">=3.15,<4"\n',
     ("3.18", "CMakeLists.txt cmake_minimum_required")),
    ("cmake_minimum_required(VERSION 3.18)\n", 'cmake.minimum-version = "3.27"\n',
     ("3.27", "pyproject.toml [tool.scikit-build] cmake.minimum-version")),
    ("# cmake_minimum_required(VERSION 9.0) is a comment\nproject(x)\n", 'minimum-version = "0.10"\n', None),
])
def test_the_cmake_floor_a_tree_declares(cmakelists, tool, floor):
    """scikit-build-core's own ``minimum-version`` is its version, not CMake's; the highest floor wins."""
    pyproject = ('[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n'
                 f"[tool.scikit-build]\n{tool}")
    meta = meta_from_texts({"pyproject.toml": pyproject, "CMakeLists.txt": cmakelists}, "controller")
    assert meta.cmake_minimum == floor


def test_the_build_path_keeps_the_login_paths_cmake_that_facts_report():
    from fleetctl.build.env import build_environment
    facts = {"cmake": {"path": "/opt/cmake/bin/cmake", "version": "4.1.0"}, "cuda": {"home": "/usr/local/cuda"}}
    path = build_environment(facts, venv="/v")["PATH"].split(":")
    assert path[:3] == ["/v/bin", "/usr/local/cuda/bin", "/opt/cmake/bin"] and path.index("/opt/cmake/bin") < path.index("/usr/bin")
    facts["cmake"]["path"] = "/usr/bin/cmake"  # already on the default PATH: its order is kept
    assert build_environment(facts, venv="/v")["PATH"].split(":")[2] == "/usr/local/sbin"


@pytest.mark.parametrize("python,nvcc,refused", [
    ({"torch": "2.9.0+cu130", "torch_cuda": "13.0"}, "12.4", True),
    ({"torch": "2.9.0+cu130", "torch_cuda": "13.0"}, "13.1", False),  # a minor difference: torch only warns
    ({"torch": "2.9.0+cu126"}, "13.0", True),  # torch_cuda not read: the wheel's +cuXYZ says 12.6
    ({"torch": "2.9.0+cpu", "torch_cuda": None}, "12.4", False),  # CPU-only: nothing to match
    ({"torch": "2.9.0+cu130", "torch_cuda": "13.0", "torch_pending": True}, "12.4", False),
])
def test_a_toolkit_of_another_cuda_major_than_torch_is_refused(python, nvcc, refused):
    facts = {"python": python, "cuda": {"nvcc": "/t/bin/nvcc", "version": nvcc, "source": "/usr/local/cuda",
                                        "toolkits": [{"home": "/usr/local/cuda-13.0", "version": "13.0"}]}}
    line = toolkit_torch_mismatch(facts)
    assert bool(line) is refused, line
    if line and torch_cuda_of(python) == "13.0":
        assert line.endswith("set the host var cuda_home to a CUDA 13 toolkit (this host has /usr/local/cuda-13.0) "
                             "or install the torch build for CUDA 12 into the venv"), line
