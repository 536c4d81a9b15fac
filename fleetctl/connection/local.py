"""The local connection: runs commands on the controller itself through subprocess.

Used for hosts with ``ansible_connection: local`` (the embedded default group ``local``). It obeys
the same contract as the SSH connection: argv only (no shell), the environment added to the
controller's, output streamed line by line as raw bytes.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import CommandTimeout, TransferError
from .storagefaults import name_write_error
from .base import CAPTURE_BYTES, CommandResult, Connection, LineCallback, OutputLine, folder_mode
from .download import COPY_CHUNK_BYTES, local_download
from .command import check_argv, command_argv, env_argv, validate_env
from .groupwatch import GroupWatch
from .streams import OutputTail, pump_lines
from ..util.within import within


class LocalConnection(Connection):
    """Runs on this machine. ``home`` is the controller user's home directory."""

    holds_stdin = True

    def __init__(self, host: str = "localhost") -> None:
        self.host = host
        self.home = str(Path.home())

    async def open(self) -> None:
        """Nothing to connect; present for the interface."""

    async def close(self) -> None:
        """Nothing to close (a command here is never cut off by it); marks :attr:`closed_here`."""
        self.closed_here = True

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
        """Run ``argv`` in a new process group; see :meth:`Connection.run` (a ``None`` value in
        ``env`` removes that variable from the controller's environment for the command).

        On timeout the whole process group gets SIGTERM, then SIGKILL after 5 s. With
        ``hold_stdin``, a cancelled call first closes the command's stdin and gives it 8 s. When
        this controller process dies without a word (SIGKILL, the OOM killer) the group is stopped
        the same way by its watcher (:mod:`fleetctl.connection.groupwatch`), within seconds.
        """
        argv = [str(a) for a in argv]
        check_argv(argv)  # as over SSH and Slurm: one line, not subprocess's "embedded null byte"
        full_env = dict(os.environ)
        if env:
            validate_env(env)
            for name, value in env.items():
                if value is None:
                    full_env.pop(name, None)
                else:
                    full_env[name] = value
        if become:
            argv = ["sudo", "-n", "--", *env_argv(env or {}), *command_argv(argv)]
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            # What a shell reports: 127 for a missing program, 126 for one that cannot run.
            rc = 127 if isinstance(exc, FileNotFoundError) else 126
            where = f" (in {cwd})" if cwd and isinstance(exc, FileNotFoundError) and exc.filename == cwd else ""
            message = f"{argv[0]}: {exc.strerror or exc}{where}\n".encode()
            if on_line:
                on_line(OutputLine("stderr", message))
            return CommandResult(argv=argv, rc=rc, stderr=message, duration_s=time.monotonic() - started)
        try:
            watch = await GroupWatch.start(proc.pid)
        except asyncio.CancelledError:
            await _kill_group(proc)
            raise
        try:
            return await self._finish(proc, argv, started, timeout_s=timeout_s, on_line=on_line, stdin=stdin,
                                      capture_bytes=capture_bytes, hold_stdin=hold_stdin)
        finally:
            await watch.stop()

    async def _finish(self, proc: asyncio.subprocess.Process, argv: list[str], started: float, *,
                      timeout_s: float | None, on_line: LineCallback | None, stdin: bytes | None,
                      capture_bytes: int | None, hold_stdin: bool) -> CommandResult:
        """Stream a started command's output and wait for its end (see :meth:`run`)."""
        out, err = OutputTail(capture_bytes), OutputTail(capture_bytes)

        async def feed() -> None:
            if stdin is not None and proc.stdin is not None:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
                if not hold_stdin:
                    proc.stdin.close()

        async def everything() -> int:
            await asyncio.gather(
                feed(),
                pump_lines(proc.stdout, "stdout", out, on_line),
                pump_lines(proc.stderr, "stderr", err, on_line),
            )
            return await proc.wait()

        try:
            rc = await within(everything(), timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if hold_stdin and proc.stdin is not None and isinstance(exc, asyncio.CancelledError):
                proc.stdin.close()
                try:
                    await within(proc.wait(), 8)
                except asyncio.TimeoutError:
                    pass
            if proc.returncode is None:
                await _kill_group(proc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise CommandTimeout(self.host, argv, timeout_s or 0) from None
        sig = None
        if rc < 0:
            sig = signal.Signals(-rc).name.removeprefix("SIG")
            rc = None
        stdout, stdout_dropped = out.result()
        stderr, stderr_dropped = err.result()
        return CommandResult(argv=argv, rc=rc, stdout=stdout, stderr=stderr, signal=sig,
                             duration_s=time.monotonic() - started, stdout_dropped=stdout_dropped,
                             stderr_dropped=stderr_dropped)

    async def put(self, local_path: str, remote_path: str, *, mode: int | None = None, dir_mode: int | None = None,
                  explicit_dest: bool = False) -> None:
        """Copy a file atomically (temp file + rename); missing parents are created with
        ``dir_mode`` (default 0700; with ``explicit_dest``, 0777 less this process's umask, as
        ``mkdir -p``: :meth:`Connection.put`). A folder at ``remote_path`` fails (``Is a directory``)."""
        dest = Path(remote_path)
        try:
            missing = [p for p in [dest.parent, *dest.parent.parents] if not p.exists()]
            made = folder_mode(dir_mode, explicit_dest)
            for folder in reversed(missing):
                folder.mkdir(mode=0o777, exist_ok=True)  # less the umask, as mkdir -p
                if made is not None:
                    os.chmod(folder, made)
            if dest.is_dir() and not dest.is_symlink():
                raise IsADirectoryError(errno.EISDIR, "Is a directory (a folder is there)", remote_path)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
            os.close(fd)
            try:
                shutil.copyfile(local_path, tmp)
                os.chmod(tmp, mode if mode is not None else 0o644)
                os.replace(tmp, dest)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            named = name_write_error(f"[Errno {exc.errno}] {exc.strerror}", remote_path, explicit_dest=explicit_dest)
            raise TransferError(f"{self.host}: put {local_path} -> {remote_path}: {named or exc}") from None

    async def get(self, remote_path: str, local_path: str) -> None:
        """Copy a regular file back, keeping its permission bits less the umask; symlinks are refused."""
        src = Path(remote_path)
        if src.is_symlink() or not src.is_file():
            raise TransferError(f"{self.host}: get {remote_path}: not a regular file (symlinks are never followed)")
        try:
            reader = open(src, "rb")  # noqa: SIM115 - closed below; its errors are the host's side
            mode = os.fstat(reader.fileno()).st_mode & 0o777
        except OSError as exc:
            raise TransferError(f"{self.host}: get {remote_path}: {exc}") from None
        # reader.read's OSError is the host's side (named by its path), part.write's the controller's
        with reader, local_download(self.host, remote_path, local_path) as part:
            while chunk := reader.read(COPY_CHUNK_BYTES):
                part.write(chunk)
            part.keep_mode(mode)


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there after 5 s."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            await within(proc.wait(), wait_s)
            return
        except asyncio.TimeoutError:
            continue


# -- the connection kind ------------------------------------------------------------------------

from .registry import ConnectionKind, ConnectionSettings, ConnectOptions, HostRef, KindScope  # noqa: E402


class LocalSettings(ConnectionSettings):
    """A local host reads no connection vars (Ansible's ``ansible_connection: local``)."""


class _LocalScope(KindScope):
    def connection(self, host: HostRef) -> LocalConnection:
        return LocalConnection(host.name)


class _LocalKind(ConnectionKind):
    """The controller itself, through subprocess."""

    name = "local"
    settings_model = LocalSettings

    def scope(self, options: ConnectOptions) -> KindScope:
        return _LocalScope()

    def machine(self, host: HostRef) -> str:
        """``local:<this controller's host name>``: every local host is this machine."""
        import socket

        return f"local:{socket.gethostname()}"


SETTINGS = LocalSettings
KIND = _LocalKind()
