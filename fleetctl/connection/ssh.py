"""The SSH connection, on asyncssh. asyncssh is imported only by this module and its helpers
``ssh_target`` (ssh_config), ``ssh_hostkeys`` (known_hosts), ``ssh_identity`` (keys and agent) and
``ssh_route`` (TCP, gates, jump hosts, login).

One SSH connection per host, reused for every command and transfer of a run; commands are exec
channels multiplexed on it and files go over one SFTP session. The host is reached exactly as
ssh(1) would after ``~/.ssh/config`` (aliases, ``HostName``, ``Port``, ``User``, ``ProxyJump``,
``IdentityFile``, ``IdentitiesOnly``...; see :mod:`fleetctl.connection.ssh_target`), its host key
checked and recorded as OpenSSH does (:mod:`fleetctl.connection.ssh_hostkeys`: an unknown key is
refused unless ``accept_new_host_keys``, a changed one always), keys offered inventory key first
(:mod:`fleetctl.connection.ssh_identity`).

Sessions: exec channels and the SFTP session together stay within the server's ``MaxSessions``
(sshd_config(5), default 10). The limit starts at ``max_sessions``; when the server refuses a
channel, it drops to what is open, the request waits for a free session, and an idle SFTP
session is closed to make room (it reopens when a transfer needs it), so a host with
``MaxSessions 1`` runs a whole deploy, one session at a time. A command that holds its session for
the whole run (``hold_stdin``: the deploy lock) is *pinned*: when the host allows no session
beside the pinned ones, the other commands and transfers go over one second connection to the
host (opened then, closed with this one).

No command runs at login: the login shell and home folder are learnt from the run's first
command (:meth:`SSHConnection.learn_login`), and until then command lines are written so that
every login shell parses them alike (:func:`~fleetctl.connection.command.is_portable`), so
``fleetctl run`` costs one exec per host.
"""

from __future__ import annotations

import asyncio
import os
import contextlib
import posixpath
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import asyncssh

from ..errors import CommandTimeout, HostUnreachable, TransferError
from .base import CAPTURE_BYTES, CommandResult, Connection, LineCallback
from .command import remote_command_line
from .retry import retrying
from .ssh_sessions import Sessions
from .sftp_fallback import get_by_exec, put_by_exec, realpath_by_exec
from .ssh_errors import is_channel_refused, is_subsystem_refused, sftp_refused_note
from .ssh_route import MAX_HANDSHAKES, LoginFailed, LoginStats, RouteOptions, login
from .ssh_target import SSHConfigError, SSHTarget, resolve_target
from .streams import OutputTail, pump_lines

__all__ = ["SSHConnection", "MAX_HANDSHAKES"]

CHANNEL_ATTEMPTS = 12
UPLOAD_REQUESTS = 4
#: sshd's default MaxSessions (sshd_config(5)).
DEFAULT_MAX_SESSIONS = 10
_NO_HOME = "Could not chdir to home directory"


class _UseOverflow(Exception):
    """Every session the host allows is pinned: this request goes over the second connection."""


class SSHConnection(Connection):
    """An asyncssh client connection to one host.

    Args:
        host: inventory host name (for messages).
        address: the name or address to connect to, as given to ssh (``ansible_host``, else the
            inventory name): ssh_config ``Host`` patterns match it.
        port: TCP port; ``None`` lets ssh_config (or 22) decide.
        user: login name; ``None`` lets ssh_config (or the local user) decide.
        key_file: private key offered first (``ssh -i``); ``None`` uses ``IdentityFile``, the
            agent and the default keys.
        known_hosts: known_hosts file replacing ssh_config's ``UserKnownHostsFile``; ``None``
            uses ssh_config's (default ``~/.ssh/known_hosts``).
        accept_new_host_keys: record the key of a host that has none recorded (a changed key is
            refused regardless).
        connect_timeout_s: deadline for the TCP connect, and again for the SSH login, seconds.
        keepalive_interval_s: seconds between keepalives, so long silent builds are not cut by
            idle timeouts; the connection is declared dead after 3 unanswered ones.
        max_sessions: most sessions (exec channels plus SFTP) open at once at first.
        ssh_config: read only this ssh_config file (``ssh -F``) instead of ``~/.ssh/config`` and
            ``/etc/ssh/ssh_config``.

    Attributes:
        stats: after :meth:`open`: ``handshake_retries`` (drops before login, as past sshd's
            MaxStartups), ``tcp_connect_s``, ``login_s``, ``recorded_host_keys``, ``route`` (jump
            hosts), and ``channel_retries`` once a channel had to wait.
        home_missing: the login user's home folder does not exist on the host.
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
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        ssh_config: str | None = None,
    ) -> None:
        self.host = host
        self.address = address or host
        self.port = port
        self.user = user
        self.key_file = key_file
        self.known_hosts = known_hosts
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_interval_s = keepalive_interval_s
        self.max_sessions = max_sessions
        self.ssh_config = ssh_config
        self.stats: dict = {}
        self.home_missing = False
        self.login_shell = ""
        self._sessions = Sessions(max_sessions)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._release_route: Callable[[], None] | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_users = 0
        self._sftp_lock = asyncio.Lock()
        self._open_lock = asyncio.Lock()
        self._target: SSHTarget | None = None
        self._pinned = 0
        self._overflow: SSHConnection | None = None
        self._overflow_lock = asyncio.Lock()
        #: why SFTP cannot be used on this host, once learnt (shared with companion connections):
        #: from then on every file goes over an exec channel (:mod:`~fleetctl.connection.sftp_fallback`)
        self._no_sftp: dict[str, str] = {}

    holds_stdin = True

    # -- connecting ---------------------------------------------------------------------------

    def target(self) -> SSHTarget:
        """Where and how ssh would connect (ssh_config applied; cached).

        Raises:
            HostUnreachable: an ssh_config file is unreadable or invalid.
        """
        if self._target is None:
            try:
                self._target = resolve_target(self.address, port=self.port, user=self.user, key_file=self.key_file,
                                              known_hosts=self.known_hosts, config_file=self.ssh_config)
            except SSHConfigError as exc:
                raise HostUnreachable(self.host, str(exc)) from None
        return self._target

    async def open(self) -> None:
        """Connect (through jump hosts), check the host key and log in. No command runs: the
        first command is the first exec (see :meth:`learn_login` and :meth:`login_info`).

        Raises:
            HostUnreachable: naming the cause in one line.
        """
        async with self._open_lock:
            if self._conn is not None:
                return
            if self.key_file is not None and not os.path.isfile(self.key_file):
                # the inventory names a key this controller lacks: this host fails, the others run
                why = "is a folder, not a key" if os.path.isdir(self.key_file) else "does not exist on this controller"
                raise HostUnreachable(self.host, f"private key {self.key_file} {why}")
            target = self.target()
            login_stats = LoginStats()
            opts = RouteOptions(accept_new=self.accept_new_host_keys, timeout_s=self.connect_timeout_s,
                                keepalive_interval_s=self.keepalive_interval_s)
            try:
                self._conn, self._release_route = await login(target, opts, stats=login_stats)
            except LoginFailed as exc:
                self.stats.update(login_stats.as_dict())
                raise HostUnreachable(self.host, str(exc)) from None
            self.stats.update(login_stats.as_dict())

    def learn_login(self, shell: str, home: str, *, home_missing: bool = False) -> None:
        """What an earlier command of this run found out: the login shell (``$SHELL``, which parses
        the command lines) and the home folder. Until then command lines are written so that any
        login shell parses them alike (:func:`fleetctl.connection.command.is_portable`)."""
        if shell:
            self.login_shell = shell
        if home.startswith("/"):
            self.home = home
        self.home_missing = self.home_missing or home_missing

    async def login_info(self) -> tuple[str, str]:
        """``(login shell, home folder)``, asking the host (one command) unless already known."""
        if not self.home:
            shell, home = await self._login_shell_and_home()
            self.learn_login(shell, home)
            if not self.home:
                self.home = await self._realpath(".")
        return self.login_shell, self.home

    async def open_companion(self) -> "SSHConnection":
        """A second connection to the same host with the same settings (see
        :meth:`Connection.open_companion`); it shares this one's jump host connections."""
        other = SSHConnection(self.host, address=self.address, port=self.port, user=self.user,
                              key_file=self.key_file, known_hosts=self.known_hosts,
                              accept_new_host_keys=self.accept_new_host_keys,
                              connect_timeout_s=self.connect_timeout_s, keepalive_interval_s=self.keepalive_interval_s,
                              max_sessions=self.max_sessions, ssh_config=self.ssh_config)
        other._target = self._target
        other._no_sftp, other.on_note = self._no_sftp, self.on_note
        other.login_shell, other.home, other.home_missing = self.login_shell, self.home, self.home_missing
        await other.open()
        return other

    def _saturated(self) -> bool:
        """Every session the host allows is held by a pinned command."""
        return bool(self._pinned) and self._sessions.limit <= self._pinned

    async def _second(self) -> "SSHConnection":
        """The second connection for requests that find every session pinned (opened once)."""
        async with self._overflow_lock:
            if self._overflow is None:
                self._overflow = await self.open_companion()
                self._count("overflow_connections")
            return self._overflow

    async def _login_shell_and_home(self) -> tuple[str, str]:
        """The remote login shell (``$SHELL``, which will parse our command lines) and home folder,
        in one round trip and no SFTP session (``run`` never needs one). This one command is
        written so that sh, bash, zsh, fish and tcsh all parse it the same way; banner lines a
        login rc file prints come first and are skipped."""
        await self._sessions.acquire()
        try:
            res = await asyncio.wait_for(self._require().run('echo "$SHELL"; echo "$HOME"', encoding=None),
                                         self.connect_timeout_s)
        except (OSError, asyncssh.Error, asyncio.TimeoutError):
            return "", ""
        finally:
            await self._sessions.release()
        if res.stderr and _NO_HOME.encode() in res.stderr:
            self.home_missing = True  # sshd's own message (session.c do_child)
        lines = res.stdout.decode("utf-8", "replace").strip().splitlines() if res.stdout else []
        if len(lines) < 2:
            return (lines[-1].strip() if lines else ""), ""
        return lines[-2].strip(), lines[-1].strip()

    async def close(self) -> None:
        """Close SFTP and the connection (and let go of shared jump hosts); safe to call twice."""
        if self._overflow is not None:
            other, self._overflow = self._overflow, None
            await other.close()
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
        if self._release_route is not None:
            self._release_route()
            self._release_route = None

    def _require(self) -> asyncssh.SSHClientConnection:
        if self._conn is None:
            raise HostUnreachable(self.host, "not connected")
        return self._conn

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, asyncssh.DisconnectError):
            return f"disconnected: {exc.reason}"
        if isinstance(exc, asyncssh.ConnectionLost):
            return "connection lost"
        if isinstance(exc, OSError):
            return exc.strerror or str(exc)
        return f"{type(exc).__name__}: {exc}"

    def _count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

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
        capture_bytes: int | None = CAPTURE_BYTES,
        supervise: bool = True,
        hold_stdin: bool = False,
    ) -> CommandResult:
        """See :meth:`Connection.run`.

        Without ``stdin`` the command runs under the supervisor script (see
        :mod:`fleetctl.connection.command`): the channel's stdin stays open, and when it closes
        (timeout, Ctrl-C, a dropped connection) the command's process group is stopped on the
        host. On timeout the channel is signalled (TERM, then KILL) and closed. With
        ``hold_stdin`` the command itself watches its stdin (it gets ``stdin``, and EOF only when
        this call is cancelled) and its session is pinned (see the module docstring).
        """
        if not hold_stdin and self._saturated():
            return await (await self._second()).run(argv, env=env, cwd=cwd, timeout_s=timeout_s, on_line=on_line,
                                                     stdin=stdin, become=become, capture_bytes=capture_bytes,
                                                     supervise=supervise)
        # the stdin bytes are let go of once written (a command that lives for the run would
        # otherwise keep them: the first command's script and job, on every host of a deploy)
        box = [stdin] if stdin is not None else []
        del stdin
        try:
            return await self._run(argv, env=env, cwd=cwd, timeout_s=timeout_s, on_line=on_line, stdin=box,
                                   become=become, capture_bytes=capture_bytes, supervise=supervise,
                                   hold_stdin=hold_stdin)
        except _UseOverflow:
            return await (await self._second()).run(argv, env=env, cwd=cwd, timeout_s=timeout_s, on_line=on_line,
                                                     stdin=box[0] if box else None, become=become,
                                                     capture_bytes=capture_bytes, supervise=supervise)

    async def _run(self, argv: Sequence[str], *, env: Mapping[str, str] | None, cwd: str | None,
                   timeout_s: float | None, on_line: LineCallback | None, stdin: list[bytes], become: bool,
                   capture_bytes: int | None, supervise: bool, hold_stdin: bool) -> CommandResult:
        argv = [str(a) for a in argv]
        supervise = supervise and not stdin and not hold_stdin
        command = remote_command_line(argv, env=env, cwd=cwd, supervise=supervise, become=become,
                                      login_shell=self.login_shell)
        conn = self._require()
        async def open_channel(attempt: int) -> tuple[asyncssh.SSHClientProcess, float]:
            if attempt > 1:
                self._count("channel_retries")
            await self._sessions.acquire(self._close_idle_sftp)
            try:
                return await conn.create_process(command, encoding=None), time.monotonic()
            except asyncssh.ChannelOpenError:
                await self._sessions.refused()
                if not hold_stdin and self._saturated():
                    raise _UseOverflow() from None
                raise
            except BaseException:
                await self._sessions.release()
                raise

        try:
            # A refused channel (over the server's MaxSessions, or a just-closed channel the server
            # has not reaped yet) waits for a free session, backing off between attempts.
            proc, started = await retrying(open_channel, retryable=is_channel_refused, attempts=CHANNEL_ATTEMPTS,
                                           initial_s=0.05, max_s=2.0)
        except asyncssh.ChannelOpenError as exc:
            raise HostUnreachable(self.host, f"cannot open a session (MaxSessions?): {exc.reason}") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostUnreachable(self.host, self._describe(exc)) from None
        out, err = OutputTail(capture_bytes), OutputTail(capture_bytes)
        if hold_stdin:
            self._pinned += 1
        try:
            async def everything() -> None:
                if stdin:
                    proc.stdin.write(stdin.pop())
                if not supervise and not hold_stdin:
                    proc.stdin.write_eof()  # a supervised command's stdin is its lifeline
                await asyncio.gather(pump_lines(proc.stdout, "stdout", out, on_line),
                                     pump_lines(proc.stderr, "stderr", err, on_line))
                await proc.wait_closed()

            try:
                await asyncio.wait_for(everything(), timeout_s)
            except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
                await _stop(proc, supervised=supervise or hold_stdin)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise CommandTimeout(self.host, argv, timeout_s or 0) from None
            except (OSError, asyncssh.Error) as exc:
                proc.close()
                raise HostUnreachable(self.host, f"connection lost during {argv[0]}: {self._describe(exc)}") from None
        finally:
            if hold_stdin:
                self._pinned -= 1
            await self._sessions.release()
        sig = proc.exit_signal[0] if proc.exit_signal else None
        rc = proc.exit_status
        if rc is not None and rc < 0:
            rc = None
        if conn.is_closed() and rc is None and sig is None:
            raise HostUnreachable(self.host, f"connection lost during {argv[0]}")
        stdout, stdout_dropped = out.result()
        stderr, stderr_dropped = err.result()
        return CommandResult(argv=argv, rc=rc, stdout=stdout, stderr=stderr, signal=sig,
                             duration_s=time.monotonic() - started, stdout_dropped=stdout_dropped,
                             stderr_dropped=stderr_dropped)

    # -- files --------------------------------------------------------------------------------

    async def _close_idle_sftp(self) -> bool:
        """Close the SFTP session when nobody uses it, freeing its session (called with the
        sessions condition held). True when a session was freed."""
        if self._sftp is None or self._sftp_users or self._sftp_lock.locked():
            return False
        sftp, self._sftp = self._sftp, None
        sftp.exit()
        with contextlib.suppress(OSError, asyncssh.Error, asyncio.TimeoutError):
            await asyncio.wait_for(sftp.wait_closed(), 5)
        self._sessions.in_use -= 1
        return True

    @contextlib.asynccontextmanager
    async def _sftp_session(self):
        """The SFTP session, opened (within the session limit) when needed; it stays open
        while unused, until a command needs its session."""
        self._sftp_users += 1
        try:
            async with self._sftp_lock:
                if self._sftp is None:
                    if self._no_sftp:  # learnt while this request waited for the lock
                        raise _NoSFTP(self._no_sftp["why"])
                    self._sftp = await self._start_sftp()
            yield self._sftp
        finally:
            self._sftp_users -= 1
            if not self._sftp_users:
                await self._sessions.wake()

    async def _start_sftp(self) -> asyncssh.SFTPClient:
        conn = self._require()

        async def start(attempt: int) -> asyncssh.SFTPClient:
            if attempt > 1:
                self._count("channel_retries")
            await self._sessions.acquire()
            try:
                return await conn.start_sftp_client()
            except asyncssh.ChannelOpenError as exc:
                if is_subsystem_refused(exc):  # the channel opened: no session limit was hit
                    await self._sessions.release()
                    raise
                await self._sessions.refused()
                if self._saturated():
                    raise _UseOverflow() from None
                raise
            except BaseException:
                await self._sessions.release()
                raise

        try:
            return await retrying(start, retryable=is_channel_refused, attempts=CHANNEL_ATTEMPTS, initial_s=0.05,
                                  max_s=2.0)
        except (OSError, asyncssh.Error) as exc:
            if is_subsystem_refused(exc):
                self._learn_no_sftp(sftp_refused_note(self.host), note=True)
            elif not isinstance(exc, asyncssh.ChannelOpenError):  # not a session limit: SFTP itself broke
                self._learn_no_sftp(
                    f"{self.host}: cannot start SFTP: {exc} (a login rc file that prints text, such as ~/.bashrc, "
                    f"breaks SFTP: make it print only for interactive shells)")
            raise _NoSFTP(self._no_sftp.get("why") or f"{self.host}: cannot start SFTP: {exc}") from None

    def _learn_no_sftp(self, why: str, *, note: bool = False) -> None:
        """SFTP cannot be used on this host: remember it (one note, when ``note``)."""
        if "why" in self._no_sftp:
            return
        self._no_sftp["why"] = why
        self.stats["sftp"] = "refused: files over exec channels" if note else "broken: files over exec channels"
        if note and self.on_note is not None:
            self.on_note(why)

    async def _realpath(self, path: str) -> str:
        if not self._no_sftp:
            try:
                async with self._sftp_session() as sftp:
                    try:
                        return await sftp.realpath(path)
                    except (OSError, asyncssh.Error) as exc:
                        raise TransferError(f"{self.host}: realpath {path}: {exc}") from None
            except _NoSFTP:
                pass
        return await realpath_by_exec(self, path)

    async def put(self, local_path: str, remote_path: str, *, mode: int | None = None) -> None:
        """Upload over SFTP to a temporary name, then rename into place (no partial file is ever
        left under the final name; a failed upload removes its temporary file).

        When SFTP cannot start (a login rc file that prints text corrupts the SFTP stream), the
        file goes through an exec channel's stdin instead (``cat``), which such output cannot
        corrupt; once SFTP was refused or broke on this connection, every file goes that way at once.
        """
        if self._no_sftp:
            return await put_by_exec(self, local_path, remote_path, mode)
        if self._saturated() and self._sftp is None:
            return await (await self._second()).put(local_path, remote_path, mode=mode)
        try:
            async with self._sftp_session() as sftp:
                await self._put_sftp(sftp, local_path, remote_path, mode)
        except _UseOverflow:
            await (await self._second()).put(local_path, remote_path, mode=mode)
        except _NoSFTP as exc:
            await put_by_exec(self, local_path, remote_path, mode, why=str(exc))

    async def _put_sftp(self, sftp, local_path: str, remote_path: str, mode: int | None) -> None:
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

    async def get(self, remote_path: str, local_path: str) -> None:
        """Download a regular file over SFTP (over an exec channel where SFTP cannot be used); a
        symlink or special file is refused."""
        if self._no_sftp:
            return await get_by_exec(self, remote_path, local_path)
        if self._saturated() and self._sftp is None:
            return await (await self._second()).get(remote_path, local_path)
        try:
            await self._get(remote_path, local_path)
        except _UseOverflow:
            await (await self._second()).get(remote_path, local_path)
        except _NoSFTP:
            await get_by_exec(self, remote_path, local_path)

    async def _get(self, remote_path: str, local_path: str) -> None:
        async with self._sftp_session() as sftp:
            try:
                attrs = await sftp.lstat(remote_path)
                if attrs.type != asyncssh.FILEXFER_TYPE_REGULAR:
                    raise TransferError(f"{self.host}: get {remote_path}: not a regular file (symlinks are never "
                                        f"followed)")
                Path(local_path).parent.mkdir(parents=True, exist_ok=True)
                await sftp.get(remote_path, local_path)
            except (OSError, asyncssh.Error) as exc:
                reason = getattr(exc, "reason", None) or str(exc)
                raise TransferError(f"{self.host}: get {remote_path}: {reason}") from None


class _NoSFTP(TransferError):
    """The SFTP session could not start (``put`` then goes through an exec channel)."""


async def _stop(proc: asyncssh.SSHClientProcess, *, supervised: bool = False) -> None:
    """Stop the remote process, then close the channel. A supervised command's stdin is closed
    first: its supervisor stops the whole process group (TERM, then KILL after 5 s) and exits.
    Otherwise, or if that does not end it, the process is signalled (TERM, then KILL)."""
    if supervised:
        try:
            proc.stdin.write_eof()
            await asyncio.wait_for(proc.wait_closed(), 8)
            return
        except (OSError, asyncssh.Error, asyncio.TimeoutError):
            pass
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
