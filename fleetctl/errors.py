"""The exception tree of fleetctl.

Every error a user can cause derives from :class:`FleetError`. The CLI turns :class:`InputError`
into one line on stderr and exit status 2; host-level errors become per-host results, never a crash
of the whole run.
"""

from __future__ import annotations

import asyncio


class FleetError(Exception):
    """Base of every error fleetctl raises on purpose."""


class InputError(FleetError):
    """Bad user input: an inventory, a playbook or a command line (exit status 2).

    Args:
        message: what is wrong, in one line.
        file: the file the input came from, if any.
        line: 1-based line in ``file``, if known.
        key: the key or dotted path inside the file (``all.children.gpu.hosts.n1.port``), if known.

    ``str(err)`` is the one line the user sees: ``FILE:LINE: KEY: MESSAGE`` with absent parts left out.
    """

    def __init__(
        self, message: str, *, file: str | None = None, line: int | None = None, key: str | None = None
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = str(self.file) + (f":{self.line}" if self.line else "") + ": "
        elif self.line:
            where = f"line {self.line}: "
        key = f"{one_line(self.key)}: " if self.key else ""
        return f"{where}{key}{one_line(self.message)}"


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters written as Python escapes (``\\n``):
    an error is one line even where a key or name read from a file holds a newline (a YAML block
    scalar given as a host name)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class InventoryError(InputError):
    """An inventory file or host pattern is invalid."""


class InventoryErrors(InventoryError):
    """Several inventory errors found at once: every bad var of the inventory, as ansible-core and
    pydantic report all validation errors of an input together, so that one run names every fix.

    Build it with :meth:`of`. ``errors``: the one-line errors, each once, in file and line order;
    ``str()`` is their lines, one a line (the only error whose ``str()`` is several lines);
    ``message``, ``file``, ``line`` and ``key`` are the first's.
    """

    def __init__(self, errors: "list[InventoryError]") -> None:
        self.errors = tuple(errors)
        first = self.errors[0]
        super().__init__(first.message, file=first.file, line=first.line, key=first.key)

    def __str__(self) -> str:
        return "\n".join(InventoryError.__str__(e) for e in getattr(self, "errors", ()))

    @classmethod
    def of(cls, errors: "list[InventoryError]") -> "InventoryError | None":
        """None for no error, the error itself for one, else all of them (nested ones flattened,
        duplicates, such as one group var refused for each of its hosts, once)."""
        flat: dict[str, InventoryError] = {}
        for e in errors:
            for one in getattr(e, "errors", (e,)):
                flat.setdefault(InventoryError.__str__(one), one)
        found = sorted(flat.values(), key=lambda e: (str(e.file or ""), e.line or 0))
        return None if not found else found[0] if len(found) == 1 else cls(found)


class InventoryNotFound(InventoryError):
    """A given inventory source is not there: neither an existing file or folder, nor a scheme
    source (``slurm:``), nor a host list. ``file`` is the source as given; the message says where
    it was given (``named_by``: the CLI's ``-i/--inventory or FLEETCTL_INVENTORY``, Python's
    ``Fleet.from_inventory(*sources)``), so the fix named is the one the caller can make."""

    def __init__(self, source: str, named_by: str) -> None:
        self.named_by = named_by
        super().__init__(f"inventory file not found ({named_by})", file=source)


class CommandRefused(InputError, ValueError):
    """An argv or environment that no process can be given (a NUL byte: execve(2) ends each string
    at NUL; a variable name that is not a POSIX name), refused by every connection before anything
    runs, in one line. Also a ``ValueError``, as the connection helpers documented it."""


class PlaybookError(InputError):
    """A playbook is invalid (unknown action, missing argument, undefined variable...)."""


class HostUnreachable(FleetError):
    """A host could not be reached or logged in to.

    Args:
        host: the inventory host name.
        cause: one line naming the cause (refused, timed out, auth failed, host key unknown/changed).

    Attributes:
        stats: what the attempt took (``handshake_retries``...), for the run record; may be empty.
    """

    def __init__(self, host: str, cause: str) -> None:
        self.host = host
        self.cause = cause
        self.stats: dict = {}
        super().__init__(f"{host}: unreachable: {cause}")


class ConnectionLost(HostUnreachable):
    """The connection to a host was lost while a command was at work on it (or between two of its
    commands). The connection knows only the command (``what``: its ``argv[0]``, often a task's
    ``/bin/sh``), so its ``cause`` names that; the engine, which knows the task, says the line with
    the task in its place (:meth:`during`), so the operator reads which task the host was in.

    Args:
        host: the inventory host name.
        what: the command at work (its ``argv[0]``).
        reason: what the transport said (``disconnected: Connection lost``), or "".
        waiting: the connection closed while the host waited between commands, before ``what``.
    """

    def __init__(self, host: str, what: str, reason: str = "", *, waiting: bool = False) -> None:
        self.what, self.reason, self.waiting = what, reason, waiting
        super().__init__(host, self._line(what))

    def _line(self, what: str) -> str:
        if self.waiting:
            return (f"connection lost before {what} (it closed while the host waited between commands)"
                    + (f": {self.reason}" if self.reason else ""))
        return f"connection lost during {what}" + (f": {self.reason}" if self.reason else "")

    def during(self, task: str) -> str:
        """The line naming ``task`` (``task 'build kernels' (build_wheel)``) instead of the command:
        ``connection lost during task 'build kernels' (build_wheel): disconnected: Connection lost``;
        lost between two commands, ``... (build_wheel) (it closed while the host waited between
        commands, before its command /bin/sh): REASON``."""
        if self.waiting:
            return (f"connection lost during {task} (it closed while the host waited between commands, before its "
                    f"command {self.what})" + (f": {self.reason}" if self.reason else ""))
        return f"connection lost during {task}" + (f": {self.reason}" if self.reason else "")


class ClosedHere(asyncio.CancelledError):
    """A command (or transfer) was cut off because fleetctl itself closed its connection: the run
    is ending (Ctrl-C, SIGTERM, an error escaping the engine) and let go of the host while the
    command was still at work. It is no fault of the host, so it is never
    :class:`HostUnreachable`: it is a cancellation (an :class:`asyncio.CancelledError`), and
    whoever records the host's outcome records it ``interrupted`` as for any interrupted command
    (operator trial: a SIGTERM recorded a healthy host "unreachable: connection lost during sh").

    Args:
        host: the inventory host name.
        what: the command (its ``argv[0]``) or transfer that was cut off.
    """

    def __init__(self, host: str, what: str) -> None:
        self.host = host
        self.what = what
        super().__init__(f"{host}: {what} cut off: fleetctl closed the connection (the run was interrupted)")


class CommandTimeout(FleetError):
    """A remote command ran past its deadline (seconds) and was stopped. ``login_stall``: why it
    never started, when the login shell had not started it yet (SSH: its rc files; see
    :mod:`fleetctl.connection.login_output`), else ""."""

    def __init__(self, host: str, argv: list[str], timeout_s: float, login_stall: str = "") -> None:
        self.host = host
        self.argv = argv
        self.timeout_s = timeout_s
        self.login_stall = login_stall
        super().__init__(f"{host}: command timed out after {timeout_s:g} s: {argv[0] if argv else ''}"
                         + (f": {login_stall}" if login_stall else ""))


class CommandNotStarted(FleetError):
    """The host's login shell ended before it ran a command (an rc file's ``exit`` or ``exec``, a
    ``nologin`` shell: see :mod:`fleetctl.connection.login_output`): the command did not run, so
    it has no exit status of its own. ``cause``: one line naming the shell and the files to look at.
    ``printed``: every byte the login shell printed before it ended, ``(stdout, stderr)``: no output
    of the command, yet the host's (the engine writes it to the host's log)."""

    def __init__(self, host: str, argv: list[str], cause: str, printed: tuple[bytes, bytes] = (b"", b"")) -> None:
        self.host = host
        self.argv = argv
        self.cause = cause
        self.printed = printed
        super().__init__(f"{host}: {cause}")


class TransferError(FleetError):
    """A file transfer (SFTP put/get) failed; ``str`` names the host, path and cause."""


class ControllerWriteError(TransferError):
    """A download's controller side failed: the local file or its folder cannot be written (a cache
    folder that is a file, read-only or full); the host's file was fine.

    Args:
        message: the whole line (host, paths, cause).
        cause: the cause alone (``No space left on device``); defaults to ``message``.
    """

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause or message


class ClassWheelUnstored(FleetError):
    """An arch class's wheel was built, but the controller could keep it nowhere to pass it on (its
    wheel cache and this run's temporary folder cannot be written: a full disk): the members that
    were to receive it fail with this line, naming the controller's folder and cause, not their own
    build preflight nor a lost builder (:meth:`fleetctl.engine.class_wheels.ClassWheels.unstored`)."""


class TransferLost(TransferError):
    """A download was cut off because the connection or its SFTP channel was lost: no other file
    would come over it (a folder fetch stops there, :func:`fleetctl.engine.transfer.fetch_from_hosts`)."""


class TaskFailed(FleetError):
    """A task failed on a host; carries the host and the command's result when there is one."""

    def __init__(self, host: str, message: str, result: object | None = None) -> None:
        self.host = host
        self.result = result
        super().__init__(f"{host}: {message}")


def host_message(host: str, error: BaseException | str) -> str:
    """An error as one host's message: ``str(error)`` without the leading ``"HOST: "`` that the
    errors raised below the engine carry (:class:`TransferError`, lock and facts errors), since
    every report already names the host (``h1: FAILED: put it: ...``, not ``h1: ... h1: ...``)."""
    text = str(error)
    prefix = f"{host}: "
    while host and text.startswith(prefix):
        text = text[len(prefix):]
    return text


class HostsFailed(FleetError):
    """Raised by :meth:`fleetctl.api.results.RunResult.raise_for_status` when a host failed or was
    unreachable (a run itself never raises for a host's failure: it is in the result).

    Attributes:
        result: the :class:`~fleetctl.api.results.RunResult`.
    """

    def __init__(self, message: str, result: object) -> None:
        self.result = result
        super().__init__(message)
