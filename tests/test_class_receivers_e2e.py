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
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv, site_packages, tools_site

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


NB_PLAY = """\
name: a nanobind extension, built once per arch class
hosts: all
tasks:
  - name: Upload the sources
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src/nb"}}
  - name: Build the wheel
    build_wheel: {{src: "{{{{ workdir }}}}/src/nb", out_dir: "{{{{ workdir }}}}/wheels", check_sass: false, tool: pip,
                  min_free_disk_mib: 1}}
    register: build
  - name: Install the wheel
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
"""


def test_a_build_broken_by_its_builders_own_venv_is_tried_once_by_the_next_member(sshd_farm, tmp_path):
    """Fresh operator's trial: the builder's venv had a nanobind missing a source file; its build
    failed and failed its whole arch class, although the other members could build. The next member
    that can build tries once: the first builder fails with CMake's whole line (the missing file's
    path), the others get the wheel the retry built (fleetctl/engine/class_wheels.py)."""
    src = tmp_path / "nb"
    shutil.copytree(REPO / "tests" / "data" / "ext" / "nb_ext", src)
    play = tmp_path / "play.yaml"
    play.write_text(NB_PLAY.format(src=src))
    hosts, venvs = {}, {}
    for name in ("u1", "u2", "u3"):
        venvs[name] = make_venv(tmp_path / f"venv-{name}", "virtualenv", torch=False, build_tools=True)
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": venvs[name]}
    # u1's own nanobind (first on its sys.path, the same version), with a source file removed
    own = site_packages(Path(venvs["u1"]))
    shutil.copytree((tools_site() / "nanobind").resolve(), own / "nanobind")
    info = next(p for p in tools_site().iterdir() if p.name.startswith("nanobind-") and p.name.endswith(".dist-info"))
    shutil.copytree(info.resolve(), own / info.name)
    gone = own / "nanobind" / "src" / "nb_func.cpp"
    gone.unlink()
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, timeout_s=600)
    assert res.returncode == 1, res.stdout[-4000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    status = {h: r["status"] for h, r in record["hosts"].items()}
    assert status == {"u1": "failed", "u2": "ok", "u3": "ok"}, {h: r.get("error") for h, r in record["hosts"].items()}
    err = record["hosts"]["u1"]["error"]
    assert "/nanobind-config.cmake:" in err and f"(add_library): Cannot find source file: {gone} (full log" in err, err
    builds = {h: [t for t in r["tasks"] if t["action"] == "build_wheel"][0] for h, r in record["hosts"].items()}
    assert builds["u2"]["status"] == "changed" and builds["u2"]["msg"].startswith("built tiny_nb_ext-"), builds["u2"]
    assert builds["u3"]["data"]["pushed_from"] == "u2", builds["u3"]
    for name in ("u2", "u3"):
        out = subprocess.run([f"{venvs[name]}/bin/python3", "-c", "import tiny_nb_ext; print(tiny_nb_ext.answer())"],
                             capture_output=True, text=True, cwd="/")
        assert out.stdout.strip() == "42", (name, out.stderr)
