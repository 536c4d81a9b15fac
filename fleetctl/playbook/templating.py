"""Jinja2 templating for playbooks: rendering, ``when`` evaluation, syntax checks.

One sandboxed environment with :class:`jinja2.StrictUndefined`: using a name that is not defined is
an error, never an empty string. ``x is defined``, ``x is undefined`` and ``x | default(...)`` still
work, and the static check (:mod:`.variables`, :func:`.model.check_undefined`) accepts names
used only under them.

Rendering (:func:`render`) walks nested lists and dicts and renders every string holding Jinja
syntax. A string that is exactly one ``{{ expr }}`` yields the expression's native value (a list,
an int...), like Ansible; any other template yields a string.
"""

from __future__ import annotations

import json
import os.path
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import SandboxedEnvironment

from fleetctl.tasks.argtypes import is_template
from fleetctl.errors import PlaybookError
from fleetctl.build.cudacompat import target_arch_list
from fleetctl.build.sgl_recipe import sgl_kernel_recipe

from .messages import one_line
from .unknown import NotKnown, Unknown

__all__ = [
    "BUILTIN_NAMES",
    "RenderError",
    "check_expression",
    "check_template",
    "environment",
    "evaluate_when",
    "expression_ast",
    "is_template",
    "parse",
    "render",
    "render_string",
]


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


def _regex_test(how: str):
    """Ansible's ``search`` / ``match`` tests (``x is search('bash')``, ``x is match('^gpu', ignorecase=True)``):
    :func:`re.search` / :func:`re.match` of the pattern in ``str(x)``."""

    def test(value: object, pattern: str, ignorecase: bool = False, multiline: bool = False) -> bool:
        flags = (re.I if ignorecase else 0) | (re.M if multiline else 0)
        return getattr(re, how)(pattern, str(value), flags) is not None

    return test


def _bool_filter(value: object) -> bool:
    """Jinja filter ``| bool``: ``"yes"``, ``"true"``, ``"on"``, ``"1"`` are true (Ansible)."""
    if isinstance(value, str):
        return value.strip().lower() in {"yes", "true", "on", "1", "y"}
    return bool(value)


def _combine_filter(*dicts: object) -> dict:
    """Jinja filter ``a | combine(b, ...)``: a new mapping, later keys winning (Ansible's ``combine``,
    without ``recursive``). Raises ValueError when an argument is not a mapping."""
    out: dict = {}
    for d in dicts:
        if not isinstance(d, dict):
            raise ValueError(f"combine wants mappings, got {type(d).__name__} {d!r}")
        out.update(d)
    return out


def _target_arch_list(facts: Any, archs: Any = None) -> str:
    """:func:`fleetctl.build.cudacompat.target_arch_list` for templates (task titles): an ``archs``
    that is not an arch list is shown as written (the task's own argument check names the fault)."""
    try:
        return target_arch_list(facts if isinstance(facts, Mapping) else {}, archs)
    except ValueError:
        return str(archs)


@lru_cache(maxsize=1)
def environment() -> SandboxedEnvironment:
    """The shared sandboxed Jinja environment (StrictUndefined, no autoescape, keeps newlines), with
    Ansible's ``version``, ``search`` and ``match`` tests and its ``bool``, ``basename``, ``dirname``,
    ``to_json`` and ``combine`` filters."""
    env = SandboxedEnvironment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.tests["version"] = _version_test
    env.tests["search"] = _regex_test("search")
    env.tests["match"] = _regex_test("match")
    env.filters["bool"] = _bool_filter
    env.filters["basename"] = os.path.basename
    env.filters["dirname"] = os.path.dirname
    env.filters["to_json"] = lambda v: json.dumps(v, sort_keys=True)
    env.filters["combine"] = _combine_filter
    # build recipes of the payloads fleetctl deploys (pure functions of facts)
    env.globals["sgl_kernel_recipe"] = sgl_kernel_recipe
    env.globals["target_arch_list"] = _target_arch_list  # the arch list a build_wheel builds
    return env


#: Names Jinja itself defines (``range``, ``dict``, ``namespace``...): always known.
BUILTIN_NAMES: frozenset[str] = frozenset(environment().globals)

_NATIVE = re.compile(r"\A\s*\{\{(?P<expr>.*)\}\}\s*\Z", re.S)


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
    if type(exc) is ValueError and str(exc):  # a function's own word on a bad value (sgl_kernel_recipe's)
        return text
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


@lru_cache(maxsize=4096)
def _compiled_expression(expr: str) -> Any:
    """``expr`` compiled once per process (every host renders the same task arguments: compiling
    them per host was most of a large deploy's planning time)."""
    return environment().compile_expression(expr, undefined_to_none=False)


@lru_cache(maxsize=4096)
def _compiled_template(text: str) -> jinja2.Template:
    """``text`` compiled once per process (see :func:`_compiled_expression`)."""
    return environment().from_string(text)


def render_string(text: str, context: Mapping[str, Any]) -> Any:
    """Render one string. Exactly one ``{{ expr }}`` returns the native value; other text a string.

    Raises:
        RenderError: undefined name, syntax error, or an error raised while evaluating.
        NotKnown: it reads a registered value no command has produced yet (:mod:`.unknown`).
    """
    if not is_template(text):
        return text
    try:
        expr = _native_expression(text)
        if expr is not None:
            value = _fail_if_undefined(_compiled_expression(expr)(**context))
            return str(value) if isinstance(value, Unknown) else value  # its marker, or NotKnown
        return _compiled_template(text).render(**context)
    except (RenderError, NotKnown):
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
        NotKnown: it reads a registered value no command has produced yet (:mod:`.unknown`).
    """
    if isinstance(expr, bool):
        return expr
    text = _check_expression_text(expr)
    try:
        return bool(_fail_if_undefined(_compiled_expression(text)(**context)))
    except (RenderError, NotKnown):
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
    parse(text)


def check_expression(expr: str) -> None:
    """Check a ``when`` expression's syntax.

    Raises:
        RenderError: the first problem, as one line.
    """
    expression_ast(expr)


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> nodes.Template:
    env = environment()
    ast = env.parse(text)
    env.compile(ast)  # unknown filters/tests are found at compile time
    return ast


def parse(text: str) -> nodes.Template:
    try:
        return _parse_cached(text)
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(f"template syntax error: {exc.message}") from exc
    except RecursionError as exc:
        raise RenderError("template nested too deeply") from exc
    except Exception as exc:
        raise RenderError(_describe(exc)) from exc


def expression_ast(expr: str) -> nodes.Template:
    text = _check_expression_text(expr)
    if not text:
        raise RenderError("empty when expression")
    if "{{" in text or "}}" in text or "{%" in text or "%}" in text:
        raise RenderError("a when expression is written without {{ }} or {% %}")
    return parse("{{ " + text + " }}")
