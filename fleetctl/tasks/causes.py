"""The one line naming why a build or an install failed, from the command's own output: what
``build_wheel`` (the build, and the install of missing build requirements), ``pip_install`` and
``venv_upgrade`` put in the summary. One rule set for compiler and pip/uv output, first match
wins (the end of each stream is scanned, :data:`SCAN_CHARS`: that is where a failure is):

1. nvcc refused the host compiler (``crt/host_config.h``'s ``unsupported GNU version!``), when
   the build's ``facts`` are given: :func:`fleetctl.build.hostcompiler.rejected_in_output`. The
   root fix is the preflight's choice of a compiler nvcc accepts
   (:mod:`~fleetctl.tasks.build_toolchain`); this names what slipped past it.
2. a write failed (``No space left on device``/ENOSPC, ``Disk quota exceeded``/EDQUOT,
   ``Read-only file system``/EROFS, ``Input/output error``/EIO; pip's ``OSError: [Errno 28]``):
   :func:`fleetctl.connection.storagefaults.name_write_error`, with the path the tool named (pip
   names none: else ``where``) and the likely cause; the whole captured output is searched for it
   (a build's verbose log can put it far from the end), and it wins over every rule below. An
   install's ENOSPC with its file systems measured (``room``) is named by the full one and a fix
   that fits it: the venv's site-packages is never told to move the workdir.
2b. a build's file system full or nearly, measured on the host when the build failed
   (:mod:`~fleetctl.tasks.build_room`: the workdir, the TMPDIR, the venv): a compiler whose write
   failed may print nothing, leaving ninja's ``FAILED: OBJECT`` alone (operator trial: nvcc, a
   full 2300 MiB tmpfs): ``no space left on MOUNT (0 bytes free of 2.2 GiB; ...) while building
   OBJECT (ENOSPC, measured after the build failed; the compiler's own message was empty): ...``.
3. the process was killed for memory (exit 137, SIGKILL, ``Killed``, g++'s ``Killed signal
   terminated program cc1plus``, ``std::bad_alloc``: :func:`~fleetctl.tasks.build_keys.is_killed`);
   a build's line names its ``MAX_JOBS`` (the build retries once with half, then says so).
4. the resolver found no solution: pip's ``ERROR: Cannot install ... because these package
   versions have conflicting dependencies.`` with the conflict's own lines (``The conflict is
   caused by:``), not its last ``ERROR: ResolutionImpossible: for help visit ...``; uv's
   ``No solution found`` with its ``Because ...`` explanation (pip's and uv's resolver docs).
5. the package index could not be read: the front end's own failure line (pip's ``ERROR: Could
   not find a version that satisfies ...``, uv's first ``error: ...``) with the network's cause
   in brackets, found anywhere in the output (pip's ``WARNING: Retrying ... Connection refused``,
   ``CERTIFICATE_VERIFY_FAILED``; uv's last ``Caused by: invalid peer certificate:
   UnknownIssuer``), not uv's generic ``client error (Connect)`` nor pip's ``(from versions:
   none)`` alone (fresh operator's trial: a site mirror in pip.conf, uv's failure named no cause).
6. else :func:`fleetctl.tasks.base.first_error_line`: the compiler's own first diagnostic
   (``file.cu(13): error``, ``file.cpp:3:5: error``, ``nvcc fatal   :``, ``nvcc error   :``,
   ``CMake Error at ...`` with its message; ninja's ``FAILED:`` object after it), else the last
   error-looking line, else stderr's last line.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from dataclasses import replace
from typing import Any

from ..build.hostcompiler import rejected_in_output
from ..connection.base import CommandResult
from ..connection.storagefaults import find_fault, name_write_error, path_in
from .base import first_error_line
from .build_room import full_room_fault, measure, room_cause, split_room
from .build_keys import is_killed
from .steps import probe

#: Characters of each stream scanned (the end of the output, where the failure is).
SCAN_CHARS = 400_000

_PIP_CONFLICT = re.compile(r"^ERROR: Cannot install .* conflicting dependencies\.?$")
_UV_NO_SOLUTION = re.compile(r"No solution found when resolving")


def _resolver_line(text: str) -> str | None:
    """Rule 4: the resolver's own explanation, one line (at most 300 characters). pip prints its
    ``ERROR: Cannot install ...`` on stderr and ``The conflict is caused by:`` with its indented
    lines on stdout; uv prints ``No solution found ...`` and its ``Because ...`` on stderr."""
    lines = [ln.strip() for ln in text.splitlines()]
    conflict = next((ln for ln in lines if _PIP_CONFLICT.match(ln)), None)
    if conflict is not None:
        why: list[str] = []
        if "The conflict is caused by:" in lines:
            for more in lines[lines.index("The conflict is caused by:") + 1:]:
                if not more:
                    break
                why.append(more)
        return (conflict.rstrip(".") + (f" ({'; '.join(why)})" if why else ""))[:300]
    for i, line in enumerate(lines):
        if _UV_NO_SOLUTION.search(line):
            rest = []
            for more in lines[i + 1:]:
                if not more or more.startswith(("hint:", "help:")):
                    break
                rest.append(more.lstrip("╰─▶│ ").strip())
            return ("no solution found when resolving dependencies" + (f": {' '.join(rest)}" if rest else ""))[:300]
    return None


_INDEX_CAUSE = re.compile(
    r"certificate|CERTIFICATE_VERIFY_FAILED|SSLError|UnknownIssuer|Connection refused|Name or service not known"
    r"|Temporary failure in name resolution|Network is unreachable|No route to host|ProxyError|dns error"
    r"|Connection timed out|Read timed out|ConnectTimeout|\b40[1379] Client Error|HTTP status client error", re.I)
_INDEX_FAILED = re.compile(r"^ERROR: Could not find a version|^ERROR: No matching distribution|^error: ")


def _index_line(text: str) -> str | None:
    """Rule 5: the front end's failure line with the network's cause (the last line naming one:
    the innermost of uv's ``Caused by:`` chain), at most 300 characters; ``None`` when no line
    names a network cause."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    cause = next((ln for ln in reversed(lines) if _INDEX_CAUSE.search(ln) and not ln.startswith(("hint:", "help:"))),
                 None)
    if cause is None:
        return None
    cause = re.sub(r"^(Caused by|cause|╰─▶)\s*:?\s*", "", cause)  # uv's chain: "Caused by: " (older), "cause: "
    if len(cause) > 160:  # pip's retry warning: the repr of urllib3's exception around the cause
        m = list(_INDEX_CAUSE.finditer(cause))[-1]  # the innermost: the quoted message holding it
        start = cause.rfind("'", 0, m.start()) + 1
        start = start if m.start() - start <= 200 else m.start() - 60
        end = min((i for i in (cause.find(q, m.end()) for q in "'\"") if i >= 0), default=m.end() + 60)
        cause = re.split(r"[>)]: ", cause[start:end])[-1].strip()  # past the connection's repr
    head = next((ln for ln in lines if _INDEX_FAILED.search(ln)), None)
    if head is None or head == cause:
        return f"the package index could not be read: {cause}"[:300]
    return f"{head} (the package index could not be read: {cause})"[:300]


def cause_line(res: CommandResult, where: str | None = None, *, facts: Mapping[str, Any] | None = None,
               max_jobs: int | None = None, room: Mapping[str, str] | None = None) -> str:
    """One line naming why the build or install ``res`` failed (rules 1-6 of the module docstring).

    Args:
        res: the failed command (a build: ``pip wheel``/``uv build``; an install: ``pip install``,
            ``uv pip install``).
        where: the folder named when a write error's line names no path (a build's TMPDIR; an
            install's venv and TMPDIR: pip names none).
        facts: the facts a build ran with (the toolkit, ``host_compilers.used``); ``None`` for an
            install (no compiler ran).
        max_jobs: a build's parallel compile jobs, named when it was killed for memory.
        room: a build run under :data:`fleetctl.tasks.build_room.ROOM_SCRIPT`, or an install whose
            stderr has :func:`fleetctl.tasks.build_room.measure`'s lines appended: the path it
            measured for each role (``{"workdir": ..., "TMPDIR": ..., "venv": ...}``), rule 2b; for
            an install (no ``facts``) an ENOSPC is named by the file system that was full, with the
            fix that fits it (:func:`fleetctl.tasks.build_room.full_room_fault`), rule 2.
    """
    rooms = []
    if room is not None:
        res, rooms = split_room(res, room)
    text = res.stderr_text[-SCAN_CHARS:] + "\n" + res.stdout_text[-SCAN_CHARS:]
    rejected = rejected_in_output(text, facts) if facts is not None else None
    if rejected:
        return rejected
    hit = find_fault(res.stderr_text + "\n" + res.stdout_text)
    if hit is not None and hit[0].name == "ENOSPC" and rooms and facts is None:  # an install: which file system
        placed = full_room_fault(hit[1], path_in(hit[1]), rooms)
        if placed:
            return placed
    named = name_write_error(res.stderr_text + "\n" + res.stdout_text, where)
    if named:
        return named
    full = room_cause(res, rooms, first_error_line(res)) if rooms else None
    if full:
        return full
    if is_killed(res):
        who = "compiler" if facts is not None else "process"
        return f"{who} killed (likely out of memory)" + (f" with MAX_JOBS={max_jobs}" if max_jobs else "")
    return _resolver_line(text) or _index_line(text) or first_error_line(res)


def install_cause(res: CommandResult, host: Any, where: str) -> Generator[Any, Any, str]:
    """:func:`cause_line` of a failed install (``pip install``, ``uv pip install``) into the host's
    venv, a plan step: when its output has a write error, the install's file systems are measured
    first (one read-only probe, :func:`fleetctl.tasks.build_room.measure`: the workdir, the TMPDIR
    ``host.run_dir`` and the venv's site-packages, facts ``python.site_packages``), so an ENOSPC is
    named by the one that was full (pip names no path). ``where``: as :func:`cause_line`'s."""
    if find_fault(res.stderr_text + "\n" + res.stdout_text) is None:
        return cause_line(res, where)
    site = (host.facts.get("python") or {}).get("site_packages") or host.venv or ""
    paths = {"workdir": host.workdir, "TMPDIR": host.run_dir, "venv": site}
    got = yield probe(measure(host.workdir, host.run_dir, site), "how full are the install's file systems?")
    return cause_line(replace(res, stderr=res.stderr + b"\n" + (got.stderr or b"")), where, room=paths)
