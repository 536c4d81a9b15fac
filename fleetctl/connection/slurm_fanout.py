"""Uploads to many nodes of one allocation: one ``sbcast`` per file, whoever asks for it.

Two ways in:

- :func:`send` puts one file at one path on several nodes of one allocation with **one** sbcast
  (:func:`~fleetctl.connection.slurm_transfer.upload`: a helper step on exactly those nodes,
  ``sbcast --jobid=JOB.STEP``, a size check and an atomic rename on each). srun starts a step on
  all of its nodes or on none, and an sbcast that loses one node fails, so when the group failed
  as a group, a node srun names as the one where the step could not start fails alone at once,
  and every other node it failed is tried again alone: a bad node fails only itself.
- :class:`PutCoalescer` turns ``put`` calls of *different hosts* into one :func:`send`: the engine
  uploads per host (a ``copy`` task's files, the facts script, helper scripts), and without this a
  copy of 20 files to 3 nodes costs 60 helper steps and 60 sbcasts instead of 20 and 20. Puts
  coalesce only when everything that decides the result on the node is the same:

  * the same allocation (sbcast's fan-out is per job; ``--jobid=JOB.STEP`` reaches that step's
    nodes, sbcast(1) of Slurm 22.05),
  * the same destination path on the node, after ``~`` and relative paths are resolved against the
    node's home (a path of each host's own is a different key: it never coalesces),
  * the same mode, and
  * the same bytes: a file of at most :data:`HASHED_BYTES` is read and keyed by its SHA-256 (the
    engine writes stamps and records to a temporary file per host: the same bytes coalesce), and is
    sent from a private copy of what was hashed; a larger one is keyed by its identity on the
    controller (device, inode, size, mtime, ctime: one file, unchanged) and sent from its path.

**When a batch goes.** A put waits in its batch until one of these holds (seconds, monotonic):

1. every live host of the allocation has asked for it: at once (a one-host allocation never waits);
2. :data:`SETTLE_S` after the batch opened, no host that has not asked *may still ask soon*. One
   may when its last upload went out in one batch with a host that asked (their answers came
   together, so its next put comes now), or when it has nothing in the coalescer and started or
   finished a step less than :data:`RECENT_S` ago (a probe, a moment between two steps). One
   does not when its puts wait in or are on their way in batches of their own (every call it made
   waits on those), when it started or finished nothing for :data:`RECENT_S` (in a build, waiting
   for a class's wheel, done or failed), or when its put in this very batch was cancelled;
3. :data:`WINDOW_S` after the batch opened, whatever else holds.

So a lone put costs at most :data:`SETTLE_S` more when the other hosts are busy elsewhere (building,
waiting for a wheel, in their own uploads) and at most :data:`WINDOW_S` when they run short steps
right then, against ~150-300 ms for the put itself (a helper step and an sbcast, docs/slurm.md).
Hosts that start a task together (a deploy applies every host's first task at once) ask within milliseconds
of each other; once their puts went out together their results come back together, so their next puts do too.

Each waiting put gets its own answer: ``None`` or why not, for its node. A put cancelled while it
waits leaves its batch; a batch whose every put was cancelled is stopped (the helper step removes
its temporary files).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..errors import TransferError
from .base import OWN_DIR_MODE
from .slurm_alloc import Allocation
from .slurm_client import SlurmError
from .slurm_transfer import upload
from ..util.within import within

#: Longest a put waits for other hosts to ask for the same file (seconds).
WINDOW_S = 0.15
#: Shortest wait of a put that other hosts might join: hosts that start the same task together ask
#: within this (seconds; measured: three hosts within 1.3 ms, docs/slurm.md).
SETTLE_S = 0.02
#: A host that started or finished nothing for this long (in a build, waiting for a wheel, done,
#: failed) is not waited for (seconds). Generous: hosts that wait at the engine's barrier between
#: planning and applying are idle until they all start their first task at once.
RECENT_S = 3.0
#: Files up to this size (bytes) are keyed by their SHA-256 and sent from a private copy.
HASHED_BYTES = 64 * 1024
#: Nodes tried again alone at once after a group failed (each is one helper step and one sbcast).
RETRY_AT_ONCE = 16


# -- one file to a group of nodes -----------------------------------------------------------------

async def send(alloc: Allocation, local_path: str, dest: str, size: int, nodes: Sequence[str], *,
               mode: int | None = None, timeout_s: float = 600.0, dir_mode: int | None = OWN_DIR_MODE,
               on_node: Callable[[str, str | None], None] | None = None) -> dict[str, str | None]:
    """Put ``local_path`` (``size`` bytes) at ``dest`` on ``nodes`` of ``alloc``: one sbcast for
    all, then each node the group failed as a group (its step did not start, sbcast failed) alone.

    Args:
        alloc: the allocation holding every node.
        local_path: the file on the controller.
        dest: the absolute path on every node.
        size: the file's size in bytes (each node checks it).
        nodes: Slurm node names.
        mode: permission bits of the result (default 0644).
        timeout_s: deadline for all of it, seconds.
        dir_mode: the mode of missing folders (None: as ``mkdir -p``, :func:`upload`).
        on_node: called with ``(node, answer)`` as soon as a node's answer is final (a node that
            is tried again alone answers later than the others: a node whose slurmd died takes
            srun ~10 s to give up on, ``MessageTimeout``).

    Returns:
        node -> ``None`` when the file is in place there, else why not (one line).
    """
    nodes = sorted(set(nodes))
    deadline = time.monotonic() + timeout_s
    status, own = await _attempt(alloc, local_path, dest, size, nodes, (mode, dir_mode), timeout_s)
    again = [n for n in nodes if status.get(n) is not None and n not in own] if len(nodes) > 1 else []
    if on_node is not None:
        for n in nodes:
            if n not in again:
                on_node(n, status.get(n))
    if again:
        gate = asyncio.Semaphore(RETRY_AT_ONCE)

        async def alone(node: str) -> dict[str, str | None]:
            async with gate:
                left_s = deadline - time.monotonic()
                result = {node: status[node]} if left_s <= 0 else \
                    (await _attempt(alloc, local_path, dest, size, [node], (mode, dir_mode), left_s))[0]
                if on_node is not None:
                    on_node(node, result.get(node, status[node]))
                return result

        for node, result in zip(again, await asyncio.gather(*(alone(n) for n in again))):
            status[node] = result.get(node, status[node])
    return status


async def _attempt(alloc: Allocation, local_path: str, dest: str, size: int, nodes: list[str],
                   modes: tuple[int | None, int | None], timeout_s: float) -> tuple[dict[str, str | None], set[str]]:
    try:
        return await within(upload(alloc.client, alloc.job_id, nodes, local_path, dest, size=size,
                                   mode=modes[0], dir_mode=modes[1]), timeout_s)
    except asyncio.TimeoutError:
        return {n: f"upload did not finish within {timeout_s:g} s" for n in nodes}, set(nodes)
    except (SlurmError, OSError) as exc:
        return {n: str(exc) for n in nodes}, set()


# -- puts of many hosts, one send -------------------------------------------------------------------

@dataclass
class _Activity:
    """What one host is doing through the scope (monotonic seconds)."""

    waiting: int = 0  # puts in an open batch
    sending: list["_Batch"] = field(default_factory=list)  # the batches of its puts on their way
    last: float = -math.inf  # when it last started or finished anything


@dataclass(eq=False)
class _Waiter:
    host: str
    node: str
    local_path: str
    future: asyncio.Future
    state: str = "waiting"  # -> "sending" -> "done"


@dataclass(eq=False)
class _Batch:
    key: tuple
    alloc: Allocation
    dest: str
    size: int
    mode: int
    data: bytes | None  # a small file's bytes, as hashed
    opened: float
    waiters: list[_Waiter] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)  # hosts whose put here was cancelled: not waited for
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    task: asyncio.Task | None = None
    dir_mode: int | None = OWN_DIR_MODE  # of the folders made on the way (None: as mkdir -p)


Sender = Callable[..., Awaitable[dict[str, "str | None"]]]


class PutCoalescer:
    """Gathers puts of the same file to the same path from hosts of one allocation into one
    :func:`send` (see the module docstring for what coalesces and when a batch goes).

    Args:
        peers: allocation -> the inventory names of its live hosts (prepared, reachable).
        sender: :func:`send`, or a function with its signature.
        timeout_s: deadline of each send, seconds.
    """

    def __init__(self, peers: Callable[[Allocation], Sequence[str]], sender: Sender = send, *,
                 timeout_s: float = 600.0) -> None:
        self._peers = peers
        self._sender = sender
        self._timeout_s = timeout_s
        self._open: dict[tuple, _Batch] = {}
        self._sending: set[asyncio.Task] = set()
        self._activity: dict[str, _Activity] = {}
        self._poked: set[int] = set()
        #: sends made and puts they answered (for tests, benchmarks and -v)
        self.sends = 0
        self.puts = 0

    # -- what hosts are doing --------------------------------------------------------------------

    def _act(self, host: str) -> _Activity:
        return self._activity.setdefault(host, _Activity())

    @contextlib.contextmanager
    def busy(self, host: str) -> Iterator[None]:
        """A step or download of ``host``: it started now, and when it ends, it ended then."""
        act = self._act(host)
        act.last = time.monotonic()
        try:
            yield
        finally:
            act.last = time.monotonic()

    def _may_ask(self, host: str, asked: set[str], now: float) -> bool:
        """Could ``host`` ask for a file within the next moments, when ``asked`` already did?
        (See the module docstring.)

        Of steps, only when a host started or finished one counts, not what it has in flight: a
        deploy holds one step open on every host for the whole run (the host lock,
        engine/hostlock.py), and a build is one step for minutes."""
        act = self._activity.get(host)
        if act is None:
            return False  # has done nothing in this scope: not working on this batch's task
        if any(w.host in asked for b in act.sending for w in b.waiters):
            return True  # its last upload went with one that asked: done together, it comes next
        if act.waiting or act.sending:
            return False  # every call it made waits on its own batches
        return now - act.last < RECENT_S  # a short step (a probe) or a moment between two steps

    # -- a put --------------------------------------------------------------------------------

    async def put(self, host: str, node: str, alloc: Allocation, local_path: str, dest: str, *,
                  mode: int = 0o644, dir_mode: int | None = OWN_DIR_MODE) -> str | None:
        """Put ``local_path`` at ``dest`` (absolute) on ``node`` for ``host``, together with every
        other host of ``alloc`` that asks for the same bytes at the same path and mode meanwhile.

        Returns:
            ``None`` when the file is in place on the node, else why not (one line).

        Raises:
            TransferError: ``local_path`` cannot be read or is not a regular file.
        """
        data, content, size = _content(local_path)
        key = (id(alloc), dest, mode, dir_mode, content)
        batch = self._open.get(key)
        now = time.monotonic()
        if batch is None:
            batch = self._open[key] = _Batch(key=key, alloc=alloc, dest=dest, size=size, mode=mode, data=data,
                                             opened=now, dir_mode=dir_mode)
            loop = asyncio.get_running_loop()
            batch.timers = [loop.call_later(SETTLE_S, self._check, batch),
                            loop.call_later(WINDOW_S, self._check, batch)]
        waiter = _Waiter(host=host, node=node, local_path=local_path, future=asyncio.get_running_loop().create_future())
        batch.waiters.append(waiter)
        act = self._act(host)
        act.waiting += 1
        act.last = now
        self._poke(alloc)  # this host now waits: batches that waited for it may go
        try:
            return await waiter.future
        finally:
            self._leave(batch, waiter)

    def _leave(self, batch: _Batch, waiter: _Waiter) -> None:
        act = self._act(waiter.host)
        if waiter.state == "waiting":
            act.waiting -= 1
            batch.gone.add(waiter.host)
        elif waiter.state == "sending":
            act.sending.remove(batch)
        waiter.state = "done"
        act.last = time.monotonic()
        if not waiter.future.done():
            waiter.future.cancel()
        if all(w.state == "done" for w in batch.waiters):
            if self._open.get(batch.key) is batch:  # every put left before it went
                del self._open[batch.key]
                for timer in batch.timers:
                    timer.cancel()
            if batch.task is not None and not batch.task.done():
                batch.task.cancel()  # nobody waits for it any more (cancelled: Ctrl-C, a deadline)

    # -- when a batch goes ------------------------------------------------------------------------

    def _poke(self, alloc: Allocation) -> None:
        """Check the allocation's open batches soon (once per turn of the event loop)."""
        if id(alloc) in self._poked:
            return
        self._poked.add(id(alloc))

        def check() -> None:
            self._poked.discard(id(alloc))
            for batch in [b for b in self._open.values() if b.alloc is alloc]:
                self._check(batch)

        asyncio.get_running_loop().call_soon(check)

    def _check(self, batch: _Batch) -> None:
        if self._open.get(batch.key) is not batch:
            return
        now = time.monotonic()
        asked = {w.host for w in batch.waiters if w.state == "waiting"}
        missing = [h for h in self._peers(batch.alloc) if h not in asked and h not in batch.gone]
        age = now - batch.opened
        if missing and age < WINDOW_S - 1e-3:
            if age < SETTLE_S - 1e-3 or any(self._may_ask(h, asked, now) for h in missing):
                return
        self._go(batch)

    def _go(self, batch: _Batch) -> None:
        del self._open[batch.key]
        for timer in batch.timers:
            timer.cancel()
        waiters = [w for w in batch.waiters if w.state == "waiting"]
        for w in waiters:
            act = self._act(w.host)
            act.waiting -= 1
            act.sending.append(batch)
            w.state = "sending"
        batch.task = asyncio.ensure_future(self._send(batch, waiters))
        self._sending.add(batch.task)
        batch.task.add_done_callback(self._sending.discard)

    async def _send(self, batch: _Batch, waiters: list[_Waiter]) -> None:
        self.sends += 1
        self.puts += len(waiters)
        nodes = sorted({w.node for w in waiters})
        private = None
        status: dict[str, str | None] = {}
        try:
            source = waiters[0].local_path
            if batch.data is not None:
                # what was hashed is what goes: the puts' own files may be temporary ones
                fd, private = tempfile.mkstemp(prefix="fleetctl-fanout-")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(batch.data)
                source = private
            def answer(node: str, why: str | None) -> None:
                for w in waiters:
                    if w.node == node and not w.future.done():
                        w.future.set_result(why)

            status = await self._sender(batch.alloc, source, batch.dest, batch.size, nodes, mode=batch.mode,
                                        dir_mode=batch.dir_mode, timeout_s=self._timeout_s, on_node=answer)
        except Exception as exc:  # noqa: BLE001 - every waiting put gets an answer, never a hang
            status = {n: f"upload failed: {exc}" for n in nodes}
        finally:
            if private:
                os.unlink(private)
            for w in waiters:  # cancelled (no put waits any more): the futures are cancelled
                if not w.future.done():
                    if status or not nodes:
                        w.future.set_result(status.get(w.node, "no answer from the upload step"))
                    else:
                        w.future.cancel()

    async def close(self) -> None:
        """Stop what is still open or on its way (the scope is being left)."""
        for batch in list(self._open.values()):
            for timer in batch.timers:
                timer.cancel()
            for w in batch.waiters:
                if not w.future.done():
                    w.future.cancel()
        self._open.clear()
        tasks = list(self._sending)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _content(local_path: str) -> tuple[bytes | None, tuple, int]:
    """``(bytes or None, content key, size)`` of a local file (see :class:`PutCoalescer`).

    Raises:
        TransferError: it cannot be read, or is not a regular file.
    """
    try:
        st = os.stat(local_path)
        if not stat.S_ISREG(st.st_mode):
            raise TransferError(f"upload {local_path}: not a regular file")
        if st.st_size <= HASHED_BYTES:
            with open(local_path, "rb") as fh:  # at most HASHED_BYTES: microseconds, on the loop
                data = fh.read(HASHED_BYTES + 1)
            if len(data) <= HASHED_BYTES:
                return data, ("sha256", hashlib.sha256(data).hexdigest()), len(data)
            st = os.stat(local_path)  # it grew meanwhile: keyed as any large file
    except OSError as exc:
        raise TransferError(f"upload {local_path}: {exc.strerror or exc}") from None
    return None, ("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), st.st_size


__all__ = ["send", "PutCoalescer", "WINDOW_S", "SETTLE_S", "HASHED_BYTES"]
