"""The command-line core (click): the ``fleetctl`` group, its shared options, and how errors exit.

Exit status (docs/contracts.md): 0 every host succeeded; 1 one or more hosts failed or were unreachable
(after all others finished); 2 bad usage or bad input (one line naming the file, key or option, no
traceback); 130/143 when interrupted by SIGINT/SIGTERM (:mod:`fleetctl.cli.runend`).

Before ``--`` every token is fleetctl's: an option fleetctl does not know is exit 2 with click's
did-you-mean, never passed on to the hosts.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import __version__
from ..errors import InputError, InventoryNotFound

#: Where the CLI takes inventory sources, for an error naming one that is not there.
INVENTORY_FLAGS = "-i/--inventory or FLEETCTL_INVENTORY"

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (nan passes every range check)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if rv != rv or rv in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def fail_input(*messages: str) -> "click.exceptions.Exit":
    """Print ``fleetctl: error: MESSAGE`` for each message (control characters escaped: one line
    each; several for :class:`~fleetctl.errors.InventoryErrors`) and return Exit(2)."""
    for message in messages:
        if not message.isprintable():
            message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        click.echo(f"fleetctl: error: {message}", err=True)
    return click.exceptions.Exit(EXIT_BAD_INPUT)


class InventorySources(click.ParamType):
    """``-i`` values; FLEETCTL_INVENTORY may list several, comma-separated (as ANSIBLE_INVENTORY)."""

    name = "source"
    envvar_list_splitter = ","


class Context:
    """What every command gets: the inventory sources (``-i``, repeatable, later ones adding to
    earlier ones) and the verbosity."""

    def __init__(self, inventory: tuple[str, ...] | str, verbose: int, ssh_options: tuple[str, ...] = ()) -> None:
        inventory = (inventory,) if isinstance(inventory, str) else tuple(inventory)
        self.ssh_options = tuple(ssh_options)  # `-o`, checked (fleetctl.connection.ssh_options)
        self.inventory_given = bool(inventory)  # -i or FLEETCTL_INVENTORY: read where given, no fallback
        self.inventory_paths = inventory or ("inventory.yaml",)
        self.inventory_path = self.inventory_paths[0]
        self.verbose = verbose
        self.extra_before: tuple[str, ...] = ()  # -e given before the command (passed_down)
        self._fleet = None

    @property
    def fleet(self):
        """The :class:`fleetctl.api.Fleet` of these sources (loaded on first use; its warnings on stderr)."""
        if self._fleet is None:
            from ..api.fleet import Fleet

            self._fleet = Fleet(self.inventory_paths if self.inventory_given else None, verbose=self.verbose,
                                ssh_options=self.ssh_options)
        return self._fleet

    def inventory_sources(self) -> list[str]:
        """The sources to load (:func:`fleetctl.util.paths.inventory_sources`): ``-i`` as given,
        else the default ``inventory.yaml``."""
        from ..util.paths import inventory_sources

        return inventory_sources(self.inventory_paths if self.inventory_given else None)

    def select(self, pattern: str, limit: str | None = None, *, forks: int = 50,
               extra_vars: dict | None = None):
        """Load the inventory, select hosts and check them (:func:`fleetctl.api.fleet.select_hosts`:
        conflicts, key files, the open-file limit). ``extra_vars`` (``-e``) win over
        the hosts' vars, settings included (:mod:`fleetctl.inventory.extra`)."""
        from ..api.fleet import select_hosts

        return select_hosts(self.fleet, pattern, limit, forks=forks, extra_vars=extra_vars)


pass_ctx = click.make_pass_decorator(Context)


def usage_exit(exc: click.UsageError) -> Exception:
    """A click usage error (unknown option, missing --hosts, --forks 0...) as one line, exit 2."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        return exc  # plain `fleetctl`: click prints the help
    words = exc.ctx.command_path.split()[1:] if exc.ctx is not None else []
    message = " ".join(exc.format_message().splitlines())
    return fail_input(f"{' '.join(words)}: {message}" if words else message)


#: command name -> the module of :mod:`fleetctl.cli` that defines it: a command's module (and
#: what it imports) is loaded only when that command runs, or for ``--help``.
COMMAND_MODULES = {"facts": "adhoc", "run": "adhoc", "inventory": "inventory", "hosts": "inventory",
                   "deploy": "play", "verify": "play", "report": "report", "rollback": "rollback", "runs": "runs",
                   "logs": "logs", "schedule": "schedule", "copy": "transfer", "fetch": "transfer"}


class FleetGroup(click.Group):
    """Turns InputError and click usage errors anywhere below into one line on stderr, exit 2;
    loads each command's module on first use (:data:`COMMAND_MODULES`)."""

    def get_command(self, ctx, cmd_name):
        module = COMMAND_MODULES.get(cmd_name)
        if module is None:  # unknown: every command is loaded, so the error can suggest the nearest
            self.list_commands(ctx)
        elif cmd_name not in self.commands:
            import importlib

            importlib.import_module(f"{__package__}.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx):
        import importlib

        for module in sorted(set(COMMAND_MODULES.values())):
            importlib.import_module(f"{__package__}.{module}")
        return super().list_commands(ctx)

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise usage_exit(exc) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InventoryNotFound as exc:  # named as the CLI takes sources
            raise fail_input(str(InventoryNotFound(exc.file, INVENTORY_FLAGS))) from None
        except InputError as exc:  # several at once (every bad var of an inventory): a line each
            raise fail_input(*(str(e) for e in getattr(exc, "errors", (exc,)))) from None
        except click.UsageError as exc:
            raise usage_exit(exc) from None


@click.group(cls=FleetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-i", "--inventory", "inventory", multiple=True, default=(), envvar="FLEETCTL_INVENTORY",
              type=InventorySources(),
              help="Inventory source (Ansible YAML/INI file, folder, script, slurm:), read where given; one per "
                   "-i, repeat to add more (a value with a comma that is no path is a host list, as in Ansible; "
                   "FLEETCTL_INVENTORY splits at commas). Default: inventory.yaml here, else fleetctl's own.")
@click.option("-v", "--verbose", count=True, help="Diagnostics on stderr: -v each host's tasks, -vv every command.")
@click.option("-o", "ssh_option", multiple=True, metavar="OPTION=VALUE",
              help="A one-off ssh_config option for every ssh host of the command (as ssh -o); repeatable.")
@click.option("--accept-new-host-keys", "accept_new_host_keys", is_flag=True,
              help="As the command's own --accept-new-host-keys (here or after the command).")
@click.option("-e", "--extra-var", "--extra-vars", "extra_before", multiple=True, metavar="NAME=VALUE|JSON|@FILE",
              help="As the command's own -e (deploy, verify, rollback, run, facts, copy, fetch, schedule), here or after "
                   "the command; these "
                   "come first, so one after the command wins.")
@click.option("--connect-timeout", "connect_timeout_before", default=None, type=FiniteFloatRange(0.1),
              help="As the command's own --connect-timeout (here or after the command; after it wins).")
@click.version_option(__version__, prog_name="fleetctl")
@click.pass_context
def main(ctx: click.Context, inventory: tuple[str, ...], verbose: int, ssh_option: tuple[str, ...],
         accept_new_host_keys: bool, extra_before: tuple[str, ...], connect_timeout_before: float | None) -> None:
    """Provision GPU hosts over SSH: facts, per-SM FP4 kernel builds, install, verify."""
    collect_in_batches()
    passed_down(ctx, extra_before, connect_timeout_before)
    options: tuple[str, ...] = ()
    accept = accept_new_host_keys  # before the command, as -i and -o are: the same as after it
    if ssh_option:  # imported only when given: the ssh layer costs ~0.1 s of start-up (asyncssh)
        from ..connection.ssh_options import SSHOptionError, accepts_new_keys, parse_options

        try:
            options = parse_options(ssh_option)
        except SSHOptionError as exc:
            raise InputError(str(exc)) from None
        accept = accept or accepts_new_keys(options)  # -o StrictHostKeyChecking=accept-new is the flag
    if accept:  # every command that has the flag gets it on (click's default_map)
        ctx.default_map = {**(ctx.default_map or {}),
                           **{name: {"accept_new_host_keys": True} for name in COMMAND_MODULES}}
    ctx.obj = Context(inventory, verbose, options)
    ctx.obj.extra_before = tuple(extra_before)


def passed_down(ctx: click.Context, extra: tuple[str, ...], connect_timeout_s: float | None) -> None:
    """``-e`` and ``--connect-timeout`` given before the command, as an Ansible user writes them
    (``ansible-playbook -i hosts.yaml -e archs=9.0a site.yml`` takes options in any order; a
    fresh operator's ``fleetctl -i hosts.yaml -e archs=9.0a deploy ...`` was click's ``No such
    option '-e'``, though ``-i``, ``-o`` and ``--accept-new-host-keys`` go there): they are the
    command's own, as if given after it (``--connect-timeout`` through click's default_map, so one
    after the command wins; ``-e`` through :func:`with_extra_before`, before the command's own,
    so a later one wins as in Ansible). A command without the option is bad usage (exit 2):
    ``-e is not an option of hosts (it is one of copy, deploy, facts, fetch, rollback, run, schedule,
    verify)``."""
    if not extra and connect_timeout_s is None:
        return
    name = ctx.invoked_subcommand
    command = ctx.command.get_command(ctx, name) if name else None  # type: ignore[attr-defined]
    params = {p.name for p in command.params} if command is not None else set()
    for given, param, flag in ((bool(extra), "extra", "-e"),
                               (connect_timeout_s is not None, "connect_timeout", "--connect-timeout")):
        if given and command is not None and param not in params:
            having = [n for n in sorted(COMMAND_MODULES)
                      if param in {p.name for p in ctx.command.get_command(ctx, n).params}]  # type: ignore[attr-defined]
            raise click.UsageError(f"{flag} is not an option of {name} (it is one of {', '.join(having)})", ctx)
    if connect_timeout_s is not None and name:
        ctx.default_map = {**(ctx.default_map or {}), name: {**((ctx.default_map or {}).get(name) or {}),
                                                             "connect_timeout": connect_timeout_s}}


def with_extra_before(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """A command's ``-e`` values after those given before the command (:func:`passed_down`)."""
    obj = ctx.find_object(Context)
    return (*getattr(obj, "extra_before", ()), *(value or ()))


#: The cyclic garbage collector's thresholds for a CLI command's start-up (:func:`gc.set_threshold`;
#: CPython's defaults are 700, 10, 10): start-up allocates about a million objects that live to the
#: end (modules, classes, pydantic's validators, asyncssh's tables), and every collection walked
#: them again for nothing, during start-up and then through the whole run: 0.1 CPU-s of a 0.6 CPU-s
#: ``fleetctl run`` of 20 hosts (bench/README.md, issue 27). Cycles are still collected during
#: start-up, in batches of at most 50,000 young objects (a few MiB); when the engine starts
#: (:func:`collect_as_usual`) the young objects are collected, what is left is frozen and the
#: defaults come back.
GC_THRESHOLDS = (50_000, 20, 20)


_DEFAULT_THRESHOLDS: list[tuple[int, ...]] = []


def collect_in_batches() -> None:
    """Raise the collector's thresholds to :data:`GC_THRESHOLDS` (never lower them) for the
    command's start-up (imports, the inventory)."""
    import gc

    if not _DEFAULT_THRESHOLDS:  # a second command in one process (tests) keeps the first's
        _DEFAULT_THRESHOLDS.append(gc.get_threshold())
    gc.set_threshold(*(max(a, b) for a, b in zip(gc.get_threshold(), GC_THRESHOLDS)))


def collect_as_usual() -> None:
    """When the engine starts: the youngest generation is collected, then what start-up made and
    is still alive is frozen (:func:`gc.freeze`: it lives to the end, and no later collection
    walks it again) and the thresholds go back to what they were, so a long run collects its own
    cycles as often as any Python program.

    Start-up's garbage is young: for ``fleetctl run`` the young collection finds all of it (6
    objects; a full collection after it finds none) in 4 ms, where a full one walks every object
    start-up made (about 45,000) in 25-30 ms (bench/README.md, issue 27)."""
    import gc

    if _DEFAULT_THRESHOLDS:
        gc.collect(0)
        gc.freeze()
        gc.set_threshold(*_DEFAULT_THRESHOLDS.pop())


def given_pattern_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Every ``--hosts``/``--limit`` option's callback: an empty or blank pattern is refused
    (exit 2) before the inventory is read, never taken for "not given"
    (:func:`fleetctl.inventory.patterns.given_pattern`)."""
    from ..inventory.patterns import given_pattern

    return given_pattern(value, "limit" if param.name == "limit" else "pattern")


hosts_option = click.option("--hosts", "pattern", required=True, callback=given_pattern_option,
                            help="Host pattern: names, groups, a:b, a:&b, a:!b, node[01:16].")
#: ``-l``: ansible-playbook's and ClusterShell's short form of ``--limit`` (``ansible-playbook -l``).
limit_option = click.option("-l", "--limit", "limit", default=None, callback=given_pattern_option,
                            help="Further limit the selected hosts (a pattern; -l as in ansible-playbook).")
forks_option = click.option("--forks", default=50, show_default=True, type=click.IntRange(1, 10000),
                            help="Hosts worked on at once.")
json_option = click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
accept_option = click.option("--accept-new-host-keys", is_flag=True,
                             help="Record host keys of hosts that have none (a changed key is still refused).")
extra_vars_option = click.option(
    "-e", "--extra-var", "--extra-vars", "extra", multiple=True, metavar="NAME=VALUE|JSON|@FILE",
    callback=with_extra_before,
    help="Extra vars, as Ansible's --extra-vars, above every inventory and play var (host settings too: "
         "ansible_user, ansible_port, venv, slurm_partition...): NAME=VALUE (several: 'a=1 b=2'; strings), a "
         "JSON/YAML mapping ('{\"archs\": \"9.0a\"}'; values keep their type), or @FILE, a YAML/JSON mapping of "
         "them (keep secrets there, mode 0600).")
"""deploy's, verify's, rollback's, run's, facts', copy's and fetch's ``-e``: one option, one parser
(:mod:`fleetctl.cli.extravars`)."""
phase_timeout_option = click.option("--phase-timeout", multiple=True, metavar="PHASE=SECONDS",
                                    help="Deadline for a phase: connect, facts, upload, build, install, verify, "
                                         "command.")
timeout_option = click.option("--connect-timeout", default=30.0, show_default=True, type=FiniteFloatRange(0.1),
                              help="Seconds to reach and log in to each host, all attempts together: the TCP "
                                   "connect, the SSH handshake and login, and the retries (up to 6 attempts) of "
                                   "handshakes the server closes before login. Through jump hosts (ProxyJump) each hop has "
                                   "its own, as with ssh -J: a route through k jump hosts takes at most k + 1 times "
                                   "this.")


def command_line() -> list[str]:
    """The command line as typed (``sys.argv`` with the program name shortened)."""
    return ["fleetctl", *sys.argv[1:]]


def diagnostics(obj: Context) -> Any:
    """The -v/-vv observer, or None (:func:`fleetctl.api.lifecycle.diagnostics`)."""
    from ..api.lifecycle import diagnostics as for_level

    return for_level(obj.verbose)


def metrics_observer(path: str | None, mode: str = "apply"):
    """The ``--metrics-file`` observer, or None; bad input (a dry run, a missing folder, a folder
    that takes no file: :func:`~fleetctl.reporting.metrics.check_metrics_path`) is exit 2."""
    if not path:
        return None
    from pathlib import Path

    from ..reporting.metrics import MetricsFile, check_metrics_path

    if mode != "apply":
        raise InputError(f"--metrics-file: a {mode} changes nothing; metrics describe applied runs")
    p = Path(path)
    check_metrics_path(p)
    if p.suffix != ".prom":
        click.echo(f"fleetctl: warning: --metrics-file {p}: node_exporter's textfile collector reads only "
                   "*.prom files", err=True)
    return MetricsFile(p)
