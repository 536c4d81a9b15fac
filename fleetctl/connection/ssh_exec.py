"""One command on an SSH exec channel, from opening the channel to its result.

:class:`~fleetctl.connection.ssh.SSHConnection` writes the command line (:mod:`fleetctl.connection.command`),
holds the connection's sessions and decides which connection a command goes over; this module runs
the command it wrote on one channel:

- :func:`open_exec` opens the channel in a session of the host's ``MaxSessions``
  (:meth:`~fleetctl.connection.ssh_sessions.Sessions.open_channel`), and names in one line why it
  cannot (the connection closed while the host waited between commands, MaxSessions, a lost
  connection);
- :meth:`ExecChannel.drive` feeds its stdin, beats its lifeline (the host stops a command whose
  heartbeats stop: :mod:`fleetctl.connection.lifeline`), streams its stdout (after the login
  marker: :mod:`fleetctl.connection.login_output`) and stderr line by line, and on timeout or
  cancellation stops it on the host (:func:`stop_process`);
- :meth:`ExecChannel.result` reads its exit status or signal into a
  :class:`~fleetctl.connection.base.CommandResult`, or says that it never ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import asyncssh

from ..errors import CommandTimeout, ConnectionLost, HostUnreachable
from .base import CommandResult, LineCallback
from .command import OwnWrapperStderr
from .lifeline import beat
from .login_output import LoginWatch, SkipLogin, check_started
from .ssh_errors import describe_error
from .ssh_sessions import Sessions
from .streams import OutputTail, pump_lines
from ..util.within import within

__all__ = ["ExecChannel", "open_exec", "stop_process"]


async def open_exec(conn: asyncssh.SSHClientConnection, command: str, sessions: Sessions, *, host: str,
                    argv: list[str], marker: str, capture_bytes: int | None,
                    make_room: Callable[[], Awaitable[bool]], overflow: Callable[[], bool],
                    on_retry: Callable[[], None]) -> "ExecChannel":
    """Open an exec channel on ``conn`` running ``command`` (the command line written for
    ``argv``; bytes in and out), in a session of ``sessions`` taken for it
    (:meth:`Sessions.open_channel` with ``make_room``, ``overflow`` and ``on_retry``; the caller
    releases it when the channel is done). ``host``, ``marker``, ``capture_bytes``: as
    :class:`ExecChannel` takes them.

    Raises:
        UseOverflow: the command must go over the second connection.
        HostUnreachable: naming ``host``, the command where it helps, and the cause.
    """
    async def open_process() -> tuple[asyncssh.SSHClientProcess, float]:
        return await conn.create_process(command, encoding=None), time.monotonic()

    try:
        proc, started = await sessions.open_channel(open_process, make_room=make_room, overflow=overflow,
                                                    on_retry=on_retry)
    except asyncssh.ChannelOpenError as exc:
        if conn.is_closed():  # it went away while the host waited between commands (new-user
            # trial: an sshd killed while its host waited for a wheel read "MaxSessions?")
            raise ConnectionLost(host, argv[0], exc.reason, waiting=True) from None
        raise HostUnreachable(host, f"cannot open a session (MaxSessions?): {exc.reason}") from None
    except (OSError, asyncssh.Error) as exc:
        raise HostUnreachable(host, describe_error(exc)) from None
    return ExecChannel(proc, started, host=host, argv=argv, marker=marker, capture_bytes=capture_bytes)


class ExecChannel:
    """One command's open exec channel: :meth:`drive` it to its end, then read its :meth:`result`.

    Args:
        proc: the channel's process (:func:`open_exec` opens it and makes its ExecChannel).
        started: when the channel opened (``time.monotonic()`` seconds).
        host: inventory host name (for messages).
        argv: the command as the caller gave it (for messages and the result).
        marker: the connection's login marker (:func:`~fleetctl.connection.login_output.new_marker`):
            stdout before it is the login shell's output, not the command's.
        capture_bytes: most bytes of stdout and of stderr kept in the result (``None``: all).

    Attributes:
        reader: the command's stdout after the marker (its ``login_output``: what came before).
    """

    def __init__(self, proc: asyncssh.SSHClientProcess, started: float, *, host: str, argv: list[str], marker: str,
                 capture_bytes: int | None) -> None:
        self.proc, self.started, self.host, self.argv = proc, started, host, argv
        self.reader = SkipLogin(proc.stdout, marker)
        #: stderr after its marker (:func:`~fleetctl.connection.login_output.marked_both`): the
        #: login shell's stderr banner is not the command's
        self.err_reader = SkipLogin(proc.stderr, marker)
        self._out, self._err = OutputTail(capture_bytes), OutputTail(capture_bytes)

    def on_login_output(self, tell: Callable[[bytes], None]) -> None:
        """Call ``tell`` with the login shell's output (stdout's, then stderr's) the moment both
        streams have passed their marker, while the command still runs: the first command lives
        for the whole run, and a host refused while planning runs no other, so waiting for its
        end would tell it after the host's record is closed."""
        def found(_: bytes) -> None:
            if not (self.reader.waiting or self.err_reader.waiting):
                tell(self.reader.login_output + self.err_reader.login_output)
        self.reader.on_found = self.err_reader.on_found = found

    async def drive(self, *, stdin: list[bytes], supervise: bool, hold_stdin: bool, timeout_s: float | None,
                    heartbeat_s: float, on_line: LineCallback | None, login_watch: LoginWatch,
                    stall_message: Callable[[float], str], on_note: Callable[[str], None]) -> None:
        """Run the command to its end: write ``stdin`` (popped, so the bytes are let go of once
        written) and, unless it is ``supervise`` d or ``hold_stdin``, close its stdin; beat every
        ``heartbeat_s`` seconds when it is either; stream both outputs to ``on_line``. The channel
        is watched by ``login_watch`` until its marker comes (``stall_message(waited_s)`` words a
        stall, ``on_note`` tells it).

        Raises:
            CommandTimeout: ``timeout_s`` seconds passed (the command was stopped; a login shell
                still in its rc files is named, ``stall_message``).
            HostUnreachable: the connection was lost meanwhile.
            asyncio.CancelledError: cancelled (the command was stopped first).
        """
        proc, reader, stopped = self.proc, self.reader, False
        login_watch.watch(reader, stall_message, on_note)
        try:
            async def everything() -> None:
                try:
                    if stdin:
                        proc.stdin.write(stdin.pop())
                    if not supervise and not hold_stdin:
                        proc.stdin.write_eof()  # a supervised command's stdin is its lifeline
                except BrokenPipeError:  # the channel already ended (its status and output say why)
                    pass
                # the host stops a command whose heartbeats stop (fleetctl/connection/lifeline.py)
                beats = asyncio.ensure_future(beat(proc.stdin.write, heartbeat_s)) if supervise or hold_stdin else None
                try:
                    await asyncio.gather(pump_lines(reader, "stdout", self._out, on_line),
                                         pump_lines(OwnWrapperStderr(self.err_reader) if supervise else self.err_reader,
                                                    "stderr", self._err, on_line))
                    await proc.wait_closed()
                finally:
                    if beats is not None:
                        beats.cancel()

            try:
                await within(everything(), timeout_s)
            except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
                stopped = True
                await stop_process(proc, supervised=supervise or hold_stdin, started=not reader.waiting)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                stall = stall_message(timeout_s or 0) if reader.waiting else ""
                raise CommandTimeout(self.host, self.argv, timeout_s or 0, login_stall=stall) from None
            except (OSError, asyncssh.Error) as exc:
                proc.close()
                raise ConnectionLost(self.host, self.argv[0], describe_error(exc)) from None
        finally:
            login_watch.done(reader, stopped=stopped)

    def result(self, *, connection_closed: bool, login_shell: str, ssh: str) -> CommandResult:
        """The command's result, once :meth:`drive` returned (``rc`` None when a signal, or
        nothing, ended it).

        Args:
            connection_closed: the SSH connection is closed now.
            login_shell: the login shell that parsed the command line (for messages).
            ssh: the ssh command that reaches the host by hand, for the hint of a command that
                never started (:attr:`~fleetctl.connection.ssh_target.SSHTarget.ssh_command`).

        Raises:
            HostUnreachable: the connection closed with no exit status or signal from the command.
            CommandNotStarted: the channel ended before the login shell started the command
                (:func:`~fleetctl.connection.login_output.check_started`).
        """
        proc = self.proc
        sig = proc.exit_signal[0] if proc.exit_signal else None
        rc = proc.exit_status
        if rc is not None and rc < 0:
            rc = None
        if connection_closed and rc is None and sig is None:
            raise ConnectionLost(self.host, self.argv[0])
        stdout, stdout_dropped = self._out.result()
        stderr, stderr_dropped = self._err.result()
        # what the login shell printed before it ended is no output of the command (it never ran)
        check_started(self.reader, self.host, self.argv, login_shell, rc=rc, signal=sig, ssh=ssh,
                      printed=self.reader.login_output, printed_err=self.err_reader.login_output + stderr)
        login_err = self.err_reader.login_output
        if self.err_reader.ended_early and login_err:  # the command ran: its stderr
            stderr, login_err = login_err + stderr, b""
        return CommandResult(argv=self.argv, rc=rc, stdout=stdout, stderr=stderr, signal=sig,
                             duration_s=time.monotonic() - self.started, stdout_dropped=stdout_dropped,
                             stderr_dropped=stderr_dropped, login_printed=(self.reader.login_output, login_err))


async def stop_process(proc: asyncssh.SSHClientProcess, *, supervised: bool = False, started: bool = True) -> None:
    """Stop the remote process, then close the channel. A supervised command's stdin is closed
    first: its supervisor stops the whole process group (TERM, then KILL after 5 s) and exits.
    Otherwise, or if that does not end it, the process is signalled (TERM, then KILL). A command
    the login shell had not ``started`` (no marker: still in its rc files): the shell gets TERM and
    the channel closes at once (nothing of ours runs yet; the shell's command line finds it closed)."""
    if not started:
        with contextlib.suppress(OSError, asyncssh.Error):
            proc.send_signal("TERM")
        proc.close()
        return
    if supervised:
        try:
            proc.stdin.write_eof()
            await within(proc.wait_closed(), 8)
            return
        except (OSError, asyncssh.Error, asyncio.TimeoutError):
            pass
    for sig in ("TERM", "KILL"):
        try:
            proc.send_signal(sig)
        except (OSError, asyncssh.Error):
            break
        try:
            await within(proc.wait_closed(), 3)
            return
        except asyncio.TimeoutError:
            continue
    proc.close()
