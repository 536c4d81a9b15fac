"""A host's ``venv`` that is not there fails that host alone, a local host's as an SSH host's
(operator trial: ``venv: /tmp/novenv`` on the controller's ``local`` host refused the whole run,
exit 2, ``...localhost.venv: venv '/tmp/novenv' of local host 'localhost' does not exist``, and
the SSH hosts never ran, even for a playbook that never uses the venv). Real sshd host, the real
CLI."""

from __future__ import annotations

import pytest

from fleetctl.api import Fleet
from tests.support.fleet import fleetctl, write_inventory

HELLO = "name: hello\nhosts: all\ntasks:\n  - name: say\n    command: {argv: [echo, hello]}\n"


@pytest.mark.sshd
def test_a_missing_venv_on_the_local_host_fails_that_host_alone_worded_as_an_ssh_hosts(sshd_farm, tmp_path,
                                                                                      monkeypatch):
    host = sshd_farm.start("novenv")
    missing = str(tmp_path / "novenv")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "localhost": {"ansible_connection": "local", "venv": missing, "workdir": str(tmp_path / "work")},
        "ssh1": {**host.inventory_vars(sshd_farm.known_hosts), "venv": missing}}})
    play = tmp_path / "hello.yaml"
    play.write_text(HELLO)
    # a playbook that never uses the venv runs on both
    res = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "all", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "localhost | hello" in res.stdout and "ssh1      | hello" in res.stdout, res.stdout
    # facts: both hosts failed (a deploy refuses them), one warning, the same for both hosts (not
    # an error naming the inventory's line)
    res = fleetctl("-i", str(inv), "facts", "--hosts", "all", home=tmp_path)
    assert res.returncode == 1 and "error" not in res.stderr, res.stdout + res.stderr
    line = f"venv {missing}: {missing}/bin/python3: no such interpreter"
    assert all(f"{h}: FAILED: {line}" in res.stdout for h in ("localhost", "ssh1")), res.stdout
    # the cause on each FAILED line, not said again as a warning note after them
    warned = [ln for ln in (res.stdout + res.stderr).splitlines() if line in ln and ": warning: " in ln]
    assert warned == [], res.stdout + res.stderr
    # the API's deploy and facts alike (they raised InputError)
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path))
    nodes = Fleet.from_inventory(inv).select("all")
    assert nodes.deploy(play).ok
    facts = nodes.facts()
    assert not facts.ok and {h: f.status for h, f in facts.facts.items()} == {"localhost": "failed", "ssh1": "failed"}
    assert {h: f.raw["python"]["error"] for h, f in facts.facts.items()} == {
        "localhost": f"{missing}/bin/python3: no such interpreter", "ssh1": f"{missing}/bin/python3: no such interpreter"}
    # the default deploy's plan fails each host with that line (one group: the same words for
    # both), a failure of those hosts (exit 1), not bad input (exit 2)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--plan", home=tmp_path)
    assert res.returncode == 1 and "error:" not in res.stderr, res.stdout[-3000:] + res.stderr[-2000:]
    assert "\nlocalhost,ssh1\n  failed\n" in res.stdout and res.stdout.count(f"preflight: {line}") == 1, res.stdout
