"""The entry point of the Python API: :class:`Fleet`, an inventory and how to reach its hosts.

Example::

    from fleetctl import Fleet

    fleet = Fleet.from_inventory("inventory.yaml")       # any source `fleetctl -i` takes, several allowed
    nodes = fleet.select("gpu-nodes:!gpu03")              # Ansible patterns and node sets
    result = nodes.run(["nvidia-smi", "-L"], timeout=30)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .lifecycle import warn

if TYPE_CHECKING:
    from ..inventory.model import Host, Inventory
    from .hosts import AsyncHosts
    from .hosts_sync import Hosts



class Fleet:
    """An inventory (one or more sources, merged as Ansible merges several ``-i``) and the run-wide
    connection settings of every operation on its hosts.

    Build it with :meth:`from_inventory` (which loads the inventory at once); the constructor
    loads it on first use. Pick hosts with :meth:`select`. A ``Fleet`` holds no connection: each
    operation connects, works and closes, as a CLI command does.

    Args:
        sources: inventory sources (see :meth:`from_inventory`).
        extra_vars: vars over every host's.
        connect_timeout: seconds to reach and log in to one host.
        accept_new_host_keys: record host keys of hosts that have none.
        verbose: diagnostics on stderr (0: none, 1: each host's tasks, 2: every command).
        ssh_options: one-off ssh_config options for every ssh host, ``"Name=value"`` each, as
            ``fleetctl -o`` (:mod:`fleetctl.connection.ssh_options`: the options fleetctl honours;
            ``StrictHostKeyChecking=accept-new`` is ``accept_new_host_keys``).
        on_warning: called with each inventory warning, each extra var a play does not read
            (:func:`fleetctl.api.playchecks.extra_var_warnings`), and each extra var that ``run``,
            ``facts``, ``copy`` or ``fetch`` does not read: one that is no host setting, with the
            CLI's did-you-mean (:func:`fleetctl.api.playchecks.setting_var_warnings`: ``vnev`` ->
            ``did you mean venv?``), and each ``warning:`` line of a host's facts
            (:meth:`~fleetctl.api.hosts.AsyncHosts.facts`: ``HOST: warning: ...``) (one line;
            default: ``fleetctl: warning: LINE`` on stderr, as the CLI prints it).

    Raises:
        InputError: an argument of the wrong kind (:mod:`fleetctl.api.inputs`: a flag that is not
            a bool, ``connect_timeout`` that is not a positive number of seconds, sources that are
            not paths, extra vars that are not a mapping of variable names: Ansible's rule,
            :func:`~fleetctl.api.inputs.is_variable_name`), or an ssh option fleetctl
            refuses (the CLI's one line for ``-o``).

    Attributes:
        sources: the inventory sources, as given.
        extra_vars: vars over every host's (``-e NAME=VALUE``; connection settings included).
        connect_timeout: seconds to reach and log in to one host (for Slurm: for the allocation).
        accept_new_host_keys: record the host key of a host that has none (OpenSSH's
            ``StrictHostKeyChecking=accept-new``); a changed key is refused regardless.
        verbose: the CLI's ``-v`` level: diagnostics on stderr (0: none).
        ssh_options: the checked ``-o`` options (``"Name=value"`` each).
    """

    def __init__(self, sources: Sequence[str | os.PathLike[str]] | None = None, *,
                 extra_vars: Mapping[str, Any] | None = None, connect_timeout: float = 30.0,
                 accept_new_host_keys: bool = False, verbose: int = 0, ssh_options: Sequence[str] = (),
                 on_warning: Callable[[str], None] = warn) -> None:
        from .inputs import want_bool, want_count, want_extra_vars, want_seconds, want_sources, want_strings

        given = want_sources(sources or ())
        #: True when no source was given: ``inventory.yaml`` here, else fleetctl's own (the only
        #: case that falls back to the checkout: :func:`fleetctl.util.paths.inventory_sources`).
        self.default_inventory = not given
        self.sources = given or ("inventory.yaml",)
        self.extra_vars = want_extra_vars(extra_vars)
        verbose = want_count("verbose", verbose)
        self.connect_timeout = want_seconds("connect_timeout", connect_timeout)
        self.accept_new_host_keys = want_bool("accept_new_host_keys", accept_new_host_keys)
        if on_warning is not None and not callable(on_warning):
            from ..errors import InputError

            raise InputError(f"on_warning: want a callable taking one line, got {on_warning!r}")
        self.ssh_options: tuple[str, ...] = ()
        options = want_strings("ssh_options", ssh_options, "'Name=value'")
        if options:  # the ssh layer is imported only when options are given
            from ..connection.ssh_options import SSHOptionError, accepts_new_keys, parse_options
            from ..errors import InputError

            try:
                self.ssh_options = tuple(parse_options(options))
            except SSHOptionError as exc:
                raise InputError(str(exc)) from None
            self.accept_new_host_keys = self.accept_new_host_keys or accepts_new_keys(self.ssh_options)
        self.verbose = verbose
        self.on_warning = on_warning or warn
        self._inventory: Inventory | None = None

    def __repr__(self) -> str:
        hosts = f": {len(self._inventory.hosts)} host(s)" if self._inventory is not None else ""
        return f"<Fleet {', '.join(self.sources)}{hosts}>"

    @classmethod
    def from_inventory(cls, *sources: str | os.PathLike[str], extra_vars: Mapping[str, Any] | None = None,
                       connect_timeout: float = 30.0, accept_new_host_keys: bool = False,
                       verbose: int = 0, ssh_options: Sequence[str] = (),
                       on_warning: Callable[[str], None] = warn) -> "Fleet":
        """Load an inventory now (so that a bad one raises here, not at the first run).

        Args:
            *sources: Ansible YAML/INI files, folders, executable inventory scripts, ``slurm:``
                sources, host lists (``a,b,``), as ``fleetctl -i`` takes them; later ones add to
                earlier ones. None: ``inventory.yaml`` (the current folder's, else fleetctl's own);
                a path given is read where given, never from fleetctl's checkout.
            extra_vars: vars over every host's, as ``-e NAME=VALUE`` (strings, or any YAML value).
            connect_timeout: seconds to reach and log in to one host.
            accept_new_host_keys: record host keys of hosts that have none.
            verbose: diagnostics on stderr: 1 each host's tasks, 2 every command.
            ssh_options: one-off ssh_config options, ``"Name=value"`` each (``fleetctl -o``).
            on_warning: called with each warning line (see :class:`Fleet`; default: stderr).

        Returns:
            The :class:`Fleet`.

        Raises:
            InputError: (:class:`~fleetctl.errors.InventoryError`) the inventory is missing (a
                path given that is not there) or invalid; the message is the CLI's one line (file,
                key, cause).
        """
        fleet = cls(sources or None, extra_vars=extra_vars, connect_timeout=connect_timeout,
                    accept_new_host_keys=accept_new_host_keys, verbose=verbose, ssh_options=ssh_options,
                    on_warning=on_warning)
        fleet.inventory  # noqa: B018 - load now: bad input raises here
        return fleet

    @property
    def inventory(self) -> "Inventory":
        """The loaded :class:`~fleetctl.inventory.model.Inventory` (loaded once, on first use;
        its warnings go to ``on_warning``, by default stderr).

        Raises:
            InputError: the inventory is invalid.
        """
        if self._inventory is None:
            from ..errors import InventoryNotFound
            from ..inventory import load_inventory

            try:
                inv = load_inventory(self.inventory_files())
            except InventoryNotFound as exc:  # named as this API's caller gave it (the CLI renames it)
                raise InventoryNotFound(exc.file, "Fleet.from_inventory(*sources) or Fleet(sources)") from None
            for warning in inv.warnings:
                self.on_warning(warning)
            if self.default_inventory:
                from ..util.paths import default_inventory_note

                note = default_inventory_note()
                if note is not None:
                    self.on_warning(note)
            self._inventory = inv
        return self._inventory

    def inventory_files(self) -> list[str]:
        """The sources as loaded: as given, or the default inventory's path
        (:func:`fleetctl.util.paths.inventory_sources`)."""
        from ..util.paths import inventory_sources

        return inventory_sources(None if self.default_inventory else self.sources)

    def select(self, pattern: str, limit: str | None = None) -> "Hosts":
        """The hosts a pattern selects.

        Args:
            pattern: an Ansible host pattern (``gpu-nodes``, ``a:b``, ``a:&b``, ``a:!b``, ``gpu*``,
                ``~regex``, ``group[0:3]``) or a node set (``node[01-16]``); ``all`` for every host.
            limit: a second pattern the selection is narrowed by (``--limit``).

        Returns:
            A :class:`~fleetctl.api.hosts_sync.Hosts` (sync methods; its ``.aio`` has the same as
            coroutines).

        Raises:
            InputError: the pattern matches no host or is invalid, or a selected host's settings
                cannot work (an unknown connection kind, a conflicting var, a key file readable by
                others...): the CLI's one line.
        """
        from .hosts_sync import Hosts

        hosts = Hosts(self, pattern, limit)
        hosts.names  # noqa: B018 - select now: bad input raises here
        return hosts

    def aselect(self, pattern: str, limit: str | None = None) -> "AsyncHosts":
        """:meth:`select`, with the operations as coroutines (``await fleet.aselect("all").run([...])``)."""
        return self.select(pattern, limit).aio


def select_hosts(fleet: Fleet, pattern: str, limit: str | None = None, *, forks: int = 50,
                 extra_vars: Mapping[str, Any] | None = None) -> tuple["Inventory", list["Host"]]:
    """Select hosts and check them for one operation (the CLI's and the API's one path).

    Selects ``pattern`` (and ``limit``), merges ``extra_vars`` (the fleet's, then these; settings
    included, :mod:`fleetctl.inventory.extra`), refuses settings that cannot work
    (:meth:`Inventory.check_hosts`; a host's venv that is not there is not one of them: it
    fails that host alone), checks ``fallback_archs``, and makes sure the open-file limit fits
    ``forks`` hosts at once (:mod:`fleetctl.engine.fdlimit`).

    Returns:
        ``(inventory, hosts)``, hosts in Ansible's order.

    Raises:
        InputError: any of the above, in one line naming the file, host or key.
    """
    from ..build.archs import parse_arch_list
    from ..engine.fdlimit import ensure_fd_budget
    from ..inventory.settings import var_error

    inv = fleet.inventory
    hosts = inv.select(pattern, limit=limit)
    merged = {**fleet.extra_vars, **(extra_vars or {})}
    if merged:
        from ..inventory.extra import with_extra_vars

        hosts = with_extra_vars(hosts, merged)
    inv.check_hosts(hosts)
    for host in hosts:
        if "fallback_archs" in host.vars:
            try:
                parse_arch_list(str(host.vars["fallback_archs"]))
            except ValueError as exc:  # named where the value was set: -e, or the file, line and key
                raise var_error(str(exc), host.sources.get("fallback_archs"), "fallback_archs", host.name) from None
    ensure_fd_budget(len(hosts), forks)
    return inv, hosts

