"""A deadline that never loses a cancellation: :func:`within`, for ``asyncio.wait_for``.

On Python before 3.12, ``asyncio.wait_for(aw, timeout)`` drops a cancellation that reaches it in
the loop iteration where ``aw`` completes: it returns ``aw``'s result instead of raising
``CancelledError`` (CPython issue gh-86296, bpo-42130; 3.12 rewrote ``wait_for`` on
``asyncio.timeout``). For fleetctl that cancellation is Ctrl-C or SIGTERM: a host whose
connect (or command) was just completing when it came went on as if nothing had happened, ran its
next command to its end, and the run's end waited for it (operator trial: a ``Hosts.run`` of
``sleep 5`` raised KeyboardInterrupt only after 5.3 s, or never).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout_s: float | None) -> T:
    """``await aw`` for at most ``timeout_s`` seconds (``None``: no limit), as
    ``asyncio.wait_for``: past it ``aw`` is cancelled and ``TimeoutError`` raised. A cancellation
    of the caller always raises ``CancelledError``, even when ``aw`` completed in the same loop
    iteration (``asyncio.timeout``: Python 3.11+; older Pythons fall back to ``wait_for``).

    Raises:
        TimeoutError (``asyncio.TimeoutError``): ``timeout_s`` passed.
        asyncio.CancelledError: the caller was cancelled.
    """
    if timeout_s is None:
        return await aw
    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:  # Python 3.10
        return await asyncio.wait_for(aw, timeout_s)
    async with timeout(timeout_s):
        return await aw
