"""The Slurm connection kind: hosts are nodes of the run's allocations (one job per request), commands are job steps.

For clusters whose nodes refuse SSH unless you hold a job there (pam_slurm_adopt), and because
Slurm is the engine such a site already trusts to start work on a thousand nodes at once.

A run's :class:`SlurmScope`:

1. ``prepare(hosts)`` asks ``sinfo`` once about every node; a drained, down or non-responding node
   is unreachable with Slurm's own reason, and one Slurm does not know is named as such. The
   others are allocated with ``salloc --no-shell`` (:mod:`~fleetctl.connection.slurm_alloc`): one
   job for the idle nodes that share the same request (partition, account, QOS, time, reservation,
   GRES; at most :data:`MAX_NODES_PER_JOB` nodes a job, so no job runs out of steps), one job each
   for nodes busy with other work, whose requests ``prepare`` does not wait for: they go on in the
   background and only that host's connection waits (a node whose dead slurmd leaves it COMPLETING
   never holds the others). An allocation not granted within the run's connect deadline fails its
   hosts only, naming the node's state when Slurm holds it back. One probe step
   per allocation then learns each node's ``$HOME`` and proves that steps start there.
2. ``connection(host)`` hands out a :class:`~fleetctl.connection.slurm_host.SlurmConnection`: ``run`` is a job step on the node
   (:mod:`~fleetctl.connection.slurm_step`), ``put`` an ``sbcast`` to the node's local disk,
   ``get`` a step that writes the file to its stdout. Puts of the same bytes to the same path
   from several hosts of one allocation at about the same time (a ``copy`` task on every host)
   go out as **one** ``sbcast`` for all of them (:mod:`~fleetctl.connection.slurm_fanout`).
3. :meth:`SlurmScope.broadcast` sends one file to many nodes with **one** ``sbcast`` per
   allocation (Slurm's tree fan-out from slurmd to slurmd, not one copy per node from the
   controller): how an arch class's wheel reaches its members.
4. Leaving the scope releases every allocation: at the end, on failure and on Ctrl-C/cancel; a
   lifeline process releases it even when fleetctl is killed outright.

Host vars (:class:`~fleetctl.connection.slurm_settings.SlurmSettings`): ``slurm_node`` or ``ansible_host`` (the Slurm node name;
default the inventory name), ``slurm_partition``, ``slurm_account``, ``slurm_qos``, ``slurm_time``,
``slurm_reservation``, ``slurm_exclusive`` (default true: whole nodes, so builds get every CPU) and
``slurm_launcher`` (a command prefix for the client tools: ``ssh login01``, ``nsenter --net=...``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
from collections.abc import Sequence

from ..errors import FleetError, HostUnreachable, TransferError
from .base import OWN_DIR_MODE
from .registry import ConnectionKind, ConnectOptions, HostRef, KindScope
from .slurm_alloc import Allocation, AllocationError, AllocationRequest, allocate, not_granted_lines, refused_setting
from .slurm_client import SlurmClient, SlurmError, last_line
from .slurm_fanout import PutCoalescer, send
from .slurm_host import SlurmConnection, SlurmMember, member_chunks, resolve_remote, settle_request
from .slurm_nodes import hostlist, query_nodes
from .slurm_settings import SlurmSettings
from .slurm_step import LAUNCH_FAILED as _LAUNCH_FAILED
from .slurm_step import step_argv, step_name

#: Allocation requests in flight at once (slurmctld serialises them anyway).
MAX_SALLOCS = 16

#: Most nodes in one job. Every command, probe and upload of a host is a job step (uploads of the
#: same file by the job's hosts together are one), and Slurm caps the steps one job may start
#: (``MaxStepCount``, default 40,000; slurm.conf(5)). A first deploy of kernel_src measured 24-33
#: steps a host with its uploads shared, up to 54 with none shared (docs/slurm.md), so 1,000 nodes
#: in one job could run out part-way; 256 nodes a job stay at a third of the default at worst.
#: More jobs cost one ``salloc`` each and, for each file sent to many nodes, one ``sbcast`` each
#: (sbcast's tree fan-out is per job).
MAX_NODES_PER_JOB = 256

#: Fixed script of the probe step: each node says its name and home.
_PROBE = 'printf "%s\\t%s\\n" "$SLURMD_NODENAME" "$HOME"'


class SlurmRequestRefused(FleetError):
    """slurmctld refused the allocation for a host var's value (``slurm_partition`` it does not
    know, an invalid ``slurm_qos``...): the host *failed* (it is not unreachable); ``str`` names
    the var, its value and Slurm's words."""


class SlurmScope(KindScope):
    """One run's Slurm allocations and the hosts on them (see the module docstring)."""

    can_broadcast = True

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self.members: dict[str, SlurmMember] = {}
        self.allocations: list[Allocation] = []
        self._names = itertools.count(1)
        self._token = secrets.token_hex(3)
        self._lock = asyncio.Lock()
        #: requests for busy nodes that prepare went on without, with their members
        self._waiting: list[tuple[asyncio.Task, list[SlurmMember]]] = []
        #: puts of several hosts -> one sbcast (see :mod:`~fleetctl.connection.slurm_fanout`)
        self.fanout = PutCoalescer(self._live_hosts)

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.fanout.close()
        finally:
            await self.release()

    async def release(self, hosts: Sequence[str] | None = None) -> None:
        """Release the allocations (all, or those whose every host is in ``hosts``: a finished
        batch). Never raises; when cancelled meanwhile, cancels the jobs synchronously first."""
        done = set(hosts) if hosts is not None else None
        # busy nodes' requests still waiting are withdrawn first: one granted meanwhile is released below
        waits = [t for t, group in self._waiting if not t.done() and (
            done is None or all(m.ref.name in done for m in group))]
        for task in waits:
            task.cancel()
        if waits:
            await asyncio.shield(asyncio.gather(*waits, return_exceptions=True))
        chosen = [a for a in self.allocations if not a.released and (
            done is None or all(m.ref.name in done for m in self.members.values() if m.allocation is a))]
        if not chosen:
            return
        try:
            await asyncio.shield(asyncio.gather(*(a.release() for a in chosen), return_exceptions=True))
        except asyncio.CancelledError:
            for alloc in chosen:
                alloc.release_now()
            raise

    def job_name(self) -> str:
        run = self.options.run_id or "run"
        return f"fleetctl-{run}-{self._token}-{next(self._names)}"

    # -- prepare --------------------------------------------------------------------------------

    async def prepare(self, hosts: Sequence[HostRef]) -> dict[str, str]:
        """Find drained/down nodes, allocate the rest, probe them. See :meth:`KindScope.prepare`.

        Returns:
            host name -> why it cannot be reached (Slurm's reason for a drained node, an
            allocation refused or not granted in time, a node where no step starts). A host whose
            request Slurm refused for a host var's value is not listed: it fails when connected
            (:class:`SlurmRequestRefused`); nor is a host whose busy node's request still waits in
            the background (:meth:`member` waits for it).
        """
        async with self._lock:
            fresh: list[SlurmMember] = []
            for ref in hosts:
                if ref.name in self.members:
                    continue
                s = ref.settings
                assert isinstance(s, SlurmSettings), f"{ref.name}: not Slurm settings"
                member = SlurmMember(ref=ref, node=s.node or ref.name, client=SlurmClient(s.launcher))
                self.members[ref.name] = member
                fresh.append(member)
            by_client: dict[SlurmClient, list[SlurmMember]] = {}
            for m in fresh:
                by_client.setdefault(m.client, []).append(m)
            await asyncio.gather(*(self._prepare_cluster(c, ms) for c, ms in by_client.items()))
            return {h.name: self.members[h.name].error for h in hosts if self.members[h.name].error}

    async def _prepare_cluster(self, client: SlurmClient, members: list[SlurmMember]) -> None:
        try:
            known = await query_nodes(client, {m.node for m in members}, timeout_s=self.options.connect_timeout_s)
        except SlurmError as exc:
            for m in members:
                m.error = f"cannot ask Slurm about node {m.node}: {exc}"
            return
        groups: dict[tuple, list[SlurmMember]] = {}
        for m in members:
            m.info = known.get(m.node)
            if m.info is None:
                m.error = f"Slurm does not know node {m.node} (sinfo lists no such node; launcher: {client.describe()})"
                continue
            if m.info.unavailable:
                m.error = m.info.unavailable
                continue
            s: SlurmSettings = m.ref.settings  # type: ignore[assignment]
            request = AllocationRequest(partition=s.partition, account=s.account, qos=s.qos, time=s.time,
                                        reservation=s.reservation, exclusive=s.exclusive, gres=m.info.gres)
            key = (request, "idle") if m.info.idle else (request, m.node)
            groups.setdefault(key, []).append(m)
        gate = asyncio.Semaphore(MAX_SALLOCS)
        # one deadline for the whole preparation: requests queued behind the gate get what is left
        # of it, so a thousand busy nodes still fail within the deadline, not a thousand times it
        loop = asyncio.get_running_loop()
        deadline_s = self.options.connect_timeout_s
        deadline_at = loop.time() + deadline_s

        async def one(request: AllocationRequest, group: list[SlurmMember]) -> None:
            nodes = sorted({m.node for m in group})
            async with gate:
                try:
                    left_s = deadline_at - loop.time()
                    if left_s < 1.0:
                        raise AllocationError(f"allocation of {hostlist(nodes)} not granted within {deadline_s:g} s "
                                              "(not requested: the deadline passed while other requests waited)",
                                              waited_s=deadline_s)
                    alloc = await allocate(client, request, nodes, job_name=self.job_name(), deadline_s=left_s,
                                           run_deadline_s=deadline_s)
                except SlurmError as exc:
                    cause = getattr(exc, "cause", "")
                    lines = await not_granted_lines(client, nodes, exc) if isinstance(exc, AllocationError) else {}
                    for m in group:
                        refused = refused_setting(cause, request, m.info.partitions if m.info else ()) if cause else None
                        if refused:
                            m.refused = refused
                        else:
                            m.error = lines.get(m.node, str(exc))
                    return
            self.allocations.append(alloc)
            for m in group:
                m.allocation = alloc
            await self._probe(alloc, group)

        # Idle nodes first: Slurm starts a job at submission only when no pending job of higher
        # priority waits in the partition, so a request for busy nodes, queued first, would hold
        # the idle ones back until the next scheduling cycle. At most MAX_NODES_PER_JOB a job.
        await asyncio.gather(*(one(req, part) for (req, kind), group in groups.items() if kind == "idle"
                               for part in member_chunks(group, MAX_NODES_PER_JOB)))
        # A busy node's request may wait the whole deadline (a node whose slurmd died stays
        # COMPLETING): it goes on in the background; only its own host waits for it (member()).
        for (req, kind), group in groups.items():
            if kind != "idle":
                task = asyncio.ensure_future(settle_request(one(req, group), group))
                self._waiting.append((task, group))
                for m in group:
                    m.waiting = task

    async def _probe(self, alloc: Allocation, group: list[SlurmMember]) -> None:
        """One step on every node of ``alloc`` learns each node's $HOME. A launch that fails on one
        node ends the whole step (srun), so nodes that did not answer are asked again one by one;
        a node that still does not answer is unreachable with srun's message."""
        nodes = sorted({m.node for m in group})
        homes, cause = await self._probe_nodes(alloc, nodes)
        causes = {m.group(1): m.group(2) for m in _LAUNCH_FAILED.finditer(cause)}
        missing = [n for n in nodes if n not in homes and n not in causes]
        if missing and len(nodes) > 1:
            gate = asyncio.Semaphore(MAX_SALLOCS)

            async def alone(node: str) -> tuple[dict[str, str], str]:
                async with gate:
                    return await self._probe_nodes(alloc, [node])

            for node, (found, why) in zip(missing, await asyncio.gather(*(alone(n) for n in missing))):
                homes.update(found)
                if node not in found:
                    causes[node] = why
        for m in group:
            if m.node in homes:
                m.home = homes[m.node] or "/"
            else:
                m.error = f"no job step starts on Slurm node {m.node} (job {alloc.job_id}): " \
                          f"{causes.get(m.node, cause)}"

    async def _probe_nodes(self, alloc: Allocation, nodes: list[str]) -> tuple[dict[str, str], str]:
        argv = step_argv(alloc.job_id, hostlist(nodes), ["/bin/sh", "-c", _PROBE], tasks=len(nodes),
                         node_count=len(nodes), name=step_name())
        try:
            res = await alloc.client.call(argv, timeout_s=max(30.0, self.options.connect_timeout_s), check=False)
        except SlurmError as exc:
            return {}, str(exc)
        homes: dict[str, str] = {}
        for line in res.stdout_text.splitlines():
            node, sep, home = line.partition("\t")
            if sep and node.strip() in nodes:
                homes[node.strip()] = home.strip()
        failed = "\n".join(m.group(0) for m in _LAUNCH_FAILED.finditer(res.stderr_text))
        return homes, failed or last_line(res.stderr_text) or f"srun exited {res.rc}"

    # -- connections ----------------------------------------------------------------------------

    def connection(self, host: HostRef) -> SlurmConnection:
        return SlurmConnection(host, self)

    def _live_hosts(self, alloc: Allocation) -> list[str]:
        """The inventory names of the reachable hosts on ``alloc``."""
        return [m.ref.name for m in self.members.values() if m.allocation is alloc and not m.error]

    async def member(self, host: HostRef) -> SlurmMember:
        """The host's member, prepared now if it is not yet, once its busy node's request ended.

        Raises:
            HostUnreachable: with the reason prepare (or that request) found.
            SlurmRequestRefused: Slurm refused a host var's value (an unknown partition...).
        """
        if host.name not in self.members:
            await self.prepare([host])
        m = self.members[host.name]
        if m.waiting is not None:
            await asyncio.wait([m.waiting])  # shared by the request's hosts: never cancelled here
            if not (m.allocation or m.error or m.refused):
                m.error = f"allocation of Slurm node {m.node} withdrawn: the run released it before it was granted"
        if m.error:
            raise HostUnreachable(host.name, m.error)
        if m.refused:
            raise SlurmRequestRefused(m.refused)
        return m

    # -- fan-out --------------------------------------------------------------------------------

    async def broadcast(self, local_path: str, remote_path: str, hosts: Sequence[str | HostRef], *,
                        mode: int | None = None, timeout_s: float = 600.0,
                        dir_mode: int | None = OWN_DIR_MODE) -> dict[str, str | None]:
        """Send one local file to ``remote_path`` on many hosts: one ``sbcast`` per allocation.

        ``remote_path`` is absolute, or relative to / ``~``-prefixed for each node's home. On each
        node the file first lands beside its destination under a temporary name, is checked for its
        full size, gets ``mode`` (default 0644) and is renamed into place; parent folders are
        created (``dir_mode``, default 0700; None: 0777 less the step's umask, as ``mkdir -p``, for
        an operator's DEST: :func:`~fleetctl.connection.base.folder_mode`). A node where any of it fails reports why; the others are not affected
        (when the group failed as a group, each node is tried again alone).

        Args:
            local_path: the file on the controller.
            remote_path: its path on every node.
            hosts: inventory host names (or refs) already prepared in this scope.
            mode: permission bits of the result.
            timeout_s: deadline for the whole fan-out, seconds.

        Returns:
            host name -> ``None`` when the file is in place there, else the reason (one line).

        Raises:
            TransferError: ``local_path`` cannot be read.
        """
        try:
            size = os.stat(local_path).st_size
        except OSError as exc:
            raise TransferError(f"upload {local_path}: {exc.strerror or exc}") from None
        if not os.path.isfile(local_path):
            raise TransferError(f"upload {local_path}: not a regular file")
        results: dict[str, str | None] = {}
        jobs: dict[tuple[int, str], list[SlurmMember]] = {}
        for h in hosts:
            name = h.name if isinstance(h, HostRef) else h
            m = self.members.get(name)
            if m is None or m.error or m.allocation is None:
                results[name] = (m.error or m.refused if m and (m.error or m.refused)
                                 else f"{name}: not prepared in this Slurm scope")
                continue
            dest = resolve_remote(remote_path, m.home)
            jobs.setdefault((id(m.allocation), dest), []).append(m)
        outcomes = await asyncio.gather(*(
            self._broadcast_job(group[0].allocation, local_path, dest, size, group, (mode, dir_mode),  # type: ignore[arg-type]
                                timeout_s)
            for (_, dest), group in jobs.items()))
        for outcome in outcomes:
            results.update(outcome)
        return results

    async def _broadcast_job(self, alloc: Allocation, local_path: str, dest: str, size: int,
                             group: list[SlurmMember], modes: tuple[int | None, int | None],
                             timeout_s: float) -> dict[str, str | None]:
        status = await send(alloc, local_path, dest, size, [m.node for m in group], mode=modes[0], dir_mode=modes[1],
                            timeout_s=timeout_s)
        out: dict[str, str | None] = {}
        for m in group:
            why = status.get(m.node, "no answer from the upload step")
            out[m.ref.name] = None if why is None else f"upload {local_path} -> {dest} on node {m.node}: {why}"
        return out


async def broadcast(scope: SlurmScope, local_path: str, remote_path: str, hosts: Sequence[str | HostRef], *,
                    mode: int | None = None, timeout_s: float = 600.0) -> dict[str, str | None]:
    """:meth:`SlurmScope.broadcast` as a function (the engine's fan-out of a class's wheel)."""
    return await scope.broadcast(local_path, remote_path, hosts, mode=mode, timeout_s=timeout_s)


class _SlurmKind(ConnectionKind):
    """Nodes of a Slurm cluster, reached as job steps of the run's allocations (see the module docstring)."""

    name = "slurm"
    settings_model = SlurmSettings

    def scope(self, options: ConnectOptions) -> SlurmScope:
        return SlurmScope(options)

    def machine(self, host: HostRef) -> str:
        """``slurm:<node>``, and the launcher when the client tools run elsewhere (another
        cluster's node of the same name is another machine)."""
        s = host.settings
        assert isinstance(s, SlurmSettings)
        node = s.node or host.name
        return f"slurm:{node}" + (f" via {' '.join(s.launcher)}" if s.launcher else "")


SETTINGS = SlurmSettings
KIND = _SlurmKind()

__all__ = ["SETTINGS", "KIND", "SlurmScope", "SlurmRequestRefused", "broadcast", "AllocationError"]
