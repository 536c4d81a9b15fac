"""Two inventory names of one machine ("twins"), over real sshd test hosts (operator trial):

- twins given one workdir get one verdict from ``--plan``, ``--dry-run`` and the deploy: both
  refused, the line naming the workdir (not the run folder), and never a deploy lock "held by" the
  current run with advice to kill it;
- a host of another login user on the same sshd is no twin: with its class wheel in the
  controller's cache it waits for no one, while another user's host hangs in nvidia-smi.
"""

from __future__ import annotations

import json

from tests.support.fake_gpu import H200
from tests.support.fake_gpu import write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.test_deploy_e2e import make_host_venv
from tests.test_platform_targets_e2e import _setup

import pytest

pytestmark = pytest.mark.sshd


def test_twins_on_one_workdir_get_one_verdict_in_plan_dry_run_and_deploy(sshd_farm, tmp_path):
    """h1 and h2: one user and address, a venv each, one workdir. The deploy failed one of them on
    "deploy lock W/deploy.lock is held by run R ... kill -TERM" (R the current run: its twin held
    it) and deployed the other; ``--plan`` refused both naming ``W/runs/<run_id>`` as the workdir."""
    play = _setup(tmp_path)
    h = sshd_farm.start("tw")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    wd = tmp_path / "sharedwd"
    base = h.inventory_vars(sshd_farm.known_hosts)
    hosts = {n: {**base, "workdir": str(wd), "venv": make_host_venv(tmp_path / f"venv-{n}")} for n in ("h1", "h2")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})
    line = f"h1 and h2 share the workdir {wd} ("
    fix = f"e.g. h1: {wd}/h1, h2: {wd}/h2)"
    for mode in ("--plan", "--dry-run"):
        out = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), mode, "--json",
                       home=tmp_path, timeout_s=600)
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
        doc = json.loads(out.stdout)
        rows = doc["hosts"] if mode == "--dry-run" else doc
        for name in ("h1", "h2"):
            assert rows[name]["status"] == "failed", (mode, rows)
            assert line in rows[name]["error"] and fix in rows[name]["error"] and "/runs/2" not in rows[name]["error"], (
                mode, rows[name]["error"])
    real = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--json",
                    home=tmp_path, timeout_s=600)
    assert real.returncode == 1, real.stdout[-3000:] + real.stderr[-3000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    for name in ("h1", "h2"):
        error = record["hosts"][name].get("error") or ""
        assert record["hosts"][name]["status"] == "failed", record["hosts"][name]
        assert line in error and fix in error and "kill" not in error and "/runs/2" not in error, error


def test_a_lock_held_by_the_run_itself_is_said_so_without_advice_to_kill_it():
    """The line named the current run as the holder and advised ``kill -TERM -- -PID`` (its twin's lock)."""
    from fleetctl.engine.hostlock import HostLockBusy

    holder = {"run_id": "R1", "controller": "c", "pid": 7, "user": "u", "started": "s", "remote_pid": 8947}
    own = str(HostLockBusy("h2", "/w/deploy.lock", holder, "R1"))
    assert "held by this run itself (R1)" in own and "kill" not in own, own
    other = str(HostLockBusy("h2", "/w/deploy.lock", holder, "R2"))
    assert "held by run R1" in other and "kill -TERM -- -8947" in other, other
