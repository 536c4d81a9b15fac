"""The controller's side of every download (:meth:`Connection.get` of SSH's SFTP, its exec
fallback and ``local``): one place that writes the local file.

The bytes go to a part file beside the target (``.NAME.part`` in the same folder, so the rename
is atomic, ``rename(2)``), renamed to the final name only once the whole file is in; any failure
removes the part file, so a cut-short file never has the final name. A failure of the local
write (a full disk, a read-only mount, a folder that cannot be made) is a
:class:`~fleetctl.errors.ControllerWriteError` naming the local path and its cause: the host's
file was fine, and no advice about the host's ``workdir`` applies.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import ControllerWriteError


def part_path(local_path: str | Path) -> Path:
    """Where a download of ``local_path`` is written until it is complete (its folder, hidden name)."""
    local = Path(local_path)
    return local.with_name(f".{local.name}.part")


def write_error(host: str, remote_path: str, local_path: str | Path, exc: OSError) -> ControllerWriteError:
    """The error for a local write of ``local_path`` that failed with ``exc`` (its ``strerror``:
    ``No space left on device``, ``Read-only file system``, ``Permission denied``)."""
    return ControllerWriteError(f"{host}: get {remote_path}: could not be written here: {local_path}: "
                                f"{exc.strerror or exc}")


@contextlib.contextmanager
def local_download(host: str, remote_path: str, local_path: str | Path) -> Iterator[Path]:
    """Make ``local_path``'s folder, yield the part file to write, then rename it into place.

    Raises:
        ControllerWriteError: the folder cannot be made, or writing or renaming the file failed
            (an ``OSError`` in the body is taken as the local write's); the part file is removed.
        Whatever else the body raises (the host's side), after removing the part file.
    """
    part = part_path(local_path)
    try:
        part.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(host, remote_path, local_path, exc) from None
    try:
        yield part
        os.replace(part, local_path)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise write_error(host, remote_path, local_path, exc) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
