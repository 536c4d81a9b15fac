"""Ad-hoc file transfers (``copy``: controller -> hosts; ``fetch``: hosts -> controller), the CLI's
and the API's one path: open the record, run the engine (:mod:`fleetctl.engine.transfer`: the
connection's put/get, SFTP with its exec fallback, Slurm's ``sbcast`` for copy), close the record."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .lifecycle import finish_run, guarded_async, new_run


async def transfer_files(kind: str, hosts: Sequence[Any], src: str, dest: str, *, pattern: str,
                         command: Sequence[str], observers: Iterable[Any] = (), verbose: int = 0, forks: int = 50,
                         timeout_s: float = 600.0, connect_timeout_s: float = 30.0,
                         accept_new_host_keys: bool = False, ssh_options: Sequence[str] = (), flat: bool = False,
                         secrets: Iterable[str] = ()):
    """Copy ``src`` to ``dest`` on every host (``kind="copy"``; ``dest`` may hold ``{host}``, each
    host's own DEST; paths as Ansible's copy module reads them: :mod:`fleetctl.engine.transfer`) or fetch ``src`` from every host to
    ``dest`` here (``kind="fetch"``: as Ansible's fetch, each file at ``dest/<host>/<its path on
    the host>``; ``dest`` holding ``{host}``, or ``flat``, is taken as given:
    :mod:`fleetctl.engine.fetch_paths`), recorded as a run of that kind.

    Args:
        kind: ``"copy"`` or ``"fetch"``.
        hosts: the selected inventory hosts.
        src, dest: as ``fleetctl copy``/``fetch`` take them (``SRC/`` copies a folder's contents;
            a ``dest`` ending in ``/`` is a folder).
        pattern, command: the host pattern and what started the run, for the record.
        observers: observers besides the record.
        verbose: the -v level.
        forks: hosts worked on at once.
        timeout_s: seconds one host's whole transfer may take.
        connect_timeout_s: seconds to reach and log in to one host.
        accept_new_host_keys: record host keys of hosts that have none.
        ssh_options: one-off ssh_config options, ``"Name=value"`` each (``fleetctl -o``).
        flat: (fetch only) Ansible's ``flat: yes``: ``dest`` is the file, or a folder when it
            ends in ``/``; without ``{host}`` in it, for one host only.
        secrets: more secret values to mask wherever the run writes or prints them, from the
            first line on: the CLI's ``-e`` secrets (:func:`fleetctl.util.redact.unwrap`), which the
            recorded ``command`` holds.

    Returns:
        ``(run, record)``; each host's outcome holds ``files`` and ``bytes``.

    Raises:
        InputError: a ``dest`` (or fetch's ``src``) holding ``{{ }}`` or a placeholder other than
            ``{host}``, ``copy`` of a ``src`` missing on this controller, a ``fetch`` whose hosts would
            write over each other or outside ``dest`` (both before any host is touched), or the
            run record cannot be written.
    """
    from ..connection.registry import ConnectOptions
    from ..engine import transfer
    from ..engine.copy_sources import local_sources
    from ..engine.fetch_paths import check_fetch, check_placeholders

    if kind not in ("copy", "fetch"):
        raise ValueError(f"kind: copy or fetch, not {kind!r}")
    if kind == "copy":
        if flat:
            raise ValueError("flat: fetch only")
        check_placeholders("copy", "DEST", dest)  # {{ }} or {hostname}: bad input, as a missing SRC
        local_sources(src)  # a missing SRC is bad input before any host is touched
    else:  # hosts that would write over each other: bad input before any host is touched
        check_fetch(src, dest, [h.name for h in hosts], flat=flat)
    run, record, obs = new_run(kind, command=command, observers=observers, verbose=verbose, secrets=secrets)
    run.pattern = pattern
    options = ConnectOptions(accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout_s,
                             ssh_options=tuple(ssh_options))
    if kind == "copy":
        work = transfer.copy_to_hosts(hosts, src, dest, run=run, observers=obs, forks=forks, timeout_s=timeout_s,
                                      connect_options=options)
    else:
        work = transfer.fetch_from_hosts(hosts, src, dest, run=run, observers=obs, forks=forks, timeout_s=timeout_s,
                                         connect_options=options, flat=flat)
    await guarded_async(run, obs, work, hosts)
    finish_run(run, obs, "failed" if run.failed_hosts else "ok")
    return run, record
