"""Values rendered from secrets: what a template makes of a secret is a secret too.

Operator trial: ``{{ hf_token | upper }}``, ``{{ hf_token[3:] }}``, ``{{ hf_token | replace("_", "-") }}``
and a play var ``hdr: "Bearer {{ hf_token | upper }}"`` reached the terminal, ``--dry-run``, the host
log and events.jsonl in clear: the redactor knew the secret's value, not what a filter made of it.

The rule (erring toward hiding):

- a variable is secret when it is declared so or its name looks like one
  (:func:`fleetctl.util.redact.secret_names`), and a play var is secret too when its template reads
  a secret variable, directly or through other play vars (:func:`derived_secret_names`);
- every ``{{ ... }}`` whose expression reads a secret variable (guarded uses such as
  ``x | default(...)`` included) renders a secret value: that expression's own rendering
  (:func:`secret_renderings`); a template exactly one ``{{ ... }}`` also gives the strings of its
  native value (a list, a mapping);
- a template whose ``{% ... %}`` blocks (``for``, ``if``, ``set``) read a secret variable gives its
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

from .templating import environment, parse, render_string
from .variables import referenced_variables

__all__ = ["derived_secret_names", "leaf_strings", "secret_renderings"]


def derived_secret_names(play_vars: Mapping[str, Any], secret: Iterable[str]) -> set[str]:
    """``secret`` and the names of the play vars whose templates read one of them, directly or
    through other play vars (``hdr: "Bearer {{ hf_token }}"``, ``h2: "{{ hdr }}"``). ``play_vars``
    holds the raw (unrendered) values. Never raises (a template that does not parse reads nothing)."""
    names = set(secret)
    reads = {name: referenced_variables(value) for name, value in play_vars.items()}
    grew = True
    while grew:
        new = {name for name, used in reads.items() if name not in names and used & names}
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


def secret_renderings(value: Any, context: Mapping[str, Any], secret: Iterable[str]) -> set[str]:
    """What the templates inside ``value`` (nested lists and dicts, keys too) render from the
    variables named in ``secret`` for ``context`` (see the module's rule). A piece that fails to
    render gives nothing: the render itself fails the same way, or reads a value not known yet.
    Never raises."""
    names = frozenset(secret)
    if isinstance(value, str):
        return _string_renderings(value, context, names)
    if isinstance(value, Mapping):
        return {s for k, v in value.items() for part in (k, v) for s in secret_renderings(part, context, names)}
    if isinstance(value, (list, tuple)):
        return {s for item in value for s in secret_renderings(item, context, names)}
    return set()


def _string_renderings(text: str, context: Mapping[str, Any], names: frozenset[str]) -> set[str]:
    if not is_template(text) or not referenced_variables(text) & names:
        return set()
    out: set[str] = set()
    whole = False
    try:
        pieces = _pieces(text)
    except Exception:  # noqa: BLE001 - a piece that does not compile alone: the whole rendering is secret
        pieces = ((names, None),)
    for reads, template in pieces:
        if not reads & names:
            continue
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
    if whole or not isinstance(full, str):
        out |= leaf_strings(full)
    return out


@lru_cache(maxsize=4096)
def _pieces(text: str) -> tuple[tuple[frozenset[str], jinja2.Template | None], ...]:
    """The top-level parts of ``text``'s syntax tree that are not plain text, each with the names it
    reads: a ``{{ expr }}`` with a template rendering that expression alone, a ``{% %}`` block with
    None. Once per text and process (every host renders the same texts)."""
    ast = parse(text)
    out: list[tuple[frozenset[str], jinja2.Template | None]] = []
    for node in ast.body:
        if isinstance(node, nodes.Output):
            for child in node.nodes:
                if isinstance(child, nodes.TemplateData):
                    continue
                alone = nodes.Template([nodes.Output([child], lineno=child.lineno)], lineno=child.lineno)
                out.append((_names(child), environment().from_string(alone)))
        else:
            out.append((_names(node), None))
    return tuple(out)


def _names(node: nodes.Node) -> frozenset[str]:
    found = {n.name for n in node.find_all(nodes.Name)}
    if isinstance(node, nodes.Name):
        found.add(node.name)
    return frozenset(found)
