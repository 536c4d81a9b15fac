"""Host keys and keys as OpenSSH uses them, each against the fault made real on real sshd test hosts.

- a host behind a jump host that resolves names the controller cannot (the jump sshd runs in its
  own mount namespace with its own /etc/hosts), reached through an ssh_config alias: its key is
  checked and recorded under the name ssh uses, and real OpenSSH ``ssh`` accepts what fleetctl
  recorded;
- a host key that changes between two runs, directly and behind the jump host: refused whatever
  the flags, old and new fingerprints once each, and the exact ``ssh-keygen -R``;
- a passphrase-protected key whose identity is in a real ssh-agent;
- an agent holding 7 other keys against ``MaxAuthTries 3`` (real ``ssh`` fails there).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys

import pytest

from tests.support.agent import Agent, fingerprint, keygen
from tests.support.fleet import NO_READ_OVERRIDE, REPO, fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd


def openssh(cfg, host: str, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Real OpenSSH ssh with only the given ssh_config (never the real ~/.ssh), batch mode."""
    return subprocess.run(["ssh", "-F", str(cfg), "-o", "BatchMode=yes", host, *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def keygen_find(name: str, kh) -> bool:
    """OpenSSH's own lookup (ssh-keygen -F), hashed entries included."""
    return subprocess.run(["ssh-keygen", "-F", name, "-f", str(kh)], capture_output=True).returncode == 0


def keygen_lines(name: str, kh) -> list[str]:
    """The known_hosts lines OpenSSH finds for ``name`` (ssh-keygen -F), hashed entries included."""
    out = subprocess.run(["ssh-keygen", "-F", name, "-f", str(kh)], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.fixture
def jump_route(sshd_farm, tmp_path):
    """gpu-alias -> HostName gpu-behind (only the jump host can resolve it) via ProxyJump bastion."""
    behind = sshd_farm.start("behind")
    jump = sshd_farm.start("jump", hosts_entries={"gpu-behind": "127.0.0.1", "localhost": "127.0.0.1"})
    kh = tmp_path / "known_hosts"
    kh.write_text(jump.known_hosts_line + "\n")  # the bastion is known; the host behind it is not
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host gpu-alias
  HostName gpu-behind
  Port {behind.port}
  ProxyJump bastion
Host bastion
  HostName 127.0.0.1
  Port {jump.port}
Host *
  User {behind.user}
  IdentityFile {sshd_farm.client_key}
  IdentitiesOnly yes
  UserKnownHostsFile {kh}
  GlobalKnownHostsFile /dev/null
  HashKnownHosts yes
  StrictHostKeyChecking yes
""")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"gpu-alias": {"ssh_config": str(cfg)}}})
    return behind, jump, kh, cfg, inv


def test_host_behind_a_jump_host_is_checked_under_the_name_ssh_uses(jump_route, tmp_path):
    behind, jump, kh, cfg, inv = jump_route
    with pytest.raises(socket.gaierror):  # the fault is real: only the jump host resolves it
        socket.getaddrinfo("gpu-behind", behind.port)
    name = f"[gpu-behind]:{behind.port}"

    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "hi", home=tmp_path)
    assert res.returncode == 1
    error = json.loads(res.stdout)["gpu-alias"]["error"]
    assert f"host key unknown for {name}" in error and fingerprint(behind.host_key.with_suffix(".pub")) in error

    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--accept-new-host-keys", "--", "echo", "hi",
                   home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)["gpu-alias"]
    assert out["stdout"] == "hi\n"
    assert out["connection"]["route"] == ["bastion"]
    assert out["connection"]["recorded_host_keys"] == [name]
    # recorded where OpenSSH looks (HashKnownHosts: hashed), never under the alias
    assert keygen_find(name, kh) and not keygen_find("gpu-alias", kh) and not keygen_find("gpu-behind", kh)
    assert all(line.startswith("|1|") for line in kh.read_text().splitlines()[1:])
    # and real ssh, with StrictHostKeyChecking yes, trusts exactly what fleetctl recorded
    ssh = openssh(cfg, "gpu-alias", "echo", "from-openssh")
    assert ssh.returncode == 0 and ssh.stdout == "from-openssh\n", ssh.stderr
    # a second run needs no flag
    again = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "again", home=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["gpu-alias"]["stdout"] == "again\n"


def test_a_jump_hosts_key_is_checked_and_recorded_in_its_own_known_hosts_file(sshd_farm, tmp_path):
    """Each Host block names its own UserKnownHostsFile: the bastion's key is looked up, refused and
    recorded in the bastion's file, never the destination's (OpenSSH runs the hop as its own ``ssh -W``
    with the hop's own block; operator trial: fleetctl read and wrote the destination's file)."""
    bastion, behind = sshd_farm.start("bastion"), sshd_farm.start("behind")
    hop_kh, dest_kh = tmp_path / "kh_bastion", tmp_path / "kh_behind"
    hop_kh.write_text("")  # the bastion is not known yet: its own file is empty
    dest_kh.write_text(behind.known_hosts_line + "\n")  # the destination's holds the destination's key only
    cfg = tmp_path / "ssh_config"
    cfg.write_text("".join(f"""\
Host {name}
  HostName 127.0.0.1
  Port {host.port}
  User {host.user}
  IdentityFile {sshd_farm.client_key}
  IdentitiesOnly yes
  UserKnownHostsFile {kh}
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
""" + extra for name, host, kh, extra in (("bastion", bastion, hop_kh, ""),
                                          ("behind", behind, dest_kh, "  ProxyJump bastion\n"))))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"behind": {"ssh_config": str(cfg)}}})
    hop_name = f"[127.0.0.1]:{bastion.port}"

    res = fleetctl("-i", str(inv), "run", "--hosts", "behind", "--json", "--", "echo", "hi", home=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    err = json.loads(res.stdout)["behind"]["error"]
    assert err.startswith(f"jump host bastion: host key unknown for {hop_name}: "), err
    assert f"which is not in {hop_kh};" in err, err  # the hop's own file, not the destination's

    res = fleetctl("-i", str(inv), "run", "--hosts", "behind", "--json", "--accept-new-host-keys", "--", "echo", "hi",
                   home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["behind"]["connection"]["recorded_host_keys"] == [hop_name]
    assert keygen_find(hop_name, hop_kh) and not keygen_find(hop_name, dest_kh)
    assert dest_kh.read_text() == behind.known_hosts_line + "\n"  # the destination's file untouched
    # real ssh, StrictHostKeyChecking yes, trusts what fleetctl recorded where it looks; a plain run needs no flag
    ssh = openssh(cfg, "behind", "echo", "from-openssh")
    assert ssh.returncode == 0 and ssh.stdout == "from-openssh\n", ssh.stderr
    again = fleetctl("-i", str(inv), "run", "--hosts", "behind", "--json", "--", "echo", "again", home=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["behind"]["stdout"] == "again\n", again.stdout


def _count(text: str, needle: str) -> int:
    return text.count(needle)


def test_a_changed_host_key_is_refused_whatever_the_flags(jump_route, sshd_farm, tmp_path):
    behind, jump, kh, cfg, inv = jump_route
    direct = sshd_farm.start("direct")
    dkh = tmp_path / "direct_known_hosts"
    dkh.write_text(direct.known_hosts_line + "\n")
    inv2 = write_inventory(tmp_path / "inv2.yaml", {"d": {"direct": direct.inventory_vars(dkh)}})
    assert fleetctl("-i", str(inv), "run", "--hosts", "g", "--accept-new-host-keys", "--", "true",
                    home=tmp_path).returncode == 0
    assert fleetctl("-i", str(inv2), "run", "--hosts", "d", "--", "true", home=tmp_path).returncode == 0

    cases = [(behind, inv, "g", f"[gpu-behind]:{behind.port}", kh), (direct, inv2, "d", f"[127.0.0.1]:{direct.port}", dkh)]
    for host, inventory, pattern, name, known in cases:
        old_fp = fingerprint(host.host_key.with_suffix(".pub"))
        host.change_host_key()  # reinstalled between two runs: same name, same port, new key
        new_fp = fingerprint(host.host_key.with_suffix(".pub"))
        before = known.read_text()
        for cmd in (["run", "--hosts", pattern, "--accept-new-host-keys", "--", "true"],
                    ["deploy", "--hosts", pattern, "--accept-new-host-keys", "--playbook", str(_play(tmp_path))]):
            res = fleetctl("-i", str(inventory), *cmd, home=tmp_path)
            shown = res.stdout + res.stderr
            assert res.returncode == 1, shown
            assert f"host key changed for {name}" in shown
            assert _count(shown, old_fp) == 1 and _count(shown, new_fp) == 1, shown
            assert _count(shown, f"ssh-keygen -R {shlex.quote(name)} -f {known}") == 1, shown
            assert known.read_text() == before  # nothing recorded
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        assert all(r["status"] == "unreachable" for r in record["hosts"].values())
        # doing what the message says lets the new key be recorded (and only then)
        subprocess.run(["ssh-keygen", "-R", name, "-f", str(known)], check=True, capture_output=True)
        res = fleetctl("-i", str(inventory), "run", "--hosts", pattern, "--accept-new-host-keys", "--", "true",
                       home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert keygen_find(name, known)

    # the jump host's own key changing is refused too, and named as the jump host's
    old_fp = fingerprint(jump.host_key.with_suffix(".pub"))
    jump.change_host_key()
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--accept-new-host-keys", "--", "true",
                   home=tmp_path)
    error = json.loads(res.stdout)["gpu-alias"]["error"]
    assert res.returncode == 1
    assert error.startswith(f"jump host bastion: host key changed for [127.0.0.1]:{jump.port}")
    assert _count(error, old_fp) == 1 and _count(error, fingerprint(jump.host_key.with_suffix(".pub"))) == 1


def _play(tmp_path):
    p = tmp_path / "noop.yaml"
    p.write_text("name: noop\nhosts: all\ngather_facts: false\ntasks:\n"
                 "  - name: one\n    command: {argv: ['true']}\n  - name: two\n    command: {argv: ['true']}\n")
    return p


def test_passphrase_protected_key_works_when_its_identity_is_in_ssh_agent(sshd_farm, tmp_path):
    host = sshd_farm.start("agent-enc")
    enc = keygen(tmp_path / "enc_key", passphrase="correct horse")
    with open(host.root / "authorized_keys", "a") as fh:
        fh.write(enc.with_suffix(".pub").read_text())
    hv = {**host.inventory_vars(sshd_farm.known_hosts), "ansible_ssh_private_key_file": str(enc)}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": hv}})
    agent = Agent(tmp_path / "agent")
    try:
        # not in the agent: one line saying why and what to do
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "ok", home=tmp_path,
                       env=agent.env)
        assert res.returncode == 1
        error = json.loads(res.stdout)["h"]["error"]
        assert "\n" not in error
        assert f"{enc} is passphrase-protected and its identity is not in ssh-agent" in error
        assert f"ssh-add {enc}" in error
        agent.add(enc, passphrase="correct horse")
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "ok", home=tmp_path,
                       env=agent.env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads(res.stdout)["h"]["stdout"] == "ok\n"
    finally:
        agent.stop()


def test_agent_with_many_keys_never_exhausts_max_auth_tries(sshd_farm, tmp_path):
    host = sshd_farm.start("authtries", extra_config="MaxAuthTries 3")
    agent = Agent(tmp_path / "agent")
    try:
        for i in range(7):
            agent.add(keygen(tmp_path / f"other{i}"))
        assert len(agent.listed()) == 7
        kh = sshd_farm.known_hosts
        # the fault is real: OpenSSH offers the agent's keys before -i's and is cut off
        ssh = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={kh}",
                              "-i", str(sshd_farm.client_key), "-p", str(host.port), f"{host.user}@127.0.0.1", "true"],
                             capture_output=True, text=True, env={**os.environ, **agent.env}, timeout=60)
        assert ssh.returncode == 255 and "Too many authentication failures" in ssh.stderr, ssh.stderr
        # fleetctl offers the inventory's key first
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": host.inventory_vars(kh)}})
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "ok", home=tmp_path,
                       env=agent.env)
        assert res.returncode == 0, res.stdout + res.stderr
        # IdentitiesOnly with the right key IN the agent (8th, after the others): only it is offered
        right = tmp_path / "right"
        right.write_bytes(sshd_farm.client_key.read_bytes())
        right.chmod(0o600)
        right.with_suffix(".pub").write_bytes(sshd_farm.client_key.with_suffix(".pub").read_bytes())
        agent.add(right)
        cfg = tmp_path / "ssh_config"
        cfg.write_text(f"Host h8\n  HostName 127.0.0.1\n  Port {host.port}\n  User {host.user}\n"
                       f"  IdentityFile {right}.pub\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n")
        inv = write_inventory(tmp_path / "inv8.yaml", {"g": {"h8": {"ssh_config": str(cfg)}}})
        failed_before = host.log.count("Failed publickey")
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "ok", home=tmp_path,
                       env=agent.env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert host.log.count("Failed publickey") == failed_before  # no other key was tried
        # a key file others can read (and not in the agent) is skipped with the reason and the fix
        loose = keygen(tmp_path / "loose")
        loose.chmod(0o644)
        cfg.write_text(f"Host h8\n  HostName 127.0.0.1\n  Port {host.port}\n  User {host.user}\n"
                       f"  IdentityFile {loose}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n")
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "true", home=tmp_path, env=agent.env)
        error = json.loads(res.stdout)["h8"]["error"]
        assert res.returncode == 1 and f"chmod 600 {loose}" in error and "\n" not in error
    finally:
        agent.stop()


def test_accept_new_records_one_line_per_known_hosts_name_however_many_aliases(sshd_farm, tmp_path):
    """New-user trial: several inventory hosts on one HostName:port, --accept-new-host-keys wrote
    the same key once per alias. OpenSSH records a key under the name it connected to ([host]:port,
    or HostKeyAlias): one line per (name, key), never a duplicate of a line already there, whether
    the aliases connect at once (forks), in two controllers at once, or again later."""
    host = sshd_farm.start("shared")
    other = sshd_farm.start("other")
    kh = tmp_path / "known_hosts"
    aliases = {f"gpu{i}": host.inventory_vars(kh) for i in range(6)}
    aliases.update({f"alias{i}": {**host.inventory_vars(kh), "ansible_host": "localhost"} for i in range(3)})
    aliases["elsewhere"] = other.inventory_vars(kh)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": aliases})

    def run(*extra: str) -> list[subprocess.Popen]:
        return [subprocess.Popen(
            [sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", "g", "--accept-new-host-keys",
             *extra, "--", "true"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "FLEETCTL_HOME": str(tmp_path / f"home{i}")}) for i in range(2)]

    for proc in run():  # two controllers at once, each connecting every alias at once
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
    lines = kh.read_text().splitlines()
    names = [f"[127.0.0.1]:{host.port}", f"[localhost]:{host.port}", f"[127.0.0.1]:{other.port}"]
    # OpenSSH's own lookup: each name on exactly one line (hashed or not, as HashKnownHosts says)
    assert [len(keygen_lines(name, kh)) for name in names] == [1, 1, 1], lines
    assert len(lines) == 3, lines
    # a later run adds nothing: every name already holds its key
    before = kh.read_text()
    for proc in run("--forks", "1"):
        proc.communicate(timeout=300)
        assert proc.returncode == 0
    assert kh.read_text() == before
    # and real OpenSSH accepts what was recorded, for every alias
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host *\n  User {host.user}\n  IdentityFile {sshd_farm.client_key}\n  IdentitiesOnly yes\n"
                   f"  UserKnownHostsFile {kh}\n  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n")
    for name in ("127.0.0.1", "localhost"):
        res = openssh(cfg, name, "-p", str(host.port), "true")
        assert res.returncode == 0, res.stderr


def test_a_relative_ssh_config_is_the_file_next_to_the_inventory(sshd_farm, tmp_path):
    """``ssh_config: ssh_config`` in an inventory read from another folder (fleetctl runs in the
    repository here) names the file next to the inventory, by the same rule as ``known_hosts: kh``
    (operator trial: it was taken against the current folder and every host failed as
    unreachable); a missing one is refused at the line that names it, exit 2, before connecting."""
    host = sshd_farm.start("relcfg")
    site = tmp_path / "site"
    site.mkdir()
    (site / "ssh_config").write_text(f"Host gpu\n  HostName 127.0.0.1\n  Port {host.port}\n  User {host.user}\n"
                                     f"  IdentityFile {sshd_farm.client_key}\n  IdentitiesOnly yes\n"
                                     "  GlobalKnownHostsFile /dev/null\n")
    (site / "kh").write_text(host.known_hosts_line + "\n")
    inv = write_inventory(site / "inv.yaml", {"g": {"gpu": {"ssh_config": "ssh_config", "known_hosts": "kh"}}})
    assert not (REPO / "ssh_config").exists()  # the current folder holds no such file
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "hi", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["gpu"]["stdout"] == "hi\n"
    (site / "ssh_config").unlink()
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "echo", "hi", home=tmp_path)
    assert (res.returncode, res.stdout) == (2, ""), res.stdout + res.stderr
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("fleetctl: error:"))
    assert line == (f"fleetctl: error: {inv}:7: all.children.g.hosts.gpu.ssh_config: host 'gpu': ssh_config file "
                    f"'ssh_config' ({site / 'ssh_config'}) does not exist on this controller"), res.stderr
    assert "Traceback" not in res.stderr


def test_an_unreadable_ssh_config_or_key_file_is_refused_before_any_host_is_touched(sshd_farm, tmp_path):
    """A file the connection settings name that exists but the controller's user cannot read (mode
    000 for a user without root's read override, a folder, a FIFO) is bad input like a missing one:
    one line naming the file:line or ``-e``, the key, the host and why, exit 2, no login (it was
    ``UNREACHABLE: ssh_config file ... cannot be read``, no reason, and for a key a login attempt)."""
    host = sshd_farm.start("unreadable")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host *\n  User {host.user}\n")
    cfg.chmod(0o000)
    key = tmp_path / "id_copy"
    key.write_bytes(host.client_key.read_bytes())
    key.chmod(0o000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    good = host.inventory_vars(sshd_farm.known_hosts)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"cfg": {**good, "ssh_config": str(cfg)},
                                                        "key": {**good, "ansible_ssh_private_key_file": str(key)},
                                                        "ok": good}})
    before = host.log
    cases = [
        ("cfg", (), f"{inv}:12: all.children.g.hosts.cfg.ssh_config: host 'cfg': ssh_config file '{cfg}' cannot "
                    "be read: Permission denied"),
        ("key", (), f"{inv}:17: all.children.g.hosts.key.ansible_ssh_private_key_file: host 'key': private key "
                    f"file '{key}' cannot be read: Permission denied"),
        ("ok", ("-e", f"ssh_config={tmp_path}"), f"-e ssh_config: host 'ok': ssh_config file '{tmp_path}' is a "
                                                  "folder, not an ssh_config file"),
        ("ok", ("-e", f"ansible_private_key_file={fifo}"),
         f"-e ansible_private_key_file: host 'ok': private key file '{fifo}' is a FIFO (named pipe), not a "
         "regular file: reading it could block forever; give a file"),
    ]
    for name, extra, line in cases:
        res = fleetctl("-i", str(inv), "run", "--hosts", name, *extra, "--", "true", home=tmp_path,
                       prefix=NO_READ_OVERRIDE, timeout_s=60)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", f"fleetctl: error: {line}\n"), (name, res.stderr)
    # no host was touched: no SSH client spoke to the sshd (a bare TCP probe of the port by anything
    # else on this machine logs "kex_exchange_identification" without an identification string)
    spoke = [ln for ln in host.log[len(before):].splitlines()
             if "kex_exchange_identification" not in ln and not re.fullmatch(r".*Connection closed by \S+ port \d+", ln)]
    assert host.log.startswith(before) and spoke == [], spoke
    res = fleetctl("-i", str(inv), "run", "--hosts", "ok", "--", "true", home=tmp_path, prefix=NO_READ_OVERRIDE)
    assert res.returncode == 0, res.stderr  # the same controller user reaches the host otherwise
    # OpenSSH's "-F /dev/null" (no ssh_config at all) is not an unreadable file: a character device
    # that reads empty, taken as the empty config it is
    res = fleetctl("-i", str(inv), "run", "--hosts", "ok", "-e", "ssh_config=/dev/null", "--", "true",
                   home=tmp_path, prefix=NO_READ_OVERRIDE)
    assert res.returncode == 0, res.stderr


def test_a_revoked_host_key_names_the_revoked_line_not_the_hosts_own(sshd_farm, tmp_path):
    """Operator trial: ``@revoked * KEY`` appended as line 3 after the host's own hashed line 1 was
    reported as ``marked @revoked in known_hosts:1``; the line to act on is the ``@revoked`` one
    (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT: the marker is the line's first field)."""
    from fleetctl.connection.ssh_hostkeys import hashed_name

    host = sshd_farm.start("rev")
    known = tmp_path / "known_hosts"
    name, algo, blob = host.known_hosts_line.split()
    known.write_text(f"{hashed_name(name)} {algo} {blob}\n# the next line revokes it\n@revoked * {algo} {blob}\n")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"rev": host.inventory_vars(known)}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "rev", "--", "true", home=tmp_path, timeout_s=120)
    shown = res.stdout + res.stderr
    assert res.returncode == 1, shown
    assert f"is marked @revoked in {known}:3;" in shown, shown
    assert f"{known}:1" not in shown, shown
