"""The per-host input checks of :meth:`fleetctl.inventory.model.Inventory.check_hosts`: Ansible
variables fleetctl refuses, controller files a host's connection settings name that cannot be
read, and a ``build_host`` that names no inventory host; each raises :class:`~fleetctl.errors.InventoryError` naming where the value was set
(``FILE:LINE: KEY`` or ``-e KEY``). A host's ``venv`` is not checked here, local or remote: one that
is not there fails that host alone (see :meth:`~fleetctl.inventory.model.Inventory.check_hosts`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from collections.abc import Collection

from fleetctl.errors import InventoryError
from fleetctl.util.didyoumean import close_matches
from fleetctl.util.paths import unreadable_file

from .ansible_support import become_unsupported, unsupported
from .settings import var_error
from .vars import VarSource
from .vars import shown as shown_value

if TYPE_CHECKING:
    from .model import Host


def source_error(host: Host, src: VarSource | None, message: str) -> InventoryError:
    if src is None:
        return InventoryError(f"host {host.name!r}: {message}")
    return var_error(message, src, src.name, host.name)  # -e VAR, or FILE:LINE: KEY


def check_ansible_vars(host: Host) -> None:
    found = unsupported(host.kind, host.vars)
    if found is None:
        return
    var, advice = found
    src = host.sources.get(var)
    value = host.vars[var]
    if var == "ansible_become":
        who = host.vars.get("ansible_become_user") or "root"
        shown = f"ansible_become (to run as {who!r})"
    elif var in ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password", "ansible_private_key",
                 "ansible_ssh_private_key", "ansible_private_key_passphrase", "ansible_ssh_private_key_passphrase"):
        shown = var
    else:
        shown = f"{var} = {shown_value(value)}"
    raise source_error(host, src, f"host {host.name!r} sets {shown}, which fleetctl does not honour: {advice}")


def check_become_vars(host: Host, task: str) -> None:
    """Refuse ``host`` for a play whose task ``task`` (its name) becomes (``become: true``) when
    the host sets ``ansible_become_user`` or ``ansible_become_method`` to anything but Ansible's
    default (:func:`~fleetctl.inventory.ansible_support.become_unsupported`): Ansible would run
    that task as that user or through that method; fleetctl would run it as root through sudo.

    Raises:
        InventoryError: one line naming where the var was set (``FILE:LINE: KEY`` or ``-e KEY``),
            the host, the task and what to do instead.
    """
    found = become_unsupported(host.vars)
    if found is None:
        return
    var, advice = found
    raise source_error(host, host.sources.get(var),
                       f"host {host.name!r} sets {var} = {shown_value(host.vars[var])}, which fleetctl does not "
                       f"honour where a task becomes (task {task!r} has become: true): {advice}")


def check_controller_files(host: Host) -> None:
    """Refuse a file on this controller that ``host``'s connection settings name and that its user
    cannot read (:func:`~fleetctl.util.paths.unreadable_file`: not there, a folder, a FIFO, no read
    permission): the private key (OpenSSH warns "Identity file ... not accessible" and logs in with
    other keys, if any; fleetctl refuses it instead of reporting the host unreachable, new-user
    trial; an identity ssh-agent holds is named by its public key, ``KEY.pub``) and the
    ``ssh_config`` file (``ssh -F`` stops at one it cannot read: an operator trial saw a relative
    one, taken against the current folder, fail every host as unreachable). Both were resolved at
    load against the inventory file's folder (:data:`~fleetctl.inventory.settings.PATH_VARS`)."""
    for field_name, what in (("private_key_file", "private key file"), ("ssh_config", "ssh_config file")):
        path = getattr(host.connection_settings, field_name, None)
        why = None if path is None else unreadable_file(path, "a key file" if field_name != "ssh_config"
                                                        else "an ssh_config file")
        if why is None or (path == os.devnull and field_name == "ssh_config"):  # ssh -F /dev/null: none
            continue
        src = host.source_of(field_name)
        written = src.value if src is not None and isinstance(src.value, str) else path
        shown = repr(written) + ("" if written == path else f" ({path})")
        raise source_error(host, src, f"host {host.name!r}: {what} {shown} {why}")


def build_host_problem(target: str | None, names: Collection[str]) -> str | None:
    """Why ``build_host`` ``target`` cannot be used (it is none of the inventory's host ``names``,
    with a did-you-mean), or None. The one rule for every place the value comes from: the
    inventory at load (:func:`fleetctl.inventory.merge.finish`) and ``-e build_host``
    (:func:`check_build_host`)."""
    if target is None or target in names:
        return None
    close = close_matches(target, list(names), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"build_host {target!r} is not a host in the inventory{hint}"


def check_build_host(host: Host, names: Collection[str]) -> None:
    """Refuse ``host``'s ``build_host`` when it names none of the inventory's hosts ``names``. The
    inventory's own values were refused at load; this catches the one ``-e build_host`` gave
    (operator trial: ``-e build_host=gpu0l`` was taken without a word, while the same value in
    the inventory was refused).

    Raises:
        InventoryError: one line naming where the value was set (``-e build_host: ...``, or
            ``FILE:LINE: KEY: ...``).
    """
    problem = build_host_problem(host.settings.build_host, names)
    if problem is not None:
        raise source_error(host, host.sources.get("build_host"), problem)
