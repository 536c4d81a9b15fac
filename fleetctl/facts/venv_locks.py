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


def owner_missing_bits(fs: Mapping[str, Any]) -> str | None:
    """The owner bits (``"w"``, ``"x"``, ``"wx"``; ``""``: none) missing from the mode of the
    site-packages folder when the login user owns it (the facts' ``python.site_packages_fs``:
    ``owned``, its uid is the folder's; older facts: ``owner`` and ``user`` names alike; ``mode``
    in octal, not known: taken as lacking ``w``); None when another user owns it. chmod(2) lets a
    file's owner change its mode, so the owner restores them with ``chmod u+BITS``."""
    owned = fs.get("owned")
    if owned is None:
        owned = bool(fs.get("owner")) and fs.get("owner") == fs.get("user")
    if not owned:
        return None
    try:
        bits = int(fs.get("mode") or "", 8)
    except ValueError:
        return "w"
    return "".join(c for c, bit in (("w", 0o200), ("x", 0o100)) if not bits & bit)


def unwritable_line(where: str, fs: Mapping[str, Any]) -> str:
    """Why pip cannot install into the venv's site-packages ``where`` (``venv's site-packages SP``)
    that the login user cannot write (``fs``: the facts' ``python.site_packages_fs``), with the fix
    that applies: when the login user owns it, ``chmod u+w SP`` (the bits its mode lacks:
    :func:`owner_missing_bits`; "deploy as OWNER" is what it already does), or, its mode complete,
    what else refuses it; else deploying as its owner, write access, or another venv. For
    :func:`fleetctl.facts.venv.install_problem`."""
    user, owner = fs.get("user") or "the login user", fs.get("owner") or "another user"
    missing = owner_missing_bits(fs)
    mode = f"mode {fs['mode']}" if fs.get("mode") else "mode not known"
    pip = "pip would fail in the middle of the install (Permission denied)"
    if missing:
        off = f"the owner's {missing} bit is off, {mode}" if fs.get("mode") else "its mode is not known"
        return (f"{where} is not writable by {user}, who owns it ({off}): {pip}; "
                f"fix: chmod u+{missing} {fs['path']} (as {user}: the owner may set its own bits again), or point the host "
                "var 'venv' elsewhere")
    if missing == "":
        return (f"{where} is not writable by {user}, who owns it ({mode}: an ACL or the immutable attribute refuses "
                f"it): {pip}; fix: look at lsattr -d {fs['path']} and getfacl {fs['path']}, or point the host var "
                "'venv' elsewhere")
    return (f"{where} is not writable by {user} (owned by {owner}): {pip}; fix: deploy as {owner} (ansible_user), "
            f"give {user} write access to the venv, or point the host var 'venv' at a venv {user} owns")
