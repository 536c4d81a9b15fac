"""What an SSH server's refusals mean: asyncssh exceptions read as OpenSSH's sshd means them.

Pure classification and one-line messages (no I/O); :mod:`fleetctl.connection.ssh_hop` (login,
through jump hosts too), :mod:`fleetctl.connection.ssh_exec` (commands) and
:mod:`fleetctl.connection.ssh_files` (SFTP) raise them.

- A connection closed before login is a *drop*. sshd drops connections past ``MaxStartups``
  (sshd_config(5), default ``10:30:100``) at random once more than 10 are unauthenticated at once,
  so some of many concurrent connections are dropped and a retry gets through. A connection
  closed while it was the only one open to that sshd is something else: an sshd without readable
  host keys closes every connection before its banner (it logs ``sshd: no hostkeys available --
  exiting.`` per connection, as OpenSSH 9.2's re-executed sshd does after the key files were
  removed), as does one refusing the client's address (tcp wrappers' ``sshd: ALL`` in
  hosts.deny, ``MaxStartups 0``). :func:`drop_message` names the two apart, on sshd's own words:
  past MaxStartups it says ``Exceeded MaxStartups`` before closing; without host keys it sends
  nothing, whether or not other connections of the run to it overlapped.
- A channel the server opens and then refuses a ``subsystem`` request on (no ``Subsystem sftp``
  line in sshd_config: hardened servers remove it) is asyncssh's ``ChannelOpenError`` with its own
  code ``OPEN_REQUEST_SESSION_FAILED`` (asyncssh ``channel.py``), never a MaxSessions refusal
  (sshd refuses the channel open itself, ``open failed``), so it is final for the connection.
- A jump host that forbids TCP forwarding (``AllowTcpForwarding no``, ``DisableForwarding yes``,
  or a ``PermitOpen`` that excludes the target, often in a ``Match`` block) answers the
  ``direct-tcpip`` open with ``SSH2_OPEN_ADMINISTRATIVELY_PROHIBITED`` (RFC 4254 section 5.1;
  OpenSSH serverloop.c), as ``ssh -J`` reports: ``channel 0: open failed: administratively
  prohibited``.
"""

from __future__ import annotations

import asyncio
import re

import asyncssh


def is_drop(exc: BaseException) -> bool:
    """A connection closed by the server before the handshake finished (what sshd does to
    connections past MaxStartups, and to every connection when it has no host keys). Refusals,
    timeouts, authentication and host key failures are not drops."""
    if isinstance(exc, (asyncssh.ConnectionLost, ConnectionResetError, BrokenPipeError,
                        asyncio.IncompleteReadError)):
        return True
    return isinstance(exc, asyncssh.DisconnectError) and not isinstance(
        exc, (asyncssh.PermissionDenied, asyncssh.HostKeyNotVerifiable)) and "closed" in str(exc.reason).lower()


def drop_message(where: str, attempts: int, reason: str, *, alone: bool, banner_seen: bool,
                 said: bytes | None = None) -> str:
    """The one line for a host whose every handshake was dropped before login.

    MaxStartups is named only on its evidence: OpenSSH's sshd writes ``Exceeded MaxStartups``
    before it drops a connection past MaxStartups (sshd.c ``drop_connection``; OpenSSH 9.2 here),
    so a server probed after a drop that sent anything else (or nothing) closed for another
    cause, even when other connections of this run to it overlapped (two inventory hosts on one
    sshd): most often no usable host keys (sshd(8) logs ``no hostkeys available -- exiting.``).
    (An sshd old enough to drop past MaxStartups without a word would be named so too; its log
    says ``past MaxStartups``.)

    Args:
        where: ``host:port`` connected to.
        attempts: handshakes made (all dropped).
        reason: the last drop as asyncssh put it.
        alone: every one of them was the only connection of this run to that sshd while it lasted
            (so not MaxStartups' random early drop of excess connections).
        banner_seen: the server sent its SSH banner before closing at least once.
        said: what the server sent first on a connection after a drop (``None``: not probed, as
            through a jump host or ProxyCommand).
    """
    count = "once" if attempts == 1 else f"{attempts} times"
    if said is not None and b"Exceeded MaxStartups" in said:
        return (f"{where} closed the connection before login {count} ({reason}), saying 'Exceeded "
                f"MaxStartups': sshd's MaxStartups (too many unauthenticated connections at once, default 10:30:100"
                f"{'' if not alone else '; held by other clients, as no other connection of this run was open'}); "
                f"raise it on the host, or lower --forks")
    when = "after its SSH banner" if banner_seen else "before sending its SSH banner"
    keys = ("sshd may have no host keys, or none it can read (see the server's log for 'no hostkeys available'), "
            "or it refuses this address (tcp wrappers' hosts.deny, MaxStartups 0)")
    if said is None and not alone:
        return (f"{where} closed the connection before login {count} ({reason}), each time {when}: "
                f"sshd's MaxStartups if many clients connect to it at once (default 10:30:100; raise it on the "
                f"host, or lower --forks), else {keys}")
    if alone:
        return (f"{where} closed the connection before login {count}, each time {when} on a single "
                f"connection (no other connection of this run to it was open, so not MaxStartups dropping excess "
                f"connections): {keys}")
    words = said.decode("utf-8", "replace").strip()[:100]
    heard = f"it said '{words}'" if words else "it sent nothing before closing"
    phase = "during key exchange (after its SSH banner)" if banner_seen else "before key exchange"
    return (f"{where} closed the connection {phase} {count} ({reason}); "
            f"{heard}, not 'Exceeded MaxStartups' as sshd past MaxStartups does, so not MaxStartups (other "
            f"connections of this run to it overlapped): {keys}")


def describe_error(exc: BaseException) -> str:
    """A broken connection or channel in a few words, for ``connection lost during ...``:
    ``disconnected: REASON`` (the server sent a disconnect), ``connection lost``, the OS's words
    for an :class:`OSError`, else the exception's type and text."""
    if isinstance(exc, asyncssh.DisconnectError):
        return f"disconnected: {exc.reason}"
    if isinstance(exc, asyncssh.ConnectionLost):
        return "connection lost"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return f"{type(exc).__name__}: {exc}"


def not_ssh_message(where: str, answer: bytes) -> str | None:
    """The one line for a server that answered in another protocol, or ``None`` when ``answer``
    (its reply to an SSH client's identification string) is an SSH banner, sshd's ``Exceeded
    MaxStartups``, or nothing. An SSH server's first line is ``SSH-2.0-...`` (RFC 4253 4.2)."""
    first = answer.split(b"\n", 1)[0].strip()
    if not first or first.startswith(b"SSH-") or b"Exceeded MaxStartups" in answer:
        return None
    text = first.decode("utf-8", "replace")
    if text.startswith("<"):  # an HTML page without a status line (an HTTP/0.9 reply): its text
        page = re.sub(r"(?is)<head>.*?</head>", " ", answer.decode("utf-8", "replace"))
        text = re.sub(r"<[^>]*>", " ", page)
    words = " ".join(text.split())[:120]
    return (f"{where} is not an SSH server: it answered '{words}' where an SSH banner ('SSH-2.0-...') was "
            f"expected (RFC 4253 4.2)")


def is_subsystem_refused(exc: BaseException) -> bool:
    """The server opened the session channel but refused the subsystem request (asyncssh's
    ``OPEN_REQUEST_SESSION_FAILED``; sshd logs ``subsystem request for sftp by user U failed,
    subsystem not found``)."""
    return isinstance(exc, asyncssh.ChannelOpenError) and exc.code == asyncssh.OPEN_REQUEST_SESSION_FAILED


def is_lost(exc: BaseException) -> bool:
    """The SFTP channel or the connection under it is gone, mid-transfer or before it: asyncssh's
    ``SFTPConnectionLost`` (the sftp-server process died, the channel closed), ``ConnectionLost``
    or a disconnect, and ``BrokenPipeError`` (asyncssh ``channel.py``: ``Channel not open for
    sending``) or a reset from a request on a channel already closed. No later request on it can
    succeed; ``SFTPNoConnection`` (``FX_NO_CONNECTION``, "Connection not open": a request on a
    session already closed) is the same fact seen one request later."""
    return isinstance(exc, (asyncssh.SFTPConnectionLost, asyncssh.SFTPNoConnection, asyncssh.ConnectionLost,
                            asyncssh.DisconnectError,
                            BrokenPipeError, ConnectionResetError, asyncio.IncompleteReadError))


def sftp_refused_note() -> str:
    """The one note for a host whose sshd has no SFTP subsystem."""
    return ("the server refused the SFTP subsystem (subsystem request failed: no 'Subsystem sftp' in "
            "its sshd_config); every file goes over an exec channel (cat) instead")


def is_channel_refused(exc: BaseException) -> bool:
    """A channel open the server refused, which waiting may cure (over ``MaxSessions``, or a
    just-closed channel not yet reaped); a refused subsystem request is not one."""
    return isinstance(exc, asyncssh.ChannelOpenError) and not is_subsystem_refused(exc)


def forwarding_refused(exc: BaseException, *, label: str, jump: str | None, where: str) -> str | None:
    """The one line for a ``direct-tcpip`` open a jump host refused, or ``None`` when ``exc``
    is not a refused channel open.

    Args:
        label: prefix of the hop being reached (``"jump host X: "``), or ``""``.
        jump: the jump host (as ProxyJump names it) asked to open the connection.
        where: ``host:port`` it was asked to connect to.
    """
    if not isinstance(exc, asyncssh.ChannelOpenError):
        return None
    via = f"the jump host {jump}" if jump else "the jump host"
    if exc.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED:
        return (f"{label}{via} forbids TCP forwarding to {where} (administratively prohibited: AllowTcpForwarding "
                f"no or DisableForwarding yes in its sshd_config, maybe in a Match block, or a PermitOpen that "
                f"excludes {where}): allow it for this user, or reach {where} another way")
    return f"{label}{via} could not open a connection to {where}: {exc.reason}"
