"""Ansible-compatible inventories: sources, hosts, groups, typed host settings, host patterns, node sets.

An Ansible user's inventory works unchanged, and means what it means to Ansible (ansible-core is the
oracle of tests/test_inventory_ansible.py; docs/inventory.md lists every difference kept on purpose):

- sources (:mod:`.sources`): YAML and INI inventories, inventory folders, ``group_vars/`` and
  ``host_vars/`` beside them, dynamic inventory scripts, ``--list`` JSON, host lists, anything
  ``ansible-inventory`` reads (plugins, Ansible Vault) when ansible-core is installed, and sources
  named by a scheme (``slurm:``, :data:`SCHEMES`); several sources add up, later ones setting vars
  over earlier ones;
- the model (:mod:`.model`): :class:`Host` with Ansible's merged ``vars`` (:mod:`.merge`), its typed
  :attr:`Host.settings` and :attr:`Host.connection_settings` (:mod:`.settings`), :class:`Group`,
  :class:`Inventory`;
- host patterns (:mod:`.patterns`) with Ansible's selection semantics and order, and node sets
  (:mod:`.nodeset`) as ClusterShell reads them;
- ``ansible-inventory``'s ``--list``/``--graph``/``--host`` output and ``--list-hosts`` (:mod:`.render`).

Errors are one line ``FILE:LINE: KEY: MESSAGE`` (:class:`~fleetctl.errors.InventoryError`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from fleetctl.errors import InventoryError

from .data import InventoryBuilder
from .merge import finish
from .model import Group, Host, Inventory
from .nodeset import MAX_EXPANSION, NodesetError, expand_host_key, expand_nodeset, fold_hosts
from .patterns import HostIndex, PatternError, select_hosts, split_pattern
from .settings import HostSettings
from .sources import SCHEMES, add_source
from .sources.script import ScriptBudget
from .sources.vars_files import read_vars_folder
from .vars import VarConflict, VarSource

__all__ = [
    "MAX_EXPANSION",
    "SCHEMES",
    "Group",
    "Host",
    "HostIndex",
    "HostSettings",
    "Inventory",
    "NodesetError",
    "PatternError",
    "VarConflict",
    "VarSource",
    "expand_host_key",
    "expand_nodeset",
    "fold_hosts",
    "load_inventory",
    "select_hosts",
    "split_pattern",
]


def load_inventory(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Inventory:
    """Load and validate one or more inventory sources, merged as Ansible merges several ``-i``.

    Args:
        sources: a source or a list of them (files, folders, scripts, ``slurm:...``, host lists),
            read in order. Messages name them as given; relative paths in vars resolve against the
            folder of the file that set them.

    Returns:
        The :class:`Inventory`: hosts in the order they entered it, groups with ``all`` and
        ``ungrouped``, Ansible's merged vars, typed settings, and the recorded :class:`VarConflict`.

    Raises:
        InventoryError: a source is missing, unreadable or invalid (syntax, structure, a setting of
            the wrong type, an unknown ``ansible_*`` name, a group loop, a bad host range). One line:
            ``FILE:LINE: KEY: MESSAGE``.
    """
    specs = [os.fspath(sources)] if isinstance(sources, (str, os.PathLike)) else [os.fspath(s) for s in sources]
    if not specs:
        raise InventoryError("no inventory source given (-i/--inventory)")
    builder = InventoryBuilder()
    budget = ScriptBudget()  # every inventory script call of this load shares it
    try:
        folders: list[tuple[str, str]] = []
        for spec in specs:
            builder.sources.append(spec)
            folder = add_source(builder, spec, budget)
            if folder is not None:
                folders.append((folder, spec))
        builder.reconcile()
        files = []
        for folder, spec in folders:
            found, vaulted, warnings = read_vars_folder(folder, list(builder.groups), list(builder.hosts), spec)
            if vaulted:  # pragma: no cover - add_source hands such sources to ansible-inventory
                raise InventoryError("Ansible Vault content in a vars file", file=vaulted[0])
            files.append(found)
            builder.warnings.extend(warnings)
        return finish(builder, files, source=", ".join(specs), sources=tuple(specs))
    except RecursionError:
        raise InventoryError("groups are nested too deeply", file=specs[0]) from None
