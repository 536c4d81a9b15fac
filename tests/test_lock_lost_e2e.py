"""A host whose deploy lock is lost during the run (fleetctl/engine/lockwatch.py; new-user trial:
such a host ended "ok" without a word). Real sshd test hosts, a real deploy, the lock's process on
the host killed or its lock file made anew by "another controller" while a build is held
(tests/test_interrupted_class_e2e.py's HeldFleet): killed with nobody else holding the lock, the
host's result stands with a warning line; taken over by another run, the host fails, and this run
never installs there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200
from tests.support.fleet import fleetctl, last_run
from tests.test_faults_e2e import wait_for
from tests.test_interrupted_class_e2e import HeldFleet

pytestmark = pytest.mark.sshd


def _holder_pid(lock: Path) -> int:
    return int(lock.read_text().split()[0])


def test_a_deploy_lock_lost_mid_run_warns_and_one_taken_over_by_another_run_fails_the_host(sshd_farm, tmp_path):
    fleet = HeldFleet(sshd_farm, tmp_path, {"n1": [H200], "n2": [H200]})  # one class: n1 builds, n2 receives
    proc = fleet.start_held(builder="n1")
    try:
        lock1, lock2 = (tmp_path / "work" / h / "deploy.lock" for h in ("n1", "n2"))
        pid1, pid2 = _holder_pid(lock1), _holder_pid(lock2)
        os.kill(pid1, signal.SIGKILL)  # someone kills n1's lock process: nobody else takes the lock
        other = {"run_id": "20261205T000000.000Z-0ther0", "controller": "ctl2", "pid": 4242, "user": "ops",
                 "started": "2026-12-05T00:00:00+00:00"}
        lock2.unlink()  # n2's lock file removed and made anew by another controller, which holds it now
        lock2.write_text(f"{os.getpid()} {json.dumps(other)}\n")
        # n2's lock process reads its file every few seconds and lets go once it names another
        assert wait_for(lambda: not Path(f"/proc/{pid1}").exists() and not Path(f"/proc/{pid2}").exists(), 60)
    except BaseException:
        fleet.end(proc, "n1", signal.SIGKILL)
        raise
    rc, out = fleet.end(proc, "n1")
    assert rc == 1, out[-4000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    n1, n2 = record["hosts"]["n1"], record["hosts"]["n2"]

    assert n1["status"] == "ok", n1.get("error")  # its work is done and checked: it stands, with a warning
    (warning,) = n1["warnings"]
    assert warning.startswith(f"the deploy lock {lock1} was lost during the run: its process on the host ended"), warning
    assert "no other run holds it now" in warning, warning
    assert f"n1 | note: {warning}" in out, out[-4000:]

    assert n2["status"] == "failed", n2
    tasks = {t["action"]: t for t in n2["tasks"]}
    assert tasks["build_wheel"]["status"] == "changed"  # received before the install
    install = tasks["pip_install"]
    assert install["status"] == "failed" and install["msg"].startswith("not run: the deploy lock"), install
    assert f"run {other['run_id']} (controller ctl2, pid 4242, user ops" in install["msg"], install["msg"]
    assert subprocess.run([f"{record['inventory']['hosts']['n2']['venv']}/bin/python3", "-c", "import toyfp4"],
                          capture_output=True).returncode != 0  # never installed while the other run held the lock
    assert lock2.read_text() == f"{os.getpid()} {json.dumps(other)}\n"  # the other run's record left alone

    shown = fleetctl("runs", "show", record["run_id"], home=tmp_path).stdout
    assert "warnings:" in shown and f"n1: {warning}" in shown, shown
    assert "n2" in shown.split("failures:")[1], shown
