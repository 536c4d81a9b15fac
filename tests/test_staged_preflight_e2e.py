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
