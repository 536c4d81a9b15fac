"""Load and validate playbooks: a pure model, checked before any host is touched.

A playbook file is YAML holding one play: a mapping (or a one-element list of it, Ansible style)::

    name: Build and install FP4 kernels
    hosts: gpu-nodes            # default pattern; --hosts overrides it
    vars:
      src_dir: "{{ workdir }}/fp4"
    tasks:
      - name: upload sources
        copy: {src: ../kernel_src, dest: "{{ src_dir }}"}
      - name: build
        build_wheel: {src: "{{ src_dir }}", out_dir: "{{ src_dir }}/dist"}
        register: build
        notify: report
    handlers:
      - name: report
        debug: {msg: "{{ build }}"}

A task has exactly one action key (:data:`fleetctl.tasks.ACTIONS`) with its arguments, an
optional ``name``, and controls: ``when``, ``register``, ``timeout``, ``retries``, ``delay``,
``ignore_errors``, ``tags``, ``notify``, ``env``, ``become``. ``include_tasks: FILE`` (or
``import_tasks``) inlines a list of tasks from another file at load time.

Every problem is a :class:`~fleetctl.errors.PlaybookError` whose one line names the file, the line,
the task (``tasks[3] (build)``) and the key. The only I/O is reading the playbook file and the
files it includes.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError, create_model

from fleetctl import yamlload
from fleetctl.tasks import ACTIONS
from fleetctl.tasks.argtypes import ActionArgs, env_mapping, is_template
from fleetctl.errors import PlaybookError
from fleetctl.playbook import templating
from fleetctl.playbook.templating import playbook_error

__all__ = [
    "CONTROL_KEYS",
    "INCLUDE_KEYS",
    "PLAY_KEYS",
    "Playbook",
    "Task",
    "load_playbook",
]

#: Keys of a play mapping.
PLAY_KEYS: tuple[str, ...] = (
    "name", "hosts", "vars", "tasks", "handlers",
    "serial", "max_fail_percentage", "any_errors_fatal", "gather_facts",
)
#: Task keys that are not actions.
CONTROL_KEYS: tuple[str, ...] = (
    "name", "when", "register", "timeout", "retries", "delay",
    "ignore_errors", "tags", "notify", "env", "become",
)
#: Task keys that inline another file's tasks (both static, at load time).
INCLUDE_KEYS: tuple[str, ...] = ("include_tasks", "import_tasks")
_INCLUDE_CONTROLS = frozenset({"name", "when", "tags"})

#: Default ``delay`` between retries, seconds.
DEFAULT_DELAY_S = 5.0

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JINJA_WORDS = frozenset(
    {"true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is", "if", "else"}
)
_MAX_YAML_NODES = 100_000
_MAX_FILE_BYTES = 16 * 1024 * 1024
_MAX_INCLUDE_DEPTH = 32

Path_ = tuple  # a location inside a YAML document: keys and list indices


# --------------------------------------------------------------------------------------------------
# YAML with line numbers (fleetctl.yamlload: duplicate keys, recursive aliases, one-line errors)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Doc:
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


def _load_yaml(path: Path, *, display: str, err_line: int | None = None, err_key: str | None = None,
               err_file: str | None = None) -> _Doc:
    """Read and parse one YAML file. Read errors name ``err_file:err_line`` when given (includes)."""
    where = {"file": err_file or display, "line": err_line, "key": err_key}
    named = "" if where["file"] == display else f": {display}"  # an include names the included file
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
    return _Doc(display, data, text, hashlib.sha256(raw).hexdigest())


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


# --------------------------------------------------------------------------------------------------
# Paths, names and messages
# --------------------------------------------------------------------------------------------------


def _printable(path: Path_) -> bool:
    return all(isinstance(p, (str, int)) for p in path)


def _fmt_path(path: Iterable[Any]) -> str:
    """``("argv", 2)`` -> ``argv[2]``; ``("env", "X")`` -> ``env.X``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _as_written(sub: Path_, action: str, shorthand: str | None) -> Path_:
    """A location inside a task as the user wrote it: ``("debug", "msg")`` -> ``("debug",)``
    when the task said ``debug: text``."""
    sub = tuple(sub)
    if shorthand is not None and len(sub) >= 2 and sub[0] == action and sub[1] == shorthand:
        return (action,) + sub[2:]
    return sub


def _join_key(prefix: str, path: Iterable[Any]) -> str:
    tail = _fmt_path(path)
    if not tail:
        return prefix
    return prefix + (tail if tail.startswith("[") else "." + tail)


def _did_you_mean(word: Any, candidates: Iterable[str]) -> str | None:
    if not isinstance(word, str):
        return None
    found = get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _typename(value: Any) -> str:
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


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _template_paths(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    """Paths of every string holding a template inside a nested value (keys included)."""
    if isinstance(value, str):
        if is_template(value):
            yield path
    elif isinstance(value, Mapping):
        for key, val in value.items():
            if is_template(key):
                yield path + (key,)
            yield from _template_paths(val, path + (key,))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _template_paths(item, path + (i,))


def _strings(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, val in value.items():
            if isinstance(key, str):
                yield path + (key,), key
            yield from _strings(val, path + (key,))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, path + (i,))


def _existing_prefix(raw: Any, loc: tuple) -> Path_:
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


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Task:
    """One validated task (or handler).

    Attributes:
        name: the task's ``name``, or ``None``.
        action: the action key (``"copy"``, ``"build_wheel"``...), a key of ``ACTIONS``.
        args: the action's validated argument model. Templates are kept as written; when a
            template stands where a non-string is expected (``max_jobs: "{{ n }}"``), the model is
            built without validating the remaining fields. Executors use :meth:`resolve_args`.
        raw_args: the arguments as written (after shorthand expansion), for :meth:`resolve_args`.
        when: conditions (bare Jinja expressions), all of which must hold; empty means always.
        register: variable name the result is stored under, or ``None``.
        timeout_s: seconds the action may run (the action's default unless ``timeout`` is set).
        retries: extra attempts after a failure (0: no retry).
        delay_s: seconds between attempts.
        ignore_errors: a failure does not fail the host.
        tags: the task's tags (``always``/``never`` are special, see :meth:`Playbook.select_tags`).
        notify: names of handlers to run when the task reports a change.
        env: extra environment variables for the action's commands (templates unrendered).
        become: run with privilege escalation (parsed only).
        file: the file the task came from (an included file for included tasks).
        line: 1-based line of the task in ``file``.
        label: the task's place for messages: ``tasks[3] (build)`` or ``tasks[3]``.
        index: position of the task in the play's (flattened) task or handler list.
    """

    name: str | None
    action: str
    args: ActionArgs
    raw_args: dict[str, Any]
    when: tuple[str, ...] = ()
    register: str | None = None
    timeout_s: float = 600.0
    retries: int = 0
    delay_s: float = DEFAULT_DELAY_S
    ignore_errors: bool = False
    tags: frozenset[str] = frozenset()
    notify: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    become: bool = False
    file: str = ""
    line: int | None = None
    label: str = ""
    index: int = 0
    _doc: _Doc | None = field(default=None, repr=False, compare=False)
    _path: Path_ = field(default=(), repr=False, compare=False)
    _shorthand: str | None = field(default=None, repr=False, compare=False)

    @property
    def display_name(self) -> str:
        """The name, or ``action`` when the task has none."""
        return self.name or self.action

    def line_of(self, sub: Path_) -> int | None:
        """Line of a location inside the task (``("copy", "dest")``), or the task's own line."""
        if self._doc is None:
            return self.line
        return self._doc.line_of(self._path + _as_written(sub, self.action, self._shorthand))

    def key_of(self, sub: Path_) -> str:
        """The message key of a location inside the task: ``tasks[3] (build).copy.dest``."""
        return _join_key(self.label, _as_written(sub, self.action, self._shorthand))

    def error(self, message: str, sub: Path_ = (), cls: type[PlaybookError] = PlaybookError) -> PlaybookError:
        """A PlaybookError naming this task's file, the line of ``sub`` and its key."""
        return playbook_error(message, file=self.file, line=self.line_of(sub), key=self.key_of(sub), cls=cls)

    def template_variables(self) -> Iterator[tuple[Path_, str]]:
        """(location inside the task, variable name) for every variable its templates use."""
        if self.name is not None:
            for var in sorted(templating.template_variables(self.name)):
                yield ("name",), var
        for i, cond in enumerate(self.when):
            for var in sorted(templating.expression_variables(cond)):
                yield self._when_path(i), var
        for path, text in _strings(self.raw_args):
            for var in sorted(templating.template_variables(text)):
                yield (self.action,) + path, var
        for path, text in _strings(self.env):
            for var in sorted(templating.template_variables(text)):
                yield ("env",) + path, var

    def _when_path(self, i: int) -> Path_:
        if self._doc is not None and self._doc.has(self._path + ("when", i)):
            return ("when", i)
        return ("when",)

    def should_run(self, context: Mapping[str, Any]) -> bool:
        """True when every ``when`` condition holds for the host described by ``context``.

        Raises:
            RenderError: a condition uses an undefined name or fails to evaluate.
        """
        for i, cond in enumerate(self.when):
            try:
                if not templating.evaluate_when(cond, context):
                    return False
            except templating.RenderError as exc:
                raise self.error(exc.message, self._when_path(i), templating.RenderError) from exc
        return True

    def resolve_args(self, context: Mapping[str, Any]) -> ActionArgs:
        """Render the arguments for one host and validate them fully.

        Raises:
            RenderError: a template fails, or its result is not a valid argument (naming the key
                and line).
        """
        try:
            rendered = templating.render(self.raw_args, context)
        except templating.RenderError as exc:
            raise self.error(exc.message, (self.action,) + exc.path, templating.RenderError) from exc
        model = ACTIONS[self.action].args
        try:
            return model.model_validate(rendered)
        except ValidationError as exc:
            sub, message = _validation_message(exc, rendered, self.action, model)
            raise self.error(message, (self.action,) + sub, templating.RenderError) from exc

    def resolve_env(self, context: Mapping[str, Any]) -> dict[str, str]:
        """Render the task's ``env`` for one host; every value becomes a string.

        Raises:
            RenderError: a template fails to render.
        """
        out: dict[str, str] = {}
        for key, value in self.env.items():
            try:
                rendered = templating.render(value, context)
            except templating.RenderError as exc:
                raise self.error(exc.message, ("env", key), templating.RenderError) from exc
            out[key] = rendered if isinstance(rendered, str) else str(rendered)
        return out

    def resolve_name(self, context: Mapping[str, Any]) -> str:
        """The display name rendered for one host (the raw name if rendering fails)."""
        if self.name is None:
            return self.action
        try:
            return str(templating.render_string(self.name, context))
        except templating.RenderError:
            return self.name


@dataclass(frozen=True, eq=False)
class Playbook:
    """A loaded, validated playbook (one play).

    Attributes:
        path: the playbook file.
        name: the play's ``name`` (the file's stem when absent).
        hosts: the default host pattern (``a:b`` joined when given as a list), or ``None``.
        vars: play variables (templates unrendered; see :func:`fleetctl.templating.render_vars`).
        tasks: the tasks in order, includes inlined.
        handlers: the handlers in order (each has a unique name).
        serial: hosts per batch: an int, a ``"25%"`` string, or ``None`` for all at once.
        max_fail_percentage: stop the play when more than this percentage (0-100) of a batch
            failed; ``None`` never stops early.
        any_errors_fatal: one failed host stops the play for all.
        gather_facts: gather facts before the first task.
        sha256: SHA-256 of the playbook file's bytes (hex).
        text: the playbook file's text.
    """

    path: Path
    name: str
    hosts: str | None
    vars: dict[str, Any]
    tasks: list[Task]
    handlers: list[Task]
    serial: int | str | None = None
    max_fail_percentage: float | None = None
    any_errors_fatal: bool = False
    gather_facts: bool = True
    sha256: str = ""
    text: str = field(default="", repr=False)
    _doc: _Doc | None = field(default=None, repr=False, compare=False)
    _root: Path_ = field(default=(), repr=False, compare=False)

    @property
    def playbook_dir(self) -> Path:
        """The folder holding the playbook file (local paths are relative to it)."""
        return self.path.parent

    def local_path(self, path: str) -> Path:
        """A local path from the playbook (``copy.src``, ``script.src``) as an absolute path."""
        p = Path(os.path.expanduser(path))
        return p if p.is_absolute() else (self.playbook_dir / p).absolute()

    def line_of(self, path: Path_) -> int | None:
        """Line of a play-level location such as ``("vars", "src_dir")``."""
        return self._doc.line_of(self._root + tuple(path)) if self._doc else None

    def handler(self, name: str) -> Task:
        """The handler called ``name``.

        Raises:
            KeyError: no handler has that name.
        """
        for h in self.handlers:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def registered_names(self) -> list[str]:
        """Every name a task or handler registers, in order."""
        return [t.register for t in (*self.tasks, *self.handlers) if t.register]

    def select_tags(self, tags: Iterable[str] | None = None, skip_tags: Iterable[str] | None = None) -> list[Task]:
        """The tasks to run for ``--tags``/``--skip-tags``, with Ansible's semantics.

        No tags selected: every task except those tagged ``never``. Tags selected: tasks sharing a
        tag with them, plus tasks tagged ``always``; ``all`` selects every task but ``never`` ones,
        ``tagged`` every tagged task, ``untagged`` every untagged one. Skip tags then remove
        tasks sharing a tag with them (``always`` tasks only when ``always`` or ``all`` is skipped
        explicitly as ``always``); ``tagged``/``untagged`` work there too.
        """
        only = set(tags or ()) or {"all"}
        skip = set(skip_tags or ())
        selected = []
        for task in self.tasks:
            ttags = set(task.tags) or {"untagged"}
            if "always" in ttags:
                run = True
            elif "all" in only and "never" not in ttags:
                run = True
            elif not ttags.isdisjoint(only):
                run = True
            elif "tagged" in only and ttags != {"untagged"} and "never" not in ttags:
                run = True
            else:
                run = False
            if run and skip:
                if "all" in skip:
                    if "always" not in ttags or "always" in skip:
                        run = False
                elif not ttags.isdisjoint(skip):
                    run = False
                elif "tagged" in skip and ttags != {"untagged"}:
                    run = False
            if run:
                selected.append(task)
        return selected

    def check_undefined(self, known_names: Iterable[str] = ()) -> None:
        """Shortcut for :func:`fleetctl.templating.check_undefined` on this playbook."""
        templating.check_undefined(self, known_names)


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------


def load_playbook(path: str | os.PathLike[str], *, known_names: Iterable[str] | None = None) -> Playbook:
    """Load and validate a playbook file.

    Args:
        path: the playbook YAML file.
        known_names: when given, also run the static undefined-variable check with these names
            known besides the standard ones (pass the inventory vars of the selected hosts).

    Returns:
        The validated :class:`Playbook`.

    Raises:
        PlaybookError: anything wrong with the file, as one line naming file, line, task and key.
    """
    path = Path(path)
    display = str(path)
    doc = _load_yaml(path, display=display)
    playbook = _Parser(doc, path).parse()
    if known_names is not None:
        templating.check_undefined(playbook, known_names)
    return playbook


class _Parser:
    def __init__(self, doc: _Doc, path: Path) -> None:
        self.doc = doc
        self.path = path
        self.root: Path_ = ()

    def fail(self, message: str, path: Path_, *, key: str | None = None, doc: _Doc | None = None) -> PlaybookError:
        doc = doc or self.doc
        return playbook_error(message, file=doc.file, line=doc.line_of(path), key=key)

    def play_fail(self, message: str, sub: Path_) -> PlaybookError:
        return self.fail(message, self.root + tuple(sub), key=_fmt_path(sub) or None)

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
                f"a playbook must be a mapping with name, hosts, vars, tasks; got a {_typename(data)}",
                self.root,
            )
        for key in data:
            if key not in PLAY_KEYS:
                hint = _did_you_mean(key, PLAY_KEYS)
                extra = f" (did you mean '{hint}'?)" if hint else f" (play keys: {', '.join(PLAY_KEYS)})"
                raise self.fail(f"unknown play key{extra}", self.root + (key,), key=str(key))

        name = data.get("name")
        if name is None:
            name = self.path.stem
        elif not isinstance(name, str):
            raise self.play_fail(f"must be a string, got a {_typename(name)}", ("name",))

        hosts = self._hosts(data.get("hosts"))
        variables = self._vars(data.get("vars"))
        serial = self._serial(data.get("serial"))
        mfp = data.get("max_fail_percentage")
        if mfp is not None:
            if isinstance(mfp, bool) or not isinstance(mfp, (int, float)) or not (0 <= mfp <= 100):
                raise self.play_fail(f"must be a number from 0 to 100, got {_short(mfp)}", ("max_fail_percentage",))
            mfp = float(mfp)
        any_fatal = self._bool(data.get("any_errors_fatal", False), ("any_errors_fatal",))
        gather = self._bool(data.get("gather_facts", True), ("gather_facts",))

        handlers = self._task_list(data.get("handlers"), self.root + ("handlers",), "handlers", self.doc,
                                   stack=(), outer=None)
        names: dict[str, Task] = {}
        for h in handlers:
            if not h.name:
                raise h.error("a handler needs a name (tasks notify it by name)")
            if h.name in names:
                raise h.error(f"duplicate handler name '{h.name}'", ("name",))
            names[h.name] = h
        tasks = self._task_list(data.get("tasks"), self.root + ("tasks",), "tasks", self.doc,
                                stack=(os.path.realpath(self.path),), outer=None)
        for task in (*tasks, *handlers):
            for i, target in enumerate(task.notify):
                if target not in names:
                    hint = _did_you_mean(target, names)
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
            raise self.play_fail(f"must be true or false, got {_short(value)}", sub)
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
        raise self.play_fail(f"must be a positive int or a percentage like '25%', got {_short(value)}", ("serial",))

    def _vars(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.play_fail(f"must be a mapping, got a {_typename(value)}", ("vars",))
        for key, val in value.items():
            sub = ("vars", key)
            if not isinstance(key, str) or not _IDENT.match(key) or key in _JINJA_WORDS:
                raise self.fail(
                    f"invalid variable name {_short(key)} (letters, digits, _)", self.root + sub,
                    key="vars",
                )
            if key in templating.RESERVED_NAMES:
                raise self.play_fail(f"'{key}' is set by fleetctl and cannot be a play var", sub)
            for path, text in _strings(val):
                try:
                    templating.check_template(text)
                except templating.RenderError as exc:
                    raise self.play_fail(exc.message, sub + path) from None
        return dict(value)

    # -- task lists ----------------------------------------------------------------------------

    def _task_list(self, value: Any, path: Path_, section: str, doc: _Doc, *, stack: tuple[str, ...],
                   outer: tuple[tuple[str, ...], frozenset[str]] | None) -> list[Task]:
        if value is None:
            return []
        if not isinstance(value, list):
            key = _fmt_path(path[len(self.root):]) if doc is self.doc else None
            raise self.fail(f"must be a list of tasks, got a {_typename(value)}", path, key=key, doc=doc)
        out: list[Task] = []
        for i, item in enumerate(value):
            label = f"{section}[{i}]"
            out.extend(self._task(item, path + (i,), label, section, doc, stack=stack, outer=outer))
        return out

    def _task(self, item: Any, path: Path_, label: str, section: str, doc: _Doc, *,
              stack: tuple[str, ...], outer: tuple[tuple[str, ...], frozenset[str]] | None) -> list[Task]:
        def fail(message: str, sub: Path_ = ()) -> PlaybookError:
            return playbook_error(message, file=doc.file, line=doc.line_of(path + tuple(sub)),
                                 key=_join_key(label, sub))

        if not isinstance(item, Mapping):
            raise fail(f"a task must be a mapping, got a {_typename(item)}")
        for key in item:
            if not isinstance(key, str):
                raise fail(f"task keys must be strings, got {_short(key)}", (key,))

        name = item.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise fail(f"must be a string, got a {_typename(name)}", ("name",))
            if not name.strip():
                name = None
            else:
                label = f"{label} ({name})"
                try:
                    templating.check_template(name)
                except templating.RenderError as exc:
                    raise fail(exc.message, ("name",)) from None

        actions: list[str] = []
        for key in item:
            if key in CONTROL_KEYS:
                continue
            if key in ACTIONS or key in INCLUDE_KEYS:
                if actions:
                    raise fail(f"two actions in one task: '{actions[0]}' and '{key}' (a task has exactly one)", (key,))
                actions.append(key)
                continue
            hint = _did_you_mean(key, (*ACTIONS, *CONTROL_KEYS, *INCLUDE_KEYS))
            if hint in CONTROL_KEYS:
                raise fail(f"unknown task key (did you mean '{hint}'?)", (key,))
            if hint:
                raise fail(f"unknown action '{key}' (did you mean '{hint}'?)", (key,))
            has_action = any(k in ACTIONS or k in INCLUDE_KEYS for k in item)
            if has_action:
                raise fail(f"unknown task key (task keys: {', '.join(CONTROL_KEYS)})", (key,))
            raise fail(f"unknown action '{key}' (actions: {', '.join(ACTIONS)})", (key,))
        if not actions:
            raise fail(f"the task has no action (one of: {', '.join(ACTIONS)})")
        action = actions[0]

        when = self._when(item.get("when"), fail) if "when" in item else ()
        tags = self._tags(item.get("tags"), fail) if "tags" in item else frozenset()
        if outer is not None:
            when = outer[0] + when
            tags = outer[1] | tags

        if action in INCLUDE_KEYS:
            if section == "handlers":
                raise fail(f"{action} is not supported in handlers", (action,))
            for key in item:
                if key in CONTROL_KEYS and key not in _INCLUDE_CONTROLS:
                    raise fail(f"'{key}' cannot be used with {action} (only name, when, tags)", (key,))
            return self._include(item[action], path, label, action, doc, fail, stack=stack, outer=(when, tags))

        spec = ACTIONS[action]
        raw = self._shorthand(action, item[action], fail)
        # ``debug: text`` means ``debug: {msg: text}``: errors name the key as written.
        shorthand = next(iter(raw)) if raw and raw is not item[action] else None

        def args_fail(message: str, sub: Path_ = ()) -> PlaybookError:
            return fail(message, _as_written(sub, action, shorthand))

        args = self._validate_args(action, raw, args_fail)

        register = item.get("register")
        if "register" in item:
            if not isinstance(register, str) or not _IDENT.match(register) or register in _JINJA_WORDS:
                raise fail(f"must be a variable name (letters, digits, _), got {_short(register)}", ("register",))
            if register in templating.RESERVED_NAMES:
                raise fail(f"'{register}' is set by fleetctl and cannot be registered", ("register",))

        timeout_s = spec.timeout_s
        if "timeout" in item:
            timeout_s = self._number(item["timeout"], fail, ("timeout",), positive=True)
        retries = 0
        if "retries" in item:
            retries = item["retries"]
            if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
                raise fail(f"must be an int >= 0, got {_short(retries)}", ("retries",))
        delay_s = DEFAULT_DELAY_S
        if "delay" in item:
            delay_s = self._number(item["delay"], fail, ("delay",), positive=False)
        ignore_errors = self._task_bool(item, "ignore_errors", fail)
        become = self._task_bool(item, "become", fail)
        notify = self._notify(item.get("notify"), fail) if "notify" in item else ()

        env: dict[str, str] = {}
        if "env" in item:
            if not ACTIONS[action].runs_commands:
                raise fail(f"action '{action}' runs no command, so it takes no env", ("env",))
            try:
                checked = env_mapping(item["env"])
            except ValueError as exc:
                raise fail(str(exc), ("env",)) from None
            if not isinstance(checked, dict):
                raise fail(f"must be a mapping of NAME: value, got a {_typename(checked)}", ("env",))
            env = checked  # type: ignore[assignment]
            for key, text in env.items():
                try:
                    templating.check_template(text)
                except templating.RenderError as exc:
                    raise fail(exc.message, ("env", key)) from None

        task = Task(
            name=name, action=action, args=args, raw_args=raw, when=when, register=register,
            timeout_s=timeout_s, retries=retries, delay_s=delay_s, ignore_errors=ignore_errors,
            tags=tags, notify=notify, env=env, become=become, file=doc.file, line=doc.line_of(path),
            label=label, _doc=doc, _path=path, _shorthand=shorthand,
        )
        return [task]

    def _include(self, value: Any, path: Path_, label: str, action: str, doc: _Doc, fail, *,
                 stack: tuple[str, ...], outer: tuple[tuple[str, ...], frozenset[str]]) -> list[Task]:
        if not isinstance(value, str) or not value.strip():
            raise fail("must be a file path", (action,))
        if is_template(value):
            raise fail("must be a static file path (templates are not allowed here)", (action,))
        if len(stack) >= _MAX_INCLUDE_DEPTH:
            raise fail(f"includes nested deeper than {_MAX_INCLUDE_DEPTH}", (action,))
        base = Path(doc.file).parent
        target = Path(os.path.expanduser(value.strip()))
        target = target if target.is_absolute() else base / target
        real = os.path.realpath(target)
        if real in stack:
            chain = " -> ".join(os.path.basename(p) for p in (*stack, real))
            raise fail(f"{target} includes itself ({chain})", (action,))
        sub_doc = _load_yaml(target, display=os.path.normpath(target), err_file=doc.file,
                             err_line=doc.line_of(path + (action,)), err_key=_join_key(label, (action,)))
        data = sub_doc.data
        if data is not None and not isinstance(data, list):
            raise playbook_error(f"an included file must hold a list of tasks, got a {_typename(data)}",
                                file=sub_doc.file, line=1)
        return self._task_list(data, (), "tasks", sub_doc, stack=(*stack, real), outer=outer)

    # -- controls ------------------------------------------------------------------------------

    @staticmethod
    def _number(value: Any, fail, sub: Path_, *, positive: bool) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (value <= 0 if positive else value < 0):
            bound = "> 0" if positive else ">= 0"
            raise fail(f"must be a number of seconds {bound}, got {_short(value)}", sub)
        return float(value)

    @staticmethod
    def _task_bool(item: Mapping, key: str, fail) -> bool:
        if key not in item:
            return False
        value = item[key]
        if not isinstance(value, bool):
            raise fail(f"must be true or false, got {_short(value)}", (key,))
        return value

    @staticmethod
    def _when(value: Any, fail) -> tuple[str, ...]:
        items = value if isinstance(value, list) else [value]
        subs = [("when", i) for i in range(len(items))] if isinstance(value, list) else [("when",)]
        out: list[str] = []
        for cond, sub in zip(items, subs):
            if isinstance(cond, bool):
                out.append("true" if cond else "false")
                continue
            if not isinstance(cond, str):
                raise fail(f"must be an expression string or a list of them, got {_short(cond)}", sub)
            try:
                templating.check_expression(cond)
            except templating.RenderError as exc:
                raise fail(exc.message, sub) from None
            out.append(cond.strip())
        return tuple(out)

    @staticmethod
    def _tags(value: Any, fail) -> frozenset[str]:
        items: list[Any]
        if isinstance(value, str):
            items = value.split(",")
        elif isinstance(value, list):
            items = value
        else:
            raise fail(f"must be a tag or a list of tags, got {_short(value)}", ("tags",))
        out = set()
        for i, tag in enumerate(items):
            sub = ("tags", i) if isinstance(value, list) else ("tags",)
            if isinstance(tag, int) and not isinstance(tag, bool):
                tag = str(tag)
            if not isinstance(tag, str) or not tag.strip():
                raise fail(f"tags must be non-empty strings, got {_short(tag)}", sub)
            out.add(tag.strip())
        return frozenset(out)

    @staticmethod
    def _notify(value: Any, fail) -> tuple[str, ...]:
        items = value if isinstance(value, list) else [value]
        out = []
        for i, target in enumerate(items):
            sub = ("notify", i) if isinstance(value, list) else ("notify",)
            if not isinstance(target, str) or not target.strip():
                raise fail(f"must name a handler, got {_short(target)}", sub)
            out.append(target)
        return tuple(out)

    # -- arguments -----------------------------------------------------------------------------

    @staticmethod
    def _shorthand(action: str, value: Any, fail) -> dict[str, Any]:
        if value is None:
            return {}
        if isinstance(value, Mapping):
            for key in value:
                if not isinstance(key, str):
                    raise fail(f"argument names must be strings, got {_short(key)}", (action, key))
            return value  # type: ignore[return-value]
        if action == "command":
            if isinstance(value, list):
                return {"argv": value}
            raise fail(
                "command takes argv as a list, not a string (write argv: [prog, arg, ...], "
                "or use the shell action)",
                (action,),
            )
        if isinstance(value, str):
            if action in ("fail", "debug"):
                return {"msg": value}
            if action == "shell":
                return {"cmd": value}
        raise fail(f"arguments of '{action}' must be a mapping, got a {_typename(value)}", (action,))

    @staticmethod
    def _validate_args(action: str, raw: dict[str, Any], fail) -> ActionArgs:
        model = ACTIONS[action].args
        for path, text in _strings(raw):
            try:
                templating.check_template(text)
            except templating.RenderError as exc:
                raise fail(exc.message, (action,) + path) from None
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            templated = set(_template_paths(raw))
            errors = [
                e for e in exc.errors()
                if not any(tuple(e["loc"][:n]) in templated for n in range(1, len(e["loc"]) + 1))
            ]
            if errors:
                # An unknown key first: a misspelt argument also makes the real one "missing".
                errors.sort(key=lambda e: e["type"] != "extra_forbidden")
                sub, message = _validation_message(exc, raw, action, model, errors[0])
                raise fail(message, (action,) + sub) from None
            fields = frozenset(e["loc"][0] for e in exc.errors() if e["loc"])
        # Every error stands where a template will be rendered later: validate the other fields
        # fully, keep the templated ones as written.
        try:
            partial = _templated_model(model, fields).model_validate(raw)
        except ValidationError as exc2:  # pragma: no cover - the same errors were filtered above
            sub, message = _validation_message(exc2, raw, action, model)
            raise fail(message, (action,) + sub) from None
        return model.model_construct(_fields_set=partial.model_fields_set, **dict(partial))


@lru_cache(maxsize=256)
def _templated_model(model: type[ActionArgs], fields: frozenset[str]) -> type[ActionArgs]:
    """``model`` with ``fields`` accepting anything (they hold templates rendered at run time)."""
    overrides: dict[str, Any] = {f: (Any, None) for f in fields if f in model.model_fields}
    return create_model(f"{model.__name__}Templated", __base__=model, **overrides)


def _validation_message(exc: ValidationError, raw: Mapping[str, Any], action: str, model: type[ActionArgs],
                        err: Mapping[str, Any] | None = None) -> tuple[Path_, str]:
    """(location inside the arguments, one-line message) for a pydantic error."""
    err = err or exc.errors()[0]
    loc = tuple(err["loc"])
    kind = err["type"]
    fields = list(model.model_fields)
    if kind == "missing" and len(loc) == 1:
        return (), f"missing required argument '{loc[0]}'"
    if kind == "extra_forbidden" and len(loc) == 1:
        hint = _did_you_mean(loc[0], fields)
        extra = f" (did you mean '{hint}'?)" if hint else f" ({action} takes: {', '.join(fields)})"
        return loc, f"unknown argument{extra}"
    sub = _existing_prefix(raw, loc)
    msg = str(err.get("msg", "invalid value"))
    if kind == "value_error" and msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    else:
        msg = msg[:1].lower() + msg[1:]
        if "input" in err and kind != "missing":
            msg += f", got {_short(err['input'])}"
    return sub, msg


def _reindex(task: Task, index: int) -> Task:
    from dataclasses import replace

    return replace(task, index=index)
