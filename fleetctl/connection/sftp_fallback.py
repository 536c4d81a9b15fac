"""Files over exec channels, for hosts where SFTP cannot be used.

Two kinds of host need it: a hardened sshd with no ``Subsystem sftp`` line in its sshd_config
(the subsystem request fails; OpenSSH then logs ``subsystem request for sftp by user U failed,
subsystem not found``), and a login rc file that prints text, which corrupts the SFTP stream.
The SSH connection learns this once per connection and from then on sends every file this way
(:class:`fleetctl.connection.ssh.SSHConnection`).

Each transfer is one fixed ``/bin/sh`` script with the paths as positional parameters (no path is
ever parsed by a shell), run through :meth:`Connection.run`:

- put: the bytes go to the command's stdin after a line of their own (:data:`PUT_HEAD` and
  random hex digits), which the script reads and checks first: a login rc file that reads stdin
  (``read line`` in ``~/.bashrc``) took the upload's first bytes before the script ran, and the
  script then exits :data:`STDIN_TAKEN_RC` having written nothing (the failure names the login
  shell and quotes what it printed, not a cut-off file); ``cat`` writes them to a part file beside the target
  that is this upload's own (:func:`part_name`: ``.NAME.<8 hex digits>.part``, SFTP's naming, made
  exclusively with the shell's ``set -C``, ``O_EXCL``), which is checked (its size is the size
  sent), ``chmod``-ed and renamed into place, so no partial file ever has the final name, and a
  failure removes the part file, as does an interrupted upload (the controller stopped: ``cat``
  sees EOF short of the size given, so nothing cut off is renamed into place, or the shell gets
  TERM, HUP or INT). A fixed ``FILE.part`` was shared by every upload to one path: two hosts
  that are one machine, or share an NFS home, truncated and renamed each other's part file
  (``cannot open FILE.part``, a short file briefly at FILE, and a size check that read the
  other's file);
- get: the file must be a regular file (a symlink or special file is refused, as the SFTP path
  refuses it with ``lstat``); its bytes come back on stdout and are written, as they arrive, to
  ``.LOCAL.part`` on the controller, renamed into place once the command succeeded
  (:mod:`fleetctl.connection.download`, SFTP's downloads' one local writer);
- realpath: ``cd`` and ``pwd -P``.
"""

from __future__ import annotations

import posixpath
import re
import secrets
from pathlib import Path

from ..errors import ControllerWriteError, TransferError
from .base import Connection, OutputLine, folder_mode
from .download import local_download
from .login_output import stdin_taken_message

#: Seconds one exec transfer may take (as long as a whole upload phase's default budget).
TRANSFER_TIMEOUT_S = 600.0

#: Printed by the put script once the file is in place: ``FLEETCTL-PUT-SIZE:<bytes>``, the size
#: of the part file this upload wrote and renamed into place (another upload to the same path,
#: from a host sharing the disk, may have replaced it since: last rename wins); the login shell's
#: chatter before it is never read as the answer.
PUT_MARK = "FLEETCTL-PUT-SIZE:"
#: Printed by the get script before the file's bytes: ``FLEETCTL-GET-DATA:x`` (executable) or
#: ``FLEETCTL-GET-DATA:-``, then a newline; whatever a login rc file printed before it is dropped.
GET_MARK = b"FLEETCTL-GET-DATA:"

#: The first line of a put's stdin: this and 16 random hex digits (:func:`put_by_exec`).
PUT_HEAD = "FLEETCTL-PUT-HEAD-"
#: The put script's exit status when its first line is not the one sent: the login shell read
#: stdin before the script ran (nothing was written).
STDIN_TAKEN_RC = 24

_PUT = ('IFS= read -r h || :; if [ "$h" != "$6" ]; then exit ' + str(STDIN_TAKEN_RC) + '; fi; '
        'u=$(umask); umask 077; if [ -d "$1" ]; then echo "$1: Is a directory (a folder is there)" >&2; exit 21; fi; '
        'd=$(dirname -- "$1"); t="$d/$5"; (umask "${3:-$u}" && mkdir -p -- "$d") || exit $?; '
        '(set -C && : > "$t") || exit $?; '
        'trap \'rm -f -- "$t"; exit 143\' TERM HUP INT PIPE; '
        '{ cat > "$t" && s=$(wc -c < "$t" | tr -d " ") && '
        '{ [ "$s" = "$4" ] || { echo "$1: the upload was cut off" >&2; false; }; } && '
        'chmod "$2" "$t" && mv -f -- "$t" "$1"; } || { rc=$?; rm -f -- "$t"; exit $rc; }; '
        'if [ -L "$1" ] || [ ! -f "$1" ]; then echo "$1: not a regular file after the rename" >&2; exit 1; fi; '
        'printf "\\n%s%s\\n" "' + PUT_MARK + '" "$s"')
_GET = ('if [ ! -e "$1" ] && [ ! -L "$1" ]; then ls -d -- "$1" 2>&1 >/dev/null | tail -n 1 >&2; exit 2; fi; '
        'if [ -L "$1" ] || [ ! -f "$1" ]; then echo "not a regular file (symlinks are never followed)" >&2; '
        'exit 3; fi; if [ ! -r "$1" ]; then echo "$1: Permission denied" >&2; exit 13; fi; '
        'if [ -x "$1" ]; then x=x; else x=-; fi; printf "' + GET_MARK.decode() + '%s\\n" "$x"; exec cat -- "$1"')
_REALPATH = 'cd -- "$1" && pwd -P'


async def put_by_exec(conn: Connection, local_path: str, remote_path: str, mode: int | None, *,
                      why: str = "", dir_mode: int | None = None, explicit_dest: bool = False) -> None:
    """Upload ``local_path`` to ``remote_path`` (file mode ``mode``, default 0644) over an exec
    channel through a part file of its own (:func:`part_name`), checked to hold the local file's
    size before it is renamed into place; what is at ``remote_path`` then must be a regular file.

    Args:
        dir_mode: the mode of folders it creates (default 0700: fleetctl's own folders are private;
            with ``explicit_dest``, 0777 less the login's umask, as ``mkdir -p``: the script's
            ``umask`` argument is then empty and the login's own is kept).
        explicit_dest: the path is the operator's (``fleetctl copy``'s DEST), not one of
            fleetctl's own folders: a full disk's advice never names the ``workdir`` host var.

    Raises:
        TransferError: the login shell read the upload's stdin before the script ran (its first
            line is not the one sent: :func:`~fleetctl.connection.login_output.stdin_taken_message`,
            what the login shell printed also handed to the host's log, ``on_login_line``; nothing
            was written); a folder is at ``remote_path``; the command failed (``HOST: upload SRC ->
            DEST: CAUSE``, the cause in the script's words, :func:`put_failure`, first, then, when
            ``why`` is given, why SFTP was not used: the real cause leads, never SFTP's); or what
            this upload wrote is not the file that was sent (naming both sizes).
    """
    data = Path(local_path).read_bytes()
    part = part_name(remote_path)
    head = PUT_HEAD + secrets.token_hex(8)
    res = await conn.run(["/bin/sh", "-c", _PUT, "fleetctl-put", remote_path, f"{mode or 0o644:o}",
                          _umask_arg(folder_mode(dir_mode, explicit_dest)), str(len(data)), part, head],
                         stdin=head.encode("ascii") + b"\n" + data, timeout_s=TRANSFER_TIMEOUT_S)
    # why SFTP was not used (a chatty rc file, a missing subsystem) comes after the real cause
    cause = why[len(conn.host) + 2:] if why.startswith(f"{conn.host}: ") else why
    how = f" (sent through the shell, as SFTP could not be used: {cause})" if why else " (over an exec channel)"
    if res.rc == STDIN_TAKEN_RC:
        _tell_login_lines(conn, res.login_printed)
        out, err = res.login_printed
        raise TransferError(f"{conn.host}: upload {local_path} -> {remote_path}: "
                            f"{stdin_taken_message(getattr(conn, 'login_shell', ''), printed=out, printed_err=err)}"
                            f"; nothing was written{how}")
    if res.rc != 0:
        detail = put_failure(res.stderr_text, part) or f"exit status {res.rc}"
        from .storagefaults import name_write_error  # only for a failed write

        named = name_write_error(detail, remote_path, explicit_dest=explicit_dest, quote=not why)
        if named:  # the disk, its quota or its mount, named with the path (no partial file is left)
            raise TransferError(f"{conn.host}: upload {local_path} -> {remote_path}: {named} (the partial file "
                                "was removed)")
        raise TransferError(f"{conn.host}: upload {local_path} -> {remote_path}: {detail}{how}")
    sizes = [ln[len(PUT_MARK):].strip() for ln in res.stdout_text.splitlines() if ln.startswith(PUT_MARK)]
    if not sizes or sizes[-1] != str(len(data)):
        got = f"{sizes[-1]} bytes" if sizes else "no answer"
        raise TransferError(f"{conn.host}: upload {local_path} -> {remote_path}: what this upload wrote there "
                            f"is not the file sent ({got}, {len(data)} bytes sent)")


def _tell_login_lines(conn: Connection, printed: tuple[bytes, bytes]) -> None:
    """Hand what the login shell printed before the command (``(stdout, stderr)``) to the
    host's log, line by line (:attr:`Connection.on_login_line`), as a command it never started."""
    if conn.on_login_line is None:
        return
    for stream, data in zip(("stdout", "stderr"), printed):
        for piece in data.splitlines(keepends=True):
            conn.on_login_line(OutputLine(stream, piece, login=True))


def _umask_arg(dir_mode: int | None) -> str:
    """The put script's umask for the folders it makes: ``0777 & ~dir_mode`` in octal, or "" (the
    login's own umask) when ``dir_mode`` is None."""
    return "" if dir_mode is None else f"{0o777 & ~dir_mode:03o}"


def part_name(remote_path: str) -> str:
    """The name (no folder) of the part file one upload to ``remote_path`` writes beside it:
    ``.NAME.<8 random hex digits>.part``, SFTP's naming
    (:class:`fleetctl.connection.ssh_files.SFTPFiles` removes stale ones), new for each
    upload, so uploads to one path from hosts sharing a disk never share a part file."""
    return f".{posixpath.basename(remote_path)}.{secrets.token_hex(4)}.part"


def put_failure(stderr: str, part: str) -> str:
    """The put script's failure in its own words, one line (at most 300 characters): its lines
    without the shell's ``fleetctl-put: 1:`` prefix, nor the ``rm`` of the part file ``part``
    (its name, :func:`part_name`) that follows a failed write (``rm: cannot remove 'X.part':
    Permission denied`` repeats the cause); empty when it printed nothing."""
    lines = []
    for line in stderr.splitlines():
        line = re.sub(r"^fleetctl-put: (line )?\d+: ", "", line.strip())
        if line and not (line.startswith("rm: ") and part in line):
            lines.append(line)
    return "; ".join(lines)[-300:]


class _AfterMark:
    """A stdout sink for the get script: drops what comes before :data:`GET_MARK`'s line (a
    login rc file's chatter), then writes every byte to ``sink``. ``executable`` is the mark's
    answer (None until seen)."""

    def __init__(self, sink) -> None:
        self.sink, self.head, self.executable = sink, b"", None

    def feed(self, data: bytes) -> None:
        if self.executable is not None:
            self.sink.write(data)
            return
        self.head += data
        at = self.head.find(GET_MARK)
        end = self.head.find(b"\n", at) if at >= 0 else -1
        if end < 0:
            return
        self.executable = self.head[at + len(GET_MARK):end] == b"x"
        self.sink.write(self.head[end + 1:])
        self.head = b""


async def get_by_exec(conn: Connection, remote_path: str, local_path: str) -> None:
    """Download the regular file ``remote_path`` to ``local_path`` over an exec channel, written
    as it arrives (the controller never holds the whole file); an executable file stays
    executable here (0755 less the umask, else 0644 less it), as ``scp`` keeps modes.

    Raises:
        TransferError: missing ("No such file or directory"), unreadable ("Permission denied"),
            not a regular file, or the command failed.
        ControllerWriteError: the local file cannot be written (a full disk: the part file is
            removed; :func:`fleetctl.connection.download.local_download`).
    """
    failed: list[ControllerWriteError] = []  # the controller's write failed: the rest of the bytes are dropped
    with local_download(conn.host, remote_path, local_path) as part:
        body = _AfterMark(part)

        def take(line: OutputLine) -> None:
            if line.stream == "stdout" and not failed:
                try:
                    body.feed(line.data)
                except ControllerWriteError as exc:
                    failed.append(exc)

        res = await conn.run(["/bin/sh", "-c", _GET, "fleetctl-get", remote_path], on_line=take,
                             timeout_s=TRANSFER_TIMEOUT_S, capture_bytes=64 * 1024)
        if failed:
            raise failed[0]
        if res.rc != 0 or body.executable is None:
            detail = res.stderr_text.strip()[-300:] or f"exit status {res.rc}"
            raise TransferError(f"{conn.host}: get {remote_path}: {detail}")
        part.keep_mode(0o755 if body.executable else 0o644)


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
