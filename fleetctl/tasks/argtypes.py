"""The building blocks of action argument models (pydantic v2), shared by every action module.

Each action (``fleetctl/tasks/<action>.py``) declares its own model on :class:`ActionArgs`. Unknown
argument keys are rejected (with a did-you-mean from the playbook parser), and values are coerced
only where it is unambiguous (a number in an argv list becomes a string; a YAML boolean in
``cmake_defines`` becomes ``ON``/``OFF``).

Strings holding Jinja templates (``"{{ workdir }}/src"``) are kept as written in these models; the
format checks below (octal modes, arch lists, versions) skip them, and run again on the rendered
value at run time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

__all__ = ["ActionArgs", "argv_list", "env_mapping", "is_template", "non_empty", "scalar_to_str"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CMAKE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+-]*$")
ARCH_TOKEN = re.compile(r"^\d+\.\d+[af]?(\+PTX)?$")
VERSION_RE = re.compile(r"^\d+(\.\d+){0,3}$")


def is_template(value: object) -> bool:
    """True when ``value`` is a string holding Jinja syntax (``{{``, ``{%`` or ``{#``)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value or "{#" in value)


def scalar_to_str(value: object, what: str) -> object:
    """Turn a YAML number into its string; leave strings alone; reject bools and None.

    Anything else is returned unchanged so that pydantic reports the type error.
    """
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a string, got boolean {value!r} (quote it)")
    if value is None:
        raise ValueError(f"{what} must be a string, got null")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{what} must be a string, got {value!r}")
        return repr(value)
    return value


def argv_list(value: object, what: str) -> object:
    if is_template(value):
        return value  # rendered at run time
    if isinstance(value, str):
        raise ValueError(f"{what} must be a list of strings, not a string")
    if isinstance(value, (list, tuple)):
        return [scalar_to_str(item, f"{what} items") for item in value]
    return value


def env_mapping(value: object) -> object:
    """Validate an environment mapping: NAME -> string (numbers become strings)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return value  # pydantic reports "should be a valid dictionary"
    out: dict[object, object] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not (_ENV_NAME.match(key) or is_template(key)):
            raise ValueError(f"invalid environment variable name {key!r}")
        out[key] = scalar_to_str(val, f"environment variable {key}")
    return out


def non_empty(value: str, what: str) -> str:
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{what} must not be empty")
    return value


class ActionArgs(BaseModel):
    """Base of every action's argument model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


