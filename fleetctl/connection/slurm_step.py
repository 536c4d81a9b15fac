"""Job steps: running one argv on one node of an allocation with ``srun``, and reading what came back.

``srun --jobid=J --nodelist=NODE --nodes=1 --ntasks=1 --overlap --quiet --chdir=DIR --export=NONE --
/bin/sh -c LOGIN_ENV fleetctl-step ARGV...``: slurmstepd starts a fixed ``/bin/sh`` script
(:data:`LOGIN_ENV`) that ``exec``\\ s the argv as given (no shell parses it: hostile arguments
arrive exactly). ``--overlap`` lets the steps of one allocation share its nodes, so a host's
commands never wait for each other's resources ("Requested nodes are busy").

The environment is the node's, never the controller's. srun's default ``--export=ALL`` copies the
controller's whole environment into the task (srun(1), ``--export``), so a node would find the
controller's ``PATH`` and with it the controller's ``nvidia-smi``, ``python3`` and ``nvcc``.
``--export=NONE`` sends none of it (only Slurm's own ``SLURM_*``); the task then has what the
node gives a job step (the site's ``TaskProlog`` exports, PAM when slurm.conf says
``UsePAM``), and :data:`LOGIN_ENV` adds what sshd gives an SSH session and the step still lacks:
``HOME``, ``USER``, ``LOGNAME``, ``SHELL`` from the node's passwd entry and the default ``PATH``
(sshd(8) "ENVIRONMENT"; OpenSSH's ``--with-default-path`` / ``--with-superuser-path`` as Debian
builds it), so a command finds the node's own tools exactly as over SSH. What fleetctl sets
itself (``CUDA_HOME``, ``CUDACXX``, the ``PATH`` built from facts, the venv) travels in the argv
(:func:`~fleetctl.connection.command.wrap_argv`), as over SSH.

srun relays the task's stdout and stderr to its own as they come; they are split into lines as
they arrive (:func:`~fleetctl.connection.streams.pump_lines`).

srun speaks for itself on stderr too. Its line naming the task's end
(``srun: error: n1: task 0: Exited with exit code 3``, or a signal's description such as
``Killed``) is taken out of the output and turned into ``rc``/``signal`` (its order against the
task's own stderr is not fixed, so it is matched by content, for this node and task 0 only); an
``execve()`` failure (exit 2 from slurmstepd) becomes 127/126 as a shell reports it. A non-zero srun
exit with no such line means the step never ran (no allocation, node lost, srun missing): that is
:class:`~fleetctl.errors.HostUnreachable`, not the command's result.

Stopping: SIGTERM to srun cancels its step (Slurm kills the tasks); with a remote-shell launcher
(``ssh``), where killing the local process does not reach srun, the step is also cancelled by name
with ``scancel``.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from ..errors import CommandTimeout, HostUnreachable
from .base import CommandResult, LineCallback, OutputLine
from .slurm_client import SlurmClient, SlurmError, last_line, stop_process
from .slurm_end import SlurmJobEnded, StepEnd, job_expired, read_step_end
from .streams import CHUNK_BYTES, pump_lines
from ..util.within import within

#: srun's line naming a node where a step's launch failed (srun/launch.c); the step then ends on
#: every node (srun starts a step on all of its nodes or on none).
LAUNCH_FAILED = re.compile(r"Task launch for \S+ failed on node (\S+): ([^\n]*)")

_NOTICE = re.compile(rb"^srun: error: (?P<node>\S+): task (?P<task>\d+): (?P<status>[^\r\n]*)\r?\n?$")
_EXITED = re.compile(r"^Exited with exit code (\d+)$")
_EXECVE = re.compile(rb"^slurmstepd(?:-\S+)?: error: execve\(\): .*: (?P<err>No such file or directory|"
                     rb"Permission denied)")
#: strsignal(3) text -> signal name, as slurmstepd reports a task's death (glibc on both ends).
_SIGNAL_TEXT = {signal.strsignal(s): s.name.removeprefix("SIG") for s in signal.Signals if signal.strsignal(s)}


#: The PATH an SSH session of an ordinary user / of root starts with when nothing else sets one:
#: OpenSSH's compile-time defaults as Debian builds them (``--with-default-path``,
#: ``--with-superuser-path``; sshd(8) "ENVIRONMENT").
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/games"
SUPERUSER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: Fixed ``/bin/sh`` script every step runs first (the argv arrives as its positional parameters,
#: never parsed): fills in the login variables sshd would set (see the module docstring) where the
#: node's own step environment (TaskProlog, PAM) did not, then ``exec``\\ s the argv. Variables
#: the node already set win: a site's TaskProlog is the site's word.
LOGIN_ENV = (
    # PATH: sh gives itself a default PATH when none came (dash's, bash's with "."), unexported;
    # whether one came is read from the shell's own initial environment (Linux /proc, proc(5))
    'if [ -r /proc/$$/environ ] && ! tr ' + r'"\0" "\n"' + ' </proc/$$/environ | grep -q "^PATH="; then '
    'PATH=' + DEFAULT_PATH + '; [ "$(id -u)" != 0 ] || PATH=' + SUPERUSER_PATH + '; fi; export PATH; '
    'pw=$(getent passwd "$(id -u)" 2>/dev/null | head -n 1); '
    'if [ -n "$pw" ]; then '
    'name=${pw%%:*}; rest=${pw#*:*:*:*:*:}; '
    ': "${HOME:=${rest%%:*}}" "${USER:=$name}" "${LOGNAME:=$name}" "${SHELL:=${rest#*:}}"; '
    'export HOME USER LOGNAME SHELL; fi; '
    'unset pw name rest; exec "$@"'
)


def step_name() -> str:
    """A step name unique enough to cancel one step by (``squeue -s`` lists it)."""
    return f"fleetctl-{secrets.token_hex(4)}"


def step_argv(job_id: str, nodes: str, argv: Sequence[str], *, chdir: str = "/", name: str = "fleetctl",
              tasks: int = 1, node_count: int = 1, unbuffered: bool = False) -> list[str]:
    """The srun argv that runs ``argv`` as a step of job ``job_id`` (pure), in the node's own
    environment (``--export=NONE`` and :data:`LOGIN_ENV`; see the module docstring).

    Args:
        nodes: one node name, or a Slurm hostlist for a step on several nodes.
        chdir: the task's working directory (srun's ``--chdir``; srun's default would be the
            controller's own directory, which need not exist on the node).
        tasks, node_count: ``1, 1`` for a command on one host; ``N, N`` for one task per node.
        unbuffered: srun's ``--unbuffered`` (no line buffering: binary downloads, ~20% faster).
    """
    out = ["srun", f"--jobid={job_id}", f"--nodelist={nodes}", f"--nodes={node_count}", f"--ntasks={tasks}",
           "--overlap", "--quiet", f"--job-name={name}", f"--chdir={chdir}", "--export=NONE"]
    if tasks > 1:
        out.append("--ntasks-per-node=1")
    if unbuffered:
        out.append("--unbuffered")
    return [*out, "--", "/bin/sh", "-c", LOGIN_ENV, "fleetctl-step", *argv]


@dataclass
class StepOutcome:
    """What srun told about a finished single-task step (see the module docstring)."""

    rc: int | None
    signal: str | None
    notices: list[bytes] = field(default_factory=list)
    execve_error: str | None = None

    @classmethod
    def interpret(cls, srun_rc: int | None, notices: list[bytes], execve_error: str | None) -> "StepOutcome | None":
        """``None`` when the step never ran (a non-zero srun exit with no task notice)."""
        for line in reversed(notices):
            status = _NOTICE.match(line).group("status").decode("utf-8", "replace")  # type: ignore[union-attr]
            exited = _EXITED.match(status)
            if exited:
                rc = int(exited.group(1))
                if execve_error and rc == 2:
                    rc = 127 if "No such file" in execve_error else 126
                return cls(rc, None, notices, execve_error)
            if status in _SIGNAL_TEXT:
                return cls(None, _SIGNAL_TEXT[status], notices, execve_error)
            if status == "Out Of Memory":  # the cgroup's OOM killer: SIGKILL (see slurm_end)
                return cls(None, "KILL", notices, execve_error)
        if srun_rc == 0:
            return cls(0, None, notices, execve_error)
        if notices:  # a notice we do not know: srun's own exit status stands
            return cls(srun_rc, None, notices, execve_error)
        return None


class _StderrFilter:
    """Passes the task's stderr lines on; holds srun's end-of-task notice for this node."""

    def __init__(self, node: str, on_line: LineCallback | None) -> None:
        self.node = node.encode()
        self.on_line = on_line
        self.kept = bytearray()
        self.notices: list[bytes] = []
        self.execve_error: str | None = None

    def __call__(self, line: OutputLine) -> None:
        m = _NOTICE.match(line.data)
        if m and m.group("node") == self.node and m.group("task") == b"0":
            self.notices.append(line.data)
            return
        e = _EXECVE.match(line.data)
        if e:
            self.execve_error = e.group("err").decode()
        self.kept += line.data
        if self.on_line is not None:
            self.on_line(line)


async def _drain_to_file(reader: asyncio.StreamReader, sink: IO[bytes]) -> None:
    while True:
        chunk = await reader.read(CHUNK_BYTES)
        if not chunk:
            return
        sink.write(chunk)


async def run_step(client: SlurmClient, host: str, job_id: str, node: str, argv: Sequence[str], *,
                   chdir: str = "/", timeout_s: float | None = None, on_line: LineCallback | None = None,
                   stdin: bytes | None = None, stdout_file: IO[bytes] | None = None,
                   display_argv: Sequence[str] | None = None, unbuffered: bool = False) -> CommandResult:
    """Run ``argv`` as a one-task step on ``node`` and wait for it.

    Args:
        client: how to reach srun.
        host: the inventory host name, for messages.
        job_id, node: the allocation and the node.
        argv: exactly what the node executes (already wrapped for env/cwd by the caller).
        chdir: the task's working directory.
        timeout_s: deadline in seconds; the step is cancelled when it passes.
        on_line: called with every stdout and stderr line as it arrives (not with stdout when
            ``stdout_file`` takes it).
        stdin: bytes for the task's stdin, then EOF (``None``: /dev/null).
        stdout_file: a binary file that receives stdout as it comes (downloads), instead of memory.
        display_argv: the argv reported in the result and errors (default ``argv``).
        unbuffered: srun ``--unbuffered`` (see :func:`step_argv`).

    Returns:
        The :class:`CommandResult` (a non-zero exit is data).

    Raises:
        CommandTimeout: ``timeout_s`` passed (the step was cancelled).
        HostUnreachable: the step could not run (srun could not start, the node is unknown),
            naming srun's message.
        SlurmJobEnded: Slurm ended the job under the step, or before it (time limit, preemption,
            node failure, cancel: :mod:`~fleetctl.connection.slurm_end`).
    """
    shown = list(display_argv if display_argv is not None else argv)
    name = step_name()
    started = time.monotonic()
    try:
        proc = await client.spawn(step_argv(job_id, node, argv, chdir=chdir, name=name, unbuffered=unbuffered),
                                  stdin=stdin is not None)
    except SlurmError as exc:
        raise HostUnreachable(host, str(exc)) from None
    out = bytearray()
    raw_err = bytearray()
    err_filter = _StderrFilter(node, on_line)

    async def feed() -> None:
        if stdin is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
                proc.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass

    async def everything() -> int:
        reading = (_drain_to_file(proc.stdout, stdout_file) if stdout_file is not None  # type: ignore[arg-type]
                   else pump_lines(proc.stdout, "stdout", out, on_line))  # type: ignore[arg-type]
        await asyncio.gather(feed(), reading, pump_lines(proc.stderr, "stderr", raw_err, err_filter))  # type: ignore[arg-type]
        return await proc.wait()

    try:
        srun_rc = await within(everything(), timeout_s)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        await asyncio.shield(cancel_step(client, proc, job_id, name))
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise CommandTimeout(host, shown, timeout_s or 0) from None
    outcome = StepOutcome.interpret(srun_rc, err_filter.notices, err_filter.execve_error)
    end = read_step_end(bytes(err_filter.kept))  # Slurm ended the job under the step (slurm_end)
    if end is not None and end.whole_job:
        raise SlurmJobEnded(host, end.line, end)
    if outcome is None:
        cause = last_line(bytes(err_filter.kept).decode("utf-8", "replace")) or f"srun exited {srun_rc}"
        if job_expired(cause):
            raise SlurmJobEnded(host, cause, StepEnd("ended", cause))
        raise HostUnreachable(host, f"job step on Slurm node {node} did not run: {cause}")
    return CommandResult(argv=shown, rc=outcome.rc, stdout=bytes(out), stderr=bytes(err_filter.kept),
                         signal=outcome.signal, duration_s=time.monotonic() - started,
                         extra={"slurm_job": job_id, "slurm_node": node})


async def cancel_step(client: SlurmClient, proc: asyncio.subprocess.Process, job_id: str, name: str) -> None:
    """Stop a running step: SIGTERM to srun (which cancels the step) and, when srun is behind a
    remote shell or does not go, ``scancel`` of the step found by its name."""
    if client.remote_shell:
        await _scancel_by_name(client, job_id, name)
    await stop_process(proc, grace_s=5.0)


async def _scancel_by_name(client: SlurmClient, job_id: str, name: str) -> None:
    try:
        res = await client.call(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j"], timeout_s=30, check=False)
        for line in res.stdout_text.splitlines():
            step, _, step_job_name = line.partition("|")
            if step_job_name.strip() == name:
                await client.call(["scancel", step.strip()], timeout_s=30, check=False)
    except SlurmError:
        pass
