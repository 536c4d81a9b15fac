"""Reaching and logging in to an SSH host through its route: the ``ProxyJump`` chain of jump hosts,
shared among the hosts behind them, then the target.

:func:`login` turns an :class:`~fleetctl.connection.ssh_target.SSHTarget` into an authenticated
:class:`asyncssh.SSHClientConnection`, the way ssh(1) would, and raises
:class:`~fleetctl.connection.ssh_handshake.LoginFailed` with one line naming the cause otherwise.
Each hop (a jump host, or the target) is reached by :func:`fleetctl.connection.ssh_hop.login_hop`:
TCP or ``ProxyCommand``, per-sshd gates, retries of dropped handshakes and what their failures mean
are there.

Jump hosts (``ProxyJump``) are connected with the same rules, each from its own ssh_config
``Host`` block alone (its address, keys and known_hosts files, never the destination's:
:func:`~fleetctl.connection.ssh_target.resolve_jump`), and shared: every host behind one bastion
in a run uses one connection to it. A route whose jump hosts failed is remembered for one connect
timeout, so the hosts behind them fail at once with its cause.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable

import asyncssh

from .ssh_handshake import LoginFailed, RouteOptions
from .ssh_hop import LoginStats, login_hop
from .ssh_target import SSHTarget, resolve_jump

__all__ = ["login"]


async def login(target: SSHTarget, opts: RouteOptions, *, label: str = "",
                stats: LoginStats | None = None) -> tuple[asyncssh.SSHClientConnection, Callable[[], None]]:
    """Reach ``target`` (through its jump hosts), check its host key and log in.

    The connect budget is per hop: each jump host of ``ProxyJump``, then the target, has the
    whole ``opts.timeout_s`` (seconds) for its own TCP connect or channel open, handshake, login
    and retries, counted from when it starts; a route through k jump hosts therefore ends within
    (k + 1) x ``opts.timeout_s`` (a wait at a handshake gate, held only by other handshakes to the
    same sshd, comes on top, as for a host reached directly). Why this rule: it is what ``ssh -J a,b host`` does
    (OpenSSH runs one ``ssh -W`` per hop, each applying ``ConnectTimeout`` to its own connect and
    banner exchange, ssh_config(5)), so a failure names the hop whose own time ran out, as ssh does
    (``jump host b: timed out after 30 s: ...``); one budget for the whole route would let a slow
    but healthy bastion spend the target's time and the target's failure be reported as its own
    timeout, and splitting the budget among the hops would fail a healthy slow hop that ssh reaches.
    A channel the jump host never opens (the next hop's packets dropped) is named so, not as a
    server that sent no banner.

    Returns:
        ``(connection, release)``: call ``release()`` after closing the connection (it lets go
        of the shared jump connections the route holds).

    Raises:
        LoginFailed: one line naming the cause (prefixed ``jump host X:`` for a jump host).
    """
    stats = stats if stats is not None else LoginStats()
    tunnel = None
    releases: list[Callable[[], None]] = []
    if target.proxy_jump:
        tunnel, release = await _jump(target, opts, stats)
        releases.append(release)

    def release_all() -> None:
        for r in releases:
            r()

    try:
        conn = await login_hop(target, opts, label, tunnel, stats,
                               via=target.proxy_jump[-1] if target.proxy_jump else None)
    except BaseException:
        release_all()
        raise
    return conn, release_all


class _SharedJump:
    """One run's connection to the last jump host of a route, its users, and its last failure."""

    def __init__(self) -> None:
        self.conn: asyncssh.SSHClientConnection | None = None
        self.users = 0
        self.lock = asyncio.Lock()
        self.release_route: Callable[[], None] | None = None
        self.failure: tuple[str, float] | None = None  # so hosts behind a dead bastion fail at once


#: per event loop: route key -> its :class:`_SharedJump`
_jumps: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


async def _jump(target: SSHTarget, opts: RouteOptions, stats: LoginStats):
    """The (shared) connection to the last jump host of ``target``'s ProxyJump chain."""
    hops = [resolve_jump(spec, target) for spec in target.proxy_jump]
    # each hop's own known_hosts files (its Host block, resolve_jump) are part of what was checked
    key = (tuple((h.where, h.user_known_hosts, h.global_known_hosts) for h in hops), opts.accept_new,
           target.config_file)
    loop = asyncio.get_running_loop()
    jumps = _jumps.get(loop)
    if jumps is None:
        jumps = _jumps[loop] = {}
    shared = jumps.get(key)
    if shared is None:
        shared = jumps[key] = _SharedJump()
    async with shared.lock:
        if shared.conn is None or shared.conn.is_closed():
            if shared.failure and time.monotonic() - shared.failure[1] < opts.timeout_s:
                raise LoginFailed(shared.failure[0])
            tunnel = None
            conns = []
            try:
                prev = None
                for spec, hop in zip(target.proxy_jump, hops):
                    label = f"jump host {spec}: "
                    conn = await login_hop(hop, opts, label, tunnel, stats, via=prev)
                    prev = spec
                    conns.append(conn)
                    tunnel = conn
            except BaseException as exc:
                for c in reversed(conns):
                    c.close()
                if isinstance(exc, LoginFailed):
                    shared.failure = (str(exc), time.monotonic())
                raise
            shared.failure = None
            shared.conn = tunnel

            def close_chain(conns=conns) -> None:
                for c in reversed(conns):
                    c.close()

            shared.release_route = close_chain
        shared.users += 1
    stats.route = list(target.proxy_jump)

    def release() -> None:
        shared.users -= 1
        if shared.users <= 0 and shared.release_route is not None:
            shared.release_route()
            shared.conn = None
            shared.release_route = None

    return shared.conn, release
