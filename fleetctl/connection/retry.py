"""Retrying with jittered exponential backoff (tenacity), loaded only when a first attempt fails.

Every login and every channel open of a run is made through a retry loop, and nearly all of them
succeed at once; tenacity's import is a tenth of ``fleetctl run``'s start-up. So the first attempt
runs bare, and only its failure brings in tenacity, which then retries with the same schedule as
if it had run the first attempt itself (the first failure is replayed as tenacity's attempt 1).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def retrying(call: Callable[[int], Awaitable[T]], *, retryable: Callable[[BaseException], bool],
                   attempts: int, initial_s: float, max_s: float, deadline: Callable[[], float | None] | None = None) -> T:
    """``await call(n)`` for attempt ``n = 1, 2, ...`` until it returns, an exception it raises
    is not ``retryable``, or ``attempts`` attempts were made (the last exception is raised).
    Between attempts: tenacity's ``wait_exponential_jitter(multiplier=initial_s, max=max_s)``
    seconds.

    ``deadline``: called after the first failure, the :func:`time.monotonic` time by which every
    attempt must be over (``None``: none); no attempt starts after it, nor a wait that would
    end past it (tenacity's ``stop_before_delay``), and the last exception is raised then."""
    try:
        return await call(1)
    except BaseException as exc:  # noqa: BLE001 - re-raised unless retryable
        if attempts <= 1 or not retryable(exc):
            raise
        first: BaseException | None = exc
    from tenacity import (AsyncRetrying, retry_if_exception, stop_after_attempt, stop_before_delay,
                          wait_exponential_jitter)

    stop = stop_after_attempt(attempts)
    until = deadline() if deadline is not None else None
    if until is not None:
        stop = stop | stop_before_delay(max(0.0, until - time.monotonic()))
    async for attempt in AsyncRetrying(retry=retry_if_exception(retryable), stop=stop,
                                       wait=wait_exponential_jitter(multiplier=initial_s, max=max_s), reraise=True):
        with attempt:
            if first is not None:
                replay, first = first, None
                raise replay
            return await call(attempt.retry_state.attempt_number)
    raise AssertionError("unreachable")
