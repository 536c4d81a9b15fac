"""The SSH connection against real OpenSSH sshd test hosts on loopback (no mocks)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.connection.ssh import SSHConnection
from fleetctl.errors import CommandTimeout, HostUnreachable

pytestmark = pytest.mark.sshd


def connect(host, farm, **kw) -> SSHConnection:
    return SSHConnection(host.name, address="127.0.0.1", port=host.port, user=host.user,
                         key_file=str(host.client_key), known_hosts=str(farm.known_hosts), **kw)


async def roundtrip(conn: SSHConnection, argv: list[str], env: dict[str, str],
                    program: str = "/usr/bin/printf") -> tuple[list[str], dict[str, str]]:
    res = await conn.run([program, "%s\\0", "start", *argv], env=env)
    assert res.rc == 0, res.stderr
    got_argv = res.stdout.split(b"\0")[1:-1]
    res_env = await conn.run(["/usr/bin/env", "-0"], env=env)
    got_env = dict(item.split(b"=", 1) for item in res_env.stdout.split(b"\0") if b"=" in item)
    return ([a.decode() for a in got_argv], {k.decode(): v.decode() for k, v in got_env.items()})


# Arbitrary text the remote process must receive exactly: no NUL (impossible in argv/env) and no
# lone surrogates (not encodable); everything else, quotes, $(), backticks, newlines, globs,
# unicode and leading dashes included.
hostile_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
hostile_argv = st.lists(st.one_of(hostile_text, st.sampled_from(
    ["'", '"', "$(id)", "`id`", "a\nb", "*", "~", "-n", "--help", "\\", "$HOME", ";ls", "!!", "%s", "é漢🚀"])),
    min_size=0, max_size=8)
#: Programs on the test host's PATH whose names start with `-` (one holds `=`): the first word of
#: an argv is the program whatever it looks like, never an option of env, setsid, sudo or the shell.
DASHED_PROGRAMS = ["-fltprintf", "--version", "-n", "-x=1"]
env_name = st.from_regex(r"\AFLT_[A-Z0-9_]{1,8}\Z")
hostile_env = st.dictionaries(env_name, hostile_text, max_size=4)


@pytest.mark.parametrize("shell", ["bash", "dash", "zsh"])
def test_argv_and_env_arrive_exactly_whatever_the_login_shell(sshd_farm, shell):
    host = sshd_farm.start(f"q-{shell}", shell=shell)
    for name in DASHED_PROGRAMS:  # printf under names a wrapper could take for its own option
        (host.bin_dir / name).write_text('#!/bin/sh\nexec /usr/bin/printf "$@"\n')
        (host.bin_dir / name).chmod(0o755)

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(batch=st.lists(st.tuples(hostile_argv, hostile_env, st.sampled_from(["/usr/bin/printf", *DASHED_PROGRAMS])),
                          min_size=1, max_size=6))
    def check(batch):
        async def go():
            async with connect(host, sshd_farm) as conn:
                for argv, env, program in batch:
                    got_argv, got_env = await roundtrip(conn, argv, env, program)
                    assert got_argv == argv
                    for k, v in env.items():
                        assert got_env.get(k) == v, (k, v, got_env.get(k))
        asyncio.run(go())

    check()


def test_env_travels_in_the_command_even_when_acceptenv_is_restricted(sshd_farm):
    host = sshd_farm.start("acceptenv", accept_env="LANG LC_*")

    async def go():
        async with connect(host, sshd_farm) as conn:
            env = {"CUDA_HOME": "/usr/local/cuda", "TORCH_CUDA_ARCH_LIST": "9.0a;12.0a", "LANG": "C.UTF-8"}
            _, got = await roundtrip(conn, [], env)
            return got, env
    got, env = asyncio.run(go())
    for k, v in env.items():
        assert got[k] == v


def test_megabytes_on_both_streams_arrive_whole_and_in_order(sshd_farm):
    host = sshd_farm.start("stream")
    script = (
        "import sys\n"
        "o, e = sys.stdout.buffer, sys.stderr.buffer\n"
        "for i in range(10 * 1024):\n"
        "    o.write(b'%07d ' % i + b'o' * 1015 + b'\\n')\n"
        "    e.write(b'%07d ' % i + b'e' * 1015 + b'\\n')\n"
        "    if i % 64 == 0: o.flush(); e.flush()\n"
        "sys.exit(7)\n"
    )

    async def go():
        lines = {"stdout": [], "stderr": []}
        async with connect(host, sshd_farm) as conn:
            res = await conn.run(["/usr/bin/python3", "-c", script], capture_bytes=None,
                                 on_line=lambda ln: lines[ln.stream].append(ln.data))
            tail = await conn.run(["/usr/bin/python3", "-c", script], capture_bytes=1024 * 1024)
        return res, lines, tail
    res, lines, tail = asyncio.run(go())
    assert res.rc == 7 and tail.rc == 7
    # a bounded capture keeps the last whole lines and says how much it dropped
    assert len(tail.stdout) <= 1024 * 1024 and tail.stdout.endswith(b"o" * 1015 + b"\n")
    assert tail.stdout_dropped + len(tail.stdout) == 10 * 1024 * 1024
    assert tail.stdout.startswith(b"%07d " % (10 * 1024 - len(tail.stdout) // 1024))
    for stream, ch in (("stdout", b"o"), ("stderr", b"e")):
        data = res.stdout if stream == "stdout" else res.stderr
        assert len(data) == 10 * 1024 * 1024
        assert len(lines[stream]) == 10 * 1024
        assert [int(ln[:7]) for ln in lines[stream]] == list(range(10 * 1024))
        assert all(ln.endswith(ch * 1015 + b"\n") for ln in lines[stream])


def test_invalid_utf8_is_kept_as_bytes_and_replaced_for_display(sshd_farm):
    host = sshd_farm.start("bytes")

    async def go():
        seen = []
        async with connect(host, sshd_farm) as conn:
            res = await conn.run(["/usr/bin/printf", "ok \\377\\376 \\303\\251\\n"], on_line=seen.append)
        return res, seen
    res, seen = asyncio.run(go())
    assert res.rc == 0
    assert seen[0].data == b"ok \xff\xfe \xc3\xa9\n"
    assert seen[0].text == "ok \ufffd\ufffd é"


def test_sftp_put_get_and_timeout(sshd_farm, tmp_path):
    host = sshd_farm.start("files")
    src = tmp_path / "payload.bin"
    src.write_bytes(bytes(range(256)) * 4096)

    async def go():
        async with connect(host, sshd_farm) as conn:
            dest = f"{tmp_path}/remote/deep/payload.bin"
            await conn.put(str(src), dest, mode=0o600)
            await conn.get(dest, str(tmp_path / "back.bin"))
            (tmp_path / "remote" / "link").symlink_to(src)
            with pytest.raises(Exception, match="not a regular file"):
                await conn.get(f"{tmp_path}/remote/link", str(tmp_path / "evil"))
            with pytest.raises(CommandTimeout):
                await conn.run(["sleep", "30"], timeout_s=0.5)
            res = await conn.run(["true"])  # the connection survives a timed-out command
            return res
    res = asyncio.run(go())
    assert res.rc == 0
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    assert oct((tmp_path / "remote/deep/payload.bin").stat().st_mode & 0o777) == "0o600"
    assert not list((tmp_path / "remote/deep").glob("*.part"))
    assert not (tmp_path / "evil").exists()


def test_unreachable_causes_are_named(sshd_farm, tmp_path):
    host = sshd_farm.start("keys")

    def open_error(**kw) -> str:
        async def go():
            conn = connect(host, sshd_farm)
            for k, v in kw.items():
                setattr(conn, k, v)
            with pytest.raises(HostUnreachable) as info:
                await conn.open()
            await conn.close()
            return str(info.value)
        return asyncio.run(go())

    from tests.support.sshd import free_port
    assert "connection refused" in open_error(port=free_port())
    other_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    assert "authentication failed" in open_error(key_file=str(other_key))
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    assert "host key unknown" in open_error(known_hosts=str(empty))
    changed = tmp_path / "changed_known_hosts"
    other_host_pub = (tmp_path / "other.pub").read_text().split()[:2]
    changed.write_text(f"[127.0.0.1]:{host.port} {' '.join(other_host_pub)}\n")
    msg = open_error(known_hosts=str(changed))
    assert "host key changed" in msg
    old_fp = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "other.pub")], capture_output=True, text=True).stdout.split()[1]
    new_fp = subprocess.run(["ssh-keygen", "-lf", str(host.host_key) + ".pub"], capture_output=True, text=True).stdout.split()[1]
    assert old_fp in msg and new_fp in msg


def test_a_connection_lost_while_idle_is_named_so_not_max_sessions(sshd_farm):
    """The host's sshd (its listener and this connection's session processes) is killed while
    the host waits between commands (for a wheel, for its batch): the next command says the
    connection was lost, never "cannot open a session (MaxSessions?)" (new-user trial)."""
    host = sshd_farm.start("idle")

    async def go() -> str:
        conn = connect(host, sshd_farm)
        await conn.open()
        assert (await conn.run(["true"])).rc == 0
        listener = host.proc.pid
        subprocess.run(["pkill", "-KILL", "-P", str(listener)], check=False)  # the sessions' sshd
        host.proc.kill()
        host.proc.wait()
        for _ in range(100):  # the TCP close reaches the client
            await asyncio.sleep(0.05)
        with pytest.raises(HostUnreachable) as info:
            await conn.run(["true"])
        await conn.close()
        return str(info.value)

    msg = asyncio.run(go())
    assert "MaxSessions" not in msg and "connection lost" in msg, msg


def test_accept_new_host_key_records_it(sshd_farm, tmp_path):
    host = sshd_farm.start("acceptnew")
    kh = tmp_path / "kh"

    async def go():
        conn = connect(host, sshd_farm, accept_new_host_keys=True)
        conn.known_hosts = str(kh)
        async with conn:
            return await conn.run(["true"])
    assert asyncio.run(go()).rc == 0
    # recorded as OpenSSH records it (hashed when ssh_config says HashKnownHosts, as Debian's
    # /etc/ssh/ssh_config does): OpenSSH's own lookup finds it under [127.0.0.1]:PORT
    found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{host.port}", "-f", str(kh)], capture_output=True,
                           text=True)
    assert found.returncode == 0 and "ssh-ed25519" in found.stdout, found


def test_maxstartups_drops_are_retried_and_every_host_succeeds(sshd_farm, tmp_path):
    """12 inventory hosts on one sshd with MaxStartups 3:30:10: handshakes past 3 pending get
    dropped at random; fleetctl's gate and backoff bring every host through."""
    from tests.support.fleet import fleetctl, write_inventory

    host = sshd_farm.start("crowded", extra_config="MaxStartups 3:30:10")
    hosts = {f"n{i:02d}": host.inventory_vars(sshd_farm.known_hosts) for i in range(1, 13)}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "ok", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(r["stdout"] == "ok\n" for r in json.loads(res.stdout).values())


def test_maxsessions_2_with_parallel_uploads_and_commands(sshd_farm, tmp_path):
    host = sshd_farm.start("sessions", extra_config="MaxSessions 2")
    files = []
    for i in range(6):
        f = tmp_path / f"f{i}"
        f.write_bytes(os.urandom(200_000))
        files.append(f)

    async def go():
        async with connect(host, sshd_farm) as conn:
            uploads = [conn.put(str(f), f"{tmp_path}/up/{f.name}") for f in files]
            commands = [conn.run(["sh", "-c", f"sleep 0.3; echo {i}"]) for i in range(8)]
            return await asyncio.gather(*uploads, *commands)
    results = asyncio.run(go())
    assert [r.stdout for r in results[6:]] == [f"{i}\n".encode() for i in range(8)]
    for f in files:
        assert (tmp_path / "up" / f.name).read_bytes() == f.read_bytes()


def test_an_ssh_config_unreadable_when_connecting_names_the_host_the_file_and_why(sshd_farm, tmp_path):
    """The connection's own ssh_config check (a file changed since the inventory's check, or a
    connection made without an inventory) said ``ssh_config file X cannot be read``, no reason
    (and passed a folder to asyncssh). It names the host, the file and why, in the inventory
    check's words; run as root without its read override, so mode 000 is as a user meets it."""
    import sys

    from tests.support.fleet import NO_READ_OVERRIDE, REPO

    host = sshd_farm.start("cfgread")
    good, closed = tmp_path / "good_config", tmp_path / "closed_config"
    for cfg in (good, closed):
        cfg.write_text(f"Host *\n  User {host.user}\n")
    closed.chmod(0o000)
    script = ("import asyncio, sys\nfrom fleetctl.connection.ssh import SSHConnection\n"
              "from fleetctl.errors import HostUnreachable\n"
              "async def go(cfg):\n"
              "    conn = SSHConnection('cfgread', address='127.0.0.1', port=int(sys.argv[1]), key_file=sys.argv[2],\n"
              "                         known_hosts=sys.argv[3], ssh_config=cfg)\n"
              "    try:\n        await conn.open()\n        print('ok', (await conn.run(['whoami'])).stdout.decode().strip())\n"
              "    except HostUnreachable as exc:\n        print(exc)\n    finally:\n        await conn.close()\n"
              "for cfg in sys.argv[4:]:\n    asyncio.run(go(cfg))\n")
    res = subprocess.run([*NO_READ_OVERRIDE, sys.executable, "-c", script, str(host.port), str(host.client_key),
                          str(sshd_farm.known_hosts), str(closed), str(tmp_path), str(tmp_path / "gone"), str(good)],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert res.stdout.splitlines() == [
        f"cfgread: unreachable: ssh_config file '{closed}' cannot be read: Permission denied",
        f"cfgread: unreachable: ssh_config file '{tmp_path}' is a folder, not an ssh_config file",
        f"cfgread: unreachable: ssh_config file '{tmp_path / 'gone'}' does not exist on this controller",
        f"ok {host.user}"], res.stdout + res.stderr
