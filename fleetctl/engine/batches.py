"""Rolling batches, Ansible's ``serial`` and ``max_fail_percentage``: which hosts go together,
and when a batch's failures stop the batches after it. Pure: host lists in, host lists and a
reason out (the runner, :mod:`fleetctl.engine.runner`, applies them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: A host's outcome statuses that count as failed for ``max_fail_percentage`` and ``failed_hosts``.
FAILED_STATES = ("failed", "unreachable", "not started", "interrupted")


def batches(hosts: Sequence[Any], serial: Sequence[int | str]) -> list[list[Any]]:
    """Split hosts into rolling batches, Ansible's ``serial``: sizes as ints or ``"10%"`` of all
    hosts (at least 1); the last size repeats until every host is in a batch. Empty: one batch."""
    if not serial:
        return [list(hosts)] if hosts else []
    sizes = []
    for item in serial:
        text = str(item).strip()
        size = int(len(hosts) * float(text[:-1]) / 100) if text.endswith("%") else int(text)
        sizes.append(max(1, size))
    out, i, k = [], 0, 0
    while i < len(hosts):
        size = sizes[min(k, len(sizes) - 1)]
        out.append(list(hosts[i:i + size]))
        i += size
        k += 1
    return out


def stop_reason(batch_no: int, plan: Sequence[Sequence[Any]], bad: int, max_fail: float | None) -> str | None:
    """Why the batches after batch ``batch_no`` (0-based) of ``plan`` are not started, or None.

    Ansible's ``max_fail_percentage``: more than that percentage of the batch's hosts failed
    (``bad`` of them; see :data:`FAILED_STATES`); without it, every host of the batch failed. The
    last batch never stops anything."""
    size = len(plan[batch_no])
    exceeded = bad * 100.0 / size > max_fail if max_fail is not None else bad == size
    if batch_no + 1 >= len(plan) or not exceeded:
        return None
    limit = f"more than max_fail_percentage {max_fail:g}%" if max_fail is not None else "every host"
    return (f"batch {batch_no + 1} of {len(plan)}: {bad} of {size} hosts failed ({limit}); "
            f"{sum(len(b) for b in plan[batch_no + 1:])} hosts not started")
