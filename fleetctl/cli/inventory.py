"""``fleetctl inventory`` and ``fleetctl hosts``: look at an inventory before anything runs.

``fleetctl inventory --list | --graph [GROUP] | --host HOST`` print what ``ansible-inventory``
prints for the same sources (its JSON and graph formats), so a user can compare the two, and a
script can read fleetctl's view of any source. ``fleetctl hosts PATTERN`` prints what
``ansible PATTERN --list-hosts`` prints: the selection a ``--hosts PATTERN`` would work on, in
order. Secrets (``{value: ..., secret: true}`` and secret-looking names) are masked. A var whose
value only Ansible's merge order decides, and a host's own bad vars, are refused by ``--host`` and
``hosts`` as by ``run`` when they select the host (:meth:`Inventory.check_input`, one line, exit 2);
``--list`` and ``--graph`` refuse the bad vars of the hosts they show and show Ansible's merge, for
comparison with ``ansible-inventory``. Both check the string-valued ``FLEETCTL_*``
variables first, as a run does (:func:`fleetctl.util.envvars.check_strings`: one line, exit 2).
"""

from __future__ import annotations

import json

import click

from .app import Context, json_option, limit_option, main, pass_ctx
from ..errors import InputError


def _load(obj: Context):
    from ..inventory import load_inventory
    from ..util.envvars import check_strings

    check_strings()  # as a run: FLEETCTL_INVENTORY="" would read ./inventory.yaml, silently
    from ..util.paths import default_inventory_note

    inv = load_inventory(obj.inventory_sources())
    note = None if obj.inventory_given else default_inventory_note()
    for warning in [*inv.warnings, *([note] if note else [])]:
        click.echo(f"fleetctl: warning: {warning}", err=True)
    return inv


def _redactor(hosts):
    from ..util.redact import Redactor, unwrap

    return Redactor(set().union(*(unwrap(h.vars)[1] for h in hosts)))


@main.command("inventory")
@click.option("--list", "as_list", is_flag=True, help="Every group and host's vars, as ansible-inventory --list.")
@click.option("--graph", "as_graph", is_flag=True, help="The group tree from GROUP (default all), as --graph.")
@click.option("--host", "host", metavar="HOST", default=None, help="One host's merged vars, as --host.")
@click.option("--vars", "show_vars", is_flag=True, help="With --graph: show vars too.")
@limit_option
@click.argument("group", required=False)
@pass_ctx
def inventory_command(obj: Context, as_list: bool, as_graph: bool, host: str | None, show_vars: bool,
                      limit: str | None, group: str | None) -> None:
    """Show the inventory as ansible-inventory does: --list, --graph [GROUP] or --host HOST."""
    from ..inventory import render

    if sum((as_list, as_graph, host is not None)) != 1:
        raise InputError("inventory: give exactly one of --list, --graph [GROUP] or --host HOST")
    if group is not None and not as_graph:
        raise InputError(f"inventory: a GROUP ({group!r}) goes with --graph only")
    inv = _load(obj)
    redact = _redactor(inv)
    if as_list:
        listed = render.list_json(inv, limit=limit)
        inv.check_refused(inv.select("all", limit=limit) if limit is not None else inv)  # listed hosts' bad vars
        click.echo(render.dumps(redact.obj(listed)))
    elif as_graph:
        shown = render.graph(inv, group or "all", show_vars=show_vars)
        inv.check_refused(inv.hosts[h] for h in inv.groups[group or "all"].hosts)
        click.echo(redact.text(shown))
    else:
        if host in inv:  # an unknown name is render.host_vars's refusal
            inv.check_input([inv.hosts[host]])  # run's rule: bad vars, a merge-order guess are refused, not shown
        click.echo(render.dumps(redact.obj(render.host_vars(inv, host))))


@main.command("hosts")
@click.argument("pattern")
@limit_option
@json_option
@click.option("--fold", is_flag=True, help="One line: the hosts as a ClusterShell node set (gpu[01-16]).")
@pass_ctx
def hosts_command(obj: Context, pattern: str, limit: str | None, as_json: bool, fold: bool) -> None:
    """List the hosts PATTERN selects, in order, as ansible PATTERN --list-hosts does."""
    from ..inventory import fold_hosts, render

    inv = _load(obj)
    selected = inv.select(pattern, limit=limit)
    inv.check_input(selected)  # what --hosts PATTERN would refuse for its input, hosts refuses too (same line)
    names = [h.name for h in selected]
    if as_json:
        click.echo(json.dumps(names))
    elif fold:
        click.echo(fold_hosts(names))
    else:
        click.echo(render.list_hosts(names))
