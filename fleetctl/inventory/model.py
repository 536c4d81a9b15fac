"""The loaded inventory: :class:`Host`, :class:`Group`, :class:`Inventory` (read-only).

Built by :func:`fleetctl.inventory.load_inventory`; a :class:`Host` can also be made by hand
(``Host("n1", {"ansible_port": 2200})``, its settings validated from its vars).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fleetctl.connection.registry import ConnectionSettings, HostRef
from fleetctl.errors import InventoryError, InventoryErrors

from .host_checks import check_ansible_vars, check_build_host, check_controller_files
from .patterns import HostIndex, select_hosts
from .settings import HostSettings, aliases_of, typed_settings
from .vars import VarConflict, VarSource

__all__ = ["Host", "Group", "Inventory"]


@dataclass(frozen=True)
class Host:
    """One inventory host with its merged vars and typed settings.

    Attributes:
        name: the inventory name (``inventory_hostname``).
        vars: merged vars exactly as Ansible merges them (``ansible-inventory --host``), read-only.
        groups: every group the host belongs to, ancestors, ``all`` and ``ungrouped`` included, in
            Ansible's merge order (lowest precedence first, so ``groups[0] == "all"``).
        sources: var name -> where its value was set.
        line: the line where the host was first listed (None for sources without lines).
        file: the file that first listed the host.
        settings: fleetctl's own settings (:class:`~fleetctl.inventory.settings.HostSettings`),
            validated once from ``vars``.
        kind: the connection kind (``ansible_connection``; ``ssh`` when not said), or the unknown
            name as written when no registered kind has it (see ``problem``).
        connection_settings: the kind's ``SETTINGS`` model validated from ``vars`` (address, port,
            user, key...), or None when the kind is unknown.
        problem: why the host cannot be connected to (an unknown connection kind), raised by
            :attr:`ref` and by :meth:`Inventory.check_hosts` when the host is selected.
        refused: bad input in the host's own vars, found at load (a misspelt var name, a value of
            the wrong type or form: every line of it), raised by every command that selects the
            host (:meth:`Inventory.check_input`); ``settings`` are the defaults and
            ``connection_settings`` None when a value could not be typed.
    """

    name: str
    vars: Mapping[str, Any] = field(default_factory=dict)
    groups: tuple[str, ...] = ("all",)
    sources: Mapping[str, VarSource] = field(default_factory=dict, compare=False, repr=False)
    line: int | None = field(default=None, compare=False, repr=False)
    file: str | None = field(default=None, compare=False, repr=False)
    settings: HostSettings = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    kind: str = field(default="", compare=False, repr=False)
    connection_settings: ConnectionSettings | None = field(default=None, compare=False, repr=False)
    problem: InventoryError | None = field(default=None, compare=False, repr=False)
    refused: InventoryError | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.settings is None:
            settings, kind, conn, problem = typed_settings(self.name, self.vars, self.sources)
            object.__setattr__(self, "settings", settings)
            object.__setattr__(self, "kind", kind)
            object.__setattr__(self, "connection_settings", conn)
            object.__setattr__(self, "problem", problem)
        if not isinstance(self.vars, MappingProxyType):
            object.__setattr__(self, "vars", MappingProxyType(dict(self.vars)))

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def ref(self) -> HostRef:
        """The host as a connection kind sees it: its name and typed connection settings.

        Raises:
            InventoryError: the host's ``ansible_connection`` names no registered kind, or its own
                vars were refused at load (:attr:`refused`).
        """
        if self.connection_settings is None:
            raise self.refused or self.problem or InventoryError(f"host {self.name!r} has no connection settings")
        return HostRef(self.name, self.connection_settings, self._unresolved_hint())

    def _unresolved_hint(self) -> str:
        """:data:`~fleetctl.inventory.sources.HOST_LIST_HINT` for a host-list host named as a file here, else ""."""
        if not self.file or self.address != self.name or not os.path.exists(self.name):
            return ""
        from .sources import HOST_LIST_HINT, is_host_list

        return HOST_LIST_HINT if is_host_list(self.file) else ""

    def var_origin(self, name: str) -> str | None:
        """Where var ``name``'s value was set, as a message names it for its fix (``-e cuda_home``,
        ``the inventory var 'cuda_home' (inventory.yaml:7)``: :meth:`VarSource.origin`), or
        ``None`` when no source is recorded."""
        src = self.sources.get(name)
        return src.origin() if src is not None else None

    def _conn(self, attr: str) -> Any:
        return getattr(self.connection_settings, attr, None)

    @property
    def address(self) -> str:
        """Where to connect (``ansible_ssh_host``/``ansible_host``); the inventory name when not said."""
        return self._conn("address") or self.name

    @property
    def port(self) -> int | None:
        """SSH port (``ansible_ssh_port``/``ansible_port``), or None for ssh_config's (normally 22)."""
        return self._conn("port")

    @property
    def user(self) -> str | None:
        """Login user (``ansible_ssh_user``/``ansible_user``), or None for ssh_config's / the local user."""
        return self._conn("user")

    @property
    def key_file(self) -> str | None:
        """Private key (``ansible_ssh_private_key_file``/``ansible_private_key_file``): absolute."""
        return self._conn("private_key_file")

    @property
    def connection(self) -> str:
        """The connection kind: ``"ssh"`` (the default), ``"local"``, ``"slurm"``..."""
        return self.kind

    @property
    def venv(self) -> str | None:
        """The Python environment builds and installs use, on the host (its ``bin/python3``)."""
        return self.settings.venv

    @property
    def cuda_home(self) -> str | None:
        """The CUDA toolkit folder on the host, or None to detect it."""
        return self.settings.cuda_home

    @property
    def workdir(self) -> str | None:
        """The working folder on the host, or None for fleetctl's default."""
        return self.settings.workdir

    @property
    def known_hosts(self) -> str | None:
        """A known_hosts file on the controller (absolute), or None for OpenSSH's default."""
        return self.settings.known_hosts

    def source_of(self, field_name: str) -> VarSource | None:
        """Where the var that set a connection setting field (``private_key_file``) came from."""
        if self.connection_settings is None:
            return None
        for var, fname in aliases_of(type(self.connection_settings)).items():
            if fname == field_name and self.vars.get(var) is not None:
                return self.sources.get(var)
        return None


@dataclass(frozen=True)
class Group:
    """One inventory group.

    Attributes:
        name: the group name.
        hosts: every host in the group, its descendants' included, in Ansible's ``get_hosts``
            order: the group's own hosts in the order they joined it, then its children's, level by
            level (what ``GROUP[0]`` picks).
        children: direct child groups, in the order they were added.
        vars: the group's own inventory vars (not inherited, no ``group_vars/`` files), read-only.
        parents: direct parent groups (``all`` for a group declared at the top).
        direct_hosts: hosts listed directly in this group, in the order they joined it.
        depth: longest path from ``all`` (``all`` is 0); the first key of merge order.
        priority: ``ansible_group_priority`` (default 1); the second key of merge order.
        line: the line where the group was first declared (None for implicit groups).
        file: the file that first declared the group.
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
    file: str | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True)
class Inventory:
    """A loaded inventory (one or more sources merged, as Ansible merges several ``-i``).

    Attributes:
        path: the first source, as a path.
        hosts: host name -> :class:`Host`, in the order hosts entered the inventory.
        groups: group name -> :class:`Group`, in the order groups were created (``all`` and
            ``ungrouped`` first).
        conflicts: values decided by merge order rather than structure (see :class:`VarConflict`).
        warnings: one-line notes on things Ansible accepts but that are likely mistakes (a
            ``group_vars/`` file that matches no group).
        source: how messages name the inventory (its sources as given, comma-separated).
        sources: every source as given (``-i``).
        vars_files: the ``group_vars/`` and ``host_vars/`` read, one entry per source folder.
    """

    path: Path
    hosts: Mapping[str, Host]
    groups: Mapping[str, Group]
    conflicts: tuple[VarConflict, ...] = ()
    warnings: tuple[str, ...] = ()
    source: str = field(default="", compare=False)
    sources: tuple[str, ...] = field(default=(), compare=False)
    vars_files: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    _index: HostIndex | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.source:
            object.__setattr__(self, "source", str(self.path))
        if not self.sources:
            object.__setattr__(self, "sources", (self.source,))
        index = HostIndex(hosts=tuple(self.hosts), groups={n: g.hosts for n, g in self.groups.items()},
                          source=self.source)
        object.__setattr__(self, "_index", index)

    @property
    def index(self) -> HostIndex:
        """What host patterns are matched against."""
        assert self._index is not None
        return self._index

    def select(self, pattern: str | Sequence[str], limit: str | None = None) -> list[Host]:
        """Hosts a host pattern selects, in Ansible's order (see :mod:`fleetctl.inventory.patterns`).

        Args:
            pattern: Ansible host pattern (``gpu-nodes``, ``a:b``, ``a,b``, ``a:&b``, ``a:!b``,
                ``gpu*``, ``~regex``, ``group[0]``, ``group[1:3]``), or a node set
                (``node[01-16]``) where Ansible would match nothing.
            limit: another pattern whose hosts filter the result (``--limit``); ``@FILE`` reads
                one term per line from FILE.

        Returns:
            The selected hosts, at least one, each once.

        Raises:
            fleetctl.inventory.PatternError: (an :class:`InventoryError`) a term names no host or
                group (with a did-you-mean), a range/regex/subscript is malformed, or nothing is
                selected.
        """
        return [self.hosts[name] for name in select_hosts(pattern, self.index, limit=limit)]

    def check_hosts(self, hosts: Iterable[Host]) -> None:
        """Refuse, before anything connects, settings of the chosen hosts that cannot work.

        - A host whose ``ansible_connection`` names no connection kind fleetctl has.
        - A conflict (:attr:`conflicts`) that decides one of these hosts' values, unless
          ``ansible_group_priority`` decided it.
        - An Ansible connection or privilege var fleetctl does not honour, in effect
          (:data:`fleetctl.inventory.ansible_support.REFUSED`: ``ansible_ssh_common_args``,
          ``ansible_become: true``, a password...): ignoring it would connect another way or run
          as another user; on a local host, ``ansible_user`` naming another user than the
          controller's (:data:`~fleetctl.inventory.ansible_support.OTHER_USER_REFUSED`).
        - A private key (``ansible_ssh_private_key_file``/``ansible_private_key_file``) or ``ssh_config``
          file this controller's user cannot read (not there, a folder, no read permission): bad input like ``venv: ~/x`` (``~`` resolved at
          load, as OpenSSH expands it in ``-i``/``IdentityFile``). Only the selected hosts' keys are
          checked: as Ansible fails only the hosts it connects to, a host the command does not
          touch never stops it. (A key file whose mode OpenSSH refuses is not input: that host
          fails when it connects, saying ``chmod 600``, the others run.)
        - A ``build_host`` that names no inventory host (the inventory's were refused at load;
          this is for ``-e build_host``, merged over the chosen hosts' vars before this check).

        A host's ``venv`` that is not a Python environment is not refused here, for a local host
        as for a remote one: it is that host's state, not input, and fails that host alone, with
        the same line for every connection kind (facts' ``venv V: V/bin/python3: no such
        interpreter: ...``, a warning of ``facts``, the preflight of a build, install or verify
        under ``--plan`` and in a deploy). Refusing it here stopped every host of the run (operator
        trial: one removed venv on the controller's ``local`` host stopped a nightly of the whole
        fleet, for a playbook that never used it) and refused a playbook that creates it.

        Raises:
            InventoryError: the chosen hosts' own bad vars (:meth:`check_input`), else the first
                problem, one line naming the file, the line and the key.
        """
        chosen = {h.name: h for h in hosts}
        self.check_refused(chosen.values())
        for h in chosen.values():
            if h.problem is not None:
                raise h.problem
        self.check_conflicts(chosen.values())
        for h in chosen.values():
            check_ansible_vars(h)
            check_controller_files(h)
            check_build_host(h, self.hosts)

    def check_input(self, hosts: Iterable[Host]) -> None:
        """Refuse the inventory input of ``hosts`` found bad: :meth:`check_refused`, then
        :meth:`check_conflicts`. Commands that only show the selected hosts (``fleetctl hosts``,
        ``fleetctl inventory --host``) apply it; :meth:`check_hosts` does, and more.

        Raises:
            InventoryError: as the two checks.
        """
        chosen = list(hosts)
        self.check_refused(chosen)
        self.check_conflicts(chosen)

    @staticmethod
    def check_refused(hosts: Iterable[Host]) -> None:
        """Refuse ``hosts``' own vars found bad at load (:attr:`Host.refused`: a misspelt name, a
        value of the wrong type or form), as :func:`~fleetctl.inventory.load_inventory` refuses the
        whole inventory for a group's: every line of every such host.

        Raises:
            InventoryError: one line each (:class:`~fleetctl.errors.InventoryErrors` for several),
                in file and line order.
        """
        error = InventoryErrors.of([h.refused for h in hosts if h.refused is not None])
        if error is not None:
            raise error

    def check_conflicts(self, hosts: Iterable[Host]) -> None:
        """Refuse a var of one of ``hosts`` whose value only Ansible's merge order decides
        (:attr:`conflicts`, unless ``ansible_group_priority`` decided it), whichever var it is.

        Every command that selects hosts applies this one rule, ``fleetctl inventory --host`` and
        ``fleetctl hosts`` included (a command that prints a value Ansible's merge order picked,
        while ``run`` refuses it, tells the operator two stories). Whether a command reads the var
        is not asked: a play's templates may read any var, and the value would be a guess in
        every command alike (ansible-core's ``VariableManager`` merge order, docs/inventory.md).

        Raises:
            InventoryError: the first conflict, one line at the winning value.
        """
        chosen = {h.name: h for h in hosts}
        for c in self.conflicts:
            if c.decided_by == "priority":
                continue
            for h in chosen.values():
                if (c.host == h.name or (c.host is None and c.group in h.groups)) and \
                        h.sources.get(c.winner.name) == c.winner:
                    raise c.error()

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
        """A JSON-ready copy for run records: sources, every host's vars and groups, every group."""
        return {
            "path": self.source,
            "sources": list(self.sources),
            "hosts": {h.name: {"vars": jsonable(dict(h.vars)), "groups": list(h.groups)} for h in self},
            "groups": {
                g.name: {"hosts": list(g.hosts), "children": list(g.children), "vars": jsonable(dict(g.vars))}
                for g in self.groups.values()
            },
        }


def jsonable(value: Any) -> Any:
    """``value`` with every mapping key a string and every leaf a JSON scalar (others as ``str``)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
