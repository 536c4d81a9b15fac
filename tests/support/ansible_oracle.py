"""ansible-core as an oracle: what Ansible itself makes of an inventory and a host pattern.

Imported by tests/test_inventory_ansible.py only. ansible-core reads its configuration when first
imported, so :func:`oracle` points it at a private, empty home first (nothing in the real ``~``).
Values come back as plain Python (ansible-core 2.19 tags strings and containers with their origin).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

_HOME = tempfile.mkdtemp(prefix="fleetctl-ansible-home-")
_CONFIG = os.path.join(_HOME, "ansible.cfg")


def _setup() -> None:
    open(_CONFIG, "w").close()
    os.environ.update(
        ANSIBLE_CONFIG=_CONFIG, ANSIBLE_HOME=_HOME, ANSIBLE_LOCAL_TEMP=os.path.join(_HOME, "tmp"),
        ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_HOST_PATTERN_MISMATCH="ignore",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="1", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        ANSIBLE_TRANSFORM_INVALID_GROUP_CHARS="ignore", ANSIBLE_LOCALHOST_WARNING="0",
    )


def plain(value: Any) -> Any:
    """A value without Ansible's tags: ``str``, ``int``, ``float``, ``bool``, ``None``, ``list``, ``dict``."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)


@dataclass
class Answer:
    """What ansible-core made of the sources."""

    hosts: list[str]  # inventory.hosts, in creation order
    groups: list[str]  # inventory.groups, in creation order
    members: dict[str, list[str]]  # group -> Group.get_hosts() names
    direct: dict[str, list[str]]  # group -> Group.hosts names (join order)
    children: dict[str, list[str]]
    depth: dict[str, int]
    priority: dict[str, int]
    host_groups: dict[str, list[str]]  # host -> its groups in merge order (sort_groups)
    vars: dict[str, dict[str, Any]]  # host -> merged vars, as ansible-inventory --host
    ambiguous: set[str]  # groups whose get_hosts() order depends on set iteration order


class Oracle:
    """ansible-core's InventoryManager and VariableManager behind a small interface."""

    def __init__(self) -> None:
        _setup()
        from ansible import constants as C
        from ansible.errors import AnsibleError
        from ansible.inventory.helpers import sort_groups
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.plugins.inventory import expand_hostname_range
        from ansible.vars.manager import VariableManager

        self.C, self.AnsibleError, self.sort_groups = C, AnsibleError, sort_groups
        self.InventoryManager, self.DataLoader, self.VariableManager = InventoryManager, DataLoader, VariableManager
        self.expand_hostname_range = expand_hostname_range
        self._im = None

    def load(self, sources: list[str]) -> Answer:
        """Read ``sources`` as ``ansible-inventory -i S1 -i S2 ...`` does."""
        from ansible.plugins.vars import host_group_vars

        host_group_vars.FOUND.clear()  # its caches are keyed by path; tests reuse temporary paths
        host_group_vars.NAK.clear()
        loader = self.DataLoader()
        im = self.InventoryManager(loader=loader, sources=list(sources))
        vm = self.VariableManager(loader=loader, inventory=im)
        self._im = im
        groups = im.groups
        internal = set(self.C.INTERNAL_STATIC_VARS)
        host_vars = {}
        for name, host in im.hosts.items():
            found = vm.get_vars(host=host, include_hostvars=False, stage="all")
            host_vars[name] = {k: plain(v) for k, v in found.items() if k not in internal}
        return Answer(
            hosts=list(im.hosts),
            groups=list(groups),
            members={n: [h.name for h in g.get_hosts()] for n, g in groups.items()},
            direct={n: [h.name for h in g.hosts] for n, g in groups.items()},
            children={n: [c.name for c in g.child_groups] for n, g in groups.items()},
            depth={n: g.depth for n, g in groups.items()},
            priority={n: g.priority for n, g in groups.items()},
            host_groups={n: [g.name for g in self.sort_groups(h.get_groups())] for n, h in im.hosts.items()},
            vars=host_vars,
            ambiguous={n for n, g in groups.items() if _order_is_ambiguous(g)},
        )

    def select(self, pattern: str, limit: str | None = None) -> list[str] | str:
        """Host names ``pattern`` selects (``--limit LIMIT``) in the last loaded inventory, or the
        text of the error Ansible raises."""
        im = self._im
        im.clear_pattern_cache()
        im._hosts_patterns_cache = {}
        try:
            im.subset(limit)
            return [h.name for h in im.get_hosts(pattern)]
        except self.AnsibleError as exc:
            return f"error: {exc}"
        finally:
            im.subset(None)

    def expand_range(self, key: str) -> list[str] | str:
        """Ansible's own host-range expansion of an inventory host key."""
        try:
            return list(self.expand_hostname_range(key))
        except Exception as exc:  # noqa: BLE001 - any failure is an answer
            return f"error: {exc}"


def _order_is_ambiguous(group: Any) -> bool:
    """True when ``Group.get_hosts()`` walks a level holding two or more groups with unseen
    children: Ansible iterates that level as a ``set`` of objects, so the order can change from
    run to run."""
    seen = {group, *group.child_groups}
    level = set(group.child_groups) | {group}
    while level:
        parents = [g for g in level if any(c not in seen for c in g.child_groups)]
        if len(parents) > 1:
            return True
        nxt = {c for g in level for c in g.child_groups} - seen
        seen |= nxt
        level = nxt
    return False


_ORACLE: Oracle | None = None


def oracle() -> Oracle:
    """The one :class:`Oracle` of this process."""
    global _ORACLE
    if _ORACLE is None:
        _ORACLE = Oracle()
    return _ORACLE
