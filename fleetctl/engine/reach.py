"""Reaching a host: its connection opened (:func:`connect`, in its kind's run scope:
:mod:`fleetctl.engine.scopes`), what that took recorded (:func:`record_connection`), and its
first command (:func:`first_command`: run folder, deploy lock, facts, the probes answered ahead;
:mod:`fleetctl.engine.session_start`) run and recorded into the run model, with its events told
to the observers."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from ..build.arch_notes import told_notes
from ..errors import FleetError, HostUnreachable, host_message
from ..status import Status
from .hostlock import HostLockBusy, HostLockError
from .model import PhaseSpan, RunModel, TaskOutcome, utc_now
from .observer import Observers
from .session import HostSession, host_ref
from .session_start import legacy_start, start_host

if TYPE_CHECKING:  # deadlines reads the tasks' registry: not needed to reach a host
    from .deadlines import Deadlines


async def connect(host: Any, scope: Any, run: RunModel, *, timeout_s: float,
                  unavailable: dict[str, str] | None = None) -> HostSession:
    """Open ``host``'s connection (its folders come with its first command: :func:`first_command`).

    Raises:
        HostUnreachable: naming the cause.
    """
    if unavailable and host.name in unavailable:
        raise HostUnreachable(host.name, unavailable[host.name])
    conn = scope.connection(host_ref(host))
    try:
        await conn.open()
    except HostUnreachable as exc:
        exc.stats = dict(getattr(conn, "stats", {}) or {})
        raise
    return HostSession(host=host, conn=conn, run_id=run.run_id)


async def first_command(session: HostSession, run: RunModel, observers: Any, deadlines: Deadlines,
                        spans: list[PhaseSpan], *, facts: bool, lock: bool, remembered: list[list],
                        phases: frozenset[str] | None = None, archs_given: str | None = None) -> None:
    """The host's first command (:mod:`fleetctl.engine.session_start`): run folder, deploy lock,
    facts and the probes answered ahead; facts recorded on the host, lock events told. The build
    plan's notes ("no GPU found: building for fallback_archs ...") are told only when ``phases`` (those
    of the play's tasks; None: every phase) has ``build``, a note about a later phase only when it has
    that phase, and the note of the archs chosen as ``-e archs`` (``archs_given``) changes it
    (:func:`fleetctl.build.arch_notes.told_notes`); the facts keep them as found. ``deadlines``: its
    ``facts`` deadline bounds the command, its ``connect`` deadline a legacy start's connects
    (seconds). Facts, lock and probe events go to ``observers``; the connect and facts phase
    spans are appended to ``spans``.

    Raises:
        HostUnreachable: the host went away.
        FleetError: the deploy lock is held by another run or cannot be taken (after a
            ``lock.refused`` event), or the first command failed (a broken GPU stack: the facts
            gathered are kept on the host's outcome).
    """
    f0 = run.elapsed_s()
    t0 = time.monotonic()
    started_at = utc_now()
    out = run.host(session.name)
    try:
        if session.conn.holds_stdin:
            started = await start_host(session, facts=facts, lock=lock, remembered=remembered,
                                       timeout_s=deadlines.facts)
        else:
            started = await legacy_start(session, facts=facts, lock=lock, timeout_s=deadlines.facts,
                                         connect_timeout_s=deadlines.connect)
    except (HostLockBusy, HostLockError) as exc:
        observers.emit("lock.refused", session.name, path=getattr(exc, "path", None), error=str(exc))
        # one outcome, as a host refused the controller lock has: the run's table shows its F
        # (new-user trial: a full workdir disk left that host's tasks column empty)
        out.tasks.append(TaskOutcome(name="deploy lock", action="lock", phase="connect", status="failed",
                                     msg=host_message(session.name, exc), start=started_at,
                                     duration_s=round(time.monotonic() - t0, 3)))
        raise FleetError(str(exc)) from None
    except BaseException as exc:
        if facts:
            status = ("unreachable" if isinstance(exc, HostUnreachable) else
                      "interrupted" if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)) else "failed")
            spans.append(PhaseSpan(phase="facts", start_s=round(f0, 3), duration_s=round(run.elapsed_s() - f0, 3),
                                   status=status))
            out.tasks.append(TaskOutcome(name="gather facts", action="facts", phase="facts", status=status,
                                         msg=getattr(exc, "cause", None) or host_message(session.name, exc), start=started_at,
                                         duration_s=round(time.monotonic() - t0, 3)))
            out.phases = list(spans)
            if isinstance(getattr(exc, "facts", None), dict):  # gathered, then refused (a broken GPU stack)
                out.facts = exc.facts  # type: ignore[attr-defined]
        raise
    if started.lock_path is not None:
        session.cleanups.append(started.release)
        session.lock = started
        observers.emit("lock.acquired", session.name, path=started.lock_path)
        if started.stale:
            prev = started.stale
            observers.emit("note.added", session.name,
                           message=f"taking over the stale deploy lock of run {prev.get('run_id')} (controller "
                                   f"{prev.get('controller')}, pid {prev.get('pid')}, started {prev.get('started')}): "
                                   f"that run is gone")
            observers.emit("lock.stale_taken_over", session.name, path=started.lock_path, previous=prev)
    if started.run_lock:
        observers.emit("note.added", session.name, message=f"the deploy lock {started.run_lock} is held by this run "
                       "itself (another inventory host of it has the same workdir): this host goes on under it")
    if started.answered:
        observers.emit("probes.answered_ahead", session.name, count=started.answered, of=len(remembered),
                       kept=started.kept)
    if not facts:
        return
    facts_ = started.facts
    out.facts = facts_
    build = facts_.get("build") or {}
    builds = phases is None or "build" in phases
    told = told_notes(build, archs_given, phases) if builds else build.get("env_notes", [])
    for note in told:
        observers.emit("note.added", session.name, message=note)
    warned = [str(n) for n in told if str(n).startswith("warning: ")]
    if warned:  # kept on the host's outcome: an "ok" host with a warning an operator must see
        out.warnings = [*(out.warnings or []), *warned]
    spans.append(PhaseSpan(phase="facts", start_s=round(f0, 3), duration_s=round(run.elapsed_s() - f0, 3), status="ok"))
    out.tasks.append(TaskOutcome(name="gather facts", action="facts", phase="facts", status=Status.OK.value,
                                 msg=build.get("torch_cuda_arch_list", ""), start=started_at,
                                 duration_s=round(time.monotonic() - t0, 3)))
    observers.emit("facts.gathered", session.name, gpus=len(facts_.get("gpus") or []),
                   arch_list=build.get("torch_cuda_arch_list"))


def record_connection(run: RunModel, observers: Observers, host: str, stats: dict | None, *,
                       failed: bool = False) -> None:
    """What reaching the host took (handshake retries after MaxStartups drops, jump hosts, recorded
    host keys) into the host's outcome (``connection``) and an event."""
    if stats:
        run.host(host).connection = dict(stats)
        observers.emit("connection.failed" if failed else "connection.opened", host, **dict(stats))
