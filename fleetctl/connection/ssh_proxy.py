"""A ``ProxyCommand`` run the way ssh(1) runs it, so that its failure names itself.

OpenSSH (sshconnect.c ``ssh_proxy_connect``) runs ``$SHELL -c "exec COMMAND"`` with the
connection on the command's stdin and stdout and its stderr on ssh's own. Here the command runs
under ``/bin/sh`` on one end of a socketpair whose other end is handed to asyncssh as the
connection's socket (asyncssh's ``sock``), its stderr drained as it comes (the last
:data:`KEPT_LINES` lines kept, never blocking a talkative proxy such as ``ssh -v -W``), and the
process reaped here (no asyncio child watcher: asyncssh's own ProxyCommand support runs the
command through one, whose ``Unknown child process pid N`` warnings reached stderr).

How a ProxyCommand fails is named after the command, never blamed on the destination's sshd:

- it exits before the SSH banner: its exit status and its last stderr lines (:meth:`ProxyProcess.failure`;
  exit 0 having passed on nothing: :func:`ended_silent_message`), as ssh(1) says
  ``kex_exchange_identification: Connection closed by remote host``;
- it runs on but passes on nothing until the connect timeout (a bastion that never answers):
  :meth:`ProxyProcess.silent_message`, the command killed.

The command runs in a session of its own (``setsid``), so :meth:`ProxyProcess.close` kills its
whole process group: a ``sh -c 'a | b'`` or a wrapper script leaves no orphan holding the socket.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import socket
import subprocess
import time

from ..util.within import within

#: stderr lines of the command kept for the message.
KEPT_LINES = 3

_reapers: set = set()  # tasks that wait for a proxy to end after its connection closed


class ProxyProcess:
    """One running ``ProxyCommand``: ``sock`` is the connection's end of its socketpair."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.sock, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], stdin=theirs, stdout=theirs,
                                         stderr=subprocess.PIPE, start_new_session=True)
        finally:
            theirs.close()
        self.lines: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        self._partial = b""
        self._eof = asyncio.get_running_loop().create_future()
        os.set_blocking(self.proc.stderr.fileno(), False)
        asyncio.get_running_loop().add_reader(self.proc.stderr.fileno(), self._drain)

    def _drain(self) -> None:
        try:
            data = os.read(self.proc.stderr.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.proc.stderr.fileno())
            if self._partial.strip():
                self.lines.append(self._partial.decode("utf-8", "replace").strip())
            self._partial = b""
            if not self._eof.done():
                self._eof.set_result(None)
            return
        *whole, self._partial = (self._partial + data).split(b"\n")
        self.lines.extend(w.decode("utf-8", "replace").strip() for w in whole if w.strip())

    async def failure(self, timeout_s: float) -> str | None:
        """After the connection closed before login: the one line naming the command's failure
        (it exited non-zero), or ``None`` (it exited 0 or still runs after ``timeout_s`` seconds:
        the far side closed, which the caller names)."""
        rc = await self.exit_status(timeout_s)
        if rc is None or rc == 0:
            return None
        said = list(self.lines)
        if rc == 127 and said and said[-1].endswith("not found"):  # sh(1): the command is not installed
            prog = said[-1].rsplit(":", 2)[-2].strip()
            return f"ProxyCommand: {prog}: not found (`{self.command}` exited 127)"
        return f"ProxyCommand `{self.command}` exited {rc} before the SSH banner: {self.stderr_words()}"

    async def exit_status(self, timeout_s: float) -> int | None:
        """The command's exit status once it has ended (its stderr closed), or ``None`` while it
        still runs after ``timeout_s`` seconds."""
        try:
            await within(asyncio.shield(self._eof), timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            return self.proc.poll()
        deadline = time.monotonic() + max(0.0, timeout_s)
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.proc.returncode

    def stderr_words(self) -> str:
        """The command's last stderr lines (at most :data:`KEPT_LINES`, ``|`` between them)."""
        return " | ".join(self.lines) if self.lines else "it wrote nothing on stderr"

    def stderr_note(self) -> str:
        """``its stderr: LINES`` (:meth:`stderr_words`), or that it wrote nothing there."""
        return f"its stderr: {self.stderr_words()}" if self.lines else self.stderr_words()

    def silent_message(self, timeout_s: float) -> str:
        """The one line for a command still running, and silent, when the connect timeout
        (``timeout_s`` seconds, for the whole login) ended: what ssh(1) reports as ``Connection
        timed out during banner exchange`` (its ``ConnectTimeout`` bounds the banner exchange
        too, ssh_config(5))."""
        return (f"ProxyCommand `{self.command}` was still silent after the connect timeout ({timeout_s:g} s): "
                f"no SSH banner came through it (a bastion or relay that never answers), so it was killed; "
                f"{self.stderr_note()}")

    def close(self) -> None:
        """End the command now (the connection failed) and reap it: SIGKILL to its process group
        (its own session: the command and anything it started), then wait for it."""
        self.sock.close()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self._release()

    def reap_after(self, closed) -> None:
        """Reap the command once ``closed`` (the connection's ``wait_closed()``) is done: it sees
        EOF on its stdin and exits, as ssh's proxies (nc, ``ssh -W``) do; killed if it does not."""
        async def reap() -> None:
            try:
                await closed
            except BaseException:  # the run is ending (cancelled): no grace
                self.close()
                raise
            for _ in range(100):  # 5 s of grace to exit on its own
                if self.proc.poll() is not None:
                    break
                await asyncio.sleep(0.05)
            self.close()

        task = asyncio.ensure_future(reap())
        _reapers.add(task)
        task.add_done_callback(_reapers.discard)

    def _release(self) -> None:
        if not self._eof.done():
            try:
                asyncio.get_running_loop().remove_reader(self.proc.stderr.fileno())
            except (RuntimeError, ValueError):
                pass
            self._eof.set_result(None)
        self.proc.stderr.close()


def ended_silent_message(command: str, note: str) -> str:
    """The one line for a command that exited 0 before the SSH banner having passed on nothing
    (run again to check: it ended without a byte). ssh(1) says ``kex_exchange_identification:
    Connection closed by remote host`` (OpenSSH sshconnect.c); ``note``: its
    :meth:`ProxyProcess.stderr_note`."""
    return (f"ProxyCommand `{command}` exited 0 before the SSH banner, having passed on nothing (ssh(1): "
            f"'kex_exchange_identification: Connection closed by remote host'): it connects to nothing, or the "
            f"server behind it closed at once; {note}")
