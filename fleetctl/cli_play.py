"""``fleetctl deploy`` and ``fleetctl verify``: run a playbook with live, host-prefixed output."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .cli import EXIT_FAILED, Context, fail_input, forks_option, json_option, accept_option, limit_option, main, \
    pass_ctx, run_async, timeout_option
from .errors import InputError
from .paths import resolve_default
from .status import Status

STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "dim", "unreachable": "bold magenta"}


class LiveOutput:
    """Prints every host line as it arrives (``host | line``), task starts and results (to ``stream``)."""

    def __init__(self, hosts: list[str], stream) -> None:
        self.width = max((len(h) for h in hosts), default=4)
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.last_progress: dict[str, tuple[int, int]] = {}

    def _prefix(self, host: str) -> Text:
        return Text(f"{host:<{self.width}} | ", style="bold cyan")

    def line(self, host: str, line) -> None:
        text = self._prefix(host)
        text.append(line.text, style="dim" if line.stream == "stderr" else "")
        self.console.print(text, markup=False)

    def task(self, host: str, index: int, total: int, name: str) -> None:
        text = self._prefix(host)
        text.append(f"[task {index}/{total}] {name}", style="bold")
        self.console.print(text)

    def result(self, host: str, name: str, res) -> None:
        text = self._prefix(host)
        text.append(f"{res.status.value.upper():11}", style=STYLE.get(res.status.value, ""))
        text.append(f" {name}" + (f": {res.msg}" if res.msg else ""))
        self.console.print(text)

    def note(self, host: str, message: str) -> None:
        text = self._prefix(host)
        text.append(f"note: {message}", style="yellow")
        self.console.print(text)


def summary_table(results: dict[str, dict[str, Any]], run_id: str) -> Table:
    """Host, status per task, duration, and the first error line of each failure."""
    table = Table(title=f"run {run_id}")
    table.add_column("host", style="cyan")
    table.add_column("status")
    table.add_column("tasks")
    table.add_column("duration s", justify="right")
    table.add_column("first error")
    for host, r in results.items():
        marks = Text()
        for t in r.get("tasks", []):
            marks.append(t["status"][0].upper(), style=STYLE.get(t["status"], ""))
        status = r.get("status", "?")
        table.add_row(host, Text(status, style=STYLE.get(status, "")), marks, f"{r.get('duration_s', 0):.1f}",
                      (r.get("error") or "")[:160])
    return table


def _run_play(obj: Context, playbook_path: str, pattern: str | None, limit: str | None, forks: int, dry_run: bool,
              as_json: bool, tags: str | None, skip_tags: str | None, force: bool, extra: tuple[str, ...],
              accept_new_host_keys: bool, connect_timeout: float, kind: str) -> None:
    from .play import Listener, PlayOptions, run_playbook
    from .playbook import load_playbook
    from .runrecord import RunRecord

    path = resolve_default(playbook_path)
    if not path.exists():
        raise InputError("playbook file not found", file=str(path))
    playbook = load_playbook(str(path))
    pattern = pattern or playbook.hosts
    if not pattern:
        raise InputError("no hosts: give --hosts or set 'hosts' in the playbook", file=str(path))
    inv, hosts = obj.select(pattern, limit)
    extra_vars: dict[str, Any] = {}
    for item in extra:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise InputError(f"-e/--extra-var wants NAME=VALUE, got {item!r}")
        extra_vars[name] = value
    known = set.intersection(*(set(h.vars) for h in hosts)) if hosts else set()
    playbook.check_undefined(known | set(extra_vars))

    record = RunRecord(kind)
    record.data["inventory"] = {"path": str(inv.path), "hosts": {h.name: dict(h.vars) for h in hosts}}
    record.data["pattern"] = pattern
    stream = sys.stderr if as_json else sys.stdout
    live = LiveOutput([h.name for h in hosts], stream)
    listener = Listener(on_line=live.line, on_task=live.task, on_result=live.result, on_note=live.note)
    opts = PlayOptions(forks=forks, dry_run=dry_run, force=force, tags=tuple(_split(tags)),
                       skip_tags=tuple(_split(skip_tags)), extra_vars=extra_vars,
                       accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout)
    live.console.print(f"run {record.run_id}: {playbook.name} on {len(hosts)} host(s); record in {record.dir}")
    try:
        results = run_async(run_playbook(playbook, hosts, record=record, opts=opts, listener=listener))
    except BaseException:
        record.finish("interrupted")
        raise
    bad = [h for h, r in results.items() if r.get("status") in ("failed", "unreachable")]
    record.finish("failed" if bad else "ok")
    if dry_run:
        for host, r in results.items():
            live.console.print(Text(f"--- {host}: planned commands", style="bold"))
            for t in r.get("tasks", []):
                for p in t.get("data", {}).get("planned", []):
                    live.console.print(f"  [{t['name']}] " + json.dumps(p), markup=False, highlight=False)
    if as_json:
        from .render import print_json

        print_json({"run_id": record.run_id, "status": "failed" if bad else "ok", "hosts": results})
    else:
        live.console.print(summary_table(results, record.run_id))
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


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
