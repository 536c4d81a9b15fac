"""Real OpenSSH sshd test hosts on loopback.

Each :class:`SshdHost` is one ``sshd -D`` process with its own port, host key, sshd_config,
authorized_keys, log and ``bin/`` folder put first on the session's PATH (``SetEnv``), where a
test can drop a fake ``nvidia-smi``. Test hosts log in as the current user by default or as a
dedicated user per login shell (bash, dash, zsh...), created on first use (needs root, which CI
has).

A host that logs in as the current user gets its own empty HOME (``<root>/home``, through
``SetEnv HOME=...``), so nothing a test does on it writes into the real home folder (as root:
``/root``), and the real one's login rc files (pyenv init...) do not run. Hosts that share a
``home`` argument share a home folder, as hosts on NFS do. Dedicated test users keep their own
home folders (tests write their rc files there on purpose).

``hosts_entries`` starts sshd in a private mount namespace (``unshare -m``) whose /etc/hosts holds
only those names: a jump host that resolves names the controller cannot.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .leftovers import create_user, session_user

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SFTP_SERVER_CANDIDATES = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                          "/usr/libexec/sftp-server")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SshdUnavailable(RuntimeError):
    """sshd is missing or would not start; the message says how to fix it."""


def sftp_server() -> str:
    for cand in SFTP_SERVER_CANDIDATES:
        if os.path.exists(cand):
            return cand
    raise SshdUnavailable("no sftp-server found; install openssh-server (.ci/run does)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_client_key(folder: Path) -> Path:
    """An ed25519 client key pair in ``folder`` (made once), returning the private key path."""
    key = folder / "client_ed25519"
    if not key.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


def ensure_homeless_user() -> str:
    """This session's local user ``fltest-nohome-<tag>`` whose home folder does not exist (needs
    root; removed at the session's end, see :mod:`tests.support.leftovers`)."""
    name = session_user("nohome")
    try:
        pwd.getpwnam(name)
        return name
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise SshdUnavailable(f"creating test user {name} needs root")
    create_user(name, "-M", "-d", f"/nonexistent/{name}", "-p", "*", "-s", "/bin/sh")
    return name


def ensure_user(shell: str) -> str:
    """A local user whose login shell is ``shell`` (``bash``, ``dash``, ``zsh``...); returns its name.

    The user is this session's ``fltest-<shell>-<tag>``, removed with its home folder at the
    session's end (:mod:`tests.support.leftovers`): sessions running side by side never share
    one. Creating a user needs root.
    """
    path = shutil.which(shell)
    if path is None:
        raise SshdUnavailable(f"login shell {shell} is not installed (apt-get install {shell})")
    name = session_user(Path(shell).name)
    try:
        entry = pwd.getpwnam(name)
        if entry.pw_shell != path:
            subprocess.run(["usermod", "-s", path, name], check=True)
        return name
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise SshdUnavailable(f"creating test user {name} needs root")
    # '*' rather than useradd's default '!': sshd without PAM refuses a locked ('!') account.
    create_user(name, "-m", "-p", "*", "-s", path)
    return name


@dataclass
class SshdHost:
    """One running sshd test host. ``known_hosts_line`` pins its host key."""

    name: str
    root: Path
    port: int
    user: str
    client_key: Path
    bin_dir: Path
    proc: subprocess.Popen | None = None
    home: Path | None = None
    argv: list[str] = field(default_factory=list)
    host_key: Path = field(init=False)

    def __post_init__(self) -> None:
        self.host_key = self.root / "ssh_host_ed25519_key"

    @property
    def known_hosts_line(self) -> str:
        pub = (self.root / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {' '.join(pub)}"

    @property
    def log(self) -> str:
        path = self.root / "sshd.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def ssh_hint(self, known_hosts: Path | str, ssh_config: Path | None = None) -> str:
        """The ssh command fleetctl's hints name for this host reached with :meth:`inventory_vars`
        (``SSHTarget.ssh_command``): the inventory's ssh_config file (if given) and known_hosts
        file, port, the inventory's key, user@address, quoted for sh."""
        config = ["-F", str(ssh_config)] if ssh_config else []
        return shlex.join(["ssh", *config, "-o", f"UserKnownHostsFile={known_hosts}", "-p", str(self.port),
                           "-i", str(self.client_key), f"{self.user}@127.0.0.1"])

    def inventory_vars(self, known_hosts: Path) -> dict:
        """Host vars for an inventory entry that reaches this host."""
        return {
            "ansible_host": "127.0.0.1",
            "ansible_port": self.port,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.client_key),
            "known_hosts": str(known_hosts),
        }

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def pause(self) -> None:
        """SIGSTOP the listener (it stops answering new and, for children, existing sessions)."""
        if self.proc:
            self.proc.send_signal(19)

    def remove_host_keys(self) -> None:
        """Delete the host key files while sshd runs (a host reimaged without them): OpenSSH 9.2's
        sshd re-executes itself for every connection and loads its host keys there, so from now
        on each connection is closed before the banner and the log says ``sshd: no hostkeys
        available -- exiting.``"""
        for path in (self.host_key, Path(str(self.host_key) + ".pub")):
            path.unlink(missing_ok=True)

    def change_host_key(self, timeout_s: float = 15.0) -> None:
        """Stop, generate a new host key, and start again on the same port (a reinstalled host)."""
        self.stop()
        for path in (self.host_key, Path(str(self.host_key) + ".pub")):
            path.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key)], check=True)
        self.proc = _spawn(self.argv)
        _wait_for_banner(self, timeout_s)


def start_sshd(
    name: str,
    root: Path,
    client_key: Path,
    *,
    shell: str | None = None,
    env: dict[str, str] | None = None,
    accept_env: str | None = None,
    extra_config: str = "",
    timeout_s: float = 15.0,
    home: Path | None = None,
    hosts_entries: dict[str, str] | None = None,
    login_user: str | None = None,
    wrap: list[str] | None = None,
    sftp: bool = True,
) -> SshdHost:
    """Start one sshd test host on a free loopback port and wait until it sends its banner.

    Args:
        name: test host name (folder name too).
        root: folder for this host's files.
        client_key: the private key whose public half may log in.
        shell: login shell for a dedicated user; ``None`` logs in as the current user.
        env: extra ``SetEnv`` variables for every session (PATH is always set, ``bin/`` first).
        accept_env: an ``AcceptEnv`` line value (e.g. ``"LANG LC_*"``).
        extra_config: more sshd_config lines (``MaxSessions 2``...).
        home: HOME for a host logging in as the current user (default ``<root>/home``); ignored
            for dedicated users.
        hosts_entries: ``{name: address}``: run sshd in its own mount namespace with an /etc/hosts
            of only these entries (needs root and ``unshare``).
        login_user: log in as this existing user (its own home, as the password database says).
        wrap: a command prefix that ends by exec'ing its arguments (``unshare --mount ...``): sshd,
            and so every session, runs inside it.
        sftp: write the ``Subsystem sftp`` line; ``False`` is a hardened server without SFTP
            (the subsystem request fails).

    Raises:
        SshdUnavailable: sshd missing, or it did not answer within ``timeout_s`` seconds.
    """
    if not os.path.exists(SSHD):
        raise SshdUnavailable("sshd not found: install openssh-server (.ci/run does)")
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    os.chmod(bin_dir, 0o755)
    user = login_user or (ensure_user(shell) if shell else pwd.getpwuid(os.getuid()).pw_name)
    key = root / "ssh_host_ed25519_key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    auth = root / "authorized_keys"
    shutil.copyfile(str(client_key) + ".pub", auth)
    os.chmod(auth, 0o644)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    port = free_port()
    setenv = {"PATH": f"{bin_dir}:{BASE_PATH}", "FLEETCTL_TEST_HOST": name}
    if not shell and not login_user:
        home = home or root / "home"
        home.mkdir(parents=True, exist_ok=True)
        os.chmod(home, 0o755)
        setenv["HOME"] = str(home)
    else:
        home = Path(pwd.getpwnam(user).pw_dir)
    setenv.update(env or {})
    setenv_line = " ".join(f'"{k}={v}"' for k, v in setenv.items())
    config = f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {key}
AuthorizedKeysFile {auth}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin yes
PidFile {root}/sshd.pid
{"Subsystem sftp " + sftp_server() if sftp else "# no Subsystem sftp: a hardened server"}
SetEnv {setenv_line}
LogLevel VERBOSE
{"AcceptEnv " + accept_env if accept_env else ""}
{extra_config}
"""
    (root / "sshd_config").write_text(config)
    log = root / "sshd.log"
    argv = [*(wrap or []), SSHD, "-D", "-f", str(root / "sshd_config"), "-E", str(log)]
    if hosts_entries is not None:
        hosts_file = root / "etc-hosts"
        hosts_file.write_text("".join(f"{addr} {n}\n" for n, addr in hosts_entries.items()))
        if shutil.which("unshare") is None:
            raise SshdUnavailable("unshare not found: install util-linux")
        # a private mount namespace: the bind mount is seen by this sshd and its sessions only
        argv = ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                'mount --bind "$1" /etc/hosts && shift && exec "$@"', "sshd-ns", str(hosts_file), *argv]
    host = SshdHost(name=name, root=root, port=port, user=user, client_key=client_key, bin_dir=bin_dir,
                    proc=_spawn(argv), home=home, argv=argv)
    _wait_for_banner(host, timeout_s)
    return host


def _spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for_banner(host: SshdHost, timeout_s: float) -> None:
    """Poll until the host sends its SSH banner. Raises SshdUnavailable if it exits or stays silent."""
    proc = host.proc
    assert proc is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise SshdUnavailable(f"sshd for {host.name} exited with {proc.returncode}: {err.strip()} "
                                  f"{host.log.strip()}")
        try:
            with socket.create_connection(("127.0.0.1", host.port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.02)  # poll for readiness: the listener is not up yet
    host.stop()
    raise SshdUnavailable(f"sshd for {host.name} did not answer on port {host.port} within {timeout_s:g} s")
