"""The environment a scheduled job carries from the shell that ran ``fleetctl schedule``.

A systemd timer or cron starts the job with an environment of its own: cron's is ``HOME``, ``LOGNAME``,
``SHELL=/bin/sh`` and ``PATH=/usr/bin:/bin`` (crontab(5)); a systemd service gets the manager's
(systemd.exec(5) "Environment variables in spawned processes"). What the operator's login sets and
the job needs is therefore written into the unit (``Environment=``) or the crontab line
(``NAME=VALUE`` before the command), decided per variable, each for a reason:

Carried when set (the job must use the same files as the interactive runs of the user who
scheduled it):

- ``FLEETCTL_HOME``, else an absolute ``XDG_STATE_HOME``: the state folder (run records, the retry
  set, controller-side locks; :func:`fleetctl.util.paths.state_env`), so ``fleetctl runs`` lists the
  nightly's runs and ``--retry-failed`` finds its failures.
- an absolute ``XDG_CACHE_HOME``: the cache folder (the wheel cache of arch classes, the probe plans,
  fetched CMake dependencies; :func:`fleetctl.util.paths.cache_dir`). Without it the nightly
  rebuilds every class the interactive deploy cached, and fills a second cache. A relative or empty
  value is ignored by fleetctl (XDG Base Directory specification), so it is not carried either.
- ``FLEETCTL_KEEP_RUNS``, ``FLEETCTL_KEEP_DAYS``: the retention each run applies when it ends
  (:mod:`fleetctl.util.retention`); without them the nightly prunes with the defaults (50 runs,
  30 days) and deletes history the operator keeps.
- ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S``, ``FLEETCTL_ANSIBLE_INVENTORY``: how the inventory is read
  (the script budget; which ``ansible-inventory``), so the job reads the inventory that was checked.
- ``FLEETCTL_SCRIPTS_DIR`` (made absolute): the host scripts the interactive deploys ran.
- ``FLEETCTL_MAX_HANDSHAKES``: logins to one sshd at once, set for that sshd's ``MaxStartups``.
- with Slurm hosts only: the launcher and Slurm client settings
  (:data:`fleetctl.connection.slurm_client.SCHEDULE_CARRIED_VARS`).

Never carried:

- ``FLEETCTL_INVENTORY``: the job's command line names every ``-i`` source, resolved when scheduled.
- ``XDG_CONFIG_HOME``: fleetctl reads no configuration there (only ``schedule`` itself, to find the
  user unit folder), nor does OpenSSH (``~/.ssh``); ``XDG_RUNTIME_DIR``: the login session's, and a
  systemd user manager sets its own (systemd.exec(5)).
- ``SSH_AUTH_SOCK``: the agent of the login session (started by it, or forwarded by ``ssh -A``); at
  HH:MM that socket is gone, or is another session's agent. The job logs in with key files
  (``ansible_ssh_private_key_file``, ``IdentityFile``) or an agent that ``IdentityAgent`` in
  ssh_config names (a socket that outlives logins), as ssh(1) run from cron would.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..connection.slurm_client import carried_env
from ..util.paths import state_env

#: Carried as set (non-empty), in this order, after the state folder's variable.
CARRIED_WHEN_SET = ("FLEETCTL_KEEP_RUNS", "FLEETCTL_KEEP_DAYS", "FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S",
                    "FLEETCTL_ANSIBLE_INVENTORY", "FLEETCTL_MAX_HANDSHAKES")
#: Carried made absolute (they name folders; the job's folder is the same, but a path should not depend on it).
CARRIED_PATHS = ("FLEETCTL_SCRIPTS_DIR",)
#: Never carried, with the reason (the module docstring says more); ``schedule`` notes a set one.
NOT_CARRIED = {
    "SSH_AUTH_SOCK": "the login session's ssh-agent is gone (or another session's) when the job runs: "
                     "give the hosts a key file (ansible_ssh_private_key_file, IdentityFile) or an "
                     "IdentityAgent socket in ssh_config that outlives logins",
}


def cache_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``XDG_CACHE_HOME`` when set to an absolute path (what :func:`fleetctl.util.paths.cache_dir`
    reads); empty when the default ``~/.cache`` applies."""
    xdg = environ.get("XDG_CACHE_HOME", "")
    return {"XDG_CACHE_HOME": xdg} if xdg and os.path.isabs(xdg) else {}


def uses_slurm(inventory: Iterable[str], hosts: Iterable[Any]) -> bool:
    """True when an inventory source is ``slurm:`` or a selected host is reached through Slurm."""
    return any(str(src).startswith("slurm:") for src in inventory) or any(h.kind == "slurm" for h in hosts)


def check_carried(environ: Mapping[str, str]) -> None:
    """The numeric variables of :data:`CARRIED_WHEN_SET` and the string-valued ``FLEETCTL_*``
    ones (:func:`fleetctl.util.envvars.check_strings`), checked as the job's fleetctl will check
    them, so that a bad one is refused now (exit 2) and not by every night's run.

    Raises:
        InputError: naming the variable and its value.
    """
    from ..inventory.sources.script import script_timeout_s
    from ..util.envvars import check_strings, max_handshakes
    from ..util.retention import policy_from_env

    policy_from_env(environ)
    script_timeout_s(environ)
    max_handshakes(environ)
    check_strings(environ)


def job_env(inventory: Iterable[str], hosts: Iterable[Any],
            environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the scheduled job carries (see the module docstring), in a stable order: the state
    folder's variable, ``XDG_CACHE_HOME``, :data:`CARRIED_WHEN_SET`, :data:`CARRIED_PATHS`, then
    the Slurm variables when the job reaches hosts through Slurm (a job carries nothing it does
    not use). ``environ`` defaults to ``os.environ``.

    Raises:
        InputError: a carried variable the job's fleetctl would refuse (:func:`check_carried`).
    """
    env = os.environ if environ is None else environ
    check_carried(env)
    out = {**state_env(env), **cache_env(env)}
    out.update({name: env[name] for name in CARRIED_WHEN_SET if env.get(name)})
    out.update({name: os.path.abspath(os.path.expanduser(env[name])) for name in CARRIED_PATHS if env.get(name)})
    if uses_slurm(inventory, hosts):
        out.update(carried_env(env))
    return out


def not_carried_notes(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line for each variable of :data:`NOT_CARRIED` that is set now: the job will not have it."""
    env = os.environ if environ is None else environ
    return [f"{name} is not carried into the job: {why}" for name, why in NOT_CARRIED.items() if env.get(name)]
