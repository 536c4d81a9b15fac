"""Ad-hoc file transfers across hosts: ``fleetctl copy`` (controller -> hosts) and ``fleetctl fetch``
(hosts -> controller), on the connection seam deploys use.

Each file goes over the host's connection (:meth:`~fleetctl.connection.base.Connection.put` /
``get``: SFTP for SSH with its exec fallback on servers without ``Subsystem sftp``; a file copy for
``local``); for Slurm hosts, ``copy`` sends each file once per allocation with ``sbcast``
(:meth:`~fleetctl.connection.registry.KindScope.broadcast`). Hosts are worked on ``forks`` at
once; one host's failure never stops the others.

Paths, as ``ansible -m copy`` (``ansible.builtin.copy``'s ``src``/``dest`` documentation) and
``rsync`` read them:

- SRC a file: DEST is the file's path; a DEST ending in ``/``, or one that is an existing folder
  on the host (as ``cp`` and ``scp`` read it), is a folder the file goes into. A put checks what
  is at the path afterwards (a regular file of the size sent) and fails the host, naming the
  path, when it is not: a host never says ``ok`` for a file that is not there.
- SRC a folder: copied recursively, the folder itself into DEST (``SRC`` -> ``DEST/<name of SRC>/``,
  whether DEST existed or not: not ``cp -r``'s rule), or its contents when SRC ends in ``/``
  (``SRC/`` -> ``DEST/``). Regular files only: a symlink or
  special file is skipped (never followed), named in the host's log for what it is (a symlink, a
  FIFO, a socket, a device; copy's output names them too); empty folders are not made. A fetched
  folder's file the host cannot read, or a folder in it the login user cannot list, fails the host,
  naming it, after every other file is fetched. Folders made
  on a host keep the SRC folder's mode bits, fetched files their host's (less the umask).
- copy's DEST may hold ``{host}`` too: each host its own DEST (``/tmp/dst_{host}``).
- fetch: see :mod:`fleetctl.engine.fetch_paths` (Ansible's ``fetch`` layout: each file at
  ``DEST/<host>/<its path on the host>``; DEST taken as given with ``{host}`` in it or ``flat``;
  ``{host}`` in SRC is the host's inventory name).

Every transfer is a run (kind ``copy``/``fetch``): each host's outcome says ``files`` (``src``,
``dest``, ``bytes``) and ``bytes`` in all, its log names each file and its size.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..connection.base import OutputLine, folder_mode
from ..connection.registry import ConnectOptions
from ..errors import (CommandTimeout, ControllerWriteError, FleetError, HostUnreachable, TransferError,
                      TransferLost, host_message)
from .fanout import for_each_host
from .fetch_paths import (FetchSource, check_fetch, check_placeholders, host_src, local_dest, missing_folders,
                          remove_empty_folders)
from .model import RunModel, utc_now
from .observer import Observers
from .scopes import enter_scopes, prepare_hosts
from .session import host_ref
from .copy_sources import LocalFile, local_sources
from .transfer_probes import CLOSED, dest_is_folder, remote_sources, skip_note
from ..util.within import within


def host_dest(dest: str, host: str) -> str:
    """Copy's DEST for one host: ``{host}`` replaced by the host's safe name (each host its own
    DEST, as fetch's); a DEST without it is the same path on every host."""
    from ..util.paths import safe_name

    return dest.replace("{host}", safe_name(host))


def remote_dest(dest: str, rel: str, *, single_file: bool) -> str:
    """Where one file goes on the host: ``dest`` itself for a single file (``dest/`` + name when
    it ends in ``/``), else ``dest/rel``. A leading ``~/`` means the login folder (SFTP's and
    sbcast's relative paths)."""
    if dest.startswith("~/"):
        dest = dest[2:] or "."
    if single_file and not dest.endswith("/"):
        return dest
    return posixpath.join(dest, rel)


def _log(observers: Observers, host: str, text: str, stream: str = "stdout") -> None:
    observers.line(host, OutputLine(stream, (text + "\n").encode("utf-8", errors="surrogateescape")), True)  # type: ignore[arg-type]


async def copy_to_hosts(hosts: Sequence[Any], src: str, dest: str, *, run: RunModel, observers: Observers,
                        forks: int = 50, timeout_s: float = 600.0,
                        connect_options: ConnectOptions | None = None) -> dict[str, list[dict]]:
    """Copy ``src`` (a controller file or folder, recursively) to ``dest`` on every host.

    Args:
        hosts: inventory hosts (``name``, ``connection``, settings).
        src, dest: see the module's path rules.
        run: the run (kind ``copy``); each host's outcome gets ``status`` (``ok``, ``failed``,
            ``unreachable``), ``files``, ``bytes`` and, for a failure, ``error`` naming the path and
            cause (a full disk, permission denied: :mod:`fleetctl.connection.storagefaults`).
        observers: get ``host.started``/``host.finished`` and one log line per file.
        forks: hosts worked on at once.
        timeout_s: seconds one host's whole transfer may take.
        connect_options: how to connect (``-o``, host keys, connect timeout).

    Returns:
        host -> the files put there (``src``, ``dest``, ``bytes``).

    Raises:
        InputError: ``src`` is missing or unreadable on the controller, or ``dest`` holds ``{{ }}`` or
            a placeholder other than ``{host}`` (before any host is touched).
    """
    check_placeholders("copy", "DEST", dest)
    files, skipped = local_sources(src)
    single = len(files) == 1 and Path(src).is_file()

    def plan_for(host: str, into_folder: bool = False) -> list[tuple[LocalFile, str]]:
        where = host_dest(dest, host) + ("/" if into_folder else "")
        return [(f, remote_dest(where, f.rel, single_file=single)) for f in files]

    run.argv = ["copy", src, dest]
    done: dict[str, list[dict]] = {}
    options = replace(connect_options or ConnectOptions(), run_id=run.run_id)
    async with contextlib.AsyncExitStack() as stack:
        scopes = await enter_scopes(stack, hosts, options, run=run, observers=observers)
        unavailable = await prepare_hosts(scopes, hosts)
        # a single file's DEST may be an existing folder on some hosts: each host asks first, then
        # puts (Slurm's puts of the same bytes to the same path still share one sbcast)
        ask_first = single and not dest.endswith("/")
        broadcast = {} if ask_first else await _broadcast(hosts, scopes, unavailable, plan_for, timeout_s)

        async def one(host: Any) -> None:
            async def work(out, conn_box: list) -> None:
                for path, what in skipped:
                    _log(observers, host.name, f"skipped {path}: {skip_note(what)}", "stderr")
                if host.name in broadcast:  # sent by sbcast: say what landed, or why not
                    for f, target in plan_for(host.name):
                        why = broadcast[host.name].get(target)
                        if why:
                            raise TransferError(f"{host.name}: copy {f.path} -> {target}: {why}")
                        _record_file(out, observers, host.name, f.path, target, f.size, "copied")
                    return
                conn = scopes[host.connection].connection(host_ref(host))
                conn_box.append(conn)
                # what the connection learns on its own (a part file an interrupt left) goes to the record
                conn.on_note = lambda message, name=host.name: observers.emit("note.added", name, message=message)
                # and what its login shell printed before a command it never ran, or an upload whose stdin it read
                conn.on_login_line = lambda ln, name=host.name: observers.line(name, ln, False)
                await conn.open()
                into = False
                if ask_first:  # an existing folder gets the file, as cp/scp
                    into = await dest_is_folder(conn, host.name, remote_dest(host_dest(dest, host.name), "",
                                                                             single_file=True), timeout_s)
                for f, target in plan_for(host.name, into):
                    await conn.put(f.path, target, mode=f.mode, dir_mode=f.dir_mode, explicit_dest=True)
                    _record_file(out, observers, host.name, f.path, target, f.size, "copied")

            await _host(run, observers, host, unavailable, work, timeout_s, done)

        await for_each_host(hosts, one, forks=forks)
    run.failed_hosts = [h for h, o in run.hosts.items() if o.status != "ok"]
    return done


async def _broadcast(hosts: Sequence[Any], scopes: dict[str, Any], unavailable: dict[str, str],
                     plan_for, timeout_s: float) -> dict[str, dict[str, str | None]]:
    """For hosts whose scope can broadcast (Slurm's sbcast): every file sent once to all hosts
    sharing its target path (``plan_for(host)``: one DEST for all, or one each with ``{host}``).

    Returns:
        host -> remote path -> ``None`` (in place) or why not; hosts of other kinds are absent.
    """
    result: dict[str, dict[str, str | None]] = {}
    for kind, scope in scopes.items():
        if not getattr(scope, "can_broadcast", False):
            continue
        members = [h.name for h in hosts if h.connection == kind and h.name not in unavailable]
        groups: dict[tuple, list[str]] = {}
        for name in members:
            result[name] = {}
            groups.setdefault(tuple(t for _, t in plan_for(name)), []).append(name)
        for group in groups.values():
            for f, target in plan_for(group[0]):
                alive = [h for h in group if not any(result[h].values())]
                if not alive:
                    break
                try:
                    got = await scope.broadcast(f.path, target, alive, mode=f.mode, timeout_s=timeout_s,
                                                dir_mode=folder_mode(f.dir_mode, explicit_dest=True))
                except TransferError as exc:
                    got = {h: str(exc) for h in alive}
                for h in alive:
                    result[h][target] = got.get(h, "sbcast said nothing for this node")
    return result


def _record_file(out: Any, observers: Observers, host: str, src: str, dest: str, size: int, verb: str) -> None:
    out.files = [*(out.files or []), {"src": src, "dest": dest, "bytes": size}]
    out.bytes = (out.bytes or 0) + size
    _log(observers, host, f"{verb} {src} -> {dest} ({size} bytes)")


async def _host(run: RunModel, observers: Observers, host: Any, unavailable: dict[str, str], work, timeout_s: float,
                done: dict[str, list[dict]]) -> None:
    """One host's transfer: its outcome (ok / failed naming the path and cause / unreachable),
    time and events; the connection closed whatever happens."""
    out = run.host(host.name)
    out.files, out.bytes = [], 0
    t0, out.started = time.monotonic(), utc_now()  # started: interrupted, not "not started", if cut off
    observers.emit("host.started", host.name)
    conn_box: list = []
    try:
        if host.name in unavailable:
            raise HostUnreachable(host.name, unavailable[host.name])
        await within(work(out, conn_box), timeout_s)
        out.status = "ok"
    except HostUnreachable as exc:
        out.status, out.error, out.reachable = "unreachable", exc.cause, False
    except asyncio.TimeoutError:
        stall = next((s for s in (c.login_stall() for c in conn_box) if s), None)  # its login shell, still in its rc
        out.status, out.error = "failed", f"timed out after {timeout_s:g} s (--timeout)" + (f": {stall}" if stall else "")
    except (CommandTimeout, FleetError) as exc:
        out.status, out.error = "failed", host_message(host.name, exc)
    finally:
        for conn in conn_box:
            if getattr(conn, "stats", None):
                out.connection = dict(conn.stats)
            await conn.close()
    done[host.name] = list(out.files or [])
    out.duration_s = round(time.monotonic() - t0, 3)
    observers.emit("host.finished", host.name, status=out.status, error=out.error, duration_s=out.duration_s,
                   files=len(out.files or []), bytes=out.bytes or 0)


def lost_message(host: str, src: str, exc: TransferLost, left: Sequence[str], fetched: int,
                 also: Sequence[str] = (), shown: int = 3) -> str:
    """One line for a fetch of ``src`` cut off by a lost connection or SFTP channel (``exc``, its
    cause named once): how many files were not fetched (``left``, from the one being read; the first
    ``shown`` named), that the ``fetched`` ones before are kept (their part files were removed), then
    ``also``: what had failed before the loss (unreadable files, closed folders)."""
    named = ", ".join(left[:shown]) + (f" and {len(left) - shown} more" if len(left) > shown else "")
    kept = f"the {fetched} fetched before {'are' if fetched != 1 else 'is'} kept" if fetched else "none was fetched"
    return (f"{host}: fetch {src}: {host_message(host, exc)}: {len(left)} file{'s' if len(left) != 1 else ''} "
            f"not fetched ({named}); {kept}" + ("; " + "; ".join(also) if also else ""))


async def fetch_from_hosts(hosts: Sequence[Any], src: str, dest_template: str, *, run: RunModel,
                           observers: Observers, forks: int = 50, timeout_s: float = 600.0,
                           connect_options: ConnectOptions | None = None, flat: bool = False) -> dict[str, list[dict]]:
    """Fetch ``src`` (a file or folder on each host, recursively) to the controller.

    Args:
        hosts: inventory hosts.
        src: the path on the hosts (relative: to the login folder; ``~/``: the login user's
            ``$HOME``); ``{host}`` in it is each host's inventory name.
        dest_template: the controller path (:mod:`fleetctl.engine.fetch_paths`): files land at
            ``DEST/<host>/<path on the host>``, or, with ``{host}`` in it or ``flat``, as given.
        run: the run (kind ``fetch``); outcomes as :func:`copy_to_hosts`. A host where ``src`` is
            missing fails, naming the path; a symlink there is refused, never followed. A file of a
            folder that cannot be read there (``Permission denied``), or a folder in it the login user
            cannot list or enter, fails the host, naming each, after every other file is fetched.
        observers, forks, timeout_s, connect_options: as :func:`copy_to_hosts`.
        flat: Ansible's ``flat: yes``: DEST is the file (a folder when it ends in ``/``).

    Returns:
        host -> the files fetched (``src`` on the host, ``dest`` on the controller, ``bytes``).

    Raises:
        InputError: what :func:`fleetctl.engine.fetch_paths.check_fetch` refuses (before any host
            is touched).
    """
    check_fetch(src, dest_template, [h.name for h in hosts], flat=flat)
    run.argv = ["fetch", *(["--flat"] if flat else []), src, dest_template]
    done: dict[str, list[dict]] = {}
    options = replace(connect_options or ConnectOptions(), run_id=run.run_id)
    made = missing_folders(dest_template, [h.name for h in hosts])
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(remove_empty_folders, made)  # those this fetch made and left empty, last
        scopes = await enter_scopes(stack, hosts, options, run=run, observers=observers)
        unavailable = await prepare_hosts(scopes, hosts)

        async def one(host: Any) -> None:
            async def work(out, conn_box: list) -> None:
                conn = scopes[host.connection].connection(host_ref(host))
                conn_box.append(conn)
                # what the connection learns on its own (a part file an interrupt left) goes to the record
                conn.on_note = lambda message, name=host.name: observers.emit("note.added", name, message=message)
                # and what its login shell printed before a command it never ran, or an upload whose stdin it read
                conn.on_login_line = lambda ln, name=host.name: observers.line(name, ln, False)
                await conn.open()
                mine = host_src(src, host.name)
                kind, root, paths, skipped = await remote_sources(conn, host.name, mine, timeout_s)
                closed = [f"{path.rstrip('/')}/: Permission denied (the login user cannot list it)"
                          for path, what in skipped if what == CLOSED]  # its files never listed: not "ok"
                for path, what in skipped:
                    if what != CLOSED:
                        _log(observers, host.name, f"skipped {path}: {skip_note(what)}", "stderr")
                for why in closed:
                    _log(observers, host.name, f"not fetched: {why}", "stderr")
                unread: list[str] = []  # one unreadable file loses none of the others
                for at, remote in enumerate(paths):
                    local = local_dest(dest_template, host.name, FetchSource(mine, root, kind), remote, flat=flat)
                    try:
                        await conn.get(remote, local)
                        size = os.path.getsize(local)
                    except TransferLost as exc:  # the channel or connection is gone: no other file would come
                        raise TransferError(lost_message(host.name, mine, exc, paths[at:], at - len(unread),
                                                         unread + closed)) from None
                    except ControllerWriteError as exc:  # this controller's disk (full, read-only): no other
                        raise TransferError(host_message(host.name, exc).replace(  # file would land either
                            f"get {remote}: ", f"fetch {remote}: ", 1)) from None
                    except TransferError as exc:  # the host's side: this file cannot be read there
                        why = host_message(host.name, exc)
                        if not why.startswith("get "):
                            raise  # the connection itself failed: no other file would come
                        unread.append(why)
                        _log(observers, host.name, f"not fetched: {why}", "stderr")
                        continue
                    except OSError as exc:  # the controller's disk: full, read-only, permission denied
                        from ..connection.storagefaults import name_write_error

                        named = name_write_error(f"[Errno {exc.errno}] {exc.strerror}", local)
                        raise TransferError(f"{host.name}: fetch {remote} -> {local}: "
                                            f"{named or exc.strerror or exc}") from None
                    _record_file(out, observers, host.name, remote, local, size, "fetched")
                if unread or closed:
                    what = [f"{len(unread)} of {len(paths)} files"] if unread else []
                    what += [f"{len(closed)} folder{'s' if len(closed) > 1 else ''}"] if closed else []
                    got = len(paths) - len(unread)
                    raise TransferError(f"{host.name}: fetch {mine}: {' and '.join(what)} could not be read ("
                                        + (f"the other {got} were fetched" if not closed else f"{got} files were "
                                           f"fetched") + "): " + "; ".join(closed + unread))

            await _host(run, observers, host, unavailable, work, timeout_s, done)

        await for_each_host(hosts, one, forks=forks)
    run.failed_hosts = [h for h, o in run.hosts.items() if o.status != "ok"]
    return done
