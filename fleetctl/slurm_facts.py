"""Facts of hosts reached through Slurm: the host's own facts plus Slurm's view of the node.

The host's own facts come from the same script as over SSH (``playbooks/scripts/facts.py``), run
as a job step; the script reaches every node with **one** ``sbcast`` per allocation instead of one
upload per host. Slurm's view (:func:`slurm_view`, from ``sinfo``: state, reason, partitions,
features, GRES, CPUs, memory) is added under the ``slurm`` key, for reachable and unreachable hosts
alike, so ``fleetctl facts`` shows why a drained node was skipped and who drained it.

Slurm's view is read from ``sinfo`` (:mod:`fleetctl.connection.slurm_nodes`) rather than
``scontrol show node -o``: scontrol's one-line form separates fields by spaces while its ``Reason``
holds free text with spaces, so it cannot be split reliably; sinfo's format puts the reason last.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .build import DEFAULT_FALLBACK_ARCHS, build_plan
from .connection.registry import HostRef
from .connection.slurm import SlurmConnection, SlurmScope, SlurmSettings
from .connection.slurm_client import SlurmClient
from .connection.slurm_nodes import SlurmNode, query_nodes
from .errors import FleetError
from .facts import FACTS_SCRIPT, facts_argv, parse_facts_output, remote_workdir
from .scripts import script_path


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
    from .connection.slurm_client import parse_launcher

    known = await query_nodes(SlurmClient(parse_launcher(launcher)), list(nodes), timeout_s=timeout_s)
    return {name: node.view() for name, node in known.items()}


@dataclass(frozen=True)
class FactsTarget:
    """One host whose facts to gather, with the host vars the facts script reads.

    Attributes:
        host: the host (its settings are :class:`SlurmSettings`).
        workdir: remote working folder (``~``, relative to home, or absolute); the script goes there.
        venv, cuda_home: the host's ``venv`` and ``cuda_home`` vars.
        max_jobs: a fixed build job count (host var), else derived from CPUs and memory.
        python: the interpreter that runs the script on the node.
    """

    host: HostRef
    workdir: str = "~"
    venv: str | None = None
    cuda_home: str | None = None
    max_jobs: int | None = None
    python: str = "python3"


async def gather_facts_slurm(scope: SlurmScope, targets: Sequence[FactsTarget], *,
                             fallback_archs: str | Sequence[str] = DEFAULT_FALLBACK_ARCHS,
                             timeout_s: float = 120.0) -> dict[str, dict[str, Any]]:
    """Gather the facts of every target: prepare (allocate) them, send the facts script with one
    sbcast per allocation and folder, run it as a step on each node at once, add ``build`` and
    ``slurm``.

    Returns:
        host name -> facts (``reachable: True`` plus the script's keys, ``build`` and ``slurm``),
        or :func:`unreachable_facts` naming why (drained node with Slurm's reason, allocation not
        granted, upload or script failure). One host's failure never affects another's.
    """
    refs = [t.host for t in targets]
    errors = await scope.prepare(refs)
    out: dict[str, dict[str, Any]] = {}
    ready: list[tuple[FactsTarget, str]] = []
    for t in targets:
        member = scope.members[t.host.name]
        if t.host.name in errors:
            out[t.host.name] = unreachable_facts(errors[t.host.name], member.info)
            continue
        script = posixpath.join(remote_workdir(t.workdir, member.home), FACTS_SCRIPT)
        ready.append((t, script))
    by_script: dict[str, list[str]] = {}
    for t, script in ready:
        by_script.setdefault(script, []).append(t.host.name)
    local = str(script_path(FACTS_SCRIPT))
    sent: dict[str, str | None] = {}
    for script, names in by_script.items():
        sent.update(await scope.broadcast(local, script, names, mode=0o644, timeout_s=timeout_s))

    async def one(t: FactsTarget, script: str) -> None:
        name = t.host.name
        conn = scope.connection(t.host)
        node = scope.members[name].info
        if sent.get(name) is not None:
            out[name] = unreachable_facts(str(sent[name]), node)
            return
        try:
            await conn.open()
            argv = facts_argv(t.python, script, workdir=posixpath.dirname(script), venv=t.venv,
                              cuda_home=t.cuda_home)
            result = await conn.run(argv, timeout_s=timeout_s)
            facts = parse_facts_output(name, result.rc, result.stdout_text, result.stderr_text)
            try:
                facts["build"] = build_plan(facts, fallback_archs=fallback_archs, max_jobs=t.max_jobs)
            except ValueError as exc:
                raise FleetError(f"{name}: cannot plan the build: {exc}") from None
            facts["reachable"] = True
            out[name] = add_slurm_view(facts, node)
        except FleetError as exc:
            out[name] = unreachable_facts(str(exc), node)
        finally:
            await conn.close()

    await asyncio.gather(*(one(t, script) for t, script in ready))
    return {t.host.name: out[t.host.name] for t in targets}


def connection_view(conn: SlurmConnection) -> dict[str, Any] | None:
    """Slurm's view of a connection's node (for an engine that gathers facts per connection)."""
    return slurm_view(conn.slurm_node)


__all__ = ["FactsTarget", "SlurmSettings", "add_slurm_view", "connection_view", "fetch_slurm_view",
           "gather_facts_slurm", "slurm_view", "unreachable_facts"]
