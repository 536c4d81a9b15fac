"""Running a playbook over hosts: rolling batches, forks, the planning and applying passes.

For each batch (``--serial``, Ansible's ``serial``), ``forks`` workers take its hosts one at a
time, in inventory order (hosts named as another's ``build_host`` first), and each host, from its
connect to its end:

1. is reached (its connection kind's run scope first: e.g. one Slurm allocation), its run folder
   made, its facts gathered, and its tasks **planned** (probes only; see
   :mod:`fleetctl.engine.host`);
2. waits for its **group** to plan: the arch classes are settled from the group's plan
   (:mod:`fleetctl.engine.classes`); hosts whose class role changed are planned again from their
   cached probes;
3. ``--plan`` and ``--dry-run`` stop here and report the plan; a deploy **applies** it. A host
   whose plan failed before any command would have run is failed with that cause, untouched;
4. is let go of: its connection (and the deploy lock in it) closed, its facts, answers and plan
   dropped; what the run keeps of it is its outcome in the run model (the record) and its class
   request. So a batch of 10,000 hosts holds at most ``forks`` connections and sessions at once,
   not 10,000 (memory and descriptors grow with ``forks``, not with the batch: issue 27,
   bench/README.md).

A group is the hosts that started while the one before it was being settled: the first ``forks``
hosts of the batch (the whole batch when it has no more), then those that took over a worker as
others ended. Later groups join the classes as a later batch does: a class whose wheel is cached,
published, or being built or served by a member of an earlier group gives them that wheel; a
member of an earlier group that builds stays the class's one builder. Within a group the rules
are the batch's of :mod:`fleetctl.engine.classes` (a member that holds the wheel serves it,
``build_host`` builds, two hosts sharing a folder are refused); across groups they are a later
batch's (a host sharing a folder with a host of an earlier group is refused, the earlier one is
not; a member holding the wheel in a later group reuses it, but the class was built by then when
the controller's cache lacked it).

Dead hosts delay no one: a host that needs no class settled (it builds nothing, was refused while
planning, or every build reuses its wheel or is pushed its class's wheel from the controller's
cache: :func:`~fleetctl.engine.class_need.needs_no_class`) goes on at once, as a late host; one that waits for its group says
for whom (``class.waiting``) and, when the grace runs out, a note. A group is settled once none of
its hosts is past its connect but not yet planned, and at least one has planned, or
:data:`SETTLE_GRACE_S` seconds after its first host planned (a host past connect whose first command hangs, e.g. a login rc file waiting on a dead NFS
mount, is then late, as below). A host still *connecting* then (a dead address waiting for
its connect timeout, an sshd that never sends its banner) is not waited for: anyone that could
have got through connect, facts and planning in that time is not a connect away. Such a late
host, if it gets through at all, joins on its own when it has planned: its class role is assigned
alone (:meth:`ClassCoordinator.assign`: a class whose wheel is built, published or under way gives
it the wheel; a class with no member left builds on it), it is planned again if that role
differs, then shown (``--dry-run``) or applied. So a fast fleet of at most ``forks`` hosts (every
host past connect before the first has planned) is settled from the whole batch, as ``--plan``
settles it; an unreachable host is simply reported unreachable when its connect fails.

One host's failure never stops the others; a batch with more than ``max_fail_percentage`` percent
failed hosts (Ansible's rule; without it, a batch where every host failed) stops the batches after
it. Everything is told to the observers; nothing here prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .aio import observe
from ..connection.registry import ConnectOptions
from ..errors import FleetError, HostUnreachable, host_message
from ..tasks import ACTIONS
from .batches import FAILED_STATES, batches, stop_reason
from .class_need import needs_no_class, refused_alone, twin_settles, wait_reason
from .classes import ClassCoordinator
from .deadlines import Deadlines
from .host import HostPass, PassOptions, plan_pass, run_pass
from .lockwatch import settle as settle_lock
from .model import PhaseSpan, RunModel, TaskOutcome, utc_now
from .observer import Observers
from .outcomes import HeldObservers, MutedObservers, end_early, finish_host, interrupted, not_started, refused_pass
from .outcomes import stopped
from .probeplan import ProbeMemory
from .reach import connect, first_command, record_connection
from .scopes import enter_scopes, prepare_hosts
from .session import HostSession, close_session, unreachable_facts
from .windows import Group, each_host, machine_twins, window_order

#: Seconds a group waits, after its first host planned, for its other hosts past connect (their
#: facts and plans) before its arch classes are settled; those still at work then join late.
SETTLE_GRACE_S = 20.0


@dataclass
class PlayOptions:
    """Knobs of one playbook run.

    Attributes:
        forks: hosts worked on at once (Ansible's forks).
        mode: ``apply`` (a deploy), ``dry-run`` or ``plan``.
        force: rebuild and reinstall even when nothing changed.
        tags, skip_tags: Ansible's ``--tags``/``--skip-tags``.
        extra_vars: ``-e NAME=VALUE``.
        accept_new_host_keys: record host keys of hosts that have none.
        deadlines: per-phase deadlines (seconds).
        serial: rolling batch sizes (ints or ``"10%"``).
        max_fail_percentage: stop starting batches past this percentage of failed hosts.
        build_each: every host builds its own wheel (``--build each``).
        host_lock: take the deploy lock on each host (:mod:`fleetctl.engine.hostlock`) in the
            host's first command, held until its connection closes; a deploy does.
        remember_probes: answer the probes each host's planners asked last time in the host's
            first command (:mod:`fleetctl.engine.probeplan`).
        refused: host -> why it fails at once, never connected (its machine's controller-side
            lock is held by another run: :mod:`fleetctl.engine.machinelock`); the other hosts run.
    """

    forks: int = 50
    mode: str = "apply"
    force: bool = False
    tags: Sequence[str] = ()
    skip_tags: Sequence[str] = ()
    extra_vars: dict[str, Any] = field(default_factory=dict)
    accept_new_host_keys: bool = False
    ssh_options: tuple[str, ...] = ()  # `-o`, "Name=value" each (fleetctl.connection.ssh_options)
    deadlines: Deadlines = field(default_factory=Deadlines)
    serial: Sequence[int | str] = ()
    max_fail_percentage: float | None = None
    build_each: bool = False
    host_lock: bool = False
    remember_probes: bool = True
    refused: dict[str, str] = field(default_factory=dict)


class _Refused(FleetError):
    """The host is not worked on at all (``PlayOptions.refused``): its machine is another run's."""


async def run_playbook(playbook: Any, hosts: Sequence[Any], *, run: RunModel, observers: Observers,
                       opts: PlayOptions | None = None) -> RunModel:
    """Run ``playbook`` on ``hosts``; fill in and return ``run`` (its ``status`` is left to the caller).

    Raises:
        asyncio.CancelledError / KeyboardInterrupt: after marking the hosts in progress interrupted.
    """
    opts = opts or PlayOptions()
    tasks = list(playbook.tasks)
    selected = {id(t) for t in playbook.select_tags(opts.tags, opts.skip_tags)}
    plan = batches(hosts, list(opts.serial) or ([playbook.serial] if playbook.serial else []))
    max_fail = opts.max_fail_percentage if opts.max_fail_percentage is not None else playbook.max_fail_percentage
    run.playbook, run.playbook_sha256 = str(playbook.path), playbook.sha256
    run.tasks = [t.display_name for t in tasks if id(t) in selected]
    run.batches = [[h.name for h in b] for b in plan]
    classes = ClassCoordinator([h.name for h in hosts])
    pass_opts = PassOptions(extra_vars=dict(opts.extra_vars), deadlines=opts.deadlines, force=opts.force,
                            build_each=opts.build_each)
    async with contextlib.AsyncExitStack() as stack:
        scopes = await enter_scopes(stack, hosts, ConnectOptions(
            accept_new_host_keys=opts.accept_new_host_keys, connect_timeout_s=opts.deadlines.connect,
            run_id=run.run_id, ssh_options=opts.ssh_options), run=run, observers=observers)
        classes.scope_of = {h.name: scopes[h.connection] for h in hosts}
        classes.run_id = run.run_id
        for n, batch in enumerate(plan):
            observers.emit("batch.started", batch=n + 1, of=len(plan), hosts=[h.name for h in batch])
            try:
                await _run_batch(batch, playbook, tasks, selected, scopes, run=run, observers=observers, opts=opts,
                                 pass_opts=pass_opts, classes=classes)
            except (asyncio.CancelledError, KeyboardInterrupt):
                not_started(run, hosts, "the run was interrupted before this host started")
                raise
            finally:
                for kind, scope in scopes.items():
                    await scope.release([h.name for h in batch if h.connection == kind])
            bad = sum(1 for h in batch if run.hosts[h.name].status in FAILED_STATES)
            reason = stop_reason(n, plan, bad, max_fail)
            if reason is not None:
                stopped(run, observers, plan[n + 1:], reason)
                break
    run.failed_hosts = [h for h, o in run.hosts.items() if o.status in FAILED_STATES]
    return run


async def _run_batch(batch: list[Any], playbook: Any, tasks: list[Any], selected: set[int], scopes: dict[str, Any],
                     *, run: RunModel, observers: Observers, opts: PlayOptions, pass_opts: PassOptions,
                     classes: ClassCoordinator) -> None:
    apply = opts.mode == "apply"
    # Only the hosts at work (at most forks) have entries here: a host's session, plan and
    # timeline are let go of once its outcome is in the run model (see release)
    sessions: dict[str, HostSession] = {}
    plans: dict[str, HostPass] = {}
    first: dict[str, list[PhaseSpan]] = {}
    unavailable = await prepare_hosts(scopes, batch, skip=opts.refused)
    # The first planning pass is never shown: a host's class role is only settled once its group
    # (but hosts still connecting, see the module docstring) is planned. A dry run or plan then
    # shows each host's final plan once (re-planned from its cached probes: no round trip); a
    # deploy shows what it applies.
    planning_observers: Any = MutedObservers(observers)
    held: dict[str, HeldObservers] = {}  # the pass --plan/--dry-run show, held until known not refused

    def shown(name: str) -> Any:  # a plan pass shown by --plan/--dry-run (a deploy shows its apply pass)
        if not apply:  # a deploy holds none; a pass planned again starts afresh
            held[name] = HeldObservers(observers)
        return held.get(name, planning_observers)
    memory = ProbeMemory(playbook.path) if opts.remember_probes else None
    phases = frozenset(ACTIONS[t.action].phase for t in tasks if t.action in ACTIONS)
    order = {h.name: i for i, h in enumerate(batch)}
    current = [Group()]  # the group a host that starts now joins
    settlings: list[asyncio.Future] = []
    timers: list[asyncio.TimerHandle] = []
    alone: set[str] = set()  # planned needing no build nor its group (needs_no_class): never wait to settle
    twin_waits: dict[str, tuple[str, ...]] = {}  # planned needing no class, settled with its twins (twin_settles)
    # hosts that may share a folder with another of the batch, settled with it when they build or
    # install in one (a thread: ssh_config read per host)
    twins = asyncio.ensure_future(asyncio.to_thread(machine_twins, batch))
    observe(twins)

    async def settle(names: list[str]) -> None:
        for h in names:  # a host failed while planning is in no class: it would name a builder that never builds
            if refused_alone(plans.get(h)):
                classes.withdraw(h)
        changed = classes.assign(names)
        # builders asked what they reach (once their role is known), and when one cannot, the
        # members that may build instead, all at once; then the roles are assigned again
        while asking := sorted(classes.asking(names), key=order.__getitem__):
            done = await asyncio.gather(*(plan_pass(sessions[h], playbook, tasks, selected, run, planning_observers,
                                                    classes, pass_opts) for h in asking))
            plans.update(zip(asking, done))
            if not classes.due(names):  # a round just begun is asked before the roles are assigned again
                changed |= classes.assign(names)
        for h in names:
            if h in changed or not apply:
                plans[h] = await plan_pass(sessions[h], playbook, tasks, selected, run, shown(h), classes, pass_opts)

    def leave(name: str, g: Group) -> None:
        g.waiting.discard(name)
        if g.settling is None and g.planned and not g.waiting:
            begin(g)

    def begin(g: Group) -> None:
        if g.settling is None and g.planned:
            g.early.update(g.planned)
            g.settling = asyncio.ensure_future(settle(sorted(g.planned, key=order.__getitem__)))
            observe(g.settling)  # awaited (shielded) by each host; read even when no host is left to
            settlings.append(g.settling)
            g.triggered.set()
            if current[0] is g:
                current[0] = Group()

    def expire(g: Group) -> None:
        if g.settling is None and g.waiting:  # the grace ran out: those still at work join late
            late = ", ".join(sorted(g.waiting, key=order.__getitem__))
            for h in sorted(g.planned, key=order.__getitem__):
                observers.emit("note.added", h, message=f"waited {SETTLE_GRACE_S:g} s for {late} (connected, facts or "
                                                        f"plan not done) to settle its arch class; going on without it")
        begin(g)

    async def plan_one(host: Any, g: Group) -> None:
        out = run.host(host.name)
        out.status, out.started = "running", utc_now()
        t0 = time.monotonic()
        observers.emit("host.started", host.name)
        spans = first.setdefault(host.name, [])
        c0 = run.elapsed_s()
        leave(host.name, g)  # connecting: nobody waits for it
        try:
            if host.name in opts.refused:
                raise _Refused(opts.refused[host.name])
            session = await connect(host, scopes[host.connection], run, timeout_s=opts.deadlines.connect,
                                    unavailable=unavailable)
        except (HostUnreachable, FleetError) as exc:
            cause = exc.cause if isinstance(exc, HostUnreachable) else host_message(host.name, exc)
            status = "unreachable" if isinstance(exc, HostUnreachable) else "failed"
            step = ("controller lock", "lock") if isinstance(exc, _Refused) else ("connect", "connect")
            record_connection(run, observers, host.name, getattr(exc, "stats", None), failed=True)
            spans.append(PhaseSpan(phase="connect", start_s=round(c0, 3), duration_s=round(run.elapsed_s() - c0, 3),
                                   status=status))
            # one outcome, the cause once: no task ran, and none is listed as if it had
            out.tasks.append(TaskOutcome(name=step[0], action=step[1], phase="connect", status=status, msg=cause,
                                         start=out.started, duration_s=spans[-1].duration_s))
            out.phases = list(spans)
            out.status, out.error = status, cause
            if status == "unreachable":
                out.facts = unreachable_facts(scopes[host.connection], host, cause)
            out.duration_s = round(time.monotonic() - t0, 3)
            observers.emit("host.finished", host.name, status=status, error=cause, duration_s=out.duration_s)
            return
        if g.settling is None:
            g.waiting.add(host.name)  # through connect in time: the group waits for its plan
        spans.append(PhaseSpan(phase="connect", start_s=round(c0, 3), duration_s=round(run.elapsed_s() - c0, 3),
                               status="ok"))
        record_connection(run, observers, host.name, getattr(session.conn, "stats", None))
        session.conn.on_note = lambda message, name=host.name: observers.emit("note.added", name, message=message)
        session.conn.on_login_line = lambda ln, name=host.name: observers.line(name, ln, False)  # the log keeps it
        sessions[host.name] = session
        try:
            await first_command(session, run, observers, opts.deadlines, spans, facts=playbook.gather_facts,
                                lock=apply and opts.host_lock,
                                remembered=memory.entries(host.name) if memory is not None else [],
                                phases=phases, archs_given=str(opts.extra_vars.get("archs") or "") or None)
            out.phases = list(spans)  # connect, facts: in the record from now on
            plans[host.name] = await plan_pass(session, playbook, tasks, selected, run, planning_observers, classes,
                                           pass_opts)
            # nothing of its class waits on it, nor it on them (a twin that builds or installs into
            # a folder its twin may share does: twin_settles)
            if needs_no_class(plans[host.name], classes, opts.build_each):
                if not (twin_settles(host.name, classes) and host.name in await twins):
                    alone.add(host.name)
                    return
                twin_waits[host.name] = (await twins)[host.name]  # waits for its twins alone: said so
            g.planned.add(host.name)
            if len(g.planned) == 1 and g.settling is None:  # hosts stuck after connect delay it a while only
                timers.append(asyncio.get_running_loop().call_later(SETTLE_GRACE_S, expire, g))
        except HostUnreachable as exc:
            end_early(run, observers, host.name, "unreachable", exc.cause, t0, spans)
        except FleetError as exc:
            end_early(run, observers, host.name, "failed", host_message(host.name, exc), t0, spans)

    async def apply_one(host: Any) -> None:
        p = plans.pop(host.name, None)
        session = sessions.get(host.name)
        if p is None or session is None:
            return
        t0 = time.monotonic()
        try:
            b, p = p.blocking, None  # the apply pass plans again from the cached probes: the plan is let go of
            if b is not None:
                result = refused_pass(run, observers, host.name, b)
            else:
                result = await run_pass(session, playbook, tasks, selected, apply=True, run=run,
                                        observers=observers, classes=classes, opts=pass_opts)
                result = await settle_lock(session, result, observers)  # still this run's lock?
            finish_host(run, observers, host.name, result, first.get(host.name, []), started=t0,
                    stats=getattr(session.conn, "stats", None))
        finally:
            await classes.wheels.host_done(host.name)

    async def release(name: str) -> None:
        """The host's outcome is in the run model: let go of its session (its connection and the
        deploy lock in it closed, its facts and answers dropped), plan and timeline, keeping only
        which probes it asked (for the next run's first command)."""
        plans.pop(name, None)
        first.pop(name, None)
        session = sessions.get(name)
        if session is None:
            return
        if memory is not None and session.workdir:
            memory.note(name, session.workdir, session.run_id, session.asked)
        try:
            await close_session(session)
        finally:
            sessions.pop(name, None)

    async def one(host: Any) -> None:
        g = current[0]
        name = host.name
        try:
            try:
                await plan_one(host, g)
            finally:
                leave(name, g)
            if name not in plans:
                return
            if name not in alone and (g.settling is None or name in g.early):  # planned in time: settled with its group
                if not g.triggered.is_set() and g.waiting:  # a host stuck after connect holds it up to the grace
                    observers.emit("class.waiting", name, waiting_for=sorted(g.waiting, key=order.__getitem__),
                                   grace_s=SETTLE_GRACE_S,
                                   reason=wait_reason(SETTLE_GRACE_S, twin_waits.get(name, ())))
                await g.triggered.wait()
                assert g.settling is not None
                await asyncio.shield(g.settling)
            else:  # late: it joins the classes on its own (or none: refused while planning)
                if refused_alone(plans[name]):
                    classes.withdraw(name)
                if classes.assign([name]) or not apply:
                    plans[name] = await plan_pass(sessions[name], playbook, tasks, selected, run, shown(name),
                                                  classes, pass_opts)
            if not apply:  # a dry run refused while planning ends as the deploy does (refused_pass)
                planned, view = plans.pop(name), held.pop(name, None) or HeldObservers(observers)
                refused = planned.blocking if opts.mode != "plan" else None  # --plan: the plan, refusal and all
                view.flush(refused=refused.name if refused is not None else None)
                if planned.blocking is not None:  # --plan's class line never names it as a builder
                    planned.blocking.data = {**planned.blocking.data, "refused_while_planning": True}
                    planned = refused_pass(run, observers, name, planned.blocking) if refused else planned
                finish_host(run, observers, name, planned, first.get(name, []),
                            stats=getattr(sessions[name].conn, "stats", None))
                return
            await apply_one(host)
        finally:
            await release(name)

    try:
        await each_host(window_order(batch), opts.forks, one)
    except (asyncio.CancelledError, KeyboardInterrupt):
        interrupted(run, observers, batch)  # a host it never reached is "not started" (run_playbook)
        raise
    finally:
        for timer in timers:
            timer.cancel()
        for settling in settlings:
            if not settling.done():
                settling.cancel()
        twins.cancel()
        if memory is not None:
            for name, s in sessions.items():
                if s.workdir:
                    memory.note(name, s.workdir, s.run_id, s.asked)
            memory.save()
        await asyncio.gather(*(close_session(s) for s in list(sessions.values())), return_exceptions=True)
