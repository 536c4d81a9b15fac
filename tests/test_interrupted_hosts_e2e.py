"""No host of an ended run stays ``running`` (fresh operator's trial): a run interrupted through
the CLI's signal handling records every host it cut off as ``interrupted`` (README: "hosts a
Ctrl-C stopped are counted interrupted"), whichever command ran (a playbook's batches had it,
``run``/``facts``/``copy`` did not); and a controller killed without a word (a Python script's
deploy, SIGTERM with no handler) is read as ``interrupted (controller gone)`` with its hosts still
``running`` read as ``interrupted`` and its failures counted from the hosts' statuses (its
``failed_hosts`` is written only at the end). Real fleetctl processes, real signals, ``local``
hosts (each its own workdir)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_faults_e2e import wait_for


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _hosts(home: Path) -> dict:
    try:
        return json.loads((last_run(home) / "run.json").read_text()).get("hosts") or {}
    except (OSError, ValueError, IndexError):
        return {}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def test_sigterm_during_an_adhoc_run_records_each_host_in_progress_as_interrupted(tmp_path):
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu": {
        h: {"ansible_connection": "local", "workdir": str(tmp_path / f"w-{h}")} for h in ("g01", "g02")}})
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    mark = tmp_path / "started"  # each host's command adds a line; it prints nothing (a hung login shell)
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", "gpu", "--",
                             "sh", "-c", f"echo $$ >> {mark}; exec sleep 60"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len(_read(mark).splitlines()) == 2, 60), "the commands did not start"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err, err[-2000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["status"] == "interrupted"
    assert {h: o["status"] for h, o in record["hosts"].items()} == {"g01": "interrupted", "g02": "interrupted"}
    assert sorted(record["failed_hosts"]) == ["g01", "g02"]  # the retry set takes them
    logs = fleetctl("logs", record["run_id"], home=tmp_path, timeout_s=60)
    assert logs.stdout.splitlines() == ["g01: interrupted: run interrupted", "g02: interrupted: run interrupted"], \
        logs.stdout + logs.stderr
    runs = fleetctl("runs", home=tmp_path, timeout_s=60)
    assert "run              interrupted  2 hosts  0 failed  2 interrupted" in runs.stdout, runs.stdout


def test_a_killed_api_deploy_is_read_with_its_hosts_final_statuses(tmp_path):
    hosts = {"g01": "echo up; exec sleep 60", "g02": "echo no; exit 3", "g03": "echo no; exit 4"}
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu": {
        h: {"ansible_connection": "local", "workdir": str(tmp_path / f"w-{h}"), "script": s}
        for h, s in hosts.items()}})
    play = tmp_path / "p.yaml"
    play.write_text("name: q\nhosts: all\ngather_facts: false\ntasks:\n"
                    "  - name: t\n    command: {argv: [sh, -c, '{{ script }}']}\n")
    script = textwrap.dedent(f"""
        from fleetctl.api import Fleet
        Fleet.from_inventory({str(inv)!r}).select("gpu").deploy({str(play)!r}, forks=3)
    """)
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def ready() -> bool:  # g02, g03 failed and on disk; g01's command under way
            st = {h: o.get("status") for h, o in _hosts(tmp_path).items()}
            return st.get("g02") == st.get("g03") == "failed" and b"out| up\n" in _read(
                last_run(tmp_path) / "logs" / "g01.log")
        assert wait_for(ready, 60), proc.stderr.read() if proc.poll() is not None else _hosts(tmp_path)
        proc.send_signal(signal.SIGTERM)  # no handler in a script: the controller dies without a word
        proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == -signal.SIGTERM
    run_id = last_run(tmp_path).name
    assert json.loads((last_run(tmp_path) / "run.json").read_text())["status"] == "running"  # as it was left
    runs = fleetctl("runs", "--json", home=tmp_path, timeout_s=60)
    summary = json.loads(runs.stdout)[0]
    assert (summary["status"], summary["hosts"], summary["failed"], summary["interrupted"]) == \
        ("interrupted (controller gone)", 3, 2, 1), summary
    show = fleetctl("runs", "show", run_id, home=tmp_path, timeout_s=60)
    rows = {line.split()[0]: line.split()[1] for line in show.stdout.splitlines() if line.startswith("g0")}
    assert rows == {"g01": "interrupted", "g02": "failed", "g03": "failed"}, show.stdout


def test_sigterm_during_facts_with_a_hung_login_shell_records_that_host_interrupted(sshd_farm, tmp_path):
    """The trial's case: ``timeout 150 fleetctl facts`` with one host's login shell hung (its
    ``~/.bashrc`` sleeps): g01 answers, g02 prints nothing; the SIGTERM leaves g02 interrupted."""
    from tests.test_login_stall_e2e import SlowRc

    host = sshd_farm.start("int-facts", shell="bash")
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu": {
        "g01": {"ansible_connection": "local", "workdir": str(tmp_path / "w-g01")},
        "g02": host.inventory_vars(sshd_farm.known_hosts)}})
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with SlowRc(host, "bash", "sleep 60\n"):
        proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "facts", "--hosts", "gpu"],
                                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            def ready() -> bool:  # g01 done and on disk; g02 under way
                st = {h: o.get("status") for h, o in _hosts(tmp_path).items()}
                return st.get("g01") == "ok" and st.get("g02") == "running"
            assert wait_for(ready, 60), proc.stderr.read() if proc.poll() is not None else _hosts(tmp_path)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            _stop(proc)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err, err[-2000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert (record["status"], record["hosts"]["g01"]["status"], record["hosts"]["g02"]["status"]) == \
        ("interrupted", "ok", "interrupted")
    logs = fleetctl("logs", record["run_id"], home=tmp_path, timeout_s=60)
    assert "g02: interrupted: run interrupted" in logs.stdout.splitlines(), logs.stdout + logs.stderr
