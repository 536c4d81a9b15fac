"""pip_install installs into the venv it names, whatever the login user's pip configuration says.

A per-user ``[install] user = true`` in ``~/.config/pip/pip.conf`` (pip's docs, "Configuration";
``PIP_USER=1`` does the same) made pip put the wheel into ``~/.local/lib/pythonX.Y/site-packages``
of a venv made with ``--system-site-packages`` (the user site is visible there, so pip accepts it):
the install step said CHANGED and verify failed with ``No module named ...``; with the package
already in the venv, pip refused ("Will not install to the user site because it will lack sys.path
precedence"). A real sshd host with its own HOME holding a real pip.conf, a venv made by ``virtualenv --system-site-packages``
(the operator's), its real pip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import site_packages
from tests.support.tiny_ext import write_wheel

pytestmark = pytest.mark.sshd

PLAY = """\
name: install a wheel and verify it
hosts: all
tasks:
  - name: install
    pip_install: {wheel: "{{ wheel }}"}
  - name: verify
    verify: {package: tiny_user_site, smoke: false, needs_torch: false}
"""


def _tasks(home: Path, host: str) -> dict:
    record = json.loads((last_run(home) / "run.json").read_text())
    return {t["action"]: t for t in record["hosts"][host]["tasks"]}


def test_a_pip_conf_asking_for_user_installs_does_not_send_the_wheel_to_the_user_site(sshd_farm, tmp_path):
    host = sshd_farm.start("usersite")
    conf = host.home / ".config" / "pip" / "pip.conf"  # the user's own pip config (pip's user config file)
    conf.parent.mkdir(parents=True)
    conf.write_text("[install]\nuser = true\n")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "virtualenv", "-q", "--no-periodic-update", "--system-site-packages", str(venv)],
                   check=True)
    wheel = write_wheel(tmp_path / "wheels", "tiny_user_site", "0.1.0", {"tiny_user_site/__init__.py": "VALUE = 1\n"})
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"usersite": {
        **host.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": str(venv),
        "wheel": str(wheel)}}})
    play = tmp_path / "install.yaml"
    play.write_text(PLAY)
    user_site = list(host.home.glob(".local/lib/python*/site-packages/tiny_user_site*"))
    for forced in ((), ("--force",)):  # installed, then installed again over the venv's own copy
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), *forced, home=tmp_path)
        tasks = _tasks(tmp_path, "usersite")
        assert res.returncode == 0, (forced, tasks["pip_install"]["msg"], tasks.get("verify", {}).get("msg"))
        assert tasks["pip_install"]["status"] == "changed", tasks["pip_install"]["msg"]
        assert (site_packages(venv) / "tiny_user_site-0.1.0.dist-info").is_dir()
        user_site = list(host.home.glob(".local/lib/python*/site-packages/tiny_user_site*"))
        assert not user_site, user_site
