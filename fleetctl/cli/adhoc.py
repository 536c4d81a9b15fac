"""``fleetctl facts`` and ``fleetctl run``: ad-hoc work on hosts, no playbook."""

from __future__ import annotations

import sys

import click

from .app import (EXIT_FAILED, Context, FiniteFloatRange, accept_option, command_line, diagnostics, forks_option,
                  hosts_option, json_option, limit_option, main, metrics_observer, pass_ctx, run_async,
                  timeout_option)


def record_run(kind: str, obj: Context, extra=()):
    """A new run model with its record and the -v observer: ``(run, record, observers)``."""
    from ..engine.model import RunModel
    from ..engine.observer import Observers
    from ..reporting.record import RunRecord

    from ..util.retention import policy_from_env

    policy_from_env()  # a bad FLEETCTL_KEEP_RUNS/DAYS is refused (exit 2) before anything runs
    run = RunModel(kind=kind, command=command_line(), **_who())
    record = RunRecord(run)
    return run, record, Observers(run, [record, diagnostics(obj), *extra])


def _who() -> dict[str, object]:
    import getpass
    import os
    import socket

    from ..reporting.history import process_start

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return {"user": user, "controller": socket.gethostname(), "controller_pid": os.getpid(),
            "controller_start": process_start(os.getpid())}


def finish(run, observers, status: str) -> None:
    """Close the run: status, end time, observers flushed; then the run records past the
    retention policy are pruned (:mod:`fleetctl.reporting.prune`; never this run, never one in
    progress; a record that cannot be removed is said on stderr, the run's status stands)."""
    from ..engine.model import utc_now
    from ..errors import InputError
    from ..reporting.prune import prune_runs
    from ..util.retention import policy_from_env

    run.status, run.finished = status, utc_now()
    observers.emit("run.finished", status=status)
    observers.close()
    try:
        pruned = prune_runs(policy_from_env())
    except (InputError, OSError) as exc:
        click.echo(f"fleetctl: warning: run records not pruned: {exc}", err=True)
        return
    for error in pruned.errors:
        click.echo(f"fleetctl: warning: cannot prune the run record {error}", err=True)


def guarded(run, observers, fn):
    """Call ``fn()``; whatever escapes it (Ctrl-C, SIGTERM, a bug) first marks the run
    ``interrupted`` so that no run stays ``running`` forever."""
    try:
        return fn()
    except BaseException:
        if run.status == "running":
            finish(run, observers, "interrupted")
        raise


@main.command()
@hosts_option
@limit_option
@forks_option
@json_option
@accept_option
@timeout_option
@pass_ctx
def facts(obj: Context, pattern: str, limit: str | None, forks: int, as_json: bool,
          accept_new_host_keys: bool, connect_timeout: float) -> None:
    """Gather and print facts: GPUs and SMs, CUDA, venv and torch, cores, memory, disk, build plan."""
    from ..engine.adhoc import facts_on_hosts
    from ..reporting.lines import print_json

    _, hosts = obj.select(pattern, limit, forks=forks)
    run, record, observers = record_run("facts", obj)
    run.pattern = pattern
    guarded(run, observers, lambda: run_async(facts_on_hosts(
        hosts, run=run, observers=observers, forks=forks, connect_timeout_s=connect_timeout,
        accept_new_host_keys=accept_new_host_keys, ssh_options=obj.ssh_options)))
    result = {}
    for name, out in run.hosts.items():
        if out.facts is not None and out.status == "failed":  # gathered, then refused (a broken GPU stack)
            result[name] = {**out.facts, "reachable": True, "status": "failed", "error": out.error}
        elif out.facts is not None:
            result[name] = out.facts
        else:
            result[name] = {"reachable": bool(out.reachable), "error": out.error}
    bad = run.failed_hosts
    finish(run, observers, "failed" if bad else "ok")
    if as_json:
        print_json(run.redactor.obj(result))
    else:
        from rich.console import Console

        from ..reporting.tables import folded_notes, print_facts

        console = Console(highlight=False)
        print_facts(console, result)
        for line in folded_notes(result, verbose=obj.verbose > 0):
            console.print(line, markup=False, soft_wrap=True)
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


@main.command(context_settings={"allow_interspersed_args": False})
@hosts_option
@limit_option
@forks_option
@json_option
@accept_option
@timeout_option
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=FiniteFloatRange(0.1),
              help="Seconds the command may run on each host.")
@click.option("--metrics-file", default=None, metavar="PATH",
              help="At the end, write Prometheus metrics to PATH (*.prom, node_exporter's textfile collector).")
@click.option("-b", "--gather", "gather", is_flag=True,
              help="As clush -b: hosts with the same output and exit status shown once, under their node set.")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_ctx
def run(obj: Context, pattern: str, limit: str | None, forks: int, as_json: bool, accept_new_host_keys: bool,
        connect_timeout: float, timeout_s: float, metrics_file: str | None, gather: bool,
        argv: tuple[str, ...]) -> None:
    """Run ARGV exactly as given (no shell) on every host: fleetctl run --hosts all -- uname -r

    The last line, on stderr (stdout keeps only what the hosts printed, for pipes), is
    ``ok N, failed N, unreachable N``."""
    from ..engine.adhoc import run_on_hosts
    from ..util.redact import unwrap
    from ..reporting.history import safe_name
    from ..reporting.lines import HostLines, print_json

    _, hosts = obj.select(pattern, limit, venv=False, forks=forks)  # `run` may be what creates the venv
    metrics = metrics_observer(metrics_file)
    from ..reporting.livevalve import LiveValve, ValvedObserver

    printer = HostLines([h.name for h in hosts], stream=sys.stderr if as_json else sys.stdout)
    live = ValvedObserver(_LinesOnly(printer), LiveValve(log_hint=lambda h: f"fleetctl logs RUN {h}"))
    run_, record, observers = record_run("run", obj, extra=[None if gather and not as_json else live, metrics])
    run_.pattern = pattern
    run_.redactor.add(set().union(*(unwrap(h.vars)[1] for h in hosts)))
    outputs = guarded(run_, observers, lambda: run_async(run_on_hosts(
        hosts, list(argv), run=run_, observers=observers, forks=forks, timeout_s=timeout_s,
        connect_timeout_s=connect_timeout, accept_new_host_keys=accept_new_host_keys,
        ssh_options=obj.ssh_options)))
    bad = run_.failed_hosts
    finish(run_, observers, "failed" if bad else "ok")
    if as_json:
        doc = {}
        for h, o in run_.hosts.items():
            out, err = outputs.get(h, ("", ""))
            doc[h] = ({"unreachable": True, "error": o.error} if o.status == "unreachable" else
                      {"rc": o.rc, "stdout": out, "stderr": err, **({"signal": o.signal} if o.signal else {}),
                       **({"error": o.error} if o.error and o.rc is None else {})})
            if o.output_truncated:  # memory stays bounded: only the tail is kept; the log has every byte
                doc[h]["output_truncated"] = {**o.output_truncated,
                                              "log": str(record.dir / "logs" / f"{safe_name(h)}.log")}
            if o.connection:
                doc[h]["connection"] = o.connection
        print_json(run_.redactor.obj(doc))
    else:
        from rich.console import Console
        from rich.text import Text

        from ..reporting.tables import print_long

        if gather:
            from ..reporting.gathered import gather as gather_blocks, render_blocks

            sys.stdout.write(render_blocks(gather_blocks(run_.hosts, outputs, run_.redactor.text)))
            sys.stdout.flush()
        err = Console(file=sys.stderr, highlight=False)
        for h, o in run_.hosts.items():
            if o.status != "ok":  # a terminal wraps them at words (print_long), a pipe gets whole lines
                state = "UNREACHABLE" if o.status == "unreachable" else "FAILED"
                print_long(err, Text(f"{h}: {state}: {o.error}"), indent=0)
        if bad:
            click.echo(f"every line a host printed: fleetctl logs {run_.run_id} --host {bad[0]}", err=True)
    from ..reporting.gathered import summary_line

    click.echo(summary_line(run_.hosts), err=True)
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


class _LinesOnly:
    """Only the output lines of a LiveOutput (``fleetctl run`` prints no task events)."""

    def __init__(self, printer) -> None:
        self.printer = printer

    def line(self, run, host, line, shown=True) -> None:
        self.printer.line(run, host, line, shown)


_record = record_run  # the name cli/play.py imports today
