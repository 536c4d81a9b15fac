"""The connection kinds' run scopes of a run (:class:`~fleetctl.connection.registry.KindScope`):
one per kind the hosts use, entered for the run and left at its end, and the hosts prepared in them
together (a Slurm scope allocates many nodes at once). Used by playbook runs
(:mod:`fleetctl.engine.runner`) and ad-hoc work (:mod:`fleetctl.engine.adhoc`,
:mod:`fleetctl.engine.transfer`) alike: entering them is where every run kind begins, so
:func:`enter_scopes` is the one place a run's ``run.started`` event is told."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from typing import Any

from ..connection.registry import ConnectOptions, KindScope, load_kind
from .session import host_ref


async def enter_scopes(stack: contextlib.AsyncExitStack, hosts: Sequence[Any], options: ConnectOptions, *,
                       run: Any, observers: Any) -> dict[str, KindScope]:
    """Begin a run: tell ``observers`` ``run.started`` (``kind``, ``mode``, ``hosts``: how many,
    ``tasks``, ``batches``: from ``run``, the :class:`~fleetctl.engine.model.RunModel`, so a
    playbook run sets them first; an ad-hoc run's are empty), then enter one run scope per
    connection kind the hosts use (``host.connection``) on ``stack``: left at the end, on failure
    and on Ctrl-C (a Slurm scope releases its jobs). Every run kind (deploy, verify, rollback,
    run, facts, copy, fetch) passes here, so each emits ``run.started`` once (an operator's
    trial: callback observers of ``run``/``copy``/``facts`` never got it).

    Returns:
        kind name -> its scope, in the order the hosts first name the kinds.
    """
    observers.emit("run.started", kind=run.kind, mode=run.mode, hosts=len(hosts), tasks=list(run.tasks),
                   batches=[list(b) for b in run.batches])
    scopes: dict[str, KindScope] = {}
    for kind in dict.fromkeys(h.connection for h in hosts):
        scopes[kind] = await stack.enter_async_context(load_kind(kind).scope(options))
    return scopes


async def prepare_hosts(scopes: dict[str, KindScope], hosts: Sequence[Any],
                        skip: Collection[str] = ()) -> dict[str, str]:
    """Let each scope prepare its hosts at once (:meth:`KindScope.prepare`: e.g. one Slurm
    allocation for many nodes), but those named in ``skip``.

    Returns:
        host name -> why it cannot be reached (one line), for the hosts that cannot.
    """
    unavailable: dict[str, str] = {}
    for kind, scope in scopes.items():
        members = [host_ref(h) for h in hosts if h.connection == kind and h.name not in skip]
        if members:
            unavailable.update(await scope.prepare(members))
    return unavailable
