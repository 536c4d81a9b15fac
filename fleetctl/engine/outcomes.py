"""What the runner writes into the run model as a host ends, the observers of a planning pass, and
the one outcome of a host refused while planning, whichever the mode (see
:mod:`fleetctl.engine.runner`)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

from ..util.shared import share
from .host import HostPass, phase_spans
from .model import PhaseSpan, RunModel, TaskOutcome
from .observer import Observers


class MutedObservers:
    """Observers for a deploy's planning pass: probes' lines still reach the host log, but the
    plan's task and step events stay out of the terminal (the apply pass reports the tasks)."""

    DROP = frozenset({"task.started", "task.finished", "step.planned", "task.retrying"})

    def __init__(self, inner: Observers) -> None:
        self.inner = inner

    def emit(self, name: str, host: str | None = None, **data: Any) -> None:
        if name not in self.DROP:
            self.inner.emit(name, host, **data)

    def line(self, host: str, line: Any, shown: bool = True) -> None:
        self.inner.line(host, line, False)


class HeldObservers(MutedObservers):
    """Observers for the planning pass ``--plan`` and ``--dry-run`` show: its task and step events
    are held until the pass is known not to be refused (:meth:`flush` hands them on, in order);
    one refused while planning drops them and ends as :func:`refused_pass` says, as the deploy
    ends it. Without the hold a dry run showed the tasks planned before the refusal (the upload,
    the wheel's push) as changes and failed only at the task that refused, where the deploy
    uploaded nothing (fresh operator trial: ``OCCF`` against the deploy's ``OF``)."""

    def __init__(self, inner: Observers) -> None:
        super().__init__(inner)
        self.held: list[tuple[str, str | None, dict[str, Any]]] = []

    def emit(self, name: str, host: str | None = None, **data: Any) -> None:
        if name in self.DROP:
            self.held.append((name, host, data))
        else:
            self.inner.emit(name, host, **data)

    def line(self, host: str, line: Any, shown: bool = True) -> None:
        self.inner.line(host, line, shown)

    def flush(self, refused: str | None = None) -> None:
        """Hand the held events on, in the order they came; none is held after. ``refused``: the
        name of the task that refused the host while planning: only its ``task.started`` (the live
        ``[task N/M]`` line) is handed on, the other tasks' events are dropped."""
        held, self.held = self.held, []
        for name, host, data in held:
            if refused is None or (name == "task.started" and data.get("task") == refused):
                self.inner.emit(name, host, **data)


def refused_pass(run: RunModel, observers: Observers, host: str, blocking: TaskOutcome) -> HostPass:
    """The outcome of a host whose planning pass found ``blocking`` (:attr:`HostPass.blocking`: a
    failure before any command would have changed the host, such as a preflight): that task alone,
    told to ``observers`` as ``host.refused`` and the task's end, its line the planner's, which a
    deploy (``run.mode`` apply) ends with ``(found while planning: nothing was uploaded or run)``.
    The one form ``--dry-run`` and the deploy give it (README: they agree), so that neither shows
    the tasks before it as done or to do; ``--plan`` shows the whole plan, the same task failing
    with the same line."""
    b = blocking
    observers.emit("host.refused", host, task=b.name, msg=b.msg)
    said = " (found while planning: nothing was uploaded or run)" if run.mode == "apply" else ""
    result = HostPass(outcomes=[b.model_copy(update={"msg": f"{b.msg}{said}"})],
                      status=b.status if b.status == "unreachable" else "failed",
                      # an unreachable task's line names it already (host.lost_in)
                      error=b.msg if b.status == "unreachable" else f"{b.name}: {b.msg}")
    observers.emit("task.finished", host, task=b.name, action=b.action, phase=b.phase, status=b.status, rc=b.rc,
                   duration_s=0.0, msg=result.outcomes[0].msg, start_s=round(run.elapsed_s(), 3))
    return result


def end_early(run: RunModel, observers: Observers, host: str, status: str, error: str, t0: float,
               spans: list[PhaseSpan]) -> None:
    out = run.host(host)
    out.status, out.error = status, error
    out.phases = list(spans)
    out.duration_s = round(time.monotonic() - t0, 3)
    observers.emit("host.finished", host, status=status, error=error, duration_s=out.duration_s)


def finish_host(run: RunModel, observers: Observers, host: str, result: HostPass, spans: list[PhaseSpan],
            started: float | None = None, stats: dict | None = None) -> None:
    out = run.host(host)
    if stats:  # the connection's counters as the host ends (``execs``, ``puts``, ``put_bytes``: round trips)
        out.connection = dict(stats)
    out.tasks = [t for t in out.tasks if t.action == "facts"] + result.outcomes
    for t in result.outcomes:  # kept to the end of the run for the record: equal strings kept once
        share(t.data)
        share(t.planned)
    out.status, out.error = result.status, result.error
    # added to those told earlier (facts' warnings, kept on the outcome by reach), never replacing them
    earlier = list(out.warnings or [])
    out.warnings = earlier + [w for w in getattr(result, "warnings", None) or [] if w not in earlier] or None
    if result.environment is not None and run.mode == "apply":
        out.environment = result.environment
    out.phases = phase_spans(run, result.outcomes, spans)
    if out.started:
        out.duration_s = round((dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(out.started))
                               .total_seconds(), 3)
    observers.emit("host.finished", host, status=out.status, error=out.error, duration_s=out.duration_s)


def not_started(run: RunModel, hosts: Sequence[Any], why: str) -> None:
    """Record every host of ``hosts`` the run never started on (never reached, or waiting for a
    fork) as ``not started`` with ``why``: it did nothing, so it neither failed nor was
    interrupted, and the retry set takes it (:data:`~fleetctl.engine.batches.FAILED_STATES`)."""
    for h in hosts:
        out = run.hosts.get(h.name)
        if out is None or (out.status == "running" and not out.started):
            out = run.host(h.name)
            out.status, out.error = "not started", why


def stopped(run: RunModel, observers: Observers, later: Sequence[Sequence[Any]], reason: str) -> None:
    """A batch's failures stop the run (:func:`fleetctl.engine.batches.stop_reason`): the run says
    why, and every host of the ``later`` batches is ``not started`` with that reason."""
    run.stopped = reason
    observers.emit("run.stopped", reason=reason)
    for batch in later:
        for h in batch:
            out = run.host(h.name)
            out.status, out.error = "not started", reason


def interrupted(run: RunModel, observers: Observers, batch: Sequence[Any]) -> None:
    """Ctrl-C (or SIGTERM) during a batch: each host of it that had started and is still running is
    ``interrupted``, with the time it ran until then (seconds); the others stay as they are."""
    for h in batch:
        out = run.hosts.get(h.name)
        if out is not None and out.status == "running" and out.started:
            out.status, out.error = "interrupted", "run interrupted"
            out.duration_s = round((dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(out.started))
                                   .total_seconds(), 3)
            observers.emit("host.interrupted", h.name)


def interrupt_rest(run: RunModel, observers: Observers) -> None:
    """The run ends ``interrupted`` (Ctrl-C, SIGTERM, an error escaping the engine), whichever path
    ran it (a playbook's batches, ``facts``, ``run``, ``copy``): every host still ``running`` is
    ``interrupted`` when it had started (as :func:`interrupted`), ``not started`` otherwise (as
    :func:`not_started`), so that no host of an ended run is left ``running`` (the README's
    "hosts a Ctrl-C stopped are counted interrupted")."""
    interrupted(run, observers, [_Name(n) for n in run.hosts])
    not_started(run, [_Name(n) for n, o in run.hosts.items() if o.status == "running"],
                "the run was interrupted before this host started")


class _Name:
    """A host name where :func:`interrupted` and :func:`not_started` take hosts (``.name``)."""

    def __init__(self, name: str) -> None:
        self.name = name
