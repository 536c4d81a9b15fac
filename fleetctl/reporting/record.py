"""The run record, an observer: ``runs/<run_id>/`` with ``run.json``, ``events.jsonl`` and ``logs/<host>.log``.

Written as the run goes: every event is appended to ``events.jsonl`` and every line to the host's
log at once, and a flusher thread hands the written bytes to the kernel every
:data:`FLUSH_INTERVAL_S` seconds (and :meth:`RunRecord.close`, an ``atexit`` hook and Ctrl-C's path
through the CLI flush everything), so neither a normal exit nor Ctrl-C loses a byte, and a chatty
host never pays a system call per line. ``run.json`` is rewritten atomically (temp file +
rename) as the run goes, at most every :data:`SAVE_INTERVAL_S` seconds and never more often than
keeps its cost under :data:`SAVE_SHARE` of the run's time (its size grows with the hosts, so a
fixed rate, or a rewrite per finished host, would cost O(hosts²)), and at the end of each batch
and of the run. A rewrite put off by those limits is done by the flusher thread once they allow
it, so every finished task (the engine keeps each host's finished tasks in the run model as they
finish, see :class:`fleetctl.engine.host.LiveOutcome`) is on disk within about a second even when
no later event comes: a run killed by SIGKILL keeps all that was written before. The runs folder belongs to the user: ``<state_dir>/runs`` (see
:func:`fleetctl.util.paths.state_dir`), wherever fleetctl is started from.

An event's long argv arguments (scripts) are kept once per run in ``scripts/<sha>.txt`` and named
``@scripts/<sha>.txt (N chars)`` in the event (:data:`SCRIPT_CHARS`). Per-host logs hold every line the host printed, as the exact bytes, each prefixed with ``out| ``
or ``err| ``; a line of fleetctl's own protocol (a probe's start marker, its JSON answer: the lines
the terminal never shows) with ``out~ `` or ``err~ ``, which ``fleetctl logs RUN`` and the report
leave out (and task boundaries as ``==> `` lines; in a playbook run, a host that failed outside any task,
at facts or planning, gets its cause as a last ``==> host FAILED: ...`` line; an ad hoc run's host log
ends with ``==> host OK...`` or ``==> host FAILED: ...``; an unreachable host's, in any run, with
``==> host UNREACHABLE: CAUSE``, :func:`host_outcome`). Schemas: ``docs/schema/``.

``events.jsonl`` lines are what a structlog JSON logger bound to ``run_id`` writes (``run_id``,
``host``, the event's fields, ``event``, ``level``, ``timestamp`` in ISO 8601 UTC with ``Z``),
written here directly: importing structlog imports rich's traceback machinery and pygments, a
fifth of ``fleetctl run``'s start-up, for three lines of formatting.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import json
import os
import threading
import zlib
import time
import weakref
from pathlib import Path
from typing import Any

from ..connection.base import LEFT_ON_HOST, OutputLine
from ..engine.model import Event, RunModel
from ..errors import InputError
from ..util.paths import safe_name
from ..util.retention import AD_HOC_KINDS
from .history import runs_root
from .hostend import cause_missing, host_outcome
from .recordcut import RecordCut
from .scripts_out import SCRIPT_CHARS, scripts_out  # noqa: F401 - SCRIPT_CHARS: re-exported

SAVE_INTERVAL_S = 0.5
#: run.json rewrites take at most this share of the run's time (they slow down as it grows).
SAVE_SHARE = 0.05
#: Seconds between the flusher thread's flushes of the events and logs.
FLUSH_INTERVAL_S = 0.2
#: Events that rewrite run.json at once (the others as above).
_SAVE_NOW = frozenset({"run.finished", "run.stopped", "batch.started"})
#: Bytes each log file buffers before the flusher's turn comes (allocated per open log, so per
#: host: 8 KiB is 8 MiB at 1,000 hosts).
LOG_BUFFER_BYTES = 8 * 1024
#: Host logs kept open at once (see RunRecord.host_log).
MAX_OPEN_LOGS = 256

_OPEN: "weakref.WeakSet[RunRecord]" = weakref.WeakSet()
_HOSTS_MARK = "\x00fleetctl-hosts"


@atexit.register
def _flush_all() -> None:  # a run that did not close its record still keeps every byte
    for record in list(_OPEN):
        record.flush()


class RunRecord:
    """Writes one run's record (an observer of the run). Thread-safe; see the module docstring for
    when bytes reach the kernel.

    Args:
        run: the run.
        root: the runs folder (default :func:`~fleetctl.reporting.history.runs_root`).

    Raises:
        InputError: the runs folder cannot be written, or has no room for the record's reserve
            (:mod:`fleetctl.reporting.recordcut`; names it and ``FLEETCTL_HOME``).
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
            self.cut = RecordCut(self.dir)  # what a full disk cut, said where (recordcut)
        except OSError as exc:
            raise InputError(f"cannot write run records in {root}: {exc.strerror or exc} (set FLEETCTL_HOME to a "
                             f"writable folder)", key="FLEETCTL_HOME") from None
        self._lock = threading.Lock()
        self._saved_at = 0.0
        self._save_cost_s = 0.0
        self._save_lock = threading.Lock()  # one rewrite at a time: a later one never loses to an older
        self._pending = False  # a rewrite was put off (see save)
        self._logs: dict[str, Any] = {}
        self._dirty: set[Any] = set()
        self._closed = threading.Event()
        self._finished: set[str] = set()  # hosts whose outcome is final (their run.json part is kept)
        self._hosts_text: dict[str, tuple[tuple, str]] = {}
        self._continues: set[tuple[str, str]] = set()  # (host, stream) whose last piece was partial
        self._scripts: set[str] = set()  # scripts/<name> written (see scripts_out)
        self._cause_logged: set[str] = set()  # hosts whose log holds a failed task's line (hostend.cause_missing)
        self.save(force=True)
        _OPEN.add(self)
        self._flusher = threading.Thread(target=self._flush_loop, name="fleetctl-record-flush", daemon=True)
        self._flusher.start()

    # -- the observer protocol ----------------------------------------------------------------

    def event(self, run: RunModel, event: Event) -> None:
        """Append the event to events.jsonl; task boundaries also go into the host's log.

        An event after :meth:`close` (a host's cancellation that finished after the run was
        closed on Ctrl-C) is written all the same, and run.json rewritten: nothing is lost."""
        if event.name in ("progress.updated",):
            return
        try:
            if self._closed.is_set():
                with self._late():
                    self._event(run, event)
                return
            self._event(run, event)
        except OSError as exc:  # a full disk: the record is cut, the run goes on (recordcut)
            self.cut.cut(exc)
            self.cut.lost(event.host)

    @contextlib.contextmanager
    def _late(self):
        """Around a write after :meth:`close`: the files reopened (appending), then flushed,
        closed again, and run.json rewritten."""
        with self._lock:
            if self._events.closed:
                self._events = open(self.dir / "events.jsonl", "a", encoding="utf-8")
        try:
            yield
        finally:
            self._close_files()
            self.save(force=True)

    def _event(self, run: RunModel, event: Event) -> None:
        data = run.redactor.obj(dict(event.data))
        for holder in () if self.cut.error else (data, data.get("step")):  # command.started, step.planned
            if isinstance(holder, dict) and isinstance(holder.get("argv"), list):
                holder["argv"] = scripts_out(holder["argv"], self.dir / "scripts", self._scripts)
        line = {"run_id": run.run_id, **({"host": event.host} if event.host is not None else {}), **data,
                "event": event.name, "level": "info",
                "timestamp": dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")}
        text = json.dumps(line, default=str) + "\n"
        with self._lock:
            if self.cut.error:
                self.cut.lost(None)
            else:
                self._events.write(text)
                self._dirty.add(self._events)
        if event.host is not None:
            if event.name == "task.started":
                self.mark(event.host, f"task {data.get('index')}/{data.get('total')}: {data.get('task')}")
            elif event.name == "task.finished":
                status, msg = str(data.get("status")), str(data.get("msg") or "")
                if run.mode != "apply":  # a plan changes nothing: what it would do, in its table's words
                    from .plan_table import planned_msg, planned_status  # rich: only a plan's record needs it

                    status, msg = planned_status(status), planned_msg(status, msg)
                self.mark(event.host, f"{data.get('task')}: {status.upper()} {msg}")
                if data.get("status") in ("failed", "unreachable"):
                    self._cause_logged.add(event.host)
            elif event.name == "note.added" and str(data.get("message", "")).startswith(LEFT_ON_HOST):
                self.mark(event.host, str(data["message"]))  # a part file an interrupt left behind
            elif event.name == "class.waiting":  # the gap before its first task, explained where it shows
                from ..inventory import fold_hosts

                self.mark(event.host, f"waiting for {fold_hosts(map(str, data.get('waiting_for') or []))}: "
                                      f"{data.get('reason')}")
            elif event.name == "host.started":
                with self._lock:
                    self.host_log(event.host)  # every host has a log, even a silent one
            elif event.name == "host.finished":
                if cause_missing(run.kind, data, logged=event.host in self._cause_logged):
                    self.mark(event.host, host_outcome(run.kind, data))
                elif run.kind in AD_HOC_KINDS and data.get("status") in ("ok", "failed"):
                    self.mark(event.host, host_outcome(run.kind, data))
                self._finished.add(event.host)
                self._close_log(event.host)  # a finished host's buffer is let go of (reopened if it says more)
        self.save(force=event.name in _SAVE_NOW)

    def line(self, run: RunModel, host: str, line: OutputLine, shown: bool = True) -> None:
        """Append one output line to the host's log, as the exact bytes (secrets redacted); after
        :meth:`close` too (see :meth:`event`)."""
        try:
            if self._closed.is_set():
                with self._late():
                    self._line(run, host, line, shown)
                return
            self._line(run, host, line, shown)
        except OSError as exc:  # a full disk: this host's log is cut here (recordcut)
            self.cut.cut(exc)
            self.cut.lost(host, len(line.data))

    def _line(self, run: RunModel, host: str, line: OutputLine, shown: bool = True) -> None:
        data = run.redactor.bytes(line.data)
        data = data if data.endswith(b"\n") else data + b"\n"
        # a line longer than 1 MiB arrives in pieces: the pieces after the first are marked
        # ``out+``/``err+`` (the newline before such a piece was added here, not printed by the host)
        key = (host, line.stream)
        with self._lock:
            if self.cut.error:
                return self.cut.lost(host, len(data))
            fh = self.host_log(host)
            # fleetctl's own protocol lines (never shown) keep their bytes, marked apart from the host's
            # (a login shell's last words before it ended, ``login``, are the host's: not shown, yet ``| ``)
            mark = (b"~ " if not shown and not getattr(line, "login", False) else b"+ " if key in self._continues
                    else b"| ")
            if getattr(line, "partial", False):
                self._continues.add(key)
            else:
                self._continues.discard(key)
            fh.write((b"out" if line.stream == "stdout" else b"err") + mark + data)
            self._dirty.add(fh)

    def close(self, run: RunModel) -> None:
        """Flush every log, then write the final run.json and close every file: a reader that sees
        the run end (``fleetctl logs --follow``) finds every byte already in the logs. A record cut
        by a full disk frees its reserve first, then says where each log was cut, and writes the
        cut into ``run`` (``record_cut``, each cut host's ``log_cut``: recordcut's ``settle``)."""
        try:
            self.flush()
        except (OSError, ValueError):  # a full disk: closing below tries again
            pass
        if not self.cut.error:
            self.save(force=True)  # a full disk now cuts it here: what follows still says so
        self.cut.release()
        self._closed.set()
        self._close_files()  # a cut record's buffers go into the freed room first
        if self.cut.error:
            self.cut.mark_logs(lambda host: self.dir / "logs" / f"{safe_name(host)}.log")
            self.cut.settle(run)  # the run itself says so: run.json, summary, --json, API (recordcut)
            self.save(force=True)
        _OPEN.discard(self)

    def _close_files(self) -> None:
        with self._lock:
            for host, fh in [*self._logs.items(), (None, self._events)]:
                self._close_fh(fh, host)
            self._logs.clear()
            self._dirty.clear()

    def _close_fh(self, fh, host: str | None) -> None:
        """Close ``fh`` (``host``'s log, or events.jsonl for None); a buffer that cannot be
        written cuts the record there (recordcut)."""
        try:
            fh.close()
        except OSError as exc:
            self.cut.cut(exc)
            self.cut.lost(host)

    def flush(self) -> None:
        """Hand every written byte to the kernel now."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            for fh in dirty:
                try:
                    if not fh.closed:
                        fh.flush()
                except OSError as exc:  # a full disk: the record is cut at this file (recordcut)
                    self.cut.cut(exc)
                    self.cut.lost(next((h for h, f in self._logs.items() if f is fh), None))

    def _flush_loop(self) -> None:
        while not self._closed.wait(FLUSH_INTERVAL_S):
            try:
                self.flush()
            except (OSError, ValueError):  # a full disk: the next turn (or close) tries again
                pass
            if self._pending:
                try:
                    self.save()
                except Exception:  # noqa: BLE001 - the model changed under it, a full disk: next turn
                    pass

    def host_parts(self):
        """Each host's part of run.json's ``hosts`` object, in order: ``    "name": {...}`` (its
        body indented as at that depth of ``json.dumps(run.as_json(), indent=2)``), a finished
        host's serialized once and kept compressed (zlib: a rewrite costs the hosts that changed,
        not all of them, and 10,000 finished hosts' parts hold a few MiB, not the 60 MiB of their
        text). The ``--json`` document of a deploy holds the same parts (``fleetctl.cli.play``)."""
        run = self.run
        for name, out in list(run.hosts.items()):
            key = (out.status, out.error, out.duration_s, len(out.tasks), len(out.phases), id(out.facts),
                   id(out.connection), id(out.output_truncated), out.rc, out.reachable, run.redactor.version,
                   out.log_cut)
            cached = self._hosts_text.get(name)
            if cached is not None and cached[0] == key and name in self._finished:
                yield zlib.decompress(cached[1]).decode("utf-8")
                continue
            doc = run.host_json(name)
            body = json.dumps(doc, indent=2, default=str).replace("\n", "\n    ")
            text = f"    {json.dumps(name)}: {body}"
            if name in self._finished:
                self._hosts_text[name] = (key, zlib.compress(text.encode("utf-8"), 1))
            yield text

    def _parts(self):
        """run.json's text in pieces, as ``json.dumps(run.as_json(), indent=2)`` (+ newline) would
        write it (:meth:`host_parts` for the hosts)."""
        head = self.run.head_json()
        head["hosts"] = _HOSTS_MARK
        before, _, after = json.dumps(head, indent=2, default=str).partition(json.dumps(_HOSTS_MARK))
        yield before
        sep = "{"
        for text in self.host_parts():
            yield f"{sep}\n{text}"
            sep = ","
        yield ("{}" if sep == "{" else "\n  }") + after + "\n"

    def _text(self) -> str:
        """run.json's whole text (see :meth:`_parts`)."""
        return "".join(self._parts())

    # -- files --------------------------------------------------------------------------------

    def host_log(self, host: str):
        """The host's open log (appending). At most :data:`MAX_OPEN_LOGS` are open: the one used
        longest ago is closed (its bytes handed to the kernel) and reopened when its host says
        more, so 10,000 hosts waiting together for their classes hold neither 10,000 descriptors
        nor 80 MiB of buffers."""
        fh = self._logs.pop(host, None)
        if fh is None:
            if len(self._logs) >= MAX_OPEN_LOGS:
                host_old = next(iter(self._logs))
                old = self._logs.pop(host_old)
                self._dirty.discard(old)
                self._close_fh(old, host_old)
            fh = open(self.dir / "logs" / f"{safe_name(host)}.log", "ab", buffering=LOG_BUFFER_BYTES)
        self._logs[host] = fh  # the most recently used last
        return fh

    def _close_log(self, host: str) -> None:
        with self._lock:
            fh = self._logs.pop(host, None)
            if fh is not None:
                self._dirty.discard(fh)
                self._close_fh(fh, host)

    def mark(self, host: str, text: str) -> None:
        """Append a marker line (task start/end) to the host's log."""
        with self._lock:
            if self.cut.error:
                return self.cut.lost(host)
            fh = self.host_log(host)
            fh.write(b"==> " + self.run.redactor.text(text).encode("utf-8", "replace") + b"\n")
            self._dirty.add(fh)

    def save(self, *, force: bool = False) -> None:
        """Rewrite run.json atomically (temp file + rename); unless ``force``, only when the last
        rewrite is at least :data:`SAVE_INTERVAL_S` seconds old and the time since it is at least
        ``1 / SAVE_SHARE`` times what it cost."""
        now = time.monotonic()
        if not force and now - self._saved_at < max(SAVE_INTERVAL_S, self._save_cost_s / SAVE_SHARE):
            self._pending = True  # the flusher thread does it when the limits allow
            return
        with self._save_lock:
            if not force and self._closed.is_set():
                return  # closed: its final rewrite was the last
            self._pending = False
            # piece by piece (never the whole text at once), under the save lock alone: the
            # engine's events and lines are not held up while 10,000 hosts' parts are written
            tmp = self.dir / "run.json.tmp"
            try:
                with open(tmp, "w", encoding="utf-8") as fh:
                    for piece in self._parts():
                        fh.write(piece)
                os.replace(tmp, self.dir / "run.json")
            except OSError as exc:  # a full disk: the record is cut (recordcut); the last run.json stays
                self.cut.cut(exc)
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        self._saved_at = time.monotonic()
        self._save_cost_s = self._saved_at - now

