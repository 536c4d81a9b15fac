"""One pass over one host's tasks: planning (every step simulated but the probes) or applying.

A deploy passes over each host twice with the same planners: first planning (what ``--plan`` and
``--dry-run`` show, and where the arch classes are settled), then applying. A failure found while
planning before any command would have run (a preflight: wrong ``cuda_home``, no venv, an arch
nvcc lacks) stops the host before anything is uploaded or built. Tasks left out by ``--tags`` are
planned, never applied, so that what they register (``build.data.wheel``) is known to the tasks
that run.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from ..playbook import templating, unknown
from ..errors import CommandTimeout, ConnectionLost, FleetError, HostUnreachable, PlaybookError, host_message
from ..util.paths import REPO_ROOT
from ..status import Status
from ..tasks import ACTIONS
from ..tasks.base import HostView, TaskResult
from ..tasks.envs import kept_line
from .classes import ClassCoordinator
from .context import host_context
from .deadlines import Clock, Deadlines, timeout_message
from .executor import StepRunner, drive
from .lockwatch import lock_loss
from .model import PhaseSpan, RunModel, TaskOutcome, utc_now
from .observer import Observers
from .registered import CONDITION_FALSE, names_unapplied, registered_value
from .session import HostSession
from ..util.within import within


@dataclass
class PassOptions:
    """What one pass needs to know of the run (seconds for every ``*_s``)."""

    extra_vars: dict[str, Any] = field(default_factory=dict)
    deadlines: Deadlines = field(default_factory=Deadlines)
    force: bool = False
    build_each: bool = False


@dataclass
class HostPass:
    """A pass's outcome: the tasks' outcomes, the host's status and error, for a planning pass
    the failure it found before any command would have run (``blocking``), and the host's Python
    environment as the last task reporting one left it (``environment``; see ``venv_stage``)."""

    outcomes: list[TaskOutcome] = field(default_factory=list)
    status: str = "ok"
    error: str | None = None
    blocking: TaskOutcome | None = None
    environment: dict[str, Any] | None = None
    #: lines the host's result carries beside its status (a deploy lock lost during the run)
    warnings: list[str] = field(default_factory=list)


class LiveOutcome:
    """Keeps one host's part of the run model (``run.host(name)``: tasks, timeline, duration) up
    to date as each task of an applying pass finishes, so that the run record (rewritten as the
    run goes, see :mod:`fleetctl.reporting.record`) holds every finished task even when the run is
    interrupted (SIGINT, SIGTERM) or killed (SIGKILL: what was written before stays)."""

    def __init__(self, run: RunModel, host: str) -> None:
        self.run, self.host = run, host
        out = run.host(host)
        self.before = list(out.tasks)  # gather facts (a connect failure never gets here)
        self.first = list(out.phases)

    def commit(self, outcomes: list[TaskOutcome]) -> None:
        out = self.run.host(self.host)
        out.tasks = self.before + list(outcomes)
        out.phases = phase_spans(self.run, outcomes, self.first)
        if out.started:
            import datetime as dt

            out.duration_s = round((dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(out.started))
                                   .total_seconds(), 3)


def _view(session: HostSession, playbook: Any, opts: PassOptions, env: dict[str, str]) -> HostView:
    return HostView(
        name=session.name, facts=session.facts, venv=session.venv, python=session.python, workdir=session.workdir,
        run_dir=session.run_dir, playbook_dir=playbook.playbook_dir, project_root=REPO_ROOT,
        cuda_home=session.host.settings.cuda_home, cuda_home_origin=session.host.var_origin("cuda_home"),
        build_host=session.host.settings.build_host,
        verify_device=session.host.settings.verify_device,
        files=dict(session.files), stamps=dict(session.stamps), trees=dict(session.trees),
        sources=dict(session.sources), force=opts.force, build_each=opts.build_each, env=env,
        keep_live=session.keep_live, controller_env=_controller_env(session))


def _controller_env(session: HostSession) -> tuple[str, ...]:
    """The environment this controller runs from (``sys.prefix`` as given and resolved), for a
    local connection (where the host's files are the controller's); ``()`` for other hosts."""
    if session.host.connection != "local" or sys.prefix == sys.base_prefix:
        return ()
    return tuple(dict.fromkeys((os.path.normpath(sys.prefix), os.path.realpath(sys.prefix))))


def nothing_to_stage(outcomes: list[TaskOutcome]) -> bool:
    """Whether a planned pass stages a venv version that nothing would change: its selected
    ``venv_stage`` stages (or, planned with :attr:`HostSession.keep_live`, keeps the live venv),
    a selected ``venv_switch`` follows it, and every task between them plans no change (``ok`` or
    ``skipped``; a failure is left to fail where it does).

    Why here, in the engine, and not in the stage's planner: only the engine knows the host's whole
    planned pass; a planner sees its own task. The planning pass already plans the tasks after the
    stage against the live venv, which the staged version reproduces file for file
    (docs/staged.md), so its verdict holds for the staged version too. The runner plans the host
    again with :attr:`HostSession.keep_live` set (``venv_stage`` then makes no version and
    ``venv_switch`` keeps the live one: both ``ok``, "nothing to change: the live venv stays vN")
    and applies that plan, so ``--plan``, ``--dry-run`` and the deploy agree. A play whose tasks
    always change something (the nightly's ``venv_upgrade``) still stages.
    """
    stage = next((i for i, o in enumerate(outcomes) if o.action == "venv_stage" and o.selected), None)
    if stage is None:
        return False
    s = outcomes[stage]
    decided = (s.data.get("decision") or {})
    staging = s.status == Status.CHANGED.value and decided.get("action") == "stage"
    kept = s.status == Status.OK.value and decided.get("action") == "skip" and decided.get("why") == "nothing to change"
    if not (staging or kept):
        return False
    switch = next((i for i in range(stage + 1, len(outcomes))
                   if outcomes[i].action == "venv_switch" and outcomes[i].selected), None)
    if switch is None or outcomes[switch].status not in (Status.CHANGED.value, Status.OK.value):
        return False
    return all(o.status in (Status.OK.value, Status.SKIPPED.value) for o in outcomes[stage + 1:switch])


async def _run_task(task: Any, session: HostSession, playbook: Any, *, apply: bool, run: RunModel,
                    observers: Observers, classes: ClassCoordinator, opts: PassOptions,
                    ctx_vars: dict[str, Any], name: str) -> tuple[TaskResult, list[dict], bool]:
    """``(result, planned steps, a command was simulated)`` for one task on one host.

    A ``when`` or argument that reads what an earlier, simulated command registered
    (:mod:`fleetctl.playbook.unknown`) is not decided: while planning the task is planned as
    "unknown until applied" (and counts as simulated)."""
    try:
        if not task.should_run(ctx_vars):
            return TaskResult(Status.SKIPPED, msg=CONDITION_FALSE), [], False
        args = task.resolve_args(ctx_vars)
        env = task.resolve_env(ctx_vars)
    except unknown.NotKnown as exc:
        if apply:  # never: a deploy registers no unknowns (registered_value); no guess is run
            return TaskResult(Status.FAILED, msg=str(exc)), [], False
        why = f"unknown until applied: depends on {exc.name}"
        return TaskResult(Status.CHANGED, msg=f"would run if its condition holds, {why}" if task.when else why,
                          data={"decision": {"action": "unknown", "why": why}}), [], True
    action = ACTIONS[task.action]
    attempts = task.retries + 1 if apply else 1
    seconds = opts.deadlines.for_phase(action.phase, task.timeout_s)
    result = TaskResult(Status.FAILED, msg="not run")
    runner = None
    for attempt in range(attempts):
        clock = Clock(session.name, seconds)
        runner = StepRunner(session, observers, apply=apply, clock=clock, classes=classes, task=name, env=env,
                            become=task.become)
        view = _view(session, playbook, opts, env)
        try:
            result = await within(drive(action.plan(args, view), runner), seconds + 30)
        except (CommandTimeout, asyncio.TimeoutError) as exc:  # naming a login shell that never started it
            stall = exc.login_stall if isinstance(exc, CommandTimeout) else session.conn.login_stall()
            result = TaskResult(Status.FAILED, msg=timeout_message(session.name, exc, clock, stall))
        except HostUnreachable as exc:  # the line names the task, not its command's /bin/sh
            result = TaskResult(Status.UNREACHABLE, msg=lost_in(exc, f"task '{name}' ({task.action})"))
        except FleetError as exc:
            result = TaskResult(Status.FAILED, msg=host_message(session.name, exc))
        except Exception as exc:  # noqa: BLE001 - a planner's own bug fails its host, never the run
            observers.emit("task.crashed", session.name, task=name, action=task.action,
                           traceback=traceback.format_exc())
            result = TaskResult(Status.FAILED, msg=f"fleetctl's {task.action} planner failed: "
                                f"{type(exc).__name__}: {exc} (a fault of fleetctl, not of this host; "
                                f"the traceback is in the run's events.jsonl)")
        if not result.status.is_failure or result.status is Status.UNREACHABLE or attempt + 1 == attempts:
            break
        observers.emit("task.retrying", session.name, task=name, attempt=attempt + 1, msg=result.msg)
        await asyncio.sleep(task.delay_s)
    return result, (runner.planned if runner else []), bool(runner and runner.simulated_command)


def lost_in(exc: HostUnreachable, task: str) -> str:
    """The one line of a host lost while ``task`` (``task 'build kernels' (build_wheel)``) was at
    work, for the task's outcome and the host's error (the run's summary): the connection names
    only the command (``connection lost during /bin/sh: ...``), so a lost connection is said with
    the task in its place (:meth:`~fleetctl.errors.ConnectionLost.during`); any other cause (a
    Slurm job step that did not run) is followed by ``(in TASK)`` (fresh operator's trial: the
    build task was named only by ``fleetctl logs``)."""
    if isinstance(exc, ConnectionLost):
        return exc.during(task)
    return f"{exc.cause} (in {task})"


async def run_pass(session: HostSession, playbook: Any, tasks: list[Any], selected: set[int], *, apply: bool,
                   run: RunModel, observers: Observers, classes: ClassCoordinator, opts: PassOptions) -> HostPass:
    """Pass over ``tasks`` (and the notified handlers) on one host.

    Args:
        tasks: the play's tasks, all of them (those outside ``--tags`` are planned, not applied).
        selected: ``id()`` of the tasks ``--tags``/``--skip-tags`` select.
        apply: apply the selected tasks; ``False`` plans every task.
    """
    out = HostPass()
    live = LiveOutcome(run, session.name) if apply else None
    session.reset_venv()
    notified: list[str] = []
    simulated_before = False
    session.simulated = False
    total = len(tasks)

    #: register name -> the task left out by --tags whose registered result is not on the host
    #: (planned as a change or a failure): a selected task naming it would use a fiction
    unapplied: dict[str, str] = {}

    async def one(task: Any, index: int, label: str | None = None) -> TaskResult:
        nonlocal simulated_before
        t0 = time.monotonic()
        start_iso = utc_now()
        start_s = run.elapsed_s()
        is_selected = id(task) in selected or label is not None
        name = task.display_name  # until its template is rendered
        try:
            try:
                ctx_vars = host_context(session, playbook, opts.extra_vars, run.redactor, task)
            except templating.RenderError as exc:  # a play var, not this task: name the var
                raise templating.RenderError(exc.message, file=str(playbook.path),
                                             key="vars." + ".".join(str(p) for p in exc.path) if exc.path else "vars") from exc
            try:
                name = task.resolve_name(ctx_vars)
            except PlaybookError:
                name = task.display_name
            if label:
                name = f"{label}: {name}"
            observers.emit("task.started", session.name, task=name, index=index, total=total, action=task.action,
                           phase=ACTIONS[task.action].phase, selected=is_selected)
            # only actions that say what a missing result means (pip_install: no wheel built yet)
            # refuse: elsewhere a template may handle the absence itself (``| default(...)``)
            hint = ACTIONS[task.action].unapplied_hint
            missing = names_unapplied(task, unapplied) if is_selected and hint else None
            lost = (await lock_loss(session) if apply and is_selected and ACTIONS[task.action].phase == "install"
                    else None)
            if missing is not None:
                result, planned, simulated = TaskResult(Status.FAILED, msg=hint), [], False
            elif lost is not None and lost.fails:  # never install while another run holds the lock
                result, planned, simulated = TaskResult(Status.FAILED, msg=f"not run: {lost.message}"), [], False
            else:
                result, planned, simulated = await _run_task(
                    task, session, playbook, apply=apply and is_selected, run=run, observers=observers,
                    classes=classes, opts=opts, ctx_vars=ctx_vars, name=name)
        except (asyncio.CancelledError, KeyboardInterrupt):  # the run was interrupted (SIGINT, SIGTERM)
            if live is not None:
                cut = TaskOutcome(name=name, action=task.action,
                                  phase=ACTIONS[task.action].phase, status="interrupted",
                                  msg="interrupted while running (the run was stopped)", start=start_iso,
                                  duration_s=round(time.monotonic() - t0, 3), selected=is_selected)
                out.outcomes.append(cut)
                live.commit(out.outcomes)
                observers.emit("task.finished", session.name, task=cut.name, action=task.action, phase=cut.phase,
                               status=cut.status, rc=None, duration_s=cut.duration_s, msg=cut.msg,
                               start_s=round(start_s, 3))
            raise
        except (PlaybookError, templating.RenderError) as exc:  # a template failed for this host
            # the title as rendered when it was (the one task.started showed), not the raw template
            result, planned, simulated = TaskResult(Status.FAILED, msg=str(exc)), [], False
        if task.register:
            session.registered[task.register] = registered_value(task.register, result, simulated, planning=not apply)
            if not is_selected and (result.status is Status.CHANGED or result.status.is_failure):
                unapplied[task.register] = name
            else:
                unapplied.pop(task.register, None)
        if not result.status.is_failure:
            session.files.update(result.files)
            session.stamps.update(result.stamps)
            session.trees.update(result.trees)
            session.sources.update(result.sources)
            if result.venv or result.facts:
                session.use_venv(result.venv, result.facts)
            if result.venv:  # a new venv in use: stands in for another only when the task says so
                session.stand_in = result.stand_in
        if result.environment is not None and is_selected:
            out.environment = result.environment
        status = result.status
        msg = result.msg
        if not is_selected and status is not Status.SKIPPED:
            # planned only, so that what it registers is known; it never fails the host
            verb = "would fail" if status.is_failure else "planned"
            msg = "not selected by --tags/--skip-tags" + (f" ({verb}: {msg})" if msg else "")
            status = Status.SKIPPED
        outcome = TaskOutcome(name=name, action=task.action, phase=ACTIONS[task.action].phase, status=status.value,
                              rc=result.rc, msg=msg, start=start_iso, duration_s=round(time.monotonic() - t0, 3),
                              data={k: v for k, v in result.data.items() if k != "selfcheck"}, planned=planned,
                              selected=is_selected)
        out.outcomes.append(outcome)
        if live is not None:
            live.commit(out.outcomes)
        observers.emit("task.finished", session.name, task=name, action=task.action, phase=outcome.phase,
                       status=outcome.status, rc=result.rc, duration_s=outcome.duration_s, msg=msg,
                       start_s=round(start_s, 3))
        if (is_selected and result.status.is_failure and not task.ignore_errors
                and (not simulated_before or result.preflight) and not simulated):
            out.blocking = out.blocking or outcome
        # A stage simulated while planning is modelled whole: the version it would make reproduces
        # the live venv file for file (docs/staged.md), and later probes are asked of the live venv
        # in its place (stand_in). It does not make later answers guesses, so a failure found after
        # it still stops the host while planning, before the stage copies anything (new-operator
        # trial: `--staged --force` staged v2 and uploaded, then failed the build's preflight).
        simulated_before = simulated_before or (simulated and not (is_selected and result.stand_in))
        return result if is_selected else TaskResult(status, msg=msg, data=result.data)

    for i, task in enumerate(tasks):
        res = await one(task, i + 1)
        if res.status is Status.CHANGED:
            notified.extend(n for n in task.notify if n not in notified)
        if res.status is Status.UNREACHABLE or (res.status is Status.FAILED and not task.ignore_errors):
            if res.status is Status.UNREACHABLE:
                out.status, out.error = "unreachable", res.msg
            else:
                out.status, out.error = "failed", f"{out.outcomes[-1].name}: {res.msg}"
            if out.environment and out.environment.get("state") == "staged":
                # the staged version was never switched to: the live one is as it was
                last = out.outcomes[-1]
                out.environment = {**out.environment, "state": "not switched", "failed_stage": last.phase,
                                   "failed_task": last.name, "failed_action": last.action, "failed_msg": res.msg}
                kept = kept_line(out.environment)  # where the failed version is, what it holds
                out.warnings.append(kept)
                observers.emit("note.added", session.name, message=kept)
            return out
    for handler in playbook.handlers:
        if handler.name in notified:
            res = await one(handler, len(tasks), label="handler")
            if res.status.is_failure and not handler.ignore_errors:
                out.status, out.error = "failed", f"{out.outcomes[-1].name}: {res.msg}"
                break
    return out


def phase_spans(run: RunModel, outcomes: list[TaskOutcome], first: list[PhaseSpan]) -> list[PhaseSpan]:
    """The host's timeline: ``first`` (connect, facts), then one bar per task, in run-relative
    seconds (tasks' ``start`` ISO times converted)."""
    import datetime as dt

    t0 = dt.datetime.fromisoformat(run.started)
    spans = list(first)
    for o in outcomes:
        start = (dt.datetime.fromisoformat(o.start) - t0).total_seconds()
        spans.append(PhaseSpan(phase=o.phase, start_s=round(start, 3), duration_s=o.duration_s, status=o.status))
    return spans


async def plan_pass(session: HostSession, playbook: Any, tasks: list[Any], selected: set[int], run: RunModel,
                observers: Any, classes: ClassCoordinator, opts: PassOptions) -> HostPass:
    """A planning pass; the session's registered results and declared files are reset after it
    (the probe cache is kept for the apply pass).

    When the pass stages a venv version that nothing between the stage and the switch would
    change, or was planned keeping the live venv and something now changes, the host is planned
    again with :attr:`HostSession.keep_live` turned (from the probes already answered); that plan
    is the one shown and applied (see :func:`fleetctl.engine.host.nothing_to_stage`). Staging is
    the safe side: a verdict that does not hold on its own plan falls back to it."""
    async def once() -> HostPass:
        try:
            return await run_pass(session, playbook, tasks, selected, apply=False, run=run, observers=observers,
                                  classes=classes, opts=opts)
        finally:
            session.registered.clear()
            session.files.clear()
            session.stamps.clear()
            session.trees.clear()
            session.sources.clear()

    planned = await once()
    keep = nothing_to_stage(planned.outcomes)
    if keep != session.keep_live:
        session.keep_live = keep
        planned = await once()
        if session.keep_live and not nothing_to_stage(planned.outcomes):
            session.keep_live = False
            planned = await once()
    return planned
