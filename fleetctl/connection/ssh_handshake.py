"""One SSH handshake and login (asyncssh's ``connect`` with ssh(1)'s non-interactive rules), and
what its failures mean in one line: :func:`handshake` turns an :class:`~fleetctl.connection.ssh_target.SSHTarget`
and a connected socket or tunnel into an authenticated connection, or raises :class:`LoginFailed`
(or :class:`Dropped`, for a drop before login that is worth a retry). Around it: one hop (gates per
sshd, retries) is :mod:`fleetctl.connection.ssh_hop`, the route (jump hosts)
:mod:`fleetctl.connection.ssh_route`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncssh

from .ssh_errors import forwarding_refused, is_drop
from .ssh_hostkeys import HostKeyPolicy
from .ssh_identity import Identities, load_identities
from .ssh_target import SSHTarget
from ..util.within import within


class LoginFailed(Exception):
    """A host could not be reached or logged in to; ``str`` is one line naming the cause."""


class TimedOut(LoginFailed):
    """The TCP connect or the login ran out of its time (a :class:`LoginFailed`); ``banner``:
    the server's SSH banner had come."""

    def __init__(self, reason: str, *, banner: bool = False) -> None:
        super().__init__(reason)
        self.banner = banner


class Dropped(Exception):
    """The server closed the connection before login (retried); ``banner``: after its SSH banner."""

    def __init__(self, reason: str, *, banner: bool = False) -> None:
        super().__init__(reason)
        self.banner = banner


class _Client(asyncssh.SSHClient):
    """asyncssh's client hooks: the host key goes to the policy; no auth ever prompts."""

    def __init__(self, policy: HostKeyPolicy) -> None:
        self.policy = policy
        self.conn: asyncssh.SSHClientConnection | None = None
        self.key_checked = False

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self.conn = conn

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.key_checked = True
        return self.policy.verify(key)

    def public_key_auth_requested(self):  # every offered key was refused: nothing more to try
        return None

    def password_auth_requested(self):  # never prompt (ssh's BatchMode)
        return None

    def kbdint_auth_requested(self):
        return None


@dataclass
class RouteOptions:
    """Run-wide login options: ``accept_new`` host keys, ``timeout_s`` (seconds) for reaching one
    hop: its TCP connect (or the jump host's channel to it) and SSH login, every retry of a dropped
    handshake included (OpenSSH's ConnectTimeout bounds the connect and the banner exchange of one
    attempt; fleetctl's bounds the attempts together). Through jump hosts each hop has its own
    ``timeout_s``, so a route of k jump hosts takes at most (k + 1) x ``timeout_s`` (the rule and
    why: :func:`fleetctl.connection.ssh_route.login`). ``keepalive_interval_s``: seconds between
    keepalives (3 unanswered ones drop the connection)."""

    accept_new: bool = False
    timeout_s: float = 30.0
    keepalive_interval_s: float = 15.0


async def handshake(target: SSHTarget, opts: RouteOptions, label: str, *, sock=None, tunnel=None,
                     peer_ip: str | None = None, via: str | None = None) -> tuple[asyncssh.SSHClientConnection, HostKeyPolicy]:
    """One SSH handshake and login over ``sock`` (a connected TCP socket, closed on failure) or
    ``tunnel`` (a connection to the jump host ``via``), or the target's ProxyCommand: the host key
    checked by :class:`~fleetctl.connection.ssh_hostkeys.HostKeyPolicy` (recorded or refused,
    ``peer_ip`` for ``CheckHostIP``), the target's keys offered, never a password or a prompt
    (ssh's ``BatchMode``); ``label`` prefixes every message (``jump host X: ``).

    Returns:
        ``(connection, policy)``: ``policy.recorded`` names the host keys newly recorded.

    Raises:
        Dropped: the server closed the connection before login (sshd past MaxStartups): retry.
        LoginFailed: one line naming the cause (timeouts in seconds, the refusing server's words).
    """
    policy = HostKeyPolicy(target, accept_new=opts.accept_new, peer_ip=peer_ip, label=label)
    ids = await load_identities(target)
    client = _Client(policy)
    kwargs: dict = {}
    if sock is not None:
        kwargs["sock"] = sock
    elif tunnel is None:
        # the target's ProxyCommand, -o's included (None: none); asyncssh would read only ssh_config's
        kwargs["proxy_command"] = target.proxy_command
    if target.options is not None:  # ssh_config as read for the target: no file read again
        kwargs.update(options=target.options, config=None, client_host_keys=None)
    else:
        kwargs["config"] = list(target.config_paths)
    try:
        # the connect deadline is ours (within), not asyncssh's connect_timeout: that is an
        # asyncio.wait_for, which on Python < 3.12 drops a Ctrl-C that comes as the login completes
        conn = await within(asyncssh.connect(
            target.name, target.port, tunnel=tunnel, username=target.user,
            known_hosts=policy.known_hosts, client_factory=lambda: client,
            client_keys=ids.keys or None, agent_path=None, agent_forwarding=False, passphrase=None,
            connect_timeout=None, login_timeout=opts.timeout_s,
            keepalive_interval=opts.keepalive_interval_s, keepalive_count_max=3,
            gss_auth=False, gss_kex=False, password_auth=False, kbdint_auth=False, request_pty=False, **kwargs),
            opts.timeout_s)
    except BaseException as exc:
        if sock is not None:
            sock.close()
        raise _translate(exc, target, opts, policy, ids, client, label, via, tunnel) from None
    finally:
        ids.close()
    refusal = policy.after_login(conn.get_server_host_key())
    if refusal:
        conn.close()
        raise LoginFailed(refusal)
    return conn, policy


def _translate(exc: BaseException, target: SSHTarget, opts: RouteOptions, policy: HostKeyPolicy,
               ids: Identities, client: _Client, label: str, via: str | None, tunnel=None) -> BaseException:
    if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
        return exc
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return LoginFailed(policy.describe_failure(exc))
    if isinstance(exc, asyncssh.PermissionDenied):
        return LoginFailed(label + ids.explain_denied(target))
    where = f"{target.host}:{target.port}"
    if is_drop(exc):
        return Dropped(str(exc), banner=bool(client.conn and client.conn.get_extra_info("server_version")))
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        conn = client.conn
        if conn is None and tunnel is not None:  # the direct-tcpip open never answered (RFC 4254 7.2)
            return TimedOut(f"{label}timed out after {opts.timeout_s:g} s: the jump host {via} opened no "
                            f"connection to {where} (the host is down, a firewall drops the packets, or there is no "
                            f"route to it from the jump host)")
        if conn is None or not conn.get_extra_info("server_version"):
            return TimedOut(f"{label}timed out after {opts.timeout_s:g} s: {where} accepts TCP but sent no SSH "
                               f"banner (a hung sshd, or not an SSH server)")
        return TimedOut(f"{label}timed out after {opts.timeout_s:g} s: {where} did not finish the SSH "
                           f"{'login' if client.key_checked else 'handshake'}", banner=True)
    refused = forwarding_refused(exc, label=label, jump=via, where=where)
    if refused:
        return LoginFailed(refused)
    if isinstance(exc, asyncssh.DisconnectError):
        return LoginFailed(f"{label}disconnected by {where}: {exc.reason}")
    if isinstance(exc, ConnectionRefusedError):
        return LoginFailed(f"{label}connection refused by {where}")
    if isinstance(exc, OSError):
        return LoginFailed(f"{label}{exc.strerror or exc} ({where})")
    if isinstance(exc, (LoginFailed,)):
        return exc
    return LoginFailed(f"{label}{type(exc).__name__}: {exc}")
