"""The put coalescer's rules (fleetctl/connection/slurm_fanout.py), with a sender of our own in place
of :func:`~fleetctl.connection.slurm_fanout.send` (which needs a cluster: tests/test_slurm_e2e.py and
tests/test_slurm_cli_e2e.py send for real). No clock is faked: the tests that must not wait for the
window set it to a minute, so a wrong rule fails them by their own 10 s bound, never by luck.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import pytest

import fleetctl.connection.slurm_fanout as fanout
from fleetctl.connection.slurm_fanout import PutCoalescer
from fleetctl.errors import TransferError


class Alloc:
    """Stands for an allocation: the coalescer only tells allocations apart and hands them on."""

    def __init__(self, name: str) -> None:
        self.name = name


class Sender:
    """Records every send (the bytes of its source as it was when sent) and answers per node."""

    def __init__(self, answers: dict[str, str | None] | None = None, gate: asyncio.Event | None = None) -> None:
        self.calls: list[dict] = []
        self.answers = answers or {}
        self.gate = gate
        self.cancelled = 0

    async def __call__(self, alloc, local_path, dest, size, nodes, *, mode, timeout_s, on_node=None, dir_mode=0o700):
        self.calls.append({"alloc": alloc.name, "source": local_path, "bytes": Path(local_path).read_bytes(),
                           "dest": dest, "size": size, "nodes": list(nodes), "mode": mode})
        if self.gate is not None:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return {n: self.answers.get(n) for n in nodes}


@pytest.fixture
def timing(monkeypatch):
    """A minute of window (a test that waits for it fails by its own bound); no settling time, so
    every rule is decided on the next turn of the event loop; RECENT_S as the test sets it."""
    monkeypatch.setattr(fanout, "WINDOW_S", 60.0)
    monkeypatch.setattr(fanout, "SETTLE_S", 0.0)
    monkeypatch.setattr(fanout, "RECENT_S", 60.0)
    return monkeypatch


def coalescer(peers: dict[Alloc, list[str]], sender: Sender) -> PutCoalescer:
    return PutCoalescer(lambda alloc: peers[alloc], sender)


def node(host: str) -> str:
    return host.replace("h", "n")


async def bounded(*aws):
    return await asyncio.wait_for(asyncio.gather(*aws), 10)


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def active(co: PutCoalescer, *hosts: str) -> None:
    """The hosts just finished a step (a probe): they may upload next."""
    for h in hosts:
        with co.busy(h):
            pass


def write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def test_every_host_asking_is_one_send_at_once_each_with_its_own_answer(timing, tmp_path):
    job = Alloc("job")
    src = write(tmp_path / "k.cu", b"__global__ void k() {}\n")
    sender = Sender({"n2": "mkdir: Not a directory"})

    async def main():
        co = coalescer({job: ["h1", "h2", "h3"]}, sender)
        active(co, "h1", "h2", "h3")
        return await bounded(*(co.put(h, node(h), job, src, "/scratch/k.cu") for h in ("h1", "h2", "h3"))), co

    results, co = asyncio.run(main())
    assert results == [None, "mkdir: Not a directory", None]  # n2's failure is n2's alone
    assert len(sender.calls) == 1 and sender.calls[0]["nodes"] == ["n1", "n2", "n3"]
    assert sender.calls[0]["bytes"] == Path(src).read_bytes() and sender.calls[0]["mode"] == 0o644
    assert (co.sends, co.puts) == (1, 3)


def test_different_paths_bytes_modes_or_jobs_never_coalesce(timing, tmp_path):
    job, other_job = Alloc("job"), Alloc("other")
    a = write(tmp_path / "a" / "f", b"AAAA")
    b = write(tmp_path / "b" / "f", b"BBBB")  # same name, other bytes
    sender = Sender()

    async def main():
        co = coalescer({job: ["h1", "h2", "h3", "h4"], other_job: ["h5"]}, sender)
        active(co, "h1", "h2", "h3", "h4", "h5")
        return await bounded(co.put("h1", "n1", job, a, "/x/f"), co.put("h2", "n2", job, b, "/x/f"),
                             co.put("h3", "n3", job, a, "/x/g"), co.put("h4", "n4", job, a, "/x/f", mode=0o600),
                             co.put("h5", "n5", other_job, a, "/x/f"))

    assert asyncio.run(main()) == [None] * 5
    sent = sorted((c["alloc"], c["dest"], c["bytes"], c["mode"], tuple(c["nodes"])) for c in sender.calls)
    assert sent == [("job", "/x/f", b"AAAA", 0o600, ("n4",)), ("job", "/x/f", b"AAAA", 0o644, ("n1",)),
                    ("job", "/x/f", b"BBBB", 0o644, ("n2",)), ("job", "/x/g", b"AAAA", 0o644, ("n3",)),
                    ("other", "/x/f", b"AAAA", 0o644, ("n5",))]


def test_small_files_coalesce_by_their_bytes_and_go_from_a_private_copy(timing, tmp_path):
    # the engine writes a stamp to a temporary file per host, and removes it once its put returns
    job = Alloc("job")
    stamps = [write(tmp_path / f"stamp-{h}", b'{"torch": "2.9.1"}\n') for h in ("h1", "h2")]
    private = tmp_path / "tmp"
    private.mkdir()
    timing.setattr(tempfile, "tempdir", str(private))
    sender = Sender()

    async def main():
        co = coalescer({job: ["h1", "h2"]}, sender)
        return await bounded(co.put("h1", "n1", job, stamps[0], "/w/stamp"),
                             co.put("h2", "n2", job, stamps[1], "/w/stamp"))

    assert asyncio.run(main()) == [None, None]
    assert len(sender.calls) == 1 and sender.calls[0]["nodes"] == ["n1", "n2"]
    assert sender.calls[0]["source"] not in stamps and sender.calls[0]["bytes"] == b'{"torch": "2.9.1"}\n'
    assert list(private.iterdir()) == []  # the private copy is gone


def test_large_files_coalesce_as_one_file_not_by_equal_bytes(timing, tmp_path):
    job = Alloc("job")
    data = os.urandom(fanout.HASHED_BYTES + 1)
    one = write(tmp_path / "wheel-1.whl", data)
    same_bytes = write(tmp_path / "wheel-2.whl", data)
    sender = Sender()

    async def main():
        co = coalescer({job: ["h1", "h2", "h3"]}, sender)
        return await bounded(co.put("h1", "n1", job, one, "/w/x.whl"), co.put("h2", "n2", job, one, "/w/x.whl"),
                             co.put("h3", "n3", job, same_bytes, "/w/x.whl"))

    assert asyncio.run(main()) == [None, None, None]
    assert sorted((c["source"], tuple(c["nodes"])) for c in sender.calls) == [(one, ("n1", "n2")),
                                                                             (same_bytes, ("n3",))]


def test_a_lone_put_does_not_wait_for_hosts_that_are_not_uploading(timing, tmp_path):
    # h2 never did anything in this scope; h3 did, but too long ago (a build, a wheel to wait for)
    timing.setattr(fanout, "RECENT_S", 0.0)
    job = Alloc("job")
    src = write(tmp_path / "facts.py", b"print('facts')\n")
    sender = Sender()

    async def main():
        co = coalescer({job: ["h1", "h2", "h3"]}, sender)
        active(co, "h3")
        return await bounded(co.put("h1", "n1", job, src, "/w/facts.py"))

    assert asyncio.run(main()) == [None]
    assert [c["nodes"] for c in sender.calls] == [["n1"]]


def test_a_host_between_two_steps_is_waited_for_and_joins(timing, tmp_path):
    job = Alloc("job")
    src = write(tmp_path / "f", b"x")
    sender = Sender()

    async def main():
        co = coalescer({job: ["h1", "h2"]}, sender)
        active(co, "h1", "h2")  # h2 just finished a probe: it may upload the same file next
        first = asyncio.ensure_future(co.put("h1", "n1", job, src, "/w/f"))
        await turns()
        assert sender.calls == [] and not first.done()  # every rule decided: h1 waits for h2
        second = co.put("h2", "n2", job, src, "/w/f")
        return await bounded(first, second)

    assert asyncio.run(main()) == [None, None]
    assert [c["nodes"] for c in sender.calls] == [["n1", "n2"]]


def test_hosts_each_waiting_on_their_own_paths_do_not_hold_each_other(timing, tmp_path):
    # every host puts to a path of its own at once (the default workdir names the host): each of
    # them waits in its own batch, so none can join another's: all go without the window
    job = Alloc("job")
    src = write(tmp_path / "facts.py", b"print('facts')\n")
    sender = Sender()

    async def main():
        co = coalescer({job: ["h1", "h2", "h3"]}, sender)
        active(co, "h1", "h2", "h3")
        return await bounded(*(co.put(h, node(h), job, src, f"/home/.fleetctl/{h}/facts.py") for h in ("h1", "h2", "h3")))

    assert asyncio.run(main()) == [None, None, None]
    assert sorted(c["dest"] for c in sender.calls) == [f"/home/.fleetctl/{h}/facts.py" for h in ("h1", "h2", "h3")]


def test_the_window_bounds_the_wait_for_a_host_that_never_asks(timing, tmp_path):
    timing.setattr(fanout, "WINDOW_S", 0.05)
    job = Alloc("job")
    src = write(tmp_path / "f", b"x")
    sender = Sender()

    async def main():
        co = coalescer({job: ["h1", "h2"]}, sender)
        active(co, "h1", "h2")  # h2 is busy with short steps, but never uploads this file
        return await bounded(co.put("h1", "n1", job, src, "/w/f"))

    assert asyncio.run(main()) == [None]
    assert [c["nodes"] for c in sender.calls] == [["n1"]]


def test_a_cancelled_put_leaves_and_the_others_go_without_it(timing, tmp_path):
    job = Alloc("job")
    src = write(tmp_path / "f", b"x")
    gate = asyncio.Event()
    sender = Sender(gate=gate)

    async def main():
        gate.set()
        co = coalescer({job: ["h1", "h2", "h3"]}, sender)
        active(co, "h1", "h2", "h3")
        one = asyncio.ensure_future(co.put("h1", "n1", job, src, "/w/f"))
        two = asyncio.ensure_future(co.put("h2", "n2", job, src, "/w/f"))
        await turns()
        one.cancel()  # h1's task ran out of time, say: it is not waited for any more
        await turns()
        assert sender.calls == []
        three = co.put("h3", "n3", job, src, "/w/f")
        return await bounded(two, three), one.cancelled()

    results, one_cancelled = asyncio.run(main())
    assert results == [None, None] and one_cancelled
    assert [c["nodes"] for c in sender.calls] == [["n2", "n3"]]


def test_a_send_nobody_waits_for_any_more_is_stopped(timing, tmp_path):
    job = Alloc("job")
    src = write(tmp_path / "f", b"x")
    sender = Sender(gate=asyncio.Event())  # never set: the send would run forever

    async def main():
        co = coalescer({job: ["h1", "h2"]}, sender)
        puts = [asyncio.ensure_future(co.put(h, node(h), job, src, "/w/f")) for h in ("h1", "h2")]
        while not sender.calls:
            await asyncio.sleep(0)
        for p in puts:
            p.cancel()
        await asyncio.gather(*puts, return_exceptions=True)
        while not sender.cancelled:
            await asyncio.sleep(0)
        await co.close()

    asyncio.run(asyncio.wait_for(main(), 10))
    assert sender.cancelled == 1


def test_a_failing_sender_answers_every_put_never_hangs(timing, tmp_path):
    job = Alloc("job")
    src = write(tmp_path / "f", b"x")

    async def broken(*args, **kwargs):
        raise RuntimeError("launcher vanished")

    async def main():
        co = PutCoalescer(lambda alloc: ["h1", "h2"], broken)
        return await bounded(co.put("h1", "n1", job, src, "/w/f"), co.put("h2", "n2", job, src, "/w/f"))

    assert asyncio.run(main()) == ["upload failed: launcher vanished"] * 2


def test_a_missing_or_special_local_file_is_refused_by_name(timing, tmp_path):
    job = Alloc("job")

    async def main(path: str):
        return await PutCoalescer(lambda alloc: ["h1"], Sender()).put("h1", "n1", job, path, "/w/f")

    with pytest.raises(TransferError, match="upload .*/nope: No such file or directory"):
        asyncio.run(main(str(tmp_path / "nope")))
    with pytest.raises(TransferError, match="not a regular file"):
        asyncio.run(main(str(tmp_path)))
