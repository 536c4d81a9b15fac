"""What a task's ``register`` stores, and which registered names a task's arguments read
(:mod:`fleetctl.engine.host`'s passes): a command's real result, Ansible's skipped result, or,
for a command only simulated while planning, :mod:`fleetctl.playbook.unknown`'s values."""

from __future__ import annotations

from typing import Any

from ..playbook import unknown
from ..status import Status
from ..tasks.base import TaskResult

#: The message of a task skipped by its ``when``.
CONDITION_FALSE = "condition false"


def registered_value(name: str, result: TaskResult, simulated: bool, *, planning: bool) -> dict[str, Any]:
    """What ``register: name`` stores for ``result``: its command's real result
    (:meth:`TaskResult.as_registered`). When the command was only simulated, every field a run
    decides (``rc``, ``stdout``, ``failed``...) is not known: while planning (``planning``) it is
    :class:`unknown.Unknown` (the plan says "unknown until applied"); in a deploy (a task left out
    by ``--tags``, never run) it is absent, as in Ansible, so ``| default(...)`` applies and a bare
    use fails naming it. ``data`` (what the planner computed: ``build.data.wheel``) stays. Skipped
    by its ``when``: Ansible's skipped result (``skipped: true``, ``changed``/``failed`` false,
    ``skip_reason``; no ``rc``/``stdout``/``stderr``, so ``| default(...)`` applies)."""
    known = result.as_registered()
    if result.status is Status.SKIPPED and result.msg == CONDITION_FALSE:
        return {**{k: v for k, v in known.items() if k not in ("rc", "stdout", "stderr")},
                "skip_reason": "Conditional result was False"}
    if not simulated:
        return known
    if planning:
        return unknown.unknown_result(name, known)
    return {k: v for k, v in known.items() if k not in unknown.DECIDED}


def names_unapplied(task: Any, unapplied: dict[str, str]) -> str | None:
    """The first register name in ``unapplied`` that ``task``'s arguments use in a template."""
    if not unapplied:
        return None
    import json
    import re

    text = json.dumps(task.raw_args, default=str)
    for name in unapplied:
        if re.search(r"\{[{%][^}]*\b" + re.escape(name) + r"\b", text):
            return name
    return None
