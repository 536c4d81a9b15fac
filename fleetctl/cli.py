"""The command line (click): parse, call the engine, render. Nothing else here.

Exit status (DESIGN.md): 0 every host succeeded; 1 one or more hosts failed or were unreachable
(after all others finished); 2 bad usage or bad input (one line, no traceback); 130/143 when
interrupted by SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

import click

from . import __version__
from .errors import InputError
from .logsetup import configure_logging
from .paths import resolve_default

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (nan passes every range check)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if rv != rv or rv in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def fail_input(message: str) -> "click.exceptions.Exit":
    """Print ``fleetctl: error: MESSAGE`` (control characters escaped: one line) and return Exit(2)."""
    if not message.isprintable():
        message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    click.echo(f"fleetctl: error: {message}", err=True)
    return click.exceptions.Exit(EXIT_BAD_INPUT)


class Context:
    def __init__(self, inventory: str, verbose: int) -> None:
        self.inventory_path = inventory
        self.verbose = verbose

    def select(self, pattern: str, limit: str | None = None, *, venv: bool = True, forks: int = 50):
        """Load the inventory, select hosts and check them (conflicts, key modes, local venvs),
        and make sure the open-file limit fits the run (fleetctl.fdlimit)."""
        from .inventory import load_inventory

        path = resolve_default(self.inventory_path)
        if not path.exists():
            raise InputError("inventory file not found (-i/--inventory or FLEETCTL_INVENTORY)", file=str(path))
        inv = load_inventory(str(path))
        hosts = inv.select(pattern, limit=limit)
        inv.check_hosts(hosts, venv=venv)
        from .build import parse_arch_list
        from .fdlimit import ensure_fd_budget

        for host in hosts:
            if "fallback_archs" in host.vars:
                try:
                    parse_arch_list(str(host.vars["fallback_archs"]))
                except ValueError as exc:
                    raise InputError(str(exc), file=str(path),
                                     key=f"{host.name}.fallback_archs") from None

        ensure_fd_budget(len(hosts), forks)
        return inv, hosts


pass_ctx = click.make_pass_decorator(Context)


def run_async(coro):
    """Run the engine. SIGINT (Ctrl-C) exits 130, SIGTERM 143: both cancel the run, which stops
    the remote commands (their channels close, see fleetctl.connection.command) and marks the
    run record interrupted before exiting."""
    terminated = False

    async def main():
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def on_term() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            return await coro
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        click.echo("fleetctl: interrupted (SIGINT)", err=True)
        raise click.exceptions.Exit(130) from None
    except asyncio.CancelledError:
        if terminated:
            click.echo("fleetctl: terminated (SIGTERM)", err=True)
            raise click.exceptions.Exit(143) from None
        raise


def usage_exit(exc: click.UsageError) -> Exception:
    """A click usage error (unknown option, missing --hosts, --forks 0...) as one line, exit 2."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        return exc  # plain `fleetctl`: click prints the help
    words = exc.ctx.command_path.split()[1:] if exc.ctx is not None else []
    message = " ".join(exc.format_message().splitlines())
    return fail_input(f"{' '.join(words)}: {message}" if words else message)


class FleetGroup(click.Group):
    """Turns InputError and click usage errors anywhere below into one line on stderr, exit 2."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise usage_exit(exc) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as exc:
            raise fail_input(str(exc)) from None
        except click.UsageError as exc:
            raise usage_exit(exc) from None


@click.group(cls=FleetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-i", "--inventory", default="inventory.yaml", envvar="FLEETCTL_INVENTORY", show_default=True,
              help="Ansible-format YAML inventory.")
@click.option("-v", "--verbose", count=True, help="More diagnostics on stderr (-v info, -vv debug).")
@click.version_option(__version__, prog_name="fleetctl")
@click.pass_context
def main(ctx: click.Context, inventory: str, verbose: int) -> None:
    """Provision GPU hosts over SSH: facts, per-SM FP4 kernel builds, install, verify."""
    configure_logging(verbose)
    ctx.obj = Context(inventory, verbose)


hosts_option = click.option("--hosts", "pattern", required=True,
                            help="Host pattern: names, groups, a:b, a:&b, a:!b, node[01:16].")
limit_option = click.option("--limit", default=None, help="Further limit the selected hosts (a pattern).")
forks_option = click.option("--forks", default=50, show_default=True, type=click.IntRange(1, 10000),
                            help="Hosts worked on at once.")
json_option = click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
accept_option = click.option("--accept-new-host-keys", is_flag=True,
                             help="Record unknown host keys in known_hosts (a changed key is still refused).")
timeout_option = click.option("--connect-timeout", default=30.0, show_default=True, type=FiniteFloatRange(0.1),
                              help="Seconds to connect and log in.")


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
    from .adhoc import facts_on_hosts
    from .render import facts_table, print_json
    from .runrecord import guarded, open_record

    _, hosts = obj.select(pattern, limit, forks=forks)
    record = open_record("facts")
    result = guarded(record, lambda: run_async(facts_on_hosts(
        hosts, record=record, forks=forks, connect_timeout_s=connect_timeout, accept_new_host_keys=accept_new_host_keys)))
    bad = [h for h, f in result.items() if not f.get("reachable", True) or "error" in f]
    record.finish("failed" if bad else "ok")
    if as_json:
        print_json(result)
    else:
        from rich.console import Console

        Console().print(facts_table(result))
        for h, f in result.items():
            for note in (f.get("build") or {}).get("notes", []):
                click.echo(f"{h}: {note}")
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@hosts_option
@limit_option
@forks_option
@json_option
@accept_option
@timeout_option
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=FiniteFloatRange(0.1),
              help="Seconds the command may run on each host.")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_ctx
def run(obj: Context, pattern: str, limit: str | None, forks: int, as_json: bool, accept_new_host_keys: bool,
        connect_timeout: float, timeout_s: float, argv: tuple[str, ...]) -> None:
    """Run ARGV exactly as given (no shell) on every host: fleetctl run --hosts all -- uname -r"""
    from .adhoc import run_on_hosts
    from .render import LinePrinter, print_json
    from .runrecord import guarded, open_record

    _, hosts = obj.select(pattern, limit, venv=False, forks=forks)  # `run` may be what creates the venv
    from .redact import unwrap

    from .livevalve import LiveValve

    record = open_record("run")
    record.redactor.add(set().union(*(unwrap(h.vars)[1] for h in hosts)))
    raw_printer = LinePrinter([h.name for h in hosts], stream=sys.stderr if as_json else sys.stdout)
    valve = LiveValve(log_hint=lambda h: f"fleetctl logs {record.run_id} {h}")  # printing never slows a host

    def printer(host, line):
        raw_printer(host, type(line)(line.stream, record.redactor.bytes(line.data)))

    record.data["argv"] = list(argv)
    try:
        result = guarded(record, lambda: run_async(run_on_hosts(
            hosts, list(argv), record=record, on_line=valve.wrap_line(printer), forks=forks, timeout_s=timeout_s,
            connect_timeout_s=connect_timeout, accept_new_host_keys=accept_new_host_keys)))
    finally:
        valve.close()
    bad = [h for h, r in result.items() if r.get("unreachable") or r.get("rc") != 0]
    record.finish("failed" if bad else "ok")
    if as_json:
        print_json(record.redactor.obj(result))
    else:
        for h, r in result.items():
            if r.get("unreachable"):
                click.echo(f"{h}: UNREACHABLE: {r['error']}", err=True)
            elif r.get("error"):
                click.echo(f"{h}: FAILED: {r['error']}", err=True)
            elif r.get("rc") != 0:
                click.echo(f"{h}: FAILED: rc={r.get('rc')}", err=True)
    raise click.exceptions.Exit(EXIT_FAILED if bad else 0)


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def runs(ctx: click.Context, as_json: bool) -> None:
    """List past runs (newest first); `fleetctl runs show RUN_ID` for one."""
    if ctx.invoked_subcommand:
        return
    from .runrecord import list_runs

    items = list_runs()
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for r in items:
        hosts = r.get("hosts", {})
        click.echo(f"{r.get('run_id')}  {r.get('kind', '?'):7} {r.get('status', '?'):12} {len(hosts)} hosts")


@runs.command("show")
@click.argument("run_id")
def runs_show(run_id: str) -> None:
    """Print one run's run.json."""
    from .runrecord import load_run, runs_root, valid_run_id

    if not valid_run_id(run_id) or not (runs_root() / run_id / "run.json").exists():
        raise fail_input(f"no run {run_id!r} in {runs_root()} (fleetctl runs lists them)")
    try:
        click.echo(json.dumps(load_run(run_id), indent=2))
    except (OSError, ValueError) as exc:
        raise fail_input(f"run {run_id}: {exc}") from None


@main.command()
@click.argument("run_id")
@click.argument("host")
def logs(run_id: str, host: str) -> None:
    """Print the log of HOST in run RUN_ID (the exact bytes the host printed)."""
    from .runrecord import host_log_path, runs_root, valid_run_id

    if not valid_run_id(run_id) or not (runs_root() / run_id).is_dir():
        raise fail_input(f"no run {run_id!r} in {runs_root()} (fleetctl runs lists them)")
    path = host_log_path(run_id, host)
    if not path.exists():
        raise fail_input(f"{path}: no log for host {host} in run {run_id}")
    sys.stdout.buffer.write(path.read_bytes())
from . import cli_play  # noqa: E402,F401  (registers deploy and verify)
from . import cli_schedule  # noqa: E402,F401  (registers schedule)
