"""One host of a Slurm run scope: :class:`SlurmConnection`, whose commands are job steps of the
scope's allocation (:mod:`~fleetctl.connection.slurm_step`), whose puts are ``sbcast`` to the
node's own disk (shared by the allocation's hosts, :mod:`~fleetctl.connection.slurm_fanout`) and
whose gets are steps that write the file to their stdout (:mod:`~fleetctl.connection.slurm_transfer`);
and :class:`SlurmMember`, what the scope knows about the host. The scope itself, its allocations
and its fan-out are :mod:`fleetctl.connection.slurm`."""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import HostUnreachable, TransferError
from .base import CommandResult, Connection, LineCallback, cut_off_by_close, folder_mode
from .command import wrap_argv
from .registry import HostRef
from .slurm_alloc import Allocation
from .slurm_client import SlurmClient
from .slurm_end import SUSPECTED, SlurmJobEnded, StepEnd, learn_and_raise, raise_if_ended
from .slurm_fanout import PutCoalescer
from .slurm_nodes import SlurmNode
from .slurm_settings import SlurmSettings
from .slurm_step import run_step
from .slurm_transfer import download


@dataclass
class SlurmMember:
    """One host of a :class:`~fleetctl.connection.slurm.SlurmScope`: its node, and what
    ``prepare`` found (``info``: sinfo's answer; ``allocation``: its job; ``home``: the node's
    ``$HOME``; ``error``: why it cannot be reached, one line; ``refused``: why Slurm refused its
    request's settings, one line; ``waiting``: the request still waiting for the node, busy with
    other work, that ``prepare`` went on without: the host's own connection waits for it)."""

    ref: HostRef
    node: str
    client: SlurmClient
    info: SlurmNode | None = None
    allocation: Allocation | None = None
    home: str = ""
    error: str | None = None
    #: the allocation was refused for a host var's value (``slurm_partition`` Slurm does not
    #: know...): the host *fails* with this line; it is not unreachable
    refused: str | None = None
    waiting: asyncio.Task | None = None


def resolve_remote(path: str, home: str) -> str:
    """``path`` on a node whose home is ``home``: absolute paths as they are, ``~``, ``~/x`` and
    relative paths under the home (``/`` when unknown); normalised (POSIX)."""
    if path == "~" or path.startswith("~/"):
        return posixpath.normpath(posixpath.join(home or "/", path[2:]))
    if not path.startswith("/"):
        return posixpath.normpath(posixpath.join(home or "/", path))
    return posixpath.normpath(path)


class MemberScope(Protocol):
    """What a host's connection needs of its scope (:class:`~fleetctl.connection.slurm.SlurmScope`):
    the members by host name, the put coalescer, and a host's member, prepared on demand."""

    members: dict[str, SlurmMember]
    fanout: PutCoalescer

    async def member(self, host: HostRef) -> SlurmMember: ...


class SlurmConnection(Connection):
    """One host of a :class:`~fleetctl.connection.slurm.SlurmScope`: its commands are job steps of the scope's allocation.

    Attributes:
        node: the Slurm node name.
        home: the node's ``$HOME`` as the probe step saw it (after :meth:`open`).
    """

    def __init__(self, host: HostRef, scope: MemberScope) -> None:
        self.host = host.name
        self.ref = host
        self.scope = scope
        settings = host.settings
        assert isinstance(settings, SlurmSettings)
        self.node = settings.node or host.name
        self._member: SlurmMember | None = None

    @property
    def slurm_node(self) -> SlurmNode | None:
        """What sinfo said about the node (for facts: :func:`fleetctl.slurm_facts.slurm_view`)."""
        m = self.scope.members.get(self.host)
        return m.info if m else None

    def extra_facts(self) -> dict[str, Any]:
        """Slurm's view of the node (state, reason, features, GRES, CPUs, memory) as ``slurm``."""
        node = self.slurm_node
        return {"slurm": node.view()} if node is not None else {}

    async def open(self) -> None:
        """Join the scope's allocation (preparing this host now when the scope has not yet).

        Raises:
            HostUnreachable: the node is drained/down (Slurm's reason), unknown, not allocated in
                time, or no step starts on it.
        """
        self._member = await self.scope.member(self.ref)
        self.home = self._member.home

    async def close(self) -> None:
        """Nothing to close: the allocation belongs to the scope (a step it ends from now on is
        :class:`~fleetctl.errors.ClosedHere`, as over SSH)."""
        self.closed_here = True

    def _require(self) -> SlurmMember:
        if self._member is None:
            raise HostUnreachable(self.host, "not opened")
        return self._member

    async def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                  timeout_s: float | None = None, on_line: LineCallback | None = None, stdin: bytes | None = None,
                  become: bool = False, capture_bytes: int | None = None) -> CommandResult:
        """Run ``argv`` as a job step on the node; see :meth:`Connection.run`.

        ``capture_bytes``: the result keeps the last ``capture_bytes`` of each stream (whole lines
        where possible); every line still reaches ``on_line``.

        ``env`` is applied with ``env NAME=VALUE`` and ``cwd`` with a fixed ``/bin/sh`` script that
        gets the directory as an argument (exit 125 when it is missing), exactly as over SSH
        (:func:`~fleetctl.connection.command.wrap_argv`); no shell ever parses the argv. The step
        starts in the node's home. On timeout the step is cancelled (Slurm kills its processes).
        """
        m = self._require()
        argv = [str(a) for a in argv]
        wrapped = wrap_argv(argv, env=env, cwd=cwd, become=become)
        self._check_job(m)
        try:
            with self.scope.fanout.busy(self.host), cut_off_by_close(self, argv[0]):
                res = await run_step(m.client, self.host, m.allocation.job_id, m.node, wrapped,  # type: ignore[union-attr]
                                     chdir=m.home or "/", timeout_s=timeout_s, on_line=on_line, stdin=stdin,
                                     display_argv=argv)
        except SlurmJobEnded as exc:
            await self._learn_end(m, exc.end)
            raise
        except HostUnreachable:  # a step refused on a node Slurm took out of the job is its node failure
            await self._learn_end(m, SUSPECTED)
            raise
        if capture_bytes is not None:
            for name in ("stdout", "stderr"):
                data = getattr(res, name)
                if len(data) > capture_bytes:
                    tail = data[-capture_bytes:]
                    nl = tail.find(b"\n")
                    tail = tail[nl + 1:] if 0 <= nl < len(tail) - 1 else tail
                    setattr(res, name, tail)
                    setattr(res, f"{name}_dropped", len(data) - len(tail))
        return res

    def _check_job(self, m: "SlurmMember") -> None:
        """Raise the job's end again when Slurm already ended this host's job (time limit...)."""
        raise_if_ended(m.allocation, self.host, m.node)

    async def _learn_end(self, m: "SlurmMember", end: StepEnd) -> None:
        await learn_and_raise(m.allocation, m.client, end, self.host, m.node)

    async def put(self, local_path: str, remote_path: str, *, mode: int | None = None, dir_mode: int | None = None,
                  explicit_dest: bool = False) -> None:
        """Upload with ``sbcast`` to the node's own disk (temporary name, size check, rename);
        missing folders get ``dir_mode`` (None: 0700, or, with ``explicit_dest``, 0777 less the
        step's umask, as ``mkdir -p``: :func:`~fleetctl.connection.base.folder_mode`).

        Other hosts of the allocation putting the same bytes to the same path with the same mode
        at about the same time share the sbcast (:class:`~fleetctl.connection.slurm_fanout.PutCoalescer`);
        the answer is still this node's own.

        Raises:
            TransferError: naming the host, the path and the cause.
        """
        m = self._require()
        self._check_job(m)
        dest = resolve_remote(remote_path, m.home)
        try:
            why = await self.scope.fanout.put(self.host, m.node, m.allocation, local_path, dest,  # type: ignore[arg-type]
                                              mode=0o644 if mode is None else mode,
                                              dir_mode=folder_mode(dir_mode, explicit_dest))
        except TransferError as exc:
            await self._learn_end(m, SUSPECTED)  # a job Slurm ended is named as such
            raise TransferError(f"{self.host}: {exc}") from None
        if why is not None:
            await self._learn_end(m, SUSPECTED)
            raise TransferError(f"{self.host}: upload {local_path} -> {dest} on node {m.node}: {why}")

    async def get(self, remote_path: str, local_path: str) -> None:
        """Download a regular file over job steps' stdout (a symlink is refused; a large file in
        byte ranges at once, see :mod:`~fleetctl.connection.slurm_transfer`), written to a
        temporary file beside ``local_path`` and renamed into place.

        Raises:
            TransferError: naming the host, the path and the cause.
        """
        m = self._require()
        self._check_job(m)
        try:
            with self.scope.fanout.busy(self.host):
                await download(m.client, self.host, m.allocation.job_id, m.node,  # type: ignore[union-attr]
                               resolve_remote(remote_path, m.home), local_path, chdir=m.home or "/")
        except SlurmJobEnded as exc:
            await self._learn_end(m, exc.end)
            raise
        except TransferError:
            await self._learn_end(m, SUSPECTED)
            raise


async def settle_request(work: Any, group: list[SlurmMember]) -> None:
    """Run a background request (``work``) to its end; an unexpected error is its hosts' line."""
    try:
        await work
    except Exception as exc:  # noqa: BLE001 - a waiting host must get an answer, never hang or lose it
        for m in group:
            if not (m.allocation or m.error or m.refused):
                m.error = f"allocation of Slurm node {m.node} failed: {exc}"


def member_chunks(members: list[SlurmMember], size: int) -> list[list[SlurmMember]]:
    """``members`` in node-name order, cut into parts of at most ``size`` (at least 1)."""
    ordered = sorted(members, key=lambda m: m.node)
    size = max(1, size)
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]
