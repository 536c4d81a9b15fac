"""The run record: ``runs/<run_id>/`` with ``run.json``, ``events.jsonl`` and ``logs/<host>.log``.

Written as the run goes (each event appended and flushed, ``run.json`` rewritten atomically after
every task), so a crash or Ctrl-C loses nothing already seen. The runs folder is the user's, not the
working directory's (:func:`fleetctl.paths.runs_dir`: ``$FLEETCTL_HOME/runs``, else
``$XDG_STATE_HOME/fleetctl/runs``, else ``~/.local/state/fleetctl/runs``), so ``fleetctl runs``
lists every run of the user wherever it was started.

Per-host logs hold every line the host printed, as the exact bytes, each prefixed with
``out| `` or ``err| `` (and task boundaries as ``==> `` lines). A line longer than 1 MiB arrives in
pieces (:mod:`fleetctl.connection.streams`); its continuation pieces are marked ``out+ `` /
``err+ `` (the newline before such a piece was added by fleetctl, not printed by the host).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from .connection.base import OutputLine
from .redact import Redactor


SAVE_INTERVAL_S = 0.5


def runs_root() -> Path:
    """The user's runs folder (:func:`fleetctl.paths.runs_dir`)."""
    from .paths import runs_dir

    return runs_dir()


def new_run_id() -> str:
    """A sortable, collision-free run id: UTC time to the millisecond plus 6 random hex digits
    (``20261129T153000.123Z-1a2b3c``)."""
    now = dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.") + f"{now.microsecond // 1000:03d}Z-" + secrets.token_hex(3)


def _safe_name(host: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.[]" else "_" for c in host) or "_"


class RunRecord:
    """Writes one run's record. Thread-safe; every write is flushed at once.

    Args:
        kind: ``deploy``, ``facts``, ``run``, ``verify``.
        root: the runs folder (default :func:`runs_root`).
        run_id: given id or a new one.
    """

    def __init__(self, kind: str, *, root: Path | None = None, run_id: str | None = None) -> None:
        self.run_id = run_id or new_run_id()
        self.dir = (root or runs_root()) / self.run_id
        (self.dir / "logs").mkdir(parents=True, exist_ok=False)
        os.chmod(self.dir, 0o700)
        self._lock = threading.Lock()
        #: Secrets found so far (see fleetctl.redact); everything written passes through it.
        self.redactor = Redactor()
        self._saved_at = 0.0
        self._dirty = False
        self._events = open(self.dir / "events.jsonl", "a", encoding="utf-8")
        self._logs: dict[str, Any] = {}
        self._continues: set[tuple[str, str]] = set()  # (host, stream) whose last piece was partial
        # Its own wrapper class: the run record keeps every event, whatever level stderr shows.
        self.log = structlog.wrap_logger(
            structlog.PrintLogger(file=self._events),
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.JSONRenderer(sort_keys=False, default=str),
            ],
        ).bind(run_id=self.run_id)
        self.data: dict[str, Any] = {
            "run_id": self.run_id,
            "kind": kind,
            "started": dt.datetime.now(dt.timezone.utc).isoformat(),
            "finished": None,
            "status": "running",
            "hosts": {},
        }
        self.save(force=True)

    def event(self, name: str, **data: Any) -> None:
        """Append one structlog JSON line (``noun.verb_past`` names: ``task.finished``)."""
        with self._lock:
            self.log.info(name, **self.redactor.obj(data))
            self._events.flush()

    def host_log(self, host: str):
        fh = self._logs.get(host)
        if fh is None:
            fh = open(self.dir / "logs" / f"{_safe_name(host)}.log", "ab")
            self._logs[host] = fh
        return fh

    def line(self, host: str, line: OutputLine) -> None:
        """Append one output line to the host's log, as the exact bytes."""
        with self._lock:
            fh = self.host_log(host)
            data = self.redactor.bytes(line.data)
            data = data if data.endswith(b"\n") else data + b"\n"
            key = (host, line.stream)
            mark = b"+ " if key in self._continues else b"| "
            if getattr(line, "partial", False):
                self._continues.add(key)
            else:
                self._continues.discard(key)
            fh.write((b"out" if line.stream == "stdout" else b"err") + mark + data)
            fh.flush()

    def mark(self, host: str, text: str) -> None:
        """Append a marker line (task start/end) to the host's log."""
        with self._lock:
            fh = self.host_log(host)
            fh.write(b"==> " + self.redactor.text(text).encode("utf-8", "replace") + b"\n")
            fh.flush()

    def save(self, *, force: bool = False) -> None:
        """Rewrite run.json atomically (temp file + rename), at most every :data:`SAVE_INTERVAL_S`
        seconds unless ``force`` (events.jsonl records every step as it happens anyway, and a
        rewrite per host grows with the square of the fleet)."""
        now = time.monotonic()
        if not force and now - self._saved_at < SAVE_INTERVAL_S:
            self._dirty = True
            return
        self._saved_at = now
        self._dirty = False
        with self._lock:
            tmp = self.dir / "run.json.tmp"
            tmp.write_text(json.dumps(self.redactor.obj(self.data), indent=2, default=str) + "\n", encoding="utf-8")
            os.replace(tmp, self.dir / "run.json")

    def finish(self, status: str) -> None:
        """Record the end (``ok``, ``failed``, ``interrupted``) and close files."""
        self.data["status"] = status
        self.data["finished"] = dt.datetime.now(dt.timezone.utc).isoformat()
        self.save(force=True)
        self.event("run.finished", status=status)
        with self._lock:
            for fh in self._logs.values():
                fh.close()
            self._events.close()


def open_record(kind: str, *, root: Path | None = None) -> RunRecord:
    """A new :class:`RunRecord`, or an InputError naming the runs folder when it cannot be written
    (``FLEETCTL_HOME`` pointing at a file, a read-only place...)."""
    from .errors import InputError

    root = root or runs_root()
    try:
        return RunRecord(kind, root=root)
    except OSError as exc:
        raise InputError(f"cannot write run records in {root}: {exc.strerror or exc} (set FLEETCTL_HOME to a "
                         f"writable folder)", key="FLEETCTL_HOME") from None


def guarded(record: RunRecord, run):
    """Call ``run()``; whatever escapes it (Ctrl-C, SIGTERM, a bug) first marks the record
    ``interrupted`` so that no run stays ``running`` forever."""
    try:
        return run()
    except BaseException:
        if record.data.get("status") == "running":
            record.finish("interrupted")
        raise


def valid_run_id(run_id: str) -> bool:
    """Run ids are folder names fleetctl made: no path separators, no dot-dot."""
    return bool(run_id) and "/" not in run_id and run_id not in (".", "..") and not run_id.startswith(".")


def list_runs(root: Path | None = None) -> list[dict]:
    """Every run's ``run.json`` (newest first); unreadable ones are reported with an error key."""
    root = root or runs_root()
    out = []
    if not root.exists():
        return out
    for path in sorted(root.iterdir(), reverse=True):
        rj = path / "run.json"
        if not rj.exists():
            continue
        try:
            out.append(json.loads(rj.read_text()))
        except (OSError, ValueError) as exc:
            out.append({"run_id": path.name, "error": str(exc)})
    return out


def load_run(run_id: str, root: Path | None = None) -> dict:
    """One run's ``run.json``. Raises FileNotFoundError naming the path."""
    path = (root or runs_root()) / run_id / "run.json"
    return json.loads(path.read_text())


def host_log_path(run_id: str, host: str, root: Path | None = None) -> Path:
    return (root or runs_root()) / run_id / "logs" / f"{_safe_name(host)}.log"


def write_retry_set(run_id: str, failed: list[str], root: Path | None = None) -> Path:
    """Record the hosts to retry (``runs/.retry.json``), replaced by every run."""
    root = root or runs_root()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = root / ".retry.json"
    tmp = root / ".retry.json.tmp"
    tmp.write_text(json.dumps({"run_id": run_id, "failed_hosts": failed}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def retry_hosts(run_id: str | None = None, root: Path | None = None) -> tuple[str, list[str]]:
    """``(run_id, failed hosts)`` of a given run, or of the retry set the last run left.

    Raises:
        FileNotFoundError: no such run, or no run has written a retry set yet.
    """
    root = root or runs_root()
    if run_id:
        data = load_run(run_id, root)
        return run_id, list(data.get("failed_hosts", []))
    data = json.loads((root / ".retry.json").read_text())
    return data["run_id"], list(data["failed_hosts"])
