"""``-e NAME=VALUE`` and ``-e @FILE`` (Ansible's extra vars), shared by deploy, verify and schedule.

``@FILE`` is a YAML (or JSON) mapping of names to values, read by fleetctl, so that values that
must not appear on a command line (a token in a crontab line, in ``ps`` output, in a shell history)
can live in a file only their owner can read. Values may be ``{value: ..., secret: true}``
markers (see :mod:`fleetctl.util.redact`); secret-looking names are redacted either way.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ..errors import InputError


def load_vars_file(path: str) -> dict[str, Any]:
    """The mapping in ``path`` (``-e @PATH``).

    Raises:
        InputError: missing or unreadable file, not a mapping, or a name that is not an identifier
            (names the file and the key).
    """
    from ..util.yamlload import load_yaml

    p = Path(os.path.expanduser(path))
    if not p.is_file():
        raise InputError("-e @FILE: extra vars file not found", file=str(p))
    doc = load_yaml(p)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InputError("-e @FILE: want a mapping of NAME: VALUE", file=str(p))
    for name in doc:
        if not isinstance(name, str) or not name.isidentifier():
            raise InputError(f"-e @FILE: {name!r} is not a variable name", file=str(p))
    return dict(doc)


def parse_extra_vars(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``-e`` items in order (later ones win): ``NAME=VALUE`` (a string) or ``@FILE``.

    Raises:
        InputError: an item that is neither, or a bad file (see :func:`load_vars_file`).
    """
    out: dict[str, Any] = {}
    for item in items:
        if item.startswith("@"):
            out.update(load_vars_file(item[1:]))
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise InputError(f"-e/--extra-var wants NAME=VALUE or @FILE, got {item!r}")
        out[name] = value
    return out


def private_to_owner(path: Path) -> bool:
    """True when no one but the file's owner may read or write it (no group or other bits)."""
    return not (path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
