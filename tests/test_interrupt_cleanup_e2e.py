"""An interrupted run leaves nothing running or half-written on its hosts (operator trial):

- a hung ``nvidia-smi`` (a login user's PATH starts with one that sleeps for ever) is stopped with
  its children when ``fleetctl facts`` gets SIGTERM, or ``deploy --dry-run`` gets SIGINT, while
  the facts wait for it: the first command's script stops its children, whose sessions are their
  own, once its stdin (held open by the controller) closes;

Real sshd on loopback, real fleetctl processes, real signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fleet import REPO, write_inventory
from tests.test_faults_e2e import wait_for

pytestmark = pytest.mark.sshd


def _running(token: str) -> list[int]:
    """Pids whose argv holds ``token``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if token.encode() in argv:
                found.append(int(name))
    return found


def _interrupt(argv: list[str], env: dict, ready, sig: int) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", *argv], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if not wait_for(ready, 60):
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"{argv}: not ready in 60 s (rc {proc.returncode}): {out[-1500:]} {err[-1500:]}")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_an_interrupted_facts_stops_a_hung_nvidia_smi_on_the_host(sshd_farm, tmp_path):
    host = sshd_farm.start("hang")
    token = str(900000 + os.getpid() % 99999)  # this test's sleep, told apart from any other
    marks = tmp_path / "smi-started"
    smi = host.bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho $$ >> {marks}\nsleep {token}\n")
    smi.chmod(0o755)
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu": {
        "hang": {**host.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work")}}})
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    try:
        for n, (argv, sig) in enumerate(((["facts", "--hosts", "hang"], signal.SIGTERM),
                                         (["deploy", "--hosts", "hang", "--dry-run"], signal.SIGINT)), 1):
            done = _interrupt(["-i", str(inv), *argv], env, 
                             lambda: marks.exists() and len(marks.read_text().split()) == n and _running(token), sig)
            assert done.returncode == 128 + sig, (argv, done.returncode, done.stderr[-2000:])
            # gone within the supervisor's TERM-then-KILL time, long before the 30 s GPU timeout
            assert wait_for(lambda: not _running(token), 10), (argv, "nvidia-smi's sleep still runs")
            smi_pid = int(marks.read_text().split()[-1])
            assert not Path(f"/proc/{smi_pid}").exists(), (argv, "the hung nvidia-smi still runs")
    finally:
        for pid in _running(token):
            os.kill(pid, signal.SIGKILL)

