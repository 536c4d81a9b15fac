"""Pruning run records on the controller (``<state>/runs/<run_id>/``) by the retention policy
(:mod:`fleetctl.util.retention`): at the end of every run, and with ``fleetctl runs prune``.

Only folders fleetctl made are touched: names that are run ids (:func:`fleetctl.util.retention.run_time`
reads them); the retry sets (``.retry-*.json``) and anything else in the folder stay, and the run
each retry set points to is never removed (``--retry-failed`` reads it). A record that
cannot be read counts as in progress while its folder changed within the last hour (a run that has
not written its ``run.json`` yet), else as a failed run of no known play. When the controller's
clock disagrees with the records (:func:`fleetctl.util.retention.clock_disagrees`) the result
carries one warning line saying so.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..util.retention import RetentionPolicy, RunEntry, clock_disagrees, run_time, runs_to_prune
from .history import runs_root, shown_status
from .order import ENDED, seq_of

#: Seconds a record folder without a readable run.json is taken for a run still starting.
YOUNG_S = 3600.0
#: A run.json of at least this many bytes is read by its top-level fields alone (:func:`record_head`).
BIG_BYTES = 1 << 20
#: A top-level key of run.json as the record writes it (``json.dumps(..., indent=2)``: two spaces;
#: a JSON string holds no raw newline, so no deeper key and no value matches).
_TOP_KEY = re.compile(rb'\n  "([a-z_]+)": ')
_INVENTORY_PATH = re.compile(rb'\{\n    "path": ')
#: The fields a prune reads (:func:`_entry`, :func:`fleetctl.reporting.history.shown_status`).
_HEAD = frozenset({"kind", "mode", "status", "controller", "controller_pid", "controller_start", "playbook"})


def record_head(path: Path) -> dict:
    """What a prune needs of a run's ``run.json``: its :data:`_HEAD` fields and
    ``inventory.path``. A large file (:data:`BIG_BYTES`) is not parsed whole: each run ends with a
    prune that reads every kept record, and a 10,000-host run.json is 60 MB of text, some 300 MB
    as Python objects (issue 27: it was the peak of a no-change deploy of 10,000 hosts). Its
    top-level fields are found by their indentation and only those are parsed; a file of another
    layout is parsed whole.

    Raises:
        OSError, ValueError: as ``json.loads(path.read_text())`` would.
    """
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size < BIG_BYTES:
            return json.loads(fh.read())
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            out: dict = {}
            for m in _TOP_KEY.finditer(mm):
                key = m.group(1).decode()
                if key in _HEAD:
                    out[key] = _line_value(mm, m.end())
                elif key == "inventory" and (p := _INVENTORY_PATH.match(mm, m.end())):
                    out["inventory"] = {"path": _line_value(mm, p.end())}
            if "status" in out and "kind" in out:
                return out
            return json.loads(mm[:])


def _line_value(mm: mmap.mmap, start: int) -> object:
    """The JSON scalar from ``start`` to the end of its line (a trailing comma dropped)."""
    end = mm.find(b"\n", start)
    text = mm[start:end if end >= 0 else len(mm)].rstrip().rstrip(b",")
    return json.loads(text)


@dataclass
class PruneResult:
    """What a prune removed (or, dry, would remove): run ids oldest first (in the order made), how
    many it kept, and the warning when the clock disagrees with the records."""

    removed: list[str] = field(default_factory=list)
    kept: int = 0
    errors: list[str] = field(default_factory=list)
    warning: str | None = None


def _entry(folder: Path, now_s: float) -> RunEntry:
    started, seq, ended = run_time(folder.name), seq_of(folder), seq_of(folder, ENDED)
    try:
        record = record_head(folder / "run.json")
    except (OSError, ValueError):
        try:
            young = now_s - folder.stat().st_mtime < YOUNG_S
        except OSError:
            young = False
        return RunEntry(run_id=folder.name, started=started, in_progress=young, seq=seq)
    status = shown_status(record)
    play = (record.get("kind"), record.get("playbook"), (record.get("inventory") or {}).get("path"))
    applied = record.get("mode", "apply") == "apply"
    kind = record.get("kind")
    return RunEntry(run_id=folder.name, started=started, in_progress=status == "running",
                    succeeded=status == "ok" and applied, failed=applied and status not in ("ok", "running"),
                    play=play, kind=str(kind) if kind else None, seq=seq, ended=ended)


def retry_pins(root: Path) -> set[str]:
    """The run ids the retry sets in ``root`` (``.retry-*.json``) point to; an unreadable set pins
    nothing (never raises)."""
    pins: set[str] = set()
    for path in root.glob(".retry-*.json"):
        try:
            run_id = json.loads(path.read_text()).get("run_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(run_id, str) and run_id:
            pins.add(run_id)
    return pins


def prune_runs(policy: RetentionPolicy, *, root: Path | None = None, dry_run: bool = False,
               now: datetime | None = None, spare: frozenset[str] = frozenset()) -> PruneResult:
    """Remove the run records ``policy`` does not keep (none with ``dry_run``).

    Args:
        policy: how many runs (per class: ad-hoc, playbook) and days to keep.
        root: the runs folder (default :func:`fleetctl.reporting.history.runs_root`).
        dry_run: only say what would be removed.
        now: the time ages are measured from (default: now, UTC).
        spare: run ids never removed by this prune (the run whose end prunes: its own record stays
            even when other runs of its class ended between its end and this prune).

    Returns:
        :class:`PruneResult`; a folder that cannot be removed is named in ``errors``, never raised.
    """
    root = root or runs_root()
    out = PruneResult()
    if not root.is_dir():
        return out
    now = now or datetime.now(timezone.utc)
    now_s = time.time()
    started = {p: run_time(p.name) for p in root.iterdir() if p.is_dir() and not p.is_symlink()}
    folders = [p for p, t in started.items() if t is not None]
    bare = [RunEntry(run_id=p.name, started=started[p], seq=seq_of(p)) for p in folders]
    out.warning = clock_disagrees(bare, policy, now)
    if len(folders) <= policy.keep_runs and all((now - t).total_seconds() <= policy.keep_days * 86400
                                                for t in started.values() if t is not None):
        out.kept = len(folders)  # no class holds more than keep_runs, none is too old: no record is read
        return out
    doomed = runs_to_prune([_entry(p, now_s) for p in folders], policy, now, pinned=retry_pins(root) | set(spare))
    out.kept = len(folders) - len(doomed)
    for run_id in doomed:
        if not dry_run:
            try:
                shutil.rmtree(root / run_id)
            except OSError as exc:
                out.errors.append(f"{root / run_id}: {exc.strerror or exc}")
                continue
        out.removed.append(run_id)
    return out
