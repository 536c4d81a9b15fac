"""Template variables: the names fleetctl defines, the names a template or ``when`` expression needs
(a static analysis of its Jinja syntax tree), and play vars rendered for one host in dependency order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import jinja2.meta
from jinja2 import nodes

from fleetctl.tasks.argtypes import is_template

from .templating import BUILTIN_NAMES, RenderError, expression_ast, parse, render

__all__ = [
    "IDENT",
    "JINJA_WORDS",
    "RESERVED_NAMES",
    "STANDARD_NAMES",
    "expression_variables",
    "find_cycle",
    "referenced_variables",
    "render_vars",
    "template_variables",
    "value_variables",
]

#: Names the runner defines for every host: ``facts`` (gathered facts), ``host`` (inventory name),
#: ``workdir`` (remote working folder), ``run_id``, ``run_dir`` (remote per-run folder),
#: ``playbook_dir`` (local folder of the playbook), ``venv`` (remote venv), ``python`` (its
#: interpreter).
STANDARD_NAMES: frozenset[str] = frozenset(
    {"facts", "host", "workdir", "run_id", "run_dir", "playbook_dir", "venv", "python"}
)

#: Standard names that play vars and ``register`` may not redefine.
RESERVED_NAMES: frozenset[str] = frozenset({"facts", "host", "run_id", "run_dir", "playbook_dir"})

#: What a play var or a ``register`` name must look like, and the Jinja words it may not be.
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
JINJA_WORDS = frozenset(
    {"true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is", "if", "else"}
)

_GUARD_TESTS = {"defined", "undefined"}
_GUARD_FILTERS = {"default", "d"}


def _guarded_names(ast: nodes.Node) -> set[int]:
    """ids of Name nodes used only to ask whether they are defined (``is defined``, ``default``)."""
    guarded: set[int] = set()

    def base_name(node: nodes.Node) -> nodes.Name | None:
        while isinstance(node, (nodes.Getattr, nodes.Getitem)):
            node = node.node
        return node if isinstance(node, nodes.Name) else None

    for test in ast.find_all(nodes.Test):
        if test.name in _GUARD_TESTS and (name := base_name(test.node)) is not None:
            guarded.add(id(name))
    for flt in ast.find_all(nodes.Filter):
        if flt.name in _GUARD_FILTERS and flt.node is not None and (name := base_name(flt.node)):
            guarded.add(id(name))
    return guarded


def _free_names(ast: nodes.Template) -> set[str]:
    names = set(jinja2.meta.find_undeclared_variables(ast)) - BUILTIN_NAMES
    if not names:
        return names
    guarded = _guarded_names(ast)
    unguarded = {
        n.name for n in ast.find_all(nodes.Name) if n.ctx == "load" and id(n) not in guarded
    }
    return names & unguarded


def template_variables(text: str) -> set[str]:
    """Top-level variable names a template string needs (builtins and guarded uses excluded).

    Raises:
        RenderError: the template's syntax is invalid.
    """
    if not is_template(text):
        return set()
    return set(_template_names(text))


@lru_cache(maxsize=4096)
def _template_names(text: str) -> frozenset[str]:
    """:func:`template_variables`, once per text and process: every host's play vars are the same
    texts, and walking their syntax trees per host was a tenth of a deploy's planning."""
    return frozenset(_free_names(parse(text)))


def expression_variables(expr: str | bool) -> set[str]:
    """Top-level variable names a ``when`` expression needs (builtins and guarded uses excluded).

    Raises:
        RenderError: the expression's syntax is invalid.
    """
    if isinstance(expr, bool):
        return set()
    return _free_names(expression_ast(expr))


def referenced_variables(value: Any, *, expression: bool = False) -> set[str]:
    """Every top-level name the templates inside a nested value read, guarded uses included
    (``x | default(...)``, ``x is defined``): the names an extra var (``-e``) can mean. With
    ``expression``, ``value`` is a bare ``when`` expression. Builtins are left out; a template
    whose syntax is invalid reads nothing here (the playbook parser refuses it on its own).
    """
    if isinstance(value, str):
        if not expression and not is_template(value):
            return set()
        try:
            return set(_referenced_names(value, expression))
        except RenderError:
            return set()
    if isinstance(value, Mapping):
        return {n for k, v in value.items()
                for n in referenced_variables(k) | referenced_variables(v, expression=expression)}
    if isinstance(value, (list, tuple)):
        return {n for item in value for n in referenced_variables(item, expression=expression)}
    return set()


@lru_cache(maxsize=4096)
def _referenced_names(text: str, expression: bool) -> frozenset[str]:
    ast = expression_ast(text) if expression else parse(text)
    return frozenset(set(jinja2.meta.find_undeclared_variables(ast)) - BUILTIN_NAMES)


def value_variables(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, str]]:
    """(path, name) for every variable used by templates inside a nested value."""
    if isinstance(value, str):
        for name in sorted(template_variables(value)):
            yield path, name
    elif isinstance(value, Mapping):
        for key, val in value.items():
            if isinstance(key, str):
                for name in sorted(template_variables(key)):
                    yield path + (key,), name
            yield from value_variables(val, path + (key,))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from value_variables(item, path + (i,))


def find_cycle(deps: Mapping[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(deps.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(deps):
        if node not in state and (found := visit(node)):
            return found
    return None


def render_vars(variables: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """Render play vars for one host, each var seeing ``context`` and the other rendered vars.

    Vars are rendered in dependency order, so ``src_dir: "{{ workdir }}/src"`` and
    ``build_dir: "{{ src_dir }}/build"`` both work in any order of definition.

    Returns:
        var name -> rendered value (``context`` itself is not included).

    Raises:
        RenderError: a var fails to render (``path`` is ``(name, ...)``), or vars form a cycle.
    """
    # A var using its own name sees the value from ``context`` (an inventory var it overrides).
    deps = {
        name: {n for _, n in value_variables(value) if n in variables and not (n == name and n in context)}
        for name, value in variables.items()
    }
    if cycle := find_cycle(deps):
        raise RenderError("play vars refer to each other in a cycle: " + " -> ".join(cycle), path=(cycle[0],))
    done: dict[str, Any] = {}

    def resolve(name: str) -> None:
        if name in done:
            return
        for dep in sorted(deps[name]):
            resolve(dep)
        scope = {**context, **done}
        try:
            done[name] = render(variables[name], scope)
        except RenderError as exc:
            raise RenderError(exc.message, path=(name,) + exc.path) from exc

    for name in variables:
        resolve(name)
    return done
