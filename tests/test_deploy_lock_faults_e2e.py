"""The deploy lock on a host whose disk is full, end to end on ``local`` hosts: the failure names
the lock file and the cause, the run's table shows the host's task letter, the other hosts go on."""

from __future__ import annotations

import json

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import tmpfs

QUICK = "name: q\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n"


def test_a_full_workdir_disk_names_the_lock_file_and_enospc_and_shows_the_hosts_task(tmp_path):
    # New-user trial: "cannot take the deploy lock : No space left on device" (the path empty: the
    # deploy_lock var, unset, was named instead of the file), and an empty tasks column for the host.
    with tmpfs(tmp_path / "small", "3m") as small:
        work = small / "work"
        work.mkdir()
        with open(small / "filler", "wb") as f:  # fill the disk to its last byte
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"full": {"ansible_connection": "local",
                                                                     "workdir": str(work)},
                                                            "fine": {"ansible_connection": "local",
                                                                     "workdir": str(tmp_path / "fine")}}})
        play = tmp_path / "quick.yaml"
        play.write_text(QUICK)
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path,
                       env={"COLUMNS": "200"})
    assert res.returncode == 1, res.stdout + res.stderr
    lock = f"{work}/deploy.lock"
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    full, fine = record["hosts"]["full"], record["hosts"]["fine"]
    assert fine["status"] == "ok"
    assert full["status"] == "failed"
    assert f"cannot take the deploy lock {lock}: No space left on device (ENOSPC)" in full["error"], full["error"]
    assert [(t["name"], t["status"]) for t in full["tasks"]] == [("deploy lock", "failed")]
    lines = (res.stdout + res.stderr).splitlines()
    # the live line as the host ends (once), then its row in the summary table
    assert [ln for ln in lines if ln.startswith("full | FAILED")] == [
        f"full | FAILED      host done in {full['duration_s']:.1f} s: {full['error']}"], lines
    row = next(ln for ln in lines if not ln.startswith("full | ") and (ln.split()[:2] == ["full", "failed"]
               or ln.strip("│┃| ").startswith("full ")))
    assert " F " in row.replace("│", " ").replace("┃", " ") + " ", row
