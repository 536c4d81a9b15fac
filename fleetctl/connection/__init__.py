"""Connections to hosts: the :class:`Connection` seam and the factory that picks a transport."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import CommandResult, Connection, LineCallback, OutputLine
from .local import LocalConnection

if TYPE_CHECKING:
    from ..inventory import Host

__all__ = ["CommandResult", "Connection", "LineCallback", "OutputLine", "LocalConnection", "connection_for"]


def connection_for(host: "Host", *, accept_new_host_keys: bool = False, connect_timeout_s: float = 30.0) -> Connection:
    """Return an unopened connection for an inventory host: local or SSH by its ``connection`` var.

    The host var ``keepalive_interval`` (seconds, default 15) sets SSH keepalives; three
    unanswered ones declare the connection dead. The host var ``ssh_config`` names an ssh_config
    file read instead of ``~/.ssh/config`` and ``/etc/ssh/ssh_config`` (``ssh -F``).
    """
    if host.connection == "local":
        return LocalConnection(host.name)
    from .ssh import SSHConnection

    return SSHConnection(
        host.name,
        address=host.address,
        port=host.port,
        user=host.user,
        key_file=host.key_file,
        known_hosts=host.known_hosts,
        accept_new_host_keys=accept_new_host_keys,
        connect_timeout_s=connect_timeout_s,
        keepalive_interval_s=float(host.vars.get("keepalive_interval", 15.0)),
        ssh_config=str(host.vars["ssh_config"]) if host.vars.get("ssh_config") else None,
    )
