"""``fleetctl -o OPTION=VALUE``: one-off ssh options, as ``ssh -o`` gives them.

fleetctl reads ssh settings from ssh_config only (:mod:`fleetctl.connection.ssh_target`), so an
``-o`` option is one more ssh_config line with the highest priority, as for ``ssh -o``
(ssh(1): "command-line options" come before every ssh_config file, and the first value obtained
wins, ssh_config(5)). It applies to the destination hosts only; ``ProxyJump`` hops get their
ssh_config only, as OpenSSH runs them. It wins over the inventory's port, user and key too: it is
what the operator typed for this one command.

Accepted: the ssh_config options fleetctl honours (names case-insensitive, ``Option=value`` or
``Option value``): ``HostName``, ``Port``, ``User``, ``IdentityFile``, ``IdentitiesOnly``,
``IdentityAgent``, ``ProxyJump``, ``ProxyCommand``, ``HostKeyAlias``, ``UserKnownHostsFile``,
``GlobalKnownHostsFile``, ``HashKnownHosts``, ``CheckHostIP``, and ``StrictHostKeyChecking``
``yes`` (what fleetctl always does) or ``accept-new`` (``--accept-new-host-keys``). Refused, in one
line naming the option and why: every other option (fleetctl would silently ignore it), and
``StrictHostKeyChecking`` ``no``/``off``/``ask`` (a changed key is always refused; fleetctl never
prompts).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the ssh layer (asyncssh) is imported only when an option is applied
    from .ssh_target import SSHTarget

#: lower-case name -> ssh_config's spelling, for the options fleetctl honours.
HONOURED = {n.lower(): n for n in (
    "HostName", "Port", "User", "IdentityFile", "IdentitiesOnly", "IdentityAgent", "ProxyJump", "ProxyCommand",
    "HostKeyAlias", "UserKnownHostsFile", "GlobalKnownHostsFile", "HashKnownHosts", "CheckHostIP",
    "StrictHostKeyChecking")}

_BOOL = {"yes": True, "true": True, "no": False, "false": False}


class SSHOptionError(ValueError):
    """An ``-o`` option fleetctl refuses; the message names it and says why (one line)."""


def parse_option(text: str) -> tuple[str, str]:
    """``"Port=2222"`` / ``"port 2222"`` -> ``("Port", "2222")``: the ssh_config spelling and the value.

    Raises:
        SSHOptionError: no value, an option fleetctl does not honour, a bad value, or a setting
            that would weaken host key checking.
    """
    m = re.match(r"\s*([A-Za-z]+)\s*(?:=\s*|\s+)(.*?)\s*$", text)
    if not m or not m.group(2):
        raise SSHOptionError(f"-o {text!r}: expected OPTION=VALUE (as ssh -o), e.g. -o Port=2222")
    raw, value = m.group(1), m.group(2)
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    name = HONOURED.get(raw.lower())
    if name is None and raw.lower() in _OWN_FLAGS:
        raise SSHOptionError(f"-o {raw}={value}: fleetctl sets this itself: {_OWN_FLAGS[raw.lower()]}")
    if name is None:
        raise SSHOptionError(
            f"-o {raw}: fleetctl does not honour this ssh option, so it would be ignored; it takes "
            f"{', '.join(sorted(set(HONOURED.values()) - {'StrictHostKeyChecking'}))} and "
            "StrictHostKeyChecking=accept-new (README \"SSH: hosts are reached as ssh(1) reaches them\")")
    low = value.lower()
    if name == "StrictHostKeyChecking" and low not in ("yes", "true", "accept-new"):
        raise SSHOptionError(
            f"-o StrictHostKeyChecking={value}: refused: fleetctl checks every host key and a changed key "
            "is always refused (it never prompts); StrictHostKeyChecking=accept-new is --accept-new-host-keys")
    if name == "Port" and not (value.isdigit() and 1 <= int(value) <= 65535):
        raise SSHOptionError(f"-o Port={value}: not a TCP port (1-65535)")
    if name in ("IdentitiesOnly", "HashKnownHosts", "CheckHostIP") and low not in _BOOL:
        raise SSHOptionError(f"-o {name}={value}: expected yes or no")
    return name, value


# ssh_config options whose job a fleetctl flag does (ssh_config(5) ConnectTimeout: seconds to
# connect; fleetctl's deadline also covers the login)
_OWN_FLAGS = {"connecttimeout": "use --connect-timeout SECONDS (the deadline to connect and log in to each host)"}


def parse_options(values: Sequence[str]) -> tuple[str, ...]:
    """Every ``-o`` value checked and normalised to ``"Name=value"`` (ssh_config spelling), in
    the order given.

    Raises:
        SSHOptionError: see :func:`parse_option`.
    """
    return tuple("=".join(parse_option(v)) for v in values)


def accepts_new_keys(options: Sequence[str]) -> bool:
    """True when the options hold ``StrictHostKeyChecking=accept-new``."""
    return any(o.lower() == "stricthostkeychecking=accept-new" for o in options)


def apply_options(target: SSHTarget, options: Sequence[str]) -> SSHTarget:
    """``target`` (ssh_config and the inventory applied) with the ``-o`` options over it; for an
    option given twice the first wins (as ``ssh -o``). ``StrictHostKeyChecking`` is not a target
    field (the run's options carry it). No options: ``target`` itself."""
    if not options:
        return target
    seen: dict[str, str] = {}
    identities: list[str] = []
    for text in options:
        name, value = parse_option(text)
        if name == "IdentityFile":
            identities.append(os.path.expanduser(value))
        else:
            seen.setdefault(name, value)
    changes: dict[str, object] = {}
    if "HostName" in seen:
        changes["host"] = seen["HostName"].replace("%h", target.name)
    if "Port" in seen:
        changes["port"] = int(seen["Port"])
    if "User" in seen:
        changes["user"] = seen["User"]
    if identities:
        changes["identity_files"] = tuple(dict.fromkeys(
            identities + (list(target.identity_files) if target.identities_named else [])))
        changes["identities_named"] = True
    if "IdentitiesOnly" in seen:
        changes["identities_only"] = _BOOL[seen["IdentitiesOnly"].lower()]
    if "IdentityAgent" in seen:
        changes["agent_path"] = _agent(seen["IdentityAgent"])
    if "ProxyJump" in seen:
        from .ssh_target import parse_jumps

        changes["proxy_jump"] = parse_jumps(seen["ProxyJump"])
    if "HostKeyAlias" in seen:
        changes["host_key_alias"] = seen["HostKeyAlias"]
    for name, field in (("UserKnownHostsFile", "user_known_hosts"), ("GlobalKnownHostsFile", "global_known_hosts")):
        if name in seen:
            changes[field] = tuple(os.path.expanduser(f) for f in seen[name].split() if f.lower() != "none")
    for name, field in (("HashKnownHosts", "hash_known_hosts"), ("CheckHostIP", "check_host_ip")):
        if name in seen:
            changes[field] = _BOOL[seen[name].lower()]
    if "ProxyCommand" in seen:
        cmd = seen["ProxyCommand"]
        changes["proxy_command"] = None if cmd.lower() == "none" else proxy_tokens(cmd, replace(target, **changes))
    # the options asyncssh would connect with were read for the target before `-o`: let it read
    # ssh_config again with what -o changed (see SSHTarget.options)
    return replace(target, **changes, options=None) if changes else target


def proxy_tokens(command: str, target: SSHTarget) -> str:
    """``ProxyCommand``'s tokens expanded as ssh_config(5) says (``%h`` the host name, ``%p`` the
    port, ``%r`` the user, ``%n`` the name as given, ``%%`` a percent sign); others kept."""
    values = {"h": target.host, "p": str(target.port), "r": target.user, "n": target.name, "%": "%"}
    return re.sub(r"%(.)", lambda m: values.get(m.group(1), m.group(0)), command)


def _agent(value: str) -> str | None:
    """``IdentityAgent`` as ssh_config(5) reads it: ``none``, ``SSH_AUTH_SOCK``, ``$NAME`` or a path."""
    if value.lower() == "none":
        return None
    if value == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    if value.startswith("$"):
        return os.environ.get(value[1:]) or None
    return os.path.expanduser(value)
