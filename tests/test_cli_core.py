"""The command line's own rules, through the real CLI on the local connection (no SSH needed):
unknown options before ``--``, per-command help, tags, ``-v``, and that dry runs and plans are
recorded as such."""

from __future__ import annotations

import json
import textwrap

from tests.support.fleet import fleetctl, last_run

PLAY = """
name: tagged
hosts: all
tasks:
  - name: first
    command: {argv: [echo, one]}
    register: build
    tags: [build]
  - name: second
    command: {argv: [echo, "{{ build.stdout | default('no build') }}"]}
    tags: [install]
"""


def write(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me:\n      ansible_connection: local\n      workdir: {tmp_path}/work\n")
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY))
    return inv, play


def test_an_unknown_option_before_the_double_dash_is_refused_not_run(tmp_path):
    inv, _ = write(tmp_path)
    res = fleetctl("-i", str(inv), "run", "--hosts", "me", "--forsk", "10", "--", "touch", str(tmp_path / "ran"),
                   home=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and "--forsk" in res.stderr and "--forks" in res.stderr
    assert not (tmp_path / "ran").exists()
    ok = fleetctl("-i", str(inv), "run", "--hosts", "me", "--", "sh", "-c", "echo --forsk", home=tmp_path)
    assert ok.returncode == 0 and "me | --forsk" in ok.stdout


def test_verify_help_lists_only_what_verify_uses():
    res = fleetctl("verify", "--help", home=None or __import__("pathlib").Path("/tmp"))
    assert res.returncode == 0
    for absent in ("--build", "--force", "--serial", "--retry-failed", "--tags"):
        assert absent not in res.stdout, absent
    for present in ("--hosts", "--playbook", "--json", "--dry-run", "--plan"):
        assert present in res.stdout, present


def test_a_tag_no_task_has_is_refused_with_a_did_you_mean(tmp_path):
    inv, play = write(tmp_path)
    res = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", "--tags", "instal",
                   home=tmp_path)
    assert res.returncode == 2
    assert "no task has the tag 'instal'" in res.stderr and "did you mean 'install'" in res.stderr
    assert not (tmp_path / "runs").exists()


def test_tags_run_only_their_tasks_and_the_others_are_planned(tmp_path):
    inv, play = write(tmp_path)
    res = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", "--tags", "install", "--json",
                   home=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    tasks = {t["name"]: t for t in json.loads(res.stdout)["hosts"]["me"]["tasks"]}
    assert tasks["first"]["status"] == "skipped" and tasks["first"]["selected"] is False
    assert tasks["second"]["status"] == "changed"
    log = (last_run(tmp_path) / "logs" / "me.log").read_bytes()
    assert b"out| one" not in log  # the build-tagged command was planned, never run
    # what it registers is not a made-up empty stdout: absent, as in Ansible, so the default applies
    assert b"out| no build" in log


def test_verbose_adds_diagnostics_on_stderr(tmp_path):
    inv, play = write(tmp_path)
    quiet = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", home=tmp_path)
    loud = fleetctl("-i", str(inv), "-v", "deploy", "--playbook", str(play), "--hosts", "me", home=tmp_path)
    louder = fleetctl("-i", str(inv), "-vv", "deploy", "--playbook", str(play), "--hosts", "me", home=tmp_path)
    assert quiet.returncode == loud.returncode == louder.returncode == 0
    assert "task.finished" not in quiet.stderr
    assert "task.finished" in loud.stderr and "command.started" not in loud.stderr
    assert "command.started" in louder.stderr


def test_dry_runs_and_plans_are_listed_as_such(tmp_path):
    inv, play = write(tmp_path)
    assert fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", "--dry-run",
                    home=tmp_path).returncode == 0
    assert fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", "--plan",
                    home=tmp_path).returncode == 0
    assert fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", home=tmp_path).returncode == 0
    runs = json.loads(fleetctl("runs", "--json", home=tmp_path).stdout)
    assert [r["mode"] for r in runs] == ["apply", "plan", "dry-run"]
    listing = fleetctl("runs", home=tmp_path).stdout
    assert "deploy (dry-run)" in listing and "deploy (plan)" in listing
    assert "no runs yet" in fleetctl("runs", home=tmp_path / "empty").stdout


def test_the_published_schemas_are_current_and_real_records_follow_them(tmp_path):
    import jsonschema

    from fleetctl.reporting.schema import events_schema, run_schema
    from tests.support.fleet import REPO

    docs = REPO / "docs" / "schema"
    assert json.loads((docs / "run.schema.json").read_text()) == json.loads(json.dumps(run_schema())), \
        "docs/schema is stale: python -m fleetctl.reporting.schema docs/schema"
    assert json.loads((docs / "events.schema.json").read_text()) == json.loads(json.dumps(events_schema()))
    inv, play = write(tmp_path)
    assert fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", home=tmp_path).returncode == 0
    run_dir = last_run(tmp_path)
    jsonschema.validate(json.loads((run_dir / "run.json").read_text()), run_schema())
    names = set()
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        jsonschema.validate(event, events_schema())
        names.add(event["event"])
    assert {"run.started", "host.started", "task.started", "task.finished", "command.started", "run.finished"} <= names


def test_retry_set_is_kept_per_inventory_and_playbook(tmp_path):
    """A failed deploy on inventory A, then a successful run of another play (inventory B, or A's
    verify-like playbook): ``--retry-failed`` on A's play still retries A's failed host, and only
    a run of that play replaces its retry set (as Ansible keeps one .retry file per playbook)."""
    flag = tmp_path / "fixed"
    inv_a, inv_b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    inv_a.write_text(f"all:\n  hosts:\n    a1: {{ansible_connection: local, workdir: {tmp_path}/wa1}}\n"
                     f"    a2: {{ansible_connection: local, workdir: {tmp_path}/wa2}}\n")
    inv_b.write_text(f"all:\n  hosts:\n    b1: {{ansible_connection: local, workdir: {tmp_path}/wb1}}\n")
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text("name: deploy\nhosts: all\ngather_facts: false\ntasks:\n  - name: needs the fix on a2\n"
                      "    command: {argv: [sh, -c, 'test \"$0\" != a2 || test -e \"$1\"', "
                      "'{{ host }}', " + json.dumps(str(flag)) + "]}\n")
    check = tmp_path / "check.yaml"
    check.write_text("name: check\nhosts: all\ngather_facts: false\ntasks:\n  - name: ok\n"
                     "    command: {argv: ['true']}\n")

    first = fleetctl("-i", str(inv_a), "deploy", "--hosts", "all", "--playbook", str(deploy), home=tmp_path)
    assert first.returncode == 1, first.stderr
    assert json.loads((last_run(tmp_path) / "run.json").read_text())["failed_hosts"] == ["a2"]
    other_inv = fleetctl("-i", str(inv_b), "deploy", "--hosts", "all", "--playbook", str(deploy), home=tmp_path)
    assert other_inv.returncode == 0, other_inv.stderr
    other_play = fleetctl("-i", str(inv_a), "deploy", "--hosts", "all", "--playbook", str(check), home=tmp_path)
    assert other_play.returncode == 0, other_play.stderr

    flag.touch()
    retry = fleetctl("-i", str(inv_a), "deploy", "--hosts", "all", "--playbook", str(deploy), "--retry-failed",
                     home=tmp_path)
    assert retry.returncode == 0, retry.stderr
    assert sorted(json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]) == ["a2"]
    again = fleetctl("-i", str(inv_a), "deploy", "--hosts", "all", "--playbook", str(deploy), "--retry-failed",
                     home=tmp_path)
    assert again.returncode == 0 and "nothing to retry" in again.stderr
    # a play never run has no retry set
    never = fleetctl("-i", str(inv_b), "deploy", "--hosts", "all", "--playbook", str(check), "--retry-failed",
                     home=tmp_path)
    assert never.returncode == 2 and never.stderr.count("\n") == 1
    assert f"no run of {check} on this inventory has left a retry set" in never.stderr


def test_a_run_whose_controller_was_sigkilled_is_shown_interrupted(tmp_path):
    """A real controller killed with SIGKILL cannot finish its record: while it lives the run is
    'running'; once its process is gone from this machine, listings and the report say
    'interrupted (controller gone)' (the record itself is left as it was)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.support.fleet import REPO

    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/work}}\n")
    started = tmp_path / "started"
    play = tmp_path / "slow.yaml"
    play.write_text("name: slow\nhosts: all\ngather_facts: false\ntasks:\n  - name: wait\n"
                    f"    command: {{argv: [sh, -c, 'touch {started}; exec sleep 600']}}\n")
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "me",
                             "--playbook", str(play)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():  # the controller is in its task: the record says running
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        alive = json.loads(fleetctl("runs", "--json", home=tmp_path).stdout)
        assert [r["status"] for r in alive] == ["running"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the controller and its sleep
        proc.wait()
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["status"] == "running" and record["controller_pid"] == proc.pid
    listed = json.loads(fleetctl("runs", "--json", home=tmp_path).stdout)
    assert [r["status"] for r in listed] == ["interrupted (controller gone)"]
    assert "interrupted (controller gone)" in fleetctl("runs", home=tmp_path).stdout
    html = tmp_path / "r.html"
    rep = fleetctl("report", record["run_id"], "--html", str(html), home=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert "interrupted (controller gone)" in html.read_text()
    # a record from another machine is shown as recorded
    from fleetctl.reporting.history import shown_status

    assert shown_status({**record, "controller": "elsewhere.invalid"}) == "running"


def test_logs_of_an_unreachable_host_print_its_reason(tmp_path):
    """The summary points at ``fleetctl logs RUN HOST``; for a host never reached that prints the
    cause as run.json has it, not nothing: its log's outcome line."""
    import socket

    with socket.socket() as s:  # a port nothing listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    gone: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n")
    res = fleetctl("-i", str(inv), "run", "--hosts", "gone", "--", "true", home=tmp_path)
    assert res.returncode == 1, res.stderr
    run_id = last_run(tmp_path).name
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["hosts"]["gone"]["status"] == "unreachable"
    logs = fleetctl("logs", run_id, "gone", home=tmp_path)
    assert logs.returncode == 1, logs.stderr  # the host's status
    assert logs.stdout == f"==> host UNREACHABLE: {record['hosts']['gone']['error']}\n"  # its log's last line
    assert record["hosts"]["gone"]["error"]


def test_logs_of_a_host_without_a_run_id_show_that_hosts_newest_run(tmp_path):
    """``fleetctl logs --host H`` looked only in the newest run and failed ``no log for host H`` when
    a run on other hosts came after H's (new-user trial): it shows H's newest run, naming it."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  hosts:\n" + "".join(f"    {h}:\n      ansible_connection: local\n      workdir: "
                                                  f"{tmp_path}/work-{h}\n" for h in ("me", "you")))
    runs = []
    for host, word in (("me", "older"), ("me", "first"), ("you", "second")):
        res = fleetctl("-i", str(inv), "run", "--hosts", host, "--", "echo", word, home=tmp_path)
        assert res.returncode == 0, res.stderr
        runs.append(last_run(tmp_path).name)
    assert len(set(runs)) == 3
    logs = fleetctl("logs", "--host", "me", home=tmp_path)
    assert logs.returncode == 0, logs.stderr
    assert "first" in logs.stdout and "older" not in logs.stdout and "second" not in logs.stdout
    assert logs.stderr == (f"fleetctl: note: run {runs[1]}: the newest run with a log for me\n"
                           f"run {runs[1]}: me: ok\n")
    assert fleetctl("logs", "--host", "you", home=tmp_path).stdout == fleetctl("logs", runs[2], "you",
                                                                                home=tmp_path).stdout
    none = fleetctl("logs", "--host", "nobody", home=tmp_path)
    assert (none.returncode, none.stdout) == (2, "")
    assert none.stderr.startswith("fleetctl: error: logs: no run in ") and none.stderr.endswith(
        " has a log for host nobody (fleetctl runs lists them)\n") and none.stderr.count("\n") == 1


def test_verify_that_changes_nothing_says_verified(tmp_path):
    inv, _ = write(tmp_path)
    play = tmp_path / "check.yaml"
    play.write_text("name: check\nhosts: all\ngather_facts: false\ntasks: []\n")
    res = fleetctl("-i", str(inv), "verify", "--playbook", str(play), "--hosts", "me", home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "verified: every host passed, nothing changed" in res.stdout
    assert "already up to date" not in res.stdout


def _commands(group, prefix=()):
    """``(path, command)`` for every command below ``group``, subcommands included."""
    import click

    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield (*prefix, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*prefix, name))


def test_l_is_the_short_form_of_limit_wherever_limit_is(tmp_path):
    """An operator's trial: ``fleetctl run --hosts all -l node01 -- true`` was "No such option '-l'"
    (exit 2); ``ansible-playbook -l`` and ClusterShell users type ``-l``. Every command with
    ``--limit`` takes ``-l`` too, and ``-l`` means nothing else anywhere."""
    from fleetctl.cli.app import main

    with_limit = []
    for path, cmd in _commands(main):
        for param in cmd.params:
            if "-l" in param.opts:
                assert param.name == "limit", (path, param.opts)
            if "--limit" in param.opts:
                assert "-l" in param.opts, (path, param.opts)
                with_limit.append(path[-1])
    assert {"run", "deploy", "verify", "facts", "copy", "fetch", "hosts"} <= set(with_limit), with_limit

    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  hosts:\n" + "".join(f"    {h}:\n      ansible_connection: local\n"
                                                  f"      workdir: {tmp_path}/work-{h}\n" for h in ("node01", "node02")))
    res = fleetctl("-i", str(inv), "run", "--hosts", "all", "-l", "node01", "--json", "--", "true", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(json.loads(res.stdout)) == ["node01"], res.stdout
    res = fleetctl("-i", str(inv), "hosts", "all", "-l", "node0[2]", "--json", home=tmp_path)
    assert res.returncode == 0 and json.loads(res.stdout) == ["node02"], res.stdout + res.stderr
    res = fleetctl("-i", str(inv), "run", "--hosts", "all", "-l", "", "--", "true", home=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "limit" in res.stderr, res.stderr
