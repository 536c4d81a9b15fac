"""The inventory being built: hosts, groups and vars, added source by source as Ansible's
``InventoryData`` adds them.

Every source (YAML, INI, ``--list`` JSON, ...) calls the same few operations, so that they all mean
what they mean in Ansible (``ansible.inventory.data``, ``group``, ``host``):

- :meth:`InventoryBuilder.add_group` creates a group once; groups keep their creation order.
- :meth:`InventoryBuilder.add_host` creates a host once (its ``name:PORT`` port applies only
  then) and adds it to a group; a group keeps its hosts in the order they joined it.
- :meth:`InventoryBuilder.add_child` nests a group, refusing loops.
- :meth:`InventoryBuilder.set_var` sets a group or host var; a value set again replaces the old one
  whole, mappings too (Ansible's default ``hash_behaviour=replace``). One file setting one var of
  one host or group to two values is recorded as a conflict; a later *source* replacing an earlier
  one is the point of giving several ``-i``.
- :meth:`InventoryBuilder.reconcile` makes every parentless group a child of ``all`` and puts in
  ``ungrouped`` exactly the hosts that are in no other group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleetctl.errors import InventoryError

from .vars import VarConflict, VarSource, describe, same

__all__ = ["GroupDraft", "HostDraft", "InventoryBuilder", "PRIORITY_VAR"]

PRIORITY_VAR = "ansible_group_priority"


@dataclass
class GroupDraft:
    name: str
    file: str | None = None
    line: int | None = None
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, VarSource] = field(default_factory=dict)
    priority: int = 1


@dataclass
class HostDraft:
    name: str
    file: str | None = None
    line: int | None = None
    vars: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, VarSource] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)


@dataclass
class VarsFiles:
    """``group_vars/`` and ``host_vars/`` beside one source: entity name -> (vars, sources)."""

    folder: str
    groups: dict[str, tuple[dict[str, Any], dict[str, VarSource]]] = field(default_factory=dict)
    hosts: dict[str, tuple[dict[str, Any], dict[str, VarSource]]] = field(default_factory=dict)


class InventoryBuilder:
    """Mutable inventory under construction; :func:`fleetctl.inventory.merge.finish` freezes it."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupDraft] = {}
        self.hosts: dict[str, HostDraft] = {}
        self.vars_files: list[VarsFiles] = []
        # var definitions whose names are checked, each with the host whose own vars set it (None: a group's)
        self.defined: list[tuple[VarSource, str | None]] = []
        self.conflicts: list[VarConflict] = []
        self.warnings: list[str] = []
        self.sources: list[str] = []
        self.add_group("all")
        self.add_group("ungrouped")
        self.add_child("all", "ungrouped")

    # -- structure ----------------------------------------------------------------------------

    def add_group(self, name: str, *, file: str | None = None, line: int | None = None) -> GroupDraft:
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = GroupDraft(name, file, line)
        elif group.line is None and line is not None:
            group.file, group.line = file, line
        return group

    def ancestors(self, name: str) -> set[str]:
        seen: set[str] = set()
        stack = list(self.groups[name].parents)
        while stack:
            parent = stack.pop()
            if parent not in seen:
                seen.add(parent)
                stack.extend(self.groups[parent].parents)
        return seen

    def add_child(self, parent: str, child: str, *, file: str | None = None, line: int | None = None,
                  key: str | None = None) -> None:
        if child == "all":
            raise InventoryError("'all' contains every group; it cannot be a child of another group",
                                 file=file, line=line, key=key)
        if child == parent:
            raise InventoryError(f"group {child!r} cannot be a child of itself", file=file, line=line, key=key)
        if child in self.ancestors(parent):
            raise InventoryError(
                f"group {child!r} is an ancestor of {parent!r}; making it a child of {parent!r} creates a loop",
                file=file, line=line, key=key)
        if child not in self.groups[parent].children:
            self.groups[parent].children.append(child)
            if parent not in self.groups[child].parents:
                self.groups[child].parents.append(parent)

    def add_host(self, name: str, group: str | None = None, *, file: str | None = None, line: int | None = None,
                 port: VarSource | None = None) -> HostDraft:
        """Add ``name`` (to ``group``); ``port`` is a ``name:PORT`` key's port, which Ansible applies
        only when the host is created."""
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = HostDraft(name, file, line)
            if port is not None:
                self.set_var(host, port)
        elif port is not None:
            old = host.sources.get("ansible_port")
            if old is not None and old.file == port.file and not same(old.value, port.value):
                self.conflicts.append(VarConflict("ansible_port", old, (port,), host=name,
                                                  reason="Ansible applies only the first 'name:PORT' of a host"))
        if group is not None and name not in self.groups[group].hosts:
            self.groups[group].hosts.append(name)
            host.groups.append(group)
        return host

    # -- variables ----------------------------------------------------------------------------

    def set_var(self, entity: GroupDraft | HostDraft, src: VarSource, *, check_name: bool = True) -> None:
        """Ansible's ``set_variable``: the value replaces any earlier one whole."""
        if check_name:
            self.defined.append((src, entity.name if isinstance(entity, HostDraft) else None))
        if isinstance(entity, GroupDraft) and src.name == PRIORITY_VAR:
            entity.priority = _priority(src)
            return
        previous = entity.sources.get(src.name)
        if previous is not None and previous.file == src.file and previous.line != src.line \
                and not same(previous.value, src.value):
            is_host = isinstance(entity, HostDraft)
            self.conflicts.append(VarConflict(
                var=src.name, winner=src, others=(previous,),
                host=entity.name if is_host else None, group=None if is_host else entity.name,
                reason=f"{'host listed' if is_host else 'group declared'} more than once; the later value wins"))
        entity.vars[src.name] = src.value
        entity.sources[src.name] = src

    # -- finishing ----------------------------------------------------------------------------

    def reconcile(self) -> None:
        """Ansible's ``reconcile_inventory`` ("Default groups")."""
        for name in list(self.groups):
            if name != "all" and not self.groups[name].parents:
                self.add_child("all", name)
        ungrouped = self.groups["ungrouped"]
        for host in self.hosts.values():
            others = [g for g in host.groups if g not in ("all", "ungrouped")]
            if others and "ungrouped" in host.groups:
                host.groups.remove("ungrouped")
                ungrouped.hosts.remove(host.name)
            elif not others and "ungrouped" not in host.groups:
                host.groups.append("ungrouped")
                ungrouped.hosts.append(host.name)

    def depths(self) -> dict[str, int]:
        """Longest path from ``all`` for every group (``all`` is 0), Ansible's ``Group.depth``."""
        depth: dict[str, int] = {"all": 0}
        for name in self.groups:
            stack = [name]
            while stack:
                top = stack[-1]
                if top in depth:
                    stack.pop()
                    continue
                pending = [p for p in self.groups[top].parents if p not in depth]
                if pending:
                    stack.extend(pending)
                else:
                    depth[top] = 1 + max((depth[p] for p in self.groups[top].parents), default=-1)
                    stack.pop()
        return depth

    def members(self, name: str) -> list[str]:
        """Ansible's ``Group.get_hosts``: own hosts in join order, then each level of descendants'.

        Within a level, groups come in the order their parents list them (where more than one
        group of a level has children, Ansible's own order depends on object ids and may differ
        from run to run; fleetctl's is fixed).
        """
        ordered = [name, *self.groups[name].children]
        seen = set(ordered)
        level = list(self.groups[name].children)
        while level:
            nxt: list[str] = []
            for g in level:
                for c in self.groups[g].children:
                    if c not in seen:
                        seen.add(c)
                        ordered.append(c)
                        nxt.append(c)
            level = nxt
        hosts: dict[str, None] = {}
        for g in ordered:
            hosts.update(dict.fromkeys(self.groups[g].hosts))
        return list(hosts)


def _priority(src: VarSource) -> int:
    value = src.value
    if isinstance(value, bool) or not (
        isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit())
    ):
        raise InventoryError(f"must be an integer, not {describe(value)}", file=src.file, line=src.line, key=src.key)
    return int(value)
