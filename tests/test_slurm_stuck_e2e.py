"""A node Slurm cannot give to a new job (its slurmd died under a job, so it stays COMPLETING) must
not hold the run's other nodes, and its line names the state Slurm gives it: through the real CLI
(``python -m fleetctl``), on a test cluster of its own (tests/support/slurm.py).

An operator's trial: ``fleetctl run`` on n1..n3, n2's slurmd killed with ``kill -9`` during it;
the next run on all nodes started n1 and n3 only after the whole connect deadline (30 s), because
the run's preparation waited for n2's request too, and n2's line said "queued and waiting for
resources" while sinfo said ``completing``.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime

import pytest

from tests.support.fleet import last_run
from tests.support.slurm import SlurmUnavailable, start_cluster
from tests.test_slurm_cli_e2e import cli

#: the run's connect deadline here (seconds): n2's request waits that long, n1 and n3 must not
DEADLINE_S = 8


@pytest.fixture(scope="module")
def cluster():
    """A cluster of its own (a node's slurmd is killed here), without slurmctld's pings
    (``SlurmdTimeout=0``, slurm.conf(5)): a ping of the dead slurmd at a random moment would mark
    n2 not responding (``completing*``) before the run, which fleetctl then names at once; here
    only the retry of the job's termination does, about 40 s after the job ended (seen here)."""
    try:
        started = start_cluster(extra_conf="SlurmdTimeout=0\n")
    except SlurmUnavailable as exc:
        pytest.fail(f"Slurm test cluster could not start: {exc}")
    yield started
    started.stop()
    shutil.rmtree(started.root, ignore_errors=True)


def _stick_completing(cluster, node: str) -> str:
    """Give ``node`` a job of someone else, kill its slurmd (SIGKILL, as the operator did), end the
    job: slurmctld waits for the dead slurmd to finish the job's cleanup, so the node stays
    COMPLETING (until ``SlurmdTimeout`` marks it not responding). Returns the job id."""
    granted = cluster.client("salloc", "--no-shell", "-w", node, "-J", "someone-else").stderr
    job = granted.split()[-1]
    assert "Granted" in granted and job.isdigit(), granted
    cluster.kill_slurmd(node)
    cluster.client("scancel", job)
    deadline = time.monotonic() + 10
    while cluster.client("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip() != "completing":
        assert time.monotonic() < deadline, cluster.client("sinfo", "-h", "-N", "-o", "%N %T").stdout
        time.sleep(0.05)
    return job


def _at(event: dict) -> float:
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def test_a_node_stuck_completing_never_holds_the_others_and_is_named_by_its_state(cluster, tmp_path):
    cluster.reset()
    job = _stick_completing(cluster, "n2")
    try:
        res = cli("-i", "slurm:", "run", "--hosts", "all", "--connect-timeout", str(DEADLINE_S), "--",
                  "date", "+%T.%N", home=tmp_path, launcher=cluster.launcher_text, timeout_s=120)
        left = [j for j in cluster.jobs() if j[1].startswith("fleetctl-")]
    finally:
        cluster.reset()  # n2's slurmd started again: n2 finishes the cleanup and is idle
    assert res.returncode == 1, res.stdout + res.stderr[-3000:]  # one host unreachable, the others ran
    events = [json.loads(ln) for ln in (last_run(tmp_path) / "events.jsonl").read_text().splitlines()]
    began = _at(next(e for e in events if e["event"] == "run.started"))
    started = {e["host"]: _at(e) - began for e in events if e["event"] == "host.started"}
    finished = {e["host"]: e for e in events if e["event"] == "host.finished"}
    # n1 and n3 are idle: they start and finish at once, not after n2's deadline
    for node in ("n1", "n3"):
        assert started[node] < 3, started
        assert finished[node]["status"] == "ok" and _at(finished[node]) - began < DEADLINE_S - 2, finished[node]
    # n2: unreachable, in Slurm's words for its state (not "queued and waiting for resources")
    n2 = finished["n2"]
    assert n2["status"] == "unreachable", n2
    assert n2["error"].startswith(f"Slurm node n2 is completing (COMPLETING: its slurmd has not finished job "
                                  f"{job}'s cleanup)"), n2["error"]
    assert f"not granted within {DEADLINE_S} s" in n2["error"] and "queued" not in n2["error"], n2["error"]
    assert "n2: UNREACHABLE: Slurm node n2 is completing" in res.stdout + res.stderr
    assert left == []  # nothing of the run's is left pending or running
