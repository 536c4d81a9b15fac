"""A failed build's room: how full the file systems it wrote are, measured on the host the moment
the build failed, in the build's own step (no round trip more), and the cause line naming a full one.

Why: a compiler that runs out of space need not say so. nvcc writes its intermediates under
``TMPDIR`` and, when a write fails, may exit 1 printing nothing; ninja then says only ``FAILED:
OBJECT`` (operator trial: a 2300 MiB tmpfs workdir filled during the build, the summary named
``FAILED: CMakeFiles/fp4_cuda.dir/csrc/cuda_pk.cu.o`` and ``df`` showed 0 bytes free). So the build
runs under :data:`ROOM_SCRIPT`, which, only when the build exits non-zero, prints ``df -Pk`` and
``df -Pi`` (POSIX ``df -P`` output: 1024-byte blocks, inodes) of the build's workdir, its
``TMPDIR`` and the venv, before anything is cleaned up (fleetctl removes the TMPDIR after the
build). :func:`room_cause` reads those lines back.

A file system counts as full (:func:`is_full`) when it has less than :data:`NEAR_FULL_MIB` MiB
available to the build's user (``f_bavail``: what ``df`` shows as Available), or less than 5% of its
size when that is smaller (a tiny file system), or fewer than :data:`NEAR_FULL_INODES` free inodes
(5% likewise): the compiler's temporary files are often removed after its write failed, so a
full disk reads a little below full afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..connection.base import CommandResult
from ..connection.storagefaults import FAULTS
from ..util.sizes import human_bytes

#: How each line :data:`ROOM_SCRIPT` prints begins (followed by ``ROLE bytes:`` or ``ROLE inodes:``
#: and ``df -P``'s line for that role's path).
ROOM_MARK = "fleetctl: room after the failed build:"

#: The roles measured, in the order :data:`ROOM_SCRIPT` takes their paths (``$1``, ``$2``, ``$3``).
ROLES = ("workdir", "TMPDIR", "venv")

#: Runs ``"$@"`` (the build) after three paths (workdir, TMPDIR, venv); when it fails, prints
#: :data:`ROOM_MARK` lines on stderr, then exits with the build's status. One line, no backslash
#: nor ``!`` (the login shell parses it as it is: :mod:`fleetctl.connection.command`).
ROOM_SCRIPT = (
    'w=$1; t=$2; v=$3; shift 3; "$@"; st=$?; '
    'if [ "$st" -ne 0 ]; then for r in workdir TMPDIR venv; do '
    'case $r in workdir) p=$w;; TMPDIR) p=$t;; *) p=$v;; esac; [ -n "$p" ] || continue; '
    'printf %s "' + ROOM_MARK + ' $r bytes: $(df -Pk "$p" 2>/dev/null | tail -n 1)"; echo; '
    'printf %s "' + ROOM_MARK + ' $r inodes: $(df -Pi "$p" 2>/dev/null | tail -n 1)"; echo; '
    'done >&2; fi; exit "$st"')

#: Below this many MiB available a file system counts as full (or 5% of its size, if less).
NEAR_FULL_MIB = 64
#: Below this many free inodes a file system counts as out of inodes (or 5% of them, if fewer).
NEAR_FULL_INODES = 1024

_LINE = re.compile(r"^" + re.escape(ROOM_MARK) + r" (\S+) (bytes|inodes): (.*)$")
_DF = re.compile(r"^(.*?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+%|-)\s+(/.*)$")
_FAILED = re.compile(r"^\s*FAILED: (?:\[code=\d+\] )?(\S+)")
_ENOSPC = next(f for f in FAULTS if f.name == "ENOSPC")


def wrap(argv: Sequence[str], workdir: str, tmpdir: str, venv: str | None) -> tuple[str, ...]:
    """``argv`` run under :data:`ROOM_SCRIPT` with the three paths it measures on failure."""
    return ("/bin/sh", "-c", ROOM_SCRIPT, "fleetctl-build", workdir, tmpdir, venv or "", *argv)


def measure(workdir: str, tmpdir: str, venv: str | None) -> tuple[str, ...]:
    """A read-only command printing the :data:`ROOM_MARK` lines of the three paths now (``false``
    run under :data:`ROOM_SCRIPT`: it exits 1), for a command that failed unwrapped (an install:
    pip's ``[Errno 28] No space left on device`` names no path)."""
    return wrap(("false",), workdir, tmpdir, venv)


@dataclass(frozen=True)
class Room:
    """One file system a failed build wrote: its ``mount`` point, bytes available and in all,
    inodes free and in all (``None`` where ``df`` gave none: btrfs reports no inodes), and the
    ``roles`` (``"TMPDIR"``...) whose paths are on it, with those paths."""

    mount: str
    avail_bytes: int
    total_bytes: int
    free_inodes: int | None
    total_inodes: int | None
    roles: tuple[tuple[str, str], ...]


def split_room(res: CommandResult, paths: Mapping[str, str]) -> tuple[CommandResult, list[Room]]:
    """``(res without the room lines, the file systems they measured)``: one :class:`Room` per
    mount point, in :data:`ROLES` order; ``paths`` maps each role to the path measured."""
    seen: dict[str, dict[str, str]] = {}
    kept = []
    for line in res.stderr_text.splitlines(keepends=True):
        m = _LINE.match(line.rstrip("\n"))
        if m:
            seen.setdefault(m[1], {})[m[2]] = m[3]
        else:
            kept.append(line)
    rooms: dict[str, Room] = {}
    for role in ROLES:
        got = seen.get(role, {})
        size = _DF.match(got.get("bytes", "").strip())
        if not size:
            continue
        inodes = _DF.match(got.get("inodes", "").strip())
        mount = size[6]
        if mount in rooms:
            rooms[mount] = replace(rooms[mount], roles=(*rooms[mount].roles, (role, paths.get(role, "?"))))
            continue
        itotal = int(inodes[2]) if inodes and inodes[6] == mount else None
        rooms[mount] = Room(mount=mount, avail_bytes=int(size[4]) * 1024, total_bytes=int(size[2]) * 1024,
                            free_inodes=int(inodes[4]) if itotal else None, total_inodes=itotal or None,
                            roles=((role, paths.get(role, "?")),))
    if not seen:
        return res, []
    return replace(res, stderr="".join(kept).encode()), list(rooms.values())


def is_full(room: Room) -> str | None:
    """``"bytes"`` or ``"inodes"`` when ``room`` is full or nearly (the module docstring), else None."""
    if room.avail_bytes < min(NEAR_FULL_MIB * 1048576, room.total_bytes // 20):
        return "bytes"
    if room.total_inodes and room.free_inodes is not None and \
            room.free_inodes < min(NEAR_FULL_INODES, room.total_inodes // 20):
        return "inodes"
    return None


def room_cause(res: CommandResult, rooms: Sequence[Room], compiler_line: str) -> str | None:
    """The cause line for a build that failed on a full file system (the first full one of
    ``rooms``), or None when none is full. ``compiler_line`` is what the output said
    (:func:`fleetctl.tasks.base.first_error_line`): quoted, unless it is ninja's ``FAILED:``
    line alone (the compiler printed nothing), whose object is named as what was being built::

        no space left on /mnt/ws (0 bytes free of 2.2 GiB; the build's workdir /mnt/ws/w, TMPDIR
        /mnt/ws/w/tmp/K) while building CMakeFiles/x.dir/a.cu.o (ENOSPC, measured after the build
        failed; the compiler's own message was empty): the file system is full ...; free space ...
    """
    full = next(((r, why) for r in rooms if (why := is_full(r))), None)
    if full is None:
        return None
    room, why = full
    holds = ", ".join(f"{role} {path}" for role, path in room.roles)
    if why == "bytes":
        head = (f"no space left on {room.mount} ({human_bytes(room.avail_bytes)} free of "
                f"{human_bytes(room.total_bytes)}; the build's {holds})")
    else:
        head = (f"no free inodes left on {room.mount} ({room.free_inodes} of {room.total_inodes} inodes free, "
                f"{human_bytes(room.avail_bytes)} of {human_bytes(room.total_bytes)}; the build's {holds})")
    text = res.stderr_text + "\n" + res.stdout_text
    obj = next((m[1] for m in map(_FAILED.match, text.splitlines()) if m), None)
    what = f" while building {obj}" if obj else ""
    said = ("the compiler's own message was empty" if not compiler_line or _FAILED.match(compiler_line)
            else f"the output said: \"{compiler_line[:160]}\"")
    only_venv = all(role == "venv" for role, _ in room.roles)
    fix = ("free space there, or point the host var 'venv' at a venv on a larger file system" if only_venv
           else _ENOSPC.fix)
    return f"{head}{what} (ENOSPC, measured after the build failed; {said}): {_ENOSPC.cause}; {fix}"


_ROLE_WORDS = {"venv": "the venv's site-packages", "workdir": "the workdir", "TMPDIR": "the TMPDIR"}


def full_room_fault(line: str, path: str | None, rooms: Sequence[Room]) -> str | None:
    """An install's ``No space left on device`` (``line``, the tool's own) named by the file system
    that was full, or None (no room measured). The one full is the measured file system holding
    ``path`` (the path the line names, when one of the roles' paths holds it), else the one with
    the least space available (pip names no path, and the full one may read a few MiB free again
    once pip removed its partial files). The fix fits what is full (operator trial: a full venv
    file system was told to move the workdir, which holds none of the venv): the venv's
    site-packages: free space there or point the host var ``venv`` elsewhere, never the workdir;
    else (the workdir, fleetctl's TMPDIR in it): free space there or move the workdir::

        No space left on device (ENOSPC) on /mnt/v (5.0 MiB free of 40 MiB, measured after the
        install failed; the venv's site-packages /mnt/v/venv/lib/python3.11/site-packages): the file
        system is full ...; free space on /mnt/v (the venv's site-packages), or point the host var
        'venv' at a venv on a larger file system ("ERROR: ... [Errno 28] No space left on device")
    """
    if not rooms:
        return None
    holding = [r for r in rooms if path and any(path == p or path.startswith(p.rstrip("/") + "/") for _, p in r.roles)]
    room = holding[0] if holding else min(rooms, key=lambda r: r.avail_bytes)
    roles = [role for role, _ in room.roles]
    holds = ", ".join(f"{_ROLE_WORDS.get(role, role)} {p}" for role, p in room.roles)
    if "venv" in roles:
        others = [_ROLE_WORDS[r] for r in roles if r != "venv" and r in _ROLE_WORDS]
        fix = (f"free space on {room.mount} (the venv's site-packages{' and ' + ', '.join(others) if others else ''}), "
               "or point the host var 'venv' at a venv on a larger file system")
    else:
        fix = (f"free space on {room.mount} ({' and '.join(_ROLE_WORDS.get(r, r) for r in roles)}), or set the host "
               "var workdir to a folder on a larger file system (fleetctl's TMPDIR is in the workdir)")
    return (f"{_ENOSPC.text} ({_ENOSPC.name}) on {room.mount} ({human_bytes(room.avail_bytes)} free of "
            f"{human_bytes(room.total_bytes)}, measured after the install failed; {holds}): {_ENOSPC.cause}; {fix}"
            f" (\"{line[:160]}\")")
