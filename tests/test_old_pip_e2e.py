"""A venv's pip too old for the build, a workdir too small for it, and a failed build's stamp, end
to end on real sshd test hosts (operator trial): real venvs with a real pip 20.3.4 installed into
them (from the index this machine reaches), a real tmpfs workdir, a real failed build.

- pip 20.3.4 has no ``--config-settings`` (pip 22.1 added it): ``fleetctl facts`` warns with the
  line the build's preflight refuses with, ``--plan`` refuses, the deploy uploads nothing; a host
  whose build uses uv is not refused for pip's version.
- A workdir with 29 MiB free: ``fleetctl facts`` warns with the line the deploy refuses with.
- A failed ``--force`` build leaves the installed wheel's build stamp: the next plan reuses it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fleetctl.facts.refusals import BUILDER_TAIL
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv, uv
from tests.support.tiny_ext import cmake_ext, link_into, tmpfs

pytestmark = pytest.mark.sshd

BUILD_PLAY = """\
name: build a tiny extension
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel: {{src: "{{{{ workdir }}}}/src", out_dir: "{{{{ workdir }}}}/wheels", max_jobs: 1}}
"""

OLD_PIP = ("pip 20.3.4 in the venv {venv} is too old to build: the build runs pip wheel --config-settings (the CMake "
           "defines), which pip 22.1 added; upgrade pip in the venv ({venv}/bin/python3 -m pip install -U pip), or "
           "install uv on the host (https://docs.astral.sh/uv/getting-started/installation/)")


def entry(farm, host, work: Path, **extra) -> dict:
    return {**host.inventory_vars(farm.known_hosts), "workdir": str(work / host.name), "verify_device": "cpu", **extra}


def old_pip_venv(path: Path) -> str:
    """A virtualenv-made venv (torch and the build tools from the test base site) whose own pip is
    pip 20.3.4, installed by its pip as an operator would (``<venv>/bin/pip install pip==20.3.4``)."""
    venv = make_venv(path, "virtualenv")
    res = subprocess.run([f"{venv}/bin/pip", "install", "-q", "--no-cache-dir", "--disable-pip-version-check",
                          "pip==20.3.4"], capture_output=True, text=True, cwd="/")
    # the index setup.sh installs from (PyPI or its mirror): a failure here fails, never skips
    assert res.returncode == 0, f"pip 20.3.4 could not be installed from the index: {res.stderr[-500:]}"
    version = subprocess.run([f"{venv}/bin/python3", "-m", "pip", "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("pip 20.3.4 "), version.stdout
    return venv


def facts_of(inv: Path, home: Path) -> dict:
    res = fleetctl("-i", str(inv), "facts", "--hosts", "all", "--json", home=home)
    return json.loads(res.stdout)


def plan(inv: Path, play: Path, home: Path, *more: str) -> dict:
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), "--plan", "--json", *more, home=home)
    return json.loads(res.stdout)


def test_an_old_pip_is_warned_by_facts_and_refused_while_planning_but_not_where_uv_builds(sshd_farm, tmp_path):
    venv = old_pip_venv(tmp_path / "venv")
    h = sshd_farm.start("oldpip")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"oldpip": entry(sshd_farm, h, tmp_path / "work", venv=venv)}})
    expected = OLD_PIP.format(venv=venv)
    facts = facts_of(inv, tmp_path)["oldpip"]
    assert facts["python"]["packages"]["pip"] == "20.3.4" and facts["uv"]["path"] is None
    # only a host that builds needs the newer pip: facts say so (a receiver of its class's wheel is not refused)
    warning = f"warning: {expected}{BUILDER_TAIL}"
    assert warning in facts["build"]["notes"], facts["build"]["notes"]
    play = tmp_path / "play.yaml"
    play.write_text(BUILD_PLAY.format(src=cmake_ext(tmp_path / "cmake_ext")))
    for more in ((), ("--force",)):
        row = plan(inv, play, tmp_path, *more)["oldpip"]
        assert row["builds"][0]["action"] == "fail" and expected in json.dumps(row), row
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), "--force", home=tmp_path)
    assert res.returncode == 1, res.stdout[-3000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    build = {t["action"]: t for t in record["hosts"]["oldpip"]["tasks"]}["build_wheel"]
    assert build["status"] == "failed" and expected in build["msg"], build["msg"]
    assert "no such option" not in res.stdout
    assert not (tmp_path / "work" / "oldpip" / "src").exists()  # refused before anything was uploaded

    # operator trial 10: facts said "a deploy refuses this host"; beside a member of its class that
    # can build, the deploy makes it a receiver of that member's wheel, as the warning now says
    ok = sshd_farm.start("newpip")
    write_fake_nvidia_smi(ok.bin_dir, [H200])
    inv2 = write_inventory(tmp_path / "inv2.yaml", {"g": {
        "oldpip": entry(sshd_farm, h, tmp_path / "work", venv=venv),
        "newpip": entry(sshd_farm, ok, tmp_path / "work", venv=make_venv(tmp_path / "venv2", "virtualenv"))}})
    rows = plan(inv2, play, tmp_path)
    assert [rows[n]["builds"][0]["action"] for n in ("newpip", "oldpip")] == ["build", "push"], rows

    # uv on the host: the build runs uv build, which needs no pip in the venv: not refused for pip's version
    link_into(h.bin_dir, Path(uv()))
    facts = facts_of(inv, tmp_path)["oldpip"]
    assert not any("pip 20.3.4" in n for n in facts["build"]["notes"]), facts["build"]["notes"]
    row = plan(inv, play, tmp_path)["oldpip"]
    assert row["builds"][0]["action"] == "build" and "pip 20.3.4" not in json.dumps(row), row


def test_a_workdir_short_of_the_builds_space_is_warned_by_facts_with_the_deploys_line(sshd_farm, tmp_path):
    h = sshd_farm.start("small")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_venv(tmp_path / "venv", "virtualenv")
    fs = tmp_path / "small-fs"
    work = fs / "work"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"small": {**entry(sshd_farm, h, tmp_path, venv=venv),
                                                                  "workdir": str(work)}}})
    play = tmp_path / "play.yaml"
    play.write_text(BUILD_PLAY.format(src=cmake_ext(tmp_path / "cmake_ext")))
    needs = "MiB free at {where}; the build needs 2048 MiB (the build_wheel task's min_free_disk_mib argument"
    with tmpfs(fs, "64m"):
        work.mkdir()
        subprocess.run(["fallocate", "-l", "35m", str(fs / "filler")], check=True)  # about 29 MiB free
        facts = facts_of(inv, tmp_path)["small"]
        assert 16 <= facts["disk_free_mib"] < 64, facts["disk_free_mib"]
        where = facts["disk_free_path"]
        line = next((n for n in facts["build"]["notes"] if needs.format(where=where) in n), None)
        assert line and line.startswith("warning: only ") and line.endswith(
            "; a deploy refuses this host until it is fixed"), facts["build"]["notes"]
        row = plan(inv, play, tmp_path)["small"]
        assert row["builds"][0]["action"] == "fail", row
        refusal = json.dumps(row)
        assert needs.format(where=where) in refusal, row
        # the same line, number and all, but for the MiB the plan's own run wrote since
        said = line.removeprefix("warning: ").removesuffix("; a deploy refuses this host until it is fixed")
        assert said.split(" MiB free", 1)[1] in refusal, (said, row)


SETUP_PY = """\
import os, sys
from setuptools import setup
if os.path.exists({marker!r}):
    sys.exit("tiny_pure: asked to fail ({marker})")
setup()
"""


def test_a_failed_forced_build_keeps_the_installed_wheels_stamp(sshd_farm, tmp_path):
    venv = make_venv(tmp_path / "venv", "virtualenv")
    h = sshd_farm.start("keep")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"keep": entry(sshd_farm, h, tmp_path / "work", venv=venv)}})
    src, marker = tmp_path / "tiny_pure", tmp_path / "fail-the-build"
    (src / "tiny_pure").mkdir(parents=True)
    (src / "tiny_pure" / "__init__.py").write_text("VALUE = 1\n")
    (src / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = '
                                        '"setuptools.build_meta"\n\n[project]\nname = "tiny_pure"\nversion = "0.1.0"\n')
    (src / "setup.py").write_text(SETUP_PY.format(marker=str(marker)))
    play = tmp_path / "play.yaml"
    play.write_text(f"""\
name: build and install a tiny pure package
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel: {{src: "{{{{ workdir }}}}/src", out_dir: "{{{{ workdir }}}}/wheels", max_jobs: 1, check_sass: false,
                  no_build_isolation: true}}
    register: build
  - name: install
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
""")
    deploy = ("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play))
    res = fleetctl(*deploy, home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    assert plan(inv, play, tmp_path)["keep"]["builds"][0]["action"] == "skip"
    marker.write_text("")  # the forced build fails (its inputs, the tree included, are the same)
    res = fleetctl(*deploy, "--force", home=tmp_path)
    assert res.returncode == 1, res.stdout[-3000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    build = {t["action"]: t for t in record["hosts"]["keep"]["tasks"]}["build_wheel"]
    assert build["status"] == "failed" and build["msg"].startswith("build failed"), build["msg"]
    marker.unlink()
    row = plan(inv, play, tmp_path)["keep"]
    assert row["builds"][0]["action"] == "skip", row  # the installed wheel's stamp is still there
    assert "build stamp is gone" not in json.dumps(row), row
