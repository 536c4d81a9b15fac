""":func:`fleetctl.engine.windows.each_host` raises an interruption only once every host at work has
wound down (its command stopped, its outcome written), never at the first one that ended: the
runner marks the hosts and closes their connections right after (operator trial: a healthy host
recorded "unreachable: connection lost during sh" after a SIGTERM)."""

from __future__ import annotations

import asyncio

import pytest


def test_an_interrupted_batch_ends_only_once_every_host_has_wound_down():
    """``each_host`` raised the cancellation at the first host that ended cancelled, while another
    was still stopping its command; the runner then marked it and closed its connection under it
    (operator trial: "unreachable: connection lost during sh"). Deterministic: host b takes
    0.2 s to wind down; no third host is started."""
    from fleetctl.engine.windows import each_host

    class H:
        def __init__(self, name):
            self.name = name

    ended: list[str] = []

    async def one(host):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if host.name == "b":
                await asyncio.sleep(0.2)  # stopping its command on the host
            ended.append(host.name)
            raise
        ended.append(f"{host.name} ran to its end")

    async def main():
        task = asyncio.ensure_future(each_host([H("a"), H("b"), H("c")], 2, one))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return list(ended)

    assert asyncio.run(main()) == ["a", "b"]
