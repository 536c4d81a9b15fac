"""Each host's vars, merged in Ansible's order, and the frozen :class:`~fleetctl.inventory.Inventory`.

The order is ansible-core's ``VariableManager.get_vars`` with its default ``VARIABLE_PRECEDENCE``
("Understanding variable precedence",
https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_variables.html#understanding-variable-precedence),
lowest first, each level replacing earlier values whole:

1. the inventory vars of ``all``, then of each other group of the host, sorted by depth (longest
   path from ``all``), then ``ansible_group_priority`` (default 1), then name
   (``ansible.inventory.helpers.sort_groups``);
2. ``group_vars/all`` of each source folder, in ``-i`` order;
3. ``group_vars/GROUP`` of each source folder (outer loop) for each group in that order (inner);
4. the host's inventory vars;
5. ``host_vars/HOST`` of each source folder.

So a ``group_vars/all.yml`` beats a child group's inventory vars and a ``host_vars/`` file the
host's inventory vars (Ansible's levels: used as they are, never refused), and ``all < parent <
child < host``. Where, within one level, only the load order rather than the structure decides
between different values (two unrelated groups; ``group_vars/`` of two ``-i`` sources), a
:class:`~fleetctl.inventory.vars.VarConflict` is recorded (and refused for selected hosts).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fleetctl.errors import InventoryError, InventoryErrors

from .data import InventoryBuilder, VarsFiles
from .host_checks import build_host_problem
from .model import Group, Host, Inventory
from .own_vars import own_var_names
from .settings import CONTROLLER_PATH_VARS, HOST_PATH_VARS, HostSettings, aliases_of, typed_settings
from .var_names import name_problem
from .vars import VarConflict, VarSource, same

__all__ = ["finish"]


class _Context:
    def __init__(self, b: InventoryBuilder) -> None:
        self.b = b
        self.depth = b.depths()
        self.ancestors = {name: b.ancestors(name) for name in b.groups}
        self.key = {name: (self.depth[name], g.priority, name) for name, g in b.groups.items()}

    def structural(self, loser: VarSource, winner: VarSource) -> str | None:
        """None when Ansible's precedence levels, the structure, or a later source of the same
        entity explain why ``winner`` beats ``loser``; else how Ansible's load order decided within
        one level: ``source``, ``depth``, ``name`` or ``priority``.

        A ``group_vars/``/``host_vars/`` file over an inventory var is a level, not load order:
        ansible-core's precedence ("Understanding variable precedence") puts inventory group vars
        (4) below ``group_vars/all`` (5) and ``group_vars/*`` (7), inventory host vars (9) below
        ``host_vars/*`` (10), whatever the groups' depth.
        """
        if loser.level != winner.level or winner.group is None or loser.group == winner.group:
            return None
        if loser.group is None or loser.group in self.ancestors[winner.group]:
            return None  # host vars always come after group vars; a child group over its parent
        if winner.level == "vars_file" and winner.base_dir != loser.base_dir:
            return "source"  # Ansible merges each -i source's group_vars/ in turn, whatever the depth
        w_depth, w_prio, _ = self.key[winner.group]
        l_depth, l_prio, _ = self.key[loser.group]
        if w_depth != l_depth:
            return "depth"
        return "priority" if w_prio != l_prio else "name"


_REASONS = {
    "source": "a later -i source's group_vars/ files come after an earlier source's, whatever the groups' depth",
    "depth": "the deeper group wins (Ansible merges groups by depth)",
    "priority": "the group with the higher ansible_group_priority wins",
    "name": "groups of the same depth merge in ASCII order of their names; the last one wins",
}


def _layers(ctx: _Context, name: str, ordered: list[str], files: list[VarsFiles]) -> Iterable[VarSource]:
    b = ctx.b
    for g in ordered:
        yield from b.groups[g].sources.values()
    for vf in files:
        yield from vf.groups.get("all", ({}, {}))[1].values()
    for vf in files:
        for g in ordered:
            if g != "all":
                yield from vf.groups.get(g, ({}, {}))[1].values()
    yield from b.hosts[name].sources.values()
    for vf in files:
        yield from vf.hosts.get(name, ({}, {}))[1].values()


def _merge_host(ctx: _Context, name: str, files: list[VarsFiles]
                ) -> tuple[dict[str, Any], dict[str, VarSource], tuple[str, ...], list[VarConflict]]:
    b = ctx.b
    draft = b.hosts[name]
    member = {"all", *draft.groups}
    for g in draft.groups:
        member |= ctx.ancestors[g]
    ordered = sorted(member, key=ctx.key.__getitem__)
    merged: dict[str, Any] = {}
    sources: dict[str, VarSource] = {}
    definers: dict[str, list[VarSource]] = {}
    for src in _layers(ctx, name, ordered, files):
        merged[src.name] = src.value
        sources[src.name] = src
        definers.setdefault(src.name, []).append(src)
    conflicts: list[VarConflict] = []
    for var, found in definers.items():
        winner = found[-1]
        decided = [(ctx.structural(s, winner), s) for s in found[:-1] if not same(s.value, winner.value)]
        losers = [(how, s) for how, s in decided if how is not None]
        if not losers:
            continue
        hows = {how for how, _ in losers}
        how = next(h for h in ("source", "depth", "name", "priority") if h in hows)
        conflicts.append(VarConflict(var=var, winner=winner, others=tuple(s for _, s in losers), host=name,
                                     reason=_REASONS[how], decided_by=how))
    return merged, sources, tuple(ordered), conflicts


def _alias_conflicts(host: Host) -> list[VarConflict]:
    """Legacy and modern spellings of one connection setting with different values."""
    if host.connection_settings is None:
        return []
    by_field: dict[str, list[str]] = {}
    for var, fname in aliases_of(type(host.connection_settings)).items():
        if host.vars.get(var) is not None and var in host.sources:
            by_field.setdefault(fname, []).append(var)
    out = []
    for names in by_field.values():
        first = host.sources[names[0]]
        others = tuple(host.sources[n] for n in names[1:] if not same(host.vars[n], first.value))
        if others:
            out.append(VarConflict(var=names[0], winner=first, others=others, host=host.name, decided_by="alias",
                                   reason="Ansible uses the legacy ansible_ssh_* name wherever it is set"))
    return out


def _check_names(b: InventoryBuilder, files: list[VarsFiles], kinds: set[str]
                 ) -> list[tuple[InventoryError, str | None]]:
    """A line for each var name that is a typo of an Ansible or fleetctl name (``kinds``: the
    connection kinds of the hosts, whose settings' names are known), each with the host whose own
    vars (inventory host vars, ``host_vars/HOST``) hold the name, or None for a group's."""
    from fleetctl.connection.registry import load_kind

    own = set(own_var_names())  # every var fleetctl reads, whatever kinds the hosts use
    known_ansible: set[str] = set()
    for kind in kinds:
        for var in aliases_of(load_kind(kind).settings_model):
            (known_ansible if var.startswith("ansible_") else own).add(var)
    defined = list(b.defined)
    for vf in files:
        for _values, sources in vf.groups.values():
            defined.extend((src, None) for src in sources.values())
        for host, (_values, sources) in vf.hosts.items():
            defined.extend((src, host) for src in sources.values())
    problems = []
    for src, owner in defined:
        problem = name_problem(src.name, frozenset(own), frozenset(known_ansible))
        if problem:
            problems.append((InventoryError(problem, file=src.file, line=src.line, key=src.key), owner))
    return problems


def _check_build_hosts(hosts: dict[str, Host], names: Iterable[str]) -> list[tuple[InventoryError, str | None]]:
    """A line for each ``build_host`` (of the typed ``hosts``) that is none of ``names``, with the
    host whose own vars set it, or None when a group's did."""
    names = list(names)
    problems = []
    for h in hosts.values():
        problem = build_host_problem(h.settings.build_host, names)
        if problem is not None:
            src = h.sources.get("build_host")
            problems.append((InventoryError(problem,
                                            file=src.file if src else None, line=src.line if src else None,
                                            key=src.key if src else f"{h.name}.build_host"),
                             h.name if src is None or src.group is None else None))
    return problems


def _own_error(exc: InventoryError, sources: dict[str, VarSource]) -> bool:
    """Whether every line of ``exc`` (a typed-settings refusal) is at a var of the host's own
    (inventory host vars, ``host_vars/HOST``: ``group`` None), not at a group's."""
    own = {(s.file, s.line, s.key) for s in sources.values() if s.group is None}
    return all((e.file, e.line, e.key) in own for e in getattr(exc, "errors", (exc,)))


def _typed(name: str, merged: dict[str, Any], sources: dict[str, VarSource], cache: dict[Any, Any]) -> Any:
    """:func:`typed_settings`, computed once per distinct set of the values the models read."""
    from fleetctl.connection.registry import KINDS, load_kind

    from .settings import kind_of

    raw = merged.get("ansible_connection")
    kind = kind_of(raw, KINDS)
    names = _read_by(kind, load_kind(kind).settings_model if kind else None)
    conn_src = sources.get("ansible_connection")
    key = (repr(raw), (conn_src.file, conn_src.line) if conn_src else None,
           tuple((k, repr(merged[k]), sources[k].base_dir) for k in names if k in merged))
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = typed_settings(name, merged, sources)
    return hit


_OWN = frozenset(aliases_of(HostSettings))
_PATHS = HOST_PATH_VARS | CONTROLLER_PATH_VARS


@functools.lru_cache(maxsize=None)
def _read_by(kind: str | None, model: Any) -> tuple[str, ...]:
    """The var names the typed settings of a host of ``kind`` read, sorted: the models' and every
    path var the shell-variable rule reads (:func:`.settings.shell_var_problem`), models' or not."""
    return tuple(sorted(_OWN | _PATHS | (set(aliases_of(model)) if model is not None else set())))


def finish(b: InventoryBuilder, vars_files: list[VarsFiles], *, source: str, sources: tuple[str, ...]) -> Inventory:
    """Merge every host's vars, type its settings, and freeze the inventory.

    A problem of one host's own vars (its inventory host vars or ``host_vars/HOST``: a var name
    that is a typo, a setting of the wrong type or form, a ``build_host`` that names no host) is
    kept on the host (:attr:`Host.refused`) and refused by every command that selects it
    (:meth:`Inventory.check_input`), as Ansible fails only the hosts it works on: an operator trial
    saw one host's ``ansible_prot`` stop a deploy of two others, and the nightly's metrics stay
    green. The same problem at a group's var is every member's, so it is the inventory's.

    Raises:
        InventoryError: a name that is both a host and a group, or a problem above at a group's
            var (with every host's own problems then); :class:`~fleetctl.errors.InventoryErrors`
            when there are several: every one found, a line each (new-user trial: a file with
            several bad vars named only the first, one fix per run).
    """
    from fleetctl.connection.registry import KINDS

    from .settings import kind_of

    for name, draft in b.hosts.items():
        if name in b.groups:
            raise InventoryError(
                f"{name!r} is both a host and a group; Ansible confuses the two (the host's vars go to the "
                f"group, and '{name}' selects the host where '!{name}' selects the group): rename one",
                file=draft.file, line=draft.line, key=name)
    ctx = _Context(b)
    conflicts = list(b.conflicts)
    hosts: dict[str, Host] = {}
    cache: dict[Any, Any] = {}
    members: dict[str, list[str]] = {}
    problems: list[InventoryError] = []  # the whole inventory's: every command refuses them
    own: dict[str, list[InventoryError]] = {name: [] for name in b.hosts}  # one host's: only where selected
    kinds: set[str] = set()
    drafts: dict[str, tuple[dict[str, Any], dict[str, VarSource], tuple[str, ...]]] = {}
    for name, draft in b.hosts.items():
        merged, sources_, groups, found = _merge_host(ctx, name, vars_files)
        conflicts.extend(found)
        drafts[name] = merged, sources_, groups
        try:
            settings, kind, conn, problem = _typed(name, merged, sources_, cache)
        except InventoryError as exc:  # every host's bad values, then every bad name: all at once
            kind = kind_of(merged.get("ansible_connection"), KINDS) or ""
            kinds.add(kind)
            (own[name] if _own_error(exc, sources_) else problems).append(exc)
            continue
        if conn is not None:
            kinds.add(kind)
        hosts[name] = host = Host(name=name, vars=MappingProxyType(merged), groups=groups,
                                  sources=MappingProxyType(sources_), line=draft.line, file=draft.file,
                                  settings=settings, kind=kind, connection_settings=conn, problem=problem)
        conflicts.extend(_alias_conflicts(host))
    for exc, owner in (*_check_names(b, vars_files, kinds - {""}), *_check_build_hosts(hosts, b.hosts)):
        (own[owner] if owner is not None else problems).append(exc)
    # refused whatever is selected: with every host's own problems too, so that one run names every fix
    error = InventoryErrors.of(problems + [e for found in own.values() for e in found]) if problems else None
    if error is not None:
        raise error
    for name, draft in b.hosts.items():
        refused = InventoryErrors.of(own[name])
        if name not in hosts:  # its own values could not be typed: a host every command that selects it refuses
            merged, sources_, groups = drafts[name]
            raw = merged.get("ansible_connection")
            hosts[name] = Host(name=name, vars=MappingProxyType(merged), groups=groups,
                               sources=MappingProxyType(sources_), line=draft.line, file=draft.file,
                               settings=HostSettings(), kind=kind_of(raw, KINDS) or str(raw or ""),
                               connection_settings=None, refused=refused)
        elif refused is not None:
            hosts[name] = dataclasses.replace(hosts[name], refused=refused)
    hosts = {name: hosts[name] for name in b.hosts}  # in the order they entered the inventory
    for name in b.groups:
        members[name] = b.members(name)
    groups = {
        name: Group(name=name, hosts=tuple(members[name]), children=tuple(g.children),
                    vars=MappingProxyType(dict(g.vars)), parents=tuple(g.parents), direct_hosts=tuple(g.hosts),
                    depth=ctx.depth[name], priority=g.priority, line=g.line, file=g.file)
        for name, g in b.groups.items()
    }
    return Inventory(path=Path(sources[0]) if sources else Path("."), hosts=MappingProxyType(hosts),
                     groups=MappingProxyType(groups), conflicts=tuple(conflicts), warnings=tuple(b.warnings),
                     source=source, sources=sources, vars_files=tuple(vars_files))
