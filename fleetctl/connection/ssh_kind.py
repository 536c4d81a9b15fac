"""The SSH connection kind (``ansible_connection: ssh``, the default): the host vars an SSH host
reads and the run scope that hands out one :class:`~fleetctl.connection.ssh.SSHConnection` per
host (registered in :data:`fleetctl.connection.registry.KINDS`).

Loading an inventory reads :class:`SSHSettings` of every kind its hosts use; the SSH layer itself
(:mod:`fleetctl.connection.ssh`, asyncssh: about 0.15 CPU-s to import) is imported only when an SSH
host is connected to or its machine named, so ``fleetctl run --hosts local`` never pays it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.settingsmodel import setting
from .registry import ConnectionKind, ConnectionSettings, ConnectOptions, HostRef, KindScope

if TYPE_CHECKING:
    from .ssh import SSHConnection

__all__ = ["SSHSettings", "SETTINGS", "KIND"]



class SSHSettings(ConnectionSettings):
    """The host vars an SSH host reads (Ansible's names; ``None``: the inventory does not say, and
    ``~/.ssh/config`` or OpenSSH's default decides). Aliases are in ansible-core's precedence: the
    legacy ``ansible_ssh_*`` name wins wherever it is set (``MAGIC_VARIABLE_MAPPING``; checked
    against ansible-core by tests/test_inventory_ansible.py).

    Attributes:
        address: where to connect (legacy ``ansible_ssh_host``, then ``ansible_host``).
        port: TCP port (legacy ``ansible_ssh_port``, then ``ansible_port``); a numeric string is accepted.
        user: login name (legacy ``ansible_ssh_user``, then ``ansible_user``).
        private_key_file: private key path (``ansible_ssh_private_key_file``,
            ``ansible_private_key_file``), resolved by the inventory against its own folder;
            offered before every ``IdentityFile``.
        known_hosts: fleetctl's ``known_hosts`` var: a known_hosts file replacing ssh_config's
            ``UserKnownHostsFile`` (new keys are recorded there).
        keepalive_interval_s: fleetctl's ``keepalive_interval`` var, seconds between keepalives.
        ssh_config: fleetctl's ``ssh_config`` var: read this ssh_config file instead of
            ``~/.ssh/config`` and ``/etc/ssh/ssh_config`` (as ``ssh -F``).
    """

    address: str | None = setting(str, "ansible_ssh_host", "ansible_host", optional=True)
    port: int | None = setting(int, "ansible_ssh_port", "ansible_port", optional=True, ge=1, le=65535)
    user: str | None = setting(str, "ansible_ssh_user", "ansible_user", optional=True)
    private_key_file: str | None = setting(str, "ansible_ssh_private_key_file", "ansible_private_key_file",
                                           optional=True)
    known_hosts: str | None = setting(str, "known_hosts", optional=True)
    keepalive_interval_s: float = setting(float, "keepalive_interval", default=15.0, gt=0)
    ssh_config: str | None = setting(str, "ssh_config", optional=True)


class _SSHScope(KindScope):
    def __init__(self, options: ConnectOptions) -> None:
        self.options = options

    def connection(self, host: HostRef) -> "SSHConnection":
        from .ssh import SSHConnection

        s = host.settings
        assert isinstance(s, SSHSettings)
        return SSHConnection(
            host.name, address=s.address or host.name, port=s.port, user=s.user, key_file=s.private_key_file,
            known_hosts=s.known_hosts, accept_new_host_keys=self.options.accept_new_host_keys,
            connect_timeout_s=self.options.connect_timeout_s, keepalive_interval_s=s.keepalive_interval_s,
            ssh_config=s.ssh_config, ssh_options=self.options.ssh_options, unresolved_hint=host.unresolved_hint)


class _SSHKind(ConnectionKind):
    """OpenSSH-compatible hosts over asyncssh (``ansible_connection: ssh``, the default)."""

    name = "ssh"
    settings_model = SSHSettings

    def scope(self, options: ConnectOptions) -> KindScope:
        return _SSHScope(options)

    def machine(self, host: HostRef) -> str:
        """``ssh:user@address:port`` where ssh would connect (ssh_config's ``HostName``,
        ``Port``, ``User`` applied, the inventory's over them), and the route when it goes through
        jump hosts or a ``ProxyCommand`` (``localhost`` behind two bastions is two machines)."""
        from .ssh_target import SSHConfigError, resolve_target

        s = host.settings
        assert isinstance(s, SSHSettings)
        try:
            t = resolve_target(s.address or host.name, port=s.port, user=s.user, config_file=s.ssh_config)
        except SSHConfigError:  # the host fails to connect anyway; its name is all there is
            return f"ssh:{host.name}"
        route = "".join(f" via {j}" for j in t.proxy_jump) + (f" via ({t.proxy_command})" if t.proxy_command else "")
        return f"ssh:{t.user}@{t.host.lower()}:{t.port}{route}"


SETTINGS = SSHSettings
KIND = _SSHKind()
