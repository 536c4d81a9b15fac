"""``build_wheel``'s disk preflight: the space a build needs (or a host that only receives its
arch class's wheel needs), from ``statvfs`` and then really allocated.

A builder needs ``min_free_disk_mib`` (the build tree, objects, TMPDIR). A host that receives its
arch class's wheel (``push``: another member builds) compiles nothing: it needs room for the wheel
(written to ``out_dir``) and its install (``pip`` works in the run's folder in the workdir and
writes the venv), about three times the wheel. That is ``receiver_min_free_disk_mib``, by default
:data:`RECEIVER_MIN_FREE_DISK_MIB` (512 MiB: wheels up to about 170 MiB, such as fp4_kernels'
few MiB) and never more than ``min_free_disk_mib`` unless the task says so; a playbook of larger
wheels sets it (``playbooks/tasks/sgl-kernel.yaml``). A host that could build already had more.

``statvfs`` (facts' ``disk_free_mib``) says what the file system has free, not what this user may
write: a user, group or project quota, or a btrfs qgroup, ends a build with ``Disk quota
exceeded`` while ``df`` shows gigabytes free, and ``quota``/``repquota`` are often not installed.
So the preflight allocates ``min_free_disk_mib`` in a probe file where the build writes (the
nearest existing folder of the workdir's ``tmp/`` and of ``out_dir``) with Linux's
``fallocate(2)`` (blocks charged to the quota at once, no data written: instant on ext4, XFS,
btrfs, tmpfs, NFS 4.2), and removes it at once, whatever happened. Where the file system lacks
``fallocate`` (``EOPNOTSUPP``: NFS 3, some FUSE file systems) nothing is written (glibc's
``posix_fallocate`` would write a byte into every block, gigabytes over NFS) and the folder counts
as unchecked; the build's output scan (:mod:`~fleetctl.tasks.causes`) is the backstop.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from ..connection.storagefaults import FAULTS
# their home is facts (``fleetctl facts`` warns with the same rule and line)
from ..facts.workdir import BUILD_MIN_FREE_DISK_MIB, RECEIVER_MIN_FREE_DISK_MIB, statvfs_problem  # noqa: F401
from .steps import Run, probe

#: Runs in any Python 3.8+ with JSON ``{"paths": [...], "mib": N}``; prints one JSON object
#: ``{path: {"dir", "ok", "checked", "errno", "error", "free_mib"}}`` (``free_mib`` from ``statvfs``;
#: ``checked`` false where ``fallocate`` is not supported).
SPACE_PROBE = r'''
import ctypes, ctypes.util, errno, json, os, sys
a = json.loads(sys.argv[1])
try:
    try:  # glibc's soname first: find_library runs ldconfig -p (a process) on every host
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
except (OSError, AttributeError):
    libc = None
out = {}
for want in a["paths"]:
    d = os.path.abspath(want)
    while not os.path.isdir(d) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    done = [r for r in out.values() if r["dir"] == d]
    if done:  # one folder, one probe
        out[want] = done[0]
        continue
    res = {"dir": d, "ok": True, "checked": False, "errno": None, "error": None, "free_mib": None}
    try:
        st = os.statvfs(d)
        res["free_mib"] = st.f_bavail * st.f_frsize // 1048576
    except OSError:
        pass
    if a["mib"] > 0 and libc is not None:
        p = os.path.join(d, ".fleetctl-space-probe-%d" % os.getpid())
        fd = None
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            if libc.fallocate(fd, 0, 0, a["mib"] * 1048576) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            res["checked"] = True
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.ENOSYS):
                res.update(ok=False, checked=True, errno=exc.errno, error=os.strerror(exc.errno or 0))
        finally:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(p)
            except OSError:
                pass
    out[want] = res
print(json.dumps(out))
'''


def space_probe(python: str, paths: Sequence[str], mib: int) -> Run:
    """The probe step (read-only in effect: the file is gone when it ends), in ``--plan`` too."""
    arg = json.dumps({"paths": list(dict.fromkeys(paths)), "mib": int(mib)})
    return probe([python, "-c", SPACE_PROBE, arg], f"can {mib} MiB really be written where the build writes?",
                 env={"PYTHONPATH": None, "PYTHONHOME": None}, cwd="/", timeout_s=120)


def receive_paths(run_dir: str, out_dir: str) -> list[str]:
    """Where a host that receives the wheel writes: the wheel folder and the run's folder (pip's TMPDIR)."""
    return [out_dir, run_dir]


def build_paths(workdir: str, out_dir: str) -> list[str]:
    """Where a build writes: its TMPDIR's parent (``<workdir>/tmp``) and the wheel folder."""
    return [posixpath.join(workdir, "tmp"), out_dir]


def space_problems(stdout: str, mib: int, arg: str = "min_free_disk_mib") -> list[str]:
    """One line per folder the probe could not write ``mib`` MiB into; ``[]`` when all took it or
    the probe printed nothing readable (the build's output scan is then the backstop). ``arg``:
    the task argument that sets ``mib``, for the message."""
    try:
        answer: Mapping[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return []
    problems = []
    by_errno = {f.errno: f for f in FAULTS}
    by_dir: dict[str, list[str]] = {}
    for want, res in answer.items():
        by_dir.setdefault(str(res.get("dir")), []).append(want)
    for want, res in answer.items():
        if res.get("ok", True) or by_dir.get(str(res.get("dir")), [want])[0] != want:
            continue
        want = ", ".join(by_dir.get(str(res.get("dir")), [want]))
        fault = by_errno.get(res.get("errno"))
        free = res.get("free_mib")
        seen = f"statvfs shows {free} MiB free there" if free is not None else "statvfs unreadable"
        if fault:
            problems.append(f"{fault.text} ({fault.name}) writing {mib} MiB in {res.get('dir')} (for {want}; "
                            f"{seen}; {arg}): {fault.cause}; {fault.fix}")
        else:
            problems.append(f"cannot write {mib} MiB in {res.get('dir')} (for {want}): {res.get('error')} ({seen}); "
                            "set the host var workdir to a writable folder with room")
    return problems


def space_check(python: str, paths: Sequence[str], facts: Mapping[str, Any], mib: int, needs: str,
                arg: str) -> Generator[Run, Any, list[str]]:
    """Plan steps: ``mib`` MiB free by ``statvfs`` (facts), then really allocated in ``paths``
    (one probe, skipped when ``statvfs`` already says no). Returns the problems, ``[]`` when the
    space is there or ``mib`` is 0."""
    if not mib:
        return []
    short = statvfs_problem(facts, mib, needs, arg)
    if short:
        return [short]
    res = yield space_probe(python, paths, mib)
    return space_problems(res.stdout_text, mib, arg)
