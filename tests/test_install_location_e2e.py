"""Where an install went and which copy Python imports, said truly (fresh operator's trial).

A venv whose ``.pth`` file adds ANOTHER venv's site-packages to ``sys.path``, that other venv
holding the package: the deploy said ``installed outside the venv (/home/u/pv/...)`` and ``a copy
... remains in /home/u/pv/...: remove it`` although the wheel went into the venv (whose path has a
space) and Python imported it: advice to delete another environment's files. A .pth line puts its
folder after the venv's site-packages (Python's ``site`` docs); a .pth ``import`` line may put it
before, and then the other copy shadows the new install, which must fail naming both and the .pth.
Real venvs (virtualenv), a real .pth file, real pip, on the local host.
"""

from __future__ import annotations

import json
import os
import subprocess

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv, site_packages
from tests.support.tiny_ext import write_wheel

PLAY = """\
name: install a wheel
hosts: all
tasks:
  - name: install
    pip_install: {wheel: "{{ wheel }}"}
"""


def _install_task(home) -> dict:
    record = json.loads((last_run(home) / "run.json").read_text())
    return next(t for t in record["hosts"]["box"]["tasks"] if t["action"] == "pip_install")


def test_a_copy_another_venv_puts_on_sys_path_is_named_truly_never_to_be_removed(tmp_path):
    other = make_venv(tmp_path / "pv", torch=False)
    old = write_wheel(tmp_path / "old", "tiny_pth", "0.0.9", {"tiny_pth/__init__.py": "VALUE = 0\n"})
    subprocess.run([f"{other}/bin/python3", "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-cache-dir",
                    str(old)], check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    venv = make_venv(tmp_path / "my venv", torch=False)
    theirs, ours = site_packages(tmp_path / "pv"), site_packages(tmp_path / "my venv")
    pth = ours / "zz_pv.pth"
    pth.write_text(f"{theirs}\n")
    wheel = write_wheel(tmp_path / "wheels", "tiny_pth", "0.1.0", {"tiny_pth/__init__.py": "VALUE = 1\n"})
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {
        "ansible_connection": "local", "workdir": str(tmp_path / "work"), "venv": venv, "wheel": str(wheel)}}})
    play = tmp_path / "install.yaml"
    play.write_text(PLAY)

    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    task = _install_task(tmp_path)
    assert res.returncode == 0 and task["status"] == "changed", (task["msg"], res.stderr[-2000:])
    msg = task["msg"]
    assert "remove it" not in msg and "outside the venv" not in msg, msg
    assert f"none was in the venv before (Python imported the copy of tiny_pth in {theirs}, which is on sys.path " \
           f"through {pth})" in msg, msg
    assert f"Python now imports the copy of tiny_pth just installed in {ours}; the one in {theirs}" in msg, msg
    assert "was left as it is" in msg, msg
    assert (ours / "tiny_pth-0.1.0.dist-info").is_dir() and (theirs / "tiny_pth-0.0.9.dist-info").is_dir()

    # a .pth import line puts the other venv first: its old copy shadows the one just installed
    pth.write_text(f"import sys; sys.path.insert(0, {str(theirs)!r})\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--force", home=tmp_path)
    task = _install_task(tmp_path)
    assert res.returncode == 1 and task["status"] == "failed", (task["msg"], res.stderr[-2000:])
    assert task["msg"] == (f"a copy of tiny_pth in {theirs} shadows the one just installed in {ours} ({theirs} is on "
                           f"sys.path through {pth}, ahead of the venv's site-packages): Python imports that one; "
                           "remove it or the .pth line"), task["msg"]
    assert (task["data"]["decision"]["why"] == f"the venv's copy in {ours} is shadowed by the one in {theirs} "
                                                f"({theirs} is on sys.path through {pth})"), task["data"]["decision"]


def test_a_host_refused_while_planning_is_told_nothing_about_an_install_that_never_ran(tmp_path):
    """Fresh operator's trial: a host refused while planning (a later task's preflight: no torch for
    verify) was also told ``Python now imports the copy of ... just installed in ...``: the install's
    note, said from the planning pass's simulated install. A note resting on a simulated step is
    never said; the refusal is. ``--plan`` says what the install would do, never "just installed"."""
    other = make_venv(tmp_path / "pv", torch=False)
    old = write_wheel(tmp_path / "old", "tiny_pth", "0.0.9", {"tiny_pth/__init__.py": "VALUE = 0\n"})
    subprocess.run([f"{other}/bin/python3", "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-cache-dir",
                    str(old)], check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    venv = make_venv(tmp_path / "venv", torch=False)
    theirs, ours = site_packages(tmp_path / "pv"), site_packages(tmp_path / "venv")
    (ours / "zz_pv.pth").write_text(f"{theirs}\n")
    wheel = write_wheel(tmp_path / "wheels", "tiny_pth", "0.1.0", {"tiny_pth/__init__.py": "VALUE = 1\n"})
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {
        "ansible_connection": "local", "workdir": str(tmp_path / "work"), "venv": venv, "wheel": str(wheel)}}})
    play = tmp_path / "install.yaml"
    play.write_text(PLAY + "  - name: verify\n    verify: {package: tiny_pth, smoke: false}\n")

    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", "--json",
                    home=tmp_path)
    install = json.loads(plan.stdout)["box"]["tasks"][0]
    assert "just installed" not in install["msg"] and "was left as it is" not in install["msg"], install
    assert f"Python would import the copy of tiny_pth the install puts in {ours}" in install["msg"], install

    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "found while planning" in out, out[-3000:]
    assert "torch does not import" in out, out[-3000:]
    assert "just installed" not in out, out[-3000:]
    events = (last_run(tmp_path) / "events.jsonl").read_text()
    assert "just installed" not in events, [ln for ln in events.splitlines() if "just installed" in ln]
    assert not (ours / "tiny_pth-0.1.0.dist-info").exists()  # nothing was installed
