"""Where ``fleetctl fetch`` puts each host's files: Ansible's ``fetch`` layout, pure functions
(but :func:`check_local_dest`, which tries DEST's folder on this controller before any host is touched).

Ansible's ``ansible.builtin.fetch`` (its documentation, and ``plugins/action/fetch.py`` of
ansible-core) stores a file at ``DEST/<inventory_hostname>/<src as given>`` (``src=/etc/profile``,
``dest=/backup`` -> ``/backup/host.example.com/etc/profile``; ``~`` expanded on the host first),
unless ``flat: yes``: then DEST is the file itself, or, when it ends in ``/``, a folder the file
goes into under its own name; a flat DEST that is an existing folder without the ``/`` is refused
("dest is an existing directory, use a trailing slash..."). fleetctl follows it:

- DEST without ``{host}`` (the default): every file lands at ``DEST/<host>/<its path on the
  host>``: ``fetch /var/log/syslog out`` -> ``out/gpu01/var/log/syslog``, a relative SRC
  (the login folder's) stays relative (``fetch logs/a.txt out`` -> ``out/gpu01/logs/a.txt``),
  ``~/x`` is the login user's ``$HOME/x`` (``out/gpu01/home/alice/x``). Hosts never overwrite
  each other's files, nor do two files of one host with the same name in different folders.
- DEST holding ``{host}`` (fleetctl's way to name it, the host's name made safe as a file name,
  one file name per host: :func:`fleetctl.util.paths.safe_name`): DEST is taken as given, as
  Ansible's ``flat: yes`` with ``{{ inventory_hostname }}`` in ``dest``: ``out/{host}/`` is a
  folder per host that gets the file under its own name, ``out/{host}.log`` is the file itself.
- ``flat`` (``fleetctl fetch --flat``) without ``{host}``: DEST as given, for one host only
  (several hosts would write the same file, which Ansible allows and fleetctl refuses).
- ``{host}`` in SRC is the host's inventory name (Ansible's ``{{ inventory_hostname }}``):
  ``fetch '/var/log/app-{host}.log' out``.
- A folder SRC (Ansible fetches files only) is fetched recursively: mirrored file by file as
  above; with DEST taken as given, the folder itself goes into DEST (``SRC/``: its contents),
  as ``rsync`` and ``fleetctl copy``.
- Ansible's other options: a missing SRC always fails the host, naming the path (Ansible's default
  ``fail_on_missing: yes``); there is no ``validate_checksum`` run after the transfer (SFTP and
  the exec fallback carry the bytes over SSH's integrity-checked channel, RFC 4253 section 6.4).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InputError, TransferError
from ..util.paths import safe_name

HOST = "{host}"

#: A ``{{ ... }}`` (Jinja, Ansible's ``{{ inventory_hostname }}``) or a lone ``{{``/``}}``; else a ``{NAME}``.
_TEMPLATE = re.compile(r"\{\{.*?\}\}|\{\{|\}\}")
_BRACED = re.compile(r"\{[^{}]*\}")
#: A balanced ``{...}``, else a lone ``{`` with the name after it, or a lone ``}`` with the name before it.
_LONE = re.compile(r"\{[^{}]*\}|\{\w*|\w*\}")


def check_placeholders(command: str, arg: str, value: str) -> None:
    """Refuse a path argument (copy's DEST, fetch's SRC and DEST) holding a template fleetctl would
    take literally: ``{{ ... }}`` (Jinja is never rendered in arguments, as it is not in
    inventory settings) or a ``{NAME}`` other than ``{host}``, the one placeholder (a typo such as
    ``{hostname}`` would make a path of that name on every host), an unbalanced ``{`` or ``}``
    (``/tmp/d_{host``), or nothing at all (an empty DEST would be the login folder's ``''``).

    Raises:
        InputError (exit 2, one line naming the command, the argument and the placeholder to use),
            before any host is touched.
    """
    if not value:
        raise InputError(f"{command}: {arg} is empty: give a path")
    found = _TEMPLATE.search(value)
    what = "holds a Jinja template (never rendered here)" if found else ""
    if not found:
        found = next((m for m in _BRACED.finditer(value) if m.group(0) != HOST), None)
        what = f"holds the unknown placeholder {found.group(0)}" if found else ""
    if not found:  # a lone { or } (``/tmp/d_{host``): taken literally it would name a path of that name
        found = next((m for m in _LONE.finditer(value) if not _BRACED.fullmatch(m.group(0))), None)
        what = f"holds an unbalanced {{ or }} ({found.group(0)})" if found else ""
    if found:
        example = value[:found.start()] + HOST + value[found.end():]
        raise InputError(f"{command}: {arg} {value} {what}: {HOST} is the placeholder, each host's inventory name "
                         f"(e.g. {example})")


@dataclass(frozen=True)
class FetchSource:
    """One host's SRC: ``given`` (``{host}`` filled in), ``root`` (as the host names it: ``~/``
    made ``$HOME/``) and ``kind`` (``file`` or ``dir``)."""

    given: str
    root: str
    kind: str


def mirrors(dest: str, *, flat: bool) -> bool:
    """True when files land at ``DEST/<host>/<path on the host>`` (no ``{host}`` in DEST, not flat)."""
    return not flat and HOST not in dest


def host_src(src: str, host: str) -> str:
    """Fetch's SRC for one host: ``{host}`` replaced by its inventory name (a path on the host)."""
    return src.replace(HOST, host)


def _parts(path: str) -> list[str]:
    return [p for p in posixpath.normpath(path).split("/") if p not in ("", ".")]


def check_fetch(src: str, dest: str, hosts: Sequence[str], *, flat: bool = False) -> None:
    """Refuse, before any host is touched, a fetch whose hosts would write over each other or
    outside DEST.

    Raises:
        InputError (exit 2, one line): a template in SRC or DEST other than ``{host}``
            (:func:`check_placeholders`); ``flat`` without ``{host}`` in DEST for more than one host;
            a mirrored SRC that climbs above the login folder (``../x``: its place under
            ``DEST/<host>/`` would be outside it); a DEST that cannot be made here
            (:func:`check_local_dest`). Two hosts never meet in one ``DEST/<host>`` (nor one
            ``{host}``): :func:`fleetctl.util.paths.safe_name` is one-to-one (``n@1`` -> ``n%401``,
            ``n_1`` -> ``n_1``).
    """
    check_placeholders("fetch", "SRC", src)
    check_placeholders("fetch", "DEST", dest)
    if flat and HOST not in dest and len(hosts) > 1:
        folder, name = posixpath.split(dest)
        example = posixpath.join(folder, HOST, name) if name else f"{dest}{HOST}/"
        raise InputError(f"fetch --flat: DEST {dest} has no {HOST}: the {len(hosts)} hosts would write the same "
                         f"path; put {HOST} in DEST (e.g. {example}) or leave out --flat (files land at "
                         f"DEST/<host>/<path on the host>)")
    if mirrors(dest, flat=flat) and posixpath.normpath(host_src(src, "h")).split("/")[0] == "..":
        raise InputError(f"fetch: SRC {src} climbs above the login folder ('..'): its files would land outside "
                         f"DEST/<host>/; give the path without '..' (an absolute path)")
    check_local_dest(dest, hosts, flat=flat)


def check_local_dest(dest: str, hosts: Sequence[str], *, flat: bool = False) -> None:
    """Refuse a fetch DEST (each host's, ``{host}`` filled in) whose nearest existing folder on the
    way is not one this controller can make a folder in: a file on the way (``out.txt/{host}``),
    a read-only mount, a folder of another user, ``/proc``. Tried for real (a hidden folder made
    and removed there: ``access(2)`` says yes to root on ``/proc``), once per such folder.

    Raises:
        InputError (exit 2, one line naming DEST, the path and the cause), before any host is touched.
    """
    tried: set[str] = set()
    for host in hosts if HOST in dest else hosts[:1]:
        path = os.path.abspath(dest.replace(HOST, safe_name(host)) or ".")
        near = path
        while not os.path.lexists(near) and os.path.dirname(near) != near:
            near = os.path.dirname(near)
        if near != path and not os.path.isdir(near):
            raise InputError(f"fetch: DEST {path} cannot be made here: {near} is not a folder")
        if not os.path.isdir(near):  # DEST itself exists, a file: a flat file DEST's is overwritten
            if mirrors(dest, flat=flat) or dest.endswith("/"):
                raise InputError(f"fetch: DEST {path} is not a folder")
            near = os.path.dirname(near)
        if near in tried:
            continue
        tried.add(near)
        refused = folder_refused(near)
        if refused is not None:
            raise InputError(f"fetch: DEST {path} cannot be made here: no folder can be made in {near} "
                             f"({refused.strerror or refused})")


def missing_folders(dest: str, hosts: Sequence[str]) -> list[str]:
    """The folders on the way to each host's DEST (``{host}`` filled in; without it,
    ``DEST/<host>``) that do not exist on this controller now, before any host is touched,
    deepest first: what a fetch may make. Those a failed fetch leaves empty are removed after it
    (:func:`remove_empty_folders`); each download removes its own (:mod:`fleetctl.connection.download`),
    but a folder two hosts share (DEST itself) may still hold another host's part file then."""
    found: set[str] = set()
    for host in hosts:
        path = os.path.abspath(dest.replace(HOST, safe_name(host)) if HOST in dest
                               else os.path.join(dest, safe_name(host)))
        while not os.path.lexists(path) and os.path.dirname(path) != path:
            found.add(path)
            path = os.path.dirname(path)
    return sorted(found, key=lambda p: (-p.count(os.sep), p))


def remove_empty_folders(folders: Sequence[str]) -> None:
    """``rmdir(2)`` each of ``folders`` (deepest first) that is an empty folder now; anything else
    (a folder holding a file, a file, a path gone) is left as it is."""
    for path in folders:
        with contextlib.suppress(OSError):
            os.rmdir(path)


def folder_refused(near: str) -> OSError | None:
    """Whether a folder can be made in the existing folder ``near``, tried for real: a new hidden
    folder ``.fleetctl-probe-<16 hex>`` made (mode 0700) and removed. None when it could be made,
    else the ``OSError`` of ``mkdir(2)``.

    It leaves nothing behind, whatever happens: its name is chosen before ``mkdir``, so the removal
    runs in a ``finally`` (a Ctrl-C or SIGTERM the moment after ``mkdir`` still removes it; ``mkdtemp``
    returned the name only after the folder was made, so an interrupt in between left it). It never
    touches a folder it did not make: a name already there (``EEXIST``) is left alone and another
    tried, and ``rmdir(2)`` removes only an empty folder.
    """
    for _ in range(8):
        probe = os.path.join(near, f".fleetctl-probe-{secrets.token_hex(8)}")
        made_here = True  # until mkdir says the name was already there
        try:
            os.mkdir(probe, 0o700)
            return None
        except FileExistsError:
            made_here = False
        except OSError as exc:
            made_here = False
            return exc
        finally:
            if made_here:
                with contextlib.suppress(OSError):
                    os.rmdir(probe)
    return FileExistsError(f"8 probe names in {near} were taken")


def local_dest(dest: str, host: str, src: FetchSource, remote: str, *, flat: bool = False) -> str:
    """Where the file ``remote`` (a path as the host names it, ``src.root`` or under it) of
    ``host`` lands on the controller (the module's rules).

    Raises:
        TransferError: a flat DEST for a file is an existing folder here without a trailing ``/``
            (Ansible refuses it alike), or a path would land outside the host's DEST.
    """
    if mirrors(dest, flat=flat):
        parts = _parts(remote)
        if not parts or ".." in parts:
            raise TransferError(f"{host}: fetch {remote}: outside DEST/{safe_name(host)}/ ('..')")
        return os.path.join(dest, safe_name(host), *parts)
    path = dest.replace(HOST, safe_name(host))
    if src.kind == "file":
        if path.endswith("/"):
            return os.path.join(path, posixpath.basename(remote.rstrip("/")))
        if os.path.isdir(path):
            raise TransferError(f"{host}: fetch {src.given} -> {path}: {path} is an existing folder here; end DEST "
                                f"with / to fetch the file into it (as Ansible's fetch with flat: yes)")
        return path
    base = src.root.rstrip("/") or "/"
    rel = posixpath.relpath(remote, base)
    if not src.given.endswith("/"):
        rel = posixpath.join(posixpath.basename(base) or "root", rel)
    parts = _parts(rel)
    if ".." in parts:
        raise TransferError(f"{host}: fetch {remote}: outside {src.given}")
    return os.path.join(path, *parts)
