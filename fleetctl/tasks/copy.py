"""``copy``: a local file or folder tree to the host over SFTP, checked by SHA-256.

Files whose remote SHA-256 already matches are skipped, so re-deploying unchanged sources uploads
nothing. Build outputs and caches (``build/``, ``__pycache__``, ``.git``, ``*.pyc``) are never sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import posixpath
from pathlib import Path

from ..actions import CopyArgs
from ..errors import TransferError
from ..status import Status
from .base import TaskContext, TaskResult

SKIP_DIRS = {"build", "__pycache__", ".git", "dist", ".pytest_cache", ".hypothesis"}
SKIP_SUFFIXES = (".pyc", ".so", ".whl")
PARALLEL_UPLOADS = 4


def local_files(src: Path) -> list[tuple[Path, str]]:
    """``(local file, path relative to src)`` for a file or a folder tree, sorted, skipping build outputs."""
    if src.is_file():
        return [(src, src.name)]
    out = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]) or path.is_dir():
            continue
        if path.name.endswith(SKIP_SUFFIXES) or path.is_symlink():
            continue
        out.append((path, rel.as_posix()))
    return out


_DIGESTS: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path) -> str:
    """SHA-256 (hex) of a local file, computed once per run for a given size and mtime (every host
    of a copy compares against the same local files)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = _DIGESTS[key] = sha256_of(path)
    return digest


def sha256_of(path: Path) -> str:
    """SHA-256 (hex) of a local file's bytes, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


async def run(ctx: TaskContext, args: CopyArgs, playbook_dir: Path) -> TaskResult:
    """Upload what differs. Returns CHANGED with the uploaded count, OK when nothing differed."""
    src = Path(args.src)
    if not src.is_absolute():
        src = (playbook_dir / src).resolve()
    if not src.exists():
        return TaskResult(Status.FAILED, msg=f"copy: local source {src} does not exist")
    files = local_files(src)
    dest_of = {rel: (args.dest if src.is_file() else posixpath.join(args.dest, rel)) for _, rel in files}
    remote = await ctx.run(["sha256sum", "--", *dest_of.values()], quiet=True, mutating=False, timeout_s=120) \
        if files else None
    have: dict[str, str] = {}
    if remote is not None:
        for line in remote.stdout_text.splitlines():
            digest, _, name = line.partition("  ")
            have[name] = digest
    digests = await asyncio.to_thread(lambda: [sha256_file(p) for p, _ in files])  # off the event loop
    todo = [(p, dest_of[rel]) for (p, rel), digest in zip(files, digests) if have.get(dest_of[rel]) != digest]
    gate = asyncio.Semaphore(PARALLEL_UPLOADS)

    async def one(path: Path, dest: str) -> None:
        async with gate:
            mode = args.mode if args.mode is not None else (0o755 if path.stat().st_mode & 0o100 else 0o644)
            await ctx.put(str(path), dest, mode=mode)

    try:
        await asyncio.gather(*(one(p, d) for p, d in todo))
    except TransferError as exc:
        return TaskResult(Status.FAILED, msg=str(exc))
    ctx.record.event("copy.finished", host=ctx.host, files=len(files), uploaded=len(todo))
    data = {"files": len(files), "uploaded": len(todo), "dest": args.dest}
    if todo:
        verb = "would upload" if ctx.dry_run else "uploaded"
        return TaskResult(Status.CHANGED, msg=f"{verb} {len(todo)} of {len(files)} files", data=data)
    return TaskResult(Status.OK, msg=f"{len(files)} files unchanged", data=data)
