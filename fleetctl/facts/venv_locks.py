"""Whether the login user can replace an installed distribution, and whether other users can read
it: the lines ``pip_install`` refuses a host with (or installs again with) and ``fleetctl facts``
warns with (:func:`fleetctl.facts.venv.venv_warnings`), from the same reading of the host
(``locked``, ``n_locked``, ``locked_tops``, ``login_user``; ``unreadable``, ``n_unreadable``,
``site_mode``: :data:`fleetctl.tasks.venv_state.STATE_SCRIPT`'s ``dist`` for the plan, the facts
script's ``python.installed_locks`` for facts); and why the login user cannot install into the
venv's site-packages at all, with the fix that applies (:func:`unwritable_line`). Pure."""

from __future__ import annotations

from collections.abc import Mapping
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


#: The fix for an install less readable than its site-packages (:func:`unreadable_line`).
REINSTALL_FIX = "fix: fleetctl deploy (installs it again with site-packages' modes)"


def unreadable_line(dist: str, held: dict[str, Any]) -> str | None:
    """Why other users of the venv cannot import the installed ``dist`` (one line), or None: its
    folders and files less readable than their site-packages (``unreadable``: ``["fp4_kernels/
    0700", ...]``, ``n_unreadable``, ``site_mode``), as an install under a login's ``umask 077``
    left them (:mod:`fleetctl.tasks.venv_modes`). ``pip_install`` installs such an install again
    with this line as why; ``fleetctl facts`` warns with it."""
    shown = held.get("unreadable") or []
    if not shown:
        return None
    more = int(held.get("n_unreadable") or len(shown)) - len(shown)
    return (f"installed files of {dist} are less readable than their site-packages ({held.get('site_mode')}): "
            f"{', '.join(shown)}{f' and {more} more' if more > 0 else ''}; other users of the venv cannot import it")


def owner_lacks_write(fs: Mapping[str, Any]) -> bool:
    """The login user owns the site-packages folder it cannot write, and its mode lacks the owner's
    write bit (``chmod a-w``), as :func:`fleetctl.facts.venv.install_problem` reads the facts
    script's ``python.site_packages_fs``: chmod(2) lets a file's owner change its mode, so ``chmod u+w`` is the
    fix. From the facts script's ``owned`` (the login's uid is the folder's; older facts: the
    ``owner`` and ``user`` names alike) and ``mode`` (octal; not known: taken as lacking it)."""
    owned = fs.get("owned")
    if owned is None:
        owned = bool(fs.get("owner")) and fs.get("owner") == fs.get("user")
    mode = fs.get("mode")
    try:
        has_write = isinstance(mode, str) and bool(int(mode, 8) & 0o200)
    except ValueError:
        has_write = False
    return bool(owned) and not has_write


def unwritable_line(where: str, fs: Mapping[str, Any]) -> str:
    """Why pip cannot install into the venv's site-packages ``where`` (``venv's site-packages SP``)
    that the login user cannot write (``fs``: the facts' ``python.site_packages_fs``), with the fix
    that applies: ``chmod u+w SP`` when the login user owns it and its write bit is off
    (:func:`owner_lacks_write`: "deploy as OWNER" is what it already does), else deploying as its
    owner, write access, or another venv. For :func:`fleetctl.facts.venv.install_problem`."""
    user, owner = fs.get("user") or "the login user", fs.get("owner") or "another user"
    if owner_lacks_write(fs):
        mode = f", mode {fs['mode']}" if fs.get("mode") else ""
        return (f"{where} is not writable by {user}, who owns it (its write bit is off{mode}): "
                f"pip would fail in the middle of the install (Permission denied); fix: chmod u+w {fs['path']} "
                f"(as {user}: the owner may set its own write bit again), or point the host var 'venv' elsewhere")
    return (f"{where} is not writable by {user} (owned by {owner}): pip would fail in the middle of the "
            f"install (Permission denied); fix: deploy as {owner} (ansible_user), give {user} write access "
            f"to the venv, or point the host var 'venv' at a venv {user} owns")
