"""The run record, an observer: ``runs/<run_id>/`` with ``run.json``, ``events.jsonl`` and ``logs/<host>.log``.

Written as the run goes (each event appended and flushed, ``run.json`` rewritten atomically at most
every :data:`SAVE_INTERVAL_S` seconds and at every host's end), so a crash or Ctrl-C loses nothing
already seen. The runs folder belongs to the user: ``<state_dir>/runs`` (see
:func:`fleetctl.paths.state_dir`), wherever fleetctl is started from.

Per-host logs hold every line the host printed, as the exact bytes, each prefixed with ``out| ``
or ``err| `` (and task boundaries as ``==> `` lines). Schemas: ``docs/schema/``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from ..connection.base import OutputLine
from ..engine.model import Event, RunModel
from ..errors import InputError
from .history import runs_root, safe_name

SAVE_INTERVAL_S = 0.5
#: Events that rewrite run.json at once (the others at most every SAVE_INTERVAL_S).
_SAVE_NOW = frozenset({"host.finished", "run.finished", "run.stopped", "batch.started"})


class RunRecord:
    """Writes one run's record (an observer of the run). Thread-safe; every write is flushed.

    Args:
        run: the run.
        root: the runs folder (default :func:`~fleetctl.reporting.history.runs_root`).

    Raises:
        InputError: the runs folder cannot be written (names it and ``FLEETCTL_HOME``).
    """

    def __init__(self, run: RunModel, *, root: Path | None = None) -> None:
        root = root or runs_root()
        self.run = run
        self.dir = root / run.run_id
        try:
            (self.dir / "logs").mkdir(parents=True, exist_ok=False)
            os.chmod(root, 0o700)
            os.chmod(self.dir, 0o700)
            self._events = open(self.dir / "events.jsonl", "a", encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write run records in {root}: {exc.strerror or exc} (set FLEETCTL_HOME to a "
                             f"writable folder)", key="FLEETCTL_HOME") from None
        self._lock = threading.Lock()
        self._saved_at = 0.0
        self._logs: dict[str, Any] = {}
        self._continues: set[tuple[str, str]] = set()  # (host, stream) whose last piece was partial
        # Its own logger: the record keeps every event, whatever level stderr shows.
        self.log = structlog.wrap_logger(
            structlog.PrintLogger(file=self._events),
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.JSONRenderer(sort_keys=False, default=str),
            ],
        ).bind(run_id=run.run_id)
        self.save(force=True)

    # -- the observer protocol ----------------------------------------------------------------

    def event(self, run: RunModel, event: Event) -> None:
        """Append the event to events.jsonl; task boundaries also go into the host's log."""
        if event.name in ("progress.updated",):
            return
        data = run.redactor.obj(dict(event.data))
        with self._lock:
            if event.host is not None:
                self.log.info(event.name, host=event.host, **data)
            else:
                self.log.info(event.name, **data)
            self._events.flush()
        if event.host is not None:
            if event.name == "task.started":
                self.mark(event.host, f"task {data.get('index')}/{data.get('total')}: {data.get('task')}")
            elif event.name == "task.finished":
                self.mark(event.host, f"{data.get('task')}: {str(data.get('status')).upper()} {data.get('msg') or ''}")
            elif event.name == "host.started":
                self.host_log(event.host)  # every host has a log, even a silent one
        self.save(force=event.name in _SAVE_NOW)

    def line(self, run: RunModel, host: str, line: OutputLine, shown: bool = True) -> None:
        """Append one output line to the host's log, as the exact bytes (secrets redacted)."""
        data = run.redactor.bytes(line.data)
        data = data if data.endswith(b"\n") else data + b"\n"
        # a line longer than 1 MiB arrives in pieces: the pieces after the first are marked
        # ``out+``/``err+`` (the newline before such a piece was added here, not printed by the host)
        key = (host, line.stream)
        with self._lock:
            fh = self.host_log(host)
            mark = b"+ " if key in self._continues else b"| "
            if getattr(line, "partial", False):
                self._continues.add(key)
            else:
                self._continues.discard(key)
            fh.write((b"out" if line.stream == "stdout" else b"err") + mark + data)
            fh.flush()

    def close(self, run: RunModel) -> None:
        """Write the final run.json and close every file."""
        self.save(force=True)
        with self._lock:
            for fh in self._logs.values():
                fh.close()
            self._logs.clear()
            self._events.close()

    # -- files --------------------------------------------------------------------------------

    def host_log(self, host: str):
        fh = self._logs.get(host)
        if fh is None:
            fh = open(self.dir / "logs" / f"{safe_name(host)}.log", "ab")
            self._logs[host] = fh
        return fh

    def mark(self, host: str, text: str) -> None:
        """Append a marker line (task start/end) to the host's log."""
        with self._lock:
            fh = self.host_log(host)
            fh.write(b"==> " + self.run.redactor.text(text).encode("utf-8", "replace") + b"\n")
            fh.flush()

    def save(self, *, force: bool = False) -> None:
        """Rewrite run.json atomically (temp file + rename), at most every :data:`SAVE_INTERVAL_S`
        seconds unless ``force``."""
        now = time.monotonic()
        if not force and now - self._saved_at < SAVE_INTERVAL_S:
            return
        self._saved_at = now
        doc = self.run.as_json()
        with self._lock:
            tmp = self.dir / "run.json.tmp"
            tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
            os.replace(tmp, self.dir / "run.json")
