"""The inventory as ``ansible-inventory`` and ``ansible --list-hosts`` print it.

- :func:`list_json`: ``ansible-inventory --list`` (each group's own hosts and its children, empty
  groups left out, every host's merged vars under ``_meta.hostvars``), the same JSON a dynamic
  inventory script prints, so fleetctl's view of any source can be fed back to Ansible;
- :func:`graph`: ``ansible-inventory --graph [GROUP] [--vars]``;
- :func:`host_vars`: ``ansible-inventory --host HOST``;
- :func:`list_hosts`: ``ansible PATTERN --list-hosts``.

:func:`dumps` writes JSON as ``ansible-inventory`` does (keys sorted, 4-space indent). Nothing here
prints; the CLI does, after redacting secrets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fleetctl.errors import InventoryError

from .model import Group, Inventory, jsonable

__all__ = ["list_json", "graph", "host_vars", "list_hosts", "dumps", "group_vars"]


def dumps(data: Any) -> str:
    """JSON as ``ansible-inventory`` prints it: keys sorted, 4-space indent, ASCII."""
    return json.dumps(jsonable(data), sort_keys=True, indent=4)


def list_json(inv: Inventory, *, limit: str | None = None) -> dict[str, Any]:
    """``ansible-inventory --list [--limit LIMIT]`` as a JSON-ready dict.

    Raises:
        PatternError: ``limit`` is malformed or selects nothing.
    """
    available = {h.name for h in inv.select("all", limit=limit)} if limit is not None else set(inv.hosts)
    seen: set[str] = set()
    out: dict[str, Any] = {}

    def visit(group: Group) -> None:
        entry: dict[str, Any] = {}
        if group.name != "all":
            entry["hosts"] = [h for h in group.direct_hosts if h in available]
        entry["children"] = list(group.children)
        for child in group.children:
            if child not in seen:
                visit(inv.groups[child])
                seen.add(child)
        entry = {k: v for k, v in entry.items() if v}
        if entry:
            out[group.name] = entry

    visit(inv.groups["all"])
    hostvars = {h.name: dict(h.vars) for h in inv if h.name in available and h.vars}
    out["_meta"] = {"hostvars": hostvars, "profile": "inventory_legacy"}
    return out


def group_vars(inv: Inventory, group: Group) -> dict[str, Any]:
    """A group's vars as ``ansible-inventory --graph --vars`` shows them: its inventory vars, then
    its ``group_vars/`` files (in source order), and ``ansible_group_priority`` when not 1."""
    out = dict(group.vars)
    for vf in inv.vars_files:
        out.update(vf.groups.get(group.name, ({}, {}))[0])
    if group.priority != 1:
        out["ansible_group_priority"] = group.priority
    return out


def _show_vars(values: Mapping[str, Any], depth: int) -> list[str]:
    return [_graph_name(f"{{{name} = {value}}}", depth) for name, value in sorted(values.items())]


def _graph_name(name: str, depth: int) -> str:
    return "  |" * depth + "--" + name if depth else name


def graph(inv: Inventory, group: str = "all", *, show_vars: bool = False) -> str:
    """``ansible-inventory --graph [GROUP] [--vars]``: the group tree, each group's own hosts.

    Raises:
        InventoryError: ``group`` is not a group of the inventory.
    """
    if group not in inv.groups:
        raise InventoryError(f"--graph takes a group name; {group!r} is not a group in {inv.source}")
    lines: list[str] = []

    def visit(g: Group, depth: int) -> None:
        lines.append(_graph_name(f"@{g.name}:", depth))
        for child in g.children:
            visit(inv.groups[child], depth + 1)
        if g.name != "all":
            for name in g.direct_hosts:
                lines.append(_graph_name(name, depth + 1))
                if show_vars:
                    lines.extend(_show_vars(inv.hosts[name].vars, depth + 2))
        if show_vars:
            lines.extend(_show_vars(group_vars(inv, g), depth + 1))

    visit(inv.groups[group], 0)
    return "\n".join(lines)


def host_vars(inv: Inventory, pattern: str) -> dict[str, Any]:
    """``ansible-inventory --host HOST``: the merged vars of the one host ``pattern`` selects.

    Raises:
        InventoryError: the pattern selects no host or more than one.
    """
    hosts = inv.select(pattern)
    if len(hosts) != 1:
        raise InventoryError(f"--host wants one host; {pattern!r} selects {len(hosts)} in {inv.source}")
    return dict(hosts[0].vars)


def list_hosts(names: list[str]) -> str:
    """``ansible PATTERN --list-hosts``: ``  hosts (N):`` then one indented name a line."""
    return "\n".join([f"  hosts ({len(names)}):", *(f"    {n}" for n in names)])
