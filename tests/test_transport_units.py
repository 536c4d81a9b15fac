"""Pure pieces of the transport: ssh_config resolution, OpenSSH known_hosts names and hashing (checked
with OpenSSH's own ssh-keygen), bounded output capture, and the live display valve."""

from __future__ import annotations

import dataclasses
import subprocess
import threading

import asyncssh
import pytest

from fleetctl.connection.base import OutputLine
from fleetctl.connection.ssh_hostkeys import HostKeyPolicy, record_known_host, hashed_name
from fleetctl.connection.ssh_target import host_port_name, resolve_jump, resolve_target, split_jump
from fleetctl.connection.streams import OutputTail, pump_lines
from fleetctl.reporting.livevalve import LiveValve
from tests.support.agent import keygen


def test_inventory_settings_win_over_ssh_config_as_the_command_line_does(tmp_path):
    cfg = tmp_path / "config"
    cfg.write_text("Host gpu*\n  HostName %h.cluster\n  Port 2200\n  User ops\n  IdentityFile ~/k_cfg\n"
                   "  ProxyJump alice@bastion:2222,b2\n  UserKnownHostsFile ~/kh_cfg\n  HashKnownHosts yes\n"
                   "  CheckHostIP yes\n  IdentityAgent none\n")
    t = resolve_target("gpu01", config_file=str(cfg))
    assert (t.host, t.port, t.user, t.host_key_name) == ("gpu01.cluster", 2200, "ops", "[gpu01.cluster]:2200")
    assert t.proxy_jump == ("alice@bastion:2222", "b2") and t.hash_known_hosts and t.check_host_ip
    assert t.agent_path is None and t.identity_files[0].endswith("/k_cfg")
    t = resolve_target("gpu01", port=22, user="root", key_file="/k_inv", known_hosts="/kh_inv", config_file=str(cfg))
    assert (t.port, t.user, t.host_key_name) == (22, "root", "gpu01.cluster")
    assert t.identity_files[0] == "/k_inv" and t.user_known_hosts == ("/kh_inv",)
    assert resolve_target("other", config_file=str(cfg)).host == "other"


def test_a_jump_host_reads_its_own_host_block_for_its_known_hosts_files(tmp_path):
    """OpenSSH runs each ProxyJump hop as its own ``ssh -W`` with the hop's Host block: its
    UserKnownHostsFile, GlobalKnownHostsFile and HashKnownHosts, never the destination's, nor the
    destination's inventory ``known_hosts`` (``ssh -o UserKnownHostsFile=`` reaches no hop either)."""
    cfg = tmp_path / "config"
    cfg.write_text("Host bastion\n  HostName 10.0.0.9\n  UserKnownHostsFile /kh_hop /kh_hop2\n"
                   "  GlobalKnownHostsFile /gkh_hop\n  HashKnownHosts yes\n"
                   "Host gpu01\n  ProxyJump bastion\n  UserKnownHostsFile /kh_dest\n  GlobalKnownHostsFile /gkh_dest\n")
    for known_hosts in (None, "/kh_inv"):
        target = resolve_target("gpu01", known_hosts=known_hosts, config_file=str(cfg))
        assert target.user_known_hosts == ((known_hosts,) if known_hosts else ("/kh_dest",))
        hop = resolve_jump("bastion", target)
        assert (hop.host, hop.user_known_hosts, hop.global_known_hosts) == ("10.0.0.9", ("/kh_hop", "/kh_hop2"),
                                                                            ("/gkh_hop",))
        assert hop.hash_known_hosts and hop.known_hosts is None


def test_jump_specs_parse_like_ssh():
    assert split_jump("alice@[::1]:2222") == ("alice", "::1", 2222)
    assert split_jump("bastion") == (None, "bastion", None)
    assert split_jump("ssh://u@h:5") == ("u", "h", 5)
    assert host_port_name("h", 22) == "h" and host_port_name("h", 2222) == "[h]:2222"


def test_recorded_entries_are_found_by_openssh(tmp_path):
    key = asyncssh.read_public_key(str(keygen(tmp_path / "hostkey")) + ".pub")
    kh = tmp_path / "known_hosts"
    kh.write_text("# a comment line without a newline at the end")
    record_known_host(str(kh), ["[gpu-behind]:2222"], key, hashed=True)
    record_known_host(str(kh), ["plain", "10.0.0.7"], key, hashed=False)
    for name in ("[gpu-behind]:2222", "plain", "10.0.0.7"):
        assert subprocess.run(["ssh-keygen", "-F", name, "-f", str(kh)], capture_output=True).returncode == 0, name
    assert subprocess.run(["ssh-keygen", "-F", "gpu-behind", "-f", str(kh)], capture_output=True).returncode == 1
    assert hashed_name("x", b"\0" * 20) == hashed_name("x", b"\0" * 20) != hashed_name("y", b"\0" * 20)


def test_a_key_recorded_without_port_counts_only_when_the_port_has_none(tmp_path):
    """OpenSSH's "checking without port identifier": a match is accepted, a mismatch is NEW."""
    k1 = asyncssh.read_public_key(str(keygen(tmp_path / "k1")) + ".pub")
    k2 = asyncssh.read_public_key(str(keygen(tmp_path / "k2")) + ".pub")
    kh = tmp_path / "kh"
    record_known_host(str(kh), ["h"], k1, hashed=False)
    empty = tmp_path / "empty_config"
    empty.write_text("")
    target = resolve_target("h", port=2222, known_hosts=str(kh), config_file=str(empty))
    policy = HostKeyPolicy(target)
    assert policy.known_hosts("h", "", 2222)[0] == [k1]  # trusted through the port-less entry
    assert policy.verify(k2) is False and "unknown" in policy.refusal  # not CHANGED: the port has none
    record_known_host(str(kh), ["[h]:2222"], k1, hashed=True)
    policy = HostKeyPolicy(target)
    assert policy.verify(k2) is False and "host key changed for [h]:2222" in policy.refusal
    assert policy.refusal.count(k1.get_fingerprint()) == 1 and policy.refusal.count(k2.get_fingerprint()) == 1
    assert f"ssh-keygen -R '[h]:2222' -f {kh}" in policy.refusal
    # k1 is on line 1 (for h) and line 2 (hashed, for [h]:2222): the message names the line of the name
    assert f"({kh}:2)" in policy.refusal and f"{kh}:1" not in policy.refusal, policy.refusal
    accepting = HostKeyPolicy(target, accept_new=True)
    assert accepting.verify(k2) is False  # accept-new never replaces a key


def test_policies_made_before_either_records_write_the_key_once_and_refuse_another(tmp_path):
    """Several inventory hosts on one HostName:port (forks: every policy looks the name up before
    any records): the key is written once per known_hosts name, hashed or not, and a policy whose
    host meanwhile got another key recorded refuses it as changed (OpenSSH's rule: one name, one key)."""
    k1 = asyncssh.read_public_key(str(keygen(tmp_path / "k1")) + ".pub")
    k2 = asyncssh.read_public_key(str(keygen(tmp_path / "k2")) + ".pub")
    empty = tmp_path / "empty_config"
    empty.write_text("")
    for hashed in (False, True):
        kh = tmp_path / f"kh-{hashed}"
        target = resolve_target("127.0.0.1", port=2222, known_hosts=str(kh), config_file=str(empty))
        target = dataclasses.replace(target, hash_known_hosts=hashed)
        policies = [HostKeyPolicy(target, accept_new=True) for _ in range(5)]  # all look up: nothing known
        assert [p.verify(k1) for p in policies[:4]] == [True] * 4
        assert [p.recorded for p in policies[:4]] == [["[127.0.0.1]:2222"], [], [], []]
        assert len(kh.read_text().splitlines()) == 1
        # the fifth is offered another key for the name the first recorded: changed, nothing written
        assert policies[4].verify(k2) is False and "host key changed for [127.0.0.1]:2222" in policies[4].refusal
        assert len(kh.read_text().splitlines()) == 1
        assert record_known_host(str(kh), ["[127.0.0.1]:2222", "[localhost]:2222"], k1, hashed=hashed) == (
            ["[localhost]:2222"], [])
        assert len(kh.read_text().splitlines()) == 2


def test_output_tail_keeps_the_last_whole_lines():
    tail = OutputTail(100)
    for i in range(1000):
        tail.append(b"line %04d\n" % i)
    kept, dropped = tail.result()
    assert len(kept) <= 100 and kept.endswith(b"line 0999\n") and kept.startswith(b"line ")
    assert dropped + len(kept) == 10 * 1000
    everything = OutputTail(None)
    everything.append(b"a" * 10_000)
    assert everything.result() == (b"a" * 10_000, 0)


def test_a_long_line_arrives_in_marked_pieces():
    import asyncio

    class Reader:
        def __init__(self, data: bytes) -> None:
            self.data = data

        async def read(self, n: int) -> bytes:
            chunk, self.data = self.data[:n], self.data[n:]
            return chunk

    lines: list[OutputLine] = []
    big = b"L" * (3 * 1024 * 1024) + b"\n"
    asyncio.run(pump_lines(Reader(b"a\n" + big + b"b"), "stdout", OutputTail(), lines.append))
    assert lines[0].data == b"a\n" and lines[-1].data == b"b" and not lines[-1].partial
    pieces = lines[1:-1]
    assert b"".join(p.data for p in pieces) == big
    assert all(p.partial for p in pieces[:-1]) and not pieces[-1].partial


def test_the_valve_waits_for_a_slow_printer_and_drops_nothing_it_takes():
    """Operator trial: ``run -- seq 1 3000 > out.txt`` kept 2,001 lines. A printer slower than the
    lines come, that still takes them, gets every one, in order: the producer waits (back-pressure)."""
    shown: list[bytes] = []
    pause = threading.Event()

    def printer(host, line):
        if len(shown) % 100 == 99:
            pause.wait(0.002)  # a sink slower than the producer, yet taking lines
        shown.append(line.data)

    valve = LiveValve(max_queued_lines=10, stall_s=30)
    on_line = valve.wrap_line(printer)
    for i in range(5000):
        on_line("h1", OutputLine("stdout", b"%d\n" % i))
    valve.close()
    assert valve.dropped_total == 0 and shown == [b"%d\n" % i for i in range(5000)]


def test_a_stalled_printer_loses_lines_from_the_middle_never_the_end_or_messages_in_order():
    gate = threading.Event()
    shown: list[tuple] = []

    def printer(host, line):
        gate.wait()  # a reader that stopped reading
        shown.append(("line", host, line.data))

    valve = LiveValve(max_queued_lines=10, stall_s=0.05, tail_lines=5)
    valve.name_run("RUN-1")
    on_line = valve.wrap_line(printer)
    note = valve.wrap(lambda host, text: shown.append(("note", host, text)))
    for i in range(100):
        on_line("h1", OutputLine("stdout", b"%d\n" % i))
    note("h1", "task done")  # after every line of h1, held ones included
    gate.set()
    valve.close()
    kinds = [s[0] for s in shown]
    assert kinds.count("note") == 1 and kinds[-1] == "note" and valve.dropped_total > 0
    marker = [i for i, s in enumerate(shown) if s[0] == "line" and b"not shown here" in s[2]]
    assert len(marker) == 1, marker  # told once: the count at the gap is all of it
    assert shown[marker[0]][2] == (b"... %d line(s) of h1 not shown here (the reader of this output took none for "
                                   b"0.05 s; all are in fleetctl logs RUN-1 h1)\n" % valve.dropped_total)
    numbers = [int(s[2]) for s in shown if s[0] == "line" and s[2].strip().isdigit()]
    assert numbers == sorted(numbers) and numbers[0] == 0 and len(numbers) + valve.dropped_total == 100
    after = [int(s[2]) for s in shown[marker[0] + 1:] if s[0] == "line"]
    assert after == [95, 96, 97, 98, 99]  # the end, right after the notice where the lines are missing


def test_the_valve_tells_a_host_s_gaps_once_naming_the_run_then_counts_them_at_the_end():
    """Operator trial: a display that kept falling behind printed ``... 126 line(s) not shown here
    (...; all are in fleetctl logs RUN gpu-a)`` at every gap, hundreds of times, with the literal
    word RUN. Now: once at the first gap, naming the run's id, then one count per host at the end."""
    gate = threading.Event()
    shown: list[bytes] = []

    def printer(host, line):
        gate.wait()  # a terminal whose reader stopped while the gate is shut
        shown.append(line.data)

    valve = LiveValve(max_queued_lines=5, stall_s=0.02, tail_lines=3)
    valve.name_run("20261207T042600.000Z-abc123")
    on_line = valve.wrap_line(printer)
    for _ in range(20):  # twenty gaps: a burst the terminal cannot keep up with, then it catches up
        gate.clear()
        for i in range(20):
            on_line("gpu-a", OutputLine("stdout", b"%d\n" % i))
        caught_up = threading.Event()
        valve.call(caught_up.set)  # printed after every line queued before it
        gate.set()
        assert caught_up.wait(10)
    valve.close()
    notices = [d for d in shown if b"not shown here" in d]
    assert len(notices) == 2, notices
    assert all(b"fleetctl logs 20261207T042600.000Z-abc123 gpu-a" in d and b" RUN " not in d for d in notices)
    assert notices[1] == shown[-1] and b"%d line(s)" % valve.dropped_total in notices[1] and b"in all" in notices[1]
    assert shown[-2] == b"19\n"  # each burst's end is shown


def test_the_valve_shortens_long_lines_for_display():
    shown = []
    valve = LiveValve(max_line_bytes=16)
    valve.wrap_line(lambda host, line: shown.append(line.data))("h", OutputLine("stdout", b"x" * 100 + b"\n"))
    valve.close()
    assert shown == [b"x" * 16 + b" ... (85 more bytes of this line in the log)\n"]


@pytest.mark.parametrize("name", ["gpu01", "[gpu01]:2222"])
def test_hashed_names_match_openssh(tmp_path, name):
    key = asyncssh.read_public_key(str(keygen(tmp_path / "k")) + ".pub")
    kh = tmp_path / "kh"
    record_known_host(str(kh), [name], key, hashed=True)
    assert kh.read_text().startswith("|1|")
    assert subprocess.run(["ssh-keygen", "-F", name, "-f", str(kh)], capture_output=True).returncode == 0


def test_overlapped_drops_before_the_banner_are_named_by_the_server_s_own_words():
    """The wording for handshakes closed while other connections of this run to that sshd
    overlapped (the keyless-sshd e2e test no longer overlaps: names share one attempt): what the
    server said decides, never MaxStartups without 'Exceeded MaxStartups'."""
    from fleetctl.connection.ssh_errors import drop_message

    keyless = drop_message("h:22", 6, "Connection lost", alone=False, banner_seen=False, said=b"")
    assert keyless.startswith("h:22 closed the connection before key exchange 6 times (Connection lost); "
                              "it sent nothing before closing, not 'Exceeded MaxStartups'"), keyless
    assert "sshd may have no host keys, or none it can read" in keyless and "MaxStartups (too many" not in keyless
    crowded = drop_message("h:22", 6, "Connection lost", alone=False, banner_seen=False,
                           said=b"Exceeded MaxStartups\r\n")
    assert "saying 'Exceeded MaxStartups': sshd's MaxStartups (too many" in crowded, crowded
