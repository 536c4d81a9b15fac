"""Asking a server what it is after a handshake failed before its SSH banner: the first words it
sends (peeked, left for asyncssh) and its answer to an SSH identification string, over each route
fleetctl reaches a host by (TCP, a jump host's ``direct-tcpip`` channel, a ``ProxyCommand``).

An SSH server sends ``SSH-2.0-...`` first (RFC 4253 4.2), sshd past MaxStartups ``Exceeded
MaxStartups`` (sshd.c ``drop_connection``); asyncssh discards any other line before a banner as
a pre-banner line, so a web server on the port looked like sshd closing. What these return is
read by :func:`fleetctl.connection.ssh_errors.not_ssh_message` and
:func:`~fleetctl.connection.ssh_errors.drop_message`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import asyncssh

from .ssh_proxy import ProxyProcess
from ..util.within import within

#: What a probe sends: an SSH client's identification string (RFC 4253 4.2).
IDENT = b"SSH-2.0-fleetctl_probe\r\n"
#: At most this many bytes of an answer are read.
ANSWER_BYTES = 1024

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def peek_first_words(sock: socket.socket, timeout_s: float) -> bytes:
    """What the server has sent first (up to 256 bytes, left unread for asyncssh: MSG_PEEK), once
    anything came or ``timeout_s`` seconds passed. Only on a retry after a drop: sshd past
    MaxStartups writes ``Exceeded MaxStartups`` before closing (sshd.c ``drop_connection``),
    which asyncssh discards as a pre-banner line."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(sock.fileno(), lambda: ready.done() or ready.set_result(None))
    try:
        await within(ready, timeout_s)
        return sock.recv(256, socket.MSG_PEEK)
    except (asyncio.TimeoutError, TimeoutError, OSError):
        return b""
    finally:
        loop.remove_reader(sock.fileno())


async def probe_answer(open_streams: Callable[[], Awaitable[Streams]], timeout_s: float) -> bytes:
    """What a server answers an SSH client's identification string: its first line, or an HTML
    page up to its end; :data:`ANSWER_BYTES` and ``timeout_s`` seconds (for the open and the
    reading each) at most; ``b""`` when nothing came or the route could not be opened.

    Args:
        open_streams: opens a fresh connection to the server, as ``(reader, writer)``:
            :func:`tcp_opener`, :func:`tunnel_opener`, or a ProxyCommand's socket.
    """
    data = b""
    writer = None
    try:
        reader, writer = await within(open_streams(), timeout_s)
        writer.write(IDENT)
        async with asyncio.timeout(timeout_s):
            while len(data) < ANSWER_BYTES and (b"\n" not in data or data.lstrip().startswith(b"<")):
                chunk = await reader.read(ANSWER_BYTES - len(data))
                if not chunk:
                    break
                data += chunk
    except (asyncio.TimeoutError, TimeoutError, OSError, asyncssh.Error):
        pass
    finally:
        if writer is not None:
            writer.close()
    return data


def tcp_opener(address: str, port: int) -> Callable[[], Awaitable[Streams]]:
    """A TCP connection to ``address`` (an IP) and ``port``."""
    return lambda: asyncio.open_connection(address, port)


def tunnel_opener(tunnel: asyncssh.SSHClientConnection, host: str, port: int) -> Callable[[], Awaitable[Streams]]:
    """A ``direct-tcpip`` channel (RFC 4254 7.2) from the jump host ``tunnel`` to ``host:port``:
    the server exactly as the jump host reaches it for the login."""
    return lambda: tunnel.open_connection(host, port)


async def probe_proxy(command: str, timeout_s: float) -> tuple[bytes, int | None, str]:
    """Run ``command`` (a ProxyCommand) once more and ask what comes through it.

    Returns:
        ``(answer, exit status or None while it runs on after timeout_s seconds, its
        :meth:`~fleetctl.connection.ssh_proxy.ProxyProcess.stderr_note`)``; the command is killed
        afterwards.
    """
    try:
        proxy = ProxyProcess(command)
    except OSError:
        return b"", None, ""
    try:
        answer = await probe_answer(lambda: asyncio.open_connection(sock=proxy.sock), timeout_s)
        rc = await proxy.exit_status(max(0.01, min(1.0, timeout_s)))
        return answer, rc, proxy.stderr_note()
    finally:
        proxy.close()
