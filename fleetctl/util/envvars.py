"""The controller's ``FLEETCTL_*`` environment variables, read and checked in one way.

A bad value is bad input: one line naming the variable and the value, exit 2, before any host is
touched (``FLEETCTL_KEEP_RUNS=0``, ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S=-5`` and
``FLEETCTL_MAX_HANDSHAKES=abc`` alike). An unset or blank numeric variable means its default.

The string-valued ones (:func:`check_strings`; each read through its function here, by whatever
uses it) name a program or a folder, and an unset one means its default; set but empty (or blank)
is refused, except where empty has a meaning of its own (``FLEETCTL_ANSIBLE_INVENTORY=``: never
delegate), as is a program that is not on ``PATH`` or a folder that does not exist (an operator
trial: ``FLEETCTL_SLURM_LAUNCHER=""`` ran the Slurm tools on the controller, silently):

- ``FLEETCTL_SLURM_LAUNCHER``: :func:`slurm_launcher`;
- ``FLEETCTL_ANSIBLE_INVENTORY``: :func:`ansible_inventory_program`;
- ``FLEETCTL_SCRIPTS_DIR``: :func:`scripts_dir`;
- ``FLEETCTL_HOME`` (:func:`fleetctl.util.paths.fleetctl_home`) and ``FLEETCTL_INVENTORY``
  (:func:`inventory_sources`): empty refused here, their values checked where read.

- ``FLEETCTL_MAX_HANDSHAKES``: connections to ONE sshd between TCP connect and login at once
  (:func:`max_handshakes`; default 8, below sshd's MaxStartups default of 10). 0 would be a gate
  no login ever passes: every SSH host would wait forever, past ``--connect-timeout``.
- ``FLEETCTL_KEEP_RUNS``/``FLEETCTL_KEEP_DAYS``: :func:`fleetctl.util.retention.policy_from_env`.
- ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S``: :func:`fleetctl.inventory.sources.script.script_timeout_s`.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping

from ..errors import InputError

__all__ = ["ANSIBLE_INVENTORY_ENV", "DEFAULT_MAX_HANDSHAKES", "MAX_HANDSHAKES_ENV", "SCRIPTS_DIR_ENV",
           "SLURM_LAUNCHER_ENV", "ansible_inventory_program", "check_count", "check_strings", "env_count",
           "inventory_sources", "max_handshakes", "scripts_dir", "slurm_launcher"]

MAX_HANDSHAKES_ENV = "FLEETCTL_MAX_HANDSHAKES"
#: Connections to one sshd between TCP connect and login at once, when the variable is not set.
DEFAULT_MAX_HANDSHAKES = 8
#: A command prefix that reaches Slurm's client tools (the ``slurm:`` source; docs/slurm.md).
SLURM_LAUNCHER_ENV = "FLEETCTL_SLURM_LAUNCHER"
#: The ``ansible-inventory`` program (empty: never delegate to Ansible).
ANSIBLE_INVENTORY_ENV = "FLEETCTL_ANSIBLE_INVENTORY"
#: Another folder of host scripts, searched first.
SCRIPTS_DIR_ENV = "FLEETCTL_SCRIPTS_DIR"


def check_count(value: object, what: str, noun: str) -> int:
    """``value`` as a whole number >= 1 (``"3"``; not ``"0"``, ``"-1"``, ``"3.0"``, ``"abc"``).

    Raises:
        InputError: ``want a whole number of <noun> >= 1``, naming ``what`` (the variable or
            option) and the value.
    """
    text = str(value).strip()
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1 or text != str(n):
        raise InputError(f"{what}: want a whole number of {noun} >= 1, got {value!r}")
    return n


def env_count(name: str, default: int, noun: str, environ: Mapping[str, str] | None = None) -> int:
    """The variable ``name`` of ``environ`` (default ``os.environ``) as a count >= 1; ``default``
    when it is unset or blank.

    Raises:
        InputError: a value that is no such count (:func:`check_count`).
    """
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    return check_count(raw, name, noun) if raw else default


def max_handshakes(environ: Mapping[str, str] | None = None) -> int:
    """``FLEETCTL_MAX_HANDSHAKES``: logins to one sshd at once (default 8; set it for that sshd's
    MaxStartups, sshd_config(5)).

    Raises:
        InputError: not a whole number >= 1.
    """
    return env_count(MAX_HANDSHAKES_ENV, DEFAULT_MAX_HANDSHAKES, "connections", environ)


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _empty(name: str, default: str, want: str) -> InputError:
    return InputError(f"{name}: set but empty: unset it to {default}, or give {want}")


def _no_program(name: str, word: str, value: str, default: str, want: str) -> InputError:
    return InputError(f"{name}: program {word!r} not found (not on PATH, nor an executable file), got {value!r}: "
                      f"give {want}, or unset it to {default}")


def slurm_launcher(environ: Mapping[str, str] | None = None) -> str | None:
    """``FLEETCTL_SLURM_LAUNCHER`` as set (a command prefix, POSIX sh words), or None when unset.

    Raises:
        InputError: set but blank, unbalanced quotes, or a first word that names no program on
            ``PATH`` (of ``environ``, default ``os.environ``).
    """
    env = _env(environ)
    value = env.get(SLURM_LAUNCHER_ENV)
    if value is None:
        return None
    default, want = "run srun, salloc and sinfo from this machine's PATH", "a command prefix that reaches them " \
        "(e.g. 'ssh login01')"
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise InputError(f"{SLURM_LAUNCHER_ENV}: {exc} in {value!r}: give {want}") from None
    if not words:
        raise _empty(SLURM_LAUNCHER_ENV, default, want)
    if shutil.which(words[0], path=env.get("PATH", os.defpath)) is None:
        raise _no_program(SLURM_LAUNCHER_ENV, words[0], value, default, want)
    return value


def ansible_inventory_program(environ: Mapping[str, str] | None = None) -> str | None:
    """``FLEETCTL_ANSIBLE_INVENTORY``: None when unset (look for ``ansible-inventory``), ``""``
    when set empty (never delegate to Ansible), else the program as set.

    Raises:
        InputError: a value that names no program on ``PATH`` nor an executable file.
    """
    env = _env(environ)
    value = env.get(ANSIBLE_INVENTORY_ENV)
    if value is None or not value.strip():
        return None if value is None else ""
    if shutil.which(value, path=env.get("PATH", os.defpath)) is None:
        raise _no_program(ANSIBLE_INVENTORY_ENV, value, value, "use the ansible-inventory on PATH",
                          "the ansible-inventory program (empty: never use Ansible)")
    return value


def scripts_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """``FLEETCTL_SCRIPTS_DIR``: a folder of host scripts searched first, or None when unset.

    Raises:
        InputError: set but blank, or not an existing folder.
    """
    value = _env(environ).get(SCRIPTS_DIR_ENV)
    if value is None:
        return None
    default, want = "use the host scripts fleetctl ships (playbooks/scripts)", "a folder of host scripts"
    if not value.strip():
        raise _empty(SCRIPTS_DIR_ENV, default, want)
    if not os.path.isdir(os.path.expanduser(value)):
        raise InputError(f"{SCRIPTS_DIR_ENV}: {value!r} is not a folder: give {want}, or unset it to {default}")
    return os.path.expanduser(value)


def inventory_sources(environ: Mapping[str, str] | None = None) -> None:
    """Refuse ``FLEETCTL_INVENTORY`` set but blank (click would silently read ``./inventory.yaml``).

    Raises:
        InputError: set but blank.
    """
    value = _env(environ).get("FLEETCTL_INVENTORY")
    if value is not None and not value.strip():
        raise _empty("FLEETCTL_INVENTORY", "read ./inventory.yaml", "inventory sources (comma-separated), or use -i")


def check_strings(environ: Mapping[str, str] | None = None) -> None:
    """Every string-valued ``FLEETCTL_*`` variable (the module docstring), checked as its reader
    checks it; called before any host is touched (:func:`fleetctl.api.lifecycle.new_run`), when
    ``fleetctl schedule`` writes a job, and where the commands that start no run but read them
    start (``hosts``, ``inventory``: the inventory sources; ``logs``: ``FLEETCTL_HOME``).

    Raises:
        InputError: the first bad one, naming it.
    """
    from .paths import fleetctl_home

    slurm_launcher(environ)
    ansible_inventory_program(environ)
    scripts_dir(environ)
    fleetctl_home(environ)
    inventory_sources(environ)
