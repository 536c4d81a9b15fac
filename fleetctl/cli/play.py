"""``fleetctl deploy`` and ``fleetctl verify``: run a playbook, plan it (``--plan``) or show its steps
(``--dry-run``); all three run the same planners (see :mod:`fleetctl.engine.runner`)."""

from __future__ import annotations

import json
import math
import re
import sys
from difflib import get_close_matches
from typing import Any

import click
from rich.text import Text

from ..errors import InputError
from ..util.paths import resolve_default
from .adhoc import _record, finish
from .app import (EXIT_FAILED, Context, FiniteFloatRange, accept_option, forks_option, json_option, limit_option,
                  main, metrics_observer, pass_ctx, run_async, timeout_option)

#: Above this many hosts the terminal folds output by host set (``--output auto``).
FOLD_THRESHOLD = 8
_SPECIAL_TAGS = ("all", "always", "never", "tagged", "untagged")


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _check_tags(playbook: Any, option: str, tags: list[str]) -> None:
    """A tag no task has is exit 2 with a did-you-mean (a misspelled tag must not run nothing)."""
    known = {t for task in (*playbook.tasks, *playbook.handlers) for t in task.tags} | set(_SPECIAL_TAGS)
    for tag in tags:
        if tag not in known:
            hint = get_close_matches(tag, sorted(known), n=1, cutoff=0.6)
            tail = f"; did you mean '{hint[0]}'?" if hint else ""
            raise InputError(f"{option}: no task has the tag '{tag}' (tags: {', '.join(sorted(known - set(_SPECIAL_TAGS))) or 'none'}){tail}",
                             file=str(playbook.path))


def _phase_timeouts(items: tuple[str, ...]) -> dict[str, float]:
    """``--phase-timeout build=3600`` (repeatable) -> ``{"build": 3600.0}``; bad input is InputError."""
    from ..tasks.base import PHASES

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


def _play_sources(obj: Context, path: Path) -> tuple[list[str], str]:
    """The play's identity for its retry set: inventory sources as resolved, and the playbook."""
    return [str(resolve_default(p)) for p in obj.inventory_paths], str(path)


def _retry_names(retry_failed: str, key: str, playbook: str) -> list[str]:
    """The hosts ``--retry-failed`` selects: those the run (given, or the play's last) left failed.

    Raises:
        InputError: no such run, or no retry set of this play.
        click.exceptions.Exit: (0) the run left no failed host.
    """
    from ..reporting.history import retry_hosts, runs_root

    try:
        from_run, names = retry_hosts(None if retry_failed == "last" else retry_failed, key=key)
    except FileNotFoundError:
        what = (f"no run of {playbook} on this inventory has left a retry set" if retry_failed == "last"
                else f"no run {retry_failed!r}")
        raise InputError(f"--retry-failed: {what} in {runs_root()}") from None
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"--retry-failed: no retry set to read ({exc})") from None
    if not names:
        click.echo(f"run {from_run} left no failed host: nothing to retry", err=True)
        raise click.exceptions.Exit(0)
    return names


def _run_play(obj: Context, playbook_path: str, *, kind: str, pattern: str | None = None, limit: str | None = None,
              forks: int = 50, dry_run: bool = False, as_json: bool = False, tags: str | None = None,
              skip_tags: str | None = None, force: bool = False, extra: tuple[str, ...] = (),
              accept_new_host_keys: bool = False, connect_timeout: float = 30.0, serial: str | None = None,
              max_fail_percentage: float | None = None, retry_failed: str | None = None, build: str | None = None,
              phase_timeout: tuple[str, ...] = (), plan: bool = False, output: str = "auto",
              metrics_file: str | None = None, staged: bool = False) -> None:
    from ..engine.deadlines import Deadlines
    from ..engine.runner import PlayOptions, run_playbook
    from ..playbook import load_playbook

    if plan and dry_run:
        raise InputError("--plan and --dry-run: give one (--plan prints each host's decisions; --dry-run runs the "
                         "play's probes and prints the commands it would run)")
    path = resolve_default(playbook_path)
    if not path.exists():
        raise InputError("playbook file not found", file=str(path))
    playbook = load_playbook(str(path))
    if staged:
        from ..playbook.staged import staged_playbook

        playbook = staged_playbook(playbook)
        extra = (*extra, "staged=true")
    from ..reporting.history import play_key

    play_inventory, play_file = _play_sources(obj, path)
    key = play_key(play_inventory, play_file)
    if retry_failed is not None:
        # The failed run's hosts: within --hosts when given, else they are the selection (the
        # playbook's own `hosts` may not name them: that run may have had --hosts).
        names = ",".join(_retry_names(retry_failed, key, play_file))
        if pattern:
            limit = names if not limit else f"{limit}:&{names}"
        else:
            pattern = names
    pattern = pattern or playbook.hosts
    if not pattern:
        raise InputError("no hosts: give --hosts or set 'hosts' in the playbook", file=str(path))
    tag_list, skip_list = _split(tags), _split(skip_tags)
    _check_tags(playbook, "--tags", tag_list)
    _check_tags(playbook, "--skip-tags", skip_list)
    from .extravars import parse_extra_vars

    extra_vars = parse_extra_vars(extra)
    inv, hosts = obj.select(pattern, limit, forks=forks, extra_vars=extra_vars)
    serial_items = _split(serial)
    for item in serial_items:
        m = re.fullmatch(r"([0-9]+)(%?)", item)
        if not (m and int(m[1]) > 0 and (not m[2] or int(m[1]) <= 100)):
            raise InputError(f"--serial: want host counts or percentages up to 100%, like 1,10%,100%; got {item!r}")
    known = set.intersection(*(set(h.vars) for h in hosts)) if hosts else set()
    playbook.check_undefined(known | set(extra_vars))
    deadlines = Deadlines(overrides=_phase_timeouts(phase_timeout), connect_s=connect_timeout)
    mode = "plan" if plan else "dry-run" if dry_run else "apply"

    metrics = metrics_observer(metrics_file, mode)

    stream = sys.stderr if as_json or plan else sys.stdout
    folded = output == "folded" or (output == "auto" and len(hosts) > FOLD_THRESHOLD)
    live = _terminal(hosts, stream, folded, obj.verbose) if not plan else None
    run, record, observers = _record(kind, obj, extra=[live, metrics])
    run.mode, run.pattern = mode, pattern
    run.inventory = {"path": str(inv.path), "hosts": {h.name: dict(h.vars) for h in hosts}}
    locks = None
    if mode == "apply":
        locks = _take_locks(hosts, run, observers)
    opts = PlayOptions(host_lock=mode == "apply", forks=forks, mode=mode, force=force, tags=tuple(tag_list),
                       skip_tags=tuple(skip_list),
                       extra_vars=extra_vars, accept_new_host_keys=accept_new_host_keys, deadlines=deadlines,
                       ssh_options=obj.ssh_options,
                       serial=serial_items, max_fail_percentage=max_fail_percentage, build_each=build == "each",
                       refused=dict(locks.refused) if locks is not None else {})
    if live is not None:
        live.console.print(f"run {run.run_id}: {playbook.name} on {len(hosts)} host(s)"
                           f"{' (dry run: nothing is changed)' if dry_run else ''}; record in {record.dir}")
    try:
        run_async(run_playbook(playbook, hosts, run=run, observers=observers, opts=opts))
    except BaseException:
        run.failed_hosts = sorted(h for h, r in run.hosts.items() if r.status != "ok")
        if mode == "apply":  # an interrupted deploy's unfinished hosts are what --retry-failed takes
            from ..reporting.history import write_retry_set

            interrupted = sorted(set(run.failed_hosts) | {h.name for h in hosts if h.name not in run.hosts})
            write_retry_set(run.run_id, interrupted, key=key, inventory=play_inventory, playbook=play_file)
        finish(run, observers, "interrupted")
        raise
    finally:
        if locks is not None:
            locks.release()
    bad = run.failed_hosts
    if mode == "apply":
        from ..reporting.history import write_retry_set

        write_retry_set(run.run_id, bad, key=key, inventory=play_inventory, playbook=play_file)
    finish(run, observers, "failed" if bad else "ok")
    results = run.as_json()["hosts"]
    if plan:
        return _print_plan(playbook, run, results, as_json)
    console = live.console
    if run.stopped:
        console.print(Text(f"stopped: {run.stopped}", style="bold red"))
    if dry_run:
        for host, r in results.items():
            console.print(Text(f"--- {host}: planned commands", style="bold"))
            for t in r.get("tasks", []):
                for p in t.get("planned", []):
                    console.print(f"  [{t['name']}] " + json.dumps(p), markup=False, highlight=False)
    if as_json:
        from ..reporting.terminal import print_json

        print_json({"run_id": run.run_id, "mode": mode, "status": "failed" if bad else "ok", "hosts": results})
    else:
        from ..reporting.tables import build_classes, print_summary

        print_summary(console, results, run.run_id, fold=folded, causes_below=not folded)
        changed = [t for r in results.values() for t in r.get("tasks", []) if t["status"] == "changed"]
        if not bad and not changed and not dry_run:
            console.print("verified: every host passed, nothing changed" if kind == "verify"
                          else "nothing changed: every host was already up to date")
        classes = [] if dry_run else build_classes(results)
        if classes:
            console.print("build classes:")
            for line in classes:
                console.print(f"  {line}", markup=False, highlight=False)
        if bad:
            failed_pointer(console, run.run_id, bad)
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


def failed_pointer(console, run_id: str, bad: list[str]) -> None:
    """The end of a failed run: where every line of a failed host is, and the report."""
    console.print(f"every line a host printed: fleetctl logs {run_id} {bad[0]}", markup=False, highlight=False)
    console.print(f"the run as one HTML page: fleetctl report {run_id} --html report.html", markup=False,
                  highlight=False)


def _terminal(hosts, stream, folded: bool, verbose: int = 0):
    from ..inventory import fold_hosts
    from ..reporting.terminal import FoldedOutput, LiveOutput

    from ..reporting.livevalve import LiveValve, ValvedObserver

    names = [h.name for h in hosts]
    inner = FoldedOutput(names, stream, fold_hosts, verbose) if folded else LiveOutput(names, stream, verbose)
    # printing goes through a valve: a chatty build is never slowed by the terminal (the log keeps
    # every byte)
    return ValvedObserver(inner, LiveValve(log_hint=lambda h: f"fleetctl logs RUN {h}"))


def _take_locks(hosts, run, observers):
    """The controller-side lock of every host's machine (per user, :mod:`fleetctl.engine.machinelock`). A host
    whose machine another live run holds fails at once, naming that run (see ``PlayOptions.refused``);
    the others run."""
    from ..engine.machinelock import HostLocks, machine_of

    locks = HostLocks({h.name: machine_of(h) for h in hosts}, run.run_id).acquire()
    for host, reason in locks.refused.items():
        click.echo(f"fleetctl: {host} {reason}; {host} fails, the other hosts run", err=True)
        observers.emit("lock.refused", host, path=str(locks.paths[host]), error=reason)
    for host, prev in locks.stale:
        click.echo(f"fleetctl: warning: {host}: taking over the stale lock of run {prev.get('run_id')} "
                   f"(pid {prev.get('pid')} is gone)", err=True)
        observers.emit("lock.stale_taken_over", host, previous=prev)
    return locks


def _slurm_time_warnings(run, rows: dict) -> dict[str, str]:
    """Hosts whose ``slurm_time`` is shorter than their class's last build took (run records)."""
    host_vars = (run.inventory or {}).get("hosts") or {}
    if not any("slurm_time" in v for v in host_vars.values()):
        return {}
    from ..reporting.history import list_runs
    from ..reporting.slurm_time import last_builds, slurm_time_warnings

    return slurm_time_warnings(rows, host_vars, last_builds(list_runs()))


def _print_plan(playbook, run, results: dict, as_json: bool) -> None:
    """``--plan``: per host build / push / reinstall / skip and which inputs changed; exit 1 when a
    host would fail (a preflight problem) or could not be planned."""
    from rich.console import Console

    from ..reporting.tables import plan_classes, plan_rows, print_plan_table
    from ..reporting.terminal import print_json

    rows = plan_rows(results)
    bad = [h for h, r in rows.items() if r.get("status") != "ok"]
    warnings = _slurm_time_warnings(run, rows)
    for host, warning in warnings.items():
        rows[host].setdefault("warnings", []).append(warning)
    if as_json:
        print_json(rows)
    else:
        console = Console(highlight=False)
        print_plan_table(console, f"plan: {playbook.name}", rows)
        classes = plan_classes(rows)
        if classes:
            console.print("build classes:")
            for line in classes:
                console.print(f"  {line}", markup=False, highlight=False)
        for host, warning in warnings.items():
            console.print(f"[yellow]warning[/yellow]: {host}: {warning}")
        if rows and not bad and all(b["action"] == "skip" for r in rows.values() for b in r.get("builds", [])):
            console.print("nothing changed: a deploy would rebuild and reinstall nothing (--force overrides)")
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


_common = [
    click.option("--hosts", "pattern", default=None, help="Host pattern (default: the playbook's hosts)."),
    limit_option, forks_option, json_option,
    click.option("-e", "--extra-var", "extra", multiple=True, metavar="NAME=VALUE|@FILE",
                 help="Overrides play vars; @FILE reads a YAML mapping of them (keep secrets there, mode 0600)."),
    click.option("--metrics-file", default=None, metavar="PATH",
                 help="At the end, write Prometheus metrics to PATH (*.prom, node_exporter's textfile "
                      "collector), atomically."),
    accept_option, timeout_option,
    click.option("--output", type=click.Choice(["auto", "lines", "folded"]), default="auto", show_default=True,
                 help=f"lines: every host line as it arrives; folded: a progress row per host, then identical "
                      f"lines folded by host set; auto: folded above {FOLD_THRESHOLD} hosts."),
    click.option("--phase-timeout", multiple=True, metavar="PHASE=SECONDS",
                 help="Deadline for a phase: connect, facts, upload, build, install, verify, command."),
    click.option("--dry-run", is_flag=True, help="Print per host the commands and environment; change nothing."),
]
_deploy_only = [
    click.option("--plan", is_flag=True, help="Per host: build / push / reinstall / skip, which inputs changed, "
                                              "and what would fail; change nothing."),
    click.option("--tags", default=None, help="Only tasks with these tags (comma separated)."),
    click.option("--skip-tags", default=None, help="Skip tasks with these tags."),
    click.option("--force", is_flag=True, help="Rebuild and reinstall even when nothing changed."),
    click.option("--serial", default=None, help="Rolling batches: sizes or percentages, e.g. 1,10%,100%."),
    click.option("--max-fail-percentage", type=FiniteFloatRange(0, 100), default=None,
                 help="Stop starting batches once more than this percent of a batch failed."),
    click.option("--build", type=click.Choice(["once", "each"]), default=None,
                 help="once: one build per arch class, pushed to the others (default); each: every host builds."),
    click.option("--retry-failed", is_flag=False, flag_value="last", default=None, metavar="[RUN_ID]",
                 help="Only the hosts that failed in RUN_ID (default: the last run)."),
    click.option("--staged", is_flag=True,
                 help="Run the play in a new version of each host's venv, made beside the live one; switch to it "
                      "only when every task passed (docs/staged.md). Default: install in place."),
]


def _options(opts):
    def deco(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return deco


@main.command()
@click.option("--playbook", "playbook_path", default="playbooks/fp4-kernels.yaml", show_default=True,
              help="The playbook to run (docs/reference/playbook.md); a relative path not found here is the checkout's.")
@_options(_common + _deploy_only)
@pass_ctx
def deploy(obj: Context, playbook_path: str, **kw: Any) -> None:
    """Build, install and verify the FP4 kernels for each host's own SM (or run --playbook)."""
    _run_play(obj, playbook_path, kind="deploy", **kw)


@main.command()
@click.option("--playbook", "playbook_path", default="playbooks/verify.yaml", show_default=True,
              help="The verification playbook; a relative path not found here is the checkout's.")
@_options(_common)
@pass_ctx
def verify(obj: Context, playbook_path: str, **kw: Any) -> None:
    """Verify the installed kernels on each host (the verify playbook alone)."""
    _run_play(obj, playbook_path, kind="verify", **kw)
