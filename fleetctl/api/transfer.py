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
                         accept_new_host_keys: bool = False, ssh_options: Sequence[str] = ()):
    """Copy ``src`` to ``dest`` on every host (``kind="copy"``; ``dest`` may hold ``{host}``, each
    host's own DEST; an existing folder at ``dest`` gets the file inside it, as ``cp``) or fetch ``src`` from every host to
    ``dest`` here (``kind="fetch"``; ``dest`` may hold ``{host}``, else files land in
    ``dest/<host>/`` as ``ansible -m fetch`` puts them), recorded as a run of that kind.

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

    Returns:
        ``(run, record)``; each host's outcome holds ``files`` and ``bytes``.

    Raises:
        InputError: ``copy`` of a ``src`` missing on this controller (before any host is touched),
            or the run record cannot be written.
    """
    from ..connection.registry import ConnectOptions
    from ..engine import transfer

    if kind not in ("copy", "fetch"):
        raise ValueError(f"kind: copy or fetch, not {kind!r}")
    if kind == "copy":
        transfer.local_sources(src)  # a missing SRC is bad input before any host is touched
    run, record, obs = new_run(kind, command=command, observers=observers, verbose=verbose)
    run.pattern = pattern
    options = ConnectOptions(accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout_s,
                             ssh_options=tuple(ssh_options))
    fn = transfer.copy_to_hosts if kind == "copy" else transfer.fetch_from_hosts
    await guarded_async(run, obs, fn(hosts, src, dest, run=run, observers=obs, forks=forks, timeout_s=timeout_s,
                                     connect_options=options))
    finish_run(run, obs, "failed" if run.failed_hosts else "ok")
    return run, record
