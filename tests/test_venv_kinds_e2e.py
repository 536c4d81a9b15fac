"""Python environments as they come (issue 23), end to end: real sshd test hosts whose venvs are
made as users make them (``python -m venv`` with Python's bundled pip and a current setuptools,
``virtualenv``, ``uv venv`` without pip, ``--system-site-packages``: tests/support/hostvenv.py),
a real setuptools torch ``CppExtension`` built and installed through fleetctl, real pip and uv.

- fleetctl's own probes must not change what they measure: importing pip first turns setuptools'
  distutils shim off on Python <= 3.11, after which ``torch.utils.cpp_extension`` does not import
  in that process; the preflight asked torch's archs after pip and refused every setuptools torch
  extension on a ``python -m venv`` venv, although the build succeeds;
- a venv without pip on a host without uv fails while planning, naming both fixes, and builds
  and installs with uv once the host has it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv, site_packages, uv
from tests.support.tiny_ext import cpp_ext, link_into

pytestmark = pytest.mark.sshd

PLAY = """\
name: build, install and verify a CPU-only torch C++ extension
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel: {{src: "{{{{ workdir }}}}/src", out_dir: "{{{{ workdir }}}}/wheels", max_jobs: 1, check_sass: false}}
    register: build
  - name: install
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
  - name: verify
    verify: {{package: tiny_cpp_ext, device: cpu}}
"""

NO_PIP = ("has no pip and this host has no uv, so nothing can build or install into it: add pip to it ({python} -m "
          "ensurepip --upgrade), or install uv on the host (https://docs.astral.sh/uv/getting-started/installation/)")


def entry(farm, host, work: Path, **extra) -> dict:
    return {**host.inventory_vars(farm.known_hosts), "workdir": str(work / host.name), "verify_device": "cpu", **extra}


def tasks_of(home: Path, host: str) -> dict:
    record = json.loads((last_run(home) / "run.json").read_text())
    return {t["action"]: t for t in record["hosts"][host]["tasks"]}


def py(venv: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([f"{venv}/bin/python3", "-c", code], capture_output=True, text=True, cwd="/")


def plan(inv: Path, play: Path, home: Path) -> dict:
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), "--plan", "--json", home=home)
    return json.loads(res.stdout)


def test_a_setuptools_cpp_extension_builds_on_venvs_as_users_make_them(sshd_farm, tmp_path):
    venv = make_venv(tmp_path / "venv-venv", "venv")
    # the condition that broke the preflight: Python's bundled pip, setuptools >= 60 with its
    # distutils shim; pip imported first, torch.utils.cpp_extension no longer imports in that process
    pip_version = py(venv, "import pip; print(pip.__version__)").stdout.strip()
    assert pip_version and (site_packages(Path(venv)) / "distutils-precedence.pth").exists()
    assert py(venv, "import torch.utils.cpp_extension").returncode == 0
    if sys.version_info < (3, 12):
        after_pip = py(venv, "import pip._vendor.packaging.requirements; import torch.utils.cpp_extension")
        assert after_pip.returncode != 0 and "distutils" in after_pip.stderr, after_pip.stderr[-2000:]
    h = sshd_farm.start("pyvenv")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    hosts = {"pyvenv": entry(sshd_farm, h, tmp_path / "work", venv=venv)}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=cpp_ext(tmp_path / "cpp_ext")))
    assert plan(inv, play, tmp_path)["pyvenv"]["builds"][0]["action"] == "build"
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), home=tmp_path, timeout_s=1200)
    assert res.returncode == 0, res.stdout[-5000:]
    t = tasks_of(tmp_path, "pyvenv")
    assert t["build_wheel"]["status"] == "changed" and t["build_wheel"]["data"]["tool"] == "pip"
    assert t["pip_install"]["status"] == "changed" and t["verify"]["status"] == "ok", t["verify"]["msg"]
    assert py(venv, "import tiny_cpp_ext as t; print(t.scale(2.0, 3.0), t.device())").stdout.split() == ["6.0", "cpu"]

    # the other kinds users make, beside it: the preflight passes on each (its questions run in
    # their own processes), and each installs the class's wheel with its own front end
    for name, kind in (("virtualenv", "virtualenv"), ("system-site", "system-site"), ("uv-venv", "uv")):
        other = sshd_farm.start(name)
        write_fake_nvidia_smi(other.bin_dir, [H200])
        if kind == "uv":
            link_into(other.bin_dir, Path(uv()))
        hosts[name] = entry(sshd_farm, other, tmp_path / "work", venv=make_venv(tmp_path / f"venv-{name}", kind))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    rows = plan(inv, play, tmp_path)
    assert {n: r["builds"][0]["action"] for n, r in rows.items()} == {
        "pyvenv": "skip", "virtualenv": "push", "system-site": "push", "uv-venv": "push"}, rows
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), home=tmp_path, timeout_s=1200)
    assert res.returncode == 0, res.stdout[-5000:]
    for name in ("virtualenv", "system-site", "uv-venv"):
        t = tasks_of(tmp_path, name)
        assert t["pip_install"]["status"] == "changed", t["pip_install"]["msg"]
        assert t["pip_install"]["data"]["tool"] == ("uv" if name == "uv-venv" else "pip")
        assert t["verify"]["status"] == "ok", t["verify"]["msg"]


def test_a_venv_without_pip_on_a_host_without_uv_fails_while_planning_then_builds_with_uv(sshd_farm, tmp_path):
    venv = make_venv(tmp_path / "venv", "uv")  # uv venv: no pip
    assert py(venv, "import pip").returncode != 0
    h = sshd_farm.start("nopip")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"nopip": entry(sshd_farm, h, tmp_path / "work", venv=venv)}})
    facts = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "all", "--json", home=tmp_path).stdout)["nopip"]
    assert facts["uv"]["path"] is None and facts["python"]["packages"]["pip"] is None
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=cpp_ext(tmp_path / "cpp_ext")))
    expected = f"the venv {venv} " + NO_PIP.format(python=f"{venv}/bin/python3")
    row = plan(inv, play, tmp_path)["nopip"]
    assert row["builds"][0]["action"] == "fail" and expected in json.dumps(row), row
    dry = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), "--dry-run", "--json", home=tmp_path)
    assert dry.returncode == 1  # --plan, --dry-run and the deploy agree
    dried = {t["action"]: t for t in json.loads(dry.stdout)["hosts"]["nopip"]["tasks"]}
    assert dried["build_wheel"]["status"] == "failed" and expected in dried["build_wheel"]["msg"], dried
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    build = tasks_of(tmp_path, "nopip")["build_wheel"]
    assert build["status"] == "failed" and expected in build["msg"], build["msg"]
    assert not (tmp_path / "work" / "nopip" / "src").exists()  # refused before anything was uploaded
    assert "No module named pip" not in res.stdout

    # the fix it names: uv on the host; uv builds and installs into the venv that has no pip
    link_into(h.bin_dir, Path(uv()))
    assert plan(inv, play, tmp_path)["nopip"]["builds"][0]["action"] == "build"
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), home=tmp_path, timeout_s=1200)
    assert res.returncode == 0, res.stdout[-5000:]
    t = tasks_of(tmp_path, "nopip")
    assert t["build_wheel"]["data"]["tool"] == "uv" and t["pip_install"]["data"]["tool"] == "uv"
    assert t["verify"]["status"] == "ok", t["verify"]["msg"]
    assert py(venv, "import pip").returncode != 0  # still no pip: nothing was put into the venv but the package
