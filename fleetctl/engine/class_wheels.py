"""Each arch class's wheel as one run sees it, and its hand-off from the class's builder to its members.

The roles are :class:`~fleetctl.engine.classes.ClassCoordinator`'s (who builds, serves, receives);
this is what the applying hosts share once they have them:

- the wheel members may be given (:meth:`ClassWheels.givable`): the controller cache's, checked
  once per run (:func:`fleetctl.engine.wheelcache.check_cached`), or for a :attr:`~ClassWheels.fresh`
  class only the one published in this run; a cached wheel that is not the wheel its record
  describes is never pushed, and the run says why in one line (its sha256 checked once more before
  it is first pushed: :meth:`ClassWheels.pushable`);
- who builds (or serves) each class now (:attr:`~ClassWheels.builders`): a builder that becomes
  unreachable, or ends without publishing, hands the build to the next member still waiting
  (:meth:`ClassWheels.fail`, :meth:`ClassWheels.host_done`); a build that fails is tried once more,
  by the next member that can build (the first builder's own venv or disk may be what broke it: a
  fresh operator's trial, a builder's nanobind missing a source file failed its whole class), and
  when that one fails too, or no member can build, the class fails with the builders' errors
  (:class:`ClassBuildFailed`): a real source error fails everywhere, after one retry per class;
- the members waiting for the wheel (:meth:`ClassWheels.wait`), released when it is published
  (:meth:`ClassWheels.publish`), or failed with the controller's cause when it was built but the
  controller could keep it nowhere (:meth:`ClassWheels.unstored`: a full disk; no member builds it
  again, and none blames its builder).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..errors import ClassWheelUnstored, FleetError
from .aio import observe
from .wheelcache import BuiltWheel, check_cached, sha256_problem

__all__ = ["ClassBuildFailed", "ClassWheels"]


class ClassBuildFailed(FleetError):
    """The class's builder failed; the message is the builder's error."""


class ClassWheels:
    """One per run: each class's wheel (the cache's or this run's), its builder, and the members
    waiting for it.

    Args:
        order: host -> its place in inventory order (ties between waiting members are broken by it).
        successors: class key -> the members assigned to it that are still at work, in the order
            they take over its build when its builder goes away (see :meth:`fail`).
    """

    def __init__(self, order: dict[str, int], successors: Callable[[str], list[str]],
                 can_build: Callable[[str], bool] = lambda host: True) -> None:
        self.order = order
        self.successors = successors
        self.can_build = can_build
        #: key -> the first builder's error, once its failed build was handed to another member
        #: (at most one retry per class)
        self.retried: dict[str, str] = {}
        #: key -> the member that builds (or serves) the class's wheel now
        self.builders: dict[str, str] = {}
        #: classes for which only a wheel built in this run counts: asked with ``--force``, or whose
        #: wheel's builder is a member that lost it (it builds again: see
        #: :meth:`fleetctl.engine.classes.ClassCoordinator.lost_own`)
        self.fresh: set[str] = set()
        self._wheels: dict[str, asyncio.Future] = {}
        self._waiting: dict[str, list[str]] = {}
        self._takeover: dict[str, asyncio.Future] = {}
        self._gone: set[str] = set()
        self._lock = asyncio.Lock()
        #: key -> the cache's check this run: (its wheel, None) or (None, why it is not used)
        self._checked: dict[str, tuple[BuiltWheel | None, str | None]] = {}
        self._told: set[str] = set()
        #: (wheel path, sha256) -> its sha256 check before the first push (a task: members share it)
        self._hashed: dict[tuple[str, str], asyncio.Future] = {}

    # -- the wheel members may be given -------------------------------------------------------

    def givable(self, key: str) -> BuiltWheel | None:
        """The class's wheel that members may be given: the cache's, or for a :attr:`fresh` class
        only one published in this run."""
        if key in self.fresh:
            fut = self._wheels.get(key)
            if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
                return fut.result()
            return None
        self.check_cache(key)
        return self._checked[key][0]

    def settled(self, key: str) -> bool:
        """Whether class ``key``'s build in this run is over: its wheel published, or its build failed."""
        return key in self._wheels and self._wheels[key].done()

    def check_cache(self, key: str) -> None:
        """Check the controller cache's wheel for ``key`` once per run
        (:func:`~fleetctl.engine.wheelcache.check_cached`; it may hash the wheel: the step runner
        calls this from a worker thread before asking for a role)."""
        if key not in self._checked:
            self._checked[key] = check_cached(key)

    def cached_unpacked(self, key: str) -> int | None:
        """The bytes the controller cache's wheel for ``key`` unpacks to, even for a :attr:`fresh`
        class (``--force`` rebuilds it from the same inputs): an install's room estimate; ``None``
        when the cache holds none or its record does not say."""
        self.check_cache(key)
        wheel = self._checked[key][0]
        return wheel.unpacked_bytes if wheel is not None else None

    def cache_problem(self, key: str) -> str | None:
        """Why the cache's wheel for ``key`` is not used (one line), the first time it is asked in
        this run; ``None`` after that, or when there is nothing to say."""
        why = self._checked.get(key, (None, None))[1]
        if why is None or key in self._told:
            return None
        self._told.add(key)
        return why

    async def pushable(self, key: str, wheel: BuiltWheel) -> str | None:
        """Why ``wheel`` must not be pushed (its sha256 is not its record's), checked once per run
        in a worker thread and shared by every member (:func:`~fleetctl.engine.wheelcache.sha256_problem`);
        a wheel that fails is dropped from this run's view of the cache (it is never pushed, and
        the next member to ask builds the class again: :meth:`wait`)."""
        slot = (str(wheel.local), wheel.sha256)
        task = self._hashed.get(slot)
        if task is None:
            task = self._hashed[slot] = asyncio.ensure_future(asyncio.to_thread(sha256_problem, wheel))
            observe(task)
        why = await asyncio.shield(task)
        if why is not None and self._checked.get(key, (None, None))[0] == wheel:
            self._checked[key] = (None, why)
            self._told.add(key)
        return why

    # -- the hand-off -------------------------------------------------------------------------

    def gone(self, host: str) -> bool:
        """``host`` ended its run, or failed as its class's builder: it is sent nothing more."""
        return host in self._gone

    def _future(self, key: str) -> asyncio.Future:
        fut = self._wheels.get(key)
        if fut is None:
            fut = self._wheels[key] = asyncio.get_running_loop().create_future()
        return fut

    async def publish(self, key: str, wheel: BuiltWheel) -> None:
        """The class's wheel is in the cache: release every member waiting for it."""
        async with self._lock:
            self._checked[key] = (wheel, None)  # in the cache now: its sha256 computed as it was fetched
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            self._hashed[(str(wheel.local), wheel.sha256)] = done
            fut = self._future(key)
            if not fut.done():
                fut.set_result(wheel)

    async def fail(self, key: str, message: str, *, retryable: bool, host: str | None = None) -> None:
        """The builder failed. ``retryable`` (it became unreachable or ended early): the next member
        waiting builds instead. Otherwise (its build failed: ``message``, the host's one line) the
        next member still at work that can build tries once (:attr:`retried`); when it fails too,
        or none can, every member waiting fails with ``message`` (and the first builder's line)."""
        async with self._lock:
            fut = self._future(key)
            if fut.done():
                return
            if not retryable and host is not None and key not in self.retried:
                nxt = next((h for h in self.successors(key) if h != host and self.can_build(h)), None)
                if nxt is not None:  # one retry: this builder's own host may be what broke the build
                    self.retried[key] = message
                    self._gone.add(host)
                    self.builders[key] = nxt
                    take = self._takeover.pop(nxt, None)
                    if take is not None and not take.done():
                        take.set_result("build")
                    return
            if not retryable and key in self.retried and self.retried[key] != message:
                message = f"{message} (tried again after the first builder failed: {self.retried[key]})"
            if retryable:
                if host is not None and self.builders.get(key) not in (None, host):
                    return
                if host is not None:
                    self._gone.add(host)
                self.builders.pop(key, None)
                # The next member in inventory order that is still running builds, whether it is
                # already waiting or not: the same host whatever the timing.
                nxt = next(iter(self.successors(key)), None) or min(
                    self._waiting.get(key) or [None], key=lambda h: self.order.get(h, 1 << 30) if h else 0)
                if nxt is not None:
                    self.builders[key] = nxt
                    take = self._takeover.pop(nxt, None)
                    if take is not None and not take.done():
                        take.set_result("build")
                return
            fut.set_exception(ClassBuildFailed(message))
            fut.exception()  # retrieved: nobody may be waiting

    async def unstored(self, key: str, message: str) -> None:
        """The class's wheel was built, but the controller could keep it nowhere (``message``: its
        cache's folder and cause, :class:`~fleetctl.errors.ClassWheelUnstored`). No other member
        builds it again (its wheel would meet the same disk); every member waiting for it fails
        with ``message``, and the builder keeps its own result."""
        async with self._lock:
            fut = self._future(key)
            if not fut.done():
                fut.set_exception(ClassWheelUnstored(message))
                fut.exception()  # retrieved: nobody may be waiting

    async def host_done(self, host: str) -> None:
        """``host`` finished its run: if it was to build or serve a class that it never published,
        the next waiting member takes over."""
        self._gone.add(host)
        for key, builder in list(self.builders.items()):
            if builder == host and not self._future(key).done():
                await self.fail(key, f"{host} ended before building", retryable=True, host=host)

    async def wait(self, host: str, key: str) -> BuiltWheel | str:
        """Wait for the class's wheel (a :class:`BuiltWheel`), or ``"build"`` when this host must
        build it instead (the builder went away).

        Raises:
            ClassBuildFailed: the builder's build failed.
            ClassWheelUnstored: it was built, but the controller could not keep it (:meth:`unstored`).
        """
        cached = self.givable(key)
        if cached is not None:
            return cached
        async with self._lock:
            fut = self._future(key)
            if not fut.done() and self.builders.get(key, host) == host:
                self.builders[key] = host
                return "build"
            take = self._takeover[host] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(key, []).append(host)
        try:
            done, _ = await asyncio.wait({fut, take}, return_when=asyncio.FIRST_COMPLETED)
            if fut in done:
                return fut.result()
            return "build"
        finally:
            async with self._lock:
                self._waiting.get(key, []).remove(host) if host in self._waiting.get(key, []) else None
                self._takeover.pop(host, None)
