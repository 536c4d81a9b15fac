"""What fleetctl does with each of Ansible's connection and privilege variables: honoured, refused,
or ignored (harmless). docs/inventory.md ("Ansible's connection variables") lists the same.

Honoured: the names the connection kinds' ``SETTINGS`` models read (``ansible_host``,
``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``... and the legacy
``ansible_ssh_*`` forms), and ``ansible_connection``.

Refused (:data:`REFUSED`): a var that would change where, how or as whom commands run. Ignoring it
would connect somewhere else (``ansible_ssh_common_args: -o ProxyJump=bastion`` bypassing the
bastion) or run as another user (``ansible_become``). A selected host that sets one is refused
before anything connects (:func:`unsupported`), naming the var and what to do instead. Ansible's
defaults (``ansible_become: false``, an empty ``ansible_ssh_extra_args``) are not refused.

Refused for a local host when it names another user (:data:`OTHER_USER_REFUSED`): the login user
(``ansible_user``, ``ansible_ssh_user``, the names the ssh kind's ``user`` setting reads) on a host
whose connection runs every command as this controller's own user, through subprocess
(``ansible_connection: local``; Ansible's local connection plugin runs as the controller's user
too). Ignoring it ran as root and left root-owned files in another user's venv, which that user's
next deploy over SSH could not replace (operator trial); the controller's own name is fine.

Refused where a task becomes (:data:`BECOME_REFUSED`, :func:`become_unsupported`): the vars that
say as whom and how Ansible's become runs (``ansible_become_user`` and its sudo-plugin name
``ansible_sudo_user``, ``ansible_become_method``; ansible-core's ``sudo`` become plugin), set
to anything but Ansible's default (``root``, ``sudo``). Ansible reads them only where become is on;
fleetctl's become is a task's ``become: true``, which runs the task as root through ``sudo -n``,
so a play with such a task is refused for a host that sets one (ignoring it would run the task as
root, not as the user named, or through sudo, not ``su``); elsewhere they are harmless, as in
Ansible.

Ignored (:data:`IGNORED`): vars that tune how Ansible itself works (pipelining, the module
interpreter, control sockets, transfer method...) and have no counterpart in what fleetctl does, or
where fleetctl is stricter (host keys are always checked).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["BECOME_REFUSED", "IGNORED", "OTHER_USER_REFUSED", "REFUSED", "become_unsupported", "controller_user",
           "not_honoured", "unsupported"]

_SSH_OPTIONS = ("fleetctl speaks SSH itself (asyncssh) and passes no ssh command-line options: put ProxyJump "
                "and other ssh options in ~/.ssh/config, or in a file the host var ssh_config names (as ssh -F)")
_SSH_PROGRAM = ("fleetctl speaks SSH itself (asyncssh) and runs no ssh, scp or sftp program: configure the "
                "connection in ~/.ssh/config, or in a file the host var ssh_config names")
_PASSWORD = ("fleetctl logs in with keys only, never a password: name a key with ansible_ssh_private_key_file, "
             "or load it into ssh-agent (ssh-add)")
_KEY_TEXT = ("fleetctl reads private keys from files: write the key to a file (mode 0600) and name it with "
             "ansible_ssh_private_key_file; a passphrase-protected key works once ssh-add'ed")
_BECOME = ("fleetctl has no host-wide privilege escalation and would run every command as the login user: log "
           "in as the user the commands must run as (ansible_user), or mark the playbook tasks that need root "
           "'become: true' (sudo -n)")

#: var -> (the connection kinds it matters to, None for every kind; why refused and what to do instead)
REFUSED: Mapping[str, tuple[frozenset[str] | None, str]] = MappingProxyType({
    **{name: (frozenset({"ssh"}), _SSH_OPTIONS) for name in (
        "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args", "ansible_scp_extra_args",
        "ansible_sftp_extra_args")},
    **{name: (frozenset({"ssh"}), _SSH_PROGRAM) for name in (
        "ansible_ssh_executable", "ansible_scp_executable", "ansible_sftp_executable")},
    **{name: (frozenset({"ssh"}), _PASSWORD) for name in (
        "ansible_password", "ansible_ssh_pass", "ansible_ssh_password")},
    **{name: (frozenset({"ssh"}), _KEY_TEXT) for name in (
        "ansible_private_key", "ansible_ssh_private_key", "ansible_private_key_passphrase",
        "ansible_ssh_private_key_passphrase")},
    "ansible_ssh_pkcs11_provider": (frozenset({"ssh"}), "fleetctl does not load PKCS#11 providers: add the "
                                                        "token's keys to ssh-agent (ssh-add -s PROVIDER)"),
    "ansible_become": (None, _BECOME),
})

#: var -> the connection kinds that run every command as this controller's user, and so refuse it
#: naming another user (:func:`unsupported`)
OTHER_USER_REFUSED: Mapping[str, frozenset[str]] = MappingProxyType({
    name: frozenset({"local"}) for name in ("ansible_user", "ansible_ssh_user")})
_OTHER_USER = ("a local host (ansible_connection: local) runs every command on this controller as the user "
               "fleetctl runs as ({me}), never as another: run fleetctl as {user}, or reach the host over SSH as "
               "{user} (ansible_connection: ssh, ansible_host: localhost)")

#: var -> (Ansible's default, why refused where a task becomes and what to do instead)
BECOME_REFUSED: Mapping[str, tuple[str, str]] = MappingProxyType({
    "ansible_become_user": ("root", "fleetctl's become (a task's 'become: true') runs the task as root through "
                                    "sudo -n, never as another user: log in as the user the commands must run as "
                                    "(ansible_user), or leave ansible_become_user unset (root)"),
    "ansible_become_method": ("sudo", "fleetctl's become (a task's 'become: true') runs sudo -n only, never su, "
                                      "doas or another method: let the login user run sudo without a password, or "
                                      "log in as the user the commands must run as (ansible_user)"),
    # ansible-core's sudo become plugin reads ansible_sudo_user as another name of become_user
    "ansible_sudo_user": ("root", "fleetctl's become (a task's 'become: true') runs the task as root through "
                                  "sudo -n, never as another user: log in as the user the commands must run as "
                                  "(ansible_user), or leave ansible_sudo_user unset (root)"),
})

#: var -> why ignoring it is harmless (for docs and tests)
IGNORED: Mapping[str, str] = MappingProxyType({
    "ansible_python_interpreter": "fleetctl runs its host scripts with python3 from PATH and builds and installs "
                                  "with the venv var's bin/python3 (set venv to choose the environment)",
    "ansible_become_password": "fleetctl's become (a task's 'become: true') runs sudo -n, which never asks for "
                               "a password: a sudo that wants one fails the task, saying so",
    "ansible_become_pass": "as ansible_become_password",
    "ansible_become_exe": "fleetctl's become runs the host's sudo (from PATH) with -n; a sudo that cannot run "
                          "fails the task, saying so",
    "ansible_become_flags": "as ansible_become_exe",
    "ansible_sudo_pass": "as ansible_become_password (Ansible's sudo become reads it as another name of that)",
    "ansible_sudo_exe": "as ansible_become_exe (Ansible's sudo become reads it as another name of that)",
    "ansible_sudo_flags": "as ansible_become_exe",
    "ansible_sudo_chdir": "fleetctl's become runs sudo without -D, so a command runs in the folder it would run "
                          "in without become",
    **{name: ("read only by Ansible's su become method; fleetctl's become is sudo -n, and a host setting "
              "ansible_become_method to su is refused where a task becomes") for name in (
        "ansible_su_user", "ansible_su_pass", "ansible_su_exe", "ansible_su_flags", "ansible_su_prompt_l10n")},
    "ansible_ssh_pipelining": "a speed-up of Ansible's module transfer; fleetctl sends no modules",
    "ansible_pipelining": "as ansible_ssh_pipelining",
    "ansible_shell_type": "fleetctl quotes each command so that every common login shell (sh, bash, zsh, fish, "
                          "csh) reads it the same",
    "ansible_shell_executable": "fleetctl runs argv, not shell snippets",
    "ansible_remote_tmp": "fleetctl works in the workdir var's folder (default ~/.fleetctl/<host>)",
    "ansible_host_key_checking": "fleetctl always checks host keys; --accept-new-host-keys records new ones",
    "ansible_ssh_host_key_checking": "as ansible_host_key_checking",
    "ansible_timeout": "fleetctl's --connect-timeout sets the connect deadline",
    "ansible_ssh_timeout": "as ansible_timeout",
    "ansible_ssh_retries": "fleetctl retries dropped handshakes itself",
    "ansible_ssh_transfer_method": "fleetctl transfers files over SFTP",
    "ansible_sftp_batch_mode": "as ansible_ssh_transfer_method",
    "ansible_control_path": "fleetctl shares one connection per host (and per jump host) itself",
    "ansible_control_path_dir": "as ansible_control_path",
    "ansible_ssh_use_tty": "fleetctl runs commands without a tty",
    "ansible_ssh_verbosity": "only changes ssh's own logging",
    "ansible_shell_allow_world_readable_temp": "as ansible_remote_tmp",
    "ansible_sshpass_prompt": "passwords are refused (ansible_password)",
    "ansible_ssh_password_mechanism": "as ansible_sshpass_prompt",
})

_TRUE = {"yes", "on", "1", "true", "y", "t"}


def _in_effect(name: str, value: Any) -> bool:
    """Whether a value changes what Ansible does (its defaults, empty and false, do not)."""
    if value is None or value == "" or value == [] or value is False:
        return False
    if name == "ansible_become":
        if isinstance(value, str):
            return value.strip().lower() in _TRUE
        return bool(value)
    return True


def controller_user() -> str:
    """The name of the user this controller runs as (its effective uid's, else the uid), the user
    a local host's commands run as."""
    import os
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def unsupported(kind: str, variables: Mapping[str, Any], me: str | None = None) -> tuple[str, str] | None:
    """The first refused var in effect for a host of connection ``kind``: ``(var, message)``:
    one of :data:`REFUSED`, or one of :data:`OTHER_USER_REFUSED` naming a user other than ``me``
    (default :func:`controller_user`)."""
    for name, (kinds, advice) in REFUSED.items():
        if (kinds is None or kind in kinds) and name in variables:
            value = variables[name]
            if isinstance(value, Mapping) and "value" in value:  # {value: ..., secret: true}
                value = value["value"]
            if _in_effect(name, value):
                return name, advice
    for name, kinds in OTHER_USER_REFUSED.items():
        value = variables.get(name) if kind in kinds else None
        if value is not None and value != "":
            me = me or controller_user()
            if str(value) != me:
                return name, _OTHER_USER.format(me=me, user=value)
    return None


def become_unsupported(variables: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first of :data:`BECOME_REFUSED` that ``variables`` (a host's) set to anything but
    Ansible's default (empty counts as unset): ``(var, message)``; None when none is. Asked only
    for the hosts of a play with a task that becomes."""
    for name, (default, advice) in BECOME_REFUSED.items():
        value = variables.get(name)
        if isinstance(value, Mapping) and "value" in value:
            value = value["value"]
        if value is not None and value != "" and str(value).strip() != default:
            return name, advice
    return None


def not_honoured(name: str) -> str | None:
    """What fleetctl does instead of honouring Ansible's var ``name``, as a hint for a name close
    to it (``-e become_user=x``): ``fleetctl refuses Ansible's NAME: ...`` (:data:`REFUSED`),
    ``... refuses Ansible's NAME where a task becomes: ...`` (:data:`BECOME_REFUSED`), ``fleetctl
    ignores Ansible's NAME: ...`` (:data:`IGNORED`); None for a var fleetctl honours or does not know."""
    if name in REFUSED:
        return f"fleetctl refuses Ansible's {name}: {REFUSED[name][1]}"
    if name in BECOME_REFUSED:
        return f"fleetctl refuses Ansible's {name} where a task becomes: {BECOME_REFUSED[name][1]}"
    if name in IGNORED:
        return f"fleetctl ignores Ansible's {name}: {IGNORED[name]}"
    return None
