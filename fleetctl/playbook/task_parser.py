"""Task lists of a playbook: every task (or handler) validated into a :class:`~.model.Task` (one action,
its arguments, its controls), ``include_tasks``/``import_tasks`` inlined at load time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError, create_model

from fleetctl.errors import PlaybookError
from fleetctl.tasks import ACTIONS
from fleetctl.tasks.argtypes import ActionArgs, env_mapping, is_template

from . import templating, variables
from .messages import (
    Path_, as_written, did_you_mean, fmt_path, join_key, playbook_error, short, strings, template_paths, typename,
    validation_message,
)
from .model import CONTROL_KEYS, DEFAULT_DELAY_S, INCLUDE_KEYS, Task
from .variables import IDENT, JINJA_WORDS
from .yamldoc import YamlDoc, load_doc

__all__ = ["TaskParser", "args_problem"]

_INCLUDE_CONTROLS = frozenset({"name", "when", "tags"})
_MAX_INCLUDE_DEPTH = 32


class TaskParser:
    """Parses the task lists of one playbook file ``doc`` whose play is at ``root`` (``()``, or ``(0,)``
    for the list form); included files are loaded as they are met."""

    def __init__(self, doc: YamlDoc, root: Path_) -> None:
        self.doc = doc
        self.root = root

    # -- task lists ----------------------------------------------------------------------------

    def task_list(self, value: Any, path: Path_, section: str, doc: YamlDoc, *, stack: tuple[str, ...],
                  outer: tuple[tuple[str, ...], frozenset[str]] | None) -> list[Task]:
        if value is None:
            return []
        if not isinstance(value, list):
            key = fmt_path(path[len(self.root):]) if doc is self.doc else None
            raise playbook_error(f"must be a list of tasks, got a {typename(value)}", file=doc.file,
                                 line=doc.line_of(path), key=key)
        out: list[Task] = []
        for i, item in enumerate(value):
            label = f"{section}[{i}]"
            out.extend(self._task(item, path + (i,), label, section, doc, stack=stack, outer=outer))
        return out

    def _task(self, item: Any, path: Path_, label: str, section: str, doc: YamlDoc, *,
              stack: tuple[str, ...], outer: tuple[tuple[str, ...], frozenset[str]] | None) -> list[Task]:
        def fail(message: str, sub: Path_ = ()) -> PlaybookError:
            return playbook_error(message, file=doc.file, line=doc.line_of(path + tuple(sub)),
                                 key=join_key(label, sub))

        if not isinstance(item, Mapping):
            raise fail(f"a task must be a mapping, got a {typename(item)}")
        for key in item:
            if not isinstance(key, str):
                raise fail(f"task keys must be strings, got {short(key)}", (key,))

        name = item.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise fail(f"must be a string, got a {typename(name)}", ("name",))
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
            hint = did_you_mean(key, (*ACTIONS, *CONTROL_KEYS, *INCLUDE_KEYS))
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
            return fail(message, as_written(sub, action, shorthand))

        args = self._validate_args(action, raw, args_fail)

        register = item.get("register")
        if "register" in item:
            if not isinstance(register, str) or not IDENT.match(register) or register in JINJA_WORDS:
                raise fail(f"must be a variable name (letters, digits, _), got {short(register)}", ("register",))
            if register in variables.RESERVED_NAMES:
                raise fail(f"'{register}' is set by fleetctl and cannot be registered", ("register",))

        timeout_s = spec.timeout_s
        if "timeout" in item:
            timeout_s = self._number(item["timeout"], fail, ("timeout",), positive=True)
        retries = 0
        if "retries" in item:
            retries = item["retries"]
            if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
                raise fail(f"must be an int >= 0, got {short(retries)}", ("retries",))
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
                raise fail(f"must be a mapping of NAME: value, got a {typename(checked)}", ("env",))
            env = checked  # type: ignore[assignment]
            for key, text in env.items():
                if "\x00" in text:
                    raise fail(nul_problem(text), ("env", key))
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

    def _include(self, value: Any, path: Path_, label: str, action: str, doc: YamlDoc, fail, *,
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
        sub_doc = load_doc(target, display=os.path.normpath(target), err_file=doc.file,
                           err_line=doc.line_of(path + (action,)), err_key=join_key(label, (action,)))
        data = sub_doc.data
        if data is not None and not isinstance(data, list):
            raise playbook_error(f"an included file must hold a list of tasks, got a {typename(data)}",
                                file=sub_doc.file, line=1)
        return self.task_list(data, (), "tasks", sub_doc, stack=(*stack, real), outer=outer)

    # -- controls ------------------------------------------------------------------------------

    @staticmethod
    def _number(value: Any, fail, sub: Path_, *, positive: bool) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (value <= 0 if positive else value < 0):
            bound = "> 0" if positive else ">= 0"
            raise fail(f"must be a number of seconds {bound}, got {short(value)}", sub)
        return float(value)

    @staticmethod
    def _task_bool(item: Mapping, key: str, fail) -> bool:
        if key not in item:
            return False
        value = item[key]
        if not isinstance(value, bool):
            raise fail(f"must be true or false, got {short(value)}", (key,))
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
                raise fail(f"must be an expression string or a list of them, got {short(cond)}", sub)
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
            raise fail(f"must be a tag or a list of tags, got {short(value)}", ("tags",))
        out = set()
        for i, tag in enumerate(items):
            sub = ("tags", i) if isinstance(value, list) else ("tags",)
            if isinstance(tag, int) and not isinstance(tag, bool):
                tag = str(tag)
            if not isinstance(tag, str) or not tag.strip():
                raise fail(f"tags must be non-empty strings, got {short(tag)}", sub)
            out.add(tag.strip())
        return frozenset(out)

    @staticmethod
    def _notify(value: Any, fail) -> tuple[str, ...]:
        items = value if isinstance(value, list) else [value]
        out = []
        for i, target in enumerate(items):
            sub = ("notify", i) if isinstance(value, list) else ("notify",)
            if not isinstance(target, str) or not target.strip():
                raise fail(f"must name a handler, got {short(target)}", sub)
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
                    raise fail(f"argument names must be strings, got {short(key)}", (action, key))
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
        raise fail(f"arguments of '{action}' must be a mapping, got a {typename(value)}", (action,))

    @staticmethod
    def _validate_args(action: str, raw: dict[str, Any], fail) -> ActionArgs:
        model = ACTIONS[action].args
        for path, text in strings(raw):
            if "\x00" in text:  # refused here, at its line, not by the connection when the task runs
                raise fail(nul_problem(text), (action,) + path)
            try:
                templating.check_template(text)
            except templating.RenderError as exc:
                raise fail(exc.message, (action,) + path) from None
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            templated = set(template_paths(raw))
            errors = [
                e for e in exc.errors()
                if not any(tuple(e["loc"][:n]) in templated for n in range(1, len(e["loc"]) + 1))
            ]
            if errors:
                # An unknown key first: a misspelt argument also makes the real one "missing".
                errors.sort(key=lambda e: e["type"] != "extra_forbidden")
                sub, message = validation_message(exc, raw, action, model, errors[0])
                raise fail(message, (action,) + sub) from None
            fields = frozenset(e["loc"][0] for e in exc.errors() if e["loc"])
        # Every error stands where a template will be rendered later: validate the other fields
        # fully, keep the templated ones as written.
        try:
            partial = _templated_model(model, fields).model_validate(raw)
        except ValidationError as exc2:  # pragma: no cover - the same errors were filtered above
            sub, message = validation_message(exc2, raw, action, model)
            raise fail(message, (action,) + sub) from None
        return model.model_construct(_fields_set=partial.model_fields_set, **dict(partial))


def nul_problem(text: str) -> str:
    """Why a task's string holding a NUL byte is refused when the playbook loads: every string of
    a task's arguments or env ends in an argv, an environment or a path, and execve(2) and path
    lookup end each at the first NUL (the check every connection makes again before it runs
    anything: :func:`fleetctl.connection.command.check_argv`)."""
    return (f"{text!r} holds a NUL byte, which no program, environment variable or path can be given "
            f"(execve ends a string at NUL): remove it")


def args_problem(action: str, raw: dict[str, Any]) -> str | None:
    """The load-time check of an action's arguments as written (templates left for later, the
    other values through the argument model's validators): the one-line fault, or ``None``."""
    try:
        TaskParser._validate_args(action, raw, lambda message, sub=(): PlaybookError(message))
    except PlaybookError as exc:
        return exc.message
    return None


@lru_cache(maxsize=256)
def _templated_model(model: type[ActionArgs], fields: frozenset[str]) -> type[ActionArgs]:
    """``model`` with ``fields`` accepting anything (they hold templates rendered at run time)."""
    overrides: dict[str, Any] = {f: (Any, None) for f in fields if f in model.model_fields}
    return create_model(f"{model.__name__}Templated", __base__=model, **overrides)
