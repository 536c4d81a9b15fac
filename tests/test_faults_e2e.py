"""Faults against real sshd test hosts: each fails within its deadline with its cause, the others finish."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd


def children(pid: int) -> list[int]:
    """Every descendant pid of ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out.append(int(entry.name))
    return out + [g for c in out for g in children(c)]


def pids_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def wait_for(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)  # polling for an outside process's state
    return False


class SilentServer:
    """Accepts TCP connections and never says anything (a hung sshd)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


class BlackHole:
    """A port whose SYNs are dropped: a listener with a full backlog that never accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fillers = []
        for _ in range(4):  # fill the accept queue; later SYNs are dropped by the kernel
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(s)
        time.sleep(0.2)  # let the kernel finish the filler handshakes

    def close(self) -> None:
        for s in self.fillers:
            s.close()
        self.sock.close()


def test_no_banner_and_dropped_packets_fail_within_the_deadline_with_their_cause(sshd_farm, tmp_path):
    good = sshd_farm.start("good")
    silent, hole = SilentServer(), BlackHole()
    try:
        hosts = {
            "good": good.inventory_vars(sshd_farm.known_hosts),
            "nobanner": {"ansible_host": "127.0.0.1", "ansible_port": silent.port, "known_hosts": str(sshd_farm.known_hosts)},
            "blackhole": {"ansible_host": "127.0.0.1", "ansible_port": hole.port, "known_hosts": str(sshd_farm.known_hosts)},
        }
        inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
        started = time.monotonic()
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--connect-timeout", "3", "--", "echo", "hi",
                       home=tmp_path)
        elapsed = time.monotonic() - started
    finally:
        silent.close()
        hole.close()
    out = json.loads(res.stdout)
    assert res.returncode == 1
    assert out["good"]["stdout"] == "hi\n"
    assert "sent no SSH banner" in out["nobanner"]["error"]
    assert "no TCP connection" in out["blackhole"]["error"]
    assert elapsed < 60  # two 3 s deadlines, plus a loaded machine's slack


def test_dropped_connection_stops_the_remote_build_and_a_rerun_is_clean(sshd_farm, tmp_path):
    """The host is unreachable naming the task it was lost in, not its command's ``sh``, and the
    tasks column shows the tasks that ran: the one done and the one lost (fresh operator's trial:
    ``hz: UNREACHABLE: connection lost during /bin/sh: ...`` with an empty tasks column, the build
    task named only by ``fleetctl logs``)."""
    host = sshd_farm.start("drop")
    marker = f"fleetctl-drop-{os.getpid()}"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"drop": host.inventory_vars(sshd_farm.known_hosts)}})
    play = tmp_path / "long.yaml"
    play.write_text("name: long build\nhosts: all\ngather_facts: false\ntasks:\n"
                    "  - name: prepare\n    command: {argv: ['true']}\n"
                    f"  - name: build kernels\n    command: {{argv: [sh, -c, 'echo started; exec sleep 600 # {marker}']}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "g", "--playbook",
                             str(play)], cwd=Path(__file__).resolve().parents[1],
                            env={**os.environ, "FLEETCTL_HOME": str(tmp_path)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: any(b"out| started" in log.read_bytes()
                                for log in (tmp_path / "runs").glob("*/logs/drop.log")), 30)
    for pid in children(host.proc.pid):  # the per-connection sshd processes die: the connection drops
        try:
            if b"sshd" in cmdline(pid):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["hosts"]["drop"]["status"] == "unreachable"
    error = record["hosts"]["drop"]["error"]
    assert error.startswith("connection lost during task 'build kernels' (command): "), error
    assert [(t["name"], t["status"]) for t in record["hosts"]["drop"]["tasks"]] == [
        ("prepare", "changed"), ("build kernels", "unreachable")], record["hosts"]["drop"]["tasks"]
    assert re.search(r"│ drop\s+│ unreachable\s+│ CU\s+│", out), out[-3000:]  # the tasks that ran
    assert f"drop: UNREACHABLE: {error}" in " ".join(out.split()), out[-3000:]
    assert b"started" in (last_run(tmp_path) / "logs" / "drop.log").read_bytes()
    # the remote build does not keep running unobserved: its process group was stopped
    assert wait_for(lambda: not [p for p in pids_with(marker) if b"sleep" in cmdline(p)], 15)
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: ok\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    again = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(ok), home=tmp_path)
    assert again.returncode == 0, again.stdout[-2000:]


def test_sshd_that_stops_answering_mid_build_is_detected_by_keepalives(sshd_farm, tmp_path):
    host = sshd_farm.start("frozen")
    other = sshd_farm.start("fine")
    hv = {**host.inventory_vars(sshd_farm.known_hosts), "keepalive_interval": 1}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"frozen": hv, "fine": other.inventory_vars(sshd_farm.known_hosts)}})
    play = tmp_path / "long.yaml"
    play.write_text("name: long\nhosts: all\ngather_facts: false\ntasks:\n"
                    "  - name: build\n    command: {argv: [sh, -c, 'echo started; sleep 4; echo done']}\n")
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "g", "--playbook",
                             str(play)], cwd=Path(__file__).resolve().parents[1],
                            env={**os.environ, "FLEETCTL_HOME": str(tmp_path)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: any(b"out| started" in log.read_bytes()
                                for log in (tmp_path / "runs").glob("*/logs/frozen.log")), 30)
    stopped = [p for p in children(host.proc.pid) if b"sshd" in cmdline(p)]
    for pid in [host.proc.pid, *stopped]:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        proc.communicate(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        for pid in [host.proc.pid, *stopped]:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert proc.returncode == 1
    assert elapsed < 60  # keepalives every 1 s, 3 missed; generous for a loaded machine
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["hosts"]["frozen"]["status"] == "unreachable"
    assert record["hosts"]["fine"]["status"] == "ok"


def test_a_timed_out_command_is_stopped_on_the_host(sshd_farm, tmp_path):
    host = sshd_farm.start("slow")
    marker = f"fleetctl-timeout-{os.getpid()}"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"slow": host.inventory_vars(sshd_farm.known_hosts)}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--timeout", "2", "--", "sh", "-c",
                   f"sleep 300 # {marker}", home=tmp_path)
    assert res.returncode == 1
    assert "timed out after 2 s" in json.loads(res.stdout)["slow"]["error"]
    assert wait_for(lambda: not [p for p in pids_with(marker) if b"sleep" in cmdline(p)], 15)
