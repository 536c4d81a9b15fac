"""Inventory sources: what one ``-i`` names, read into the inventory being built.

A source is, in this order:

1. ``SCHEME:ARGUMENT`` for a scheme in :data:`SCHEMES` (``slurm:``, ``slurm:gpu``) that is not an
   existing path: the scheme's function returns Ansible ``--list`` JSON, which enters through
   :func:`~fleetctl.inventory.sources.list_json.ingest_list_json` like every JSON source;
2. a folder: every file in it, in sorted order, recursively, as Ansible reads an inventory folder
   (skipping hidden names, ``group_vars``, ``host_vars``, ``vars_plugins`` and the extensions
   Ansible ignores: ``.pyc .pyo .swp .bak ~ .rpm .md .txt .rst .orig .cfg .retry``);
3. an executable file starting with ``#!`` (or an ELF binary): a dynamic inventory script, run
   with ``--list`` (and ``--host HOST`` for each host, in parallel, when its JSON has no
   ``_meta.hostvars``), all calls of one load within one budget
   (:mod:`~fleetctl.inventory.sources.script`);
4. a file: ``.ini`` -> INI; ``.yaml``/``.yml``/``.json`` -> a YAML inventory (or ``--list`` JSON,
   recognised by its ``_meta`` key); any other name -> YAML when it reads as a YAML inventory, else
   INI (Ansible's yaml-then-ini plugin order). A plugin configuration (``plugin:``), Ansible Vault
   content (in the file or its ``group_vars/``/``host_vars/``) or ``.toml`` goes whole to
   ``ansible-inventory`` (:mod:`~fleetctl.inventory.sources.ansible_inventory`);
5. a string with a ``,`` that is not a path: a host list (``-i 'gpu01,gpu02:2222,'``), each in
   ``ungrouped``, as Ansible's ``host_list`` plugin.

The folder holding a file source (or the folder source itself) may have ``group_vars/`` and
``host_vars/`` (:mod:`~fleetctl.inventory.sources.vars_files`).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleetctl.errors import InventoryError, InventoryNotFound
from fleetctl.util.paths import not_regular
from fleetctl.util.yamlload import load_yaml, where

from ..address import split_port
from ..data import InventoryBuilder
from ..vars import VarSource
from .ansible_inventory import ingest_with_ansible
from .ini_inventory import ingest_ini
from .list_json import ingest_list_json
from .script import ScriptBudget, run_host_calls, run_script
from .vars_files import is_vaulted
from .yaml_inventory import ingest_yaml, is_list_json

__all__ = ["SCHEMES", "scheme_function", "is_scheme_source", "is_host_list", "add_source", "HOST_LIST_HINT"]

#: Said after ``cannot resolve NAME`` for a host of a host list whose NAME is a file here: ``-i
#: m1/hosts,m2/site.yaml`` is a host list of two hosts (Ansible's ``host_list`` plugin reads any
#: ``-i`` value with a comma that is not a path so), not two sources (an operator's trial);
#: ``FLEETCTL_INVENTORY`` alone splits at commas.
HOST_LIST_HINT = "-i with a comma is a host list, as in Ansible; give each inventory file its own -i"

SCHEMES: dict[str, str] = {
    "slurm": "fleetctl.inventory.sources.slurm:list_json",
}
"""Inventory sources named by a scheme: ``-i SCHEME:ARGUMENT`` -> ``"module:function"``.

The function is called as ``function(argument: str) -> dict`` and returns Ansible ``--list`` JSON
(groups with ``hosts``/``vars``/``children``, and ``_meta.hostvars``); it raises
:class:`~fleetctl.errors.InventoryError` for bad input. A new source is one module and one line
here, e.g. ``"slurm": "fleetctl.inventory.sources.slurm:list_json"`` (nodes from ``sinfo``,
grouped by partition, feature and GRES type).
"""

_IGNORED_EXTS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")
_IGNORED_NAMES = ("host_vars", "group_vars", "vars_plugins")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.S)
_VAULT_TAG = re.compile(rb"(?m)(?::|^\s*-|,|\[)\s*!vault\b")


def is_scheme_source(spec: str) -> bool:
    """``spec`` names a source by a scheme in :data:`SCHEMES` (``slurm:``, ``slurm:gpu``): it is
    read through the scheme's function, not as a path (an existing path of that name wins)."""
    m = _SCHEME.fullmatch(spec)
    return bool(m and m.group(1) in SCHEMES and not os.path.exists(spec))


def scheme_function(name: str) -> Callable[[str], Any]:
    """The function registered for a scheme in :data:`SCHEMES`."""
    module, _, attr = SCHEMES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass
class _Plan:
    """What one source will add, read in full before anything is added (so that a source found to
    need Ansible halfway through leaves nothing half-added)."""

    spec: str
    steps: list[tuple[str, Any, str]] = field(default_factory=list)  # (kind, payload, file)
    vars_folder: str | None = None
    delegate: str | None = None  # why the source goes to ansible-inventory
    where: dict[str, Any] = field(default_factory=dict)  # file, line, key of that reason
    budget: ScriptBudget = field(default_factory=ScriptBudget)  # of the inventory load's script calls

    def hand_over(self, why: str, file: str, line: int | None = None, key: str | None = None) -> None:
        if self.delegate is None:
            self.delegate, self.where = why, {"file": file, "line": line, "key": key}


def is_host_list(spec: str) -> bool:
    """Whether one ``-i`` value is a host list (``gpu01,gpu02:2222,``): it holds a ``,``, is no
    path here and names no scheme (Ansible's ``host_list`` plugin: "a string with a comma that is
    not a path")."""
    return "," in spec and not os.path.exists(spec) and not is_scheme_source(spec)


def _is_script(path: str) -> bool:
    if not os.access(path, os.X_OK):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return head.startswith(b"#!") or head == b"\x7fELF"


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror or exc}", file=path) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InventoryError("not valid UTF-8 text", file=path, line=raw.count(b"\n", 0, exc.start) + 1) from None


def _looks_like_ini(text: str) -> bool:
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#;":
            return line.startswith("[") and line.endswith("]") or (":" not in line or "=" in line)
    return True


def _plan_file(plan: _Plan, path: str) -> None:
    ext = os.path.splitext(path)[1].lower()
    if _is_script(path):
        plan.steps.append(("script", run_script(path, "--list", budget=plan.budget), path))
        return
    if ext == ".toml":
        plan.hand_over("a TOML inventory", path)
        return
    if ext == ".ini":
        plan.steps.append(("ini", _read_text(path), path))
        return
    try:
        data = load_yaml(path, error_cls=InventoryError)
    except InventoryError as exc:
        if getattr(exc, "vault", False):
            plan.hand_over("Ansible Vault content", path, exc.line, exc.key)
            return
        if ext in (".yaml", ".yml", ".json") or not _looks_like_ini(_read_text(path)):
            raise
        plan.steps.append(("ini", _read_text(path), path))
        return
    if isinstance(data, str) and data.startswith("$ANSIBLE_VAULT"):
        plan.hand_over("a vault-encrypted inventory", path, 1)
    elif isinstance(data, dict) and "plugin" in data:
        plan.hand_over("an inventory plugin configuration", path, where(data, "plugin"), "plugin")
    elif is_list_json(data):
        plan.steps.append(("json", data, path))
    elif ext in (".yaml", ".yml", ".json") or isinstance(data, dict) or not _looks_like_ini(_read_text(path)):
        plan.steps.append(("yaml", data, path))
    else:
        plan.steps.append(("ini", _read_text(path), path))


def _plan_folder(plan: _Plan, folder: str) -> None:
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise InventoryError(f"cannot read the folder: {exc.strerror or exc}", file=folder) from None
    for name in names:
        if name.startswith(".") or name in _IGNORED_NAMES or name.endswith(_IGNORED_EXTS):
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            _plan_folder(plan, path)
        elif os.path.isfile(path):
            _plan_file(plan, path)


def _vars_folder_vaulted(folder: str) -> str | None:
    for sub in ("group_vars", "host_vars"):
        for root, _dirs, files in os.walk(os.path.join(folder, sub)):
            for name in files:
                path = os.path.join(root, name)
                special = not_regular(path)  # a FIFO in group_vars/ would block the read forever
                if special:
                    raise InventoryError(special, file=path)
                if is_vaulted(path):
                    return path
                try:
                    with open(path, "rb") as fh:
                        if _VAULT_TAG.search(fh.read()):
                            return path
                except OSError:
                    continue
    return None


def _plan(spec: str, budget: ScriptBudget) -> _Plan:
    plan = _Plan(spec, budget=budget)
    if is_scheme_source(spec):
        scheme, _, argument = spec.partition(":")
        plan.steps.append(("json", scheme_function(scheme)(argument), spec))
        return plan
    if os.path.isdir(spec):
        _plan_folder(plan, spec)
        plan.vars_folder = spec
        if not plan.steps and plan.delegate is None:
            raise InventoryError("the folder holds no inventory file", file=spec)
    elif os.path.exists(spec):
        special = not_regular(spec)  # a FIFO would block the read forever
        if special:
            raise InventoryError(special, file=spec)
        _plan_file(plan, spec)
        plan.vars_folder = os.path.dirname(spec)  # "" for a file in the current folder: paths stay as typed
    elif is_host_list(spec):
        plan.steps.append(("hosts", [h.strip() for h in spec.split(",") if h.strip()], spec))
        return plan
    else:
        raise InventoryNotFound(spec, "the inventory sources given")  # the caller names how they were given
    vaulted = _vars_folder_vaulted(plan.vars_folder) if plan.vars_folder is not None else None
    if vaulted is not None:
        plan.hand_over("Ansible Vault content", vaulted)
    return plan


def add_source(builder: InventoryBuilder, spec: str, budget: ScriptBudget | None = None) -> str | None:
    """Read the source ``spec`` (one ``-i`` value) into ``builder``.

    Args:
        budget: the time inventory scripts may take, shared by every source of one inventory load
            (:mod:`~fleetctl.inventory.sources.script`); None: one of this source's own.

    Returns:
        The folder whose ``group_vars/``/``host_vars/`` apply to this source, or None (scheme,
        host list, or a source ``ansible-inventory`` read with its vars already merged).

    Raises:
        InventoryError: the source does not exist, cannot be read, or is invalid (one line naming
            the file, line and key).
    """
    plan = _plan(spec, ScriptBudget() if budget is None else budget)
    if plan.delegate is not None:
        ingest_with_ansible(builder, spec, plan.delegate, **plan.where)
        return None
    for kind, payload, file in plan.steps:
        if kind == "yaml":
            ingest_yaml(builder, payload, file)
        elif kind == "ini":
            ingest_ini(builder, payload, file)
        elif kind == "hosts":
            for entry in payload:
                host, port = split_port(entry) or (entry, None)
                if any(c.isspace() or c in "[]" for c in host):
                    raise InventoryError(f"host list entry {entry!r} is not a host name (a host list has no ranges)",
                                         file=file)
                port_src = None if port is None else VarSource("ansible_port", port, None, file, None, entry, os.getcwd())
                builder.add_host(host, "ungrouped", file=file, port=port_src)
        else:
            base = os.path.dirname(os.path.abspath(file)) if kind == "script" else os.getcwd()
            if kind == "json" and os.path.exists(file):
                base = os.path.dirname(os.path.abspath(file))
            host_vars = ((lambda names, _f=file: run_host_calls(_f, names, plan.budget)) if kind == "script"
                         else None)
            ingest_list_json(builder, payload, file=file, base_dir=base, host_vars=host_vars)
    return plan.vars_folder
