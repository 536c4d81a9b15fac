"""Install targets: two inventory hosts that build or install into one folder (a venv or a workdir
on a shared file system: an NFS home, one venv for a rack) are found before anything is built.

Each host's facts carry an id per folder (``facts["targets"]``, a random id the facts script keeps
in ``<folder>/.fleetctl-id``: the same file read on two machines is the same folder, which inode
numbers cannot tell across NFS clients). Planners claim their folders with a
:class:`~fleetctl.tasks.steps.TargetClaim`; the answer names every other host of the run that
claimed the same id. It works like the arch classes (:mod:`fleetctl.engine.classes`): answers given
while the batch is still planning are provisional, and :meth:`InstallTargets.changed` (called when
the batch's classes are settled) names the hosts whose answer changed, so that they are planned
again. A host of a later batch (``--serial``) or one that connected late sees the claims of those
before it, so ``--plan``, ``--dry-run`` and a deploy agree.

The hosts sharing a folder are refused, not installed one after the other: one venv holds one
wheel, so each host's install would replace the others' (only the last host's SM would be left),
and two builds in one workdir overwrite each other's files. A lock does not help: the later
install still replaces the earlier one (docs/reliability.md, "Install targets").
"""

from __future__ import annotations

from collections.abc import Mapping

#: ``(kind, real path, other hosts)``: one shared folder of a host.
Shared = tuple[str, str, tuple[str, ...]]


class InstallTargets:
    """The claims of one run.

    Args:
        order: host -> its place in inventory order (other hosts are named in that order).
    """

    def __init__(self, order: Mapping[str, int]) -> None:
        self.order = order
        self.claims: dict[str, dict[str, tuple[str, str]]] = {}
        self.answered: dict[str, tuple[Shared, ...]] = {}

    def _answer(self, host: str) -> tuple[Shared, ...]:
        out = []
        for kind, (ident, path) in sorted(self.claims.get(host, {}).items()):
            others = sorted((h for h, ids in self.claims.items() if h != host
                             and any(i == ident for i, _ in ids.values())),
                            key=lambda h: self.order.get(h, 1 << 30))
            if others:
                out.append((kind, path, tuple(others)))
        return tuple(out)

    def claim(self, host: str, ids: Mapping[str, tuple[str, str]]) -> tuple[Shared, ...]:
        """Record that ``host`` builds or installs in the folders ``ids`` (kind -> ``(id, real
        path)``, e.g. ``{"venv": ("9f1c...", "/nfs/rack1/venv")}``) and return the ones another
        host of the run claimed too (empty: none)."""
        mine = self.claims.setdefault(host, {})
        mine.update({k: (str(i), str(p)) for k, (i, p) in ids.items() if i})
        self.answered[host] = self._answer(host)
        return self.answered[host]

    def changed(self, hosts: list[str]) -> set[str]:
        """The hosts of ``hosts`` whose answer differs now that every claim of them is in."""
        return {h for h in hosts if h in self.answered and self._answer(h) != self.answered[h]}

