"""Positions in loaded YAML: the containers that remember the line of each key and item, and the
functions that read those lines back for error messages.

:mod:`fleetctl.util.yamlload` builds every mapping of a document as a :class:`LineDict` and every
sequence as a :class:`LineList`; both are ordinary ``dict``/``list`` subclasses, so code that does
not care about positions (``json.dumps``, pydantic, jinja2) uses them unchanged. :func:`where`
and :func:`locate` give the 1-based line of a key, an item or a key path; :func:`join_key` writes
a key path the way error messages show it (``tasks[0].name``). Nothing here parses YAML.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

__all__ = ["LineDict", "LineList", "where", "locate", "join_key"]


class LineDict(dict):
    """A mapping loaded from YAML that knows the line of each of its keys.

    Attributes:
        line: 1-based line where the mapping starts (its first key, or the ``{``).
        key_lines: key -> 1-based line of that key.
    """

    __slots__ = ("line", "key_lines")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line: int | None = None
        self.key_lines: dict[Hashable, int] = {}


class LineList(list):
    """A sequence loaded from YAML that knows the line of each item.

    Attributes:
        line: 1-based line where the sequence starts.
        item_lines: index -> 1-based line of that item (a list, same length as the sequence).
    """

    __slots__ = ("line", "item_lines")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.line: int | None = None
        self.item_lines: list[int] = []


def where(node: Any, key: Any = None) -> int | None:
    """The 1-based line of ``key`` inside ``node``, or of ``node`` itself when ``key`` is None.

    Args:
        node: a :class:`LineDict` or :class:`LineList` from :func:`load_yaml`; anything else
            (a plain dict, a scalar) has no position and gives None.
        key: a mapping key, or a sequence index (negative indexes count from the end).

    Returns:
        The line, or None when unknown (key absent, index out of range, node built elsewhere).
    """
    if key is None:
        return getattr(node, "line", None) if isinstance(node, (LineDict, LineList)) else None
    if isinstance(node, LineDict):
        try:
            return node.key_lines.get(key)
        except TypeError:  # unhashable key asked for
            return None
    if isinstance(node, LineList) and isinstance(key, int) and not isinstance(key, bool):
        try:
            return node.item_lines[key]
        except IndexError:
            return None
    return None


def locate(root: Any, path: Sequence[Any]) -> int | None:
    """The line of the last element of ``path`` walked down from ``root``.

    ``locate(data, ["all", "children", "gpu", "vars", "port"])`` is the line of ``port:``. When the
    path breaks off (a key is missing), the line of the deepest element that exists is returned,
    which is where a "missing key" error should point.

    Args:
        root: the value :func:`load_yaml` returned.
        path: mapping keys and sequence indexes.
    """
    node = root
    line = where(root)
    for key in path:
        found = where(node, key)
        if found is None:
            return line
        line = found
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return line
    return line


def join_key(parts: Sequence[Any]) -> str:
    """A dotted key path for error messages: ``["tasks", 0, "name"]`` -> ``tasks[0].name``."""
    out = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
