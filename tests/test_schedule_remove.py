"""``fleetctl schedule --remove``: unscheduling takes away exactly what ``fleetctl schedule`` installed
under the name (the user units and their timer, or our crontab line, and the job's vars files),
nothing else; idempotent; a failing or missing systemctl still removes the files and says what to run.
The real CLI in a subprocess; systemctl and crontab are the suite's recording doubles on PATH
(tests/test_schedule.py), the unit files really land in the user unit folder of a temporary HOME."""

from __future__ import annotations

from pathlib import Path

from tests.test_schedule import FAKE_CRONTAB, FAKE_SYSTEMCTL, OTHER_LINES, fake_bin, fleet
from tests.test_schedule_replace import sched, two_groups

STATE = "runs home %$'\""  # the FLEETCTL_HOME of tests.test_schedule.fleet


def test_systemd_remove_disables_and_removes_only_that_job_then_says_nothing_is_left(tmp_path):
    d = two_groups(tmp_path)
    log = tmp_path / "systemctl.log"
    fake_bin(tmp_path / "bin", "systemctl", FAKE_SYSTEMCTL)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_SYSTEMCTL_LOG": str(log)}
    assert sched(tmp_path, d, env, "--hosts", "users", "--at", "02:30", "-e", "greeting=x").returncode == 0
    assert sched(tmp_path, d, env, "--hosts", "rack", "--at", "03:30", "--name", "rack", "-e", "greeting=y").returncode == 0
    unit_dir = tmp_path / "home/.config/systemd/user"
    vars_file = tmp_path / STATE / "schedule/fleetctl-nightly.vars.yaml"
    assert vars_file.exists()
    log.unlink()

    # the default name comes from --playbook, as when scheduling
    res = fleet(tmp_path, "schedule", "--remove", "--playbook", "playbooks/nightly.yaml", cwd=d, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert log.read_text() == "--user disable --now fleetctl-nightly.timer\n--user daemon-reload\n"
    assert sorted(p.name for p in unit_dir.iterdir()) == ["rack.service", "rack.timer"]
    assert not vars_file.exists()
    assert [p.name for p in vars_file.parent.iterdir()] == ["rack.vars.yaml"]  # the folder stays: not empty
    for part in ("removing the job deploying", "'users'", f"removed {unit_dir / 'fleetctl-nightly.timer'}",
                 f"removed {vars_file}", "disabled and removed fleetctl-nightly.timer"):
        assert part in res.stdout, (part, res.stdout)

    # again: nothing of that name, one line, exit 0 (as Ansible's state=absent), systemctl not run
    log.unlink()
    res = fleet(tmp_path, "schedule", "--remove", "--name", "fleetctl-nightly", cwd=d, env=env)
    assert res.returncode == 0 and not log.exists()
    assert res.stdout.strip().splitlines() == [
        f"fleetctl-nightly: no job of that name (user units in {unit_dir}); nothing removed"]

    # a unit of that name that fleetctl did not write is left alone: one line, exit 2
    (unit_dir / "backup.timer").write_text("[Timer]\nOnCalendar=daily\n")
    res = fleet(tmp_path, "schedule", "--remove", "--name", "backup", cwd=d, env=env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "backup.timer was not written by fleetctl schedule" in res.stderr
    assert (unit_dir / "backup.timer").exists() and not log.exists()

    # an option that only installs is refused with --remove, not silently ignored
    res = fleet(tmp_path, "schedule", "--remove", "--name", "rack", "--at", "02:00", cwd=d, env=env)
    assert res.returncode == 2 and "--remove: --at is for scheduling" in res.stderr
    assert (unit_dir / "rack.timer").exists()


def test_a_schedule_without_a_running_systemd_can_be_taken_back(tmp_path):
    """The trial: daemon-reload fails (no systemd running), the units stay written (exit 1) and the
    message names --remove; --remove with the same failing systemctl, and with none on PATH, removes
    the files and says what to run (exit 1: whether a manager had loaded the timer is not known)."""
    d = two_groups(tmp_path)
    fake_bin(tmp_path / "bin", "systemctl", FAKE_SYSTEMCTL)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_SYSTEMCTL_FAIL": "1",
           "FAKE_SYSTEMCTL_LOG": str(tmp_path / "systemctl.log")}
    unit_dir = tmp_path / "home/.config/systemd/user"
    res = sched(tmp_path, d, env, "--at", "02:30", "-e", "greeting=x")
    assert res.returncode == 1 and "to take the files away: fleetctl schedule --remove --name fleetctl-nightly" \
        in res.stderr, res.stderr
    res = fleet(tmp_path, "schedule", "--remove", "--name", "fleetctl-nightly", cwd=d, env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    # the folders schedule made (mkdir -p) go with the last unit: no empty ~/.config/systemd/user left,
    # nor the ~/.config it made (operator trial: an empty ~/.config stayed)
    assert not unit_dir.parent.parent.exists() and (tmp_path / "home").is_dir(), res.stdout
    assert f"removed the empty folder {unit_dir}" in res.stdout
    assert f"removed the empty folder {unit_dir.parent.parent}" in res.stdout
    # the vars files' folder schedule made goes with the last of them (a fresh operator's trial found it left)
    assert not (tmp_path / STATE / "schedule").exists() and (tmp_path / STATE).is_dir()
    assert f"removed the empty folder {tmp_path / STATE / 'schedule'}" in res.stdout
    assert "`systemctl --user disable --now fleetctl-nightly.timer` failed (exit 1): Failed to connect" in res.stderr
    assert "systemctl --user disable --now fleetctl-nightly.timer && systemctl --user daemon-reload" in res.stderr
    assert "Traceback" not in res.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    assert sched(tmp_path, d, {"PATH": str(empty)}, "--at", "02:30").returncode == 1
    res = fleet(tmp_path, "schedule", "--remove", "--name", "fleetctl-nightly", cwd=d, env={"PATH": str(empty)})
    assert res.returncode == 1 and "systemctl not found" in res.stderr
    assert not unit_dir.parent.parent.exists()

    # two jobs, the first made ~/.config: it goes with the last of them, whichever that is
    assert sched(tmp_path, d, {"PATH": str(empty)}, "--hosts", "users", "--at", "02:30").returncode == 1
    assert sched(tmp_path, d, {"PATH": str(empty)}, "--hosts", "rack", "--at", "03:30", "--name", "rack").returncode == 1
    fleet(tmp_path, "schedule", "--remove", "--name", "fleetctl-nightly", cwd=d, env={"PATH": str(empty)})
    assert sorted(p.name for p in unit_dir.iterdir()) == ["rack.service", "rack.timer"]
    fleet(tmp_path, "schedule", "--remove", "--name", "rack", cwd=d, env={"PATH": str(empty)})
    assert not unit_dir.parent.parent.exists()

    # a ~/.config that was there before stays, empty or not
    unit_dir.parent.parent.mkdir()
    assert sched(tmp_path, d, {"PATH": str(empty)}, "--at", "02:30").returncode == 1
    fleet(tmp_path, "schedule", "--remove", "--name", "fleetctl-nightly", cwd=d, env={"PATH": str(empty)})
    assert not unit_dir.parent.exists() and unit_dir.parent.parent.is_dir()

    # a folder with anything else in it stays
    assert sched(tmp_path, d, {"PATH": str(empty)}, "--at", "02:30").returncode == 1
    (unit_dir / "mine.timer").write_text("[Timer]\nOnCalendar=daily\n")
    res = fleet(tmp_path, "schedule", "--remove", "--name", "fleetctl-nightly", cwd=d, env={"PATH": str(empty)})
    assert res.returncode == 1 and [p.name for p in unit_dir.iterdir()] == ["mine.timer"]


def test_cron_remove_without_a_crontab_program_says_nothing_was_scheduled(tmp_path):
    """No crontab program: there is no crontab, so no line of ours to remove: one line, exit 0
    (README: "nothing of that name: one line, exit 0"), not exit 1 with a crontab -e hint."""
    d = two_groups(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    res = fleet(tmp_path, "schedule", "--remove", "--cron", cwd=d, env={"PATH": str(empty)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines() == [
        "fleetctl-nightly: no crontab program on this machine, so no cron job of that name; nothing removed"]
    assert not res.stderr.strip(), res.stderr


def test_cron_remove_takes_only_our_marked_line_and_the_jobs_vars_file(tmp_path):
    d = two_groups(tmp_path)
    table = tmp_path / "table"
    table.write_text(OTHER_LINES)
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_CRONTAB_FILE": str(table)}
    assert sched(tmp_path, d, env, "--hosts", "users", "--at", "02:30", "--cron", "-e", "greeting=x").returncode == 0
    assert sched(tmp_path, d, env, "--hosts", "rack", "--at", "03:30", "--cron", "--name", "rack").returncode == 0
    rack_line = table.read_text().splitlines()[-1]
    vars_file = tmp_path / STATE / "schedule/fleetctl-nightly.vars.yaml"

    res = fleet(tmp_path, "schedule", "--remove", "--cron", "--print", cwd=d, env=env)
    assert res.returncode == 0 and "would remove from the crontab: 30 2 * * * " in res.stdout
    assert vars_file.exists() and len(table.read_text().splitlines()) == len(OTHER_LINES.splitlines()) + 2

    res = fleet(tmp_path, "schedule", "--remove", "--cron", cwd=d, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert table.read_text() == OTHER_LINES + rack_line + "\n"
    assert not vars_file.exists() and not vars_file.parent.exists()  # no empty <state>/schedule/ left
    assert "crontab: removed 1 line(s) marked # fleetctl:fleetctl-nightly" in res.stdout
    assert f"removed {vars_file}" in res.stdout

    res = fleet(tmp_path, "schedule", "--remove", "--cron", cwd=d, env=env)
    assert res.returncode == 0
    assert res.stdout.strip() == "fleetctl-nightly: no job of that name in the crontab; nothing removed"
    res = fleet(tmp_path, "schedule", "--remove", "--cron", "--system", cwd=d, env=env)
    assert res.returncode == 2 and "--system" in res.stderr
    assert table.read_text() == OTHER_LINES + rack_line + "\n"
