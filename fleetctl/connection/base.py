"""The connection seam: one small interface every transport implements.

Modelled on Ansible's connection contract (exec_command, put_file, fetch_file, close) with two
changes: commands are argv lists, never shell strings, and output streams back line by line as raw
bytes while the command runs.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Stream = Literal["stdout", "stderr"]


@dataclass(frozen=True)
class OutputLine:
    """One line a remote command printed.

    Attributes:
        stream: ``"stdout"`` or ``"stderr"``.
        data: the exact bytes, including the trailing ``b"\\n"`` when there was one (the last line
            of a stream may lack it).
    """

    stream: Stream
    data: bytes

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
        signal: the signal name when the process died of one (``"KILL"``), else ``None``.
        stdout: all stdout bytes, in order.
        stderr: all stderr bytes, in order.
        duration_s: wall time in seconds.
    """

    argv: list[str]
    rc: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    signal: str | None = None
    duration_s: float = 0.0
    extra: dict = field(default_factory=dict)

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


class Connection(abc.ABC):
    """One open connection to one host, reused for every command and transfer of a run.

    Implementations: :class:`fleetctl.connection.ssh.SSHConnection` (asyncssh; the only module that
    imports asyncssh) and :class:`fleetctl.connection.local.LocalConnection` (subprocess).
    Connections are async context managers; :meth:`open` is idempotent.

    Attributes:
        host: the inventory host name, for messages.
        home: the remote user's home directory (absolute), known after :meth:`open`.
    """

    host: str
    home: str = ""

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

        Returns:
            The :class:`CommandResult`; a non-zero exit is data, not an exception.

        Raises:
            CommandTimeout: the deadline passed (the remote process was signalled).
            HostUnreachable: the connection was lost.
        """

    @abc.abstractmethod
    async def put(self, local_path: str, remote_path: str, *, mode: int | None = None) -> None:
        """Upload one file (SFTP for SSH); parent folders are created.

        Raises:
            TransferError: naming the host, the path and the cause.
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

    def extra_facts(self) -> dict:
        """What the connection itself knows about the host, merged into its facts (Slurm's view of
        a node: state, features, GRES). Default: nothing."""
        return {}
