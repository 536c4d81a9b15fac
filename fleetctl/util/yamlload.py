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
read positions back.

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
from collections.abc import Hashable, Sequence
from typing import Any

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from fleetctl.errors import InputError

from .yamlfast import MERGE_TAG, load_by_libyaml, with_libyaml

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


def _vault_error(error_cls: type[InputError], **where_: Any) -> InputError:
    """The error for an Ansible Vault value; ``vault`` is set on it, so that a caller able to hand
    the file to Ansible (the inventory, through ``ansible-inventory``) can tell it apart."""
    err = error_cls(
        "Ansible Vault values (!vault) are not supported; decrypt the value or keep it out of this file", **where_
    )
    err.vault = True  # type: ignore[attr-defined]
    return err


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
                raise _vault_error(self.fleet_error, **where_)
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
        raise _vault_error(self.fleet_error, file=self.fleet_file, line=node.start_mark.line + 1, key=None)

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


def _syntax_error(exc: yaml.YAMLError, text: str, file: str, error_cls: type[InputError]) -> InputError:
    """One line for a PyYAML error: where it is and what is wrong, no YAML internals."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        char = exc.character
        shown = repr(chr(char)) if isinstance(char, int) else repr(char)
        return error_cls(
            f"YAML syntax error: character {shown} is not allowed in YAML", file=file, line=line
        )
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if problem.startswith("expected <block end>"):
        problem = "indentation does not line up with the lines above " + (
            "(a key at a level that was not opened, or a list item among keys)"
        )
    elif "'<stream end>'" in problem or "unexpected end of stream" in problem:
        if context and "quoted scalar" in context and context_mark is not None:
            problem = "unexpected end of file: the quoted string that starts here is not closed"
            mark = context_mark
        elif context and "flow" in context:
            problem = "unexpected end of file: a '[' or '{' is not closed"
        else:
            problem = f"unexpected end of file ({context or problem})"
    elif "'\\t'" in problem or "tab character" in problem:
        problem = "tab character; YAML allows only spaces for indentation and separation"
    elif problem.startswith("could not determine a constructor for the tag"):
        problem = "unknown YAML tag " + problem.rsplit(" ", 1)[-1]
    elif context and problem.startswith("but "):
        problem = f"{context}, {problem}"
    elif context and problem != context and context.startswith(("while parsing", "while scanning")):
        problem = f"{problem} ({context})"
    problem = " ".join(problem.split())
    if mark is None:
        return error_cls(f"YAML syntax error: {problem}", file=file)
    last_line = max(1, len(text.splitlines()))
    if mark.line + 1 > last_line:  # the end of the file: no column to show
        return error_cls(f"YAML syntax error: {problem}", file=file, line=last_line)
    return error_cls(f"YAML syntax error: {problem} (column {mark.column + 1})", file=file, line=mark.line + 1)


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
        raise _syntax_error(exc, text, file, error_cls) from None
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
