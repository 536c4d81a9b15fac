"""``copy``: a local file or folder tree to the host (SFTP), checked by SHA-256.

Files whose remote SHA-256 already matches are not sent again, so re-deploying unchanged sources
uploads nothing. Build outputs and caches (``build/``, ``__pycache__``, ``.git``, ``dist``,
``*.egg-info``, ``*.pyc``, ``*.so``, ``*.whl``) and symlinks are never sent.

The task declares what the destination holds afterwards (:attr:`TaskResult.trees` and ``files``),
so a later ``build_wheel`` of that folder computes its build key from the controller's files,
identically in ``--plan``, ``--dry-run`` and a deploy.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from pathlib import Path

from pydantic import field_validator

from ..status import Status
from .argtypes import ActionArgs, is_template, non_empty
from .base import Action, HostView, Plan, TaskResult
from .steps import Local, PutFiles, probe

SKIP_DIRS = frozenset({"build", "__pycache__", ".git", "dist", ".pytest_cache", ".hypothesis"})
SKIP_SUFFIXES = (".pyc", ".so", ".whl")

#: The same selection as :func:`local_files`, on the host (``find`` primaries, POSIX).
REMOTE_TREE_HASH = (
    'cd "$1" && find . \\( -type d \\( -name build -o -name __pycache__ -o -name .git -o -name dist '
    '-o -name .pytest_cache -o -name .hypothesis -o -name "*.egg-info" \\) -prune \\) -o '
    '\\( -type f ! -name "*.pyc" ! -name "*.so" ! -name "*.whl" -print \\) '
    '| LC_ALL=C sort | while IFS= read -r f; do sha256sum "$f"; done | sha256sum'
)


class CopyArgs(ActionArgs):
    """``copy``: upload a local file or folder to the host (SFTP).

    Attributes:
        src: local path, file or folder; relative paths are relative to the playbook file's folder.
        dest: remote path. A folder ``src`` is copied as a folder to ``dest``.
        mode: permission bits for the uploaded file(s): an int (YAML ``0644`` is octal) or an octal
            string (``"0755"``); ``None``: 0755 for executable files, else 0644.
    """

    src: str
    dest: str
    mode: int | None = None

    @field_validator("src", "dest")
    @classmethod
    def _paths(cls, v: str, info) -> str:
        return non_empty(v, info.field_name)

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, v: object) -> object:
        if is_template(v):
            return v
        if isinstance(v, bool):
            raise ValueError("mode must be an octal number such as '0644'")
        if isinstance(v, str):
            text = v.strip()
            text = text[2:] if text.lower().startswith("0o") else text
            if not re.fullmatch(r"[0-7]{1,4}", text):
                raise ValueError(f"mode must be an octal number such as '0644', got {v!r}")
            v = int(text, 8)
        if isinstance(v, int) and not 0 <= v <= 0o7777:
            raise ValueError(f"mode must be between 0 and 07777, got {v!r}")
        return v


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


def sha256_of(path: Path) -> str:
    """SHA-256 (hex) of a local file's bytes, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    """:func:`sha256_of`, computed once per process for a given path, size and mtime (every host of
    a copy compares against the same local files)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = _DIGESTS[key] = sha256_of(path)
    return digest


def tree_hash(entries: list[tuple[str, str]]) -> str:
    """The hash :data:`REMOTE_TREE_HASH` computes on the host, from ``(relative path, sha256)``
    pairs: sha256 (hex) of ``sha256sum``'s lines for the paths sorted bytewise (``LC_ALL=C``)."""
    lines = [f"{digest}  ./{rel}\n" for rel, digest in sorted(entries, key=lambda e: ("./" + e[0]).encode())]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def local_manifest(src: Path) -> list[tuple[str, str, str, bool]]:
    """``(local path, relative path, sha256, executable)`` for every file :func:`local_files`
    selects (run off the event loop by the engine).

    Raises:
        FileNotFoundError: ``src`` does not exist.
    """
    if not src.exists():
        raise FileNotFoundError(f"local source {src} does not exist")
    return [(str(p), rel, sha256_file(p), bool(p.stat().st_mode & 0o100)) for p, rel in local_files(src)]


#: ``sha256sum`` of those of its arguments that are files (``FILE...`` as ``$@``): a file not there
#: yet (a first deploy) is left out in the same command, so no ``No such file`` line reaches the
#: host log; one ``sha256sum`` for all of them; exit 0 unless one that exists cannot be read.
HASH_PRESENT = ('n=$#; while [ "$n" -gt 0 ]; do f=$1; shift; n=$((n-1)); '
                '[ -f "$f" ] && set -- "$@" "$f"; done; [ "$#" -eq 0 ] || exec sha256sum -- "$@"')


def plan(args: CopyArgs, host: HostView) -> Plan:
    """Hash the local files, compare with the host's, upload what differs."""
    src = host.local_path(args.src)
    manifest = yield Local(fn=local_manifest, args=(src,), reason=f"hash the files of {src}")
    if isinstance(manifest, BaseException):
        return TaskResult(Status.FAILED, msg=f"copy: {manifest}")
    single = src.is_file()
    dest_of = {rel: (args.dest if single else posixpath.join(args.dest, rel)) for _, rel, _, _ in manifest}
    have: dict[str, str] = {}
    if manifest:
        remote = yield probe(["/bin/sh", "-c", HASH_PRESENT, "fleetctl-hash", *dest_of.values()],
                             f"compare with the files in {args.dest}")
        for line in remote.stdout_text.splitlines():
            digest, _, name = line.partition("  ")
            have[name] = digest
    todo = [(local, dest_of[rel], args.mode if args.mode is not None else (0o755 if exe else 0o644))
            for local, rel, digest, exe in manifest if have.get(dest_of[rel]) != digest]
    files = {dest_of[rel]: digest for _, rel, digest, _ in manifest}
    trees = {} if single else {args.dest.rstrip("/") or "/": tree_hash([(rel, d) for _, rel, d, _ in manifest])}
    sources = {} if single else {args.dest.rstrip("/") or "/": str(src)}
    data = {"files": len(manifest), "uploaded": len(todo), "dest": args.dest,
            "decision": {"action": "upload" if todo else "unchanged", "files": len(todo)}}
    if todo:
        errors = yield PutFiles(files=tuple(todo), reason=f"{len(todo)} of {len(manifest)} files differ")
        failed = [e for e in (errors or []) if e is not None]
        if failed:
            return TaskResult(Status.FAILED, msg=str(failed[0]), data=data)
        return TaskResult(Status.CHANGED, msg=f"uploaded {len(todo)} of {len(manifest)} files", data=data,
                          files=files, trees=trees, sources=sources)
    return TaskResult(Status.OK, msg=f"{len(manifest)} files unchanged", data=data, files=files, trees=trees,
                      sources=sources)


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`upload` and how many files differ from what the host holds (`would upload 3 of 120 files`), or "
    "`unchanged` when the host already holds every file with the same content (sha256)."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Upload the kernel sources
  copy:
    src: ../kernel_src
    dest: "{{ workdir }}/src/kernel_src"
  tags: [build]
"""

ACTION = Action(name="copy", args=CopyArgs, phase="upload", timeout_s=300.0, plan=plan, runs_commands=False,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
