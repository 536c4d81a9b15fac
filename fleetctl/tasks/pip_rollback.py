"""What ``pip_install`` does for an install that goes wrong: keep each installed wheel to go back to
(:func:`keep_wheel`), tell a wheel damaged since its build from pip's own failure
(:func:`damaged_since_built`), and put the venv back when an install moved torch (:func:`roll_back`).
Steps of the task's plan (yielded from it), one module of their own.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

from ..status import Status
from .base import HostView, Plan, TaskResult, first_error_line
from .pytool import install_command
from .steps import Run, probe


#: Keeps a wheel in ``$1/$2/`` (``$1`` a distribution's kept wheels of one venv, ``$2`` the wheel's
#: sha256 prefix), first removing that distribution's kept wheels other than ``$2`` and ``$3`` (the
#: previous install's), then copying ``$4`` there under its own file name (pip reads the name).
KEEP_SCRIPT = ('mkdir -p -m 0700 -- "$1" "$1/$2" || exit 1; for d in "$1"/*/; do d=${d%/}; d=${d##*/}; '
         '[ -d "$1/$d" ] || continue; [ "$d" = "$2" ] || [ "$d" = "$3" ] || rm -rf -- "${1:?}/$d"; done; '
         'cp -f -- "$4" "$1/$2/${4##*/}"')


def keep_wheel(keep_dir: str, wheel: str, digest: str | None, dist: str, previous_kept: str | None) -> Plan:
    """Keep the wheel just installed, to roll back to: ``<keep_dir>/<dist>.wheels/<sha256[:16]>/<file>``,
    by content, so two builds of one version (a rebuild, ``--force``: one file name) are two files;
    kept under one name, the second overwrote the first, and the record's ``previous`` named the
    new bytes (operator trial). Of that distribution's kept wheels only this one and
    ``previous_kept`` (the install it replaces) stay. Returns the kept path.

    Args:
        keep_dir: the venv's own records folder (:data:`.venv_state.RECORD_LAYOUT`), made already.
        digest: the wheel's sha256 (hex).
    """
    folder = posixpath.join(keep_dir, f"{dist}.wheels")
    name = (digest or "unhashed")[:16]
    prev = posixpath.basename(posixpath.dirname(previous_kept)) if previous_kept and \
        posixpath.dirname(posixpath.dirname(previous_kept)) == folder else ""
    yield Run(argv=("/bin/sh", "-c", KEEP_SCRIPT, "fleetctl-keep", folder, name, prev, wheel), quiet=True,
              reason="keep the wheel for a rollback")
    return posixpath.join(folder, name, posixpath.basename(wheel))


def damaged_since_built(wheel: str, digest: str | None, stamp_path: str) -> Plan:
    """After a failed install: is the wheel no longer the bytes its build recorded? The reuse check
    (build_wheel) trusts a wheel whose size and mtime match its stamp, so bytes changed in place
    with both kept (bit rot, ``cp -p`` or ``rsync -t`` over it) reach pip, which fails with an
    unzip error naming neither the file nor the cause. Then the wheel is hashed (one read, only on
    this failure path), and on a mismatch its build stamp is removed, so the next run rebuilds or
    receives it again instead of failing the same way until ``--force``. Returns the line to
    report, or ``None`` when the wheel is what was built (pip's own error stands)."""
    if not digest:
        return None
    res = yield probe(["sha256sum", wheel], f"is {posixpath.basename(wheel)} still the wheel that was built?")
    now = res.stdout_text.split()[0] if res.rc == 0 and res.stdout_text.split() else None
    if now is None or now == digest:
        return None
    gone = yield Run(argv=("rm", "-f", "--", stamp_path), reason="forget the build stamp of a wheel changed since")
    then = ("its build stamp was removed, so the next run rebuilds it" if gone.rc == 0 else
            f"remove {stamp_path} (or run with --force) to have it rebuilt")
    return (f"wheel {wheel} changed since it was built: sha256 {now[:12]}..., its build recorded {digest[:12]}... "
            f"(damaged or copied over in place, size and mtime kept); nothing was installed; {then}")


def roll_back(host: HostView, tool: str, index: str, uv: str | None, dist: str, previous: dict | None,
              before: dict[str, Any], after: dict[str, Any], data: dict[str, Any], env: dict[str, Any],
              reinstall_argv: Callable[[str, str], list[str]]) -> Plan:
    """The install moved torch: put the previous wheel back (or remove the new package), then the
    previous torch; FAILED either way, saying what was restored.

    Args:
        tool: the installer of the wheel (``pip`` or ``uv``); ``index``: the one for an install from
            an index (torch back: :func:`.pytool.index_tool`).
        reinstall_argv: ``(tool, wheel or requirement) -> argv`` of a ``--force-reinstall --no-deps``
            install (``pip_install``'s).
    """
    done, left = [], []
    kept = (previous or {}).get("kept")
    if kept:
        res = yield Run(argv=tuple(reinstall_argv(tool, kept)), env=env, cwd="/",
                        reason="roll back to the previous wheel")
        (done if res.rc == 0 else left).append(f"reinstalled {posixpath.basename(kept)}" if res.rc == 0
                                                else f"reinstalling {kept} failed: {first_error_line(res)}")
    else:
        argv = ([uv or "uv", "pip", "uninstall", "--python", host.python, dist] if tool == "uv"
                else [host.python, "-m", "pip", "uninstall", "-y", dist])
        res = yield Run(argv=tuple(argv), env=env, cwd="/", reason="roll back: nothing was installed before")
        (done if res.rc == 0 else left).append(f"removed {dist}" if res.rc == 0
                                                else f"removing {dist} failed: {first_error_line(res)}")
    old = before.get("torch")
    if old:
        res = yield Run(argv=tuple(reinstall_argv(index, f"torch=={old}")), env=env, cwd="/",
                        reason=f"roll back torch to {old}")
        if res.rc == 0:
            done.append(f"reinstalled torch {old}")
        else:
            left.append(f"torch {old} could not be reinstalled ({first_error_line(res)}): restore it with "
                        f"{install_command(host.facts, host.python, f'--force-reinstall --no-deps torch=={old}')} "
                        "(from the index it came from)")
    data["rolled_back"] = done
    msg = (f"the install changed torch: {before.get('torch')} (cu {before.get('cuda')}) -> {after.get('torch')} "
           f"(cu {after.get('cuda')}); rolled back: {', '.join(done) or 'nothing'}" + "".join(f"; {x}" for x in left))
    return TaskResult(Status.FAILED, data=data, msg=msg)
