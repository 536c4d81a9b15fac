"""A command that fleetctl's own closing of its connection cuts off is interrupted, never the host
unreachable (operator trial: a SIGTERM 0.5 s into a deploy recorded a healthy host "unreachable:
connection lost during sh", in the failures, the metrics and the retry set, once in 16 runs).

The race made deterministic: the run's end closes the connection of a host whose command still
runs (its cancellation had not reached it yet); here the close comes while the command provably
runs (it has printed its first line). Real sshd test hosts on loopback."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from fleetctl.connection.local import LocalConnection
from fleetctl.errors import ClosedHere, HostUnreachable
from tests.test_ssh_connection import connect

pytestmark = pytest.mark.sshd


async def _cut_off(conn) -> BaseException:
    """Run a long command on ``conn``, close the connection once it runs; what the run raised."""
    up = asyncio.Event()
    task = asyncio.ensure_future(conn.run(["sh", "-c", "echo up; exec sleep 30"], on_line=lambda _: up.set(),
                                          timeout_s=60))
    await asyncio.wait_for(up.wait(), 30)
    await conn.close()
    try:
        await asyncio.wait_for(task, 30)
    except BaseException as exc:  # noqa: BLE001 - what it raised is the answer
        return exc
    raise AssertionError(f"the command was not cut off: {task.result()}")


def test_a_command_cut_off_by_fleetctls_own_close_is_interrupted_not_unreachable(sshd_farm):
    host = sshd_farm.start("closed-here")

    async def go() -> BaseException:
        conn = connect(host, sshd_farm)
        await conn.open()
        return await _cut_off(conn)

    exc = asyncio.run(go())
    assert isinstance(exc, ClosedHere) and isinstance(exc, asyncio.CancelledError), repr(exc)
    assert not isinstance(exc, HostUnreachable) and exc.host == "closed-here" and exc.what == "sh", repr(exc)


def test_a_connection_the_host_lost_under_a_command_is_still_unreachable(sshd_farm):
    """The other side of the rule: fleetctl did not close it, so the host is unreachable."""
    host = sshd_farm.start("lost-there")

    async def go() -> BaseException:
        conn = connect(host, sshd_farm)
        await conn.open()
        up = asyncio.Event()
        task = asyncio.ensure_future(conn.run(["sh", "-c", "echo up; exec sleep 30"], on_line=lambda _: up.set(),
                                              timeout_s=60))
        await asyncio.wait_for(up.wait(), 30)
        subprocess.run(["pkill", "-KILL", "-P", str(host.proc.pid)], check=False)  # the session's sshd
        try:
            await asyncio.wait_for(task, 30)
        except BaseException as exc:  # noqa: BLE001
            return exc
        finally:
            await conn.close()
        raise AssertionError(f"the command was not cut off: {task.result()}")

    exc = asyncio.run(go())
    assert isinstance(exc, HostUnreachable) and "connection lost during sh" in str(exc), repr(exc)


def test_every_kind_marks_a_connection_it_closes_as_closed_here():
    """The rule is the seam's (:attr:`Connection.closed_here`), whatever the transport."""
    conn = LocalConnection("l1")
    assert conn.closed_here is False
    asyncio.run(conn.close())
    assert conn.closed_here is True
