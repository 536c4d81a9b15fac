"""Install targets: two inventory hosts that build or install into one folder (a venv or a workdir
on a shared file system: an NFS home, one venv for a rack) are found before anything is built.

Each host's facts carry an id per folder (``facts["targets"]``, a random id the facts script keeps
in ``<folder>/.fleetctl-id``: the same file read on two machines is the same folder, which inode
numbers cannot tell across NFS clients) and its local id (boot id, device, inode: read, never
written), which tells one folder on one kernel whether or not an earlier run wrote the id file, so
that two identical plans agree (a plan's own id file does not change the next one's answer). Planners claim their folders with a
:class:`~fleetctl.tasks.steps.TargetClaim`; the answer names every other host of the run that
claimed the same id. It works like the arch classes (:mod:`fleetctl.engine.classes`): answers given
while the batch is still planning are provisional, and :meth:`InstallTargets.changed` (called when
the batch's classes are settled) names the hosts whose answer changed, so that they are planned
again. A host of a later batch (``--serial``), of a later group of a batch larger than ``forks``
(:mod:`fleetctl.engine.runner`) or one that connected late sees the claims of those before it
(the later host is the one refused), so ``--plan``, ``--dry-run`` and a deploy agree.

A folder copied with its id file (``cp -a ~/venv ~/venv-copy``, rsync, a disk image) is not the
folder it was copied from: the facts script gives the copy a fresh id when the file says it was
written for another inode on this boot, and two claims whose local ids are of one boot and two
inodes are never one folder here (:func:`_apart`; operator trial: ``a and a2 share the venv``
for ``~/venv`` and its copy). Across machines and boots only the id file tells (an NFS folder's
device number differs between clients and mounts), so there one id stays one folder.

The hosts sharing a folder one of them writes (an install's venv, a build's workdir; builds that
only read one venv are fine) are refused, not installed one after the other: one venv holds one
wheel, so each host's install would replace the others' (only the last host's SM would be left),
and two builds in one workdir overwrite each other's files. A lock does not help: the later
install still replaces the earlier one. Hosts of one arch list build one wheel and lose no SM,
but one run would install it into the venv once per host, at once (pip takes no lock): refused
too, in words of their own (:func:`fleetctl.tasks.install_target.shared_message`). ``fleetctl
facts`` applies the rule to the hosts it gathered (:func:`shared_in_facts`). Hosts of different runs are kept apart by the record of
the last install in the venv (``pip_install``, :func:`fleetctl.tasks.install_target.dropped_by`).
README ("Where fleetctl keeps things") says why this refuses rather than builds once for the
union of the hosts' SMs; docs/reliability.md lists the cases and their tests.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..build.archs import parse_arch_list

#: ``(kind, real path, every host claiming it in inventory order, the union of their arch lists
#: such as "9.0a;12.0a" ("" when one is unknown), whether they all build for one arch list)``:
#: one shared folder. Hosts of one arch list build one wheel: installing it over each other
#: takes no SM away, but their installs into one venv still run at once
#: (:func:`fleetctl.tasks.install_target.shared_message` words each case).
Shared = tuple[str, str, tuple[str, ...], str, bool]


def _apart(keys: frozenset[str], others: frozenset[str]) -> bool:
    """Two folders' keys that meet only by an id file copied from one into the other: their local
    ids (``local:<boot id>:<dev>:<inode>``) are of one boot and name two inodes (one kernel sees one
    folder as one inode, bind mounts included). The facts script gives such a copy a fresh id
    (``copied_from`` in playbooks/scripts/facts.py) once its id file says where it was written;
    this also parts the copy of an id file an older fleetctl wrote (no such line), within a run."""
    mine = [k.split(":") for k in keys if k.startswith("local:")]
    theirs = [k.split(":") for k in others if k.startswith("local:")]
    return any(len(a) == 4 == len(b) and a[1] == b[1] and a[3] != b[3] for a in mine for b in theirs)


class InstallTargets:
    """The claims of one run.

    Args:
        order: host -> its place in inventory order (other hosts are named in that order).
    """

    def __init__(self, order: Mapping[str, int]) -> None:
        self.order = order
        #: host -> kind -> (the folder's keys, its real path); two folders with a key in common are one
        self.claims: dict[str, dict[str, tuple[frozenset[str], str]]] = {}
        self.archs: dict[str, str] = {}
        #: host -> the keys of the folders it writes (a build's workdir, an install's venv)
        self.writes: dict[str, set[str]] = {}
        #: every answer each host was given while planning (one task's may differ from another's)
        self.answered: dict[str, set[tuple[Shared, ...]]] = {}
        #: the answers settled with the batch's classes; a deploy applies these
        self.settled: dict[str, tuple[Shared, ...]] = {}
        #: folder id -> the hosts that claimed it (an index: an answer looks up the hosts sharing
        #: its folders, not every claim of the run, which was O(hosts) a claim, O(hosts²) a run)
        self._by_id: dict[str, dict[str, None]] = {}

    def _answer(self, host: str) -> tuple[Shared, ...]:
        out = []
        for kind, (keys, path) in sorted(self.claims.get(host, {}).items()):
            near = {h for k in keys for h in self._by_id.get(k, ())}
            sharing = sorted((h for h in near if any(keys & ks and not _apart(keys, ks)
                                                     for ks, _ in self.claims.get(h, {}).values())),
                             key=lambda h: self.order.get(h, 1 << 30))
            # only a folder one of them writes is a problem: builds may all read one venv
            if len(sharing) > 1 and any(keys & self.writes.get(h, set()) for h in sharing):
                out.append((kind, path, tuple(sharing), self._union(sharing), self._one_class(sharing)))
        return tuple(out)

    def _one_class(self, hosts: list[str]) -> bool:
        """Whether every one of ``hosts`` builds for one arch list (known for each): ``9.0a;12.0a``
        and ``12.0a;9.0a`` are one."""
        try:
            lists = {tuple(sorted(parse_arch_list(self.archs[h]))) for h in hosts}
        except (KeyError, ValueError):
            return False
        return len(lists) == 1

    def _union(self, hosts: list[str]) -> str:
        try:
            return ";".join(parse_arch_list(";".join(self.archs[h] for h in hosts)))
        except (KeyError, ValueError):
            return ""

    def claim(self, host: str, ids: Mapping[str, tuple[str, str]], archs: str | None = None,
              writes: tuple[str, ...] = ()) -> tuple[Shared, ...]:
        """Record that ``host`` builds or installs in the folders ``ids`` (kind -> ``(keys, real
        path)``, the keys space-separated (:func:`fleetctl.tasks.install_target.target_ids`), e.g.
        ``{"venv": ("9f1c... local:<boot id>:64769:1234", "/nfs/rack1/venv")}``), of which it writes the kinds
        ``writes``, building for ``archs`` (``"9.0a"``); return the folders another host of the
        run claimed too, when one of those hosts writes them (empty: none)."""
        if host in self.settled:  # the batch's answer, as its arch classes are
            return self.settled[host]
        if archs:
            self.archs[host] = archs
        mine = self.claims.setdefault(host, {})
        mine.update({k: (frozenset(str(i).split()), str(p)) for k, (i, p) in ids.items() if i})
        for keys, _ in mine.values():
            for key in keys:
                self._by_id.setdefault(key, {})[host] = None
        self.writes.setdefault(host, set()).update(key for k in writes if k in ids and ids[k][0]
                                                   for key in str(ids[k][0]).split())
        answer = self._answer(host)
        self.answered.setdefault(host, set()).add(answer)
        return answer

    def changed(self, hosts: list[str]) -> set[str]:
        """The hosts of ``hosts`` whose answer differs now that every claim of them is in; their
        answers are settled from here on (a host that connects later does not change them)."""
        out = set()
        for h in hosts:
            if h in self.answered and h not in self.settled:
                self.settled[h] = self._answer(h)
                if self.answered[h] != {self.settled[h]}:
                    out.add(h)
        return out

    def refused(self, hosts: list[str]) -> set[str]:
        """The hosts of ``hosts`` that share a folder with another host of the run (their planners
        refuse them, so they take no part in an arch class)."""
        return {h for h in hosts if self._answer(h)}


def shared_in_facts(facts: Mapping[str, Mapping[str, object]]) -> dict[str, tuple[Shared, ...]]:
    """The venvs hosts share, from gathered facts alone (``fleetctl facts``: host -> its facts, in
    inventory order), by the rule a deploy's planners apply (:class:`InstallTargets`): each host
    claims its venv (``targets.venv``, :func:`fleetctl.tasks.install_target.target_ids`) as one the
    main playbook's install writes, building for its facts' arch list. Returns host -> the shared
    venv's answer, for each host that shares one (a deploy refuses those hosts while planning with
    :func:`~fleetctl.tasks.install_target.shared_message`'s line)."""
    from ..tasks.install_target import target_ids

    targets = InstallTargets({h: i for i, h in enumerate(facts)})
    for host, f in facts.items():
        ids = target_ids(f, ("venv",))
        if ids:
            targets.claim(host, ids, (f.get("build") or {}).get("torch_cuda_arch_list"), ("venv",))  # type: ignore[union-attr]
    return {h: answer for h in facts if (answer := targets._answer(h))}
