""":func:`fleetctl.util.within.within` never loses a cancellation (Ctrl-C, SIGTERM), where
``asyncio.wait_for`` before Python 3.12 returns the result of what completed in the same loop
iteration instead (CPython gh-86296): a host whose connect was just completing when the run was
interrupted went on to run its command to its end (operator trial: ``Hosts.run`` of ``sleep 5``
raised KeyboardInterrupt only after 5.3 s, once not at all). Deterministic: the awaited future
completes and the waiting task is cancelled in the same iteration."""

from __future__ import annotations

import asyncio
import sys

import pytest

from fleetctl.util.within import within


def _race(wait) -> object:
    async def main():
        inner = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(wait(inner, 30))
        await asyncio.sleep(0)  # the task waits for inner
        await asyncio.sleep(0)
        inner.set_result("connected")  # the login completes...
        task.cancel()  # ...as Ctrl-C reaches the host's task
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    return asyncio.run(main())


def test_a_cancellation_that_comes_as_the_awaited_work_completes_is_never_lost():
    assert _race(within) == "cancelled"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps the cancellation since Python 3.12")
def test_asyncio_wait_for_loses_it_on_this_python():
    """Why ``within`` exists: on this Python, wait_for returns the result and drops the cancel."""
    assert _race(asyncio.wait_for) == "connected"


def test_within_times_out_and_cancels_what_it_waited_for():
    async def main():
        inner = asyncio.ensure_future(asyncio.sleep(30))
        with pytest.raises(asyncio.TimeoutError):
            await within(inner, 0.05)
        await asyncio.sleep(0)
        return inner.cancelled()

    assert asyncio.run(main()) is True
    assert asyncio.run(within(asyncio.sleep(0, "x"), None)) == "x"

