"""Reading a run's host logs for people: ``fleetctl logs RUN`` and ``fleetctl logs --follow``.

A host log (:mod:`fleetctl.reporting.record`) holds each line's exact bytes behind a marker:
``out| `` / ``err| `` (``out+ `` / ``err+ `` for the continuation of a line longer than 1 MiB) and
``==> `` task lines; ``out~ `` / ``err~ `` lines are fleetctl's own protocol (a probe's start marker
and JSON answer, never shown on the terminal either) and are left out here. Shown here as clush and Ansible show many hosts: each line prefixed
``host: ``, the bytes decoded as UTF-8 (U+FFFD for invalid bytes), control characters other than
tab dropped, continuations joined to their line.

:class:`LogTail` follows one file by its offset: every poll reads only the bytes added since the
last one (never the whole file again), and keeps an unfinished last line until its newline comes.
Nothing here prints: callers get lines.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

#: Bytes read from one log per poll at most (a host printing fast never starves the others).
READ_CHUNK_BYTES = 1024 * 1024

_DROP = {c: None for c in range(32) if c != 9} | {127: None}

#: The markers of fleetctl's own protocol lines in a host log (:mod:`fleetctl.reporting.record`).
PROTOCOL_MARKS = (b"out~ ", b"err~ ")


def readable(raw: bytes) -> str | None:
    """One raw log line (without its newline) as text, or ``None`` for an empty one.

    ``out| x`` -> ``x``; ``err| x`` -> ``x``; ``==> task`` stays as it is; a line of another shape
    (a log written by an older fleetctl) is shown whole; ``out~ x`` / ``err~ x`` (fleetctl's own
    protocol, :mod:`fleetctl.reporting.record`) -> ``None``: not the host's words.
    """
    if raw.startswith(PROTOCOL_MARKS):
        return None
    for mark in (b"out| ", b"err| ", b"out+ ", b"err+ "):
        if raw.startswith(mark):
            raw = raw[len(mark):]
            break
    return raw.decode("utf-8", errors="replace").translate(_DROP)


class LogTail:
    """Follow one host log from byte ``offset`` (0: the start).

    Attributes:
        path: the log file.
        host: the host name lines are prefixed with.
        offset: bytes consumed so far.
    """

    def __init__(self, path: Path, host: str) -> None:
        self.path, self.host, self.offset = path, host, 0
        self._partial = b""

    def poll(self, *, final: bool = False) -> list[str]:
        """The lines added since the last poll, each ``host: text``; ``final`` also gives an
        unfinished last line. A file that is gone or unreadable gives nothing (tried again next time)."""
        lines: list[str] = []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                while True:
                    chunk = fh.read(READ_CHUNK_BYTES)
                    if not chunk:
                        break
                    self.offset += len(chunk)
                    data = self._partial + chunk
                    *done, self._partial = data.split(b"\n")
                    lines.extend(s for s in map(self._show, done) if s is not None)
                    if len(chunk) < READ_CHUNK_BYTES:
                        break
        except OSError:
            pass
        if final and self._partial:
            shown = self._show(self._partial)
            lines.extend([shown] if shown is not None else [])
            self._partial = b""
        return lines

    def _show(self, raw: bytes) -> str | None:
        text = readable(raw)
        return None if text is None else f"{self.host}: {text}"


def _record(run_dir: Path) -> dict:
    """The run's ``run.json``, of a run record's shape (:func:`fleetctl.reporting.history.read_record`)."""
    from .history import read_record

    return read_record(run_dir / "run.json")


def host_names(run_dir: Path) -> dict[str, str]:
    """log file name -> host name, from run.json (a host not there yet is named by its file:
    :func:`log_host`)."""
    from ..util.paths import safe_name

    try:
        hosts = _record(run_dir).get("hosts") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {f"{safe_name(h)}.log": h for h in hosts}


def log_host(file_name: str) -> str:
    """The host a ``logs/`` file is of, by its name alone (``a%40b.log`` -> ``a@b``:
    :func:`fleetctl.util.paths.host_of`), for a host run.json does not name (yet)."""
    from ..util.paths import host_of

    return host_of(file_name[:-4] if file_name.endswith(".log") else file_name)


def all_lines(run_dir: Path, only: str | None = None) -> Iterator[str]:
    """Every line of every host log of a finished (or running) run, host by host in name order;
    ``only``: that host's log only."""
    from ..util.paths import safe_name

    names = host_names(run_dir)
    logs = sorted((run_dir / "logs").glob("*.log"), key=lambda p: names.get(p.name, log_host(p.name)))
    for path in logs:
        host = names.get(path.name, log_host(path.name))
        if only is not None and path.name != f"{safe_name(only)}.log":
            continue
        tail = LogTail(path, host)
        while True:
            got = tail.poll()
            yield from got
            if not got:
                break
        yield from tail.poll(final=True)


def host_reason(run_dir: Path, host: str) -> str | None:
    """``HOST: STATUS: CAUSE`` for a host of the run that is not ok (``unreachable``, ``not
    started``, ``failed``...), from run.json as listings read it (:func:`fleetctl.reporting.history.
    settled`): its error, else its first task message; None for a host that is ok, changed or not
    in the record. The one rendering ``fleetctl logs`` uses with and without
    ``--follow`` (a host that printed nothing has no other line saying why)."""
    from .history import settled

    try:
        h = (settled(_record(run_dir)).get("hosts") or {}).get(host)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(h, dict) or h.get("status") in (None, "ok", "changed"):
        return None
    error = h.get("error") or next((t.get("msg") for t in h.get("tasks") or []
                                    if isinstance(t, dict) and t.get("msg")), None)
    return f"{host}: {h.get('status')}" + (f": {error}" if error else " (it printed nothing)")


def host_status(run_dir: Path, host: str) -> str | None:
    """The host's status in the run as listings read it (:func:`fleetctl.reporting.history.settled`:
    ``ok``, ``changed``, ``failed``, ``unreachable``, ``interrupted``...), or None while run.json is
    unreadable or does not name the host (yet)."""
    from .history import settled

    try:
        h = (settled(_record(run_dir)).get("hosts") or {}).get(host)
    except (OSError, ValueError, AttributeError):
        return None
    status = h.get("status") if isinstance(h, dict) else None
    return str(status) if status else None


def silent_reasons(run_dir: Path, only: str | None = None) -> list[str]:
    """:func:`host_reason` for each host of the run (``only``: that host) whose log is missing or
    empty, in run.json's order: the lines ``fleetctl logs`` prints after the hosts' own lines."""
    from ..util.paths import safe_name

    try:
        hosts = _record(run_dir).get("hosts") or {}
    except (OSError, ValueError, AttributeError):
        return []
    out = []
    for name in hosts:
        if only is not None and name != only:
            continue
        path = run_dir / "logs" / f"{safe_name(name)}.log"
        if not path.exists() or path.stat().st_size == 0:
            reason = host_reason(run_dir, name)
            if reason is not None:
                out.append(reason)
    return out


def run_state(run_dir: Path) -> str | None:
    """The run's shown status (:func:`fleetctl.reporting.history.shown_status`: a ``running``
    record whose controller is gone is not running), or ``None`` while run.json is unreadable."""
    from .history import shown_status

    try:
        return shown_status(_record(run_dir))
    except (OSError, ValueError):
        return None


def follow(run_dir: Path, emit: Callable[[str], None], *, only: str | None = None,
           poll_s: float = 0.25, sleep: Callable[[float], None] | None = None) -> str:
    """Print (through ``emit``) every host log line of the run, and the lines added while it runs,
    new hosts' logs included as they appear, until the run is no longer ``running`` (its run.json
    says so, or its controller process is gone); then the lines written last, and the cause line
    of each host that printed nothing (:func:`silent_reasons`, as ``fleetctl logs RUN`` prints them).

    Args:
        run_dir: ``<runs>/<run_id>``.
        emit: called with each ``host: text`` line (and each ``host: status: cause`` line).
        only: follow that host's log only.
        poll_s: seconds between polls of the files.

    Returns:
        The run's final shown status (``ok``, ``failed``, ``interrupted (controller gone)``...).
    """
    import time

    from ..util.paths import safe_name

    sleep = sleep or time.sleep
    tails: dict[str, LogTail] = {}

    def sweep(final: bool = False) -> None:
        names = host_names(run_dir)
        try:
            entries = sorted(os.listdir(run_dir / "logs"))
        except OSError:
            entries = []
        for name in entries:
            if not name.endswith(".log") or (only is not None and name != f"{safe_name(only)}.log"):
                continue
            if name not in tails:
                tails[name] = LogTail(run_dir / "logs" / name, names.get(name, log_host(name)))
            elif names.get(name) and tails[name].host != names[name]:
                tails[name].host = names[name]
        for tail in tails.values():
            for line in tail.poll(final=final):
                emit(line)

    while True:
        state = run_state(run_dir)
        sweep()
        if state is not None and state != "running":
            sweep(final=True)
            for line in silent_reasons(run_dir, only):
                emit(line)
            return state
        sleep(poll_s)
