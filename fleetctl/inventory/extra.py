"""Extra vars (``-e``) over the inventory, as Ansible ranks them.

Ansible's variable precedence ("Understanding variable precedence", Ansible docs: "extra vars
(for example, ``-e "user=my_user"``) (always win precedence)") puts ``-e`` above every inventory
var, connection vars included (``-e ansible_user=x`` logs in as x). Templates already see ``-e``
last (:func:`fleetctl.engine.context.host_context`); this module makes the host settings read from
vars (fleetctl's own, :class:`~fleetctl.inventory.settings.HostSettings`, and each connection
kind's: ``venv``, ``workdir``, ``ansible_user``, ``ansible_port``...) see them too, so that no
``-e`` is silently ignored. Among a setting's aliases the usual order still applies after the
merge (a legacy ``ansible_ssh_user`` set anywhere beats ``ansible_user``, as in ansible-core).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from typing import Any

from .ansible_names import is_ansible_name
from .model import Host
from .own_vars import own_var_names
from .vars import VarSource

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
    """
    names = setting_names(extra)
    if not names:
        return list(hosts)
    cwd = os.getcwd()
    override = {k: extra[k] for k in names}
    sources = {k: VarSource(name=k, value=extra[k], group=None, file=EXTRA_FILE, line=None, key=k, base_dir=cwd,
                            level="extra") for k in names}
    return [dataclasses.replace(h, vars={**h.vars, **override}, sources={**h.sources, **sources}, settings=None,
                                kind="", connection_settings=None, problem=None) for h in hosts]
