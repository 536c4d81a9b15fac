"""``fleetctl logs``: a run's host logs, all hosts prefixed (as clush and Ansible), one host's
exact bytes, or ``--follow`` on a run in progress."""

from __future__ import annotations

import sys

import click

from .app import EXIT_FAILED, fail_input, main


@main.command()
@click.argument("run_id", required=False)
@click.argument("host", required=False)
@click.option("--host", "host_opt", default=None, metavar="HOST", help="Only this host's log.")
@click.option("-f", "--follow", is_flag=True,
              help="Follow a running run (default: the newest; with --host, the newest with that host) until it "
                   "ends; exit with its status.")
def logs(run_id: str | None, host: str | None, host_opt: str | None, follow: bool) -> None:
    """Print run RUN_ID's logs: every host's lines as `host: line`; with HOST (or --host) that
    host's log as recorded: every byte it printed, behind the record's ``out| ``/``err| `` stream markers
    (``out~ ``/``err~ ``: fleetctl's own protocol lines, a probe's start marker or answer, which the
    all-hosts view leaves out). Without RUN_ID: the newest run; with --host HOST, the newest run
    that has HOST's log (named on stderr), an error when no run has it; --follow picks the same.
    With a host, both end with ``run RUN: HOST: STATUS`` on stderr and exit by that host's status
    (0 when it was ok or changed, 1 when it failed, was unreachable or interrupted), whatever the
    other hosts did; without, --follow exits by the run's status. A log the run could not write in
    full (a full disk) ends with a ``==> log cut here`` line: named on stderr, ``run RUN: HOST: log
    cut: ...``, exit 1, with and without --follow (once the followed run has ended)."""
    from ..reporting.history import newest_run, runs_root, valid_run_id
    from ..util.envvars import check_strings

    check_strings()  # the string FLEETCTL_* variables, as a run checks them (one line, exit 2)
    for given, how in ((host, "HOST"), (host_opt, "--host")):
        if given is not None and not given.strip():
            raise fail_input(f"logs: {how} {given!r}: an empty host name; give an inventory host name")
    if host and host_opt and host != host_opt:
        raise fail_input(f"logs: two hosts given ({host} and --host {host_opt}); give one")
    host = host or host_opt
    if run_id is None:  # one choice with and without --follow (history.newest_run)
        found = newest_run(host)
        if found is None and host is not None:
            raise fail_input(f"logs: no run in {runs_root()} has a log for host {host} (fleetctl runs lists them)")
        if found is None:
            raise fail_input(f"logs: no runs yet in {runs_root()}")
        if host is not None:
            click.echo(f"fleetctl: note: run {found}: the newest run with a log for {host}", err=True)
        run_id = found
    if not valid_run_id(run_id) or not (runs_root() / run_id).is_dir():
        raise fail_input(f"no run {run_id!r} in {runs_root()} (fleetctl runs lists them)")
    run_dir = runs_root() / run_id
    if follow:
        from ..reporting.logfollow import follow as follow_logs

        def emit(line: str) -> None:
            click.echo(line)

        state = follow_logs(run_dir, emit, only=host)
        if host is None:
            click.echo(f"run {run_id}: {state}", err=True)
        _cut(run_dir, host)  # the run ended: a log it cut says so last, exit 1, as without --follow
        if host is not None:
            _host_outcome(run_dir, host, state)
        raise click.exceptions.Exit(0 if state == "ok" else EXIT_FAILED)
    if host is None:
        from ..reporting.logfollow import all_lines, silent_reasons

        for line in all_lines(run_dir):
            click.echo(line)
        for reason in silent_reasons(run_dir):
            click.echo(reason)
        _cut(run_dir)
        return
    _one_host(run_id, host)
    _cut(run_dir, host)
    _host_outcome(run_dir, host, None)


def _cut(run_dir, host: str | None = None) -> None:
    """A cut log is never presented as whole (operator trial: a log cut by a full disk, rc 0): one
    line per cut log on stderr, ``run RUN: HOST: log cut: ...``, and exit 1."""
    from ..reporting.logfollow import host_names, log_host
    from ..reporting.recordcut import cut_logs
    from ..util.paths import safe_name

    cut = cut_logs(run_dir)
    if host is not None:
        cut = {host: cut[safe_name(host)]} if safe_name(host) in cut else {}
    else:
        names = host_names(run_dir)
        cut = {names.get(f"{stem}.log", log_host(stem)): what for stem, what in cut.items()}
    for name, what in cut.items():
        click.echo(f"run {run_dir.name}: {name}: log cut: {what}", err=True)
    if cut:
        raise click.exceptions.Exit(EXIT_FAILED)


def _host_outcome(run_dir, host: str, state: str | None) -> None:
    """End ``logs`` of one host: ``run RUN: HOST: STATUS`` on stderr, and exit by that host's status
    (operator's trial: ``logs --follow --host hz`` exited 1, ``run ...: failed``, for an ok hz because
    another host was unreachable). A host run.json does not name (yet) takes the run's ``state``
    (``--follow``), or exits 0 (a live run's host, still at work)."""
    from ..reporting.logfollow import host_status

    status = host_status(run_dir, host)
    if status is None and state is None:
        return
    click.echo(f"run {run_dir.name}: {host}: {status or state}", err=True)
    ok = status in ("ok", "changed") if status is not None else state == "ok"
    raise click.exceptions.Exit(0 if ok else EXIT_FAILED)


def _one_host(run_id: str, host: str) -> None:
    from ..reporting.history import host_log_path, runs_root
    from ..reporting.logfollow import host_reason

    path = host_log_path(run_id, host)
    data = path.read_bytes() if path.exists() else b""
    if not data:
        # A host that was never reached printed nothing: its reason is in run.json.
        reason = host_reason(runs_root() / run_id, host)
        if reason is not None:
            click.echo(reason)
            return
    if not path.exists():
        raise fail_input(f"{path}: no log for host {host} in run {run_id}")
    sys.stdout.buffer.write(data)
