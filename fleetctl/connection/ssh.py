"""The SSH connection, on asyncssh: the only module of fleetctl that imports asyncssh.

One SSH connection per host, reused for every command and transfer of a run; commands are exec
channels multiplexed on it (at most ``max_sessions`` at once, below sshd's ``MaxSessions``, whose
default is 10 per sshd_config(5)), files go over one SFTP session. What the inventory does not say
(user, port, identity, HostName...) comes from the user's ``~/.ssh/config``, which asyncssh reads
as OpenSSH's ssh(1) does.

Host keys are checked against known_hosts (the inventory's ``known_hosts`` or OpenSSH's default
``~/.ssh/known_hosts``). An unknown key is refused unless ``accept_new_host_keys`` is set
(OpenSSH's ``StrictHostKeyChecking=accept-new``); a changed key is always refused, naming both
fingerprints.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import secrets
import socket
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import asyncssh
from tenacity import (AsyncRetrying, retry_if_exception, retry_if_exception_type, stop_after_attempt,
                      wait_exponential_jitter)

from ..errors import CommandTimeout, HostUnreachable, TransferError
from .base import CommandResult, Connection, LineCallback
from .command import remote_command_line
from .streams import pump_lines

#: Simultaneous SSH handshakes per controller. sshd's MaxStartups (default 10:30:100, sshd_config(5))
#: starts dropping unauthenticated connections past 10 pending; staying below avoids most drops,
#: and the rest are retried with backoff (see :func:`_is_handshake_drop`).
MAX_HANDSHAKES = int(os.environ.get("FLEETCTL_MAX_HANDSHAKES", "8"))
HANDSHAKE_ATTEMPTS = 6
CHANNEL_ATTEMPTS = 12
UPLOAD_REQUESTS = 4
_gates: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = weakref.WeakKeyDictionary()


def _handshake_gate() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(MAX_HANDSHAKES)
    return gate


def _is_handshake_drop(exc: BaseException) -> bool:
    """A connection closed by the server before the handshake finished: what sshd does to
    connections past MaxStartups. Only these are retried; refusals, timeouts, authentication
    and host key failures are final."""
    if isinstance(exc, (asyncssh.ConnectionLost, ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError)):
        return True
    return isinstance(exc, asyncssh.DisconnectError) and "closed" in str(exc.reason).lower()


class _ChannelLimit:
    """How many exec channels may be open at once on one connection. Starts below sshd's default
    MaxSessions (10); when the server refuses a channel (a lower MaxSessions), the limit drops to
    what is open now and the request waits for a free channel instead of failing."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.in_use = 0
        self._cond = asyncio.Condition()

    async def acquire(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.in_use < self.limit)
            self.in_use += 1

    async def release(self) -> None:
        async with self._cond:
            self.in_use -= 1
            self._cond.notify_all()

    async def refused(self) -> None:
        """The server refused our channel while ``in_use`` (ours included) were open: lower the
        limit to the others that are open (at least 1) and give our slot back."""
        async with self._cond:
            self.in_use -= 1
            self.limit = max(1, min(self.limit, self.in_use))
            self._cond.notify_all()


class SSHConnection(Connection):
    """An asyncssh client connection to one host.

    Args:
        host: inventory host name (used in messages, and as the ssh_config ``Host`` to match
            when ``address`` is the same).
        address: host name or IP to connect to.
        port: TCP port; ``None`` lets ``~/.ssh/config`` (or 22) decide.
        user: login name; ``None`` lets ``~/.ssh/config`` (or the local user) decide.
        key_file: private key path; ``None`` uses ssh_config ``IdentityFile``/the defaults/agent.
        known_hosts: known_hosts path; ``None`` means OpenSSH's default ``~/.ssh/known_hosts``.
        accept_new_host_keys: record an unknown host key instead of refusing it.
        connect_timeout_s: deadline for TCP connect plus SSH handshake and login, seconds.
        keepalive_interval_s: seconds between keepalives, so long silent builds are not cut by
            idle timeouts; the connection is declared dead after 3 unanswered ones.
        max_sessions: most exec channels open at once on this connection.
    """

    def __init__(
        self,
        host: str,
        *,
        address: str | None = None,
        port: int | None = None,
        user: str | None = None,
        key_file: str | None = None,
        known_hosts: str | None = None,
        accept_new_host_keys: bool = False,
        connect_timeout_s: float = 30.0,
        keepalive_interval_s: float = 15.0,
        max_sessions: int = 8,
    ) -> None:
        self.host = host
        self.address = address or host
        self.port = port
        self.user = user
        self.key_file = key_file
        self.known_hosts = known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_interval_s = keepalive_interval_s
        self._channels = _ChannelLimit(max_sessions - 1)  # one session is SFTP
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_lock = asyncio.Lock()
        self._open_lock = asyncio.Lock()
        self.login_shell = ""

    # -- connecting ---------------------------------------------------------------------------

    def _options(self) -> dict:
        opts: dict = {
            "connect_timeout": self.connect_timeout_s,
            "login_timeout": self.connect_timeout_s,
            "keepalive_interval": self.keepalive_interval_s,
            "keepalive_count_max": 3,
            "known_hosts": self.known_hosts if os.path.exists(self.known_hosts) else None,
        }
        if opts["known_hosts"] is None:
            # No file: every key is unknown. asyncssh treats known_hosts=None as "accept any",
            # so give it an empty list of trusted keys instead.
            opts["known_hosts"] = ([], [], [])
        if self.port is not None:
            opts["port"] = self.port
        if self.user is not None:
            opts["username"] = self.user
        if self.key_file is not None:
            opts["client_keys"] = [self.key_file]
        return opts

    async def open(self) -> None:
        """Connect, check the host key, log in, and learn the home directory (one SFTP realpath).

        Raises:
            HostUnreachable: naming the cause.
        """
        async with self._open_lock:
            if self._conn is not None:
                return
            if self.key_file is not None and not os.path.isfile(self.key_file):
                # the inventory names a key this controller lacks: this host fails, the others run
                why = "is a folder, not a key" if os.path.isdir(self.key_file) else "does not exist on this controller"
                raise HostUnreachable(self.host, f"private key {self.key_file} {why}")
            try:
                self._conn = await self._connect()
            except asyncssh.HostKeyNotVerifiable as exc:
                await self._handle_host_key(exc)
            except (asyncio.TimeoutError, TimeoutError):
                raise HostUnreachable(self.host, await self._diagnose_timeout()) from None
            except BaseException as exc:  # noqa: BLE001 - translated at the seam
                if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
                    raise
                raise HostUnreachable(self.host, self._describe(exc)) from None
            self.login_shell, self.home = await self._login_shell_and_home()
            if not self.home.startswith("/"):
                self.home = await self._realpath(".")

    async def _login_shell_and_home(self) -> tuple[str, str]:
        """The remote login shell (``$SHELL``, which will parse our command lines) and home folder,
        in one round trip and no SFTP session (``run`` never needs one). This one command is
        written so that sh, bash, zsh, fish and tcsh all parse it the same way; banner lines a
        login rc file prints come first and are skipped."""
        try:
            res = await asyncio.wait_for(self._require().run('echo "$SHELL"; echo "$HOME"', encoding=None),
                                         self.connect_timeout_s)
        except (OSError, asyncssh.Error, asyncio.TimeoutError):
            return "", ""
        lines = res.stdout.decode("utf-8", "replace").strip().splitlines() if res.stdout else []
        if len(lines) < 2:
            return (lines[-1].strip() if lines else ""), ""
        return lines[-2].strip(), lines[-1].strip()

    async def _handle_host_key(self, exc: Exception) -> None:
        """Tell an unknown key from a changed one; accept an unknown one only when asked."""
        try:
            new_key = await asyncio.wait_for(
                asyncssh.get_server_host_key(self.address, self.port or ()), self.connect_timeout_s
            )
        except Exception as fetch_exc:  # noqa: BLE001
            raise HostUnreachable(self.host, f"host key not verifiable ({exc}); {fetch_exc}") from None
        new_fp = new_key.get_fingerprint("sha256") if new_key else "?"
        old = self._known_keys()
        if old:
            old_fps = ", ".join(k.get_fingerprint("sha256") for k in old)
            raise HostUnreachable(
                self.host,
                f"host key changed: known_hosts {self.known_hosts} has {old_fps}, server offers "
                f"{new_fp}; refusing (remove the old entry with ssh-keygen -R if the change is expected)",
            ) from None
        if not self.accept_new_host_keys or new_key is None:
            raise HostUnreachable(
                self.host,
                f"host key unknown: {new_fp} is not in {self.known_hosts}; add it, or pass "
                f"--accept-new-host-keys to record it",
            ) from None
        self._record_host_key(new_key)
        try:
            self._conn = await self._connect()
        except Exception as again:  # noqa: BLE001
            raise HostUnreachable(self.host, self._describe(again)) from None

    async def _connect(self) -> asyncssh.SSHClientConnection:
        """asyncssh.connect under the handshake gate, retried with jittered exponential backoff
        (tenacity) only when the server dropped the handshake."""
        async for attempt in AsyncRetrying(retry=retry_if_exception(_is_handshake_drop),
                                           stop=stop_after_attempt(HANDSHAKE_ATTEMPTS),
                                           wait=wait_exponential_jitter(multiplier=0.2, max=5.0), reraise=True):
            with attempt:
                async with _handshake_gate():
                    return await asyncssh.connect(self.address, **self._options())
        raise AssertionError("unreachable")

    async def _diagnose_timeout(self) -> str:
        """Tell "no TCP connection" (packets dropped, no route) from "TCP up but no SSH banner"."""
        where = f"{self.address}:{self.port or 22}"
        probe_s = min(5.0, self.connect_timeout_s)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(self.address, self.port or 22), probe_s)
        except (asyncio.TimeoutError, TimeoutError):
            return f"timed out after {self.connect_timeout_s:g} s: no TCP connection to {where} (packets dropped or no route)"
        except OSError as exc:
            return f"timed out after {self.connect_timeout_s:g} s connecting to {where}; now: {exc.strerror or exc}"
        writer.close()
        return (f"timed out after {self.connect_timeout_s:g} s: {where} accepts TCP but sent no SSH banner "
                f"(a hung sshd or not an SSH server)")

    def _host_pattern(self) -> str:
        if self.port in (None, 22):
            return self.address
        return f"[{self.address}]:{self.port}"

    def _known_keys(self) -> list:
        if not os.path.exists(self.known_hosts):
            return []
        try:
            known = asyncssh.read_known_hosts(self.known_hosts)
            addr = self.address
            try:
                addr = socket.gethostbyname(self.address)
            except OSError:
                pass
            return list(known.match(self.address, addr, self.port or 22)[0])
        except (OSError, ValueError):
            return []

    def _record_host_key(self, key: asyncssh.SSHKey) -> None:
        path = Path(self.known_hosts)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        line = f"{self._host_pattern()} {key.export_public_key().decode().strip()}\n"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)

    def _describe(self, exc: BaseException) -> str:
        where = f"{self.address}:{self.port or 22}"
        if isinstance(exc, ConnectionRefusedError):
            return f"connection refused by {where}"
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            return f"timed out after {self.connect_timeout_s:g} s connecting to {where} (no SSH banner or no route)"
        if isinstance(exc, socket.gaierror):
            return f"cannot resolve {self.address}: {exc.strerror}"
        if isinstance(exc, asyncssh.PermissionDenied):
            who = self.user or "the default user"
            key = self.key_file or "default keys"
            return f"authentication failed for {who} with {key}"
        if isinstance(exc, asyncssh.DisconnectError):
            return f"disconnected by {where}: {exc.reason}"
        if isinstance(exc, OSError):
            return f"{exc.strerror or exc} ({where})"
        return f"{type(exc).__name__}: {exc}"

    async def close(self) -> None:
        """Close SFTP and the connection; safe to call twice."""
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 5)
            except (asyncio.TimeoutError, OSError):
                pass
            self._conn = None

    def _require(self) -> asyncssh.SSHClientConnection:
        if self._conn is None:
            raise HostUnreachable(self.host, "not connected")
        return self._conn

    # -- commands -----------------------------------------------------------------------------

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = None,
        on_line: LineCallback | None = None,
        stdin: bytes | None = None,
        become: bool = False,
        supervise: bool = True,
    ) -> CommandResult:
        """See :meth:`Connection.run`.

        Without ``stdin`` the command runs under the supervisor script (see
        :mod:`fleetctl.connection.command`): the channel's stdin stays open, and when it closes
        (timeout, Ctrl-C, a dropped connection) the command's process group is stopped on the
        host. On timeout the channel is signalled (TERM, then KILL) and closed.
        """
        argv = [str(a) for a in argv]
        supervise = supervise and stdin is None
        command = remote_command_line(argv, env=env, cwd=cwd, supervise=supervise, become=become,
                                      login_shell=self.login_shell)
        conn = self._require()
        try:
            # A refused channel (over the server's MaxSessions, or a just-closed channel the server
            # has not reaped yet) waits for a free one: tenacity backs off between attempts.
            async for attempt in AsyncRetrying(retry=retry_if_exception_type(asyncssh.ChannelOpenError),
                                               stop=stop_after_attempt(CHANNEL_ATTEMPTS),
                                               wait=wait_exponential_jitter(multiplier=0.05, max=2.0), reraise=True):
                with attempt:
                    await self._channels.acquire()
                    started = time.monotonic()
                    try:
                        proc = await conn.create_process(command, encoding=None)
                    except asyncssh.ChannelOpenError:
                        await self._channels.refused()
                        raise
                    except BaseException:
                        await self._channels.release()
                        raise
        except asyncssh.ChannelOpenError as exc:
            raise HostUnreachable(self.host, f"cannot open a channel: {exc.reason}") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostUnreachable(self.host, self._describe(exc)) from None
        try:
            out, err = bytearray(), bytearray()

            async def everything() -> None:
                if stdin is not None:
                    proc.stdin.write(stdin)
                if not supervise:
                    proc.stdin.write_eof()  # a supervised command's stdin is its lifeline
                await asyncio.gather(
                    pump_lines(proc.stdout, "stdout", out, on_line),
                    pump_lines(proc.stderr, "stderr", err, on_line),
                )
                await proc.wait_closed()

            try:
                await asyncio.wait_for(everything(), timeout_s)
            except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
                await _stop(proc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise CommandTimeout(self.host, argv, timeout_s or 0) from None
            except (OSError, asyncssh.Error) as exc:
                proc.close()
                raise HostUnreachable(self.host, f"connection lost during {argv[0]}: {self._describe(exc)}") from None
        finally:
            await self._channels.release()
        sig = proc.exit_signal[0] if proc.exit_signal else None
        rc = proc.exit_status
        if rc is not None and rc < 0:
            rc = None
        if conn.is_closed() and rc is None and sig is None:
            raise HostUnreachable(self.host, f"connection lost during {argv[0]}")
        return CommandResult(argv=argv, rc=rc, stdout=bytes(out), stderr=bytes(err), signal=sig,
                             duration_s=time.monotonic() - started)

    # -- files --------------------------------------------------------------------------------

    async def _sftp_client(self) -> asyncssh.SFTPClient:
        async with self._sftp_lock:
            if self._sftp is None:
                try:
                    self._sftp = await self._require().start_sftp_client()
                except (OSError, asyncssh.Error) as exc:
                    raise TransferError(
                        f"{self.host}: cannot start SFTP: {exc} (a login rc file that prints text, "
                        f"such as ~/.bashrc, breaks SFTP: make it print only for interactive shells)"
                    ) from None
            return self._sftp

    async def _realpath(self, path: str) -> str:
        sftp = await self._sftp_client()
        try:
            return await sftp.realpath(path)
        except (OSError, asyncssh.Error) as exc:
            raise TransferError(f"{self.host}: realpath {path}: {exc}") from None

    async def put(self, local_path: str, remote_path: str, *, mode: int | None = None) -> None:
        """Upload over SFTP to a temporary name, then rename into place (no partial file is ever
        left under the final name; a failed upload removes its temporary file).

        When SFTP cannot start (a login rc file that prints text corrupts the SFTP stream), the
        file goes through an exec channel's stdin instead (``cat``), which such output cannot
        corrupt.
        """
        try:
            sftp = await self._sftp_client()
        except TransferError as exc:
            return await self._put_by_cat(local_path, remote_path, mode, exc)
        parent = posixpath.dirname(remote_path)
        tmp = posixpath.join(parent, f".{posixpath.basename(remote_path)}.{secrets.token_hex(4)}.part")
        try:
            if parent:  # folders fleetctl creates are private to the user
                await sftp.makedirs(parent, attrs=asyncssh.SFTPAttrs(permissions=0o700), exist_ok=True)
            # 4 requests in flight (asyncssh's default is 16 x 256 KiB per upload): what 20+
            # simultaneous uploads cost in controller memory, without a measurable loss of speed.
            await sftp.put(local_path, tmp, max_requests=UPLOAD_REQUESTS)
            await sftp.chmod(tmp, mode if mode is not None else 0o644)
            await sftp.posix_rename(tmp, remote_path)
        except (OSError, asyncssh.Error) as exc:
            try:
                await sftp.remove(tmp)
            except (OSError, asyncssh.Error):
                pass
            reason = getattr(exc, "reason", None) or str(exc)
            if getattr(exc, "code", None) == asyncssh.FX_FAILURE or "space" in reason.lower():
                reason += " (is the host's disk full? the partial file was removed)"
            raise TransferError(f"{self.host}: upload {local_path} -> {remote_path}: {reason}") from None

    async def _put_by_cat(self, local_path: str, remote_path: str, mode: int | None, why: Exception) -> None:
        data = Path(local_path).read_bytes()
        script = ('umask 077; d=$(dirname -- "$1"); mkdir -p -- "$d" && cat > "$1.part" && '
                  'chmod "$2" "$1.part" && mv -f -- "$1.part" "$1" || { rc=$?; rm -f -- "$1.part"; exit $rc; }')
        res = await self.run(["/bin/sh", "-c", script, "fleetctl-put", remote_path, f"{mode or 0o644:o}"], stdin=data,
                             timeout_s=600)
        if res.rc != 0:
            raise TransferError(f"{why}; upload through the shell failed too: {res.stderr_text.strip()[-300:]}")

    async def get(self, remote_path: str, local_path: str) -> None:
        """Download a regular file over SFTP; a symlink or special file is refused."""
        sftp = await self._sftp_client()
        try:
            attrs = await sftp.lstat(remote_path)
            if attrs.type != asyncssh.FILEXFER_TYPE_REGULAR:
                raise TransferError(f"{self.host}: get {remote_path}: not a regular file (symlinks are never followed)")
            Path(local_path).parent.mkdir(parents=True, exist_ok=True)
            await sftp.get(remote_path, local_path)
        except (OSError, asyncssh.Error) as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            raise TransferError(f"{self.host}: get {remote_path}: {reason}") from None


async def _stop(proc: asyncssh.SSHClientProcess) -> None:
    """Ask the remote process to stop (TERM, then KILL), then close the channel."""
    for sig in ("TERM", "KILL"):
        try:
            proc.send_signal(sig)
        except (OSError, asyncssh.Error):
            break
        try:
            await asyncio.wait_for(proc.wait_closed(), 3)
            return
        except asyncio.TimeoutError:
            continue
    proc.close()


# -- the connection kind ------------------------------------------------------------------------

from pydantic import AliasChoices, Field  # noqa: E402

from .registry import ConnectionKind, ConnectionSettings, ConnectOptions, HostRef, KindScope  # noqa: E402


class SSHSettings(ConnectionSettings):
    """The host vars an SSH host reads (Ansible's names; ``None``: the inventory does not say, and
    ``~/.ssh/config`` or OpenSSH's default decides). Aliases are in ansible-core's precedence: the
    legacy ``ansible_ssh_*`` name wins wherever it is set (``MAGIC_VARIABLE_MAPPING``; checked
    against ansible-core by tests/test_inventory_ansible.py).

    Attributes:
        address: where to connect (legacy ``ansible_ssh_host``, then ``ansible_host``).
        port: TCP port (legacy ``ansible_ssh_port``, then ``ansible_port``); a numeric string is accepted.
        user: login name (legacy ``ansible_ssh_user``, then ``ansible_user``).
        private_key_file: private key path (``ansible_ssh_private_key_file``,
            ``ansible_private_key_file``), resolved by the inventory against its own folder.
        known_hosts: fleetctl's ``known_hosts`` var: a known_hosts file to check keys against.
        keepalive_interval_s: fleetctl's ``keepalive_interval`` var, seconds between keepalives.
    """

    address: str | None = Field(default=None, validation_alias=AliasChoices("ansible_ssh_host", "ansible_host"))
    port: int | None = Field(default=None, ge=1, le=65535,
                             validation_alias=AliasChoices("ansible_ssh_port", "ansible_port"))
    user: str | None = Field(default=None, validation_alias=AliasChoices("ansible_ssh_user", "ansible_user"))
    private_key_file: str | None = Field(
        default=None, validation_alias=AliasChoices("ansible_ssh_private_key_file", "ansible_private_key_file"))
    known_hosts: str | None = Field(default=None, validation_alias=AliasChoices("known_hosts"))
    keepalive_interval_s: float = Field(default=15.0, gt=0, validation_alias=AliasChoices("keepalive_interval"))


class _SSHScope(KindScope):
    def __init__(self, options: ConnectOptions) -> None:
        self.options = options

    def connection(self, host: HostRef) -> SSHConnection:
        s = host.settings
        assert isinstance(s, SSHSettings)
        return SSHConnection(
            host.name, address=s.address or host.name, port=s.port, user=s.user, key_file=s.private_key_file,
            known_hosts=s.known_hosts, accept_new_host_keys=self.options.accept_new_host_keys,
            connect_timeout_s=self.options.connect_timeout_s, keepalive_interval_s=s.keepalive_interval_s)


class _SSHKind(ConnectionKind):
    """OpenSSH-compatible hosts over asyncssh (``ansible_connection: ssh``, the default)."""

    name = "ssh"
    settings_model = SSHSettings

    def scope(self, options: ConnectOptions) -> KindScope:
        return _SSHScope(options)


SETTINGS = SSHSettings
KIND = _SSHKind()
