"""Slurm jobs as they really end, on the project's real Slurm 22.05 test cluster (tests/support/slurm.py):

- a time limit hit mid-task: ``slurm_time: 1`` (one minute), a step that outlives it; slurmctld
  cancels the job at 60 s ("*** STEP J.S ON n1 CANCELLED AT ... DUE TO TIME LIMIT ***", srun exit
  143, JobState=TIMEOUT): the host *fails* naming the time limit, slurm_time and the job's
  TimeLimit; the host of the other job finishes;
- a node failing mid-step (``scontrol update nodename=n2 state=down``): srun exits **0** and says
  "Node failure on n2" and "... DUE TO NODE FAILURE ..."; the host fails naming the node failure
  (before, the task was "ok");
- a node failing while it shares one job with a healthy node (n1, n2: same GRES): only n2's host
  fails, naming n2; n1's step finishes and its next one starts (``salloc --no-kill``; before, the
  whole job ended and n1 was told "Slurm node n1 failed").

- a preemption: on a cluster of its own whose partition ``urgent`` preempts the default one
  (``PreemptType=preempt/partition_prio``, ``PreemptMode=CANCEL``), an urgent ``salloc`` for the
  node mid-step ("... DUE TO PREEMPTION ***", JobState=PREEMPTED): the host fails naming it.

A step killed for memory cannot be made on these clusters (TaskPlugin=task/none: no cgroup memory
limit); its lines, as Slurm 22.05 prints them, are read by the same parser in
tests/test_slurm_units.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.fleet import REPO, last_run
from tests.support.slurm import (PREEMPTION, SlurmUnavailable, slurm_cluster, slurm_cluster_session,  # noqa: F401
                                 start_cluster)

PLAY = """\
name: long steps
hosts: all
gather_facts: false
tasks:
  - name: build
    command:
      argv: [sh, -c, 'touch {local}/started; if [ "$SLURMD_NODENAME" = {slow} ]; then sleep 600; fi; echo built']
    timeout: 900
"""


def env_for(home: Path, launcher: str) -> dict:
    for sub in ("home", "state", "config"):
        (home / sub).mkdir(exist_ok=True)
    import os
    return {**os.environ, "FLEETCTL_SLURM_LAUNCHER": launcher, "HOME": str(home / "home"),
            "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
            "FLEETCTL_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}


def start(home: Path, launcher: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fleetctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_for(home, launcher), cwd=REPO)


def test_a_time_limit_hit_mid_task_fails_the_host_naming_it(slurm_cluster, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"all": {"vars": {"slurm_time": 1}}}))
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(local=slurm_cluster.local, slow="n1"))
    proc = start(tmp_path, slurm_cluster.launcher_text, "-i", "slurm:", "-i", str(site), "deploy",
                 "--hosts", "n1,n3", "--playbook", str(play), "--json")
    try:
        out, err = proc.communicate(timeout=300)  # well before the step's own 600 s: Slurm ended it
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    rec = json.loads((last_run(tmp_path) / "run.json").read_text())
    n1, n3 = rec["hosts"]["n1"], rec["hosts"]["n3"]
    assert n3["status"] in ("ok", "changed"), n3
    assert n1["status"] == "failed", n1  # Slurm took the host away: failed, not unreachable
    msg = n1["tasks"][-1]["msg"]
    assert "reached its time limit (TimeLimit 00:01:00, slurm_time=1)" in msg, msg
    assert "DUE TO TIME LIMIT" in msg and "set the host var slurm_time above" in msg
    log = (last_run(tmp_path) / "logs" / "n1.log").read_text()
    assert "CANCELLED AT" in log and "DUE TO TIME LIMIT" in log  # Slurm's own line, kept
    assert slurm_cluster.jobs() == []


def test_a_node_failing_mid_step_fails_the_host_naming_it(slurm_cluster, tmp_path):
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(local=slurm_cluster.local, slow="n2"))
    started = slurm_cluster.node_disk("n2") / "started"
    started.unlink(missing_ok=True)
    proc = start(tmp_path, slurm_cluster.launcher_text, "-i", "slurm:", "deploy", "--hosts", "n1,n2",
                 "--playbook", str(play), "--json")
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)  # poll until n2's step runs
        assert started.exists(), proc.communicate(timeout=60)
        slurm_cluster.client("scontrol", "update", "nodename=n2", "state=down", "reason=PSU failed")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    rec = json.loads((last_run(tmp_path) / "run.json").read_text())
    n1, n2 = rec["hosts"]["n1"], rec["hosts"]["n2"]
    assert n1["status"] in ("ok", "changed"), n1
    assert n2["status"] == "failed", n2
    msg = n2["tasks"][-1]["msg"]
    assert "Slurm node n2 failed while this command ran" in msg, msg
    assert "Node failure on n2" in msg or "DUE TO NODE FAILURE" in msg, msg  # Slurm's own words
    assert "scontrol show node n2" in msg


SHARED = """\
name: one job, two nodes
hosts: all
gather_facts: false
tasks:
  - name: build
    command:
      argv: [sh, -c, 'touch {local}/started; while [ ! -e {local}/go ]; do sleep 0.1; done; echo built on $SLURMD_NODENAME']
    timeout: 120
  - name: after
    command:
      argv: [sh, -c, 'echo after on $SLURMD_NODENAME']
"""


def test_a_node_failing_ends_only_its_own_host_in_a_shared_job(slurm_cluster, tmp_path):
    """n1 and n2 share one job (same GRES); n2 goes down while both steps run: n1's step finishes
    and its next step still starts (salloc --no-kill), and only n2 fails, naming itself."""
    play = tmp_path / "play.yaml"
    play.write_text(SHARED.format(local=slurm_cluster.local))
    marks = {n: (slurm_cluster.node_disk(n) / "started", slurm_cluster.node_disk(n) / "go") for n in ("n1", "n2")}
    for started, go in marks.values():
        started.unlink(missing_ok=True)
        go.unlink(missing_ok=True)
    proc = start(tmp_path, slurm_cluster.launcher_text, "-i", "slurm:", "deploy", "--hosts", "n1,n2",
                 "--playbook", str(play), "--json")
    try:
        deadline = time.monotonic() + 120
        while (not all(s.exists() for s, _ in marks.values()) and time.monotonic() < deadline
               and proc.poll() is None):
            time.sleep(0.1)  # poll until both steps run
        assert all(s.exists() for s, _ in marks.values()), proc.communicate(timeout=60)
        assert len(slurm_cluster.jobs()) == 1  # one job holds both nodes
        slurm_cluster.client("scontrol", "update", "nodename=n2", "state=down", "reason=PSU failed")
        time.sleep(1)  # slurmctld has acted on the node failure; then n1's step finishes
        marks["n1"][1].touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        for started, go in marks.values():
            started.unlink(missing_ok=True)
            go.unlink(missing_ok=True)
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    run = last_run(tmp_path)
    rec = json.loads((run / "run.json").read_text())
    n1, n2 = rec["hosts"]["n1"], rec["hosts"]["n2"]
    assert n1["status"] in ("ok", "changed"), n1  # n1 never failed: its build and the next task ran
    assert "after on n1" in (run / "logs" / "n1.log").read_text()
    assert n2["status"] == "failed", n2
    msg = n2["tasks"][-1]["msg"]
    assert "Slurm node n2 failed while this command ran" in msg, msg
    assert "scontrol show node n2" in msg and "node n1" not in msg, msg


@pytest.fixture(scope="module")
def preempting_cluster():
    """A cluster of its own whose partition ``urgent`` preempts (cancels) jobs of the default one."""
    try:
        cluster = start_cluster(extra_conf=PREEMPTION)
    except SlurmUnavailable as exc:
        pytest.fail(f"Slurm test cluster could not start: {exc}")
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.root, ignore_errors=True)


def test_a_preempted_job_fails_the_host_naming_the_preemption(preempting_cluster, tmp_path):
    cluster = preempting_cluster
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(local=cluster.local, slow="n1"))
    started = cluster.node_disk("n1") / "started"
    started.unlink(missing_ok=True)
    proc = start(tmp_path, cluster.launcher_text, "-i", "slurm:gpu", "deploy", "--hosts", "n1",
                 "--playbook", str(play), "--json")
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)  # poll until n1's step runs
        assert started.exists(), proc.communicate(timeout=60)
        urgent = cluster.client("salloc", "--no-shell", "-p", "urgent", "-w", "n1", "-N1", "--exclusive",
                                "--immediate=60", "-J", "urgent-work", timeout_s=90)
        assert "Granted job allocation" in urgent.stderr, urgent.stderr
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.client("scancel", "--user", "root", check=False)
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    n1 = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["n1"]
    assert n1["status"] == "failed", n1
    msg = n1["tasks"][-1]["msg"]
    assert "Slurm preempted job" in msg and "DUE TO PREEMPTION" in msg, msg
    assert "use a partition or QOS that is not preempted" in msg


def test_a_job_cancelled_between_steps_is_named_by_uploads_and_commands(slurm_cluster, tmp_path):
    """scancel by someone else between two steps: the next upload (sbcast fails) and every command
    after it fail naming the cancel, from scontrol's JobState, not as an sbcast error."""
    import asyncio

    from fleetctl.connection.registry import ConnectOptions, HostRef, load_kind
    from fleetctl.connection.slurm_settings import SlurmSettings
    from fleetctl.connection.slurm_end import SlurmJobEnded

    src = tmp_path / "payload.txt"
    src.write_text("payload\n")

    async def main():
        ref = HostRef("n1", SlurmSettings.model_validate({"slurm_launcher": slurm_cluster.launcher_text}))
        async with load_kind("slurm").scope(ConnectOptions(connect_timeout_s=20.0, run_id="t")) as sc:
            assert await sc.prepare([ref]) == {}
            conn = sc.connection(ref)
            await conn.open()
            assert (await conn.run(["true"])).rc == 0
            [(job, _, _)] = slurm_cluster.jobs()
            slurm_cluster.client("scancel", job)
            deadline = time.monotonic() + 30
            while slurm_cluster.jobs() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)  # poll until Slurm has ended it
            errors = []
            for call in (conn.put(str(src), str(slurm_cluster.local / "payload.txt")), conn.run(["true"])):
                try:
                    await call
                except SlurmJobEnded as exc:
                    errors.append(str(exc))
            return job, errors

    job, errors = asyncio.run(main())
    assert len(errors) == 2, errors
    assert all(f"Slurm job {job} was cancelled while this command ran on n1" in e for e in errors), errors
    assert "JobState=CANCELLED" in errors[0]


def test_a_partition_slurm_refuses_fails_the_host_naming_the_var_never_unreachable(slurm_cluster, tmp_path):
    """``slurm_partition: nosuch``: slurmctld refuses the allocation ("Invalid partition name
    specified"); the host fails (exit 1) naming the var, its value, Slurm's words and the node's
    partitions (new-user trial: "UNREACHABLE: allocation of n1 refused: ...")."""
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"all": {"hosts": {"n1": {"slurm_partition": "nosuch"}}}}))
    proc = start(tmp_path, slurm_cluster.launcher_text, "-i", "slurm:", "-i", str(site), "run", "--hosts", "n1,n3",
                 "--", "true")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    line = next(ln for ln in (out + err).splitlines() if "n1" in ln and "slurm_partition" in ln)
    assert "UNREACHABLE" not in line.upper(), line
    assert "Slurm refused the host var slurm_partition='nosuch'" in line, line
    assert "Invalid partition name specified" in line and "the node is in partition" in line, line
    assert slurm_cluster.jobs() == []
