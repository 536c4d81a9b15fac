"""Values rendered from secrets: what a template makes of a secret is a secret too.

Operator trial: ``{{ hf_token | upper }}``, ``{{ hf_token[3:] }}``, ``{{ hf_token | replace("_", "-") }}``
and a play var ``hdr: "Bearer {{ hf_token | upper }}"`` reached the terminal, ``--dry-run``, the host
log and events.jsonl in clear: the redactor knew the secret's value, not what a filter made of it.

The rule (erring toward hiding):

- a variable is secret when it is declared so or its name looks like one
  (:func:`fleetctl.util.redact.secret_names`), and so is a value at any depth inside a variable
  under a secret-looking key or marked (:func:`fleetctl.util.redact.secret_paths`: the path
  ``("registry", "password")``; operator trial: ``{{ registry.password }}`` was printed in clear);
  a play var is secret too when its template reads a secret, directly or through other play vars
  (:func:`derived_secret_names`);
- an expression reads a secret when it reads a secret variable or a path at or under a secret path
  (``registry.password``, ``registry["password"] | upper``, ``mirrors[0].token``), or a value
  holding one (``registry``, ``registry | dictsort``, ``registry.get(k)``: a method call or a
  computed key reads the whole value); a path beside the secrets (``registry.url``) reads none;
- every ``{{ ... }}`` whose expression reads a secret (guarded uses such as
  ``x | default(...)`` included) renders a secret value: that expression's own rendering
  (:func:`secret_renderings`); a template exactly one ``{{ ... }}`` reading a secret itself (not
  only a value holding one) also gives the strings of its native value (a list, a mapping);
- a template whose ``{% ... %}`` blocks (``for``, ``if``, ``set``) read a secret gives its
  whole rendering, as the blocks' output cannot be told apart.

The caller adds these values to the run's redactor (which masks those of at least
:data:`~fleetctl.util.redact.MIN_SECRET_CHARS` characters) before anything is printed or written.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes

from fleetctl.tasks.argtypes import is_template
from fleetctl.util.redact import EVERY_ITEM

from .templating import environment, parse, render_string
from .variables import referenced_variables

__all__ = ["derived_secret_names", "leaf_strings", "secret_renderings"]


def derived_secret_names(play_vars: Mapping[str, Any], secret: Iterable[str | tuple[Any, ...]]) -> set[Any]:
    """``secret`` (names, and paths as :func:`fleetctl.util.redact.secret_paths` gives them) and
    the names of the play vars whose templates read one of them (see the module's rule), directly
    or through other play vars (``hdr: "Bearer {{ hf_token }}"``, ``h2: "{{ hdr }}"``,
    ``auth: "{{ registry.token }}"``). ``play_vars`` holds the raw (unrendered) values. Never
    raises (a template that does not parse reads nothing)."""
    names: set[Any] = set(secret)
    reads = {name: _value_paths(value) for name, value in play_vars.items()}
    grew = True
    while grew:
        paths = _as_paths(names)
        new = {name for name, used in reads.items() if name not in names and _reach(used, paths)}
        names |= new
        grew = bool(new)
    return names


def leaf_strings(value: Any) -> set[str]:
    """The strings (and numbers, as strings) inside a nested value; booleans and None left out."""
    if isinstance(value, Mapping):
        return {s for v in value.values() for s in leaf_strings(v)}
    if isinstance(value, (list, tuple, set, frozenset)):
        return {s for v in value for s in leaf_strings(v)}
    if isinstance(value, bool) or value is None:
        return set()
    return {str(value)}


def secret_renderings(value: Any, context: Mapping[str, Any], secret: Iterable[str | tuple[Any, ...]]) -> set[str]:
    """What the templates inside ``value`` (nested lists and dicts, keys too) render from the
    secrets in ``secret`` (variable names, and paths as :func:`fleetctl.util.redact.secret_paths`
    gives them) for ``context`` (see the module's rule). A piece that fails to render gives
    nothing: the render itself fails the same way, or reads a value not known yet. Never raises."""
    names = secret if isinstance(secret, frozenset) else _as_paths(secret)
    if isinstance(value, str):
        return _string_renderings(value, context, names)
    if isinstance(value, Mapping):
        return {s for k, v in value.items() for part in (k, v) for s in secret_renderings(part, context, names)}
    if isinstance(value, (list, tuple)):
        return {s for item in value for s in secret_renderings(item, context, names)}
    return set()


def _string_renderings(text: str, context: Mapping[str, Any], names: frozenset[tuple[Any, ...]]) -> set[str]:
    if not is_template(text) or not referenced_variables(text) & {path[0] for path in names}:
        return set()
    out: set[str] = set()
    whole = wholly = False
    try:
        pieces = _pieces(text)
    except Exception:  # noqa: BLE001 - a piece that does not compile alone: the whole rendering is secret
        pieces = ((names, None),)
    for reads, template in pieces:
        reach = _reach(reads, names)
        if not reach:
            continue
        wholly = wholly or reach == _IS_SECRET
        if template is None:
            whole = True
            continue
        try:
            out.add(template.render(**context))
        except Exception:  # noqa: BLE001 - see secret_renderings
            pass
    try:
        full = render_string(text, context)
    except Exception:  # noqa: BLE001
        return out
    if whole or (wholly and not isinstance(full, str)):
        out |= leaf_strings(full)
    return out


#: what an expression's reads reach (:func:`_reach`): a value holding a secret, or a secret itself
_HOLDS_SECRET, _IS_SECRET = 1, 2


def _as_paths(secret: Iterable[str | tuple[Any, ...]]) -> frozenset[tuple[Any, ...]]:
    return frozenset(s if isinstance(s, tuple) else (s,) for s in secret)


def _reach(reads: Iterable[tuple[Any, ...]], secret: frozenset[tuple[Any, ...]]) -> int:
    """0 when no path in ``reads`` meets a secret path; :data:`_IS_SECRET` when one is at or under
    a secret path (``registry.password.x`` under ``registry.password``); else :data:`_HOLDS_SECRET`
    when one is above a secret path (``registry``, holding ``registry.password``)."""
    best = 0
    for read in reads:
        for path in secret:
            n = min(len(read), len(path))
            if all(a == b or EVERY_ITEM in (a, b) for a, b in zip(read[:n], path[:n])):
                if len(read) >= len(path):
                    return _IS_SECRET
                best = _HOLDS_SECRET
    return best


def _value_paths(value: Any) -> frozenset[tuple[Any, ...]]:
    """The paths the templates inside a nested value read (:func:`_read_paths`); none for one
    that does not parse."""
    if isinstance(value, str):
        if not is_template(value):
            return frozenset()
        try:
            return _template_paths(value)
        except Exception:  # noqa: BLE001 - a template that does not parse reads nothing here
            return frozenset()
    if isinstance(value, Mapping):
        return frozenset(p for k, v in value.items() for part in (k, v) for p in _value_paths(part))
    if isinstance(value, (list, tuple)):
        return frozenset(p for item in value for p in _value_paths(item))
    return frozenset()


@lru_cache(maxsize=4096)
def _template_paths(text: str) -> frozenset[tuple[Any, ...]]:
    return _read_paths(parse(text))


def _read_paths(node: nodes.Node) -> frozenset[tuple[Any, ...]]:
    """The variable paths ``node`` reads: a name followed by constant ``.attr``/``[key]`` steps
    (``registry.password`` is ``("registry", "password")``); a method called on a value, or a
    computed key, reads the value before it (``registry.get(k)`` reads ``("registry",)``)."""
    found: set[tuple[Any, ...]] = set()
    _walk(node, found)
    return frozenset(found)


def _walk(node: nodes.Node, found: set[tuple[Any, ...]]) -> None:
    if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
        _walk(node.node.node, found)  # a method call: what it is called on is read whole
        for child in node.iter_child_nodes(exclude=("node",)):
            _walk(child, found)
        return
    chain = _chain(node)
    if chain is not None:
        found.add(chain)
        return
    for child in node.iter_child_nodes():
        _walk(child, found)


def _chain(node: nodes.Node) -> tuple[Any, ...] | None:
    """``registry.password`` / ``mirrors[0]["token"]`` as a path; None for anything else."""
    if isinstance(node, nodes.Name):
        return (node.name,)
    if isinstance(node, nodes.Getattr):
        base = _chain(node.node)
        return None if base is None else (*base, node.attr)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        base = _chain(node.node)
        key = EVERY_ITEM if isinstance(node.arg.value, int) and not isinstance(node.arg.value, bool) else node.arg.value
        return None if base is None else (*base, key)
    return None


@lru_cache(maxsize=4096)
def _pieces(text: str) -> tuple[tuple[frozenset[tuple[Any, ...]], jinja2.Template | None], ...]:
    """The top-level parts of ``text``'s syntax tree that are not plain text, each with the paths it
    reads (:func:`_read_paths`): a ``{{ expr }}`` with a template rendering that expression alone,
    a ``{% %}`` block with None. Once per text and process (every host renders the same texts)."""
    ast = parse(text)
    out: list[tuple[frozenset[tuple[Any, ...]], jinja2.Template | None]] = []
    for node in ast.body:
        if isinstance(node, nodes.Output):
            for child in node.nodes:
                if isinstance(child, nodes.TemplateData):
                    continue
                alone = nodes.Template([nodes.Output([child], lineno=child.lineno)], lineno=child.lineno)
                out.append((_read_paths(child), environment().from_string(alone)))
        else:
            out.append((_read_paths(node), None))
    return tuple(out)

