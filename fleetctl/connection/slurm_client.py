"""Reaching Slurm's client tools (srun, salloc, sbcast, sinfo, squeue, scancel) from the controller.

A :class:`SlurmClient` is the optional command prefix of the ``slurm_launcher`` host var plus the
environment the tools run with. Two kinds of prefix exist, and they pass an argv differently:

- exec-style prefixes (``nsenter --net=...``, ``sudo -u alice``, ``env SLURM_CONF=...``, ``docker exec
  ctl``) exec the rest of their arguments as given, so the tool's argv is appended as it is;
- ``ssh`` (ssh(1) joins its arguments with spaces into one command line that the remote login shell
  parses, OpenSSH session.c) gets the tool's argv as one command line quoted once for POSIX sh and
  wrapped so that any login shell (fish, tcsh too) hands it to ``/bin/sh`` untouched (see
  :mod:`fleetctl.connection.command`). Hostile arguments survive both.

The environment: the controller's own, as Slurm users expect (``SLURM_CONF``, ``SALLOC_PARTITION``,
``SALLOC_ACCOUNT``... are honoured; it configures the tools only: job steps get ``--export=NONE``
and the node's own environment, :mod:`~fleetctl.connection.slurm_step`), minus what would mislead the tools or the tasks: the job context of a controller
that itself runs inside a Slurm job (``SLURM_JOB_ID``, ``SLURM_NTASKS``... are srun *input*
variables too, so they would reshape our steps; only the client settings in
:data:`KEPT_SLURM_VARS` stay) and the controller's own Python virtual environment
(``VIRTUAL_ENV``, ``PYTHONPATH``, ``PYTHONHOME`` and the venv's ``bin`` on ``PATH``), which must not
decide which ``python3`` a node runs.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import shlex
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from ..errors import FleetError
from ..util.envvars import SLURM_LAUNCHER_ENV
from .base import CommandResult
from .command import sh_eval_word
from ..util.within import within

#: Environment variable naming a launcher when no host var can (the ``slurm:`` inventory source;
#: read and checked by :func:`fleetctl.util.envvars.slurm_launcher`).
LAUNCHER_ENV = SLURM_LAUNCHER_ENV

#: ``SLURM_*`` variables that configure the client tools themselves (slurm.conf(5), srun(1)
#: "INPUT ENVIRONMENT VARIABLES"); every other ``SLURM_*`` is job context and is dropped.
KEPT_SLURM_VARS = frozenset({"SLURM_CONF", "SLURM_CLUSTERS", "SLURM_TIME_FORMAT", "SLURM_CONF_SERVER"})

#: What a job that ``fleetctl schedule`` writes carries from the environment it was scheduled in
#: when its hosts are reached through Slurm (a timer or cron starts it with an environment of its
#: own, where these are not set): the launcher of the ``slurm:`` source, the client settings that
#: name the cluster (slurm.conf(5) ``SLURM_CONF``; ``SLURM_CLUSTERS``, ``SLURM_CONF_SERVER``) and
#: salloc's input variables that shape the allocation (salloc(1) "INPUT ENVIRONMENT VARIABLES"), so
#: the nightly run talks to the cluster, through the launcher, with the request of the run scheduled.
SCHEDULE_CARRIED_VARS = (LAUNCHER_ENV, "SLURM_CONF", "SLURM_CLUSTERS", "SLURM_CONF_SERVER", "SALLOC_ACCOUNT",
                         "SALLOC_PARTITION", "SALLOC_QOS", "SALLOC_RESERVATION", "SALLOC_TIMELIMIT",
                         "SALLOC_CLUSTERS")


def carried_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The :data:`SCHEDULE_CARRIED_VARS` set (non-empty) in ``environ`` (default ``os.environ``), in
    that order; ``SLURM_CONF`` made absolute (the job's folder is the same, but a path should not
    depend on it)."""
    env = os.environ if environ is None else environ
    out = {name: env[name] for name in SCHEDULE_CARRIED_VARS if env.get(name)}
    if "SLURM_CONF" in out:
        out["SLURM_CONF"] = os.path.abspath(os.path.expanduser(out["SLURM_CONF"]))
    return out


#: Launcher programs that join their arguments into one remote shell command line.
REMOTE_SHELL_LAUNCHERS = frozenset({"ssh"})


class SlurmError(FleetError):
    """A Slurm client tool failed; ``str`` names the tool and Slurm's own message."""


def parse_launcher(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A launcher var as an argv prefix: a string is split as POSIX sh words (``shlex.split``),
    a list is taken as it is, ``None``/empty means no prefix.

    Raises:
        ValueError: unbalanced quotes in the string.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(shlex.split(value))
    return tuple(str(v) for v in value)


def client_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment Slurm's client tools run with (see the module docstring)."""
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if name.startswith("SLURM_") and name not in KEPT_SLURM_VARS:
            del env[name]
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "__PYVENV_LAUNCHER__"):
        env.pop(name, None)
    if sys.prefix != sys.base_prefix and "PATH" in env:
        venv_bin = os.path.join(sys.prefix, "bin")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p and os.path.realpath(p) !=
                                      os.path.realpath(venv_bin))
    return env


def _one_shell_word(argv: Sequence[str]) -> str:
    """``argv`` as one command line any login shell passes to ``/bin/sh`` unchanged: quoted once
    with ``shlex.join``, base64-encoded, and decoded by ``/bin/sh`` on the far side
    (:func:`~fleetctl.connection.command.sh_eval_word`)."""
    return sh_eval_word(shlex.join(argv))


@dataclass(frozen=True)
class SlurmClient:
    """How to run Slurm's client tools: a command prefix and the environment.

    Attributes:
        launcher: the argv prefix (``()``: the tools are on this machine's PATH).
    """

    launcher: tuple[str, ...] = ()

    @property
    def remote_shell(self) -> bool:
        """True when the launcher joins arguments for a remote shell (``ssh``)."""
        return bool(self.launcher) and posixpath.basename(self.launcher[0]) in REMOTE_SHELL_LAUNCHERS

    def command(self, argv: Sequence[str]) -> list[str]:
        """The local argv that runs the Slurm tool ``argv`` through the launcher."""
        argv = [str(a) for a in argv]
        if not self.launcher:
            return argv
        if self.remote_shell:
            return [*self.launcher, _one_shell_word(argv)]
        return [*self.launcher, *argv]

    def describe(self) -> str:
        """The launcher for messages (``"ssh login01"``, or ``"this machine"``)."""
        return shlex.join(self.launcher) if self.launcher else "this machine"

    async def spawn(self, argv: Sequence[str], *, stdin: bool | IO[bytes] = False) -> asyncio.subprocess.Process:
        """Start a tool in its own session (a Ctrl-C at the terminal reaches fleetctl, which then
        stops it deliberately), stdout and stderr piped, stdin piped (``True``), read from an open
        file, or /dev/null.

        Raises:
            SlurmError: the launcher or the tool is not installed on this machine.
        """
        full = self.command(argv)
        try:
            return await asyncio.create_subprocess_exec(
                *full, stdin=(asyncio.subprocess.PIPE if stdin is True else
                              asyncio.subprocess.DEVNULL if stdin is False else stdin),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=client_env(),
                start_new_session=True)
        except OSError as exc:
            raise SlurmError(f"cannot start {full[0]}: {exc.strerror or exc} (launcher: {self.describe()}; "
                             f"install slurm-client or set slurm_launcher)") from None

    async def call(self, argv: Sequence[str], *, timeout_s: float | None = 60.0, stdin: bytes | None = None,
                   check: bool = True, stdin_file: IO[bytes] | None = None) -> CommandResult:
        """Run a tool to completion and return its output.

        Args:
            argv: the tool and its arguments (``["sinfo", "-h", ...]``).
            timeout_s: deadline in seconds (``None``: none); the tool is stopped when it passes.
            stdin: bytes for its stdin (``None``: /dev/null).
            stdin_file: an open binary file to read stdin from instead (a large file, streamed).
            check: raise :class:`SlurmError` on a non-zero exit.

        Raises:
            SlurmError: could not start; ran past ``timeout_s``; or (``check``) exited non-zero,
                naming the tool and its last stderr line.
        """
        started = time.monotonic()
        proc = await self.spawn(argv, stdin=stdin_file if stdin_file is not None else stdin is not None)
        try:
            out, err = await within(proc.communicate(stdin), timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            await stop_process(proc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise SlurmError(f"{argv[0]} did not answer within {timeout_s:g} s (launcher: {self.describe()})") \
                from None
        result = CommandResult(argv=list(argv), rc=proc.returncode, stdout=out, stderr=err,
                               duration_s=time.monotonic() - started)
        if check and result.rc != 0:
            raise SlurmError(f"{argv[0]} failed (exit {result.rc}): {last_line(result.stderr_text) or 'no output'}")
        return result


def last_line(text: str) -> str:
    """The last non-empty line of ``text``, stripped (Slurm prints its error last)."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return ""


async def stop_process(proc: asyncio.subprocess.Process, grace_s: float = 5.0) -> None:
    """SIGTERM the process's group (srun cancels its step on SIGTERM; salloc revokes a pending
    allocation), then SIGKILL the group if it is still there after ``grace_s`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            await within(asyncio.shield(proc.wait()), grace_s)
            return
        except asyncio.TimeoutError:
            continue
