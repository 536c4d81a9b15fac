"""A command killed by a signal over SSH says which signal, as on the local host (operator trial:
``sh -c 'kill -KILL $$'`` gave ``rc=137, signal=None`` over SSH and ``signal KILL`` locally, so an
OOM kill read as a plain exit status 137), while a program that exits 137 itself keeps rc=137;
under every login shell, against real sshd test hosts."""

from __future__ import annotations

import json

import pytest

from tests.support.fleet import fleetctl, write_inventory

pytestmark = pytest.mark.sshd


@pytest.mark.parametrize("shell", [None, "bash", "fish", "tcsh"])
def test_a_signal_that_ends_a_command_over_ssh_is_reported_as_the_signal(sshd_farm, tmp_path, shell):
    h = sshd_farm.start(f"sig-{shell or 'default'}", **({"shell": shell} if shell else {}))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h1": h.inventory_vars(sshd_farm.known_hosts),
                                                        "localhost": {"ansible_connection": "local"}}})
    got = {}
    for what, script in (("killed", "kill -KILL $$"), ("term", "kill -TERM $$"), ("exit", "exit 137")):
        res = fleetctl("-i", str(inv), "run", "--hosts", "h1:localhost", "--json", "--", "sh", "-c", script,
                       home=tmp_path, timeout_s=120)
        assert res.returncode == 1, res.stdout + res.stderr
        doc = json.loads(res.stdout)
        got[what] = {n: (doc[n].get("rc"), doc[n].get("signal"), doc[n].get("error")) for n in ("h1", "localhost")}
    assert got["killed"]["h1"] == got["killed"]["localhost"] == (None, "KILL", "signal KILL"), got
    assert got["term"]["h1"] == got["term"]["localhost"] == (None, "TERM", "signal TERM"), got
    assert got["exit"]["h1"][:2] == got["exit"]["localhost"][:2] == (137, None), got
