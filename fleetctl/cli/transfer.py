"""``fleetctl copy`` and ``fleetctl fetch``: ad-hoc files to and from hosts, recorded as runs
(the engine part: :mod:`fleetctl.engine.transfer`)."""

from __future__ import annotations

import sys

import click

from .app import (EXIT_FAILED, Context, FiniteFloatRange, accept_option, command_line, extra_vars_option,
                  forks_option, hosts_option, json_option, limit_option, main, pass_ctx, timeout_option)
from .runend import RunEnd, record_cut, run_async

_timeout = click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=FiniteFloatRange(0.1),
                        help="Seconds one host's whole transfer may take.")


def _transfer(obj: Context, kind: str, pattern: str, limit: str | None, forks: int, as_json: bool,
              accept_new_host_keys: bool, connect_timeout: float, timeout_s: float, src: str, dest: str,
              extra: tuple[str, ...], flat: bool = False) -> None:
    from ..api.transfer import transfer_files
    from ..engine.copy_sources import local_sources
    from ..engine.fetch_paths import check_placeholders
    from ..engine.transfer_probes import skip_note
    from ..reporting.gathered import summary_line
    from ..reporting.lines import print_json
    from .extravars import extra_secrets, host_setting_vars

    skipped: list[tuple[str, str]] = []
    if kind == "fetch":  # {{ }} or {hostname}: bad input (exit 2) before any host is touched
        check_placeholders(kind, "SRC", src)
    check_placeholders(kind, "DEST", dest)
    if kind == "copy":  # a missing SRC is bad input (exit 2) before any host is touched
        skipped = local_sources(src)[1]
    extra_vars = host_setting_vars(extra, kind)
    _, hosts = obj.select(pattern, limit, forks=forks, extra_vars=extra_vars)
    def document(run, _) -> None:  # per host: interrupted / not started too when a signal ended the run
        print_json(run.redactor.obj({h: {"status": o.status, "files": o.files or [], "bytes": o.bytes or 0,
                                         **({"error": o.error} if o.error else {}),
                                         **({"log_cut": o.log_cut} if o.log_cut else {})}
                                     for h, o in run.hosts.items()}))

    ends = RunEnd(document if as_json else None)
    run, _record = run_async(transfer_files(
        kind, hosts, src, dest, pattern=pattern, command=command_line(), verbose=obj.verbose, forks=forks,
        timeout_s=timeout_s, connect_timeout_s=connect_timeout, accept_new_host_keys=accept_new_host_keys,
        ssh_options=obj.ssh_options, flat=flat, observers=[ends],
        secrets=extra_secrets(extra_vars)), ends)
    bad = run.failed_hosts
    if not as_json:  # --json: its document is written when the run ends (fleetctl.cli.runend)
        for h, o in run.hosts.items():
            if o.status == "ok":
                click.echo(f"{h}: ok: {len(o.files or [])} files, {o.bytes or 0} bytes"
                           + (f"; skipped {len(skipped)}: " + "; ".join(f"{path}: {skip_note(what)}"
                                                                         for path, what in skipped) if skipped else ""))
            else:
                click.echo(f"{h}: {o.status.upper()}: {o.error}", err=True)
        if bad:
            click.echo(f"what happened on a host: fleetctl logs {run.run_id} {bad[0]}", err=True)
    click.echo(summary_line(run.hosts, run.record_cut), err=True)
    sys.stdout.flush()
    cut = record_cut(_record)
    raise click.exceptions.Exit(EXIT_FAILED if bad or cut else 0)


@main.command()
@hosts_option
@limit_option
@forks_option
@json_option
@accept_option
@timeout_option
@_timeout
@extra_vars_option
@click.argument("src")
@click.argument("dest")
@pass_ctx
def copy(obj: Context, pattern: str, limit: str | None, forks: int, as_json: bool, accept_new_host_keys: bool,
         connect_timeout: float, timeout_s: float, extra: tuple[str, ...], src: str, dest: str) -> None:
    """Copy SRC (a file, or a folder recursively) from this controller to DEST on every host.

    Paths as Ansible's copy module reads them: a folder SRC is copied itself, into DEST
    (kernel_src -> DEST/kernel_src/, DEST made when missing), SRC/ copies its contents
    (kernel_src/ -> DEST/); a file SRC is written at DEST, or inside it when DEST ends in / or
    is an existing folder. DEST may hold {host}: each host its own DEST
    (/tmp/dst_{host}); a DEST holding {{ }} or another {NAME} is refused (exit 2). Symlinks, FIFOs,
    sockets and devices in SRC are skipped, each named for what it is; modes are kept. -e overrides host vars as in deploy (-e
    ansible_user=admin)."""
    _transfer(obj, "copy", pattern, limit, forks, as_json, accept_new_host_keys, connect_timeout, timeout_s, src, dest,
              extra)


@main.command()
@hosts_option
@limit_option
@forks_option
@json_option
@accept_option
@timeout_option
@_timeout
@click.option("--flat", is_flag=True,
              help="As Ansible's fetch flat: yes: DEST is the file (a folder when it ends in /); one host only "
                   "unless DEST holds {host}.")
@extra_vars_option
@click.argument("src")
@click.argument("dest")
@pass_ctx
def fetch(obj: Context, pattern: str, limit: str | None, forks: int, as_json: bool, accept_new_host_keys: bool,
          connect_timeout: float, timeout_s: float, flat: bool, extra: tuple[str, ...], src: str, dest: str) -> None:
    """Fetch SRC (a file, or a folder recursively) from every host to DEST here.

    As Ansible's fetch: each file lands at DEST/<host>/<its path on the host> (/var/log/syslog ->
    DEST/gpu01/var/log/syslog; ~/ is the login user's $HOME), so hosts never overwrite each other.
    A DEST holding {host} is taken as given, one per host: 'out/{host}/' gets the file under its
    own name, 'out/{host}.log' is the file. {host} in SRC is each host's inventory name ({{ }} or
    another {NAME} in SRC or DEST is refused, exit 2). A host without SRC fails, naming it;
    symlinks are never followed; a file or folder the host cannot read fails it, naming it, after
    every other file is fetched; the folders a failed fetch made under DEST and left empty are
    removed. -e overrides host vars as in deploy (-e ansible_user=admin)."""
    _transfer(obj, "fetch", pattern, limit, forks, as_json, accept_new_host_keys, connect_timeout, timeout_s, src, dest,
              extra, flat=flat)
