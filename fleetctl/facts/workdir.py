"""Whether a host's workdir can take a deploy's files, from its facts (``workdir_fs``, measured by
``playbooks/scripts/facts.py`` at the workdir or its nearest existing parent). Pure.

The rule is the host script's (``playbooks/scripts/session_start.py``, :func:`cannot_write` there):
a run writes its run folder, logs, the facts script's copy and the deploy lock under the workdir,
so a workdir on a read-only, full or unwritable file system fails every deploy and ``--plan`` at
once; ``fleetctl facts`` (which writes nothing) says so beforehand, with the same fix.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

#: Free MiB (2**20 bytes) under which the workdir counts as full: a run's folder, its logs and the
#: facts script's copy need a few MiB; a build's own needs are checked by its planner
#: (:mod:`fleetctl.tasks.build_space`).
WORKDIR_MIN_FREE_MIB = 16

#: MiB free the shipped deploy's build needs in the workdir's file system: ``build_wheel``'s
#: ``min_free_disk_mib`` default (``playbooks/fp4-kernels.yaml`` sets none), which ``fleetctl facts``
#: warns with (:func:`statvfs_problem`; operator trial: facts said ok at 29 MiB free, the deploy refused).
BUILD_MIN_FREE_DISK_MIB = 2048
#: MiB a host that only receives its arch class's wheel must have free where the wheel lands, when
#: the build_wheel task does not say (``receiver_min_free_disk_mib``): :mod:`fleetctl.tasks.build_space`.
RECEIVER_MIN_FREE_DISK_MIB = 512

#: The fix every "cannot write the workdir" line ends with.
WORKDIR_FIX = "set the host var workdir to a writable folder with space"
#: How :func:`workdir_warning`'s line starts (:func:`fleetctl.facts.refusals.refused_by_deploy`
#: reads it: a deploy fails on such a host).
WORKDIR_WARNING_LEAD = "warning: workdir "


def workdir_of(folder: str) -> str:
    """The workdir a folder facts were measured in names: a run's folder ``<workdir>/runs/<run_id>``
    (a deploy's facts) is named by its workdir, so ``fleetctl facts`` and the deploy say the same."""
    if posixpath.basename(posixpath.dirname(folder)) == "runs":
        return posixpath.dirname(posixpath.dirname(folder))
    return folder


def workdir_warning(facts: dict[str, Any]) -> str | None:
    """``"warning: workdir W: ..."`` naming the folder, why a deploy cannot write there and the fix
    (:data:`WORKDIR_FIX`), or None when its file system is writable with space (or unmeasured).

    ``facts["workdir"]`` is the folder the facts were measured for: a run's folder
    ``<workdir>/runs/<run_id>`` is named by its workdir."""
    fs = facts.get("workdir_fs")
    if not isinstance(fs, dict) or not fs.get("path"):
        return None
    folder = workdir_of(str(facts.get("workdir") or fs["path"]))
    where = fs["path"] if fs["path"] == folder else f"{fs['path']}, its nearest existing folder,"
    if fs.get("readonly"):
        why = f"the file system of {where} is mounted read-only"
    elif fs.get("writable") is False:
        why = f"{where} is not writable by the login user"
    elif isinstance(fs.get("free_mib"), int) and fs["free_mib"] < WORKDIR_MIN_FREE_MIB:
        why = f"the file system of {where} is full ({fs['free_mib']} MiB free)"
    else:
        return None
    return (f"{WORKDIR_WARNING_LEAD}{folder}: {why}: a deploy (and --plan) cannot make its run folder, lock or "
            f"build there; {WORKDIR_FIX}")


def statvfs_problem(facts: Mapping[str, Any], mib: int = BUILD_MIN_FREE_DISK_MIB, needs: str = "the build needs",
                    arg: str = "min_free_disk_mib") -> str | None:
    """The line for a workdir whose free space (facts' ``disk_free_mib``, from ``statvfs``, MiB) is
    below ``mib``, or None (a run's folder named by its workdir: :func:`workdir_of`). ``needs`` says who needs it (``"the build needs"``), ``arg`` the task
    argument that sets ``mib``. The one rule ``build_wheel``'s space check
    (:func:`fleetctl.tasks.build_space.space_check`) refuses with and ``fleetctl facts`` warns with
    (its defaults: the shipped deploy's build, :data:`BUILD_MIN_FREE_DISK_MIB`)."""
    free = facts.get("disk_free_mib")
    if not isinstance(free, (int, float)) or isinstance(free, bool) or free >= mib:
        return None
    where = workdir_of(str(facts.get("disk_free_path") or facts.get("workdir") or "the workdir"))
    return (f"only {free} MiB free at {where}; {needs} {mib} MiB (the build_wheel task's {arg} argument in the "
            "playbook, not a host var): free space there, or set the host var workdir to a larger file system")
