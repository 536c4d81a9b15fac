"""``-e`` (Ansible's extra vars), shared by deploy, verify, rollback, schedule, run, facts, copy and
fetch: the forms
ansible-playbook's ``--extra-vars`` documents ("set additional variables as key=value or
YAML/JSON, if filename prepend with @"; Ansible's ``load_extra_vars``, lib/ansible/utils/vars.py):

- ``NAME=VALUE`` pairs, strings: ``-e archs=9.0a``, or several in one item as Ansible's
  ``-e "version=1.2 other=foo"`` (see :func:`pairs_of`);
- a JSON or YAML mapping, an item starting with ``{`` (Ansible: ``{`` or ``[``):
  ``-e '{"archs": "9.0a", "x": [1, 2]}'``, values keep their type;
- ``@FILE``, a YAML (or JSON) mapping of names to values, read by fleetctl, so that values that
  must not appear on a command line (a token in a crontab line, in ``ps`` output, in a shell history)
  can live in a file only their owner can read.

Values may be ``{value: ..., secret: true}`` markers (see :mod:`fleetctl.util.redact`);
secret-looking names are redacted either way. Later items win, as in Ansible.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ..api.inputs import is_variable_name
from ..errors import InputError
from ..util.kvwords import WORD, WORDS


def load_vars_file(path: str) -> dict[str, Any]:
    """The mapping in ``path`` (``-e @PATH``).

    Raises:
        InputError: missing or unreadable file, not a mapping, or a name that is not an identifier
            (names the file and the key).
    """
    from ..util.yamlload import load_yaml

    from ..util.paths import not_regular

    p = Path(os.path.expanduser(path))
    special = not_regular(p)
    if special:
        raise InputError(f"-e @FILE: {special}", file=str(p))
    if not p.is_file():
        raise InputError("-e @FILE: extra vars file not found", file=str(p))
    doc = load_yaml(p)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InputError("-e @FILE: want a mapping of NAME: VALUE", file=str(p))
    for name in doc:
        if not is_variable_name(name):
            raise InputError(f"-e @FILE: {name!r} is not a variable name", file=str(p))
    return dict(doc)


#: the forms, as error messages name them
FORMS = "NAME=VALUE, a JSON/YAML mapping ('{\"NAME\": VALUE}') or @FILE"


#: a word of a key=value item, and a whole item of them (shared with the redactor: :mod:`fleetctl.util.kvwords`)
_WORD, _WORDS = WORD, WORDS


def _shown(item: str, limit: int = 80) -> str:
    """``item`` as an error line quotes it: repr, cut to ``limit`` characters."""
    return repr(item if len(item) <= limit else item[:limit] + "...")


def pairs_of(item: str) -> dict[str, str] | None:
    """The ``NAME=VALUE`` pairs of one ``-e`` item (values are strings, as in Ansible), or None when
    ``item`` does not start with ``NAME=``.

    Ansible's key=value form (``parse_kv``) takes several pairs in one item, split at whitespace
    outside quotes, a value wholly in quotes unquoted: ``-e "version=1.2 other='a b'"`` is
    ``version`` and ``other`` (``a b``). The item is split so when every word is ``NAME=VALUE``;
    quotes inside a value stay (``x={"a":1}`` is the string ``{"a":1}``), backslashes too. Otherwise
    (a word without ``=``, an unclosed quote) the item is one pair whose value is everything after the
    first ``=``, as written: ``-e "msg=hello world"`` is ``hello world``, where Ansible would keep
    ``hello`` and drop ``world`` into a ``_raw_params`` no play reads.
    """
    name, sep, value = item.partition("=")
    if not sep or not is_variable_name(name):
        return None
    if not _WORDS.fullmatch(item):  # an unclosed quote: the value as written
        return {name: value}
    pairs = [w.partition("=") for w in _WORD.findall(item)]
    if not all(sep and is_variable_name(key) for key, sep, _ in pairs):
        return {name: value}
    return {key: _unquote(val) for key, _, val in pairs}


def _unquote(value: str) -> str:
    """Ansible's ``unquote`` (lib/ansible/parsing/quoting.py): a value wholly in '' or "", without them."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def mapping_of(item: str) -> dict[str, Any]:
    """The vars of a ``-e`` item that is a JSON or YAML mapping (``{...}``): JSON first, then YAML
    (JSON's superset; Ansible's ``DataLoader.load`` does the same).

    Raises:
        InputError: not JSON nor YAML (the YAML parser's problem and column), a key given twice,
            not a mapping, or a key that is not a variable name; the line quotes the item.
    """
    from ..util.yamlload import load_yaml_text

    try:
        doc = json.loads(item, object_pairs_hook=lambda pairs: _unique(item, pairs))
    except ValueError:
        try:
            doc = load_yaml_text(item, "-e")
        except InputError as exc:
            raise InputError(f"-e {_shown(item)}: not a JSON/YAML mapping: {exc.message}") from None
    if not isinstance(doc, dict):
        raise InputError(f"-e {_shown(item)}: a JSON/YAML list, not a mapping of NAME: VALUE")
    for name in doc:
        if not is_variable_name(name):
            raise InputError(f"-e {_shown(item)}: {name!r} is not a variable name")
    return dict(doc)


def _unique(item: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a key given twice is refused, as the YAML loader does."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InputError(f"-e {_shown(item)}: not a JSON/YAML mapping: duplicate key {key!r}")
        out[key] = value
    return out


def inline_vars(item: str) -> dict[str, Any] | None:
    """The vars one ``-e`` item gives on the command line (pairs or a mapping); None for ``@FILE``,
    which :func:`load_vars_file` reads.

    Raises:
        InputError: an item of no form (:data:`FORMS`), naming it; a bad mapping (:func:`mapping_of`).
    """
    if item.startswith("@") and len(item) > 1:
        return None
    if item.lstrip().startswith(("{", "[")):
        return mapping_of(item)
    pairs = pairs_of(item)
    if pairs is not None:
        return pairs
    if item.startswith(("/", ".", "~")):  # Ansible: "Please prepend extra_vars filename ... with '@'"
        raise InputError(f"-e {_shown(item)}: a vars file is given as @FILE (-e @{item})")
    name, sep, _ = item.partition("=")
    if sep and name and not any(c.isspace() for c in name):
        raise InputError(f"-e {_shown(item)}: {name!r} is not a variable name (NAME=VALUE)")
    raise InputError(f"-e/--extra-var wants {FORMS}, got {_shown(item)}")


def parse_extra_vars(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``-e`` items in order (later ones win), each of the forms :func:`inline_vars` reads or
    ``@FILE``.

    Raises:
        InputError: an item of no form or a bad mapping (see :func:`inline_vars`), or a bad file
            (see :func:`load_vars_file`).
    """
    out: dict[str, Any] = {}
    for item in items:
        given = inline_vars(item)
        out.update(load_vars_file(item[1:]) if given is None else given)
    return out


def host_setting_vars(items: tuple[str, ...] | list[str], command: str) -> dict[str, Any]:
    """The ``-e`` of a command that runs no playbook (``run``, ``facts``, ``copy``, ``fetch``):
    parsed as deploy's (:func:`parse_extra_vars`), all of them returned (the caller merges the host
    settings among them over the inventory's: :func:`fleetctl.inventory.extra.with_extra_vars`), and
    one ``fleetctl: warning:`` line on stderr for each name that is no host setting (no template
    reads it there, so it would change nothing), with deploy's did-you-mean among the settings.
    So ``fleetctl facts -e venv=... -e ansible_user=...`` checks the hosts as the deploy with the
    same ``-e`` will reach them (an operator's trial: facts, copy and fetch refused ``-e``).

    Raises:
        InputError: as :func:`parse_extra_vars`.
    """
    from ..api.lifecycle import warn
    from ..api.playchecks import setting_var_warnings

    extra = parse_extra_vars(items)
    for line in setting_var_warnings(extra, command):  # the API's Hosts.facts/run/copy/fetch: the same lines
        warn(line)
    return extra


def extra_secrets(extra_vars: dict[str, Any]) -> set[str]:
    """The secret values among parsed ``-e`` vars, at any depth (:func:`fleetctl.util.redact.unwrap`),
    for the run's redactor from its first line: the recorded command line holds them."""
    from ..util.redact import unwrap

    return unwrap(extra_vars)[1]


def private_to_owner(path: Path) -> bool:
    """True when no one but the file's owner may read or write it (no group or other bits)."""
    return not (path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
