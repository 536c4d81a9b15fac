"""Steps: what a planner asks the engine to do on (or for) one host, as data.

A planner (see :mod:`fleetctl.tasks.base`) is a generator: it yields steps and receives each step's
outcome, pyinfra-style, but it never performs I/O itself. The engine executes a step, or, in a dry
run and in ``--plan``, *simulates* it: read-only steps (probes) always run for real; a step that
changes the host is recorded and answered with its :attr:`Step.simulated` outcome. ``--plan``,
``--dry-run`` and a deploy therefore drive the same planners over the same probe results and cannot
disagree about what they decide.

Every step carries ``reason``: one line saying why the planner wants it (shown by ``--dry-run``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..connection.base import CommandResult


@dataclass(frozen=True)
class Step:
    """Base of every step.

    Attributes:
        reason: why the planner wants this step (one line).
        mutating: the step changes the host (or the controller's cache); a dry run records it
            instead of doing it. Read-only steps (probes) run in every mode.
        after_change: a read-only step whose answer depends on an earlier change of the same
            task (it reads what a build produced): a dry run simulates it too.
        assume: what a dry run answers a simulated step with; ``None``: the step's default
            success (see :attr:`simulated`).
    """

    reason: str = ""
    mutating: bool = True
    after_change: bool = False
    assume: Any = None

    @property
    def simulated(self) -> Any:
        """The outcome a dry run answers this step with."""
        return self.assume

    def describe(self) -> dict[str, Any]:
        """The step as shown by ``--dry-run`` and kept in the run record (JSON-able)."""
        return {"reason": self.reason}


@dataclass(frozen=True)
class Run(Step):
    """Run ``argv`` on the host (exactly as given: no shell) and wait; yields a :class:`CommandResult`.

    Attributes:
        argv: program and arguments.
        env: variables added for this command (over the task's ``env``).
        cwd: remote working folder; ``None``: the login folder.
        timeout_s: deadline in seconds; ``None``: what is left of the task's phase deadline.
        quiet: keep the lines out of the live display (they still go to the host's log).
        stdin: bytes fed to the command's stdin (then EOF).
        answer_ahead: a read-only run the next run's first command may answer ahead (it is
            remembered as asked: :mod:`fleetctl.engine.probeplan`). ``False`` for a question asked
            only while something is out of the ordinary and settled by asking it (a wheel whose
            stamp's mtime disagrees is hashed once, then its stamp agrees): answered ahead, the
            next run would pay for it (read the whole wheel) with nobody asking.

    A simulated run answers ``assume`` (a :class:`CommandResult`), by default rc 0 and no output.
    """

    argv: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float | None = None
    quiet: bool = False
    stdin: bytes | None = None
    answer_ahead: bool = True

    @property
    def simulated(self) -> CommandResult:
        return self.assume or CommandResult(argv=list(self.argv), rc=0)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"argv": list(self.argv)}
        if self.env:
            out["env"] = dict(self.env)
        if self.cwd:
            out["cwd"] = self.cwd
        if self.reason:
            out["reason"] = self.reason
        return out


def probe(argv: Sequence[str], reason: str, *, timeout_s: float | None = 120.0, env: Mapping[str, str] | None = None,
          cwd: str | None = None, answer_ahead: bool = True) -> Run:
    """A read-only :class:`Run` whose lines stay out of the live display (runs in every mode)."""
    return Run(argv=tuple(argv), reason=reason, mutating=False, quiet=True, timeout_s=timeout_s, env=env or {},
               cwd=cwd, answer_ahead=answer_ahead)


@dataclass(frozen=True)
class BuilderProbe(Run):
    """A read-only :class:`Run` that only the builder of arch class ``key`` asks (a question about
    what the build itself needs, such as whether the host reaches what CMake downloads): yields a
    :class:`CommandResult`, or ``None`` while this host's role in the class is still provisional
    (its batch is being planned: every member is answered ``build`` until the roles are assigned,
    :meth:`fleetctl.engine.classes.ClassCoordinator.assign`). A host left unasked that becomes the
    builder is planned again, and asked then; one that receives the class's wheel never is.

    Attributes:
        key: the class's build key.
    """

    key: str = ""
    mutating: bool = False
    quiet: bool = True


@dataclass(frozen=True)
class Put(Step):
    """Upload a local file to ``remote`` (parent folders created, private to the user); yields
    ``None``, or a :class:`~fleetctl.errors.TransferError` instance when the upload failed.

    Exactly one of ``local`` (a controller path) and ``data`` (the bytes themselves, for stamps
    and small records) is given.
    """

    remote: str = ""
    local: str | None = None
    data: bytes | None = None
    mode: int | None = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"upload": self.local if self.local is not None else f"<{len(self.data or b'')} bytes>",
                               "to": self.remote}
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class PutFiles(Step):
    """Upload many local files at once (a few in flight); yields a list with, per file, ``None`` or
    the :class:`~fleetctl.errors.TransferError` instance.

    Attributes:
        files: ``(local path, remote path, mode)`` triples.
    """

    files: tuple[tuple[str, str, int | None], ...] = ()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"upload": [f[0] for f in self.files], "to": [f[1] for f in self.files]}
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class Get(Step):
    """Download the regular file ``remote`` to the controller path ``local``; yields ``None`` or a
    :class:`~fleetctl.errors.TransferError` instance. Read-only for the host."""

    remote: str = ""
    local: str = ""
    mutating: bool = False

    def describe(self) -> dict[str, Any]:
        return {"download": self.remote, "to": self.local, "reason": self.reason}


@dataclass(frozen=True)
class Local(Step):
    """Call ``fn(*args)`` on the controller, off the event loop (hashing, a SASS check of a fetched
    wheel); yields its return value, or the exception it raised (an instance, not raised)."""

    fn: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    mutating: bool = False

    def describe(self) -> dict[str, Any]:
        return {"local": getattr(self.fn, "__name__", "?"), "reason": self.reason}


@dataclass(frozen=True)
class ClassRole(Step):
    """Ask the run's arch-class coordinator who builds the wheel ``key`` (see
    :mod:`fleetctl.engine.classes`); yields ``"build"``, ``"push"`` or ``"serve"`` (this host
    already holds the class's wheel and hands it to the others).

    Attributes:
        key: the build key (sha256 hex of the build inputs).
        holds: this host already has a wheel for ``key`` (its stamp and file exist).
        once: ``False`` (``build: each``) makes every host its own builder.
        force: ``--force``: the class's wheel is built anew; none built before this run (the
            controller's cache, a member's stamp) is reused.
        can_build: this host passed the build preflight (its venv has the build requirements,
            its disk the space); a member that cannot build is made the builder only when no
            member can, and then fails with its preflight's line.
        origin: the host that built the wheel this host holds (its stamp's ``pushed_from``, else
            this host); ``None`` when it holds none. A host is never pushed a wheel it built.
    """

    key: str = ""
    holds: bool = False
    once: bool = True
    force: bool = False
    can_build: bool = True
    origin: str | None = None
    mutating: bool = False

    def describe(self) -> dict[str, Any]:
        return {"class": self.key[:16], "reason": self.reason}


@dataclass(frozen=True)
class TargetClaim(Step):
    """Tell the run's coordinator which folders this host builds or installs in (see
    :mod:`fleetctl.engine.targets`); yields the ones another host of the run claimed too, as
    ``((kind, real path, (every host claiming it...), union of their arch lists), ...)`` (empty:
    none is shared).

    Attributes:
        ids: kind -> ``(id, real path)``, from :func:`fleetctl.tasks.install_target.target_ids`.
        archs: the arch list this host builds for (``"9.0a"``), for the union the message names.
        writes: the kinds of ``ids`` this task writes (``("workdir",)``); a folder several hosts
            only read (one venv their builds use) is not a problem.
    """

    ids: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    archs: str | None = None
    writes: tuple[str, ...] = ()
    mutating: bool = False

    def describe(self) -> dict[str, Any]:
        return {"claim": {k: p for k, (_, p) in self.ids.items()}, "reason": self.reason}


@dataclass(frozen=True)
class Publish(Step):
    """This host built (or holds) the class's wheel at ``wheel``: fetch it into the controller's
    wheel cache (checked against ``sha256``) and hand it to the class; yields ``None`` or the
    error (an instance). ``data`` is the builder's build record (archs, SASS, inputs). A cache the
    controller cannot write (full, read-only) is no error of this host: a warning, and ``None``
    (:class:`fleetctl.engine.class_steps.ClassSteps`)."""

    key: str = ""
    wheel: str = ""
    sha256: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"publish": self.wheel, "class": self.key[:16], "reason": self.reason}


@dataclass(frozen=True)
class Fail(Step):
    """This host's part in a class failed before the wheel existed: tell the class (``retryable``:
    another member may build instead, as when the builder became unreachable)."""

    key: str = ""
    message: str = ""
    retryable: bool = False
    mutating: bool = False


@dataclass(frozen=True)
class CachedWheelSize(Step):
    """Ask the controller's wheel cache the bytes its wheel for build key ``key`` unpacks to
    (:class:`fleetctl.engine.wheelcache.BuiltWheel` ``unpacked_bytes``), even under ``--force``
    (which rebuilds it, from the same inputs: about the same size); yields an int, or ``None``
    when the cache holds no such wheel. An install's room check uses it for a wheel not built yet
    (``pip_install``'s planner) instead of the flat estimate."""

    key: str = ""
    mutating: bool = False


@dataclass(frozen=True)
class Unreached(Step):
    """This host, its arch class's builder, does not reach what CMake would download (the
    :class:`BuilderProbe` said so): yields its role now, ``"push"`` (another member may build: this
    host receives the class's wheel; while planning, the members that may build are all asked at
    once, :meth:`fleetctl.engine.classes.ClassCoordinator.cannot_reach`) or ``"build"`` (no member
    can: it fails with its own cause).

    Attributes:
        key: the class's build key.
        message: what the host cannot download, and why (one line).
    """

    key: str = ""
    message: str = ""
    mutating: bool = False


@dataclass(frozen=True)
class Fetch(Step):
    """Wait for the class's wheel ``key`` and upload it into the remote folder ``dest``; yields a
    :class:`ClassWheel` or the error (an instance: the builder failed, the upload failed, or the
    wheel does not fit the host's platform: :func:`fleetctl.build.wheeltags.refusal` of ``platform``,
    checked before anything is sent, whatever made the keys equal).

    Attributes:
        platform: the host's ``facts["python"]["platform"]`` (``None``: not checked).
    """

    key: str = ""
    dest: str = ""
    platform: Mapping[str, Any] | None = None

    @property
    def simulated(self) -> "ClassWheel":
        name = "<class wheel>"
        return ClassWheel(name=name, sha256="", builder="<builder>", remote=f"{self.dest.rstrip('/')}/{name}", data={})

    def describe(self) -> dict[str, Any]:
        return {"push": f"class {self.key[:16]} wheel", "to": self.dest, "reason": self.reason}


@dataclass(frozen=True)
class ClassWheel:
    """A class's wheel as a member received it: file ``name``, ``sha256``, the ``builder`` host,
    the ``remote`` path it now has on this host, the builder's build record ``data``, and the
    bytes it unpacks to (``unpacked_bytes``, from the controller's cache; None when unknown)."""

    name: str
    sha256: str
    builder: str
    remote: str
    data: Mapping[str, Any]
    unpacked_bytes: int | None = None


@dataclass(frozen=True)
class Note(Step):
    """A notice for the operator about this host (shown once per identical message, folded)."""

    message: str = ""
    mutating: bool = False


@dataclass(frozen=True)
class Emit(Step):
    """An event for the run record (``noun.verb_past`` name, JSON-able data)."""

    name: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    mutating: bool = False
