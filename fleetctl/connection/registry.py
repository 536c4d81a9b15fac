"""Connection kinds: the registry from a host's ``ansible_connection`` to the module implementing it.

As Ansible's connection plugin loader (``lib/ansible/plugins/connection/``) and pyinfra's connectors:
a kind is one module that declares

- ``SETTINGS``: a model of the host vars the kind reads (:class:`ConnectionSettings`, validated
  with pydantic's rules: :mod:`fleetctl.util.settingsmodel`), each field's aliases being the
  inventory var names (Ansible's, in their precedence order), so the inventory validates a host's
  connection settings once, with the model, and the kind receives them typed;
- ``KIND``: a :class:`ConnectionKind`, whose :meth:`ConnectionKind.scope` opens what one run needs
  for all its hosts of that kind (nothing for SSH; one Slurm allocation for Slurm) and hands out one
  :class:`~fleetctl.connection.base.Connection` per host.

Kinds are loaded lazily by name (``"module:attribute"``), so a run that uses SSH only never imports
the Slurm module, and ``fleetctl run`` imports only what it needs. Adding a kind is one module and one
line in :data:`KINDS`. Nothing here imports the inventory: a host reaches a kind as its name plus its
typed settings (:class:`HostRef`).
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..util.settingsmodel import Settings

if TYPE_CHECKING:
    from .base import Connection

#: ``ansible_connection`` value -> ``"module:attribute"`` of its :class:`ConnectionKind`.
KINDS: dict[str, str] = {
    "ssh": "fleetctl.connection.ssh_kind:KIND",
    "local": "fleetctl.connection.local:KIND",
    "slurm": "fleetctl.connection.slurm:KIND",
}

#: The kind of a host whose inventory does not say (Ansible's default, ``ansible_connection: ssh``).
DEFAULT_KIND = "ssh"


class ConnectionSettings(Settings):
    """Base of every kind's settings model: vars it does not declare are ignored (they are the
    host's ordinary variables), values are validated and coerced once (``ansible_port: "2222"``)."""

    by_name = True


@dataclass(frozen=True)
class ConnectOptions:
    """Run-wide connection options from the command line.

    Attributes:
        accept_new_host_keys: record the host key of a host that has none recorded (OpenSSH's
            ``StrictHostKeyChecking=accept-new``); a changed key is refused regardless.
        connect_timeout_s: deadline for reaching and logging in to one host, seconds (for Slurm:
            for the allocation to be granted).
        run_id: the run's id, for names a kind creates (Slurm job names).
        ssh_options: ``-o`` options, ``"Name=value"`` each, checked by
            :func:`fleetctl.connection.ssh_options.parse_options`; they apply to every SSH host of
            the run (the destination, never its ``ProxyJump`` hops, as ``ssh -o``).
    """

    accept_new_host_keys: bool = False
    connect_timeout_s: float = 30.0
    run_id: str = ""
    ssh_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostRef:
    """A host as a connection kind sees it: the inventory name and its typed settings.

    ``unresolved_hint``: what the inventory adds, in parentheses, to a ``cannot resolve ADDRESS``
    failure of this host (:data:`fleetctl.inventory.sources.HOST_LIST_HINT`: a host list entry
    that is a file here, ``-i a,b`` taken for two sources); empty for none."""

    name: str
    settings: ConnectionSettings
    unresolved_hint: str = ""


class KindScope(abc.ABC):
    """What one run holds for its hosts of one kind, as an async context manager.

    ``__aexit__`` releases everything (a Slurm allocation on Ctrl-C and on failure too).
    """

    async def __aenter__(self) -> "KindScope":
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def prepare(self, hosts: Sequence[HostRef]) -> dict[str, str]:
        """Get ready for ``hosts`` (all of this kind in the run or batch) before any is connected.

        Returns:
            host name -> why it cannot be reached (a drained Slurm node with Slurm's reason); hosts
            not named are ready. Never raises for one host's problem.
        """
        return {}

    @abc.abstractmethod
    def connection(self, host: HostRef) -> "Connection":
        """An unopened connection to ``host``."""

    async def release(self, hosts: Sequence[str]) -> None:
        """``hosts`` (inventory names) are done for this run (their batch ended): give back what
        the scope holds for them only (a Slurm allocation's nodes). Default: nothing."""
        return None

    #: The scope can send one local file to many of its hosts at once (Slurm's ``sbcast``):
    #: see :meth:`broadcast`.
    can_broadcast: bool = False

    async def broadcast(self, local_path: str, remote_path: str, hosts: Sequence[str], *,
                        mode: int = 0o644, timeout_s: float = 600.0) -> dict[str, str | None]:
        """Put ``local_path`` at ``remote_path`` (the same path) on every host of ``hosts``.

        Returns:
            host -> ``None`` (in place) or why not (one line).
        """
        raise NotImplementedError


class ConnectionKind(abc.ABC):
    """One connection kind: its name, its settings model, and its run scope."""

    name: ClassVar[str]
    settings_model: ClassVar[type[ConnectionSettings]]

    @abc.abstractmethod
    def scope(self, options: ConnectOptions) -> KindScope:
        """A new run scope for this kind (not entered yet)."""

    def machine(self, host: HostRef) -> str:
        """The machine ``host``'s connection will reach, as one string (no connection is made):
        two inventory names for one machine give one answer, one name for two machines (two
        inventories) two. Keys the controller-side deploy lock (:mod:`fleetctl.engine.machinelock`). Default:
        the kind and the inventory name."""
        return f"{self.name}:{host.name}"


def kind_names() -> list[str]:
    """The registered kind names, sorted (for messages: ``expected one of ...``)."""
    return sorted(KINDS)


def load_kind(name: str) -> ConnectionKind:
    """The :class:`ConnectionKind` registered as ``name``.

    Raises:
        KeyError: no such kind (the inventory reports it with did-you-mean before this happens).
    """
    module_name, _, attr = KINDS[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)
