"""Jinja2 templating for playbooks: rendering, ``when`` evaluation, and the static undefined check.

One sandboxed environment with :class:`jinja2.StrictUndefined`: using a name that is not defined is
an error, never an empty string. ``x is defined``, ``x is undefined`` and ``x | default(...)`` still
work, and the static check accepts names used only under them.

Rendering (:func:`render`) walks nested lists and dicts and renders every string holding Jinja
syntax. A string that is exactly one ``{{ expr }}`` yields the expression's native value (a list,
an int...), like Ansible; any other template yields a string.
"""

from __future__ import annotations

import json
import os.path
import re
from collections.abc import Iterable, Mapping
from difflib import get_close_matches
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.meta
from jinja2 import nodes
from jinja2.sandbox import SandboxedEnvironment

from fleetctl.actions import is_template
from fleetctl.errors import PlaybookError
from fleetctl.sgl_recipe import sgl_kernel_recipe

if TYPE_CHECKING:  # pragma: no cover
    from fleetctl.playbook import Playbook

__all__ = [
    "BUILTIN_NAMES",
    "RESERVED_NAMES",
    "STANDARD_NAMES",
    "RenderError",
    "check_expression",
    "check_template",
    "check_undefined",
    "environment",
    "evaluate_when",
    "expression_variables",
    "is_template",
    "render",
    "render_string",
    "one_line",
    "playbook_error",
    "render_vars",
    "template_variables",
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


def one_line(text: str) -> str:
    """``text`` with control characters (newlines, tabs...) escaped, so a message stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def playbook_error(message: str, *, file: str | None = None, line: int | None = None, key: str | None = None,
                   cls: type[PlaybookError] = PlaybookError) -> PlaybookError:
    """A :class:`PlaybookError` (or ``cls``) whose message and key are one line each."""
    return cls(one_line(message), file=file, line=line, key=one_line(key) if key else None)


class RenderError(PlaybookError):
    """A template failed to render or evaluate for one host (undefined name, type error...).

    ``path`` is the location inside the rendered value (``("cmake_defines", "X")``), so that the
    caller can name the key and line.
    """

    def __init__(self, message: str, *, path: tuple = (), **kwargs: Any) -> None:
        self.path = path
        if kwargs.get("key"):
            kwargs["key"] = one_line(kwargs["key"])
        super().__init__(one_line(message), **kwargs)


def _version_test(value: object, other: object, op: str = ">=") -> bool:
    """Jinja test ``x is version('13.0', '>=')``: compare dotted numeric versions."""

    def parts(v: object) -> tuple[int, ...]:
        nums = re.findall(r"\d+", str(v))
        return tuple(int(n) for n in nums) or (0,)

    a, b = parts(value), parts(other)
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    ops = {
        ">=": a >= b, "ge": a >= b, ">": a > b, "gt": a > b,
        "<=": a <= b, "le": a <= b, "<": a < b, "lt": a < b,
        "==": a == b, "eq": a == b, "!=": a != b, "ne": a != b,
    }
    if op not in ops:
        raise ValueError(f"unknown version comparison {op!r}")
    return ops[op]


def _bool_filter(value: object) -> bool:
    """Jinja filter ``| bool``: ``"yes"``, ``"true"``, ``"on"``, ``"1"`` are true (Ansible)."""
    if isinstance(value, str):
        return value.strip().lower() in {"yes", "true", "on", "1", "y"}
    return bool(value)


@lru_cache(maxsize=1)
def environment() -> SandboxedEnvironment:
    """The shared sandboxed Jinja environment (StrictUndefined, no autoescape, keeps newlines)."""
    env = SandboxedEnvironment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.tests["version"] = _version_test
    env.filters["bool"] = _bool_filter
    env.filters["basename"] = os.path.basename
    env.filters["dirname"] = os.path.dirname
    env.filters["to_json"] = lambda v: json.dumps(v, sort_keys=True)
    # build recipes of the payloads fleetctl deploys (pure functions of facts)
    env.globals["sgl_kernel_recipe"] = sgl_kernel_recipe
    return env


#: Names Jinja itself defines (``range``, ``dict``, ``namespace``...): always known.
BUILTIN_NAMES: frozenset[str] = frozenset(environment().globals)

_NATIVE = re.compile(r"\A\s*\{\{(?P<expr>.*)\}\}\s*\Z", re.S)
_GUARD_TESTS = {"defined", "undefined"}
_GUARD_FILTERS = {"default", "d"}


def _fail_if_undefined(value: object) -> object:
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()  # raises UndefinedError
    return value


def _describe(exc: BaseException) -> str:
    if isinstance(exc, jinja2.UndefinedError):
        return str(exc.message or "undefined variable")
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"template syntax error: {exc.message}"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {text}"


@lru_cache(maxsize=4096)
def _native_expression(text: str) -> str | None:
    """The inner expression when ``text`` is exactly one ``{{ expr }}``, else None."""
    m = _NATIVE.match(text)
    if not m:
        return None
    try:
        environment().compile_expression(m.group("expr"))
    except Exception:  # not a single expression: "{{ a }} and {{ b }}"
        return None
    return m.group("expr")


def render_string(text: str, context: Mapping[str, Any]) -> Any:
    """Render one string. Exactly one ``{{ expr }}`` returns the native value; other text a string.

    Raises:
        RenderError: undefined name, syntax error, or an error raised while evaluating.
    """
    if not is_template(text):
        return text
    env = environment()
    try:
        expr = _native_expression(text)
        if expr is not None:
            fn = env.compile_expression(expr, undefined_to_none=False)
            return _fail_if_undefined(fn(**context))
        return env.from_string(text).render(**context)
    except RenderError:
        raise
    except Exception as exc:  # jinja and the expression's own errors (TypeError, ZeroDivision...)
        raise RenderError(_describe(exc)) from exc


def render(value: Any, context: Mapping[str, Any], *, _path: tuple = ()) -> Any:
    """Render every template string inside ``value`` (nested lists, tuples and dicts).

    Non-strings are returned untouched; dict keys are rendered too when they hold templates.

    Args:
        value: the value to render.
        context: variable name -> value.

    Returns:
        A new value of the same shape (a tuple becomes a list).

    Raises:
        RenderError: with ``path`` set to where inside ``value`` the failing string is.
    """
    try:
        if isinstance(value, str):
            return render_string(value, context)
        if isinstance(value, Mapping):
            out = {}
            for key, val in value.items():
                new_key = render_string(key, context) if isinstance(key, str) else key
                out[new_key] = render(val, context, _path=_path + (key,))
            return out
        if isinstance(value, (list, tuple)):
            return [render(item, context, _path=_path + (i,)) for i, item in enumerate(value)]
        return value
    except RenderError as exc:
        if exc.path or not _path:
            raise
        raise RenderError(exc.message, path=_path) from exc


def _check_expression_text(expr: str) -> str:
    text = expr.strip()
    if text.startswith("{{") and text.endswith("}}"):
        raise RenderError("a when expression is written without {{ }}")
    return text


def evaluate_when(expr: str | bool, context: Mapping[str, Any]) -> bool:
    """Evaluate one ``when`` condition (a bare Jinja expression, no ``{{ }}``) for a host.

    Raises:
        RenderError: undefined name, syntax error, or an error raised while evaluating.
    """
    if isinstance(expr, bool):
        return expr
    text = _check_expression_text(expr)
    try:
        fn = environment().compile_expression(text, undefined_to_none=False)
        return bool(_fail_if_undefined(fn(**context)))
    except RenderError:
        raise
    except Exception as exc:
        raise RenderError(_describe(exc)) from exc


def check_template(text: str) -> None:
    """Check a template string's syntax (and that its filters and tests exist).

    Raises:
        RenderError: the first problem, as one line.
    """
    if not is_template(text):
        return
    _parse(text)


def check_expression(expr: str) -> None:
    """Check a ``when`` expression's syntax.

    Raises:
        RenderError: the first problem, as one line.
    """
    _expression_ast(expr)


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> nodes.Template:
    env = environment()
    ast = env.parse(text)
    env.compile(ast)  # unknown filters/tests are found at compile time
    return ast


def _parse(text: str) -> nodes.Template:
    try:
        return _parse_cached(text)
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(f"template syntax error: {exc.message}") from exc
    except RecursionError as exc:
        raise RenderError("template nested too deeply") from exc
    except Exception as exc:
        raise RenderError(_describe(exc)) from exc


def _expression_ast(expr: str) -> nodes.Template:
    text = _check_expression_text(expr)
    if not text:
        raise RenderError("empty when expression")
    if "{{" in text or "}}" in text or "{%" in text or "%}" in text:
        raise RenderError("a when expression is written without {{ }} or {% %}")
    return _parse("{{ " + text + " }}")


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
    return _free_names(_parse(text))


def expression_variables(expr: str | bool) -> set[str]:
    """Top-level variable names a ``when`` expression needs (builtins and guarded uses excluded).

    Raises:
        RenderError: the expression's syntax is invalid.
    """
    if isinstance(expr, bool):
        return set()
    return _free_names(_expression_ast(expr))


def _value_variables(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, str]]:
    """(path, name) for every variable used by templates inside a nested value."""
    if isinstance(value, str):
        for name in sorted(template_variables(value)):
            yield path, name
    elif isinstance(value, Mapping):
        for key, val in value.items():
            if isinstance(key, str):
                for name in sorted(template_variables(key)):
                    yield path + (key,), name
            yield from _value_variables(val, path + (key,))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _value_variables(item, path + (i,))


#: Ansible's magic variables and the fleetctl names that hold the same thing.
_ANSIBLE_NAMES = {
    "inventory_hostname": "host",
    "inventory_hostname_short": "host",
    "ansible_facts": "facts",
    "ansible_python_interpreter": "python",
}


def _undefined_message(name: str, known: Iterable[str]) -> str:
    known = set(known)
    if _ANSIBLE_NAMES.get(name) in known:
        return f"undefined variable '{name}' (fleetctl calls it '{_ANSIBLE_NAMES[name]}')"
    close = get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"undefined variable '{name}'{hint}"


def check_undefined(playbook: Playbook, known_names: Iterable[str] = ()) -> None:
    """Statically check that every variable a playbook's templates use will be defined.

    Known names are: ``known_names`` (pass the inventory vars defined for every selected host),
    :data:`STANDARD_NAMES`, the play's ``vars``, Jinja's builtins, and names registered by
    *earlier* tasks (handlers see every task's registered names and earlier handlers' ones).
    Names used only as ``x is defined`` / ``x | default(...)`` are accepted. Play vars that refer
    to each other in a cycle are an error too.

    Raises:
        PlaybookError: the first undefined name, naming the file, line, task and key.
    """
    outer = set(known_names) | STANDARD_NAMES | BUILTIN_NAMES
    base = outer | set(playbook.vars)
    # Play vars: each may use any known name, including other play vars (no cycles).
    deps: dict[str, set[str]] = {}
    for var, value in playbook.vars.items():
        deps[var] = set()
        for path, name in _value_variables(value, ("vars", var)):
            if name not in base:
                raise playbook_error(
                    _undefined_message(name, base),
                    file=str(playbook.path),
                    line=playbook.line_of(path),
                    key=".".join(str(p) for p in path),
                )
            if name in playbook.vars and not (name == var and name in outer):
                deps[var].add(name)  # using its own name means the inventory var it overrides
    cycle = _find_cycle(deps)
    if cycle:
        raise playbook_error(
            "play vars refer to each other in a cycle: " + " -> ".join(cycle),
            file=str(playbook.path),
            line=playbook.line_of(("vars", cycle[0])),
            key=f"vars.{cycle[0]}",
        )

    known = set(base)
    for task in list(playbook.tasks) + list(playbook.handlers):
        for sub, name in task.template_variables():
            if name not in known:
                raise playbook_error(
                    _undefined_message(name, known),
                    file=task.file,
                    line=task.line_of(sub),
                    key=task.key_of(sub),
                )
        if task.register:
            known.add(task.register)


def _find_cycle(deps: Mapping[str, set[str]]) -> list[str] | None:
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
        name: {n for _, n in _value_variables(value) if n in variables and not (n == name and n in context)}
        for name, value in variables.items()
    }
    if cycle := _find_cycle(deps):
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
