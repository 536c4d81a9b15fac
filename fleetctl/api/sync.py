"""The sync API over the async one: :func:`run_sync` runs a coroutine to its end.

Without a running event loop in this thread (a script, a worker thread) it is ``asyncio.run``.
Inside a running loop (Jupyter, an async web app) a loop cannot be nested: the coroutine runs on a
fresh loop in a worker thread and this thread waits for it (blocking the caller's loop meanwhile;
use the ``AsyncHosts`` coroutines there to keep it free).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``make()``'s coroutine to its end and return its result (or raise its exception).

    ``make`` is called in the thread that runs the coroutine (a coroutine is bound to the loop it
    starts on). Ctrl-C cancels the run; its record is closed ``interrupted``.
    """
    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:  # outside the except block: an error of the run is not chained to "no running event loop"
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fleetctl-sync") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
