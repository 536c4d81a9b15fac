"""``fleetctl facts`` and ``fleetctl run``: ad-hoc work on hosts, no playbook. Each parses its
options, calls the API's run path (:mod:`fleetctl.api.adhoc`) and prints."""

from __future__ import annotations

import sys

import click

from .app import (EXIT_FAILED, Context, FiniteFloatRange, accept_option, command_line, extra_vars_option,
                  forks_option, hosts_option, json_option, limit_option, main, metrics_observer, pass_ctx,
                  phase_timeout_option, timeout_option)
from .runend import RunEnd, record_cut, run_async


@main.command()
@hosts_option
@limit_option
@forks_option
@json_option
@accept_option
@timeout_option
@phase_timeout_option
@extra_vars_option
@pass_ctx
def facts(obj: Context, pattern: str, limit: str | None, forks: int, as_json: bool,
          accept_new_host_keys: bool, connect_timeout: float, phase_timeout: tuple[str, ...],
          extra: tuple[str, ...]) -> None:
    """Gather and print facts: GPUs and SMs, CUDA, venv and torch, cores, memory, disk, build plan.

    -e overrides host vars as in deploy (-e venv=/opt/venv -e ansible_user=admin): the facts of
    the hosts as that deploy will see them.

    Each host's line is printed as its facts come in; then the table, every failure's cause and
    the build notes (with --json: one document at the end). A host whose facts show a problem a
    deploy refuses it for (a venv that is not there, no torch, a full venv) is FAILED, and the
    exit status is 1."""
    from ..api.adhoc import facts_document, facts_entry, gather_facts
    from ..api.inputs import CLI_FLAGS
    from ..reporting.lines import FactsLines, print_json
    from .extravars import extra_secrets, host_setting_vars

    extra_vars = host_setting_vars(extra, "facts")
    _, hosts = obj.select(pattern, limit, forks=forks, extra_vars=extra_vars)
    live = None
    if not as_json:  # --json stays off rich (tests/test_fast_paths.py)
        from ..reporting.terminal import FOLD_THRESHOLD

        live = FactsLines(facts_entry, brief=len(hosts) > FOLD_THRESHOLD)
    ends = RunEnd((lambda run, _: print_json(run.redactor.obj(facts_document(run)))) if as_json else None)
    run, record = run_async(gather_facts(hosts, pattern=pattern, command=command_line(), observers=[live, ends],
                                    verbose=obj.verbose, forks=forks, connect_timeout_s=connect_timeout,
                                    accept_new_host_keys=accept_new_host_keys, ssh_options=obj.ssh_options,
                                    phase_timeout=phase_timeout, flags=CLI_FLAGS,
                                    secrets=extra_secrets(extra_vars)), ends)
    bad = run.failed_hosts
    if not as_json:  # --json: its document is written when the run ends (fleetctl.cli.runend)
        result = facts_document(run)
        from ..reporting.tables import folded_notes, print_facts
        from ..reporting.terminal import make_console

        console = make_console()
        print_facts(console, result, lines_shown=live is not None and not live.brief)
        for line in folded_notes(result, verbose=obj.verbose > 0):
            console.print(line, markup=False, soft_wrap=True)
    cut = record_cut(record)
    raise click.exceptions.Exit(EXIT_FAILED if bad or cut else 0)


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
@extra_vars_option
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_ctx
def run(obj: Context, pattern: str, limit: str | None, forks: int, as_json: bool, accept_new_host_keys: bool,
        connect_timeout: float, timeout_s: float, metrics_file: str | None, gather: bool, extra: tuple[str, ...],
        argv: tuple[str, ...]) -> None:
    """Run ARGV exactly as given (no shell) on every host: fleetctl run --hosts all -- uname -r

    -e overrides host vars as in deploy (-e ansible_user=admin -e ansible_port=2222).

    The last line, on stderr (stdout keeps only what the hosts printed, for pipes), is
    'ok N, failed N, unreachable N'."""
    from ..api.adhoc import run_command
    from ..reporting.lines import HostLines, print_json
    from .extravars import extra_secrets, host_setting_vars

    extra_vars = host_setting_vars(extra, "run")
    _, hosts = obj.select(pattern, limit, forks=forks, extra_vars=extra_vars)
    metrics = metrics_observer(metrics_file)
    from ..reporting.livevalve import LiveValve, ValvedObserver

    printer = HostLines([h.name for h in hosts], stream=sys.stderr if as_json else sys.stdout)
    live = ValvedObserver(_LinesOnly(printer), LiveValve())
    outputs: dict[str, tuple[str, str]] = {}  # filled as hosts finish: an interrupted run's document keeps them
    ends = RunEnd((lambda run, _: print_json(run.redactor.obj(_run_document(run, outputs)))) if as_json else None)
    run_, _record, _ = run_async(run_command(
        hosts, list(argv), pattern=pattern, command=command_line(),
        observers=[None if gather and not as_json else live, metrics, ends], verbose=obj.verbose,
        forks=forks, timeout_s=timeout_s, connect_timeout_s=connect_timeout,
        accept_new_host_keys=accept_new_host_keys, ssh_options=obj.ssh_options, outputs=outputs,
        secrets=extra_secrets(extra_vars)), ends)
    bad = run_.failed_hosts
    if not as_json:  # --json: its document is written when the run ends (fleetctl.cli.runend)
        if gather:
            from ..reporting.gathered import gather as gather_blocks, render_blocks

            sys.stdout.write(render_blocks(gather_blocks(run_.hosts, outputs, run_.redactor.text)))
            sys.stdout.flush()
        not_ok = [h for h, o in run_.hosts.items() if o.status != "ok"]
        if not_ok:  # rich (0.05 CPU-s to import) only when there is a failure to word-wrap
            from rich.text import Text

            from ..reporting.tables import print_long
            from ..reporting.terminal import make_console

            err = make_console(sys.stderr)
            causes: dict[str, list[str]] = {}  # the line -> its hosts; -b folds identical ones (clush -b)
            for h in not_ok:
                o = run_.hosts[h]
                state = "UNREACHABLE" if o.status == "unreachable" else "FAILED"
                causes.setdefault(f"{state}: {o.error}", []).append(h)
            if gather:
                from ..inventory import fold_hosts

                lines = [f"{fold_hosts(names)}: {cause}" for cause, names in causes.items()]
            else:
                lines = [f"{h}: {cause}" for cause, names in causes.items() for h in names]
            for line in lines:  # a terminal wraps them at words (print_long), a pipe gets whole lines
                print_long(err, Text(line), indent=0)
        # an unreachable host's log is empty; a cut one (a full disk: recordcut) is not every line
        reached = [h for h in bad if run_.hosts[h].status != "unreachable" and not run_.hosts[h].log_cut]
        if reached:
            click.echo(f"every line a host printed: fleetctl logs {run_.run_id} {reached[0]}", err=True)
    from ..reporting.gathered import summary_line

    click.echo(summary_line(run_.hosts, run_.record_cut), err=True)
    cut = record_cut(_record)  # after the counts: its last line says why an all-ok run failed
    raise click.exceptions.Exit(EXIT_FAILED if bad or cut else 0)


def _run_document(run, outputs: dict[str, tuple[str, str]]) -> dict[str, dict]:
    """``fleetctl run --json``'s document (not redacted): per host its ``status`` (``ok``,
    ``failed``, ``unreachable``; ``interrupted`` or ``not started`` when a signal ended the run) as
    deploy's, copy's and fetch's JSON have it, ``rc``, ``stdout``, ``stderr`` (``outputs``: what the
    hosts that finished printed, the last :data:`~fleetctl.engine.adhoc.RUN_CAPTURE_BYTES` of each),
    and ``log_cut`` as run.json has it (the host's log in the record is incomplete: it is ``failed``)."""
    from ..reporting.history import host_log_path

    doc = {}
    for h, o in run.hosts.items():
        out, err = outputs.get(h, ("", ""))
        doc[h] = ({"status": o.status, "unreachable": True, "error": o.error} if o.status == "unreachable" else
                  {"status": o.status, "rc": o.rc, "stdout": out, "stderr": err,
                   **({"signal": o.signal} if o.signal else {}),
                   **({"error": o.error} if o.error and o.rc is None else {})})
        if o.output_truncated:  # memory stays bounded: only the tail is kept; the log has every byte
            doc[h]["output_truncated"] = {**o.output_truncated, "log": str(host_log_path(run.run_id, h))}
        if o.connection:
            doc[h]["connection"] = o.connection
        if o.log_cut:  # its log in the record is incomplete: run.json's words (recordcut)
            doc[h]["log_cut"] = o.log_cut
    return doc


class _LinesOnly:
    """Only the output lines of a LiveOutput (``fleetctl run`` prints no task events)."""

    def __init__(self, printer) -> None:
        self.printer = printer

    def line(self, run, host, line, shown=True) -> None:
        self.printer.line(run, host, line, shown)
