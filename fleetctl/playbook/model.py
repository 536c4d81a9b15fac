"""The playbook model: :class:`Task` and :class:`Playbook` (one play), the keys they are written with,
and the static check that every variable their templates use will be defined (:func:`check_undefined`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleetctl.errors import PlaybookError
from fleetctl.tasks import ACTIONS
from fleetctl.tasks.argtypes import ActionArgs

from . import templating, variables
from .messages import Path_, as_written, join_key, playbook_error, strings, validation_message
from .yamldoc import YamlDoc
from ..util.didyoumean import close_matches

__all__ = [
    "CONTROL_KEYS",
    "DEFAULT_DELAY_S",
    "INCLUDE_KEYS",
    "PLAY_KEYS",
    "Playbook",
    "Task",
    "check_undefined",
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

#: Default ``delay`` between retries, seconds.
DEFAULT_DELAY_S = 5.0


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
    _doc: YamlDoc | None = field(default=None, repr=False, compare=False)
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
        return self._doc.line_of(self._path + as_written(sub, self.action, self._shorthand))

    def key_of(self, sub: Path_) -> str:
        """The message key of a location inside the task: ``tasks[3] (build).copy.dest``."""
        return join_key(self.label, as_written(sub, self.action, self._shorthand))

    def error(self, message: str, sub: Path_ = (), cls: type[PlaybookError] = PlaybookError) -> PlaybookError:
        """A PlaybookError naming this task's file, the line of ``sub`` and its key."""
        return playbook_error(message, file=self.file, line=self.line_of(sub), key=self.key_of(sub), cls=cls)

    def template_variables(self) -> Iterator[tuple[Path_, str]]:
        """(location inside the task, variable name) for every variable its templates use."""
        if self.name is not None:
            for var in sorted(variables.template_variables(self.name)):
                yield ("name",), var
        for i, cond in enumerate(self.when):
            for var in sorted(variables.expression_variables(cond)):
                yield self._when_path(i), var
        for path, text in strings(self.raw_args):
            for var in sorted(variables.template_variables(text)):
                yield (self.action,) + path, var
        for path, text in strings(self.env):
            for var in sorted(variables.template_variables(text)):
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
            sub, message = validation_message(exc, rendered, self.action, model)
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
        vars: play variables (templates unrendered; see :func:`fleetctl.playbook.variables.render_vars`).
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
    _doc: YamlDoc | None = field(default=None, repr=False, compare=False)
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

    def referenced_names(self) -> set[str]:
        """The names this play reads: its vars' names, and every name its templates read (task
        names, ``when``, arguments, ``env``, play vars; guarded uses such as ``archs | default(none)``
        included, see :func:`~.variables.referenced_variables`): what an extra var (``-e``) can set."""
        names = set(self.vars) | variables.referenced_variables(self.vars)
        for task in (*self.tasks, *self.handlers):
            names |= variables.referenced_variables([task.name or "", task.raw_args, task.env])
            names |= variables.referenced_variables(list(task.when), expression=True)
        return names

    def check_undefined(self, known_names: Iterable[str] = ()) -> None:
        """Shortcut for :func:`check_undefined` on this playbook."""
        check_undefined(self, known_names)


#: Ansible's magic variables and the fleetctl names that hold the same thing.
_ANSIBLE_NAMES = {
    "inventory_hostname": "host",
    "inventory_hostname_short": "host",
    "ansible_facts": "facts",
    "ansible_python_interpreter": "python",
}


def _undefined_message(name: str, known: Iterable[str]) -> str:
    known = set(known)
    if _ANSIBLE_NAMES.get(name) in known:
        return f"undefined variable '{name}' (fleetctl calls it '{_ANSIBLE_NAMES[name]}')"
    close = close_matches(name, sorted(known), n=1, cutoff=0.75)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"undefined variable '{name}'{hint}"


def check_undefined(playbook: Playbook, known_names: Iterable[str] = ()) -> None:
    """Statically check that every variable a playbook's templates use will be defined.

    Known names are: ``known_names`` (pass the inventory vars defined for every selected host),
    :data:`~.variables.STANDARD_NAMES`, the play's ``vars``, Jinja's builtins, and names registered by
    *earlier* tasks (handlers see every task's registered names and earlier handlers' ones).
    Names used only as ``x is defined`` / ``x | default(...)`` are accepted. Play vars that refer
    to each other in a cycle are an error too.

    Raises:
        PlaybookError: the first undefined name, naming the file, line, task and key.
    """
    outer = set(known_names) | variables.STANDARD_NAMES | templating.BUILTIN_NAMES
    base = outer | set(playbook.vars)
    # Play vars: each may use any known name, including other play vars (no cycles).
    deps: dict[str, set[str]] = {}
    for var, value in playbook.vars.items():
        deps[var] = set()
        for path, name in variables.value_variables(value, ("vars", var)):
            if name not in base:
                raise playbook_error(
                    _undefined_message(name, base),
                    file=str(playbook.path),
                    line=playbook.line_of(path),
                    key=".".join(str(p) for p in path),
                )
            if name in playbook.vars and not (name == var and name in outer):
                deps[var].add(name)  # using its own name means the inventory var it overrides
    cycle = variables.find_cycle(deps)
    if cycle:
        raise playbook_error(
            "play vars refer to each other in a cycle: " + " -> ".join(cycle),
            file=str(playbook.path),
            line=playbook.line_of(("vars", cycle[0])),
            key=f"vars.{cycle[0]}",
        )

    known = set(base)
    for task in list(playbook.tasks) + list(playbook.handlers):
        for sub, name in task.template_variables():
            if name not in known:
                raise playbook_error(
                    _undefined_message(name, known),
                    file=task.file,
                    line=task.line_of(sub),
                    key=task.key_of(sub),
                )
        if task.register:
            known.add(task.register)
