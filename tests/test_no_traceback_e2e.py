"""No traceback, ever: the CLI's paths (deploy, two controllers on one host, run, facts, verify, an
unreachable host, an interrupted run) under ``PYTHONASYNCIODEBUG=1`` and ``-W error`` (Python's
asyncio debug mode logs every task that ends with an exception nobody retrieved, "Task exception
was never retrieved", and every coroutine never awaited), against real sshd test hosts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fleet import REPO, write_inventory
from tests.support.sshd import free_port
from tests.test_faults_e2e import wait_for

pytestmark = pytest.mark.sshd

STRICT = {"PYTHONASYNCIODEBUG": "1"}
#: What must never reach the operator's terminal.
SIGNS = ("Traceback (most recent call last)", "never retrieved", "was never awaited", "Exception ignored",
         "RuntimeWarning", "ResourceWarning", "Unclosed", "unclosed")

HOLD = """\
name: hold
hosts: all
gather_facts: false
tasks:
  - name: hold the host
    command: {argv: [sh, -c, 'echo holding; n=0; while [ ! -e "$1" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done', sh, GO]}
"""

QUICK = """\
name: quick
hosts: all
tasks:
  - name: say
    command: {argv: [echo, hello]}
"""


def start(args: list[str], home: Path) -> subprocess.Popen:
    env = {**os.environ, "FLEETCTL_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), **STRICT}
    return subprocess.Popen([sys.executable, "-W", "error", "-m", "fleetctl", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def clean(proc: subprocess.Popen, what: str, timeout_s: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout_s)
    for sign in SIGNS:
        assert sign not in err and sign not in out, f"{what}: {sign!r} in\n{err[-4000:]}"
    return proc.returncode, out, err


def test_no_path_of_the_cli_prints_a_traceback_or_leaves_a_task_unobserved(sshd_farm, tmp_path):
    host = sshd_farm.start("strict")
    dead = {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "ansible_user": "nobody",
            "ansible_ssh_private_key_file": str(sshd_farm.client_key)}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"strict": host.inventory_vars(sshd_farm.known_hosts)},
                                                  "gone": {"dead": dead}})
    quick, hold = tmp_path / "quick.yaml", tmp_path / "hold.yaml"
    quick.write_text(QUICK)
    go = tmp_path / "go"
    hold.write_text(HOLD.replace("GO", str(go)))
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    i = ["-i", str(inv)]

    rc, _, _ = clean(start([*i, "deploy", "--hosts", "g", "--playbook", str(quick)], home_a), "deploy")
    assert rc == 0
    rc, _, _ = clean(start([*i, "run", "--hosts", "g", "--", "true"], home_a), "run")
    assert rc == 0
    rc, _, _ = clean(start([*i, "run", "--hosts", "g", "--", "--version"], home_a), "run of a missing program")
    assert rc != 0
    rc, _, _ = clean(start([*i, "facts", "--hosts", "g"], home_a), "facts")
    assert rc == 0
    clean(start([*i, "verify", "--hosts", "g"], home_a), "verify")
    rc, _, err = clean(start([*i, "run", "--hosts", "all", "--", "true"], home_a), "unreachable host")
    assert rc != 0 and "dead" in err
    clean(start([*i, "facts", "--hosts", "dead"], home_a), "facts of an unreachable host")

    # two controllers on one host: the second is refused by the host's deploy lock, 3 times
    first = start([*i, "deploy", "--hosts", "g", "--playbook", str(hold)], home_a)
    lock = host.home / ".fleetctl" / "strict" / "deploy.lock"
    assert wait_for(lambda: lock.exists() and lock.read_text().strip(), 60)
    for n in range(3):
        rc, out, err = clean(start([*i, "deploy", "--hosts", "g", "--playbook", str(hold)], home_b),
                             f"second controller, try {n + 1}")
        assert rc == 1 and "is held by run" in out + err
    go.touch()
    rc, _, _ = clean(first, "first controller")
    assert rc == 0

    # an interrupted run (Ctrl-C, then SIGTERM)
    for sig in (signal.SIGINT, signal.SIGTERM):
        go.unlink(missing_ok=True)
        before = set((home_a / "runs").glob("*/logs/strict.log"))
        proc = start([*i, "deploy", "--hosts", "g", "--playbook", str(hold)], home_a)
        assert wait_for(lambda: any(b"out| holding" in p.read_bytes()
                                    for p in set((home_a / "runs").glob("*/logs/strict.log")) - before), 60)
        proc.send_signal(sig)
        rc, out, err = clean(proc, f"interrupted by {sig.name}")
        assert rc == 128 + sig, (rc, err[-2000:])
