"""One send of an arch class's wheel to many members (Slurm's ``sbcast``): the connection kind's
run scope sends the builder's wheel once to every member of that kind that receives it (role
``push``, still running, its platform fitting the wheel: :func:`fleetctl.build.wheeltags.refusal`);
a member the send missed falls back to its own upload. The roles and members are
:class:`~fleetctl.engine.classes.ClassCoordinator`'s.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..build.wheeltags import refusal
from .aio import observe
from .classes import ClassCoordinator
from .wheelcache import BuiltWheel


def staging_path(run_id: str, key: str, name: str) -> str:
    """Where a broadcast puts a class's wheel on each member (node-local), before the member
    moves it into its own wheel folder."""
    return f"/tmp/fleetctl-{run_id}/{key[:16]}/{name}"


async def _fan_out(coord: ClassCoordinator, scope: Any, key: str, wheel: BuiltWheel) -> dict[str, str | None]:
    members = sorted((h for h, (k, r) in coord.assigned.items()
                      if k == key and r == "push" and coord.scope_of.get(h) is scope and not coord.wheels.gone(h)
                      and refusal(h, wheel.name, {"python": {"platform": coord.platforms.get(h)}},
                                  wheel.data.get("inputs")) is None),
                     key=lambda h: coord.order.get(h, 1 << 30))
    return await scope.broadcast(str(wheel.local), staging_path(coord.run_id, key, wheel.name), members)


async def broadcast_once(coord: ClassCoordinator, host: str, key: str, wheel: BuiltWheel) -> str | None:
    """For a member whose connection kind can send one file to many hosts at once (Slurm's
    sbcast): the class's wheel goes out once to every member of that kind; returns where it landed
    on ``host``, or ``None`` when ``host`` must be sent the wheel on its own."""
    scope = coord.scope_of.get(host)
    if scope is None or not getattr(scope, "can_broadcast", False):
        return None
    slot = (key, id(scope))
    task = coord.fanouts.get(slot)
    if task is None:
        task = coord.fanouts[slot] = asyncio.ensure_future(_fan_out(coord, scope, key, wheel))
        observe(task)  # awaited through shield by each member; read even when all were cancelled
    try:
        results = await asyncio.shield(task)
    except Exception:  # noqa: BLE001 - the member falls back to its own upload
        return None
    if host in results and results[host] is None:
        return staging_path(coord.run_id, key, wheel.name)
    return None

