"""Ansible-compatible YAML inventories: hosts, groups, host vars, host patterns.

An existing Ansible YAML inventory works unchanged. The format is that of Ansible's ``yaml``
inventory plugin (https://docs.ansible.com/ansible/latest/collections/ansible/builtin/yaml_inventory.html,
https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html)::

    all:
      vars: {user: ubuntu}
      children:
        gpu-nodes:
          vars: {venv: /opt/venv}
          hosts:
            gpu[01:04]:
            gpu05: {ansible_host: 10.0.0.5, port: 2222}

Rules, each as Ansible has it (section names refer to the inventory guide above):

- The top level maps group names to groups. ``all:`` is the usual one; any other top-level group is
  accepted and, like every group that has no parent, becomes a child of ``all``. A group is a
  mapping with ``hosts``, ``vars`` and ``children``, each a mapping (a lone string for ``hosts`` or
  ``children`` is one name, as the yaml plugin converts it); an empty group is ``name:`` with
  nothing after it. ``children`` nest to any depth; a group may appear in several places (its
  hosts, vars and children add up) but never inside itself.
- Default groups: every host is in ``all``; a host in no group but ``all`` is in ``ungrouped``
  ("Default groups").
- A host entry is ``name:`` (no vars) or ``name: {VAR: VALUE, ...}``; a host may be listed in
  several groups, and its vars from every listing add up, later ones overriding earlier ones.
  ``name:PORT`` sets ``ansible_port`` as the yaml plugin does.
- Ranges ``node[01:16]``, ``node[a:f]``, ``node[0:10:2]`` expand as in "Adding ranges of hosts";
  ClusterShell's ``node[01-16,20]`` is accepted too. See :mod:`fleetctl.hostpattern`.
- Variables ("How variables are merged"): for each host, the vars of all its groups are merged in
  Ansible's order (``ansible.inventory.helpers.sort_groups``): by group depth (``all`` is 0, its
  children 1, theirs 2, ...; a group reached by paths of different lengths has the longest),
  then by ``ansible_group_priority`` (default 1, larger wins), then by group name in ASCII order;
  later groups override earlier ones, and the host's own vars override every group. So
  ``all < parent < child < host``, and of two sibling groups the one later in ASCII order wins.
  Values replace whole (Ansible's default ``hash_behaviour=replace``); only a mapping set twice on
  the *same* group or host is merged one level, as Ansible's ``set_variable`` does.
  Whenever this order, not the structure, decides between different values (two groups neither of
  which is the other's ancestor; a host listed twice), the decision is recorded in
  :attr:`Inventory.conflicts`; :meth:`Inventory.check_hosts` (run by the CLI on the hosts a
  command selects) refuses it unless ``ansible_group_priority`` decided or the host sets the var.
- Connection vars ("Connecting to hosts: behavioral inventory parameters") and their short forms
  name one setting each; whichever spelling the most specific level uses wins:

  ======================= =================================================================
  setting                 accepted names
  ======================= =================================================================
  ``address``             ``ansible_host``, ``ansible_ssh_host``, ``host``
  ``port``                ``ansible_port``, ``ansible_ssh_port``, ``port`` (int 1..65535)
  ``user``                ``ansible_user``, ``ansible_ssh_user``, ``user``
  ``key_file``            ``ansible_ssh_private_key_file``, ``ansible_private_key_file``, ``key_file``
  ``connection``          ``ansible_connection``, ``connection`` (``ssh`` or ``local``)
  ``venv``, ``cuda_home``, ``workdir``, ``known_hosts``   fleetctl's own (strings)
  ======================= =================================================================

  ``null`` means "not said": the SSH layer then lets ``~/.ssh/config`` decide. ``key_file`` and
  ``known_hosts`` expand ``~`` and resolve relative to the inventory file's folder; ``key_file``
  must exist.

Where fleetctl is stricter than Ansible (which warns and carries on): unknown group keys, a
section that is not a mapping, wrong types for the settings above, duplicate keys, templated
(``{{ }}``) settings and ``!vault`` values are errors, each one line
``FILE:LINE: KEY: MESSAGE`` (:class:`~fleetctl.errors.InventoryError`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from fleetctl.errors import InventoryError
from fleetctl.hostpattern import (
    HostIndex,
    NodesetError,
    _split_top,
    expand_name,
    expand_nodeset,
    fold_hosts,
    select_hosts,
)
from fleetctl.yamlload import load_yaml, where

__all__ = [
    "SETTINGS",
    "Host",
    "Group",
    "Inventory",
    "VarSource",
    "VarConflict",
    "load_inventory",
    "expand_nodeset",
    "fold_hosts",
]

SETTINGS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "address": ("ansible_host", "ansible_ssh_host", "host"),
        "port": ("ansible_port", "ansible_ssh_port", "port"),
        "user": ("ansible_user", "ansible_ssh_user", "user"),
        "key_file": ("ansible_ssh_private_key_file", "ansible_private_key_file", "key_file"),
        "connection": ("ansible_connection", "connection"),
        "venv": ("venv",),
        "cuda_home": ("cuda_home",),
        "workdir": ("workdir",),
        "known_hosts": ("known_hosts",),
    }
)
"""Each typed setting and the var names that set it, most Ansible-like first."""

_ALIAS = {alias: setting for setting, aliases in SETTINGS.items() for alias in aliases}
_GROUP_KEYS = ("hosts", "vars", "children")
_CONNECTIONS = ("ssh", "local")
_PRIORITY_VAR = "ansible_group_priority"


# -- the model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VarSource:
    """Where one variable's value was set.

    Attributes:
        name: the var name as written (``ansible_user`` or ``user``).
        value: the value as written.
        group: the group whose ``vars`` set it, or None for host vars.
        file: the inventory file.
        line: 1-based line of the var (of the host key for a ``name:PORT`` port).
        key: dotted path of the var in the file.
    """

    name: str
    value: Any
    group: str | None
    file: str
    line: int | None
    key: str

    @property
    def scope(self) -> str:
        """``"group 'gpu'"`` or ``"host vars"``, for messages."""
        return f"group {self.group!r}" if self.group is not None else "host vars"


@dataclass(frozen=True)
class VarConflict:
    """A variable whose value Ansible's merge order, not the inventory's structure, decided.

    Recorded at load time (never raised there); :meth:`Inventory.check_hosts` refuses the ones
    that decide a selected host's value. ``str()`` is one line
    ``FILE:LINE: KEY: MESSAGE`` pointing at the winning value.

    Attributes:
        var: the var name, or the setting name (``user``) when spellings of one setting differ.
        winner: the value that applies.
        others: the values it overrode.
        host: the host concerned, or None when ``group`` is.
        group: the group concerned when a group defined twice set different values.
        reason: why the winner won, in words.
        decided_by: ``"order"`` (a host listed, or a group declared, twice: the later value),
            ``"depth"`` (the deeper of two unrelated groups), ``"name"`` (groups of one depth, in
            ASCII order) or ``"priority"`` (``ansible_group_priority``: the user's explicit choice).
    """

    var: str
    winner: VarSource
    others: tuple[VarSource, ...]
    host: str | None = None
    group: str | None = None
    reason: str = ""
    decided_by: str = "order"

    @property
    def message(self) -> str:
        subject = f"host {self.host!r}" if self.host is not None else f"group {self.group!r}"
        lost = "; ".join(
            f"{o.value!r} from {o.scope} (line {o.line})" if o.line else f"{o.value!r} from {o.scope}"
            for o in self.others
        )
        return (
            f"{subject} gets {self.var} = {self.winner.value!r} from {self.winner.scope}, "
            f"overriding {lost}: {self.reason}"
        )

    def __str__(self) -> str:
        return str(
            InventoryError(self.message, file=self.winner.file, line=self.winner.line, key=self.winner.key)
        )


@dataclass(frozen=True)
class Host:
    """One inventory host with its merged vars.

    Attributes:
        name: the inventory name (``inventory_hostname``).
        vars: merged vars, read-only, in the precedence described in the module docstring.
        groups: every group the host belongs to, ancestors, ``all`` and ``ungrouped`` included,
            in merge order (lowest precedence first, so ``groups[0] == "all"``).
        base_dir: the inventory file's folder, against which relative ``key_file`` and
            ``known_hosts`` resolve (None: the current folder).
        sources: var name -> where its value was set.
        line: the line where the host was first listed.

    The settings below read ``vars`` under every accepted spelling (see :data:`SETTINGS`). None
    means the inventory does not say, and the SSH layer leaves it to ``~/.ssh/config``.
    """

    name: str
    vars: Mapping[str, Any] = field(default_factory=dict)
    groups: tuple[str, ...] = ("all",)
    base_dir: str | None = field(default=None, compare=False)
    sources: Mapping[str, VarSource] = field(default_factory=dict, compare=False, repr=False)
    line: int | None = field(default=None, compare=False, repr=False)

    def __hash__(self) -> int:
        return hash(self.name)

    def _setting(self, setting: str) -> Any:
        for alias in SETTINGS[setting]:
            if alias in self.vars:
                return self.vars[alias]
        return None

    def _path(self, setting: str) -> str | None:
        value = self._setting(setting)
        if value is None:
            return None
        return _resolve_path(str(value), self.base_dir)

    @property
    def address(self) -> str:
        """Where to connect (``ansible_host``/``host``); the inventory name when not said."""
        value = self._setting("address")
        return str(value) if value is not None else self.name

    @property
    def port(self) -> int | None:
        """SSH port (``ansible_port``/``port``), or None for ssh_config's (normally 22)."""
        value = self._setting("port")
        return int(value) if value is not None else None

    @property
    def user(self) -> str | None:
        """Login user (``ansible_user``/``user``), or None for ssh_config's / the local user."""
        value = self._setting("user")
        return str(value) if value is not None else None

    @property
    def key_file(self) -> str | None:
        """Private key (``ansible_ssh_private_key_file``/``key_file``): absolute, ``~`` expanded."""
        return self._path("key_file")

    @property
    def connection(self) -> Literal["ssh", "local"]:
        """``"ssh"`` (the default) or ``"local"`` (Ansible's ``ansible_connection: local``)."""
        value = self._setting("connection")
        return "local" if value == "local" else "ssh"

    @property
    def venv(self) -> str | None:
        """The remote Python environment builds and installs use (its ``bin/python3``)."""
        value = self._setting("venv")
        return str(value) if value is not None else None

    @property
    def cuda_home(self) -> str | None:
        """The remote CUDA toolkit folder, or None to detect it."""
        value = self._setting("cuda_home")
        return str(value) if value is not None else None

    @property
    def workdir(self) -> str | None:
        """The remote working folder, or None for fleetctl's default."""
        value = self._setting("workdir")
        return str(value) if value is not None else None

    @property
    def known_hosts(self) -> str | None:
        """A known_hosts file (absolute, ``~`` expanded), or None for OpenSSH's default."""
        return self._path("known_hosts")


@dataclass(frozen=True)
class Group:
    """One inventory group.

    Attributes:
        name: the group name.
        hosts: every host in the group, its descendants' included, in inventory order.
        children: direct child groups, in the order they were added.
        vars: the group's own vars (not inherited), read-only.
        parents: direct parent groups (``all`` for a group declared under ``all:`` or at top).
        direct_hosts: hosts listed directly under this group's ``hosts:``, in inventory order.
        depth: longest path from ``all`` (``all`` is 0); the first key of merge order.
        priority: ``ansible_group_priority`` (default 1); the second key of merge order.
        line: the line where the group was first declared (None for implicit groups).
    """

    name: str
    hosts: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    parents: tuple[str, ...] = ()
    direct_hosts: tuple[str, ...] = ()
    depth: int = 0
    priority: int = 1
    line: int | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True)
class Inventory:
    """A loaded inventory.

    Attributes:
        path: the inventory file, as given.
        hosts: host name -> :class:`Host`, in inventory order (order of first listing in the file).
        groups: group name -> :class:`Group`, ``all`` and ``ungrouped`` always present.
        conflicts: values decided by merge order rather than structure (see :class:`VarConflict`).
        warnings: one-line notes on things Ansible accepts but that are likely mistakes (a name
            that is both a host and a group).
    """

    path: Path
    hosts: Mapping[str, Host]
    groups: Mapping[str, Group]
    conflicts: tuple[VarConflict, ...] = ()
    warnings: tuple[str, ...] = ()
    source: str = field(default="", compare=False)
    _index: HostIndex | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.source:
            object.__setattr__(self, "source", str(self.path))
        index = HostIndex(
            hosts=tuple(self.hosts),
            groups={name: group.hosts for name, group in self.groups.items()},
            source=self.source,
        )
        object.__setattr__(self, "_index", index)

    def select(self, pattern: str | Sequence[str], limit: str | None = None) -> list[Host]:
        """Hosts a host pattern selects, in inventory order.

        Args:
            pattern: Ansible/ClusterShell host pattern (``gpu-nodes``, ``a:b``, ``a,b``, ``a:&b``,
                ``a:!b``, ``node[01:16]``, ``node[01-16,20]``, ``gpu*``, ``~regex``,
                ``group[0:3]``); see :mod:`fleetctl.hostpattern`.
            limit: another pattern intersected with the result (``--limit``); ``@FILE`` reads
                patterns from FILE.

        Returns:
            The selected hosts, at least one, each once.

        Raises:
            fleetctl.hostpattern.PatternError: (an :class:`InventoryError`) a term names no host
                or group ("pattern 'gpu-nodez' matches no host or group in inventory.yaml; did
                you mean 'gpu-nodes'?"), a range/regex is malformed, or nothing is selected.
        """
        assert self._index is not None
        return [self.hosts[name] for name in select_hosts(pattern, self._index, limit=limit)]

    def check_hosts(self, hosts: Iterable[Host], *, venv: bool = True) -> None:
        """Refuse, before anything connects, settings of the chosen hosts that cannot work.

        - A conflict (:attr:`conflicts`) that decides one of these hosts' values, unless
          ``ansible_group_priority`` decided it: two unrelated groups of a host, a host listed
          twice or a group declared twice, setting one var to different values. Set the var on
          the host itself (or give one group a higher priority) to decide.
        - For an ssh host, a ``key_file`` that group or others may access (OpenSSH refuses such a
          key: "UNPROTECTED PRIVATE KEY FILE"), when it is ours or readable by everyone.
        - With ``venv``, for a local host, a ``venv`` var that is not a Python environment
          (no ``bin/python3``). For an ssh host that is a remote preflight, not input.

        Raises:
            InventoryError: the first problem, one line naming the file, the line and the key.
        """
        chosen = {h.name: h for h in hosts}
        for c in self.conflicts:
            if c.decided_by == "priority" or not _conflict_differs(c):
                continue
            for h in chosen.values():
                if (c.host == h.name or (c.host is None and c.group in h.groups)) and h.sources.get(
                    c.winner.name
                ) == c.winner:
                    raise InventoryError(_conflict_message(c), file=c.winner.file, line=c.winner.line,
                                         key=c.winner.key)
        for h in chosen.values():
            if h.connection == "ssh":
                _check_key_file(h)
            elif venv:
                _check_local_venv(h)

    def get(self, name: str) -> Host | None:
        """The host called ``name``, or None."""
        return self.hosts.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.hosts

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts.values())

    def __len__(self) -> int:
        return len(self.hosts)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy for run records: path, every host's vars and groups, every group."""
        return {
            "path": self.source,
            "hosts": {
                h.name: {"vars": _jsonable(dict(h.vars)), "groups": list(h.groups)} for h in self.hosts.values()
            },
            "groups": {
                g.name: {"hosts": list(g.hosts), "children": list(g.children), "vars": _jsonable(dict(g.vars))}
                for g in self.groups.values()
            },
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _conflict_differs(c: VarConflict) -> bool:
    """False when the 'conflict' is a mapping merged one level that overrides no key."""
    w = c.winner.value
    for o in c.others:
        if not (isinstance(w, Mapping) and isinstance(o.value, Mapping)):
            return True
        if any(k not in w or not _same(w[k], v) for k, v in o.value.items()):
            return True
    return False


def _conflict_message(c: VarConflict) -> str:
    def one(src: VarSource) -> str:
        return f"{src.name} = {_shown(src.value)} (line {src.line})" if src.line else f"{src.name} = {_shown(src.value)}"

    values = " and ".join(one(s) for s in (*c.others, c.winner))
    if c.decided_by == "order":
        if c.host is not None:
            return f"host {c.host!r} is listed more than once with different values: {values}; keep one"
        return f"group {c.group!r} is declared more than once with different values: {values}; keep one"
    names = {s.name for s in (*c.others, c.winner)}
    var = names.pop() if len(names) == 1 else c.var  # the name as written, or the setting's
    groups = ", ".join(repr(s.group) for s in c.others) + f" and {c.winner.group!r}"
    why = "the deeper group" if c.decided_by == "depth" else "the group last in ASCII order"
    return (
        f"host {c.host!r} is in groups {groups}, neither inside the other, that set {var} differently: "
        f"{values}; only Ansible's merge order would pick {why}; set {var} in the host's own vars "
        f"or give one group a higher ansible_group_priority"
    )


def _var_source(host: Host, setting: str) -> VarSource | None:
    for alias in SETTINGS[setting]:
        if alias in host.vars:
            return host.sources.get(alias)
    return None


def _source_error(host: Host, setting: str, message: str) -> InventoryError:
    src = _var_source(host, setting)
    if src is None:
        return InventoryError(f"host {host.name!r}: {message}")
    return InventoryError(message, file=src.file, line=src.line, key=src.key)


def _check_key_file(host: Host) -> None:
    path = host.key_file
    if path is None:
        return
    try:
        st = os.stat(path)
    except OSError:
        return  # checked at load time; a race or an unreadable folder is the SSH layer's to report
    mode = st.st_mode & 0o777
    if mode & 0o077 and (st.st_uid == os.getuid() or mode & 0o004):
        src = _var_source(host, "key_file")
        shown = repr(src.value) if src is not None else repr(path)
        raise _source_error(
            host, "key_file",
            f"key file {shown} has mode {mode:04o}: a private key must not be accessible by group or "
            f"others (OpenSSH refuses it: UNPROTECTED PRIVATE KEY FILE); chmod 600 {path}",
        )


def _check_local_venv(host: Host) -> None:
    venv = host.venv
    if host.connection != "local" or venv is None:
        return
    root = os.path.abspath(os.path.expanduser(venv))
    python = os.path.join(root, "bin", "python3")
    shown = f"venv {venv!r}" + ("" if root == venv else f" ({root})")
    if not os.path.exists(root):
        problem = f"{shown} of local host {host.name!r} does not exist"
    elif not os.path.isdir(root):
        problem = f"{shown} of local host {host.name!r} is not a folder"
    elif not (os.path.isfile(python) and os.access(python, os.X_OK)):
        problem = (
            f"venv {venv!r} of local host {host.name!r} is not a Python environment: {python} is missing "
            f"(create one with: python3 -m venv {root})"
        )
    else:
        return
    raise _source_error(host, "venv", problem)


def _resolve_path(value: str, base_dir: str | None) -> str:
    expanded = os.path.expanduser(value)
    if not os.path.isabs(expanded):
        expanded = os.path.join(base_dir or os.getcwd(), expanded)
    return os.path.normpath(expanded)


# -- loading ------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    """A value as an error message shows it, with its YAML type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, (int, float)):
        return f"{value!r} (a number)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{str(value)!r} (a {type(value).__name__})"


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and a == b
    except RecursionError:  # pragma: no cover - the loader refuses recursive aliases
        return a is b


@dataclass
class _GroupDraft:
    name: str
    line: int | None
    vars: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, VarSource] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    priority: int = 1


@dataclass
class _HostDraft:
    name: str
    line: int | None
    vars: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, VarSource] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)


class _Builder:
    """Walks the loaded YAML in document order and builds the :class:`Inventory`."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.base_dir = os.path.dirname(os.path.abspath(file))
        self.groups: dict[str, _GroupDraft] = {}
        self.hosts: dict[str, _HostDraft] = {}
        self.conflicts: list[VarConflict] = []
        self.warnings: list[str] = []
        self._group("all", None)
        self._group("ungrouped", None)

    def error(self, message: str, line: int | None, key: str | None) -> InventoryError:
        return InventoryError(message, file=self.file, line=line, key=key)

    # -- structure ------------------------------------------------------------------------------

    def build(self, data: Any) -> Inventory:
        if data is None:
            raise self.error("inventory is empty; expected 'all:' with hosts, vars or children", 1, None)
        if not isinstance(data, Mapping):
            raise self.error(
                f"an inventory is a mapping of groups ('all:' at the top), not {_describe(data)}",
                where(data) or 1,
                None,
            )
        if "plugin" in data:
            raise self.error(
                "this is an inventory plugin configuration, not a YAML inventory; "
                "fleetctl reads YAML inventories only",
                where(data, "plugin"),
                "plugin",
            )
        for name, group_data in data.items():
            line = where(data, name)
            if name in _GROUP_KEYS:
                raise self.error(f"'{name}:' cannot be at the top level; put it under 'all:'", line, str(name))
            self._parse_group(name, group_data, key=str(name), line=line, parent=None)
        return self._finish()

    def _group(self, name: str, line: int | None) -> _GroupDraft:
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = _GroupDraft(name, line)
        elif group.line is None:
            group.line = line
        return group

    def _ancestors(self, name: str) -> set[str]:
        seen: set[str] = set()
        stack = list(self.groups[name].parents)
        while stack:
            parent = stack.pop()
            if parent not in seen:
                seen.add(parent)
                stack.extend(self.groups[parent].parents)
        return seen

    def _add_child(self, parent: str, child: str, line: int | None, key: str) -> None:
        if child == "all":
            raise self.error("'all' contains every group; it cannot be a child of another group", line, key)
        if child == parent:
            raise self.error(f"group {child!r} cannot be a child of itself", line, key)
        if child in self._ancestors(parent):
            raise self.error(
                f"group {child!r} is an ancestor of {parent!r}; making it a child of {parent!r} creates a loop",
                line,
                key,
            )
        if child not in self.groups[parent].children:
            self.groups[parent].children.append(child)
            self.groups[child].parents.append(parent)

    def _parse_group(self, name: Any, data: Any, *, key: str, line: int | None, parent: str | None) -> None:
        """One group mapping (yaml plugin's ``_parse_group``), recursing into ``children``."""
        if not isinstance(name, str) or not name.strip():
            raise self.error(f"a group name must be a non-empty string, not {_describe(name)}", line, key)
        group = self._group(name, line)
        if parent is not None:
            self._add_child(parent, name, line, key)
        if data is None:
            return
        if not isinstance(data, Mapping):
            raise self.error(
                f"group {name!r} must be a mapping with hosts, vars or children, not {_describe(data)}",
                line,
                key,
            )
        for section, value in data.items():
            s_line = where(data, section) or line
            s_key = f"{key}.{section}"
            if section not in _GROUP_KEYS:
                raise self.error(self._unknown_group_key(name, section), s_line, s_key)
            if value is None:
                continue
            if section == "vars":
                if not isinstance(value, Mapping):
                    raise self.error(
                        f"vars of group {name!r} must be a mapping of variable names to values, "
                        f"not {_describe(value)}",
                        s_line,
                        s_key,
                    )
                self._check_vars(value, s_key, host=None)
                for var, var_value in value.items():
                    src = VarSource(var, var_value, name, self.file, where(value, var) or s_line, f"{s_key}.{var}")
                    if var == _PRIORITY_VAR:
                        group.priority = self._priority(var_value, src)
                        continue
                    self._set_var(group.vars, group.sources, src, host=None, group=name)
            elif section == "children":
                if isinstance(value, str):
                    value = {value: None}
                if not isinstance(value, Mapping):
                    raise self.error(
                        f"children of group {name!r} must be a mapping of group names, not {_describe(value)}"
                        + (" (write each group as 'name:' on its own line)" if isinstance(value, list) else ""),
                        s_line,
                        s_key,
                    )
                for child, child_data in value.items():
                    self._parse_group(
                        child, child_data, key=f"{s_key}.{child}", line=where(value, child) or s_line, parent=name
                    )
            else:  # hosts
                if isinstance(value, str):
                    value = {value: None}
                if not isinstance(value, Mapping):
                    raise self.error(
                        f"hosts of group {name!r} must be a mapping of host names, not {_describe(value)}"
                        + (" (write each host as 'name:' on its own line)" if isinstance(value, list) else ""),
                        s_line,
                        s_key,
                    )
                for host_key, host_data in value.items():
                    self._parse_host(host_key, host_data, group=name, line=where(value, host_key) or s_line, parent_key=s_key)

    def _unknown_group_key(self, group: str, section: Any) -> str:
        text = str(section)
        close = difflib.get_close_matches(text, _GROUP_KEYS, n=1, cutoff=0.6)
        message = f"unknown key {text!r} in group {group!r}"
        if close:
            return f"{message}; did you mean {close[0]!r}? (a group has hosts, vars and children)"
        if text in _ALIAS or text.startswith("ansible_"):
            return f"{message}; variables go under 'vars:' (a group has hosts, vars and children)"
        return f"{message}; a group has only hosts, vars and children"

    def _priority(self, value: Any, src: VarSource) -> int:
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit())
        ):
            raise self.error(f"must be an integer, not {_describe(value)}", src.line, src.key)
        return int(value)

    # -- hosts ----------------------------------------------------------------------------------

    def _host_names(self, text: str, line: int | None, key: str) -> tuple[list[str], int | None]:
        """Names and port of one host key (yaml plugin's ``_expand_hostpattern``)."""
        m = re.fullmatch(r"\[([0-9A-Fa-f.]*:[0-9A-Fa-f.:]*:[0-9A-Fa-f.:]*)\](?::(\d+))?", text)
        if m:  # [IPv6]:port
            return [m.group(1)], self._key_port(m.group(2), text, line, key)
        parts = _split_top(text, ":")
        port = None
        if len(parts) > 2:  # a bare IPv6 address
            return [text], None
        if len(parts) == 2:
            text, port_text = parts
            if not port_text.isdigit():
                raise self.error(
                    f"host {key.rsplit('.', 1)[-1]!r}: after ':' comes a port number, not {port_text!r}", line, key
                )
            port = self._key_port(port_text, text, line, key)
        try:
            return expand_name(text), port
        except NodesetError as exc:
            raise self.error(f"invalid host range: {exc}", line, key) from None

    def _key_port(self, port_text: str | None, text: str, line: int | None, key: str) -> int | None:
        if port_text is None:
            return None
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise self.error(f"port must be an integer from 1 to 65535, not {port}", line, key)
        return port

    def _parse_host(self, host_key: Any, data: Any, *, group: str, line: int | None, parent_key: str) -> None:
        key = f"{parent_key}.{host_key}"
        if isinstance(host_key, bool) or not isinstance(host_key, (str, int)):
            raise self.error(f"a host name must be a string, not {_describe(host_key)}; quote it", line, key)
        text = str(host_key).strip()
        if not text:
            raise self.error("a host name must not be empty", line, key)
        if any(c.isspace() for c in text):
            raise self.error(f"host name {text!r} contains whitespace", line, key)
        names, port = self._host_names(text, line, key)
        if data is not None and not isinstance(data, Mapping):
            raise self.error(
                f"host {text!r} must be empty or a mapping of host variables, not {_describe(data)}", line, key
            )
        if data:
            self._check_vars(data, key, host=text)
        for name in names:
            host = self.hosts.get(name)
            if host is None:
                host = self.hosts[name] = _HostDraft(name, line)
            if group not in host.groups:
                host.groups.append(group)
                self.groups[group].hosts.append(name)
            if port is not None:
                src = VarSource("ansible_port", port, None, self.file, line, key)
                self._set_var(host.vars, host.sources, src, host=name, group=None)
            for var, value in (data or {}).items():
                src = VarSource(var, value, None, self.file, where(data, var) or line, f"{key}.{var}")
                self._set_var(host.vars, host.sources, src, host=name, group=None)

    # -- variables ------------------------------------------------------------------------------

    def _check_vars(self, mapping: Mapping[Any, Any], key: str, *, host: str | None) -> None:
        """Names are strings; the typed settings have the right types; one spelling per setting."""
        for var, value in mapping.items():
            line = where(mapping, var)
            if not isinstance(var, str):
                raise self.error(f"a variable name must be a string, not {_describe(var)}", line, f"{key}.{var}")
            setting = _ALIAS.get(var)
            if setting is None:
                continue
            for other in SETTINGS[setting]:
                if other != var and other in mapping and not _same(mapping[other], value):
                    first, second = sorted((var, other), key=lambda v: where(mapping, v) or 0)
                    raise self.error(
                        f"{first!r} and {second!r} both set the {setting} (to different values); keep one",
                        where(mapping, second),
                        f"{key}.{second}",
                    )
            problem = self._setting_problem(setting, value)
            if problem:
                raise self.error(problem, line, f"{key}.{var}")

    def _setting_problem(self, setting: str, value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, str) and "{{" in value:
            return "templated values ('{{ ... }}') are not supported in inventory connection settings"
        if setting == "port":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
                return f"port must be an integer from 1 to 65535, not {_describe(value)}"
            return None
        if not isinstance(value, str):
            kind = "a path" if setting in ("key_file", "venv", "cuda_home", "workdir", "known_hosts") else "a name"
            return f"{setting} must be a string ({kind}), not {_describe(value)}"
        if not value.strip():
            return f"{setting} must not be empty"
        if setting == "connection" and value not in _CONNECTIONS:
            return f"connection must be 'ssh' or 'local', not {value!r}"
        if setting in ("address", "user") and any(c.isspace() for c in value):
            return f"{setting} must not contain whitespace, got {value!r}"
        if setting == "key_file":
            resolved = _resolve_path(value, self.base_dir)
            if not os.path.exists(resolved):
                return f"key file {value!r} does not exist (looked for {resolved})"
            if os.path.isdir(resolved):
                return f"key file {value!r} is a directory ({resolved})"
        return None

    def _set_var(
        self, target: dict[str, Any], sources: dict[str, VarSource], src: VarSource, *, host: str | None, group: str | None
    ) -> None:
        """Ansible's ``set_variable`` on one group or host, plus one spelling per setting."""
        name, value = src.name, src.value
        setting = _ALIAS.get(name)
        previous: VarSource | None = None
        if setting is not None:
            for alias in SETTINGS[setting]:
                if alias in target:
                    previous = sources.get(alias)
                    if alias != name:
                        del target[alias]
                        sources.pop(alias, None)
        elif name in target:
            previous = sources.get(name)
        if previous is not None and isinstance(previous.value, Mapping) and isinstance(value, Mapping):
            value = {**previous.value, **value}
            src = VarSource(name, value, src.group, src.file, src.line, src.key)
        if previous is not None and previous.line != src.line and not _same(previous.value, value):
            where_ = "listed more than once" if host is not None else "declared more than once"
            self.conflicts.append(
                VarConflict(
                    var=setting if setting is not None and previous.name != name else name,
                    winner=src,
                    others=(previous,),
                    host=host,
                    group=group,
                    reason=f"{'host' if host is not None else 'group'} {where_}; the later value wins",
                )
            )
        target[name] = value
        sources[name] = src

    # -- finishing ------------------------------------------------------------------------------

    def _finish(self) -> Inventory:
        """Ansible's ``reconcile_inventory`` ("Default groups"), then merge vars per host
        ("How variables are merged")."""
        groups = self.groups
        # Every group without a parent becomes a child of 'all' (InventoryData.reconcile_inventory).
        for name in list(groups):
            if name != "all" and not groups[name].parents:
                self._add_child("all", name, groups[name].line, name)
        # 'ungrouped' holds exactly the hosts in no group but 'all'.
        for host in self.hosts.values():
            others = [g for g in host.groups if g not in ("all", "ungrouped")]
            if others and "ungrouped" in host.groups:
                host.groups.remove("ungrouped")
                groups["ungrouped"].hosts.remove(host.name)
            elif not others and "ungrouped" not in host.groups:
                host.groups.append("ungrouped")
                groups["ungrouped"].hosts.append(host.name)

        depth: dict[str, int] = {"all": 0}

        def depth_of(name: str) -> int:
            # Iterative longest path from 'all' (no recursion limit on deep nesting).
            stack = [name]
            while stack:
                top = stack[-1]
                if top in depth:
                    stack.pop()
                    continue
                pending = [p for p in groups[top].parents if p not in depth]
                if pending:
                    stack.extend(pending)
                else:
                    depth[top] = 1 + max(depth[p] for p in groups[top].parents)
                    stack.pop()
            return depth[name]

        for name in groups:
            depth_of(name)
        ancestors = {name: self._ancestors(name) for name in groups}
        order = {
            name: (depth[name], g.priority, name) for name, g in groups.items()
        }  # ansible.inventory.helpers.sort_groups

        hosts: dict[str, Host] = {}
        members: dict[str, list[str]] = {name: [] for name in groups}
        for draft in self.hosts.values():
            all_groups = set(draft.groups)
            for g in draft.groups:
                all_groups |= ancestors[g]
            all_groups.add("all")
            ordered = sorted(all_groups, key=order.__getitem__)
            merged: dict[str, Any] = {}
            merged_src: dict[str, VarSource] = {}
            for g in ordered:
                for var, value in groups[g].vars.items():
                    self._merge(merged, merged_src, var, value, groups[g].sources[var])
            for var, value in draft.vars.items():
                self._merge(merged, merged_src, var, value, draft.sources[var])
            self._record_group_conflicts(draft, ordered, ancestors, order)
            hosts[draft.name] = Host(
                name=draft.name,
                vars=MappingProxyType(merged),
                groups=tuple(ordered),
                base_dir=self.base_dir,
                sources=MappingProxyType(merged_src),
                line=draft.line,
            )
            for g in ordered:
                members[g].append(draft.name)

        final_groups = {
            name: Group(
                name=name,
                hosts=tuple(members[name]),
                children=tuple(g.children),
                vars=MappingProxyType(dict(g.vars)),
                parents=tuple(g.parents),
                direct_hosts=tuple(g.hosts),
                depth=depth[name],
                priority=g.priority,
                line=g.line,
            )
            for name, g in groups.items()
        }
        for name in self.hosts:
            if name in groups:
                self.warnings.append(
                    str(
                        InventoryError(
                            f"{name!r} is both a host and a group; host patterns select the group",
                            file=self.file,
                            line=self.hosts[name].line,
                            key=name,
                        )
                    )
                )
        return Inventory(
            path=Path(self.file),
            hosts=MappingProxyType(hosts),
            groups=MappingProxyType(final_groups),
            conflicts=tuple(self.conflicts),
            warnings=tuple(self.warnings),
            source=self.file,
        )

    @staticmethod
    def _merge(merged: dict[str, Any], sources: dict[str, VarSource], var: str, value: Any, src: VarSource) -> None:
        """``combine_vars`` (replace): a later level replaces the value, under any spelling."""
        setting = _ALIAS.get(var)
        if setting is not None:
            for alias in SETTINGS[setting]:
                if alias != var:
                    merged.pop(alias, None)
                    sources.pop(alias, None)
        merged.pop(var, None)  # keep insertion order = order of the deciding level
        merged[var] = value
        sources[var] = src

    def _record_group_conflicts(
        self,
        host: _HostDraft,
        ordered: list[str],
        ancestors: dict[str, set[str]],
        order: dict[str, tuple[int, int, str]],
    ) -> None:
        """Note each var that two unrelated groups of this host set differently (host vars unset)."""
        own = {_ALIAS.get(v, v) for v in host.vars}
        definers: dict[str, list[tuple[str, VarSource]]] = {}
        for g in ordered:
            for var, src in self.groups[g].sources.items():
                definers.setdefault(_ALIAS.get(var, var), []).append((g, src))
        for var, found in definers.items():
            if var in own or len(found) < 2:
                continue
            # Drop a group whose descendant (in this host's groups) also sets the var: structure decides.
            maximal = [(g, s) for g, s in found if not any(g in ancestors[o] for o, _ in found if o != g)]
            winner_group, winner = maximal[-1]
            losers = tuple(s for g, s in maximal[:-1] if not _same(s.value, winner.value))
            if not losers:
                continue
            w_depth, w_prio, _ = order[winner_group]
            l_depth, l_prio, _ = order[losers[-1].group]  # type: ignore[index]
            if w_depth != l_depth:
                reason = "the deeper group wins (Ansible merges groups by depth)"
            elif w_prio != l_prio:
                reason = "the group with the higher ansible_group_priority wins"
            else:
                reason = "groups of the same depth merge in ASCII order of their names; the last one wins"
            # The user decided only when priority alone ranks the winner above every loser.
            ranks = [order[s.group][:2] for s in losers]  # type: ignore[index]
            if all(d == w_depth and p != w_prio for d, p in ranks):
                decided_by = "priority"
            elif any(d != w_depth for d, _ in ranks):
                decided_by = "depth"
            else:
                decided_by = "name"
            self.conflicts.append(VarConflict(var=var, winner=winner, others=losers, host=host.name, reason=reason,
                                              decided_by=decided_by))


def load_inventory(path: str | os.PathLike[str]) -> Inventory:
    """Load and validate an Ansible YAML inventory.

    Args:
        path: the inventory file. Messages name it as given; relative ``key_file`` and
            ``known_hosts`` resolve against its folder.

    Returns:
        The :class:`Inventory`: hosts in the order the file first lists them, groups with
        ``all`` and ``ungrouped``, merged vars, and the recorded :class:`VarConflict` s.

    Raises:
        InventoryError: the file is unreadable, not YAML (syntax, tabs, duplicate keys), or not a
            valid inventory (unknown group key, a section that is not a mapping, a setting of the
            wrong type, a missing key file, a group loop, a bad host range). One line:
            ``FILE:LINE: KEY: MESSAGE``.
    """
    file = os.fspath(path)
    data = load_yaml(file, error_cls=InventoryError)
    try:
        return _Builder(file).build(data)
    except RecursionError:
        raise InventoryError("groups are nested too deeply", file=file) from None
