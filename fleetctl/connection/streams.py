"""Reading a child's stdout and stderr concurrently and splitting them into lines as they arrive.

Shared by the SSH and local connections. Both streams are drained at the same time, so a command
that writes megabytes to each can never fill one pipe (or one SSH channel window) while we wait
on the other.
"""

from __future__ import annotations

from typing import Protocol

from .base import LineCallback, OutputLine, Stream

CHUNK_BYTES = 64 * 1024
#: A line longer than this (bytes) is passed on in pieces rather than held back indefinitely.
MAX_LINE_BYTES = 1024 * 1024


class ByteReader(Protocol):
    """Anything with ``async read(n) -> bytes`` returning ``b""`` at EOF (asyncio, asyncssh)."""

    async def read(self, n: int = -1) -> bytes: ...


async def pump_lines(
    reader: ByteReader, stream: Stream, sink: bytearray, on_line: LineCallback | None
) -> None:
    """Read ``reader`` to EOF, appending every byte to ``sink`` and every line to ``on_line``.

    Lines keep their ``b"\\n"``; the last line of a stream may lack it. Bytes are passed through
    untouched (invalid UTF-8 and multibyte characters split across reads included: the split
    happens on ``b"\\n"`` only, which never occurs inside a UTF-8 sequence).
    """
    pending = bytearray()
    while True:
        chunk = await reader.read(CHUNK_BYTES)
        if not chunk:
            break
        sink += chunk
        if on_line is None:
            continue
        pending += chunk
        start = 0
        while True:
            nl = pending.find(b"\n", start)
            if nl < 0:
                break
            on_line(OutputLine(stream, bytes(pending[start : nl + 1])))
            start = nl + 1
        del pending[:start]
        while len(pending) >= MAX_LINE_BYTES:
            on_line(OutputLine(stream, bytes(pending[:MAX_LINE_BYTES])))
            del pending[:MAX_LINE_BYTES]
    if on_line is not None and pending:
        on_line(OutputLine(stream, bytes(pending)))
