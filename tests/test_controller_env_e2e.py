"""The default host never breaks the controller, and a second staged deploy works whatever path
names the live venv (docs/staged.md): real venvs, the real CLI, a local connection."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.support.fleet import REPO, write_inventory

QUICK = "name: quick\nhosts: all\ntasks:\n  - name: say\n    command: {argv: [echo, hello]}\n"


def controller_venv(path: Path) -> Path:
    """A venv fleetctl runs from (its packages are this checkout's and the test venv's, by .pth)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    purelib = subprocess.run([str(path / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "_controller_site.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{REPO}\n")
    return path


def deploy(python: Path, inv: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "FLEETCTL_HOME": str(tmp_path / "state"),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([str(python), "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "all", "--playbook",
                           str(play), "--staged", *extra], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=600)


def test_a_staged_deploy_of_the_venv_fleetctl_runs_from_is_refused_before_anything_changes(tmp_path):
    (tmp_path / "home").mkdir()
    ctl = controller_venv(tmp_path / "ctl")
    inv = write_inventory(tmp_path / "inv.yaml", {"local": {"localhost": {"ansible_connection": "local"}}})
    for mode in ((), ("--plan", "--json"), ("--dry-run",)):  # the same planners: the same refusal
        res = deploy(ctl / "bin" / "python3", inv, tmp_path, *mode)
        out = res.stdout + res.stderr
        assert res.returncode == 1, out[-3000:]
        flat = " ".join(out.split())
        assert f"venv {ctl} is the environment this fleetctl runs from: staging it would move the controller's " \
               "own venv; give host localhost a venv of its own" in flat, out[-3000:]
        assert "Traceback" not in out
    assert ctl.is_dir() and not ctl.is_symlink()  # the controller's venv is where it was
    assert not list((tmp_path / "home").rglob("envs")) and not (tmp_path / ".ctl-versions").exists()  # none made
    res = subprocess.run([str(ctl / "bin" / "python3"), "-m", "fleetctl", "--version"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_a_second_staged_deploy_works_whatever_path_names_the_live_venv(tmp_path):
    (tmp_path / "home").mkdir()
    ctl = controller_venv(tmp_path / "ctl")
    venv = tmp_path / "serve"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = ctl / "bin" / "python3"

    def inv_for(path: str) -> Path:
        return write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local", "venv": path}}})

    res = deploy(python, inv_for(str(venv)), tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    assert venv.is_symlink() and os.readlink(venv).endswith("/v2")
    # the live version named by its own folder (what sys.prefix says in a process started through
    # one of its console scripts): still the live venv, staged beside and switched
    res = deploy(python, inv_for(os.path.realpath(venv)), tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "nothing staged" not in res.stdout and os.readlink(venv).endswith("/v3")
    res = deploy(python, inv_for(str(venv)), tmp_path)  # and by its symlink again
    assert res.returncode == 0, res.stdout[-3000:]
    assert os.readlink(venv).endswith("/v4")
    # a version that is not live: one line naming the live path, nothing changed
    old = Path(os.readlink(venv)).parent / "v3"
    res = deploy(python, inv_for(str(old)), tmp_path)
    assert res.returncode == 1
    assert f"venv {old} is v3 of {old.parent}, not the live venv: set the host var venv to the live path {venv}" \
        in res.stdout, res.stdout[-3000:]
    assert os.readlink(venv).endswith("/v4")
