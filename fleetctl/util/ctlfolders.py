"""The controller folders a playbook run writes, checked once before any host is touched.

A run writes, on the controller (:mod:`fleetctl.util.paths`):

- the cache, ``$XDG_CACHE_HOME/fleetctl`` (default ``~/.cache/fleetctl``): ``wheels/`` (each arch
  class's wheel), ``sass-check/`` (a built wheel fetched to list its SASS), ``probes/`` (the probe
  plans), ``fetchdeps/`` (exported CMake dependencies);
- the state, ``$FLEETCTL_HOME`` or ``$XDG_STATE_HOME/fleetctl`` (default ``~/.local/state/fleetctl``):
  ``runs/`` (run records, the retry set) and ``locks/`` (controller-side host locks).

A fresh operator's trial: ``XDG_CACHE_HOME`` pointing at a file let ``--plan`` pass and the deploy
build for 78 s, then fail on the first cache write with ``NotADirectoryError``, nothing installed.
:func:`check_controller_folders` refuses such a folder before anything connects, naming the
variable that chose it and the path; a cache write that still fails later (a disk filled during the
build) is a warning, and the run goes on with the wheel in hand (the cache is an optimisation).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from .paths import cache_dir, fleetctl_home, state_dir

#: The cache's sub-folders a run may write.
CACHE_PARTS = ("wheels", "sass-check", "probes", "fetchdeps")
#: The state's sub-folders a run writes.
STATE_PARTS = ("runs", "locks")


def unusable(path: Path) -> str | None:
    """Why the folder ``path`` cannot be made or written by this user (one phrase naming the path
    at fault), or None when it can: ``path`` (or the nearest part of it that exists) must be a
    folder this process may write into and enter (``access(2)`` ``W_OK|X_OK``)."""
    probe = path
    while True:
        try:
            is_dir = probe.is_dir()
            exists = is_dir or probe.exists() or probe.is_symlink()
        except OSError as exc:
            return f"{probe} cannot be read: {exc.strerror or exc}"
        if exists:
            break
        if probe.parent == probe:
            return f"{probe} does not exist"
        probe = probe.parent
    if not is_dir:
        return f"{probe} is not a folder" + ("" if probe == path else f" (so {path} cannot be made)")
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable by this user" + ("" if probe == path else f" (so {path} cannot be made)")
    return None


def _cache_variable() -> str:
    value = os.environ.get("XDG_CACHE_HOME", "")
    return "XDG_CACHE_HOME" if value and os.path.isabs(value) else "XDG_CACHE_HOME (unset: ~/.cache)"


def _state_variable() -> str:
    if fleetctl_home() is not None:
        return "FLEETCTL_HOME"
    value = os.environ.get("XDG_STATE_HOME", "")
    return ("XDG_STATE_HOME" if value and os.path.isabs(value)
            else "FLEETCTL_HOME / XDG_STATE_HOME (unset: ~/.local/state)")


def check_controller_folders() -> None:
    """Refuse a run whose controller folders (the module docstring) cannot be written.

    Raises:
        InputError: one line naming the variable that chose the folder (``XDG_CACHE_HOME``,
            ``FLEETCTL_HOME`` or ``XDG_STATE_HOME``), the path at fault and what to do (exit 2);
            a relative ``FLEETCTL_HOME`` (:func:`fleetctl.util.paths.fleetctl_home`).
    """
    for variable, root, parts, what in (
            (_cache_variable(), cache_dir(), CACHE_PARTS, "its cache (built wheels, probe plans)"),
            (_state_variable(), state_dir(), STATE_PARTS, "its run records and locks")):
        for part in parts:
            why = unusable(root / part)
            if why is not None:
                raise InputError(f"{why}: fleetctl keeps {what} in {root}; point {variable.split(' ')[0]} at a "
                                 "folder this user can write", key=variable)
