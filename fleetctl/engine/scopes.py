"""The connection kinds' run scopes of a run (:class:`~fleetctl.connection.registry.KindScope`):
one per kind the hosts use, entered for the run and left at its end, and the hosts prepared in them
together (a Slurm scope allocates many nodes at once). Used by playbook runs
(:mod:`fleetctl.engine.runner`) and ad-hoc work (:mod:`fleetctl.engine.adhoc`) alike."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from typing import Any

from ..connection.registry import ConnectOptions, KindScope, load_kind
from .session import host_ref


async def enter_scopes(stack: contextlib.AsyncExitStack, hosts: Sequence[Any],
                       options: ConnectOptions) -> dict[str, KindScope]:
    """One run scope per connection kind the hosts use (``host.connection``), entered on
    ``stack``: left at the end, on failure and on Ctrl-C (a Slurm scope releases its jobs).

    Returns:
        kind name -> its scope, in the order the hosts first name the kinds.
    """
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
