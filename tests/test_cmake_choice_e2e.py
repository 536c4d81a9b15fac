"""Which cmake a build runs and whether it is new enough, end to end (fleetctl/build/env.py,
fleetctl/tasks/build_preflight.py ``cmake_too_old``): a real sshd test host, the machine's real
CMake 3.25 (/usr/bin) and PyPI's real CMake 4 (scripts/setup.sh), a real scikit-build-core build.

New-user trial: a tree requiring a newer CMake than /usr/bin's failed in pip's "Preparing
metadata ... error"; a newer cmake first on the login PATH (/opt/cmake/bin, ~/.local/bin of
``pip install --user cmake``) was shown in facts but the build's own PATH dropped it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200
from tests.support.fake_gpu import write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import cmake4, cmake_ext, link_into, tool_venv

pytestmark = pytest.mark.sshd

PLAY = """\
name: build a tree that needs CMake 3.28
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel: {{src: "{{{{ workdir }}}}/src", out_dir: "{{{{ workdir }}}}/wheels", max_jobs: 1}}
"""


def test_the_trees_cmake_floor_is_checked_and_the_login_paths_newer_cmake_builds(sshd_farm, tmp_path):
    system = subprocess.run(["/usr/bin/cmake", "--version"], capture_output=True, text=True, check=True).stdout
    version = system.split()[2]
    assert tuple(int(x) for x in version.split(".")[:2]) < (3, 28), system  # the machine's CMake is older
    src = cmake_ext(tmp_path / "cmake_ext")
    pyproject = src / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('cmake.version = ">=3.18"', 'cmake.version = ">=3.28"'))
    h = sshd_farm.start("cmk")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"cmk": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": tool_venv(tmp_path / "v")}}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=src))
    deploy = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play))

    # only /usr/bin's: the preflight names both versions and the path, in --plan already
    res = fleetctl(*deploy, "--plan", home=tmp_path, env={"COLUMNS": "400"})
    assert res.returncode == 1, res.stdout[-3000:]
    flat = " ".join(res.stdout.split())
    assert (f"cmake {version} at /usr/bin/cmake is older than 3.28, which the tree requires (pyproject.toml "
            "[tool.scikit-build] cmake.version '>=3.28')") in flat, flat

    # an older cmake first on the login PATH: the one minimum named is the tree's, never a second
    # one (fresh operator's trial: cmake 3.16.3 was "older than 3.18", the task's old default)
    fake = h.bin_dir / "cmake"
    fake.write_text("#!/bin/sh\necho 'cmake version 3.16.3'\n")
    fake.chmod(0o755)
    res = fleetctl(*deploy, "--plan", home=tmp_path, env={"COLUMNS": "400"})
    flat = " ".join(res.stdout.split())
    assert res.returncode == 1 and f"cmake 3.16.3 at {fake} is older than 3.28, which the tree requires" in flat, flat
    assert "3.18" not in flat, flat
    fake.unlink()

    # CMake 4 first on the login PATH (not in the venv): facts show it, and the build runs it
    link_into(h.bin_dir, cmake4())
    res = fleetctl(*deploy, home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    build = {t["action"]: t for t in record["hosts"]["cmk"]["tasks"]}["build_wheel"]
    used = build["data"]["build_record"]["cmake"]
    assert used["version"].startswith("4.") and Path(used["path"]).resolve() == cmake4().resolve(), used
