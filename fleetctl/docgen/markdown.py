"""Small Markdown helpers of the reference generators: docstring text to Markdown, table cells,
Python annotations and defaults as readers of a playbook write them.
"""

from __future__ import annotations

import html
import json
import re
import types
import typing
from typing import Any

__all__ = ["attributes_section", "cell", "constraint_text", "default_text", "rst_to_md", "type_text"]

_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")


def rst_to_md(text: str) -> str:
    """Sphinx/RST inline markup of our docstrings as Markdown: ``x`` -> `x`, :mod:`~a.b` -> `b`."""
    text = _ROLE.sub(lambda m: "`" + (m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)) + "`", text)
    return text.replace("``", "`")


def attributes_section(doc: str | None) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style docstring: name -> its text (lines joined).

    A continuation line is one indented deeper than the ``name:`` line it belongs to.
    """
    out: dict[str, str] = {}
    if not doc:
        return out
    lines = doc.expandtabs().splitlines()
    inside, indent, current = False, None, None
    for line in lines:
        stripped = line.strip()
        if stripped == "Attributes:":
            inside, indent, current = True, None, None
            continue
        if not inside:
            continue
        if not stripped:
            current = None
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*):\s*(.*)$", stripped)
        if depth == indent and m:
            current = m.group(1)
            for name in current.split(", "):
                out[name] = m.group(2)
            continue
        if current is not None:
            for name in current.split(", "):
                out[name] = (out[name] + " " + stripped).strip()
    return out


def type_text(annotation: Any) -> str:
    """A field's annotation as a reader writes it: ``list[str]``, ``int | None``, ``"auto" | "uv"``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return "any"
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("None" if a is type(None) else type_text(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_text(a) for a in args)}]" if args else name
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def constraint_text(field: Any) -> str:
    """A pydantic field's bounds (``Field(ge=1)``, ``Field(min_length=1)``) as words: ``>= 1``,
    ``at least 1 item``, ``non-empty`` (a string); empty when it has none."""
    words = []
    for meta in getattr(field, "metadata", ()):
        for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                words.append(f"{op} {getattr(meta, attr)}")
        unit = "character" if field.annotation is str else "item"
        if getattr(meta, "min_length", None) is not None:
            n = meta.min_length
            words.append("non-empty" if n == 1 and unit == "character" else f"at least {n} {unit}{'s' * (n != 1)}")
        if getattr(meta, "max_length", None) is not None:
            words.append(f"at most {meta.max_length} {unit}s")
    return ", ".join(words)


def default_text(field: Any) -> str:
    """A pydantic field's default in YAML words (``true``, ``null``, ``[]``); ``required`` if none."""
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    return "`" + json.dumps(value, sort_keys=True) + "`"


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: one line; a pipe outside code escaped (``\\|``), a code
    span holding one written as HTML (``<code>int &#124; None</code>``: Python-Markdown would show the
    backslash of an escaped pipe inside a code span)."""
    text = " ".join(text.split())
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(part if "|" not in part else
                       "<code>" + html.escape(part[1:-1], quote=False).replace("|", "&#124;") + "</code>")
        else:
            out.append(part.replace("|", "\\|"))
    return "".join(out)
