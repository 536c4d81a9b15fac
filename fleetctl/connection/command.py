"""Turning an argv, an environment and a working directory into one remote command line.

OpenSSH sends a command as a single string that the remote user's login shell parses (OpenSSH
session.c runs ``$SHELL -c COMMAND``), so every argv element is quoted exactly once with
:func:`shlex.join` (POSIX shell quoting, understood by sh, dash, bash and zsh). The environment
travels inside the command through ``env NAME=VALUE ...``: the SSH ``env`` request is dropped by
most sshd configurations (``AcceptEnv`` in sshd_config(5)), so it is never used.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# `cd` needs a shell; this fixed script gets the directory and the argv as positional
# parameters, so nothing user-supplied is ever parsed by it.
_CD_SCRIPT = 'cd -- "$1" || exit 125; shift; exec "$@"'


def validate_env(env: Mapping[str, str]) -> None:
    """Check that every name is a POSIX environment variable name and every value a string.

    Raises:
        ValueError: naming the offending variable.
    """
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ValueError(f"invalid environment variable name {name!r}")
        if not isinstance(value, str):
            raise ValueError(f"environment variable {name}: value must be a string, got {type(value).__name__}")
        if "\x00" in value:
            raise ValueError(f"environment variable {name}: value contains a NUL byte")


def wrap_argv(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> list[str]:
    """Return the argv that, run by any POSIX ``exec``, runs ``argv`` with ``env`` in ``cwd``.

    ``/usr/bin/env NAME=VALUE... ARGV`` sets the variables (``env`` looks the program up on the
    new PATH); a ``/bin/sh -c`` with a fixed script changes directory first when ``cwd`` is given.

    Raises:
        ValueError: empty argv, a NUL byte in an argument, or a bad environment name.
    """
    if not argv:
        raise ValueError("empty argv")
    argv = [str(a) for a in argv]
    for arg in argv:
        if "\x00" in arg:
            raise ValueError("argument contains a NUL byte")
    out = list(argv)
    if env:
        validate_env(env)
        out = ["env", *(f"{k}={v}" for k, v in env.items()), *out]
    if cwd:
        out = ["/bin/sh", "-c", _CD_SCRIPT, "fleetctl-cd", cwd, *out]
    return out


def remote_command_line(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> str:
    """The single string sent over SSH: :func:`wrap_argv` quoted once by :func:`shlex.join`."""
    return shlex.join(wrap_argv(argv, env=env, cwd=cwd))
