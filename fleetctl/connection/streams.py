"""Reading a child's stdout and stderr concurrently and splitting them into lines as they arrive.

Shared by the SSH and local connections. Both streams are drained at the same time, so a command
that writes megabytes to each can never fill one pipe (or one SSH channel window) while we wait
on the other.

Memory stays flat whatever a command prints: every byte goes to ``on_line`` as it arrives (the
run record writes it to the host's log), while what is kept for the :class:`CommandResult` is
only the last ``limit`` bytes of each stream (:class:`OutputTail`), with the number of bytes
dropped in front. A line longer than :data:`MAX_LINE_BYTES` is passed on in pieces, every piece
but the last marked ``partial`` (the line continues in the next piece), so nothing waits for a
newline that may never come and the log can show where it split.
"""

from __future__ import annotations

from typing import Protocol

from .base import CAPTURE_BYTES, LineCallback, OutputLine, Stream

CHUNK_BYTES = 64 * 1024
#: A line longer than this (bytes) is passed on in pieces rather than held back indefinitely.
MAX_LINE_BYTES = 1024 * 1024


class ByteReader(Protocol):
    """Anything with ``async read(n) -> bytes`` returning ``b""`` at EOF (asyncio, asyncssh)."""

    async def read(self, n: int = -1) -> bytes: ...


class OutputTail:
    """The last ``limit`` bytes of a stream (all of it when ``limit`` is ``None``).

    Attributes:
        dropped: bytes dropped from the front so far.
        total: bytes seen so far.
    """

    def __init__(self, limit: int | None = CAPTURE_BYTES) -> None:
        self.limit = limit
        self.dropped = 0
        self.total = 0
        self._buf = bytearray()

    def append(self, data: bytes) -> None:
        self.total += len(data)
        self._buf += data
        # trim in batches (past the limit plus a slack of half the limit, 4 times a small one, at
        # most 64 KiB) so that appending stays O(1) amortized and a small limit stays small
        if self.limit is not None and len(self._buf) > self.limit + max(self.limit // 2,
                                                                        min(64 * 1024, 4 * self.limit)):
            cut = len(self._buf) - self.limit
            del self._buf[:cut]
            self.dropped += cut

    def result(self) -> tuple[bytes, int]:
        """``(kept bytes, dropped bytes)``: at most ``limit`` bytes kept, starting at a line
        start when anything was dropped."""
        data = bytes(self._buf)
        dropped = self.dropped
        if self.limit is not None and len(data) > self.limit:
            cut = len(data) - self.limit
            data, dropped = data[cut:], dropped + cut
        if dropped:
            nl = data.find(b"\n")
            if 0 <= nl < len(data) - 1:
                data, dropped = data[nl + 1:], dropped + nl + 1
        return data, dropped


async def pump_lines(reader: ByteReader, stream: Stream, sink: OutputTail | bytearray,
                     on_line: LineCallback | None) -> None:
    """Read ``reader`` to EOF, keeping its tail in ``sink`` and passing every line to ``on_line``.

    Lines keep their ``b"\\n"``; the last line of a stream may lack it. Bytes are passed through
    untouched (invalid UTF-8 and multibyte characters split across reads included: the split
    happens on ``b"\\n"`` only, which never occurs inside a UTF-8 sequence). A line longer than
    :data:`MAX_LINE_BYTES` arrives as several :class:`OutputLine` pieces, all but the last with
    ``partial=True``.
    """
    pending = bytearray()
    append = sink.append if isinstance(sink, OutputTail) else sink.extend
    while True:
        chunk = await reader.read(CHUNK_BYTES)
        if not chunk:
            break
        append(chunk)
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
            on_line(OutputLine(stream, bytes(pending[:MAX_LINE_BYTES]), partial=True))
            del pending[:MAX_LINE_BYTES]
    if on_line is not None and pending:
        on_line(OutputLine(stream, bytes(pending)))
