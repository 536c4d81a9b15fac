"""Arch classes: build once per class of hosts that would build the same wheel, push it to the rest.

Hosts whose build inputs are identical (source tree hash, target arch list, CMake defines, CUDA
toolkit version, torch version and its CUDA build, Python tag; see
:func:`fleetctl.tasks.build_wheel.build_key`) form one class. The first member to reach its
``build_wheel`` task builds (or the member named by the ``build_host`` var, when that host is in the
run and has started); the wheel is fetched into the controller's content-addressed cache
(``<cache>/wheels/<key>/``, :func:`cache_root`) and pushed from there to the other members, which install it
as if they had built it. A host whose GPUs mix SMs is its own class. A builder that becomes
unreachable hands the build to the next member; a build that fails fails its whole class (the
others would fail the same way) with the builder's error.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path


def cache_root() -> Path:
    """``<cache>/wheels``: ``$XDG_CACHE_HOME/fleetctl/wheels``, else ``~/.cache/fleetctl/wheels``
    (:func:`fleetctl.paths.cache_dir`)."""
    from .paths import cache_dir

    return cache_dir() / "wheels"


@dataclass(frozen=True)
class BuiltWheel:
    """A class's wheel in the controller cache: ``local`` path, file ``name``, ``sha256``, the
    ``builder`` host, and the builder's task data (``archs``, ``sass``...)."""

    local: Path
    name: str
    sha256: str
    builder: str
    data: dict = field(default_factory=dict)


class ClassBuildFailed(Exception):
    """The class's builder failed; the message is the builder's error."""


class BuildCoordinator:
    """Decides, per class key, who builds and hands the result to the other members. One per run."""

    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future] = {}
        self._builders: dict[str, str] = {}
        self._started: set[str] = set()
        self._done: set[str] = set()
        self._changed = asyncio.Condition()

    async def host_started(self, host: str) -> None:
        async with self._changed:
            self._started.add(host)
            self._changed.notify_all()

    async def host_done(self, host: str) -> None:
        """The host finished its build step (or its run): stop waiting for it to claim."""
        async with self._changed:
            self._done.add(host)
            self._changed.notify_all()

    async def claim(self, key: str, host: str, preferred: str | None = None) -> tuple[str, asyncio.Future | None, str]:
        """``("build", None, host)`` when ``host`` builds ``key``; ``("wait", future, builder)`` otherwise."""
        async with self._changed:
            if preferred and preferred != host and preferred in self._started:
                await self._changed.wait_for(lambda: key in self._futures or preferred in self._done)
            if key in self._futures:
                return "wait", self._futures[key], self._builders[key]
            self._futures[key] = asyncio.get_running_loop().create_future()
            self._builders[key] = host
            self._changed.notify_all()
            return "build", None, host

    async def publish(self, key: str, wheel: BuiltWheel) -> None:
        async with self._changed:
            fut = self._futures[key]
            if not fut.done():
                fut.set_result(wheel)

    async def fail(self, key: str, message: str, *, retryable: bool) -> None:
        """The builder failed. ``retryable`` (it became unreachable): the next member builds."""
        async with self._changed:
            fut = self._futures.get(key)
            if retryable:
                self._futures.pop(key, None)
                self._builders.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_exception(ClassBuildFailed(message) if not retryable else _Retry(message))
                fut.exception()  # mark retrieved: nobody may be waiting
            self._changed.notify_all()


class _Retry(ClassBuildFailed):
    """The builder vanished; waiters claim again."""


async def wait_for_wheel(coord: BuildCoordinator, key: str, host: str, preferred: str | None):
    """Claim or wait until a wheel exists for ``key``; returns ``("build", None)`` or ``("push", BuiltWheel)``.

    Raises:
        ClassBuildFailed: the class's builder failed to build.
    """
    while True:
        role, fut, builder = await coord.claim(key, host, preferred)
        if role == "build":
            return "build", None
        try:
            return "push", await asyncio.shield(fut)
        except _Retry:
            continue
