"""The CUDA toolkit in a build key is what the toolkit is (its real folder, its real nvcc, its
release and nvcc build), never the spelling of the path that reached it (operator trial: a host
with ``cuda_home: /usr/local/cuda`` and one with the ``/usr/local/cuda-13.0`` it links to built the
same wheel twice). A fake toolkit in tmp (a real folder, a symlink to it, an ``nvcc`` script that
answers as NVIDIA's does) probed by the real facts script, then keyed by the real build_inputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fleetctl.build.env import cmake_defines
from fleetctl.tasks.build_keys import build_inputs, build_key
from tests.support.fleet import REPO
from tests.test_facts_script import NVCC_12_8, NVCC_13

sys.path.insert(0, str(REPO / "playbooks" / "scripts"))
import facts as fs  # noqa: E402

PLAN = {"torch_cuda_arch_list": "9.0a", "cuda_architectures": "90a"}


def toolkit(folder: Path, version_text: str = NVCC_13) -> Path:
    """A toolkit folder whose ``bin/nvcc`` prints ``version_text`` for ``--version``."""
    (folder / "bin").mkdir(parents=True)
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\ncase \"$1\" in\n--version) cat <<'EOF'\n" + version_text + "EOF\n;;\n"
                    "--list-gpu-arch) echo compute_90;;\n--list-gpu-code) echo sm_90;;\nesac\n")
    nvcc.chmod(0o755)
    return folder


def facts_of(home: Path) -> dict:
    cuda = fs.probe_cuda(str(home))
    assert cuda["source"] == "cuda_home var" and cuda["home"] == str(home), cuda
    return {"cuda": cuda, "build": PLAN}


def key(facts: dict, extra: dict | None = None) -> str:
    return build_key(build_inputs("tree", PLAN, cmake_defines(facts, extra), facts))


def test_nvcc_build_is_its_v_number_and_build_line():
    assert fs.parse_nvcc_build(NVCC_13) == "V13.0.88 cuda_13.0.r13.0/compiler.36424714_0"
    assert fs.parse_nvcc_build(NVCC_12_8) == "V12.8.93 cuda_12.8.r12.8/compiler.35583870_0"
    assert fs.parse_nvcc_build("garbage") is None


def test_a_toolkit_through_a_symlink_is_keyed_as_its_real_folder(tmp_path):
    real = toolkit(tmp_path / "cuda-13.0")
    link = tmp_path / "cuda"
    link.symlink_to(real)
    via_link, via_real = facts_of(link), facts_of(real)
    assert via_link["cuda"]["home_realpath"] == via_real["cuda"]["home_realpath"] == str(real)
    assert via_link["cuda"]["build"] == "V13.0.88 cuda_13.0.r13.0/compiler.36424714_0"
    assert key(via_link) == key(via_real)  # one class, one wheel (cache and stamps use this key)
    # the build itself still runs the toolkit as the host spelled it
    assert cmake_defines(via_link)["CUDAToolkit_ROOT"] == str(link)


def test_what_stays_distinct(tmp_path):
    base = facts_of(toolkit(tmp_path / "a" / "cuda-13.0"))
    # another real folder of the same release and build: another class (a wheel may hold its paths)
    assert key(facts_of(toolkit(tmp_path / "b" / "cuda-13.0"))) != key(base)
    # another nvcc build of the same release, same folder name: another class
    other_build = NVCC_13.replace("V13.0.88", "V13.0.48").replace("36424714", "36260728")
    moved = facts_of(toolkit(tmp_path / "c" / "cuda-13.0", other_build))
    assert moved["cuda"]["version"] == base["cuda"]["version"] == "13.0"
    same_path = {**moved, "cuda": {**moved["cuda"], **{k: base["cuda"][k] for k in
                                                        ("home", "home_realpath", "nvcc", "nvcc_realpath")}}}
    assert key(same_path) != key(base)
    # a compiler the task names itself is keyed as written (the controller cannot resolve it)
    assert key(base, {"CMAKE_CUDA_COMPILER": "/opt/nvcc"}) != key(base)
