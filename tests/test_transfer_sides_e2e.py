"""Which side of a download failed, named right: a read that fails on the host blames the host and
names its path (never the controller's DEST), and an SFTP session lost in the middle of a folder
fetch stops that host's fetch at once, naming the files not fetched, keeping those fetched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fleet import REPO, write_inventory
from tests.support.sshd import sftp_server


def _fleetctl_env(home: Path) -> dict:
    return {**os.environ, "FLEETCTL_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}


def test_a_read_that_fails_on_the_host_blames_the_host_not_the_controllers_dest(tmp_path):
    """``/proc/self/mem`` is a regular file that opens but whose first read fails (``EIO``): the
    fetch used to say ``could not be written here: DEST: Input/output error``, sending the operator
    to a controller disk that was fine."""
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local"}}})
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "fleetctl", "-i", str(inv), "fetch", "--hosts", "lh",
                          "/proc/self/mem", str(out)], capture_output=True, text=True, timeout=120,
                         env=_fleetctl_env(tmp_path), cwd=REPO)
    assert res.returncode == 1, res.stdout + res.stderr
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("lh: FAILED: "))
    assert line.endswith("get /proc/self/mem: could not be read on the host: Input/output error"), line
    assert "written here" not in line and str(out) not in line, line
    assert [p for p in out.rglob("*") if p.is_file()] == []  # no part file left behind


@pytest.mark.sshd
def test_a_folder_fetch_whose_sftp_session_dies_stops_names_what_is_missing_and_keeps_the_rest(sshd_farm, tmp_path):
    """The host's sftp-server is killed while a folder of 300 small files is fetched: the host fails
    once, with the cause and the count of files not fetched (the first few named), instead of
    trying each remaining file on a dead channel; every file fetched before is whole, and no part
    file is left."""
    wrapper = sshd_farm.root / "sftp-wrapper.sh"
    pidfile = sshd_farm.root / "sftp.pid"
    wrapper.write_text(f'#!/bin/sh\necho $$ > {pidfile}\nexec {sftp_server()}\n')
    wrapper.chmod(0o755)
    h = sshd_farm.start("drop", sftp=False, extra_config=f"Subsystem sftp {wrapper}")
    many = h.home / "many"
    many.mkdir()
    total = 300
    for i in range(total):
        (many / f"f{i:03d}").write_bytes(bytes([i % 256]) * 4096)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": h.inventory_vars(sshd_farm.known_hosts)}})
    out = tmp_path / "out"
    got = out / "h" / str(many).lstrip("/")
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "fetch", "--hosts", "h",
                             str(many), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_fleetctl_env(tmp_path), cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if pidfile.exists() and got.is_dir() and len([p for p in got.iterdir() if not p.name.startswith(".")]) >= 5:
                os.kill(int(pidfile.read_text()), 9)  # the sftp-server of this fetch (the wrapper exec'd it)
                break
            time.sleep(0.005)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stdout + stderr
    landed = sorted(p.name for p in got.iterdir())
    assert not [n for n in landed if n.endswith(".part")], landed
    fetched = [n for n in landed if not n.startswith(".")]
    assert 5 <= len(fetched) < total, landed
    for name in fetched:  # every kept file is whole
        assert (got / name).read_bytes() == (many / name).read_bytes(), name
    missing = total - len(fetched)
    line = next(ln for ln in stderr.splitlines() if ln.startswith("h: FAILED: "))
    assert line.startswith(f"h: FAILED: fetch {many}: get {many}/"), line
    assert "the SFTP session with the host was lost while reading it" in line, line
    assert f": {missing} files not fetched ({many}/f" in line and f"and {missing - 3} more); " in line, line
    assert line.endswith(f"the {len(fetched)} fetched before are kept"), line
    assert line.count("lost") == 1 and "written here" not in line, line


@pytest.mark.sshd
def test_a_file_the_kernel_sizes_zero_is_fetched_whole_over_sftp(sshd_farm, tmp_path):
    """``/proc/version`` and ``/proc/sys/kernel/ostype`` stat as 0 bytes and hold text only when read
    (as /proc/cpuinfo and sysfs files do): an SFTP fetch reads on to EOF past the size lstat saw, as
    OpenSSH's sftp does, instead of failing or keeping an empty file."""
    h = sshd_farm.start("procfs")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": h.inventory_vars(sshd_farm.known_hosts)}})
    out = tmp_path / "out"
    for path in ("/proc/version", "/proc/sys/kernel/ostype"):
        assert os.stat(path).st_size == 0
        res = subprocess.run([sys.executable, "-m", "fleetctl", "-i", str(inv), "fetch", "--hosts", "h", path,
                              str(out)], capture_output=True, text=True, timeout=120, env=_fleetctl_env(tmp_path),
                             cwd=REPO)
        assert res.returncode == 0, res.stdout + res.stderr
        got = (out / "h" / path.lstrip("/")).read_bytes()
        assert got and got == Path(path).read_bytes(), (path, got)


@pytest.mark.sshd
def test_a_transfer_after_the_sftp_server_died_opens_a_new_session(sshd_farm, tmp_path):
    """The host's sftp-server dies between two transfers on one connection (as it may mid-deploy):
    the transfer that meets the dead channel fails as lost, and the next one opens a new SFTP
    session instead of failing on the dead one with "Channel not open"."""
    import asyncio

    from fleetctl.connection.ssh import SSHConnection
    from fleetctl.errors import TransferError

    wrapper = sshd_farm.root / "sftp-wrapper2.sh"
    pidfile = sshd_farm.root / "sftp2.pid"
    wrapper.write_text(f'#!/bin/sh\necho $$ > {pidfile}\nexec {sftp_server()}\n')
    wrapper.chmod(0o755)
    h = sshd_farm.start("respawn", sftp=False, extra_config=f"Subsystem sftp {wrapper}")
    (h.home / "a").write_bytes(b"first\n")
    (h.home / "b").write_bytes(b"second\n")
    src = tmp_path / "up"
    src.write_bytes(b"third\n")

    async def go():
        conn = SSHConnection(h.name, address="127.0.0.1", port=h.port, user=h.user, key_file=str(h.client_key),
                             known_hosts=str(sshd_farm.known_hosts))
        await conn.open()
        try:
            await conn.get(str(h.home / "a"), str(tmp_path / "a"))
            first = int(pidfile.read_text())
            os.kill(first, 9)
            for _ in range(200):  # until the kernel has reaped it (sshd waits for its child)
                if not Path(f"/proc/{first}").exists():
                    break
                await asyncio.sleep(0.01)
            with pytest.raises(TransferError):
                await conn.get(str(h.home / "b"), str(tmp_path / "b"))
            await conn.get(str(h.home / "b"), str(tmp_path / "b"))
            await conn.put(str(src), str(h.home / "c"))
            assert int(pidfile.read_text()) != first
        finally:
            await conn.close()

    asyncio.run(go())
    assert (tmp_path / "a").read_bytes() == b"first\n" and (tmp_path / "b").read_bytes() == b"second\n"
    assert (h.home / "c").read_bytes() == b"third\n"
