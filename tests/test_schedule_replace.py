"""``fleetctl schedule`` for a second group: one name is one job, so a job for another playbook,
inventory or host pattern under the same (default) name is refused before anything is written;
the same job scheduled again is replaced, saying what it was. The cron path runs through the suite's
crontab(1) double (a script on PATH keeping the table in a file), the systemd path writes the real
unit files into the user unit folder (systemctl a recording script)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetctl import schedule as sch
from fleetctl.errors import InputError
from tests.test_schedule import FAKE_CRONTAB, FAKE_SYSTEMCTL, HOSTILE, fake_bin, fleet, job


def two_groups(tmp_path: Path) -> Path:
    """A folder with an inventory of two groups (``users``, ``rack``; local hosts) and nightly.yaml."""
    d = tmp_path / "fleet"
    (d / "playbooks").mkdir(parents=True)
    (d / "inv.yaml").write_text("all:\n  children:\n"
                                "    users:\n      hosts:\n        u1: {ansible_connection: local}\n"
                                "    rack:\n      hosts:\n        r1: {ansible_connection: local}\n")
    (d / "playbooks/nightly.yaml").write_text(
        "name: nightly\nhosts: users\ngather_facts: false\nvars: {greeting: world}\ntasks:\n"
        "  - name: greet\n    command:\n      argv: [echo, \"hi {{ greeting }}\"]\n")
    return d


def sched(tmp_path, d, env, *args):
    return fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "playbooks/nightly.yaml", *args,
                 cwd=d, env=env)


def test_cron_a_second_group_under_the_default_name_is_refused_the_same_job_replaced(tmp_path):
    d = two_groups(tmp_path)
    table = tmp_path / "table"
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_CRONTAB_FILE": str(table)}
    res = sched(tmp_path, d, env, "--hosts", "users", "--at", "02:30", "--cron", "-e", "greeting=x")
    assert res.returncode == 0, res.stderr
    assert "crontab: added # fleetctl:fleetctl-nightly" in res.stdout
    vars_file = tmp_path / "runs home %$'\"" / "schedule/fleetctl-nightly.vars.yaml"
    before = (table.read_text(), vars_file.read_text())

    # another group, same default name: refused, one line, nothing written or deleted
    res = sched(tmp_path, d, env, "--hosts", "rack", "--at", "03:30", "--cron")
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    for part in ("fleetctl-nightly", "'users'", "02:30", "(cron)", "--name NAME", "--replace"):
        assert part in res.stderr, (part, res.stderr)
    assert (table.read_text(), vars_file.read_text()) == before

    # the same job again, at another time: replaced, saying what it was
    res = sched(tmp_path, d, env, "--hosts", "users", "--at", "04:00", "--cron", "-e", "greeting=x")
    assert res.returncode == 0, res.stderr
    assert "every day at 02:30 (cron); now every day at 04:00" in res.stdout
    assert "crontab: replaced # fleetctl:fleetctl-nightly" in res.stdout
    # a second job with its own name: both stay, the first one's vars file too
    res = sched(tmp_path, d, env, "--hosts", "rack", "--at", "03:30", "--cron", "--name", "nightly-rack")
    assert res.returncode == 0, res.stderr
    lines = table.read_text().splitlines()
    assert [ln.split()[:2] for ln in lines] == [["0", "4"], ["30", "3"]]
    assert lines[0].endswith("# fleetctl:fleetctl-nightly") and lines[1].endswith("# fleetctl:nightly-rack")
    assert vars_file.exists()
    # --replace: the way to move the default name's job to other hosts on purpose
    res = sched(tmp_path, d, env, "--hosts", "rack", "--at", "05:00", "--cron", "--replace")
    assert res.returncode == 0, res.stderr
    assert "replacing the job deploying" in res.stdout and "'users'" in res.stdout
    assert table.read_text().splitlines()[0].startswith("0 5 * * * ")


def test_systemd_a_second_group_under_the_default_name_is_refused_the_same_job_replaced(tmp_path):
    d = two_groups(tmp_path)
    fake_bin(tmp_path / "bin", "systemctl", FAKE_SYSTEMCTL)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_SYSTEMCTL_LOG": str(tmp_path / "systemctl.log")}
    res = sched(tmp_path, d, env, "--hosts", "users", "--at", "02:30", "-e", "greeting=x")
    assert res.returncode == 0, res.stderr
    unit_dir = tmp_path / "home/.config/systemd/user"
    files = [unit_dir / "fleetctl-nightly.service", unit_dir / "fleetctl-nightly.timer",
             tmp_path / "runs home %$'\"" / "schedule/fleetctl-nightly.vars.yaml"]
    before = [p.read_text() for p in files]

    res = sched(tmp_path, d, env, "--hosts", "rack", "--at", "03:30")
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    for part in ("fleetctl-nightly", "'users'", "02:30", "(systemd)", "--name NAME", "--replace"):
        assert part in res.stderr, (part, res.stderr)
    assert [p.read_text() for p in files] == before

    res = sched(tmp_path, d, env, "--hosts", "users", "--at", "04:00", "-e", "greeting=x")
    assert res.returncode == 0, res.stderr
    assert "every day at 02:30 (systemd); now every day at 04:00" in res.stdout
    assert "OnCalendar=*-*-* 04:00:00\n" in files[1].read_text()
    res = sched(tmp_path, d, env, "--hosts", "rack", "--at", "03:30", "--name", "nightly-rack")
    assert res.returncode == 0, res.stderr
    assert all(p.exists() for p in files) and (unit_dir / "nightly-rack.timer").exists()


@pytest.mark.parametrize("word", HOSTILE)
def test_the_installed_job_is_read_back_from_what_was_rendered(tmp_path, word):
    j = job(tmp_path, inventory=(f"/srv/{word}/inv.yaml", "slurm:"), playbook=f"/srv/{word}.yaml",
            pattern=f"gpu:&{word}", extra_vars=(f"@/x/{word}",), ssh_options=(f"User={word}",))
    for got in (sch.from_units(sch.render_service(j), sch.render_timer(j)),
                sch.from_crontab("0 1 * * * other\n" + sch.cron_line(j) + "\n", j.name)):
        assert got.same_job(j) and got.at == "02:30", (got, j)
        other = job(tmp_path, inventory=j.inventory, playbook=j.playbook, pattern="rack")
        assert not got.same_job(other)
    assert sch.from_units(None, None) is None and sch.from_crontab("0 1 * * * other\n", j.name) is None


def test_a_job_that_cannot_be_read_back_is_not_replaced_without_replace(tmp_path):
    """A hand-edited line (or unit) is not known to be the same job: refused, naming it, unless --replace."""
    j = job(tmp_path)
    got = sch.from_crontab("30 2 * * * /usr/local/bin/my-nightly.sh # fleetctl:fleetctl-nightly\n", j.name)
    assert got is not None and got.playbook is None and not got.same_job(j)
    with pytest.raises(InputError) as exc:
        sch.check_replace(got, j, replace=False)
    assert "cannot read back" in str(exc.value) and "02:30" in str(exc.value) and "--replace" in str(exc.value)
    sch.check_replace(got, j, replace=True)
    edited = sch.from_units("[Service]\nExecStart=/bin/true\n", None)
    assert edited.playbook is None and edited.at == "?"


@pytest.mark.parametrize("kind", ["cron", "systemd"])
def test_a_metrics_file_another_job_writes_is_refused_naming_that_job(tmp_path, kind):
    """Operator trial: two jobs given one --metrics-file were both accepted; each run replaces the whole
    file, so the second job's success wiped the first one's failure (and its hosts' series)."""
    d = two_groups(tmp_path)
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    fake_bin(tmp_path / "bin", "systemctl", FAKE_SYSTEMCTL)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_CRONTAB_FILE": str(tmp_path / "table"),
           "FAKE_SYSTEMCTL_LOG": str(tmp_path / "systemctl.log")}
    (tmp_path / "textfile").mkdir()
    prom = str(tmp_path / "textfile/fleetctl.prom")
    how = ["--cron"] if kind == "cron" else []
    res = sched(tmp_path, d, env, "--hosts", "users", "--at", "02:30", "--metrics-file", prom, *how)
    assert res.returncode == 0, res.stderr
    installed = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    # the same job again keeps its file
    res = sched(tmp_path, d, env, "--hosts", "users", "--at", "03:00", "--metrics-file", prom, *how)
    assert res.returncode == 0, res.stderr

    for extra in ([], ["--print"], ["--cron"] if kind != "cron" else []):
        res = sched(tmp_path, d, env, "--hosts", "rack", "--at", "03:30", "--name", "nightly-rack",
                    "--metrics-file", prom, *how, *extra)
        assert res.returncode == 2, res.stdout + res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr
        for part in (prom, "fleetctl-nightly", f"({kind})", "nightly-rack.prom"):
            assert part in res.stderr, (part, res.stderr)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == installed
    res = sched(tmp_path, d, env, "--hosts", "rack", "--at", "03:30", "--name", "nightly-rack",
                "--metrics-file", str(tmp_path / "textfile/nightly-rack.prom"), *how)
    assert res.returncode == 0, res.stderr


def test_a_metrics_file_node_exporter_would_not_read_is_refused_when_scheduling(tmp_path):
    d = two_groups(tmp_path)
    res = sched(tmp_path, d, {}, "--hosts", "users", "--at", "02:30", "--print",
                "--metrics-file", str(tmp_path / "fleetctl.txt"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "*.prom" in res.stderr, res.stderr
    assert f"{tmp_path}/fleetctl-nightly.prom" in res.stderr and not (tmp_path / "fleetctl.txt").exists()
