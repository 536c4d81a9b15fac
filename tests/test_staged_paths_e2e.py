"""A host path setting written with a trailing slash, ``//`` or ``/./`` is the same path to
``--plan``, ``--dry-run`` and the deploy (operator trial: ``-e venv=.../serve/`` over a ``serve``
that was already a staged symlink made ``--plan`` say the live folder would be adopted as v3 and
switched to v4, while the deploy switched ``v1 -> v4`` and no v3 was ever made)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fleetctl.inventory.settings import typed_settings
from tests.support.fleet import fleetctl, write_inventory

PLAY = "name: e\nhosts: all\ngather_facts: false\ntasks:\n  - name: hi\n    command: {argv: [echo, hi]}\n"


@pytest.mark.sshd
def test_a_venv_spelled_with_a_trailing_slash_is_the_same_staged_venv(sshd_farm, tmp_path):
    h = sshd_farm.start("gpu01")
    venv, versions = tmp_path / "u1" / "serve", tmp_path / "u1" / ".serve-versions"
    venv.parent.mkdir()
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True, cwd="/")
    inv = write_inventory(tmp_path / "inv.yaml", {"gpus": {"gpu01": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": str(venv)}}})
    (tmp_path / "play.yaml").write_text(PLAY)

    def deploy(*more: str) -> str:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(tmp_path / "play.yaml"),
                       "--staged", *more, home=tmp_path, timeout_s=300)
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-3000:]
        return res.stdout + res.stderr

    deploy()  # the real folder adopted as v1, v2 staged and switched to
    assert venv.is_symlink() and Path(os.path.realpath(venv)) == versions / "v2"

    slashed = f"venv={tmp_path}//u1/./serve/"
    plan = deploy("-e", slashed, "--plan")
    assert "is a real folder" not in plan and "adopts it" not in plan, plan
    assert "v2 -> v3" in plan, plan
    dry = deploy("-e", slashed, "--dry-run")
    assert "is a real folder" not in dry and "v2 -> v3" in dry, dry
    done = deploy("-e", slashed)
    assert "v2 -> v3" in done, done
    assert venv.is_symlink() and Path(os.path.realpath(venv)) == versions / "v3"
    assert sorted(p.name for p in versions.iterdir() if p.is_dir()) == ["v1", "v2", "v3"]


def test_every_host_path_setting_is_read_in_one_spelling_and_nothing_is_resolved():
    settings = typed_settings("h", {"venv": "/a//b/./serve/", "workdir": "~/w/", "cuda_home": "/usr/local/cuda/",
                                    "deploy_lock": "//x/../y//l"}, {})[0]
    assert (settings.venv, settings.workdir, settings.cuda_home, settings.deploy_lock) == (
        "/a/b/serve", "~/w", "/usr/local/cuda", "/x/../y/l")  # ``..`` kept: through a symlink it is not textual
