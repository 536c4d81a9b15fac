"""Whether the login user can replace an installed distribution: the one line ``pip_install``'s
preflight refuses a host with and ``fleetctl facts`` warns with (:func:`fleetctl.facts.venv.venv_warnings`),
from the same reading of the host (``locked``, ``n_locked``, ``locked_tops``, ``login_user``:
:data:`fleetctl.tasks.venv_state.STATE_SCRIPT`'s ``dist`` for the plan, the facts script's
``python.installed_locks`` for facts). Pure."""

from __future__ import annotations

from typing import Any


def locked_line(dist_state: dict[str, Any], dist: str) -> str | None:
    """Why pip cannot replace the installed ``dist`` (one line), or None: a folder of it (one
    holding a file its RECORD lists) that the login user cannot write, as a ``sudo pip install``
    or a deploy run as root leaves it. pip moves the package's folders aside (its uninstall stash,
    ``~<name>``), installs the new files, then removes the stash: that fails with Permission
    denied, the install "fails" though the new files are in place, and the root-owned stash stays
    (operator trial). Named with its owner and the fix, as
    :func:`fleetctl.facts.venv.install_problem` names a venv another user owns."""
    locked = dist_state.get("locked") or []
    if not locked:
        return None
    first, user = locked[0], dist_state.get("login_user") or "the login user"
    owner = first.get("owner") or "another user"
    more = f" (and {dist_state['n_locked'] - 1} more of its folders)" if dist_state.get("n_locked", 1) > 1 else ""
    tops = " ".join(dist_state.get("locked_tops") or [first["path"]])
    return (f"{first['path']}, a folder of the installed {dist}, is owned by {owner} and not writable by {user}"
            f"{more}: pip must remove it to replace {dist}, and would fail in the middle of the install (Permission "
            f"denied), leaving its stash (~...) behind; fix: sudo chown -R {user} {tops}, or deploy as {owner} "
            "(ansible_user)")
