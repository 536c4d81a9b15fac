"""One playbook YAML file, loaded with the line of every key and item (:mod:`fleetctl.util.yamlload`:
duplicate keys, recursive aliases, one-line errors) and within size limits: at most 16 MiB of bytes,
at most 100,000 values once aliases are expanded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetctl.util import yamlload
from fleetctl.util.paths import not_regular
from fleetctl.errors import PlaybookError

from .messages import Path_, playbook_error

__all__ = ["YamlDoc", "load_doc"]

_MAX_YAML_NODES = 100_000
_MAX_FILE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class YamlDoc:
    """One loaded YAML file: its data (LineDict/LineList), its text and its bytes' SHA-256."""

    file: str
    data: Any
    text: str
    sha256: str

    def line_of(self, path: Path_) -> int | None:
        """The line of ``path``, or of its deepest ancestor that exists."""
        return yamlload.locate(self.data, list(path)) or 1

    def has(self, path: Path_) -> bool:
        """True when ``path`` exists in the document with a known line."""
        node = self.data
        for key in path:
            if yamlload.where(node, key) is None:
                return False
            node = node[key]
        return True


def load_doc(path: Path, *, display: str, err_line: int | None = None, err_key: str | None = None,
             err_file: str | None = None) -> YamlDoc:
    """Read and parse one YAML file. Read errors name ``err_file:err_line`` when given (includes)."""
    where = {"file": err_file or display, "line": err_line, "key": err_key}
    named = "" if where["file"] == display else f": {display}"  # an include names the included file
    special = not_regular(path)  # a FIFO would block the read forever
    if special:
        raise playbook_error(f"{special}{named}", **where)
    try:
        size = path.stat().st_size
        if size > _MAX_FILE_BYTES:
            raise playbook_error(f"file is too large ({size} bytes; at most {_MAX_FILE_BYTES})", **where)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise playbook_error(f"file not found{named}", **where) from None
    except IsADirectoryError:
        raise playbook_error(f"is a folder, not a file{named}", **where) from None
    except OSError as exc:
        raise playbook_error(f"cannot read{named}: {exc.strerror or exc}", **where) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise playbook_error("not valid UTF-8 text", file=display, line=line) from None
    try:
        data = yamlload.load_yaml_text(text, display, error_cls=PlaybookError)
    except PlaybookError as exc:  # keys quoted in its messages may hold newlines
        raise playbook_error(exc.message, file=exc.file, line=exc.line, key=exc.key) from None
    _check_size(data, display)
    return YamlDoc(display, data, text, hashlib.sha256(raw).hexdigest())


def _check_size(data: Any, file: str) -> None:
    """Refuse documents whose aliases expand past :data:`_MAX_YAML_NODES` values (alias bombs)."""
    budget = _MAX_YAML_NODES
    todo = [data]
    while todo:
        node = todo.pop()
        budget -= 1
        if budget < 0:
            raise playbook_error("YAML document too large (aliases expand too far)", file=file)
        if isinstance(node, Mapping):
            todo.extend(node.keys())
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
