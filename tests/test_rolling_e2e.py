"""Rolling batches, the canary, --retry-failed and the deploy lock, against real sshd test hosts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from fleetctl.inventory import Host
from fleetctl.engine.batches import batches, stop_reason
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

FAIL_ON = textwrap.dedent("""\
    name: fail on some hosts
    hosts: all
    gather_facts: false
    tasks:
      - name: check
        command:
          argv: [sh, -c, 'case " $BAD " in *" $FLEETCTL_TEST_HOST "*) echo "$FLEETCTL_TEST_HOST is bad"; exit 3;; esac; echo fine']
        env:
          BAD: "{{ bad }}"
    """)


def hosts_of(n: int) -> list[Host]:
    return [Host(name=f"h{i}", vars={}, groups=("all",)) for i in range(n)]


@pytest.mark.parametrize(("serial", "n", "sizes"), [
    ((), 5, [5]), ((1,), 3, [1, 1, 1]), (("1", "100%"), 5, [1, 4]), ((1, "10%", "100%"), 30, [1, 3, 26]),
    (("50%",), 5, [2, 2, 1]), ((2, 1), 4, [2, 1, 1]),
])
def test_batches_follow_ansible_serial(serial, n, sizes):
    got = batches(hosts_of(n), serial)
    assert [len(b) for b in got] == sizes
    assert [h.name for b in got for h in b] == [h.name for h in hosts_of(n)]


@pytest.mark.parametrize(("sizes", "n", "bad", "max_fail", "reason"), [
    ((2, 2), 0, 2, None, "batch 1 of 2: 2 of 2 hosts failed (every host); 2 hosts not started"),
    ((2, 2), 0, 1, None, None),
    ((4, 4, 2), 1, 2, 25, "batch 2 of 3: 2 of 4 hosts failed (more than max_fail_percentage 25%); 2 hosts not started"),
    ((4, 4), 0, 1, 25, None),  # 25% is not more than 25%
    ((4, 4), 0, 1, 0, "batch 1 of 2: 1 of 4 hosts failed (more than max_fail_percentage 0%); 4 hosts not started"),
    ((3,), 0, 3, None, None),  # the last batch stops nothing
])
def test_a_batch_stops_the_later_ones_by_ansibles_max_fail_percentage(sizes, n, bad, max_fail, reason):
    plan, hosts = [], iter(hosts_of(sum(sizes)))
    for size in sizes:
        plan.append([next(hosts) for _ in range(size)])
    assert stop_reason(n, plan, bad, max_fail) == reason


def fleet(sshd_farm, tmp_path, n):
    hosts = {}
    for i in range(1, n + 1):
        h = sshd_farm.start(f"n{i}")
        hosts[f"n{i}"] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / f"n{i}")}
    return write_inventory(tmp_path / "inv.yaml", {"nodes": hosts})


def test_failing_canary_stops_before_the_second_batch(sshd_farm, tmp_path):
    inv = fleet(sshd_farm, tmp_path, 3)
    play = tmp_path / "play.yaml"
    play.write_text(FAIL_ON)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play), "--serial", "1,100%",
                   "-e", "bad=n1", home=tmp_path)
    assert res.returncode == 1
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["hosts"]["n1"]["status"] == "failed"
    assert record["hosts"]["n2"]["status"] == "not started"
    assert record["hosts"]["n3"]["status"] == "not started"
    assert "batch 1 of 2" in record["stopped"] and "stopped:" in res.stdout
    assert not (last_run(tmp_path) / "logs" / "n2.log").exists()
    # fleetctl runs: the canary failed, the other two never started (they did not fail; new-user trial)
    listed = json.loads(fleetctl("runs", "--json", home=tmp_path).stdout)[0]
    assert (listed["run_id"], listed["hosts"], listed["failed"], listed["not_started"]) == (record["run_id"], 3, 1, 2)
    line = fleetctl("runs", home=tmp_path).stdout.splitlines()[0]
    assert line.startswith(record["run_id"]) and line.endswith("3 hosts  1 failed  2 not started"), line
    assert sorted(record["failed_hosts"]) == ["n1", "n2", "n3"]  # --retry-failed still deploys all three
    shown = fleetctl("runs", "show", record["run_id"], home=tmp_path).stdout
    failures, _, waiting = shown.partition("\nnot started:\n")
    assert "n[2-3] (2): batch 1 of 2" in waiting and "n[2-3]" not in failures.partition("failures:")[2], shown


def test_max_fail_percentage(sshd_farm, tmp_path):
    inv = fleet(sshd_farm, tmp_path, 4)
    play = tmp_path / "play.yaml"
    play.write_text(FAIL_ON)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play), "--serial", "2",
                   "--max-fail-percentage", "40", "-e", "bad=n2", home=tmp_path)
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert res.returncode == 1
    assert [record["hosts"][f"n{i}"]["status"] for i in range(1, 5)] == ["ok", "failed", "not started", "not started"]
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play), "--serial", "2",
                   "--max-fail-percentage", "50", "-e", "bad=n2", home=tmp_path)
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert [record["hosts"][f"n{i}"]["status"] for i in range(1, 5)] == ["ok", "failed", "ok", "ok"]


def test_retry_failed_reruns_exactly_the_failed_hosts(sshd_farm, tmp_path):
    inv = fleet(sshd_farm, tmp_path, 4)
    play = tmp_path / "play.yaml"
    play.write_text(FAIL_ON)
    first = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play), "-e", "bad=n2 n4",
                     home=tmp_path)
    assert first.returncode == 1
    first_id = last_run(tmp_path).name
    assert json.loads((last_run(tmp_path) / "run.json").read_text())["failed_hosts"] == ["n2", "n4"]
    again = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play), "--retry-failed",
                     "-e", "bad=n4", home=tmp_path)
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert sorted(record["hosts"]) == ["n2", "n4"]
    assert again.returncode == 1 and record["failed_hosts"] == ["n4"]
    # the retry set follows every run; an explicit run id still reaches back
    last = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play), "--retry-failed",
                    "-e", "bad=", home=tmp_path)
    assert last.returncode == 0
    assert sorted(json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]) == ["n4"]
    back = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play), "--retry-failed", first_id,
                    "-e", "bad=", home=tmp_path)
    assert back.returncode == 0
    assert sorted(json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]) == ["n2", "n4"]
    nothing = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play), "--retry-failed",
                       home=tmp_path)
    assert nothing.returncode == 0 and "nothing to retry" in nothing.stderr


def test_two_deploys_on_the_same_hosts_never_interleave(sshd_farm, tmp_path):
    inv = fleet(sshd_farm, tmp_path, 1)
    slow = tmp_path / "slow.yaml"
    slow.write_text("name: slow\nhosts: all\ngather_facts: false\ntasks:\n"
                    "  - name: sleep\n    command: {argv: [sleep, '8']}\n")
    env = {"FLEETCTL_HOME": str(tmp_path)}
    first = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "nodes",
                              "--playbook", str(slow)], cwd=REPO, env={**__import__("os").environ, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    held = []
    while time.monotonic() < deadline and not held:
        time.sleep(0.05)  # poll until the first run holds its lock (one file per machine)
        held = [p for p in (tmp_path / "locks").glob("*.lock") if p.read_text().strip()]
    lock = held[0]
    second = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(slow), home=tmp_path)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode == 1
    assert "n1 locked by run" in second.stderr
    # a lock file left by a dead run is taken over with a warning
    lock.write_text(json.dumps({"run_id": "dead-run", "pid": 999999999, "started": "then"}))
    third = fleetctl("-i", str(inv), "deploy", "--hosts", "nodes", "--playbook", str(play_ok(tmp_path)), home=tmp_path)
    assert third.returncode == 0, third.stderr
    assert "taking over the stale lock of run dead-run" in third.stderr


def play_ok(tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text("name: ok\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    return p
