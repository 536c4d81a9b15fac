"""Install targets as planners see them: the folders a host builds or installs in, by their id.

Pure helpers for :class:`~fleetctl.tasks.steps.TargetClaim` (the engine's side is
:mod:`fleetctl.engine.targets`, which says why hosts sharing a folder are refused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..build.archs import parse_arch_list
from ..facts.workdir import workdir_of

#: ``(kind, real path, every host claiming it in inventory order, the union of their arch lists,
#: whether they all build for one arch list)`` (:data:`fleetctl.engine.targets.Shared`; a
#: recorded answer of four items is taken as of several arch lists).
Shared = tuple  # tuple[str, str, tuple[str, ...], str, bool], or its first four


def shared_message(host: str, shared: tuple[Shared, ...]) -> str:
    """One line for a host whose folders other hosts share, e.g. ``gpu01 and gpu02 share the venv
    /nfs/v (one /nfs/v/.fleetctl-id): one venv holds one wheel, ...``. The same line for every
    host sharing the folders (reporters say it once, under their node set); more than two hosts
    are named as a ClusterShell node set (``m[001-120] share the venv ...``,
    :func:`fleetctl.inventory.nodeset.fold_hosts`), never one name after another. A workdir is
    named as the host var gives it, never by the run folder its id was read in
    (``<workdir>/runs/<run_id>``, :func:`fleetctl.facts.workdir.workdir_of`; operator trial: the fix
    offered ``/tmp/wd/runs/<run_id>/h1`` as h1's own workdir)."""
    from ..inventory.nodeset import fold_hosts

    parts, fixes = [], []
    for kind, path, hosts, *_ in shared:
        names = f"{hosts[0]} and {hosts[1]}" if len(hosts) == 2 else fold_hosts(hosts)
        # a deploy's workdir id is its run folder's, <workdir>/runs/<run_id>: named by its workdir
        folder = workdir_of(path) if kind == "workdir" else path
        one = f"one {path.rstrip('/')}/.fleetctl-id" if folder == path else f"one run folder {folder}/runs/<run_id>"
        parts.append(f"{names} share the {kind} {folder} ({one})")
    kinds = {s[0] for s in shared}
    venv = next((s for s in shared if s[0] == "venv"), None)
    if venv is not None and len(venv) > 4 and venv[4]:
        # one arch list: one wheel, so no SM is lost; but their installs would run at once into one
        # venv (pip takes no lock: each removes and writes the other's files under its import)
        fixes.append(f"all build for {venv[3]}, so one install serves them all, but each host's deploy would "
                     "install it into that venv at the same time as the others' (pip does not lock a venv, so "
                     "the installs would overwrite each other's files): give each host its own venv, or deploy "
                     f"once to one of them (--hosts {venv[2][0]})")
    elif venv is not None:
        union = f" -e archs='{venv[3]}'" if venv[3] else " -e archs=... (every SM of theirs)"
        fixes.append("one venv holds one wheel, so each host's install would replace the others' SM: give each host "
                     f"its own venv, or deploy once to one of them for all their GPUs (--hosts {venv[2][0]}{union})")
    work = next((s for s in shared if s[0] == "workdir"), None)
    if work is not None:
        # inventory values are not templated: name a folder per host, as host_vars would set it
        per_host = ", ".join(f"{h}: {workdir_of(work[1]).rstrip('/')}/{h}" for h in work[2][:2])
        fixes.append("their builds would overwrite each other's files: give each host its own workdir "
                     f"(the host var workdir, set per host in host_vars/, e.g. {per_host})")
    return "; ".join(parts) + ": " + "; ".join(fixes)


def target_ids(facts: Mapping[str, object], kinds: tuple[str, ...] = ("venv", "workdir")) -> dict[str, tuple[str, str]]:
    """``{kind: (ids, real path)}`` from ``facts["targets"]`` for the kinds that have an id:
    ``ids`` the folder's keys, space-separated: the random id of its ``.fleetctl-id`` (when one
    exists) and its local id ``local:<boot id>:<dev>:<inode>`` (facts' ``local``, read without
    writing anything). Two hosts whose keys meet share the folder
    (:class:`fleetctl.engine.targets.InstallTargets`): on one kernel the local id tells so
    whether or not an earlier run wrote the id file, so two identical plans agree."""
    targets = facts.get("targets") or {}
    out = {}
    for kind in kinds:
        t = targets.get(kind) if isinstance(targets, Mapping) else None
        if not isinstance(t, Mapping) or not t.get("path"):
            continue
        keys = [str(t["id"])] if t.get("id") else []
        if t.get("local"):
            keys.append(f"local:{t['local']}")
        if keys:
            out[kind] = (" ".join(keys), str(t["path"]))
    return out


def unreadable_target(facts: Mapping[str, object], kinds: tuple[str, ...] = ("venv", "workdir")) -> str | None:
    """Why a host must not build or install at all (one line), or ``None``: the id file of one of
    its folders ``kinds`` exists but its login user cannot read it (the facts script's
    ``targets.<kind>.unreadable``, e.g. ``/nfs/v/.fleetctl-id exists but user bob cannot read it
    (Permission denied): is /nfs/v shared with another user or host? ...``). Without the id no run
    can tell whether another host shares the folder, so taking it as "no id" would let two hosts
    install into one venv at once (each replacing the other's SM): refused instead."""
    targets = facts.get("targets") or {}
    for kind in kinds:
        t = targets.get(kind) if isinstance(targets, Mapping) else None
        if isinstance(t, Mapping) and t.get("unreadable"):
            return f"the {kind}'s id: {t.get('error') or 'exists but cannot be read'}"
    return None


#: The record of fleetctl's last install into a venv (``{host, archs, wheel, dist, sha256, record_sha256,
#: inputs}``: ``inputs`` the wheel's build inputs, which a second name's build plan compares), which facts read.
INSTALL_RECORD = ".fleetctl-install.json"


def dropped_by(host: str, venv: str, facts: Mapping[str, object], archs: str | None) -> str | None:
    """Why installing a wheel for ``archs`` (``"10.0a"``) into ``venv`` must not happen (one
    line), or ``None``: the venv holds another inventory host's install (a run of its own, another
    controller: one run refuses hosts sharing a venv itself) whose archs the new wheel lacks, so
    the install would take that host's SM away. A record the facts script says was written for
    another folder (``targets.venv.installed_copied``: it came with a copy of the venv, ``cp -a``,
    rsync, a disk image) names a host whose install is elsewhere and never counts (operator trial:
    ``~/venv-copy holds a's install``, a's install being in ``~/venv``)."""
    targets = facts.get("targets") or {}
    venv_facts = (targets.get("venv") or {}) if isinstance(targets, Mapping) else {}
    rec = venv_facts.get("installed") or {}
    if not isinstance(rec, Mapping) or not archs or not rec.get("host") or rec.get("host") == host:
        return None
    if venv_facts.get("installed_copied"):  # a record copied with the venv: its host installed elsewhere
        return None
    old, new = _archs(rec.get("archs")), _archs(archs)
    lost = [a for a in old if a not in new]
    if not lost:
        return None
    try:
        union = ";".join(parse_arch_list(old + new))
    except ValueError:  # a +PTX token: keep them as written
        union = ";".join(dict.fromkeys(old + new))
    return (f"{venv} holds {rec['host']}'s install for {';'.join(old)} ({rec.get('wheel') or 'its wheel'}): this "
            f"wheel for {';'.join(new)} would take {';'.join(lost)} away from {rec['host']}, which shares the venv; "
            f"deploy once for all their GPUs (--hosts {host} -e archs='{union}'), or give each host its own venv")


def _archs(value: object) -> list[str]:
    text = ";".join(value) if isinstance(value, (list, tuple)) else str(value or "")
    return [a for a in (x.strip() for x in text.replace(",", ";").replace(" ", ";").split(";")) if a]


def record_folder(facts: Mapping[str, object]) -> dict[str, str]:
    """What the install record (:data:`INSTALL_RECORD`) keeps of the venv it is written into:
    ``{"id": its .fleetctl-id, "local": "<boot id>:<dev>:<inode>"}`` from facts'
    ``targets.venv`` (only those known), so that the facts script tells a record copied into
    another folder with the venv from this folder's own (``record_copied`` in
    playbooks/scripts/facts.py)."""
    targets = facts.get("targets") or {}
    venv = (targets.get("venv") or {}) if isinstance(targets, Mapping) else {}
    return {k: str(venv[k]) for k in ("id", "local") if isinstance(venv, Mapping) and venv.get(k)}


def _venv_record(facts: Mapping[str, Any]) -> Any:
    """The venv's own install record as facts read it (``targets.venv.installed``), or None."""
    targets = facts.get("targets")
    return ((targets.get("venv") or {}) if isinstance(targets, Mapping) else {}).get("installed")


def recorded_dist(facts: Mapping[str, Any]) -> str | None:
    """The distribution the venv's own install record names (facts' ``targets.venv.installed``),
    or None: what a wheel this run's build has not written yet (``<built wheel>``) will replace.
    Without it the plan asked the venv about a distribution named ``<built wheel>`` and said
    ``none was installed before`` of a venv holding fp4_kernels (operator trial)."""
    rec = _venv_record(facts)
    dist = rec.get("dist") if isinstance(rec, Mapping) else None
    return dist if isinstance(dist, str) and dist else None


def venv_mark(facts: Mapping[str, Any], dist: str) -> dict[str, Any] | None:
    """The install record the venv itself holds (``<venv>/.fleetctl-install.json``, read by facts as
    ``targets.venv.installed``: who installed last, the wheel's ``sha256`` and the installed
    ``RECORD``'s) as a ``previous`` record, when it is about ``dist`` and names a sha256; else None.
    The per-venv records live under each inventory host's workdir, so two hosts reaching one venv
    through different workdirs (one user's venv on two names) see each other's install only here
    (operator trial: ``no install record of fleetctl's for this venv`` / ``nothing installed`` for
    a venv holding the identical wheel another host had installed)."""
    rec = _venv_record(facts)
    if not isinstance(rec, Mapping) or not isinstance(rec.get("sha256"), str) or rec.get("dist") != dist:
        return None
    return {"dist": dist, "sha256": rec["sha256"], "record_sha256": rec.get("record_sha256"), "kept": None,
            "by": rec.get("host"), "from": INSTALL_RECORD}
