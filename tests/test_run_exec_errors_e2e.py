"""``fleetctl run`` of a command that cannot start says so in words, not only rc=127 beside an
internal "setsid: failed to execute" line: on the local host and over real SSH alike."""

from __future__ import annotations

import pytest

from tests.support.fleet import fleetctl, write_inventory


@pytest.mark.sshd
def test_a_missing_or_unexecutable_command_is_named(sshd_farm, tmp_path):
    home = tmp_path / "home"
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {
        "s1": sshd_farm.start("s1").inventory_vars(sshd_farm.known_hosts),
        "me": {"ansible_connection": "local"}}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "fleet", "--", "no-such-cmd-xyz", home=home)
    assert res.returncode == 1
    # over SSH the login's PATH is named (operator trial: a ~/.zshenv PATH without /usr/bin; see
    # tests/test_login_path_e2e.py); the local host's PATH is the operator's own
    assert "s1: FAILED: rc=127: no-such-cmd-xyz could not start on the host: not found on the login's PATH (/" \
        in res.stderr, res.stderr
    assert "me: FAILED: rc=127: no-such-cmd-xyz could not start on the host: No such file or directory" \
        in res.stderr, res.stderr
    # the host's own line names the program, never fleetctl's setsid wrapper (new-user trial:
    # "s1 | setsid: failed to execute nvidia-smi: No such file or directory")
    assert "s1 | no-such-cmd-xyz: No such file or directory" in res.stdout, res.stdout
    assert "setsid" not in res.stdout + res.stderr, res.stdout + res.stderr
    script = tmp_path / "notexec.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)  # no x bit: execve refuses it, even for root
    res = fleetctl("-i", str(inv), "run", "--hosts", "fleet", "--", str(script), home=home)
    for host in ("s1", "me"):
        assert f"{host}: FAILED: rc=12" in res.stderr and \
            f": {script} could not start on the host: Permission denied" in res.stderr.split(f"{host}: FAILED: ")[1], \
            res.stderr
    assert f"s1 | {script}: Permission denied" in res.stdout and "setsid" not in res.stdout, res.stdout
    ok = fleetctl("-i", str(inv), "run", "--hosts", "fleet", "--", "sh", "-c", "exit 127", home=home)
    # a command that exits 127 itself keeps its bare status: the code alone cannot tell
    assert "s1: FAILED: rc=127\n" in ok.stderr and "could not start" not in ok.stderr, ok.stderr
