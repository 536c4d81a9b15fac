"""Counting the sessions open on one SSH connection against the server's ``MaxSessions`` (stopping
a command is :func:`fleetctl.connection.ssh_exec.stop_process`).

Exec channels and the SFTP session together stay within sshd's ``MaxSessions`` (sshd_config(5),
default 10); see :mod:`fleetctl.connection.ssh` for how a refusal lowers the limit.
:meth:`Sessions.open_channel` is the one way both open a channel: take a session, open, and on a
refusal lower the limit, back off and try again, or send the request over the second connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncssh

from .retry import retrying
from .ssh_errors import is_channel_refused

T = TypeVar("T")

#: Attempts to open a channel (an exec channel or the SFTP session) while the server refuses
#: channels (over its MaxSessions, or a just-closed channel it has not reaped yet).
CHANNEL_ATTEMPTS = 12


class Sessions:
    """Sessions open on one connection (exec channels and the SFTP session), at most ``limit``.

    ``make_room`` (called with the condition held) may free an idle session and return True.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.in_use = 0
        self.cond = asyncio.Condition()

    async def acquire(self, make_room: Callable[[], Awaitable[bool]] | None = None) -> None:
        async with self.cond:
            while self.in_use >= self.limit:
                if make_room is not None and await make_room():
                    continue
                await self.cond.wait()
            self.in_use += 1

    async def release(self) -> None:
        async with self.cond:
            self.in_use -= 1
            self.cond.notify_all()

    async def refused(self) -> None:
        """The server refused a session while ``in_use`` (ours included) were open: the limit
        drops to the others (at least 1) and our slot is given back."""
        async with self.cond:
            self.in_use -= 1
            self.limit = max(1, min(self.limit, self.in_use))
            self.cond.notify_all()

    async def open_channel(self, open_: Callable[[], Awaitable[T]], *,
                           make_room: Callable[[], Awaitable[bool]] | None = None,
                           overflow: Callable[[], bool] = lambda: False,
                           opened: Callable[[BaseException], bool] = lambda exc: False,
                           on_retry: Callable[[], None] | None = None) -> T:
        """Take a session (:meth:`acquire` with ``make_room``) and open a channel in it with
        ``open_()``; the session stays taken for the channel (the caller :meth:`release` s it).

        A refused channel (``asyncssh.ChannelOpenError``, for which ``opened`` is False) lowers the
        limit (:meth:`refused`) and is tried again, backing off (0.05 s doubling to 2 s, jittered),
        up to :data:`CHANNEL_ATTEMPTS` attempts, ``on_retry()`` before each retry; when
        ``overflow()`` then says every session the host allows is pinned, :class:`UseOverflow` is
        raised at once instead. ``opened(exc)`` True: the channel did open and the server refused
        something inside it (a subsystem), so no session limit was hit: the slot is given back and
        ``exc`` raised. Any other exception gives the slot back and is raised.

        Raises:
            UseOverflow: the request must go over the second connection.
            asyncssh.ChannelOpenError: still refused after every attempt (or ``opened``).
        """
        async def attempt(n: int) -> T:
            if n > 1 and on_retry is not None:
                on_retry()
            await self.acquire(make_room)
            try:
                return await open_()
            except asyncssh.ChannelOpenError as exc:
                if opened(exc):
                    await self.release()
                    raise
                await self.refused()
                if overflow():
                    raise UseOverflow() from None
                raise
            except BaseException:
                await self.release()
                raise

        return await retrying(attempt, retryable=is_channel_refused, attempts=CHANNEL_ATTEMPTS, initial_s=0.05,
                              max_s=2.0)

    async def wake(self) -> None:
        async with self.cond:
            self.cond.notify_all()


class UseOverflow(Exception):
    """Every session the host allows is pinned: this request goes over the second connection."""

