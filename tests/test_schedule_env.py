"""``fleetctl schedule``: the environment the job carries from the shell that scheduled it
(:mod:`fleetctl.cli.schedule_env`), read back from the printed cron line and unit, and the cron line
really run by /bin/sh with cron's bare environment (crontab(5): HOME, LOGNAME, SHELL=/bin/sh,
PATH=/usr/bin:/bin)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from fleetctl.cli.schedule_env import job_env, not_carried_notes
from fleetctl.errors import InventoryError
from fleetctl.inventory import load_inventory
from tests.test_schedule import (cron_sh_command, fleet, fleet_dir, specifiers, split_printed, unit_settings,
                                 unquote_words)

ARGS = ("-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "7:05", "--name", "nightly")


def cron_env(home: Path) -> dict[str, str]:
    """What cron gives a job (crontab(5)), plus the PYTHONPATH that points at this checkout."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "SHELL": "/bin/sh", "LOGNAME": "nobody",
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}


def test_the_cron_job_uses_the_cache_and_retention_of_the_user_who_scheduled_it(tmp_path):
    """Issue: the job did not carry XDG_CACHE_HOME (nor the retention), so the nightly used
    ~/.cache (another wheel cache: every class rebuilt) and pruned with the default 50 runs. Here
    the scheduling shell sets XDG_CACHE_HOME and FLEETCTL_KEEP_RUNS=1; the cron line, run twice by
    /bin/sh with cron's environment, writes its probe plan into that cache (not ~/.cache) and keeps
    one playbook run."""
    d = fleet_dir(tmp_path)
    cache = tmp_path / "my cache"
    env = {"XDG_CACHE_HOME": str(cache), "FLEETCTL_KEEP_RUNS": "1", "FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S": "30"}
    res = fleet(tmp_path, *ARGS, "--cron", "--print", cwd=d, env=env)
    assert res.returncode == 0, res.stderr
    line = res.stdout.rstrip("\n")
    assert f"XDG_CACHE_HOME={shlex.quote(str(cache))} FLEETCTL_KEEP_RUNS=1 " in line, line
    home = tmp_path / "runs home %$'\""
    home.mkdir()  # as installing the line does (cron.log goes there)
    cmd, stdin = cron_sh_command(line)
    cron_home = tmp_path / "cron home"
    run_ids = []
    for _ in range(2):
        run = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=300,
                             env=cron_env(cron_home))
        log = (home / "cron.log").read_text()
        assert run.returncode == 0, log[-3000:]
        run_ids.append(json.loads(log[log.rindex("\n{\n") + 1:log.rindex("}") + 1])["run_id"])
    assert list((cache / "fleetctl" / "probes").glob("*.json")), list(cache.rglob("*"))
    assert not (cron_home / ".cache").exists()
    assert sorted(p.name for p in (home / "runs").iterdir() if (p / "run.json").is_file()) == [run_ids[1]]


def test_the_unit_carries_the_same_variables_as_the_cron_line(tmp_path):
    d = fleet_dir(tmp_path)
    (d / "scripts").mkdir()  # a folder that does not exist is refused (util.envvars.scripts_dir)
    env = {"XDG_CACHE_HOME": str(tmp_path / "c"), "FLEETCTL_KEEP_DAYS": "90", "FLEETCTL_SCRIPTS_DIR": "scripts"}
    res = fleet(tmp_path, *ARGS, "--print", cwd=d, env=env)
    assert res.returncode == 0, res.stderr
    svc = [t for p, t in split_printed(res.stdout).items() if p.endswith(".service")][0]
    carried = [w for v in unit_settings(svc)["Environment"] for w in unquote_words(specifiers(v))]
    assert carried == ["FLEETCTL_HOME=" + str(tmp_path / "runs home %$'\""), f"XDG_CACHE_HOME={tmp_path / 'c'}",
                       "FLEETCTL_KEEP_DAYS=90", f"FLEETCTL_SCRIPTS_DIR={d / 'scripts'}"], carried


def test_each_variable_is_decided_on_its_own():
    """Carried: state, cache (absolute only, as fleetctl reads it), retention, inventory settings;
    never the login's agent socket, XDG_CONFIG_HOME, XDG_RUNTIME_DIR or FLEETCTL_INVENTORY; Slurm
    variables only for a job that reaches hosts through Slurm."""
    login = {"XDG_STATE_HOME": "/s", "XDG_CACHE_HOME": "/c", "XDG_CONFIG_HOME": "/cfg", "XDG_RUNTIME_DIR": "/run/u",
             "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1", "FLEETCTL_INVENTORY": "inv.yaml", "FLEETCTL_KEEP_RUNS": "7",
             "FLEETCTL_MAX_HANDSHAKES": "4", "SLURM_CONF": "/etc/slurm/slurm.conf", "FLEETCTL_PROBE_DEPS": "1"}
    assert job_env(["/inv.yaml"], [], login) == {"XDG_STATE_HOME": "/s", "XDG_CACHE_HOME": "/c",
                                                 "FLEETCTL_KEEP_RUNS": "7", "FLEETCTL_MAX_HANDSHAKES": "4"}
    assert job_env(["slurm:"], [], login)["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    assert "XDG_CACHE_HOME" not in job_env(["/inv.yaml"], [], {"XDG_CACHE_HOME": "rel/cache"})
    assert job_env(["/inv.yaml"], [], {**login, "FLEETCTL_HOME": "/f"})["FLEETCTL_HOME"] == "/f"
    assert "XDG_STATE_HOME" not in job_env(["/inv.yaml"], [], {**login, "FLEETCTL_HOME": "/f"})
    assert [n.split(" ", 1)[0] for n in not_carried_notes(login)] == ["SSH_AUTH_SOCK"]
    assert not_carried_notes({}) == []


def test_a_bad_numeric_variable_is_refused_when_scheduling_not_every_night(tmp_path):
    """FLEETCTL_MAX_HANDSHAKES=0 made every SSH login wait forever; the job carries it, so the
    refusal comes now (one line, exit 2), as the job's own fleetctl would refuse it."""
    d = fleet_dir(tmp_path)
    for name, value in (("FLEETCTL_MAX_HANDSHAKES", "0"), ("FLEETCTL_KEEP_RUNS", "-1")):
        res = fleet(tmp_path, *ARGS, "--cron", "--print", cwd=d, env={name: value})
        assert (res.returncode, res.stdout) == (2, ""), res
        assert res.stderr == f"fleetctl: error: {name}: want a whole number of {'connections' if 'HAND' in name else 'runs'} " \
                             f">= 1, got '{value}'\n"


def test_an_empty_or_unknown_string_variable_is_refused_before_any_host_and_when_scheduling(tmp_path, monkeypatch):
    """Operator trial: ``FLEETCTL_SLURM_LAUNCHER=""`` (set but empty) was taken as no launcher, and
    the other string-valued FLEETCTL_* variables were not checked either, while the numeric ones
    were. Each empty or unknown value is one line naming the variable (exit 2), before the local
    host runs anything, and at ``schedule`` time, not by every night's run."""
    d = fleet_dir(tmp_path)
    marker = tmp_path / "touched"
    run = ("-i", "inv.yaml", "run", "--hosts", "localhost", "--", "touch", str(marker))
    empty_launcher = ("fleetctl: error: FLEETCTL_SLURM_LAUNCHER: set but empty: unset it to run srun, salloc and "
                      "sinfo from this machine's PATH, or give a command prefix that reaches them (e.g. 'ssh login01')\n")
    cases = [("FLEETCTL_SLURM_LAUNCHER", "", empty_launcher),
             ("FLEETCTL_SLURM_LAUNCHER", "no-such-launcher login01", "program 'no-such-launcher' not found"),
             ("FLEETCTL_SLURM_LAUNCHER", "ssh 'login01", "No closing quotation"),
             ("FLEETCTL_SCRIPTS_DIR", " ", "set but empty"),
             ("FLEETCTL_SCRIPTS_DIR", str(tmp_path / "no-scripts"), "is not a folder"),
             ("FLEETCTL_ANSIBLE_INVENTORY", str(tmp_path / "no-ansible-inventory"), "not found"),
             ("FLEETCTL_HOME", "", "set but empty")]
    for name, value, said in cases:
        for args in (run, (*ARGS, "--cron", "--print")) if value.strip() == "" else (run,):
            res = fleet(tmp_path, *args, cwd=d, env={name: value})
            assert (res.returncode, res.stdout) == (2, ""), (name, value, res)
            assert res.stderr.startswith(f"fleetctl: error: {name}: ") and said in res.stderr, (name, value, res.stderr)
            assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert not marker.exists()
    # `hosts` refuses it where it starts, as a run does (envvars.check_strings)...
    res = fleet(tmp_path, "-i", "slurm:", "hosts", "all", cwd=d, env={"FLEETCTL_SLURM_LAUNCHER": ""})
    assert (res.returncode, res.stderr) == (2, empty_launcher), res
    # ...and the slurm: source reads it the same way (it runs sinfo before any run starts), naming itself
    with monkeypatch.context() as m, pytest.raises(InventoryError) as err:
        m.setenv("FLEETCTL_SLURM_LAUNCHER", "")
        load_inventory(["slurm:"])
    assert f"fleetctl: error: {err.value}\n" == empty_launcher.replace("error: ", "error: slurm:: "), err.value
    # unset, or the documented empty FLEETCTL_ANSIBLE_INVENTORY (never delegate), still run
    res = fleet(tmp_path, *run, cwd=d, env={"FLEETCTL_ANSIBLE_INVENTORY": ""})
    assert res.returncode == 0 and marker.exists(), res.stderr


def test_a_relative_fleetctl_home_is_refused_and_nothing_is_made_in_the_current_folder(tmp_path):
    """FLEETCTL_HOME=relative/state put the run records, retry set and locks in whichever folder
    fleetctl started in (new-user trial): a deploy from another folder, or the nightly job, saw
    other records and other locks. Refused (one line, exit 2) by a run and by schedule, naming the
    absolute path to give; ``~/state`` is the user's own and stays allowed."""
    d = fleet_dir(tmp_path)
    before = sorted(p.name for p in d.iterdir())
    want = (f"fleetctl: error: FLEETCTL_HOME: want an absolute path (or ~/...), got 'relative/state': a relative one "
            f"puts run records, the retry set and locks in whichever folder fleetctl starts in; give "
            f"{str(d / 'relative' / 'state')!r} for this folder's\n")
    for args in (("-i", "inv.yaml", "run", "--hosts", "localhost", "--", "true"), (*ARGS, "--cron", "--print")):
        res = fleet(tmp_path, *args, cwd=d, env={"FLEETCTL_HOME": "relative/state"})
        assert (res.returncode, res.stdout, res.stderr) == (2, "", want)
    assert sorted(p.name for p in d.iterdir()) == before
    res = fleet(tmp_path, "-i", "inv.yaml", "run", "--hosts", "localhost", "--", "true", cwd=d,
                env={"FLEETCTL_HOME": "~/state"})
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "home" / "state" / "runs").is_dir() and sorted(p.name for p in d.iterdir()) == before


def test_scheduling_ssh_hosts_with_an_agent_notes_that_the_agent_is_not_carried(tmp_path):
    d = fleet_dir(tmp_path)
    (d / "ssh.yaml").write_text("all:\n  hosts:\n    gpu01:\n      ansible_host: 127.0.0.1\n")
    args = ("-i", "ssh.yaml", "schedule", "--playbook", "pb.yaml", "--hosts", "gpu01", "--at", "7:05", "--cron",
            "--print")
    res = fleet(tmp_path, *args, cwd=d, env={"SSH_AUTH_SOCK": "/tmp/ssh-gone/agent.1"})
    assert res.returncode == 0, res.stderr
    assert "SSH_AUTH_SOCK" not in res.stdout
    assert "fleetctl: note: SSH_AUTH_SOCK is not carried into the job" in res.stderr
