"""``fleetctl run -b``: hosts with identical output shown once, and every run's summary line.

As ClusterShell's ``clush -b`` (gather) with ``-B`` (stderr gathered too): hosts whose output and
exit status are the same form one block under their folded node set
(:func:`fleetctl.inventory.nodeset.fold_hosts`, ClusterShell's own folding), each different output
its own block. Unreachable hosts have no output: they are left to the failure lines and the summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Block:
    """One gathered output.

    Attributes:
        nodes: the hosts' folded node set (``gpu[01-03,07]``).
        count: how many hosts.
        rc: their exit status (``None``: killed by a signal or timed out).
        text: what they printed: stdout, then stderr (as clush ``-B`` keeps them), redacted.
        cut: the output was longer than what ``fleetctl run`` keeps in memory (its last bytes,
            :data:`fleetctl.engine.adhoc.RUN_CAPTURE_BYTES` per stream): ``text`` is the end of
            it; each host's log has every byte.
    """

    nodes: str
    count: int
    rc: int | None
    text: str
    cut: bool = False


def gather(hosts: Mapping[str, Any], outputs: Mapping[str, tuple[str, str]], redact=lambda s: s) -> list[Block]:
    """Group the reached hosts by ``(stdout, stderr, rc)``.

    Args:
        hosts: host -> outcome (``status``, ``rc``), as :class:`fleetctl.engine.model.RunModel` keeps them.
        outputs: host -> ``(stdout, stderr)`` as :func:`fleetctl.engine.adhoc.run_on_hosts` returns.
        redact: applied to each block's text (the run's secrets).

    Returns:
        The blocks, most hosts first, then by node set (a stable order for diffs and tests).
    """
    from ..inventory.nodeset import fold_hosts

    groups: dict[tuple[str, str, int | None, bool], list[str]] = {}
    for name, out in hosts.items():
        if getattr(out, "status", None) == "unreachable":
            continue
        stdout, stderr = outputs.get(name, ("", ""))
        cut = bool(getattr(out, "output_truncated", None))
        groups.setdefault((stdout, stderr, getattr(out, "rc", None), cut), []).append(name)
    blocks = [Block(fold_hosts(names), len(names), rc, redact(_join(stdout, stderr)), cut)
              for (stdout, stderr, rc, cut), names in groups.items()]
    return sorted(blocks, key=lambda b: (-b.count, b.nodes))


def _join(stdout: str, stderr: str) -> str:
    if stdout and not stdout.endswith("\n"):
        stdout += "\n"
    return stdout + stderr


def render_blocks(blocks: list[Block]) -> str:
    """clush's block layout: a rule, ``NODESET (N)`` (and ``rc=N`` when not 0), a rule, the output."""
    parts = []
    for b in blocks:
        head = (f"{b.nodes} ({b.count})" + ("" if b.rc == 0 else f" rc={b.rc if b.rc is not None else 'none'}")
                + (" (the end of the output: fleetctl logs RUN HOST has every byte)" if b.cut else ""))
        rule = "-" * max(15, min(len(head), 79))
        text = b.text if not b.text or b.text.endswith("\n") else b.text + "\n"
        parts.append(f"{rule}\n{head}\n{rule}\n{text}")
    return "".join(parts)


def summary_line(hosts: Mapping[str, Any], record_cut: str | None = None) -> str:
    """``ok N, failed N, unreachable N``, then ``not started N`` and ``interrupted N`` when any,
    over the hosts' outcomes (every host counts once, by its status as run.json holds it: a host
    whose log the record could not keep is ``failed``, :meth:`fleetctl.reporting.recordcut.
    RecordCut.settle`). A run whose record was cut (``record_cut``, the run's ``record_cut``) says
    so at the end, after ``; ``: ``run record incomplete: 2 host logs cut`` (``run record
    incomplete`` when no host's log was cut: events were lost), so that the counts never read as
    a whole run (operator trial: ``ok 2, failed 0, unreachable 0`` above the error line, exit 1)."""
    counts = {"ok": 0, "failed": 0, "unreachable": 0, "not started": 0, "interrupted": 0}
    cut = 0
    for out in hosts.values():
        status = getattr(out, "status", None)
        counts[status if status in counts else "failed"] += 1
        cut += bool(getattr(out, "log_cut", None))
    line = ", ".join(f"{k} {v}" for k, v in counts.items() if v or k in ("ok", "failed", "unreachable"))
    if record_cut or cut:
        line += "; run record incomplete" + (f": {cut} host log{'s' if cut != 1 else ''} cut" if cut else "")
    return line
