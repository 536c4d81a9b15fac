"""``fleetctl deploy`` and ``fleetctl verify``: run a playbook with live, host-prefixed output."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .cli import EXIT_FAILED, Context, FiniteFloatRange, fail_input, forks_option, json_option, accept_option, limit_option, main, \
    pass_ctx, run_async, timeout_option
from .errors import InputError
from .paths import resolve_default
from .render import LinePrinter
from .status import Status

STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "dim", "unreachable": "bold magenta"}


class LiveOutput(LinePrinter):
    """Prints every host line as it arrives (``host | line``, see :class:`LinePrinter`), task
    starts and results (to ``stream``)."""

    line = LinePrinter.__call__

    def task(self, host: str, index: int, total: int, name: str) -> None:
        text = self.prefix(host)
        text.append(f"[task {index}/{total}] {name}", style="bold")
        self.console.print(text)

    def result(self, host: str, name: str, res) -> None:
        text = self.prefix(host)
        text.append(f"{res.status.value.upper():11}", style=STYLE.get(res.status.value, ""))
        text.append(f" {name}" + (f": {res.msg}" if res.msg else ""))
        self.console.print(text)

    def note(self, host: str, message: str) -> None:
        text = self.prefix(host)
        text.append(f"note: {message}", style="yellow")
        self.console.print(text)


FOLD_THRESHOLD = 8
_ERRORISH = re.compile(r"error|fatal|failed|warning|killed|traceback|not found|unsupported", re.I)
MAX_FOLDED_LINES = 200


class FoldedOutput:
    """Output for many hosts: one progress row per host (task i/n, ninja's [k/N]) while the run
    goes, then identical error-like lines, notes and failures printed once each with the folded
    host set, ClusterShell style (``gpu[03,07-09]: nvcc fatal : ...``). Per-host logs stay
    complete in the run record either way."""

    def __init__(self, hosts: list[str], stream) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.progress = Progress(TextColumn("{task.fields[host]}", style="cyan"), BarColumn(),
                                 TextColumn("{task.description}"), console=self.console, transient=False)
        self.rows = {h: self.progress.add_task("waiting", host=h, total=None) for h in hosts}
        self.lines: dict[str, list[str]] = {}
        self.notes: dict[str, list[str]] = {}
        self.failures: dict[str, list[str]] = {}
        self.progress.start()

    def line(self, host: str, line) -> None:
        text = line.text.strip()
        if text and _ERRORISH.search(text) and (text in self.lines or len(self.lines) < MAX_FOLDED_LINES):
            self.lines.setdefault(text, [])
            if host not in self.lines[text]:
                self.lines[text].append(host)

    def task(self, host: str, index: int, total: int, name: str) -> None:
        self.progress.update(self.rows[host], description=f"task {index}/{total} {name}", total=total,
                             completed=index - 1)

    def ninja(self, host: str, done: int, total: int) -> None:
        row = self.progress.tasks[self.rows[host]]
        base = row.description.split(" [", 1)[0]
        self.progress.update(self.rows[host], description=f"{base} [{done}/{total}]")

    def result(self, host: str, name: str, res) -> None:
        if res.status.is_failure:
            self.failures.setdefault(f"{res.status.value.upper()} {name}: {res.msg}", []).append(host)
            self.progress.update(self.rows[host], description=f"{res.status.value} at {name}")

    def note(self, host: str, message: str) -> None:
        self.notes.setdefault(message, []).append(host)

    def finish(self) -> None:
        from .inventory import fold_hosts

        self.progress.stop()
        for title, groups in (("notes", self.notes), ("error and warning lines", self.lines),
                              ("failures", self.failures)):
            if groups:
                self.console.print(Text(title + ":", style="bold"))
                for text, hosts in groups.items():
                    self.console.print(f"{fold_hosts(hosts)}: {text}", markup=False)


def summary_table(results: dict[str, dict[str, Any]], run_id: str, *, fold: bool = False) -> Table:
    """Host, status per task, duration, and the first error line of each failure. With ``fold``,
    hosts with the same statuses and error share one row under their folded host set."""
    from .inventory import fold_hosts

    table = Table(title=f"run {run_id}")
    table.add_column("hosts" if fold else "host", style="cyan")
    table.add_column("status")
    table.add_column("tasks")
    table.add_column("duration s", justify="right")
    table.add_column("first error")
    rows: dict[tuple, list[tuple[str, float]]] = {}
    for host, r in results.items():
        marks = "".join(t["status"][0].upper() for t in r.get("tasks", []))
        key = (r.get("status", "?"), marks, (r.get("error") or "")[:160]) if fold else (host,)
        rows.setdefault(key, []).append((host, float(r.get("duration_s", 0) or 0)))
    for key, members in rows.items():
        host = members[0][0]
        r = results[host]
        marks = Text()
        for t in r.get("tasks", []):
            marks.append(t["status"][0].upper(), style=STYLE.get(t["status"], ""))
        status = r.get("status", "?")
        durations = [d for _, d in members]
        dur = f"{durations[0]:.1f}" if len(durations) == 1 else f"{min(durations):.1f}-{max(durations):.1f}"
        table.add_row(fold_hosts([h for h, _ in members]) if fold else host, Text(status, style=STYLE.get(status, "")),
                      marks, dur, (r.get("error") or "")[:160])
    return table


def _run_play(obj: Context, playbook_path: str, pattern: str | None, limit: str | None, forks: int, dry_run: bool,
              as_json: bool, tags: str | None, skip_tags: str | None, force: bool, extra: tuple[str, ...],
              accept_new_host_keys: bool, connect_timeout: float, kind: str, serial: str | None = None,
              max_fail_percentage: float | None = None, retry_failed: str | None = None,
              build: str | None = None, phase_timeout: tuple[str, ...] = (), plan: bool = False,
              output: str = "auto") -> None:
    from .lock import HostLocks, HostsLocked
    from .play import Listener, PlayOptions, failed_hosts, run_playbook
    from .playbook import load_playbook
    from .runrecord import open_record, retry_hosts, write_retry_set

    path = resolve_default(playbook_path)
    if not path.exists():
        raise InputError("playbook file not found", file=str(path))
    playbook = load_playbook(str(path))
    pattern = pattern or playbook.hosts
    if not pattern:
        raise InputError("no hosts: give --hosts or set 'hosts' in the playbook", file=str(path))
    if retry_failed is not None:
        try:
            from_run, names = retry_hosts(None if retry_failed == "last" else retry_failed)
        except FileNotFoundError:
            from .runrecord import runs_root

            what = "no run has left a retry set" if retry_failed == "last" else f"no run {retry_failed!r}"
            raise InputError(f"--retry-failed: {what} in {runs_root()}") from None
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"--retry-failed: no retry set to read ({exc})") from None
        if not names:
            click.echo(f"run {from_run} left no failed host: nothing to retry", err=True)
            raise click.exceptions.Exit(0)
        limit = ",".join(names) if not limit else f"{limit}:&{','.join(names)}"
    inv, hosts = obj.select(pattern, limit, forks=forks)
    phase_timeouts = _phase_timeouts(phase_timeout)
    serial_items = _split(serial)
    for item in serial_items:
        m = re.fullmatch(r"([0-9]+)(%?)", item)
        if not (m and int(m[1]) > 0 and (not m[2] or int(m[1]) <= 100)):
            raise InputError(f"--serial: want host counts or percentages up to 100%, like 1,10%,100%; got {item!r}")
    extra_vars: dict[str, Any] = {}
    for item in extra:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise InputError(f"-e/--extra-var wants NAME=VALUE, got {item!r}")
        extra_vars[name] = value
    known = set.intersection(*(set(h.vars) for h in hosts)) if hosts else set()
    playbook.check_undefined(known | set(extra_vars))

    if plan:
        return _print_plan(playbook, hosts, kind, as_json, PlayOptions(
            forks=forks, extra_vars=extra_vars, connect_timeout_s=connect_timeout))
    record = open_record(kind)
    locks = HostLocks([h.name for h in hosts], record.run_id)
    if not dry_run:
        try:
            locks.acquire()
        except HostsLocked as exc:
            record.finish("refused")
            click.echo(f"fleetctl: {exc}", err=True)
            raise click.exceptions.Exit(EXIT_FAILED) from None
        for host, prev in locks.stale:
            click.echo(f"fleetctl: warning: {host}: taking over the stale lock of run {prev.get('run_id')} "
                       f"(pid {prev.get('pid')} is gone)", err=True)
            record.event("lock.stale_taken_over", host=host, previous=prev)
    record.data["inventory"] = {"path": str(inv.path), "hosts": {h.name: dict(h.vars) for h in hosts}}
    record.data["pattern"] = pattern
    stream = sys.stderr if as_json else sys.stdout
    folded = output == "folded" or (output == "auto" and len(hosts) > FOLD_THRESHOLD)
    live = FoldedOutput([h.name for h in hosts], stream) if folded else LiveOutput([h.name for h in hosts], stream)
    red = record.redactor
    # Live lines go through a valve: printing never slows the hosts down (the log keeps every byte).
    from .livevalve import LiveValve

    valve = LiveValve(log_hint=lambda h: f"fleetctl logs {record.run_id} {h}")
    listener = Listener(
        on_line=valve.wrap_line(lambda h, ln: live.line(h, type(ln)(ln.stream, red.bytes(ln.data)))),
        on_task=valve.wrap(lambda h, i, n, name: live.task(h, i, n, red.text(name))),
        on_result=valve.wrap(lambda h, name, res: live.result(h, red.text(name), _redacted_result(res, red))),
        on_note=valve.wrap(live.note), on_progress=valve.wrap(live.ninja) if hasattr(live, "ninja") else None)
    opts = PlayOptions(forks=forks, dry_run=dry_run, force=force, tags=tuple(_split(tags)),
                       skip_tags=tuple(_split(skip_tags)), extra_vars=extra_vars,
                       accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout,
                       serial=serial_items, max_fail_percentage=max_fail_percentage, build=build,
                       phase_timeouts=phase_timeouts, lock_hosts=not dry_run)
    live.console.print(f"run {record.run_id}: {playbook.name} on {len(hosts)} host(s); record in {record.dir}")
    try:
        results = run_async(run_playbook(playbook, hosts, record=record, opts=opts, listener=listener))
    except BaseException:
        record.data["failed_hosts"] = sorted(h for h, r in record.data["hosts"].items()
                                             if r.get("status") != "ok")
        record.finish("interrupted")
        raise
    finally:
        valve.close()
        locks.release()
        if folded:
            live.finish()
    bad = failed_hosts(results)
    record.data["failed_hosts"] = bad
    if not dry_run:
        write_retry_set(record.run_id, bad)
    record.finish("failed" if bad else "ok")
    if record.data.get("stopped"):
        live.console.print(Text(f"stopped: {record.data['stopped']}", style="bold red"))
    if dry_run:
        for host, r in results.items():
            live.console.print(Text(f"--- {host}: planned commands", style="bold"))
            for t in r.get("tasks", []):
                for p in t.get("data", {}).get("planned", []):
                    live.console.print(f"  [{t['name']}] " + json.dumps(red.obj(p)), markup=False, highlight=False)
    if as_json:
        from .render import print_json

        print_json(red.obj({"run_id": record.run_id, "status": "failed" if bad else "ok", "hosts": results}))
    else:
        live.console.print(summary_table(red.obj(results), record.run_id, fold=folded))
        changed = [t for r in results.values() for t in r.get("tasks", []) if t["status"] == "changed"]
        if not bad and not changed and not dry_run:
            live.console.print("nothing changed: every host was already up to date")
        classes = [] if dry_run else build_classes(results)
        if classes:
            live.console.print("build classes:")
            for line in classes:
                live.console.print(f"  {line}", markup=False, highlight=False)
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


def build_classes(results: dict[str, dict[str, Any]]) -> list[str]:
    """One line per arch class, hosts folded the way ClusterShell prints node sets:
    ``gpu[01-12] sm_120a cu13.0 torch2.12 cp312 (built on gpu01)``."""
    from .inventory import fold_hosts

    classes: dict[str, dict[str, Any]] = {}
    for host, r in results.items():
        for t in r.get("tasks", []):
            data = t.get("data") or {}
            if t.get("action") != "build_wheel" or not data.get("key"):
                continue
            c = classes.setdefault(data["key"], {"hosts": [], "data": data, "builder": None})
            c["hosts"].append(host)
            if not data.get("pushed_from") and not data.get("reused"):
                c["builder"] = host
    lines = []
    for c in classes.values():
        d = c["data"]
        inputs = d.get("inputs") or {}
        torch = ".".join(str(inputs.get("torch") or "?").split("+")[0].split(".")[:2])
        sass = " ".join(d.get("sass") or [f"arch {d.get('archs')}"])
        how = f"built on {c['builder']}" if c["builder"] else "reused"
        lines.append(f"{fold_hosts(c['hosts'])} {sass} cu{inputs.get('cuda')} torch{torch} {inputs.get('python')} ({how})")
    return lines


def _redacted_result(res, red):
    from dataclasses import replace

    return replace(res, msg=red.text(res.msg))


def _print_plan(playbook, hosts, kind: str, as_json: bool, opts) -> None:
    """Print per host build / push / reinstall / skip and which inputs changed; exit 0 (1 if a host
    could not be planned)."""
    from .plan import plan_hosts
    from .runrecord import guarded, open_record

    record = open_record(f"{kind}-plan")
    results = guarded(record, lambda: run_async(plan_hosts(playbook, hosts, record=record, opts=opts)))
    bad = [h for h, r in results.items() if r.get("status") != "ok"]
    record.data["hosts"] = results
    record.finish("failed" if bad else "ok")
    if as_json:
        from .render import print_json

        print_json(record.redactor.obj(results))
    else:
        console = Console(highlight=False)
        table = Table(title=f"plan: {playbook.name}")
        for col in ("host", "task", "action", "arch list", "class", "changed inputs"):
            table.add_column(col)
        for host, r in results.items():
            if r.get("status") != "ok":
                table.add_row(host, "", Text(r.get("status", "?"), style="red"), "", "", r.get("error", ""))
            for b in r.get("builds", []):
                table.add_row(host, b["task"], Text(b["action"], style={"skip": "green", "push": "cyan"}.get(
                    b["action"], "yellow")), str(b.get("archs", "")), b.get("key", ""), ", ".join(b["changed"]))
        console.print(table)
        if results and all(b["action"] == "skip" for r in results.values() for b in r.get("builds", [])) and not bad:
            console.print("nothing changed: a deploy would rebuild and reinstall nothing (--force overrides)")
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


def _phase_timeouts(items: tuple[str, ...]) -> dict[str, float]:
    """``--phase-timeout build=3600`` (repeatable) -> ``{"build": 3600.0}``; bad input is InputError."""
    import math

    from .play import PHASES

    out: dict[str, float] = {}
    for item in items:
        phase, sep, value = item.partition("=")
        if not sep or phase not in PHASES:
            raise InputError(f"--phase-timeout: want PHASE=SECONDS with PHASE one of {', '.join(PHASES)}, got {item!r}")
        try:
            seconds = float(value)
        except ValueError:
            seconds = float("nan")
        if not math.isfinite(seconds) or seconds <= 0:
            raise InputError(f"--phase-timeout {phase}: want a positive number of seconds, got {value!r}")
        out[phase] = seconds
    return out


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def play_options(fn):
    for opt in reversed([
        click.option("--hosts", "pattern", default=None, help="Host pattern (default: the playbook's hosts)."),
        limit_option, forks_option,
        click.option("--dry-run", is_flag=True, help="Print per host the commands and environment; run nothing."),
        json_option,
        click.option("--tags", default=None, help="Only tasks with these tags (comma separated)."),
        click.option("--skip-tags", default=None, help="Skip tasks with these tags."),
        click.option("--force", is_flag=True, help="Rebuild and reinstall even when nothing changed."),
        click.option("-e", "--extra-var", "extra", multiple=True, help="NAME=VALUE, overrides play vars."),
        accept_option, timeout_option,
        click.option("--serial", default=None, help="Rolling batches: sizes or percentages, e.g. 1,10%,100%."),
        click.option("--max-fail-percentage", type=FiniteFloatRange(0, 100), default=None,
                     help="Stop starting batches once more than this percent of a batch failed."),
        click.option("--output", type=click.Choice(["auto", "lines", "folded"]), default="auto", show_default=True,
                     help=f"lines: every host line as it arrives; folded: a progress row per host, then identical "
                          f"lines folded by host set; auto: folded above {FOLD_THRESHOLD} hosts."),
        click.option("--plan", is_flag=True, help="Show per host build / push / reinstall / skip and which inputs changed."),
        click.option("--phase-timeout", multiple=True, metavar="PHASE=SECONDS",
                     help="Deadline for a phase: connect, facts, upload, build, install, verify, command."),
        click.option("--build", type=click.Choice(["once", "each"]), default=None,
                     help="once: one build per arch class, pushed to the others (default); each: every host builds."),
        click.option("--retry-failed", is_flag=False, flag_value="last", default=None, metavar="[RUN_ID]",
                     help="Only the hosts that failed in RUN_ID (default: the last run)."),
    ]):
        fn = opt(fn)
    return fn


@main.command()
@click.option("--playbook", "playbook_path", default="playbooks/fp4-kernels.yaml", show_default=True)
@play_options
@pass_ctx
def deploy(obj: Context, playbook_path: str, **kw: Any) -> None:
    """Build, install and verify the FP4 kernels for each host's own SM (or run --playbook)."""
    _run_play(obj, playbook_path, kind="deploy", **kw)


@main.command()
@click.option("--playbook", "playbook_path", default="playbooks/verify.yaml", show_default=True)
@play_options
@pass_ctx
def verify(obj: Context, playbook_path: str, **kw: Any) -> None:
    """Verify the installed kernels on each host (the verify playbook alone)."""
    _run_play(obj, playbook_path, kind="verify", **kw)


__all__ = ["deploy", "verify", "fail_input", "Status"]
