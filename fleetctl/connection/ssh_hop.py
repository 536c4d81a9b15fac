"""Reaching and logging in to ONE sshd, a hop of a route: TCP connect (or a ``ProxyCommand``, or a
channel through the previous hop), per-sshd gates, retries of dropped handshakes, and what a
failure means. :func:`login_hop` is called by :func:`fleetctl.connection.ssh_route.login` for each
jump host of a ``ProxyJump`` chain and for the target (one handshake and its messages:
:mod:`fleetctl.connection.ssh_handshake`).

Unreachable hosts never delay reachable ones:

- There is no fleet-wide handshake gate. sshd's ``MaxStartups`` (default ``10:30:100``,
  sshd_config(5)) limits the unauthenticated connections of ONE sshd, so the gate is per
  destination (the address and port connected to, or the jump route and target): at most
  ``FLEETCTL_MAX_HANDSHAKES`` (default 8: :func:`fleetctl.util.envvars.max_handshakes`)
  connections to one sshd are between TCP connect and login at once. A dead destination holds only its own gate, never another host's.
- Names of one destination share one attempt's outcome. While a destination has not answered
  yet, its first login is its *probe*: the other names for it wait for the probe's end without
  holding a gate slot (:func:`_await_probe`). A probe that failed for the address's sake (TCP
  connect timed out, refused, no route; the server accepted TCP but sent no SSH banner in time,
  or closed every handshake before its banner, as an sshd without host keys does; another
  protocol answered) is remembered for the destination for one connect timeout, so the
  waiting names, and names that come later, fail at once with the same cause instead of each
  waiting out its own connect timeout, 8 at a time (a trial: 24 names of one hung address took
  3 connect timeouts). Any other end (logged in, a key refused, a host key mismatch, handshakes
  dropped) says the address answers: the names then log in side by side, through the gate.
- A handshake the server closes before login (what sshd does past ``MaxStartups``) is retried
  with jittered exponential backoff (tenacity, see :mod:`fleetctl.connection.retry`), outside the
  gate, at most :data:`HANDSHAKE_ATTEMPTS` attempts within the connect timeout; each retry is
  counted in :attr:`LoginStats.handshake_retries`; each retry first peeks at what the server sends, and the
  final failure names ``MaxStartups`` only when the server said ``Exceeded MaxStartups`` (sshd's
  words past it); otherwise it names what the server did (closed before key exchange, sending
  nothing: an sshd without host keys, or one refusing this address), overlapping handshakes to
  that sshd or not (:func:`~fleetctl.connection.ssh_errors.drop_message`).

A ``ProxyCommand`` runs as ssh(1) runs it (:mod:`fleetctl.connection.ssh_proxy`). Final, named
after the command (as expanded) with its last stderr lines, never a transient drop: it exits
non-zero before the banner; it is still silent at the connect timeout (then killed, with its
process group); it exits 0 before the banner and, run once more, ends again without passing on a
byte (``Exceeded MaxStartups`` or a banner coming through it is a drop, retried). A server whose
answer to an SSH identification string is another protocol (HTTP) is final too, named with its
words (RFC 4253 4.2), on the route the login took: TCP, through the jump host (a ``direct-tcpip``
channel, naming the hop and the jump host it was reached through) or through the ProxyCommand
(:mod:`fleetctl.connection.ssh_probe`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import socket
import time
import weakref
from dataclasses import dataclass, field

import asyncssh

from .retry import retrying
from .ssh_errors import drop_message, not_ssh_message
from .ssh_handshake import Dropped, LoginFailed, RouteOptions, TimedOut, handshake
from .ssh_probe import peek_first_words, probe_answer, probe_proxy, tcp_opener, tunnel_opener
from .ssh_proxy import ProxyProcess, ended_silent_message
from .ssh_target import SSHTarget
from ..util.envvars import max_handshakes
from ..util.within import within

__all__ = ["HANDSHAKE_ATTEMPTS", "LoginStats", "login_hop"]

#: Handshakes tried per hop while the server drops them before login (all within its connect timeout).
HANDSHAKE_ATTEMPTS = 6


@dataclass
class LoginStats:
    """What reaching one host took: ``handshake_retries`` (drops before login, MaxStartups),
    ``tcp_connect_s`` and ``login_s`` (seconds), ``recorded_host_keys`` (names whose key was
    newly recorded), ``route`` (jump hosts used)."""

    handshake_retries: int = 0
    tcp_connect_s: float = 0.0
    login_s: float = 0.0
    recorded_host_keys: list[str] = field(default_factory=list)
    route: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v not in (0, 0.0, [], None)}


# -- per event loop state: destination gates and failure memos -----------------------------------

class _Destination:
    """One sshd's gate, its remembered TCP failure, and its handshakes: ``in_flight`` now and
    ``entered`` in all (so a handshake knows whether another overlapped it)."""

    def __init__(self) -> None:
        self.gate = asyncio.Semaphore(max_handshakes())  # checked when the run started (new_run)
        self.failure: tuple[str, float] | None = None
        self.in_flight = 0
        self.entered = 0
        self.probe: asyncio.Future | None = None  # set while the first login to it is under way
        self.answered = False  # a login to it got past the address's own failures

    def fresh_failure(self, timeout_s: float) -> str | None:
        """The remembered failure of the address (no label), if younger than ``timeout_s`` seconds."""
        if self.failure and time.monotonic() - self.failure[1] < timeout_s:
            return self.failure[0]
        return None


async def _await_probe(dest: _Destination, timeout_s: float) -> bool:
    """Wait, holding no gate slot, while another name's first login to ``dest`` is under way.
    True when the caller is to be the probe itself (nothing has answered and none is under way).

    Raises:
        LoginFailed: the address's remembered failure (no label: the caller adds its own).
    """
    while True:
        failed = dest.fresh_failure(timeout_s)
        if failed:
            raise LoginFailed(failed)
        if dest.answered:
            return False
        if dest.probe is None:
            dest.probe = asyncio.get_running_loop().create_future()
            return True
        await asyncio.shield(dest.probe)


def _end_probe(dest: _Destination, answered: bool) -> None:
    """The probe ended (``answered``: in any way but the address's own failure, which is
    remembered by then, or the probe's cancellation); the names waiting on it go on."""
    dest.answered = dest.answered or answered
    probe, dest.probe = dest.probe, None
    if probe is not None and not probe.done():
        probe.set_result(None)


#: per event loop: destination key -> its :class:`_Destination`
_destinations: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


def _destination(key: tuple) -> _Destination:
    loop = asyncio.get_running_loop()
    dests = _destinations.get(loop)
    if dests is None:
        dests = _destinations[loop] = {}
    d = dests.get(key)
    if d is None:
        d = dests[key] = _Destination()
    return d


# -- TCP ----------------------------------------------------------------------------------------

async def _resolve(host: str, port: int) -> list[tuple]:
    """getaddrinfo: IP literals without a resolver round trip; names in the loop's executor."""
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass
    try:
        return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise LoginFailed(f"cannot resolve {host}: {exc.strerror}") from None


async def _tcp_connect(infos: list[tuple], where: str, timeout_s: float) -> socket.socket:
    """Connect to the first address that answers, within ``timeout_s`` seconds in all."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout_s
    errors = []
    for family, type_, proto, _, addr in infos:
        sock = socket.socket(family, type_, proto)
        sock.setblocking(False)
        try:
            await within(loop.sock_connect(sock, addr), max(0.01, deadline - time.monotonic()))
            return sock
        except (asyncio.TimeoutError, TimeoutError):
            sock.close()
            errors.append("timeout")
            break
        except OSError as exc:
            sock.close()
            errors.append(exc)
        except BaseException:
            sock.close()
            raise
    last = errors[-1] if errors else None
    if last == "timeout":
        raise TimedOut(f"timed out after {round(timeout_s, 1):g} s: no TCP connection to {where} (packets dropped: "
                          f"the host is down, a firewall drops them, or there is no route)")
    if isinstance(last, ConnectionRefusedError):
        raise LoginFailed(f"connection refused by {where} (no sshd listening on that port)")
    if isinstance(last, OSError) and last.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        raise LoginFailed(f"no route to {where} ({last.strerror})")
    raise LoginFailed(f"cannot connect to {where}: {getattr(last, 'strerror', None) or last}")


# -- one hop: its gate, its retries ----------------------------------------------------------------

async def login_hop(target: SSHTarget, opts: RouteOptions, label: str, tunnel: asyncssh.SSHClientConnection | None,
                    stats: LoginStats, *, via: str | None = None) -> asyncssh.SSHClientConnection:
    """Log in to ``target`` directly (TCP, its ProxyCommand, or through ``tunnel``, the
    connection to the jump host ``via``), through its destination's gate, retrying drops.
    ``label`` prefixes every failure (``"jump host X: "`` for a jump host, else ``""``);
    ``stats`` gets the hop's timings, retries and recorded host keys. The connect budget is
    ``opts.timeout_s`` seconds for this hop, all its attempts together.

    A drop made while no other handshake of this run to the same sshd overlapped it is counted as
    *alone*: when every drop was, the final message says it is not MaxStartups
    (:func:`~fleetctl.connection.ssh_errors.drop_message`).

    Raises:
        LoginFailed: one line naming the cause, prefixed with ``label``.
    """
    where = f"{target.host}:{target.port}"
    infos: list[tuple] = []
    if tunnel is not None:
        key: tuple = ("via", id(tunnel), target.host, target.port)
    elif target.proxy_command:
        key = ("proxy", target.proxy_command, target.host, target.port)
    else:
        try:
            infos = await _resolve(target.host, target.port)
        except LoginFailed as exc:
            raise LoginFailed(label + str(exc)) from None
        key = ("tcp", infos[0][4][0], target.port)
    dest = _destination(key)
    drops: dict = {"alone": 0, "banner": False, "said": None, "n": 0, "reason": ""}
    budget: dict = {"deadline": None}  # set as the first attempt enters the gate

    def left_s() -> float:
        return budget["deadline"] - time.monotonic()

    def given_up(extra: str = "") -> LoginFailed:
        """The final failure after ``drops["n"]`` dropped handshakes."""
        n = drops["n"]
        cut = (f"; the connect timeout ({opts.timeout_s:g} s, for all attempts together) ended the retries"
               if n < HANDSHAKE_ATTEMPTS else "")
        return LoginFailed(label + drop_message(where, n, drops["reason"], alone=drops["alone"] == n,
                                                banner_seen=bool(drops["banner"]), said=drops["said"]) + cut + extra)

    async def in_gate(n: int):
        if budget["deadline"] is None:
            budget["deadline"] = time.monotonic() + opts.timeout_s
        if dest.failure and time.monotonic() - dest.failure[1] < opts.timeout_s:
            raise LoginFailed(label + dest.failure[0])
        sock, peer_ip = None, None
        if infos:
            t0 = time.monotonic()
            try:
                sock = await _tcp_connect(infos, where, max(0.01, left_s()))
            except LoginFailed as exc:
                dest.failure = (str(exc), time.monotonic())
                raise type(exc)(label + str(exc)) from None
            stats.tcp_connect_s = round(time.monotonic() - t0, 3)
            peer_ip = sock.getpeername()[0]
            if n > 1:  # after a drop: what does the server say first?
                drops["said"] = await peek_first_words(sock, max(0.01, min(5.0, left_s())))
        proxy = None
        if tunnel is None and target.proxy_command:  # run as ssh(1) runs it (see ssh_proxy)
            try:
                proxy = ProxyProcess(target.proxy_command)
            except OSError as exc:
                raise LoginFailed(f"{label}ProxyCommand `{target.proxy_command}`: {exc.strerror or exc}") from None
            sock = proxy.sock
        t0 = time.monotonic()
        try:
            conn, policy = await handshake(target, dataclasses.replace(opts, timeout_s=round(max(0.01, left_s()), 2)),
                                            label, sock=sock, tunnel=tunnel, peer_ip=peer_ip, via=via)
        except BaseException as exc:
            final = None
            if isinstance(exc, TimedOut) and not exc.banner and n == 1 and proxy is None:
                said = str(exc)  # no SSH banner in the whole connect timeout: the address's failure
                dest.failure = (said[len(label):] if said.startswith(label) else said, time.monotonic())
            if proxy is not None:
                final = await _proxy_verdict(proxy, exc, where, n == 1, opts.timeout_s, max(0.01, min(2.0, left_s())))
            elif isinstance(exc, Dropped) and not exc.banner and n == 1 and (peer_ip is not None or tunnel is not None):
                # another protocol, or an sshd? asked on the route the login took
                opener = (tcp_opener(peer_ip, target.port) if tunnel is None
                          else tunnel_opener(tunnel, target.host, target.port))
                answer = await probe_answer(opener, max(0.01, min(2.0, left_s())))
                final = not_ssh_message(where if tunnel is None else f"{where} (reached through the jump host {via})",
                                        answer)
                if final:
                    dest.failure = (final, time.monotonic())
            if final:  # final: the same route would fail the same way, no transient drop
                raise LoginFailed(label + final) from None
            raise
        if proxy is not None:
            proxy.reap_after(conn.wait_closed())
        stats.login_s = round(time.monotonic() - t0, 3)
        stats.recorded_host_keys += policy.recorded
        return conn

    async def attempt(n: int):
        if n > 1:
            stats.handshake_retries += 1
        try:
            async with dest.gate:
                dest.in_flight += 1
                dest.entered += 1
                mine, crowded = dest.entered, dest.in_flight > 1
                try:
                    if n > 1 and left_s() <= 0:  # the gate's queue took what was left
                        raise given_up()
                    return await in_gate(n)
                except Dropped:
                    if not crowded and dest.entered == mine:
                        drops["alone"] += 1
                    raise
                finally:
                    dest.in_flight -= 1
        except Dropped as exc:
            drops["banner"] = drops["banner"] or exc.banner
            drops["n"], drops["reason"] = n, str(exc)
            if n >= HANDSHAKE_ATTEMPTS:
                raise given_up() from None
            raise
        except TimedOut:
            if n > 1:  # a retry that ran out of the time left: the drops are the story
                raise given_up(f" (attempt {n} was cut short by it)") from None
            raise

    async def attempts():
        try:
            return await retrying(attempt, retryable=lambda e: isinstance(e, Dropped), attempts=HANDSHAKE_ATTEMPTS,
                                  initial_s=0.2, max_s=5.0, deadline=lambda: budget["deadline"])
        except Dropped:  # the deadline stopped the retries before HANDSHAKE_ATTEMPTS
            raise given_up() from None

    try:  # the first login to a destination is its probe; other names for it wait (_await_probe)
        probing = await _await_probe(dest, opts.timeout_s)
    except LoginFailed as exc:
        raise LoginFailed(label + str(exc)) from None
    if not probing:
        return await attempts()
    before, answered = dest.failure, False
    try:
        conn = await attempts()
        answered = True
        return conn
    except LoginFailed as exc:
        if drops["n"] and not drops["banner"] and dest.failure is before:  # every handshake closed, no banner
            said = str(exc)
            dest.failure = (said[len(label):] if said.startswith(label) else said, time.monotonic())
        answered = dest.failure is before  # not the address's own failure: it answers
        raise
    except Exception:
        answered = True
        raise
    finally:
        _end_probe(dest, answered)


async def _proxy_verdict(proxy: ProxyProcess, exc: BaseException, where: str, first: bool, timeout_s: float,
                         wait_s: float) -> str | None:
    """The final one-line failure of a login through ``proxy`` (then killed), or ``None`` when
    ``exc`` stands (a drop worth a retry, a refusal of the server behind it): still silent at the
    connect timeout (``timeout_s`` seconds); exited non-zero before the banner; on a first drop
    with exit 0, run once more (``wait_s`` seconds at most): nothing came through it before it
    ended, or another protocol answered. ``Exceeded MaxStartups`` or a banner: a retry."""
    try:
        if isinstance(exc, TimedOut) and not exc.banner and proxy.proc.poll() is None:
            return f"{where}: {proxy.silent_message(timeout_s)}"
        if not isinstance(exc, (Dropped, TimedOut)):
            return None
        failed = await proxy.failure(wait_s)
        if failed:
            return f"{where}: {failed}"
        if not (isinstance(exc, Dropped) and not exc.banner and first and proxy.proc.returncode == 0):
            return None
    finally:
        proxy.close()
    answer, rc, words = await probe_proxy(proxy.command, wait_s)
    if not answer.strip() and rc == 0:
        return f"{where}: {ended_silent_message(proxy.command, words)}"
    return not_ssh_message(f"{where} (reached through ProxyCommand `{proxy.command}`)", answer)

