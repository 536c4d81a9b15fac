"""``fleetctl deploy`` and ``fleetctl verify``: run a playbook, plan it (``--plan``) or show its steps
(``--dry-run``); all three run the same planners (see :mod:`fleetctl.engine.runner`). The commands
parse their options, call the API's play path (:mod:`fleetctl.api.play`) and print."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.text import Text

from ..errors import InputError
from .app import (EXIT_FAILED, Context, FiniteFloatRange, accept_option, command_line, extra_vars_option,
                  forks_option, given_pattern_option, json_option, limit_option, main, metrics_observer, pass_ctx, phase_timeout_option,
                  timeout_option)
from .runend import RunEnd, record_cut, run_async

from ..reporting.terminal import FOLD_THRESHOLD  # above it, --output auto folds by host set


def run_play_command(obj: Context, playbook_path: str, *, kind: str, pattern: str | None = None,
                     limit: str | None = None, forks: int = 50, dry_run: bool = False, as_json: bool = False,
                     tags: str | None = None, skip_tags: str | None = None, force: bool = False,
                     extra: tuple[str, ...] = (), accept_new_host_keys: bool = False, connect_timeout: float = 30.0,
                     serial: str | None = None, max_fail_percentage: float | None = None,
                     retry_failed: str | None = None, build: str | None = None, phase_timeout: tuple[str, ...] = (),
                     plan: bool = False, output: str = "auto", metrics_file: str | None = None,
                     staged: bool = False) -> None:
    """``deploy``, ``verify`` and ``rollback``: check (:func:`fleetctl.api.play.prepare_play`), run
    (:func:`fleetctl.api.play.run_play`) and print: the live terminal, the plan table, the summary
    or one JSON document. Exits 0 when every host succeeded, else 1; bad input is InputError (2)."""
    from ..api.inputs import CLI_FLAGS
    from ..api.play import NothingToRetry, prepare_play, run_play
    from .extravars import parse_extra_vars

    if plan and dry_run:
        raise InputError("--plan and --dry-run: give one (--plan prints each host's decisions; --dry-run runs the "
                         "play's probes and prints the commands it would run)")
    fleet = obj.fleet
    fleet.accept_new_host_keys, fleet.connect_timeout = accept_new_host_keys, connect_timeout
    mode = "plan" if plan else "dry-run" if dry_run else "apply"
    try:
        prep = prepare_play(fleet, playbook_path, kind=kind, pattern=pattern, limit=limit, mode=mode, forks=forks,
                            tags=tags, skip_tags=skip_tags, force=force, extra_vars=parse_extra_vars(extra),
                            serial=serial, max_fail_percentage=max_fail_percentage, retry_failed=retry_failed,
                            build=build, phase_timeout=phase_timeout, staged=staged, flags=CLI_FLAGS)
    except NothingToRetry as exc:
        click.echo(str(exc), err=True)
        raise click.exceptions.Exit(0) from None
    except InputError:
        if metrics_file and mode == "apply":  # a scheduled job refused: its metrics say so (not green)
            from ..reporting.metrics import write_refused

            write_refused(metrics_file, playbook_path, kind)
        raise
    playbook, hosts = prep.playbook, prep.hosts
    metrics = metrics_observer(metrics_file, mode)

    stream = sys.stderr if as_json or plan else sys.stdout
    folded = output == "folded" or (output == "auto" and len(hosts) > FOLD_THRESHOLD)
    live = _terminal(hosts, stream, folded, obj.verbose) if not plan else None

    records = []

    def started(run, record) -> None:
        records.append(record)
        if live is not None:
            live.console.print(f"run {run.run_id}: {playbook.name} on {len(hosts)} host(s)"
                               f"{' (dry run: nothing is changed)' if dry_run else ''}; record in {record.dir}",
                               markup=False, highlight=False)

    def document(run, result) -> None:  # result None: a signal ended the run
        if plan:
            from ..reporting.terminal import print_json

            print_json(_plan_rows(run)[0])
            return
        from ..reporting.lines import print_json_hosts

        # host by host, the parts run.json holds (encoded once for both): 10,000 hosts' outcomes
        # and facts are never one document in memory
        status = "interrupted" if result is None else "failed" if run.failed_hosts else "ok"
        head = {"run_id": run.run_id, "mode": mode, "status": status,
                **({"record_cut": run.record_cut} if run.record_cut else {})}  # as run.json (recordcut)
        print_json_hosts(head,
                         records[0].host_parts() if records else ())

    ends = RunEnd(document if as_json else None)
    run, _record = run_async(run_play(prep, command=command_line(), observers=[live, metrics, ends],
                                     verbose=obj.verbose, on_start=started), ends)
    bad = run.failed_hosts
    if plan:
        return _print_plan(playbook, run, as_json)
    console = live.console
    if run.stopped:
        console.print(Text(f"stopped: {run.stopped}", style="bold red"))
    if dry_run:
        for host in run.hosts:
            console.print(Text(f"--- {host}: planned commands", style="bold"))
            for t in run.host_json(host, facts=False).get("tasks", []):
                for p in t.get("planned", []):
                    console.print(f"  [{t['name']}] " + json.dumps(p), markup=False, highlight=False)
    if not as_json:  # --json: its document is written when the run ends (fleetctl.cli.runend)
        results = {name: run.host_json(name, facts=False) for name in run.hosts}  # the summary reads no facts
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
            failed_pointer(console, run.run_id, [h for h in bad if not run.hosts[h].log_cut])
    cut = record_cut(_record)
    raise click.exceptions.Exit(EXIT_FAILED if bad or cut else 0)


def failed_pointer(console, run_id: str, whole: list[str]) -> None:
    """The end of a failed run: where every line of a failed host is (``whole``: the failed hosts
    whose log is not cut, :mod:`fleetctl.reporting.recordcut`; none: no such line), and the report."""
    if whole:
        console.print(f"every line a host printed: fleetctl logs {run_id} {whole[0]}", markup=False, highlight=False)
    console.print(f"the run as one HTML page: fleetctl report {run_id} --html report.html", markup=False,
                  highlight=False)


def _terminal(hosts, stream, folded: bool, verbose: int = 0):
    from ..inventory import fold_hosts
    from ..reporting.terminal import FoldedOutput, LiveOutput

    from ..reporting.livevalve import LiveValve, ValvedObserver

    names = [h.name for h in hosts]
    inner = FoldedOutput(names, stream, fold_hosts, verbose) if folded else LiveOutput(names, stream, verbose)
    # printing goes through a valve: a thread prints every line the terminal takes; only one that
    # takes none for a while loses lines from the display (the log keeps every byte)
    return ValvedObserver(inner, LiveValve())


def _slurm_time_warnings(run, rows: dict) -> dict[str, str]:
    """Hosts whose ``slurm_time`` is shorter than their class's last build took (run records)."""
    host_vars = (run.inventory or {}).get("hosts") or {}
    if not any("slurm_time" in v for v in host_vars.values()):
        return {}
    from ..reporting.history import list_runs
    from ..reporting.slurm_time import last_builds, slurm_time_warnings

    return slurm_time_warnings(rows, host_vars, last_builds(list_runs()))


def _plan_rows(run) -> tuple[dict, dict[str, str]]:
    """``--plan``'s rows (:func:`fleetctl.reporting.plan_table.plan_rows`; ``--plan --json``'s
    document), each host's ``slurm_time`` warning among its ``warnings``, and those warnings."""
    from ..reporting.plan_table import plan_rows

    rows = plan_rows(run.as_json()["hosts"])
    warnings = _slurm_time_warnings(run, rows)
    for host, warning in warnings.items():
        rows[host].setdefault("warnings", []).append(warning)
    return rows, warnings


def _print_plan(playbook, run, as_json: bool) -> None:
    """``--plan``: per host build / push / reinstall / skip and which inputs changed; exit 1 when a
    host would fail (a preflight problem) or could not be planned (``--json``: the rows were
    written when the run ended, :mod:`fleetctl.cli.runend`)."""
    from ..reporting.tables import print_long
    from ..reporting.plan_table import plan_classes, print_plan_table
    from ..reporting.terminal import make_console

    rows, warnings = _plan_rows(run)
    bad = [h for h, r in rows.items() if r.get("status") != "ok"]
    if not as_json:
        console = make_console()
        print_plan_table(console, f"plan: {playbook.name}", rows)
        classes = plan_classes(rows)
        if classes:
            console.print("build classes:")
            for line in classes:
                print_long(console, line)
        for host, warning in warnings.items():
            console.print(Text.assemble(("warning", "yellow"), f": {host}: {warning}"))
        builds = [b for r in rows.values() for b in r.get("builds", [])]
        would_change = [t for r in rows.values() for t in r.get("tasks", []) if t.get("status") == "would change"]
        verifies = [h for h, r in rows.items() if any(t.get("action") == "verify" and t.get("status") == "ok"
                                                      for t in r.get("tasks", []))]
        deploy_current = run.kind == "deploy" and rows and not bad and all(b["action"] == "skip" for b in builds)
        if deploy_current and verifies and not would_change and _print_unverified(console, run, verifies):
            pass
        elif deploy_current:
            if not would_change:
                console.print("nothing changed: a deploy would rebuild and reinstall nothing (--force overrides)")
            elif builds:  # the wheels are current, but other tasks (commands, copies...) would still run
                console.print(f"no rebuild or reinstall: every wheel is current; {len(would_change)} other task(s) "
                              f"would run (--force rebuilds)")
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


def _print_unverified(console, run, hosts: list[str]) -> bool:
    """``--plan``'s last lines when every wheel is current and verify would run on ``hosts``: never
    "nothing changed" for a host whose last deploy of this playbook failed at verify
    (:mod:`fleetctl.reporting.verify_history`). Returns whether it printed (False: none failed)."""
    from ..reporting.history import list_runs
    from ..reporting.verify_history import failed_at_verify

    failed = failed_at_verify(list_runs(), hosts, run.playbook or "") if run.playbook else {}
    for host, (run_id, msg) in sorted(failed.items()):
        console.print(Text.assemble(("not verified", "yellow"),
                                    f": {host}: its install is current, but its last deploy {run_id} failed at "
                                    f"verify: {msg}; a deploy would verify it again (fleetctl logs {run_id} {host})"))
    if failed:
        console.print(f"no rebuild or reinstall: every wheel is current; {len(failed)} of {len(hosts)} host(s) "
                      f"failed verify at their last deploy, which a deploy runs again (--force rebuilds)",
                      markup=False, highlight=False)
    return bool(failed)


COMMON_OPTIONS = [
    click.option("--hosts", "pattern", default=None, callback=given_pattern_option,
                 help="Host pattern (default: the playbook's hosts; an empty one is refused)."),
    limit_option, forks_option, json_option,
    extra_vars_option,
    click.option("--metrics-file", default=None, metavar="PATH",
                 help="At the end, write Prometheus metrics to PATH (*.prom, node_exporter's textfile "
                      "collector), atomically."),
    accept_option, timeout_option,
    click.option("--output", type=click.Choice(["auto", "lines", "folded"]), default="auto", show_default=True,
                 help=f"lines: every host line as it arrives; folded: a live board of counts and working hosts "
                      f"(not a terminal: a line per finished task and host as they happen), then identical "
                      f"lines and failures folded by host set; auto: folded above {FOLD_THRESHOLD} hosts."),
    phase_timeout_option,
    click.option("--dry-run", is_flag=True, help="Print per host the commands and environment; change nothing."),
    click.option("--plan", is_flag=True, help="Per host: each task's decision (build / push / reinstall / skip, "
                                              "which inputs changed) and what would fail; change nothing."),
]
DEPLOY_OPTIONS = [
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


def with_options(opts):
    """A decorator adding click options in order (``@with_options(COMMON_OPTIONS)``)."""
    def deco(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return deco


@main.command()
@click.option("--playbook", "playbook_path", default="playbooks/fp4-kernels.yaml", show_default=True,
              help="The playbook to run (docs/reference/playbook.md); a relative path not found here is the checkout's.")
@with_options(COMMON_OPTIONS + DEPLOY_OPTIONS)
@pass_ctx
def deploy(obj: Context, playbook_path: str, **kw: Any) -> None:
    """Build, install and verify the FP4 kernels for each host's own SM (or run --playbook)."""
    run_play_command(obj, playbook_path, kind="deploy", **kw)


@main.command()
@click.option("--playbook", "playbook_path", default="playbooks/verify.yaml", show_default=True,
              help="The verification playbook; a relative path not found here is the checkout's.")
@with_options(COMMON_OPTIONS)
@pass_ctx
def verify(obj: Context, playbook_path: str, **kw: Any) -> None:
    """Verify the installed kernels on each host (the verify playbook alone)."""
    run_play_command(obj, playbook_path, kind="verify", **kw)
