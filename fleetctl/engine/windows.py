"""How a batch's hosts are taken on: ``forks`` workers, each host in turn, and the groups whose
arch classes are settled together (see :mod:`fleetctl.engine.runner`).

A host holds its worker from its connect to its release (waiting for its group's settling
included), so a batch of any size has at most ``forks`` hosts connected, planned or applying at
once, each with its session, facts and plan; the rest are names in a queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any


class Group:
    """Hosts of a batch whose arch classes are settled together.

    Attributes:
        waiting: the hosts past connect that have not planned yet (the settling waits for them).
        planned: those that have planned.
        early: those that had planned when the settling began (a host planned after it is late:
            it joins the classes on its own).
        settling: the settling (a task), once begun.
        triggered: set when the settling begins.
    """

    def __init__(self) -> None:
        self.waiting: set[str] = set()
        self.planned: set[str] = set()
        self.early: set[str] = set()
        self.settling: asyncio.Future | None = None
        self.triggered = asyncio.Event()


def machine_twins(batch: Sequence[Any]) -> dict[str, tuple[str, ...]]:
    """The hosts of ``batch`` whose connection reaches one machine as one login user as another
    host of the batch does (:func:`fleetctl.engine.machinelock.machine_of`, ``ssh:user@address:port``,
    the key of the controller-side lock), each with those others ("twins"), in batch order.

    One login user can write every folder of the other name (a venv, a workdir), which only their
    facts tell: such a host never goes on alone before its group settles
    (:func:`fleetctl.engine.class_need.twin_settles`), so that whether it shares a folder with its
    twin does not depend on which of them planned first (an up to date host went on alone before its
    twin, slower for a workdir to make, claimed the venv: one ``--plan`` refused the twin alone, the
    next both; README, "share the venv"). Another login user of the machine is no twin: a workdir
    shared by users is each one's own (``<workdir>/<user>``), and a venv two users write is still
    refused when their claims meet (:class:`~fleetctl.engine.targets.InstallTargets`); keyed by
    address alone, a host with its class wheel cached waited 20 s for another user's host whose
    nvidia-smi hung (operator trial; README, "Dead hosts delay no one")."""
    from .machinelock import machine_of

    seen: dict[str, list[str]] = {}
    for h in batch:
        seen.setdefault(machine_of(h), []).append(h.name)
    return {name: tuple(n for n in names if n != name) for names in seen.values() if len(names) > 1 for name in names}


def window_order(batch: Sequence[Any]) -> list[Any]:
    """The order a batch's hosts are taken on in: inventory order, but the hosts another host
    names as its ``build_host`` first (so that the builder a class names is in the first group
    that holds a member of the class, as it was in the whole batch)."""
    wanted = {getattr(getattr(h, "settings", None), "build_host", None) for h in batch} - {None}
    return sorted(batch, key=lambda h: h.name not in wanted) if wanted else list(batch)


#: Seconds an interrupted batch waits for its hosts to wind down (a supervised command gets 8 s
#: to exit: :func:`fleetctl.connection.ssh_exec.stop_process`) before it cancels those still at
#: work again.
WIND_DOWN_S = 10.0


async def each_host(hosts: Sequence[Any], forks: int, one: Callable[[Any], Awaitable[None]]) -> None:
    """``await one(host)`` for every host of ``hosts``, in order, at most ``forks`` at once (a
    worker takes the next host when its host is done, so nothing waits for a slow host but its
    worker). One host's bug (an exception from ``one``) never stops the others: the first is
    raised once every host is done. Cancellation reaches every host at work, and is raised once
    every one of them has ended (stopped its command, written its outcome): ``asyncio.gather``
    alone raises at the first worker cancelled, and the runner then marked the others and closed
    their connections under them (operator trial: a healthy host read "unreachable: connection
    lost during sh"). One still at work after :data:`WIND_DOWN_S` is cancelled again, and a second
    cancellation meanwhile hastens them all."""
    queue = iter(hosts)
    bugs: list[BaseException] = []

    async def worker() -> None:
        for host in queue:
            try:
                await one(host)
            except Exception as exc:  # noqa: BLE001 - re-raised below, after the others
                bugs.append(exc)

    workers = [asyncio.ensure_future(worker()) for _ in range(min(max(1, forks), len(hosts)))]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        for _ in queue:  # no worker takes another host
            pass
        pending = [w for w in workers if not w.done()]
        for w in pending:
            if not getattr(w, "cancelling", lambda: 0)():  # not yet told (a worker's own end raised it)
                w.cancel()
        try:
            if pending:  # a host still at work after WIND_DOWN_S (its cancellation lost) is told again
                _, late = await asyncio.wait(pending, timeout=WIND_DOWN_S)
                for w in late:
                    w.cancel()
                if late:
                    await asyncio.wait(late)
        except BaseException:  # the operator insists: hasten them, do not wait
            for w in pending:
                w.cancel()
            raise
        raise
    if bugs:
        raise bugs[0]
