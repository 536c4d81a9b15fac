"""A host session: one open connection plus the host's remote folders for this run.

Remote paths never collide between hosts or between concurrent runs, even when hosts share a
home folder over NFS: the working folder is per inventory host (``~/.fleetctl/<host>`` unless the
``workdir`` var says otherwise) and every run gets its own sub-folder ``runs/<run_id>``, created
private to the user (0700).
"""

from __future__ import annotations

import posixpath
import sys
from dataclasses import dataclass, field
from typing import Any

from .connection import Connection, connection_for
from .errors import HostUnreachable
from .inventory import Host


def default_venv(host: Host) -> str | None:
    """The host's ``venv`` var; for a local host without one, the controller's own venv if any."""
    if host.venv:
        return host.venv
    if host.connection == "local" and sys.prefix != sys.base_prefix:
        return sys.prefix
    return None


@dataclass
class HostSession:
    """Everything fleetctl knows about one host during one run.

    Attributes:
        host: the inventory host.
        conn: its open connection.
        run_id: this run's id.
        workdir: absolute remote working folder (per host).
        run_dir: absolute remote folder for this run (``<workdir>/runs/<run_id>``).
        facts: gathered facts (empty until gathered).
        registered: results registered by tasks (``register:``).
    """

    host: Host
    conn: Connection
    run_id: str
    workdir: str = ""
    run_dir: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    registered: dict[str, Any] = field(default_factory=dict)

    @property
    def venv(self) -> str | None:
        return default_venv(self.host)

    @property
    def python(self) -> str:
        """The interpreter builds and installs use: ``<venv>/bin/python3`` (``python3`` without a venv)."""
        venv = self.venv
        return posixpath.join(venv, "bin", "python3") if venv else "python3"

    async def prepare(self) -> None:
        """Resolve the folders and create ``run_dir`` (mode 0700)."""
        base = self.host.workdir or posixpath.join(self.conn.home, ".fleetctl", self.host.name)
        if not posixpath.isabs(base):
            base = posixpath.join(self.conn.home, base)
        self.workdir = base
        self.run_dir = posixpath.join(base, "runs", self.run_id)
        # umask 077 so that the parents mkdir -p creates are private too, not only the last one
        res = await self.conn.run(["/bin/sh", "-c", 'umask 077 && mkdir -p -- "$1"', "fleetctl-mkdir", self.run_dir],
                                  timeout_s=60)
        if res.rc != 0:
            from .errors import TaskFailed

            hint = ""
            if not self.host.workdir and getattr(self.conn, "home_missing", False):
                hint = (f" (the home folder {self.conn.home} of the login user does not exist on the host: set the "
                        f"workdir var to a folder the user can write, e.g. workdir: /tmp/fleetctl)")
            raise TaskFailed(self.host.name, f"cannot create {self.run_dir}: {res.stderr_text.strip()}{hint}", res)


async def open_session(host: Host, run_id: str, *, accept_new_host_keys: bool = False,
                       connect_timeout_s: float = 30.0) -> HostSession:
    """Connect to ``host`` and prepare its folders. Raises HostUnreachable or TaskFailed."""
    conn = connection_for(host, accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout_s)
    try:
        await conn.open()
    except HostUnreachable as exc:
        exc.stats = dict(conn.stats)  # handshake retries and the like, for the run record
        raise
    session = HostSession(host=host, conn=conn, run_id=run_id)
    try:
        await session.prepare()
    except BaseException:
        await conn.close()
        raise
    return session


async def gather_host_facts(session: HostSession, *, timeout_s: float = 180.0) -> dict[str, Any]:
    """Gather the session's facts (uploaded into its run folder), store and return them.

    The ``fallback_archs`` var (default ``9.0a;12.0a``) is the arch list when no GPU is found.
    """
    from .facts import gather_facts

    v = session.host.vars
    facts = await gather_facts(
        session.conn,
        venv=session.venv,
        cuda_home=session.host.cuda_home,
        workdir=session.run_dir,
        fallback_archs=str(v.get("fallback_archs", "9.0a;12.0a")),
        timeout_s=timeout_s,
    )
    cuda = facts.get("cuda") or {}
    if session.host.cuda_home and cuda.get("source") != "cuda_home var":
        notes = facts.setdefault("build", {}).setdefault("notes", [])
        notes.insert(0, f"cuda_home {session.host.cuda_home} has no bin/nvcc; found {cuda.get('home') or 'no toolkit'} "
                        f"instead (builds refuse this until cuda_home is fixed)")
    session.facts = facts
    return facts
