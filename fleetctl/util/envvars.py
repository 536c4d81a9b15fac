"""The controller's numeric environment variables, read and checked in one way.

A bad value is bad input: one line naming the variable and the value, exit 2, before any host is
touched (``FLEETCTL_KEEP_RUNS=0``, ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S=-5`` and
``FLEETCTL_MAX_HANDSHAKES=abc`` alike). An unset or blank variable means its default.

- ``FLEETCTL_MAX_HANDSHAKES``: connections to ONE sshd between TCP connect and login at once
  (:func:`max_handshakes`; default 8, below sshd's MaxStartups default of 10). 0 would be a gate
  no login ever passes: every SSH host would wait forever, past ``--connect-timeout``.
- ``FLEETCTL_KEEP_RUNS``/``FLEETCTL_KEEP_DAYS``: :func:`fleetctl.util.retention.policy_from_env`.
- ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S``: :func:`fleetctl.inventory.sources.script.script_timeout_s`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import InputError

__all__ = ["DEFAULT_MAX_HANDSHAKES", "MAX_HANDSHAKES_ENV", "check_count", "env_count", "max_handshakes"]

MAX_HANDSHAKES_ENV = "FLEETCTL_MAX_HANDSHAKES"
#: Connections to one sshd between TCP connect and login at once, when the variable is not set.
DEFAULT_MAX_HANDSHAKES = 8


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
