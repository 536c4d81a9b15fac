"""An interrupted ad-hoc run lists every selected host (README, :class:`fleetctl.api.results.HostResult`):
the hosts it never got to are ``not started``, as a deploy lists them (operator trial: SIGINT 0.3 s
into ``fleetctl run --hosts h1,h2,h3,localhost -- sleep 5`` printed ``interrupted 1`` and nothing
of the other 3; the API's record held 0 or 1 of 4 hosts). And :meth:`RunResult.raise_for_status`
counts the hosts by status (it said "4 of 4 host(s) failed" for 1 failed and 3 not started).

Deterministic: ``forks=1`` holds the later hosts at the gate while the first one's command runs,
and the run is cancelled (as Ctrl-C and SIGTERM cancel it) once that command has started. Real
``local`` hosts, each with its own workdir."""

from __future__ import annotations

import asyncio
import json

import pytest

from fleetctl import Fleet, HostsFailed, RunResult
from fleetctl.engine.model import RunModel
from tests.support.fleet import last_run, write_inventory

NAMES = ["h1", "h2", "h3", "h4"]


def test_an_interrupted_adhoc_run_records_the_hosts_it_never_started_as_not_started(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    mark = tmp_path / "started"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        h: {"ansible_connection": "local", "workdir": str(tmp_path / f"w-{h}")} for h in NAMES}})

    async def main() -> None:
        task = asyncio.ensure_future(Fleet.from_inventory(inv).aselect("g").run(
            ["sh", "-c", f"echo $$ >> {mark}; exec sleep 30"], forks=1, timeout=60))
        for _ in range(600):  # the first host's command runs; the others wait for the fork
            if mark.exists() or task.done():
                break
            await asyncio.sleep(0.05)
        assert mark.exists() and not task.done(), "the first host's command did not start"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    record = json.loads((last_run(tmp_path / "state") / "run.json").read_text())
    assert record["status"] == "interrupted"
    hosts = record["hosts"]
    assert list(hosts) == NAMES, hosts  # every selected host, in the selection's order
    assert {h: o["status"] for h, o in hosts.items()} == {
        "h1": "interrupted", "h2": "not started", "h3": "not started", "h4": "not started"}
    assert hosts["h2"]["error"] == "the run was interrupted before this host started"
    assert sorted(record["failed_hosts"]) == NAMES  # the retry set takes them all


def test_raise_for_status_counts_the_hosts_by_status(tmp_path):
    run = RunModel(kind="deploy")
    for name, status in zip(NAMES, ["failed", "not started", "not started", "not started"]):
        out = run.host(name)
        out.status, out.error = status, "t: rc=1" if status == "failed" else "batch 1 failed"
    run.status = "failed"
    with pytest.raises(HostsFailed) as err:
        RunResult(run, tmp_path).raise_for_status()
    assert str(err.value).startswith(f"run {run.run_id}: 1 of 4 host(s) failed, 3 not started: h1: failed: t: rc=1; "), \
        str(err.value)

    for name, status in zip(NAMES, ["unreachable", "failed", "interrupted", "not started"]):
        run.host(name).status = status
    with pytest.raises(HostsFailed) as err:
        RunResult(run, tmp_path).raise_for_status()
    assert f"run {run.run_id}: 2 of 4 host(s) failed, 1 interrupted, 1 not started: " in str(err.value), str(err.value)
