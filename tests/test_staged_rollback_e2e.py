"""Rollback after the things operators do (docs/staged.md, "Kept" and "Rollback"), through the real
CLI on the local connection with a real venv (tests/support/hostvenv.py): a staged deploy after a
rollback to an old version, a version pruned or moved away by hand, and a live version whose folder
is gone. The staged play is one ``command`` (it always changes something, so every ``--staged``
deploy stages and switches): seconds, no build.

Operator trial: ``deploy --staged`` (adopts v1, live v2), another (v3), ``rollback --to 1``, another
``deploy --staged`` (v4) removed v1, the version that served until that switch, because the prune
kept the highest numbers; ``rollback --plan`` and ``--dry-run`` then said "v4 -> v1" and the real
rollback failed. And with the live version's folder moved aside, ``rollback --to N`` failed with a
raw ``FileNotFoundError`` while ``facts`` listed the gone folder as live.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.support.fleet import fleetctl, last_run
from tests.support.hostvenv import make_venv


def _host(tmp_path: Path) -> tuple[Path, Path, Path]:
    venvs = tmp_path / "venvs"
    venvs.mkdir()
    venv = Path(make_venv(venvs / "serve", "bare", torch=False))
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w, venv: {venv}}}\n")
    play = tmp_path / "play.yaml"
    play.write_text("name: e\nhosts: all\ngather_facts: false\ntasks:\n  - name: hi\n    command: {argv: [echo, hi]}\n")
    return venv, inv, play


def _run(tmp_path: Path, inv: Path, *args: str, rc: int = 0):
    res = fleetctl("-i", str(inv), *args, home=tmp_path)
    assert res.returncode == rc, res.stdout + res.stderr
    assert "FileNotFoundError" not in res.stdout + res.stderr and "Errno" not in res.stdout + res.stderr, res.stdout
    return res


def _switch(tmp_path: Path) -> dict:
    hosts = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["me"]
    return next(t for t in hosts["tasks"] if t["action"] == "venv_switch")


def test_a_deploy_after_rolling_back_to_an_old_version_keeps_it_and_plan_agrees_with_rollback(tmp_path):
    venv, inv, play = _host(tmp_path)
    folder = venv.parent / ".serve-versions"
    deploy = ("deploy", "--hosts", "me", "--playbook", str(play), "--staged")
    _run(tmp_path, inv, *deploy)  # v1 adopted, v2 live
    _run(tmp_path, inv, *deploy)  # v3 live
    _run(tmp_path, inv, "rollback", "--hosts", "me", "--to", "1")
    assert os.readlink(venv) == str(folder / "v1")
    _run(tmp_path, inv, *deploy)  # v4 live: the switch from v1, which must stay (the rollback target)
    sw = _switch(tmp_path)
    assert "v1 -> v4" in sw["msg"] and "removed v2" in sw["msg"], sw["msg"]
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["v1", "v3", "v4"]

    # --plan, --dry-run and the rollback agree: back to v1, which is there
    for mode in ("--plan", "--dry-run"):
        res = _run(tmp_path, inv, "rollback", "--hosts", "me", mode)
        assert "v4 -> v1" in res.stdout + res.stderr, res.stdout
    res = _run(tmp_path, inv, "rollback", "--hosts", "me")
    assert "v4 -> v1" in res.stdout and os.readlink(venv) == str(folder / "v1"), res.stdout

    # a pruned version, and one whose folder was moved away by hand, are refused alike by all three
    shutil.move(str(folder / "v3"), str(tmp_path / "aside"))
    for to, why in (("2", f"no environment v2 in {folder} (there: v1 (live), v3 (was-live, missing), v4 (was-live))"),
                    ("3", f"no environment v3 in {folder} (its folder {folder}/v3 is gone)")):
        for mode in ("--plan", "--dry-run", None):
            res = _run(tmp_path, inv, "rollback", "--hosts", "me", "--to", to, *([mode] if mode else []), rc=1)
            assert why in res.stdout + res.stderr, (to, mode, res.stdout + res.stderr)
        assert os.readlink(venv) == str(folder / "v1")

    # version numbers start at 1: bad input, one line, exit 2
    for to in ("0", "-1", "v0"):
        res = _run(tmp_path, inv, "rollback", "--hosts", "me", "--to", to, rc=2)
        assert len(res.stderr.strip().splitlines()) == 1 and "--to" in res.stderr, res.stderr


def test_rollback_rescues_a_host_whose_live_version_folder_is_gone(tmp_path):
    venv, inv, play = _host(tmp_path)
    folder = venv.parent / ".serve-versions"
    deploy = ("deploy", "--hosts", "me", "--playbook", str(play), "--staged")
    _run(tmp_path, inv, *deploy)  # v1 adopted, v2 live
    _run(tmp_path, inv, *deploy)  # v3 live
    shutil.move(str(folder / "v3"), str(tmp_path / "aside"))  # the live one, by hand

    # the venv's interpreter is gone with it: a deploy refuses the host, so facts fail it (exit 1)
    facts = json.loads(_run(tmp_path, inv, "facts", "--hosts", "me", "--json", rc=1).stdout)["me"]["environments"]
    assert facts["live_version"] == 3 and facts["live_missing"] is True and facts["versions"]["3"]["missing"], facts
    shown = _run(tmp_path, inv, "facts", "--hosts", "me", rc=1).stdout
    assert "the live version v3 is missing" in " ".join(shown.split()), shown

    # a staged deploy has nothing to stage from: refused while planning, in one line
    res = _run(tmp_path, inv, *deploy, rc=1)
    assert "the live version v3 of" in res.stdout and "is missing" in res.stdout, res.stdout

    for mode in ("--plan", "--dry-run"):
        res = _run(tmp_path, inv, "rollback", "--hosts", "me", "--to", "1", mode)
        assert "v3 -> v1" in res.stdout + res.stderr, res.stdout + res.stderr
    res = _run(tmp_path, inv, "rollback", "--hosts", "me", "--to", "1")
    assert os.readlink(venv) == str(folder / "v1") and (venv / "bin" / "python3").exists()
    msg = _switch(tmp_path)["msg"]
    assert "v3 -> v1" in msg and "the live version v3 is missing" in msg, msg
    # v3's record stays (put back, it is a rollback target again); v2 too
    shutil.move(str(tmp_path / "aside"), str(folder / "v3"))
    _run(tmp_path, inv, "rollback", "--hosts", "me")
    assert os.readlink(venv) == str(folder / "v3")
