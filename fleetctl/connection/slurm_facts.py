"""Slurm's view of nodes as facts: state, reason, partitions, features, GRES, CPUs, memory.

A host reached through Slurm gets its own facts from the same script as over SSH (run as a job
step), plus Slurm's view under the ``slurm`` key (``SlurmConnection.extra_facts``), for reachable
and unreachable hosts alike, so ``fleetctl facts`` shows why a drained node was skipped and who
drained it.

Slurm's view is read from ``sinfo`` (:mod:`fleetctl.connection.slurm_nodes`) rather than
``scontrol show node -o``: scontrol's one-line form separates fields by spaces while its ``Reason``
holds free text with spaces, so it cannot be split reliably; sinfo's format puts the reason last.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .slurm_client import SlurmClient
from .slurm_nodes import SlurmNode, query_nodes


def slurm_view(node: SlurmNode | None) -> dict[str, Any] | None:
    """The ``slurm`` facts of a node (see :meth:`SlurmNode.view`); ``None`` when Slurm does not know it."""
    return node.view() if node is not None else None


def add_slurm_view(facts: dict[str, Any], node: SlurmNode | None) -> dict[str, Any]:
    """``facts`` with ``facts["slurm"]`` set to Slurm's view of ``node`` (the same dict, returned)."""
    facts["slurm"] = slurm_view(node)
    return facts


def unreachable_facts(cause: str, node: SlurmNode | None = None) -> dict[str, Any]:
    """The facts of a host that could not be reached: ``reachable: false``, the ``error`` (for a
    drained node, Slurm's reason) and Slurm's view."""
    return {"reachable": False, "error": cause, "slurm": slurm_view(node)}


async def fetch_slurm_view(launcher: str | Sequence[str] | None, nodes: Iterable[str], *,
                           timeout_s: float = 60.0) -> dict[str, dict[str, Any]]:
    """Ask ``sinfo`` (through ``launcher``) about ``nodes``; node name -> Slurm's view.

    Raises:
        SlurmError: sinfo could not run or failed.
    """
    from .slurm_client import parse_launcher

    known = await query_nodes(SlurmClient(parse_launcher(launcher)), list(nodes), timeout_s=timeout_s)
    return {name: node.view() for name, node in known.items()}


__all__ = ["add_slurm_view", "fetch_slurm_view", "slurm_view", "unreachable_facts"]
