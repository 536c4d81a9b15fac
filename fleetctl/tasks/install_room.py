"""The room an install needs in the venv's site-packages, checked before pip runs (``pip_install``).

A venv pip cannot write at all (read-only, not the login user's) is refused only for an install
that is needed (:func:`unwritable_venv`); a wheel whose unpacked size does not fit the venv's free space is refused while planning: pip would
stop with ENOSPC and leave a partial install. ``--plan``, ``--dry-run`` and the deploy use one
estimate (:func:`fleetctl.facts.venv.install_need_mib`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from ..facts.venv import SIZE_ASKED_BELOW_MIB, install_need, install_problem
from .base import HostView
from .build_preflight import CLEAN_PYTHON_ENV
from .steps import CachedWheelSize, probe

__all__ = ["SIZE_ASKED_BELOW_MIB", "UNPACKED_SIZE", "room_for", "unwritable_venv"]

#: Bytes a wheel's files take unpacked (the sum of its zip members' sizes): what the install
#: writes into site-packages, checked against the venv's free space before pip runs.
UNPACKED_SIZE = "import sys, zipfile; print(sum(i.file_size for i in zipfile.ZipFile(sys.argv[1]).infolist()))"


def unwritable_venv(host: HostView) -> str | None:
    """The line refusing an install into a venv pip cannot write (facts'
    ``python.site_packages_fs``: on a read-only file system, or not writable by the login user:
    :func:`fleetctl.facts.venv.install_problem`), or None (no ``venv`` var, or not measured).

    ``pip_install``'s planner asks it only once it has decided to install, never before: a venv
    made read-only (a read-only bind mount, NFS export or squashfs image) that already holds
    exactly the wheel the deploy would install (its sha256 and the venv's own RECORD hash: the
    install-state probe, read-only) needs no write, so it is ok with nothing changed, and verify
    runs (operator trial: a second inventory name of such a venv failed with ``... is on a
    read-only file system`` while the same venv writable said ``already installed (same
    sha256)``). "Nothing to install" is decided at planning time only from what the plan knows:
    the wheel's sha256 (on the host, or the class's wheel this run pushes from the controller's
    cache) and the install-state probe. A wheel this run still has to build has no sha256 yet,
    so it counts as an install and such a venv is refused while planning, before the build
    (``--plan``, ``--dry-run`` and the deploy's planning pass alike): a rebuild's wheel is not
    known to be byte-identical to the installed one, and pip could not write it."""
    return install_problem(host.facts, need_mib=0) if host.venv else None


def room_for(host: HostView, wheel: str, stamp: Mapping[str, Any]):
    """Plan steps: the line refusing a venv whose site-packages lacks the room the install of
    ``wheel`` needs (:func:`fleetctl.facts.venv.install_need_mib`: its unpacked size, asked when
    the venv has under :data:`SIZE_ASKED_BELOW_MIB` free), or None. A wheel not on the host yet
    (``--plan``, a deploy's planning pass) counts the unpacked size its build stamp names (a
    member pushed its class's wheel from the controller's cache: ``unpacked_bytes``), else the
    estimate for a wheel not built yet. A wheel this run builds (``--force`` too: the same
    inputs) counts the size of the controller cache's wheel of its class key when there is one
    (:class:`~fleetctl.tasks.steps.CachedWheelSize`), else the estimate for one not built yet
    (:func:`fleetctl.facts.venv.install_need`: the rule ``fleetctl facts`` warns with).
    ``SIZE_ASKED_BELOW_MIB``: :data:`fleetctl.facts.venv.SIZE_ASKED_BELOW_MIB`."""
    free = ((host.facts.get("python") or {}).get("site_packages_fs") or {}).get("free_mib")
    if not isinstance(free, int) or free >= SIZE_ASKED_BELOW_MIB:
        return None
    size = yield probe((host.python, "-c", UNPACKED_SIZE, wheel), f"the unpacked size of {posixpath.basename(wheel)}",
                       env=CLEAN_PYTHON_ENV, cwd="/")
    name = posixpath.basename(wheel)
    cached = stamp.get("unpacked_bytes")
    if not (size.rc == 0 and size.stdout_text.strip().isdigit()) and not isinstance(cached, int) and stamp.get("key"):
        cached = yield CachedWheelSize(key=str(stamp["key"]), reason="the unpacked size of the class's cached wheel")
    own = int(size.stdout_text.strip()) if size.rc == 0 and size.stdout_text.strip().isdigit() else None
    known = cached if isinstance(cached, int) and not isinstance(cached, bool) else None
    return install_problem(host.facts, *install_need(name, own, known))
