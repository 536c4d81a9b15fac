"""The wheels ``pip_install`` keeps to roll back to are kept by content: two builds of one version
(a rebuild, ``--force``: one file name) are two kept wheels, and a roll-back puts back the bytes
that were installed. A real venv (virtualenv's pip, a stand-in torch), real pip installs through a
local host, the real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv
from tests.support.tiny_ext import fake_torch_files, write_wheel

PLAY = "name: install\nhosts: all\ntasks:\n  - name: install\n    pip_install: {wheel: \"{{ wheel }}\"}\n"


def _sha(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_two_builds_of_one_version_are_kept_apart_and_a_roll_back_installs_the_right_one(tmp_path):
    """Operator trial: the kept wheel was ``installed/<key>/<file name>``, so a rebuild of the same
    version overwrote the one it replaced and the install record's ``previous`` named the new bytes."""
    venv = Path(make_venv(tmp_path / "venv", "virtualenv", torch=False))  # its own pip, no torch
    index = tmp_path / "index"  # the only "index": torch 2.0.0, put back by the roll-back
    torch = write_wheel(index, "torch", "2.0.0", fake_torch_files("2.0.0"))
    subprocess.run([str(venv / "bin" / "python3"), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(torch)],
                   check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    builds = {n: write_wheel(tmp_path / f"build{n}", "tiny_roll", "0.1.0", {"tiny_roll/__init__.py": f"VALUE = {n}\n"})
              for n in (1, 2, 4)}
    # a third build of the same version whose install moves torch: refused and rolled back
    builds[3] = write_wheel(tmp_path / "build3", "tiny_roll", "0.1.0", {
        "tiny_roll/__init__.py": "VALUE = 3\n", "torch/version.py": "__version__ = '9.9.9'\ncuda = None\n"})
    assert len({b.name for b in builds.values()}) == 1 and len({_sha(b) for b in builds.values()}) == 4
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local", "venv": str(venv),
                                                                "workdir": str(tmp_path / "work")}}})
    play = tmp_path / "install.yaml"
    play.write_text(PLAY)
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index), "PIP_CONFIG_FILE": os.devnull}

    def install(n: int) -> tuple[int, dict]:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", f"wheel={builds[n]}",
                       home=tmp_path, env=env)
        task = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["box"]["tasks"][-1]
        return res.returncode, task

    def value() -> str:
        return subprocess.run([str(venv / "bin" / "python3"), "-c", "import tiny_roll, torch; "
                               "print(tiny_roll.VALUE, torch.__version__)"], capture_output=True, text=True,
                              cwd="/", check=True).stdout.split()

    assert install(1)[0] == 0
    rc, task = install(2)
    assert rc == 0 and task["status"] == "changed", task
    record = json.loads(next((tmp_path / "work").glob("installed/*/tiny_roll.json")).read_text())
    assert record["kept"] != record["previous"], record  # one file name, two builds: two files
    assert _sha(record["kept"]) == _sha(builds[2]) and _sha(record["previous"]) == _sha(builds[1]), record
    rc, task = install(3)
    assert rc == 1 and task["status"] == "failed", task
    assert ("rolled back: reinstalled tiny_roll-0.1.0-py3-none-any.whl, reinstalled torch 2.0.0" in task["msg"]), task
    assert value() == ["2", "2.0.0"]  # the build that was installed before, not the first one
    # only the installed wheel and the one it replaced are kept (a rebuild a night keeps two files)
    assert install(4)[0] == 0
    kept = sorted(p.name for p in next((tmp_path / "work").glob("installed/*/tiny_roll.wheels")).iterdir())
    assert kept == sorted(_sha(builds[n])[:16] for n in (2, 4)), kept
    assert value() == ["4", "2.0.0"]
