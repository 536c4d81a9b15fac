"""An install that fills the venv's file system mid-way (operator trial: a small tmpfs on the venv,
filled after the plan to 5 MiB): the failure names the file system that was full (the venv's
site-packages, measured after pip failed: pip's ``[Errno 28] No space left on device`` names no
path) and a fix that fits it, never "set the host var workdir" (the workdir holds none of the
venv). Real sshd test host, a real tmpfs, a real venv and real pip (fleetctl/tasks/build_room.py
``full_room_fault``).

The install passes fleetctl's room check (the wheel is small) and fills the disk with a dependency
pip takes from a local folder (``no_deps: false``): the real way a planned install outgrows its venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import site_packages, tmpfs, write_wheel

pytestmark = pytest.mark.sshd


def test_an_install_that_fills_the_venvs_file_system_names_it_and_not_the_workdir(sshd_farm, tmp_path):
    wheels = tmp_path / "wheels"
    top = write_wheel(wheels, "tiny_top", "0.1.0", {"tiny_top/__init__.py": ""}, requires=("tiny-heavy>=1",))
    write_wheel(wheels, "tiny_heavy", "1.0", {"tiny_heavy/__init__.py": "",
                                               "tiny_heavy/data.txt": os.urandom(20_000_000).hex()})  # 40 MB
    with tmpfs(tmp_path / "small", "64m") as small:
        venv = small / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # with ensurepip's pip
        st = os.statvfs(small)
        free_kib = st.f_bavail * st.f_frsize // 1024
        subprocess.run(["fallocate", "-l", f"{free_kib - 24 * 1024}k", str(small / "filler")], check=True)  # 24 MiB left
        h = sshd_farm.start("venvfill", env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)})
        work = tmp_path / "work"
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"venvfill": {
            **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(work), "venv": str(venv),
            "verify_device": "cpu"}}})
        play = tmp_path / "install.yaml"
        play.write_text("name: install\nhosts: all\ntasks:\n  - name: install\n"
                        f"    pip_install: {{wheel: {top}, no_deps: false, tool: pip}}\n")
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
        assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        task = [t for t in record["hosts"]["venvfill"]["tasks"] if t["action"] == "pip_install"][0]
        msg = task["msg"]
        assert task["status"] == "failed" and not msg.startswith("preflight:"), msg  # pip ran, and failed
        sp = site_packages(str(venv))
        assert msg.startswith(f"install failed (pip): No space left on device (ENOSPC) on {small} ("), msg
        assert f"measured after the install failed; the venv's site-packages {sp}): the file system is full" in msg, msg
        assert (f"free space on {small} (the venv's site-packages), or point the host var 'venv' at a venv on a "
                "larger file system") in msg, msg
        assert "workdir" not in msg, msg  # the workdir is on another, roomy file system: moving it cannot help
        summary = [ln for ln in res.stdout.splitlines() if "venvfill" in ln and "No space left" in ln]
        assert summary and "host var workdir" not in " ".join(summary), res.stdout[-3000:]
