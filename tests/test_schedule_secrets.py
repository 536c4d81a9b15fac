"""``fleetctl schedule`` keeps -e values out of unit files and crontab lines, and passes --metrics-file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from tests.test_schedule import FAKE_CRONTAB, FAKE_SYSTEMCTL, fake_bin, fleet, fleet_dir

TOKEN = "hf_Sup3rS3cretT0ken"


def test_a_token_never_lands_in_the_units_and_its_file_is_private(tmp_path):
    d = fleet_dir(tmp_path)
    fake_bin(tmp_path / "bin", "systemctl", FAKE_SYSTEMCTL)
    prom = tmp_path / "textfile"
    prom.mkdir()
    res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--name", "nightly",
                "-e", f"hf_token={TOKEN}", "-e", "greeting=hello", "--metrics-file", str(prom / "nightly.prom"),
                cwd=d, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_SYSTEMCTL_LOG": str(tmp_path / "log")})
    assert res.returncode == 0, res.stderr
    assert TOKEN not in res.stdout + res.stderr
    units = tmp_path / "home/.config/systemd/user"
    service = (units / "nightly.service").read_text()
    assert TOKEN not in service and "hello" not in service
    assert f"--metrics-file {prom / 'nightly.prom'}" in service
    vars_file = Path(str(tmp_path / "runs home %$'\"") + "/schedule/nightly.vars.yaml")
    assert "/schedule/nightly.vars.yaml" in service
    assert stat.S_IMODE(vars_file.stat().st_mode) == 0o600
    doc = yaml.safe_load(vars_file.read_text())
    assert doc == {"hf_token": {"value": TOKEN, "secret": True}, "greeting": "hello"}


def test_cron_line_holds_no_value_and_print_masks_it(tmp_path):
    d = fleet_dir(tmp_path)
    res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--cron", "--print",
                "-e", f"api_key={TOKEN}", cwd=d)
    assert res.returncode == 0, res.stderr
    assert TOKEN not in res.stdout + res.stderr and "api_key=********" in res.stderr
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--cron",
                "-e", f"api_key={TOKEN}", cwd=d,
                env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_CRONTAB_FILE": str(tmp_path / "tab")})
    assert res.returncode == 0, res.stderr
    assert TOKEN not in (tmp_path / "tab").read_text()


def test_a_vars_file_holding_secrets_must_be_private(tmp_path):
    d = fleet_dir(tmp_path)
    given = tmp_path / "secrets.yaml"
    given.write_text(f"hf_token: {TOKEN}\n")
    os.chmod(given, 0o644)
    args = ["-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--print", "-e", f"@{given}"]
    res = fleet(tmp_path, *args, cwd=d)
    assert res.returncode == 2
    assert res.stderr.startswith("fleetctl: error: ") and "chmod 600" in res.stderr and str(given) in res.stderr
    os.chmod(given, 0o600)
    res = fleet(tmp_path, *args, cwd=d)
    assert res.returncode == 0, res.stderr
    assert f"@{given}" in res.stdout and TOKEN not in res.stdout
    # a file without secrets may be readable by others
    plain = tmp_path / "plain.yaml"
    plain.write_text("greeting: hi\n")
    os.chmod(plain, 0o644)
    assert fleet(tmp_path, *args[:-1], f"@{plain}", cwd=d).returncode == 0
    # a missing file is one line, exit 2
    res = fleet(tmp_path, *args[:-1], f"@{tmp_path / 'nope.yaml'}", cwd=d)
    assert res.returncode == 2 and "extra vars file not found" in res.stderr


def test_a_metrics_file_the_job_could_not_write_is_refused_when_scheduling(tmp_path):
    """``schedule --metrics-file`` checked only that the folder exists, so a job whose deploy
    refuses its read-only metrics folder (exit 2, every night) was made without a word. The run's
    own check applies when the job is made: one line naming the path and the cause, exit 2,
    nothing written; a writable folder is scheduled."""
    import subprocess
    import sys

    from tests.test_metrics_file_e2e import READ_ONLY

    d = fleet_dir(tmp_path)
    prom = tmp_path / "textfile"
    prom.mkdir()
    env = {**{k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "FLEETCTL_INVENTORY")},
           "HOME": str(tmp_path / "home"), "FLEETCTL_HOME": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "fleetctl", "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30",
            "--print", "--metrics-file", str(prom / "nightly.prom")]
    res = subprocess.run([*READ_ONLY, str(prom), *argv], capture_output=True, text=True, timeout=120, env=env, cwd=d)
    assert (res.returncode, res.stdout) == (2, ""), res.stdout + res.stderr
    assert res.stderr == (f"fleetctl: error: --metrics-file {prom / 'nightly.prom'}: cannot write in folder {prom}: "
                          f"Read-only file system\n"), res.stderr
    assert list(prom.iterdir()) == []  # no probe file left
    ok = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=d)
    assert ok.returncode == 0 and f"--metrics-file {prom / 'nightly.prom'}" in ok.stdout, ok.stderr


def test_a_metrics_file_that_is_a_folder_is_refused_when_scheduling(tmp_path):
    """``schedule --metrics-file FOLDER --print`` put the folder into the nightly job, whose every
    run would then fail to write it: refused as the run refuses it (exit 2, one line)."""
    import subprocess
    import sys

    d = fleet_dir(tmp_path)
    prom = tmp_path / "textfile"
    prom.mkdir()
    env = {**{k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "FLEETCTL_INVENTORY")},
           "HOME": str(tmp_path / "home"), "FLEETCTL_HOME": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "fleetctl", "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30",
            "--print", "--metrics-file", str(prom)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=d)
    assert (res.returncode, res.stdout) == (2, ""), res.stdout + res.stderr
    assert res.stderr.startswith(f"fleetctl: error: --metrics-file {prom}: is a folder") and \
        res.stderr.count("\n") == 1, res.stderr
