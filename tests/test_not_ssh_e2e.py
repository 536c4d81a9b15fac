"""Connecting to what is not a plain reachable sshd: a port that answers another protocol (an
HTTP server on the SSH port), and a ProxyCommand that fails. Real servers and real commands on
loopback; counts attempts and checks the one line, never times."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory


@pytest.fixture
def http_port():
    """A real ``python3 -m http.server`` on loopback (its port); stopped after the test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                proc.wait(0.05) if proc.poll() is not None else __import__("time").sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_port_that_answers_http_is_named_not_ssh_without_retries(http_port, tmp_path):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"web": {
        "ansible_host": "127.0.0.1", "ansible_port": http_port, "ansible_user": "nobody",
        "known_hosts": str(tmp_path / "known_hosts")}}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "web", "--connect-timeout", "5", "--json", "--", "true",
                   home=tmp_path, timeout_s=120)
    assert res.returncode == 1, res.stderr[-2000:]
    err = json.loads(res.stdout)["web"]["error"]
    assert err.startswith(f"127.0.0.1:{http_port} is not an SSH server: it answered '"), err
    assert "Error code: 400" in err and "where an SSH banner ('SSH-2.0-...') was expected (RFC 4253 4.2)" in err, err
    assert "host keys" not in err and "closed the connection" not in err, err
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["hosts"]["web"]["status"] == "unreachable"
    assert not record["hosts"]["web"].get("connection", {}).get("handshake_retries"), record["hosts"]["web"]


FAILING_PROXY = "import sys; sys.stderr.write('ssh: Could not resolve hostname nosuchhost.invalid\\n'); sys.exit(255)"


@pytest.mark.parametrize("command, expected", [
    ("/bin/false", "ProxyCommand `/bin/false` exited 1 before the SSH banner: it wrote nothing on stderr"),
    (f'{sys.executable} -c "{FAILING_PROXY}"',
     "exited 255 before the SSH banner: ssh: Could not resolve hostname nosuchhost.invalid"),
    ("fleetctl-no-such-proxy %h %p", "ProxyCommand: fleetctl-no-such-proxy: not found"),
])
def test_a_failing_proxycommand_is_named_once_with_its_stderr(tmp_path, command, expected):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"behind": {
        "ansible_host": "127.0.0.1", "ansible_port": 22385, "ansible_user": "nobody",
        "known_hosts": str(tmp_path / "known_hosts")}}})
    res = fleetctl("-i", str(inv), "-o", f"ProxyCommand={command}", "run", "--hosts", "behind", "--json", "--", "true",
                   home=tmp_path, timeout_s=120)
    assert res.returncode == 1, res.stderr[-2000:]
    err = json.loads(res.stdout)["behind"]["error"]
    assert expected in err, err
    assert "host keys" not in err and "closed the connection" not in err, err
    assert "Unknown child process" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert not record["hosts"]["behind"].get("connection", {}).get("handshake_retries"), record["hosts"]["behind"]


def test_what_is_and_is_not_an_ssh_answer():
    from fleetctl.connection.ssh_errors import not_ssh_message

    msg = not_ssh_message("h:22", b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\n\r\n")
    assert msg == ("h:22 is not an SSH server: it answered 'HTTP/1.1 400 Bad Request' where an SSH banner "
                   "('SSH-2.0-...') was expected (RFC 4253 4.2)")
    for ssh_like in (b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", b"Exceeded MaxStartups\r\n", b"", b"\r\n"):
        assert not_ssh_message("h:22", ssh_like) is None, ssh_like


def test_a_working_proxycommand_logs_in_with_a_clean_stderr(sshd_farm, tmp_path):
    """The success path of the ProxyCommand now run by fleetctl (not asyncssh): it logs in and
    leaves no warning (a guard for the change, it passed before it too)."""
    from tests.test_commands_e2e import RELAY

    h = sshd_farm.start("pcok")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"pcok": h.inventory_vars(sshd_farm.known_hosts)}})
    relay, seen = tmp_path / "relay.py", tmp_path / "relayed.txt"
    relay.write_text(RELAY)
    res = fleetctl("-i", str(inv), "-o", f"ProxyCommand={sys.executable} {relay} %h %p {seen}", "run", "--hosts",
                   "pcok", "--", "echo", "through", home=tmp_path, timeout_s=120)
    assert res.returncode == 0, res.stderr
    assert "through" in res.stdout and seen.read_text() == f"relayed 127.0.0.1:{h.port}\n"
    assert "Unknown child process" not in res.stderr and "Traceback" not in res.stderr, res.stderr
