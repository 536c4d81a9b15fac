"""Tasks that never end unobserved.

asyncio logs "Task exception was never retrieved" (with a traceback, on stderr) for a task whose
exception nobody read before it was garbage-collected (Python docs, "Developing with asyncio":
"Detect never-retrieved exceptions"). Every task fleetctl starts is either awaited, or handed to
:func:`drop_task` (stop it and read its outcome) or :func:`observe` (read its outcome whenever it
ends) on every path that does not await it.
"""

from __future__ import annotations

import asyncio
import contextlib


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


def observe(task: asyncio.Future | None) -> None:
    """Read ``task``'s outcome when it ends (now, if it has), without waiting for it: for a task
    left behind on a path that cannot wait (a cancellation, an exception being raised)."""
    if task is None:
        return
    if task.done():
        _retrieve(task)
    else:
        task.add_done_callback(_retrieve)


async def drop_task(task: asyncio.Future | None) -> None:
    """Cancel ``task`` (when still running), wait for it to end and read its outcome; its
    exception (a lost connection, say) is dropped: the caller has already decided the outcome."""
    if task is None:
        return
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    observe(task)
