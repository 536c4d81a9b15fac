"""The SSH connection, on asyncssh. asyncssh is imported only by this module and its helpers
``ssh_target`` (ssh_config), ``ssh_hostkeys`` (known_hosts), ``ssh_identity`` (keys and agent),
``ssh_route`` (jump hosts), ``ssh_hop`` (TCP, gates, retries), ``ssh_handshake`` (one login and
what its failures mean), ``ssh_errors`` (what a server's refusals mean), ``ssh_sessions``
(channels within MaxSessions), ``ssh_exec`` (one command on its channel) and ``ssh_files`` (SFTP
and its exec fallback); the connection kind is ``ssh_kind``.

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

Login output (:mod:`fleetctl.connection.login_output`; a command's channel:
:mod:`fleetctl.connection.ssh_exec`): what the login shell's rc files print before a command never
reaches its stdout (each command line echoes this connection's marker first; what came before it
is reported once per connection, as a detail note, ``on_note``); a command whose marker has not
come was not started by the login shell (a timeout says so, :meth:`SSHConnection.login_stall`; a
wait past ``connect_timeout_s`` is told at once), and one whose channel ended before its marker
never ran (:class:`~fleetctl.errors.CommandNotStarted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence

import asyncssh

from ..errors import CommandNotStarted, HostUnreachable
from .base import CAPTURE_BYTES, CommandResult, Connection, LineCallback, OutputLine, cut_off_by_close
from .command import remote_command_line
from .lifeline import lifeline_s
from .login_output import (LOGIN_OUTPUT_NOTE, NO_HOME, LoginWatch, login_output_note, login_stall_message, marked_both,
                           marked_line, new_marker, parse_login_answer)
from .ssh_exec import open_exec
from .ssh_files import SFTPFiles
from .ssh_sessions import Sessions, UseOverflow
from .ssh_handshake import LoginFailed, RouteOptions
from .ssh_options import apply_options
from .ssh_hop import LoginStats
from .ssh_route import login
from .ssh_target import SSHConfigError, SSHTarget, resolve_target
from ..util.within import within

__all__ = ["SSHConnection", "LOGIN_OUTPUT_NOTE"]

#: sshd's default MaxSessions (sshd_config(5)).
DEFAULT_MAX_SESSIONS = 10


class SSHConnection(SFTPFiles, Connection):
    """An asyncssh client connection to one host.

    Args:
        host: inventory host name (for messages).
        address: the name or address to connect to, as given to ssh (``ansible_host``, else the
            inventory name): ssh_config ``Host`` patterns match it.
        port: TCP port; ``None`` lets ssh_config (or 22) decide.
        user: login name; ``None`` lets ssh_config (or the local user) decide.
        key_file: private key offered first (``ssh -i``); ``None`` uses ``IdentityFile``, the
            agent and the default keys.
        known_hosts: known_hosts file replacing ``UserKnownHostsFile`` (not its ``ProxyJump`` hops':
            each reads its own ``Host`` block); ``None`` uses ssh_config's (``~/.ssh/known_hosts``).
        accept_new_host_keys: record the key of a host that has none recorded (a changed key is
            refused regardless).
        connect_timeout_s: deadline for reaching the host, seconds: its TCP connect, SSH handshake
            and login, and every retry of a handshake the server drops, together; through jump
            hosts, for each hop (k jump hosts: at most (k + 1) x this; see
            :func:`~fleetctl.connection.ssh_route.login`).
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
        ssh_options: tuple[str, ...] = (),
        unresolved_hint: str = "",
    ) -> None:
        self.host = host
        self.unresolved_hint = unresolved_hint  # HostRef.unresolved_hint: said after "cannot resolve ADDRESS"
        self.address, self.port, self.user = address or host, port, user
        self.key_file, self.known_hosts = key_file, known_hosts
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_interval_s = keepalive_interval_s
        self.heartbeat_s = keepalive_interval_s
        self.max_sessions = max_sessions
        self.ssh_config = ssh_config
        self.ssh_options = tuple(ssh_options)
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
        self._marker = new_marker()
        self._login_noted = False
        self._login_watch = LoginWatch(notify_after_s=connect_timeout_s)

    holds_stdin = True

    # -- connecting ---------------------------------------------------------------------------

    def target(self) -> SSHTarget:
        """Where and how ssh would connect (ssh_config applied; cached).

        Raises:
            HostUnreachable: an ssh_config file is unreadable or invalid.
        """
        if self._target is None:
            try:
                self._target = apply_options(resolve_target(  # `-o` goes over ssh_config and the inventory
                    self.address, port=self.port, user=self.user, key_file=self.key_file,
                    known_hosts=self.known_hosts, config_file=self.ssh_config), self.ssh_options)
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
                # Inventory.check_hosts refuses this before a run (exit 2); here for a key removed since,
                # or a connection made without an inventory: this host fails, the others run
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
                cause = str(exc)
                if self.unresolved_hint and cause.startswith("cannot resolve "):  # the destination's, not a hop's
                    cause = f"{cause} ({self.unresolved_hint})"
                raise HostUnreachable(self.host, cause) from None
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
                              max_sessions=self.max_sessions, ssh_config=self.ssh_config,
                              ssh_options=self.ssh_options, unresolved_hint=self.unresolved_hint)
        other._target = self._target
        other._no_sftp, other.on_note, other.on_login_line = self._no_sftp, self.on_note, self.on_login_line
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
            res = await within(self._require().run(marked_line('echo "$SHELL"; echo "$HOME"', self._marker),
                                                             encoding=None), self.connect_timeout_s)
        except (OSError, asyncssh.Error, asyncio.TimeoutError):
            return "", ""
        finally:
            await self._sessions.release()
        if res.stderr and NO_HOME in res.stderr:
            self.home_missing = True  # sshd's own message (session.c do_child)
        with self._login_lines():
            return parse_login_answer(res.stdout or b"", res.stderr or b"", self._marker, host=self.host,
                                      ssh=self.ssh_hint(), shell=self.login_shell, rc=res.exit_status,
                                      signal=res.exit_signal and res.exit_signal[0])

    @contextlib.contextmanager
    def _login_lines(self):
        """Around what may raise :class:`CommandNotStarted`: its ``printed`` bytes go to
        :attr:`on_login_line` line by line (stdout's, then stderr's) before it goes on."""
        try:
            yield
        except CommandNotStarted as exc:
            if self.on_login_line is not None:
                for stream, data in zip(("stdout", "stderr"), exc.printed):
                    for piece in data.splitlines(keepends=True):
                        self.on_login_line(OutputLine(stream, piece, login=True))
            raise

    async def close(self) -> None:
        """Close SFTP and the connection (and shared jump hosts); safe to call twice. A command
        it cuts off raises :class:`~fleetctl.errors.ClosedHere` (:attr:`closed_here`)."""
        self.closed_here = True
        if self._overflow is not None:
            other, self._overflow = self._overflow, None
            await other.close()
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(asyncio.TimeoutError, OSError):
                await within(self._conn.wait_closed(), 5)
            self._conn = None
        if self._release_route is not None:
            self._release_route()
            self._release_route = None

    def _require(self) -> asyncssh.SSHClientConnection:
        if self._conn is None:
            raise HostUnreachable(self.host, "not connected")
        return self._conn

    def _note_login_output(self, text: bytes) -> None:
        """Report what the login shell printed before a command, once per connection."""
        note = login_output_note(text)
        if note is None or self._login_noted:
            return
        self._login_noted = True
        self.stats["login_output_bytes"] = len(text)
        if self.on_note is not None:
            self.on_note(note)

    def ssh_hint(self) -> str:
        """See :meth:`Connection.ssh_hint`: :attr:`SSHTarget.ssh_command` of :meth:`target` (the
        inventory's address, port and user over ssh_config), or ``ssh ADDRESS`` when ssh_config
        cannot be read."""
        try:
            return self.target().ssh_command
        except HostUnreachable:
            return f"ssh {self.address}"

    def login_stall(self) -> str | None:
        """See :meth:`Connection.login_stall`: a command here (or on the second connection) has
        waited at least :data:`~fleetctl.connection.login_output.STALL_MIN_S` for its marker."""
        waited = self._login_watch.stall_s()
        if waited is None:
            return self._overflow.login_stall() if self._overflow is not None else None
        return login_stall_message(self.login_shell, waited, self.ssh_hint())

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
        kw = {"env": env, "cwd": cwd, "timeout_s": timeout_s, "on_line": on_line, "become": become,
              "capture_bytes": capture_bytes, "supervise": supervise}
        if not hold_stdin and self._saturated():
            return await (await self._second()).run(argv, stdin=stdin, **kw)
        # the stdin bytes are let go of once written (a command that lives for the run would
        # otherwise keep them: the first command's script and job, on every host of a deploy)
        box = [stdin] if stdin is not None else []
        del stdin
        try:
            with cut_off_by_close(self, argv[0] if argv else "command"):
                return await self._run(argv, stdin=box, hold_stdin=hold_stdin, **kw)
        except UseOverflow:
            return await (await self._second()).run(argv, stdin=box[0] if box else None, **kw)

    async def _run(self, argv: Sequence[str], *, env: Mapping[str, str] | None, cwd: str | None,
                   timeout_s: float | None, on_line: LineCallback | None, stdin: list[bytes], become: bool,
                   capture_bytes: int | None, supervise: bool, hold_stdin: bool) -> CommandResult:
        argv = [str(a) for a in argv]
        self._count("execs")  # round trips, for the run record (a no-change deploy's test counts them)
        supervise = supervise and not stdin and not hold_stdin
        command = marked_both(remote_command_line(argv, env=env, cwd=cwd, supervise=supervise, become=become,
                                                  login_shell=self.login_shell,
                                                  lifeline_s=lifeline_s(self.keepalive_interval_s)), self._marker)
        conn = self._require()
        channel = await open_exec(conn, command, self._sessions, host=self.host, argv=argv, marker=self._marker,
                                  capture_bytes=capture_bytes, make_room=self._close_idle_sftp,
                                  overflow=lambda: not hold_stdin and self._saturated(),
                                  on_retry=lambda: self._count("channel_retries"))
        channel.on_login_output(self._note_login_output)
        if hold_stdin:
            self._pinned += 1
        try:
            await channel.drive(stdin=stdin, supervise=supervise, hold_stdin=hold_stdin, timeout_s=timeout_s,
                                heartbeat_s=self.keepalive_interval_s, on_line=on_line, login_watch=self._login_watch,
                                stall_message=lambda s: login_stall_message(self.login_shell, s, self.ssh_hint()),
                                on_note=lambda text: self.on_note(text) if self.on_note is not None else None)
        finally:
            if hold_stdin:
                self._pinned -= 1
            await self._sessions.release()
        self._note_login_output(channel.reader.login_output + channel.err_reader.login_output)
        with self._login_lines():
            return channel.result(connection_closed=conn.is_closed(), login_shell=self.login_shell,
                                  ssh=self.ssh_hint())
