"""A fleet where only some hosts have the build tools: a host whose venv lacks a build requirement
is not refused when a member of its arch class can build, it receives the class's wheel (a
receiver runs no build); the builder is a member that passed the build preflight, even when the
first host in inventory order did not (fleetctl/engine/classes.py, build_wheel's planner). Real
sshd test hosts, real venvs made as users make them (tests/support/hostvenv.py), real pip installs.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv

pytestmark = pytest.mark.sshd

PLAY = """\
name: toy kernels, built once per arch class
hosts: all
tasks:
  - name: Upload the toy sources
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src/toy"}}
  - name: Build the toy wheel
    build_wheel: {{src: "{{{{ workdir }}}}/src/toy", out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [nanobind],
                  check_sass: false, tool: pip, min_free_disk_mib: 1}}
    register: build
  - name: Install the toy wheel
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
"""


def test_a_host_without_the_build_tools_receives_the_wheel_its_class_built_on_one_with_them(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=src))
    venvs = {"lean": make_venv(tmp_path / "venv-lean", "venv", torch=False),  # python -m venv: pip, no nanobind
             "tooled": make_venv(tmp_path / "venv-tooled", "virtualenv", torch=False, build_tools=True)}
    hosts = {}
    for name in ("lean", "tooled"):  # the lean host first: inventory order alone would make it the builder
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": venvs[name]}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, timeout_s=900)
    assert res.returncode == 0, res.stdout[-4000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    builds = {h: [t for t in r["tasks"] if t["action"] == "build_wheel"][0] for h, r in record["hosts"].items()}
    assert builds["tooled"]["data"]["decision"]["action"] == "build"
    assert builds["lean"]["data"]["decision"]["action"] == "push" and builds["lean"]["data"]["pushed_from"] == "tooled"
    assert "nanobind" in builds["lean"]["data"]["decision"]["cannot_build"]
    for name, venv in venvs.items():
        out = subprocess.run([f"{venv}/bin/python3", "-c", "import toyfp4; print(toyfp4.__file__)"],
                             capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.startswith(venv), (name, out.stderr)
    # with the builder gone from the fleet, the lean host is refused with its preflight's line
    inv_alone = write_inventory(tmp_path / "inv-alone.yaml", {"g": {"lean": hosts["lean"]}})
    res = fleetctl("-i", str(inv_alone), "deploy", "--hosts", "g", "--playbook", str(play), "--force",
                   home=tmp_path, timeout_s=600)
    assert res.returncode == 1 and "build requirements missing" in res.stdout and "nanobind" in res.stdout, res.stdout[-3000:]
