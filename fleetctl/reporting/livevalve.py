"""Live printing that never slows a host down: a bounded queue between the engine and the terminal.

Printing a line with rich costs about 0.1 ms; a build that prints 200 MiB prints two million lines.
Done on the event loop, that would stall reading the host's output, fill the SSH window and stop
the build on the host while it waits to write. So the live display goes through a
:class:`LiveValve`: the engine's thread only appends to a bounded queue (O(1)); a printer thread
prints at most ``lines_per_s`` lines a second. When the display falls behind, lines are dropped
from the display only (the run record's log keeps every byte): at a host's first gap one line says
that its lines are not all shown and where they all are (``fleetctl logs RUN_ID HOST``, the run's
real id: :meth:`LiveValve.name_run`), and at the end one line per host says how many were not
shown (operator trial: a notice per gap, hundreds of them, naming ``RUN`` rather than the run).
Lines longer than ``max_line_bytes`` are shortened for display.
Non-line messages (task starts, results, notes) are never dropped and keep their order with the
lines around them.

Usage::

    valve = LiveValve()
    on_line = valve.wrap_line(printer)        # printer(host, OutputLine)
    on_result = valve.wrap(live.result)       # any callable: queued, never dropped
    ...
    valve.close()                             # prints what is queued, stops the thread
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from ..connection.base import OutputLine

MAX_QUEUED_LINES = 2000
LINES_PER_S = 2000
MAX_LINE_BYTES = 4096


class LiveValve:
    """See the module docstring.

    Args:
        max_queued_lines: lines waiting to be printed before new ones are dropped.
        lines_per_s: most lines printed per second (the display's CPU budget).
        max_line_bytes: longer lines are shortened for display, with a note.
        log_hint: ``hint(host) -> str`` naming where the dropped lines are; default
            ``fleetctl logs RUN_ID HOST`` once :meth:`name_run` named the run (``the run's log`` before).
    """

    def __init__(self, *, max_queued_lines: int = MAX_QUEUED_LINES, lines_per_s: float = LINES_PER_S,
                 max_line_bytes: int = MAX_LINE_BYTES, log_hint: Callable[[str], str] | None = None) -> None:
        self.max_queued_lines = max_queued_lines
        self.lines_per_s = lines_per_s
        self.max_line_bytes = max_line_bytes
        self.log_hint = log_hint or self._run_log
        self.run_id: str | None = None
        self.dropped_total = 0
        self._queue: collections.deque = collections.deque()
        self._queued_lines = 0
        self._dropped: dict[str, int] = {}  # host -> lines not shown, all run long (counted at the end)
        self._told: set[str] = set()  # hosts whose first gap was told
        self._marker_printer: dict[str, Callable] = {}
        self._cond = threading.Condition()
        self._closing = False
        self._idle = False
        self._thread = threading.Thread(target=self._drain, name="fleetctl-live", daemon=True)
        self._thread.start()

    def name_run(self, run_id: str) -> None:
        """The run whose lines these are: the notices name ``fleetctl logs RUN_ID HOST``."""
        self.run_id = run_id

    def _run_log(self, host: str) -> str:
        return f"fleetctl logs {self.run_id} {host}" if self.run_id else "the run's log"

    # -- producer side (the engine's thread) ---------------------------------------------------

    def wrap_line(self, printer: Callable[[str, OutputLine], Any]) -> Callable[[str, OutputLine], None]:
        """``printer(host, line)`` behind the valve: may drop lines when the display falls behind."""
        def on_line(host: str, line: OutputLine) -> None:
            self.line(printer, host, line)
        return on_line

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., None]:
        """``fn(*args)`` behind the valve, in order with the lines, never dropped."""
        def call(*args: Any) -> None:
            self.call(fn, *args)
        return call

    def line(self, printer: Callable[[str, OutputLine], Any], host: str, line: OutputLine) -> None:
        with self._cond:
            if self._queued_lines >= self.max_queued_lines:
                self._dropped[host] = self._dropped.get(host, 0) + 1
                self._marker_printer[host] = printer
                self.dropped_total += 1
                return
            self._tell_gap(host)
            if len(line.data) > self.max_line_bytes:
                extra = len(line.data) - self.max_line_bytes
                line = OutputLine(line.stream, line.data[: self.max_line_bytes]
                                  + f" ... ({extra} more bytes of this line in the log)\n".encode())
            self._queue.append((True, printer, (host, line)))
            self._queued_lines += 1
            if self._idle:
                self._cond.notify()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            for host in list(self._dropped):
                self._tell_gap(host)
            self._queue.append((False, fn, args))
            if self._idle:
                self._cond.notify()

    def _tell_gap(self, host: str) -> None:
        """At ``host``'s first gap (lines dropped, then one shown or a message queued), once: its
        lines are not all shown, and where they are. Later gaps are counted for :meth:`close`."""
        if host in self._dropped and host not in self._told:
            self._told.add(host)
            self._notice(host, f"... some lines of {host} are not shown here: the display falls behind; all are in "
                               f"{self.log_hint(host)} (a count at the end)\n")

    def _notice(self, host: str, text: str) -> None:
        self._queue.append((False, self._marker_printer[host], (host, OutputLine("stderr", text.encode()))))

    # -- consumer side (the printer thread) ----------------------------------------------------

    def _drain(self) -> None:
        budget_s = 1.0 / self.lines_per_s if self.lines_per_s else 0.0
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._idle = True  # producers wake the thread only when it sleeps on an empty queue
                    self._cond.wait()
                    self._idle = False
                if not self._queue and self._closing:
                    return
                is_line, fn, args = self._queue.popleft()
                if is_line:
                    self._queued_lines -= 1
                closing = self._closing
            started = time.monotonic()
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a broken terminal must not stop the run
                pass
            if is_line and budget_s and not closing:
                spare = budget_s - (time.monotonic() - started)
                if spare > 0:
                    time.sleep(spare)  # the display's rate limit, on its own thread

    def close(self, log_cut: Callable[[str], str | None] = lambda host: None) -> None:
        """Print what is queued (and the drop markers), then stop the printer thread.
        ``log_cut(host)``: what the run record's log of ``host`` lost (a full disk:
        :mod:`fleetctl.reporting.recordcut`), or None when it is whole; a cut log is not pointed
        to as holding every line (operator trial: "all are in fleetctl logs" of a cut log)."""
        with self._cond:
            for host, n in self._dropped.items():  # one count per host, at the end
                cut = log_cut(host)
                where = (f"the host's log was cut too: {cut}" if cut else f"all are in {self.log_hint(host)}")
                self._notice(host, f"... {n} line(s) of {host} not shown here (the display fell behind; {where})\n")
            self._dropped.clear()
            self._closing = True
            self._cond.notify_all()
        self._thread.join()


class ValvedObserver:
    """A terminal observer behind a :class:`LiveValve`: its output lines and events are printed by
    the valve's thread (lines may be dropped from the display, never events), so printing never
    slows the run. ``close`` prints what is queued, then closes the terminal observer."""

    def __init__(self, inner: Any, valve: LiveValve) -> None:
        self.inner = inner
        self.valve = valve

    @property
    def console(self) -> Any:
        return self.inner.console

    def line(self, run: Any, host: str, line: OutputLine, shown: bool = True) -> None:
        if self.valve.run_id is None:
            self.valve.name_run(run.run_id)
        if shown and hasattr(self.inner, "line"):
            self.valve.line(lambda h, ln: self.inner.line(run, h, ln, True), host, line)

    def event(self, run: Any, event: Any) -> None:
        if self.valve.run_id is None:
            self.valve.name_run(run.run_id)
        wanted = getattr(self.inner, "EVENTS", None)  # the events the terminal shows: the rest never queue
        if hasattr(self.inner, "event") and (wanted is None or event.name in wanted):
            self.valve.call(self.inner.event, run, event)

    def close(self, run: Any) -> None:
        hosts = getattr(run, "hosts", None) or {}  # the record, closed first, has settled its cut into them
        self.valve.close(lambda h: getattr(hosts.get(h), "log_cut", None))
        if hasattr(self.inner, "close"):
            self.inner.close(run)
