"""The controller's side of every download (:meth:`Connection.get` of SSH's SFTP, its exec
fallback and ``local``): one place that writes the local file, and that tells the two sides'
failures apart.

The bytes go to a part file beside the target, this download's own (``.NAME.<8 hex digits>.part``
in the same folder, so the rename is atomic, ``rename(2)``; made with ``O_EXCL``: two hosts' files
fetched to one local path, or two runs, never write one part file), renamed to the final name only once the whole file is in; any failure
removes the part file, so a cut-short file never has the final name, and the folders this download
made for it (:func:`make_folders`) that are left empty: a failed fetch leaves no empty tree under
DEST (a folder that was there before, or one holding any file, is never removed).

Which side failed is known where the error is raised, never guessed from its type afterwards:

- writing (:meth:`PartFile.write`, the folder, the part file's open, close, mode and rename) is
  the controller's side: a :class:`~fleetctl.errors.ControllerWriteError` naming the local DEST
  and its cause (a full disk, a read-only mount, a folder that cannot be made); the host's file
  was fine, and no advice about the host's ``workdir`` applies;
- any other ``OSError`` out of the body is the reading side's, the host's: a
  :class:`~fleetctl.errors.TransferError` naming the remote path (an I/O error, a folder given
  as a file); a lost SFTP channel or connection is a :class:`~fleetctl.errors.TransferLost`
  (:func:`lost_error`), after which no other file of the same connection would come.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from ..errors import ControllerWriteError, TransferError, TransferLost
from ..util.paths import keep_mode

#: Bytes read per step of a local download (the controller never holds the whole file).
COPY_CHUNK_BYTES = 1024 * 1024


def part_path(local_path: str | Path) -> Path:
    """Where one download of ``local_path`` is written until it is complete (its folder, a hidden
    name new for each call: ``.NAME.<8 random hex digits>.part``)."""
    local = Path(local_path)
    return local.with_name(f".{local.name}.{secrets.token_hex(4)}.part")


def write_error(host: str, remote_path: str, local_path: str | Path, exc: OSError) -> ControllerWriteError:
    """The error for a local write of ``local_path`` that failed with ``exc`` (its ``strerror``:
    ``No space left on device``, ``Read-only file system``, ``Permission denied``)."""
    return ControllerWriteError(f"{host}: get {remote_path}: could not be written here: {local_path}: "
                                f"{exc.strerror or exc}", cause=str(exc.strerror or exc))


def read_error(host: str, remote_path: str, exc: BaseException) -> TransferError:
    """The error for a read of the host's ``remote_path`` that failed with ``exc`` (``Input/output
    error``, ``Is a directory``): ``HOST: get REMOTE: could not be read on the host: CAUSE``."""
    cause = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return TransferError(f"{host}: get {remote_path}: could not be read on the host: {cause}")


def lost_error(host: str, remote_path: str, exc: BaseException) -> TransferLost:
    """The error for a download of ``remote_path`` cut off because the connection or its SFTP
    channel was lost (``exc``: asyncssh's ``SFTPConnectionLost``, ``ConnectionLost``, or the
    ``BrokenPipeError`` of a channel no longer open)."""
    cause = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return TransferLost(f"{host}: get {remote_path}: the SFTP session with the host was lost while reading it "
                        f"({cause})")


class PartFile:
    """The open part file of one download: the body writes the bytes through it, so a failed
    write is known to be the controller's. ``path`` is the part file's path."""

    def __init__(self, host: str, remote_path: str, local_path: str | Path) -> None:
        self.host, self.remote_path, self.local_path = host, remote_path, local_path
        self.path = part_path(local_path)
        self._file = None
        self._file = self._local(lambda: open(self.path, "xb"))  # noqa: SIM115 - closed by close()

    def _local(self, action):
        try:
            return action()
        except OSError as exc:
            raise write_error(self.host, self.remote_path, self.local_path, exc) from None

    def write(self, data: bytes, offset: int | None = None) -> None:
        """Write ``data`` at ``offset`` bytes from the start (None: after the last write). Raises
        :class:`ControllerWriteError` (the local disk)."""

        def put() -> None:
            if offset is not None and offset != self._file.tell():
                self._file.seek(offset)
            self._file.write(data)

        self._local(put)

    def keep_mode(self, mode: int) -> None:
        """Give the file the host file's permission bits ``mode`` less the umask
        (:func:`fleetctl.util.paths.keep_mode`). Raises :class:`ControllerWriteError`."""
        self._local(lambda: keep_mode(self.path, mode))

    def finish(self) -> None:
        """Flush and close (a full disk may show only here), then rename the part file to the final
        name. Raises :class:`ControllerWriteError`."""
        self._local(self._file.close)
        self._local(lambda: os.replace(self.path, self.local_path))

    def discard(self) -> None:
        """Close without caring and remove the part file (after any failure)."""
        with contextlib.suppress(OSError):
            if self._file is not None:
                self._file.close()
        self.path.unlink(missing_ok=True)


def make_folders(folder: str | Path) -> list[str]:
    """Make ``folder`` and its missing parents (mode 0777 less the umask, as ``mkdir -p``).

    Returns:
        the folders this call made, outermost first (one another process made meanwhile is not
        among them: each is made by its own ``mkdir(2)``, ``EEXIST`` meaning "not ours").

    Raises:
        OSError: a folder could not be made (a file in the way, a read-only mount); the folders
            made before it are removed again.
    """
    missing: list[str] = []
    at = os.path.abspath(folder)
    while not os.path.lexists(at) and os.path.dirname(at) != at:
        missing.append(at)
        at = os.path.dirname(at)
    made: list[str] = []
    try:
        for path in reversed(missing):
            try:
                os.mkdir(path)
            except FileExistsError:
                if not os.path.isdir(path):
                    raise
                continue
            made.append(path)
    except OSError:
        remove_empty(made)
        raise
    return made


def remove_empty(made: list[str]) -> None:
    """Remove the folders ``made`` (outermost first, as :func:`make_folders` returns them) from
    the innermost out while they are empty (``rmdir(2)`` removes nothing else); the first that
    is not stops it, its parents holding it."""
    for path in reversed(made):
        try:
            os.rmdir(path)
        except OSError:
            return


@contextlib.contextmanager
def local_download(host: str, remote_path: str, local_path: str | Path) -> Iterator[PartFile]:
    """Make ``local_path``'s folder, yield the open :class:`PartFile` to write, then close it and
    rename it into place. On any failure the part file is removed, and so are the folders made
    here for it that are left empty (:func:`remove_empty`).

    Raises:
        ControllerWriteError: the folder cannot be made, or opening, writing, closing, the mode or
            renaming the part file failed (the local DEST named).
        TransferError: any other ``OSError`` out of the body: the reading side, the host's (its
            remote path named, :func:`read_error`).
        Whatever else the body raises (the host's side: a ``TransferLost``...).
    """
    try:
        made = make_folders(Path(local_path).parent)
    except OSError as exc:
        raise write_error(host, remote_path, local_path, exc) from None
    try:
        part = PartFile(host, remote_path, local_path)
    except BaseException:
        remove_empty(made)
        raise
    try:
        yield part
        part.finish()
    except OSError as exc:  # not a write of ours (those are ControllerWriteError): the host's read
        part.discard()
        remove_empty(made)
        raise read_error(host, remote_path, exc) from None
    except BaseException:
        part.discard()
        remove_empty(made)
        raise
