"""Ending a local command's process group when the controller dies.

A ``local`` command runs in its own session and process group (``start_new_session``), so that a
timeout or Ctrl-C stops it and everything it started (nvcc's children, pip's build subprocesses)
with one ``killpg``. That needs a live controller: a controller killed with SIGKILL (or by the OOM
killer) runs no cleanup, its children are reparented (to init or a subreaper, POSIX ``_exit``)
and keep running, still holding the CPU, the GPU and the files of a build.

So each command gets a watcher: a tiny ``/bin/sh`` (:data:`WATCH_SCRIPT`, in a session of its
own so a terminal's SIGINT or SIGHUP does not end it first) whose stdin is a pipe that only the
controller holds. The controller never writes to it. When the controller process is gone, for
whatever reason, the kernel closes its end of the pipe, the watcher's ``read`` sees EOF, and it
stops the command's process group as the SSH supervisor does
(:data:`fleetctl.connection.command.SUPERVISOR`: SIGTERM, then SIGKILL 5 s later). A command
that ends while the controller lives has its watcher killed first (:meth:`GroupWatch.stop`), so a
process group id the kernel may hand out again is never signalled.

The watcher is a separate process, not the command's parent: the command's exit status, its
signal and its stdout/stderr reach the controller exactly as without it (a parent like the SSH
supervisor once did turns a signal into status 128+N, and an ``exec`` wrapper would change what a
missing program prints). Its argv names the group it watches (``ps``: ``fleetctl-watch PGID``).
It starts right after the command (the group's id is the command's pid): a controller killed in
those few milliseconds leaves that one command unwatched.
"""

from __future__ import annotations

import asyncio
import contextlib

#: Seconds between SIGTERM and SIGKILL, as :data:`fleetctl.connection.command.SUPERVISOR` waits.
KILL_AFTER_S = 5

#: Reads stdin until EOF (dash, bash and busybox sh read it themselves: no child process waits),
#: then SIGTERM to the process group ``$1``, SIGKILL after :data:`KILL_AFTER_S` if it is still there.
WATCH_SCRIPT = ('while read -r _; do :; done; '
                'kill -TERM -"$1" 2>/dev/null || exit 0; '
                f'sleep {KILL_AFTER_S}; '
                'kill -KILL -"$1" 2>/dev/null; exit 0')


class GroupWatch:
    """The watcher of one local command's process group (see the module docstring)."""

    def __init__(self, proc: asyncio.subprocess.Process | None) -> None:
        self._proc = proc

    @classmethod
    async def start(cls, pgid: int) -> "GroupWatch":
        """Watch process group ``pgid`` (the command's pid: it leads its own session). A watcher
        that cannot start (no ``/bin/sh``, out of processes) leaves the command unwatched."""
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", WATCH_SCRIPT, "fleetctl-watch", str(pgid), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        except OSError:
            proc = None
        return cls(proc)

    async def stop(self) -> None:
        """The command ended (or was stopped) with the controller alive: end the watcher without
        it signalling anything (SIGKILL first, then its stdin closes). Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        if proc.stdin is not None:
            proc.stdin.close()
        await proc.wait()
