"""libyaml's parser for plain YAML documents, behind :mod:`fleetctl.util.yamlload`.

PyYAML's Python parser takes 12 ms for an inventory of 20 hosts (124 lines), paid by every
command, ``fleetctl run`` included (bench/README.md, issue 27); libyaml (PyYAML's ``CParser``)
builds the same nodes in a tenth of that, and the loader's own constructors turn them into the
same objects, lines included. A document goes to libyaml only when both parsers read it alike and
nothing in it needs a message of the loader's composing; otherwise the caller parses it with
PyYAML's Python parser, as it always did, so every error keeps its words:

- texts the two might read differently: tabs, NEL and Unicode line breaks (line numbers), ``%``
  directives, characters PyYAML's reader refuses;
- a document libyaml refuses or cannot build (a syntax error, an unknown tag...);
- a node the loader refuses while composing: a ``!vault`` tag, a recursive alias, a repeated key.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode

__all__ = ["MERGE_TAG", "PYTHON_ONLY", "load_by_libyaml", "plain_tree", "with_libyaml"]

MERGE_TAG = "tag:yaml.org,2002:merge"
#: Texts only PyYAML's Python parser reads (see the module docstring).
PYTHON_ONLY = re.compile("[!|>?\t\x85\u2028\u2029]|^%|" + yaml.reader.Reader.NON_PRINTABLE.pattern, re.M)
_CParser = getattr(getattr(yaml, "cyaml", None), "CParser", None) if getattr(yaml, "__with_libyaml__", False) else None


def with_libyaml(loader_cls: type) -> type | None:
    """``loader_cls`` (a :class:`yaml.SafeLoader` subclass whose ``__init__`` takes ``stream,
    file=, error_cls=``) on libyaml's parser and composer, its constructors kept; None without
    libyaml."""
    if _CParser is None:
        return None

    class _LibyamlLoader(_CParser, loader_cls):  # type: ignore[valid-type, misc]
        def __init__(self, stream: str, *, file: str, error_cls: type) -> None:
            _CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            self.fleet_file, self.fleet_error = file, error_cls
            self.fleet_path, self.fleet_open_anchors = [], []

    _LibyamlLoader.__name__ = _LibyamlLoader.__qualname__ = f"Libyaml{loader_cls.__name__.lstrip('_')}"
    return _LibyamlLoader


def plain_tree(root: Any, key_identity: Callable[[ScalarNode], Any]) -> bool:
    """No node under ``root`` is a ``!vault`` value or inside itself (a recursive alias), and no
    mapping repeats a key (by ``key_identity``, merge keys aside). Each node is checked once,
    however many aliases name it."""
    done: set[int] = set()
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            open_.discard(id(node))
            done.add(id(node))
            continue
        if id(node) in open_:
            return False
        if id(node) in done:
            continue
        if node.tag == "!vault":
            return False
        if isinstance(node, ScalarNode):
            done.add(id(node))
            continue
        open_.add(id(node))
        stack.append((node, True))
        if isinstance(node, MappingNode):
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                if isinstance(key_node, ScalarNode) and key_node.tag != MERGE_TAG:
                    identity = key_identity(key_node)
                    if identity in seen:
                        return False
                    seen.add(identity)
                stack += [(value_node, False), (key_node, False)]
        else:
            stack += [(item, False) for item in reversed(node.value)]
    return True


def load_by_libyaml(loader_cls: type | None, text: str, file: str, error_cls: type) -> tuple[bool, Any]:
    """``(True, document)`` when libyaml reads ``text`` as a plain document with ``loader_cls``
    (from :func:`with_libyaml`), else ``(False, None)``: the Python parser must read it."""
    if loader_cls is None or PYTHON_ONLY.search(text):
        return False, None
    loader = loader_cls(text, file=file, error_cls=error_cls)
    try:
        node = loader.get_single_node()
        if node is None:
            return True, None
        if not plain_tree(node, loader.key_identity):
            return False, None
        return True, loader.construct_document(node)
    except (Exception, RecursionError):  # the Python parser says what is wrong, as it always did
        return False, None
    finally:
        loader.dispose()
