"""What ``fleetctl copy``/``fetch`` ask a host before moving bytes: is DEST an existing folder
(copy: a file then goes into it, as ``cp`` and ``scp`` do), and what is SRC (fetch: a file, a
folder's files, or missing).

Each question is one fixed ``/bin/sh`` script with the path as a positional parameter (never
parsed by a shell), run through :meth:`~fleetctl.connection.base.Connection.run`. A login shell's
rc file may print text before the script runs (a ``.bashrc`` or fish ``config.fish`` echo), so
every answer sits between markers and nothing outside them is read.
"""

from __future__ import annotations

from typing import Any

from ..errors import TransferError

#: Markers around every answer (NUL-delimited for the listing: a path may hold any other byte).
BEGIN, END = b"\0FLEETCTL-ANSWER-BEGIN\0", b"\0FLEETCTL-ANSWER-END\0"
_B, _E = '\\0FLEETCTL-ANSWER-BEGIN\\0', '\\0FLEETCTL-ANSWER-END\\0'

#: ``dir`` when ``$1`` is a folder (or a link to one, which ``cp`` follows too), else ``other``.
DEST_SCRIPT = f'printf "{_B}"; if [ -d "$1" ]; then printf dir; else printf other; fi; printf "{_E}"'

#: Lists a fetch's SRC: ``file`` and its path; or ``dir``, its path, its regular files, an empty
#: entry, then what is neither a folder nor a regular file (skipped; symlinks never followed), each
#: behind one letter saying what it is (:data:`SPECIAL_KINDS`, ``test(1)``'s file types), and each
#: folder the login user cannot list or enter (letter :data:`CLOSED`: ``find`` lists it but never
#: sees the files in it, so the fetch fails naming it); or ``missing``
#: with ``ls``'s reason ("No such file or directory", "Permission denied"). NUL-separated
#: (``find -print0``: GNU, BSD and busybox; a path is never empty). A leading ``~`` or ``~/`` is
#: the login user's ``$HOME`` first, as Ansible's fetch expands it (``_remote_expand_user``), so
#: every path in the answer is the path on the host (absolute for ``~/x``).
LIST_SCRIPT = ('case "$1" in "~") set -- "$HOME";; "~/"*) set -- "$HOME/${1#??}";; esac; '
               f'printf "{_B}"; if [ -d "$1" ] && [ ! -L "$1" ]; then printf "dir\\0%s\\0" "$1"; find "$1" -type f -print0; '
               'printf "\\0"; find "$1" ! -type f -exec sh -c \''
               'for p do if [ -d "$p" ] && [ ! -L "$p" ]; then [ -r "$p" ] && [ -x "$p" ] && continue; t=D; '
               'elif [ -L "$p" ]; then t=l; elif [ -p "$p" ]; then t=p; elif [ -S "$p" ]; then t=s; '
               'elif [ -b "$p" ]; then t=b; elif [ -c "$p" ]; then t=c; else t=o; fi; printf "%s%s\\0" "$t" "$p"; '
               'done\' sh {} +; '
               'elif [ -e "$1" ] || [ -L "$1" ]; then printf "file\\0%s\\0" "$1"; '
               'else printf "missing\\0"; ls -d -- "$1" 2>&1 >/dev/null | tail -n 1 | tr -d "\\n"; '
               f'printf "\\0"; fi; printf "{_E}"')


#: The letter of a folder the login user cannot read or enter (``[ -r ] && [ -x ]`` false).
CLOSED = "D"

#: What a skipped entry is, by the letter the listing gives it (``stat(2)``'s file types).
SPECIAL_KINDS = {"l": "a symlink", "p": "a FIFO (named pipe)", "s": "a socket", "b": "a block device",
                 "c": "a character device", "o": "not a regular file"}


def skip_note(kind: str) -> str:
    """Why an entry of a copied or fetched folder was skipped, by its :data:`SPECIAL_KINDS` letter:
    ``not a regular file (symlinks are never followed)`` for a symlink (the wording transfers have
    always used), ``a FIFO (named pipe), not a regular file`` and the like for the others."""
    if kind == "l":
        return "not a regular file (symlinks are never followed)"
    what = SPECIAL_KINDS.get(kind, SPECIAL_KINDS["o"])
    return what if what == SPECIAL_KINDS["o"] else f"{what}, not a regular file"


def answer(stdout: bytes) -> bytes | None:
    """The bytes between the last :data:`BEGIN` and the :data:`END` after it, or None when the
    script's answer is not there whole."""
    at = stdout.rfind(BEGIN)
    if at < 0:
        return None
    end = stdout.find(END, at + len(BEGIN))
    return None if end < 0 else stdout[at + len(BEGIN):end]


def _why(res: Any) -> str:
    return (res.stderr_text.strip().splitlines()[-1:] or [f"rc={res.rc}, no answer from the listing script"])[0]


async def dest_is_folder(conn: Any, host: str, dest: str, timeout_s: float) -> bool:
    """True when ``dest`` (relative: to the login folder) is an existing folder on the host.

    Raises:
        TransferError: the host gave no answer (naming its stderr's last line).
    """
    res = await conn.run(["/bin/sh", "-c", DEST_SCRIPT, "sh", dest], timeout_s=timeout_s, capture_bytes=None)
    got = answer(res.stdout)
    if res.rc != 0 or got not in (b"dir", b"other"):
        raise TransferError(f"{host}: copy -> {dest}: cannot tell whether it is a folder: {_why(res)}")
    return got == b"dir"


async def remote_sources(conn: Any, host: str, src: str,
                         timeout_s: float) -> tuple[str, str, list[str], list[tuple[str, str]]]:
    """``(kind, root, files, skipped)`` of a fetch's SRC on the host: kind ``file`` or ``dir``;
    root is SRC as the host names it (``~/`` made ``$HOME/``); files are paths as the host names
    them (``root`` itself, or under it); skipped are ``(path, letter)`` pairs, the letter saying
    what the entry is (:data:`SPECIAL_KINDS`, :func:`skip_note`; :data:`CLOSED` for a folder the
    login user cannot list or enter, whose files are not in ``files``).

    Raises:
        TransferError: SRC does not exist on the host ("no such file or folder on the host"),
            cannot be reached ("Permission denied", naming the path), or cannot be listed.
    """
    res = await conn.run(["/bin/sh", "-c", LIST_SCRIPT, "sh", src], timeout_s=timeout_s, capture_bytes=None)
    got = answer(res.stdout)
    parts = [p.decode("utf-8", errors="surrogateescape") for p in (got or b"").split(b"\0")]
    kind = parts[0] if got is not None else ""
    if res.rc != 0 or kind not in ("file", "dir", "missing"):
        raise TransferError(f"{host}: fetch {src}: cannot list it: {_why(res)}")
    if kind == "missing":
        reason = parts[1] if len(parts) > 1 else ""
        if "permission denied" in reason.lower():
            raise TransferError(f"{host}: fetch {src}: Permission denied (a folder on the way cannot be entered "
                                f"by the login user)")
        raise TransferError(f"{host}: fetch {src}: no such file or folder on the host")
    root = parts[1] if len(parts) > 1 and parts[1] else src
    if kind == "file":
        return kind, root, [root], []
    rest = parts[2:]
    cut = rest.index("") if "" in rest else len(rest)
    return kind, root, rest[:cut], [(p[1:], p[0]) for p in rest[cut + 1:] if len(p) > 1]
