"""Checks of a play against its extra vars and the controller's files, made before any host is
reached: what is the same on every host is refused once, in one line, not per host after
connecting (:func:`fleetctl.api.play.prepare_play` and ``fleetctl schedule`` call them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..tasks.base import controller_path
from ..util.didyoumean import close_matches


def extra_var_warnings(playbook: Any, names: Iterable[str]) -> list[str]:
    """One warning line for each extra var (``-e``) that nothing reads, naming the closest name
    that is read (difflib), e.g. ``-e arhcs: ...; did you mean archs?``.

    Read are: the names the play's templates read (guarded uses such as ``archs | default(none)``
    included) and its vars (:meth:`~fleetctl.playbook.model.Playbook.referenced_names`),
    fleetctl's own host vars (:data:`fleetctl.inventory.own_vars.OWN_VARS`: ``venv``,
    ``workdir``..., which ``-e`` sets for every host) and Ansible's names. Ansible's extra vars are
    free-form, so an unread one is a warning, never a refusal: a var only an inventory script, a
    template outside the play or the user's own tooling reads is left alone, but a misspelt one
    (``-e arhcs=9.0a``, which builds for the host's own SM as if it were not given) is named.
    """
    from ..inventory.ansible_names import ANSIBLE_NAMES, is_ansible_name
    from ..inventory.own_vars import own_var_names
    from ..playbook.variables import RESERVED_NAMES

    names = list(names)
    if not names:
        return []
    own = own_var_names()
    read = playbook.referenced_names() | own
    candidates = sorted(read - RESERVED_NAMES)
    out = []
    for name in names:
        if name in read or is_ansible_name(name):
            continue
        close = close_matches(name, sorted(ANSIBLE_NAMES) if name.startswith("ansible_") else candidates,
                                  n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "it is ignored"
        out.append(f"-e {name}: no task or template of {Path(str(playbook.path)).name} reads it, nor does "
                   f"fleetctl; {hint}")
    return out


def check_extra_var_args(playbook: Any, tasks: Iterable[Any], extra_vars: Mapping[str, Any]) -> None:
    """An extra var (``-e``) is the same on every host, so a task argument that only extra vars
    feed (``archs: "{{ archs | default(none) }}"`` with ``-e archs=sm_90a``) is checked now, by the
    argument's own validator (the playbook parser's), not on every host after connecting.

    Arguments that read anything else (facts, host vars), names a task registers (they win over
    ``-e``), and secret values (the message would show them) are left to the run.

    Raises:
        InputError: ``-e NAME: <the argument's fault>``.
    """
    from ..playbook import templating
    from ..playbook.task_parser import args_problem
    from ..playbook.variables import referenced_variables
    from ..util.redact import unwrap

    values, secrets = unwrap(dict(extra_vars))
    registered = set(playbook.registered_names)
    given = {k: v for k, v in values.items() if k not in registered and str(v) not in secrets}
    for task in tasks:
        for key, raw in task.raw_args.items():
            used = referenced_variables(raw)
            if not used or not used <= given.keys():
                continue
            try:
                value = templating.render(raw, given)
            except templating.RenderError:
                continue  # e.g. a filter that fails on this value: the run names it with the task
            problem = args_problem(task.action, {**task.raw_args, key: value})
            if problem is None:
                continue
            names = sorted(used)
            if names == [key] and problem.startswith(f"{key} "):
                problem = problem[len(key) + 1:]  # "-e archs: must look like...", not "archs: archs must..."
            raise InputError(f"-e {', '.join(names)}: {problem}")


def check_local_sources(playbook: Any, tasks: Iterable[Any]) -> None:
    """A selected, unconditional ``copy``/``script`` task whose ``src`` (on the controller: absolute,
    or relative to the playbook's folder; no template in it) does not exist is refused now, before
    any host runs a task (new-user trial: a `command` task ran on every host, then every host
    failed on the missing file). Tasks with ``when`` or a templated ``src`` are left to the run,
    as Ansible leaves them: the source may be meant for other hosts or made by an earlier task.

    Raises:
        PlaybookError: one line naming the playbook file, the line, the task and ``src``.
    """
    for task in tasks:
        src = task.raw_args.get("src") if task.action in ("copy", "script") else None
        if not isinstance(src, str) or "{{" in src or "{%" in src or task.when:
            continue
        path = controller_path(Path(playbook.path).resolve().parent, src)
        if not path.exists():
            raise task.error(f"local source {path} does not exist (src is on the controller: absolute, or "
                             "relative to the playbook's folder)", (task.action, "src"))
