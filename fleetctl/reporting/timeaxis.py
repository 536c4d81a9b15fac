"""The report's timeline: the shared time axis (ticks at a clock's nice steps, labelled as a
person reads them), each host's bars on it from its recorded phases, and which hosts are drawn
when there are more than :data:`TIMELINE_MAX_ROWS`. Pure: run-record dicts in, report types out."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from .report_types import Bar, HostRow

#: Most hosts the timeline draws (the phase statistics and the hosts table cover every host).
TIMELINE_MAX_ROWS = 100


def parse_time(text: str | None) -> dt.datetime | None:
    """An ISO 8601 time (``run.json``'s ``started``), or None when missing or unreadable."""
    try:
        return dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


#: Tick steps, seconds: 1/2/5 below a second, then the steps a clock has (15 s, 30 s, 1, 2, 5,
#: 10, 15, 30 min, 1, 2, 3, 6, 12 h), then whole days.
TICK_STEPS_S = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                21600, 43200, 86400)


def tick_label(t: float, step: float) -> str:
    """One tick's label: seconds, minutes or hours as a person reads them (``50 s``, ``1 min``,
    ``1.5 min``, ``2 h``): a unit is used only where the ticks are whole or half units of it."""
    if t == 0:  # in the unit of the first step: "0 s", "0 min"
        return "0 " + tick_label(step, step).split()[-1]
    if t < 60 or step < 30:
        return f"{t:g} s"
    if t < 3600 or step < 1800:
        return f"{t / 60:g} min"
    if t < 86400 * 2 or step < 43200:
        return f"{t / 3600:g} h"
    return f"{t / 86400:g} d"


def nice_ticks(axis_s: float, most: int = 6) -> list[tuple[float, str]]:
    """Tick marks for an axis of ``axis_s`` seconds: ``[(percent, label)]``, at most ``most``
    steps of a clock's nice sizes (:data:`TICK_STEPS_S`), labelled by :func:`tick_label`."""
    if axis_s <= 0:
        return [(0.0, "0 s")]
    raw = axis_s / most
    step = next((s for s in TICK_STEPS_S if s >= raw), None)
    if step is None:
        step = 86400 * math.ceil(raw / 86400)
    out = []
    k = 0
    while k * step <= axis_s + 1e-9:
        t = round(k * step, 9)
        out.append((round(100.0 * t / axis_s, 3), tick_label(t, step)))
        k += 1
    return out


def host_bars(host: dict[str, Any], run_start: dt.datetime | None, kind: str) -> list[Bar]:
    """One host's bars (``run.json``'s host dict, its ``phases``; seconds from the run's start);
    a host with no phases recorded gets one bar for its whole time (``kind``: the run's kind)."""
    spans = host.get("phases") or []
    if not spans and host.get("started") and run_start is not None:
        # ad-hoc runs (run, facts) record no phases: one bar per host; a playbook host that
        # ended before its phases were recorded (unreachable) gets one connect bar
        start = parse_time(host["started"])
        if start is not None:
            phase = {"run": "command", "facts": "facts"}.get(kind, "connect")
            spans = [{"phase": phase, "status": host.get("status", "?"),
                      "start_s": (start - run_start).total_seconds(), "duration_s": host.get("duration_s") or 0}]
    return [Bar(phase=str(s.get("phase")), start_s=max(0.0, float(s.get("start_s") or 0)),
                duration_s=max(0.0, float(s.get("duration_s") or 0)), status=str(s.get("status"))) for s in spans]


def timeline_rows(rows: list[HostRow]) -> tuple[list[HostRow], str]:
    """The hosts the timeline draws: all up to :data:`TIMELINE_MAX_ROWS`; past that the failed
    ones first, then the slowest, shown in inventory order."""
    if len(rows) <= TIMELINE_MAX_ROWS:
        return rows, ""
    bad = [r for r in rows if r.status != "ok"][:TIMELINE_MAX_ROWS]
    rest = sorted((r for r in rows if r.status == "ok"), key=lambda r: -r.duration_s)[:TIMELINE_MAX_ROWS - len(bad)]
    chosen = {r.name for r in bad} | {r.name for r in rest}
    note = (f"{TIMELINE_MAX_ROWS} of {len(rows)} hosts drawn: the {len(bad)} that did not succeed and the "
            f"{len(rest)} slowest of the others; the phase statistics and the hosts table cover every host.")
    return [r for r in rows if r.name in chosen], note
