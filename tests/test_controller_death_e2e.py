"""A controller killed hard (SIGKILL: no handler, no cleanup) leaves nothing running on its hosts:
the command it ran there and the command's whole process group (a background child stands for
nvcc's or pip's children) end within seconds, and the host's deploy lock is free at once, so the
next deploy runs (fresh operator's trial: a ``kill -9`` of a deploy left a ``sleep 600`` running
and holding the host).

Over SSH, the supervisor script (fleetctl/connection/command.py) sees its channel's stdin reach
EOF when sshd drops the session of a closed connection, and stops the group. A ``local`` command
is a child of the controller itself: its watcher (fleetctl/connection/groupwatch.py) sees the
controller's end of its pipe close. Real sshd on loopback, real fleetctl processes."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fleet import REPO, fleetctl, write_inventory
from tests.support.netfaults import CutLink
from tests.test_faults_e2e import wait_for

pytestmark = pytest.mark.sshd

#: Seconds a killed controller's command may outlive it: the supervisor's SIGTERM comes at once,
#: its SIGKILL after 5 s; the rest is slack for a loaded machine.
GONE_WITHIN_S = 30


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (proc(5): the state after the command name)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _watched(pgid: int) -> bool:
    """A local command's watcher for process group ``pgid`` runs (its argv names the group)."""
    want = f"fleetctl-watch\0{pgid}\0".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and want in (entry / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _lock_free(path: Path) -> bool:
    """Nobody holds flock(2) on ``path`` (the deploy lock is taken with flock)."""
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


def _play(path: Path, argv: list[str]) -> Path:
    path.write_text(f"name: q\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {{argv: {argv!r}}}\n")
    return path


@pytest.mark.parametrize("command", ["deploy", "run"])
@pytest.mark.parametrize("kind", ["ssh", "local"])
def test_a_sigkilled_controller_leaves_no_command_running_and_frees_the_deploy_lock(sshd_farm, tmp_path, kind,
                                                                                    command):
    work = tmp_path / "work"
    if kind == "ssh":
        h = sshd_farm.start("orphan")
        entry = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(work)}
    else:
        entry = {"ansible_connection": "local", "workdir": str(work)}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": entry}})
    pids = tmp_path / "pids"
    # a command whose process group holds two processes: itself and a background child
    argv = ["sh", "-c", f'sleep 600 & echo "$$ $!" > {pids}.tmp && mv {pids}.tmp {pids}; wait']
    if command == "deploy":
        args = ["deploy", "--hosts", "g", "--playbook", str(_play(tmp_path / "p.yaml", argv))]
    else:
        args = ["run", "--hosts", "g", "--", *argv]
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    shell = child = 0
    try:
        assert wait_for(pids.exists, 120), proc.stderr.read() if proc.poll() is not None else "no command started"
        shell, child = map(int, pids.read_text().split())
        assert _alive(shell) and _alive(child)
        if kind == "local":  # its watcher starts right after it (fleetctl/connection/groupwatch.py); without
            wait_for(lambda: _watched(shell), 30)  # one, the assertion on the processes below fails
        if command == "deploy":
            assert not _lock_free(work / "deploy.lock")  # held while the deploy runs
        proc.kill()
        proc.wait()
        gone = wait_for(lambda: not _alive(shell) and not _alive(child), GONE_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
        survivors = [p for p in (shell, child) if p and _alive(p)]
        for pid in survivors:  # what the fix should have ended: not left behind by the test
            os.kill(pid, 9)
    assert gone, f"the command's processes {survivors} outlived the SIGKILLed controller by {GONE_WITHIN_S} s"
    if command != "deploy":
        return
    assert wait_for(lambda: _lock_free(work / "deploy.lock"), GONE_WITHIN_S)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(_play(tmp_path / "p.yaml", ["true"])),
                   home=tmp_path, timeout_s=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "stale deploy lock" not in res.stdout + res.stderr  # the lock's holder cleared its record too


@pytest.mark.parametrize("command", ["deploy", "run"])
def test_a_controller_cut_off_from_its_host_leaves_no_command_running_there(sshd_farm, tmp_path, command):
    # the operator's laptop lost its network, then the controller died: no FIN and no RST reach the
    # host, and sshd (no ClientAliveInterval, sshd_config(5)'s default) keeps the session for hours;
    # the command's supervisor misses the controller's heartbeats and stops its process group
    h = sshd_farm.start("cutoff")
    link = CutLink(h.port)
    known = tmp_path / "known_hosts"
    known.write_text(h.known_hosts_line.replace(f":{h.port} ", f":{link.port} ") + "\n")
    entry = {**h.inventory_vars(known), "ansible_port": link.port, "workdir": str(tmp_path / "work"),
             "keepalive_interval": 1}  # heartbeats every 1 s, missed for 4 s: the command is stopped
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": entry}})
    pids = tmp_path / "pids"
    argv = ["sh", "-c", f'sleep 600 & echo "$$ $!" > {pids}.tmp && mv {pids}.tmp {pids}; wait']
    if command == "deploy":  # the deploy lock's holder lets go too
        args = ["deploy", "--hosts", "g", "--playbook", str(_play(tmp_path / "p.yaml", argv))]
    else:
        args = ["run", "--hosts", "g", "--", *argv]
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), *args],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    shell = child = 0
    try:
        assert wait_for(pids.exists, 120), proc.stderr.read() if proc.poll() is not None else "no command started"
        shell, child = map(int, pids.read_text().split())
        if command == "deploy":
            assert not _lock_free(tmp_path / "work" / "deploy.lock")  # held while the deploy runs
        link.cut()
        proc.kill()
        proc.wait()
        gone = wait_for(lambda: not _alive(shell) and not _alive(child), GONE_WITHIN_S)
        # the link stays cut while the lock is looked at: closing it would let sshd see the end
        freed = command != "deploy" or wait_for(lambda: _lock_free(tmp_path / "work" / "deploy.lock"), GONE_WITHIN_S)
        record = (tmp_path / "work" / "deploy.lock").read_text().strip() if command == "deploy" else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
        survivors = [p for p in (shell, child) if p and _alive(p)]
        for pid in survivors:
            os.kill(pid, 9)
        link.close()
    assert gone, f"the command's processes {survivors} outlived the cut-off controller by {GONE_WITHIN_S} s"
    assert freed, f"the deploy lock was still held {GONE_WITHIN_S} s after the controller was cut off"
    assert not record, record  # its holder cleared the record as it let go
