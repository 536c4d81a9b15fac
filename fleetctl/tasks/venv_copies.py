"""Where the installed copy of a distribution is, and what stands in the way of replacing it, as
pip_install says it (one line each): a copy outside the venv (pip's configuration sent it there, or
another environment's reached through a ``.pth``), an installed folder the login user cannot
replace (:func:`fleetctl.facts.venv_locks.locked_line`, which ``fleetctl facts`` warns with too),
and pip's uninstall stash left behind. Pure readings of :data:`.venv_state.STATE_SCRIPT`'s ``dist``
answer; nothing here does I/O."""

from __future__ import annotations

from typing import Any


def misplaced(dist_state: dict[str, Any] | None, dist: str, venv: str, tool: str) -> str | None:
    """Why an install that exited 0 did not put ``dist`` into ``venv`` (one line), or ``None``:
    :data:`STATE_SCRIPT`'s ``dist`` after the install is not found on the venv's ``sys.path`` at
    all, or found outside ``sys.prefix``. The causes are pip's configuration (pip's docs,
    "Configuration" and ``pip install --help``): ``[install] user = true`` in a pip.conf or
    ``PIP_USER=1`` put it in the user site (``~/.local/lib/pythonX.Y/site-packages``, which a venv
    made with ``--system-site-packages`` sees, so pip accepts it); ``target``/``prefix``/``root``
    (or ``PIP_TARGET``/``PIP_PREFIX``/``PIP_ROOT``) put it elsewhere. Other accounts using the
    venv would get nothing, so the install is a failure, not a success."""
    if dist_state is None:
        return (f"{tool} reported {dist} installed, but {venv} does not hold it (not on its sys.path): a pip "
                "configuration sent it elsewhere (install.target, install.prefix or install.root in a pip.conf, or "
                "PIP_TARGET/PIP_PREFIX/PIP_ROOT in the login environment); remove that setting for this venv")
    if dist_state.get("in_venv") is not False:
        return None
    where = dist_state.get("location")
    if dist_state.get("venv_copy"):  # the install went into the venv, but Python imports another copy
        return (f"a copy of {dist} in {where} shadows the one just installed in {dist_state['venv_copy']} ({where} "
                f"{reached(dist_state)}, ahead of the venv's site-packages): Python imports that one; remove it or "
                + ("the .pth line" if dist_state.get("via") else "the setting that puts it on sys.path"))
    if dist_state.get("user_site"):
        return (f"{tool} put {dist} into the user site {where}, not the venv {venv}: the login user's pip "
                "configuration asks for user installs (install.user = true in a pip.conf such as "
                "~/.config/pip/pip.conf, or PIP_USER=1); other accounts using the venv get nothing; remove that "
                f"setting (or the copy: rm -r {where}/{dist}*) and deploy again")
    return (f"{tool} put {dist} into {where}, outside the venv {venv} (sys.prefix {dist_state.get('prefix')}): a pip "
            "configuration sent it there (install.target, install.prefix or install.root in a pip.conf, or "
            "PIP_TARGET/PIP_PREFIX/PIP_ROOT in the login environment)")


def reached(dist_state: dict[str, Any]) -> str:
    """How a copy outside the venv (:data:`STATE_SCRIPT`'s ``dist``) is on the venv's sys.path:
    ``is on sys.path through /v/lib/python3.11/site-packages/x.pth`` (its ``via``; Python's
    ``site`` docs: a .pth line adds a folder), ``is the user site``, else ``is on sys.path``
    (a ``--system-site-packages`` base, or a .pth line fleetctl could not tie to it)."""
    if dist_state.get("via"):
        return f"is on sys.path through {dist_state['via']}"
    return "is the user site" if dist_state.get("user_site") else "is on sys.path"


def outside_copy(dist_state: dict[str, Any], dist: str) -> str:
    """Before an install: why a copy found first outside the venv is not the venv's install, one
    line for ``decision["why"]``: the venv's own copy shadowed by it, ``installed outside the
    venv (LOCATION)`` for the user site (where pip's ``install.user`` put an earlier install), or
    ``none in the venv`` naming the copy Python imported (another environment's, reached through
    a .pth file: never fleetctl's to remove)."""
    where = dist_state.get("location")
    if dist_state.get("venv_copy"):
        return (f"the venv's copy in {dist_state['venv_copy']} is shadowed by the one in {where} "
                f"({where} {reached(dist_state)})")
    if dist_state.get("user_site"):
        return f"installed outside the venv ({where})"
    return f"none in the venv (Python imported the copy of {dist} in {where}, which {reached(dist_state)})"


def outside_note(before: dict[str, Any], after: dict[str, Any], dist: str, done: bool = True) -> str:
    """After an install into the venv that Python now imports (``after``): the line about the copy
    outside the venv found first before it (``before``). A user-site copy is a stray of an earlier
    install (pip's ``install.user``): remove it. Any other is another environment's (a .pth file
    or a ``--system-site-packages`` base): it now comes after the venv's own and is left alone.
    ``done`` False: the install was only simulated (``--plan``, ``--dry-run``, a deploy's planning
    pass), so the line says what would be, never "just installed" (fresh operator's trial)."""
    where = before.get("location")
    if before.get("user_site"):
        return (f"a copy of {dist} outside the venv remains in {where} (an earlier install there, e.g. by pip's "
                "install.user = true): remove it")
    if not done:
        return (f"Python would import the copy of {dist} the install puts in {after.get('location')}; the one in "
                f"{where} ({where} {reached(before)}, after the venv's site-packages) is not the venv's and would be "
                "left as it is")
    return (f"Python now imports the copy of {dist} just installed in {after.get('location')}; the one in {where} "
            f"({where} {reached(before)}, after the venv's site-packages) is not the venv's and was left as it is")


def stash_line(dist_state: dict[str, Any], dist: str) -> str | None:
    """The line naming pip's uninstall stash of ``dist`` left in its site folder (STATE_SCRIPT's
    ``stash``: ``~p4_kernels``, ``~p4_kernels-0.1.0.dist-info``; pip's ``AdjacentTempDirectory``
    names), or None. pip leaves it when removing it fails (a folder another user owns): it is
    nothing Python imports, but it is the trace of an install that failed half-way, and space."""
    stash = dist_state.get("stash") or []
    if not stash:
        return None
    user = dist_state.get("login_user")
    sudo = "sudo " if any(s.get("owner") != user for s in stash) else ""
    return (f"pip's uninstall stash of {dist} remains from an install that failed half-way: "
            + ", ".join(f"{s['path']} (owned by {s.get('owner') or 'another user'})" for s in stash)
            + f"; remove it: {sudo}rm -rf " + " ".join(s["path"] for s in stash))
