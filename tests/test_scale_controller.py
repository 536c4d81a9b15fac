"""The controller's work per host stays flat to 10,000 inventory hosts (issue 27), counted, not timed.

Python function calls (cProfile's call counts) and traced memory (tracemalloc's peak) are compared
at two sizes, ten times apart; a step above linear (a per-host list scanned per host or per event,
a pattern matched against every host for every host, a record rewritten per host) shows as a
per-host count that grows with the size. The hosts are an inventory file read by the real loader;
for ``run`` and ``deploy`` they are played by the double of fleetctl's own Connection
(tests/support/fake_connection.py, registered the way a real kind is), so the real CLI, engine,
live display and run record run in this process. bench/scale_double.py measures the same at
10,000 hosts (bench/README.md).
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import pstats
import tracemalloc
from pathlib import Path

import pytest
import yaml

from fleetctl.connection import registry
from tests.support import fake_connection as fake

#: --forks of the deploys measured: a tenth of the larger batch.
DEPLOY_FORKS = 10
#: Per-host counts may grow this much from the small size to the large one (fixed costs spread
#: thinner, so they usually shrink; the slack is for the event loop's scheduling).
SLACK = 1.15


def write_inventory(path: Path, n: int, connection: str | None = None) -> Path:
    hosts = {f"a{i + 1:05d}": {"workdir": f"/w/a{i + 1:05d}", "venv": "/venv",
                               **({"ansible_connection": connection} if connection else {})} for i in range(n)}
    doc = {"all": {"children": {"bench": {"hosts": hosts}, "odd": {"hosts": {h: None for h in list(hosts)[::2]}}}}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def calls_of(fn) -> tuple[int, int]:
    """``(Python calls, traced peak bytes)`` of ``fn()``."""
    prof = cProfile.Profile()
    tracemalloc.start()
    try:
        prof.enable()
        fn()
        prof.disable()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return sum(v[1] for v in pstats.Stats(prof).stats.values()), peak


def test_a_10000_host_inventory_loads_and_matches_patterns_with_linear_work(tmp_path):
    from fleetctl.inventory import load_inventory

    sizes = (1000, 10000)
    got = {}
    for n in sizes:
        inv = write_inventory(tmp_path / f"inv{n}.yaml", n)

        def load_and_select(inv=inv, n=n):
            inventory = load_inventory([str(inv)])
            for pattern in ("bench", "bench:!odd", "a0*1", "bench:&odd", f"a{n:05d}"):
                hosts = inventory.select(pattern)
                assert hosts, pattern
            assert len(inventory.select("bench:!odd")) == n // 2

        got[n] = calls_of(load_and_select)
    small, large = (got[n][0] / n for n in sizes)
    assert large <= small * SLACK, f"calls per host grew from {small:.0f} to {large:.0f}"
    mem_small, mem_large = (got[n][1] / n for n in sizes)
    assert mem_large <= mem_small * SLACK, f"memory per host grew from {mem_small:.0f} to {mem_large:.0f} bytes"


@pytest.fixture
def fake_hosts(monkeypatch, tmp_path):
    monkeypatch.setitem(registry.KINDS, "fake", "tests.support.fake_connection:KIND")
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    fake.HOSTS.clear()
    yield fake.HOSTS
    fake.HOSTS.clear()


def cli(*args: str) -> tuple[int, str]:
    from fleetctl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:  # without standalone mode click returns the exit status rather than raising SystemExit
            rc = int(main(args=list(args), prog_name="fleetctl", standalone_mode=False) or 0)
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return rc, out.getvalue()


PLAY = """\
name: toy
hosts: all
vars:
  src_dir: "{{ workdir }}/src/toy"
tasks:
  - name: upload
    copy: {src: toy, dest: "{{ src_dir }}"}
  - name: build
    build_wheel: {src: "{{ src_dir }}", out_dir: "{{ workdir }}/wheels", check_sass: false,
                  required_build_packages: [setuptools], tool: pip}
    register: build
  - name: install
    pip_install: {wheel: "{{ build.data.wheel }}"}
"""


def _record(home: Path) -> tuple[int, int]:
    """(events.jsonl lines, run.json bytes) of the newest run."""
    run = sorted(p for p in (home / "runs").iterdir() if p.is_dir())[-1]
    return len((run / "events.jsonl").read_text().splitlines()), (run / "run.json").stat().st_size


@pytest.mark.parametrize("command", ["run", "deploy"])
def test_run_and_a_no_change_deploy_cost_the_controller_the_same_per_host_at_ten_times_the_hosts(
        fake_hosts, tmp_path, command):
    sizes = (40, 400) if command == "deploy" else (200, 2000)
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "pyproject.toml").write_text("[project]\nname = 'toy'\nversion = '0.1'\n")
    (tmp_path / "play.yaml").write_text(PLAY)
    got = {}
    for n in sizes:
        fake.HOSTS.clear()
        inv = write_inventory(tmp_path / f"inv{n}.yaml", n, connection="fake")
        for name in yaml.safe_load(inv.read_text())["all"]["children"]["bench"]["hosts"]:
            # each host's own venv and workdir folder ids, as real facts have them: the install
            # targets' claims are looked up per host (they were scanned O(hosts) each)
            fake.HOSTS[name] = fake.own_folders(fake.FakeHost(name, handlers=[fake.python_packaging]))
        argv = ["-i", str(inv)] + (["run", "--hosts", "bench", "--json", "--forks", "50", "--", "true"]
                                   if command == "run" else
                                   ["deploy", "--hosts", "bench", "--playbook", str(tmp_path / "play.yaml"), "--json",
                                    "--forks", str(DEPLOY_FORKS)])
        if command == "deploy":
            assert cli(*argv)[0] == 0  # installs; the measured one changes nothing
            for h in fake.HOSTS.values():
                h.execs.clear()
        result = {}

        def measured(argv=argv, result=result):
            result["rc"], result["out"] = cli(*argv)

        fake.OPEN.update(now=0, peak=0)
        calls, peak = calls_of(measured)
        assert result["rc"] == 0
        if command == "deploy":  # hosts at work at once: forks, whatever the batch (issue 27)
            assert fake.OPEN == {"now": 0, "peak": DEPLOY_FORKS}
        if command == "deploy":
            doc = json.loads(result["out"])["hosts"]
            assert not [t for r in doc.values() for t in r["tasks"] if t["status"] == "changed"]
        assert all(len(h.execs) == 1 for h in fake.HOSTS.values())  # one exec a host: the first command
        events, run_json = _record(tmp_path / "home")
        got[n] = (calls / n, peak / n, events / n, run_json / n)
    (c1, m1, e1, r1), (c2, m2, e2, r2) = (got[n] for n in sizes)
    assert c2 <= c1 * SLACK, f"calls per host grew from {c1:.0f} to {c2:.0f}"
    assert m2 <= m1 * SLACK, f"memory per host grew from {m1:.0f} to {m2:.0f} bytes"
    assert e2 <= e1 * SLACK and r2 <= r1 * SLACK, (got, "the record per host grew")


def test_a_deploy_holds_forks_hosts_at_once_so_its_memory_follows_forks_not_the_batch(fake_hosts, tmp_path):
    """A no-change deploy of 300 hosts with --forks 10 against the same deploy with every host at
    work at once (--forks 300): the first holds 10 connections at once, and its traced peak is
    well under the second's. What a host holds while it is at work (its session, facts, probe
    answers, plan: ~80 KiB a host in issue 27's profile) is let go of once its outcome is in the
    run model, so a batch costs forks hosts' working state plus what the record keeps of every
    host. Before the fix every host of a batch was connected and planned before any applied, and
    --forks changed neither number."""
    n = 300
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "pyproject.toml").write_text("[project]\nname = 'toy'\nversion = '0.1'\n")
    (tmp_path / "play.yaml").write_text(PLAY)
    inv = write_inventory(tmp_path / "inv.yaml", n, connection="fake")
    for name in yaml.safe_load(inv.read_text())["all"]["children"]["bench"]["hosts"]:
        fake.HOSTS[name] = fake.own_folders(fake.FakeHost(name, handlers=[fake.python_packaging]))
    argv = ["-i", str(inv), "deploy", "--hosts", "bench", "--playbook", str(tmp_path / "play.yaml"), "--json"]
    assert cli(*argv, "--forks", "50")[0] == 0  # installs; the measured ones change nothing
    got = {}
    for forks in (10, n):
        fake.OPEN.update(now=0, peak=0)
        tracemalloc.start()
        try:
            rc, _ = cli(*argv, "--forks", str(forks))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert rc == 0
        got[forks] = (fake.OPEN["peak"], peak)
    assert got[10][0] == 10 and got[n][0] == n, got  # connections open at once
    assert got[10][1] < 0.7 * got[n][1], f"the traced peak with 10 forks is {got[10][1] / got[n][1]:.2f} of {n} forks'"


def open_logs(folder: Path) -> int:
    """This process's open descriptors on files in ``folder`` (/proc/self/fd)."""
    import os

    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder) + "/")
        except OSError:
            pass
    return count


def test_the_record_keeps_every_line_of_1000_hosts_with_at_most_256_logs_open_and_each_script_once(tmp_path):
    """1,000 hosts waiting together (as a batch waits for its classes) each print, then print again
    later: every line is in its host's log, in order, while at most MAX_OPEN_LOGS files are open;
    a long probe script in every host's command.started event is written once, in scripts/."""
    from fleetctl.connection.base import OutputLine
    from fleetctl.engine.model import Event, RunModel
    from fleetctl.reporting.record import MAX_OPEN_LOGS, SCRIPT_CHARS, RunRecord

    run = RunModel(kind="deploy")
    record = RunRecord(run, root=tmp_path)
    script = "import json\n" + "x = 1\n" * SCRIPT_CHARS
    names = [f"h{i:04d}" for i in range(1000)]
    for name in names:
        record.event(run, Event(name="host.started", host=name, data={}))
        record.event(run, Event(name="command.started", host=name, data={"task": "t", "argv": ["python3", "-c", script, name]}))
        record.line(run, name, OutputLine("stdout", f"first {name}\n".encode()))
        assert open_logs(tmp_path / run.run_id / "logs") <= MAX_OPEN_LOGS
    for name in names:
        record.line(run, name, OutputLine("stdout", f"second {name}\n".encode()))
        record.event(run, Event(name="host.finished", host=name, data={"status": "ok"}))
    record.close(run)
    folder = tmp_path / run.run_id
    for name in names[::97]:
        assert (folder / "logs" / f"{name}.log").read_bytes() == f"out| first {name}\nout| second {name}\n".encode()
    assert [p.read_text() for p in (folder / "scripts").iterdir()] == [script]
    started = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()
               if '"command.started"' in line]
    assert len(started) == 1000 and started[5]["argv"][2].startswith("@scripts/") and started[5]["argv"][3] == names[5]
