"""Reaching a host through a ProxyCommand or ProxyJump that fails: a command that hangs or ends
without passing anything on, a wrong service behind a jump host, a hop that times out. Real sshd
test hosts and real proxy processes on loopback (no mocked transport); the one line is checked,
never a time."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.test_commands_e2e import RELAY
from tests.test_not_ssh_e2e import http_port  # noqa: F401  (a fixture)


def ssh_config(path: Path, farm, hosts: dict[str, dict[str, object]]) -> Path:
    """An ssh_config with one ``Host`` block per entry (its options), the farm's key and known_hosts."""
    blocks = "".join(f"Host {name}\n" + "".join(f"  {k} {v}\n" for k, v in opts.items())
                     for name, opts in hosts.items())
    path.write_text(blocks + f"""Host *
  IdentityFile {farm.client_key}
  IdentitiesOnly yes
  UserKnownHostsFile {farm.known_hosts}
  GlobalKnownHostsFile /dev/null
""")
    return path


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def running(pid: int) -> bool:
    """The process exists and is not a zombie (read from /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


HANG = """echo $$ > {pids}
echo "waiting for the bastion" >&2
sleep 600 &
echo $! >> {pids}
wait
"""


def test_a_hung_proxycommand_is_named_killed_with_its_children_and_delays_no_other_host(sshd_farm, tmp_path):
    """A bastion that never answers: the ProxyCommand (a script whose child holds the socket)
    runs on silently. The host fails at the connect timeout naming the command and its stderr;
    the command and its child are killed; a host without a proxy is done before it fails."""
    good = sshd_farm.start("good")
    pids, script = tmp_path / "proxy.pids", tmp_path / "hang.sh"
    script.write_text(HANG.format(pids=pids))
    cfg = ssh_config(tmp_path / "ssh_config", sshd_farm, {
        "hung": {"HostName": "127.0.0.1", "Port": good.port, "User": good.user, "ProxyCommand": f"/bin/sh {script}"}})
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "hung": {"ssh_config": str(cfg)}, "good": good.inventory_vars(sshd_farm.known_hosts)}})
    try:
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--connect-timeout", "6", "--json", "--", "echo", "up",
                       home=tmp_path, timeout_s=120)
        procs = [int(p) for p in pids.read_text().split()]
        assert len(procs) == 2, procs
        for _ in range(200):  # SIGKILLed processes are reaped by their parents (init for the orphan)
            if not any(running(p) for p in procs):
                break
            time.sleep(0.05)  # polling other processes' state
        left = [p for p in procs if running(p)]
    finally:
        for p in [int(p) for p in pids.read_text().split()] if pids.exists() else []:
            if running(p):
                os.kill(p, signal.SIGKILL)
    assert res.returncode == 1, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["good"]["stdout"] == "up\n"
    err = out["hung"]["error"]
    assert err == (f"127.0.0.1:{good.port}: ProxyCommand `/bin/sh {script}` was still silent after the connect "
                   f"timeout (6 s): no SSH banner came through it (a bastion or relay that never answers), so it was "
                   f"killed; its stderr: waiting for the bastion"), err
    assert not left, f"ProxyCommand processes left running: {left}"
    finished = [e["host"] for e in events(last_run(tmp_path)) if e["event"] == "host.finished"]
    assert finished.index("good") < finished.index("hung"), finished
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("command, note", [
    ("true", "it wrote nothing on stderr"),
    (f"{sys.executable} -c \"import sys; sys.stderr.write('bastion: no route\\n')\"", "its stderr: bastion: no route"),
])
def test_a_proxycommand_that_exits_0_passing_nothing_on_is_named_at_once(tmp_path, command, note):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"behind": {
        "ansible_host": "127.0.0.1", "ansible_port": 22385, "ansible_user": "nobody",
        "known_hosts": str(tmp_path / "known_hosts")}}})
    res = fleetctl("-i", str(inv), "-o", f"ProxyCommand={command}", "run", "--hosts", "behind", "--json", "--",
                   "true", home=tmp_path, timeout_s=120)
    assert res.returncode == 1, res.stderr[-2000:]
    err = json.loads(res.stdout)["behind"]["error"]
    assert err == (f"127.0.0.1:22385: ProxyCommand `{command}` exited 0 before the SSH banner, having passed on "
                   f"nothing (ssh(1): 'kex_exchange_identification: Connection closed by remote host'): it connects "
                   f"to nothing, or the server behind it closed at once; {note}"), err
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert not record["hosts"]["behind"].get("connection", {}).get("handshake_retries"), record["hosts"]["behind"]


def test_a_web_server_behind_a_proxycommand_is_named_not_ssh(http_port, tmp_path):  # noqa: F811
    relay, seen = tmp_path / "relay.py", tmp_path / "relayed.txt"
    relay.write_text(RELAY)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"web": {
        "ansible_host": "127.0.0.1", "ansible_port": http_port, "ansible_user": "nobody",
        "known_hosts": str(tmp_path / "known_hosts")}}})
    res = fleetctl("-i", str(inv), "-o", f"ProxyCommand={sys.executable} {relay} %h %p {seen}", "run", "--hosts",
                   "web", "--json", "--", "true", home=tmp_path, timeout_s=120)
    assert res.returncode == 1, res.stderr[-2000:]
    err = json.loads(res.stdout)["web"]["error"]
    assert err.startswith(f"127.0.0.1:{http_port} (reached through ProxyCommand `{sys.executable} {relay} 127.0.0.1 "
                          f"{http_port} {seen}`) is not an SSH server: it answered '"), err
    assert "Error code: 400" in err, err


@pytest.mark.parametrize("route", ["target", "second hop"])
def test_a_web_server_behind_a_jump_host_is_named_not_ssh_with_its_hop(sshd_farm, http_port, tmp_path, route):  # noqa: F811
    """ProxyJump bastion to a port where a web server answers: the same words as without the jump
    host, naming the hop that answered (the target, or the second jump host)."""
    jump, behind = sshd_farm.start("bastion"), sshd_farm.start("behind")
    web = {"HostName": "127.0.0.1", "Port": http_port, "User": jump.user}
    hosts = {"bastion": {"HostName": "127.0.0.1", "Port": jump.port, "User": jump.user}, "web": web}
    if route == "target":
        web["ProxyJump"] = "bastion"
    else:
        hosts["gpu"] = {"HostName": "127.0.0.1", "Port": behind.port, "User": behind.user, "ProxyJump": "bastion,web"}
    cfg = ssh_config(tmp_path / "ssh_config", sshd_farm, hosts)
    name = "web" if route == "target" else "gpu"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {name: {"ssh_config": str(cfg)}}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "true", home=tmp_path, timeout_s=120)
    assert res.returncode == 1, res.stderr[-2000:]
    err = json.loads(res.stdout)[name]["error"]
    label = "" if route == "target" else "jump host web: "
    assert err.startswith(f"{label}127.0.0.1:{http_port} (reached through the jump host bastion) is not an SSH "
                          f"server: it answered '"), err
    assert "Error code: 400" in err and "(RFC 4253 4.2)" in err, err
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert not record["hosts"][name].get("connection", {}).get("handshake_retries"), record["hosts"][name]


@pytest.mark.parametrize("dead", ["second hop", "target"])
def test_a_hop_the_jump_host_cannot_reach_is_named_with_its_own_timeout(sshd_farm, tmp_path, dead):
    """ProxyJump a,b where packets to b (or to the target behind b) are dropped: the jump host's
    channel to it never opens. The failure names the hop that timed out, after its own connect
    timeout (each hop has its own, as with ssh -J), and says the jump host opened no connection
    to it (it was read as a server that accepted TCP and sent no banner)."""
    from tests.support.netfaults import BlackHole

    a, b, behind = sshd_farm.start("a"), sshd_farm.start("b"), sshd_farm.start("behind")
    hole = BlackHole()
    try:
        hosts = {"a": {"HostName": "127.0.0.1", "Port": a.port, "User": a.user},
                 "b": {"HostName": "127.0.0.1", "Port": hole.port if dead == "second hop" else b.port, "User": b.user},
                 "gpu": {"HostName": "127.0.0.1", "Port": hole.port if dead == "target" else behind.port,
                         "User": behind.user, "ProxyJump": "a,b"}}
        cfg = ssh_config(tmp_path / "ssh_config", sshd_farm, hosts)
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"gpu": {"ssh_config": str(cfg)}}})
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--connect-timeout", "3", "--json", "--", "true",
                       home=tmp_path, timeout_s=120)
    finally:
        hole.close()
    assert res.returncode == 1, res.stderr[-2000:]
    err = json.loads(res.stdout)["gpu"]["error"]
    expected = {"second hop": f"jump host b: timed out after 3 s: the jump host a opened no connection to "
                              f"127.0.0.1:{hole.port}",
                "target": f"timed out after 3 s: the jump host b opened no connection to 127.0.0.1:{hole.port}"}[dead]
    assert err == expected + (" (the host is down, a firewall drops the packets, or there is no route to it from "
                              "the jump host)"), err
