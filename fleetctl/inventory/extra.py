"""Extra vars (``-e``) over the inventory, as Ansible ranks them.

Ansible's variable precedence ("Understanding variable precedence", Ansible docs: "extra vars
(for example, ``-e "user=my_user"``) (always win precedence)") puts ``-e`` above every inventory
var, connection vars included (``-e ansible_user=x`` logs in as x). Templates already see ``-e``
last (:func:`fleetctl.engine.context.host_context`); this module makes the host settings read from
vars (fleetctl's own, :class:`~fleetctl.inventory.settings.HostSettings`, and each connection
kind's: ``venv``, ``workdir``, ``ansible_user``, ``ansible_port``...) see them too, so that no
``-e`` is silently ignored.

A setting with a legacy and a modern name (``ansible_ssh_port``/``ansible_port``...) takes the ``-e``
value whichever name ``-e`` uses: extra vars win over the inventory for the setting, not only for the
spelling, so every name of it the host sets is given the ``-e`` value (``-e ansible_user=x`` over the
inventory's ``ansible_ssh_user: y`` runs as x, and ``{{ ansible_ssh_user }}`` says x too). Two ``-e``
that name one setting by both names with different values are refused, as the same conflict in one
inventory file is (:func:`fleetctl.inventory.merge` ``_alias_conflicts``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InputError
from .ansible_names import is_ansible_name
from .model import Host
from .own_vars import own_var_names
from .vars import VarSource, same, shown

__all__ = ["with_extra_vars", "EXTRA_FILE"]

#: How messages name the place an extra var was set (``-e: venv: ...``).
EXTRA_FILE = "-e"


def setting_names(extra: Mapping[str, Any]) -> list[str]:
    """The names in ``extra`` that are host settings: fleetctl's own vars and Ansible's names."""
    own = own_var_names()
    return [k for k in extra if k in own or is_ansible_name(k)]


def with_extra_vars(hosts: Iterable[Host], extra: Mapping[str, Any]) -> list[Host]:
    """``hosts`` with the settings among ``extra`` merged over their vars (``-e`` wins) and their
    typed settings validated again; a relative path among them resolves against the current
    folder (where ``-e`` was typed). Other extra vars are left to the templates.

    Errors in a value (``-e ansible_port=x``) surface as the settings' usual one-line
    :class:`~fleetctl.errors.InventoryError`, naming ``-e`` and the var.

    Raises:
        InputError: two ``-e`` name one setting by its legacy and modern name with different values
            (``-e ansible_port=2291 -e ansible_ssh_port=2299``), naming both.
    """
    names = setting_names(extra)
    if not names:
        return list(hosts)
    groups = _alias_groups()
    _refuse_alias_conflicts(extra, names, groups)
    cwd = os.getcwd()
    override = {k: extra[k] for k in names}
    sources = {k: VarSource(name=k, value=extra[k], group=None, file=EXTRA_FILE, line=None, key=k, base_dir=cwd,
                            level="extra") for k in names}
    out = []
    for h in hosts:
        spelled = {**override}
        spelled_from = {**sources}
        for name in names:  # the setting's other names the host sets take the -e value too
            for alias in groups.get(name, ()):
                if alias not in override and alias in h.vars:
                    spelled[alias] = extra[name]
                    spelled_from[alias] = dataclasses.replace(sources[name], name=alias)
        out.append(dataclasses.replace(h, vars={**h.vars, **spelled}, sources={**h.sources, **spelled_from},
                                       settings=None, kind="", connection_settings=None, problem=None))
    return out


def _alias_groups() -> dict[str, tuple[str, ...]]:
    """Var name -> every name of the same setting (itself included), for the settings of more than one
    name among fleetctl's own and each connection kind's (``ansible_port``: ``ansible_ssh_port``,
    ``ansible_port``)."""
    from ..connection.registry import KINDS, load_kind
    from .settings import HostSettings, aliases_of

    out: dict[str, tuple[str, ...]] = {}
    for model in (HostSettings, *(load_kind(k).settings_model for k in KINDS)):
        by_field: dict[str, list[str]] = {}
        for var, fname in aliases_of(model).items():
            by_field.setdefault(fname, []).append(var)
        for spelled in by_field.values():
            if len(spelled) > 1:
                for var in spelled:
                    out[var] = tuple(dict.fromkeys((*out.get(var, ()), *spelled)))
    return out


def _refuse_alias_conflicts(extra: Mapping[str, Any], names: list[str], groups: Mapping[str, tuple[str, ...]]) -> None:
    """Refuse two ``-e`` that name one setting by two names with different values (no order of
    ``-e`` items decides: Ansible would take the legacy one wherever it is given)."""
    for i, name in enumerate(names):
        for other in names[i + 1:]:
            if other in groups.get(name, ()) and not same(extra[name], extra[other]):
                raise InputError(f"-e {name}={_typed(extra[name])} and -e {other}={_typed(extra[other])} name one "
                                 f"setting by its two names with different values; keep one")


def _typed(value: Any) -> str:
    """A ``-e`` value as the operator typed it (``2291``); other than a string, its repr."""
    return value if isinstance(value, str) and len(value) <= 40 else shown(value)
