"""A run record on a full file system (operator trial): ``FLEETCTL_HOME`` on a 3 MiB tmpfs, two
hosts printing 5.4 MB each. The record observer was dropped with a one-line warning, the logs
ended at ~1.9 MB without a word, run.json stayed ``running`` with no hosts, ``fleetctl logs``
exited 0, and the run said ``ok 2`` with rc 0; the display's notice named ``fleetctl logs RUN
gpu-a`` (the literal word) and repeated hundreds of times.

Now (fleetctl.reporting.recordcut): the run ends 1 with one line naming the folder and its free
space, each cut log ends with a ``==> log cut here`` line, run.json is whole and ``failed``,
``fleetctl logs`` says the log is cut and exits 1, and the display tells each host's gap once,
naming the run, then counts it at the end. Real CLI runs, a real tmpfs (root), local hosts."""

from __future__ import annotations

import json

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import tmpfs

pytestmark = pytest.mark.skipif(__import__("os").geteuid() != 0, reason="mounts a tmpfs: needs root")

CHATTY = "head -c 4000000 /dev/urandom | base64 -w 100; echo LAST-LINE"


def test_a_full_runs_folder_cuts_the_record_where_it_says_so_and_fails_the_run(tmp_path):
    hosts = {h: {"ansible_connection": "local", "workdir": str(tmp_path / h)} for h in ("gpu-a", "gpu-z")}
    inv = write_inventory(tmp_path / "hosts.yaml", {"gpus": hosts})
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with tmpfs(tmp_path / "state", "3m") as state:
        res = fleetctl("-i", str(inv), "run", "--hosts", "gpu-a,gpu-z", "--", "sh", "-c", CHATTY, home=state, env=env,
                       timeout_s=120)
        err = res.stderr.splitlines()
        assert res.returncode == 1, res.stderr[-3000:]
        assert "stopped reporting" not in res.stderr
        assert err[-1].startswith(f"fleetctl: error: the run record could not be written: No space left on device in "
                                  f"{state / 'runs'} ("), err[-3:]
        assert " free)" in err[-1] and "gpu-a" in err[-1] and "gpu-z" in err[-1], err[-1]
        run = last_run(state)
        doc = json.loads((run / "run.json").read_text())
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
        runs = fleetctl("runs", home=state, env=env, timeout_s=60)
        line = next(ln for ln in runs.stdout.splitlines() if run.name in ln)
        assert "failed" in line and "controller gone" not in line and "no hosts" not in line, runs.stdout
        assert not (run / ".reserve").exists()
    notices = [ln for ln in (res.stdout + res.stderr).splitlines() if "not shown here" in ln]
    for h in hosts:  # the display fell behind: told once per host, then counted at the end, naming the run
        mine = [ln for ln in notices if f"fleetctl logs {run.name} {h})" in ln or f"fleetctl logs {run.name} {h} " in ln]
        assert 1 <= len(mine) <= 2 and "line(s)" in mine[-1], mine
    assert len(notices) <= 4 and not any("logs RUN " in ln for ln in notices), notices[:5]
