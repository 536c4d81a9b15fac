"""A host's part in its arch class's build: the steps a planner yields to take its role, publish
the wheel it built, or receive the class's wheel (:mod:`fleetctl.engine.classes` assigns the
roles; :mod:`fleetctl.engine.class_wheels` hands the wheel over).

:class:`ClassSteps` runs the steps of :data:`CLASS_STEPS` for one host, or in a planning pass
(dry run, plan) answers them as the run would (:meth:`ClassSteps.simulate`): the role the batch's
plan gives, the wheel a member would receive. Every other step is
:class:`fleetctl.engine.executor.StepRunner`'s, which hands these to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import secrets
from pathlib import Path
from typing import Any

from ..build.wheeltags import PlatformMismatch, refusal
from ..errors import ClassWheelUnstored, ControllerWriteError, FleetError, TransferError, host_message
from ..tasks import steps as S
from .class_fanout import broadcast_once
from .class_wheels import ClassBuildFailed
from .classes import ClassCoordinator
from .deadlines import Clock
from .observer import Observers
from .session import HostSession
from .wheelcache import BuiltWheel, cache_unwritable, run_scratch, store_wheel, unpacked_size, wheels_root

__all__ = ["CLASS_STEPS", "ClassSteps"]

#: The steps :class:`ClassSteps` runs.
CLASS_STEPS = (S.ClassRole, S.Unreached, S.TargetClaim, S.Publish, S.Fail, S.Fetch, S.CachedWheelSize)

#: Moves a broadcast wheel from its staging path ($1, ``<staging>/<run>/<key16>/<name>``) to the
#: member's wheel folder ($2), then removes the two staging folders if nothing else is left in them
#: (so runs leave no empty folders behind in the nodes' /tmp). Exit status: mv's.
_UNSTAGE = 'mv -f -- "$1" "$2" || exit; rmdir -- "${1%/*}" "${1%/*/*}" 2>/dev/null; exit 0'


class ClassSteps:
    """Runs the arch-class steps (:data:`CLASS_STEPS`) of one host's tasks.

    Args:
        session: the host's session (connection, facts, the lines already told).
        observers: where events go.
        classes: the run's arch-class coordinator.
        clock: the task's deadline (caps the commands that move a received wheel).
        apply: the host applies its plan (its class's roles are settled); ``False`` while planning.
    """

    def __init__(self, session: HostSession, observers: Observers, *, classes: ClassCoordinator, clock: Clock,
                 apply: bool) -> None:
        self.session = session
        self.observers = observers
        self.classes = classes
        self.clock = clock
        self.apply = apply

    @property
    def host(self) -> str:
        return self.session.name

    async def run(self, step: S.Step) -> Any:
        """Execute ``step`` (one of :data:`CLASS_STEPS`); return what the planner receives."""
        return await getattr(self, f"_do_{type(step).__name__.lower()}")(step)

    def simulate(self, step: S.Step) -> Any:
        """What the planner receives for ``step`` (one of :data:`CLASS_STEPS`) in a planning pass:
        the host's role, the wheel a member would receive (see :meth:`ClassCoordinator.known_wheel`);
        a :class:`~fleetctl.tasks.steps.Publish` notes the wheel its builder would hand out."""
        if isinstance(step, S.ClassRole):
            return self.role(step)
        if isinstance(step, S.Publish) and step.wheel and not posixpath.basename(step.wheel).startswith("<"):
            self.classes.planned_wheels[step.key] = posixpath.basename(step.wheel)
        if isinstance(step, S.Fetch):
            return self._simulated_fetch(step)
        return step.simulated

    def _simulated_fetch(self, step: S.Fetch) -> S.ClassWheel:
        """What a member would receive (``--dry-run``): the class's real builder and, when known
        before the build, its wheel's file name (see :meth:`ClassCoordinator.known_wheel`); the
        controller cache's wheel of that name gives its sha256 and unpacked size."""
        name, builder = self.classes.known_wheel(step.key)
        builder = builder or "?"
        cached = self.classes.wheels.givable(step.key)  # the cache's wheel: its real unpacked size and
        known = cached is not None and cached.name == name  # sha256 (an install of it can say "already there")
        unpacked = cached.unpacked_bytes if known else None
        name = name or f"the wheel {builder} builds for class {step.key[:16]}"
        return S.ClassWheel(name=name, sha256=cached.sha256 if known else "", builder=builder,
                            remote=posixpath.join(step.dest, name), data={}, unpacked_bytes=unpacked)

    def _tell(self, message: str) -> None:
        """Say ``message`` once in the host's run (a later pass does not repeat it)."""
        if message not in self.session.told:
            self.session.told.add(message)
            self.observers.emit("note.added", self.host, message=message)

    def role(self, step: S.ClassRole) -> str:
        """The host's role in its class (:meth:`ClassCoordinator.role`), with the line that explains
        a role out of the ordinary: no member can build, the builder does not reach the downloads,
        the builder lost its own wheel."""
        self.classes.platforms[self.host] = (self.session.facts.get("python") or {}).get("platform")
        role = self.classes.role(self.host, step.key, step.holds, step.once, self.session.host.settings.build_host,
                                 force=step.force, can_build=step.can_build, origin=step.origin)
        if role == "build" and self.host in self.classes.unbuildable.get(step.key, ()):
            self._tell(f"no host of this arch class ({', '.join(self.classes.unbuildable[step.key])}) can build its "
                       "wheel: none receives it, each fails with its own cause")
        why = self.classes.unreached.get((self.host, step.key))
        if role == "push" and why is not None:  # its class's builder, it could not: it receives the wheel
            self._tell(f"{why}: this host receives its arch class's wheel from the member that builds it")
        if role == "build" and self.classes.rebuilds.get(step.key) == self.host:
            self._tell("this host built its arch class's wheel and no longer holds it (its build folder was emptied "
                       "or its wheel is not the one built): it builds it again (a host is never pushed its own wheel)")
        return role

    async def _do_classrole(self, step: S.ClassRole) -> str:
        if step.once and not step.force:  # the cache's wheel is checked first (it may be hashed: not on the loop)
            await asyncio.to_thread(self.classes.wheels.check_cache, step.key)
            why = self.classes.wheels.cache_problem(step.key)
            if why is not None:
                self.observers.emit("note.added", self.host, message=f"{why}: never pushed; a member builds or "
                                                                     "serves the class's wheel when one lacks it")
        return self.role(step)

    async def _do_cachedwheelsize(self, step: S.CachedWheelSize) -> int | None:
        """The unpacked bytes of the cache's wheel for ``step.key`` (checked in a worker thread: it
        may be hashed), whether or not this run reuses it (``--force``); ``None`` when none."""
        return await asyncio.to_thread(self.classes.wheels.cached_unpacked, step.key)

    async def _do_unreached(self, step: S.Unreached) -> str:
        """While planning the class's roles are chosen again without this host; applying, they are
        settled (a builder that reached while planning and no longer does fails, as a build would)."""
        return self.classes.cannot_reach(self.host, step.key, step.message) if not self.apply else "build"

    async def _do_targetclaim(self, step: S.TargetClaim) -> tuple:
        return self.classes.targets.claim(self.host, step.ids, step.archs, tuple(step.writes))

    async def _do_publish(self, step: S.Publish) -> FleetError | None:
        """Fetch the built (or served) wheel into the controller's cache and hand it to the class.
        A cache that cannot hold it (its folder a file, read-only, full: the controller's disk, never
        the builder's fault) is a warning: the wheel goes through a folder of this run instead
        (:meth:`_publish_scratch`), and the builder's own result stands (``None``). Only a failed
        fetch (the connection, the host's file) or a wheel that is not its sha256 is an error."""
        name = posixpath.basename(step.wheel)
        folder = wheels_root() / step.key[:16]
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:  # the cache is an optimisation: the wheel in hand goes on (run_scratch)
            return await self._publish_scratch(step, name, folder, _cause(exc))
        tmp = folder / f".{name}.{secrets.token_hex(4)}.part"
        try:
            try:
                await self.session.conn.get(step.wheel, str(tmp))
            except (ControllerWriteError, OSError) as exc:  # written here, the cache's side (a full disk: a
                # fresh operator's trial failed the builder and had a receiver "take over" its build)
                return await self._publish_scratch(step, name, folder, _cause(exc))
            from ..tasks.copy import sha256_of

            digest = await asyncio.to_thread(sha256_of, tmp)
            if step.sha256 and digest != step.sha256:
                tmp.unlink(missing_ok=True)
                raise FleetError(f"fetched {name} does not match its sha256 {step.sha256[:12]}")
            # a served wheel's builder is where it was built (its stamp's pushed_from), not the server
            builder = str(step.data.get("pushed_from") or self.host)
            try:
                built = await asyncio.to_thread(store_wheel, step.key, tmp, name, digest, builder, dict(step.data))
            except OSError as exc:
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
                return await self._publish_scratch(step, name, folder, _cause(exc))
        except (FleetError, OSError) as exc:
            await self.classes.wheels.fail(step.key, f"{self.host}: cannot fetch the wheel: {exc}", retryable=True,
                                           host=self.host)
            return exc if isinstance(exc, FleetError) else FleetError(str(exc))
        await self.classes.wheels.publish(step.key, built)
        self.observers.emit("class.published", self.host, key=step.key[:16], wheel=name, sha256=digest)
        return None

    async def _publish_scratch(self, step: S.Publish, name: str, folder: Path, cause: str) -> FleetError | None:
        """Publish the class's wheel from a folder of this run (:func:`run_scratch`, removed when
        the controller exits) when the cache's ``folder`` cannot hold it (``cause``): one warning
        (:func:`~fleetctl.engine.wheelcache.cache_unwritable`), and the members are given the wheel
        all the same (it is not kept for the next run). When that folder cannot be written either,
        the class's members fail naming the cache (:meth:`ClassWheels.unstored`), and this host,
        which holds its wheel, keeps its result (``None``)."""
        why = cache_unwritable(folder, cause)
        local = None
        try:
            local = run_scratch() / step.key[:16] / name
            local.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            await self.session.conn.get(step.wheel, str(local))
            from ..tasks.copy import sha256_of

            digest = await asyncio.to_thread(sha256_of, local)
            if step.sha256 and digest != step.sha256:
                raise FleetError(f"fetched {name} does not match its sha256 {step.sha256[:12]}")
        except (ControllerWriteError, OSError) as exc:  # the controller's disk again: no member can have it
            where = f"{local.parent if local is not None else 'a temporary folder'}: {_cause(exc)}"
            await self.classes.wheels.unstored(step.key, f"the class's wheel could not be stored in the controller's "
                                                         f"cache ({folder}: {cause}) nor in a folder of this run "
                                                         f"({where}); built on {self.host}")
            self.observers.emit("note.added", self.host, message=f"warning: {why}, nor a folder of this run ({where}): "
                                                                 "this host keeps its wheel; the rest of its arch "
                                                                 "class are not given it")
            return None
        except FleetError as exc:
            await self.classes.wheels.fail(step.key, f"{self.host}: cannot fetch the wheel: {exc}", retryable=True,
                                           host=self.host)
            return exc
        self.observers.emit("note.added", self.host, message=f"warning: {why}; the wheel is kept for this run only")
        builder = str(step.data.get("pushed_from") or self.host)
        await self.classes.wheels.publish(step.key, BuiltWheel(local=local, name=name, sha256=digest, builder=builder,
                                                               data=dict(step.data),
                                                               unpacked_bytes=unpacked_size(local)))
        self.observers.emit("class.published", self.host, key=step.key[:16], wheel=name, sha256=digest)
        return None

    async def _do_fail(self, step: S.Fail) -> None:
        await self.classes.wheels.fail(step.key, step.message, retryable=step.retryable, host=self.host)

    async def _wheel_for(self, key: str) -> Any:
        """The class's wheel this host may be pushed (its sha256 checked:
        :meth:`~fleetctl.engine.class_wheels.ClassWheels.pushable`),
        ``"build"``, or the :class:`ClassBuildFailed`. A cached wheel that fails the check is never
        pushed: the class's wheel is asked for again, now built in this run (by this host or another)."""
        for attempt in range(2):
            try:
                got = await self.classes.wheels.wait(self.host, key)
            except (ClassBuildFailed, ClassWheelUnstored) as exc:
                return exc
            if got == "build":
                return got
            why = await self.classes.wheels.pushable(key, got)
            if why is None:
                return got
            self.observers.emit("note.added", self.host, message=f"{why}: not pushed; the class's wheel is built "
                                                                 "again in this run")
        return ClassBuildFailed(why)

    async def _do_fetch(self, step: S.Fetch) -> Any:
        got = await self._wheel_for(step.key)
        if isinstance(got, (ClassBuildFailed, ClassWheelUnstored)):
            return got
        if got == "build":
            self.observers.emit("class.builder_changed", self.host, key=step.key[:16])
            return "build"
        remote = posixpath.join(step.dest, got.name)
        if step.platform is not None:  # defence in depth: never send a wheel pip there would refuse
            why = refusal(self.host, got.name, {"python": {"platform": step.platform}}, (got.data or {}).get("inputs"))
            if why is not None:
                self.observers.emit("class.push_refused", self.host, key=step.key[:16], wheel=got.name, error=why)
                return PlatformMismatch(why)
        try:
            await self.session.conn.run(["mkdir", "-p", "-m", "0700", step.dest], timeout_s=self.clock.cap(60))
            staged = await broadcast_once(self.classes, self.host, step.key, got)
            moved = None
            if staged is not None:
                moved = await self.session.conn.run(["/bin/sh", "-c", _UNSTAGE, "fleetctl-unstage", staged, remote],
                                                    timeout_s=self.clock.cap(60))
            if moved is None or moved.rc != 0:
                await self.session.conn.put(str(got.local), remote, mode=0o644)
        except TransferError as exc:
            return TransferError(host_message(self.host, exc))
        return S.ClassWheel(name=got.name, sha256=got.sha256, builder=got.builder, remote=remote, data=got.data,
                            unpacked_bytes=got.unpacked_bytes)


def _cause(exc: BaseException) -> str:
    """The cause alone of a controller-side write that failed (``No space left on device``)."""
    return str(getattr(exc, "cause", None) or getattr(exc, "strerror", None) or exc)
