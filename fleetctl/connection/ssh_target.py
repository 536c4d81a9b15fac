"""Where and how ssh(1) would connect to a host: the inventory's settings over the user's ssh_config.

:func:`resolve_target` evaluates ``~/.ssh/config`` then ``/etc/ssh/ssh_config`` (OpenSSH's order,
first value wins; or only the file named by the ``ssh_config`` var, as ``ssh -F`` does) with
asyncssh's own ssh_config reader (:class:`asyncssh.SSHClientConnectionOptions`): ``Host`` and
``Match`` blocks, ``Include``, ``HostName`` and its ``%`` tokens, ``Port``, ``User``,
``ProxyJump``, ``ProxyCommand``, ``HostKeyAlias``, ``UserKnownHostsFile``,
``GlobalKnownHostsFile``, ``IdentityFile``, ``IdentitiesOnly``, ``IdentityAgent``. Two options
asyncssh's reader does not know, ``HashKnownHosts`` and ``CheckHostIP``, are read by the same
parser with two more boolean options registered (:class:`_ClientConfig`).

What the inventory says wins over ssh_config, as command-line options win for ssh: the
inventory's address is the name ``Host`` patterns match (Ansible runs ``ssh <ansible_host>``), its
port and user replace ``Port`` and ``User``, its key file comes before every ``IdentityFile``
(``ssh -i``), and its ``known_hosts`` file replaces ``UserKnownHostsFile``.

Each ssh_config file is read once per host: the same read gives the target and the options
asyncssh connects with (:attr:`SSHTarget.options`), where it used to be read three times (the
target, the two extra options, then asyncssh's ``connect``): 1 ms of controller CPU a host
(bench/README.md, issue 27).

Nothing here connects; the result is a plain value (:class:`SSHTarget`).
"""

from __future__ import annotations

import getpass
import os
import shlex
from dataclasses import dataclass, field
from typing import Any

import asyncssh
from asyncssh.config import SSHClientConfig, SSHConfig
from asyncssh.misc import Options

from ..util.paths import unreadable_file

DEFAULT_PORT = 22
#: OpenSSH's defaults (ssh_config(5)).
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
#: OpenSSH's default identities, in its order (ssh(1) ``-i``), tried only when none is named.
DEFAULT_IDENTITIES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ecdsa_sk", "~/.ssh/id_ed25519",
                      "~/.ssh/id_ed25519_sk", "~/.ssh/id_xmss", "~/.ssh/id_dsa")
SYSTEM_CONFIG = "/etc/ssh/ssh_config"


class SSHConfigError(ValueError):
    """An ssh_config file could not be read or parsed; the message names the file and line."""


@dataclass(frozen=True)
class SSHTarget:
    """One host as ssh would reach it.

    Attributes:
        name: the name given (the inventory's address), which ssh_config ``Host`` patterns match.
        host: where to connect (``HostName`` applied).
        port: TCP port.
        user: login name.
        host_key_alias: ``HostKeyAlias``: the name host keys are checked and recorded under.
        user_known_hosts: known_hosts files read, the first one receiving new keys.
        global_known_hosts: known_hosts files read, never written (``GlobalKnownHostsFile``).
        hash_known_hosts: record new keys hashed (``HashKnownHosts``).
        check_host_ip: also check the key under the host's IP address (``CheckHostIP``).
        proxy_jump: jump hosts, ``[user@]host[:port]`` each, first hop first (``ProxyJump``).
        proxy_command: the ``ProxyCommand``, or ``None``.
        identity_files: private key paths to offer, in order (inventory key first).
        key_file: the inventory's private key (``ansible_ssh_private_key_file``), ``~`` expanded,
            or None: the one key ssh(1) would not find by itself (``-i`` in :attr:`ssh_command`).
        identities_named: True when the inventory or ``IdentityFile`` named keys (otherwise
            ``identity_files`` are OpenSSH's defaults).
        identities_only: offer only ``identity_files``, never other agent keys (``IdentitiesOnly``).
        agent_path: the ssh-agent socket (``IdentityAgent``, else ``$SSH_AUTH_SOCK``), or ``None``.
        config_paths: the ssh_config files read, in order.
        config_file: the one ssh_config file named by the ``ssh_config`` var (``ssh -F``), if any.
        known_hosts: the known_hosts file named by the inventory's ``known_hosts`` var (it replaced
            ``UserKnownHostsFile``), if any.
        options: asyncssh's connection options for the target, built from the ssh_config read
            that made it (``asyncssh.connect(options=..., config=None)`` reads no file again), or
            None: asyncssh must read ``config_paths`` itself (``-o`` changed the target, or the
            files ask for a second pass: ``Match final``, ``CanonicalizeHostname``).
    """

    name: str
    host: str
    port: int
    user: str
    host_key_alias: str | None = None
    user_known_hosts: tuple[str, ...] = ()
    global_known_hosts: tuple[str, ...] = ()
    hash_known_hosts: bool = False
    check_host_ip: bool = False
    proxy_jump: tuple[str, ...] = ()
    proxy_command: str | None = None
    identity_files: tuple[str, ...] = ()
    key_file: str | None = None
    identities_named: bool = False
    identities_only: bool = False
    agent_path: str | None = None
    config_paths: tuple[str, ...] = ()
    config_file: str | None = None
    known_hosts: str | None = None
    options: Any = field(default=None, compare=False, repr=False)

    @property
    def host_key_name(self) -> str:
        """The name host keys are checked and recorded under: ``HostKeyAlias``, else the host in
        OpenSSH's ``[host]:port`` form (plain ``host`` for port 22)."""
        return self.host_key_alias or host_port_name(self.host, self.port)

    @property
    def ssh_command(self) -> str:
        """The ssh(1) command line an operator types to reach the host as fleetctl does, for hints
        (``try: ssh -F /site/ssh_config -o UserKnownHostsFile=/site/kh -p 2222 -i /keys/id_fleet
        fltrial5@127.0.0.1 echo ok``): the real address, port and user, never the inventory's alias
        (ssh cannot resolve it unless ssh_config names it), the inventory's ssh_config file (``-F``:
        without it ssh reads ~/.ssh/config, another host config) and known_hosts file (``-o
        UserKnownHostsFile``: ssh would check the key in ~/.ssh/known_hosts; operator trial: the
        copied hint reached a different host config than fleetctl did), the inventory's key (``-i``:
        a host reached with that key only refused the hint's ssh, operator trial; ``IdentityFile``
        keys ssh reads itself) and the jump hosts (``-J``); each word quoted for a POSIX shell
        (``shlex.join``: a key path with a space is one word)."""
        config = ["-F", self.config_file] if self.config_file else []
        known = ["-o", f"UserKnownHostsFile={_config_word(self.known_hosts)}"] if self.known_hosts else []
        port = [] if self.port == DEFAULT_PORT else ["-p", str(self.port)]
        key = ["-i", self.key_file] if self.key_file else []
        jump = ["-J", ",".join(self.proxy_jump)] if self.proxy_jump else []
        return shlex.join(["ssh", *config, *known, *port, *key, *jump, f"{self.user}@{self.host}"])

    @property
    def where(self) -> str:
        """``user@host:port`` for messages."""
        return f"{self.user}@{self.host}:{self.port}"


def host_port_name(host: str, port: int) -> str:
    """OpenSSH's known_hosts name for a host and port (``put_host_port`` in misc.c): ``host`` for
    port 22, ``[host]:port`` otherwise."""
    return host if port == DEFAULT_PORT else f"[{host}]:{port}"


def default_config_paths() -> tuple[str, ...]:
    """``~/.ssh/config`` and ``/etc/ssh/ssh_config``, those that are readable, in OpenSSH's order."""
    paths = [os.path.expanduser("~/.ssh/config"), SYSTEM_CONFIG]
    return tuple(p for p in paths if os.access(p, os.R_OK))


class _ClientConfig(SSHClientConfig):
    """asyncssh's client ssh_config reader with the two boolean options it does not register."""

    _handlers = {**SSHClientConfig._handlers,
                 "hashknownhosts": ("HashKnownHosts", SSHConfig._set_bool),
                 "checkhostip": ("CheckHostIP", SSHConfig._set_bool)}


def _extra_options(config: Any) -> dict:
    """``HashKnownHosts`` and ``CheckHostIP`` from ``config`` (OpenSSH's defaults, no and no,
    when the reader is unavailable)."""
    if config is None:
        return {}
    return {"HashKnownHosts": bool(config.get("HashKnownHosts", False)),
            "CheckHostIP": bool(config.get("CheckHostIP", False))}


def _read_config(paths: tuple[str, ...], name: str, user: str | None, port: int | None) -> tuple[Any, Any, bool]:
    """ssh_config read once for ``name``: ``(config, options, reusable)``, the config read by
    :class:`_ClientConfig` and asyncssh's connection options made from it (no file read again),
    ``reusable`` False when asyncssh must read the files itself when connecting (a second pass:
    ``Match final`` or ``CanonicalizeHostname``).

    Raises:
        asyncssh.ConfigParseError, ValueError, OSError: a file is invalid or unreadable.
    """
    username = user if user is not None else ()
    port_arg = port if port is not None else ()
    kwargs = dict(host=name, port=port_arg, username=username, client_keys=None, known_hosts=None, agent_path=None,
                  client_host_keys=None, gss_auth=False, gss_kex=False)
    try:
        config = _ClientConfig.load(None, list(paths), False, False, False, _local_user(), username, name, port_arg)
        opts = asyncssh.SSHClientConnectionOptions.__new__(asyncssh.SSHClientConnectionOptions)
        Options.__init__(opts, last_config=config, config=None, **kwargs)  # what options=(config) does
    except (AttributeError, TypeError):  # a future asyncssh without these internals: read it twice
        config = None
        opts = asyncssh.SSHClientConnectionOptions(config=list(paths), **kwargs)
    second_pass = config is None or config.has_match_final() or bool(config.get("CanonicalizeHostname"))
    return config, opts, not second_pass


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _files(values, default: tuple[str, ...]) -> tuple[str, ...]:
    """A known_hosts option's files, ``~`` expanded; ``none`` means no file."""
    if values is None:
        values = list(default)
    if isinstance(values, str):
        values = values.split()
    out = []
    for v in values:
        if str(v).lower() == "none":
            continue
        out.append(os.path.expanduser(str(v)))
    return tuple(out)


def _agent_path(value) -> str | None:
    """``IdentityAgent``: ``none`` disables the agent, ``SSH_AUTH_SOCK`` (or unset) means the
    environment variable, ``$NAME`` another variable, anything else a socket path."""
    if value is None or value == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    text = str(value)
    if text.lower() == "none":
        return None
    if text.startswith("$"):
        return os.environ.get(text[1:]) or None
    return os.path.expanduser(text)


def parse_jumps(value: str | None) -> tuple[str, ...]:
    """``ProxyJump``'s comma-separated hops; ``none`` (or nothing) means no jump host."""
    if not value or str(value).strip().lower() == "none":
        return ()
    return tuple(h.strip() for h in str(value).split(",") if h.strip())


def split_jump(spec: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` (or ``ssh://[user@]host[:port]``) -> ``(user, host, port)``.

    Raises:
        SSHConfigError: the port is not a number.
    """
    spec = spec.removeprefix("ssh://")
    user, _, rest = spec.rpartition("@")
    host, port = rest, None
    if rest.startswith("["):
        end = rest.find("]")
        host = rest[1:end]
        if rest[end + 1:].startswith(":"):
            port = rest[end + 2:]
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    try:
        return (user or None), host, (int(port) if port else None)
    except ValueError:
        raise SSHConfigError(f"ProxyJump host {spec!r}: port {port!r} is not a number") from None


def _config_word(path: str) -> str:
    """``path`` as one word of an ssh_config value (``ssh -o NAME=VALUE``): ``%`` doubled (ssh
    expands ``%`` tokens in ``UserKnownHostsFile``, ssh_config(5) TOKENS), and in double quotes,
    ``\\`` and ``"`` escaped, when it holds whitespace, a quote, ``\\`` or ``#`` (ssh splits the
    value into words there: ``UserKnownHostsFile`` takes several files)."""
    path = path.replace("%", "%%")
    if any(c.isspace() or c in "\"'\\#" for c in path):
        return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return path


def resolve_target(name: str, *, port: int | None = None, user: str | None = None, key_file: str | None = None,
                   known_hosts: str | None = None, config_file: str | None = None) -> SSHTarget:
    """The :class:`SSHTarget` for ``name`` after ssh_config, with the inventory's settings on top.

    Args:
        name: the name to connect to (``ansible_host``, else the inventory host name).
        port: the inventory's port, or ``None`` for ssh_config's (else 22).
        user: the inventory's login name, or ``None`` for ssh_config's (else the local user).
        key_file: the inventory's private key, offered before every ``IdentityFile``.
        known_hosts: the inventory's known_hosts file, replacing ``UserKnownHostsFile``.
        config_file: read only this ssh_config file (``ssh -F``); ``None``: ``~/.ssh/config``
            then ``/etc/ssh/ssh_config``.

    Raises:
        SSHConfigError: an ssh_config file is unreadable or invalid (naming file and line); for
            ``config_file``, the file as given (and as expanded) and why, in the words of the
            inventory's check (:func:`fleetctl.util.paths.unreadable_file`: ``does not exist on
            this controller``, ``is a folder, not an ssh_config file``, ``cannot be read:
            Permission denied``), for a file changed since that check or a connection made without
            an inventory. ``/dev/null`` (``ssh -F /dev/null``) is no ssh_config at all.
    """
    paths = (os.path.expanduser(config_file),) if config_file else default_config_paths()
    why = unreadable_file(paths[0], "an ssh_config file") if config_file and paths[0] != os.devnull else None
    if why is not None:
        shown = repr(config_file) + ("" if paths[0] == config_file else f" ({paths[0]})")
        raise SSHConfigError(f"ssh_config file {shown} {why}")
    try:
        read, opts, reusable = _read_config(paths, name, user, port)
    except (asyncssh.ConfigParseError, ValueError, OSError) as exc:
        raise SSHConfigError(f"ssh_config: {exc}") from None
    config = opts.config
    extra = _extra_options(read)
    named = [os.path.expanduser(key_file)] if key_file else []
    for f in config.get("IdentityFile", ()) or ():
        path = os.path.expanduser(str(f))
        if path not in named:
            named.append(path)
    identities = tuple(named) if named else tuple(os.path.expanduser(p) for p in DEFAULT_IDENTITIES)
    proxy_command = opts.proxy_command
    if isinstance(proxy_command, (list, tuple)):
        proxy_command = " ".join(proxy_command)
    return SSHTarget(
        name=name,
        host=str(opts.host or name),
        port=int(opts.port or DEFAULT_PORT),
        user=str(opts.username),
        host_key_alias=opts.host_key_alias or None,
        user_known_hosts=((os.path.expanduser(known_hosts),) if known_hosts
                          else _files(config.get("UserKnownHostsFile"), DEFAULT_USER_KNOWN_HOSTS)),
        global_known_hosts=_files(config.get("GlobalKnownHostsFile"), DEFAULT_GLOBAL_KNOWN_HOSTS),
        hash_known_hosts=extra.get("HashKnownHosts", False),
        check_host_ip=extra.get("CheckHostIP", False),
        proxy_jump=parse_jumps(config.get("ProxyJump")),
        proxy_command=proxy_command or None,
        identity_files=identities,
        key_file=os.path.expanduser(key_file) if key_file else None,
        identities_named=bool(named),
        identities_only=bool(config.get("IdentitiesOnly", False)),
        agent_path=_agent_path(config.get("IdentityAgent")),
        config_paths=paths,
        config_file=paths[0] if config_file else None,
        known_hosts=os.path.expanduser(known_hosts) if known_hosts else None,
        options=opts if reusable else None,
    )


def resolve_jump(spec: str, target: SSHTarget) -> SSHTarget:
    """The :class:`SSHTarget` of one ``ProxyJump`` hop (``[user@]host[:port]``), read from
    ``target``'s ssh_config files alone, as OpenSSH runs each hop: its own ``ssh -W`` given only
    ``-l``, ``-p`` (from the spec), ``-J`` (the hops before it) and ``-F`` (OpenSSH ssh.c, where
    ``ProxyJump`` becomes a ``ProxyCommand``). So the hop's own ``Host`` block gives its
    ``HostName``, keys and known_hosts files (``UserKnownHostsFile``, ``GlobalKnownHostsFile``,
    ``HashKnownHosts``): its host key is checked against, and recorded in, the hop's files, never
    the destination's; neither the destination's inventory settings (its ``known_hosts`` var, its
    key) nor ``-o`` options reach a hop, as ``ssh -o`` reaches none.

    Raises:
        SSHConfigError: the spec's port is not a number, or the ssh_config is unreadable or invalid.
    """
    user, host, port = split_jump(spec)
    return resolve_target(host, port=port, user=user, config_file=target.config_file)
