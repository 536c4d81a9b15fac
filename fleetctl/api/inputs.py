"""The API's argument checks, one place for every operation (:class:`~fleetctl.api.fleet.Fleet`,
:class:`~fleetctl.api.hosts.AsyncHosts`, :func:`~fleetctl.api.play.prepare_play`): each takes
the argument's name and the value a caller passed, and returns it checked (and normalised: a
float of seconds, a list made once from an iterator) or raises
:class:`~fleetctl.errors.InputError` with one line naming the argument, before anything connects.

Rules (the new-user trial of docs/api.md): a flag is a real ``bool`` (``"no"`` is truthy and
would accept host keys), a bool is never a number (``True`` is not 1 s), text is ``str``, and no
argument or path holds a NUL byte (no process or file name can: execve(2), path_resolution(7)).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InputError


#: How the CLI's messages name the arguments of the shared paths
#: (:func:`~fleetctl.api.play.prepare_play`, :func:`~fleetctl.api.adhoc.gather_facts`): its flags.
#: A validator takes the name to report from its caller (:func:`arg_name`), so a Python caller
#: reads ``serial: ...`` and the command line ``--serial: ...``.
CLI_FLAGS = {"playbook": "--playbook", "tags": "--tags", "skip_tags": "--skip-tags", "serial": "--serial",
             "phase_timeout": "--phase-timeout", "retry_failed": "--retry-failed", "to": "--to"}


def arg_name(flags: Mapping[str, str] | None, arg: str) -> str:
    """How a message names argument ``arg``: ``flags[arg]`` (the CLI's :data:`CLI_FLAGS`) or, for a
    Python caller (``flags`` None), the argument itself."""
    return (flags or {}).get(arg, arg)


def want_bool(name: str, value: Any) -> bool:
    """``value`` if it is ``True`` or ``False``.

    Raises:
        InputError: anything else (``"no"``, ``1``, ``None``).
    """
    if not isinstance(value, bool):
        raise InputError(f"{name}: want True or False, got {value!r}")
    return value


def want_seconds(name: str, value: Any) -> float:
    """A positive, finite number of seconds, as a float.

    Raises:
        InputError: a bool, a string, zero, a negative number, NaN or infinity.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{name}: want a positive number of seconds, got {value!r}")
    return float(value)


def want_forks(value: Any) -> int:
    """Hosts worked on at once: a whole number from 1 to 10000.

    Raises:
        InputError: anything else (a bool included).
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10000:
        raise InputError(f"forks: want a whole number from 1 to 10000, got {value!r}")
    return value


def want_count(name: str, value: Any) -> int:
    """A whole number of 0 or more (``verbose``).

    Raises:
        InputError: anything else (a bool included).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{name}: want a whole number of 0 or more, got {value!r}")
    return value


def is_variable_name(name: Any) -> bool:
    """Ansible's rule for a variable name (``isidentifier`` in ansible-core's
    lib/ansible/utils/vars.py): a string that is a Python identifier, ASCII only, and not a Python
    keyword (``class``, ``None``...). Extra vars from Python and ``-e`` alike are held to it."""
    import keyword

    return isinstance(name, str) and name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


def want_extra_vars(value: Any, name: str = "extra_vars") -> dict[str, Any]:
    """Extra vars (``-e``): a mapping of variable names (:func:`is_variable_name`) to values; None
    is none.

    Raises:
        InputError: not a mapping (``"a=1"``, a list), or a name that is not a variable name
            (``1``, ``""``, ``"a b"``, ``"class"``), naming it.
    """
    if value is None:
        return {}
    if not (isinstance(value, Mapping) and all(isinstance(k, str) for k in value)):
        raise InputError(f"{name}: want a mapping of variable names (strings) to values, got {value!r}")
    for key in value:
        if not is_variable_name(key):
            raise InputError(f"{name}: {key!r} is not a variable name (Ansible's rule: letters, digits and '_', "
                             "not starting with a digit, not a Python keyword)")
    return dict(value)


def want_argv(value: Any) -> list[str]:
    """A command's argv: a list (or any iterable, read once) of strings, at least one, none
    holding a NUL byte (:func:`fleetctl.connection.command.check_argv`, the check every
    connection makes).

    Raises:
        InputError: a string (a shell line), not iterable, empty, an item that is not a string, or
            a NUL byte.
    """
    if not isinstance(value, (str, bytes)) and isinstance(value, Iterable):
        value = list(value)  # a generator is read once, here: what is checked is what runs
    if isinstance(value, (str, bytes)) or not isinstance(value, list) or not value \
            or not all(isinstance(a, str) for a in value):
        raise InputError(f"argv: want a non-empty list of strings (run without a shell; for one, "
                         f"['sh', '-c', LINE]), got {value!r}")
    from ..connection.command import check_argv

    check_argv(value)
    return value


def want_path(name: str, value: Any, where: str) -> str:
    """A path (``str`` or ``os.PathLike``; ``where``: ``"here"`` or ``"on the hosts"``), as a string:
    :func:`fleetctl.util.paths.want_path`, the one check of every public function taking a path.

    Raises:
        InputError: not a path, empty, or holding a NUL byte.
    """
    from ..util.paths import want_path as check

    return check(name, value, where)


def want_strings(name: str, value: Any, shape: str) -> tuple[str, ...]:
    """A list of strings (``shape`` says what each is, for the message); a single string, bytes
    or a mapping is refused, not read item by item.

    Raises:
        InputError: not such a list.
    """
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InputError(f"{name}: want a list of {shape} strings, got {value!r}")
    items = tuple(value)
    if not all(isinstance(s, str) for s in items):
        raise InputError(f"{name}: want a list of {shape} strings, got {value!r}")
    return items


def want_sources(sources: Any) -> tuple[str, ...]:
    """Inventory sources as strings: paths, ``os.PathLike``, or one list/tuple of them (as a caller
    may pass ``["a.yaml", "b.yaml"]`` to ``from_inventory``); one path alone is one source.

    Raises:
        InputError: a source that is neither a path (:func:`want_path`: empty or holding a NUL
            byte included) nor a list of paths.
    """
    if isinstance(sources, (str, os.PathLike)):  # Fleet("inv.yaml"): one source, not its characters
        sources = (sources,)
    if not isinstance(sources, (list, tuple)):
        raise InputError(f"inventory sources: want paths (or one list of them), got {sources!r}")
    out: list[str] = []
    for s in sources:
        items = s if isinstance(s, (list, tuple)) else (s,)
        out.extend(want_path("inventory sources", item, "here") for item in items)
    return tuple(out)
