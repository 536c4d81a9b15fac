"""Ansible's INI inventory format, as its ``ini`` inventory plugin reads it.

(https://docs.ansible.com/ansible/latest/collections/ansible/builtin/ini_inventory.html)::

    gpu01 ansible_host=10.0.0.1          # before any section: ungrouped
    [gpu]
    gpu[02:04]
    gpu05:2222 ansible_user=root venv=/opt/venv
    [gpu:vars]
    cuda_home=/usr/local/cuda-13.0
    [fleet:children]
    gpu

- Lines are stripped; empty lines and lines starting with ``#`` or ``;`` are skipped.
- ``[NAME]`` holds hosts, ``[NAME:vars]`` variables, ``[NAME:children]`` child groups. A group
  named in ``:children`` or ``:vars`` must be declared somewhere in the file (by ``[NAME]`` or
  ``[NAME:children]``), possibly later.
- A host line is split like a shell line (``shlex``, ``#`` starts a comment): the host key, then
  ``key=value`` words. A ``:vars`` line is ``key=value`` split at the first ``=``, the value
  being the rest of the line. Either value is read as a Python literal when it is one
  (``2222`` -> int, ``True`` -> bool, ``['a']`` -> list, ``"x"`` -> str; tuples and sets become
  lists), else kept as the string written.

Errors are one line ``FILE:LINE: MESSAGE``; where Ansible only warns, fleetctl stops as it does for
YAML (see :mod:`~fleetctl.inventory.sources.yaml_inventory` for host keys).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import warnings
from typing import Any

from fleetctl.errors import InventoryError

from ..data import InventoryBuilder
from ..vars import VarSource
from .yaml_inventory import host_key_names

__all__ = ["ingest_ini", "literal"]

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")


def literal(text: str) -> Any:
    """An INI value as Ansible's ini plugin reads it: a Python literal when it is one, else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if value is ...:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


class _IniReader:
    def __init__(self, builder: InventoryBuilder, file: str) -> None:
        self.b = builder
        self.file = file
        self.base_dir = os.path.dirname(os.path.abspath(file))
        self.line = 0

    def error(self, message: str, line: int | None = None, key: str | None = None) -> InventoryError:
        return InventoryError(message, file=self.file, line=line or self.line, key=key)

    def read(self, lines: list[str]) -> None:
        group, state = "ungrouped", "hosts"
        pending: dict[str, dict[str, Any]] = {}  # groups named before they are declared
        for self.line, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            m = _SECTION.match(line)
            if m:
                group, state = m.group(1), m.group(2) or "hosts"
                if state not in ("hosts", "children", "vars"):
                    raise self.error(f"section [{group}:{state}] has an unknown type {state!r}; "
                                     f"expected [{group}], [{group}:vars] or [{group}:children]")
                if group not in self.b.groups:
                    if state == "vars" and group not in pending:
                        pending[group] = {"line": self.line, "state": "vars"}
                    self.b.add_group(group, file=self.file, line=self.line)
                if group in pending and state != "vars":
                    if pending[group]["state"] == "children":
                        self.add_pending_children(group, pending)
                    else:
                        del pending[group]
                continue
            if line.startswith("[") and line.endswith("]"):
                raise self.error(f"invalid section {line!r}: a section is [NAME], [NAME:vars] or [NAME:children], "
                                 "with no spaces")
            if state == "hosts":
                self.host_line(line, group)
            elif state == "vars":
                name, sep, value = line.partition("=")
                if not sep:
                    raise self.error(f"expected key=value in [{group}:vars], got {line!r}")
                name = name.strip()
                self.b.set_var(self.b.groups[group], VarSource(name, literal(value.strip()), group, self.file,
                                                               self.line, name, self.base_dir))
            else:
                m = _GROUP_NAME.match(line)
                if not m:
                    raise self.error(f"expected a group name in [{group}:children], got {line!r}")
                child = m.group(1)
                if child in self.b.groups:
                    self.b.add_child(group, child, file=self.file, line=self.line, key=child)
                elif child in pending:
                    pending[child]["parents"].append((group, self.line))
                else:
                    pending[child] = {"line": self.line, "state": "children", "parents": [(group, self.line)]}
        for name, decl in pending.items():
            if decl["state"] == "vars":
                raise self.error(f"section [{name}:vars] is for group {name!r}, which is never declared "
                                 f"(add [{name}] or [{name}:children])", decl["line"])
            parent, line = decl["parents"][-1]
            raise self.error(f"section [{parent}:children] names group {name!r}, which is never declared "
                             f"(add [{name}] with its hosts)", line)

    def add_pending_children(self, group: str, pending: dict[str, dict[str, Any]]) -> None:
        for parent, line in pending[group]["parents"]:
            self.b.add_child(parent, group, file=self.file, line=line, key=group)
            if parent in pending and pending[parent]["state"] == "children":
                self.add_pending_children(parent, pending)
        del pending[group]

    def host_line(self, line: str, group: str) -> None:
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:
            raise self.error(f"cannot split the host line {line!r}: {exc}") from None
        if not tokens:
            return
        key = tokens[0]
        if key.endswith(":") or key.strip() == "---":
            raise self.error(f"invalid host {key!r}" + (" (a YAML document marker: is this a YAML file?)"
                                                          if key == "---" else ": ':' must be followed by a port"))
        names, port = host_key_names(key, file=self.file, line=self.line, key=key)
        variables: list[VarSource] = []
        for token in tokens[1:]:
            name, sep, value = token.partition("=")
            if not sep:
                raise self.error(f"expected key=value after host {key!r}, got {token!r}", key=key)
            variables.append(VarSource(name, literal(value), None, self.file, self.line, f"{key}.{name}",
                                       self.base_dir))
        for host_name in names:
            port_src = None
            if port is not None:
                port_src = VarSource("ansible_port", port, None, self.file, self.line, key, self.base_dir)
            host = self.b.add_host(host_name, group, file=self.file, line=self.line, port=port_src)
            for src in variables:
                self.b.set_var(host, src)


def ingest_ini(builder: InventoryBuilder, text: str, file: str) -> None:
    """Add an INI inventory's ``text`` (read from ``file``) to ``builder``.

    Raises:
        InventoryError: a malformed section, host line or variable line, or a group named in
            ``:vars``/``:children`` that is never declared.
    """
    _IniReader(builder, file).read(text.splitlines())
