"""YAML loading that remembers where every key and item came from.

Inventories and playbooks are YAML files a person typed; when one is wrong, the error must name the
file, the line and the key (``inventory.yaml:7: all.children.gpu.hosts.n1.port: ...``). PyYAML
forgets positions once it has built Python objects, so this module builds them with a
:class:`yaml.SafeLoader` subclass that keeps them:

- every mapping becomes a :class:`LineDict` (a ``dict``) whose :attr:`LineDict.key_lines` gives the
  1-based line of each key;
- every sequence becomes a :class:`LineList` (a ``list``) whose :attr:`LineList.item_lines` gives
  the line of each item;
- scalars stay plain ``str``/``int``/``float``/``bool``/``None``/dates, exactly as ``yaml.safe_load``
  would build them.

Both container types are ordinary ``dict``/``list`` subclasses, so code that does not care about
positions (``json.dumps``, pydantic, jinja2) uses them unchanged. :func:`where` and :func:`locate`
read positions back. The containers and those functions are :mod:`fleetctl.util.yamlpos` (named
here too, as they always were); the words of every error are :mod:`fleetctl.util.yamlerrors`.

Beyond ``yaml.safe_load`` the loader is stricter in three ways, all reported as one line through the
caller's error class (``InventoryError``, ``PlaybookError``, ... any :class:`~fleetctl.errors.InputError`):

- a key repeated in one mapping is an error (PyYAML silently keeps the last one); keys brought in by
  a YAML merge (``<<: *defaults``) may still be overridden, as YAML intends;
- a recursive alias (an anchor used inside itself) is an error, so the result is always finite;
- ``!vault`` (Ansible Vault) values are rejected by name (the error's ``vault`` attribute is
  True, so the inventory can hand such a file to ``ansible-inventory``); ``!unsafe`` (Ansible's
  marker for "do not template") loads as a plain string.

Syntax errors (including tab characters, which YAML does not allow for indentation) become one
line: ``FILE:LINE: YAML syntax error: PROBLEM (column N)``. No traceback, no YAML internals.

Documents are parsed by libyaml (PyYAML's ``CParser``) when PyYAML has it and the document is a
plain one: the same nodes, built into the same objects by the same constructors, 5-10 times
faster (an inventory of 20 hosts: 12 ms in PyYAML's Python parser; ``fleetctl run`` pays it every
time, bench/README.md issue 27). Anything else goes through PyYAML's Python parser, whose messages
are the ones above: a document libyaml refuses, one with a duplicate key, a recursive alias or a
``!vault`` tag, and texts the two parsers might read differently (tabs, NEL and Unicode line
breaks, ``%`` directives, characters PyYAML's reader refuses).
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from fleetctl.errors import InputError

from .yamlerrors import syntax_error, vault_error
from .yamlfast import MERGE_TAG, load_by_libyaml, with_libyaml
from .yamlpos import LineDict, LineList, join_key, locate, where

__all__ = [
    "LineDict",
    "LineList",
    "load_yaml",
    "load_yaml_text",
    "where",
    "locate",
    "join_key",
]

_MAX_BYTES = 16 * 1024 * 1024


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that records positions, refuses duplicate keys and recursive aliases."""

    def __init__(self, stream: str, *, file: str, error_cls: type[InputError]) -> None:
        super().__init__(stream)
        self.fleet_file = file
        self.fleet_error = error_cls
        self.fleet_path: list[Any] = []  # key path of the node being composed
        self.fleet_open_anchors: list[str] = []  # anchors of the collections being composed

    # -- composing (positions of syntax problems, duplicates, recursion) -------------------------

    def compose_node(self, parent: Any, index: Any) -> Any:
        pushed_key = False
        if isinstance(parent, MappingNode) and isinstance(index, ScalarNode):
            self.fleet_path.append(index.value)
            pushed_key = True
        elif isinstance(parent, SequenceNode) and isinstance(index, int):
            self.fleet_path.append(index)
            pushed_key = True
        try:
            event = self.peek_event()
            where_ = {
                "file": self.fleet_file,
                "line": event.start_mark.line + 1,
                "key": join_key(self.fleet_path) or None,
            }
            if isinstance(event, AliasEvent):
                if event.anchor in self.fleet_open_anchors:
                    raise self.fleet_error(
                        f"YAML alias *{event.anchor} is used inside its own anchor &{event.anchor}"
                        " (a recursive structure)",
                        **where_,
                    )
                return super().compose_node(parent, index)
            if getattr(event, "tag", None) == "!vault":
                raise vault_error(self.fleet_error, **where_)
            anchor = event.anchor if isinstance(event, (MappingStartEvent, SequenceStartEvent)) else None
            if anchor is not None:
                self.fleet_open_anchors.append(anchor)
            try:
                return super().compose_node(parent, index)
            finally:
                if anchor is not None:
                    self.fleet_open_anchors.pop()
        finally:
            if pushed_key:
                self.fleet_path.pop()

    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        node = super().compose_mapping_node(anchor)
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == MERGE_TAG:
                continue
            identity = self.key_identity(key_node)
            line = key_node.start_mark.line + 1
            if identity in seen:
                raise self.fleet_error(
                    f"duplicate key {key_node.value!r} in one mapping (first on line {seen[identity]})",
                    file=self.fleet_file,
                    line=line,
                    key=join_key([*self.fleet_path, key_node.value]),
                )
            seen[identity] = line
        return node

    def key_identity(self, key_node: ScalarNode) -> Any:
        """What the key will be once constructed (``1`` and ``0x1`` are the same key)."""
        if key_node.tag == "tag:yaml.org,2002:str":
            return ("str", key_node.value)
        try:
            value = self.construct_object(key_node, deep=True)
            hash(value)
        except Exception:  # constructed later, where the real error is reported
            return (key_node.tag, key_node.value)
        return (type(value).__name__, value)

    # -- constructing (positions of keys and items) ----------------------------------------------

    def construct_line_map(self, node: MappingNode) -> Any:
        data = LineDict()
        data.line = node.start_mark.line + 1
        yield data
        self.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=False)
            try:
                hash(key)
            except TypeError:
                raise self.fleet_error(
                    "a mapping key must be a scalar, not a list or mapping",
                    file=self.fleet_file,
                    line=key_node.start_mark.line + 1,
                ) from None
            data[key] = self.construct_object(value_node, deep=False)
            data.key_lines[key] = key_node.start_mark.line + 1

    def construct_line_seq(self, node: SequenceNode) -> Any:
        data = LineList()
        data.line = node.start_mark.line + 1
        yield data
        for item in node.value:
            data.append(self.construct_object(item, deep=False))
            data.item_lines.append(item.start_mark.line + 1)

    def construct_vault(self, node: Any) -> Any:
        raise vault_error(self.fleet_error, file=self.fleet_file, line=node.start_mark.line + 1, key=None)

    def construct_unsafe(self, node: Any) -> Any:
        if isinstance(node, ScalarNode):
            return self.construct_scalar(node)
        if isinstance(node, SequenceNode):
            return self.construct_line_seq(node)
        return self.construct_line_map(node)


_LineLoader.add_constructor("tag:yaml.org,2002:map", _LineLoader.construct_line_map)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _LineLoader.construct_line_seq)
_LineLoader.add_constructor("!vault", _LineLoader.construct_vault)
_LineLoader.add_constructor("!unsafe", _LineLoader.construct_unsafe)
#: libyaml's parser with the constructors above, or None (PyYAML without libyaml)
_CLineLoader = with_libyaml(_LineLoader)


def load_yaml_text(text: str, file: str, *, error_cls: type[InputError] = InputError) -> Any:
    """Parse one YAML document from ``text``; see :func:`load_yaml`.

    Args:
        text: the document.
        file: how to name the source in error messages (a path, or ``"<string>"``).
        error_cls: the :class:`InputError` subclass to raise.
    """
    done, data = load_by_libyaml(_CLineLoader, text, file, error_cls)
    if done:
        return data
    loader = None
    try:
        loader = _LineLoader(text, file=file, error_cls=error_cls)
        return loader.get_single_data()
    except InputError:
        raise
    except yaml.YAMLError as exc:
        raise syntax_error(exc, text, file, error_cls) from None
    except RecursionError:
        raise error_cls("YAML nesting is too deep", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: str | os.PathLike[str], *, error_cls: type[InputError] = InputError) -> Any:
    """Load the single YAML document in ``path``, remembering the line of every key and item.

    Args:
        path: the file. Errors name it as given (``str(path)``), not resolved, so they read the way
            the user typed it.
        error_cls: the :class:`~fleetctl.errors.InputError` subclass raised for every problem
            (``InventoryError`` for inventories, ``PlaybookError`` for playbooks).

    Returns:
        The document: :class:`LineDict` for mappings, :class:`LineList` for sequences, plain
        scalars; ``None`` for an empty file.

    Raises:
        error_cls: the file cannot be read, is a FIFO, socket or device
            (:func:`fleetctl.util.paths.not_regular`), or is not UTF-8; a YAML syntax error (tabs included);
            a duplicate key; a recursive alias; an unknown or ``!vault`` tag; more than one
            document. The message is one line, with the file and, when known, the line.
    """
    from .paths import not_regular

    file = os.fspath(path)
    special = not_regular(file)
    if special:
        raise error_cls(special, file=file)
    try:
        size = os.path.getsize(file)
        if size > _MAX_BYTES:
            raise error_cls(f"file is too large ({size} bytes; at most {_MAX_BYTES})", file=file)
        with open(file, "rb") as fh:
            raw = fh.read()
    except IsADirectoryError:
        raise error_cls("is a directory, not a YAML file", file=file) from None
    except OSError as exc:
        raise error_cls(f"cannot read: {exc.strerror or exc}", file=file) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error_cls("not valid UTF-8 text", file=file, line=line) from None
    return load_yaml_text(text, file, error_cls=error_cls)
