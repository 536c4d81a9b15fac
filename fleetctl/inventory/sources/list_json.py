"""Ansible's ``--list`` JSON: the one way every JSON-producing source enters the inventory.

Dynamic inventory scripts print it (``script --list``), ``ansible-inventory --list`` prints it,
and so will fleetctl's own sources (``slurm:``). The format
(https://docs.ansible.com/ansible/latest/dev_guide/developing_inventory.html#inventory-script-conventions)::

    {
      "gpu":  {"hosts": ["gpu01", "gpu02"], "vars": {"venv": "/opt/venv"}, "children": ["h200"]},
      "h200": ["gpu03"],
      "_meta": {"hostvars": {"gpu01": {"ansible_host": "10.0.0.1"}}}
    }

read as Ansible's ``script`` plugin reads it: groups in the order written; for each, its hosts
join it, then its vars are set, then its children are added (created when first named); a group
given as a list is that list of hosts; a mapping with none of ``hosts``/``vars``/``children`` is a
group holding one host of the same name, with those vars. Then each host listed in a group gets
its ``_meta.hostvars`` (or, when ``_meta.hostvars`` is absent, what ``script --host HOST``
prints, :mod:`~fleetctl.inventory.sources.script`). Hosts named only in ``_meta`` are not added.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fleetctl.errors import InventoryError

from ..data import InventoryBuilder
from ..vars import VarSource, describe

__all__ = ["ingest_list_json"]

def ingest_list_json(builder: InventoryBuilder, data: Any, *, file: str, base_dir: str | None = None,
                     host_vars: Callable[[Sequence[str]], Mapping[str, Any]] | None = None, check_names: bool = True) -> None:
    """Add ``--list`` JSON to ``builder``.

    Args:
        data: the decoded JSON document.
        file: how messages name the source (a script's path, ``slurm:gpu``).
        base_dir: the folder relative paths in vars resolve against (None: the current folder).
        host_vars: called once, with every listed host in order, when the document has no
            ``_meta.hostvars`` (a script's ``--host HOST`` calls,
            :func:`~fleetctl.inventory.sources.script.run_host_calls`); returns each host's vars.
            None means such hosts have no host vars.
        check_names: check var names for typos (off for ``ansible-inventory`` output, whose
            plugins may compose any name).

    Raises:
        InventoryError: the document is not ``--list`` JSON (naming the key at fault).
    """
    def error(message: str, key: str | None = None) -> InventoryError:
        return InventoryError(message, file=file, key=key)

    def src(name: str, value: Any, group: str | None, key: str) -> VarSource:
        return VarSource(name, value, group, file, None, key, base_dir)

    if not isinstance(data, Mapping):
        raise error(f"inventory JSON must be an object of groups, not {describe(data)}")
    hostvars: Any = None
    listed: dict[str, None] = {}
    for group, gdata in data.items():
        if group == "_meta":
            if not isinstance(gdata, Mapping):
                raise error(f"_meta must be an object, not {describe(gdata)}", "_meta")
            hostvars = gdata.get("hostvars")
            if not isinstance(hostvars, Mapping):
                raise error(f"_meta.hostvars must be an object of hosts, not {describe(hostvars)}", "_meta.hostvars")
            continue
        if not isinstance(group, str) or not group.strip():
            raise error(f"a group name must be a non-empty string, not {describe(group)}")
        builder.add_group(group, file=file)
        if not isinstance(gdata, Mapping):
            gdata = {"hosts": gdata}
        elif not any(k in gdata for k in ("hosts", "vars", "children")):
            gdata = {"hosts": [group], "vars": gdata}
        hosts = gdata.get("hosts", [])
        if hosts is None or not isinstance(hosts, list):
            raise error(f"hosts of group {group!r} must be a list of names, not {describe(hosts)}", f"{group}.hosts")
        for name in hosts:
            if not isinstance(name, str) or not name.strip():
                raise error(f"a host name must be a non-empty string, not {describe(name)}", f"{group}.hosts")
            if any(c.isspace() or c in ",[]" for c in name):
                raise error(f"host name {name!r} contains whitespace, ',' or brackets; no host pattern could "
                            "select it", f"{group}.hosts")
            listed[name] = None
            builder.add_host(name, group, file=file)
        gvars = gdata.get("vars", {})
        if not isinstance(gvars, Mapping):
            raise error(f"vars of group {group!r} must be an object, not {describe(gvars)}", f"{group}.vars")
        for var, value in gvars.items():
            builder.set_var(builder.groups[group], src(var, value, group, f"{group}.vars.{var}"),
                            check_name=check_names)
        children = gdata.get("children", [])
        if not isinstance(children, list):
            raise error(f"children of group {group!r} must be a list of names, not {describe(children)}",
                        f"{group}.children")
        for child in children:
            if not isinstance(child, str) or not child.strip():
                raise error(f"a group name must be a non-empty string, not {describe(child)}", f"{group}.children")
            builder.add_group(child, file=file)
            builder.add_child(group, child, file=file, key=f"{group}.children")
    called = hostvars is None  # each host's vars are what ``FILE --host NAME`` printed, not a key of the document
    if called:
        hostvars = host_vars(list(listed)) if host_vars is not None and listed else {}
    for name in listed:
        got = hostvars.get(name, {})
        where, prefix = (f"{file} --host {name}", "") if called else (file, f"_meta.hostvars.{name}.")
        if not isinstance(got, Mapping):
            raise InventoryError(f"host vars of {name!r} must be an object, not {describe(got)}", file=where,
                                 key=prefix.rstrip(".") or None)
        for var, value in got.items():
            builder.set_var(builder.hosts[name], VarSource(var, value, None, where, None, f"{prefix}{var}", base_dir),
                            check_name=check_names)
