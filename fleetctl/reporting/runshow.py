"""``fleetctl runs show RUN``: one run record (run.json) as a page for people.

A header (run id, kind, playbook, pattern, mode, status, who and where, times), one row per host
(status, tasks changed/failed, seconds, the cause of a failure), the failures' causes folded over
their hosts (:func:`fleetctl.inventory.nodeset.fold_hosts`: ``gpu[01-12]: CUDA 12.4 too old``), and
where to look next. Nothing here prints: :func:`render` gives the lines.
"""

from __future__ import annotations

import datetime as dt
import shlex
from typing import Any


def _when(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _short(value: Any) -> str:
    t = _when(value)
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if t else (str(value) if value else "-")


def duration(seconds: float) -> str:
    """``42.0s``, ``3m07s``, ``2h05m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def host_cause(h: dict) -> str:
    """One line: why the host is not ok (its error, else its first failed task's message)."""
    if h.get("error"):
        return str(h["error"])
    for t in h.get("tasks") or []:
        if isinstance(t, dict) and t.get("status") in ("failed", "unreachable"):
            return f"{t.get('name')}: {t.get('msg') or t.get('status')}"
    return ""


def render(record: dict, shown_status: str) -> list[str]:
    """The page's lines for one run.json ``record``; ``shown_status`` as listings show it."""
    from ..inventory.nodeset import fold_hosts

    run_id = record.get("run_id", "?")
    kind, mode = record.get("kind", "?"), record.get("mode", "apply")
    start, end = _when(record.get("started")), _when(record.get("finished"))
    took = duration((end - start).total_seconds()) if start and end else "-"
    head = [("run", run_id), ("kind", kind), ("playbook", record.get("playbook")),
            ("pattern", record.get("pattern")), ("command", shlex.join(record.get("argv") or []) or None),
            ("mode", mode), ("status", shown_status),
            ("by", f"{record.get('user') or '?'}@{record.get('controller') or '?'}"),
            ("started", _short(record.get("started"))), ("finished", _short(record.get("finished"))),
            ("duration", took)]
    lines = [f"{k + ':':10}{v}" for k, v in head if v not in (None, "")]
    hosts: dict[str, dict] = {k: v for k, v in (record.get("hosts") or {}).items() if isinstance(v, dict)}
    lines.append("")
    if not hosts:
        lines.append("no hosts")
        return lines
    width = max(4, *(len(h) for h in hosts))
    lines.append(f"{'HOST':<{width}}  {'STATUS':<12} {'CHANGED':>7} {'FAILED':>6} {'TIME':>8}  CAUSE")
    causes: dict[str, list[str]] = {}
    waiting: dict[str, list[str]] = {}
    stopped: dict[str, list[str]] = {}
    for name, h in hosts.items():
        tasks = [t for t in h.get("tasks") or [] if isinstance(t, dict)]
        changed = sum(t.get("status") == "changed" for t in tasks)
        failed = sum(t.get("status") in ("failed", "unreachable") for t in tasks)
        status = str(h.get("status", "?"))
        cause = host_cause(h) if status != "ok" else ""
        if kind in ("copy", "fetch") and status == "ok":
            cause = f"{len(h.get('files') or [])} files, {h.get('bytes') or 0} bytes"
        lines.append(f"{name:<{width}}  {status:<12} {changed:>7} {failed:>6} "
                     f"{duration(float(h.get('duration_s') or 0)):>8}  {cause}".rstrip())
        if status == "not started" and cause:  # never ran (a failed canary stopped the rest): not a failure
            waiting.setdefault(cause, []).append(name)
        elif status == "interrupted":  # stopped by Ctrl-C / SIGTERM while in progress: not a failure
            stopped.setdefault(cause or "run interrupted", []).append(name)
        elif status != "ok" and cause:
            causes.setdefault(cause, []).append(name)
    for title, groups in (("failures:", causes), ("interrupted:", stopped), ("not started:", waiting)):
        if groups:
            lines += ["", title]
            for cause, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                lines.append(f"  {fold_hosts(names)} ({len(names)}): {cause}")
    warned = [(n, w) for n, h in hosts.items() for w in h.get("warnings") or []]
    if warned:  # the host's status stands, with these lines (a deploy lock lost during the run)
        lines += ["", "warnings:"] + [f"  {n}: {w}" for n, w in warned]
    whole = [n for n, h in hosts.items() if not h.get("log_cut")]  # a cut log is not every line (recordcut)
    bad = [n for n in whole if hosts[n].get("status") != "ok"]
    lines += [""] + ([f"every line a host printed: fleetctl logs {run_id} {(bad or whole)[0]}"] if whole else [])
    lines += [f"all hosts: fleetctl logs {run_id}"]
    if kind in ("deploy", "verify", "rollback"):
        lines.append(f"the report: fleetctl report {run_id}")
    return lines
