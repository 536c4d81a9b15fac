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
    events = [json.loads(ln) for ln in (last_run(tmp_path) / "events.jsonl").read_text().splitlines()]
    notes = [e for e in events if e["event"] == "note.added" and "held by this run itself" in e.get("message", "")]
    assert len(notes) == 1 and f"deploy lock {wd}/deploy.lock is held" in notes[0]["message"], notes


def test_a_lock_held_by_the_run_itself_is_said_so_without_advice_to_kill_it():
    """The line named the current run as the holder and advised ``kill -TERM -- -PID`` (its twin's lock)."""
    from fleetctl.engine.hostlock import HostLockBusy

    holder = {"run_id": "R1", "controller": "c", "pid": 7, "user": "u", "started": "s", "remote_pid": 8947}
    own = str(HostLockBusy("h2", "/w/deploy.lock", holder, "R1"))
    assert "held by this run itself (R1)" in own and "kill" not in own, own
    other = str(HostLockBusy("h2", "/w/deploy.lock", holder, "R2"))
    assert "held by run R1" in other and "kill -TERM -- -8947" in other, other


#: Seconds the hung host's facts wait for its nvidia-smi (its ``gpu_probe_timeout_s``): what a host
#: waiting for it would lose, well above what the cached host takes alone.
HUNG_S = 8


def end_of(entry: dict) -> float:
    """When a host (``started``) or a task (``start``) of a run record ended, in seconds since the
    epoch: its start plus ``duration_s``."""
    from datetime import datetime

    return datetime.fromisoformat(entry.get("started") or entry["start"]).timestamp() + entry["duration_s"]


def test_a_host_with_its_class_wheel_cached_never_waits_for_another_users_hung_host(sshd_farm, tmp_path):
    """Operator trial: h-bash (its class wheel in the controller's cache) and h-zsh, another login
    user on the same sshd whose nvidia-smi hung: h-bash took 25.6 s instead of 5.1 s, ``class.waiting
    ... waiting_for: [h-zsh]`` with the reason "its arch class ...": the twin rule keyed the machine
    by address and port only. A twin is one login user of one machine (the controller lock's key)."""
    import shutil

    from tests.support.sshd import ensure_user

    play = _setup(tmp_path)
    h = sshd_farm.start("cached")
    other = ensure_user("zsh")  # h-zsh logs in as another user of the same sshd
    real = write_fake_nvidia_smi(tmp_path / "gpu-bin", [H200])
    (h.bin_dir / "nvidia-smi").write_text(  # for h-zsh's user only: a GPU off the bus, never answers
        f'#!/bin/sh\n[ "$(id -un)" = "{other}" ] && exec sleep 60\nexec {real} "$@"\n')
    (h.bin_dir / "nvidia-smi").chmod(0o755)
    good = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / "h-bash"),
            "venv": make_host_venv(tmp_path / "venv-bash"), "gpu_probe_timeout_s": HUNG_S}
    work = sshd_farm.root / f"wz-{tmp_path.name}"  # h-zsh's user's workdir (tmp_path is root's own)
    work.mkdir()
    shutil.chown(work, other, other)
    hung = {**good, "ansible_user": other, "workdir": str(work), "venv": str(work / "venv")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"h-bash": good, "h-zsh": hung}})

    def deploy(pattern: str):
        return fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), "--json",
                        home=tmp_path, timeout_s=600)

    try:
        first = deploy("h-bash")  # its class's wheel into the controller's cache
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        deploy("h-bash,h-zsh")
        run_dir = last_run(tmp_path)
        ran = json.loads((run_dir / "run.json").read_text())["hosts"]
        events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
        assert ran["h-zsh"]["duration_s"] >= HUNG_S, ran["h-zsh"]  # its facts waited out the probe timeout
        assert ran["h-bash"]["status"] == "ok", ran["h-bash"]
        waits = [e for e in events if e["event"] == "class.waiting" and e.get("host") == "h-bash"]
        assert not waits, waits
        # h-bash ended before h-zsh's facts did (they end only when its probe times out): a host that
        # waited for h-zsh's verdict would end after them. Compared on the record's clocks, not with a
        # fixed bound, so a loaded machine that slows h-bash alone cannot fail it.
        assert end_of(ran["h-bash"]) < end_of(ran["h-zsh"]["tasks"][0]), (ran["h-bash"], ran["h-zsh"]["tasks"][0])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_twins_wait_says_it_waits_for_its_twins_not_its_arch_class():
    from fleetctl.engine.class_need import wait_reason

    twin = wait_reason(20.0, ("h-tcsh2",))
    assert twin.startswith("h-tcsh2, another inventory name of its machine and login user, may share a folder")
    assert "arch class" not in twin and "at most 20 s" in twin, twin
    assert wait_reason(20.0).startswith("its arch class is settled"), wait_reason(20.0)
