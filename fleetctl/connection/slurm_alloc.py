"""Slurm allocations: asking for nodes (``salloc --no-shell``) within a deadline, and giving them back.

An allocation is one Slurm job that holds nodes and runs no command of its own
(``salloc --no-shell``: "the job will remain active and own the allocated resources as long as it
is active", salloc(1)); the run's commands are its job steps. Nothing about such a job ties it to
fleetctl's process, so fleetctl ties it explicitly:

- the request carries ``--immediate=S``: Slurm itself drops the request when the nodes are not
  granted within S seconds, and fleetctl's own timer stops ``salloc`` (which revokes a pending
  job on SIGTERM) and cancels by job name shortly after, so no request ever waits forever;
- :meth:`Allocation.release` cancels the job (``scancel``) and waits until ``squeue`` no longer
  lists it as pending or running;
- a *lifeline* (a tiny ``/bin/sh`` process in its own session, reading a pipe from fleetctl) runs
  ``scancel`` when that pipe closes without a "released" line: when fleetctl dies by SIGKILL, an
  OOM kill or a closed terminal, the job is cancelled all the same.
"""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .slurm_client import SlurmClient, SlurmError, client_env, last_line, stop_process
from .slurm_nodes import hostlist, query_holdups
from ..util.within import within

_GRANTED = re.compile(r"Granted job allocation (\d+)")
_PENDING = re.compile(r"(?:Pending job allocation|job) (\d+)")

#: Reads one line; anything but "released" (EOF included) runs the scancel command it was given.
_LIFELINE = 'read -r line; [ "$line" = released ] || exec "$@" >/dev/null 2>&1'


class AllocationError(SlurmError):
    """An allocation was refused or not granted within its deadline; ``str`` says which and why;
    ``cause`` is salloc's own last line when it refused; ``waited_s`` the deadline in seconds (the
    run's) when it was not granted in time (``None`` when refused): then the nodes' own state
    may say why (:func:`~fleetctl.connection.slurm_nodes.query_holdups`)."""

    def __init__(self, message: str, cause: str = "", *, waited_s: float | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.waited_s = waited_s


#: slurmctld's words for a request option it refuses (Slurm 22.05 ``slurm_errno.c``) -> the host var
#: that set it and the request's attribute: such a refusal is the inventory's value, not the host.
_REFUSALS = (
    (re.compile(r"Invalid partition name specified|invalid partition", re.I), "slurm_partition", "partition"),
    (re.compile(r"Invalid account|account/partition combination", re.I), "slurm_account", "account"),
    (re.compile(r"Invalid qos", re.I), "slurm_qos", "qos"),
    (re.compile(r"Invalid --time specification|Requested time limit is invalid", re.I), "slurm_time", "time"),
    (re.compile(r"reservation is invalid|Invalid reservation|Access denied to requested reservation", re.I),
     "slurm_reservation", "reservation"),
)


def refused_setting(cause: str, request: "AllocationRequest", partitions: Sequence[str] = ()) -> str | None:
    """The one line for an allocation slurmctld refused for a host var's value (``Invalid
    partition name specified``, ``Invalid qos specification``...), or ``None`` when ``cause``
    names no such option (pure).

    Args:
        cause: salloc's last error line.
        request: what was asked (the var's value is named).
        partitions: the partitions sinfo lists the node in (named for a refused partition).
    """
    for words, var, attr in _REFUSALS:
        if words.search(cause):
            value = getattr(request, attr)
            said = cause.removeprefix("salloc: error: ")
            where = (f"; the node is in partition {', '.join(partitions)}" if var == "slurm_partition" and partitions
                     else "")
            return f"Slurm refused the host var {var}={value!r} (Slurm said: {said}){where}"
    return None


@dataclass(frozen=True)
class AllocationRequest:
    """What ``salloc`` asks for besides the nodes: the host vars, the node's GRES, exclusivity.

    Attributes:
        partition, account, qos, time, reservation: ``-p``, ``-A``, ``-q``, ``-t`` (Slurm's time
            formats: ``"30"`` minutes, ``"2:00:00"``, ``"1-0"``), ``--reservation``; ``None``:
            Slurm's default (and ``SALLOC_*`` from the environment).
        exclusive: whole nodes (``--exclusive``), so builds see all of a node's CPUs and memory.
        gres: the GRES every node of the request gets (``("gpu:h200:8",)``), so the steps see the
            node's GPUs (a job step gets the job's GRES; an exclusive job's implicit ones it does not).

    Every request carries ``--no-kill``: a node that fails ends only its own hosts' work, not the
    job of the healthy nodes sharing it (salloc(1) ``-k, --no-kill``; see
    :mod:`~fleetctl.connection.slurm_end`).
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    reservation: str | None = None
    exclusive: bool = True
    gres: tuple[str, ...] = ()

    def salloc_argv(self, nodes: Sequence[str], *, job_name: str, deadline_s: float) -> list[str]:
        """The ``salloc`` argv for ``nodes`` (pure)."""
        argv = ["salloc", "--no-shell", f"--job-name={job_name}", f"--nodelist={hostlist(nodes)}",
                f"--nodes={len(nodes)}", f"--immediate={max(1, math.ceil(deadline_s))}", "--no-kill"]
        for flag, value in (("--partition", self.partition), ("--account", self.account), ("--qos", self.qos),
                            ("--time", self.time), ("--reservation", self.reservation)):
            if value:
                argv.append(f"{flag}={value}")
        if self.exclusive:
            argv.append("--exclusive")
        if self.gres:
            argv.append(f"--gres={','.join(self.gres)}")
        return argv


class Lifeline:
    """Cancels one job if fleetctl goes away without saying "released" (see the module docstring)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, client: SlurmClient, job_id: str) -> "Lifeline":
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", _LIFELINE, "fleetctl-lifeline", *client.command(["scancel", job_id]),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            env=client_env(), start_new_session=True)
        return cls(proc)

    async def disarm(self) -> None:
        """The job was released: let the lifeline exit without cancelling anything."""
        if self.proc.returncode is not None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(b"released\n")
            await self.proc.stdin.drain()
            self.proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            await within(self.proc.wait(), 5)
        except asyncio.TimeoutError:
            pass


@dataclass
class Allocation:
    """A granted allocation: its job id, its nodes and what it was asked with."""

    job_id: str
    nodes: tuple[str, ...]
    request: AllocationRequest
    client: SlurmClient
    job_name: str
    lifeline: Lifeline | None = None
    released: bool = False
    cancelled: bool = False
    #: how Slurm ended the job under a step, once seen: ``(StepEnd, TimeLimit or None)``
    #: (:mod:`~fleetctl.connection.slurm_end`); every later command of its hosts fails with it at once
    ended: Any = None
    #: nodes Slurm took out of the job (their node failed; the job goes on, ``--no-kill``) -> the
    #: same ``(StepEnd, TimeLimit or None)``: every later command of their hosts fails with it at once
    lost: dict[str, Any] = field(default_factory=dict)

    async def release(self, *, timeout_s: float = 30.0) -> None:
        """Cancel the job and wait (at most ``timeout_s`` seconds) until ``squeue`` lists it
        neither pending nor running; ``scancel`` is repeated while it fails (slurmctld busy).
        Safe to call twice; never raises. The lifeline stays armed unless the job is known to be
        cancelled or gone, so a release that could not reach Slurm is retried when fleetctl exits."""
        if self.released:
            return
        self.released = True
        gone = False
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if not self.cancelled:
                    res = await self.client.call(["scancel", self.job_id], timeout_s=timeout_s, check=False)
                    self.cancelled = res.rc == 0
                res = await self.client.call(["squeue", "-h", "-j", self.job_id, "-t", "PD,R,CF,S", "-o", "%i"],
                                             timeout_s=timeout_s, check=False)
                if (res.rc != 0 and "Invalid job id" in res.stderr_text) or (res.rc == 0 and not res.stdout.strip()):
                    gone = True
                    break
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
        except SlurmError:
            pass
        if self.lifeline is not None and (gone or self.cancelled):
            await self.lifeline.disarm()

    def release_now(self) -> None:
        """Blocking last resort when the event loop is being torn down: ``scancel`` at once
        (unless a scancel already went through)."""
        if self.cancelled:
            return
        self.released = self.cancelled = True
        subprocess.run(self.client.command(["scancel", self.job_id]), env=client_env(), capture_output=True,
                       timeout=30, check=False)


async def allocate(client: SlurmClient, request: AllocationRequest, nodes: Sequence[str], *, job_name: str,
                   deadline_s: float, run_deadline_s: float | None = None) -> Allocation:
    """Allocate ``nodes`` with ``salloc --no-shell`` and return the granted :class:`Allocation`.

    Args:
        client: how to reach salloc.
        request: the allocation's options.
        nodes: node names; all are granted together or none.
        job_name: the job's name (``squeue -n``); the run id makes it findable.
        deadline_s: seconds to wait for the grant (queue wait included).
        run_deadline_s: the run's whole deadline, named in messages when ``deadline_s`` is what
            is left of it (default ``deadline_s``).

    Raises:
        AllocationError: refused (Slurm's message), or not granted within ``deadline_s`` (the job
            request was withdrawn: nothing is left in the queue).
        SlurmError: salloc could not be started.
        asyncio.CancelledError: cancelled while waiting; the request was withdrawn first.
    """
    argv = request.salloc_argv(nodes, job_name=job_name, deadline_s=deadline_s)
    shown_s = deadline_s if run_deadline_s is None else run_deadline_s
    proc = await client.spawn(argv)
    try:
        _, err_bytes = await within(proc.communicate(), deadline_s + 10.0)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        await asyncio.shield(_withdraw(client, proc, job_name))
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise AllocationError(f"allocation of {hostlist(nodes)} not granted within {shown_s:g} s "
                              f"(salloc did not answer; the request was withdrawn)", waited_s=shown_s) from None
    err = err_bytes.decode("utf-8", "replace")
    granted = _GRANTED.search(err)
    if proc.returncode == 0 and granted:
        alloc = Allocation(job_id=granted.group(1), nodes=tuple(nodes), request=request, client=client,
                           job_name=job_name)
        try:
            alloc.lifeline = await Lifeline.start(client, alloc.job_id)
        except OSError:
            pass  # no /bin/sh: the job is still released by the scope
        except BaseException:  # cancelled between the grant and the caller: nobody else knows the job
            await asyncio.shield(alloc.release())
            raise
        return alloc
    pending = _PENDING.search(err)
    if pending:  # salloc withdraws its own pending job; make sure of it
        await client.call(["scancel", pending.group(1)], check=False)
    cause = last_line(err) or f"salloc exited {proc.returncode}"
    if "timed out" in cause.lower() and pending:
        raise AllocationError(f"allocation of {hostlist(nodes)} not granted within {shown_s:g} s "
                              f"(queued and waiting for resources; the request was withdrawn)", waited_s=shown_s)
    raise AllocationError(f"allocation of {hostlist(nodes)} refused: {cause.removeprefix('salloc: error: ')}", cause)


async def not_granted_lines(client: SlurmClient, nodes: Sequence[str], exc: AllocationError) -> dict[str, str]:
    """Each node's line for a request that was not granted in time (``exc.waited_s`` set), naming
    what Slurm says holds the node back (:func:`~fleetctl.connection.slurm_nodes.query_holdups`,
    read from ``sinfo`` as a drained or not responding node is): ``Slurm node n2 is completing
    (COMPLETING: its slurmd has not finished job 7's cleanup): allocation of n2 not granted within
    30 s (the request was withdrawn)``; a node of the same request that nothing holds back gets the
    request's words and the lines of the nodes that held it. Empty (use ``str(exc)``) when the
    request was refused, nothing holds its nodes back (busy with other work), or Slurm cannot be asked.
    """
    if exc.waited_s is None:
        return {}
    try:
        held = await query_holdups(client, nodes)
    except SlurmError:
        return {}
    if not held:
        return {}
    return {n: (f"{held[n]}: allocation of {n} not granted within {exc.waited_s:g} s (the request was withdrawn)"
                if n in held else f"{exc}: " + "; ".join(held.values())) for n in nodes}


async def _withdraw(client: SlurmClient, proc: asyncio.subprocess.Process, job_name: str) -> None:
    """Stop a waiting salloc (it revokes its pending job on SIGTERM) and cancel any job of that
    name (unique to this request) in case salloc could not, or was granted at the last moment."""
    await stop_process(proc, grace_s=3.0)
    try:
        await client.call(["scancel", f"--name={job_name}"], timeout_s=30, check=False)
    except SlurmError:
        pass
