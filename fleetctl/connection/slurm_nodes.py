"""Slurm's view of its nodes, from ``sinfo``: a pure parser plus the query that feeds it.

One format serves the connection kind (which nodes are drained or down, and why; each node's GRES
for the allocation), facts (``slurm`` key) and the ``slurm:`` inventory source. The format string
(``sinfo -N -h -o``, see sinfo(1) "-o <output_format>") has been stable across Slurm releases,
unlike ``sinfo --json``, whose schema changes with each data_parser version; fields are separated
by ``|``, which no node name, partition, state, feature or GRES contains, and the free-text reason
(``%E``) comes last so that a ``|`` in it cannot shift the other fields.

``sinfo -N`` prints one line per node and partition; :func:`parse_sinfo` folds them into one
:class:`SlurmNode` per node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: ``sinfo -o`` fields: node, partition (``*`` marks the default), state (long form, a trailing
#: ``*`` when the node does not respond), CPUs, memory (MB = MiB in Slurm), available and active
#: features, GRES, address, reason time, reason user, reason (last: free text).
SINFO_FORMAT = "%N|%P|%T|%c|%m|%f|%b|%G|%o|%H|%u|%E"
_FIELDS = 12

#: Base states in which a node takes no new job: Slurm's own words (sinfo(1) "NODE STATE CODES").
UNAVAILABLE_STATES = frozenset({"down", "drained", "draining", "drain", "fail", "failing", "future",
                                "inval", "unknown", "powered_down", "powering_down", "power_down",
                                "reboot_issued", "reboot_requested", "not_responding", "no_respond"})
_FLAG_SUFFIX = re.compile(r"[*~#!%$@^-]+$")

_GRES_SOCKETS = re.compile(r"\(S:[^)]*\)")


def sinfo_argv(*, partition: str | None = None, nodes: str | None = None) -> list[str]:
    """The ``sinfo`` argv whose output :func:`parse_sinfo` reads.

    Args:
        partition: only this partition (``-p``).
        nodes: only these nodes, a Slurm hostlist (``-n n[1-3],gpu7``).
    """
    argv = ["sinfo", "-N", "-h", "-o", SINFO_FORMAT]
    if partition:
        argv += ["-p", partition]
    if nodes:
        argv += ["-n", nodes]
    return argv


def _words(text: str) -> tuple[str, ...]:
    if text in ("", "(null)", "N/A", "none"):
        return ()
    return tuple(w for w in text.split(",") if w)


def split_gres(text: str) -> tuple[str, ...]:
    """``"gpu:h200:8(S:0-1),nic:1"`` -> ``("gpu:h200:8", "nic:1")`` (socket bindings dropped)."""
    return _words(_GRES_SOCKETS.sub("", text))


def gres_type(gres: str) -> str | None:
    """The ``name_type`` of one GRES (``"gpu:h200:8"`` -> ``"gpu_h200"``); ``None`` when the GRES
    has no type (``"gpu:8"``)."""
    parts = gres.split(":")
    if len(parts) >= 3 or (len(parts) == 2 and not parts[1].isdigit()):
        return f"{parts[0]}_{parts[1]}"
    return None


def _int(text: str) -> int | None:
    text = text.strip().rstrip("+")
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class SlurmNode:
    """One node as Slurm sees it.

    Attributes:
        name: the node name (slurm.conf ``NodeName``, what ``-w`` takes).
        partitions: the partitions holding it, in sinfo's order.
        default_partition: the cluster's default partition when the node is in it, else ``None``.
        state: sinfo's long state (``"idle"``, ``"mixed"``, ``"drained"``, ``"down*"``...).
        cpus: CPUs Slurm schedules on the node.
        memory_mib: ``RealMemory`` in MiB (Slurm's MB are MiB).
        features: available features (``("sm_90", "h200")``); ``active_features`` those active now.
        gres: generic resources (``("gpu:h200:8",)``), socket bindings dropped.
        address: ``NodeAddr``.
        reason: why an administrator drained or downed it (``None`` without one);
            ``reason_user``/``reason_time`` who set it and when (sinfo's text).
    """

    name: str
    partitions: tuple[str, ...] = ()
    default_partition: str | None = None
    state: str = "unknown"
    cpus: int | None = None
    memory_mib: int | None = None
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    gres: tuple[str, ...] = ()
    address: str | None = None
    reason: str | None = None
    reason_user: str | None = None
    reason_time: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def base_state(self) -> str:
        """The state without flags: ``"drained"`` for ``"drained*"``, ``"idle"`` for ``"idle+cloud"``."""
        return self.states[0]

    @property
    def states(self) -> tuple[str, ...]:
        """Every part of a compound state, flag suffixes dropped (``"mixed+drain*"`` ->
        ``("mixed", "drain")``), lower case."""
        return tuple(_FLAG_SUFFIX.sub("", p).lower() for p in self.state.split("+")) or ("unknown",)

    @property
    def responding(self) -> bool:
        """False when sinfo marks the node ``*``: slurmctld has lost contact with its slurmd."""
        return not self.state.endswith("*")

    @property
    def unavailable(self) -> str | None:
        """Why no job can start on this node now, in one line with Slurm's reason (``None`` when
        one can): ``"drained: bad gpu: Xid 79 (by root, 2026-12-01T03:50:03)"``,
        ``"not responding (idle*)"``."""
        if any(s in UNAVAILABLE_STATES for s in self.states):
            text = f"{self.state}"
        elif not self.responding:
            text = f"not responding ({self.state})"
        else:
            return None
        if self.reason:
            who = ", ".join(x for x in (f"by {self.reason_user}" if self.reason_user else "", self.reason_time or "")
                            if x)
            text += f": {self.reason}" + (f" ({who})" if who else "")
        return f"Slurm node {self.name} is {text}"

    @property
    def completing(self) -> bool:
        """True while slurmctld waits for the node's slurmd to finish a job's cleanup (sinfo's
        ``completing``, scontrol's ``IDLE+COMPLETING``; sinfo(1) "NODE STATE CODES"): no new job
        starts there until it has. A node whose slurmd died under a job stays so until Slurm marks
        it not responding (``completing*``, after ``SlurmdTimeout``)."""
        return "completing" in self.states

    @property
    def idle(self) -> bool:
        """True when no job runs on the node (an allocation can start at once)."""
        return self.base_state == "idle" and self.responding

    def view(self) -> dict[str, Any]:
        """The ``slurm`` facts of the node (JSON-ready): ``node, state, reason, reason_user,
        reason_time, partitions, features, active_features, gres, cpus, memory_mib, address,
        available``."""
        return {
            "node": self.name, "state": self.state, "reason": self.reason, "reason_user": self.reason_user,
            "reason_time": self.reason_time, "partitions": list(self.partitions),
            "features": list(self.features), "active_features": list(self.active_features),
            "gres": list(self.gres), "cpus": self.cpus, "memory_mib": self.memory_mib, "address": self.address,
            "available": self.unavailable is None,
        }


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    """Parse ``sinfo`` output in :data:`SINFO_FORMAT` into one :class:`SlurmNode` per node.

    Lines that do not have the format's fields (a warning sinfo printed) are skipped. A node listed
    under several partitions is one node holding all of them, in order of appearance.

    Returns:
        node name -> node, in sinfo's order.
    """
    nodes: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        parts = line.split("|", _FIELDS - 1)
        if len(parts) != _FIELDS or not parts[0].strip():
            continue
        name, part, state, cpus, mem, feats, active, gres, addr, rtime, ruser, reason = (p.strip() for p in parts)
        default = part.endswith("*")
        part = part.rstrip("*")
        prev = nodes.get(name)
        if prev is not None:
            parts_ = prev.partitions + ((part,) if part and part not in prev.partitions else ())
            nodes[name] = SlurmNode(**{**prev.__dict__, "partitions": parts_,
                                       "default_partition": prev.default_partition or (part if default else None)})
            continue
        has_reason = reason not in ("", "none", "(null)", "N/A")
        nodes[name] = SlurmNode(
            name=name, partitions=(part,) if part else (), default_partition=part if default else None,
            state=state or "unknown", cpus=_int(cpus), memory_mib=_int(mem), features=_words(feats),
            active_features=_words(active), gres=split_gres(gres), address=addr or None,
            reason=reason if has_reason else None,
            reason_user=ruser if has_reason and ruser not in ("", "Unknown", "(null)") else None,
            reason_time=rtime if has_reason and rtime not in ("", "Unknown", "None") else None)
    return nodes


def hostlist(names: Iterable[str]) -> str:
    """Node names as one Slurm hostlist for ``-w``/``-n`` (``n[1-3],gpu07``): folded, so ten
    thousand nodes stay far below the kernel's 128 KiB limit for one argument."""
    from ClusterShell.NodeSet import NodeSet  # Slurm's hostlist syntax is ClusterShell's

    return str(NodeSet.fromlist(list(names))) if names else ""


def expand_hostlist(text: str) -> tuple[str, ...]:
    """A Slurm hostlist (``n[1-2],gpu07``, as scontrol prints ``NodeList``) -> its node names;
    empty for ``""`` and ``(null)``."""
    from ClusterShell.NodeSet import NodeSet  # Slurm's hostlist syntax is ClusterShell's

    text = text.strip()
    return tuple(str(n) for n in NodeSet(text)) if text and text != "(null)" else ()


async def query_nodes(client: "SlurmClient", names: Iterable[str] | None = None, *,
                      partition: str | None = None, timeout_s: float = 60.0) -> dict[str, SlurmNode]:
    """Ask ``sinfo`` (through ``client``) about ``names`` (all nodes when ``None``).

    Raises:
        SlurmError: sinfo could not run or failed (its message is kept).
    """
    names = list(names) if names is not None else None
    argv = sinfo_argv(partition=partition, nodes=hostlist(names) if names else None)
    result = await client.call(argv, timeout_s=timeout_s)
    return parse_sinfo(result.stdout_text)


def holdup(node: SlurmNode, completing_jobs: Sequence[str] = ()) -> str | None:
    """Why Slurm gives ``node`` to no new job now, in one line with Slurm's state, or ``None`` when
    it is only busy with other work (pure): the node's :attr:`SlurmNode.unavailable` line (drained,
    down, not responding...), or for a node still completing a job
    ``"Slurm node n2 is completing (COMPLETING: its slurmd has not finished job 7's cleanup)"``.

    Args:
        node: sinfo's view of the node.
        completing_jobs: the ids of the jobs squeue lists completing on it (``squeue -t CG -w``).
    """
    if node.unavailable:
        return node.unavailable
    if node.completing:
        jobs = ", ".join(completing_jobs)
        which = (f"job {jobs}'s" if len(completing_jobs) == 1 else f"jobs {jobs}'" if completing_jobs
                 else "a job's")
        return f"Slurm node {node.name} is {node.state} (COMPLETING: its slurmd has not finished {which} cleanup)"
    return None


async def query_holdups(client: "SlurmClient", names: Sequence[str], *, timeout_s: float = 30.0) -> dict[str, str]:
    """Ask ``sinfo`` (and, for a completing node, ``squeue -t CG``) why Slurm gives ``names`` to
    no new job: node -> its :func:`holdup` line, for the nodes that have one.

    Raises:
        SlurmError: sinfo could not run or failed.
    """
    known = await query_nodes(client, names, timeout_s=timeout_s)
    completing = [n for n in names if n in known and known[n].completing and not known[n].unavailable]
    jobs: dict[str, list[str]] = {}
    if completing:  # one squeue for all of them: job id and its nodes (a hostlist such as n[1-2])
        res = await client.call(["squeue", "-h", "-t", "CG", "-w", hostlist(completing), "-o", "%i %N"],
                                timeout_s=timeout_s, check=False)
        for row in (res.stdout_text.splitlines() if res.rc == 0 else []):
            job, _, nodes = row.strip().partition(" ")
            for node in expand_hostlist(nodes):
                jobs.setdefault(node, []).append(job)
    lines = {n: holdup(known[n], tuple(jobs.get(n, ()))) for n in names if n in known}
    return {n: line for n, line in lines.items() if line}


def missing_nodes(names: Iterable[str], known: Mapping[str, SlurmNode]) -> list[str]:
    """The names Slurm does not know (sinfo listed nothing for them)."""
    return [n for n in names if n not in known]


from .slurm_client import SlurmClient  # noqa: E402  (for the annotation above; no cycle)
