"""Live printing, every line that a sink takes, in order: a bounded queue between the engine and
the terminal, file or pipe the lines go to.

The engine's thread only appends to a bounded queue (O(1)); a printer thread prints (printing a
line with rich costs about 0.1 ms, and a build may print two million lines: done on the event loop,
that would be the event loop's time). When ``max_queued_lines`` wait, the engine's thread waits for
the printer: back-pressure, as ``ssh host cmd > file`` has. The hosts' output is then read as fast
as the sink takes it, so a file, a pipe whose reader reads, or a terminal gets every line, in
order (operator trial: ``run -- seq 1 3000 > out.txt`` kept 2,001 lines and lost the end: the valve
printed at most 2,000 lines a second and dropped the newest lines once 2,000 waited, whatever the
sink).

Only a sink that takes nothing for ``stall_s`` seconds (a reader that stopped reading: ``less`` at
a full screen, a terminal stopped with ^S) ends the waiting, so that it never stops the run. Then
each host's newest ``tail_lines`` lines are held and older ones dropped from the display (the run
record's log keeps every byte). When the sink takes lines again, or a message or the end comes,
the held lines follow a notice where the dropped ones were: the middle of a host's output is lost,
never its end. The notice, at a host's first gap, counts that gap and says where every line is
(``fleetctl logs RUN_ID HOST``, the run's real id: :meth:`LiveValve.name_run`); a host with later
gaps, or whose log was cut, gets one count more at the end (operator trial: a notice per gap,
hundreds of them, naming ``RUN`` rather than the run). Lines longer than ``max_line_bytes`` are
shortened for display. Non-line messages (task starts, results, notes) are never dropped and keep
their order with the lines around them.

Memory: at most ``max_queued_lines`` queued lines (plus the batch being printed), and while a sink
stalls ``tail_lines`` held lines per host that printed, each at most ``max_line_bytes`` bytes.

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
STALL_S = 1.0
TAIL_LINES = 50
MAX_LINE_BYTES = 4096
_BATCH = 64  # items the printer takes from the queue at once


class LiveValve:
    """See the module docstring.

    Args:
        max_queued_lines: lines waiting to be printed before the engine's thread waits for the printer.
        stall_s: seconds the printer may take no line before the sink counts as stalled (its reader
            stopped reading): the engine's thread then stops waiting, and lines are held and dropped.
        tail_lines: lines of each host held while the sink stalls (its newest: the end is shown).
        max_line_bytes: longer lines are shortened for display, with a note.
        log_hint: ``hint(host) -> str`` naming where the dropped lines are; default
            ``fleetctl logs RUN_ID HOST`` once :meth:`name_run` named the run (``the run's log`` before).
    """

    def __init__(self, *, max_queued_lines: int = MAX_QUEUED_LINES, stall_s: float = STALL_S,
                 tail_lines: int = TAIL_LINES, max_line_bytes: int = MAX_LINE_BYTES,
                 log_hint: Callable[[str], str] | None = None) -> None:
        self.max_queued_lines = max_queued_lines
        self.stall_s = stall_s
        self.tail_lines = max(1, tail_lines)
        self.max_line_bytes = max_line_bytes
        self.log_hint = log_hint or self._run_log
        self.run_id: str | None = None
        self.dropped_total = 0
        self._queue: collections.deque = collections.deque()
        self._queued_lines = 0
        self._held: dict[str, tuple[Callable, collections.deque]] = {}  # host -> printer, its newest lines
        self._gap: dict[str, int] = {}  # host -> lines dropped before its held ones
        self._dropped: dict[str, int] = {}  # host -> lines not shown, all run long
        self._told: dict[str, int] = {}  # host -> the count its first gap's notice said
        self._marker_printer: dict[str, Callable] = {}
        self._log_cut: Callable[[str], str | None] = lambda host: None  # :meth:`close` tells
        self._said_cut: set[str] = set()  # hosts whose notice said their log was cut
        self._cond = threading.Condition()
        self._printed = 0  # items the printer has finished: its progress
        self._stalled = False  # the printer took nothing for stall_s: hold, do not wait
        self._waiting = 0  # producers waiting for room
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
        """``printer(host, line)`` behind the valve: waits while the queue is full and the sink takes
        lines; drops lines from the middle of a host's output only while the sink stalls."""
        def on_line(host: str, line: OutputLine) -> None:
            self.line(printer, host, line)
        return on_line

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., None]:
        """``fn(*args)`` behind the valve, in order with the lines, never dropped."""
        def call(*args: Any) -> None:
            self.call(fn, *args)
        return call

    def line(self, printer: Callable[[str, OutputLine], Any], host: str, line: OutputLine) -> None:
        """Queue ``printer(host, line)``. With ``max_queued_lines`` queued, wait for the printer to
        take some (at most ``stall_s`` seconds without its taking one); a sink that stalls past that
        gets the line held (:meth:`_hold`), never waited for again until it takes a line."""
        if len(line.data) > self.max_line_bytes:
            extra = len(line.data) - self.max_line_bytes
            line = OutputLine(line.stream, line.data[: self.max_line_bytes]
                              + f" ... ({extra} more bytes of this line in the log)\n".encode())
        with self._cond:
            if self._queued_lines >= self.max_queued_lines:
                self._wait_for_room()
            if self._queued_lines >= self.max_queued_lines:
                self._hold(printer, host, line)
                return
            self._release(host)  # what was held of this host goes first: its order is kept
            self._queue.append((True, printer, (host, line)))
            self._queued_lines += 1
            if self._idle:
                self._cond.notify()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            for host in list(self._held):  # the lines before a message are printed before it
                self._release(host)
            self._queue.append((False, fn, args))
            if self._idle:
                self._cond.notify()

    def _wait_for_room(self) -> None:
        """Back-pressure (called holding the lock): wait until half the queue is free (few
        hand-overs between the threads) while the printer makes progress; after ``stall_s``
        seconds without any, mark the sink stalled and return (no exception)."""
        if self._stalled:
            return
        seen, deadline = self._printed, time.monotonic() + self.stall_s
        while self._queued_lines > self.max_queued_lines // 2 and not self._closing:
            now = time.monotonic()
            if self._printed != seen:
                seen, deadline = self._printed, now + self.stall_s
            if now >= deadline:
                self._stalled = True
                return
            self._waiting += 1
            try:
                self._cond.wait(deadline - now)
            finally:
                self._waiting -= 1

    def _hold(self, printer: Callable, host: str, line: OutputLine) -> None:
        """Keep ``line`` among ``host``'s newest ``tail_lines`` held while the sink stalls; the
        oldest held one is dropped (counted) to make room."""
        held = self._held.get(host)
        if held is None:
            held = self._held[host] = (printer, collections.deque())
        tail = held[1]
        if len(tail) >= self.tail_lines:
            tail.popleft()
            self._gap[host] = self._gap.get(host, 0) + 1
            self._dropped[host] = self._dropped.get(host, 0) + 1
            self._marker_printer[host] = printer
            self.dropped_total += 1
        tail.append(line)

    def _release(self, host: str) -> None:
        """Queue ``host``'s held lines (holding the lock), after a notice where lines were dropped:
        at its first gap, the count and where they all are; later gaps are counted at :meth:`close`."""
        held = self._held.pop(host, None)
        if held is None:
            return
        printer, tail = held
        gap = self._gap.pop(host, 0)
        if gap and host not in self._told:
            self._told[host] = gap
            self._notice(host, f"... {gap} line(s) of {host} not shown here (the reader of this output took "
                               f"none for {self.stall_s:g} s; {self._where(host)})\n")
        for line in tail:
            self._queue.append((True, printer, (host, line)))
        self._queued_lines += len(tail)

    def _where(self, host: str) -> str:
        """Where the lines not shown are: the host's log, unless :meth:`close` learnt it was cut."""
        cut = self._log_cut(host)
        if cut:
            self._said_cut.add(host)
            return f"the host's log was cut too: {cut}"
        return f"all are in {self.log_hint(host)}"

    def _notice(self, host: str, text: str) -> None:
        self._queue.append((False, self._marker_printer[host], (host, OutputLine("stderr", text.encode()))))

    # -- consumer side (the printer thread) ----------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    if self._held:  # the sink took every queued line: what is held goes now
                        for host in list(self._held):
                            self._release(host)
                        break
                    self._idle = True  # producers wake the thread only when it sleeps on an empty queue
                    self._cond.wait()
                    self._idle = False
                if not self._queue and self._closing:
                    return
                batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
                self._queued_lines -= sum(1 for is_line, _, _ in batch if is_line)
                if self._waiting and self._queued_lines <= self.max_queued_lines // 2:
                    self._cond.notify_all()  # room for the producer waiting on a full queue: half of it
            for _, fn, args in batch:
                try:
                    fn(*args)
                except Exception:  # noqa: BLE001 - a broken terminal must not stop the run
                    pass
                self._printed += 1  # progress (read by producers under the lock; one writer)
                self._stalled = False

    def close(self, log_cut: Callable[[str], str | None] = lambda host: None) -> None:
        """Print what is queued and held (with the notices), then stop the printer thread; it
        waits for the sink to take them. A host with lines dropped after its first gap's notice,
        or whose log was cut, gets one count at the end. ``log_cut(host)``: what the run record's
        log of ``host`` lost (a full disk: :mod:`fleetctl.reporting.recordcut`), or None when it is
        whole; a cut log is not pointed to as holding every line (operator trial: "all are in
        fleetctl logs" of a cut log)."""
        with self._cond:
            self._log_cut = log_cut
            for host in list(self._held):
                self._release(host)
            for host, n in self._dropped.items():  # one count per host, at the end, when not yet said
                if n == self._told.get(host) and (host in self._said_cut or not log_cut(host)):
                    continue
                self._notice(host, f"... {n} line(s) of {host} not shown here in all (the reader of this "
                                   f"output stopped taking lines; {self._where(host)})\n")
            self._dropped.clear()
            self._closing = True
            self._cond.notify_all()
        self._thread.join()


class ValvedObserver:
    """A terminal observer behind a :class:`LiveValve`: its output lines and events are printed by
    the valve's thread, in order (lines dropped from the display only while its reader takes none,
    never events). ``close`` prints what is queued, then closes the terminal observer."""

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
