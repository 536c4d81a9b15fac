"""A workdir on a read-only or a full file system, over real SSH: ``fleetctl facts`` flags it (the
host's line is not a healthy "ok"), and ``deploy --plan`` and ``deploy`` fail the host with one
line naming the path, the cause and the fix (set the host var workdir)."""

from __future__ import annotations

import json

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import fill, tmpfs

PLAY = "name: q\nhosts: all\ntasks:\n  - name: t\n    command: {argv: ['true']}\n"


@pytest.mark.sshd
def test_a_read_only_or_full_workdir_is_flagged_by_facts_and_named_with_its_fix(sshd_farm, tmp_path):
    host = sshd_farm.start("wd1")
    with tmpfs(tmp_path / "ro", "1m", "ro") as ro, tmpfs(tmp_path / "full", "1m") as full:
        (full / "wd").mkdir()
        fill(full)
        base = host.inventory_vars(sshd_farm.known_hosts)
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h-ro": {**base, "workdir": str(ro / "wd")},
                                                            "h-full": {**base, "workdir": str(full / "wd")}}})
        play = tmp_path / "play.yaml"
        play.write_text(PLAY)
        home = tmp_path / "home"
        facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=home, env={"COLUMNS": "250"})
        plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", home=home,
                        env={"COLUMNS": "250"})
        deploy = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=home,
                          env={"COLUMNS": "250"})
    fix = "set the host var workdir to a writable folder with space"
    # facts: gathered, but a deploy fails on both hosts: failed (exit 1), neither reads as healthy
    assert facts.returncode == 1, facts.stdout + facts.stderr
    for name in ("h-ro", "h-full"):
        assert f"{name}: FAILED (the cause below)" in facts.stdout and f"{name}: ok" not in facts.stdout, facts.stdout
    notes = " ".join(facts.stdout.split())
    assert f"h-ro: FAILED: workdir {ro}/wd: the file system of {ro}, its nearest existing folder, is mounted " \
           f"read-only: a deploy (and --plan) cannot make its run folder, lock or build there; {fix}" in notes, notes
    assert f"h-full: FAILED: workdir {full}/wd: the file system of {full}/wd is full (0 MiB free): " in notes, notes
    # --plan and deploy: the path, the cause and the fix, by one rule
    run_dir = f"{ro}/wd/runs/"
    for res in (plan, deploy):
        assert res.returncode == 1, res.stdout + res.stderr
        text = " ".join(res.stdout.replace("│", " ").split())
        assert f"cannot create {run_dir}" in text and f": Read-only file system (EROFS); {fix}" in text, text
        assert "(set the host var 'workdir'" not in text, text
    text = " ".join(plan.stdout.replace("│", " ").split())
    assert f"cannot write {full}/wd/scripts/facts-" in text and f".py: No space left on device (ENOSPC); {fix}" \
        in text, text
    assert "facts script failed" not in text, text
    record = json.loads((last_run(home) / "run.json").read_text())
    assert record["hosts"]["h-full"]["error"].endswith(
        f"cannot take the deploy lock {full}/wd/deploy.lock: No space left on device (ENOSPC); {fix}"), record
