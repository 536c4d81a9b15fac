"""An inventory given explicitly (``-i``, ``FLEETCTL_INVENTORY``, ``Fleet(...)``) is read where it
was given and never replaced by fleetctl's own example inventory (``inventory.yaml`` in the
checkout, whose ``localhost`` is this controller); only the default (nothing given) falls back to
the checkout. Through the real CLI, run from a folder that has no inventory.yaml."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl import Fleet
from fleetctl.errors import InputError
from tests.support.fleet import REPO

def cli(*args: str, cwd: Path, home: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "FLEETCTL_INVENTORY"}
    full.update({"FLEETCTL_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], capture_output=True, text=True, timeout=300,
                          env=full, cwd=cwd)


@pytest.mark.parametrize("how", [["-i", "inventory.yaml"], ["-i", "./inventory.yaml"], ["env"],
                                 ["-i", "inventory.yaml", "-i", "other.yaml"]])
@pytest.mark.parametrize("command", [["hosts", "all"], ["inventory", "--list"],
                                     ["deploy", "--hosts", "all", "--plan"], ["run", "--hosts", "all", "--", "true"]])
def test_an_explicit_inventory_that_is_not_there_is_refused_naming_it(tmp_path, how, command):
    (tmp_path / "other.yaml").write_text("all:\n  hosts:\n    n1: {ansible_connection: local}\n")
    env = {"FLEETCTL_INVENTORY": "inventory.yaml"} if how == ["env"] else None
    args = [] if how == ["env"] else how
    res = cli(*args, *command, cwd=tmp_path, home=tmp_path / "state", env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    name = "inventory.yaml" if how == ["env"] else how[1]
    assert res.stderr == f"fleetctl: error: {name}: inventory file not found (-i/--inventory or FLEETCTL_INVENTORY)\n"
    assert "localhost" not in res.stdout and "gpu01" not in res.stdout
    assert not (tmp_path / "state" / "runs").exists() or not any((tmp_path / "state" / "runs").iterdir())


def test_the_default_still_falls_back_to_the_checkout_and_a_given_file_is_read_where_given(tmp_path):
    assert (REPO / "inventory.yaml").is_file()
    # nothing given: fleetctl's own, and the operator is told so (once), as Ansible warns when it
    # parses no inventory: its localhost is this controller
    note = (f"fleetctl: warning: no inventory given (-i or FLEETCTL_INVENTORY) and no inventory.yaml in {tmp_path}: "
            f"using fleetctl's embedded default {REPO / 'inventory.yaml'} (its 'local' group is this machine; "
            f"'gpu-nodes' is an example fleet)\n")
    for command in (["hosts", "all"], ["inventory", "--list"], ["run", "--hosts", "local", "--", "echo", "hi"]):
        res = cli(*command, cwd=tmp_path, home=tmp_path / "state")
        assert res.returncode == 0 and "localhost" in res.stdout + res.stderr, res.stderr
        assert res.stderr.count(note) == 1, res.stderr
    (tmp_path / "inventory.yaml").write_text("all:\n  hosts:\n    mine: {ansible_connection: local}\n")
    for args in ([], ["-i", "inventory.yaml"], ["-i", str(tmp_path / "inventory.yaml")]):
        res = cli(*args, "hosts", "all", cwd=tmp_path, home=tmp_path / "state")
        assert res.returncode == 0 and "mine" in res.stdout and "localhost" not in res.stdout, res.stderr
        assert "warning" not in res.stderr, res.stderr


def test_the_api_refuses_a_given_inventory_that_is_not_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as info:
        Fleet.from_inventory("inventory.yaml")
    # from Python the fix is the argument, not the CLI's flags
    assert str(info.value) == "inventory.yaml: inventory file not found (Fleet.from_inventory(*sources) or Fleet(sources))"
    with pytest.raises(InputError, match=r"^x.yaml: inventory file not found"):
        Fleet(["x.yaml"]).select("all")
    with pytest.raises(InputError, match=r"^inventory.yaml: inventory file not found"):
        Fleet("inventory.yaml").inventory  # noqa: B018
    told: list[str] = []
    assert "localhost" in Fleet(on_warning=told.append).inventory.hosts
    assert "localhost" in Fleet.from_inventory(on_warning=told.append).inventory.hosts
    assert len(told) == 2 and all(f"no inventory.yaml in {tmp_path}: using fleetctl's embedded default" in t
                                  for t in told), told
    monkeypatch.chdir(REPO)  # README's "From Python" runs from the checkout, where inventory.yaml is
    assert "localhost" in Fleet.from_inventory("inventory.yaml").inventory.hosts
