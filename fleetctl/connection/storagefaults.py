"""Write errors of the host's storage, named: which error, on which path, and the likely cause.

Pure functions over text (a build's output, a failed upload's message). The errors are Linux's
``errno`` values as ``strerror`` spells them (``errno(3)``, glibc), which every tool prints:

=============  =====  ==========================  ==============================================
name           errno  strerror                    likely cause
=============  =====  ==========================  ==============================================
EDQUOT         122    Disk quota exceeded         a user, group or project quota (or a btrfs
                                                  qgroup) is used up; ``statvfs``/``df`` may
                                                  still show gigabytes free
ENOSPC         28     No space left on device     the file system is full, or out of inodes
EROFS          30     Read-only file system       mounted read-only, or remounted so after errors
EIO            5      Input/output error          the disk or a network file system failed
=============  =====  ==========================  ==============================================

OpenSSH's ``sftp-server`` reports all four as ``SSH_FX_FAILURE`` ("Failure"): the SFTP status
loses the errno (``sftp-server.c`` ``errno_to_portable``), so an upload that fails that way is
retried through an exec channel, whose ``cat`` prints the real ``strerror``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class StorageFault:
    """One kind: ``name`` (``"EDQUOT"``), ``text`` (``strerror``), ``cause`` and ``fix``."""

    name: str
    errno: int
    text: str
    cause: str
    fix: str


FAULTS: tuple[StorageFault, ...] = (
    StorageFault("EDQUOT", 122, "Disk quota exceeded",
                 "a disk quota (user, group or project quota, or a btrfs qgroup) on that file system is used up, "
                 "though df may show space free",
                 "free space under the quota (quota -s shows it) or ask for a larger one, or set the host var "
                 "workdir to a folder on another file system"),
    StorageFault("ENOSPC", 28, "No space left on device",
                 "the file system is full (or out of inodes: df -h, df -i)",
                 "free space there, or set the host var workdir to a folder on a larger file system"),
    StorageFault("EROFS", 30, "Read-only file system",
                 "the file system is mounted read-only (a kernel remounts one read-only after disk errors: dmesg)",
                 "remount it read-write or set the host var workdir to a writable file system"),
    StorageFault("EIO", 5, "Input/output error",
                 "the disk or network file system failed the write (hardware or NFS trouble: dmesg)",
                 "check the disk (dmesg, smartctl) or the NFS server, or set the host var workdir elsewhere"),
)

_BY_TEXT = {f.text.lower(): f for f in FAULTS}
_PATTERN = re.compile("|".join(re.escape(f.text) for f in FAULTS) + r"|\b(EDQUOT|ENOSPC|EROFS|EIO)\b"
                      r"|\[Errno (122|28|30|5)\]", re.I)
_BY_NAME = {f.name: f for f in FAULTS}
_BY_ERRNO = {str(f.errno): f for f in FAULTS}

#: Paths in a line, in the spellings tools use: Python's ``'PATH'``, ``writing to PATH:``,
#: ``cannot open output file PATH:``, ``cannot create PATH:``, ``PATH: strerror``.
_PATHS = re.compile(r"'(/[^']+)'|\"(/[^\"]+)\"|(?<![\w.])(/[\w.+@%~:=,/-]+?)(?=[:\s'\"]|$)")


def find_fault(text: str) -> tuple[StorageFault, str] | None:
    """``(fault, line)``: the first storage write error in ``text`` and the line holding it."""
    for line in text.splitlines():
        m = _PATTERN.search(line)
        if not m:
            continue
        fault = (_BY_TEXT.get(m.group(0).lower()) or _BY_NAME.get((m.group(1) or "").upper())
                 or _BY_ERRNO.get(m.group(2) or ""))
        if fault:
            return fault, line.strip()
    return None


def path_in(line: str) -> str | None:
    """The path ``line`` names as the one written: a quoted absolute path anywhere (Python's
    ``[Errno 122] Disk quota exceeded: '/x'``), else the last absolute path before the error text;
    a program that prefixes its message (``/usr/bin/ld: ...``) is not it. None when there is none."""
    quoted = [m.group(1) or m.group(2) for m in _PATHS.finditer(line) if m.group(1) or m.group(2)]
    if quoted:
        return quoted[-1]
    head = _PATTERN.split(line, maxsplit=1)[0] if _PATTERN.search(line) else line
    prog = re.match(r"^\s*(/\S+?):\s", head)
    found = [m.group(3).rstrip(":,") for m in _PATHS.finditer(head) if m.group(3)]
    found = [p for p in found if len(p) > 1 and not (prog and p == prog.group(1))]
    return found[-1] if found else None


def describe(fault: StorageFault, path: str | None, line: str | None = None, *, explicit_dest: bool = False) -> str:
    """``"Disk quota exceeded (EDQUOT) writing /w/tmp/x.o: a disk quota ... is used up ...; free
    space under the quota ..."``: one line, the error first (as the operator will grep for it).

    ``explicit_dest``: the path is one the operator chose (``fleetctl copy``'s DEST), so the fix
    stops before the ``workdir`` host var, which moves only fleetctl's own folders."""
    where = f" writing {path}" if path else ""
    seen = f" (\"{line[:160]}\")" if line and fault.text.lower() not in (path or "").lower() else ""
    fix = fault.fix.split(" or set the host var workdir")[0].rstrip(", ") if explicit_dest else fault.fix
    return f"{fault.text} ({fault.name}){where}: {fault.cause}; {fix}{seen}"


def name_write_error(text: str, fallback_path: str | None = None, *, explicit_dest: bool = False,
                     quote: bool = True) -> str | None:
    """:func:`describe` for the first storage write error in ``text`` (its own path, else
    ``fallback_path``), or None when there is none. ``quote=False`` leaves out the quoted line
    (a tool's own words, e.g. ``cat:``, where the operator did not run that tool);
    ``explicit_dest`` as :func:`describe`."""
    hit = find_fault(text)
    if hit is None:
        return None
    fault, line = hit
    return describe(fault, path_in(line) or fallback_path, line if quote else None, explicit_dest=explicit_dest)
