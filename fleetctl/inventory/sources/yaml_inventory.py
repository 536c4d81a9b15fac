"""Ansible's YAML inventory format, as its ``yaml`` inventory plugin reads it.

(https://docs.ansible.com/ansible/latest/collections/ansible/builtin/yaml_inventory.html)::

    all:
      vars: {ansible_user: ubuntu}
      children:
        gpu-nodes:
          vars: {venv: /opt/venv}
          hosts:
            gpu[01:04]:
            gpu05: {ansible_host: 10.0.0.5, ansible_port: 2222}

- The top level maps group names to groups; any group without a parent becomes a child of
  ``all``. A group is a mapping of ``hosts``, ``vars`` and ``children`` (each a mapping; a lone
  string for ``hosts`` or ``children`` is one name), handled in the order written; an empty group
  is ``name:``. A group may appear in several places: its hosts, vars and children add up.
- A host entry is ``name:`` or ``name: {VAR: VALUE}``; ``name:PORT`` sets ``ansible_port`` (only
  where the host is first listed, as in Ansible). Ranges expand as in
  :func:`~fleetctl.inventory.nodeset.expand_host_key`.

Where fleetctl is stricter than Ansible, which warns and carries on (each one line
``FILE:LINE: KEY: MESSAGE``): unknown group keys, a section or group that is not a mapping,
``hosts:``/``vars:``/``children:`` at the top level (Ansible reads them as group names), duplicate
keys, a host range that ends before it begins, and host names holding whitespace, ``,`` or a
``:`` that is not a port.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from fleetctl.errors import InventoryError
from fleetctl.util.yamlload import where

from ..address import split_port
from ..data import InventoryBuilder
from ..nodeset import NodesetError, expand_host_key, split_top
from ..settings import HostSettings, aliases_of
from ..vars import VarSource, describe
from ...util.didyoumean import close_matches

__all__ = ["ingest_yaml", "host_key_names", "is_list_json"]

_GROUP_KEYS = ("hosts", "vars", "children")


def is_list_json(data: Any) -> bool:
    """True for ``--list`` JSON (a ``_meta`` key), which Ansible's yaml plugin cannot read."""
    return isinstance(data, Mapping) and "_meta" in data


def host_key_names(text: str, *, file: str, line: int | None, key: str) -> tuple[list[str], int | None]:
    """Names and port of one host key (the yaml and ini plugins' ``_expand_hostpattern``).

    Raises:
        InventoryError: a bad port, a ':' that is not a port, whitespace or ',' in a name, a bad range.
    """
    def error(message: str) -> InventoryError:
        return InventoryError(message, file=file, line=line, key=key)

    if any(c.isspace() for c in text):
        raise error(f"host name {text!r} contains whitespace")
    parsed = split_port(text)
    if parsed is not None:
        pattern, port = parsed
    else:
        parts = split_top(text, ":")
        if len(parts) == 1:
            pattern, port = text, None
        elif len(parts) == 2 and parts[1].isascii() and parts[1].isdigit():
            pattern, port = parts[0], int(parts[1])
        elif len(parts) == 2:
            raise error(f"host {text!r}: after ':' comes a port number, not {parts[1]!r}")
        else:
            raise error(f"host name {text!r} contains ':' (only an IPv6 address may; a port is 'name:PORT')")
    if port is not None and not 1 <= port <= 65535:
        raise error(f"port must be an integer from 1 to 65535, not {port}")
    if "," in pattern:
        raise error(f"host name {pattern!r} contains ','; no host pattern could select it")
    try:
        return expand_host_key(pattern), port
    except NodesetError as exc:
        raise error(f"invalid host range: {exc}") from None


class _YamlReader:
    def __init__(self, builder: InventoryBuilder, file: str) -> None:
        self.b = builder
        self.file = file
        self.base_dir = os.path.dirname(os.path.abspath(file))

    def error(self, message: str, line: int | None, key: str | None) -> InventoryError:
        return InventoryError(message, file=self.file, line=line, key=key)

    def src(self, name: str, value: Any, group: str | None, mapping: Any, fallback: int | None, key: str) -> VarSource:
        return VarSource(name, value, group, self.file, where(mapping, name) or fallback, key, self.base_dir)

    def read(self, data: Any) -> None:
        if data is None:
            raise self.error("inventory is empty; expected 'all:' with hosts, vars or children", 1, None)
        if not isinstance(data, Mapping):
            raise self.error(f"an inventory is a mapping of groups ('all:' at the top), not {describe(data)}",
                             where(data) or 1, None)
        for name, group_data in data.items():
            line = where(data, name)
            if name in _GROUP_KEYS:
                raise self.error(f"'{name}:' cannot be at the top level; put it under 'all:'", line, str(name))
            self.group(name, group_data, key=str(name), line=line, parent=None)

    def group(self, name: Any, data: Any, *, key: str, line: int | None, parent: str | None) -> None:
        if not isinstance(name, str) or not name.strip():
            raise self.error(f"a group name must be a non-empty string, not {describe(name)}", line, key)
        group = self.b.add_group(name, file=self.file, line=line)
        if parent is not None:  # before the children's own children, so a loop is caught where it closes
            self.b.add_child(parent, name, file=self.file, line=line, key=key)
        if data is not None and not isinstance(data, Mapping):
            raise self.error(f"group {name!r} must be a mapping with hosts, vars or children, not {describe(data)}",
                             line, key)
        for section, value in (data or {}).items():
            s_line = where(data, section) or line
            s_key = f"{key}.{section}"
            if section not in _GROUP_KEYS:
                raise self.error(_unknown_group_key(name, section), s_line, s_key)
            if value is None:
                continue
            if section == "vars":
                if not isinstance(value, Mapping):
                    raise self.error(f"vars of group {name!r} must be a mapping of variable names to values, "
                                     f"not {describe(value)}", s_line, s_key)
                for var, var_value in value.items():
                    if not isinstance(var, str):
                        raise self.error(f"a variable name must be a string, not {describe(var)}",
                                         where(value, var) or s_line, f"{s_key}.{var}")
                    self.b.set_var(group, self.src(var, var_value, name, value, s_line, f"{s_key}.{var}"))
                continue
            if isinstance(value, str):
                value = {value: None}
            if not isinstance(value, Mapping):
                what = "group names" if section == "children" else "host names"
                one = "group" if section == "children" else "host"
                raise self.error(
                    f"{section} of group {name!r} must be a mapping of {what}, not {describe(value)}"
                    + (f" (write each {one} as 'name:' on its own line)" if isinstance(value, list) else ""),
                    s_line, s_key)
            for item, item_data in value.items():
                i_line = where(value, item) or s_line
                if section == "children":
                    self.group(item, item_data, key=f"{s_key}.{item}", line=i_line, parent=name)
                else:
                    self.host(item, item_data, group=name, line=i_line, parent_key=s_key)

    def host(self, host_key: Any, data: Any, *, group: str, line: int | None, parent_key: str) -> None:
        key = f"{parent_key}.{host_key}"
        if isinstance(host_key, bool) or not isinstance(host_key, (str, int)):
            raise self.error(f"a host name must be a string, not {describe(host_key)}; quote it", line, key)
        text = str(host_key).strip()
        if not text:
            raise self.error("a host name must not be empty", line, key)
        names, port = host_key_names(text, file=self.file, line=line, key=key)
        if data is not None and not isinstance(data, Mapping):
            raise self.error(f"host {text!r} must be empty or a mapping of host variables, not {describe(data)}",
                             line, key)
        for var in data or {}:
            if not isinstance(var, str):
                raise self.error(f"a variable name must be a string, not {describe(var)}", where(data, var) or line,
                                 f"{key}.{var}")
        for name in names:
            port_src = None
            if port is not None:
                port_src = VarSource("ansible_port", port, None, self.file, line, key, self.base_dir)
            host = self.b.add_host(name, group, file=self.file, line=line, port=port_src)
            for var, value in (data or {}).items():
                self.b.set_var(host, self.src(var, value, None, data, line, f"{key}.{var}"))


def _unknown_group_key(group: str, section: Any) -> str:
    text = str(section)
    close = close_matches(text, _GROUP_KEYS, n=1, cutoff=0.6)
    message = f"unknown key {text!r} in group {group!r}"
    if close:
        return f"{message}; did you mean {close[0]!r}? (a group has hosts, vars and children)"
    if text.startswith("ansible_") or text in aliases_of(HostSettings):
        return f"{message}; variables go under 'vars:' (a group has hosts, vars and children)"
    return f"{message}; a group has only hosts, vars and children"


def ingest_yaml(builder: InventoryBuilder, data: Any, file: str) -> None:
    """Add a loaded YAML inventory document (from :func:`fleetctl.util.yamlload.load_yaml`) to ``builder``.

    Raises:
        InventoryError: the document is not a valid inventory (see the module docstring).
    """
    _YamlReader(builder, file).read(data)
