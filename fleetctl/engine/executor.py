"""Driving a planner: executing (or, in a dry run, simulating) its steps on one host.

:func:`drive` sends each step's outcome back into the planner generator until it returns its
:class:`~fleetctl.tasks.base.TaskResult`. :class:`StepRunner` does one step:

- read-only steps (probes) run in every mode; their results are kept per host and reused until
  the host is first changed (a deploy's planning pass and its apply pass ask the same questions);
  a probe the run's first command already answered on the host (:attr:`HostSession.prefetched`,
  see :mod:`fleetctl.engine.session_start`) is taken from there, its lines reported then, as if
  it had just run;
- in a dry run, a mutating step, and a read-only step marked ``after_change``, is recorded as
  planned (shown by ``--dry-run``) and answered with its simulated outcome;
- local work (hashing, a controller-side SASS check) runs in a worker thread, never on the event
  loop;
- the steps of the host's part in its arch class's build (its role, publishing or receiving the
  class's wheel) are handed to :class:`~fleetctl.engine.class_steps.ClassSteps`.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from ..build.archs import stray_env
from ..connection.base import CommandResult, OutputLine
from ..errors import ControllerWriteError, TransferError, host_message
from ..tasks import steps as S
from ..tasks.base import TaskResult
from .class_steps import CLASS_STEPS, ClassSteps
from .classes import ClassCoordinator
from .deadlines import Clock
from .observer import Observers
from .session import HostSession

#: Uploads in flight at once for one :class:`~fleetctl.tasks.steps.PutFiles`.
PARALLEL_UPLOADS = 4

class StepRunner:
    """Runs the steps of one task on one host.

    Args:
        session: the host's session (connection, folders, probe cache).
        observers: where output lines and events go.
        apply: execute mutating steps (a deploy); ``False`` simulates them (dry run, plan, and
            tasks outside ``--tags``).
        clock: the task's deadline.
        classes: the run's arch-class coordinator.
        task: the task's display name (for events).
        env: the task's rendered ``env``, added to every command, over the unsetting (``None``) of
            :data:`fleetctl.build.archs.STRAY_ENV` variables the host's login environment sets.
        become: run commands through ``sudo -n``.
    """

    def __init__(self, session: HostSession, observers: Observers, *, apply: bool, clock: Clock,
                 classes: ClassCoordinator, task: str = "", env: dict[str, str] | None = None,
                 become: bool = False) -> None:
        self.session = session
        self.observers = observers
        self.apply = apply
        self.clock = clock
        self.classes = classes
        self.task = task
        # what the host's login environment sets that points at another Python environment is
        # unset for every command (facts["login_env"]); the task's and the step's env come on top
        self.env = {**{name: None for name in stray_env(session.facts)}, **dict(env or {})}
        self.become = become
        #: the steps of the host's part in its arch class's build
        self.class_steps = ClassSteps(session, observers, classes=classes, clock=clock, apply=apply)
        self.planned: list[dict[str, Any]] = []
        #: a command was simulated (dry run): later probes of this host may see a stale state
        self.simulated_command = False
        #: the planner was handed a simulated outcome (a change or a read after one): what it says
        #: next rests on a fiction, so its notes are not said (see :meth:`_do_note`)
        self.simulated_outcome = False
        self.changed = False

    @property
    def host(self) -> str:
        return self.session.name

    async def run(self, step: S.Step) -> Any:
        """Execute or simulate ``step``; return what the planner receives."""
        # a planning pass tells a class nothing: its roles are provisional until the group is settled
        if not self.apply and (step.mutating or step.after_change or isinstance(step, S.Fail)):
            return self._simulate(step)
        if step.mutating:
            self.session.probes.clear()
            self.session.prefetched.clear()
            self.session.changed = True
            self.changed = True
        if type(step) in CLASS_STEPS:
            return await self.class_steps.run(step)
        handler = getattr(self, f"_do_{type(step).__name__.lower()}")
        return await handler(step)

    def _simulate(self, step: S.Step) -> Any:
        desc = step.describe()
        self.simulated_outcome = True
        if isinstance(step, S.Run):
            env = {**self.env, **step.env}
            if env:
                desc["env"] = env
            if self.become:
                desc["become"] = True
            if step.mutating:
                self.simulated_command = True
        if step.mutating:
            self.session.simulated = True
        if isinstance(step, (S.Run, S.Put, S.PutFiles, S.Fetch, S.Publish, S.Get)) or step.mutating:
            self.planned.append(desc)
            self.observers.emit("step.planned", self.host, task=self.task, step=desc)
        if isinstance(step, S.PutFiles):
            return [None] * len(step.files)
        if isinstance(step, CLASS_STEPS):
            return self.class_steps.simulate(step)
        return step.simulated

    # -- commands -----------------------------------------------------------------------------

    async def _do_run(self, step: S.Run) -> CommandResult:
        env = {**self.env, **step.env}
        key = probe_key(step.argv, env, step.cwd, self.become)
        cacheable = not step.mutating and not step.after_change and step.stdin is None
        if cacheable:
            # after a simulated change, a question may be about a fiction; a question asked only to
            # settle something out of the ordinary is not predicted for the next run (Run.answer_ahead)
            if not self.session.simulated and step.answer_ahead:
                self.session.asked.setdefault(key, step.timeout_s)
            if key in self.session.probes:
                return self.session.probes[key]
            early = self.session.prefetched.pop(key, None)
            if early is not None:
                self.session.probes[key] = early
                self._replay(early, step)
                return early
        argv = [str(a) for a in step.argv]
        cwd = step.cwd
        if self.session.stand_in and not step.mutating:  # a probe of a venv not made yet: ask the one it copies
            argv, env, cwd = stand_in(self.session.stand_in, argv, env, cwd)
        timeout_s = self.clock.cap(step.timeout_s, argv)
        self.observers.emit("command.started", self.host, task=self.task, argv=argv, cwd=cwd,
                            probe=not step.mutating)
        shown = not step.quiet

        def on_line(line: OutputLine) -> None:
            self.observers.line(self.host, line, shown)

        res = await self.session.conn.run(argv, env=env or None, cwd=cwd, timeout_s=timeout_s, on_line=on_line,
                                          stdin=step.stdin, become=self.become)
        self.observers.emit("command.finished", self.host, task=self.task, argv0=argv[0], rc=res.rc,
                            signal=res.signal, duration_s=round(res.duration_s, 3))
        if self.session.stand_in and not step.mutating:  # answered as the staged venv would answer it
            res = answered_as(self.session.stand_in, res)
        if not step.mutating and not step.after_change and step.stdin is None:
            self.session.probes[key] = res
        return res

    def _replay(self, res: CommandResult, step: S.Run) -> None:
        """Report a probe answered ahead by the run's first command as if it had run now."""
        argv = [str(a) for a in step.argv]
        self.observers.emit("command.started", self.host, task=self.task, argv=argv, cwd=step.cwd, probe=True,
                            prefetched=True)
        shown = not step.quiet
        for stream, data in (("stdout", res.stdout), ("stderr", res.stderr)):
            for line in data.splitlines(keepends=True):
                self.observers.line(self.host, OutputLine(stream, line), shown)
        self.observers.emit("command.finished", self.host, task=self.task, argv0=argv[0], rc=res.rc,
                            signal=res.signal, duration_s=round(res.duration_s, 3))

    # -- files --------------------------------------------------------------------------------

    async def _do_put(self, step: S.Put) -> TransferError | None:
        try:
            self.clock.remaining()
            if step.data is not None:
                fd, tmp = tempfile.mkstemp(prefix="fleetctl-put-")
                try:
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(step.data)
                    await self.session.conn.put(tmp, step.remote, mode=step.mode)
                finally:
                    os.unlink(tmp)
            else:
                if not os.path.isfile(str(step.local)):
                    return TransferError(f"local file {step.local} does not exist")
                await self.session.conn.put(str(step.local), step.remote, mode=step.mode)
        except TransferError as exc:
            return TransferError(host_message(self.host, exc))
        return None

    async def _do_putfiles(self, step: S.PutFiles) -> list[TransferError | None]:
        gate = asyncio.Semaphore(PARALLEL_UPLOADS)

        async def one(local: str, remote: str, mode: int | None) -> TransferError | None:
            async with gate:
                return await self._do_put(S.Put(local=local, remote=remote, mode=mode))

        return list(await asyncio.gather(*(one(*f) for f in step.files)))

    async def _do_get(self, step: S.Get) -> TransferError | None:
        """``None``, a :class:`TransferError`, or a :class:`ControllerWriteError` when the
        controller cannot make ``step.local``'s folder or write the file (never raised: a planner
        may go on another way, e.g. with a temporary copy)."""
        try:
            Path(step.local).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return ControllerWriteError(f"the controller cannot make {Path(step.local).parent}: {exc.strerror or exc}")
        try:
            await self.session.conn.get(step.remote, step.local)
        except ControllerWriteError as exc:  # the connection's local write (a full disk here)
            return ControllerWriteError(host_message(self.host, exc))
        except TransferError as exc:
            return TransferError(host_message(self.host, exc))
        except OSError as exc:  # the local side (the connection wraps the host's errors)
            return ControllerWriteError(f"the controller cannot write {step.local}: {exc.strerror or exc}")
        return None

    async def _do_local(self, step: S.Local) -> Any:
        try:
            return await asyncio.to_thread(step.fn, *step.args)
        except Exception as exc:  # noqa: BLE001 - handed to the planner as data
            return exc

    # -- arch classes: the builder's own question (the class's other steps: ClassSteps) ---------

    async def _do_builderprobe(self, step: S.BuilderProbe) -> CommandResult | None:
        """Asked only of a host the class's settled roles make its builder; ``None`` (not asked)
        while its role is provisional (:meth:`ClassCoordinator.defer`). Applying, roles are settled."""
        if not self.apply and not self.classes.defer(self.host, step.key):
            return None
        return await self._do_run(step)

    # -- notices ------------------------------------------------------------------------------

    async def _do_note(self, step: S.Note) -> None:
        """Say ``step.message`` once in the host's run. Not said after the task's planner was
        handed a simulated outcome (a planning pass, ``--dry-run``, a task outside ``--tags``): such
        a note tells of a change that has not happened (fresh operator's trial: a host refused while
        planning was told ``Python now imports the copy of fp4_kernels just installed``); the
        applying pass says it when the change really ran."""
        if self.simulated_outcome:
            return
        if step.message in self.session.told:  # said in an earlier pass of this run
            return
        self.session.told.add(step.message)
        self.observers.emit("note.added", self.host, message=step.message)

    async def _do_emit(self, step: S.Emit) -> None:
        self.observers.emit(step.name, self.host, task=self.task, **dict(step.data))


def probe_key(argv: Any, env: dict[str, str], cwd: str | None, become: bool) -> tuple:
    """How a read-only command is known in a host's probe caches: argv, environment (sorted),
    working folder and ``become`` (the same command with other settings is another question)."""
    return (tuple(argv), tuple(sorted(env.items())), cwd, become)


async def drive(plan: Generator[S.Step, Any, TaskResult], runner: StepRunner) -> TaskResult:
    """Run ``plan`` to its end through ``runner``; return its result.

    Raises:
        HostUnreachable, CommandTimeout: from a step (the generator is closed first).
    """
    try:
        step = next(plan)
        while True:
            try:
                outcome = await runner.run(step)
            except BaseException:
                plan.close()
                raise
            step = plan.send(outcome)
    except StopIteration as stop:
        result = stop.value
        if not isinstance(result, TaskResult):
            raise TypeError(f"a planner returned {result!r}, not a TaskResult") from None
        return result


def monotonic() -> float:
    return time.monotonic()


def stand_in(pair: tuple[str, str], argv: list[str], env: dict[str, Any], cwd: str | None
             ) -> tuple[list[str], dict[str, Any], str | None]:
    """``argv``, ``env`` and ``cwd`` with every path under ``pair[0]`` (a staged venv a dry run has
    not made) read under ``pair[1]`` (the live venv it reproduces file for file: docs/staged.md),
    for a read-only probe (the command reported as run is the one run). A path is ``pair[0]`` itself
    or what starts with it and a ``/``, wherever it stands in a value (``PATH=<venv>/bin:...``,
    ``--venv=<venv>``, a script's text), never a longer name (``v2`` is not ``v20``)."""
    pattern, old = _path_pattern(pair[0]), pair[1].rstrip("/")

    def move(value: Any) -> Any:
        return pattern.sub(lambda _: old, value) if isinstance(value, str) else value

    return [move(a) for a in argv], {k: move(v) for k, v in env.items()}, move(cwd)


def answered_as(pair: tuple[str, str], res: CommandResult) -> CommandResult:
    """A probe's answer from the live venv ``pair[1]`` as the staged one ``pair[0]`` gives it: the
    live venv's path in its output read as the staged venv's (``sys.prefix``, a dist's location)."""
    import dataclasses

    pattern, new = _path_pattern(pair[1], binary=True), pair[0].rstrip("/").encode("utf-8", "surrogateescape")
    return dataclasses.replace(res, stdout=pattern.sub(lambda _: new, res.stdout),
                               stderr=pattern.sub(lambda _: new, res.stderr))


def _path_pattern(path: str, binary: bool = False) -> Any:
    """``path`` itself or followed by ``/``, ``:``, a space or a quote: never a longer name."""
    import re

    text = re.escape(path.rstrip("/")) + r"(?=[/:\s'\"]|$)"
    return re.compile(text.encode("utf-8", "surrogateescape")) if binary else re.compile(text)
