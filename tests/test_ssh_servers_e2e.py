"""SSH servers as they really behave, each made real on an OpenSSH 9.2 sshd test host (no mocks):

- an sshd whose host keys were removed (a host reimaged without them): it re-executes itself for
  every connection, finds no key, logs ``sshd: no hostkeys available -- exiting.`` and closes
  before its banner. One connection, dropped every time, is not MaxStartups; a real MaxStartups
  (another client holding the only unauthenticated slot) still is, from sshd's own words;
- a hardened sshd without ``Subsystem sftp``: the subsystem request fails, the connection learns
  it once, says so once, and every file goes over an exec channel (puts, gets, realpath);
- a bastion with ``AllowTcpForwarding no`` in a ``Match`` block: named as ssh names it
  (administratively prohibited) with the fix.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time

import pytest

from fleetctl.connection.sftp_fallback import realpath_by_exec
from fleetctl.connection.ssh import SSHConnection
from fleetctl.errors import TransferError
from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd


def events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def hold_the_only_startup(port: int) -> socket.socket:
    """A connection that got sshd's banner and stays unauthenticated (polls until sshd has let go
    of the readiness probe's connection)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        sock = socket.create_connection(("127.0.0.1", port))
        if sock.recv(64).startswith(b"SSH-"):
            return sock
        sock.close()
        time.sleep(0.05)
    raise AssertionError("sshd never gave a free unauthenticated slot")


def test_a_server_without_host_keys_is_not_named_maxstartups(sshd_farm, tmp_path):
    keyless = sshd_farm.start("keyless")
    keyless.remove_host_keys()
    crowded = sshd_farm.start("crowded", extra_config="MaxStartups 1:100:1")
    holder = hold_the_only_startup(crowded.port)  # another client holds the one unauthenticated slot
    try:
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {
            "keyless": keyless.inventory_vars(sshd_farm.known_hosts),
            "crowded": crowded.inventory_vars(sshd_farm.known_hosts)}})
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "ok", home=tmp_path,
                       timeout_s=120)
    finally:
        holder.close()
    assert res.returncode == 1, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert "no hostkeys available" in keyless.log  # the fault is real: sshd said so per connection
    err = out["keyless"]["error"]
    assert "before sending its SSH banner on a single connection" in err, err
    assert "not MaxStartups dropping excess connections" in err and "no host keys" in err, err
    assert "most likely sshd's MaxStartups" not in err
    assert "past MaxStartups" in crowded.log  # sshd really dropped ours for the held slot
    err = out["crowded"]["error"]
    assert "saying 'Exceeded MaxStartups'" in err and "held by other clients" in err, err
    assert "no host keys" not in err
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["hosts"]["keyless"]["status"] == "unreachable"
    assert record["hosts"]["keyless"]["connection"]["handshake_retries"] == 5


def test_two_inventory_hosts_on_one_server_without_host_keys_are_not_named_maxstartups(sshd_farm, tmp_path):
    """Two inventory names for one keyless sshd: their handshakes once overlapped, which the drop
    heuristic read as MaxStartups. Now the names share one connect attempt (ssh_hop's probe): the
    first name's handshakes run alone, every one closed before the banner, and the second name
    fails at once with the same cause: host keys, not MaxStartups. (The overlapped wording, the
    server's own words deciding, is checked on data: tests/test_transport_units.py.)"""
    keyless = sshd_farm.start("keyless2")
    keyless.remove_host_keys()
    both = keyless.inventory_vars(sshd_farm.known_hosts)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"a": both, "b": dict(both)}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--forks", "2", "--json", "--", "echo", "ok",
                   home=tmp_path, timeout_s=120)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "no hostkeys available" in keyless.log
    out = json.loads(res.stdout)
    for name in ("a", "b"):
        err = out[name]["error"]
        assert "MaxStartups (too many" not in err and "most likely" not in err, err
        assert ("closed the connection before login 6 times, each time before sending its SSH banner on a single "
                "connection" in err and "sshd may have no host keys, or none it can read" in err), err
    assert out["a"]["error"] == out["b"]["error"], out  # one attempt's cause, for both names


def test_a_server_without_sftp_gets_a_whole_deploy_done_with_one_note(sshd_farm, tmp_path):
    host = sshd_farm.start("nosftp", sftp=False)
    src = tmp_path / "payload"
    for d in range(3):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(9):
            (src / f"d{d}" / f"f{i}.txt").write_text(f"file {d}/{i}\n" * 200)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"one": {**host.inventory_vars(sshd_farm.known_hosts),
                                                                "workdir": str(host.home / "work")}}})
    play = tmp_path / "play.yaml"
    play.write_text(f"""\
name: no sftp
hosts: all
tasks:
  - name: upload 27 files
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/payload"}}
  - name: count
    shell: {{cmd: 'test "$(find {host.home}/work/payload -type f | wc -l)" = 27'}}
  - name: upload again
    copy: {{src: {src}/d1/f3.txt, dest: "{{{{ workdir }}}}/again.txt"}}
""")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, timeout_s=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "subsystem request for sftp" in host.log  # the fault is real: sshd refused the subsystem
    assert (host.home / "work" / "payload" / "d2" / "f8.txt").read_text() == "file 2/8\n" * 200
    assert (host.home / "work" / "again.txt").read_text() == "file 1/3\n" * 200
    notes = [e for e in events(last_run(tmp_path)) if e["event"] == "note.added" and "SFTP" in e.get("message", "")]
    assert len(notes) == 1, notes
    assert "no 'Subsystem sftp' in its sshd_config" in notes[0]["message"]
    assert host.log.count("subsystem request for sftp") == 1  # learnt once, never asked again
    assert "the server refused the SFTP subsystem" in res.stderr + res.stdout


def test_without_sftp_gets_and_puts_go_over_exec_and_symlinks_are_refused(sshd_farm, tmp_path):
    host = sshd_farm.start("nosftp-get", sftp=False)
    (host.home / "wheel.whl").write_bytes(bytes(range(256)) * 4096 + b"\nno newline at the end")
    (host.home / "link.whl").symlink_to(host.home / "wheel.whl")
    notes: list[str] = []

    async def go():
        conn = SSHConnection("nosftp-get", address="127.0.0.1", port=host.port, user=host.user,
                             key_file=str(host.client_key), known_hosts=str(sshd_farm.known_hosts))
        conn.on_note = notes.append
        async with conn:
            assert await realpath_by_exec(conn, str(host.home / ".")) == os.path.realpath(host.home)
            await conn.get(str(host.home / "wheel.whl"), str(tmp_path / "got" / "wheel.whl"))
            with pytest.raises(TransferError, match="not a regular file"):
                await conn.get(str(host.home / "link.whl"), str(tmp_path / "got" / "link.whl"))
            src = tmp_path / "up.bin"
            src.write_bytes(b"\x00\xff" * 100000)
            await conn.put(str(src), str(host.home / "sub" / "up.bin"), mode=0o600)
            return conn.stats

    stats = asyncio.run(go())
    assert (tmp_path / "got" / "wheel.whl").read_bytes() == (host.home / "wheel.whl").read_bytes()
    assert not (tmp_path / "got" / "link.whl").exists() and not list((tmp_path / "got").glob(".*part"))
    assert (host.home / "sub" / "up.bin").read_bytes() == b"\x00\xff" * 100000
    assert oct((host.home / "sub" / "up.bin").stat().st_mode & 0o777) == "0o600"
    assert len(notes) == 1 and "refused the SFTP subsystem" in notes[0]
    assert stats["sftp"].startswith("files over exec channels: the server refused the SFTP subsystem")


def test_a_bastion_that_forbids_forwarding_is_named_with_the_fix(sshd_farm, tmp_path):
    behind = sshd_farm.start("behind")
    jump = sshd_farm.start("bastion", extra_config=f"Match User {behind.user}\n  AllowTcpForwarding no\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host gpu
  HostName 127.0.0.1
  Port {behind.port}
  ProxyJump bastion
Host bastion
  HostName 127.0.0.1
  Port {jump.port}
Host *
  User {behind.user}
  IdentityFile {sshd_farm.client_key}
  IdentitiesOnly yes
  UserKnownHostsFile {sshd_farm.known_hosts}
  GlobalKnownHostsFile /dev/null
""")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"gpu": {"ssh_config": str(cfg)}}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "hi", home=tmp_path,
                   timeout_s=120)
    assert res.returncode == 1
    err = json.loads(res.stdout)["gpu"]["error"]
    assert "refused local port forward" in jump.log  # the fault is real: sshd refused the direct-tcpip open
    assert f"the jump host bastion forbids TCP forwarding to 127.0.0.1:{behind.port}" in err, err
    assert "administratively prohibited" in err and "AllowTcpForwarding no" in err and "Match block" in err
    assert "allow it for this user, or reach" in err
    # --plan, --dry-run and a deploy connect alike, so they say the same
    play = tmp_path / "play.yaml"
    play.write_text("name: t\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    for mode in ("--plan", "--dry-run", None):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--json",
                       *([mode] if mode else []), home=tmp_path, timeout_s=120)
        assert res.returncode == 1, (mode, res.stdout[-2000:], res.stderr[-2000:])
        doc = json.loads(res.stdout)
        row = doc["gpu"] if mode == "--plan" else doc["hosts"]["gpu"]
        assert err in row["error"], (mode, row)


def test_a_missing_sftp_server_binary_is_learnt_once_and_files_still_arrive(sshd_farm, tmp_path):
    """Another shape: ``Subsystem sftp`` names a binary the host lacks (a package removed): sshd
    accepts the request and the session ends at once; SFTP is not asked again per file."""
    host = sshd_farm.start("sftp-gone", sftp=False, extra_config="Subsystem sftp /nonexistent/sftp-server\n")
    src = tmp_path / "payload"
    src.mkdir()
    for i in range(6):
        (src / f"f{i}.txt").write_text(f"file {i}\n")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"one": {**host.inventory_vars(sshd_farm.known_hosts),
                                                                "workdir": str(host.home / "work")}}})
    play = tmp_path / "play.yaml"
    play.write_text(f"name: t\nhosts: all\ngather_facts: false\ntasks:\n"
                    f"  - name: upload\n    copy: {{src: {src}, dest: '{{{{ workdir }}}}/payload'}}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, timeout_s=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert (host.home / "work" / "payload" / "f5.txt").read_text() == "file 5\n"
    notes = [e for e in events(last_run(tmp_path)) if e["event"] == "note.added" and "SFTP" in e.get("message", "")]
    assert len(notes) == 1 and "cannot start SFTP" in notes[0]["message"], notes
    asked = [line for line in host.log.splitlines() if "subsystem" in line.lower()]
    assert len(asked) == 1, asked  # asked once, never again per file
