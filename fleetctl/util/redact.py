"""Keeping secrets out of every log, event, run record and terminal line.

A variable is secret when it is declared so, ``NAME: {value: ..., secret: true}`` (in inventory
host/group vars, play vars or ``-e``), or when its name looks like one (:func:`is_secret_name`, the
one rule every output path asks: run.json, events, host logs, reports, ``inventory --host/--list``,
the terminal, a schedule's vars file).

Values are found at any depth of a variable (a secret-looking key or a marker inside a dict or a
list of dicts: :func:`unwrap`, :func:`secret_paths`). Structured data (run.json, events, the env of
planned and failed commands) has the values of secret-named keys replaced by :data:`MASK` (and of
secret ``NAME=VALUE`` words, the others kept); free text (host output lines, messages) has every
occurrence of a secret value of at least :data:`MIN_SECRET_CHARS` characters replaced.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from .kvwords import WORD, WORDS

MASK = "********"
MIN_SECRET_CHARS = 4
#: anywhere in a name (case-insensitive), as before the rule took word parts
_SECRET_SUBSTRING = re.compile(r"pass(word|wd|phrase)|token|secret|api_?key|private_?key|credential|auth", re.I)
#: one word part of a name: Ansible's ``PASSWORD_MATCH`` (``pass``, ``password``, ``passwd``,
#: ``passwrd``, ``passphrase``) and ``cred``/``creds``
_SECRET_PART = re.compile(r"pass(word|phrase|wrd|wd)?|creds?|pat")
#: a word part naming a thing whose address is itself the secret (a Slack or Teams webhook's URL
#: holds its token), so a location suffix does not make the name visible
_SECRET_ADDRESS_PARTS = frozenset({"webhook", "webhooks"})
#: a last word part naming where a thing is, not the thing: such names stay visible
_LOCATION_PARTS = frozenset({"file", "path", "dir", "url"})
#: a ``*_key`` that is no secret
_PUBLIC_KEY_PARTS = frozenset({"public", "pub"})
_PART_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_secret_name(name: object) -> bool:
    """True for a variable (or environment variable, or mapping key) name that looks like a secret.

    The name is cut into word parts at ``_``, ``-``, ``.``, spaces and lower-to-upper case changes
    (``ansible_become_pass``, ``WANDB_API_KEY``, ``dbPass``). It is secret when

    - a part is ``pass``, ``password``, ``passwd``, ``passwrd`` or ``passphrase``: the heuristic of
      Ansible's ``PASSWORD_MATCH`` (ansible-core ``lib/ansible/module_utils/basic.py``; a module
      parameter so named is logged as ``NOT_LOGGING_PASSWORD`` unless ``no_log`` says otherwise),
      which is how Ansible names its own: ``ansible_pass``, ``ansible_ssh_pass``,
      ``ansible_become_pass``; ``bypass`` or ``passenger`` are not;
    - or it contains ``password``, ``passwd``, ``passphrase``, ``token``, ``secret``, ``api_key``,
      ``apikey``, ``private_key``, ``credential`` or ``auth`` anywhere, or a part is ``cred``/``creds``
      or ``pat`` (a personal access token: ``github_pat``, ``GITLAB_PAT``);
    - or a part is ``webhook``: its URL is the secret (a Slack incoming webhook's URL carries its
      token: ``slack_webhook_url``), so a ``*_url`` of one is secret too;
    - or its last part is ``key`` after some other part (``wandb_key``, ``ssh_key``), except a
      public key (``ssh_public_key``, ``host_pub_key``);

    unless its last part is ``file``, ``path``, ``dir`` or ``url``: a name for where a secret
    lives (``ansible_ssh_private_key_file``, ``vault_password_file``, ``hf_token_path``,
    ``auth_url``) stays visible, since operators need it. Case-insensitive; a non-str is never
    secret.
    """
    return isinstance(name, str) and _secret_str(name)


@functools.lru_cache(maxsize=4096)
def _secret_str(name: str) -> bool:
    # every event's keys are asked (a run of 500 hosts asks 160,000 times, of a few hundred names)
    parts = [p for p in _PART_SPLIT.split(_CAMEL.sub("_", name).lower()) if p]
    if not parts or (parts[-1] in _LOCATION_PARTS and not (
            parts[-1] == "url" and any(p in _SECRET_ADDRESS_PARTS for p in parts))):
        return False
    if any(p in _SECRET_ADDRESS_PARTS for p in parts):
        return True
    if _SECRET_SUBSTRING.search(name) or any(_SECRET_PART.fullmatch(p) for p in parts):
        return True
    return len(parts) > 1 and parts[-1] == "key" and parts[-2] not in _PUBLIC_KEY_PARTS


def is_marked(value: object) -> bool:
    """True for ``{value: ..., secret: true}``."""
    return isinstance(value, Mapping) and set(value) == {"value", "secret"} and value.get("secret") is True


def secret_names(variables: Mapping[str, Any]) -> set[str]:
    """The names of the secret variables among ``variables``: those marked
    ``{value: ..., secret: true}`` and those whose name looks like one (:func:`is_secret_name`),
    whatever their value. What a template renders from them is secret too
    (:mod:`fleetctl.playbook.secret_values`)."""
    return {name for name, value in variables.items() if is_marked(value) or is_secret_name(name)}


#: a list index in a secret path (:func:`secret_paths`): any item of the list
EVERY_ITEM = "[*]"


def secret_paths(variables: Mapping[str, Any]) -> set[tuple[Any, ...]]:
    """Where the secrets among ``variables`` are, as paths: ``(name,)`` for a secret variable
    (:func:`secret_names`), ``(name, key, ...)`` for a secret-looking key or a marked value at any
    depth of a variable's nested mappings and lists (``("registry", "password")``,
    ``("mirrors", EVERY_ITEM, "token")``; a list's items are :data:`EVERY_ITEM`). What a template
    renders from a path at or under one of these, or from a value holding one, is secret too
    (:mod:`fleetctl.playbook.secret_values`)."""
    out: set[tuple[Any, ...]] = {(name,) for name in secret_names(variables)}
    for name, value in variables.items():
        if (name,) not in out:
            _nested_paths(value, (name,), out)
    return out


def _nested_paths(value: Any, path: tuple[Any, ...], out: set[tuple[Any, ...]]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if is_secret_name(key) or is_marked(item):
                out.add((*path, key))
            else:
                _nested_paths(item, (*path, key), out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _nested_paths(item, (*path, EVERY_ITEM), out)


def unwrap(variables: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Variables with ``{value, secret}`` markers replaced by their value, at any depth, and the set
    of secret values, as strings.

    Secret values are found at any depth of nested mappings and lists (Ansible's usual group_vars
    layout, ``registry: {url: ..., password: ...}``; operator trial: a nested ``password`` was
    masked by ``inventory --host`` but printed and stored in clear by a deploy): a marked value
    (and each string or number inside it), and every string or number under a secret-looking
    name (:func:`is_secret_name`), be it the variable's name or a key inside it. Booleans and
    None are no secrets."""
    secrets: set[str] = set()
    out = {name: _unwrapped(value, is_secret_name(name), secrets) for name, value in variables.items()}
    return out, {s for s in secrets if s}


def _unwrapped(value: Any, secret: bool, found: set[str]) -> Any:
    """``value`` with its markers unwrapped; its secret values (all of them when ``secret``: it
    sits under a secret-looking name) added to ``found``."""
    if is_marked(value):
        inner = value["value"]
        if not isinstance(inner, (Mapping, list, tuple)):
            found.add(str(inner))
        return _unwrapped(inner, True, found)
    if isinstance(value, Mapping):
        return {k: _unwrapped(v, secret or is_secret_name(k), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unwrapped(v, secret, found) for v in value]
    if secret and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        found.add(str(value))
    return value


class Redactor:
    """Replaces known secret values in text and bytes, and secret-named keys in structures. Thread-safe."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        #: bumped whenever a secret is added (what was redacted before may need it again)
        self.version = 0
        self._values: set[str] = set()
        #: the longest secret's length in UTF-8 bytes (0: none yet)
        self._longest_bytes = 0
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
            self._longest_bytes = max(len(v.encode("utf-8")) for v in ordered)
            self._text_re = re.compile("|".join(re.escape(v) for v in ordered))
            self._bytes_re = re.compile(b"|".join(re.escape(v.encode("utf-8")) for v in ordered))

    def text(self, value: str) -> str:
        rx = self._text_re
        return rx.sub(MASK, value) if rx is not None else value

    def bytes(self, value: bytes) -> bytes:
        rx = self._bytes_re
        return rx.sub(MASK.encode(), value) if rx is not None else value

    def cut_point(self, data: bytes) -> int:
        """Where to cut ``data``, a piece of a line that goes on in the next piece (a host line over
        1 MiB arrives in pieces, :mod:`fleetctl.connection.streams`), so that no secret straddles
        the cut: ``data[:cut]`` can be redacted on its own (a secret that starts before the cut ends
        before it, or is whole inside ``data`` and the cut moves past it), while ``data[cut:]``, at
        most the longest secret less one byte, must be joined to what follows before it is redacted.
        ``len(data)`` when no secret is known. Never raises."""
        with self._lock:
            rx, longest = self._bytes_re, self._longest_bytes
        if rx is None or longest <= 1:
            return len(data)
        cut = max(0, len(data) - (longest - 1))
        for m in rx.finditer(data, max(0, cut - longest)):
            if m.start() < cut < m.end():  # a whole secret over the cut: the head takes it
                return m.end()
            if m.start() >= cut:
                break
        return cut

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
            return self._pairs(value) if "=" in value else self.text(value)
        return value

    def _pairs(self, value: str) -> str:
        """``value`` with the value of each secret-named ``NAME=VALUE`` word masked, every other
        word kept (redacted as text): ``x=1 api_token=C3`` is ``x=1 api_token=********``. The words
        are those ``-e`` splits an item into (:mod:`fleetctl.util.kvwords`); an item that is not
        all ``NAME=VALUE`` words is one pair, its value everything after the first ``=`` (as ``-e``
        reads it). Operator trial: the rule kept the first name alone, dropping the rest."""
        name = value.partition("=")[0]
        if not _ENV_NAME.fullmatch(name):
            return self.text(value)
        words = WORD.findall(value) if WORDS.fullmatch(value) else []
        if words and all(_ENV_NAME.fullmatch(w.partition("=")[0]) and "=" in w for w in words):
            return WORD.sub(lambda m: self._pair(m.group(0)), value)
        return self._pair(value)

    def _pair(self, word: str) -> str:
        name, _, rest = word.partition("=")
        return f"{name}={MASK}" if is_secret_name(name) and rest else self.text(word)
