"""An interrupted run leaves nothing running or half-written on its hosts (operator trial):

- a hung ``nvidia-smi`` (a login user's PATH starts with one that sleeps for ever) is stopped with
  its children when ``fleetctl facts`` gets SIGTERM, or ``deploy --dry-run`` gets SIGINT, while
  the facts wait for it: the first command's script stops its children, whose sessions are their
  own, once its stdin (held open by the controller) closes;

Real sshd on loopback, real fleetctl processes, real signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fleet import REPO, last_run, write_inventory
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


def _alive(pid: int) -> bool:
    """The process runs (a zombie, dead and not yet reaped by its new parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


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
    hosttmp = tmp_path / "host-tmp"  # the host's TMPDIR: a --dry-run's scratch copy of the facts script
    hosttmp.mkdir()
    host = sshd_farm.start("hang", env={"TMPDIR": str(hosttmp)})
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
            assert wait_for(lambda: not _alive(smi_pid), 10), (argv, "the hung nvidia-smi still runs")
            assert list(hosttmp.iterdir()) == [], (argv, "a stop left its scratch folder on the host")
    finally:
        for pid in _running(token):
            os.kill(pid, signal.SIGKILL)


def _parts(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part")) if folder.is_dir() else []


def test_an_interrupted_copy_leaves_no_part_file_and_a_later_one_clears_stale_ones(sshd_farm, tmp_path):
    """SIGINT (SFTP), SIGTERM and SIGKILL (no SFTP: the exec fallback) during a copy of a 256 MiB
    file: the part file is gone once fleetctl has exited, and no cut-off file has DEST's name; a later copy to the same DEST removes a part file
    of its own naming that has not changed for STALE_PART_S, and leaves a fresh one alone."""
    from fleetctl.connection.ssh_files import STALE_PART_S

    big = tmp_path / "big"
    with big.open("wb") as fh:  # written, not sparse
        for _ in range(256):
            fh.write(b"\x01" * (1 << 20))
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for name, sftp, sig in (("cp-sftp", True, signal.SIGINT), ("cp-exec", False, signal.SIGTERM),
                            ("cp-kill", False, signal.SIGKILL)):
        host = sshd_farm.start(name, sftp=sftp)
        inv = write_inventory(tmp_path / f"{name}.yaml", {"g": {
            name: {**host.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / f"w-{name}")}}})
        dest = tmp_path / f"dest-{name}"

        def writing() -> bool:
            return any((1 << 20) < (dest / p).stat().st_size < (128 << 20) for p in _parts(dest) if (dest / p).exists())
        done = _interrupt(["-i", str(inv), "copy", str(big), f"{dest}/big", "--hosts", name], env, writing, sig)
        assert done.returncode == (-sig if sig == signal.SIGKILL else 128 + sig), \
            (name, done.returncode, done.stderr[-2000:])
        assert wait_for(lambda: not _parts(dest), 10), (name, _parts(dest))
        # what the channel still carried may have ended the copy; nothing cut off is ever renamed into place
        # (SIGKILL: the connection dropped mid-file, cat saw EOF short of the size)
        assert not (dest / "big").exists() or (dest / "big").stat().st_size == 256 << 20, \
            (name, (dest / "big").stat().st_size)
    dest = tmp_path / "dest-cp-sftp"
    stale, fresh = dest / ".big.0123abcd.part", dest / ".big.89abcdef.part"
    for part in (stale, fresh):
        part.write_bytes(b"x" * 10)
    os.utime(stale, (time.time() - STALE_PART_S - 60,) * 2)
    small = tmp_path / "small"
    small.write_bytes(b"small\n")
    inv = tmp_path / "cp-sftp.yaml"
    done = subprocess.run([sys.executable, "-m", "fleetctl", "-i", str(inv), "copy", str(small), f"{dest}/big",
                           "--hosts", "cp-sftp"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (dest / "big").read_bytes() == b"small\n"
    assert _parts(dest) == [fresh.name], _parts(dest)


def _descendants(pid: int) -> list[int]:
    """Pids under ``pid`` (``/proc/PID/stat``'s ppid)."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = int(Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        todo += kids
    return found


def test_a_part_file_an_interrupt_cannot_remove_is_named_in_the_host_log(sshd_farm, tmp_path):
    """The host stops answering mid-upload (its sftp-server stopped: SIGSTOP), then SIGINT: fleetctl
    exits within seconds all the same, and the host's log names the part file left behind."""
    host = sshd_farm.start("cp-dead")
    big = tmp_path / "big"
    with big.open("wb") as fh:
        for _ in range(256):
            fh.write(b"\x01" * (1 << 20))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "cp-dead": {**host.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "w")}}})
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    dest = tmp_path / "dest"
    stopped: list[int] = []

    def writing_then_dead() -> bool:
        if not any((1 << 20) < (dest / p).stat().st_size < (128 << 20) for p in _parts(dest) if (dest / p).exists()):
            return False
        for pid in _descendants(host.proc.pid):
            with contextlib.suppress(OSError):
                if b"sftp-server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
        return bool(stopped)
    try:
        started = time.monotonic()
        done = _interrupt(["-i", str(inv), "copy", str(big), f"{dest}/big", "--hosts", "cp-dead"], env,
                          writing_then_dead, signal.SIGINT)
        took_s = time.monotonic() - started
        parts = _parts(dest)
    finally:
        for pid in stopped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.kill(pid, signal.SIGCONT)
    assert done.returncode == 130, done.stderr[-2000:]
    assert took_s < 30, took_s
    assert len(parts) == 1, parts
    log = (last_run(tmp_path) / "logs" / "cp-dead.log").read_text(errors="replace")
    assert f"left on the host: {dest}/{parts[0]} (an interrupted upload's part file" in log, log[-2000:]
    (dest / parts[0]).unlink()


def test_the_facts_script_run_on_its_own_stops_its_hung_nvidia_smi_on_sigterm(tmp_path):
    """``python3 facts.py`` (the legacy start, Slurm: under the supervisor, which sends the script's
    group TERM): the GPU command's own session is stopped with it."""
    token = str(800000 + os.getpid() % 99999)
    marks = tmp_path / "smi-started"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho $$ >> {marks}\nsleep {token}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.Popen([sys.executable, str(REPO / "playbooks" / "scripts" / "facts.py"), "--workdir",
                             str(tmp_path), "--read-only", "1"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: bool(_running(token)), 60), "nvidia-smi did not start"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 128 + signal.SIGTERM
        assert wait_for(lambda: not _running(token), 10), "nvidia-smi's sleep still runs"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _running(token):
            os.kill(pid, signal.SIGKILL)
