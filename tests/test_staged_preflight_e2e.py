"""A staged deploy refused while planning (docs/staged.md): a build preflight that fails against
what the staged version would be (the live venv it reproduces file for file) fails the host before
the stage copies anything, as it does without ``--staged`` (README: a problem found while planning
"fails that host before anything is uploaded"). Real sshd test host, real venv, real pip."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.test_deploy_e2e import make_host_venv
from tests.test_staged_e2e import DEPLOY, KERNELS

pytestmark = pytest.mark.sshd


def test_a_staged_force_deploy_missing_build_requirements_fails_before_staging(sshd_farm, tmp_path):
    """New-operator trial: ``deploy --staged --force`` on a venv lacking a build requirement
    copied the venv into ``.<venv>-versions/v2`` (909 MiB there) and uploaded the sources before
    the build's preflight failed in the staged version, and left v2 behind; ``--plan`` and the
    unstaged deploy refused it while planning."""
    h = sshd_farm.start("gpu01")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_host_venv(tmp_path / "serve", "venv")
    src = tmp_path / "kernels"
    shutil.copytree(KERNELS, src)
    pyproject = src / "pyproject.toml"  # a build requirement the venv lacks, as scikit-build-core was
    pyproject.write_text(pyproject.read_text().replace("requires = []", 'requires = ["tiny-codegen>=1.0"]'))
    work = tmp_path / "work"
    inv = write_inventory(tmp_path / "inv.yaml", {"gpus": {"gpu01": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(work), "venv": venv}}})
    play = tmp_path / "deploy.yaml"
    play.write_text(DEPLOY.replace(str(KERNELS), str(src)))
    for more in (("--plan",), ()):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(play), "--staged", "--force",
                       *more, home=tmp_path, timeout_s=300)
        assert res.returncode == 1, res.stdout[-4000:] + res.stderr[-3000:]
        assert f"build requirements missing in " in res.stdout and "tiny-codegen>=1.0" in res.stdout, res.stdout[-4000:]
    tasks = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["gpu01"]["tasks"]
    assert [t["action"] for t in tasks if t["action"] != "facts"] == ["build_wheel"], tasks
    assert tasks[-1]["status"] == "failed" and "found while planning: nothing was uploaded or run" in tasks[-1]["msg"]
    # the fix names the venv that exists (the live one the stage copies), never .serve-versions/v2,
    # which is not there yet
    msg = tasks[-1]["msg"]
    assert f"build requirements missing in {venv}: " in msg and f"{venv}/bin/python3 -m pip install " in msg, msg
    assert ".serve-versions" not in msg, msg
    assert not (tmp_path / ".serve-versions").exists()  # nothing staged: no version copied, none left behind
    assert Path(venv).is_dir() and not Path(venv).is_symlink()
    assert not (work / "src").exists()  # the sources were never uploaded


def test_a_venv_in_a_folder_the_login_cannot_write_is_refused_while_planning(sshd_farm, tmp_path):
    """Operator trial: the login user's venv inside a root-owned 0755 folder. ``--staged --plan``
    exited 0 (``would stage v2 at .../.venv-ve-versions/v2``) and the deploy failed in the stage
    with ``stage: stage: PermissionError: ... .venv-ve-versions``, no fix. --plan, --dry-run and the
    deploy refuse it alike, in one line naming the folder, the user and the fix; nothing is made."""
    import os
    import subprocess

    from tests.test_staged_e2e import CHANGES

    h = sshd_farm.start("stagedro", shell="bash")  # logs in as a dedicated (non-root) test user
    parent = Path(h.home) / f"rootowned-{os.getpid()}"  # root's, 0755: the login enters it, cannot write it
    parent.mkdir(mode=0o755)
    try:
        os.chmod(parent, 0o755)
        venv = parent / "venv-ve"
        venv.mkdir()
        shutil.chown(venv, h.user)  # the login's venv, made by it in the folder root gave it
        subprocess.run(["runuser", "-u", h.user, "--", "/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)],
                       check=True, cwd="/", capture_output=True)
        inv = write_inventory(tmp_path / "inv.yaml", {"gpus": {"gpu01": {
            **h.inventory_vars(sshd_farm.known_hosts), "venv": str(venv)}}})
        play = tmp_path / "changes.yaml"
        play.write_text(CHANGES)
        want = (f"preflight: the venv's parent {parent} is not writable by {h.user}: --staged makes .venv-ve-versions "
                f"beside the venv and renames a symlink over it; fix: give {h.user} write access to {parent}")
        for more in (("--plan",), ("--dry-run",), ()):
            # a terminal wide enough for the line: at 80 columns the plan's table wraps it or not by
            # the test user's name (its pid's digits), so the check passed or failed by the pid
            res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(play), "--staged", *more,
                           home=tmp_path, timeout_s=300, env={"COLUMNS": "1000"})
            out = res.stdout + res.stderr
            assert res.returncode == 1 and want in out, (more, out[-4000:])
            assert "PermissionError" not in out and "stage: stage:" not in out and "Traceback" not in out, out
        assert sorted(p.name for p in parent.iterdir()) == ["venv-ve"] and not venv.is_symlink()
    finally:
        subprocess.run(["rm", "-rf", str(parent)], check=False)
