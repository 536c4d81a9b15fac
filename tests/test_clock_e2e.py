"""A wrong controller clock (operator trial: a bad RTC before NTP syncs), made real for the CLI
with libfaketime (``faketime``, apt package ``faketime``; .ci/run installs it):

- a run under a clock a year ahead pruned real run records (every record looked old) and then
  was "the newest run" for ``logs``, ``logs --host``, ``logs --follow``, ``report`` and ``runs``;
- a deploy under a clock 400 days behind had its record pruned by the next normal deploy, and
  wrote ``fleetctl_last_success_timestamp_seconds`` 400 days back, without a word.

The rule (fleetctl/util/retention.py, fleetctl/reporting/order.py): "newest" is the order records
were made in, not their ids' times; the newest runs of each class are kept whatever their age; no
record is removed for its age while one is dated later than the clock; one warning line names
both times."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fleet import fleetctl

pytestmark = pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (apt package faketime)")

AHEAD = ("faketime", "2027-09-01 12:00:00")
BEHIND = ("faketime", "-f", "-400d")


def _inv(tmp_path: Path) -> Path:
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w}}\n")
    return inv


def _runs(home: Path) -> set[str]:
    return {p.name for p in (home / "runs").iterdir() if p.is_dir()} if (home / "runs").is_dir() else set()


def _made(home: Path, *args: str, prefix: tuple = (), ok: bool = True):
    """Run the CLI; the result and the id of the one record it made."""
    before = _runs(home)
    res = fleetctl(*args, home=home, prefix=prefix)
    assert res.returncode == 0 or not ok, res.stdout + res.stderr
    (new,) = _runs(home) - before
    return res, new


def _legacy(home: Path, n: int) -> list[str]:
    """``n`` records of ``fleetctl run`` as a right clock wrote them over the last hours (by a
    fleetctl before records were numbered)."""
    now, out = datetime.now(timezone.utc), []
    for i in range(n):
        t = now - timedelta(hours=n - i)
        run_id = t.strftime("%Y%m%dT%H%M%S.") + f"{t.microsecond // 1000:03d}Z-{i:06x}"
        (home / "runs" / run_id / "logs").mkdir(parents=True)
        (home / "runs" / run_id / "run.json").write_text(json.dumps(
            {"run_id": run_id, "kind": "run", "mode": "apply", "status": "ok", "inventory": {"path": "inv.yaml"},
             "hosts": {"me": {"status": "ok"}}, "started": t.isoformat(), "finished": t.isoformat()}, indent=2))
        out.append(run_id)
    return out


def test_a_clock_a_year_ahead_prunes_no_record_and_its_run_is_not_newest_once_the_clock_is_right(tmp_path):
    inv = str(_inv(tmp_path))
    earlier = _legacy(tmp_path, 5)
    earlier += [_made(tmp_path, "-i", inv, "run", "--hosts", "me", "--", "true")[1] for _ in range(2)]
    ahead, future = _made(tmp_path, "-i", inv, "run", "--hosts", "me", "--", "date", "+%Y", prefix=AHEAD)
    assert future.startswith("2027")
    assert _runs(tmp_path) == {*earlier, future}  # every record kept: they only look old to that clock
    warning = [line for line in ahead.stderr.splitlines() if "set ahead" in line]
    assert len(warning) == 1 and "2027-09-01 12:00" in warning[0] and earlier[-1] in warning[0], ahead.stderr
    # the clock set right: the run made now is the newest, whatever the 2027 record's id says
    now_run, latest = _made(tmp_path, "-i", inv, "run", "--hosts", "me", "--", "date", "+%Y")
    assert _runs(tmp_path) == {*earlier, future, latest}
    told = [line for line in now_run.stderr.splitlines() if "clock" in line]
    assert len(told) == 1 and "2027-09-01 12:00" in told[0] and future in told[0], now_run.stderr
    this_year = str(datetime.now(timezone.utc).year)
    log = fleetctl("logs", "--host", "me", home=tmp_path)
    assert log.returncode == 0 and f"run {latest}" in log.stderr and this_year in log.stdout, log.stderr
    assert "2027" not in log.stdout
    follow = fleetctl("logs", "--follow", home=tmp_path, timeout_s=60)
    assert f"run {latest}: ok" in follow.stderr, follow.stderr
    report = fleetctl("report", home=tmp_path)
    assert report.returncode == 0 and f"report of run {latest}" in report.stdout, report.stdout + report.stderr
    listed = json.loads(fleetctl("runs", "--json", home=tmp_path).stdout)
    assert [r["run_id"] for r in listed[:2]] == [latest, future]


def test_a_deploy_under_a_clock_behind_keeps_its_record_and_says_so(tmp_path):
    inv = str(_inv(tmp_path))
    play = tmp_path / "play.yaml"
    play.write_text("name: t\nhosts: all\ngather_facts: false\ntasks:\n  - name: year\n"
                    "    command: {argv: ['date', '+%Y']}\n")
    prom = tmp_path / "fleet.prom"
    deploy = ("-i", inv, "deploy", "--hosts", "me", "--playbook", str(play), "--metrics-file", str(prom))
    _, first = _made(tmp_path, *deploy)
    behind, past = _made(tmp_path, *deploy, prefix=BEHIND)
    assert past < first  # its id is 400 days older than the deploy made before it
    told = [line for line in behind.stderr.splitlines() if "clock" in line]
    assert len(told) == 2, behind.stderr  # the records, the metrics file: one line each
    assert any(first in line and past[:4] in line for line in told), behind.stderr
    assert any("fleetctl_last_success_timestamp_seconds" in line for line in told), behind.stderr
    last = [s.value for f in text_string_to_metric_families(prom.read_text()) for s in f.samples
            if s.name == "fleetctl_last_success_timestamp_seconds"]
    assert last and last[0] < datetime.now(timezone.utc).timestamp() - 300 * 86400  # as the clock said
    log = fleetctl("logs", "--host", "me", home=tmp_path)  # the run made last: the one under the wrong clock
    assert f"run {past}" in log.stderr and past[:4] in log.stdout, log.stderr
    _, latest = _made(tmp_path, *deploy)
    assert _runs(tmp_path) == {first, past, latest}  # not pruned for looking 400 days old
