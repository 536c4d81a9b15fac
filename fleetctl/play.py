"""Running a playbook over hosts: forks, per-host task sequence, retries, handlers, the run record.

Each host runs its tasks in order on its own connection; at most ``forks`` hosts at once. A task
failure stops that host (unless ``ignore_errors``), never the others. An unreachable host gets
UNREACHABLE for every task. Everything a host prints goes to ``runs/<run_id>/logs/<host>.log`` as
it arrives; ``run.json`` is rewritten after every task.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import templating
from .connection import OutputLine
from .errors import CommandTimeout, FleetError, HostUnreachable, PlaybookError
from .fanout import for_each_host
from .inventory import Host
from .playbook import Playbook, Task
from .redact import is_marked, unwrap
from .runrecord import RunRecord
from .session import HostSession, gather_host_facts, open_session
from .status import Status
from .tasks import dispatch
from .tasks.base import TaskContext, TaskResult


@dataclass
class PlayOptions:
    """Knobs of one playbook run (seconds for every ``*_s``)."""

    forks: int = 50
    dry_run: bool = False
    force: bool = False
    tags: Sequence[str] = ()
    skip_tags: Sequence[str] = ()
    extra_vars: dict[str, Any] = field(default_factory=dict)
    accept_new_host_keys: bool = False
    connect_timeout_s: float = 30.0
    facts_timeout_s: float = 180.0
    serial: Sequence[int | str] = ()
    max_fail_percentage: float | None = None
    build: str | None = None  # "each" forces a build on every host; None: what each task says
    #: Deadline overrides in seconds by phase: upload, build, install, verify, command (see PHASES).
    phase_timeouts: dict[str, float] = field(default_factory=dict)
    coordinator: Any = None  # set by run_playbook
    #: Hold the deploy lock on each host for its run (fleetctl.hostlock); off for dry runs.
    lock_hosts: bool = False


#: Phases a deadline can be set for with ``--phase-timeout PHASE=SECONDS``, and their actions.
#: ``connect`` and ``facts`` are the connection and facts deadlines.
PHASES = {"connect": (), "facts": (), "upload": ("copy",), "build": ("build_wheel",), "install": ("pip_install",),
          "verify": ("verify",), "command": ("command", "shell", "script")}


def task_timeout_s(task: Task, opts: "PlayOptions") -> float:
    """The task's deadline: a ``--phase-timeout`` for its phase wins over the playbook's value."""
    for phase, actions in PHASES.items():
        if task.action in actions and phase in opts.phase_timeouts:
            return opts.phase_timeouts[phase]
    return task.timeout_s


@dataclass
class Listener:
    """Live callbacks for a terminal (all optional)."""

    on_line: Callable[[str, OutputLine], None] | None = None
    on_task: Callable[[str, int, int, str], None] | None = None  # host, index (1-based), total, name
    on_result: Callable[[str, str, TaskResult], None] | None = None  # host, task name, result
    on_progress: Callable[[str, int, int], None] | None = None  # host, done, total (ninja [k/N])
    on_note: Callable[[str, str], None] | None = None  # host, message


def _context(session: HostSession, playbook: Playbook, opts: PlayOptions, record: RunRecord) -> dict[str, Any]:
    """The template context of one host: inventory vars < play vars < extra vars < registered
    results, plus fleetctl's standard names. Secret values found on the way join the record's
    redactor before anything is rendered or run."""
    host_vars, host_secrets = unwrap(session.host.vars)
    extra, extra_secrets = unwrap(opts.extra_vars)
    record.redactor.add(host_secrets | extra_secrets)
    base = {
        **host_vars,
        "facts": session.facts,
        "host": session.host.name,
        "workdir": session.workdir,
        "run_id": session.run_id,
        "run_dir": session.run_dir,
        "playbook_dir": str(playbook.playbook_dir),
        "venv": session.venv,
        "python": session.python,
    }
    # -e extra vars win over play vars (Ansible's precedence) and play-var templates see them.
    raw_play_vars = {k: v for k, v in unwrap(playbook.vars)[0].items() if k not in extra}
    play_vars = templating.render_vars(raw_play_vars, {**base, **extra})
    _, play_secrets = unwrap({k: ({"value": play_vars[k], "secret": True} if is_marked(v) else play_vars[k])
                              for k, v in playbook.vars.items() if k in play_vars})
    record.redactor.add(play_secrets)
    return {**base, **play_vars, **extra, **session.registered}


async def _run_task(ctx_vars: dict[str, Any], task: Task, session: HostSession, playbook: Playbook,
                    record: RunRecord, opts: PlayOptions, listener: Listener) -> tuple[str, TaskResult]:
    name = task.resolve_name(ctx_vars)
    if not task.should_run(ctx_vars):
        return name, TaskResult(Status.SKIPPED, msg="condition false")
    args = task.resolve_args(ctx_vars)
    if task.action == "build_wheel" and opts.build == "each":
        args = args.model_copy(update={"build": "each"})
    env = task.resolve_env(ctx_vars)
    attempts = task.retries + 1
    timeout_s = task_timeout_s(task, opts)
    result = TaskResult(Status.FAILED, msg="not run")
    for attempt in range(attempts):
        tctx = TaskContext(session=session, record=record, task_label=name, timeout_s=timeout_s, env=env,
                           become=task.become, dry_run=opts.dry_run, on_line=listener.on_line, on_progress=listener.on_progress,
                           playbook_dir=str(playbook.playbook_dir), coordinator=opts.coordinator)
        try:
            result = await asyncio.wait_for(
                dispatch(task.action, tctx, args, playbook.playbook_dir, force=opts.force), timeout_s + 30)
        except (CommandTimeout, asyncio.TimeoutError):
            result = TaskResult(Status.FAILED, msg=f"timed out after {timeout_s:g} s")
        except HostUnreachable as exc:
            result = TaskResult(Status.UNREACHABLE, msg=exc.cause)
        except FleetError as exc:
            result = TaskResult(Status.FAILED, msg=str(exc))
        if tctx.planned:
            result.data.setdefault("planned", tctx.planned)
        if not result.status.is_failure or result.status is Status.UNREACHABLE or attempt + 1 == attempts:
            break
        record.event("task.retrying", host=session.host.name, task=name, attempt=attempt + 1, msg=result.msg)
        await asyncio.sleep(task.delay_s)
    return name, result


async def _run_host(host: Host, playbook: Playbook, tasks: list[Task], record: RunRecord, opts: PlayOptions,
                    listener: Listener) -> dict[str, Any]:
    started = time.monotonic()
    out: dict[str, Any] = {"status": "ok", "tasks": [], "started": dt.datetime.now(dt.timezone.utc).isoformat()}
    record.data["hosts"][host.name] = out

    def finish_task(name: str, res: TaskResult, t0: float, action: str) -> None:
        entry = {"name": name, "action": action, "status": res.status.value, "rc": res.rc, "msg": res.msg,
                 "start": dt.datetime.now(dt.timezone.utc).isoformat(), "duration_s": round(time.monotonic() - t0, 3),
                 "data": {k: v for k, v in res.data.items() if k != "selfcheck"}}
        out["tasks"].append(entry)
        record.mark(host.name, f"{name}: {res.status.value.upper()} {res.msg}")
        record.event("task.finished", host=host.name, task=name, status=res.status.value, rc=res.rc,
                     duration_s=entry["duration_s"], msg=res.msg)
        record.save()
        if listener.on_result:
            listener.on_result(host.name, name, res)

    coord = opts.coordinator
    if coord is not None:
        await coord.host_started(host.name)
    try:
        return await _run_host_body(host, playbook, tasks, record, opts, listener, out, started, finish_task)
    finally:
        if coord is not None:
            await coord.host_done(host.name)


async def _run_host_body(host: Host, playbook: Playbook, tasks: list[Task], record: RunRecord, opts: PlayOptions,
                         listener: Listener, out: dict[str, Any], started: float, finish_task) -> dict[str, Any]:
    """Connect, gather facts, run the tasks and notified handlers on one host."""
    log = record.log.bind(host=host.name)
    try:
        session = await open_session(host, record.run_id, accept_new_host_keys=opts.accept_new_host_keys,
                                     connect_timeout_s=opts.phase_timeouts.get("connect", opts.connect_timeout_s))
    except HostUnreachable as exc:
        _record_connection(record, host.name, out, exc.stats, error=exc.cause)
        for i, t in enumerate(tasks):  # the cause once (it can be long: host key fingerprints)
            finish_task(t.display_name, TaskResult(Status.UNREACHABLE, msg=exc.cause if i == 0 else "not run: host "
                        "unreachable"), time.monotonic(), t.action)
        out.update(status="unreachable", error=exc.cause, duration_s=round(time.monotonic() - started, 3))
        record.save()
        return out
    except FleetError as exc:
        out.update(status="failed", error=str(exc), duration_s=round(time.monotonic() - started, 3))
        record.save()
        return out
    _record_connection(record, host.name, out, session.conn.stats)
    host_lock = None
    try:
        if opts.lock_hosts:
            host_lock = await _take_host_lock(session, record, listener, out)
            if host_lock is None:
                return out
        if playbook.gather_facts:
            t0 = time.monotonic()
            record.mark(host.name, "gather facts")
            try:
                facts = await gather_host_facts(session, timeout_s=opts.phase_timeouts.get("facts", opts.facts_timeout_s))
                out["facts"] = facts
                for note in (facts.get("build") or {}).get("notes", []):
                    record.event("facts.note", host=host.name, note=note)
                    if listener.on_note:
                        listener.on_note(host.name, note)
                finish_task("gather facts", TaskResult(Status.OK, msg=(facts.get("build") or {}).get(
                    "torch_cuda_arch_list", "")), t0, "facts")
            except HostUnreachable as exc:
                finish_task("gather facts", TaskResult(Status.UNREACHABLE, msg=exc.cause), t0, "facts")
                out.update(status="unreachable", error=exc.cause)
                return out
            except FleetError as exc:
                finish_task("gather facts", TaskResult(Status.FAILED, msg=str(exc)), t0, "facts")
                out.update(status="failed", error=str(exc))
                return out
        notified: list[str] = []
        failed = False
        for i, task in enumerate(tasks):
            t0 = time.monotonic()
            ctx_vars = _context(session, playbook, opts, record)
            if listener.on_task:
                listener.on_task(host.name, i + 1, len(tasks), task.resolve_name(ctx_vars))
            record.mark(host.name, f"task {i + 1}/{len(tasks)}: {task.display_name}")
            log.info("task.started", task=task.display_name, index=i + 1)
            try:
                name, res = await _run_task(ctx_vars, task, session, playbook, record, opts, listener)
            except PlaybookError as exc:  # a template failed for this host
                name, res = task.display_name, TaskResult(Status.FAILED, msg=str(exc))
            if task.register:
                session.registered[task.register] = res.as_registered()
            finish_task(name, res, t0, task.action)
            if task.action == "build_wheel" and opts.coordinator is not None:
                await opts.coordinator.host_done(host.name)
            if res.status is Status.CHANGED:
                notified.extend(n for n in task.notify if n not in notified)
            if res.status is Status.UNREACHABLE:
                out.update(status="unreachable", error=res.msg)
                failed = True
                break
            if res.status is Status.FAILED and not task.ignore_errors:
                out.update(status="failed", error=f"{name}: {res.msg}")
                failed = True
                break
        if not failed:
            for handler in playbook.handlers:
                if handler.name in notified:
                    t0 = time.monotonic()
                    name, res = await _run_task(_context(session, playbook, opts, record), handler, session, playbook,
                                                record, opts, listener)
                    finish_task(f"handler: {name}", res, t0, handler.action)
                    if res.status.is_failure and not handler.ignore_errors:
                        out.update(status="failed", error=f"handler {name}: {res.msg}")
                        break
    except (asyncio.CancelledError, KeyboardInterrupt):
        out.update(status="interrupted", error="run interrupted")
        record.mark(host.name, "run interrupted")
        record.event("host.interrupted", host=host.name)
        raise
    finally:
        if host_lock is not None:
            await host_lock.release()
        await session.conn.close()
        out["duration_s"] = round(time.monotonic() - started, 3)
        record.save()
    return out


def _record_connection(record: RunRecord, host: str, out: dict[str, Any], stats, error: str | None = None) -> None:
    """What reaching the host took (handshake retries after MaxStartups drops, jump hosts,
    recorded host keys) into the host's run record entry and an event."""
    if stats:
        out["connection"] = dict(stats)
        record.event("connection.opened" if error is None else "connection.failed", host=host, **dict(stats))


async def _take_host_lock(session: HostSession, record: RunRecord, listener: "Listener", out: dict[str, Any]):
    """The deploy lock on the host (fleetctl.hostlock), or None after recording why not."""
    from .hostlock import HostLockBusy, HostLockError, acquire_host_lock, lock_path

    path = lock_path(session.conn, session.workdir, session.host.vars.get("deploy_lock"))
    try:
        lock = await acquire_host_lock(session.conn, path, run_id=record.run_id)
    except (HostLockBusy, HostLockError) as exc:
        record.event("lock.refused", host=session.host.name, path=path, error=str(exc))
        out.update(status="failed", error=str(exc))
        return None
    except HostUnreachable as exc:
        out.update(status="unreachable", error=f"deploy lock: {exc.cause}")
        return None
    record.event("lock.acquired", host=session.host.name, path=path)
    if lock.stale:
        prev = lock.stale
        note = (f"warning: taking over the stale deploy lock of run {prev.get('run_id')} (controller "
                f"{prev.get('controller')}, pid {prev.get('pid')}, started {prev.get('started')}): that run is gone")
        record.event("lock.stale_taken_over", host=session.host.name, path=path, previous=prev)
        if listener.on_note:
            listener.on_note(session.host.name, note)
    return lock


def batches(hosts: Sequence[Host], serial: Sequence[int | str]) -> list[list[Host]]:
    """Split hosts into rolling batches, Ansible's ``serial``: sizes as ints or ``"10%"`` of all
    hosts (at least 1); the last size repeats until every host is in a batch. Empty: one batch."""
    if not serial:
        return [list(hosts)] if hosts else []
    sizes = []
    for item in serial:
        text = str(item).strip()
        size = int(len(hosts) * float(text[:-1]) / 100) if text.endswith("%") else int(text)
        sizes.append(max(1, size))
    out, i, k = [], 0, 0
    while i < len(hosts):
        size = sizes[min(k, len(sizes) - 1)]
        out.append(list(hosts[i:i + size]))
        i += size
        k += 1
    return out


def failed_hosts(results: dict[str, dict[str, Any]]) -> list[str]:
    """Hosts whose status is failed, unreachable or not started."""
    return [h for h, r in results.items() if r.get("status") in ("failed", "unreachable", "not started")]


async def run_playbook(playbook: Playbook, hosts: Sequence[Host], *, record: RunRecord,
                       opts: PlayOptions | None = None, listener: Listener | None = None) -> dict[str, dict[str, Any]]:
    """Run ``playbook`` on ``hosts`` in rolling batches (``opts.serial``, else the play's ``serial``).

    Returns per host ``{"status", "tasks": [...], "error"?, "facts"?}``; status ``ok``, ``failed``,
    ``unreachable``, or ``not started`` when an earlier batch exceeded ``max_fail_percentage``
    (Ansible's rule: more than N percent of a batch failed), in which case the remaining batches
    do not start and ``run.json``'s ``stopped`` says why.
    """
    opts = opts or PlayOptions()
    listener = listener or Listener()
    if opts.coordinator is None:
        from .buildclass import BuildCoordinator

        opts.coordinator = BuildCoordinator()
    # Hosts named by a build_host var start first, so that they claim their class's build.
    builders = {str(h.vars.get("build_host")) for h in hosts if h.vars.get("build_host")}
    hosts = sorted(hosts, key=lambda h: h.name not in builders)
    tasks = playbook.select_tags(opts.tags, opts.skip_tags)
    serial = list(opts.serial) or ([playbook.serial] if playbook.serial else [])
    max_fail = opts.max_fail_percentage if opts.max_fail_percentage is not None else playbook.max_fail_percentage
    plan = batches(hosts, serial)
    record.data.update(playbook=str(playbook.path), playbook_sha256=playbook.sha256, dry_run=opts.dry_run,
                       tasks=[t.display_name for t in tasks], batches=[[h.name for h in b] for b in plan])
    record.save()
    results: dict[str, dict[str, Any]] = {}
    for n, batch in enumerate(plan):
        record.event("batch.started", batch=n + 1, of=len(plan), hosts=[h.name for h in batch])
        got = await for_each_host(batch, lambda h: _run_host(h, playbook, tasks, record, opts, listener),
                                  forks=opts.forks)
        results.update(got)
        bad = len(failed_hosts(got))
        # Ansible: past max_fail_percentage, or (without one) when every host of a batch failed.
        exceeded = bad * 100.0 / len(batch) > max_fail if max_fail is not None else bad == len(batch)
        if n + 1 < len(plan) and exceeded:
            limit = f"more than max_fail_percentage {max_fail:g}%" if max_fail is not None else "every host"
            reason = (f"batch {n + 1} of {len(plan)}: {bad} of {len(batch)} hosts failed ({limit}); "
                      f"{sum(len(b) for b in plan[n + 1:])} hosts not started")
            record.data["stopped"] = reason
            record.event("run.stopped", reason=reason)
            for later in plan[n + 1:]:
                for h in later:
                    results[h.name] = {"status": "not started", "tasks": [], "error": reason}
                    record.data["hosts"][h.name] = results[h.name]
            record.save()
            break
    return results
