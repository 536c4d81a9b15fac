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
from typing import Literal


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


async def answer_or_end(answer: asyncio.Future, task: asyncio.Future,
                        timeout_s: float | None) -> Literal["answer", "ended", "silent"]:
    """Wait for a long-lived remote command (``task``) to give its ``answer`` (a future its output
    sets: the lock taken, the first command's result) or to end first, at most ``timeout_s`` seconds.

    Returns:
        ``"answer"``: ``answer`` is set and ``task`` goes on; ``"ended"``: ``task`` ended without
        answering (read ``task.result()``); ``"silent"``: neither in time, and ``task`` is dropped
        (:func:`drop_task`). ``answer`` is cancelled unless it was set.

    Raises:
        asyncio.CancelledError / KeyboardInterrupt: after cancelling ``task`` (observed).
    """
    try:
        done, _ = await asyncio.wait({answer, task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        observe(task)
        raise
    if answer in done:
        return "answer"
    answer.cancel()
    if task not in done:
        await drop_task(task)
        return "silent"
    return "ended"
