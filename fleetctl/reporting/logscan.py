"""Reading a host's log from a run record for a report: its tail and the first compiler error line.

A host log (``runs/<run_id>/logs/<host>.log``, see :mod:`fleetctl.reporting.record`) holds every
line the host printed behind an ``out| `` or ``err| `` marker, and ``==> `` task markers. Logs can be
tens of MiB (a chatty build), so the tail is read from the end of the file only, and the scan for
the first error line reads one line at a time (only for hosts that failed).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .diaglines import is_error

#: Bytes read from the end of a log for its tail.
TAIL_READ_BYTES = 64 * 1024
#: Characters kept of one line (a minified-JSON line or a 1,000-character warning is cut there).
LINE_CHARS = 240

_MARK = re.compile(rb"^(out|err)\| ")


@dataclass
class LogInfo:
    """What a report shows of one host log.

    Attributes:
        path: the log file.
        size_bytes: its size (0 when missing).
        tail: its last lines, markers (``out| ``/``err| ``) removed, each cut at :data:`LINE_CHARS`.
        tail_cut: the log holds more lines than ``tail``.
        first_error: the first compiler/build error line of the last task in the log, or None.
        exists: the log file exists.
    """

    path: Path
    size_bytes: int = 0
    tail: list[str] = field(default_factory=list)
    tail_cut: bool = False
    first_error: str | None = None
    exists: bool = False


def _text(raw: bytes) -> str:
    """One log line as text: its ``out| ``/``err| `` marker removed, undecodable bytes replaced,
    control characters (but tabs) shown as ``?``, cut at :data:`LINE_CHARS` characters."""
    raw = _MARK.sub(b"", raw.rstrip(b"\r\n"))
    text = raw.decode("utf-8", "replace")
    text = "".join(c if c.isprintable() or c == "\t" else "?" for c in text)
    return text if len(text) <= LINE_CHARS else text[:LINE_CHARS - 1] + "\u2026"


def read_tail(path: Path, lines: int) -> tuple[list[str], bool, int]:
    """The last ``lines`` lines of ``path`` (read from at most :data:`TAIL_READ_BYTES` at its end).

    Returns:
        ``(lines, cut, size_bytes)``: ``cut`` is True when the file holds more lines than returned.
        A missing file gives ``([], False, 0)``.
    """
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - TAIL_READ_BYTES)
            fh.seek(start)
            data = fh.read()
    except OSError:
        return [], False, 0
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    if start > 0 and parts:
        parts = parts[1:]  # the first piece is part of a longer line
    parts = [p for p in parts if not p.startswith((b"out~ ", b"err~ "))]  # fleetctl's own protocol lines
    cut = start > 0 or len(parts) > lines
    return [_text(p) for p in parts[-lines:]] if lines > 0 else [], cut, size


def first_error_line(path: Path) -> str | None:
    """The first line that is a compiler or build error in its tool's syntax
    (:data:`fleetctl.reporting.diaglines.ERROR`: not a line naming a file ``error.cpp``) printed
    by the last task in the log (after its last ``==> task`` marker), or None."""
    first: str | None = None
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                if raw.startswith(b"==> task "):
                    first = None
                    continue
                if first is None and not raw.startswith(b"==> "):
                    text = _text(raw)
                    if is_error(text):
                        first = text.strip()
    except OSError:
        return None
    return first


def scan_log(path: Path, *, tail_lines: int, want_error: bool) -> LogInfo:
    """A host log's :class:`LogInfo`: its tail, and (with ``want_error``) its first error line."""
    tail, cut, size = read_tail(path, tail_lines)
    info = LogInfo(path=path, size_bytes=size, tail=tail, tail_cut=cut, exists=path.exists())
    if want_error and info.exists:
        info.first_error = first_error_line(path)
    return info
