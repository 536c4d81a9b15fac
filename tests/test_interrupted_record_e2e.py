"""An interrupted run loses nothing: SIGINT or SIGTERM in the middle of a real nvcc build on a real
sshd test host; the run record holds every finished task, the build as interrupted, and their
times, and ``runs show`` and the report say so. SIGKILL cannot write, but what was written before
stays (run.json is rewritten as tasks finish)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_deploy_e2e import host_entry, make_host_venv
from tests.test_faults_e2e import wait_for

pytestmark = pytest.mark.sshd


def _recorded(home, task: str) -> bool:
    """run.json's host ``h`` holds the finished task ``task``."""
    try:
        record = json.loads((last_run(home) / "run.json").read_text())
    except (OSError, ValueError):
        return False
    return any(t["name"] == task for t in (record.get("hosts", {}).get("h") or {}).get("tasks", []))


def _building(home) -> bool:
    """The build task has started and nvcc's build is under way (its output is arriving)."""
    for log in (home / "runs").glob("*/logs/h.log"):
        text = log.read_bytes()
        if b"==> task 2/4" in text and text.split(b"==> task 2/4", 1)[1].count(b"\nout| ") >= 2:
            return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["int", "term", "kill"])
def test_an_interrupted_deploy_keeps_every_finished_task_and_the_running_one(sshd_farm, tmp_path, sig):
    h = sshd_farm.start(f"rec-{sig.name.lower()}")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": {
        "h": host_entry(sshd_farm, h, tmp_path, venv=make_host_venv(tmp_path / "venv"))}})
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "gpu-nodes"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: _building(tmp_path), 600), proc.stderr.read() if proc.poll() is not None else ""
    if sig is signal.SIGKILL:  # nothing runs at a SIGKILL: run.json holds what its last rewrite wrote, and
        # a finished task is in it within SAVE_INTERVAL_S (0.5 s, fleetctl/reporting/record.py)
        assert wait_for(lambda: _recorded(tmp_path, "Upload kernel sources"), 30)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -9}[sig], err[-3000:]

    run_dir = last_run(tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    host = record["hosts"]["h"]
    tasks = {t["name"]: t for t in host["tasks"]}
    assert tasks["gather facts"]["status"] == "ok"
    upload = tasks["Upload kernel sources"]
    assert upload["status"] == "changed" and upload["duration_s"] > 0  # finished before the signal
    phases = [p["phase"] for p in host["phases"]]
    assert "facts" in phases and "upload" in phases, host["phases"]
    if sig is signal.SIGKILL:  # nothing could be written at the end: what was written before stays
        shown = fleetctl("runs", home=tmp_path)
        assert "interrupted" in shown.stdout, shown.stdout + shown.stderr
        return
    assert record["status"] == "interrupted" and host["status"] == "interrupted"
    build = next(t for t in host["tasks"] if t["action"] == "build_wheel")
    assert build["status"] == "interrupted" and build["duration_s"] > 0
    assert host["duration_s"] >= upload["duration_s"] + build["duration_s"]
    assert {"upload", "build"} <= {p["phase"] for p in host["phases"] if p["duration_s"] > 0}

    shown = fleetctl("runs", "show", record["run_id"], "--json", home=tmp_path)
    assert shown.returncode == 0
    again = json.loads(shown.stdout)["hosts"]["h"]["tasks"]
    assert [t["status"] for t in again[:3]] == ["ok", "changed", "interrupted"]
    rep = fleetctl("report", record["run_id"], "--html", str(tmp_path / "r.html"), home=tmp_path)
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "r.html").read_text()
    assert "1 interrupted" in html.replace("&nbsp;", " ") or "interrupted" in html
    assert f"{build['duration_s']:.2f} s (interrupted)" in html  # the build's bar, with its real time
    # the interrupted host is what --retry-failed takes next (it finished nothing: not "no failed host")
    retry = fleetctl("-i", str(inv), "deploy", "--retry-failed", "--plan", "--json", home=tmp_path)
    assert "left no failed host" not in retry.stdout + retry.stderr, retry.stdout + retry.stderr
    assert list(json.loads(retry.stdout)) == ["h"], retry.stdout + retry.stderr
