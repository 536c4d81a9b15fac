"""Counting the sessions open on one SSH connection against the server's ``MaxSessions``.

Exec channels and the SFTP session together stay within sshd's ``MaxSessions`` (sshd_config(5),
default 10); see :mod:`fleetctl.connection.ssh` for how a refusal lowers the limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


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

    async def wake(self) -> None:
        async with self.cond:
            self.cond.notify_all()


class UseOverflow(Exception):
    """Every session the host allows is pinned: this request goes over the second connection."""
