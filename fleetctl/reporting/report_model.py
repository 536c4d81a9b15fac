"""A run record summarised into what the HTML report shows (pure data; :mod:`.html` renders it).

Input: a run record folder (``run.json``, ``events.jsonl``, ``logs/<host>.log``; see
:mod:`fleetctl.reporting.record` and ``docs/schema/``). Output: a :class:`Report`:

- the run's summary: command, playbook, who, when, duration, exit status, mode, counts by status;
- every host: status, error, phase durations, its bars on the shared time axis, its arch class
  and role, the installed wheel's sha256, where its log is and which log tail is its own;
- failures folded by identical cause (the host's own name and address taken out of the cause, so
  ``connection refused by 10.0.0.7:22`` on ten hosts is one cause), with the folded host set
  (``gpu[03,07-09]``, :func:`fleetctl.inventory.fold_hosts`) and the first compiler error line;
- arch classes from the ``build_wheel`` tasks' data (``decision.action``: build, push, reuse,
  serve, fail; ``pushed_from``): who built, who got the wheel pushed;
- log tails folded the same way (identical tails once, with their host set);
- notes and events worth a look (OOM retries, builder hand-overs), folded.

What keeps it small for 1,000 hosts: the timeline draws at most
:data:`~fleetctl.reporting.timeaxis.TIMELINE_MAX_ROWS` rows
(the failed hosts first, then the slowest) plus per-phase statistics over every host; the hosts
table has one short row per host; tails of hosts that succeeded are :data:`TAIL_LINES_OK_MANY`
lines above :data:`MANY_HOSTS` hosts; identical tails and causes are stored once.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

from .environments import environment_line, from_facts
from ..util.paths import safe_name
from .identity import identity_tokens, without_identity
from .logscan import LogInfo, scan_log
from .report_types import ArchClass, Bar, Cause, Folded, HostRow, PhaseStat, Report, Tail
from .timeaxis import host_bars, nice_ticks, parse_time, timeline_rows

__all__ = ["ArchClass", "Bar", "Cause", "Folded", "HostRow", "PhaseStat", "Report", "Tail", "load_report",
           "summarise"]

PHASE_ORDER = ("connect", "facts", "upload", "build", "install", "verify", "command")
HOST_STATUS_ORDER = ("failed", "unreachable", "interrupted", "not started", "running", "ok")
MANY_HOSTS = 100
TAIL_LINES = 20
TAIL_LINES_OK_MANY = 5
#: Events listed in the report (folded by host set), with how each reads.
NOTABLE_EVENTS = {
    "build.oom_retry": lambda d: f"compiler killed for memory with MAX_JOBS={d.get('max_jobs')}: built again "
                                 f"with {d.get('next_max_jobs')}",
    "class.builder_changed": lambda d: f"the builder of class {d.get('key')} went away: this host built instead",
    "class.serve_failed": lambda d: f"could not hand the wheel of class {d.get('key')} on: {d.get('error')}",
    "task.retrying": lambda d: f"{d.get('task')}: attempt {d.get('attempt')} failed, retried: {d.get('msg')}",
    "lock.stale_taken_over": lambda d: "took over the stale lock of run "
                                       f"{(d.get('previous') or {}).get('run_id')}",
    "host.refused": lambda d: f"{d.get('task')}: {d.get('msg')} (found while planning: nothing applied)",
}
_EXIT = {"ok": (0, "every host succeeded"), "failed": (1, "one or more hosts failed or were unreachable"),
         "refused": (1, "refused: another run holds a host's lock"),
         "interrupted": (130, "interrupted (SIGINT 130 / SIGTERM 143)"), "running": (None, "still running"),
         "interrupted (controller gone)": (None, "the controller process is gone (killed, e.g. by SIGKILL or "
                                                 "a crash) without finishing the record")}
#: An interrupted run's exit status by the signal its record names (``interrupted_by``; a record
#: without it reads as ``_EXIT``'s ``interrupted``), from fleetctl.cli.runend.run_async.
_EXIT_BY_SIGNAL = {"SIGINT": (130, "interrupted (SIGINT)"), "SIGTERM": (143, "interrupted (SIGTERM)")}


def _fold(names: list[str]) -> str:
    from ..inventory import fold_hosts

    return fold_hosts(names)


_DIGITS = re.compile(r"\d+")
_SEVERITY = {"failed": 5, "unreachable": 4, "interrupted": 3, "changed": 2, "ok": 1, "skipped": 0}


def read_events(path: Path, names: set[str]) -> list[dict[str, Any]]:
    """The events of ``events.jsonl`` whose name is in ``names`` (other lines are not parsed)."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not any(n in line for n in names):
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("event") in names:
                    out.append(ev)
    except OSError:
        pass
    return out


def _note_key(text: str) -> str:
    """A note as it folds across hosts: the free-memory figure of the max_jobs note varies by host."""
    return re.sub(r"memory \d+ MiB", "memory \u2026 MiB", text)


def _folded_groups(groups: dict[str, list[str]]) -> list[Folded]:
    items = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [Folded(text=t, hosts=hs, folded=_fold(hs)) for t, hs in items]


def load_report(run_dir: Path, *, version: str = "") -> Report:
    """Read a run record folder and summarise it.

    Raises:
        FileNotFoundError: no ``run.json`` in ``run_dir``.
        ValueError: ``run.json`` is not a run record (:func:`fleetctl.reporting.history.read_record`).
    """
    from .history import read_record, settled

    run = read_record(run_dir / "run.json")

    run = settled(run)  # a run whose controller is gone: its hosts still running are interrupted
    hosts: dict[str, dict[str, Any]] = run.get("hosts") or {}
    many = len(hosts) > MANY_HOSTS
    logs: dict[str, LogInfo] = {}
    for name, h in hosts.items():
        bad = h.get("status") not in ("ok",)
        lines = TAIL_LINES if bad or not many else TAIL_LINES_OK_MANY
        logs[name] = scan_log(run_dir / "logs" / f"{safe_name(name)}.log", tail_lines=lines, want_error=bad)
    events = read_events(run_dir / "events.jsonl", set(NOTABLE_EVENTS) | {"note.added"})
    return summarise(run, logs, events, record_dir=str(run_dir), version=version)


def summarise(run: dict[str, Any], logs: dict[str, LogInfo], events: list[dict[str, Any]], *,
              record_dir: str = "", version: str = "") -> Report:
    """The :class:`Report` of a run (``run.json`` as a dict), its hosts' :class:`LogInfo` and its
    notable events (pure)."""
    hosts: dict[str, dict[str, Any]] = run.get("hosts") or {}
    hostvars: dict[str, dict[str, Any]] = (run.get("inventory") or {}).get("hosts") or {}
    run_start = parse_time(run.get("started"))
    run_end = parse_time(run.get("finished"))
    duration = (run_end - run_start).total_seconds() if run_start and run_end else None
    kind = str(run.get("kind") or "deploy")

    rows: list[HostRow] = []
    task_counts: dict[str, int] = {}
    for name, h in hosts.items():
        bars = host_bars(h, run_start, kind)
        phases: dict[str, tuple[float, str]] = {}
        for b in bars:
            sec, st = phases.get(b.phase, (0.0, "skipped"))
            phases[b.phase] = (sec + b.duration_s, b.status if _SEVERITY.get(b.status, 0) >= _SEVERITY.get(st, 0) else st)
        log = logs.get(name)
        row = HostRow(name=name, status=str(h.get("status", "?")), error=h.get("error"),
                      duration_s=float(h.get("duration_s") or 0), bars=bars, phases=phases, rc=h.get("rc"),
                      log_rel=f"logs/{safe_name(name)}.log", log_size_bytes=log.size_bytes if log else 0)
        row.environment = environment_line(h.get("environment") or from_facts(h.get("facts")))
        if row.status == "not started" and not row.error:
            row.error = run.get("stopped")
        reached = row.status != "unreachable"
        for t in h.get("tasks") or []:
            if reached and t.get("action") != "facts":
                task_counts[t.get("status", "?")] = task_counts.get(t.get("status", "?"), 0) + 1
            row.changed = row.changed or t.get("status") == "changed"
            data = t.get("data") or {}
            if t.get("action") == "pip_install" and t.get("status") in ("ok", "changed") and data.get("sha256"):
                row.wheel_sha256 = data["sha256"]
        rows.append(row)

    causes = _causes(rows, hostvars, logs)
    classes = _classes(rows, hosts)
    tails = _tails(rows, hostvars, logs)
    notes: dict[str, list[str]] = {}
    notable: dict[str, list[str]] = {}
    for ev in events:
        host = ev.get("host")
        if not host:
            continue
        if ev.get("event") == "note.added":
            notes.setdefault(_note_key(str(ev.get("message"))), []).append(host)
        elif ev.get("event") in NOTABLE_EVENTS:
            text = without_identity(NOTABLE_EVENTS[ev["event"]](ev), identity_tokens(host, hostvars.get(host) or {}))
            notable.setdefault(text, []).append(host)

    axis = max([b.start_s + b.duration_s for r in rows for b in r.bars] + [duration or 0.0, 0.001])
    for r in rows:
        for b in r.bars:
            b.x_pct = round(100.0 * b.start_s / axis, 3)
            b.w_pct = round(max(100.0 * b.duration_s / axis, 0.15), 3)
    timeline, note = timeline_rows(rows)
    present = [p for p in PHASE_ORDER if any(p in r.phases for r in rows)]
    present += sorted({p for r in rows for p in r.phases} - set(present))
    stats = []
    for p in present:
        vals = sorted(r.phases[p][0] for r in rows if p in r.phases)
        p95 = vals[min(len(vals) - 1, math.ceil(0.95 * len(vals)) - 1)]
        stats.append(PhaseStat(p, len(vals), vals[0], statistics.median(vals), p95, vals[-1]))
    from .history import shown_status

    status = shown_status(run)
    code, meaning = _EXIT.get(status, (None, status))
    if status == "interrupted" and run.get("interrupted_by") in _EXIT_BY_SIGNAL:
        code, meaning = _EXIT_BY_SIGNAL[run["interrupted_by"]]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    host_counts = [(s, counts[s]) for s in HOST_STATUS_ORDER if s in counts]
    host_counts += [(s, n) for s, n in counts.items() if s not in HOST_STATUS_ORDER]
    order = ("changed", "ok", "failed", "unreachable", "skipped")
    return Report(
        run_id=str(run.get("run_id", "?")), kind=kind, mode=str(run.get("mode") or "apply"), status=status,
        exit_status=code, exit_meaning=meaning, command=" ".join(run.get("command") or []),
        playbook=run.get("playbook"), playbook_sha256=run.get("playbook_sha256"), pattern=run.get("pattern"),
        user=str(run.get("user") or "?"), controller=str(run.get("controller") or "?"),
        started=str(run.get("started") or ""), finished=run.get("finished"), duration_s=duration,
        record_dir=record_dir, stopped=run.get("stopped"), host_counts=host_counts,
        task_counts=[(s, task_counts[s]) for s in order if s in task_counts]
        + [(s, n) for s, n in task_counts.items() if s not in order],
        hosts=rows, causes=causes, classes=classes, tails=tails, notes=_folded_groups(notes),
        events=_folded_groups(notable), phases=present, phase_stats=stats, timeline=timeline, timeline_note=note,
        axis_s=axis, ticks=nice_ticks(axis), anchors={r.name: f"h-{i}" for i, r in enumerate(rows, 1)},
        fleetctl_version=version)


def _causes(rows: list[HostRow], hostvars: dict[str, dict[str, Any]], logs: dict[str, LogInfo]) -> list[Cause]:
    groups: dict[tuple[str, str], list[HostRow]] = {}
    errors: dict[tuple[str, str], str | None] = {}
    for r in rows:
        if r.status == "ok":
            continue
        tokens = identity_tokens(r.name, hostvars.get(r.name) or {})
        text = without_identity(r.error or r.status, tokens)
        first = (logs.get(r.name) or LogInfo(path=Path())).first_error
        key = (r.status, text)
        groups.setdefault(key, []).append(r)
        if errors.get(key) is None and first:
            errors[key] = first  # as the host printed it (the cause folds; this line is evidence)
    order = sorted(groups.items(), key=lambda kv: (HOST_STATUS_ORDER.index(kv[0][0]) if kv[0][0] in HOST_STATUS_ORDER
                                                   else 99, -len(kv[1]), kv[0][1]))
    out = []
    for i, ((status, text), members) in enumerate(order, 1):
        names = [m.name for m in members]
        for m in members:
            m.cause_id = i
        ex = members[0].name
        out.append(Cause(id=i, status=status, text=text, hosts=names, folded=_fold(names),
                         first_error=errors.get((status, text)), example_host=ex,
                         example_tail=(logs.get(ex) or LogInfo(path=Path())).tail))
    return out


def _classes(rows: list[HostRow], hosts: dict[str, dict[str, Any]]) -> list[ArchClass]:
    found: dict[str, dict[str, Any]] = {}
    by_name = {r.name: r for r in rows}
    for name, h in hosts.items():
        for t in h.get("tasks") or []:
            data = t.get("data") or {}
            decision = data.get("decision") or {}
            key = str(data.get("key") or decision.get("key") or "")[:16]
            if t.get("action") != "build_wheel" or not key or t.get("status") == "skipped" or not t.get("selected", True):
                continue
            role = "fail" if t.get("status") in ("failed", "unreachable") else str(decision.get("action") or "build")
            c = found.setdefault(key, {"hosts": [], "roles": {}, "archs": "", "sass": "", "wheel": "", "sha256": "",
                                       "refused": set(), "sass_got": False, "asked": ""})
            if name not in c["hosts"]:
                c["hosts"].append(name)
            c["roles"][name] = role
            if role == "fail" and data.get("preflight"):  # refused before building: never its class's builder
                c["refused"].add(name)
            c["archs"] = c["archs"] or str(data.get("archs") or decision.get("archs") or "")
            # the SASS a wheel holds (its check), a member's that got the wheel first; else what was
            # asked, labelled so (fresh operator's trial: a failed builder's asked list was shown)
            got = t.get("status") in ("ok", "changed")
            if data.get("sass") and (got and not c["sass_got"] or not c["sass"]):
                c["sass"], c["sass_got"] = " ".join(data["sass"]), got
            c["asked"] = c["asked"] or " ".join(data.get("sass_asked") or [])
            if data.get("sha256") and t.get("status") in ("ok", "changed"):
                c["sha256"] = c["sha256"] or str(data["sha256"])
                c["wheel"] = c["wheel"] or str(data.get("wheel") or "").rsplit("/", 1)[-1]
            row = by_name.get(name)
            if row is not None and row.class_id is None:
                row.role = role
                row.built_on = data.get("pushed_from") or (name if role == "build" and t.get("status") == "changed"
                                                           else None)
                c.setdefault("pushed_from", {})[name] = data.get("pushed_from")
    out = []
    for i, (key, c) in enumerate(found.items(), 1):
        roles = c["roles"]
        builders = list(dict.fromkeys([h for h, r in roles.items() if r in ("build", "serve")]
                                      + [p for p in (c.get("pushed_from") or {}).values() if p]))
        if not builders:
            builders = [h for h, r in roles.items() if r == "fail" and h not in c["refused"]][:1]
        for h in c["hosts"]:
            if h in by_name and by_name[h].class_id is None:
                by_name[h].class_id = i

        def of(*want: str, _roles=roles) -> str:
            return _fold([h for h, r in _roles.items() if r in want])

        out.append(ArchClass(id=i, key=key, archs=c["archs"],
                             sass=c["sass"] or (f"asked {c['asked']}" if c["asked"] else ""), hosts=c["hosts"],
                             folded=_fold(c["hosts"]),
                             built_on=builders, pushed=of("push"), reused=of("reuse"), failed=of("fail"),
                             wheel=c["wheel"], sha256=c["sha256"]))
    return out


def _tails(rows: list[HostRow], hostvars: dict[str, dict[str, Any]], logs: dict[str, LogInfo]) -> list[Tail]:
    groups: dict[tuple[str, ...], list[str]] = {}
    cut: dict[tuple[str, ...], bool] = {}
    for r in rows:
        log = logs.get(r.name)
        if log is None or not log.tail:
            continue
        tokens = identity_tokens(r.name, hostvars.get(r.name) or {})
        key = tuple(without_identity(line, tokens) for line in log.tail)
        if r.status == "ok":  # tails of hosts that succeeded fold when they differ only in numbers
            key = ("ok",) + tuple(_DIGITS.sub("#", line) for line in key)
        groups.setdefault(key, []).append(r.name)
        cut[key] = cut.get(key, False) or log.tail_cut
    out = []
    by_name = {r.name: r for r in rows}
    for i, (key, names) in enumerate(groups.items(), 1):
        for n in names:
            by_name[n].tail_id = i
        first = logs[names[0]].tail
        # one host's tail as it is; a shared one with <host> for each host's name, numbers of the first
        lines = first if len(names) == 1 else [without_identity(x, identity_tokens(names[0], hostvars.get(
            names[0]) or {})) for x in first]
        out.append(Tail(id=i, hosts=names, folded=_fold(names), lines=list(lines), cut=cut[key],
                        numbers_differ=key[:1] == ("ok",) and len(names) > 1 and len(
                            {tuple(logs[n].tail) for n in names[:50]}) > 1))
    return out
