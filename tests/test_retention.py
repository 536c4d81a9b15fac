"""Pruning past runs (issue 24): the policy as data (fleetctl/util/retention.py), the run records on the
controller (``fleetctl runs prune``, and at the end of every run), and the per-run folders a deploy
prunes on the host (playbooks/scripts/session_start.py), through the real CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from fleetctl.util.retention import (KEEP_MIN, RetentionPolicy, RunEntry, clock_disagrees, policy_from_env, run_time,
                                     runs_to_prune)
from fleetctl.errors import InputError
from fleetctl.reporting.order import ENDED, stamp
from fleetctl.reporting.prune import prune_runs
from tests.support.fleet import REPO, fleetctl, last_run

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def rid(t: datetime, n: int = 0) -> str:
    return t.strftime("%Y%m%dT%H%M%S.") + f"{t.microsecond // 1000:03d}Z-{n:06x}"


def entry(hours_ago: float, **kw) -> RunEntry:
    t = NOW - timedelta(hours=hours_ago)
    return RunEntry(run_id=rid(t, int(hours_ago * 1000)), started=t, **kw)


def test_the_policy_keeps_the_newest_n_and_none_older_than_d_days():
    runs = [entry(h) for h in range(10)]
    gone = runs_to_prune(runs, RetentionPolicy(keep_runs=4, keep_days=30), NOW)
    assert gone == sorted(r.run_id for r in runs[4:])
    old = [entry(24 * 40), *(entry(h) for h in range(1, KEEP_MIN + 1))]  # past the newest KEEP_MIN: its age counts
    assert runs_to_prune(old, RetentionPolicy(keep_runs=50, keep_days=30), NOW) == [old[0].run_id]
    assert run_time(rid(NOW)) == NOW


def test_never_a_run_in_progress_nor_the_last_success_of_each_play():
    play_a, play_b = ("deploy", "a.yaml", "inv"), ("deploy", "b.yaml", "inv")
    runs = [entry(0, play=play_a), entry(1, play=play_a, succeeded=True), entry(2, play=play_a, succeeded=True),
            entry(3, play=play_b, succeeded=True), entry(24 * 90, in_progress=True), entry(4, play=play_b)]
    gone = runs_to_prune(runs, RetentionPolicy(keep_runs=1, keep_days=30), NOW)
    # kept: the newest; a's newest success (not the older one); b's only success; the one in progress
    assert gone == sorted([runs[2].run_id, runs[5].run_id])
    unknown = RunEntry(run_id="x", started=None)
    assert runs_to_prune([entry(0), unknown], RetentionPolicy(keep_runs=5, keep_days=1), NOW) == []


def test_newest_is_by_end_so_the_run_that_just_ended_is_kept_and_runs_in_progress_push_nothing_out():
    """Operator trial: a long ad-hoc run, started before 3 quick ones (FLEETCTL_KEEP_RUNS=3), was
    removed by its own prune when it ended; ranked by the order runs ended, it is the newest."""
    policy = RetentionPolicy(keep_runs=3, keep_days=30)
    long_run = entry(1, kind="run", seq=1, ended=8)  # started first, ended last
    quick = [entry(0.5 - i / 10, kind="run", seq=2 + 2 * i, ended=3 + 2 * i) for i in range(3)]
    gone = runs_to_prune([long_run, *quick], policy, NOW)
    assert gone == [quick[0].run_id]  # the quick run that ended first goes, not the one that just ended
    # runs in progress are never removed and take no place among the newest: the run that just
    # ended stays even when keep_runs (1) runs of its class, started after it, still run
    live = [entry(0.1 - i / 100, kind="run", seq=10 + i, in_progress=True) for i in range(3)]
    ended = entry(0.2, kind="run", seq=9, ended=13)
    older = entry(0.3, kind="run", seq=5, ended=6)
    assert runs_to_prune([*live, ended, older], RetentionPolicy(keep_runs=1), NOW) == [older.run_id]
    # a record without an end number (an older fleetctl, a killed controller) ended when it was made
    legacy = entry(0.4, kind="run", seq=7)
    assert runs_to_prune([legacy, older], RetentionPolicy(keep_runs=1), NOW) == [older.run_id]


def test_the_prune_at_a_runs_end_spares_that_run_even_when_others_ended_since(tmp_path):
    """Two runs ending at once (FLEETCTL_KEEP_RUNS=1): the one that ended first prunes after the
    other ended; its own prune keeps its record all the same (a later prune removes it)."""
    runs = tmp_path / "runs"
    now = datetime.now(timezone.utc)
    first, second = rid(now - timedelta(seconds=2), 1), rid(now - timedelta(seconds=1), 2)
    for run_id in (first, second):
        _record(runs, run_id, status="ok", kind="run")
        stamp(runs / run_id, runs)
    for run_id in (first, second):
        stamp(runs / run_id, runs, ENDED)
    assert prune_runs(RetentionPolicy(keep_runs=1), root=runs, spare=frozenset({first})).removed == []
    assert prune_runs(RetentionPolicy(keep_runs=1), root=runs).removed == [first]


def test_a_long_adhoc_run_keeps_its_record_past_quick_runs_that_started_after_it(tmp_path):
    """The operator trial's commands: a long ``fleetctl run`` beside 3 quick ones with
    FLEETCTL_KEEP_RUNS=3 is listed by ``fleetctl runs`` and its log read by ``fleetctl logs --host``
    after it ends (it was removed by its own prune)."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    h1: {{ansible_connection: local, workdir: {tmp_path}/w1}}\n"
                   f"    me: {{ansible_connection: local, workdir: {tmp_path}/w2}}\n")
    go = tmp_path / "go"
    env = {"FLEETCTL_KEEP_RUNS": "3"}
    full = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"), **env}
    long_run = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", "h1", "--", "sh",
                                 "-c", f"echo important burn-in result; while [ ! -e {go} ]; do sleep 0.05; done"],
                                cwd=REPO, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "runs").glob("*/logs/h1.log")) or "important" not in \
                next((tmp_path / "runs").glob("*/logs/h1.log")).read_text():
            assert long_run.poll() is None and time.monotonic() < deadline, long_run.communicate()
            time.sleep(0.05)
        long_id = next((tmp_path / "runs").glob("*/logs/h1.log")).parents[1].name
        for _ in range(3):
            assert fleetctl("-i", str(inv), "run", "--hosts", "me", "--", "true", home=tmp_path,
                            env=env).returncode == 0
        go.touch()
        out, err = long_run.communicate(timeout=60)
    finally:
        go.touch()
        if long_run.poll() is None:
            long_run.kill()
            long_run.communicate()
    assert long_run.returncode == 0, out + err
    listed = fleetctl("runs", "--json", home=tmp_path, env=env)
    assert long_id in listed.stdout, listed.stdout
    log = fleetctl("logs", "--host", "h1", home=tmp_path, env=env)
    assert log.returncode == 0 and "important burn-in result" in log.stdout, log.stdout + log.stderr
    # kept: the long run (ended last) and the 2 quick runs that ended last
    assert len([p for p in (tmp_path / "runs").iterdir() if p.is_dir()]) == 3


def test_a_wrong_clock_removes_no_record_for_its_age():
    """Operator trial (fleetctl/util/retention.py): ages read from a wrong clock remove nothing."""
    policy = RetentionPolicy(keep_runs=50, keep_days=30)
    made = [RunEntry(run_id=e.run_id, started=e.started, seq=i) for i, e in enumerate(entry(h) for h in range(5, 0, -1))]
    ahead = NOW + timedelta(days=270)  # a clock a year ahead: every record looks 9 months old
    assert runs_to_prune(made, policy, ahead) == []
    past = NOW - timedelta(days=400)  # a run made under a clock 400 days behind, made last
    behind = RunEntry(run_id=rid(past, 7), started=past, seq=len(made))
    assert runs_to_prune([*made, behind], policy, NOW) == []  # among the newest: not "old"
    # while a record is dated later than the clock, no record goes for its age, not even past the floor
    many = [*(entry(24 * 40 + h) for h in range(KEEP_MIN + 3)), entry(-24 * 270)]
    assert runs_to_prune(many, policy, NOW) == []
    assert len(runs_to_prune(many[:-1], policy, NOW)) == 3  # a clock that agrees: the age counts past the floor
    assert clock_disagrees(many, policy, NOW).startswith("the controller's clock says 2026-12-01 12:00:00 UTC, ")
    assert "over 30 days after" in clock_disagrees([*made, RunEntry(run_id=rid(ahead), started=ahead, seq=9)],
                                                  policy, ahead)
    assert clock_disagrees(made, policy, NOW) is None


@pytest.mark.parametrize(("env", "message"), [
    ({"FLEETCTL_KEEP_RUNS": "0"}, "FLEETCTL_KEEP_RUNS: want a whole number of runs >= 1, got '0'"),
    ({"FLEETCTL_KEEP_RUNS": "ten"}, "FLEETCTL_KEEP_RUNS"),
    ({"FLEETCTL_KEEP_DAYS": "nan"}, "FLEETCTL_KEEP_DAYS: want a positive number of days, got 'nan'"),
])
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        policy_from_env(env)
    assert policy_from_env({}) == RetentionPolicy(50, 30.0)


def _record(runs: Path, run_id: str, *, status: str = "failed", playbook: str = "p.yaml", **extra) -> None:
    folder = runs / run_id
    (folder / "logs").mkdir(parents=True)
    doc = {"run_id": run_id, "kind": "deploy", "mode": "apply", "status": status, "playbook": playbook,
           "inventory": {"path": "inv.yaml"}, "hosts": {}, **extra}
    (folder / "run.json").write_text(json.dumps(doc))
    (folder / "logs" / "h.log").write_text("out| x\n")


def test_runs_prune_on_the_controller_keeps_what_it_must(tmp_path):
    runs = tmp_path / "runs"
    now = datetime.now(timezone.utc)
    ids = [rid(now - timedelta(minutes=100 - i), i) for i in range(60)]
    for run_id in ids:
        _record(runs, run_id)
    _record(runs, rid(now - timedelta(days=60), 900), status="ok", playbook="only-good.yaml")  # a play's last success
    live = rid(now - timedelta(days=61), 901)  # in progress: its controller (this test) is alive
    _record(runs, live, status="running", controller=socket.gethostname(), controller_pid=os.getpid())
    old_good = rid(now - timedelta(days=62), 902)
    _record(runs, old_good, status="ok")  # p.yaml succeeded later? no: this is p.yaml's last success too
    (runs / ".retry-abc.json").write_text("{}")
    dry = fleetctl("runs", "prune", "--keep", "10", "--dry-run", home=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("would remove ") == 51 and len(list(runs.iterdir())) == 64
    res = fleetctl("runs", "prune", "--keep", "10", home=tmp_path)
    assert res.returncode == 0, res.stderr
    left = sorted(p.name for p in runs.iterdir())
    assert left == sorted([*ids[-10:], rid(now - timedelta(days=60), 900), live, old_good, ".retry-abc.json"])
    assert "removed 50 run(s), kept 13" in res.stdout
    assert fleetctl("runs", "prune", "--keep", "0", home=tmp_path).returncode == 2
    # by age: runs older than a day go (but the protected ones)
    res = fleetctl("runs", "prune", "--older-than", "1", home=tmp_path)
    assert sorted(p.name for p in runs.iterdir()) == sorted([*ids[-10:], rid(now - timedelta(days=60), 900), live,
                                                             old_good, ".retry-abc.json"])


def test_every_run_prunes_the_records_when_it_ends(tmp_path):
    runs = tmp_path / "runs"
    now = datetime.now(timezone.utc)
    for i in range(8):
        _record(runs, rid(now - timedelta(hours=9 - i), i))
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w}}\n")
    res = fleetctl("-i", str(inv), "run", "--hosts", "me", "--", "true", home=tmp_path,
                   env={"FLEETCTL_KEEP_RUNS": "3"})
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in runs.iterdir() if p.is_dir())
    # per class: this ad-hoc run, and the 3 newest deploys (ad-hoc runs never push deploys out)
    assert len(names) == 4 and names[-1] == last_run(tmp_path).name and names[:3] == sorted(
        rid(now - timedelta(hours=9 - i), i) for i in range(5, 8))
    bad = fleetctl("-i", str(inv), "run", "--hosts", "me", "--", "true", home=tmp_path,
                   env={"FLEETCTL_KEEP_DAYS": "-1"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "FLEETCTL_KEEP_DAYS" in bad.stderr


def test_a_deploy_prunes_the_run_folders_on_the_host(tmp_path):
    work = tmp_path / "w"
    host_runs = work / "runs"
    now = time.time()
    old = [rid(datetime.fromtimestamp(now - 86400 * (40 + i), timezone.utc), i) for i in range(3)]
    recent = [rid(datetime.fromtimestamp(now - 7200 - 60 * i, timezone.utc), 100 + i) for i in range(6)]
    busy = rid(datetime.fromtimestamp(now - 86400 * 50, timezone.utc), 200)  # changed a minute ago: in use
    for name in [*old, *recent, busy]:
        (host_runs / name / "scripts").mkdir(parents=True)
    for name in [*old, *recent]:
        os.utime(host_runs / name, (now - 7200, now - 7200))
    (host_runs / "not-a-run").mkdir()
    stale_tmp, recent_tmp = work / "tmp" / "0123456789abcdef", work / "tmp" / "fedcba9876543210"
    (stale_tmp / "nvcc").mkdir(parents=True)
    os.utime(stale_tmp, (now - 7200, now - 7200))  # a killed build's TMPDIR
    # a build SIGTERMed a minute ago (new-user trial): pip's tmpXXXX build tree and nvcc's tmpxft_* files
    # in its TMPDIR; under the deploy lock no build of this workdir runs, so it goes too
    (recent_tmp / "tmpab12cd34" / "build").mkdir(parents=True)
    (recent_tmp / "tmpxft_0000abcd_00000000-6_kernel.cudafe1.cpp").write_text("x" * 4096)
    elsewhere = tmp_path / "not-ours"
    (elsewhere / "keep").mkdir(parents=True)
    (work / "tmp" / "link").symlink_to(elsewhere)  # a link is never followed nor removed
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {work}, keep_runs: 4}}\n")
    play = tmp_path / "play.yaml"
    play.write_text("name: t\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    # verify-like runs (no deploy lock) prune nothing on the host
    assert fleetctl("-i", str(inv), "run", "--hosts", "me", "--", "true", home=tmp_path).returncode == 0
    assert all((host_runs / n).exists() for n in old)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    this = last_run(tmp_path).name
    left = {p.name for p in host_runs.iterdir()}
    assert this in left and busy in left and "not-a-run" in left
    assert not any(n in left for n in old)  # past the policy
    kept_recent = sorted(recent)[-2:]  # 4 runs: this deploy, the `run` before it, the 2 newest of these
    assert {n for n in left if n in recent} == set(kept_recent)
    assert not stale_tmp.exists() and not recent_tmp.exists()
    assert (work / "tmp" / "link").is_symlink() and (elsewhere / "keep").is_dir()


def test_each_class_keeps_its_newest_n_and_pinned_runs_and_each_plays_last_failure_stay():
    play = ("deploy", "p.yaml", "inv.yaml")
    failed_deploy = entry(10, kind="deploy", failed=True, play=play)
    older_failure = entry(11, kind="deploy", failed=True, play=play)
    pinned = entry(12, kind="deploy", failed=True, play=("deploy", "other.yaml", "inv.yaml"))
    adhoc = [entry(h, kind=k, play=(k, None, "inv.yaml"), succeeded=True)
             for h, k in zip(range(1, 9), ["run", "facts", "copy", "fetch"] * 2)]
    verifies = [entry(20 + h, kind="verify", failed=True, play=("verify", "v.yaml", "inv.yaml")) for h in range(3)]
    unknown = [entry(30 + h) for h in range(3)]
    runs = [failed_deploy, older_failure, pinned, *adhoc, *verifies, *unknown]
    gone = runs_to_prune(runs, RetentionPolicy(keep_runs=1, keep_days=30), NOW, pinned={pinned.run_id})
    kept = {r.run_id for r in runs} - set(gone)
    # playbook runs are counted apart from the 8 newer ad-hoc runs: the failed deploy stays
    assert failed_deploy.run_id in kept and pinned.run_id in kept
    assert older_failure.run_id in gone  # past the newest playbook run, not the play's last failure
    # ad-hoc: its newest and each ad-hoc play's last success
    assert {r.run_id for r in adhoc[4:]} <= set(gone) and {r.run_id for r in adhoc[:4]} <= kept
    assert verifies[0].run_id in kept and {verifies[1].run_id, verifies[2].run_id} <= set(gone)
    assert [r.run_id for r in unknown if r.run_id in kept] == [unknown[0].run_id]
    # a plan (not applied) that failed is not a failure to keep
    plan = entry(40, kind="deploy", play=("deploy", "q.yaml", "inv.yaml"))
    assert plan.run_id in runs_to_prune([*runs, plan], RetentionPolicy(keep_runs=1), NOW)


def test_a_notebook_loop_of_adhoc_runs_never_removes_a_failed_deploy_nor_its_retry_set(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w}}\n")
    play = tmp_path / "play.yaml"
    play.write_text("name: t\nhosts: all\ngather_facts: false\ntasks:\n"
                    "  - name: build\n    command: {argv: ['sh', '-c', 'echo build-log-line; exit 3']}\n")
    env = {"FLEETCTL_KEEP_RUNS": "2"}
    dep = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(play), home=tmp_path, env=env)
    assert dep.returncode != 0
    failed = last_run(tmp_path).name
    for _ in range(4):  # the loop: more ad-hoc runs than FLEETCTL_KEEP_RUNS
        assert fleetctl("-i", str(inv), "run", "--hosts", "me", "--", "true", home=tmp_path,
                        env=env).returncode == 0
    runs = tmp_path / "runs"
    assert len([p for p in runs.iterdir() if p.is_dir()]) == 3  # 2 ad-hoc + the deploy
    log = fleetctl("logs", failed, "me", home=tmp_path)
    assert log.returncode == 1 and "build-log-line" in log.stdout  # the log is kept; logs RUN HOST exits by its status
    retry = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(play), "--retry-failed",
                     failed, "--plan", home=tmp_path, env=env)
    assert "no run" not in retry.stderr and retry.returncode == 0, retry.stdout + retry.stderr
    # the run the retry set points to stays even when a newer failure of its play exists
    retry_sets = list(runs.glob(".retry-*.json"))
    assert [json.loads(p.read_text())["run_id"] for p in retry_sets] == [failed]
    doc = json.loads((runs / failed / "run.json").read_text())
    newer = rid(datetime.now(timezone.utc) + timedelta(seconds=5), 0xfff0)
    later = rid(datetime.now(timezone.utc) + timedelta(seconds=6), 0xfff1)
    _record(runs, newer, playbook=doc["playbook"], inventory=doc["inventory"])
    _record(runs, later, playbook="x.yaml")
    for run_id in (newer, later):  # made after the real runs, as a run numbers its record (reporting.order)
        stamp(runs / run_id, runs)
    assert fleetctl("runs", "prune", "--keep", "1", home=tmp_path).returncode == 0
    assert (runs / failed / "logs").is_dir()
    retry_sets[0].unlink()
    assert fleetctl("runs", "prune", "--keep", "1", home=tmp_path).returncode == 0
    assert not (runs / failed).exists()  # the policy does remove it once nothing points to it


def test_a_large_run_record_is_pruned_by_its_head_without_parsing_its_hosts(tmp_path):
    """A 10,000-host run.json is 60 MB (some 300 MB as Python objects) and every run's end prunes
    by every kept record: a record of at least BIG_BYTES is read by its top-level fields alone,
    which say what the whole file says; a file of another layout is read whole."""
    from fleetctl.engine.model import RunModel
    from fleetctl.reporting.prune import BIG_BYTES, record_head
    from fleetctl.reporting.record import RunRecord

    run = RunModel(kind="deploy", playbook='/p/a "b".yaml', status="ok")
    run.inventory = {"path": "/i/inv.yaml", "hosts": {f"h{i:05d}": {"venv": "/v" * 40} for i in range(3000)}}
    for i in range(3000):
        out = run.host(f"h{i:05d}")
        out.status, out.facts = "ok", {"gpus": [{"name": "NVIDIA H200", "compute_cap": "9.0"}] * 4, "notes": "x" * 80}
    record = RunRecord(run, root=tmp_path)
    record.close(run)
    path = tmp_path / run.run_id / "run.json"
    assert path.stat().st_size >= BIG_BYTES
    whole = json.loads(path.read_text())
    head = record_head(path)
    assert "hosts" not in head
    assert {k: whole[k] for k in head if k != "inventory"} == {k: v for k, v in head.items() if k != "inventory"}
    assert head["inventory"] == {"path": "/i/inv.yaml"} and head["status"] == "ok" and head["playbook"] == '/p/a "b".yaml'
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(whole))  # one line: no top-level field found by its indentation
    assert record_head(compact) == whole
