"""The controller's heartbeat to the commands it runs over SSH, so that a host notices a
controller gone without a word (its network lost: no FIN or RST ever reaches sshd, which without
``ClientAliveInterval``, sshd_config(5)'s default, keeps the session for as long as TCP
keepalive takes, over 2 hours on Linux).

The controller writes :data:`~fleetctl.connection.command.HEARTBEAT` to the command's stdin every
``keepalive_interval`` seconds (:func:`beat`); the host side (the supervisor script of
:mod:`fleetctl.connection.command`, the deploy lock's holder in ``playbooks/scripts/session_start.py``)
stops the command once none came for :func:`lifeline_s` seconds, as after its stdin's EOF.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from .command import HEARTBEAT

#: Heartbeat intervals a host waits before it takes the controller for gone: one more than the
#: keepalives the controller itself lets go unanswered before it drops the connection
#: (``keepalive_count_max=3``, fleetctl/connection/ssh_handshake.py; OpenSSH's ServerAliveCountMax).
MISSED_BEATS = 4
#: The shortest lifeline, seconds (a heartbeat written under load may leave late).
MIN_LIFELINE_S = 3


def lifeline_s(interval_s: float) -> int:
    """Seconds without a heartbeat after which the host stops a command: :data:`MISSED_BEATS`
    heartbeat intervals of ``interval_s`` seconds, at least :data:`MIN_LIFELINE_S` (a whole number:
    ``timeout(1)`` takes it)."""
    return max(MIN_LIFELINE_S, math.ceil(MISSED_BEATS * interval_s))


async def beat(write: Callable[[bytes], None], interval_s: float) -> None:
    """Call ``write(HEARTBEAT)`` every ``interval_s`` seconds until cancelled, or until a write
    raises (the channel is closing: its end is told by the command's own result)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            write(HEARTBEAT)
        except Exception:  # noqa: BLE001 - BrokenPipeError, asyncssh's ChannelClosed...: nothing to keep alive
            return
