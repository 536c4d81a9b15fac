"""Keeping secrets out of every log, event, run record and terminal line.

A variable is secret when it is declared so, ``NAME: {value: ..., secret: true}`` (in inventory
host/group vars, play vars or ``-e``), or when its name looks like one: it contains ``password``,
``passwd``, ``token``, ``secret``, ``api_key``, ``apikey``, ``private_key``, ``credential`` or
``auth`` (case-insensitive), unless it names a file or path (``*_file``, ``*_path``), such as
Ansible's ``ansible_ssh_private_key_file``.

Structured data (run.json, events, the env of planned and failed commands) has the values of
secret-named keys replaced by :data:`MASK`; free text (host output lines, messages) has every
occurrence of a secret value of at least :data:`MIN_SECRET_CHARS` characters replaced.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "********"
MIN_SECRET_CHARS = 4
_SECRET_NAME = re.compile(r"pass(word|wd)|token|secret|api_?key|private_?key|credential|auth", re.I)
_NOT_SECRET = re.compile(r"(_file|_path|_dir)$", re.I)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_secret_name(name: object) -> bool:
    """True for names that look like secrets (see the module docstring)."""
    return isinstance(name, str) and _secret_str(name)


@functools.lru_cache(maxsize=4096)
def _secret_str(name: str) -> bool:
    # every event's keys are asked (a run of 500 hosts asks 160,000 times, of a few hundred names)
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET.search(name)


def is_marked(value: object) -> bool:
    """True for ``{value: ..., secret: true}``."""
    return isinstance(value, Mapping) and set(value) == {"value", "secret"} and value.get("secret") is True


def unwrap(variables: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Variables with ``{value, secret}`` markers replaced by their value, and the set of secret
    values (marked ones and those under secret-looking names), as strings."""
    out: dict[str, Any] = {}
    secrets: set[str] = set()
    for name, value in variables.items():
        if is_marked(value):
            value = value["value"]
            secrets.add(str(value))
        elif is_secret_name(name) and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            secrets.add(str(value))
        out[name] = value
    return out, {s for s in secrets if s}


class Redactor:
    """Replaces known secret values in text and bytes, and secret-named keys in structures. Thread-safe."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        #: bumped whenever a secret is added (what was redacted before may need it again)
        self.version = 0
        self._values: set[str] = set()
        self._text_re: re.Pattern[str] | None = None
        self._bytes_re: re.Pattern[bytes] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        with self._lock:
            new = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS} - self._values
            if not new:
                return
            self._values |= new
            self.version += 1
            ordered = sorted(self._values, key=len, reverse=True)
            self._text_re = re.compile("|".join(re.escape(v) for v in ordered))
            self._bytes_re = re.compile(b"|".join(re.escape(v.encode("utf-8")) for v in ordered))

    def text(self, value: str) -> str:
        rx = self._text_re
        return rx.sub(MASK, value) if rx is not None else value

    def bytes(self, value: bytes) -> bytes:
        rx = self._bytes_re
        return rx.sub(MASK.encode(), value) if rx is not None else value

    def obj(self, value: Any, key: object = None) -> Any:
        """A copy of ``value`` with secret-named keys masked and secret values replaced in strings.

        ``NAME=VALUE`` strings (argv of ``env``) whose NAME looks secret are masked too.
        """
        if key is not None and is_secret_name(key) and not isinstance(value, (Mapping, list, tuple)):
            return MASK if value not in (None, "") else value
        if is_marked(value):
            return MASK
        if isinstance(value, Mapping):
            return {k: self.obj(v, k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.obj(v) for v in value]
        if isinstance(value, str):
            if "=" in value:
                name = value.partition("=")[0]
                if _ENV_NAME.fullmatch(name) and is_secret_name(name):
                    return f"{name}={MASK}"
            return self.text(value)
        return value
