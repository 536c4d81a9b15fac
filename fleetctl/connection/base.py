"""The connection seam: one small interface every transport implements.

Modelled on Ansible's connection contract (exec_command, put_file, fetch_file, close) with two
changes: commands are argv lists, never shell strings, and output streams back line by line as raw
bytes while the command runs.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from ..errors import ClosedHere, HostUnreachable

Stream = Literal["stdout", "stderr"]

#: Bytes of each stream a CommandResult keeps by default (the last ones): 4 MiB.
CAPTURE_BYTES = 4 * 1024 * 1024


#: How a connection's note (``on_note``) that names something an interrupted transfer left on the
#: host begins; the run record writes such notes into the host's log.
LEFT_ON_HOST = "left on the host: "


@dataclass(frozen=True)
class OutputLine:
    """One line a remote command printed.

    Attributes:
        stream: ``"stdout"`` or ``"stderr"``.
        data: the exact bytes, including the trailing ``b"\\n"`` when there was one (the last line
            of a stream may lack it).
        partial: True when the line goes on in the next :class:`OutputLine` of the same stream (a
            line longer than 1 MiB arrives in pieces; see :mod:`fleetctl.connection.streams`).
        login: True when the login shell printed it before it ended without running the command
            (:attr:`Connection.on_login_line`): the host's bytes, no command's output.
    """

    stream: Stream
    data: bytes
    partial: bool = False
    login: bool = False

    @property
    def text(self) -> str:
        """The line for display: UTF-8 decoded with U+FFFD for invalid bytes, newline stripped."""
        return self.data.decode("utf-8", errors="replace").rstrip("\r\n")


LineCallback = Callable[[OutputLine], None]


@dataclass
class CommandResult:
    """What a finished command returned.

    Attributes:
        argv: the argv that ran (before environment wrapping).
        rc: exit status; ``None`` when the process was killed by a signal or the channel closed
            without one.
        signal: the signal name when the process died of one (``"KILL"``), else ``None``. Over
            SSH it is the name sshd sent (RFC 4254 section 6.10 ``exit-signal``); OpenSSH names
            only the 13 signals RFC 4254 lists and sends :data:`UNNAMED_SIGNAL` for any other
            (SIGBUS, SIGSYS, SIGTRAP, SIGXCPU...: session.c ``sig2name``).
        stdout: the stdout bytes, in order: all of them, or the last ``capture_bytes`` (see
            :meth:`Connection.run`; the host's log keeps every byte).
        stderr: the stderr bytes, likewise.
        duration_s: wall time in seconds.
        stdout_dropped: bytes of stdout not kept (dropped from the front, whole lines).
        stderr_dropped: bytes of stderr not kept.
        login_printed: ``(stdout, stderr)`` bytes the login shell's rc files printed before the
            command started (no output of the command: :mod:`fleetctl.connection.login_output`);
            empty where no login shell starts commands (local, Slurm job steps).
    """

    argv: list[str]
    rc: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    signal: str | None = None
    duration_s: float = 0.0
    extra: dict = field(default_factory=dict)
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    login_printed: tuple[bytes, bytes] = (b"", b"")

    @property
    def truncated(self) -> dict | None:
        """``{"stdout_dropped_bytes": N, "stderr_dropped_bytes": M}`` when output was dropped to keep
        memory bounded, else ``None`` (for ``--json`` and the run record to say so)."""
        if not (self.stdout_dropped or self.stderr_dropped):
            return None
        return {"stdout_dropped_bytes": self.stdout_dropped, "stderr_dropped_bytes": self.stderr_dropped}

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.rc == 0

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8 with replacement characters."""
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8 with replacement characters."""
        return self.stderr.decode("utf-8", errors="replace")


#: The ``signal`` of a command over SSH that a signal OpenSSH does not name ended (session.c
#: ``sig2name``: every signal but RFC 4254's ABRT ALRM FPE HUP ILL INT KILL PIPE QUIT SEGV TERM
#: USR1 USR2); which one it was is not sent.
UNNAMED_SIGNAL = "SIG@openssh.com"

#: The mode of the folders a put makes for fleetctl's own files (run folders, scripts, sources):
#: private to the login user.
OWN_DIR_MODE = 0o700


def folder_mode(dir_mode: int | None, explicit_dest: bool) -> int | None:
    """The mode a put gives the folders it makes (:meth:`Connection.put`): ``dir_mode`` when given;
    else :data:`OWN_DIR_MODE` for fleetctl's own folders, or None for an operator's
    ``explicit_dest``: made as ``mkdir -p`` makes them, 0777 less the login's umask (POSIX
    mkdir(1) ``-p``; a 0700 ``/new/a/b`` kept other users from the 0644 file copied into it)."""
    if dir_mode is not None:
        return dir_mode
    return None if explicit_dest else OWN_DIR_MODE


class Connection(abc.ABC):
    """One open connection to one host, reused for every command and transfer of a run.

    Implementations: :class:`fleetctl.connection.ssh.SSHConnection` (asyncssh, imported only by
    ``ssh.py`` and its ``ssh_*`` helpers) and :class:`fleetctl.connection.local.LocalConnection`
    (subprocess).
    Connections are async context managers; :meth:`open` is idempotent.

    Attributes:
        host: the inventory host name, for messages.
        home: the remote user's home directory (absolute), known after :meth:`open`.
        stats: what reaching the host took, for the run record (``handshake_retries``,
            ``channel_retries``, ``tcp_connect_s``, ``login_s``...); empty when there is nothing
            to say. Implementations fill what applies.
    """

    host: str
    home: str = ""
    stats: Mapping[str, object] = MappingProxyType({})
    #: :meth:`run` accepts ``hold_stdin=True`` (a command that lives as long as the run and ends
    #: when its stdin closes, such as the deploy lock in fleetctl's first command of a host).
    holds_stdin: bool = False
    #: Seconds between the heartbeat bytes (:data:`fleetctl.connection.command.HEARTBEAT`) that a
    #: ``hold_stdin`` command reads on its stdin after the bytes it was given, so the host can tell
    #: a controller gone silent (:mod:`fleetctl.connection.lifeline`); ``None``: none are sent.
    heartbeat_s: float | None = None
    #: Set by the engine: called with one line the connection learnt about the host on its own
    #: (an SSH server without SFTP, so files go over exec channels), at most once per fact.
    on_note: Callable[[str], None] | None = None
    #: Set by the engine: called with each line (``login=True``) that the login shell printed
    #: before it ended without running a command (:class:`~fleetctl.errors.CommandNotStarted`),
    #: or before an upload whose stdin it read (:func:`fleetctl.connection.sftp_fallback.put_by_exec`),
    #: just before that is raised, so the host's log keeps every byte the host printed.
    on_login_line: Callable[[OutputLine], None] | None = None
    #: Set by the engine before it closes the connection (:func:`fleetctl.engine.session.
    #: close_session`), and by :meth:`close`: from then on a command or transfer the closing cuts
    #: off raises :class:`~fleetctl.errors.ClosedHere` (an interruption), never
    #: :class:`~fleetctl.errors.HostUnreachable` (:func:`cut_off_by_close`).
    closed_here: bool = False

    async def __aenter__(self) -> "Connection":
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and log in.

        Raises:
            HostUnreachable: naming the cause (refused, timed out, auth failed, host key
                unknown or changed with both fingerprints).
        """

    @abc.abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str | None] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = None,
        on_line: LineCallback | None = None,
        stdin: bytes | None = None,
        become: bool = False,
        capture_bytes: int | None = CAPTURE_BYTES,
        hold_stdin: bool = False,
    ) -> CommandResult:
        """Run ``argv`` on the host and wait for it.

        The argv is quoted once (``shlex.join``) for the remote login shell; ``env`` is set in
        the command itself (through ``env NAME=VALUE``), never through the SSH ``env`` request,
        which most sshd configurations drop (``AcceptEnv``). stdout and stderr are read
        concurrently, split into lines as they arrive and passed to ``on_line`` in arrival order.

        Args:
            argv: program and arguments, exactly as the remote process must receive them.
            env: variables added to (or replacing those of) the login environment; a ``None``
                value unsets that variable (``env -u NAME``), e.g. a ``VIRTUAL_ENV`` the login
                shell exports.
            cwd: working directory on the host; the login directory when ``None``.
            timeout_s: deadline in seconds; the remote process is stopped when it passes.
            on_line: called for every output line as it arrives.
            stdin: bytes written to the process's stdin, then EOF; the process reads
                /dev/null when ``None``.
            become: run through ``sudo -n`` (never prompts: fails at once when sudo wants a
                password or a tty), the environment set inside sudo.
            capture_bytes: bytes of each stream kept in the result: the last ones (default
                4 MiB), whole lines; ``None`` keeps everything. Every byte still reaches
                ``on_line``, so memory stays flat whatever the command prints; the result's
                ``stdout_dropped``/``stderr_dropped`` say how much was not kept.
            hold_stdin: (only where :attr:`holds_stdin`) after ``stdin``, keep the command's
                stdin open until this call is cancelled; then it is closed, and the command
                gets 8 s to exit before it is signalled. Such a command holds its session for
                the whole run: a transport with a session limit sends the other commands over
                a second connection when the host allows no other session.

        Returns:
            The :class:`CommandResult`; a non-zero exit is data, not an exception.

        Raises:
            CommandTimeout: the deadline passed (the remote process was signalled).
            HostUnreachable: the connection was lost.
            ClosedHere: fleetctl closed the connection (:attr:`closed_here`) while the command
                ran, or before it started: the run is ending, the host did nothing wrong.
        """

    @abc.abstractmethod
    async def put(self, local_path: str, remote_path: str, *, mode: int | None = None, dir_mode: int | None = None,
                  explicit_dest: bool = False) -> None:
        """Upload one file (SFTP for SSH); parent folders are created (mode ``dir_mode``; when
        None, 0700 for fleetctl's own folders, or, with ``explicit_dest``, as ``mkdir -p`` makes
        them: 0777 less the login's umask, typically 0755, so that other users reach a file the
        operator copied to a new folder); what is at ``remote_path`` afterwards is checked to be
        that file. ``explicit_dest``: the operator chose the path (``fleetctl copy``), so a full
        disk's advice never names ``workdir``, and its new folders are no private ones of fleetctl.

        Raises:
            TransferError: naming the host, the path and the cause (a folder at ``remote_path``
                fails, never receives the file).
        """

    @abc.abstractmethod
    async def get(self, remote_path: str, local_path: str) -> None:
        """Download one regular file; a symlink on the host is refused, never followed.

        Raises:
            TransferError: naming the host, the path and the cause.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Close the connection; safe to call twice."""

    def learn_login(self, shell: str, home: str, *, home_missing: bool = False) -> None:
        """What a command of this run found out about the login: the shell (``$SHELL``) and
        the home folder (absolute). Default: the home folder is kept when none is known."""
        if home.startswith("/") and not self.home:
            self.home = home

    async def login_info(self) -> tuple[str, str]:
        """``(login shell or "", home folder)``; a transport may ask the host (one command)."""
        return getattr(self, "login_shell", ""), self.home

    def ssh_hint(self) -> str | None:
        """The command an operator types to reach this host by hand (``ssh -p 2222 u@10.0.0.5``),
        for hints that tell them to try one; ``None`` when the transport is not ssh (the default)."""
        return None

    def login_stall(self) -> str | None:
        """Why a command of this connection never started, when its login shell was still in its
        rc files as a deadline passed (``the remote login shell (zsh) had not started the command
        after 30 s: ...``, naming the files to look at), else ``None``. For the engine's own
        deadlines (a task's, a transfer's, the first command's), which stop a command from
        outside. Default: ``None`` (no login shell runs the commands: local, Slurm job steps)."""
        return None

    def extra_facts(self) -> dict:
        """What the connection itself knows about the host, merged into its facts (Slurm's view of
        a node: state, features, GRES). Default: nothing."""
        return {}

    async def open_companion(self) -> "Connection":
        """A second, open connection to the same host for a process that lives as long as the
        run (the deploy lock, :mod:`fleetctl.engine.hostlock`), so that it never takes one of this
        connection's sessions (a host with ``MaxSessions 1`` has just one). Close it when done.
        The default is this connection itself, for transports without a session limit.

        Raises:
            HostUnreachable: as :meth:`open`.
        """
        return self


@contextlib.contextmanager
def cut_off_by_close(conn: Connection, what: str) -> Iterator[None]:
    """Around a command or transfer of ``conn`` (``what``: its ``argv[0]``, for the message): a
    lost connection that fleetctl itself closed (:attr:`Connection.closed_here`: the run is
    ending) is re-raised as :class:`~fleetctl.errors.ClosedHere`, an interruption; one the host
    or the network lost stays :class:`~fleetctl.errors.HostUnreachable`. Whichever transport, the
    host's outcome is then decided as for any interrupted command (operator trial: a SIGTERM
    recorded a healthy host "unreachable: connection lost during sh")."""
    try:
        yield
    except HostUnreachable:
        if conn.closed_here:
            raise ClosedHere(conn.host, what) from None
        raise
