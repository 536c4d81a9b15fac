"""A copy's SRC on the controller: the regular files it names, with their paths relative to each
host's DEST and their modes, and what is skipped (symlinks, special files), read before any host is
touched (:mod:`fleetctl.engine.transfer` sends them; the API and CLI ask it first, so that a missing
SRC is bad input, exit 2)."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError


@dataclass(frozen=True)
class LocalFile:
    """One file of a copy's SRC: its path on the controller, its path relative to DEST, size (bytes),
    permission bits, and those of the folder holding it in SRC (None for a single file): the
    folders made on the host get them, as ``cp -r`` and ``scp -r`` keep modes."""

    path: str
    rel: str
    size: int
    mode: int
    dir_mode: int | None = None


def local_sources(src: str) -> tuple[list[LocalFile], list[tuple[str, str]]]:
    """The regular files under ``src`` (itself when a file) with their DEST-relative paths.

    Returns:
        ``(files, skipped)``: skipped are symlinks (to files or folders) and special files, never
        followed (Ansible's copy follows a source's symlinks by default, ``local_follow: yes``), as
        ``(path, letter)`` pairs, the letter saying what each is (fetch's
        :data:`~fleetctl.engine.transfer_probes.SPECIAL_KINDS`; :func:`~fleetctl.engine.transfer_probes.skip_note`
        words it).

    Raises:
        InputError: ``src`` is empty, does not exist or cannot be read on the controller (exit 2).
    """
    if not src:  # Path("") is "." (the current folder): never copied by accident
        raise InputError("copy: SRC is empty: give a path")
    path = Path(src)
    if not path.exists() and not path.is_symlink():
        raise InputError(f"copy: {src}: no such file or folder on this controller")
    if path.is_symlink() or not (path.is_file() or path.is_dir()):
        raise InputError(f"copy: {src}: not a regular file or folder (symlinks are never followed)")
    if path.is_file():
        if not os.access(path, os.R_OK):
            raise InputError(f"copy: {src}: cannot be read (permission denied)")
        st = path.stat()
        return [LocalFile(str(path), path.name, st.st_size, st.st_mode & 0o777)], []
    base = "" if src.endswith("/") else path.resolve().name
    files, skipped = [], []
    for root, dirs, names in os.walk(path, onerror=_walk_error(src)):
        dirs.sort()
        links = [d for d in dirs if (Path(root) / d).is_symlink()]  # os.walk lists them, never enters them
        skipped.extend((str(Path(root) / d), "l") for d in links)
        dirs[:] = [d for d in dirs if d not in links]
        for name in sorted(names):
            full = Path(root) / name
            rel = posixpath.join(base, full.relative_to(path).as_posix()) if base else full.relative_to(path).as_posix()
            if full.is_symlink() or not full.is_file():
                skipped.append((str(full), _local_kind(str(full))))
                continue
            if not os.access(full, os.R_OK):
                raise InputError(f"copy: {full}: cannot be read (permission denied)")
            st = full.stat()
            files.append(LocalFile(str(full), rel, st.st_size, st.st_mode & 0o777,
                                   Path(root).stat().st_mode & 0o777))
    return files, skipped


def _local_kind(path: str) -> str:
    """What a skipped controller entry is, as a :data:`fleetctl.engine.transfer_probes.SPECIAL_KINDS` letter."""
    import stat

    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "o"
    return next((k for k, test in (("l", stat.S_ISLNK), ("p", stat.S_ISFIFO), ("s", stat.S_ISSOCK),
                                   ("b", stat.S_ISBLK), ("c", stat.S_ISCHR)) if test(mode)), "o")


def _walk_error(src: str):
    def fail(exc: OSError) -> None:
        raise InputError(f"copy: {exc.filename or src}: {exc.strerror or exc}")
    return fail
