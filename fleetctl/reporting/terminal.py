"""Live terminal output (rich): observers that print a run as it goes. Only reporting and the CLI print.

Live output lines are prefixed with the host name, ClusterShell style (``gpu01 | line``); stdout
lines as they are, stderr lines dimmed when the stream is a terminal.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

from ..connection.base import OutputLine
from .diaglines import is_diagnostic
from .lines import print_json  # noqa: F401  (re-exported: the CLI's one JSON document)


class LinePrinter:
    """Prints host-prefixed lines to ``stream`` as they arrive (width-aligned host names)."""

    def __init__(self, hosts: list[str], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.width = max((len(h) for h in hosts), default=0)
        self.console = Console(file=self.stream, highlight=False, soft_wrap=True)

    def prefix(self, host: str) -> Text:
        """``host | `` padded to the widest host name."""
        return Text(f"{host:<{self.width}} | ", style="bold cyan")

    def __call__(self, host: str, line: OutputLine) -> None:
        text = self.prefix(host)
        text.append(line.text, style="dim" if line.stream == "stderr" else "")
        self.console.print(text, markup=False)


def first_sentence(text: str) -> str:
    """``text`` up to its first sentence end (``". "``), for a live line; the rest is said once,
    in the summary."""
    head, sep, _ = text.partition(". ")
    return head + ("." if sep else "")


def make_console(file: TextIO | None = None) -> Console:
    """The rich Console every command prints through (stdout unless ``file``): on a terminal rich
    wraps long lines at words to its width; anywhere else (a file, a pipe: cron, CI, grep) a line
    is never cut (``soft_wrap``): rich's 80 columns off a terminal broke ``(--force overrides)``
    over two lines (fresh operator's trial). Tables still lay out to the console's width
    (:func:`fleetctl.reporting.tables.print_table`)."""
    console = Console(file=file, highlight=False)
    console.soft_wrap = not console.is_terminal
    return console


STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "dim", "unreachable": "bold magenta"}


def is_detail_note(message: str) -> bool:
    """A note that explains rather than warns (how ``max_jobs`` was derived, what a login shell
    prints before every command): shown with ``-v``, always kept in the run record and the report."""
    return message.startswith(("max_jobs ", "login output "))


def fold_note(message: str) -> str:
    """A note as it folds across hosts: per-host figures (free memory) left out."""
    return re.sub(r"memory \d+ MiB", "memory \u2026 MiB", message)


def shown_result(run, status: str, msg: str) -> tuple[str, str]:
    """A finished task's status and message as the terminal prints them: in a dry run or plan
    (``run.mode`` not ``apply``) nothing is changed, so a change is what it WOULD do, in the plan
    table's and the record's words (``WOULD CHANGE would upload 34 of 34 files``; once ``CHANGED
    uploaded 34 of 34 files`` under ``(dry run: nothing is changed)``,
    :func:`fleetctl.reporting.plan_table.planned_msg`); else as they are."""
    if getattr(run, "mode", "apply") == "apply":
        return status, msg
    from .plan_table import planned_msg, planned_status

    return planned_status(status), planned_msg(status, msg)


class LiveOutput(LinePrinter):
    """An observer printing every shown host line as it arrives (``host | line``), each task's
    start and result, and notes, to ``stream``. Detail notes only with ``verbose``.

    Each failed or unreachable host gets one line as it ends (README, "Output": a line per
    finished host as it happens, for cron and CI): the failed task's result line, or, for a host
    that ended before any task failed (facts: a broken GPU stack, a hung nvidia-smi; planning;
    connecting), ``host | FAILED      host done in 30.1 s: CAUSE`` or ``host | UNREACHABLE CAUSE's
    first sentence`` when its ``host.finished`` comes, never a second line for the same host."""

    #: The events it prints (the live valve queues no other).
    EVENTS = frozenset({"task.started", "task.finished", "note.added", "host.finished"})

    def __init__(self, hosts: list[str], stream: TextIO | None = None, verbose: int = 0) -> None:
        super().__init__(hosts, stream)
        self.verbose = verbose
        self.ended: set[str] = set()  # hosts whose failure has its line already

    def line(self, run, host: str, line: OutputLine, shown: bool = True) -> None:
        if shown:
            self(host, OutputLine(line.stream, run.redactor.bytes(line.data)))

    def event(self, run, event) -> None:
        d = event.data
        if event.name == "task.started":
            text = self.prefix(event.host)
            text.append(f"[task {d.get('index')}/{d.get('total')}] {run.redactor.text(str(d.get('task')))}", style="bold")
            self.console.print(text)
        elif event.name == "task.finished":
            status = str(d.get("status"))
            text = self.prefix(event.host)
            label, msg = shown_result(run, status, run.redactor.text(str(d.get("msg") or "")))
            text.append(f"{label.upper():11}", style=STYLE.get(status, ""))
            text.append(f" {run.redactor.text(str(d.get('task')))}" + (f": {msg}" if msg else ""))
            self.console.print(text)
            if status in ("failed", "unreachable"):
                self.ended.add(event.host)
        elif event.name == "note.added" and (self.verbose or not is_detail_note(str(d.get("message")))):
            text = self.prefix(event.host)
            message = run.redactor.text(str(d.get("message")))
            # a warning note says so itself (facts' "warning: ..."): never "note: warning: ..."
            text.append(message if message.startswith("warning: ") else f"note: {message}", style="yellow")
            self.console.print(text)
        elif event.name == "host.finished" and d.get("status") in ("failed", "unreachable") \
                and event.host not in self.ended:
            self.ended.add(event.host)
            text = self.prefix(event.host)
            error = run.redactor.text(str(d.get("error") or "no cause given"))
            if d.get("status") == "unreachable":
                # the first sentence live; the whole cause (fingerprints, the fix) once, in the summary
                text.append(f"UNREACHABLE {first_sentence(error)}", style=STYLE["unreachable"])
            else:  # the whole cause and its fix: with --json no summary follows on the terminal
                duration = d.get("duration_s")
                text.append(f"{'FAILED':11}", style=STYLE["failed"])
                text.append(" host done" + (f" in {float(duration):.1f} s" if duration is not None else "")
                            + f": {error}")
            self.console.print(text)


#: Above this many hosts the terminal folds output by host set (``--output auto``).
FOLD_THRESHOLD = 8
_NINJA = re.compile(rb"^\[(\d+)/(\d+)\]")
MAX_FOLDED_LINES = 200


#: Rows of hosts still working that the live display of many hosts shows (the longest running).
LIVE_ROWS = 12


class _Board:
    """What the live display of many hosts shows: one line of counts, then at most
    :data:`LIVE_ROWS` hosts still working (longest running first). Rendering it costs the same
    for 10 hosts or 10,000: rich calls :meth:`__rich__` on every refresh (10 a second)."""

    def __init__(self, hosts: list[str]) -> None:
        self.total = len(hosts)
        self.width = max((len(h) for h in hosts), default=0)
        self.started: dict[str, str] = {}  # host -> what it is doing, in start order (dicts keep it)
        self.done: dict[str, int] = {}

    def __rich__(self) -> Text:
        text = Text()
        finished = sum(self.done.values())
        text.append(f"{finished}/{self.total} hosts done", style="bold")
        for status, n in sorted(self.done.items()):
            text.append(f"  {n} {status}", style=STYLE.get(status, ""))
        working = len(self.started)
        if working:
            text.append(f"  {working} working", style="cyan")
        for host, what in list(self.started.items())[:LIVE_ROWS]:
            text.append(f"\n{host:<{self.width}} ", style="cyan")
            text.append(what)
        if working > LIVE_ROWS:
            text.append(f"\n... and {working - LIVE_ROWS} more", style="dim")
        return text


class FoldedOutput:
    """An observer for many hosts: on a terminal, a live board while the run goes (counts per
    status, and the hosts still working with their task i/n and ninja's [k/N], at most
    :data:`LIVE_ROWS` of them); elsewhere (a file, a pipe: cron, CI) no board to redraw, but a
    line per finished task per host and a line per finished host (a failed or unreachable one
    with its whole cause) as they happen, as Ansible writes a log, and the board's counts once at
    the end. Then, either way, identical error-like lines, notes and failures printed once each
    with the folded host set, ClusterShell style (``gpu[03,07-09]: nvcc fatal : ...``); a host
    that failed before its first task (facts, planning: ``host.finished`` with an error) is among
    the failures with its cause (``h-nvml: FAILED: GPU stack broken: ...; fix: ...``), as the
    summary of a few hosts gives it. Every event costs O(1) and the board's refresh O(LIVE_ROWS),
    whatever the number of hosts. Per-host logs stay complete in the run record either way."""

    #: The events it shows (the live valve queues no other).
    EVENTS = frozenset({"host.started", "task.started", "task.finished", "host.finished", "note.added"})

    def __init__(self, hosts: list[str], stream, fold, verbose: int = 0) -> None:
        from rich.live import Live

        self.fold = fold
        self.verbose = verbose
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.board = _Board(hosts)
        self.hosts = set(hosts)
        self.finished: set[str] = set()
        self.failed: set[str] = set()
        self.lines: dict[str, dict[str, None]] = {}  # text -> hosts (an ordered set)
        self.notes: dict[str, list[str]] = {}
        self.failures: dict[str, list[str]] = {}
        self.lines_out = LinePrinter(hosts, stream) if not self.console.is_terminal else None
        self.live = None
        if self.lines_out is None:
            self.live = Live(self.board, console=self.console, transient=False, refresh_per_second=4)
            self.live.start()

    def line(self, run, host: str, line: OutputLine, shown: bool = True) -> None:
        if not shown:
            return
        m = _NINJA.match(line.data)
        if m and host in self.board.started:
            base = self.board.started[host].split(" [", 1)[0]
            self.board.started[host] = f"{base} [{int(m.group(1))}/{int(m.group(2))}]"
        text = run.redactor.text(line.text.strip())
        if text and is_diagnostic(text) and (text in self.lines or len(self.lines) < MAX_FOLDED_LINES):
            self.lines.setdefault(text, {})[host] = None

    def event(self, run, event) -> None:
        d, host = event.data, event.host
        if host not in self.hosts:
            return
        if event.name == "host.started":
            self.board.started[host] = "connecting"
        elif event.name == "task.started" and host in self.board.started:
            self.board.started[host] = f"task {d.get('index')}/{d.get('total')} {run.redactor.text(str(d.get('task')))}"
        elif event.name == "task.finished":
            status, name = str(d.get("status")), run.redactor.text(str(d.get("task")))
            label, msg = shown_result(run, status, run.redactor.text(str(d.get("msg") or "")))
            key = f"{status.upper()} {name}: {run.redactor.text(str(d.get('msg')))}"
            said = self.failures.get(key) if status in ("failed", "unreachable") else None
            # a cause another host's line gave already (120 hosts sharing one venv) is said once
            self._print_line(host, status, name + (f": the same as {said[0]} (failures below)" if said
                                                   else f": {msg}" if msg else ""), label=label)
            if status in ("failed", "unreachable"):
                self.failures.setdefault(key, []).append(host)
                self.failed.add(host)
        elif event.name == "host.finished":
            status = str(d.get("status"))
            error = run.redactor.text(str(d.get("error"))) if d.get("error") else ""
            self.board.started.pop(host, None)
            if host in self.finished:  # one line per host
                return
            self.finished.add(host)
            self.board.done[status] = self.board.done.get(status, 0) + 1
            duration = d.get("duration_s")
            cause = error if host not in self.failed else ""  # a failed task's line said it already
            self._print_line(host, status, "host done" + (f" in {float(duration):.1f} s" if duration is not None
                                                        else "") + (f": {cause}" if cause else ""))
            # a host that ended failed or unreachable before any task failed (facts, planning,
            # connecting): its own error is the cause
            if status in ("failed", "unreachable") and error and host not in self.failed:
                self.failures.setdefault(f"{status.upper()}: {error}", []).append(host)
                self.failed.add(host)
        elif event.name == "note.added":
            message = run.redactor.text(str(d.get("message")))
            if self.verbose or not is_detail_note(message):
                self.notes.setdefault(fold_note(message), []).append(host)

    def _print_line(self, host: str, status: str, text: str, label: str | None = None) -> None:
        """``host | STATUS      text`` when the output is no terminal (see the class); else nothing
        (``label``: the status as shown, :func:`shown_result`)."""
        if self.lines_out is None:
            return
        line = self.lines_out.prefix(host)
        line.append(f"{(label or status).upper():11}", style=STYLE.get(status, ""))
        line.append(f" {text}")
        self.console.print(line, markup=False)

    def close(self, run) -> None:
        if self.live is not None:
            self.live.stop()
        else:
            self.console.print(self.board)  # the counts, once
        for title, groups in (("notes", self.notes), ("error and warning lines", self.lines),
                              ("failures", self.failures)):
            if groups:
                self.console.print(Text(title + ":", style="bold"))
                for text, hosts in groups.items():
                    self.console.print(f"{self.fold(list(hosts))}: {text}", markup=False)
