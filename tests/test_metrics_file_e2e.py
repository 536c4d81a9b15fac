"""``--metrics-file`` over real runs on sshd test hosts (operators' trials):

- a host's last-success time survives a later failed run that leaves it out (``--hosts gpu02``):
  it was dropped, though docs/report.md says it is kept;
- a folder on a read-only file system is refused before the run (one line naming the path, exit 2),
  as a missing folder is: it was a warning after the run, exit 0, which cron never notices.

The file is read back with prometheus_client's parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fleet import fleetctl, write_inventory

pytestmark = pytest.mark.sshd

#: A command prefix: the command runs in its own mount namespace where folder $1 is a read-only
#: bind mount of itself (``EROFS`` for any write there, root's included); the rest is the command.
READ_ONLY = ("unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"', "ro")


def _last_success(path) -> dict[str, float]:
    return {s.labels["host"]: s.value for f in text_string_to_metric_families(path.read_text()) for s in f.samples
            if s.name == "fleetctl_host_last_success_timestamp_seconds" and s.labels.get("playbook") == "run"}


@pytest.fixture()
def two_hosts(sshd_farm, tmp_path):
    hosts = {name: sshd_farm.start(name).inventory_vars(sshd_farm.known_hosts) for name in ("gpu01", "gpu02")}
    return write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})


def test_a_host_left_out_of_a_failed_run_keeps_its_last_success(two_hosts, tmp_path):
    prom = tmp_path / "textfile" / "r.prom"
    prom.parent.mkdir()
    first = fleetctl("-i", str(two_hosts), "run", "--hosts", "gpu01,gpu02", "--metrics-file", str(prom), "--", "true",
                     home=tmp_path, timeout_s=120)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    before = _last_success(prom)
    assert set(before) == {"gpu01", "gpu02"} and all(before.values()), before
    second = fleetctl("-i", str(two_hosts), "run", "--hosts", "gpu02", "--metrics-file", str(prom), "--", "false",
                      home=tmp_path, timeout_s=120)
    assert second.returncode == 1, second.stdout[-2000:] + second.stderr[-2000:]
    assert _last_success(prom) == before  # gpu01 left out, gpu02 failed: both keep the first run's time
    third = fleetctl("-i", str(two_hosts), "run", "--hosts", "gpu02", "--metrics-file", str(prom), "--", "true",
                     home=tmp_path, timeout_s=120)
    assert third.returncode == 0, third.stderr[-2000:]
    after = _last_success(prom)
    assert after["gpu01"] == before["gpu01"] and after["gpu02"] > before["gpu02"], (before, after)


def test_a_metrics_file_on_a_read_only_file_system_is_refused_before_the_run(two_hosts, tmp_path):
    folder = tmp_path / "textfile"
    folder.mkdir()
    mark = tmp_path / "ran"
    res = fleetctl("-i", str(two_hosts), "run", "--hosts", "gpu01", "--metrics-file", str(folder / "r.prom"), "--",
                   "touch", str(mark), home=tmp_path, timeout_s=120, prefix=(*READ_ONLY, str(folder)))
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert len(err) == 1 and str(folder / "r.prom") in err[0] and "Read-only file system" in err[0], err
    assert "Traceback" not in res.stderr
    assert not mark.exists()  # refused before the run: the host ran nothing
    assert list(folder.iterdir()) == []  # no probe file left


def test_a_metrics_file_that_is_a_folder_is_refused_before_the_run(two_hosts, tmp_path):
    """Operator trial: ``--metrics-file FOLDER`` ran everything, then warned ``cannot write: Is a
    directory`` and exited with the run's own code; docs/report.md says it is refused before the
    run: exit 2, one line naming the path."""
    folder = tmp_path / "textfile"
    folder.mkdir()
    mark = tmp_path / "ran"
    res = fleetctl("-i", str(two_hosts), "run", "--hosts", "gpu01", "--metrics-file", str(folder), "--",
                   "touch", str(mark), home=tmp_path, timeout_s=120)
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert len(err) == 1 and f"--metrics-file {folder}: is a folder" in err[0], err
    assert not mark.exists() and list(folder.iterdir()) == []
