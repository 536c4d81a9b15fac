"""Loading a playbook file: :func:`load_playbook` reads it (:mod:`.yamldoc`), checks the play's own keys
here and its task lists in :mod:`.task_parser`, and returns the validated :class:`~.model.Playbook`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fleetctl.errors import PlaybookError
from fleetctl.util.paths import want_path

from . import templating, variables
from .messages import Path_, did_you_mean, fmt_path, playbook_error, short, strings, typename
from .model import PLAY_KEYS, Playbook, Task, check_undefined
from .task_parser import TaskParser
from .variables import IDENT, JINJA_WORDS
from .yamldoc import YamlDoc, load_doc

__all__ = ["load_playbook"]


def load_playbook(path: str | os.PathLike[str], *, known_names: Iterable[str] | None = None) -> Playbook:
    """Load and validate a playbook file.

    Args:
        path: the playbook YAML file (a ``str`` or ``os.PathLike``).
        known_names: when given, also run the static undefined-variable check with these names
            known besides the standard ones (pass the inventory vars of the selected hosts).

    Returns:
        The validated :class:`Playbook`.

    Raises:
        InputError: ``path`` is not a path (``load_playbook(5)``), is empty or holds a NUL byte
            (:func:`fleetctl.util.paths.want_path`).
        PlaybookError: anything wrong with the file, as one line naming file, line, task and key.
    """
    path = Path(want_path("path", path))
    display = str(path)
    doc = load_doc(path, display=display)
    playbook = _Parser(doc, path).parse()
    if known_names is not None:
        check_undefined(playbook, known_names)
    return playbook


class _Parser:
    def __init__(self, doc: YamlDoc, path: Path) -> None:
        self.doc = doc
        self.path = path
        self.root: Path_ = ()

    def fail(self, message: str, path: Path_, *, key: str | None = None, doc: YamlDoc | None = None) -> PlaybookError:
        doc = doc or self.doc
        return playbook_error(message, file=doc.file, line=doc.line_of(path), key=key)

    def play_fail(self, message: str, sub: Path_) -> PlaybookError:
        return self.fail(message, self.root + tuple(sub), key=fmt_path(sub) or None)

    # -- the play ------------------------------------------------------------------------------

    def parse(self) -> Playbook:
        data = self.doc.data
        if data is None:
            raise self.fail("the playbook is empty", ())
        if isinstance(data, list):
            if len(data) != 1:
                raise self.fail(
                    f"a playbook file holds exactly one play, this list has {len(data)}", ()
                )
            self.root = (0,)
            data = data[0]
        if not isinstance(data, Mapping):
            raise self.fail(
                f"a playbook must be a mapping with name, hosts, vars, tasks; got a {typename(data)}",
                self.root,
            )
        for key in data:
            if key not in PLAY_KEYS:
                hint = did_you_mean(key, PLAY_KEYS)
                extra = f" (did you mean '{hint}'?)" if hint else f" (play keys: {', '.join(PLAY_KEYS)})"
                raise self.fail(f"unknown play key{extra}", self.root + (key,), key=str(key))

        name = data.get("name")
        if name is None:
            name = self.path.stem
        elif not isinstance(name, str):
            raise self.play_fail(f"must be a string, got a {typename(name)}", ("name",))

        hosts = self._hosts(data.get("hosts"))
        variables = self._vars(data.get("vars"))
        serial = self._serial(data.get("serial"))
        mfp = data.get("max_fail_percentage")
        if mfp is not None:
            if isinstance(mfp, bool) or not isinstance(mfp, (int, float)) or not (0 <= mfp <= 100):
                raise self.play_fail(f"must be a number from 0 to 100, got {short(mfp)}", ("max_fail_percentage",))
            mfp = float(mfp)
        any_fatal = self._bool(data.get("any_errors_fatal", False), ("any_errors_fatal",))
        gather = self._bool(data.get("gather_facts", True), ("gather_facts",))

        task_parser = TaskParser(self.doc, self.root)
        handlers = task_parser.task_list(data.get("handlers"), self.root + ("handlers",), "handlers", self.doc,
                                         stack=(), outer=None)
        names: dict[str, Task] = {}
        for h in handlers:
            if not h.name:
                raise h.error("a handler needs a name (tasks notify it by name)")
            if h.name in names:
                raise h.error(f"duplicate handler name '{h.name}'", ("name",))
            names[h.name] = h
        tasks = task_parser.task_list(data.get("tasks"), self.root + ("tasks",), "tasks", self.doc,
                                      stack=(os.path.realpath(self.path),), outer=None)
        for task in (*tasks, *handlers):
            for i, target in enumerate(task.notify):
                if target not in names:
                    hint = did_you_mean(target, names)
                    extra = f" (did you mean '{hint}'?)" if hint else (
                        f" (handlers: {', '.join(names)})" if names else " (the play has no handlers)"
                    )
                    sub = ("notify", i) if task._doc.has(task._path + ("notify", i)) else ("notify",)
                    raise task.error(f"unknown handler '{target}'{extra}", sub)
        tasks = [_reindex(t, i) for i, t in enumerate(tasks)]
        handlers = [_reindex(t, i) for i, t in enumerate(handlers)]
        playbook = Playbook(
            path=self.path, name=name, hosts=hosts, vars=variables, tasks=tasks, handlers=handlers,
            serial=serial, max_fail_percentage=mfp, any_errors_fatal=any_fatal, gather_facts=gather,
            sha256=self.doc.sha256, text=self.doc.text, _doc=self.doc, _root=self.root,
        )
        return playbook

    def _bool(self, value: Any, sub: Path_) -> bool:
        if not isinstance(value, bool):
            raise self.play_fail(f"must be true or false, got {short(value)}", sub)
        return value

    def _hosts(self, value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):
            if not value.strip():
                raise self.play_fail("must not be empty", ("hosts",))
            return value.strip()
        if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
            return ":".join(v.strip() for v in value)
        raise self.play_fail("must be a host pattern string or a list of them", ("hosts",))

    def _serial(self, value: Any) -> int | str | None:
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*(100|[1-9][0-9]?)\s*%\s*", value):
            return value.replace(" ", "")
        raise self.play_fail(f"must be a positive int or a percentage like '25%', got {short(value)}", ("serial",))

    def _vars(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.play_fail(f"must be a mapping, got a {typename(value)}", ("vars",))
        for key, val in value.items():
            sub = ("vars", key)
            if not isinstance(key, str) or not IDENT.match(key) or key in JINJA_WORDS:
                raise self.fail(
                    f"invalid variable name {short(key)} (letters, digits, _)", self.root + sub,
                    key="vars",
                )
            if key in variables.RESERVED_NAMES:
                raise self.play_fail(f"'{key}' is set by fleetctl and cannot be a play var", sub)
            for path, text in strings(val):
                try:
                    templating.check_template(text)
                except templating.RenderError as exc:
                    raise self.play_fail(exc.message, sub + path) from None
        return dict(value)


def _reindex(task: Task, index: int) -> Task:
    from dataclasses import replace

    return replace(task, index=index)
