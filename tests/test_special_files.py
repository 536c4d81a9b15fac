"""A FIFO (or socket, device) given where fleetctl reads a file (new-user trial: ``--playbook``
naming a FIFO hung forever, since open(2) of a FIFO blocks until a writer comes, fifo(7)): one
line naming the file and what it is, exit 2, nothing read. The real CLI on real FIFOs; each run has
a limit, so a regression fails instead of hanging the suite."""

from __future__ import annotations

import os

import pytest

from tests.support.fleet import fleetctl, write_inventory

FIFO = "is a FIFO (named pipe), not a regular file: reading it could block forever; give a file"


@pytest.fixture
def files(tmp_path):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local",
                                                                "workdir": str(tmp_path / "work")}}})
    os.mkfifo(tmp_path / "fifo.yaml")
    return inv, tmp_path / "fifo.yaml"


@pytest.mark.parametrize("args, prefix", [
    (["-i", "{fifo}", "inventory", "--list"], ""),
    (["-i", "{inv}", "deploy", "--hosts", "g", "--playbook", "{fifo}", "--plan"], ""),
    (["-i", "{inv}", "verify", "--hosts", "g", "--playbook", "{fifo}", "--plan"], ""),
    (["-i", "{inv}", "deploy", "--hosts", "g", "--plan", "-e", "@{fifo}"], "-e @FILE: "),
    (["-i", "{inv}", "schedule", "--hosts", "g", "--playbook", "{fifo}", "--at", "02:30", "--print"], "--playbook: "),
], ids=["inventory", "deploy-playbook", "verify-playbook", "extra-vars-file", "schedule-playbook"])
def test_a_fifo_given_as_an_input_file_is_refused_never_read(tmp_path, files, args, prefix):
    inv, fifo = files
    argv = [a.format(inv=inv, fifo=fifo) for a in args]
    res = fleetctl(*argv, home=tmp_path / "home", timeout_s=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr == f"fleetctl: error: {fifo}: {prefix}{FIFO}\n"
    assert not (tmp_path / "work").exists()  # refused before any host was reached


def test_a_fifo_in_an_inventory_folders_group_vars_is_refused(tmp_path):
    folder = tmp_path / "inventory"
    folder.mkdir()
    write_inventory(folder / "hosts.yaml", {"g": {"box": {"ansible_connection": "local"}}})
    (folder / "group_vars").mkdir()
    os.mkfifo(folder / "group_vars" / "g.yaml")
    res = fleetctl("-i", str(folder), "inventory", "--list", home=tmp_path / "home", timeout_s=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr == f"fleetctl: error: {folder / 'group_vars' / 'g.yaml'}: {FIFO}\n"


def test_process_substitution_is_read_as_ansible_users_give_it(tmp_path, files):
    """``-i <(command)`` hands fleetctl /dev/fd/N, an anonymous pipe whose writer is the command:
    read, not refused as a FIFO (real bash, the real CLI)."""
    import shlex
    import subprocess
    import sys
    inv, _ = files
    from tests.support.fleet import REPO
    env = dict(os.environ, FLEETCTL_HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "home" / "cache"))
    cmd = f"{shlex.quote(sys.executable)} -m fleetctl -i <(cat {shlex.quote(str(inv))}) inventory --list"
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120, env=env,
                         cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert '"box"' in res.stdout
