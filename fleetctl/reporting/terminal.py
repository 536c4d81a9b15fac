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


STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "dim", "unreachable": "bold magenta"}


def is_detail_note(message: str) -> bool:
    """A note that explains rather than warns (how ``max_jobs`` was derived): shown with ``-v``,
    always kept in the run record and the report."""
    return message.startswith("max_jobs ")


def fold_note(message: str) -> str:
    """A note as it folds across hosts: per-host figures (free memory) left out."""
    return re.sub(r"memory \d+ MiB", "memory \u2026 MiB", message)


class LiveOutput(LinePrinter):
    """An observer printing every shown host line as it arrives (``host | line``), each task's
    start and result, and notes, to ``stream``. Detail notes only with ``verbose``."""

    def __init__(self, hosts: list[str], stream: TextIO | None = None, verbose: int = 0) -> None:
        super().__init__(hosts, stream)
        self.verbose = verbose

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
            text.append(f"{status.upper():11}", style=STYLE.get(status, ""))
            msg = run.redactor.text(str(d.get("msg") or ""))
            text.append(f" {run.redactor.text(str(d.get('task')))}" + (f": {msg}" if msg else ""))
            self.console.print(text)
        elif event.name == "note.added" and (self.verbose or not is_detail_note(str(d.get("message")))):
            text = self.prefix(event.host)
            text.append(f"note: {run.redactor.text(str(d.get('message')))}", style="yellow")
            self.console.print(text)
        elif event.name == "host.finished" and d.get("status") == "unreachable":
            text = self.prefix(event.host)
            # the first sentence live; the whole cause (fingerprints, the fix) once, in the summary
            text.append(f"UNREACHABLE {first_sentence(run.redactor.text(str(d.get('error'))))}",
                        style=STYLE["unreachable"])
            self.console.print(text)


FOLD_THRESHOLD = 8
_ERRORISH = re.compile(r"error|fatal|failed|warning|killed|traceback|not found|unsupported", re.I)
_NINJA = re.compile(rb"^\[(\d+)/(\d+)\]")
MAX_FOLDED_LINES = 200


class FoldedOutput:
    """An observer for many hosts: one progress row per host (task i/n, ninja's [k/N]) while the
    run goes, then identical error-like lines, notes and failures printed once each with the
    folded host set, ClusterShell style (``gpu[03,07-09]: nvcc fatal : ...``). Per-host logs stay
    complete in the run record either way."""

    def __init__(self, hosts: list[str], stream, fold, verbose: int = 0) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        self.fold = fold
        self.verbose = verbose
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.progress = Progress(TextColumn("{task.fields[host]}", style="cyan"), BarColumn(),
                                 TextColumn("{task.description}"), console=self.console, transient=False)
        self.rows = {h: self.progress.add_task("waiting", host=h, total=None) for h in hosts}
        self.lines: dict[str, list[str]] = {}
        self.notes: dict[str, list[str]] = {}
        self.failures: dict[str, list[str]] = {}
        self.progress.start()

    def line(self, run, host: str, line: OutputLine, shown: bool = True) -> None:
        if not shown:
            return
        m = _NINJA.match(line.data)
        if m and host in self.rows:
            row = self.progress.tasks[self.rows[host]]
            base = row.description.split(" [", 1)[0]
            self.progress.update(self.rows[host], description=f"{base} [{int(m.group(1))}/{int(m.group(2))}]")
        text = run.redactor.text(line.text.strip())
        if text and _ERRORISH.search(text) and (text in self.lines or len(self.lines) < MAX_FOLDED_LINES):
            self.lines.setdefault(text, [])
            if host not in self.lines[text]:
                self.lines[text].append(host)

    def event(self, run, event) -> None:
        d, host = event.data, event.host
        if host not in self.rows:
            return
        if event.name == "task.started":
            self.progress.update(self.rows[host], description=f"task {d.get('index')}/{d.get('total')} "
                                 f"{run.redactor.text(str(d.get('task')))}", total=d.get("total"),
                                 completed=int(d.get("index") or 1) - 1)
        elif event.name == "task.finished" and d.get("status") in ("failed", "unreachable"):
            name = run.redactor.text(str(d.get("task")))
            self.failures.setdefault(f"{str(d.get('status')).upper()} {name}: {run.redactor.text(str(d.get('msg')))}",
                                     []).append(host)
            self.progress.update(self.rows[host], description=f"{d.get('status')} at {name}")
        elif event.name == "host.finished":
            self.progress.update(self.rows[host], description=str(d.get("status")))
            if d.get("status") == "unreachable" and not any(host in hs for hs in self.failures.values()):
                self.failures.setdefault(f"UNREACHABLE: {d.get('error')}", []).append(host)
        elif event.name == "note.added":
            message = run.redactor.text(str(d.get("message")))
            if self.verbose or not is_detail_note(message):
                self.notes.setdefault(fold_note(message), []).append(host)

    def close(self, run) -> None:
        self.progress.stop()
        for title, groups in (("notes", self.notes), ("error and warning lines", self.lines),
                              ("failures", self.failures)):
            if groups:
                self.console.print(Text(title + ":", style="bold"))
                for text, hosts in groups.items():
                    self.console.print(f"{self.fold(hosts)}: {text}", markup=False)
