"""``fleetctl runs`` and ``fleetctl logs``: past runs, from the user's run records."""

from __future__ import annotations

import json
import sys

import click

from .app import fail_input, main


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON document: every run's summary.")
@click.pass_context
def runs(ctx: click.Context, as_json: bool) -> None:
    """List past runs (newest first); `fleetctl runs show RUN_ID` for one."""
    if ctx.invoked_subcommand:
        return
    from ..reporting.history import list_runs, runs_root

    items = list_runs()
    if as_json:
        click.echo(json.dumps([_summary(r) for r in items], indent=2))
        return
    if not items:
        click.echo(f"no runs yet in {runs_root()}")
        return
    for r in items:
        if r.get("error"):  # not JSON, or not a run record's shape: said so, never a row of "?" and zeros
            click.echo(f"{r['run_id']}  unreadable: {r['error']}")
            continue
        s = _summary(r)
        later = "".join(f"  {s[k]} {k.replace('_', ' ')}" for k in ("unreachable", "interrupted", "not_started")
                        if s[k])
        click.echo(f"{s['run_id']}  {s['what']:16} {s['status']:12} {s['hosts']} hosts  {s['failed']} failed{later}")


def _summary(r: dict) -> dict:
    """One run's line, in the words and counts of the run's own summary line
    (:func:`fleetctl.reporting.gathered.summary_line`: one status set, that of run.json):
    ``ok``, ``failed`` and ``unreachable`` count the hosts of those statuses (an unreachable host
    did not fail: ``9 hosts  0 failed  2 unreachable`` for ``ok 7, failed 0, unreachable 2``);
    ``interrupted`` the hosts a Ctrl-C (SIGINT) or SIGTERM stopped while they were in progress;
    ``not_started`` the hosts the run never started on (the batches a failed canary stopped:
    ``--serial``, ``max_fail_percentage``; the hosts an interrupted run had not reached). All four
    but ``ok`` are in the record's ``failed_hosts`` (the retry set deploys them again), but only
    ``failed`` failed: an operator who pressed Ctrl-C, or whose hosts were down, is not told that
    hosts failed. The counts come from the
    hosts' statuses (a run killed before it wrote ``failed_hosts`` counts its failures all the
    same), as :func:`~fleetctl.reporting.history.settled` reads them (a run whose controller is
    gone: its hosts still ``running`` are ``interrupted``)."""
    from ..reporting.history import settled

    if r.get("error"):  # unreadable (history.read_record): its reason, not a row of zeros
        return {"run_id": r.get("run_id"), "error": r["error"]}
    r = settled(r)
    kind = r.get("kind", "?")
    mode = r.get("mode", "apply")
    hosts = r.get("hosts", {})
    status = {h: o.get("status") if isinstance(o, dict) else None for h, o in hosts.items()}
    not_started = sum(1 for st in status.values() if st == "not started")
    interrupted = sum(1 for st in status.values() if st == "interrupted")
    ok = sum(1 for st in status.values() if st == "ok")
    unreachable = sum(1 for st in status.values() if st == "unreachable")
    failed = sum(1 for st in status.values() if st == "failed")  # a run in progress: its running hosts not yet
    return {"run_id": r.get("run_id"), "kind": kind, "mode": mode,
            "what": kind if mode == "apply" else f"{kind} ({mode})", "status": r.get("status", "?"),
            "started": r.get("started"), "finished": r.get("finished"), "hosts": len(hosts),
            "ok": ok, "failed": failed, "unreachable": unreachable, "interrupted": interrupted,
            "not_started": not_started, "playbook": r.get("playbook"), "pattern": r.get("pattern")}


@runs.command("prune")
@click.option("--keep", "keep", default=None, metavar="N",
              help="Keep the newest N runs of each class, ad-hoc and playbook (default: FLEETCTL_KEEP_RUNS, else 50).")
@click.option("--older-than", "older_than", default=None, metavar="DAYS",
              help="Remove runs older than DAYS days (default: FLEETCTL_KEEP_DAYS, else 30).")
@click.option("--dry-run", is_flag=True, help="Say which runs would be removed; remove nothing.")
def runs_prune(keep: str | None, older_than: str | None, dry_run: bool) -> None:
    """Remove past run records beyond the newest N runs of each class (ad-hoc: run, facts, copy,
    fetch; playbook: deploy, verify, rollback) or older than DAYS days; never a run in progress,
    a run a retry set points to, nor the newest successful and newest failed run of each play;
    newest means made last on this controller, whatever the clock said; the newest 10 of each
    class are never removed for their age, nor is any while a record is dated later than the
    controller's clock (a wrong clock removes nothing: one warning names both times;
    fleetctl/util/retention.py). Every run prunes this way when it ends."""
    from dataclasses import replace

    from ..reporting.history import runs_root
    from ..reporting.prune import prune_runs
    from ..util.retention import KEEP_MIN, check_keep_days, check_keep_runs, policy_from_env

    policy = policy_from_env()
    if keep is not None:
        policy = replace(policy, keep_runs=check_keep_runs(keep, "--keep"))
    if older_than is not None:
        policy = replace(policy, keep_days=check_keep_days(older_than, "--older-than"))
    result = prune_runs(policy, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for run_id in result.removed:
        click.echo(f"{verb} {run_id}")
    for error in result.errors:
        click.echo(f"fleetctl: warning: cannot remove {error}", err=True)
    if result.warning:
        click.echo(f"fleetctl: warning: {result.warning}", err=True)
    click.echo(f"{verb} {len(result.removed)} run(s), kept {result.kept} in {runs_root()} "
               f"(the newest {policy.keep_runs} ad-hoc and {policy.keep_runs} playbook runs by when they ended, none older than "
               f"{policy.keep_days:g} days but the newest {min(KEEP_MIN, policy.keep_runs)} of each, runs in progress, retry sets' runs and each play's last success "
               f"and last failure)")
    if result.errors:
        raise click.exceptions.Exit(1)


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="The run's run.json as it is.")
def runs_show(run_id: str, as_json: bool) -> None:
    """One run: its header, a table of hosts, the failures' causes folded, where to look next."""
    from ..reporting.history import load_run, runs_root, settled, valid_run_id

    if not valid_run_id(run_id) or not (runs_root() / run_id / "run.json").exists():
        raise fail_input(f"no run {run_id!r} in {runs_root()} (fleetctl runs lists them)")
    try:
        record = load_run(run_id)
    except (OSError, ValueError) as exc:
        raise fail_input(f"run {run_id}: {exc}") from None
    if as_json:
        click.echo(json.dumps(record, indent=2))
        return
    if not isinstance(record, dict):
        raise fail_input(f"run {run_id}: run.json is not an object")
    from ..reporting.runshow import render

    record = settled(record)  # a run whose controller is gone: its hosts still running are interrupted
    for line in render(record, str(record.get("status", "?"))):
        click.echo(line)
