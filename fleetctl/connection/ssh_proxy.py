"""A ``ProxyCommand`` run the way ssh(1) runs it, so that its failure names itself.

OpenSSH (sshconnect.c ``ssh_proxy_connect``) runs ``$SHELL -c "exec COMMAND"`` with the
connection on the command's stdin and stdout and its stderr on ssh's own. Here the command runs
under ``/bin/sh`` on one end of a socketpair whose other end is handed to asyncssh as the
connection's socket (asyncssh's ``sock``), its stderr drained as it comes (the last
:data:`KEPT_LINES` lines kept, never blocking a talkative proxy such as ``ssh -v -W``), and the
process reaped here (no asyncio child watcher: asyncssh's own ProxyCommand support runs the
command through one, whose ``Unknown child process pid N`` warnings reached stderr). A command
that exits before the SSH banner is named with its exit status and its last stderr lines.
"""

from __future__ import annotations

import asyncio
import collections
import os
import socket
import subprocess
import time

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
        try:
            await asyncio.wait_for(asyncio.shield(self._eof), timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            return None
        deadline = time.monotonic() + max(0.0, timeout_s)
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # stderr closed: the exit follows at once
        rc = self.proc.returncode
        if rc is None or rc == 0:
            return None
        said = list(self.lines)
        if rc == 127 and said and said[-1].endswith("not found"):  # sh(1): the command is not installed
            prog = said[-1].rsplit(":", 2)[-2].strip()
            return f"ProxyCommand: {prog}: not found (`{self.command}` exited 127)"
        words = " | ".join(said) if said else "it wrote nothing on stderr"
        return f"ProxyCommand `{self.command}` exited {rc} before the SSH banner: {words}"

    def close(self) -> None:
        """End the command now (the connection failed) and reap it."""
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
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
