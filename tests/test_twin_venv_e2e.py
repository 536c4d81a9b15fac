"""Two inventory names of one machine and one venv (each its own workdir): after one deployed, the
other's ``--plan`` and ``--dry-run`` give one verdict, read from the venv's own install record
(``.fleetctl-install.json``), and a dry run's terminal lines say what it WOULD change, never that it
changed. Real sshd on loopback, a real venv, a real build of the toy CUDA package."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, write_inventory
from tests.test_agreement_e2e import PLAY
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd


def test_a_second_name_of_a_deployed_venv_plans_and_dry_runs_alike(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    h = sshd_farm.start("hb")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_host_venv(tmp_path / "venv")
    hosts = {name: {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                    "venv": venv} for name in ("hb", "t2")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    def deploy(pattern: str, *extra: str):
        return fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), *extra,
                        home=tmp_path, timeout_s=600)

    first = deploy("hb")
    assert first.returncode == 0, first.stderr[-3000:]
    plan = deploy("t2", "--plan", "--json")
    assert plan.returncode == 0, plan.stderr[-3000:]
    row = json.loads(plan.stdout)["t2"]
    install = next(t for t in row["tasks"] if t["action"] == "pip_install")
    assert install["decision"] == {"action": "skip"}, install
    # the build's cause: the venv holds the wheel of exactly these inputs (its own mark names hb and
    # the same sha256), never "nothing installed"
    assert row["builds"][0]["changed"] == [], row["builds"]
    dry = deploy("t2", "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    out = dry.stdout + dry.stderr
    assert "Install the toy wheel: toyfp4-0.1.0-py3-none-any.whl already installed (same sha256)" in out
    # a dry run changes nothing: every change is what it WOULD do
    assert "(dry run: nothing is changed)" in out
    assert "CHANGED" not in out.replace("WOULD CHANGE", ""), out[-3000:]
    assert "WOULD CHANGE Upload the toy sources: would upload 3 of 3 files" in out, out[-3000:]
    assert "WOULD CHANGE Build the toy wheel: would push toyfp4-0.1.0-py3-none-any.whl" in out
