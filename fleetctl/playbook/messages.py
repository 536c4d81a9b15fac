"""Where a playbook problem is and how it reads: one-line messages, locations inside a YAML document
and their printed keys, did-you-mean hints, and pydantic's errors as one line.

A location (:data:`Path_`) is a tuple of mapping keys and list indices, ``("tasks", 3, "copy", "dest")``;
its message key is the printed form, ``tasks[3] (build).copy.dest``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from fleetctl.errors import PlaybookError
from fleetctl.tasks.argtypes import ActionArgs, is_template
from fleetctl.util.didyoumean import close_matches

__all__ = [
    "Path_",
    "as_written",
    "did_you_mean",
    "existing_prefix",
    "fmt_path",
    "join_key",
    "one_line",
    "playbook_error",
    "short",
    "strings",
    "template_paths",
    "typename",
    "validation_message",
]

Path_ = tuple  # a location inside a YAML document: keys and list indices


def one_line(text: str) -> str:
    """``text`` with control characters (newlines, tabs...) escaped, so a message stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def playbook_error(message: str, *, file: str | None = None, line: int | None = None, key: str | None = None,
                   cls: type[PlaybookError] = PlaybookError) -> PlaybookError:
    """A :class:`PlaybookError` (or ``cls``) whose message and key are one line each."""
    return cls(one_line(message), file=file, line=line, key=one_line(key) if key else None)


def _printable(path: Path_) -> bool:
    return all(isinstance(p, (str, int)) for p in path)


def fmt_path(path: Iterable[Any]) -> str:
    """``("argv", 2)`` -> ``argv[2]``; ``("env", "X")`` -> ``env.X``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def as_written(sub: Path_, action: str, shorthand: str | None) -> Path_:
    """A location inside a task as the user wrote it: ``("debug", "msg")`` -> ``("debug",)``
    when the task said ``debug: text``."""
    sub = tuple(sub)
    if shorthand is not None and len(sub) >= 2 and sub[0] == action and sub[1] == shorthand:
        return (action,) + sub[2:]
    return sub


def join_key(prefix: str, path: Iterable[Any]) -> str:
    tail = fmt_path(path)
    if not tail:
        return prefix
    return prefix + (tail if tail.startswith("[") else "." + tail)


def did_you_mean(word: Any, candidates: Iterable[str]) -> str | None:
    if not isinstance(word, str):
        return None
    found = close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def typename(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def template_paths(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    """Paths of every string holding a template inside a nested value (keys included)."""
    if isinstance(value, str):
        if is_template(value):
            yield path
    elif isinstance(value, Mapping):
        for key, val in value.items():
            if is_template(key):
                yield path + (key,)
            yield from template_paths(val, path + (key,))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from template_paths(item, path + (i,))


def strings(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, val in value.items():
            if isinstance(key, str):
                yield path + (key,), key
            yield from strings(val, path + (key,))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from strings(item, path + (i,))


def existing_prefix(raw: Any, loc: tuple) -> Path_:
    """The longest prefix of a pydantic error location that exists in the raw value."""
    out: list[Any] = []
    node = raw
    for part in loc:
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            break
        out.append(part)
    return tuple(out)


def validation_message(exc: ValidationError, raw: Mapping[str, Any], action: str, model: type[ActionArgs],
                       err: Mapping[str, Any] | None = None) -> tuple[Path_, str]:
    """(location inside the arguments, one-line message) for a pydantic error."""
    err = err or exc.errors()[0]
    loc = tuple(err["loc"])
    kind = err["type"]
    fields = list(model.model_fields)
    if kind == "missing" and len(loc) == 1:
        return (), f"missing required argument '{loc[0]}'"
    if kind == "extra_forbidden" and len(loc) == 1:
        hint = did_you_mean(loc[0], fields)
        extra = f" (did you mean '{hint}'?)" if hint else f" ({action} takes: {', '.join(fields)})"
        return loc, f"unknown argument{extra}"
    sub = existing_prefix(raw, loc)
    msg = str(err.get("msg", "invalid value"))
    if kind == "value_error" and msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    else:
        msg = msg[:1].lower() + msg[1:]
        if "input" in err and kind != "missing":
            msg += f", got {short(err['input'])}"
    return sub, msg
