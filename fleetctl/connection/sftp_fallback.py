"""Files over exec channels, for hosts where SFTP cannot be used.

Two kinds of host need it: a hardened sshd with no ``Subsystem sftp`` line in its sshd_config
(the subsystem request fails; OpenSSH then logs ``subsystem request for sftp by user U failed,
subsystem not found``), and a login rc file that prints text, which corrupts the SFTP stream.
The SSH connection learns this once per connection and from then on sends every file this way
(:class:`fleetctl.connection.ssh.SSHConnection`).

Each transfer is one fixed ``/bin/sh`` script with the paths as positional parameters (no path is
ever parsed by a shell), run through :meth:`Connection.run`:

- put: the bytes go to the command's stdin; ``cat`` writes them to ``FILE.part`` beside the
  target, which is ``chmod``-ed and renamed into place, so no partial file ever has the final
  name, and a failure removes the part file;
- get: the file must be a regular file (a symlink or special file is refused, as the SFTP path
  refuses it with ``lstat``); its bytes come back on stdout and are written, as they arrive, to
  ``LOCAL.part`` on the controller, renamed into place once the command succeeded;
- realpath: ``cd`` and ``pwd -P``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import TransferError
from .storagefaults import name_write_error
from .base import Connection, OutputLine

#: Seconds one exec transfer may take (as long as a whole upload phase's default budget).
TRANSFER_TIMEOUT_S = 600.0

_PUT = ('umask 077; d=$(dirname -- "$1"); mkdir -p -- "$d" && cat > "$1.part" && '
        'chmod "$2" "$1.part" && mv -f -- "$1.part" "$1" || { rc=$?; rm -f -- "$1.part"; exit $rc; }')
_GET = ('if [ -L "$1" ] || [ ! -f "$1" ]; then echo "not a regular file (symlinks are never followed)" >&2; '
        'exit 3; fi; exec cat -- "$1"')
_REALPATH = 'cd -- "$1" && pwd -P'


async def put_by_exec(conn: Connection, local_path: str, remote_path: str, mode: int | None, *,
                      why: str = "") -> None:
    """Upload ``local_path`` to ``remote_path`` (file mode ``mode``, default 0644) over an exec
    channel.

    Raises:
        TransferError: the command failed (its stderr's last 300 characters; ``why`` first, when
            given: why SFTP was not used).
    """
    data = Path(local_path).read_bytes()
    res = await conn.run(["/bin/sh", "-c", _PUT, "fleetctl-put", remote_path, f"{mode or 0o644:o}"], stdin=data,
                         timeout_s=TRANSFER_TIMEOUT_S)
    if res.rc != 0:
        detail = res.stderr_text.strip()[-300:] or f"exit status {res.rc}"
        named = name_write_error(detail, remote_path)
        if named:  # the disk, its quota or its mount, named with the path (no partial file is left)
            raise TransferError(f"{conn.host}: upload {local_path} -> {remote_path}: {named} (the partial file "
                                "was removed)")
        prefix = f"{why}; upload through the shell failed too" if why else \
            f"{conn.host}: upload {local_path} -> {remote_path} over an exec channel"
        raise TransferError(f"{prefix}: {detail}")


async def get_by_exec(conn: Connection, remote_path: str, local_path: str) -> None:
    """Download the regular file ``remote_path`` to ``local_path`` over an exec channel, written
    as it arrives (the controller never holds the whole file).

    Raises:
        TransferError: not a regular file, unreadable, or the command failed.
    """
    local = Path(local_path)
    local.parent.mkdir(parents=True, exist_ok=True)
    part = local.with_name(f".{local.name}.part")
    with open(part, "wb") as sink:
        def take(line: OutputLine) -> None:
            if line.stream == "stdout":
                sink.write(line.data)

        res = await conn.run(["/bin/sh", "-c", _GET, "fleetctl-get", remote_path], on_line=take,
                             timeout_s=TRANSFER_TIMEOUT_S, capture_bytes=64 * 1024)
    if res.rc != 0:
        part.unlink(missing_ok=True)
        detail = res.stderr_text.strip()[-300:] or f"exit status {res.rc}"
        raise TransferError(f"{conn.host}: get {remote_path}: {detail}")
    os.replace(part, local)


async def realpath_by_exec(conn: Connection, path: str) -> str:
    """The absolute, symlink-free form of the remote folder ``path``.

    Raises:
        TransferError: it is not a folder the login user can enter.
    """
    res = await conn.run(["/bin/sh", "-c", _REALPATH, "fleetctl-realpath", path], timeout_s=60)
    lines = res.stdout_text.strip().splitlines()
    if res.rc != 0 or not lines or not lines[-1].startswith("/"):
        raise TransferError(f"{conn.host}: realpath {path}: {res.stderr_text.strip()[-300:] or 'failed'}")
    return lines[-1]
