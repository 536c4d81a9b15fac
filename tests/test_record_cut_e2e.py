"""A run record on a full file system (operator trial): ``FLEETCTL_HOME`` on a 3 MiB tmpfs, two
hosts printing 5.4 MB each. The record observer was dropped with a one-line warning, the logs
ended at ~1.9 MB without a word, run.json stayed ``running`` with no hosts, ``fleetctl logs``
exited 0, and the run said ``ok 2`` with rc 0; the display's notice named ``fleetctl logs RUN
gpu-a`` (the literal word) and repeated hundreds of times.

Now (fleetctl.reporting.recordcut): the run ends 1 with one line naming the folder and its free
space, each cut log ends with a ``==> log cut here`` line, run.json is whole and ``failed``,
``fleetctl logs`` says the log is cut and exits 1, and the display tells each host's gap once,
naming the run, then counts it at the end. Real CLI runs, a real tmpfs (root), local hosts.

Then (operator trial 10's leftovers): the summary line still said ``ok 2, failed 0, unreachable
0`` above the error line, ``fleetctl logs --follow`` never named the cut log, and run.json's
``record_cut`` / ``log_cut`` were not in docs/schema/run.schema.json. Now the summary, ``--json``,
run.json and the follower agree: the cut hosts are ``failed`` with ``log_cut``, the summary ends
``; run record incomplete: 2 host logs cut``, and the follower ends naming each cut log, exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.support.fleet import REPO, fleetctl, fleetctl_read_late, last_run, write_inventory
from tests.support.tiny_ext import tmpfs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")

CHATTY = "head -c 4000000 /dev/urandom | base64 -w 100; echo LAST-LINE"


def test_a_full_runs_folder_cuts_the_record_where_it_says_so_and_fails_the_run(tmp_path):
    hosts = {h: {"ansible_connection": "local", "workdir": str(tmp_path / h)} for h in ("gpu-a", "gpu-z")}
    inv = write_inventory(tmp_path / "hosts.yaml", {"gpus": hosts})
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with tmpfs(tmp_path / "state", "3m") as state:
        # a reader that stopped reading until the run ended: the display drops lines, and says so
        res = fleetctl_read_late("-i", str(inv), "run", "--hosts", "gpu-a,gpu-z", "--", "sh", "-c", CHATTY,
                                 home=state, env=env, timeout_s=120)
        err = res.stderr.splitlines()
        assert res.returncode == 1, res.stderr[-3000:]
        assert "stopped reporting" not in res.stderr
        assert err[-1].startswith(f"fleetctl: error: the run record could not be written: No space left on device in "
                                  f"{state / 'runs'} ("), err[-3:]
        assert " free)" in err[-1] and "gpu-a" in err[-1] and "gpu-z" in err[-1], err[-1]
        # the counts say the record is incomplete, as run.json does: never "ok 2" above the error
        assert err[-2] == "ok 0, failed 2, unreachable 0; run record incomplete: 2 host logs cut", err[-3:]
        run = last_run(state)
        doc = json.loads((run / "run.json").read_text())
        _follows_the_schema(doc)
        assert doc["status"] == "failed" and "No space left on device" in doc["record_cut"], doc.get("status")
        assert set(doc["hosts"]) == {"gpu-a", "gpu-z"}
        for h in hosts:
            assert doc["hosts"][h]["status"] == "failed" and "not kept" in doc["hosts"][h]["log_cut"]
            log = (run / "logs" / f"{h}.log").read_bytes()
            assert b"LAST-LINE" not in log
            last = log.rstrip(b"\n").rsplit(b"\n", 1)[-1]
            assert last.startswith(b"==> log cut here: the run record could not be written (No space left on device; ")
        one = fleetctl("logs", run.name, "gpu-a", home=state, env=env, timeout_s=60)
        assert one.returncode == 1 and f"run {run.name}: gpu-a: log cut: " in one.stderr, one.stderr[-2000:]
        every = fleetctl("logs", run.name, home=state, env=env, timeout_s=60)
        assert every.returncode == 1 and f"run {run.name}: gpu-z: log cut: " in every.stderr, every.stderr[-2000:]
        followed = fleetctl("logs", "--follow", run.name, "--host", "gpu-z", home=state, env=env, timeout_s=60)
        assert followed.returncode == 1, followed.stderr[-2000:]
        assert followed.stderr.splitlines()[-1].startswith(f"run {run.name}: gpu-z: log cut: the run record could "
                                                           f"not be written (No space left on device; "), followed.stderr
        runs = fleetctl("runs", home=state, env=env, timeout_s=60)
        line = next(ln for ln in runs.stdout.splitlines() if run.name in ln)
        assert "failed" in line and "controller gone" not in line and "no hosts" not in line, runs.stdout
        assert not (run / ".reserve").exists()
    notices = [ln for ln in (res.stdout + res.stderr).splitlines() if "not shown here" in ln]
    for h in hosts:  # the display fell behind: told once per host, naming the run, then counted at the end,
        # where the log is not called whole: it was cut (trial 14: "all are in fleetctl logs" of a cut log)
        mine = [ln for ln in notices if f" {h} " in ln or f" of {h} " in ln]
        assert 1 <= len(mine) <= 2 and "line(s)" in mine[-1], mine
        assert "the host's log was cut too: " in mine[-1] and "all are in" not in mine[-1], mine[-1]
        assert all(f"fleetctl logs {run.name} {h}" in ln for ln in mine[:-1]), mine
    assert len(notices) <= 4 and not any("logs RUN " in ln for ln in notices), notices[:5]
    assert "every line a host printed" not in res.stdout + res.stderr  # both logs are cut: no such pointer


def test_a_256_kib_runs_folder_points_to_no_cut_log_as_holding_every_line(tmp_path):
    """Operator trial 14: ``FLEETCTL_HOME`` on a 256 KiB tmpfs, ``run -- seq 1 100000`` on two
    hosts printed "... N line(s) of gpu01 not shown here (the display fell behind; all are in
    fleetctl logs ...)" and "every line a host printed: fleetctl logs ..." of logs that were cut."""
    hosts = {h: {"ansible_connection": "local", "workdir": str(tmp_path / h)} for h in ("gpu01", "gpu02")}
    inv = write_inventory(tmp_path / "hosts.yaml", {"gpus": hosts})
    with tmpfs(tmp_path / "state", "256k") as state:
        # stdout read once the run ended (a reader that stopped reading): lines are dropped, and counted
        res = fleetctl_read_late("-i", str(inv), "run", "--hosts", "gpu01:gpu02", "--", "seq", "1", "100000",
                                 home=state, env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout_s=120)
    out = res.stdout + res.stderr
    assert res.returncode == 1, res.stderr[-3000:]
    assert "run record incomplete: 2 host logs cut" in out, res.stderr[-3000:]
    counts = [ln for ln in out.splitlines() if "line(s) of" in ln and "not shown here" in ln]
    assert counts and all("the host's log was cut too: " in ln and "all are in" not in ln for ln in counts), counts
    assert "every line a host printed" not in out, res.stderr[-3000:]


def _follows_the_schema(doc: dict) -> None:
    """run.json of a cut record is valid against the published schema, which names its cut fields."""
    import jsonschema

    schema = json.loads((REPO / "docs" / "schema" / "run.schema.json").read_text())
    assert schema["properties"]["record_cut"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    host = schema["$defs"]["HostOutcome"]
    assert host["properties"]["log_cut"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert "record_cut:" in schema["description"] and "log_cut:" in host["description"]
    jsonschema.validate(doc, schema)


def test_json_and_a_follower_of_the_live_run_say_the_record_was_cut(tmp_path):
    """``run --json``: each cut host ``failed`` with run.json's ``log_cut``, the same summary line on
    stderr; ``logs --follow`` started while the run goes ends with each cut log named, exit 1."""
    hosts = {h: {"ansible_connection": "local", "workdir": str(tmp_path / h)} for h in ("gpu-a", "gpu-q", "gpu-z")}
    inv = write_inventory(tmp_path / "hosts.yaml", {"gpus": hosts})
    with tmpfs(tmp_path / "state", "3m") as state:
        env = {**os.environ, "FLEETCTL_HOME": str(state), "XDG_CACHE_HOME": str(tmp_path / "cache")}
        # the first host to make the folder prints one line (its log is whole), the others fill the disk
        chat = f'if mkdir {tmp_path / "quiet"} 2>/dev/null; then echo quiet; else {CHATTY}; fi'
        proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--json", "--hosts", "gpus",
                                 "--", "sh", "-c", chat], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, cwd=REPO)
        try:
            deadline = time.monotonic() + 60
            while not ((state / "runs").is_dir() and any(p.is_dir() for p in (state / "runs").iterdir())):
                assert time.monotonic() < deadline and proc.poll() is None, "the run made no record"
                time.sleep(0.02)
            run = last_run(state)
            follow = fleetctl("logs", "--follow", run.name, home=state, env={"XDG_CACHE_HOME": env["XDG_CACHE_HOME"]},
                              timeout_s=90)
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 1, err[-3000:]
        assert follow.returncode == 1, follow.stderr[-2000:]
        record = json.loads((run / "run.json").read_text())
    doc = json.loads(out)
    quiet = [h for h in hosts if "quiet" in doc[h]["stdout"]]
    cut = sorted(set(hosts) - set(quiet))
    assert len(quiet) == 1 and doc[quiet[0]]["status"] == record["hosts"][quiet[0]]["status"] == "ok", doc[quiet[0]]
    assert "log_cut" not in doc[quiet[0]] and "log_cut" not in record["hosts"][quiet[0]]
    tail = follow.stderr.splitlines()[-3:]
    assert tail[0] == f"run {run.name}: failed", tail
    assert [ln.split(": log cut: ")[0] for ln in tail[1:]] == [f"run {run.name}: {h}" for h in cut], tail
    assert err.splitlines()[-2] == "ok 1, failed 2, unreachable 0; run record incomplete: 2 host logs cut", err[-2000:]
    for h in cut:
        assert doc[h]["status"] == record["hosts"][h]["status"] == "failed" and doc[h]["rc"] == 0, doc[h]
        assert doc[h]["log_cut"] == record["hosts"][h]["log_cut"] and "not kept" in doc[h]["log_cut"]
