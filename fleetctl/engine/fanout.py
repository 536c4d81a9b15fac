"""Running one coroutine per host, at most ``forks`` at a time; one bad host never stops the others."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from typing import Any as Host

T = TypeVar("T")


async def for_each_host(hosts: Sequence[Host], fn: Callable[[Host], Awaitable[T]], *, forks: int = 50) -> dict[str, T]:
    """Run ``fn(host)`` for every host with at most ``forks`` running at once (Ansible's forks).

    ``fn`` must turn its own failures into results; an exception that escapes anyway is re-raised
    only after every other host has finished. Returns results keyed by host name, in inventory order.
    """
    gate = asyncio.Semaphore(max(1, forks))

    async def one(host: Host) -> T:
        async with gate:
            return await fn(host)

    results = await asyncio.gather(*(one(h) for h in hosts), return_exceptions=True)
    for res in results:
        if isinstance(res, BaseException):
            raise res
    return {h.name: r for h, r in zip(hosts, results)}
