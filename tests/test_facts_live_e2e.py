"""``fleetctl facts`` with one host whose login shell hangs (``~/.bashrc`` waiting on a dead NFS
home or module system): a fresh operator's trial saw nothing printed for 182 s although the other
hosts had answered in 2 s, and ``facts`` had no way to shorten the 180 s facts deadline
(:data:`fleetctl.engine.deadlines.FACTS_TIMEOUT_S`). Each host's line is now printed as its facts
come in (as Ansible prints each host's result as it comes), and ``--phase-timeout facts=S`` works
as in deploy. Real sshd on loopback; the hung host's rc file waits while a file the test holds
exists (the test lets it go, polling, never sleeping), so the order of lines is the only thing
asserted, never a duration."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, write_inventory

pytestmark = pytest.mark.sshd


def _fleet(sshd_farm, tmp_path):
    """A good host (H200) and a bash host whose ~/.bashrc waits while ``hold`` exists."""
    good = sshd_farm.start("fl-good")
    write_fake_nvidia_smi(good.bin_dir, [H200])
    hung = sshd_farm.start("fl-hung", shell="bash")
    home = Path(pwd.getpwnam(hung.user).pw_dir)
    hosts = {"good": {**good.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work")},
             "hung": {**hung.inventory_vars(sshd_farm.known_hosts), "workdir": str(home / "fl")}}
    return write_inventory(tmp_path / "inv.yaml", {"g": hosts}), home


def test_facts_prints_each_host_as_it_answers_and_takes_the_facts_phase_timeout(sshd_farm, tmp_path):
    inv, home = _fleet(sshd_farm, tmp_path)
    hold, rc = home / "hold-facts", home / ".bashrc"
    hold.touch()
    rc.write_text(f"while [ -e {hold} ]; do sleep 0.1; done\n")
    try:
        env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
        proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "facts", "--hosts", "g",
                                 "--phase-timeout", "facts=60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=REPO)
        early = []
        for line in proc.stdout:  # the good host's line, while the hung host is still held
            early.append(line.rstrip("\n"))
            if line.startswith("good: "):
                break
        hold.unlink()  # only now can the hung host's login shell start the facts command
        rest, err = proc.communicate(timeout=300)
        # before the fix the good host's line came only after the hung host had timed out (rc 1)
        assert proc.returncode == 0, "\n".join(early) + rest + err
        assert early[-1].startswith("good: ok: gpus NVIDIA H200 (9.0); arch list 9.0a; cuda "), early
        assert not any(ln.startswith("hung") for ln in early), early
        later = rest.splitlines()
        assert later[0].startswith("hung: ok: gpus none; arch list "), rest
        # piped, the table is too narrow to be one: its blocks would say each host a second time
        assert "facts" not in later and "good" not in later and "hung" not in later, rest

        # the facts deadline is the operator's: the hung host fails after 3 s, naming its login shell
        hold.touch()
        res = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--phase-timeout", "facts=3", home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        lines = res.stdout.splitlines()
        assert "hung: FAILED (the cause below)" in lines and any(ln.startswith("good: ok: ") for ln in lines), lines
        cause = next(ln for ln in lines if ln.startswith("hung: FAILED: "))
        assert cause.startswith("hung: FAILED: command timed out after 3 s: python3: the remote login shell had not "
                                "started the command after 3 s: "), cause
        res = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--phase-timeout", "facts=3", "--json", home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        doc = json.loads(res.stdout)  # --json: one document, no host lines
        assert doc["good"]["gpus"][0]["compute_cap"] == "9.0"
        assert "command timed out after 3 s" in doc["hung"]["error"], doc["hung"]
    finally:
        hold.unlink(missing_ok=True)
        rc.write_text("")
        shutil.rmtree(home / "fl", ignore_errors=True)


def test_facts_refuses_a_bad_phase_timeout_in_one_line(tmp_path):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"l1": {"ansible_connection": "local"}}})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--phase-timeout", "facts=0", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr == "fleetctl: error: --phase-timeout facts: want a positive number of seconds, got '0'\n"
